// SPCCL_CALIBRATE across ranks: every rank of a
// communicator ends with bitwise the same cost model (each rank measures its
// own timings; the model must not differ, or SPCCL_ALGO=auto would pick
// differently and the call descriptor check would reject every call), the
// cache written by rank 0 is what the next communicator uses, rank 0's
// settings win over a rank's own, and compressed allreduces under auto still
// succeed and conserve, whichever algorithm the model picks.
//
// Run by ctest with SPCCL_CALIBRATE=2 and XDG_CACHE_HOME in the build tree.
// Links the static library to read the communicator's model (src/comm.h).
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "src/comm.h"
#include "src/tuner.h"
#include "tests/mpi/conserved_calls.h"
#include "tests/mpi/test_util.h"

namespace spccl::test {
namespace {

// Rank 0's model, gathered: true when every rank's bits equal rank 0's.
bool sameOnEveryRank(const CostModel& m) {
  double mine[4] = {m.alpha, m.beta, m.gammaSelect, m.gammaUnpack};
  std::vector<double> all(4 * static_cast<size_t>(worldSize()));
  MPI_Allgather(mine, 4, MPI_DOUBLE, all.data(), 4, MPI_DOUBLE, MPI_COMM_WORLD);
  bool same = true;
  for (int r = 1; r < worldSize(); ++r) same = same && std::memcmp(all.data(), all.data() + 4 * r, sizeof mine) == 0;
  return same;
}

std::string show(const CostModel& m) {
  return "alpha=" + std::to_string(m.alpha) + " beta=" + std::to_string(m.beta) +
         " gammaSelect=" + std::to_string(m.gammaSelect) + " gammaUnpack=" + std::to_string(m.gammaUnpack);
}

TEST(Calibrate, EveryRankGetsTheSameMeasuredModel) {
  ASSERT_NE(std::getenv("SPCCL_CALIBRATE"), nullptr) << "run by ctest with SPCCL_CALIBRATE=2";
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI with SPCCL_CALIBRATE"));
  const CostModel& m = comm.c->costModel;
  EXPECT_TRUE(sameOnEveryRank(m)) << show(m);
  // Measured, not the defaults: every parameter positive and finite, and the
  // local passes (0 by default) timed.
  for (double v : {m.alpha, m.beta, m.gammaSelect, m.gammaUnpack}) {
    EXPECT_TRUE(std::isfinite(v)) << show(m);
    EXPECT_GT(v, 0.0) << show(m);
  }
  EXPECT_NE(m.alpha, CostModel{}.alpha) << show(m);

  // The cache rank 0 just wrote is what a communicator with SPCCL_CALIBRATE=1
  // uses: the same bits (a second measurement would not reproduce them).
  ScopedEnv reuse("SPCCL_CALIBRATE", "1");
  Comm again;
  ASSERT_TRUE(okOnAllRanks(again.r, again.c, "spcclCommInitMPI, cached"));
  EXPECT_EQ(std::memcmp(&again.c->costModel, &m, sizeof m), 0) << show(again.c->costModel) << " vs " << show(m);
}

TEST(Calibrate, RankZeroSettingsWin) {
  // Every rank asks for something else; rank 0 alone calibrates. No rank may
  // hang and all must end with rank 0's choice.
  const int rank = worldRank();
  ScopedEnv calibrate("SPCCL_CALIBRATE", rank == 0 ? "2" : "0");
  ScopedEnv gbps("SPCCL_NET_GBPS", std::to_string(10 * (rank + 1)));
  ScopedEnv latency("SPCCL_NET_LATENCY_US", rank == 0 ? "7" : "0");
  ScopedEnv trials("SPCCL_AUTO_TRIALS", std::to_string(rank + 1));  // the trial schedule must agree too
  ScopedEnv debug("SPCCL_DEBUG", "NONE");                           // the mismatch warning is expected
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI, mixed settings"));
  const CostModel& m = comm.c->costModel;
  EXPECT_TRUE(sameOnEveryRank(m)) << show(m);
  EXPECT_DOUBLE_EQ(m.beta, 8.0 / 10e9) << show(m);
  EXPECT_DOUBLE_EQ(m.alpha, 7e-6) << show(m);
  EXPECT_GT(m.gammaSelect, 0.0) << "rank 0 asked for calibration: " << show(m);
  EXPECT_EQ(comm.c->params.autoTrials, 1) << "rank 0's SPCCL_AUTO_TRIALS";
}

TEST(Calibrate, UnwritableCacheIsNotAnError) {
  ScopedEnv dir("XDG_CACHE_HOME", "/dev/null/not-a-directory");
  ScopedEnv calibrate("SPCCL_CALIBRATE", "1");
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI, unwritable cache"));
  EXPECT_TRUE(sameOnEveryRank(comm.c->costModel)) << show(comm.c->costModel);
  EXPECT_GT(comm.c->costModel.gammaSelect, 0.0);
}

// SPCCL_ALGO_AUTO at density 0.01; thresholdInterval as given, or
// spcclCompressConfigInit's when 0.
spcclCompressConfig_t autoConfig(int thresholdInterval) {
  spcclCompressConfig_t cfg;
  EXPECT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
  cfg.density = 0.01f;
  cfg.algorithm = SPCCL_ALGO_AUTO;
  if (thresholdInterval > 0) cfg.thresholdInterval = thresholdInterval;
  return cfg;
}

// Models far from any tie, so auto's pick is certain: a wire as fast as
// memory with selection at 1 MB/s (dense), a 10 Mbit/s wire with free
// selection (allgather or split).
CostModel denseForcingModel() {
  CostModel m = applyNetworkParams({}, 1e5, 0.001);
  m.gammaSelect = 1e-6;
  return m;
}
CostModel sparseForcingModel() { return applyNetworkParams({}, 0.01, 0.001); }

// The model's inputs for an autoConfig() compressor of n fp32 elements, as the
// compressor passes them on its first call: index encoding auto (the env
// default) and split's re-selection budget ceil(k/P) (SPCCL_SPLIT_RESELECT=1).
CostInputs autoInputs(size_t n) {
  const int p = worldSize();
  const uint64_t k = static_cast<uint64_t>(std::ceil(0.01 * static_cast<double>(n)));
  CostInputs inputs{p, n, k, 4, 4, -1, 0};
  inputs.keepPerRange = std::ceil(static_cast<double>(k) / p);
  return inputs;
}

// Compressed allreduces under auto with the calibrated model, then with
// models that force each algorithm: every call succeeds, auto's pick is the
// model's argmin on every rank, outputs are bitwise identical across ranks,
// and nothing is lost (sum of outputs + residuals = sum of inputs).
TEST(Calibrate, AutoCallsSucceedAndConserve) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const int p = worldSize();
  const size_t n = size_t{1} << 16;
  const spcclCompressConfig_t cfg = autoConfig(1);

