/* spccl over NCCL: collectives on device buffers.
 *
 * A communicator made here runs every spccl collective on CUDA device
 * memory, enqueued on the cudaStream_t passed as `stream` (NULL: the legacy
 * default stream), with NCCL moving the bytes and the selection, packing and
 * unpacking done by spccl's CUDA kernels. See docs/GPU.md for the two modes
 * of the compressed allreduce (SPCCL_CAPACITY_MODE=exact|fixed).
 *
 * Needs a build with SPCCL_WITH_NCCL (the default where CUDA and NCCL are
 * found); the header includes <nccl.h>, so compile with NCCL's and CUDA's
 * include directories. */
#ifndef SPCCL_NCCL_H_
#define SPCCL_NCCL_H_

#include <nccl.h>

#include "spccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wraps a communicator the application already has. Collective over the
 * ranks of `nccl`; call it with the CUDA device of `nccl` current. The
 * ncclComm_t stays the caller's: spcclCommDestroy does not destroy it, and
 * it must outlive the spccl communicator. A non-blocking communicator
 * (ncclConfig_t.blocking = 0, even one still initialising) works too: where
 * NCCL answers ncclInProgress, spccl polls ncclCommGetAsyncError until the
 * operation is enqueued or has failed, so its calls return as they would on
 * a blocking communicator. SPCCL_VALUE_TYPE=fp8 and SPCCL_CHECKSUM=1 have
 * no device kernels yet: with either set it fails with spcclInvalidArgument
 * on every rank (docs/GPU.md). */
SPCCL_API spcclResult_t spcclCommInitNccl(spcclComm_t* comm, ncclComm_t nccl);

#ifdef __cplusplus
}
#endif

#endif /* SPCCL_NCCL_H_ */
