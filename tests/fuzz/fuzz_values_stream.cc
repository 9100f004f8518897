// libFuzzer target: values streams (alltoall rows backward: values only, the
// positions known from the forward's selection) as parseValues sees them,
// each wire value type. An accepted stream's nnz values are all read.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spccl;
  using namespace spccl::fuzz;
  if (size < ValuesPrefix::kBytes) return 0;
  const ValuesPrefix x = readValuesPrefix(data);
  const StreamCopy s(data + ValuesPrefix::kBytes, size - ValuesPrefix::kBytes);
  const void* values = nullptr;
  int scaleExp = 0;
  const Status st = parseValues(s.data(), s.size(), x.nnz, x.vt, x.seq, 1, &values, &scaleExp);
  if (!st.isOk()) {
    checkRejection(st);
    return 0;
  }
  SPCCL_FUZZ_CHECK(s.size() == valuesStreamBytes(x.nnz, x.vt));
  SPCCL_FUZZ_CHECK(s.contains(values, x.nnz * core::wireValueBytes(x.vt)));
  // Stored as the backward stores them, and summed into a volatile so that
  // the loads cannot be dropped with stores nobody reads.
  std::unique_ptr<float[]> out(new float[x.nnz]());
  float sum = 0.0f;
  for (uint64_t j = 0; j < x.nnz; ++j) {
    out[j] = core::loadWireValue(values, j, x.vt, scaleExp);
    sum += out[j];
  }
  volatile float sink = sum;
  (void)sink;
  return 0;
}
