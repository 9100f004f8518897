// Wire format: one self-describing stream per (sender, receiver, stage).
//
//   [StreamHeader, 56 bytes][indices: nnz x uint32][values: nnz x wire type][pad to 8]
//   pairs with a compact index encoding (indexEncoding kDelta or kBitmap):
//   [StreamHeader][values: nnz x wire type][index bytes][pad to 8], where the
//   index bytes are LEB128 varints of the gaps (first index - rangeBegin, then
//   index - previous - 1), or one bit per position of [rangeBegin, rangeEnd)
//   (bit i of byte i/8, LSB first; nnz bits set, none past the range).
//   dense kind: [StreamHeader][values: (rangeEnd-rangeBegin) x wire type][pad to 8]
//   error kind: [StreamHeader] only; `status` holds the sender's spcclResult_t
//   fp8 values (valueType kFloat8e4m3): `status` holds the stream's scale
//   exponent s (int8, in [core::kFp8MinScaleExp, core::kFp8MaxScaleExp]); a
//   value is its e4m3 code times 2^s. Other value types: `status` is 0.
//
// Indices are global positions in the dense buffer, strictly increasing and
// inside [rangeBegin, rangeEnd). Every field of a received stream is checked
// before use: a peer's stream is untrusted input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/core/elementwise.h"
#include "kernels/core/executor.h"
#include "kernels/core/status.h"
#include "kernels/core/wire_section.h"
#include "kernels/host/host_kernels.h"

namespace spccl {

constexpr uint32_t kStreamMagic = 0x4c435053u;  // "SPCL" little-endian
// 2: fp8 value type with the scale exponent in the `status` byte.
constexpr uint16_t kStreamVersion = 2;
// Row streams of a value codec other than the wire type (SPCCL_ROWS_CODEC)
// carry this version, so a reader that predates the codec refuses them, and
// the default streams stay as they were.
constexpr uint16_t kStreamVersionRowsCodec = 3;

// SPCCL_INDEX_ENCODING (choice order): auto picks, per stream, the smallest
// of coo, delta and bitmap from exact sizes computed before encoding.
constexpr int kIndexEncodingAuto = 0;
constexpr int kIndexEncodingCoo = 1;
constexpr int kIndexEncodingDelta = 2;
constexpr int kIndexEncodingBitmap = 3;
enum class StreamKind : uint8_t {
  kPairs = 1,   // (index, value) pairs of a 1-D buffer
  kDense = 2,   // a dense range
  kError = 3,   // the sender failed; header only
  kRows = 4,    // per-row kept positions and values (alltoall rows forward)
  kValues = 5,  // values only, positions known to both sides (alltoall rows backward)
  kIdRows = 6,  // sorted unique int64 ids with one row each (row-sparse allreduce)
};

struct StreamHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t indexEncoding;  // IndexEncoding
  uint8_t valueType;      // core::ValueType
  uint8_t kind;           // StreamKind
  uint8_t algorithm;      // SPCCL_ALGO_* of the call
  uint8_t status;         // kError: the sender's spcclResult_t; fp8 values: the scale exponent (int8)
  uint8_t reserved0;
  uint32_t reserved1;
  uint64_t denseCount;  // elements of the whole buffer
  uint64_t rangeBegin;  // this stream covers [rangeBegin, rangeEnd)
  uint64_t rangeEnd;
  uint64_t nnz;  // pairs (kPairs) or 0
  uint64_t seq;  // the communicator's call sequence number
};
static_assert(sizeof(StreamHeader) == 56, "wire header must stay 56 bytes");
// Where both header layouts keep the checksum flag and the CRC32C (SPCCL_CHECKSUM, below).
constexpr size_t kFlagsOffset = 11;
constexpr size_t kCrcOffset = 12;

constexpr size_t alignStream(size_t bytes) { return (bytes + 7) & ~size_t{7}; }

// LEB128 varints (delta indices, bounded rows' bases): kernels/core/wire_section.h.
using core::putVarint;
using core::readVarint32;
using core::varintBytes;

