// split: a sparse reduce-scatter followed by an allgather.
//   1. The index space is cut into P contiguous ranges. Each rank's sorted
//      pairs are cut at the range starts and each piece goes to the range's
//      owner (alltoall of sizes, alltoallv of streams).
//   2. Each owner sums the P pieces of its range in rank order.
//   3. Each owner's reduced range is allgathered, as pairs or dense,
//      whichever is smaller; every rank decodes the same bytes, so results
//      are bitwise identical. If the wire type is fp16/bf16/fp8, the owner's
//      rounding of the reduced range goes back into its residual. fp8: the
//      owner's stream has its own scale, from the largest finite |sum| it
//      sends (nothing saturates); stage-1 pieces carry the sender's scale.
//      Re-selection (Ok-Topk; ctx->keepPerRange > 0, error feedback on): an
//      owner whose range reduced to more than keepPerRange finite nonzeros
//      sends only the keepPerRange largest in magnitude (ties: lower index)
//      plus every NaN/Inf, and adds the reduced sums it drops to its own
//      residual. The allgathered result is then at most P * keepPerRange
//      finite pairs, O(k) instead of O(P k), and out + sum of residuals still
//      equals the sum of the inputs.
// An owner that rejects a piece still takes part in stage 3 with an error
// stream, so every rank returns an error and none hangs.
#include <algorithm>

#include "collectives/algorithms.h"
#include "codec/codec.h"

