// Drop-in allgather: equals MPI_Allgather bitwise
// by default for every datatype, out of place and in place
// (sendbuff == recvbuff + rank*sendcount); with SPCCL_ALLGATHER_DENSITY < 1
// (ctest variant mpi_allgather_test_sparse) each rank's fp32/fp16/bf16 block
// keeps its own top k = ceil(density*sendcount) entries by magnitude (ties to
// the lower index, NaN/Inf always kept) and zeros elsewhere. Integer and fp64
// blocks stay exact. The output is the same on every rank either way.
//
// Reading of the specification taken here: the sparsified values travel exactly with
// the default SPCCL_VALUE_TYPE=fp32 (which holds every fp16/bf16 value), and
// rounded once to the wire type otherwise (variants mpi_allgather_test_sparse_
// fp16wire and _fp8wire; fp8: one scale per block from its largest finite kept
// |value|); no minimum size applies (the header names none for the allgather).
#include <limits>
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

const spcclDataType_t kAllTypes[] = {spcclInt8,   spcclUint8,   spcclInt32,   spcclUint32,  spcclInt64,
                                     spcclUint64, spcclFloat16, spcclFloat32, spcclFloat64, spcclBfloat16};

float allgatherDensity() { return envDensity("SPCCL_ALLGATHER_DENSITY"); }

bool sparsifies(spcclDataType_t t, size_t count) {
  return isCompressibleFloat(t) && allgatherDensity() < 1.0f && count > 0;
}

// What every rank must hold: the ranks' blocks (MPI_Allgather), each masked
// by its own top-k when the call sparsifies.
std::vector<unsigned char> expectedAllgather(const std::vector<unsigned char>& gathered, spcclDataType_t t,
                                             size_t count) {
  if (!sparsifies(t, count)) return gathered;
  const float d = allgatherDensity();
  return maskedThroughWire(gathered, gathered, static_cast<size_t>(worldSize()), count, t, rowKeepCount(count, d),
                           wireTypeFromEnv());
}

// Gaussian floats with ties (multiples of 0.5 on every third entry).
std::vector<unsigned char> floatInput(size_t n, spcclDataType_t t, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> v(n * typeSize(t));
  for (size_t i = 0; i < n; ++i) {
    const float x = i % 3 == 1 ? static_cast<float>(static_cast<int>(gen() % 9) - 4) * 0.5f : normal(gen);
    storeFromFloat(v.data(), i, x, t);
  }
  return v;
}

