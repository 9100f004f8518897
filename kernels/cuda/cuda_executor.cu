#include "kernels/cuda/cuda_executor.h"

#include "kernels/core/elementwise.h"
#include "kernels/core/types.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

namespace spccl::cuda {

CudaExecutor::~CudaExecutor() {
  release(&thresholdWorkspace_);
  release(&selectWorkspace_);
  release(&sectionWorkspace_);
  release(&mergeWorkspace_);
  release(&gatheredIds_);
  release(&gatheredRows_);
  release(&unorderedDevice_);
  release(&splitWorkspace_);
  release(&perOwnerDevice_);
  release(&crcWorkspace_);
  release(&rowChecks_);
  if (deviceSlots_ != nullptr) cudaFree(deviceSlots_);
  if (hostSlots_ != nullptr) cudaFreeHost(hostSlots_);
  if (findings_ != nullptr) cudaFreeHost(const_cast<uint32_t*>(findings_));
  for (void* p : retired_) cudaFree(p);
  if (deviceChecks_ != nullptr) cudaFree(deviceChecks_);
  if (hostChecks_ != nullptr) cudaFreeHost(hostChecks_);
  if (reselectThreshold_ != nullptr) cudaFree(reselectThreshold_);
}

Status CudaExecutor::grow(ExecBuffer* b, size_t bytes) {
  // Once a call has been captured in a CUDA graph (fixed mode), the old
  // allocation is kept, not freed, until the executor goes: the graph may
  // still use it. Growth is then geometric, so what is kept stays a bounded
  // multiple of the largest size. (cudaFree waits for the work that uses it.)
  if (b->ptr != nullptr) {
    if (captureSeen_) {
      retired_.push_back(b->ptr);
      bytes = std::max(bytes, b->bytes + b->bytes / 2);
    } else {
      cudaFree(b->ptr);
    }
  }
  *b = ExecBuffer{};
  void* p = nullptr;
  SPCCL_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  b->ptr = p;
  b->bytes = bytes;
  return Status::ok();
}

void CudaExecutor::release(ExecBuffer* b) {
  if (b->ptr != nullptr) cudaFree(b->ptr);
  *b = ExecBuffer{};
}

Status CudaExecutor::toHost(void* hostDst, const void* src, size_t bytes) {
  if (bytes > 0) SPCCL_CUDA_CHECK(cudaMemcpyAsync(hostDst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  return Status::ok();
}

Status CudaExecutor::fromHost(void* dst, const void* hostSrc, size_t bytes) {
  if (bytes > 0) SPCCL_CUDA_CHECK(cudaMemcpyAsync(dst, hostSrc, bytes, cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status CudaExecutor::fill(void* dst, unsigned char byte, size_t bytes) {
  if (bytes > 0) SPCCL_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream_));
  return Status::ok();
}

Status CudaExecutor::resultSlot(size_t bytes, void** device, size_t* slot) {
  if (bytes > kSlotBytes) return internalError("cuda executor: a result larger than its slot");
  if (pending_.size() == kSlots) return internalError("cuda executor: too many results before settle()");
  if (deviceSlots_ == nullptr) {
    SPCCL_CUDA_CHECK(cudaMalloc(&deviceSlots_, kSlotBytes * kSlots));
    SPCCL_CUDA_CHECK(cudaHostAlloc(&hostSlots_, kSlotBytes * kSlots, cudaHostAllocDefault));
  }
  *slot = pending_.size();
  *device = static_cast<char*>(deviceSlots_) + *slot * kSlotBytes;
  return Status::ok();
}

Status CudaExecutor::settle() {
  for (const Pending& p : pending_)
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(hostSlots_) + p.slot * kSlotBytes,
                                     static_cast<char*>(deviceSlots_) + p.slot * kSlotBytes, kSlotBytes,
                                     cudaMemcpyDeviceToHost, stream_));
  if (!pendingChecks_.empty()) {
    if (hostCheckCapacity_ < pendingChecks_.size()) {
      if (hostChecks_ != nullptr) cudaFreeHost(hostChecks_);
      hostChecks_ = nullptr;
      hostCheckCapacity_ = 0;
      SPCCL_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&hostChecks_),
                                     deviceCheckCapacity_ * sizeof(SectionCheck), cudaHostAllocDefault));
      hostCheckCapacity_ = deviceCheckCapacity_;
    }
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(hostChecks_, deviceChecks_, pendingChecks_.size() * sizeof(SectionCheck),
                                     cudaMemcpyDeviceToHost, stream_));
  }
  const cudaError_t err = cudaStreamSynchronize(stream_);
  for (const Pending& p : pending_) {
    if (err != cudaSuccess) break;
    const void* h = static_cast<char*>(hostSlots_) + p.slot * kSlotBytes;
    switch (p.kind) {
      case Result::kThreshold: {
        const auto* t = static_cast<const ThresholdOut*>(h);
        *static_cast<ThresholdStats*>(p.out) = ThresholdStats{t->tauKey, t->above, t->finite};
        break;
      }
      case Result::kSelect:
      case Result::kSelectFp8: {
        const auto* c = static_cast<const SelectCounts*>(h);
        uint32_t maxKey = 0;  // only an fp8 pass computes it
        if (p.kind == Result::kSelectFp8)
          std::memcpy(&maxKey, static_cast<const char*>(h) + sizeof(SelectCounts), sizeof maxKey);
        *static_cast<SelectStats*>(p.out) = SelectStats{c->selected, c->finiteSelected, maxKey};
        break;
      }
      case Result::kMaxKey:
        *static_cast<uint32_t*>(p.out) = static_cast<const ThresholdOut*>(h)->tauKey;
        break;
      case Result::kCount:
        std::memcpy(p.out, h, sizeof(uint64_t));
        break;
      case Result::kCrc:
        std::memcpy(p.out, h, sizeof(uint32_t));
        break;
    }
  }
  pending_.clear();
  if (reselectOut_ != nullptr && err == cudaSuccess)
    *reselectOut_ = ReselectStats{reselectSelect_.selected, reselectTau_.tauKey};
  reselectOut_ = nullptr;
  if (err == cudaSuccess)
    for (size_t i = 0; i < pendingChecks_.size(); ++i) *pendingChecks_[i] = sectionCheckResult(hostChecks_[i]);
  pendingChecks_.clear();
  if (err == cudaSuccess)
    for (const UnorderedOut& u : pendingUnordered_)
      for (size_t r = 0; r < u.count; ++r)
        if (u.out[r] == ~uint64_t{0}) u.out[r] = 0;
  pendingUnordered_.clear();
  rowChecksUsed_ = 0;
  SPCCL_CUDA_CHECK(err);
  return takeFindings();
}

