// Alltoall: the drop-in spcclAlltoAll equals
// MPI_Alltoall bitwise by default and, with SPCCL_ALLTOALL_DENSITY < 1 and
// SPCCL_ALLTOALL_ROW_LEN set, compresses float rows exactly as the rows call;
// spcclAlltoAllRowsCompressed keeps exactly the entries a naive per-row sort
// picks; spcclAlltoAllRowsBackward returns exactly mask * grad; the bytes on
// the wire match the stream formula; a selection serves one backward.
//
// Env-driven expectations are read from the environment (ctest registers this
// binary again with SPCCL_ALLTOALL_* and SPCCL_VALUE_TYPE set, see
// CMakeLists.txt), so one source covers the default and the compressed modes.
#include <limits>
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

const spcclDataType_t kAllTypes[] = {spcclInt8,   spcclUint8,   spcclInt32,   spcclUint32,  spcclInt64,
                                     spcclUint64, spcclFloat16, spcclFloat32, spcclFloat64, spcclBfloat16};
const spcclDataType_t kRowTypes[] = {spcclFloat32, spcclFloat16, spcclBfloat16};

// ---------- references ----------

// n elements of type t (fp32/fp16/bf16) in rows of rowLen; the row pattern
// depends on the row and the rank: gaussian (distinct magnitudes), small
// multiples of 0.5 (many ties, zeros of both signs), or one magnitude with
// alternating signs (all tied: the lowest positions win).
std::vector<unsigned char> rowsInput(size_t n, size_t rowLen, spcclDataType_t t, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> v(n * typeSize(t));
  for (size_t e = 0; e < n; ++e) {
    const size_t row = e / rowLen, pos = e % rowLen;
    float x = 0.0f;
    switch ((row + (seed & 7)) % 3) {
      case 0:
        x = normal(gen);
        break;
      case 1:
        x = static_cast<float>(static_cast<int>(gen() % 9) - 4) * 0.5f;
        if (x == 0.0f && (gen() & 1)) x = -0.0f;
        break;
      default:
        x = (pos % 2 ? -1.5f : 1.5f);
        break;
    }
    storeFromFloat(v.data(), e, x, t);
  }
  return v;
}

std::vector<unsigned char> gradInput(size_t n, spcclDataType_t t, uint64_t seed) {
  const std::vector<float> g = gaussian(n, seed);
  std::vector<unsigned char> v(n * typeSize(t));
  for (size_t e = 0; e < n; ++e) storeFromFloat(v.data(), e, g[e], t);
  return v;
}

// Bytes of one forward with rows per peer (finite data, no per-row counts) as
// the stream formula (docs/ALGORITHMS.md) gives them: per peer one stream plus the 8-byte stream
// size; the implementation may add a small call descriptor (<= 64 bytes per peer).
struct ByteBounds {
  uint64_t lo, hi;
};
ByteBounds forwardBytes(size_t P, size_t rowsPerPeer, size_t rowLen, size_t kr, spcclDataType_t wire) {
  const uint64_t lo = (P - 1) * (rowsForwardStreamBytes(rowsPerPeer, rowLen, kr, wire) + 8);
  return {lo, lo + 64 * (P - 1)};
}
ByteBounds backwardBytes(size_t P, size_t rowsPerPeer, size_t kr, spcclDataType_t wire) {
  const uint64_t lo = (P - 1) * rowsBackwardStreamBytes(rowsPerPeer, kr, wire);
  return {lo, lo + 64 * (P - 1)};
}

// ---------- drop-in spcclAlltoAll ----------

struct AlltoAllEnv {
  float density = envDensity("SPCCL_ALLTOALL_DENSITY");
  size_t rowLen = envSize("SPCCL_ALLTOALL_ROW_LEN");
};

// The rule: float blocks are compressed row by row when the density is < 1
// and the row length is set and divides count; every other call is exact.
bool dropInCompresses(spcclDataType_t t, size_t count) {
  const AlltoAllEnv env;
  return isCompressibleFloat(t) && env.density < 1.0f && env.rowLen > 0 && count > 0 && count % env.rowLen == 0;
}

using DropInParam = std::tuple<spcclDataType_t, size_t>;
class AlltoAllDropInTest : public MpiTest, public testing::WithParamInterface<DropInParam> {};

