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

CallDescriptor allGatherTopKDescriptor(uint64_t seq, uint64_t n, spcclDataType_t type, core::ValueType wire,
                                       uint64_t nnz, float density) {
  CallDescriptor d{kStreamMagic,
                   0,
                   static_cast<uint8_t>(wire),
                   static_cast<uint8_t>(type),
                   static_cast<uint8_t>(kOtherCollective | static_cast<uint8_t>(Collective::kAllGather)),
                   seq,
                   n,
                   nnz};
  d.density = density;
  return d;
}

Status allGatherTopK(CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t n, spcclDataType_t type,
                     float density, spcclStats_t* call) {
  Transport& t = *comm.transport;
  Executor& ex = *comm.executor;
  auto& mem = comm.exec;
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
  const auto kth = [&](uint64_t kk, uint32_t* tau, uint64_t* above, uint64_t* finite) -> Status {
    ThresholdStats th;
    SPCCL_RETURN_IF_ERROR(ex.kthLargestMagnitude(sendbuff, type, nullptr, n, kk, &th));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    *tau = th.tauKey, *above = th.above, *finite = th.finite;
    return Status::ok();
  };
  SPCCL_RETURN_IF_ERROR(allGatherTopKThreshold(n, k, kth, &tauKey, &tieBudget));
  uint64_t slots = std::min<uint64_t>(n, k + 64), nnz = 0;
  for (;;) {
    SPCCL_RETURN_IF_ERROR(mem.indices.ensure(ex, slots * sizeof(uint32_t)));
    ExecMemory& out = fp8 ? mem.staged : mem.values;
    SPCCL_RETURN_IF_ERROR(out.ensure(ex, slots * core::wireValueBytes(staged)));
    const SelectSpec spec{
        sendbuff, type, nullptr, nullptr, n, tauKey, tieBudget, slots, staged, mem.indices.get<uint32_t>(), out.get()};
    SelectStats r;
    SPCCL_RETURN_IF_ERROR(ex.selectPack(spec, &r));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    if (r.selected <= slots) {
      nnz = r.selected;
      break;
    }
    slots = r.selected;  // more NaN/Inf than the slack: grow once
  }
  int scaleExp = 0;
  if (fp8) {  // the kept values, selected exactly, -> e4m3 codes with the block's scale
    uint32_t maxKey = 0;
    SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(mem.staged.get(), spcclFloat32, nullptr, nnz, &maxKey));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    scaleExp = core::fp8ScaleForMax(maxKey);
    SPCCL_RETURN_IF_ERROR(mem.values.ensure(ex, std::max<uint64_t>(nnz, 1)));
    SPCCL_RETURN_IF_ERROR(ex.toWire(mem.staged.get<float>(), nnz, wire, scaleExp, mem.values.get()));
  }
  const uint32_t* indices = mem.indices.get<uint32_t>();
  const void* values = mem.values.get();

  // A block goes as pairs (in the smallest index encoding, or as
  // SPCCL_INDEX_ENCODING says), or dense (zeros at the dropped entries) when
  // that is smaller, as SparCML switches. Only the sender knows the encoded
  // size: it travels in the descriptor.
  size_t pairsBytes = 0;
  IndexEncoding encoding = IndexEncoding::kCoo32;
  SPCCL_RETURN_IF_ERROR(
      choosePairsEncodingOn(ex, comm.settings->indexEncoding, indices, nnz, n, wire, &encoding, &pairsBytes));
  const bool sendDense = denseStreamBytes(n, wire) < pairsBytes;
  CallDescriptor mine = allGatherTopKDescriptor(seq, n, type, wire, nnz, density);
  mine.streamBytes = sendDense ? denseStreamBytes(n, wire) : pairsBytes;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(comm, t, mine));

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
  SPCCL_RETURN_IF_ERROR(mem.floats.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ws.sendStream.ensure(ex, ws.sizes[me]));
  SPCCL_RETURN_IF_ERROR(ws.recvStream.ensure(ex, total));
  auto* send = ws.sendStream.get<unsigned char>();
  auto* recv = ws.recvStream.get<unsigned char>();
  auto* floats = mem.floats.get<float>();
  StreamInfo info{n, 0, n, nnz, seq, 0, wire, StreamKind::kPairs};
  info.encoding = encoding;
  info.scaleExp = scaleExp;
  if (!sendDense) {
    SPCCL_RETURN_IF_ERROR(encodePairsOn(ex, send, ws.sizes[me], info, indices, values));
  } else {  // the kept pairs scattered into zeros (a sum of one section), then sent dense
    const WireSection kept{false, nnz, IndexEncoding::kCoo32, indices, nullptr, 0, 0, values, wire, scaleExp, 0, n};
    SPCCL_RETURN_IF_ERROR(ex.reduceSections(&kept, 1, floats, 0, &ws.ownPairsCheck));  // our own pairs: not read
    info.kind = StreamKind::kDense;
    SPCCL_RETURN_IF_ERROR(encodeDenseOn(ex, send, info, floats));
  }
  SPCCL_RETURN_IF_ERROR(sealStreamOn(ex, &comm.integrity, send, ws.sizes[me]));
  SPCCL_RETURN_IF_ERROR(
      ex.withMemory([&] { return t.allGatherV(send, ws.sizes[me], recv, ws.sizes.data(), ws.offsets.data()); }));

  // The send block may be inside recvbuff (in place): it has been consumed.
  const StreamExpect expect{n, 0, n, seq, 0, wire, true};
  for (int r = 0; r < p; ++r) {  // rank r's stream alone: its block
    SPCCL_RETURN_IF_ERROR(
        reduceStreamsOn(ex, recv, &ws.offsets[r], &ws.sizes[r], 1, expect, floats, 0, &ws.streams, r));
    void* block = static_cast<char*>(recvbuff) + r * n * esize;
    // Every value came from an fp16 block: one a bf16 or fp8 wire rounded
    // above fp16's range (65504 -> 65536) arrives as 65504, never as Inf:
    // the wire's saturating fp16 rounding.
    if (type == spcclFloat16) SPCCL_RETURN_IF_ERROR(ex.toWire(floats, n, core::ValueType::kFloat16, 0, block));
    else SPCCL_RETURN_IF_ERROR(ex.storeFloats(floats, n, type, block));
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * n * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + ws.sizes[me]);
  return Status::ok();
}

}  // namespace spccl
