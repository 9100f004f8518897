#include "harness.h"

#include <getopt.h>

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
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

namespace spccl::perf {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kMixedAlgorithm = -1;

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

size_t typeSize(spcclDataType_t datatype) {
  return visitType(datatype, [](auto v) { return sizeof(v); });
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
  bool userDefined() const { return owned_; }

 private:
  MPI_Datatype type_ = MPI_FLOAT;
  MPI_Op sum_ = MPI_SUM;
  bool owned_ = false;
};

// ---- names of flag values ---------------------------------------------------

template <class T>
struct Named {
  std::string_view name;
  T value;
};

constexpr Named<spcclDataType_t> kDataTypes[] = {
    {"float", spcclFloat}, {"half", spcclFloat16}, {"bfloat16", spcclBfloat16}};
constexpr Named<spcclRedOp_t> kOps[] = {{"sum", spcclSum}, {"avg", spcclAvg}};
constexpr Named<int> kAlgorithms[] = {{"auto", SPCCL_ALGO_AUTO},
                                      {"dense", SPCCL_ALGO_DENSE},
                                      {"allgather", SPCCL_ALGO_ALLGATHER},
                                      {"split", SPCCL_ALGO_SPLIT}};
constexpr Named<spcclDataType_t> kWireTypes[] = {
    {"fp32", spcclFloat32}, {"fp16", spcclFloat16}, {"bf16", spcclBfloat16}};

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

std::string_view algorithmName(int algorithm) {
  return algorithm == kMixedAlgorithm ? "mixed" : nameOf(kAlgorithms, algorithm);
}

std::string_view wireName(const Options& opts) {
  return opts.wireValueType ? nameOf(kWireTypes, *opts.wireValueType) : "env";
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
  throw UsageError(strPrintf("-%c: unknown value '%s' (expected %s)", flag, arg,
                             joinNames(table).c_str()));
}

// Bytes with an optional K, M or G suffix (powers of 1024, as nccl-tests).
size_t parseSize(char flag, const char* arg) {
  const UsageError error(
      strPrintf("-%c: expected a size in bytes with an optional K/M/G suffix, got '%s'", flag, arg));
  if (!std::isdigit(static_cast<unsigned char>(arg[0]))) throw error;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(arg, &end, 10);
  if (errno == ERANGE) throw error;
  unsigned shift = 0;
  switch (std::tolower(static_cast<unsigned char>(*end))) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    default: break;
  }
  if (shift != 0) ++end;
  if (*end != '\0' || value > (SIZE_MAX >> shift)) throw error;
  return static_cast<size_t>(value) << shift;
}

long parseInteger(char flag, const char* arg, long min, long max) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(arg, &end, 10);
  if (end == arg || *end != '\0' || errno == ERANGE || value < min || value > max)
    throw UsageError(
        strPrintf("-%c: expected an integer in [%ld, %ld], got '%s'", flag, min, max, arg));
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

void printUsage(const char* program) {
  std::printf(
      "Usage: %s [flags]\n"
      "  -b, --minbytes <size>     smallest size, bytes with K/M/G suffix (default 32M)\n"
      "  -e, --maxbytes <size>     largest size (default 32M)\n"
      "  -f, --stepfactor <n>      size multiplier between rows, >= 2 (default 2)\n"
      "  -n, --iters <n>           timed iterations per row (default 20)\n"
      "  -w, --warmup_iters <n>    untimed iterations before them (default 5)\n"
      "  -c, --check <0|1>         relative error and replica check per row (default 1)\n"
      "  -S, --vary <0|1>          re-draw input signs before each iteration, untimed (default 1)\n"
      "  -d, --datatype <type>     %s (default float)\n"
      "  -o, --op <op>             %s (default sum)\n"
      "  -D, --density <x>         fraction of entries kept, (0, 1] (default 0.01)\n"
      "  -a, --algo <algo>         %s (default auto)\n"
      "  -V, --wire <type>         wire value type %s (default: SPCCL_* env)\n"
      "  -J, --json <file>         also write the rows as JSON (rank 0)\n"
      "  -h, --help                this text\n",
      program, joinNames(kDataTypes).c_str(), joinNames(kOps).c_str(),
      joinNames(kAlgorithms).c_str(), joinNames(kWireTypes).c_str());
}

