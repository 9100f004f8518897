// Conservation and determinism as properties, over
// seeded random configurations of the compressed allreduce: count, density,
// algorithm (spcclCompressConfig_t.algorithm), wire value type, threshold
// interval, error feedback on or off, in place or not, 1 to 4 calls, and
// NaN/+Inf/-Inf at random positions on random ranks in some configurations.
// The rank count is the mpirun's (ctest: 2, 3 and 4). Buffers are fp32.
// The index encoding comes from SPCCL_INDEX_ENCODING at communicator
// creation: ctest runs this binary with auto (default), coo, delta and bitmap.
//
// conservation_test.cc checks conservation for fixed configurations (20000
// elements at 1%, fp32/fp16/bf16/fp8 wires, allgather and split, flushing the
// residual to zero); compressed_test.cc checks NaN/Inf at fixed positions.
// This test checks, for every drawn configuration and every call:
//  1. every rank's output is bitwise identical to rank 0's;
//  2. the same inputs through a fresh compressor give bitwise the same outputs
//     (run twice);
//  3. at every index, the output is NaN / +Inf / -Inf / finite exactly when
//     an MPI_Allreduce (MPI_SUM, MPI_FLOAT) of the same inputs is;
// and after the last call:
//  4. with error feedback: sum over calls of the outputs + sum over ranks of
//     the residuals (spcclCompressorGetResidual) == sum over ranks and calls
//     of the inputs, relative L2 error <= 1e-5 for every wire type (fp16/bf16/fp8
//     rounding goes back into the residual, so the bound does not depend on
//     the wire type), over the indices where no NaN/Inf was ever input;
//     without error feedback: every residual is exactly zero.
//
// SPCCL_PROPERTY_SEED (default 20261129) and SPCCL_PROPERTY_CONFIGS (default
// 64) change the draw; a failure names the configuration and its seed.
#include <cinttypes>
#include <cstdio>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr double kMaxRelativeError = 1e-5;

uint64_t envU64(const char* name, uint64_t fallback) {
  const std::string s = envString(name);
  return s.empty() ? fallback : std::strtoull(s.c_str(), nullptr, 10);
}

struct Config {
  uint64_t seed;
  size_t count;
  float density;
  int algorithm;
  spcclDataType_t wire;
  int thresholdInterval;
  int errorFeedback;
  bool inPlace;
  int calls;
  int nonFinitePerCall;  // NaN/Inf entries injected per rank and call (0: none)

  std::string describe() const {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "config seed %" PRIu64
                  ": count %zu, density %g, algorithm %s, wire %s, thresholdInterval %d, "
                  "errorFeedback %d, %s, %d call(s), %d NaN/Inf per rank and call",
                  seed, count, static_cast<double>(density), algorithmName(algorithm), typeName(wire),
                  thresholdInterval, errorFeedback, inPlace ? "in place" : "out of place", calls, nonFinitePerCall);
    return buf;
  }
};

// The same draw on every rank (the generator is seeded identically).
Config drawConfig(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto pick = [&](uint64_t n) { return static_cast<int>(g() % n); };
  Config c{};
  c.seed = seed;
  // Counts log-uniform in [1, 60000], with some exact tiny ones.
  const double lc = std::uniform_real_distribution<double>(0.0, std::log(60000.0))(g);
  c.count = std::max<size_t>(1, static_cast<size_t>(std::exp(lc)));
  if (pick(8) == 0) c.count = static_cast<size_t>(1 + pick(5));
  // Densities log-uniform in [1e-3, 1], and sometimes exactly 1 (exact path).
  const double ld = std::uniform_real_distribution<double>(std::log(1e-3), 0.0)(g);
  c.density = pick(8) == 0 ? 1.0f : static_cast<float>(std::exp(ld));
  const int algorithms[] = {SPCCL_ALGO_AUTO, SPCCL_ALGO_DENSE, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT};
  c.algorithm = algorithms[pick(4)];
  const spcclDataType_t wires[] = {spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3};
  c.wire = wires[pick(4)];
  const int intervals[] = {1, 1, 2, 3, 1000};
  c.thresholdInterval = intervals[pick(5)];
  c.errorFeedback = pick(4) == 0 ? 0 : 1;
  c.inPlace = pick(2) == 0;
  c.calls = 1 + pick(4);
  c.nonFinitePerCall = pick(3) == 0 ? 1 + pick(3) : 0;
  return c;
}

