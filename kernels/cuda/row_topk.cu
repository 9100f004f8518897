// DCT-MP rows on the device: per-row top-k (host::selectRowTopK), the
// offsets and compaction of the kept positions, and the value gather and
// scatter of the alltoall rows forward and backward passes.
//
// Top-k: one block per row. The kept set is the top n = min(rowLen,
// max(keep, #NaN/Inf)) entries in core::rowRank order (larger |x| first,
// then lower position): every entry whose rank is at least the n-th largest
// rank, found by a radix select over the ranks (8-bit digit passes on a
// shared histogram); a block scan in position order then writes the kept
// positions ascending. Keys stay in shared memory for rows up to kSharedKeys long;
// longer rows re-read the row from global memory each pass.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

namespace {

constexpr uint32_t kSharedKeys = 8192;  // 32 KiB of keys per block
constexpr int kRadix = 256;
constexpr unsigned kFloorCandidates = 512;  // RowTopKMethod::kFloorFirst: ranks compared pairwise at most

struct MinOp {
  __device__ __forceinline__ unsigned operator()(unsigned a, unsigned b) const { return a < b ? a : b; }
};

// kFloor (RowTopKMethod::kFloorFirst, experimental): before the radix
// select, the host's floor (host::selectRowTopK): the smallest of the
// largest keys of `keep` blocks of the row. Those `keep` maxima are distinct
// entries at or above it, so the keep-th largest rank and every rank above
// it have keys at or above the floor. The keys that reach it (about 2.5 x
// keep in a Gaussian row) go to shared memory, and the candidate outranked
// by exactly keep - 1 others is the threshold: one pass, one pairwise count
// over a few hundred ranks, instead of eight digit passes with a barrier and
// a scan each. Rows with more NaN/Inf than `keep`, rows whose keys are not
// in shared memory, and rows with more than kFloorCandidates candidates
// (ties) take the radix select as before.
template <class In, int kThreads, bool kFloor>
__device__ __forceinline__ void rowTopKBody(const typename In::Raw* rows, uint64_t nRows, uint32_t rowLen,
                                            uint32_t keep, uint32_t* positions, uint32_t posStride, uint32_t* counts,
                                            bool keysInShared) {
  constexpr int kDigitsPer = kRadix / kThreads;
  constexpr int kOutPer = kThreads >= 256 ? 4 : 8;  // positions per thread per output chunk
  using Reduce = cub::BlockReduce<unsigned, kThreads>;
  using Scan = cub::BlockScan<unsigned, kThreads>;
  extern __shared__ uint32_t sKeys[];
  __shared__ unsigned sHist[kRadix];
  __shared__ union {
    typename Reduce::TempStorage reduce;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ unsigned sN, sRemaining;
  __shared__ unsigned long long sPrefix;
  __shared__ unsigned long long sCand[kFloor ? kFloorCandidates : 1];
  __shared__ unsigned sFloor, sM;
  __shared__ unsigned long long sThreshold;
  __shared__ unsigned sBlockMax[kFloor ? kThreads : 1];

  for (uint64_t row = blockIdx.x; row < nRows; row += gridDim.x) {
    const typename In::Raw* x = rows + row * rowLen;
    auto keyAt = [&](uint32_t i) { return keysInShared ? sKeys[i] : core::magnitudeKey(In::convert(x[i])); };

    unsigned nonFinite = 0;
    for (uint32_t i = threadIdx.x; i < rowLen; i += kThreads) {
      const uint32_t key = core::magnitudeKey(In::convert(x[i]));
      if (keysInShared) sKeys[i] = key;
      nonFinite += core::isNonFiniteKey(key);
    }
    const unsigned allNonFinite = Reduce(temp.reduce).Sum(nonFinite);
    if (threadIdx.x == 0) {
      const unsigned want = keep > allNonFinite ? keep : allNonFinite;
      sN = want < rowLen ? want : rowLen;
      counts[row] = sN;
    }
    __syncthreads();
    const unsigned n = sN;
    if (n == 0) continue;

    // The n-th largest core::rowRank of the row (ranks are unique: the
    // position is part of them); kept = rank >= it. Radix select over the
    // 63 significant bits, 8 at a time; after the key's four digits only the
    // entries tied with the n-th largest key are still counted.
    unsigned long long threshold = 0;  // n == rowLen: everything
    bool found = n >= rowLen;
    if constexpr (kFloor) {
      if (!found && keysInShared && n == keep) {  // n == keep: at most keep NaN/Inf
        unsigned floorKey = 0xffffffffu;          // min's identity for threads without a block
        if (keep < static_cast<uint32_t>(kThreads)) {
          // Fewer blocks than threads: kThreads / keep threads share a block
          // (keep 1 on a row of 8192 would otherwise be one thread reading
          // all 8192 keys); their maxima meet in shared memory.
          const uint32_t per = static_cast<uint32_t>(kThreads) / keep;
          const uint32_t b = threadIdx.x / per, part = threadIdx.x - b * per;
          if (threadIdx.x < keep) sBlockMax[threadIdx.x] = 0;
          __syncthreads();
          if (b < keep) {
            const auto begin = static_cast<uint32_t>(uint64_t{b} * rowLen / keep);
            const auto end = static_cast<uint32_t>(uint64_t{b + 1} * rowLen / keep);
            unsigned largest = 0;
            for (uint32_t i = begin + part; i < end; i += per) largest = sKeys[i] > largest ? sKeys[i] : largest;
            atomicMax(&sBlockMax[b], largest);
          }
          __syncthreads();
          if (threadIdx.x < keep) floorKey = sBlockMax[threadIdx.x];
        } else {
          for (uint32_t b = threadIdx.x; b < keep; b += kThreads) {
            const auto begin = static_cast<uint32_t>(uint64_t{b} * rowLen / keep);
            const auto end = static_cast<uint32_t>(uint64_t{b + 1} * rowLen / keep);
            unsigned largest = 0;
            for (uint32_t i = begin; i < end; ++i) largest = sKeys[i] > largest ? sKeys[i] : largest;
            floorKey = largest < floorKey ? largest : floorKey;
          }
        }
        floorKey = Reduce(temp.reduce).Reduce(floorKey, MinOp{});
        if (threadIdx.x == 0) {
          sFloor = floorKey;
          sM = 0;
        }
        __syncthreads();
        const unsigned fk = sFloor;
        for (uint32_t i = threadIdx.x; i < rowLen; i += kThreads) {
          const uint32_t key = sKeys[i];
          if (key >= fk) {
            const unsigned slot = atomicAdd(&sM, 1u);
            if (slot < kFloorCandidates) sCand[slot] = core::rowRank(key, i);
          }
        }
        __syncthreads();
        const unsigned m = sM;
        if (m <= kFloorCandidates) {  // the same on every thread
          for (unsigned c = threadIdx.x; c < m; c += kThreads) {
            const unsigned long long rank = sCand[c];
            unsigned higher = 0;
            for (unsigned t = 0; t < m; ++t) higher += sCand[t] > rank;
            if (higher == n - 1) sThreshold = rank;  // ranks are unique: exactly one
          }
          __syncthreads();
          threshold = sThreshold;
          found = true;
        }
      }
    }
    if (!found) {
      unsigned long long prefix = 0;
      unsigned remaining = n;
#pragma unroll 1
      for (int shift = 56; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < kRadix; d += kThreads) sHist[d] = 0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < rowLen; i += kThreads) {
          const unsigned long long rank = core::rowRank(keyAt(i), i);
          if (shift == 56 || (rank >> (shift + 8)) == (prefix >> (shift + 8)))
            atomicAdd(&sHist[(rank >> shift) & (kRadix - 1)], 1u);
        }
        __syncthreads();
        unsigned c[kDigitsPer], incl[kDigitsPer];
#pragma unroll
        for (int j = 0; j < kDigitsPer; ++j) c[j] = sHist[kRadix - 1 - (threadIdx.x * kDigitsPer + j)];
        Scan(temp.scan).InclusiveSum(c, incl);
#pragma unroll
        for (int j = 0; j < kDigitsPer; ++j) {
          const unsigned excl = incl[j] - c[j];
          if (excl < remaining && remaining <= incl[j]) {  // exactly one digit
            const unsigned long long digit = kRadix - 1 - (threadIdx.x * kDigitsPer + j);
            sPrefix = prefix | (digit << shift);
            sRemaining = remaining - excl;
          }
        }
        __syncthreads();
        prefix = sPrefix;
        remaining = sRemaining;
      }
      threshold = prefix;
    }

    // Kept positions ascending: a scan of the kept flags in position order.
    uint32_t* out = positions + row * posStride;
    unsigned carry = 0;
    for (uint32_t start = 0; start < rowLen; start += kThreads * kOutPer) {
      const uint32_t i0 = start + threadIdx.x * kOutPer;
      unsigned kept = 0;
#pragma unroll
      for (int j = 0; j < kOutPer; ++j) kept += i0 + j < rowLen && core::rowRank(keyAt(i0 + j), i0 + j) >= threshold;
      unsigned before, chunk;
      Scan(temp.scan).ExclusiveSum(kept, before, chunk);
      unsigned pos = carry + before;
#pragma unroll 1
      for (int j = 0; j < kOutPer; ++j) {
        const uint32_t i = i0 + j;
        if (i >= rowLen) break;
        if (core::rowRank(keyAt(i), i) >= threshold) {
          if (pos < posStride) out[pos] = i;
          ++pos;
        }
      }
      carry += chunk;
      __syncthreads();  // temp.scan is reused by the next chunk
    }
  }
}

