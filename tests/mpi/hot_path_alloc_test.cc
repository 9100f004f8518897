// DESIGN.md: "No allocation on the hot path after the first call for a given
// shape: scratch buffers live in the compressor or communicator." Every host
// collective here makes its calls, then replays them with heap allocations
// counted (noAllocationOnReplay says why a replay): this binary replaces the
// global operator new, which every allocation of the C++ library goes
// through (Open MPI and UCX are C and allocate with malloc; they are not
// counted, and are not spccl's). A control test checks that the counter sees
// the library's allocations at all.
//
// Inputs are made before counting starts; nothing between the start and the
// stop of a count but spccl calls.
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "test_util.h"
#include "../common/replace_new.h"

namespace {
std::atomic<bool> gCounting{false};
std::atomic<unsigned long long> gAllocations{0};
}  // namespace

// tests/common/replace_new.h's hook: every allocation counts while counting.
void onAllocation(const void*) {
  if (gCounting.load(std::memory_order_relaxed)) gAllocations.fetch_add(1, std::memory_order_relaxed);
}

namespace spccl::test {
namespace {

constexpr int kCalls = 12;

// Scratch only grows (collectives/algorithms.h, Workspace), and how far
// depends on the data: a call that selects more entries than any before it
// may grow a buffer. So the counted calls replay calls already made: call(i)
// for i < kCalls first, then replay(0) uncounted and replay(1..kCalls-1)
// counted. A collective without state replays itself; a compressor's replay
// is a second compressor of the same shape fed the same inputs, whose first
// call allocates its residual (by contract) and whose later calls then do
// exactly what the first compressor's did. Any allocation counted is one the
// call makes every time, never a high-water mark. Every call must succeed on
// every rank, and the counted ones must not allocate on any rank.
testing::AssertionResult noAllocationOnReplay(spcclComm_t comm, const std::function<spcclResult_t(int)>& call,
                                              const std::function<spcclResult_t(int)>& replay, const char* what) {
  for (int i = 0; i < kCalls; ++i) {
    testing::AssertionResult ok = okOnAllRanks(call(i), comm, what);
    if (!ok) return ok;
  }
  {
    testing::AssertionResult ok = okOnAllRanks(replay(0), comm, what);
    if (!ok) return ok;
  }
  spcclResult_t worst = spcclSuccess;
  gAllocations.store(0);
  gCounting.store(true);
  for (int i = 1; i < kCalls; ++i) {
    const spcclResult_t r = replay(i);
    if (r != spcclSuccess && worst == spcclSuccess) worst = r;
  }
  gCounting.store(false);
  const unsigned long long allocations = gAllocations.load();
  testing::AssertionResult ok = okOnAllRanks(worst, comm, what);
  if (!ok) return ok;
  const std::string allocating = ranksWhere(allocations != 0);
  if (allocating.empty()) return testing::AssertionSuccess();
  return testing::AssertionFailure() << what << ": heap allocations in " << kCalls - 1 << " replayed calls on rank(s) "
                                     << allocating << "; here (rank " << worldRank() << ") " << allocations;
}

testing::AssertionResult noAllocationOnReplay(spcclComm_t comm, const std::function<spcclResult_t(int)>& call,
                                              const char* what) {
  return noAllocationOnReplay(comm, call, call, what);
}

// A communicator over MPI_COMM_WORLD for the life of the object; r is the
// init's result.
struct WorldComm {
  spcclComm_t c = nullptr;
  spcclResult_t r = spcclCommInitMPI(&c, MPI_COMM_WORLD);
  WorldComm() = default;
  WorldComm(const WorldComm&) = delete;
  WorldComm& operator=(const WorldComm&) = delete;
  ~WorldComm() {
    if (c) spcclCommDestroy(c);
  }
};

// The environment's defaults, density 0.01 and the given algorithm.
spcclCompressConfig_t configFor(int algorithm) {
  spcclCompressConfig_t cfg;
  EXPECT_EQ(spcclCompressConfigInit(&cfg), spcclSuccess);
  cfg.density = 0.01f;
  cfg.algorithm = algorithm;
  return cfg;
}

// Two compressors of one shape and config: the first's calls, and the
// twin that replays them.
struct Twins {
  CompressorPtr first, twin;
};
testing::AssertionResult makeTwins(spcclComm_t c, size_t n, spcclDataType_t type, const spcclCompressConfig_t& cfg,
                                   Twins* out) {
  for (CompressorPtr* owner : {&out->first, &out->twin}) {
    spcclCompressor_t raw = nullptr;
    testing::AssertionResult ok = okOnAllRanks(spcclCompressorCreate(c, n, type, &cfg, &raw), c, "create");
    owner->reset(raw);
    if (!ok) return ok;
  }
  return testing::AssertionSuccess();
}

// Fresh inputs for every call, made before counting starts.
std::vector<std::vector<float>> inputs(size_t n, uint64_t tag) {
  std::vector<std::vector<float>> v;
  for (int i = 0; i < kCalls; ++i) v.push_back(gaussian(n, seedFor(tag, worldRank(), static_cast<uint64_t>(i))));
  return v;
}

// The control: the counter sees the library's allocations (a replaced
// operator new in the executable also serves libspccl.so), here the
// residual buffers of a compressor's first compressed call.
TEST(WarmCalls, CounterSeesTheLibrarysFirstCallAllocations) {
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t n = 20000;
  const spcclCompressConfig_t cfg = configFor(SPCCL_ALGO_ALLGATHER);
  spcclCompressor_t raw = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCompressorCreate(c, n, spcclFloat32, &cfg, &raw), c, "create"));
  CompressorPtr comp(raw);
  const std::vector<float> in = gaussian(n, seedFor(8, worldRank()));
  std::vector<float> out(n);
  gAllocations.store(0);
  gCounting.store(true);
  const spcclResult_t r = spcclAllReduceCompressed(in.data(), out.data(), spcclSum, raw, nullptr);
  gCounting.store(false);
  ASSERT_TRUE(okOnAllRanks(r, c, "spcclAllReduceCompressed"));
  EXPECT_EQ(ranksWhere(gAllocations.load() == 0), "") << "a first call counted no allocation";
}

