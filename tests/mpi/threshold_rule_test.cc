// The threshold rule of the compressed allreduce (docs/ALGORITHMS.md, step 3)
// against a reference of it, call by call, for thresholdMinFraction 0 (the
// default, DCT's rule: a stored tau stays however few entries it selects) and
// above 0 (a stored, non-zero tau selecting fewer than ceil(fraction x k)
// finite entries is re-estimated in that call). compressed_test.cc's
// ScheduleTest pins each kind of estimate with inputs made for it; here the
// inputs move unpredictably (scales walking differently on every rank, error
// feedback, 16-bit buffers, every wire, auto) and through edge cases (fp8
// outliers, more NaN/Inf than the pair slots, all-NaN/Inf/zero calls, k = 1,
// ties), so that the rule is checked where its branches meet: every call
// makes at most one estimate, exactly where the reference predicts one, with
// the predicted tau (bitwise) and selection size; outputs are identical on
// every rank and, with error feedback, outputs plus residuals add up to the
// inputs. The stress grid runs with and without thresholdWarmup's extra
// estimates (calls 1, 2, 4, ... below the interval); the edge cases and the
// refused call without (makeConfig's setting), where the warm-up would make
// the calls under test estimate anyway. Each suite also checks that its
// inputs do reach the low side (at fraction > 0) or keep a tau selecting
// under k/2 (at 0), so that a rule that ignored the setting would fail here.
#include <functional>
#include <limits>
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

// ---------- the rule, restated ----------

struct Rule {
  uint64_t k = 0;      // max(1, ceil(density x count))
  uint64_t cap = 0;    // max(k, floor(capacityFactor x k))
  uint64_t below = 0;  // ceil(thresholdMinFraction x k): a kept stored tau selects at least this many
};

Rule ruleFor(size_t n, const spcclCompressConfig_t& c) {
  Rule r;
  r.k = std::max<uint64_t>(1, selectionSize(n, c.density));
  r.cap = std::max<uint64_t>(
      r.k, static_cast<uint64_t>(std::floor(static_cast<double>(c.capacityFactor) * static_cast<double>(r.k))));
  // core::densityCount(fraction, k), the library's count for every density
  // rule, as selectionSize restates it (0 at fraction 0).
  r.below = selectionSize(r.k, c.thresholdMinFraction);
  return r;
}

// k-th largest finite |v|; 0 when there are fewer than k finite entries
// (every finite non-zero is then selected).
float kthFinite(const std::vector<float>& v, uint64_t k) {
  std::vector<float> mag;
  mag.reserve(v.size());
  for (const float x : v)
    if (std::isfinite(x)) mag.push_back(std::fabs(x));
  if (k > mag.size()) return 0.0f;
  std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(), std::greater<float>());
  return mag[k - 1];
}

// Finite non-zeros with |v| >= tau. A fresh estimate takes the entries tied at
// tau only up to the capacity (capTies); a stored tau takes all of them (the
// capacity check then sees them all).
uint64_t finiteSelected(const std::vector<float>& v, float tau, bool capTies, uint64_t cap) {
  uint64_t above = 0, ties = 0;
  for (const float x : v) {
    if (!std::isfinite(x) || x == 0.0f) continue;
    const float a = std::fabs(x);
    above += a > tau;
    ties += a == tau;
  }
  if (!capTies) return above + ties;
  return above + std::min<uint64_t>(ties, cap > above ? cap - above : 0);
}

struct Prediction {
  bool estimated = false;      // tau estimated in this call, of any kind
  bool lowSide = false;        // ... because the stored tau selected fewer than `below`
  bool keptUnderHalf = false;  // the stored tau kept, non-zero, selecting fewer than k/2 finite entries
  float tau = 0.0f;
  uint64_t finite = 0;     // finite entries sent
  uint64_t nonFinite = 0;  // NaN/Inf, always sent
};

// The schedule: call 0 and every thresholdInterval-th; with thresholdWarmup
// also calls 1, 2, 4, 8, ... below the interval.
bool scheduled(uint64_t call, const spcclCompressConfig_t& c) {
  const uint64_t interval = static_cast<uint64_t>(c.thresholdInterval);
  if (call % interval == 0) return true;
  if (c.thresholdWarmup == 0 || call >= interval) return false;
  uint64_t power = 1;
  while (power < call) power *= 2;
  return power == call;
}

