// SPCCL_CHECKSUM=1 end to end: every compressed
// collective gives the same bits with and without checksums, and a bit
// flipped in a stream after its CRC was computed (the test hook
// SPCCL_TEST_CORRUPT_STREAMS, set on rank 1 only) is spcclRemoteError naming
// the CRC on the rank that received it, on every rank where the collective
// has a later stage that depends on it (split, row-sparse partition: the
// owner's error marker), never a hang, and the next call on the same
// communicator is correct again.
//
// ctest runs it with SPCCL_CHECKSUM=1 in the environment; communicators made
// here set the other variables they need around spcclCommInitMPI.
#include <cstdlib>
#include <map>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr size_t kCount = 50000;
constexpr size_t kRowsPerPeer = 16, kRowLen = 64;

// A communicator created with `env` set (and unset again afterwards).
CommPtr commWith(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> saved;
  for (const auto& [k, v] : env) {
    saved[k] = envString(k.c_str());
    setenv(k.c_str(), v.c_str(), 1);
  }
  spcclComm_t c = nullptr;
  const spcclResult_t r = spcclCommInitMPI(&c, MPI_COMM_WORLD);
  for (const auto& [k, v] : saved) {
    if (v.empty()) unsetenv(k.c_str());
    else setenv(k.c_str(), v.c_str(), 1);
  }
  EXPECT_TRUE(okOnAllRanks(r, nullptr, "spcclCommInitMPI"));
  return CommPtr(c);
}

// Rank 1 flips a bit in the first stream it seals on this communicator.
CommPtr corruptingComm(std::map<std::string, std::string> env = {}) {
  env["SPCCL_TEST_CORRUPT_STREAMS"] = worldRank() == 1 ? "1" : "0";
  return commWith(env);
}

bool mentionsCrc(spcclComm_t comm) { return std::string(spcclGetLastError(comm)).find("CRC32C") != std::string::npos; }

std::string describe(spcclResult_t r, spcclComm_t comm) {
  return std::to_string(static_cast<int>(r)) + " (" + spcclGetErrorString(r) + "): " + spcclGetLastError(comm);
}

class ChecksumTest : public MpiTest {
 protected:
  void SetUp() override {
    MpiTest::SetUp();
    if (envString("SPCCL_CHECKSUM") != "1") GTEST_SKIP() << "run with SPCCL_CHECKSUM=1 (ctest does)";
  }

  // One compressed allreduce on `comm` through a new compressor.
  static spcclResult_t allreduce(spcclComm_t comm, int algorithm, spcclDataType_t wire, std::vector<float>& out,
                                 uint64_t call = 0) {
    spcclCompressConfig_t cfg = makeConfig(0.05f, algorithm, wire);
    spcclCompressor_t c = nullptr;
    spcclResult_t r = spcclCompressorCreate(comm, kCount, spcclFloat32, &cfg, &c);
    if (r != spcclSuccess) return r;
    const std::vector<float> in = gaussian(kCount, seedFor(71, worldRank(), call));
    out.assign(kCount, 0.0f);
    r = spcclAllReduceCompressed(in.data(), out.data(), spcclSum, c, nullptr);
    const spcclResult_t d = spcclCompressorDestroy(c);
    return r != spcclSuccess ? r : d;
  }
};

