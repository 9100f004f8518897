// Index and value sections of streams (kernels/core/wire_section.h) on the
// host: writing an index section, checking a peer's, and summing sections
// in rank order (kernels/cuda/sections.cu does the same on a device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/core/wire_section.h"

namespace spccl::host {

// Bytes of the bitmap of a range of len positions.
inline size_t bitmapIndexBytes(uint64_t len) { return static_cast<size_t>((len + 7) / 8); }

// The index section of nnz strictly increasing indices in [rangeBegin,
// rangeEnd) in encoding e (Executor::encodeIndices); returns its bytes.
size_t encodeIndexSection(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                          uint64_t rangeEnd, unsigned char* dst);

// Checks a peer's pairs section (every rule of IndexFault); on success
// *sectionBytes (optional) is where its index section ends.
IndexCheck checkIndexSection(const WireSection& s, size_t* sectionBytes = nullptr);

// Walks the pairs of a checked pairs section in index order, whatever its
// index encoding, and can stop at a position and resume there: the blocked
// reduction below takes every section a block at a time.
class PairCursor {
 public:
  explicit PairCursor(const WireSection& v) : v_(&v) {
    if (v.nnz == 0) return;
    if (v.encoding == IndexEncoding::kDelta) {
      p_ = v.indexBytes;
      index_ = v.rangeBegin + readVarint(p_);
    } else if (v.encoding == IndexEncoding::kBitmap) {
      mapBytes_ = bitmapIndexBytes(v.rangeEnd - v.rangeBegin);
      bits_ = loadWord(0);
    }
  }
  // Calls f(index, j) for the j-th pair, for every pair not yet visited
  // whose index is below `end`, and stops before the first at or past it.
  // The state is copied into locals for the loop and written back after it,
  // so it stays in registers while f stores floats.
  template <typename F>
  void until(uint64_t end, F&& f) {
    const uint64_t nnz = v_->nnz;
    uint64_t j = j_;
    if (v_->encoding == IndexEncoding::kCoo32) {
      const uint32_t* indices = v_->indices;
      for (; j < nnz && indices[j] < end; ++j) f(static_cast<uint64_t>(indices[j]), j);
    } else if (v_->encoding == IndexEncoding::kDelta) {
      uint64_t index = index_;
      const unsigned char* p = p_;
      while (j < nnz && index < end) {
        f(index, j);
        if (++j < nnz) index += readVarint(p) + 1;
      }
      index_ = index;
      p_ = p;
    } else {  // kBitmap: 64 positions a (little-endian) word; the check saw no bit past the range
      uint64_t bits = bits_, byte = byte_;
      while (j < nnz) {
        if (bits == 0) {
          if (byte + 8 >= mapBytes_) break;  // cannot happen in a checked section: nnz bits are set
          byte += 8;
          bits = loadWord(byte);
          continue;
        }
        const uint64_t index = v_->rangeBegin + byte * 8 + static_cast<uint64_t>(__builtin_ctzll(bits));
        if (index >= end) break;
        f(index, j++);
        bits &= bits - 1;
      }
      bits_ = bits;
      byte_ = byte;
    }
    j_ = j;
  }

 private:
  static uint64_t readVarint(const unsigned char*& p) {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      const unsigned char b = *p++;
      value |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return value;
    }
  }
  uint64_t loadWord(uint64_t byte) const {
    uint64_t bits = 0;
    std::memcpy(&bits, v_->indexBytes + byte, static_cast<size_t>(mapBytes_ - byte < 8 ? mapBytes_ - byte : 8));
    return bits;
  }

  const WireSection* v_;
  uint64_t j_ = 0;                               // pairs visited
  uint64_t index_ = 0;                           // kDelta: the index of pair j_
  const unsigned char* p_ = nullptr;             // kDelta: the varint after pair j_'s
  uint64_t mapBytes_ = 0, byte_ = 0, bits_ = 0;  // kBitmap: the word at byte_, its unvisited bits
};

// Calls f(index, j) for the j-th pair of a checked pairs section, in index
// order, whatever its index encoding.
template <typename F>
void forEachPair(const WireSection& v, F&& f) {
  PairCursor(v).until(~uint64_t{0}, f);
}

// acc[i - accBase] += value for every entry of a checked section.
void accumulateSection(const WireSection& s, float* acc, uint64_t accBase);
// Below one pair per kScatterBelow elements of the range, zeroing the range
// (memset's streaming stores, no line read) and adding the pairs where they
// fall (a cache miss each) is cheaper than a pass that fetches every line;
// above it the pass wins. host_kernel_bench's unpackAdd/unpackBlock rows at
// --density 0.0003-0.004 (4 streams of 2k pairs) cross at about 1 in 125.
constexpr uint64_t kScatterBelow = 128;
bool zeroThenScatter(uint64_t pairs, uint64_t len);

// The same bits as zeroing acc over the sections' common range and then
// accumulateSection of sections[0], sections[1], ... in that order (every
// element's sum starts from +0 and adds in section order). Dense enough (all
// the sections' pairs together): in blocks small enough to stay in the
// first-level cache, so each output line is fetched once and the sections
// are read front to back alongside. All over the same [rangeBegin,
// rangeEnd). `cursors` is scratch. Where two NaNs meet, which payload the
// sum keeps is the compiler's operand order (x86 passes the first
// operand's); both ways add pairs in the same loop as accumulateSection,
// and every rank runs the same code on the same bytes.
void reduceSections(const WireSection* sections, size_t count, float* acc, uint64_t accBase,
                    std::vector<PairCursor>* cursors);
// An array of a type derived from WireSection (codec's StreamView) would be
// read with WireSection's stride: refused at compile time.
template <typename T, typename = std::enable_if_t<!std::is_same_v<T, WireSection>>>
void reduceSections(const T* sections, size_t count, float* acc, uint64_t accBase,
                    std::vector<PairCursor>* cursors) = delete;

}  // namespace spccl::host
