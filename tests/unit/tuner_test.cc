// src/tuner: the byte model against formulas worked by hand from what each
// algorithm puts on the wire, and the choice at the two ends of density.
#include <gtest/gtest.h>

#include <cmath>

#include "include/spccl.h"
#include "src/tuner.h"

namespace spccl::test {
namespace {

// Per rank, to the other P-1 ranks (header 56 B, descriptor 32 B, one 8-byte
// size word per announced stream, a pair = 4 B index + wire value):
//   dense     = (P-1)*32 + 2(P-1)/P * n * elem
//   allgather = (P-1)*32 + (P-1) * (56 + k*pair)
//   split     = (P-1)*32 + (P-1)/P * k*pair + (P-1)*(56+8)            stage 1
//               + (P-1) * (8 + 56 + min(m*pair, n/P * wire))           stage 3
//   with m = merged pairs per owner range = n/P * (1 - (1 - k/n)^P) unless measured.

TEST(Tuner, ModelBytesSmallCases) {
  // P=4, n=1000, k=10, fp32 values and user data.
  CostInputs in{4, 1000, 10, 4, 4};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, in), 96.0 + 6000.0);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, in), 96.0 + 3 * (56.0 + 80.0));
  const double m = 250.0 * (1.0 - std::pow(0.99, 4));  // 9.8509975...
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, in), 96.0 + 60.0 + 192.0 + 3 * (64.0 + m * 8.0), 1e-9);
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, in), 776.42394, 1e-5);

  // A measured merge size replaces the estimate; past the dense size of a range it is capped.
  in.mergedPerRange = 10;
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 96.0 + 252.0 + 3 * (64.0 + 80.0));
  in.mergedPerRange = 200;  // 200 pairs * 8 B > 250 * 4 B dense
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 96.0 + 252.0 + 3 * (64.0 + 1000.0));

  // P=2, n=64, k=8, fp16 user data, bf16 wire (pair = 6 B).
  const CostInputs h{2, 64, 8, 2, 2};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, h), 32.0 + 64.0 * 2);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, h), 32.0 + 56.0 + 48.0);
  const double mh = 32.0 * (1.0 - std::pow(1.0 - 8.0 / 64.0, 2));  // 7.5
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, h), 32.0 + 24.0 + 64.0 + (64.0 + mh * 6.0));

  // P=3 (odd), n=999, k=999 (density 1): every range fills, the dense form wins stage 3.
  const CostInputs f{3, 999, 999, 4, 4};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, f), 64.0 + 2.0 * 2 / 3 * 999 * 4);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, f), 64.0 + 2 * (56.0 + 999 * 8.0));
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, f), 64.0 + 2.0 / 3 * 999 * 8 + 2 * 64.0 + 2 * (64.0 + 333 * 4.0), 1e-9);

  // One rank sends nothing.
  const CostInputs one{1, 1000, 10, 4, 4};
  for (int a : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) EXPECT_EQ(modelBytes(a, one), 0.0) << a;
}

TEST(Tuner, ModelSecondsIsAlphaBeta) {
  const CostInputs in{4, 1 << 20, 1 << 14, 4, 4};
  const CostModel zeroAlpha{0.0, 1.0};
  for (int a : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT})
    EXPECT_DOUBLE_EQ(modelSeconds(a, in, zeroAlpha), modelBytes(a, in)) << a;
  // Each algorithm takes at least one message round on more than one rank.
  const CostModel zeroBeta{1.0, 0.0};
  for (int a : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT})
    EXPECT_GE(modelSeconds(a, in, zeroBeta), 1.0) << a;
}

TEST(Tuner, ChoosesDenseWhenDenseAndSparseWhenSparse) {
  const uint64_t n = 16u << 20;
  const CostInputs nearlyDense{4, n, static_cast<uint64_t>(0.9 * n), 4, 4};
  EXPECT_EQ(chooseAlgorithm(nearlyDense), SPCCL_ALGO_DENSE);
  const CostInputs sparse{4, n, static_cast<uint64_t>(std::ceil(0.01 * n)), 4, 4};
  const int a = chooseAlgorithm(sparse);
  EXPECT_TRUE(a == SPCCL_ALGO_ALLGATHER || a == SPCCL_ALGO_SPLIT) << a;
  // Same inputs, same answer (every rank must pick alike).
  EXPECT_EQ(chooseAlgorithm(sparse), a);
  // fp16 wire keeps the sparse choice.
  EXPECT_NE(chooseAlgorithm({4, n, static_cast<uint64_t>(std::ceil(0.01 * n)), 4, 2}), SPCCL_ALGO_DENSE);
}

}  // namespace
}  // namespace spccl::test