Options parseOptions(int argc, char** argv) {
  static const option kLongOptions[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"vary", required_argument, nullptr, 'S'},
      {"datatype", required_argument, nullptr, 'd'},
      {"op", required_argument, nullptr, 'o'},
      {"density", required_argument, nullptr, 'D'},
      {"algo", required_argument, nullptr, 'a'},
      {"wire", required_argument, nullptr, 'V'},
      {"json", required_argument, nullptr, 'J'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0}};
  Options opts;
  opterr = 0;  // every rank parses; only rank 0 reports
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:S:d:o:D:a:V:J:h", kLongOptions, nullptr)) != -1) {
    const char flag = static_cast<char>(c);
    switch (c) {
      case 'b': opts.minBytes = parseSize(flag, optarg); break;
      case 'e': opts.maxBytes = parseSize(flag, optarg); break;
      case 'f': opts.stepFactor = static_cast<size_t>(parseInteger(flag, optarg, 2, 1L << 20)); break;
      case 'n': opts.iters = static_cast<int>(parseInteger(flag, optarg, 1, INT_MAX)); break;
      case 'w': opts.warmupIters = static_cast<int>(parseInteger(flag, optarg, 0, INT_MAX)); break;
      case 'c': opts.check = parseInteger(flag, optarg, 0, 1) != 0; break;
    case 'S': opts.varyInput = parseInteger(flag, optarg, 0, 1) != 0; break;
      case 'd': opts.datatype = parseNamed(flag, optarg, kDataTypes); break;
      case 'o': opts.op = parseNamed(flag, optarg, kOps); break;
      case 'D': opts.density = parseDensity(flag, optarg); break;
      case 'a': opts.algorithm = parseNamed(flag, optarg, kAlgorithms); break;
      case 'V': opts.wireValueType = parseNamed(flag, optarg, kWireTypes); break;
      case 'J': opts.jsonPath = optarg; break;
      case 'h': opts.help = true; break;
      case ':': throw UsageError(strPrintf("%s: missing value", argv[optind - 1]));
      default:
        throw UsageError(optopt ? strPrintf("unknown flag '-%c'", optopt)
                                : strPrintf("unknown flag '%s'", argv[optind - 1]));
    }
  }
  if (optind < argc) throw UsageError(strPrintf("unexpected argument '%s'", argv[optind]));
  if (opts.minBytes == 0) throw UsageError("-b: the smallest size must be at least 1 byte");
  if (opts.minBytes > opts.maxBytes)
    throw UsageError(strPrintf("-b %zu is larger than -e %zu", opts.minBytes, opts.maxBytes));
  return opts;
}

// -b, -b*f, -b*f^2, ... up to -e.
std::vector<size_t> rowSizes(const Options& opts) {
  std::vector<size_t> sizes;
  for (size_t bytes = opts.minBytes;; bytes *= opts.stepFactor) {
    sizes.push_back(bytes);
    if (bytes > opts.maxBytes / opts.stepFactor) break;
  }
  return sizes;
}

// ---- measurement ------------------------------------------------------------------

struct Buffers {
  void* send;  // the harness re-draws its signs between iterations
  void* compressed;
  void* dense;
};

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  int algorithm = kMixedAlgorithm;
  double compressedUs = 0;
  double denseUs = 0;
  double speedup = 0;
  double algBw = 0;  // GB/s
  double busBw = 0;  // GB/s
  double bytesSentPerCall = 0;
  double compressionRatio = kNaN;
  double relErr = kNaN;  // NaN when not checked
  uint64_t thresholdUpdates = 0;  // exact tau estimations during the timed calls (this rank)
  bool ok = true;        // replicas identical and relErr finite (when checked)
};

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
      for (size_t j = 0; j < n; ++j)
        values[i + j] ^= static_cast<decltype(signBit)>(((state >> j) & 1u) * signBit);
    }
  };
  if (typeSize(datatype) == 4)
    flip(static_cast<uint32_t*>(buf), uint32_t{0x80000000u});
  else
    flip(static_cast<uint16_t*>(buf), uint16_t{0x8000u});
}

