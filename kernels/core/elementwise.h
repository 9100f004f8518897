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
// kFloat8e4m3 is a wire type only (never a user buffer type): OCP FP8 E4M3
// codes times a power-of-two scale 2^scaleExp carried in each stream's header.
enum class ValueType : uint8_t { kFloat16 = 6, kFloat32 = 7, kBfloat16 = 9, kFloat8e4m3 = 10 };

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

// ceil(density * n), the entries a density keeps of n (every selection
// rule: the compressed allreduce's k, the rows' kr, the sparsified
// allgather's k). A float density is the decimal the user wrote rounded to
// 24 bits (0.1f is 0.100000001490116...), so a product no further above a
// whole number than that rounding (relative 2^-24) counts as the whole
// number: density 0.1 keeps 1 of 10, not 2, and 0.07 keeps 7 of 100, not 8.
// No <cmath> (device code).
SPCCL_HOST_DEVICE uint64_t densityCount(float density, uint64_t n) {
  const double x = static_cast<double>(density) * static_cast<double>(n);
  uint64_t whole = static_cast<uint64_t>(x);  // floor: x >= 0
  if (x - static_cast<double>(whole) > x * (1.0 / 16777216.0)) ++whole;
  return whole;
}

// DCT-MP rows: entries kept per row, max(1, densityCount(density, rowLen)), at most rowLen.
SPCCL_HOST_DEVICE uint32_t rowKeep(uint64_t rowLen, float density) {
  uint64_t keep = densityCount(density, rowLen);
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
  if (absx < 0x38800000u) {                                      // below the smallest normal half: subnormal or zero
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

SPCCL_HOST_DEVICE float bfloat16BitsToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }

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

// ---- fp8 e4m3 (OCP FP8 E4M3: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits) ----
// A value is code * 2^scaleExp, the scale exponent carried in the stream
// header. Finite codes are OCP's (max 448, min subnormal 2^-9). spccl's fp8
// has no -0 and no NaN pair, but carries the IEEE specials, which OCP E4M3
// lacks:
//   S.1111.111 (0x7f, 0xff)  +Inf, -Inf   (OCP: NaN)
//   1.0000.000 (0x80)        NaN          (OCP: -0; spccl sends every zero as 0x00)
// Finite values beyond 448 * 2^scaleExp saturate to +-448 * 2^scaleExp (the
// rest stays in the sender's residual); conversion rounds to nearest even.
constexpr uint8_t kE4m3NaN = 0x80u;
constexpr uint8_t kE4m3PosInf = 0x7fu;
constexpr uint8_t kE4m3NegInf = 0xffu;
constexpr uint8_t kE4m3MaxBits = 0x7eu;  // 448
// Scale exponents a stream may carry: every code times 2^scaleExp is then an
// exact normal fp32 (2^-9 * 2^-116 = 2^-125; 448 * 2^119 < 2^128).
constexpr int kFp8MinScaleExp = -116;
constexpr int kFp8MaxScaleExp = 119;
// The selection rule's scale: tau's binade maps to e4m3's smallest normal
// binade (2^-6), so every selected |v| >= tau is a normal code (relative
// rounding error <= 2^-4) and |v| up to ~28672 tau is carried unsaturated.
constexpr int kFp8TauToMinNormal = 6;
SPCCL_HOST_DEVICE int clampFp8ScaleExp(int s) {
  return s < kFp8MinScaleExp ? kFp8MinScaleExp : (s > kFp8MaxScaleExp ? kFp8MaxScaleExp : s);
}

// floor(log2 |x|) of a finite non-zero key (subnormals included).
SPCCL_HOST_DEVICE int keyExponent(uint32_t key) {
  const int e = static_cast<int>(key >> 23);
  if (e != 0) return e - 127;
  int lead = 22;  // subnormal: the mantissa's leading bit
  while (lead > 0 && ((key >> lead) & 1u) == 0) --lead;
  return lead - 149;
}

// Scale exponent for a selection threshold (magnitude key). tau == 0 (fewer
// non-zeros than k) or non-finite has no binade: the caller uses the max rule.
SPCCL_HOST_DEVICE int fp8ScaleForTau(uint32_t tauKey) {
  return clampFp8ScaleExp(keyExponent(tauKey) - (-kFp8TauToMinNormal));
}

// Scale exponent for values whose largest finite |v| has key maxKey (0: all
// zero): the smallest s with max|v| <= 448 * 2^s, so nothing saturates and
// the largest values use e4m3's top binade.
SPCCL_HOST_DEVICE int fp8ScaleForMax(uint32_t maxKey) {
  if (maxKey == 0u) return 0;
  // 448 * 2^s = 1.75 * 2^(s+8) >= max|v| = m * 2^e (m in [1, 2)): s = e - 8,
  // unless m > 1.75 (mantissa bits above 0x600000), then s = e - 7.
  const int e = keyExponent(maxKey);
  const bool above = (maxKey >> 23) != 0 && (maxKey & 0x7fffffu) > 0x600000u;
  return clampFp8ScaleExp(e - 8 + (above ? 1 : 0));
}

// fp32 -> spccl e4m3 code of v / 2^scaleExp: one rounding (nearest even),
// computed on the bits (no multiply, so no double rounding through an fp32
// subnormal).
SPCCL_HOST_DEVICE uint8_t floatToE4m3(float v, int scaleExp) {
  const uint32_t x = floatBits(v);
  const uint32_t sign = (x >> 24) & 0x80u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return kE4m3NaN;
  if (absx == 0x7f800000u) return sign ? kE4m3NegInf : kE4m3PosInf;
  if (absx == 0u) return 0u;  // +-0 both travel as 0x00
  // |v| = mant * 2^(e - 23), mant in [2^23, 2^24).
  const int e = keyExponent(absx);
  uint32_t mant;
  if ((absx >> 23) != 0) {
    mant = (absx & 0x7fffffu) | 0x800000u;
  } else {
    mant = absx << (23 - (e + 149));  // normalise the subnormal
  }
  const int q = e - scaleExp;  // exponent of v / 2^scaleExp
  if (q > 8) return static_cast<uint8_t>(sign | kE4m3MaxBits);
  // Normal codes keep 3 mantissa bits (drop 20); below 2^-6 the quantum is 2^-9.
  const int shift = q >= -6 ? 20 : 14 - q;
  if (shift > 25) return 0u;      // below half the smallest subnormal: rounds to 0
  uint32_t code = mant >> shift;  // normal: 8..15 (implicit bit), subnormal: 0..7
  if (q >= -6) code = (static_cast<uint32_t>(q + 7) << 3) + (code - 8u);
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (code & 1u))) ++code;  // a carry moves to the next binade
  if (code > kE4m3MaxBits) code = kE4m3MaxBits;            // rounds above 448: saturate
  if (code == 0u) return 0u;
  return static_cast<uint8_t>(sign | code);
}

