// Device-side building blocks shared by the kernels in kernels/cuda: typed
// element loaders (the conversions themselves are core:: rules) and launch
// helpers. Nothing here decides anything about an element: that is
// kernels/core/elementwise.h's job.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_kernels.h"

namespace spccl::cuda::detail {

// Loaders of user float buffers: Raw is the stored type; kVec elements make
// one 16-byte access.
struct F32In {
  using Raw = float;
  static constexpr int kVec = 4;
  __device__ __forceinline__ static float convert(float x) { return x; }
};
struct F16In {
  using Raw = uint16_t;
  static constexpr int kVec = 8;
  __device__ __forceinline__ static float convert(uint16_t h) { return core::halfBitsToFloat(h); }
};
struct Bf16In {
  using Raw = uint16_t;
  static constexpr int kVec = 8;
  __device__ __forceinline__ static float convert(uint16_t b) { return core::bfloat16BitsToFloat(b); }
};

// 16 bytes from p (16-byte aligned), as floats. kStream: evict-first loads
// for data read exactly once.
template <class In, bool kStream>
__device__ __forceinline__ void load16(const typename In::Raw* p, float (&out)[In::kVec]) {
  const uint4 u = kStream ? __ldcs(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
  if constexpr (In::kVec == 4) {
    out[0] = __uint_as_float(u.x);
    out[1] = __uint_as_float(u.y);
    out[2] = __uint_as_float(u.z);
    out[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = In::convert(static_cast<uint16_t>(w[i] & 0xffffu));
      out[2 * i + 1] = In::convert(static_cast<uint16_t>(w[i] >> 16));
    }
  }
}

// kN fp32 from p (16-byte aligned), kN a multiple of 4.
template <int kN, bool kStream>
__device__ __forceinline__ void loadF32(const float* p, float (&out)[kN]) {
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    const float4 f = kStream ? __ldcs(reinterpret_cast<const float4*>(p) + i) : reinterpret_cast<const float4*>(p)[i];
    out[4 * i] = f.x;
    out[4 * i + 1] = f.y;
    out[4 * i + 2] = f.z;
    out[4 * i + 3] = f.w;
  }
}

template <int kN, bool kStream>
__device__ __forceinline__ void storeF32(float* p, const float (&v)[kN]) {
#pragma unroll
  for (int i = 0; i < kN / 4; ++i) {
    const float4 f = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    if (kStream) __stcs(reinterpret_cast<float4*>(p) + i, f);
    else reinterpret_cast<float4*>(p)[i] = f;
  }
}

// Sum of v over a full warp. sm_80+ has a single instruction for it
// (__reduce_add_sync); older parts (a build with CMAKE_CUDA_ARCHITECTURES=75)
// take the five-step shuffle tree.
__device__ __forceinline__ unsigned warpSumFull(unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_add_sync(0xffffffffu, v);
#else
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
#endif
}

// Maximum of v over a full warp, the same way.
__device__ __forceinline__ unsigned warpMaxFull(unsigned v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
#endif
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Calls f with the loader of a user float type (fp32 for anything else: the
// host wrappers reject other types first).
template <typename F>
decltype(auto) withLoader(spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(F16In{});
    case spcclBfloat16:
      return f(Bf16In{});
    default:
      return f(F32In{});
  }
}

template <core::ValueType kWire>
struct WireTag {
  static constexpr core::ValueType value = kWire;
};

template <typename F>
decltype(auto) withWire(core::ValueType vt, F&& f) {
  switch (vt) {
    case core::ValueType::kFloat16:
      return f(WireTag<core::ValueType::kFloat16>{});
    case core::ValueType::kBfloat16:
      return f(WireTag<core::ValueType::kBfloat16>{});
    default:
      return f(WireTag<core::ValueType::kFloat32>{});
  }
}

inline bool isFloatInput(spcclDataType_t t) { return t == spcclFloat32 || t == spcclFloat16 || t == spcclBfloat16; }
inline bool isWireType(core::ValueType t) {
  return t == core::ValueType::kFloat32 || t == core::ValueType::kFloat16 || t == core::ValueType::kBfloat16;
}

// Multiprocessors of the current device (cached per device).
int multiprocessorCount();

// Blocks for a grid-stride loop over `work` items of `perBlock` each, capped
// at a few waves of the device.
inline unsigned gridFor(uint64_t work, uint64_t perBlock, int blocksPerSm = 8) {
  const uint64_t want = (work + perBlock - 1) / perBlock;
  const uint64_t cap = static_cast<uint64_t>(multiprocessorCount()) * static_cast<uint64_t>(blocksPerSm) * 4u;
  const uint64_t g = want < cap ? want : cap;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

inline size_t alignUp(size_t bytes, size_t a) { return (bytes + a - 1) / a * a; }

}  // namespace spccl::cuda::detail

// Launch-error check after a <<<>>> launch.
#define SPCCL_CUDA_CHECK_LAUNCH() SPCCL_CUDA_CHECK(cudaGetLastError())
