// src/codec: round trips of every stream kind and value type, call
// descriptor checks, and rejection of malformed streams (a peer's stream is
// untrusted input: every corruption must come back as a status, never as an
// out-of-bounds access).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "collectives/agreement.h"
#include "collectives/algorithms.h"
#include "codec/codec.h"
#include "kernels/host/sections.h"
#include "tests/unit/unit_util.h"

namespace spccl::test {
namespace {

using core::ValueType;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint64_t kSeq = 42;
constexpr uint8_t kAlgo = SPCCL_ALGO_SPLIT;

// A sparse contribution over [begin, end) of a buffer of `count` elements.
struct Pairs {
  uint64_t count, begin, end;
  std::vector<uint32_t> indices;
  std::vector<float> values;  // fp32 originals
};

Pairs randomPairs(std::mt19937_64& g, uint64_t count, uint64_t begin, uint64_t end, uint64_t nnz) {
  Pairs p{count, begin, end, {}, {}};
  std::vector<uint32_t> all(end - begin);
  for (uint64_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint32_t>(begin + i);
  std::shuffle(all.begin(), all.end(), g);
  p.indices.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(nnz));
  std::sort(p.indices.begin(), p.indices.end());
  p.values = randomNormal(g, nnz);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 65504.0f, 1e-8f};
  for (uint64_t j = 0; j < nnz; j += 5) p.values[j] = specials[(j / 5) % 7];
  return p;
}

StreamInfo infoFor(const Pairs& p, ValueType vt, StreamKind kind) {
  return {p.count, p.begin, p.end, kind == StreamKind::kPairs ? p.indices.size() : 0, kSeq, kAlgo, vt, kind};
}

StreamExpect expectFor(const Pairs& p, ValueType vt, bool allowDense) {
  return {p.count, p.begin, p.end, kSeq, kAlgo, vt, allowDense};
}

std::vector<unsigned char> wireValues(const std::vector<float>& values, ValueType vt) {
  std::vector<unsigned char> w(values.size() * core::wireValueBytes(vt));
  for (size_t j = 0; j < values.size(); ++j) core::storeWireValue(w.data(), j, values[j], vt);
  return w;
}

// Encodes into a buffer prefilled with junk, so padding must be written.
std::vector<unsigned char> encodePairsStream(const Pairs& p, ValueType vt) {
  std::vector<unsigned char> buf(pairsStreamBytes(p.indices.size(), vt), 0xa5);
  const std::vector<unsigned char> w = wireValues(p.values, vt);
  const size_t bytes = encodePairs(buf.data(), infoFor(p, vt, StreamKind::kPairs), p.indices.data(), w.data());
  EXPECT_EQ(bytes, buf.size());
  return buf;
}

std::vector<unsigned char> encodeDenseStream(const Pairs& p, const std::vector<float>& dense, ValueType vt,
                                             std::vector<float>* decoded = nullptr) {
  std::vector<unsigned char> buf(denseStreamBytes(p.end - p.begin, vt), 0xa5);
  if (decoded) decoded->assign(p.end - p.begin, -1.0f);
  const size_t bytes =
      encodeDense(buf.data(), infoFor(p, vt, StreamKind::kDense), dense.data(), decoded ? decoded->data() : nullptr);
  EXPECT_EQ(bytes, buf.size());
  return buf;
}

// Parses a copy of exactly `bytes` bytes in its own allocation, so a read past
// the end is a heap overflow that a sanitizer build reports.
Status parseCopy(const std::vector<unsigned char>& stream, size_t bytes, const StreamExpect& e, StreamView* view) {
  std::vector<unsigned char> copy(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(bytes));
  const Status st = parseStream(copy.empty() ? nullptr : copy.data(), copy.size(), e, 3, view);
  // A view into the copy must not outlive it: callers only look at the status and kind.
  return st;
}

void expectRejected(const Status& st, const std::string& what) {
  EXPECT_FALSE(st.isOk()) << what << ": accepted";
  EXPECT_NE(st.code(), spcclSuccess) << what;
  EXPECT_FALSE(st.message().empty()) << what << ": no message";
}

// Views into the stream after a successful parse stay inside it.
void expectViewInside(const StreamView& v, const std::vector<unsigned char>& s, const StreamExpect& e) {
  if (v.kind == StreamKind::kError) return;
  const auto* lo = s.data();
  const auto* hi = s.data() + s.size();
  const uint64_t vb = core::wireValueBytes(e.valueType);
  const auto* vals = static_cast<const unsigned char*>(v.values);
  ASSERT_GE(vals, lo);
  ASSERT_LE(vals + v.nnz * vb, hi);
  if (v.kind == StreamKind::kPairs) {
    if (v.encoding == IndexEncoding::kCoo32) {
      const auto* idx = reinterpret_cast<const unsigned char*>(v.indices);
      ASSERT_GE(idx, lo);
      ASSERT_LE(idx + v.nnz * 4, hi);
    } else {
      ASSERT_GE(v.indexBytes, lo);
      ASSERT_LE(v.indexBytes, hi);
    }
    uint64_t prev = 0, seen = 0;
    host::forEachPair(v, [&](uint64_t index, uint64_t j) {
      EXPECT_EQ(j, seen++);
      EXPECT_GE(index, e.rangeBegin);
      EXPECT_LT(index, e.rangeEnd);
      if (j) {
        EXPECT_GT(index, prev);
      }
      prev = index;
    });
    ASSERT_EQ(seen, v.nnz);
  }
}

// ---------------------------------------------------------------- round trips

struct Shape {
  const char* name;
  uint64_t count, begin, end, nnz;
};

constexpr Shape kShapes[] = {
    {"count0", 0, 0, 0, 0},         {"count1_nnz0", 1, 0, 1, 0},          {"count1_nnz1", 1, 0, 1, 1},
    {"nnz0", 1000, 0, 1000, 0},     {"nnz1", 1000, 0, 1000, 1},           {"many", 5000, 0, 5000, 777},
    {"full", 300, 0, 300, 300},     {"subrange", 10000, 2500, 5000, 400}, {"subrange_odd", 10001, 3334, 6667, 3},
    {"empty_subrange", 7, 7, 7, 0},
};

// One section's rank-ordered sum (host::reduceSections of it alone): the
// section stored over its range.
void storeSection(const WireSection& view, float* out, uint64_t outBase) {
  std::vector<host::PairCursor> cursors;
  host::reduceSections(&view, 1, out, outBase, &cursors);
}

// storeSection against its definition, computed here from the originals:
// over the stream's range 0.0f + each decoded value at its index (so a -0
// value lands as +0) and +0 between; nothing outside the range written.
void expectStore(const StreamView& view, const Pairs& p, ValueType vt, uint64_t outBase) {
  std::vector<float> got(p.count - outBase + 2, 3.5f), want = got;
  std::fill(want.begin() + static_cast<std::ptrdiff_t>(p.begin - outBase),
            want.begin() + static_cast<std::ptrdiff_t>(p.end - outBase), 0.0f);
  for (size_t j = 0; j < p.indices.size(); ++j) want[p.indices[j] - outBase] = 0.0f + refRoundToWire(p.values[j], vt);
  storeSection(view, got.data(), outBase);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(sameFloat(got[i], want[i])) << "out[" << i << "]";
}

TEST(Codec, PairsRoundTripEveryValueType) {
  auto g = rng(50);
  for (ValueType vt : kAllValueTypes) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(std::string(typeName(vt)) + " " + s.name);
      const Pairs p = randomPairs(g, s.count, s.begin, s.end, s.nnz);
      const std::vector<unsigned char> stream = encodePairsStream(p, vt);
      ASSERT_EQ(stream.size() % 8, 0u);
      ASSERT_EQ(stream.size(), alignStream(sizeof(StreamHeader) + s.nnz * (4 + core::wireValueBytes(vt))));
      const size_t used = sizeof(StreamHeader) + s.nnz * (4 + core::wireValueBytes(vt));
      for (size_t b = used; b < stream.size(); ++b) ASSERT_EQ(stream[b], 0) << "padding byte " << b;

      StreamView view{};
      const StreamExpect e = expectFor(p, vt, false);
      const Status st = parseStream(stream.data(), stream.size(), e, 1, &view);
      ASSERT_TRUE(st.isOk()) << st.message();
      ASSERT_EQ(view.kind, StreamKind::kPairs);
      ASSERT_EQ(view.nnz, s.nnz);
      ASSERT_EQ(view.valueType, vt);
      ASSERT_EQ(view.rangeBegin, s.begin);
      ASSERT_EQ(view.rangeEnd, s.end);
      expectViewInside(view, stream, e);
      for (uint64_t j = 0; j < s.nnz; ++j) {
        ASSERT_EQ(view.indices[j], p.indices[j]);
        ASSERT_TRUE(sameFloat(core::loadWireValue(view.values, j, vt), refRoundToWire(p.values[j], vt)))
            << "pair " << j << " value " << p.values[j];
      }

      // Accumulate onto a non-zero accumulator, with accBase at 0 and at the range start.
      for (uint64_t accBase : {uint64_t{0}, s.begin}) {
        std::vector<float> acc(s.count - accBase + 1, 0.5f), want = acc;
        for (uint64_t j = 0; j < s.nnz; ++j) want[p.indices[j] - accBase] += refRoundToWire(p.values[j], vt);
        host::accumulateSection(view, acc.data(), accBase);
        for (size_t i = 0; i < acc.size(); ++i) ASSERT_TRUE(sameFloat(acc[i], want[i])) << "acc[" << i << "]";
        expectStore(view, p, vt, accBase);
      }
    }
  }
}

