// DCT-MP alltoall rows on device buffers: the host path's rule
// (collectives/alltoall_rows.cc): per row, the top rowKeep(rowLen, density)
// entries by magnitude plus any NaN/Inf beyond them, as (row-local position,
// wire value); zeros elsewhere on the receiving side; the backward sends the
// gradient at exactly those positions back. Same selection, same bits.
//
// Forward: descriptor check (the shared agreeOnCall); selectRowsTopK into
// strided slots; the per-row counts come to the host (one synchronisation) and go to the peers (one
// alltoall, a second synchronisation sizes the receive); positions and
// values go in one group of ncclSend/ncclRecv; scatterRowValues writes the
// dense rows (positions past rowLen are dropped there). Backward: the
// selection knows every size, so it needs no synchronisation: gather,
// one group of sends and receives, scatter.
#include <algorithm>
#include <vector>

#include "collectives/agreement.h"
#include "collectives/other_collectives.h"
#include "src/nccl/device_collectives.h"
#include "src/nccl/device_state.h"
#include "kernels/core/types.h"

namespace spccl {

namespace {

// The host path's descriptor check (agreeOnCall) on the communicator's CUDA
// executor, on the caller's stream: one synchronisation.
Status agreeOnDevice(spcclComm* comm, const CallDescriptor& mine, cudaStream_t stream) {
  comm->device->executor->setStream(stream);
  return agreeOnCall(*comm, transportOf(comm), mine);
}

}  // namespace

namespace gpu {

namespace {

// Grouped exchange: to peer j, `sendBytes[j]` bytes at send + sendOff[j];
// from peer j, recvBytes[j] at recv + recvOff[j]; this rank's own block by a
// device copy. Two such buffers (positions and values) travel in one group.
struct Exchange {
  const unsigned char* send;
  unsigned char* recv;
  const size_t *sendOff, *sendBytes, *recvOff, *recvBytes;  // ranks each
};

Status exchange(NcclTransport& t, std::initializer_list<const Exchange*> parts, cudaStream_t stream) {
  const int p = t.size(), me = t.rank();
  ncclComm_t nc = t.nccl();
  for (const Exchange* e : parts)
    if (e->sendBytes[me] > 0)
      SPCCL_CUDA_CHECK(cudaMemcpyAsync(e->recv + e->recvOff[me], e->send + e->sendOff[me], e->sendBytes[me],
                                       cudaMemcpyDeviceToDevice, stream));
  NcclGroup group(nc);
  SPCCL_RETURN_IF_ERROR(group.start());
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    for (const Exchange* e : parts) {
      if (e->sendBytes[q] > 0)
        SPCCL_NCCL_CHECK_IN_GROUP(pncclSend(e->send + e->sendOff[q], e->sendBytes[q], ncclUint8, q, nc, stream), nc);
      if (e->recvBytes[q] > 0)
        SPCCL_NCCL_CHECK_IN_GROUP(pncclRecv(e->recv + e->recvOff[q], e->recvBytes[q], ncclUint8, q, nc, stream), nc);
    }
  }
  return group.end();
}

// Per-peer totals of per-row counts (rows j*rowsPerPeer ... of peer j).
void perPeer(const uint32_t* counts, int p, size_t rowsPerPeer, std::vector<uint64_t>* out) {
  out->assign(static_cast<size_t>(p), 0);
  for (int j = 0; j < p; ++j)
    for (size_t r = 0; r < rowsPerPeer; ++r) (*out)[j] += counts[j * rowsPerPeer + r];
}

}  // namespace

Status rowsForward(spcclComm* comm, const void* send, void* recv, size_t rowsPerPeer, size_t rowLen,
                   spcclDataType_t type, float density, spcclSelection* sel, cudaStream_t stream, spcclStats_t* call) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  DeviceCommState& d = *comm->device;
  const int p = comm->ranks;
  const core::ValueType wire = rowsWireType(comm->params.rowsCodec, comm->params.valueType, type);
  const uint32_t vb = core::wireValueBytes(wire);
  const uint32_t len = static_cast<uint32_t>(rowLen);
  const uint32_t keep = core::rowKeep(rowLen, density);
  const uint64_t nRows = static_cast<uint64_t>(p) * rowsPerPeer;
  const size_t esize = dataTypeSize(type);
  const uint64_t seq = comm->seq++;
  SPCCL_RETURN_IF_ERROR(agreeOnDevice(
      comm, rowsDescriptor(Collective::kAlltoAllRows, seq, rowsPerPeer, rowLen, type, wire, keep), stream));

