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
#include <climits>
#include <cstddef>
#include <cstring>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "codec/codec.h"
#include "collectives/context.h"
#include "collectives/cost_model.h"
#include "kernels/core/types.h"

namespace spccl {

namespace {

// Received id-rows streams (in `data`, laid out by sizes/offsets; executor
// memory) as merge lists: each header read to the host and checked (its CRC
// first, where sealed), the ids' order left to the merge.
Status idRowsLists(Executor& ex, const unsigned char* data, const std::vector<size_t>& sizes,
                   const std::vector<size_t>& offsets, uint64_t rowLen, uint32_t vb, uint64_t seq, Workspace& ws) {
  const size_t p = sizes.size();
  ws.idRowsHeaders.assign(p, RowsHeader{});
  for (size_t r = 0; r < p; ++r)
    if (sizes[r] >= sizeof(RowsHeader))
      SPCCL_RETURN_IF_ERROR(ex.toHost(&ws.idRowsHeaders[r], data + offsets[r], sizeof(RowsHeader)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  SPCCL_RETURN_IF_ERROR(
      verifyStreamsOn(ex, data, offsets.data(), sizes.data(), p, ws.idRowsHeaders.data(), 0, &ws.streams.crcs));
  ws.idRowsLists.resize(p);
  for (size_t r = 0; r < p; ++r) {
    const RowsHeader& h = ws.idRowsHeaders[r];
    SPCCL_RETURN_IF_ERROR(parseIdRowsHeader(h, sizes[r], rowLen, vb, seq, static_cast<int>(r)));
    const unsigned char* ids = data + offsets[r] + sizeof h;
    ws.idRowsLists[r] = IdRowsSection{reinterpret_cast<const int64_t*>(ids), ids + h.rows * sizeof(int64_t), h.rows};
  }
  return Status::ok();
}

// The union of the lists in ws.idRowsLists into ws.unionIds/unionRows; the
// number of ids in *unionSize.
Status mergeLists(Executor& ex, spcclDataType_t accType, uint64_t rowLen, Workspace& ws, uint64_t* unionSize) {
  const size_t p = ws.idRowsLists.size();
  uint64_t most = 0;
  for (const IdRowsSection& l : ws.idRowsLists) most += l.n;
  SPCCL_RETURN_IF_ERROR(ws.unionIds.ensure(ex, std::max<uint64_t>(most, 1) * sizeof(int64_t)));
  SPCCL_RETURN_IF_ERROR(ws.unionRows.ensure(ex, std::max<uint64_t>(most, 1) * rowLen * dataTypeSize(accType)));
  ws.unordered.assign(p, 0);
  SPCCL_RETURN_IF_ERROR(ex.mergeRowLists(ws.idRowsLists.data(), p, accType, rowLen, ws.unionIds.get<int64_t>(),
                                         ws.unionRows.get(), unionSize, ws.unordered.data()));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  for (size_t r = 0; r < p; ++r)
    if (ws.unordered[r] != 0)
      return remoteError(formatString("id-rows stream from rank %zu: ids not strictly increasing at %llu", r,
                                      static_cast<unsigned long long>(ws.unordered[r])));
  return Status::ok();
}

// An id-rows stream at dst (`bytes` = idRowsStreamBytes of n, executor
// memory): header h from the host, n ids and n rows of rowBytes copied from
// executor memory, zeros to the end, sealed where checksums are on.
Status writeIdRowsStream(Executor& ex, Integrity* integrity, unsigned char* dst, size_t bytes, const RowsHeader& h,
                         const int64_t* ids, const void* rows, uint64_t n, size_t rowBytes) {
  SPCCL_RETURN_IF_ERROR(ex.fromHost(dst, &h, sizeof h));
  const size_t rowsAt = sizeof h + n * sizeof(int64_t), used = rowsAt + n * rowBytes;
  SPCCL_RETURN_IF_ERROR(ex.copy(dst + sizeof h, ids, n * sizeof(int64_t)));
  SPCCL_RETURN_IF_ERROR(ex.copy(dst + rowsAt, rows, n * rowBytes));
  if (bytes > used) SPCCL_RETURN_IF_ERROR(ex.fill(dst + used, 0, bytes - used));
  return sealStreamOn(ex, integrity, dst, bytes);
}

// The partition algorithm's stages. mine: this rank's merged list (executor
// memory); the owners' sums end in ws.idRowsLists, views of ws.recvStream.
// A rank whose stage 1 or 2 fails still takes part in every exchange after
// it (stage 3 with a flagged empty stream), so no rank is left waiting.
Status partitionStages(CollectiveContext& comm, Transport& t, const IdRowsSection& mine, spcclDataType_t accType,
                       uint64_t rowLen, uint64_t seq, uint64_t sumUnique, uint64_t* bytesSent) {
  Executor& ex = *comm.executor;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const uint32_t vb = static_cast<uint32_t>(dataTypeSize(accType));
  const size_t rowBytes = rowLen * vb;
  SPCCL_RETURN_IF_ERROR(ws.sizeSend.ensure(ex, p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ws.sizeRecv.ensure(ex, p * sizeof(uint64_t)));
  // Stage 1: each merged id to its owner, in id order: one stream per owner.
  // (The union buffers serve as scratch until stage 2's merge.)
  SPCCL_RETURN_IF_ERROR(ws.unionIds.ensure(ex, std::max<uint64_t>(mine.n, 1) * sizeof(int64_t)));
  SPCCL_RETURN_IF_ERROR(ws.unionRows.ensure(ex, std::max<uint64_t>(mine.n, 1) * rowBytes));
  std::vector<uint64_t>& perOwner = ws.bounds;
  perOwner.resize(p);
  SPCCL_RETURN_IF_ERROR(ex.splitByOwner(mine.ids, mine.rows, accType, mine.n, rowLen, p, ws.unionIds.get<int64_t>(),
                                        ws.unionRows.get(), perOwner.data()));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  ws.sizes.resize(p);
  for (int r = 0; r < p; ++r) ws.sizes[r] = idRowsStreamBytes(perOwner[r], rowLen, vb);
  SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, layoutStreams(ws.sizes, &ws.offsets)));
  auto* send = ws.stageStream.get<unsigned char>();
  uint64_t first = 0;
  for (int r = 0; r < p; ++r) {
    SPCCL_RETURN_IF_ERROR(
        writeIdRowsStream(ex, &comm.integrity, send + ws.offsets[r], ws.sizes[r],
                          idRowsHeader(perOwner[r], rowLen, vb, seq), ws.unionIds.get<int64_t>() + first,
                          ws.unionRows.get<unsigned char>() + first * rowBytes, perOwner[r], rowBytes));
    first += perOwner[r];
  }
  SPCCL_RETURN_IF_ERROR(exchangeSizes(ex, t, ws));
  ws.recvSizes.resize(p);
  Status local;
  for (int r = 0; r < p; ++r)  // a peer sends at most its own unique count, announced before
    ws.recvSizes[r] = announcedSize(ws.recvCounts[r], idRowsStreamBytes(ws.nnzPerRank[r], rowLen, vb), r,
                                    "row-sparse stage 1", &local);
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, layoutStreams(ws.recvSizes, &ws.recvOffsets)));
  const Status moved = ex.withMemory([&] {
    return t.allToAllV(send, ws.sizes.data(), ws.offsets.data(), ws.recvStream.get(), ws.recvSizes.data(),
                       ws.recvOffsets.data());
  });
  if (local.isOk()) local = moved;
  for (int r = 0; r < p; ++r)
    if (r != me) *bytesSent += sizeof(uint64_t) + ws.sizes[r];

