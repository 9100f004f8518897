// Helpers of the GPU kernel tests: device buffers, the skip-without-device
// guard, fresh random data (seed printed, SPCCL_TEST_SEED to replay) and
// bitwise comparisons.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_kernels.h"

namespace spccl::gputest {

inline int deviceCount() {
  static const int count = [] {
    int c = 0;
    if (cudaGetDeviceCount(&c) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: not an error here
      c = 0;
    }
    return c;
  }();
  return count;
}

// Free device memory in bytes (0 without a device).
inline size_t freeDeviceBytes() {
  size_t freeB = 0, totalB = 0;
  if (deviceCount() == 0 || cudaMemGetInfo(&freeB, &totalB) != cudaSuccess) return 0;
  return freeB;
}

#define SPCCL_REQUIRE_DEVICE()                                                          \
  do {                                                                                  \
    if (::spccl::gputest::deviceCount() == 0) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

#define CUDA_ASSERT(call) ASSERT_EQ(cudaSuccess, (call)) << #call

#define STATUS_ASSERT(expr)                                    \
  do {                                                         \
    ::spccl::Status _st = (expr);                              \
    ASSERT_TRUE(_st.isOk()) << #expr << ": " << _st.message(); \
  } while (0)

// Waits for the device and fails on any error a kernel raised.
#define SYNC_ASSERT()                                \
  do {                                               \
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize()); \
    ASSERT_EQ(cudaSuccess, cudaGetLastError());      \
  } while (0)

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Allocates at least one element, so get() is never null after success.
  cudaError_t resize(size_t n) {
    release();
    n_ = n;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    p_ = e == cudaSuccess ? static_cast<T*>(p) : nullptr;
    return e;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  cudaError_t upload(const T* src, size_t n) {
    return n == 0 ? cudaSuccess : cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyHostToDevice);
  }
  cudaError_t upload(const std::vector<T>& h) { return upload(h.data(), h.size()); }
  cudaError_t download(std::vector<T>& h, size_t n) const {
    h.resize(n);
    return n == 0 ? cudaSuccess : cudaMemcpy(h.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost);
  }
  cudaError_t download(std::vector<T>& h) const { return download(h, n_); }
  // Every byte set to `byte`: unwritten outputs show up as this pattern.
  cudaError_t poison(unsigned char byte = 0xa5) { return cudaMemset(p_, byte, std::max<size_t>(n_, 1) * sizeof(T)); }

