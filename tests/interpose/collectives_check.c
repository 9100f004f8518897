/*
 * A plain MPI program (it knows nothing of spccl) that makes the calls
 * libspccl_mpi.so must compress and the calls it must leave alone, and checks
 * every result. Reference results come from the PMPI_* twins, which no
 * interposer touches; bookkeeping (agreeing on pass/fail) uses PMPI too, so
 * the interposer's counters see exactly the calls under test.
 *
 * usage: collectives_check compressed|exact
 *   exact:      every result must equal the PMPI reference bit for bit (no
 *               interposer, or interception off).
 *   compressed: run under LD_PRELOAD=libspccl_mpi.so with SPCCL_INTERCEPT=all,
 *               SPCCL_ALLTOALL_DENSITY=0.125, SPCCL_ALLTOALL_ROW_LEN=64 and
 *               SPCCL_ALLGATHER_DENSITY=0.01 (default min count 65536): the
 *               eligible calls must show spccl's compressed results, the others
 *               the exact ones.
 * Calls per rank: allreduce 9 (4 eligible), alltoall 4 (2 eligible), allgather
 * 4 (2 eligible); the test driver checks the interposer's report against that.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 100000          /* allreduce elements (>= 65536) */
#define ROW_LEN 64        /* alltoall rows */
#define ROWS_PER_PEER 512 /* 32768 floats per peer: >= 65536 per rank on 2+ ranks */
#define ROW_KEEP 8        /* ceil(0.125 * 64) */
#define AG_COUNT 65536    /* allgather sendcount */

static int rank, ranks, compressed, failures;

static void fail(const char* what) {
  fprintf(stderr, "[rank %d] FAIL: %s\n", rank, what);
  ++failures;
}

static void expectSame(const void* got, const void* want, size_t bytes, const char* what) {
  if (memcmp(got, want, bytes) != 0) fail(what);
}

/* Allreduce data: small values everywhere, K large integer spikes per rank. */
static long spikeCount(void) { return (long)ceil((double)0.01f * N); }
static long spikePos(int r, long k) { return ((long)r * 7919 + k * 97) % N; }
static void fillSpiky(float* x, int r, int salt) {
  for (long i = 0; i < N; ++i) x[i] = 1e-3f * (float)(((i * 31 + r * 17 + salt) % 201) - 100) / 100.0f + 1e-6f;
  for (long k = 0; k < spikeCount(); ++k) x[spikePos(r, k)] = (float)(1000 + k + r + salt);
}

/* Compressed allreduce of spiky data: each rank's spikes are exactly its top
 * K, so the sum holds the spikes and zeros elsewhere (the rest waits in the
 * error-feedback residual). Spikes are small integers: sums are exact. */
static void checkSpikySum(const float* out, int salt, const char* what) {
  float* want = calloc(N, sizeof(float));
  for (int r = 0; r < ranks; ++r)
    for (long k = 0; k < spikeCount(); ++k) want[spikePos(r, k)] += (float)(1000 + k + r + salt);
  expectSame(out, want, sizeof(float) * N, what);
  free(want);
}

static void allreduceOnSpiky(MPI_Comm comm, int inPlace, int salt, const char* what) {
  float* x = malloc(sizeof(float) * N);
  float* y = malloc(sizeof(float) * N);
  float* ref = malloc(sizeof(float) * N);
  fillSpiky(x, rank, salt);
  PMPI_Allreduce(x, ref, N, MPI_FLOAT, MPI_SUM, comm);
  if (inPlace) {
    memcpy(y, x, sizeof(float) * N);
    MPI_Allreduce(MPI_IN_PLACE, y, N, MPI_FLOAT, MPI_SUM, comm);
  } else {
    MPI_Allreduce(x, y, N, MPI_FLOAT, MPI_SUM, comm);
  }
  if (compressed) {
    checkSpikySum(y, salt, what);
  } else {
    expectSame(y, ref, sizeof(float) * N, what);
  }
  free(x);
  free(y);
  free(ref);
}

