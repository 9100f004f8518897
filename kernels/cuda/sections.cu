// Stream sections on the device: the index section of a pairs stream
// (codec/codec.cc encodePairs' kDelta and kBitmap branches write the same
// bytes) and the checked sum of received sections (parseStream's index
// walk and reduceStreams). A peer's index section is untrusted: every
// finding is a fault key, the lowest of which a section keeps, so the
// parallel check reports what the host's sequential walk stops at.
#include <algorithm>

#include <cub/device/device_scan.cuh>
#include <cuda/std/bit>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "kernels/core/elementwise.h"
#include "kernels/core/wire_section.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr size_t kAlign = 256;

// A fault as a key whose order is the host walk's: position first, the
// fault code (3 bits) second. Delta places its size and padding faults at
// positions nnz and nnz + 1, after every varint; the bitmap's come in the
// order parseStream checks them (truncated, bits past the range, count,
// section and stream size, padding).
__host__ __device__ constexpr unsigned long long faultKey(uint64_t position, IndexFault f) {
  return (static_cast<unsigned long long>(position) << 3) | static_cast<unsigned long long>(f);
}
constexpr uint64_t kBitmapTruncated = 0, kBitmapPastRange = 1, kBitmapCount = 2, kBitmapShort = 3, kBitmapPadding = 4;

__device__ __forceinline__ void report(SectionCheck* check, uint64_t position, IndexFault f) {
  atomicMin(&check->key, faultKey(position, f));
}

// A gap slot whose varint did not decode (never a decoded gap: those fit 32 bits).
constexpr uint64_t kNoGap = ~uint64_t{0};

// Scan inputs, computed from the bytes as the scan reads them. Callable on
// the host too only so that thrust's iterator compiles without warnings.
struct GapBytes {  // varint bytes of gap j
  const uint32_t* indices;
  uint64_t rangeBegin;
  __host__ __device__ uint64_t operator()(uint64_t j) const {
    return core::varintBytes(core::deltaGap(indices, j, rangeBegin));
  }
};
struct Terminator {  // 1 at a varint's last byte (high bit clear); item n (past the bytes) 0
  const unsigned char* bytes;
  uint64_t n;
  __host__ __device__ uint64_t operator()(uint64_t i) const { return i < n && (bytes[i] & 0x80u) == 0 ? 1 : 0; }
};
struct BitsSet {  // bits set in map byte i; item n 0
  const unsigned char* bytes;
  uint64_t n;
  __host__ __device__ uint64_t operator()(uint64_t i) const {
    return i < n ? static_cast<uint64_t>(::cuda::std::popcount(static_cast<unsigned>(bytes[i]))) : 0;
  }
};

template <class F>
using Over = thrust::transform_iterator<F, thrust::counting_iterator<uint64_t>>;
template <class F>
Over<F> over(F f) {
  return thrust::make_transform_iterator(thrust::counting_iterator<uint64_t>(0), f);
}

// cub's two-phase temp storage for the scans below (the sizes depend only on
// the types and the count).
template <class F>
size_t exclusiveScanTempBytes(uint64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, over(F{}), static_cast<uint64_t*>(nullptr), n);
  return bytes;
}
size_t inclusiveScanTempBytes(uint64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
                                n);
  return bytes;
}

uint64_t bitmapBytes(uint64_t rangeBegin, uint64_t rangeEnd) { return (rangeEnd - rangeBegin + 7) / 8; }

// ---- encoding ----

// Gap j's varint at its offset.
__global__ void __launch_bounds__(kThreads)
    writeVarintsKernel(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, const uint64_t* offsets,
                       unsigned char* dst) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nnz; j += stride) {
    core::putVarint(dst + offsets[j], core::deltaGap(indices, j, rangeBegin));
  }
}

// One thread per map byte, no atomics: the first index at or past the
// byte's first position by binary search, then the indices inside its 8.
__global__ void __launch_bounds__(kThreads)
    writeBitmapKernel(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t mapBytes,
                      unsigned char* dst) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; b < mapBytes; b += stride) {
    const uint64_t first = rangeBegin + 8 * b;
    uint64_t lo = 0, hi = nnz;
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (indices[mid] < first) lo = mid + 1;
      else hi = mid;
    }
    unsigned byte = 0;
    for (uint64_t j = lo; j < nnz && indices[j] < first + 8; ++j) byte |= 1u << (indices[j] - first);
    dst[b] = static_cast<unsigned char>(byte);
  }
}

// ---- checks ----