class AllGatherCheck : public MpiTest {
 protected:
  // Out of place and in place on `send`; checks both against the reference,
  // across ranks, and the counters.
  void check(spcclDataType_t type, size_t count, const std::vector<unsigned char>& send) {
    const size_t P = static_cast<size_t>(size_), es = typeSize(type), block = count * es;
    const bool sparse = sparsifies(type, count);
    const std::vector<unsigned char> want = expectedAllgather(mpiAllgatherBytes(send.data(), block), type, count);

    spcclStats_t s0, s1, s2;
    ASSERT_TRUE(commStats(s0));
    std::vector<unsigned char> sendCopy = send;
    std::vector<unsigned char> out(P * block, 0xA5);
    ASSERT_TRUE(okOnAllRanks(spcclAllGather(sendCopy.data(), out.data(), count, type, comm_.get(), nullptr),
                             comm_.get(), "spcclAllGather (out of place)"));
    ASSERT_TRUE(commStats(s1));
    EXPECT_TRUE(sendCopy == send) << "the send buffer of an out-of-place call was modified";
    Diff d = compareElements(out.data(), want.data(), P * count, type, sparse);
    EXPECT_EQ(d.count, 0u) << (sparse ? "sparsified" : "exact") << " out of place: "
                           << describeDiff(d, out.data(), want.data(), std::max<size_t>(count, 1), type);
    EXPECT_TRUE(identicalOnAllRanks(out.data(), P * count, es));

    std::vector<unsigned char> inplace(P * block, 0x5A);
    if (block > 0) std::memcpy(inplace.data() + static_cast<size_t>(rank_) * block, send.data(), block);
    ASSERT_TRUE(okOnAllRanks(spcclAllGather(inplace.data() + static_cast<size_t>(rank_) * block, inplace.data(), count,
                                            type, comm_.get(), nullptr),
                             comm_.get(), "spcclAllGather (in place)"));
    ASSERT_TRUE(commStats(s2));
    d = compareElements(inplace.data(), want.data(), P * count, type, sparse);
    EXPECT_EQ(d.count, 0u) << (sparse ? "sparsified" : "exact") << " in place: "
                           << describeDiff(d, inplace.data(), want.data(), std::max<size_t>(count, 1), type);
    EXPECT_TRUE(identicalOnAllRanks(inplace.data(), P * count, es));

    const uint64_t dense1 = (P - 1) * block;
    EXPECT_EQ(s1.calls - s0.calls, 1u);
    EXPECT_EQ(s2.calls - s1.calls, 1u);
    EXPECT_EQ(s1.denseBytes - s0.denseBytes, dense1);
    EXPECT_EQ(s2.denseBytes - s1.denseBytes, dense1);
    const size_t k = sparse ? rowKeepCount(count, allgatherDensity()) : count;
    if (!sparse) {
      EXPECT_EQ(s2.compressedCalls - s0.compressedCalls, 0u);
      EXPECT_EQ(s1.bytesSent - s0.bytesSent, dense1) << "an exact allgather sends the dense block";
      EXPECT_EQ(s2.bytesSent - s1.bytesSent, dense1) << "an exact allgather sends the dense block";
    } else if (k < count) {
      EXPECT_EQ(s2.compressedCalls - s0.compressedCalls, 2u);
      // Index/value pairs: at most a 4-byte index and a value of the wire type
      // per kept entry (16-bit data travels as itself under the default fp32),
      // plus a header and size exchange (<= 256 bytes) per peer.
      const uint64_t bound = (P - 1) * (k * (4 + wireValueBytes(ownValuesWire(type, wireTypeFromEnv()))) + 256);
      EXPECT_LE(s1.bytesSent - s0.bytesSent, bound) << "k " << k << " of " << count;
      EXPECT_LE(s2.bytesSent - s1.bytesSent, bound) << "k " << k << " of " << count;
      // 16-bit data under the default fp32 wire: its values travel as 2 bytes,
      // so at density 0.1 (about one index byte an entry) a peer gets less than
      // the 4 bytes an entry fp32 values alone would take.
      if (ownValuesWire(type, wireTypeFromEnv()) != wireTypeFromEnv() && k >= 1000) {
        EXPECT_LT(s1.bytesSent - s0.bytesSent, (P - 1) * k * 4) << "k " << k << " of " << count;
        EXPECT_LT(s2.bytesSent - s1.bytesSent, (P - 1) * k * 4) << "k " << k << " of " << count;
      }
    }
  }
};

class AllGatherTest : public AllGatherCheck, public testing::WithParamInterface<std::tuple<spcclDataType_t, size_t>> {};

TEST_P(AllGatherTest, EqualsMpiAllgatherOrOwnTopK) {
  const auto [type, count] = GetParam();
  const size_t es = typeSize(type);
  const uint64_t seed = seedFor(401, rank_, count * 16 + static_cast<uint64_t>(type));
  // Every bit pattern for exact calls; floats with ties for sparsified ones.
  check(type, count, sparsifies(type, count) ? floatInput(count, type, seed) : randomBytes(count * es, seed));
}

// 1001 and 70001: density * count (0.1 in the sparse variant) is far from an integer.
INSTANTIATE_TEST_SUITE_P(AllTypes, AllGatherTest,
                         testing::Combine(testing::ValuesIn(kAllTypes), testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                                                        size_t{1001}, size_t{70001})),
                         [](const testing::TestParamInfo<AllGatherTest::ParamType>& p) {
                           return std::string(typeName(std::get<0>(p.param))) + "_count" +
                                  std::to_string(std::get<1>(p.param));
                         });