// A pairs stream with 32-bit indices (kCoo32).
size_t pairsStreamBytes(uint64_t nnz, core::ValueType vt);
// Exact bytes of a pairs stream of these sorted indices in [rangeBegin,
// rangeEnd) with encoding e (kCoo32, kDelta or kBitmap).
size_t encodedPairsBytes(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                         core::ValueType vt);
// The encoding the setting (kIndexEncoding*) gives these pairs, and its
// exact stream size in *bytes; auto takes the smallest (ties: coo, delta,
// bitmap, in that order).
IndexEncoding choosePairsEncoding(int setting, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                                  uint64_t rangeEnd, core::ValueType vt, size_t* bytes);
// The same choice in two steps, for indices the host cannot read (executor
// memory): whether it needs the delta encoding's index bytes (a pass over the
// indices: Executor::deltaIndexBytes), then the choice from that count.
bool pairsEncodingNeedsDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                                  core::ValueType vt);
IndexEncoding choosePairsEncodingFromDeltaBytes(int setting, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                                                core::ValueType vt, uint64_t deltaIndexBytes, size_t* bytes);
// The most bytes an honest pairs stream of nnz pairs over a range of `len`
// can take in any encoding (receivers bound announced sizes with it).
size_t maxPairsStreamBytes(uint64_t nnz, uint64_t len, core::ValueType vt);
size_t denseStreamBytes(uint64_t len, core::ValueType vt);
constexpr size_t kErrorStreamBytes = sizeof(StreamHeader);

// Exchanged (allgather) at the start of every compressed call: every rank
// sees every rank's descriptor, so all ranks agree on whether the call is
// consistent, and on each rank's stream size, before any stream moves.
struct CallDescriptor {
  uint32_t magic;
  uint8_t algorithm;  // SPCCL_ALGO_* actually taken (other collectives: their own codes)
  uint8_t valueType;  // wire value type
  uint8_t dataType;   // user spcclDataType_t
  uint8_t op;         // allreduce: spcclRedOp_t; other collectives: kOtherCollective | Collective
  uint64_t seq;
  uint64_t count;            // allreduce: elements; others: their size (e.g. rows per peer x rowLen)
  uint64_t nnz;              // allreduce: this rank's selected entries (may differ); others: a shape
                             // parameter every rank must agree on (e.g. rowLen)
  uint64_t streamBytes = 0;  // allreduce (allgather algorithm) and sparsified allgather: the size of
                             // this rank's stream, whose encoding only the sender knows (may differ);
                             // rows forward: entries kept per row, rows backward: the sequence number of
                             // its selection's forward (both must match); else 0
  float density = 0;         // compressed allreduce and sparsified allgather: the density every rank
                             // must share (ranks keeping different fractions is a mismatched call); else 0
  uint32_t flags = 0;        // kCallAuto, kCallFixed, kCallAfterError; must match on every rank
};
constexpr uint8_t kOtherCollective = 0x80;
// flags: a compressed allreduce whose algorithm SPCCL_ALGO=auto chose (its
// line-up and settling exchanges too). An auto call on one rank and a fixed
// one on another is a mismatch even where auto chose the fixed algorithm: on
// the host the auto call advanced its call shape's state (src/comm.h
// AutoShape) where the fixed one did not.
constexpr uint32_t kCallAuto = 1;
// flags: a compressed allreduce in SPCCL_CAPACITY_MODE=fixed; its nnz is the
// capacity, the slots every rank sends (all equal).
constexpr uint32_t kCallFixed = 2;
// flags: a fixed-capacity call on a device whose rank had found an earlier
// call's asynchronous error (src/compressor.cc): it still takes part, and
// where only some ranks found it the records differ and nothing is applied.
constexpr uint32_t kCallAfterError = 4;
static_assert(sizeof(CallDescriptor) == 48, "call descriptor must stay 48 bytes");
// Algorithm codes of the two exchanges an SPCCL_AUTO_TRIALS compressor makes
// outside its calls' own (src/compressor.cc): the line-up before each trial
// call, and the settling exchange that opens the call after the last trial.
// Both carry the seq of the call they open (which takes it only when they
// succeed), in nnz the index of the trial call they open (the number of
// trials run, for the settling; ranks must agree), and in streamBytes this
// rank's time of its previous trial call in nanoseconds (kNoTrialTime: none,
// or it failed). They are descriptors like a call's, so a rank in any other
// call meets a descriptor exchange there and every rank reports the
// mismatch; with a plain allreduce as the line-up the ranks would sit in
// different MPI collectives.
constexpr uint8_t kAutoLineUp = 0x40;
constexpr uint8_t kAutoSettle = 0x41;
constexpr uint64_t kNoTrialTime = ~uint64_t{0};

