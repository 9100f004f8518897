// src/tuner: the byte model against formulas worked by hand from what each
// algorithm puts on the wire, the local-work terms, the choice at the two ends
// of density and as the parameters move, and the parameter sources
// (SPCCL_NET_*, SPCCL_CALIBRATE's measurement and its cache file).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "include/spccl.h"
#include "codec/codec.h"
#include "src/params.h"
#include "transport/transport.h"
#include "src/tuner.h"

namespace spccl::test {
namespace {

// Per rank, to the other P-1 ranks (header 56 B, descriptor 32 B, one 8-byte
// size word per announced stream, a pair = 4 B index + wire value):
//   dense     = (P-1)*D + 2(P-1)/P * n * elem     (D: the call descriptor, sizeof(CallDescriptor))
//   allgather = (P-1)*D + (P-1) * (56 + k*pair)
//   split     = (P-1)*D + (P-1)/P * k*pair + (P-1)*(56+8)             stage 1
//               + (P-1) * (8 + 56 + min(m*pair, n/P * wire))           stage 3
//   with m = merged pairs per owner range = n/P * (1 - (1 - k/n)^P) unless measured.

TEST(Tuner, ModelBytesSmallCases) {
  const double kDesc = static_cast<double>(sizeof(CallDescriptor));
  // P=4, n=1000, k=10, fp32 values and user data.
  CostInputs in{4, 1000, 10, 4, 4};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, in), 3 * kDesc + 6000.0);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, in), 3 * kDesc + 3 * (56.0 + 80.0));
  const double m = 250.0 * (1.0 - std::pow(0.99, 4));  // 9.8509975...
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 60.0 + 192.0 + 3 * (64.0 + m * 8.0), 1e-9);

  // A measured merge size replaces the estimate; past the dense size of a range it is capped.
  in.mergedPerRange = 10;
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 252.0 + 3 * (64.0 + 80.0));
  in.mergedPerRange = 200;  // 200 pairs * 8 B > 250 * 4 B dense
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 252.0 + 3 * (64.0 + 1000.0));

  // Re-selection caps the estimated merge at keepPerRange pairs; a measured
  // value is already after re-selection and is taken as it is.
  in.mergedPerRange = -1;
  in.keepPerRange = 3;  // ceil(k/P) with k = 10, P = 4
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 252.0 + 3 * (64.0 + 3 * 8.0));
  in.keepPerRange = 100;  // above the estimate (9.85): no effect
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 60.0 + 192.0 + 3 * (64.0 + m * 8.0), 1e-9);
  in.mergedPerRange = 7;
  in.keepPerRange = 3;
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, in), 3 * kDesc + 252.0 + 3 * (64.0 + 7 * 8.0));
  in.keepPerRange = 0;

  // P=2, n=64, k=8, fp16 user data, bf16 wire (pair = 6 B).
  const CostInputs h{2, 64, 8, 2, 2};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, h), kDesc + 64.0 * 2);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, h), kDesc + 56.0 + 48.0);
  const double mh = 32.0 * (1.0 - std::pow(1.0 - 8.0 / 64.0, 2));  // 7.5
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_SPLIT, h), kDesc + 24.0 + 64.0 + (64.0 + mh * 6.0));

  // P=3 (odd), n=999, k=999 (density 1): every range fills, the dense form wins stage 3.
  const CostInputs f{3, 999, 999, 4, 4};
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_DENSE, f), 2 * kDesc + 2.0 * 2 / 3 * 999 * 4);
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, f), 2 * kDesc + 2 * (56.0 + 999 * 8.0));
  EXPECT_NEAR(modelBytes(SPCCL_ALGO_SPLIT, f), 2 * kDesc + 2.0 / 3 * 999 * 8 + 2 * 64.0 + 2 * (64.0 + 333 * 4.0), 1e-9);

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

