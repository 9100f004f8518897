// The C entry points' shared checks and dispatch (src/api_internal.h).
#include "src/api_internal.h"

using namespace spccl;

namespace spccl::api {

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: usable from atexit paths
  return *r;
}

bool commAlive(const spcclComm* c) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().comms.count(c) != 0;
}

spcclResult_t finish(const Status& st, int rank) {
  if (!st.isOk()) {
    setLastError(st);
    if (st.expected()) SPCCL_INFO(rank, "%s: %s", spcclGetErrorString(st.code()), st.message().c_str());
    else SPCCL_WARN(rank, "%s: %s", spcclGetErrorString(st.code()), st.message().c_str());
  }
  return st.code();
}

// For log lines before a communicator exists.
int worldRank() {
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// SPCCL_HOST_SIMD, applied at communicator creation (process-wide, as the
// host kernels' choice is).
Status applyHostSimd(const Params& p) {
  host::HostSimd simd;
  SPCCL_RETURN_IF_ERROR(resolveHostSimd(p.hostSimd, host::hostSimdAvailable, &simd));
  host::setHostSimd(simd);
  return Status::ok();
}

Status checkComm(const spcclComm* comm) {
  if (comm == nullptr) return invalidArgument("comm is NULL");
  if (!commAlive(comm))
    return invalidUsage(formatString("comm=%p is not a live communicator (destroyed, or never created)",
                                     static_cast<const void*>(comm)));
  return Status::ok();
}

Status checkCompressor(const spcclCompressor* c) {
  if (c == nullptr) return invalidArgument("compressor is NULL");
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    if (registry().compressors.count(c) == 0)
      return invalidUsage(formatString("compressor=%p is not a live compressor (destroyed, or never created)",
                                       static_cast<const void*>(c)));
    auto it = registry().comms.find(c->comm);
    if (it == registry().comms.end() || it->second != c->commId)
      return invalidUsage(
          formatString("compressor=%p: its communicator has been destroyed", static_cast<const void*>(c)));
  }
  return Status::ok();
}

// A call that communicates over MPI: after MPI_Finalize any MPI call aborts
// the process (Open MPI), so it is refused here instead.
Status checkMpiLive(const spcclComm& comm) {
  if (comm.onDevice) return Status::ok();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return invalidUsage(
        formatString("comm=%p: MPI has been finalized; collectives need MPI (destroy spccl objects "
                     "before MPI_Finalize, or at least make no calls after it)",
                     static_cast<const void*>(&comm)));
  return Status::ok();
}

// The names are the caller's argument names, for the messages.
Status checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, size_t elemSize, void* stream,
                    const char* sendName, const char* recvName, const char* countName) {
  if (count > 0 && sendbuff == nullptr)
    return invalidArgument(formatString("%s is NULL with %s=%zu", sendName, countName, count));
  if (count > 0 && recvbuff == nullptr)
    return invalidArgument(formatString("%s is NULL with %s=%zu", recvName, countName, count));
  if (count > SIZE_MAX / (elemSize ? elemSize : 1) / 2)
    return invalidArgument(formatString("%s=%zu x %zu-byte elements overflows size_t", countName, count, elemSize));
  if (stream != nullptr)
    return invalidArgument(
        formatString("stream=%p must be NULL on an MPI communicator (host buffers); device "
                     "buffers need a communicator from spcclCommInitNccl",
                     stream));
  return Status::ok();
}

Status checkDataType(int datatype) {
  if (datatype == spcclFloat8e4m3)
    return invalidArgument(
        formatString("datatype=%d (spcclFloat8e4m3) is a wire value type only "
                     "(spcclCompressConfig_t.wireValueType, SPCCL_VALUE_TYPE=fp8), not a buffer "
                     "type: pass fp32, fp16 or bf16 buffers",
                     datatype));
  if (!isValidDataType(datatype))
    return invalidArgument(formatString("datatype=%d is not an spcclDataType_t", datatype));
  return Status::ok();
}

Status checkTypeAndOp(int datatype, int op) {
  SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
  if (!isValidRedOp(op)) return invalidArgument(formatString("op=%d is not an spcclRedOp_t", op));
  return Status::ok();
}

// Every collective other than the allreduce adds its call to the
// communicator's counters; the last* fields stay the last allreduce's (spccl.h).
Status counted(spcclComm* comm, const Status& st, const spcclStats_t& call) {
  if (st.isOk() || call.calls) addCounters(&comm->stats, call);
  return st;
}

