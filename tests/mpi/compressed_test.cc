// Compressed allreduce: identical results on
// every rank, the selection rule against an independent reference, NaN/Inf
// propagation, bytes on the wire against the algorithms' cost, and the
// threshold re-estimation schedule.
#include <cstddef>
#include <cstring>
#include <limits>
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr float kDensity = 0.01f;
constexpr size_t kOddCount = 100003;  // prime: not divisible by 2, 3 or 4; above the default minimum

const int kCompressedAlgorithms[] = {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT};
const spcclDataType_t kWireTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3};

using AlgoWireParam = std::tuple<int, spcclDataType_t>;
std::string algoWireName(const testing::TestParamInfo<AlgoWireParam>& p) {
  return std::string(algorithmName(std::get<0>(p.param))) + "_" + typeName(std::get<1>(p.param));
}

size_t countNonFinite(const std::vector<float>& v) {
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); }));
}

// ---------- bitwise-identical results on every rank ----------

using IdenticalParam = std::tuple<int, spcclDataType_t, bool, spcclRedOp_t>;

class IdenticalTest : public MpiTest, public testing::WithParamInterface<IdenticalParam> {};

TEST_P(IdenticalTest, SameBitsOnEveryRank) {
  const auto [algorithm, wire, inPlace, op] = GetParam();
  const size_t n = kOddCount;
  // Interval 2: calls 0 and 2 estimate tau, call 1 applies the stored one.
  const spcclCompressConfig_t config = makeConfig(kDensity, algorithm, wire, 2);
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));

  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const std::vector<float> in = gaussian(n, seedFor(31, rank_, static_cast<uint64_t>(call)));
    std::vector<float> out;
    spcclResult_t r;
    if (inPlace) {
      out = in;
      r = spcclAllReduceCompressed(out.data(), out.data(), op, c.get(), nullptr);
    } else {
      out.assign(n, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> send = in;
      r = spcclAllReduceCompressed(send.data(), out.data(), op, c.get(), nullptr);
      EXPECT_TRUE(send == in) << "the send buffer of an out-of-place call was modified";
    }
    ASSERT_TRUE(okOnAllRanks(r, comm_.get(), "spcclAllReduceCompressed"));
    EXPECT_TRUE(identicalOnAllRanks(out.data(), n, sizeof(float)));
    EXPECT_EQ(countNonFinite(out), 0u);
    EXPECT_GE(static_cast<size_t>(std::count_if(out.begin(), out.end(), [](float x) { return x != 0.0f; })),
              selectionSize(n, kDensity) / 2)
        << "output is (nearly) empty";
  }
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.calls, 3u);
  EXPECT_EQ(s.compressedCalls, 3u) << "density 0.01 on " << n << " floats must be compressed";
  if (algorithm == SPCCL_ALGO_AUTO) {
    EXPECT_TRUE(s.lastAlgorithm == SPCCL_ALGO_ALLGATHER || s.lastAlgorithm == SPCCL_ALGO_SPLIT)
        << "auto took " << algorithmName(s.lastAlgorithm);
  } else {
    EXPECT_EQ(s.lastAlgorithm, algorithm);
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithmsWireTypes, IdenticalTest,
                         testing::Combine(testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::ValuesIn(kWireTypes), testing::Bool(),
                                          testing::Values(spcclSum, spcclAvg)),
                         [](const testing::TestParamInfo<IdenticalParam>& p) {
                           return std::string(algorithmName(std::get<0>(p.param))) + "_" +
                                  typeName(std::get<1>(p.param)) +
                                  (std::get<2>(p.param) ? "_inplace_" : "_outofplace_") + opName(std::get<3>(p.param));
                         });

// Density 0.5: auto may take the dense algorithm (v = send + residual
// through MPI_Allreduce); split's owners send their ranges dense.
class HighDensityIdenticalTest : public MpiTest, public testing::WithParamInterface<AlgoWireParam> {};

TEST_P(HighDensityIdenticalTest, SameBitsOnEveryRank) {
  const auto [algorithm, wire] = GetParam();
  const size_t n = kOddCount;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(0.5f, algorithm, wire), c));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const std::vector<float> in = gaussian(n, seedFor(33, rank_, static_cast<uint64_t>(call)));
    std::vector<float> out(n);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                             "spcclAllReduceCompressed"));
    EXPECT_TRUE(identicalOnAllRanks(out.data(), n, sizeof(float)));
  }
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  if (algorithm != SPCCL_ALGO_AUTO) {
    EXPECT_EQ(s.lastAlgorithm, algorithm);
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, HighDensityIdenticalTest,
                         testing::Combine(testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::Values(spcclFloat32, spcclFloat16)),
                         algoWireName);

// fp16 and bf16 user buffers (wire of the same type).
using HalfBufferParam = std::tuple<int, spcclDataType_t>;
class HalfBufferIdenticalTest : public MpiTest, public testing::WithParamInterface<HalfBufferParam> {};

TEST_P(HalfBufferIdenticalTest, SameBitsOnEveryRank) {
  const auto [algorithm, type] = GetParam();
  const size_t n = kOddCount;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, type, makeConfig(kDensity, algorithm, type), c));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const std::vector<float> g = gaussian(n, seedFor(32, rank_, static_cast<uint64_t>(call)));
    std::vector<uint16_t> in(n), out(n, 0x7E00u);
    for (size_t i = 0; i < n; ++i) in[i] = type == spcclFloat16 ? floatToHalf(g[i]) : floatToBf16(g[i]);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                             "spcclAllReduceCompressed"));
    EXPECT_TRUE(identicalOnAllRanks(out.data(), n, sizeof(uint16_t)));
  }
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.compressedCalls, 2u);
}

INSTANTIATE_TEST_SUITE_P(HalfBuffers, HalfBufferIdenticalTest,
                         testing::Combine(testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::Values(spcclFloat16, spcclBfloat16)),
                         [](const testing::TestParamInfo<HalfBufferParam>& p) {
                           return std::string(algorithmName(std::get<0>(p.param))) + "_" +
                                  typeName(std::get<1>(p.param));
                         });

