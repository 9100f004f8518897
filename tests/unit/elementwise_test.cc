// kernels/core/elementwise.h: fp16/bf16 conversions against independent
// references, and the magnitude key / classification rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/core/elementwise.h"
#include "tests/unit/unit_util.h"

namespace spccl::test {
namespace {

using core::Pick;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Compares floatToHalfBits(f) with the _Float16 cast; returns false (after
// one gtest failure) on the first mismatch so a broken rule does not flood.
bool halfMatches(float f) {
  const uint16_t got = core::floatToHalfBits(f), want = refHalfBits(f);
  if (std::isnan(f)) {
    if (halfBitsIsNan(got) && (got & 0x8000u) == ((bitsOf(f) >> 16) & 0x8000u)) return true;
  } else if (got == want) {
    return true;
  }
  ADD_FAILURE() << "floatToHalfBits(" << f << " = 0x" << std::hex << bitsOf(f) << ") = 0x" << got
                << ", _Float16 gives 0x" << want;
  return false;
}

bool bf16Matches(float f) {
  const uint16_t got = core::floatToBfloat16Bits(f), want = refBf16Bits(f);
  if (std::isnan(f)) {
    if (bf16BitsIsNan(got)) return true;
  } else if (got == want) {
    return true;
  }
  ADD_FAILURE() << "floatToBfloat16Bits(" << f << " = 0x" << std::hex << bitsOf(f) << ") = 0x" << got
                << ", reference gives 0x" << want;
  return false;
}

TEST(Fp16, AllHalfPatternsDecodeAndRoundTrip) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float got = core::halfBitsToFloat(bits), want = refHalfToFloat(bits);
    if (halfBitsIsNan(bits)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << "0x" << h;
      const uint16_t back = core::floatToHalfBits(got);
      ASSERT_TRUE(halfBitsIsNan(back)) << std::hex << "0x" << h << " -> 0x" << back;
      ASSERT_EQ(back & 0x8000u, bits & 0x8000u) << std::hex << "NaN sign lost for 0x" << h;
      continue;
    }
    ASSERT_EQ(bitsOf(got), bitsOf(want)) << std::hex << "halfBitsToFloat(0x" << h << ")";
    ASSERT_EQ(core::floatToHalfBits(got), bits) << std::hex << "round trip of 0x" << h;
  }
}

TEST(Fp16, EdgeFloatsMatchFloat16Cast) {
  std::vector<float> edge = {0.0f,
                             -0.0f,
                             65504.0f,
                             65504.5f,
                             65519.99f,
                             std::nextafter(65520.0f, 0.0f),
                             65520.0f,
                             65536.0f,
                             1e10f,
                             std::numeric_limits<float>::max(),
                             kInf,
                             kNaN,
                             std::ldexp(1.0f, -14),                        // smallest normal half
                             std::ldexp(1.0f, -24),                        // smallest subnormal half
                             std::ldexp(1.0f, -25),                        // half of it: tie to 0
                             std::nextafter(std::ldexp(1.0f, -25), 1.0f),  // just above: rounds to 2^-24
                             std::ldexp(1.5f, -24),                        // tie between 1 and 2 ulps -> 2
                             std::ldexp(2.5f, -24),                        // tie -> 2
                             std::ldexp(1.0f, -26),
                             std::numeric_limits<float>::denorm_min(),
                             std::numeric_limits<float>::min(),
                             1.0f + std::ldexp(1.0f, -11),                        // tie, even -> 1
                             1.0f + 3 * std::ldexp(1.0f, -11),                    // tie, odd -> up
                             std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f),  // just above a tie
                             2047.5f,
                             2048.5f,
                             std::ldexp(1023.5f, -24),  // largest subnormal + half ulp: to smallest normal
                             1.0f / 3.0f};
  const size_t n0 = edge.size();
  for (size_t i = 0; i < n0; ++i) {
    edge.push_back(-edge[i]);
    edge.push_back(std::nextafter(edge[i], kInf));
    edge.push_back(std::nextafter(edge[i], -kInf));
  }
  edge.push_back(floatOf(0x7f800001u));  // signalling NaN payload
  edge.push_back(floatOf(0xffc12345u));
  for (float f : edge) ASSERT_TRUE(halfMatches(f));
}

