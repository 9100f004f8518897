// Helpers shared by the unit tests: reference conversions that do not go
// through kernels/core (so they can judge it), typed input buffers and
// reproducible random data.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"

namespace spccl::test {

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp16 reference: the compiler's _Float16 (IEEE binary16, round to nearest even).
inline uint16_t refHalfBits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, sizeof u);
  return u;
}

inline float refHalfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

inline bool halfBitsIsNan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
inline bool bf16BitsIsNan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

inline float refBf16ToFloat(uint16_t b) { return floatOf(static_cast<uint32_t>(b) << 16); }

// bf16 reference, derived from the definition rather than from bit tricks:
// the two bf16 neighbours of f (toward zero, away from zero), the nearer in
// exact double arithmetic wins, a tie goes to the even mantissa. Past the
// largest finite bf16 the upper neighbour is 2^128 (unbounded exponent), which
// encodes as Inf. NaN maps to some NaN (the caller checks NaN-ness only).
inline uint16_t refBf16Bits(float f) {
  if (std::isnan(f)) return 0x7fc0u;
  const uint32_t x = bitsOf(f);
  const uint16_t lo = static_cast<uint16_t>(x >> 16);  // truncation: |lo| <= |f|
  if ((x & 0xffffu) == 0) return lo;                   // exact (includes zeros and Inf)
  const uint16_t hi = static_cast<uint16_t>(lo + 1);   // next magnitude, same sign
  const double a = std::fabs(static_cast<double>(refBf16ToFloat(lo)));
  const double b =
      (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(refBf16ToFloat(hi)));
  const double v = std::fabs(static_cast<double>(f));
  const double dLo = v - a, dHi = b - v;
  if (dLo < dHi) return lo;
  if (dHi < dLo) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

// spccl's fp8 e4m3, from the OCP E4M3 definition, without kernels/core:
// finite code c is (-1)^s * 2^(e-7) * (1 + m/8), or 2^-6 * m/8 when e == 0;
// 0x7f/0xff are +-Inf and 0x80 is NaN (spccl's reserved codes).
inline double refE4m3Magnitude(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}
inline float refE4m3ToFloat(uint8_t c, int scaleExp) {
  if (c == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const double sign = (c & 0x80) ? -1.0 : 1.0;
  if ((c & 0x7f) == 0x7f) return static_cast<float>(sign * std::numeric_limits<double>::infinity());
  return static_cast<float>(sign * std::ldexp(refE4m3Magnitude(c), scaleExp));
}
// Nearest finite code to v / 2^scaleExp by exhaustive search (ties: the even
// code, i.e. even mantissa), saturating at 448; zero is 0x00 whatever its sign.
inline uint8_t refE4m3Bits(float v, int scaleExp) {
  if (std::isnan(v)) return 0x80;
  if (std::isinf(v)) return v > 0 ? 0x7f : 0xff;
  const double q = std::ldexp(std::fabs(static_cast<double>(v)), -scaleExp);
  int best = 0;
  double bestDist = q;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(q - refE4m3Magnitude(static_cast<uint8_t>(c)));
    if (d < bestDist || (d == bestDist && (c & 1) == 0)) best = c, bestDist = d;
  }
  if (best == 0) return 0;
  return static_cast<uint8_t>(best | (v < 0 ? 0x80 : 0));
}

// IEEE conversion to the type and back (overflow to Inf): user fp16/bf16 buffers.
inline float refRoundIeee(float v, core::ValueType t) {
  switch (t) {
    case core::ValueType::kFloat16:
      return refHalfToFloat(refHalfBits(v));
    case core::ValueType::kBfloat16:
      return refBf16ToFloat(refBf16Bits(v));
    default:
      return v;
  }
}

// The wire saturates: a finite v that would round to Inf is sent as the
// type's largest finite value with v's sign (65504 for fp16).
inline float refRoundToWire(float v, core::ValueType t, int scaleExp = 0) {
  if (t == core::ValueType::kFloat8e4m3) return refE4m3ToFloat(refE4m3Bits(v, scaleExp), scaleExp);
  const float r = refRoundIeee(v, t);
  if (!std::isinf(r) || !std::isfinite(v)) return r;
  const float largest = t == core::ValueType::kFloat16 ? 65504.0f : refBf16ToFloat(0x7f7f);
  return std::copysign(largest, v);
}

// Bitwise equality, except that any NaN equals any NaN.
inline bool sameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return bitsOf(a) == bitsOf(b);
}

constexpr core::ValueType kAllValueTypes[] = {core::ValueType::kFloat32, core::ValueType::kFloat16,
                                              core::ValueType::kBfloat16, core::ValueType::kFloat8e4m3};
constexpr spcclDataType_t kAllFloatTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};

inline const char* typeName(spcclDataType_t t) {
  return t == spcclFloat16 ? "fp16" : t == spcclBfloat16 ? "bf16" : t == spcclFloat8e4m3 ? "fp8" : "fp32";
}
inline const char* typeName(core::ValueType t) { return typeName(static_cast<spcclDataType_t>(t)); }

// A user input buffer of fp32, fp16 or bf16 built from floats, and the
// floats the library will read back from it (exact for fp32).
struct TypedInput {
  spcclDataType_t type = spcclFloat32;
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<float> decoded;

  TypedInput(const std::vector<float>& values, spcclDataType_t t) : type(t) {
    decoded.resize(values.size());
    if (t == spcclFloat32) {
      f32 = values;
      decoded = values;
      return;
    }
    u16.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      u16[i] = t == spcclFloat16 ? refHalfBits(values[i]) : refBf16Bits(values[i]);
      decoded[i] = t == spcclFloat16 ? refHalfToFloat(u16[i]) : refBf16ToFloat(u16[i]);
    }
  }
  const void* data() const {
    return type == spcclFloat32 ? static_cast<const void*>(f32.data()) : static_cast<const void*>(u16.data());
  }
  size_t size() const { return decoded.size(); }
};

inline std::mt19937_64 rng(uint64_t seed) { return std::mt19937_64(seed); }

// Any finite float, uniformly over bit patterns (every exponent equally likely).
inline float randomFiniteBits(std::mt19937_64& g) {
  for (;;) {
    const float f = floatOf(static_cast<uint32_t>(g()));
    if (std::isfinite(f)) return f;
  }
}

// Gradient-like values: normal, with a scale drawn per element over a few decades.
inline std::vector<float> randomNormal(std::mt19937_64& g, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Values drawn from a small set {0, ±1, ±2, ±3} * unit: many exact ties.
inline std::vector<float> randomTies(std::mt19937_64& g, size_t n, float unit = 0.25f) {
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(g)) * unit;
  return v;
}

// Sprinkles NaN, +Inf and -Inf over about `fraction` of the positions.
inline void sprinkleNonFinite(std::mt19937_64& g, std::vector<float>& v, double fraction) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::quiet_NaN()};
  for (float& x : v)
    if (u(g) < fraction) x = specials[g() % 4];
}

}  // namespace spccl::test