Status CudaExecutor::ensureFindings() {
  if (findings_ != nullptr) return Status::ok();
  void* host = nullptr;
  SPCCL_CUDA_CHECK(cudaHostAlloc(&host, kFindingKinds * sizeof(uint32_t), cudaHostAllocMapped));
  std::memset(host, 0, kFindingKinds * sizeof(uint32_t));
  void* device = nullptr;
  const cudaError_t mapped = cudaHostGetDevicePointer(&device, host, 0);
  if (mapped != cudaSuccess) {
    cudaFreeHost(host);
    SPCCL_CUDA_CHECK(mapped);
  }
  findings_ = static_cast<uint32_t*>(host);
  findingsDevice_ = static_cast<uint32_t*>(device);
  return Status::ok();
}

Status CudaExecutor::takeFindings() {
  if (findings_ == nullptr) return Status::ok();
  // An exchange, not a read and a clear: a kernel's store that lands in
  // between is reported now or next time, never lost. Kernels only store 1,
  // one word per kind, so no read-modify-write crosses the bus.
  auto take = [&](int kind) {
    return __atomic_exchange_n(const_cast<uint32_t*>(findings_ + kind), 0u, __ATOMIC_ACQ_REL) != 0;
  };
  const bool mismatch = take(kFindingMismatch), badPairs = take(kFindingBadPairs);
  if (mismatch)
    return invalidUsage(
        "an earlier fixed-capacity compressed allreduce (SPCCL_CAPACITY_MODE=fixed) was called inconsistently "
        "across ranks (count, datatype, op, algorithm, wire type, density, capacity or call order), or after an "
        "asynchronous error that only some ranks had found yet: its output was left zero and the compressor state is "
        "undefined");
  if (badPairs)
    return remoteError(
        "a peer's fixed-capacity pairs had an index out of range or out of order (found by an earlier call's "
        "accumulation; that pair was not applied)");
  return Status::ok();
}