template <class In, int kThreads>
__global__ void __launch_bounds__(kThreads)
    rowTopKKernel(const typename In::Raw* rows, uint64_t nRows, uint32_t rowLen, uint32_t keep, uint32_t* positions,
                  uint32_t posStride, uint32_t* counts, bool keysInShared) {
  rowTopKBody<In, kThreads, false>(rows, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
}

// The 64-thread floor kernel has a register budget of its own (ptxas held it
// to 32 registers and spilled 8 bytes): at least 16 blocks an SM, so up to 64.
template <class In, int kThreads>
__global__ void __launch_bounds__(kThreads, kThreads == 64 ? 16 : 1)
    rowTopKFloorKernel(const typename In::Raw* rows, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                       uint32_t* positions, uint32_t posStride, uint32_t* counts, bool keysInShared) {
  rowTopKBody<In, kThreads, true>(rows, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
}

template <int kWarpsPerBlock>
__device__ __forceinline__ uint64_t globalWarp() {
  return static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}
constexpr int kWarps = 8;  // warp-per-row kernels: 256 threads

__global__ void __launch_bounds__(kWarps * 32)
    compactKernel(const uint32_t* stridedPositions, const unsigned char* stridedValues, uint32_t valueBytes,
                  uint32_t stride, const uint64_t* offsets, uint64_t nRows, uint32_t* positions,
                  unsigned char* values) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    const uint64_t begin = offsets[row] - offsets[0];
    uint64_t count = offsets[row + 1] - offsets[row];
    if (count > stride) count = stride;
    for (uint64_t j = lane; j < count; j += 32) {
      positions[begin + j] = stridedPositions[row * stride + j];
      if (values != nullptr)
        for (uint32_t b = 0; b < valueBytes; ++b)
          values[(begin + j) * valueBytes + b] = stridedValues[(row * stride + j) * valueBytes + b];
    }
  }
}

