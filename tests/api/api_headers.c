/*
 * Compiles the public headers and checks the parts of the API that other
 * programs build against: NCCL's numbering of results, datatypes and ops, and
 * the exact signature of every entry point. Built as C99 (-pedantic) and as
 * C++ from the same text (api_headers.cc includes this file). Never linked
 * against libspccl: every function is only named inside sizeof, so a header
 * that compiles is all this needs.
 *
 * SPCCL_API_TEST_MPI=1 also includes spccl_mpi.h, SPCCL_API_TEST_NCCL=1
 * spccl_nccl.h; without them only spccl.h is seen, and the target has neither
 * MPI's nor CUDA's include path, which proves spccl.h stands alone.
 */
#include "spccl.h"
#if SPCCL_API_TEST_MPI
#include "spccl_mpi.h"
#include "spccl.h" /* twice: include guards */
#endif
#if SPCCL_API_TEST_NCCL
#include "spccl_nccl.h"
#endif

#include <stdio.h>

/*
 * A pointer comparison between distinct function-pointer types is an error in
 * C++ and a diagnostic in C (an error under -Werror). Inside sizeof nothing is
 * evaluated, so no symbol is referenced.
 */
#define SPCCL_CHECK_SIGNATURE(fn, type) typedef char spcclSig_##fn[sizeof((type)0 == &fn) ? 1 : -1]

SPCCL_CHECK_SIGNATURE(spcclGetVersion, spcclResult_t (*)(int*));
SPCCL_CHECK_SIGNATURE(spcclGetErrorString, const char* (*)(spcclResult_t));
SPCCL_CHECK_SIGNATURE(spcclGetLastError, const char* (*)(spcclComm_t));
SPCCL_CHECK_SIGNATURE(spcclCommCount, spcclResult_t (*)(const spcclComm_t, int*));
SPCCL_CHECK_SIGNATURE(spcclCommUserRank, spcclResult_t (*)(const spcclComm_t, int*));
SPCCL_CHECK_SIGNATURE(spcclCommDestroy, spcclResult_t (*)(spcclComm_t));
SPCCL_CHECK_SIGNATURE(spcclCommGetStats, spcclResult_t (*)(const spcclComm_t, spcclStats_t*));
SPCCL_CHECK_SIGNATURE(spcclAllReduce,
                      spcclResult_t (*)(const void*, void*, size_t, spcclDataType_t, spcclRedOp_t, spcclComm_t, void*));
SPCCL_CHECK_SIGNATURE(spcclCompressConfigInit, spcclResult_t (*)(spcclCompressConfig_t*));
SPCCL_CHECK_SIGNATURE(spcclCompressConfigInitVersion, spcclResult_t (*)(spcclCompressConfig_t*, size_t, unsigned int));
SPCCL_CHECK_SIGNATURE(spcclCompressorCreate, spcclResult_t (*)(spcclComm_t, size_t, spcclDataType_t,
                                                               const spcclCompressConfig_t*, spcclCompressor_t*));
SPCCL_CHECK_SIGNATURE(spcclAllReduceCompressed,
                      spcclResult_t (*)(const void*, void*, spcclRedOp_t, spcclCompressor_t, void*));
SPCCL_CHECK_SIGNATURE(spcclCompressorGetStats, spcclResult_t (*)(const spcclCompressor_t, spcclStats_t*));
SPCCL_CHECK_SIGNATURE(spcclCompressorGetResidual, spcclResult_t (*)(const spcclCompressor_t, float*, size_t));
SPCCL_CHECK_SIGNATURE(spcclCompressorDestroy, spcclResult_t (*)(spcclCompressor_t));
SPCCL_CHECK_SIGNATURE(spcclAlltoAll,
                      spcclResult_t (*)(const void*, void*, size_t, spcclDataType_t, spcclComm_t, void*));
SPCCL_CHECK_SIGNATURE(spcclAllGather,
                      spcclResult_t (*)(const void*, void*, size_t, spcclDataType_t, spcclComm_t, void*));
SPCCL_CHECK_SIGNATURE(spcclAlltoAllRowsCompressed,
                      spcclResult_t (*)(const void*, void*, size_t, size_t, spcclDataType_t, float, spcclSelection_t*,
                                        spcclComm_t, void*));
SPCCL_CHECK_SIGNATURE(spcclAlltoAllRowsBackward, spcclResult_t (*)(const void*, void*, spcclSelection_t, void*));
SPCCL_CHECK_SIGNATURE(spcclSelectionDestroy, spcclResult_t (*)(spcclSelection_t));
SPCCL_CHECK_SIGNATURE(spcclAllReduceRowSparse,
                      spcclResult_t (*)(const int64_t*, const void*, size_t, size_t, spcclDataType_t, int64_t*, void*,
                                        size_t, size_t*, spcclComm_t, void*));
#if SPCCL_API_TEST_MPI
SPCCL_CHECK_SIGNATURE(spcclCommInitMPI, spcclResult_t (*)(spcclComm_t*, MPI_Comm));
#endif
#if SPCCL_API_TEST_NCCL
SPCCL_CHECK_SIGNATURE(spcclCommInitNccl, spcclResult_t (*)(spcclComm_t*, ncclComm_t));
#endif

static int failures = 0;

static void expectEq(const char* name, long long got, long long want) {
  if (got != want) {
    fprintf(stderr, "FAIL: %s = %lld, expected %lld\n", name, got, want);
    ++failures;
  }
}

#define EXPECT_VALUE(name, want) expectEq(#name, (long long)(name), (long long)(want))

