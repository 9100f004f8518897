// Create/use/destroy cycles of every object the library hands out, on 2 (or
// more) ranks, for LeakSanitizer: communicators, explicit and implicit
// compressors, selections (backward, destroyed with and without a backward,
// used twice, used after their communicator), row-sparse, alltoall and
// allgather calls, and the error paths (bad arguments, mismatched calls).
//
// Three checks, each agreed across ranks before the exit code is set:
//  1. every call returns the code it must (a cycle that fails early would
//     leave paths unexercised);
//  2. heap in use does not grow between the second round and the last
//     (memory still referenced, e.g. a registry that never shrinks, is not a
//     leak to LeakSanitizer but is to a week-long job);
//  3. every MPI communicator, datatype and op the library creates is freed
//     (counted through the MPI profiling interface, below). LSan cannot see
//     these: their memory is allocated inside libmpi, whose frames the
//     suppression file ignores.
// Unreachable memory is LeakSanitizer's: this program runs its leak check
// itself, after the cycles and before MPI_Finalize (ASAN_OPTIONS=detect_leaks=1,
// LSAN_OPTIONS=leak_check_at_exit=0:suppressions=tests/sanitize/lsan.supp).
// Not at exit: by then Open MPI has unloaded its components, so its own
// leftovers have stack frames no suppression can name; and spccl allocates
// nothing after the cycles.
//
// Usage: spccl_leak_cycles [rounds] [--deliberate-leak]
// --deliberate-leak loses 4096 bytes from this program, so a ctest can check
// that LeakSanitizer is active and the suppressions do not hide it.
#include <mpi.h>
#include <spccl.h>
#include <spccl_mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPCCL_LEAK_HAVE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SPCCL_LEAK_HAVE_ASAN 1
#endif
#ifdef SPCCL_LEAK_HAVE_ASAN
// From <sanitizer/allocator_interface.h> and <sanitizer/lsan_interface.h>,
// which GCC's Debian packages do not install; the runtime exports both with
// either compiler.
extern "C" size_t __sanitizer_get_current_allocated_bytes(void);
extern "C" int __lsan_do_recoverable_leak_check(void);
#endif

