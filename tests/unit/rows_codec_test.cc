// The int8 row codec (SPCCL_ROWS_CODEC=int8, codec/codec.h): the error bound
// of every decoded value for each index width and user type, and rejection
// of corrupted or truncated streams (a peer's stream is untrusted input).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
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
constexpr uint64_t kSeq = 7;

// A value as a buffer of user type t holds it (what the alltoall gathers).
float asUserType(float v, spcclDataType_t t) {
  if (t == spcclFloat16) return core::halfBitsToFloat(core::floatToHalfBits(v));
  if (t == spcclBfloat16) return core::bfloat16BitsToFloat(core::floatToBfloat16Bits(v));
  return v;
}
// Half an ulp of type t at magnitude m, bounded above (the rounding of a
// decoded value into the user's buffer).
double halfUlp(double m, spcclDataType_t t) {
  const int p = t == spcclFloat16 ? 11 : t == spcclBfloat16 ? 8 : 24;
  return std::ldexp(m, -p);
}

struct Rows {
  uint64_t rows, rowLen, nnz = 0;
  std::vector<uint32_t> counts, positions;
  std::vector<float> values;
};

// Rows of random counts (`keep` each when keep > 0), sorted unique
// positions, and values of per-row magnitudes from 1e-6 to 1e3, as held in
// a buffer of type t.
Rows randomRows(std::mt19937_64& g, uint64_t rows, uint64_t rowLen, uint32_t keep, spcclDataType_t t) {
  Rows r{rows, rowLen, 0, {}, {}, {}};
  std::uniform_real_distribution<double> exponent(-6, 3), unit(-1, 1);
  for (uint64_t i = 0; i < rows; ++i) {
    const uint32_t c = keep > 0 ? keep : 1 + static_cast<uint32_t>(g() % std::min<uint64_t>(rowLen, 20));
    std::vector<uint32_t> pos;
    while (pos.size() < c) {
      const auto p = static_cast<uint32_t>(g() % rowLen);
      if (std::find(pos.begin(), pos.end(), p) == pos.end()) pos.push_back(p);
    }
    std::sort(pos.begin(), pos.end());
    const double mag = std::pow(10.0, exponent(g));
    for (uint32_t e = 0; e < c; ++e) r.values.push_back(asUserType(static_cast<float>(mag * unit(g)), t));
    r.positions.insert(r.positions.end(), pos.begin(), pos.end());
    r.counts.push_back(c);
    r.nnz += c;
  }
  return r;
}

// Checks every decoded value of rows r (codes and scales of a parsed
// stream) against the bound: |x - code*scale| <= scale/2 exactly (in
// double), and after the decode to fp32 and the user type, within that plus
// the user type's rounding.
void expectWithinBound(const Rows& r, const unsigned char* scales, const int8_t* codes, spcclDataType_t t) {
  uint64_t e = 0;
  for (uint64_t i = 0; i < r.rows; ++i) {
    const float scale = loadScale(scales, i);
    float maxAbs = 0;
    for (uint32_t c = 0; c < r.counts[i]; ++c)
      if (std::isfinite(r.values[e + c])) maxAbs = std::max(maxAbs, std::fabs(r.values[e + c]));
    EXPECT_EQ(scale, maxAbs / 127.0f) << "row " << i;
    for (uint32_t c = 0; c < r.counts[i]; ++c, ++e) {
      const float x = r.values[e];
      if (!std::isfinite(x)) {
        EXPECT_EQ(codes[e], kInt8NonFinite);
        EXPECT_TRUE(std::isnan(int8Decode(codes[e], scale)));
        continue;
      }
      ASSERT_NE(codes[e], kInt8NonFinite);
      const double exact = static_cast<double>(codes[e]) * scale;
      EXPECT_LE(std::fabs(x - exact), scale / 2.0) << "row " << i << " entry " << c;
      const float decoded = asUserType(int8Decode(codes[e], scale), t);
      EXPECT_LE(std::fabs(static_cast<double>(x) - decoded),
                scale / 2.0 + halfUlp(std::fabs(exact), spcclFloat32) + halfUlp(std::fabs(exact) * 1.0001, t))
          << "row " << i << " entry " << c << " x " << x << " decoded " << decoded;
    }
  }
}

constexpr spcclDataType_t kUserTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};
constexpr uint64_t kRowLens[] = {40, 300, 70000};  // 1-, 2- and 4-byte positions