  const CostModel forceDense = denseForcingModel(), forceSparse = sparseForcingModel();
  CostModel manyRounds = applyNetworkParams({}, 0.01, 1e5);  // 0.1 s per round
  const CostModel calibrated = comm.c->costModel;
  std::vector<int> picked;
  for (const CostModel& model : {calibrated, forceDense, forceSparse, manyRounds}) {
    comm.c->costModel = model;  // the same on every rank
    spcclCompressor_t c = nullptr;
    ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &c), comm.c, "create"));
    ConservedCalls calls(comm.c, c, n);
    bool ok = true;
    int algorithm = 0;
    for (int call = 0; call < 4 && ok; ++call) {
      ok = calls.call(static_cast<unsigned>(1000 * call));
      spcclStats_t st{};
      ASSERT_EQ(spcclCompressorGetStats(c, &st), spcclSuccess);
      algorithm = st.lastAlgorithm;
    }
    ASSERT_TRUE(ok);
    // The pick is the model's argmin for this call's inputs.
    const CostInputs inputs = autoInputs(n);
    if (model.alpha != calibrated.alpha || p == 1) {
      const int expected = chooseAlgorithm(inputs, model);
      // split's measured merge size may move its cost after the first call;
      // the forcing models are far from any tie.
      EXPECT_EQ(algorithm, expected) << show(model);
    }
    int all = 0;
    MPI_Allreduce(&algorithm, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(all, algorithm) << "ranks took different algorithms";
    picked.push_back(algorithm);

    const double worst = calls.worstImbalance();
    EXPECT_LT(worst, 1e-4) << "conservation, algorithm " << algorithm;
    spcclCompressorDestroy(c);
  }
  // The forcing models really reach different algorithms.
  ASSERT_EQ(picked.size(), 4u);
  EXPECT_EQ(picked[1], SPCCL_ALGO_DENSE);
  EXPECT_NE(picked[2], SPCCL_ALGO_DENSE);
  EXPECT_EQ(picked[3], SPCCL_ALGO_ALLGATHER);  // fewest rounds
}

