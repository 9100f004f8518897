// Collectives on device buffers over NCCL. The compressed allreduce's exact
// mode (the default) is the host path's own code: the communicator's
// compressor (src/compressor.cc) and algorithms (collectives/) run on a CUDA
// executor (kernels/cuda/cuda_executor.h) over the NCCL transport, so the
// two paths share every rule and produce the same bits (docs/GPU.md).
//
// Fixed mode (SPCCL_CAPACITY_MODE=fixed), below, is still written here:
// every rank sends exactly capacity slots (padded with kPadIndex), the call
// records travel in the same NCCL group, and a one-block kernel turns them
// into per-rank counts. No host synchronisation and no allocation after the
// first call: capturable in a CUDA graph. Selected entries past the capacity
// stay in the residual, and a stored tau that selects too few is not seen
// (the counts never reach the host): tau follows the schedule only.
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

// The fixed mode's device-side record check compares raw descriptor bytes.
static_assert(offsetof(CallDescriptor, count) + sizeof(uint64_t) == cuda::kRecordCheckedBytes &&
                  offsetof(CallDescriptor, density) == cuda::kRecordDensityOffset &&
                  offsetof(CallDescriptor, flags) + sizeof(uint32_t) ==
                      cuda::kRecordDensityOffset + cuda::kRecordDensityAndFlagsBytes,
              "kernels/cuda/cuda_kernels.h: the record bytes checked across ranks");

// A fixed-mode compressor's device state.
struct DeviceCompressorState {
  DeviceMemory residual[2];
  int current = 0;
  bool residualZero = true;  // residual[current] is all +0.0 (the host compressor's flag)
  DeviceMemory selectWorkspace, thresholdWorkspace, threshold;
  DeviceMemory records;                                 // ranks x CallRecord
  DeviceMemory fixedIndices, fixedValues, fixedCounts;  // ranks x capacity slots
  DeviceMemory accumulator;                             // fp32 result for fp16/bf16 user buffers
  bool initialised = false;
  bool fixedReady = false;
};