TEST(RowsCodecInt8, RowsRoundTripWithinHalfScale) {
  std::mt19937_64 g(1);
  for (const uint64_t rowLen : kRowLens) {
    ASSERT_EQ(rowIndexBytes(rowLen), rowLen == 40 ? 1u : rowLen == 300 ? 2u : 4u);
    for (const spcclDataType_t t : kUserTypes) {
      for (const uint32_t keep : {0u, 3u}) {
        SCOPED_TRACE(testing::Message() << "rowLen " << rowLen << " type " << t << " keep " << keep);
        const Rows r = randomRows(g, 9, rowLen, keep, t);
        const size_t bytes = rowsStreamBytesInt8(r.rows, rowLen, r.nnz, keep == 0);
        std::vector<unsigned char> s(bytes, 0xa5);
        ASSERT_EQ(encodeRowsInt8(s.data(), r.rows, rowLen, keep, r.counts.data(), r.positions.data(), r.values.data(),
                                 r.nnz, kSeq),
                  bytes);
        // int8: 1 byte a value and 4 a row, against 4 bytes a value in fp32.
        EXPECT_LT(bytes, rowsStreamBytes(r.rows, rowLen, r.nnz, keep == 0, ValueType::kFloat32));
        RowsView v;
        std::vector<uint32_t> kept;
        const Status st =
            parseRowsCoded(s.data(), bytes, r.rows, rowLen, ValueType::kFloat32, kRowsCodecInt8, kSeq, 1, &v, &kept);
        ASSERT_TRUE(st.isOk()) << st.message();
        EXPECT_EQ(kept, r.positions);
        EXPECT_EQ(v.keepPerRow, keep);
        ASSERT_NE(v.scales, nullptr);
        expectWithinBound(r, v.scales, static_cast<const int8_t*>(v.values), t);

        // The backward's values stream: same codes and scales.
        std::vector<unsigned char> b(valuesStreamBytesInt8(r.rows, r.nnz), 0x5a);
        ASSERT_EQ(encodeValuesInt8(b.data(), r.values.data(), r.counts.data(), r.rows, rowLen, r.nnz, kSeq), b.size());
        const unsigned char* scales = nullptr;
        const int8_t* codes = nullptr;
        ASSERT_TRUE(parseValuesInt8(b.data(), b.size(), r.rows, r.nnz, kSeq, 1, &scales, &codes).isOk());
        expectWithinBound(r, scales, codes, t);
      }
    }
  }
}

TEST(RowsCodecInt8, NonFiniteZerosAndExtremes) {
  const uint64_t rows = 4, rowLen = 16;
  const Rows r{rows,
               rowLen,
               10,
               {3, 2, 3, 2},
               {0, 1, 2, 3, 9, 0, 7, 15, 4, 5},
               {kNaN, 2.0f, -kInf, 0.0f, 0.0f, kInf, 3.0e38f, -3.4028235e38f, 1e-30f, -1e-38f}};
  std::vector<unsigned char> s(rowsStreamBytesInt8(rows, rowLen, r.nnz, true));
  encodeRowsInt8(s.data(), rows, rowLen, 0, r.counts.data(), r.positions.data(), r.values.data(), r.nnz, kSeq);
  RowsView v;
  ASSERT_TRUE(
      parseRowsCoded(s.data(), s.size(), rows, rowLen, ValueType::kFloat32, kRowsCodecInt8, kSeq, 0, &v).isOk());
  expectWithinBound(r, v.scales, static_cast<const int8_t*>(v.values), spcclFloat32);
  EXPECT_EQ(loadScale(v.scales, 1), 0.0f);  // zeros only
  // The largest finite value decodes to itself within the bound, not to Inf.
  EXPECT_TRUE(std::isfinite(int8Decode(static_cast<const int8_t*>(v.values)[7], loadScale(v.scales, 2))));
}

