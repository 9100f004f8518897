// DCT-MP alltoall: per row, the top max(1, ceil(density*rowLen)) entries by
// magnitude travel as (row-local position, value) with positions in the
// narrowest integer that fits rowLen, and no per-row counts unless some row
// kept extra NaN/Inf. The backward sends values only: both sides remember the
// positions in the selection. Values travel in the wire type (SPCCL_VALUE_TYPE, or
// SPCCL_ROWS_CODEC=fp16|bf16|fp8), or (SPCCL_ROWS_CODEC=int8) as int8 codes with one
// scale per row, both ways, or (SPCCL_ROWS_CODEC=bounded) forward as error-bounded
// codes and backward exact (codec.h).
#include <algorithm>
#include <string>
#include <cstring>
#include <type_traits>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "kernels/host/host_kernels.h"
#include "codec/codec.h"
#include "collectives/context.h"
#include "transport/timed_transport.h"
#include "kernels/core/types.h"

namespace spccl {

namespace {

// Element formats of user buffers and wire values, so that the per-entry
// loops below are compiled once per pair of formats with no switch inside.
// toFloat reads, fromFloat writes a buffer element (round to nearest even),
// wireFromFloat writes a wire value (finite values saturate: storeWireValue).
struct Fp32 {
  using Raw = uint32_t;
  static float toFloat(Raw r, int) { return core::bitsFloat(r); }
  static Raw fromFloat(float v) { return core::floatBits(v); }
  static Raw wireFromFloat(float v) { return core::floatBits(v); }
};
struct Fp16 {
  using Raw = uint16_t;
  static float toFloat(Raw r, int) { return core::halfBitsToFloat(r); }
  static Raw fromFloat(float v) { return core::floatToHalfBits(v); }
  static Raw wireFromFloat(float v) { return core::wireHalfBits(v); }
};
struct Bf16 {
  using Raw = uint16_t;
  static float toFloat(Raw r, int) { return core::bfloat16BitsToFloat(r); }
  static Raw fromFloat(float v) { return core::floatToBfloat16Bits(v); }
  static Raw wireFromFloat(float v) { return core::wireBfloat16Bits(v); }
};
struct Fp8 {  // wire only, read side (the send side stages fp32: the scale needs every value)
  using Raw = uint8_t;
  static float toFloat(Raw r, int scaleExp) { return core::e4m3ToFloat(r, scaleExp); }
};

template <typename F>
decltype(auto) withBufferFormat(spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(Fp16{});
    case spcclBfloat16:
      return f(Bf16{});
    default:
      return f(Fp32{});
  }
}

template <typename F>
decltype(auto) withWireFormat(core::ValueType wire, F&& f) {
  switch (wire) {
    case core::ValueType::kFloat16:
      return f(Fp16{});
    case core::ValueType::kBfloat16:
      return f(Bf16{});
    case core::ValueType::kFloat8e4m3:
      return f(Fp8{});
    default:
      return f(Fp32{});
  }
}

// What the send side writes into the value sections before encoding: the
// wire type itself, or fp32 for fp8 (encodeRows/encodeValues scale it).
core::ValueType stagedType(core::ValueType wire) {
  return wire == core::ValueType::kFloat8e4m3 ? core::ValueType::kFloat32 : wire;
}

// A buffer element as a staged value, and a wire value as a buffer element:
// the bits as they are where the formats agree, else through fp32.
template <typename Buf, typename Staged>
typename Staged::Raw stage(typename Buf::Raw x) {
  if constexpr (std::is_same_v<Buf, Staged>) return x;
  else return Staged::wireFromFloat(Buf::toFloat(x, 0));
}
template <typename Wire, typename Buf>
typename Buf::Raw unstage(typename Wire::Raw x, int scaleExp) {
  if constexpr (std::is_same_v<Wire, Buf>) return x;
  // Saturating: every kept value came from a buffer of type Buf, and a wire
  // that rounds it above Buf's range (65504 -> 65536 in bf16 or fp8, for an
  // fp16 buffer) must not deliver Inf for it. NaN/Inf pass unchanged.
  else return Buf::wireFromFloat(Wire::toFloat(x, scaleExp));
}

template <typename T>
T loadRaw(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof v);
  return v;
}
template <typename T>
void storeRaw(void* base, size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof v);
}