TEST_P(AlltoAllDropInTest, EqualsMpiAlltoallOrRowsCompression) {
  const auto [type, count] = GetParam();
  const size_t P = static_cast<size_t>(size_), es = typeSize(type), n = P * count;
  const bool compressed = dropInCompresses(type, count);
  const AlltoAllEnv env;
  const spcclDataType_t wire = rowsWireTypeFromEnv();

  // Every bit pattern for exact calls; row-structured floats for compressed ones.
  const std::vector<unsigned char> send = compressed ? rowsInput(n, env.rowLen, type, seedFor(301, rank_, count))
                                                     : randomBytes(n * es, seedFor(301, rank_, count));
  const std::vector<unsigned char> dense = mpiAlltoallBytes(send.data(), count * es);
  std::vector<unsigned char> want = dense;
  size_t kr = 0;
  if (compressed) {
    kr = rowKeepCount(env.rowLen, env.density);
    want = maskedThroughWire(dense, dense, n / env.rowLen, env.rowLen, type, kr, wire);
  }

  spcclStats_t s0, s1, s2;
  ASSERT_TRUE(commStats(s0));
  std::vector<unsigned char> recv(n * es, 0xA5);
  std::vector<unsigned char> sendCopy = send;
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(sendCopy.data(), recv.data(), count, type, comm_.get(), nullptr), comm_.get(),
                           "spcclAlltoAll (out of place)"));
  ASSERT_TRUE(commStats(s1));
  EXPECT_TRUE(sendCopy == send) << "the send buffer of an out-of-place call was modified";
  const size_t rowLen = compressed ? env.rowLen : std::max<size_t>(count, 1);
  Diff d = compareElements(recv.data(), want.data(), n, type, compressed);
  EXPECT_EQ(d.count, 0u) << (compressed ? "compressed" : "exact")
                         << " out of place: " << describeDiff(d, recv.data(), want.data(), rowLen, type);

  std::vector<unsigned char> inplace = send;
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(inplace.data(), inplace.data(), count, type, comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAll (in place)"));
  ASSERT_TRUE(commStats(s2));
  d = compareElements(inplace.data(), want.data(), n, type, compressed);
  EXPECT_EQ(d.count, 0u) << (compressed ? "compressed" : "exact")
                         << " in place: " << describeDiff(d, inplace.data(), want.data(), rowLen, type);

  const uint64_t dense1 = (P - 1) * count * es;
  EXPECT_EQ(s1.calls - s0.calls, 1u);
  EXPECT_EQ(s2.calls - s1.calls, 1u);
  EXPECT_EQ(s1.denseBytes - s0.denseBytes, dense1);
  EXPECT_EQ(s2.denseBytes - s1.denseBytes, dense1);
  EXPECT_EQ(s2.compressedCalls - s0.compressedCalls, compressed ? 2u : 0u);
  if (!compressed) {
    EXPECT_EQ(s1.bytesSent - s0.bytesSent, dense1) << "an exact alltoall sends the dense blocks";
    EXPECT_EQ(s2.bytesSent - s1.bytesSent, dense1) << "an exact alltoall sends the dense blocks";
  } else if (kr < env.rowLen) {
    const ByteBounds b = forwardBytes(P, count / env.rowLen, env.rowLen, kr, ownValuesWire(type, wire));
    for (uint64_t sent : {s1.bytesSent - s0.bytesSent, s2.bytesSent - s1.bytesSent}) {
      EXPECT_GE(sent, b.lo) << "rows per peer " << count / env.rowLen << ", kr " << kr;
      EXPECT_LE(sent, b.hi) << "rows per peer " << count / env.rowLen << ", kr " << kr;
    }
  }
}

// 192 and 1088 are multiples of 64 (the row length of the compressed ctest
// variant); 1, 7 and 1001 are not.
INSTANTIATE_TEST_SUITE_P(AllTypes, AlltoAllDropInTest,
                         testing::Combine(testing::ValuesIn(kAllTypes),
                                          testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{192}, size_t{1001},
                                                          size_t{1088})),
                         [](const testing::TestParamInfo<DropInParam>& p) {
                           return std::string(typeName(std::get<0>(p.param))) + "_count" +
                                  std::to_string(std::get<1>(p.param));
                         });

// ---------- rows forward and backward against a naive per-row sort ----------

struct RowsCase {
  spcclDataType_t type;
  size_t rowLen;
  float density;
  size_t rowsPerPeer;
};

void PrintTo(const RowsCase& c, std::ostream* os) {
  *os << typeName(c.type) << " rowLen " << c.rowLen << " density " << c.density << " rowsPerPeer " << c.rowsPerPeer;
}

constexpr float kTinyDensity = 1e-7f;  // kr = 1 for every row length here

std::string densityName(float d) {
  if (d == 1.0f / 16) return "d1of16";
  if (d == 0.3f) return "d03";
  if (d == 1.0f) return "d1";
  if (d == kTinyDensity) return "dtiny";
  return "d" + std::to_string(static_cast<int>(d * 1000));
}

std::vector<RowsCase> rowsCases() {
  std::vector<RowsCase> cases;
  // fp32: every row length (8-bit indices up to 256, 16-bit up to 65536, then
  // 32-bit), every density, one row and several rows per peer.
  for (size_t rowLen :
       {size_t{1}, size_t{7}, size_t{64}, size_t{128}, size_t{256}, size_t{257}, size_t{1000}, size_t{70000}}) {
    for (float density : {1.0f / 16, 0.3f, 1.0f, kTinyDensity}) {
      for (size_t rows : {size_t{1}, rowLen >= 70000 ? size_t{2} : size_t{5}}) {
        cases.push_back({spcclFloat32, rowLen, density, rows});
      }
    }
  }
  // 0.3f * 1000 and 0.3f * 70000 above sit within the float's rounding of
  // 300 and 21000 (kr 300 and 21000); just off those products:
  cases.push_back({spcclFloat32, 1000, 0.3007f, 3});    // kr 301
  cases.push_back({spcclFloat32, 70000, 0.30001f, 2});  // kr 21001
  // fp16 / bf16 buffers.
  for (spcclDataType_t t : {spcclFloat16, spcclBfloat16}) {
    for (size_t rowLen : {size_t{7}, size_t{128}, size_t{257}}) {
      for (float density : {1.0f / 16, 0.3f, 1.0f, kTinyDensity}) {
        cases.push_back({t, rowLen, density, 3});
      }
    }
  }
  // No rows at all.
  for (spcclDataType_t t : kRowTypes) cases.push_back({t, 64, 1.0f / 16, 0});
  return cases;
}