__global__ void __launch_bounds__(kThreads)
    checkCooKernel(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd, SectionCheck* check) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nnz; j += stride) {
    const uint64_t i = indices[j];
    if (i < rangeBegin || i >= rangeEnd || (j > 0 && i <= indices[j - 1])) {
      report(check, j, IndexFault::kBadIndex);
      return;  // this thread's later positions are higher
    }
  }
}

// Over the section's maxBytes bytes (terminators[i]: varints ending before
// byte i; item maxBytes: all of them), plus one slot for the whole-section
// findings. Each varint is decoded by the thread at its first byte, as
// readVarint32 reads it: a 5th byte with any of bits 0xf0 set (more than 32
// bits, or a 6th byte to come) or the bytes running out is kVarint.
__global__ void __launch_bounds__(kThreads)
    decodeDeltaKernel(const unsigned char* bytes, uint64_t maxBytes, uint64_t minBytes, const uint64_t* terminators,
                      uint64_t nnz, uint64_t* gaps, SectionCheck* check) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i <= maxBytes; i += stride) {
    if (i == maxBytes) {
      if (terminators[maxBytes] < nnz) report(check, terminators[maxBytes], IndexFault::kVarint);
      if (nnz == 0 && minBytes > 0) report(check, nnz, IndexFault::kSectionSize);  // the section is empty
      continue;
    }
    const uint64_t v = terminators[i];  // the varint byte i belongs to
    const unsigned char c = bytes[i];
    if (v >= nnz) {  // past the section's end
      if (c != 0) report(check, nnz + 1, IndexFault::kPadding);
      continue;
    }
    if ((c & 0x80u) == 0 && v == nnz - 1 && i + 1 < minBytes) report(check, nnz, IndexFault::kSectionSize);
    if (i > 0 && (bytes[i - 1] & 0x80u) != 0) continue;  // not a varint's first byte
    const unsigned char* p = bytes + i;
    uint32_t gap = 0;
    if (core::readVarint32(&p, bytes + maxBytes, &gap)) gaps[v] = gap;
    else report(check, v, IndexFault::kVarint);
  }
}

// index_j = rangeBegin + gap_0 + ... + gap_j + j, from the inclusive scan of
// the gaps. A varint that did not decode is that position's kVarint already.
__global__ void __launch_bounds__(kThreads)
    checkDeltaKernel(const uint64_t* gaps, const uint64_t* gapSums, uint64_t nnz, uint64_t rangeBegin,
                     uint64_t rangeEnd, SectionCheck* check) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nnz; j += stride) {
    if (gaps[j] == kNoGap) continue;
    if (rangeBegin + gapSums[j] + j >= rangeEnd) {
      report(check, j, IndexFault::kBadIndex);
      return;
    }
  }
}

// Over the section's maxBytes bytes (the map fits in them), plus one slot
// for the whole-map findings (setBefore[mapBytes]: the bits set in the map).
__global__ void __launch_bounds__(kThreads)
    checkBitmapKernel(const unsigned char* bytes, uint64_t mapBytes, uint64_t minBytes, uint64_t maxBytes, uint64_t len,
                      const uint64_t* setBefore, uint64_t nnz, SectionCheck* check) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i <= maxBytes; i += stride) {
    if (i == maxBytes) {
      if (setBefore[mapBytes] != nnz) report(check, kBitmapCount, IndexFault::kBitmapCount);
      if (mapBytes < minBytes) report(check, kBitmapShort, IndexFault::kSectionSize);
    } else if (i >= mapBytes) {
      if (bytes[i] != 0) report(check, kBitmapPadding, IndexFault::kPadding);
    } else if (i == mapBytes - 1 && len % 8 != 0 && (bytes[i] >> (len % 8)) != 0) {
      report(check, kBitmapPastRange, IndexFault::kBitmapPastRange);
    }
  }
}

// ---- sums ----

struct CooIndex {
  const uint32_t* indices;
  __device__ uint64_t operator()(uint64_t j) const { return indices[j]; }
};
struct DeltaIndex {
  const uint64_t* gapSums;
  uint64_t rangeBegin;
  __device__ uint64_t operator()(uint64_t j) const { return rangeBegin + gapSums[j] + j; }
};

