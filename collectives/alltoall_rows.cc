// DCT-MP alltoall: per row, the top max(1, ceil(density*rowLen)) entries by
// magnitude travel as (row-local position, value) with positions in the
// narrowest integer that fits rowLen, and no per-row counts unless some row
// kept extra NaN/Inf. The backward sends values only: both sides remember the
// positions in the selection. Values travel in the wire type (SPCCL_VALUE_TYPE, or
// SPCCL_ROWS_CODEC=fp16|bf16|fp8), or (SPCCL_ROWS_CODEC=int8) as int8 codes with one
// scale per row, both ways, or (SPCCL_ROWS_CODEC=bounded) forward as error-bounded
// codes and backward exact (codec.h).
//
// Written once over the executor: the streams are built and read in its
// memory, section by section. The bounded codec's bit packing has no
// executor operation: it runs in the codec on the host, on copies (the kept
// values and positions to the host, the streams back; the received streams
// to the host, their positions and decoded values back).
#include <algorithm>
#include <string>
#include <cstring>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "codec/codec.h"
#include "collectives/context.h"
#include "transport/timed_transport.h"
#include "kernels/core/types.h"

namespace spccl {

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

// Each peer's fp8 scale, from the largest finite |value| of its block's
// fp32 values (rows j*rpp ... at rowOffsets). A device holds a few dozen
// results between settles: settled in batches.
Status streamMaxKeys(Executor& ex, const float* values, const uint64_t* rowOffsets, size_t rpp, int p,
                     std::vector<uint32_t>* keys) {
  keys->assign(p, 0);
  for (int j = 0; j < p; ++j) {
    const uint64_t first = rowOffsets[j * rpp], n = rowOffsets[(j + 1) * rpp] - first;
    SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(values + first, spcclFloat32, nullptr, n, &(*keys)[j]));
    if ((j + 1) % 32 == 0 || j + 1 == p) SPCCL_RETURN_IF_ERROR(ex.settle());
  }
  return Status::ok();
}

// offsets[r] = counts[0] + ... + counts[r-1], r = 0..rows: where each row's
// entries start, on the host and (inMemory) in executor memory.
Status rowOffsetsOn(Executor& ex, const std::vector<uint32_t>& counts, std::vector<uint64_t>* offsets,
                    ExecMemory* inMemory) {
  const size_t rows = counts.size();
  offsets->resize(rows + 1);
  (*offsets)[0] = 0;
  for (size_t r = 0; r < rows; ++r) (*offsets)[r + 1] = (*offsets)[r] + counts[r];
  SPCCL_RETURN_IF_ERROR(inMemory->ensure(ex, (rows + 1) * sizeof(uint64_t)));
  return ex.fromHost(inMemory->get(), offsets->data(), (rows + 1) * sizeof(uint64_t));
}

// Every peer's received values stored into its block of zeroed rows: block
// j's values at recv + ws.recvOffsets[j] + valuesAt(j) (int8: its rpp row
// scales there, its codes after them), its positions and row offsets
// (executor memory) from row j * rpp (offsets: the same on the host), its
// rows at out + j * blockBytes. Wire values carry scaleExpOf(j) (fp8). int8
// scales came from a peer: *refusal names the first bad one (the caller
// zeroes the output).
template <typename ValuesAt, typename ScaleExpOf>
Status storeBlocks(Executor& ex, Workspace& ws, const unsigned char* recv, ValuesAt valuesAt, ScaleExpOf scaleExpOf,
                   bool int8, core::ValueType wire, const uint32_t* positions, const std::vector<uint64_t>& offsets,
                   const uint64_t* offsetsIn, size_t rpp, uint32_t len, spcclDataType_t type, void* out,
                   size_t blockBytes, int p, Status* refusal) {
  ws.rowsBad.assign(p, 0);
  for (int j = 0; j < p; ++j) {
    const unsigned char* values = recv + ws.recvOffsets[j] + valuesAt(j);
    void* block = static_cast<char*>(out) + j * blockBytes;
    if (int8)
      SPCCL_RETURN_IF_ERROR(ex.scatterRowsInt8(values, values + rpp * sizeof(float), positions + offsets[j * rpp],
                                               offsetsIn + j * rpp, rpp, len, type, block, &ws.rowsBad[j]));
    else
      SPCCL_RETURN_IF_ERROR(ex.scatterRows(values, wire, scaleExpOf(j), positions + offsets[j * rpp],
                                           offsetsIn + j * rpp, rpp, len, type, block));
  }
  if (!int8) return Status::ok();
  SPCCL_RETURN_IF_ERROR(ex.settle());
  for (int j = 0; j < p; ++j)
    if (ws.rowsBad[j] != 0) {
      *refusal = badInt8Scale(j, ws.rowsBad[j] - 1);
      break;
    }
  return Status::ok();
}