// Calls `before` (untimed) ahead of each call.
template <class F, class B>
void warmUp(int iters, F&& call, B&& before) {
  for (int i = 0; i < iters; ++i) {
    before();
    call();
  }
}

// Median over iterations of the slowest rank's time, barrier before each;
// `before` runs untimed ahead of each call.
template <class F, class B>
double medianTimeUs(MPI_Comm comm, int iters, F&& call, B&& before) {
  std::vector<double> times(static_cast<size_t>(iters));
  for (double& time : times) {
    before();
    MPI_Barrier(comm);
    const double start = MPI_Wtime();
    call();
    time = MPI_Wtime() - start;
    MPI_Allreduce(MPI_IN_PLACE, &time, 1, MPI_DOUBLE, MPI_MAX, comm);
  }
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  const double median = times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
  return median * 1e6;
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
double relativeError(const void* got, const void* want, size_t count, spcclDataType_t datatype,
                     MPI_Comm comm) {
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

std::optional<Row> measureRow(const Context& ctx, Collective& collective, const Buffers& buffers,
                              size_t bytes) {
  const Options& opts = ctx.opts;
  const size_t elementSize = typeSize(opts.datatype);
  const BufferCounts counts = collective.bufferCounts(bytes / elementSize, ctx.nRanks);
  if (counts.count == 0) return std::nullopt;
  const auto compressed = [&] { collective.runCompressed(ctx, buffers.send, buffers.compressed); };
  const auto dense = [&] { collective.runDense(ctx, buffers.send, buffers.dense); };

  Row row;
  row.count = counts.count;
  row.bytes = counts.count * elementSize;

  uint64_t step = 0;
  const auto nextStep = [&] {
    if (opts.varyInput) flipSigns(buffers.send, counts.send, opts.datatype, static_cast<uint64_t>(ctx.rank) * 1000003u + step);
    ++step;
  };
  collective.prepare(ctx, counts.count);
  warmUp(opts.warmupIters, compressed, nextStep);
  const spcclStats_t before = collective.stats();
  row.compressedUs = medianTimeUs(ctx.mpiComm, opts.iters, compressed, nextStep);
  const spcclStats_t after = collective.stats();
  row.thresholdUpdates = after.thresholdUpdates - before.thresholdUpdates;
  warmUp(opts.warmupIters, dense, nextStep);
  row.denseUs = medianTimeUs(ctx.mpiComm, opts.iters, dense, nextStep);

  const uint64_t algorithm = static_cast<uint64_t>(after.lastAlgorithm);
  row.algorithm = sameOnAllRanks(algorithm, ctx.mpiComm) ? after.lastAlgorithm : kMixedAlgorithm;
  // Wire counters summed over ranks: the per-rank mean, and the ratio of the totals.
  uint64_t wire[2] = {after.bytesSent - before.bytesSent, after.denseBytes - before.denseBytes};
  MPI_Allreduce(MPI_IN_PLACE, wire, 2, MPI_UINT64_T, MPI_SUM, ctx.mpiComm);
  const uint64_t calls = after.calls - before.calls;
  const auto toDouble = [](uint64_t v) { return static_cast<double>(v); };
  if (calls > 0) row.bytesSentPerCall = toDouble(wire[0]) / ctx.nRanks / toDouble(calls);
  if (wire[0] > 0) row.compressionRatio = toDouble(wire[1]) / toDouble(wire[0]);

  row.speedup = row.denseUs / row.compressedUs;
  row.algBw = static_cast<double>(row.bytes) / row.compressedUs / 1e3;
  row.busBw = row.algBw * collective.busBwFactor(ctx.nRanks);

  if (opts.check) {
    // With error feedback every timed call adds the previous calls' residual
    // to the same input, so their outputs differ from call to call. The error
    // reported is that of one call of a fresh compressor: empty residual and
    // tau estimated on this very input (so thresholdInterval plays no part),
    // against the dense result of the same input (already in buffers.dense).
    collective.prepare(ctx, counts.count);
    compressed();
    row.relErr = relativeError(buffers.compressed, buffers.dense, counts.recv, opts.datatype,
                               ctx.mpiComm);
    const bool replicasMatch =
        !collective.outputReplicated() ||
        sameOnAllRanks(hashBytes(buffers.compressed, counts.recv * elementSize), ctx.mpiComm);
    row.ok = replicasMatch && std::isfinite(row.relErr);
  }
  return row;
}

// ---- output (rank 0) -------------------------------------------------------

std::string formatOrNa(const char* format, double value) {
  return std::isfinite(value) ? strPrintf(format, value) : "N/A";
}

void printHeader(const Context& ctx, const Collective& collective, bool userDefinedSum) {
  const Options& opts = ctx.opts;
  int version = 0;
  SPCCL_PERF_CHECK(spcclGetVersion(&version));
  std::printf("# spccl %s_perf, spccl %d.%d.%d\n", collective.name(), version / 10000,
              version / 100 % 100, version % 100);
  std::printf("# ranks: %d  datatype: %s  op: %s  density: %g  algo: %s  wire: %s\n", ctx.nRanks,
              nameOf(kDataTypes, opts.datatype).data(), nameOf(kOps, opts.op).data(),
              opts.density, algorithmName(opts.algorithm).data(), wireName(opts).data());
  std::printf("# minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d "
              "validation: %d\n",
              opts.minBytes, opts.maxBytes, opts.stepFactor, opts.warmupIters, opts.iters,
              opts.check ? 1 : 0);
  std::printf("# compressed: spccl, one fresh compressor per size; dense: plain MPI%s\n",
              userDefinedSum ? " (user-defined fp32-accumulating sum op)" : "");
  std::printf("# input: per-rank Gaussian, %s\n",
              opts.varyInput ? "signs re-drawn before every iteration (untimed)" : "identical every call (-S 0)");
  std::printf("#\n");
  std::printf("# %11s %11s %9s %10s %10s %8s %8s %8s %12s %8s %9s %5s\n", "size", "count", "algo",
              "time", "dense", "speedup", "algbw", "busbw", "sent/call", "ratio", "rel_err", "tau");
  std::printf("# %11s %11s %9s %10s %10s %8s %8s %8s %12s %8s %9s %5s\n", "(B)", "(elements)", "", "(us)",
              "(us)", "", "(GB/s)", "(GB/s)", "(B/rank)", "", "", "(upd)");
}

void printRow(const Row& row) {
  std::printf("  %11zu %11zu %9s %10.1f %10.1f %8.2f %8.3f %8.3f %12.0f %8s %9s %5llu%s\n", row.bytes,
              row.count, algorithmName(row.algorithm).data(), row.compressedUs, row.denseUs,
              row.speedup, row.algBw, row.busBw, row.bytesSentPerCall,
              formatOrNa("%.1f", row.compressionRatio).c_str(),
              formatOrNa("%.3e", row.relErr).c_str(), static_cast<unsigned long long>(row.thresholdUpdates),
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

std::string jsonNumber(double value) {
  return std::isfinite(value) ? strPrintf("%.6g", value) : "null";
}

void writeJson(std::FILE* file, const Context& ctx, const Collective& collective,
               const std::vector<Row>& rows) {
  const Options& opts = ctx.opts;
  std::fprintf(file,
               "{\n  \"collective\": \"%s\",\n  \"ranks\": %d,\n  \"datatype\": \"%s\",\n"
               "  \"op\": \"%s\",\n  \"density\": %s,\n  \"algo\": \"%s\",\n  \"wire\": \"%s\",\n"
               "  \"iters\": %d,\n  \"warmup_iters\": %d,\n  \"rows\": [",
               collective.name(), ctx.nRanks, nameOf(kDataTypes, opts.datatype).data(),
               nameOf(kOps, opts.op).data(), jsonNumber(opts.density).c_str(),
               algorithmName(opts.algorithm).data(), wireName(opts).data(), opts.iters,
               opts.warmupIters);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    std::fprintf(file,
                 "%s\n    {\"size\": %zu, \"count\": %zu, \"algo\": \"%s\", \"time_us\": %s, "
                 "\"dense_time_us\": %s, \"speedup\": %s, \"algbw\": %s, \"busbw\": %s, "
                 "\"bytes_sent_per_call\": %s, \"compression_ratio\": %s, \"rel_err\": %s, "
                 "\"threshold_updates\": %llu, \"ok\": %s}",
                 i ? "," : "", row.bytes, row.count, algorithmName(row.algorithm).data(),
                 jsonNumber(row.compressedUs).c_str(), jsonNumber(row.denseUs).c_str(),
                 jsonNumber(row.speedup).c_str(), jsonNumber(row.algBw).c_str(),
                 jsonNumber(row.busBw).c_str(), jsonNumber(row.bytesSentPerCall).c_str(),
                 jsonNumber(row.compressionRatio).c_str(), jsonNumber(row.relErr).c_str(),
                 static_cast<unsigned long long>(row.thresholdUpdates), row.ok ? "true" : "false");
  }
  std::fprintf(file, "\n  ]\n}\n");
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

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
    opts = parseOptions(argc, argv);
    sizes = rowSizes(opts);
    const BufferCounts largest =
        collective.bufferCounts(sizes.back() / typeSize(opts.datatype), nRanks);
    if (std::max(largest.send, largest.recv) > static_cast<size_t>(INT_MAX))
      throw UsageError(strPrintf("-e %zu: more elements than an MPI count holds", opts.maxBytes));
  } catch (const UsageError& error) {
    if (root) std::fprintf(stderr, "%s: %s\nRun with -h for the flags.\n", argv[0], error.what());
    return 2;
  }
  if (opts.help) {
    if (root) printUsage(argv[0]);
    return 0;
  }

  File json;
  if (!opts.jsonPath.empty()) {
    int opened = 1;
    if (root) {
      json.reset(std::fopen(opts.jsonPath.c_str(), "w"));
      opened = json != nullptr;
    }
    MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!opened) {
      if (root) std::fprintf(stderr, "%s: -J: cannot open '%s'\n", argv[0], opts.jsonPath.c_str());
      return 1;
    }
  }

  spcclComm_t comm = nullptr;
  SPCCL_PERF_CHECK(spcclCommInitMPI(&comm, MPI_COMM_WORLD));
  const DenseReduction dense(opts.datatype);
  const Context ctx{opts, comm, MPI_COMM_WORLD, rank, nRanks, dense.type(), dense.sum()};

  // Sized for the largest row; smaller rows use the front of each buffer.
  const size_t elementSize = typeSize(opts.datatype);
  const BufferCounts largest = collective.bufferCounts(sizes.back() / elementSize, nRanks);
  std::vector<std::byte> send(largest.send * elementSize);
  std::vector<std::byte> recvCompressed(largest.recv * elementSize);
  std::vector<std::byte> recvDense(largest.recv * elementSize);
  fillGaussian(send.data(), largest.send, opts.datatype, static_cast<uint64_t>(rank));
  const Buffers buffers{send.data(), recvCompressed.data(), recvDense.data()};

  if (root) printHeader(ctx, collective, dense.userDefined());
  std::vector<Row> rows;
  int failures = 0;
  for (size_t bytes : sizes) {
    const std::optional<Row> row = measureRow(ctx, collective, buffers, bytes);
    if (!row) continue;
    rows.push_back(*row);
    failures += row->ok ? 0 : 1;
    if (root) printRow(*row);
  }
  if (root) {
    printFooter(rows, failures, opts.check);
    if (json) writeJson(json.get(), ctx, collective, rows);
  }

  collective.release();
  SPCCL_PERF_CHECK(spcclCommDestroy(comm));
  return failures ? 1 : 0;
}

}  // namespace

void failSpccl(spcclResult_t result, const char* call, const char* file, int line) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %s:%d: %s failed: %s: %s\n", rank, file, line, call,
               spcclGetErrorString(result), spcclGetLastError(nullptr));
  std::fflush(stdout);  // keep what rank 0 printed before the failure
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);  // MPI_Abort does not return
}

void scaleBuffer(void* buf, size_t count, spcclDataType_t datatype, float factor) {
  visitType(datatype, [&](auto v) {
    using T = decltype(v);
    T* values = static_cast<T*>(buf);
    for (size_t i = 0; i < count; ++i) values[i] = fromFloat<T>(toFloat(values[i]) * factor);
  });
}

int runBenchmark(int argc, char** argv, Collective& collective) {
  MPI_Init(&argc, &argv);
  const int rc = benchmarkMain(argc, argv, collective);
  MPI_Finalize();
  return rc;
}

}  // namespace spccl::perf
