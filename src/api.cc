// The C entry points: validate arguments, resolve the path (exact or
// compressed), call into the communicator/compressor, and turn a Status into
// an spcclResult_t plus this thread's last-error message. No exception
// crosses this boundary.
#include <atomic>
#include <climits>
#include <cstring>
#include <mutex>
#include <new>
#include <unistd.h>  // environ

#include <unordered_map>

#include "include/spccl.h"
#include "include/spccl_mpi.h"
#include "kernels/host/host_kernels.h"
#include "collectives/other_collectives.h"
#include "src/comm.h"
#include "transport/device.h"
#include "src/log.h"
#include "transport/mpi_transport.h"
#include "kernels/core/types.h"
#if SPCCL_WITH_NCCL
#include "include/spccl_nccl.h"
#include "src/nccl/device_collectives.h"
#endif

using namespace spccl;

namespace {

// Live handles. A handle not in here (NULL, destroyed, garbage) is rejected
// with a clear error instead of being dereferenced.
struct Registry {
  std::mutex mu;
  std::unordered_map<const spcclComm*, uint64_t> comms;  // -> comm id
  std::unordered_map<const spcclCompressor*, bool> compressors;
  std::unordered_map<const spcclSelection*, bool> selections;
  uint64_t nextId = 1;
};
Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: usable from atexit paths
  return *r;
}

bool commAlive(const spcclComm* c) {
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().comms.count(c) != 0;
}

spcclResult_t finish(const Status& st, int rank = -1) {
  if (!st.isOk()) {
    setLastError(st);
    if (st.expected())
      SPCCL_INFO(rank, "%s: %s", spcclGetErrorString(st.code()), st.message().c_str());
    else
      SPCCL_WARN(rank, "%s: %s", spcclGetErrorString(st.code()), st.message().c_str());
  }
  return st.code();
}

// rank is read after f has run: a call that learns its communicator inside f
// (spcclAlltoAllRowsBackward, from its selection) passes the variable it sets.
template <typename F>
spcclResult_t guarded(F&& f, const int& rank = -1) {
  try {
    const Status st = f();  // before rank is read (argument order is unspecified)
    return finish(st, rank);
  } catch (const std::bad_alloc&) {
    return finish(systemError("out of host memory"), rank);
  } catch (const std::exception& e) {
    return finish(internalError(std::string("unexpected exception: ") + e.what()), rank);
  }
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
      return invalidUsage(formatString("compressor=%p: its communicator has been destroyed",
                                       static_cast<const void*>(c)));
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
    return invalidUsage(formatString("comm=%p: MPI has been finalized; collectives need MPI (destroy spccl objects "
                                     "before MPI_Finalize, or at least make no calls after it)",
                                     static_cast<const void*>(&comm)));
  return Status::ok();
}

// The names are the caller's argument names, for the messages.
Status checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, size_t elemSize, void* stream,
                    const char* sendName = "sendbuff", const char* recvName = "recvbuff",
                    const char* countName = "count") {
  if (count > 0 && sendbuff == nullptr)
    return invalidArgument(formatString("%s is NULL with %s=%zu", sendName, countName, count));
  if (count > 0 && recvbuff == nullptr)
    return invalidArgument(formatString("%s is NULL with %s=%zu", recvName, countName, count));
  if (count > SIZE_MAX / (elemSize ? elemSize : 1) / 2)
    return invalidArgument(formatString("%s=%zu x %zu-byte elements overflows size_t", countName, count, elemSize));
  if (stream != nullptr)
    return invalidArgument(formatString("stream=%p must be NULL on an MPI communicator (host buffers); device "
                                        "buffers need a communicator from spcclCommInitNccl",
                                        stream));
  return Status::ok();
}

