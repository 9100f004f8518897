// Exact paths: density 1, integer and double types, ops other than sum/avg,
// drop-in buffers under SPCCL_MIN_COMPRESS_COUNT, and fp16/bf16 dense sums.
// All must equal MPI_Allreduce on the same data bitwise.
#include <cstdlib>
#include <tuple>

#include <sys/mman.h>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr size_t kExactCount = 100003;  // above the default minimum, not divisible by 2, 3, 4

template <typename T>
std::vector<T> exactInput(size_t n, spcclRedOp_t op, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<T> v(n);
  for (T& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      // Near 1 for prod so that 4 ranks neither overflow nor underflow.
      x = op == spcclProd ? T(0.5) + std::uniform_real_distribution<T>(0, 1)(gen)
                          : std::normal_distribution<T>(0, 1)(gen);
    } else {
      x = op == spcclProd ? static_cast<T>(static_cast<int>(gen() % 7) - 3)
                          : static_cast<T>(static_cast<int64_t>(gen() % 2000001) - 1000000);
    }
  }
  return v;
}

class DensityOneTest : public MpiTest, public testing::WithParamInterface<std::tuple<spcclDataType_t, spcclRedOp_t>> {
 protected:
  template <typename T>
  void run(spcclDataType_t type, spcclRedOp_t op) {
    const size_t n = kExactCount;
    const spcclCompressConfig_t config = makeConfig(1.0f, SPCCL_ALGO_AUTO, spcclFloat32);
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, type, config, c));

    const std::vector<T> in = exactInput<T>(n, op, seedFor(11, rank_));
    const std::vector<T> ref = mpiReference(in, op);

    // Out of place, then in place.
    std::vector<T> out(n, T(7));
    const spcclResult_t r1 = spcclAllReduceCompressed(in.data(), out.data(), op, c.get(), nullptr);
    ASSERT_TRUE(okOnAllRanks(r1, comm_.get(), "spcclAllReduceCompressed (out of place)"));
    std::vector<T> inplace = in;
    const spcclResult_t r2 = spcclAllReduceCompressed(inplace.data(), inplace.data(), op, c.get(), nullptr);
    ASSERT_TRUE(okOnAllRanks(r2, comm_.get(), "spcclAllReduceCompressed (in place)"));

    const size_t d1 = firstBitDifference(out, ref);
    EXPECT_EQ(d1, n) << "out of place differs from MPI_Allreduce at index " << d1 << ": " << (d1 < n ? out[d1] : T())
                     << " vs " << (d1 < n ? ref[d1] : T());
    const size_t d2 = firstBitDifference(inplace, ref);
    EXPECT_EQ(d2, n) << "in place differs from MPI_Allreduce at index " << d2 << ": " << (d2 < n ? inplace[d2] : T())
                     << " vs " << (d2 < n ? ref[d2] : T());

    spcclStats_t s;
    ASSERT_TRUE(stats(c.get(), s));
    EXPECT_EQ(s.calls, 2u);
    EXPECT_EQ(s.compressedCalls, 0u) << "density 1 must take the exact path";
    EXPECT_EQ(s.lastAlgorithm, SPCCL_ALGO_DENSE);
  }
};

