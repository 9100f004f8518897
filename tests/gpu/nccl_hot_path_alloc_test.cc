// DESIGN.md: "No allocation on the hot path after the first call for a given
// shape" on the device path too (the host path's tests/mpi/hot_path_alloc_test.cc):
// every collective on an NCCL communicator makes its calls, then repeats them
// with heap allocations counted. This binary replaces the global operator
// new and counts only allocations whose caller lies in libspccl's image
// (dladdr of the return address): NCCL and the CUDA runtime may allocate
// for their own reasons, which are not spccl's per-call scratch. cudaMalloc
// (grow-only device scratch) is not a heap allocation and is not counted.
//
// Run under mpirun with one rank per GPU; without enough GPUs it skips.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "spccl.h"
#include "spccl_nccl.h"
#include "device_count.h"

namespace {
std::atomic<bool> gCounting{false};
std::atomic<unsigned long long> gAllocations{0};
// Whether code at addr is libspccl.so's (by the file name of the image that
// holds it: the address of an imported function may be the executable's PLT).
bool inSpccl(const void* addr) {
  Dl_info info{};
  if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  return std::strncmp(slash ? slash + 1 : info.dli_fname, "libspccl.so", 11) == 0;
}

}  // namespace

// tests/common/replace_new.h's hook: only allocations made from libspccl.so count.
void onAllocation(const void* caller) {
  if (gCounting.load(std::memory_order_relaxed) && inSpccl(caller))
    gAllocations.fetch_add(1, std::memory_order_relaxed);
}

#include "../common/replace_new.h"