namespace {

int gRank = 0, gSize = 1;
int gFailures = 0;

void fail(const std::string& what) {
  ++gFailures;
  std::fprintf(stderr, "[rank %d] FAILED: %s\n", gRank, what.c_str());
}

void expectCode(spcclResult_t got, spcclResult_t want, const char* what) {
  if (got != want)
    fail(std::string(what) + ": got " + std::to_string(got) + " (" + spcclGetErrorString(got) +
         (got != spcclSuccess ? std::string(": ") + spcclGetLastError(nullptr) : std::string()) + "), expected " +
         std::to_string(want));
}
void ok(spcclResult_t r, const char* what) { expectCode(r, spcclSuccess, what); }

// A mismatched call must fail on every rank; which code a rank sees first may
// differ (its own descriptor check, or the peer's), but never success.
void failsEverywhere(spcclResult_t r, const char* what) {
  int succeeded = r == spcclSuccess ? 1 : 0, anySucceeded = 0;
  MPI_Allreduce(&succeeded, &anySucceeded, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (anySucceeded) fail(std::string(what) + ": succeeded on some rank");
}

spcclComm_t makeComm(const char* rowSparseAlgo = "auto", const char* allgatherDensity = "1",
                     const char* alltoallDensity = "1") {
  // Read by spcclCommInitMPI: set identically on every rank.
  setenv("SPCCL_ROWSPARSE_ALGO", rowSparseAlgo, 1);
  setenv("SPCCL_ALLGATHER_DENSITY", allgatherDensity, 1);
  setenv("SPCCL_ALLTOALL_DENSITY", alltoallDensity, 1);
  setenv("SPCCL_ALLTOALL_ROW_LEN", "64", 1);
  setenv("SPCCL_MIN_COMPRESS_COUNT", "1024", 1);
  spcclComm_t comm = nullptr;
  ok(spcclCommInitMPI(&comm, MPI_COMM_WORLD), "spcclCommInitMPI");
  return comm;
}

std::vector<float> data(size_t n, int salt) {
  std::vector<float> v(n);
  uint32_t x = 2463534242u + static_cast<uint32_t>(salt * 7919 + gRank * 104729);
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = static_cast<float>(static_cast<int32_t>(x % 20001) - 10000) / 1000.0f;
  }
  return v;
}

// ---- the cycles ----

void commCycle() {
  spcclComm_t comm = makeComm();
  int n = 0, r = -1;
  spcclStats_t stats;
  ok(spcclCommCount(comm, &n), "spcclCommCount");
  ok(spcclCommUserRank(comm, &r), "spcclCommUserRank");
  ok(spcclCommGetStats(comm, &stats), "spcclCommGetStats");
  ok(spcclCommDestroy(comm), "spcclCommDestroy");
  expectCode(spcclCommDestroy(comm), spcclInvalidUsage, "spcclCommDestroy twice");
  expectCode(spcclCommDestroy(nullptr), spcclInvalidArgument, "spcclCommDestroy(NULL)");
}

void explicitCompressorCycle(int round) {
  spcclComm_t comm = makeComm();
  const size_t n = 5000;
  const int algorithms[] = {SPCCL_ALGO_AUTO, SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT};
  const spcclDataType_t wires[] = {spcclFloat32, spcclFloat16, spcclBfloat16};
  const std::vector<float> in = data(n, round);
  std::vector<float> out(n), residual(n);
  for (int algorithm : algorithms) {
    for (spcclDataType_t wire : wires) {
      spcclCompressConfig_t config;
      ok(spcclCompressConfigInit(&config), "spcclCompressConfigInit");
      config.density = 0.05f;
      config.thresholdInterval = 2;
      config.algorithm = algorithm;
      config.wireValueType = wire;
      spcclCompressor_t c = nullptr;
      ok(spcclCompressorCreate(comm, n, spcclFloat32, &config, &c), "spcclCompressorCreate");
      ok(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c, nullptr), "spcclAllReduceCompressed sum");
      ok(spcclAllReduceCompressed(in.data(), out.data(), spcclAvg, c, nullptr), "spcclAllReduceCompressed avg");
      out = in;
      ok(spcclAllReduceCompressed(out.data(), out.data(), spcclSum, c, nullptr), "spcclAllReduceCompressed in place");
      spcclStats_t stats;
      ok(spcclCompressorGetStats(c, &stats), "spcclCompressorGetStats");
      ok(spcclCompressorGetResidual(c, residual.data(), n), "spcclCompressorGetResidual");
      ok(spcclCompressorDestroy(c), "spcclCompressorDestroy");
      expectCode(spcclCompressorDestroy(c), spcclInvalidUsage, "spcclCompressorDestroy twice");
    }
  }
  // A half-precision buffer, no error feedback, env defaults (config NULL).
  std::vector<uint16_t> half(n, 0x3c00), halfOut(n);
  spcclCompressor_t h = nullptr;
  ok(spcclCompressorCreate(comm, n, spcclFloat16, nullptr, &h), "spcclCompressorCreate(config NULL)");
  ok(spcclAllReduceCompressed(half.data(), halfOut.data(), spcclSum, h, nullptr), "fp16 spcclAllReduceCompressed");
  // Outliving its communicator: unusable, still destroyable.
  spcclCompressor_t orphan = nullptr;
  ok(spcclCompressorCreate(comm, n, spcclFloat32, nullptr, &orphan), "spcclCompressorCreate (orphan)");
  ok(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, orphan, nullptr), "orphan's first call");
  ok(spcclCompressorDestroy(h), "spcclCompressorDestroy fp16");
  ok(spcclCommDestroy(comm), "spcclCommDestroy");
  expectCode(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, orphan, nullptr), spcclInvalidUsage,
             "compressor used after its communicator");
  ok(spcclCompressorDestroy(orphan), "spcclCompressorDestroy after spcclCommDestroy");
}

