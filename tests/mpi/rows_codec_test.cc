// spcclAlltoAllRowsCompressed and its backward with SPCCL_ROWS_CODEC=int8
// (registered with that environment): every kept value arrives within half
// its row's scale (max |kept value| / 127) of what an exact MPI_Alltoall of
// the same data delivers, plus the rounding to the buffer type; dropped
// positions are zero; the bytes sent are the int8 streams' sizes; and ranks
// that disagree on the codec fail the call together.
#include "test_util.h"

namespace spccl::test {
namespace {

class RowsCodecTest : public MpiTest {};

// Half an ulp of type t at magnitude m, bounded above.
double halfUlp(double m, spcclDataType_t t) {
  const int p = t == spcclFloat16 ? 11 : t == spcclBfloat16 ? 8 : 24;
  return std::ldexp(m, -p);
}

// A row's scale as the codec computes it: max finite |v| over the kept
// entries, divided by 127 in fp32.
float rowScale(const void* buf, size_t rowStart, const std::vector<uint8_t>& kept, spcclDataType_t t) {
  float m = 0;
  for (size_t i = 0; i < kept.size(); ++i)
    if (kept[i]) {
      const float v = std::fabs(loadAsFloat(buf, rowStart + i, t));
      if (std::isfinite(v)) m = std::max(m, v);
    }
  return m / 127.0f;
}

// Checks a block layout of P x rows rows: where `keptFrom` (the buffer whose
// rows decided the selection) keeps an entry, got is within the bound of
// want (NaN where want is not finite); elsewhere got is zero. Returns the number of failures (first few
// reported).
int checkRows(const void* got, const void* want, const void* keptFrom, const void* scaleFrom, size_t totalRows,
              size_t rowLen, size_t keep, spcclDataType_t t) {
  int bad = 0;
  for (size_t r = 0; r < totalRows; ++r) {
    const size_t at = r * rowLen;
    const std::vector<uint8_t> kept = rowKeepMask(keptFrom, at, rowLen, t, keep);
    const float scale = rowScale(scaleFrom, at, kept, t);
    for (size_t i = 0; i < rowLen; ++i) {
      const double g = loadAsDouble(got, at + i, t), w = loadAsDouble(want, at + i, t);
      const bool ok = !kept[i] ? g == 0.0
                      : !std::isfinite(w)
                          ? std::isnan(g)  // NaN and Inf arrive as NaN
                          : std::fabs(g - w) <= scale / 2.0 + halfUlp(std::fabs(w) + scale, spcclFloat32) +
                                                    halfUlp(std::fabs(w) + scale, t);
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << "row " << r << " position " << i << (kept[i] ? " (kept)" : " (dropped)") << ": got " << g
                      << ", exact " << w << ", scale " << scale;
    }
  }
  return bad;
}

// Random rows of magnitudes from 1e-4 to 1e2 (row by row), as type t.
std::vector<unsigned char> randomRows(size_t rows, size_t rowLen, spcclDataType_t t, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-4.0f, 2.0f);
  std::vector<unsigned char> buf(rows * rowLen * typeSize(t));
  for (size_t r = 0; r < rows; ++r) {
    const float mag = std::pow(10.0f, exponent(g));
    for (size_t i = 0; i < rowLen; ++i) storeFromFloat(buf.data(), r * rowLen + i, mag * normal(g), t);
  }
  return buf;
}

uint64_t int8ForwardBytes(size_t rows, size_t rowLen, size_t keep) {
  const uint64_t nnz = rows * keep;
  return alignUp(alignUp(kRowsStreamHeaderBytes + nnz * rowIndexBytes(rowLen), 4) + rows * 4 + nnz, 8);
}
uint64_t int8BackwardBytes(size_t rows, size_t keep) {
  return alignUp(kRowsStreamHeaderBytes + rows * 4 + rows * keep, 8);
}

TEST_F(RowsCodecTest, ForwardAndBackwardWithinTheBoundOfAnExactAlltoall) {
  ASSERT_EQ(envString("SPCCL_ROWS_CODEC"), "int8") << "registered with SPCCL_ROWS_CODEC=int8";
  const size_t P = static_cast<size_t>(size_);
  for (const size_t rowLen : {size_t{40}, size_t{300}, size_t{70000}}) {  // 1-, 2- and 4-byte positions
    for (const spcclDataType_t t : {spcclFloat32, spcclFloat16, spcclBfloat16}) {
      SCOPED_TRACE(testing::Message() << "rowLen " << rowLen << " type " << typeName(t));
      const size_t rowsPerPeer = 3, keep = rowLen == 70000 ? 50 : rowLen / 8;
      const float density = (static_cast<float>(keep) - 0.5f) / static_cast<float>(rowLen);
      ASSERT_EQ(rowKeepCount(rowLen, density), keep);
      const size_t elems = P * rowsPerPeer * rowLen, esize = typeSize(t);
      const std::vector<unsigned char> send = randomRows(P * rowsPerPeer, rowLen, t, seedFor(11, rank_, rowLen));
      std::vector<unsigned char> recv(elems * esize, 0xcd);
      spcclStats_t before{}, mid{}, after{};
      ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &before), comm_.get(), "stats"));
      spcclSelection_t s = nullptr;
      ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), recv.data(), rowsPerPeer, rowLen, t, density,
                                                           &s, comm_.get(), nullptr),
                               comm_.get(), "spcclAlltoAllRowsCompressed"));
      SelectionPtr sel(s);
      ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &mid), comm_.get(), "stats"));
      // The exact alltoall of the same rows: what each received row should be.
      const std::vector<unsigned char> exact = mpiAlltoallBytes(send.data(), rowsPerPeer * rowLen * esize);
      EXPECT_EQ(checkRows(recv.data(), exact.data(), exact.data(), exact.data(), P * rowsPerPeer, rowLen, keep, t), 0);
      EXPECT_EQ(mid.bytesSent - before.bytesSent, (P - 1) * (48 + 8 + int8ForwardBytes(rowsPerPeer, rowLen, keep)));

      // Backward: gradients at the received rows' layout go back to their
      // owners, which get them at the positions they kept, within the bound
      // of the kept gradients' own row scale; elsewhere zero.
      const std::vector<unsigned char> grad = randomRows(P * rowsPerPeer, rowLen, t, seedFor(12, rank_, rowLen));
      std::vector<unsigned char> gradBack(elems * esize, 0xcd);
      ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradBack.data(), sel.get(), nullptr), comm_.get(),
                               "spcclAlltoAllRowsBackward"));
      ASSERT_TRUE(okOnAllRanks(spcclCommGetStats(comm_.get(), &after), comm_.get(), "stats"));
      const std::vector<unsigned char> gradExact = mpiAlltoallBytes(grad.data(), rowsPerPeer * rowLen * esize);
      EXPECT_EQ(
          checkRows(gradBack.data(), gradExact.data(), send.data(), gradExact.data(), P * rowsPerPeer, rowLen, keep, t),
          0);
      EXPECT_EQ(after.bytesSent - mid.bytesSent, (P - 1) * (48 + int8BackwardBytes(rowsPerPeer, keep)));
    }
  }
}