// For every finite half h: h itself, the midpoint to the next half (a tie),
// and the floats one ulp either side of that midpoint.
TEST(Fp16, EveryHalfBoundaryMatchesFloat16Cast) {
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const double lo = refHalfToFloat(static_cast<uint16_t>(h));
    const double hi = h + 1 == 0x7c00u ? 65536.0 : refHalfToFloat(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: a half midpoint fits in a float
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    for (float f : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      ASSERT_TRUE(halfMatches(f));
      ASSERT_TRUE(halfMatches(-f));
    }
  }
}

TEST(Fp16, RandomFloatsMatchFloat16Cast) {
  auto g = rng(1);
  std::uniform_real_distribution<float> inRange(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> exponent(-30, 17);
  for (int i = 0; i < 1500000; ++i) {
    ASSERT_TRUE(halfMatches(floatOf(static_cast<uint32_t>(g()))));  // any bits, NaN included
    ASSERT_TRUE(halfMatches(inRange(g)));
    // Uniform over the binades fp16 can represent (and a few either side).
    const float m = 1.0f + static_cast<float>(g() & 0x7fffffu) * std::ldexp(1.0f, -23);
    ASSERT_TRUE(halfMatches(std::ldexp(g() & 1 ? m : -m, exponent(g))));
  }
}

TEST(Bf16, AllBf16PatternsDecodeAndRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = core::bfloat16BitsToFloat(bits);
    ASSERT_EQ(bitsOf(f), b << 16);
    const uint16_t back = core::floatToBfloat16Bits(f);
    if (bf16BitsIsNan(bits)) {
      ASSERT_TRUE(bf16BitsIsNan(back)) << std::hex << "0x" << b << " -> 0x" << back;
      ASSERT_EQ(back & 0x8000u, bits & 0x8000u) << std::hex << "NaN sign lost for 0x" << b;
    } else {
      ASSERT_EQ(back, bits) << std::hex << "0x" << b;
    }
  }
}

TEST(Bf16, EdgeFloatsMatchReference) {
  std::vector<float> edge = {0.0f,
                             1.0f,
                             floatOf(0x3f808000u),  // tie, even -> down
                             floatOf(0x3f818000u),  // tie, odd -> up
                             floatOf(0x3f808001u),
                             floatOf(0x3f807fffu),
                             floatOf(0x7f7fffffu),  // FLT_MAX -> Inf
                             floatOf(0x7f7f7fffu),  // stays at the largest bf16
                             floatOf(0x7f7f8000u),  // tie at the top, odd -> Inf
                             floatOf(0x00008000u),  // subnormal tie
                             floatOf(0x00018000u),
                             floatOf(0x00000001u),
                             floatOf(0x007fffffu),  // largest subnormal -> smallest normal
                             kInf,
                             kNaN,
                             floatOf(0x7f800001u),  // NaN whose top 16 bits alone read as Inf
                             floatOf(0x7f80ffffu),
                             floatOf(0xff800001u),
                             1.0f / 3.0f,
                             3.14159265f};
  const size_t n0 = edge.size();
  for (size_t i = 0; i < n0; ++i) edge.push_back(-edge[i]);
  for (float f : edge) ASSERT_TRUE(bf16Matches(f));
}

TEST(Bf16, RandomFloatsMatchReference) {
  auto g = rng(2);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 1000000; ++i) {
    ASSERT_TRUE(bf16Matches(floatOf(static_cast<uint32_t>(g()))));
    ASSERT_TRUE(bf16Matches(normal(g)));
    // Force exact ties and near-ties on random values.
    const uint32_t x = static_cast<uint32_t>(g()) & 0xffff0000u;
    ASSERT_TRUE(bf16Matches(floatOf(x | 0x8000u)));
    ASSERT_TRUE(bf16Matches(floatOf(x | 0x7fffu)));
    ASSERT_TRUE(bf16Matches(floatOf(x | 0x8001u)));
  }
}