// What the receiver expects of a stream; anything else is rejected.
struct StreamExpect {
  uint64_t denseCount;
  uint64_t rangeBegin;
  uint64_t rangeEnd;
  uint64_t seq;
  uint8_t algorithm;
  core::ValueType valueType;
  bool allowDense;          // owner-stage streams may be dense
  bool allowError = false;  // only split's stage 3 carries error markers
};

// fp8 (vt kFloat8e4m3): the scale exponent that puts the largest finite
// |values[j]| in e4m3's top binade, so no value saturates (streams without a
// residual to take saturation: rows, the sparsified allgather). Other value
// types: 0.
int fp8ScaleForValues(const float* values, uint64_t nnz, core::ValueType vt);

struct StreamInfo {
  uint64_t denseCount, rangeBegin, rangeEnd, nnz, seq;
  uint8_t algorithm;
  core::ValueType valueType;
  StreamKind kind;
  IndexEncoding encoding = IndexEncoding::kCoo32;  // pairs: how the indices are written
  int scaleExp = 0;  // fp8 values: the stream's scale exponent (values already stored with it)
};

// Writes a pairs stream: header, indices in info.encoding, values (already in
// the wire type). `dst` must hold encodedPairsBytes(info.encoding, ...).
// Returns bytes written.
size_t encodePairs(void* dst, const StreamInfo& info, const uint32_t* indices, const void* wireValues);
// encodePairs with indices, values and dst in executor memory: the header
// from the host, the sections written by the executor. `bytes`: the
// stream's size (choosePairsEncodingOn's).
Status encodePairsOn(Executor& ex, void* dst, size_t bytes, const StreamInfo& info, const uint32_t* indices,
                     const void* wireValues);
// encodeDense with values and dst in executor memory (no `decoded`).
Status encodeDenseOn(Executor& ex, void* dst, const StreamInfo& info, const float* values);
// Writes a dense stream of fp32 values converted to the wire type (fp8: with
// info.scaleExp); `decoded` (optional) receives what receivers will decode.
// Returns bytes written.
size_t encodeDense(void* dst, const StreamInfo& info, const float* values, float* decoded);
size_t encodeError(void* dst, const StreamInfo& info, spcclResult_t code);

// A validated view of a received stream: its sections (pairs or a dense
// range, summed by kernels/host/sections.h or Executor::reduceSections),
// its kind and, for an error marker, the sender's status.
struct StreamView : WireSection {
  StreamKind kind;
  spcclResult_t peerStatus;  // kError
};

// Validates everything: size, magic, version, encodings, counts, range, seq,
// index order and bounds. `peer` names the sender in messages.
Status parseStream(const void* data, size_t bytes, const StreamExpect& expect, int peer, StreamView* out);

// parseStream in two steps, for streams in executor memory: the header (a
// copy of the stream's first bytes) checked on the host, out's sections
// pointing into the stream at `data` (not read); then the index section,
// checked where the stream lies (host::checkIndexSection,
// Executor::reduceSections), its finding put into words by indexCheckStatus.
Status parseStreamHeader(const StreamHeader& header, const void* data, size_t bytes, const StreamExpect& expect,
                         int peer, StreamView* out);
Status indexCheckStatus(const IndexCheck& check, const WireSection& s, size_t bytes, int peer);