Status CudaExecutor::asyncFindings() {
  // Not while capturing: a rank whose device has not yet run the finding's
  // kernel would capture the call where another rank refuses it.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &capture) != cudaSuccess) {
    (void)cudaGetLastError();  // (the legacy stream while another captures: counted as capturing)
    capture = cudaStreamCaptureStatusActive;
  }
  if (capture == cudaStreamCaptureStatusNone) return takeFindings();
  captureSeen_ = true;  // (a fixed call's first operation: nothing was allocated for the graph yet)
  return Status::ok();
}

namespace {

struct SmallValue {
  unsigned char bytes[Executor::kSmallStoreBytes];
};

__global__ void storeSmallKernel(unsigned char* dst, SmallValue v, unsigned bytes) {
  for (unsigned i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = v.bytes[i];
}

// One block: the same comparison as the host executor's; a mismatch stores
// 1 in its mapped findings word.
__global__ void agreeInBandKernel(unsigned char* records, size_t stride, size_t checkedBytes, size_t countsAt,
                                  size_t count, uint32_t* mismatchFound) {
  __shared__ int differs;
  if (threadIdx.x == 0) differs = 0;
  __syncthreads();
  for (size_t r = 1; r < count; ++r)
    for (size_t b = threadIdx.x; b < checkedBytes; b += blockDim.x)
      if (records[r * stride + b] != records[b]) differs = 1;
  __syncthreads();
  if (!differs) return;
  for (size_t r = threadIdx.x; r < count; r += blockDim.x) {
    auto* c = reinterpret_cast<PairCounts*>(records + r * stride + countsAt);
    c->selected = 0;
    c->finiteSelected = 0;
  }
  if (threadIdx.x == 0) *mismatchFound = 1u;
}

}  // namespace

Status CudaExecutor::storeSmall(void* dst, const void* hostSrc, size_t bytes) {
  if (bytes > kSmallStoreBytes) return invalidArgument("cuda executor: storeSmall takes at most 64 bytes");
  if (bytes == 0) return Status::ok();
  SmallValue v{};
  std::memcpy(v.bytes, hostSrc, bytes);
  storeSmallKernel<<<1, 64, 0, stream_>>>(static_cast<unsigned char*>(dst), v, static_cast<unsigned>(bytes));
  SPCCL_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

Status CudaExecutor::agreeInBand(void* records, size_t stride, size_t checkedBytes, size_t countsAt, size_t count) {
  if (count == 0) return Status::ok();
  if (countsAt % alignof(PairCounts) != 0 || stride % alignof(PairCounts) != 0)
    return invalidArgument("cuda executor: agreeInBand's counts are not aligned");
  SPCCL_RETURN_IF_ERROR(ensureFindings());
  agreeInBandKernel<<<1, 128, 0, stream_>>>(static_cast<unsigned char*>(records), stride, checkedBytes, countsAt, count,
                                            findingsDevice_ + kFindingMismatch);
  SPCCL_CUDA_CHECK(cudaGetLastError());
  return Status::ok();
}

Status CudaExecutor::enqueueKth(const void* send, spcclDataType_t type, const float* residual, size_t n, uint64_t k,
                                Result kind, void* out) {
  const size_t ws = thresholdWorkspaceBytes(n);
  if (thresholdWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&thresholdWorkspace_, ws));
  void* dev = nullptr;
  size_t slot = 0;
  SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(ThresholdOut), &dev, &slot));
  SPCCL_RETURN_IF_ERROR(cuda::kthLargestMagnitude(send, type, residual, n, k, static_cast<ThresholdOut*>(dev),
                                                  thresholdWorkspace_.ptr, thresholdWorkspace_.bytes, stream_));
  pending_.push_back(Pending{slot, kind, out});
  return Status::ok();
}

