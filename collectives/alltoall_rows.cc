// DCT-MP alltoall: per row, the top max(1, ceil(density*rowLen)) entries by
// magnitude travel as (row-local position, value) with positions in the
// narrowest integer that fits rowLen, and no per-row counts unless some row
// kept extra NaN/Inf. The backward sends values only: both sides remember the
// positions in the selection.
#include <algorithm>
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "kernels/host/host_kernels.h"
#include "src/codec.h"
#include "src/comm.h"
#include "src/types.h"

namespace spccl {

namespace {

// Writes v at element i of a user float buffer (fp32, fp16 or bf16).
inline void storeElement(void* buf, size_t i, spcclDataType_t type, float v) {
  switch (type) {
    case spcclFloat16:
      static_cast<uint16_t*>(buf)[i] = core::floatToHalfBits(v);
      break;
    case spcclBfloat16:
      static_cast<uint16_t*>(buf)[i] = core::floatToBfloat16Bits(v);
      break;
    default:
      static_cast<float*>(buf)[i] = v;
  }
}

// Element i of a user float buffer as fp32.
inline float loadElement(const void* buf, size_t i, spcclDataType_t type) {
  switch (type) {
    case spcclFloat16:
      return core::halfBitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case spcclBfloat16:
      return core::bfloat16BitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    default:
      return static_cast<const float*>(buf)[i];
  }
}

// Zeroes elements [at, at + elems) of a user buffer of esize-byte elements
// (buf may be NULL when elems is 0).
inline void zeroElements(void* buf, size_t at, size_t elems, size_t esize) {
  if (elems > 0) std::memset(static_cast<char*>(buf) + at * esize, 0, elems * esize);
}

}  // namespace

CallDescriptor rowsDescriptor(Collective coll, uint64_t seq, size_t rowsPerPeer, size_t rowLen,
                              spcclDataType_t type, core::ValueType wire) {
  return CallDescriptor{kStreamMagic, 0, static_cast<uint8_t>(wire), static_cast<uint8_t>(type),
                        static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(coll)), seq,
                        static_cast<uint64_t>(rowsPerPeer) * rowLen, rowLen};
}