namespace spccl {

namespace {

// Largest stream a rank can honestly send for a range of `len` elements.
size_t maxStreamBytes(uint64_t len, core::ValueType vt) {
  return std::max(maxPairsStreamBytes(len, len, vt), denseStreamBytes(len, vt));
}

// Encodes the owner's reduced range [b, e) of `acc` into ws.stageStream as
// pairs or dense, returning rounding error (and, re-selecting, the dropped
// sums) to `residual` (when given). Every step is an executor operation:
//   1. the range's nonzero sums (NaN/Inf included) compacted, in index order
//      (a selection with tau 0: exact zeros are never selected);
//   2. re-selecting: tau and the tie budget of the keepPerRange largest
//      finite of them, so that the selection keeps those (ties: lower index)
//      and every NaN/Inf; fp8: the scale of their largest finite |sum| (the
//      largest is always kept);
//   3. one selection over the compacted sums packs the kept ones in the wire
//      type, bounded by `bound`, leaving rounding error or the dropped sum
//      per compacted entry, added to the residual at its index;
//   4. the kept entries' indices, and the stream: pairs, or dense (the kept
//      values decoded into zeros and re-encoded: the same codes) when smaller.
// `acc` is scratch once compacted.
Status encodeOwnerRange(Executor& ex, const StreamInfo& base, float* acc, float* residual, Workspace& ws,
                        int indexEncoding, uint64_t keepPerRange, uint64_t* dropped, float bound, size_t* bytes) {
  const uint64_t b = base.rangeBegin, e = base.rangeEnd, len = e - b;
  const core::ValueType wire = base.valueType;
  const uint32_t vb = core::wireValueBytes(wire);
  const uint64_t slots = std::max<uint64_t>(len, 1);
  SPCCL_RETURN_IF_ERROR(ws.rangeOffsets.ensure(ex, slots * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ws.rangeValues.ensure(ex, slots * sizeof(float)));
  uint32_t* offsets = ws.rangeOffsets.get<uint32_t>();
  float* sums = ws.rangeValues.get<float>();
  SelectStats nonzero;
  SPCCL_RETURN_IF_ERROR(ex.selectPack(
      SelectSpec{acc, spcclFloat32, nullptr, nullptr, len, 0, 0, len, core::ValueType::kFloat32, offsets, sums},
      &nonzero));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  const uint64_t m = nonzero.selected;

  uint32_t tauKey = 0;  // no re-selection: every compacted sum is kept
  uint64_t tieBudget = 0;
  ThresholdStats th{};
  uint32_t maxKey = 0;
  const bool reselecting = residual != nullptr && keepPerRange > 0 && nonzero.finiteSelected > keepPerRange;
  if (reselecting) SPCCL_RETURN_IF_ERROR(ex.kthLargestMagnitude(sums, spcclFloat32, nullptr, m, keepPerRange, &th));
  if (wire == core::ValueType::kFloat8e4m3)
    SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(sums, spcclFloat32, nullptr, m, &maxKey));
  if (reselecting || wire == core::ValueType::kFloat8e4m3) SPCCL_RETURN_IF_ERROR(ex.settle());
  if (reselecting) {
    tauKey = th.tauKey;
    tieBudget = keepPerRange > th.above ? keepPerRange - th.above : 0;
  }
  StreamInfo info = base;
  if (wire == core::ValueType::kFloat8e4m3) info.scaleExp = core::fp8ScaleForMax(maxKey);

  const uint64_t mSlots = std::max<uint64_t>(m, 1);
  SPCCL_RETURN_IF_ERROR(ws.keptPositions.ensure(ex, mSlots * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ws.keptIndices.ensure(ex, mSlots * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ws.keptValues.ensure(ex, mSlots * vb));
  if (residual != nullptr) SPCCL_RETURN_IF_ERROR(ws.rangeRest.ensure(ex, mSlots * sizeof(float)));
  float* rest = residual != nullptr ? ws.rangeRest.get<float>() : nullptr;
  SelectSpec keep{sums,
                  spcclFloat32,
                  nullptr,
                  rest,
                  m,
                  tauKey,
                  tieBudget,
                  m,
                  wire,
                  ws.keptPositions.get<uint32_t>(),
                  ws.keptValues.get()};
  keep.scaleExp = info.scaleExp;
  keep.wireBound = wire == core::ValueType::kFloat32 ? __builtin_inff() : bound;  // fp32 sums go as they are
  SelectStats kept;
  SPCCL_RETURN_IF_ERROR(ex.selectPack(keep, &kept));
  if (residual != nullptr && m > 0) {
    SPCCL_RETURN_IF_ERROR(ws.rangeCount.ensure(ex, sizeof(uint64_t)));
    SPCCL_RETURN_IF_ERROR(ex.storeSmall(ws.rangeCount.get(), &m, sizeof m));
    SPCCL_RETURN_IF_ERROR(ex.accumulatePairs(offsets, rest, core::ValueType::kFloat32, m, ws.rangeCount.get<uint64_t>(),
                                             residual + b, len));
  }
  SPCCL_RETURN_IF_ERROR(ex.settle());
  *dropped = m - kept.selected;
  info.nnz = kept.selected;
  uint32_t* indices = ws.keptIndices.get<uint32_t>();
  SPCCL_RETURN_IF_ERROR(
      ex.gatherIndices(offsets, ws.keptPositions.get<uint32_t>(), info.nnz, static_cast<uint32_t>(b), indices));

  const uint64_t cuts[2] = {0, info.nnz}, bounds[2] = {b, e};
  uint64_t deltaBytes = 0;
  size_t pairsBytes = 0;
  SPCCL_RETURN_IF_ERROR(choosePairsEncodingsOn(ex, indexEncoding, indices, cuts, bounds, 1, wire, &deltaBytes,
                                               &info.encoding, &pairsBytes));
  if (pairsBytes < denseStreamBytes(len, wire)) {
    info.kind = StreamKind::kPairs;
    SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, pairsBytes));
    *bytes = pairsBytes;
    return encodePairsOn(ex, ws.stageStream.get(), pairsBytes, info, indices, ws.keptValues.get());
  }
  const WireSection section{
      false, info.nnz, IndexEncoding::kCoo32, indices, nullptr, 0, 0, ws.keptValues.get(), wire, info.scaleExp, b, e};
  SPCCL_RETURN_IF_ERROR(ex.reduceSections(&section, 1, acc, b, &ws.ownPairsCheck));  // our own pairs: not read
  info.kind = StreamKind::kDense;
  *bytes = denseStreamBytes(len, wire);
  SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, *bytes));
  return encodeDenseOn(ex, ws.stageStream.get(), info, acc);
}

}  // namespace