// The forward over transport t; selectionSeconds (SPCCL_PROFILE) gets the
// row top-k pass's time added, or is nullptr.
Status forwardOn(Transport& t, CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer,
                 size_t rowLen, spcclDataType_t type, float density, RowsSelection* sel, spcclStats_t* call,
                 double* selectionSeconds) {
  Executor& ex = *comm.executor;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const int codec = comm.settings->rowsCodec;
  const core::ValueType wire = rowsWireType(codec, comm.settings->valueType, type);
  const uint32_t keep = core::rowKeep(rowLen, density), len = static_cast<uint32_t>(rowLen);
  const size_t esize = dataTypeSize(type), blockElems = rowsPerPeer * rowLen, rpp = rowsPerPeer;
  const uint64_t nRows = static_cast<uint64_t>(p) * rowsPerPeer;
  const uint64_t seq = comm.seq++;
  const bool int8 = codec == kRowsCodecInt8;        // values staged as fp32, coded per row by encodeRowsInt8
  const bool bounded = codec == kRowsCodecBounded;  // values staged as fp32, coded by encodeRowsBounded
  const bool fp8 = wire == core::ValueType::kFloat8e4m3;
  // The selection's values: fp32 where a codec or fp8's scale reads them
  // all, else the wire type itself (copied into the streams).
  const core::ValueType staged = int8 || bounded || fp8 ? core::ValueType::kFloat32 : wire;
  const uint32_t ib = rowIndexBytes(rowLen), vb = core::wireValueBytes(wire), sb = core::wireValueBytes(staged);

  SPCCL_RETURN_IF_ERROR(agreeOnCall(
      comm, t, rowsCallDescriptor(Collective::kAlltoAllRows, seq, rowsPerPeer, rowLen, type, wire, codec, keep)));

  // 1. Select every row, `keep` entries a row: every row keeps exactly that
  // many unless it holds NaN/Inf beyond them, so the slots are already the
  // compact arrays. Where a row kept more (rare), the selection is redone in
  // slots of the full row length and compacted. The counts come to the host
  // (the one wait of the forward's selection).
  const std::shared_ptr<RowsPositions> held = comm.freeRowsPositions();
  if (sel) sel->positions = held;
  RowsPositions& s = *held;
  s.sentCounts.resize(nRows);
  const Stopwatch selecting(selectionSeconds != nullptr);
  SPCCL_RETURN_IF_ERROR(ws.rowCounts.ensure(ex, std::max<uint64_t>(nRows, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(s.sentPositions.ensure(ex, std::max<uint64_t>(nRows * keep, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ws.rowsStaged.ensure(ex, std::max<uint64_t>(nRows * keep, 1) * sb));
  auto* counts = ws.rowCounts.get<uint32_t>();
  const auto selectInto = [&](uint32_t stride, uint32_t* positions, void* values) -> Status {
    SPCCL_RETURN_IF_ERROR(ex.selectRows(sendbuff, type, nRows, len, keep, staged, positions, values, stride, counts));
    if (nRows > 0) SPCCL_RETURN_IF_ERROR(ex.toHost(s.sentCounts.data(), counts, nRows * sizeof(uint32_t)));
    return ex.settle();
  };
  SPCCL_RETURN_IF_ERROR(selectInto(keep, s.sentPositions.get<uint32_t>(), ws.rowsStaged.get()));
  SPCCL_RETURN_IF_ERROR(rowOffsetsOn(ex, s.sentCounts, &s.sentOffsets, &s.sentOffsetsIn));
  const uint64_t sentTotal = s.sentOffsets[nRows];
  auto* sentOffsets = s.sentOffsetsIn.get<uint64_t>();
  if (sentTotal > nRows * keep) {
    SPCCL_RETURN_IF_ERROR(ws.rowsStrided.ensure(ex, nRows * len * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(ws.rowsStridedValues.ensure(ex, nRows * len * sb));
    SPCCL_RETURN_IF_ERROR(selectInto(len, ws.rowsStrided.get<uint32_t>(), ws.rowsStridedValues.get()));
    SPCCL_RETURN_IF_ERROR(s.sentPositions.ensure(ex, sentTotal * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(ws.rowsStaged.ensure(ex, sentTotal * sb));
    SPCCL_RETURN_IF_ERROR(ex.compactRows(ws.rowsStrided.get<uint32_t>(), ws.rowsStridedValues.get(), sb, len,
                                         sentOffsets, nRows, s.sentPositions.get<uint32_t>(), ws.rowsStaged.get()));
  }
  auto* sentPositions = s.sentPositions.get<uint32_t>();
  auto* stagedBytes = ws.rowsStaged.get<unsigned char>();  // in sentPositions order
  auto* stagedValues = ws.rowsStaged.get<float>();         // the same, where staged is fp32
  if (selectionSeconds) {
    SPCCL_RETURN_IF_ERROR(ex.settle());
    *selectionSeconds += selecting.seconds();
  }

  // 2. One stream per peer. Every row keeps at least `keep`: a block of
  // rpp * keep entries keeps exactly `keep` a row, and its stream needs no counts.
  const auto firstOf = [&](int j) { return s.sentOffsets[j * rpp]; };
  const auto nnzOf = [&](int j) { return s.sentOffsets[(j + 1) * rpp] - s.sentOffsets[j * rpp]; };
  const auto keepPerRowOf = [&](int j) -> uint64_t { return nnzOf(j) == rpp * keep ? keep : 0; };
  ws.sizes.resize(p);
  for (int j = 0; j < p; ++j) {
    const uint64_t nnz = nnzOf(j);
    const bool fixed = keepPerRowOf(j) != 0;
    // bounded: room for the largest stream; encodeRowsBounded gives the size.
    ws.sizes[j] = int8      ? rowsStreamBytesInt8(rowsPerPeer, rowLen, nnz, !fixed)
                  : bounded ? rowsStreamMaxBytesBounded(rowsPerPeer, rowLen, fixed ? keep : 0, nnz, wire)
                            : rowsStreamBytes(rowsPerPeer, rowLen, nnz, !fixed, wire);
  }
  const size_t sendTotal = layoutStreams(ws.sizes, &ws.offsets);
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, sendTotal));
  auto* send = ws.sendStream.get<unsigned char>();
  if (bounded) {
    std::vector<float>& values = comm.floats;
    std::vector<uint32_t>& positions = comm.positions;
    std::vector<unsigned char>& streams = comm.boundedStreams;
    values.resize(sentTotal);
    positions.resize(sentTotal);
    streams.resize(sendTotal);
    SPCCL_RETURN_IF_ERROR(ex.toHost(values.data(), stagedValues, sentTotal * sizeof(float)));
    SPCCL_RETURN_IF_ERROR(ex.toHost(positions.data(), sentPositions, sentTotal * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    const float bound =
        rowsCallBound(values.data(), sentTotal, comm.settings->rowsErrorBound, comm.settings->rowsErrorRelative,
                      comm.settings->rowsErrorDecay, comm.boundedForwards++);
    for (int j = 0; j < p; ++j) {
      const uint64_t first = firstOf(j), nnz = nnzOf(j);
      // The stream takes its own size; the offsets keep the room laid out above.
      ws.sizes[j] = encodeRowsBounded(streams.data() + ws.offsets[j], rowsPerPeer, rowLen, keepPerRowOf(j),
                                      s.sentCounts.data() + j * rpp, positions.data() + first, values.data() + first,
                                      nnz, bound, wire, seq);
      SPCCL_RETURN_IF_ERROR(ex.fromHost(send + ws.offsets[j], streams.data() + ws.offsets[j], ws.sizes[j]));
    }
  } else {
    if (fp8) SPCCL_RETURN_IF_ERROR(streamMaxKeys(ex, stagedValues, s.sentOffsets.data(), rpp, p, &ws.rowsMaxKeys));
    for (int j = 0; j < p; ++j) {
      unsigned char* dst = send + ws.offsets[j];
      const uint64_t first = firstOf(j), nnz = nnzOf(j), keepPerRow = keepPerRowOf(j);
      const int scaleExp = fp8 ? core::fp8ScaleForMax(ws.rowsMaxKeys[j]) : 0;
      const RowsHeader h = int8 ? rowsStreamHeaderInt8(rowsPerPeer, rowLen, keepPerRow, nnz, seq)
                                : rowsStreamHeader(rowsPerPeer, rowLen, keepPerRow, nnz, wire, scaleExp, seq);
      const RowsLayout l = rowsLayout(rowsPerPeer, rowLen, keepPerRow == 0, nnz);
      SPCCL_RETURN_IF_ERROR(ex.storeSmall(dst, &h, sizeof h));
      if (keepPerRow == 0) SPCCL_RETURN_IF_ERROR(ex.copy(dst + l.countsAt, counts + j * rpp, rpp * sizeof(uint32_t)));
      SPCCL_RETURN_IF_ERROR(ex.narrowPositions(sentPositions + first, nnz, ib, dst + l.positionsAt));
      const size_t positionsEnd = l.positionsAt + nnz * ib;
      const size_t valuesEnd = l.valuesAt + (int8 ? rpp * sizeof(float) + nnz : nnz * vb);
      SPCCL_RETURN_IF_ERROR(ex.fill(dst + positionsEnd, 0, l.valuesAt - positionsEnd));
      if (int8)
        SPCCL_RETURN_IF_ERROR(ex.encodeRowsInt8(stagedValues + first, sentOffsets + j * rpp, rpp, dst + l.valuesAt,
                                                dst + l.valuesAt + rpp * sizeof(float)));
      else if (fp8) SPCCL_RETURN_IF_ERROR(ex.toWire(stagedValues + first, nnz, wire, scaleExp, dst + l.valuesAt));
      else SPCCL_RETURN_IF_ERROR(ex.copy(dst + l.valuesAt, stagedBytes + first * vb, nnz * vb));
      SPCCL_RETURN_IF_ERROR(ex.fill(dst + valuesEnd, 0, ws.sizes[j] - valuesEnd));
    }
  }
  for (int j = 0; j < p; ++j)
    SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, &comm.integrity, send + ws.offsets[j], ws.sizes[j]));

  // 3. Sizes, then the streams.
  SPCCL_RETURN_IF_ERROR(exchangeSizes(ex, t, ws));
  ws.recvSizes.resize(p);
  const size_t largest = int8      ? rowsStreamBytesInt8(rowsPerPeer, rowLen, blockElems, true)
                         : bounded ? rowsStreamMaxBytesBounded(rowsPerPeer, rowLen, 0, blockElems, wire)
                                   : rowsStreamBytes(rowsPerPeer, rowLen, blockElems, true, wire);
  Status implausible;
  for (int j = 0; j < p; ++j)
    ws.recvSizes[j] = announcedSize(ws.recvCounts[j], largest, j, "alltoall rows", &implausible);
  const size_t recvTotal = layoutStreams(ws.recvSizes, &ws.recvOffsets);
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, recvTotal));
  auto* recv = ws.recvStream.get<unsigned char>();
  const Status moved = ex.withMemory([&] {
    return t.allToAllV(send, ws.sizes.data(), ws.offsets.data(), recv, ws.recvSizes.data(), ws.recvOffsets.data());
  });
  SPCCL_RETURN_IF_ERROR(implausible);  // the exchange is over: nothing left to wait for
  SPCCL_RETURN_IF_ERROR(moved);

  // 4. Dense rows out, zeros at the dropped positions. A refused stream
  // leaves the whole output zero.
  const auto refuse = [&](const Status& st) {
    SPCCL_RETURN_IF_ERROR(ex.fill(recvbuff, 0, static_cast<size_t>(p) * blockElems * esize));
    return st;
  };
  const auto keptTooFew = [&](int j, uint32_t c) {
    return invalidUsage(
        formatString("alltoall rows: rank %d kept %u entries in a row, this rank keeps %u", j, c, keep));
  };
  const auto otherDensity = [&](int j, uint64_t keepPerRow) {
    return invalidUsage(
        formatString("alltoall rows: rank %d keeps %llu entries per row, this rank %u "
                     "(different densities?)",
                     j, static_cast<unsigned long long>(keepPerRow), keep));
  };
  s.recvCounts.resize(nRows);
  if (bounded) {
    // The streams to the host, parsed and decoded to fp32 there (positions in
    // comm.positions, values in comm.floats), which go back to be stored as a
    // wire codec's would be.
    std::vector<uint32_t>& positions = comm.positions;
    std::vector<float>& decoded = comm.floats;
    std::vector<unsigned char>& streams = comm.boundedStreams;
    positions.clear();
    decoded.clear();
    streams.resize(recvTotal);
    SPCCL_RETURN_IF_ERROR(ex.toHost(streams.data(), recv, recvTotal));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    Status parsed = [&]() -> Status {
      for (int j = 0; j < p; ++j) {
        RowsView v;
        SPCCL_RETURN_IF_ERROR(parseRowsBounded(streams.data() + ws.recvOffsets[j], ws.recvSizes[j], rowsPerPeer, rowLen,
                                               wire, seq, j, &v, &positions, &comm.boundedDecoded));
        if (v.keepPerRow != 0 && v.keepPerRow != keep) return otherDensity(j, v.keepPerRow);
        for (size_t r = 0; r < rowsPerPeer; ++r) {
          const uint32_t c = s.recvCounts[j * rpp + r] = v.countOf(r);
          if (c < keep) return keptTooFew(j, c);
        }
        decoded.insert(decoded.end(), comm.boundedDecoded.begin(), comm.boundedDecoded.end());
      }
      return Status::ok();
    }();
    if (!parsed.isOk()) return refuse(parsed);
    SPCCL_RETURN_IF_ERROR(rowOffsetsOn(ex, s.recvCounts, &s.recvOffsets, &s.recvOffsetsIn));
    SPCCL_RETURN_IF_ERROR(s.recvPositions.ensure(ex, std::max<size_t>(positions.size(), 1) * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(ex.fromHost(s.recvPositions.get(), positions.data(), positions.size() * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(ws.rowsStaged.ensure(ex, std::max<size_t>(decoded.size(), 1) * sizeof(float)));
    SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.rowsStaged.get(), decoded.data(), decoded.size() * sizeof(float)));
    SPCCL_RETURN_IF_ERROR(ex.scatterRows(ws.rowsStaged.get(), core::ValueType::kFloat32, 0,
                                         s.recvPositions.get<uint32_t>(), s.recvOffsetsIn.get<uint64_t>(), nRows, len,
                                         type, recvbuff));
    SPCCL_RETURN_IF_ERROR(ex.settle());  // the host copies are reused by the next call
  } else {
    // Headers to the host, checksums, then each stream's counts, then its
    // positions (widened in executor memory), then its values.
    const Status verified = fetchHeadersOn(ex, recv, ws.recvOffsets.data(), ws.recvSizes.data(), p, 0, &ws.streams);
    if (!verified.isOk()) return refuse(verified);
    const StreamsScratch& sc = ws.streams;
    ws.rowsLayouts.resize(p);
    ws.rowsEntries.resize(p);
    for (int j = 0; j < p; ++j) {
      RowsHeader h;
      std::memcpy(&h, &sc.headers[j], sizeof h);
      const Status st = checkRowsStreamHeader(h, ws.recvSizes[j], rowsPerPeer, rowLen, wire,
                                              int8 ? kRowsCodecInt8 : kRowsCodecWire, seq, j, &ws.rowsLayouts[j]);
      if (!st.isOk()) return refuse(st);
      if (h.keepPerRow != 0 && h.keepPerRow != keep) return refuse(otherDensity(j, h.keepPerRow));
      ws.rowsEntries[j] = h.nnz;
      if (h.keepPerRow == 0 && rpp > 0)
        SPCCL_RETURN_IF_ERROR(ex.toHost(s.recvCounts.data() + j * rpp,
                                        recv + ws.recvOffsets[j] + ws.rowsLayouts[j].countsAt, rpp * sizeof(uint32_t)));
      else
        std::fill(s.recvCounts.begin() + j * rpp, s.recvCounts.begin() + (j + 1) * rpp,
                  static_cast<uint32_t>(h.keepPerRow));
    }
    SPCCL_RETURN_IF_ERROR(ex.settle());
    for (int j = 0; j < p; ++j) {
      const Status st = checkRowCounts(s.recvCounts.data() + j * rpp, rpp, rowLen, ws.rowsEntries[j], j);
      if (!st.isOk()) return refuse(st);
      for (size_t r = 0; r < rpp; ++r)
        if (s.recvCounts[j * rpp + r] < keep) return refuse(keptTooFew(j, s.recvCounts[j * rpp + r]));
    }
    SPCCL_RETURN_IF_ERROR(rowOffsetsOn(ex, s.recvCounts, &s.recvOffsets, &s.recvOffsetsIn));
    SPCCL_RETURN_IF_ERROR(s.recvPositions.ensure(ex, std::max<uint64_t>(s.recvOffsets[nRows], 1) * sizeof(uint32_t)));
    auto* recvOffsets = s.recvOffsetsIn.get<uint64_t>();
    auto* recvPositions = s.recvPositions.get<uint32_t>();
    ws.rowsBad.assign(p, 0);
    for (int j = 0; j < p; ++j)
      SPCCL_RETURN_IF_ERROR(ex.widenPositions(recv + ws.recvOffsets[j] + ws.rowsLayouts[j].positionsAt, ib,
                                              recvOffsets + j * rpp, rpp, len, recvPositions + s.recvOffsets[j * rpp],
                                              &ws.rowsBad[j]));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    for (int j = 0; j < p; ++j)
      if (ws.rowsBad[j] != 0) return refuse(badRowPositions(j, ws.rowsBad[j] - 1, nullptr));
    Status refusal;
    SPCCL_RETURN_IF_ERROR(storeBlocks(
        ex, ws, recv, [&](int j) { return ws.rowsLayouts[j].valuesAt; },
        [&](int j) { return ws.rowsLayouts[j].scaleExp; }, int8, wire, recvPositions, s.recvOffsets, recvOffsets, rpp,
        len, type, recvbuff, blockElems * esize, p, &refusal));
    if (!refusal.isOk()) return refuse(refusal);
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

Status backwardOn(Transport& t, CollectiveContext& comm, const void* gradSend, void* gradRecv, RowsSelection& sel,
                  spcclStats_t* call) {
  Executor& ex = *comm.executor;
  RowsPositions& s = *sel.positions;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const size_t rpp = sel.rowsPerPeer, rowLen = sel.rowLen, esize = dataTypeSize(sel.dataType);
  const uint32_t len = static_cast<uint32_t>(rowLen);
  const size_t blockElems = rpp * rowLen;
  const uint64_t nRows = static_cast<uint64_t>(p) * rpp;
  const uint64_t seq = comm.seq++;
  const core::ValueType wire = sel.wire;
  // The backward codes the gradients of the sent entries with its forward's
  // codec: int8 keeps each row's relative precision whatever the gradients'
  // magnitude (one scale per row, as for the activations), and both sides
  // already agreed on it. Nothing is fed back: the model-parallel exchange
  // keeps no residual, as with the fp16/bf16/fp8 wire types.
  const bool int8 = sel.codec == kRowsCodecInt8;
  const bool fp8 = wire == core::ValueType::kFloat8e4m3;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(comm, t,
                                    rowsCallDescriptor(Collective::kAlltoAllRowsBackward, seq, rpp, rowLen,
                                                       sel.dataType, wire, sel.codec, sel.forwardSeq)));
  // Every rank is in this backward of this selection's forward: the
  // selection is spent (a call refused above leaves it for a retry).
  sel.used = true;

  // To peer j: the gradient at the positions this rank received from j.
  // From peer j: values for the positions this rank sent to j. Both sizes are
  // known from the selection, so no size exchange.
  const auto outOf = [&](int j) { return s.recvOffsets[(j + 1) * rpp] - s.recvOffsets[j * rpp]; };
  const auto inOf = [&](int j) { return s.sentOffsets[(j + 1) * rpp] - s.sentOffsets[j * rpp]; };
  ws.sizes.resize(p);
  ws.recvSizes.resize(p);
  for (int j = 0; j < p; ++j) {
    ws.sizes[j] = int8 ? valuesStreamBytesInt8(rpp, outOf(j)) : valuesStreamBytes(outOf(j), wire);
    ws.recvSizes[j] = int8 ? valuesStreamBytesInt8(rpp, inOf(j)) : valuesStreamBytes(inOf(j), wire);
  }
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, layoutStreams(ws.sizes, &ws.offsets)));
  auto* send = ws.sendStream.get<unsigned char>();
  const auto* recvOffsets = s.recvOffsetsIn.get<uint64_t>();
  const auto* recvPositions = s.recvPositions.get<uint32_t>();
  const auto* sentOffsets = s.sentOffsetsIn.get<uint64_t>();
  const auto* sentPositions = s.sentPositions.get<uint32_t>();
  float* stagedValues = nullptr;  // fp32, in recvPositions order (int8, fp8)
  if (int8 || fp8) {
    SPCCL_RETURN_IF_ERROR(ws.rowsStaged.ensure(ex, std::max<uint64_t>(s.recvOffsets[nRows], 1) * sizeof(float)));
    stagedValues = ws.rowsStaged.get<float>();
    SPCCL_RETURN_IF_ERROR(ex.gatherRows(gradSend, sel.dataType, nRows, len, recvPositions, recvOffsets,
                                        core::ValueType::kFloat32, stagedValues));
  }
  if (fp8) SPCCL_RETURN_IF_ERROR(streamMaxKeys(ex, stagedValues, s.recvOffsets.data(), rpp, p, &ws.rowsMaxKeys));
  for (int j = 0; j < p; ++j) {
    unsigned char* dst = send + ws.offsets[j];
    const uint64_t first = s.recvOffsets[j * rpp], n = outOf(j);
    const int scaleExp = fp8 ? core::fp8ScaleForMax(ws.rowsMaxKeys[j]) : 0;
    const RowsHeader h =
        int8 ? valuesStreamHeaderInt8(n, rpp, rowLen, seq) : valuesStreamHeader(n, rpp, rowLen, wire, scaleExp, seq);
    SPCCL_RETURN_IF_ERROR(ex.storeSmall(dst, &h, sizeof h));
    if (int8)
      SPCCL_RETURN_IF_ERROR(ex.encodeRowsInt8(stagedValues + first, recvOffsets + j * rpp, rpp, dst + sizeof h,
                                              dst + sizeof h + rpp * sizeof(float)));
    else if (fp8) SPCCL_RETURN_IF_ERROR(ex.toWire(stagedValues + first, n, wire, scaleExp, dst + sizeof h));
    else
      SPCCL_RETURN_IF_ERROR(ex.gatherRows(static_cast<const char*>(gradSend) + j * blockElems * esize, sel.dataType,
                                          rpp, len, recvPositions + first, recvOffsets + j * rpp, wire,
                                          dst + sizeof h));
    const size_t used = sizeof h + (int8 ? rpp * sizeof(float) + n : n * core::wireValueBytes(wire));
    SPCCL_RETURN_IF_ERROR(ex.fill(dst + used, 0, ws.sizes[j] - used));
  }
  for (int j = 0; j < p; ++j)
    SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, &comm.integrity, send + ws.offsets[j], ws.sizes[j]));
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, layoutStreams(ws.recvSizes, &ws.recvOffsets)));
  auto* recv = ws.recvStream.get<unsigned char>();
  SPCCL_RETURN_IF_ERROR(ex.withMemory([&] {
    return t.allToAllV(send, ws.sizes.data(), ws.offsets.data(), recv, ws.recvSizes.data(), ws.recvOffsets.data());
  }));

  // As in the forward; a refused stream leaves the whole output zero.
  const auto refuse = [&](const Status& st) {
    SPCCL_RETURN_IF_ERROR(ex.fill(gradRecv, 0, static_cast<size_t>(p) * blockElems * esize));
    return st;
  };
  const Status verified = fetchHeadersOn(ex, recv, ws.recvOffsets.data(), ws.recvSizes.data(), p, 0, &ws.streams);
  if (!verified.isOk()) return refuse(verified);
  const StreamsScratch& sc = ws.streams;
  ws.rowsScaleExps.resize(p);
  for (int j = 0; j < p; ++j) {
    RowsHeader h;
    std::memcpy(&h, &sc.headers[j], sizeof h);
    int scaleExp = 0;
    const Status st = int8 ? checkValuesStreamHeaderInt8(h, ws.recvSizes[j], rpp, inOf(j), seq, j)
                           : checkValuesStreamHeader(h, ws.recvSizes[j], inOf(j), wire, seq, j, &scaleExp);
    if (!st.isOk()) return refuse(st);
    ws.rowsScaleExps[j] = scaleExp;
  }
  Status refusal;
  SPCCL_RETURN_IF_ERROR(storeBlocks(
      ex, ws, recv, [](int) { return sizeof(RowsHeader); }, [&](int j) { return ws.rowsScaleExps[j]; }, int8, wire,
      sentPositions, s.sentOffsets, sentOffsets, rpp, len, sel.dataType, gradRecv, blockElems * esize, p, &refusal));
  if (!refusal.isOk()) return refuse(refusal);
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