// ---------- the selection rule against a reference ----------
//
// First call, residual zero, so v = input on every rank. Each rank's
// contribution is round_wire(v_i) for |v_i| >= tau_r (tau_r the k-th largest
// |v| of rank r, k = ceil(d*count)); the output is those contributions summed
// in rank order 0..P-1 from 0.0f (divided by P for avg). The allgather
// algorithm does exactly that, bitwise. Split sums the received pairs in rank
// order at the range owner, so with fp32 values it is the same bits too. With
// fp16/bf16 the specification allows two designs for split's second stage: travel in
// fp32 (output == reference) or re-encode the owner's sum in the wire type and
// put that rounding into the owner's residual (output == round_wire(reference)).
// Either is accepted, bitwise, but one of them for the whole buffer. The
// residual is checked bitwise where this rank is the only one that can touch
// it (v outside S, the wire rounding error inside S; with split+half only at
// indices no rank selected), and per element everywhere:
// out + sum of residuals == sum of inputs. Inputs have distinct magnitudes on
// each rank, so |S_r| == k exactly. Density 0.3 makes split send the owners'
// ranges dense (without re-selection); at 0.98 they go dense after the
// re-selection has dropped a few sums.
// Split re-selects by default (SPCCL_SPLIT_RESELECT=1, Ok-Topk): in each
// owner's range only the keep = ceil(k/P) largest finite sums of the
// reference are sent (ties: lower index); the others are 0 in the output and
// sit in the owner's residual, added to what the owner's own selection left
// there (checked bitwise for fp32).

class ReferenceCheck : public MpiTest {
 protected:
  void checkFirstCall(int algorithm, spcclDataType_t wire, spcclRedOp_t op, float density, size_t n);
};

void ReferenceCheck::checkFirstCall(int algorithm, spcclDataType_t wire, spcclRedOp_t op, float density, size_t n) {
  const size_t k = selectionSize(n, density);
  const size_t P = static_cast<size_t>(size_);
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(density, algorithm, wire, 1, 1), c));

  const std::vector<float> in = distinctMagnitudes(n, seedFor(41, rank_), 0x1p-16f);
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), op, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  std::vector<float> res(n);
  ASSERT_TRUE(residual(c.get(), res));

  // Reference from every rank's input.
  const std::vector<float> all = allgatherFloats(in);
  std::vector<float> ref(n, 0.0f);
  std::vector<double> absSum(n, 0.0), inSum(n, 0.0);
  std::vector<uint8_t> mine, anySelected(n, 0);
  int myScale = 0;  // fp8: the scale this rank's values went out with
  for (size_t r = 0; r < P; ++r) {
    const std::vector<float> v(all.begin() + static_cast<std::ptrdiff_t>(r * n),
                               all.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
    const float tau = kthLargestMagnitude(v, k);
    const int scale = wire == spcclFloat8e4m3 ? fp8TauScale(tau) : 0;
    if (r == static_cast<size_t>(rank_)) myScale = scale;
    std::vector<uint8_t> sel = selectionMask(v, tau);
    for (size_t i = 0; i < n; ++i) {
      inSum[i] += v[i];
      absSum[i] += std::fabs(v[i]);
      if (!sel[i]) continue;
      ref[i] += roundToWire(v[i], wire, scale);
      anySelected[i] = 1;
    }
    if (r == static_cast<size_t>(rank_)) {
      EXPECT_EQ(s.lastSelected, k);
      EXPECT_TRUE(sameBits(s.lastThreshold, tau))
          << "lastThreshold " << s.lastThreshold << ", exact k-th largest |v| " << tau;
      mine = std::move(sel);
    }
  }

  const spcclCompressConfig_t cfg = makeConfig(density, algorithm, wire, 1, 1);
  const std::vector<uint8_t> dropped = splitDropped(ref, P, splitKeepPerRange(cfg, k, P));
  const size_t myBegin = splitRangeBegin(n, P, static_cast<size_t>(rank_));
  const size_t myEnd = splitRangeBegin(n, P, static_cast<size_t>(rank_) + 1);
  for (size_t i = 0; i < n; ++i) {
    if (!dropped[i]) continue;
    if (i >= myBegin && i < myEnd) {  // my range: the sum I dropped joins my residual
      const float left = mine[i] ? in[i] - roundToWire(in[i], wire) : in[i];
      if (wire == spcclFloat32 && !sameBits(res[i], left + ref[i]))
        ADD_FAILURE() << "owner's residual at dropped index " << i << ": got " << res[i] << ", expected "
                      << left + ref[i];
    }
    ref[i] = 0.0f;
  }
  const bool ownerMayRound = algorithm == SPCCL_ALGO_SPLIT && wire != spcclFloat32;
  // fp8: split's owner of [b, e) re-encodes its sums at the scale of their largest finite |sum|.
  std::vector<int> ownerScale(n, 0);
  if (ownerMayRound && wire == spcclFloat8e4m3) {
    for (size_t o = 0; o < P; ++o) {
      const size_t b = splitRangeBegin(n, P, o), e = splitRangeBegin(n, P, o + 1);
      float most = 0.0f;
      for (size_t i = b; i < e; ++i)
        if (std::isfinite(ref[i])) most = std::max(most, std::fabs(ref[i]));
      for (size_t i = b; i < e; ++i) ownerScale[i] = fp8MaxScale(most);
    }
  }
  const float p = static_cast<float>(size_);
  auto finish = [&](float sum) { return op == spcclAvg ? sum / p : sum; };
  size_t badExact = 0, firstExact = n, badRounded = 0, firstRounded = n, badRes = 0, firstRes = n;
  for (size_t i = 0; i < n; ++i) {
    if (!sameBits(out[i], finish(ref[i])) && badExact++ == 0) firstExact = i;
    if (!sameBits(out[i], finish(roundToWire(ref[i], wire, ownerScale[i]))) && badRounded++ == 0) firstRounded = i;
    const bool resOk = ownerMayRound ? anySelected[i] || sameBits(res[i], in[i])
                       : dropped[i] && i >= myBegin && i < myEnd  // checked above
                           ? true
                           : sameBits(res[i], mine[i] ? in[i] - roundToWire(in[i], wire, myScale) : in[i]);
    if (!resOk && badRes++ == 0) firstRes = i;
  }
  if (ownerMayRound) {
    EXPECT_TRUE(badExact == 0 || badRounded == 0)
        << "split with " << typeName(wire) << " values matches neither the reference (first difference at "
        << firstExact << ": got " << out[firstExact] << ", reference " << finish(ref[firstExact])
        << ") nor the reference rounded to the wire type (first difference at " << firstRounded << ": "
        << (firstRounded < n ? finish(roundToWire(ref[firstRounded], wire, ownerScale[firstRounded])) : 0.0f) << ")";
  } else {
    EXPECT_EQ(badExact, 0u) << "first difference at index " << firstExact << ": got "
                            << (firstExact < n ? out[firstExact] : 0.0f) << ", reference "
                            << (firstExact < n ? finish(ref[firstExact]) : 0.0f);
  }
  EXPECT_EQ(badRes, 0u) << "residual differs from v outside S / the rounding error inside S; first at index "
                        << firstRes << ": got " << (firstRes < n ? res[firstRes] : 0.0f) << ", input "
                        << (firstRes < n ? in[firstRes] : 0.0f) << ", selected here "
                        << (firstRes < n ? int{mine[firstRes]} : -1);

  // Per element: out (as a sum) + sum over ranks of residuals == sum of inputs.
  const std::vector<float> allRes = allgatherFloats(res);
  size_t badCons = 0, firstCons = n;
  for (size_t i = 0; i < n; ++i) {
    double total = static_cast<double>(out[i]) * (op == spcclAvg ? static_cast<double>(P) : 1.0);
    for (size_t r = 0; r < P; ++r) total += allRes[r * n + i];
    if (std::fabs(total - inSum[i]) > static_cast<double>(P) * 0x1p-22 * absSum[i] && badCons++ == 0) {
      firstCons = i;
    }
  }
  EXPECT_EQ(badCons, 0u) << "out + sum of residuals != sum of inputs; first at index " << firstCons;
}

