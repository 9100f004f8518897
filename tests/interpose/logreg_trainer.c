/*
 * A plain MPI training program that knows nothing of spccl: full-batch
 * gradient descent on a sparse logistic regression (click-through-rate style:
 * 16 fields of 8192 hashed feature values, 131072 weights), data-parallel over
 * MPI ranks, MPI_Allreduce(MPI_IN_PLACE, grad, MPI_FLOAT, MPI_SUM) on the
 * gradient every step. Built with the MPI compiler wrapper flags only.
 *
 * The data set is fixed (sample i is generated from i and the seed alone) and
 * split into contiguous ranges over the ranks, so every rank count trains the
 * same model on the same data.
 *
 * usage: logreg_trainer [steps] [samples] [seed] [weights_out]
 * Prints on rank 0:
 *   loss_initial=<x>
 *   loss_final=<x>
 *   weights_fnv1a=<16 hex digits>   (FNV-1a 64 of the final weights' bytes)
 * and writes the final weights (raw float32) to weights_out if given.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FIELDS 16
#define VALUES_PER_FIELD 8192
#define DIM (FIELDS * VALUES_PER_FIELD)

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Uniform in [0, 1) from a 64-bit hash. */
static double unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0); }

/* Feature of field f in sample i: skewed towards low values (hot features). */
static int feature(uint64_t seed, long i, int f) {
  const double u = unit(splitmix64(seed ^ splitmix64((uint64_t)i * FIELDS + (uint64_t)f)));
  return f * VALUES_PER_FIELD + (int)(VALUES_PER_FIELD * u * u * u);
}

/* The true model the labels come from. */
static double trueWeight(uint64_t seed, int j) {
  const double u = unit(splitmix64(~seed ^ splitmix64((uint64_t)j)));
  return 4.0 * (u - 0.5);
}

static int label(uint64_t seed, long i) {
  double z = 0;
  for (int f = 0; f < FIELDS; ++f) z += trueWeight(seed, feature(seed, i, f));
  const double p = 1.0 / (1.0 + exp(-z));
  return unit(splitmix64(seed + 7 * (uint64_t)i + 3)) < p ? 1 : 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const int steps = argc > 1 ? atoi(argv[1]) : 500;
  const long samples = argc > 2 ? atol(argv[2]) : 16384;
  const uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 2024;
  const char* out = argc > 4 ? argv[4] : NULL;
  const float lr = 8.0f;

  const long begin = samples * rank / ranks, end = samples * (rank + 1) / ranks, local = end - begin;
  int* x = malloc(sizeof(int) * (size_t)(local > 0 ? local : 1) * FIELDS);
  int* y = malloc(sizeof(int) * (size_t)(local > 0 ? local : 1));
  float* w = calloc(DIM, sizeof(float));
  float* grad = malloc(sizeof(float) * DIM);
  if (!x || !y || !w || !grad) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (long i = 0; i < local; ++i) {
    for (int f = 0; f < FIELDS; ++f) x[i * FIELDS + f] = feature(seed, begin + i, f);
    y[i] = label(seed, begin + i);
  }

  double loss = 0;
  for (int step = 0; step <= steps; ++step) {
    double localLoss = 0;
    for (int j = 0; j < DIM; ++j) grad[j] = 0.0f;
    for (long i = 0; i < local; ++i) {
      float z = 0.0f;
      for (int f = 0; f < FIELDS; ++f) z += w[x[i * FIELDS + f]];
      const float p = 1.0f / (1.0f + expf(-z));
      /* log(1 + e^z) - y z, computed stably */
      localLoss += (z > 0 ? z + log1p(exp(-(double)z)) : log1p(exp((double)z))) - (double)(y[i] ? z : 0.0f);
      const float d = (p - (float)y[i]) / (float)samples;
      for (int f = 0; f < FIELDS; ++f) grad[x[i * FIELDS + f]] += d;
    }
    MPI_Allreduce(&localLoss, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    loss /= (double)samples;
    if (step == 0 && rank == 0) printf("loss_initial=%.9g\n", loss);
    if (step == steps) break;
    MPI_Allreduce(MPI_IN_PLACE, grad, DIM, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int j = 0; j < DIM; ++j) w[j] -= lr * grad[j];
  }

  if (rank == 0) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char* b = (const unsigned char*)w;
    for (size_t k = 0; k < sizeof(float) * DIM; ++k) h = (h ^ b[k]) * 1099511628211ull;
    printf("loss_final=%.9g\nweights_fnv1a=%016llx\n", loss, (unsigned long long)h);
    if (out) {
      FILE* f = fopen(out, "wb");
      if (!f || fwrite(w, sizeof(float), DIM, f) != DIM || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", out);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  }
  free(x);
  free(y);
  free(w);
  free(grad);
  MPI_Finalize();
  return 0;
}
