// The CUDA executor against the host executor (kernels/core/executor.h): the
// same sequence of operations, the sparsified allgather's, gives the same
// bits; the stream operations (index sections, the checked rank-ordered sum)
// give the same bytes, sums and findings.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "kernels/core/types.h"
#include "kernels/cuda/cuda_executor.h"
#include "kernels/host/host_executor.h"
#include "kernels/host/host_kernels.h"
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

// One operation sequence on a fresh host executor and a fresh CUDA
// executor, each result into its own Out: the comparisons follow.
template <typename Out, typename F>
void onBothExecutors(F&& run, Out* onHost, Out* onDevice) {
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  STATUS_ASSERT(run(hostEx, onHost));
  STATUS_ASSERT(run(cudaEx, onDevice));
}

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

// A stale tau's re-selection: a pass with a tau far below the k-th largest
// captures too many candidates (ties among them: values repeat), then
// reselect keeps capacity of them and fixes the residual. The CUDA executor
// does it with a second pass over the buffer, the host over the candidates.
struct ReselectOutcome {
  ReselectStats stats;
  std::vector<uint32_t> indices;
  std::vector<unsigned char> values;
  std::vector<float> residual;
};

Status runReselect(Executor& ex, const std::vector<float>& v, const std::vector<float>& residualIn, uint32_t staleKey,
                   uint64_t k, ReselectOutcome* o) {
  const size_t n = v.size();
  ExecMemory send, resIn, resOut, indices, values;
  SPCCL_RETURN_IF_ERROR(send.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(resIn.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(resOut.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(indices.ensure(ex, n * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(values.ensure(ex, n * 2));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(send.get(), v.data(), n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(resIn.get(), residualIn.data(), n * sizeof(float)));
  const SelectSpec spec{send.get(),
                        spcclFloat32,
                        resIn.get<float>(),
                        resOut.get<float>(),
                        n,
                        staleKey,
                        n,
                        n,
                        core::ValueType::kFloat16,
                        indices.get<uint32_t>(),
                        values.get()};
  SelectStats first;
  SPCCL_RETURN_IF_ERROR(ex.selectPack(spec, &first));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  if (first.selected <= k) return internalError("the stale pass did not overflow");
  SPCCL_RETURN_IF_ERROR(ex.reselect(spec, first.selected, k, k, &o->stats));
  SPCCL_RETURN_IF_ERROR(ex.settle());
  o->indices.resize(o->stats.selected);
  o->values.resize(o->stats.selected * 2);
  o->residual.resize(n);
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->indices.data(), indices.get(), o->indices.size() * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->values.data(), values.get(), o->values.size()));
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->residual.data(), resOut.get(), n * sizeof(float)));
  return ex.settle();
}

TEST(CudaExecutor, ReselectSameBitsAsTheHostExecutor) {
  SPCCL_REQUIRE_DEVICE();
  std::mt19937 g(13);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (size_t n : {size_t{5000}, size_t{1} << 20}) {
    std::vector<float> v(n), r(n);
    for (size_t i = 0; i < n; ++i) {
      v[i] = std::round(d(g) * 8.0f) / 8.0f;  // coarse: many ties at any tau
      r[i] = d(g) * 0.01f;
    }
    v[3] = std::numeric_limits<float>::quiet_NaN();
    const uint64_t k = n / 50;
    const uint32_t staleKey = core::magnitudeKey(0.5f);  // far more than k entries above it
    host::HostExecutor hostEx;
    cuda::CudaExecutor cudaEx;
    ReselectOutcome h, c;
    STATUS_ASSERT(runReselect(hostEx, v, r, staleKey, k, &h));
    STATUS_ASSERT(runReselect(cudaEx, v, r, staleKey, k, &c));
    EXPECT_EQ(c.stats.selected, h.stats.selected) << n;
    EXPECT_EQ(c.stats.tauKey, h.stats.tauKey) << n;
    EXPECT_EQ(c.indices, h.indices) << n;
    EXPECT_EQ(c.values, h.values) << n;
    EXPECT_EQ(std::memcmp(c.residual.data(), h.residual.data(), n * sizeof(float)), 0) << n;
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

// The in-band agreement on the device: the same verdict on the counts as the
// host executor's, reported by the next asyncFindings() (not by the call),
// and once only; storeSmall's value is the one given at the call.
TEST(CudaExecutor, AgreeInBandZeroesCountsAndReportsLater) {
  SPCCL_REQUIRE_DEVICE();
  struct Record {
    unsigned char call[48];
    PairCounts counts;
  };
  const size_t ranks = 4;
  cuda::CudaExecutor ex;
  ExecMemory records;
  STATUS_ASSERT(records.ensure(ex, ranks * sizeof(Record)));
  auto* dev = records.get<Record>();
  for (int mismatch = 0; mismatch < 2; ++mismatch) {
    SCOPED_TRACE(mismatch);
    for (size_t r = 0; r < ranks; ++r) {
      Record rec{};
      std::memset(rec.call, mismatch && r == 3 ? 9 : 5, sizeof rec.call);
      rec.counts = PairCounts{10 + r, 5 + r};
      STATUS_ASSERT(ex.storeSmall(dev + r, &rec, sizeof rec));
      std::memset(&rec, 0xee, sizeof rec);  // the kernel took the value at the call
    }
    STATUS_ASSERT(ex.agreeInBand(dev, sizeof(Record), sizeof(Record::call), offsetof(Record, counts), ranks));
    std::vector<Record> got(ranks);
    STATUS_ASSERT(ex.toHost(got.data(), dev, ranks * sizeof(Record)));
    ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());  // not settle(): it would take the finding
    for (size_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(got[r].call[0], mismatch && r == 3 ? 9 : 5) << r;
      EXPECT_EQ(got[r].counts.selected, mismatch ? 0u : 10 + r) << r;
    }
    const Status first = ex.asyncFindings();
    EXPECT_EQ(first.code(), mismatch ? spcclInvalidUsage : spcclSuccess) << first.message();
    EXPECT_TRUE(ex.asyncFindings().isOk()) << "reported once";
    STATUS_ASSERT(ex.settle());
  }
}

// ---- Stream sections ----

const char* encodingName(IndexEncoding e) {
  return e == IndexEncoding::kCoo32 ? "coo32" : e == IndexEncoding::kDelta ? "delta" : "bitmap";
}

const char* valueName(core::ValueType t) { return t == core::ValueType::kFloat8e4m3 ? "fp8" : wireName(t); }

struct IndexSet {
  std::string name;
  uint64_t begin, end;
  std::vector<uint32_t> indices;  // sorted, distinct, in [begin, end)
};

// `count` random positions of [lo, hi) plus `also`, sorted and distinct.
std::vector<uint32_t> randomIndices(uint64_t lo, uint64_t hi, uint64_t count, std::mt19937_64& g,
                                    std::vector<uint64_t> also = {}) {
  std::vector<uint32_t> v;
  for (uint64_t a : also) v.push_back(static_cast<uint32_t>(a));
  for (uint64_t k = 0; k < count; ++k) v.push_back(static_cast<uint32_t>(lo + g() % (hi - lo)));
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// Each position of [begin, end) with probability p.
std::vector<uint32_t> bernoulliIndices(uint64_t begin, uint64_t end, double p, std::mt19937_64& g) {
  std::bernoulli_distribution keep(p);
  std::vector<uint32_t> v;
  for (uint64_t i = begin; i < end; ++i)
    if (keep(g)) v.push_back(static_cast<uint32_t>(i));
  return v;
}

constexpr uint64_t kGapRange = uint64_t{1} << 23;  // room for gaps of more than 2^21 (4-byte varints)

std::vector<IndexSet> indexSets(std::mt19937_64& g) {
  std::vector<IndexSet> sets;
  sets.push_back({"empty", 100, 1100, {}});
  sets.push_back({"one", 7, 1007, {500}});
  sets.push_back({"both_ends", 1000, 3000, randomIndices(1001, 2999, 30, g, {1000, 2999})});
  sets.push_back({"small", 0, 5000, randomIndices(0, 5000, 20, g)});
  sets.push_back({"dense", 3, 4099, bernoulliIndices(3, 4099, 0.7, g)});
  sets.push_back({"full", 5, 70, bernoulliIndices(5, 70, 1.0, g)});
  // A gap past 2^21 stays: the random ones lie in the upper half.
  sets.push_back({"gaps", 1, 1 + kGapRange,
                  randomIndices(1 + kGapRange / 2, kGapRange, 50, g, {1, 1 + (uint64_t{1} << 21) + 9, kGapRange})});
  // 5-byte varints (gaps past 2^28), up to the largest index: no bitmap.
  sets.push_back({"huge", 5, 0xffffffffull, {5 + (1u << 21) + 3, (1u << 21) + (1u << 28) + 20, 0xfffffffeu}});
  return sets;
}

// The index section of these indices as codec/codec.cc encodePairs writes
// it: the reference for every byte.
std::vector<unsigned char> codecIndexSection(IndexEncoding e, const std::vector<uint32_t>& idx, uint64_t begin,
                                             uint64_t end) {
  const uint64_t nnz = idx.size();
  StreamInfo info{};
  info.denseCount = end;
  info.rangeBegin = begin;
  info.rangeEnd = end;
  info.nnz = nnz;
  info.valueType = core::ValueType::kFloat8e4m3;  // one byte a value: the index section follows them
  info.kind = StreamKind::kPairs;
  info.encoding = e;
  const std::vector<unsigned char> values(nnz + 1, 0);
  const size_t mapBytes = e == IndexEncoding::kBitmap ? (end - begin + 7) / 8 : 0;
  std::vector<unsigned char> stream(sizeof(StreamHeader) + nnz * 5 + mapBytes + 16);
  encodePairs(stream.data(), info, idx.data(), values.data());
  const size_t at = sizeof(StreamHeader) + (e == IndexEncoding::kCoo32 ? 0 : nnz);
  const size_t bytes = e == IndexEncoding::kCoo32   ? nnz * sizeof(uint32_t)
                       : e == IndexEncoding::kDelta ? host::deltaIndexBytes(idx.data(), nnz, begin)
                                                    : mapBytes;
  return std::vector<unsigned char>(stream.begin() + at, stream.begin() + at + bytes);
}

// encodeIndices at an odd offset of a poisoned buffer: the section and the
// bytes around it come back.
constexpr size_t kOddOffset = 3, kGuardBytes = 8;

Status encodeOn(Executor& ex, IndexEncoding e, const IndexSet& s, size_t bytes, std::vector<unsigned char>* out) {
  const uint64_t nnz = s.indices.size();
  const size_t total = kOddOffset + bytes + kGuardBytes;
  ExecMemory indices, dst;
  SPCCL_RETURN_IF_ERROR(indices.ensure(ex, std::max<size_t>(nnz, 1) * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(dst.ensure(ex, total));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(indices.get(), s.indices.data(), nnz * sizeof(uint32_t)));
  SPCCL_RETURN_IF_ERROR(ex.fill(dst.get(), 0xa5, total));
  SPCCL_RETURN_IF_ERROR(
      ex.encodeIndices(e, indices.get<uint32_t>(), nnz, s.begin, s.end, dst.get<unsigned char>() + kOddOffset));
  out->resize(total);
  SPCCL_RETURN_IF_ERROR(ex.toHost(out->data(), dst.get(), total));
  return ex.settle();
}

TEST(CudaExecutorSections, EncodeIndicesSameBytesAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("EncodeIndicesSameBytesAsTheHost");
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  for (const IndexSet& s : indexSets(g)) {
    for (IndexEncoding e : {IndexEncoding::kCoo32, IndexEncoding::kDelta, IndexEncoding::kBitmap}) {
      if (e == IndexEncoding::kBitmap && s.end - s.begin > kGapRange) continue;  // a 512 MiB map
      SCOPED_TRACE(s.name + " " + encodingName(e));
      const std::vector<unsigned char> want = codecIndexSection(e, s.indices, s.begin, s.end);
      std::vector<unsigned char> h, c;
      STATUS_ASSERT(encodeOn(hostEx, e, s, want.size(), &h));
      STATUS_ASSERT(encodeOn(cudaEx, e, s, want.size(), &c));
      EXPECT_EQ(c, h);
      ASSERT_EQ(c.size(), kOddOffset + want.size() + kGuardBytes);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), c.begin() + kOddOffset)) << "not encodePairs' bytes";
      for (size_t i = 0; i < kOddOffset; ++i) EXPECT_EQ(c[i], 0xa5) << "written before dst";
      for (size_t i = kOddOffset + want.size(); i < c.size(); ++i) EXPECT_EQ(c[i], 0xa5) << "written past the section";
    }
  }
}

// The partition's split by owner: the same groups, in the same order, and
// the same counts as the host executor, for fp32 and fp64 rows, 1 to 7 owners.
TEST(CudaExecutorSections, SplitByOwnerSameAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  std::mt19937_64 g(31);
  for (spcclDataType_t acc : {spcclFloat32, spcclFloat64})
    for (int ranks : {1, 2, 3, 7})
      for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{5000}}) {
        SCOPED_TRACE(std::to_string(ranks) + " owners, " + std::to_string(n) + " ids");
        const uint64_t rowLen = 5;
        const size_t rowBytes = rowLen * dataTypeSize(acc);
        std::vector<int64_t> ids(n);
        for (uint64_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i * 977) - 12345;
        std::vector<unsigned char> rows(n * rowBytes);
        for (unsigned char& b : rows) b = static_cast<unsigned char>(g());
        struct Out {
          std::vector<int64_t> ids;
          std::vector<unsigned char> rows;
          std::vector<uint64_t> perOwner;
        };
        auto run = [&](Executor& ex, Out* o) -> Status {
          ExecMemory inIds, inRows, outIds, outRows;
          SPCCL_RETURN_IF_ERROR(inIds.ensure(ex, std::max<uint64_t>(n, 1) * 8));
          SPCCL_RETURN_IF_ERROR(inRows.ensure(ex, std::max<size_t>(rows.size(), 1)));
          SPCCL_RETURN_IF_ERROR(outIds.ensure(ex, std::max<uint64_t>(n, 1) * 8));
          SPCCL_RETURN_IF_ERROR(outRows.ensure(ex, std::max<size_t>(rows.size(), 1)));
          SPCCL_RETURN_IF_ERROR(ex.fromHost(inIds.get(), ids.data(), n * 8));
          SPCCL_RETURN_IF_ERROR(ex.fromHost(inRows.get(), rows.data(), rows.size()));
          o->perOwner.assign(ranks, 99);
          SPCCL_RETURN_IF_ERROR(ex.splitByOwner(inIds.get<int64_t>(), inRows.get(), acc, n, rowLen, ranks,
                                                outIds.get<int64_t>(), outRows.get(), o->perOwner.data()));
          o->ids.resize(n);
          o->rows.resize(rows.size());
          SPCCL_RETURN_IF_ERROR(ex.toHost(o->ids.data(), outIds.get(), n * 8));
          SPCCL_RETURN_IF_ERROR(ex.toHost(o->rows.data(), outRows.get(), rows.size()));
          return ex.settle();
        };
        Out h, c;
        ASSERT_NO_FATAL_FAILURE(onBothExecutors(run, &h, &c));
        EXPECT_EQ(c.perOwner, h.perOwner);
        EXPECT_EQ(c.ids, h.ids);
        EXPECT_EQ(c.rows, h.rows);
      }
}