// Input of `rank` for call `call`: Gaussian with a per-call scale, plus
// NaN/+Inf/-Inf at random positions (and on random ranks: some ranks draw none).
std::vector<float> inputFor(const Config& c, int rank, int call) {
  std::mt19937_64 g(seedFor(c.seed, rank, static_cast<uint64_t>(call)));
  const float sigma = std::ldexp(1.0f, static_cast<int>(g() % 9) - 4);
  std::vector<float> v = gaussian(c.count, g(), sigma);
  if (c.nonFinitePerCall > 0 && g() % 2 == 0) {
    for (int j = 0; j < c.nonFinitePerCall; ++j) {
      const size_t i = static_cast<size_t>(g() % c.count);
      const int kind = static_cast<int>(g() % 3);
      v[i] = kind == 0 ? std::numeric_limits<float>::quiet_NaN()
                       : (kind == 1 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
    }
  }
  return v;
}

// 0 finite, 1 NaN, 2 +Inf, 3 -Inf.
int valueClass(float x) {
  if (std::isnan(x)) return 1;
  if (std::isinf(x)) return x > 0 ? 2 : 3;
  return 0;
}
const char* className(int k) {
  static const char* kNames[] = {"finite", "NaN", "+Inf", "-Inf"};
  return kNames[k];
}

class PropertyTest : public MpiTest {
 protected:
  // One run of a configuration: every call's output (concatenated), the
  // residual after the last call, and the agreed verdict of checks 1 and 3.
  testing::AssertionResult run(const Config& c, std::vector<float>* outputs, std::vector<float>* residualOut,
                               bool checkProperties) {
    spcclCompressConfig_t cfg = makeConfig(c.density, c.algorithm, c.wire, c.thresholdInterval, c.errorFeedback);
    CompressorPtr comp;
    testing::AssertionResult created = createCompressor(c.count, spcclFloat32, cfg, comp);
    if (!created) return created;
    outputs->assign(c.count * static_cast<size_t>(c.calls), 0.0f);
    std::vector<float> buf(c.count), out(c.count), dense(c.count);
    for (int call = 0; call < c.calls; ++call) {
      const std::vector<float> in = inputFor(c, rank_, call);
      float* recv = c.inPlace ? buf.data() : out.data();
      buf = in;
      const spcclResult_t r = spcclAllReduceCompressed(buf.data(), recv, spcclSum, comp.get(), nullptr);
      testing::AssertionResult ok = okOnAllRanks(r, comm_.get(), "spcclAllReduceCompressed");
      if (!ok) return ok << " (call " << call << ")";
      std::copy(recv, recv + c.count, outputs->begin() + static_cast<std::ptrdiff_t>(call * c.count));
      if (!checkProperties) continue;

      // 1. Bitwise identical on every rank.
      testing::AssertionResult same = identicalOnAllRanks(recv, c.count, sizeof(float));
      if (!same) return same << " (call " << call << ")";

      // 3. NaN/Inf exactly where a dense allreduce has them.
      MPI_Allreduce(in.data(), dense.data(), static_cast<int>(c.count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      size_t wrong = 0, first = 0;
      for (size_t i = 0; i < c.count; ++i)
        if (valueClass(recv[i]) != valueClass(dense[i]) && wrong++ == 0) first = i;
      const std::string failing = ranksWhere(wrong != 0);
      if (!failing.empty()) {
        testing::AssertionResult res = testing::AssertionFailure();
        res << "call " << call << ": non-finite entries differ from MPI_Allreduce's on rank(s) " << failing;
        if (wrong != 0)
          res << "; here " << wrong << " index(es), first " << first << ": " << className(valueClass(recv[first]))
              << " (" << recv[first] << ") against " << className(valueClass(dense[first]));
        return res;
      }
    }
    residualOut->assign(c.count, std::numeric_limits<float>::quiet_NaN());
    return residual(comp.get(), *residualOut);
  }
};

TEST_F(PropertyTest, RandomConfigurations) {
  const uint64_t baseSeed = envU64("SPCCL_PROPERTY_SEED", 20261129);
  const uint64_t configs = envU64("SPCCL_PROPERTY_CONFIGS", 64);
  int conservationChecked = 0, nonFiniteConfigs = 0;
  for (uint64_t k = 0; k < configs; ++k) {
    const Config c = drawConfig(baseSeed * 1000003 + k);
    SCOPED_TRACE(c.describe());
    std::vector<float> outputs, res, outputs2, res2;
    ASSERT_TRUE(run(c, &outputs, &res, true));

    // 2. Same inputs, fresh compressor: the same bits, call by call.
    ASSERT_TRUE(run(c, &outputs2, &res2, false));
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < outputs.size(); ++i)
      if (!sameBits(outputs[i], outputs2[i]) && differ++ == 0) first = i;
    for (size_t i = 0; i < res.size(); ++i)
      if (!sameBits(res[i], res2[i]) && differ++ == 0) first = outputs.size() + i;
    ASSERT_TRUE(allRanks(differ == 0)) << "a rerun with the same inputs differs: " << differ
                                       << " value(s) here, first at flat index " << first;

    // 4. Conservation (error feedback) or an empty residual (none).
    if (c.errorFeedback == 0) {
      const size_t nonzero =
          static_cast<size_t>(std::count_if(res.begin(), res.end(), [](float x) { return x != 0.0f; }));
      EXPECT_TRUE(allRanks(nonzero == 0)) << nonzero << " non-zero residual entries without error feedback";
      continue;
    }
    std::vector<double> inSum(c.count, 0.0), outSum(c.count, 0.0), resD(res.begin(), res.end());
    std::vector<int> nonFinite(c.count, 0);
    for (int call = 0; call < c.calls; ++call) {
      const std::vector<float> in = inputFor(c, rank_, call);
      for (size_t i = 0; i < c.count; ++i) {
        inSum[i] += in[i];
        nonFinite[i] |= !std::isfinite(in[i]);
        outSum[i] += outputs[static_cast<size_t>(call) * c.count + i];
      }
    }
    MPI_Allreduce(MPI_IN_PLACE, inSum.data(), static_cast<int>(c.count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, resD.data(), static_cast<int>(c.count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, nonFinite.data(), static_cast<int>(c.count), MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    double err = 0.0, norm = 0.0;
    size_t excluded = 0;
    for (size_t i = 0; i < c.count; ++i) {
      if (nonFinite[i]) {
        ++excluded;
        continue;
      }
      const double d = outSum[i] + resD[i] - inSum[i];
      err += d * d;
      norm += inSum[i] * inSum[i];
    }
    nonFiniteConfigs += excluded > 0;
    if (excluded == c.count || norm == 0.0) continue;
    const double rel = std::sqrt(err) / std::sqrt(norm);
    EXPECT_LE(rel, kMaxRelativeError) << "sum(outputs) + sum(residuals) != sum(inputs) (" << excluded
                                      << " non-finite indices left out)";
    ++conservationChecked;
  }
  if (rank_ == 0) {
    RecordProperty("configs", static_cast<int>(configs));
    RecordProperty("conservation_checked", conservationChecked);
    RecordProperty("configs_with_nonfinite", nonFiniteConfigs);
    std::printf("property_test: %d ranks, %" PRIu64 " configurations (seed %" PRIu64
                "), conservation checked in %d, NaN/Inf injected in %d\n",
                size_, configs, baseSeed, conservationChecked, nonFiniteConfigs);
  }
  // The draw must exercise what it claims to (otherwise the test checks little).
  EXPECT_GT(conservationChecked, 0);
}

}  // namespace
}  // namespace spccl::test