// SPCCL_AUTO_TRIALS=2 (set on the communicator's params, as at creation):
// call 0 takes the model's pick, calls 1..C x trialCallsPerCandidate(2) run
// the C candidates that many calls each (two blocks of consecutive calls per candidate, the first
// calls of each uncounted: tuner_test checks the schedule),
// then every rank settles on the same one and keeps it; through every switch
// the outputs stay bitwise equal across ranks and nothing is lost; dense's
// trial calls leave the residual exactly as they found it. The model
// is one where rounds dominate, so all three algorithms are candidates. Which
// one wins is a matter of timing and is not asserted (tests/unit/tuner_test
// checks the pick from given times).
TEST(Calibrate, AutoTrialsRunEveryCandidateThenSettleAlike) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const int p = worldSize();
  const size_t n = size_t{1} << 16;
  comm.c->costModel = applyNetworkParams({}, 100.0, 1e5);  // 0.1 s per round
  comm.c->params.autoTrials = 2;
  const spcclCompressConfig_t cfg = autoConfig(0);
  const CostInputs inputs = autoInputs(n);
  const std::vector<int> candidates = trialCandidates(inputs, comm.c->costModel);
  if (p > 1) {
    ASSERT_EQ(candidates.size(), 3u) << "the test wants every algorithm timed";
  }
  const size_t perCandidate = trialCallsPerCandidate(2);
  const size_t c = candidates.size(), trialCalls = c > 1 ? perCandidate * c : 0, calls = 1 + trialCalls + 3;

  spcclCompressor_t comp = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &comp), comm.c, "create"));
  ConservedCalls conserved(comm.c, comp, n);
  std::vector<int> took;
  std::vector<float> before(n), after(n);
  size_t heldDense = 0;
  for (size_t call = 0; call < calls; ++call) {
    ASSERT_EQ(spcclCompressorGetResidual(comp, before.data(), n), spcclSuccess);
    ASSERT_TRUE(conserved.call(static_cast<unsigned>(77 * call)));
    spcclStats_t st{};
    ASSERT_EQ(spcclCompressorGetStats(comp, &st), spcclSuccess);
    took.push_back(st.lastAlgorithm);
    // A dense trial sends the input alone and holds the residual back, bit for bit.
    ASSERT_EQ(spcclCompressorGetResidual(comp, after.data(), n), spcclSuccess);
    if (call >= 1 && call <= trialCalls && st.lastAlgorithm == SPCCL_ALGO_DENSE) {
      EXPECT_EQ(std::memcmp(before.data(), after.data(), n * sizeof(float)), 0) << "dense trial call " << call;
      heldDense += std::any_of(after.begin(), after.end(), [](float x) { return x != 0.0f; });
    }
    int lo = 0, hi = 0;
    MPI_Allreduce(&st.lastAlgorithm, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&st.lastAlgorithm, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << "ranks ran different algorithms at call " << call;
  }
  EXPECT_EQ(took[0], chooseAlgorithm(inputs, comm.c->costModel)) << "call 0 takes the model's pick";
  for (size_t call = 1; call <= trialCalls; ++call)
    EXPECT_EQ(took[call], candidates[trialCall(call - 1, c, 2).slot]) << "trial call " << call;
  // With three candidates: each ran perCandidate calls, in two blocks of consecutive calls.
  if (c == 3) {
    for (int algorithm : {SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
      size_t ran = 0, blocks = 0;
      for (size_t call = 1; call <= trialCalls; ++call) {
        ran += took[call] == algorithm;
        blocks += took[call] == algorithm && took[call - 1] != algorithm;
      }
      EXPECT_EQ(ran, perCandidate) << algorithmName(algorithm);
      EXPECT_LE(blocks, 2u) << algorithmName(algorithm);
    }
    // Call 0 (the model's pick: allgather, fewest rounds) filled the residual the dense trials hold.
    EXPECT_EQ(heldDense, perCandidate) << "the dense trials held a non-empty residual";
  }
  const int settled = took[trialCalls + 1];
  EXPECT_EQ(std::count(candidates.begin(), candidates.end(), settled), 1) << algorithmName(settled);
  for (size_t call = trialCalls + 1; call < calls; ++call) EXPECT_EQ(took[call], settled) << "call " << call;

  const double worst = conserved.worstImbalance();
  EXPECT_LT(worst, 1e-4) << "conservation across the algorithm switches";
  spcclCompressorDestroy(comp);
}

// SPCCL_AUTO_TRIALS=1 on the communicator, under a model where rounds
// dominate (every algorithm a candidate): the candidates an n-element
// autoConfig() compressor times.
std::vector<int> oneTrialEach(spcclComm_t comm, size_t n) {
  comm->costModel = applyNetworkParams({}, 100.0, 1e5);
  comm->params.autoTrials = 1;
  return trialCandidates(autoInputs(n), comm->costModel);
}

// An auto compressor's trials open each call with an exchange of their own:
// a line-up before each trial call, a settling exchange before the first call
// after them. A mismatched program that meets either (one rank in the
// compressor's call, the others in an exact alltoall) fails on every rank
// with spcclInvalidUsage that names both calls, instead of leaving the ranks
// in different MPI collectives (a one-float allreduce was the line-up until
// this test's commit; Open MPI hung there). The failed call advances nothing:
// the program, back in step, runs an exact call, then the whole trial
// schedule in order, settles alike on every rank, and conserves.
TEST(Calibrate, AutoTrialsMeetMismatchedCallsWithAnError) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const int p = worldSize(), rank = worldRank();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  const size_t n = size_t{1} << 12;
  const spcclCompressConfig_t cfg = autoConfig(0);
  const std::vector<int> candidates = oneTrialEach(comm.c, n);
  ASSERT_EQ(candidates.size(), 3u) << "the test wants a trial schedule";
  const size_t trialCalls = candidates.size() * trialCallsPerCandidate(1);

  spcclCompressor_t comp = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &comp), comm.c, "create"));
  ConservedCalls conserved(comm.c, comp, n);
  std::vector<float> send(n * static_cast<size_t>(p)), recv(send.size());
  // An exact alltoall on every rank: it succeeds and moves every block, so the ranks are in step.
  auto exactAlltoAll = [&](float tag) {
    for (int to = 0; to < p; ++to)
      std::fill_n(send.begin() + static_cast<long>(to) * static_cast<long>(n), n, tag + 10.0f * rank + to);
    if (!okOnAllRanks(spcclAlltoAll(send.data(), recv.data(), n, spcclFloat32, comm.c, nullptr), comm.c, "alltoall"))
      return false;
    for (int from = 0; from < p; ++from)
      EXPECT_EQ(recv[static_cast<size_t>(from) * n + n - 1], tag + 10.0f * from + rank) << "block from " << from;
    return true;
  };
  // Rank `odd` calls the compressor, the others an exact alltoall of as many elements.
  auto mismatch = [&](int odd, const char* expect) {
    const spcclResult_t r =
        rank == odd ? spcclAllReduceCompressed(conserved.in.data(), conserved.out.data(), spcclSum, comp, nullptr)
                    : spcclAlltoAll(send.data(), recv.data(), n, spcclFloat32, comm.c, nullptr);
    EXPECT_TRUE(allRanks(r == spcclInvalidUsage)) << "rank " << rank << ": " << spcclGetErrorString(r);
    const std::string message = spcclGetLastError(comm.c);
    EXPECT_NE(message.find("mismatched collective call"), std::string::npos) << message;
    EXPECT_NE(message.find(expect), std::string::npos) << message;
    EXPECT_NE(message.find("an exact alltoall"), std::string::npos) << message;
  };

  std::vector<int> took;
  auto compressed = [&](unsigned seed) {
    if (!conserved.call(seed)) return false;
    spcclStats_t st{};
    EXPECT_EQ(spcclCompressorGetStats(comp, &st), spcclSuccess);
    took.push_back(st.lastAlgorithm);
    int lo = 0, hi = 0;
    MPI_Allreduce(&st.lastAlgorithm, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&st.lastAlgorithm, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_EQ(lo, hi) << "ranks ran different algorithms at call " << took.size() - 1;
    return true;
  };
  ASSERT_TRUE(compressed(1));    // call 0: the model's pick, no exchange of its own
  mismatch(0, "trial line-up");  // meets trial call 0's line-up
  ASSERT_TRUE(exactAlltoAll(1.0f));
  for (size_t i = 0; i < trialCalls; ++i) {
    if (i == trialCalls / 2) {  // mid-schedule, the odd rank last
      mismatch(p - 1, "trial line-up");
      ASSERT_TRUE(exactAlltoAll(2.0f));
    }
    ASSERT_TRUE(compressed(static_cast<unsigned>(100 + i)));
  }
  mismatch(p - 1, "settling its trials");  // meets the settling exchange
  ASSERT_TRUE(exactAlltoAll(3.0f));
  for (unsigned i = 0; i < 3; ++i) ASSERT_TRUE(compressed(200 + i));

  // The schedule ran in order through the failed calls, and every rank settled alike.
  ASSERT_EQ(took.size(), 1 + trialCalls + 3);
  for (size_t call = 1; call <= trialCalls; ++call)
    EXPECT_EQ(took[call], candidates[trialCall(call - 1, candidates.size(), 1).slot]) << "trial call " << call;
  const int settled = took[trialCalls + 1];
  EXPECT_EQ(std::count(candidates.begin(), candidates.end(), settled), 1) << algorithmName(settled);
  for (size_t call = trialCalls + 1; call < took.size(); ++call) EXPECT_EQ(took[call], settled) << "call " << call;
  spcclStats_t st{};
  ASSERT_EQ(spcclCompressorGetStats(comp, &st), spcclSuccess);
  EXPECT_EQ(st.calls, took.size()) << "the failed calls count nowhere";
  EXPECT_LT(conserved.worstImbalance(), 1e-4) << "conservation through the failed calls";
  spcclCompressorDestroy(comp);
}