TEST_P(DensityOneTest, EqualsMpiAllreduceBitwise) {
  const auto [type, op] = GetParam();
  switch (type) {
    case spcclFloat32:
      run<float>(type, op);
      break;
    case spcclFloat64:
      run<double>(type, op);
      break;
    case spcclInt32:
      run<int32_t>(type, op);
      break;
    case spcclInt64:
      run<int64_t>(type, op);
      break;
    default:
      FAIL() << "no instantiation for " << typeName(type);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypesAllOps, DensityOneTest,
                         testing::Combine(testing::Values(spcclFloat32, spcclFloat64, spcclInt32, spcclInt64),
                                          testing::Values(spcclSum, spcclAvg, spcclProd, spcclMax, spcclMin)),
                         [](const testing::TestParamInfo<DensityOneTest::ParamType>& p) {
                           return std::string(typeName(std::get<0>(p.param))) + "_" + opName(std::get<1>(p.param));
                         });

size_t minCompressCount() {
  const char* s = std::getenv("SPCCL_MIN_COMPRESS_COUNT");
  return s != nullptr && *s != '\0' ? std::strtoull(s, nullptr, 10) : 65536;
}

// Drop-in calls: a float buffer under the minimum is exact; one above it is
// compressed with the env defaults (the positive control: shows the counter
// the first check relies on does move).
TEST_F(MpiTest, DropInBelowMinimumIsExact) {
  const size_t n = std::max<size_t>(1, minCompressCount() / 2 - 1);
  for (spcclRedOp_t op : {spcclSum, spcclAvg}) {
    SCOPED_TRACE(opName(op));
    const std::vector<float> in = exactInput<float>(n, op, seedFor(12, rank_, op));
    const std::vector<float> ref = mpiReference(in, op);
    std::vector<float> out(n);
    const spcclResult_t r = spcclAllReduce(in.data(), out.data(), n, spcclFloat32, op, comm_.get(), nullptr);
    ASSERT_TRUE(okOnAllRanks(r, comm_.get(), "spcclAllReduce"));
    const size_t d = firstBitDifference(out, ref);
    EXPECT_EQ(d, n) << "differs from MPI_Allreduce at index " << d;
    std::vector<float> inplace = in;
    const spcclResult_t r2 = spcclAllReduce(inplace.data(), inplace.data(), n, spcclFloat32, op, comm_.get(), nullptr);
    ASSERT_TRUE(okOnAllRanks(r2, comm_.get(), "spcclAllReduce (in place)"));
    const size_t d2 = firstBitDifference(inplace, ref);
    EXPECT_EQ(d2, n) << "in place differs from MPI_Allreduce at index " << d2;
  }
  spcclStats_t s{};
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.calls, 4u);
  EXPECT_EQ(s.compressedCalls, 0u);
  EXPECT_EQ(s.lastAlgorithm, SPCCL_ALGO_DENSE);

  // Above the minimum with sum: compressed by default (SPCCL_DISABLE unset here).
  const size_t big = minCompressCount() + 17;
  std::vector<float> in = gaussian(big, seedFor(13, rank_));
  std::vector<float> out(big);
  const spcclResult_t r = spcclAllReduce(in.data(), out.data(), big, spcclFloat32, spcclSum, comm_.get(), nullptr);
  ASSERT_TRUE(okOnAllRanks(r, comm_.get(), "spcclAllReduce (above the minimum)"));
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.calls, 5u);
  EXPECT_EQ(s.compressedCalls, 1u) << "a float sum above SPCCL_MIN_COMPRESS_COUNT is compressed "
                                      "with the env defaults (density 0.01)";
  EXPECT_TRUE(s.lastAlgorithm == SPCCL_ALGO_ALLGATHER || s.lastAlgorithm == SPCCL_ALGO_SPLIT) << s.lastAlgorithm;
  EXPECT_GT(s.lastThreshold, 0.0f);
  EXPECT_GT(s.lastSelected, 0u);

  // The other collectives add to the counters and leave the last* fields to
  // the last allreduce (spccl.h). The row-sparse allreduce once wrote its own
  // algorithm code (1 or 2, which read as SPCCL_ALGO_DENSE or _ALLGATHER)
  // there, and every collective overwrote lastSelected and lastThreshold.
  const spcclStats_t afterAllreduce = s;
  const int64_t ids[2] = {rank_, rank_ + 1};
  const float rows[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int64_t> outIds(static_cast<size_t>(size_) + 1);
  std::vector<float> outRows(outIds.size() * 4);
  size_t outN = 0;
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceRowSparse(ids, rows, 2, 4, spcclFloat32, outIds.data(), outRows.data(),
                                                   outIds.size(), &outN, comm_.get(), nullptr),
                           comm_.get(), "spcclAllReduceRowSparse"));
  std::vector<float> block(static_cast<size_t>(size_) * 8, 1.0f), gathered(block.size());
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(block.data(), gathered.data(), 8, spcclFloat32, comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAll"));
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(block.data(), gathered.data(), 8, spcclFloat32, comm_.get(), nullptr),
                           comm_.get(), "spcclAllGather"));
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.calls, 8u);
  EXPECT_EQ(s.lastAlgorithm, afterAllreduce.lastAlgorithm);
  EXPECT_EQ(s.lastSelected, afterAllreduce.lastSelected);
  EXPECT_TRUE(sameBits(s.lastThreshold, afterAllreduce.lastThreshold));
}

