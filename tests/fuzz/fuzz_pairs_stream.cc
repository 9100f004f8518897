// libFuzzer target: pairs streams (COO32 indices, fp32/fp16/bf16 values) as parseStream sees them; the receiver
// may or may not accept a dense stream (prefix flag), as the allgather and split stages differ.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return spccl::fuzz::fuzzStream(data, size, spccl::fuzz::DenseRule::kFromPrefix);
}