  // A kept selection's device buffers come from the communicator's pool: one
  // no live selection holds any more (use count 1: only the pool) is reused,
  // so a training loop's forward/backward/destroy allocates nothing in the
  // steady state.
  std::shared_ptr<DeviceSelectionState> kept;
  if (sel != nullptr) {
    for (const auto& candidate : d.selectionPool)
      if (candidate.use_count() == 1) {
        kept = candidate;
        break;
      }
    if (!kept) {
      kept = std::make_shared<DeviceSelectionState>();
      d.selectionPool.push_back(kept);
    }
  }
  DeviceSelectionState& s = kept ? *kept : d.unkept;

  // 1. Per-row selection into slots of `stride` positions; a row holding
  // more NaN/Inf than the slack needs the full row length (rare: redo).
  uint32_t stride = std::min<uint32_t>(len, keep + 32);
  SPCCL_RETURN_IF_ERROR(d.counts.ensure(std::max<uint64_t>(nRows, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(d.hostCounts.ensure(std::max<uint64_t>(nRows, 1) * sizeof(uint32_t)));
  auto* counts = d.counts.get<uint32_t>();
  auto* hostCounts = d.hostCounts.get<uint32_t>();
  for (int attempt = 0; attempt < 2; ++attempt) {
    SPCCL_RETURN_IF_ERROR(d.stridedPositions.ensure(std::max<uint64_t>(nRows * stride, 1) * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(
        cuda::selectRowsTopK(send, type, nRows, len, keep, d.stridedPositions.get<uint32_t>(), stride, counts, stream));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(hostCounts, counts, nRows * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
    SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
    const uint32_t most = nRows ? *std::max_element(hostCounts, hostCounts + nRows) : 0;
    if (most <= stride) break;
    stride = len;
  }
  // Straight into the selection's state: a failed call leaves it to no
  // selection (a pooled one goes back to the pool; the unkept one is no
  // backward's).
  std::vector<uint64_t>& sentPerPeer = s.sentPerPeer;
  perPeer(hostCounts, p, rowsPerPeer, &sentPerPeer);
  uint64_t sentTotal = 0;
  for (uint64_t n : sentPerPeer) sentTotal += n;

  // 2. Compact positions and gather the kept values (wire type).
  SPCCL_RETURN_IF_ERROR(s.sentOffsets.ensure((nRows + 1) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(s.sentPositions.ensure(std::max<uint64_t>(sentTotal, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(d.sendValues.ensure(std::max<uint64_t>(sentTotal, 1) * vb));
  SPCCL_RETURN_IF_ERROR(d.offsetsWorkspace.ensure(cuda::rowOffsetsWorkspaceBytes(nRows)));
  SPCCL_RETURN_IF_ERROR(cuda::rowOffsets(counts, nRows, s.sentOffsets.get<uint64_t>(), d.offsetsWorkspace.get(),
                                         d.offsetsWorkspace.bytes(), stream));
  SPCCL_RETURN_IF_ERROR(cuda::compactRowPositions(d.stridedPositions.get<uint32_t>(), stride,
                                                  s.sentOffsets.get<uint64_t>(), nRows, s.sentPositions.get<uint32_t>(),
                                                  stream));
  SPCCL_RETURN_IF_ERROR(cuda::gatherRowValues(send, type, nRows, len, s.sentPositions.get<uint32_t>(),
                                              s.sentOffsets.get<uint64_t>(), wire, d.sendValues.get(), stream));

  // 3. Per-row counts to the peers; sizes of what comes back.
  SPCCL_RETURN_IF_ERROR(d.recvCounts.ensure(std::max<uint64_t>(nRows, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(d.hostRecvCounts.ensure(std::max<uint64_t>(nRows, 1) * sizeof(uint32_t)));
  auto* recvCounts = d.recvCounts.get<uint32_t>();
  auto* hostRecvCounts = d.hostRecvCounts.get<uint32_t>();
  if (rowsPerPeer > 0) SPCCL_RETURN_IF_ERROR(t.allToAll(counts, rowsPerPeer * sizeof(uint32_t), recvCounts));
  SPCCL_CUDA_CHECK(
      cudaMemcpyAsync(hostRecvCounts, recvCounts, nRows * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
  SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
  // A count outside [keep, rowLen] is a peer with another density (or a
  // corrupt one). Counts up to a full row (another density) are still
  // received as announced, so no rank is left waiting, and the call fails
  // after the exchange. More than a full row comes from no honest peer: those
  // sizes are refused before anything is allocated from them, and that peer
  // is left waiting in its sends.
  Status peerError;
  for (uint64_t r = 0; r < nRows; ++r) {
    const uint32_t c = hostRecvCounts[r];
    if ((c < keep || c > len) && peerError.isOk())
      peerError =
          invalidUsage(formatString("alltoall rows: rank %d kept %u entries in a row, this rank keeps %u of "
                                    "%u (different densities?)",
                                    static_cast<int>(r / std::max<size_t>(rowsPerPeer, 1)), c, keep, len));
  }
  std::vector<uint64_t>& recvPerPeer = s.recvPerPeer;
  perPeer(hostRecvCounts, p, rowsPerPeer, &recvPerPeer);
  uint64_t recvTotal = 0;
  for (uint64_t n : recvPerPeer) recvTotal += n;
  if (recvTotal > nRows * static_cast<uint64_t>(len))
    return remoteError("alltoall rows: peers announced more entries than their rows hold");

  // 4. Positions and values, one group.
  SPCCL_RETURN_IF_ERROR(s.recvPositions.ensure(std::max<uint64_t>(recvTotal, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(d.recvValues.ensure(std::max<uint64_t>(recvTotal, 1) * vb));
  size_t* sizes = d.peerSizeArrays(p, 8);  // offsets and sizes of two exchanges
  size_t *posSendOff = sizes, *posSendBytes = sizes + p, *posRecvOff = sizes + 2 * p, *posRecvBytes = sizes + 3 * p;
  size_t *valSendOff = sizes + 4 * p, *valSendBytes = sizes + 5 * p, *valRecvOff = sizes + 6 * p,
         *valRecvBytes = sizes + 7 * p;
  uint64_t so = 0, ro = 0;
  for (int j = 0; j < p; ++j) {
    posSendOff[j] = so * sizeof(uint32_t);
    posSendBytes[j] = sentPerPeer[j] * sizeof(uint32_t);
    posRecvOff[j] = ro * sizeof(uint32_t);
    posRecvBytes[j] = recvPerPeer[j] * sizeof(uint32_t);
    valSendOff[j] = so * vb;
    valSendBytes[j] = sentPerPeer[j] * vb;
    valRecvOff[j] = ro * vb;
    valRecvBytes[j] = recvPerPeer[j] * vb;
    so += sentPerPeer[j];
    ro += recvPerPeer[j];
  }
  const Exchange pos{reinterpret_cast<const unsigned char*>(s.sentPositions.get()),
                     s.recvPositions.get<unsigned char>(),
                     posSendOff,
                     posSendBytes,
                     posRecvOff,
                     posRecvBytes};
  const Exchange val{d.sendValues.get<unsigned char>(),
                     d.recvValues.get<unsigned char>(),
                     valSendOff,
                     valSendBytes,
                     valRecvOff,
                     valRecvBytes};
  SPCCL_RETURN_IF_ERROR(exchange(t, {&pos, &val}, stream));
  SPCCL_RETURN_IF_ERROR(peerError);

  // 5. Dense rows out: zeros, then the kept values at their positions.
  SPCCL_RETURN_IF_ERROR(s.recvOffsets.ensure((nRows + 1) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(cuda::rowOffsets(recvCounts, nRows, s.recvOffsets.get<uint64_t>(), d.offsetsWorkspace.get(),
                                         d.offsetsWorkspace.bytes(), stream));
  SPCCL_RETURN_IF_ERROR(cuda::scatterRowValues(d.recvValues.get(), wire, s.recvPositions.get<uint32_t>(),
                                               s.recvOffsets.get<uint64_t>(), nRows, len, type, recv, stream));
  if (sel != nullptr) {
    sel->rowsPerPeer = rowsPerPeer;
    sel->rowLen = rowLen;
    sel->dataType = type;
    sel->wire = wire;
    sel->forwardSeq = seq;
    sel->device = kept;
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * rowsPerPeer * rowLen * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(CallDescriptor) + rowsPerPeer * sizeof(uint32_t));
  for (int j = 0; j < p; ++j)
    if (j != comm->rank) call->bytesSent += sentPerPeer[j] * (sizeof(uint32_t) + vb);
  return Status::ok();
}

Status rowsBackward(spcclComm* comm, const void* gradSend, void* gradRecv, spcclSelection& sel, cudaStream_t stream,
                    spcclStats_t* call) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  if (!sel.device) return internalError("alltoall rows backward: the selection holds no device positions");
  DeviceCommState& d = *comm->device;
  const DeviceSelectionState& s = *sel.device;
  const int p = comm->ranks;
  const uint32_t vb = core::wireValueBytes(sel.wire);
  const uint64_t nRows = static_cast<uint64_t>(p) * sel.rowsPerPeer;
  const uint32_t len = static_cast<uint32_t>(sel.rowLen);
  const uint64_t seq = comm->seq++;
  SPCCL_RETURN_IF_ERROR(agreeOnDevice(comm,
                                      rowsDescriptor(Collective::kAlltoAllRowsBackward, seq, sel.rowsPerPeer,
                                                     sel.rowLen, sel.dataType, sel.wire, sel.forwardSeq),
                                      stream));
  sel.used = true;                     // every rank agreed: spent (as on the host)
  uint64_t outTotal = 0, inTotal = 0;  // out: gradients at the positions received; in: at those sent
  for (int j = 0; j < p; ++j) {
    outTotal += s.recvPerPeer[j];
    inTotal += s.sentPerPeer[j];
  }
  // To peer j: the gradient at the positions this rank received from j.
  SPCCL_RETURN_IF_ERROR(d.sendValues.ensure(std::max<uint64_t>(outTotal, 1) * vb));
  SPCCL_RETURN_IF_ERROR(d.recvValues.ensure(std::max<uint64_t>(inTotal, 1) * vb));
  SPCCL_RETURN_IF_ERROR(cuda::gatherRowValues(gradSend, sel.dataType, nRows, len, s.recvPositions.get<uint32_t>(),
                                              s.recvOffsets.get<uint64_t>(), sel.wire, d.sendValues.get(), stream));
  size_t* sizes = d.peerSizeArrays(p, 4);  // offsets and sizes of one exchange
  size_t *sendOff = sizes, *sendBytes = sizes + p, *recvOff = sizes + 2 * p, *recvBytes = sizes + 3 * p;
  uint64_t so = 0, ro = 0;
  for (int j = 0; j < p; ++j) {
    sendOff[j] = so * vb;
    sendBytes[j] = s.recvPerPeer[j] * vb;
    recvOff[j] = ro * vb;
    recvBytes[j] = s.sentPerPeer[j] * vb;
    so += s.recvPerPeer[j];
    ro += s.sentPerPeer[j];
  }
  const Exchange val{
      d.sendValues.get<unsigned char>(), d.recvValues.get<unsigned char>(), sendOff, sendBytes, recvOff, recvBytes};
  SPCCL_RETURN_IF_ERROR(exchange(t, {&val}, stream));
  SPCCL_RETURN_IF_ERROR(cuda::scatterRowValues(d.recvValues.get(), sel.wire, s.sentPositions.get<uint32_t>(),
                                               s.sentOffsets.get<uint64_t>(), nRows, len, sel.dataType, gradRecv,
                                               stream));
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * sel.rowsPerPeer * sel.rowLen * dataTypeSize(sel.dataType);
  call->bytesSent = static_cast<uint64_t>(p - 1) * sizeof(CallDescriptor);
  for (int j = 0; j < p; ++j)
    if (j != comm->rank) call->bytesSent += s.recvPerPeer[j] * vb;
  return Status::ok();
}

}  // namespace gpu

}  // namespace spccl
