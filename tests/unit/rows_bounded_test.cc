// The error-bounded row codec (SPCCL_ROWS_CODEC=bounded, codec/codec.h):
// max |x - decoded x| <= bound for every buffer type, row length and kind of
// row (fixed counts, per-row counts, every position kept), non-finite values
// bit for bit, codes packed in the bits each row's span needs, the call's
// bound (relative, schedule), and rejection of corrupted or truncated streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "codec/codec.h"
#include "kernels/core/elementwise.h"

namespace spccl::test {
namespace {

using core::ValueType;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint64_t kSeq = 11;

constexpr ValueType kRawTypes[] = {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBfloat16};

// A value as a buffer of type t holds it.
float asType(float v, ValueType t) { return core::roundToWire(v, t); }

struct Rows {
  uint64_t rows, rowLen, keep, nnz = 0;  // keep 0: per-row counts
  std::vector<uint32_t> counts, positions;
  std::vector<float> values;
};

// Rows of `keep` entries each (keep 0: random counts; keep == rowLen: every
// position), values of per-row magnitudes from 1e-4 to 1e4 as a buffer of
// type t holds them, and one in `nonFiniteEvery` entries NaN, +Inf or -Inf.
Rows randomRows(std::mt19937_64& g, uint64_t rows, uint64_t rowLen, uint64_t keep, ValueType t,
                uint64_t nonFiniteEvery) {
  Rows r{rows, rowLen, keep, 0, {}, {}, {}};
  std::uniform_real_distribution<double> exponent(-4, 4), unit(-1, 1);
  for (uint64_t i = 0; i < rows; ++i) {
    const auto c = static_cast<uint32_t>(keep > 0 ? keep : 1 + g() % std::min<uint64_t>(rowLen, 20));
    std::vector<uint32_t> pos;
    if (c == rowLen) {
      for (uint32_t p = 0; p < c; ++p) pos.push_back(p);
    } else {
      while (pos.size() < c) {
        const auto p = static_cast<uint32_t>(g() % rowLen);
        if (std::find(pos.begin(), pos.end(), p) == pos.end()) pos.push_back(p);
      }
      std::sort(pos.begin(), pos.end());
    }
    const double mag = std::pow(10.0, exponent(g));
    for (uint32_t e = 0; e < c; ++e) {
      float v = asType(static_cast<float>(mag * unit(g)), t);
      if (nonFiniteEvery > 0 && g() % nonFiniteEvery == 0) v = g() % 3 == 0 ? kNaN : g() % 2 ? kInf : -kInf;
      r.values.push_back(v);
    }
    r.positions.insert(r.positions.end(), pos.begin(), pos.end());
    r.counts.push_back(c);
    r.nnz += c;
  }
  return r;
}

std::vector<unsigned char> encode(const Rows& r, float bound, ValueType t) {
  std::vector<unsigned char> s(rowsStreamMaxBytesBounded(r.rows, r.rowLen, r.keep, r.nnz, t));
  s.resize(encodeRowsBounded(s.data(), r.rows, r.rowLen, r.keep, r.counts.data(), r.positions.data(), r.values.data(),
                             r.nnz, bound, t, kSeq));
  return s;
}

Status parse(const std::vector<unsigned char>& s, const Rows& r, ValueType t, std::vector<uint32_t>* kept,
             std::vector<float>* decoded) {
  RowsView v;
  return parseRowsBounded(s.data(), s.size(), r.rows, r.rowLen, t, kSeq, 1, &v, kept, decoded);
}

// Every decoded value, as a buffer of type t holds it, within the bound of
// the original; non-finite values bit for bit (fp32) or of the same kind.
void expectWithinBound(const Rows& r, const std::vector<float>& decoded, float bound, ValueType t) {
  ASSERT_EQ(decoded.size(), r.nnz);
  double worst = 0;
  for (uint64_t e = 0; e < r.nnz; ++e) {
    const float x = r.values[e], d = asType(decoded[e], t);
    if (!std::isfinite(x)) {
      if (t == ValueType::kFloat32) {
        EXPECT_EQ(core::floatBits(d), core::floatBits(x)) << "entry " << e;
      }
      EXPECT_EQ(std::isnan(d), std::isnan(x)) << "entry " << e;
      if (std::isinf(x)) {
        EXPECT_EQ(d, x) << "entry " << e;
      }
      continue;
    }
    const double err = std::fabs(static_cast<double>(x) - static_cast<double>(d));
    worst = std::max(worst, err);
    ASSERT_LE(err, static_cast<double>(bound)) << "entry " << e << " x " << x << " decoded " << d;
  }
  EXPECT_LE(worst, static_cast<double>(bound));
}

TEST(RowsCodecBounded, EveryValueWithinTheBound) {
  std::mt19937_64 g(1);
  const uint64_t rowLens[] = {1, 7, 64, 300, 70000};  // 1-, 2- and 4-byte positions
  const float bounds[] = {1e-6f, 1e-3f, 0.05f, 10.0f};
  for (ValueType t : kRawTypes)
    for (uint64_t rowLen : rowLens)
      for (uint64_t keep : {uint64_t{0}, std::min<uint64_t>(rowLen, 3), rowLen})
        for (float bound : bounds) {
          if (keep == rowLen && rowLen > 300) continue;  // every position of 70000: too many values
          SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(t) << " rowLen " << rowLen << " keep " << keep
                                          << " bound " << bound);
          const Rows r = randomRows(g, 9, rowLen, keep, t, 400);
          const std::vector<unsigned char> s = encode(r, bound, t);
          EXPECT_EQ(s.size() % 8, 0u);
          EXPECT_LE(s.size(), rowsStreamMaxBytesBounded(r.rows, rowLen, keep, r.nnz, t));
          std::vector<uint32_t> kept{99};
          std::vector<float> decoded;
          ASSERT_TRUE(parse(s, r, t, &kept, &decoded).isOk()) << parse(s, r, t, &kept, &decoded).message();
          ASSERT_EQ(kept.size(), 1 + r.nnz);
          EXPECT_TRUE(std::equal(r.positions.begin(), r.positions.end(), kept.begin() + 1));
          expectWithinBound(r, decoded, bound, t);
        }
}

TEST(RowsCodecBounded, ValuesNearTheLimitsAndZeroBound) {
  for (ValueType t : kRawTypes) {
    const float big = t == ValueType::kFloat16 ? 65504.0f : 3.3e38f;
    Rows r{2, 8, 8, 0, {}, {}, {}};
    r.counts = {8, 8};
    for (uint32_t i = 0; i < 16; ++i) r.positions.push_back(i % 8);
    r.values = {big, -big, 0.0f, -0.0f, 1e-30f, -1e-30f, 5.0f, kNaN, 1.0f, 1.5f, 1.25f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    for (float& v : r.values) v = asType(v, t);
    r.nnz = 16;
    for (float bound : {0.0f, 1e-38f, 0.1f, 1e3f, 3e38f}) {
      SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(t) << " bound " << bound);
      const std::vector<unsigned char> s = encode(r, bound, t);
      std::vector<float> decoded;
      ASSERT_TRUE(parse(s, r, t, nullptr, &decoded).isOk());
      expectWithinBound(r, decoded, bound, t);
      if (bound == 0.0f)  // lossless: every row raw, the values' own bits
        for (uint64_t e = 0; e < r.nnz; ++e)
          if (!std::isnan(r.values[e])) {
            EXPECT_EQ(core::floatBits(decoded[e]), core::floatBits(r.values[e]));
          }
    }
  }
}

// The widths section of a stream whose rows keep every position.
const unsigned char* widthsOf(const std::vector<unsigned char>& s) { return s.data() + sizeof(RowsHeader) + 4; }

TEST(RowsCodecBounded, CodesTakeTheBitsTheRowsSpanNeeds) {
  // Row r holds the multiples 0 .. span_r of the step: span_r + 1 codes need
  // ceil(log2(span_r + 1)) bits; a row of equal values none.
  const float bound = 0.5f;
  const float step = boundedStep(bound);
  const uint32_t spans[] = {0, 1, 2, 3, 4, 100, 255, 256, 1000};
  const uint32_t rowLen = 16;
  Rows r{std::size(spans), rowLen, rowLen, 0, {}, {}, {}};
  for (uint32_t span : spans) {
    for (uint32_t e = 0; e < rowLen; ++e) {
      r.values.push_back(static_cast<float>(e * span / (rowLen - 1)) * step);
      r.positions.push_back(e);
    }
    r.counts.push_back(rowLen);
  }
  r.nnz = r.values.size();
  const std::vector<unsigned char> s = encode(r, bound, ValueType::kFloat32);
  const unsigned char* widths = widthsOf(s);
  uint64_t bits = 0;
  for (size_t i = 0; i < std::size(spans); ++i) {
    const uint32_t expected = spans[i] == 0 ? 0 : 32 - static_cast<uint32_t>(__builtin_clz(spans[i]));
    EXPECT_EQ(widths[i], expected) << "span " << spans[i];
    bits += uint64_t{expected} * rowLen;
  }
  // Header, step, widths, one base byte a row (all 0), the codes: nothing else.
  EXPECT_EQ(s.size(), alignStream(sizeof(RowsHeader) + 4 + std::size(spans) * 2 + (bits + 7) / 8));
  std::vector<float> decoded;
  ASSERT_TRUE(parse(s, r, ValueType::kFloat32, nullptr, &decoded).isOk());
  expectWithinBound(r, decoded, bound, ValueType::kFloat32);
}

TEST(RowsCodecBounded, RowsGoRawWhereCodesWouldNotPay) {
  // Values spread over 1e8 bounds need more bits than fp16 holds: raw rows.
  Rows r{1, 4, 4, 4, {4}, {0, 1, 2, 3}, {-60000.0f, 60000.0f, 1.0f, 2.0f}};
  for (float& v : r.values) v = asType(v, ValueType::kFloat16);
  const std::vector<unsigned char> s = encode(r, 1e-3f, ValueType::kFloat16);
  EXPECT_EQ(widthsOf(s)[0], kBoundedRawWidth);
  std::vector<float> decoded;
  ASSERT_TRUE(parse(s, r, ValueType::kFloat16, nullptr, &decoded).isOk());
  EXPECT_EQ(decoded, r.values);
}

TEST(RowsCodecBounded, CallBoundRelativeAndScheduled) {
  const std::vector<float> v = {-2.0f, 6.0f, kNaN, kInf, 1.0f};
  EXPECT_FLOAT_EQ(rowsCallBound(v.data(), v.size(), 0.01f, false, 1.0, 5), 0.01f);
  EXPECT_FLOAT_EQ(rowsCallBound(v.data(), v.size(), 0.01f, true, 1.0, 5), 0.08f);  // range 8, non-finite ignored
  EXPECT_FLOAT_EQ(rowsCallBound(v.data(), v.size(), 0.01f, false, 0.5, 3), 0.00125f);
  EXPECT_FLOAT_EQ(rowsCallBound(v.data(), v.size(), 0.01f, true, 2.0, 2), 0.32f);
  EXPECT_EQ(rowsCallBound(v.data(), 0, 0.01f, true, 1.0, 0), 0.0f);  // no values: lossless
  EXPECT_EQ(rowsCallBound(v.data(), v.size(), 1e30f, false, 1e6, 100), 1e38f);
  EXPECT_EQ(boundedStep(0.0f), 0.0f);
  EXPECT_EQ(boundedStep(kNaN), 0.0f);
  EXPECT_GT(boundedStep(1.0f), 1.99f);
  EXPECT_LT(boundedStep(1.0f), 2.0f);
}

// ---- rejection ----

struct Sample {
  Rows r;
  std::vector<unsigned char> s;
};
Sample sample(uint64_t keep, uint64_t nonFiniteEvery = 7) {
  std::mt19937_64 g(5);
  Sample x{randomRows(g, 6, 40, keep, ValueType::kFloat32, nonFiniteEvery), {}};
  x.s = encode(x.r, 1e-2f, ValueType::kFloat32);
  return x;
}

bool accepted(const std::vector<unsigned char>& s, size_t bytes, const Rows& r) {
  std::vector<uint32_t> kept{1, 2};
  std::vector<float> decoded;
  RowsView v;
  const Status st =
      parseRowsBounded(s.data(), bytes, r.rows, r.rowLen, ValueType::kFloat32, kSeq, 1, &v, &kept, &decoded);
  if (!st.isOk()) {
    EXPECT_EQ(kept.size(), 2u) << "a refused stream appends no positions";
  }
  return st.isOk();
}

TEST(RowsCodecBoundedReject, EveryTruncationAndExtension) {
  for (uint64_t keep : {0u, 3u, 40u}) {
    Sample x = sample(keep);
    ASSERT_TRUE(accepted(x.s, x.s.size(), x.r));
    for (size_t n = 0; n < x.s.size(); ++n) EXPECT_FALSE(accepted(x.s, n, x.r)) << "keep " << keep << " bytes " << n;
    std::vector<unsigned char> longer = x.s;
    longer.resize(x.s.size() + 8, 0);
    EXPECT_FALSE(accepted(longer, longer.size(), x.r));
  }
}

TEST(RowsCodecBoundedReject, BadFields) {
  Sample x = sample(40, 0);  // every position kept: [header][step][widths][bases][codes]
  const size_t stepAt = sizeof(RowsHeader);
  auto patched = [&](size_t at, const void* v, size_t n) {
    std::vector<unsigned char> b = x.s;
    std::memcpy(b.data() + at, v, n);
    return b;
  };
  for (float bad : {-1.0f, kNaN, kInf}) {
    const auto b = patched(stepAt, &bad, 4);
    EXPECT_FALSE(accepted(b, b.size(), x.r)) << bad;
  }
  const float zero = 0.0f;  // step 0 with quantized rows
  const unsigned char* widths = x.s.data() + stepAt + 4;
  ASSERT_NE(std::count(widths, widths + x.r.rows, kBoundedRawWidth), static_cast<long>(x.r.rows));
  auto b = patched(stepAt, &zero, 4);
  EXPECT_FALSE(accepted(b, b.size(), x.r));
  for (unsigned char w : {25, 32, 254}) {
    for (uint64_t row = 0; row < x.r.rows; ++row) {
      b = patched(stepAt + 4 + row, &w, 1);
      EXPECT_FALSE(accepted(b, b.size(), x.r)) << "width " << int{w} << " row " << row;
    }
  }
  // The first quantized row's base: a 5-byte varint over 2^24 (same size only
  // if it was 5 bytes; else the sections no longer add up: refused either way).
  const unsigned char hugeBase[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
  b = patched(stepAt + 4 + x.r.rows, hugeBase, sizeof hugeBase);
  EXPECT_FALSE(accepted(b, b.size(), x.r));
  // Non-zero padding at the end (the sample leaves some: checked below).
  const size_t last = x.s.size() - 1;
  if (x.s[last] == 0) {
    b = x.s;
    b[last] = 1;
    EXPECT_FALSE(accepted(b, b.size(), x.r));
  }
  // Version, value type, rows, row length, seq.
  b = x.s;
  const uint16_t wireVersion = kStreamVersion;
  std::memcpy(b.data() + offsetof(RowsHeader, version), &wireVersion, 2);
  EXPECT_FALSE(accepted(b, b.size(), x.r));
  b = x.s;
  b[offsetof(RowsHeader, valueType)] = kRowsInt8ValueType;
  EXPECT_FALSE(accepted(b, b.size(), x.r));
  RowsView v;
  std::vector<float> d;
  EXPECT_FALSE(
      parseRowsBounded(x.s.data(), x.s.size(), x.r.rows + 1, x.r.rowLen, ValueType::kFloat32, kSeq, 1, &v, nullptr, &d)
          .isOk());
  EXPECT_FALSE(
      parseRowsBounded(x.s.data(), x.s.size(), x.r.rows, x.r.rowLen, ValueType::kFloat32, kSeq + 1, 1, &v, nullptr, &d)
          .isOk());
  // Read as another codec's stream.
  EXPECT_FALSE(
      parseRowsCoded(x.s.data(), x.s.size(), x.r.rows, x.r.rowLen, ValueType::kFloat32, kRowsCodecInt8, kSeq, 1, &v)
          .isOk());
  EXPECT_FALSE(parseRows(x.s.data(), x.s.size(), x.r.rows, x.r.rowLen, ValueType::kFloat32, kSeq, 1, &v).isOk());
}

TEST(RowsCodecBoundedReject, ByteFlipsNeverReadOutside) {
  // Every byte of every layout flipped: refused, or decoded from inside the
  // stream (ASan builds catch a read outside).
  for (uint64_t keep : {0u, 3u, 40u}) {
    const Sample x = sample(keep);
    for (size_t i = 0; i < x.s.size(); ++i) {
      std::vector<unsigned char> b(x.s);
      b[i] ^= 0x5a;
      std::vector<float> d;
      RowsView v;
      std::vector<uint32_t> kept;
      if (parseRowsBounded(b.data(), b.size(), x.r.rows, x.r.rowLen, ValueType::kFloat32, kSeq, 1, &v, &kept, &d)
              .isOk()) {
        EXPECT_EQ(d.size(), v.nnz);
        EXPECT_EQ(kept.size(), v.nnz);
        for (uint32_t p : kept) EXPECT_LT(p, x.r.rowLen);
      }
    }
  }
}

}  // namespace
}  // namespace spccl::test
