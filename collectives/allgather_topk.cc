// Sparsified allgather (SPCCL_ALLGATHER_DENSITY < 1): each rank keeps the
// k = ceil(density * sendcount) entries of largest magnitude of its own block
// (ties: lower index first; NaN/Inf always, even beyond k; exact zeros never),
// sends them as pairs, and every
// rank writes all blocks, zeros elsewhere. No residual: nothing is reduced.
// fp8 values: one scale per block from its largest finite kept |value| (no
// residual could take a saturated value's excess), so the block's values are
// selected exactly first and converted once the scale is known.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "kernels/host/host_kernels.h"
#include "codec/codec.h"
#include "collectives/context.h"
#include "kernels/core/types.h"

namespace spccl {

Status allGatherTopK(CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t n, spcclDataType_t type,
                     float density, spcclStats_t* call) {
  Transport& t = *comm.transport;
  Workspace& ws = comm.workspace;
  const int p = t.size(), me = t.rank();
  const core::ValueType wire = ownValuesWireType(comm.settings->valueType, type);
  const size_t esize = dataTypeSize(type);
  const uint64_t seq = comm.seq++;
  const uint64_t k = allGatherTopKCount(density, n);
  const bool fp8 = wire == core::ValueType::kFloat8e4m3;
  const core::ValueType staged = fp8 ? core::ValueType::kFloat32 : wire;  // what selectPack writes

  uint32_t tauKey = 0;
  uint64_t tieBudget = 0;
  SPCCL_RETURN_IF_ERROR(allGatherTopKThreshold(
      n, k,
      [&](uint64_t kk, uint32_t* tau, uint64_t* above, uint64_t* finite) {
        const host::ThresholdResult th = host::kthLargestMagnitude(sendbuff, type, nullptr, n, kk, &ws.rangeIndices);
        *tau = th.tauKey, *above = th.above, *finite = th.finite;
        return Status::ok();
      },
      &tauKey, &tieBudget));
  comm.positions.resize(std::min<size_t>(n, k + 64));
  uint64_t nnz = 0;
  for (;;) {
    ws.stageBytes.resize(comm.positions.size() * core::wireValueBytes(staged));
    const host::SelectArgs a{sendbuff,
                             type,
                             nullptr,
                             nullptr,
                             n,
                             tauKey,
                             tieBudget,
                             comm.positions.size(),
                             staged,
                             comm.positions.data(),
                             ws.stageBytes.data()};
    const host::SelectResult r = host::selectPack(a);
    if (r.selected <= comm.positions.size()) {
      nnz = r.selected;
      break;
    }
    comm.positions.resize(r.selected);  // more NaN/Inf than the slack: grow once
  }
  int scaleExp = 0;
  if (fp8) {  // the kept values, selected exactly, -> e4m3 codes with the block's scale
    std::vector<float>& kept = comm.floats;
    kept.resize(n);  // nnz <= n
    std::memcpy(kept.data(), ws.stageBytes.data(), nnz * sizeof(float));
    scaleExp = fp8ScaleForValues(kept.data(), nnz, wire);
    for (uint64_t j = 0; j < nnz; ++j) core::storeWireValue(ws.stageBytes.data(), j, kept[j], wire, scaleExp);
  }

  // A block goes as pairs (in the smallest index encoding, or as
  // SPCCL_INDEX_ENCODING says), or dense (zeros at the dropped entries) when
  // that is smaller, as SparCML switches. Only the sender knows the encoded
  // size: it travels in the descriptor.
  size_t pairsBytes = 0;
  const IndexEncoding encoding =
      choosePairsEncoding(comm.settings->indexEncoding, comm.positions.data(), nnz, 0, n, wire, &pairsBytes);
  const bool sendDense = denseStreamBytes(n, wire) < pairsBytes;
  CallDescriptor mine{kStreamMagic,
                      0,
                      static_cast<uint8_t>(wire),
                      static_cast<uint8_t>(type),
                      static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(Collective::kAllGather)),
                      seq,
                      n,
                      nnz};
  mine.streamBytes = sendDense ? denseStreamBytes(n, wire) : pairsBytes;
  mine.density = density;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(t, mine, &comm.descriptors));

  ws.sizes.resize(p);
  ws.offsets.resize(p);
  size_t total = 0;
  Status implausible;  // the same verdict on every rank: nothing has moved yet
  for (int r = 0; r < p; ++r) {
    const size_t most = std::max(maxPairsStreamBytes(comm.descriptors[r].nnz, n, wire), denseStreamBytes(n, wire));
    ws.sizes[r] = announcedSize(comm.descriptors[r].streamBytes, most, r, "sparsified allgather", &implausible);
    ws.offsets[r] = total;
    total += ws.sizes[r];
  }
  SPCCL_RETURN_IF_ERROR(implausible);
  StreamInfo info{n, 0, n, nnz, seq, 0, wire, StreamKind::kPairs};
  info.encoding = encoding;
  info.scaleExp = scaleExp;
  ws.sendBytes.resize(ws.sizes[me]);
  comm.floats.resize(n);
  if (!sendDense) {
    encodePairs(ws.sendBytes.data(), info, comm.positions.data(), ws.stageBytes.data());
  } else {
    std::fill(comm.floats.begin(), comm.floats.end(), 0.0f);
    for (uint64_t j = 0; j < nnz; ++j)
      comm.floats[comm.positions[j]] = core::loadWireValue(ws.stageBytes.data(), j, wire, scaleExp);
    info.kind = StreamKind::kDense;
    encodeDense(ws.sendBytes.data(), info, comm.floats.data(), nullptr);
  }
  sealStream(&comm.integrity, ws.sendBytes.data(), ws.sizes[me]);
  ws.recvBytes.resize(total);
  SPCCL_RETURN_IF_ERROR(
      t.allGatherV(ws.sendBytes.data(), ws.sizes[me], ws.recvBytes.data(), ws.sizes.data(), ws.offsets.data()));

  // The send block may be inside recvbuff (in place): it has been consumed.
  const StreamExpect expect{n, 0, n, seq, 0, wire, true};
  for (int r = 0; r < p; ++r) {
    StreamView view;
    SPCCL_RETURN_IF_ERROR(parseStream(ws.recvBytes.data() + ws.offsets[r], ws.sizes[r], expect, r, &view));
    storeStream(view, comm.floats.data(), 0);
    // Every value came from an fp16 block: one a bf16 or fp8 wire rounded
    // above fp16's range (65504 -> 65536) arrives as 65504, never as Inf.
    if (type == spcclFloat16)
      for (float& f : comm.floats)
        if (std::isfinite(f) && std::fabs(f) > core::kHalfMax) f = std::copysign(core::kHalfMax, f);
    host::storeFloats(comm.floats.data(), n, type, static_cast<char*>(recvbuff) + r * n * esize);
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * n * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + ws.sizes[me]);
  return Status::ok();
}

}  // namespace spccl