Status CudaExecutor::kthLargestMagnitude(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                         uint64_t k, ThresholdStats* out) {
  return enqueueKth(send, type, residual, n, k, Result::kThreshold, out);
}

// ThresholdStats in executor memory is the kernels' ThresholdOut.
static_assert(sizeof(ThresholdStats) == sizeof(ThresholdOut) && offsetof(ThresholdStats, tauKey) == 0 &&
                  offsetof(ThresholdStats, above) == offsetof(ThresholdOut, above) &&
                  offsetof(ThresholdStats, finite) == offsetof(ThresholdOut, finite),
              "ThresholdStats and cuda::ThresholdOut must share a layout");
static_assert(sizeof(PairCounts) == sizeof(SelectCounts) && offsetof(PairCounts, selected) == 0 &&
                  offsetof(PairCounts, finiteSelected) == offsetof(SelectCounts, finiteSelected),
              "PairCounts and cuda::SelectCounts must share a layout");

Status CudaExecutor::kthLargestMagnitudeInMemory(const void* send, spcclDataType_t type, const float* residual,
                                                 size_t n, uint64_t k, ThresholdStats* inMemory) {
  const size_t ws = thresholdWorkspaceBytes(n);
  if (thresholdWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&thresholdWorkspace_, ws));
  return cuda::kthLargestMagnitude(send, type, residual, n, k, reinterpret_cast<ThresholdOut*>(inMemory),
                                   thresholdWorkspace_.ptr, thresholdWorkspace_.bytes, stream_);
}

Status CudaExecutor::deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* bytes) {
  void* dev = nullptr;
  size_t slot = 0;
  SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(uint64_t), &dev, &slot));
  SPCCL_RETURN_IF_ERROR(cuda::deltaIndexBytes(indices, nnz, rangeBegin, static_cast<uint64_t*>(dev), stream_));
  pending_.push_back(Pending{slot, Result::kCount, bytes});
  return Status::ok();
}

Status CudaExecutor::accumulatePairs(const uint32_t* indices, const void* values, core::ValueType wire,
                                     uint64_t capacity, const uint64_t* count, float* out, size_t n) {
  SPCCL_RETURN_IF_ERROR(ensureFindings());
  // The kernel stores 1 where it refuses a pair.
  return cuda::unpackAccumulate(indices, values, wire, capacity, count, out, 0, n, findingsDevice_ + kFindingBadPairs,
                                stream_);
}

Status CudaExecutor::selectPack(const SelectSpec& s, SelectStats* out) {
  if (selectWorkspaceN_ < s.n || selectWorkspace_.ptr == nullptr) {
    const size_t ws = selectPackWorkspaceBytes(s.n);
    SPCCL_RETURN_IF_ERROR(grow(&selectWorkspace_, ws));
    SPCCL_RETURN_IF_ERROR(initSelectPackWorkspace(selectWorkspace_.ptr, ws, stream_));
    selectWorkspaceN_ = s.n;
  }
  void* dev = nullptr;
  size_t slot = 0;
  if (s.countsOut != nullptr) dev = s.countsOut;  // stays in device memory
  else SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(SelectCounts) + sizeof(uint32_t), &dev, &slot));
  SelectArgs a{};
  a.send = s.send;
  a.inType = s.inType;
  a.residualIn = s.residualIn;
  a.residualOut = s.residualOut;
  a.n = s.n;
  a.tauKey = s.tauKey;
  a.tieBudget = s.tieBudget;
  a.threshold = reinterpret_cast<const ThresholdOut*>(s.threshold);
  a.tieCapacity = s.tieCapacity;
  a.capacity = s.capacity;
  a.keepOverflow = s.keepOverflow;
  a.wireType = s.wireType;
  a.scaleExp = s.scaleExp;
  a.wireBound = s.wireBound;
  a.indices = s.indices;
  a.values = s.values;
  a.result = static_cast<SelectCounts*>(dev);
  const bool fp8 = s.wireType == core::ValueType::kFloat8e4m3;
  if (fp8 && s.countsOut == nullptr)
    a.maxFiniteKey = reinterpret_cast<uint32_t*>(static_cast<char*>(dev) + sizeof(SelectCounts));
  SPCCL_RETURN_IF_ERROR(cuda::selectPack(a, selectWorkspace_.ptr, selectWorkspace_.bytes, stream_));
  if (s.countsOut == nullptr) pending_.push_back(Pending{slot, fp8 ? Result::kSelectFp8 : Result::kSelect, out});
  return Status::ok();
}