 private:
  void release() {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

// A fresh seed per process unless SPCCL_TEST_SEED is set; printed by every
// test that uses it (SCOPED_TRACE), so a failure can be replayed.
inline uint64_t baseSeed() {
  static const uint64_t seed = [] {
    if (const char* e = std::getenv("SPCCL_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(e, nullptr, 0));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

inline std::mt19937_64 rngFor(const std::string& what) {
  return std::mt19937_64(baseSeed() ^ std::hash<std::string>{}(what));
}

inline std::string seedTrace() { return "SPCCL_TEST_SEED=" + std::to_string(baseSeed()); }

inline uint32_t bitsOf(float f) { return core::floatBits(f); }

// Value distributions for v-like data. Never all zeros on purpose: zeros
// hide unwritten outputs.
enum class Dist {
  kNormal,     // N(0,1) with a few wide-magnitude entries
  kWide,       // magnitudes over many binades, both signs
  kAllEqual,   // one value everywhere (ties everywhere)
  kFewValues,  // a handful of values (many ties at any tau)
  kNonFinite,  // normal data with NaN/+-Inf sprinkled in
  kDenormal,   // subnormal floats and zeros mixed with small normals
  kRandomBits  // any 32-bit pattern
};

inline const char* distName(Dist d) {
  switch (d) {
    case Dist::kNormal:
      return "normal";
    case Dist::kWide:
      return "wide";
    case Dist::kAllEqual:
      return "all_equal";
    case Dist::kFewValues:
      return "few_values";
    case Dist::kNonFinite:
      return "nonfinite";
    case Dist::kDenormal:
      return "denormal";
    default:
      return "random_bits";
  }
}

inline std::vector<float> makeFloats(size_t n, Dist d, std::mt19937_64& g) {
  std::vector<float> v(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float kInf = std::numeric_limits<float>::infinity();
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float equal = 0.75f + unit(g);
  const float few[5] = {0.5f, -0.5f, 1.25f, -2.0f, 0.0f};
  for (size_t i = 0; i < n; ++i) {
    switch (d) {
      case Dist::kNormal:
        v[i] = normal(g);
        if ((g() & 1023u) == 0) v[i] *= 1e4f;
        break;
      case Dist::kWide:
        v[i] = std::ldexp(1.0f + unit(g), static_cast<int>(g() % 120) - 60) * ((g() & 1) ? 1.0f : -1.0f);
        break;
      case Dist::kAllEqual:
        v[i] = equal;
        break;
      case Dist::kFewValues:
        v[i] = few[g() % 5];
        break;
      case Dist::kNonFinite: {
        const uint64_t r = g() % 64;
        v[i] = r == 0 ? kNaN : r == 1 ? kInf : r == 2 ? -kInf : normal(g);
        break;
      }
      case Dist::kDenormal: {
        const uint64_t r = g() % 4;
        v[i] = r == 0   ? core::bitsFloat(static_cast<uint32_t>(g() % 0x7fffffu) | ((g() & 1) ? 0x80000000u : 0u))
               : r == 1 ? 0.0f
                        : std::ldexp(unit(g), -120);
        break;
      }
      default:
        v[i] = core::bitsFloat(static_cast<uint32_t>(g()));
    }
  }
  return v;
}

// Size in bytes of one element of a user float type.
inline size_t elementBytes(spcclDataType_t t) { return t == spcclFloat32 ? 4 : t == spcclFloat64 ? 8 : 2; }

// A user-typed buffer from floats (fp16/bf16 encoded with the core rules; for
// kRandomBits the 16-bit patterns are random too, NaN/Inf included).
inline std::vector<unsigned char> encodeUser(const std::vector<float>& f, spcclDataType_t t, Dist d,
                                             std::mt19937_64& g) {
  std::vector<unsigned char> out(f.size() * elementBytes(t));
  for (size_t i = 0; i < f.size(); ++i) {
    if (t == spcclFloat32) {
      std::memcpy(out.data() + 4 * i, &f[i], 4);
    } else {
      const uint16_t h = d == Dist::kRandomBits ? static_cast<uint16_t>(g())
                         : t == spcclFloat16    ? core::floatToHalfBits(f[i])
                                                : core::floatToBfloat16Bits(f[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

inline const char* typeName(spcclDataType_t t) {
  return t == spcclFloat32 ? "fp32" : t == spcclFloat16 ? "fp16" : t == spcclBfloat16 ? "bf16" : "fp64";
}
inline const char* wireName(core::ValueType t) {
  return t == core::ValueType::kFloat32      ? "fp32"
         : t == core::ValueType::kFloat16    ? "fp16"
         : t == core::ValueType::kFloat8e4m3 ? "fp8"
                                             : "bf16";
}

// SPCCL_GPU_TEST_TRACE=1: each step named on stderr before it runs, so a test
// that dies of a signal (no assertion, no SCOPED_TRACE output) says where.
inline void traceStep(const std::string& what) {
  static const bool on = std::getenv("SPCCL_GPU_TEST_TRACE") != nullptr;
  if (on) {
    std::fprintf(stderr, "[trace] %s\n", what.c_str());
    std::fflush(stderr);
  }
}

// Index of the first element whose bits differ, or n.
inline size_t firstBitMismatch(const void* a, const void* b, size_t n, size_t elemBytes) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(x + i * elemBytes, y + i * elemBytes, elemBytes) != 0) return i;
  return n;
}

// Arithmetic that produces a NaN (NaN + x, Inf - Inf) returns the canonical
// NaN on the GPU but propagates an operand's payload (or the negative default
// NaN) on x86, so results that went through a float add are compared
// bit-exactly except that any NaN matches any NaN. Everything the rules
// decide (selection, positions, counts, tau, rounding of finite values) is
// still compared bit for bit.
inline bool sameFloat(float a, float b) { return bitsOf(a) == bitsOf(b) || (std::isnan(a) && std::isnan(b)); }
inline bool sameDouble(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
}

inline size_t firstFloatMismatch(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!sameFloat(a[i], b[i])) return i;
  return n;
}

// Wire value sections compared after decoding (core::loadWireValue), with the
// NaN rule above; finite values and infinities must match bit for bit.
inline size_t firstWireMismatch(const void* a, const void* b, size_t n, core::ValueType vt) {
  for (size_t i = 0; i < n; ++i)
    if (!sameFloat(core::loadWireValue(a, i, vt), core::loadWireValue(b, i, vt))) return i;
  return n;
}

}  // namespace spccl::gputest
