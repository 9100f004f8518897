#include "src/params.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "codec/codec.h"
#include "include/spccl.h"

namespace spccl {

namespace {

// SPCCL_INDEX_ENCODING's choices, in kIndexEncoding* order (codec/codec.h).
constexpr const char* kIndexEncodingNames[] = {"auto", "coo", "delta", "bitmap"};
static_assert(kIndexEncodingAuto == 0 && kIndexEncodingCoo == 1 && kIndexEncodingDelta == 2 &&
                  kIndexEncodingBitmap == 3,
              "SPCCL_INDEX_ENCODING's choice order is kIndexEncoding*'s");
static_assert(kRowsCodecWire == 0 && kRowsCodecInt8 == 1 && kRowsCodecBounded == 2 && kRowsCodecFp16 == 3 &&
                  kRowsCodecBf16 == 4 && kRowsCodecFp8 == 5,
              "SPCCL_ROWS_CODEC's choice order is kRowsCodec*'s");

// Choice order of SPCCL_VALUE_TYPE; SPCCL_ALGO's choice order is SPCCL_ALGO_*.
constexpr core::ValueType kValueTypeChoices[] = {core::ValueType::kFloat32, core::ValueType::kFloat16,
                                                 core::ValueType::kBfloat16, core::ValueType::kFloat8e4m3};

// SPCCL_INTERCEPT's choices "off|allreduce|alltoall|allgather|all", listed bits -> kIntercept*.
constexpr unsigned interceptBits(unsigned listed) {
  constexpr unsigned kAll = kInterceptAllreduce | kInterceptAlltoall | kInterceptAllgather;
  return ((listed & 2u) ? kInterceptAllreduce : 0u) | ((listed & 4u) ? kInterceptAlltoall : 0u) |
         ((listed & 8u) ? kInterceptAllgather : 0u) | ((listed & 16u) ? kAll : 0u);
}

std::string interceptNames(unsigned bits) {
  std::string out;
  if (bits & kInterceptAllreduce) out += ",allreduce";
  if (bits & kInterceptAlltoall) out += ",alltoall";
  if (bits & kInterceptAllgather) out += ",allgather";
  return out.empty() ? "off" : out.substr(1);
}

constexpr ParamSpec kParamSpecs[] = {
    {"SPCCL_DISABLE", ParamType::kBool, "0", 0, 1, false, nullptr,
     "1: every collective takes the exact dense path (no compression at all).",
     [](Params* p, double v) { p->disable = v != 0; }},
    {"SPCCL_DEBUG", ParamType::kChoice, "WARN", 0, 0, false, "NONE|WARN|INFO|TRACE",
     "Log level on stderr. INFO prints the version and every parameter at communicator creation.",
     [](Params* p, double v) { p->debug = static_cast<LogLevel>(static_cast<int>(v)); }},
    {"SPCCL_ALLREDUCE_DENSITY", ParamType::kFloat, "0.01", 0, 1, true, nullptr,
     "Fraction of entries a compressed allreduce keeps per call, in (0, 1]; 1 = exact.",
     [](Params* p, double v) { p->allreduceDensity = static_cast<float>(v); }},
    {"SPCCL_THRESHOLD_INTERVAL", ParamType::kInt, "1000", 1, 1e9, false, nullptr,
     "Calls between exact re-estimations of the threshold tau (the first call always estimates; see also "
     "SPCCL_THRESHOLD_WARMUP, SPCCL_CAPACITY_FACTOR and SPCCL_THRESHOLD_MIN_FRACTION).",
     [](Params* p, double v) { p->thresholdInterval = static_cast<int>(v); }},
    {"SPCCL_THRESHOLD_MIN_FRACTION", ParamType::kFloat, "0", 0, 1, false, nullptr,
     "A stored tau that selects fewer than this fraction of k entries is re-estimated in that call; 0 = never "
     "(DCT: tau is fixed between scheduled estimates and the entries sent follow the gradients).",
     [](Params* p, double v) { p->thresholdMinFraction = static_cast<float>(v); }},
    {"SPCCL_THRESHOLD_WARMUP", ParamType::kBool, "1", 0, 1, false, nullptr,
     "1: in the first SPCCL_THRESHOLD_INTERVAL calls tau is also estimated at calls 1, 2, 4, 8, ... (the powers "
     "of two below the interval), as the gradients shrink fastest early in training; 0: the interval alone.",
     [](Params* p, double v) { p->thresholdWarmup = v != 0; }},
    {"SPCCL_CAPACITY_FACTOR", ParamType::kFloat, "2", 1, 1e6, false, nullptr,
     "A call never sends more than this many times k entries; a stale tau that would is re-estimated.",
     [](Params* p, double v) { p->capacityFactor = static_cast<float>(v); }},
    {"SPCCL_ERROR_FEEDBACK", ParamType::kBool, "1", 0, 1, false, nullptr,
     "1: what a rank does not send (and wire rounding) stays in its residual for the next call.",
     [](Params* p, double v) { p->errorFeedback = v != 0; }},
    {"SPCCL_ALGO", ParamType::kChoice, "auto", 0, 0, false, "auto|dense|allgather|split",
     "Allreduce algorithm; auto picks by the cost model in docs/ALGORITHMS.md.",
     [](Params* p, double v) { p->algorithm = static_cast<int>(v); }},
    {"SPCCL_CALIBRATE", ParamType::kInt, "0", 0, 2, false, nullptr,
     "Cost model for SPCCL_ALGO=auto: 1 = measure links and host selection at communicator creation, or reuse "
     "the cached result for this host set and rank count; 2 = always measure; 0 = defaults (docs/ALGORITHMS.md).",
     [](Params* p, double v) { p->calibrate = static_cast<int>(v); }},
    {"SPCCL_AUTO_TRIALS", ParamType::kInt, "0", 0, 1000, false, nullptr,
     "SPCCL_ALGO=auto, host path: after the first call of each call shape (count, datatype, density, wire type; "
     "shared by the compressors of that shape) spccl times every algorithm the model leaves in "
     "the running (modelled within 8x of its best) on this many calls each (in two blocks of consecutive calls, after "
     "3 uncounted ones), and keeps the one with the fastest median call (slowest rank's time, less any tau "
     "re-estimation); 0 = the model alone decides (reproducible picks).",
     [](Params* p, double v) { p->autoTrials = static_cast<int>(v); }},
    {"SPCCL_NET_GBPS", ParamType::kFloat, "0", 0, 1e6, false, nullptr,
     "Link bandwidth per rank in Gbit/s for the cost model (overrides calibration); 0 = not set.",
     [](Params* p, double v) { p->netGbps = v; }},
    {"SPCCL_NET_LATENCY_US", ParamType::kFloat, "0", 0, 1e6, false, nullptr,
     "Latency per message round in microseconds for the cost model (overrides calibration); 0 = not set.",
     [](Params* p, double v) { p->netLatencyUs = v; }},
    {"SPCCL_SPLIT_RESELECT", ParamType::kFloat, "1", 0, 1e6, false, nullptr,
     "Split: each range owner sends at most ceil(this*k/P) of its reduced entries (the largest) and keeps the "
     "rest in its residual, so the result stays O(k) (Ok-Topk); 0 = send the whole reduced range.",
     [](Params* p, double v) { p->splitReselect = static_cast<float>(v); }},
    {"SPCCL_VALUE_TYPE", ParamType::kChoice, "fp32", 0, 0, false, "fp32|fp16|bf16|fp8",
     "Type of the values on the wire; fp16/bf16/fp8 rounding error goes back to the residual. fp8 = e4m3 with a "
     "power-of-two scale per stream, on host and device buffers (not in SPCCL_CAPACITY_MODE=fixed). "
     "fp32 sends fp16/bf16 buffers' alltoall rows and sparsified allgather values in their own type (as exact).",
     [](Params* p, double v) { p->valueType = kValueTypeChoices[static_cast<int>(v)]; }},
    {"SPCCL_ROWS_CODEC", ParamType::kChoice, "wire", 0, 0, false, "wire|int8|bounded|fp16|bf16|fp8",
     "Values of the alltoall rows (spcclAlltoAllRowsCompressed, its backward, the drop-in row alltoall): wire = "
     "in SPCCL_VALUE_TYPE; int8 = int8 codes with one fp32 scale per row (the row's largest magnitude / 127), every "
     "finite value "
     "within scale/2 of the original, NaN/Inf arriving as NaN; the backward codes the gradients the same way. "
     "bounded = error-bounded quantization (SPCCL_ROWS_ERROR_BOUND): every value within the bound of the original, "
     "codes bit-packed per row, NaN/Inf exact; the backward sends the gradients exactly (in the buffer's type). "
     "fp16, bf16, fp8 = that value type both ways, whatever SPCCL_VALUE_TYPE says.",
     [](Params* p, double v) { p->rowsCodec = static_cast<int>(v); }},
    {"SPCCL_ROWS_ERROR_BOUND", ParamType::kFloat, "0.001", 0, 1e30, false, nullptr,
     "SPCCL_ROWS_CODEC=bounded: the largest difference between a forward's value and its decoded value; with "
     "SPCCL_ROWS_ERROR_RELATIVE=1 a fraction of the range (max - min) of the call's kept values. 0 = lossless.",
     [](Params* p, double v) { p->rowsErrorBound = static_cast<float>(v); }},
    {"SPCCL_ROWS_ERROR_RELATIVE", ParamType::kBool, "0", 0, 1, false, nullptr,
     "SPCCL_ROWS_CODEC=bounded: 1 = SPCCL_ROWS_ERROR_BOUND is relative to each call's value range (a table's, "
     "when a call carries one table); 0 = absolute.",
     [](Params* p, double v) { p->rowsErrorRelative = v != 0; }},
    {"SPCCL_ROWS_ERROR_DECAY", ParamType::kFloat, "1", 0, 1e6, true, nullptr,
     "SPCCL_ROWS_CODEC=bounded: the bound of the communicator's n-th bounded forward (from 0) is "
     "SPCCL_ROWS_ERROR_BOUND x this^n: below 1 it tightens over training, above 1 it loosens; 1 = constant.",
     [](Params* p, double v) { p->rowsErrorDecay = v; }},
    {"SPCCL_INDEX_ENCODING", ParamType::kChoice, "auto", 0, 0, false, "auto|coo|delta|bitmap",
     "Indices of compressed streams: 32-bit (coo), varint gaps (delta), a bit per position (bitmap); auto = "
     "the smallest for each stream, from exact sizes.",
     [](Params* p, double v) { p->indexEncoding = static_cast<int>(v); }},
    {"SPCCL_MIN_COMPRESS_COUNT", ParamType::kInt, "65536", 0, 1e18, false, nullptr,
     "Drop-in spcclAllReduce calls with fewer elements than this take the exact dense path (explicit compressors, "
     "spcclAlltoAll and spcclAllGather do not look at it); libspccl_mpi.so passes MPI calls with smaller send "
     "buffers straight to MPI.",
     [](Params* p, double v) { p->minCompressCount = static_cast<uint64_t>(v); }},
    {"SPCCL_INTERCEPT", ParamType::kList, "off", 0, 0, false, "off|allreduce|alltoall|allgather|all",
     "The interposers only: the collectives they hand to spccl. libspccl_mpi.so: MPI_Allreduce/MPI_Alltoall/"
     "MPI_Allgather (MPI_FLOAT, MPI_SUM for allreduce, at least SPCCL_MIN_COMPRESS_COUNT elements); "
     "libspccl_nccl.so: ncclAllReduce (allreduce or all); off = none.",
     [](Params* p, double v) { p->intercept = interceptBits(static_cast<unsigned>(v)); }},
    {"SPCCL_ALLTOALL_DENSITY", ParamType::kFloat, "1", 0, 1, true, nullptr,
     "Drop-in spcclAlltoAll keeps this fraction of each row (needs SPCCL_ALLTOALL_ROW_LEN); 1 = exact.",
     [](Params* p, double v) { p->alltoallDensity = static_cast<float>(v); }},
    {"SPCCL_ALLTOALL_ROW_LEN", ParamType::kInt, "0", 0, 4294967295.0, false, nullptr,
     "Row length L for the drop-in alltoall's per-row compression; 0 = unset (exact).",
     [](Params* p, double v) { p->alltoallRowLen = static_cast<uint64_t>(v); }},
    {"SPCCL_ALLGATHER_DENSITY", ParamType::kFloat, "1", 0, 1, true, nullptr,
     "Drop-in spcclAllGather sends each rank's top ceil(density*sendcount) entries; 1 = exact.",
     [](Params* p, double v) { p->allgatherDensity = static_cast<float>(v); }},
    {"SPCCL_ROWSPARSE_ALGO", ParamType::kChoice, "auto", 0, 0, false, "auto|allgather|partition",
     "Row-sparse allreduce algorithm; auto picks by the cost model in docs/ALGORITHMS.md.",
     [](Params* p, double v) { p->rowSparseAlgorithm = static_cast<int>(v); }},
    {"SPCCL_CHECKSUM", ParamType::kBool, "0", 0, 1, false, nullptr,
     "1: every stream carries a CRC32C, verified on receipt; a mismatch is spcclRemoteError (docs/RELIABILITY.md).",
     [](Params* p, double v) { p->checksum = v != 0; }},
    {"SPCCL_TEST_CORRUPT_STREAMS", ParamType::kInt, "0", 0, 1e18, false, nullptr,
     "Testing only: flip one bit in each of the first N sealed streams (SPCCL_CHECKSUM=1) this rank sends per "
     "communicator, after sealing, as corruption in transit would; 0 = off.",
     [](Params* p, double v) { p->testCorruptStreams = static_cast<uint64_t>(v); }},
    {"SPCCL_PROFILE", ParamType::kBool, "0", 0, 1, false, nullptr,
     "1: each compressor times its compressed allreduce calls (host path) and prints, when destroyed, the mean "
     "per call split into selection, communication (wire and waiting) and local work, and how often it estimated "
     "tau (the whole-buffer estimates' mean time); each communicator, when destroyed, prints the same split of its "
     "alltoall-rows forward (selection, communication, local) and backward (communication, local) calls.",
     [](Params* p, double v) { p->profile = v != 0; }},
    {"SPCCL_HOST_SIMD", ParamType::kChoice, "auto", 0, 0, false, "auto|avx512|avx2|baseline",
     "Vector instructions of the host kernels (the alltoall rows' per-row top-k): auto = the widest this CPU "
     "has; avx512 = AVX-512 (F, BW, DQ, VL) and AVX2; avx2 = AVX2 alone; either an error where the CPU lacks it; "
     "baseline = the build's own (SSE2 on x86-64). Every choice selects the same entries.",
     [](Params* p, double v) { p->hostSimd = static_cast<int>(v); }},
    {"SPCCL_CAPACITY_MODE", ParamType::kChoice, "exact", 0, 0, false, "exact|fixed",
     "How the compressed allreduce sizes its pair exchange: exact = each rank's exact pairs (on device buffers "
     "one small device-to-host copy per call); fixed = capacity-factor x k slots per rank, the overflow kept in "
     "the residual, tau re-estimated on the schedule only, no host synchronisation (CUDA-graph capturable on "
     "device buffers; docs/ALGORITHMS.md).",
     [](Params* p, double v) { p->capacityMode = static_cast<int>(v); }},
    {"SPCCL_GUARD_EXECUTOR", ParamType::kBool, "0", 0, 1, false, nullptr,
     "Testing only: 1 keeps the memory the host executor owns inaccessible (PROT_NONE) outside the executor's own "
     "calls, so collective code that reads it directly, as it could not read device memory on a GPU, faults at "
     "once (docs/ARCHITECTURE.md, the executor). Slower.",
     [](Params* p, double v) { p->guardExecutor = v != 0; }},
};

int choiceIndex(const char* choices, const char* value) {
  int index = 0;
  const char* p = choices;
  const size_t len = std::strlen(value);
  while (*p) {
    const char* bar = std::strchr(p, '|');
    const size_t n = bar ? static_cast<size_t>(bar - p) : std::strlen(p);
    if (n == len && strncasecmp(p, value, n) == 0) return index;
    ++index;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

}  // namespace

// The index-th of a choice variable's choices as its table spells them
// (the choice index is the value Params holds).
std::string choiceName(const char* name, int index) {
  for (const ParamSpec& spec : kParamSpecs) {
    if (std::strcmp(spec.name, name) != 0 || spec.type != ParamType::kChoice) continue;
    const char* p = spec.choices;
    for (int i = 0; i < index && p != nullptr; ++i) {
      p = std::strchr(p, '|');
      if (p != nullptr) ++p;
    }
    if (p == nullptr || index < 0) break;
    const char* bar = std::strchr(p, '|');
    return std::string(p, bar ? static_cast<size_t>(bar - p) : std::strlen(p));
  }
  return "?";
}

namespace {

// An integer bound as the docs and messages show it: %g where that is exact
// (1000, 1e+09), every digit otherwise (4294967295, not 4.29497e+09).
std::string intBound(double v) {
  const std::string g = formatString("%g", v);
  return std::strtod(g.c_str(), nullptr) == v ? g : formatString("%.0f", v);
}

// Parses one value per its spec; *number gets the numeric value or choice index.
Status parseValue(const ParamSpec& spec, const char* text, bool fromEnv, double* number) {
  const char* where = fromEnv ? "environment variable" : "default of";
  if (spec.type == ParamType::kList) {
    unsigned listed = 0;
    for (const char* item = text;;) {
      const char* comma = std::strchr(item, ',');
      const int idx = choiceIndex(spec.choices, std::string(item, comma ? comma - item : std::strlen(item)).c_str());
      if (idx < 0)
        return invalidArgument(formatString("%s %s='%s' is invalid: expected a comma-separated list of %s", where,
                                            spec.name, text, spec.choices));
      listed |= 1u << idx;
      if (!comma) break;
      item = comma + 1;
    }
    // A list's first choice means none (SPCCL_INTERCEPT=off): it stands alone.
    if ((listed & 1u) != 0 && listed != 1u)
      return invalidArgument(formatString("%s %s='%s' is invalid: '%.*s' cannot be listed with other choices", where,
                                          spec.name, text, static_cast<int>(std::strcspn(spec.choices, "|")),
                                          spec.choices));
    *number = listed;
    return Status::ok();
  }
  if (spec.type == ParamType::kChoice) {
    const int idx = choiceIndex(spec.choices, text);
    if (idx < 0)
      return invalidArgument(
          formatString("%s %s='%s' is invalid: expected one of %s", where, spec.name, text, spec.choices));
    *number = idx;
    return Status::ok();
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  // No blanks around a number (strtod skips leading ones), as around a choice.
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(v) || std::isspace(static_cast<unsigned char>(*text)))
    return invalidArgument(formatString("%s %s='%s' is not a number", where, spec.name, text));
  if ((spec.type == ParamType::kInt || spec.type == ParamType::kBool) && v != std::floor(v))
    return invalidArgument(formatString("%s %s='%s' must be an integer", where, spec.name, text));
  const bool belowMin = spec.minExclusive ? v <= spec.minValue : v < spec.minValue;
  if (belowMin || v > spec.maxValue) {
    const bool isInt = spec.type == ParamType::kInt;
    const std::string lo = isInt ? intBound(spec.minValue) : formatString("%g", spec.minValue);
    const std::string hi = isInt ? intBound(spec.maxValue) : formatString("%g", spec.maxValue);
    return invalidArgument(formatString("%s %s='%s' is out of range %s%s, %s]", where, spec.name, text,
                                        spec.minExclusive ? "(" : "[", lo.c_str(), hi.c_str()));
  }
  // An exclusive lower bound (the densities, stored as float): a value that
  // rounds to the bound as a float (1e-50 -> 0) is out of range too.
  if (spec.type == ParamType::kFloat && spec.minExclusive &&
      !(static_cast<float>(v) > static_cast<float>(spec.minValue)))
    return invalidArgument(formatString("%s %s='%s' is out of range (%g, %g]: it is %g as a float", where, spec.name,
                                        text, spec.minValue, spec.maxValue,
                                        static_cast<double>(static_cast<float>(v))));
  *number = v;
  return Status::ok();
}

}  // namespace

std::span<const ParamSpec> paramSpecs() { return kParamSpecs; }

Status loadParams(const EnvLookup& lookup, Params* out) {
  Params p;
  for (const ParamSpec& spec : kParamSpecs) {
    const char* env = lookup(spec.name);
    const bool fromEnv = env != nullptr && env[0] != '\0';
    double v = 0;
    SPCCL_RETURN_IF_ERROR(parseValue(spec, fromEnv ? env : spec.defaultValue, fromEnv, &v));
    spec.apply(&p, v);
  }
  *out = p;
  return Status::ok();
}

namespace {

// Levenshtein distance, for "did you mean".
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Read by this repository's tests, benchmarks and scripts, not by the library.
bool isToolVariable(const std::string& name) {
  static const char* const kTools[] = {"SPCCL_BENCH_SIZES",        "SPCCL_EDGE_TIMEOUT",     "SPCCL_NETEM_HOSTMAP",
                                       "SPCCL_PROPERTY_SEED",      "SPCCL_PROPERTY_CONFIGS", "SPCCL_GPU_TEST_TRACE",
                                       "SPCCL_DEVICE_CHECK_DIRECT"};
  if (name.rfind("SPCCL_TEST_", 0) == 0) return true;
  // Package conventions (CMake's <Pkg>_ROOT, install prefixes), not settings.
  for (const char* suffix : {"_ROOT", "_DIR", "_HOME", "_PATH", "_PREFIX"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  for (const char* tool : kTools)
    if (name == tool) return true;
  return false;
}

}  // namespace

std::vector<std::string> unknownVariables(const char* const* environment) {
  std::vector<std::string> unknown;
  for (const char* const* e = environment; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    const std::string name(*e, eq ? static_cast<size_t>(eq - *e) : std::strlen(*e));
    if (name.rfind("SPCCL_", 0) != 0) continue;
    bool known = isToolVariable(name);
    for (const ParamSpec& spec : kParamSpecs) known = known || name == spec.name;
    if (known) continue;
    // Close: a few edits away, or the same last word (SPCCL_DENSITY: the densities).
    const std::string tail = name.substr(name.rfind('_'));
    std::string close;
    for (const ParamSpec& spec : kParamSpecs) {
      const std::string candidate = spec.name;
      const bool sameTail = tail.size() > 1 && candidate.size() > tail.size() &&
                            candidate.compare(candidate.size() - tail.size(), tail.size(), tail) == 0;
      if (editDistance(name, candidate) <= 3 || sameTail) close += (close.empty() ? "" : ", ") + candidate;
    }
    unknown.push_back(close.empty() ? name : name + " (did you mean " + close + "?)");
  }
  return unknown;
}

Status loadParamsFromEnv(Params* out) {
  return loadParams([](const char* n) -> const char* { return std::getenv(n); }, out);
}

const char* valueTypeName(core::ValueType t) {
  switch (t) {
    case core::ValueType::kFloat16:
      return "fp16";
    case core::ValueType::kBfloat16:
      return "bf16";
    case core::ValueType::kFloat8e4m3:
      return "fp8";
    default:
      return "fp32";
  }
}

std::string describeParams(const Params& p) {
  return formatString(
             "SPCCL_DISABLE=%d SPCCL_DEBUG=%s SPCCL_ALLREDUCE_DENSITY=%g SPCCL_THRESHOLD_INTERVAL=%d "
             "SPCCL_THRESHOLD_MIN_FRACTION=%g SPCCL_THRESHOLD_WARMUP=%d SPCCL_CAPACITY_FACTOR=%g "
             "SPCCL_ERROR_FEEDBACK=%d SPCCL_ALGO=%s SPCCL_CALIBRATE=%d SPCCL_AUTO_TRIALS=%d "
             "SPCCL_NET_GBPS=%g SPCCL_NET_LATENCY_US=%g SPCCL_VALUE_TYPE=%s "
             "SPCCL_MIN_COMPRESS_COUNT=%llu SPCCL_ALLTOALL_DENSITY=%g SPCCL_ALLTOALL_ROW_LEN=%llu "
             "SPCCL_ALLGATHER_DENSITY=%g SPCCL_ROWSPARSE_ALGO=%s",
             p.disable ? 1 : 0, choiceName("SPCCL_DEBUG", static_cast<int>(p.debug)).c_str(),
             static_cast<double>(p.allreduceDensity), p.thresholdInterval, static_cast<double>(p.thresholdMinFraction),
             p.thresholdWarmup ? 1 : 0, static_cast<double>(p.capacityFactor), p.errorFeedback ? 1 : 0,
             choiceName("SPCCL_ALGO", p.algorithm).c_str(), p.calibrate, p.autoTrials, p.netGbps, p.netLatencyUs,
             valueTypeName(p.valueType), static_cast<unsigned long long>(p.minCompressCount),
             static_cast<double>(p.alltoallDensity), static_cast<unsigned long long>(p.alltoallRowLen),
             static_cast<double>(p.allgatherDensity),
             choiceName("SPCCL_ROWSPARSE_ALGO", p.rowSparseAlgorithm).c_str()) +
         " SPCCL_INTERCEPT=" + interceptNames(p.intercept) +
         formatString(" SPCCL_ROWS_ERROR_BOUND=%g SPCCL_ROWS_ERROR_RELATIVE=%d SPCCL_ROWS_ERROR_DECAY=%g",
                      static_cast<double>(p.rowsErrorBound), p.rowsErrorRelative ? 1 : 0, p.rowsErrorDecay) +
         " SPCCL_CAPACITY_MODE=" + choiceName("SPCCL_CAPACITY_MODE", p.capacityMode) +
         " SPCCL_CHECKSUM=" + (p.checksum ? "1" : "0") +
         " SPCCL_TEST_CORRUPT_STREAMS=" + std::to_string(p.testCorruptStreams) +
         " SPCCL_INDEX_ENCODING=" + kIndexEncodingNames[p.indexEncoding] +
         formatString(" SPCCL_SPLIT_RESELECT=%g", static_cast<double>(p.splitReselect)) +
         " SPCCL_PROFILE=" + (p.profile ? "1" : "0") + " SPCCL_HOST_SIMD=" + choiceName("SPCCL_HOST_SIMD", p.hostSimd) +
         " SPCCL_ROWS_CODEC=" + choiceName("SPCCL_ROWS_CODEC", p.rowsCodec) +
         " SPCCL_GUARD_EXECUTOR=" + (p.guardExecutor ? "1" : "0");
}

std::string renderParamTable() {
  std::string out = "| Variable | Type | Default | Allowed | Meaning |\n|---|---|---|---|---|\n";
  for (const ParamSpec& s : kParamSpecs) {
    std::string type, allowed;
    switch (s.type) {
      case ParamType::kBool:
        type = "bool";
        allowed = "0 or 1";
        break;
      case ParamType::kInt:
        type = "int";
        allowed = "[" + intBound(s.minValue) + ", " + intBound(s.maxValue) + "]";
        break;
      case ParamType::kFloat:
        type = "float";
        allowed = formatString("%s%g, %g]", s.minExclusive ? "(" : "[", s.minValue, s.maxValue);
        break;
      case ParamType::kChoice:
      case ParamType::kList:
        type = s.type == ParamType::kChoice ? "choice" : "list";
        allowed = s.choices;
        for (auto pos = allowed.find('|'); pos != std::string::npos; pos = allowed.find('|', pos + 3))
          allowed.replace(pos, 1, ", ");
        if (s.type == ParamType::kList) allowed = "comma-separated: " + allowed;
        break;
    }
    out +=
        formatString("| `%s` | %s | `%s` | %s | %s |\n", s.name, type.c_str(), s.defaultValue, allowed.c_str(), s.help);
  }
  return out;
}

}  // namespace spccl
