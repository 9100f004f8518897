// A finite value of an fp16 user buffer must never arrive as Inf because a
// bf16 or fp8 wire rounded it above fp16's range (65504 -> 65536): the
// compressed allreduce (allgather, split, auto; dense and sparse inputs, so
// both fp8 scale rules), the rows alltoall and the sparsified allgather.
// Registered with SPCCL_VALUE_TYPE=bf16 and =fp8 (the drop-ins' wire).
#include "test_util.h"

namespace spccl::test {
namespace {

constexpr uint16_t kHalfMaxBits = 0x7bffu;  // 65504

struct WireCase {
  spcclDataType_t wire;
  int algorithm;
  bool sparse;  // only the large value is non-zero: fewer non-zeros than k
};

class WireRangeAllReduceTest : public MpiTest, public testing::WithParamInterface<WireCase> {};

TEST_P(WireRangeAllReduceTest, Fp16MaxStaysFinite) {
  const WireCase wc = GetParam();
  const size_t n = size_t{1} << 16;
  CompressorPtr comp;
  ASSERT_TRUE(createCompressor(n, spcclFloat16, makeConfig(0.01f, wc.algorithm, wc.wire), comp));
  std::vector<uint16_t> in(n, 0), out(n, 0);
  if (!wc.sparse)
    for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint16_t>(0x3c00u + ((i * 7 + rank_) % 64));  // ~1
  else in.assign(n, 0);
  const size_t at = 5;
  if (rank_ == 0) in[at] = kHalfMaxBits;
  if (rank_ == 1) in[at + 1] = kHalfMaxBits | 0x8000u;  // -65504
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, comp.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  // The dense sums (65504 plus at most P small values, or -65504 plus them)
  // are finite in fp16; so must the compressed output and the residual be.
  EXPECT_TRUE(std::isfinite(halfToFloat(out[at]))) << "out[at] bits " << std::hex << out[at];
  EXPECT_TRUE(std::isfinite(halfToFloat(out[at + 1]))) << "out[at+1] bits " << std::hex << out[at + 1];
  std::vector<float> residual(n);
  ASSERT_TRUE(okOnAllRanks(spcclCompressorGetResidual(comp.get(), residual.data(), n), comm_.get(), "residual"));
  EXPECT_TRUE(std::isfinite(residual[at]) && std::isfinite(residual[at + 1]));
  // Nothing lost at the large entries: output plus every rank's residual is the input sum.
  double r[2] = {residual[at], residual[at + 1]};
  MPI_Allreduce(MPI_IN_PLACE, r, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  std::vector<float> inF(n);
  for (size_t i = 0; i < n; ++i) inF[i] = halfToFloat(in[i]);
  double s[2] = {inF[at], inF[at + 1]};
  MPI_Allreduce(MPI_IN_PLACE, s, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_NEAR(halfToFloat(out[at]) + r[0], s[0], 64.0);  // fp16 output rounding: half an ulp of 32
  EXPECT_NEAR(halfToFloat(out[at + 1]) + r[1], s[1], 64.0);
}

INSTANTIATE_TEST_SUITE_P(Wires, WireRangeAllReduceTest,
                         testing::Values(WireCase{spcclBfloat16, SPCCL_ALGO_ALLGATHER, false},
                                         WireCase{spcclBfloat16, SPCCL_ALGO_SPLIT, false},
                                         WireCase{spcclBfloat16, SPCCL_ALGO_AUTO, false},
                                         WireCase{spcclBfloat16, SPCCL_ALGO_ALLGATHER, true},
                                         WireCase{spcclBfloat16, SPCCL_ALGO_SPLIT, true},
                                         WireCase{spcclFloat8e4m3, SPCCL_ALGO_ALLGATHER, false},
                                         WireCase{spcclFloat8e4m3, SPCCL_ALGO_SPLIT, false},
                                         WireCase{spcclFloat8e4m3, SPCCL_ALGO_AUTO, false},
                                         WireCase{spcclFloat8e4m3, SPCCL_ALGO_ALLGATHER, true},
                                         WireCase{spcclFloat8e4m3, SPCCL_ALGO_SPLIT, true}));

TEST_F(MpiTest, WireRangeRowsFp16MaxArrivesAsSent) {
  const size_t rowLen = 64, rows = 4, block = rows * rowLen;
  const int p = size_;
  std::vector<uint16_t> in(static_cast<size_t>(p) * block), out(in.size(), 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(0x3c00u + (i % 32));
  for (int j = 0; j < p; ++j) {
    in[j * block + 3] = kHalfMaxBits;
    in[j * block + rowLen + 9] = kHalfMaxBits | 0x8000u;
  }
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(in.data(), out.data(), rows, rowLen, spcclFloat16, 0.25f,
                                                       nullptr, comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAllRowsCompressed"));
  for (int j = 0; j < p; ++j) {
    EXPECT_EQ(out[j * block + 3], kHalfMaxBits) << "from rank " << j;
    EXPECT_EQ(out[j * block + rowLen + 9], kHalfMaxBits | 0x8000u) << "from rank " << j;
  }
}

TEST_F(MpiTest, WireRangeAllGatherFp16MaxArrivesAsSent) {
  const size_t n = 1024;
  std::vector<uint16_t> in(n), out(n * static_cast<size_t>(size_));
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<uint16_t>(0x3c00u + (i % 32));
  in[7] = kHalfMaxBits;
  in[8] = kHalfMaxBits | 0x8000u;
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(in.data(), out.data(), n, spcclFloat16, comm_.get(), nullptr), comm_.get(),
                           "spcclAllGather"));
  // Finite, within the wire's rounding (at most 2^-4 relative: fp8's bound).
  for (int r = 0; r < size_; ++r) {
    const float hi = halfToFloat(out[r * n + 7]), lo = halfToFloat(out[r * n + 8]);
    EXPECT_TRUE(std::isfinite(hi) && std::fabs(hi - 65504.0f) <= 65504.0f / 16) << "block " << r << ": " << hi;
    EXPECT_TRUE(std::isfinite(lo) && std::fabs(lo + 65504.0f) <= 65504.0f / 16) << "block " << r << ": " << lo;
  }
}

}  // namespace
}  // namespace spccl::test
