// src/params: the SPCCL_* table parsed through a fake environment, and
// docs/ENV.md kept in sync with the table.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "src/params.h"

#ifndef SPCCL_SOURCE_DIR
#error "SPCCL_SOURCE_DIR must name the source tree (set by tests/unit/CMakeLists.txt)"
#endif

namespace spccl::test {
namespace {

using Env = std::map<std::string, std::string>;

Status load(const Env& env, Params* out) {
  return loadParams(
      [&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      out);
}

Params loadOk(const Env& env) {
  Params p;
  const Status st = load(env, &p);
  EXPECT_TRUE(st.isOk()) << st.message();
  return p;
}

TEST(Params, Defaults) {
  const Params p = loadOk({});
  EXPECT_FALSE(p.disable);
  EXPECT_EQ(p.debug, LogLevel::kWarn);
  EXPECT_FLOAT_EQ(p.allreduceDensity, 0.01f);
  EXPECT_EQ(p.thresholdInterval, 1000);
  EXPECT_FLOAT_EQ(p.capacityFactor, 2.0f);
  EXPECT_TRUE(p.errorFeedback);
  EXPECT_EQ(p.algorithm, SPCCL_ALGO_AUTO);
  EXPECT_EQ(p.autoTrials, 0);  // the model alone picks unless asked: picks stay reproducible
  EXPECT_EQ(p.valueType, core::ValueType::kFloat32);
  EXPECT_EQ(p.minCompressCount, 65536u);
}

TEST(Params, EmptyValueMeansUnset) {
  Env env;
  for (const ParamSpec& s : paramSpecs()) env[s.name] = "";
  const Params p = loadOk(env), d = loadOk({});
  EXPECT_EQ(describeParams(p), describeParams(d));
}

TEST(Params, EveryVariableIsDocumentedAndNamed) {
  const std::vector<std::string> required = {"SPCCL_DISABLE",
                                             "SPCCL_DEBUG",
                                             "SPCCL_ALLREDUCE_DENSITY",
                                             "SPCCL_THRESHOLD_INTERVAL",
                                             "SPCCL_CAPACITY_FACTOR",
                                             "SPCCL_ERROR_FEEDBACK",
                                             "SPCCL_ALGO",
                                             "SPCCL_VALUE_TYPE",
                                             "SPCCL_MIN_COMPRESS_COUNT"};
  std::map<std::string, int> seen;
  for (const ParamSpec& s : paramSpecs()) {
    ++seen[s.name];
    EXPECT_EQ(std::string(s.name).rfind("SPCCL_", 0), 0u) << s.name;
    EXPECT_NE(std::string(s.help), "") << s.name;
    EXPECT_NE(describeParams(loadOk({})).find(std::string(s.name) + "="), std::string::npos) << s.name;
    // The default itself parses (the table is self-consistent).
    Params p;
    const Status st = load({{s.name, s.defaultValue}}, &p);
    EXPECT_TRUE(st.isOk()) << s.name << ": " << st.message();
  }
  for (const std::string& name : required) EXPECT_EQ(seen[name], 1) << name;
}

TEST(Params, ValidValues) {
  EXPECT_TRUE(loadOk({{"SPCCL_DISABLE", "1"}}).disable);
  EXPECT_FALSE(loadOk({{"SPCCL_DISABLE", "0"}}).disable);

  EXPECT_EQ(loadOk({{"SPCCL_DEBUG", "NONE"}}).debug, LogLevel::kNone);
  EXPECT_EQ(loadOk({{"SPCCL_DEBUG", "warn"}}).debug, LogLevel::kWarn);
  EXPECT_EQ(loadOk({{"SPCCL_DEBUG", "INFO"}}).debug, LogLevel::kInfo);
  EXPECT_EQ(loadOk({{"SPCCL_DEBUG", "Trace"}}).debug, LogLevel::kTrace);

  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ALLREDUCE_DENSITY", "0.5"}}).allreduceDensity, 0.5f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ALLREDUCE_DENSITY", "1"}}).allreduceDensity, 1.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ALLREDUCE_DENSITY", "1e-6"}}).allreduceDensity, 1e-6f);

