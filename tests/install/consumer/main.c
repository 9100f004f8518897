/*
 * A program outside the spccl tree, built against an installed spccl (CMake
 * package or pkg-config). Valid C99 and C++: the CMake consumer builds it in
 * both languages. It includes spccl_mpi.h, so mpi.h must be found through
 * spccl's own package, and calls into libmpi, so MPI must be linked through it
 * too. Needs no MPI_Init: it only asks versions.
 */
#include <stdio.h>
#include <string.h>

#include <spccl_mpi.h>

#ifndef SPCCL_EXPECTED_VERSION_CODE
#define SPCCL_EXPECTED_VERSION_CODE SPCCL_VERSION_CODE
#endif

int main(void) {
  int version = -1;
  int initialized = -1;
  spcclResult_t result = spcclGetVersion(&version);
  const char* message = spcclGetErrorString(spcclSuccess);
  /* Names an entry point of spccl_mpi.h, so the link proves it is exported. */
  spcclResult_t (*volatile init)(spcclComm_t*, MPI_Comm) = spcclCommInitMPI;
  int haveInit = init != NULL;

  if (result != spcclSuccess) {
    fprintf(stderr, "spcclGetVersion failed: %d %s\n", (int)result, spcclGetErrorString(result));
    return 1;
  }
  if (version != SPCCL_VERSION_CODE || version != SPCCL_EXPECTED_VERSION_CODE) {
    fprintf(stderr, "version mismatch: library %d, header %d, package %d\n", version, SPCCL_VERSION_CODE,
            SPCCL_EXPECTED_VERSION_CODE);
    return 1;
  }
  if (message == NULL || strlen(message) == 0) {
    fprintf(stderr, "spcclGetErrorString(spcclSuccess) returned an empty string\n");
    return 1;
  }
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || initialized != 0) {
    fprintf(stderr, "MPI_Initialized failed\n");
    return 1;
  }
  printf("spccl %d.%d.%d (version code %d, \"%s\"), entry points %s\n", version / 10000, (version / 100) % 100,
         version % 100, version, message, haveInit ? "linked" : "missing");
  return haveInit ? 0 : 1;
}