// The same-shaped algorithm across ranks, algorithm by algorithm: gathers
// lastAlgorithm of the communicator's stats and checks it is one value.
int agreedLastAlgorithm(spcclComm_t comm, size_t call) {
  spcclStats_t st{};
  EXPECT_EQ(spcclCommGetStats(comm, &st), spcclSuccess);
  int lo = 0, hi = 0;
  MPI_Allreduce(&st.lastAlgorithm, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&st.lastAlgorithm, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "ranks ran different algorithms at call " << call;
  return st.lastAlgorithm;
}

// Auto's state (the trial schedule, the settled pick) belongs to the call
// shape, not to one compressor: two same-shaped compressors called in the
// opposite order on rank 0 (A, B) and the others (B, A), and a drop-in buffer
// that moves on one rank only (a new implicit compressor there), leave every
// rank on the same schedule and the same pick; a refused first call does not
// count as the shape's first. With per-compressor state each of these left
// the ranks out of step for good (every later call refused) or settled them
// on different algorithms.
TEST(Calibrate, AutoStateFollowsTheCallShape) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const int p = worldSize(), rank = worldRank();
  if (p < 2) GTEST_SKIP() << "a mismatch needs two ranks";
  const size_t n = size_t{1} << 12;
  const spcclCompressConfig_t cfg = autoConfig(0);
  const std::vector<int> candidates = oneTrialEach(comm.c, n);
  ASSERT_EQ(candidates.size(), 3u) << "the test wants a trial schedule";
  const size_t trialCalls = candidates.size() * trialCallsPerCandidate(1);

  spcclCompressor_t a = nullptr, b = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &a), comm.c, "create A"));
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &b), comm.c, "create B"));
  std::vector<float> in(n), out(n), send(n * static_cast<size_t>(p)), recv(send.size());
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i * 7919 + static_cast<size_t>(rank) * 31) % 1000) - 500;
  auto reduce = [&](spcclCompressor_t c) {
    return spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c, nullptr);
  };

  // Rank 0's first call of A meets an exact alltoall: refused everywhere, and not the shape's first call.
  const spcclResult_t refused =
      rank == 0 ? reduce(a) : spcclAlltoAll(send.data(), recv.data(), n, spcclFloat32, comm.c, nullptr);
  EXPECT_TRUE(allRanks(refused == spcclInvalidUsage)) << spcclGetErrorString(refused);
  ASSERT_TRUE(
      okOnAllRanks(spcclAlltoAll(send.data(), recv.data(), n, spcclFloat32, comm.c, nullptr), comm.c, "alltoall"));

  // The shape's first call (the model's), then its trial calls and the settled ones, A and B in turn
  // on rank 0 and B and A on the others: every call succeeds, and every rank runs one algorithm.
  std::vector<int> took;
  for (size_t call = 0; call < 1 + trialCalls + 4; call += 2) {
    ASSERT_TRUE(okOnAllRanks(reduce(rank == 0 ? a : b), comm.c, "first of the pair"));
    took.push_back(agreedLastAlgorithm(comm.c, call));
    ASSERT_TRUE(okOnAllRanks(reduce(rank == 0 ? b : a), comm.c, "second of the pair"));
    took.push_back(agreedLastAlgorithm(comm.c, call + 1));
  }
  EXPECT_EQ(took[0], chooseAlgorithm(autoInputs(n), comm.c->costModel)) << "the shape's first call: the model's";
  for (size_t call = 1; call <= trialCalls; ++call)
    EXPECT_EQ(took[call], candidates[trialCall(call - 1, candidates.size(), 1).slot]) << "trial call " << call;
  for (size_t call = trialCalls + 1; call < took.size(); ++call)
    EXPECT_EQ(took[call], took[trialCalls + 1]) << "settled, call " << call;
  spcclCompressorDestroy(a);
  spcclCompressorDestroy(b);

  // Drop-in calls of another shape: rank 1 alternates between two output
  // buffers (two implicit compressors there, one on the other ranks).
  const size_t m = size_t{1} << 13;
  comm.c->params.minCompressCount = 0;
  std::vector<float> dropIn(m, 1.0f), outs[2] = {std::vector<float>(m), std::vector<float>(m)};
  const size_t dropInTrials = trialCandidates(autoInputs(m), comm.c->costModel).size() * trialCallsPerCandidate(1);
  std::vector<int> dropInTook;
  for (size_t call = 0; call < 1 + dropInTrials + 3; ++call) {
    float* o = outs[rank == 1 ? call % 2 : 0].data();
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(dropIn.data(), o, m, spcclFloat32, spcclSum, comm.c, nullptr), comm.c,
                             "drop-in allreduce"));
    dropInTook.push_back(agreedLastAlgorithm(comm.c, call));
  }
  EXPECT_EQ(dropInTook[dropInTrials + 1], dropInTook.back()) << "settled";

  // What the descriptor does not carry is not part of the shape: compressors
  // that differ only in error feedback share one. Rank 0 calling one where the
  // others call the other passes the exchange (as it would without auto) and
  // advances the one shape on every rank; the calls after it still succeed.
  // An auto compressor against a fixed one of the same shape is refused, even
  // at the shape's first call, where auto takes the fixed algorithm's place.
  const size_t q = size_t{1} << 11;
  spcclCompressConfig_t noFeedback = cfg, fixed = cfg;
  noFeedback.errorFeedback = 0;
  fixed.algorithm = chooseAlgorithm(autoInputs(q), comm.c->costModel);
  spcclCompressor_t e = nullptr, f = nullptr, x = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, q, spcclFloat32, &cfg, &e), comm.c, "create E"));
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, q, spcclFloat32, &noFeedback, &f), comm.c, "create F"));
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, q, spcclFloat32, &fixed, &x), comm.c, "create X"));
  const spcclResult_t againstFixed = reduce(rank == 0 ? e : x);  // the q-shape's first call, auto on rank 0 only
  EXPECT_TRUE(allRanks(againstFixed == spcclInvalidUsage)) << spcclGetErrorString(againstFixed);
  EXPECT_NE(std::string(spcclGetLastError(comm.c)).find("auto flag"), std::string::npos) << spcclGetLastError(comm.c);
  for (size_t call = 0; call < 12; ++call) {
    ASSERT_TRUE(okOnAllRanks(reduce(call == 3 && rank == 0 ? e
                                    : call == 3            ? f
                                    : call % 2             ? e
                                                           : f),
                             comm.c, "E and F, one call crossed"));
    agreedLastAlgorithm(comm.c, call);
  }
  spcclCompressorDestroy(e);
  spcclCompressorDestroy(f);
  spcclCompressorDestroy(x);
}