  EXPECT_EQ(loadOk({{"SPCCL_THRESHOLD_INTERVAL", "1"}}).thresholdInterval, 1);
  EXPECT_EQ(loadOk({{"SPCCL_THRESHOLD_INTERVAL", "5000"}}).thresholdInterval, 5000);
  EXPECT_EQ(loadOk({{"SPCCL_THRESHOLD_INTERVAL", "1000000000"}}).thresholdInterval, 1000000000);

  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_CAPACITY_FACTOR", "1"}}).capacityFactor, 1.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_CAPACITY_FACTOR", "3.5"}}).capacityFactor, 3.5f);

  EXPECT_FLOAT_EQ(loadOk({}).thresholdMinFraction, 0.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_THRESHOLD_MIN_FRACTION", "0.5"}}).thresholdMinFraction, 0.5f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_THRESHOLD_MIN_FRACTION", "1"}}).thresholdMinFraction, 1.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_THRESHOLD_MIN_FRACTION", "0"}}).thresholdMinFraction, 0.0f);

  EXPECT_TRUE(loadOk({}).thresholdWarmup);
  EXPECT_FALSE(loadOk({{"SPCCL_THRESHOLD_WARMUP", "0"}}).thresholdWarmup);
  EXPECT_TRUE(loadOk({{"SPCCL_THRESHOLD_WARMUP", "1"}}).thresholdWarmup);

  EXPECT_FLOAT_EQ(loadOk({}).splitReselect, 1.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_SPLIT_RESELECT", "0"}}).splitReselect, 0.0f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_SPLIT_RESELECT", "2.5"}}).splitReselect, 2.5f);

  EXPECT_FALSE(loadOk({{"SPCCL_ERROR_FEEDBACK", "0"}}).errorFeedback);
  EXPECT_TRUE(loadOk({{"SPCCL_ERROR_FEEDBACK", "1"}}).errorFeedback);

  EXPECT_EQ(loadOk({{"SPCCL_ALGO", "auto"}}).algorithm, SPCCL_ALGO_AUTO);
  EXPECT_EQ(loadOk({{"SPCCL_AUTO_TRIALS", "3"}}).autoTrials, 3);
  EXPECT_EQ(loadOk({{"SPCCL_ALGO", "dense"}}).algorithm, SPCCL_ALGO_DENSE);
  EXPECT_EQ(loadOk({{"SPCCL_ALGO", "ALLGATHER"}}).algorithm, SPCCL_ALGO_ALLGATHER);
  EXPECT_EQ(loadOk({{"SPCCL_ALGO", "split"}}).algorithm, SPCCL_ALGO_SPLIT);

  EXPECT_EQ(loadOk({{"SPCCL_VALUE_TYPE", "fp32"}}).valueType, core::ValueType::kFloat32);
  EXPECT_EQ(loadOk({{"SPCCL_VALUE_TYPE", "fp16"}}).valueType, core::ValueType::kFloat16);
  EXPECT_EQ(loadOk({{"SPCCL_VALUE_TYPE", "BF16"}}).valueType, core::ValueType::kBfloat16);
  EXPECT_EQ(loadOk({{"SPCCL_VALUE_TYPE", "fp8"}}).valueType, core::ValueType::kFloat8e4m3);

  EXPECT_EQ(loadOk({{"SPCCL_MIN_COMPRESS_COUNT", "0"}}).minCompressCount, 0u);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ALLTOALL_DENSITY", "0.0625"}}).alltoallDensity, 0.0625f);
  EXPECT_EQ(loadOk({{"SPCCL_ALLTOALL_ROW_LEN", "128"}}).alltoallRowLen, 128u);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ALLGATHER_DENSITY", "0.5"}}).allgatherDensity, 0.5f);
  EXPECT_EQ(loadOk({{"SPCCL_ROWSPARSE_ALGO", "partition"}}).rowSparseAlgorithm, kRowSparsePartition);
  EXPECT_EQ(loadOk({{"SPCCL_ROWSPARSE_ALGO", "allgather"}}).rowSparseAlgorithm, kRowSparseAllgather);
  EXPECT_EQ(loadOk({}).rowSparseAlgorithm, kRowSparseAuto);
  EXPECT_EQ(loadOk({}).alltoallRowLen, 0u);
  EXPECT_EQ(loadOk({{"SPCCL_MIN_COMPRESS_COUNT", "1000000"}}).minCompressCount, 1000000u);
  EXPECT_EQ(loadOk({}).intercept, 0u);
  EXPECT_EQ(loadOk({{"SPCCL_INTERCEPT", "off"}}).intercept, 0u);
  EXPECT_EQ(loadOk({{"SPCCL_INTERCEPT", "allreduce"}}).intercept, kInterceptAllreduce);
  EXPECT_EQ(loadOk({{"SPCCL_INTERCEPT", "AllGather,alltoall"}}).intercept, kInterceptAllgather | kInterceptAlltoall);
  EXPECT_EQ(loadOk({{"SPCCL_INTERCEPT", "all"}}).intercept,
            kInterceptAllreduce | kInterceptAlltoall | kInterceptAllgather);
  EXPECT_EQ(loadOk({{"SPCCL_INTERCEPT", "allreduce,alltoall,allgather"}}).intercept,
            loadOk({{"SPCCL_INTERCEPT", "all"}}).intercept);
  EXPECT_NE(
      describeParams(loadOk({{"SPCCL_INTERCEPT", "alltoall,allreduce"}})).find("SPCCL_INTERCEPT=allreduce,alltoall"),
      std::string::npos);
  EXPECT_EQ(loadOk({}).hostSimd, kHostSimdAuto);
  EXPECT_EQ(loadOk({{"SPCCL_HOST_SIMD", "AVX512"}}).hostSimd, kHostSimdAvx512);
  EXPECT_EQ(loadOk({{"SPCCL_HOST_SIMD", "avx2"}}).hostSimd, kHostSimdAvx2);
  EXPECT_EQ(loadOk({{"SPCCL_HOST_SIMD", "baseline"}}).hostSimd, kHostSimdBaseline);
  EXPECT_EQ(loadOk({}).rowsCodec, kRowsCodecWire);
  EXPECT_EQ(loadOk({{"SPCCL_ROWS_CODEC", "INT8"}}).rowsCodec, kRowsCodecInt8);
  EXPECT_NE(describeParams(loadOk({{"SPCCL_ROWS_CODEC", "int8"}})).find("SPCCL_ROWS_CODEC=int8"), std::string::npos);
  EXPECT_EQ(loadOk({{"SPCCL_ROWS_CODEC", "bounded"}}).rowsCodec, kRowsCodecBounded);
  EXPECT_EQ(loadOk({{"SPCCL_ROWS_CODEC", "fp16"}}).rowsCodec, kRowsCodecFp16);
  EXPECT_EQ(loadOk({{"SPCCL_ROWS_CODEC", "BF16"}}).rowsCodec, kRowsCodecBf16);
  EXPECT_EQ(loadOk({{"SPCCL_ROWS_CODEC", "fp8"}}).rowsCodec, kRowsCodecFp8);
  EXPECT_FLOAT_EQ(loadOk({}).rowsErrorBound, 1e-3f);
  EXPECT_FLOAT_EQ(loadOk({{"SPCCL_ROWS_ERROR_BOUND", "0"}}).rowsErrorBound, 0.0f);
  EXPECT_FALSE(loadOk({}).rowsErrorRelative);
  EXPECT_TRUE(loadOk({{"SPCCL_ROWS_ERROR_RELATIVE", "1"}}).rowsErrorRelative);
  EXPECT_DOUBLE_EQ(loadOk({}).rowsErrorDecay, 1.0);
  EXPECT_DOUBLE_EQ(loadOk({{"SPCCL_ROWS_ERROR_DECAY", "0.99"}}).rowsErrorDecay, 0.99);
  EXPECT_NE(describeParams(loadOk({{"SPCCL_ROWS_ERROR_BOUND", "0.25"}, {"SPCCL_ROWS_ERROR_RELATIVE", "1"}}))
                .find("SPCCL_ROWS_ERROR_BOUND=0.25 SPCCL_ROWS_ERROR_RELATIVE=1 SPCCL_ROWS_ERROR_DECAY=1"),
            std::string::npos);
  EXPECT_NE(describeParams(loadOk({{"SPCCL_HOST_SIMD", "baseline"}})).find("SPCCL_HOST_SIMD=baseline"),
            std::string::npos);

  // All at once: each lands in its own field.
  const Params p = loadOk({{"SPCCL_DISABLE", "1"},
                           {"SPCCL_DEBUG", "info"},
                           {"SPCCL_ALLREDUCE_DENSITY", "0.25"},
                           {"SPCCL_THRESHOLD_INTERVAL", "7"},
                           {"SPCCL_CAPACITY_FACTOR", "4"},
                           {"SPCCL_ERROR_FEEDBACK", "0"},
                           {"SPCCL_ALGO", "split"},
                           {"SPCCL_VALUE_TYPE", "bf16"},
                           {"SPCCL_MIN_COMPRESS_COUNT", "12"}});
  EXPECT_TRUE(p.disable);
  EXPECT_EQ(p.debug, LogLevel::kInfo);
  EXPECT_FLOAT_EQ(p.allreduceDensity, 0.25f);
  EXPECT_EQ(p.thresholdInterval, 7);
  EXPECT_FLOAT_EQ(p.capacityFactor, 4.0f);
  EXPECT_FALSE(p.errorFeedback);
  EXPECT_EQ(p.algorithm, SPCCL_ALGO_SPLIT);
  EXPECT_EQ(p.valueType, core::ValueType::kBfloat16);
  EXPECT_EQ(p.minCompressCount, 12u);
}