// Local work per rank (bytes), P=4, n=1000, k=10, fp32 in and on the wire,
// 32-bit indices (pair = 8 bytes):
//   selection (sparse only)   = n * (4 + 8) + 64 * n/16 * (1 - 0.99^16) + 256 k   (candidate blocks, picks)
//   dense accumulation        = (P-1)/P * n * 4 (fp32 input: no staging)  = 3000
//   allgather accumulation    = U(P k, n) = 4 n + P k (8 + 40)             = 5920
//     (P k = 40 pairs in 1000 elements: the blocked pass, 1 pair in 25)
//   split accumulation        = U(k, n/P) + 4 n/P + P min(U(m, n/P), n/P (4 + 10))
//                             = (1000 + 10 * 48) + 1000 + P (1000 + 48 m)
// where U(pairs, span) = 4 span + pairs (8 + 40) at one pair in 128 elements
// or more, else 2 span + pairs (8 + 320) (memset, then a miss a pair).
TEST(Tuner, LocalWorkTerms) {
  const CostInputs in{4, 1000, 10, 4, 4};
  const CostTerms d = modelTerms(SPCCL_ALGO_DENSE, in), a = modelTerms(SPCCL_ALGO_ALLGATHER, in),
                  s = modelTerms(SPCCL_ALGO_SPLIT, in);
  const double select = 12000.0 + 64.0 * 62.5 * (1.0 - std::pow(0.99, 16)) + 2560.0;
  EXPECT_DOUBLE_EQ(d.selectBytes, 0.0);
  EXPECT_DOUBLE_EQ(d.unpackBytes, 3000.0);
  CostInputs half = in;  // fp16/bf16 inputs are converted to fp32 first: n * (2 + 4) more
  half.elemBytes = 2;
  EXPECT_DOUBLE_EQ(modelTerms(SPCCL_ALGO_DENSE, half).unpackBytes, 6000.0 + 3000.0);
  EXPECT_DOUBLE_EQ(a.selectBytes, select);
  EXPECT_DOUBLE_EQ(a.unpackBytes, 5920.0);
  const double m = 250.0 * (1.0 - std::pow(0.99, 4));
  EXPECT_DOUBLE_EQ(s.selectBytes, select);
  EXPECT_NEAR(s.unpackBytes, 1480.0 + 1000.0 + 4 * (1000.0 + 48.0 * m), 1e-9);
  // Re-selecting below the merge (keep 3 < m) adds 384 bytes per merged entry
  // and stores only the kept pairs.
  CostInputs r = in;
  r.keepPerRange = 3;
  EXPECT_NEAR(modelTerms(SPCCL_ALGO_SPLIT, r).unpackBytes, 1480.0 + 1000.0 + 384.0 * m + 4 * (1000.0 + 48.0 * 3), 1e-9);
  // Sparser than one pair in 128 elements: memset and a miss a pair.
  EXPECT_DOUBLE_EQ(reduceBytes(7, 1000, 8.0), 2000.0 + 7 * 328.0);
  EXPECT_DOUBLE_EQ(reduceBytes(8, 1000, 8.0), 4000.0 + 8 * 48.0);
  // A 100000-element allgather at 1 pair in 1000 a rank, 4 ranks: scattered.
  EXPECT_DOUBLE_EQ(modelTerms(SPCCL_ALGO_ALLGATHER, {4, 100000, 100, 4, 4}).unpackBytes,
                   200000.0 + 400 * (8.0 + 320.0));
  // The candidate-block term grows with the density and saturates at 64 n/16.
  EXPECT_LT(selectPassBytes(1e6, 4, 1e3), selectPassBytes(1e6, 4, 1e5));
  EXPECT_DOUBLE_EQ(selectPassBytes(1e6, 4, 1e6), 12e6 + 4e6 + 256e6);
  // Rounds as docs/ALGORITHMS.md states: 2(P-1)+log2 P, (P-1)+log2 P, 2(P-1)+3 log2 P.
  EXPECT_DOUBLE_EQ(d.rounds, 8.0);
  EXPECT_DOUBLE_EQ(a.rounds, 5.0);
  EXPECT_DOUBLE_EQ(s.rounds, 12.0);
  // fp16 user data: the pass reads 2-byte inputs.
  EXPECT_DOUBLE_EQ(modelTerms(SPCCL_ALGO_ALLGATHER, {4, 1000, 10, 2, 2}).selectBytes, select - 2000.0);

  // modelSeconds is exactly the weighted sum of the four terms.
  const CostModel w{1e-6, 1e-9, 2e-10, 5e-11};
  for (int alg : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
    const CostTerms t = modelTerms(alg, in);
    EXPECT_DOUBLE_EQ(modelSeconds(alg, in, w),
                     t.rounds * 1e-6 + t.wireBytes * 1e-9 + t.selectBytes * 2e-10 + t.unpackBytes * 5e-11)
        << alg;
    EXPECT_DOUBLE_EQ(t.wireBytes, modelBytes(alg, in)) << alg;
  }
}

