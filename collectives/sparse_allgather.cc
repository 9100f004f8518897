// allgather: every rank's packed stream goes to every rank (one allgatherv);
// each rank unpacks all P streams in rank order, so every rank performs the
// same float additions in the same order and ends bitwise identical.
#include <algorithm>
#include <cstddef>

#include "collectives/algorithms.h"
#include "codec/codec.h"

namespace spccl {

Status sparseAllgather(const SparseContribution& mine, ReduceContext* ctx) {
  Transport& t = *ctx->transport;
  Executor& ex = *ctx->exec;
  Workspace& ws = *ctx->ws;
  const int p = t.size(), me = t.rank();
  ws.sizes.resize(p);
  ws.offsets.resize(p);
  size_t total = 0;
  // Sizes from the descriptors, the same on every rank: an implausible one
  // fails every rank here, before anything moves.
  Status implausible;
  for (int r = 0; r < p; ++r) {
    ws.sizes[r] =
        ctx->streamBytesPerRank
            ? announcedSize(ctx->streamBytesPerRank[r], maxPairsStreamBytes(ctx->nnzPerRank[r], ctx->count, ctx->wire),
                            r, "allgather", &implausible)
            : pairsStreamBytes(ctx->nnzPerRank[r], ctx->wire);
    ws.offsets[r] = total;
    total += ws.sizes[r];
  }
  SPCCL_RETURN_IF_ERROR(implausible);
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, ws.sizes[me]));
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, total));
  auto* send = ws.sendStream.get<unsigned char>();
  auto* recv = ws.recvStream.get<unsigned char>();
  StreamInfo info{ctx->count,        0, ctx->count, mine.nnz, ctx->seq, static_cast<uint8_t>(ctx->algorithm), ctx->wire,
                  StreamKind::kPairs};
  info.encoding = ctx->streamBytesPerRank ? ctx->myEncoding : IndexEncoding::kCoo32;
  info.scaleExp = ctx->scaleExp;
  SPCCL_RETURN_IF_ERROR(encodePairsOn(ex, send, ws.sizes[me], info, mine.indices, mine.values));
  SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, ctx->integrity, send, ws.sizes[me]));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGatherV(send, ws.sizes[me], recv, ws.sizes.data(), ws.offsets.data()); }));
  ctx->bytesSent += static_cast<uint64_t>(p - 1) * ws.sizes[me];

  // Every stream covers the whole buffer: all are checked, then summed in rank order.
  const StreamExpect expect{ctx->count, 0,    ctx->count, ctx->seq, static_cast<uint8_t>(ctx->algorithm),
                            ctx->wire,  false};
  return reduceStreamsOn(ex, recv, ws.offsets.data(), ws.sizes.data(), static_cast<size_t>(p), expect, ctx->out, 0,
                         &ws.streams);
}

Status choosePairsEncodingsOn(Executor& ex, int setting, const uint32_t* indices, const uint64_t* cuts,
                              const uint64_t* bounds, size_t pieces, core::ValueType wire, uint64_t* deltaBytes,
                              IndexEncoding* encodings, size_t* bytes) {
  bool counted = false;
  for (size_t r = 0; r < pieces; ++r) {
    deltaBytes[r] = 0;
    const uint64_t nnz = cuts[r + 1] - cuts[r];
    if (!pairsEncodingNeedsDeltaBytes(setting, nnz, bounds[r], bounds[r + 1], wire)) continue;
    SPCCL_RETURN_IF_ERROR(ex.deltaIndexBytes(indices + cuts[r], nnz, bounds[r], &deltaBytes[r]));
    counted = true;
  }
  if (counted) SPCCL_RETURN_IF_ERROR(ex.settle());
  for (size_t r = 0; r < pieces; ++r)
    encodings[r] = choosePairsEncodingFromDeltaBytes(setting, cuts[r + 1] - cuts[r], bounds[r], bounds[r + 1], wire,
                                                     deltaBytes[r], &bytes[r]);
  return Status::ok();
}

Status choosePairsEncodingOn(Executor& ex, int setting, const uint32_t* indices, uint64_t nnz, uint64_t count,
                             core::ValueType wire, IndexEncoding* encoding, size_t* bytes) {
  const uint64_t cuts[2] = {0, nnz}, bounds[2] = {0, count};
  uint64_t deltaBytes = 0;
  return choosePairsEncodingsOn(ex, setting, indices, cuts, bounds, 1, wire, &deltaBytes, encoding, bytes);
}