// selectRowsTopK's slots' values: row r's min(counts[r], stride) values.
template <class In, core::ValueType kWire>
__global__ void __launch_bounds__(kWarps * 32)
    gatherStridedKernel(const typename In::Raw* rows, uint64_t nRows, uint32_t rowLen, const uint32_t* positions,
                        uint32_t stride, const uint32_t* counts, void* values) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    const typename In::Raw* x = rows + row * rowLen;
    const uint32_t count = counts[row] < stride ? counts[row] : stride;
    for (uint32_t j = lane; j < count; j += 32) {
      const uint64_t slot = row * stride + j;
      const uint32_t pos = positions[slot];
      core::storeWireValue(values, slot, pos < rowLen ? In::convert(x[pos]) : 0.0f, kWire);
    }
  }
}

template <class In, core::ValueType kWire>
__global__ void __launch_bounds__(kWarps * 32)
    gatherKernel(const typename In::Raw* rows, uint64_t nRows, uint32_t rowLen, const uint32_t* positions,
                 const uint64_t* offsets, void* values) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    const typename In::Raw* x = rows + row * rowLen;
    const uint64_t base = offsets[0], end = offsets[row + 1] - base;
    for (uint64_t j = offsets[row] - base + lane; j < end; j += 32) {
      const uint32_t pos = positions[j];
      const float v = pos < rowLen ? In::convert(x[pos]) : 0.0f;
      core::storeWireValue(values, j, v, kWire);
    }
  }
}