// A dense call under auto sends the residual and zeroes it; tau was fitted to
// send + residual, so on the next sparse call it would select far fewer than
// k entries (and be re-estimated only by the call after that one). The
// compressor re-estimates tau exactly on the first compressed call after a
// dense one: k entries again. The model is switched between calls to force
// sparse, dense, sparse on one compressor.
TEST(Calibrate, SparseCallAfterDenseReestimatesTau) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const int rank = worldRank();
  const size_t n = size_t{1} << 16;
  spcclCompressConfig_t cfg = autoConfig(1000);
  cfg.thresholdWarmup = 0;  // call 4 would be a warm-up estimate anyway: only the flush may make it estimate
  const uint64_t k = static_cast<uint64_t>(std::ceil(0.01 * n));
  const CostModel forceDense = denseForcingModel(), forceSparse = sparseForcingModel();
  spcclCompressor_t comp = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &comp), comm.c, "create"));
  std::vector<float> in(n), out(n);
  const CostModel* schedule[] = {&forceSparse, &forceSparse, &forceSparse, &forceDense, &forceSparse};
  spcclStats_t before{}, after{};
  for (size_t call = 0; call < std::size(schedule); ++call) {
    std::mt19937 gen(static_cast<unsigned>(31 * call + rank));
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < n; ++i) in[i] = normal(gen);  // distinct magnitudes: exactly k at a fresh tau
    comm.c->costModel = *schedule[call];
    ASSERT_EQ(spcclCompressorGetStats(comp, &before), spcclSuccess);
    ASSERT_TRUE(
        okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, comp, nullptr), comm.c, "allreduce"));
    ASSERT_EQ(spcclCompressorGetStats(comp, &after), spcclSuccess);
    const bool dense = schedule[call] == &forceDense;
    EXPECT_EQ(after.lastAlgorithm == SPCCL_ALGO_DENSE, dense) << "call " << call;
    // Call 0 estimates (the first call); calls 1-2 may (a stale tau that
    // selects more than the capacity); call 4 must, as it follows the flush.
    if (call == 0 || call == 4) {
      EXPECT_EQ(after.thresholdUpdates - before.thresholdUpdates, 1u) << "call " << call;
      EXPECT_EQ(after.lastSelected, k) << "call " << call;
    }
  }
  spcclCompressorDestroy(comp);
}