using ReferenceParam = std::tuple<int, spcclDataType_t, spcclRedOp_t, float>;
class ReferenceTest : public ReferenceCheck, public testing::WithParamInterface<ReferenceParam> {};

TEST_P(ReferenceTest, FirstCallFollowsSelectionRule) {
  const auto [algorithm, wire, op, density] = GetParam();
  checkFirstCall(algorithm, wire, op, density, kOddCount);
}

INSTANTIATE_TEST_SUITE_P(AllgatherSplitAllWireTypes, ReferenceTest,
                         testing::Combine(testing::ValuesIn(kCompressedAlgorithms), testing::ValuesIn(kWireTypes),
                                          testing::Values(spcclSum, spcclAvg), testing::Values(kDensity, 0.3f, 0.98f)),
                         [](const testing::TestParamInfo<ReferenceParam>& p) {
                           return std::string(algorithmName(std::get<0>(p.param))) + "_" +
                                  typeName(std::get<1>(p.param)) + "_" + opName(std::get<2>(p.param)) +
                                  (std::get<3>(p.param) == kDensity ? "_d001"
                                   : std::get<3>(p.param) == 0.3f   ? "_d03"
                                                                    : "_d098");
                         });

// Densities that are not binary fractions keep their decimal share: the
// float 0.1f is 0.100000001490116..., and ceil(0.1f x 1000) read literally
// would be 101 (selectionSize reads the product as ALGORITHMS.md says).
TEST_F(ReferenceCheck, DecimalDensitiesKeepTheirDecimalShare) {
  ASSERT_EQ(selectionSize(1000, 0.1f), 100u) << "test set-up";
  for (int algorithm : kCompressedAlgorithms)
    for (const auto& [density, n] : {std::pair{0.1f, size_t{1000}}, std::pair{0.3f, size_t{1000}},
                                     std::pair{0.07f, size_t{100}}, std::pair{0.01f, size_t{30000}}}) {
      SCOPED_TRACE(std::string(algorithmName(algorithm)) + " density " + std::to_string(density) + " n " +
                   std::to_string(n));
      checkFirstCall(algorithm, spcclFloat32, spcclSum, density, n);
      if (HasFatalFailure()) return;
    }
}

// Counts smaller than, equal to and just above the rank count leave some of
// split's ranges empty or one element long.
using SmallCountParam = std::tuple<int, size_t>;
class SmallCountTest : public ReferenceCheck, public testing::WithParamInterface<SmallCountParam> {};

TEST_P(SmallCountTest, FirstCallFollowsSelectionRule) {
  const auto [algorithm, count] = GetParam();
  checkFirstCall(algorithm, spcclFloat32, spcclSum, kDensity, count);
}

INSTANTIATE_TEST_SUITE_P(AllgatherSplit, SmallCountTest,
                         testing::Combine(testing::ValuesIn(kCompressedAlgorithms),
                                          testing::Values(size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5},
                                                          size_t{7}, size_t{1001})),
                         [](const testing::TestParamInfo<SmallCountParam>& p) {
                           return std::string(algorithmName(std::get<0>(p.param))) + "_count" +
                                  std::to_string(std::get<1>(p.param));
                         });

// ---------- NaN and Inf ----------

class NonFiniteTest : public MpiTest, public testing::WithParamInterface<AlgoWireParam> {
 protected:
  static constexpr size_t kCount = size_t{1} << 17;
  static constexpr size_t kNanIndex = 12345;  // set on rank 0
  static constexpr size_t kInfIndex = 98765;  // set on rank 1

  // One call at density 0.001 with NaN on rank 0 and +Inf on rank 1.
  void callWithNonFinite(CompressorPtr& c, std::vector<float>& out) {
    const auto [algorithm, wire] = GetParam();
    ASSERT_TRUE(createCompressor(kCount, spcclFloat32, makeConfig(0.001f, algorithm, wire), c));
    std::vector<float> in = gaussian(kCount, seedFor(51, rank_));
    if (rank_ == 0) in[kNanIndex] = std::numeric_limits<float>::quiet_NaN();
    if (rank_ == 1) in[kInfIndex] = std::numeric_limits<float>::infinity();
    out.assign(kCount, 0.0f);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                             "spcclAllReduceCompressed"));
  }
};

TEST_P(NonFiniteTest, NanAndInfReachEveryRank) {
  CompressorPtr c;
  std::vector<float> out;
  ASSERT_NO_FATAL_FAILURE(callWithNonFinite(c, out));
  EXPECT_TRUE(std::isnan(out[kNanIndex])) << "got " << out[kNanIndex];
  EXPECT_EQ(out[kInfIndex], std::numeric_limits<float>::infinity());
  EXPECT_EQ(countNonFinite(out), 2u) << "non-finite values beyond the two injected ones";
  EXPECT_TRUE(identicalOnAllRanks(out.data(), out.size(), sizeof(float)));
}

// A NaN or Inf that was sent is inside S: its residual is 0 (the specification's rule),
// not NaN (e.g. Inf - Inf from "residual = v - sent"), which would make every
// later output NaN at that index although the inputs are finite again (mixed
// precision skips the overflowed step and carries on).
TEST_P(NonFiniteTest, NonFiniteDoesNotPoisonLaterCalls) {
  CompressorPtr c;
  std::vector<float> out;
  ASSERT_NO_FATAL_FAILURE(callWithNonFinite(c, out));
  std::vector<float> res(kCount);
  ASSERT_TRUE(residual(c.get(), res));
  EXPECT_EQ(countNonFinite(res), 0u) << "residual at the NaN index " << res[kNanIndex] << ", at the Inf index "
                                     << res[kInfIndex];

  const std::vector<float> in = gaussian(kCount, seedFor(52, rank_));
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed (second call, finite input)"));
  EXPECT_EQ(countNonFinite(out), 0u) << "second call: out at the NaN index " << out[kNanIndex] << ", at the Inf index "
                                     << out[kInfIndex];
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithmsWireTypes, NonFiniteTest,
                         testing::Combine(testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                                          testing::ValuesIn(kWireTypes)),
                         algoWireName);

