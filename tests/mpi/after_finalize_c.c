/*
 * Calls after MPI_Finalize (run under mpirun -np 2, 3 and 4): spccl objects
 * made before it are still the caller's to destroy, and a call that would
 * communicate must return spcclInvalidUsage, naming MPI_Finalize, instead of
 * reaching MPI (Open MPI aborts the process on any MPI call after
 * MPI_Finalize: "The MPI_Allgather() function was called after MPI_FINALIZE
 * was invoked"). spccl.h: the library never aborts.
 *
 * Every rank does the same; the exit code is 0 only if every check passed
 * (no verdict can be agreed across ranks once MPI is gone).
 */
#include <mpi.h>
#include <spccl.h>
#include <spccl_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int gFailures = 0, gRank = 0;

static void expect(spcclResult_t got, spcclResult_t want, const char* what) {
  const char* msg = spcclGetLastError(NULL);
  if (got != want || (want != spcclSuccess && strstr(msg, "finalized") == NULL)) {
    fprintf(stderr, "[rank %d] FAIL: %s returned %d (want %d): %s\n", gRank, what, (int)got, (int)want, msg);
    ++gFailures;
  }
}

int main(int argc, char** argv) {
  enum { kCount = 4096, kRowLen = 16 };
  spcclComm_t comm = NULL, late = NULL;
  spcclCompressor_t comp = NULL;
  spcclSelection_t sel = NULL;
  spcclCompressConfig_t cfg;
  float *a, *b, *rows, *rowsOut;
  int64_t ids[1] = {1}, outIds[64];
  size_t outRows = 0, i;
  int ranks = 1;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  a = calloc(kCount * (size_t)ranks, sizeof(float));
  b = calloc(kCount * (size_t)ranks, sizeof(float));
  rows = calloc((size_t)ranks * kRowLen, sizeof(float));
  rowsOut = calloc((size_t)ranks * kRowLen * 64, sizeof(float));
  for (i = 0; i < kCount; ++i) a[i] = (float)((int)(i % 17) - 8);
  for (i = 0; i < (size_t)ranks * kRowLen; ++i) rows[i] = (float)i;
  if (spcclCommInitMPI(&comm, MPI_COMM_WORLD) != spcclSuccess || spcclCompressConfigInit(&cfg) != spcclSuccess) {
    fprintf(stderr, "[rank %d] set-up failed: %s\n", gRank, spcclGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cfg.density = 0.01f;
  expect(spcclCompressorCreate(comm, kCount, spcclFloat32, &cfg, &comp), spcclSuccess, "spcclCompressorCreate");
  expect(spcclAllReduceCompressed(a, b, spcclSum, comp, NULL), spcclSuccess, "spcclAllReduceCompressed");
  expect(spcclAlltoAllRowsCompressed(rows, rowsOut, 1, kRowLen, spcclFloat32, 0.25f, &sel, comm, NULL), spcclSuccess,
         "spcclAlltoAllRowsCompressed");
  MPI_Finalize();

  expect(spcclAllReduce(a, b, kCount, spcclFloat32, spcclSum, comm, NULL), spcclInvalidUsage, "spcclAllReduce");
  expect(spcclAllReduceCompressed(a, b, spcclSum, comp, NULL), spcclInvalidUsage, "spcclAllReduceCompressed");
  expect(spcclAlltoAll(a, b, kCount, spcclFloat32, comm, NULL), spcclInvalidUsage, "spcclAlltoAll");
  expect(spcclAllGather(a, b, kCount, spcclFloat32, comm, NULL), spcclInvalidUsage, "spcclAllGather");
  expect(spcclAlltoAllRowsCompressed(rows, rowsOut, 1, kRowLen, spcclFloat32, 0.25f, NULL, comm, NULL),
         spcclInvalidUsage, "spcclAlltoAllRowsCompressed");
  expect(spcclAlltoAllRowsBackward(rowsOut, rows, sel, NULL), spcclInvalidUsage, "spcclAlltoAllRowsBackward");
  expect(spcclAllReduceRowSparse(ids, rows, 1, kRowLen, spcclFloat32, outIds, rowsOut, 64, &outRows, comm, NULL),
         spcclInvalidUsage, "spcclAllReduceRowSparse");
  expect(spcclCommInitMPI(&late, MPI_COMM_WORLD), spcclInvalidUsage, "spcclCommInitMPI");
  /* What needs no MPI still works, and everything made before is freed. */
  {
    spcclStats_t st;
    expect(spcclCommGetStats(comm, &st), spcclSuccess, "spcclCommGetStats");
    expect(spcclCompressorGetResidual(comp, a, kCount), spcclSuccess, "spcclCompressorGetResidual");
  }
  expect(spcclSelectionDestroy(sel), spcclSuccess, "spcclSelectionDestroy");
  expect(spcclCompressorDestroy(comp), spcclSuccess, "spcclCompressorDestroy");
  expect(spcclCommDestroy(comm), spcclSuccess, "spcclCommDestroy");
  free(a);
  free(b);
  free(rows);
  free(rowsOut);
  if (gFailures == 0) printf("[rank %d] PASSED\n", gRank);
  return gFailures == 0 ? 0 : 1;
}