// ---------------------------------------------------------------- compact index encodings

std::vector<unsigned char> encodeCompact(const Pairs& p, ValueType vt, IndexEncoding enc) {
  const size_t want = encodedPairsBytes(enc, p.indices.data(), p.indices.size(), p.begin, p.end, vt);
  std::vector<unsigned char> buf(want, 0xa5);
  const std::vector<unsigned char> w = wireValues(p.values, vt);
  StreamInfo info = infoFor(p, vt, StreamKind::kPairs);
  info.encoding = enc;
  const size_t bytes = encodePairs(buf.data(), info, p.indices.data(), w.data());
  EXPECT_EQ(bytes, want) << "encodedPairsBytes disagrees with what encodePairs wrote";
  return buf;
}

// A shape whose gaps need every varint length, up to 5 bytes (gaps >= 2^28).
Pairs bigGapPairs() {
  Pairs p{uint64_t{1} << 32, 0, uint64_t{1} << 32, {}, {}};
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{200}, uint64_t{20000}, uint64_t{3000000}, uint64_t{400000000},
                     uint64_t{4294967295}}) {
    p.indices.push_back(static_cast<uint32_t>(i));
    p.values.push_back(static_cast<float>(i % 97) - 48.0f);
  }
  return p;
}

TEST(Codec, CompactPairsRoundTrip) {
  auto g = rng(57);
  for (IndexEncoding enc : {IndexEncoding::kDelta, IndexEncoding::kBitmap}) {
    for (ValueType vt : kAllValueTypes) {
      std::vector<std::pair<std::string, Pairs>> cases;
      for (const Shape& s : kShapes) cases.emplace_back(s.name, randomPairs(g, s.count, s.begin, s.end, s.nnz));
      cases.emplace_back("half_full", randomPairs(g, 4099, 0, 4099, 2050));
      if (enc == IndexEncoding::kDelta) cases.emplace_back("big_gaps", bigGapPairs());
      for (const auto& [name, p] : cases) {
        SCOPED_TRACE(std::string(enc == IndexEncoding::kDelta ? "delta " : "bitmap ") + typeName(vt) + " " + name);
        const std::vector<unsigned char> stream = encodeCompact(p, vt, enc);
        ASSERT_EQ(stream.size() % 8, 0u);
        StreamView view{};
        const StreamExpect e = expectFor(p, vt, false);
        const Status st = parseCopy(stream, stream.size(), e, &view);
        ASSERT_TRUE(st.isOk()) << st.message();
        ASSERT_TRUE(parseStream(stream.data(), stream.size(), e, 1, &view).isOk());
        ASSERT_EQ(view.encoding, enc);
        ASSERT_EQ(view.nnz, p.indices.size());
        expectViewInside(view, stream, e);
        std::vector<uint64_t> got;
        host::forEachPair(view, [&](uint64_t index, uint64_t) { got.push_back(index); });
        ASSERT_EQ(got.size(), p.indices.size());
        for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], p.indices[j]) << "pair " << j;
        if (p.count > (uint64_t{1} << 24)) continue;  // no dense accumulator for the 2^32 range
        std::vector<float> acc(p.count + 1, 0.25f), want = acc;
        for (size_t j = 0; j < p.indices.size(); ++j) want[p.indices[j]] += refRoundToWire(p.values[j], vt);
        host::accumulateSection(view, acc.data(), 0);
        for (size_t i = 0; i < acc.size(); ++i) ASSERT_TRUE(sameFloat(acc[i], want[i])) << "acc[" << i << "]";
        expectStore(view, p, vt, 0);
        expectStore(view, p, vt, p.begin);
      }
    }
  }
}