Status exactCall(spcclComm* comm, size_t denseBytes, const Status& st) {
  spcclStats_t call{};
  call.calls = 1;
  call.bytesSent = call.denseBytes = denseBytes;
  return counted(comm, st, call);
}

bool isSupportedRowType(spcclDataType_t t) { return isCompressibleType(t); }

// The stream as checkBuffers sees it: NCCL communicators take any stream,
// MPI ones only NULL.
void* hostStream(const spcclComm* comm, void* stream) { return comm->onDevice ? nullptr : stream; }

// MPI communicators work on host memory: a CUDA device buffer is rejected by
// name, unless the call is an exact one (handed to MPI as is) and the MPI is
// CUDA-aware. Managed memory is host-accessible and passes.
Status checkHostMemory(const spcclComm& comm, bool exactPath,
                       std::initializer_list<std::pair<const char*, const void*>> buffers) {
  if (comm.onDevice) return Status::ok();
  for (const auto& [name, ptr] : buffers) {
    if (!isDevicePointer(ptr)) continue;
    if (exactPath && mpiCudaAware()) continue;
    return invalidUsage(formatString(
        "%s=%p is CUDA device memory, but comm is an MPI communicator (host buffers)%s", name, ptr,
        exactPath ? " and this MPI is not CUDA-aware: use a communicator from spcclCommInitNccl"
                  : ": compressed collectives on device buffers need a communicator from spcclCommInitNccl"));
  }
  return Status::ok();
}

