// Error handling (DESIGN.md: "every call returns a result code"): invalid arguments are rejected before any communication, and
// compressed calls whose counts differ between ranks fail on every rank
// instead of hanging or reading out of bounds.
#include <cstring>
#include <limits>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr size_t kBig = 100003;  // above the default SPCCL_MIN_COMPRESS_COUNT

// A value a C caller can pass but C++ may not static_cast to the enum (outside
// the enum's range is undefined behaviour): copy the int's representation.
template <typename E>
E badEnum(int value) {
  static_assert(sizeof(E) == sizeof(int));
  E e;
  std::memcpy(&e, &value, sizeof e);
  return e;
}
const spcclDataType_t kBadType = badEnum<spcclDataType_t>(42);
const spcclRedOp_t kBadOp = badEnum<spcclRedOp_t>(17);

// Non-fatal: these run on one rank at a time.
void expectInvalid(spcclResult_t r, const std::string& what) {
  EXPECT_EQ(r, spcclInvalidArgument) << what << " returned " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                     << ")";
  const char* message = spcclGetLastError(nullptr);
  EXPECT_TRUE(message != nullptr && *message != '\0') << what << ": spcclGetLastError(NULL) is empty";
}

class ErrorsTest : public MpiTest {
 protected:
  // Every call here must fail locally: if one communicated first, this rank
  // would wait for peers that are sitting in MPI_Barrier (the watchdog names
  // the test).
  void checkInvalidArgumentsLocally() {
    spcclComm_t comm = comm_.get();
    std::vector<float> send(kBig, 1.0f), recv(kBig);
    for (size_t n : {size_t{16}, kBig}) {
      const std::string at = " (count " + std::to_string(n) + ")";
      expectInvalid(spcclAllReduce(send.data(), recv.data(), n, spcclFloat32, spcclSum, nullptr, nullptr),
                    "spcclAllReduce with a NULL comm" + at);
      expectInvalid(spcclAllReduce(nullptr, recv.data(), n, spcclFloat32, spcclSum, comm, nullptr),
                    "spcclAllReduce with a NULL sendbuff" + at);
      expectInvalid(spcclAllReduce(send.data(), nullptr, n, spcclFloat32, spcclSum, comm, nullptr),
                    "spcclAllReduce with a NULL recvbuff" + at);
      expectInvalid(spcclAllReduce(send.data(), recv.data(), n, kBadType, spcclSum, comm, nullptr),
                    "spcclAllReduce with datatype 42" + at);
      expectInvalid(spcclAllReduce(send.data(), recv.data(), n, spcclFloat32, kBadOp, comm, nullptr),
                    "spcclAllReduce with op 17" + at);
    }

    const spcclCompressConfig_t good = makeConfig(0.01f, SPCCL_ALGO_AUTO, spcclFloat32);
    spcclCompressor_t out = nullptr;
    expectInvalid(spcclCompressorCreate(nullptr, kBig, spcclFloat32, &good, &out),
                  "spcclCompressorCreate with a NULL comm");
    expectInvalid(spcclCompressorCreate(comm, kBig, kBadType, &good, &out), "spcclCompressorCreate with datatype 42");
    expectInvalid(spcclCompressorCreate(comm, kBig, spcclFloat32, &good, nullptr),
                  "spcclCompressorCreate with a NULL out");
    expectInvalid(spcclCompressConfigInit(nullptr), "spcclCompressConfigInit(NULL)");

    struct BadConfig {
      const char* what;
      void (*apply)(spcclCompressConfig_t&);
    };
    const BadConfig bad[] = {
        {"density 0", [](spcclCompressConfig_t& c) { c.density = 0.0f; }},
        {"density 1.5", [](spcclCompressConfig_t& c) { c.density = 1.5f; }},
        {"density -0.5", [](spcclCompressConfig_t& c) { c.density = -0.5f; }},
        {"density NaN", [](spcclCompressConfig_t& c) { c.density = std::numeric_limits<float>::quiet_NaN(); }},
        {"thresholdInterval 0", [](spcclCompressConfig_t& c) { c.thresholdInterval = 0; }},
        {"thresholdInterval -1", [](spcclCompressConfig_t& c) { c.thresholdInterval = -1; }},
        {"capacityFactor 0.5", [](spcclCompressConfig_t& c) { c.capacityFactor = 0.5f; }},
        {"wireValueType int32", [](spcclCompressConfig_t& c) { c.wireValueType = spcclInt32; }},
        {"algorithm 42", [](spcclCompressConfig_t& c) { c.algorithm = 42; }},
    };
    for (const BadConfig& b : bad) {
      spcclCompressConfig_t config = good;
      b.apply(config);
      out = nullptr;
      expectInvalid(spcclCompressorCreate(comm, kBig, spcclFloat32, &config, &out),
                    std::string("spcclCompressorCreate with ") + b.what);
      if (out != nullptr) spcclCompressorDestroy(out);
    }

    CompressorPtr c;
    {
      spcclCompressor_t raw = nullptr;
      ASSERT_EQ(spcclCompressorCreate(comm, kBig, spcclFloat32, &good, &raw), spcclSuccess) << spcclGetLastError(comm);
      c.reset(raw);
    }
    expectInvalid(spcclAllReduceCompressed(nullptr, recv.data(), spcclSum, c.get(), nullptr),
                  "spcclAllReduceCompressed with a NULL sendbuff");
    expectInvalid(spcclAllReduceCompressed(send.data(), nullptr, spcclSum, c.get(), nullptr),
                  "spcclAllReduceCompressed with a NULL recvbuff");
    expectInvalid(spcclAllReduceCompressed(send.data(), recv.data(), spcclSum, nullptr, nullptr),
                  "spcclAllReduceCompressed with a NULL compressor");
    expectInvalid(spcclAllReduceCompressed(send.data(), recv.data(), kBadOp, c.get(), nullptr),
                  "spcclAllReduceCompressed with op 17");
    expectInvalid(spcclCompressorGetStats(c.get(), nullptr), "spcclCompressorGetStats(c, NULL)");
    expectInvalid(spcclCompressorGetResidual(c.get(), nullptr, kBig), "spcclCompressorGetResidual(c, NULL, n)");
    int value = 0;
    spcclStats_t s{};
    expectInvalid(spcclCommGetStats(nullptr, &s), "spcclCommGetStats(NULL, s)");
    expectInvalid(spcclCommCount(nullptr, &value), "spcclCommCount(NULL, n)");
    expectInvalid(spcclCommUserRank(comm, nullptr), "spcclCommUserRank(comm, NULL)");
    expectInvalid(spcclGetVersion(nullptr), "spcclGetVersion(NULL)");
    expectInvalid(spcclCommInitMPI(nullptr, MPI_COMM_WORLD), "spcclCommInitMPI(NULL, MPI_COMM_WORLD)");
    spcclComm_t other = nullptr;
    expectInvalid(spcclCommInitMPI(&other, MPI_COMM_NULL), "spcclCommInitMPI(&c, MPI_COMM_NULL)");
    if (other != nullptr) spcclCommDestroy(other);

    for (int r = 0; r <= static_cast<int>(spcclNumResults); ++r) {
      const char* text = spcclGetErrorString(static_cast<spcclResult_t>(r));
      EXPECT_TRUE(text != nullptr && *text != '\0') << "spcclGetErrorString(" << r << ")";
    }
  }
};