class RowsRoundTripTest : public MpiTest, public testing::WithParamInterface<RowsCase> {};

TEST_P(RowsRoundTripTest, ForwardKeepsTopKPerRowBackwardIsMaskTimesGrad) {
  const RowsCase c = GetParam();
  const size_t P = static_cast<size_t>(size_), L = c.rowLen, rpp = c.rowsPerPeer, es = typeSize(c.type);
  const size_t rows = P * rpp, n = rows * L;
  const spcclDataType_t wire = rowsWireTypeFromEnv();
  const size_t kr = rowKeepCount(L, c.density);

  const std::vector<unsigned char> send = rowsInput(n, L, c.type, seedFor(311, rank_, L * 131 + rpp));
  std::vector<unsigned char> sendCopy = send;
  std::vector<unsigned char> recv(n * es, 0xA5);
  spcclStats_t s0, s1, s2;
  ASSERT_TRUE(commStats(s0));
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(okOnAllRanks(
      spcclAlltoAllRowsCompressed(sendCopy.data(), recv.data(), rpp, L, c.type, c.density, &sel, comm_.get(), nullptr),
      comm_.get(), "spcclAlltoAllRowsCompressed"));
  SelectionPtr selection(sel);
  ASSERT_TRUE(allRanks(sel != nullptr)) << "the forward returned no selection";
  ASSERT_TRUE(commStats(s1));
  EXPECT_TRUE(sendCopy == send) << "the forward modified its send buffer";

  // What this rank must receive: each sender's block for this rank (MPI_Alltoall
  // of the inputs), masked by the naive per-row selection, values through the wire.
  const std::vector<unsigned char> dense = mpiAlltoallBytes(send.data(), rpp * L * es);
  const std::vector<unsigned char> want = maskedThroughWire(dense, dense, rows, L, c.type, kr, wire);
  Diff d = compareElements(recv.data(), want.data(), n, c.type, true);
  EXPECT_EQ(d.count, 0u) << "forward (kr " << kr << "): " << describeDiff(d, recv.data(), want.data(), L, c.type);

  // Backward: the gradient of what this rank received goes back to its senders;
  // this rank gets, for each row it sent, the peer's gradient at the positions
  // kept from its own row, zero elsewhere.
  const std::vector<unsigned char> grad = gradInput(n, c.type, seedFor(312, rank_, L * 131 + rpp));
  std::vector<unsigned char> gradCopy = grad;
  std::vector<unsigned char> gradOut(n * es, 0xA5);
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(gradCopy.data(), gradOut.data(), sel, nullptr), comm_.get(),
                           "spcclAlltoAllRowsBackward"));
  ASSERT_TRUE(commStats(s2));
  EXPECT_TRUE(gradCopy == grad) << "the backward modified its send buffer";
  const std::vector<unsigned char> gradFromPeers = mpiAlltoallBytes(grad.data(), rpp * L * es);
  const std::vector<unsigned char> wantGrad = maskedThroughWire(gradFromPeers, send, rows, L, c.type, kr, wire);
  d = compareElements(gradOut.data(), wantGrad.data(), n, c.type, true);
  EXPECT_EQ(d.count, 0u) << "backward (kr " << kr
                         << "): " << describeDiff(d, gradOut.data(), wantGrad.data(), L, c.type);

  // Counters: one call each; the dense figure of an alltoall of this shape.
  const uint64_t dense1 = (P - 1) * rpp * L * es;
  EXPECT_EQ(s1.calls - s0.calls, 1u);
  EXPECT_EQ(s2.calls - s1.calls, 1u);
  EXPECT_EQ(s1.denseBytes - s0.denseBytes, dense1) << "forward denseBytes";
  // The backward is an alltoall of the same shape (the stats comment's alltoall convention).
  EXPECT_EQ(s2.denseBytes - s1.denseBytes, dense1) << "backward denseBytes";
  // Bytes by the formula where it is pinned down: rows to send, fewer kept than
  // the row holds (with every entry kept an implementation may send dense rows).
  if (rpp > 0 && kr < L) {
    const ByteBounds f = forwardBytes(P, rpp, L, kr, ownValuesWire(c.type, wire));
    const uint64_t fs = s1.bytesSent - s0.bytesSent;
    EXPECT_GE(fs, f.lo) << "forward bytes: rowLen " << L << " (" << rowIndexBytes(L) << "-byte indices), kr " << kr;
    EXPECT_LE(fs, f.hi) << "forward bytes: rowLen " << L << " (" << rowIndexBytes(L) << "-byte indices), kr " << kr;
    const ByteBounds b = backwardBytes(P, rpp, kr, ownValuesWire(c.type, wire));
    const uint64_t bs = s2.bytesSent - s1.bytesSent;
    EXPECT_GE(bs, b.lo) << "backward bytes: kr " << kr;
    EXPECT_LE(bs, b.hi) << "backward bytes: kr " << kr;
  }
}

INSTANTIATE_TEST_SUITE_P(RowsGrid, RowsRoundTripTest, testing::ValuesIn(rowsCases()),
                         [](const testing::TestParamInfo<RowsCase>& p) {
                           std::string d = densityName(p.param.density);
                           for (char& ch : d) {
                             if (ch == '.' || ch == '-') ch = '_';
                           }
                           return std::string(typeName(p.param.type)) + "_len" + std::to_string(p.param.rowLen) + "_" +
                                  d + "_rows" + std::to_string(p.param.rowsPerPeer) + "_" + std::to_string(p.index);
                         });