TEST(RoundToWire, AgreesWithStoreAndLoad) {
  auto g = rng(3);
  for (core::ValueType vt : kAllValueTypes) {
    unsigned char section[8 * 4] = {};
    for (int i = 0; i < 100000; ++i) {
      const float v = floatOf(static_cast<uint32_t>(g()));
      const uint64_t slot = static_cast<uint64_t>(i % 8);
      const float stored = core::storeWireValue(section, slot, v, vt);
      ASSERT_TRUE(sameFloat(stored, core::roundToWire(v, vt))) << typeName(vt) << " " << v;
      ASSERT_TRUE(sameFloat(stored, refRoundToWire(v, vt))) << typeName(vt) << " " << v;
      ASSERT_TRUE(sameFloat(core::loadWireValue(section, slot, vt), stored)) << typeName(vt) << " " << v;
    }
    EXPECT_EQ(core::wireValueBytes(vt),
              vt == core::ValueType::kFloat32 ? 4u : (vt == core::ValueType::kFloat8e4m3 ? 1u : 2u));
  }
}

TEST(RoundToWire, SaturatesFiniteOverflowKeepsNonFinite) {
  using core::ValueType;
  EXPECT_EQ(core::roundToWire(70000.0f, ValueType::kFloat16), 65504.0f);
  EXPECT_EQ(core::roundToWire(-1e30f, ValueType::kFloat16), -65504.0f);
  EXPECT_EQ(core::roundToWire(65519.0f, ValueType::kFloat16), 65504.0f);  // rounds down anyway
  EXPECT_EQ(core::roundToWire(std::numeric_limits<float>::max(), ValueType::kBfloat16),
            core::bfloat16BitsToFloat(core::kBfloat16MaxBits));
  EXPECT_TRUE(std::isinf(core::roundToWire(kInf, ValueType::kFloat16)));
  EXPECT_TRUE(std::isinf(core::roundToWire(-kInf, ValueType::kBfloat16)));
  EXPECT_TRUE(std::isnan(core::roundToWire(std::nanf(""), ValueType::kFloat16)));
  // The plain conversions (user fp16/bf16 buffers) still overflow to Inf, as IEEE does.
  EXPECT_TRUE(std::isinf(core::halfBitsToFloat(core::floatToHalfBits(70000.0f))));
}

// ---- fp8 e4m3 with a power-of-two scale ----

constexpr int kFp8Scales[] = {core::kFp8MinScaleExp, -40, -13, -1, 0, 1, 7, 60, core::kFp8MaxScaleExp};