Status checkDataType(int datatype) {
  if (datatype == spcclFloat8e4m3)
    return invalidArgument(formatString("datatype=%d (spcclFloat8e4m3) is a wire value type only "
                                        "(spcclCompressConfig_t.wireValueType, SPCCL_VALUE_TYPE=fp8), not a buffer "
                                        "type: pass fp32, fp16 or bf16 buffers",
                                        datatype));
  if (!isValidDataType(datatype)) return invalidArgument(formatString("datatype=%d is not an spcclDataType_t", datatype));
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
  // The host residual buffers come with the first compressed call
  // (spcclCompressor::ensureResidual); device compressors keep theirs on the device.
  *out = std::move(c);
  return Status::ok();
}

// Above 2^32 - 1 elements nothing compresses: the streams and the threshold
// select count and index with 32 bits (spcclCompressorCreate refuses such a
// count), so the drop-in's larger buffers go to the exact path.
bool takesExactPath(const spcclComm& comm, size_t count, spcclDataType_t type, spcclRedOp_t op, float density) {
  return comm.params.disable || !isCompressibleType(type) || (op != spcclSum && op != spcclAvg) ||
         density >= 1.0f || count == 0 || count > UINT32_MAX;
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

}  // namespace

Status spcclComm::exactAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                 spcclRedOp_t op, spcclStats_t* call) {
  // Every rank agrees on the call first (codec.h exactAllReduceDescriptor), so
  // a mismatch fails everywhere rather than reaching MPI with other shapes.
  const uint64_t callSeq = seq++;
  SPCCL_RETURN_IF_ERROR(agreeOnCall(*transport, exactAllReduceDescriptor(callSeq, count, type, op), &descriptors));
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

extern "C" {

spcclResult_t spcclGetVersion(int* version) {
  if (version == nullptr) return finish(invalidArgument("version is NULL"));
  *version = SPCCL_VERSION_CODE;
  return spcclSuccess;
}

const char* spcclGetErrorString(spcclResult_t result) {
  switch (result) {
    case spcclSuccess:
      return "no error";
    case spcclUnhandledCudaError:
      return "unhandled cuda error";
    case spcclSystemError:
      return "unhandled system error (MPI, network or memory)";
    case spcclInternalError:
      return "internal error - please report this issue to the spccl developers";
    case spcclInvalidArgument:
      return "invalid argument";
    case spcclInvalidUsage:
      return "invalid usage";
    case spcclRemoteError:
      return "remote process exited or there was a network error, or a peer's stream was malformed";
    default:
      return "unknown result code";
  }
}

const char* spcclGetLastError(spcclComm_t) { return lastError(); }

namespace {
// Once per process, at its first communicator, on that communicator's rank
// 0: SPCCL_* variables the library does not know (a typo is otherwise
// ignored in silence).
void warnUnknownVariables(int rank) {
  static std::atomic<bool> first{true};
  if (!first.exchange(false) || rank != 0) return;
  for (const std::string& name : unknownVariables(environ))
    SPCCL_WARN(rank, "%s is not an spccl variable and is ignored (docs/ENV.md lists them)", name.c_str());
}
}  // namespace

spcclResult_t spcclCommInitMPI(spcclComm_t* comm, MPI_Comm mpiComm) {
  return guarded([&]() -> Status {
    if (comm == nullptr) return invalidArgument("comm (output pointer) is NULL");
    *comm = nullptr;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return invalidUsage("MPI is not initialized: call MPI_Init before spcclCommInitMPI");
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return invalidUsage("MPI has been finalized: call spcclCommInitMPI before MPI_Finalize");
    if (mpiComm == MPI_COMM_NULL) return invalidArgument("mpiComm is MPI_COMM_NULL");
    // An intercommunicator's collectives combine one group into the other, not
    // all ranks (and it is one on every rank: refusing here leaves none waiting).
    int inter = 0;
    SPCCL_MPI_CHECK(MPI_Comm_test_inter(mpiComm, &inter));
    if (inter)
      return invalidArgument("mpiComm is an intercommunicator: pass an intracommunicator (MPI_Intercomm_merge "
                             "makes one of its two groups)");
    Params params;
    Status envStatus = loadParamsFromEnv(&params);
    setLogLevel(envStatus.isOk() ? params.debug : LogLevel::kWarn);
    if (envStatus.isOk()) envStatus = applyHostSimd(params);
    // Agree on success before creating anything: a rank with a bad env must
    // not leave the others inside the communicator split.
    int me = 0, firstBad = 0;
    SPCCL_MPI_CHECK(MPI_Comm_rank(mpiComm, &me));
    warnUnknownVariables(me);  // also when the environment is invalid
    const int mine = envStatus.isOk() ? INT_MAX : me;
    SPCCL_MPI_CHECK(MPI_Allreduce(&mine, &firstBad, 1, MPI_INT, MPI_MIN, mpiComm));
    if (!envStatus.isOk()) return envStatus;
    if (firstBad != INT_MAX)
      return invalidUsage(formatString("rank %d rejected its SPCCL_* environment (see its log)", firstBad));
    auto c = std::make_unique<spcclComm>();
    std::unique_ptr<MpiTransport> t;
    SPCCL_RETURN_IF_ERROR(MpiTransport::create(mpiComm, &t));
    c->rank = t->rank();
    c->ranks = t->size();
    c->transport = std::move(t);
    c->params = params;
    std::string modelOrigin;  // collective: SPCCL_CALIBRATE / SPCCL_NET_* / SPCCL_AUTO_TRIALS (src/tuner.h)
    SPCCL_RETURN_IF_ERROR(
        resolveCostModel(*c->transport, params, &c->costModel, &modelOrigin, &c->params.autoTrials,
                         &c->modelSettings));
    c->integrity = Integrity{params.checksum, params.testCorruptStreams};
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      c->id = registry().nextId++;
      registry().comms[c.get()] = c->id;
    }
    SPCCL_INFO(c->rank, "spccl %s, MPI transport, %d ranks, host SIMD %s", SPCCL_VERSION_STRING, c->ranks,
               host::hostSimdName(host::hostSimd()));
    SPCCL_INFO(c->rank, "cost model (%s): %s", modelOrigin.c_str(), describeCostModel(c->costModel).c_str());
    SPCCL_INFO(c->rank, "params: %s", describeParams(params).c_str());
    *comm = c.release();
    return Status::ok();
  }, worldRank());
}

#if SPCCL_WITH_NCCL
spcclResult_t spcclCommInitNccl(spcclComm_t* comm, ncclComm_t nccl) {
  return guarded([&]() -> Status {
    if (comm == nullptr) return invalidArgument("comm (output pointer) is NULL");
    *comm = nullptr;
    if (nccl == nullptr) return invalidArgument("nccl is NULL: pass an initialised ncclComm_t");
    Params params;
    Status envStatus = loadParamsFromEnv(&params);
    setLogLevel(envStatus.isOk() ? params.debug : LogLevel::kWarn);
    if (envStatus.isOk()) envStatus = applyHostSimd(params);
    if (envStatus.isOk() && params.valueType == core::ValueType::kFloat8e4m3)
      envStatus = invalidArgument("SPCCL_VALUE_TYPE=fp8: the fp8 wire type is implemented on the host (MPI) path "
                                  "only; NCCL communicators carry fp32, fp16 or bf16 (docs/GPU.md)");
    auto c = std::make_unique<spcclComm>();
    c->params = params;
    c->integrity = Integrity{params.checksum, params.testCorruptStreams};
    // Collective: every rank learns whether any rank's environment was bad.
    const Status st = gpu::initComm(c.get(), nccl, envStatus.isOk());
    if (!envStatus.isOk()) return envStatus;
    SPCCL_RETURN_IF_ERROR(st);
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      c->id = registry().nextId++;
      registry().comms[c.get()] = c->id;
    }
    SPCCL_INFO(c->rank, "spccl %s, NCCL transport, %d ranks, device mode %s, host SIMD %s", SPCCL_VERSION_STRING,
               c->ranks, params.deviceMode == kDeviceModeFixed ? "fixed" : "exact",
               host::hostSimdName(host::hostSimd()));
    SPCCL_INFO(c->rank, "cost model (defaults, SPCCL_NET_* over them; no SPCCL_CALIBRATE on NCCL): %s",
               describeCostModel(c->costModel).c_str());
    SPCCL_INFO(c->rank, "params: %s", describeParams(params).c_str());
    warnUnknownVariables(c->rank);
    *comm = c.release();
    return Status::ok();
  });
}
#endif