// Stream checksums on the device: the same sealed bytes (flag, CRC, the
// test's flip) and the same CRCs as the host executor, for streams from a
// header's size to several pieces' worth, the CRC field anywhere.
TEST(CudaExecutorSections, StreamChecksumsSameAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  std::mt19937_64 g(5);
  for (size_t bytes : {size_t{56}, size_t{1000}, size_t{1025}, size_t{70001}, size_t{5 << 20}})
    for (size_t skipAt : {size_t{12}, bytes - 4})
      for (bool flip : {false, true}) {
        SCOPED_TRACE(std::to_string(bytes) + " bytes, CRC at " + std::to_string(skipAt) + (flip ? ", flipped" : ""));
        std::vector<unsigned char> in(bytes);
        for (auto& b : in) b = static_cast<unsigned char>(g());
        struct Out {
          std::vector<unsigned char> sealed;
          uint32_t crc = 0;
        };
        auto run = [&](Executor& ex, Out* o) -> Status {
          ExecMemory s;
          SPCCL_RETURN_IF_ERROR(s.ensure(ex, bytes));
          SPCCL_RETURN_IF_ERROR(ex.fromHost(s.get(), in.data(), bytes));
          SPCCL_RETURN_IF_ERROR(ex.streamCrc32c(s.get(), bytes, skipAt, &o->crc));
          SPCCL_RETURN_IF_ERROR(ex.sealCrc32c(s.get(), bytes, 11, 0x01, skipAt, flip ? bytes / 2 : SIZE_MAX));
          o->sealed.resize(bytes);
          SPCCL_RETURN_IF_ERROR(ex.toHost(o->sealed.data(), s.get(), bytes));
          return ex.settle();
        };
        Out h, c;
        ASSERT_NO_FATAL_FAILURE(onBothExecutors(run, &h, &c));
        EXPECT_EQ(c.crc, h.crc);
        EXPECT_EQ(c.sealed, h.sealed);
      }
}

