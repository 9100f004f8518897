// Shared by the libFuzzer targets and the seed generator: how a fuzz input is
// split into the receiver's expectation (a fixed-size prefix) and the stream
// bytes (the rest), and the checks a target makes on what a decoder accepted.
//
// Every input is [prefix][stream]. The prefix is read with the same
// functions by make_seeds.cc (to write it) and by the targets (to read it),
// and every field is reduced into the range a real receiver could expect, so
// any prefix is a plausible receiver and any stream a possible peer message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "kernels/core/elementwise.h"
#include "codec/codec.h"
#include "collectives/agreement.h"

namespace spccl::fuzz {

// A violated invariant is a finding: print it and abort, which libFuzzer
// reports as a crash and saves the input.
#define SPCCL_FUZZ_CHECK(cond)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

// Largest dense block a target allocates to consume a view (elements).
constexpr uint64_t kMaxElements = uint64_t{1} << 20;

inline core::ValueType valueTypeOf(uint8_t selector) {
  switch (selector % 4) {
    case 0:
      return core::ValueType::kFloat32;
    case 1:
      return core::ValueType::kFloat16;
    case 2:
      return core::ValueType::kBfloat16;
    default:
      return core::ValueType::kFloat8e4m3;
  }
}
inline uint8_t valueTypeSelector(core::ValueType vt) {
  return vt == core::ValueType::kFloat32    ? 0
         : vt == core::ValueType::kFloat16  ? 1
         : vt == core::ValueType::kBfloat16 ? 2
                                            : 3;
}

template <typename T>
T loadLE(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void storeLE(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

// The stream part of an input, copied into its own heap block of exactly its
// size: 16-byte aligned as a receive buffer is (streams start at multiples of
// 8), and a read one byte past the end is an AddressSanitizer report.
class StreamCopy {
 public:
  StreamCopy(const uint8_t* data, size_t size) : bytes_(new unsigned char[size]), size_(size) {
    if (size) std::memcpy(bytes_.get(), data, size);
  }
  const unsigned char* data() const { return bytes_.get(); }
  size_t size() const { return size_; }
  // [p, p + n) lies inside the stream.
  bool contains(const void* p, uint64_t n) const {
    const auto* b = static_cast<const unsigned char*>(p);
    return b >= data() && b <= data() + size_ && n <= static_cast<uint64_t>(data() + size_ - b);
  }

 private:
  std::unique_ptr<unsigned char[]> bytes_;
  size_t size_;
};

// A rejected stream must come back as one of the two codes a decoder uses,
// with a message.
inline void checkRejection(const Status& st) {
  SPCCL_FUZZ_CHECK(st.code() == spcclInvalidUsage || st.code() == spcclRemoteError);
  SPCCL_FUZZ_CHECK(!st.message().empty());
}

// ---- parseStream (pairs, dense and error kinds): 24-byte prefix ----
//   u8 value type selector, u8 algorithm, u8 flags (bit 0: dense allowed), u8 0,
//   u32 count, u32 range begin, u32 range length, u64 seq
struct StreamPrefix {
  static constexpr size_t kBytes = 24;
  StreamExpect expect;
};
inline StreamPrefix readStreamPrefix(const uint8_t* p) {
  const uint64_t count = loadLE<uint32_t>(p + 4) % (kMaxElements + 1);
  const uint64_t begin = loadLE<uint32_t>(p + 8) % (count + 1);
  const uint64_t len = loadLE<uint32_t>(p + 12) % (count - begin + 1);
  StreamPrefix s;
  s.expect = StreamExpect{
      count, begin, begin + len, loadLE<uint64_t>(p + 16), p[1], valueTypeOf(p[0]), (p[2] & 1) != 0, (p[2] & 2) != 0};
  return s;
}
inline void writeStreamPrefix(uint8_t* p, const StreamExpect& e) {
  std::memset(p, 0, StreamPrefix::kBytes);
  p[0] = valueTypeSelector(e.valueType);
  p[1] = e.algorithm;
  p[2] = static_cast<uint8_t>((e.allowDense ? 1 : 0) | (e.allowError ? 2 : 0));
  storeLE<uint32_t>(p + 4, static_cast<uint32_t>(e.denseCount));
  storeLE<uint32_t>(p + 8, static_cast<uint32_t>(e.rangeBegin));
  storeLE<uint32_t>(p + 12, static_cast<uint32_t>(e.rangeEnd - e.rangeBegin));
  storeLE<uint64_t>(p + 16, e.seq);
}

// ---- checkDescriptors: 1-byte prefix ----
//   u8 ranks - 1 (mod 16), then ranks x 48-byte CallDescriptor
constexpr int kMaxRanks = 16;
inline int ranksOf(uint8_t b) { return 1 + b % kMaxRanks; }

// ---- parseRows: 16-byte prefix ----
//   u8 index width selector (0: rowLen 1..256, 1: 257..65536, 2: 65537..66560),
//   u8 value type selector, u16 row length, u16 rows, u16 0, u64 seq
struct RowsPrefix {
  static constexpr size_t kBytes = 16;
  uint64_t rows, rowLen, seq;
  core::ValueType vt;
};
inline uint64_t rowLenOf(uint8_t width, uint16_t raw) {
  switch (width % 3) {
    case 0:
      return 1 + raw % 256;
    case 1:
      return 257 + raw % (65536 - 256);
    default:
      return 65537 + raw % 1024;
  }
}
inline RowsPrefix readRowsPrefix(const uint8_t* p) {
  RowsPrefix r;
  r.rowLen = rowLenOf(p[0], loadLE<uint16_t>(p + 2));
  uint64_t maxRows = kMaxElements / r.rowLen;
  if (maxRows > 4096) maxRows = 4096;
  r.rows = loadLE<uint16_t>(p + 4) % (maxRows + 1);
  r.vt = valueTypeOf(p[1]);
  r.seq = loadLE<uint64_t>(p + 8);
  return r;
}
// rowLen must be one rowLenOf can produce; rows must fit under the bound above.
inline void writeRowsPrefix(uint8_t* p, uint64_t rows, uint64_t rowLen, core::ValueType vt, uint64_t seq) {
  std::memset(p, 0, RowsPrefix::kBytes);
  const uint8_t width = rowLen <= 256 ? 0 : rowLen <= 65536 ? 1 : 2;
  const uint64_t base = width == 0 ? 1 : width == 1 ? 257 : 65537;
  p[0] = width;
  p[1] = valueTypeSelector(vt);
  storeLE<uint16_t>(p + 2, static_cast<uint16_t>(rowLen - base));
  storeLE<uint16_t>(p + 4, static_cast<uint16_t>(rows));
  storeLE<uint64_t>(p + 8, seq);
}

// ---- parseValues: 16-byte prefix ----
//   u8 value type selector, u8[3] 0, u32 nnz, u64 seq
struct ValuesPrefix {
  static constexpr size_t kBytes = 16;
  uint64_t nnz, seq;
  core::ValueType vt;
};
inline ValuesPrefix readValuesPrefix(const uint8_t* p) {
  return {loadLE<uint32_t>(p + 4) % (kMaxElements + 1), loadLE<uint64_t>(p + 8), valueTypeOf(p[0])};
}
inline void writeValuesPrefix(uint8_t* p, uint64_t nnz, core::ValueType vt, uint64_t seq) {
  std::memset(p, 0, ValuesPrefix::kBytes);
  p[0] = valueTypeSelector(vt);
  storeLE<uint32_t>(p + 4, static_cast<uint32_t>(nnz));
  storeLE<uint64_t>(p + 8, seq);
}

// ---- parseIdRows: 16-byte prefix ----
//   u8 value width selector (even: fp32, odd: fp64), u8 0, u16 row length - 1
//   (1..1024; the API rejects 0), u32 0, u64 seq
struct IdRowsPrefix {
  static constexpr size_t kBytes = 16;
  uint64_t rowLen, seq;
  uint32_t valueBytes;
};
inline IdRowsPrefix readIdRowsPrefix(const uint8_t* p) {
  return {1 + loadLE<uint16_t>(p + 2) % 1024u, loadLE<uint64_t>(p + 8), (p[0] & 1) ? 8u : 4u};
}
inline void writeIdRowsPrefix(uint8_t* p, uint64_t rowLen, uint32_t valueBytes, uint64_t seq) {
  std::memset(p, 0, IdRowsPrefix::kBytes);
  p[0] = valueBytes == 8 ? 1 : 0;
  storeLE<uint16_t>(p + 2, static_cast<uint16_t>(rowLen - 1));
  storeLE<uint64_t>(p + 8, seq);
}

}  // namespace spccl::fuzz