spcclResult_t spcclCommCount(const spcclComm_t comm, int* count) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    if (count == nullptr) return invalidArgument("count is NULL");
    *count = comm->ranks;
    return Status::ok();
  });
}

spcclResult_t spcclCommUserRank(const spcclComm_t comm, int* rank) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    if (rank == nullptr) return invalidArgument("rank is NULL");
    *rank = comm->rank;
    return Status::ok();
  });
}

spcclResult_t spcclCommGetStats(const spcclComm_t comm, spcclStats_t* stats) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    if (stats == nullptr) return invalidArgument("stats is NULL");
    *stats = comm->stats;
    return Status::ok();
  });
}

spcclResult_t spcclCommDestroy(spcclComm_t comm) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().comms.erase(comm);
      for (auto& [key, c] : comm->implicitCompressors) registry().compressors.erase(c.get());
    }
    if (comm->params.profile) {
      const std::string rows = describeRowsProfile(comm->rowsProfile);
      // Asked for by SPCCL_PROFILE: printed whatever SPCCL_DEBUG says.
      if (!rows.empty()) logMessage(LogLevel::kInfo, comm->rank, "%s", rows.c_str());
    }
    delete comm;  // explicit compressors stay valid to destroy; using them is spcclInvalidUsage
    return Status::ok();
  });
}