// ---- Row streams (alltoall rows, backward values, row-sparse id rows) ----
// Same 56 bytes as StreamHeader; the five trailing words mean, per kind:
//   kRows:   rows, rowLen, keepPerRow (0: per-row counts follow the header), nnz, seq
//   kValues: rows, rowLen, 0, nnz, seq
//   kIdRows: nIds, rowLen, 0, 0, seq
// kRows layout: [header][counts: rows x uint32, if keepPerRow == 0]
//               [positions: nnz x 1/2/4 bytes, padded to 4][values][pad to 8]
// kValues layout: [header][values: nnz x wire type][pad to 8]
// kRows and kValues with fp8 values: `status` holds the stream's scale
// exponent (int8), from its largest finite |value| (encodeRows/encodeValues).
// kIdRows layout: [header][ids: nIds x int64][rows: nIds x rowLen x fp32|fp64][pad to 8]
struct RowsHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t indexEncoding;
  uint8_t valueType;
  uint8_t kind;
  uint8_t collective;  // which collective made it (a mismatch is caught)
  uint8_t status;
  uint8_t flags;
  uint32_t reserved1;
  uint64_t rows;
  uint64_t rowLen;
  uint64_t keepPerRow;
  uint64_t nnz;
  uint64_t seq;
};
static_assert(sizeof(RowsHeader) == sizeof(StreamHeader), "row streams share the header size");
static_assert(offsetof(StreamHeader, reserved0) == kFlagsOffset && offsetof(StreamHeader, reserved1) == kCrcOffset &&
                  offsetof(RowsHeader, flags) == kFlagsOffset && offsetof(RowsHeader, reserved1) == kCrcOffset,
              "the checksum flag and CRC sit at the same offsets in both header layouts");

enum class Collective : uint8_t {
  kAlltoAllRows = 1,
  kAlltoAllRowsBackward = 2,
  kAllGather = 3,
  kRowSparse = 4,
  kAlltoAll = 5,  // the exact drop-in alltoall
};

// Exact (uncompressed) calls move no streams, but every rank still agrees on
// the call first: a mismatched exact call (other count, datatype, op, or
// another collective) then fails on every rank instead of reaching MPI with
// shapes that differ. Their descriptors carry algorithm SPCCL_ALGO_DENSE and
// valueType kExactValueType (no wire type), nnz 0.
constexpr uint8_t kExactValueType = 0;
CallDescriptor exactAllReduceDescriptor(uint64_t seq, uint64_t count, int dataType, int op);
// coll: Collective::kAlltoAll or Collective::kAllGather.
CallDescriptor exactCollectiveDescriptor(Collective coll, uint64_t seq, uint64_t count, int dataType);

// ---- Row value codecs (SPCCL_ROWS_CODEC, choice order) ----
// kRowsCodecWire: values in the wire type (SPCCL_VALUE_TYPE), as before.
// kRowsCodecInt8: each row's kept values as int8 codes round(v / scale) with
// scale = max finite |v| of the row's kept values / 127, one fp32 scale per
// row. A finite value decodes to code * scale, within scale / 2 of the
// original (plus the rounding of that product to fp32 and then to the
// buffer type). NaN and +-Inf travel as code -128 and decode to NaN, so a
// non-finite value still arrives as one (its sign and kind are lost).
// Such streams have version kStreamVersionRowsCodec and valueType
// kRowsInt8ValueType (not a core::ValueType); their layouts:
//   kRows:   [header][counts: rows x uint32, if keepPerRow == 0]
//            [positions: nnz x 1/2/4 bytes, padded to 4][scales: rows x fp32][codes: nnz x int8][pad to 8]
//   kValues: [header][scales: rows x fp32][codes: nnz x int8][pad to 8]
// (kValues rows: the rows of the selection; the receiver knows each row's count.)
// Every scale must be finite and >= 0.
// kRowsCodecBounded, kRowsCodecFp16/Bf16/Fp8: see below.
constexpr int kRowsCodecWire = 0;
constexpr int kRowsCodecInt8 = 1;
constexpr int kRowsCodecBounded = 2;
constexpr int kRowsCodecFp16 = 3;
constexpr int kRowsCodecBf16 = 4;
constexpr int kRowsCodecFp8 = 5;
constexpr uint8_t kRowsInt8ValueType = 0x81;
constexpr uint8_t kRowsBoundedValueType = 0x82;
// The int8 rules (scale, encode, decode) are the kernels' (kernels/core/elementwise.h).
using core::int8Decode;
using core::int8Encode;
using core::kInt8NonFinite;