struct AllreduceCase {
  int algorithm;
  spcclDataType_t wire;
};

class WarmAllreduce : public testing::TestWithParam<AllreduceCase> {};

// Each algorithm and wire type: a compressor's calls on fresh data, with the
// threshold re-estimated now and then (the young residual makes the stored
// tau select too few or too many) and on every fourth call.
TEST_P(WarmAllreduce, CompressorCallsDoNotAllocate) {
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t n = 20011;  // not a multiple of any rank count's ranges
  spcclCompressConfig_t cfg = configFor(GetParam().algorithm);
  cfg.wireValueType = GetParam().wire;
  cfg.thresholdInterval = 4;
  Twins twins;
  ASSERT_TRUE(makeTwins(c, n, spcclFloat32, cfg, &twins));
  const auto in = inputs(n, 1);
  std::vector<float> out(n);
  auto on = [&](spcclCompressor_t comp) {
    return [&, comp](int i) {
      return spcclAllReduceCompressed(in[static_cast<size_t>(i)].data(), out.data(), spcclSum, comp, nullptr);
    };
  };
  EXPECT_TRUE(noAllocationOnReplay(c, on(twins.first.get()), on(twins.twin.get()), "spcclAllReduceCompressed"));
}

INSTANTIATE_TEST_SUITE_P(
    AlgorithmsAndWires, WarmAllreduce,
    testing::Values(AllreduceCase{SPCCL_ALGO_ALLGATHER, spcclFloat32}, AllreduceCase{SPCCL_ALGO_SPLIT, spcclFloat32},
                    AllreduceCase{SPCCL_ALGO_DENSE, spcclFloat32}, AllreduceCase{SPCCL_ALGO_AUTO, spcclFloat32},
                    AllreduceCase{SPCCL_ALGO_ALLGATHER, spcclFloat16}, AllreduceCase{SPCCL_ALGO_SPLIT, spcclBfloat16},
                    AllreduceCase{SPCCL_ALGO_SPLIT, spcclFloat8e4m3}),
    [](const testing::TestParamInfo<AllreduceCase>& c) {
      return std::string(algorithmName(c.param.algorithm)) + "_" + typeName(c.param.wire);
    });

