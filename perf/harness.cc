#include "harness.h"

#include <getopt.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <new>
#include <limits>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "size_arg.h"

namespace spccl::perf {

#if SPCCL_PERF_WITH_NCCL
// perf/nccl_backend.cc. Collective over `comm`: nullptr on every rank when any
// rank cannot run NCCL (`why` says why on the ranks that found the reason).
std::unique_ptr<Transport> makeNcclTransport(MPI_Comm comm, std::string* why);
#endif

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- element types --------------------------------------------------------
// The host has no fp16/bf16 arithmetic in C++20: these carry the bits, and
// values go through float.

struct Half {
  uint16_t bits;
};
struct Bfloat16 {
  uint16_t bits;
};

float toFloat(float v) { return v; }

float toFloat(Half h) {
  const uint32_t sign = uint32_t{h.bits & 0x8000u} << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  uint32_t magnitude;
  if (exponent == 0) {
    magnitude = std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-24f);
  } else if (exponent == 31) {
    magnitude = 0x7f800000u | mantissa << 13;
  } else {
    magnitude = (exponent + 112) << 23 | mantissa << 13;
  }
  return std::bit_cast<float>(sign | magnitude);
}

float toFloat(Bfloat16 b) { return std::bit_cast<float>(uint32_t{b.bits} << 16); }

// Round to nearest even, as the library's codecs do.
template <class T>
T fromFloat(float v);

template <>
float fromFloat<float>(float v) {
  return v;
}

template <>
Half fromFloat<Half>(float v) {
  const uint32_t x = std::bit_cast<uint32_t>(v);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  uint32_t h;
  if (magnitude > 0x7f800000u) {
    h = 0x7e00u;  // NaN
  } else if (magnitude >= 0x477ff000u) {
    h = 0x7c00u;  // 65520 and above round to infinity
  } else if (magnitude < 0x38800000u) {
    // Below 2^-14: a half subnormal; the scaling is exact, nearbyint rounds to even.
    h = static_cast<uint32_t>(std::nearbyint(std::bit_cast<float>(magnitude) * 0x1p24f));
  } else {
    h = ((magnitude >> 23) - 112) << 10 | ((magnitude >> 13) & 0x3ffu);
    const uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  }
  return Half{static_cast<uint16_t>(sign | h)};
}

template <>
Bfloat16 fromFloat<Bfloat16>(float v) {
  const uint32_t x = std::bit_cast<uint32_t>(v);
  if ((x & 0x7fffffffu) > 0x7f800000u) return Bfloat16{static_cast<uint16_t>(x >> 16 | 0x40u)};
  return Bfloat16{static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16)};
}

// Calls f with a value of the element type of `datatype`. Options only admit
// float, half and bfloat16.
template <class F>
decltype(auto) visitType(spcclDataType_t datatype, F&& f) {
  switch (datatype) {
    case spcclFloat16:
      return f(Half{});
    case spcclBfloat16:
      return f(Bfloat16{});
    default:
      return f(float{});
  }
}

// x after a trip through the wire type: to W and back, rounding to nearest even.
template <class T>
T throughWire(T x, spcclDataType_t wire) {
  return visitType(wire, [x](auto w) {
    using W = decltype(w);
    return fromFloat<T>(toFloat(fromFloat<W>(toFloat(x))));
  });
}

// MPI_User_function summing in fp32 and rounding once per pair, as an fp16
// reduction on the host would.
template <class T>
void sumOp(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = fromFloat<T>(toFloat(a[i]) + toFloat(b[i]));
}

// The plain-MPI reference type and sum for the benchmark's datatype.
class DenseReduction {
 public:
  explicit DenseReduction(spcclDataType_t datatype) {
    visitType(datatype, [this](auto v) {
      using T = decltype(v);
      if constexpr (!std::is_same_v<T, float>) {
        MPI_Type_contiguous(sizeof(T), MPI_BYTE, &type_);
        MPI_Type_commit(&type_);
        MPI_Op_create(&sumOp<T>, /*commute=*/1, &sum_);
        owned_ = true;
      }
    });
  }
  ~DenseReduction() {
    if (owned_) {
      MPI_Op_free(&sum_);
      MPI_Type_free(&type_);
    }
  }
  DenseReduction(const DenseReduction&) = delete;
  DenseReduction& operator=(const DenseReduction&) = delete;

  MPI_Datatype type() const { return type_; }
  MPI_Op sum() const { return sum_; }

 private:
  MPI_Datatype type_ = MPI_FLOAT;
  MPI_Op sum_ = MPI_SUM;
  bool owned_ = false;
};

// Plain MPI on host buffers: the host copies are the buffers. Staged (-B
// mpi-staged, for the harness's own tests): the calls use buffers of their
// own, filled with 0xff bytes (NaN) and copied to and from the host copies as
// on a device, so that a step the device path needs and misses shows on a
// machine without a GPU.
class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, spcclDataType_t datatype, bool staged)
      : mpiComm_(comm), reduction_(datatype), staged_(staged) {
    SPCCL_PERF_CHECK(spcclCommInitMPI(&comm_, comm));
    MPI_Comm_size(comm, &nRanks_);
  }
  ~MpiTransport() override {
    if (comm_ != nullptr) SPCCL_PERF_CHECK(spcclCommDestroy(comm_));
  }

  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    const std::string_view text(version, static_cast<size_t>(length));
    return std::string(staged_ ? "MPI, staged: buffers of their own, copied in and out as on a device ("
                               : "MPI on host buffers (") +
           std::string(text.substr(0, text.find_first_of(",\n"))) + ")";
  }
  spcclComm_t comm() const override { return comm_; }
  void* stream() const override { return nullptr; }

  // Counts are bounded by INT_MAX where the flags are parsed. MPI has no average: sum, then divide by
  // the ranks, as spccl defines avg on host buffers (so -D 1 rows match it bit for bit).
  void allReduce(const void* send, void* recv, size_t count, spcclDataType_t datatype, spcclRedOp_t op) const override {
    MPI_Allreduce(send, recv, static_cast<int>(count), reduction_.type(), reduction_.sum(), mpiComm_);
    if (op == spcclAvg) divideBuffer(recv, count, datatype, static_cast<float>(nRanks_));
  }
  void allToAll(const void* send, void* recv, size_t countPerPeer, spcclDataType_t /*datatype*/) const override {
    const int block = static_cast<int>(countPerPeer);
    MPI_Alltoall(send, block, reduction_.type(), recv, block, reduction_.type(), mpiComm_);
  }
  void allGather(const void* send, void* recv, size_t countPerRank, spcclDataType_t /*datatype*/) const override {
    const int block = static_cast<int>(countPerRank);
    MPI_Allgather(send, block, reduction_.type(), recv, block, reduction_.type(), mpiComm_);
  }
  void synchronize() const override {}

  bool deviceMemory() const override { return staged_; }
  void* allocate(size_t bytes) override {
    void* buffer = std::malloc(bytes);
    if (buffer == nullptr) throw std::bad_alloc();
    std::memset(buffer, 0xff, bytes);
    return buffer;
  }
  void deallocate(void* buffer) override { std::free(buffer); }
  void upload(void* buffer, const void* host, size_t bytes) const override { std::memcpy(buffer, host, bytes); }
  void download(void* host, const void* buffer, size_t bytes) const override { std::memcpy(host, buffer, bytes); }

 private:
  MPI_Comm mpiComm_;
  int nRanks_ = 1;
  DenseReduction reduction_;
  bool staged_;
  spcclComm_t comm_ = nullptr;
};

// ---- names of flag values ---------------------------------------------------

template <class T>
struct Named {
  std::string_view name;
  T value;
};

#if SPCCL_PERF_WITH_NCCL
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif
constexpr Named<Backend> kBackends[] = {
    {"mpi", Backend::kMpi}, {"nccl", Backend::kNccl}, {"mpi-staged", Backend::kMpiStaged}};
