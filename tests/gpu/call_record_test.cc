// The NCCL path's call record kernels (src/nccl/call_record.h).
#include <cstring>
#include <vector>

#include "src/nccl/call_record.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

// Asynchronous errors (call_record.h): a call record takes the pending
// bits and clears them; the fixed-capacity verdict counts every record's
// bits, and its own mismatch, one counter per kind.
TEST(GpuCallRecord, TakesAndClearsThePendingErrors) {
  SPCCL_REQUIRE_DEVICE();
  DeviceBuffer<uint32_t> pending(1);
  DeviceBuffer<cuda::CallRecord> rec(1);
  CUDA_ASSERT(pending.upload(std::vector<uint32_t>{cuda::kAsyncBadStream}));
  CUDA_ASSERT(rec.poison());
  cuda::CallRecordHeader h{};
  h.descriptor[0] = 7;
  h.capacity = 11;
  h.slots = 5;
  std::vector<cuda::CallRecord> got;
  std::vector<uint32_t> w;
  STATUS_ASSERT(cuda::writeCallRecordHeader(rec.get(), h, nullptr, pending.get(), nullptr));
  SYNC_ASSERT();
  CUDA_ASSERT(rec.download(got));
  CUDA_ASSERT(pending.download(w));
  EXPECT_EQ(got[0].asyncErrors, cuda::kAsyncBadStream);
  EXPECT_EQ(got[0].slots, 5u);
  EXPECT_EQ(got[0].unused, 0u) << "poisoned before: written";
  EXPECT_EQ(got[0].descriptor[0], 7);
  EXPECT_EQ(got[0].capacity, 11u);
  EXPECT_EQ(w[0], 0u) << "the pending bits are taken";
  // Nothing pending: the next record carries nothing.
  STATUS_ASSERT(cuda::writeCallRecordHeader(rec.get(), h, nullptr, pending.get(), nullptr));
  SYNC_ASSERT();
  CUDA_ASSERT(rec.download(got));
  EXPECT_EQ(got[0].asyncErrors, 0u);
  // No pending word: 0, and nothing is read.
  CUDA_ASSERT(pending.upload(std::vector<uint32_t>{cuda::kAsyncMismatch}));
  STATUS_ASSERT(cuda::writeCallRecordHeader(rec.get(), h, nullptr, nullptr, nullptr));
  SYNC_ASSERT();
  CUDA_ASSERT(rec.download(got));
  CUDA_ASSERT(pending.download(w));
  EXPECT_EQ(got[0].asyncErrors, 0u);
  EXPECT_EQ(w[0], cuda::kAsyncMismatch);
}

TEST(GpuCallRecord, FixedVerdictCountsEveryRecordsErrors) {
  SPCCL_REQUIRE_DEVICE();
  static_assert(cuda::kAsyncBadStream == 1u << 0 && cuda::kAsyncMismatch == 1u << 1 && cuda::kAsyncKinds == 2);
  const int ranks = 3;
  std::vector<cuda::CallRecord> recs(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::memset(&recs[r], 0, sizeof recs[r]);
    recs[r].descriptor[0] = 0x5a;
    recs[r].capacity = 100;
    recs[r].counts.selected = 40 + 50 * static_cast<uint64_t>(r);  // 40, 90, 140 (past the capacity)
  }
  recs[1].asyncErrors = cuda::kAsyncBadStream;  // one rank alone received bad pairs earlier
  recs[2].asyncErrors = cuda::kAsyncBadStream;  // and another: still one count for this verdict
  DeviceBuffer<cuda::CallRecord> dRecs(ranks);
  DeviceBuffer<uint64_t> nnz(ranks);
  DeviceBuffer<uint32_t> counters(cuda::kAsyncKinds);
  CUDA_ASSERT(counters.upload(std::vector<uint32_t>{0, 0}));
  std::vector<uint64_t> n;
  std::vector<uint32_t> c;
  auto resolve = [&] {  // the verdict on recs: n, and the counters so far in c
    CUDA_ASSERT(dRecs.upload(recs));
    STATUS_ASSERT(cuda::resolveFixedCounts(dRecs.get(), ranks, nnz.get(), counters.get(), nullptr));
    SYNC_ASSERT();
    CUDA_ASSERT(nnz.download(n));
    CUDA_ASSERT(counters.download(c));
  };
  ASSERT_NO_FATAL_FAILURE(resolve());
  EXPECT_EQ(n, (std::vector<uint64_t>{40, 90, 100})) << "carried errors do not refuse the call itself";
  EXPECT_EQ(c, (std::vector<uint32_t>{1, 0}));
  // A mismatch (another call's checked byte on rank 2): nothing accumulated, both kinds counted.
  recs[2].descriptor[3] ^= 1;
  ASSERT_NO_FATAL_FAILURE(resolve());
  EXPECT_EQ(n, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(c, (std::vector<uint32_t>{2, 1}));
  // A clean verdict counts nothing.
  for (cuda::CallRecord& r : recs) r.asyncErrors = 0;
  recs[2].descriptor[3] ^= 1;
  ASSERT_NO_FATAL_FAILURE(resolve());
  EXPECT_EQ(n, (std::vector<uint64_t>{40, 90, 100}));
  EXPECT_EQ(c, (std::vector<uint32_t>{2, 1}));
}

}  // namespace
}  // namespace spccl::gputest