TEST(Fp8, All256CodesDecodeAsTheReferenceAtEveryScale) {
  for (int s : kFp8Scales) {
    for (int c = 0; c < 256; ++c) {
      const float got = core::e4m3ToFloat(static_cast<uint8_t>(c), s);
      const float want = refE4m3ToFloat(static_cast<uint8_t>(c), s);
      ASSERT_TRUE(sameFloat(got, want)) << "code 0x" << std::hex << c << std::dec << " scale " << s << ": " << got
                                        << " vs " << want;
      // Every finite code is an exact normal fp32 at every allowed scale.
      if (std::isfinite(want) && want != 0.0f) {
        ASSERT_TRUE(std::isnormal(got)) << c << " " << s;
      }
    }
  }
  // The specials and the largest finite code, by value.
  EXPECT_TRUE(std::isnan(core::e4m3ToFloat(core::kE4m3NaN, 0)));
  EXPECT_EQ(core::e4m3ToFloat(core::kE4m3PosInf, 0), kInf);
  EXPECT_EQ(core::e4m3ToFloat(core::kE4m3NegInf, 0), -kInf);
  EXPECT_EQ(core::e4m3ToFloat(core::kE4m3MaxBits, 0), 448.0f);
  EXPECT_EQ(core::e4m3ToFloat(0x01, 0), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(core::e4m3ToFloat(0x08, 0), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(core::e4m3ToFloat(0xfe, 3), -448.0f * 8.0f);
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (int s : kFp8Scales) {
    for (int c = 0; c < 256; ++c) {
      if (c == 0x80) continue;  // NaN: checked below
      const float v = core::e4m3ToFloat(static_cast<uint8_t>(c), s);
      ASSERT_EQ(core::floatToE4m3(v, s), static_cast<uint8_t>(c)) << "code " << c << " scale " << s;
    }
    EXPECT_EQ(core::floatToE4m3(kNaN, s), core::kE4m3NaN);
    EXPECT_EQ(core::floatToE4m3(-kNaN, s), core::kE4m3NaN);
    EXPECT_EQ(core::floatToE4m3(-0.0f, s), 0u);  // no -0 on the wire (0x80 is NaN)
  }
}

bool fp8Matches(float v, int s) {
  const uint8_t got = core::floatToE4m3(v, s), want = refE4m3Bits(v, s);
  if (got == want) return true;
  ADD_FAILURE() << "floatToE4m3(" << v << " = 0x" << std::hex << bitsOf(v) << std::dec << ", scale " << s << ") = 0x"
                << std::hex << unsigned{got} << ", reference 0x" << unsigned{want};
  return false;
}

// Round to nearest even at every boundary: each midpoint between adjacent
// codes (a tie), one fp32 ulp either side, and both ends of the range.
TEST(Fp8, EveryMidpointRoundsToNearestEven) {
  for (int s : kFp8Scales) {
    for (int c = 0; c < 0x7e; ++c) {
      const double lo = std::ldexp(refE4m3Magnitude(static_cast<uint8_t>(c)), s);
      const double hi = std::ldexp(refE4m3Magnitude(static_cast<uint8_t>(c + 1)), s);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: 4 significant bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
        if (!fp8Matches(v, s) || !fp8Matches(-v, s)) return;
      }
      // The tie goes to the even code.
      const uint8_t tie = core::floatToE4m3(mid, s);
      EXPECT_EQ(tie & 1u, 0u) << "tie between codes " << c << " and " << c + 1 << " scale " << s;
    }
    // Beyond 448 * 2^s: saturates (464 = halfway to the next binade's 480 too).
    for (double m : {448.0, 449.0, 464.0, 480.0, 1e6}) {
      const float v = static_cast<float>(std::ldexp(m, s));
      if (!std::isfinite(v)) continue;
      EXPECT_EQ(core::floatToE4m3(v, s), core::kE4m3MaxBits) << m << " scale " << s;
      EXPECT_EQ(core::floatToE4m3(-v, s), 0x80u | core::kE4m3MaxBits) << m << " scale " << s;
    }
    EXPECT_EQ(core::floatToE4m3(std::numeric_limits<float>::max(), s), core::kE4m3MaxBits);
    EXPECT_EQ(core::floatToE4m3(kInf, s), core::kE4m3PosInf);
    EXPECT_EQ(core::floatToE4m3(-kInf, s), core::kE4m3NegInf);
    // Half the smallest subnormal is a tie with 0: rounds to 0 (even).
    EXPECT_EQ(core::floatToE4m3(std::ldexp(1.0f, s - 10), s), 0u);
    EXPECT_EQ(core::floatToE4m3(std::nextafter(std::ldexp(1.0f, s - 10), kInf), s), 1u);
  }
}

TEST(Fp8, RandomFloatsMatchReference) {
  auto g = rng(80);
  for (int s : kFp8Scales) {
    for (int i = 0; i < 20000; ++i) {
      // Random bit patterns (every binade, subnormal fp32 included), and
      // values near the scale's own range.
      if (!fp8Matches(floatOf(static_cast<uint32_t>(g())), s)) return;
      const float near = std::ldexp(static_cast<float>(g() % 1000000) / 1000.0f, s - 6) * ((g() & 1) ? 1.0f : -1.0f);
      if (!fp8Matches(near, s)) return;
      const float v = floatOf(static_cast<uint32_t>(g()));
      ASSERT_TRUE(sameFloat(core::roundToWire(v, core::ValueType::kFloat8e4m3, s),
                            refRoundToWire(v, core::ValueType::kFloat8e4m3, s)));
    }
  }
}

TEST(Fp8, ScaleRules) {
  auto g = rng(81);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::fabs(floatOf(static_cast<uint32_t>(g()) & 0x7fffffffu));
    if (!std::isfinite(x) || x == 0.0f) continue;
    const uint32_t key = core::magnitudeKey(x);
    // tau rule: tau lands in e4m3's smallest normal binade [2^-6, 2^-5) unless clamped.
    const int st = core::fp8ScaleForTau(key);
    ASSERT_GE(st, core::kFp8MinScaleExp);
    ASSERT_LE(st, core::kFp8MaxScaleExp);
    const double qt = std::ldexp(static_cast<double>(x), -st);
    if (st > core::kFp8MinScaleExp && st < core::kFp8MaxScaleExp) {
      ASSERT_GE(qt, std::ldexp(1.0, -6)) << x;
      ASSERT_LT(qt, std::ldexp(1.0, -5)) << x;
      // tau itself is then a normal code within 2^-4 relative.
      const float r = core::roundToWire(x, core::ValueType::kFloat8e4m3, st);
      ASSERT_LE(std::fabs(static_cast<double>(r) - x), std::ldexp(static_cast<double>(x), -4)) << x;
    }
    // max rule: the smallest scale at which max|v| does not saturate.
    const int sm = core::fp8ScaleForMax(key);
    if (sm > core::kFp8MinScaleExp && sm < core::kFp8MaxScaleExp) {
      ASSERT_LE(std::ldexp(static_cast<double>(x), -sm), 448.0) << x;
      ASSERT_GT(std::ldexp(static_cast<double>(x), -(sm - 1)), 448.0) << x;
    }
  }
  EXPECT_EQ(core::fp8ScaleForMax(0), 0);
  EXPECT_EQ(core::fp8ScaleForMax(core::magnitudeKey(448.0f)), 0);
  EXPECT_EQ(core::fp8ScaleForMax(core::magnitudeKey(449.0f)), 1);
  EXPECT_EQ(core::fp8ScaleForTau(core::magnitudeKey(std::ldexp(1.0f, -6))), 0);
  EXPECT_EQ(core::fp8ScaleForTau(core::magnitudeKey(1e-4f)), -14 + 6);
}

