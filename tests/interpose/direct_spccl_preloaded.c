/*
 * A program that calls spccl itself while libspccl_mpi.so is preloaded with
 * SPCCL_INTERCEPT=allreduce (run by ctest with LD_PRELOAD set on mpirun).
 * spccl's own traffic must not be intercepted: a compressor with the dense
 * algorithm makes an exact MPI allreduce of float sums inside spccl, exactly
 * the kind of call the interposer would otherwise compress. Its result must be
 * PMPI's bit for bit. The program's own MPI_Allreduce on the same data, by
 * contrast, is compressed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spccl_mpi.h"

#define N 100000

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, failures = 0, any = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  float* x = malloc(sizeof(float) * N);
  float* y = malloc(sizeof(float) * N);
  float* ref = malloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) x[i] = 0.001f * (float)((i * 7 + rank * 3) % 1000) - 0.5f;
  PMPI_Allreduce(x, ref, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);

  spcclComm_t comm = NULL;
  spcclCompressor_t dense = NULL;
  spcclCompressConfig_t config;
  spcclStats_t stats;
  memset(&stats, 0, sizeof stats);
  if (spcclCommInitMPI(&comm, MPI_COMM_WORLD) != spcclSuccess || spcclCompressConfigInit(&config) != spcclSuccess) {
    fprintf(stderr, "[rank %d] FAIL: spccl set-up failed: %s\n", rank, spcclGetLastError(comm));
    ++failures;
  } else {
    config.algorithm = SPCCL_ALGO_DENSE;
    if (spcclCompressorCreate(comm, N, spcclFloat, &config, &dense) != spcclSuccess ||
        spcclAllReduceCompressed(x, y, spcclSum, dense, NULL) != spcclSuccess ||
        spcclCompressorGetStats(dense, &stats) != spcclSuccess) {
      fprintf(stderr, "[rank %d] FAIL: spccl call failed: %s\n", rank, spcclGetLastError(comm));
      ++failures;
    } else if (stats.lastAlgorithm != SPCCL_ALGO_DENSE || memcmp(y, ref, sizeof(float) * N) != 0) {
      fprintf(stderr, "[rank %d] FAIL: spccl's dense allreduce was not exact (algorithm %d): intercepted?\n", rank,
              stats.lastAlgorithm);
      ++failures;
    }
  }
  /* The program's own call is the interposer's to compress. */
  MPI_Allreduce(x, y, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (memcmp(y, ref, sizeof(float) * N) == 0) {
    fprintf(stderr, "[rank %d] FAIL: the program's MPI_Allreduce was not compressed (interposer not loaded?)\n", rank);
    ++failures;
  }
  if (dense) spcclCompressorDestroy(dense);
  if (comm) spcclCommDestroy(comm);
  PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", any ? "FAILED" : "passed");
  free(x);
  free(y);
  free(ref);
  MPI_Finalize();
  return any ? 1 : 0;
}
