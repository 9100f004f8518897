// Internal to kernels/host (as cuda_common.cuh is to kernels/cuda): typed
// element loaders and compile-time dispatch on the user and wire types, so
// the inner loops carry no per-element type switch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"

// SSE2 is x86-64's baseline; AVX2 and AVX-512 code is compiled per function
// (target attributes) and picked at run time (host_kernels.h HostSimd).
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPCCL_HOST_X86 1
// GCC 12's AVX-512 headers build their "undefined" vectors by self-assignment,
// which its own -Wmaybe-uninitialized flags where they are inlined (GCC bug
// 105593, fixed in 13).
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#else
#define SPCCL_HOST_X86 0
#endif

namespace spccl::host::detail {

using core::ValueType;

// Input element loaders: one per user float type, so the inner loops have no
// per-element type switch.
struct LoadF32 {
  const float* p;
  float operator()(size_t i) const { return p[i]; }
};
struct LoadF16 {
  const uint16_t* p;
  float operator()(size_t i) const { return core::halfBitsToFloat(p[i]); }
};
struct LoadBf16 {
  const uint16_t* p;
  float operator()(size_t i) const { return core::bfloat16BitsToFloat(p[i]); }
};

template <typename F>
decltype(auto) withLoader(const void* src, spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(LoadF16{static_cast<const uint16_t*>(src)});
    case spcclBfloat16:
      return f(LoadBf16{static_cast<const uint16_t*>(src)});
    default:
      return f(LoadF32{static_cast<const float*>(src)});
  }
}

// v = send + residual at i (residual nullptr: zeros), the value every
// threshold and selection rule looks at; selectPackImpl has its own, with the
// residual's presence fixed at compile time.
template <class Load>
inline float vOf(const Load& load, const float* residual, size_t i) {
  return residual ? load(i) + residual[i] : load(i);
}

template <ValueType kWire>
struct WireTag {
  static constexpr ValueType value = kWire;
};

template <typename F>
decltype(auto) withWire(ValueType vt, F&& f) {
  switch (vt) {
    case ValueType::kFloat16:
      return f(WireTag<ValueType::kFloat16>{});
    case ValueType::kBfloat16:
      return f(WireTag<ValueType::kBfloat16>{});
    case ValueType::kFloat8e4m3:
      return f(WireTag<ValueType::kFloat8e4m3>{});
    default:
      return f(WireTag<ValueType::kFloat32>{});
  }
}

}  // namespace spccl::host::detail
