// The CUDA executor against the host executor (kernels/core/executor.h): the
// same sequence of operations, the sparsified allgather's, gives the same
// bits; and a host-only step refuses to run on the device.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_executor.h"
#include "kernels/host/host_executor.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

struct Outcome {
  ThresholdStats threshold;
  SelectStats selection;
  std::vector<uint32_t> indices;
  std::vector<unsigned char> values;  // the fp16 wire values of the selection
  uint32_t maxKey = 0;
  uint64_t deltaBytes = 0;         // the selection's delta index encoding
  std::vector<unsigned char> fp8;  // every input as fp8 codes with the max rule's scale
};

Status run(Executor& ex, const std::vector<float>& v, uint64_t k, Outcome* o) {
  const size_t n = v.size();
  ExecMemory send, indices, values, fp8;
  SPCCL_RETURN_IF_ERROR(send.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(send.get(), v.data(), n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.kthLargestMagnitude(send.get(), spcclFloat32, nullptr, n, k, &o->threshold));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  const uint64_t slots = k + 64;
  SPCCL_RETURN_IF_ERROR(indices.ensure(ex, slots * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(values.ensure(ex, slots * 2));
  const uint64_t tieBudget = k - std::min(k, o->threshold.above);
  const SelectSpec spec{send.get(),
                        spcclFloat32,
                        nullptr,
                        nullptr,
                        n,
                        o->threshold.tauKey,
                        tieBudget,
                        slots,
                        core::ValueType::kFloat16,
                        indices.get<uint32_t>(),
                        values.get()};
  SPCCL_RETURN_IF_ERROR(ex.selectPack(spec, &o->selection));
  SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(send.get(), spcclFloat32, nullptr, n, &o->maxKey));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  const uint64_t kept = std::min(o->selection.selected, slots);
  SPCCL_RETURN_IF_ERROR(ex.deltaIndexBytes(indices.get<uint32_t>(), kept, 0, &o->deltaBytes));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  o->indices.resize(kept);
  o->values.resize(kept * 2);
  o->fp8.resize(n);
  SPCCL_RETURN_IF_ERROR(fp8.ensure(ex, n));
  SPCCL_RETURN_IF_ERROR(
      ex.toWire(send.get<float>(), n, core::ValueType::kFloat8e4m3, core::fp8ScaleForMax(o->maxKey), fp8.get()));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->indices.data(), indices.get(), kept * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->values.data(), values.get(), kept * 2));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->fp8.data(), fp8.get(), n));
  return ex.settle();
}

TEST(CudaExecutor, SameBitsAsTheHostExecutor) {
  SPCCL_REQUIRE_DEVICE();
  std::mt19937 g(11);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (size_t n : {size_t{1000}, size_t{1} << 20}) {
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    v[5] = std::numeric_limits<float>::infinity();
    const uint64_t k = n / 100;
    host::HostExecutor hostEx;
    cuda::CudaExecutor cudaEx;
    Outcome h, c;
    STATUS_ASSERT(run(hostEx, v, k, &h));
    STATUS_ASSERT(run(cudaEx, v, k, &c));
    EXPECT_EQ(c.threshold.tauKey, h.threshold.tauKey) << n;
    EXPECT_EQ(c.threshold.above, h.threshold.above) << n;
    EXPECT_EQ(c.threshold.finite, h.threshold.finite) << n;
    EXPECT_EQ(c.selection.selected, h.selection.selected) << n;
    EXPECT_EQ(c.selection.finiteSelected, h.selection.finiteSelected) << n;
    EXPECT_EQ(c.indices, h.indices) << n;
    EXPECT_EQ(c.values, h.values) << n;
    EXPECT_EQ(c.maxKey, h.maxKey) << n;
    EXPECT_EQ(c.deltaBytes, h.deltaBytes) << n;
    EXPECT_EQ(c.fp8, h.fp8) << n;
  }
}

// The fixed-capacity operations (the policy's whole sequence on one rank):
// an estimate left in executor memory, a pass into fewer slots than it
// selects (overflow kept in the residual), counts in executor memory, and
// the slots summed into zeros with the count read on the executor.
struct FixedOutcome {
  PairCounts counts{};
  std::vector<uint32_t> indices;
  std::vector<float> values, residual, sum;
};