spcclResult_t spcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                             spcclRedOp_t op, spcclComm_t comm, void* stream) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, op));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, count, dataTypeSize(datatype), hostStream(comm, stream)));
    const Params& p = comm->params;
    if (takesExactPath(*comm, count, datatype, op, p.allreduceDensity) || count < p.minCompressCount) {
      spcclStats_t call{};
      return runExactAllReduce(comm, sendbuff, recvbuff, count, datatype, op, stream, &call);
    }
    auto key = std::make_tuple(recvbuff, count, static_cast<int>(datatype));
    auto it = comm->implicitCompressors.find(key);
    if (it == comm->implicitCompressors.end()) {
      std::unique_ptr<spcclCompressor> c;
      SPCCL_RETURN_IF_ERROR(makeCompressor(comm, count, datatype, configFromParams(p), true, &c));
      registerCompressor(c.get());
      it = comm->implicitCompressors.emplace(key, std::move(c)).first;
      SPCCL_INFO(comm->rank, "implicit compressor for buffer %p, count %zu, %s", recvbuff, count,
                 dataTypeName(datatype));
      warnIfImplicitCompressorsPileUp(*comm);
    }
    return runCompressed(it->second.get(), sendbuff, recvbuff, op, stream);
  }, comm && commAlive(comm) ? comm->rank : -1);
}

spcclResult_t spcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                            spcclComm_t comm, void* stream) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, spcclSum));
    SPCCL_RETURN_IF_ERROR(checkSizes(count, static_cast<size_t>(comm->ranks), dataTypeSize(datatype), "count * ranks"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, count, dataTypeSize(datatype), hostStream(comm, stream)));
    const Params& p = comm->params;
    const uint64_t rowLen = p.alltoallRowLen;
    const bool rows = !p.disable && p.alltoallDensity < 1.0f && rowLen > 0 && count > 0 && count % rowLen == 0 &&
                      isSupportedRowType(datatype);
#if SPCCL_WITH_NCCL
    if (comm->onDevice && !rows) {
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
      ++comm->seq;
      const size_t bytes = count * dataTypeSize(datatype);
      return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * bytes,
                       gpu::allToAll(comm, sendbuff, recvbuff, bytes, static_cast<cudaStream_t>(stream)));
    }