// Bytes of an index entry for rows of rowLen elements: 1 up to 256, 2 up to 65536, else 4.
uint32_t rowIndexBytes(uint64_t rowLen);
size_t rowsStreamBytes(uint64_t rows, uint64_t rowLen, uint64_t nnz, bool perRowCounts, core::ValueType vt);
size_t valuesStreamBytes(uint64_t nnz, core::ValueType vt);
// Id rows carry fp32 values, or fp64 for fp64 input.
size_t idRowsStreamBytes(uint64_t nIds, uint64_t rowLen, uint32_t valueBytes);

// Writes a rows stream. positions holds nnz row-local positions, rows' counts
// in `counts` (all equal to keepPerRow when keepPerRow != 0), values nnz
// values of type valuesType: vt itself (copied as they are; not fp8, whose
// scale comes from the values) or fp32 (converted to vt). Returns bytes written.
size_t encodeRows(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                  const uint32_t* positions, const void* values, core::ValueType valuesType, uint64_t nnz,
                  core::ValueType vt, uint64_t seq);
size_t encodeValues(void* dst, const void* values, core::ValueType valuesType, uint64_t nnz, uint64_t rows,
                    uint64_t rowLen, core::ValueType vt, uint64_t seq);
// The int8 codec's streams (layouts above): values are fp32, counts[r] of
// row r (kRows: as encodeRows, with counts always given).
size_t rowsStreamBytesInt8(uint64_t rows, uint64_t rowLen, uint64_t nnz, bool perRowCounts);
size_t valuesStreamBytesInt8(uint64_t rows, uint64_t nnz);
size_t encodeRowsInt8(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                      const uint32_t* positions, const float* values, uint64_t nnz, uint64_t seq);
size_t encodeValuesInt8(void* dst, const float* values, const uint32_t* counts, uint64_t rows, uint64_t rowLen,
                        uint64_t nnz, uint64_t seq);
// The header of encodeIdRows' stream (a stream built piece by piece in executor memory).
RowsHeader idRowsHeader(uint64_t nIds, uint64_t rowLen, uint32_t valueBytes, uint64_t seq);
size_t encodeIdRows(void* dst, const int64_t* ids, const void* rows, uint64_t nIds, uint64_t rowLen,
                    uint32_t valueBytes, uint64_t seq);

// Streams built piece by piece in executor memory, and checked there (the
// alltoall rows): the headers encodeRows and encodeValues write (fp8: with
// the scale exponent), where a kRows stream's sections lie, and parseRows'
// checks split by what they read. checkRowsStreamHeader: the header (on the
// host; the CRC verified separately) and the stream's size; then the counts
// (checkRowCounts), then the positions (Executor::widenPositions, whose
// finding badRowPositions reports).
RowsHeader rowsStreamHeader(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz, core::ValueType vt,
                            int scaleExp, uint64_t seq);
RowsHeader valuesStreamHeader(uint64_t nnz, uint64_t rows, uint64_t rowLen, core::ValueType vt, int scaleExp,
                              uint64_t seq);
struct RowsLayout {
  size_t countsAt, positionsAt, valuesAt;  // bytes from the stream's start (int8: valuesAt holds the scales)
  uint32_t indexBytes;
  int scaleExp = 0;  // fp8: the stream's, validated
};
RowsLayout rowsLayout(uint64_t rows, uint64_t rowLen, bool perRowCounts, uint64_t nnz);
// The int8 codec's: its kRows stream's scales and codes start at valuesAt.
RowsHeader rowsStreamHeaderInt8(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz, uint64_t seq);
RowsHeader valuesStreamHeaderInt8(uint64_t nnz, uint64_t rows, uint64_t rowLen, uint64_t seq);
Status checkValuesStreamHeaderInt8(const RowsHeader& h, size_t bytes, uint64_t rows, uint64_t nnz, uint64_t seq,
                                   int peer);
