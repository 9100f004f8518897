// Sparsified allgather (SPCCL_ALLGATHER_DENSITY < 1) on device buffers: the
// host path's selection (collectives/allgather_topk.cc) bit for bit: each
// rank keeps the k = ceil(density * sendcount) entries of largest magnitude
// of its block (ties: lower index first; NaN/Inf always, even beyond k;
// exact zeros never), and every rank writes every block, zeros elsewhere.
// Blocks always travel as pairs here (the host switches a block to dense
// when that is smaller; the output is the same).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "collectives/other_collectives.h"
#include "src/nccl/device_collectives.h"
#include "src/nccl/device_state.h"
#include "kernels/core/types.h"

namespace spccl::gpu {

Status allGatherTopK(spcclComm* comm, const void* send, void* recv, size_t n, spcclDataType_t type, float density,
                     cudaStream_t stream, spcclStats_t* call) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  DeviceCommState& d = *comm->device;
  const int p = comm->ranks, me = comm->rank;
  const core::ValueType wire = ownValuesWireType(comm->params.valueType, type);
  const uint32_t vb = core::wireValueBytes(wire);
  const size_t esize = dataTypeSize(type);
  const uint64_t seq = comm->seq++;
  const uint64_t k = allGatherTopKCount(density, n);

  // Threshold and tie budget by the host path's rule (other_collectives.h),
  // each estimate on the device and read back (two passes with NaN/Inf).
  SPCCL_RETURN_IF_ERROR(d.agThreshold.ensure(sizeof(cuda::ThresholdOut)));
  SPCCL_RETURN_IF_ERROR(d.agThresholdWorkspace.ensure(cuda::thresholdWorkspaceBytes(n)));
  SPCCL_RETURN_IF_ERROR(d.agHost.ensure(std::max(sizeof(cuda::ThresholdOut), sizeof(cuda::SelectCounts))));
  auto* th = d.agThreshold.get<cuda::ThresholdOut>();
  auto* hostTh = d.agHost.get<cuda::ThresholdOut>();
  uint32_t tauKey = 0;
  uint64_t tieBudget = 0;
  // Named, not inline in the macro: its own SPCCL_RETURN_IF_ERROR would shadow the macro's status.
  const auto kth = [&](uint64_t kk, uint32_t* tau, uint64_t* above, uint64_t* finite) -> Status {
    SPCCL_RETURN_IF_ERROR(cuda::kthLargestMagnitude(send, type, nullptr, n, kk, th, d.agThresholdWorkspace.get(),
                                                    d.agThresholdWorkspace.bytes(), stream));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(hostTh, th, sizeof *hostTh, cudaMemcpyDeviceToHost, stream));
    SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
    *tau = hostTh->tauKey, *above = hostTh->above, *finite = hostTh->finite;
    return Status::ok();
  };
  SPCCL_RETURN_IF_ERROR(allGatherTopKThreshold(n, k, kth, &tauKey, &tieBudget));

  // Selection (no residual: nothing is reduced), grown once past the slack.
  const size_t selectBytes = cuda::selectPackWorkspaceBytes(n);
  if (d.agSelectWorkspace.bytes() < selectBytes) {
    SPCCL_RETURN_IF_ERROR(d.agSelectWorkspace.ensure(selectBytes));
    SPCCL_RETURN_IF_ERROR(
        cuda::initSelectPackWorkspace(d.agSelectWorkspace.get(), d.agSelectWorkspace.bytes(), stream));
  }
  SPCCL_RETURN_IF_ERROR(d.agCounts.ensure(sizeof(cuda::SelectCounts)));
  auto* hostCounts = d.agHost.get<cuda::SelectCounts>();
  uint64_t slots = std::min<uint64_t>(n, k + 64), nnz = 0;
  for (int attempt = 0; attempt < 2; ++attempt) {
    SPCCL_RETURN_IF_ERROR(d.agIndices.ensure(slots * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(d.agValues.ensure(slots * vb));
    cuda::SelectArgs a{};
    a.send = send;
    a.inType = type;
    a.n = n;
    a.tauKey = tauKey;
    a.tieBudget = tieBudget;
    a.capacity = slots;
    a.wireType = wire;
    a.indices = d.agIndices.get<uint32_t>();
    a.values = d.agValues.get();
    a.result = d.agCounts.get<cuda::SelectCounts>();
    SPCCL_RETURN_IF_ERROR(cuda::selectPack(a, d.agSelectWorkspace.get(), d.agSelectWorkspace.bytes(), stream));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(hostCounts, a.result, sizeof *hostCounts, cudaMemcpyDeviceToHost, stream));
    SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
    nnz = hostCounts->selected;
    if (nnz <= slots) break;
    slots = nnz;  // more NaN/Inf than the slack: grow once and redo
  }

  // Every rank's count travels in its descriptor, as on the host.
  const CallDescriptor mine = allGatherTopKDescriptor(seq, n, type, wire, nnz, density);
  SPCCL_RETURN_IF_ERROR(agreeOnDevice(comm, mine, stream));
  const std::vector<CallDescriptor>& all = comm->descriptors;
  size_t* idxBytes = d.peerSizeArrays(p, 4);  // the communicator's per-call scratch
  size_t *idxOff = idxBytes + p, *valBytes = idxOff + p, *valOff = valBytes + p;
  uint64_t total = 0;
  for (int r = 0; r < p; ++r) {
    idxBytes[r] = all[r].nnz * sizeof(uint32_t);
    valBytes[r] = all[r].nnz * vb;
    idxOff[r] = total * sizeof(uint32_t);
    valOff[r] = total * vb;
    total += all[r].nnz;
  }
  SPCCL_RETURN_IF_ERROR(d.agRecvIndices.ensure(std::max<uint64_t>(total, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(d.agRecvValues.ensure(std::max<uint64_t>(total, 1) * vb));
  SPCCL_RETURN_IF_ERROR(t.allGatherV(d.agIndices.get(), idxBytes[me], d.agRecvIndices.get(), idxBytes, idxOff));
  SPCCL_RETURN_IF_ERROR(t.allGatherV(d.agValues.get(), valBytes[me], d.agRecvValues.get(), valBytes, valOff));

  // Every block: zeros, its pairs, the user type. (An in-place send block
  // has been consumed by the selection above, in stream order.)
  SPCCL_RETURN_IF_ERROR(d.agAccumulator.ensure(n * sizeof(float)));
  auto* acc = d.agAccumulator.get<float>();
  for (int r = 0; r < p; ++r) {
    void* block = static_cast<char*>(recv) + static_cast<size_t>(r) * n * esize;
    float* target = type == spcclFloat32 ? static_cast<float*>(block) : acc;
    SPCCL_CUDA_CHECK(cudaMemsetAsync(target, 0, n * sizeof(float), stream));
    SPCCL_RETURN_IF_ERROR(cuda::unpackAccumulate(d.agRecvIndices.get<uint32_t>() + idxOff[r] / sizeof(uint32_t),
                                                 d.agRecvValues.get<unsigned char>() + valOff[r], wire, all[r].nnz,
                                                 nullptr, target, 0, n, d.pendingDevice, stream));
    if (type != spcclFloat32) SPCCL_RETURN_IF_ERROR(cuda::storeFloats(acc, n, type, block, stream));
  }
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->denseBytes = static_cast<uint64_t>(p - 1) * n * esize;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(cuda::CallRecord) + nnz * (sizeof(uint32_t) + vb));
  return Status::ok();
}

}  // namespace spccl::gpu
