// spcclAlltoAllRowsCompressed and its backward with SPCCL_ROWS_CODEC=bounded
// (registered with it and SPCCL_ROWS_ERROR_BOUND): every kept value arrives
// within the bound of what an exact MPI_Alltoall of the same data delivers,
// NaN/Inf as they were sent, dropped positions zero; the backward is exact;
// every rank that receives the same rows decodes the same bits; the
// relative bound and the schedule; and ranks that disagree on the codec
// fail the call together.
#include "test_util.h"

namespace spccl::test {
namespace {

class RowsBoundedTest : public MpiTest {};

float envBound() { return std::strtof(envString("SPCCL_ROWS_ERROR_BOUND").c_str(), nullptr); }

// Rows of magnitudes from 1e-3 to 1e2 (row by row) as type t, and one entry
// in `nonFiniteEvery` NaN, +Inf or -Inf (0: none).
std::vector<unsigned char> randomRows(size_t rows, size_t rowLen, spcclDataType_t t, uint64_t seed,
                                      size_t nonFiniteEvery) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-3.0f, 2.0f);
  std::vector<unsigned char> buf(rows * rowLen * typeSize(t));
  for (size_t r = 0; r < rows; ++r) {
    const float mag = std::pow(10.0f, exponent(g));
    for (size_t i = 0; i < rowLen; ++i) {
      float v = mag * normal(g);
      if (nonFiniteEvery > 0 && g() % nonFiniteEvery == 0) v = g() % 3 == 0 ? NAN : g() % 2 ? INFINITY : -INFINITY;
      storeFromFloat(buf.data(), r * rowLen + i, v, t);
    }
  }
  return buf;
}

// Where `keptFrom` keeps an entry: got within `bound[row's sender]` of want
// (non-finite: the same bits for fp32, the same kind otherwise) or, with
// `exact`, bit for bit; elsewhere zero. Returns the number of failures.
int checkRows(const void* got, const void* want, const void* keptFrom, size_t rowsPerPeer, size_t P, size_t rowLen,
              size_t keep, spcclDataType_t t, const std::vector<float>& bound, bool exact) {
  int bad = 0;
  const size_t es = typeSize(t);
  for (size_t r = 0; r < P * rowsPerPeer; ++r) {
    const size_t at = r * rowLen;
    const std::vector<uint8_t> kept = rowKeepMask(keptFrom, at, rowLen, t, keep);
    const double b = bound[r / rowsPerPeer];
    for (size_t i = 0; i < rowLen; ++i) {
      const double g = loadAsDouble(got, at + i, t), w = loadAsDouble(want, at + i, t);
      const bool sameBits = std::memcmp(static_cast<const char*>(got) + (at + i) * es,
                                        static_cast<const char*>(want) + (at + i) * es, es) == 0;
      const bool ok = !kept[i]                                            ? g == 0.0
                      : exact || (t == spcclFloat32 && !std::isfinite(w)) ? sameBits
                      : !std::isfinite(w) ? std::isnan(g) == std::isnan(w) && (std::isnan(w) || g == w)
                                          : std::fabs(g - w) <= b;
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "row " << r << " position " << i << (kept[i] ? " (kept)" : " (dropped)") << ": got " << g
                      << ", exact " << w << ", bound " << b;
    }
  }
  return bad;
}