// Executor::scatterRowsInt8's finding: row `row`'s scale.
Status badInt8Scale(int peer, uint64_t row);
// codec: kRowsCodecWire (the wire type vt) or kRowsCodecInt8.
Status checkRowsStreamHeader(const RowsHeader& h, size_t bytes, uint64_t rows, uint64_t rowLen, core::ValueType vt,
                             int codec, uint64_t seq, int peer, RowsLayout* out);
Status checkRowCounts(const uint32_t* counts, uint64_t rows, uint64_t rowLen, uint64_t nnz, int peer);
Status badRowPositions(int peer, uint64_t row, const uint32_t* badPos);
Status checkValuesStreamHeader(const RowsHeader& h, size_t bytes, uint64_t nnz, core::ValueType vt, uint64_t seq,
                               int peer, int* scaleExp);

// A validated rows stream: per-row counts (offsets), positions, values.
struct RowsView {
  uint64_t rows, rowLen, nnz, keepPerRow;  // keepPerRow 0: see counts
  const unsigned char* counts;             // rows x uint32 (unaligned-safe reads) or nullptr
  const unsigned char* positions;          // nnz x indexBytes
  uint32_t indexBytes;
  const void* values;
  core::ValueType valueType;
  int scaleExp = 0;                       // fp8: the stream's validated scale exponent
  const unsigned char* scales = nullptr;  // int8 codec: rows x fp32 (validated); values holds the int8 codes
  uint32_t countOf(uint64_t row) const;
  // Position j (indexBytes is 1, 2 or 4: rowIndexBytes). Inline: the decoder
  // and the validation call it once an entry, and an out-of-line memcpy of a
  // run-time length was 5% of an alltoall_perf profile.
  uint32_t positionAt(uint64_t j) const {
    if (indexBytes == 1) return positions[j];
    if (indexBytes == 2) {
      uint16_t v;
      std::memcpy(&v, positions + 2 * j, sizeof v);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, positions + 4 * j, sizeof v);
    return v;
  }
};

// positions, when given, gets the stream's nnz positions appended as they
// are validated (what the receiver keeps for the backward); a refused stream
// leaves it as it was.
Status parseRows(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, core::ValueType vt, uint64_t seq,
                 int peer, RowsView* out, std::vector<uint32_t>* positions = nullptr);
// parseRows for a stream of codec `codec` (kRowsCodec*); kRowsCodecWire is parseRows.
Status parseRowsCoded(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, core::ValueType vt, int codec,
                      uint64_t seq, int peer, RowsView* out, std::vector<uint32_t>* positions = nullptr);