Status CudaExecutor::gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base,
                                   uint32_t* out) {
  return cuda::gatherIndices(indices, positions, n, base, out, stream_);
}

Status CudaExecutor::reselect(const SelectSpec& s, uint64_t, uint64_t k, uint64_t capacity, ReselectStats* out) {
  // No kernel over the candidates yet: a second pass over the whole buffer
  // gives host::reselectCandidates' bits. The exact tau over the buffer is
  // the candidates' (every entry outside them lies below the stale tau);
  // the pass keeps |v| above it, NaN/Inf, and capacity - above ties lowest
  // index first, which are candidates (the stale pass took a prefix of the
  // ties, and more of them than this); it writes v - d inside, v outside,
  // as the candidates' fix-up does. More work, the same result.
  if (reselectThreshold_ == nullptr) SPCCL_CUDA_CHECK(cudaMalloc(&reselectThreshold_, sizeof(ThresholdStats)));
  SPCCL_RETURN_IF_ERROR(kthLargestMagnitudeInMemory(s.send, s.inType, s.residualIn, s.n, k, reselectThreshold_));
  SelectSpec again = s;
  again.threshold = reselectThreshold_;
  again.tieCapacity = capacity;
  again.countsOut = nullptr;
  SPCCL_RETURN_IF_ERROR(selectPack(again, &reselectSelect_));
  void* dev = nullptr;
  size_t slot = 0;
  SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(ThresholdOut), &dev, &slot));
  SPCCL_CUDA_CHECK(cudaMemcpyAsync(dev, reselectThreshold_, sizeof(ThresholdOut), cudaMemcpyDeviceToDevice, stream_));
  pending_.push_back(Pending{slot, Result::kThreshold, &reselectTau_});
  reselectOut_ = out;
  return Status::ok();
}

Status CudaExecutor::maxFiniteKey(const void* send, spcclDataType_t type, const float* residual, uint64_t n,
                                  uint32_t* maxKey) {
  // The largest finite |v| is the first largest: tau of k = 1 (0 when none).
  return enqueueKth(send, type, residual, n, 1, Result::kMaxKey, maxKey);
}

Status CudaExecutor::toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) {
  return cuda::toWire(src, n, wire, scaleExp, dst, stream_);
}

Status CudaExecutor::loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) {
  return cuda::loadFloats(src, type, n, dst, stream_);
}

Status CudaExecutor::storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) {
  return cuda::storeFloats(src, n, type, dst, stream_);
}

Status CudaExecutor::divideFloats(float* x, size_t n, float divisor) {
  return cuda::divideFloats(x, n, divisor, stream_);
}

Status CudaExecutor::flushResidual(const float* v, float* residual, float* out, size_t n) {
  return cuda::flushResidual(v, residual, out, n, stream_);
}

