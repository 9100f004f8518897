// The C entry points: version and error strings, communicator creation
// (MPI and NCCL), its queries and its destruction.
#include <unistd.h>  // environ

#include <atomic>
#include <string>

#include "kernels/host/host_executor.h"
#include "src/api_internal.h"

using namespace spccl;
using namespace spccl::api;

namespace spccl::api {

// Once per process, at its first communicator, on that communicator's rank
// 0: SPCCL_* variables the library does not know (a typo is otherwise
// ignored in silence).
void warnUnknownVariables(int rank) {
  static std::atomic<bool> first{true};
  if (!first.exchange(false) || rank != 0) return;
  for (const std::string& name : unknownVariables(environ))
    SPCCL_WARN(rank, "%s is not an spccl variable and is ignored (docs/ENV.md lists them)", name.c_str());
}

}  // namespace spccl::api

extern "C" {

spcclResult_t spcclGetVersion(int* version) {
  if (version == nullptr) return finish(invalidArgument("version is NULL"));
  *version = SPCCL_VERSION_CODE;
  return spcclSuccess;
}

const char* spcclGetErrorString(spcclResult_t result) { return resultString(result); }

const char* spcclGetLastError(spcclComm_t) { return lastError(); }

spcclResult_t spcclCommInitMPI(spcclComm_t* comm, MPI_Comm mpiComm) {
  return guarded(worldRank(), [&]() -> Status {
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
      return invalidArgument(
          "mpiComm is an intercommunicator: pass an intracommunicator (MPI_Intercomm_merge "
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
    c->executor = std::make_shared<host::HostExecutor>(params.guardExecutor);
    c->params = params;
    std::string modelOrigin;  // collective: SPCCL_CALIBRATE / SPCCL_NET_* / SPCCL_AUTO_TRIALS (src/tuner.h)
    SPCCL_RETURN_IF_ERROR(
        resolveCostModel(*c->transport, params, &c->costModel, &modelOrigin, &c->params.autoTrials, &c->modelSettings));
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
  });
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
    SPCCL_INFO(c->rank, "spccl %s, NCCL transport, %d ranks, capacity mode %s, host SIMD %s", SPCCL_VERSION_STRING,
               c->ranks, params.capacityMode == kCapacityModeFixed ? "fixed" : "exact",
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

}  // extern "C"