  // Stage 2: the owner sums its ids in rank order, the pieces checked as the
  // allgather algorithm's streams are.
  uint64_t owned = 0;
  if (local.isOk())
    local = idRowsLists(ex, ws.recvStream.get<unsigned char>(), ws.recvSizes, ws.recvOffsets, rowLen, vb, seq, ws);
  if (local.isOk()) local = mergeLists(ex, accType, rowLen, ws, &owned);
  if (!local.isOk()) owned = 0;

  // Stage 3: allgather the owners' results; id sets are disjoint.
  uint64_t ownedBytes = idRowsStreamBytes(owned, rowLen, vb);
  RowsHeader h = idRowsHeader(owned, rowLen, vb, seq);
  if (!local.isOk()) h.status = static_cast<uint8_t>(local.code());
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, ownedBytes));
  SPCCL_RETURN_IF_ERROR(writeIdRowsStream(ex, &comm.integrity, ws.sendStream.get<unsigned char>(), ownedBytes, h,
                                          ws.unionIds.get<int64_t>(), ws.unionRows.get(), owned, rowBytes));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.sizeSend.get(), &ownedBytes, sizeof ownedBytes));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGather(ws.sizeSend.get(), sizeof ownedBytes, ws.sizeRecv.get()); }));
  SPCCL_RETURN_IF_ERROR(ex.toHost(ws.recvCounts.data(), ws.sizeRecv.get(), p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  for (int r = 0; r < p; ++r)
    ws.recvSizes[r] =
        announcedSize(ws.recvCounts[r], idRowsStreamBytes(sumUnique, rowLen, vb), r, "row-sparse stage 3", &local);
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, layoutStreams(ws.recvSizes, &ws.recvOffsets)));
  const Status gathered = ex.withMemory([&] {
    return t.allGatherV(ws.sendStream.get(), ownedBytes, ws.recvStream.get(), ws.recvSizes.data(),
                        ws.recvOffsets.data());
  });
  if (local.isOk()) local = gathered;
  *bytesSent += static_cast<uint64_t>(p - 1) * (sizeof(uint64_t) + ownedBytes);
  SPCCL_RETURN_IF_ERROR(local);
  // As the allgather algorithm's streams: the ids' order is mergeLists' check.
  return idRowsLists(ex, ws.recvStream.get<unsigned char>(), ws.recvSizes, ws.recvOffsets, rowLen, vb, seq, ws);
}