// The INFO dump spells every choice as the table does, so that a line from
// SPCCL_DEBUG=INFO can be pasted back into the environment.
TEST(Params, DescribeSpellsEveryChoiceAsTheTable) {
  int checked = 0;
  for (const ParamSpec& s : paramSpecs()) {
    if (s.type != ParamType::kChoice) continue;
    std::stringstream choices(s.choices);
    for (std::string choice; std::getline(choices, choice, '|');) {
      const std::string described = " " + describeParams(loadOk({{s.name, choice}})) + " ";
      EXPECT_NE(described.find(" " + std::string(s.name) + "=" + choice + " "), std::string::npos)
          << s.name << "=" << choice << " described as:" << described;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20);  // DEBUG 4, ALGO 4, VALUE_TYPE 4, ROWSPARSE 3, DEVICE_MODE 2, INDEX 4, HOST_SIMD 4
}

// SPCCL_HOST_SIMD on CPUs of the test's own making: what auto picks, and the
// error (naming what is missing) when a level the CPU lacks is asked for.
namespace fakecpu {
bool none(host::HostSimd s) { return s == host::HostSimd::kBaseline; }
bool avx2Only(host::HostSimd s) { return s != host::HostSimd::kAvx512; }
bool both(host::HostSimd) { return true; }
}  // namespace fakecpu

TEST(Params, HostSimdLevelOnEachCpu) {
  using host::HostSimd;
  struct Case {
    bool (*cpu)(HostSimd);
    int setting;
    bool ok;
    HostSimd level;
  };
  const Case cases[] = {
      {fakecpu::both, kHostSimdAuto, true, HostSimd::kAvx512},
      {fakecpu::both, kHostSimdAvx512, true, HostSimd::kAvx512},
      {fakecpu::both, kHostSimdAvx2, true, HostSimd::kAvx2},
      {fakecpu::both, kHostSimdBaseline, true, HostSimd::kBaseline},
      {fakecpu::avx2Only, kHostSimdAuto, true, HostSimd::kAvx2},
      {fakecpu::avx2Only, kHostSimdAvx512, false, HostSimd::kBaseline},
      {fakecpu::avx2Only, kHostSimdAvx2, true, HostSimd::kAvx2},
      {fakecpu::avx2Only, kHostSimdBaseline, true, HostSimd::kBaseline},
      {fakecpu::none, kHostSimdAuto, true, HostSimd::kBaseline},
      {fakecpu::none, kHostSimdAvx512, false, HostSimd::kBaseline},
      {fakecpu::none, kHostSimdAvx2, false, HostSimd::kBaseline},
      {fakecpu::none, kHostSimdBaseline, true, HostSimd::kBaseline},
  };
  for (const Case& c : cases) {
    HostSimd level = HostSimd::kAvx512;
    const HostSimd untouched = level;
    const Status st = resolveHostSimd(c.setting, c.cpu, &level);
    SCOPED_TRACE(testing::Message() << "setting " << c.setting << ": " << st.message());
    EXPECT_EQ(st.isOk(), c.ok);
    if (c.ok) {
      EXPECT_EQ(level, c.level);
      continue;
    }
    EXPECT_EQ(level, untouched);
    EXPECT_EQ(st.code(), spcclInvalidArgument);
    EXPECT_NE(st.message().find("SPCCL_HOST_SIMD="), std::string::npos);
    EXPECT_NE(st.message().find(c.setting == kHostSimdAvx512 ? "AVX-512" : "lacks AVX2"), std::string::npos);
  }
  // The library's own CPU: auto is the widest it has.
  HostSimd level;
  ASSERT_TRUE(resolveHostSimd(kHostSimdAuto, host::hostSimdAvailable, &level).isOk());
  EXPECT_EQ(level, host::widestHostSimd());
}

TEST(Params, InvalidValuesNameTheVariable) {
  const std::map<std::string, std::vector<std::string>> invalid = {
      {"SPCCL_DISABLE", {"2", "-1", "yes", "0.5", "1x", "abc", " 1"}},
      {"SPCCL_DEBUG", {"VERBOSE", "1", "INF", "INFOO", "WARN,INFO"}},
      {"SPCCL_ALLREDUCE_DENSITY", {"0", "1.5", "-0.1", "abc", "nan", "inf", "0.5x", "1e400", "1e-50"}},
      {"SPCCL_THRESHOLD_INTERVAL", {"0", "1.5", "-3", "abc", "1e10", "10 ", " 10", "\t10"}},
      {"SPCCL_CAPACITY_FACTOR", {"0.5", "0", "-2", "abc", "1e7", "inf"}},
      {"SPCCL_ERROR_FEEDBACK", {"2", "true", "on", "0.1"}},
      {"SPCCL_ALGO", {"ring", "1", "allgatherx", "auto|dense"}},
      {"SPCCL_CALIBRATE", {"3", "-1", "0.5", "yes"}},
      {"SPCCL_AUTO_TRIALS", {"-1", "1001", "2.5", "some"}},
      {"SPCCL_NET_GBPS", {"-1", "fast", "1e7", "nan"}},
      {"SPCCL_SPLIT_RESELECT", {"-0.5", "half", "1e7", "nan", "inf"}},
      {"SPCCL_THRESHOLD_MIN_FRACTION", {"-0.1", "1.5", "half", "nan", "inf"}},
      {"SPCCL_THRESHOLD_WARMUP", {"2", "-1", "on", "0.5"}},
      {"SPCCL_PROFILE", {"2", "yes please", "-1"}},
      {"SPCCL_NET_LATENCY_US", {"-0.5", "us", "inf"}},
      {"SPCCL_VALUE_TYPE", {"fp64", "float16", "half", "7", "fp"}},
      {"SPCCL_MIN_COMPRESS_COUNT", {"-1", "1.5", "abc", "1e19", "0x"}},
      {"SPCCL_ALLTOALL_DENSITY", {"0", "1.01", "-0.5", "x", "1e-46"}},
      {"SPCCL_ALLTOALL_ROW_LEN", {"-1", "2.5", "5e9", "L"}},
      {"SPCCL_ALLGATHER_DENSITY", {"0", "2", "nan", "1e-50"}},
      {"SPCCL_ROWSPARSE_ALGO", {"hash", "split", "1"}},
      {"SPCCL_CHECKSUM", {"2", "yes", "-1", "0.5"}},
      {"SPCCL_TEST_CORRUPT_STREAMS", {"-1", "1.5", "abc", "1e19"}},
      {"SPCCL_INTERCEPT",
       {"allreduc", "allreduce,", ",", "1", "allreduce;alltoall", "allreduce ,alltoall", "on", "all,off",
        "off,off,all"}},
      {"SPCCL_CAPACITY_MODE", {"capacity", "fixed,exact", "1", "graph"}},
      {"SPCCL_INDEX_ENCODING", {"varint", "coo32", "2", "auto,delta", "rle"}},
      {"SPCCL_HOST_SIMD", {"avx", "sse2", "1", "avx512,baseline", "none"}},
      {"SPCCL_ROWS_CODEC", {"int4", "e4m3", "1", "wire,int8", "none", "fp32"}},
      {"SPCCL_ROWS_ERROR_BOUND", {"-0.1", "x", "1e31", "inf"}},
      {"SPCCL_ROWS_ERROR_RELATIVE", {"2", "yes", "-1", "0.5"}},
      {"SPCCL_ROWS_ERROR_DECAY", {"0", "-1", "x", "1e7"}},
      {"SPCCL_GUARD_EXECUTOR", {"2", "yes", "-1", "0.5"}},
  };
  for (const ParamSpec& s : paramSpecs()) ASSERT_TRUE(invalid.count(s.name)) << "no invalid cases for " << s.name;
  for (const auto& [name, values] : invalid) {
    for (const std::string& value : values) {
      Params p;
      p.thresholdInterval = -123;  // sentinel: a failed load leaves *out alone
      const Status st = load({{name, value}, {"SPCCL_ALGO_UNRELATED", "x"}}, &p);
      EXPECT_EQ(st.code(), spcclInvalidArgument) << name << "='" << value << "': " << st.message();
      EXPECT_NE(st.message().find(name), std::string::npos) << name << "='" << value << "': " << st.message();
      EXPECT_NE(st.message().find(value), std::string::npos) << name << "='" << value << "': " << st.message();
      EXPECT_EQ(p.thresholdInterval, -123) << name << "='" << value << "' modified the output";
    }
  }
  // One bad variable among good ones is still named.
  Params p;
  const Status st = load({{"SPCCL_DISABLE", "0"}, {"SPCCL_ALGO", "split"}, {"SPCCL_VALUE_TYPE", "fp4"}}, &p);
  EXPECT_EQ(st.code(), spcclInvalidArgument);
  EXPECT_NE(st.message().find("SPCCL_VALUE_TYPE"), std::string::npos) << st.message();
}

// SPCCL_* names the table does not know are reported, with the close table
// names; other variables and the repository's own tool variables are not.
TEST(Params, UnknownVariablesAreReportedWithCloseNames) {
  const char* const environment[] = {"SPCCL_ALOG=split",        "SPCCL_DENSITY=0.5", "SPCCL_ALGO=split",
                                     "PATH=/usr/bin",           "SPCCL_TEST_SEED=7", "SPCCL_BENCH_SIZES=1M",
                                     "SPCCL_COMPLETELY_ELSE=1", "NCCL_ALGO=Ring",    "SPCCL_NOVALUE",
                                     "SPCCL_ROOT=/opt/spccl",   "SPCCL_DIR=/x",      nullptr};
  const std::vector<std::string> got = unknownVariables(environment);
  ASSERT_EQ(got.size(), 4u) << ::testing::PrintToString(got);
  EXPECT_EQ(got[0], "SPCCL_ALOG (did you mean SPCCL_ALGO?)");
  EXPECT_NE(got[1].find("SPCCL_DENSITY (did you mean "), std::string::npos) << got[1];
  EXPECT_NE(got[1].find("SPCCL_ALLREDUCE_DENSITY"), std::string::npos) << got[1];
  EXPECT_NE(got[1].find("SPCCL_ALLGATHER_DENSITY"), std::string::npos) << got[1];
  EXPECT_EQ(got[2], "SPCCL_COMPLETELY_ELSE");
  EXPECT_EQ(got[3], "SPCCL_NOVALUE");
  EXPECT_TRUE(unknownVariables(nullptr).empty());
}

TEST(Params, AlgoChoicesFollowAlgorithmTable) {
  const ParamSpec* algo = nullptr;
  for (const ParamSpec& s : paramSpecs())
    if (std::string(s.name) == "SPCCL_ALGO") algo = &s;
  ASSERT_NE(algo, nullptr);
  ASSERT_EQ(algo->type, ParamType::kChoice);
  // The choice index is the algorithm id: auto is 0, then the table's rows
  // with ids 1..n in order.
  const auto table = allreduceAlgorithms();
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(table[i].id, static_cast<int>(i) + 1) << table[i].name;
  EXPECT_EQ(std::string(algo->choices), algorithmChoices());
  EXPECT_EQ(algorithmChoices(), "auto|dense|allgather|split");
  EXPECT_STREQ(algorithmName(SPCCL_ALGO_AUTO), "auto");
  for (const AllreduceAlgorithm& a : table) {
    EXPECT_STREQ(algorithmName(a.id), a.name);
    EXPECT_EQ(findAllreduceAlgorithm(a.id), &a);
    Params p;
    ASSERT_TRUE(load({{"SPCCL_ALGO", a.name}}, &p).isOk()) << a.name;
    EXPECT_EQ(p.algorithm, a.id) << a.name;
    // Every row can say what it costs; sparse rows run, dense is the compressor's.
    EXPECT_EQ(a.run != nullptr, a.sparse) << a.name;
    EXPECT_NE(a.cost, nullptr) << a.name;
    EXPECT_TRUE(a.supports(AllreduceRequest{})) << a.name << ": every algorithm runs on host buffers";
  }
  EXPECT_EQ(findAllreduceAlgorithm(SPCCL_ALGO_AUTO), nullptr);
}

// ---------------------------------------------------------------- docs/ENV.md

constexpr const char* kBeginMarker =
    "<!-- BEGIN SPCCL PARAMS (generated from src/params.cc; run build/tests/unit/spccl_env_doc > table) -->";
constexpr const char* kEndMarker = "<!-- END SPCCL PARAMS -->";

TEST(Params, TableRendersEveryVariable) {
  const std::string table = renderParamTable();
  for (const ParamSpec& s : paramSpecs())
    EXPECT_NE(table.find(std::string("`") + s.name + "`"), std::string::npos) << s.name;
  EXPECT_EQ(table.back(), '\n');
}

// Integer bounds print exactly: 4294967295, not the 4e+09 of %.0g; round
// powers of ten stay short.
TEST(Params, IntegerBoundsPrintExactly) {
  const std::string table = renderParamTable();
  EXPECT_NE(table.find("| `SPCCL_ALLTOALL_ROW_LEN` | int | `0` | [0, 4294967295] |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `SPCCL_AUTO_TRIALS` | int | `0` | [0, 1000] |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `SPCCL_THRESHOLD_INTERVAL` | int | `1000` | [1, 1e+09] |"), std::string::npos) << table;
  Params p;
  const Status st = load({{"SPCCL_ALLTOALL_ROW_LEN", "4294967296"}}, &p);
  EXPECT_NE(st.message().find("out of range [0, 4294967295]"), std::string::npos) << st.message();
  EXPECT_EQ(loadOk({{"SPCCL_ALLTOALL_ROW_LEN", "4294967295"}}).alltoallRowLen, 4294967295u);
}

TEST(Params, EnvDocMatchesTable) {
  const std::string path = std::string(SPCCL_SOURCE_DIR) + "/docs/ENV.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot read " << path;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();

  const std::string begin = std::string(kBeginMarker) + "\n";
  const size_t b = doc.find(begin);
  ASSERT_NE(b, std::string::npos) << path << " lacks the line\n" << kBeginMarker;
  const size_t start = b + begin.size();
  const size_t e = doc.find(std::string(kEndMarker), start);
  ASSERT_NE(e, std::string::npos) << path << " lacks the line " << kEndMarker << " after the BEGIN marker";
  ASSERT_TRUE(e == 0 || doc[e - 1] == '\n') << kEndMarker << " must start a line";
  const std::string embedded = doc.substr(start, e - start);
  const std::string generated = renderParamTable();
  if (embedded == generated) return;

  // Name the first differing line, then show both versions whole.
  std::istringstream a(embedded), g(generated);
  std::string la, lg;
  int line = 0;
  while (true) {
    const bool ha = static_cast<bool>(std::getline(a, la)), hg = static_cast<bool>(std::getline(g, lg));
    ++line;
    if (!ha && !hg) break;
    if (!ha || !hg || la != lg) break;
  }
  FAIL() << path << " is out of date with src/params.cc (first difference at table line " << line << ").\n"
         << "  doc:       " << (la.empty() ? "<missing>" : la) << "\n"
         << "  generated: " << (lg.empty() ? "<missing>" : lg) << "\n"
         << "Regenerate: build/tests/unit/spccl_env_doc, paste its output between the markers.\n"
         << "--- docs/ENV.md (between markers)\n"
         << embedded << "+++ renderParamTable()\n"
         << generated;
}

}  // namespace
}  // namespace spccl::test
