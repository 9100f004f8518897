// DCT-MP rows on the device: cuda::selectRowsTopK (both kernels: the radix
// select and the experimental floor-first one) against host::selectRowTopK
// row by row (same counts, same ascending positions), then the offsets,
// compaction, gather and scatter against the alltoall host path's loops.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

constexpr spcclDataType_t kTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};

struct RowsCase {
  uint64_t rows;
  uint32_t rowLen;
  uint32_t keep;
  spcclDataType_t type;
  Dist dist;
};

std::string describe(const RowsCase& c) {
  return "rows=" + std::to_string(c.rows) + " rowLen=" + std::to_string(c.rowLen) + " keep=" + std::to_string(c.keep) +
         " type=" + typeName(c.type) + " dist=" + distName(c.dist) + " " + seedTrace();
}

// The host alltoall's unstage: a kept value written back into its own
// buffer type saturates (a bf16 wire's 65536 from an fp16 65504 is 65504).
void storeSaturating(float v, spcclDataType_t type, unsigned char* dst) {
  if (type == spcclFloat16) {
    const uint16_t h = core::wireHalfBits(v);
    std::memcpy(dst, &h, sizeof h);
  } else if (type == spcclBfloat16) {
    const uint16_t b = core::wireBfloat16Bits(v);
    std::memcpy(dst, &b, sizeof b);
  } else {
    std::memcpy(dst, &v, sizeof v);
  }
}

// Host reference for all rows: counts and positions (stride rowLen).
void hostTopK(const std::vector<unsigned char>& data, const RowsCase& c, std::vector<uint32_t>* counts,
              std::vector<uint32_t>* positions) {
  const size_t es = elementBytes(c.type);
  counts->assign(c.rows, 0);
  positions->assign(c.rows * c.rowLen, 0);
  std::vector<uint64_t> scratch(std::max<uint32_t>(c.rowLen, 1));
  for (uint64_t r = 0; r < c.rows; ++r)
    (*counts)[r] = host::selectRowTopK(data.data() + r * c.rowLen * es, c.type, c.rowLen, c.keep,
                                       positions->data() + r * c.rowLen, scratch.data());
}

