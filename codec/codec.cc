#include "codec/codec.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SPCCL_CRC32C_X86 1
#endif

#include "include/spccl.h"
#include "kernels/host/host_kernels.h"

namespace spccl {

using core::ValueType;

size_t pairsStreamBytes(uint64_t nnz, ValueType vt) {
  return alignStream(sizeof(StreamHeader) + nnz * (sizeof(uint32_t) + core::wireValueBytes(vt)));
}

size_t denseStreamBytes(uint64_t len, ValueType vt) {
  return alignStream(sizeof(StreamHeader) + len * core::wireValueBytes(vt));
}

namespace {

using core::deltaGap;

size_t bitmapIndexBytes(uint64_t len) { return static_cast<size_t>((len + 7) / 8); }

size_t compactStreamBytes(uint64_t nnz, size_t indexBytes, ValueType vt) {
  return alignStream(sizeof(StreamHeader) + nnz * core::wireValueBytes(vt) + indexBytes);
}

}  // namespace

size_t encodedPairsBytes(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                         ValueType vt) {
  switch (e) {
    case IndexEncoding::kDelta:
      return compactStreamBytes(nnz, host::deltaIndexBytes(indices, nnz, rangeBegin), vt);
    case IndexEncoding::kBitmap:
      return compactStreamBytes(nnz, bitmapIndexBytes(rangeEnd - rangeBegin), vt);
    default:
      return pairsStreamBytes(nnz, vt);
  }
}

bool pairsEncodingNeedsDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd, ValueType vt) {
  if (setting == kIndexEncodingDelta) return true;
  if (setting != kIndexEncodingAuto) return false;
  // The varints take >= 1 byte per index: skipped where that cannot win.
  const size_t bitmap = compactStreamBytes(nnz, bitmapIndexBytes(rangeEnd - rangeBegin), vt);
  return compactStreamBytes(nnz, nnz, vt) < std::min(pairsStreamBytes(nnz, vt), bitmap);
}

IndexEncoding choosePairsEncodingFromDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                                                ValueType vt, uint64_t deltaIndexBytes, size_t* bytes) {
  const size_t coo = pairsStreamBytes(nnz, vt);
  const size_t bitmap = compactStreamBytes(nnz, bitmapIndexBytes(rangeEnd - rangeBegin), vt);
  const bool delta = pairsEncodingNeedsDeltaBytes(setting, nnz, rangeBegin, rangeEnd, vt);
  const size_t deltaBytes = delta ? compactStreamBytes(nnz, deltaIndexBytes, vt) : 0;
  IndexEncoding best = IndexEncoding::kCoo32;
  size_t bestBytes = coo;
  if (setting == kIndexEncodingDelta) best = IndexEncoding::kDelta, bestBytes = deltaBytes;
  if (setting == kIndexEncodingBitmap) best = IndexEncoding::kBitmap, bestBytes = bitmap;
  if (setting == kIndexEncodingAuto) {  // the smallest; ties: coo, delta, bitmap
    if (delta && deltaBytes < bestBytes) best = IndexEncoding::kDelta, bestBytes = deltaBytes;
    if (bitmap < bestBytes) best = IndexEncoding::kBitmap, bestBytes = bitmap;
  }
  *bytes = bestBytes;
  return best;
}

IndexEncoding choosePairsEncoding(int setting, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                                  uint64_t rangeEnd, ValueType vt, size_t* bytes) {
  const uint64_t delta = pairsEncodingNeedsDeltaBytes(setting, nnz, rangeBegin, rangeEnd, vt)
                             ? host::deltaIndexBytes(indices, nnz, rangeBegin)
                             : 0;
  return choosePairsEncodingFromDeltaBytes(setting, nnz, rangeBegin, rangeEnd, vt, delta, bytes);
}

size_t maxPairsStreamBytes(uint64_t nnz, uint64_t len, ValueType vt) {
  return std::max({pairsStreamBytes(nnz, vt), compactStreamBytes(nnz, 5 * nnz, vt),
                   compactStreamBytes(nnz, bitmapIndexBytes(len), vt)});
}