int main(void) {
  /* ncclResult_t */
  EXPECT_VALUE(spcclSuccess, 0);
  EXPECT_VALUE(spcclUnhandledCudaError, 1);
  EXPECT_VALUE(spcclSystemError, 2);
  EXPECT_VALUE(spcclInternalError, 3);
  EXPECT_VALUE(spcclInvalidArgument, 4);
  EXPECT_VALUE(spcclInvalidUsage, 5);
  EXPECT_VALUE(spcclRemoteError, 6);

  /* ncclDataType_t, aliases included */
  EXPECT_VALUE(spcclInt8, 0);
  EXPECT_VALUE(spcclChar, 0);
  EXPECT_VALUE(spcclUint8, 1);
  EXPECT_VALUE(spcclInt32, 2);
  EXPECT_VALUE(spcclInt, 2);
  EXPECT_VALUE(spcclUint32, 3);
  EXPECT_VALUE(spcclInt64, 4);
  EXPECT_VALUE(spcclUint64, 5);
  EXPECT_VALUE(spcclFloat16, 6);
  EXPECT_VALUE(spcclHalf, 6);
  EXPECT_VALUE(spcclFloat32, 7);
  EXPECT_VALUE(spcclFloat, 7);
  EXPECT_VALUE(spcclFloat64, 8);
  EXPECT_VALUE(spcclDouble, 8);
  EXPECT_VALUE(spcclBfloat16, 9);
  EXPECT_VALUE(spcclFloat8e4m3, 10);

  /* ncclRedOp_t */
  EXPECT_VALUE(spcclSum, 0);
  EXPECT_VALUE(spcclProd, 1);
  EXPECT_VALUE(spcclMax, 2);
  EXPECT_VALUE(spcclMin, 3);
  EXPECT_VALUE(spcclAvg, 4);

  /* The ends of the lists (README): NCCL 2.28 has one result and one type more. */
  EXPECT_VALUE(spcclNumResults, 7);
  EXPECT_VALUE(spcclNumTypes, 11);
  EXPECT_VALUE(spcclNumOps, 5);

#if SPCCL_API_TEST_NCCL
  /* The same values, against the nccl.h in view: a cast turns one into the other. */
  EXPECT_VALUE(spcclSuccess, ncclSuccess);
  EXPECT_VALUE(spcclUnhandledCudaError, ncclUnhandledCudaError);
  EXPECT_VALUE(spcclSystemError, ncclSystemError);
  EXPECT_VALUE(spcclInternalError, ncclInternalError);
  EXPECT_VALUE(spcclInvalidArgument, ncclInvalidArgument);
  EXPECT_VALUE(spcclInvalidUsage, ncclInvalidUsage);
  EXPECT_VALUE(spcclRemoteError, ncclRemoteError);
  EXPECT_VALUE(spcclInt8, ncclInt8);
  EXPECT_VALUE(spcclChar, ncclChar);
  EXPECT_VALUE(spcclUint8, ncclUint8);
  EXPECT_VALUE(spcclInt32, ncclInt32);
  EXPECT_VALUE(spcclInt, ncclInt);
  EXPECT_VALUE(spcclUint32, ncclUint32);
  EXPECT_VALUE(spcclInt64, ncclInt64);
  EXPECT_VALUE(spcclUint64, ncclUint64);
  EXPECT_VALUE(spcclFloat16, ncclFloat16);
  EXPECT_VALUE(spcclHalf, ncclHalf);
  EXPECT_VALUE(spcclFloat32, ncclFloat32);
  EXPECT_VALUE(spcclFloat, ncclFloat);
  EXPECT_VALUE(spcclFloat64, ncclFloat64);
  EXPECT_VALUE(spcclDouble, ncclDouble);
  EXPECT_VALUE(spcclBfloat16, ncclBfloat16);
  EXPECT_VALUE(spcclFloat8e4m3, ncclFloat8e4m3);
  EXPECT_VALUE(spcclSum, ncclSum);
  EXPECT_VALUE(spcclProd, ncclProd);
  EXPECT_VALUE(spcclMax, ncclMax);
  EXPECT_VALUE(spcclMin, ncclMin);
  EXPECT_VALUE(spcclAvg, ncclAvg);
  EXPECT_VALUE(spcclNumOps, ncclNumOps);
  EXPECT_VALUE(sizeof(spcclResult_t), sizeof(ncclResult_t));
  EXPECT_VALUE(sizeof(spcclDataType_t), sizeof(ncclDataType_t));
  EXPECT_VALUE(sizeof(spcclRedOp_t), sizeof(ncclRedOp_t));
#endif

  /* NCCL_VERSION_CODE's encoding */
  EXPECT_VALUE(SPCCL_VERSION(2, 19, 3), 21903);
  EXPECT_VALUE(SPCCL_VERSION_CODE, SPCCL_VERSION(SPCCL_MAJOR, SPCCL_MINOR, SPCCL_PATCH));

  /* Config structs lead with size and version, so later fields can be added. */
  {
    spcclCompressConfig_t config;
    EXPECT_VALUE((char*)&config.size - (char*)&config, 0);
    EXPECT_VALUE(sizeof(config.size), sizeof(size_t));
  }

  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("public headers OK as %s: spccl.h%s%s\n",
#ifdef __cplusplus
         "C++",
#else
         "C",
#endif
         SPCCL_API_TEST_MPI ? ", spccl_mpi.h" : "", SPCCL_API_TEST_NCCL ? ", spccl_nccl.h" : "");
  return 0;
}
