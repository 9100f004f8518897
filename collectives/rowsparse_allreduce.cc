// Row-sparse allreduce for embedding gradients. Each rank first merges its
// duplicate ids (sorted, rows summed in input order), so an id crosses the
// wire at most once per rank. Then either
//   allgather: every rank's merged (ids, rows) to every rank, or
//   partition: ids hashed to owner ranks (alltoallv), owners sum, owners'
//              results allgathered;
// and every rank merges the P sorted lists, summing equal ids in rank order,
// so the output is bitwise identical everywhere and the same for both
// algorithms. Rows are summed in fp32 (fp64 for fp64 input) and rounded to
// the user type once, at the end.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <numeric>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "kernels/host/host_kernels.h"
#include "codec/codec.h"
#include "collectives/context.h"
#include "collectives/cost_model.h"
#include "kernels/core/types.h"

namespace spccl {

namespace {

uint32_t ownerOf(int64_t id, int p) {
  uint64_t x = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;  // splitmix64 finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<uint32_t>(x % static_cast<uint64_t>(p));
}

// A sorted (ids, rows) list of Acc rows, and the call's lists: the
// communicator's, kept between calls (Workspace), so that a steady call
// allocates nothing.
template <typename Acc>
using IdRows = Workspace::IdRows<Acc>;

template <typename Acc>
Workspace::RowSparseLists<Acc>& listsOf(Workspace& ws) {
  if constexpr (sizeof(Acc) == 8) return ws.rowSparse64;
  else return ws.rowSparse32;
}

template <typename Acc>
void loadRow(const void* rows, spcclDataType_t type, size_t row, size_t rowLen, Acc* dst) {
  if constexpr (sizeof(Acc) == 8) {
    std::memcpy(dst, static_cast<const double*>(rows) + row * rowLen, rowLen * sizeof(double));
  } else {
    host::loadFloats(static_cast<const char*>(rows) + row * rowLen * dataTypeSize(type), type, rowLen, dst);
  }
}

// Local de-duplication: sorted unique ids, each row the sum of its
// occurrences in input order.
template <typename Acc>
void mergeLocal(const int64_t* ids, const void* rows, size_t nrows, size_t rowLen, spcclDataType_t type,
                std::vector<uint64_t>& order, std::vector<Acc>& rowBuf, IdRows<Acc>* out) {
  order.resize(nrows);
  std::iota(order.begin(), order.end(), uint64_t{0});
  // Input order among equal ids (the sums' order), without stable_sort's
  // temporary buffer: the position breaks ties.
  std::sort(order.begin(), order.end(),
            [&](uint64_t a, uint64_t b) { return ids[a] < ids[b] || (ids[a] == ids[b] && a < b); });
  out->clear();
  rowBuf.resize(rowLen);
  for (uint64_t i : order) {
    if (out->ids.empty() || out->ids.back() != ids[i]) {
      out->ids.push_back(ids[i]);
      out->rows.resize(out->rows.size() + rowLen, Acc(0));
    }
    loadRow<Acc>(rows, type, i, rowLen, rowBuf.data());
    Acc* acc = out->rows.data() + out->rows.size() - rowLen;
    for (size_t e = 0; e < rowLen; ++e) acc[e] += rowBuf[e];
  }
}

// Merges P sorted streams, summing equal ids in rank order into `out`.
template <typename Acc>
void mergeStreams(const std::vector<IdRowsView>& views, size_t rowLen, std::vector<uint64_t>& head, IdRows<Acc>* out) {
  const size_t p = views.size();
  head.assign(p, 0);
  out->clear();
  for (;;) {
    bool any = false;
    int64_t next = 0;
    for (size_t r = 0; r < p; ++r)
      if (head[r] < views[r].nIds) {
        const int64_t id = idAt(views[r], head[r]);
        if (!any || id < next) next = id;
        any = true;
      }
    if (!any) return;
    out->ids.push_back(next);
    out->rows.resize(out->rows.size() + rowLen, Acc(0));
    Acc* acc = out->rows.data() + out->rows.size() - rowLen;
    for (size_t r = 0; r < p; ++r) {
      if (head[r] >= views[r].nIds || idAt(views[r], head[r]) != next) continue;
      const Acc* row = static_cast<const Acc*>(views[r].rows) + head[r] * rowLen;
      for (size_t e = 0; e < rowLen; ++e) acc[e] += row[e];
      ++head[r];
    }
  }
}

// Parses P id-row streams laid out by sizes/offsets in `bytes`.
Status parseAll(const std::vector<unsigned char>& bytes, const std::vector<size_t>& sizes,
                const std::vector<size_t>& offsets, size_t rowLen, uint32_t vb, uint64_t seq,
                std::vector<IdRowsView>* views) {
  views->resize(sizes.size());
  for (size_t r = 0; r < sizes.size(); ++r)
    SPCCL_RETURN_IF_ERROR(
        parseIdRows(bytes.data() + offsets[r], sizes[r], rowLen, vb, seq, static_cast<int>(r), &(*views)[r]));
  return Status::ok();
}

template <typename Acc>
Status rowSparseImpl(CollectiveContext& comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                     spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                     spcclStats_t* call) {
  Transport& t = *comm.transport;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const uint32_t vb = sizeof(Acc);
  const uint64_t seq = comm.seq++;
  SPCCL_RETURN_IF_ERROR(
      agreeOnCall(comm, t, rowSparseDescriptor(comm.settings->rowSparseAlgorithm, seq, rowLen, type)));

  Workspace::RowSparseLists<Acc>& lists = listsOf<Acc>(ws);
  IdRows<Acc>& mine = lists.mine;
  IdRows<Acc>& result = lists.result;
  mergeLocal<Acc>(ids, rows, nrows, rowLen, type, comm.ranks64, lists.rowBuf, &mine);
  uint64_t myUnique = mine.ids.size();
  ws.nnzPerRank.resize(p);
  SPCCL_RETURN_IF_ERROR(t.allGather(&myUnique, sizeof myUnique, ws.nnzPerRank.data()));
  const uint64_t sumUnique = std::accumulate(ws.nnzPerRank.begin(), ws.nnzPerRank.end(), uint64_t{0});
  uint64_t bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + sizeof(uint64_t));