namespace {

StreamHeader makeHeader(const StreamInfo& info, StreamKind kind, uint64_t nnz) {
  StreamHeader h{};
  h.magic = kStreamMagic;
  h.version = kStreamVersion;
  h.indexEncoding = static_cast<uint8_t>(IndexEncoding::kCoo32);
  h.valueType = static_cast<uint8_t>(info.valueType);
  h.kind = static_cast<uint8_t>(kind);
  h.algorithm = info.algorithm;
  h.denseCount = info.denseCount;
  h.rangeBegin = info.rangeBegin;
  h.rangeEnd = info.rangeEnd;
  h.nnz = nnz;
  h.seq = info.seq;
  if (info.valueType == ValueType::kFloat8e4m3 && kind != StreamKind::kError)
    h.status = static_cast<uint8_t>(static_cast<int8_t>(info.scaleExp));
  return h;
}

void zeroPad(unsigned char* p, size_t used, size_t total) {
  if (total > used) std::memset(p + used, 0, total - used);
}

bool knownValueType(uint8_t v) {
  return v == static_cast<uint8_t>(ValueType::kFloat32) || v == static_cast<uint8_t>(ValueType::kFloat16) ||
         v == static_cast<uint8_t>(ValueType::kBfloat16) || v == static_cast<uint8_t>(ValueType::kFloat8e4m3);
}

}  // namespace

size_t encodePairs(void* dst, const StreamInfo& info, const uint32_t* indices, const void* wireValues) {
  auto* p = static_cast<unsigned char*>(dst);
  StreamHeader h = makeHeader(info, StreamKind::kPairs, info.nnz);
  h.indexEncoding = static_cast<uint8_t>(info.encoding);
  std::memcpy(p, &h, sizeof h);
  size_t off = sizeof h;
  const size_t vbytes = info.nnz * core::wireValueBytes(info.valueType);
  if (info.encoding == IndexEncoding::kCoo32) {
    const size_t ibytes = info.nnz * sizeof(uint32_t);
    if (info.nnz > 0) {  // empty vectors may hand over NULL: memcpy(NULL, 0) is undefined
      std::memcpy(p + off, indices, ibytes);
      std::memcpy(p + off + ibytes, wireValues, vbytes);
    }
    off += ibytes + vbytes;
  } else {
    // Compact encodings: values first (they keep their alignment), then the index bytes.
    if (info.nnz > 0) std::memcpy(p + off, wireValues, vbytes);
    off += vbytes;
    if (info.encoding == IndexEncoding::kDelta) {
      for (uint64_t j = 0; j < info.nnz; ++j)
        off = static_cast<size_t>(putVarint(p + off, deltaGap(indices, j, info.rangeBegin)) - p);
    } else {  // kBitmap
      const size_t mapBytes = bitmapIndexBytes(info.rangeEnd - info.rangeBegin);
      std::memset(p + off, 0, mapBytes);
      // Indices ascend: build each 64-position word in a register, store it once (little-endian bytes).
      const auto store = [&](uint64_t word, uint64_t w) {
        std::memcpy(p + off + w * 8, &word, std::min<size_t>(8, mapBytes - w * 8));
      };
      uint64_t word = 0, w = 0;
      for (uint64_t j = 0; j < info.nnz; ++j) {
        const uint64_t bit = indices[j] - info.rangeBegin;
        if (bit / 64 != w) {
          if (word != 0) store(word, w);
          word = 0;
          w = bit / 64;
        }
        word |= uint64_t{1} << (bit % 64);
      }
      if (word != 0) store(word, w);
      off += mapBytes;
    }
  }
  const size_t total = alignStream(off);
  zeroPad(p, off, total);
  return total;
}

size_t encodeDense(void* dst, const StreamInfo& info, const float* values, float* decoded) {
  auto* p = static_cast<unsigned char*>(dst);
  const StreamHeader h = makeHeader(info, StreamKind::kDense, 0);
  std::memcpy(p, &h, sizeof h);
  const uint64_t len = info.rangeEnd - info.rangeBegin;
  void* section = p + sizeof h;
  for (uint64_t i = 0; i < len; ++i) {
    const float d = core::storeWireValue(section, i, values[i], info.valueType, info.scaleExp);
    if (decoded) decoded[i] = d;
  }
  const size_t used = sizeof h + len * core::wireValueBytes(info.valueType);
  const size_t total = alignStream(used);
  zeroPad(p, used, total);
  return total;
}

size_t encodeError(void* dst, const StreamInfo& info, spcclResult_t code) {
  StreamHeader h = makeHeader(info, StreamKind::kError, 0);
  h.status = static_cast<uint8_t>(code);
  std::memcpy(dst, &h, sizeof h);
  return sizeof h;
}