// A section that failed its check adds nothing (decided on the device: no
// round trip); its first thread fills in the faulty index for the host.
// Indices are distinct within a section: a plain += per pair.
template <class Index>
__global__ void __launch_bounds__(kThreads)
    addPairsKernel(Index index, const void* values, core::ValueType vt, int scaleExp, uint64_t nnz, uint64_t rangeBegin,
                   uint64_t rangeEnd, float* out, uint64_t outBase, SectionCheck* check) {
  const unsigned long long key = check->key;
  if (key != kNoSectionFault) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && (key & 7u) == static_cast<unsigned>(IndexFault::kBadIndex))
      check->index = index(key >> 3);
    return;
  }
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nnz; j += stride) {
    const uint64_t i = index(j);
    if (i < rangeBegin || i >= rangeEnd) continue;  // never where the check passed
    out[i - outBase] += core::loadWireValue(values, j, vt, scaleExp);
  }
}

// One thread per map byte: its pairs start at the bits set before it.
__global__ void __launch_bounds__(kThreads)
    addBitmapKernel(const unsigned char* bytes, uint64_t mapBytes, const uint64_t* setBefore, const void* values,
                    core::ValueType vt, int scaleExp, uint64_t nnz, uint64_t rangeBegin, uint64_t len, float* out,
                    uint64_t outBase, const SectionCheck* check) {
  if (check->key != kNoSectionFault) return;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t b = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; b < mapBytes; b += stride) {
    unsigned bits = bytes[b];
    uint64_t j = setBefore[b];
    while (bits != 0) {
      const uint64_t at = 8 * b + static_cast<uint64_t>(::cuda::std::countr_zero(bits));
      bits &= bits - 1;
      if (at < len && j < nnz) out[rangeBegin + at - outBase] += core::loadWireValue(values, j, vt, scaleExp);
      ++j;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    addDenseKernel(const void* values, core::ValueType vt, int scaleExp, uint64_t len, float* out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < len; i += stride)
    out[i] += core::loadWireValue(values, i, vt, scaleExp);
}

__global__ void setFaultKernel(SectionCheck* check, unsigned long long key) { check->key = key; }

bool knownValueType(core::ValueType t) { return detail::isWireType(t) || t == core::ValueType::kFloat8e4m3; }

// Where a section's scratch lies in the workspace (kDelta, kBitmap).
struct SectionLayout {
  size_t counts = 0;   // (bytes + 1) uint64: terminators or bits set before each byte
  size_t gaps = 0;     // kDelta: nnz uint64 decoded gaps
  size_t gapSums = 0;  // kDelta: their inclusive scan
  size_t temp = 0;     // cub's temp storage
  size_t tempBytes = 0;
  size_t total = 0;
};

// A map that does not fit the section: found on the host, nothing to read.
bool bitmapTruncated(const WireSection& s) { return bitmapBytes(s.rangeBegin, s.rangeEnd) > s.indexMaxBytes; }

SectionLayout sectionLayout(const WireSection& s) {
  SectionLayout l;
  if (s.dense || s.encoding == IndexEncoding::kCoo32) return l;
  if (s.encoding == IndexEncoding::kDelta) {
    const uint64_t n = s.indexMaxBytes;
    l.gaps = detail::alignUp((n + 1) * sizeof(uint64_t), kAlign);
    l.gapSums = l.gaps + detail::alignUp(s.nnz * sizeof(uint64_t), kAlign);
    l.temp = l.gapSums + detail::alignUp(s.nnz * sizeof(uint64_t), kAlign);
    l.tempBytes = std::max(exclusiveScanTempBytes<Terminator>(n + 1), inclusiveScanTempBytes(s.nnz));
  } else {
    if (bitmapTruncated(s)) return l;
    const uint64_t mapBytes = bitmapBytes(s.rangeBegin, s.rangeEnd);
    l.temp = detail::alignUp((mapBytes + 1) * sizeof(uint64_t), kAlign);
    l.tempBytes = exclusiveScanTempBytes<BitsSet>(mapBytes + 1);
  }
  l.total = l.temp + l.tempBytes;
  return l;
}

}  // namespace

size_t encodeIndicesWorkspaceBytes(IndexEncoding e, uint64_t nnz) {
  if (e != IndexEncoding::kDelta || nnz == 0) return 0;
  return detail::alignUp(nnz * sizeof(uint64_t), kAlign) + exclusiveScanTempBytes<GapBytes>(nnz);
}

namespace {

__global__ void __launch_bounds__(kThreads)
    lowerBoundsKernel(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count; i += stride) {
    uint64_t lo = 0, hi = n;  // the first position whose index is not below the key
    while (lo < hi) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (sorted[mid] < keys[i]) lo = mid + 1;
      else hi = mid;
    }
    out[i] = lo;
  }
}

}  // namespace