constexpr Named<spcclDataType_t> kDataTypes[] = {
    {"float", spcclFloat}, {"half", spcclFloat16}, {"bfloat16", spcclBfloat16}};
constexpr Named<spcclRedOp_t> kOps[] = {{"sum", spcclSum}, {"avg", spcclAvg}};
constexpr Named<int> kAlgorithms[] = {{"auto", SPCCL_ALGO_AUTO},
                                      {"dense", SPCCL_ALGO_DENSE},
                                      {"allgather", SPCCL_ALGO_ALLGATHER},
                                      {"split", SPCCL_ALGO_SPLIT}};
constexpr Named<spcclDataType_t> kWireTypes[] = {
    {"fp32", spcclFloat32}, {"fp16", spcclFloat16}, {"bf16", spcclBfloat16}, {"fp8", spcclFloat8e4m3}};
// SPCCL_INDEX_ENCODING's choices (the value: its index in the library's order).
constexpr Named<int> kIndexEncodings[] = {{"auto", 0}, {"coo", 1}, {"delta", 2}, {"bitmap", 3}};

template <class T, size_t N>
std::string joinNames(const Named<T> (&table)[N]) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += '|';
    out += entry.name;
  }
  return out;
}

template <class T, size_t N>
std::string_view nameOf(const Named<T> (&table)[N], T value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  return "unknown";
}

// The entry `text` names in any case, as the library reads SPCCL_* choices; nullptr: none.
template <class T, size_t N>
const Named<T>* findNamedAnyCase(const Named<T> (&table)[N], const char* text) {
  for (const auto& entry : table)  // the names are literals: NUL-terminated
    if (strcasecmp(entry.name.data(), text) == 0) return &entry;
  return nullptr;
}

// -V, else SPCCL_VALUE_TYPE (an invalid value fails at communicator creation), else fp32.
spcclDataType_t effectiveWire(const Options& opts) {
  if (opts.wireValueType) return *opts.wireValueType;
  if (const char* env = environmentValue("SPCCL_VALUE_TYPE"))
    if (const auto* entry = findNamedAnyCase(kWireTypes, env)) return entry->value;
  return spcclFloat32;
}

std::string wireDescription(const Options& opts) {
  std::string out(nameOf(kWireTypes, effectiveWire(opts)));
  if (opts.wireValueType) return out;
  return out + (environmentValue("SPCCL_VALUE_TYPE") ? " (env)" : " (default)");
}

// SPCCL_INDEX_ENCODING in effect, as the library names it (-E sets the variable; else the user's, else auto).
std::string_view effectiveIndexEncoding() {
  const char* env = environmentValue("SPCCL_INDEX_ENCODING");
  const auto* entry = env ? findNamedAnyCase(kIndexEncodings, env) : nullptr;
  return entry ? entry->name : "auto";
}

// ---- flags --------------------------------------------------------------------

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[gnu::format(printf, 1, 2)]] std::string strPrintf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string out(static_cast<size_t>(std::max(length, 0)), '\0');
  std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  return out;
}

template <class T, size_t N>
T parseNamed(char flag, const char* arg, const Named<T> (&table)[N]) {
  for (const auto& entry : table)
    if (entry.name == arg) return entry.value;
  throw UsageError(strPrintf("-%c: unknown value '%s' (expected %s)", flag, arg, joinNames(table).c_str()));
}

size_t parseSize(char flag, const char* arg) {
  size_t bytes = 0;
  if (!parseSizeArg(arg, &bytes))
    throw UsageError(strPrintf("-%c: expected a size in bytes with an optional K/M/G suffix, got '%s'", flag, arg));
  return bytes;
}

long parseInteger(char flag, const char* arg, long min, long max) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(arg, &end, 10);
  if (end == arg || *end != '\0' || errno == ERANGE || value < min || value > max)
    throw UsageError(strPrintf("-%c: expected an integer in [%ld, %ld], got '%s'", flag, min, max, arg));
  return value;
}

float parseDensity(char flag, const char* arg) {
  errno = 0;
  char* end = nullptr;
  const float value = std::strtof(arg, &end);
  if (end == arg || *end != '\0' || errno == ERANGE || !(value > 0.0f && value <= 1.0f))
    throw UsageError(strPrintf("-%c: expected a density in (0, 1], got '%s'", flag, arg));
  return value;
}

void printUsage(const char* program, const Collective& collective) {
  const unsigned flags = collective.flags();
  std::printf(
      "Usage: %s [flags]\n"
      "  -B, --backend <backend>   %s: MPI on host buffers, NCCL on device buffers with\n"
      "                            one GPU a rank%s, or MPI with buffers copied in and out\n"
      "                            as on a device (the harness's own test) (default mpi)\n"
      "  -b, --minbytes <size>     smallest size, bytes with K/M/G suffix (default 32M)\n"
      "  -e, --maxbytes <size>     largest size (default 32M)\n"
      "  -f, --stepfactor <n>      size multiplier between rows, >= 2 (default 2)\n"
      "  -i, --stepbytes <size>    size increment between rows instead of -f (K/M/G suffix)\n"
      "  -n, --iters <n>           timed iterations per row (default 20)\n"
      "  -w, --warmup_iters <n>    untimed iterations before them (default 5)\n"
      "  -z, --blocking <0|1>      1: each call timed alone, barrier first, median; 0: the -n calls\n"
      "                            back to back after one setup, the mean (nccl-tests' way) (default 1)\n"
      "  -c, --check <0|1>         relative error and output check per row (default 1)\n"
      "  -S, --vary <0|1>          re-draw input signs before each iteration, untimed (default 1)\n"
      "  -d, --datatype <type>     %s (default float)\n",
      program, joinNames(kBackends).c_str(), kNcclBuilt ? "" : " (not in this build)", joinNames(kDataTypes).c_str());
  if (flags & kFlagOp) std::printf("  -o, --op <op>             %s (default sum)\n", joinNames(kOps).c_str());
  const double density = collective.defaultDensity();
  if (const char* variable = collective.densityVariable())
    std::printf("  -D, --density <x>         fraction of entries kept, (0, 1] (default: %s, else %g)\n", variable,
                density);
  else std::printf("  -D, --density <x>         fraction of entries kept, (0, 1] (default %g)\n", density);
  if (flags & kFlagRowLen)
    std::printf("  -R, --rowlen <n>          elements per row (default %zu)\n", Options{}.rowLen);
  if (flags & kFlagAlgo)
    std::printf("  -a, --algo <algo>         %s (default: SPCCL_ALGO, else auto)\n", joinNames(kAlgorithms).c_str());
  std::printf("  -V, --wire <type>         wire value type %s (default: SPCCL_VALUE_TYPE, else fp32)\n",
              joinNames(kWireTypes).c_str());
  if (flags & kFlagEncoding)
    std::printf("  -E, --encoding <enc>      index encoding %s (default: SPCCL_INDEX_ENCODING, else auto)\n",
                joinNames(kIndexEncodings).c_str());
  std::printf(
      "  -J, --json <file>         also write the rows as JSON (rank 0)\n"
      "  -h, --help                this text\n");
}