// ---------- NaN / Inf and ties ----------
//
// Rows of 64 at density 1/16 (kr = 4), the same patterns in every block:
//  0: NaN, +Inf, -Inf among gaussians: the three and the largest finite entry;
//  1: six non-finite entries: all six, beyond kr, and no finite one;
//  2: four NaNs: those four;
//  3: +-1 alternating (all tied): positions 0..3;
//  4: zeros but for two entries: those two and the two lowest zero positions;
//  5: one Inf at the end and ties at 2.0: the Inf and positions of the first three 2.0s.
// The backward shows the kept positions exactly (mask * grad).
class RowsNonFiniteTest : public MpiTest, public testing::WithParamInterface<spcclDataType_t> {};

TEST_P(RowsNonFiniteTest, NonFiniteAlwaysKeptTiesToLowerPosition) {
  const spcclDataType_t type = GetParam();
  const spcclDataType_t wire = rowsWireTypeFromEnv();
  const size_t P = static_cast<size_t>(size_), L = 64, rpp = 6, es = typeSize(type), rows = P * rpp, n = rows * L;
  const float density = 1.0f / 16;
  const size_t kr = rowKeepCount(L, density);
  ASSERT_EQ(kr, 4u);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(n);
  std::mt19937_64 gen(seedFor(321, rank_));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t r = 0; r < rows; ++r) {
    float* row = v.data() + r * L;
    const size_t off = (r / rpp + static_cast<size_t>(rank_)) % 7;  // vary positions by block and rank
    for (size_t i = 0; i < L; ++i) row[i] = normal(gen);
    switch (r % rpp) {
      case 0:
        row[3 + off] = nan;
        row[10 + off] = inf;
        row[20 + off] = -inf;
        break;
      case 1:
        for (size_t i : {1, 5, 9, 30, 40, 63}) row[(i + off) % L] = i % 2 ? inf : nan;
        break;
      case 2:
        for (size_t i : {0, 17, 33, 62}) row[(i + off) % L] = nan;
        break;
      case 3:
        for (size_t i = 0; i < L; ++i) row[i] = i % 2 ? -1.0f : 1.0f;
        break;
      case 4:
        for (size_t i = 0; i < L; ++i) row[i] = i % 3 ? 0.0f : -0.0f;
        row[40 + off] = 3.0f;
        row[50 + off] = -0.5f;
        break;
      default:
        for (size_t i = 0; i < L; ++i) row[i] = i % 5 == 2 ? 2.0f : (i % 5 == 4 ? -2.0f : 0.25f);
        row[L - 1] = -inf;
        break;
    }
  }
  std::vector<unsigned char> send(n * es);
  for (size_t e = 0; e < n; ++e) storeFromFloat(send.data(), e, v[e], type);

  std::vector<unsigned char> recv(n * es, 0xA5);
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(okOnAllRanks(
      spcclAlltoAllRowsCompressed(send.data(), recv.data(), rpp, L, type, density, &sel, comm_.get(), nullptr),
      comm_.get(), "spcclAlltoAllRowsCompressed"));
  SelectionPtr selection(sel);
  const std::vector<unsigned char> dense = mpiAlltoallBytes(send.data(), rpp * L * es);
  const std::vector<unsigned char> want = maskedThroughWire(dense, dense, rows, L, type, kr, wire);
  Diff d = compareElements(recv.data(), want.data(), n, type, true);
  EXPECT_EQ(d.count, 0u) << "forward: " << describeDiff(d, recv.data(), want.data(), L, type);

  const std::vector<unsigned char> grad = gradInput(n, type, seedFor(322, rank_));
  std::vector<unsigned char> gradOut(n * es, 0xA5);
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), comm_.get(),
                           "spcclAlltoAllRowsBackward"));
  const std::vector<unsigned char> wantGrad =
      maskedThroughWire(mpiAlltoallBytes(grad.data(), rpp * L * es), send, rows, L, type, kr, wire);
  d = compareElements(gradOut.data(), wantGrad.data(), n, type, true);
  EXPECT_EQ(d.count, 0u) << "backward (shows the kept positions): "
                         << describeDiff(d, gradOut.data(), wantGrad.data(), L, type);
}

INSTANTIATE_TEST_SUITE_P(RowTypes, RowsNonFiniteTest, testing::ValuesIn(kRowTypes),
                         [](const testing::TestParamInfo<spcclDataType_t>& p) {
                           return std::string(typeName(p.param));
                         });

// ---------- bytes: the acceptance figure (1/12.8 of dense at rowLen 128, 1/16) ----------

