/*
 * The bad-argument and mismatched-call matrix, from
 * strict C99 as a user's program would see the API (run under mpirun -np 2,
 * 3 and 4).
 *
 * Part 1: every public function of spccl.h and spccl_mpi.h with each bad
 * argument that applies to it (NULL handles and buffers, NULL allowed with a
 * zero count, unknown datatype or op, size_t overflow of count x element size
 * or rows x rowLen, density outside (0, 1], rowLen 0, bad config fields,
 * selections used twice or after their communicator is gone, compressors
 * used after theirs is gone, destroy twice). Every rank makes the same call;
 * each must return the documented code on every rank, and
 * spcclGetLastError() must name the argument and its value.
 *
 * Part 2: calls that disagree across ranks (counts, datatypes, ops, row
 * lengths, algorithms, wire types, rows densities, one rank in a different
 * collective, count 0 against count > 0). Each must return
 * spcclInvalidUsage on every rank, without hanging.
 *
 * Part 3: afterwards, correct calls on the same communicator give the right
 * answer.
 *
 * A watchdog (alarm) turns a hang into exit code 124 naming the last step.
 * The verdict is agreed across ranks; the exit code is 0 only if every check
 * passed on every rank.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <spccl.h>
#include <spccl_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int gRank = 0, gSize = 1, gFailures = 0, gChecks = 0;
static char gStep[256] = "start";

static void onAlarm(int sig) {
  static const char msg[] = "bad_args_c: a call did not return within the watchdog's time (hang); last step: ";
  ssize_t ignored;
  (void)sig;
  ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  ignored = write(STDERR_FILENO, gStep, strlen(gStep));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
  _exit(124);
}

static void step(const char* name) {
  snprintf(gStep, sizeof gStep, "%s", name);
  alarm(30); /* each step returns within seconds, or it hangs */
}

/* got == want; for a failure, the last-error message is non-empty and
 * contains every needle (separated by '|'). */
static void expectCode(spcclResult_t got, spcclResult_t want, const char* needles, const char* what, int line) {
  const char* msg;
  ++gChecks;
  if (got != want) {
    fprintf(stderr, "[rank %d] line %d: %s returned %d (%s), expected %d (%s); last error: %s\n", gRank, line, what,
            (int)got, spcclGetErrorString(got), (int)want, spcclGetErrorString(want), spcclGetLastError(NULL));
    ++gFailures;
    return;
  }
  if (want == spcclSuccess) return;
  msg = spcclGetLastError(NULL);
  if (msg == NULL || *msg == '\0') {
    fprintf(stderr, "[rank %d] line %d: %s: spcclGetLastError is empty\n", gRank, line, what);
    ++gFailures;
    return;
  }
  if (needles != NULL) {
    char buf[256];
    const char* p = needles;
    while (*p) {
      const char* bar = strchr(p, '|');
      size_t n = bar ? (size_t)(bar - p) : strlen(p);
      if (n >= sizeof buf) n = sizeof buf - 1;
      memcpy(buf, p, n);
      buf[n] = '\0';
      if (strstr(msg, buf) == NULL) {
        fprintf(stderr, "[rank %d] line %d: %s: message \"%s\" does not contain \"%s\"\n", gRank, line, what, msg, buf);
        ++gFailures;
      }
      p = bar ? bar + 1 : p + n;
    }
  }
}

#define EXPECT(call, code, needles) expectCode((call), (code), (needles), #call, __LINE__)
#define EXPECT_IA(call, needles) EXPECT(call, spcclInvalidArgument, needles)
#define EXPECT_IU(call, needles) EXPECT(call, spcclInvalidUsage, needles)
#define EXPECT_OK(call) EXPECT(call, spcclSuccess, NULL)

static void check(int ok, const char* what, int line) {
  ++gChecks;
  if (!ok) {
    fprintf(stderr, "[rank %d] line %d: check failed: %s\n", gRank, line, what);
    ++gFailures;
  }
}
#define CHECK(cond) check((cond) ? 1 : 0, #cond, __LINE__)

static spcclCompressConfig_t config(float density, int algorithm, spcclDataType_t wire) {
  spcclCompressConfig_t c;
  memset(&c, 0, sizeof c);
  if (spcclCompressConfigInit(&c) != spcclSuccess) ++gFailures;
  c.density = density;
  c.algorithm = algorithm;
  c.wireValueType = wire;
  c.thresholdInterval = 1;
  c.errorFeedback = 1;
  return c;
}

/* Values that are exact in fp32 whatever the summation order. */
static void fillInts(float* x, size_t n, int rank, int salt) {
  size_t i;
  for (i = 0; i < n; ++i) x[i] = (float)((int)((i * 7 + (size_t)salt) % 97) - 48 + rank);
}

#define BIG 100000 /* >= the default SPCCL_MIN_COMPRESS_COUNT's 65536: compressed */
#define SMALL 1000

static float gSend[BIG + 8], gRecv[BIG + 8];
static float gAll[4 * BIG];

/* ---------------- part 1: bad arguments, the same on every rank ---------------- */