TEST_F(ErrorsTest, InvalidArgumentsFailBeforeCommunicating) {
  // One rank at a time makes every bad call while the others wait.
  for (int turn = 0; turn < size_; ++turn) {
    if (rank_ == turn) checkInvalidArgumentsLocally();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The communicator still works afterwards.
  const size_t n = 1000;
  const std::vector<float> in = gaussian(n, seedFor(91, rank_));
  std::vector<float> out(n);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), n, spcclFloat32, spcclSum, comm_.get(), nullptr),
                           comm_.get(), "spcclAllReduce after the invalid calls"));
  EXPECT_EQ(firstBitDifference(out, mpiReference(in, spcclSum)), n);
}

// An invalid SPCCL_* value on one rank fails communicator creation on every
// rank: that rank with spcclInvalidArgument naming the variable, the others
// with spcclInvalidUsage naming that rank. Then a good environment works.
TEST_F(ErrorsTest, AnInvalidEnvironmentOnOneRankFailsEveryRankAndNamesIt) {
  const int bad = size_ - 1;
  spcclComm_t other = nullptr;
  spcclResult_t r;
  std::string message;
  {
    const ScopedEnv env("SPCCL_ALGO", rank_ == bad ? "ring" : "");
    r = spcclCommInitMPI(&other, MPI_COMM_WORLD);
    message = spcclGetLastError(nullptr);
  }
  EXPECT_EQ(other, nullptr);
  if (other != nullptr) spcclCommDestroy(other);
  if (rank_ == bad) {
    EXPECT_EQ(r, spcclInvalidArgument) << message;
    EXPECT_NE(message.find("SPCCL_ALGO='ring'"), std::string::npos) << message;
  } else {
    EXPECT_EQ(r, spcclInvalidUsage) << message;
    EXPECT_NE(message.find("rank " + std::to_string(bad) + " rejected its SPCCL_* environment"), std::string::npos)
        << message;
  }
  ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&other, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI after"));
  spcclCommDestroy(other);
}

