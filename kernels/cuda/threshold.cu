// Exact k-th largest finite |v|, v = send + residual, as a magnitude key:
// the device counterpart of host::kthLargestMagnitude, same answer bit for
// bit (the k-th largest key of a multiset does not depend on the order the
// keys are counted in, and the counts are integers).
//
// Radix select over the 31-bit keys, most significant digits first: level 0
// histograms bits 30..20 of every finite key (and counts the zeros), level 1
// bits 19..10 of the keys in the chosen bucket, level 2 bits 9..0. Each
// histogram pass streams send and residual once, with per-block shared
// histograms merged by integer atomics; a one-block pass after each picks
// the bucket holding the k-th largest and carries the count of keys above
// it. Seven launches, no host synchronisation.
#include <cub/block/block_scan.cuh>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

namespace {

constexpr int kThreads = 256;

template <int kLevel>
struct Level {
  static constexpr int kShift = kLevel == 0 ? 20 : kLevel == 1 ? 10 : 0;
  static constexpr unsigned kBuckets = kLevel == 0 ? 2048u : 1024u;
  static constexpr int kPrefixShift = kLevel == 0 ? 31 : kLevel == 1 ? 20 : 10;  // bits above this level's digit
};

struct ThresholdState {
  unsigned long long hist0[2048];
  unsigned long long hist1[1024];
  unsigned long long hist2[1024];
  unsigned long long zeros;
  unsigned long long finite;
  unsigned long long above;      // finite keys in strictly higher buckets so far
  unsigned long long remaining;  // 1-based rank of tau among the keys of the chosen bucket
  unsigned int prefix;           // the digits chosen so far
  unsigned int done;             // fewer than k finite entries: the answer is known after level 0
};

template <int kLevel>
__device__ __forceinline__ unsigned long long* histOf(ThresholdState* st) {
  if constexpr (kLevel == 0) return st->hist0;
  else if constexpr (kLevel == 1) return st->hist1;
  else return st->hist2;
}

template <class In, int kLevel>
__global__ void __launch_bounds__(kThreads)
    histKernel(const typename In::Raw* send, const float* residual, uint64_t n, bool vec, ThresholdState* st) {
  using L = Level<kLevel>;
  constexpr int kVec = In::kVec;
  __shared__ unsigned sHist[L::kBuckets];
  __shared__ unsigned long long sZeros;
  if (st->done) return;  // the same value for every thread
  const unsigned prefix = kLevel == 0 ? 0u : st->prefix;
  for (unsigned b = threadIdx.x; b < L::kBuckets; b += kThreads) sHist[b] = 0;
  if (threadIdx.x == 0) sZeros = 0;
  __syncthreads();

  unsigned zeros = 0;
  auto count = [&](float x) {
    const uint32_t key = core::magnitudeKey(x);
    if (core::isNonFiniteKey(key)) return;
    if constexpr (kLevel == 0) {
      zeros += key == 0;
      atomicAdd(&sHist[key >> L::kShift], 1u);
    } else {
      if ((key >> L::kPrefixShift) == prefix) atomicAdd(&sHist[(key >> L::kShift) & (L::kBuckets - 1)], 1u);
    }
  };

  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t chunks = vec ? n / kVec : 0;
  for (uint64_t c = first; c < chunks; c += stride) {
    float x[kVec];
    detail::load16<In, false>(send + c * kVec, x);
    if (residual != nullptr) {
      float r[kVec];
      detail::loadF32<kVec, false>(residual + c * kVec, r);
#pragma unroll
      for (int j = 0; j < kVec; ++j) x[j] += r[j];
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) count(x[j]);
  }
  for (uint64_t e = chunks * kVec + first; e < n; e += stride) {
    float x = In::convert(send[e]);
    if (residual != nullptr) x += residual[e];
    count(x);
  }
  if constexpr (kLevel == 0) {
    const unsigned warpZeros = detail::warpSumFull(zeros);
    if ((threadIdx.x & 31u) == 0 && warpZeros != 0) atomicAdd(&sZeros, static_cast<unsigned long long>(warpZeros));
  }
  __syncthreads();
  unsigned long long* hist = histOf<kLevel>(st);
  for (unsigned b = threadIdx.x; b < L::kBuckets; b += kThreads)
    if (sHist[b] != 0) atomicAdd(hist + b, static_cast<unsigned long long>(sHist[b]));
  if constexpr (kLevel == 0) {
    if (threadIdx.x == 0 && sZeros != 0) atomicAdd(&st->zeros, sZeros);
  }
}

// One block: walks this level's buckets from the top (a scan over them in
// descending order) to the one where the count of larger keys reaches k.
template <int kLevel>
__global__ void __launch_bounds__(kThreads) findKernel(uint64_t k, ThresholdState* st, ThresholdOut* out) {
  using L = Level<kLevel>;
  constexpr int kPer = static_cast<int>(L::kBuckets) / kThreads;
  using Scan = cub::BlockScan<unsigned long long, kThreads>;
  __shared__ typename Scan::TempStorage scanTemp;
  if (st->done) return;
  const unsigned long long* hist = histOf<kLevel>(st);
  unsigned long long c[kPer], incl[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) c[j] = hist[L::kBuckets - 1 - (threadIdx.x * kPer + j)];
  unsigned long long total;
  Scan(scanTemp).InclusiveSum(c, incl, total);

  unsigned long long remaining;
  if constexpr (kLevel == 0) {
    if (k == 0 || k > total) {  // fewer finite entries than k: every non-zero one is selected
      if (threadIdx.x == 0) {
        *out = ThresholdOut{0u, 0u, total - st->zeros, total};
        st->done = 1;
      }
      return;
    }
    remaining = k;
  } else {
    remaining = st->remaining;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const unsigned long long excl = incl[j] - c[j];
    if (excl < remaining && remaining <= incl[j]) {  // exactly one bucket
      const unsigned bucket = L::kBuckets - 1 - (threadIdx.x * kPer + j);
      const unsigned prefix = kLevel == 0 ? bucket : ((st->prefix << (L::kPrefixShift - L::kShift)) | bucket);
      const unsigned long long above = (kLevel == 0 ? 0ull : st->above) + excl;
      if constexpr (kLevel == 2) {
        *out = ThresholdOut{prefix, 0u, above, st->finite};
      } else {
        if constexpr (kLevel == 0) st->finite = total;
        st->prefix = prefix;
        st->above = above;
        st->remaining = remaining - excl;
      }
    }
  }
}

}  // namespace

