/*
 * A plain MPI program (it knows nothing of spccl) for the corners of
 * libspccl_mpi.so that collectives_check.c does not reach; run_edge.sh runs it
 * under the interposer.
 *
 * usage: edge_check types [nocheck] | samebuf | attr | alias
 *   types:  MPI_Alltoall and MPI_Allgather where the ranks spell the same type
 *           signature (N floats per block) with different datatypes in the same
 *           call: MPI_FLOAT x N, MPI_Type_contiguous(N, MPI_FLOAT) x 1, a strided
 *           vector of N floats x 1, an indexed type holding N floats in permuted
 *           order x 1, MPI_Type_dup(MPI_FLOAT) x N, 70 nested contiguous types over
           MPI_Type_contiguous(N, MPI_FLOAT) x 1 (deeper than any fixed limit
           should reach); send and receive types differ
 *           too, and half the calls are MPI_IN_PLACE. Legal MPI: every rank must
 *           take the same path (no hang), and at density 1 every result must be
 *           exactly MPI's, gaps of the strided layout untouched. 12 calls of each
 *           collective per rank. nocheck: values not checked (compressed
 *           densities), only that every call returns.
 *   samebuf: rank 0 passes one buffer as both send and receive buffer (not
 *           MPI_IN_PLACE), with datatypes that select disjoint floats of it (even
 *           positions sent, odd ones received): legal MPI. The others pass plain
 *           buffers and MPI_FLOAT. Every rank must take the same path and every
 *           result must be MPI's, rank 0's sent floats untouched.
 *   attr:   a keyval with copy and delete callbacks, set on a duplicate of
 *           MPI_COMM_WORLD and on MPI_COMM_WORLD; three MPI_Allreduce of N floats
 *           (two on WORLD) and an MPI_Comm_free: the copy callback must never
 *           run and the delete callback exactly once (spccl's own communicators
 *           must not carry the program's attributes).
 *   alias:  MPI_Allreduce(a, a, ...) without MPI_IN_PLACE (erroneous): the
 *           return code must be what PMPI_Allreduce returns for the same call
 *           (Open MPI: MPI_ERR_BUFFER), not success.
 * Exit status 0 on every rank when every check passed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 65536 /* floats per block: >= 65536 for allgather, and for alltoall on 2+ ranks */
#define VARIANTS 6
#define DEPTH 70 /* variant 5's nesting */
#define SENTINEL (-7.0f)

static int rank, ranks, failures;

static void fail(const char* what) {
  fprintf(stderr, "[rank %d] FAIL: %s\n", rank, what);
  ++failures;
}

/* One way to describe a block of N floats. */
typedef struct {
  MPI_Datatype type;
  int count;     /* items of type per block */
  size_t stride; /* floats of memory per block */
} Layout;

static Layout layouts[VARIANTS];

static void makeLayouts(void) {
  layouts[0] = (Layout){MPI_FLOAT, N, N};
  MPI_Type_contiguous(N, MPI_FLOAT, &layouts[1].type);
  layouts[1].count = 1, layouts[1].stride = N;
  MPI_Datatype vec;
  MPI_Type_vector(N, 1, 2, MPI_FLOAT, &vec);
  MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * N * sizeof(float)), &layouts[2].type);
  MPI_Type_free(&vec);
  layouts[2].count = 1, layouts[2].stride = 2 * N;
  int lens[2] = {N / 2, N / 2}, displs[2] = {N / 2, 0};
  MPI_Type_indexed(2, lens, displs, MPI_FLOAT, &layouts[3].type);
  layouts[3].count = 1, layouts[3].stride = N;
  MPI_Type_dup(MPI_FLOAT, &layouts[4].type);
  layouts[4].count = N, layouts[4].stride = N;
  MPI_Datatype deep;
  MPI_Type_contiguous(N, MPI_FLOAT, &deep);
  for (int d = 0; d < DEPTH; ++d) {
    MPI_Datatype outer;
    MPI_Type_contiguous(1, deep, &outer);
    MPI_Type_free(&deep);
    deep = outer;
  }
  layouts[5].type = deep;
  layouts[5].count = 1, layouts[5].stride = N;
  for (int v = 1; v < VARIANTS; ++v) MPI_Type_commit(&layouts[v].type);
}

/* Where element j of a block lies in memory, in floats from the block's start. */
static size_t position(int variant, size_t j) {
  switch (variant) {
    case 2:
      return 2 * j;
    case 3:
      return j < N / 2 ? N / 2 + j : j - N / 2;
    default:
      return j;
  }
}

/* The value element j of the block that rank src sends for block blk. */
static float value(int src, int blk, size_t j) { return (float)(src * 1000 + blk * 100 + (int)(j % 97)); }