// One call on v = input + residual (fp32): scheduled (due), else the stored
// tau, re-estimated in the call when it selects more than cap or (non-zero)
// fewer than below finite entries.
Prediction predict(const std::vector<float>& v, bool due, float stored, const Rule& rule) {
  Prediction p;
  for (const float x : v) p.nonFinite += !std::isfinite(x);
  p.tau = stored;
  bool estimate = due;
  if (!due) {
    const uint64_t sel = finiteSelected(v, stored, false, rule.cap);
    p.lowSide = stored != 0.0f && sel < rule.below;
    estimate = sel > rule.cap || p.lowSide;
    p.finite = sel;
    p.keptUnderHalf = !estimate && stored != 0.0f && 2 * sel < rule.k;
  }
  if (estimate) {
    p.estimated = true;
    p.tau = kthFinite(v, rule.k);
    p.finite = finiteSelected(v, p.tau, true, rule.cap);
  }
  return p;
}

// ---------- running calls against the reference ----------

// FNV-1a of a call's output bytes: the calls' outputs are compared across
// ranks once a run, not once a call (every collective round costs where
// ranks outnumber idle cores).
uint64_t outputHash(const std::vector<unsigned char>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// What a run's calls did, for the checks that its inputs reached the branch
// the test is about.
struct Tally {
  uint64_t lowSide = 0;        // low-side estimates (reference)
  uint64_t keptUnderHalf = 0;  // calls that kept a non-zero tau selecting under k/2 (reference)
};

class ThresholdRuleTest : public MpiTest {
 protected:
  // Makes `calls` compressed allreduces of make(call) (this rank's input, as
  // floats; stored in `type`, rounded) through one compressor, predicting
  // each from the residual read before it. Use under ASSERT_NO_FATAL_FAILURE.
  void run(const spcclCompressConfig_t& config, size_t n, spcclDataType_t type, int calls,
           const std::function<std::vector<float>(int)>& make, Tally* tally) {
    const Rule rule = ruleFor(n, config);
    const bool ef = config.errorFeedback != 0;
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, type, config, c));
    const size_t es = typeSize(type);
    std::vector<unsigned char> in(n * es), out(n * es);
    std::vector<float> res(n, 0.0f), v(n);
    std::vector<double> inSum(n, 0.0), outSum(n, 0.0);  // this rank's inputs; the (common) outputs
    bool finiteRun = true;
    float stored = 0.0f;        // the compressor's tau, as the reference tracks it
    bool estimateNext = false;  // a dense call flushed the residual (error feedback)
    uint64_t updates = 0;
    std::vector<uint64_t> hashes(static_cast<size_t>(calls), 0);
    for (int call = 0; call < calls; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      const std::vector<float> x = make(call);
      ASSERT_EQ(x.size(), n);
      for (size_t i = 0; i < n; ++i) storeFromFloat(in.data(), i, x[i], type);
      // Local calls: checked here, not agreed (the allreduce below agrees).
      if (ef) {
        EXPECT_EQ(spcclCompressorGetResidual(c.get(), res.data(), n), spcclSuccess);
      }
      for (size_t i = 0; i < n; ++i) {
        const float xi = loadAsFloat(in.data(), i, type);
        finiteRun = finiteRun && std::isfinite(xi);
        inSum[i] += xi;
        v[i] = xi + res[i];
      }
      const bool due = scheduled(static_cast<uint64_t>(call), config) || estimateNext;
      const Prediction want = predict(v, due, stored, rule);

      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                               "spcclAllReduceCompressed"));
      spcclStats_t s{};
      EXPECT_EQ(spcclCompressorGetStats(c.get(), &s), spcclSuccess);
      hashes[static_cast<size_t>(call)] = outputHash(out);
      for (size_t i = 0; i < n; ++i) outSum[i] += loadAsFloat(out.data(), i, type);
      const uint64_t delta = s.thresholdUpdates - updates;
      updates = s.thresholdUpdates;
      EXPECT_LE(delta, 1u) << "more than one estimate in a call";
      if (s.lastAlgorithm == SPCCL_ALGO_DENSE) {
        // auto's pick (not seen at these sizes, but the cost model may
        // change): nothing selected, tau untouched; with error feedback the
        // residual went out, so the next compressed call estimates afresh.
        estimateNext = estimateNext || ef;
        continue;
      }
      estimateNext = false;
      EXPECT_EQ(delta, want.estimated ? 1u : 0u) << "stored tau " << stored << ", reference tau " << want.tau
                                                 << " selecting " << want.finite << (want.lowSide ? " (low side)" : "");
      EXPECT_TRUE(sameBits(s.lastThreshold, want.tau))
          << "lastThreshold " << s.lastThreshold << ", expected " << want.tau;
      EXPECT_EQ(s.lastSelected, want.finite + want.nonFinite);
      if (delta == 0 && s.lastThreshold != 0.0f) {
        EXPECT_GE(s.lastSelected - std::min(s.lastSelected, want.nonFinite), rule.below)
            << "a kept stored tau selected fewer than ceil(thresholdMinFraction x k) finite entries";
      }
      tally->lowSide += want.lowSide;
      tally->keptUnderHalf += want.keptUnderHalf;
      stored = s.lastThreshold;
    }
    EXPECT_TRUE(identicalOnAllRanks(hashes.data(), hashes.size(), sizeof(uint64_t)))
        << "outputs differ across ranks (index: the first call that differs)";
    // Nothing is lost: the calls' outputs and every rank's residual add up to
    // every rank's inputs (NaN/Inf would make every sum NaN), relative to the
    // inputs (an fp32 residual near 1e9 rounds to 64).
    if (ef && allRanks(finiteRun)) {
      ASSERT_TRUE(residual(c.get(), res));
      std::vector<double> local(2 * n), sums(2 * n);  // inputs, residuals
      for (size_t i = 0; i < n; ++i) {
        local[i] = inSum[i];
        local[n + i] = res[i];
      }
      MPI_Allreduce(local.data(), sums.data(), static_cast<int>(2 * n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      double err = 0.0, norm = 0.0;
      for (size_t i = 0; i < n; ++i) {
        const double d = outSum[i] + sums[n + i] - sums[i];
        err += d * d;
        norm += sums[i] * sums[i];
      }
      // 16-bit buffers round every call's output (outside the residual).
      const double tolerance = type == spcclFloat32 ? 1e-5 : type == spcclFloat16 ? 1e-3 : 1e-2;
      EXPECT_LT(std::sqrt(err / std::max(norm, 1e-300)), tolerance) << "conservation";
    }
  }

  // The branch the inputs were made for was reached on some rank: at
  // fraction > 0 a low-side estimate, at 0 a kept tau selecting under k/2
  // (the default really keeps it). Collective.
  void expectExercised(float fraction, const Tally& t) {
    if (fraction > 0.0f) {
      EXPECT_FALSE(allRanks(t.lowSide == 0)) << "set-up: no call's stored tau starved (low side not reached)";
    } else {
      EXPECT_FALSE(allRanks(t.keptUnderHalf == 0)) << "set-up: no call kept a tau selecting under k/2";
    }
  }
};