// User-type stores, saturating as the host's unstage (alltoall_rows.cc):
// every kept value came from a buffer of this type, so a wire that rounded
// it above the type's range (65504 -> 65536 on a bf16 wire, for an fp16
// buffer) must deliver the largest finite value, not Inf. NaN/Inf pass.
struct F32Out {
  using Raw = float;
  __device__ __forceinline__ static float convert(float x) { return x; }
};
struct F16Out {
  using Raw = uint16_t;
  __device__ __forceinline__ static uint16_t convert(float x) { return core::wireHalfBits(x); }
};
struct Bf16Out {
  using Raw = uint16_t;
  __device__ __forceinline__ static uint16_t convert(float x) { return core::wireBfloat16Bits(x); }
};

template <class Out, core::ValueType kWire>
__global__ void __launch_bounds__(kWarps * 32)
    scatterKernel(const void* values, int scaleExp, const uint32_t* positions, const uint64_t* offsets, uint64_t nRows,
                  uint32_t rowLen, typename Out::Raw* rows) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    typename Out::Raw* y = rows + row * rowLen;
    for (uint32_t e = lane; e < rowLen; e += 32) y[e] = typename Out::Raw(0);
    __syncwarp();  // the zeros land before the kept values
    const uint64_t base = offsets[0], end = offsets[row + 1] - base;
    for (uint64_t j = offsets[row] - base + lane; j < end; j += 32) {
      const uint32_t pos = positions[j];
      if (pos < rowLen) y[pos] = Out::convert(core::loadWireValue(values, j, kWire, scaleExp));
    }
    __syncwarp();
  }
}

template <typename F>
decltype(auto) withStorer(spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(F16Out{});
    case spcclBfloat16:
      return f(Bf16Out{});
    default:
      return f(F32Out{});
  }
}

// A position of `bytes` little-endian bytes (a stream's positions section
// has no alignment: byte loads).
__device__ __forceinline__ uint32_t loadPosition(const unsigned char* src, uint64_t i, uint32_t bytes) {
  uint32_t v = 0;
  for (uint32_t b = 0; b < bytes; ++b) v |= uint32_t{src[i * bytes + b]} << (8 * b);
  return v;
}

// Warp per row: the scale from the warp's maximum (the same in any order),
// then each value's code; the scale's bytes (unaligned in the stream) by lane 0.
__global__ void __launch_bounds__(kWarps * 32)
    encodeInt8Kernel(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                     unsigned char* codes) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    const uint64_t base = offsets[0], begin = offsets[row] - base, end = offsets[row + 1] - base;
    float m = 0.0f;
    for (uint64_t j = begin + lane; j < end; j += 32) m = fmaxf(m, core::int8FiniteMagnitude(values[j]));
    for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
    const float scale = core::int8ScaleOfMax(m);
    if (lane < 4) scales[row * 4 + lane] = static_cast<unsigned char>(core::floatBits(scale) >> (8 * lane));
    for (uint64_t j = begin + lane; j < end; j += 32)
      codes[j] = static_cast<unsigned char>(core::int8Encode(values[j], scale));
  }
}

// scatterKernel's rows with int8 codes and a scale per row (unaligned in
// the stream: read byte by byte); a row with a bad scale stays zero.
template <typename Out>
__global__ void __launch_bounds__(kWarps * 32)
    scatterInt8Kernel(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                      const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, typename Out::Raw* rows,
                      unsigned long long* badRow) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    typename Out::Raw* y = rows + row * rowLen;
    for (uint32_t e = lane; e < rowLen; e += 32) y[e] = typename Out::Raw(0);
    __syncwarp();  // the zeros land before the kept values
    uint32_t bits = 0;
    for (uint32_t b = 0; b < 4; ++b) bits |= uint32_t{scales[row * 4 + b]} << (8 * b);
    const float scale = core::bitsFloat(bits);
    if (!core::int8ScaleValid(scale)) {
      if (lane == 0) atomicMin(badRow, static_cast<unsigned long long>(row + 1));
      continue;
    }
    const uint64_t base = offsets[0], end = offsets[row + 1] - base;
    for (uint64_t j = offsets[row] - base + lane; j < end; j += 32) {
      const uint32_t pos = positions[j];
      if (pos < rowLen) y[pos] = Out::convert(core::int8Decode(static_cast<int8_t>(codes[j]), scale));
    }
    __syncwarp();
  }
}