// host::reduceSections against zeroing and accumulateSection (itself checked against
// the originals above) in stream order: pairs in each index encoding, dense,
// empty, NaN/Inf/-0 among the values, ranges shorter and longer than its
// block and not aligned to it; nothing outside the range written. Both of
// its ways: streams dense enough for the blocked pass, and sparse ones
// (fewer than one pair in host::kScatterBelow elements) that are scattered.
TEST(Codec, ReduceStreamsEqualsZeroThenAccumulate) {
  auto g = rng(59);
  struct Range {
    uint64_t count, begin, end;
  };
  for (bool sparse : {false, true}) {
    for (ValueType vt : kAllValueTypes) {
      for (const Range& rg : {Range{20011, 2500, 15003}, Range{10, 3, 9}, Range{7, 7, 7}, Range{4096, 0, 4096}}) {
        SCOPED_TRACE(std::string(sparse ? "sparse " : "dense enough ") + typeName(vt) + " range [" +
                     std::to_string(rg.begin) + ", " + std::to_string(rg.end) + ")");
        const uint64_t len = rg.end - rg.begin;
        std::vector<std::vector<unsigned char>> streams;
        const std::pair<IndexEncoding, double> pairKinds[] = {{IndexEncoding::kCoo32, sparse ? 0.001 : 0.05},
                                                              {IndexEncoding::kDelta, sparse ? 0.002 : 0.3},
                                                              {IndexEncoding::kBitmap, sparse ? 0.001 : 0.6},
                                                              {IndexEncoding::kDelta, 0.0},
                                                              {IndexEncoding::kCoo32, sparse ? 0.0 : 1.0}};
        for (const auto& [enc, share] : pairKinds) {
          const Pairs p = randomPairs(g, rg.count, rg.begin, rg.end, static_cast<uint64_t>(share * len));
          streams.push_back(encodeCompact(p, vt, enc));
        }
        const Pairs shape{rg.count, rg.begin, rg.end, {}, {}};
        if (!sparse) {
          std::vector<float> dense = randomNormal(g, len);
          sprinkleNonFinite(g, dense, 0.05);
          streams.insert(streams.begin() + 2, encodeDenseStream(shape, dense, vt));
        }
        std::vector<StreamView> views(streams.size());
        uint64_t pairs = 0;
        for (size_t r = 0; r < streams.size(); ++r) {
          ASSERT_TRUE(
              parseStream(streams[r].data(), streams[r].size(), expectFor(shape, vt, true), 0, &views[r]).isOk())
              << "stream " << r;
          pairs += views[r].nnz;
        }
        if (len > 10000) {
          ASSERT_EQ(host::zeroThenScatter(pairs, len), sparse) << pairs << " pairs";
        }
        for (uint64_t accBase : {uint64_t{0}, rg.begin}) {
          std::vector<float> want(rg.count - accBase + 2, 3.5f), got = want;
          std::fill(want.begin() + static_cast<std::ptrdiff_t>(rg.begin - accBase),
                    want.begin() + static_cast<std::ptrdiff_t>(rg.end - accBase), 0.0f);
          for (const StreamView& v : views) host::accumulateSection(v, want.data(), accBase);
          std::vector<host::PairCursor> cursors;
          const std::vector<WireSection> sections(views.begin(), views.end());
          host::reduceSections(sections.data(), sections.size(), got.data(), accBase, &cursors);
          for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(sameFloat(got[i], want[i])) << "acc[" << i << "]";
        }
      }
    }
  }
}

TEST(Codec, AutoEncodingIsTheSmallestExactSize) {
  auto g = rng(58);
  struct Case {
    uint64_t count, nnz;
    IndexEncoding expect;  // the clear winner
  };
  // 1%: varint gaps (~1-2 bytes) beat 4-byte indices and a 12.5-byte-per-pair bitmap;
  // 50%: the bitmap (1 bit per position) wins; 1 pair in a huge range: coo.
  for (const Case& c : {Case{100000, 1000, IndexEncoding::kDelta}, Case{100000, 50000, IndexEncoding::kBitmap},
                        Case{4000000000ull, 1, IndexEncoding::kCoo32}}) {
    for (ValueType vt : kAllValueTypes) {
      const Pairs p =
          c.nnz == 1 ? Pairs{c.count, 0, c.count, {3999999999u}, {1.0f}} : randomPairs(g, c.count, 0, c.count, c.nnz);
      size_t bytes = 0;
      const IndexEncoding got =
          choosePairsEncoding(kIndexEncodingAuto, p.indices.data(), p.indices.size(), 0, c.count, vt, &bytes);
      EXPECT_EQ(got, c.expect) << "count " << c.count << " nnz " << c.nnz;
      size_t smallest = SIZE_MAX;
      for (IndexEncoding e : {IndexEncoding::kCoo32, IndexEncoding::kDelta, IndexEncoding::kBitmap})
        smallest = std::min(smallest, encodedPairsBytes(e, p.indices.data(), p.indices.size(), 0, c.count, vt));
      EXPECT_EQ(bytes, smallest);
      EXPECT_LE(bytes, maxPairsStreamBytes(p.indices.size(), c.count, vt));
      // A forced setting is honoured whatever it costs.
      choosePairsEncoding(kIndexEncodingCoo, p.indices.data(), p.indices.size(), 0, c.count, vt, &bytes);
      EXPECT_EQ(bytes, pairsStreamBytes(p.indices.size(), vt));
    }
  }
}

TEST(Codec, CompactPairsCorruptionIsRejected) {
  auto g = rng(59);
  const ValueType vt = ValueType::kFloat16;
  const Pairs p = randomPairs(g, 3001, 0, 3001, 40);
  const StreamExpect e = expectFor(p, vt, false);
  const size_t valuesEnd = sizeof(StreamHeader) + p.indices.size() * 2;
  auto rejected = [&](std::vector<unsigned char> s, const std::string& what) {
    StreamView v{};
    expectRejected(parseCopy(s, s.size(), e, &v), what);
  };
  {
    const std::vector<unsigned char> good = encodeCompact(p, vt, IndexEncoding::kDelta);
    StreamView v{};
    ASSERT_TRUE(parseCopy(good, good.size(), e, &v).isOk());
    std::vector<unsigned char> s = good;
    for (size_t b = valuesEnd; b < s.size(); ++b) s[b] = 0xff;  // endless varints
    rejected(s, "delta: varints running off the end");
    s = good;
    s[valuesEnd] = 0xff, s[valuesEnd + 1] = 0xff, s[valuesEnd + 2] = 0xff, s[valuesEnd + 3] = 0xff;
    s[valuesEnd + 4] = 0x7f;  // a 35-bit first gap
    rejected(s, "delta: gap over 32 bits");
    s = good;
    s[valuesEnd] = 0xe0,
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(valuesEnd) + 1, 0x7f);  // first gap past the range
    s.resize(alignStream(s.size()), 0);
    rejected(s, "delta: index past the range");
    s = good;
    s.insert(s.end(), 8, 0);
    rejected(s, "delta: 8 extra bytes");
    s = good;
    if (s.size() > valuesEnd + 1 && s.back() == 0) {
      s.back() = 1;
      rejected(s, "delta: non-zero padding");
    }
    s = good;
    s.erase(s.end() - 8, s.end());
    rejected(s, "delta: truncated");
  }
  {
    const std::vector<unsigned char> good = encodeCompact(p, vt, IndexEncoding::kBitmap);
    StreamView v{};
    ASSERT_TRUE(parseCopy(good, good.size(), e, &v).isOk());
    std::vector<unsigned char> s = good;
    s[valuesEnd] ^= 0x01;  // one bit more or less than nnz
    rejected(s, "bitmap: popcount differs from nnz");
    s = good;
    s[valuesEnd + (3001 + 7) / 8 - 1] |= 0x80;  // bit 3007 > range 3001
    rejected(s, "bitmap: bit past the range");
    s = good;
    s.erase(s.end() - 8, s.end());
    rejected(s, "bitmap: truncated");
  }
  {
    std::vector<unsigned char> s = encodeCompact(p, vt, IndexEncoding::kDelta);
    s[offsetof(StreamHeader, indexEncoding)] = 7;
    rejected(s, "unknown index encoding");
  }
}