// An intercommunicator's collectives reduce one group into the other (MPI's
// rule), not over all of its ranks: spccl's collectives would silently mean
// something else. spcclCommInitMPI refuses it on every rank (it is an
// intercommunicator on every rank, so no rank is left waiting), and the
// intracommunicators still work.
TEST_F(ErrorsTest, AnIntercommunicatorIsRefusedOnEveryRank) {
  if (size_ < 2) GTEST_SKIP() << "an intercommunicator needs two groups";
  MPI_Comm half = MPI_COMM_NULL, inter = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, rank_ % 2, rank_, &half), MPI_SUCCESS);
  // Local leader: rank 0 of each half; remote leader in MPI_COMM_WORLD: rank 1 for the evens, 0 for the odds.
  ASSERT_EQ(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank_ % 2 == 0 ? 1 : 0, 77, &inter), MPI_SUCCESS);
  spcclComm_t other = nullptr;
  const spcclResult_t r = spcclCommInitMPI(&other, inter);
  EXPECT_TRUE(allRanks(r == spcclInvalidArgument)) << "rank " << rank_ << ": " << spcclGetErrorString(r);
  EXPECT_EQ(other, nullptr);
  if (other != nullptr) spcclCommDestroy(other);
  const std::string message = spcclGetLastError(nullptr);
  EXPECT_NE(message.find("intercommunicator"), std::string::npos) << message;
  MPI_Comm_free(&inter);
  ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&other, half), nullptr, "spcclCommInitMPI on each half"));
  spcclCommDestroy(other);
  MPI_Comm_free(&half);
}

// Count 0 is a no-op that accepts NULL buffers (as in NCCL), on both entry points.
TEST_F(ErrorsTest, ZeroCountIsANoOp) {
  ASSERT_TRUE(okOnAllRanks(spcclAllReduce(nullptr, nullptr, 0, spcclFloat32, spcclSum, comm_.get(), nullptr),
                           comm_.get(), "spcclAllReduce with count 0"));
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(0, spcclFloat32, makeConfig(0.01f, SPCCL_ALGO_SPLIT, spcclFloat32), c));
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(nullptr, nullptr, spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed with count 0"));
}

// Rank 0's compressor has N elements, the others' N + 1000 (both compressed).
// The wire header carries the dense count, so every rank can see the
// mismatch; every rank must return an error (spcclInvalidUsage)
// rather than hang, and the communicator must stay usable.
class MismatchTest : public MpiTest, public testing::WithParamInterface<int> {};