// A drop-in float sum above 2^32 - 1 elements takes the exact path: the
// compressed streams index with 32 bits (spcclCompressorCreate refuses such a
// count). Checked without moving 16 GiB: rank 0's call meets an exact int32
// call on the other ranks, so every rank fails at the call check before any
// data moves, and the message shows rank 0's call was an exact one too. (The
// compressed path selects over the whole buffer before that check; it once
// did here, and its threshold histogram's 32-bit counts wrapped on the 2^32
// zeros and the select wrote past its scratch. No error feedback and a tiny
// density, so that a library which still compresses here crashes without
// first allocating 32 GiB of residual.)
TEST_F(MpiTest, DropInAbove32BitIndicesIsExact) {
  if (size_ < 2) GTEST_SKIP() << "needs a second rank to meet";
  const size_t big = (size_t{1} << 32) + 16;
  void* reserved = MAP_FAILED;  // address space only: the call must not touch it
  if (rank_ == 0)
    reserved =
        mmap(nullptr, big * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (!allRanks(rank_ != 0 || reserved != MAP_FAILED)) GTEST_SKIP() << "cannot reserve 16 GiB of address space";
  CommPtr comm;
  {
    const ScopedEnv noFeedback("SPCCL_ERROR_FEEDBACK", "0"), tiny("SPCCL_ALLREDUCE_DENSITY", "1e-9");
    spcclComm_t c = nullptr;
    const spcclResult_t created = spcclCommInitMPI(&c, MPI_COMM_WORLD);
    comm.reset(c);
    ASSERT_TRUE(okOnAllRanks(created, nullptr, "spcclCommInitMPI"));
  }
  int32_t one = 1;
  const spcclResult_t r = rank_ == 0
                              ? spcclAllReduce(reserved, reserved, big, spcclFloat32, spcclSum, comm.get(), nullptr)
                              : spcclAllReduce(&one, &one, 1, spcclInt32, spcclSum, comm.get(), nullptr);
  const std::string message = spcclGetLastError(comm.get());
  if (reserved != MAP_FAILED) munmap(reserved, big * sizeof(float));
  EXPECT_EQ(r, spcclInvalidUsage) << message;
  EXPECT_EQ(message.find("compressed"), std::string::npos) << "rank 0's call compressed: " << message;
  if (rank_ == 0) {
    EXPECT_NE(message.find(std::to_string(big)), std::string::npos) << message;
  }
}

// Drop-in calls that are exact whatever their size: non-float types, and float
// buffers with ops other than sum/avg.
TEST_F(MpiTest, DropInExactTypesAndOps) {
  const size_t n = minCompressCount() + 5;
  {
    const std::vector<int32_t> in = exactInput<int32_t>(n, spcclSum, seedFor(14, rank_));
    const std::vector<int32_t> ref = mpiReference(in, spcclSum);
    std::vector<int32_t> out(n);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclInt32, spcclSum, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce int32"));
    EXPECT_EQ(firstBitDifference(out, ref), n);
  }
  {
    const std::vector<double> in = exactInput<double>(n, spcclSum, seedFor(15, rank_));
    const std::vector<double> ref = mpiReference(in, spcclSum);
    std::vector<double> out(n);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclFloat64, spcclSum, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce fp64"));
    EXPECT_EQ(firstBitDifference(out, ref), n);
  }
  for (spcclRedOp_t op : {spcclMax, spcclMin, spcclProd}) {
    SCOPED_TRACE(opName(op));
    const std::vector<float> in = exactInput<float>(n, op, seedFor(16, rank_, op));
    const std::vector<float> ref = mpiReference(in, op);
    std::vector<float> out(n);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, op, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce fp32"));
    EXPECT_EQ(firstBitDifference(out, ref), n);
  }
  spcclStats_t s{};
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.compressedCalls, 0u);
}