void implicitCompressorCycle(int round) {
  spcclComm_t comm = makeComm();
  const size_t n = 4096;
  const std::vector<float> in = data(n, round);
  std::vector<float> a(n), b(n);
  std::vector<uint16_t> h(n, 0x3c00), hOut(n), bf(n, 0x3f80), bfOut(n);
  for (int call = 0; call < 2; ++call) {
    ok(spcclAllReduce(in.data(), a.data(), n, spcclFloat32, spcclSum, comm, nullptr), "spcclAllReduce fp32 (a)");
    ok(spcclAllReduce(in.data(), b.data(), n, spcclFloat32, spcclAvg, comm, nullptr), "spcclAllReduce fp32 (b)");
    ok(spcclAllReduce(h.data(), hOut.data(), n, spcclFloat16, spcclSum, comm, nullptr), "spcclAllReduce fp16");
    ok(spcclAllReduce(bf.data(), bfOut.data(), n, spcclBfloat16, spcclSum, comm, nullptr), "spcclAllReduce bf16");
  }
  // Exact paths: small, integer, other ops.
  std::vector<int32_t> ints(100, gRank + 1), intsOut(100);
  ok(spcclAllReduce(ints.data(), intsOut.data(), 100, spcclInt32, spcclProd, comm, nullptr), "spcclAllReduce int32");
  ok(spcclAllReduce(in.data(), a.data(), 100, spcclFloat32, spcclMax, comm, nullptr), "spcclAllReduce max");
  // The implicit compressors go with the communicator.
  ok(spcclCommDestroy(comm), "spcclCommDestroy with implicit compressors");
}

void selectionCycle(int round) {
  spcclComm_t comm = makeComm();
  struct Case {
    size_t rowsPerPeer, rowLen;
    spcclDataType_t type;
    float density;
  };
  const Case cases[] = {{8, 64, spcclFloat32, 0.25f}, {4, 300, spcclFloat16, 0.1f}, {3, 17, spcclBfloat16, 1.0f}};
  for (const Case& k : cases) {
    const size_t elems = static_cast<size_t>(gSize) * k.rowsPerPeer * k.rowLen;
    const size_t esize = k.type == spcclFloat32 ? 4 : 2;
    std::vector<unsigned char> send(elems * esize), recv(elems * esize), grad(elems * esize), gradOut(elems * esize);
    const std::vector<float> values = data(elems, round);
    if (k.type == spcclFloat32) std::memcpy(send.data(), values.data(), send.size());
    else
      for (size_t i = 0; i < elems; ++i) std::memcpy(send.data() + 2 * i, &values[i], 2);  // any bits will do
    grad = send;

    // forward, backward, destroy
    spcclSelection_t s = nullptr;
    ok(spcclAlltoAllRowsCompressed(send.data(), recv.data(), k.rowsPerPeer, k.rowLen, k.type, k.density, &s, comm,
                                   nullptr),
       "spcclAlltoAllRowsCompressed");
    ok(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), s, nullptr), "spcclAlltoAllRowsBackward");
    expectCode(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), s, nullptr), spcclInvalidUsage,
               "a second backward on one selection");
    ok(spcclSelectionDestroy(s), "spcclSelectionDestroy");
    expectCode(spcclSelectionDestroy(s), spcclInvalidUsage, "spcclSelectionDestroy twice");

    // forward, destroy without a backward
    ok(spcclAlltoAllRowsCompressed(send.data(), recv.data(), k.rowsPerPeer, k.rowLen, k.type, k.density, &s, comm,
                                   nullptr),
       "spcclAlltoAllRowsCompressed (no backward)");
    ok(spcclSelectionDestroy(s), "spcclSelectionDestroy without a backward");

    // forward without keeping a selection
    ok(spcclAlltoAllRowsCompressed(send.data(), recv.data(), k.rowsPerPeer, k.rowLen, k.type, k.density, nullptr, comm,
                                   nullptr),
       "spcclAlltoAllRowsCompressed (selection NULL)");
  }
  // A selection that outlives its communicator: unusable, still destroyable.
  const size_t elems = static_cast<size_t>(gSize) * 2 * 32;
  const std::vector<float> send = data(elems, round + 1);
  std::vector<float> recv(elems), gradOut(elems);
  spcclSelection_t s = nullptr;
  ok(spcclAlltoAllRowsCompressed(send.data(), recv.data(), 2, 32, spcclFloat32, 0.5f, &s, comm, nullptr),
     "spcclAlltoAllRowsCompressed (orphan)");
  ok(spcclCommDestroy(comm), "spcclCommDestroy with a live selection");
  expectCode(spcclAlltoAllRowsBackward(recv.data(), gradOut.data(), s, nullptr), spcclInvalidUsage,
             "backward after the communicator's destroy");
  ok(spcclSelectionDestroy(s), "spcclSelectionDestroy after spcclCommDestroy");
}