// Sealing and verifying changes nothing: the same calls on a communicator
// without checksums give the same bits.
TEST_F(ChecksumTest, EveryCollectiveGivesTheSameBitsWithAndWithoutChecksums) {
  CommPtr sealed = commWith({{"SPCCL_CHECKSUM", "1"}, {"SPCCL_ALLGATHER_DENSITY", "0.1"}});
  CommPtr plain = commWith({{"SPCCL_CHECKSUM", "0"}, {"SPCCL_ALLGATHER_DENSITY", "0.1"}});
  ASSERT_TRUE(sealed && plain);
  for (int algorithm : {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
    for (spcclDataType_t wire : {spcclFloat32, spcclBfloat16, spcclFloat8e4m3}) {
      SCOPED_TRACE(std::string(algorithmName(algorithm)) + " " + typeName(wire));
      std::vector<float> a, b;
      ASSERT_TRUE(okOnAllRanks(allreduce(sealed.get(), algorithm, wire, a), sealed.get(), "sealed allreduce"));
      ASSERT_TRUE(okOnAllRanks(allreduce(plain.get(), algorithm, wire, b), plain.get(), "plain allreduce"));
      EXPECT_TRUE(allRanks(firstBitDifference(a, b) == a.size()));
    }
  }
  // Rows forward and backward.
  const size_t elems = static_cast<size_t>(size_) * kRowsPerPeer * kRowLen;
  const std::vector<float> x = gaussian(elems, seedFor(72, rank_));
  std::vector<float> y[2], g[2];
  spcclComm_t comms[2] = {sealed.get(), plain.get()};
  for (int k = 0; k < 2; ++k) {
    y[k].assign(elems, 0.0f);
    g[k].assign(elems, 0.0f);
    spcclSelection_t sel = nullptr;
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(x.data(), y[k].data(), kRowsPerPeer, kRowLen, spcclFloat32,
                                                         0.25f, &sel, comms[k], nullptr),
                             comms[k], "rows forward"));
    SelectionPtr owned(sel);
    ASSERT_TRUE(
        okOnAllRanks(spcclAlltoAllRowsBackward(y[k].data(), g[k].data(), sel, nullptr), comms[k], "rows backward"));
  }
  EXPECT_TRUE(allRanks(firstBitDifference(y[0], y[1]) == elems));
  EXPECT_TRUE(allRanks(firstBitDifference(g[0], g[1]) == elems));
  // Sparsified allgather (SPCCL_ALLGATHER_DENSITY=0.1 on both).
  std::vector<float> ga(static_cast<size_t>(size_) * 1000), gb(ga.size());
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(x.data(), ga.data(), 1000, spcclFloat32, sealed.get(), nullptr), sealed.get(),
                           "sealed allgather"));
  ASSERT_TRUE(okOnAllRanks(spcclAllGather(x.data(), gb.data(), 1000, spcclFloat32, plain.get(), nullptr), plain.get(),
                           "plain allgather"));
  EXPECT_TRUE(allRanks(firstBitDifference(ga, gb) == ga.size()));
  // Row-sparse, both algorithms.
  for (const char* algo : {"allgather", "partition"}) {
    SCOPED_TRACE(algo);
    CommPtr s = commWith({{"SPCCL_CHECKSUM", "1"}, {"SPCCL_ROWSPARSE_ALGO", algo}});
    CommPtr p = commWith({{"SPCCL_CHECKSUM", "0"}, {"SPCCL_ROWSPARSE_ALGO", algo}});
    const size_t n = 40, len = 8;
    std::vector<int64_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(rank_) * 3) % 50);
    const std::vector<float> rows = gaussian(n * len, seedFor(73, rank_));
    std::vector<int64_t> oi[2];
    std::vector<float> orows[2];
    spcclComm_t cs[2] = {s.get(), p.get()};
    for (int k = 0; k < 2; ++k) {
      oi[k].assign(64, -1);
      orows[k].assign(64 * len, 0.0f);
      size_t got = 0;
      ASSERT_TRUE(okOnAllRanks(spcclAllReduceRowSparse(ids.data(), rows.data(), n, len, spcclFloat32, oi[k].data(),
                                                       orows[k].data(), 64, &got, cs[k], nullptr),
                               cs[k], "row-sparse"));
    }
    EXPECT_TRUE(allRanks(oi[0] == oi[1] && firstBitDifference(orows[0], orows[1]) == orows[0].size()));
  }
}

// The allgather algorithm sends rank 1's one stream to every rank (itself
// included): every rank detects the flip.
TEST_F(ChecksumTest, CorruptAllgatherStreamFailsOnEveryRank) {
  CommPtr comm = corruptingComm();
  std::vector<float> out;
  const spcclResult_t r = allreduce(comm.get(), SPCCL_ALGO_ALLGATHER, spcclFloat32, out);
  EXPECT_EQ(r, spcclRemoteError) << describe(r, comm.get());
  EXPECT_TRUE(mentionsCrc(comm.get())) << spcclGetLastError(comm.get());
  // The hook is spent: the next call on the same communicator works and agrees.
  ASSERT_TRUE(okOnAllRanks(allreduce(comm.get(), SPCCL_ALGO_ALLGATHER, spcclFloat32, out, 1), comm.get(),
                           "the next allreduce"));
  EXPECT_TRUE(identicalOnAllRanks(out.data(), out.size(), sizeof(float)));
  const std::vector<float> in = gaussian(1000, seedFor(74, rank_));
  std::vector<float> exact(1000);
  ASSERT_TRUE(okOnAllRanks(spcclAllReduce(in.data(), exact.data(), 1000, spcclFloat32, spcclSum, comm.get(), nullptr),
                           comm.get(), "an exact allreduce"));
  EXPECT_EQ(firstBitDifference(exact, mpiReference(in, spcclSum)), exact.size());
}

