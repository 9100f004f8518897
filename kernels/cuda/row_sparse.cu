// Row-sparse allreduce helpers: the device version of the merge of
// duplicate ids (host::mergeRowsById, kernels/host/row_sparse.cc). CUB does
// the sort (stable radix sort of (id, input position) pairs; CUB orders
// signed int64 keys correctly by flipping the sign bit internally), the
// run-length encoding and the offsets scan; the segmented row sum is the one
// hand-written kernel: a warp per unique id, one lane per row element,
// summing the duplicates sequentially in input order from 0, as the host
// does, so the sums are bit-identical.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/std/functional>

#include <climits>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct F64In {
  using Raw = double;
  __device__ __forceinline__ static double convert(double x) { return x; }
};

__global__ void __launch_bounds__(kThreads) iotaKernel(uint32_t* out, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<uint32_t>(i);
}

// A list a peer sent must have strictly increasing ids: *firstBad = the
// lowest position i where ids[i] <= ids[i - 1] (left alone where none).
__global__ void __launch_bounds__(kThreads)
    unorderedKernel(const int64_t* ids, uint64_t n, unsigned long long* firstBad) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x + 1; i < n; i += stride)
    if (ids[i] <= ids[i - 1]) atomicMin(firstBad, static_cast<unsigned long long>(i));
}

template <class In, typename Acc>
__global__ void __launch_bounds__(kThreads)
    segmentSumKernel(const typename In::Raw* rows, uint64_t rowLen, const uint32_t* order,
                     const uint32_t* segmentOffsets, const uint64_t* numUnique, uint64_t maxSegments, Acc* out) {
  const unsigned lane = threadIdx.x & 31u;
  uint64_t segments = *numUnique;
  if (segments > maxSegments) segments = maxSegments;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t s = static_cast<uint64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; s < segments; s += warps) {
    const uint32_t begin = segmentOffsets[s], end = segmentOffsets[s + 1];
    for (uint64_t e = lane; e < rowLen; e += 32) {
      Acc acc = Acc(0);
      for (uint32_t j = begin; j < end; ++j) acc += static_cast<Acc>(In::convert(rows[order[j] * rowLen + e]));
      out[s * rowLen + e] = acc;
    }
  }
}

size_t sortTempBytes(uint64_t n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                  static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n);
  return bytes;
}

size_t encodeTempBytes(uint64_t n) {
  size_t bytes = 0;
  cub::DeviceRunLengthEncode::Encode(nullptr, bytes, static_cast<const int64_t*>(nullptr),
                                     static_cast<int64_t*>(nullptr), static_cast<uint32_t*>(nullptr),
                                     static_cast<uint64_t*>(nullptr), static_cast<int>(n));
  return bytes;
}

size_t offsetsTempBytes(uint64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveScan(nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
                                 ::cuda::std::plus<>{}, uint32_t{0}, n + 1);
  return bytes;
}

// Workspace pieces, 256-byte aligned.
struct SortLayout {
  size_t iota, temp, total;
};
SortLayout sortLayout(uint64_t n) {
  SortLayout l;
  l.iota = 0;
  l.temp = detail::alignUp(n * sizeof(uint32_t), 256);
  l.total = l.temp + detail::alignUp(sortTempBytes(n), 256);
  return l;
}
struct UniqueLayout {
  size_t lengths, encodeTemp, scanTemp, total;
};
UniqueLayout uniqueLayout(uint64_t n) {
  UniqueLayout l;
  l.lengths = 0;
  l.encodeTemp = detail::alignUp((n + 1) * sizeof(uint32_t), 256);
  l.scanTemp = l.encodeTemp + detail::alignUp(encodeTempBytes(n), 256);
  l.total = l.scanTemp + detail::alignUp(offsetsTempBytes(n), 256);
  return l;
}
struct MergeLayout {
  size_t sortedIds, order, offsets, sort, unique, total;
};
MergeLayout mergeLayout(uint64_t n) {
  MergeLayout l;
  l.sortedIds = 0;
  l.order = detail::alignUp(n * sizeof(int64_t), 256);
  l.offsets = l.order + detail::alignUp(n * sizeof(uint32_t), 256);
  l.sort = l.offsets + detail::alignUp((n + 1) * sizeof(uint32_t), 256);
  l.unique = l.sort + sortLayout(n).total;
  l.total = l.unique + uniqueLayout(n).total;
  return l;
}

