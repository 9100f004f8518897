#include "codec/codec.h"

#include <algorithm>
#include <cstring>

#include "include/spccl.h"
#include "kernels/host/host_kernels.h"
#include "kernels/host/sections.h"

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
      return compactStreamBytes(nnz, host::bitmapIndexBytes(rangeEnd - rangeBegin), vt);
    default:
      return pairsStreamBytes(nnz, vt);
  }
}

bool pairsEncodingNeedsDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd, ValueType vt) {
  if (setting == kIndexEncodingDelta) return true;
  if (setting != kIndexEncodingAuto) return false;
  // The varints take >= 1 byte per index: skipped where that cannot win.
  const size_t bitmap = compactStreamBytes(nnz, host::bitmapIndexBytes(rangeEnd - rangeBegin), vt);
  return compactStreamBytes(nnz, nnz, vt) < std::min(pairsStreamBytes(nnz, vt), bitmap);
}

IndexEncoding choosePairsEncodingFromDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                                                ValueType vt, uint64_t deltaIndexBytes, size_t* bytes) {
  const size_t coo = pairsStreamBytes(nnz, vt);
  const size_t bitmap = compactStreamBytes(nnz, host::bitmapIndexBytes(rangeEnd - rangeBegin), vt);
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
                   compactStreamBytes(nnz, host::bitmapIndexBytes(len), vt)});
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

// Where a pairs stream's value and index sections start.
struct PairsLayout {
  size_t valuesOffset, indexOffset;
};

StreamHeader pairsHeader(const StreamInfo& info) {
  StreamHeader h = makeHeader(info, StreamKind::kPairs, info.nnz);
  h.indexEncoding = static_cast<uint8_t>(info.encoding);
  return h;
}

PairsLayout pairsLayout(const StreamInfo& info) {
  if (info.encoding == IndexEncoding::kCoo32)
    return PairsLayout{sizeof(StreamHeader) + info.nnz * sizeof(uint32_t), sizeof(StreamHeader)};
  // Compact encodings: values first (they keep their alignment), then the index bytes.
  return PairsLayout{sizeof(StreamHeader), sizeof(StreamHeader) + info.nnz * core::wireValueBytes(info.valueType)};
}

}  // namespace

size_t encodePairs(void* dst, const StreamInfo& info, const uint32_t* indices, const void* wireValues) {
  auto* p = static_cast<unsigned char*>(dst);
  const StreamHeader h = pairsHeader(info);
  std::memcpy(p, &h, sizeof h);
  const PairsLayout l = pairsLayout(info);
  if (info.nnz > 0)  // empty vectors may hand over NULL: memcpy(NULL, 0) is undefined
    std::memcpy(p + l.valuesOffset, wireValues, info.nnz * core::wireValueBytes(info.valueType));
  const size_t used =
      sizeof h + info.nnz * core::wireValueBytes(info.valueType) +
      host::encodeIndexSection(info.encoding, indices, info.nnz, info.rangeBegin, info.rangeEnd, p + l.indexOffset);
  const size_t total = alignStream(used);
  zeroPad(p, used, total);
  return total;
}

Status encodePairsOn(Executor& ex, void* dst, size_t bytes, const StreamInfo& info, const uint32_t* indices,
                     const void* wireValues) {
  auto* p = static_cast<unsigned char*>(dst);
  // The pad after the sections stays zero: the last 8 bytes are zeroed
  // first and the sections, enqueued after, overwrite their part of them.
  if (bytes > sizeof(StreamHeader)) SPCCL_RETURN_IF_ERROR(ex.fill(p + bytes - 8, 0, 8));
  const StreamHeader h = pairsHeader(info);
  SPCCL_RETURN_IF_ERROR(ex.fromHost(p, &h, sizeof h));
  const PairsLayout l = pairsLayout(info);
  if (info.nnz > 0)
    SPCCL_RETURN_IF_ERROR(ex.copy(p + l.valuesOffset, wireValues, info.nnz * core::wireValueBytes(info.valueType)));
  return ex.encodeIndices(info.encoding, indices, info.nnz, info.rangeBegin, info.rangeEnd, p + l.indexOffset);
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

Status encodeDenseOn(Executor& ex, void* dst, const StreamInfo& info, const float* values) {
  auto* p = static_cast<unsigned char*>(dst);
  const StreamHeader h = makeHeader(info, StreamKind::kDense, 0);
  const uint64_t len = info.rangeEnd - info.rangeBegin;
  const size_t used = sizeof h + len * core::wireValueBytes(info.valueType), total = alignStream(used);
  if (total > used) SPCCL_RETURN_IF_ERROR(ex.fill(p + used, 0, total - used));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(p, &h, sizeof h));
  return ex.toWire(values, len, info.valueType, info.scaleExp, p + sizeof h);
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
  SPCCL_RETURN_IF_ERROR(parseStreamHeader(h, data, bytes, e, peer, out));
  if (out->kind != StreamKind::kPairs) return Status::ok();
  return indexCheckStatus(host::checkIndexSection(*out), *out, bytes, peer);
}