// Overflowed mixed-precision steps make whole buffers non-finite: far more
// NaN/Inf than the capacity, all of which must still arrive. Rank 0 has +Inf
// at every even index, rank 1 NaN at every index = 1 (mod 4).
TEST_P(NonFiniteTest, ManyNonFiniteBeyondCapacity) {
  const auto [algorithm, wire] = GetParam();
  const size_t n = kCount;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(0.001f, algorithm, wire), c));
  std::vector<float> in = gaussian(n, seedFor(53, rank_));
  for (size_t i = 0; i < n; ++i) {
    if (rank_ == 0 && i % 2 == 0) in[i] = std::numeric_limits<float>::infinity();
    if (rank_ == 1 && i % 4 == 1) in[i] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> out(n);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i) {
    const bool ok = i % 2 == 0   ? out[i] == std::numeric_limits<float>::infinity()
                    : i % 4 == 1 ? std::isnan(out[i])
                                 : std::isfinite(out[i]);
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << "first at index " << first << ": " << (first < n ? out[first] : 0.0f);
  EXPECT_TRUE(identicalOnAllRanks(out.data(), n, sizeof(float)));
  std::vector<float> res(n);
  ASSERT_TRUE(residual(c.get(), res));
  EXPECT_EQ(countNonFinite(res), 0u);
}

// Finite inputs beyond the fp16 range (max 65504). The rule: "Any rounding an
// algorithm adds later (e.g. re-encoding an owner's reduced range in fp16)
// must also return to a residual, or that stage must travel in fp32:
// conservation holds to 1e-5 for every value type." Overflow to Inf is the
// extreme case of that rounding, so with finite inputs the output must stay
// finite and out + sum of residuals == sum of inputs per element:
// - index 1000: 1e5 on rank 0 alone (one rank's value overflows the wire);
// - index 2000: 40000 on every rank (each fits, the sum does not: an owner
//   re-encoding the reduced range in fp16 would overflow).
class HalfRangeTest : public MpiTest, public testing::WithParamInterface<int> {};

TEST_P(HalfRangeTest, FiniteInputsBeyondFp16RangeAreConserved) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 17, single = 1000, summed = 2000;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(kDensity, algorithm, spcclFloat16), c));
  std::vector<float> in = gaussian(n, seedFor(54, rank_));
  if (rank_ == 0) in[single] = 1e5f;
  in[summed] = 40000.0f;
  std::vector<float> out(n);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  std::vector<float> res(n);
  ASSERT_TRUE(residual(c.get(), res));
  const std::vector<float> allIn = allgatherFloats(in), allRes = allgatherFloats(res);
  for (size_t i : {single, summed}) {
    double inSum = 0.0, total = out[i];
    for (size_t r = 0; r < static_cast<size_t>(size_); ++r) {
      inSum += allIn[r * n + i];
      total += allRes[r * n + i];
    }
    EXPECT_TRUE(std::isfinite(out[i])) << "index " << i << ": output " << out[i] << " for finite inputs summing to "
                                       << inSum << " (residual here " << res[i] << ")";
    EXPECT_NEAR(total, inSum, 1e-5 * std::fabs(inSum))
        << "index " << i << ": out + sum of residuals vs sum of inputs (out " << out[i] << ")";
  }
  EXPECT_EQ(countNonFinite(res), 0u) << "non-finite residual entries";
}

INSTANTIATE_TEST_SUITE_P(AllgatherSplit, HalfRangeTest, testing::ValuesIn(kCompressedAlgorithms),
                         [](const testing::TestParamInfo<int>& p) { return std::string(algorithmName(p.param)); });

// ---------- bytes on the wire ----------
//
// Cost model restated from docs/ALGORITHMS.md (headers are allowed some slack, so
// that a header's layout can change without this test; H bounds one message's header and count
// exchange):
// - pair = 4 (uint32 index) + w bytes (w = 4 fp32, 2 fp16/bf16, 1 fp8).
// - allgather: this rank's stream (nnz pairs + header) goes to each of the
//   P-1 others: (P-1)*nnz*pair <= bytesSent <= (P-1)*(nnz*pair + 256).
// - split: phase 1 sends each pair to the owner of its index range (pairs in
//   the own range stay); phase 2 sends the owner's reduced range, m = indices
//   of the range selected by any rank, to the P-1 others as pairs or dense,
//   whichever is smaller, in the wire type or fp32 (w <= w2 <= 4):
//     lower: (nnz - own pairs)*pair + (P-1)*min(m*(4+w), len*w)
//     upper: (nnz - own pairs)*pair + (P-1)*(min(m*8, len*4)) + 2*(P-1)*H
//   With re-selection (SPCCL_SPLIT_RESELECT, default 1) m is at most
//   keep = ceil(k/P).
//   The test does not know the exact range boundaries (floor(r*count/P) or
//   ceil-sized chunks differ by fewer than P indices), so the own range is
//   taken shrunk by P on each side where that loosens the bound and grown by
//   P where that does.
// - denseBytes is exact: (2*(P-1)*count*sizeof(float))/P per call.

class BytesTest : public MpiTest, public testing::WithParamInterface<AlgoWireParam> {};

