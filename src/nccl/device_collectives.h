// The collectives of a communicator made by spcclCommInitNccl: device
// buffers, the caller's cudaStream_t, NCCL underneath, spccl's CUDA kernels
// (kernels/cuda) for selection, packing and accumulation. Built only with
// SPCCL_WITH_NCCL; src/api.cc validates arguments and dispatches here.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "include/spccl.h"
#include "src/status.h"

struct spcclComm;
struct spcclCompressor;

namespace spccl::gpu {

// Fills comm's transport (NcclTransport over `nccl`, not owned) and device
// state. Collective over nccl's ranks: agrees on envOk (a rank whose SPCCL_*
// environment failed to parse makes every rank fail) before returning.
Status initComm(spcclComm* comm, ncclComm_t nccl, bool envOk);

// Reports (and clears) an error that an earlier fixed-capacity call recorded
// on the device: a malformed peer stream or mismatched call.
Status takeAsyncError(spcclComm* comm);

Status exactAllReduce(spcclComm* comm, const void* send, void* recv, size_t count, spcclDataType_t type,
                      spcclRedOp_t op, cudaStream_t stream, spcclStats_t* call);
Status compressedAllReduce(spcclCompressor* c, const void* send, void* recv, spcclRedOp_t op, cudaStream_t stream);
Status allToAll(spcclComm* comm, const void* send, void* recv, size_t bytesPerPeer, cudaStream_t stream);
Status allGather(spcclComm* comm, const void* send, void* recv, size_t bytesPerRank, cudaStream_t stream);

// The compressor's residual (count fp32) into `out`, host or device memory;
// waits for the device first.
Status copyResidual(const spcclCompressor* c, float* out);

}  // namespace spccl::gpu
