// One received contribution as the kernels see it: the index and value
// sections of a stream whose header the codec has already checked
// (codec/codec.h lays the streams out). The index encodings are element
// logic, shared by the codec, the host kernels and the CUDA kernels; the
// headers, sizes and messages are the codec's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/core/elementwise.h"

namespace spccl {

// kCoo32: global uint32 positions. kRowN: positions inside a row, N bits.
// kDelta: LEB128 varints of the gaps (core::deltaGap); kBitmap: a bit per
// position of the range, bit i of byte i/8, LSB first (pairs only).
enum class IndexEncoding : uint8_t { kCoo32 = 1, kRow8 = 2, kRow16 = 3, kRow32 = 4, kDelta = 5, kBitmap = 6 };

struct WireSection {
  bool dense;  // values of every position of [rangeBegin, rangeEnd) (nnz is the length); else pairs
  uint64_t nnz;
  IndexEncoding encoding;           // pairs: kCoo32, kDelta or kBitmap
  const uint32_t* indices;          // pairs in kCoo32 (nullptr otherwise)
  const unsigned char* indexBytes;  // pairs in kDelta or kBitmap: the index section
  // kDelta and kBitmap: the index section ends at or before indexMaxBytes
  // (the stream's end), at or after indexMinBytes (the stream's alignment);
  // the bytes between its end and indexMaxBytes are zero.
  size_t indexMinBytes, indexMaxBytes;
  const void* values;  // nnz values of valueType, in index order
  core::ValueType valueType;
  int scaleExp;  // fp8: the scale exponent; else 0
  uint64_t rangeBegin, rangeEnd;
};

// What checking a peer's index section found (Executor::reduceSections).
enum class IndexFault : uint32_t {
  kNone = 0,
  kBadIndex,         // an index out of [rangeBegin, rangeEnd) or not increasing: `index` at `position`
  kVarint,           // delta: varints running past the section, or a gap of more than 32 bits
  kSectionSize,      // delta: the varints end before indexMinBytes
  kPadding,          // non-zero bytes after the index section
  kBitmapPastRange,  // bits set past the range
  kBitmapCount,      // another number of bits set than pairs
};
struct IndexCheck {
  IndexFault fault;
  uint64_t index, position;  // kBadIndex
};

namespace core {

// LEB128 varints: 7 bits a byte, low first, the high bit set on every byte
// but the last (varintBytes of them).
SPCCL_HOST_DEVICE unsigned char* putVarint(unsigned char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<unsigned char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<unsigned char>(v);
  return p;
}
// One varint of at most 32 bits from [*p, end): false if it runs past end
// or holds more than 32 bits; *p moves past it.
SPCCL_HOST_DEVICE bool readVarint32(const unsigned char** p, const unsigned char* end, uint32_t* value) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    if (*p >= end) return false;
    const unsigned char b = *(*p)++;
    if (shift == 28 && (b & 0xf0) != 0) return false;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  *value = static_cast<uint32_t>(v);
  return true;
}

}  // namespace core
}  // namespace spccl