// 4096 rows x 128 fp32 per rank at density 1/16 (8 of 128 kept, 8-bit
// indices): at most 1/10 of the dense alltoall's bytes.
TEST_F(MpiTest, RowsBytesAtMostATenthOfDense) {
  const size_t P = static_cast<size_t>(size_), L = 128, rows = 4096, rpp = rows / P, n = rpp * P * L;
  const std::vector<float> in = gaussian(n, seedFor(331, rank_));
  std::vector<float> out(n);
  spcclStats_t s0, s1;
  ASSERT_TRUE(commStats(s0));
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(in.data(), out.data(), rpp, L, spcclFloat32, 1.0f / 16, nullptr,
                                                       comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAllRowsCompressed"));
  ASSERT_TRUE(commStats(s1));
  const uint64_t sent = s1.bytesSent - s0.bytesSent, dense = s1.denseBytes - s0.denseBytes;
  EXPECT_EQ(dense, (P - 1) * rpp * L * sizeof(float));
  EXPECT_LE(static_cast<double>(sent) / static_cast<double>(dense), 0.1) << "bytesSent " << sent << ", dense " << dense;
  if (rowsWireTypeFromEnv() == spcclFloat32) {
    const ByteBounds b = forwardBytes(P, rpp, L, 8, spcclFloat32);
    EXPECT_GE(sent, b.lo);
    EXPECT_LE(sent, b.hi);
  }
}

// ---------- selection lifecycle ----------

class SelectionTest : public MpiTest {
 protected:
  static constexpr size_t kLen = 64, kRows = 3;
  static constexpr float kDensity = 1.0f / 16;

  size_t elements() const { return static_cast<size_t>(size_) * kRows * kLen; }

  // One forward on comm; the selection comes back in sel.
  testing::AssertionResult forward(spcclComm_t comm, std::vector<float>& recv, spcclSelection_t* sel, uint64_t tag) {
    const std::vector<float> in = gaussian(elements(), seedFor(tag, rank_));
    recv.assign(elements(), 0.0f);
    return okOnAllRanks(
        spcclAlltoAllRowsCompressed(in.data(), recv.data(), kRows, kLen, spcclFloat32, kDensity, sel, comm, nullptr),
        comm, "spcclAlltoAllRowsCompressed");
  }
};

// Every rank gets spcclInvalidUsage (a local check: nothing to agree on).
void expectInvalidUsage(spcclResult_t r, const char* what) {
  EXPECT_EQ(r, spcclInvalidUsage) << what << " returned " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                  << ")";
  if (r != spcclSuccess) {
    EXPECT_STRNE(spcclGetLastError(nullptr), "") << what << ": no detailed message";
  }
}

TEST_F(SelectionTest, SecondBackwardIsInvalidUsage) {
  std::vector<float> recv;
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(forward(comm_.get(), recv, &sel, 341));
  std::vector<float> grad = gaussian(elements(), seedFor(342, rank_)), gradOut(elements());
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), comm_.get(),
                           "first spcclAlltoAllRowsBackward"));
  const std::vector<float> first = gradOut;
  expectInvalidUsage(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), "second backward");
  EXPECT_TRUE(gradOut == first) << "the refused backward wrote its output";
  EXPECT_EQ(spcclSelectionDestroy(sel), spcclSuccess) << spcclGetLastError(nullptr);

  // The communicator is still in step on every rank.
  ASSERT_TRUE(forward(comm_.get(), recv, &sel, 343));
  SelectionPtr again(sel);
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), comm_.get(),
                           "backward after the refused one"));
}

// The backward learns its communicator from the selection: its refusal's log
// line names this rank, as every other call's does (it said [-1]).
TEST_F(SelectionTest, RefusedBackwardLogsItsRank) {
  std::vector<float> recv;
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(forward(comm_.get(), recv, &sel, 344));
  SelectionPtr owned(sel);
  std::vector<float> grad = gaussian(elements(), seedFor(345, rank_)), gradOut(elements());
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), comm_.get(),
                           "first spcclAlltoAllRowsBackward"));
  testing::internal::CaptureStderr();
  const spcclResult_t again = spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(again, spcclInvalidUsage);
  const size_t at = err.find("has already served a backward");
  if (at == std::string::npos) GTEST_SKIP() << "SPCCL_DEBUG silences the refusal's line: " << err;
  const size_t line = err.rfind('\n', at) == std::string::npos ? 0 : err.rfind('\n', at) + 1;
  EXPECT_NE(err.substr(line, at - line).find(" [" + std::to_string(rank_) + "] SPCCL "), std::string::npos) << err;
}

TEST_F(SelectionTest, SecondDestroyIsInvalidUsage) {
  std::vector<float> recv;
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(forward(comm_.get(), recv, &sel, 344));
  ASSERT_TRUE(allRanks(sel != nullptr));
  // Destroyed without a backward (a forward whose loss needed no gradient).
  EXPECT_EQ(spcclSelectionDestroy(sel), spcclSuccess) << spcclGetLastError(nullptr);
  expectInvalidUsage(spcclSelectionDestroy(sel), "second spcclSelectionDestroy");
}

TEST_F(SelectionTest, BackwardAfterCommDestroyIsInvalidUsage) {
  spcclComm_t other = nullptr;
  ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&other, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI"));
  std::vector<float> recv;
  spcclSelection_t sel = nullptr;
  const testing::AssertionResult ok = forward(other, recv, &sel, 345);
  ASSERT_EQ(spcclCommDestroy(other), spcclSuccess);
  ASSERT_TRUE(ok);
  std::vector<float> grad = gaussian(elements(), seedFor(346, rank_)), gradOut(elements());
  expectInvalidUsage(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr),
                     "backward after spcclCommDestroy");
  // Freeing the handle itself is still the caller's job, and allowed.
  EXPECT_EQ(spcclSelectionDestroy(sel), spcclSuccess) << spcclGetLastError(nullptr);
}