// kRowsCodecFp16, kRowsCodecBf16, kRowsCodecFp8: the wire codec's streams
// with that value type, whatever SPCCL_VALUE_TYPE says, both ways (the
// collective picks the type; the layouts are kRows and kValues above).
//
// kRowsCodecBounded: error-bounded quantization of the forward's values.
// Every decoded value d of a kept value x satisfies |x - d| <= bound (in
// exact arithmetic, d as the receiver's buffer type holds it), and non-finite
// values arrive bit for bit. A value is coded q = round(x / step) with step =
// boundedStep(bound), slightly under 2 x bound, and decodes to
// boundedDecode(q, step), rounded to the buffer type.
// Per row, the codes minus the row's smallest, `base`, are packed in the
// fewest bits that hold the row's span (0 when all codes are equal, at most
// kBoundedMaxWidth); a row with a non-finite value, a code beyond 2^24, a
// decoded value the encoder finds off the bound, or packed codes no smaller
// than its raw values, goes raw: its values in the buffer's own type (16 or
// 32 bits each, `raw`). Layout (kRows, version kStreamVersionRowsCodec,
// valueType kRowsBoundedValueType, status 0):
//   [header][counts: rows x uint32, if keepPerRow == 0]
//   [positions: nnz x 1/2/4 bytes, omitted when keepPerRow == rowLen (every
//    row keeps every position, in order)][pad to 4]
//   [step: fp32, finite, >= 0 (0: every row raw)]
//   [widths: rows x uint8, each 0..kBoundedMaxWidth or kBoundedRawWidth]
//   [bases: one zigzag LEB128 varint (<= 5 bytes) per row that is not raw,
//    in row order, within [-2^24, 2^24]: every code below 2^25 in magnitude]
//   [codes: one bit stream, LSB first, row after row, counts[r] fields of
//    width[r] bits (raw rows: 16 or 32), zero bits to the byte][pad to 8]
// The backward of a bounded forward sends the gradients in the buffer's own
// type (the wire codec's kValues stream): exact.
constexpr uint8_t kBoundedRawWidth = 0xff;
constexpr uint32_t kBoundedMaxWidth = 24;
constexpr int64_t kBoundedMaxCode = int64_t{1} << 24;
// The quantization step of a bound: 2 x bound x (1 - 2^-12), so that the
// fp32 rounding of a decoded value stays inside the bound for values up to
// 2^12 bounds; 0 for a bound that is not finite and > 0 (every row raw),
// and a bound above 1e38 counts as 1e38.
float boundedStep(float bound);
// float(q x step), exact in double, clamped to fp32's finite range.
float boundedDecode(int64_t q, float step);
// The bound of one bounded forward: `bound` (SPCCL_ROWS_ERROR_BOUND), times
// the range (max - min) of the n finite values when `relative`, times
// decay^call (SPCCL_ROWS_ERROR_DECAY; `call` counts the communicator's
// bounded forwards from 0). Clamped to [0, 1e38].
float rowsCallBound(const float* values, uint64_t n, float bound, bool relative, double decay, uint64_t call);
// The most bytes a bounded rows stream can take (the encoder's buffer, and
// the receiver's limit on an announced size); raw: the buffer's value type.
size_t rowsStreamMaxBytesBounded(uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, uint64_t nnz,
                                 core::ValueType raw);
// Writes a bounded rows stream of nnz fp32 values (rows' counts in counts,
// positions as encodeRows) into dst (rowsStreamMaxBytesBounded bytes);
// returns its size.
size_t encodeRowsBounded(void* dst, uint64_t rows, uint64_t rowLen, uint64_t keepPerRow, const uint32_t* counts,
                         const uint32_t* positions, const float* values, uint64_t nnz, float bound, core::ValueType raw,
                         uint64_t seq);
// Validates a bounded rows stream field by field and decodes it: *out gets
// the counts (positionAt is not for this kind: positions may be implied),
// `positions` the nnz positions appended (as parseRows), `decoded` exactly
// nnz fp32 values (resized). A refused stream appends nothing to positions.
Status parseRowsBounded(const void* data, size_t bytes, uint64_t rows, uint64_t rowLen, core::ValueType raw,
                        uint64_t seq, int peer, RowsView* out, std::vector<uint32_t>* positions,
                        std::vector<float>* decoded);

// An int8 values stream of `rows` rows and exactly nnz codes: *scales gets
// the validated rows x fp32 scales, *codes the nnz int8 codes.
Status parseValuesInt8(const void* data, size_t bytes, uint64_t rows, uint64_t nnz, uint64_t seq, int peer,
                       const unsigned char** scales, const int8_t** codes);
inline float loadScale(const unsigned char* scales, uint64_t row) {
  float s;
  std::memcpy(&s, scales + row * sizeof(float), sizeof s);
  return s;
}
// Values stream with exactly `nnz` values of type vt; *scaleExp (if given)
// receives an fp8 stream's validated scale exponent (else 0).
Status parseValues(const void* data, size_t bytes, uint64_t nnz, core::ValueType vt, uint64_t seq, int peer,
                   const void** values, int* scaleExp = nullptr);
struct IdRowsView {
  uint64_t nIds;
  const unsigned char* ids;  // nIds x int64, strictly increasing
  const void* rows;
};
Status parseIdRows(const void* data, size_t bytes, uint64_t rowLen, uint32_t valueBytes, uint64_t seq, int peer,
                   IdRowsView* out);