// spccl e4m3 code -> fp32 value times 2^scaleExp (exact for scaleExp in
// [kFp8MinScaleExp, kFp8MaxScaleExp]).
SPCCL_HOST_DEVICE float e4m3ToFloat(uint8_t c, int scaleExp) {
  if (c == kE4m3NaN) return bitsFloat(0x7fc00000u);
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  if ((c & 0x7fu) == 0x7fu) return bitsFloat(sign | 0x7f800000u);
  const uint32_t exp = (c >> 3) & 0xfu;
  uint32_t mant = c & 0x7u;
  if (exp == 0) {
    if (mant == 0) return 0.0f;
    // subnormal: mant * 2^-9, mant in 1..7: normalise to 1.xx * 2^(lead - 9)
    int lead = mant >= 4 ? 2 : (mant >= 2 ? 1 : 0);
    mant = (mant << (3 - lead)) & 0x7u;
    return bitsFloat(sign | (static_cast<uint32_t>(lead - 9 + scaleExp + 127) << 23) | (mant << 20));
  }
  return bitsFloat(sign | (static_cast<uint32_t>(static_cast<int>(exp) - 7 + scaleExp + 127) << 23) | (mant << 20));
}

// Round v to the wire type and back: what the receivers will see. scaleExp
// only matters for fp8.
SPCCL_HOST_DEVICE float roundToWire(float v, ValueType t, int scaleExp = 0) {
  switch (t) {
    case ValueType::kFloat16:
      return halfBitsToFloat(wireHalfBits(v));
    case ValueType::kBfloat16:
      return bfloat16BitsToFloat(wireBfloat16Bits(v));
    case ValueType::kFloat8e4m3:
      return e4m3ToFloat(floatToE4m3(v, scaleExp), scaleExp);
    default:
      return v;
  }
}

SPCCL_HOST_DEVICE uint32_t wireValueBytes(ValueType t) {
  return t == ValueType::kFloat32 ? 4u : (t == ValueType::kFloat8e4m3 ? 1u : 2u);
}

// Store v at slot i of a wire value section of type t (rounding, saturating).
// Returns what the receiver will decode.
SPCCL_HOST_DEVICE float storeWireValue(void* section, uint64_t i, float v, ValueType t, int scaleExp = 0) {
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
    case ValueType::kFloat8e4m3: {
      const uint8_t c = floatToE4m3(v, scaleExp);
      static_cast<uint8_t*>(section)[i] = c;
      return e4m3ToFloat(c, scaleExp);
    }
    default:
      static_cast<float*>(section)[i] = v;
      return v;
  }
}

SPCCL_HOST_DEVICE float loadWireValue(const void* section, uint64_t i, ValueType t, int scaleExp = 0) {
  switch (t) {
    case ValueType::kFloat16:
      return halfBitsToFloat(static_cast<const uint16_t*>(section)[i]);
    case ValueType::kBfloat16:
      return bfloat16BitsToFloat(static_cast<const uint16_t*>(section)[i]);
    case ValueType::kFloat8e4m3:
      return e4m3ToFloat(static_cast<const uint8_t*>(section)[i], scaleExp);
    default:
      return static_cast<const float*>(section)[i];
  }
}