Status checkCount(uint64_t n, const char* what) {
  if (n >= static_cast<uint64_t>(INT_MAX))
    return invalidArgument(std::string(what) + ": at most 2^31 - 2 ids per call");
  return Status::ok();
}

}  // namespace

size_t sortIdsWorkspaceBytes(uint64_t n) { return sortLayout(n > 0 ? n : 1).total; }

Status sortIdsStable(const int64_t* ids, uint64_t n, int64_t* sortedIds, uint32_t* order, void* workspace,
                     size_t workspaceBytes, cudaStream_t stream) {
  SPCCL_RETURN_IF_ERROR(checkCount(n, "sortIdsStable"));
  if (n == 0) return Status::ok();
  if (ids == nullptr || sortedIds == nullptr || order == nullptr) return invalidArgument("sortIdsStable: null buffer");
  const SortLayout l = sortLayout(n);
  if (workspace == nullptr || workspaceBytes < l.total)
    return invalidArgument("sortIdsStable: workspace smaller than sortIdsWorkspaceBytes(n)");
  auto* ws = static_cast<unsigned char*>(workspace);
  auto* iota = reinterpret_cast<uint32_t*>(ws + l.iota);
  iotaKernel<<<detail::gridFor(n, kThreads * 8u, 8), kThreads, 0, stream>>>(iota, n);
  SPCCL_CUDA_CHECK_LAUNCH();
  size_t tempBytes = l.total - l.temp;
  SPCCL_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(ws + l.temp, tempBytes, ids, sortedIds, iota, order, n, 0, 64, stream));
  return Status::ok();
}

size_t uniqueIdsWorkspaceBytes(uint64_t n) { return uniqueLayout(n > 0 ? n : 1).total; }

Status uniqueIdSegments(const int64_t* sortedIds, uint64_t n, int64_t* uniqueIds, uint32_t* segmentOffsets,
                        uint64_t* numUnique, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  SPCCL_RETURN_IF_ERROR(checkCount(n, "uniqueIdSegments"));
  if (segmentOffsets == nullptr || numUnique == nullptr) return invalidArgument("uniqueIdSegments: null buffer");
  if (n == 0) {
    SPCCL_CUDA_CHECK(cudaMemsetAsync(numUnique, 0, sizeof(uint64_t), stream));
    SPCCL_CUDA_CHECK(cudaMemsetAsync(segmentOffsets, 0, sizeof(uint32_t), stream));
    return Status::ok();
  }
  if (sortedIds == nullptr || uniqueIds == nullptr) return invalidArgument("uniqueIdSegments: null buffer");
  const UniqueLayout l = uniqueLayout(n);
  if (workspace == nullptr || workspaceBytes < l.total)
    return invalidArgument("uniqueIdSegments: workspace smaller than uniqueIdsWorkspaceBytes(n)");
  auto* ws = static_cast<unsigned char*>(workspace);
  auto* lengths = reinterpret_cast<uint32_t*>(ws + l.lengths);
  // Lengths past the last run stay 0, so their offsets come out as n.
  SPCCL_CUDA_CHECK(cudaMemsetAsync(lengths, 0, (n + 1) * sizeof(uint32_t), stream));
  size_t encodeBytes = l.scanTemp - l.encodeTemp;
  SPCCL_CUDA_CHECK(cub::DeviceRunLengthEncode::Encode(ws + l.encodeTemp, encodeBytes, sortedIds, uniqueIds, lengths,
                                                      numUnique, static_cast<int>(n), stream));
  size_t scanBytes = l.total - l.scanTemp;
  SPCCL_CUDA_CHECK(cub::DeviceScan::ExclusiveScan(ws + l.scanTemp, scanBytes, lengths, segmentOffsets,
                                                  ::cuda::std::plus<>{}, uint32_t{0}, n + 1, stream));
  return Status::ok();
}

