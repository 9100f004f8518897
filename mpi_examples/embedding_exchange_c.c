/*
 * spccl from plain C99: the embedding side of hybrid DLRM training.
 *
 *   1. DCT-MP: each rank's pooled embedding rows go to the ranks that hold
 *      their samples with spcclAlltoAllRowsCompressed, keeping 1/16 of each
 *      row; the gradients come back with spcclAlltoAllRowsBackward, values
 *      only, at the same positions.
 *   2. Row-sparse allreduce of a data-parallel table's gradient: ids repeat
 *      within and across ranks; the output is the sorted union with summed
 *      rows. A too-small output is reported with the size needed.
 *
 * Build: part of the spccl build (mpi_examples/), or by hand:
 *   mpicc -std=c99 embedding_exchange_c.c $(pkg-config --cflags --libs spccl) -o embedding_exchange_c
 * Run:   mpirun -np 3 ./embedding_exchange_c
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>
#include <spccl_mpi.h>

static int rank = 0;

#define SPCCL_CHECK(comm, call)                                                                 \
  do {                                                                                          \
    spcclResult_t r_ = (call);                                                                  \
    if (r_ != spcclSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s failed at %s:%d: %s: %s\n", rank, #call, __FILE__, __LINE__, \
              spcclGetErrorString(r_), spcclGetLastError(comm));                                \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                             \
    }                                                                                           \
  } while (0)

static float uniform(uint32_t* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / 16777216.0f - 0.5f;
}

int main(int argc, char** argv) {
  enum { kRowsPerPeer = 256, kRowLen = 64 };
  const float density = 1.0f / 16; /* 4 of 64 per row */
  int ranks = 1, failures = 0;
  spcclComm_t comm = NULL;
  spcclSelection_t selection = NULL;
  spcclStats_t before, after;
  size_t n, i;
  float *act, *recv, *grad, *gradBack;
  uint32_t state;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  SPCCL_CHECK(comm, spcclCommInitMPI(&comm, MPI_COMM_WORLD));

  /* 1. DCT-MP forward and backward. */
  n = (size_t)ranks * kRowsPerPeer * kRowLen;
  act = malloc(n * sizeof *act);
  recv = malloc(n * sizeof *recv);
  grad = malloc(n * sizeof *grad);
  gradBack = malloc(n * sizeof *gradBack);
  if (!act || !recv || !grad || !gradBack) MPI_Abort(MPI_COMM_WORLD, 1);
  state = 12345u + (uint32_t)rank;
  for (i = 0; i < n; ++i) act[i] = uniform(&state);
  SPCCL_CHECK(comm, spcclCommGetStats(comm, &before));
  SPCCL_CHECK(
      comm, spcclAlltoAllRowsCompressed(act, recv, kRowsPerPeer, kRowLen, spcclFloat, density, &selection, comm, NULL));
  SPCCL_CHECK(comm, spcclCommGetStats(comm, &after));
  if (rank == 0 && after.bytesSent > before.bytesSent)
    printf("alltoall rows: %d rows of %d per peer, density %.4f: sent %llu B vs dense %llu B per rank (%.1fx less)\n",
           kRowsPerPeer, kRowLen, density, (unsigned long long)(after.bytesSent - before.bytesSent),
           (unsigned long long)(after.denseBytes - before.denseBytes),
           (double)(after.denseBytes - before.denseBytes) / (double)(after.bytesSent - before.bytesSent));
  else if (rank == 0) /* one rank: nothing leaves it */
    printf("alltoall rows: %d rows of %d per peer, density %.4f: one rank, no bytes sent\n", kRowsPerPeer, kRowLen,
           density);

  /* The MLP side's gradient w.r.t. what it received: here, twice the input.
   * The backward returns it at exactly the positions the forward kept. */
  for (i = 0; i < n; ++i) grad[i] = 2.0f * recv[i];
  SPCCL_CHECK(comm, spcclAlltoAllRowsBackward(grad, gradBack, selection, NULL));
  SPCCL_CHECK(comm, spcclSelectionDestroy(selection));
  {
    /* Every row: gradBack is 2*act at the kept positions, 0 elsewhere; each
     * row keeps exactly 4 entries (no NaN/Inf in this data). */
    size_t row, kept = 0;
    for (row = 0; row < n / kRowLen; ++row) {
      size_t e, rowKept = 0;
      for (e = 0; e < kRowLen; ++e) {
        const float g = gradBack[row * kRowLen + e];
        if (g != 0.0f) {
          ++rowKept;
          if (g != 2.0f * act[row * kRowLen + e]) ++failures;
        }
      }
      if (rowKept != 4) ++failures;
      kept += rowKept;
    }
    if (rank == 0)
      printf("backward: %zu gradient entries returned, mask*grad check %s\n", kept, failures ? "FAILED" : "OK");
  }

  /* 2. Row-sparse allreduce: 100 touches of 20 rows on every rank. */
  {
    enum { kTouches = 100, kLen = 8 };
    int64_t ids[kTouches], *outIds = NULL;
    float rows[kTouches * kLen], *outRows = NULL;
    size_t outCap = 4, outN = 0;
    spcclResult_t r;
    for (i = 0; i < kTouches; ++i) {
      size_t e;
      ids[i] = (int64_t)((i * 7 + (size_t)rank) % 20) * 1000; /* shared hot ids */
      for (e = 0; e < kLen; ++e) rows[i * kLen + e] = 1.0f;
    }
    outIds = malloc(outCap * sizeof *outIds);
    outRows = malloc(outCap * kLen * sizeof *outRows);
    r = spcclAllReduceRowSparse(ids, rows, kTouches, kLen, spcclFloat, outIds, outRows, outCap, &outN, comm, NULL);
    if (r != spcclInvalidUsage) ++failures; /* 4 slots are too few: told the size needed */
    outCap = outN;
    outIds = realloc(outIds, outCap * sizeof *outIds);
    outRows = realloc(outRows, outCap * kLen * sizeof *outRows);
    SPCCL_CHECK(comm, spcclAllReduceRowSparse(ids, rows, kTouches, kLen, spcclFloat, outIds, outRows, outCap, &outN,
                                              comm, NULL));
    {
      /* Every row was touched kTouches/20 = 5 times per rank: each sum is 5 * ranks. */
      double total = 0;
      for (i = 0; i < outN * kLen; ++i) total += outRows[i];
      if (outN != 20 || fabs(total - 20.0 * kLen * 5.0 * ranks) > 1e-3) ++failures;
      if (rank == 0)
        printf("row-sparse allreduce: %d touches per rank -> %zu unique rows, sum check %s\n", kTouches, outN,
               failures ? "FAILED" : "OK");
    }
    free(outIds);
    free(outRows);
  }

  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  free(act);
  free(recv);
  free(grad);
  free(gradBack);
  SPCCL_CHECK(comm, spcclCommDestroy(comm));
  MPI_Finalize();
  return failures ? 1 : 0;
}