TEST_F(RowsBoundedTest, ForwardWithinTheBoundBackwardExact) {
  ASSERT_EQ(envString("SPCCL_ROWS_CODEC"), "bounded") << "registered with SPCCL_ROWS_CODEC=bounded";
  const float bound = envBound();
  ASSERT_GT(bound, 0.0f);
  const size_t P = static_cast<size_t>(size_);
  for (const size_t rowLen : {size_t{1}, size_t{40}, size_t{300}, size_t{70000}}) {  // 1-, 2- and 4-byte positions
    for (const bool all : {false, true}) {
      if (all && rowLen == 70000) continue;
      for (const spcclDataType_t t : {spcclFloat32, spcclFloat16, spcclBfloat16}) {
        SCOPED_TRACE(testing::Message() << "rowLen " << rowLen << " every position " << all << " type " << typeName(t));
        const size_t rowsPerPeer = 3, keep = all ? rowLen : std::max<size_t>(1, rowLen == 70000 ? 50 : rowLen / 8);
        const float density = all ? 1.0f : (static_cast<float>(keep) - 0.5f) / static_cast<float>(rowLen);
        ASSERT_EQ(rowKeepCount(rowLen, density), keep);
        const size_t elems = P * rowsPerPeer * rowLen, esize = typeSize(t);
        const std::vector<unsigned char> send =
            randomRows(P * rowsPerPeer, rowLen, t, seedFor(21, rank_, rowLen), rowLen > 1 ? 97 : 0);
        std::vector<unsigned char> recv(elems * esize, 0xcd);
        spcclStats_t before{}, mid{}, after{};
        ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &before), comm_.get(), "stats"));
        spcclSelection_t s = nullptr;
        ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), recv.data(), rowsPerPeer, rowLen, t, density,
                                                             &s, comm_.get(), nullptr),
                                 comm_.get(), "spcclAlltoAllRowsCompressed"));
        SelectionPtr sel(s);
        ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &mid), comm_.get(), "stats"));
        const std::vector<unsigned char> exact = mpiAlltoallBytes(send.data(), rowsPerPeer * rowLen * esize);
        EXPECT_EQ(checkRows(recv.data(), exact.data(), exact.data(), rowsPerPeer, P, rowLen, keep, t,
                            std::vector<float>(P, bound), false),
                  0);
        // Never more than the raw values with their positions, plus the
        // sections' overhead; the backward exactly the values it sends.
        // Kept entries per block (NaN/Inf are kept beyond `keep`): sent
        // (forward) and received (what the backward sends back).
        auto keptIn = [&](const std::vector<unsigned char>& buf, size_t block) {
          uint64_t n = 0;
          for (size_t r = block * rowsPerPeer; r < (block + 1) * rowsPerPeer; ++r)
            for (uint8_t k : rowKeepMask(buf.data(), r * rowLen, rowLen, t, keep)) n += k;
          return n;
        };
        uint64_t forwardMax = 0, backwardBytes = 0;
        for (size_t j = 0; j < P; ++j) {
          if (j == static_cast<size_t>(rank_)) continue;
          forwardMax += 48 + 8 + 56 + 8 + rowsPerPeer * 10 + keptIn(send, j) * (esize + rowIndexBytes(rowLen));
          backwardBytes += 48 + alignUp(kRowsStreamHeaderBytes + keptIn(exact, j) * esize, 8);
        }
        EXPECT_LE(mid.bytesSent - before.bytesSent, forwardMax);
        // Backward: exact, in the buffer's type, at the positions kept.
        const std::vector<unsigned char> grad = randomRows(P * rowsPerPeer, rowLen, t, seedFor(22, rank_, rowLen), 0);
        std::vector<unsigned char> gradBack(elems * esize, 0xcd);
        ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradBack.data(), sel.get(), nullptr),
                                 comm_.get(), "spcclAlltoAllRowsBackward"));
        ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &after), comm_.get(), "stats"));
        const std::vector<unsigned char> gradExact = mpiAlltoallBytes(grad.data(), rowsPerPeer * rowLen * esize);
        EXPECT_EQ(checkRows(gradBack.data(), gradExact.data(), send.data(), rowsPerPeer, P, rowLen, keep, t,
                            std::vector<float>(P, 0.0f), true),
                  0);
        EXPECT_EQ(after.bytesSent - mid.bytesSent, backwardBytes);
      }
    }
  }
}

// Every rank sends the same rows to every rank: every receiver of a rank's
// rows decodes the same bits, and a second call the same again.
TEST_F(RowsBoundedTest, EveryReceiverDecodesTheSameBits) {
  const size_t P = static_cast<size_t>(size_), rowLen = 64, rowsPerPeer = 5;
  const std::vector<unsigned char> block = randomRows(rowsPerPeer, rowLen, spcclFloat32, seedFor(23, rank_), 50);
  std::vector<unsigned char> send;
  for (size_t j = 0; j < P; ++j) send.insert(send.end(), block.begin(), block.end());
  std::vector<unsigned char> recv(send.size()), again(send.size());
  for (auto* out : {&recv, &again})
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), out->data(), rowsPerPeer, rowLen, spcclFloat32,
                                                         0.5f, nullptr, comm_.get(), nullptr),
                             comm_.get(), "spcclAlltoAllRowsCompressed"));
  EXPECT_EQ(recv, again);
  std::vector<unsigned char> all(recv.size() * P);
  ASSERT_EQ(MPI_Allgather(recv.data(), static_cast<int>(recv.size()), MPI_BYTE, all.data(),
                          static_cast<int>(recv.size()), MPI_BYTE, MPI_COMM_WORLD),
            MPI_SUCCESS);
  const size_t blockBytes = block.size();
  for (size_t receiver = 1; receiver < P; ++receiver)
    for (size_t sender = 0; sender < P; ++sender)
      EXPECT_EQ(std::memcmp(all.data() + receiver * recv.size() + sender * blockBytes, all.data() + sender * blockBytes,
                            blockBytes),
                0)
          << "rank " << receiver << " and rank 0 decoded rank " << sender << "'s rows differently";
}

