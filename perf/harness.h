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

// What carries the row's calls (-B): plain MPI on host buffers, or NCCL on
// device buffers with one GPU per rank. The compressed side runs on an spccl
// communicator of the same kind (spcclCommInitMPI or spcclCommInitNccl).
// kMpiStaged: MPI, with the buffers copied in and out as on a device (tests).
enum class Backend { kMpi, kNccl, kMpiStaged };

struct Options {
  Backend backend = Backend::kMpi;
  size_t minBytes = size_t{32} << 20;
  size_t maxBytes = size_t{32} << 20;
  size_t stepFactor = 2;
  size_t stepBytes = 0;  // -i: rows -b, -b + i, ... (0: -f's factor)
  int iters = 20;
  int warmupIters = 5;
  bool check = true;
  // -z 1: each timed call alone, after its own untimed setup and a barrier,
  // the row's time the median; -z 0: the -n calls back to back after one
  // setup, no barrier or stream synchronisation between them, the row's time
  // the batch's mean (nccl-tests' way of timing).
  bool blocking = true;
  // 1: signs of the input are re-drawn before every iteration (untimed), as
  // gradients change from step to step; 0: the identical input every call.
  bool varyInput = true;
  spcclDataType_t datatype = spcclFloat;
  spcclRedOp_t op = spcclSum;
  float density = 0.01f;  // the collective's defaultDensity() unless -D (or its environmentDefaults)
  int algorithm = SPCCL_ALGO_AUTO;
  bool densityGiven = false;  // -D given
  bool algoGiven = false;     // -a given
  // The SPCCL_* variable density and algorithm came from where a collective's environmentDefaults
  // took them (the allreduce: SPCCL_ALLREDUCE_DENSITY, SPCCL_ALGO); empty: the flag or the built-in default.
  std::string densityFrom;
  std::string algoFrom;
  size_t rowLen = 128;
  std::optional<spcclDataType_t> wireValueType;  // unset: the SPCCL_* env default
  std::string indexEncoding;                     // -E: SPCCL_INDEX_ENCODING for the run; empty: the env's
  std::string jsonPath;
  bool help = false;
};

// The backend of a run: the spccl communicator, the memory the collectives
// read and write, and the dense collectives a row compares against, all on
// one stream. The harness keeps a host copy of every buffer: input steps are
// made there and uploaded (untimed), outputs downloaded for the checks.
class Transport {
 public:
  virtual ~Transport() = default;
  // One header line: the backend, its version and the devices.
  virtual std::string describe() const = 0;
  virtual spcclComm_t comm() const = 0;
  // The `stream` argument of every spccl call (NULL on MPI).
  virtual void* stream() const = 0;
  // The dense reference calls; avg is sum / ranks.
  virtual void allReduce(const void* send, void* recv, size_t count, spcclDataType_t datatype,
                         spcclRedOp_t op) const = 0;
  virtual void allToAll(const void* send, void* recv, size_t countPerPeer, spcclDataType_t datatype) const = 0;
  virtual void allGather(const void* send, void* recv, size_t countPerRank, spcclDataType_t datatype) const = 0;
  // Returns once every call made so far has completed (the timer stops after it).
  virtual void synchronize() const = 0;
  // False: the collectives use the host copies themselves (MPI).
  virtual bool deviceMemory() const { return false; }
  virtual void* allocate(size_t /*bytes*/) { return nullptr; }
  virtual void deallocate(void* /*buffer*/) {}
  virtual void upload(void* /*buffer*/, const void* /*host*/, size_t /*bytes*/) const {}
  virtual void download(void* /*host*/, const void* /*buffer*/, size_t /*bytes*/) const {}
};

