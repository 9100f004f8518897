/*
 * spccl: compressed collective communication for recommendation-model training.
 *
 * Public C API. C99, no MPI or CUDA includes: communicators come from
 * spccl_mpi.h (MPI_Comm) or spccl_nccl.h (ncclComm_t). Shapes follow NCCL:
 * result codes, datatypes and reduction ops carry NCCL's numeric values and
 * collectives take NCCL's argument order. `stream` is a cudaStream_t for
 * device buffers or NULL for host buffers.
 *
 * Every call returns a result code; spcclGetLastError() returns the detailed
 * message of this thread's last failure. The library never aborts, exits or
 * prints to stdout.
 *
 * Threads: as with an NCCL communicator, one thread at a time may call into
 * a communicator and its compressors (they share scratch memory). Calls on
 * different communicators from several threads at once are not tested (for
 * MPI communicators they would also need MPI_THREAD_MULTIPLE).
 */
#ifndef SPCCL_H_
#define SPCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SPCCL_API __attribute__((visibility("default")))
#else
#define SPCCL_API
#endif

#define SPCCL_MAJOR 0
#define SPCCL_MINOR 1
#define SPCCL_PATCH 0
/* Same encoding as NCCL_VERSION_CODE: major*10000 + minor*100 + patch. */
#define SPCCL_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define SPCCL_VERSION_CODE SPCCL_VERSION(SPCCL_MAJOR, SPCCL_MINOR, SPCCL_PATCH)

typedef enum {
  spcclSuccess = 0,
  spcclUnhandledCudaError = 1,
  spcclSystemError = 2,
  spcclInternalError = 3,
  spcclInvalidArgument = 4,
  spcclInvalidUsage = 5,
  spcclRemoteError = 6,
  spcclNumResults = 7
} spcclResult_t;

typedef enum {
  spcclInt8 = 0,
  spcclChar = 0,
  spcclUint8 = 1,
  spcclInt32 = 2,
  spcclInt = 2,
  spcclUint32 = 3,
  spcclInt64 = 4,
  spcclUint64 = 5,
  spcclFloat16 = 6,
  spcclHalf = 6,
  spcclFloat32 = 7,
  spcclFloat = 7,
  spcclFloat64 = 8,
  spcclDouble = 8,
  spcclBfloat16 = 9,
  /* A wire value type only (spcclCompressConfig_t.wireValueType,
   * SPCCL_VALUE_TYPE=fp8): fp8 e4m3 with a power-of-two scale per stream.
   * Never a buffer type: collectives reject it as a datatype. */
  spcclFloat8e4m3 = 10,
  spcclNumTypes = 11,
  /* Not types: widen the enum to every int, negative ones included, so a bad
   * value passed from C (which the library rejects) is not undefined behaviour
   * in the C++ library. */
  spcclDataTypeForceInt = 0x7fffffff,
  spcclDataTypeForceIntMin = -0x7fffffff - 1
} spcclDataType_t;

typedef enum {
  spcclSum = 0,
  spcclProd = 1,
  spcclMax = 2,
  spcclMin = 3,
  spcclAvg = 4,
  spcclNumOps = 5,
  spcclRedOpForceInt = 0x7fffffff, /* not ops: see spcclDataTypeForceInt */
  spcclRedOpForceIntMin = -0x7fffffff - 1
} spcclRedOp_t;

typedef struct spcclComm* spcclComm_t;
typedef struct spcclCompressor* spcclCompressor_t;
typedef struct spcclSelection* spcclSelection_t;

/* Allreduce algorithms (spcclCompressConfig_t.algorithm, SPCCL_ALGO). */
#define SPCCL_ALGO_AUTO 0      /* chosen per call by the cost model */
#define SPCCL_ALGO_DENSE 1     /* exact MPI_Allreduce / ncclAllReduce */
#define SPCCL_ALGO_ALLGATHER 2 /* gather every rank's packed stream */
#define SPCCL_ALGO_SPLIT 3     /* reduce-scatter of pairs by index range, then allgather */

#define SPCCL_COMPRESS_CONFIG_VERSION 4

/*
 * Compression settings of one compressor. Always initialise with
 * spcclCompressConfigInit(), which sets size/version and the env defaults;
 * then change the fields you want. `size` and `version` let later releases
 * add fields without breaking callers built against this header.
 */
