#include "kernels/host/sections.h"

#include <algorithm>

#include "kernels/host/host_kernels.h"

namespace spccl::host {

using core::ValueType;

size_t encodeIndexSection(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                          uint64_t rangeEnd, unsigned char* dst) {
  if (e == IndexEncoding::kCoo32) {
    if (nnz > 0) std::memcpy(dst, indices, nnz * sizeof(uint32_t));  // memcpy(NULL, 0) is undefined
    return nnz * sizeof(uint32_t);
  }
  if (e == IndexEncoding::kDelta) {
    unsigned char* p = dst;
    for (uint64_t j = 0; j < nnz; ++j) p = core::putVarint(p, core::deltaGap(indices, j, rangeBegin));
    return static_cast<size_t>(p - dst);
  }
  // kBitmap. Indices ascend: each 64-position word is built in a register and
  // stored once (little-endian bytes).
  const size_t mapBytes = bitmapIndexBytes(rangeEnd - rangeBegin);
  std::memset(dst, 0, mapBytes);
  const auto store = [&](uint64_t word, uint64_t w) {
    std::memcpy(dst + w * 8, &word, std::min<size_t>(8, mapBytes - w * 8));
  };
  uint64_t word = 0, w = 0;
  for (uint64_t j = 0; j < nnz; ++j) {
    const uint64_t bit = indices[j] - rangeBegin;
    if (bit / 64 != w) {
      if (word != 0) store(word, w);
      word = 0;
      w = bit / 64;
    }
    word |= uint64_t{1} << (bit % 64);
  }
  if (word != 0) store(word, w);
  return mapBytes;
}

namespace {

IndexCheck fault(IndexFault f, uint64_t index = 0, uint64_t position = 0) { return IndexCheck{f, index, position}; }

bool zeroFrom(const unsigned char* p, size_t from, size_t to) {
  for (size_t b = from; b < to; ++b)
    if (p[b] != 0) return false;
  return true;
}

}  // namespace

IndexCheck checkIndexSection(const WireSection& s, size_t* sectionBytes) {
  const uint64_t nnz = s.nnz;
  if (s.encoding == IndexEncoding::kCoo32) {
    uint64_t prev = 0;
    for (uint64_t j = 0; j < nnz; ++j) {
      const uint64_t i = s.indices[j];
      if (i < s.rangeBegin || i >= s.rangeEnd || (j > 0 && i <= prev)) return fault(IndexFault::kBadIndex, i, j);
      prev = i;
    }
    if (sectionBytes != nullptr) *sectionBytes = nnz * sizeof(uint32_t);
    return fault(IndexFault::kNone);
  }
  const unsigned char* base = s.indexBytes;
  size_t end = 0;  // one past the index section
  if (s.encoding == IndexEncoding::kDelta) {
    uint64_t index = s.rangeBegin;
    for (uint64_t j = 0; j < nnz; ++j) {
      const unsigned char* at = base + end;
      uint32_t gap = 0;
      if (!core::readVarint32(&at, base + s.indexMaxBytes, &gap)) return fault(IndexFault::kVarint);
      end = static_cast<size_t>(at - base);
      index += gap + (j > 0 ? 1 : 0);  // <= 2^33 + range end: no overflow
      if (index >= s.rangeEnd) return fault(IndexFault::kBadIndex, index, j);
    }
    if (end < s.indexMinBytes) return fault(IndexFault::kSectionSize);
  } else {  // kBitmap: the codec checked that its bytes fit the stream
    const uint64_t len = s.rangeEnd - s.rangeBegin;
    const size_t mapBytes = bitmapIndexBytes(len);
    uint64_t set = 0;
    for (size_t b = 0; b < mapBytes; b += 8) {  // 8 bytes a popcount; the last word zero-filled
      uint64_t word = 0;
      std::memcpy(&word, base + b, std::min<size_t>(8, mapBytes - b));
      set += static_cast<uint64_t>(__builtin_popcountll(word));
    }
    const unsigned tail = static_cast<unsigned>(len % 8);
    if (tail != 0 && (base[mapBytes - 1] >> tail) != 0) return fault(IndexFault::kBitmapPastRange);
    if (set != nnz) return fault(IndexFault::kBitmapCount);
    end = mapBytes;
  }
  if (!zeroFrom(base, end, s.indexMaxBytes)) return fault(IndexFault::kPadding);
  if (sectionBytes != nullptr) *sectionBytes = end;
  return fault(IndexFault::kNone);
}

namespace {

// acc[i - accBase] += value for the cursor's pairs below `end`, the value
// type fixed at compile time (the per-pair switch stays out of the loop).
template <core::ValueType kVt>
void addPairsBelow(PairCursor& cursor, const WireSection& v, uint64_t end, float* acc, uint64_t accBase) {
  const void* values = v.values;
  const int scaleExp = v.scaleExp;
  cursor.until(
      end, [=](uint64_t index, uint64_t j) { acc[index - accBase] += core::loadWireValue(values, j, kVt, scaleExp); });
}

void addPairsBelow(PairCursor& cursor, const WireSection& v, uint64_t end, float* acc, uint64_t accBase) {
  switch (v.valueType) {
    case core::ValueType::kFloat16:
      return addPairsBelow<core::ValueType::kFloat16>(cursor, v, end, acc, accBase);
    case core::ValueType::kBfloat16:
      return addPairsBelow<core::ValueType::kBfloat16>(cursor, v, end, acc, accBase);
    case core::ValueType::kFloat8e4m3:
      return addPairsBelow<core::ValueType::kFloat8e4m3>(cursor, v, end, acc, accBase);
    default:
      return addPairsBelow<core::ValueType::kFloat32>(cursor, v, end, acc, accBase);
  }
}

}  // namespace

void accumulateSection(const WireSection& v, float* acc, uint64_t accBase) {
  if (v.dense) {
    denseAccumulate(v.values, v.valueType, v.nnz, acc + (v.rangeBegin - accBase), v.scaleExp);
  } else {
    PairCursor cursor(v);
    addPairsBelow(cursor, v, ~uint64_t{0}, acc, accBase);
  }
}

bool zeroThenScatter(uint64_t pairs, uint64_t len) { return pairs * kScatterBelow < len; }

void reduceSections(const WireSection* views, size_t count, float* acc, uint64_t accBase,
                    std::vector<PairCursor>* cursors) {
  if (count == 0) return;
  const uint64_t b = views[0].rangeBegin, e = views[0].rangeEnd;
  uint64_t pairs = 0;
  for (size_t r = 0; r < count; ++r) pairs += views[r].nnz;  // a dense stream's nnz is its length
  if (zeroThenScatter(pairs, e - b)) {
    std::fill(acc + (b - accBase), acc + (e - accBase), 0.0f);
    for (size_t r = 0; r < count; ++r) accumulateSection(views[r], acc, accBase);
    return;
  }
  cursors->clear();
  for (size_t r = 0; r < count; ++r) cursors->emplace_back(views[r]);
  constexpr uint64_t kBlock = 4096;  // 16 KiB of output
  for (uint64_t c = b; c < e; c += kBlock) {
    const uint64_t ce = c + kBlock < e ? c + kBlock : e;
    std::fill(acc + (c - accBase), acc + (ce - accBase), 0.0f);
    for (size_t r = 0; r < count; ++r) {
      const WireSection& v = views[r];
      if (v.dense) {
        const auto* values = static_cast<const unsigned char*>(v.values) + (c - b) * core::wireValueBytes(v.valueType);
        denseAccumulate(values, v.valueType, ce - c, acc + (c - accBase), v.scaleExp);
      } else {
        addPairsBelow((*cursors)[r], v, ce, acc, accBase);
      }
    }
  }
}

}  // namespace spccl::host