void rowSparseCycle(int round) {
  const char* algos[] = {"auto", "allgather", "partition"};
  for (const char* algo : algos) {
    spcclComm_t comm = makeComm(algo);
    const size_t nrows = 40, rowLen = 8;
    std::vector<int64_t> ids(nrows);
    for (size_t i = 0; i < nrows; ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(gRank) * 3) % 50);
    const std::vector<float> rows = data(nrows * rowLen, round);
    std::vector<double> rows64(rows.begin(), rows.end());
    std::vector<uint16_t> rows16(nrows * rowLen, 0x3c00);
    const size_t cap = 50 * static_cast<size_t>(gSize) + 8;
    std::vector<int64_t> outIds(cap);
    std::vector<double> outRows(cap * rowLen);  // large enough for any type
    size_t outN = 0;
    ok(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(), outRows.data(), cap,
                               &outN, comm, nullptr),
       "spcclAllReduceRowSparse fp32");
    ok(spcclAllReduceRowSparse(ids.data(), rows64.data(), nrows, rowLen, spcclFloat64, outIds.data(), outRows.data(),
                               cap, &outN, comm, nullptr),
       "spcclAllReduceRowSparse fp64");
    ok(spcclAllReduceRowSparse(ids.data(), rows16.data(), nrows, rowLen, spcclFloat16, outIds.data(), outRows.data(),
                               cap, &outN, comm, nullptr),
       "spcclAllReduceRowSparse fp16");
    ok(spcclAllReduceRowSparse(ids.data(), rows16.data(), nrows, rowLen, spcclBfloat16, outIds.data(), outRows.data(),
                               cap, &outN, comm, nullptr),
       "spcclAllReduceRowSparse bf16");
    // Too small an output: spcclInvalidUsage on every rank, the size needed in outN; then the retry.
    expectCode(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                       outRows.data(), 2, &outN, comm, nullptr),
               spcclInvalidUsage, "spcclAllReduceRowSparse with outCapacity 2");
    ok(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(), outRows.data(),
                               outN, &outN, comm, nullptr),
       "spcclAllReduceRowSparse retry");
    ok(spcclAllReduceRowSparse(nullptr, nullptr, 0, rowLen, spcclFloat32, outIds.data(), outRows.data(), cap, &outN,
                               comm, nullptr),
       "spcclAllReduceRowSparse with no rows");
    ok(spcclCommDestroy(comm), "spcclCommDestroy");
  }
}

