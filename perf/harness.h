// Shared harness of the spccl benchmarks, in the style of nccl-tests: flags,
// input data, timing, the table and the JSON rows. Each binary supplies one
// Collective descriptor (nccl-tests' testColl) and calls runBenchmark().
#ifndef SPCCL_PERF_HARNESS_H_
#define SPCCL_PERF_HARNESS_H_

// The MPI C API only: Open MPI's deprecated C++ bindings, which <mpi.h> pulls
// into C++ otherwise, do not compile warning-free under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif

#include <cstddef>
#include <optional>
#include <string>

#include "spccl.h"
#include "spccl_mpi.h"

namespace spccl::perf {

struct Options {
  size_t minBytes = size_t{32} << 20;
  size_t maxBytes = size_t{32} << 20;
  size_t stepFactor = 2;
  int iters = 20;
  int warmupIters = 5;
  bool check = true;
  // 1: signs of the input are re-drawn before every iteration (untimed), as
  // gradients change from step to step; 0: the identical input every call.
  bool varyInput = true;
  spcclDataType_t datatype = spcclFloat;
  spcclRedOp_t op = spcclSum;
  float density = 0.01f;
  int algorithm = SPCCL_ALGO_AUTO;
  std::optional<spcclDataType_t> wireValueType;  // unset: the SPCCL_* env default
  std::string jsonPath;
  bool help = false;
};

// What a descriptor needs to make its calls.
struct Context {
  const Options& opts;
  spcclComm_t comm;
  MPI_Comm mpiComm;
  int rank;
  int nRanks;
  // Plain-MPI reference: MPI has no fp16/bf16, so for those the element is
  // 2 opaque bytes and the sum a user-defined op that adds in fp32.
  MPI_Datatype denseType;
  MPI_Op denseSum;
};

struct BufferCounts {
  size_t count;  // elements the row's size stands for (size = count * type size)
  size_t send;   // elements in each rank's send buffer
  size_t recv;   // elements in each rank's receive buffer
};

// One collective, as nccl-tests' testColl: how a size maps to buffers, the
// bus-bandwidth factor, and the compressed and dense calls. The descriptor
// owns its compression state (compressor, selection).
class Collective {
 public:
  virtual ~Collective() = default;
  virtual const char* name() const = 0;
  // `count` is the size over the type size; the result may round it down.
  virtual BufferCounts bufferCounts(size_t count, int nRanks) const = 0;
  // busbw = algbw * busBwFactor (nccl-tests' formulas).
  virtual double busBwFactor(int nRanks) const = 0;
  // Whether every rank ends with the same output (checked bitwise with -c 1).
  virtual bool outputReplicated() const = 0;
  // Drops any previous state and makes fresh state for `count` elements.
  virtual void prepare(const Context& ctx, size_t count) = 0;
  virtual void runCompressed(const Context& ctx, const void* send, void* recv) = 0;
  virtual void runDense(const Context& ctx, const void* send, void* recv) = 0;
  virtual spcclStats_t stats() const = 0;
  // Frees the state; called before the communicator is destroyed.
  virtual void release() = 0;
};

// Prints the failed call with spcclGetLastError() and aborts every rank.
[[noreturn]] void failSpccl(spcclResult_t result, const char* call, const char* file, int line);

#define SPCCL_PERF_CHECK(call)                                                  \
  do {                                                                          \
    const spcclResult_t spcclPerfResult_ = (call);                              \
    if (spcclPerfResult_ != spcclSuccess)                                       \
      ::spccl::perf::failSpccl(spcclPerfResult_, #call, __FILE__, __LINE__);    \
  } while (0)

// buf[i] *= factor for a float, half or bfloat16 buffer (dense average).
void scaleBuffer(void* buf, size_t count, spcclDataType_t datatype, float factor);

// MPI_Init, flags, one row per size, MPI_Finalize. Returns main's exit code.
int runBenchmark(int argc, char** argv, Collective& collective);

}  // namespace spccl::perf

#endif  // SPCCL_PERF_HARNESS_H_
