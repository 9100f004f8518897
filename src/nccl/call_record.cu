// The call record's device steps (call_record.h): writing this rank's
// header, and the fixed-capacity verdict over every rank's records.
#include <cstring>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"
#include "src/nccl/call_record.h"

namespace spccl::cuda {

namespace {

constexpr int kThreads = 256;

// The header arrives as a kernel parameter, copied at launch: no pinned
// staging buffer to race with the next call, and a captured graph replays
// the value it was captured with.
__global__ void writeHeaderKernel(CallRecord* dst, CallRecordHeader h, const ThresholdOut* threshold,
                                  uint32_t* pending) {
  if (threadIdx.x == 0) {
    std::memcpy(dst->descriptor, h.descriptor, sizeof h.descriptor);
    dst->capacity = h.capacity;
    dst->slots = h.slots;
    dst->estimated = h.estimated;
    dst->tauKey = threshold != nullptr ? threshold->tauKey : 0u;
    // Every kernel of earlier calls has finished (stream order; a call on
    // another stream waits for the previous call's end): their bits are in.
    dst->asyncErrors = pending != nullptr ? atomicExch(pending, 0u) : 0u;
    dst->unused = 0;
  }
}

__global__ void resolveFixedKernel(const CallRecord* records, int ranks, uint64_t* nnz, uint32_t* reported) {
  __shared__ int mismatch;
  __shared__ unsigned int carried;
  if (threadIdx.x == 0) mismatch = 0, carried = 0;
  __syncthreads();
  for (int r = static_cast<int>(threadIdx.x); r < ranks; r += blockDim.x) {
    bool same = records[r].capacity == records[0].capacity;
    for (int b = 0; b < kRecordCheckedBytes; ++b) same = same && records[r].descriptor[b] == records[0].descriptor[b];
    for (int b = kRecordDensityOffset; b < kRecordDensityOffset + kRecordDensityAndFlagsBytes; ++b)
      same = same && records[r].descriptor[b] == records[0].descriptor[b];
    if (!same) atomicOr(&mismatch, 1);
    if (records[r].asyncErrors != 0) atomicOr(&carried, records[r].asyncErrors);
  }
  __syncthreads();
  for (int r = static_cast<int>(threadIdx.x); r < ranks; r += blockDim.x) {
    const uint64_t selected = records[r].counts.selected;
    const uint64_t cap = records[r].capacity;
    nnz[r] = mismatch ? 0 : (selected < cap ? selected : cap);
  }
  // The same records on every rank: the same counts on every rank. One
  // thread, and verdicts run in stream order: plain stores, made visible to
  // the host that polls them.
  const uint32_t bits = carried | (mismatch ? kAsyncMismatch : 0u);
  if (threadIdx.x == 0 && bits != 0 && reported != nullptr) {
    volatile uint32_t* counters = reported;
    for (int kind = 0; kind < kAsyncKinds; ++kind)
      if (bits & (1u << kind)) counters[kind] = counters[kind] + 1u;
    __threadfence_system();
  }
}

}  // namespace

Status writeCallRecordHeader(CallRecord* dst, const CallRecordHeader& header, const ThresholdOut* threshold,
                             uint32_t* pending, cudaStream_t stream) {
  if (dst == nullptr) return invalidArgument("writeCallRecordHeader: null record");
  writeHeaderKernel<<<1, 32, 0, stream>>>(dst, header, threshold, pending);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status resolveFixedCounts(const CallRecord* records, int ranks, uint64_t* nnz, uint32_t* reported,
                          cudaStream_t stream) {
  if (records == nullptr || nnz == nullptr || ranks < 1) return invalidArgument("resolveFixedCounts: bad arguments");
  resolveFixedKernel<<<1, kThreads, 0, stream>>>(records, ranks, nnz, reported);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace spccl::cuda
