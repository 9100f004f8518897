// Collectives on device buffers over NCCL. The compressed allreduce (both
// capacity modes), the sparsified allgather and the row-sparse allreduce are
// the host path's own code: the communicator's compressor
// (src/compressor.cc) and algorithms (collectives/) run on a CUDA executor
// (kernels/cuda/cuda_executor.h) over the NCCL transport, so the two paths
// share every rule and produce the same bits (docs/GPU.md). Here: the
// communicator's creation, the buffer check, and the exact collectives.
#include "src/nccl/device_collectives.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "codec/codec.h"
#include "collectives/other_collectives.h"
#include "src/comm.h"
#include "src/log.h"
#include "src/nccl/device_state.h"
#include "transport/nccl_transport.h"
#include "src/tuner.h"
#include "kernels/core/types.h"

namespace spccl {

namespace gpu {

Status initComm(spcclComm* comm, ncclComm_t nccl, bool envOk) {
  std::unique_ptr<NcclTransport> t;
  SPCCL_RETURN_IF_ERROR(NcclTransport::create(nccl, &t));
  DeviceGuard guard(t->device());
  auto state = std::make_shared<DeviceCommState>();
  SPCCL_RETURN_IF_ERROR(state->staging.ensure(sizeof(int)));
  // One MAX allreduce: the lowest rank whose environment was bad (as
  // ranks - rank: 0 where none was), and rank 0's
  // SPCCL_NET_GBPS and SPCCL_NET_LATENCY_US (the others send -1, below any
  // valid value), so auto's model is the same on every rank, as on an MPI
  // communicator. (SPCCL_CALIBRATE measures over MPI, host path only.)
  const bool root = t->rank() == 0;
  // Rank 0's settings that auto's model reads (ModelSettings) come the same way.
  const Params& mine = comm->params;
  double agreed[6] = {envOk ? 0.0 : static_cast<double>(t->size() - t->rank()),
                      root ? mine.netGbps : -1.0,
                      root ? mine.netLatencyUs : -1.0,
                      root ? static_cast<double>(mine.indexEncoding) : -1.0,
                      root ? (mine.errorFeedback ? 1.0 : 0.0) : -1.0,
                      root ? static_cast<double>(mine.splitReselect) : -1.0};
  DeviceMemory flag;
  SPCCL_RETURN_IF_ERROR(flag.ensure(sizeof agreed));
  SPCCL_CUDA_CHECK(cudaMemcpy(flag.get(), agreed, sizeof agreed, cudaMemcpyHostToDevice));
  SPCCL_NCCL_CHECK(pncclAllReduce(flag.get(), flag.get(), 6, ncclFloat64, ncclMax, nccl, nullptr), nccl);
  SPCCL_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  SPCCL_CUDA_CHECK(cudaMemcpy(agreed, flag.get(), sizeof agreed, cudaMemcpyDeviceToHost));
  if (!envOk) return invalidUsage("this rank's SPCCL_* environment is invalid (see the log)");
  if (agreed[0] != 0.0)
    return invalidUsage(formatString("rank %d rejected its SPCCL_* environment (see its log)",
                                     t->size() - static_cast<int>(agreed[0])));
  if (!root && (agreed[1] != comm->params.netGbps || agreed[2] != comm->params.netLatencyUs))
    SPCCL_WARN(t->rank(), "SPCCL_NET_GBPS=%g SPCCL_NET_LATENCY_US=%g here; rank 0's %g and %g are used",
               comm->params.netGbps, comm->params.netLatencyUs, agreed[1], agreed[2]);
  comm->params.netGbps = agreed[1];
  comm->params.netLatencyUs = agreed[2];
  comm->costModel = applyNetworkParams(CostModel{}, agreed[1], agreed[2]);
  comm->modelSettings = ModelSettings{static_cast<int>(agreed[3]), agreed[4] != 0.0, static_cast<float>(agreed[5])};
  if (comm->params.autoTrials > 0) {
    // A call on a stream returns before its work has run: its host time is no trial's.
    SPCCL_INFO(t->rank(),
               "SPCCL_AUTO_TRIALS=%d: timed trials run on MPI communicators only; auto picks by the "
               "model here",
               comm->params.autoTrials);
    comm->params.autoTrials = 0;
  }
  comm->rank = t->rank();
  comm->ranks = t->size();
  int pageable = 0;
  if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, t->device()) != cudaSuccess) {
    (void)cudaGetLastError();
    pageable = 0;
  }
  state->pageableAccess = pageable != 0;
  state->transport = t.get();
  auto executor = std::make_shared<cuda::CudaExecutor>();
  state->executor = executor.get();
  comm->executor = std::move(executor);
  comm->transport = std::move(t);
  comm->onDevice = true;
  comm->device = std::move(state);
  return Status::ok();
}

