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
  spcclNumTypes = 10
} spcclDataType_t;

typedef enum {
  spcclSum = 0,
  spcclProd = 1,
  spcclMax = 2,
  spcclMin = 3,
  spcclAvg = 4,
  spcclNumOps = 5
} spcclRedOp_t;

typedef struct spcclComm* spcclComm_t;
typedef struct spcclCompressor* spcclCompressor_t;

/* Allreduce algorithms (spcclCompressConfig_t.algorithm, SPCCL_ALGO). */
#define SPCCL_ALGO_AUTO 0      /* chosen per call by the cost model */
#define SPCCL_ALGO_DENSE 1     /* exact MPI_Allreduce / ncclAllReduce */
#define SPCCL_ALGO_ALLGATHER 2 /* gather every rank's packed stream */
#define SPCCL_ALGO_SPLIT 3     /* reduce-scatter of pairs by index range, then allgather */

#define SPCCL_COMPRESS_CONFIG_VERSION 1

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
  int thresholdInterval;         /* re-estimate tau every this many calls, >= 1 */
  int errorFeedback;             /* 1: unsent values carried to the next call */
  int algorithm;                 /* SPCCL_ALGO_* */
  spcclDataType_t wireValueType; /* spcclFloat32, spcclFloat16 or spcclBfloat16 */
  float capacityFactor;          /* a call never sends more than capacityFactor*k entries, >= 1 */
} spcclCompressConfig_t;

/* Counters. bytesSent/denseBytes is the wire compression ratio. */
typedef struct {
  uint64_t calls;            /* allreduce calls, exact ones included */
  uint64_t compressedCalls;  /* calls that took a compressed algorithm */
  uint64_t bytesSent;        /* bytes this rank put on the wire, per receiving rank, headers
                                included, messages to itself excluded */
  uint64_t denseBytes;       /* 2(P-1)/P * count * sizeof(datatype) summed over the calls */
  uint64_t thresholdUpdates; /* exact tau estimations (scheduled and capacity-triggered) */
  uint64_t lastSelected;     /* entries this rank selected in its last compressed call */
  float lastThreshold;       /* tau used in the last compressed call */
  int lastAlgorithm;         /* SPCCL_ALGO_* taken by the last call */
} spcclStats_t;

SPCCL_API spcclResult_t spcclGetVersion(int* version);
SPCCL_API const char* spcclGetErrorString(spcclResult_t result);
/* Detailed message of this thread's last failure ("" if none). comm may be NULL. */
SPCCL_API const char* spcclGetLastError(spcclComm_t comm);

SPCCL_API spcclResult_t spcclCommCount(const spcclComm_t comm, int* count);
SPCCL_API spcclResult_t spcclCommUserRank(const spcclComm_t comm, int* rank);
/* Frees the communicator and every compressor still attached to it. */
SPCCL_API spcclResult_t spcclCommDestroy(spcclComm_t comm);
SPCCL_API spcclResult_t spcclCommGetStats(const spcclComm_t comm, spcclStats_t* stats);

/*
 * Drop-in allreduce, NCCL's signature. Float buffers (fp32, fp16, bf16) of at
 * least SPCCL_MIN_COMPRESS_COUNT elements with spcclSum/spcclAvg are
 * compressed with the env defaults; their error-feedback state lives in an
 * implicit compressor keyed by (recvbuff, count, datatype). Everything else is
 * exact. In place when sendbuff == recvbuff.
 */
SPCCL_API spcclResult_t spcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       spcclDataType_t datatype, spcclRedOp_t op,
                                       spcclComm_t comm, void* stream);

/* Fills *config with SPCCL_* env defaults (size and version included). */
SPCCL_API spcclResult_t spcclCompressConfigInit(spcclCompressConfig_t* config);
/* config NULL = the communicator's env defaults. Collective: no, purely local. */
SPCCL_API spcclResult_t spcclCompressorCreate(spcclComm_t comm, size_t count,
                                              spcclDataType_t datatype,
                                              const spcclCompressConfig_t* config,
                                              spcclCompressor_t* out);
SPCCL_API spcclResult_t spcclAllReduceCompressed(const void* sendbuff, void* recvbuff,
                                                 spcclRedOp_t op, spcclCompressor_t compressor,
                                                 void* stream);
SPCCL_API spcclResult_t spcclCompressorGetStats(const spcclCompressor_t compressor,
                                                spcclStats_t* stats);
/* Error-feedback residual (count fp32 values) copied out, for inspection and checkpoints. */
SPCCL_API spcclResult_t spcclCompressorGetResidual(const spcclCompressor_t compressor,
                                                   float* residual, size_t count);
SPCCL_API spcclResult_t spcclCompressorDestroy(spcclCompressor_t compressor);

#ifdef __cplusplus
}
#endif

#endif /* SPCCL_H_ */