static void badComms(spcclComm_t comm) {
  int n = 0;
  spcclStats_t s;
  spcclComm_t other = NULL, gone = NULL;
  step("version and strings");
  EXPECT_IA(spcclGetVersion(NULL), "version is NULL");
  {
    int r;
    for (r = -1; r <= (int)spcclNumResults + 1; ++r) {
      const char* t = spcclGetErrorString((spcclResult_t)r);
      CHECK(t != NULL && *t != '\0');
    }
  }
  step("spcclCommInitMPI");
  EXPECT_IA(spcclCommInitMPI(NULL, MPI_COMM_WORLD), "comm (output pointer) is NULL");
  other = (spcclComm_t)&n; /* must be reset to NULL on failure */
  EXPECT_IA(spcclCommInitMPI(&other, MPI_COMM_NULL), "mpiComm is MPI_COMM_NULL");
  CHECK(other == NULL);
  step("spcclCommCount/UserRank/GetStats");
  EXPECT_IA(spcclCommCount(NULL, &n), "comm is NULL");
  EXPECT_IA(spcclCommCount(comm, NULL), "count is NULL");
  EXPECT_IA(spcclCommUserRank(NULL, &n), "comm is NULL");
  EXPECT_IA(spcclCommUserRank(comm, NULL), "rank is NULL");
  EXPECT_IA(spcclCommGetStats(NULL, &s), "comm is NULL");
  EXPECT_IA(spcclCommGetStats(comm, NULL), "stats is NULL");
  EXPECT_IA(spcclCommDestroy(NULL), "comm is NULL");

  step("destroyed communicator");
  EXPECT_OK(spcclCommInitMPI(&gone, MPI_COMM_WORLD));
  EXPECT_OK(spcclCommDestroy(gone));
  EXPECT_IU(spcclCommDestroy(gone), "comm=|is not a live communicator");
  EXPECT_IU(spcclCommCount(gone, &n), "is not a live communicator");
  EXPECT_IU(spcclCommUserRank(gone, &n), "is not a live communicator");
  EXPECT_IU(spcclCommGetStats(gone, &s), "is not a live communicator");
  EXPECT_IU(spcclAllReduce(gSend, gRecv, SMALL, spcclFloat32, spcclSum, gone, NULL), "is not a live communicator");
  EXPECT_IU(spcclAlltoAll(gSend, gRecv, 4, spcclFloat32, gone, NULL), "is not a live communicator");
  EXPECT_IU(spcclAllGather(gSend, gAll, 4, spcclFloat32, gone, NULL), "is not a live communicator");
  {
    spcclCompressor_t c = (spcclCompressor_t)&n;
    EXPECT_IU(spcclCompressorCreate(gone, SMALL, spcclFloat32, NULL, &c), "is not a live communicator");
    CHECK(c == NULL);
  }
}

static void badAllReduce(spcclComm_t comm) {
  const size_t counts[2] = {SMALL, BIG}; /* exact and compressed paths */
  int i;
  for (i = 0; i < 2; ++i) {
    const size_t n = counts[i];
    step(i == 0 ? "spcclAllReduce, exact size" : "spcclAllReduce, compressed size");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, spcclFloat32, spcclSum, NULL, NULL), "comm is NULL");
    EXPECT_IA(spcclAllReduce(NULL, gRecv, n, spcclFloat32, spcclSum, comm, NULL),
              i == 0 ? "sendbuff is NULL with count=1000" : "sendbuff is NULL with count=100000");
    EXPECT_IA(spcclAllReduce(gSend, NULL, n, spcclFloat32, spcclSum, comm, NULL), "recvbuff is NULL with count=");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, (spcclDataType_t)42, spcclSum, comm, NULL), "datatype=42");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, (spcclDataType_t)-1, spcclSum, comm, NULL), "datatype=-1");
    /* fp8 e4m3 is a wire value type, never a buffer type */
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, spcclFloat8e4m3, spcclSum, comm, NULL), "wire value type only");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, (spcclDataType_t)spcclNumTypes, spcclSum, comm, NULL), "datatype=11");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, spcclFloat32, (spcclRedOp_t)17, comm, NULL), "op=17");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, spcclFloat32, (spcclRedOp_t)-2, comm, NULL), "op=-2");
    EXPECT_IA(spcclAllReduce(gSend, gRecv, n, spcclFloat32, spcclSum, comm, (void*)gSend), "stream=");
  }
  step("spcclAllReduce, overflowing counts");
  EXPECT_IA(spcclAllReduce(gSend, gRecv, SIZE_MAX, spcclFloat32, spcclSum, comm, NULL),
            "count=18446744073709551615|overflows size_t");
  EXPECT_IA(spcclAllReduce(gSend, gRecv, SIZE_MAX / 8, spcclFloat64, spcclSum, comm, NULL), "overflows size_t");
  EXPECT_IA(spcclAllReduce(gSend, gRecv, SIZE_MAX, spcclInt8, spcclSum, comm, NULL), "overflows size_t");
  step("spcclAllReduce, count 0 with NULL buffers (collective, succeeds)");
  EXPECT_OK(spcclAllReduce(NULL, NULL, 0, spcclFloat32, spcclSum, comm, NULL));
  EXPECT_OK(spcclAllReduce(NULL, NULL, 0, spcclInt64, spcclMax, comm, NULL));
}