Options parseOptions(int argc, char** argv, const Collective& collective) {
  static const option kLongOptions[] = {{"backend", required_argument, nullptr, 'B'},
                                        {"minbytes", required_argument, nullptr, 'b'},
                                        {"maxbytes", required_argument, nullptr, 'e'},
                                        {"stepfactor", required_argument, nullptr, 'f'},
                                        {"stepbytes", required_argument, nullptr, 'i'},
                                        {"blocking", required_argument, nullptr, 'z'},
                                        {"iters", required_argument, nullptr, 'n'},
                                        {"warmup_iters", required_argument, nullptr, 'w'},
                                        {"check", required_argument, nullptr, 'c'},
                                        {"vary", required_argument, nullptr, 'S'},
                                        {"datatype", required_argument, nullptr, 'd'},
                                        {"op", required_argument, nullptr, 'o'},
                                        {"density", required_argument, nullptr, 'D'},
                                        {"algo", required_argument, nullptr, 'a'},
                                        {"rowlen", required_argument, nullptr, 'R'},
                                        {"wire", required_argument, nullptr, 'V'},
                                        {"encoding", required_argument, nullptr, 'E'},
                                        {"json", required_argument, nullptr, 'J'},
                                        {"help", no_argument, nullptr, 'h'},
                                        {nullptr, 0, nullptr, 0}};
  Options opts;
  opts.density = collective.defaultDensity();
  opterr = 0;  // every rank parses; only rank 0 reports
  bool factorGiven = false;
  int c;
  while ((c = getopt_long(argc, argv, ":B:b:e:f:i:z:n:w:c:S:d:o:D:a:R:V:E:J:h", kLongOptions, nullptr)) != -1) {
    const char flag = static_cast<char>(c);
    const unsigned needs = c == 'o'   ? kFlagOp
                           : c == 'a' ? kFlagAlgo
                           : c == 'R' ? kFlagRowLen
                           : c == 'E' ? kFlagEncoding
                                      : 0u;
    if ((needs & ~collective.flags()) != 0)
      throw UsageError(strPrintf("-%c: not used by %s_perf", flag, collective.name()));
    switch (c) {
      case 'B':
        opts.backend = parseNamed(flag, optarg, kBackends);
        break;
      case 'b':
        opts.minBytes = parseSize(flag, optarg);
        break;
      case 'e':
        opts.maxBytes = parseSize(flag, optarg);
        break;
      case 'f':
        opts.stepFactor = static_cast<size_t>(parseInteger(flag, optarg, 2, 1L << 20));
        factorGiven = true;
        break;
      case 'i':
        opts.stepBytes = parseSize(flag, optarg);
        if (opts.stepBytes == 0) throw UsageError("-i: the increment must be at least 1 byte");
        break;
      case 'z':
        opts.blocking = parseInteger(flag, optarg, 0, 1) != 0;
        break;
      case 'n':
        opts.iters = static_cast<int>(parseInteger(flag, optarg, 1, INT_MAX));
        break;
      case 'w':
        opts.warmupIters = static_cast<int>(parseInteger(flag, optarg, 0, INT_MAX));
        break;
      case 'c':
        opts.check = parseInteger(flag, optarg, 0, 1) != 0;
        break;
      case 'S':
        opts.varyInput = parseInteger(flag, optarg, 0, 1) != 0;
        break;
      case 'd':
        opts.datatype = parseNamed(flag, optarg, kDataTypes);
        break;
      case 'o':
        opts.op = parseNamed(flag, optarg, kOps);
        break;
      case 'D':
        opts.density = parseDensity(flag, optarg);
        opts.densityGiven = true;
        break;
      case 'a':
        opts.algorithm = parseNamed(flag, optarg, kAlgorithms);
        opts.algoGiven = true;
        break;
      case 'R':
        opts.rowLen = static_cast<size_t>(parseInteger(flag, optarg, 1, INT_MAX));
        break;
      case 'V':
        opts.wireValueType = parseNamed(flag, optarg, kWireTypes);
        break;
      case 'E':
        opts.indexEncoding = nameOf(kIndexEncodings, parseNamed(flag, optarg, kIndexEncodings));
        break;
      case 'J':
        opts.jsonPath = optarg;
        break;
      case 'h':
        opts.help = true;
        break;
      case ':':
        throw UsageError(strPrintf("%s: missing value", argv[optind - 1]));
      default:
        throw UsageError(optopt ? strPrintf("unknown flag '-%c'", optopt)
                                : strPrintf("unknown flag '%s'", argv[optind - 1]));
    }
  }
  if (optind < argc) throw UsageError(strPrintf("unexpected argument '%s'", argv[optind]));
  if (opts.minBytes == 0) throw UsageError("-b: the smallest size must be at least 1 byte");
  if (opts.minBytes > opts.maxBytes)
    throw UsageError(strPrintf("-b %zu is larger than -e %zu", opts.minBytes, opts.maxBytes));
  if (opts.stepBytes > 0 && factorGiven) throw UsageError("-f and -i: give one, a factor or an increment");
  constexpr size_t kMaxRows = 10000;
  if (opts.stepBytes > 0 && (opts.maxBytes - opts.minBytes) / opts.stepBytes >= kMaxRows)
    throw UsageError(strPrintf("-i %zu: more than %zu rows from -b %zu to -e %zu", opts.stepBytes, kMaxRows,
                               opts.minBytes, opts.maxBytes));
  return opts;
}

// -b, -b*f, -b*f^2, ... up to -e; with -i, -b, -b+i, -b+2i, ... up to -e.
std::vector<size_t> rowSizes(const Options& opts) {
  std::vector<size_t> sizes;
  if (opts.stepBytes > 0) {
    for (size_t bytes = opts.minBytes;; bytes += opts.stepBytes) {
      sizes.push_back(bytes);
      if (opts.maxBytes - bytes < opts.stepBytes) break;
    }
    return sizes;
  }
  for (size_t bytes = opts.minBytes;; bytes *= opts.stepFactor) {
    sizes.push_back(bytes);
    if (bytes > opts.maxBytes / opts.stepFactor) break;
  }
  return sizes;
}

// ---- measurement ------------------------------------------------------------------

// A buffer the calls use (`data`: host memory on MPI, device memory on NCCL)
// and its host copy (the same memory on MPI).
struct Mirror {
  void* data = nullptr;
  std::byte* host = nullptr;
};

struct Buffers {
  Mirror send;  // the harness re-draws its signs between iterations
  Mirror compressed;
  Mirror dense;
  // Used by a backward only: the gradient (forward receive shape) and the two
  // backward outputs (forward send shape).
  Mirror grad;
  Mirror gradCompressed;
  Mirror gradDense;
};

// The buffers of a run: host vectors, and on a device backend their device twins.
class BufferSet {
 public:
  BufferSet(Transport& transport, size_t elementSize) : transport_(transport), elementSize_(elementSize) {}
  ~BufferSet() {
    for (void* buffer : device_) transport_.deallocate(buffer);
  }
  BufferSet(const BufferSet&) = delete;
  BufferSet& operator=(const BufferSet&) = delete;

  Mirror make(size_t count) {
    const size_t bytes = count * elementSize_;
    // 0xff bytes are NaN in every element type: an output the checks read
    // before any call wrote it (or before it came back from the device) fails them.
    host_.emplace_back(bytes, std::byte{0xff});
    Mirror mirror{host_.back().data(), host_.back().data()};
    if (transport_.deviceMemory() && bytes > 0) {
      mirror.data = transport_.allocate(bytes);
      device_.push_back(mirror.data);
    }
    return mirror;
  }

 private:
  Transport& transport_;
  size_t elementSize_;
  std::deque<std::vector<std::byte>> host_;  // stable addresses
  std::vector<void*> device_;
};

void upload(const Transport& transport, const Mirror& mirror, size_t bytes) {
  if (mirror.data != mirror.host) transport.upload(mirror.data, mirror.host, bytes);
}

void download(const Transport& transport, const Mirror& mirror, size_t bytes) {
  if (mirror.data != mirror.host) transport.download(mirror.host, mirror.data, bytes);
}