// SPCCL_ROWS_ERROR_RELATIVE=1: the bound is a fraction of each sender's
// range of kept values. SPCCL_ROWS_ERROR_DECAY: the bound of the n-th call
// is bound x decay^n, and the bytes grow as it tightens.
TEST_F(RowsBoundedTest, RelativeBoundAndSchedule) {
  const size_t P = static_cast<size_t>(size_), rowLen = 32, rowsPerPeer = 4;
  const std::vector<unsigned char> send = randomRows(P * rowsPerPeer, rowLen, spcclFloat32, seedFor(24, rank_), 0);
  const std::vector<unsigned char> exact = mpiAlltoallBytes(send.data(), rowsPerPeer * rowLen * sizeof(float));
  std::vector<unsigned char> recv(send.size());
  {
    spcclComm_t c = nullptr;
    ScopedEnv rel("SPCCL_ROWS_ERROR_RELATIVE", "1");
    ScopedEnv b("SPCCL_ROWS_ERROR_BOUND", "0.01");
    ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&c, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI"));
    CommPtr relComm(c);
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), recv.data(), rowsPerPeer, rowLen, spcclFloat32,
                                                         1.0f, nullptr, relComm.get(), nullptr),
                             relComm.get(), "spcclAlltoAllRowsCompressed"));
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < P * rowsPerPeer * rowLen; ++i) {
      lo = std::min(lo, loadAsFloat(send.data(), i, spcclFloat32));
      hi = std::max(hi, loadAsFloat(send.data(), i, spcclFloat32));
    }
    const float mine = 0.01f * (hi - lo);
    std::vector<float> bounds(P);
    ASSERT_EQ(MPI_Allgather(&mine, 1, MPI_FLOAT, bounds.data(), 1, MPI_FLOAT, MPI_COMM_WORLD), MPI_SUCCESS);
    for (float& x : bounds) x *= 1.0001f;  // the library's fp32 product may round up by an ulp
    EXPECT_EQ(
        checkRows(recv.data(), exact.data(), exact.data(), rowsPerPeer, P, rowLen, rowLen, spcclFloat32, bounds, false),
        0);
  }
  spcclComm_t c = nullptr;
  ScopedEnv decay("SPCCL_ROWS_ERROR_DECAY", "0.25");
  ScopedEnv b("SPCCL_ROWS_ERROR_BOUND", "0.1");
  ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&c, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI"));
  CommPtr decayComm(c);
  uint64_t previous = 0;
  for (int n = 0; n < 4; ++n) {
    SCOPED_TRACE(testing::Message() << "call " << n);
    spcclStats_t s0{}, s1{};
    ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(decayComm.get(), &s0), decayComm.get(), "stats"));
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), recv.data(), rowsPerPeer, rowLen, spcclFloat32,
                                                         1.0f, nullptr, decayComm.get(), nullptr),
                             decayComm.get(), "spcclAlltoAllRowsCompressed"));
    ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(decayComm.get(), &s1), decayComm.get(), "stats"));
    const float bound = static_cast<float>(0.1 * std::pow(0.25, n));
    EXPECT_EQ(checkRows(recv.data(), exact.data(), exact.data(), rowsPerPeer, P, rowLen, rowLen, spcclFloat32,
                        std::vector<float>(P, bound), false),
              0);
    const uint64_t sent = s1.bytesSent - s0.bytesSent;
    EXPECT_GT(sent, previous) << "a tighter bound takes more bits";
    previous = sent;
  }
}

// A rank on the bounded codec and one on fp8 do not exchange streams: every
// rank's call fails.
TEST_F(RowsBoundedTest, RanksThatDisagreeOnTheCodecFailTogether) {
  expectMixedRowsCodecsFail(rank_, size_, "bounded", "fp8");
}

}  // namespace
}  // namespace spccl::test