// The pick moves with the parameters the way the trade-off says it should.
TEST(Tuner, ChoiceFollowsTheParameters) {
  const uint64_t n = 16u << 20;
  const CostInputs sparse{4, n, n / 100, 4, 4};
  // A slow link and free selection: sparse.
  const CostModel slow = applyNetworkParams({}, 1.0, 50.0);
  EXPECT_NE(chooseAlgorithm(sparse, slow), SPCCL_ALGO_DENSE);
  // A wire as fast as memory and a selection pass at 0.5 GB/s: the pass alone
  // (16M x 12 B) costs more than the whole dense allreduce, so dense.
  CostModel fastWire = applyNetworkParams({}, 800.0, 1.0);
  fastWire.gammaSelect = 1.0 / 0.5e9;
  fastWire.gammaUnpack = 1.0 / 20e9;
  EXPECT_EQ(chooseAlgorithm(sparse, fastWire), SPCCL_ALGO_DENSE);
  // The same fast wire with a selection as fast as a GPU's: sparse again.
  fastWire.gammaSelect = 1.0 / 3000e9;
  fastWire.gammaUnpack = 1.0 / 3000e9;
  EXPECT_NE(chooseAlgorithm(sparse, fastWire), SPCCL_ALGO_DENSE);
  // Tiny buffers are latency-bound: allgather's fewer rounds beat split's
  // and dense's whatever the bandwidth.
  const CostInputs tiny{8, 4096, 41, 4, 4};
  EXPECT_EQ(chooseAlgorithm(tiny, applyNetworkParams({}, 100.0, 10.0)), SPCCL_ALGO_ALLGATHER);
  // Many ranks at moderate density: allgather's P k pairs grow with P,
  // split's do not, so split wins on a slow link.
  const CostInputs wide{64, n, n / 100, 4, 4};
  EXPECT_EQ(chooseAlgorithm(wide, slow), SPCCL_ALGO_SPLIT);
  // Every choice is the argmin of modelSeconds.
  for (const CostModel& m : {slow, fastWire, CostModel{}})
    for (const CostInputs& in : {sparse, tiny, wide}) {
      const int c = chooseAlgorithm(in, m);
      for (int alg : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT})
        EXPECT_LE(modelSeconds(c, in, m), modelSeconds(alg, in, m)) << c << " vs " << alg;
    }
}

// SPCCL_AUTO_TRIALS: the candidates are exactly the algorithms within
// kTrialPruneFactor of the model's best (which is always one), dense first,
// then the sparse ones in order of modelled time.
TEST(Tuner, TrialCandidatesFollowTheModel) {
  const uint64_t n = 16u << 20;
  const CostInputs sparse{4, n, n / 100, 4, 4}, tiny{8, 4096, 41, 4, 4}, dense{4, n, n / 2, 4, 4};
  const CostModel slow = applyNetworkParams({}, 1.0, 50.0);
  CostModel manyRounds = applyNetworkParams({}, 100.0, 1e5);  // 0.1 s per round: rounds decide
  for (const CostModel& m : {slow, manyRounds, CostModel{}})
    for (const CostInputs& in : {sparse, tiny, dense}) {
      const std::vector<int> c = trialCandidates(in, m);
      ASSERT_FALSE(c.empty());
      EXPECT_EQ(std::count(c.begin(), c.end(), chooseAlgorithm(in, m)), 1);
      const double best = modelSeconds(chooseAlgorithm(in, m), in, m);
      for (size_t i = 1; i < c.size(); ++i) {
        EXPECT_NE(c[i], SPCCL_ALGO_DENSE) << "dense is tried first";
        if (c[i - 1] != SPCCL_ALGO_DENSE) {
          EXPECT_LE(modelSeconds(c[i - 1], in, m), modelSeconds(c[i], in, m));
        }
      }
      for (int alg : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
        const bool listed = std::count(c.begin(), c.end(), alg) == 1;
        EXPECT_EQ(listed, modelSeconds(alg, in, m) <= kTrialPruneFactor * best)
            << alg << " modelled " << modelSeconds(alg, in, m) << " s, best " << best << " s";
      }
    }
  // At 1 Gbit/s and density 0.01 dense moves ~25x the bytes: never timed.
  const std::vector<int> slowSparse = trialCandidates(sparse, slow);
  EXPECT_EQ(std::count(slowSparse.begin(), slowSparse.end(), SPCCL_ALGO_DENSE), 0);
  // When rounds dominate every algorithm is within a few times of the best: all three are timed.
  EXPECT_EQ(trialCandidates(tiny, manyRounds).size(), 3u);
  // Nearly dense data: the model picks dense, which is tried before the sparse ones.
  const CostInputs half{4, n, n / 2, 4, 4};
  const CostModel fast = applyNetworkParams({}, 100.0, 1.0);
  ASSERT_EQ(chooseAlgorithm(half, fast), SPCCL_ALGO_DENSE);
  const std::vector<int> halfCandidates = trialCandidates(half, fast);
  EXPECT_EQ(halfCandidates.front(), SPCCL_ALGO_DENSE);
}