TEST_P(BytesTest, BytesSentMatchesCostModel) {
  const auto [algorithm, wire] = GetParam();
  const size_t n = size_t{1} << 20;
  const size_t P = static_cast<size_t>(size_);
  const size_t me = static_cast<size_t>(rank_);
  const size_t k = selectionSize(n, kDensity);
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(kDensity, algorithm, wire), c));
  const std::vector<float> in = gaussian(n, seedFor(61, rank_));
  std::vector<float> out(n);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));

  EXPECT_EQ(s.calls, 1u);
  EXPECT_EQ(s.compressedCalls, 1u);
  EXPECT_EQ(s.lastAlgorithm, algorithm);
  const uint64_t dense = (2 * (P - 1) * n * sizeof(float)) / P;
  EXPECT_LE(s.denseBytes > dense ? s.denseBytes - dense : dense - s.denseBytes, 1u)
      << "denseBytes " << s.denseBytes << ", expected 2(P-1)/P*count*4 = " << dense;

  const uint64_t nnz = s.lastSelected;
  EXPECT_GE(nnz, k);
  EXPECT_LE(nnz, 2 * k);
  const std::vector<uint8_t> sel = selectionMask(in, s.lastThreshold);
  EXPECT_EQ(static_cast<uint64_t>(std::count(sel.begin(), sel.end(), 1)), nnz)
      << "lastSelected disagrees with |input| >= lastThreshold";
  std::vector<uint8_t> any = sel;
  MPI_Allreduce(MPI_IN_PLACE, any.data(), static_cast<int>(n), MPI_UINT8_T, MPI_MAX, MPI_COMM_WORLD);

  const uint64_t w = wireValueBytes(wire);
  const uint64_t pair = 4 + w;
  uint64_t lo = 0, hi = 0;
  if (algorithm == SPCCL_ALGO_ALLGATHER) {
    lo = (P - 1) * nnz * pair;
    hi = (P - 1) * (nnz * pair + 256);
  } else {
    const uint64_t H = 512;
    const size_t begin = me * n / P, end = (me + 1) * n / P;
    const size_t innerBegin = std::min(begin + P, end), innerEnd = end >= begin + 2 * P ? end - P : innerBegin;
    const size_t outerBegin = begin >= P ? begin - P : 0, outerEnd = std::min(end + P, n);
    auto countIn = [](const std::vector<uint8_t>& m, size_t b, size_t e) {
      return static_cast<uint64_t>(
          std::count(m.begin() + static_cast<std::ptrdiff_t>(b), m.begin() + static_cast<std::ptrdiff_t>(e), 1));
    };
    const uint64_t ownMost = countIn(sel, outerBegin, outerEnd);
    const uint64_t ownLeast = countIn(sel, innerBegin, innerEnd);
    // Re-selection (the default) caps what an owner sends at keep pairs.
    const uint64_t keep = splitKeepPerRange(makeConfig(kDensity, algorithm, wire), k, P);
    auto capped = [keep](uint64_t m) { return keep > 0 ? std::min(m, keep) : m; };
    const uint64_t mLeast = capped(countIn(any, innerBegin, innerEnd)), lenLeast = innerEnd - innerBegin;
    const uint64_t mMost = capped(countIn(any, outerBegin, outerEnd)), lenMost = outerEnd - outerBegin;
    lo = (nnz - ownMost) * pair + (P - 1) * std::min(mLeast * pair, lenLeast * w);
    hi = (nnz - ownLeast) * pair + (P - 1) * std::min(mMost * 8, lenMost * 4) + 2 * (P - 1) * H;
  }
  EXPECT_GE(s.bytesSent, lo) << algorithmName(algorithm) << " nnz " << nnz;
  EXPECT_LE(s.bytesSent, hi) << algorithmName(algorithm) << " nnz " << nnz;
  // The point of it all: at density 0.01 the wire carries well under 1/10 of a dense allreduce.
  EXPECT_LT(static_cast<double>(s.bytesSent) / static_cast<double>(s.denseBytes), 0.1)
      << "bytesSent " << s.bytesSent << ", denseBytes " << s.denseBytes;
}

INSTANTIATE_TEST_SUITE_P(AllgatherSplitAllWireTypes, BytesTest,
                         testing::Combine(testing::ValuesIn(kCompressedAlgorithms), testing::ValuesIn(kWireTypes)),
                         algoWireName);

// ---------- config layout versions ----------

// A program built against the version-1 header (no splitReselect) passes a
// shorter struct: the library reads it up to its own size and gives the newer
// fields their env defaults. The bytes after it are NaN here, so reading them
// would fail the config check.
TEST_F(MpiTest, Version1ConfigIsReadUpToItsSize) {
  struct V1 {
    size_t size;
    unsigned int version;
    float density;
    int thresholdInterval, errorFeedback, algorithm;
    spcclDataType_t wireValueType;
    float capacityFactor;
  };
  constexpr size_t kV1Bytes = offsetof(V1, capacityFactor) + sizeof(float);
  static_assert(kV1Bytes == offsetof(spcclCompressConfig_t, splitReselect), "version 1 is the prefix");
  const V1 v1{sizeof(V1), 1, kDensity, 1, 1, SPCCL_ALGO_SPLIT, spcclFloat32, 2.0f};
  alignas(spcclCompressConfig_t) unsigned char buf[sizeof(spcclCompressConfig_t) + 16];
  std::memset(buf, 0xff, sizeof buf);
  std::memcpy(buf, &v1, kV1Bytes);
  const auto* config = reinterpret_cast<const spcclCompressConfig_t*>(buf);
  // What an older caller passes: the first `fields` bytes of cfg, labelled
  // with its size and version, and 0xff (NaN) after them.
  auto asOlderCaller = [&buf](spcclCompressConfig_t cfg, size_t fields, size_t size, unsigned version) {
    cfg.size = size;
    cfg.version = version;
    std::memset(buf, 0xff, sizeof buf);
    std::memcpy(buf, &cfg, fields);
  };
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(kOddCount, spcclFloat32, *config, c));
  const std::vector<float> in = gaussian(kOddCount, seedFor(71, rank_));
  std::vector<float> out(kOddCount);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.lastAlgorithm, SPCCL_ALGO_SPLIT);

  // Version 2 (before thresholdMinFraction): read up to splitReselect, the
  // NaN bytes after it unread.
  constexpr size_t kV2Bytes = offsetof(spcclCompressConfig_t, thresholdMinFraction);
  spcclCompressConfig_t whole = makeConfig(kDensity, SPCCL_ALGO_SPLIT, spcclFloat32);
  whole.splitReselect = 0.5f;
  asOlderCaller(whole, kV2Bytes, kV2Bytes, 2);
  CompressorPtr c2;
  ASSERT_TRUE(createCompressor(kOddCount, spcclFloat32, *config, c2));
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c2.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed, version 2"));

  // Version 3 (before thresholdWarmup): read up to thresholdMinFraction, as
  // a version-3 caller passes it (its sizeof, padding included: 48 bytes on
  // LP64, like version 4's); the 0xff bytes after its fields unread
  // (0xffffffff as thresholdWarmup fails the check). thresholdWarmup takes
  // its env default, 1, and the caller's thresholdMinFraction 0.25 holds.
  // Error feedback off: calls 0-2 on the same input estimate only on the
  // schedule (0) and the warm-up (1, 2); call 3's input is halved, so the
  // stored tau selects nothing and the low side re-estimates it.
  constexpr size_t kV3Bytes = offsetof(spcclCompressConfig_t, thresholdWarmup);
  whole = makeConfig(kDensity, SPCCL_ALGO_SPLIT, spcclFloat32, 1000, 0);
  whole.thresholdMinFraction = 0.25f;
  asOlderCaller(whole, kV3Bytes, alignUp(kV3Bytes, alignof(spcclCompressConfig_t)), 3);
  CompressorPtr c3;
  ASSERT_TRUE(createCompressor(kOddCount, spcclFloat32, *config, c3));
  std::vector<float> halved = in;
  for (float& x : halved) x *= 0.5f;
  for (int call = 0; call < 4; ++call) {
    ASSERT_TRUE(okOnAllRanks(
        spcclAllReduceCompressed(call < 3 ? in.data() : halved.data(), out.data(), spcclSum, c3.get(), nullptr),
        comm_.get(), "spcclAllReduceCompressed, version 3"));
    ASSERT_TRUE(stats(c3.get(), s));
    EXPECT_EQ(s.thresholdUpdates, static_cast<uint64_t>(call + 1))
        << "call " << call << ": a version-3 config gets the default warm-up (calls 1, 2) and keeps its "
        << "thresholdMinFraction (call 3)";
  }

  // Version 4 (current) must be whole.
  spcclCompressConfig_t current = makeConfig(kDensity, SPCCL_ALGO_SPLIT, spcclFloat32);
  current.size = kV3Bytes;
  spcclCompressor_t raw = nullptr;
  EXPECT_EQ(spcclCompressorCreate(comm_.get(), kOddCount, spcclFloat32, &current, &raw), spcclInvalidArgument);
  EXPECT_EQ(raw, nullptr);
  // A field out of range: refused, the message naming it.
  const spcclCompressConfig_t base = makeConfig(kDensity, SPCCL_ALGO_SPLIT, spcclFloat32);
  auto expectRefused = [&](const spcclCompressConfig_t& bad, const std::string& message) {
    raw = nullptr;
    EXPECT_EQ(spcclCompressorCreate(comm_.get(), kOddCount, spcclFloat32, &bad, &raw), spcclInvalidArgument) << message;
    EXPECT_NE(std::string(spcclGetLastError(nullptr)).find(message), std::string::npos) << spcclGetLastError(nullptr);
    EXPECT_EQ(raw, nullptr);
  };
  current = base;
  current.splitReselect = -1.0f;
  expectRefused(current, "config.splitReselect=-1");
  for (const float bad : {-0.25f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    current = base;
    current.thresholdMinFraction = bad;
    expectRefused(current, "config.thresholdMinFraction=");
  }
  for (const int bad : {-1, 2}) {
    current = base;
    current.thresholdWarmup = bad;
    expectRefused(current, "config.thresholdWarmup=" + std::to_string(bad));
  }
}