__global__ void narrowKernel(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    for (uint32_t b = 0; b < bytes; ++b) dst[i * bytes + b] = static_cast<unsigned char>(positions[i] >> (8 * b));
}

// Warp per row: each position against the row length and the one before it;
// *badRow = min over failing rows of row + 1 (starts at ~0: none).
__global__ void __launch_bounds__(kWarps * 32)
    widenKernel(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows, uint32_t rowLen,
                uint32_t* dst, unsigned long long* badRow) {
  const unsigned lane = threadIdx.x & 31u;
  const uint64_t warps = static_cast<uint64_t>(gridDim.x) * kWarps;
  for (uint64_t row = globalWarp<kWarps>(); row < nRows; row += warps) {
    const uint64_t base = offsets[0], begin = offsets[row] - base, end = offsets[row + 1] - base;
    bool bad = false;
    for (uint64_t j = begin + lane; j < end; j += 32) {
      const uint32_t pos = loadPosition(src, j, bytes);
      bad |= pos >= rowLen || (j > begin && pos <= loadPosition(src, j - 1, bytes));
      dst[j] = pos;
    }
    if (__any_sync(0xffffffffu, bad) && lane == 0) atomicMin(badRow, static_cast<unsigned long long>(row + 1));
  }
}

}  // namespace