template <typename Acc>
Status rowSparseImpl(CollectiveContext& comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                     spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                     spcclStats_t* call) {
  Transport& t = *comm.transport;
  Executor& ex = *comm.executor;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const uint32_t vb = sizeof(Acc);
  const spcclDataType_t accType = sizeof(Acc) == 8 ? spcclFloat64 : spcclFloat32;
  // An argument error, so before the exchange (the other ranks would wait
  // in it): the device's merge sorts 32-bit positions.
  if (ex.onDevice() && nrows >= static_cast<uint64_t>(INT_MAX))
    return invalidArgument(formatString("nrows=%zu: at most 2^31-2 rows on the device", nrows));
  const uint64_t seq = comm.seq++;
  SPCCL_RETURN_IF_ERROR(
      agreeOnCall(comm, t, rowSparseDescriptor(comm.settings->rowSparseAlgorithm, seq, rowLen, type)));

  // This rank's stream, header | ids | rows: the merge writes the ids in
  // place, the rows go after them once their count is known.
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, idRowsStreamBytes(nrows, rowLen, vb)));
  SPCCL_RETURN_IF_ERROR(ws.mergedRows.ensure(ex, std::max<size_t>(nrows, 1) * rowLen * vb));
  auto* stream = ws.sendStream.get<unsigned char>();
  auto* myIds = reinterpret_cast<int64_t*>(stream + sizeof(RowsHeader));
  uint64_t myUnique = 0;
  if (nrows > 0)
    SPCCL_RETURN_IF_ERROR(ex.mergeRows(ids, rows, type, nrows, rowLen, myIds, ws.mergedRows.get(), &myUnique));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  SPCCL_RETURN_IF_ERROR(ws.sizeSend.ensure(ex, sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ws.sizeRecv.ensure(ex, p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.sizeSend.get(), &myUnique, sizeof myUnique));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGather(ws.sizeSend.get(), sizeof myUnique, ws.sizeRecv.get()); }));
  ws.nnzPerRank.resize(p);
  SPCCL_RETURN_IF_ERROR(ex.toHost(ws.nnzPerRank.data(), ws.sizeRecv.get(), p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  uint64_t sumUnique = 0;
  for (int r = 0; r < p; ++r) {
    // A peer never has more unique ids than rows; the counts size what is
    // received, so an absurd one is refused before anything is allocated.
    if (ws.nnzPerRank[r] >= (uint64_t{1} << 40))
      return remoteError(formatString("row-sparse allreduce: rank %d announced %llu unique ids", r,
                                      static_cast<unsigned long long>(ws.nnzPerRank[r])));
    sumUnique += ws.nnzPerRank[r];
  }
  if (ex.onDevice() && sumUnique >= static_cast<uint64_t>(INT_MAX))  // (the same on every rank)
    return invalidArgument("row-sparse allreduce on the device: more than 2^31-2 ids over all ranks");
  uint64_t bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + sizeof(uint64_t));

  // Every input below is the same on every rank (the cost model is rank 0's,
  // resolved at creation), so every rank picks the same.
  const int algo = comm.settings->rowSparseAlgorithm != kRowSparseAuto
                       ? comm.settings->rowSparseAlgorithm
                       : chooseRowSparseAlgorithm(p, sumUnique, rowLen, vb, comm.rowSparseOverlap, comm.costModel);
  uint64_t unionSize = 0;
  if (algo == kRowSparseAllgather) {
    const size_t myBytes = idRowsStreamBytes(myUnique, rowLen, vb);
    const RowsHeader h = idRowsHeader(myUnique, rowLen, vb, seq);
    SPCCL_RETURN_IF_ERROR(ex.fromHost(stream, &h, sizeof h));
    const size_t rowsAt = sizeof h + myUnique * sizeof(int64_t), used = rowsAt + myUnique * rowLen * vb;
    SPCCL_RETURN_IF_ERROR(ex.copy(stream + rowsAt, ws.mergedRows.get(), used - rowsAt));
    if (myBytes > used) SPCCL_RETURN_IF_ERROR(ex.fill(stream + used, 0, myBytes - used));
    SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, &comm.integrity, stream, myBytes));
    ws.sizes.resize(p);
    for (int r = 0; r < p; ++r) ws.sizes[r] = idRowsStreamBytes(ws.nnzPerRank[r], rowLen, vb);
    SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, layoutStreams(ws.sizes, &ws.offsets)));
    auto* recv = ws.recvStream.get<unsigned char>();
    SPCCL_RETURN_IF_ERROR(
        ex.withMemory([&] { return t.allGatherV(stream, ws.sizes[me], recv, ws.sizes.data(), ws.offsets.data()); }));
    bytesSent += static_cast<uint64_t>(p - 1) * ws.sizes[me];
    SPCCL_RETURN_IF_ERROR(idRowsLists(ex, recv, ws.sizes, ws.offsets, rowLen, vb, seq, ws));
  } else {
    const IdRowsSection mine{myIds, ws.mergedRows.get(), myUnique};
    SPCCL_RETURN_IF_ERROR(partitionStages(comm, t, mine, accType, rowLen, seq, sumUnique, &bytesSent));
  }
  SPCCL_RETURN_IF_ERROR(mergeLists(ex, accType, rowLen, ws, &unionSize));

  if (unionSize > 0) comm.rowSparseOverlap = static_cast<double>(sumUnique) / static_cast<double>(unionSize);
  *outNrows = unionSize;
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->bytesSent = bytesSent;
  call->denseBytes = static_cast<uint64_t>(p - 1) * nrows * (sizeof(int64_t) + rowLen * dataTypeSize(type));
  if (unionSize > outCapacity)
    return invalidUsage(formatString("row-sparse allreduce: the union has %llu ids, outCapacity is %zu (*outNrows "
                                     "holds the size needed)",
                                     static_cast<unsigned long long>(unionSize), outCapacity))
        .markExpected();
  if (unionSize == 0) return Status::ok();
  SPCCL_RETURN_IF_ERROR(ex.copy(outIds, ws.unionIds.get(), unionSize * sizeof(int64_t)));
  if constexpr (sizeof(Acc) == 8) return ex.copy(outRows, ws.unionRows.get(), unionSize * rowLen * sizeof(double));
  return ex.storeFloats(ws.unionRows.get<float>(), unionSize * rowLen, type, outRows);
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