TEST(Codec, DenseRoundTripEveryValueType) {
  auto g = rng(51);
  for (ValueType vt : kAllValueTypes) {
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(std::string(typeName(vt)) + " " + s.name);
      const Pairs p{s.count, s.begin, s.end, {}, {}};
      const uint64_t len = s.end - s.begin;
      for (int variant = 0; variant < 2; ++variant) {  // 0: random with NaN/Inf, 1: all zero
        std::vector<float> dense = variant ? std::vector<float>(len, 0.0f) : randomNormal(g, len);
        if (!variant) sprinkleNonFinite(g, dense, 0.1);
        std::vector<float> decoded;
        const std::vector<unsigned char> stream = encodeDenseStream(p, dense, vt, &decoded);
        ASSERT_EQ(stream.size(), denseStreamBytes(len, vt));
        ASSERT_EQ(stream.size() % 8, 0u);
        const size_t used = sizeof(StreamHeader) + len * core::wireValueBytes(vt);
        for (size_t b = used; b < stream.size(); ++b) ASSERT_EQ(stream[b], 0) << "padding byte " << b;
        for (uint64_t i = 0; i < len; ++i) ASSERT_TRUE(sameFloat(decoded[i], refRoundToWire(dense[i], vt))) << i;

        StreamView view{};
        const StreamExpect e = expectFor(p, vt, true);
        const Status st = parseStream(stream.data(), stream.size(), e, 0, &view);
        ASSERT_TRUE(st.isOk()) << st.message();
        ASSERT_EQ(view.kind, StreamKind::kDense);
        ASSERT_EQ(view.nnz, len);
        expectViewInside(view, stream, e);
        std::vector<float> acc(s.count + 2, 1.0f), want = acc;
        for (uint64_t i = 0; i < len; ++i) want[s.begin + i] += decoded[i];
        host::accumulateSection(view, acc.data(), 0);
        for (size_t i = 0; i < acc.size(); ++i) ASSERT_TRUE(sameFloat(acc[i], want[i])) << "acc[" << i << "]";
        std::vector<float> out(s.count + 2, 1.0f), wantOut = out;
        for (uint64_t i = 0; i < len; ++i) wantOut[s.begin + i] = 0.0f + decoded[i];
        storeSection(view, out.data(), 0);
        for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(sameFloat(out[i], wantOut[i])) << "out[" << i << "]";
      }
    }
  }
}

TEST(Codec, ErrorStreamCarriesPeerStatus) {
  const Pairs p{100, 0, 100, {}, {}};
  for (int code = spcclUnhandledCudaError; code < spcclNumResults; ++code) {
    std::vector<unsigned char> stream(kErrorStreamBytes, 0xa5);
    ASSERT_EQ(encodeError(stream.data(), infoFor(p, ValueType::kFloat32, StreamKind::kError),
                          static_cast<spcclResult_t>(code)),
              kErrorStreamBytes);
    StreamView view{};
    StreamExpect expect = expectFor(p, ValueType::kFloat32, false);
    // Where data is expected, an error marker is a corrupt stream, never an
    // empty contribution; only split's owner stage accepts one.
    EXPECT_EQ(parseStream(stream.data(), stream.size(), expect, 2, &view).code(), spcclRemoteError);
    expect.allowError = true;
    const Status st = parseStream(stream.data(), stream.size(), expect, 2, &view);
    ASSERT_TRUE(st.isOk()) << st.message();
    EXPECT_EQ(view.kind, StreamKind::kError);
    EXPECT_EQ(view.peerStatus, code);
  }
  // An error stream never reads as success, whatever its status byte says.
  for (int code : {0, static_cast<int>(spcclNumResults), 255}) {
    std::vector<unsigned char> stream(kErrorStreamBytes);
    encodeError(stream.data(), infoFor(p, ValueType::kFloat32, StreamKind::kError), spcclInternalError);
    stream[offsetof(StreamHeader, status)] = static_cast<unsigned char>(code);
    StreamView view{};
    StreamExpect expect = expectFor(p, ValueType::kFloat32, false);
    expect.allowError = true;
    ASSERT_TRUE(parseStream(stream.data(), stream.size(), expect, 2, &view).isOk());
    EXPECT_EQ(view.kind, StreamKind::kError);
    EXPECT_EQ(view.peerStatus, spcclRemoteError) << "status byte " << code;
  }
}

// ---------------------------------------------------------------- descriptors

TEST(Codec, CheckDescriptors) {
  const CallDescriptor base{kStreamMagic,
                            SPCCL_ALGO_ALLGATHER,
                            static_cast<uint8_t>(ValueType::kFloat16),
                            spcclFloat32,
                            spcclSum,
                            9,
                            1000,
                            10};
  for (int ranks : {1, 2, 4}) {
    std::vector<CallDescriptor> all(static_cast<size_t>(ranks), base);
    for (int r = 0; r < ranks; ++r) all[static_cast<size_t>(r)].nnz = static_cast<uint64_t>(r) * 100;  // may differ
    EXPECT_TRUE(checkDescriptors(all.data(), ranks, base).isOk()) << ranks;
  }
  struct Mutation {
    const char* field;
    void (*apply)(CallDescriptor*);
  };
  const Mutation mutations[] = {
      {"magic", [](CallDescriptor* d) { d->magic ^= 1; }},
      {"algorithm", [](CallDescriptor* d) { d->algorithm = SPCCL_ALGO_SPLIT; }},
      {"valueType", [](CallDescriptor* d) { d->valueType = static_cast<uint8_t>(ValueType::kBfloat16); }},
      {"dataType", [](CallDescriptor* d) { d->dataType = spcclFloat16; }},
      {"op", [](CallDescriptor* d) { d->op = spcclAvg; }},
      {"seq", [](CallDescriptor* d) { d->seq += 1; }},
      {"count", [](CallDescriptor* d) { d->count -= 1; }},
      {"nnz>count", [](CallDescriptor* d) { d->nnz = d->count + 1; }},
  };
  for (const Mutation& m : mutations) {
    for (int ranks : {2, 3}) {
      for (int bad = 0; bad < ranks; ++bad) {
        std::vector<CallDescriptor> all(static_cast<size_t>(ranks), base);
        m.apply(&all[static_cast<size_t>(bad)]);
        // Every rank passes its own descriptor as `mine`: all must see the same failure.
        for (int me = 0; me < ranks; ++me) {
          const Status st = checkDescriptors(all.data(), ranks, all[static_cast<size_t>(me)]);
          EXPECT_EQ(st.code(), spcclInvalidUsage) << m.field << " ranks=" << ranks << " bad=" << bad << " me=" << me;
          EXPECT_FALSE(st.message().empty());
        }
      }
    }
  }
}