// A valid stream of each kind, for the rejection tests.
struct Streams {
  Rows r;
  std::vector<unsigned char> rowsFixed, rowsPerRow, values;
};
Streams validStreams() {
  std::mt19937_64 g(5);
  Streams s{randomRows(g, 6, 300, 0, spcclFloat32), {}, {}, {}};
  const Rows fixed = randomRows(g, 6, 300, 4, spcclFloat32);
  s.rowsPerRow.resize(rowsStreamBytesInt8(6, 300, s.r.nnz, true));
  encodeRowsInt8(s.rowsPerRow.data(), 6, 300, 0, s.r.counts.data(), s.r.positions.data(), s.r.values.data(), s.r.nnz,
                 kSeq);
  s.rowsFixed.resize(rowsStreamBytesInt8(6, 300, fixed.nnz, false));
  encodeRowsInt8(s.rowsFixed.data(), 6, 300, 4, fixed.counts.data(), fixed.positions.data(), fixed.values.data(),
                 fixed.nnz, kSeq);
  s.values.resize(valuesStreamBytesInt8(6, s.r.nnz));
  encodeValuesInt8(s.values.data(), s.r.values.data(), s.r.counts.data(), 6, 300, s.r.nnz, kSeq);
  return s;
}
Status parseR(const std::vector<unsigned char>& b, size_t bytes, int codec = kRowsCodecInt8) {
  RowsView v;
  std::vector<uint32_t> kept = {1, 2};
  const Status st = parseRowsCoded(b.data(), bytes, 6, 300, ValueType::kFloat32, codec, kSeq, 1, &v, &kept);
  if (!st.isOk()) {
    EXPECT_EQ(kept.size(), 2u) << "a refused stream appends no positions";
  }
  return st;
}
Status parseV(const std::vector<unsigned char>& b, size_t bytes, uint64_t nnz) {
  const unsigned char* scales = nullptr;
  const int8_t* codes = nullptr;
  return parseValuesInt8(b.data(), bytes, 6, nnz, kSeq, 1, &scales, &codes);
}