void checkRows(const RowsCase& c, std::mt19937_64& g) {
  SCOPED_TRACE(describe(c));
  traceStep("checkRows " + describe(c));
  const size_t es = elementBytes(c.type);
  const size_t total = c.rows * c.rowLen;
  std::vector<float> f = makeFloats(total, c.dist, g);
  if (c.dist == Dist::kNonFinite && c.rowLen > 4 && c.rows > 1) {
    // One row with more NaN/Inf than keep: all of them must come back.
    for (uint32_t i = 0; i < c.rowLen; i += 2) f[c.rowLen + i] = (i % 4) ? INFINITY : NAN;
  }
  const std::vector<unsigned char> data = encodeUser(f, c.type, c.dist, g);
  std::vector<uint32_t> hCounts, hPos;
  traceStep("host top-k");
  hostTopK(data, c, &hCounts, &hPos);
  traceStep("device top-k");

  DeviceBuffer<unsigned char> dData(total * es);
  DeviceBuffer<uint32_t> dPos(total), dCounts(c.rows);
  CUDA_ASSERT(dData.upload(data));
  // Both kernels (the radix select last: the steps below use its output).
  for (cuda::RowTopKMethod method : {cuda::RowTopKMethod::kFloorFirst, cuda::RowTopKMethod::kRadix}) {
    SCOPED_TRACE(method == cuda::RowTopKMethod::kRadix ? "radix" : "floor first");
    CUDA_ASSERT(dPos.poison());
    CUDA_ASSERT(dCounts.poison());
    STATUS_ASSERT(cuda::selectRowsTopK(dData.get(), c.type, c.rows, c.rowLen, c.keep, dPos.get(), c.rowLen,
                                       dCounts.get(), nullptr, method));
    SYNC_ASSERT();
    std::vector<uint32_t> counts, pos;
    CUDA_ASSERT(dCounts.download(counts));
    CUDA_ASSERT(dPos.download(pos));
    for (uint64_t r = 0; r < c.rows; ++r) {
      ASSERT_EQ(counts[r], hCounts[r]) << "row " << r;
      for (uint32_t j = 0; j < counts[r]; ++j)
        ASSERT_EQ(pos[r * c.rowLen + j], hPos[r * c.rowLen + j]) << "row " << r << " entry " << j;
    }
  }

  // Compaction (the offsets come from the host, as in the library).
  traceStep("compaction");
  std::vector<uint64_t> hOff(c.rows + 1, 0);
  for (uint64_t r = 0; r < c.rows; ++r) hOff[r + 1] = hOff[r] + hCounts[r];
  const uint64_t nnz = hOff[c.rows];
  DeviceBuffer<uint64_t> dOff(c.rows + 1);
  CUDA_ASSERT(dOff.upload(hOff));
  DeviceBuffer<uint32_t> dFlat(nnz);
  CUDA_ASSERT(dFlat.poison());
  STATUS_ASSERT(cuda::compactRows(dPos.get(), nullptr, 0, c.rowLen, dOff.get(), c.rows, dFlat.get(), nullptr, nullptr));
  SYNC_ASSERT();
  std::vector<uint32_t> flat;
  CUDA_ASSERT(dFlat.download(flat));
  std::vector<uint32_t> hFlat;
  for (uint64_t r = 0; r < c.rows; ++r)
    hFlat.insert(hFlat.end(), hPos.begin() + r * c.rowLen, hPos.begin() + r * c.rowLen + hCounts[r]);
  ASSERT_EQ(flat, hFlat);

  // Gather (values at the kept positions, on the wire) and scatter (into zeroed rows).
  for (core::ValueType wire : {core::ValueType::kFloat32, core::ValueType::kFloat16, core::ValueType::kBfloat16}) {
    SCOPED_TRACE(std::string("wire=") + wireName(wire));
    traceStep(std::string("gather and scatter, wire=") + wireName(wire));
    const uint32_t vb = core::wireValueBytes(wire);
    std::vector<unsigned char> hVals(nnz * vb);
    std::vector<float> rowF(c.rowLen);
    for (uint64_t r = 0; r < c.rows; ++r) {
      host::loadFloats(data.data() + r * c.rowLen * es, c.type, c.rowLen, rowF.data());
      for (uint64_t j = hOff[r]; j < hOff[r + 1]; ++j) core::storeWireValue(hVals.data(), j, rowF[hFlat[j]], wire);
    }
    DeviceBuffer<unsigned char> dVals(nnz * vb);
    CUDA_ASSERT(dVals.poison());
    STATUS_ASSERT(cuda::gatherRowValues(dData.get(), c.type, c.rows, c.rowLen, dFlat.get(), dOff.get(), wire,
                                        dVals.get(), nullptr));
    SYNC_ASSERT();
    std::vector<unsigned char> vals;
    CUDA_ASSERT(dVals.download(vals));
    ASSERT_EQ(firstBitMismatch(vals.data(), hVals.data(), nnz, vb), nnz) << "gather";

    std::vector<unsigned char> hOut(total * es, 0);
    for (uint64_t r = 0; r < c.rows; ++r)
      for (uint64_t j = hOff[r]; j < hOff[r + 1]; ++j) {
        const float v = core::loadWireValue(hVals.data(), j, wire);
        storeSaturating(v, c.type, hOut.data() + (r * c.rowLen + hFlat[j]) * es);
      }
    DeviceBuffer<unsigned char> dOut(total * es);
    CUDA_ASSERT(dOut.poison());
    STATUS_ASSERT(cuda::scatterRowValues(dVals.get(), wire, 0, dFlat.get(), dOff.get(), c.rows, c.rowLen, c.type,
                                         dOut.get(), nullptr));
    SYNC_ASSERT();
    std::vector<unsigned char> out;
    CUDA_ASSERT(dOut.download(out));
    ASSERT_EQ(firstBitMismatch(out.data(), hOut.data(), total, es), total) << "scatter";
  }
}

TEST(GpuRowTopK, MatchesHostForManyShapes) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuRowTopK.MatchesHostForManyShapes");
  // Short rows (64-thread blocks), long rows (256-thread blocks), rows past
  // the shared-memory key buffer (8192), keep from 0 to past rowLen.
  for (uint32_t rowLen : {1u, 5u, 32u, 100u, 128u, 512u, 513u, 1024u, 4000u, 9000u})
    for (spcclDataType_t t : kTypes)
      for (Dist d :
           {Dist::kNormal, Dist::kAllEqual, Dist::kFewValues, Dist::kNonFinite, Dist::kDenormal, Dist::kRandomBits}) {
        const uint64_t rows = rowLen >= 4000 ? 7 : 67;
        for (uint32_t keep : {1u, core::rowKeep(rowLen, 1.0f / 16), rowLen / 2 + 1, rowLen, rowLen + 3, 0u}) {
          checkRows(RowsCase{rows, rowLen, keep, t, d}, g);
          if (HasFatalFailure()) return;
        }
      }
}

TEST(GpuRowTopK, ManyRows) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuRowTopK.ManyRows");
  checkRows(RowsCase{20011, 128, core::rowKeep(128, 1.0f / 16), spcclFloat32, Dist::kNormal}, g);
  if (HasFatalFailure()) return;
  checkRows(RowsCase{2003, 1024, core::rowKeep(1024, 0.01f), spcclBfloat16, Dist::kFewValues}, g);
  if (HasFatalFailure()) return;
  // More rows of over 512 than the 256-thread kernels' grid (132 SMs x 32 on an
  // H200): blocks go round their row loop more than once, so shared state left
  // by one row must not leak into the next (both kernels).
  checkRows(RowsCase{9001, 1024, core::rowKeep(1024, 1.0f / 16), spcclFloat32, Dist::kNormal}, g);
}

