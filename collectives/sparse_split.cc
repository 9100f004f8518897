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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "collectives/algorithms.h"
#include "codec/codec.h"
#include "kernels/host/host_kernels.h"

namespace spccl {

namespace {

// Largest stream a rank can honestly send for a range of `len` elements.
size_t maxStreamBytes(uint64_t len, core::ValueType vt) {
  return std::max(maxPairsStreamBytes(len, len, vt), denseStreamBytes(len, vt));
}

// Re-selection on the owner's nonzeros (ws.rangeIndices, sorted global
// indices, and their sums ws.rangeValues): keeps the `keep` finite ones
// largest in magnitude (ties: lower index) and every NaN/Inf, adds the
// others' sums to the residual and removes them from both arrays. Returns how
// many it dropped. Works on the compact arrays only: the dense range is not
// read again (each of its lines would be a cache miss) nor updated.
uint64_t reselect(uint64_t b, uint64_t keep, float* residual, Workspace& ws) {
  // One 64-bit key per finite nonzero: |sum|'s bits above, the complement of
  // the range offset below. Larger key = larger magnitude, then lower index:
  // a strict total order, so the kept set does not depend on nth_element's
  // implementation, and the partition runs on a compact array.
  auto key = [](float v, uint64_t offset) {
    return static_cast<uint64_t>(core::magnitudeKey(v)) << 32 | (0xffffffffu - offset);
  };
  std::vector<uint32_t>& indices = ws.rangeIndices;
  std::vector<float>& values = ws.rangeValues;
  std::vector<uint64_t>& keys = ws.reselectKeys;
  keys.clear();
  for (size_t j = 0; j < indices.size(); ++j)
    if (std::isfinite(values[j])) keys.push_back(key(values[j], indices[j] - b));
  if (keys.size() <= keep) return 0;
  std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(keep), keys.end(),
                   std::greater<uint64_t>());
  // keys[keep] is the largest key dropped: one pass in index order (the
  // residual is written front to back) drops every finite key <= it.
  const uint64_t largestDropped = keys[keep];
  size_t kept = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    const uint32_t g = indices[j];
    const float v = values[j];
    if (std::isfinite(v) && key(v, g - b) <= largestDropped) {
      residual[g] += v;
    } else {
      indices[kept] = g;
      values[kept++] = v;
    }
  }
  indices.resize(kept);
  values.resize(kept);
  return keys.size() - keep;
}

// Bit j set when acc[j] is not +-0 (NaN included), for j < 64: one compare
// of four magnitude keys against zero and a movemask where SSE2 is there.
inline uint64_t nonzeroMask64(const float* acc) {
  uint64_t mask = 0;
#if defined(__SSE2__)
  const __m128i magnitude = _mm_set1_epi32(0x7fffffff), zero = _mm_setzero_si128();
  for (uint32_t j = 0; j < 64; j += 4) {
    const __m128i k = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + j)), magnitude);
    const int isZero = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(k, zero)));
    mask |= static_cast<uint64_t>(~isZero & 0xf) << j;
  }
#else
  for (uint32_t j = 0; j < 64; ++j) mask |= static_cast<uint64_t>(core::magnitudeKey(acc[j]) != 0) << j;
#endif
  return mask;
}

// Appends b + i and acc[i] for every i in [0, len) with acc[i] not +-0 (NaN
// included) to ws.rangeIndices and ws.rangeValues. A few percent of the range
// at useful densities, at unpredictable places: a mask of 64 elements is
// built without branches and walked bit by bit, so a branch mispredicts
// about once per set bit rather than once per element tested.
void appendNonzeros(const float* acc, uint64_t len, uint64_t b, Workspace& ws) {
  uint64_t i = 0;
  for (; i + 64 <= len; i += 64) {
    for (uint64_t mask = nonzeroMask64(acc + i); mask != 0; mask &= mask - 1) {
      const uint64_t j = i + static_cast<uint64_t>(__builtin_ctzll(mask));
      ws.rangeIndices.push_back(static_cast<uint32_t>(b + j));
      ws.rangeValues.push_back(acc[j]);
    }
  }
  for (; i < len; ++i)
    if (acc[i] != 0.0f) {
      ws.rangeIndices.push_back(static_cast<uint32_t>(b + i));
      ws.rangeValues.push_back(acc[i]);
    }
}

