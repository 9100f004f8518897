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
#include <cmath>
#include <functional>

#include "collectives/algorithms.h"
#include "src/codec.h"

namespace spccl {

namespace {

// Largest stream a rank can honestly send for a range of `len` elements.
size_t maxStreamBytes(uint64_t len, core::ValueType vt) {
  return std::max(maxPairsStreamBytes(len, len, vt), denseStreamBytes(len, vt));
}

// Re-selection on the owner's nonzeros (ws.rangeIndices, sorted global
// indices): keeps the `keep` finite ones largest in magnitude (ties: lower
// index) and every NaN/Inf, moves the others' sums into the residual, zeroes
// them in acc and removes them from ws.rangeIndices. Returns how many it dropped.
uint64_t reselect(float* acc, uint64_t b, uint64_t keep, float* residual, Workspace& ws) {
  // One 64-bit key per finite nonzero: |sum|'s bits above, the complement of
  // the range offset below. Larger key = larger magnitude, then lower index:
  // a strict total order, so the kept set does not depend on nth_element's
  // implementation, and the partition runs on a compact array.
  auto key = [](float v, uint64_t offset) {
    return static_cast<uint64_t>(core::magnitudeKey(v)) << 32 | (0xffffffffu - offset);
  };
  std::vector<uint64_t>& keys = ws.reselectKeys;
  keys.clear();
  for (uint32_t g : ws.rangeIndices)
    if (std::isfinite(acc[g - b])) keys.push_back(key(acc[g - b], g - b));
  if (keys.size() <= keep) return 0;
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(keep), keys.end(),
                   std::greater<uint64_t>());
  // keys[keep] is the largest key dropped: one pass in index order (the
  // residual is written front to back) drops every finite key <= it.
  const uint64_t largestDropped = keys[keep];
  size_t kept = 0;
  for (uint32_t g : ws.rangeIndices) {
    const uint64_t offset = g - b;
    const float v = acc[offset];
    if (std::isfinite(v) && key(v, offset) <= largestDropped) {
      residual[g] += v;
      acc[offset] = 0.0f;
    } else {
      ws.rangeIndices[kept++] = g;
    }
  }
  ws.rangeIndices.resize(kept);
  return keys.size() - keep;
}

// Appends b + i for every i in [0, len) with acc[i] not +-0 (NaN included)
// to `out`. Mostly zeros at useful densities: blocks of 16 that are all +-0
// are skipped with one test.
void appendNonzeros(const float* acc, uint64_t len, uint64_t b, std::vector<uint32_t>* out) {
  constexpr uint64_t kBlock = 16;
  uint64_t i = 0;
  for (; i + kBlock <= len; i += kBlock) {
    uint32_t any = 0;
    for (uint64_t j = 0; j < kBlock; ++j) any |= core::magnitudeKey(acc[i + j]);
    if (any == 0) continue;
    for (uint64_t j = 0; j < kBlock; ++j)
      if (acc[i + j] != 0.0f) out->push_back(static_cast<uint32_t>(b + i + j));
  }
  for (; i < len; ++i)
    if (acc[i] != 0.0f) out->push_back(static_cast<uint32_t>(b + i));
}

// Encodes the owner's reduced range [b, e) of `acc` into ws.stageBytes as
// pairs or dense, returning rounding error (and, re-selecting, the dropped
// sums) to `residual` (when given).
size_t encodeOwnerRange(const StreamInfo& base, float* acc, float* residual, Workspace& ws, int indexEncoding,
                        uint64_t keepPerRange, uint64_t* dropped) {
  const uint64_t b = base.rangeBegin, len = base.rangeEnd - base.rangeBegin;
  ws.rangeIndices.clear();
  appendNonzeros(acc, len, b, &ws.rangeIndices);  // NaN != 0: kept
  *dropped = residual != nullptr && keepPerRange > 0 ? reselect(acc, b, keepPerRange, residual, ws) : 0;
  const uint64_t m = ws.rangeIndices.size();
  size_t pairsBytes = 0;
  const IndexEncoding encoding =
      choosePairsEncoding(indexEncoding, ws.rangeIndices.data(), m, b, base.rangeEnd, base.valueType, &pairsBytes);
  const bool dense = pairsBytes >= denseStreamBytes(len, base.valueType);
  const bool rounds = base.valueType != core::ValueType::kFloat32;
  StreamInfo info = base;
  if (base.valueType == core::ValueType::kFloat8e4m3) {
    uint32_t maxKey = 0;  // acc is zero outside ws.rangeIndices
    for (uint32_t g : ws.rangeIndices) {
      const uint32_t key = core::magnitudeKey(acc[g - b]);
      if (!core::isNonFiniteKey(key) && key > maxKey) maxKey = key;
    }
    info.scaleExp = core::fp8ScaleForMax(maxKey);
  }
  if (residual && rounds) {  // zeros round to zero: only the nonzeros can leave anything
    for (uint32_t g : ws.rangeIndices) {
      const float v = acc[g - b], d = core::roundToWire(v, base.valueType, info.scaleExp);
      if (std::isfinite(d) && std::isfinite(v)) residual[g] += v - d;
    }
  }
  if (dense) {
    info.kind = StreamKind::kDense;
    ws.stageBytes.resize(denseStreamBytes(len, base.valueType));
    return encodeDense(ws.stageBytes.data(), info, acc, nullptr);
  }
  std::vector<unsigned char>& values = ws.sendBytes;  // stage 1 is done with it
  values.resize(m * core::wireValueBytes(base.valueType));
  for (uint64_t j = 0; j < m; ++j)
    core::storeWireValue(values.data(), j, acc[ws.rangeIndices[j] - b], base.valueType, info.scaleExp);
  info.kind = StreamKind::kPairs;
  info.nnz = m;
  info.encoding = encoding;
  ws.stageBytes.resize(pairsBytes);
  return encodePairs(ws.stageBytes.data(), info, ws.rangeIndices.data(), values.data());
}

}  // namespace