// Split: rank 1's first stream is its stage-1 piece for owner 0. Owner 0
// detects it and sends an error marker in stage 3, so every rank fails.
TEST_F(ChecksumTest, CorruptSplitPieceFailsOnEveryRank) {
  CommPtr comm = corruptingComm();
  std::vector<float> out;
  const spcclResult_t r = allreduce(comm.get(), SPCCL_ALGO_SPLIT, spcclFloat16, out);
  EXPECT_EQ(r, spcclRemoteError) << describe(r, comm.get());
  const std::string crcRanks = ranksWhere(r == spcclRemoteError && mentionsCrc(comm.get()));
  EXPECT_EQ(crcRanks, "0") << "the owner of range 0 names the CRC";
  ASSERT_TRUE(
      okOnAllRanks(allreduce(comm.get(), SPCCL_ALGO_SPLIT, spcclFloat16, out, 1), comm.get(), "the next allreduce"));
  EXPECT_TRUE(identicalOnAllRanks(out.data(), out.size(), sizeof(float)));
}

// Rows alltoall: rank 1's first stream goes to rank 0 only; one exchange, no
// later stage, so only the receiver fails (and nobody waits for it).
TEST_F(ChecksumTest, CorruptRowsStreamFailsOnItsReceiver) {
  CommPtr comm = corruptingComm();
  const size_t elems = static_cast<size_t>(size_) * kRowsPerPeer * kRowLen;
  const std::vector<float> x = gaussian(elems, seedFor(75, rank_));
  std::vector<float> y(elems);
  const spcclResult_t r = spcclAlltoAllRowsCompressed(x.data(), y.data(), kRowsPerPeer, kRowLen, spcclFloat32, 0.25f,
                                                      nullptr, comm.get(), nullptr);
  EXPECT_EQ(ranksWhere(r != spcclSuccess), "0") << describe(r, comm.get());
  if (rank_ == 0) {
    EXPECT_EQ(r, spcclRemoteError) << describe(r, comm.get());
    EXPECT_TRUE(mentionsCrc(comm.get())) << spcclGetLastError(comm.get());
  }
  // Same call again, now intact: equal to the same call on a clean communicator.
  CommPtr clean = commWith({{"SPCCL_CHECKSUM", "1"}});
  std::vector<float> y2(elems);
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(x.data(), y.data(), kRowsPerPeer, kRowLen, spcclFloat32, 0.25f,
                                                       nullptr, comm.get(), nullptr),
                           comm.get(), "the next rows alltoall"));
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(x.data(), y2.data(), kRowsPerPeer, kRowLen, spcclFloat32, 0.25f,
                                                       nullptr, clean.get(), nullptr),
                           clean.get(), "rows alltoall on a clean communicator"));
  EXPECT_TRUE(allRanks(firstBitDifference(y, y2) == elems));
}

// Row-sparse partition: rank 1's first stream is its stage-1 part for owner
// 0, whose flagged stage-3 stream then fails every rank.
TEST_F(ChecksumTest, CorruptRowSparsePartFailsOnEveryRank) {
  CommPtr comm = corruptingComm({{"SPCCL_ROWSPARSE_ALGO", "partition"}});
  const size_t n = 64, len = 4;
  std::vector<int64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = static_cast<int64_t>(i * 3 + static_cast<size_t>(rank_));
  const std::vector<float> rows = gaussian(n * len, seedFor(76, rank_));
  std::vector<int64_t> oi(n * 4);
  std::vector<float> orows(n * 4 * len);
  size_t got = 0;
  const spcclResult_t r = spcclAllReduceRowSparse(ids.data(), rows.data(), n, len, spcclFloat32, oi.data(),
                                                  orows.data(), oi.size(), &got, comm.get(), nullptr);
  EXPECT_EQ(r, spcclRemoteError) << describe(r, comm.get());
  EXPECT_EQ(ranksWhere(r == spcclRemoteError && mentionsCrc(comm.get())), "0");
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceRowSparse(ids.data(), rows.data(), n, len, spcclFloat32, oi.data(),
                                                   orows.data(), oi.size(), &got, comm.get(), nullptr),
                           comm.get(), "the next row-sparse allreduce"));
  EXPECT_TRUE(identicalOnAllRanks(orows.data(), got * len, sizeof(float)));
}

}  // namespace
}  // namespace spccl::test