Status segmentedRowSum(const void* rows, spcclDataType_t type, uint64_t rowLen, const uint32_t* order,
                       const uint32_t* segmentOffsets, const uint64_t* numUnique, uint64_t maxSegments, void* outRows,
                       cudaStream_t stream) {
  if (!detail::isFloatInput(type) && type != spcclFloat64)
    return invalidArgument("segmentedRowSum: type must be fp32/fp64/fp16/bf16");
  if (maxSegments == 0 || rowLen == 0) return Status::ok();
  if (rows == nullptr || order == nullptr || segmentOffsets == nullptr || numUnique == nullptr || outRows == nullptr)
    return invalidArgument("segmentedRowSum: null buffer");
  const unsigned grid = detail::gridFor(maxSegments, kWarps, 8);
  if (type == spcclFloat64) {
    segmentSumKernel<F64In, double><<<grid, kThreads, 0, stream>>>(static_cast<const double*>(rows), rowLen, order,
                                                                   segmentOffsets, numUnique, maxSegments,
                                                                   static_cast<double*>(outRows));
  } else {
    detail::withLoader(type, [&](auto in) {
      using In = decltype(in);
      segmentSumKernel<In, float><<<grid, kThreads, 0, stream>>>(static_cast<const typename In::Raw*>(rows), rowLen,
                                                                 order, segmentOffsets, numUnique, maxSegments,
                                                                 static_cast<float*>(outRows));
    });
  }
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

namespace {

// The partition's split: each id's owner, counted per owner (in shared
// memory first where the owners fit, so few atomics reach global memory).
constexpr uint32_t kSharedOwners = 1024;
__global__ void __launch_bounds__(kThreads)
    ownerKernel(const int64_t* ids, uint64_t n, uint32_t ranks, uint32_t* owners, unsigned long long* perOwner) {
  __shared__ unsigned int blockCounts[kSharedOwners];
  const bool shared = ranks <= kSharedOwners;
  if (shared)
    for (uint32_t r = threadIdx.x; r < ranks; r += kThreads) blockCounts[r] = 0;
  __syncthreads();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const uint32_t o = core::rowOwner(ids[i], ranks);
    owners[i] = o;
    if (shared) atomicAdd(blockCounts + o, 1u);
    else atomicAdd(perOwner + o, 1ull);
  }
  __syncthreads();
  if (shared)
    for (uint32_t r = threadIdx.x; r < ranks; r += kThreads)
      if (blockCounts[r] != 0) atomicAdd(perOwner + r, static_cast<unsigned long long>(blockCounts[r]));
}

// outIds[j] = ids[order[j]] and row j = row order[j]: a warp per row, rows
// of Word-sized elements.
template <typename Word>
__global__ void __launch_bounds__(kThreads)
    gatherIdRowsKernel(const int64_t* ids, const Word* rows, const uint32_t* order, uint64_t n, uint64_t rowLen,
                       int64_t* outIds, Word* outRows) {
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  const unsigned lane = threadIdx.x & 31u;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; j < n; j += warps) {
    const uint64_t from = order[j];
    if (lane == 0) outIds[j] = ids[from];
    for (uint64_t e = lane; e < rowLen; e += 32) outRows[j * rowLen + e] = rows[from * rowLen + e];
  }
}

struct SplitLayout {
  size_t owners, sortedOwners, iota, order, temp, total;
};
SplitLayout splitLayout(uint64_t n) {
  size_t tempBytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, tempBytes, static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), n);
  const size_t words = detail::alignUp(n * sizeof(uint32_t), 256);
  SplitLayout l;
  l.owners = 0;
  l.sortedOwners = words;
  l.iota = 2 * words;
  l.order = 3 * words;
  l.temp = 4 * words;
  l.total = l.temp + detail::alignUp(tempBytes, 256);
  return l;
}

}  // namespace

size_t splitRowsByOwnerWorkspaceBytes(uint64_t n) { return splitLayout(n > 0 ? n : 1).total; }