// Encodes the owner's reduced range [b, e) of `acc` into ws.stageStream as
// pairs or dense, returning rounding error (and, re-selecting, the dropped
// sums) to `residual` (when given). Runs inside Executor::hostOnly.
Status encodeOwnerRange(Executor& ex, const StreamInfo& base, float* acc, float* residual, Workspace& ws,
                        int indexEncoding, uint64_t keepPerRange, uint64_t* dropped, float bound, size_t* bytes) {
  const uint64_t b = base.rangeBegin, len = base.rangeEnd - base.rangeBegin;
  ws.rangeIndices.clear();
  ws.rangeValues.clear();
  appendNonzeros(acc, len, b, ws);  // NaN != 0: kept
  *dropped = residual != nullptr && keepPerRange > 0 ? reselect(b, keepPerRange, residual, ws) : 0;
  const uint64_t m = ws.rangeIndices.size();
  const float* values = ws.rangeValues.data();  // acc at ws.rangeIndices
  size_t pairsBytes = 0;
  const IndexEncoding encoding =
      choosePairsEncoding(indexEncoding, ws.rangeIndices.data(), m, b, base.rangeEnd, base.valueType, &pairsBytes);
  const bool dense = pairsBytes >= denseStreamBytes(len, base.valueType);
  const bool rounds = base.valueType != core::ValueType::kFloat32;
  StreamInfo info = base;
  if (base.valueType == core::ValueType::kFloat8e4m3) {
    uint32_t maxKey = 0;  // acc is zero outside ws.rangeIndices
    for (uint64_t j = 0; j < m; ++j) {
      const uint32_t key = core::magnitudeKey(values[j]);
      if (!core::isNonFiniteKey(key) && key > maxKey) maxKey = key;
    }
    info.scaleExp = core::fp8ScaleForMax(maxKey);
  }
  if (rounds) {  // zeros round to zero: only the nonzeros can leave anything
    for (uint64_t j = 0; j < m; ++j) {
      const float v = values[j];
      float d = core::roundToWire(v, base.valueType, info.scaleExp);
      if (!std::isfinite(d) || !std::isfinite(v)) continue;
      // Only a value or its rounding beyond the bound can change under it
      // (roundToWireBounded is roundToWire within it): one rounding per entry.
      if (std::fabs(v) > bound || std::fabs(d) > bound) {
        const float bounded = core::roundToWireBounded(v, base.valueType, info.scaleExp, bound);
        if (bounded != d) {  // a wire value: it encodes as itself wherever it is stored below
          d = bounded;
          ws.rangeValues[j] = d;
          acc[ws.rangeIndices[j] - b] = d;
        }
      }
      if (residual) residual[ws.rangeIndices[j]] += v - d;
    }
  }
  if (dense) {
    // acc still holds the dropped sums: rebuild it from what was kept. Zeros
    // come back as +0, the only zero acc can hold (sums from +0 under the
    // default rounding mode are never -0).
    if (*dropped > 0) {
      std::fill(acc, acc + len, 0.0f);
      for (uint64_t j = 0; j < m; ++j) acc[ws.rangeIndices[j] - b] = values[j];
    }
    info.kind = StreamKind::kDense;
    SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, denseStreamBytes(len, base.valueType)));
    *bytes = encodeDense(ws.stageStream.get(), info, acc, nullptr);
    return Status::ok();
  }
  std::vector<unsigned char>& wire = ws.sendBytes;  // host scratch
  wire.resize(m * core::wireValueBytes(base.valueType));
  host::toWire(values, m, base.valueType, info.scaleExp, wire.data());
  info.kind = StreamKind::kPairs;
  info.nnz = m;
  info.encoding = encoding;
  SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, pairsBytes));
  *bytes = encodePairs(ws.stageStream.get(), info, ws.rangeIndices.data(), wire.data());
  return Status::ok();
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
  const auto encode = [&]() -> Status {
    const StreamInfo ownerInfo{n, myBegin, myEnd, 0, ctx->seq, algo, ctx->wire, StreamKind::kPairs};
    if (local.isOk()) {
      SPCCL_RETURN_IF_ERROR(encodeOwnerRange(ex, ownerInfo, sums, ctx->residual, ws, ctx->indexEncoding,
                                             ctx->keepPerRange, &ctx->reselectDropped, ctx->wireBound, &myBytes));
    } else {
      SPCCL_RETURN_IF_ERROR(ws.stageStream.ensure(ex, kErrorStreamBytes));
      myBytes = encodeError(ws.stageStream.get(), ownerInfo, local.code());
    }
    sealStream(ctx->integrity, ws.stageStream.get(), myBytes);
    return Status::ok();
  };
  SPCCL_RETURN_IF_ERROR(ex.hostOnly("split's owner re-selection and stage-3 encoder", encode));

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