// Dense calls under auto, mixed with compressed ones: the first dense call
// after a compressed one sends send + residual and empties the residual in
// one pass; a dense call on an empty residual sends the input as it is (no
// staging pass). Both must conserve: outputs + residuals = inputs throughout,
// the residual is zero after every dense call, outputs agree bitwise across
// ranks, and a dense call on an empty residual returns the plain sum.
TEST(Calibrate, DenseCallsBetweenCompressedOnesConserve) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  const size_t n = size_t{1} << 14;
  const spcclCompressConfig_t cfg = autoConfig(1000);
  const CostModel forceDense = denseForcingModel(), forceSparse = sparseForcingModel();
  spcclCompressor_t comp = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &comp), comm.c, "create"));
  ConservedCalls conserved(comm.c, comp, n);
  const CostModel* schedule[] = {&forceDense,  &forceSparse, &forceSparse, &forceDense, &forceDense,
                                 &forceSparse, &forceDense,  &forceSparse, &forceSparse};
  std::vector<float> residual(n), plain(n);
  bool previousDense = true;  // the residual starts empty
  for (size_t call = 0; call < std::size(schedule); ++call) {
    const bool dense = schedule[call] == &forceDense;
    comm.c->costModel = *schedule[call];
    ASSERT_TRUE(conserved.call(static_cast<unsigned>(500 + 13 * call)));
    spcclStats_t st{};
    ASSERT_EQ(spcclCompressorGetStats(comp, &st), spcclSuccess);
    EXPECT_EQ(st.lastAlgorithm == SPCCL_ALGO_DENSE, dense) << "call " << call;
    ASSERT_EQ(spcclCompressorGetResidual(comp, residual.data(), n), spcclSuccess);
    const size_t nonZero =
        static_cast<size_t>(std::count_if(residual.begin(), residual.end(), [](float x) { return x != 0.0f; }));
    if (dense) {
      EXPECT_EQ(nonZero, 0u) << "call " << call << ": a dense call leaves the residual empty";
    } else {
      EXPECT_GT(nonZero, n / 2) << "call " << call << ": a compressed call at density 0.01 keeps most of v";
    }
    if (dense && previousDense) {  // nothing was added: the plain sum of the inputs
      MPI_Allreduce(conserved.in.data(), plain.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double worst = 0;
      for (size_t i = 0; i < n; ++i)
        worst =
            std::max(worst, std::abs(static_cast<double>(conserved.out[i]) - plain[i]) / (1.0 + std::abs(plain[i])));
      EXPECT_LT(worst, 1e-6) << "call " << call << ": dense on an empty residual against MPI_Allreduce";
    }
    const double worst = conserved.worstImbalance();
    EXPECT_LT(worst, 1e-4) << "conservation after call " << call;
    previousDense = dense;
  }
  spcclCompressorDestroy(comp);
}