Status parseStream(const void* data, size_t bytes, const StreamExpect& e, int peer, StreamView* out) {
  if (bytes < sizeof(StreamHeader) || data == nullptr)
    return remoteError(formatString("stream from rank %d is %zu bytes, shorter than its %zu-byte header", peer, bytes,
                                    sizeof(StreamHeader)));
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  StreamHeader h;
  std::memcpy(&h, data, sizeof h);
  if (h.magic != kStreamMagic || h.version != kStreamVersion)
    return remoteError(formatString("stream from rank %d has bad magic 0x%08x or version %u", peer, h.magic,
                                    static_cast<unsigned>(h.version)));
  const bool sealed = (h.reserved0 & kChecksumFlag) != 0;  // reserved1 holds the (verified) CRC
  if ((h.reserved0 & ~kChecksumFlag) != 0 || (!sealed && h.reserved1 != 0))
    return remoteError(formatString("stream from rank %d has non-zero reserved header fields", peer));
  if (h.kind == static_cast<uint8_t>(StreamKind::kError)) {
    // Elsewhere an error marker is a corrupt stream: never an empty contribution.
    if (!e.allowError) return remoteError(formatString("rank %d sent an error marker where data was expected", peer));
    out->kind = StreamKind::kError;
    out->scaleExp = 0;
    out->peerStatus = (h.status > spcclSuccess && h.status < spcclNumResults) ? static_cast<spcclResult_t>(h.status)
                                                                              : spcclRemoteError;
    return Status::ok();
  }
  // The status byte is the fp8 scale exponent, else reserved.
  const bool fp8 = h.valueType == static_cast<uint8_t>(ValueType::kFloat8e4m3);
  const int scaleExp = fp8 ? static_cast<int>(static_cast<int8_t>(h.status)) : 0;
  if (!fp8 && h.status != 0)
    return remoteError(formatString("stream from rank %d has non-zero reserved header fields", peer));
  if (fp8 && (scaleExp < core::kFp8MinScaleExp || scaleExp > core::kFp8MaxScaleExp))
    return remoteError(formatString("fp8 stream from rank %d has scale exponent %d outside [%d, %d]", peer, scaleExp,
                                    core::kFp8MinScaleExp, core::kFp8MaxScaleExp));
  if (h.seq != e.seq)
    return invalidUsage(
        formatString("rank %d is at collective call #%llu, this rank at #%llu: the ranks' call "
                     "sequences differ",
                     peer, static_cast<unsigned long long>(h.seq), static_cast<unsigned long long>(e.seq)));
  if (h.denseCount != e.denseCount)
    return invalidUsage(formatString("rank %d called with count %llu, this rank with count %llu", peer,
                                     static_cast<unsigned long long>(h.denseCount),
                                     static_cast<unsigned long long>(e.denseCount)));
  if (h.algorithm != e.algorithm)
    return invalidUsage(formatString("rank %d's stream is of algorithm %u, this rank's call of algorithm %u", peer,
                                     static_cast<unsigned>(h.algorithm), static_cast<unsigned>(e.algorithm)));
  if (!knownValueType(h.valueType) || h.valueType != static_cast<uint8_t>(e.valueType))
    return invalidUsage(formatString("rank %d sent wire value type %u, this rank expects %u", peer,
                                     static_cast<unsigned>(h.valueType), static_cast<unsigned>(e.valueType)));
  if (h.rangeBegin != e.rangeBegin || h.rangeEnd != e.rangeEnd)
    return remoteError(
        formatString("stream from rank %d covers [%llu, %llu), expected [%llu, %llu)", peer,
                     static_cast<unsigned long long>(h.rangeBegin), static_cast<unsigned long long>(h.rangeEnd),
                     static_cast<unsigned long long>(e.rangeBegin), static_cast<unsigned long long>(e.rangeEnd)));
  const uint64_t len = e.rangeEnd - e.rangeBegin;
  const auto* base = static_cast<const unsigned char*>(data);
  out->valueType = e.valueType;
  out->scaleExp = scaleExp;
  out->rangeBegin = e.rangeBegin;
  out->rangeEnd = e.rangeEnd;
  out->peerStatus = spcclSuccess;
  if (h.kind == static_cast<uint8_t>(StreamKind::kDense)) {
    if (!e.allowDense) return remoteError(formatString("rank %d sent a dense stream where pairs were expected", peer));
    if (bytes != denseStreamBytes(len, e.valueType))
      return remoteError(formatString("dense stream from rank %d is %zu bytes, expected %zu", peer, bytes,
                                      denseStreamBytes(len, e.valueType)));
    out->kind = StreamKind::kDense;
    out->nnz = len;
    out->encoding = IndexEncoding::kCoo32;
    out->indexBytes = nullptr;
    out->indices = nullptr;
    out->values = base + sizeof h;
    return Status::ok();
  }
  if (h.kind != static_cast<uint8_t>(StreamKind::kPairs) ||
      (h.indexEncoding != static_cast<uint8_t>(IndexEncoding::kCoo32) &&
       h.indexEncoding != static_cast<uint8_t>(IndexEncoding::kDelta) &&
       h.indexEncoding != static_cast<uint8_t>(IndexEncoding::kBitmap)))
    return remoteError(formatString("stream from rank %d has unknown kind %u or index encoding %u", peer,
                                    static_cast<unsigned>(h.kind), static_cast<unsigned>(h.indexEncoding)));
  // nnz bounded by the range length first, so no size computation can overflow.
  const IndexEncoding enc = static_cast<IndexEncoding>(h.indexEncoding);
  const size_t vbytes = h.nnz <= len ? h.nnz * core::wireValueBytes(e.valueType) : 0;
  if (h.nnz > len || (enc == IndexEncoding::kCoo32 && bytes != pairsStreamBytes(h.nnz, e.valueType)) ||
      (enc != IndexEncoding::kCoo32 && bytes < sizeof h + vbytes))
    return remoteError(formatString("stream from rank %d claims %llu pairs in %zu bytes for a range of %llu", peer,
                                    static_cast<unsigned long long>(h.nnz), bytes,
                                    static_cast<unsigned long long>(len)));
  auto badIndex = [&](uint64_t i, uint64_t j) {
    return remoteError(
        formatString("stream from rank %d: index %llu at position %llu is out of range [%llu, %llu) "
                     "or not increasing",
                     peer, static_cast<unsigned long long>(i), static_cast<unsigned long long>(j),
                     static_cast<unsigned long long>(e.rangeBegin), static_cast<unsigned long long>(e.rangeEnd)));
  };
  auto badLayout = [&](const char* what) {
    return remoteError(formatString("stream from rank %d: %s (%llu pairs, %zu bytes, range of %llu)", peer, what,
                                    static_cast<unsigned long long>(h.nnz), bytes,
                                    static_cast<unsigned long long>(len)));
  };
  out->kind = StreamKind::kPairs;
  out->nnz = h.nnz;
  out->encoding = enc;
  out->indices = nullptr;
  out->indexBytes = nullptr;
  if (enc == IndexEncoding::kCoo32) {
    const auto* idx = reinterpret_cast<const uint32_t*>(base + sizeof h);
    uint64_t prev = 0;
    for (uint64_t j = 0; j < h.nnz; ++j) {
      const uint64_t i = idx[j];
      if (i < e.rangeBegin || i >= e.rangeEnd || (j > 0 && i <= prev)) return badIndex(i, j);
      prev = i;
    }
    out->indices = idx;
    out->values = base + sizeof h + h.nnz * sizeof(uint32_t);
    return Status::ok();
  }
  const size_t indexStart = sizeof h + vbytes;
  size_t end = indexStart;  // one past the index section
  if (enc == IndexEncoding::kDelta) {
    uint64_t index = e.rangeBegin;
    for (uint64_t j = 0; j < h.nnz; ++j) {
      const unsigned char* at = base + end;
      uint32_t gap = 0;
      if (!readVarint32(&at, base + bytes, &gap))
        return badLayout("truncated index varints, or an index gap of more than 32 bits");
      end = static_cast<size_t>(at - base);
      index += gap + (j > 0 ? 1 : 0);  // <= 2^33 + range end: no overflow
      if (index >= e.rangeEnd) return badIndex(index, j);
    }
  } else {  // kBitmap
    const size_t mapBytes = bitmapIndexBytes(len);
    if (bytes - indexStart < mapBytes) return badLayout("truncated index bitmap");
    end = indexStart + mapBytes;
    uint64_t set = 0;
    for (size_t b = 0; b < mapBytes; b += 8) {  // 8 bytes a popcount; the last word zero-filled
      uint64_t word = 0;
      std::memcpy(&word, base + indexStart + b, std::min<size_t>(8, mapBytes - b));
      set += static_cast<uint64_t>(__builtin_popcountll(word));
    }
    const unsigned tail = static_cast<unsigned>(len % 8);
    if (tail != 0 && (base[end - 1] >> tail) != 0) return badLayout("index bitmap bits past the range");
    if (set != h.nnz) return badLayout("index bitmap with another number of bits set than pairs");
  }
  if (alignStream(end) != bytes) return badLayout("index section and stream size disagree");
  for (size_t b = end; b < bytes; ++b)
    if (base[b] != 0) return badLayout("non-zero padding");
  out->indexBytes = base + indexStart;
  out->values = base + sizeof h;
  return Status::ok();
}

