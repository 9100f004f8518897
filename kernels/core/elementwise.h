// Element-level rules shared by the host loops (kernels/host) and the CUDA
// kernels (kernels/cuda): one definition of each rule, so both back ends make
// bit-identical decisions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SPCCL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SPCCL_HOST_DEVICE inline
#endif

namespace spccl::core {

// Wire/value encodings of a float (spcclDataType_t values, kept in sync with spccl.h).
enum class ValueType : uint8_t { kFloat16 = 6, kFloat32 = 7, kBfloat16 = 9 };

SPCCL_HOST_DEVICE uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SPCCL_HOST_DEVICE float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Magnitude as an unsigned key whose integer order is the order of |x| for
// finite x (IEEE-754 sign-magnitude): radix selects and comparisons on keys
// agree exactly with comparisons on fabs().
SPCCL_HOST_DEVICE uint32_t magnitudeKey(float x) { return floatBits(x) & 0x7fffffffu; }

constexpr uint32_t kInfKey = 0x7f800000u;

// Non-finite (NaN or Inf) iff the exponent bits are all ones.
SPCCL_HOST_DEVICE bool isNonFiniteKey(uint32_t key) { return key >= kInfKey; }

// What the threshold rule does with one element of v = send + residual.
enum class Pick : uint8_t {
  kSkip = 0,       // |v| < tau, or v == 0: stays in the residual
  kAbove = 1,      // |v| > tau: always sent
  kTie = 2,        // |v| == tau: sent while the call's tie budget lasts
  kNonFinite = 3,  // NaN/Inf: always sent, outside the capacity budget
};

// tauKey is magnitudeKey(tau). Exact zeros are never selected (tau may be 0
// when fewer than k entries are non-zero).
SPCCL_HOST_DEVICE Pick classify(float v, uint32_t tauKey) {
  const uint32_t key = magnitudeKey(v);
  if (isNonFiniteKey(key)) return Pick::kNonFinite;
  if (key == 0u) return Pick::kSkip;
  if (key > tauKey) return Pick::kAbove;
  if (key == tauKey) return Pick::kTie;
  return Pick::kSkip;
}

// DCT-MP rows: entries kept per row, max(1, ceil(density * rowLen)), at most rowLen.
SPCCL_HOST_DEVICE uint32_t rowKeep(uint64_t rowLen, float density) {
  const double k = static_cast<double>(density) * static_cast<double>(rowLen);
  uint64_t keep = static_cast<uint64_t>(k);
  if (static_cast<double>(keep) < k) ++keep;  // ceil without <cmath> on device
  if (keep < 1) keep = 1;
  return static_cast<uint32_t>(keep < rowLen ? keep : rowLen);
}

// Total order of a row's entries for the per-row top-k: larger |x| first,
// then lower position. Larger rank = kept first.
SPCCL_HOST_DEVICE uint64_t rowRank(uint32_t key, uint32_t position) {
  return (static_cast<uint64_t>(key) << 32) | (0xffffffffu - position);
}
SPCCL_HOST_DEVICE uint32_t rowRankPosition(uint64_t rank) {
  return 0xffffffffu - static_cast<uint32_t>(rank & 0xffffffffu);
}

// fp32 -> fp16 bits, round to nearest even, overflow to Inf, NaN kept NaN.
SPCCL_HOST_DEVICE uint16_t floatToHalfBits(float f) {
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // Inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (absx < 0x38800000u) {  // below the smallest normal half: subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t exp = absx >> 23;
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

SPCCL_HOST_DEVICE float halfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bitsFloat(sign);
    // subnormal: value = mant * 2^-24
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bitsFloat(sign | ((112u - static_cast<uint32_t>(e)) << 23) | (mant << 13));
  }
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// fp32 -> bf16 bits, round to nearest even, NaN kept quiet NaN.
SPCCL_HOST_DEVICE uint16_t floatToBfloat16Bits(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

SPCCL_HOST_DEVICE float bfloat16BitsToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

// Wire encodings saturate: a finite v beyond the wire type's range is sent as
// its largest finite value (the rest stays in the residual) instead of Inf,
// which would poison the residual and invent an overflow the sender never had.
constexpr uint16_t kHalfMaxBits = 0x7bffu;      // 65504
constexpr uint16_t kBfloat16MaxBits = 0x7f7fu;  // 3.3895e38

SPCCL_HOST_DEVICE uint16_t wireHalfBits(float v) {
  const uint16_t h = floatToHalfBits(v);
  const bool overflowed = (h & 0x7fffu) == 0x7c00u && !isNonFiniteKey(magnitudeKey(v));
  return overflowed ? static_cast<uint16_t>((h & 0x8000u) | kHalfMaxBits) : h;
}

SPCCL_HOST_DEVICE uint16_t wireBfloat16Bits(float v) {
  const uint16_t b = floatToBfloat16Bits(v);
  const bool overflowed = (b & 0x7fffu) == 0x7f80u && !isNonFiniteKey(magnitudeKey(v));
  return overflowed ? static_cast<uint16_t>((b & 0x8000u) | kBfloat16MaxBits) : b;
}

// Round v to the wire type and back: what the receivers will see.
SPCCL_HOST_DEVICE float roundToWire(float v, ValueType t) {
  switch (t) {
    case ValueType::kFloat16:
      return halfBitsToFloat(wireHalfBits(v));
    case ValueType::kBfloat16:
      return bfloat16BitsToFloat(wireBfloat16Bits(v));
    default:
      return v;
  }
}

SPCCL_HOST_DEVICE uint32_t wireValueBytes(ValueType t) { return t == ValueType::kFloat32 ? 4u : 2u; }

// Store v at slot i of a wire value section of type t (rounding, saturating).
// Returns what the receiver will decode.
SPCCL_HOST_DEVICE float storeWireValue(void* section, uint64_t i, float v, ValueType t) {
  switch (t) {
    case ValueType::kFloat16: {
      const uint16_t h = wireHalfBits(v);
      static_cast<uint16_t*>(section)[i] = h;
      return halfBitsToFloat(h);
    }
    case ValueType::kBfloat16: {
      const uint16_t b = wireBfloat16Bits(v);
      static_cast<uint16_t*>(section)[i] = b;
      return bfloat16BitsToFloat(b);
    }
    default:
      static_cast<float*>(section)[i] = v;
      return v;
  }
}

SPCCL_HOST_DEVICE float loadWireValue(const void* section, uint64_t i, ValueType t) {
  switch (t) {
    case ValueType::kFloat16:
      return halfBitsToFloat(static_cast<const uint16_t*>(section)[i]);
    case ValueType::kBfloat16:
      return bfloat16BitsToFloat(static_cast<const uint16_t*>(section)[i]);
    default:
      return static_cast<const float*>(section)[i];
  }
}

}  // namespace spccl::core
