// formatString lives apart from the logging (src/log.cc, which needs MPI) so
// that src/params.cc needs nothing else: the interposers compile the
// parameter table in (interpose/CMakeLists.txt).
#include "kernels/core/status.h"

#include <cstdarg>
#include <cstdio>
#include <string>

namespace spccl {

std::string formatString(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, ap2);
  va_end(ap2);
  return out;
}

const char* resultString(spcclResult_t result) {
  switch (result) {
    case spcclSuccess:
      return "no error";
    case spcclUnhandledCudaError:
      return "unhandled cuda error";
    case spcclSystemError:
      return "unhandled system error (MPI, network or memory)";
    case spcclInternalError:
      return "internal error - please report this issue to the spccl developers";
    case spcclInvalidArgument:
      return "invalid argument";
    case spcclInvalidUsage:
      return "invalid usage";
    case spcclRemoteError:
      return "remote process exited or there was a network error, or a peer's stream was malformed";
    default:
      return "unknown result code";
  }
}

}  // namespace spccl