// Whether the buffer the calls read holds what its host copy holds: the
// checks judge outputs against the host copy of the input.
bool inputCurrent(const Transport& transport, const Mirror& mirror, size_t bytes) {
  if (mirror.data == mirror.host) return true;
  std::vector<std::byte> copy(bytes);
  transport.download(copy.data(), mirror.data, bytes);
  return bytes == 0 || std::memcmp(copy.data(), mirror.host, bytes) == 0;
}

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  std::string algo;
  double compressedUs = 0;
  double denseUs = 0;
  double speedup = 0;
  double algBw = 0;  // GB/s
  double busBw = 0;  // GB/s
  double bytesSentPerCall = 0;
  double compressionRatio = kNaN;
  double relErr = kNaN;           // NaN when not checked
  uint64_t thresholdUpdates = 0;  // exact tau estimations during the timed calls (this rank)
  // #wrong (-D 1 only, as nccl-tests counts them): output elements, over all
  // ranks, whose bits differ from the dense call's; -1 when not counted.
  int64_t wrong = -1;
  bool ok = true;  // every check passed on every rank (when checked)
};

// Calls `before` (untimed) ahead of each call.
template <class F, class B>
void warmUp(const Context& ctx, int iters, F&& call, B&& before) {
  for (int i = 0; i < iters; ++i) {
    before();
    call();
  }
  ctx.dense.synchronize();
}

// `before` untimed, then `body` timed from a barrier to the end of its work
// (on a device backend the setup's work completes before the barrier, and
// the time runs until the stream has drained), then `after` untimed; the
// slowest rank's seconds.
template <class F, class B, class A>
double slowestRankSeconds(const Context& ctx, F&& body, B&& before, A&& after) {
  before();
  ctx.dense.synchronize();
  MPI_Barrier(ctx.mpiComm);
  const double start = MPI_Wtime();
  body();
  ctx.dense.synchronize();
  double time = MPI_Wtime() - start;
  after();
  MPI_Allreduce(MPI_IN_PLACE, &time, 1, MPI_DOUBLE, MPI_MAX, ctx.mpiComm);
  return time;
}

// -z 1: median over iterations of the slowest rank's time of one call, with
// `before` and `after` untimed around each.
template <class F, class B, class A>
double medianTimeUs(const Context& ctx, int iters, F&& call, B&& before, A&& after) {
  std::vector<double> times(static_cast<size_t>(iters));
  for (double& time : times) time = slowestRankSeconds(ctx, call, before, after);
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  const double median = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
  return median * 1e6;
}

// -z 0: the calls back to back after one untimed `before`, timed as one
// batch; the slowest rank's batch time over the calls.
template <class F, class B, class A>
double batchMeanTimeUs(const Context& ctx, int iters, F&& call, B&& before, A&& after) {
  const auto batch = [&] {
    for (int i = 0; i < iters; ++i) call();
  };
  return slowestRankSeconds(ctx, batch, before, after) / iters * 1e6;
}

// sum += after - before for the counters; the last* fields as `after` has them.
void addAdvance(spcclStats_t& sum, const spcclStats_t& before, const spcclStats_t& after) {
  sum.calls += after.calls - before.calls;
  sum.compressedCalls += after.compressedCalls - before.compressedCalls;
  sum.bytesSent += after.bytesSent - before.bytesSent;
  sum.denseBytes += after.denseBytes - before.denseBytes;
  sum.thresholdUpdates += after.thresholdUpdates - before.thresholdUpdates;
  sum.lastSelected = after.lastSelected;
  sum.lastThreshold = after.lastThreshold;
  sum.lastAlgorithm = after.lastAlgorithm;
}

// True when `value` is the same on every rank (min == max in one reduction).
bool sameOnAllRanks(uint64_t value, MPI_Comm comm) {
  uint64_t minAndNotMax[2] = {value, ~value};
  MPI_Allreduce(MPI_IN_PLACE, minAndNotMax, 2, MPI_UINT64_T, MPI_MIN, comm);
  return minAndNotMax[0] == ~minAndNotMax[1];
}

uint64_t hashBytes(const void* data, size_t size) {  // FNV-1a
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

// ||got - want||_2 / ||want||_2 over the receive buffers of all ranks.
double relativeError(const void* got, const void* want, size_t count, spcclDataType_t datatype, MPI_Comm comm) {
  double sums[2] = {0.0, 0.0};  // squared error, squared reference
  visitType(datatype, [&](auto v) {
    using T = decltype(v);
    const T* g = static_cast<const T*>(got);
    const T* w = static_cast<const T*>(want);
    for (size_t i = 0; i < count; ++i) {
      const double reference = toFloat(w[i]);
      const double error = toFloat(g[i]) - reference;
      sums[0] += error * error;
      sums[1] += reference * reference;
    }
  });
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, comm);
  return std::sqrt(sums[0] / sums[1]);
}

bool onAllRanks(bool local, MPI_Comm comm) {
  int value = local ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, comm);
  return value != 0;
}

// One pass (forward or backward) of a row: each call runs after its setup,
// which is untimed (the input step; for a backward, the forward it needs).
struct PassCalls {
  std::function<void()> setupCompressed;
  std::function<void()> compressed;
  std::function<void()> setupDense;
  std::function<void()> dense;
  // The compressed call needs its setup before every call (a backward: a
  // selection serves one backward), so -z 0 cannot run it back to back.
  bool setupEveryCall = false;
};

Row timePass(const Context& ctx, Collective& collective, Pass pass, size_t count, const PassCalls& calls) {
  const Options& opts = ctx.opts;
  Row row;
  row.count = count;
  row.bytes = count * typeSize(opts.datatype);

  // The counters' advance over the timed compressed calls only: a backward's
  // setup forward is a collective the communicator counts too.
  spcclStats_t timed{};
  spcclStats_t before{};
  const auto timeCalls = [&](auto&& call, auto&& setup, auto&& after) {
    return opts.blocking || calls.setupEveryCall ? medianTimeUs(ctx, opts.iters, call, setup, after)
                                                 : batchMeanTimeUs(ctx, opts.iters, call, setup, after);
  };
  warmUp(ctx, opts.warmupIters, calls.compressed, calls.setupCompressed);
  row.compressedUs = timeCalls(
      calls.compressed,
      [&] {
        calls.setupCompressed();
        before = collective.stats(ctx);
      },
      [&] { addAdvance(timed, before, collective.stats(ctx)); });
  warmUp(ctx, opts.warmupIters, calls.dense, calls.setupDense);
  row.denseUs = timeCalls(calls.dense, calls.setupDense, [] {});

  const std::string algo = collective.algoLabel(pass, timed);
  row.algo = sameOnAllRanks(hashBytes(algo.data(), algo.size()), ctx.mpiComm) ? algo : "mixed";
  row.thresholdUpdates = timed.thresholdUpdates;
  // Wire counters summed over ranks: the per-rank mean, and the ratio of the totals.
  uint64_t wire[2] = {timed.bytesSent, timed.denseBytes};
  MPI_Allreduce(MPI_IN_PLACE, wire, 2, MPI_UINT64_T, MPI_SUM, ctx.mpiComm);
  const auto toDouble = [](uint64_t v) { return static_cast<double>(v); };
  if (timed.calls > 0) row.bytesSentPerCall = toDouble(wire[0]) / ctx.nRanks / toDouble(timed.calls);
  if (wire[0] > 0) row.compressionRatio = toDouble(wire[1]) / toDouble(wire[0]);

  row.speedup = row.denseUs / row.compressedUs;
  row.algBw = static_cast<double>(row.bytes) / row.compressedUs / 1e3;
  row.busBw = row.algBw * collective.busBwFactor(ctx.nRanks);
  return row;
}