Status runFixed(Executor& ex, const std::vector<float>& v, uint64_t k, uint64_t capacity, FixedOutcome* o) {
  const size_t n = v.size();
  ExecMemory send, tau, counts, indices, values, residual, acc;
  SPCCL_RETURN_IF_ERROR(send.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(send.get(), v.data(), n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(tau.ensure(ex, sizeof(ThresholdStats)));
  SPCCL_RETURN_IF_ERROR(counts.ensure(ex, sizeof(PairCounts)));
  SPCCL_RETURN_IF_ERROR(indices.ensure(ex, capacity * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(values.ensure(ex, capacity * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(residual.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(acc.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.fill(indices.get(), 0xff, capacity * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(
      ex.kthLargestMagnitudeInMemory(send.get(), spcclFloat32, nullptr, n, k, tau.get<ThresholdStats>()));
  const SelectSpec spec = fixedCapacitySpec(send.get(), spcclFloat32, nullptr, residual.get<float>(), n, capacity,
                                            capacity, core::ValueType::kFloat32, tau.get<ThresholdStats>(),
                                            indices.get<uint32_t>(), values.get(), counts.get<PairCounts>());
  SelectStats unused;
  SPCCL_RETURN_IF_ERROR(ex.selectPack(spec, &unused));
  SPCCL_RETURN_IF_ERROR(ex.fill(acc.get(), 0, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.accumulatePairs(indices.get<uint32_t>(), values.get(), core::ValueType::kFloat32, capacity,
                                           &counts.get<PairCounts>()->selected, acc.get<float>(), n));
  o->indices.resize(capacity);
  o->values.resize(capacity);
  o->residual.resize(n);
  o->sum.resize(n);
  SPCCL_RETURN_IF_ERROR(ex.toHost(&o->counts, counts.get(), sizeof(PairCounts)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->indices.data(), indices.get(), capacity * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->values.data(), values.get(), capacity * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->residual.data(), residual.get(), n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->sum.data(), acc.get(), n * sizeof(float)));
  return ex.settle();
}

TEST(CudaExecutor, FixedCapacityOperationsSameBitsAsTheHostExecutor) {
  SPCCL_REQUIRE_DEVICE();
  std::mt19937 g(12);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (size_t n : {size_t{1000}, size_t{1} << 20}) {
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    const uint64_t k = n / 50, capacity = n / 100;  // overflows
    host::HostExecutor hostEx;
    cuda::CudaExecutor cudaEx;
    FixedOutcome h, c;
    STATUS_ASSERT(runFixed(hostEx, v, k, capacity, &h));
    STATUS_ASSERT(runFixed(cudaEx, v, k, capacity, &c));
    EXPECT_GT(h.counts.selected, capacity) << n;
    EXPECT_EQ(c.counts.selected, h.counts.selected) << n;
    EXPECT_EQ(c.counts.finiteSelected, h.counts.finiteSelected) << n;
    EXPECT_EQ(c.indices, h.indices) << n;
    EXPECT_EQ(std::memcmp(c.values.data(), h.values.data(), capacity * sizeof(float)), 0) << n;
    EXPECT_EQ(std::memcmp(c.residual.data(), h.residual.data(), n * sizeof(float)), 0) << n;
    EXPECT_EQ(std::memcmp(c.sum.data(), h.sum.data(), n * sizeof(float)), 0) << n;
  }
}

// Needs no device: the refusal happens before any CUDA call.
TEST(CudaExecutor, HostOnlyStepsFailWithTheirName) {
  cuda::CudaExecutor ex;
  bool ran = false;
  const Status st = ex.hostOnly("the test's encoder", [&]() -> Status {
    ran = true;
    return Status::ok();
  });
  EXPECT_FALSE(ran);
  EXPECT_EQ(st.code(), spcclInvalidUsage);
  EXPECT_NE(st.message().find("the test's encoder"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace spccl::gputest