Status exchangeSizes(Executor& ex, Transport& t, Workspace& ws) {
  const size_t p = static_cast<size_t>(t.size());
  SPCCL_RETURN_IF_ERROR(ws.sizeSend.ensure(ex, p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ws.sizeRecv.ensure(ex, p * sizeof(uint64_t)));
  ws.counts.assign(ws.sizes.begin(), ws.sizes.end());
  ws.recvCounts.resize(p);
  SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.sizeSend.get(), ws.counts.data(), p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allToAll(ws.sizeSend.get(), sizeof(uint64_t), ws.sizeRecv.get()); }));
  SPCCL_RETURN_IF_ERROR(ex.toHost(ws.recvCounts.data(), ws.sizeRecv.get(), p * sizeof(uint64_t)));
  return ex.settle();
}

Status fixedSlots(Executor& ex, Workspace& ws, int ranks, int rank, uint64_t capacity, uint32_t valueBytes,
                  const CallDescriptor& call, FixedSlots* mine) {
  const size_t p = static_cast<size_t>(ranks), me = static_cast<size_t>(rank);
  mine->capacity = capacity;
  SPCCL_RETURN_IF_ERROR(ws.fixedIndices.ensure(ex, p * capacity * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ws.fixedValues.ensure(ex, p * capacity * valueBytes));
  SPCCL_RETURN_IF_ERROR(ws.fixedRecords.ensure(ex, p * sizeof(FixedRecord)));
  mine->indices = ws.fixedIndices.get<uint32_t>() + me * capacity;
  mine->values = ws.fixedValues.get<unsigned char>() + me * capacity * valueBytes;
  mine->record = ws.fixedRecords.get<FixedRecord>() + me;
  // As queued work (storeSmall): a captured graph replays this call's descriptor.
  SPCCL_RETURN_IF_ERROR(ex.storeSmall(&mine->record->call, &call, sizeof call));
  // Pads: slots past the selection carry no stale pairs of an earlier call.
  return ex.fill(mine->indices, 0xff, capacity * sizeof(uint32_t));
}

Status sparseAllgatherFixed(uint64_t capacity, ReduceContext* ctx) {
  Transport& t = *ctx->transport;
  Executor& ex = *ctx->exec;
  Workspace& ws = *ctx->ws;
  const int p = t.size(), me = t.rank();
  const uint32_t vb = core::wireValueBytes(ctx->wire);
  auto* indices = ws.fixedIndices.get<uint32_t>();
  auto* values = ws.fixedValues.get<unsigned char>();
  auto* records = ws.fixedRecords.get<FixedRecord>();
  const size_t idxBytes = capacity * sizeof(uint32_t), valBytes = capacity * vb;
  const auto exchange = [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(t.allGather(indices + static_cast<size_t>(me) * capacity, idxBytes, indices));
    SPCCL_RETURN_IF_ERROR(t.allGather(values + static_cast<size_t>(me) * valBytes, valBytes, values));
    return t.allGather(records + me, sizeof(FixedRecord), records);
  };
  SPCCL_RETURN_IF_ERROR(ex.withMemory(exchange));
  ctx->bytesSent += static_cast<uint64_t>(p - 1) * (idxBytes + valBytes + sizeof(FixedRecord));
  SPCCL_RETURN_IF_ERROR(ex.fill(ctx->out, 0, ctx->count * sizeof(float)));
  static_assert(sizeof(FixedRecord) == sizeof(CallDescriptor) + sizeof(PairCounts), "no padding in the records");
  const Status agreed = ex.agreeInBand(records, sizeof(FixedRecord), sizeof(CallDescriptor),
                                       offsetof(FixedRecord, counts), static_cast<size_t>(p));
  if (!agreed.isOk()) return agreed;  // nothing applied: out stays zero
  for (int r = 0; r < p; ++r) {
    const Status st =
        ex.accumulatePairs(indices + static_cast<size_t>(r) * capacity, values + static_cast<size_t>(r) * valBytes,
                           ctx->wire, capacity, &records[r].counts.selected, ctx->out, ctx->count);
    if (!st.isOk()) {
      SPCCL_RETURN_IF_ERROR(ex.fill(ctx->out, 0, ctx->count * sizeof(float)));
      return Status{st.code(), formatString("rank %d: %s", r, st.message().c_str())};
    }
  }
  return Status::ok();
}

}  // namespace spccl