/* blocks blocks of layout variant, every element v(b, j), gaps SENTINEL. */
static float* fill(int variant, int blocks, int src, int sameBlock) {
  const size_t stride = layouts[variant].stride;
  float* x = malloc(sizeof(float) * stride * (size_t)blocks);
  for (size_t i = 0; i < stride * (size_t)blocks; ++i) x[i] = SENTINEL;
  for (int b = 0; b < blocks; ++b)
    for (size_t j = 0; j < N; ++j) x[b * stride + position(variant, j)] = value(src, sameBlock ? 0 : b, j);
  return x;
}

/* Block b of x (layout variant) must hold want(b)'s values; gaps SENTINEL. */
static void check(const float* x, int variant, int alltoall, const char* what) {
  const size_t stride = layouts[variant].stride;
  size_t wrong = 0, gaps = 0;
  for (int b = 0; b < ranks; ++b) {
    for (size_t j = 0; j < N; ++j)
      if (x[b * stride + position(variant, j)] != value(b, alltoall ? rank : 0, j)) ++wrong;
    if (variant == 2)
      for (size_t j = 0; j < N; ++j)
        if (x[b * stride + 2 * j + 1] != SENTINEL) ++gaps;
  }
  if (wrong || gaps) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: %zu elements wrong, %zu gap floats overwritten", what, wrong, gaps);
    fail(msg);
  }
}

static void types(int checkValues) {
  makeLayouts();
  for (int coll = 0; coll < 2; ++coll) {
    const int alltoall = coll == 0;
    for (int k = 0; k < 2 * VARIANTS; ++k) {
      const int inPlace = k >= VARIANTS;
      /* Different datatypes on different ranks in the same call. */
      const int sv = (rank + k) % VARIANTS, rv = inPlace ? sv : (rank + 2 * k + 1) % VARIANTS;
      const Layout s = layouts[sv], r = layouts[rv];
      char what[160];
      snprintf(what, sizeof what, "%s%s, send layout %d, receive layout %d", alltoall ? "alltoall" : "allgather",
               inPlace ? " in place" : "", sv, rv);
      float* recv;
      int rc;
      if (inPlace) {
        /* alltoall: block b is what this rank sends to b; allgather: only this rank's block counts. */
        recv = fill(rv, ranks, rank, !alltoall);
        if (alltoall) {
          rc = MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, r.count, r.type, MPI_COMM_WORLD);
        } else {
          rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, r.count, r.type, MPI_COMM_WORLD);
        }
      } else {
        float* send = fill(sv, alltoall ? ranks : 1, rank, 0);
        recv = malloc(sizeof(float) * r.stride * (size_t)ranks);
        for (size_t i = 0; i < r.stride * (size_t)ranks; ++i) recv[i] = SENTINEL;
        if (alltoall) {
          rc = MPI_Alltoall(send, s.count, s.type, recv, r.count, r.type, MPI_COMM_WORLD);
        } else {
          rc = MPI_Allgather(send, s.count, s.type, recv, r.count, r.type, MPI_COMM_WORLD);
        }
        free(send);
      }
      if (rc != MPI_SUCCESS) fail(what);
      if (checkValues) check(recv, rv, alltoall, what);
      free(recv);
    }
  }
  for (int v = 1; v < VARIANTS; ++v) MPI_Type_free(&layouts[v].type);
}