#endif
    if (rows) {  // (in place too: every row is selected and gathered before any is written)
      spcclStats_t call{};
      return counted(comm, runRowsForward(comm, sendbuff, recvbuff, count / rowLen, rowLen, datatype,
                                          p.alltoallDensity, nullptr, stream, &call), call);
    }
    SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, true, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    SPCCL_RETURN_IF_ERROR(agreeOnCall(*comm->transport,
                                      exactCollectiveDescriptor(Collective::kAlltoAll, comm->seq++, count, datatype),
                                      &comm->descriptors));
    const size_t block = count * dataTypeSize(datatype);
    return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * block,
                     count ? comm->transport->allToAll(sendbuff, block, recvbuff) : Status::ok());
  }, comm && commAlive(comm) ? comm->rank : -1);
}

spcclResult_t spcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, spcclDataType_t datatype,
                             spcclComm_t comm, void* stream) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, spcclSum));
    SPCCL_RETURN_IF_ERROR(
        checkSizes(sendcount, static_cast<size_t>(comm->ranks), dataTypeSize(datatype), "sendcount * ranks"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, sendcount, dataTypeSize(datatype), hostStream(comm, stream),
                                       "sendbuff", "recvbuff", "sendcount"));
    const Params& p = comm->params;
    const bool topk = !p.disable && p.allgatherDensity < 1.0f && sendcount > 0 && isCompressibleType(datatype);
#if SPCCL_WITH_NCCL
    if (comm->onDevice)
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    if (comm->onDevice && topk) {
      if (sendcount > UINT32_MAX)
        return invalidArgument(formatString("sendcount=%zu exceeds the 32-bit index encoding", sendcount));
      spcclStats_t call{};
      return counted(comm, gpu::allGatherTopK(comm, sendbuff, recvbuff, sendcount, datatype, p.allgatherDensity,
                                              static_cast<cudaStream_t>(stream), &call), call);
    }
    if (comm->onDevice) {
      ++comm->seq;
      const size_t bytes = sendcount * dataTypeSize(datatype);
      return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * bytes,
                       gpu::allGather(comm, sendbuff, recvbuff, bytes, static_cast<cudaStream_t>(stream)));
    }
#endif
    SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, !topk, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    if (topk) {
      if (sendcount > UINT32_MAX)
        return invalidArgument(formatString("sendcount=%zu exceeds the 32-bit index encoding", sendcount));
      spcclStats_t call{};
      return counted(comm, allGatherTopK(*comm, sendbuff, recvbuff, sendcount, datatype, p.allgatherDensity, &call),
                     call);
    }
    SPCCL_RETURN_IF_ERROR(agreeOnCall(*comm->transport,
                                      exactCollectiveDescriptor(Collective::kAllGather, comm->seq++, sendcount, datatype),
                                      &comm->descriptors));
    const size_t block = sendcount * dataTypeSize(datatype);
    return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * block,
                     sendcount ? comm->transport->allGather(sendbuff, block, recvbuff) : Status::ok());
  }, comm && commAlive(comm) ? comm->rank : -1);
}

