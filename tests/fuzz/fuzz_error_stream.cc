// libFuzzer target: error streams (header only, the sender's result code) as parseStream sees them; seeds
// are error streams of every code, the checks are those of every parseStream target.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return spccl::fuzz::fuzzStream(data, size, spccl::fuzz::DenseRule::kFromPrefix);
}