// ---------- fp16 / bf16 at density 1 ----------
//
// Send and receive buffers that overlap without being NCCL's in-place form
// (allgather: sendbuff == recvbuff on every rank, so not in place on rank > 0;
// alltoall and allreduce: sendbuff one element past recvbuff) once went to MPI
// aliased and came back silently wrong. They must give what separate buffers
// give.
TEST_F(MpiTest, OverlappingBuffersGiveTheSeparateBuffersResult) {
  const size_t P = static_cast<size_t>(size_);
  for (size_t n : {size_t{5}, size_t{1000}, size_t{100003}}) {
    SCOPED_TRACE(n);
    // Allgather, sendbuff == recvbuff.
    std::vector<int32_t> gather(n * P, -1);
    for (size_t i = 0; i < n; ++i) gather[i] = static_cast<int32_t>(rank_ * 1000003 + i);
    ASSERT_TRUE(okOnAllRanks(spcclAllGather(gather.data(), gather.data(), n, spcclInt32, comm_.get(), nullptr),
                             comm_.get(), "spcclAllGather (sendbuff == recvbuff)"));
    size_t bad = 0;
    for (size_t r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) bad += gather[r * n + i] != static_cast<int32_t>(r * 1000003 + i);
    EXPECT_EQ(bad, 0u) << "allgather with sendbuff == recvbuff";

    // Alltoall, sendbuff = recvbuff + 1.
    std::vector<int32_t> a2a(n * P + 1, -1);
    for (size_t j = 0; j < P; ++j)
      for (size_t i = 0; i < n; ++i) a2a[1 + j * n + i] = static_cast<int32_t>(rank_ * 7 + j * 1000003 + i);
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(a2a.data() + 1, a2a.data(), n, spcclInt32, comm_.get(), nullptr),
                             comm_.get(), "spcclAlltoAll (sendbuff = recvbuff + 1)"));
    bad = 0;
    for (size_t j = 0; j < P; ++j)
      for (size_t i = 0; i < n; ++i) bad += a2a[j * n + i] != static_cast<int32_t>(j * 7 + rank_ * 1000003 + i);
    EXPECT_EQ(bad, 0u) << "alltoall with sendbuff = recvbuff + 1";

    // Allreduce, sendbuff = recvbuff + 1 (exact: int32).
    std::vector<int32_t> mine(n);
    for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(i * (rank_ + 1));
    const std::vector<int32_t> ref = mpiReference(mine, spcclSum);
    std::vector<int32_t> ar(n + 1, -1);
    std::copy(mine.begin(), mine.end(), ar.begin() + 1);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(ar.data() + 1, ar.data(), n, spcclInt32, spcclSum, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce (sendbuff = recvbuff + 1)"));
    bad = 0;
    for (size_t i = 0; i < n; ++i) bad += ar[i] != ref[i];
    EXPECT_EQ(bad, 0u) << "allreduce with sendbuff = recvbuff + 1";
  }
}

// The exact dense path for half types reduces with an MPI user op: each
// application widens two halves to float, adds, and rounds back, so the result
// depends on the order in which MPI combines the ranks' buffers (a tree or ring
// that the test does not know for P > 2).
// - P == 2: one addition, a+b == b+a, so the result is round(float(a)+float(b))
//   bitwise. The inputs are kept within a factor 2^9 of each other in magnitude
//   so that float(a)+float(b) is exact (at most 11+10+1 bits) and rounding once
//   from float equals rounding the exact sum: any correct widening (float or
//   double) gives the same bits.
// - P > 2: P-1 roundings in an unknown order. Each is at most u times a partial
//   sum bounded by sum_r |x_r|, and the reference (exact float sum rounded once)
//   adds one more: |lib - ref| <= P * u * sum_r |x_r|, u = 2^-11 (fp16) or 2^-8
//   (bf16). Checked with that bound.
// - Small-integer inputs make every partial sum exactly representable, so the
//   result is order independent and checked bitwise on any P. max and min are
//   exact in any order, so they are bitwise on any P too.

using HalfBits = uint16_t;

float fromWire(HalfBits h, spcclDataType_t t) { return t == spcclFloat16 ? halfToFloat(h) : bf16ToFloat(h); }
HalfBits toWire(float f, spcclDataType_t t) { return t == spcclFloat16 ? floatToHalf(f) : floatToBf16(f); }

class HalfDensityOneTest : public MpiTest, public testing::WithParamInterface<spcclDataType_t> {
 protected:
  // Runs one density-1 call on a buffer of half bits.
  testing::AssertionResult reduce(const std::vector<HalfBits>& in, std::vector<HalfBits>& out, spcclRedOp_t op) {
    const spcclDataType_t type = GetParam();
    CompressorPtr c;
    testing::AssertionResult created = createCompressor(in.size(), type, makeConfig(1.0f, SPCCL_ALGO_AUTO, type), c);
    if (!created) return created;
    out.assign(in.size(), 0);
    return okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), op, c.get(), nullptr), comm_.get(),
                        "spcclAllReduceCompressed");
  }
};