std::string fractionName(float f) { return "min" + std::to_string(static_cast<int>(std::lround(f * 100))); }

// ---------- stress: scales walking differently on every rank ----------

struct StressParam {
  float fraction;
  int algorithm;
  spcclDataType_t wire;
  spcclDataType_t type;  // the buffer's
  int errorFeedback;
  int interval;
  int warmup;  // thresholdWarmup
};

class ThresholdRuleStress : public ThresholdRuleTest, public testing::WithParamInterface<StressParam> {};

// 24 calls on 2^13 elements (k = 82): each rank's scale mostly shrinks by 0
// to 2 binades a call and jumps up 6 binades about one call in 11, so stored
// taus go stale on both sides, on some ranks and not others; every fifth
// call zeroes two thirds of the input.
TEST_P(ThresholdRuleStress, FollowsTheRuleConservesAndAgrees) {
  const StressParam p = GetParam();
  const size_t n = size_t{1} << 13;
  spcclCompressConfig_t config = makeConfig(0.01f, p.algorithm, p.wire, p.interval, p.errorFeedback);
  config.thresholdMinFraction = p.fraction;
  config.thresholdWarmup = p.warmup;
  // fp16 buffers: far from overflow (4 ranks' sums at 2^6), and at 2^-8 the
  // smaller entries are subnormal or zero (ties) but not all of them.
  const int lowest = p.type == spcclFloat16 ? -8 : -40, highest = 6;
  std::mt19937_64 gen(seedFor(992, rank_));
  int level = 0;
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config, n, p.type, 24,
      [&](int call) {
        const uint64_t r = gen();
        level = std::clamp(level + (r % 11 == 0 ? 6 : -static_cast<int>(r % 3)), lowest, highest);
        std::vector<float> x = distinctMagnitudes(n, seedFor(993, rank_, static_cast<uint64_t>(call)), 0x1p-13f);
        for (size_t i = 0; i < n; ++i) x[i] = call % 5 == 3 && i % 3 != 0 ? 0.0f : std::ldexp(x[i], level);
        return x;
      },
      &tally));
  expectExercised(p.fraction, tally);
}