namespace gpu {

namespace {

Status initCompressor(spcclCompressor* c) {
  DeviceCompressorState& s = *c->device;
  if (s.initialised) return Status::ok();
  const size_t n = c->count;
  if (c->config.errorFeedback) {
    SPCCL_RETURN_IF_ERROR(s.residual[0].ensure(n * sizeof(float)));
    SPCCL_RETURN_IF_ERROR(s.residual[1].ensure(n * sizeof(float)));
    SPCCL_CUDA_CHECK(cudaMemset(s.residual[0].get(), 0, n * sizeof(float)));
  }
  s.residualZero = true;
  const size_t selectBytes = cuda::selectPackWorkspaceBytes(n);
  SPCCL_RETURN_IF_ERROR(s.selectWorkspace.ensure(selectBytes));
  SPCCL_RETURN_IF_ERROR(cuda::initSelectPackWorkspace(s.selectWorkspace.get(), s.selectWorkspace.bytes(), nullptr));
  SPCCL_RETURN_IF_ERROR(s.thresholdWorkspace.ensure(cuda::thresholdWorkspaceBytes(n)));
  SPCCL_RETURN_IF_ERROR(s.threshold.ensure(sizeof(cuda::ThresholdOut)));
  SPCCL_CUDA_CHECK(cudaMemset(s.threshold.get(), 0, sizeof(cuda::ThresholdOut)));
  const int p = c->comm->ranks;
  SPCCL_RETURN_IF_ERROR(s.records.ensure(static_cast<size_t>(p) * sizeof(cuda::CallRecord)));
  if (c->dataType != spcclFloat32) SPCCL_RETURN_IF_ERROR(s.accumulator.ensure(n * sizeof(float)));
  SPCCL_CUDA_CHECK(cudaDeviceSynchronize());  // the memsets above ran on the legacy stream
  s.initialised = true;
  return Status::ok();
}

// v = send + residual; tau (device) = the k-th largest finite |v|.
Status estimate(spcclCompressor* c, const void* send, cudaStream_t stream) {
  DeviceCompressorState& s = *c->device;
  const float* resIn = c->config.errorFeedback ? s.residual[s.current].get<float>() : nullptr;
  ++c->callUpdates;
  return cuda::kthLargestMagnitude(send, c->dataType, resIn, c->count, c->selectCount(),
                                   s.threshold.get<cuda::ThresholdOut>(), s.thresholdWorkspace.get(),
                                   s.thresholdWorkspace.bytes(), stream);
}

Status selectInto(spcclCompressor* c, const void* send, bool estimated, bool keepOverflow, float* residualOut,
                  uint64_t capacity, uint64_t slots, uint32_t* indices, void* values, cuda::SelectCounts* result,
                  cudaStream_t stream) {
  DeviceCompressorState& s = *c->device;
  cuda::SelectArgs a{};
  a.send = send;
  a.inType = c->dataType;
  a.residualIn = c->config.errorFeedback ? s.residual[s.current].get<float>() : nullptr;
  a.residualOut = c->config.errorFeedback ? residualOut : nullptr;
  a.n = c->count;
  a.threshold = s.threshold.get<cuda::ThresholdOut>();
  // Right after an exact estimate, ties at tau fill the capacity in index
  // order; with a stored tau every tie goes (the host compressor's rule).
  a.tieCapacity = estimated ? capacity : std::numeric_limits<uint64_t>::max();
  a.capacity = slots;
  a.keepOverflow = keepOverflow;
  a.wireType = toValueType(c->config.wireValueType);
  a.indices = indices;
  a.values = values;
  a.result = result;
  return cuda::selectPack(a, s.selectWorkspace.get(), s.selectWorkspace.bytes(), stream);
}

// Sum (rank order, into zeros) of every rank's pairs, then average and
// conversion to the user's type.
Status finishReduce(spcclCompressor* c, float* acc, void* recv, spcclRedOp_t op, cudaStream_t stream) {
  if (op == spcclAvg)
    SPCCL_RETURN_IF_ERROR(cuda::divideFloats(acc, c->count, static_cast<float>(c->comm->ranks), stream));
  if (c->dataType != spcclFloat32) SPCCL_RETURN_IF_ERROR(cuda::storeFloats(acc, c->count, c->dataType, recv, stream));
  return Status::ok();
}

Status denseAllReduce(spcclCompressor* c, const void* send, float* acc, cudaStream_t stream) {
  DeviceCompressorState& s = *c->device;
  // fp32 is summed in the user's recvbuff (acc). A send buffer that overlaps
  // it other than in place (sendNeedsMove: sendbuff = recvbuff + 1, say) would
  // be read by the copy kernel where it has already written; its data goes
  // through a free buffer first: the spare residual (the next selection
  // rewrites all of it), or, with no residual to add, the transport's scratch.
  const size_t bytes = c->count * sizeof(float);
  if (c->dataType == spcclFloat32 && sendNeedsMove(send, bytes, acc, acc, bytes)) {
    if (!c->config.errorFeedback) {
      ++c->callIndex;
      return transportOf(c->comm).allReduceDense(send, acc, c->count, spcclFloat32, spcclSum);
    }
    float* spare = s.residual[1 - s.current].get<float>();
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(spare, send, bytes, cudaMemcpyDeviceToDevice, stream));
    send = spare;
  }
  SPCCL_RETURN_IF_ERROR(cuda::loadFloats(send, c->dataType, c->count, acc, stream));
  if (c->config.errorFeedback) {
    // An empty residual is not added, as on the host: an input of -0.0 stays
    // -0.0 (adding +0.0 would make it +0.0), and two passes are saved. Not in
    // fixed mode: a graph may replay this call after calls outside it filled
    // the residual, so the flush is always captured.
    if (!s.residualZero || c->comm->params.capacityMode == kCapacityModeFixed) {
      float* r = s.residual[s.current].get<float>();
      SPCCL_RETURN_IF_ERROR(cuda::denseAccumulate(r, core::ValueType::kFloat32, c->count, acc, stream));
      SPCCL_CUDA_CHECK(cudaMemsetAsync(r, 0, c->count * sizeof(float), stream));
      s.residualZero = true;
    }
    c->estimateNext = true;  // tau fitted to a full residual: the next compressed call re-estimates
  }
  ++c->callIndex;
  return transportOf(c->comm).allReduceDense(acc, acc, c->count, spcclFloat32, spcclSum);
}

Status fixedModeCall(spcclCompressor* c, const void* send, float* acc, const CallDescriptor& mine, int algorithm,
                     cudaStream_t stream, spcclStats_t* call) {
  DeviceCompressorState& s = *c->device;
  spcclComm& comm = *c->comm;
  NcclTransport& t = transportOf(&comm);
  const int p = comm.ranks, me = comm.rank;
  if (algorithm == SPCCL_ALGO_DENSE) {  // nothing to size: the dense allreduce as it is
    SPCCL_RETURN_IF_ERROR(denseAllReduce(c, send, acc, stream));
    call->bytesSent = call->denseBytes;
    call->lastSelected = c->count;
    return Status::ok();
  }
  const core::ValueType wire = toValueType(c->config.wireValueType);
  const uint32_t vb = core::wireValueBytes(wire);
  const uint64_t capacity = c->pairCapacity();
  if (!s.fixedReady) {  // the only allocations: run one call before capturing a graph
    SPCCL_RETURN_IF_ERROR(s.fixedIndices.ensure(static_cast<size_t>(p) * capacity * sizeof(uint32_t)));
    SPCCL_RETURN_IF_ERROR(s.fixedValues.ensure(static_cast<size_t>(p) * capacity * vb));
    SPCCL_RETURN_IF_ERROR(s.fixedCounts.ensure(static_cast<size_t>(p) * sizeof(uint64_t)));
    s.fixedReady = true;
  }
  auto* records = s.records.get<cuda::CallRecord>();
  auto* idxAll = s.fixedIndices.get<uint32_t>();
  auto* valAll = s.fixedValues.get<unsigned char>();
  uint32_t* myIdx = idxAll + static_cast<size_t>(me) * capacity;
  void* myVal = valAll + static_cast<size_t>(me) * capacity * vb;

  const bool estimated = c->takeEstimateDue();
  if (estimated) SPCCL_RETURN_IF_ERROR(estimate(c, send, stream));
  SPCCL_CUDA_CHECK(cudaMemsetAsync(myIdx, 0xff, capacity * sizeof(uint32_t), stream));  // kPadIndex
  // In place: no pass is ever redone here, so one residual buffer serves.
  SPCCL_RETURN_IF_ERROR(selectInto(c, send, estimated, true, s.residual[s.current].get<float>(), capacity, capacity,
                                   myIdx, myVal, &records[me].counts, stream));
  SPCCL_RETURN_IF_ERROR(cuda::writeCallRecordHeader(&records[me], headerFor(mine, capacity, capacity, estimated),
                                                    nullptr, comm.device->pendingDevice, stream));
  ncclComm_t nc = t.nccl();
  NcclGroup group(nc);
  SPCCL_RETURN_IF_ERROR(group.start());
  SPCCL_NCCL_CHECK_IN_GROUP(pncclAllGather(&records[me], records, sizeof(cuda::CallRecord), ncclUint8, nc, stream), nc);
  SPCCL_NCCL_CHECK_IN_GROUP(pncclAllGather(myIdx, idxAll, capacity * sizeof(uint32_t), ncclUint8, nc, stream), nc);
  SPCCL_NCCL_CHECK_IN_GROUP(pncclAllGather(myVal, valAll, capacity * vb, ncclUint8, nc, stream), nc);
  SPCCL_RETURN_IF_ERROR(group.end());
  auto* counts = s.fixedCounts.get<uint64_t>();
  SPCCL_RETURN_IF_ERROR(cuda::resolveFixedCounts(records, p, counts, comm.device->reportedDevice, stream));
  SPCCL_CUDA_CHECK(cudaMemsetAsync(acc, 0, c->count * sizeof(float), stream));
  for (int r = 0; r < p; ++r)
    SPCCL_RETURN_IF_ERROR(cuda::unpackAccumulate(idxAll + static_cast<size_t>(r) * capacity,
                                                 valAll + static_cast<size_t>(r) * capacity * vb, wire, capacity,
                                                 counts + r, acc, 0, c->count, comm.device->pendingDevice, stream));
  ++c->callIndex;
  call->bytesSent = static_cast<uint64_t>(p - 1) * (sizeof(cuda::CallRecord) + capacity * (sizeof(uint32_t) + vb));
  call->lastSelected = 0;  // on the device only: reading it would cost the synchronisation this mode avoids
  return Status::ok();
}

}  // namespace