// The largest finite fp16. A bf16 or fp8 wire rounds a value from an fp16
// user buffer to the nearest wire value, which near the top of fp16's range
// is above it (65504 -> 65536 in bf16 and in e4m3 with the max rule's scale),
// and the buffer would then receive Inf for a finite value. Senders whose
// user buffer is fp16 bound the wire value at this magnitude, as the fp16
// wire itself saturates.
constexpr float kHalfMax = 65504.0f;

// The rank that owns an id in the row-sparse partition algorithm (ids
// hashed, so that clustered ids spread over the owners): a splitmix64
// finaliser, modulo the ranks.
SPCCL_HOST_DEVICE uint32_t rowOwner(int64_t id, uint32_t ranks) {
  uint64_t x = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x % ranks);
}

// storeWireValue with |decoded| <= bound for every finite v (bound a positive
// finite value, or +Inf for no bound): v is first clamped to +-bound, and a
// code rounded above bound is replaced by the next code toward zero. NaN/Inf
// are stored as they are. Returns what the receiver will decode.
SPCCL_HOST_DEVICE float storeWireValueBounded(void* section, uint64_t i, float v, ValueType t, int scaleExp,
                                              float bound) {
  const bool finite = !isNonFiniteKey(magnitudeKey(v));
  if (finite && v > bound) v = bound;
  if (finite && v < -bound) v = -bound;
  float d = storeWireValue(section, i, v, t, scaleExp);
  if (!finite || !(d > bound || d < -bound)) return d;
  switch (t) {  // codes are monotonic in magnitude: one step toward zero
    case ValueType::kFloat16:
    case ValueType::kBfloat16:
      --static_cast<uint16_t*>(section)[i];
      break;
    case ValueType::kFloat8e4m3: {
      uint8_t& c = static_cast<uint8_t*>(section)[i];
      c = (c & 0x7fu) == 1u ? 0u : static_cast<uint8_t>(c - 1u);  // never 0x80 (NaN): zero is 0x00
      break;
    }
    default:
      break;  // fp32 holds the clamped v exactly
  }
  return loadWireValue(section, i, t, scaleExp);
}

// Bytes of v as an LEB128 varint (7 bits a byte): codec/codec.h writes them;
// the executors count a delta stream's index bytes with it.
SPCCL_HOST_DEVICE uint32_t varintBytes(uint64_t v) {
  uint32_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Gap j of sorted indices in the delta encoding: the first from rangeBegin,
// then from the previous index + 1.
SPCCL_HOST_DEVICE uint64_t deltaGap(const uint32_t* indices, uint64_t j, uint64_t rangeBegin) {
  return j == 0 ? indices[0] - rangeBegin : static_cast<uint64_t>(indices[j]) - indices[j - 1] - 1;
}

// roundToWire with the same bound.
SPCCL_HOST_DEVICE float roundToWireBounded(float v, ValueType t, int scaleExp, float bound) {
  uint32_t slot = 0;
  return storeWireValueBounded(&slot, 0, v, t, scaleExp, bound);
}

// ---- The int8 row codec (SPCCL_ROWS_CODEC=int8): one scale per row ----

constexpr int8_t kInt8NonFinite = -128;  // the code of NaN and Inf

// The scale of one row: max finite |v| / 127 (0 for a row of zeros or of
// non-finite values only). A maximum: the same in any order of the values.
SPCCL_HOST_DEVICE float int8ScaleOfMax(float maxFinite) { return maxFinite / 127.0f; }
SPCCL_HOST_DEVICE float int8FiniteMagnitude(float v) {  // |v|, 0 for NaN and Inf
  const float a = v < 0 ? -v : v;
  return a <= 3.4028235e38f ? a : 0.0f;
}
// The code of v at scale s. The quotient in double rounds to the nearest
// code (an fp32 quotient could round a value just below a half-step up);
// the clamp takes the fp32 rounding of the scale itself.
SPCCL_HOST_DEVICE int8_t int8Encode(float v, float scale) {
  if (!(v - v == 0.0f)) return kInt8NonFinite;  // NaN or Inf
  if (scale == 0.0f) return 0;
  double q = static_cast<double>(v) / static_cast<double>(scale);
  q = q < -127.0 ? -127.0 : q > 127.0 ? 127.0 : q;
  return static_cast<int8_t>(q < 0 ? -static_cast<int>(-q + 0.5) : static_cast<int>(q + 0.5));
}
// The product is exact in double (8 by 24 bits), so the decode rounds once;
// the row's largest value can round past fp32's range (127 * (3.4e38 / 127)),
// hence the clamp.
SPCCL_HOST_DEVICE float clampToFloat(double d) {  // to fp32, finite values saturating at fp32's largest
  constexpr double kMax = 3.4028234663852886e38;
  return static_cast<float>(d > kMax ? kMax : d < -kMax ? -kMax : d);
}
SPCCL_HOST_DEVICE float int8Decode(int8_t code, float scale) {
  if (code == kInt8NonFinite) return bitsFloat(0x7fc00000u);
  return clampToFloat(static_cast<double>(code) * static_cast<double>(scale));
}
// A received scale a sender could have made: finite and >= 0.
SPCCL_HOST_DEVICE bool int8ScaleValid(float s) { return s >= 0.0f && s <= 3.4028235e38f; }

}  // namespace spccl::core