// fp16 buffers: widened into the communicator's scratch, not a new vector.
TEST(WarmCalls, HalfCompressorDoesNotAllocate) {
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t n = 20000;
  const spcclCompressConfig_t cfg = configFor(SPCCL_ALGO_SPLIT);
  Twins twins;
  ASSERT_TRUE(makeTwins(c, n, spcclFloat16, cfg, &twins));
  std::vector<std::vector<uint16_t>> in;
  for (const auto& v : inputs(n, 2)) {
    in.emplace_back(n);
    for (size_t j = 0; j < n; ++j) in.back()[j] = floatToHalf(v[j]);
  }
  std::vector<uint16_t> out(n);
  auto on = [&](spcclCompressor_t comp) {
    return [&, comp](int i) {
      return spcclAllReduceCompressed(in[static_cast<size_t>(i)].data(), out.data(), spcclSum, comp, nullptr);
    };
  };
  EXPECT_TRUE(noAllocationOnReplay(c, on(twins.first.get()), on(twins.twin.get()), "spcclAllReduceCompressed (fp16)"));
}

// The drop-in allreduce finds its implicit compressor by (recvbuff, count,
// datatype); exact calls (ints, small buffers) take the dense path.
TEST(WarmCalls, DropInAllReduceDoesNotAllocate) {
  ScopedEnv minCount("SPCCL_MIN_COMPRESS_COUNT", "1024");
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t n = 5000;
  const auto in = inputs(n, 3);
  // The replay's recvbuff is another buffer: another implicit compressor.
  std::vector<float> out(n), replayOut(n), small(100, 1.0f), smallOut(100);
  std::vector<int> ints(300, 1), intsOut(300);
  auto into = [&](std::vector<float>& dst) {
    return [&](int i) {
      spcclResult_t r =
          spcclAllReduce(in[static_cast<size_t>(i)].data(), dst.data(), n, spcclFloat, spcclSum, c, nullptr);
      if (r == spcclSuccess)
        r = spcclAllReduce(small.data(), smallOut.data(), small.size(), spcclFloat, spcclSum, c, nullptr);
      if (r == spcclSuccess)
        r = spcclAllReduce(ints.data(), intsOut.data(), ints.size(), spcclInt32, spcclMax, c, nullptr);
      return r;
    };
  };
  EXPECT_TRUE(noAllocationOnReplay(c, into(out), into(replayOut), "spcclAllReduce"));
}

// Exact drop-in alltoall and allgather, then the sparsified allgather and
// the row-compressed drop-in alltoall.
TEST(WarmCalls, DropInAlltoallAndAllgatherDoNotAllocate) {
  const size_t block = 4096;
  const size_t p = static_cast<size_t>(worldSize());
  std::vector<float> send = gaussian(block * p, seedFor(4, worldRank())), recv(block * p);
  for (int mode = 0; mode < 2; ++mode) {
    SCOPED_TRACE(mode == 0 ? "exact" : "compressed");
    ScopedEnv a2aDensity("SPCCL_ALLTOALL_DENSITY", mode == 0 ? "1" : "0.125");
    ScopedEnv rowLen("SPCCL_ALLTOALL_ROW_LEN", "128");
    ScopedEnv agDensity("SPCCL_ALLGATHER_DENSITY", mode == 0 ? "1" : "0.05");
    WorldComm comm;
    ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
    spcclComm_t c = comm.c;
    EXPECT_TRUE(noAllocationOnReplay(
        c, [&](int) { return spcclAlltoAll(send.data(), recv.data(), block, spcclFloat, c, nullptr); },
        "spcclAlltoAll"));
    EXPECT_TRUE(noAllocationOnReplay(
        c, [&](int) { return spcclAllGather(send.data(), recv.data(), block, spcclFloat, c, nullptr); },
        "spcclAllGather"));
  }
}