Status sparseSplit(const SparseContribution& mine, ReduceContext* ctx) {
  Transport& t = *ctx->transport;
  Executor& ex = *ctx->exec;
  Workspace& ws = *ctx->ws;
  const int p = t.size(), me = t.rank();
  const uint64_t n = ctx->count;
  const uint8_t algo = static_cast<uint8_t>(ctx->algorithm);
  auto begin = [&](int r) { return rangeBegin(n, p, r); };
  // Sizes travel in executor memory too (what a device transport can move).
  SPCCL_RETURN_IF_ERROR(ws.sizeSend.ensure(ex, p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ws.sizeRecv.ensure(ex, p * sizeof(uint64_t)));

  // Stage 1: cut the sorted pairs at the range starts, one stream per owner.
  ws.sizes.resize(p);
  ws.offsets.resize(p);
  ws.counts.resize(p);
  ws.recvCounts.resize(p);
  ws.recvSizes.resize(p);
  ws.recvOffsets.resize(p);
  ws.cuts.resize(p + 1);
  ws.bounds.resize(p + 1);
  uint64_t* starts = ws.cuts.data();  // rank r's piece is pairs [starts[r], starts[r+1])
  std::vector<IndexEncoding>& encodings = ws.encodings;
  encodings.resize(p);
  const uint32_t valueBytes = core::wireValueBytes(ctx->wire);
  // The cuts: where each owner's range starts in the sorted selection (n for the end).
  SPCCL_RETURN_IF_ERROR(ws.cutKeys.ensure(ex, (p + 1) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ws.cutPoints.ensure(ex, (p + 1) * sizeof(uint64_t)));
  for (int r = 0; r <= p; ++r) ws.bounds[r] = begin(r);
  SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.cutKeys.get(), ws.bounds.data(), (p + 1) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(
      ex.lowerBounds(mine.indices, mine.nnz, ws.cutKeys.get<uint64_t>(), p + 1, ws.cutPoints.get<uint64_t>()));
  SPCCL_RETURN_IF_ERROR(ex.toHost(starts, ws.cutPoints.get(), (p + 1) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  ws.deltaBytes.resize(p);
  SPCCL_RETURN_IF_ERROR(choosePairsEncodingsOn(ex, ctx->indexEncoding, mine.indices, starts, ws.bounds.data(),
                                               static_cast<size_t>(p), ctx->wire, ws.deltaBytes.data(),
                                               encodings.data(), ws.sizes.data()));
  size_t total = 0;
  for (int r = 0; r < p; ++r) {
    ws.offsets[r] = total;
    total += ws.sizes[r];
  }
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, total));
  auto* send = ws.sendStream.get<unsigned char>();
  for (int r = 0; r < p; ++r) {
    StreamInfo info{n,        begin(r), begin(r + 1), starts[r + 1] - starts[r],
                    ctx->seq, algo,     ctx->wire,    StreamKind::kPairs};
    info.encoding = encodings[r];
    info.scaleExp = ctx->scaleExp;
    SPCCL_RETURN_IF_ERROR(encodePairsOn(ex, send + ws.offsets[r], ws.sizes[r], info, mine.indices + starts[r],
                                        static_cast<const unsigned char*>(mine.values) + starts[r] * valueBytes));
    SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, ctx->integrity, send + ws.offsets[r], ws.sizes[r]));
  }
  SPCCL_RETURN_IF_ERROR(exchangeSizes(ex, t, ws));
  const uint64_t myBegin = begin(me), myEnd = begin(me + 1), myLen = myEnd - myBegin;
  Status local;
  size_t recvTotal = 0;
  for (int r = 0; r < p; ++r) {
    ws.recvSizes[r] =
        announcedSize(ws.recvCounts[r], maxPairsStreamBytes(myLen, myLen, ctx->wire), r, "split stage 1", &local);
    ws.recvOffsets[r] = recvTotal;
    recvTotal += ws.recvSizes[r];
  }
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, recvTotal));
  const Status moved = ex.withMemory([&] {
    return t.allToAllV(ws.sendStream.get(), ws.sizes.data(), ws.offsets.data(), ws.recvStream.get(),
                       ws.recvSizes.data(), ws.recvOffsets.data());
  });
  if (local.isOk()) local = moved;
  for (int r = 0; r < p; ++r)
    if (r != me) ctx->bytesSent += sizeof(uint64_t) + ws.sizes[r];

  // Stage 2: the owner sums its range in rank order; every piece covers it:
  // all are parsed, then summed in rank order a cache-sized block at a time.
  // Stage 3's stream (or an error marker) is encoded from the sums.
  SPCCL_RETURN_IF_ERROR(ws.rangeSums.ensure(ex, myLen * sizeof(float)));
  size_t myBytes = 0;
  float* sums = ws.rangeSums.get<float>();
  if (local.isOk()) {
    const StreamExpect pieceExpect{n, myBegin, myEnd, ctx->seq, algo, ctx->wire, false};
    local = reduceStreamsOn(ex, ws.recvStream.get<unsigned char>(), ws.recvOffsets.data(), ws.recvSizes.data(),
                            static_cast<size_t>(p), pieceExpect, sums, myBegin, &ws.streams);
  }
  const StreamInfo ownerInfo{n, myBegin, myEnd, 0, ctx->seq, algo, ctx->wire, StreamKind::kPairs};
  if (local.isOk()) {
    SPCCL_RETURN_IF_ERROR(encodeOwnerRange(ex, ownerInfo, sums, ctx->residual, ws, ctx->indexEncoding,
                                           ctx->keepPerRange, &ctx->reselectDropped, ctx->wireBound, &myBytes));
  } else {
    static_assert(kErrorStreamBytes <= Executor::kSmallStoreBytes, "the error stream is one small store");
    unsigned char error[kErrorStreamBytes];
    myBytes = encodeError(error, ownerInfo, local.code());
    SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, myBytes));
    SPCCL_RETURN_IF_ERROR(ex.storeSmall(ws.stageStream.get(), error, myBytes));
  }
  SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, ctx->integrity, ws.stageStream.get(), myBytes));

  // Stage 3: allgather the reduced ranges (or an error marker).
  const uint64_t myBytes64 = myBytes;
  SPCCL_RETURN_IF_ERROR(ex.fromHost(ws.sizeSend.get(), &myBytes64, sizeof myBytes64));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGather(ws.sizeSend.get(), sizeof myBytes64, ws.sizeRecv.get()); }));
  SPCCL_RETURN_IF_ERROR(ex.toHost(ws.recvCounts.data(), ws.sizeRecv.get(), p * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  size_t stageTotal = 0;
  for (int r = 0; r < p; ++r) {
    ws.recvSizes[r] =
        announcedSize(ws.recvCounts[r], maxStreamBytes(begin(r + 1) - begin(r), ctx->wire), r, "split stage 3", &local);
    ws.recvOffsets[r] = stageTotal;
    stageTotal += ws.recvSizes[r];
  }
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, stageTotal));
  const Status gathered = ex.withMemory([&] {
    return t.allGatherV(ws.stageStream.get(), myBytes, ws.recvStream.get(), ws.recvSizes.data(), ws.recvOffsets.data());
  });
  if (local.isOk()) local = gathered;
  ctx->bytesSent += static_cast<uint64_t>(p - 1) * (sizeof(uint64_t) + myBytes);

  if (!local.isOk()) return local;
  // The owners' ranges are disjoint and cover [0, n): each is stored in place
  // (zeros between its entries), or zeroed when its stream is refused.
  Status remote;
  ctx->mergedNnz = 0;
  for (int r = 0; r < p; ++r) {
    const StreamExpect expect{n, begin(r), begin(r + 1), ctx->seq, algo, ctx->wire, true, true};
    const Status st = reduceStreamsOn(ex, ws.recvStream.get<unsigned char>(), &ws.recvOffsets[r], &ws.recvSizes[r], 1,
                                      expect, ctx->out, 0, &ws.streams, r);
    if (st.isOk()) ctx->mergedNnz += ws.streams.views[0].nnz;
    else if (remote.isOk()) remote = st;
  }
  return remote;
}

}  // namespace spccl
