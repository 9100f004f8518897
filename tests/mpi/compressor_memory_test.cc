// What a host compressor holds, and that sharing the rest with its
// communicator changes no result. A compressor keeps only what outlives a
// call (the error-feedback residual, tau, counters); the per-call scratch
// (the threshold estimation's, the selected pairs, the 16-bit accumulator,
// the collectives' workspace and call descriptors) is the communicator's,
// sized by its largest call: spcclComm in src/comm.h. Every test here
// compares compressors on a shared communicator with the same compressors
// alone, bit for bit.
//
// Links the static library to read the buffers' sizes (src/comm.h).
#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/host/host_executor.h"
#include "src/comm.h"
#include "tests/mpi/conserved_calls.h"
#include "tests/mpi/test_util.h"

namespace spccl::test {
namespace {

// The exact threshold estimation's scratch is the communicator's, sized by
// its largest need (a radix bucket's candidates), not one per compressor; compressors that share it,
// their calls interleaved and tau estimated on every call, give bit for bit
// what each gives alone on a communicator of its own, and conserve.
TEST(CompressorMemory, ThresholdScratchIsSharedAndChangesNothing) {
  Comm shared, aloneSmall, aloneLarge;
  ASSERT_TRUE(okOnAllRanks(shared.r, shared.c, "spcclCommInitMPI"));
  ASSERT_TRUE(okOnAllRanks(aloneSmall.r, aloneSmall.c, "spcclCommInitMPI"));
  ASSERT_TRUE(okOnAllRanks(aloneLarge.r, aloneLarge.c, "spcclCommInitMPI"));
  const size_t small = 3001, large = 20000;
  spcclCompressConfig_t cfg;
  ASSERT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
  cfg.density = 0.01f;
  cfg.thresholdInterval = 1;  // estimate tau on every call
  cfg.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t s1 = nullptr, s2 = nullptr, a1 = nullptr, a2 = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(shared.c, small, spcclFloat32, &cfg, &s1), shared.c, "create"));
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(shared.c, large, spcclFloat32, &cfg, &s2), shared.c, "create"));
  ASSERT_TRUE(
      okOnAllRanks(spcclCompressorCreate(aloneSmall.c, small, spcclFloat32, &cfg, &a1), aloneSmall.c, "create"));
  ASSERT_TRUE(
      okOnAllRanks(spcclCompressorCreate(aloneLarge.c, large, spcclFloat32, &cfg, &a2), aloneLarge.c, "create"));
  ConservedCalls cs1(shared.c, s1, small), cs2(shared.c, s2, large);
  ConservedCalls ca1(aloneSmall.c, a1, small), ca2(aloneLarge.c, a2, large);
  for (unsigned call = 0; call < 6; ++call) {
    // Small and large alternate on the shared communicator, the small one
    // after the large one has grown the scratch past its own size.
    ASSERT_TRUE(cs2.call(100 + call));
    ASSERT_TRUE(cs1.call(200 + call));
    ASSERT_TRUE(ca1.call(200 + call));
    ASSERT_TRUE(ca2.call(100 + call));
    EXPECT_EQ(std::memcmp(cs1.out.data(), ca1.out.data(), small * sizeof(float)), 0) << "call " << call;
    EXPECT_EQ(std::memcmp(cs2.out.data(), ca2.out.data(), large * sizeof(float)), 0) << "call " << call;
  }
  // Grown to the largest radix bucket any call needed: on the shared
  // communicator the larger of what each compressor needed alone, and for
  // Gaussian data far below the buffer (it held `count` before).
  // (The scratch is the host executor's, one per communicator.)
  const auto scratch = [](const Comm& c) {
    return static_cast<const host::HostExecutor&>(*c.c->executor).scratchElements();
  };
  EXPECT_EQ(scratch(shared), std::max(scratch(aloneSmall), scratch(aloneLarge)));
  EXPECT_GT(scratch(shared), 0u);
  EXPECT_LT(scratch(shared), large / 10);
  EXPECT_LT(cs1.worstImbalance(), 1e-4);
  EXPECT_LT(cs2.worstImbalance(), 1e-4);
  spcclStats_t st{};
  ASSERT_EQ(spcclCompressorGetStats(s1, &st), spcclSuccess);
  EXPECT_EQ(st.thresholdUpdates, 6u);
  for (spcclCompressor_t c : {s1, s2, a1, a2}) spcclCompressorDestroy(c);
}