// ceil(density * n) with the product read as the decimal density means.
TEST(DensityCount, DecimalDensitiesKeepTheirDecimalShare) {
  EXPECT_EQ(core::densityCount(0.1f, 10), 1u);  // 0.1f x 10 = 1.0000000149
  EXPECT_EQ(core::densityCount(0.3f, 10), 3u);
  EXPECT_EQ(core::densityCount(0.6f, 10), 6u);
  EXPECT_EQ(core::densityCount(0.07f, 100), 7u);
  EXPECT_EQ(core::densityCount(0.01f, 1000), 10u);
  EXPECT_EQ(core::densityCount(0.3f, 70000), 21000u);
  EXPECT_EQ(core::densityCount(0.125f, 1000), 125u);  // exact products stay exact
  EXPECT_EQ(core::densityCount(0.5f, 1u << 26), 1u << 25);
  EXPECT_EQ(core::densityCount(1.0f, 12345), 12345u);
  // Fractions beyond the float's rounding still round up.
  EXPECT_EQ(core::densityCount(0.125f, 1001), 126u);        // 125.125
  EXPECT_EQ(core::densityCount(0.01f, 1u << 24), 167773u);  // 167772.16...
  EXPECT_EQ(core::densityCount(0.3007f, 1000), 301u);       // 300.7
  EXPECT_EQ(core::densityCount(1e-6f, 1000), 1u);           // 0.001
  EXPECT_EQ(core::densityCount(0.5f, 3), 2u);
  // Just past a whole number by more than the rounding: the next one.
  const float justAbove = std::nextafter(std::nextafter(0.25f, 1.0f), 1.0f);  // 0.25 + 2 ulp
  EXPECT_EQ(core::densityCount(justAbove, 4), 2u);
  EXPECT_EQ(core::densityCount(0.0f, 1000), 0u);
  EXPECT_EQ(core::densityCount(0.5f, 0), 0u);
}