// Runs `compressed` then `dense` once each (untimed) into `got` and `want`
// and checks the pair on their host copies: rel_err finite, the descriptor's
// own check on every rank, for a replicated output the same bits everywhere,
// and the calls' input (`input`, `inCount` elements) the same as its host copy.
void checkPass(const Context& ctx, Collective& collective, const PassCalls& calls, const Mirror& got,
               const Mirror& want, const Mirror& input, size_t inCount, CheckInput& check, size_t outCount, Row& row) {
  const spcclStats_t before = collective.stats(ctx);
  calls.compressed();
  if (check.pass == Pass::kForward) check.compressed = collective.stats(ctx).compressedCalls > before.compressedCalls;
  calls.dense();
  ctx.dense.synchronize();
  const size_t outBytes = outCount * typeSize(ctx.opts.datatype);
  download(ctx.dense, got, outBytes);
  download(ctx.dense, want, outBytes);
  check.got = got.host;
  check.want = want.host;
  row.relErr = relativeError(check.got, check.want, outCount, ctx.opts.datatype, ctx.mpiComm);
  if (ctx.opts.density == 1.0f && collective.exactAtDensityOne(ctx)) {
    // An exact call: the compressed side must give the dense side's bits.
    const size_t es = typeSize(ctx.opts.datatype);
    const auto* gotBytes = static_cast<const unsigned char*>(check.got);
    const auto* wantBytes = static_cast<const unsigned char*>(check.want);
    uint64_t wrong = 0;
    for (size_t i = 0; i < outCount; ++i) wrong += std::memcmp(gotBytes + i * es, wantBytes + i * es, es) != 0;
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, ctx.mpiComm);
    row.wrong = static_cast<int64_t>(wrong);
  }
  const bool outputOk = onAllRanks(collective.outputOk(ctx, check), ctx.mpiComm);
  const bool replicasMatch = !collective.outputReplicated() ||
                             sameOnAllRanks(hashBytes(check.got, outCount * typeSize(ctx.opts.datatype)), ctx.mpiComm);
  const bool inputOk = onAllRanks(inputCurrent(ctx.dense, input, inCount * typeSize(ctx.opts.datatype)), ctx.mpiComm);
  row.ok = outputOk && replicasMatch && inputOk && std::isfinite(row.relErr) && row.wrong <= 0;
}

// One row per pass for this size; none when the size rounds down to nothing.
std::vector<Row> measureSize(const Context& ctx, Collective& collective, const Buffers& buffers, size_t bytes) {
  const Options& opts = ctx.opts;
  const BufferCounts counts = collective.bufferCounts(opts, bytes / typeSize(opts.datatype), ctx.nRanks);
  if (counts.count == 0) return {};

  uint64_t step = 0;
  const auto nextStep = [&] {
    if (opts.varyInput) {
      flipSigns(buffers.send.host, counts.send, opts.datatype, static_cast<uint64_t>(ctx.rank) * 1000003u + step);
      upload(ctx.dense, buffers.send, counts.send * typeSize(opts.datatype));
    }
    ++step;
  };
  const auto forward = [&] { collective.runCompressed(ctx, buffers.send.data, buffers.compressed.data); };
  const PassCalls forwardCalls{[&] {
                                 nextStep();
                                 collective.discardCallState();
                               },
                               forward, nextStep,
                               [&] { collective.runDense(ctx, buffers.send.data, buffers.dense.data); }};
  const PassCalls backwardCalls{
      [&] {
        nextStep();
        collective.discardCallState();
        forward();
      },
      [&] { collective.runCompressedBackward(ctx, buffers.grad.data, buffers.gradCompressed.data); }, nextStep,
      [&] { collective.runDenseBackward(ctx, buffers.grad.data, buffers.gradDense.data); }, true};
  const bool backward = collective.hasBackward();

  collective.prepare(ctx, counts.count);
  std::vector<Row> rows{timePass(ctx, collective, Pass::kForward, counts.count, forwardCalls)};
  if (backward) rows.push_back(timePass(ctx, collective, Pass::kBackward, counts.count, backwardCalls));

  if (opts.check) {
    // With error feedback every timed call adds the previous calls' residual
    // to the same input, so their outputs differ from call to call. The error
    // reported is that of one call on fresh state: empty residual and tau
    // estimated on this very input (so thresholdInterval plays no part),
    // against the dense call on the same input. A backward is checked on the
    // selection of that forward.
    collective.prepare(ctx, counts.count);
    collective.discardCallState();
    // The send buffer's host copy is current: every input step is made there.
    CheckInput check{Pass::kForward, nullptr, nullptr, buffers.send.host, false};
    checkPass(ctx, collective, forwardCalls, buffers.compressed, buffers.dense, buffers.send, counts.send, check,
              counts.recv, rows[0]);
    if (backward) {
      check = {Pass::kBackward, nullptr, nullptr, buffers.send.host, check.compressed};
      checkPass(ctx, collective, backwardCalls, buffers.gradCompressed, buffers.gradDense, buffers.grad, counts.recv,
                check, counts.send, rows[1]);
    }
  }
  return rows;
}

// ---- output (rank 0) -------------------------------------------------------

std::string formatOrNa(const char* format, double value) {
  return std::isfinite(value) ? strPrintf(format, value) : "N/A";
}

void printHeader(const Context& ctx, const Collective& collective, const Environment& env) {
  const Options& opts = ctx.opts;
  const unsigned flags = collective.flags();
  int version = 0;
  SPCCL_PERF_CHECK(spcclGetVersion(&version));
  std::printf("# spccl %s_perf, spccl %d.%d.%d\n", collective.name(), version / 10000, version / 100 % 100,
              version % 100);
  std::printf("# ranks: %d  datatype: %s", ctx.nRanks, nameOf(kDataTypes, opts.datatype).data());
  if (flags & kFlagOp) std::printf("  op: %s", nameOf(kOps, opts.op).data());
  const auto from = [](const std::string& variable) { return variable.empty() ? "" : " (" + variable + ")"; };
  std::printf("  density: %g%s", static_cast<double>(opts.density), from(opts.densityFrom).c_str());
  if (flags & kFlagRowLen) std::printf("  rowLen: %zu", opts.rowLen);
  if (flags & kFlagAlgo)
    std::printf("  algo: %s%s", allreduceAlgorithmName(opts.algorithm).data(), from(opts.algoFrom).c_str());
  std::string wire = wireDescription(opts);
  // The collectives without an op (alltoall rows, the sparsified allgather)
  // send a 16-bit buffer's own values: under fp32 they travel in its type.
  if (!(flags & kFlagOp) && effectiveWire(opts) == spcclFloat32 && opts.datatype != spcclFloat32)
    wire += strPrintf(" (%s buffers' values travel as %s)", nameOf(kDataTypes, opts.datatype).data(),
                      nameOf(kDataTypes, opts.datatype).data());
  std::printf("  wire: %s\n", wire.c_str());
  std::printf("# backend: %s\n", ctx.dense.describe().c_str());
  std::printf("# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d blocking: %d\n",
              opts.minBytes, opts.maxBytes, opts.stepBytes > 0 ? opts.stepBytes : opts.stepFactor,
              opts.stepBytes > 0 ? "bytes" : "factor", opts.warmupIters, opts.iters, opts.check ? 1 : 0,
              opts.blocking ? 1 : 0);
  for (const auto& [name, value] : env)
    std::printf("# set by this binary before %s: %s=%s\n",
                opts.backend == Backend::kNccl ? "spcclCommInitNccl" : "spcclCommInitMPI", name.c_str(), value.c_str());
  const std::string description = collective.describe(opts);
  for (size_t begin = 0; begin <= description.size();) {
    const size_t end = std::min(description.find('\n', begin), description.size());
    std::printf("# %.*s\n", static_cast<int>(end - begin), description.data() + begin);
    begin = end + 1;
  }
  std::printf("# input: per-rank Gaussian, %s\n",
              !opts.varyInput ? "identical every call (-S 0)"
              : opts.blocking ? "signs re-drawn before every iteration (untimed)"
                              : "signs re-drawn before every warm-up call and each batch of timed calls (-z 0)");
  std::printf("# time: %s%s\n",
              opts.blocking ? "median of -n calls, each the slowest rank's, barrier first"
                            : "mean of -n calls run back to back, the slowest rank's batch (-z 0)",
              !opts.blocking && collective.hasBackward()
                  ? "; backward rows per call as with -z 1 (each backward needs a forward of its own)"
                  : "");
  std::printf("#\n");
  std::printf("# %11s %11s %9s %10s %10s %8s %8s %8s %12s %8s %9s %5s %7s\n", "size", "count", "algo", "time", "dense",
              "speedup", "algbw", "busbw", "sent/call", "ratio", "rel_err", "tau", "#wrong");
  std::printf("# %11s %11s %9s %10s %10s %8s %8s %8s %12s %8s %9s %5s %7s\n", "(B)", "(elements)", "", "(us)", "(us)",
              "", "(GB/s)", "(GB/s)", "(B/rank)", "", "", "(upd)", "(-D 1)");
}