TEST(Tuner, TrialScheduleAndMedians) {
  const int D = SPCCL_ALGO_DENSE, A = SPCCL_ALGO_ALLGATHER, S = SPCCL_ALGO_SPLIT;
  // T = 4, three candidates: 7 calls each, block 1 (2 warm-ups, 2 counted) in
  // order, block 2 (1 lead-in, 2 counted) in reverse order.
  std::vector<size_t> slots;
  std::string counted;
  for (size_t call = 0; call < 21; ++call) {
    const TrialCall t = trialCall(call, 3, 4);
    slots.push_back(t.slot);
    counted += t.counted ? 'c' : '-';
  }
  EXPECT_EQ(slots, (std::vector<size_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(counted, "--cc--cc--cc-cc-cc-cc");
  EXPECT_EQ(trialCallsPerCandidate(4), 7u);
  // Whatever T and C: each candidate runs trialCallsPerCandidate(T) calls, T
  // of them counted, and every counted call follows a call of its own
  // candidate (its residual state is its own, as when settled on it).
  for (size_t c = 1; c <= 3; ++c)
    for (size_t trials = 1; trials <= 7; ++trials) {
      const size_t total = c * trialCallsPerCandidate(trials);
      std::vector<size_t> calls(c, 0), timed(c, 0);
      for (size_t call = 0; call < total; ++call) {
        const TrialCall t = trialCall(call, c, trials);
        ASSERT_LT(t.slot, c);
        ++calls[t.slot];
        if (!t.counted) continue;
        ++timed[t.slot];
        ASSERT_GT(call, 0u);
        EXPECT_EQ(trialCall(call - 1, c, trials).slot, t.slot) << "C=" << c << " T=" << trials << " call " << call;
      }
      for (size_t i = 0; i < c; ++i) {
        EXPECT_EQ(calls[i], trialCallsPerCandidate(trials)) << "C=" << c << " T=" << trials;
        EXPECT_EQ(timed[i], trials) << "C=" << c << " T=" << trials;
      }
      EXPECT_FALSE(trialCall(total, c, trials).counted) << "past the schedule";
    }

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Each candidate's times in its own call order (uncounted calls included),
  // laid out in the order trialCall schedules them.
  const auto layout = [](size_t c, size_t trials, const std::vector<std::vector<float>>& each) {
    std::vector<float> out;
    std::vector<size_t> next(c, 0);
    for (size_t call = 0; call < c * trialCallsPerCandidate(trials); ++call) {
      const size_t slot = trialCall(call, c, trials).slot;
      out.push_back(each[slot][next[slot]++]);
    }
    return out;
  };
  // T = 4. Dense: warm-ups 50 40, counted 9 2, lead-in 30, counted 3 4.
  // Allgather: 70 60, 7 1, 80, 1 1. Split: 90 90, 5 inf, 90, 6 nan.
  const std::vector<float> times =
      layout(3, 4, {{50, 40, 9, 2, 30, 3, 4}, {70, 60, 7, 1, 80, 1, 1}, {90, 90, 5, inf, 90, 6, nan}});
  const std::vector<float> m = trialMedians(times, 3, 4);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_FLOAT_EQ(m[0], 3.5f);  // sorted 2 3 4 9
  EXPECT_FLOAT_EQ(m[1], 1.0f);  // sorted 1 1 1 7
  EXPECT_EQ(m[2], inf);         // sorted 5 6 inf nan: the middle two are 6 and inf
  EXPECT_EQ(pickMeasured({D, A, S}, m.data()), A);
  // T = 3 (odd): block 1 counts 2, block 2 counts 1.
  const std::vector<float> odd = trialMedians(layout(2, 3, {{99, 99, 3, 1, 99, 2}, {99, 99, 8, 9, 99, 7}}), 2, 3);
  EXPECT_FLOAT_EQ(odd[0], 2.0f);  // 3 1 2
  EXPECT_FLOAT_EQ(odd[1], 8.0f);  // 8 9 7
  // T = 1: one block, no lead-in.
  EXPECT_EQ(trialCallsPerCandidate(1), 3u);
  const std::vector<float> one = trialMedians(layout(2, 1, {{99, 99, 5}, {99, 99, 4}}), 2, 1);
  EXPECT_FLOAT_EQ(one[0], 5.0f);
  EXPECT_FLOAT_EQ(one[1], 4.0f);
  // Cold first calls and the lead-in would decide a plain median: dense is 2
  // warm, allgather 3; dense's slow first calls and lead-in are not counted.
  const std::vector<int> denseAllgather = {D, A};
  const std::vector<float> cold = layout(2, 4, {{12, 10, 2, 2, 11, 2, 2}, {4, 3, 3, 3, 3, 3, 3}});
  EXPECT_EQ(pickMeasured(denseAllgather, trialMedians(cold, 2, 4).data()), D);
}

TEST(Tuner, PickMeasuredTakesTheFastestFiniteTime) {
  const std::vector<int> c = {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_DENSE};
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float splitFastest[] = {3e-3f, 1e-3f, 2e-3f};
  EXPECT_EQ(pickMeasured(c, splitFastest), SPCCL_ALGO_SPLIT);
  const float tie[] = {2e-3f, 2e-3f, 1e-2f};
  EXPECT_EQ(pickMeasured(c, tie), SPCCL_ALGO_ALLGATHER);  // the earlier (better modelled) one
  const float failed[] = {nan, inf, 5e-3f};               // a candidate whose every trial failed never wins
  EXPECT_EQ(pickMeasured(c, failed), SPCCL_ALGO_DENSE);
  const float none[] = {inf, nan, inf};
  EXPECT_EQ(pickMeasured(c, none), SPCCL_ALGO_ALLGATHER);  // nothing measured: the model's pick
  const float one[] = {7.0f};
  EXPECT_EQ(pickMeasured({SPCCL_ALGO_SPLIT}, one), SPCCL_ALGO_SPLIT);
}

TEST(Tuner, ExplainNamesEveryAlgorithmAndThePick) {
  const CostInputs in{4, 1u << 20, 1u << 14, 4, 4};
  const CostModel m = applyNetworkParams({}, 10.0, 5.0);
  const std::string why = explainChoice(in, m);
  for (const char* name : {"dense", "allgather", "split"}) EXPECT_NE(why.find(name), std::string::npos) << why;
  const std::string pick = std::string("-> ") + (chooseAlgorithm(in, m) == SPCCL_ALGO_DENSE       ? "dense"
                                                 : chooseAlgorithm(in, m) == SPCCL_ALGO_ALLGATHER ? "allgather"
                                                                                                  : "split");
  EXPECT_NE(why.find(pick), std::string::npos) << why;
  EXPECT_NE(describeCostModel(m).find("10 Gbit/s"), std::string::npos) << describeCostModel(m);
}

// ---------------------------------------------------------------- parameter sources

using Env = std::map<std::string, std::string>;

std::function<const char*(const char*)> lookupIn(const Env& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

TEST(TunerParams, NetworkVariablesParseAndApply) {
  Params p;
  ASSERT_TRUE(loadParams(lookupIn({}), &p).isOk());
  EXPECT_EQ(p.calibrate, 0);
  EXPECT_EQ(p.netGbps, 0.0);
  EXPECT_EQ(p.netLatencyUs, 0.0);
  const Env env{{"SPCCL_NET_GBPS", "25"}, {"SPCCL_NET_LATENCY_US", "2.5"}, {"SPCCL_CALIBRATE", "2"}};
  ASSERT_TRUE(loadParams(lookupIn(env), &p).isOk());
  EXPECT_EQ(p.netGbps, 25.0);
  EXPECT_EQ(p.netLatencyUs, 2.5);
  EXPECT_EQ(p.calibrate, 2);
  const std::string described = describeParams(p);
  EXPECT_NE(described.find("SPCCL_NET_GBPS=25"), std::string::npos) << described;
  EXPECT_NE(described.find("SPCCL_CALIBRATE=2"), std::string::npos) << described;

  const CostModel m = applyNetworkParams({}, p.netGbps, p.netLatencyUs);
  EXPECT_DOUBLE_EQ(m.beta, 8.0 / 25e9);  // Gbit/s -> seconds per byte
  EXPECT_DOUBLE_EQ(m.alpha, 2.5e-6);
  // 0 leaves a parameter alone, and the gammas are never touched.
  CostModel base{1.0, 2.0, 3.0, 4.0};
  const CostModel same = applyNetworkParams(base, 0, 0);
  EXPECT_EQ(same.alpha, 1.0);
  EXPECT_EQ(same.beta, 2.0);
  const CostModel onlyRate = applyNetworkParams(base, 8.0, 0);
  EXPECT_DOUBLE_EQ(onlyRate.beta, 1e-9);
  EXPECT_EQ(onlyRate.alpha, 1.0);
  EXPECT_EQ(onlyRate.gammaSelect, 3.0);
  EXPECT_EQ(onlyRate.gammaUnpack, 4.0);

  for (const Env& bad : {Env{{"SPCCL_NET_GBPS", "-1"}}, Env{{"SPCCL_NET_LATENCY_US", "fast"}},
                         Env{{"SPCCL_CALIBRATE", "3"}}, Env{{"SPCCL_CALIBRATE", "0.5"}}}) {
    const Status st = loadParams(lookupIn(bad), &p);
    ASSERT_FALSE(st.isOk()) << bad.begin()->first;
    EXPECT_NE(st.message().find(bad.begin()->first), std::string::npos) << st.message();
  }
}

TEST(TunerCache, DirectoryFollowsXdgThenHome) {
  EXPECT_EQ(calibrationCacheDir(lookupIn({{"XDG_CACHE_HOME", "/x/cache"}, {"HOME", "/home/u"}})), "/x/cache/spccl");
  // The XDG spec: a relative XDG_CACHE_HOME is ignored.
  EXPECT_EQ(calibrationCacheDir(lookupIn({{"XDG_CACHE_HOME", "rel"}, {"HOME", "/home/u"}})), "/home/u/.cache/spccl");
  EXPECT_EQ(calibrationCacheDir(lookupIn({{"HOME", "/home/u"}})), "/home/u/.cache/spccl");
  EXPECT_EQ(calibrationCacheDir(lookupIn({})), "");
  EXPECT_EQ(calibrationCachePath("", "k", 4), "");
  EXPECT_EQ(calibrationCachePath("/d", "0123", 4), "/d/calibration-0123-np4.txt");
}

TEST(TunerCache, KeyIsTheHostMultisetAndRankCount) {
  const std::string k = hostSetKey({"a", "b", "b"}, 3);
  EXPECT_EQ(k.size(), 16u);
  EXPECT_EQ(hostSetKey({"b", "a", "b"}, 3), k);  // rank order does not matter
  EXPECT_NE(hostSetKey({"a", "a", "b"}, 3), k);  // ranks per host do
  EXPECT_NE(hostSetKey({"a", "b", "b"}, 4), k);
  EXPECT_NE(hostSetKey({"ab"}, 1), hostSetKey({"a", "b"}, 1));
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/spccl_tuner_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    path = d ? d : "";
  }
  ~TempDir() {
    if (!path.empty()) (void)std::system(("rm -rf '" + path + "'").c_str());
  }
};

TEST(TunerCache, RoundTripIsBitExactAndRejectsOtherFiles) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  const std::string path = calibrationCachePath(tmp.path + "/nested/spccl", "00ff00ff00ff00ff", 4);
  const CostModel m{1.0 / 3.0 * 1e-5, 1.0 / 7.0 * 1e-9, 1.0 / 11.0 * 1e-9, 1.0 / 13.0 * 1e-10};
  ASSERT_TRUE(writeCalibrationCache(path, "00ff00ff00ff00ff", 4, m));  // creates the directories
  CostModel r{};
  ASSERT_TRUE(readCalibrationCache(path, "00ff00ff00ff00ff", 4, &r));
  EXPECT_EQ(std::memcmp(&r, &m, sizeof m), 0);
  // Another key or rank count: not this file's model.
  CostModel untouched{9, 9, 9, 9};
  EXPECT_FALSE(readCalibrationCache(path, "00ff00ff00ff00fe", 4, &untouched));
  EXPECT_FALSE(readCalibrationCache(path, "00ff00ff00ff00ff", 3, &untouched));
  EXPECT_EQ(untouched.alpha, 9.0);
  EXPECT_FALSE(readCalibrationCache(tmp.path + "/missing.txt", "00ff00ff00ff00ff", 4, &untouched));
  // Corrupt contents: a negative value, a missing field, a future version,
  // version 1 (its unpack rate was timed on another unpack).
  auto writeRaw = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  const std::string head = "spccl-cost-model 2\nkey 00ff00ff00ff00ff\nranks 4\n";
  writeRaw(head + "alpha_s -1\nbeta_s_per_byte 1e-9\nselect_s_per_byte 0\nunpack_s_per_byte 0\n");
  EXPECT_FALSE(readCalibrationCache(path, "00ff00ff00ff00ff", 4, &untouched));
  writeRaw(head + "alpha_s 1e-6\nbeta_s_per_byte 1e-9\nselect_s_per_byte 0\n");
  EXPECT_FALSE(readCalibrationCache(path, "00ff00ff00ff00ff", 4, &untouched));
  for (const char* version : {"3", "1"}) {
    writeRaw(std::string("spccl-cost-model ") + version +
             "\nkey 00ff00ff00ff00ff\nranks 4\nalpha_s 1e-6\nbeta_s_per_byte 1e-9\n"
             "select_s_per_byte 0\nunpack_s_per_byte 0\n");
    EXPECT_FALSE(readCalibrationCache(path, "00ff00ff00ff00ff", 4, &untouched)) << "version " << version;
  }
  writeRaw(head + "alpha_s 1e-6\nbeta_s_per_byte 1e-9\nselect_s_per_byte 0\nunpack_s_per_byte 0\n");
  EXPECT_TRUE(readCalibrationCache(path, "00ff00ff00ff00ff", 4, &untouched));
  EXPECT_EQ(untouched.alpha, 1e-6);
  // Unwritable places fail quietly.
  EXPECT_FALSE(writeCalibrationCache("/dev/null/spccl/x.txt", "k", 4, m));
  EXPECT_FALSE(writeCalibrationCache("", "k", 4, m));
}

// A cache path that is not a small regular file: a FIFO (rank 0 blocked in
// open() for ever, every other rank in the allgather after it), a file far
// larger than any spccl writes (read whole into a string: a 2 GiB file took
// 51 s and 4 GiB of memory at communicator creation; a link to /dev/zero
// takes all the memory there is). Rejected at once, without reading it.
TEST(TunerCache, OnlySmallRegularFilesAreRead) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  const std::string key = "00ff00ff00ff00ff";
  const std::string fifo = tmp.path + "/fifo.txt";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::promise<bool> done;
  std::future<bool> result = done.get_future();
  std::thread reader([&] {
    CostModel m{};
    done.set_value(readCalibrationCache(fifo, key, 4, &m));
  });
  const bool returned = result.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(returned) << "readCalibrationCache blocked on a FIFO";
  if (!returned) {  // unblock it: a writer that opens and closes the FIFO
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  reader.join();
  EXPECT_FALSE(result.get());

  // A valid model followed by 1 MiB of blanks: not a file spccl wrote.
  const std::string big = tmp.path + "/big.txt";
  {
    std::ofstream f(big, std::ios::trunc);
    f << "spccl-cost-model 2\nkey " << key << "\nranks 4\nalpha_s 1e-6\nbeta_s_per_byte 1e-9\n"
      << "select_s_per_byte 0\nunpack_s_per_byte 0\n"
      << std::string(size_t{1} << 20, ' ');
  }
  CostModel untouched{9, 9, 9, 9};
  EXPECT_FALSE(readCalibrationCache(big, key, 4, &untouched));
  EXPECT_EQ(untouched.alpha, 9.0);
  // A directory is not a cache file either.
  EXPECT_FALSE(readCalibrationCache(tmp.path, key, 4, &untouched));
}

// One rank: allgather is a copy. Enough to run the calibration end to end;
// the multi-rank agreement is tests/mpi/calibrate_test.cc.
class SelfTransport final : public Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status allReduceDense(const void* s, void* r, size_t count, spcclDataType_t type, spcclRedOp_t) override {
    if (s != r) std::memmove(r, s, count * (type == spcclFloat64 ? 8 : 4));
    return Status::ok();
  }
  Status allGather(const void* send, size_t bytes, void* recv) override {
    ++allGathers;
    if (send != recv) std::memmove(recv, send, bytes);
    return Status::ok();
  }
  Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t*, const size_t* offsets) override {
    std::memmove(static_cast<char*>(recv) + offsets[0], send, sendBytes);
    return Status::ok();
  }
  Status allToAll(const void* send, size_t bytes, void* recv) override { return allGather(send, bytes, recv); }
  Status allToAllV(const void* send, const size_t*, const size_t* so, void* recv, const size_t* rb,
                   const size_t* ro) override {
    std::memmove(static_cast<char*>(recv) + ro[0], static_cast<const char*>(send) + so[0], rb[0]);
    return Status::ok();
  }
  int allGathers = 0;
};

