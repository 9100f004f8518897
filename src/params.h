// The single table of SPCCL_* environment variables (kParamSpecs in
// params.cc). Parsing, validation and docs/ENV.md's variable table come from
// it. describeParams (the SPCCL_DEBUG=INFO dump at communicator creation) is
// written by hand; it spells choices from the table, and tests check that it
// names every variable and every choice as the table does.
// params.cc needs nothing but kernels/core/status.cc, so the interposers compile both
// in (interpose/CMakeLists.txt) and read every SPCCL_* variable as the
// library does.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kernels/core/elementwise.h"
#include "collectives/context.h"
#include "collectives/other_collectives.h"
#include "kernels/host/host_kernels.h"
#include "src/log.h"
#include "kernels/core/status.h"

namespace spccl {

// Values resolved from the environment (defaults where unset).
// CollectiveSettings (collectives/context.h): the settings the collectives read.
struct Params : CollectiveSettings {
  bool disable = false;
  LogLevel debug = LogLevel::kWarn;
  float allreduceDensity = 0.01f;
  int thresholdInterval = 1000;
  float thresholdMinFraction = 0.0f;  // SPCCL_THRESHOLD_MIN_FRACTION: 0 = tau only on the schedule (and capacity)
  bool thresholdWarmup = true;        // SPCCL_THRESHOLD_WARMUP: also estimate at calls 2^j < thresholdInterval
  float capacityFactor = 2.0f;
  float splitReselect = 1.0f;  // SPCCL_SPLIT_RESELECT: owner budget in units of k/P; 0 = off
  bool errorFeedback = true;
  int algorithm = 0;        // SPCCL_ALGO_*
  int calibrate = 0;        // SPCCL_CALIBRATE: 0 off, 1 measure or reuse the cache, 2 always measure
  int autoTrials = 0;       // SPCCL_AUTO_TRIALS: timed calls per candidate before auto settles; 0 model only
  double netGbps = 0;       // SPCCL_NET_GBPS; 0: not set
  double netLatencyUs = 0;  // SPCCL_NET_LATENCY_US; 0: not set
  uint64_t minCompressCount = 65536;
  unsigned intercept = 0;  // kIntercept* bits (SPCCL_INTERCEPT, read by the interposers)
  float alltoallDensity = 1.0f;
  uint64_t alltoallRowLen = 0;  // 0: unset
  float allgatherDensity = 1.0f;
  bool checksum = false;            // SPCCL_CHECKSUM: CRC32C on every stream
  uint64_t testCorruptStreams = 0;  // SPCCL_TEST_CORRUPT_STREAMS (test hook)
  int capacityMode = 0;             // kCapacityMode*: how the compressed allreduce sizes its pair exchange
  bool guardExecutor = false;       // the host executor's memory PROT_NONE outside its calls
  int hostSimd = 0;                 // kHostSimd*: the host kernels' vector instructions
};

// SPCCL_HOST_SIMD (choice order).
constexpr int kHostSimdAuto = 0;
constexpr int kHostSimdAvx512 = 1;
constexpr int kHostSimdAvx2 = 2;
constexpr int kHostSimdBaseline = 3;

// SPCCL_HOST_SIMD's level on a CPU that grants what `available` says
// (host::hostSimdAvailable in the library): auto is the widest; avx512 or
// avx2 where the CPU lacks it is an error that names what is missing.
Status resolveHostSimd(int setting, bool (*available)(host::HostSimd), host::HostSimd* out);

// SPCCL_CAPACITY_MODE (choice order).
constexpr int kCapacityModeExact = 0;
constexpr int kCapacityModeFixed = 1;

// SPCCL_INTERCEPT: the collectives the interposers hand to spccl (libspccl_nccl.so: allreduce only).
constexpr unsigned kInterceptAllreduce = 1;
constexpr unsigned kInterceptAlltoall = 2;
constexpr unsigned kInterceptAllgather = 4;

// kList: comma-separated choices; the parsed value has bit i set for choice i.
enum class ParamType { kBool, kInt, kFloat, kChoice, kList };

struct ParamSpec {
  const char* name;
  ParamType type;
  const char* defaultValue;
  double minValue;  // kInt/kFloat: inclusive bounds
  double maxValue;
  bool minExclusive;    // kFloat: (min, max] instead of [min, max]
  const char* choices;  // kChoice, kList: '|'-separated, case-insensitive
  const char* help;
  void (*apply)(Params* p, double value);  // stores the parsed value (choice: its index)
};

std::span<const ParamSpec> paramSpecs();

using EnvLookup = std::function<const char*(const char*)>;

// Parses every variable; the first invalid one fails with a message naming it.
Status loadParams(const EnvLookup& lookup, Params* out);
Status loadParamsFromEnv(Params* out);

// SPCCL_* names among `environment` ("NAME=value" entries, NULL-terminated,
// as environ) that the table does not know: typos such as SPCCL_ALOG, which
// would otherwise be ignored in silence. Each comes with the table's names
// it is close to ("SPCCL_ALOG (did you mean SPCCL_ALGO?)"). The variables of
// this repository's tests and tools (SPCCL_TEST_*, SPCCL_BENCH_SIZES, ...)
// are not reported.
std::vector<std::string> unknownVariables(const char* const* environment);

// "NAME=value" for every parameter as resolved (for SPCCL_DEBUG=INFO).
std::string describeParams(const Params& p);
// The index-th choice of the choice variable `name`, as its row spells it.
std::string choiceName(const char* name, int index);

// The markdown table docs/ENV.md embeds between its BEGIN/END markers.
std::string renderParamTable();

const char* valueTypeName(core::ValueType t);

}  // namespace spccl