Status selectRowsTopK(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                      uint32_t* positions, uint32_t posStride, uint32_t* counts, cudaStream_t stream,
                      RowTopKMethod method) {
  if (!detail::isFloatInput(type)) return invalidArgument("selectRowsTopK: type must be fp32/fp16/bf16");
  if (nRows == 0) return Status::ok();
  if (counts == nullptr || (rowLen > 0 && rows == nullptr) || (posStride > 0 && positions == nullptr))
    return invalidArgument("selectRowsTopK: null buffer");
  const bool keysInShared = rowLen <= kSharedKeys;
  const size_t smem = keysInShared ? static_cast<size_t>(rowLen) * sizeof(uint32_t) : 0;
  detail::withLoader(type, [&](auto in) {
    using In = decltype(in);
    const auto* r = static_cast<const typename In::Raw*>(rows);
    const bool small = rowLen <= 512;
    const unsigned grid = small ? detail::gridFor(nRows, 1, 32) : detail::gridFor(nRows, 1, 8);
    if (method == RowTopKMethod::kFloorFirst) {
      if (small)
        rowTopKFloorKernel<In, 64>
            <<<grid, 64, smem, stream>>>(r, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
      else
        rowTopKFloorKernel<In, 256>
            <<<grid, 256, smem, stream>>>(r, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
    } else if (small) {
      rowTopKKernel<In, 64>
          <<<grid, 64, smem, stream>>>(r, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
    } else {
      rowTopKKernel<In, 256>
          <<<grid, 256, smem, stream>>>(r, nRows, rowLen, keep, positions, posStride, counts, keysInShared);
    }
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes, uint32_t stride,
                   const uint64_t* offsets, uint64_t nRows, uint32_t* positions, void* values, cudaStream_t stream) {
  if (nRows == 0) return Status::ok();
  if (offsets == nullptr || (stride > 0 && (stridedPositions == nullptr || positions == nullptr)) ||
      (values != nullptr && stridedValues == nullptr))
    return invalidArgument("compactRows: null buffer");
  compactKernel<<<detail::gridFor(nRows, kWarps, 8), kWarps * 32, 0, stream>>>(
      stridedPositions, static_cast<const unsigned char*>(stridedValues), valueBytes, stride, offsets, nRows, positions,
      static_cast<unsigned char*>(values));
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status gatherStridedRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                              const uint32_t* positions, uint32_t stride, const uint32_t* counts, core::ValueType wire,
                              void* values, cudaStream_t stream) {
  if (!detail::isFloatInput(type) || !detail::isWireType(wire))
    return invalidArgument("gatherStridedRowValues: types must be fp32/fp16/bf16");
  if (nRows == 0 || stride == 0) return Status::ok();
  if (rows == nullptr || positions == nullptr || counts == nullptr || values == nullptr)
    return invalidArgument("gatherStridedRowValues: null buffer");
  const unsigned grid = detail::gridFor(nRows, kWarps, 8);
  detail::withLoader(type, [&](auto in) {
    using In = decltype(in);
    detail::withWire(wire, [&](auto w) {
      gatherStridedKernel<In, decltype(w)::value><<<grid, kWarps * 32, 0, stream>>>(
          static_cast<const typename In::Raw*>(rows), nRows, rowLen, positions, stride, counts, values);
    });
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status gatherRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                       const uint32_t* positions, const uint64_t* offsets, core::ValueType wire, void* values,
                       cudaStream_t stream) {
  if (!detail::isFloatInput(type) || !detail::isWireType(wire))
    return invalidArgument("gatherRowValues: types must be fp32/fp16/bf16");
  if (nRows == 0) return Status::ok();
  if (rows == nullptr || positions == nullptr || offsets == nullptr || values == nullptr)
    return invalidArgument("gatherRowValues: null buffer");
  const unsigned grid = detail::gridFor(nRows, kWarps, 8);
  detail::withLoader(type, [&](auto in) {
    using In = decltype(in);
    detail::withWire(wire, [&](auto w) {
      gatherKernel<In, decltype(w)::value><<<grid, kWarps * 32, 0, stream>>>(static_cast<const typename In::Raw*>(rows),
                                                                             nRows, rowLen, positions, offsets, values);
    });
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status scatterRowValues(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                        const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows,
                        cudaStream_t stream) {
  if (!detail::isFloatInput(type) || !(detail::isWireType(wire) || wire == core::ValueType::kFloat8e4m3))
    return invalidArgument("scatterRowValues: types must be fp32/fp16/bf16 (and fp8 on the wire)");
  if (nRows == 0) return Status::ok();
  if (rows == nullptr || positions == nullptr || offsets == nullptr || values == nullptr)
    return invalidArgument("scatterRowValues: null buffer");
  const unsigned grid = detail::gridFor(nRows, kWarps, 8);
  withStorer(type, [&](auto o) {
    using Out = decltype(o);
    const auto launch = [&](auto w) {
      scatterKernel<Out, decltype(w)::value><<<grid, kWarps * 32, 0, stream>>>(
          values, scaleExp, positions, offsets, nRows, rowLen, static_cast<typename Out::Raw*>(rows));
    };
    if (wire == core::ValueType::kFloat8e4m3) launch(detail::WireTag<core::ValueType::kFloat8e4m3>{});
    else detail::withWire(wire, launch);
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (bytes != 1 && bytes != 2 && bytes != 4) return invalidArgument("narrowPositions: bytes must be 1, 2 or 4");
  narrowKernel<<<detail::gridFor(n, 256, 8), 256, 0, stream>>>(positions, n, bytes, dst);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status widenRowPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                         uint32_t rowLen, uint32_t* dst, uint64_t* badRow, cudaStream_t stream) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  if (bytes != 1 && bytes != 2 && bytes != 4) return invalidArgument("widenRowPositions: bytes must be 1, 2 or 4");
  SPCCL_CUDA_CHECK(cudaMemsetAsync(badRow, 0xff, sizeof(uint64_t), stream));
  if (nRows == 0) return Status::ok();
  widenKernel<<<detail::gridFor(nRows, kWarps, 8), kWarps * 32, 0, stream>>>(
      src, bytes, offsets, nRows, rowLen, dst, reinterpret_cast<unsigned long long*>(badRow));
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                      unsigned char* codes, cudaStream_t stream) {
  if (nRows == 0) return Status::ok();
  encodeInt8Kernel<<<detail::gridFor(nRows, kWarps, 8), kWarps * 32, 0, stream>>>(values, offsets, nRows, scales,
                                                                                  codes);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                       const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows,
                       uint64_t* badRow, cudaStream_t stream) {
  if (!detail::isFloatInput(type)) return invalidArgument("scatterRowsInt8: the rows must be fp32/fp16/bf16");
  SPCCL_CUDA_CHECK(cudaMemsetAsync(badRow, 0xff, sizeof(uint64_t), stream));
  if (nRows == 0) return Status::ok();
  if (rows == nullptr || positions == nullptr || offsets == nullptr || scales == nullptr || codes == nullptr)
    return invalidArgument("scatterRowsInt8: null buffer");
  withStorer(type, [&](auto o) {
    using Out = decltype(o);
    scatterInt8Kernel<Out><<<detail::gridFor(nRows, kWarps, 8), kWarps * 32, 0, stream>>>(
        scales, codes, positions, offsets, nRows, rowLen, static_cast<typename Out::Raw*>(rows),
        reinterpret_cast<unsigned long long*>(badRow));
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace spccl::cuda