TEST(TunerCalibrate, MeasuresCachesAndReuses) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  const Env env{{"XDG_CACHE_HOME", tmp.path}};
  SelfTransport t;
  Params p;
  ASSERT_TRUE(loadParams(lookupIn({}), &p).isOk());

  // SPCCL_CALIBRATE=0: the defaults, no measurement.
  CostModel m;
  std::string origin;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn(env), &m, &origin).isOk());
  EXPECT_EQ(origin, "defaults");
  EXPECT_EQ(m.alpha, CostModel{}.alpha);
  EXPECT_EQ(m.gammaSelect, 0.0);

  // =1 with an empty cache: measured (local passes timed: positive, finite),
  // then written under $XDG_CACHE_HOME/spccl.
  p.calibrate = 1;
  CostModel first;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn(env), &first, &origin).isOk());
  EXPECT_NE(origin.find("calibrated"), std::string::npos) << origin;
  EXPECT_NE(origin.find(tmp.path + "/spccl/calibration-"), std::string::npos) << origin;
  EXPECT_GT(first.gammaSelect, 0.0);
  EXPECT_GT(first.gammaUnpack, 0.0);
  EXPECT_LT(first.gammaSelect, 1e-6);  // slower than 1 MB/s would be a broken timer
  EXPECT_TRUE(std::isfinite(first.alpha) && std::isfinite(first.beta));

  // =1 again: read back from the cache, bit for bit.
  CostModel second;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn(env), &second, &origin).isOk());
  EXPECT_NE(origin.find("calibration cache"), std::string::npos) << origin;
  EXPECT_EQ(std::memcmp(&first, &second, sizeof first), 0);

  // =2 measures again even though the cache exists.
  p.calibrate = 2;
  CostModel third;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn(env), &third, &origin).isOk());
  EXPECT_EQ(origin.find("calibration cache"), std::string::npos) << origin;
  EXPECT_NE(origin.find("calibrated"), std::string::npos) << origin;

  // SPCCL_NET_* win over the cache for the wire; the gammas stay measured.
  p.calibrate = 1;
  p.netGbps = 10;
  p.netLatencyUs = 3;
  CostModel net;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn(env), &net, &origin).isOk());
  EXPECT_NE(origin.find("SPCCL_NET_*"), std::string::npos) << origin;
  EXPECT_DOUBLE_EQ(net.beta, 8.0 / 10e9);
  EXPECT_DOUBLE_EQ(net.alpha, 3e-6);
  EXPECT_GT(net.gammaSelect, 0.0);

  // No usable cache directory: calibration still succeeds.
  p.netGbps = p.netLatencyUs = 0;
  CostModel nowhere;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn({{"XDG_CACHE_HOME", "/dev/null/x"}}), &nowhere, &origin).isOk());
  EXPECT_NE(origin.find("calibrated"), std::string::npos) << origin;
  ASSERT_TRUE(resolveCostModel(t, p, lookupIn({}), &nowhere, &origin).isOk());
  EXPECT_GT(nowhere.gammaSelect, 0.0);
}

