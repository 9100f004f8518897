// kernels/host: exact threshold selection against a full sort, and the fused
// select+pack pass against a naive reference written from the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/select_pack_layout.h"
#include "kernels/host/host_kernels.h"
#include "tests/unit/unit_util.h"

namespace spccl::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// v = send + residual, in float, as the library forms it.
std::vector<float> formV(const TypedInput& in, const std::vector<float>* residual) {
  std::vector<float> v = in.decoded;
  if (residual)
    for (size_t i = 0; i < v.size(); ++i) v[i] += (*residual)[i];
  return v;
}

// ---------------------------------------------------------------- threshold

struct RefThreshold {
  float tau;
  uint64_t above, finite;
};

RefThreshold referenceThreshold(const std::vector<float>& v, uint64_t k) {
  std::vector<float> mags;
  for (float x : v)
    if (std::isfinite(x)) mags.push_back(std::fabs(x));
  std::sort(mags.begin(), mags.end(), std::greater<float>());
  RefThreshold r{0.0f, 0, mags.size()};
  if (k >= 1 && k <= mags.size()) r.tau = mags[k - 1];
  r.above = static_cast<uint64_t>(std::count_if(mags.begin(), mags.end(), [&](float m) { return m > r.tau; }));
  return r;
}

struct Dataset {
  std::string name;
  std::vector<float> send;
  std::optional<std::vector<float>> residual;
};

std::vector<Dataset> thresholdDatasets() {
  auto g = rng(10);
  std::vector<Dataset> d;
  d.push_back({"empty", {}, {}});
  d.push_back({"one", {-2.5f}, {}});
  d.push_back({"one_zero", {0.0f}, {}});
  d.push_back({"two_equal", {1.0f, -1.0f}, {}});
  d.push_back({"random", randomNormal(g, 5000), {}});
  d.push_back({"random_residual", randomNormal(g, 5000), randomNormal(g, 5000, 0.1f)});
  {
    std::vector<float> eq(1000);
    for (float& x : eq) x = (g() & 1) ? 0.375f : -0.375f;
    d.push_back({"all_equal_magnitude", eq, {}});
  }
  d.push_back({"ties", randomTies(g, 3000), {}});
  d.push_back({"ties_residual", randomTies(g, 3000), randomTies(g, 3000, 0.125f)});
  d.push_back({"all_zero", std::vector<float>(500, 0.0f), {}});
  d.push_back({"all_zero_signed", std::vector<float>(500, -0.0f), std::vector<float>(500, 0.0f)});
  {
    std::vector<float> z = randomNormal(g, 2000);
    for (size_t i = 0; i < z.size(); i += 3) z[i] = 0.0f;
    d.push_back({"zeros_mixed", z, {}});
  }
  {
    std::vector<float> nf = randomNormal(g, 3000);
    sprinkleNonFinite(g, nf, 0.1);
    d.push_back({"nonfinite_mixed", nf, {}});
    std::vector<float> res = randomNormal(g, 3000, 0.5f);
    sprinkleNonFinite(g, res, 0.05);
    d.push_back({"nonfinite_in_residual", randomNormal(g, 3000), res});
  }
  {
    std::vector<float> all(64, kNaN);
    for (size_t i = 0; i < all.size(); i += 2) all[i] = (i % 4) ? kInf : -kInf;
    d.push_back({"all_nonfinite", all, {}});
  }
  {
    std::vector<float> neg = randomNormal(g, 2000);
    for (float& x : neg) x = -std::fabs(x);
    d.push_back({"negative", neg, {}});
  }
  {
    // The residual cancels half the inputs exactly: those v are zero.
    std::vector<float> s = randomNormal(g, 2000), r = randomNormal(g, 2000);
    for (size_t i = 0; i < s.size(); i += 2) r[i] = -s[i];
    d.push_back({"residual_cancels", s, r});
  }
  {
    // send + residual overflows to +-Inf in fp32 (finite parts, non-finite sum).
    std::vector<float> s = randomNormal(g, 1000), r(1000, 0.0f);
    for (size_t i = 0; i < s.size(); i += 10) {
      s[i] = (i % 20) ? 3e38f : -3e38f;
      r[i] = s[i];
    }
    d.push_back({"residual_overflow", s, r});
  }
  {
    std::vector<float> wide(4000);
    for (float& x : wide) x = randomFiniteBits(g);  // subnormals to 3e38
    d.push_back({"wide_exponents", wide, {}});
  }
  {
    std::vector<float> sub(1000);
    for (float& x : sub) x = floatOf(static_cast<uint32_t>(g() % 64)) * ((g() & 1) ? 1.0f : -1.0f);
    d.push_back({"subnormal_ties", sub, {}});
  }
  {
    // Keys that share their top 16 bits (one radix bucket) and differ below.
    std::vector<float> one(3000);
    for (float& x : one) x = floatOf(0x3f800000u | static_cast<uint32_t>(g() & 0xffffu)) * ((g() & 1) ? 1.0f : -1.0f);
    d.push_back({"one_radix_bucket", one, {}});
    // Two adjacent buckets, the k-th largest at the edge between them.
    std::vector<float> edge(2000);
    for (size_t i = 0; i < edge.size(); ++i) edge[i] = floatOf(i < 1000 ? 0x3f810000u : 0x3f80ffffu);
    d.push_back({"radix_bucket_edge", edge, {}});
  }
  d.push_back({"large", randomNormal(g, 100000), randomNormal(g, 100000, 0.01f)});
  // From 65536 elements a sample places a floor under tau first (kernels/host,
  // sampledSelect; host::thresholdSamplePosition says which elements). Data
  // built to fool it must still give the exact answer, through the radix
  // select.
  {
    const size_t n = size_t{1} << 17;
    std::vector<bool> isSampled(n, false);
    const size_t samples = host::thresholdSampleCount(n);
    for (size_t j = 0; j < samples; ++j) isSampled[host::thresholdSamplePosition(j, samples, n)] = true;
    const auto sampled = [&](size_t i) { return isSampled[i]; };
    std::vector<float> spikes = randomNormal(g, n, 0.001f), misses = randomNormal(g, n, 100.0f);
    std::vector<float> nanOutside(n, kNaN), mostlyZero(n, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      if (sampled(i)) {
        spikes[i] *= 100000.0f;  // the sample sees only the spikes: its floor is too high
        misses[i] *= 0.00001f;   // the sample sees only small values: its floor is too low
        nanOutside[i] = static_cast<float>(g() % 1000) - 500.0f;  // finite only where sampled
      }
      if (g() % 100 == 0) mostlyZero[i] = static_cast<float>(static_cast<int>(g() % 2001) - 1000);
    }
    d.push_back({"sampled_sees_only_spikes", spikes, {}});
    d.push_back({"sampled_misses_the_large", misses, {}});
    d.push_back({"sampled_nonfinite_elsewhere", nanOutside, {}});
    d.push_back({"sampled_mostly_zero", mostlyZero, {}});
    std::vector<float> nf = randomNormal(g, n);
    sprinkleNonFinite(g, nf, 0.01);
    d.push_back({"sampled_nonfinite_residual_ties", nf, randomTies(g, n, 0.25f)});
    d.push_back({"sampled_ties", randomTies(g, n), {}});
  }
  return d;
}