Status alltoAllRowsForward(spcclComm& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                           spcclDataType_t type, float density, spcclSelection* sel, spcclStats_t* call) {
  Transport& t = *comm.transport;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const core::ValueType wire = comm.params.valueType;
  const uint32_t keep = core::rowKeep(rowLen, density);
  const size_t esize = dataTypeSize(type), blockElems = rowsPerPeer * rowLen;
  const uint64_t seq = comm.seq++;

  SPCCL_RETURN_IF_ERROR(
      agreeOnCall(t, rowsDescriptor(Collective::kAlltoAllRows, seq, rowsPerPeer, rowLen, type, wire), &comm.descriptors));

  // Select every row, block by block; positions and counts go to the selection.
  spcclSelection local;
  spcclSelection& s = sel ? *sel : local;
  s.sentCounts.resize(static_cast<size_t>(p) * rowsPerPeer);
  // Kept positions and their values go straight to their slots (rows keep
  // `keep` each unless NaN/Inf add more: grown then), and only the kept
  // elements are read back from the row.
  s.sentPositions.resize(s.sentCounts.size() * keep);
  comm.ranks64.resize(rowLen);
  comm.positions.resize(rowLen);
  std::vector<float>& values = ws.rangeAcc;  // kept values, in sentPositions order
  values.resize(s.sentPositions.size());
  size_t used = 0;
  for (size_t r = 0; r < s.sentCounts.size(); ++r) {
    const char* row = static_cast<const char*>(sendbuff) + r * rowLen * esize;
    const uint32_t n = host::selectRowTopK(row, type, static_cast<uint32_t>(rowLen), keep, comm.positions.data(),
                                           comm.ranks64.data());
    s.sentCounts[r] = n;
    if (used + n > values.size()) {
      s.sentPositions.resize(std::max(2 * values.size(), used + n));
      values.resize(s.sentPositions.size());
    }
    for (uint32_t e = 0; e < n; ++e) {
      const uint32_t pos = comm.positions[e];
      s.sentPositions[used + e] = pos;
      values[used + e] = loadElement(row, pos, type);
    }
    used += n;
  }
  s.sentPositions.resize(used);
  values.resize(used);

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
    ws.sizes[j] = rowsStreamBytes(rowsPerPeer, rowLen, nnz, !fixed, wire);
  }
  ws.sendBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
  for (int j = 0; j < p; ++j) {
    const uint64_t nnz = ws.cuts[j + 1] - ws.cuts[j];
    const bool fixed = nnz == rowsPerPeer * keep &&
                       std::all_of(s.sentCounts.begin() + j * rowsPerPeer, s.sentCounts.begin() + (j + 1) * rowsPerPeer,
                                   [&](uint32_t c) { return c == keep; });
    encodeRows(ws.sendBytes.data() + ws.offsets[j], rowsPerPeer, rowLen, fixed ? keep : 0,
               s.sentCounts.data() + j * rowsPerPeer, s.sentPositions.data() + ws.cuts[j],
               values.data() + ws.cuts[j], nnz, wire, seq);
    sealStream(&comm.integrity, ws.sendBytes.data() + ws.offsets[j], ws.sizes[j]);
  }
  ws.counts.assign(ws.sizes.begin(), ws.sizes.end());
  ws.recvCounts.resize(p);
  SPCCL_RETURN_IF_ERROR(t.allToAll(ws.counts.data(), sizeof(uint64_t), ws.recvCounts.data()));
  ws.recvSizes.resize(p);
  const size_t largest = rowsStreamBytes(rowsPerPeer, rowLen, blockElems, true, wire);
  Status implausible;
  for (int j = 0; j < p; ++j)
    ws.recvSizes[j] = announcedSize(ws.recvCounts[j], largest, j, "alltoall rows", &implausible);
  ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
  const Status moved = t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                   ws.recvSizes.data(), ws.recvOffsets.data());
  SPCCL_RETURN_IF_ERROR(implausible);  // the exchange is over: nothing left to wait for
  SPCCL_RETURN_IF_ERROR(moved);

  // Dense rows out, zeros at the dropped positions: each row zeroed right
  // before its kept entries are stored, so the stores hit the lines the
  // zeroing has just brought in. A refused stream leaves the whole output zero.
  auto refuse = [&](Status st) {
    zeroElements(recvbuff, 0, static_cast<size_t>(p) * blockElems, esize);
    return st;
  };
  s.recvCounts.resize(static_cast<size_t>(p) * rowsPerPeer);
  s.recvPositions.clear();
  s.recvPositions.reserve(s.recvCounts.size() * keep);
  for (int j = 0; j < p; ++j) {
    RowsView v;
    const Status parsed = parseRows(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], rowsPerPeer, rowLen,
                                    wire, seq, j, &v);
    if (!parsed.isOk()) return refuse(parsed);
    if (v.keepPerRow != 0 && v.keepPerRow != keep)
      return refuse(invalidUsage(formatString("alltoall rows: rank %d keeps %llu entries per row, this rank %u "
                                              "(different densities?)",
                                              j, static_cast<unsigned long long>(v.keepPerRow), keep)));
    uint64_t e = 0;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      const uint32_t c = v.countOf(r);
      if (c < keep)
        return refuse(invalidUsage(
            formatString("alltoall rows: rank %d kept %u entries in a row, this rank keeps %u", j, c, keep)));
      const size_t rowBase = (j * rowsPerPeer + r) * rowLen;
      zeroElements(recvbuff, rowBase, rowLen, esize);
      s.recvCounts[j * rowsPerPeer + r] = c;
      for (uint32_t k = 0; k < c; ++k, ++e) {
        const uint32_t pos = v.positionAt(e);
        s.recvPositions.push_back(pos);
        storeElement(recvbuff, rowBase + pos, type, core::loadWireValue(v.values, e, wire, v.scaleExp));
      }
    }
  }
  if (sel) {
    sel->rowsPerPeer = rowsPerPeer;
    sel->rowLen = rowLen;
    sel->dataType = type;
    sel->wire = wire;
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->lastSelected = s.sentPositions.size();
  call->denseBytes = static_cast<uint64_t>(p - 1) * blockElems * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + sizeof(uint64_t));
  for (int j = 0; j < p; ++j)
    if (j != me) call->bytesSent += ws.sizes[j];
  return Status::ok();
}

