// The compressed allreduce's fp8 senders: tau's scale carries |v| up to about
// 28672 tau, and a selected value beyond that must not saturate (its excess
// would wait in the residual, and an input that keeps coming would never
// arrive, its residual overflowing to Inf from finite inputs). Allgather,
// split and auto, error feedback on.
#include <cmath>

#include "test_util.h"

namespace spccl::test {
namespace {

class Fp8ScaleTest : public MpiTest, public testing::WithParamInterface<int> {
 protected:
  static constexpr size_t kN = 4096;
  static constexpr size_t kAt = 5;
  // ~1 everywhere (so tau ~ 1), distinct per rank and call.
  static std::vector<float> background(int rank, int call) {
    std::vector<float> v(kN);
    for (size_t i = 0; i < kN; ++i) {
      const unsigned h = static_cast<unsigned>(i * 2654435761u + static_cast<unsigned>(rank) * 97u +
                                               static_cast<unsigned>(call) * 7919u);
      v[i] = ((h & 1u) ? 1.0f : -1.0f) * (0.5f + static_cast<float>(h % 1000) * 0.0005f);
    }
    return v;
  }
};

// A one-off outlier 1e30 on rank 0: the sum arrives in the same call, within
// e4m3's rounding (2^-4), not clipped at 448 * 2^s of tau's scale.
TEST_P(Fp8ScaleTest, OutlierArrivesInItsCall) {
  CompressorPtr comp;
  ASSERT_TRUE(createCompressor(kN, spcclFloat32, makeConfig(0.01f, GetParam(), spcclFloat8e4m3), comp));
  std::vector<float> in = background(rank_, 0), out(kN, 0.0f);
  if (rank_ == 0) in[kAt] = 1e30f;
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, comp.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  EXPECT_NEAR(out[kAt], 1e30, 1e30 / 16) << "the outlier was clipped";
  std::vector<float> res(kN);
  ASSERT_TRUE(residual(comp.get(), res));
  double r = res[kAt];
  MPI_Allreduce(MPI_IN_PLACE, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double s = in[kAt];
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_NEAR(out[kAt] + r, s, 1e30 * 1e-6) << "conservation at the outlier";
}

// 2.5e38 on rank 0 every call (the dense sum, 2.5e38 plus P-1 values ~1, is
// finite every call; below 448 * 2^119 = 2.977e38, the largest fp8 scale's
// ceiling, so it need not saturate): every call delivers it within e4m3's
// rounding, and the residual holds only that rounding, bounded, for as long
// as it keeps coming. (Above the ceiling the excess would pile up, and after
// enough calls overflow: docs/ALGORITHMS.md.)
TEST_P(Fp8ScaleTest, PersistentLargeValueArrivesEveryCall) {
  CompressorPtr comp;
  ASSERT_TRUE(createCompressor(kN, spcclFloat32, makeConfig(0.01f, GetParam(), spcclFloat8e4m3), comp));
  std::vector<float> out(kN, 0.0f), res(kN);
  for (int call = 0; call < 40; ++call) {
    std::vector<float> in = background(rank_, call);
    if (rank_ == 0) in[kAt] = 2.5e38f;
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, comp.get(), nullptr),
                             comm_.get(), "spcclAllReduceCompressed"));
    ASSERT_TRUE(residual(comp.get(), res));
    ASSERT_TRUE(allRanks(std::isfinite(out[kAt]) && std::isfinite(res[kAt])))
        << "call " << call << ": out " << out[kAt] << ", residual " << res[kAt];
    EXPECT_NEAR(out[kAt], 2.5e38, 2.5e38 / 8) << "call " << call;
    EXPECT_LE(std::fabs(res[kAt]), 2.5e38f / 8) << "call " << call << ": the residual grows";
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Fp8ScaleTest,
                         testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                         [](const testing::TestParamInfo<int>& c) { return std::string(algorithmName(c.param)); });

}  // namespace
}  // namespace spccl::test
