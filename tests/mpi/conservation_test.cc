// Conservation of error feedback: nothing is ever
// dropped, so over any run sum(outputs) + sum over ranks of residuals ==
// sum over ranks and calls of inputs, for every algorithm and wire type.
//
// Registered with SPCCL_MIN_COMPRESS_COUNT=1024 so that a 20000-element
// compressor is compressed whatever the minimum means for explicit compressors
// (every test checks compressedCalls to prove it), and with
// SPCCL_THRESHOLD_INTERVAL=1 for the drop-in test (explicit compressors here
// set every field themselves).
//
// Error measure: relative L2, ||sum(outputs) [+ residuals] - sum(inputs)||_2 /
// ||sum(inputs)||_2 over the element vector, accumulated in double; <= 1e-5.
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr size_t kCount = 20000;
constexpr float kDensity = 0.01f;
constexpr int kInputCalls = 5;
constexpr int kMaxFlushCalls = 1000;
constexpr double kMaxRelativeError = 1e-5;

double relativeL2(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err) / std::sqrt(norm);
}

// Element-wise sum over ranks (collective).
std::vector<double> sumOverRanks(std::vector<double> v) {
  MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return v;
}

// Inputs for the flush test. fp32: dense Gaussian. fp16/bf16: a value that
// was sent leaves its rounding error in the residual, which must be sent in
// turn until the residual is exactly zero. That only terminates when every
// piece is representable in the wire type, and it should not depend on how
// huge ties at tau are broken (TiesAtThresholdRespectCapAndProgress covers
// that). Arbitrary fp32 bits fail both: fp16 cannot represent a piece below
// 2^-25 at all (it would stay in the residual forever, which is no bug), and
// bf16's third pieces fall on a few magnitudes. So each index receives one
// value, in call i % 5, with B significant bits (fp16: 22 = 11 + 11, two exact
// pieces, exponent in [-3, 3] so the low piece stays >= 2^-24; bf16: 16 = 8 +
// 8, exponent in [-20, 10]); the pieces are then exact and spread over
// thousands of magnitudes. Dense inputs with arbitrary bits are covered,
// without flushing, by ResidualAccountsForTheRest.
std::vector<float> flushTestInput(spcclDataType_t wire, int rank, int call) {
  if (wire == spcclFloat32) return gaussian(kCount, seedFor(81, rank, static_cast<uint64_t>(call)));
  // fp8: 8 = 4 + 4 bits (e4m3's normal codes carry 4 significant bits at the
  // scale tau sets), magnitudes over 2^12.
  const bool fp8 = wire == spcclFloat8e4m3;
  const int bits = wire == spcclFloat16 ? 22 : (fp8 ? 8 : 16);
  const int emin = wire == spcclFloat16 ? -3 : (fp8 ? -6 : -20), emax = wire == spcclFloat16 ? 3 : (fp8 ? 6 : 10);
  std::mt19937_64 gen(seedFor(82, rank, static_cast<uint64_t>(call)));
  std::vector<float> x(kCount, 0.0f);
  for (size_t i = 0; i < kCount; ++i) {
    const uint64_t r = gen();
    if (static_cast<int>(i % kInputCalls) != call) continue;
    const float m = 1.0f + std::ldexp(static_cast<float>(r & ((uint64_t{1} << (bits - 1)) - 1)), -(bits - 1));
    const int e = emin + static_cast<int>((r >> 32) % static_cast<uint64_t>(emax - emin + 1));
    x[i] = std::ldexp((r >> 40) & 1 ? m : -m, e);
  }
  return x;
}

using Param = std::tuple<int, spcclDataType_t>;
std::string paramName(const testing::TestParamInfo<Param>& p) {
  return std::string(algorithmName(std::get<0>(p.param))) + "_" + typeName(std::get<1>(p.param));
}

class ConservationTest : public MpiTest, public testing::WithParamInterface<Param> {};

TEST_P(ConservationTest, FlushedOutputsSumToInputs) {
  const auto [algorithm, wire] = GetParam();
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(kCount, spcclFloat32, makeConfig(kDensity, algorithm, wire, 1, 1), c));

  std::vector<double> inSum(kCount, 0.0), outSum(kCount, 0.0);
  std::vector<float> out(kCount), res(kCount);
  const std::vector<float> zeros(kCount, 0.0f);
  int calls = 0;
  bool flushed = false;
  for (; calls < kInputCalls + kMaxFlushCalls; ++calls) {
    std::vector<float> in = calls < kInputCalls ? flushTestInput(wire, rank_, calls) : zeros;
    for (size_t i = 0; i < kCount; ++i) inSum[i] += in[i];
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                             "spcclAllReduceCompressed"))
        << "call " << calls;
    for (size_t i = 0; i < kCount; ++i) outSum[i] += out[i];
    ASSERT_TRUE(residual(c.get(), res));
    if (calls + 1 >= kInputCalls && allRanks(std::all_of(res.begin(), res.end(), [](float x) { return x == 0.0f; }))) {
      flushed = true;
      ++calls;
      break;
    }
  }
  size_t nonzero = static_cast<size_t>(std::count_if(res.begin(), res.end(), [](float x) { return x != 0.0f; }));
  ASSERT_TRUE(allRanks(flushed)) << "residual not flushed after " << kMaxFlushCalls << " calls of zero input; "
                                 << nonzero << " nonzero entries left here";

  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.compressedCalls, static_cast<uint64_t>(calls))
      << "calls were not compressed (is SPCCL_MIN_COMPRESS_COUNT <= " << kCount << "?)";
  const double rel = relativeL2(outSum, sumOverRanks(inSum));
  EXPECT_LE(rel, kMaxRelativeError) << "after " << calls << " calls";
  if (rank_ == 0) RecordProperty("calls_to_flush", calls);
}