// NaN and Inf are kept and arrive as NaN; the rest of their row keeps the bound.
TEST_F(RowsCodecTest, NonFiniteArrivesAsNaN) {
  const size_t P = static_cast<size_t>(size_), rowLen = 64, rowsPerPeer = 2;
  std::vector<float> send(P * rowsPerPeer * rowLen);
  std::mt19937_64 g(seedFor(13, rank_));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : send) v = normal(g);
  for (size_t r = 0; r < P * rowsPerPeer; ++r) send[r * rowLen + (r % rowLen)] = r % 2 ? -INFINITY : NAN;
  std::vector<float> recv(send.size());
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(send.data(), recv.data(), rowsPerPeer, rowLen, spcclFloat32,
                                                       0.1f, nullptr, comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAllRowsCompressed"));
  const std::vector<unsigned char> exact = mpiAlltoallBytes(send.data(), rowsPerPeer * rowLen * sizeof(float));
  EXPECT_EQ(checkRows(recv.data(), exact.data(), exact.data(), exact.data(), P * rowsPerPeer, rowLen,
                      rowKeepCount(rowLen, 0.1f), spcclFloat32),
            0);
}

// A rank on the wire codec and one on int8 do not exchange streams: every
// rank's call fails.
TEST_F(RowsCodecTest, RanksThatDisagreeOnTheCodecFailTogether) {
  expectMixedRowsCodecsFail(rank_, size_, "wire", "int8");
}

}  // namespace
}  // namespace spccl::test