TEST(CudaExecutorSections, CopySameBytesAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  std::vector<unsigned char> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  auto run = [&](Executor& ex, std::vector<unsigned char>* out) -> Status {
    ExecMemory a, b;
    SPCCL_RETURN_IF_ERROR(a.ensure(ex, src.size()));
    SPCCL_RETURN_IF_ERROR(b.ensure(ex, src.size()));
    SPCCL_RETURN_IF_ERROR(ex.fromHost(a.get(), src.data(), src.size()));
    SPCCL_RETURN_IF_ERROR(ex.fill(b.get(), 0, src.size()));
    SPCCL_RETURN_IF_ERROR(ex.copy(b.get<unsigned char>() + 5, a.get<unsigned char>() + 1, 900));
    SPCCL_RETURN_IF_ERROR(ex.copy(b.get(), a.get(), 0));
    out->resize(src.size());
    SPCCL_RETURN_IF_ERROR(ex.toHost(out->data(), b.get(), src.size()));
    return ex.settle();
  };
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  std::vector<unsigned char> h, c;
  STATUS_ASSERT(run(hostEx, &h));
  STATUS_ASSERT(run(cudaEx, &c));
  EXPECT_EQ(c, h);
  EXPECT_TRUE(std::equal(src.begin() + 1, src.begin() + 901, c.begin() + 5));
}

// The row-sparse merges: a rank's duplicate ids (fp16 and fp64 rows), then
// the union of that list with others in list order, and a list out of
// order found at the same position: the same ids, bits and findings.
TEST(CudaExecutorSections, RowSparseMergesSameBitsAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("RowSparseMergesSameBitsAsTheHost");
  for (spcclDataType_t type : {spcclFloat16, spcclFloat64}) {
    const uint64_t n = 5000, rowLen = 33;
    const size_t eb = type == spcclFloat64 ? 8 : 2, ab = type == spcclFloat64 ? 8 : 4;
    const spcclDataType_t acc = type == spcclFloat64 ? spcclFloat64 : spcclFloat32;
    std::vector<int64_t> ids(n);
    for (int64_t& id : ids) id = static_cast<int64_t>(g() % 3000) - 1000;
    std::vector<unsigned char> rows(n * rowLen * eb);
    std::normal_distribution<double> normal;
    for (uint64_t i = 0; i < n * rowLen; ++i) {
      if (type == spcclFloat64) {
        const double x = normal(g);
        std::memcpy(rows.data() + 8 * i, &x, 8);
      } else {
        const uint16_t h = core::floatToHalfBits(static_cast<float>(normal(g)));
        std::memcpy(rows.data() + 2 * i, &h, 2);
      }
    }
    // Second and third lists: sorted, overlapping the first; the third out
    // of order at position 4 in the last round.
    std::vector<int64_t> ids2, ids3;
    for (int64_t id = -1500; id < 1500; id += 3) ids2.push_back(id);
    for (int64_t id = -900; id < 2500; id += 7) ids3.push_back(id);
    std::vector<unsigned char> rows2(ids2.size() * rowLen * ab, 0x3c), rows3(ids3.size() * rowLen * ab, 0x41);
    struct Result {
      std::vector<int64_t> ids, unionIds;
      std::vector<unsigned char> rows, unionRows;
      uint64_t unordered[3] = {}, badAt[3] = {};
    };
    auto run = [&](Executor& ex, Result* r) -> Status {
      ExecMemory in, inRows, out, outRows, l2, l2Rows, l3, l3Rows, u, uRows;
      SPCCL_RETURN_IF_ERROR(in.ensure(ex, n * 8));
      SPCCL_RETURN_IF_ERROR(inRows.ensure(ex, rows.size()));
      SPCCL_RETURN_IF_ERROR(out.ensure(ex, n * 8));
      SPCCL_RETURN_IF_ERROR(outRows.ensure(ex, n * rowLen * ab));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(in.get(), ids.data(), n * 8));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(inRows.get(), rows.data(), rows.size()));
      uint64_t unique = 0;
      SPCCL_RETURN_IF_ERROR(
          ex.mergeRows(in.get<int64_t>(), inRows.get(), type, n, rowLen, out.get<int64_t>(), outRows.get(), &unique));
      SPCCL_RETURN_IF_ERROR(ex.settle());
      r->ids.resize(unique);
      r->rows.resize(unique * rowLen * ab);
      SPCCL_RETURN_IF_ERROR(ex.toHost(r->ids.data(), out.get(), unique * 8));
      SPCCL_RETURN_IF_ERROR(ex.toHost(r->rows.data(), outRows.get(), r->rows.size()));
      SPCCL_RETURN_IF_ERROR(l2.ensure(ex, ids2.size() * 8));
      SPCCL_RETURN_IF_ERROR(l2Rows.ensure(ex, rows2.size()));
      SPCCL_RETURN_IF_ERROR(l3.ensure(ex, ids3.size() * 8));
      SPCCL_RETURN_IF_ERROR(l3Rows.ensure(ex, rows3.size()));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(l2.get(), ids2.data(), ids2.size() * 8));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(l2Rows.get(), rows2.data(), rows2.size()));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(l3.get(), ids3.data(), ids3.size() * 8));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(l3Rows.get(), rows3.data(), rows3.size()));
      const uint64_t most = unique + ids2.size() + ids3.size();
      SPCCL_RETURN_IF_ERROR(u.ensure(ex, most * 8));
      SPCCL_RETURN_IF_ERROR(uRows.ensure(ex, most * rowLen * ab));
      const IdRowsSection lists[3] = {{out.get<int64_t>(), outRows.get(), unique},
                                      {l2.get<int64_t>(), l2Rows.get(), ids2.size()},
                                      {l3.get<int64_t>(), l3Rows.get(), ids3.size()}};
      uint64_t merged = 0;
      SPCCL_RETURN_IF_ERROR(
          ex.mergeRowLists(lists, 3, acc, rowLen, u.get<int64_t>(), uRows.get(), &merged, r->unordered));
      SPCCL_RETURN_IF_ERROR(ex.settle());
      r->unionIds.resize(merged);
      r->unionRows.resize(merged * rowLen * ab);
      SPCCL_RETURN_IF_ERROR(ex.toHost(r->unionIds.data(), u.get(), merged * 8));
      SPCCL_RETURN_IF_ERROR(ex.toHost(r->unionRows.data(), uRows.get(), r->unionRows.size()));
      SPCCL_RETURN_IF_ERROR(ex.settle());
      std::vector<int64_t> bad = ids3;
      bad[4] = bad[3];
      SPCCL_RETURN_IF_ERROR(ex.fromHost(l3.get(), bad.data(), bad.size() * 8));
      SPCCL_RETURN_IF_ERROR(ex.mergeRowLists(lists, 3, acc, rowLen, u.get<int64_t>(), uRows.get(), &merged, r->badAt));
      return ex.settle();
    };
    Result h, c;
    ASSERT_NO_FATAL_FAILURE(onBothExecutors(run, &h, &c));
    EXPECT_EQ(c.ids, h.ids);
    EXPECT_EQ(c.rows, h.rows);
    EXPECT_EQ(c.unionIds, h.unionIds);
    EXPECT_EQ(c.unionRows, h.unionRows);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(c.unordered[r], 0u);
      EXPECT_EQ(h.unordered[r], 0u);
    }
    EXPECT_EQ(h.badAt[2], 4u);
    EXPECT_EQ(c.badAt[2], 4u);
    EXPECT_EQ(c.badAt[0] + c.badAt[1], 0u);
  }
}