static void badCompressors(spcclComm_t comm) {
  spcclCompressConfig_t good = config(0.01f, SPCCL_ALGO_AUTO, spcclFloat32), bad;
  spcclCompressor_t c = NULL, out;
  spcclStats_t s;
  int dummy = 0;
  step("spcclCompressConfigInit / spcclCompressorCreate");
  EXPECT_IA(spcclCompressConfigInit(NULL), "config is NULL");
  EXPECT_IA(spcclCompressorCreate(comm, BIG, spcclFloat32, &good, NULL), "out is NULL");
  out = (spcclCompressor_t)&dummy;
  EXPECT_IA(spcclCompressorCreate(NULL, BIG, spcclFloat32, &good, &out), "comm is NULL");
  CHECK(out == NULL);
  EXPECT_IA(spcclCompressorCreate(comm, BIG, (spcclDataType_t)42, &good, &out), "datatype=42");
  EXPECT_IA(spcclCompressorCreate(comm, BIG, spcclFloat8e4m3, &good, &out), "spcclFloat8e4m3");
  EXPECT_IA(spcclCompressorCreate(comm, SIZE_MAX, spcclFloat32, &good, &out), "count=18446744073709551615");
  EXPECT_IA(spcclCompressorCreate(comm, (size_t)UINT32_MAX + 1, spcclFloat32, &good, &out), "count=4294967296");
#define BAD_CONFIG(field, value, needle)                                           \
  do {                                                                             \
    bad = good;                                                                    \
    bad.field = value;                                                             \
    out = (spcclCompressor_t)&dummy;                                               \
    EXPECT_IA(spcclCompressorCreate(comm, BIG, spcclFloat32, &bad, &out), needle); \
    CHECK(out == NULL);                                                            \
  } while (0)
  BAD_CONFIG(size, 0, "config.size=0");
  BAD_CONFIG(size, sizeof good - 4, "config.size=");
  BAD_CONFIG(version, 99, "config.version=99");
  BAD_CONFIG(density, 0.0f, "config.density=0");
  BAD_CONFIG(density, -0.25f, "config.density=-0.25");
  BAD_CONFIG(density, 1.5f, "config.density=1.5");
  BAD_CONFIG(density, (float)NAN, "config.density=nan");
  BAD_CONFIG(density, (float)INFINITY, "config.density=inf");
  BAD_CONFIG(thresholdInterval, 0, "config.thresholdInterval=0");
  BAD_CONFIG(thresholdInterval, -5, "config.thresholdInterval=-5");
  BAD_CONFIG(errorFeedback, 2, "config.errorFeedback=2");
  BAD_CONFIG(algorithm, 9, "config.algorithm=9");
  BAD_CONFIG(algorithm, -1, "config.algorithm=-1");
  BAD_CONFIG(wireValueType, spcclInt32, "config.wireValueType=2");
  BAD_CONFIG(wireValueType, spcclFloat64, "config.wireValueType=8");
  BAD_CONFIG(capacityFactor, 0.5f, "config.capacityFactor=0.5");
  BAD_CONFIG(capacityFactor, (float)NAN, "config.capacityFactor=nan");
#undef BAD_CONFIG

  step("spcclAllReduceCompressed and the compressor queries");
  EXPECT_OK(spcclCompressorCreate(comm, BIG, spcclFloat32, &good, &c));
  EXPECT_IA(spcclAllReduceCompressed(gSend, gRecv, spcclSum, NULL, NULL), "compressor is NULL");
  EXPECT_IA(spcclAllReduceCompressed(NULL, gRecv, spcclSum, c, NULL), "sendbuff is NULL with count=100000");
  EXPECT_IA(spcclAllReduceCompressed(gSend, NULL, spcclSum, c, NULL), "recvbuff is NULL with count=100000");
  EXPECT_IA(spcclAllReduceCompressed(gSend, gRecv, (spcclRedOp_t)17, c, NULL), "op=17");
  EXPECT_IA(spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, (void*)gSend), "stream=");
  EXPECT_IA(spcclCompressorGetStats(NULL, &s), "compressor is NULL");
  EXPECT_IA(spcclCompressorGetStats(c, NULL), "stats is NULL");
  EXPECT_IA(spcclCompressorGetResidual(NULL, gRecv, BIG), "compressor is NULL");
  EXPECT_IA(spcclCompressorGetResidual(c, NULL, BIG), "residual is NULL with count=100000");
  EXPECT_IA(spcclCompressorGetResidual(c, gRecv, BIG + 1), "count=100001|100000");
  EXPECT_IA(spcclCompressorGetResidual(c, gRecv, 0), "count=0");
  EXPECT_IA(spcclCompressorDestroy(NULL), "compressor is NULL");
  EXPECT_OK(spcclCompressorDestroy(c));
  step("destroyed compressor");
  EXPECT_IU(spcclCompressorDestroy(c), "compressor=|destroyed twice");
  EXPECT_IU(spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, NULL), "is not a live compressor");
  EXPECT_IU(spcclCompressorGetStats(c, &s), "is not a live compressor");
  EXPECT_IU(spcclCompressorGetResidual(c, gRecv, BIG), "is not a live compressor");

  step("count-0 compressor with NULL buffers (collective, succeeds)");
  c = NULL;
  EXPECT_OK(spcclCompressorCreate(comm, 0, spcclFloat32, &good, &c));
  EXPECT_OK(spcclAllReduceCompressed(NULL, NULL, spcclSum, c, NULL));
  EXPECT_OK(spcclCompressorGetResidual(c, NULL, 0));
  EXPECT_OK(spcclCompressorDestroy(c));

  step("compressor whose communicator is gone");
  {
    spcclComm_t other = NULL;
    c = NULL;
    EXPECT_OK(spcclCommInitMPI(&other, MPI_COMM_WORLD));
    EXPECT_OK(spcclCompressorCreate(other, BIG, spcclFloat32, &good, &c));
    EXPECT_OK(spcclCommDestroy(other));
    EXPECT_IU(spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, NULL), "communicator has been destroyed");
    EXPECT_IU(spcclCompressorGetStats(c, &s), "communicator has been destroyed");
    EXPECT_IU(spcclCompressorGetResidual(c, gRecv, BIG), "communicator has been destroyed");
    EXPECT_OK(spcclCompressorDestroy(c)); /* still freed */
    EXPECT_IU(spcclCompressorDestroy(c), "destroyed twice");
  }
}