CallDescriptor exactAllReduceDescriptor(uint64_t seq, uint64_t count, int dataType, int op) {
  return CallDescriptor{kStreamMagic,
                        SPCCL_ALGO_DENSE,
                        kExactValueType,
                        static_cast<uint8_t>(dataType),
                        static_cast<uint8_t>(op),
                        seq,
                        count,
                        0};
}

CallDescriptor exactCollectiveDescriptor(Collective coll, uint64_t seq, uint64_t count, int dataType) {
  return CallDescriptor{kStreamMagic,
                        SPCCL_ALGO_DENSE,
                        kExactValueType,
                        static_cast<uint8_t>(dataType),
                        static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(coll)),
                        seq,
                        count,
                        0};
}

namespace {

// acc[i - accBase] += value for the cursor's pairs below `end`, the value
// type fixed at compile time (the per-pair switch stays out of the loop).
template <core::ValueType kVt>
void addPairsBelow(PairCursor& cursor, const StreamView& v, uint64_t end, float* acc, uint64_t accBase) {
  const void* values = v.values;
  const int scaleExp = v.scaleExp;
  cursor.until(
      end, [=](uint64_t index, uint64_t j) { acc[index - accBase] += core::loadWireValue(values, j, kVt, scaleExp); });
}

void addPairsBelow(PairCursor& cursor, const StreamView& v, uint64_t end, float* acc, uint64_t accBase) {
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

void accumulateStream(const StreamView& v, float* acc, uint64_t accBase) {
  if (v.kind == StreamKind::kDense) {
    host::denseAccumulate(v.values, v.valueType, v.nnz, acc + (v.rangeBegin - accBase), v.scaleExp);
  } else if (v.kind == StreamKind::kPairs) {
    PairCursor cursor(v);
    addPairsBelow(cursor, v, ~uint64_t{0}, acc, accBase);
  }
}

bool zeroThenScatter(uint64_t pairs, uint64_t len) { return pairs * kScatterBelow < len; }

void storeStream(const StreamView& v, float* out, uint64_t outBase) {
  float* range = out + (v.rangeBegin - outBase);
  const uint64_t len = v.rangeEnd - v.rangeBegin;
  if (v.kind != StreamKind::kPairs || zeroThenScatter(v.nnz, len)) {  // dense: a sequential pass either way
    std::fill(range, range + len, 0.0f);
    accumulateStream(v, out, outBase);
    return;
  }
  uint64_t next = 0;  // range[0, next) written
  forEachPair(v, [&](uint64_t index, uint64_t j) {
    const uint64_t at = index - v.rangeBegin;  // > next - 1: indices strictly increase (parseStream)
    std::fill(range + next, range + at, 0.0f);
    range[at] = 0.0f + core::loadWireValue(v.values, j, v.valueType, v.scaleExp);  // -0 becomes +0, as in a sum
    next = at + 1;
  });
  std::fill(range + next, range + len, 0.0f);
}

void reduceStreams(const StreamView* views, size_t count, float* acc, uint64_t accBase,
                   std::vector<PairCursor>* cursors) {
  if (count == 0) return;
  const uint64_t b = views[0].rangeBegin, e = views[0].rangeEnd;
  uint64_t pairs = 0;
  for (size_t r = 0; r < count; ++r) pairs += views[r].nnz;  // a dense stream's nnz is its length
  if (zeroThenScatter(pairs, e - b)) {
    std::fill(acc + (b - accBase), acc + (e - accBase), 0.0f);
    for (size_t r = 0; r < count; ++r) accumulateStream(views[r], acc, accBase);
    return;
  }
  cursors->clear();
  for (size_t r = 0; r < count; ++r) cursors->emplace_back(views[r]);
  constexpr uint64_t kBlock = 4096;  // 16 KiB of output
  for (uint64_t c = b; c < e; c += kBlock) {
    const uint64_t ce = c + kBlock < e ? c + kBlock : e;
    std::fill(acc + (c - accBase), acc + (ce - accBase), 0.0f);
    for (size_t r = 0; r < count; ++r) {
      const StreamView& v = views[r];
      if (v.kind == StreamKind::kDense) {
        const auto* values = static_cast<const unsigned char*>(v.values) + (c - b) * core::wireValueBytes(v.valueType);
        host::denseAccumulate(values, v.valueType, ce - c, acc + (c - accBase), v.scaleExp);
      } else {
        addPairsBelow((*cursors)[r], v, ce, acc, accBase);
      }
    }
  }
}

// ---- CRC32C ----

namespace {

// Slicing-by-8 tables of the reflected Castagnoli polynomial.
struct Crc32cTables {
  uint32_t t[8][256];
  Crc32cTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
};

const Crc32cTables& crcTables() {
  static const Crc32cTables tables;
  return tables;
}

#if SPCCL_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32cSse42(uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32cSoftware(uint32_t crc, const void* data, size_t n) {
  const Crc32cTables& T = crcTables();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {  // little-endian word loads
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = T.t[7][lo & 0xFFu] ^ T.t[6][(lo >> 8) & 0xFFu] ^ T.t[5][(lo >> 16) & 0xFFu] ^ T.t[4][lo >> 24] ^
        T.t[3][hi & 0xFFu] ^ T.t[2][(hi >> 8) & 0xFFu] ^ T.t[1][(hi >> 16) & 0xFFu] ^ T.t[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ T.t[0][(c ^ *p) & 0xFFu];
  return ~c;
}

bool crc32cHardwareAvailable() {
#if SPCCL_CRC32C_X86
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
#else
  return false;
#endif
}

uint32_t crc32cHardware(uint32_t crc, const void* data, size_t bytes) {
#if SPCCL_CRC32C_X86
  if (crc32cHardwareAvailable()) return crc32cSse42(crc, static_cast<const unsigned char*>(data), bytes);
#endif
  return crc32cSoftware(crc, data, bytes);
}

uint32_t crc32cExtend(uint32_t crc, const void* data, size_t bytes) {
  return crc32cHardwareAvailable() ? crc32cHardware(crc, data, bytes) : crc32cSoftware(crc, data, bytes);
}

uint32_t crc32c(const void* data, size_t bytes) { return crc32cExtend(0, data, bytes); }

namespace {

// CRC of a stream with the 4 bytes at kCrcOffset read as zero.
uint32_t streamCrc(const unsigned char* p, size_t bytes) {
  static const unsigned char kZero[4] = {0, 0, 0, 0};
  uint32_t c = crc32cExtend(0, p, kCrcOffset);
  c = crc32cExtend(c, kZero, sizeof kZero);
  return crc32cExtend(c, p + kCrcOffset + 4, bytes - kCrcOffset - 4);
}

}  // namespace

void Integrity::seal(void* stream, size_t bytes) {
  if (bytes < sizeof(StreamHeader)) return;
  auto* p = static_cast<unsigned char*>(stream);
  if (checksum) {
    p[kFlagsOffset] |= kChecksumFlag;
    const uint32_t crc = streamCrc(p, bytes);
    std::memcpy(p + kCrcOffset, &crc, sizeof crc);
  }
  if (corruptLeft > 0) {  // SPCCL_TEST_CORRUPT_STREAMS: a bit flipped in transit
    --corruptLeft;
    p[bytes / 2] ^= 0x10;
  }
}

Status verifyStream(const void* data, size_t bytes, int peer) {
  if (data == nullptr || bytes < sizeof(StreamHeader)) return Status::ok();  // the parser reports the size
  const auto* p = static_cast<const unsigned char*>(data);
  if ((p[kFlagsOffset] & kChecksumFlag) == 0) return Status::ok();
  uint32_t carried;
  std::memcpy(&carried, p + kCrcOffset, sizeof carried);
  const uint32_t computed = streamCrc(p, bytes);
  if (computed != carried)
    return remoteError(
        formatString("stream from rank %d failed its CRC32C check (SPCCL_CHECKSUM=1): %zu bytes "
                     "hash to 0x%08x, the stream carries 0x%08x; it was corrupted in transit or "
                     "in memory",
                     peer, bytes, computed, carried));
  return Status::ok();
}

}  // namespace spccl