TEST(RowsCodecInt8Reject, EveryTruncationAndExtension) {
  const Streams s = validStreams();
  ASSERT_TRUE(parseR(s.rowsPerRow, s.rowsPerRow.size()).isOk());
  ASSERT_TRUE(parseR(s.rowsFixed, s.rowsFixed.size()).isOk());
  ASSERT_TRUE(parseV(s.values, s.values.size(), s.r.nnz).isOk());
  for (size_t n = 0; n < s.rowsPerRow.size(); ++n) {
    std::vector<unsigned char> cut(s.rowsPerRow.begin(), s.rowsPerRow.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_FALSE(parseR(cut, n).isOk()) << n;
  }
  for (size_t n = 0; n < s.rowsFixed.size(); ++n) {
    std::vector<unsigned char> cut(s.rowsFixed.begin(), s.rowsFixed.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_FALSE(parseR(cut, n).isOk()) << n;
  }
  for (size_t n = 0; n < s.values.size(); ++n) {
    std::vector<unsigned char> cut(s.values.begin(), s.values.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_FALSE(parseV(cut, n, s.r.nnz).isOk()) << n;
  }
  std::vector<unsigned char> longer = s.rowsFixed;
  longer.resize(longer.size() + 8);
  EXPECT_FALSE(parseR(longer, longer.size()).isOk());
  EXPECT_FALSE(parseV(s.values, s.values.size(), s.r.nnz - 1).isOk());
}

TEST(RowsCodecInt8Reject, VersionTypeAndCodecMustAgree) {
  const Streams s = validStreams();
  // The int8 stream under the wire codec, and a wire stream under int8.
  EXPECT_FALSE(parseR(s.rowsPerRow, s.rowsPerRow.size(), kRowsCodecWire).isOk());
  std::vector<unsigned char> wire(rowsStreamBytes(6, 300, s.r.nnz, true, ValueType::kFloat32));
  encodeRows(wire.data(), 6, 300, 0, s.r.counts.data(), s.r.positions.data(), s.r.values.data(), ValueType::kFloat32,
             s.r.nnz, ValueType::kFloat32, kSeq);
  ASSERT_TRUE(parseR(wire, wire.size(), kRowsCodecWire).isOk());
  EXPECT_FALSE(parseR(wire, wire.size(), kRowsCodecInt8).isOk());
  const void* vals = nullptr;
  EXPECT_FALSE(parseValues(s.values.data(), s.values.size(), s.r.nnz, ValueType::kFloat32, kSeq, 1, &vals).isOk());
  // The codec's value type only with its version, and the other way round.
  for (const uint16_t version : {uint16_t{1}, kStreamVersion, uint16_t{4}}) {
    std::vector<unsigned char> b = s.rowsPerRow, c = s.values;
    std::memcpy(b.data() + offsetof(RowsHeader, version), &version, sizeof version);
    std::memcpy(c.data() + offsetof(RowsHeader, version), &version, sizeof version);
    EXPECT_FALSE(parseR(b, b.size()).isOk()) << version;
    EXPECT_FALSE(parseV(c, c.size(), s.r.nnz).isOk()) << version;
  }
  std::vector<unsigned char> w3 = wire;
  std::memcpy(w3.data() + offsetof(RowsHeader, version), &kStreamVersionRowsCodec, sizeof kStreamVersionRowsCodec);
  EXPECT_FALSE(parseR(w3, w3.size(), kRowsCodecWire).isOk());
  for (int t = 0; t < 256; ++t) {
    if (t == kRowsInt8ValueType) continue;
    std::vector<unsigned char> b = s.rowsPerRow, c = s.values;
    b[offsetof(RowsHeader, valueType)] = static_cast<unsigned char>(t);
    c[offsetof(RowsHeader, valueType)] = static_cast<unsigned char>(t);
    EXPECT_FALSE(parseR(b, b.size()).isOk()) << t;
    EXPECT_FALSE(parseV(c, c.size(), s.r.nnz).isOk()) << t;
  }
  // The status byte carries nothing for int8.
  std::vector<unsigned char> st = s.rowsPerRow;
  st[offsetof(RowsHeader, status)] = 1;
  EXPECT_FALSE(parseR(st, st.size()).isOk());
}

TEST(RowsCodecInt8Reject, BadScalesCountsAndPositions) {
  const Streams s = validStreams();
  const size_t countsAt = sizeof(RowsHeader);
  const size_t positionsAt = countsAt + 6 * sizeof(uint32_t);
  const size_t scalesAt = (positionsAt + s.r.nnz * 2 + 3) & ~size_t{3};
  for (const float bad : {kNaN, -kNaN, kInf, -kInf, -1.0f, -1e-45f}) {
    for (uint64_t row : {0ull, 5ull}) {
      std::vector<unsigned char> b = s.rowsPerRow, c = s.values;
      std::memcpy(b.data() + scalesAt + row * 4, &bad, 4);
      std::memcpy(c.data() + sizeof(RowsHeader) + row * 4, &bad, 4);
      EXPECT_FALSE(parseR(b, b.size()).isOk()) << bad;
      EXPECT_FALSE(parseV(c, c.size(), s.r.nnz).isOk()) << bad;
    }
  }
  // -0 is a valid (zero) scale.
  std::vector<unsigned char> z = s.rowsPerRow;
  const float negZero = -0.0f;
  std::memcpy(z.data() + scalesAt, &negZero, 4);
  EXPECT_TRUE(parseR(z, z.size()).isOk());
  // A count of 0, one past the row, and counts that do not add up.
  for (const uint32_t count : {0u, 301u, 1000000u}) {
    std::vector<unsigned char> b = s.rowsPerRow;
    std::memcpy(b.data() + countsAt + 4, &count, 4);
    EXPECT_FALSE(parseR(b, b.size()).isOk()) << count;
  }
  // A position past the row, and one not increasing.
  std::vector<unsigned char> b = s.rowsPerRow;
  const uint16_t past = 300;
  std::memcpy(b.data() + positionsAt, &past, 2);
  EXPECT_FALSE(parseR(b, b.size()).isOk());
  // Random bytes anywhere: a status, never a read outside the stream (the
  // ASan build of this test checks the second).
  std::mt19937_64 g(9);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<unsigned char> f = trial % 2 ? s.rowsPerRow : s.rowsFixed;
    for (int k = 0; k < 1 + trial % 4; ++k) f[g() % f.size()] ^= static_cast<unsigned char>(1 + g() % 255);
    RowsView v;
    if (parseRowsCoded(f.data(), f.size(), 6, 300, ValueType::kFloat32, kRowsCodecInt8, kSeq, 1, &v).isOk()) {
      for (uint64_t r = 0; r < v.rows; ++r) EXPECT_TRUE(loadScale(v.scales, r) >= 0.0f);
      for (uint64_t j = 0; j < v.nnz; ++j) EXPECT_LT(v.positionAt(j), 300u);
    }
    std::vector<unsigned char> c = s.values;
    c[g() % c.size()] ^= static_cast<unsigned char>(1 + g() % 255);
    (void)parseV(c, c.size(), s.r.nnz);
  }
}

}  // namespace
}  // namespace spccl::test