spcclResult_t spcclAlltoAllRowsCompressed(const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                                          spcclDataType_t datatype, float density, spcclSelection_t* selection,
                                          spcclComm_t comm, void* stream) {
  return guarded([&]() -> Status {
    if (selection) *selection = nullptr;
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (!isSupportedRowType(datatype))
      return invalidArgument(formatString("datatype=%s: row compression takes float32, float16 or bfloat16",
                                          dataTypeName(datatype)));
    if (rowLen == 0) return invalidArgument("rowLen=0: rows must have at least one element");
    if (rowLen > UINT32_MAX) return invalidArgument(formatString("rowLen=%zu exceeds 2^32-1", rowLen));
    if (!(density > 0.0f && density <= 1.0f))
      return invalidArgument(formatString("density=%g must be in (0, 1]", static_cast<double>(density)));
    SPCCL_RETURN_IF_ERROR(checkSizes(rowsPerPeer, rowLen, static_cast<size_t>(comm->ranks) * dataTypeSize(datatype),
                                     "rowsPerPeer * rowLen * (ranks x element size)"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, rowsPerPeer * rowLen, dataTypeSize(datatype),
                                       hostStream(comm, stream), "sendbuff", "recvbuff", "rowsPerPeer*rowLen"));
    if (sendbuff == recvbuff && rowsPerPeer > 0)
      return invalidArgument("sendbuff == recvbuff: the rows alltoall is not in place");
    std::unique_ptr<spcclSelection> sel;
    if (selection) {
      sel = std::make_unique<spcclSelection>();
      sel->comm = comm;
      sel->commId = comm->id;
    }
    spcclStats_t call{};
    SPCCL_RETURN_IF_ERROR(counted(comm, runRowsForward(comm, sendbuff, recvbuff, rowsPerPeer, rowLen, datatype,
                                                       density, sel.get(), stream, &call), call));
    if (selection) {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().selections[sel.get()] = true;
      *selection = sel.release();
    }
    return Status::ok();
  }, comm && commAlive(comm) ? comm->rank : -1);
}

spcclResult_t spcclAlltoAllRowsBackward(const void* gradSendbuff, void* gradRecvbuff, spcclSelection_t selection,
                                        void* stream) {
  int rank = -1;
  return guarded([&]() -> Status {
    if (selection == nullptr) return invalidArgument("selection is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().selections.count(selection) == 0)
        return invalidUsage(formatString("selection=%p is not a live selection (destroyed, or never created)",
                                         static_cast<const void*>(selection)));
      auto it = registry().comms.find(selection->comm);
      if (it == registry().comms.end() || it->second != selection->commId)
        return invalidUsage(formatString("selection=%p: its communicator has been destroyed",
                                         static_cast<const void*>(selection)));
    }
    rank = selection->comm->rank;
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*selection->comm));
    if (selection->used)
      return invalidUsage(formatString("selection=%p has already served a backward (a selection serves one)",
                                       static_cast<const void*>(selection)));
    const size_t elems = selection->rowsPerPeer * selection->rowLen;
    SPCCL_RETURN_IF_ERROR(checkBuffers(gradSendbuff, gradRecvbuff, elems, dataTypeSize(selection->dataType),
                                       hostStream(selection->comm, stream), "gradSendbuff", "gradRecvbuff",
                                       "the selection's rowsPerPeer*rowLen"));
    if (gradSendbuff == gradRecvbuff && elems > 0)
      return invalidArgument("gradSendbuff == gradRecvbuff: the rows backward is not in place");
    spcclStats_t call{};  // the backward marks the selection used once every rank agreed on the call
    return counted(selection->comm, runRowsBackward(selection, gradSendbuff, gradRecvbuff, stream, &call), call);
  }, rank);
}

spcclResult_t spcclSelectionDestroy(spcclSelection_t selection) {
  return guarded([&]() -> Status {
    if (selection == nullptr) return invalidArgument("selection is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().selections.erase(selection) == 0)
        return invalidUsage(formatString("selection=%p is not a live selection (destroyed twice, or never created)",
                                         static_cast<const void*>(selection)));
    }
    delete selection;
    return Status::ok();
  });
}

spcclResult_t spcclAllReduceRowSparse(const int64_t* rowIds, const void* rows, size_t nrows, size_t rowLen,
                                      spcclDataType_t datatype, int64_t* outRowIds, void* outRows, size_t outCapacity,
                                      size_t* outNrows, spcclComm_t comm, void* stream) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    if (outNrows == nullptr) return invalidArgument("outNrows is NULL");
    *outNrows = 0;
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (!isCompressibleType(datatype) && datatype != spcclFloat64)
      return invalidArgument(formatString("datatype=%s: rows must be float32, float64, float16 or bfloat16",
                                          dataTypeName(datatype)));
    if (rowLen == 0) return invalidArgument("rowLen=0: rows must have at least one element");
    SPCCL_RETURN_IF_ERROR(checkSizes(nrows, rowLen, 8, "nrows * rowLen"));
    SPCCL_RETURN_IF_ERROR(checkSizes(outCapacity, rowLen, 8, "outCapacity * rowLen"));
    if (nrows > 0 && rowIds == nullptr) return invalidArgument(formatString("rowIds is NULL with nrows=%zu", nrows));
    if (nrows > 0 && rows == nullptr) return invalidArgument(formatString("rows is NULL with nrows=%zu", nrows));
    if (outCapacity > 0 && outRowIds == nullptr)
      return invalidArgument(formatString("outRowIds is NULL with outCapacity=%zu", outCapacity));
    if (outCapacity > 0 && outRows == nullptr)
      return invalidArgument(formatString("outRows is NULL with outCapacity=%zu", outCapacity));
    spcclStats_t call{};
