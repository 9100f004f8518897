// SPCCL_* for both interposers. libspccl.so exports only the public C API, so
// each interposer compiles in spccl's own parameter table (src/params.cc,
// interpose/CMakeLists.txt) and reads every variable through it: a spelling
// the library accepts (SPCCL_MIN_COMPRESS_COUNT=1e5, SPCCL_DISABLE=1.0,
// SPCCL_DEBUG=info) means the same to the interposer, and a value the
// library rejects is rejected here too.
#pragma once

#include <cstdlib>
#include <cstring>

#include "src/params.h"

namespace spccl::interpose {

// SPCCL_DEBUG alone (WARN if it is invalid): an interposer logs as asked even
// when another variable is invalid and it passes every call through.
inline LogLevel debugLevelFromEnv() {
  Params p;
  const Status st = loadParams(
      [](const char* name) -> const char* {
        return std::strcmp(name, "SPCCL_DEBUG") == 0 ? std::getenv(name) : nullptr;
      },
      &p);
  return st.isOk() ? p.debug : LogLevel::kWarn;
}

// The log level after the full parse `env` filled `p`: its SPCCL_DEBUG, or
// SPCCL_DEBUG read alone when another variable made the parse fail.
inline LogLevel debugLevel(const Status& env, const Params& p) { return env.isOk() ? p.debug : debugLevelFromEnv(); }

}  // namespace spccl::interpose