// n kept values of one row, at positions, staged into out in order.
template <typename Buf, typename Staged>
void gatherRow(const void* row, const uint32_t* positions, uint32_t n, void* out) {
  for (uint32_t e = 0; e < n; ++e) storeRaw(out, e, stage<Buf, Staged>(loadRaw<typename Buf::Raw>(row, positions[e])));
}

// The forward's selection: every row of sel->sentCounts.size() rows of
// rowLen from `buf`, its kept positions appended to sel->sentPositions and
// their values, staged, to *values, read while the row is in the cache.
template <typename Buf, typename Staged>
void selectRows(const void* buf, size_t rowLen, uint32_t keep, spcclDataType_t type, RowsPositions* sel,
                std::vector<unsigned char>* values, uint64_t* scratch) {
  using BufRaw = typename Buf::Raw;
  using StagedRaw = typename Staged::Raw;
  std::vector<uint32_t>& positions = sel->sentPositions;
  const size_t rows = sel->sentCounts.size();
  // Rows keep `keep` each unless NaN/Inf add more (grown then); selectRowTopK
  // may write a whole row's length past its slot: one row of slack.
  positions.resize(rows * keep + rowLen);
  values->resize(positions.size() * sizeof(StagedRaw));
  size_t used = 0;
  for (size_t r = 0; r < rows; ++r) {
    if (used + rowLen > positions.size()) {
      positions.resize(std::max(2 * positions.size(), used + rowLen));
      values->resize(positions.size() * sizeof(StagedRaw));
    }
    const char* row = static_cast<const char*>(buf) + r * rowLen * sizeof(BufRaw);
    uint32_t* kept = positions.data() + used;
    const uint32_t n = host::selectRowTopK(row, type, static_cast<uint32_t>(rowLen), keep, kept, scratch);
    gatherRow<Buf, Staged>(row, kept, n, values->data() + used * sizeof(StagedRaw));
    sel->sentCounts[r] = n;
    used += n;
  }
  positions.resize(used);
  values->resize(used * sizeof(StagedRaw));
}

// Rows' kept values, `rows` rows of rowLen from `buf`, staged: counts[r]
// values of row r at positions (consecutive), written to out in order.
template <typename Buf, typename Staged>
void gatherKept(const void* buf, size_t rowLen, size_t rows, const uint32_t* counts, const uint32_t* positions,
                void* out) {
  using BufRaw = typename Buf::Raw;
  using StagedRaw = typename Staged::Raw;
  uint64_t e = 0;
  for (size_t r = 0; r < rows; ++r) {
    gatherRow<Buf, Staged>(static_cast<const char*>(buf) + r * rowLen * sizeof(BufRaw), positions + e, counts[r],
                           static_cast<char*>(out) + e * sizeof(StagedRaw));
    e += counts[r];
  }
}

// Rows of a received block: each of `rows` rows of rowLen zeroed, then its
// counts[r] wire values stored at its positions. Each row is zeroed right
// before its entries are stored, so the stores hit the lines just brought in.
template <typename Wire, typename Buf>
void scatterKept(const void* values, int scaleExp, size_t rowLen, size_t rows, const uint32_t* counts,
                 const uint32_t* positions, void* buf) {
  using Raw = typename Buf::Raw;
  uint64_t e = 0;
  for (size_t r = 0; r < rows; ++r) {
    char* row = static_cast<char*>(buf) + r * rowLen * sizeof(Raw);
    std::memset(row, 0, rowLen * sizeof(Raw));
    for (uint32_t c = 0; c < counts[r]; ++c, ++e)
      storeRaw(row, positions[e], unstage<Wire, Buf>(loadRaw<typename Wire::Raw>(values, e), scaleExp));
  }
}

// scatterKept for a wire type and a buffer type known at run time.
void scatterKept(const void* values, core::ValueType wire, int scaleExp, spcclDataType_t type, size_t rowLen,
                 size_t rows, const uint32_t* counts, const uint32_t* positions, void* buf) {
  withWireFormat(wire, [&](auto w) {
    withBufferFormat(type, [&](auto b) {
      scatterKept<decltype(w), decltype(b)>(values, scaleExp, rowLen, rows, counts, positions, buf);
    });
  });
}