typedef struct {
  size_t size;                   /* sizeof(spcclCompressConfig_t), set by Init */
  unsigned int version;          /* SPCCL_COMPRESS_CONFIG_VERSION, set by Init */
  float density;                 /* fraction of entries kept, (0, 1]; 1 = exact */
  int thresholdInterval;         /* re-estimate tau every this many calls, >= 1; see thresholdWarmup for the
                                    first interval, capacityFactor and thresholdMinFraction for the calls
                                    that re-estimate off the schedule */
  int errorFeedback;             /* 1: unsent values carried to the next call */
  int algorithm;                 /* SPCCL_ALGO_* */
  spcclDataType_t wireValueType; /* spcclFloat32, spcclFloat16, spcclBfloat16 or spcclFloat8e4m3 */
  float capacityFactor;          /* a call never sends more than capacityFactor*k entries, >= 1; a stored tau
                                    that would is re-estimated in the call */
  /* Since version 2. Split algorithm (Ok-Topk's re-selection): each range
   * owner sends at most ceil(splitReselect*k/P) entries of its reduced range,
   * the largest in magnitude (NaN/Inf always), and keeps the rest in its
   * residual for the next call, so the allgathered result stays O(k).
   * 0 = send the whole reduced range. Only with errorFeedback = 1. */
  float splitReselect;
  /* Since version 3. A stored tau that selects fewer than
   * ceil(thresholdMinFraction*k) finite entries is re-estimated in that
   * call, in [0, 1]. 0 (the default) = DCT's rule: between scheduled
   * estimates tau stays fixed however few entries it selects, so the number
   * sent follows the gradients (docs/ALGORITHMS.md, step 3, has the
   * trade-off measured). */
  float thresholdMinFraction;
  /* Since version 4. 1 (the default): in the first thresholdInterval calls
   * tau is also estimated at calls 1, 2, 4, 8, ... (the powers of two below
   * thresholdInterval), so it follows the fast early shrinking of the
   * gradients, then every thresholdInterval calls as before: about
   * log2(thresholdInterval) more estimates, once. 0 = the schedule alone. */
  int thresholdWarmup;
} spcclCompressConfig_t;

/*
 * Counters. bytesSent/denseBytes is the wire compression ratio.
 * spcclCompressorGetStats: that compressor's allreduce calls, exact ones
 * included; the last* fields describe its last call.
 * spcclCommGetStats: the counters sum every collective on the communicator
 * (allreduce, alltoall, allgather, rows forward and backward, row-sparse
 * allreduce), exact ones included; the last* fields describe its last
 * allreduce (spcclAllReduce, or spcclAllReduceCompressed on any of its
 * compressors), and the other collectives leave them as they are.
 * Before the first allreduce the last* fields are 0.
 */
typedef struct {
  uint64_t calls;            /* collective calls, exact ones included */
  uint64_t compressedCalls;  /* calls that took a compressed algorithm */
  uint64_t bytesSent;        /* bytes this rank put on the wire, per receiving rank, headers
                                and size exchanges included, messages to itself excluded */
  uint64_t denseBytes;       /* what the dense collective sends per rank (nccl-tests' bus
                                convention): allreduce 2(P-1)/P*count*size, alltoall
                                (P-1)*count*size, allgather (P-1)*sendcount*size, row-sparse
                                allreduce (P-1)*nrows*(8 + rowLen*size) (allgather of the raw input) */
  uint64_t thresholdUpdates; /* exact tau estimations of compressed allreduce calls, every kind: the
                                first call, calls whose index is a multiple of thresholdInterval (and,
                                with thresholdWarmup, a power of two below it), a
                                call whose stored tau would select more than capacityFactor*k entries
                                or fewer than thresholdMinFraction*k (re-estimated in that call), and the
                                first compressed call after a dense one that sent the residual */
  uint64_t lastSelected;     /* last allreduce: entries this rank sent, the pairs it selected (NaN/Inf
                                included) when compressed, count when exact or dense; 0 in
                                SPCCL_CAPACITY_MODE=fixed (the count stays in executor memory) */
  float lastThreshold;       /* last allreduce: the tau it selected with; 0 when exact or dense, on
                                NCCL communicators (tau stays on the device) and in
                                SPCCL_CAPACITY_MODE=fixed */
  int lastAlgorithm;         /* last allreduce: the SPCCL_ALGO_* it took, SPCCL_ALGO_ALLGATHER or
                                SPCCL_ALGO_SPLIT when compressed, SPCCL_ALGO_DENSE when exact or dense
                                (never SPCCL_ALGO_AUTO: 0 only before the first allreduce) */
} spcclStats_t;

