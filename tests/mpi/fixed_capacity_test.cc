// SPCCL_CAPACITY_MODE=fixed on MPI communicators: the compressed allreduce
// into capacityFactor x k slots per rank, the overflow kept in the residual,
// tau re-estimated on the schedule only, nothing read back on the host
// (docs/ALGORITHMS.md, "Fixed capacity"). The same policy code runs on the
// CUDA executor; here it runs on the host executor.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "spccl.h"
#include "conserved_calls.h"
#include "test_util.h"

namespace spccl::test {
namespace {

// A communicator whose capacity mode is `mode` (read at its creation).
struct ModeComm {
  spcclComm_t c = nullptr;
  explicit ModeComm(const char* mode) {
    setenv("SPCCL_CAPACITY_MODE", mode, 1);
    EXPECT_EQ(spcclCommInitMPI(&c, MPI_COMM_WORLD), spcclSuccess);
    unsetenv("SPCCL_CAPACITY_MODE");
  }
  ~ModeComm() {
    if (c) spcclCommDestroy(c);
  }
};

struct Compressor {
  spcclCompressor_t c = nullptr;
  Compressor(spcclComm_t comm, size_t n, spcclDataType_t type, const spcclCompressConfig_t& config) {
    EXPECT_EQ(spcclCompressorCreate(comm, n, type, &config, &c), spcclSuccess);
  }
  ~Compressor() {
    if (c) spcclCompressorDestroy(c);
  }
  spcclStats_t stats() const {
    spcclStats_t s{};
    EXPECT_EQ(spcclCompressorGetStats(c, &s), spcclSuccess);
    return s;
  }
};

// n floats as a buffer of `type` (round to nearest even).
std::vector<unsigned char> asBuffer(const std::vector<float>& v, spcclDataType_t type) {
  std::vector<unsigned char> b(v.size() * typeSize(type));
  for (size_t i = 0; i < v.size(); ++i) {
    if (type == spcclFloat16) {
      const uint16_t h = floatToHalf(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    } else if (type == spcclBfloat16) {
      const uint16_t h = floatToBf16(v[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    }
  }
  return b;
}

// The env defaults with this density and capacity factor.
spcclCompressConfig_t configWith(float density, float capacityFactor) {
  spcclCompressConfig_t config;
  EXPECT_EQ(spcclCompressConfigInit(&config), spcclSuccess);
  config.density = density;
  config.capacityFactor = capacityFactor;
  return config;
}

// Slots per rank: capacityFactor x k, at most n.
uint64_t capacityOf(size_t n, float density, float factor) {
  const uint64_t k = std::max<uint64_t>(1, selectionSize(n, density));
  return std::min<uint64_t>(n,
                            std::max<uint64_t>(k, static_cast<uint64_t>(std::floor(static_cast<double>(factor) * k))));
}

// Where no call's selection overflows its slots (here: the capacity covers
// the whole buffer), the fixed policy selects what the exact mode selects and
// sums it in the same order: the same bits, call after call (the residuals
// too, or the later calls would differ), over types, wire types, ops and
// error feedback. Its stats say what it sent: every slot, every call.
TEST(FixedCapacity, SameBitsAsExactWhereNothingOverflows) {
  ModeComm exact("exact"), fixed("fixed");
  const int p = worldSize(), me = worldRank();
  const size_t n = 4099;
  const float density = 0.02f;
  const uint64_t k = selectionSize(n, density);
  const float factor = static_cast<float>(n / k + 1);
  const uint64_t capacity = capacityOf(n, density, factor);
  ASSERT_EQ(capacity, n);
  for (spcclDataType_t type : {spcclFloat32, spcclFloat16, spcclBfloat16})
    for (spcclDataType_t wire : {spcclFloat32, spcclFloat16, spcclBfloat16})
      for (spcclRedOp_t op : {spcclSum, spcclAvg})
        for (int ef : {1, 0}) {
          SCOPED_TRACE(std::string(typeName(type)) + " wire " + typeName(wire) + " " + opName(op) + " ef " +
                       std::to_string(ef));
          spcclCompressConfig_t config = configWith(density, factor);
          config.thresholdInterval = 3;  // stored taus between the estimates
          config.errorFeedback = ef;
          config.algorithm = SPCCL_ALGO_ALLGATHER;
          config.wireValueType = wire;
          Compressor a(exact.c, n, type, config), b(fixed.c, n, type, config);
          std::vector<unsigned char> outA(n * typeSize(type)), outB(outA.size());
          for (int call = 0; call < 6; ++call) {
            // Growing inputs: stored taus select more than k, still within the slots.
            const std::vector<unsigned char> in =
                asBuffer(gaussian(n, seedFor(31, me, call), 1.0f + static_cast<float>(call)), type);
            ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), outA.data(), op, a.c, nullptr), exact.c,
                                     "exact allreduce"));
            ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), outB.data(), op, b.c, nullptr), fixed.c,
                                     "fixed allreduce"));
            ASSERT_EQ(std::memcmp(outA.data(), outB.data(), outA.size()), 0) << "call " << call;
            ASSERT_TRUE(identicalOnAllRanks(outB.data(), outB.size(), 1));
          }
          std::vector<float> resA(n), resB(n);
          ASSERT_EQ(spcclCompressorGetResidual(a.c, resA.data(), n), spcclSuccess);
          ASSERT_EQ(spcclCompressorGetResidual(b.c, resB.data(), n), spcclSuccess);
          EXPECT_EQ(std::memcmp(resA.data(), resB.data(), n * sizeof(float)), 0);
          const spcclStats_t sa = a.stats(), sb = b.stats();
          EXPECT_EQ(sb.thresholdUpdates, sa.thresholdUpdates);  // the schedule's, in both
          EXPECT_EQ(sb.lastSelected, 0u);                       // the count stays in executor memory
          EXPECT_EQ(sb.lastThreshold, 0.0f);
          EXPECT_EQ(sb.lastAlgorithm, SPCCL_ALGO_ALLGATHER);
          // Per peer: the descriptor agreed on first, the slots, and the
          // record (the descriptor again, agreed in band, and two counts).
          const uint64_t perCall =
              static_cast<uint64_t>(p - 1) *
              (48 + capacity * (sizeof(uint32_t) + wireValueBytes(wire)) + 48 + 2 * sizeof(uint64_t));
          EXPECT_EQ(sb.bytesSent, 6 * perCall);
          EXPECT_EQ(sb.compressedCalls, 6u);
        }
}