// NaN/Inf and exact ties. Under the sparse variant: ties go to the lower
// index, and every NaN/Inf is kept, even when a block has more of them than k
// (count 7: k = 1 with three non-finite entries). The reading taken (the same
// as the header states for the rows call: "NaN/Inf always kept, even beyond
// that number"): NaN and Inf count as the largest magnitudes, so the block
// keeps max(k, #NaN/Inf) entries; with +-Inf alone this is nothing but "the k
// entries of largest magnitude". By default the call is exact.
using NonFiniteParam = std::tuple<spcclDataType_t, size_t, bool>;
class AllGatherNonFiniteTest : public AllGatherCheck, public testing::WithParamInterface<NonFiniteParam> {};

TEST_P(AllGatherNonFiniteTest, NonFiniteKeptTiesToLowerIndex) {
  const auto [type, count, withNan] = GetParam();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<unsigned char> send(count * typeSize(type));
  for (size_t i = 0; i < count; ++i) {
    // Magnitudes 0, 0.5, ..., 3 repeating: many exact ties, zeros of both signs.
    float x = static_cast<float>((i * 3 + static_cast<size_t>(rank_)) % 7) * 0.5f;
    if (i % 2) x = -x;
    storeFromFloat(send.data(), i, x, type);
  }
  const size_t r = static_cast<size_t>(rank_);
  storeFromFloat(send.data(), (2 + r) % count, withNan ? nan : inf, type);
  storeFromFloat(send.data(), (4 + r) % count, -inf, type);
  storeFromFloat(send.data(), (6 + r) % count, inf, type);
  check(type, count, send);
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, AllGatherNonFiniteTest,
                         testing::Combine(testing::Values(spcclFloat32, spcclFloat16, spcclBfloat16),
                                          testing::Values(size_t{7}, size_t{1001}), testing::Bool()),
                         [](const testing::TestParamInfo<NonFiniteParam>& p) {
                           return std::string(typeName(std::get<0>(p.param))) + "_count" +
                                  std::to_string(std::get<1>(p.param)) +
                                  (std::get<2>(p.param) ? "_nan_inf" : "_inf_only");
                         });

void expectInvalidArgument(spcclResult_t r, const std::string& what) {
  EXPECT_EQ(r, spcclInvalidArgument) << what << " returned " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                     << ")";
  const char* message = spcclGetLastError(nullptr);
  EXPECT_TRUE(message != nullptr && *message != '\0') << what << ": spcclGetLastError(NULL) is empty";
}

TEST_F(MpiTest, AllGatherInvalidArgumentsFailBeforeCommunicating) {
  const size_t count = 1001, P = static_cast<size_t>(size_);
  std::vector<float> send(count, 1.0f), recv(P * count);
  // One rank at a time, so a call that communicated first would hang.
  for (int turn = 0; turn < size_; ++turn) {
    if (rank_ == turn) {
      expectInvalidArgument(spcclAllGather(send.data(), recv.data(), count, spcclFloat32, nullptr, nullptr),
                            "spcclAllGather with a NULL comm");
      expectInvalidArgument(
          spcclAllGather(send.data(), recv.data(), count, invalidEnum<spcclDataType_t>(42), comm_.get(), nullptr),
          "spcclAllGather with datatype 42");
      expectInvalidArgument(spcclAllGather(nullptr, recv.data(), count, spcclFloat32, comm_.get(), nullptr),
                            "spcclAllGather with a NULL sendbuff");
      expectInvalidArgument(spcclAllGather(send.data(), nullptr, count, spcclFloat32, comm_.get(), nullptr),
                            "spcclAllGather with a NULL recvbuff");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Count 0 is a no-op that accepts NULL buffers (as in NCCL).
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(nullptr, nullptr, 0, spcclFloat32, comm_.get(), nullptr), comm_.get(),
                           "spcclAllGather with count 0"));
  // The communicator still works.
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(send.data(), recv.data(), count, spcclInt32, comm_.get(), nullptr),
                           comm_.get(), "spcclAllGather after the invalid calls"));
  const std::vector<unsigned char> want = mpiAllgatherBytes(send.data(), count * 4);
  EXPECT_EQ(std::memcmp(recv.data(), want.data(), want.size()), 0);
}

}  // namespace
}  // namespace spccl::test