// Split's stage-1 cut: every key's lower bound in every index set, against
// the host executor and std::lower_bound.
TEST(CudaExecutorSections, LowerBoundsSameAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("LowerBoundsSameAsTheHost");
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  for (const IndexSet& s : indexSets(g)) {
    SCOPED_TRACE(s.name);
    std::vector<uint64_t> keys{0, s.begin, s.end, s.end + 1};
    for (int i = 0; i < 300; ++i) keys.push_back(s.begin + g() % (s.end - s.begin + 1));
    for (uint32_t i : s.indices) keys.push_back(i);  // a key equal to an index: that index is not below it
    auto run = [&](Executor& ex, std::vector<uint64_t>* out) -> Status {
      ExecMemory idx, k, o;
      SPCCL_RETURN_IF_ERROR(idx.ensure(ex, s.indices.size() * sizeof(uint32_t) + 4));
      SPCCL_RETURN_IF_ERROR(k.ensure(ex, keys.size() * sizeof(uint64_t)));
      SPCCL_RETURN_IF_ERROR(o.ensure(ex, keys.size() * sizeof(uint64_t)));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(idx.get(), s.indices.data(), s.indices.size() * sizeof(uint32_t)));
      SPCCL_RETURN_IF_ERROR(ex.fromHost(k.get(), keys.data(), keys.size() * sizeof(uint64_t)));
      SPCCL_RETURN_IF_ERROR(
          ex.lowerBounds(idx.get<uint32_t>(), s.indices.size(), k.get<uint64_t>(), keys.size(), o.get<uint64_t>()));
      out->resize(keys.size());
      SPCCL_RETURN_IF_ERROR(ex.toHost(out->data(), o.get(), keys.size() * sizeof(uint64_t)));
      return ex.settle();
    };
    std::vector<uint64_t> h, c;
    STATUS_ASSERT(run(hostEx, &h));
    STATUS_ASSERT(run(cudaEx, &c));
    EXPECT_EQ(c, h);
    for (size_t i = 0; i < keys.size(); ++i)
      ASSERT_EQ(h[i], static_cast<uint64_t>(std::lower_bound(s.indices.begin(), s.indices.end(), keys[i]) -
                                            s.indices.begin()))
          << "key " << keys[i];
  }
}

// A section as the test builds it in host memory; sumOn() hands the
// executor a WireSection over copies of it in executor memory.
struct TestSection {
  bool dense = false;
  IndexEncoding encoding = IndexEncoding::kCoo32;
  uint64_t nnz = 0;
  std::vector<uint32_t> indices;          // kCoo32
  std::vector<uint32_t> pairs;            // the pairs' indices whatever the encoding (the expected sum)
  std::vector<unsigned char> indexBytes;  // kDelta, kBitmap: the section, then what follows up to maxBytes
  size_t minBytes = 0;
  std::vector<unsigned char> values;  // nnz wire values
  core::ValueType valueType = core::ValueType::kFloat32;
  int scaleExp = 0;
};

std::vector<unsigned char> wireValues(uint64_t n, core::ValueType vt, int scaleExp, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<unsigned char> v(n * core::wireValueBytes(vt) + 4);
  for (uint64_t j = 0; j < n; ++j) core::storeWireValue(v.data(), j, d(g) * 8.0f, vt, scaleExp);
  return v;
}

// Pairs in encoding e, their index section followed by a few zero bytes (the
// stream's padding), indexMinBytes a few bytes below its end.
TestSection pairsSection(IndexEncoding e, const std::vector<uint32_t>& idx, uint64_t begin, uint64_t end,
                         core::ValueType vt, int scaleExp, std::mt19937_64& g) {
  TestSection t;
  t.encoding = e;
  t.nnz = idx.size();
  t.valueType = vt;
  t.scaleExp = scaleExp;
  t.values = wireValues(t.nnz, vt, scaleExp, g);
  t.pairs = idx;
  if (e == IndexEncoding::kCoo32) {
    t.indices = idx;
    return t;
  }
  t.indexBytes = codecIndexSection(e, idx, begin, end);
  const size_t size = t.indexBytes.size();
  t.minBytes = size - std::min<size_t>(size, g() % 8);
  t.indexBytes.resize(size + g() % 8, 0);
  return t;
}

TestSection denseSection(uint64_t len, core::ValueType vt, int scaleExp, std::mt19937_64& g) {
  TestSection t;
  t.dense = true;
  t.nnz = len;
  t.valueType = vt;
  t.scaleExp = scaleExp;
  t.values = wireValues(len, vt, scaleExp, g);
  return t;
}

