// allgather: every rank's packed stream goes to every rank (one allgatherv);
// each rank unpacks all P streams in rank order, so every rank performs the
// same float additions in the same order and ends bitwise identical.
#include <algorithm>

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
  const auto encode = [&]() -> Status {
    StreamInfo info{
        ctx->count,        0, ctx->count, mine.nnz, ctx->seq, static_cast<uint8_t>(ctx->algorithm), ctx->wire,
        StreamKind::kPairs};
    info.encoding = ctx->streamBytesPerRank ? ctx->myEncoding : IndexEncoding::kCoo32;
    info.scaleExp = ctx->scaleExp;
    if (encodePairs(send, info, mine.indices, mine.values) != ws.sizes[me])
      return internalError("allgather: the encoded stream differs from its announced size");
    sealStream(ctx->integrity, send, ws.sizes[me]);
    return Status::ok();
  };
  SPCCL_RETURN_IF_ERROR(ex.hostOnly("the allgather algorithm's stream encoder", encode));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGatherV(send, ws.sizes[me], recv, ws.sizes.data(), ws.offsets.data()); }));
  ctx->bytesSent += static_cast<uint64_t>(p - 1) * ws.sizes[me];

  // Every stream covers the whole buffer: all are parsed, then summed in
  // rank order a cache-sized block of the output at a time.
  const auto reduce = [&]() -> Status {
    const StreamExpect expect{ctx->count, 0,    ctx->count, ctx->seq, static_cast<uint8_t>(ctx->algorithm),
                              ctx->wire,  false};
    ws.views.resize(p);
    for (int r = 0; r < p; ++r) {
      const Status st = parseStream(recv + ws.offsets[r], ws.sizes[r], expect, r, &ws.views[r]);
      if (!st.isOk()) {
        std::fill(ctx->out, ctx->out + ctx->count, 0.0f);
        return st;
      }
    }
    reduceStreams(ws.views.data(), ws.views.size(), ctx->out, 0, &ws.cursors);
    return Status::ok();
  };
  return ex.hostOnly("the allgather algorithm's stream decoder and sum", reduce);
}

}  // namespace spccl
