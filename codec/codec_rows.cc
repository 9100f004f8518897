// Row streams: alltoall rows (forward), values only (backward), id rows
// (row-sparse allreduce). Layouts in codec.h. As for pairs streams, every
// length, count, position and id of a received stream is checked before use.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <string>

#include "codec/codec.h"

namespace spccl {

using core::ValueType;

namespace {

size_t pad4(size_t b) { return (b + 3) & ~size_t{3}; }

// Id rows carry spcclFloat32 or spcclFloat64 values.
uint8_t idRowsValueType(uint32_t valueBytes) {
  return static_cast<uint8_t>(valueBytes == 8 ? spcclFloat64 : spcclFloat32);
}

RowsHeader makeRowsHeader(StreamKind kind, Collective coll, IndexEncoding enc, uint8_t valueType, uint64_t rows,
                          uint64_t rowLen, uint64_t keep, uint64_t nnz, uint64_t seq) {
  RowsHeader h{};
  h.magic = kStreamMagic;
  h.version =
      valueType == kRowsInt8ValueType || valueType == kRowsBoundedValueType ? kStreamVersionRowsCodec : kStreamVersion;
  h.indexEncoding = static_cast<uint8_t>(enc);
  h.valueType = valueType;
  h.kind = static_cast<uint8_t>(kind);
  h.collective = static_cast<uint8_t>(coll);
  h.rows = rows;
  h.rowLen = rowLen;
  h.keepPerRow = keep;
  h.nnz = nnz;
  h.seq = seq;
  return h;
}

IndexEncoding encodingFor(uint32_t bytes) {
  return bytes == 1 ? IndexEncoding::kRow8 : bytes == 2 ? IndexEncoding::kRow16 : IndexEncoding::kRow32;
}

size_t finish(unsigned char* p, size_t used) {
  const size_t total = alignStream(used);
  if (total > used) std::memset(p + used, 0, total - used);
  return total;
}

uint32_t loadU32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Shared header checks of the row kinds: the fields, then a stream in host memory.
Status checkRowsHeaderFields(const RowsHeader* h, StreamKind kind, uint64_t seq, int peer) {
  // A codec's value type comes only with its version, and only on rows and values streams.
  const bool coded =
      (h->valueType == kRowsInt8ValueType && (kind == StreamKind::kRows || kind == StreamKind::kValues)) ||
      (h->valueType == kRowsBoundedValueType && kind == StreamKind::kRows);
  if (h->magic != kStreamMagic || h->version != (coded ? kStreamVersionRowsCodec : kStreamVersion))
    return remoteError(formatString("stream from rank %d has bad magic or version", peer));
  if (h->seq != seq)
    return invalidUsage(
        formatString("rank %d is at collective call #%llu, this rank at #%llu: the ranks' call "
                     "sequences differ",
                     peer, static_cast<unsigned long long>(h->seq), static_cast<unsigned long long>(seq)));
  // fp8 rows/values streams carry their scale exponent in the status byte
  // (checked by rowsScale); elsewhere non-zero is the row-sparse partition's
  // flagged stage-3 stream.
  const bool scaled = h->valueType == static_cast<uint8_t>(ValueType::kFloat8e4m3) &&
                      (kind == StreamKind::kRows || kind == StreamKind::kValues);
  if (h->status != 0 && !scaled)
    return remoteError(formatString("rank %d reports that it rejected its input (spcclResult_t %u); see its log", peer,
                                    static_cast<unsigned>(h->status)));
  const bool sealed = (h->flags & kChecksumFlag) != 0;  // reserved1 holds the (verified) CRC
  if (h->kind != static_cast<uint8_t>(kind) || (h->flags & ~kChecksumFlag) != 0 || (!sealed && h->reserved1 != 0))
    return remoteError(formatString("stream from rank %d has kind %u, expected %u (or non-zero reserved fields)", peer,
                                    static_cast<unsigned>(h->kind), static_cast<unsigned>(kind)));
  return Status::ok();
}

Status shorterThanHeader(size_t bytes, int peer) {
  return remoteError(formatString("stream from rank %d is %zu bytes, shorter than its header", peer, bytes));
}

Status checkRowsHeader(const void* data, size_t bytes, StreamKind kind, uint64_t seq, int peer, RowsHeader* h) {
  if (data == nullptr || bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  std::memcpy(h, data, sizeof *h);
  return checkRowsHeaderFields(h, kind, seq, peer);
}

// What every kRows stream is checked for before its layout: the header,
// the shape this rank expects, the value type and index encoding, and the
// claimed counts bounded by the block (before any multiplication can
// overflow).
Status checkRowsPrefixFields(const RowsHeader* h, size_t bytes, uint64_t rows, uint64_t rowLen, uint8_t expectedType,
                             uint64_t seq, int peer) {
  SPCCL_RETURN_IF_ERROR(checkRowsHeaderFields(h, StreamKind::kRows, seq, peer));
  if (h->rows != rows || h->rowLen != rowLen)
    return invalidUsage(formatString("rank %d sent %llu rows of %llu, this rank expects %llu rows of %llu", peer,
                                     static_cast<unsigned long long>(h->rows),
                                     static_cast<unsigned long long>(h->rowLen), static_cast<unsigned long long>(rows),
                                     static_cast<unsigned long long>(rowLen)));
  const uint32_t ib = rowIndexBytes(rowLen);
  if (h->valueType != expectedType || h->indexEncoding != static_cast<uint8_t>(encodingFor(ib)))
    return invalidUsage(
        formatString("rank %d sent value type %u / index encoding %u, expected %u / %u (a different "
                     "SPCCL_VALUE_TYPE or SPCCL_ROWS_CODEC?)",
                     peer, static_cast<unsigned>(h->valueType), static_cast<unsigned>(h->indexEncoding),
                     static_cast<unsigned>(expectedType), static_cast<unsigned>(encodingFor(ib))));
  if (h->keepPerRow > rowLen || rows > bytes || h->nnz > rows * rowLen)
    return remoteError(formatString("rows stream from rank %d claims %llu entries (%llu per row) in %llu rows of %llu",
                                    peer, static_cast<unsigned long long>(h->nnz),
                                    static_cast<unsigned long long>(h->keepPerRow),
                                    static_cast<unsigned long long>(rows), static_cast<unsigned long long>(rowLen)));
  return Status::ok();
}

Status checkRowsPrefix(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, uint8_t expectedType,
                       uint64_t seq, int peer, RowsHeader* h) {
  if (data == nullptr || bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  std::memcpy(h, data, sizeof *h);
  return checkRowsPrefixFields(h, bytes, rows, rowLen, expectedType, seq, peer);
}

// The counts and positions of a rows stream whose header passed
// checkRowsPrefix (positions nullptr unless `withPositions`).
RowsView rowsViewOf(const RowsHeader& h, const unsigned char* base, bool withPositions) {
  RowsView v;
  v.rows = h.rows;
  v.rowLen = h.rowLen;
  v.nnz = h.nnz;
  v.keepPerRow = h.keepPerRow;
  const bool perRow = h.keepPerRow == 0;
  v.counts = perRow ? base + sizeof h : nullptr;
  v.positions = withPositions ? base + sizeof h + (perRow ? h.rows * sizeof(uint32_t) : 0) : nullptr;
  v.indexBytes = rowIndexBytes(h.rowLen);
  return v;
}

// The scale exponent of a validated header whose value type matched: fp8's
// from the status byte, bounds-checked; 0 otherwise.
Status rowsScale(const RowsHeader& h, int peer, int* scaleExp) {
  *scaleExp = 0;
  if (h.valueType != static_cast<uint8_t>(ValueType::kFloat8e4m3)) return Status::ok();
  const int s = static_cast<int8_t>(h.status);
  if (s < core::kFp8MinScaleExp || s > core::kFp8MaxScaleExp)
    return remoteError(formatString("fp8 rows stream from rank %d has scale exponent %d outside [%d, %d]", peer, s,
                                    core::kFp8MinScaleExp, core::kFp8MaxScaleExp));
  *scaleExp = s;
  return Status::ok();
}

void setScale(RowsHeader* h, int scaleExp) {
  if (h->valueType == static_cast<uint8_t>(ValueType::kFloat8e4m3))
    h->status = static_cast<uint8_t>(static_cast<int8_t>(scaleExp));
}

size_t storePositions(unsigned char* dst, const uint32_t* positions, uint64_t nnz, uint32_t ib) {
  host::narrowPositions(positions, nnz, ib, dst);
  return nnz * ib;
}

template <ValueType kVt>
void storeFloatsAs(unsigned char* section, const float* values, uint64_t nnz, int scaleExp) {
  for (uint64_t j = 0; j < nnz; ++j) core::storeWireValue(section, j, values[j], kVt, scaleExp);
}

// A value section of vt from values of valuesType: vt itself (not fp8) is
// copied; anything else must be fp32, converted (fp8 scaled by the largest
// finite magnitude). Returns the scale exponent (0 unless fp8).
int storeValues(unsigned char* section, const void* values, ValueType valuesType, uint64_t nnz, ValueType vt) {
  if (valuesType == vt && vt != ValueType::kFloat8e4m3) {
    if (nnz > 0) std::memcpy(section, values, nnz * core::wireValueBytes(vt));
    return 0;
  }
  assert(valuesType == ValueType::kFloat32);  // the contract above; every caller passes vt or fp32
  const auto* f = static_cast<const float*>(values);
  const int scaleExp = fp8ScaleForValues(f, nnz, vt);
  switch (vt) {
    case ValueType::kFloat16:
      storeFloatsAs<ValueType::kFloat16>(section, f, nnz, scaleExp);
      break;
    case ValueType::kBfloat16:
      storeFloatsAs<ValueType::kBfloat16>(section, f, nnz, scaleExp);
      break;
    case ValueType::kFloat8e4m3:
      storeFloatsAs<ValueType::kFloat8e4m3>(section, f, nnz, scaleExp);
      break;
    default:
      storeFloatsAs<ValueType::kFloat32>(section, f, nnz, scaleExp);
  }
  return scaleExp;
}

template <typename CountOf>
Status checkRowCountsOf(CountOf countOf, uint64_t rows, uint64_t rowLen, uint64_t nnz, int peer) {
  uint64_t j = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint64_t c = countOf(r);
    if (c == 0 || c > rowLen || j + c > nnz)
      return remoteError(formatString("rows stream from rank %d: row %llu keeps %llu entries", peer,
                                      static_cast<unsigned long long>(r), static_cast<unsigned long long>(c)));
    j += c;
  }
  if (j != nnz) return remoteError(formatString("rows stream from rank %d: row counts do not add up to nnz", peer));
  return Status::ok();
}

// Every row's count (1..rowLen, adding up to nnz), then every position (in
// range, increasing within the row), appended to `positions` when given; a
// view without positions (nullptr: every row keeps all rowLen, in order)
// appends 0..rowLen-1 per row. A refused stream appends nothing.
Status checkCountsAndPositions(const RowsView& v, int peer, std::vector<uint32_t>* positions) {
  SPCCL_RETURN_IF_ERROR(checkRowCountsOf([&](uint64_t r) { return v.countOf(r); }, v.rows, v.rowLen, v.nnz, peer));
  uint32_t* kept = nullptr;
  if (positions) {
    positions->resize(positions->size() + v.nnz);
    kept = positions->data() + positions->size() - v.nnz;
  }
  if (v.positions == nullptr) {
    for (uint64_t e = 0; kept && e < v.nnz; ++e) kept[e] = static_cast<uint32_t>(e % v.rowLen);
    return Status::ok();
  }
  uint32_t badPos = 0;
  const uint64_t bad = host::widenRowPositions(
      v.positions, v.indexBytes, v.rows, static_cast<uint32_t>(v.rowLen), [&](uint64_t r) { return v.countOf(r); },
      kept, &badPos);
  if (bad != 0) {
    if (positions) positions->resize(positions->size() - v.nnz);  // a refused stream appends nothing
    return badRowPositions(peer, bad - 1, &badPos);
  }
  return Status::ok();
}

// After a rows stream's header: the per-row counts (keepPerRow 0), the
// positions in ib bytes each (ib 0: none, implied), zeros to 4 bytes.
// Returns where the next section starts.
size_t storeCountsAndPositions(unsigned char* p, uint64_t rows, uint64_t keepPerRow, const uint32_t* counts,
                               const uint32_t* positions, uint64_t nnz, uint32_t ib) {
  size_t off = sizeof(RowsHeader);
  if (keepPerRow == 0 && rows > 0) {
    std::memcpy(p + off, counts, rows * sizeof(uint32_t));
    off += rows * sizeof(uint32_t);
  }
  if (ib != 0) off += storePositions(p + off, positions, nnz, ib);
  const size_t next = pad4(off);
  std::memset(p + off, 0, next - off);
  return next;
}

// Per row r, its scale and counts[r] codes: scales (rows x fp32) then codes.
void storeInt8Rows(unsigned char* scales, unsigned char* codes, const float* values, const uint32_t* counts,
                   uint64_t rows) {
  std::vector<uint64_t> offsets(rows + 1, 0);
  for (uint64_t r = 0; r < rows; ++r) offsets[r + 1] = offsets[r] + counts[r];
  host::encodeRowsInt8(values, offsets.data(), rows, scales, codes);
}

// Every scale of a received int8 stream finite and >= 0 (a NaN or negative
// scale would decode to values no honest sender makes).
bool validScales(const unsigned char* scales, uint64_t rows, uint64_t* bad) {
  for (uint64_t r = 0; r < rows; ++r) {
    if (!core::int8ScaleValid(loadScale(scales, r))) {
      *bad = r;
      return false;
    }
  }
  return true;
}

}  // namespace

int fp8ScaleForValues(const float* values, uint64_t nnz, ValueType vt) {
  if (vt != ValueType::kFloat8e4m3) return 0;
  uint32_t maxKey = 0;
  for (uint64_t j = 0; j < nnz; ++j) {
    const uint32_t key = core::magnitudeKey(values[j]);
    if (!core::isNonFiniteKey(key) && key > maxKey) maxKey = key;
  }
  return core::fp8ScaleForMax(maxKey);
}

uint32_t rowIndexBytes(uint64_t rowLen) { return rowLen <= 256 ? 1u : rowLen <= 65536 ? 2u : 4u; }

size_t rowsStreamBytes(uint64_t rows, uint64_t rowLen, uint64_t nnz, bool perRowCounts, ValueType vt) {
  return alignStream(rowsLayout(rows, rowLen, perRowCounts, nnz).valuesAt + nnz * core::wireValueBytes(vt));
}

size_t valuesStreamBytes(uint64_t nnz, ValueType vt) {
  return alignStream(sizeof(RowsHeader) + nnz * core::wireValueBytes(vt));
}

size_t rowsStreamBytesInt8(uint64_t rows, uint64_t rowLen, uint64_t nnz, bool perRowCounts) {
  return alignStream(rowsLayout(rows, rowLen, perRowCounts, nnz).valuesAt + rows * sizeof(float) + nnz);
}

size_t valuesStreamBytesInt8(uint64_t rows, uint64_t nnz) {
  return alignStream(sizeof(RowsHeader) + rows * sizeof(float) + nnz);
}

size_t idRowsStreamBytes(uint64_t nIds, uint64_t rowLen, uint32_t valueBytes) {
  return alignStream(sizeof(RowsHeader) + nIds * (sizeof(int64_t) + rowLen * valueBytes));
}

size_t encodeRows(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                  const uint32_t* positions, const void* values, ValueType valuesType, uint64_t nnz, ValueType vt,
                  uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const uint32_t ib = rowIndexBytes(rowLen);
  const size_t valuesAt = storeCountsAndPositions(p, rows, keepPerRow, counts, positions, nnz, ib);
  const int scaleExp = storeValues(p + valuesAt, values, valuesType, nnz, vt);
  const RowsHeader h = rowsStreamHeader(rows, rowLen, keepPerRow, nnz, vt, scaleExp, seq);
  std::memcpy(p, &h, sizeof h);
  return finish(p, valuesAt + nnz * core::wireValueBytes(vt));
}

size_t encodeValues(void* dst, const void* values, ValueType valuesType, uint64_t nnz, uint64_t rows, uint64_t rowLen,
                    ValueType vt, uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const RowsHeader h =
      valuesStreamHeader(nnz, rows, rowLen, vt, storeValues(p + sizeof(RowsHeader), values, valuesType, nnz, vt), seq);
  std::memcpy(p, &h, sizeof h);
  return finish(p, sizeof h + nnz * core::wireValueBytes(vt));
}

size_t encodeRowsInt8(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                      const uint32_t* positions, const float* values, uint64_t nnz, uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const uint32_t ib = rowIndexBytes(rowLen);
  const size_t scalesAt = storeCountsAndPositions(p, rows, keepPerRow, counts, positions, nnz, ib);
  const size_t codesAt = scalesAt + rows * sizeof(float);
  storeInt8Rows(p + scalesAt, p + codesAt, values, counts, rows);
  const RowsHeader h = rowsStreamHeaderInt8(rows, rowLen, keepPerRow, nnz, seq);
  std::memcpy(p, &h, sizeof h);
  return finish(p, codesAt + nnz);
}

size_t encodeValuesInt8(void* dst, const float* values, const uint32_t* counts, uint64_t rows, uint64_t rowLen,
                        uint64_t nnz, uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const RowsHeader h = valuesStreamHeaderInt8(nnz, rows, rowLen, seq);
  std::memcpy(p, &h, sizeof h);
  const size_t codesAt = sizeof h + rows * sizeof(float);
  storeInt8Rows(p + sizeof h, p + codesAt, values, counts, rows);
  return finish(p, codesAt + nnz);
}

RowsHeader idRowsHeader(uint64_t nIds, uint64_t rowLen, uint32_t valueBytes, uint64_t seq) {
  return makeRowsHeader(StreamKind::kIdRows, Collective::kRowSparse, IndexEncoding::kRow32, idRowsValueType(valueBytes),
                        nIds, rowLen, 0, 0, seq);
}

size_t encodeIdRows(void* dst, const int64_t* ids, const void* rows, uint64_t nIds, uint64_t rowLen,
                    uint32_t valueBytes, uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const RowsHeader h = idRowsHeader(nIds, rowLen, valueBytes, seq);
  std::memcpy(p, &h, sizeof h);
  size_t off = sizeof h;
  if (nIds > 0) {
    std::memcpy(p + off, ids, nIds * sizeof(int64_t));
    off += nIds * sizeof(int64_t);
    std::memcpy(p + off, rows, nIds * rowLen * valueBytes);
    off += nIds * rowLen * valueBytes;
  }
  return finish(p, off);
}

uint32_t RowsView::countOf(uint64_t row) const {
  return counts ? loadU32(counts + row * sizeof(uint32_t)) : static_cast<uint32_t>(keepPerRow);
}

Status parseRows(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, ValueType vt, uint64_t seq, int peer,
                 RowsView* out, std::vector<uint32_t>* positions) {
  return parseRowsCoded(data, bytes, rows, rowLen, vt, kRowsCodecWire, seq, peer, out, positions);
}

Status parseRowsCoded(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, ValueType vt, int codec,
                      uint64_t seq, int peer, RowsView* out, std::vector<uint32_t>* positions) {
  if (data == nullptr || bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  RowsHeader h;
  std::memcpy(&h, data, sizeof h);
  RowsLayout layout;
  SPCCL_RETURN_IF_ERROR(checkRowsStreamHeader(h, bytes, rows, rowLen, vt, codec, seq, peer, &layout));
  const auto* base = static_cast<const unsigned char*>(data);
  RowsView v = rowsViewOf(h, base, true);
  v.values = base + layout.valuesAt;
  v.valueType = vt;
  v.scaleExp = layout.scaleExp;
  if (codec == kRowsCodecInt8) {
    v.scales = static_cast<const unsigned char*>(v.values);
    v.values = v.scales + rows * sizeof(float);
    uint64_t bad = 0;
    if (!validScales(v.scales, rows, &bad))
      return remoteError(formatString("int8 rows stream from rank %d: row %llu has scale %g (not finite and >= 0)",
                                      peer, static_cast<unsigned long long>(bad),
                                      static_cast<double>(loadScale(v.scales, bad))));
  }
  SPCCL_RETURN_IF_ERROR(checkCountsAndPositions(v, peer, positions));
  *out = v;
  return Status::ok();
}

Status checkRowCounts(const uint32_t* counts, uint64_t rows, uint64_t rowLen, uint64_t nnz, int peer) {
  return checkRowCountsOf([&](uint64_t r) { return counts[r]; }, rows, rowLen, nnz, peer);
}

Status badRowPositions(int peer, uint64_t row, const uint32_t* badPos) {
  return remoteError(formatString("rows stream from rank %d: row %llu position%s is out of range or not increasing",
                                  peer, static_cast<unsigned long long>(row),
                                  badPos ? formatString(" %u", *badPos).c_str() : ""));
}

RowsHeader rowsStreamHeader(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz, ValueType vt,
                            int scaleExp, uint64_t seq) {
  RowsHeader h = makeRowsHeader(StreamKind::kRows, Collective::kAlltoAllRows, encodingFor(rowIndexBytes(rowLen)),
                                static_cast<uint8_t>(vt), rows, rowLen, keepPerRow, nnz, seq);
  setScale(&h, scaleExp);
  return h;
}

RowsHeader valuesStreamHeader(uint64_t nnz, uint64_t rows, uint64_t rowLen, ValueType vt, int scaleExp, uint64_t seq) {
  RowsHeader h = makeRowsHeader(StreamKind::kValues, Collective::kAlltoAllRowsBackward, IndexEncoding::kRow32,
                                static_cast<uint8_t>(vt), rows, rowLen, 0, nnz, seq);
  setScale(&h, scaleExp);
  return h;
}

Status badInt8Scale(int peer, uint64_t row) {
  return remoteError(formatString("int8 rows stream from rank %d: row %llu has a scale that is not finite and >= 0",
                                  peer, static_cast<unsigned long long>(row)));
}

RowsHeader rowsStreamHeaderInt8(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz, uint64_t seq) {
  return makeRowsHeader(StreamKind::kRows, Collective::kAlltoAllRows, encodingFor(rowIndexBytes(rowLen)),
                        kRowsInt8ValueType, rows, rowLen, keepPerRow, nnz, seq);
}

RowsHeader valuesStreamHeaderInt8(uint64_t nnz, uint64_t rows, uint64_t rowLen, uint64_t seq) {
  return makeRowsHeader(StreamKind::kValues, Collective::kAlltoAllRowsBackward, IndexEncoding::kRow32,
                        kRowsInt8ValueType, rows, rowLen, 0, nnz, seq);
}

RowsLayout rowsLayout(uint64_t rows, uint64_t rowLen, bool perRowCounts, uint64_t nnz) {
  RowsLayout l;
  l.indexBytes = rowIndexBytes(rowLen);
  l.countsAt = sizeof(RowsHeader);
  l.positionsAt = l.countsAt + (perRowCounts ? rows * sizeof(uint32_t) : 0);
  l.valuesAt = pad4(l.positionsAt + nnz * l.indexBytes);
  return l;
}

Status checkRowsStreamHeader(const RowsHeader& h, size_t bytes, uint64_t rows, uint64_t rowLen, ValueType vt, int codec,
                             uint64_t seq, int peer, RowsLayout* out) {
  const bool int8 = codec == kRowsCodecInt8;
  if (bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(
      checkRowsPrefixFields(&h, bytes, rows, rowLen, int8 ? kRowsInt8ValueType : static_cast<uint8_t>(vt), seq, peer));
  int scaleExp = 0;
  SPCCL_RETURN_IF_ERROR(rowsScale(h, peer, &scaleExp));
  const bool perRow = h.keepPerRow == 0;
  const size_t expectedBytes =
      int8 ? rowsStreamBytesInt8(rows, rowLen, h.nnz, perRow) : rowsStreamBytes(rows, rowLen, h.nnz, perRow, vt);
  if ((!perRow && h.nnz != rows * h.keepPerRow) || bytes != expectedBytes)
    return remoteError(formatString("rows stream from rank %d is %zu bytes for %llu entries", peer, bytes,
                                    static_cast<unsigned long long>(h.nnz)));
  *out = rowsLayout(rows, rowLen, h.keepPerRow == 0, h.nnz);
  out->scaleExp = scaleExp;
  return Status::ok();
}

Status checkValuesStreamHeader(const RowsHeader& h, size_t bytes, uint64_t nnz, ValueType vt, uint64_t seq, int peer,
                               int* scaleExp) {
  if (bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(checkRowsHeaderFields(&h, StreamKind::kValues, seq, peer));
  if (h.nnz != nnz || h.valueType != static_cast<uint8_t>(vt))
    return invalidUsage(
        formatString("backward stream from rank %d has %llu values of type %u, this rank's selection "
                     "expects %llu of type %u (a different selection?)",
                     peer, static_cast<unsigned long long>(h.nnz), static_cast<unsigned>(h.valueType),
                     static_cast<unsigned long long>(nnz), static_cast<unsigned>(vt)));
  if (bytes != valuesStreamBytes(nnz, vt))
    return remoteError(formatString("backward stream from rank %d is %zu bytes, expected %zu", peer, bytes,
                                    valuesStreamBytes(nnz, vt)));
  return rowsScale(h, peer, scaleExp);
}

Status parseValues(const void* data, size_t bytes, uint64_t nnz, ValueType vt, uint64_t seq, int peer,
                   const void** values, int* scaleExp) {
  if (data == nullptr || bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  RowsHeader h;
  std::memcpy(&h, data, sizeof h);
  int s = 0;
  SPCCL_RETURN_IF_ERROR(checkValuesStreamHeader(h, bytes, nnz, vt, seq, peer, &s));
  if (scaleExp) *scaleExp = s;
  *values = static_cast<const unsigned char*>(data) + sizeof h;
  return Status::ok();
}

Status checkValuesStreamHeaderInt8(const RowsHeader& h, size_t bytes, uint64_t rows, uint64_t nnz, uint64_t seq,
                                   int peer) {
  if (bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(checkRowsHeaderFields(&h, StreamKind::kValues, seq, peer));
  if (h.nnz != nnz || h.rows != rows || h.valueType != kRowsInt8ValueType)
    return invalidUsage(
        formatString("backward stream from rank %d has %llu values in %llu rows of type %u, this rank's "
                     "selection expects %llu in %llu rows of int8 codes (a different selection or "
                     "SPCCL_ROWS_CODEC?)",
                     peer, static_cast<unsigned long long>(h.nnz), static_cast<unsigned long long>(h.rows),
                     static_cast<unsigned>(h.valueType), static_cast<unsigned long long>(nnz),
                     static_cast<unsigned long long>(rows)));
  if (bytes != valuesStreamBytesInt8(rows, nnz))
    return remoteError(formatString("backward stream from rank %d is %zu bytes, expected %zu", peer, bytes,
                                    valuesStreamBytesInt8(rows, nnz)));
  return Status::ok();
}

Status parseValuesInt8(const void* data, size_t bytes, uint64_t rows, uint64_t nnz, uint64_t seq, int peer,
                       const unsigned char** scales, const int8_t** codes) {
  if (data == nullptr || bytes < sizeof(RowsHeader)) return shorterThanHeader(bytes, peer);
  SPCCL_RETURN_IF_ERROR(verifyStream(data, bytes, peer));
  RowsHeader h;
  std::memcpy(&h, data, sizeof h);
  SPCCL_RETURN_IF_ERROR(checkValuesStreamHeaderInt8(h, bytes, rows, nnz, seq, peer));
  const auto* s = static_cast<const unsigned char*>(data) + sizeof h;
  uint64_t bad = 0;
  if (!validScales(s, rows, &bad))
    return remoteError(formatString("int8 backward stream from rank %d: row %llu has scale %g (not finite and >= 0)",
                                    peer, static_cast<unsigned long long>(bad),
                                    static_cast<double>(loadScale(s, bad))));
  *scales = s;
  *codes = reinterpret_cast<const int8_t*>(s + rows * sizeof(float));
  return Status::ok();
}

// ---- Error-bounded rows (kRowsCodecBounded; layout in codec.h) ----

namespace {

// An LSB-first bit stream: fields of up to 32 bits, byte after byte.
class BitWriter {
 public:
  explicit BitWriter(unsigned char* p) : p_(p) {}
  void put(uint64_t v, uint32_t bits) {
    acc_ |= v << n_;
    n_ += bits;
    for (; n_ >= 8; n_ -= 8, acc_ >>= 8) *p_++ = static_cast<unsigned char>(acc_);
  }
  unsigned char* finish() {  // the last byte's unused bits zero
    if (n_ > 0) *p_++ = static_cast<unsigned char>(acc_);
    acc_ = 0;
    n_ = 0;
    return p_;
  }

 private:
  unsigned char* p_;
  uint64_t acc_ = 0;
  uint32_t n_ = 0;
};

// Reads what BitWriter wrote; the caller bounds the total read by the section.
class BitReader {
 public:
  explicit BitReader(const unsigned char* p) : p_(p) {}
  uint64_t get(uint32_t bits) {
    for (; n_ < bits; n_ += 8) acc_ |= static_cast<uint64_t>(*p_++) << n_;
    const uint64_t v = acc_ & ((uint64_t{1} << bits) - 1);
    acc_ >>= bits;
    n_ -= bits;
    return v;
  }

 private:
  const unsigned char* p_;
  uint64_t acc_ = 0;
  uint32_t n_ = 0;
};

uint32_t rawBitsOf(ValueType raw) { return 8 * core::wireValueBytes(raw); }

// A value of the buffer type `raw` (exact in fp32) as its own bits, and back.
uint32_t rawFromFloat(float x, ValueType raw) {
  if (raw == ValueType::kFloat16) return core::floatToHalfBits(x);
  if (raw == ValueType::kBfloat16) return core::floatToBfloat16Bits(x);
  return core::floatBits(x);
}
float floatFromRaw(uint32_t bits, ValueType raw) {
  if (raw == ValueType::kFloat16) return core::halfBitsToFloat(static_cast<uint16_t>(bits));
  if (raw == ValueType::kBfloat16) return core::bfloat16BitsToFloat(static_cast<uint16_t>(bits));
  return core::bitsFloat(bits);
}

uint32_t zigzag(int32_t v) { return (static_cast<uint32_t>(v) << 1) ^ static_cast<uint32_t>(v >> 31); }
int32_t unzigzag(uint32_t z) { return static_cast<int32_t>((z >> 1) ^ (~(z & 1) + 1)); }

// The code of a finite x whose |x / step| is at most 2^24 - 1/2.
int64_t boundedCode(float x, float step) {
  return static_cast<int64_t>(std::floor(static_cast<double>(x) / static_cast<double>(step) + 0.5));
}

// One row's width (kBoundedRawWidth: raw) and, quantized, its base. A row is
// quantized only if every value is finite, codes within +-2^24, decodes (as
// the receiver decodes it, rounded to `raw`) within `bound`, and the packed
// codes and base take fewer bits than the raw values.
uint32_t planBoundedRow(const float* v, uint32_t n, float step, float bound, ValueType raw, int32_t* base) {
  if (step == 0.0f) return kBoundedRawWidth;
  int64_t lo = kBoundedMaxCode, hi = -kBoundedMaxCode;
  for (uint32_t e = 0; e < n; ++e) {
    const float x = v[e];
    if (!(x - x == 0.0f)) return kBoundedRawWidth;  // NaN or Inf
    if (!(std::fabs(static_cast<double>(x) / static_cast<double>(step)) <= static_cast<double>(kBoundedMaxCode) - 0.5))
      return kBoundedRawWidth;
    const int64_t q = boundedCode(x, step);
    const float d = core::roundToWire(boundedDecode(q, step), raw);
    if (!(std::fabs(static_cast<double>(x) - static_cast<double>(d)) <= static_cast<double>(bound)))
      return kBoundedRawWidth;
    lo = std::min(lo, q);
    hi = std::max(hi, q);
  }
  if (n == 0) lo = hi = 0;
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  const uint32_t width = span == 0 ? 0 : 64 - static_cast<uint32_t>(__builtin_clzll(span));
  *base = static_cast<int32_t>(lo);
  const uint64_t packed = uint64_t{width} * n + 8 * uint64_t{varintBytes(zigzag(*base))};
  return width <= kBoundedMaxWidth && packed < uint64_t{rawBitsOf(raw)} * n ? width : kBoundedRawWidth;
}

// Bytes of the sections before the step.
size_t boundedStepAt(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz) {
  const bool implied = keepPerRow != 0 && keepPerRow == rowLen;
  return pad4(sizeof(RowsHeader) + (keepPerRow == 0 ? rows * sizeof(uint32_t) : 0) +
              (implied ? 0 : nnz * rowIndexBytes(rowLen)));
}

}  // namespace

float boundedStep(float bound) {
  if (!(bound > 0.0f && bound <= 3.4028235e38f)) return 0.0f;
  const double b = std::min(static_cast<double>(bound), 1e38);
  return static_cast<float>(2.0 * b * (1.0 - 1.0 / 4096.0));
}

float boundedDecode(int64_t q, float step) {
  return core::clampToFloat(static_cast<double>(q) * static_cast<double>(step));
}

float rowsCallBound(const float* values, uint64_t n, float bound, bool relative, double decay, uint64_t call) {
  double b = bound;
  if (relative) {
    float lo = 0.0f, hi = 0.0f;
    bool any = false;
    for (uint64_t j = 0; j < n; ++j) {
      const float x = values[j];
      if (!(x - x == 0.0f)) continue;
      lo = any ? std::min(lo, x) : x;
      hi = any ? std::max(hi, x) : x;
      any = true;
    }
    b *= static_cast<double>(hi) - static_cast<double>(lo);
  }
  if (decay != 1.0) b *= std::pow(decay, static_cast<double>(call));
  return static_cast<float>(b > 1e38 ? 1e38 : b >= 0 ? b : 0.0);
}

size_t rowsStreamMaxBytesBounded(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz, ValueType raw) {
  // A quantized row takes fewer bits, base included, than its raw values.
  return alignStream(boundedStepAt(rows, rowLen, keepPerRow, nnz) + sizeof(float) + rows +
                     nnz * core::wireValueBytes(raw) + 5 * rows + 1);
}

size_t encodeRowsBounded(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                         const uint32_t* positions, const float* values, uint64_t nnz, float bound, ValueType raw,
                         uint64_t seq) {
  auto* p = static_cast<unsigned char*>(dst);
  const uint32_t ib = rowIndexBytes(rowLen);
  const bool implied = keepPerRow != 0 && keepPerRow == rowLen;
  const size_t stepAt = storeCountsAndPositions(p, rows, keepPerRow, counts, positions, nnz, implied ? 0 : ib);
  const float step = boundedStep(bound);
  std::memcpy(p + stepAt, &step, sizeof step);
  unsigned char* widths = p + stepAt + sizeof step;
  // Pass 1: each row's width, and the bases of the quantized rows.
  unsigned char* bases = widths + rows;
  unsigned char* at = bases;
  uint64_t e = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    int32_t base = 0;
    const uint32_t w = planBoundedRow(values + e, counts[r], step, bound, raw, &base);
    widths[r] = static_cast<unsigned char>(w);
    if (w != kBoundedRawWidth) at = putVarint(at, zigzag(base));
    e += counts[r];
  }
  // Pass 2: the codes (the same arithmetic as pass 1), or the raw values.
  const unsigned char* nextBase = bases;
  BitWriter codes(at);
  e = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    if (widths[r] == kBoundedRawWidth) {
      for (uint32_t c = 0; c < counts[r]; ++c, ++e) codes.put(rawFromFloat(values[e], raw), rawBitsOf(raw));
      continue;
    }
    uint32_t z = 0;
    readVarint32(&nextBase, at, &z);
    const int64_t base = unzigzag(z);
    for (uint32_t c = 0; c < counts[r]; ++c, ++e)
      codes.put(static_cast<uint64_t>(boundedCode(values[e], step) - base), widths[r]);
  }
  const size_t used = static_cast<size_t>(codes.finish() - p);
  const RowsHeader h = makeRowsHeader(StreamKind::kRows, Collective::kAlltoAllRows, encodingFor(ib),
                                      kRowsBoundedValueType, rows, rowLen, keepPerRow, nnz, seq);
  std::memcpy(p, &h, sizeof h);
  return finish(p, used);
}

Status parseRowsBounded(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, ValueType raw, uint64_t seq,
                        int peer, RowsView* out, std::vector<uint32_t>* positions, std::vector<float>* decoded) {
  RowsHeader h;
  SPCCL_RETURN_IF_ERROR(checkRowsPrefix(data, bytes, rows, rowLen, kRowsBoundedValueType, seq, peer, &h));
  const bool perRow = h.keepPerRow == 0;
  const bool implied = !perRow && h.keepPerRow == rowLen;
  const size_t stepAt = boundedStepAt(rows, rowLen, h.keepPerRow, h.nnz);
  if ((!perRow && h.nnz != rows * h.keepPerRow) || bytes < stepAt + sizeof(float) || bytes - stepAt - 4 < rows)
    return remoteError(formatString("bounded rows stream from rank %d is %zu bytes for %llu entries", peer, bytes,
                                    static_cast<unsigned long long>(h.nnz)));
  const auto* base = static_cast<const unsigned char*>(data);
  const unsigned char* end = base + bytes;
  RowsView v = rowsViewOf(h, base, !implied);
  v.valueType = raw;
  // The padding after the positions, then the counts and positions.
  for (size_t i = sizeof h + (perRow ? rows * sizeof(uint32_t) : 0) + (implied ? 0 : h.nnz * v.indexBytes); i < stepAt;
       ++i)
    if (base[i] != 0) return remoteError(formatString("bounded rows stream from rank %d: non-zero padding", peer));
  const size_t first = positions ? positions->size() : 0;
  SPCCL_RETURN_IF_ERROR(checkCountsAndPositions(v, peer, positions));
  auto refuse = [&](const std::string& what) {
    if (positions) positions->resize(first);
    return remoteError(formatString("bounded rows stream from rank %d: %s", peer, what.c_str()));
  };
  float step;
  std::memcpy(&step, base + stepAt, sizeof step);
  if (!(step >= 0.0f && step <= 3.4028235e38f))
    return refuse(formatString("step %g (not finite and >= 0)", static_cast<double>(step)));
  const unsigned char* widths = base + stepAt + sizeof step;
  const uint32_t rawBits = rawBitsOf(raw);
  uint64_t bits = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint32_t w = widths[r];
    if (w != kBoundedRawWidth && (w > kBoundedMaxWidth || step == 0.0f))
      return refuse(formatString("row %llu has width %u (step %g)", static_cast<unsigned long long>(r), w,
                                 static_cast<double>(step)));
    bits += uint64_t{v.countOf(r)} * (w == kBoundedRawWidth ? rawBits : w);
  }
  const unsigned char* at = widths + rows;
  for (uint64_t r = 0; r < rows; ++r) {
    if (widths[r] == kBoundedRawWidth) continue;
    uint32_t z = 0;
    if (!readVarint32(&at, end, &z))
      return refuse(formatString("row %llu's base is truncated or over 32 bits", static_cast<unsigned long long>(r)));
    const int64_t b = unzigzag(z);
    if (b < -kBoundedMaxCode || b > kBoundedMaxCode)
      return refuse(formatString("row %llu's base %lld is outside [-2^24, 2^24]", static_cast<unsigned long long>(r),
                                 static_cast<long long>(b)));
  }
  const unsigned char* codes = at;
  const uint64_t codeBytes = (bits + 7) / 8;
  if (codeBytes > static_cast<uint64_t>(end - codes) ||
      alignStream(static_cast<size_t>(codes - base) + codeBytes) != bytes)
    return refuse(formatString("%zu bytes, its sections take %llu", bytes,
                               static_cast<unsigned long long>(static_cast<size_t>(codes - base) + codeBytes)));
  if (bits % 8 != 0 && (codes[codeBytes - 1] >> (bits % 8)) != 0) return refuse("bits set past the last code");
  for (const unsigned char* q = codes + codeBytes; q < end; ++q)
    if (*q != 0) return refuse("non-zero padding");
  // Everything checked: decode.
  decoded->resize(h.nnz);
  float* d = decoded->data();
  BitReader reader(codes);
  const unsigned char* nextBase = widths + rows;
  uint64_t e = 0;
  for (uint64_t r = 0; r < rows; ++r) {
    const uint32_t w = widths[r], c = v.countOf(r);
    if (w == kBoundedRawWidth) {
      for (uint32_t k = 0; k < c; ++k) d[e++] = floatFromRaw(static_cast<uint32_t>(reader.get(rawBits)), raw);
      continue;
    }
    uint32_t z = 0;
    readVarint32(&nextBase, codes, &z);
    const int64_t b = unzigzag(z);
    for (uint32_t k = 0; k < c; ++k) d[e++] = boundedDecode(b + static_cast<int64_t>(reader.get(w)), step);
  }
  *out = v;
  return Status::ok();
}

namespace {

Status checkIdRowsLayout(const RowsHeader& h, size_t bytes, uint64_t rowLen, uint32_t valueBytes, int peer) {
  if (h.rowLen != rowLen || h.valueType != idRowsValueType(valueBytes))
    return invalidUsage(formatString("rank %d sent rows of %llu x %u-byte values, this rank expects %llu x %u", peer,
                                     static_cast<unsigned long long>(h.rowLen), static_cast<unsigned>(h.valueType),
                                     static_cast<unsigned long long>(rowLen), valueBytes));
  if (h.rows > bytes || bytes != idRowsStreamBytes(h.rows, rowLen, valueBytes))
    return remoteError(formatString("id-rows stream from rank %d is %zu bytes for %llu ids", peer, bytes,
                                    static_cast<unsigned long long>(h.rows)));
  return Status::ok();
}

}  // namespace

Status parseIdRowsHeader(const RowsHeader& h, size_t bytes, uint64_t rowLen, uint32_t valueBytes, uint64_t seq,
                         int peer) {
  if (bytes < sizeof h)
    return remoteError(formatString("stream from rank %d is %zu bytes, shorter than its header", peer, bytes));
  SPCCL_RETURN_IF_ERROR(checkRowsHeaderFields(&h, StreamKind::kIdRows, seq, peer));
  return checkIdRowsLayout(h, bytes, rowLen, valueBytes, peer);
}

Status parseIdRows(const void* data, size_t bytes, uint64_t rowLen, uint32_t valueBytes, uint64_t seq, int peer,
                   IdRowsView* out) {
  RowsHeader h;
  SPCCL_RETURN_IF_ERROR(checkRowsHeader(data, bytes, StreamKind::kIdRows, seq, peer, &h));
  SPCCL_RETURN_IF_ERROR(checkIdRowsLayout(h, bytes, rowLen, valueBytes, peer));
  IdRowsView v;
  v.nIds = h.rows;
  v.ids = static_cast<const unsigned char*>(data) + sizeof h;
  v.rows = v.ids + h.rows * sizeof(int64_t);
  for (uint64_t i = 1; i < v.nIds; ++i)
    if (idAt(v, i) <= idAt(v, i - 1))
      return remoteError(formatString("id-rows stream from rank %d: ids not strictly increasing at %llu", peer,
                                      static_cast<unsigned long long>(i)));
  *out = v;
  return Status::ok();
}

int64_t idAt(const IdRowsView& v, uint64_t i) {
  int64_t id;
  std::memcpy(&id, v.ids + i * sizeof(int64_t), sizeof id);
  return id;
}

}  // namespace spccl