SPCCL_API spcclResult_t spcclGetVersion(int* version);
SPCCL_API const char* spcclGetErrorString(spcclResult_t result);
/* Detailed message of this thread's last failure ("" if none). comm may be NULL. */
SPCCL_API const char* spcclGetLastError(spcclComm_t comm);

SPCCL_API spcclResult_t spcclCommCount(const spcclComm_t comm, int* count);
SPCCL_API spcclResult_t spcclCommUserRank(const spcclComm_t comm, int* rank);
/*
 * Frees the communicator and spcclAllReduce's implicit compressors. Compressors
 * from spcclCompressorCreate and selections are not freed: using one afterwards
 * is spcclInvalidUsage, and spcclCompressorDestroy / spcclSelectionDestroy
 * still free it (before or after this call).
 */
SPCCL_API spcclResult_t spcclCommDestroy(spcclComm_t comm);
SPCCL_API spcclResult_t spcclCommGetStats(const spcclComm_t comm, spcclStats_t* stats);

/*
 * Drop-in allreduce, NCCL's signature. Float buffers (fp32, fp16, bf16) of at
 * least SPCCL_MIN_COMPRESS_COUNT (and at most 2^32 - 1) elements with
 * spcclSum/spcclAvg are compressed with the env defaults; their error-feedback state lives in an
 * implicit compressor keyed by (recvbuff, count, datatype), kept until the
 * communicator is destroyed: reuse the same gradient buffers every step (a
 * buffer that moves leaves its residual behind; spccl warns at 64 such
 * compressors and each doubling). Everything else is exact. In place when
 * sendbuff == recvbuff.
 */
SPCCL_API spcclResult_t spcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                                       spcclRedOp_t op, spcclComm_t comm, void* stream);

/*
 * Fills *config with SPCCL_* env defaults (size and version included). Used
 * as written, spcclCompressConfigInit(&config) is the macro below: it passes
 * this header's sizeof(spcclCompressConfig_t) and
 * SPCCL_COMPRESS_CONFIG_VERSION, and spcclCompressConfigInitVersion writes
 * only the fields of that version, so a program built against this header
 * stays correct with a later library whose struct has grown. The function of
 * the same name (taken by address, or with the macro #undef'd), which
 * programs built before the macro call, fills version 2's layout (40 bytes,
 * version 2: the fields up to splitReselect; later fields take their env
 * defaults at spcclCompressorCreate).
 */
SPCCL_API spcclResult_t spcclCompressConfigInit(spcclCompressConfig_t* config);
SPCCL_API spcclResult_t spcclCompressConfigInitVersion(spcclCompressConfig_t* config, size_t size,
                                                       unsigned int version);
#define spcclCompressConfigInit(config) \
  spcclCompressConfigInitVersion((config), sizeof(spcclCompressConfig_t), SPCCL_COMPRESS_CONFIG_VERSION)
/*
 * config NULL = the communicator's env defaults. Collective: no, purely local.
 * Memory on a host (MPI) communicator: the compressor holds its error-feedback
 * residual, two fp32 buffers of count (8 bytes an element), from its first
 * compressed call on; the scratch of a call is the communicator's, shared by
 * all its compressors and grown to the largest call (docs/ALGORITHMS.md).
 */
SPCCL_API spcclResult_t spcclCompressorCreate(spcclComm_t comm, size_t count, spcclDataType_t datatype,
                                              const spcclCompressConfig_t* config, spcclCompressor_t* out);
SPCCL_API spcclResult_t spcclAllReduceCompressed(const void* sendbuff, void* recvbuff, spcclRedOp_t op,
                                                 spcclCompressor_t compressor, void* stream);