  // Every input below is the same on every rank (the cost model is rank 0's,
  // resolved at creation), so every rank picks the same.
  const int algo = comm.settings->rowSparseAlgorithm != kRowSparseAuto
                       ? comm.settings->rowSparseAlgorithm
                       : chooseRowSparseAlgorithm(p, sumUnique, rowLen, vb, comm.rowSparseOverlap, comm.costModel);
  std::vector<IdRowsView>& views = ws.idRowsViews;
  if (algo == kRowSparseAllgather) {
    ws.sizes.resize(p);
    for (int r = 0; r < p; ++r) ws.sizes[r] = idRowsStreamBytes(ws.nnzPerRank[r], rowLen, vb);
    ws.recvBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
    ws.sendBytes.resize(ws.sizes[me]);
    encodeIdRows(ws.sendBytes.data(), mine.ids.data(), mine.rows.data(), myUnique, rowLen, vb, seq);
    sealStream(&comm.integrity, ws.sendBytes.data(), ws.sizes[me]);
    SPCCL_RETURN_IF_ERROR(
        t.allGatherV(ws.sendBytes.data(), ws.sizes[me], ws.recvBytes.data(), ws.sizes.data(), ws.offsets.data()));
    bytesSent += static_cast<uint64_t>(p - 1) * ws.sizes[me];
    SPCCL_RETURN_IF_ERROR(parseAll(ws.recvBytes, ws.sizes, ws.offsets, rowLen, vb, seq, &views));
    mergeStreams<Acc>(views, rowLen, ws.heads, &result);
  } else {
    // Stage 1: each merged id to its owner, in id order.
    std::vector<IdRows<Acc>>& parts = lists.parts;
    parts.resize(p);
    for (IdRows<Acc>& part : parts) part.clear();
    for (size_t i = 0; i < mine.ids.size(); ++i) {
      IdRows<Acc>& part = parts[ownerOf(mine.ids[i], p)];
      part.ids.push_back(mine.ids[i]);
      part.rows.insert(part.rows.end(), mine.rows.begin() + i * rowLen, mine.rows.begin() + (i + 1) * rowLen);
    }
    ws.sizes.resize(p);
    for (int r = 0; r < p; ++r) ws.sizes[r] = idRowsStreamBytes(parts[r].ids.size(), rowLen, vb);
    ws.sendBytes.resize(layoutStreams(ws.sizes, &ws.offsets));
    for (int r = 0; r < p; ++r) {
      encodeIdRows(ws.sendBytes.data() + ws.offsets[r], parts[r].ids.data(), parts[r].rows.data(), parts[r].ids.size(),
                   rowLen, vb, seq);
      sealStream(&comm.integrity, ws.sendBytes.data() + ws.offsets[r], ws.sizes[r]);
    }
    ws.counts.assign(ws.sizes.begin(), ws.sizes.end());
    ws.recvCounts.resize(p);
    SPCCL_RETURN_IF_ERROR(t.allToAll(ws.counts.data(), sizeof(uint64_t), ws.recvCounts.data()));
    ws.recvSizes.resize(p);
    Status local;
    for (int r = 0; r < p; ++r)  // a peer sends at most its own unique count, announced above
      ws.recvSizes[r] = announcedSize(ws.recvCounts[r], idRowsStreamBytes(ws.nnzPerRank[r], rowLen, vb), r,
                                      "row-sparse stage 1", &local);
    ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
    const Status moved = t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                     ws.recvSizes.data(), ws.recvOffsets.data());
    if (local.isOk()) local = moved;
    for (int r = 0; r < p; ++r)
      if (r != me) bytesSent += sizeof(uint64_t) + ws.sizes[r];
    // Stage 2: the owner sums its ids in rank order. An owner that rejects a
    // piece still takes part in stage 3, with a flagged empty stream, so no
    // rank is left waiting.
    IdRows<Acc>& owned = lists.owned;
    owned.clear();
    if (local.isOk()) local = parseAll(ws.recvBytes, ws.recvSizes, ws.recvOffsets, rowLen, vb, seq, &views);
    if (local.isOk()) mergeStreams<Acc>(views, rowLen, ws.heads, &owned);
    // Stage 3: allgather the owners' results; id sets are disjoint.
    uint64_t ownedBytes = idRowsStreamBytes(owned.ids.size(), rowLen, vb);
    ws.stageBytes.resize(ownedBytes);
    encodeIdRows(ws.stageBytes.data(), owned.ids.data(), owned.rows.data(), owned.ids.size(), rowLen, vb, seq);
    if (!local.isOk()) ws.stageBytes[offsetof(RowsHeader, status)] = static_cast<unsigned char>(local.code());
    sealStream(&comm.integrity, ws.stageBytes.data(), ownedBytes);  // after the status byte
    SPCCL_RETURN_IF_ERROR(t.allGather(&ownedBytes, sizeof ownedBytes, ws.recvCounts.data()));
    for (int r = 0; r < p; ++r)
      ws.recvSizes[r] =
          announcedSize(ws.recvCounts[r], idRowsStreamBytes(sumUnique, rowLen, vb), r, "row-sparse stage 3", &local);
    ws.recvBytes.resize(layoutStreams(ws.recvSizes, &ws.recvOffsets));
    const Status gathered =
        t.allGatherV(ws.stageBytes.data(), ownedBytes, ws.recvBytes.data(), ws.recvSizes.data(), ws.recvOffsets.data());
    if (local.isOk()) local = gathered;
    bytesSent += static_cast<uint64_t>(p - 1) * (sizeof(uint64_t) + ownedBytes);
    SPCCL_RETURN_IF_ERROR(local);
    SPCCL_RETURN_IF_ERROR(parseAll(ws.recvBytes, ws.recvSizes, ws.recvOffsets, rowLen, vb, seq, &views));
    mergeStreams<Acc>(views, rowLen, ws.heads, &result);
  }

