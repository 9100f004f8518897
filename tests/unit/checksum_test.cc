// SPCCL_CHECKSUM's pieces: CRC32C against published
// vectors, the table and SSE4.2 paths against each other, and sealed streams
// of every kind: accepted intact, rejected (spcclRemoteError naming the CRC)
// after any single-bit flip, and the flag without a CRC, or a CRC without the
// flag, rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "kernels/core/crc32c.h"

namespace spccl {
namespace {

using core::ValueType;

// RFC 3720 (iSCSI) appendix B.4 and the common check value.
TEST(Crc32c, KnownVectors) {
  const char* digits = "123456789";
  EXPECT_EQ(crc32c(digits, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  std::vector<unsigned char> b(32, 0);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x8A9136AAu);
  std::fill(b.begin(), b.end(), 0xFF);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(b.data(), b.size()), 0x113FDB5Cu);
  // Both implementations on their own.
  EXPECT_EQ(crc32cSoftware(0, digits, 9), 0xE3069283u);
  if (crc32cHardwareAvailable()) {
    EXPECT_EQ(crc32cHardware(0, digits, 9), 0xE3069283u);
  }
}

TEST(Crc32c, PathsAgreeOnEveryLengthAndAlignment) {
  std::mt19937_64 g(7);
  std::vector<unsigned char> buf(4096 + 16);
  for (auto& x : buf) x = static_cast<unsigned char>(g());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n :
         {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64}, size_t{1000}, size_t{4096}}) {
      const uint32_t sw = crc32cSoftware(0, buf.data() + offset, n);
      // Split anywhere: extending gives the CRC of the whole.
      const size_t cut = n / 3;
      EXPECT_EQ(crc32cExtend(crc32cExtend(0, buf.data() + offset, cut), buf.data() + offset + cut, n - cut), sw)
          << "n " << n << " offset " << offset;
      if (crc32cHardwareAvailable()) {
        EXPECT_EQ(crc32cHardware(0, buf.data() + offset, n), sw) << "n " << n;
      }
    }
  }
  if (!crc32cHardwareAvailable()) GTEST_SKIP() << "no SSE4.2 here: only the table path was checked";
}

// The arithmetic the device kernel joins pieces with (kernels/core/crc32c.h):
// the raw CRCs of pieces of any lengths, joined in order from the ~0
// register, give the CRC32C of the whole; and the table entry is the host
// table's first column.
TEST(Crc32c, PiecesJoinToTheWhole) {
  std::mt19937_64 g(11);
  std::vector<unsigned char> buf(70000);
  for (auto& x : buf) x = static_cast<unsigned char>(g());
  // A piece's raw CRC: register from 0, no final xor (crc32cExtend starts
  // from ~crc and ends with ~, so ~crc32cExtend(~0u, ...) is the raw one).
  const auto raw = [&](size_t at, size_t n) { return ~crc32cExtend(~0u, buf.data() + at, n); };
  for (size_t piece : {size_t{1}, size_t{7}, size_t{1024}, size_t{4099}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1023}, size_t{1024}, size_t{70000}}) {
      uint32_t reg = ~0u;
      for (size_t at = 0; at < n; at += piece) {
        const size_t len = std::min(piece, n - at);
        reg = core::crc32cJoin(reg, raw(at, len), len);
      }
      EXPECT_EQ(~reg, crc32c(buf.data(), n)) << "piece " << piece << " n " << n;
    }
  }
  EXPECT_EQ(core::crc32cTableEntry(1), 0xF26B8303u);  // the reflected polynomial's table
  EXPECT_EQ(core::crc32cXPow8n(0), 1u << 31);         // x^0
  EXPECT_EQ(core::crc32cMultModP(0, 0x12345678u), 0u);
}

// One stream of each kind, and how its receiver parses it.
struct Case {
  std::string name;
  std::vector<unsigned char> bytes;
  std::function<Status(const std::vector<unsigned char>&)> parse;
};