// ---------------------------------------------------------------- rejections

struct Corpus {
  std::string name;
  std::vector<unsigned char> stream;
  StreamExpect expect;
};

// Valid streams of each kind and value type, the seeds of every corruption below.
std::vector<Corpus> validStreams() {
  auto g = rng(52);
  std::vector<Corpus> c;
  for (ValueType vt : kAllValueTypes) {
    const Pairs p = randomPairs(g, 1000, 250, 500, 23);  // odd nnz: fp16/bf16 streams carry padding
    c.push_back({std::string("pairs_") + typeName(vt), encodePairsStream(p, vt), expectFor(p, vt, false)});
    const Pairs one = randomPairs(g, 1, 0, 1, 1);
    c.push_back({std::string("pairs_count1_") + typeName(vt), encodePairsStream(one, vt), expectFor(one, vt, false)});
    const Pairs d{1000, 250, 500, {}, {}};
    c.push_back(
        {std::string("dense_") + typeName(vt), encodeDenseStream(d, randomNormal(g, 250), vt), expectFor(d, vt, true)});
  }
  return c;
}

TEST(CodecReject, ValidCorpusParses) {
  for (const Corpus& c : validStreams()) {
    StreamView view{};
    const Status st = parseCopy(c.stream, c.stream.size(), c.expect, &view);
    EXPECT_TRUE(st.isOk()) << c.name << ": " << st.message();
  }
}

TEST(CodecReject, EveryTruncation) {
  for (const Corpus& c : validStreams()) {
    for (size_t len = 0; len < c.stream.size(); ++len) {
      StreamView view{};
      expectRejected(parseCopy(c.stream, len, c.expect, &view), c.name + " truncated to " + std::to_string(len));
    }
    // Longer than its content says.
    std::vector<unsigned char> longer = c.stream;
    longer.resize(c.stream.size() + 8, 0);
    StreamView view{};
    expectRejected(parseCopy(longer, longer.size(), c.expect, &view), c.name + " with 8 trailing bytes");
  }
  // A null pointer with a plausible size.
  StreamView view{};
  const StreamExpect e{10, 0, 10, kSeq, kAlgo, ValueType::kFloat32, false};
  expectRejected(parseStream(nullptr, 64, e, 0, &view), "null data");
}

struct HeaderField {
  const char* name;
  size_t offset, size;
  bool checked;  // false: reserved/unused in this kind, ignored by the reader
};

constexpr HeaderField kHeaderFields[] = {
    {"magic", offsetof(StreamHeader, magic), 4, true},
    {"version", offsetof(StreamHeader, version), 2, true},
    {"indexEncoding", offsetof(StreamHeader, indexEncoding), 1, true},
    {"valueType", offsetof(StreamHeader, valueType), 1, true},
    {"kind", offsetof(StreamHeader, kind), 1, true},
    {"algorithm", offsetof(StreamHeader, algorithm), 1, true},
    {"status", offsetof(StreamHeader, status), 1, false},
    {"reserved0", offsetof(StreamHeader, reserved0), 1, false},
    {"reserved1", offsetof(StreamHeader, reserved1), 4, false},
    {"denseCount", offsetof(StreamHeader, denseCount), 8, true},
    {"rangeBegin", offsetof(StreamHeader, rangeBegin), 8, true},
    {"rangeEnd", offsetof(StreamHeader, rangeEnd), 8, true},
    {"nnz", offsetof(StreamHeader, nnz), 8, true},
    {"seq", offsetof(StreamHeader, seq), 8, true},
};

TEST(CodecReject, ByteFlippedInEveryHeaderField) {
  size_t covered = 0;
  for (const HeaderField& f : kHeaderFields) covered += f.size;
  ASSERT_EQ(covered, sizeof(StreamHeader)) << "a header field is missing from this test";

  for (const Corpus& c : validStreams()) {
    const bool dense = c.expect.allowDense;
    for (const HeaderField& f : kHeaderFields) {
      // A dense stream has no index section: its nnz (written as 0) and index
      // encoding are not read, like the reserved bytes of every kind.
      const bool checked =
          f.checked && !(dense && (std::string(f.name) == "nnz" || std::string(f.name) == "indexEncoding"));
      for (size_t b = f.offset; b < f.offset + f.size; ++b) {
        for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
          std::vector<unsigned char> s = c.stream;
          s[b] ^= static_cast<unsigned char>(mask);
          StreamView view{};
          std::vector<unsigned char> copy = s;
          const Status st = parseStream(copy.data(), copy.size(), c.expect, 1, &view);
          const std::string what =
              c.name + " field " + f.name + " byte " + std::to_string(b - f.offset) + " ^ " + std::to_string(mask);
          if (std::string(f.name) == "kind" && st.isOk()) {
            // The one flip a one-byte kind cannot detect: it reads as the
            // peer's error marker, which fails the call all the same.
            EXPECT_EQ(view.kind, StreamKind::kError) << what;
          } else if (checked) {
            expectRejected(st, what);
          } else if (st.isOk()) {
            // Unused by this kind: ignoring it is fine, as long as the view is sound.
            expectViewInside(view, copy, c.expect);
          }
          if (std::string(f.name) == "seq" || std::string(f.name) == "denseCount") {
            EXPECT_EQ(st.code(), spcclInvalidUsage) << what;
          }
        }
      }
    }
  }
}

// A pairs stream built field by field, to say exactly what is wrong with it.
struct RawStream {
  StreamHeader h{};
  std::vector<uint32_t> indices;
  std::vector<float> values;
  size_t extraBytes = 0;
  size_t truncateBy = 0;

  std::vector<unsigned char> bytes() const {
    const size_t used = sizeof h + indices.size() * 4 + values.size() * 4;
    std::vector<unsigned char> s(alignStream(used) + extraBytes, 0);
    std::memcpy(s.data(), &h, sizeof h);
    std::memcpy(s.data() + sizeof h, indices.data(), indices.size() * 4);
    std::memcpy(s.data() + sizeof h + indices.size() * 4, values.data(), values.size() * 4);
    s.resize(s.size() - truncateBy);
    return s;
  }
};