TEST_P(ConservationTest, ResidualAccountsForTheRest) {
  const auto [algorithm, wire] = GetParam();
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(kCount, spcclFloat32, makeConfig(kDensity, algorithm, wire, 1, 1), c));

  std::vector<double> inSum(kCount, 0.0), outSum(kCount, 0.0);
  std::vector<float> out(kCount), res(kCount);
  for (int call = 0; call < kInputCalls; ++call) {
    const std::vector<float> in = gaussian(kCount, seedFor(83, rank_, static_cast<uint64_t>(call)));
    for (size_t i = 0; i < kCount; ++i) inSum[i] += in[i];
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                             "spcclAllReduceCompressed"));
    for (size_t i = 0; i < kCount; ++i) outSum[i] += out[i];
  }
  ASSERT_TRUE(residual(c.get(), res));
  std::vector<double> resD(res.begin(), res.end());
  const std::vector<double> allRes = sumOverRanks(resD);
  for (size_t i = 0; i < kCount; ++i) outSum[i] += allRes[i];

  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.compressedCalls, static_cast<uint64_t>(kInputCalls))
      << "calls were not compressed (is SPCCL_MIN_COMPRESS_COUNT <= " << kCount << "?)";
  EXPECT_LE(relativeL2(outSum, sumOverRanks(inSum)), kMaxRelativeError);
  // Sanity: most of the mass is still in the residual after 5 calls at 1%.
  EXPECT_GT(std::count_if(res.begin(), res.end(), [](float x) { return x != 0.0f; }),
            static_cast<std::ptrdiff_t>(kCount / 2));
}

INSTANTIATE_TEST_SUITE_P(AllgatherSplitAllWireTypes, ConservationTest,
                         testing::Combine(testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT),
                                          testing::Values(spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3)),
                         paramName);

// Every |v| equal: tau ties with all of them. S = {|v| >= tau} has at least k
// entries by definition, and the capacity cap allows at most
// capacityFactor*k: every call must select within [k, cap] while k or more
// nonzero entries remain (never zero, or the residual could never drain), and
// the residual drains in about count/k calls. Split re-selects (the default,
// SPCCL_SPLIT_RESELECT=1): the owners send at most k entries per call in all
// and keep the rest of their reduced sums, so an index can travel to its
// owner and back many times: the bound is P times looser there.
TEST_F(MpiTest, TiesAtThresholdRespectCapAndProgress) {
  for (int algorithm : {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
    SCOPED_TRACE(algorithmName(algorithm));
    const size_t k = selectionSize(kCount, kDensity);
    const spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 1, 1);
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(kCount, spcclFloat32, config, c));
    std::mt19937_64 gen(seedFor(84, rank_));
    std::vector<float> in(kCount);
    for (float& x : in) x = (gen() & 1) ? 1.0f : -1.0f;
    std::vector<float> out(kCount), res(kCount, 1.0f);
    std::vector<double> outSum(kCount, 0.0);
    const size_t maxCalls =
        (algorithm == SPCCL_ALGO_SPLIT && config.splitReselect > 0 ? static_cast<size_t>(size_) : 1) * 2 * kCount / k +
        10;
    size_t calls = 0;
    bool flushed = false;
    for (; calls < maxCalls; ++calls) {
      const size_t remaining =
          static_cast<size_t>(std::count_if(res.begin(), res.end(), [](float x) { return x != 0.0f; }));
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                               "spcclAllReduceCompressed"));
      for (size_t i = 0; i < kCount; ++i) outSum[i] += out[i];
      std::fill(in.begin(), in.end(), 0.0f);
      spcclStats_t s;
      ASSERT_TRUE(stats(c.get(), s));
      ASSERT_TRUE(residual(c.get(), res));
      const bool selectedOk = s.lastSelected <= static_cast<uint64_t>(config.capacityFactor * static_cast<float>(k)) &&
                              (remaining < k || s.lastSelected >= k);
      ASSERT_TRUE(allRanks(selectedOk)) << "call " << calls << ": selected " << s.lastSelected << " of " << remaining
                                        << " nonzero, k " << k;
      if (allRanks(std::all_of(res.begin(), res.end(), [](float x) { return x == 0.0f; }))) {
        flushed = true;
        if (rank_ == 0)
          std::printf("%s: flushed after %zu calls (bound %zu)\n", algorithmName(algorithm), calls + 1, maxCalls);
        break;
      }
    }
    ASSERT_TRUE(allRanks(flushed)) << "not flushed after " << maxCalls << " calls";
    // Every rank contributed +-1 at each index once.
    std::vector<double> inSum(kCount);
    std::mt19937_64 regen(seedFor(84, rank_));
    for (double& x : inSum) x = (regen() & 1) ? 1.0 : -1.0;
    EXPECT_LE(relativeL2(outSum, sumOverRanks(inSum)), kMaxRelativeError);
  }
}