static void badAlltoAllAndAllGather(spcclComm_t comm) {
  step("spcclAlltoAll");
  EXPECT_IA(spcclAlltoAll(gSend, gRecv, 4, spcclFloat32, NULL, NULL), "comm is NULL");
  EXPECT_IA(spcclAlltoAll(NULL, gRecv, 4, spcclFloat32, comm, NULL), "sendbuff is NULL with count=4");
  EXPECT_IA(spcclAlltoAll(gSend, NULL, 4, spcclFloat32, comm, NULL), "recvbuff is NULL with count=4");
  EXPECT_IA(spcclAlltoAll(gSend, gRecv, 4, (spcclDataType_t)10, comm, NULL), "datatype=10");
  EXPECT_IA(spcclAlltoAll(gSend, gRecv, SIZE_MAX / 2, spcclFloat32, comm, NULL), "count * ranks|overflows size_t");
  EXPECT_IA(spcclAlltoAll(gSend, gRecv, SIZE_MAX / 8, spcclFloat64, comm, NULL), "overflows size_t");
  EXPECT_IA(spcclAlltoAll(gSend, gRecv, 4, spcclFloat32, comm, (void*)gSend), "stream=");
  EXPECT_OK(spcclAlltoAll(NULL, NULL, 0, spcclFloat32, comm, NULL));
  step("spcclAllGather");
  EXPECT_IA(spcclAllGather(gSend, gAll, 4, spcclFloat32, NULL, NULL), "comm is NULL");
  EXPECT_IA(spcclAllGather(NULL, gAll, 4, spcclFloat32, comm, NULL), "sendbuff is NULL with sendcount=4");
  EXPECT_IA(spcclAllGather(gSend, NULL, 4, spcclFloat32, comm, NULL), "recvbuff is NULL with sendcount=4");
  EXPECT_IA(spcclAllGather(gSend, gAll, 4, (spcclDataType_t)99, comm, NULL), "datatype=99");
  EXPECT_IA(spcclAllGather(gSend, gAll, SIZE_MAX / 2, spcclFloat32, comm, NULL), "sendcount * ranks|overflows size_t");
  EXPECT_IA(spcclAllGather(gSend, gAll, 4, spcclFloat32, comm, (void*)gSend), "stream=");
  EXPECT_OK(spcclAllGather(NULL, NULL, 0, spcclFloat32, comm, NULL));
}