// spcclCompressConfigInit(&c), as a program writes it, passes that program's
// sizeof and version: the library writes only the fields of that layout, so
// a program built against an older header is not overrun by a library whose
// struct has grown. Here callers of versions 1 to 3: nothing past their
// bytes changes.
TEST(ConfigInit, WritesOnlyTheCallersLayout) {
  constexpr size_t kV1Bytes = offsetof(spcclCompressConfig_t, splitReselect);
  constexpr size_t kV2Bytes = offsetof(spcclCompressConfig_t, thresholdMinFraction);
  alignas(spcclCompressConfig_t) unsigned char buf[sizeof(spcclCompressConfig_t) + 16];
  auto* config = reinterpret_cast<spcclCompressConfig_t*>(buf);
  // Version 1 (up to capacityFactor), 2 (before thresholdMinFraction), 3 (before thresholdWarmup).
  const size_t layouts[] = {kV1Bytes, kV2Bytes, offsetof(spcclCompressConfig_t, thresholdWarmup)};
  for (unsigned version = 1; version <= 3; ++version) {
    SCOPED_TRACE("version " + std::to_string(version));
    const size_t bytes = layouts[version - 1];
    std::memset(buf, 0xab, sizeof buf);
    ASSERT_EQ(spcclCompressConfigInitVersion(config, bytes, version), spcclSuccess) << spcclGetLastError(nullptr);
    EXPECT_EQ(config->size, bytes);
    EXPECT_EQ(config->version, version);
    for (size_t i = bytes; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xab) << "byte " << i << " written";
  }
  // The macro: this header's size and version.
  spcclCompressConfig_t current;
  ASSERT_EQ(spcclCompressConfigInit(&current), spcclSuccess);
  EXPECT_EQ(current.size, sizeof(spcclCompressConfig_t));
  EXPECT_EQ(current.version, static_cast<unsigned>(SPCCL_COMPRESS_CONFIG_VERSION));
  // The function itself (by address), which programs built before the macro
  // call with a 40-byte version-2 struct, writes version 2's layout and not
  // a byte more.
  spcclResult_t (*init)(spcclCompressConfig_t*) = &spcclCompressConfigInit;
  std::memset(buf, 0xab, sizeof buf);
  ASSERT_EQ(init(config), spcclSuccess);
  EXPECT_EQ(config->size, kV2Bytes);
  EXPECT_EQ(config->version, 2u);
  for (size_t i = kV2Bytes; i < sizeof buf; ++i) ASSERT_EQ(buf[i], 0xab) << "byte " << i << " written";
  // A layout from a later header, or a size short of its version's fields.
  EXPECT_EQ(spcclCompressConfigInitVersion(config, sizeof buf, SPCCL_COMPRESS_CONFIG_VERSION + 1),
            spcclInvalidArgument);
  EXPECT_NE(std::string(spcclGetLastError(nullptr)).find("later spccl.h"), std::string::npos);
  EXPECT_EQ(spcclCompressConfigInitVersion(config, kV1Bytes - 4, 1), spcclInvalidArgument);
  EXPECT_EQ(spcclCompressConfigInitVersion(nullptr, sizeof buf, 1), spcclInvalidArgument);
}

// ---------- threshold re-estimation schedule ----------
//
// errorFeedback off so that v == input on every call: with error feedback the
// residual widens v's distribution and the stored tau would legitimately
// overflow the capacity between updates. Every call's input has magnitudes
// distributed alike (distinctMagnitudes: no ties, so the k-th largest is
// unambiguous), scaled by scale_c growing by 2^-10 per call: the stored tau
// then selects slightly more than k on calls between updates (about
// k + count*c/1024, well under 2k), and the test can tell the stored tau from
// a fresh one. Call 10 scales by 100.

class ScheduleTest : public MpiTest, public testing::WithParamInterface<int> {
 protected:
  // One compressed allreduce of `in` through c on every rank, then c's
  // statistics (use under ASSERT_NO_FATAL_FAILURE).
  void reduceAndRead(spcclCompressor* c, const std::vector<float>& in, spcclStats_t* s) {
    out_.resize(in.size());
    ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out_.data(), spcclSum, c, nullptr), comm_.get(),
                             "spcclAllReduceCompressed"));
    ASSERT_TRUE(stats(c, *s));
  }

 private:
  std::vector<float> out_;
};