RawStream validRaw() {
  RawStream r;
  r.h.magic = kStreamMagic;
  r.h.version = kStreamVersion;
  r.h.indexEncoding = static_cast<uint8_t>(IndexEncoding::kCoo32);
  r.h.valueType = static_cast<uint8_t>(ValueType::kFloat32);
  r.h.kind = static_cast<uint8_t>(StreamKind::kPairs);
  r.h.algorithm = kAlgo;
  r.h.denseCount = 100;
  r.h.rangeBegin = 20;
  r.h.rangeEnd = 40;
  r.h.seq = kSeq;
  r.indices = {20, 25, 30, 39};
  r.values = {1.0f, -2.0f, kNaN, 4.0f};
  r.h.nnz = r.indices.size();
  return r;
}

const StreamExpect kRawExpect{100, 20, 40, kSeq, kAlgo, ValueType::kFloat32, false};

Status parseRaw(const RawStream& r, const StreamExpect& e = kRawExpect) {
  StreamView view{};
  const std::vector<unsigned char> s = r.bytes();
  return parseCopy(s, s.size(), e, &view);
}

TEST(CodecReject, HandBuiltStreams) {
  {
    const Status st = parseRaw(validRaw());
    ASSERT_TRUE(st.isOk()) << "the hand-built baseline must parse: " << st.message();
  }
  struct Bad {
    const char* what;
    void (*apply)(RawStream*);
    spcclResult_t code;  // spcclSuccess: any error code
  };
  const Bad bads[] = {
      {"nnz one more than the pairs present", [](RawStream* r) { r->h.nnz += 1; }, spcclSuccess},
      {"nnz one less than the pairs present", [](RawStream* r) { r->h.nnz -= 1; }, spcclSuccess},
      {"nnz larger than the range (size consistent)",
       [](RawStream* r) {
         r->indices.clear();
         r->values.clear();
         for (uint32_t i = 0; i < 21; ++i) {
           r->indices.push_back(20 + std::min<uint32_t>(i, 19));
           r->values.push_back(1.0f);
         }
         r->h.nnz = 21;
       },
       spcclSuccess},
      {"nnz 2^64-1", [](RawStream* r) { r->h.nnz = ~uint64_t{0}; }, spcclSuccess},
      {"nnz 2^61 in a header-only stream (nnz*8 wraps to 0)",
       [](RawStream* r) {
         r->h.nnz = uint64_t{1} << 61;
         r->indices.clear();
         r->values.clear();
       },
       spcclSuccess},
      {"nnz 2^62 + 4 (nnz*8 wraps to the true size)", [](RawStream* r) { r->h.nnz = (uint64_t{1} << 62) + 4; },
       spcclSuccess},
      {"index below range", [](RawStream* r) { r->indices[0] = 19; }, spcclSuccess},
      {"index 0 below a non-zero range", [](RawStream* r) { r->indices[0] = 0; }, spcclSuccess},
      {"index at rangeEnd", [](RawStream* r) { r->indices[3] = 40; }, spcclSuccess},
      {"index 0xffffffff", [](RawStream* r) { r->indices[3] = 0xffffffffu; }, spcclSuccess},
      {"index beyond denseCount", [](RawStream* r) { r->indices[3] = 100; }, spcclSuccess},
      {"duplicate index", [](RawStream* r) { r->indices[2] = r->indices[1]; }, spcclSuccess},
      {"duplicate first index", [](RawStream* r) { r->indices[1] = r->indices[0]; }, spcclSuccess},
      {"decreasing index", [](RawStream* r) { std::swap(r->indices[1], r->indices[2]); }, spcclSuccess},
      {"decreasing at the end", [](RawStream* r) { r->indices[3] = 21; }, spcclSuccess},
      {"wrong seq (behind)", [](RawStream* r) { r->h.seq = kSeq - 1; }, spcclInvalidUsage},
      {"wrong seq (ahead)", [](RawStream* r) { r->h.seq = kSeq + 1000; }, spcclInvalidUsage},
      {"wrong denseCount", [](RawStream* r) { r->h.denseCount = 99; }, spcclInvalidUsage},
      {"wrong algorithm", [](RawStream* r) { r->h.algorithm = SPCCL_ALGO_ALLGATHER; }, spcclSuccess},
      {"wrong value type (known)", [](RawStream* r) { r->h.valueType = static_cast<uint8_t>(ValueType::kFloat16); },
       spcclSuccess},
      {"unknown value type (fp64)", [](RawStream* r) { r->h.valueType = spcclFloat64; }, spcclSuccess},
      {"wrong rangeBegin", [](RawStream* r) { r->h.rangeBegin = 0; }, spcclSuccess},
      {"wrong rangeEnd", [](RawStream* r) { r->h.rangeEnd = 100; }, spcclSuccess},
      {"inverted range", [](RawStream* r) { std::swap(r->h.rangeBegin, r->h.rangeEnd); }, spcclSuccess},
      {"dense kind where pairs are expected",
       [](RawStream* r) { r->h.kind = static_cast<uint8_t>(StreamKind::kDense); }, spcclSuccess},
      {"unknown kind", [](RawStream* r) { r->h.kind = 0; }, spcclSuccess},
      {"unknown index encoding", [](RawStream* r) { r->h.indexEncoding = 2; }, spcclSuccess},
      {"bad magic", [](RawStream* r) { r->h.magic = 0x4c435054u; }, spcclSuccess},
      {"newer version", [](RawStream* r) { r->h.version = kStreamVersion + 1; }, spcclSuccess},
      {"version 1 (before the fp8 scale field)", [](RawStream* r) { r->h.version = 1; }, spcclSuccess},
      {"fp32 stream with a non-zero scale byte", [](RawStream* r) { r->h.status = 3; }, spcclSuccess},
      {"8 extra bytes", [](RawStream* r) { r->extraBytes = 8; }, spcclSuccess},
      {"unpadded (4 bytes short)", [](RawStream* r) { r->truncateBy = 4; }, spcclSuccess},
  };
  for (const Bad& b : bads) {
    RawStream r = validRaw();
    b.apply(&r);
    const Status st = parseRaw(r);
    expectRejected(st, b.what);
    if (b.code != spcclSuccess) {
      EXPECT_EQ(st.code(), b.code) << b.what << ": " << st.message();
    }
  }
}