Status initComm(spcclComm* comm, ncclComm_t nccl, bool envOk) {
  std::unique_ptr<NcclTransport> t;
  SPCCL_RETURN_IF_ERROR(NcclTransport::create(nccl, &t));
  DeviceGuard guard(t->device());
  auto state = std::make_shared<DeviceCommState>();
  SPCCL_RETURN_IF_ERROR(state->pending.ensure(sizeof(uint32_t)));
  SPCCL_CUDA_CHECK(cudaMemset(state->pending.get(), 0, sizeof(uint32_t)));
  state->pendingDevice = state->pending.get<uint32_t>();
  SPCCL_RETURN_IF_ERROR(state->reported.ensure(cuda::kAsyncKinds * sizeof(uint32_t), cudaHostAllocMapped));
  std::memset(state->reported.get(), 0, cuda::kAsyncKinds * sizeof(uint32_t));
  SPCCL_CUDA_CHECK(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&state->reportedDevice), state->reported.get(), 0));
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
  // allReduceRowSparse runs allgather on a device (partition's split by owner
  // has no device kernel): the same result, allgather's traffic.
  if (comm->params.rowSparseAlgorithm == kRowSparsePartition)
    SPCCL_INFO(t->rank(),
               "SPCCL_ROWSPARSE_ALGO=partition: the row-sparse allreduce runs as allgather on NCCL "
               "communicators (docs/GPU.md)");
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