template <typename T>
Status uploadVector(Executor& ex, std::deque<ExecMemory>& mem, const std::vector<T>& v, const T** at) {
  ExecMemory& m = mem.emplace_back();
  SPCCL_RETURN_IF_ERROR(m.ensure(ex, std::max<size_t>(v.size(), 1) * sizeof(T)));
  SPCCL_RETURN_IF_ERROR(ex.fromHost(m.get(), v.data(), v.size() * sizeof(T)));
  *at = m.get<const T>();
  return Status::ok();
}

struct SumOutcome {
  std::vector<float> out;  // outBase .. rangeEnd + kOutGuard
  std::vector<IndexCheck> checks;
};
constexpr uint64_t kOutGuard = 5;

// The executor's WireSections over copies of the sections in its memory (mem).
Status uploadSections(Executor& ex, const std::vector<TestSection>& sections, uint64_t begin, uint64_t end,
                      std::deque<ExecMemory>& mem, std::vector<WireSection>* wire) {
  for (const TestSection& t : sections) {
    WireSection w{};
    w.dense = t.dense;
    w.nnz = t.nnz;
    w.encoding = t.encoding;
    w.indices = nullptr;
    w.indexBytes = nullptr;
    if (!t.dense && t.encoding == IndexEncoding::kCoo32)
      SPCCL_RETURN_IF_ERROR(uploadVector(ex, mem, t.indices, &w.indices));
    if (!t.dense && t.encoding != IndexEncoding::kCoo32)
      SPCCL_RETURN_IF_ERROR(uploadVector(ex, mem, t.indexBytes, &w.indexBytes));
    w.indexMinBytes = t.minBytes;
    w.indexMaxBytes = t.indexBytes.size();
    const unsigned char* values = nullptr;
    SPCCL_RETURN_IF_ERROR(uploadVector(ex, mem, t.values, &values));
    w.values = values;
    w.valueType = t.valueType;
    w.scaleExp = t.scaleExp;
    w.rangeBegin = begin;
    w.rangeEnd = end;
    wire->push_back(w);
  }
  return Status::ok();
}

// reduceSections over [begin, end) into an out that starts a few elements
// before the range and ends a few after it, all of it poisoned first.
Status sumOn(Executor& ex, const std::vector<TestSection>& sections, uint64_t begin, uint64_t end, SumOutcome* o) {
  std::deque<ExecMemory> mem;
  std::vector<WireSection> wire;
  SPCCL_RETURN_IF_ERROR(uploadSections(ex, sections, begin, end, mem, &wire));
  const uint64_t outBase = begin - std::min<uint64_t>(begin, 3);
  const size_t n = end + kOutGuard - outBase;
  ExecMemory out;
  SPCCL_RETURN_IF_ERROR(out.ensure(ex, n * sizeof(float)));
  SPCCL_RETURN_IF_ERROR(ex.fill(out.get(), 0x7f, n * sizeof(float)));  // 3.39e38: never a sum here
  o->checks.assign(sections.size(), IndexCheck{IndexFault::kBitmapCount, 12345, 6789});
  SPCCL_RETURN_IF_ERROR(ex.reduceSections(wire.data(), wire.size(), out.get<float>(), outBase, o->checks.data()));
  o->out.resize(n);
  SPCCL_RETURN_IF_ERROR(ex.toHost(o->out.data(), out.get(), n * sizeof(float)));
  return ex.settle();
}

// The fault, and for a bad index where it is, the same (the other fields
// say nothing for the other faults).
void expectSameCheck(const IndexCheck& c, const IndexCheck& h, size_t r) {
  EXPECT_EQ(static_cast<int>(c.fault), static_cast<int>(h.fault)) << "section " << r;
  if (c.fault == IndexFault::kBadIndex && h.fault == IndexFault::kBadIndex) {
    EXPECT_EQ(c.index, h.index) << "section " << r;
    EXPECT_EQ(c.position, h.position) << "section " << r;
  }
}

// Sums out of range must not be written by either executor: the elements
// before and after the range keep their poison.
void expectGuardsKept(const SumOutcome& o, uint64_t begin, uint64_t end, uint64_t outBase) {
  uint32_t poison;
  std::memset(&poison, 0x7f, sizeof poison);
  for (uint64_t i = outBase; i < begin; ++i) EXPECT_EQ(bitsOf(o.out[i - outBase]), poison) << "before the range";
  for (uint64_t i = end; i < end + kOutGuard; ++i) EXPECT_EQ(bitsOf(o.out[i - outBase]), poison) << "past the range";
}

struct SumCase {
  std::string name;
  uint64_t begin, end;
  std::vector<TestSection> sections;
};

void compareSums(const SumCase& sc, bool expectPass) {
  SCOPED_TRACE(sc.name);
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  SumOutcome h, c;
  STATUS_ASSERT(sumOn(hostEx, sc.sections, sc.begin, sc.end, &h));
  STATUS_ASSERT(sumOn(cudaEx, sc.sections, sc.begin, sc.end, &c));
  ASSERT_EQ(c.checks.size(), sc.sections.size());
  bool pass = true;
  for (size_t r = 0; r < c.checks.size(); ++r) {
    expectSameCheck(c.checks[r], h.checks[r], r);
    pass = pass && c.checks[r].fault == IndexFault::kNone;
  }
  EXPECT_EQ(pass, expectPass);
  const uint64_t outBase = sc.begin - std::min<uint64_t>(sc.begin, 3);
  expectGuardsKept(c, sc.begin, sc.end, outBase);
  expectGuardsKept(h, sc.begin, sc.end, outBase);
  if (!pass) return;  // the range holds no meaningful values
  // +0, then each section's values in order.
  std::vector<float> want(c.out.size());
  std::memset(want.data(), 0x7f, want.size() * sizeof(float));
  std::fill(want.begin() + static_cast<std::ptrdiff_t>(sc.begin - outBase),
            want.begin() + static_cast<std::ptrdiff_t>(sc.end - outBase), 0.0f);
  for (const TestSection& t : sc.sections)
    for (uint64_t j = 0; j < t.nnz; ++j)
      want[(t.dense ? sc.begin + j : t.pairs[j]) - outBase] +=
          core::loadWireValue(t.values.data(), j, t.valueType, t.scaleExp);
  EXPECT_EQ(firstFloatMismatch(c.out.data(), want.data(), want.size()), want.size()) << "not the sum in order";
  ASSERT_EQ(c.out.size(), h.out.size());
  const size_t at = firstFloatMismatch(c.out.data(), h.out.data(), c.out.size());
  EXPECT_EQ(at, c.out.size()) << "first differing element " << at + outBase;
}