TEST(CodecReject, DenseStreams) {
  const Pairs d{1000, 250, 500, {}, {}};
  auto g = rng(53);
  for (ValueType vt : kAllValueTypes) {
    const std::vector<unsigned char> s = encodeDenseStream(d, randomNormal(g, 250), vt);
    StreamView view{};
    expectRejected(parseCopy(s, s.size(), expectFor(d, vt, false), &view),
                   std::string("dense stream where pairs are expected, ") + typeName(vt));
    // A dense stream for a different range length, with the expected range in its header.
    const Pairs shorter{1000, 250, 499, {}, {}};
    std::vector<unsigned char> wrongLen = encodeDenseStream(shorter, randomNormal(g, 249), vt);
    StreamHeader h;
    std::memcpy(&h, wrongLen.data(), sizeof h);
    h.rangeEnd = 500;
    std::memcpy(wrongLen.data(), &h, sizeof h);
    if (wrongLen.size() != s.size())
      expectRejected(parseCopy(wrongLen, wrongLen.size(), expectFor(d, vt, true), &view),
                     std::string("dense stream one element short, ") + typeName(vt));
    // Values of another wire type than expected.
    for (ValueType other : kAllValueTypes) {
      if (other == vt) continue;
      const std::vector<unsigned char> o = encodeDenseStream(d, randomNormal(g, 250), other);
      expectRejected(parseCopy(o, o.size(), expectFor(d, vt, true), &view),
                     std::string("dense ") + typeName(other) + " where " + typeName(vt) + " is expected");
    }
  }
}

// ---------------------------------------------------------------- fp8 scale exponent

// fp8 streams carry their scale in the header; receivers decode code * 2^s.
TEST(CodecFp8, ScaledPairsAndDenseRoundTrip) {
  auto g = rng(54);
  constexpr ValueType vt = ValueType::kFloat8e4m3;
  for (int s : {core::kFp8MinScaleExp, -20, -1, 0, 5, core::kFp8MaxScaleExp}) {
    SCOPED_TRACE("scale " + std::to_string(s));
    Pairs p = randomPairs(g, 5000, 1000, 4000, 300);
    for (float& v : p.values) v = std::ldexp(v, s);  // values near the scale's range (specials stay)
    for (IndexEncoding enc : {IndexEncoding::kCoo32, IndexEncoding::kDelta, IndexEncoding::kBitmap}) {
      std::vector<unsigned char> w(p.values.size());
      for (size_t j = 0; j < p.values.size(); ++j) core::storeWireValue(w.data(), j, p.values[j], vt, s);
      StreamInfo info = infoFor(p, vt, StreamKind::kPairs);
      info.encoding = enc;
      info.scaleExp = s;
      std::vector<unsigned char> buf(encodedPairsBytes(enc, p.indices.data(), p.indices.size(), p.begin, p.end, vt));
      ASSERT_EQ(encodePairs(buf.data(), info, p.indices.data(), w.data()), buf.size());
      StreamHeader h;
      std::memcpy(&h, buf.data(), sizeof h);
      EXPECT_EQ(static_cast<int>(static_cast<int8_t>(h.status)), s);
      StreamView view{};
      const StreamExpect e = expectFor(p, vt, false);
      const Status st = parseStream(buf.data(), buf.size(), e, 1, &view);
      ASSERT_TRUE(st.isOk()) << st.message();
      EXPECT_EQ(view.scaleExp, s);
      expectViewInside(view, buf, e);
      std::vector<float> acc(p.count, 0.0f), want(p.count, 0.0f);
      for (size_t j = 0; j < p.indices.size(); ++j) want[p.indices[j]] += refRoundToWire(p.values[j], vt, s);
      host::accumulateSection(view, acc.data(), 0);
      for (size_t i = 0; i < acc.size(); ++i) ASSERT_TRUE(sameFloat(acc[i], want[i])) << "acc[" << i << "]";
    }
    // Dense, with what receivers decode.
    const Pairs d{5000, 1000, 4000, {}, {}};
    std::vector<float> dense = randomNormal(g, 3000, std::ldexp(1.0f, s));
    sprinkleNonFinite(g, dense, 0.05);
    StreamInfo info = infoFor(d, vt, StreamKind::kDense);
    info.scaleExp = s;
    std::vector<unsigned char> buf(denseStreamBytes(3000, vt));
    std::vector<float> decoded(3000);
    ASSERT_EQ(encodeDense(buf.data(), info, dense.data(), decoded.data()), buf.size());
    StreamView view{};
    ASSERT_TRUE(parseStream(buf.data(), buf.size(), expectFor(d, vt, true), 0, &view).isOk());
    EXPECT_EQ(view.scaleExp, s);
    std::vector<float> acc(5000, 0.0f);
    host::accumulateSection(view, acc.data(), 0);
    for (size_t i = 0; i < 3000; ++i) {
      ASSERT_TRUE(sameFloat(decoded[i], refRoundToWire(dense[i], vt, s))) << i;
      ASSERT_TRUE(sameFloat(acc[1000 + i], 0.0f + decoded[i])) << i;
    }
  }
}

// Every scale byte outside [kFp8MinScaleExp, kFp8MaxScaleExp] is rejected,
// every one inside parses (the values are then read at that scale).
TEST(CodecFp8, ScaleByteIsBoundsChecked) {
  auto g = rng(55);
  constexpr ValueType vt = ValueType::kFloat8e4m3;
  const Pairs p = randomPairs(g, 1000, 0, 1000, 17);
  const Pairs d{1000, 0, 1000, {}, {}};
  const std::vector<unsigned char> pairs = encodePairsStream(p, vt);
  const std::vector<unsigned char> dense = encodeDenseStream(d, randomNormal(g, 1000), vt);
  for (int b = 0; b < 256; ++b) {
    const int s = static_cast<int8_t>(b);
    const bool valid = s >= core::kFp8MinScaleExp && s <= core::kFp8MaxScaleExp;
    for (const auto* src : {&pairs, &dense}) {
      std::vector<unsigned char> copy = *src;
      copy[offsetof(StreamHeader, status)] = static_cast<unsigned char>(b);
      StreamView view{};
      const Status st = parseCopy(copy, copy.size(), expectFor(p, vt, src == &dense), &view);
      if (valid) {
        EXPECT_TRUE(st.isOk()) << "scale " << s << ": " << st.message();
      } else {
        expectRejected(st, "scale " + std::to_string(s));
        EXPECT_NE(st.message().find("scale exponent"), std::string::npos) << st.message();
      }
    }
  }
}