// A dense call that sends a non-empty residual forms v = send + residual in
// recvbuff, in one pass. With recvbuff one element past sendbuff (overlapping,
// not in place) a forward pass wrote out[i] over send[i + 1] before reading
// it: every rank got a wrong sum. Two twin compressors take the same inputs,
// one with separate buffers and one with recvbuff = sendbuff + 1 (and then
// sendbuff = recvbuff + 1) on the dense calls: the outputs and residuals must
// be bitwise the same.
TEST(Calibrate, DenseFlushWithOverlappingBuffersMatchesSeparateBuffers) {
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  comm.c->params.autoTrials = 0;  // the model's pick on every call
  const int rank = worldRank();
  const size_t n = size_t{1} << 14;
  const spcclCompressConfig_t cfg = autoConfig(1000);
  const CostModel forceDense = denseForcingModel(), forceSparse = sparseForcingModel();
  spcclCompressor_t twin[2] = {nullptr, nullptr};
  for (spcclCompressor_t& c : twin)
    ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &c), comm.c, "create"));
  std::vector<float> in(n), out(n), overlap(n + 1), residual[2] = {std::vector<float>(n), std::vector<float>(n)};
  for (int call = 0; call < 6; ++call) {
    const bool dense = call % 2 == 1;  // sparse, dense, sparse, dense, ...
    comm.c->costModel = dense ? forceDense : forceSparse;
    for (size_t i = 0; i < n; ++i)
      in[i] = std::sin(0.37f * static_cast<float>(i + 7 * call) + static_cast<float>(rank));
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, twin[0], nullptr), comm.c,
                             "separate buffers"));
    const bool recvAhead = call % 4 == 1;  // recvbuff = sendbuff + 1 on call 1, sendbuff = recvbuff + 1 on call 3
    float* send = dense ? overlap.data() + (recvAhead ? 0 : 1) : in.data();
    float* recv = dense ? overlap.data() + (recvAhead ? 1 : 0) : overlap.data();
    if (dense) std::copy(in.begin(), in.end(), send);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(send, recv, spcclSum, twin[1], nullptr), comm.c,
                             dense ? "overlapping buffers" : "separate buffers (twin)"));
    spcclStats_t st{};
    ASSERT_EQ(spcclCompressorGetStats(twin[1], &st), spcclSuccess);
    ASSERT_EQ(st.lastAlgorithm == SPCCL_ALGO_DENSE, dense) << "call " << call;
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += std::memcmp(&out[i], &recv[i], sizeof(float)) != 0;
    EXPECT_EQ(bad, 0u) << "call " << call
                       << (dense ? (recvAhead ? ": recvbuff = sendbuff + 1" : ": sendbuff = recvbuff + 1") : "");
    for (int t = 0; t < 2; ++t) ASSERT_EQ(spcclCompressorGetResidual(twin[t], residual[t].data(), n), spcclSuccess);
    EXPECT_EQ(std::memcmp(residual[0].data(), residual[1].data(), n * sizeof(float)), 0)
        << "residual after call " << call;
  }
  for (spcclCompressor_t c : twin) spcclCompressorDestroy(c);
}