// A stale tau that selects more than the slots hold: the exact mode
// re-estimates in the call, the fixed policy sends the first `capacity`
// selected entries (index order) and keeps the rest whole in the residual.
// Nothing is lost either way: outputs + residuals = inputs, summed over calls.
TEST(FixedCapacity, OverflowWaitsInTheResidual) {
  ModeComm exact("exact"), fixed("fixed");
  const size_t n = 20000;
  const int p = worldSize();
  spcclCompressConfig_t config = configWith(0.01f, 1.0f);
  config.thresholdInterval = 1000;  // one estimate, at the first call
  config.thresholdWarmup = 0;
  config.errorFeedback = 1;
  config.algorithm = SPCCL_ALGO_ALLGATHER;
  const uint64_t capacity = capacityOf(n, config.density, config.capacityFactor);
  Compressor a(exact.c, n, spcclFloat32, config), b(fixed.c, n, spcclFloat32, config);
  ConservedCalls exactCalls(exact.c, a.c, n), fixedCalls(fixed.c, b.c, n);
  for (unsigned call = 0; call < 8; ++call) {
    ASSERT_TRUE(exactCalls.call(100 + call));
    ASSERT_TRUE(fixedCalls.call(100 + call));
    // The exact mode's re-estimates show the stored tau overflowing the slots.
    size_t nonZero = 0;
    for (float x : fixedCalls.out) nonZero += x != 0.0f;
    EXPECT_LE(nonZero, static_cast<size_t>(p) * capacity) << "call " << call;
  }
  EXPECT_GT(a.stats().thresholdUpdates, 1u) << "no call overflowed: the test shows nothing";
  EXPECT_EQ(b.stats().thresholdUpdates, 1u);  // the schedule's only
  EXPECT_LT(fixedCalls.worstImbalance(), 1e-5);
  EXPECT_LT(exactCalls.worstImbalance(), 1e-5);
}

// NaN and Inf travel like any selected entry while they fit in the slots.
TEST(FixedCapacity, NonFiniteEntriesAreSent) {
  ModeComm fixed("fixed");
  const size_t n = 5000;
  const int me = worldRank();
  const spcclCompressConfig_t config = configWith(0.01f, 2.0f);
  Compressor b(fixed.c, n, spcclFloat32, config);
  std::vector<float> in = gaussian(n, seedFor(7, me)), out(n);
  if (me == 0) in[17] = std::nanf("");
  if (me == worldSize() - 1) in[4000] = INFINITY;
  ASSERT_TRUE(
      okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, b.c, nullptr), fixed.c, "allreduce"));
  EXPECT_TRUE(std::isnan(out[17]));
  EXPECT_TRUE(std::isinf(out[4000]) || std::isnan(out[4000]));
}

// Ranks in different modes send different things: the call descriptors
// refuse the call on every rank before anything moves.
TEST(FixedCapacity, MixedModesAreRefusedOnEveryRank) {
  ModeComm mixed(worldRank() == 0 ? "fixed" : "exact");
  const size_t n = 5000;
  spcclCompressConfig_t config = configWith(0.01f, 2.0f);
  config.algorithm = SPCCL_ALGO_ALLGATHER;
  Compressor c(mixed.c, n, spcclFloat32, config);
  std::vector<float> in = gaussian(n, seedFor(8, worldRank())), out(n);
  const spcclResult_t r = spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.c, nullptr);
  EXPECT_EQ(r, spcclInvalidUsage);
  EXPECT_TRUE(allRanks(r == spcclInvalidUsage));
  EXPECT_NE(std::string(spcclGetLastError(mixed.c)).find("SPCCL_CAPACITY_MODE"), std::string::npos)
      << spcclGetLastError(mixed.c);
}

// fp8's scale comes from the selection's counts on the host: refused by name.
TEST(FixedCapacity, Fp8WireIsRefused) {
  ModeComm fixed("fixed");
  const size_t n = 5000;
  spcclCompressConfig_t config = configWith(0.01f, 2.0f);
  config.wireValueType = spcclFloat8e4m3;
  Compressor c(fixed.c, n, spcclFloat32, config);
  std::vector<float> in(n, 1.0f), out(n);
  EXPECT_EQ(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.c, nullptr), spcclInvalidUsage);
  EXPECT_NE(std::string(spcclGetLastError(fixed.c)).find("fp8"), std::string::npos) << spcclGetLastError(fixed.c);
}

}  // namespace
}  // namespace spccl::test