Status CudaExecutor::mergeRows(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                               int64_t* outIds, void* outRows, uint64_t* unique) {
  const size_t ws = mergeRowsByIdWorkspaceBytes(n);
  if (mergeWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&mergeWorkspace_, ws));
  void* dev = nullptr;
  size_t slot = 0;
  SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(uint64_t), &dev, &slot));
  SPCCL_RETURN_IF_ERROR(cuda::mergeRowsById(ids, rows, type, n, rowLen, outIds, outRows, static_cast<uint64_t*>(dev),
                                            mergeWorkspace_.ptr, mergeWorkspace_.bytes, stream_));
  pending_.push_back(Pending{slot, Result::kCount, unique});
  return Status::ok();
}

Status CudaExecutor::mergeRowLists(const IdRowsSection* lists, size_t count, spcclDataType_t accType, uint64_t rowLen,
                                   int64_t* outIds, void* outRows, uint64_t* unique, uint64_t* unordered) {
  // The lists end to end, in list order: the stable merge of mergeRows then
  // sums equal ids in list order, as the host's merge of sorted lists does.
  uint64_t total = 0;
  for (size_t r = 0; r < count; ++r) total += lists[r].n;
  const size_t rowBytes = rowLen * dataTypeSize(accType);
  if (gatheredIds_.bytes < total * sizeof(int64_t)) SPCCL_RETURN_IF_ERROR(grow(&gatheredIds_, total * sizeof(int64_t)));
  if (gatheredRows_.bytes < total * rowBytes) SPCCL_RETURN_IF_ERROR(grow(&gatheredRows_, total * rowBytes));
  if (unorderedDevice_.bytes < count * sizeof(uint64_t))
    SPCCL_RETURN_IF_ERROR(grow(&unorderedDevice_, count * sizeof(uint64_t)));
  auto* checks = static_cast<uint64_t*>(unorderedDevice_.ptr);
  if (count > 0) SPCCL_CUDA_CHECK(cudaMemsetAsync(checks, 0xff, count * sizeof(uint64_t), stream_));
  uint64_t at = 0;
  for (size_t r = 0; r < count; ++r) {
    const uint64_t n = lists[r].n;
    if (n == 0) continue;
    SPCCL_RETURN_IF_ERROR(findUnorderedIds(lists[r].ids, n, checks + r, stream_));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(static_cast<int64_t*>(gatheredIds_.ptr) + at, lists[r].ids, n * sizeof(int64_t),
                                     cudaMemcpyDeviceToDevice, stream_));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(gatheredRows_.ptr) + at * rowBytes, lists[r].rows,
                                     n * rowBytes, cudaMemcpyDeviceToDevice, stream_));
    at += n;
  }
  SPCCL_RETURN_IF_ERROR(toHost(unordered, checks, count * sizeof(uint64_t)));
  pendingUnordered_.push_back(UnorderedOut{unordered, count});
  return mergeRows(static_cast<const int64_t*>(gatheredIds_.ptr), gatheredRows_.ptr, accType, total, rowLen, outIds,
                   outRows, unique);
}

Status CudaExecutor::splitByOwner(const int64_t* ids, const void* rows, spcclDataType_t accType, uint64_t n,
                                  uint64_t rowLen, int ranks, int64_t* outIds, void* outRows, uint64_t* perOwner) {
  const size_t ws = splitRowsByOwnerWorkspaceBytes(n);
  if (splitWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&splitWorkspace_, ws));
  const size_t counts = static_cast<size_t>(ranks) * sizeof(uint64_t);
  if (perOwnerDevice_.bytes < counts) SPCCL_RETURN_IF_ERROR(grow(&perOwnerDevice_, counts));
  auto* dev = static_cast<uint64_t*>(perOwnerDevice_.ptr);
  SPCCL_RETURN_IF_ERROR(splitRowsByOwner(ids, rows, dataTypeSize(accType), n, rowLen, static_cast<uint32_t>(ranks),
                                         outIds, outRows, dev, splitWorkspace_.ptr, splitWorkspace_.bytes, stream_));
  return toHost(perOwner, dev, counts);
}

