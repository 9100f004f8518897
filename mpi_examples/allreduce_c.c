/*
 * spccl from plain C99: the two ways into a compressed allreduce.
 *
 *   1. Drop-in: spcclAllReduce has ncclAllReduce's signature. A large float
 *      buffer (at least SPCCL_MIN_COMPRESS_COUNT elements) summed with
 *      spcclSum/spcclAvg is compressed with the SPCCL_* environment defaults;
 *      anything else is exact.
 *   2. Explicit: a compressor owns one gradient buffer's state (threshold,
 *      error-feedback residual) and its own settings, here 1% density.
 *
 * Build: part of the spccl build (mpi_examples/), or by hand:
 *   mpicc -std=c99 allreduce_c.c $(pkg-config --cflags --libs spccl) -o allreduce_c
 * Run:   mpirun -np 2 ./allreduce_c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <spccl_mpi.h>

static int rank = 0;

/* Every spccl call returns a code; the detail is in spcclGetLastError. */
#define SPCCL_CHECK(comm, call)                                                                 \
  do {                                                                                          \
    spcclResult_t r_ = (call);                                                                  \
    if (r_ != spcclSuccess) {                                                                   \
      fprintf(stderr, "rank %d: %s failed at %s:%d: %s: %s\n", rank, #call, __FILE__, __LINE__, \
              spcclGetErrorString(r_), spcclGetLastError(comm));                                \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                             \
    }                                                                                           \
  } while (0)

/* A stand-in for one step's gradient: deterministic, different on every rank,
 * a few large entries among many small ones. */
static void fillGradient(float* grad, size_t count, int step) {
  uint32_t state = 2654435761u * (uint32_t)(rank + 1) + 40503u * (uint32_t)(step + 1);
  size_t i;
  for (i = 0; i < count; ++i) {
    float u;
    state = state * 1664525u + 1013904223u;       /* LCG */
    u = (float)(state >> 8) / 16777216.0f - 0.5f; /* [-0.5, 0.5) */
    grad[i] = (state & 0x3ffu) == 0 ? 100.0f * u : 1e-3f * u;
  }
}

/* Replicas must not drift: every rank gets bitwise the same result. */
static int sameOnAllRanks(const float* buf, size_t count) {
  uint64_t hash = 1469598103934665603ull; /* FNV-1a over the bytes */
  uint64_t lo = 0, hi = 0;
  const unsigned char* p = (const unsigned char*)buf;
  size_t i;
  for (i = 0; i < count * sizeof(float); ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  MPI_Allreduce(&hash, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

static void printStats(const char* what, const spcclStats_t* s) {
  if (rank != 0) return;
  printf("%s: %llu call(s), %llu compressed, sent %llu B vs dense %llu B per rank", what, (unsigned long long)s->calls,
         (unsigned long long)s->compressedCalls, (unsigned long long)s->bytesSent, (unsigned long long)s->denseBytes);
  if (s->bytesSent > 0)
    printf(" = %.1fx less (bytesSent/denseBytes = %.4f)", (double)s->denseBytes / (double)s->bytesSent,
           (double)s->bytesSent / (double)s->denseBytes);
  printf("\n  last call: algorithm %d, threshold %g, %llu entries selected on rank 0\n", s->lastAlgorithm,
         (double)s->lastThreshold, (unsigned long long)s->lastSelected);
}

int main(int argc, char** argv) {
  const size_t count = (size_t)1 << 20; /* > SPCCL_MIN_COMPRESS_COUNT's default, 65536 */
  const int steps = 5;
  spcclComm_t comm = NULL;
  spcclCompressConfig_t config;
  spcclCompressor_t compressor = NULL;
  spcclStats_t stats;
  int nranks = 0, version = 0, step, ok = 1;
  float* grad;
  float* out;

  MPI_Init(&argc, &argv);
  SPCCL_CHECK(NULL, spcclGetVersion(&version));
  SPCCL_CHECK(NULL, spcclCommInitMPI(&comm, MPI_COMM_WORLD));
  SPCCL_CHECK(comm, spcclCommUserRank(comm, &rank));
  SPCCL_CHECK(comm, spcclCommCount(comm, &nranks));
  if (rank == 0)
    printf("spccl %d.%d.%d on %d ranks, %zu floats per allreduce\n", version / 10000, (version / 100) % 100,
           version % 100, nranks, count);

  grad = (float*)malloc(count * sizeof(float));
  out = (float*)malloc(count * sizeof(float));
  if (grad == NULL || out == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* 1. Drop-in, in place, exactly like ncclAllReduce (stream NULL: host buffer). */
  for (step = 0; step < steps; ++step) {
    fillGradient(grad, count, step);
    SPCCL_CHECK(comm, spcclAllReduce(grad, grad, count, spcclFloat, spcclSum, comm, NULL));
    ok &= sameOnAllRanks(grad, count);
  }
  SPCCL_CHECK(comm, spcclCommGetStats(comm, &stats));
  printStats("drop-in spcclAllReduce (env defaults)", &stats);

  /* 2. Explicit compressor: keep 1% of the entries, average across ranks. */
  SPCCL_CHECK(comm, spcclCompressConfigInit(&config));
  config.density = 0.01f;
  SPCCL_CHECK(comm, spcclCompressorCreate(comm, count, spcclFloat, &config, &compressor));
  for (step = 0; step < steps; ++step) {
    fillGradient(grad, count, step);
    SPCCL_CHECK(comm, spcclAllReduceCompressed(grad, out, spcclAvg, compressor, NULL));
    ok &= sameOnAllRanks(out, count);
  }
  SPCCL_CHECK(comm, spcclCompressorGetStats(compressor, &stats));
  printStats("spcclAllReduceCompressed, density 0.01", &stats);

  SPCCL_CHECK(comm, spcclCompressorDestroy(compressor));
  SPCCL_CHECK(NULL, spcclCommDestroy(comm));
  free(grad);
  free(out);

  if (rank == 0) printf(ok ? "results identical on all ranks: OK\n" : "FAILED: ranks differ\n");
  MPI_Finalize();
  return ok ? 0 : 1;
}