SPCCL_API spcclResult_t spcclCompressorGetStats(const spcclCompressor_t compressor, spcclStats_t* stats);
/* Error-feedback residual (count fp32 values) copied out, for inspection and checkpoints. */
SPCCL_API spcclResult_t spcclCompressorGetResidual(const spcclCompressor_t compressor, float* residual, size_t count);
SPCCL_API spcclResult_t spcclCompressorDestroy(spcclCompressor_t compressor);

/*
 * Drop-in alltoall, NCCL 2.28's ncclAlltoAll semantics: block j of `count`
 * elements of sendbuff goes to rank j; block i of recvbuff comes from rank i.
 * Exact by default. With SPCCL_ALLTOALL_DENSITY < 1 and SPCCL_ALLTOALL_ROW_LEN=L
 * (L dividing count), fp32/fp16/bf16 blocks are compressed row by row as in
 * spcclAlltoAllRowsCompressed (the selection is not kept).
 */
SPCCL_API spcclResult_t spcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                                      spcclComm_t comm, void* stream);

/*
 * Drop-in allgather, NCCL's semantics (in place when
 * sendbuff == recvbuff + rank*sendcount). Exact by default. With
 * SPCCL_ALLGATHER_DENSITY < 1, fp32/fp16/bf16 blocks are sparsified by each
 * rank's own top-k (k = ceil(density*sendcount), the density read as the
 * decimal it was written as: docs/ALGORITHMS.md) before gathering; the output
 * holds zeros elsewhere. No error feedback: an allgather is not a reduction.
 */
SPCCL_API spcclResult_t spcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, spcclDataType_t datatype,
                                       spcclComm_t comm, void* stream);

/*
 * DCT-MP forward: sendbuff holds P blocks of rowsPerPeer rows of rowLen
 * elements, block j for rank j. Every row keeps its max(1, ceil(density*rowLen))
 * entries (counted as the allgather's k) of largest magnitude (ties: lower
 * index first; NaN/Inf always kept, even beyond that number). recvbuff
 * receives P blocks of dense rows with zeros at the dropped positions.
 * *selection (created here; NULL selection pointer = not kept) remembers the
 * kept positions of every sent and received row for
 * spcclAlltoAllRowsBackward. fp32, fp16 and bf16 only.
 */
SPCCL_API spcclResult_t spcclAlltoAllRowsCompressed(const void* sendbuff, void* recvbuff, size_t rowsPerPeer,
                                                    size_t rowLen, spcclDataType_t datatype, float density,
                                                    spcclSelection_t* selection, spcclComm_t comm, void* stream);

/*
 * DCT-MP backward: gradSendbuff has the shape of the forward's recvbuff,
 * gradRecvbuff the shape of its sendbuff. Only the values at the kept positions
 * travel (no indices); gradRecvbuff is zero elsewhere: the gradient of the
 * forward's masking. A selection serves one backward.
 */
SPCCL_API spcclResult_t spcclAlltoAllRowsBackward(const void* gradSendbuff, void* gradRecvbuff,
                                                  spcclSelection_t selection, void* stream);
SPCCL_API spcclResult_t spcclSelectionDestroy(spcclSelection_t selection);

/*
 * Row-sparse allreduce (embedding gradients): each rank passes nrows
 * (id, row) pairs, ids in any order and possibly repeated; every rank gets
 * the sorted unique ids of the union over ranks, each with the sum of all its
 * rows, bitwise identical everywhere. Duplicates are merged locally before
 * anything is sent. If the union has more than outCapacity ids, a rank
 * returns spcclInvalidUsage and *outNrows holds the size needed (with the
 * same outCapacity on every rank, every rank; a rank with enough capacity
 * succeeds). Rows are
 * summed in fp32 (fp64 for spcclFloat64) in rank order; fp32, fp64, fp16, bf16.
 * SPCCL_ROWSPARSE_ALGO picks allgather, partition (ids hashed to owners,
 * owners sum, owners' results allgathered) or auto.
 */
SPCCL_API spcclResult_t spcclAllReduceRowSparse(const int64_t* rowIds, const void* rows, size_t nrows, size_t rowLen,
                                                spcclDataType_t datatype, int64_t* outRowIds, void* outRows,
                                                size_t outCapacity, size_t* outNrows, spcclComm_t comm, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* SPCCL_H_ */