Status alltoAllRowsBackward(spcclComm& comm, const void* gradSend, void* gradRecv, const spcclSelection& s,
                            spcclStats_t* call) {
  Transport& t = *comm.transport;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const size_t rowsPerPeer = s.rowsPerPeer, rowLen = s.rowLen, esize = dataTypeSize(s.dataType);
  const size_t blockElems = rowsPerPeer * rowLen;
  const uint64_t seq = comm.seq++;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(
      t, rowsDescriptor(Collective::kAlltoAllRowsBackward, seq, rowsPerPeer, rowLen, s.dataType, s.wire),
      &comm.descriptors));

  // To peer j: the gradient at the positions this rank received from j.
  // From peer j: values for the positions this rank sent to j. Both sizes are
  // known from the selection, so no size exchange.
  ws.sizes.resize(p);
  ws.recvSizes.resize(p);
  ws.cuts.assign(p + 1, 0);         // prefix of received positions per peer
  ws.nnzPerRank.assign(p + 1, 0);   // prefix of sent positions per peer
  for (int j = 0; j < p; ++j) {
    uint64_t in = 0, out = 0;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      in += s.recvCounts[j * rowsPerPeer + r];
      out += s.sentCounts[j * rowsPerPeer + r];
    }
    ws.cuts[j + 1] = ws.cuts[j] + in;
    ws.nnzPerRank[j + 1] = ws.nnzPerRank[j] + out;
    ws.sizes[j] = valuesStreamBytes(in, s.wire);
    ws.recvSizes[j] = valuesStreamBytes(out, s.wire);
  }
  ws.sendBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
  std::vector<float>& values = ws.rangeAcc;
  values.resize(ws.cuts[p]);
  uint64_t e = 0;
  for (size_t row = 0; row < s.recvCounts.size(); ++row) {
    const char* grad = static_cast<const char*>(gradSend) + row * rowLen * esize;
    for (uint32_t k = 0; k < s.recvCounts[row]; ++k, ++e) values[e] = loadElement(grad, s.recvPositions[e], s.dataType);
  }
  for (int j = 0; j < p; ++j) {
    encodeValues(ws.sendBytes.data() + ws.offsets[j], values.data() + ws.cuts[j], ws.cuts[j + 1] - ws.cuts[j],
                 rowsPerPeer, rowLen, s.wire, seq);
    sealStream(&comm.integrity, ws.sendBytes.data() + ws.offsets[j], ws.sizes[j]);
  }
  ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
  SPCCL_RETURN_IF_ERROR(t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                    ws.recvSizes.data(), ws.recvOffsets.data()));

  // As in the forward: each row zeroed right before its entries are stored;
  // a refused stream leaves the whole output zero.
  e = 0;
  for (int j = 0; j < p; ++j) {
    const void* vals = nullptr;
    int scaleExp = 0;
    const uint64_t n = ws.nnzPerRank[j + 1] - ws.nnzPerRank[j];
    const Status parsed =
        parseValues(ws.recvBytes.data() + ws.recvOffsets[j], ws.recvSizes[j], n, s.wire, seq, j, &vals, &scaleExp);
    if (!parsed.isOk()) {
      zeroElements(gradRecv, 0, static_cast<size_t>(p) * blockElems, esize);
      return parsed;
    }
    uint64_t k = 0;
    for (size_t r = 0; r < rowsPerPeer; ++r) {
      const size_t rowBase = (j * rowsPerPeer + r) * rowLen;
      zeroElements(gradRecv, rowBase, rowLen, esize);
      for (uint32_t c = 0; c < s.sentCounts[j * rowsPerPeer + r]; ++c, ++k, ++e)
        storeElement(gradRecv, rowBase + s.sentPositions[e], s.dataType,
                     core::loadWireValue(vals, k, s.wire, scaleExp));
    }
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->lastSelected = ws.cuts[p];
  call->denseBytes = static_cast<uint64_t>(p - 1) * blockElems * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * sizeof(CallDescriptor);
  for (int j = 0; j < p; ++j)
    if (j != me) call->bytesSent += ws.sizes[j];
  return Status::ok();
}

}  // namespace spccl