// Fractions 0 and 1/2 on every algorithm, wire and buffer type, with and
// without error feedback, on and off a frequent schedule, with and without
// the warm-up (the 48 cases spread the buffer types, schedules and warm-up
// over the wires instead of taking all 576 combinations); 1/4 on a subset,
// with the warm-up (the default).
std::vector<StressParam> stressParams() {
  const int algorithms[] = {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO};
  const spcclDataType_t wires[] = {spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3};
  const spcclDataType_t types[] = {spcclFloat32, spcclFloat16, spcclBfloat16};
  std::vector<StressParam> out;
  for (const float fraction : {0.0f, 0.5f}) {
    for (const int algorithm : algorithms) {
      for (size_t w = 0; w < 4; ++w) {
        for (const int ef : {0, 1}) {
          const size_t i = w + static_cast<size_t>(ef) + static_cast<size_t>(algorithm);
          const int warmup = static_cast<int>((w + static_cast<size_t>(algorithm)) % 2);
          out.push_back({fraction, algorithm, wires[w], types[i % 3], ef, i % 2 ? 3 : 1000, warmup});
        }
      }
    }
  }
  for (const int algorithm : {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT})
    for (const spcclDataType_t wire : {spcclFloat32, spcclFloat8e4m3})
      out.push_back({0.25f, algorithm, wire, spcclFloat32, 1, 1000, 1});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Grid, ThresholdRuleStress, testing::ValuesIn(stressParams()),
                         [](const testing::TestParamInfo<StressParam>& i) {
                           const StressParam& p = i.param;
                           return fractionName(p.fraction) + "_" + algorithmName(p.algorithm) + "_w" +
                                  typeName(p.wire) + "_b" + typeName(p.type) + "_ef" + std::to_string(p.errorFeedback) +
                                  "_i" + std::to_string(p.interval) + "_wu" + std::to_string(p.warmup);
                         });

// ---------- edge cases ----------

using EdgeParam = std::tuple<float, int, spcclDataType_t, int>;  // fraction, algorithm, wire, errorFeedback

class ThresholdRuleEdge : public ThresholdRuleTest, public testing::WithParamInterface<EdgeParam> {
 protected:
  spcclCompressConfig_t config(float density) const {
    const auto [fraction, algorithm, wire, ef] = GetParam();
    spcclCompressConfig_t c = makeConfig(density, algorithm, wire, 1000, ef);
    c.thresholdMinFraction = fraction;
    return c;
  }
  float fraction() const { return std::get<0>(GetParam()); }
};

// fp8: every call an outlier 2^16 times the rest's largest (beyond the 28672
// tau that tau's scale carries, within reach of the max rule's: the rest do
// not all round to zero), while the rest shrink (and grow back) by a
// rank-dependent number of binades: a starved pass is also one redone at
// the max rule's scale, before and after the re-estimate.
TEST_P(ThresholdRuleEdge, Fp8OutlierWhileShrinking) {
  const size_t n = size_t{1} << 13;
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config(0.01f), n, spcclFloat32, 10,
      [&](int call) {
        std::vector<float> x = distinctMagnitudes(n, seedFor(501, rank_, static_cast<uint64_t>(call)), 0x1p-13f);
        const int level = -((3 * call * (rank_ + 1)) % 17);
        for (float& y : x) y = std::ldexp(y, level);
        x[static_cast<size_t>(call * 37 + rank_) % n] = std::ldexp(1.0f, 16 + level);
        return x;
      },
      &tally));
  expectExercised(fraction(), tally);
}