TEST_P(ScheduleTest, ReEstimatesOnScheduleAndOnCapacityOverflow) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 17;
  const size_t k = selectionSize(n, kDensity);  // 1311
  const float capacity = 2.0f;
  spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 4, 0);
  config.capacityFactor = capacity;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));

  float storedTau = 0.0f;
  spcclStats_t commBefore{};
  ASSERT_EQ(spcclCommGetStats(comm_.get(), &commBefore), spcclSuccess);
  for (int call = 0; call <= 10; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<float> in = distinctMagnitudes(n, seedFor(71, rank_, static_cast<uint64_t>(call)), 0x1p-17f);
    const float scale = call < 10 ? 1.0f + static_cast<float>(call) * 0x1p-10f : 100.0f;
    for (float& x : in) x *= scale;
    spcclStats_t s;
    ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));

    const float exactTau = kthLargestMagnitude(in, k);
    // Scheduled at calls 0, 4, 8; call 10 (100x input) overflows the capacity
    // with the tau stored at call 8, so it re-estimates too.
    const bool update = call % 4 == 0 || call == 10;
    const uint64_t expectedUpdates = static_cast<uint64_t>(call / 4 + 1 + (call == 10 ? 1 : 0));
    if (call == 10) {
      const std::vector<uint8_t> stale = selectionMask(in, storedTau);
      ASSERT_TRUE(
          allRanks(static_cast<double>(std::count(stale.begin(), stale.end(), 1)) > capacity * static_cast<double>(k)))
          << "test set-up: the stored tau should overflow the capacity here";
    }
    EXPECT_EQ(s.thresholdUpdates, expectedUpdates);
    spcclStats_t commNow{};
    ASSERT_EQ(spcclCommGetStats(comm_.get(), &commNow), spcclSuccess);
    EXPECT_EQ(commNow.thresholdUpdates - commBefore.thresholdUpdates, expectedUpdates)
        << "the communicator's counters include its compressors' threshold updates";
    if (update) storedTau = exactTau;
    EXPECT_TRUE(sameBits(s.lastThreshold, storedTau))
        << "lastThreshold " << s.lastThreshold << ", expected " << storedTau
        << (update ? " (exact k-th largest |v|)" : " (tau stored at the last update)");
    const uint64_t expectedSelected = selectedCount(in, storedTau);
    EXPECT_EQ(s.lastSelected, expectedSelected);
    EXPECT_LE(static_cast<double>(s.lastSelected), capacity * static_cast<double>(k));
    if (update) {
      EXPECT_EQ(s.lastSelected, k);
    }
  }
}

// thresholdMinFraction 0.5: a stored tau that selects fewer than k/2 entries
// (the input shrank since tau was fitted) is re-estimated in that call, which
// then sends k entries, not thresholdInterval calls later. With the default 0
// (DCT's rule) the same inputs keep call 0's tau throughout: nothing is
// re-estimated, and each call sends what that tau selects.
// distinctMagnitudes' magnitudes are uniform over (0, n] x 2^-17 and k is 1%
// of n, so tau sits near 0.99 n and input scaled by s selects about
// n - 0.99 n / s with it: s = 0.998 about 0.8 k (not starved: k/2 = 655.5),
// s = 0.993 about 0.3 k (starved). Calls 3 and 4 keep s = 0.993: call 2's
// fresh tau fits them.
TEST_P(ScheduleTest, ReEstimatesInTheCallWhereAStoredTauSelectsTooFew) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 17;
  const size_t k = selectionSize(n, kDensity);  // 1311
  const size_t starved = (k + 1) / 2;           // fewer than ceil(k/2) starves at fraction 0.5: 2 x selected < k
  for (const float fraction : {0.5f, 0.0f}) {
    SCOPED_TRACE("thresholdMinFraction " + std::to_string(fraction));
    spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 1000, 0);
    config.thresholdMinFraction = fraction;
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));
    const float scales[] = {1.0f, 0.998f, 0.993f, 0.993f, 0.993f};
    float storedTau = 0.0f;
    for (int call = 0; call < 5; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<float> in = distinctMagnitudes(n, seedFor(73, rank_, static_cast<uint64_t>(call)), 0x1p-17f);
      for (float& x : in) x *= scales[call];
      const uint64_t withStored = selectedCount(in, storedTau);
      if (call == 1) {
        EXPECT_TRUE(allRanks(withStored >= starved && withStored < k))
            << "set-up: stale but not starved, " << withStored;
      }
      if (call == 2) {
        EXPECT_TRUE(allRanks(withStored < starved)) << "set-up: the stored tau should starve this call, " << withStored;
      }
      spcclStats_t s;
      ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));
      // Estimated at call 0 (the first) and, at fraction 0.5, in call 2 (its stored tau starved it).
      const bool update = call == 0 || (call == 2 && fraction > 0);
      if (update) storedTau = kthLargestMagnitude(in, k);
      EXPECT_EQ(s.thresholdUpdates, fraction > 0 && call >= 2 ? 2u : 1u);
      EXPECT_TRUE(sameBits(s.lastThreshold, storedTau))
          << "lastThreshold " << s.lastThreshold << ", expected " << storedTau;
      const uint64_t selected = selectedCount(in, storedTau);
      EXPECT_EQ(s.lastSelected, selected);
      if (update) {
        EXPECT_EQ(s.lastSelected, k);
      } else if (fraction > 0) {
        EXPECT_TRUE(allRanks(2 * selected >= k))
            << "set-up: a call that kept its stored tau was not starved, " << selected;
      } else if (call >= 2) {
        EXPECT_TRUE(allRanks(2 * selected < k)) << "the default keeps a tau that starves, " << selected;
      }
    }
  }
}

// The same rule with error feedback, where the residual makes the counts
// depend on the data: the test reads the residual before each call, forms
// v = input + residual as the library does (fp32), tracks the stored tau
// itself, and predicts every call's estimate from the rule: scheduled (call
// 0), or the stored tau selecting more than 2k or fewer than
// ceil(fraction x k) (either re-estimated in the call), for fractions 0 (the
// default: never on the low side), 0.25, 0.5 and 1. Inputs halve every
// call, so some calls starve.
TEST_P(ScheduleTest, StarvedTauWithErrorFeedbackFollowsTheRule) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 16;
  const size_t k = selectionSize(n, kDensity);
  for (const float fraction : {0.0f, 0.25f, 0.5f, 1.0f}) {
    SCOPED_TRACE("thresholdMinFraction " + std::to_string(fraction));
    const uint64_t below = static_cast<uint64_t>(std::ceil(fraction * static_cast<double>(k)));
    spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 1000, 1);
    config.thresholdMinFraction = fraction;
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));
    std::vector<float> res(n), v(n);
    float storedTau = 0.0f;
    uint64_t expectedUpdates = 0;
    uint64_t lowSide = 0;    // estimates the low-side rule caused
    uint64_t keptBelow = 0;  // calls that kept a non-zero tau selecting fewer than k/2
    for (int call = 0; call < 10; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<float> in = distinctMagnitudes(n, seedFor(83, rank_, static_cast<uint64_t>(call)), 0x1p-16f);
      for (float& x : in) x = std::ldexp(x, -call);
      ASSERT_TRUE(residual(c.get(), res));
      for (size_t i = 0; i < n; ++i) v[i] = in[i] + res[i];
      bool estimated = call == 0;
      if (estimated) storedTau = kthLargestMagnitude(v, k);
      uint64_t selected = selectedCount(v, storedTau);
      const bool high = !estimated && selected > 2 * k;
      const bool low = !estimated && storedTau != 0.0f && selected < below;
      if (high || low) {  // re-estimated in this call
        estimated = true;
        storedTau = kthLargestMagnitude(v, k);
        selected = selectedCount(v, storedTau);
      }
      if (low) ++lowSide;
      if (estimated) ++expectedUpdates;
      if (!estimated && storedTau != 0.0f && 2 * selected < k) ++keptBelow;

      spcclStats_t s;
      ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));
      EXPECT_EQ(s.thresholdUpdates, expectedUpdates);
      EXPECT_TRUE(sameBits(s.lastThreshold, storedTau))
          << "lastThreshold " << s.lastThreshold << ", expected " << storedTau;
      EXPECT_EQ(s.lastSelected, selected);
      EXPECT_TRUE(s.lastSelected >= below) << "no call sends fewer than ceil(fraction x k) with a non-zero tau";
    }
    if (fraction > 0) {
      EXPECT_TRUE(allRanks(lowSide > 0)) << "set-up: halving inputs should starve some call's stored tau";
    } else {
      EXPECT_TRUE(allRanks(keptBelow > 0)) << "set-up: the default should keep some tau that selects under k/2";
    }
  }
}