size_t thresholdWorkspaceBytes(size_t) { return detail::alignUp(sizeof(ThresholdState), 256); }

Status kthLargestMagnitude(const void* send, spcclDataType_t inType, const float* residual, size_t n, uint64_t k,
                           ThresholdOut* out, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  if (!detail::isFloatInput(inType)) return invalidArgument("kthLargestMagnitude: input must be fp32/fp16/bf16");
  if (out == nullptr || (send == nullptr && n > 0)) return invalidArgument("kthLargestMagnitude: null buffer");
  if (workspace == nullptr || workspaceBytes < sizeof(ThresholdState))
    return invalidArgument("kthLargestMagnitude: workspace smaller than thresholdWorkspaceBytes(n)");
  auto* st = static_cast<ThresholdState*>(workspace);
  SPCCL_CUDA_CHECK(cudaMemsetAsync(st, 0, sizeof(ThresholdState), stream));
  // Blocks sized so that no block counts 2^32 keys (its shared counters are 32-bit).
  unsigned grid = detail::gridFor(n, kThreads * 16u, 8);
  const unsigned minGrid = static_cast<unsigned>((static_cast<uint64_t>(n) >> 30) + 1);
  if (grid < minGrid) grid = minGrid;
  const bool vec = detail::aligned16(send) && (residual == nullptr || detail::aligned16(residual));
  detail::withLoader(inType, [&](auto in) {
    using In = decltype(in);
    const auto* s = static_cast<const typename In::Raw*>(send);
    histKernel<In, 0><<<grid, kThreads, 0, stream>>>(s, residual, n, vec, st);
    findKernel<0><<<1, kThreads, 0, stream>>>(k, st, out);
    histKernel<In, 1><<<grid, kThreads, 0, stream>>>(s, residual, n, vec, st);
    findKernel<1><<<1, kThreads, 0, stream>>>(k, st, out);
    histKernel<In, 2><<<grid, kThreads, 0, stream>>>(s, residual, n, vec, st);
    findKernel<2><<<1, kThreads, 0, stream>>>(k, st, out);
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace spccl::cuda
