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
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  float density = 0.01f;  // the collective's defaultDensity() unless -D
  int algorithm = SPCCL_ALGO_AUTO;
  size_t rowLen = 128;
  std::optional<spcclDataType_t> wireValueType;  // unset: the SPCCL_* env default
  std::string indexEncoding;                     // -E: SPCCL_INDEX_ENCODING for the run; empty: the env's
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
  // Wire value type in effect: -V, else SPCCL_VALUE_TYPE, else fp32.
  spcclDataType_t wireValueType;
};

struct BufferCounts {
  size_t count;  // elements the row's size stands for (size = count * type size)
  size_t send;   // elements in each rank's send buffer
  size_t recv;   // elements in each rank's receive buffer
};

// Flags beyond the common ones; a binary rejects those its collective does not use.
enum CollectiveFlag : unsigned {
  kFlagOp = 1u << 0,       // -o
  kFlagAlgo = 1u << 1,     // -a
  kFlagRowLen = 1u << 2,   // -R
};

// The forward call, or the backward call that reuses the forward's state
// (an alltoall's selection). Each is its own table row.
enum class Pass { kForward, kBackward };

// What a descriptor's own output check sees (one call, after the timing).
struct CheckInput {
  Pass pass;
  const void* got;    // compressed output
  const void* want;   // dense output of the same input
  const void* input;  // this rank's forward input (the send buffer)
  bool compressed;    // the library counted the checked forward call as compressed
                      // (a backward: the forward whose selection it used)
};

using Environment = std::vector<std::pair<std::string, std::string>>;

// One collective, as nccl-tests' testColl: how a size maps to buffers, the
// bus-bandwidth factor, and the compressed and dense calls. The descriptor
// owns its compression state (compressor, selection).
class Collective {
 public:
  virtual ~Collective() = default;
  virtual const char* name() const = 0;
  // CollectiveFlag bits of the flags this collective uses.
  virtual unsigned flags() const = 0;
  virtual float defaultDensity() const { return 0.01f; }
  // The header lines (separated by '\n') saying what the two sides of a row are.
  virtual std::string describe(const Options& opts) const = 0;
  // SPCCL_* variables the library reads at communicator creation that the
  // flags decide; the harness sets them on every rank before spcclCommInitMPI.
  virtual Environment environment(const Options& /*opts*/) const { return {}; }
  // `count` is the size over the type size; the result may round it down.
  virtual BufferCounts bufferCounts(const Options& opts, size_t count, int nRanks) const = 0;
  // busbw = algbw * busBwFactor (nccl-tests' formulas).
  virtual double busBwFactor(int nRanks) const = 0;
  // Whether every rank ends with the same output (checked bitwise with -c 1).
  virtual bool outputReplicated() const = 0;
  // Whether there is a backward call (timed as its own row).
  virtual bool hasBackward() const { return false; }
  // Drops any previous state and makes fresh state for `count` elements.
  virtual void prepare(const Context& ctx, size_t count) = 0;
  // Untimed, before every compressed forward: drops what the last call left.
  virtual void discardCallState() {}
  virtual void runCompressed(const Context& ctx, const void* send, void* recv) = 0;
  virtual void runDense(const Context& ctx, const void* send, void* recv) = 0;
  // The backward of the last runCompressed: `grad` has the forward's receive
  // shape, `gradOut` its send shape. The dense one is the same plain-MPI call.
  virtual void runCompressedBackward(const Context& /*ctx*/, const void* /*grad*/, void* /*gradOut*/) {}
  virtual void runDenseBackward(const Context& /*ctx*/, const void* /*grad*/, void* /*gradOut*/) {}
  // Counters the compressed calls advance; by default the communicator's,
  // which count every spccl collective on it.
  virtual spcclStats_t stats(const Context& ctx) const;
  // The algo column. `timed` holds the counters' advance over the row's timed
  // calls, and their last* fields as the last call left them.
  virtual std::string algoLabel(Pass pass, const spcclStats_t& timed) const;
  // This rank's part of the -c 1 check beyond rel_err and replicas.
  virtual bool outputOk(const Context& /*ctx*/, const CheckInput& /*check*/) const { return true; }
  // Frees the state; called before the communicator is destroyed.
  virtual void release() = 0;
};

// ---- helpers for descriptors ------------------------------------------------

size_t typeSize(spcclDataType_t datatype);
std::string_view allreduceAlgorithmName(int algorithm);  // SPCCL_ALGO_* as -a spells it
std::string_view wireTypeName(spcclDataType_t wire);     // fp32, fp16, bf16 (SPCCL_VALUE_TYPE's values)

// SPCCL_VALUE_TYPE=-V when -V is given.
Environment wireEnvironment(const Options& opts);

// keep = max(1, ceil(density * n)), at most n: entries a top-k of n keeps.
size_t keptPerRow(float density, size_t n);

// Whether `got` is `want` masked row by row: in each of `rows` rows of
// `rowLen` elements, the `keep` entries of largest magnitude in the same row
// of `maskSource` (ties: lower index first) hold want's value as the wire
// type rounds it, and every other entry is zero.
bool isTopkMasked(const void* got, const void* want, const void* maskSource, size_t rows,
                  size_t rowLen, size_t keep, spcclDataType_t datatype, spcclDataType_t wire);

// The benchmarks' input: N(0, 1) values, deterministic per seed (seed = rank).
void fillGaussian(void* buf, size_t count, spcclDataType_t datatype, uint64_t seed);
// Flips the sign of about half the elements, chosen by `step`: magnitudes
// stay, and successive steps are a mean-zero sequence per element, as
// gradients are in training.
void flipSigns(void* buf, size_t count, spcclDataType_t datatype, uint64_t step);

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

// MPI_Init, flags, one row per size and pass, MPI_Finalize. Returns main's exit code.
int runBenchmark(int argc, char** argv, Collective& collective);

}  // namespace spccl::perf

#endif  // SPCCL_PERF_HARNESS_H_