void dropInCycle(int round) {
  for (int compressed = 0; compressed < 2; ++compressed) {
    spcclComm_t comm = compressed ? makeComm("auto", "0.1", "0.25") : makeComm();
    const size_t count = 64 * 4;
    const std::vector<float> send = data(count * static_cast<size_t>(gSize), round);
    std::vector<float> recv(count * static_cast<size_t>(gSize));
    ok(spcclAlltoAll(send.data(), recv.data(), count, spcclFloat32, comm, nullptr), "spcclAlltoAll");
    ok(spcclAllGather(send.data(), recv.data(), count, spcclFloat32, comm, nullptr), "spcclAllGather");
    std::vector<uint16_t> h(count * static_cast<size_t>(gSize), 0x3c00), hOut(h.size());
    ok(spcclAllGather(h.data(), hOut.data(), count, spcclBfloat16, comm, nullptr), "spcclAllGather bf16");
    ok(spcclCommDestroy(comm), "spcclCommDestroy");
  }
}

void errorCycle(int round) {
  spcclComm_t comm = makeComm();
  const size_t n = 4096;
  const std::vector<float> in = data(n, round);
  std::vector<float> out(n);
  const auto badType = static_cast<spcclDataType_t>(99);
  const auto badOp = static_cast<spcclRedOp_t>(99);
  int dummy = 0;
  // Bad arguments: local, nothing is sent.
  expectCode(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, spcclSum, nullptr, nullptr), spcclInvalidArgument,
             "spcclAllReduce(comm NULL)");
  expectCode(spcclAllReduce(nullptr, out.data(), n, spcclFloat32, spcclSum, comm, nullptr), spcclInvalidArgument,
             "spcclAllReduce(sendbuff NULL)");
  expectCode(spcclAllReduce(in.data(), out.data(), n, badType, spcclSum, comm, nullptr), spcclInvalidArgument,
             "spcclAllReduce(datatype 99)");
  expectCode(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, badOp, comm, nullptr), spcclInvalidArgument,
             "spcclAllReduce(op 99)");
  expectCode(spcclAllReduce(in.data(), out.data(), SIZE_MAX, spcclFloat32, spcclSum, comm, nullptr),
             spcclInvalidArgument, "spcclAllReduce(count SIZE_MAX)");
  expectCode(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, spcclSum, comm, &dummy), spcclInvalidArgument,
             "spcclAllReduce(stream not NULL)");
  spcclCompressConfig_t config;
  ok(spcclCompressConfigInit(&config), "spcclCompressConfigInit");
  spcclCompressor_t c = nullptr;
  config.density = 0.0f;
  expectCode(spcclCompressorCreate(comm, n, spcclFloat32, &config, &c), spcclInvalidArgument,
             "spcclCompressorCreate(density 0)");
  config.density = 2.0f;
  expectCode(spcclCompressorCreate(comm, n, spcclFloat32, &config, &c), spcclInvalidArgument,
             "spcclCompressorCreate(density 2)");
  spcclSelection_t s = nullptr;
  expectCode(spcclAlltoAllRowsCompressed(in.data(), out.data(), 1, 0, spcclFloat32, 0.5f, &s, comm, nullptr),
             spcclInvalidArgument, "spcclAlltoAllRowsCompressed(rowLen 0)");
  expectCode(spcclAlltoAllRowsCompressed(in.data(), out.data(), 1, 8, spcclFloat32, 0.0f, &s, comm, nullptr),
             spcclInvalidArgument, "spcclAlltoAllRowsCompressed(density 0)");
  expectCode(spcclAlltoAllRowsBackward(in.data(), out.data(), nullptr, nullptr), spcclInvalidArgument,
             "spcclAlltoAllRowsBackward(selection NULL)");
  size_t outN = 0;
  expectCode(spcclAllReduceRowSparse(nullptr, nullptr, 0, 0, spcclFloat32, nullptr, nullptr, 0, &outN, comm, nullptr),
             spcclInvalidArgument, "spcclAllReduceRowSparse(rowLen 0)");

  // Mismatched calls across ranks: an error on every rank, the communicator usable afterwards.
  const bool odd = gRank % 2 == 1;
  const size_t myN = odd ? n + 64 : n;
  std::vector<float> big = data(n + 64, round), bigOut(n + 64);
  failsEverywhere(spcclAllReduce(big.data(), bigOut.data(), myN, spcclFloat32, spcclSum, comm, nullptr),
                  "spcclAllReduce with counts differing across ranks");
  config.density = 0.05f;
  config.algorithm = odd ? SPCCL_ALGO_SPLIT : SPCCL_ALGO_ALLGATHER;
  ok(spcclCompressorCreate(comm, n, spcclFloat32, &config, &c), "spcclCompressorCreate (mismatched algorithm)");
  failsEverywhere(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c, nullptr),
                  "spcclAllReduceCompressed with algorithms differing across ranks");
  ok(spcclCompressorDestroy(c), "spcclCompressorDestroy");
  const size_t rowLen = odd ? 32 : 64;
  std::vector<float> rowsIn = data(static_cast<size_t>(gSize) * 2 * 64, round), rowsOut(rowsIn.size());
  failsEverywhere(
      spcclAlltoAllRowsCompressed(rowsIn.data(), rowsOut.data(), 2, rowLen, spcclFloat32, 0.25f, &s, comm, nullptr),
      "spcclAlltoAllRowsCompressed with row lengths differing across ranks");
  if (s != nullptr) ok(spcclSelectionDestroy(s), "spcclSelectionDestroy");
  std::vector<int64_t> ids = {1, 2, 3};
  std::vector<double> outRows(64 * 16);
  std::vector<int64_t> outIds(64);
  failsEverywhere(spcclAllReduceRowSparse(ids.data(), rowsIn.data(), 3, odd ? 8 : 16, spcclFloat32, outIds.data(),
                                          outRows.data(), 64, &outN, comm, nullptr),
                  "spcclAllReduceRowSparse with row lengths differing across ranks");
  ok(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, spcclSum, comm, nullptr),
     "spcclAllReduce after the mismatched calls");
  ok(spcclCommDestroy(comm), "spcclCommDestroy");
}