void printRow(const Row& row) {
  std::printf("  %11zu %11zu %9s %10.1f %10.1f %8.2f %8.3f %8.3f %12.0f %8s %9s %5llu %7s%s\n", row.bytes, row.count,
              row.algo.c_str(), row.compressedUs, row.denseUs, row.speedup, row.algBw, row.busBw, row.bytesSentPerCall,
              formatOrNa("%.1f", row.compressionRatio).c_str(), formatOrNa("%.3e", row.relErr).c_str(),
              static_cast<unsigned long long>(row.thresholdUpdates),
              row.wrong < 0 ? "N/A" : strPrintf("%lld", static_cast<long long>(row.wrong)).c_str(),
              row.ok ? "" : "  FAILED");
  std::fflush(stdout);
}

double mean(const std::vector<Row>& rows, double Row::*field) {
  if (rows.empty()) return kNaN;
  double sum = 0;
  for (const Row& row : rows) sum += row.*field;
  return sum / static_cast<double>(rows.size());
}

void printFooter(const std::vector<Row>& rows, int failures, bool checked) {
  std::printf("# Check failures     : %s\n",
              checked ? strPrintf("%d %s", failures, failures ? "FAILED" : "OK").c_str() : "N/A");
  std::printf("# Avg speedup        : %s\n", formatOrNa("%.3f", mean(rows, &Row::speedup)).c_str());
  std::printf("# Avg bus bandwidth  : %s\n", formatOrNa("%.3f", mean(rows, &Row::busBw)).c_str());
  std::printf("#\n");
}

// The shortest of 15 to 17 significant digits that reads back as `value`: integers up to 2^53 exactly, and
// every digit the table prints; null when not finite.
std::string jsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  std::string text;
  for (int digits = 15; digits <= 17; ++digits) {
    text = strPrintf("%.*g", digits, value);
    if (std::strtod(text.c_str(), nullptr) == value) break;
  }
  return text;
}

// A float flag's value as given (0.01, not 0.0099999997764825821).
std::string jsonNumber(float value) { return std::isfinite(value) ? floatText(value) : "null"; }

void writeJson(std::FILE* file, const Context& ctx, const Collective& collective, const std::vector<Row>& rows) {
  const Options& opts = ctx.opts;
  const unsigned flags = collective.flags();
  std::fprintf(
      file, "{\n  \"collective\": \"%s\",\n  \"backend\": \"%s\",\n  \"ranks\": %d,\n  \"datatype\": \"%s\",\n",
      collective.name(), nameOf(kBackends, opts.backend).data(), ctx.nRanks, nameOf(kDataTypes, opts.datatype).data());
  if (flags & kFlagOp) std::fprintf(file, "  \"op\": \"%s\",\n", nameOf(kOps, opts.op).data());
  std::fprintf(file, "  \"density\": %s,\n", jsonNumber(opts.density).c_str());
  if (flags & kFlagRowLen) std::fprintf(file, "  \"row_len\": %zu,\n", opts.rowLen);
  if (flags & kFlagAlgo) std::fprintf(file, "  \"algo\": \"%s\",\n", allreduceAlgorithmName(opts.algorithm).data());
  std::fprintf(file, "  \"wire\": \"%s\",\n", wireTypeName(ctx.wireValueType).data());
  if (flags & kFlagEncoding) std::fprintf(file, "  \"index_encoding\": \"%s\",\n", effectiveIndexEncoding().data());
  std::fprintf(file, "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"blocking\": %d,\n  \"rows\": [", opts.iters,
               opts.warmupIters, opts.blocking ? 1 : 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    std::fprintf(file,
                 "%s\n    {\"size\": %zu, \"count\": %zu, \"algo\": \"%s\", \"time_us\": %s, "
                 "\"dense_time_us\": %s, \"speedup\": %s, \"algbw\": %s, \"busbw\": %s, "
                 "\"bytes_sent_per_call\": %s, \"compression_ratio\": %s, \"rel_err\": %s, "
                 "\"threshold_updates\": %llu, \"wrong\": %s, \"ok\": %s}",
                 i ? "," : "", row.bytes, row.count, row.algo.c_str(), jsonNumber(row.compressedUs).c_str(),
                 jsonNumber(row.denseUs).c_str(), jsonNumber(row.speedup).c_str(), jsonNumber(row.algBw).c_str(),
                 jsonNumber(row.busBw).c_str(), jsonNumber(row.bytesSentPerCall).c_str(),
                 jsonNumber(row.compressionRatio).c_str(), jsonNumber(row.relErr).c_str(),
                 static_cast<unsigned long long>(row.thresholdUpdates),
                 row.wrong < 0 ? "null" : std::to_string(row.wrong).c_str(), row.ok ? "true" : "false");
  }
  std::fprintf(file, "\n  ]\n}\n");
}

// "rank 3", "ranks 0-3", "ranks 0,2,5-7": ranks ascending.
std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-' + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