TEST_P(HalfDensityOneTest, SumMatchesFloatReference) {
  const spcclDataType_t type = GetParam();
  const size_t n = kExactCount;
  std::mt19937_64 gen(seedFor(17, rank_));
  std::uniform_real_distribution<float> mag(1.0f / 64, 8.0f);
  std::vector<HalfBits> in(n);
  for (HalfBits& h : in) h = toWire((gen() & 1) ? mag(gen) : -mag(gen), type);

  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = fromWire(in[i], type);
  const std::vector<float> all = allgatherFloats(mine);

  std::vector<HalfBits> out;
  ASSERT_TRUE(reduce(in, out, spcclSum));

  const float u = type == spcclFloat16 ? 1.0f / 2048 : 1.0f / 256;
  size_t bad = 0, firstBad = n;
  for (size_t i = 0; i < n; ++i) {
    float exact = 0.0f, absSum = 0.0f;
    for (int r = 0; r < size_; ++r) {
      exact += all[static_cast<size_t>(r) * n + i];
      absSum += std::fabs(all[static_cast<size_t>(r) * n + i]);
    }
    const HalfBits ref = toWire(exact, type);
    const bool ok = size_ == 2 ? out[i] == ref
                               : std::fabs(fromWire(out[i], type) - exact) <= static_cast<float>(size_) * u * absSum;
    if (!ok && bad++ == 0) firstBad = i;
  }
  EXPECT_EQ(bad, 0u) << "first at index " << firstBad << ": got "
                     << (firstBad < n ? fromWire(out[firstBad], type) : 0.0f)
                     << (size_ == 2 ? " (bitwise check, 2 ranks)" : " (tolerance check)");
}

TEST_P(HalfDensityOneTest, ExactlyRepresentableSumAndMaxMinAreBitwise) {
  const spcclDataType_t type = GetParam();
  const size_t n = kExactCount;
  std::mt19937_64 gen(seedFor(18, rank_));
  std::vector<HalfBits> in(n);
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) {
    mine[i] = static_cast<float>(static_cast<int>(gen() % 17) - 8) * 0.25f;
    in[i] = toWire(mine[i], type);
  }
  const std::vector<float> all = allgatherFloats(mine);
  for (spcclRedOp_t op : {spcclSum, spcclMax, spcclMin}) {
    SCOPED_TRACE(opName(op));
    std::vector<HalfBits> out;
    ASSERT_TRUE(reduce(in, out, op));
    size_t bad = 0, firstBad = n;
    for (size_t i = 0; i < n; ++i) {
      float ref = all[i];
      for (int r = 1; r < size_; ++r) {
        const float x = all[static_cast<size_t>(r) * n + i];
        ref = op == spcclSum ? ref + x : op == spcclMax ? std::max(ref, x) : std::min(ref, x);
      }
      // Zeros are +0 (from the integer 0), so no -0/+0 ambiguity either.
      if (out[i] != toWire(ref, type) && bad++ == 0) firstBad = i;
    }
    EXPECT_EQ(bad, 0u) << "first at index " << firstBad;
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, HalfDensityOneTest, testing::Values(spcclFloat16, spcclBfloat16),
                         [](const testing::TestParamInfo<spcclDataType_t>& p) {
                           return std::string(typeName(p.param));
                         });

// fp16 avg of values whose average fits but whose sum does not: the exact
// path (count under SPCCL_MIN_COMPRESS_COUNT) once summed in fp16 and returned
// +Inf, where the compressed path (which sums in fp32) and ncclAvg return the
// average. Both paths must give 40000 on every rank.
TEST_F(MpiTest, HalfAvgDoesNotOverflowWhereTheAverageFits) {
  const uint16_t v = floatToHalf(40000.0f);  // 2 x 40000 > 65504, the largest fp16
  ASSERT_EQ(halfToFloat(v), 40000.0f);
  for (size_t n : {size_t{1}, size_t{1000}, minCompressCount() + 17}) {
    SCOPED_TRACE(n);
    std::vector<uint16_t> in(n, v), out(n, 0);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclFloat16, spcclAvg, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce (fp16 avg)"));
    // Compressed (count above the minimum): the entries not sent yet are 0.
    const bool compressed = n >= minCompressCount();
    auto bad = [&](const std::vector<uint16_t>& r) {
      size_t b = 0;
      for (uint16_t h : r) b += !(halfToFloat(h) == 40000.0f || (compressed && halfToFloat(h) == 0.0f));
      return b;
    };
    EXPECT_EQ(bad(out), 0u) << "out[0] = " << halfToFloat(out[0]);
    std::vector<uint16_t> inplace(n, v);
    ASSERT_TRUE(
        okOnAllRanks(spcclAllReduce(inplace.data(), inplace.data(), n, spcclFloat16, spcclAvg, comm_.get(), nullptr),
                     comm_.get(), "spcclAllReduce (fp16 avg, in place)"));
    EXPECT_EQ(bad(inplace), 0u) << "in place: inplace[0] = " << halfToFloat(inplace[0]);
  }
}

}  // namespace
}  // namespace spccl::test