TEST(CudaExecutorSections, ReduceSectionsSameSumsAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("ReduceSectionsSameSumsAsTheHost");
  const IndexEncoding encodings[3] = {IndexEncoding::kCoo32, IndexEncoding::kDelta, IndexEncoding::kBitmap};
  struct Range {
    uint64_t begin, end;
  };
  // A length that is not a multiple of 8 (the bitmap's last byte), and one
  // with gaps past 2^21.
  for (Range rg : {Range{1000, 1000 + 4093}, Range{1, 1 + kGapRange}}) {
    const uint64_t len = rg.end - rg.begin;
    for (core::ValueType vt : {core::ValueType::kFloat32, core::ValueType::kFloat16, core::ValueType::kBfloat16,
                               core::ValueType::kFloat8e4m3}) {
      const int scaleExp = vt == core::ValueType::kFloat8e4m3 ? -4 : 0;
      for (size_t count = 1; count <= 4; ++count) {
        for (int trial = 0; trial < 3; ++trial) {
          SumCase sc{std::string(valueName(vt)) + " len " + std::to_string(len) + " x" + std::to_string(count) +
                         " trial " + std::to_string(trial),
                     rg.begin,
                     rg.end,
                     {}};
          for (size_t r = 0; r < count; ++r) {
            if (count >= 2 && r == 1) {  // one dense section among the pairs
              sc.sections.push_back(denseSection(len, vt, scaleExp, g));
              continue;
            }
            std::vector<uint32_t> idx;  // kind 0: none
            const size_t kind = (r + static_cast<size_t>(trial)) % 4;
            if (kind == 1) idx = randomIndices(rg.begin, rg.end, 1 + g() % 3, g);
            if (kind == 2) idx = randomIndices(rg.begin + 1, rg.end - 1, 40, g, {rg.begin, rg.end - 1});
            if (kind == 3)
              idx =
                  len <= 8192 ? bernoulliIndices(rg.begin, rg.end, 0.6, g) : randomIndices(rg.begin, rg.end, 20000, g);
            const IndexEncoding e = encodings[(r + count + static_cast<size_t>(trial)) % 3];
            sc.sections.push_back(pairsSection(e, idx, rg.begin, rg.end, vt, scaleExp, g));
          }
          compareSums(sc, true);
        }
      }
    }
  }
}

// Delta index bytes of idx with the varint of position p replaced by `bad`.
std::vector<unsigned char> deltaWithVarint(const std::vector<uint32_t>& idx, size_t p, uint64_t begin, uint64_t end,
                                           const std::vector<unsigned char>& bad) {
  const std::vector<uint32_t> head(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(p));
  std::vector<unsigned char> bytes = codecIndexSection(IndexEncoding::kDelta, head, begin, end);
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  bytes.resize(bytes.size() + (idx.size() - p - 1), 0);  // the rest: gaps of 0, never reached
  return bytes;
}

TEST(CudaExecutorSections, CorruptSectionsSameFindingsAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("CorruptSectionsSameFindingsAsTheHost");
  const uint64_t b = 1000, e = 1000 + 4093, len = e - b;
  const core::ValueType vt = core::ValueType::kFloat16;
  // Well below the range's end: moving the last index to it takes a 2-byte varint.
  const std::vector<uint32_t> idx = randomIndices(b + 1, e - 200, 100, g, {b + 2});
  const uint64_t nnz = idx.size(), p = nnz / 2;
  struct Corrupt {
    std::string name;
    TestSection section;
    IndexFault fault;
    uint64_t index = 0, position = 0;  // kBadIndex
  };
  std::vector<Corrupt> cases;
  auto coo = [&](const std::vector<uint32_t>& v) { return pairsSection(IndexEncoding::kCoo32, v, b, e, vt, 0, g); };
  {
    std::vector<uint32_t> v = idx;
    v[p] = static_cast<uint32_t>(e + 5);
    cases.push_back({"coo past the range", coo(v), IndexFault::kBadIndex, e + 5, p});
    v = idx;
    v[0] = static_cast<uint32_t>(b - 1);
    cases.push_back({"coo before the range", coo(v), IndexFault::kBadIndex, b - 1, 0});
    v = idx;
    v[p] = v[p - 1];
    cases.push_back({"coo repeated", coo(v), IndexFault::kBadIndex, v[p], p});
    v = idx;
    std::swap(v[p], v[p + 1]);
    cases.push_back({"coo decreasing", coo(v), IndexFault::kBadIndex, v[p + 1], p + 1});
  }
  auto delta = [&](std::vector<unsigned char> bytes, size_t minBytes) {
    TestSection t = pairsSection(IndexEncoding::kDelta, idx, b, e, vt, 0, g);
    t.indexBytes = std::move(bytes);
    t.minBytes = minBytes;
    return t;
  };
  const std::vector<unsigned char> valid = codecIndexSection(IndexEncoding::kDelta, idx, b, e);
  {
    std::vector<uint32_t> v = idx;
    v.back() = static_cast<uint32_t>(e + 3);  // its gap still decodes
    cases.push_back({"delta past the range", pairsSection(IndexEncoding::kDelta, v, b, e, vt, 0, g),
                     IndexFault::kBadIndex, e + 3, nnz - 1});
    // The last index far from the one before: a varint of 2 bytes, cut.
    v = idx;
    v.back() = static_cast<uint32_t>(e - 1);
    std::vector<unsigned char> bytes = codecIndexSection(IndexEncoding::kDelta, v, b, e);
    ASSERT_NE(bytes[bytes.size() - 2] & 0x80, 0) << "the last varint must be multi-byte";
    bytes.pop_back();
    TestSection cut = pairsSection(IndexEncoding::kDelta, v, b, e, vt, 0, g);
    cut.indexBytes = bytes;
    cut.minBytes = 0;
    cases.push_back({"delta truncated varint", cut, IndexFault::kVarint});
    cases.push_back({"delta 6-byte varint",
                     delta(deltaWithVarint(idx, p, b, e, {0x80, 0x80, 0x80, 0x80, 0x80, 0x00}), 0),
                     IndexFault::kVarint});
    cases.push_back({"delta gap past 32 bits", delta(deltaWithVarint(idx, p, b, e, {0xff, 0xff, 0xff, 0xff, 0x1f}), 0),
                     IndexFault::kVarint});
    std::vector<unsigned char> padded = valid;
    padded.insert(padded.end(), {0, 0, 7, 0});
    cases.push_back({"delta non-zero padding", delta(padded, valid.size()), IndexFault::kPadding});
    padded = valid;
    padded.insert(padded.end(), {0, 0, 0, 0});
    cases.push_back({"delta ends before its minimum", delta(padded, valid.size() + 2), IndexFault::kSectionSize});
    cases.push_back({"delta empty but non-zero bytes",
                     [&] {
                       TestSection t = pairsSection(IndexEncoding::kDelta, {}, b, e, vt, 0, g);
                       t.indexBytes = {0, 3, 0};
                       t.minBytes = 0;
                       return t;
                     }(),
                     IndexFault::kPadding});
  }
  auto bitmap = [&](std::vector<unsigned char> bytes, uint64_t n) {
    TestSection t = pairsSection(IndexEncoding::kBitmap, idx, b, e, vt, 0, g);
    t.indexBytes = std::move(bytes);
    t.minBytes = 0;
    t.nnz = n;
    t.values = wireValues(n, vt, 0, g);
    return t;
  };
  {
    const std::vector<unsigned char> map = codecIndexSection(IndexEncoding::kBitmap, idx, b, e);
    ASSERT_NE(len % 8, 0u);
    std::vector<unsigned char> m = map;
    m.back() = static_cast<unsigned char>(m.back() | (1u << (len % 8)));
    cases.push_back({"bitmap bit past the range", bitmap(m, nnz + 1), IndexFault::kBitmapPastRange});
    cases.push_back({"bitmap count too high", bitmap(map, nnz + 1), IndexFault::kBitmapCount});
    cases.push_back({"bitmap count too low", bitmap(map, nnz - 1), IndexFault::kBitmapCount});
    m = map;
    m.insert(m.end(), {0, 0x40, 0});
    cases.push_back({"bitmap non-zero padding", bitmap(m, nnz), IndexFault::kPadding});
  }
  host::HostExecutor hostEx;
  cuda::CudaExecutor cudaEx;
  for (const Corrupt& k : cases) {
    // Alone, and between valid sections (the others still pass).
    for (bool among : {false, true}) {
      SCOPED_TRACE(k.name + (among ? " among others" : " alone"));
      SumCase sc{k.name, b, e, {}};
      if (among) sc.sections.push_back(pairsSection(IndexEncoding::kDelta, idx, b, e, vt, 0, g));
      sc.sections.push_back(k.section);
      if (among) sc.sections.push_back(denseSection(len, vt, 0, g));
      const size_t at = among ? 1 : 0;
      SumOutcome h, c;
      STATUS_ASSERT(sumOn(hostEx, sc.sections, b, e, &h));
      STATUS_ASSERT(sumOn(cudaEx, sc.sections, b, e, &c));
      for (size_t r = 0; r < sc.sections.size(); ++r) {
        expectSameCheck(c.checks[r], h.checks[r], r);
        EXPECT_EQ(static_cast<int>(c.checks[r].fault), static_cast<int>(r == at ? k.fault : IndexFault::kNone))
            << "section " << r;
      }
      if (k.fault == IndexFault::kBadIndex) {
        EXPECT_EQ(c.checks[at].index, k.index);
        EXPECT_EQ(c.checks[at].position, k.position);
      }
      expectGuardsKept(c, b, e, b - 3);
      expectGuardsKept(h, b, e, b - 3);
    }
  }
}