// Each rank's reason (empty: none) gathered to rank 0, which prints every
// distinct reason once with the ranks that gave it, so that 8 ranks without
// a GPU say so in one line, not eight. Collective over `comm`.
void reportReasons(MPI_Comm comm, const std::string& why, const char* program, const char* what) {
  int rank = 0, nRanks = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &nRanks);
  const int length = static_cast<int>(why.size());
  std::vector<int> lengths(rank == 0 ? nRanks : 0), offsets(rank == 0 ? nRanks : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  int total = 0;
  for (int r = 0; r < static_cast<int>(lengths.size()); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Gatherv(why.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm);
  if (rank != 0) return;
  std::vector<std::pair<std::string, std::vector<int>>> distinct;  // in order of the first rank to give each
  for (int r = 0; r < nRanks; ++r) {
    if (lengths[r] == 0) continue;
    std::string reason = all.substr(offsets[r], lengths[r]);
    auto same = std::find_if(distinct.begin(), distinct.end(), [&](const auto& d) { return d.first == reason; });
    if (same == distinct.end()) distinct.push_back({std::move(reason), {r}});
    else same->second.push_back(r);
  }
  for (const auto& [reason, ranks] : distinct)
    std::fprintf(stderr, "%s: %s: %s: %s\n", program, rankList(ranks).c_str(), what, reason.c_str());
}

// Rank 0's -J temporary while it is open (failSpccl removes it: MPI_Abort does not unwind).
std::string openJsonTemporary;

// -J's file (rank 0). Opened at start-up under a temporary name next to it, written at the end and only
// then renamed over it: a run that stops early leaves an earlier file as it was. The temporary goes
// unless committed.
class JsonOutput {
 public:
  JsonOutput() = default;
  JsonOutput(const JsonOutput&) = delete;
  JsonOutput& operator=(const JsonOutput&) = delete;
  ~JsonOutput() {
    if (file_ != nullptr) std::fclose(file_);
    if (!temporary_.empty()) {
      std::remove(temporary_.c_str());
      openJsonTemporary.clear();
    }
  }

  // Empty: open; else why not, as errno says it.
  std::string open(const std::string& path) {
    path_ = path;
    // A link is followed, as fopen would: the file it names is replaced.
    if (char* real = realpath(path.c_str(), nullptr)) {
      path_ = real;
      std::free(real);
    }
    struct stat info {};
    if (stat(path_.c_str(), &info) == 0) {
      if (S_ISDIR(info.st_mode)) return std::strerror(EISDIR);
      if (access(path_.c_str(), W_OK) != 0) return std::strerror(errno);
    }
    const std::string temporary = path_ + "." + std::to_string(getpid()) + ".tmp";
    file_ = std::fopen(temporary.c_str(), "wx");
    if (file_ == nullptr) return std::strerror(errno);
    temporary_ = openJsonTemporary = temporary;
    return {};
  }

  bool isOpen() const { return file_ != nullptr; }
  std::FILE* get() const { return file_; }

  // Closes the temporary and renames it over the file. Empty: done; else why not.
  std::string commit() {
    const bool written = std::ferror(file_) == 0;
    errno = 0;
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    if (!written || !closed) return std::string("cannot write '") + temporary_ + "': " + std::strerror(errno);
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
      return std::string("cannot rename '") + temporary_ + "' to '" + path_ + "': " + std::strerror(errno);
    temporary_.clear();
    openJsonTemporary.clear();
    return {};
  }

 private:
  std::string path_;
  std::string temporary_;
  std::FILE* file_ = nullptr;
};

int benchmarkMain(int argc, char** argv, Collective& collective) {
  int rank = 0;
  int nRanks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nRanks);
  const bool root = rank == 0;

  // Every rank parses the same argv, so all of them stop together on an error.
  Options opts;
  std::vector<size_t> sizes;
  try {
    opts = parseOptions(argc, argv, collective);
    sizes = rowSizes(opts);
    const BufferCounts largest = collective.bufferCounts(opts, sizes.back() / typeSize(opts.datatype), nRanks);
    if (opts.backend != Backend::kNccl && std::max(largest.send, largest.recv) > static_cast<size_t>(INT_MAX))
      throw UsageError(strPrintf("-e %zu: more elements than an MPI count holds", opts.maxBytes));
  } catch (const UsageError& error) {
    if (root) std::fprintf(stderr, "%s: %s\nRun with -h for the flags.\n", argv[0], error.what());
    return 2;
  }
  if (opts.help) {
    if (root) printUsage(argv[0], collective);
    return 0;
  }
  // The flags not given that default to SPCCL_* variables (an invalid value fails as in the library).
  collective.environmentDefaults(opts);
  // An unwritable -J path is an invalid flag value, found before any communicator exists.
  JsonOutput json;
  if (!opts.jsonPath.empty()) {
    std::string why;
    if (root) why = json.open(opts.jsonPath);
    int opened = why.empty() ? 1 : 0;
    MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!opened) {
      if (root) std::fprintf(stderr, "%s: -J: cannot open '%s': %s\n", argv[0], opts.jsonPath.c_str(), why.c_str());
      return 2;
    }
  }

  // The library reads its SPCCL_* variables when the communicator is created.
  Environment env = collective.environment(opts);
  if (!opts.indexEncoding.empty()) env.emplace_back("SPCCL_INDEX_ENCODING", opts.indexEncoding);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
  std::unique_ptr<Transport> transport;
  if (opts.backend != Backend::kNccl) {
    transport = std::make_unique<MpiTransport>(MPI_COMM_WORLD, opts.datatype, opts.backend == Backend::kMpiStaged);
  } else {
    // Every rank learns whether every rank has a device before NCCL starts.
    std::string why;
#if SPCCL_PERF_WITH_NCCL
    transport = makeNcclTransport(MPI_COMM_WORLD, &why);
#else
    why = "this build has no NCCL (SPCCL_WITH_NCCL=OFF: CMake found no CUDA toolkit with NCCL)";
#endif
    if (transport == nullptr) {
      reportReasons(MPI_COMM_WORLD, why, argv[0], "-B nccl");
      return 2;
    }
  }
  const Context ctx{opts,   transport->comm(), MPI_COMM_WORLD,      rank,
                    nRanks, *transport,        transport->stream(), effectiveWire(opts)};

  // Sized for the largest row; smaller rows use the front of each buffer.
  const size_t elementSize = typeSize(opts.datatype);
  const BufferCounts largest = collective.bufferCounts(opts, sizes.back() / elementSize, nRanks);
  const bool backward = collective.hasBackward();
  BufferSet memory(*transport, elementSize);
  Buffers buffers;
  std::string allocationFailure;  // this rank's: empty when every buffer was made
  try {
    buffers = Buffers{memory.make(largest.send),
                      memory.make(largest.recv),
                      memory.make(largest.recv),
                      memory.make(backward ? largest.recv : 0),
                      memory.make(backward ? largest.send : 0),
                      memory.make(backward ? largest.send : 0)};
  } catch (const std::bad_alloc& error) {
    allocationFailure = error.what();
  }
  // Every rank stops when any failed, so none waits for the others in a collective.
  if (!onAllRanks(allocationFailure.empty(), MPI_COMM_WORLD)) {
    const size_t counts = 2 * largest.recv + largest.send + (backward ? largest.recv + 2 * largest.send : 0);
    const bool twice = transport->deviceMemory();  // the calls' own buffers and their host copies
    const std::string what =
        strPrintf("cannot allocate %zu bytes per rank%s for size %zu", counts * elementSize * (twice ? 2 : 1),
                  twice ? " (half the calls' buffers, half their host copies)" : "", sizes.back());
    reportReasons(MPI_COMM_WORLD, allocationFailure, argv[0], what.c_str());
    return 1;
  }
  fillGaussian(buffers.send.host, largest.send, opts.datatype, static_cast<uint64_t>(rank));
  upload(*transport, buffers.send, largest.send * elementSize);
  if (backward) {
    fillGaussian(buffers.grad.host, largest.recv, opts.datatype, static_cast<uint64_t>(nRanks + rank));
    upload(*transport, buffers.grad, largest.recv * elementSize);
  }

  if (root) printHeader(ctx, collective, env);
  std::vector<Row> rows;
  int failures = 0;
  for (size_t bytes : sizes) {
    const std::vector<Row> sizeRows = measureSize(ctx, collective, buffers, bytes);
    if (sizeRows.empty() && root) std::printf("# %11zu B: smaller than one unit of this collective, skipped\n", bytes);
    for (const Row& row : sizeRows) {
      rows.push_back(row);
      failures += row.ok ? 0 : 1;
      if (root) printRow(row);
    }
  }
  if (root) {
    printFooter(rows, failures, opts.check);
    if (json.isOpen()) {
      writeJson(json.get(), ctx, collective, rows);
      const std::string why = json.commit();
      if (!why.empty()) {
        std::fprintf(stderr, "%s: -J: %s\n", argv[0], why.c_str());
        failures += 1;
      }
    }
  }

  collective.release();  // before the communicator goes with the transport
  return failures ? 1 : 0;
}

}  // namespace

// Deterministic per rank: the same seed gives the same values on every run.
void fillGaussian(void* buf, size_t count, spcclDataType_t datatype, uint64_t seed) {
  visitType(datatype, [&](auto v) {
    using T = decltype(v);
    std::mt19937_64 generator(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    T* values = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) values[i] = fromFloat<T>(normal(generator));
  });
}