namespace {

// The kinds whose verdict counters moved since the host last looked (the
// host only reads them: the device alone writes, so no update is lost).
uint32_t takeReported(spcclComm* comm) {
  DeviceCommState& d = *comm->device;
  const volatile uint32_t* counters = d.reported.get<uint32_t>();
  uint32_t bits = 0;
  for (int kind = 0; kind < cuda::kAsyncKinds; ++kind) {
    const uint32_t now = counters[kind];
    if (now != d.reportedSeen[kind]) bits |= 1u << kind;
    d.reportedSeen[kind] = now;
  }
  return bits;
}

Status asyncFailure(uint32_t bits) {
  if (bits & cuda::kAsyncMismatch)
    return invalidUsage(
        "an earlier fixed-capacity compressed allreduce (SPCCL_CAPACITY_MODE=fixed) was called "
        "inconsistently across ranks (count, datatype, op, algorithm, wire type, density or call "
        "order): its output was left zero and the compressor state is undefined");
  return remoteError(
      "a peer's pairs stream in an earlier call on this communicator failed the bounds and order "
      "checks on a rank's device; the bad pairs were not applied there");
}

}  // namespace

Status asyncErrorAfterExchange(spcclComm* comm, uint32_t carried) {
  const uint32_t bits = carried | takeReported(comm);
  return bits == 0 ? Status::ok() : asyncFailure(bits);
}

