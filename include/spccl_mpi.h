/* spccl communicators over MPI (host buffers). */
#ifndef SPCCL_MPI_H_
#define SPCCL_MPI_H_

/* Open MPI's deprecated C++ bindings do not compile warning-free; spccl uses
 * only the C API. Define OMPI_SKIP_MPICXX yourself before including mpi.h
 * first if your code includes it earlier. */
#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "spccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Collective over mpiComm. Works on a private copy of the communicator (same
 * group and order, made with MPI_Comm_split so the program's attributes and
 * their callbacks are not copied; spccl traffic never matches the
 * application's messages) and sets MPI_ERRORS_RETURN on the copy,
 * so MPI failures come back as result codes. Reads and validates the SPCCL_*
 * environment: an invalid value fails here with a message naming the variable.
 * mpiComm must be an intracommunicator (an intercommunicator is
 * spcclInvalidArgument on every rank: its collectives combine one group into
 * the other).
 */
SPCCL_API spcclResult_t spcclCommInitMPI(spcclComm_t* comm, MPI_Comm mpiComm);

#ifdef __cplusplus
}
#endif

#endif /* SPCCL_MPI_H_ */
