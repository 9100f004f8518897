// libFuzzer target: rows streams (alltoall rows forward) as parseRows sees
// them, for each index width (8, 16, 32 bits: row lengths up to 256, 65536,
// beyond), each wire value type, with per-row counts or a fixed count. An
// accepted stream is walked as alltoall_rows.cc walks it: every row's count,
// every position, every value, stored into a block of rows x rowLen. The
// positions parseRows hands back (what the receiver keeps for the backward)
// must be the stream's own, appended after what the vector held; a refused
// stream appends nothing.
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
  const StreamCopy s(data + RowsPrefix::kBytes, size - RowsPrefix::kBytes);
  RowsView v;
  std::vector<uint32_t> kept(3, 0xdeadbeefu);  // earlier peers' positions stay as they were
  const Status st = parseRows(s.data(), s.size(), x.rows, x.rowLen, x.vt, x.seq, 1, &v, &kept);
  if (!st.isOk()) {
    checkRejection(st);
    SPCCL_FUZZ_CHECK(kept.size() == 3 && kept[0] == 0xdeadbeefu && kept[2] == 0xdeadbeefu);  // nothing appended
    return 0;
  }
  const uint64_t wb = core::wireValueBytes(x.vt);
  SPCCL_FUZZ_CHECK(v.rows == x.rows && v.rowLen == x.rowLen && v.valueType == x.vt);
  SPCCL_FUZZ_CHECK(v.indexBytes == rowIndexBytes(x.rowLen));
  SPCCL_FUZZ_CHECK(v.nnz <= x.rows * x.rowLen);
  SPCCL_FUZZ_CHECK(s.size() == rowsStreamBytes(x.rows, x.rowLen, v.nnz, v.keepPerRow == 0, x.vt));
  if (v.keepPerRow != 0) {
    SPCCL_FUZZ_CHECK(v.counts == nullptr && v.keepPerRow <= x.rowLen && v.nnz == x.rows * v.keepPerRow);
  } else if (x.rows > 0) {
    SPCCL_FUZZ_CHECK(s.contains(v.counts, x.rows * sizeof(uint32_t)));
  }
  SPCCL_FUZZ_CHECK(s.contains(v.positions, v.nnz * v.indexBytes));
  SPCCL_FUZZ_CHECK(s.contains(v.values, v.nnz * wb));
  SPCCL_FUZZ_CHECK(static_cast<const unsigned char*>(v.values) >= v.positions + v.nnz * v.indexBytes);
  SPCCL_FUZZ_CHECK(kept.size() == 3 + v.nnz && kept[0] == 0xdeadbeefu && kept[2] == 0xdeadbeefu);

  // The values also go into a sum kept in a volatile: otherwise the compiler
  // may drop the stores into a block nobody reads, and the loads with them.
  std::unique_ptr<float[]> block(new float[x.rows * x.rowLen]());
  float sum = 0.0f;
  uint64_t e = 0;
  for (uint64_t r = 0; r < x.rows; ++r) {
    const uint32_t c = v.countOf(r);
    SPCCL_FUZZ_CHECK(c >= 1 && c <= x.rowLen && e + c <= v.nnz);
    for (uint32_t k = 0; k < c; ++k, ++e) {
      const uint32_t pos = v.positionAt(e);
      SPCCL_FUZZ_CHECK(pos < x.rowLen);
      SPCCL_FUZZ_CHECK(k == 0 || pos > v.positionAt(e - 1));
      SPCCL_FUZZ_CHECK(kept[3 + e] == pos);
      const float value = core::loadWireValue(v.values, e, x.vt, v.scaleExp);
      block[r * x.rowLen + pos] = value;
      sum += value;
    }
  }
  SPCCL_FUZZ_CHECK(e == v.nnz);
  volatile float sink = sum;
  (void)sink;
  return 0;
}