Status splitRowsByOwner(const int64_t* ids, const void* rows, size_t elementBytes, uint64_t n, uint64_t rowLen,
                        uint32_t ranks, int64_t* outIds, void* outRows, uint64_t* perOwner, void* workspace,
                        size_t workspaceBytes, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  SPCCL_RETURN_IF_ERROR(checkCount(n, "splitRowsByOwner"));
  if (ranks == 0 || (elementBytes != 4 && elementBytes != 8))
    return invalidArgument("splitRowsByOwner: no ranks, or rows of neither fp32 nor fp64");
  SPCCL_CUDA_CHECK(cudaMemsetAsync(perOwner, 0, ranks * sizeof(uint64_t), stream));
  if (n == 0) return Status::ok();
  const SplitLayout l = splitLayout(n);
  if (workspace == nullptr || workspaceBytes < l.total)
    return invalidArgument("splitRowsByOwner: workspace smaller than splitRowsByOwnerWorkspaceBytes(n)");
  auto* ws = static_cast<unsigned char*>(workspace);
  auto* owners = reinterpret_cast<uint32_t*>(ws + l.owners);
  auto* sortedOwners = reinterpret_cast<uint32_t*>(ws + l.sortedOwners);
  auto* iota = reinterpret_cast<uint32_t*>(ws + l.iota);
  auto* order = reinterpret_cast<uint32_t*>(ws + l.order);
  const unsigned grid = detail::gridFor(n, kThreads);
  ownerKernel<<<grid, kThreads, 0, stream>>>(ids, n, ranks, owners, reinterpret_cast<unsigned long long*>(perOwner));
  SPCCL_CUDA_CHECK_LAUNCH();
  iotaKernel<<<grid, kThreads, 0, stream>>>(iota, n);
  SPCCL_CUDA_CHECK_LAUNCH();
  int endBit = 1;
  while (endBit < 32 && (uint64_t{1} << endBit) < ranks) ++endBit;
  size_t tempBytes = l.total - l.temp;
  // Stable: ids keep their order within each owner's group.
  SPCCL_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(ws + l.temp, tempBytes, owners, sortedOwners, iota, order, n, 0, endBit, stream));
  const unsigned rowGrid = detail::gridFor(n, kWarps);
  if (elementBytes == 8)
    gatherIdRowsKernel<<<rowGrid, kThreads, 0, stream>>>(ids, static_cast<const uint64_t*>(rows), order, n, rowLen,
                                                         outIds, static_cast<uint64_t*>(outRows));
  else
    gatherIdRowsKernel<<<rowGrid, kThreads, 0, stream>>>(ids, static_cast<const uint32_t*>(rows), order, n, rowLen,
                                                         outIds, static_cast<uint32_t*>(outRows));
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status findUnorderedIds(const int64_t* ids, uint64_t n, uint64_t* firstBad, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  if (n < 2) return Status::ok();
  unorderedKernel<<<detail::gridFor(n, kThreads * 8u, 8), kThreads, 0, stream>>>(
      ids, n, reinterpret_cast<unsigned long long*>(firstBad));
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

size_t mergeRowsByIdWorkspaceBytes(uint64_t n) { return mergeLayout(n > 0 ? n : 1).total; }

Status mergeRowsById(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                     int64_t* outIds, void* outRows, uint64_t* outCount, void* workspace, size_t workspaceBytes,
                     cudaStream_t stream) {
  SPCCL_RETURN_IF_ERROR(checkCount(n, "mergeRowsById"));
  if (outCount == nullptr) return invalidArgument("mergeRowsById: null buffer");
  if (n == 0) {
    SPCCL_CUDA_CHECK(cudaMemsetAsync(outCount, 0, sizeof(uint64_t), stream));
    return Status::ok();
  }
  const MergeLayout l = mergeLayout(n);
  if (workspace == nullptr || workspaceBytes < l.total)
    return invalidArgument("mergeRowsById: workspace smaller than mergeRowsByIdWorkspaceBytes(n)");
  auto* ws = static_cast<unsigned char*>(workspace);
  auto* sortedIds = reinterpret_cast<int64_t*>(ws + l.sortedIds);
  auto* order = reinterpret_cast<uint32_t*>(ws + l.order);
  auto* offsets = reinterpret_cast<uint32_t*>(ws + l.offsets);
  SPCCL_RETURN_IF_ERROR(sortIdsStable(ids, n, sortedIds, order, ws + l.sort, l.unique - l.sort, stream));
  SPCCL_RETURN_IF_ERROR(
      uniqueIdSegments(sortedIds, n, outIds, offsets, outCount, ws + l.unique, l.total - l.unique, stream));
  return segmentedRowSum(rows, type, rowLen, order, offsets, outCount, n, outRows, stream);
}

}  // namespace spccl::cuda