int64_t idAt(const IdRowsView& v, uint64_t i);
// parseIdRows' checks of a header read out of a `bytes`-byte stream in
// executor memory (its CRC verified, if sealed, by the caller): everything
// but the order of the ids, which Executor::mergeRowLists checks.
Status parseIdRowsHeader(const RowsHeader& h, size_t bytes, uint64_t rowLen, uint32_t valueBytes, uint64_t seq,
                         int peer);

// ---- Stream integrity (SPCCL_CHECKSUM=1) ----
// CRC32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
// final xor ~0), computed by the kernels layer (kernels/host/crc32c.cc,
// kernels/cuda/crc32c.cu).
using host::crc32c;
using host::crc32cExtend;
using host::crc32cHardware;
using host::crc32cHardwareAvailable;
using host::crc32cSoftware;

// Both header layouts have a flags byte at offset 11 (StreamHeader::reserved0,
// RowsHeader::flags) and a 32-bit field at offset 12 (reserved1). A sealed
// stream has kChecksumFlag set in the flags byte and, in the 32-bit field at
// offset 12 (kCrcOffset), the CRC32C of the whole stream (padding included)
// computed with those 4 bytes as zero.
// Receivers verify every stream that carries the flag before reading any
// other field; a mismatch is spcclRemoteError.
constexpr uint8_t kChecksumFlag = 0x01;

// A communicator's integrity settings; the collectives seal every stream
// they send with it after encoding.
struct Integrity {
  bool checksum = false;     // SPCCL_CHECKSUM
  uint64_t corruptLeft = 0;  // SPCCL_TEST_CORRUPT_STREAMS: test hook, flips one bit in
                             // each of the next N streams sealed (after the CRC)
  void seal(void* stream, size_t bytes);
  // Where the test hook flips a bit in the stream being sealed (SIZE_MAX: nowhere).
  size_t nextFlip(size_t bytes);
};

// Checks the CRC of a stream that carries kChecksumFlag; other streams pass.
Status verifyStream(const void* data, size_t bytes, int peer);

// Integrity::seal for a stream in executor memory (Executor::sealCrc32c).
Status sealStreamOn(Executor& ex, Integrity* integrity, void* stream, size_t bytes);
// verifyStream for `count` streams in executor memory (at data + offsets[r],
// sizes[r] bytes) whose headers (StreamHeader or RowsHeader, the same size)
// the host has read into `headers`: each sealed one checksummed by the
// executor, one settle() for all. computed is scratch.
Status verifyStreamsOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes,
                       size_t count, const void* headers, int firstPeer, std::vector<uint32_t>* computed);

// Scratch of reduceStreamsOn, grown only (no allocation once warm).
struct StreamsScratch {
  std::vector<StreamHeader> headers;
  std::vector<StreamView> views;
  std::vector<WireSection> sections;
  std::vector<IndexCheck> checks;
  std::vector<uint32_t> crcs;  // verifyStreamsOn's
};
// Every stream's header (stream r at data + offsets[r], sizes[r] bytes, from
// rank firstPeer + r) copied to the host into scratch->headers (zeros where a
// stream is shorter than a header), then each CRC verified where it carries
// one (verifyStreamsOn). Pairs, dense and row streams share the header size.
Status fetchHeadersOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes, size_t count,
                      int firstPeer, StreamsScratch* scratch);
// parseStream and host::reduceSections for streams in executor memory:
// stream r (from rank firstPeer + r) at data + offsets[r], sizes[r] bytes,
// pairs or dense, each checked as parseStream checks it (an error marker,
// where expect allows one, fails with its sender's code); where all pass,
// out over expect's range = their sum in rank order (the bits of
// host::reduceSections); where one fails, that range of out is zeroed and
// the first failure returned (the headers' before the index sections', each
// in rank order). The headers come to the host; the bodies are read by the
// executor only.
Status reduceStreamsOn(Executor& ex, const unsigned char* data, const size_t* offsets, const size_t* sizes,
                       size_t count, const StreamExpect& expect, float* out, uint64_t outBase, StreamsScratch* scratch,
                       int firstPeer = 0);

}  // namespace spccl