// Every measured parameter is positive (an allgather takes time), and
// alpha and beta are always measured: a cache whose latency or wire cost is
// 0 or denormal is corrupt, not a free network (with them 0 every algorithm
// modelled 0 ms on the wire and auto took allgather at any density).
TEST(TunerCache, ZeroOrDenormalWireCostsAreCorrupt) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path.empty());
  const std::string key = "00ff00ff00ff00ff", path = tmp.path + "/c.txt";
  const std::string head = "spccl-cost-model 2\nkey " + key + "\nranks 4\n";
  auto accepted = [&](const std::string& alpha, const std::string& beta) {
    std::ofstream(path, std::ios::trunc) << head << "alpha_s " << alpha << "\nbeta_s_per_byte " << beta
                                         << "\nselect_s_per_byte 0\nunpack_s_per_byte 0\n";
    CostModel m{};
    return readCalibrationCache(path, key, 4, &m);
  };
  EXPECT_TRUE(accepted("1e-6", "1e-9"));
  EXPECT_FALSE(accepted("0", "1e-9"));
  EXPECT_FALSE(accepted("1e-6", "0"));
  EXPECT_FALSE(accepted("1e-320", "1e-9"));
  EXPECT_FALSE(accepted("1e-6", "1e-320"));
}

}  // namespace
}  // namespace spccl::test