  const size_t unionSize = result.ids.size();
  if (unionSize > 0) comm.rowSparseOverlap = static_cast<double>(sumUnique) / static_cast<double>(unionSize);
  *outNrows = unionSize;
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->bytesSent = bytesSent;
  call->denseBytes = static_cast<uint64_t>(p - 1) * nrows * (sizeof(int64_t) + rowLen * dataTypeSize(type));
  if (unionSize > outCapacity)
    return invalidUsage(formatString("row-sparse allreduce: the union has %zu ids, outCapacity is %zu (*outNrows "
                                     "holds the size needed)",
                                     unionSize, outCapacity))
        .markExpected();
  if (unionSize > 0) std::memcpy(outIds, result.ids.data(), unionSize * sizeof(int64_t));
  if constexpr (sizeof(Acc) == 8) {
    if (unionSize > 0) std::memcpy(outRows, result.rows.data(), result.rows.size() * sizeof(double));
  } else {
    host::storeFloats(result.rows.data(), result.rows.size(), type, outRows);
  }
  return Status::ok();
}

}  // namespace

CallDescriptor rowSparseDescriptor(int algorithmSetting, uint64_t seq, size_t rowLen, spcclDataType_t type) {
  // Rows travel as their accumulation type: fp64 for fp64 input, else fp32.
  return CallDescriptor{kStreamMagic,
                        static_cast<uint8_t>(algorithmSetting),
                        static_cast<uint8_t>(type == spcclFloat64 ? spcclFloat64 : spcclFloat32),
                        static_cast<uint8_t>(type),
                        static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(Collective::kRowSparse)),
                        seq,
                        rowLen,
                        rowLen};
}

Status allReduceRowSparse(CollectiveContext& comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                          spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                          spcclStats_t* call) {
  if (type == spcclFloat64)
    return rowSparseImpl<double>(comm, ids, rows, nrows, rowLen, type, outIds, outRows, outCapacity, outNrows, call);
  return rowSparseImpl<float>(comm, ids, rows, nrows, rowLen, type, outIds, outRows, outCapacity, outNrows, call);
}

}  // namespace spccl