// A compressor holds its two residual buffers only from its first compressed
// call: dense calls (SPCCL_ALGO_DENSE with error feedback) leave them
// unallocated and the residual reads as zeros; an allgather compressor has
// them after one call, and conserves.
TEST(CompressorMemory, ResidualBuffersComeWithTheFirstCompressedCall) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const size_t n = 5000;
  spcclCompressConfig_t cfg;
  ASSERT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
  cfg.density = 0.01f;
  cfg.errorFeedback = 1;
  cfg.algorithm = SPCCL_ALGO_DENSE;
  spcclCompressor_t dense = nullptr, sparse = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &dense), comm.c, "create"));
  cfg.algorithm = SPCCL_ALGO_ALLGATHER;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &sparse), comm.c, "create"));
  EXPECT_TRUE(sparse->residual[0].get() == nullptr && sparse->residual[1].get() == nullptr)
      << "allocated before any call";
  ConservedCalls d(comm.c, dense, n), s(comm.c, sparse, n);
  for (unsigned call = 0; call < 3; ++call) {
    ASSERT_TRUE(d.call(700 + call));
    ASSERT_TRUE(s.call(800 + call));
  }
  EXPECT_TRUE(dense->residual[0].get() == nullptr && dense->residual[1].get() == nullptr)
      << "a dense-only compressor holds buffers";
  std::vector<float> r(n, 1.0f);
  ASSERT_EQ(spcclCompressorGetResidual(dense, r.data(), n), spcclSuccess);
  EXPECT_TRUE(std::all_of(r.begin(), r.end(), [](float x) { return x == 0.0f; }));
  EXPECT_EQ(sparse->residual[0].bytes(), n * sizeof(float));
  EXPECT_EQ(sparse->residual[1].bytes(), n * sizeof(float));
  EXPECT_LT(d.worstImbalance(), 1e-5);
  EXPECT_LT(s.worstImbalance(), 1e-4);
  spcclCompressorDestroy(dense);
  spcclCompressorDestroy(sparse);
}

// One compressor of CallScratchIsSharedAndChangesNothing.
struct CompressorSetup {
  size_t n;
  spcclDataType_t type;  // the user's buffers
  int algorithm;
  spcclDataType_t wire;
  float density;
};