// Flips the sign of each element with probability 1/2 (a hash of index and
// step): magnitudes stay, and successive steps are a mean-zero sequence per
// element, as gradients are in training. With the identical input every call,
// error feedback would instead grow every residual linearly and the stored
// threshold would go stale on every call (-S 0 measures that case).
void flipSigns(void* buf, size_t count, spcclDataType_t datatype, uint64_t step) {
  // XOR of the sign bit on the raw representation: no conversion, no branch.
  const auto flip = [&](auto* values, auto signBit) {
    uint64_t state = 0x9e3779b97f4a7c15ull * (step + 1);
    for (size_t i = 0; i < count; i += 64) {
      state ^= state << 13;  // xorshift64: one 64-bit draw per 64 elements
      state ^= state >> 7;
      state ^= state << 17;
      const size_t n = std::min<size_t>(64, count - i);
      for (size_t j = 0; j < n; ++j) values[i + j] ^= static_cast<decltype(signBit)>(((state >> j) & 1u) * signBit);
    }
  };
  if (typeSize(datatype) == 4) flip(static_cast<uint32_t*>(buf), uint32_t{0x80000000u});
  else flip(static_cast<uint16_t*>(buf), uint16_t{0x8000u});
}

// ---- Collective defaults and helpers for descriptors -------------------------

spcclStats_t Collective::stats(const Context& ctx) const {
  spcclStats_t stats{};
  SPCCL_PERF_CHECK(spcclCommGetStats(ctx.comm, &stats));
  return stats;
}

std::string Collective::algoLabel(Pass /*pass*/, const spcclStats_t& timed) const {
  if (timed.compressedCalls == 0) return "exact";
  return timed.compressedCalls == timed.calls ? "sparse" : "mixed";
}

size_t typeSize(spcclDataType_t datatype) {
  return visitType(datatype, [](auto v) { return sizeof(v); });
}

std::string_view allreduceAlgorithmName(int algorithm) { return nameOf(kAlgorithms, algorithm); }

std::string_view wireTypeName(spcclDataType_t wire) { return nameOf(kWireTypes, wire); }

const char* environmentValue(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

std::string floatText(float value) {
  for (int digits = 6; digits < 9; ++digits) {
    const std::string text = strPrintf("%.*g", digits, static_cast<double>(value));
    if (std::strtof(text.c_str(), nullptr) == value) return text;
  }
  return strPrintf("%.9g", static_cast<double>(value));
}

Environment wireEnvironment(const Options& opts) {
  if (!opts.wireValueType) return {};
  return {{"SPCCL_VALUE_TYPE", std::string(wireTypeName(*opts.wireValueType))}};
}

// max(1, ceil(density * n)), at most n, the product read as the decimal
// density means (docs/ALGORITHMS.md): no further above a whole number than
// the float's rounding (relative 2^-24) counts as that number.
size_t keptPerRow(float density, size_t n) {
  const double x = static_cast<double>(density) * static_cast<double>(n);
  const double whole = std::floor(x);
  const double keep = x - whole > std::ldexp(x, -24) ? whole + 1 : whole;
  return std::clamp<size_t>(static_cast<size_t>(keep), 1, n);
}

bool isTopkMasked(const void* got, const void* want, const void* maskSource, size_t rows, size_t rowLen, size_t keep,
                  spcclDataType_t datatype, spcclDataType_t wire, KeptValues rule) {
  return visitType(datatype, [&](auto v) {
    using T = decltype(v);
    const T* g = static_cast<const T*>(got);
    const T* w = static_cast<const T*>(want);
    const T* m = static_cast<const T*>(maskSource);
    // NaN and Inf rank above every finite value: the library always keeps them.
    const auto magnitude = [](T x) {
      const float f = std::fabs(toFloat(x));
      return std::isnan(f) ? std::numeric_limits<float>::infinity() : f;
    };
    // fp8 wire: each stream has its own power-of-two scale (from its largest
    // |value|), which this check does not rebuild: a kept value must be within
    // e4m3's relative rounding (2^-4) of the exact one, or within the
    // subnormal quantum of a scale set by the buffer's largest |value|.
    const bool fp8 = wire == spcclFloat8e4m3;
    float fp8Floor = 0.0f;
    if (fp8)
      for (size_t i = 0; i < rows * rowLen; ++i) {
        const float f = std::fabs(toFloat(w[i]));
        if (std::isfinite(f)) fp8Floor = std::max(fp8Floor, std::ldexp(f, -17));
      }
    std::vector<uint32_t> order(rowLen);
    std::vector<char> kept(rowLen);
    for (size_t r = 0; r < rows; ++r) {
      const size_t base = r * rowLen;
      std::iota(order.begin(), order.end(), 0u);
      std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                       [&](uint32_t a, uint32_t b) {
                         const float ma = magnitude(m[base + a]);
                         const float mb = magnitude(m[base + b]);
                         return ma > mb || (ma == mb && a < b);
                       });
      std::fill(kept.begin(), kept.end(), 0);
      for (size_t i = 0; i < keep; ++i) kept[order[i]] = 1;
      float int8Scale = 0.0f;  // the row's largest finite |kept| / 127
      if (rule.kind == KeptValues::kInt8) {
        for (size_t i = 0; i < rowLen; ++i)
          if (kept[i] && std::isfinite(toFloat(w[base + i])))
            int8Scale = std::max(int8Scale, std::fabs(toFloat(w[base + i])));
        int8Scale /= 127.0f;
      }
      // The decoded value stored in the buffer type rounds once more.
      const double storeRounding = datatype == spcclFloat16    ? std::ldexp(1.0, -11)
                                   : datatype == spcclBfloat16 ? std::ldexp(1.0, -8)
                                                               : std::ldexp(1.0, -24);
      for (size_t i = 0; i < rowLen; ++i) {
        const float value = toFloat(g[base + i]);
        if (!kept[i]) {
          if (value != 0.0f) return false;
          continue;
        }
        if (rule.kind != KeptValues::kWire) {
          const float x = toFloat(w[base + i]);
          if (!std::isfinite(x)) {  // int8 codes NaN and Inf alike as NaN; bounded sends them as they are
            if (rule.kind == KeptValues::kInt8 ? !std::isnan(value)
                                               : !(value == x || (std::isnan(value) && std::isnan(x))))
              return false;
            continue;
          }
          const double slack = rule.kind == KeptValues::kInt8 ? 0.5 * int8Scale * (1 + 1e-6) : rule.bound;
          if (!(std::fabs(static_cast<double>(value) - x) <= slack * (1 + 1e-6) + std::fabs(x) * storeRounding))
            return false;
          continue;
        }
        const float expected = toFloat(throughWire(w[base + i], wire));
        if (fp8 && std::isfinite(expected) &&
            std::fabs(value - expected) <= std::max(std::ldexp(std::fabs(expected), -4), fp8Floor))
          continue;
        if (!(value == expected || (std::isnan(value) && std::isnan(expected)))) return false;
      }
    }
    return true;
  });
}

void failSpccl(spcclResult_t result, const char* call, const char* file, int line) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %s:%d: %s failed: %s: %s\n", rank, file, line, call, spcclGetErrorString(result),
               spcclGetLastError(nullptr));
  std::fflush(stdout);  // keep what rank 0 printed before the failure
  std::fflush(stderr);
  if (!openJsonTemporary.empty()) std::remove(openJsonTemporary.c_str());  // -J's file stays as it was
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);  // MPI_Abort does not return
}

std::string denseCallName(const Options& opts, std::string_view mpiName, std::string_view ncclName) {
  return std::string(opts.backend == Backend::kNccl ? ncclName : mpiName);
}

void divideBuffer(void* buf, size_t count, spcclDataType_t datatype, float divisor) {
  visitType(datatype, [&](auto v) {
    using T = decltype(v);
    T* values = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) values[i] = fromFloat<T>(toFloat(values[i]) / divisor);
  });
}

int runBenchmark(int argc, char** argv, Collective& collective) {
  MPI_Init(&argc, &argv);
  const int rc = benchmarkMain(argc, argv, collective);
  MPI_Finalize();
  return rc;
}

}  // namespace spccl::perf
