// SPCCL_DISABLE=1 makes every call exact. Registered with
// that variable set; the library reads it at communicator creation.
#include <cstdlib>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr size_t kCount = 100003;  // above the default SPCCL_MIN_COMPRESS_COUNT

class DisableTest : public MpiTest {
 protected:
  void SetUp() override {
    const char* v = std::getenv("SPCCL_DISABLE");
    ASSERT_TRUE(allRanks(v != nullptr && std::string(v) == "1")) << "run with SPCCL_DISABLE=1 (ctest sets it)";
    MpiTest::SetUp();
  }
};

TEST_F(DisableTest, DropInCallsAreExact) {
  for (spcclRedOp_t op : {spcclSum, spcclAvg}) {
    SCOPED_TRACE(opName(op));
    const std::vector<float> in = gaussian(kCount, seedFor(101, rank_, op));
    const std::vector<float> ref = mpiReference(in, op);
    std::vector<float> out(kCount);
    ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), out.data(), kCount, spcclFloat32, op, comm_.get(), nullptr),
                             comm_.get(), "spcclAllReduce"));
    EXPECT_EQ(firstBitDifference(out, ref), kCount);
    std::vector<float> inplace = in;
    ASSERT_TRUE(
        okOnAllRanks(spcclAllReduce(inplace.data(), inplace.data(), kCount, spcclFloat32, op, comm_.get(), nullptr),
                     comm_.get(), "spcclAllReduce (in place)"));
    EXPECT_EQ(firstBitDifference(inplace, ref), kCount);
  }
  spcclStats_t s{};
  ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats"));
  EXPECT_EQ(s.calls, 4u);
  EXPECT_EQ(s.compressedCalls, 0u);
  EXPECT_EQ(s.lastAlgorithm, SPCCL_ALGO_DENSE);
}

// "Every call" includes explicit compressors configured to compress.
TEST_F(DisableTest, CompressorCallsAreExact) {
  CompressorPtr c;
  ASSERT_TRUE(createCompressor(kCount, spcclFloat32, makeConfig(0.01f, SPCCL_ALGO_SPLIT, spcclFloat16), c));
  const std::vector<float> in = gaussian(kCount, seedFor(102, rank_));
  std::vector<float> out(kCount);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c.get(), nullptr), comm_.get(),
                           "spcclAllReduceCompressed"));
  EXPECT_EQ(firstBitDifference(out, mpiReference(in, spcclSum)), kCount);
  spcclStats_t s;
  ASSERT_TRUE(stats(c.get(), s));
  EXPECT_EQ(s.compressedCalls, 0u);
}

}  // namespace
}  // namespace spccl::test