static void badRows(spcclComm_t comm) {
  const size_t rows = 2, rowLen = 8; /* per peer: gSend holds P x 2 x 8 floats */
  spcclSelection_t sel = NULL, sel2 = NULL;
  int dummy = 0;
  step("spcclAlltoAllRowsCompressed");
  sel = (spcclSelection_t)&dummy;
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 0.5f, &sel, NULL, NULL),
            "comm is NULL");
  CHECK(sel == NULL);
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, (spcclDataType_t)42, 0.5f, &sel, comm, NULL),
            "datatype=42");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclInt32, 0.5f, &sel, comm, NULL),
            "datatype=int32");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat64, 0.5f, &sel, comm, NULL),
            "datatype=float64");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, 0, spcclFloat32, 0.5f, &sel, comm, NULL), "rowLen=0");
  EXPECT_IA(
      spcclAlltoAllRowsCompressed(gSend, gRecv, rows, (size_t)UINT32_MAX + 1, spcclFloat32, 0.5f, &sel, comm, NULL),
      "rowLen=4294967296");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 0.0f, &sel, comm, NULL), "density=0");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, -1.0f, &sel, comm, NULL),
            "density=-1");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 1.5f, &sel, comm, NULL),
            "density=1.5");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, (float)NAN, &sel, comm, NULL),
            "density=nan");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, SIZE_MAX / 4, rowLen, spcclFloat32, 0.5f, &sel, comm, NULL),
            "rowsPerPeer * rowLen|overflows size_t");
  EXPECT_IA(spcclAlltoAllRowsCompressed(NULL, gRecv, rows, rowLen, spcclFloat32, 0.5f, &sel, comm, NULL),
            "sendbuff is NULL with rowsPerPeer*rowLen=16");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, NULL, rows, rowLen, spcclFloat32, 0.5f, &sel, comm, NULL),
            "recvbuff is NULL with rowsPerPeer*rowLen=16");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gSend, rows, rowLen, spcclFloat32, 0.5f, &sel, comm, NULL),
            "sendbuff == recvbuff");
  EXPECT_IA(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 0.5f, &sel, comm, (void*)gSend),
            "stream=");
  CHECK(sel == NULL);

  step("spcclAlltoAllRowsBackward and spcclSelectionDestroy");
  EXPECT_IA(spcclAlltoAllRowsBackward(gSend, gRecv, NULL, NULL), "selection is NULL");
  EXPECT_IA(spcclSelectionDestroy(NULL), "selection is NULL");
  fillInts(gSend, (size_t)gSize * rows * rowLen, gRank, 3);
  EXPECT_OK(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 0.25f, &sel, comm, NULL));
  /* Rejected arguments do not consume the selection. */
  EXPECT_IA(spcclAlltoAllRowsBackward(NULL, gAll, sel, NULL), "gradSendbuff is NULL with");
  EXPECT_IA(spcclAlltoAllRowsBackward(gRecv, NULL, sel, NULL), "gradRecvbuff is NULL with");
  EXPECT_IA(spcclAlltoAllRowsBackward(gRecv, gRecv, sel, NULL), "gradSendbuff == gradRecvbuff");
  EXPECT_IA(spcclAlltoAllRowsBackward(gRecv, gAll, sel, (void*)gSend), "stream=");
  EXPECT_OK(spcclAlltoAllRowsBackward(gRecv, gAll, sel, NULL));
  EXPECT_IU(spcclAlltoAllRowsBackward(gRecv, gAll, sel, NULL), "selection=|already served a backward");
  EXPECT_OK(spcclSelectionDestroy(sel));
  EXPECT_IU(spcclSelectionDestroy(sel), "selection=|destroyed twice");
  EXPECT_IU(spcclAlltoAllRowsBackward(gRecv, gAll, sel, NULL), "is not a live selection");

  step("zero rows with NULL buffers (collective, succeeds)");
  sel = NULL;
  EXPECT_OK(spcclAlltoAllRowsCompressed(NULL, NULL, 0, rowLen, spcclFloat32, 0.5f, &sel, comm, NULL));
  EXPECT_OK(spcclAlltoAllRowsBackward(NULL, NULL, sel, NULL));
  EXPECT_OK(spcclSelectionDestroy(sel));

  step("selection whose communicator is gone");
  {
    spcclComm_t other = NULL;
    EXPECT_OK(spcclCommInitMPI(&other, MPI_COMM_WORLD));
    sel2 = NULL;
    EXPECT_OK(spcclAlltoAllRowsCompressed(gSend, gRecv, rows, rowLen, spcclFloat32, 0.25f, &sel2, other, NULL));
    EXPECT_OK(spcclCommDestroy(other));
    EXPECT_IU(spcclAlltoAllRowsBackward(gRecv, gAll, sel2, NULL), "communicator has been destroyed");
    EXPECT_OK(spcclSelectionDestroy(sel2));
  }
}