// scatterKept for the int8 codec: code * the row's scale, to the buffer
// type (saturating, as unstage).
template <typename Buf>
void scatterKeptInt8(const void* codes, const unsigned char* scales, size_t rowLen, size_t rows, const uint32_t* counts,
                     const uint32_t* positions, void* buf) {
  using Raw = typename Buf::Raw;
  const auto* c8 = static_cast<const int8_t*>(codes);
  uint64_t e = 0;
  for (size_t r = 0; r < rows; ++r) {
    char* row = static_cast<char*>(buf) + r * rowLen * sizeof(Raw);
    std::memset(row, 0, rowLen * sizeof(Raw));
    const float scale = loadScale(scales, r);
    for (uint32_t c = 0; c < counts[r]; ++c, ++e)
      storeRaw(row, positions[e], Buf::wireFromFloat(int8Decode(c8[e], scale)));
  }
}

void scatterKeptInt8(const void* codes, const unsigned char* scales, spcclDataType_t type, size_t rowLen, size_t rows,
                     const uint32_t* counts, const uint32_t* positions, void* buf) {
  withBufferFormat(type,
                   [&](auto b) { scatterKeptInt8<decltype(b)>(codes, scales, rowLen, rows, counts, positions, buf); });
}

// Zeroes elements [at, at + elems) of a user buffer of esize-byte elements
// (buf may be NULL when elems is 0).
inline void zeroElements(void* buf, size_t at, size_t elems, size_t esize) {
  if (elems > 0) std::memset(static_cast<char*>(buf) + at * esize, 0, elems * esize);
}

}  // namespace

CallDescriptor rowsDescriptor(Collective coll, uint64_t seq, size_t rowsPerPeer, size_t rowLen, spcclDataType_t type,
                              core::ValueType wire, uint64_t agreed) {
  return CallDescriptor{kStreamMagic,
                        0,
                        static_cast<uint8_t>(wire),
                        static_cast<uint8_t>(type),
                        static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(coll)),
                        seq,
                        static_cast<uint64_t>(rowsPerPeer) * rowLen,
                        rowLen,
                        agreed};
}