std::vector<uint64_t> ksFor(size_t n, uint64_t finite) {
  std::vector<uint64_t> ks = {1, 2,     3,      n / 100,    n / 10,     n / 2,    n - 1,
                              n, n + 1, finite, finite + 1, finite - 1, 2 * n + 5};
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  ks.erase(std::remove_if(ks.begin(), ks.end(), [&](uint64_t k) { return k == 0 || k > 2 * n + 5; }), ks.end());
  return ks;
}

TEST(KthLargestMagnitude, MatchesFullSort) {
  int checked = 0;
  for (const Dataset& d : thresholdDatasets()) {
    for (spcclDataType_t t : kAllFloatTypes) {
      const TypedInput in(d.send, t);
      const std::vector<float>* res = d.residual ? &*d.residual : nullptr;
      const std::vector<float> v = formV(in, res);
      const uint64_t finite = referenceThreshold(v, 0).finite;
      for (uint64_t k : ksFor(v.size(), finite)) {
        SCOPED_TRACE(d.name + " " + typeName(t) + " k=" + std::to_string(k) + " n=" + std::to_string(v.size()));
        std::vector<uint32_t> scratch;  // grown to the bucket's count by the call
        const RefThreshold want = referenceThreshold(v, k);
        const host::ThresholdResult got =
            host::kthLargestMagnitude(in.data(), t, res ? res->data() : nullptr, v.size(), k, &scratch);
        ASSERT_LE(scratch.size(), v.size());
        ASSERT_EQ(got.tauKey, core::magnitudeKey(want.tau))
            << "tau " << core::bitsFloat(got.tauKey) << " vs " << want.tau;
        ASSERT_EQ(got.finite, want.finite);
        ASSERT_EQ(got.above, want.above);
        // The radix select alone (the sampled pass's fallback) gives the same.
        const host::ThresholdResult radix =
            host::kthLargestMagnitudeRadix(in.data(), t, res ? res->data() : nullptr, v.size(), k, &scratch);
        ASSERT_EQ(radix.tauKey, got.tauKey);
        ASSERT_EQ(radix.finite, got.finite);
        ASSERT_EQ(radix.above, got.above);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500);
}

// ---------------------------------------------------------------- select+pack

struct RefSelect {
  std::vector<uint32_t> indices;
  std::vector<float> sent;      // what the receivers decode, per selected pair
  std::vector<float> residual;  // n entries
  uint64_t finite = 0;
};

RefSelect referenceSelect(const std::vector<float>& v, float tau, uint64_t tieBudget, core::ValueType wire) {
  RefSelect r;
  r.residual.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const float x = v[i];
    const bool nonFinite = !std::isfinite(x);
    bool take = nonFinite || (x != 0.0f && std::fabs(x) > tau);
    if (!take && x != 0.0f && std::fabs(x) == tau && tieBudget > 0) {
      --tieBudget;
      take = true;
    }
    if (!take) {
      r.residual[i] = x;
      continue;
    }
    r.indices.push_back(static_cast<uint32_t>(i));
    r.sent.push_back(refRoundToWire(x, wire));
    r.residual[i] = nonFinite ? 0.0f : x - refRoundToWire(x, wire);
    r.finite += !nonFinite;
  }
  return r;
}

float decodeWire(const std::vector<unsigned char>& values, uint64_t j, core::ValueType wire) {
  if (wire == core::ValueType::kFloat32) {
    float f;
    std::memcpy(&f, values.data() + 4 * j, 4);
    return f;
  }
  if (wire == core::ValueType::kFloat8e4m3) return refE4m3ToFloat(values[j], 0);  // SelectArgs' default scale
  uint16_t h;
  std::memcpy(&h, values.data() + 2 * j, 2);
  return wire == core::ValueType::kFloat16 ? refHalfToFloat(h) : refBf16ToFloat(h);
}

enum class ResidualMode { kNone, kInOnly, kOutOnly, kSeparate, kInPlace };
const char* modeName(ResidualMode m) {
  switch (m) {
    case ResidualMode::kNone:
      return "no_residual";
    case ResidualMode::kInOnly:
      return "residual_in_only";
    case ResidualMode::kOutOnly:
      return "residual_out_only";
    case ResidualMode::kSeparate:
      return "residual_in_out";
    default:
      return "residual_in_place";
  }
}

struct SelectParam {
  spcclDataType_t inType;
  core::ValueType wire;
  ResidualMode mode;
};

void PrintTo(const SelectParam& p, std::ostream* os) {
  *os << typeName(p.inType) << " input, " << typeName(p.wire) << " wire, " << modeName(p.mode);
}

std::string paramName(const ::testing::TestParamInfo<SelectParam>& info) {
  return std::string("in_") + typeName(info.param.inType) + "_wire_" + typeName(info.param.wire) + "_" +
         modeName(info.param.mode);
}

class SelectPackTest : public ::testing::TestWithParam<SelectParam> {};
// reselectCandidates recomputes v from residualIn, so its contract excludes
// an in-place residual (the compressor double-buffers): a suite of its own.
class ReselectTest : public SelectPackTest {};

constexpr uint32_t kIndexGuard = 0xdeadbeefu;
constexpr unsigned char kValueGuard = 0xcd;
constexpr size_t kGuardSlots = 16;

// One selectPack call checked against the reference, guards included.
void checkOneSelect(const SelectParam& p, const TypedInput& in, const std::vector<float>& residualValues, float tau,
                    uint64_t tieBudget, uint64_t capacity) {
  const size_t n = in.size();
  const bool hasIn =
      p.mode == ResidualMode::kInOnly || p.mode == ResidualMode::kSeparate || p.mode == ResidualMode::kInPlace;
  const bool hasOut = p.mode != ResidualMode::kNone && p.mode != ResidualMode::kInOnly;
  const std::vector<float> v = formV(in, hasIn ? &residualValues : nullptr);
  const RefSelect want = referenceSelect(v, tau, tieBudget, p.wire);

  std::vector<float> resIn = residualValues;
  std::vector<float> resOut(n, 12345.0f);  // garbage: every entry must be written
  float* outPtr = hasOut ? (p.mode == ResidualMode::kInPlace ? resIn.data() : resOut.data()) : nullptr;
  const uint32_t vb = core::wireValueBytes(p.wire);
  std::vector<uint32_t> indices(capacity + kGuardSlots, kIndexGuard);
  std::vector<unsigned char> values((capacity + kGuardSlots) * vb, kValueGuard);

  const host::SelectArgs args{in.data(),
                              in.type,
                              hasIn ? resIn.data() : nullptr,
                              outPtr,
                              n,
                              core::magnitudeKey(tau),
                              tieBudget,
                              capacity,
                              p.wire,
                              indices.data(),
                              values.data()};
  const host::SelectResult got = host::selectPack(args);

  ASSERT_EQ(got.selected, want.indices.size());
  ASSERT_EQ(got.finiteSelected, want.finite);
  const uint64_t written = std::min<uint64_t>(capacity, want.indices.size());
  for (uint64_t j = 0; j < written; ++j) {
    ASSERT_EQ(indices[j], want.indices[j]) << "pair " << j;
    const float sent = decodeWire(values, j, p.wire);
    ASSERT_TRUE(sameFloat(sent, want.sent[j]))
        << "pair " << j << " index " << want.indices[j] << ": " << sent << " vs " << want.sent[j];
  }
  for (size_t j = written; j < indices.size(); ++j) ASSERT_EQ(indices[j], kIndexGuard) << "index slot " << j;
  for (size_t b = written * vb; b < values.size(); ++b) ASSERT_EQ(values[b], kValueGuard) << "value byte " << b;

  if (hasOut) {
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameFloat(outPtr[i], want.residual[i]))
          << "residual[" << i << "] = " << outPtr[i] << ", want " << want.residual[i] << " (v=" << v[i] << ")";
  }
  if (p.mode == ResidualMode::kInOnly || p.mode == ResidualMode::kSeparate) {
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bitsOf(resIn[i]), bitsOf(residualValues[i])) << "residualIn changed";
  }
}