static void badRowSparse(spcclComm_t comm) {
  int64_t ids[4] = {1, 5, 9, 5}, outIds[64];
  size_t outN = 0;
  const size_t rowLen = 4;
  step("spcclAllReduceRowSparse");
  fillInts(gSend, 4 * rowLen, gRank, 5);
#define RS(ids_, rows_, n_, len_, type_, oids_, orows_, cap_, outn_, comm_, stream_) \
  spcclAllReduceRowSparse(ids_, rows_, n_, len_, type_, oids_, orows_, cap_, outn_, comm_, stream_)
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, 64, &outN, NULL, NULL), "comm is NULL");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, 64, NULL, comm, NULL), "outNrows is NULL");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, (spcclDataType_t)42, outIds, gRecv, 64, &outN, comm, NULL), "datatype=42");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclInt64, outIds, gRecv, 64, &outN, comm, NULL), "datatype=int64");
  EXPECT_IA(RS(ids, gSend, 4, 0, spcclFloat32, outIds, gRecv, 64, &outN, comm, NULL), "rowLen=0");
  EXPECT_IA(RS(ids, gSend, SIZE_MAX / 2, rowLen, spcclFloat32, outIds, gRecv, 64, &outN, comm, NULL),
            "nrows * rowLen|overflows size_t");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, SIZE_MAX / 2, &outN, comm, NULL),
            "outCapacity * rowLen|overflows size_t");
  EXPECT_IA(RS(NULL, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, 64, &outN, comm, NULL),
            "rowIds is NULL with nrows=4");
  EXPECT_IA(RS(ids, NULL, 4, rowLen, spcclFloat32, outIds, gRecv, 64, &outN, comm, NULL), "rows is NULL with nrows=4");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, NULL, gRecv, 64, &outN, comm, NULL),
            "outRowIds is NULL with outCapacity=64");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, NULL, 64, &outN, comm, NULL),
            "outRows is NULL with outCapacity=64");
  EXPECT_IA(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, 64, &outN, comm, (void*)gSend), "stream=");
  step("spcclAllReduceRowSparse: output too small (collective), then no rows with NULL buffers");
  outN = 0;
  /* ids {1, 5, 9} on every rank: the union has 3 ids. */
  EXPECT_IU(RS(ids, gSend, 4, rowLen, spcclFloat32, outIds, gRecv, 2, &outN, comm, NULL), "outCapacity is 2");
  CHECK(outN == 3);
  EXPECT_OK(RS(NULL, NULL, 0, rowLen, spcclFloat32, NULL, NULL, 0, &outN, comm, NULL));
  CHECK(outN == 0);
#undef RS
}

/* ---------------- part 2: calls that disagree across ranks ---------------- */

/* Every rank must get spcclInvalidUsage naming the mismatch. */
#define MISMATCH(name, call, needle) \
  do {                               \
    step(name);                      \
    EXPECT_IU(call, needle);         \
  } while (0)

