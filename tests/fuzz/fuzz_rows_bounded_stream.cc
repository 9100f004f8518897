// libFuzzer target: the error-bounded row codec's stream
// (SPCCL_ROWS_CODEC=bounded) as the alltoall rows forward receives it
// (parseRowsBounded). Prefix: RowsPrefix (fuzz_common.h); its value type is
// the receiver's buffer type, the raw rows' width (fp8, not a buffer type,
// reads as fp32). An accepted stream is decoded as alltoall_rows.cc decodes
// it: nnz values, positions in range and increasing in each row (or every
// position, in order), scattered into a block of rows x rowLen.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spccl;
  using namespace spccl::fuzz;
  if (size < RowsPrefix::kBytes) return 0;
  const RowsPrefix x = readRowsPrefix(data);
  const core::ValueType raw = x.vt == core::ValueType::kFloat8e4m3 ? core::ValueType::kFloat32 : x.vt;
  const StreamCopy s(data + RowsPrefix::kBytes, size - RowsPrefix::kBytes);
  RowsView v;
  std::vector<uint32_t> kept(3, 0xdeadbeefu);
  std::vector<float> decoded(2, 1.0f);
  const Status st = parseRowsBounded(s.data(), s.size(), x.rows, x.rowLen, raw, x.seq, 1, &v, &kept, &decoded);
  if (!st.isOk()) {
    checkRejection(st);
    SPCCL_FUZZ_CHECK(kept.size() == 3 && kept[0] == 0xdeadbeefu && kept[2] == 0xdeadbeefu);
    return 0;
  }
  SPCCL_FUZZ_CHECK(v.rows == x.rows && v.rowLen == x.rowLen && v.nnz <= x.rows * x.rowLen);
  SPCCL_FUZZ_CHECK(s.size() % 8 == 0 && s.size() <= rowsStreamMaxBytesBounded(x.rows, x.rowLen, 0, v.nnz, raw));
  SPCCL_FUZZ_CHECK(decoded.size() == v.nnz && kept.size() == 3 + v.nnz);
  if (v.positions != nullptr) SPCCL_FUZZ_CHECK(s.contains(v.positions, v.nnz * v.indexBytes));
  std::unique_ptr<float[]> block(new float[x.rows * x.rowLen]());
  float sum = 0.0f;
  uint64_t e = 0;
  for (uint64_t r = 0; r < x.rows; ++r) {
    const uint32_t c = v.countOf(r);
    SPCCL_FUZZ_CHECK(c >= 1 && c <= x.rowLen && e + c <= v.nnz);
    int64_t previous = -1;
    for (uint32_t k = 0; k < c; ++k, ++e) {
      const uint32_t pos = kept[3 + e];
      SPCCL_FUZZ_CHECK(pos<x.rowLen&& static_cast<int64_t>(pos)> previous);
      if (v.positions != nullptr) SPCCL_FUZZ_CHECK(v.positionAt(e) == pos);
      previous = pos;
      block[r * x.rowLen + pos] = core::roundToWire(decoded[e], raw);
      sum += decoded[e];
    }
  }
  SPCCL_FUZZ_CHECK(e == v.nnz);
  volatile float sink = sum;
  (void)sink;
  return 0;
}