// DCT-MP forward without a kept selection (the positions come from the
// communicator's pool), the backward, and a training step's loop.
TEST(WarmCalls, RowsForwardAndBackwardDoNotAllocate) {
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t p = static_cast<size_t>(worldSize()), rowsPerPeer = 40, rowLen = 128;
  const size_t n = p * rowsPerPeer * rowLen;
  const auto in = inputs(n, 5);
  std::vector<float> out(n), grad = gaussian(n, seedFor(6, worldRank())), gradOut(n);
  EXPECT_TRUE(noAllocationOnReplay(
      c,
      [&](int i) {
        return spcclAlltoAllRowsCompressed(in[static_cast<size_t>(i)].data(), out.data(), rowsPerPeer, rowLen,
                                           spcclFloat, 0.0625f, nullptr, c, nullptr);
      },
      "spcclAlltoAllRowsCompressed (selection not kept)"));
  // The backward: two selections of each forward, the second set replaying
  // the first. A kept forward allocates its selection (the handle and its
  // positions, the caller's until spcclSelectionDestroy): not counted.
  std::vector<SelectionPtr> selections;
  for (int round = 0; round < 2; ++round)
    for (int i = 0; i < kCalls; ++i) {
      spcclSelection_t sel = nullptr;
      ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(in[static_cast<size_t>(i)].data(), out.data(), rowsPerPeer,
                                                           rowLen, spcclFloat, 0.0625f, &sel, c, nullptr),
                               c, "spcclAlltoAllRowsCompressed"));
      selections.emplace_back(sel);
    }
  auto backward = [&](int round) {
    return [&, round](int i) {
      return spcclAlltoAllRowsBackward(grad.data(), gradOut.data(),
                                       selections[static_cast<size_t>(round * kCalls + i)].get(), nullptr);
    };
  };
  EXPECT_TRUE(noAllocationOnReplay(c, backward(0), backward(1), "spcclAlltoAllRowsBackward"));
  selections.clear();

  // A training step's loop: forward keeping the selection, backward,
  // destroy. The positions come from the communicator's pool (src/comm.h),
  // so each step allocates only the handle the caller owns and its entry in
  // the registry of live selections: two allocations, whatever the size.
  auto trainingStep = [&](int i) {
    spcclSelection_t sel = nullptr;
    spcclResult_t r = spcclAlltoAllRowsCompressed(in[static_cast<size_t>(i)].data(), out.data(), rowsPerPeer, rowLen,
                                                  spcclFloat, 0.0625f, &sel, c, nullptr);
    if (r == spcclSuccess) r = spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr);
    if (sel != nullptr) spcclSelectionDestroy(sel);
    return r;
  };
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(okOnAllRanks(trainingStep(i), c, "rows forward + backward"));
  gAllocations.store(0);
  gCounting.store(true);
  spcclResult_t worst = spcclSuccess;
  for (int i = 0; i < kCalls; ++i) {
    const spcclResult_t r = trainingStep(i);
    if (r != spcclSuccess && worst == spcclSuccess) worst = r;
  }
  gCounting.store(false);
  ASSERT_TRUE(okOnAllRanks(worst, c, "rows forward + backward"));
  const unsigned long long perStep = gAllocations.load() / kCalls, total = gAllocations.load();
  EXPECT_EQ(ranksWhere(total > 2ull * kCalls), "")
      << "rank " << worldRank() << ": " << total << " allocations in " << kCalls << " steps (" << perStep
      << " a step; the handle and its registry entry are 2)";
}

// Row-sparse allreduce: ids merged, exchanged and summed in the
// communicator's scratch.
TEST(WarmCalls, RowSparseAllReduceDoesNotAllocate) {
  WorldComm comm;
  ASSERT_TRUE(okOnAllRanks(comm.r, comm.c, "spcclCommInitMPI"));
  spcclComm_t c = comm.c;
  const size_t nrows = 300, rowLen = 16, capacity = nrows * static_cast<size_t>(worldSize());
  std::vector<int64_t> ids(nrows), outIds(capacity);
  for (size_t i = 0; i < nrows; ++i)
    ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(worldRank()) * 13) % 1000);
  const std::vector<float> rows = gaussian(nrows * rowLen, seedFor(7, worldRank()));
  std::vector<float> outRows(capacity * rowLen);
  size_t outNrows = 0;
  EXPECT_TRUE(noAllocationOnReplay(
      c,
      [&](int) {
        return spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat, outIds.data(),
                                       outRows.data(), capacity, &outNrows, c, nullptr);
      },
      "spcclAllReduceRowSparse"));
}

}  // namespace
}  // namespace spccl::test