TEST_P(SelectPackTest, MatchesReference) {
  const SelectParam p = GetParam();
  auto g =
      rng(20 + static_cast<uint64_t>(p.inType) * 7 + static_cast<uint64_t>(p.wire) * 3 + static_cast<uint64_t>(p.mode));
  const size_t n = 1500;
  std::vector<std::pair<std::string, std::vector<float>>> sends;
  {
    std::vector<float> r = randomNormal(g, n);
    sprinkleNonFinite(g, r, 0.02);
    sends.emplace_back("random_nonfinite", r);
    sends.emplace_back("ties", randomTies(g, n));
    std::vector<float> z(n, 0.0f);
    for (size_t i = 0; i < n; i += 7) z[i] = (i % 2) ? 1.5f : -1e-3f;
    sends.emplace_back("mostly_zero", z);
    std::vector<float> w(n);
    for (float& x : w) x = std::ldexp(randomNormal(g, 1)[0], static_cast<int>(g() % 40) - 30);  // fp16 subnormals
    sends.emplace_back("small_exponents", w);
  }
  // Residuals also hold ties and exact cancellations of the input.
  std::vector<float> residual = randomTies(g, n, 0.125f);
  for (size_t i = 0; i < n; i += 11) residual[i] = randomNormal(g, 1, 0.01f)[0];

  for (const auto& [name, values] : sends) {
    const TypedInput in(values, p.inType);
    for (size_t i = 0; i < n; i += 13) residual[i] = -in.decoded[i];
    const bool hasIn =
        p.mode == ResidualMode::kInOnly || p.mode == ResidualMode::kSeparate || p.mode == ResidualMode::kInPlace;
    const std::vector<float> v = formV(in, hasIn ? &residual : nullptr);
    std::vector<float> mags;
    for (float x : v)
      if (std::isfinite(x) && x != 0.0f) mags.push_back(std::fabs(x));
    std::sort(mags.begin(), mags.end(), std::greater<float>());
    std::vector<float> taus = {0.0f, std::numeric_limits<float>::max()};
    if (!mags.empty()) {
      taus.push_back(mags[mags.size() / 10]);
      taus.push_back(mags[mags.size() / 2]);
      taus.push_back(mags.back());
    }
    for (float tau : taus) {
      for (uint64_t ties : {uint64_t{0}, uint64_t{1}, uint64_t{7}, kNoLimit}) {
        const uint64_t selected = referenceSelect(v, tau, ties, p.wire).indices.size();
        for (uint64_t cap : {selected + 5, selected, selected / 2, uint64_t{0}}) {
          SCOPED_TRACE(name + " tau=" + std::to_string(tau) + " ties=" + std::to_string(ties) +
                       " capacity=" + std::to_string(cap));
          checkOneSelect(p, in, residual, tau, ties, cap);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

std::vector<SelectParam> allSelectParams() {
  std::vector<SelectParam> ps;
  for (spcclDataType_t t : kAllFloatTypes)
    for (core::ValueType w : kAllValueTypes)
      for (ResidualMode m : {ResidualMode::kNone, ResidualMode::kInOnly, ResidualMode::kOutOnly,
                             ResidualMode::kSeparate, ResidualMode::kInPlace})
        ps.push_back({t, w, m});
  return ps;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, SelectPackTest, ::testing::ValuesIn(allSelectParams()), paramName);

std::vector<SelectParam> reselectParams() {
  std::vector<SelectParam> ps;
  for (const SelectParam& p : allSelectParams())
    if (p.mode != ResidualMode::kInPlace) ps.push_back(p);
  return ps;
}
INSTANTIATE_TEST_SUITE_P(AllTypes, ReselectTest, ::testing::ValuesIn(reselectParams()), paramName);

// The compressor's use of the two kernels: tau from the k-th largest, a tie
// budget of k - above; then exactly min(k, non-zero finite) finite entries go.
TEST(SelectPack, ThresholdPlusTieBudgetSelectsExactlyK) {
  auto g = rng(30);
  std::vector<std::vector<float>> inputs = {randomNormal(g, 4000), randomTies(g, 4000), randomTies(g, 4000, 1.0f)};
  sprinkleNonFinite(g, inputs[0], 0.01);
  for (const auto& values : inputs) {
    for (uint64_t k : {uint64_t{1}, uint64_t{40}, uint64_t{400}, uint64_t{2000}, uint64_t{4000}}) {
      std::vector<uint32_t> scratch(values.size());
      const host::ThresholdResult t =
          host::kthLargestMagnitude(values.data(), spcclFloat32, nullptr, values.size(), k, &scratch);
      const uint64_t budget = k > t.above ? k - t.above : 0;
      std::vector<uint32_t> idx(values.size());
      std::vector<float> vals(values.size());
      const host::SelectResult r =
          host::selectPack({values.data(), spcclFloat32, nullptr, nullptr, values.size(), t.tauKey, budget,
                            values.size(), core::ValueType::kFloat32, idx.data(), vals.data()});
      const uint64_t nonZeroFinite = static_cast<uint64_t>(
          std::count_if(values.begin(), values.end(), [](float x) { return std::isfinite(x) && x != 0.0f; }));
      EXPECT_EQ(r.finiteSelected, std::min(k, nonZeroFinite)) << "k=" << k;
      EXPECT_EQ(r.selected - r.finiteSelected,
                static_cast<uint64_t>(
                    std::count_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); })));
    }
  }
}

// fp8 with the compressor's tau scale: every selected finite v below the
// saturation point is a normal code (relative error <= 2^-4), what is sent is
// what receivers decode, and sent + residualOut == v exactly (error feedback
// keeps the rounding and any saturation excess); NaN/Inf travel as themselves.
TEST(SelectPack, Fp8TauScaleErrorFeedbackIsExact) {
  auto g = rng(32);
  std::vector<float> values = randomNormal(g, 20000, 1e-4f);  // gradient-sized
  sprinkleNonFinite(g, values, 0.001);
  values[17] = 50.0f;  // far beyond 28672 tau: saturates
  values[18] = -50.0f;
  const std::vector<float> residualIn = randomNormal(g, 20000, 1e-5f);
  std::vector<uint32_t> scratch(values.size());
  const host::ThresholdResult t =
      host::kthLargestMagnitude(values.data(), spcclFloat32, residualIn.data(), values.size(), 200, &scratch);
  const int s = core::fp8ScaleForTau(t.tauKey);
  std::vector<uint32_t> idx(values.size());
  std::vector<unsigned char> vals(values.size());
  std::vector<float> residualOut(values.size());
  host::SelectArgs a{values.data(), spcclFloat32, residualIn.data(), residualOut.data(),           values.size(),
                     t.tauKey,      kNoLimit,     values.size(),     core::ValueType::kFloat8e4m3, idx.data(),
                     vals.data()};
  a.scaleExp = s;
  const host::SelectResult r = host::selectPack(a);
  ASSERT_GT(r.finiteSelected, 190u);
  std::vector<float> sent(values.size(), 0.0f);
  for (uint64_t j = 0; j < r.selected; ++j) {
    const float v = values[idx[j]] + residualIn[idx[j]];
    const float d = refE4m3ToFloat(vals[j], s);
    ASSERT_TRUE(sameFloat(d, refRoundToWire(v, core::ValueType::kFloat8e4m3, s))) << j;
    sent[idx[j]] = d;
    if (!std::isfinite(v)) {
      ASSERT_TRUE(sameFloat(d, v)) << "non-finite travels as itself";
      ASSERT_EQ(residualOut[idx[j]], 0.0f);
      continue;
    }
    if (std::fabs(v) <= std::ldexp(448.0f, s)) {
      ASSERT_LE(std::fabs(d - v), std::ldexp(std::fabs(v), -4)) << "v=" << v << " scale " << s;
      ASSERT_GE(std::fabs(d), std::ldexp(1.0f, s - 6)) << "selected values are normal codes";
    } else {
      ASSERT_EQ(std::fabs(d), std::ldexp(448.0f, s)) << "saturated";
    }
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i] + residualIn[i];
    if (!std::isfinite(v)) continue;
    ASSERT_EQ(sent[i] + residualOut[i], v) << "i=" << i;  // exact: v - d is exact here (Sterbenz or d == 0)
  }
  EXPECT_EQ(residualOut[17], values[17] + residualIn[17] - std::ldexp(448.0f, s));
}

// Fixed-capacity mode: with keepOverflow, the first `capacity` entries the
// rule selects (index order) are sent exactly as without it, and every
// selected entry past them keeps all of v in the residual, so send +
// residualIn == sent + residualOut holds element by element.
// Large calls store the residual with non-temporal 64-byte lines after a
// scalar head up to the first line boundary: every output alignment, with
// sizes past the streaming threshold (8 MiB) and an odd tail, matches the
// reference bit for bit, and nothing outside [out, out + n) is written.
TEST(SelectPack, StreamingStoresAtEveryAlignment) {
  auto g = rng(97);
  const size_t n = (size_t{8} << 20) / sizeof(float) + 37;
  std::vector<float> send = randomNormal(g, n);
  sprinkleNonFinite(g, send, 0.0001);
  const std::vector<float> residual = randomNormal(g, n, 0.5f);
  const TypedInput in(send, spcclFloat32);
  const std::vector<float> v = formV(in, &residual);
  const float tau = 2.5f;
  const RefSelect want = referenceSelect(v, tau, ~uint64_t{0}, core::ValueType::kFloat32);
  std::vector<uint32_t> indices(want.indices.size());
  std::vector<float> values(want.indices.size());
  std::vector<float> outBuf(n + 32);
  for (size_t shift : {size_t{0}, size_t{1}, size_t{5}, size_t{15}}) {
    std::fill(outBuf.begin(), outBuf.end(), 777.0f);
    float* out = outBuf.data() + shift;
    const host::SelectArgs args{send.data(),
                                spcclFloat32,
                                residual.data(),
                                out,
                                n,
                                core::magnitudeKey(tau),
                                ~uint64_t{0},
                                indices.size(),
                                core::ValueType::kFloat32,
                                indices.data(),
                                values.data()};
    const host::SelectResult got = host::selectPack(args);
    ASSERT_EQ(got.selected, want.indices.size()) << "shift " << shift;
    ASSERT_TRUE(std::equal(indices.begin(), indices.end(), want.indices.begin())) << "shift " << shift;
    for (size_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameFloat(out[i], want.residual[i])) << "shift " << shift << " residual[" << i << "]";
    for (size_t i = 0; i < shift; ++i) ASSERT_EQ(outBuf[i], 777.0f) << "written before the output";
    for (size_t i = shift + n; i < outBuf.size(); ++i) ASSERT_EQ(outBuf[i], 777.0f) << "written after the output";
  }
}

TEST(SelectPack, KeepOverflowLeavesTheOverflowInTheResidual) {
  auto g = rng(31);
  std::vector<float> values = randomNormal(g, 5000);
  sprinkleNonFinite(g, values, 0.005);
  const std::vector<float> residualIn = randomNormal(g, 5000);
  std::vector<float> v(values.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = values[i] + residualIn[i];
  for (core::ValueType wire : {core::ValueType::kFloat32, core::ValueType::kFloat16}) {
    for (uint64_t capacity : {uint64_t{0}, uint64_t{7}, uint64_t{100}}) {
      SCOPED_TRACE("capacity=" + std::to_string(capacity) + " wire=" + std::to_string(static_cast<int>(wire)));
      const float tau = 1.5f;  // ~13% of N(0, 2) pass: far more than the capacity
      const RefSelect all = referenceSelect(v, tau, kNoLimit, wire);
      ASSERT_GT(all.indices.size(), capacity + 50);
      std::vector<uint32_t> idx(capacity + 1, 0xdeadbeefu);
      std::vector<unsigned char> vals((capacity + 1) * core::wireValueBytes(wire));
      std::vector<float> residualOut(v.size(), 777.0f);
      host::SelectArgs a{values.data(),      spcclFloat32,  residualIn.data(),
                         residualOut.data(), values.size(), core::magnitudeKey(tau),
                         kNoLimit,           capacity,      wire,
                         idx.data(),         vals.data()};
      a.keepOverflow = true;
      const host::SelectResult r = host::selectPack(a);
      EXPECT_EQ(r.selected, all.indices.size());  // counted past the capacity
      EXPECT_EQ(r.finiteSelected, all.finite);
      EXPECT_EQ(idx[capacity], 0xdeadbeefu) << "wrote past the capacity";
      std::vector<bool> sent(v.size(), false);
      for (uint64_t j = 0; j < capacity; ++j) {
        ASSERT_EQ(idx[j], all.indices[j]) << "pair " << j;
        ASSERT_TRUE(sameFloat(decodeWire(vals, j, wire), all.sent[j])) << "pair " << j;
        sent[idx[j]] = true;
      }
      for (size_t i = 0; i < v.size(); ++i) {
        const float want = sent[i] ? all.residual[i] : v[i];
        ASSERT_TRUE(sameFloat(residualOut[i], want))
            << "residual[" << i << "] = " << residualOut[i] << ", want " << want << " (v=" << v[i] << ")";
      }
    }
  }
}

// A stale tau captured more than `capacity` candidates: re-selecting among
// them must give exactly what a fresh exact estimate and a fresh pass give
// (indices, values, residual, tau).
TEST_P(ReselectTest, ReselectCandidatesEqualsFreshSelection) {
  const SelectParam p = GetParam();
  auto g =
      rng(60 + static_cast<uint64_t>(p.inType) * 7 + static_cast<uint64_t>(p.wire) * 3 + static_cast<uint64_t>(p.mode));
  const size_t n = 3000;
  const bool hasIn =
      p.mode == ResidualMode::kInOnly || p.mode == ResidualMode::kSeparate || p.mode == ResidualMode::kInPlace;
  const bool hasOut = p.mode != ResidualMode::kNone && p.mode != ResidualMode::kInOnly;
  std::vector<std::pair<std::string, std::vector<float>>> sends;
  {
    std::vector<float> r = randomNormal(g, n);
    sprinkleNonFinite(g, r, 0.01);
    sends.emplace_back("random_nonfinite", r);
    sends.emplace_back("ties", randomTies(g, n));
  }
  const std::vector<float> residual0 = randomTies(g, n, 0.0625f);
  for (const auto& [name, values] : sends) {
    const TypedInput in(values, p.inType);
    const std::vector<float> v = formV(in, hasIn ? &residual0 : nullptr);
    for (uint64_t k : {uint64_t{1}, uint64_t{30}, uint64_t{300}}) {
      for (uint64_t capacity : {k, 2 * k}) {
        SCOPED_TRACE(name + " k=" + std::to_string(k) + " capacity=" + std::to_string(capacity));
        // Stale tau: the magnitude ranked ~3*capacity, so far more than capacity entries pass.
        std::vector<float> mags;
        for (float x : v)
          if (std::isfinite(x) && x != 0.0f) mags.push_back(std::fabs(x));
        std::sort(mags.begin(), mags.end(), std::greater<float>());
        ASSERT_GT(mags.size(), 3 * capacity + 1);
        const float staleTau = mags[3 * capacity];
        const uint32_t vb = core::wireValueBytes(p.wire);

        // The library's path: stale pass with room for every candidate, then reselect.
        std::vector<float> resIn = residual0, resOut(n, 777.0f);
        float* outPtr = hasOut ? (p.mode == ResidualMode::kInPlace ? resIn.data() : resOut.data()) : nullptr;
        std::vector<uint32_t> idx(n);
        std::vector<unsigned char> vals(n * vb);
        const host::SelectArgs a{in.data(),  in.type,    hasIn ? resIn.data() : nullptr,
                                 outPtr,     n,          core::magnitudeKey(staleTau),
                                 kNoLimit,   n,          p.wire,
                                 idx.data(), vals.data()};
        const host::SelectResult stale = host::selectPack(a);
        ASSERT_GT(stale.finiteSelected, capacity);
        std::vector<uint32_t> scratch(stale.selected);
        const host::ReselectResult rs = host::reselectCandidates(a, stale.selected, k, capacity, scratch.data());

        // The fresh path: exact tau over all of v, tie budget capacity - above.
        std::vector<uint32_t> scratchAll(n);
        const host::ThresholdResult t =
            host::kthLargestMagnitude(in.data(), in.type, hasIn ? residual0.data() : nullptr, n, k, &scratchAll);
        ASSERT_EQ(rs.tauKey, t.tauKey);
        const float tau = core::bitsFloat(t.tauKey);
        const RefSelect want = referenceSelect(v, tau, capacity > t.above ? capacity - t.above : 0, p.wire);
        ASSERT_EQ(rs.selected, want.indices.size());
        for (uint64_t j = 0; j < rs.selected; ++j) {
          ASSERT_EQ(idx[j], want.indices[j]) << "pair " << j;
          ASSERT_TRUE(sameFloat(decodeWire(vals, j, p.wire), want.sent[j])) << "pair " << j;
        }
        if (hasOut) {
          for (size_t i = 0; i < n; ++i)
            ASSERT_TRUE(sameFloat(outPtr[i], want.residual[i]))
                << "residual[" << i << "] = " << outPtr[i] << ", want " << want.residual[i] << " (v=" << v[i] << ")";
        }
      }
    }
  }
}

// ---------------------------------------------------------------- row top-k

// host::selectRowTopK against its rule written out: n = min(rowLen,
// max(keep, #NaN/Inf)) entries, NaN/Inf first, then larger |x|, then the lower
// position; positions ascending. `values` are the row's values as the
// selection sees them (decoded from fp16/bf16).
void expectRowTopK(const void* row, spcclDataType_t type, const std::vector<float>& values, uint32_t keep,
                   const std::string& what) {
  const auto rowLen = static_cast<uint32_t>(values.size());
  uint32_t nonFinite = 0;
  std::vector<uint32_t> order(rowLen);
  for (uint32_t i = 0; i < rowLen; ++i) {
    order[i] = i;
    nonFinite += !std::isfinite(values[i]);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const bool fa = std::isfinite(values[a]), fb = std::isfinite(values[b]);
    if (fa != fb) return !fa;
    return fa && std::fabs(values[a]) > std::fabs(values[b]);
  });
  const uint32_t n = std::min(rowLen, std::max(keep, nonFinite));
  std::vector<uint32_t> want(order.begin(), order.begin() + n);
  std::sort(want.begin(), want.end());
  std::vector<uint32_t> got(rowLen + 1, 0xdeadbeefu);
  std::vector<uint64_t> scratch(std::max(rowLen, 1u));
  const uint32_t count = host::selectRowTopK(row, type, rowLen, keep, got.data(), scratch.data());
  ASSERT_EQ(count, n) << what << " rowLen " << rowLen << " keep " << keep;
  ASSERT_EQ(got[rowLen], 0xdeadbeefu) << what << ": written past rowLen";
  got.resize(count);
  ASSERT_EQ(got, want) << what << " rowLen " << rowLen << " keep " << keep;
}

// Every host SIMD level this CPU runs (baseline first), each pinned in turn
// for the row top-k tests: every level must give the rule's result.
std::vector<host::HostSimd> availableHostSimd() {
  std::vector<host::HostSimd> levels = {host::HostSimd::kBaseline};
  for (host::HostSimd simd : {host::HostSimd::kAvx2, host::HostSimd::kAvx512})
    if (host::hostSimdAvailable(simd)) levels.push_back(simd);
  return levels;
}

struct PinnedHostSimd {
  explicit PinnedHostSimd(host::HostSimd simd) : previous(host::hostSimd()) { EXPECT_TRUE(host::setHostSimd(simd)); }
  ~PinnedHostSimd() { host::setHostSimd(previous); }
  host::HostSimd previous;
};

// keep = 0 keeps only the NaN/Inf (it read best[-1] and nth_element'ed at
// n - 1 = 2^32 - 1 before, found by the GPU test's comparison on an H200).
// The floor-and-candidates path (0 < keep < rowLen, NaN/Inf <= keep) runs with
// few candidates (counted), many (the histogram: ties, large keep) and exactly
// `keep` (keep = rowLen - 1 and the like), the general path otherwise.
TEST(SelectRowTopK, MatchesTheRuleForEveryKeep) {
  for (host::HostSimd simd : availableHostSimd()) {
    SCOPED_TRACE(host::hostSimdName(simd));
    const PinnedHostSimd pinned(simd);
    auto g = rng(41);
    for (uint32_t rowLen : {0u, 1u, 2u, 5u, 31u, 32u, 33u, 100u, 128u, 300u, 1024u})
      for (int dist = 0; dist < 5; ++dist) {  // normal; few values (ties); with NaN/Inf; rare NaN/Inf; zeros
        std::vector<float> row = dist == 1 ? randomTies(g, rowLen) : randomNormal(g, rowLen);
        if (dist == 2 || dist == 3)
          for (float& x : row)
            if (g() % (dist == 2 ? 7 : 61) == 0) x = (g() & 1) ? -kInf : kNaN;
        if (dist == 4)  // +0 and -0 (the same key) with a few non-zeros
          for (float& x : row) x = g() % 13 == 0 ? x : ((g() & 1) ? -0.0f : 0.0f);
        for (uint32_t keep :
             {0u, 1u, 2u, 4u, 8u, 16u, 32u, 33u, 64u, rowLen / 3, rowLen / 2 + 1, rowLen - 1, rowLen, rowLen + 3})
          ASSERT_NO_FATAL_FAILURE(expectRowTopK(row.data(), spcclFloat32, row, keep, "dist " + std::to_string(dist)));
      }
  }
}

// `repeats` rows of each kind, in all three input types, against the rule:
// normal; ties; mostly zeros; one value; wide exponents; about `keep`
// infinities (the fast path or, past keep, all of them).
template <class Rng>
void expectShapedRows(Rng& g, uint32_t rowLen, uint32_t keep, int repeats) {
  for (spcclDataType_t type : kAllFloatTypes)
    for (int dist = 0; dist < 6; ++dist)
      for (int r = 0; r < repeats; ++r) {
        std::vector<float> row = dist == 1 ? randomTies(g, rowLen) : randomNormal(g, rowLen);
        if (dist == 2)
          for (float& x : row) x = g() % 9 == 0 ? x : 0.0f;
        if (dist == 3) row.assign(rowLen, r % 2 ? -1.5f : 0.0f);
        if (dist == 4)
          for (float& x : row) x = std::ldexp(x, static_cast<int>(g() % 60) - 30);
        if (dist == 5)
          for (uint32_t j = 0; j + 1 < keep + r % 3; ++j) row[g() % rowLen] = (g() & 1) ? kInf : -kInf;
        const TypedInput in(row, type);
        ASSERT_NO_FATAL_FAILURE(expectRowTopK(
            in.data(), type, in.decoded, keep,
            std::string(typeName(type)) + " rowLen " + std::to_string(rowLen) + " dist " + std::to_string(dist)));
      }
}

// The shapes DCT-MP uses (blocks of a multiple of 4 elements: fp32 keys and
// floor four at a time), rows off that (rowLen % 4 != 0: the candidates'
// scalar tail; blocks of unequal length), keeps past the counted candidates
// (the histogram, with a cut bin of a few keys or, for ties and zeros, of
// many), in all three input types, many rows each (the counted path's
// no-tie shortcut must fall back whenever a tie sits at the cut).
TEST(SelectRowTopK, FastPathsMatchTheRule) {
  for (host::HostSimd simd : availableHostSimd()) {
    SCOPED_TRACE(host::hostSimdName(simd));
    const PinnedHostSimd pinned(simd);
    auto g = rng(42);
    const std::pair<uint32_t, uint32_t> shapes[] = {{64, 4},    {128, 8},   {130, 8},   {128, 12},  {256, 16},
                                                    {256, 100}, {1024, 64}, {1000, 60}, {2048, 128}};
    for (const auto& [rowLen, keep] : shapes)
      ASSERT_NO_FATAL_FAILURE(expectShapedRows(g, rowLen, keep, rowLen <= 256 ? 24 : 6));
  }
}

// The AVX-512 and AVX2 paths' shapes (rows of a multiple of 16 or 8; keep <=
// 16, whose floor is the keep-th largest of the lane maxima of one, two or
// four runs of the row, or a multiple of the lanes over whole runs), with
// candidates ranked in vectors (<= 16, ties falling back to the rule),
// counted (17-64) or binned (> 64), on every level this CPU has: the
// baseline must give the same rows.
TEST(SelectRowTopK, LanePathsMatchTheRule) {
  for (host::HostSimd simd : {host::HostSimd::kAvx2, host::HostSimd::kAvx512})
    if (!host::hostSimdAvailable(simd))
      std::printf("note: this CPU has no %s: that path is not checked here\n", host::hostSimdName(simd));
  for (host::HostSimd simd : availableHostSimd()) {
    SCOPED_TRACE(host::hostSimdName(simd));
    const PinnedHostSimd pinned(simd);
    auto g = rng(43);
    for (uint32_t rowLen : {8u, 16u, 24u, 32u, 40u, 48u, 64u, 128u, 256u, 768u})
      for (uint32_t keep : {1u, 2u, 3u, 5u, 7u, 8u, 11u, 15u, 16u, 32u, 48u, 96u})
        if (keep < rowLen) {
          ASSERT_NO_FATAL_FAILURE(expectShapedRows(g, rowLen, keep, rowLen <= 128 ? 6 : 2));
        }
  }
}

TEST(HostSimd, WidestByDefaultAndPinnable) {
  using host::HostSimd;
  EXPECT_TRUE(host::hostSimdAvailable(HostSimd::kBaseline));
  // AVX-512 implies AVX2 here (rowTopK16's rows fall back to rowTopK8's).
  EXPECT_TRUE(!host::hostSimdAvailable(HostSimd::kAvx512) || host::hostSimdAvailable(HostSimd::kAvx2));
  const HostSimd widest = availableHostSimd().back();
  EXPECT_EQ(host::widestHostSimd(), widest);
  EXPECT_EQ(host::hostSimd(), widest);
  for (HostSimd simd : {HostSimd::kBaseline, HostSimd::kAvx2, HostSimd::kAvx512}) {
    EXPECT_TRUE(host::setHostSimd(HostSimd::kBaseline));
    // Pinning a level this CPU lacks is refused and changes nothing.
    EXPECT_EQ(host::setHostSimd(simd), host::hostSimdAvailable(simd)) << host::hostSimdName(simd);
    EXPECT_EQ(host::hostSimd(), host::hostSimdAvailable(simd) ? simd : HostSimd::kBaseline);
  }
  host::setHostSimd(widest);
  EXPECT_STREQ(host::hostSimdName(HostSimd::kAvx512), "avx512");
  EXPECT_STREQ(host::hostSimdName(HostSimd::kAvx2), "avx2");
  EXPECT_STREQ(host::hostSimdName(HostSimd::kBaseline), "baseline");
}

// ---------------------------------------------------------------- conversions and accumulation

TEST(HostConversions, LoadAndStoreFloatsMatchReference) {
  auto g = rng(40);
  std::vector<float> values(20000);
  for (float& x : values) x = floatOf(static_cast<uint32_t>(g()));
  for (spcclDataType_t t : kAllFloatTypes) {
    const TypedInput in(values, t);
    std::vector<float> loaded(values.size());
    host::loadFloats(in.data(), t, values.size(), loaded.data());
    for (size_t i = 0; i < values.size(); ++i) ASSERT_TRUE(sameFloat(loaded[i], in.decoded[i])) << typeName(t) << i;

    std::vector<unsigned char> stored(values.size() * 4);
    host::storeFloats(values.data(), values.size(), t, stored.data());
    for (size_t i = 0; i < values.size(); ++i)
      ASSERT_TRUE(sameFloat(decodeWire(stored, i, static_cast<core::ValueType>(t)),
                            refRoundIeee(values[i], static_cast<core::ValueType>(t))))
          << typeName(t) << " " << values[i];
  }
  // In place (fp32 to itself) is a no-op.
  std::vector<float> same = values;
  host::storeFloats(same.data(), same.size(), spcclFloat32, same.data());
  for (size_t i = 0; i < same.size(); ++i) ASSERT_EQ(bitsOf(same[i]), bitsOf(values[i]));
}

// The device selectPack's workspace layout (kernels/cuda/select_pack_layout.h;
// plain arithmetic, checked here since CI has no GPU): a workspace sized for
// t tiles holds at least t, never more than fit, and its regions never
// overlap. A pass lays it out from the workspace's size alone, so passes of
// different sizes on one workspace put each region in the same place
// (select_pack.cu).
TEST(SelectPackLayout, AWorkspaceHoldsTheTilesItWasSizedFor) {
  using namespace spccl::cuda;
  for (uint64_t t = 1; t < 70000; t = t < 300 ? t + 1 : t * 5 / 4) {
    const size_t bytes = selectPackLayoutForTiles(t).total;
    for (size_t extra : {size_t{0}, size_t{1}, size_t{255}, size_t{4096}}) {
      const SelectPackLayout l = selectPackLayoutForBytes(bytes + extra);
      ASSERT_GE(l.tiles, t) << "bytes " << bytes + extra;
      ASSERT_LE(l.total, bytes + extra) << "tiles " << l.tiles;
      ASSERT_GT(selectPackLayoutForTiles(l.tiles + 1).total, bytes + extra) << "as many tiles as fit";
      EXPECT_GE(l.status, kSelectStateBytes);
      EXPECT_GE(l.agg, l.status + l.tiles * kSelectTileFlagBytes);
      EXPECT_GE(l.incl, l.agg + l.tiles * kSelectTileCountsBytes);
      EXPECT_GE(l.total, l.incl + l.tiles * kSelectTileCountsBytes);
    }
  }
  EXPECT_EQ(selectPackLayoutForBytes(0).tiles, 0u);
  EXPECT_EQ(selectPackLayoutForBytes(selectPackLayoutForTiles(1).total - 1).tiles, 0u);
}

}  // namespace
}  // namespace spccl::test