// Row streams with fp8 values: one scale per stream from its largest finite
// |value|, in the header's status byte, bounds-checked by the parsers.
TEST(CodecFp8, RowsAndValuesStreamsCarryTheirScale) {
  constexpr ValueType vt = ValueType::kFloat8e4m3;
  const uint64_t rows = 3, rowLen = 40, keep = 2, nnz = rows * keep;
  const std::vector<uint32_t> counts(rows, keep);
  const std::vector<uint32_t> positions = {1, 7, 0, 39, 5, 6};
  const std::vector<float> values = {1e-3f, -3.0e-5f, 2.5e-3f, kInf, -kNaN, 7e-9f};
  const int s = core::fp8ScaleForMax(core::magnitudeKey(2.5e-3f));
  std::vector<unsigned char> r(rowsStreamBytes(rows, rowLen, nnz, false, vt));
  ASSERT_EQ(encodeRows(r.data(), rows, rowLen, keep, counts.data(), positions.data(), values.data(),
                       ValueType::kFloat32, nnz, vt, kSeq),
            r.size());
  std::vector<unsigned char> v(valuesStreamBytes(nnz, vt));
  ASSERT_EQ(encodeValues(v.data(), values.data(), ValueType::kFloat32, nnz, rows, rowLen, vt, kSeq), v.size());
  RowsView view;
  ASSERT_TRUE(parseRows(r.data(), r.size(), rows, rowLen, vt, kSeq, 1, &view).isOk());
  EXPECT_EQ(view.scaleExp, s);
  const void* vals = nullptr;
  int vs = 99;
  ASSERT_TRUE(parseValues(v.data(), v.size(), nnz, vt, kSeq, 1, &vals, &vs).isOk());
  EXPECT_EQ(vs, s);
  for (uint64_t j = 0; j < nnz; ++j) {
    EXPECT_TRUE(sameFloat(core::loadWireValue(view.values, j, vt, view.scaleExp), refRoundToWire(values[j], vt, s)))
        << j;
    EXPECT_TRUE(sameFloat(core::loadWireValue(vals, j, vt, vs), refRoundToWire(values[j], vt, s))) << j;
  }
  // The largest |value| sets the scale: it is not saturated, and within e4m3's 2^-4.
  EXPECT_LE(std::fabs(core::loadWireValue(view.values, 2, vt, s) - 2.5e-3f), std::ldexp(2.5e-3f, -4));
  // Every scale byte: inside the range parses, outside is rejected.
  for (int b = 0; b < 256; ++b) {
    const int e = static_cast<int8_t>(b);
    const bool valid = e >= core::kFp8MinScaleExp && e <= core::kFp8MaxScaleExp;
    std::vector<unsigned char> r2 = r, v2 = v;
    r2[offsetof(RowsHeader, status)] = static_cast<unsigned char>(b);
    v2[offsetof(RowsHeader, status)] = static_cast<unsigned char>(b);
    RowsView rv;
    const Status rs = parseRows(r2.data(), r2.size(), rows, rowLen, vt, kSeq, 1, &rv);
    const Status vsSt = parseValues(v2.data(), v2.size(), nnz, vt, kSeq, 1, &vals);
    EXPECT_EQ(rs.isOk(), valid) << "rows scale " << e << ": " << rs.message();
    EXPECT_EQ(vsSt.isOk(), valid) << "values scale " << e << ": " << vsSt.message();
  }
  // Other value types keep the status byte zero.
  std::vector<unsigned char> f(rowsStreamBytes(rows, rowLen, nnz, false, ValueType::kFloat16));
  encodeRows(f.data(), rows, rowLen, keep, counts.data(), positions.data(), values.data(), ValueType::kFloat32, nnz,
             ValueType::kFloat16, kSeq);
  f[offsetof(RowsHeader, status)] = 1;
  EXPECT_FALSE(parseRows(f.data(), f.size(), rows, rowLen, ValueType::kFloat16, kSeq, 1, &view).isOk());
}

// Rows streams from values already in the wire type (what the alltoall stages)
// are the same bytes as from fp32 values converted; parseRows appends the
// positions it validates, for each index width, after what the vector held.
TEST(Codec, RowsFromStagedValuesAndPositionsOut) {
  for (const uint64_t rowLen : {40ull, 300ull, 70000ull}) {  // 1-, 2- and 4-byte positions
    const uint64_t rows = 3, nnz = 7;
    const std::vector<uint32_t> counts = {2, 4, 1};  // per-row counts (keepPerRow 0)
    const std::vector<uint32_t> positions = {1, static_cast<uint32_t>(rowLen - 1), 0, 5, 6, 39, 17};
    const std::vector<float> values = {1.5f, -2.25f, 0.0f, kInf, -kNaN, 6.0e-5f, -65504.0f};
    for (const ValueType vt : {ValueType::kFloat32, ValueType::kFloat16, ValueType::kBfloat16}) {
      SCOPED_TRACE(testing::Message() << "rowLen " << rowLen << ", type " << static_cast<int>(vt));
      std::vector<unsigned char> staged(nnz * core::wireValueBytes(vt));
      for (uint64_t j = 0; j < nnz; ++j) core::storeWireValue(staged.data(), j, values[j], vt);
      const size_t bytes = rowsStreamBytes(rows, rowLen, nnz, true, vt);
      std::vector<unsigned char> fromFloats(bytes, 0xa5), fromStaged(bytes, 0x5a);
      ASSERT_EQ(encodeRows(fromFloats.data(), rows, rowLen, 0, counts.data(), positions.data(), values.data(),
                           ValueType::kFloat32, nnz, vt, kSeq),
                bytes);
      ASSERT_EQ(encodeRows(fromStaged.data(), rows, rowLen, 0, counts.data(), positions.data(), staged.data(), vt, nnz,
                           vt, kSeq),
                bytes);
      EXPECT_EQ(fromFloats, fromStaged);
      std::vector<unsigned char> valuesFromFloats(valuesStreamBytes(nnz, vt)),
          valuesFromStaged(valuesFromFloats.size());
      encodeValues(valuesFromFloats.data(), values.data(), ValueType::kFloat32, nnz, rows, rowLen, vt, kSeq);
      encodeValues(valuesFromStaged.data(), staged.data(), vt, nnz, rows, rowLen, vt, kSeq);
      EXPECT_EQ(valuesFromFloats, valuesFromStaged);

      RowsView view;
      std::vector<uint32_t> kept = {77, 88};
      ASSERT_TRUE(parseRows(fromStaged.data(), bytes, rows, rowLen, vt, kSeq, 1, &view, &kept).isOk());
      std::vector<uint32_t> want = {77, 88};
      want.insert(want.end(), positions.begin(), positions.end());
      EXPECT_EQ(kept, want);

      // A stream refused at its positions (row 1's second equals its first)
      // appends nothing.
      std::vector<uint32_t> repeated = positions;
      repeated[3] = repeated[2];
      std::vector<unsigned char> bad(bytes);
      ASSERT_EQ(
          encodeRows(bad.data(), rows, rowLen, 0, counts.data(), repeated.data(), staged.data(), vt, nnz, vt, kSeq),
          bytes);
      kept = {77, 88};
      EXPECT_EQ(parseRows(bad.data(), bytes, rows, rowLen, vt, kSeq, 1, &view, &kept).code(), spcclRemoteError);
      EXPECT_EQ(kept, (std::vector<uint32_t>{77, 88}));
    }
  }
}

}  // namespace
}  // namespace spccl::test
