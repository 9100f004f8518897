// The collectives of a communicator made by spcclCommInitNccl: device
// buffers, the caller's cudaStream_t, NCCL underneath, spccl's CUDA kernels
// (kernels/cuda) for selection, packing and accumulation. Built only with
// SPCCL_WITH_NCCL; src/api_*.cc validate arguments and dispatches here.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "include/spccl.h"
#include "kernels/core/status.h"

struct spcclComm;
struct spcclCompressor;
struct spcclSelection;

namespace spccl::gpu {

// Fills comm's transport (NcclTransport over `nccl`, not owned) and device
// state. Collective over nccl's ranks: agrees on envOk (a rank whose SPCCL_*
// environment failed to parse makes every rank fail) before returning.
Status initComm(spcclComm* comm, ncclComm_t nccl, bool envOk);

// NCCL communicators work on device memory: a host buffer the device cannot
// read (pageable memory, neither allocated nor registered with CUDA, on a
// system without pageable memory access) is spcclInvalidUsage naming the
// argument, as a device buffer on an MPI communicator is, instead of a
// kernel faulting on it (which poisons the CUDA context). Managed, pinned
// and registered memory pass.
Status checkDeviceMemory(spcclComm* comm, std::initializer_list<std::pair<const char*, const void*>> buffers);

Status exactAllReduce(spcclComm* comm, const void* send, void* recv, size_t count, spcclDataType_t type,
                      spcclRedOp_t op, cudaStream_t stream, spcclStats_t* call);
Status compressedAllReduce(spcclCompressor* c, const void* send, void* recv, spcclRedOp_t op, cudaStream_t stream);
Status allToAll(spcclComm* comm, const void* send, void* recv, size_t bytesPerPeer, cudaStream_t stream);
Status allGather(spcclComm* comm, const void* send, void* recv, size_t bytesPerRank, cudaStream_t stream);

// DCT-MP rows alltoall (the host path's rules, collectives/alltoall_rows.cc).
// sel may be nullptr (nothing kept for a backward).
Status rowsForward(spcclComm* comm, const void* send, void* recv, size_t rowsPerPeer, size_t rowLen,
                   spcclDataType_t type, float density, spcclSelection* sel, cudaStream_t stream, spcclStats_t* call);
Status rowsBackward(spcclComm* comm, const void* gradSend, void* gradRecv, spcclSelection& sel, cudaStream_t stream,
                    spcclStats_t* call);

// Sparsified allgather (SPCCL_ALLGATHER_DENSITY): the host path's
// (collectives/allgather_topk.cc) on the CUDA executor.
Status allGatherTopK(spcclComm* comm, const void* send, void* recv, size_t n, spcclDataType_t type, float density,
                     cudaStream_t stream, spcclStats_t* call);

// Row-sparse allreduce: the host path's (collectives/rowsparse_allreduce.cc)
// on the CUDA executor, with the allgather algorithm.
Status rowSparse(spcclComm* comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                 spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                 cudaStream_t stream, spcclStats_t* call);

// The compressor's residual (count fp32) into `out`, host or device memory;
// waits for the device first.
Status copyResidual(const spcclCompressor* c, float* out);

}  // namespace spccl::gpu