// ---- MPI handles ----
// Live communicators, datatypes and ops, counted by wrapping their
// constructors and destructors (the MPI profiling interface: these
// definitions take the place of the library's, and call PMPI_*). libspccl's
// MPI calls land here too, so after the cycles the counts must be back where
// they started.
struct HandleCounts {
  long comms = 0, types = 0, ops = 0;
};
HandleCounts gLive;

int countComm(int rc, const MPI_Comm* out) {
  if (rc == MPI_SUCCESS && *out != MPI_COMM_NULL) ++gLive.comms;
  return rc;
}
int countType(int rc) {
  if (rc == MPI_SUCCESS) ++gLive.types;
  return rc;
}

}  // namespace

extern "C" {
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) { return countComm(PMPI_Comm_dup(comm, out), out); }
int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm* out) {
  return countComm(PMPI_Comm_dup_with_info(comm, info, out), out);
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  return countComm(PMPI_Comm_split(comm, color, key, out), out);
}
int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm* out) {
  return countComm(PMPI_Comm_split_type(comm, type, key, info, out), out);
}
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* out) {
  return countComm(PMPI_Comm_create(comm, group, out), out);
}
int MPI_Comm_free(MPI_Comm* comm) {
  const int rc = PMPI_Comm_free(comm);
  if (rc == MPI_SUCCESS) --gLive.comms;
  return rc;
}
int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype* out) {
  return countType(PMPI_Type_contiguous(count, old, out));
}
int MPI_Type_vector(int count, int len, int stride, MPI_Datatype old, MPI_Datatype* out) {
  return countType(PMPI_Type_vector(count, len, stride, old, out));
}
int MPI_Type_create_hvector(int count, int len, MPI_Aint stride, MPI_Datatype old, MPI_Datatype* out) {
  return countType(PMPI_Type_create_hvector(count, len, stride, old, out));
}
int MPI_Type_indexed(int count, const int lens[], const int displs[], MPI_Datatype old, MPI_Datatype* out) {
  return countType(PMPI_Type_indexed(count, lens, displs, old, out));
}
int MPI_Type_create_indexed_block(int count, int len, const int displs[], MPI_Datatype old, MPI_Datatype* out) {
  return countType(PMPI_Type_create_indexed_block(count, len, displs, old, out));
}
int MPI_Type_create_struct(int count, const int lens[], const MPI_Aint displs[], const MPI_Datatype types[],
                           MPI_Datatype* out) {
  return countType(PMPI_Type_create_struct(count, lens, displs, types, out));
}
int MPI_Type_create_resized(MPI_Datatype old, MPI_Aint lb, MPI_Aint extent, MPI_Datatype* out) {
  return countType(PMPI_Type_create_resized(old, lb, extent, out));
}
int MPI_Type_dup(MPI_Datatype old, MPI_Datatype* out) { return countType(PMPI_Type_dup(old, out)); }
int MPI_Type_free(MPI_Datatype* type) {
  const int rc = PMPI_Type_free(type);
  if (rc == MPI_SUCCESS) --gLive.types;
  return rc;
}
int MPI_Op_create(MPI_User_function* fn, int commute, MPI_Op* op) {
  const int rc = PMPI_Op_create(fn, commute, op);
  if (rc == MPI_SUCCESS) ++gLive.ops;
  return rc;
}
int MPI_Op_free(MPI_Op* op) {
  const int rc = PMPI_Op_free(op);
  if (rc == MPI_SUCCESS) --gLive.ops;
  return rc;
}
}  // extern "C"