// What a descriptor needs to make its calls.
struct Context {
  const Options& opts;
  spcclComm_t comm;
  MPI_Comm mpiComm;  // the ranks (MPI runs the harness's own barriers and reductions either way)
  int rank;
  int nRanks;
  // The dense side of every row, and the stream of the compressed calls.
  const Transport& dense;
  void* stream;
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
  kFlagOp = 1u << 0,        // -o
  kFlagAlgo = 1u << 1,      // -a
  kFlagRowLen = 1u << 2,    // -R
  kFlagEncoding = 1u << 3,  // -E (the rows alltoall does not use SPCCL_INDEX_ENCODING)
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
  // The SPCCL_* variable -D defaults to where it is set (-h says so); nullptr: none.
  virtual const char* densityVariable() const { return nullptr; }
  // Called after the flags are parsed (not for -h), before anything else: takes the defaults of
  // the flags not given from the environment where the collective reads them there.
  virtual void environmentDefaults(Options& /*opts*/) const {}
  // The header lines (separated by '\n') saying what the two sides of a row are.
  virtual std::string describe(const Options& opts) const = 0;
  // SPCCL_* variables the library reads at communicator creation that the
  // flags decide; the harness sets them on every rank before creating the communicator.
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
  // shape, `gradOut` its send shape. The dense one is the same dense call.
  virtual void runCompressedBackward(const Context& /*ctx*/, const void* /*grad*/, void* /*gradOut*/) {}
  virtual void runDenseBackward(const Context& /*ctx*/, const void* /*grad*/, void* /*gradOut*/) {}
  // Counters the compressed calls advance; by default the communicator's,
  // which count every spccl collective on it.
  virtual spcclStats_t stats(const Context& ctx) const;
  // The algo column. `timed` holds the counters' advance over the row's timed
  // calls, and their last* fields as the last call left them.
  virtual std::string algoLabel(Pass pass, const spcclStats_t& timed) const;
  // Whether a -D 1 call must give the dense call's bits (#wrong counted).
  virtual bool exactAtDensityOne(const Context& /*ctx*/) const { return true; }
  // This rank's part of the -c 1 check beyond rel_err and replicas; the
  // pointers in `check` are host copies.
  virtual bool outputOk(const Context& /*ctx*/, const CheckInput& /*check*/) const { return true; }
  // Frees the state; called before the communicator is destroyed.
  virtual void release() = 0;
};

// ---- helpers for descriptors ------------------------------------------------

size_t typeSize(spcclDataType_t datatype);
std::string_view allreduceAlgorithmName(int algorithm);  // SPCCL_ALGO_* as -a spells it
std::string_view wireTypeName(spcclDataType_t wire);     // fp32, fp16, bf16, fp8 (SPCCL_VALUE_TYPE's values)

// SPCCL_VALUE_TYPE=-V when -V is given.
Environment wireEnvironment(const Options& opts);

// The value of an SPCCL_* variable, nullptr when unset or empty (the library's default then).
const char* environmentValue(const char* name);

// The shortest decimal that reads back as the same float ("0.01", not 0.0099999998).
std::string floatText(float value);

// keep = max(1, ceil(density * n)), at most n: entries a top-k of n keeps.
size_t keptPerRow(float density, size_t n);

// Whether `got` is `want` masked row by row: in each of `rows` rows of
// `rowLen` elements, the `keep` entries of largest magnitude in the same row
// of `maskSource` (ties: lower index first) hold want's value as the wire
// type rounds it, and every other entry is zero.
// A codec of the alltoall rows (SPCCL_ROWS_CODEC) loosens the kept values'
// check: int8, each within half its row's scale (the largest finite |kept|
// / 127), non-finite ones arriving as NaN; bounded, each within `bound`.
struct KeptValues {
  enum Kind { kWire, kInt8, kBounded } kind = kWire;
  float bound = 0.0f;
};
bool isTopkMasked(const void* got, const void* want, const void* maskSource, size_t rows, size_t rowLen, size_t keep,
                  spcclDataType_t datatype, spcclDataType_t wire, KeptValues rule = {});

// The benchmarks' input: N(0, 1) values, deterministic per seed (seed = rank).
void fillGaussian(void* buf, size_t count, spcclDataType_t datatype, uint64_t seed);
// Flips the sign of about half the elements, chosen by `step`: magnitudes
// stay, and successive steps are a mean-zero sequence per element, as
// gradients are in training.
void flipSigns(void* buf, size_t count, spcclDataType_t datatype, uint64_t step);

// Prints the failed call with spcclGetLastError() and aborts every rank.
[[noreturn]] void failSpccl(spcclResult_t result, const char* call, const char* file, int line);

#define SPCCL_PERF_CHECK(call)                                                                                   \
  do {                                                                                                           \
    const spcclResult_t spcclPerfResult_ = (call);                                                               \
    if (spcclPerfResult_ != spcclSuccess) ::spccl::perf::failSpccl(spcclPerfResult_, #call, __FILE__, __LINE__); \
  } while (0)

// buf[i] /= divisor for a float, half or bfloat16 buffer (dense average).
void divideBuffer(void* buf, size_t count, spcclDataType_t datatype, float divisor);

// "MPI_Allreduce" or "ncclAllReduce": the dense call's name for -B's backend.
std::string denseCallName(const Options& opts, std::string_view mpiName, std::string_view ncclName);

// MPI_Init, flags, the backend, one row per size and pass, MPI_Finalize.
// Returns main's exit code.
int runBenchmark(int argc, char** argv, Collective& collective);

}  // namespace spccl::perf

#endif  // SPCCL_PERF_HARNESS_H_