// A backward must name its own forward: rank 0 running A's backward while
// the others run B's (same shape) fails on every rank instead of scattering
// B's gradients at A's positions. A refused backward leaves its selection
// for a retry, also when it met another collective.
TEST_F(SelectionTest, BackwardOfAnotherForwardsSelectionFailsOnEveryRank) {
  std::vector<float> recvA, recvB;
  spcclSelection_t a = nullptr, b = nullptr;
  ASSERT_TRUE(forward(comm_.get(), recvA, &a, 371));
  SelectionPtr ga(a);
  ASSERT_TRUE(forward(comm_.get(), recvB, &b, 372));
  SelectionPtr gb(b);
  std::vector<float> grad = gaussian(elements(), seedFor(373, rank_)), gradOut(elements(), 7.0f);
  const spcclResult_t swapped = spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), rank_ == 0 ? a : b, nullptr);
  EXPECT_EQ(ranksWhere(swapped != spcclInvalidUsage), "") << "not spcclInvalidUsage there";
  EXPECT_NE(std::string(spcclGetLastError(comm_.get())).find("another forward's selection"), std::string::npos)
      << spcclGetLastError(comm_.get());
  // Rank 0's backward against the others' exact alltoall: refused everywhere.
  const size_t count = 16;
  std::vector<float> x(static_cast<size_t>(size_) * count, 1.0f), y(x.size());
  const spcclResult_t met = rank_ == 0 ? spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), a, nullptr)
                                       : spcclAlltoAll(x.data(), y.data(), count, spcclFloat32, comm_.get(), nullptr);
  EXPECT_EQ(ranksWhere(met != spcclInvalidUsage), "") << "not spcclInvalidUsage there";
  // Neither refusal spent a selection: each backward runs once, with its own
  // forward's positions (the gradients' alltoall masked by what this rank sent).
  const auto bytesOf = [](const std::vector<float>& v) {
    std::vector<unsigned char> out(v.size() * sizeof(float));
    std::memcpy(out.data(), v.data(), out.size());
    return out;
  };
  const std::vector<unsigned char> gradBytes = bytesOf(grad);
  for (const auto& [sel, tag] : {std::pair{a, uint64_t{371}}, std::pair{b, uint64_t{372}}}) {
    std::fill(gradOut.begin(), gradOut.end(), 7.0f);
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), comm_.get(),
                             "backward after the refused ones"));
    const std::vector<unsigned char> want =
        maskedThroughWire(mpiAlltoallBytes(gradBytes.data(), kRows * kLen * sizeof(float)),
                          bytesOf(gaussian(elements(), seedFor(tag, rank_))), static_cast<size_t>(size_) * kRows, kLen,
                          spcclFloat32, rowKeepCount(kLen, kDensity), rowsWireTypeFromEnv());
    const Diff d = compareElements(gradOut.data(), want.data(), elements(), spcclFloat32, true);
    EXPECT_EQ(d.count, 0u) << describeDiff(d, gradOut.data(), want.data(), kLen, spcclFloat32);
  }
}

// SPCCL_PROFILE=1: the communicator's destroy prints one line with the split
// of its alltoall-rows calls, counting them; without it, nothing.
TEST_F(SelectionTest, ProfileLineAtCommDestroy) {
  for (const bool profile : {true, false}) {
    SCOPED_TRACE(profile ? "SPCCL_PROFILE=1" : "SPCCL_PROFILE=0");
    spcclComm_t other = nullptr;
    {
      const ScopedEnv env("SPCCL_PROFILE", profile ? "1" : "0");  // read at creation
      ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&other, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI"));
    }
    std::vector<float> recv;
    spcclSelection_t sel = nullptr;
    ASSERT_TRUE(forward(other, recv, nullptr, 347));
    ASSERT_TRUE(forward(other, recv, &sel, 348));
    SelectionPtr owned(sel);
    std::vector<float> grad = gaussian(elements(), seedFor(349, rank_)), gradOut(elements());
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), sel, nullptr), other,
                             "spcclAlltoAllRowsBackward"));
    testing::internal::CaptureStderr();
    const spcclResult_t destroyed = spcclCommDestroy(other);
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_EQ(destroyed, spcclSuccess);
    const size_t at = err.find("profile: alltoall rows, 2 forward calls, per call ");
    if (!profile) {
      EXPECT_EQ(err.find("profile:"), std::string::npos) << err;
      continue;
    }
    ASSERT_NE(at, std::string::npos) << err;
    EXPECT_NE(err.find("[" + std::to_string(rank_) + "] SPCCL INFO profile: alltoall rows"), std::string::npos) << err;
    EXPECT_NE(err.find("; 1 backward calls, per call ", at), std::string::npos) << err;
    EXPECT_NE(err.find(" = selection ", at), std::string::npos) << err;
  }
}

// A NULL selection pointer: the forward runs, nothing is kept, same output.
TEST_F(SelectionTest, NullSelectionPointerIsAllowed) {
  std::vector<float> withSel, withoutSel;
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(forward(comm_.get(), withSel, &sel, 347));
  SelectionPtr guard(sel);
  ASSERT_TRUE(forward(comm_.get(), withoutSel, nullptr, 347));
  EXPECT_TRUE(std::memcmp(withSel.data(), withoutSel.data(), withSel.size() * sizeof(float)) == 0);
}