Status CudaExecutor::selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                                core::ValueType wire, uint32_t* positions, void* values, uint32_t stride,
                                uint32_t* counts) {
  SPCCL_RETURN_IF_ERROR(selectRowsTopK(rows, type, nRows, rowLen, keep, positions, stride, counts, stream_));
  return gatherStridedRowValues(rows, type, nRows, rowLen, positions, stride, counts, wire, values, stream_);
}

Status CudaExecutor::compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes,
                                 uint32_t stride, const uint64_t* offsets, uint64_t nRows, uint32_t* positions,
                                 void* values) {
  return cuda::compactRows(stridedPositions, stridedValues, valueBytes, stride, offsets, nRows, positions, values,
                           stream_);
}

Status CudaExecutor::gatherRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                                const uint32_t* positions, const uint64_t* offsets, core::ValueType wire,
                                void* values) {
  return gatherRowValues(rows, type, nRows, rowLen, positions, offsets, wire, values, stream_);
}

Status CudaExecutor::scatterRows(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                                 const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                                 void* rows) {
  return scatterRowValues(values, wire, scaleExp, positions, offsets, nRows, rowLen, type, rows, stream_);
}

Status CudaExecutor::narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) {
  return cuda::narrowPositions(positions, n, bytes, dst, stream_);
}

// A row check's device word (~0: no finding) until settle(), launched by
// `launch`, copied to *badRow and converted there (~0 -> 0). Growing frees
// (or, after a capture, retires) the old words only once the work using them
// is done.
template <typename F>
Status CudaExecutor::rowCheck(uint64_t* badRow, F&& launch) {
  const size_t need = (rowChecksUsed_ + 1) * sizeof(uint64_t);
  if (rowChecks_.bytes < need) {
    if (rowChecksUsed_ > 0) SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier words' copies have landed
    SPCCL_RETURN_IF_ERROR(grow(&rowChecks_, std::max<size_t>(2 * need, 64 * sizeof(uint64_t))));
  }
  auto* word = static_cast<uint64_t*>(rowChecks_.ptr) + rowChecksUsed_++;
  SPCCL_RETURN_IF_ERROR(launch(word));
  SPCCL_RETURN_IF_ERROR(toHost(badRow, word, sizeof(uint64_t)));
  pendingUnordered_.push_back(UnorderedOut{badRow, 1});
  return Status::ok();
}

Status CudaExecutor::widenPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                                    uint32_t rowLen, uint32_t* dst, uint64_t* badRow) {
  return rowCheck(badRow, [&](uint64_t* word) {
    return widenRowPositions(src, bytes, offsets, nRows, rowLen, dst, word, stream_);
  });
}

Status CudaExecutor::encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                                    unsigned char* codes) {
  return cuda::encodeRowsInt8(values, offsets, nRows, scales, codes, stream_);
}

Status CudaExecutor::scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                                     const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                                     void* rows, uint64_t* badRow) {
  return rowCheck(badRow, [&](uint64_t* word) {
    return cuda::scatterRowsInt8(scales, codes, positions, offsets, nRows, rowLen, type, rows, word, stream_);
  });
}

Status CudaExecutor::streamCrc32c(const void* data, size_t bytes, size_t skipAt, uint32_t* crc) {
  const size_t ws = crc32cWorkspaceBytes(bytes);
  if (crcWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&crcWorkspace_, ws));
  void* dev = nullptr;
  size_t slot = 0;
  SPCCL_RETURN_IF_ERROR(resultSlot(sizeof(uint32_t), &dev, &slot));
  SPCCL_RETURN_IF_ERROR(cuda::streamCrc32c(data, bytes, skipAt, static_cast<uint32_t*>(dev), crcWorkspace_.ptr,
                                           crcWorkspace_.bytes, stream_));
  pending_.push_back(Pending{slot, Result::kCrc, crc});
  return Status::ok();
}