namespace {

// The call's descriptor; a codec other than the wire type names itself in
// the value type, so ranks with different SPCCL_ROWS_CODEC fail the call.
CallDescriptor rowsCallDescriptor(Collective coll, uint64_t seq, size_t rowsPerPeer, size_t rowLen,
                                  spcclDataType_t type, core::ValueType wire, int codec, uint64_t agreed) {
  CallDescriptor d = rowsDescriptor(coll, seq, rowsPerPeer, rowLen, type, wire, agreed);
  if (codec == kRowsCodecInt8) d.valueType = kRowsInt8ValueType;
  if (codec == kRowsCodecBounded) d.valueType = kRowsBoundedValueType;
  return d;
}

// The forward over transport t; selectionSeconds (SPCCL_PROFILE) gets the
// row top-k pass's time added, or is nullptr.
Status forwardOn(Transport& t, CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer,
                 size_t rowLen, spcclDataType_t type, float density, RowsSelection* sel, spcclStats_t* call,
                 double* selectionSeconds) {
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const int codec = comm.settings->rowsCodec;
  const core::ValueType wire = rowsWireType(codec, comm.settings->valueType, type);
  const uint32_t keep = core::rowKeep(rowLen, density);
  const size_t esize = dataTypeSize(type), blockElems = rowsPerPeer * rowLen;
  const uint64_t seq = comm.seq++;
  const bool int8 = codec == kRowsCodecInt8;        // values staged as fp32, coded per row by encodeRowsInt8
  const bool bounded = codec == kRowsCodecBounded;  // values staged as fp32, coded by encodeRowsBounded

  SPCCL_RETURN_IF_ERROR(agreeOnCall(
      comm, t, rowsCallDescriptor(Collective::kAlltoAllRows, seq, rowsPerPeer, rowLen, type, wire, codec, keep)));

  // Select every row, block by block; positions and counts go to the selection.
  const std::shared_ptr<RowsPositions> held = comm.freeRowsPositions();
  if (sel) sel->host = held;
  RowsPositions& s = *held;
  s.sentCounts.resize(static_cast<size_t>(p) * rowsPerPeer);
  const core::ValueType staged = int8 || bounded ? core::ValueType::kFloat32 : stagedType(wire);
  std::vector<unsigned char>& values = ws.stageBytes;  // kept values, staged, in sentPositions order
  comm.ranks64.resize(rowLen);
  const Stopwatch selecting(selectionSeconds != nullptr);
  withBufferFormat(type, [&](auto buf) {
    withWireFormat(staged, [&](auto st) {
      if constexpr (!std::is_same_v<decltype(st), Fp8>)
        selectRows<decltype(buf), decltype(st)>(sendbuff, rowLen, keep, type, &s, &values, comm.ranks64.data());
    });
  });
  if (selectionSeconds) *selectionSeconds += selecting.seconds();

  // One stream per peer.
  ws.sizes.resize(p);
  ws.cuts.resize(p + 1);
  ws.cuts[0] = 0;
  for (int j = 0; j < p; ++j) {
    uint64_t nnz = 0;
    bool fixed = true;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      const uint32_t c = s.sentCounts[j * rowsPerPeer + r];
      nnz += c;
      fixed &= c == keep;
    }
    ws.cuts[j + 1] = ws.cuts[j] + nnz;
    // bounded: room for the largest stream; encodeRowsBounded gives the size.
    ws.sizes[j] = int8      ? rowsStreamBytesInt8(rowsPerPeer, rowLen, nnz, !fixed)
                  : bounded ? rowsStreamMaxBytesBounded(rowsPerPeer, rowLen, fixed ? keep : 0, nnz, wire)
                            : rowsStreamBytes(rowsPerPeer, rowLen, nnz, !fixed, wire);
  }
  const float bound =
      bounded ? rowsCallBound(reinterpret_cast<const float*>(values.data()), ws.cuts[p], comm.settings->rowsErrorBound,
                              comm.settings->rowsErrorRelative, comm.settings->rowsErrorDecay, comm.boundedForwards++)
              : 0.0f;
  ws.sendBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
  for (int j = 0; j < p; ++j) {
    const uint64_t nnz = ws.cuts[j + 1] - ws.cuts[j];
    const bool fixed = nnz == rowsPerPeer * keep &&
                       std::all_of(s.sentCounts.begin() + j * rowsPerPeer, s.sentCounts.begin() + (j + 1) * rowsPerPeer,
                                   [&](uint32_t c) { return c == keep; });
    if (int8)
      encodeRowsInt8(ws.sendBytes.data() + ws.offsets[j], rowsPerPeer, rowLen, fixed ? keep : 0,
                     s.sentCounts.data() + j * rowsPerPeer, s.sentPositions.data() + ws.cuts[j],
                     reinterpret_cast<const float*>(values.data()) + ws.cuts[j], nnz, seq);
    else if (bounded)  // the stream takes its own size; the offsets keep the room laid out above
      ws.sizes[j] =
          encodeRowsBounded(ws.sendBytes.data() + ws.offsets[j], rowsPerPeer, rowLen, fixed ? keep : 0,
                            s.sentCounts.data() + j * rowsPerPeer, s.sentPositions.data() + ws.cuts[j],
                            reinterpret_cast<const float*>(values.data()) + ws.cuts[j], nnz, bound, wire, seq);
    else
      encodeRows(ws.sendBytes.data() + ws.offsets[j], rowsPerPeer, rowLen, fixed ? keep : 0,
                 s.sentCounts.data() + j * rowsPerPeer, s.sentPositions.data() + ws.cuts[j],
                 values.data() + ws.cuts[j] * core::wireValueBytes(staged), staged, nnz, wire, seq);
    sealStream(&comm.integrity, ws.sendBytes.data() + ws.offsets[j], ws.sizes[j]);
  }
  ws.counts.assign(ws.sizes.begin(), ws.sizes.end());
  ws.recvCounts.resize(p);
  SPCCL_RETURN_IF_ERROR(t.allToAll(ws.counts.data(), sizeof(uint64_t), ws.recvCounts.data()));
  ws.recvSizes.resize(p);
  const size_t largest = int8      ? rowsStreamBytesInt8(rowsPerPeer, rowLen, blockElems, true)
                         : bounded ? rowsStreamMaxBytesBounded(rowsPerPeer, rowLen, 0, blockElems, wire)
                                   : rowsStreamBytes(rowsPerPeer, rowLen, blockElems, true, wire);
  Status implausible;
  for (int j = 0; j < p; ++j)
    ws.recvSizes[j] = announcedSize(ws.recvCounts[j], largest, j, "alltoall rows", &implausible);
  ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
  const Status moved = t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                   ws.recvSizes.data(), ws.recvOffsets.data());
  SPCCL_RETURN_IF_ERROR(implausible);  // the exchange is over: nothing left to wait for
  SPCCL_RETURN_IF_ERROR(moved);

  // Dense rows out, zeros at the dropped positions. A refused stream leaves
  // the whole output zero.
  auto refuse = [&](Status st) {
    zeroElements(recvbuff, 0, static_cast<size_t>(p) * blockElems, esize);
    return st;
  };
  s.recvCounts.resize(static_cast<size_t>(p) * rowsPerPeer);
  s.recvPositions.clear();
  s.recvPositions.reserve(s.recvCounts.size() * keep);
  for (int j = 0; j < p; ++j) {
    RowsView v;
    const size_t first = s.recvPositions.size();
    const Status parsed =
        bounded ? parseRowsBounded(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], rowsPerPeer, rowLen, wire,
                                   seq, j, &v, &s.recvPositions, &comm.boundedDecoded)
                : parseRowsCoded(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], rowsPerPeer, rowLen, wire,
                                 int8 ? kRowsCodecInt8 : kRowsCodecWire, seq, j, &v, &s.recvPositions);
    if (!parsed.isOk()) return refuse(parsed);
    if (v.keepPerRow != 0 && v.keepPerRow != keep)
      return refuse(
          invalidUsage(formatString("alltoall rows: rank %d keeps %llu entries per row, this rank %u "
                                    "(different densities?)",
                                    j, static_cast<unsigned long long>(v.keepPerRow), keep)));
    uint32_t* counts = s.recvCounts.data() + j * rowsPerPeer;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      counts[r] = v.countOf(r);
      if (counts[r] < keep)
        return refuse(invalidUsage(
            formatString("alltoall rows: rank %d kept %u entries in a row, this rank keeps %u", j, counts[r], keep)));
    }
    void* block = static_cast<char*>(recvbuff) + j * blockElems * esize;
    if (int8)
      scatterKeptInt8(v.values, v.scales, type, rowLen, rowsPerPeer, counts, s.recvPositions.data() + first, block);
    else if (bounded)  // decoded to fp32, rounded to the buffer type as the encoder checked
      scatterKept(comm.boundedDecoded.data(), core::ValueType::kFloat32, 0, type, rowLen, rowsPerPeer, counts,
                  s.recvPositions.data() + first, block);
    else
      scatterKept(v.values, wire, v.scaleExp, type, rowLen, rowsPerPeer, counts, s.recvPositions.data() + first, block);
  }
  if (sel) {
    sel->rowsPerPeer = rowsPerPeer;
    sel->rowLen = rowLen;
    sel->dataType = type;
    sel->wire = wire;
    sel->codec = int8 ? kRowsCodecInt8 : kRowsCodecWire;  // the backward's: bounded's is exact, in `wire`
    sel->forwardSeq = seq;
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * blockElems * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + sizeof(uint64_t));
  for (int j = 0; j < p; ++j)
    if (j != me) call->bytesSent += ws.sizes[j];
  return Status::ok();
}