// Two forwards of different shapes, backwards in reverse order (as autograd
// runs them): each backward uses its own selection.
TEST_F(MpiTest, InterleavedSelectionsBackwardInReverseOrder) {
  const size_t P = static_cast<size_t>(size_);
  struct Fwd {
    size_t len, rpp;
    float density;
    std::vector<unsigned char> send, recv;
    spcclSelection_t sel = nullptr;
  };
  Fwd a{64, 4, 1.0f / 16, {}, {}}, b{257, 2, 0.3f, {}, {}};
  for (Fwd* f : {&a, &b}) {
    const size_t n = P * f->rpp * f->len;
    f->send = rowsInput(n, f->len, spcclFloat32, seedFor(351, rank_, f->len));
    f->recv.assign(n * 4, 0xA5);
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsCompressed(f->send.data(), f->recv.data(), f->rpp, f->len, spcclFloat32,
                                                         f->density, &f->sel, comm_.get(), nullptr),
                             comm_.get(), "spcclAlltoAllRowsCompressed"));
  }
  SelectionPtr ga(a.sel), gb(b.sel);
  for (Fwd* f : {&b, &a}) {
    SCOPED_TRACE("rowLen " + std::to_string(f->len));
    const size_t n = P * f->rpp * f->len, kr = rowKeepCount(f->len, f->density);
    const std::vector<unsigned char> grad = gradInput(n, spcclFloat32, seedFor(352, rank_, f->len));
    std::vector<unsigned char> gradOut(n * 4, 0xA5);
    ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(grad.data(), gradOut.data(), f->sel, nullptr), comm_.get(),
                             "spcclAlltoAllRowsBackward"));
    const std::vector<unsigned char> want =
        maskedThroughWire(mpiAlltoallBytes(grad.data(), f->rpp * f->len * 4), f->send, P * f->rpp, f->len, spcclFloat32,
                          kr, rowsWireTypeFromEnv());
    const Diff d = compareElements(gradOut.data(), want.data(), n, spcclFloat32, true);
    EXPECT_EQ(d.count, 0u) << describeDiff(d, gradOut.data(), want.data(), f->len, spcclFloat32);
  }
}

// ---------- shapes that differ between ranks ----------

// Each mismatch must fail on every rank (never hang, never a result), and the
// communicator stays usable.
TEST_F(MpiTest, MismatchedRowShapesFailOnEveryRank) {
  const bool odd = rank_ == 0;
  struct Case {
    const char* what;
    size_t rpp, len;
    spcclDataType_t type;
    float density = 0.25f;
    bool nanRows = false;  // rank 0: 5 NaNs in the first row of each block
  };
  const Case cases[] = {
      {"rowLen", 3, odd ? size_t{64} : size_t{65}, spcclFloat32},
      {"rowsPerPeer", odd ? size_t{2} : size_t{3}, 64, spcclFloat32},
      {"datatype", 3, 64, odd ? spcclBfloat16 : spcclFloat32},
      {"density", 3, 8, spcclFloat32, odd ? 0.5f : 0.25f},
      // Rows past their keep (NaN/Inf are always kept) send per-row counts, which
      // a receiver keeping fewer per row cannot tell from a higher density.
      {"density, NaN rows", 3, 8, spcclFloat32, odd ? 0.5f : 0.25f, odd},
  };
  const size_t P = static_cast<size_t>(size_);
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string("mismatched ") + k.what);
    const size_t n = P * k.rpp * k.len;
    std::vector<unsigned char> send = rowsInput(n, k.len, k.type, seedFor(361, rank_));
    if (k.nanRows)
      for (size_t block = 0; block < P; ++block)
        for (size_t i = 0; i < 5; ++i) {
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::memcpy(send.data() + (block * k.rpp * k.len + i) * sizeof(float), &nan, sizeof nan);
        }
    std::vector<unsigned char> recv(n * typeSize(k.type));
    spcclSelection_t sel = nullptr;
    const spcclResult_t r = spcclAlltoAllRowsCompressed(send.data(), recv.data(), k.rpp, k.len, k.type, k.density, &sel,
                                                        comm_.get(), nullptr);
    const std::string succeeded = ranksWhere(r == spcclSuccess);
    EXPECT_TRUE(succeeded.empty()) << "returned success on rank(s) " << succeeded;
    if (r != spcclSuccess) {
      EXPECT_STRNE(spcclGetLastError(comm_.get()), "") << "no detailed message";
    }
    if (sel != nullptr) spcclSelectionDestroy(sel);
  }
  const size_t count = 33;
  const std::vector<unsigned char> send = randomBytes(P * count * 4, seedFor(362, rank_));
  std::vector<unsigned char> recv(send.size());
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(send.data(), recv.data(), count, spcclInt32, comm_.get(), nullptr),
                           comm_.get(), "spcclAlltoAll after the mismatched calls"));
  EXPECT_TRUE(recv == mpiAlltoallBytes(send.data(), count * 4));
}

// ---------- invalid arguments and empty calls ----------

void expectInvalidArgument(spcclResult_t r, const std::string& what) {
  EXPECT_EQ(r, spcclInvalidArgument) << what << " returned " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                     << ")";
  const char* message = spcclGetLastError(nullptr);
  EXPECT_TRUE(message != nullptr && *message != '\0') << what << ": spcclGetLastError(NULL) is empty";
}