// This rank's input to call `call` of compressor `which`, in the setup's data
// type: normal values, and with `nans` NaN at the front when asked.
std::vector<unsigned char> inputFor(const CompressorSetup& s, int which, unsigned call, size_t nans) {
  std::mt19937 gen(static_cast<unsigned>(seedFor(100 * static_cast<uint64_t>(which) + 7, worldRank(), call)));
  std::normal_distribution<float> normal;
  const size_t width = s.type == spcclFloat32 ? 4 : 2;
  std::vector<unsigned char> bytes(s.n * width);
  for (size_t i = 0; i < s.n; ++i) {
    const float v = i < nans ? std::numeric_limits<float>::quiet_NaN() : normal(gen);
    if (s.type == spcclFloat32) {
      std::memcpy(&bytes[4 * i], &v, 4);
    } else {
      const uint16_t h = s.type == spcclFloat16 ? floatToHalf(v) : floatToBf16(v);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  return bytes;
}

// Four compressors of different sizes, data types, algorithms and wire types
// on one communicator, their calls interleaved with row-compressed alltoalls
// (which use the same workspace), against each compressor alone on a
// communicator of its own: every output and the final residuals bit for bit.
// The last compressor's call 3 carries more NaN than its pair slots (they
// grow for that compressor alone). The shared pair buffers and accumulator
// are the largest compressor's size, not the sum.
TEST(CompressorMemory, CallScratchIsSharedAndChangesNothing) {
  const std::vector<CompressorSetup> setups = {{20000, spcclFloat32, SPCCL_ALGO_ALLGATHER, spcclFloat32, 0.05f},
                                               {3001, spcclBfloat16, SPCCL_ALGO_SPLIT, spcclFloat16, 0.02f},
                                               {12000, spcclFloat16, SPCCL_ALGO_ALLGATHER, spcclBfloat16, 0.01f},
                                               {7000, spcclFloat32, SPCCL_ALGO_SPLIT, spcclFloat8e4m3, 0.01f}};
  const size_t kNans = 1500;  // the last compressor's call 3, every rank: beyond its 4 x capacity slots
  Comm shared;
  ASSERT_TRUE(okOnAllRanks(shared.r, shared.c, "spcclCommInitMPI"));
  std::vector<Comm> alone(setups.size());
  for (Comm& a : alone) ASSERT_TRUE(okOnAllRanks(a.r, a.c, "spcclCommInitMPI"));
  std::vector<spcclCompressor_t> onShared(setups.size()), onAlone(setups.size());
  for (size_t i = 0; i < setups.size(); ++i) {
    spcclCompressConfig_t cfg;
    ASSERT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
    cfg.density = setups[i].density;
    cfg.algorithm = setups[i].algorithm;
    cfg.wireValueType = setups[i].wire;
    cfg.thresholdInterval = 2;  // calls with and without an estimate
    ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(shared.c, setups[i].n, setups[i].type, &cfg, &onShared[i]), shared.c,
                             "create"));
    ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(alone[i].c, setups[i].n, setups[i].type, &cfg, &onAlone[i]),
                             alone[i].c, "create"));
  }
  const size_t rowsPerPeer = 8, rowLen = 64, rowsCount = rowsPerPeer * rowLen * static_cast<size_t>(worldSize());
  const std::vector<float> rowsIn = gaussian(rowsCount, seedFor(55, worldRank()));
  std::vector<float> rowsOut(rowsCount);
  for (unsigned call = 0; call < 6; ++call) {
    for (size_t j = 0; j < setups.size(); ++j) {
      const size_t i = (call % 2 == 0) ? j : setups.size() - 1 - j;  // both orders: larger before and after
      const CompressorSetup& s = setups[i];
      const size_t nans = (i == setups.size() - 1 && call == 3) ? kNans : 0;
      const std::vector<unsigned char> in = inputFor(s, static_cast<int>(i), call, nans);
      std::vector<unsigned char> outShared(in.size()), outAlone(in.size());
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), outShared.data(), spcclSum, onShared[i], nullptr),
                               shared.c, "allreduce, shared"));
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), outAlone.data(), spcclSum, onAlone[i], nullptr),
                               alone[i].c, "allreduce, alone"));
      EXPECT_EQ(std::memcmp(outShared.data(), outAlone.data(), in.size()), 0) << "compressor " << i << " call " << call;
      ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(rowsIn.data(), rowsOut.data(), rowsPerPeer, rowLen,
                                                           spcclFloat32, 0.1f, nullptr, shared.c, nullptr),
                               shared.c, "alltoall rows"));
    }
  }
  uint64_t largestSlots = 0;
  size_t largest16 = 0;
  for (size_t i = 0; i < setups.size(); ++i) {
    std::vector<float> a(setups[i].n), b(setups[i].n);
    ASSERT_EQ(spcclCompressorGetResidual(onShared[i], a.data(), a.size()), spcclSuccess);
    ASSERT_EQ(spcclCompressorGetResidual(onAlone[i], b.data(), b.size()), spcclSuccess);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "residual of compressor " << i;
    EXPECT_EQ(onShared[i]->pairSlots, onAlone[i]->pairSlots) << "compressor " << i;
    EXPECT_EQ(alone[i].c->pairIndices.bytes() / sizeof(uint32_t), onAlone[i]->pairSlots) << "compressor " << i;
    largestSlots = std::max(largestSlots, onShared[i]->pairSlots);
    if (setups[i].type != spcclFloat32) largest16 = std::max(largest16, setups[i].n);
  }
  EXPECT_GE(onShared.back()->pairSlots, kNans) << "the NaN call did not grow the slots";
  EXPECT_EQ(shared.c->pairIndices.bytes() / sizeof(uint32_t), largestSlots);
  EXPECT_EQ(shared.c->accumulator.bytes() / sizeof(float), largest16);
  for (size_t i = 0; i < setups.size(); ++i) {
    spcclCompressorDestroy(onShared[i]);
    spcclCompressorDestroy(onAlone[i]);
  }
}

}  // namespace
}  // namespace spccl::test
