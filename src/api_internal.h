// What the C entry points (src/api_*.cc) share: the registry of live
// handles, the argument checks, the host-or-device dispatch, and the guard
// that turns a Status (or an exception) into an spcclResult_t plus this
// thread's last-error message.
#pragma once

#include <atomic>
#include <climits>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>

#include "collectives/other_collectives.h"
#include "include/spccl.h"
#include "include/spccl_mpi.h"
#include "kernels/core/types.h"
#include "kernels/host/host_kernels.h"
#include "src/comm.h"
#include "src/log.h"
#include "transport/device.h"
#include "transport/mpi_transport.h"
#if SPCCL_WITH_NCCL
#include "include/spccl_nccl.h"
#include "src/nccl/device_collectives.h"
#endif

namespace spccl::api {

// Live handles. A handle not in here (NULL, destroyed, garbage) is rejected
// with a clear error instead of being dereferenced.
struct Registry {
  std::mutex mu;
  std::unordered_map<const spcclComm*, uint64_t> comms;  // -> comm id
  std::unordered_map<const spcclCompressor*, bool> compressors;
  std::unordered_map<const spcclSelection*, bool> selections;
  uint64_t nextId = 1;
};
Registry& registry();
bool commAlive(const spcclComm* c);
spcclResult_t finish(const Status& st, int rank = -1);
// For log lines before a communicator exists.
int worldRank();
// SPCCL_HOST_SIMD, applied at communicator creation (process-wide, as the
// host kernels' choice is).
Status applyHostSimd(const Params& p);
Status checkComm(const spcclComm* comm);
Status checkCompressor(const spcclCompressor* c);
// A call that communicates over MPI: after MPI_Finalize any MPI call aborts
// the process (Open MPI), so it is refused here instead.
Status checkMpiLive(const spcclComm& comm);
// The names are the caller's argument names, for the messages.
Status checkBuffers(const void* sendbuff, const void* recvbuff, size_t count, size_t elemSize, void* stream,
                    const char* sendName = "sendbuff", const char* recvName = "recvbuff",
                    const char* countName = "count");
Status checkDataType(int datatype);
Status checkTypeAndOp(int datatype, int op);
// Every collective other than the allreduce adds its call to the
// communicator's counters; the last* fields stay the last allreduce's (spccl.h).
Status counted(spcclComm* comm, const Status& st, const spcclStats_t& call);
Status exactCall(spcclComm* comm, size_t denseBytes, const Status& st);
bool isSupportedRowType(spcclDataType_t t);
// The stream as checkBuffers sees it: NCCL communicators take any stream,
// MPI ones only NULL.
void* hostStream(const spcclComm* comm, void* stream);
// MPI communicators work on host memory: a CUDA device buffer is rejected by
// name, unless the call is an exact one (handed to MPI as is) and the MPI is
// CUDA-aware. Managed memory is host-accessible and passes.
Status checkHostMemory(const spcclComm& comm, bool exactPath,
                       std::initializer_list<std::pair<const char*, const void*>> buffers);
// One compressed allreduce through c, on the device or the host.
Status runCompressed(spcclCompressor* c, const void* sendbuff, void* recvbuff, spcclRedOp_t op, void* stream);
// DCT-MP rows, on the device or the host.
Status runRowsForward(spcclComm* comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                      spcclDataType_t type, float density, spcclSelection* sel, void* stream, spcclStats_t* call);
Status runRowsBackward(spcclSelection* sel, const void* gradSendbuff, void* gradRecvbuff, void* stream,
                       spcclStats_t* call);
// The exact allreduce of comm, on the device or the host.
Status runExactAllReduce(spcclComm* comm, const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                         spcclRedOp_t op, void* stream, spcclStats_t* call);
Status checkSizes(size_t a, size_t b, size_t c, const char* what);
void registerCompressor(spcclCompressor* c);
Status makeCompressor(spcclComm* comm, size_t count, spcclDataType_t type, const spcclCompressConfig_t& config,
                      bool implicit, std::unique_ptr<spcclCompressor>* out);
// Above 2^32 - 1 elements nothing compresses: the streams and the threshold
// select count and index with 32 bits (spcclCompressorCreate refuses such a
// count), so the drop-in's larger buffers go to the exact path.
bool takesExactPath(const spcclComm& comm, size_t count, spcclDataType_t type, spcclRedOp_t op, float density);
// The drop-in keeps one compressor, with its residual, per (recvbuff, count,
// datatype) for the communicator's life. Stable gradient buffers make a handful;
// buffers that move between steps make one more each step, whose residual is
// never sent again. Warned at 64 and each doubling after (no eviction: a live
// residual dropped would break conservation silently).
void warnIfImplicitCompressorsPileUp(const spcclComm& comm);

// rank is read after f has run: a call that learns its communicator inside f
// (spcclAlltoAllRowsBackward, from its selection) passes the variable it sets.
// The lambda comes last, so its body keeps the statement's indentation.
template <typename F>
spcclResult_t guarded(const int& rank, F&& f) {
  try {
    const Status st = f();  // before rank is read
    return finish(st, rank);
  } catch (const std::bad_alloc&) {
    return finish(systemError("out of host memory"), rank);
  } catch (const std::exception& e) {
    return finish(internalError(std::string("unexpected exception: ") + e.what()), rank);
  }
}
// A call with no communicator to name in its log lines.
template <typename F>
spcclResult_t guarded(F&& f) {
  return guarded(-1, std::forward<F>(f));
}

// SPCCL_* variables in the environment that the parameter table does not know.
void warnUnknownVariables(int rank);

}  // namespace spccl::api