// A starved call with more NaN/Inf than the pair slots (4 x cap = 656 here;
// 1024 of them): the re-estimate, then growing the slots, in one call.
TEST_P(ThresholdRuleEdge, NonFiniteBeyondSlotsInAStarvedCall) {
  const size_t n = size_t{1} << 13;
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config(0.01f), n, spcclFloat32, 6,
      [&](int call) {
        std::vector<float> x = distinctMagnitudes(n, seedFor(502, rank_, static_cast<uint64_t>(call)), 0x1p-13f);
        for (float& y : x) y = std::ldexp(y, -4 * call);
        if (call >= 2 && (rank_ + call) % 2 == 0)
          for (size_t i = 0; i < n; i += 8)
            x[i] = (i / 8) % 2 ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
        return x;
      },
      &tally));
  expectExercised(fraction(), tally);
}

// All NaN, all Inf or all zero (by rank and call) after a stored tau, then
// normal data again: such a call starves any stored tau (no finite non-zero
// to select); the tau it estimates (0: fewer finite non-zeros than k) must
// not stick, and the normal calls after it go over the capacity instead.
TEST_P(ThresholdRuleEdge, AllNonFiniteOrZeroThenNormal) {
  const size_t n = size_t{1} << 12;
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config(0.01f), n, spcclFloat32, 8,
      [&](int call) {
        std::vector<float> x = distinctMagnitudes(n, seedFor(503, rank_, static_cast<uint64_t>(call)), 0x1p-12f);
        const int kind = call == 0 ? 0 : (call + rank_) % 4;
        if (kind == 1) std::fill(x.begin(), x.end(), std::numeric_limits<float>::quiet_NaN());
        if (kind == 2) std::fill(x.begin(), x.end(), std::numeric_limits<float>::infinity());
        if (kind == 3) std::fill(x.begin(), x.end(), 0.0f);
        return x;
      },
      &tally));
  expectExercised(fraction(), tally);
}

// k = 1 (density 0.001 of 1000): the input drops by 1e3 after call 0 and
// halves every call, so a stored tau selects nothing of the next call; at
// fraction > 0 that starves (ceil(fraction x 1) = 1), at 0 the call sends
// nothing.
TEST_P(ThresholdRuleEdge, KOfOne) {
  const size_t n = 1000;
  ASSERT_EQ(selectionSize(n, 0.001f), 1u);
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config(0.001f), n, spcclFloat32, 8,
      [&](int call) {
        std::vector<float> x = distinctMagnitudes(n, seedFor(504, rank_, static_cast<uint64_t>(call)), 0x1p-10f);
        if (call > 0)
          for (float& y : x) y = std::ldexp(y * 1e-3f, -call);
        return x;
      },
      &tally));
  expectExercised(fraction(), tally);
}

// Every entry tied (k = 4 of 2^15, cap 8), shrinking 4x a call on all ranks
// but rank 1, which stays at 1: a fresh tau takes its ties up to the cap, a
// stored one takes them all. Without error feedback the shrinking ranks'
// stored tau selects nothing; with it, the unsent ties wait in the residual
// and every call goes over the capacity instead.
TEST_P(ThresholdRuleEdge, TiedShrinking) {
  const size_t n = size_t{1} << 15;
  Tally tally;
  ASSERT_NO_FATAL_FAILURE(run(
      config(0.0001f), n, spcclFloat32, 6,
      [&](int call) { return std::vector<float>(n, rank_ == 1 ? 1.0f : std::ldexp(1.0f, -2 * call)); }, &tally));
  if (std::get<3>(GetParam()) == 0) expectExercised(fraction(), tally);
}

std::string edgeName(const testing::TestParamInfo<EdgeParam>& p) {
  const auto [fraction, algorithm, wire, ef] = p.param;
  return fractionName(fraction) + "_" + algorithmName(algorithm) + "_" + typeName(wire) + "_ef" + std::to_string(ef);
}

// The low side (1/2) on every algorithm and wire, with and without error
// feedback; the default on every algorithm, on the fp8 wire (the one with
// the most passes a call).
INSTANTIATE_TEST_SUITE_P(LowSide, ThresholdRuleEdge,
                         testing::Combine(testing::Values(0.5f),
                                          testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::Values(spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3),
                                          testing::Values(0, 1)),
                         edgeName);
INSTANTIATE_TEST_SUITE_P(Default, ThresholdRuleEdge,
                         testing::Combine(testing::Values(0.0f),
                                          testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::Values(spcclFloat8e4m3), testing::Values(0, 1)),
                         edgeName);

// ---------- a refused call ----------

using RefusedParam = std::tuple<float, int, int>;  // fraction, algorithm, errorFeedback

