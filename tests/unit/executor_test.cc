// The host executor (kernels/host/host_executor.h): its operations give what
// the host kernels give, and in guarded mode its memory is out of reach
// everywhere but inside its own calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/host/host_executor.h"
#include "kernels/host/host_kernels.h"

namespace spccl::test {
namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  v[7] = std::numeric_limits<float>::quiet_NaN();
  v[11] = -std::numeric_limits<float>::infinity();
  return v;
}

class HostExecutorTest : public ::testing::TestWithParam<bool> {};

// Every operation, on executor memory, equals the host kernel on plain memory.
TEST_P(HostExecutorTest, OperationsEqualTheHostKernels) {
  host::HostExecutor ex(GetParam());
  const size_t n = 70000;  // past the threshold's sampling floor (2^16)
  const std::vector<float> v = randomFloats(n, 3);
  ExecMemory send, indices, values, staged, wire;
  ASSERT_TRUE(send.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.fromHost(send.get(), v.data(), n * sizeof(float)).isOk());

  const uint64_t k = 700;
  ThresholdStats th;
  ASSERT_TRUE(ex.kthLargestMagnitude(send.get(), spcclFloat32, nullptr, n, k, &th).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  std::vector<uint32_t> scratch;
  const host::ThresholdResult ref = host::kthLargestMagnitude(v.data(), spcclFloat32, nullptr, n, k, &scratch);
  EXPECT_EQ(th.tauKey, ref.tauKey);
  EXPECT_EQ(th.above, ref.above);
  EXPECT_EQ(th.finite, ref.finite);

  const uint64_t slots = 1000;
  ASSERT_TRUE(indices.ensure(ex, slots * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(values.ensure(ex, slots * 2).isOk());
  const SelectSpec spec{send.get(),
                        spcclFloat32,
                        nullptr,
                        nullptr,
                        n,
                        th.tauKey,
                        3,
                        slots,
                        core::ValueType::kFloat16,
                        indices.get<uint32_t>(),
                        values.get()};
  SelectStats sel;
  ASSERT_TRUE(ex.selectPack(spec, &sel).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  std::vector<uint32_t> refIdx(slots), gotIdx(slots);
  std::vector<uint16_t> refVal(slots), gotVal(slots);
  const host::SelectArgs a{
      v.data(),      spcclFloat32, nullptr, nullptr, n, th.tauKey, 3, slots, core::ValueType::kFloat16,
      refIdx.data(), refVal.data()};
  const host::SelectResult r = host::selectPack(a);
  EXPECT_EQ(sel.selected, r.selected);
  EXPECT_EQ(sel.finiteSelected, r.finiteSelected);
  ASSERT_LE(r.selected, slots);
  ASSERT_TRUE(ex.toHost(gotIdx.data(), indices.get(), slots * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.toHost(gotVal.data(), values.get(), slots * 2).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  gotIdx.resize(r.selected), refIdx.resize(r.selected), gotVal.resize(r.selected), refVal.resize(r.selected);
  EXPECT_EQ(gotIdx, refIdx);
  EXPECT_EQ(gotVal, refVal);

  uint64_t deltaBytes = 0;
  ASSERT_TRUE(ex.deltaIndexBytes(indices.get<uint32_t>(), r.selected, 0, &deltaBytes).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(deltaBytes, host::deltaIndexBytes(refIdx.data(), r.selected, 0));
  EXPECT_GT(deltaBytes, r.selected);  // gaps of about n / k: two-byte varints among them

  uint32_t maxKey = 0;
  ASSERT_TRUE(ex.maxFiniteKey(send.get(), spcclFloat32, nullptr, n, &maxKey).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(maxKey, host::maxFiniteMagnitudeKey(v.data(), spcclFloat32, nullptr, n));
  EXPECT_NE(maxKey, 0u);

  const int scaleExp = core::fp8ScaleForMax(maxKey);
  ASSERT_TRUE(wire.ensure(ex, n).isOk());
  ASSERT_TRUE(ex.toWire(send.get<float>(), n, core::ValueType::kFloat8e4m3, scaleExp, wire.get()).isOk());
  std::vector<unsigned char> got(n), want(n);
  ASSERT_TRUE(ex.toHost(got.data(), wire.get(), n).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  host::toWire(v.data(), n, core::ValueType::kFloat8e4m3, scaleExp, want.data());
  EXPECT_EQ(got, want);

  ASSERT_TRUE(ex.fill(wire.get(), 0x5a, n).isOk());
  ASSERT_TRUE(ex.toHost(got.data(), wire.get(), n).isOk());
  EXPECT_EQ(got, std::vector<unsigned char>(n, 0x5a));
}

// Memory survives growth of other buffers and release; hostOnly and
// withMemory run their function and return its status.
TEST_P(HostExecutorTest, HostOnlyAndWithMemoryRunTheirFunction) {
  host::HostExecutor ex(GetParam());
  ExecMemory a, b;
  ASSERT_TRUE(a.ensure(ex, 64).isOk());
  ASSERT_TRUE(ex.hostOnly("a test", [&]() -> Status {
                  std::memset(a.get(), 7, 64);
                  return Status::ok();
                }).isOk());
  ASSERT_TRUE(b.ensure(ex, 1 << 20).isOk());  // another allocation: a is still there
  unsigned char first = 0;
  ASSERT_TRUE(ex.withMemory([&]() -> Status {
                  first = a.get<unsigned char>()[63];
                  return Status::ok();
                }).isOk());
  EXPECT_EQ(first, 7);
  EXPECT_EQ(ex.hostOnly("a test", [] { return invalidUsage("from the function"); }).code(), spcclInvalidUsage);
  ASSERT_TRUE(a.ensure(ex, 1 << 16).isOk());  // growth: a new allocation
  EXPECT_GE(a.bytes(), size_t{1} << 16);
}

// The fixed-capacity operations: an estimate left in executor memory drives
// the pass as the same tau given by value does; a pass that overflows its
// slots keeps the overflow in the residual and leaves its counts in
// executor memory; accumulatePairs sums the first min(count, capacity)
// pairs and refuses a peer's index out of range.
TEST_P(HostExecutorTest, FixedCapacityOperations) {
  host::HostExecutor ex(GetParam());
  const size_t n = 70000;
  const std::vector<float> v = randomFloats(n, 5);
  const uint64_t k = 700, capacity = 500;  // fewer slots than k: the pass overflows
  ExecMemory send, tau, counts, indices, values, residual, acc;
  ASSERT_TRUE(send.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.fromHost(send.get(), v.data(), n * sizeof(float)).isOk());
  ASSERT_TRUE(tau.ensure(ex, sizeof(ThresholdStats)).isOk());
  ASSERT_TRUE(counts.ensure(ex, sizeof(PairCounts)).isOk());
  ASSERT_TRUE(indices.ensure(ex, capacity * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(values.ensure(ex, capacity * sizeof(float)).isOk());
  ASSERT_TRUE(residual.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(acc.ensure(ex, n * sizeof(float)).isOk());
  ASSERT_TRUE(
      ex.kthLargestMagnitudeInMemory(send.get(), spcclFloat32, nullptr, n, k, tau.get<ThresholdStats>()).isOk());
  const SelectSpec spec = fixedCapacitySpec(send.get(), spcclFloat32, nullptr, residual.get<float>(), n, capacity,
                                            capacity, core::ValueType::kFloat32, tau.get<ThresholdStats>(),
                                            indices.get<uint32_t>(), values.get(), counts.get<PairCounts>());
  SelectStats untouched{12345, 0, 0};
  ASSERT_TRUE(ex.selectPack(spec, &untouched).isOk());
  EXPECT_EQ(untouched.selected, 12345u);  // the counts went to executor memory

  std::vector<uint32_t> scratch, refIdx(capacity);
  std::vector<float> refVal(capacity), refRes(n);
  const host::ThresholdResult th = host::kthLargestMagnitude(v.data(), spcclFloat32, nullptr, n, k, &scratch);
  const host::SelectArgs a{v.data(),
                           spcclFloat32,
                           nullptr,
                           refRes.data(),
                           n,
                           th.tauKey,
                           capacity > th.above ? capacity - th.above : 0,
                           capacity,
                           core::ValueType::kFloat32,
                           refIdx.data(),
                           refVal.data(),
                           true};
  const host::SelectResult r = host::selectPack(a);
  ASSERT_GT(r.selected, capacity);
  PairCounts got{};
  std::vector<uint32_t> gotIdx(capacity);
  std::vector<float> gotVal(capacity), gotRes(n);
  ASSERT_TRUE(ex.toHost(&got, counts.get(), sizeof got).isOk());
  ASSERT_TRUE(ex.toHost(gotIdx.data(), indices.get(), capacity * sizeof(uint32_t)).isOk());
  ASSERT_TRUE(ex.toHost(gotVal.data(), values.get(), capacity * sizeof(float)).isOk());
  ASSERT_TRUE(ex.toHost(gotRes.data(), residual.get(), n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.settle().isOk());
  EXPECT_EQ(got.selected, r.selected);
  EXPECT_EQ(got.finiteSelected, r.finiteSelected);
  EXPECT_EQ(gotIdx, refIdx);
  EXPECT_EQ(std::memcmp(gotVal.data(), refVal.data(), capacity * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(gotRes.data(), refRes.data(), n * sizeof(float)), 0);

  ASSERT_TRUE(ex.fill(acc.get(), 0, n * sizeof(float)).isOk());
  ASSERT_TRUE(ex.accumulatePairs(indices.get<uint32_t>(), values.get(), core::ValueType::kFloat32, capacity,
                                 &counts.get<PairCounts>()->selected, acc.get<float>(), n)
                  .isOk());
  std::vector<float> gotAcc(n), refAcc(n, 0.0f);
  for (uint64_t i = 0; i < capacity; ++i) refAcc[refIdx[i]] += refVal[i];
  ASSERT_TRUE(ex.toHost(gotAcc.data(), acc.get(), n * sizeof(float)).isOk());
  EXPECT_EQ(std::memcmp(gotAcc.data(), refAcc.data(), n * sizeof(float)), 0);

  const uint32_t outOfRange = static_cast<uint32_t>(n);
  ASSERT_TRUE(ex.fromHost(indices.get<uint32_t>() + 3, &outOfRange, sizeof outOfRange).isOk());
  EXPECT_EQ(ex.accumulatePairs(indices.get<uint32_t>(), values.get(), core::ValueType::kFloat32, capacity,
                               &counts.get<PairCounts>()->selected, acc.get<float>(), n)
                .code(),
            spcclRemoteError);
}

INSTANTIATE_TEST_SUITE_P(PlainAndGuarded, HostExecutorTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Guarded" : "Plain"; });

// Guarded: executor memory faults when read outside an executor call, and
// nested calls keep it open until the outermost returns.
TEST(HostExecutorGuarded, MemoryFaultsOutsideExecutorCalls) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  host::HostExecutor ex(true);
  ExecMemory m;
  ASSERT_TRUE(m.ensure(ex, 4096).isOk());
  ASSERT_TRUE(ex.fill(m.get(), 1, 4096).isOk());
  EXPECT_DEATH({ std::printf("%d\n", static_cast<int>(*static_cast<volatile unsigned char*>(m.get()))); }, "");
  int seen = 0;
  ASSERT_TRUE(ex.hostOnly("outer", [&]() -> Status {
                  SPCCL_RETURN_IF_ERROR(ex.fill(m.get(), 2, 16));  // a call inside a call
                  seen = *static_cast<volatile unsigned char*>(m.get());
                  return Status::ok();
                }).isOk());
  EXPECT_EQ(seen, 2);
  EXPECT_DEATH({ *static_cast<volatile unsigned char*>(m.get()) = 3; }, "");
  // Unguarded, the same reads are plain reads.
  host::HostExecutor plain(false);
  ExecMemory q;
  ASSERT_TRUE(q.ensure(plain, 16).isOk());
  ASSERT_TRUE(plain.fill(q.get(), 9, 16).isOk());
  EXPECT_EQ(*static_cast<volatile unsigned char*>(q.get()), 9);
}

}  // namespace
}  // namespace spccl::test