Status takeReportedAsyncError(spcclComm* comm) {
  const uint32_t bits = takeReported(comm);
  return bits == 0 ? Status::ok() : asyncFailure(bits);
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
  spcclComm& comm = *c->comm;
  if (comm.params.capacityMode != kCapacityModeFixed)  // the host path's compressor, on the CUDA executor
    return onStream(&comm, stream, [&] { return c->allReduce(send, recv, op); });
  NcclTransport& t = transportOf(&comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  // Fixed mode never comes back to the host, so it looks for earlier calls'
  // asynchronous errors now, but not while capturing a graph: a rank whose
  // device has not yet counted the previous verdict would capture the call
  // where another leaves it out.
  if (!t.capturing()) SPCCL_RETURN_IF_ERROR(takeReportedAsyncError(&comm));
  if (!c->device) c->device = std::make_shared<DeviceCompressorState>();
  SPCCL_RETURN_IF_ERROR(initCompressor(c));
  DeviceCompressorState& s = *c->device;
  const int p = comm.ranks;
  const uint64_t seq = comm.seq++;
  const core::ValueType wire = toValueType(c->config.wireValueType);
  c->callUpdates = 0;

  int algorithm = c->config.algorithm;
  if (algorithm == SPCCL_ALGO_AUTO) {
    CostInputs in{p, c->count, c->selectCount(), static_cast<uint32_t>(dataTypeSize(c->dataType)),
                  core::wireValueBytes(wire)};
    in.onDevice = true;
    algorithm = chooseAlgorithm(in, comm.costModel);
  }
  // Fixed capacity runs every sparse algorithm as allgather's fixed policy (as on the host).
  if (algorithm != SPCCL_ALGO_DENSE) algorithm = SPCCL_ALGO_ALLGATHER;
  float* acc = c->dataType == spcclFloat32 ? static_cast<float*>(recv) : s.accumulator.get<float>();
  CallDescriptor mine{kStreamMagic,
                      static_cast<uint8_t>(algorithm),
                      static_cast<uint8_t>(wire),
                      static_cast<uint8_t>(c->dataType),
                      static_cast<uint8_t>(op),
                      seq,
                      c->count,
                      0};
  mine.density = c->config.density;
  if (c->config.algorithm == SPCCL_ALGO_AUTO) mine.flags = kCallAuto;  // as on the host path
  spcclStats_t call{};
  call.calls = 1;
  call.compressedCalls = algorithm != SPCCL_ALGO_DENSE;
  call.denseBytes = denseBytesPerCall(p, c->count, c->dataType);
  call.lastAlgorithm = algorithm;
  SPCCL_RETURN_IF_ERROR(fixedModeCall(c, send, acc, mine, algorithm, stream, &call));
  SPCCL_RETURN_IF_ERROR(finishReduce(c, acc, recv, op, stream));
  call.thresholdUpdates = c->callUpdates;
  addStats(&c->stats, call);
  addStats(&comm.stats, call);
  SPCCL_TRACE(comm.rank, "device allreduce #%llu count=%zu algo=%s selected=%llu bytesSent=%llu",
              static_cast<unsigned long long>(seq), c->count, algorithmName(algorithm),
              static_cast<unsigned long long>(call.lastSelected), static_cast<unsigned long long>(call.bytesSent));
  return Status::ok();
}

Status allGatherTopK(spcclComm* comm, const void* send, void* recv, size_t n, spcclDataType_t type, float density,
                     cudaStream_t stream, spcclStats_t* call) {
  return onStream(comm, stream, [&] { return spccl::allGatherTopK(*comm, send, recv, n, type, density, call); });
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
  const void* residual = nullptr;  // none yet, or no error feedback: zeros
  if (c->config.errorFeedback) {
    if (c->device)  // fixed mode
      residual = c->device->initialised ? c->device->residual[c->device->current].get() : nullptr;
    else residual = c->residual[c->current].get();
  }
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