TEST(MagnitudeKey, OrderEqualsFabsOrder) {
  auto g = rng(4);
  std::vector<float> values(200000);
  for (size_t i = 0; i < values.size(); ++i) {
    // Half of the pairs share a magnitude or a neighbour of it, so equality and
    // adjacent keys are exercised, not only far-apart random bit patterns.
    const uint64_t how = i == 0 ? 0 : g() % 4;
    if (how == 0 || how == 1) values[i] = randomFiniteBits(g);
    if (how == 2) values[i] = -values[i - 1];
    if (how == 3) values[i] = std::nextafter(values[i - 1], g() & 1 ? kInf : -kInf);
    if (!std::isfinite(values[i])) values[i] = 0.0f;
  }
  values.push_back(0.0f);
  values.push_back(-0.0f);
  values.push_back(std::numeric_limits<float>::denorm_min());
  values.push_back(-std::numeric_limits<float>::max());
  for (size_t i = 1; i < values.size(); ++i) {
    const float a = values[i - 1], b = values[i];
    const uint32_t ka = core::magnitudeKey(a), kb = core::magnitudeKey(b);
    ASSERT_EQ(ka < kb, std::fabs(a) < std::fabs(b)) << a << " vs " << b;
    ASSERT_EQ(ka == kb, std::fabs(a) == std::fabs(b)) << a << " vs " << b;
    ASSERT_FALSE(core::isNonFiniteKey(ka)) << a;
  }
  // And on a sorted list: sorting by key equals sorting by fabs.
  std::vector<float> byKey = values, byAbs = values;
  std::stable_sort(byKey.begin(), byKey.end(),
                   [](float x, float y) { return core::magnitudeKey(x) < core::magnitudeKey(y); });
  std::stable_sort(byAbs.begin(), byAbs.end(), [](float x, float y) { return std::fabs(x) < std::fabs(y); });
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(bitsOf(byKey[i]), bitsOf(byAbs[i])) << i;
}

Pick referencePick(float v, float tau) {
  if (!std::isfinite(v)) return Pick::kNonFinite;
  if (v == 0.0f) return Pick::kSkip;
  if (std::fabs(v) > tau) return Pick::kAbove;
  if (std::fabs(v) == tau) return Pick::kTie;
  return Pick::kSkip;
}

TEST(Classify, MatchesFabsRule) {
  auto g = rng(5);
  std::vector<float> taus = {0.0f,  std::numeric_limits<float>::denorm_min(), 1e-30f, 0.5f, 1.0f,
                             3e38f, std::numeric_limits<float>::max()};
  for (int i = 0; i < 20; ++i) taus.push_back(std::fabs(randomFiniteBits(g)));
  for (float tau : taus) {
    const uint32_t tauKey = core::magnitudeKey(tau);
    for (int i = 0; i < 20000; ++i) {
      float v = floatOf(static_cast<uint32_t>(g()));
      if (i % 4 == 0) v = (g() & 1) ? tau : -tau;                        // exact ties
      if (i % 4 == 1) v = std::nextafter(tau, (g() & 1) ? kInf : 0.0f);  // neighbours
      ASSERT_EQ(core::classify(v, tauKey), referencePick(v, tau)) << "v=" << v << " tau=" << tau;
    }
  }
}

TEST(Classify, ZeroNeverSelectedNonFiniteAlways) {
  const float nonFinite[] = {kInf, -kInf, kNaN, -kNaN, floatOf(0x7f800001u), floatOf(0xffbfffffu)};
  const float taus[] = {0.0f, 1.0f, std::numeric_limits<float>::max()};
  for (float tau : taus) {
    const uint32_t tauKey = core::magnitudeKey(tau);
    EXPECT_EQ(core::classify(0.0f, tauKey), Pick::kSkip) << tau;
    EXPECT_EQ(core::classify(-0.0f, tauKey), Pick::kSkip) << tau;
    for (float v : nonFinite) EXPECT_EQ(core::classify(v, tauKey), Pick::kNonFinite) << v << " tau=" << tau;
  }
  // Even a tauKey at or above Inf's key (never produced, but a corrupt one) keeps the rule.
  for (uint32_t tauKey : {core::kInfKey, 0x7fffffffu}) {
    EXPECT_EQ(core::classify(0.0f, tauKey), Pick::kSkip);
    for (float v : nonFinite) EXPECT_EQ(core::classify(v, tauKey), Pick::kNonFinite) << v;
  }
  for (float v : nonFinite) EXPECT_TRUE(core::isNonFiniteKey(core::magnitudeKey(v))) << v;
}

}  // namespace
}  // namespace spccl::test