Status CudaExecutor::sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) {
  const size_t ws = crc32cWorkspaceBytes(bytes);
  if (crcWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&crcWorkspace_, ws));
  return cuda::sealCrc32c(data, bytes, flagAt, flag, skipAt, flipAt, crcWorkspace_.ptr, crcWorkspace_.bytes, stream_);
}

Status CudaExecutor::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) SPCCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  return Status::ok();
}

Status CudaExecutor::encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                                   uint64_t rangeEnd, unsigned char* dst) {
  const size_t ws = encodeIndicesWorkspaceBytes(e, nnz);
  if (sectionWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&sectionWorkspace_, ws));
  return cuda::encodeIndices(e, indices, nnz, rangeBegin, rangeEnd, dst, sectionWorkspace_.ptr, sectionWorkspace_.bytes,
                             stream_);
}

Status CudaExecutor::reserveChecks(size_t more) {
  const size_t need = pendingChecks_.size() + more;
  if (need <= deviceCheckCapacity_) return Status::ok();
  const size_t capacity = std::max({need, 2 * deviceCheckCapacity_, size_t{64}});
  SectionCheck* grown = nullptr;
  SPCCL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&grown), capacity * sizeof(SectionCheck)));
  if (!pendingChecks_.empty()) {
    // The findings not yet settled move over; the old slots are freed once
    // the copy (and whatever still writes them) has run.
    const cudaError_t copied = cudaMemcpyAsync(grown, deviceChecks_, pendingChecks_.size() * sizeof(SectionCheck),
                                               cudaMemcpyDeviceToDevice, stream_);
    const cudaError_t synced = copied == cudaSuccess ? cudaStreamSynchronize(stream_) : copied;
    if (synced != cudaSuccess) {
      cudaFree(grown);
      SPCCL_CUDA_CHECK(synced);
    }
  }
  if (deviceChecks_ != nullptr) cudaFree(deviceChecks_);
  deviceChecks_ = grown;
  deviceCheckCapacity_ = capacity;
  return Status::ok();
}

Status CudaExecutor::lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count,
                                 uint64_t* out) {
  return cuda::lowerBounds(sorted, n, keys, count, out, stream_);
}

Status CudaExecutor::reduceSections(const WireSection* sections, size_t count, float* out, uint64_t outBase,
                                    IndexCheck* checks) {
  if (count == 0) return Status::ok();
  if (sections == nullptr || checks == nullptr) return invalidArgument("reduceSections: null sections or checks");
  const uint64_t begin = sections[0].rangeBegin, end = sections[0].rangeEnd;
  if (begin < outBase) return invalidArgument("reduceSections: the range starts before out");
  if (end > begin && out == nullptr) return invalidArgument("reduceSections: null out");
  // Every argument is checked before anything is enqueued, and the scratch
  // grown once: the sections then run back to back on the stream.
  size_t ws = 0;
  for (size_t r = 0; r < count; ++r) {
    if (sections[r].rangeBegin != begin || sections[r].rangeEnd != end)
      return invalidArgument("reduceSections: the sections cover different ranges");
    size_t bytes = 0;
    SPCCL_RETURN_IF_ERROR(sectionWorkspaceBytes(sections[r], &bytes));
    ws = std::max(ws, bytes);
  }
  if (sectionWorkspace_.bytes < ws) SPCCL_RETURN_IF_ERROR(grow(&sectionWorkspace_, ws));
  SPCCL_RETURN_IF_ERROR(reserveChecks(count));
  // +0 first, then each section in order: the host's sum, bit for bit.
  if (end > begin)
    SPCCL_CUDA_CHECK(cudaMemsetAsync(out + (begin - outBase), 0, (end - begin) * sizeof(float), stream_));
  for (size_t r = 0; r < count; ++r) {
    SPCCL_RETURN_IF_ERROR(addSection(sections[r], out, outBase, deviceChecks_ + pendingChecks_.size(),
                                     sectionWorkspace_.ptr, sectionWorkspace_.bytes, stream_));
    pendingChecks_.push_back(&checks[r]);
  }
  return Status::ok();
}

}  // namespace spccl::cuda