Status backwardOn(Transport& t, CollectiveContext& comm, const void* gradSend, void* gradRecv, RowsSelection& s,
                  spcclStats_t* call) {
  const RowsPositions& pos = *s.host;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const size_t rowsPerPeer = s.rowsPerPeer, rowLen = s.rowLen, esize = dataTypeSize(s.dataType);
  const size_t blockElems = rowsPerPeer * rowLen;
  const uint64_t seq = comm.seq++;
  // The backward codes the gradients of the sent entries with its forward's
  // codec: int8 keeps each row's relative precision whatever the gradients'
  // magnitude (one scale per row, as for the activations), and both sides
  // already agreed on it. Nothing is fed back: the model-parallel exchange
  // keeps no residual, as with the fp16/bf16/fp8 wire types.
  const bool int8 = s.codec == kRowsCodecInt8;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(comm, t,
                                    rowsCallDescriptor(Collective::kAlltoAllRowsBackward, seq, rowsPerPeer, rowLen,
                                                       s.dataType, s.wire, s.codec, s.forwardSeq)));
  // Every rank is in this backward of this selection's forward: the
  // selection is spent (a call refused above leaves it for a retry).
  s.used = true;

  // To peer j: the gradient at the positions this rank received from j.
  // From peer j: values for the positions this rank sent to j. Both sizes are
  // known from the selection, so no size exchange.
  ws.sizes.resize(p);
  ws.recvSizes.resize(p);
  ws.cuts.assign(p + 1, 0);        // prefix of received positions per peer
  ws.nnzPerRank.assign(p + 1, 0);  // prefix of sent positions per peer
  for (int j = 0; j < p; ++j) {
    uint64_t in = 0, out = 0;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      in += pos.recvCounts[j * rowsPerPeer + r];
      out += pos.sentCounts[j * rowsPerPeer + r];
    }
    ws.cuts[j + 1] = ws.cuts[j] + in;
    ws.nnzPerRank[j + 1] = ws.nnzPerRank[j] + out;
    ws.sizes[j] = int8 ? valuesStreamBytesInt8(rowsPerPeer, in) : valuesStreamBytes(in, s.wire);
    ws.recvSizes[j] = int8 ? valuesStreamBytesInt8(rowsPerPeer, out) : valuesStreamBytes(out, s.wire);
  }
  ws.sendBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
  // The gradient at those positions, staged for the wire, peer after peer.
  const core::ValueType staged = int8 ? core::ValueType::kFloat32 : stagedType(s.wire);
  const size_t stagedBytes = core::wireValueBytes(staged);
  std::vector<unsigned char>& values = ws.stageBytes;
  values.resize(ws.cuts[p] * stagedBytes);
  withBufferFormat(s.dataType, [&](auto buf) {
    withWireFormat(staged, [&](auto st) {
      if constexpr (!std::is_same_v<decltype(st), Fp8>)
        gatherKept<decltype(buf), decltype(st)>(gradSend, rowLen, pos.recvCounts.size(), pos.recvCounts.data(),
                                                pos.recvPositions.data(), values.data());
    });
  });
  for (int j = 0; j < p; ++j) {
    if (int8)
      encodeValuesInt8(ws.sendBytes.data() + ws.offsets[j], reinterpret_cast<const float*>(values.data()) + ws.cuts[j],
                       pos.recvCounts.data() + j * rowsPerPeer, rowsPerPeer, rowLen, ws.cuts[j + 1] - ws.cuts[j], seq);
    else
      encodeValues(ws.sendBytes.data() + ws.offsets[j], values.data() + ws.cuts[j] * stagedBytes, staged,
                   ws.cuts[j + 1] - ws.cuts[j], rowsPerPeer, rowLen, s.wire, seq);
    sealStream(&comm.integrity, ws.sendBytes.data() + ws.offsets[j], ws.sizes[j]);
  }
  ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
  SPCCL_RETURN_IF_ERROR(t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                    ws.recvSizes.data(), ws.recvOffsets.data()));

  // As in the forward; a refused stream leaves the whole output zero.
  for (int j = 0; j < p; ++j) {
    const void* vals = nullptr;
    int scaleExp = 0;
    const uint64_t n = ws.nnzPerRank[j + 1] - ws.nnzPerRank[j];
    const unsigned char* scales = nullptr;
    const int8_t* codes = nullptr;
    const Status parsed = int8 ? parseValuesInt8(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], rowsPerPeer,
                                                 n, seq, j, &scales, &codes)
                               : parseValues(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], n, s.wire, seq,
                                             j, &vals, &scaleExp);
    if (!parsed.isOk()) {
      zeroElements(gradRecv, 0, static_cast<size_t>(p) * blockElems, esize);
      return parsed;
    }
    void* block = static_cast<char*>(gradRecv) + j * blockElems * esize;
    if (int8)
      scatterKeptInt8(codes, scales, s.dataType, rowLen, rowsPerPeer, pos.sentCounts.data() + j * rowsPerPeer,
                      pos.sentPositions.data() + ws.nnzPerRank[j], block);
    else
      scatterKept(vals, s.wire, scaleExp, s.dataType, rowLen, rowsPerPeer, pos.sentCounts.data() + j * rowsPerPeer,
                  pos.sentPositions.data() + ws.nnzPerRank[j], block);
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * blockElems * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * sizeof(CallDescriptor);
  for (int j = 0; j < p; ++j)
    if (j != me) call->bytesSent += ws.sizes[j];
  return Status::ok();
}

}  // namespace