TEST(GpuRowTopK, HalfMaxOnABfloat16WireScattersAsHalfMax) {
  SPCCL_REQUIRE_DEVICE();
  // fp16 rows whose kept values include +-65504: a bf16 wire rounds them to
  // +-65536, and the scatter into the fp16 output must give +-65504 back (as
  // the host alltoall does), not +-Inf. Inf and NaN still pass as they are.
  const uint32_t rowLen = 8;
  const uint64_t rows = 2;
  const std::vector<float> f = {65504.0f,  -65504.0f, 1.0f,     INFINITY,  0.5f, 2.0f, NAN,  3.0f,
                                -65504.0f, 4.0f,      65504.0f, -INFINITY, 5.0f, 6.0f, 7.0f, 8.0f};
  std::vector<uint16_t> half(f.size());
  for (size_t i = 0; i < f.size(); ++i) half[i] = core::floatToHalfBits(f[i]);
  const std::vector<uint64_t> off = {0, 4, 8};
  const std::vector<uint32_t> pos = {0, 1, 3, 6, 0, 2, 3, 7};
  DeviceBuffer<uint16_t> dData(half.size()), dOut(half.size());
  DeviceBuffer<uint64_t> dOff(off.size());
  DeviceBuffer<uint32_t> dPos(pos.size());
  DeviceBuffer<uint16_t> dVals(pos.size());
  CUDA_ASSERT(dData.upload(half));
  CUDA_ASSERT(dOff.upload(off));
  CUDA_ASSERT(dPos.upload(pos));
  CUDA_ASSERT(dOut.poison());
  STATUS_ASSERT(cuda::gatherRowValues(dData.get(), spcclFloat16, rows, rowLen, dPos.get(), dOff.get(),
                                      core::ValueType::kBfloat16, dVals.get(), nullptr));
  STATUS_ASSERT(cuda::scatterRowValues(dVals.get(), core::ValueType::kBfloat16, 0, dPos.get(), dOff.get(), rows, rowLen,
                                       spcclFloat16, dOut.get(), nullptr));
  SYNC_ASSERT();
  std::vector<uint16_t> vals, out;
  CUDA_ASSERT(dVals.download(vals));
  CUDA_ASSERT(dOut.download(out));
  EXPECT_EQ(core::bfloat16BitsToFloat(vals[0]), 65536.0f);  // the wire did round up
  const std::vector<float> want = {65504.0f,  -65504.0f, 0,        INFINITY,  0, 0, NAN, 0,
                                   -65504.0f, 0,         65504.0f, -INFINITY, 0, 0, 0,   8.0f};
  for (size_t i = 0; i < want.size(); ++i) {
    const float got = core::halfBitsToFloat(out[i]);
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got)) << i;
    else EXPECT_EQ(got, want[i]) << i;
  }
}

TEST(GpuRowTopK, NarrowStrideKeepsCountsAndTruncates) {
  SPCCL_REQUIRE_DEVICE();
  // posStride = keep: rows with extra NaN/Inf report the full count but only
  // `keep` positions are written (no overflow into the next row).
  const uint32_t rowLen = 64, keep = 4;
  const uint64_t rows = 3;
  std::vector<float> f(rows * rowLen, 1.0f);
  for (uint32_t i = 0; i < rowLen; i += 4) f[rowLen + i] = NAN;  // 16 NaN in row 1
  DeviceBuffer<float> dData(f.size());
  DeviceBuffer<uint32_t> dPos(rows * keep + 8), dCounts(rows);
  CUDA_ASSERT(dData.upload(f));
  for (cuda::RowTopKMethod method : {cuda::RowTopKMethod::kRadix, cuda::RowTopKMethod::kFloorFirst}) {
    SCOPED_TRACE(method == cuda::RowTopKMethod::kRadix ? "radix" : "floor first");
    CUDA_ASSERT(dPos.poison());
    STATUS_ASSERT(cuda::selectRowsTopK(dData.get(), spcclFloat32, rows, rowLen, keep, dPos.get(), keep, dCounts.get(),
                                       nullptr, method));
    SYNC_ASSERT();
    std::vector<uint32_t> counts, pos;
    CUDA_ASSERT(dCounts.download(counts));
    CUDA_ASSERT(dPos.download(pos));
    EXPECT_EQ(counts, (std::vector<uint32_t>{4, 16, 4}));
    EXPECT_EQ(std::vector<uint32_t>(pos.begin(), pos.begin() + 12),
              (std::vector<uint32_t>{0, 1, 2, 3, 0, 4, 8, 12, 0, 1, 2, 3}));
    for (size_t i = 12; i < pos.size(); ++i) EXPECT_EQ(pos[i], 0xa5a5a5a5u) << i;
  }
}

}  // namespace
}  // namespace spccl::gputest