TEST_P(MismatchTest, MismatchedCountsFailOnEveryRank) {
  const int algorithm = GetParam();
  const size_t n = rank_ == 0 ? 100000 : 101000;
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(n, spcclFloat32, makeConfig(0.01f, algorithm, spcclFloat32), c));
  const std::vector<float> in = gaussian(n, seedFor(92, rank_));
  std::vector<float> out(n);
  const spcclResult_t r = spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr);
  const std::string succeeded = ranksWhere(r == spcclSuccess);
  EXPECT_TRUE(succeeded.empty()) << "mismatched counts returned success on rank(s) " << succeeded;
  EXPECT_EQ(r, spcclInvalidUsage) << "got " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                  << "): " << spcclGetLastError(comm_.get());
  if (r != spcclSuccess) {
    EXPECT_STRNE(spcclGetLastError(comm_.get()), "") << "no detailed message";
  }

  // No stray messages left behind: an exact call on the same communicator.
  const size_t m = 1000;
  const std::vector<float> small = gaussian(m, seedFor(93, rank_));
  std::vector<float> smallOut(m);
  ASSERT_TRUE(
      okOnAllRanks(spcclAllReduce(small.data(), smallOut.data(), m, spcclFloat32, spcclSum, comm_.get(), nullptr),
                   comm_.get(), "spcclAllReduce after the mismatched call"));
  EXPECT_EQ(firstBitDifference(smallOut, mpiReference(small, spcclSum)), m);
}

// Other settings that must agree between ranks (the call descriptor carries
// them): each mismatch is an error on every rank, never a hang or a result.
TEST_F(ErrorsTest, MismatchedSettingsFailOnEveryRank) {
  const size_t n = 100000;
  struct Case {
    const char* what;
    int algorithm;
    spcclDataType_t wire, buffer;
    spcclRedOp_t op;
  };
  const bool odd = rank_ == 0;
  const Case cases[] = {
      {"algorithm", odd ? SPCCL_ALGO_ALLGATHER : SPCCL_ALGO_SPLIT, spcclFloat32, spcclFloat32, spcclSum},
      {"wire value type", SPCCL_ALGO_SPLIT, odd ? spcclFloat16 : spcclFloat32, spcclFloat32, spcclSum},
      {"wire value type fp8", SPCCL_ALGO_ALLGATHER, odd ? spcclFloat8e4m3 : spcclFloat16, spcclFloat32, spcclSum},
      {"op", SPCCL_ALGO_ALLGATHER, spcclFloat32, spcclFloat32, odd ? spcclAvg : spcclSum},
      {"buffer datatype", SPCCL_ALGO_ALLGATHER, spcclFloat32, odd ? spcclBfloat16 : spcclFloat32, spcclSum},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string("mismatched ") + k.what);
    CompressorPtr c;
    ASSERT_TRUE(createCompressor(n, k.buffer, makeConfig(0.01f, k.algorithm, k.wire), c));
    const std::vector<float> in = gaussian(n, seedFor(94, rank_));  // large enough for a bf16 buffer too
    std::vector<float> out(n);
    const spcclResult_t r = spcclAllReduceCompressed(in.data(), out.data(), k.op, c.get(), nullptr);
    const std::string succeeded = ranksWhere(r == spcclSuccess);
    EXPECT_TRUE(succeeded.empty()) << "returned success on rank(s) " << succeeded;
    if (r != spcclSuccess) {
      EXPECT_STRNE(spcclGetLastError(comm_.get()), "") << "no detailed message";
    }
  }
}

// fp8 is a wire value type only: a buffer of spcclFloat8e4m3 is an invalid
// argument (the collectives that carry fp8 values are tested on the wire
// variants: mpi_alltoall_test_fp8wire, mpi_allgather_test_sparse_fp8wire,
// the conservation suite's fp8 cases).
TEST_F(ErrorsTest, Fp8IsNotABufferType) {
  std::vector<float> in(kBig, 1.0f), out(kBig * static_cast<size_t>(size_));
  expectInvalid(spcclAllReduce(in.data(), out.data(), kBig, spcclFloat8e4m3, spcclSum, comm_.get(), nullptr),
                "spcclAllReduce of an fp8 buffer");
  EXPECT_NE(std::string(spcclGetLastError(nullptr)).find("wire value type only"), std::string::npos)
      << spcclGetLastError(nullptr);
  spcclCompressor_t c = nullptr;
  expectInvalid(spcclCompressorCreate(comm_.get(), kBig, spcclFloat8e4m3, nullptr, &c), "an fp8 compressor buffer");
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MismatchTest,
                         testing::Values(SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO),
                         [](const testing::TestParamInfo<int>& p) { return std::string(algorithmName(p.param)); });

}  // namespace
}  // namespace spccl::test