Status lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out,
                   cudaStream_t stream) {
  if (count == 0) return Status::ok();
  if ((n > 0 && sorted == nullptr) || keys == nullptr || out == nullptr)
    return invalidArgument("lowerBounds: null buffer");
  lowerBoundsKernel<<<detail::gridFor(count, kThreads), kThreads, 0, stream>>>(sorted, n, keys, count, out);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                     unsigned char* dst, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  if (e != IndexEncoding::kCoo32 && e != IndexEncoding::kDelta && e != IndexEncoding::kBitmap)
    return invalidArgument("encodeIndices: the encoding must be coo32, delta or bitmap");
  if (rangeEnd < rangeBegin) return invalidArgument("encodeIndices: range end before its begin");
  const uint64_t mapBytes = e == IndexEncoding::kBitmap ? bitmapBytes(rangeBegin, rangeEnd) : 0;
  if ((nnz > 0 && indices == nullptr) || ((nnz > 0 || mapBytes > 0) && dst == nullptr))
    return invalidArgument("encodeIndices: null buffer");
  if (e == IndexEncoding::kCoo32) {
    if (nnz > 0)
      SPCCL_CUDA_CHECK(cudaMemcpyAsync(dst, indices, nnz * sizeof(uint32_t), cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  if (e == IndexEncoding::kBitmap) {
    if (mapBytes == 0) return Status::ok();
    writeBitmapKernel<<<detail::gridFor(mapBytes, kThreads), kThreads, 0, stream>>>(indices, nnz, rangeBegin, mapBytes,
                                                                                    dst);
    SPCCL_CUDA_CHECK_LAUNCH();
    return Status::ok();
  }
  if (nnz == 0) return Status::ok();
  if (workspace == nullptr || workspaceBytes < encodeIndicesWorkspaceBytes(e, nnz))
    return invalidArgument("encodeIndices: workspace too small");
  // Each varint's offset is the bytes of the varints before it.
  auto* offsets = static_cast<uint64_t*>(workspace);
  const size_t tempAt = detail::alignUp(nnz * sizeof(uint64_t), kAlign);
  size_t tempBytes = workspaceBytes - tempAt;
  SPCCL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(static_cast<char*>(workspace) + tempAt, tempBytes,
                                                 over(GapBytes{indices, rangeBegin}), offsets, nnz, stream));
  writeVarintsKernel<<<detail::gridFor(nnz, kThreads), kThreads, 0, stream>>>(indices, nnz, rangeBegin, offsets, dst);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status sectionWorkspaceBytes(const WireSection& s, size_t* bytes) {
  if (!knownValueType(s.valueType)) return invalidArgument("reduceSections: unknown wire value type");
  if (s.rangeEnd < s.rangeBegin) return invalidArgument("reduceSections: range end before its begin");
  if (s.dense) {
    if (s.nnz != s.rangeEnd - s.rangeBegin)
      return invalidArgument("reduceSections: a dense section's nnz must be its range's length");
  } else if (s.encoding == IndexEncoding::kCoo32) {
    if (s.nnz > 0 && s.indices == nullptr) return invalidArgument("reduceSections: null indices");
  } else if (s.encoding == IndexEncoding::kDelta || s.encoding == IndexEncoding::kBitmap) {
    if (s.indexMaxBytes > 0 && s.indexBytes == nullptr) return invalidArgument("reduceSections: null index bytes");
  } else {
    return invalidArgument("reduceSections: the index encoding must be coo32, delta or bitmap");
  }
  if (s.nnz > 0 && s.values == nullptr) return invalidArgument("reduceSections: null values");
  *bytes = sectionLayout(s).total;
  return Status::ok();
}

Status addSection(const WireSection& s, float* out, uint64_t outBase, SectionCheck* check, void* workspace,
                  size_t workspaceBytes, cudaStream_t stream) {
  const SectionLayout l = sectionLayout(s);
  if (workspaceBytes < l.total || (l.total > 0 && workspace == nullptr))
    return invalidArgument("addSection: workspace too small");
  if (s.rangeBegin < outBase) return invalidArgument("addSection: the range starts before out");
  SPCCL_CUDA_CHECK(cudaMemsetAsync(check, 0xff, sizeof(SectionCheck), stream));  // no fault
  const uint64_t len = s.rangeEnd - s.rangeBegin;
  if (s.dense) {
    if (len == 0) return Status::ok();
    addDenseKernel<<<detail::gridFor(len, kThreads * 4u), kThreads, 0, stream>>>(s.values, s.valueType, s.scaleExp, len,
                                                                                 out + (s.rangeBegin - outBase));
    SPCCL_CUDA_CHECK_LAUNCH();
    return Status::ok();
  }
  auto* ws = static_cast<char*>(workspace);
  const unsigned pairsGrid = detail::gridFor(s.nnz, kThreads * 4u);
  if (s.encoding == IndexEncoding::kCoo32) {
    if (s.nnz == 0) return Status::ok();
    checkCooKernel<<<pairsGrid, kThreads, 0, stream>>>(s.indices, s.nnz, s.rangeBegin, s.rangeEnd, check);
    SPCCL_CUDA_CHECK_LAUNCH();
    addPairsKernel<<<pairsGrid, kThreads, 0, stream>>>(CooIndex{s.indices}, s.values, s.valueType, s.scaleExp, s.nnz,
                                                       s.rangeBegin, s.rangeEnd, out, outBase, check);
    SPCCL_CUDA_CHECK_LAUNCH();
    return Status::ok();
  }
  if (s.encoding == IndexEncoding::kBitmap) {
    if (bitmapTruncated(s)) {
      setFaultKernel<<<1, 1, 0, stream>>>(check, faultKey(kBitmapTruncated, IndexFault::kSectionSize));
      SPCCL_CUDA_CHECK_LAUNCH();
      return Status::ok();
    }
    const uint64_t mapBytes = bitmapBytes(s.rangeBegin, s.rangeEnd);
    auto* setBefore = reinterpret_cast<uint64_t*>(ws + l.counts);
    size_t tempBytes = l.tempBytes;
    SPCCL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(ws + l.temp, tempBytes, over(BitsSet{s.indexBytes, mapBytes}),
                                                   setBefore, mapBytes + 1, stream));
    checkBitmapKernel<<<detail::gridFor(s.indexMaxBytes + 1, kThreads * 4u), kThreads, 0, stream>>>(
        s.indexBytes, mapBytes, s.indexMinBytes, s.indexMaxBytes, len, setBefore, s.nnz, check);
    SPCCL_CUDA_CHECK_LAUNCH();
    if (s.nnz == 0 || mapBytes == 0) return Status::ok();
    addBitmapKernel<<<detail::gridFor(mapBytes, kThreads), kThreads, 0, stream>>>(
        s.indexBytes, mapBytes, setBefore, s.values, s.valueType, s.scaleExp, s.nnz, s.rangeBegin, len, out, outBase,
        check);
    SPCCL_CUDA_CHECK_LAUNCH();
    return Status::ok();
  }
  // kDelta: number the varints by the terminators before each byte, decode
  // each at its first byte, then the indices from the scan of the gaps.
  const uint64_t n = s.indexMaxBytes;
  auto* terminators = reinterpret_cast<uint64_t*>(ws + l.counts);
  auto* gaps = reinterpret_cast<uint64_t*>(ws + l.gaps);
  auto* gapSums = reinterpret_cast<uint64_t*>(ws + l.gapSums);
  size_t tempBytes = l.tempBytes;
  SPCCL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(ws + l.temp, tempBytes, over(Terminator{s.indexBytes, n}), terminators,
                                                 n + 1, stream));
  if (s.nnz > 0) SPCCL_CUDA_CHECK(cudaMemsetAsync(gaps, 0xff, s.nnz * sizeof(uint64_t), stream));  // kNoGap
  decodeDeltaKernel<<<detail::gridFor(n + 1, kThreads * 4u), kThreads, 0, stream>>>(s.indexBytes, n, s.indexMinBytes,
                                                                                    terminators, s.nnz, gaps, check);
  SPCCL_CUDA_CHECK_LAUNCH();
  if (s.nnz == 0) return Status::ok();
  tempBytes = l.tempBytes;
  SPCCL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(ws + l.temp, tempBytes, gaps, gapSums, s.nnz, stream));
  checkDeltaKernel<<<pairsGrid, kThreads, 0, stream>>>(gaps, gapSums, s.nnz, s.rangeBegin, s.rangeEnd, check);
  SPCCL_CUDA_CHECK_LAUNCH();
  addPairsKernel<<<pairsGrid, kThreads, 0, stream>>>(DeltaIndex{gapSums, s.rangeBegin}, s.values, s.valueType,
                                                     s.scaleExp, s.nnz, s.rangeBegin, s.rangeEnd, out, outBase, check);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

IndexCheck sectionCheckResult(const SectionCheck& c) {
  if (c.key == kNoSectionFault) return IndexCheck{IndexFault::kNone, 0, 0};
  const auto fault = static_cast<IndexFault>(c.key & 7u);
  if (fault != IndexFault::kBadIndex) return IndexCheck{fault, 0, 0};
  return IndexCheck{fault, c.index, c.key >> 3};
}

}  // namespace spccl::cuda