// SPCCL_INDEX_ENCODING, SPCCL_SPLIT_RESELECT and SPCCL_ERROR_FEEDBACK are local
// to each rank (docs/ENV.md, "When ranks set a variable differently"), but the
// model's inputs include the index encoding and split's re-selection budget:
// the odd ranks here (32-bit indices, no re-selection) would model a density
// of 0.6 as dense, the even ones as sparse, and auto calls were refused as
// mismatched on every rank. The model takes rank 0's values on every rank.
TEST(Calibrate, RankLocalSettingsLeaveAutoAlike) {
  const int rank = worldRank(), p = worldSize();
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  ScopedEnv calibrate("SPCCL_CALIBRATE", "0");
  ScopedEnv algo("SPCCL_ALGO", "auto");
  ScopedEnv density("SPCCL_ALLREDUCE_DENSITY", "0.6");
  ScopedEnv encoding("SPCCL_INDEX_ENCODING", rank % 2 ? "coo" : "auto");
  ScopedEnv reselect("SPCCL_SPLIT_RESELECT", rank % 2 ? "0" : "1");
  Comm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  comm.c->costModel = CostModel{};  // the defaults, the same on every rank
  const size_t n = size_t{1} << 18;
  const uint64_t k = static_cast<uint64_t>(std::ceil(0.6 * static_cast<double>(n)));
  CostInputs rank0{p, n, k, 4, 4, -1, 0};  // auto encoding, re-selection on
  rank0.keepPerRange = std::ceil(static_cast<double>(k) / p);
  const CostInputs odd{p, n, k, 4, 4, -1, 1};  // coo, no re-selection
  ASSERT_NE(chooseAlgorithm(rank0, CostModel{}), chooseAlgorithm(odd, CostModel{}))
      << "the test wants the odd ranks' own settings to model another pick";
  const int expected = chooseAlgorithm(rank0, CostModel{});

  // Drop-in calls (the communicator's settings) and an explicit compressor
  // whose config spcclCompressConfigInit filled from each rank's environment.
  std::vector<float> in(n), out(n);
  for (int call = 0; call < 3; ++call) {
    for (size_t i = 0; i < n; ++i)
      in[i] = std::sin(0.001f * static_cast<float>(i) * static_cast<float>(rank + 1) + call);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, spcclSum, comm.c, nullptr), comm.c,
                             "drop-in auto allreduce"));
    ASSERT_TRUE(identicalOnAllRanks(out.data(), n, sizeof(float)));
    spcclStats_t st{};
    ASSERT_EQ(spcclCommGetStats(comm.c, &st), spcclSuccess);
    EXPECT_EQ(st.lastAlgorithm, expected) << "rank 0's settings decide, call " << call;
  }
  spcclCompressConfig_t cfg{};
  ASSERT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
  spcclCompressor_t c = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(comm.c, n, spcclFloat32, &cfg, &c), comm.c, "create"));
  ConservedCalls calls(comm.c, c, n);
  bool ok = true;
  for (int call = 0; call < 3 && ok; ++call) ok = calls.call(static_cast<unsigned>(31 * call));
  EXPECT_TRUE(ok);
  if (ok) {
    EXPECT_LT(calls.worstImbalance(), 1e-4) << "conservation";
  }
  spcclCompressorDestroy(c);
}

}  // namespace
}  // namespace spccl::test