Status sparseSplit(const SparseContribution& mine, ReduceContext* ctx) {
  Transport& t = *ctx->transport;
  Workspace& ws = *ctx->ws;
  const int p = t.size(), me = t.rank();
  const uint64_t n = ctx->count;
  const uint8_t algo = static_cast<uint8_t>(ctx->algorithm);
  auto begin = [&](int r) { return rangeBegin(n, p, r); };

  // Stage 1: cut the sorted pairs at the range starts, one stream per owner.
  ws.sizes.resize(p);
  ws.offsets.resize(p);
  ws.counts.resize(p);
  ws.recvCounts.resize(p);
  ws.recvSizes.resize(p);
  ws.recvOffsets.resize(p);
  ws.cuts.resize(p + 1);
  uint64_t* starts = ws.cuts.data();  // rank r's piece is pairs [starts[r], starts[r+1])
  size_t total = 0;
  for (int r = 0; r <= p; ++r)
    starts[r] = r == p ? mine.nnz
                       : static_cast<uint64_t>(std::lower_bound(mine.indices, mine.indices + mine.nnz, begin(r)) -
                                               mine.indices);
  std::vector<IndexEncoding> encodings(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    encodings[r] = choosePairsEncoding(ctx->indexEncoding, mine.indices + starts[r], starts[r + 1] - starts[r],
                                       begin(r), begin(r + 1), ctx->wire, &ws.sizes[r]);
    ws.offsets[r] = total;
    total += ws.sizes[r];
  }
  ws.sendBytes.resize(total);
  const uint32_t valueBytes = core::wireValueBytes(ctx->wire);
  for (int r = 0; r < p; ++r) {
    StreamInfo info{n, begin(r), begin(r + 1), starts[r + 1] - starts[r], ctx->seq, algo, ctx->wire,
                    StreamKind::kPairs};
    info.encoding = encodings[r];
    info.scaleExp = ctx->scaleExp;
    encodePairs(ws.sendBytes.data() + ws.offsets[r], info, mine.indices + starts[r],
                static_cast<const unsigned char*>(mine.values) + starts[r] * valueBytes);
    sealStream(ctx->integrity, ws.sendBytes.data() + ws.offsets[r], ws.sizes[r]);
  }
  for (int r = 0; r < p; ++r) ws.counts[r] = ws.sizes[r];
  SPCCL_RETURN_IF_ERROR(t.allToAll(ws.counts.data(), sizeof(uint64_t), ws.recvCounts.data()));
  const uint64_t myBegin = begin(me), myEnd = begin(me + 1), myLen = myEnd - myBegin;
  Status local;
  size_t recvTotal = 0;
  for (int r = 0; r < p; ++r) {
    ws.recvSizes[r] =
        announcedSize(ws.recvCounts[r], maxPairsStreamBytes(myLen, myLen, ctx->wire), r, "split stage 1", &local);
    ws.recvOffsets[r] = recvTotal;
    recvTotal += ws.recvSizes[r];
  }
  ws.recvBytes.resize(recvTotal);
  const Status moved = t.allToAllV(ws.sendBytes.data(), ws.sizes.data(), ws.offsets.data(), ws.recvBytes.data(),
                                   ws.recvSizes.data(), ws.recvOffsets.data());
  if (local.isOk()) local = moved;
  for (int r = 0; r < p; ++r)
    if (r != me) ctx->bytesSent += sizeof(uint64_t) + ws.sizes[r];

  // Stage 2: the owner sums its range in rank order.
  ws.rangeAcc.assign(myLen, 0.0f);
  const StreamExpect pieceExpect{n, myBegin, myEnd, ctx->seq, algo, ctx->wire, false};
  for (int r = 0; r < p && local.isOk(); ++r) {
    StreamView view;
    local = parseStream(ws.recvBytes.data() + ws.recvOffsets[r], ws.recvSizes[r], pieceExpect, r, &view);
    if (local.isOk()) accumulateStream(view, ws.rangeAcc.data(), myBegin);
  }

  // Stage 3: allgather the reduced ranges (or an error marker).
  const StreamInfo ownerInfo{n, myBegin, myEnd, 0, ctx->seq, algo, ctx->wire, StreamKind::kPairs};
  size_t myBytes;
  if (local.isOk()) {
    myBytes = encodeOwnerRange(ownerInfo, ws.rangeAcc.data(), ctx->residual, ws, ctx->indexEncoding,
                               ctx->keepPerRange, &ctx->reselectDropped);
  } else {
    ws.stageBytes.resize(kErrorStreamBytes);
    myBytes = encodeError(ws.stageBytes.data(), ownerInfo, local.code());
  }
  sealStream(ctx->integrity, ws.stageBytes.data(), myBytes);
  uint64_t myBytes64 = myBytes;
  SPCCL_RETURN_IF_ERROR(t.allGather(&myBytes64, sizeof myBytes64, ws.recvCounts.data()));
  total = 0;
  for (int r = 0; r < p; ++r) {
    ws.recvSizes[r] =
        announcedSize(ws.recvCounts[r], maxStreamBytes(begin(r + 1) - begin(r), ctx->wire), r, "split stage 3", &local);
    ws.recvOffsets[r] = total;
    total += ws.recvSizes[r];
  }
  ws.recvBytes.resize(total);
  const Status gathered = t.allGatherV(ws.stageBytes.data(), myBytes, ws.recvBytes.data(), ws.recvSizes.data(),
                                       ws.recvOffsets.data());
  if (local.isOk()) local = gathered;
  ctx->bytesSent += static_cast<uint64_t>(p - 1) * (sizeof(uint64_t) + myBytes);

  if (!local.isOk()) return local;
  std::fill(ctx->out, ctx->out + n, 0.0f);
  Status remote;
  ctx->mergedNnz = 0;
  for (int r = 0; r < p; ++r) {
    StreamView view;
    const StreamExpect expect{n, begin(r), begin(r + 1), ctx->seq, algo, ctx->wire, true, true};
    Status st = parseStream(ws.recvBytes.data() + ws.recvOffsets[r], ws.recvSizes[r], expect, r, &view);
    if (st.isOk() && view.kind == StreamKind::kError)
      st = Status(view.peerStatus, formatString("split: owner rank %d rejected its input (%s)", r,
                                                spcclGetErrorString(view.peerStatus)));
    if (!st.isOk()) {
      if (remote.isOk()) remote = st;
      continue;
    }
    accumulateStream(view, ctx->out, 0);
    ctx->mergedNnz += view.nnz;
  }
  return remote;
}

}  // namespace spccl