namespace {

size_t heapInUse() {
#ifdef SPCCL_LEAK_HAVE_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  return 0;
#endif
}

__attribute__((noinline)) void deliberateLeak() {
  void* volatile lost = std::malloc(4096);
  std::memset(lost, 1, 4096);
  lost = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  int rounds = 6;
  bool leak = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--deliberate-leak") == 0) leak = true;
    else rounds = std::atoi(argv[i]);
  }
  if (rounds < 3) rounds = 3;

  const HandleCounts before = gLive;
  size_t heapAfterWarmup = 0;
  for (int round = 0; round < rounds; ++round) {
    commCycle();
    explicitCompressorCycle(round);
    implicitCompressorCycle(round);
    selectionCycle(round);
    rowSparseCycle(round);
    dropInCycle(round);
    errorCycle(round);
    MPI_Barrier(MPI_COMM_WORLD);
    if (round == 1) heapAfterWarmup = heapInUse();
  }
  const size_t heapAtEnd = heapInUse();
  // Allowance for MPI's own free lists and caches, which grow in steps.
  const size_t kSlack = 256 * 1024;
  if (heapAtEnd > heapAfterWarmup + kSlack)
    fail("heap in use grew from " + std::to_string(heapAfterWarmup) + " to " + std::to_string(heapAtEnd) +
         " bytes over " + std::to_string(rounds - 2) + " identical rounds");
  const HandleCounts after = gLive;
  if (after.comms != before.comms || after.types != before.types || after.ops != before.ops)
    fail("MPI handles left allocated by the cycles: communicators " + std::to_string(after.comms - before.comms) +
         ", datatypes " + std::to_string(after.types - before.types) + ", ops " +
         std::to_string(after.ops - before.ops));
  if (leak) deliberateLeak();
#ifdef SPCCL_LEAK_HAVE_ASAN
  if (__lsan_do_recoverable_leak_check() != 0) fail("LeakSanitizer found unreachable memory (report above)");
#else
  if (gRank == 0) std::printf("not built with AddressSanitizer: no leak check, only the handle and call checks\n");
#endif

  int failures = 0;
  MPI_Allreduce(&gFailures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (gRank == 0)
    std::printf("leak cycles: %d rounds on %d ranks, heap in use %zu -> %zu bytes, %d failed check(s)\n", rounds, gSize,
                heapAfterWarmup, heapAtEnd, failures);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