namespace spccl {

// The pair size follows SPCCL_INDEX_ENCODING: 4-byte indices, the varint
// length of the mean gap, or a bit per position; auto takes the smallest.
TEST(Tuner, IndexBytesFollowTheEncoding) {
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingCoo, 1e6, 1e4), 4.0);
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingDelta, 1e6, 1e4), 1.0);  // mean gap 100 < 128
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingDelta, 1e6, 1e3), 2.0);  // mean gap 1000
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingDelta, 4e9, 1), 5.0);    // capped at 5 bytes
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingBitmap, 1e6, 5e5), 0.25);
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingAuto, 1e6, 5e5), 0.25);
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingAuto, 1e6, 1e4), 1.0);
  EXPECT_DOUBLE_EQ(indexBytesPerPair(kIndexEncodingAuto, 4e9, 1), 4.0);
  CostInputs coo{4, 1000000, 10000, 4, 4};
  CostInputs autoEnc = coo;
  autoEnc.indexEncoding = kIndexEncodingAuto;
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, coo), 3.0 * sizeof(CallDescriptor) + 3 * (56.0 + 10000 * 8.0));
  EXPECT_DOUBLE_EQ(modelBytes(SPCCL_ALGO_ALLGATHER, autoEnc), 3.0 * sizeof(CallDescriptor) + 3 * (56.0 + 10000 * 5.0));
  EXPECT_LT(modelBytes(SPCCL_ALGO_SPLIT, autoEnc), modelBytes(SPCCL_ALGO_SPLIT, coo));
}

}  // namespace spccl
