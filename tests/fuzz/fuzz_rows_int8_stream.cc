// libFuzzer target: the int8 row codec's streams (SPCCL_ROWS_CODEC=int8) as
// the alltoall rows receive them: the forward's rows stream (parseRowsCoded)
// and the backward's values stream (parseValuesInt8), chosen by bit 7 of
// the prefix's byte 1 (the value type selector, which int8 streams do not
// use). Prefix: RowsPrefix (fuzz_common.h), and for the values stream nnz
// from bytes 6-7. An accepted stream is decoded as alltoall_rows.cc decodes
// it: every scale finite and >= 0, every code through int8Decode into a
// block of rows x rowLen at its position.
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
  const bool valuesStream = (data[1] & 0x80) != 0;
  const StreamCopy s(data + RowsPrefix::kBytes, size - RowsPrefix::kBytes);
  float sum = 0.0f;
  if (valuesStream) {
    const uint64_t nnz = loadLE<uint16_t>(data + 6);
    const unsigned char* scales = nullptr;
    const int8_t* codes = nullptr;
    const Status st = parseValuesInt8(s.data(), s.size(), x.rows, nnz, x.seq, 1, &scales, &codes);
    if (!st.isOk()) {
      checkRejection(st);
      return 0;
    }
    SPCCL_FUZZ_CHECK(s.size() == valuesStreamBytesInt8(x.rows, nnz));
    SPCCL_FUZZ_CHECK(s.contains(scales, x.rows * sizeof(float)));
    SPCCL_FUZZ_CHECK(s.contains(codes, nnz));
    for (uint64_t r = 0; r < x.rows; ++r)
      SPCCL_FUZZ_CHECK(std::isfinite(loadScale(scales, r)) && loadScale(scales, r) >= 0);
    for (uint64_t j = 0; j < nnz; ++j) sum += int8Decode(codes[j], loadScale(scales, j % (x.rows ? x.rows : 1)));
  } else {
    RowsView v;
    std::vector<uint32_t> kept(3, 0xdeadbeefu);
    const Status st = parseRowsCoded(s.data(), s.size(), x.rows, x.rowLen, core::ValueType::kFloat32, kRowsCodecInt8,
                                     x.seq, 1, &v, &kept);
    if (!st.isOk()) {
      checkRejection(st);
      SPCCL_FUZZ_CHECK(kept.size() == 3 && kept[0] == 0xdeadbeefu && kept[2] == 0xdeadbeefu);
      return 0;
    }
    SPCCL_FUZZ_CHECK(v.rows == x.rows && v.rowLen == x.rowLen && v.indexBytes == rowIndexBytes(x.rowLen));
    SPCCL_FUZZ_CHECK(v.nnz <= x.rows * x.rowLen);
    SPCCL_FUZZ_CHECK(s.size() == rowsStreamBytesInt8(x.rows, x.rowLen, v.nnz, v.keepPerRow == 0));
    SPCCL_FUZZ_CHECK(s.contains(v.positions, v.nnz * v.indexBytes));
    SPCCL_FUZZ_CHECK(s.contains(v.scales, x.rows * sizeof(float)));
    SPCCL_FUZZ_CHECK(s.contains(v.values, v.nnz));
    SPCCL_FUZZ_CHECK(v.scales >= v.positions + v.nnz * v.indexBytes);
    SPCCL_FUZZ_CHECK(kept.size() == 3 + v.nnz);
    std::unique_ptr<float[]> block(new float[x.rows * x.rowLen]());
    const auto* codes = static_cast<const int8_t*>(v.values);
    uint64_t e = 0;
    for (uint64_t r = 0; r < x.rows; ++r) {
      const float scale = loadScale(v.scales, r);
      SPCCL_FUZZ_CHECK(std::isfinite(scale) && scale >= 0);
      const uint32_t c = v.countOf(r);
      SPCCL_FUZZ_CHECK(c >= 1 && c <= x.rowLen && e + c <= v.nnz);
      for (uint32_t k = 0; k < c; ++k, ++e) {
        const uint32_t pos = v.positionAt(e);
        SPCCL_FUZZ_CHECK(pos < x.rowLen && kept[3 + e] == pos);
        const float value = int8Decode(codes[e], scale);
        SPCCL_FUZZ_CHECK(std::isnan(value) || std::fabs(value) <= 127.0f * scale * 1.0000001f ||
                         std::isinf(127.0f * scale));
        block[r * x.rowLen + pos] = value;
        sum += value;
      }
    }
    SPCCL_FUZZ_CHECK(e == v.nnz);
  }
  volatile float sink = sum;
  (void)sink;
  return 0;
}