Status checkDeviceMemory(spcclComm* comm, std::initializer_list<std::pair<const char*, const void*>> buffers) {
  if (comm->device->pageableAccess) return Status::ok();
  // On the communicator's device: the query must not start a context on
  // whatever device the calling thread has current.
  DeviceGuard guard(comm->device->transport->device());
  for (const auto& [name, ptr] : buffers) {
    if (ptr == nullptr) continue;  // (only where nothing is read or written: the argument checks ran)
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;  // not for this check to decide: NCCL and the kernels report what they find
    }
    if (a.type == cudaMemoryTypeUnregistered)
      return invalidUsage(formatString(
          "%s=%p is host memory the device cannot read (neither allocated nor registered with CUDA), but comm is "
          "an NCCL communicator (device buffers): pass device, managed or registered memory, or use a communicator "
          "from spcclCommInitMPI for host buffers",
          name, ptr));
  }
  return Status::ok();
}

Status exactAllReduce(spcclComm* comm, const void* send, void* recv, size_t count, spcclDataType_t type,
                      spcclRedOp_t op, cudaStream_t stream, spcclStats_t* call) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  ++comm->seq;
  if (count > 0) SPCCL_RETURN_IF_ERROR(t.allReduceDense(send, recv, count, type, op));
  *call = spcclStats_t{};
  call->calls = 1;
  call->denseBytes = denseBytesPerCall(comm->ranks, count, type);
  call->bytesSent = call->denseBytes;
  call->lastAlgorithm = SPCCL_ALGO_DENSE;
  call->lastSelected = count;
  addStats(&comm->stats, *call);
  return Status::ok();
}

Status compressedAllReduce(spcclCompressor* c, const void* send, void* recv, spcclRedOp_t op, cudaStream_t stream) {
  return onStream(c->comm, stream, [&] { return c->allReduce(send, recv, op); });
}

Status allGatherTopK(spcclComm* comm, const void* send, void* recv, size_t n, spcclDataType_t type, float density,
                     cudaStream_t stream, spcclStats_t* call) {
  return onStream(comm, stream, [&] { return spccl::allGatherTopK(*comm, send, recv, n, type, density, call); });
}

Status rowsForward(spcclComm* comm, const void* send, void* recv, size_t rowsPerPeer, size_t rowLen,
                   spcclDataType_t type, float density, spcclSelection* sel, cudaStream_t stream, spcclStats_t* call) {
  return onStream(comm, stream, [&] {
    return alltoAllRowsForward(*comm, send, recv, rowsPerPeer, rowLen, type, density, sel, call);
  });
}

Status rowsBackward(spcclComm* comm, const void* gradSend, void* gradRecv, spcclSelection& sel, cudaStream_t stream,
                    spcclStats_t* call) {
  return onStream(comm, stream, [&] { return alltoAllRowsBackward(*comm, gradSend, gradRecv, sel, call); });
}

Status rowSparse(spcclComm* comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                 spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                 cudaStream_t stream, spcclStats_t* call) {
  return onStream(comm, stream, [&] {
    return allReduceRowSparse(*comm, ids, rows, nrows, rowLen, type, outIds, outRows, outCapacity, outNrows, call);
  });
}

Status allToAll(spcclComm* comm, const void* send, void* recv, size_t bytesPerPeer, cudaStream_t stream) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  return bytesPerPeer ? t.allToAll(send, bytesPerPeer, recv) : Status::ok();
}

Status allGather(spcclComm* comm, const void* send, void* recv, size_t bytesPerRank, cudaStream_t stream) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  return bytesPerRank ? t.allGather(send, bytesPerRank, recv) : Status::ok();
}

Status copyResidual(const spcclCompressor* c, float* out) {
  const size_t bytes = c->count * sizeof(float);
  if (bytes == 0) return Status::ok();
  DeviceGuard guard(static_cast<NcclTransport*>(c->comm->transport.get())->device());
  SPCCL_CUDA_CHECK(cudaDeviceSynchronize());
  // None yet, or no error feedback: zeros.
  const void* residual = c->config.errorFeedback ? c->residual[c->current].get() : nullptr;
  if (residual == nullptr) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, out) == cudaSuccess && a.type == cudaMemoryTypeDevice) {
      SPCCL_CUDA_CHECK(cudaMemset(out, 0, bytes));
    } else {
      (void)cudaGetLastError();
      std::memset(out, 0, bytes);
    }
    return Status::ok();
  }
  SPCCL_CUDA_CHECK(cudaMemcpy(out, residual, bytes, cudaMemcpyDefault));
  return Status::ok();
}

}  // namespace gpu

}  // namespace spccl