std::vector<Case> streams() {
  std::vector<Case> out;
  constexpr uint64_t kSeq = 42;
  {
    std::vector<uint32_t> idx = {3, 17, 99};
    std::vector<float> vals = {1.5f, -2.0f, 1e-3f};
    const StreamInfo info{100, 0, 100, 3, kSeq, 2, ValueType::kFloat32, StreamKind::kPairs};
    std::vector<unsigned char> b(pairsStreamBytes(3, ValueType::kFloat32));
    encodePairs(b.data(), info, idx.data(), vals.data());
    const StreamExpect e{100, 0, 100, kSeq, 2, ValueType::kFloat32, false};
    out.push_back({"pairs", b, [e](const std::vector<unsigned char>& s) {
                     StreamView v;
                     return parseStream(s.data(), s.size(), e, 1, &v);
                   }});
  }
  {
    std::vector<float> vals(10, 0.25f);
    const StreamInfo info{20, 10, 20, 0, kSeq, 3, ValueType::kFloat16, StreamKind::kDense};
    std::vector<unsigned char> b(denseStreamBytes(10, ValueType::kFloat16));
    encodeDense(b.data(), info, vals.data(), nullptr);
    const StreamExpect e{20, 10, 20, kSeq, 3, ValueType::kFloat16, true};
    out.push_back({"dense", b, [e](const std::vector<unsigned char>& s) {
                     StreamView v;
                     return parseStream(s.data(), s.size(), e, 1, &v);
                   }});
  }
  {
    const StreamInfo info{20, 10, 20, 0, kSeq, 3, ValueType::kFloat32, StreamKind::kError};
    std::vector<unsigned char> b(kErrorStreamBytes);
    encodeError(b.data(), info, spcclRemoteError);
    StreamExpect e{20, 10, 20, kSeq, 3, ValueType::kFloat32, true, true};
    out.push_back({"error", b, [e](const std::vector<unsigned char>& s) {
                     StreamView v;
                     return parseStream(s.data(), s.size(), e, 1, &v);
                   }});
  }
  {
    const uint64_t rows = 2, rowLen = 8;
    std::vector<uint32_t> counts = {2, 2}, pos = {1, 5, 0, 7};
    std::vector<float> vals = {1, 2, 3, 4};
    std::vector<unsigned char> b(rowsStreamBytes(rows, rowLen, 4, false, ValueType::kBfloat16));
    encodeRows(b.data(), rows, rowLen, 2, counts.data(), pos.data(), vals.data(), ValueType::kFloat32, 4,
               ValueType::kBfloat16, kSeq);
    out.push_back({"rows", b, [](const std::vector<unsigned char>& s) {
                     RowsView v;
                     return parseRows(s.data(), s.size(), 2, 8, ValueType::kBfloat16, kSeq, 1, &v);
                   }});
  }
  {
    std::vector<float> vals = {1, 2, 3};
    std::vector<unsigned char> b(valuesStreamBytes(3, ValueType::kFloat32));
    encodeValues(b.data(), vals.data(), ValueType::kFloat32, 3, 1, 8, ValueType::kFloat32, kSeq);
    out.push_back({"values", b, [](const std::vector<unsigned char>& s) {
                     const void* v = nullptr;
                     return parseValues(s.data(), s.size(), 3, ValueType::kFloat32, kSeq, 1, &v);
                   }});
  }
  {
    std::vector<int64_t> ids = {-5, 9};
    std::vector<double> rows = {1, 2, 3, 4, 5, 6};
    std::vector<unsigned char> b(idRowsStreamBytes(2, 3, 8));
    encodeIdRows(b.data(), ids.data(), rows.data(), 2, 3, 8, kSeq);
    out.push_back({"idrows", b, [](const std::vector<unsigned char>& s) {
                     IdRowsView v;
                     return parseIdRows(s.data(), s.size(), 3, 8, kSeq, 1, &v);
                   }});
  }
  return out;
}

TEST(Checksum, SealedStreamsParseAndEveryBitFlipIsCaught) {
  for (const Case& c : streams()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(c.parse(c.bytes).isOk()) << "the unsealed stream must parse";
    std::vector<unsigned char> sealed = c.bytes;
    Integrity on{true, 0};
    on.seal(sealed.data(), sealed.size());
    EXPECT_NE(sealed[kFlagsOffset] & kChecksumFlag, 0);
    const Status ok = c.parse(sealed);
    ASSERT_TRUE(ok.isOk()) << ok.message();
    // Every single-bit flip anywhere in the stream (header, payload, padding).
    size_t caught = 0, total = 0;
    for (size_t byte = 0; byte < sealed.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<unsigned char> bad = sealed;
        bad[byte] ^= static_cast<unsigned char>(1u << bit);
        const Status st = c.parse(bad);
        ++total;
        if (!st.isOk()) ++caught;
        // A flip of the flag itself leaves a CRC where zeros must be: rejected
        // too, though not as a CRC failure.
        if (!(byte == kFlagsOffset && bit == 0)) {
          ASSERT_EQ(st.code(), spcclRemoteError) << "byte " << byte << " bit " << bit << ": " << st.message();
          ASSERT_NE(st.message().find("CRC32C"), std::string::npos) << st.message();
        }
      }
    }
    EXPECT_EQ(caught, total);
  }
}

TEST(Checksum, FlagAndCrcMustGoTogether) {
  for (const Case& c : streams()) {
    SCOPED_TRACE(c.name);
    std::vector<unsigned char> s = c.bytes;
    s[kFlagsOffset] |= kChecksumFlag;  // flag, but the CRC field is zero
    EXPECT_EQ(c.parse(s).code(), spcclRemoteError);
    s = c.bytes;
    const uint32_t crc = 0x12345678u;  // a CRC, but no flag: a non-zero reserved field
    std::memcpy(s.data() + kCrcOffset, &crc, 4);
    EXPECT_EQ(c.parse(s).code(), spcclRemoteError);
  }
}

TEST(Checksum, TestHookFlipsOneBitAfterSealing) {
  std::vector<unsigned char> s = streams()[0].bytes;
  std::vector<unsigned char> clean = s;
  Integrity hook{true, 1};
  hook.seal(s.data(), s.size());
  Integrity plain{true, 0};
  plain.seal(clean.data(), clean.size());
  size_t differingBits = 0;
  for (size_t i = 0; i < s.size(); ++i) differingBits += static_cast<size_t>(__builtin_popcount(s[i] ^ clean[i]));
  EXPECT_EQ(differingBits, 1u);
  EXPECT_EQ(hook.corruptLeft, 0u);
  EXPECT_EQ(streams()[0].parse(s).code(), spcclRemoteError);
  // The budget is spent: the next stream is intact.
  std::vector<unsigned char> next = streams()[0].bytes;
  hook.seal(next.data(), next.size());
  EXPECT_TRUE(streams()[0].parse(next).isOk());
}

}  // namespace
}  // namespace spccl