#if SPCCL_WITH_NCCL
    if (comm->onDevice) {
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(
          comm, {{"rowIds", rowIds}, {"rows", rows}, {"outRowIds", outRowIds}, {"outRows", outRows}}));
      return counted(comm, gpu::rowSparse(comm, rowIds, rows, nrows, rowLen, datatype, outRowIds, outRows, outCapacity,
                                          outNrows, static_cast<cudaStream_t>(stream), &call), call);
    }
#endif
    if (stream != nullptr)
      return invalidArgument(formatString("stream=%p must be NULL on an MPI communicator (host buffers)", stream));
    SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, false,
                                          {{"rowIds", rowIds}, {"rows", rows}, {"outRowIds", outRowIds},
                                           {"outRows", outRows}}));
    return counted(comm, allReduceRowSparse(*comm, rowIds, rows, nrows, rowLen, datatype, outRowIds, outRows,
                                            outCapacity, outNrows, &call), call);
  }, comm && commAlive(comm) ? comm->rank : -1);
}

// The name in parentheses: spccl.h also defines spcclCompressConfigInit as a
// macro that calls spcclCompressConfigInitVersion with the caller's layout.
// The function itself is what programs built before that macro call, with a
// version 1 or 2 struct of 40 bytes: it writes version 2's layout, never
// more, so the struct's growth (version 3) cannot overrun them.
spcclResult_t(spcclCompressConfigInit)(spcclCompressConfig_t* config) {
  static_assert(offsetof(spcclCompressConfig_t, thresholdMinFraction) == 40, "version 2's layout is 40 bytes");
  return spcclCompressConfigInitVersion(config, offsetof(spcclCompressConfig_t, thresholdMinFraction), 2);
}

spcclResult_t spcclCompressConfigInitVersion(spcclCompressConfig_t* config, size_t size, unsigned int version) {
  return guarded([&]() -> Status {
    if (config == nullptr) return invalidArgument("config is NULL");
    const size_t known = configLayoutBytes(version);
    if (known == 0)
      return invalidArgument(formatString("config version %u is newer than this library's (%d): the program was "
                                          "built against a later spccl.h",
                                          version, SPCCL_COMPRESS_CONFIG_VERSION));
    if (size < known)
      return invalidArgument(formatString("config size %zu is smaller than version %u's %zu bytes", size, version,
                                          known));
    Params p;
    SPCCL_RETURN_IF_ERROR(loadParamsFromEnv(&p));
    spcclCompressConfig_t full = configFromParams(p);
    full.size = size;
    full.version = version;
    // Only the caller's fields: its struct may be shorter than this library's.
    std::memcpy(config, &full, known);
    return Status::ok();
  });
}