// One compressed allreduce through c, on the device or the host.
Status runCompressed(spcclCompressor* c, const void* sendbuff, void* recvbuff, spcclRedOp_t op, void* stream) {
#if SPCCL_WITH_NCCL
  if (c->comm->onDevice) {
    SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(c->comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    return gpu::compressedAllReduce(c, sendbuff, recvbuff, op, static_cast<cudaStream_t>(stream));
  }
#else
  (void)stream;
#endif
  SPCCL_RETURN_IF_ERROR(checkHostMemory(*c->comm, false, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
  return c->allReduce(sendbuff, recvbuff, op);
}

// DCT-MP rows, on the device or the host.
Status runRowsForward(spcclComm* comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                      spcclDataType_t type, float density, spcclSelection* sel, void* stream, spcclStats_t* call) {
#if SPCCL_WITH_NCCL
  if (comm->onDevice) {
    SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    return gpu::rowsForward(comm, sendbuff, recvbuff, rowsPerPeer, rowLen, type, density, sel,
                            static_cast<cudaStream_t>(stream), call);
  }
#else
  (void)stream;
#endif
  SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, false, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
  return alltoAllRowsForward(*comm, sendbuff, recvbuff, rowsPerPeer, rowLen, type, density, sel, call);
}

Status runRowsBackward(spcclSelection* sel, const void* gradSendbuff, void* gradRecvbuff, void* stream,
                       spcclStats_t* call) {
#if SPCCL_WITH_NCCL
  if (sel->comm->onDevice) {
    SPCCL_RETURN_IF_ERROR(
        gpu::checkDeviceMemory(sel->comm, {{"gradSendbuff", gradSendbuff}, {"gradRecvbuff", gradRecvbuff}}));
    return gpu::rowsBackward(sel->comm, gradSendbuff, gradRecvbuff, *sel, static_cast<cudaStream_t>(stream), call);
  }
#else
  (void)stream;
#endif
  SPCCL_RETURN_IF_ERROR(
      checkHostMemory(*sel->comm, false, {{"gradSendbuff", gradSendbuff}, {"gradRecvbuff", gradRecvbuff}}));
  return alltoAllRowsBackward(*sel->comm, gradSendbuff, gradRecvbuff, *sel, call);
}

// The exact allreduce of comm, on the device or the host.
Status runExactAllReduce(spcclComm* comm, const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                         spcclRedOp_t op, void* stream, spcclStats_t* call) {
#if SPCCL_WITH_NCCL
  if (comm->onDevice) {
    SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    return gpu::exactAllReduce(comm, sendbuff, recvbuff, count, type, op, static_cast<cudaStream_t>(stream), call);
  }
#else
  (void)stream;
#endif
  SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, true, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
  return comm->exactAllReduce(sendbuff, recvbuff, count, type, op, call);
}

Status checkSizes(size_t a, size_t b, size_t c, const char* what) {
  if ((b != 0 && a > SIZE_MAX / b) || (c != 0 && a * b > SIZE_MAX / c))
    return invalidArgument(formatString("%s (%zu x %zu x %zu bytes) overflows size_t", what, a, b, c));
  return Status::ok();
}

void registerCompressor(spcclCompressor* c) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().compressors[c] = true;
}

Status makeCompressor(spcclComm* comm, size_t count, spcclDataType_t type, const spcclCompressConfig_t& config,
                      bool implicit, std::unique_ptr<spcclCompressor>* out) {
  auto c = std::make_unique<spcclCompressor>();
  c->comm = comm;
  c->commId = comm->id;
  c->profileRank = comm->rank;
  c->count = count;
  c->dataType = type;
  c->config = config;
  c->implicit = implicit;
  c->executor = comm->executor;  // host, or CUDA on an NCCL communicator
  // The residual buffers come with the first compressed call
  // (spcclCompressor::ensureResidual).
  *out = std::move(c);
  return Status::ok();
}

// Above 2^32 - 1 elements nothing compresses: the streams and the threshold
// select count and index with 32 bits (spcclCompressorCreate refuses such a
// count), so the drop-in's larger buffers go to the exact path.
bool takesExactPath(const spcclComm& comm, size_t count, spcclDataType_t type, spcclRedOp_t op, float density) {
  return comm.params.disable || !isCompressibleType(type) || (op != spcclSum && op != spcclAvg) || density >= 1.0f ||
         count == 0 || count > UINT32_MAX;
}

// The drop-in keeps one compressor, with its residual, per (recvbuff, count,
// datatype) for the communicator's life. Stable gradient buffers make a handful;
// buffers that move between steps make one more each step, whose residual is
// never sent again. Warned at 64 and each doubling after (no eviction: a live
// residual dropped would break conservation silently).
void warnIfImplicitCompressorsPileUp(const spcclComm& comm) {
  const size_t held = comm.implicitCompressors.size();
  if (held < kImplicitCompressorsWarnAt || (held & (held - 1)) != 0) return;
  uint64_t elements = 0;
  for (const auto& entry : comm.implicitCompressors) elements += entry.second->count;
  SPCCL_WARN(comm.rank,
             "spcclAllReduce has made %zu implicit compressors on this communicator (one per recvbuff, count and "
             "datatype), holding error-feedback residuals for %llu elements. A buffer that moves between steps "
             "leaves its residual behind, never sent: keep gradient buffers in place, or give each its own "
             "compressor (spcclCompressorCreate, spcclAllReduceCompressed)",
             held, static_cast<unsigned long long>(elements));
}

}  // namespace spccl::api

Status spcclComm::exactAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                 spcclRedOp_t op, spcclStats_t* call) {
  // Every rank agrees on the call first (codec.h exactAllReduceDescriptor), so
  // a mismatch fails everywhere rather than reaching MPI with other shapes.
  const uint64_t callSeq = seq++;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(*this, *transport, exactAllReduceDescriptor(callSeq, count, type, op)));
  if (count > 0) SPCCL_RETURN_IF_ERROR(transport->allReduceDense(sendbuff, recvbuff, count, type, op));
  *call = spcclStats_t{};
  call->calls = 1;
  call->denseBytes = denseBytesPerCall(ranks, count, type);
  call->bytesSent = call->denseBytes;  // the bandwidth-optimal figure: MPI's own traffic is not visible here
  call->lastAlgorithm = SPCCL_ALGO_DENSE;
  call->lastSelected = count;
  addStats(&stats, *call);
  return Status::ok();
}

namespace spccl {

const char* dataTypeName(int t) {
  static const char* kNames[] = {"int8",    "uint8",   "int32",   "uint32",   "int64",     "uint64",
                                 "float16", "float32", "float64", "bfloat16", "float8e4m3"};
  static_assert(sizeof kNames / sizeof kNames[0] == spcclNumTypes, "a name per spcclDataType_t");
  return isKnownDataType(t) ? kNames[t] : "invalid";
}

const char* redOpName(int op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return isValidRedOp(op) ? kNames[op] : "invalid";
}

}  // namespace spccl