// tau 0 (fewer non-zeros than k) already selects every non-zero: however few
// that is, nothing is re-estimated off the schedule, even at
// thresholdMinFraction 1.
TEST_P(ScheduleTest, FewerNonZerosThanKDoNotReEstimate) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 17;
  const size_t k = selectionSize(n, kDensity);
  spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 1000, 0);
  config.thresholdMinFraction = 1.0f;  // the strictest low side
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));
  for (int call = 0; call < 4; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<float> in = distinctMagnitudes(n, seedFor(79, rank_, static_cast<uint64_t>(call)), 0x1p-17f);
    for (size_t i = 0; i < n; ++i)
      if (i % 512 != 0) in[i] = 0.0f;  // n / 512 = 256 non-zeros, under k / 2
    spcclStats_t s;
    ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));
    EXPECT_EQ(s.thresholdUpdates, 1u);
    EXPECT_EQ(s.lastThreshold, 0.0f);
    EXPECT_EQ(s.lastSelected, n / 512);
    EXPECT_LT(n / 512, k / 2);
  }
}

// k = 1 (density 0.001 of 1000), thresholdMinFraction 0.5: a stored tau that
// selects nothing is below ceil(k/2) = 1 and starves like any other (a
// floor(k/2) rule, 0 here, never fired). The input drops by 1e3 after call 0
// and halves every call, so a stored tau selects nothing of the next call:
// every call re-estimates and sends its largest entry.
TEST_P(ScheduleTest, KOfOneReEstimatesWhenAStoredTauSelectsNothing) {
  const int algorithm = GetParam();
  const size_t n = 1000;
  const float density = 0.001f;
  ASSERT_EQ(selectionSize(n, density), 1u);
  spcclCompressConfig_t config = makeConfig(density, algorithm, spcclFloat32, 1000, 0);
  config.thresholdMinFraction = 0.5f;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));
  float storedTau = 0.0f;
  for (int call = 0; call < 6; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<float> in = distinctMagnitudes(n, seedFor(89, rank_, static_cast<uint64_t>(call)), 0x1p-10f);
    if (call > 0)  // 1e-3, then halved every call: a tau fitted to one call selects nothing of the next
      for (float& x : in) x = std::ldexp(x * 1e-3f, -call);
    if (call > 0) {
      EXPECT_EQ(selectedCount(in, storedTau), 0u) << "set-up: the stored tau should select nothing";
    }
    spcclStats_t s;
    ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));
    storedTau = kthLargestMagnitude(in, 1);
    EXPECT_EQ(s.thresholdUpdates, static_cast<uint64_t>(call + 1));
    EXPECT_TRUE(sameBits(s.lastThreshold, storedTau))
        << "lastThreshold " << s.lastThreshold << ", expected " << storedTau;
    EXPECT_EQ(s.lastSelected, 1u);
  }
}

// thresholdWarmup (the default): in the first thresholdInterval calls tau is
// also estimated at calls 1, 2, 4, 8, 16 (interval 20 here), then on the
// schedule only (20, 40). Inputs as in ReEstimatesOnScheduleAndOnCapacityOverflow
// (a stored tau selects a little more than k, under the capacity), so no
// call estimates off the schedule; with the warm-up off the same inputs
// estimate at 0, 20 and 40 only.
TEST_P(ScheduleTest, WarmupEstimatesAtThePowersOfTwoBelowTheInterval) {
  const int algorithm = GetParam();
  const size_t n = size_t{1} << 16;
  const size_t k = selectionSize(n, kDensity);
  for (const int warmup : {1, 0}) {
    SCOPED_TRACE("thresholdWarmup " + std::to_string(warmup));
    spcclCompressConfig_t config = makeConfig(kDensity, algorithm, spcclFloat32, 20, 0);
    config.thresholdWarmup = warmup;
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, spcclFloat32, config, c));
    float storedTau = 0.0f;
    uint64_t expectedUpdates = 0;
    for (int call = 0; call <= 41; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      std::vector<float> in = distinctMagnitudes(n, seedFor(83, rank_, static_cast<uint64_t>(call)), 0x1p-16f);
      const float scale = 1.0f + static_cast<float>(call) * 0x1p-12f;
      for (float& x : in) x *= scale;
      spcclStats_t s;
      ASSERT_NO_FATAL_FAILURE(reduceAndRead(c.get(), in, &s));
      const bool warm = call == 1 || call == 2 || call == 4 || call == 8 || call == 16;
      const bool update = call % 20 == 0 || (warmup == 1 && warm);
      expectedUpdates += update ? 1 : 0;
      EXPECT_EQ(s.thresholdUpdates, expectedUpdates);
      if (update) storedTau = kthLargestMagnitude(in, k);
      EXPECT_TRUE(sameBits(s.lastThreshold, storedTau))
          << "lastThreshold " << s.lastThreshold << ", expected " << storedTau
          << (update ? " (exact k-th largest |v|)" : " (tau stored at the last update)");
      EXPECT_EQ(s.lastSelected, selectedCount(in, storedTau));
    }
    EXPECT_EQ(expectedUpdates, warmup == 1 ? 8u : 3u);
  }
}

// A refused call's effect on the stored tau is tested in
// threshold_rule_test.cc (ThresholdRuleRefused), on both sides of the rule.

INSTANTIATE_TEST_SUITE_P(AllgatherSplit, ScheduleTest, testing::ValuesIn(kCompressedAlgorithms),
                         [](const testing::TestParamInfo<int>& p) { return std::string(algorithmName(p.param)); });

}  // namespace
}  // namespace spccl::test