TEST_F(MpiTest, AlltoAllInvalidArgumentsFailBeforeCommunicating) {
  const spcclDataType_t kBadType = invalidEnum<spcclDataType_t>(42);
  const size_t P = static_cast<size_t>(size_), L = 16, rpp = 2, n = P * rpp * L;
  std::vector<float> send(n, 1.0f), recv(n);
  // One rank at a time makes every bad call while the others wait: a call
  // that communicated before validating would hang (the watchdog names it).
  for (int turn = 0; turn < size_; ++turn) {
    if (rank_ == turn) {
      spcclComm_t comm = comm_.get();
      expectInvalidArgument(spcclAlltoAll(send.data(), recv.data(), rpp * L, spcclFloat32, nullptr, nullptr),
                            "spcclAlltoAll with a NULL comm");
      expectInvalidArgument(spcclAlltoAll(send.data(), recv.data(), rpp * L, kBadType, comm, nullptr),
                            "spcclAlltoAll with datatype 42");
      expectInvalidArgument(spcclAlltoAll(nullptr, recv.data(), rpp * L, spcclFloat32, comm, nullptr),
                            "spcclAlltoAll with a NULL sendbuff");
      expectInvalidArgument(spcclAlltoAll(send.data(), nullptr, rpp * L, spcclFloat32, comm, nullptr),
                            "spcclAlltoAll with a NULL recvbuff");

      struct Bad {
        const char* what;
        const void* send;
        void* recv;
        size_t rowLen;
        spcclDataType_t type;
        float density;
        spcclComm_t comm;
      };
      const Bad bad[] = {
          {"a NULL comm", send.data(), recv.data(), L, spcclFloat32, 0.25f, nullptr},
          {"a NULL sendbuff", nullptr, recv.data(), L, spcclFloat32, 0.25f, comm},
          {"a NULL recvbuff", send.data(), nullptr, L, spcclFloat32, 0.25f, comm},
          {"rowLen 0", send.data(), recv.data(), 0, spcclFloat32, 0.25f, comm},
          {"datatype int32 (fp32, fp16 and bf16 only)", send.data(), recv.data(), L, spcclInt32, 0.25f, comm},
          {"datatype 42", send.data(), recv.data(), L, kBadType, 0.25f, comm},
          {"density 0", send.data(), recv.data(), L, spcclFloat32, 0.0f, comm},
          {"density -0.5", send.data(), recv.data(), L, spcclFloat32, -0.5f, comm},
          {"density 1.5", send.data(), recv.data(), L, spcclFloat32, 1.5f, comm},
          {"density NaN", send.data(), recv.data(), L, spcclFloat32, std::numeric_limits<float>::quiet_NaN(), comm},
      };
      for (const Bad& b : bad) {
        spcclSelection_t sel = nullptr;
        expectInvalidArgument(
            spcclAlltoAllRowsCompressed(b.send, b.recv, rpp, b.rowLen, b.type, b.density, &sel, b.comm, nullptr),
            std::string("spcclAlltoAllRowsCompressed with ") + b.what);
        EXPECT_EQ(sel, nullptr) << "a refused forward returned a selection (" << b.what << ")";
        if (sel != nullptr) spcclSelectionDestroy(sel);
      }
      expectInvalidArgument(spcclAlltoAllRowsBackward(send.data(), recv.data(), nullptr, nullptr),
                            "spcclAlltoAllRowsBackward with a NULL selection");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // Valid calls still work, and a real selection with NULL gradient buffers is refused locally.
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(okOnAllRanks(
      spcclAlltoAllRowsCompressed(send.data(), recv.data(), rpp, L, spcclFloat32, 0.25f, &sel, comm_.get(), nullptr),
      comm_.get(), "spcclAlltoAllRowsCompressed after the invalid calls"));
  SelectionPtr guard(sel);
  for (int turn = 0; turn < size_; ++turn) {
    if (rank_ == turn) {
      expectInvalidArgument(spcclAlltoAllRowsBackward(nullptr, recv.data(), sel, nullptr),
                            "spcclAlltoAllRowsBackward with a NULL gradSendbuff");
      expectInvalidArgument(spcclAlltoAllRowsBackward(send.data(), nullptr, sel, nullptr),
                            "spcclAlltoAllRowsBackward with a NULL gradRecvbuff");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The refused calls did not use the selection up.
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(send.data(), recv.data(), sel, nullptr), comm_.get(),
                           "spcclAlltoAllRowsBackward after the refused ones"));
}

// Count 0 / no rows: no-ops that accept NULL buffers (as in NCCL), and the
// empty selection serves its backward.
TEST_F(MpiTest, AlltoAllZeroCountAcceptsNullBuffers) {
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAll(nullptr, nullptr, 0, spcclFloat32, comm_.get(), nullptr), comm_.get(),
                           "spcclAlltoAll with count 0"));
  spcclSelection_t sel = nullptr;
  ASSERT_TRUE(okOnAllRanks(
      spcclAlltoAllRowsCompressed(nullptr, nullptr, 0, 64, spcclFloat32, 0.25f, &sel, comm_.get(), nullptr),
      comm_.get(), "spcclAlltoAllRowsCompressed with 0 rows per peer"));
  SelectionPtr guard(sel);
  ASSERT_TRUE(okOnAllRanks(spcclAlltoAllRowsBackward(nullptr, nullptr, sel, nullptr), comm_.get(),
                           "spcclAlltoAllRowsBackward with 0 rows per peer"));
}

}  // namespace
}  // namespace spccl::test