Status alltoAllRowsForward(CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer,
                           size_t rowLen, spcclDataType_t type, float density, RowsSelection* sel, spcclStats_t* call) {
  if (!comm.settings->profile)
    return forwardOn(*comm.transport, comm, sendbuff, recvbuff, rowsPerPeer, rowLen, type, density, sel, call, nullptr);
  RowsProfile& prof = comm.rowsProfile;
  TimedTransport timed(*comm.transport, &prof.forwardCommunication);
  const Stopwatch whole(true);
  const Status s =
      forwardOn(timed, comm, sendbuff, recvbuff, rowsPerPeer, rowLen, type, density, sel, call, &prof.forwardSelection);
  prof.forward += whole.seconds();
  ++prof.forwardCalls;
  return s;
}

Status alltoAllRowsBackward(CollectiveContext& comm, const void* gradSend, void* gradRecv, RowsSelection& sel,
                            spcclStats_t* call) {
  if (!comm.settings->profile) return backwardOn(*comm.transport, comm, gradSend, gradRecv, sel, call);
  RowsProfile& prof = comm.rowsProfile;
  TimedTransport timed(*comm.transport, &prof.backwardCommunication);
  const Stopwatch whole(true);
  const Status s = backwardOn(timed, comm, gradSend, gradRecv, sel, call);
  prof.backward += whole.seconds();
  ++prof.backwardCalls;
  return s;
}