namespace {

Status badLayout(int peer, const char* what, uint64_t nnz, size_t bytes, uint64_t len) {
  return remoteError(formatString("stream from rank %d: %s (%llu pairs, %zu bytes, range of %llu)", peer, what,
                                  static_cast<unsigned long long>(nnz), bytes, static_cast<unsigned long long>(len)));
}

}  // namespace

Status parseStreamHeader(const StreamHeader& h, const void* data, size_t bytes, const StreamExpect& e, int peer,
                         StreamView* out) {
  if (bytes < sizeof(StreamHeader) || data == nullptr)
    return remoteError(formatString("stream from rank %d is %zu bytes, shorter than its %zu-byte header", peer, bytes,
                                    sizeof(StreamHeader)));
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
    out->dense = true;
    out->indexMinBytes = out->indexMaxBytes = 0;
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
  const auto badSize = [&](const char* what) { return badLayout(peer, what, h.nnz, bytes, len); };
  out->kind = StreamKind::kPairs;
  out->dense = false;
  out->nnz = h.nnz;
  out->encoding = enc;
  out->indices = nullptr;
  out->indexBytes = nullptr;
  out->indexMinBytes = out->indexMaxBytes = 0;
  out->values = base + sizeof h;
  if (enc == IndexEncoding::kCoo32) {
    out->indices = reinterpret_cast<const uint32_t*>(base + sizeof h);
    out->values = base + sizeof h + h.nnz * sizeof(uint32_t);
    return Status::ok();
  }
  // The index section ends where the stream's 8-byte alignment allows.
  const size_t indexStart = sizeof h + vbytes;
  if (bytes % 8 != 0) return badSize("index section and stream size disagree");
  out->indexBytes = base + indexStart;
  out->indexMaxBytes = bytes - indexStart;
  out->indexMinBytes = bytes - 7 > indexStart ? bytes - 7 - indexStart : 0;
  if (enc == IndexEncoding::kBitmap) {
    const size_t mapBytes = host::bitmapIndexBytes(len);
    if (mapBytes > out->indexMaxBytes) return badSize("truncated index bitmap");
    if (mapBytes < out->indexMinBytes) return badSize("index section and stream size disagree");
  }
  return Status::ok();
}

Status indexCheckStatus(const IndexCheck& c, const WireSection& s, size_t bytes, int peer) {
  const uint64_t len = s.rangeEnd - s.rangeBegin;
  const auto bad = [&](const char* what) { return badLayout(peer, what, s.nnz, bytes, len); };
  switch (c.fault) {
    case IndexFault::kNone:
      return Status::ok();
    case IndexFault::kBadIndex:
      return remoteError(
          formatString("stream from rank %d: index %llu at position %llu is out of range [%llu, %llu) "
                       "or not increasing",
                       peer, static_cast<unsigned long long>(c.index), static_cast<unsigned long long>(c.position),
                       static_cast<unsigned long long>(s.rangeBegin), static_cast<unsigned long long>(s.rangeEnd)));
    case IndexFault::kVarint:
      return bad("truncated index varints, or an index gap of more than 32 bits");
    case IndexFault::kSectionSize:
      return bad("index section and stream size disagree");
    case IndexFault::kPadding:
      return bad("non-zero padding");
    case IndexFault::kBitmapPastRange:
      return bad("index bitmap bits past the range");
    case IndexFault::kBitmapCount:
      return bad("index bitmap with another number of bits set than pairs");
  }
  return bad("unknown index fault");
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

Status crcMismatch(int peer, size_t bytes, uint32_t computed, uint32_t carried) {
  return remoteError(
      formatString("stream from rank %d failed its CRC32C check (SPCCL_CHECKSUM=1): %zu bytes hash to 0x%08x, the "
                   "stream carries 0x%08x; it was corrupted in transit or in memory",
                   peer, bytes, computed, carried));
}

}  // namespace

size_t Integrity::nextFlip(size_t bytes) {
  if (corruptLeft == 0) return SIZE_MAX;
  --corruptLeft;
  return bytes / 2;
}

void Integrity::seal(void* stream, size_t bytes) {
  if (bytes < sizeof(StreamHeader)) return;
  host::sealCrc32c(stream, bytes, kFlagsOffset, checksum ? kChecksumFlag : 0, kCrcOffset, nextFlip(bytes));
}

Status sealStreamOn(Executor& ex, Integrity* integrity, void* stream, size_t bytes) {
  if (integrity == nullptr || (!integrity->checksum && integrity->corruptLeft == 0)) return Status::ok();
  if (bytes < sizeof(StreamHeader)) return Status::ok();  // as Integrity::seal
  return ex.sealCrc32c(stream, bytes, kFlagsOffset, integrity->checksum ? kChecksumFlag : 0, kCrcOffset,
                       integrity->nextFlip(bytes));
}