class ThresholdRuleRefused : public ThresholdRuleTest, public testing::WithParamInterface<RefusedParam> {};

// A call the descriptor check refuses (rank 0 asks for avg) leaves the
// compressor as it found it: its input shrank 16x (low side, at fraction >
// 0) or grew 16x (over the capacity) since tau was fitted, so it
// re-estimated tau before the check; the stored tau must come back, or the retry would find a
// tau fitted to it and skip the estimate its twin makes. Compressor a makes
// the refused call, b does not; then both make the same two calls (the
// retry, and a 16x step further) and must agree bit for bit: outputs,
// residuals, tau, selection and estimates counted.
TEST_P(ThresholdRuleRefused, LeavesTheStoredTau) {
  const auto [fraction, algorithm, ef] = GetParam();
  const size_t n = size_t{1} << 13;
  for (const float step : {0x1p-4f, 0x1p4f}) {
    SCOPED_TRACE(step < 1 ? "low side" : "over the capacity");
    spcclCompressConfig_t config = makeConfig(0.01f, algorithm, spcclFloat32, 1000, ef);
    config.thresholdMinFraction = fraction;
    CompressorPtr a, b;
    ASSERT_TRUE(createCompressor(n, spcclFloat32, config, a));
    ASSERT_TRUE(createCompressor(n, spcclFloat32, config, b));
    auto input = [&](int call, float scale) {
      std::vector<float> x = distinctMagnitudes(n, seedFor(601, rank_, static_cast<uint64_t>(call)), 0x1p-13f);
      for (float& y : x) y *= scale;
      return x;
    };
    const std::vector<float> in0 = input(0, 1.0f), in1 = input(1, step), in2 = input(2, step * step);
    std::vector<float> outA(n), outB(n), resA(n), resB(n);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in0.data(), outA.data(), spcclSum, a.get(), nullptr), comm_.get(),
                             "a, call 0"));
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in0.data(), outB.data(), spcclSum, b.get(), nullptr), comm_.get(),
                             "b, call 0"));
    std::vector<float> untouched(n, 7.0f);
    const spcclResult_t r =
        spcclAllReduceCompressed(in1.data(), untouched.data(), rank_ == 0 ? spcclAvg : spcclSum, a.get(), nullptr);
    ASSERT_TRUE(allRanks(r == spcclInvalidUsage)) << "set-up: the call should be refused, " << r;
    EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](float x) { return x == 7.0f; }))
        << "a refused call wrote its output";
    for (const std::vector<float>* in : {&in1, &in2}) {
      SCOPED_TRACE(in == &in1 ? "the retry" : "the call after it");
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in->data(), outA.data(), spcclSum, a.get(), nullptr),
                               comm_.get(), "a"));
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in->data(), outB.data(), spcclSum, b.get(), nullptr),
                               comm_.get(), "b"));
      spcclStats_t sa, sb;
      ASSERT_TRUE(stats(a.get(), sa));
      ASSERT_TRUE(stats(b.get(), sb));
      ASSERT_TRUE(residual(a.get(), resA));
      ASSERT_TRUE(residual(b.get(), resB));
      EXPECT_EQ(firstBitDifference(outA, outB), n) << "outputs differ from the twin's";
      EXPECT_EQ(firstBitDifference(resA, resB), n) << "residuals differ from the twin's";
      EXPECT_TRUE(sameBits(sa.lastThreshold, sb.lastThreshold)) << sa.lastThreshold << " vs " << sb.lastThreshold;
      EXPECT_EQ(sa.lastSelected, sb.lastSelected);
      EXPECT_EQ(sa.thresholdUpdates, sb.thresholdUpdates) << "estimates counted";
    }
  }
}

// The low side needs fraction > 0; at 0 the refused call re-estimates only
// over the capacity (and must still restore that).
INSTANTIATE_TEST_SUITE_P(AllgatherSplit, ThresholdRuleRefused,
                         testing::Combine(testing::Values(0.0f, 0.5f),
                                          testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT),
                                          testing::Values(0, 1)),
                         [](const testing::TestParamInfo<RefusedParam>& p) {
                           return fractionName(std::get<0>(p.param)) + "_" + algorithmName(std::get<1>(p.param)) +
                                  "_ef" + std::to_string(std::get<2>(p.param));
                         });

}  // namespace
}  // namespace spccl::test