// The drop-in call keeps error-feedback state per (recvbuff, count, datatype):
// two buffers, called in turn (in place, as data-parallel training does),
// each conserve their own sums. One input call each, then zero input until a
// call returns all zeros (every residual empty; a cancellation to exact zero
// across ranks does not happen with this data). The drop-in call takes the
// env defaults; ctest sets SPCCL_MIN_COMPRESS_COUNT=1024 (20000 elements are
// compressed) and SPCCL_THRESHOLD_INTERVAL=1: with the default interval the
// tau of the first call stays in force, no residual entry reaches it on zero
// input, and nothing would be sent for the next 999 calls (DCT as designed).
TEST_F(MpiTest, DropInKeepsErrorFeedbackPerBuffer) {
  spcclCompressConfig_t defaults{};
  ASSERT_TRUE(okOnAllRanks(spcclCompressConfigInit(&defaults), comm_.get(), "spcclCompressConfigInit"));
  ASSERT_TRUE(allRanks(defaults.thresholdInterval == 1 && defaults.errorFeedback == 1 && defaults.density < 0.1f))
      << "run with SPCCL_THRESHOLD_INTERVAL=1 and default SPCCL_ERROR_FEEDBACK/SPCCL_ALLREDUCE_DENSITY (ctest does)";
  std::vector<float> a = gaussian(kCount, seedFor(85, rank_)), b = gaussian(kCount, seedFor(86, rank_));
  std::vector<double> inA(a.begin(), a.end()), inB(b.begin(), b.end());
  std::vector<double> outA(kCount, 0.0), outB(kCount, 0.0);
  bool doneA = false, doneB = false;
  int calls = 0;
  for (; calls < kMaxFlushCalls && !(doneA && doneB); ++calls) {
    for (auto [buf, sum, done] : {std::tie(a, outA, doneA), std::tie(b, outB, doneB)}) {
      if (done) continue;
      ASSERT_TRUE(
          okOnAllRanks(spcclAllReduce(buf.data(), buf.data(), kCount, spcclFloat32, spcclSum, comm_.get(), nullptr),
                       comm_.get(), "spcclAllReduce"));
      for (size_t i = 0; i < kCount; ++i) sum[i] += buf[i];
      done = allRanks(std::all_of(buf.begin(), buf.end(), [](float x) { return x == 0.0f; }));
      std::fill(buf.begin(), buf.end(), 0.0f);
    }
  }
  ASSERT_TRUE(doneA && doneB) << "not flushed after " << calls << " calls per buffer";
  spcclStats_t s{};
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.compressedCalls, s.calls) << "calls were not compressed (is SPCCL_MIN_COMPRESS_COUNT <= " << kCount
                                        << "?)";
  EXPECT_GT(calls, 10) << "flushed suspiciously fast for density 0.01";
  EXPECT_LE(relativeL2(outA, sumOverRanks(inA)), kMaxRelativeError) << "buffer a";
  EXPECT_LE(relativeL2(outB, sumOverRanks(inB)), kMaxRelativeError) << "buffer b";
}

// Buffers that move between calls each get an implicit compressor whose
// residual is never sent again: spcclAllReduce warns (SPCCL_DEBUG=WARN, the
// default) at 64 of them and at each doubling (kImplicitCompressorsWarnAt in
// src/comm.h), and not before; the calls themselves still succeed.
TEST_F(MpiTest, DropInWarnsWhenImplicitCompressorsPileUp) {
  constexpr size_t kBuffers = 130, kElems = 1024;  // SPCCL_MIN_COMPRESS_COUNT=1024 here
  std::vector<std::vector<float>> bufs;
  for (size_t b = 0; b < kBuffers; ++b) bufs.push_back(gaussian(kElems, seedFor(300 + static_cast<int>(b), rank_)));
  std::vector<size_t> warnedAt;
  for (size_t b = 0; b < kBuffers; ++b) {
    testing::internal::CaptureStderr();
    const spcclResult_t r =
        spcclAllReduce(bufs[b].data(), bufs[b].data(), kElems, spcclFloat32, spcclSum, comm_.get(), nullptr);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(okOnAllRanks(r, comm_.get(), "spcclAllReduce"));
    if (err.find("implicit compressors on this communicator") != std::string::npos) warnedAt.push_back(b + 1);
  }
  EXPECT_EQ(warnedAt, (std::vector<size_t>{64, 128}));
  spcclStats_t s{};
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.compressedCalls, kBuffers);
}

}  // namespace
}  // namespace spccl::test