static void mismatches(spcclComm_t comm) {
  const int odd = gRank == 0; /* rank 0 disagrees with the others */
  const char* desc = "mismatched collective call";
  spcclCompressor_t c = NULL;
  size_t outN = 0;
  int64_t ids[3] = {2, 4, 6}, outIds[16];
  spcclSelection_t sel = NULL;

  fillInts(gSend, BIG, gRank, 1);
  MISMATCH("exact allreduce: counts", spcclAllReduce(gSend, gRecv, odd ? 100 : 101, spcclFloat32, spcclSum, comm, NULL),
           "count");
  MISMATCH("exact allreduce: count 0 against count > 0",
           spcclAllReduce(odd ? NULL : gSend, odd ? NULL : gRecv, odd ? 0 : 50, spcclFloat32, spcclSum, comm, NULL),
           desc);
  MISMATCH("exact allreduce: datatypes",
           spcclAllReduce(gSend, gRecv, 100, odd ? spcclInt32 : spcclFloat32, spcclSum, comm, NULL), "datatype");
  MISMATCH("exact allreduce: ops",
           spcclAllReduce(gSend, gRecv, 100, spcclFloat32, odd ? spcclMax : spcclSum, comm, NULL), "op");
  MISMATCH("allreduce: one rank exact (integers), the others compressed",
           spcclAllReduce(gSend, gRecv, BIG, odd ? spcclInt32 : spcclFloat32, spcclSum, comm, NULL), desc);
  MISMATCH("one rank allgather, the others allreduce",
           odd ? spcclAllGather(gSend, gAll, 100, spcclFloat32, comm, NULL)
               : spcclAllReduce(gSend, gRecv, 100, spcclFloat32, spcclSum, comm, NULL),
           desc);
  MISMATCH("one rank alltoall, the others allgather",
           odd ? spcclAlltoAll(gSend, gAll, 100, spcclFloat32, comm, NULL)
               : spcclAllGather(gSend, gAll, 100, spcclFloat32, comm, NULL),
           desc);
  MISMATCH("exact alltoall: counts", spcclAlltoAll(gSend, gAll, odd ? 10 : 12, spcclFloat32, comm, NULL), "count");
  MISMATCH("exact alltoall: datatypes", spcclAlltoAll(gSend, gAll, 10, odd ? spcclFloat64 : spcclInt64, comm, NULL),
           "datatype");
  MISMATCH("exact allgather: counts", spcclAllGather(gSend, gAll, odd ? 10 : 11, spcclFloat32, comm, NULL), "count");

  /* Compressed allreduce through compressors. */
  {
    struct {
      const char* name;
      size_t count;
      int algorithm;
      spcclDataType_t wire, type;
      spcclRedOp_t op;
      const char* needle;
    } k[6];
    int i;
    k[0].name = "compressed allreduce: counts";
    k[0].count = odd ? BIG : BIG + 3, k[0].algorithm = SPCCL_ALGO_SPLIT, k[0].wire = spcclFloat32;
    k[0].type = spcclFloat32, k[0].op = spcclSum, k[0].needle = "count";
    k[1] = k[0];
    k[1].name = "compressed allreduce: algorithms";
    k[1].count = BIG, k[1].algorithm = odd ? SPCCL_ALGO_ALLGATHER : SPCCL_ALGO_SPLIT, k[1].needle = "algorithm";
    k[2] = k[1];
    k[2].name = "compressed allreduce: wire value types";
    k[2].algorithm = SPCCL_ALGO_ALLGATHER, k[2].wire = odd ? spcclBfloat16 : spcclFloat32,
    k[2].needle = "wire value type";
    k[3] = k[2];
    k[3].name = "compressed allreduce: buffer datatypes";
    k[3].wire = spcclFloat32, k[3].type = odd ? spcclFloat16 : spcclFloat32, k[3].needle = "datatype";
    k[4] = k[2];
    k[4].name = "compressed allreduce: ops";
    k[4].wire = spcclFloat32, k[4].op = odd ? spcclAvg : spcclSum, k[4].needle = "op";
    k[5] = k[2];
    k[5].name = "compressed allreduce: one rank's algorithm dense";
    k[5].wire = spcclFloat32, k[5].algorithm = odd ? SPCCL_ALGO_DENSE : SPCCL_ALGO_ALLGATHER, k[5].needle = "algorithm";
    for (i = 0; i < 6; ++i) {
      spcclCompressConfig_t cfg = config(0.01f, k[i].algorithm, k[i].wire);
      step(k[i].name);
      c = NULL;
      EXPECT_OK(spcclCompressorCreate(comm, k[i].count, k[i].type, &cfg, &c));
      MISMATCH(k[i].name, spcclAllReduceCompressed(gSend, gRecv, k[i].op, c, NULL), k[i].needle);
      EXPECT_OK(spcclCompressorDestroy(c));
    }
  }

  /* Rows alltoall, backward, row-sparse. */
  fillInts(gSend, (size_t)gSize * 4 * 64, gRank, 2);
  MISMATCH("rows alltoall: row lengths (same elements per peer)",
           spcclAlltoAllRowsCompressed(gSend, gRecv, odd ? 2 : 4, odd ? 64 : 32, spcclFloat32, 0.25f, NULL, comm, NULL),
           "row length");
  MISMATCH("rows alltoall: rows per peer",
           spcclAlltoAllRowsCompressed(gSend, gRecv, odd ? 2 : 3, 64, spcclFloat32, 0.25f, NULL, comm, NULL), "count");
  MISMATCH(
      "rows alltoall: datatypes",
      spcclAlltoAllRowsCompressed(gSend, gRecv, 2, 64, odd ? spcclBfloat16 : spcclFloat32, 0.25f, NULL, comm, NULL),
      "datatype");
  MISMATCH("rows alltoall: densities (16 against 32 kept entries per row)",
           spcclAlltoAllRowsCompressed(gSend, gRecv, 2, 64, spcclFloat32, odd ? 0.25f : 0.5f, NULL, comm, NULL),
           "entries");
  MISMATCH("one rank rows alltoall, the others exact alltoall",
           odd ? spcclAlltoAllRowsCompressed(gSend, gRecv, 2, 64, spcclFloat32, 0.25f, NULL, comm, NULL)
               : spcclAlltoAll(gSend, gRecv, 128, spcclFloat32, comm, NULL),
           desc);
  step("one rank rows backward, the others a rows forward");
  EXPECT_OK(spcclAlltoAllRowsCompressed(gSend, gRecv, 2, 64, spcclFloat32, 0.25f, &sel, comm, NULL));
  MISMATCH("one rank rows backward, the others a rows forward",
           odd ? spcclAlltoAllRowsBackward(gRecv, gAll, sel, NULL)
               : spcclAlltoAllRowsCompressed(gSend, gAll, 2, 64, spcclFloat32, 0.25f, NULL, comm, NULL),
           desc);
  EXPECT_OK(spcclSelectionDestroy(sel));
  fillInts(gSend, 3 * 8, gRank, 4);
  MISMATCH("row-sparse: row lengths",
           spcclAllReduceRowSparse(ids, gSend, 3, odd ? 8 : 4, spcclFloat32, outIds, gRecv, 16, &outN, comm, NULL),
           "count");
  MISMATCH("row-sparse: datatypes",
           spcclAllReduceRowSparse(ids, gSend, 3, 4, odd ? spcclFloat16 : spcclFloat32, outIds, gRecv, 16, &outN, comm,
                                   NULL),
           desc);
  MISMATCH("one rank row-sparse, the others exact allreduce",
           odd ? spcclAllReduceRowSparse(ids, gSend, 3, 4, spcclFloat32, outIds, gRecv, 16, &outN, comm, NULL)
               : spcclAllReduce(gSend, gRecv, 4, spcclFloat32, spcclSum, comm, NULL),
           desc);
}

/* Detected: ranks keeping different fractions of the same gradient would
 * sum contributions of different sparsity without any of them knowing; the
 * density travels in the call descriptor, so it is spcclInvalidUsage on every
 * rank, before anything moves, and the compressor stays usable. */