std::string describeRowsProfile(const RowsProfile& p) {
  if (p.forwardCalls + p.backwardCalls == 0) return {};
  const auto share = [](double part, double whole) { return whole > 0 ? 100 * part / whole : 0.0; };
  const double nf = static_cast<double>(std::max<uint64_t>(p.forwardCalls, 1));
  const double nb = static_cast<double>(std::max<uint64_t>(p.backwardCalls, 1));
  const double fLocal = p.forward - p.forwardSelection - p.forwardCommunication;
  const double bLocal = p.backward - p.backwardCommunication;
  return formatString(
      "profile: alltoall rows, %llu forward calls, per call %.3f ms = selection %.3f ms (%.0f%%) + "
      "communication %.3f ms (%.0f%%: wire and waiting for other ranks) + local %.3f ms (%.0f%%: gathering, "
      "encoding, decoding, zeroing and filling the output); %llu backward calls, per call %.3f ms = "
      "communication %.3f ms (%.0f%%) + local %.3f ms (%.0f%%)",
      static_cast<unsigned long long>(p.forwardCalls), 1e3 * p.forward / nf, 1e3 * p.forwardSelection / nf,
      share(p.forwardSelection, p.forward), 1e3 * p.forwardCommunication / nf, share(p.forwardCommunication, p.forward),
      1e3 * fLocal / nf, share(fLocal, p.forward), static_cast<unsigned long long>(p.backwardCalls),
      1e3 * p.backward / nb, 1e3 * p.backwardCommunication / nb, share(p.backwardCommunication, p.backward),
      1e3 * bLocal / nb, share(bLocal, p.backward));
}

}  // namespace spccl