namespace {

constexpr int kWarm = 3, kCounted = 6;

// The same verdict on every rank: any rank's failure or allocation fails all.
bool allRanks(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

class NcclWarmCalls : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    const int gpus = deviceCount();
    if (gpus < ranks_) GTEST_SKIP() << ranks_ << " ranks need as many CUDA devices; " << gpus << " present";
    ASSERT_EQ(cudaSuccess, cudaSetDevice(rank_ % gpus));
    ncclUniqueId id;
    if (rank_ == 0) {
      ASSERT_EQ(ncclSuccess, ncclGetUniqueId(&id));
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclSuccess, ncclCommInitRank(&nccl_, ranks_, id, rank_));
    // The sparsified allgather is chosen by the environment at creation.
    setenv("SPCCL_ALLGATHER_DENSITY", "0.1", 1);
    const spcclResult_t r = spcclCommInitNccl(&comm_, nccl_);
    unsetenv("SPCCL_ALLGATHER_DENSITY");
    ASSERT_EQ(spcclSuccess, r) << spcclGetLastError(nullptr);
    ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (comm_) {
      EXPECT_EQ(spcclSuccess, spcclCommDestroy(comm_));
    }
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  // kWarm calls, then kCounted more with spccl's heap allocations counted.
  void expectNoAllocationWhenWarm(const std::function<spcclResult_t()>& call, const char* what) {
    SCOPED_TRACE(what);
    bool ok = true;
    for (int i = 0; i < kWarm && ok; ++i) ok = call() == spcclSuccess;
    ok = ok && cudaStreamSynchronize(stream_) == cudaSuccess;
    ASSERT_TRUE(allRanks(ok)) << "warm-up calls failed: " << spcclGetLastError(comm_);
    gAllocations.store(0);
    gCounting.store(true);
    for (int i = 0; i < kCounted && ok; ++i) ok = call() == spcclSuccess;
    gCounting.store(false);
    const unsigned long long allocations = gAllocations.load();
    ok = ok && cudaStreamSynchronize(stream_) == cudaSuccess;
    ASSERT_TRUE(allRanks(ok)) << "counted calls failed: " << spcclGetLastError(comm_);
    EXPECT_TRUE(allRanks(allocations == 0))
        << "heap allocations by spccl in " << kCounted << " warm calls, on this rank " << allocations;
  }

  int rank_ = 0, ranks_ = 1;
  ncclComm_t nccl_ = nullptr;
  spcclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

template <typename T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t count, const std::vector<T>& init = {}) {
    cudaMalloc(&p, (count ? count : 1) * sizeof(T));
    cudaMemset(p, 0, (count ? count : 1) * sizeof(T));
    if (!init.empty()) cudaMemcpy(p, init.data(), init.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~Dev() { cudaFree(p); }
};

std::vector<float> ramp(size_t n, int rank) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((i * 2654435761u + 97u * static_cast<unsigned>(rank)) % 10007) - 5003.0f;
  return v;
}

TEST_F(NcclWarmCalls, CollectivesDoNotAllocateOnceWarm) {
  const size_t n = 65536, P = static_cast<size_t>(ranks_);
  Dev<float> in(n * P, ramp(n * P, rank_)), out(n * P), grad(n * P, ramp(n * P, rank_ + 1)), gradOut(n * P);
  Dev<int32_t> ints(n * P);

  spcclCompressConfig_t cfg;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&cfg));
  cfg.density = 0.01f;
  cfg.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t c = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(comm_, n, spcclFloat32, &cfg, &c));
  // The control: the counter sees libspccl's allocations at all (a first
  // call makes the compressor's device state).
  gAllocations.store(0);
  gCounting.store(true);
  const spcclResult_t first = spcclAllReduceCompressed(in.p, out.p, spcclSum, c, stream_);
  gCounting.store(false);
  ASSERT_TRUE(allRanks(first == spcclSuccess)) << spcclGetLastError(comm_);
  EXPECT_TRUE(allRanks(gAllocations.load() > 0)) << "a first call counted no allocation in libspccl.so";
  expectNoAllocationWhenWarm([&] { return spcclAllReduceCompressed(in.p, out.p, spcclSum, c, stream_); },
                             "spcclAllReduceCompressed");
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(c));

  expectNoAllocationWhenWarm([&] { return spcclAllReduce(ints.p, ints.p, 1000, spcclInt32, spcclSum, comm_, stream_); },
                             "spcclAllReduce (exact)");
  expectNoAllocationWhenWarm([&] { return spcclAllGather(ints.p + rank_ * n, ints.p, n, spcclInt32, comm_, stream_); },
                             "spcclAllGather (exact, in place)");
  expectNoAllocationWhenWarm([&] { return spcclAlltoAll(ints.p, ints.p, n, spcclInt32, comm_, stream_); },
                             "spcclAlltoAll (exact, in place)");
  expectNoAllocationWhenWarm([&] { return spcclAllGather(in.p, out.p, n, spcclFloat32, comm_, stream_); },
                             "spcclAllGather (SPCCL_ALLGATHER_DENSITY=0.1)");

  const size_t rowLen = 256, rowsPerPeer = n / rowLen;
  expectNoAllocationWhenWarm(
      [&] {
        return spcclAlltoAllRowsCompressed(in.p, out.p, rowsPerPeer, rowLen, spcclFloat32, 0.1f, nullptr, comm_,
                                           stream_);
      },
      "spcclAlltoAllRowsCompressed (selection not kept)");
  // Backward: selections made first (a kept selection is a handle, allocated
  // by contract), then kWarm + kCounted backwards, one each.
  std::vector<spcclSelection_t> selections(kWarm + kCounted, nullptr);
  for (spcclSelection_t& s : selections)
    ASSERT_EQ(spcclSuccess,
              spcclAlltoAllRowsCompressed(in.p, out.p, rowsPerPeer, rowLen, spcclFloat32, 0.1f, &s, comm_, stream_));
  size_t next = 0;
  expectNoAllocationWhenWarm([&] { return spcclAlltoAllRowsBackward(grad.p, gradOut.p, selections[next++], stream_); },
                             "spcclAlltoAllRowsBackward");
  for (spcclSelection_t s : selections) EXPECT_EQ(spcclSuccess, spcclSelectionDestroy(s));

  const size_t nrows = 500, rl = 64, capacity = nrows * P;
  std::vector<int64_t> ids(nrows);
  for (size_t i = 0; i < nrows; ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(rank_) * 3) % 900);
  Dev<int64_t> dIds(nrows, ids), outIds(capacity);
  Dev<float> rows(nrows * rl, ramp(nrows * rl, rank_)), outRows(capacity * rl);
  size_t outNrows = 0;
  expectNoAllocationWhenWarm(
      [&] {
        return spcclAllReduceRowSparse(dIds.p, rows.p, nrows, rl, spcclFloat32, outIds.p, outRows.p, capacity,
                                       &outNrows, comm_, stream_);
      },
      "spcclAllReduceRowSparse");
}

}  // namespace