Status verifyStreamsOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes,
                       size_t count, const void* headers, int firstPeer, std::vector<uint32_t>* computed) {
  static_assert(sizeof(StreamHeader) == sizeof(RowsHeader));
  const auto* h = static_cast<const unsigned char*>(headers);
  const auto sealed = [&](size_t r) {
    return sizes[r] >= sizeof(StreamHeader) && (h[r * sizeof(StreamHeader) + kFlagsOffset] & kChecksumFlag) != 0;
  };
  computed->assign(count, 0);
  // A device executor holds a few dozen results between settles: a batch at a time.
  constexpr size_t kBatch = 32;
  size_t queued = 0;
  for (size_t r = 0; r < count; ++r) {
    if (!sealed(r)) continue;
    SPCCL_RETURN_IF_ERROR(ex.streamCrc32c(data + offsets[r], sizes[r], kCrcOffset, &(*computed)[r]));
    if (++queued % kBatch == 0) SPCCL_RETURN_IF_ERROR(ex.settle());
  }
  if (queued == 0) return Status::ok();
  SPCCL_RETURN_IF_ERROR(ex.settle());
  for (size_t r = 0; r < count; ++r) {
    if (!sealed(r)) continue;
    uint32_t carried;
    std::memcpy(&carried, h + r * sizeof(StreamHeader) + kCrcOffset, sizeof carried);
    if ((*computed)[r] != carried)
      return crcMismatch(firstPeer + static_cast<int>(r), sizes[r], (*computed)[r], carried);
  }
  return Status::ok();
}

Status fetchHeadersOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes, size_t count,
                      int firstPeer, StreamsScratch* scratch) {
  static_assert(sizeof(RowsHeader) == sizeof(StreamHeader), "one header fetch for every stream kind");
  scratch->headers.assign(count, StreamHeader{});
  for (size_t r = 0; r < count; ++r)
    if (sizes[r] >= sizeof(StreamHeader))
      SPCCL_RETURN_IF_ERROR(ex.toHost(&scratch->headers[r], data + offsets[r], sizeof(StreamHeader)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  return verifyStreamsOn(ex, data, offsets, sizes, count, scratch->headers.data(), firstPeer, &scratch->crcs);
}

Status reduceStreamsOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes,
                       size_t count, const StreamExpect& expect, float* out, uint64_t outBase, StreamsScratch* scratch,
                       int firstPeer) {
  const auto fail = [&](const Status& st) -> Status {
    SPCCL_RETURN_IF_ERROR(
        ex.fill(out + (expect.rangeBegin - outBase), 0, (expect.rangeEnd - expect.rangeBegin) * sizeof(float)));
    return st;
  };
  scratch->views.resize(count);
  scratch->sections.resize(count);
  scratch->checks.resize(count);
  const Status verified = fetchHeadersOn(ex, data, offsets, sizes, count, firstPeer, scratch);
  if (!verified.isOk()) return fail(verified);
  for (size_t r = 0; r < count; ++r) {
    const int peer = firstPeer + static_cast<int>(r);
    const Status st =
        parseStreamHeader(scratch->headers[r], data + offsets[r], sizes[r], expect, peer, &scratch->views[r]);
    if (!st.isOk()) return fail(st);
    if (scratch->views[r].kind == StreamKind::kError)  // expect.allowError: the sender failed its part
      return fail(Status(scratch->views[r].peerStatus,
                         formatString("rank %d failed its part of the call and sent an error marker (%s)", peer,
                                      resultString(scratch->views[r].peerStatus))));
    scratch->sections[r] = scratch->views[r];
  }
  SPCCL_RETURN_IF_ERROR(ex.reduceSections(scratch->sections.data(), count, out, outBase, scratch->checks.data()));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  for (size_t r = 0; r < count; ++r) {
    const Status st =
        indexCheckStatus(scratch->checks[r], scratch->sections[r], sizes[r], firstPeer + static_cast<int>(r));
    if (!st.isOk()) return fail(st);
  }
  return Status::ok();
}

Status verifyStream(const void* data, size_t bytes, int peer) {
  if (data == nullptr || bytes < sizeof(StreamHeader)) return Status::ok();  // the parser reports the size
  const auto* p = static_cast<const unsigned char*>(data);
  if ((p[kFlagsOffset] & kChecksumFlag) == 0) return Status::ok();
  uint32_t carried;
  std::memcpy(&carried, p + kCrcOffset, sizeof carried);
  const uint32_t computed = host::streamCrc32c(p, bytes, kCrcOffset);
  return computed == carried ? Status::ok() : crcMismatch(peer, bytes, computed, carried);
}

}  // namespace spccl