/* Rank 0: even floats of each 2N-float block sent, odd ones received, one buffer. */
static void samebuf(void) {
  MPI_Datatype vec, even, odd, shifted;
  MPI_Type_vector(N, 1, 2, MPI_FLOAT, &vec);
  MPI_Type_create_resized(vec, 0, (MPI_Aint)(2 * N * sizeof(float)), &even);
  const int one = 1;
  const MPI_Aint at = sizeof(float);
  MPI_Type_create_hindexed(1, &one, &at, vec, &shifted);
  MPI_Type_create_resized(shifted, 0, (MPI_Aint)(2 * N * sizeof(float)), &odd);
  MPI_Type_commit(&even);
  MPI_Type_commit(&odd);
  for (int coll = 0; coll < 2; ++coll) {
    const int alltoall = coll == 0, blocks = ranks;
    float* buf = malloc(sizeof(float) * 2 * N * (size_t)blocks);
    float* plainSend = malloc(sizeof(float) * N * (size_t)blocks);
    float* plainRecv = malloc(sizeof(float) * N * (size_t)blocks);
    for (int b = 0; b < blocks; ++b)
      for (size_t j = 0; j < N; ++j) {
        const float v = value(rank, alltoall ? b : 0, j);
        buf[(size_t)b * 2 * N + 2 * j] = v; /* sent */
        buf[(size_t)b * 2 * N + 2 * j + 1] = SENTINEL;
        plainSend[(size_t)b * N + j] = v;
      }
    int rc;
    if (rank == 0) {
      rc = alltoall ? MPI_Alltoall(buf, 1, even, buf, 1, odd, MPI_COMM_WORLD)
                    : MPI_Allgather(buf, 1, even, buf, 1, odd, MPI_COMM_WORLD);
    } else {
      rc = alltoall ? MPI_Alltoall(plainSend, N, MPI_FLOAT, plainRecv, N, MPI_FLOAT, MPI_COMM_WORLD)
                    : MPI_Allgather(plainSend, N, MPI_FLOAT, plainRecv, N, MPI_FLOAT, MPI_COMM_WORLD);
    }
    if (rc != MPI_SUCCESS)
      fail(alltoall ? "samebuf alltoall returned an error" : "samebuf allgather returned an error");
    size_t wrong = 0;
    for (int b = 0; b < blocks; ++b)
      for (size_t j = 0; j < N; ++j) {
        const float want = value(b, alltoall ? rank : 0, j);
        if (rank == 0) {
          if (buf[(size_t)b * 2 * N + 2 * j + 1] != want) ++wrong;
          if (buf[(size_t)b * 2 * N + 2 * j] != value(rank, alltoall ? b : 0, j)) ++wrong;
        } else if (plainRecv[(size_t)b * N + j] != want) {
          ++wrong;
        }
      }
    if (wrong) {
      char msg[128];
      snprintf(msg, sizeof msg, "samebuf %s: %zu floats wrong", alltoall ? "alltoall" : "allgather", wrong);
      fail(msg);
    }
    free(buf);
    free(plainSend);
    free(plainRecv);
  }
  MPI_Type_free(&vec);
  MPI_Type_free(&shifted);
  MPI_Type_free(&even);
  MPI_Type_free(&odd);
}

static int copies, deletes;
static int copyFn(MPI_Comm c, int kv, void* extra, void* in, void* out, int* flag) {
  (void)c, (void)kv, (void)extra;
  ++copies;
  *(void**)out = in;
  *flag = 1;
  return MPI_SUCCESS;
}
static int deleteFn(MPI_Comm c, int kv, void* value, void* extra) {
  (void)c, (void)kv, (void)value, (void)extra;
  ++deletes;
  return MPI_SUCCESS;
}

static void attr(void) {
  int kv;
  MPI_Comm_create_keyval(copyFn, deleteFn, &kv, NULL);
  MPI_Comm c;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  MPI_Comm_set_attr(c, kv, (void*)0x1);
  MPI_Comm_set_attr(MPI_COMM_WORLD, kv, (void*)0x2);
  float* a = calloc(N, sizeof(float));
  float* b = calloc(N, sizeof(float));
  MPI_Allreduce(a, b, N, MPI_FLOAT, MPI_SUM, c);
  MPI_Allreduce(a, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (copies != 0) fail("the copy callback ran inside MPI_Allreduce");
  MPI_Comm_free(&c);
  if (deletes != 1) fail("MPI_Comm_free did not run the delete callback exactly once");
  MPI_Allreduce(a, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* releases the freed communicator's spccl one */
  if (copies != 0 || deletes != 1) fail("the callbacks ran after MPI_Comm_free");
  MPI_Comm_delete_attr(MPI_COMM_WORLD, kv);
  if (deletes != 2) fail("MPI_Comm_delete_attr did not run the delete callback once");
  MPI_Comm_free_keyval(&kv);
  free(a);
  free(b);
}

static void alias(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  float* a = malloc(sizeof(float) * N);
  for (size_t i = 0; i < N; ++i) a[i] = 1.0f;
  const int want = PMPI_Allreduce(a, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < N; ++i) a[i] = 1.0f;
  const int got = MPI_Allreduce(a, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int wantClass = MPI_SUCCESS, gotClass = MPI_SUCCESS;
  MPI_Error_class(want, &wantClass);
  MPI_Error_class(got, &gotClass);
  if (gotClass != wantClass) {
    char msg[128];
    snprintf(msg, sizeof msg, "aliased MPI_Allreduce returned error class %d, PMPI_Allreduce %d", gotClass, wantClass);
    fail(msg);
  }
  free(a);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "types") == 0) {
    types(!(argc > 2 && strcmp(argv[2], "nocheck") == 0));
  } else if (strcmp(mode, "samebuf") == 0) {
    samebuf();
  } else if (strcmp(mode, "attr") == 0) {
    attr();
  } else if (strcmp(mode, "alias") == 0) {
    alias();
  } else {
    if (rank == 0) fprintf(stderr, "usage: edge_check types [nocheck] | samebuf | attr | alias\n");
    MPI_Finalize();
    return 2;
  }
  int any = 0;
  PMPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any == 0) printf("edge_check %s: PASS (%d ranks)\n", mode, ranks);
  MPI_Finalize();
  return any ? 1 : 0;
}