static void differentDensitiesAreMismatches(spcclComm_t comm) {
  spcclCompressConfig_t cfg = config(gRank == 0 ? 0.01f : 0.02f, SPCCL_ALGO_SPLIT, spcclFloat32);
  spcclCompressor_t c = NULL;
  fillInts(gSend, BIG, gRank, 9);
  EXPECT_OK(spcclCompressorCreate(comm, BIG, spcclFloat32, &cfg, &c));
  MISMATCH("compressed allreduce: densities", spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, NULL), "density");
  EXPECT_OK(spcclCompressorDestroy(c));
}

/* ---------------- part 3: the communicator still works ---------------- */

static void correctCallsAfterwards(spcclComm_t comm) {
  size_t i;
  int r, ok = 1;
  step("correct exact allreduce afterwards");
  fillInts(gSend, SMALL, gRank, 11);
  EXPECT_OK(spcclAllReduce(gSend, gRecv, SMALL, spcclFloat32, spcclSum, comm, NULL));
  for (i = 0; i < SMALL; ++i) {
    float want = 0.0f;
    for (r = 0; r < gSize; ++r) want += (float)((int)((i * 7 + 11) % 97) - 48 + r);
    ok &= gRecv[i] == want;
  }
  CHECK(ok);

  step("correct exact allgather afterwards");
  fillInts(gSend, 16, gRank, 12);
  EXPECT_OK(spcclAllGather(gSend, gAll, 16, spcclFloat32, comm, NULL));
  ok = 1;
  for (r = 0; r < gSize; ++r)
    for (i = 0; i < 16; ++i) ok &= gAll[(size_t)r * 16 + i] == (float)((int)((i * 7 + 12) % 97) - 48 + r);
  CHECK(ok);

  step("correct compressed allreduce at density 1 afterwards");
  {
    spcclCompressConfig_t cfg = config(1.0f, SPCCL_ALGO_AUTO, spcclFloat32);
    spcclCompressor_t c = NULL;
    fillInts(gSend, BIG, gRank, 13);
    EXPECT_OK(spcclCompressorCreate(comm, BIG, spcclFloat32, &cfg, &c));
    EXPECT_OK(spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, NULL));
    EXPECT_OK(spcclCompressorDestroy(c));
    ok = 1;
    for (i = 0; i < BIG; ++i) {
      float want = 0.0f;
      for (r = 0; r < gSize; ++r) want += (float)((int)((i * 7 + 13) % 97) - 48 + r);
      ok &= gRecv[i] == want;
    }
    CHECK(ok);
  }

  step("correct split allreduce afterwards: every entry kept");
  {
    /* density 1/2, but only every other entry is non-zero on every rank:
     * everything non-zero is sent, so the sum is exact. */
    spcclCompressConfig_t cfg = config(0.5f, SPCCL_ALGO_SPLIT, spcclFloat32);
    spcclCompressor_t c = NULL;
    for (i = 0; i < BIG; ++i) gSend[i] = (i % 2 == 0) ? (float)(1 + (int)(i % 13) + gRank) : 0.0f;
    EXPECT_OK(spcclCompressorCreate(comm, BIG, spcclFloat32, &cfg, &c));
    EXPECT_OK(spcclAllReduceCompressed(gSend, gRecv, spcclSum, c, NULL));
    EXPECT_OK(spcclCompressorDestroy(c));
    ok = 1;
    for (i = 0; i < BIG; ++i) {
      float want = 0.0f;
      if (i % 2 == 0)
        for (r = 0; r < gSize; ++r) want += (float)(1 + (int)(i % 13) + r);
      ok &= gRecv[i] == want;
    }
    CHECK(ok);
  }
}

int main(int argc, char** argv) {
  spcclComm_t comm = NULL;
  int failuresEverywhere = 0, checksHere;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  if (gSize > 4) {
    if (gRank == 0) fprintf(stderr, "bad_args_c: at most 4 ranks\n");
    MPI_Finalize();
    return 2;
  }
  signal(SIGALRM, onAlarm);
  step("spcclCommInitMPI");
  if (spcclCommInitMPI(&comm, MPI_COMM_WORLD) != spcclSuccess) {
    fprintf(stderr, "[rank %d] spcclCommInitMPI failed: %s\n", gRank, spcclGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  badComms(comm);
  badAllReduce(comm);
  badCompressors(comm);
  badAlltoAllAndAllGather(comm);
  badRows(comm);
  badRowSparse(comm);
  mismatches(comm);
  differentDensitiesAreMismatches(comm);
  correctCallsAfterwards(comm);

  step("destroy");
  EXPECT_OK(spcclCommDestroy(comm));
  alarm(0);
  checksHere = gChecks;
  MPI_Allreduce(&gFailures, &failuresEverywhere, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0)
    printf("bad_args_c: %d ranks, %d checks per rank, %d failure(s) on all ranks together: %s\n", gSize, checksHere,
           failuresEverywhere, failuresEverywhere ? "FAIL" : "PASS");
  MPI_Finalize();
  return failuresEverywhere ? 1 : 0;
}