// Several calls before one settle(), more sections than a first allocation
// of check slots holds: every finding reaches its own IndexCheck.
TEST(CudaExecutorSections, ManySectionsBeforeOneSettle) {
  SPCCL_REQUIRE_DEVICE();
  SCOPED_TRACE(seedTrace());
  std::mt19937_64 g = rngFor("ManySectionsBeforeOneSettle");
  const uint64_t b = 0, e = 512;
  const core::ValueType vt = core::ValueType::kFloat32;
  std::vector<TestSection> sections;
  std::vector<IndexFault> want;
  for (int r = 0; r < 50; ++r) {
    std::vector<uint32_t> idx = randomIndices(b, e, 10, g);
    if (r % 7 == 3) idx.back() = static_cast<uint32_t>(e + r);
    sections.push_back(pairsSection(IndexEncoding::kCoo32, idx, b, e, vt, 0, g));
    want.push_back(r % 7 == 3 ? IndexFault::kBadIndex : IndexFault::kNone);
  }
  cuda::CudaExecutor ex;
  std::deque<ExecMemory> mem;
  std::vector<WireSection> wire;
  STATUS_ASSERT(uploadSections(ex, sections, b, e, mem, &wire));
  ExecMemory out;
  STATUS_ASSERT(out.ensure(ex, e * sizeof(float)));
  std::vector<IndexCheck> checks(3 * wire.size());
  for (size_t call = 0; call < 3; ++call)  // 150 sections: past the first 64 slots
    STATUS_ASSERT(ex.reduceSections(wire.data(), wire.size(), out.get<float>(), 0, checks.data() + call * wire.size()));
  STATUS_ASSERT(ex.settle());
  for (size_t i = 0; i < checks.size(); ++i)
    EXPECT_EQ(static_cast<int>(checks[i].fault), static_cast<int>(want[i % want.size()])) << i;
}

// Needs no device: the refusal happens before any CUDA call.
// The alltoall rows' operations: selection (rows with NaN/Inf past the
// slot) with its values, compaction, gather of one block (the same values), positions narrowed and widened
// back (and a corrupted section's finding), scatter of fp8 values.
struct RowsOutcome {
  std::vector<uint32_t> counts, positions;
  std::vector<unsigned char> selected, gathered, narrowed, fp8, scattered;  // selected: bf16, compacted
  std::vector<uint32_t> widened;
  uint64_t bad = 0, badCorrupt = 0;
  uint32_t maxKey = 0;
  std::vector<unsigned char> int8Scales, int8Codes;  // every row's, from the fp32 values
  std::vector<float> int8Decoded;
  uint64_t badScale = 0, badScaleCorrupt = 0;
};