/* Calls that always pass through: the result is PMPI's, bit for bit. */
static void allreducePassthrough(void) {
  int* ia = malloc(sizeof(int) * N);
  int* ib = malloc(sizeof(int) * N);
  int* iref = malloc(sizeof(int) * N);
  float* fa = malloc(sizeof(float) * N);
  float* fb = malloc(sizeof(float) * N);
  float* fref = malloc(sizeof(float) * N);
  double* da = malloc(sizeof(double) * N);
  double* db = malloc(sizeof(double) * N);
  double* dref = malloc(sizeof(double) * N);
  for (long i = 0; i < N; ++i) {
    ia[i] = (int)(i % 1000) - rank;
    fa[i] = 0.001f * (float)((i * 13 + rank) % 1000);
    da[i] = 0.1 * (double)((i * 7 + rank) % 1000);
  }
  MPI_Allreduce(ia, ib, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(ia, iref, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  expectSame(ib, iref, sizeof(int) * N, "allreduce MPI_INT sum passes through");
  MPI_Allreduce(fa, fb, N, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  PMPI_Allreduce(fa, fref, N, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  expectSame(fb, fref, sizeof(float) * N, "allreduce MPI_FLOAT max passes through");
  MPI_Allreduce(da, db, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(da, dref, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  expectSame(db, dref, sizeof(double) * N, "allreduce MPI_DOUBLE sum passes through");
  MPI_Allreduce(fa, fb, 1000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  PMPI_Allreduce(fa, fref, 1000, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  expectSame(fb, fref, sizeof(float) * 1000, "allreduce of 1000 floats (below the minimum) passes through");
  MPI_Allreduce(fa, fb, N, MPI_FLOAT, MPI_SUM, MPI_COMM_SELF);
  expectSame(fb, fa, sizeof(float) * N, "allreduce on MPI_COMM_SELF passes through");
  free(ia);
  free(ib);
  free(iref);
  free(fa);
  free(fb);
  free(fref);
  free(da);
  free(db);
  free(dref);
}

/* Alltoall rows: every row a permutation of magnitudes 1..64 with signs, so
 * each row's top 8 are the magnitudes 57..64. */
static float rowValue(int sender, long row, int c) {
  const int m = (int)((c * 37 + row * 11 + sender * 5) % ROW_LEN) + 1;
  return (float)(((c + row) & 1) ? -m : m);
}

static void alltoallRows(int inPlace) {
  const long per = (long)ROWS_PER_PEER * ROW_LEN, total = per * ranks;
  float* x = malloc(sizeof(float) * (size_t)total);
  float* y = malloc(sizeof(float) * (size_t)total);
  float* ref = malloc(sizeof(float) * (size_t)total);
  for (long row = 0; row < (long)ROWS_PER_PEER * ranks; ++row)
    for (int c = 0; c < ROW_LEN; ++c) x[row * ROW_LEN + c] = rowValue(rank, row, c);
  PMPI_Alltoall(x, (int)per, MPI_FLOAT, ref, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
  if (inPlace) {
    memcpy(y, x, sizeof(float) * (size_t)total);
    MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, y, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
  } else {
    MPI_Alltoall(x, (int)per, MPI_FLOAT, y, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
  }
  const char* what = inPlace ? "alltoall MPI_FLOAT in place" : "alltoall MPI_FLOAT";
  if (!compressed) {
    expectSame(y, ref, sizeof(float) * (size_t)total, what);
  } else {
    /* Block j came from rank j: its rows ROWS_PER_PEER * rank + q, top 8 kept. */
    int bad = 0;
    for (int j = 0; j < ranks; ++j)
      for (long q = 0; q < ROWS_PER_PEER; ++q)
        for (int c = 0; c < ROW_LEN; ++c) {
          const float v = rowValue(j, (long)ROWS_PER_PEER * rank + q, c);
          const float want = fabsf(v) > (float)(ROW_LEN - ROW_KEEP) ? v : 0.0f;
          bad |= y[((long)j * ROWS_PER_PEER + q) * ROW_LEN + c] != want;
        }
    if (bad) fail(what);
  }
  free(x);
  free(y);
  free(ref);
}

/* Allgather: each rank's block is a signed permutation of 1..AG_COUNT, so its
 * top k = ceil(0.01 * AG_COUNT) are the magnitudes above AG_COUNT - k. */
static float agValue(int r, long i) {
  const long m = (i * 40503 + (long)r * 977) % AG_COUNT + 1;
  return (float)((i & 1) ? -m : m);
}

static void allgatherTopK(int inPlace) {
  const long total = (long)AG_COUNT * ranks;
  const long k = (long)ceil((double)0.01f * AG_COUNT);
  float* x = malloc(sizeof(float) * AG_COUNT);
  float* y = malloc(sizeof(float) * (size_t)total);
  float* ref = malloc(sizeof(float) * (size_t)total);
  for (long i = 0; i < AG_COUNT; ++i) x[i] = agValue(rank, i);
  PMPI_Allgather(x, AG_COUNT, MPI_FLOAT, ref, AG_COUNT, MPI_FLOAT, MPI_COMM_WORLD);
  if (inPlace) {
    for (long i = 0; i < total; ++i) y[i] = -1.0f;
    memcpy(y + (long)rank * AG_COUNT, x, sizeof(float) * AG_COUNT);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, y, AG_COUNT, MPI_FLOAT, MPI_COMM_WORLD);
  } else {
    MPI_Allgather(x, AG_COUNT, MPI_FLOAT, y, AG_COUNT, MPI_FLOAT, MPI_COMM_WORLD);
  }
  const char* what = inPlace ? "allgather MPI_FLOAT in place" : "allgather MPI_FLOAT";
  if (!compressed) {
    expectSame(y, ref, sizeof(float) * (size_t)total, what);
  } else {
    int bad = 0;
    for (int j = 0; j < ranks; ++j)
      for (long i = 0; i < AG_COUNT; ++i) {
        const float v = agValue(j, i);
        const float want = fabsf(v) > (float)(AG_COUNT - k) ? v : 0.0f;
        bad |= y[(long)j * AG_COUNT + i] != want;
      }
    if (bad) fail(what);
  }
  free(x);
  free(y);
  free(ref);
}

static void gatherAndExchangePassthrough(void) {
  const long n = (long)AG_COUNT * ranks;
  int* ia = malloc(sizeof(int) * (size_t)n);
  int* ib = malloc(sizeof(int) * (size_t)n);
  int* iref = malloc(sizeof(int) * (size_t)n);
  float fa[400], fb[400 * 4], fref[400 * 4];
  for (long i = 0; i < n; ++i) ia[i] = (int)(i * 3 + rank);
  for (int i = 0; i < 400; ++i) fa[i] = (float)(i + rank);
  MPI_Alltoall(ia, AG_COUNT, MPI_INT, ib, AG_COUNT, MPI_INT, MPI_COMM_WORLD);
  PMPI_Alltoall(ia, AG_COUNT, MPI_INT, iref, AG_COUNT, MPI_INT, MPI_COMM_WORLD);
  expectSame(ib, iref, sizeof(int) * (size_t)n, "alltoall MPI_INT passes through");
  MPI_Alltoall(fa, 100, MPI_FLOAT, fb, 100, MPI_FLOAT, MPI_COMM_WORLD);
  PMPI_Alltoall(fa, 100, MPI_FLOAT, fref, 100, MPI_FLOAT, MPI_COMM_WORLD);
  expectSame(fb, fref, sizeof(float) * 100 * (size_t)ranks, "alltoall of 100 floats per rank passes through");
  MPI_Allgather(ia, AG_COUNT, MPI_INT, ib, AG_COUNT, MPI_INT, MPI_COMM_WORLD);
  PMPI_Allgather(ia, AG_COUNT, MPI_INT, iref, AG_COUNT, MPI_INT, MPI_COMM_WORLD);
  expectSame(ib, iref, sizeof(int) * (size_t)n, "allgather MPI_INT passes through");
  MPI_Allgather(fa, 400, MPI_FLOAT, fb, 400, MPI_FLOAT, MPI_COMM_WORLD);
  PMPI_Allgather(fa, 400, MPI_FLOAT, fref, 400, MPI_FLOAT, MPI_COMM_WORLD);
  expectSame(fb, fref, sizeof(float) * 400 * (size_t)ranks, "allgather of 400 floats passes through");
  free(ia);
  free(ib);
  free(iref);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks > 4) {
    if (rank == 0) fprintf(stderr, "at most 4 ranks (the small alltoall uses 400-float buffers)\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (argc != 2 || (strcmp(argv[1], "compressed") != 0 && strcmp(argv[1], "exact") != 0)) {
    if (rank == 0) fprintf(stderr, "usage: %s compressed|exact\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  compressed = strcmp(argv[1], "compressed") == 0;

  /* allreduce: 5 calls that pass through, 4 eligible ones */
  allreducePassthrough();
  allreduceOnSpiky(MPI_COMM_WORLD, 1, 0, "allreduce MPI_FLOAT sum in place");
  allreduceOnSpiky(MPI_COMM_WORLD, 0, 1, "allreduce MPI_FLOAT sum");
  for (int round = 0; round < 2; ++round) {
    /* A communicator of its own, freed after use: its spccl communicator is
     * released and the next one is created fresh. */
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    allreduceOnSpiky(dup, 1, 2 + round, "allreduce MPI_FLOAT sum on a duplicated communicator");
    MPI_Comm_free(&dup);
  }
  /* alltoall and allgather: 2 eligible calls and 2 that pass through each */
  alltoallRows(0);
  alltoallRows(1);
  allgatherTopK(0);
  allgatherTopK(1);
  gatherAndExchangePassthrough();

  int anyFailed = 0;
  PMPI_Allreduce(&failures, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("%s: %s\n", argv[1], anyFailed ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return anyFailed ? 1 : 0;
}
