// libFuzzer target: dense streams (a split owner's reduced range, a sparsified allgather block
// sent dense; fp32/fp16/bf16) as parseStream sees them, for a receiver that accepts dense streams.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return spccl::fuzz::fuzzStream(data, size, spccl::fuzz::DenseRule::kAlways);
}