spcclResult_t spcclCompressorCreate(spcclComm_t comm, size_t count, spcclDataType_t datatype,
                                    const spcclCompressConfig_t* config, spcclCompressor_t* out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return invalidArgument("out is NULL");
    *out = nullptr;
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (count > SIZE_MAX / 16) return invalidArgument(formatString("count=%zu is too large", count));
    if (count > UINT32_MAX)
      return invalidArgument(formatString("count=%zu exceeds the 32-bit index encoding (at most %u)", count, UINT32_MAX));
    spcclCompressConfig_t cfg;
    SPCCL_RETURN_IF_ERROR(readConfig(config, comm->params, &cfg));
    SPCCL_RETURN_IF_ERROR(checkConfig(cfg));
    if (comm->onDevice && cfg.wireValueType == spcclFloat8e4m3)
      return invalidUsage("config.wireValueType=spcclFloat8e4m3: the fp8 wire type is implemented on the host (MPI) "
                          "path only; a compressor of an NCCL communicator carries fp32, fp16 or bf16 (docs/GPU.md)");
    std::unique_ptr<spcclCompressor> c;
    SPCCL_RETURN_IF_ERROR(makeCompressor(comm, count, datatype, cfg, false, &c));
    registerCompressor(c.get());
    *out = c.release();
    return Status::ok();
  });
}

spcclResult_t spcclAllReduceCompressed(const void* sendbuff, void* recvbuff, spcclRedOp_t op,
                                       spcclCompressor_t c, void* stream) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*c->comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(c->dataType, op));
    SPCCL_RETURN_IF_ERROR(
        checkBuffers(sendbuff, recvbuff, c->count, dataTypeSize(c->dataType), hostStream(c->comm, stream)));
    spcclComm& comm = *c->comm;
    if (takesExactPath(comm, c->count, c->dataType, op, c->config.density)) {
      // Exact: the residual (if any) is not involved; it waits for the next compressed call.
      spcclStats_t call{};
      SPCCL_RETURN_IF_ERROR(runExactAllReduce(&comm, sendbuff, recvbuff, c->count, c->dataType, op, stream, &call));
      addStats(&c->stats, call);
      return Status::ok();
    }
    return runCompressed(c, sendbuff, recvbuff, op, stream);
  }, c && checkCompressor(c).isOk() ? c->comm->rank : -1);
}

spcclResult_t spcclCompressorGetStats(const spcclCompressor_t c, spcclStats_t* stats) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    if (stats == nullptr) return invalidArgument("stats is NULL");
    *stats = c->stats;
    return Status::ok();
  });
}

spcclResult_t spcclCompressorGetResidual(const spcclCompressor_t c, float* residual, size_t count) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    if (count != c->count)
      return invalidArgument(formatString("count=%zu differs from the compressor's count %zu", count, c->count));
    if (residual == nullptr && count > 0) return invalidArgument(formatString("residual is NULL with count=%zu", count));
#if SPCCL_WITH_NCCL
    if (c->comm->onDevice) return gpu::copyResidual(c, residual);
#endif
    if (count == 0) return Status::ok();  // residual may be NULL: no 0-byte memcpy/memset on it
    if (c->config.errorFeedback && !c->residual[c->current].empty())
      std::memcpy(residual, c->residual[c->current].data(), count * sizeof(float));
    else  // no error feedback, or no compressed call yet: nothing held back
      std::memset(residual, 0, count * sizeof(float));
    return Status::ok();
  });
}

spcclResult_t spcclCompressorDestroy(spcclCompressor_t c) {
  return guarded([&]() -> Status {
    if (c == nullptr) return invalidArgument("compressor is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().compressors.count(c) == 0)
        return invalidUsage(formatString("compressor=%p is not a live compressor (destroyed twice, or never created)",
                                         static_cast<const void*>(c)));
      if (c->implicit)
        return invalidUsage(formatString("compressor=%p is implicit: it belongs to its communicator",
                                         static_cast<const void*>(c)));
      registry().compressors.erase(c);
    }
    delete c;
    return Status::ok();
  });
}

}  // extern "C"

namespace spccl {

const char* dataTypeName(int t) {
  static const char* kNames[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
                                 "float64", "bfloat16", "float8e4m3"};
  static_assert(sizeof kNames / sizeof kNames[0] == spcclNumTypes, "a name per spcclDataType_t");
  return isKnownDataType(t) ? kNames[t] : "invalid";
}

const char* redOpName(int op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg"};
  return isValidRedOp(op) ? kNames[op] : "invalid";
}

}  // namespace spccl