TEST(CudaExecutorSections, RowOperationsSameBitsAsTheHost) {
  SPCCL_REQUIRE_DEVICE();
  constexpr uint64_t kRows = 37, kBlockRows = 12;
  constexpr uint32_t kLen = 200, kKeep = 7;
  std::mt19937_64 g(31);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<uint16_t> data(kRows * kLen);
  for (size_t i = 0; i < data.size(); ++i) data[i] = core::floatToHalfBits(nd(g));
  for (uint64_t r = 0; r < kRows; r += 5)  // more NaN/Inf than the slack in some rows
    for (uint32_t e = 0; e < 12; ++e) data[r * kLen + e * 13] = e % 2 ? 0x7c00 : 0x7e00;
  const auto run = [&](Executor& ex, RowsOutcome* o) -> Status {
    ExecMemory in, strided, stridedValues, counts, offsets, positions, compactValues, gathered, narrowed, widened,
        staged, fp8, out;
    SPCCL_RETURN_IF_ERROR(in.ensure(ex, data.size() * 2));
    SPCCL_RETURN_IF_ERROR(ex.fromHost(in.get(), data.data(), data.size() * 2));
    SPCCL_RETURN_IF_ERROR(strided.ensure(ex, kRows * kLen * 4));
    SPCCL_RETURN_IF_ERROR(counts.ensure(ex, kRows * 4));
    SPCCL_RETURN_IF_ERROR(stridedValues.ensure(ex, kRows * kLen * 2));
    SPCCL_RETURN_IF_ERROR(ex.selectRows(in.get(), spcclFloat16, kRows, kLen, kKeep, core::ValueType::kBfloat16,
                                        strided.get<uint32_t>(), stridedValues.get(), kLen, counts.get<uint32_t>()));
    o->counts.resize(kRows);
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->counts.data(), counts.get(), kRows * 4));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    std::vector<uint64_t> off(kRows + 1, 0);
    for (uint64_t r = 0; r < kRows; ++r) off[r + 1] = off[r] + o->counts[r];
    const uint64_t nnz = off[kRows];
    SPCCL_RETURN_IF_ERROR(offsets.ensure(ex, off.size() * 8));
    SPCCL_RETURN_IF_ERROR(ex.fromHost(offsets.get(), off.data(), off.size() * 8));
    SPCCL_RETURN_IF_ERROR(positions.ensure(ex, nnz * 4));
    SPCCL_RETURN_IF_ERROR(compactValues.ensure(ex, nnz * 2));
    SPCCL_RETURN_IF_ERROR(ex.compactRows(strided.get<uint32_t>(), stridedValues.get(), 2, kLen, offsets.get<uint64_t>(),
                                         kRows, positions.get<uint32_t>(), compactValues.get()));
    // Block 2 (rows 2*kBlockRows ...): offsets from the middle of the array.
    const uint64_t b0 = off[2 * kBlockRows], bn = off[3 * kBlockRows] - b0;
    SPCCL_RETURN_IF_ERROR(gathered.ensure(ex, bn * 2));
    SPCCL_RETURN_IF_ERROR(ex.gatherRows(in.get<uint16_t>() + 2 * kBlockRows * kLen, spcclFloat16, kBlockRows, kLen,
                                        positions.get<uint32_t>() + b0, offsets.get<uint64_t>() + 2 * kBlockRows,
                                        core::ValueType::kBfloat16, gathered.get()));
    SPCCL_RETURN_IF_ERROR(narrowed.ensure(ex, nnz));
    SPCCL_RETURN_IF_ERROR(ex.narrowPositions(positions.get<uint32_t>(), nnz, 1, narrowed.get<unsigned char>()));
    SPCCL_RETURN_IF_ERROR(widened.ensure(ex, nnz * 4));
    SPCCL_RETURN_IF_ERROR(ex.widenPositions(narrowed.get<unsigned char>(), 1, offsets.get<uint64_t>(), kRows, kLen,
                                            widened.get<uint32_t>(), &o->bad));
    // Every value as fp32, then fp8 with the max rule's scale, scattered back.
    SPCCL_RETURN_IF_ERROR(staged.ensure(ex, nnz * 4));
    SPCCL_RETURN_IF_ERROR(ex.gatherRows(in.get(), spcclFloat16, kRows, kLen, positions.get<uint32_t>(),
                                        offsets.get<uint64_t>(), core::ValueType::kFloat32, staged.get()));
    SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(staged.get(), spcclFloat32, nullptr, nnz, &o->maxKey));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    const int scaleExp = core::fp8ScaleForMax(o->maxKey);
    SPCCL_RETURN_IF_ERROR(fp8.ensure(ex, nnz));
    SPCCL_RETURN_IF_ERROR(ex.toWire(staged.get<float>(), nnz, core::ValueType::kFloat8e4m3, scaleExp, fp8.get()));
    SPCCL_RETURN_IF_ERROR(out.ensure(ex, data.size() * 2));
    SPCCL_RETURN_IF_ERROR(ex.fill(out.get(), 0xa5, data.size() * 2));  // every element is written
    SPCCL_RETURN_IF_ERROR(ex.scatterRows(fp8.get(), core::ValueType::kFloat8e4m3, scaleExp, positions.get<uint32_t>(),
                                         offsets.get<uint64_t>(), kRows, kLen, spcclFloat16, out.get()));
    o->positions.resize(nnz);
    o->selected.resize(nnz * 2);
    o->gathered.resize(bn * 2);
    o->narrowed.resize(nnz);
    o->widened.resize(nnz);
    o->fp8.resize(nnz);
    o->scattered.resize(data.size() * 2);
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->positions.data(), positions.get(), nnz * 4));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->selected.data(), compactValues.get(), nnz * 2));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->gathered.data(), gathered.get(), bn * 2));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->narrowed.data(), narrowed.get(), nnz));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->widened.data(), widened.get(), nnz * 4));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->fp8.data(), fp8.get(), nnz));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->scattered.data(), out.get(), data.size() * 2));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    // The int8 codec over every row, decoded into zeroed fp32 rows; then row
    // 5's scale made NaN.
    ExecMemory scales, codes, decoded;
    SPCCL_RETURN_IF_ERROR(scales.ensure(ex, kRows * 4));
    SPCCL_RETURN_IF_ERROR(codes.ensure(ex, nnz));
    SPCCL_RETURN_IF_ERROR(decoded.ensure(ex, kRows * kLen * 4));
    SPCCL_RETURN_IF_ERROR(ex.fill(decoded.get(), 0xa5, kRows * kLen * 4));  // every element must be written
    SPCCL_RETURN_IF_ERROR(ex.encodeRowsInt8(staged.get<float>(), offsets.get<uint64_t>(), kRows,
                                            scales.get<unsigned char>(), codes.get<unsigned char>()));
    SPCCL_RETURN_IF_ERROR(ex.scatterRowsInt8(scales.get<unsigned char>(), codes.get<unsigned char>(),
                                             positions.get<uint32_t>(), offsets.get<uint64_t>(), kRows, kLen,
                                             spcclFloat32, decoded.get(), &o->badScale));
    o->int8Scales.resize(kRows * 4);
    o->int8Codes.resize(nnz);
    o->int8Decoded.resize(kRows * kLen);
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->int8Scales.data(), scales.get(), kRows * 4));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->int8Codes.data(), codes.get(), nnz));
    SPCCL_RETURN_IF_ERROR(ex.toHost(o->int8Decoded.data(), decoded.get(), kRows * kLen * 4));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    const float nan = std::nanf("");
    SPCCL_RETURN_IF_ERROR(ex.fromHost(scales.get<unsigned char>() + 5 * 4, &nan, 4));
    SPCCL_RETURN_IF_ERROR(ex.scatterRowsInt8(scales.get<unsigned char>(), codes.get<unsigned char>(),
                                             positions.get<uint32_t>(), offsets.get<uint64_t>(), kRows, kLen,
                                             spcclFloat32, decoded.get(), &o->badScaleCorrupt));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    // Row 9's second and third positions swapped: not increasing there.
    const uint64_t at = off[9] + 1;
    const unsigned char swapped[2] = {o->narrowed[at + 1], o->narrowed[at]};
    SPCCL_RETURN_IF_ERROR(ex.fromHost(narrowed.get<unsigned char>() + at, swapped, 2));
    SPCCL_RETURN_IF_ERROR(ex.widenPositions(narrowed.get<unsigned char>(), 1, offsets.get<uint64_t>(), kRows, kLen,
                                            widened.get<uint32_t>(), &o->badCorrupt));
    return ex.settle();
  };
  RowsOutcome h, c;
  ASSERT_NO_FATAL_FAILURE(onBothExecutors(run, &h, &c));
  EXPECT_GT(*std::max_element(h.counts.begin(), h.counts.end()), kKeep + 4) << "no row kept its NaN/Inf";
  EXPECT_EQ(c.counts, h.counts);
  EXPECT_EQ(c.positions, h.positions);
  EXPECT_EQ(c.selected, h.selected);
  EXPECT_EQ(c.gathered, h.gathered);
  EXPECT_EQ(c.narrowed, h.narrowed);
  EXPECT_EQ(h.widened, h.positions);
  EXPECT_EQ(c.widened, h.widened);
  EXPECT_EQ(h.bad, 0u);
  EXPECT_EQ(c.bad, 0u);
  EXPECT_EQ(c.maxKey, h.maxKey);
  EXPECT_EQ(c.fp8, h.fp8);
  EXPECT_EQ(c.scattered, h.scattered);
  EXPECT_EQ(c.int8Scales, h.int8Scales);
  EXPECT_EQ(c.int8Codes, h.int8Codes);
  ASSERT_EQ(c.int8Decoded.size(), h.int8Decoded.size());
  for (size_t j = 0; j < h.int8Decoded.size(); ++j) {  // NaN codes decode to NaN (compared as NaN, not by bytes)
    if (!(std::isnan(h.int8Decoded[j]) && std::isnan(c.int8Decoded[j]))) {
      ASSERT_EQ(c.int8Decoded[j], h.int8Decoded[j]) << "entry " << j;
    }
  }
  EXPECT_EQ(h.badScale, 0u);
  EXPECT_EQ(c.badScale, 0u);
  EXPECT_EQ(h.badScaleCorrupt, 6u);  // 1 + row 5
  EXPECT_EQ(c.badScaleCorrupt, 6u);
  EXPECT_EQ(h.badCorrupt, 10u);  // 1 + row 9
  EXPECT_EQ(c.badCorrupt, 10u);
}

}  // namespace
}  // namespace spccl::gputest
