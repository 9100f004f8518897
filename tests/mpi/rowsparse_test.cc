// Row-sparse allreduce: every rank gets the
// sorted unique ids of the union over ranks, each with the sum of all its rows,
// bitwise identical everywhere; duplicates within and across ranks, empty
// inputs, ids at the int64 limits, the capacity-too-small path, bad arguments.
// ctest runs this binary with SPCCL_ROWSPARSE_ALGO unset (auto), =allgather
// and =partition.
//
// Values. The header: "Rows are summed in fp32 (fp64 for spcclFloat64) in rank
// order", fp16/bf16 rounded once at the end. It does not fix the order in which
// a rank's own duplicates are merged, so:
// - random data with local duplicates is checked against a double-precision
//   sum with a bound for fp32 (fp64) accumulation plus the final rounding;
// - random data without local duplicates is checked bitwise against the sum
//   in the accumulation type in rank order, rounded once;
// - small multiples of 1/4 (every partial sum exact in fp32) are checked
//   bitwise whatever the order, with one id whose rows only sum correctly if
//   fp16/bf16 inputs are accumulated in fp32 and rounded once (2048 + 1 + 1 is
//   2048 in fp16 step by step, 2050 rounded once; 256 + 1 + 1 likewise in bf16).
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "test_util.h"

namespace spccl::test {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

enum class Scenario { kDuplicates, kLimits, kDistinct, kIntegers };

const char* scenarioName(Scenario s) {
  switch (s) {
    case Scenario::kDuplicates:
      return "duplicates";
    case Scenario::kLimits:
      return "int64limits";
    case Scenario::kDistinct:
      return "nolocalduplicates";
    default:
      return "exactsums";
  }
}

struct SparseInput {
  std::vector<int64_t> ids;
  std::vector<unsigned char> rows;  // ids.size() x rowLen elements of the datatype
};

// The id of the exact-sums scenario whose fp16/bf16 sum needs one final rounding.
constexpr int64_t kRoundOnceId = 7777;

float roundOnceBase(spcclDataType_t t) { return t == spcclFloat16 ? 2048.0f : t == spcclBfloat16 ? 256.0f : 16.0f; }

void storeValue(SparseInput& in, size_t e, double v, spcclDataType_t t) {
  if (t == spcclFloat64) {
    std::memcpy(in.rows.data() + e * 8, &v, 8);
  } else {
    storeFromFloat(in.rows.data(), e, static_cast<float>(v), t);
  }
}

SparseInput makeInput(Scenario s, spcclDataType_t t, size_t rowLen, int rank, int ranks) {
  SparseInput in;
  std::mt19937_64 gen(seedFor(501 + static_cast<uint64_t>(s), rank, rowLen));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<int64_t> pool;
  size_t nrows = 0;
  switch (s) {
    case Scenario::kDuplicates:
      // 60 ids shared by every rank, ~150 rows per rank: heavy duplication.
      for (int64_t i = 0; i < 60; ++i) pool.push_back(i * 1000003 - 20000000);
      nrows = rank == 1 ? 0 : 120 + 17 * static_cast<size_t>(rank);  // rank 1 empty
      for (size_t i = 0; i < nrows; ++i) in.ids.push_back(pool[gen() % pool.size()]);
      break;
    case Scenario::kLimits:
      pool = {kMin, kMin + 1, kMin / 2, -1000, -1, 0, 1, (int64_t{1} << 40) + 3, kMax / 2, kMax - 1, kMax};
      nrows = 30 + 5 * static_cast<size_t>(rank);
      for (size_t i = 0; i < nrows; ++i) in.ids.push_back(pool[gen() % pool.size()]);
      if (rank == ranks - 1) {
        in.ids.front() = kMax;  // both limits are certainly present
        in.ids.back() = kMin;
      }
      break;
    case Scenario::kDistinct: {
      // Each rank: distinct ids (some negative), overlapping with the others'.
      std::vector<int64_t> candidates;
      for (int64_t i = -40; i < 60; ++i) candidates.push_back(i * 7919);
      std::shuffle(candidates.begin(), candidates.end(), gen);
      nrows = 35 + 3 * static_cast<size_t>(rank);
      in.ids.assign(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(nrows));
      break;
    }
    case Scenario::kIntegers:
      for (int64_t i = -10; i < 20; ++i) pool.push_back(i * 31);
      nrows = 80 + 9 * static_cast<size_t>(rank);
      for (size_t i = 0; i < nrows; ++i) in.ids.push_back(pool[gen() % pool.size()]);
      // Round-once probe: rank 0 sends the base row first, then every rank two rows of ones.
      if (rank == 0) in.ids.insert(in.ids.begin() + 3, kRoundOnceId);
      in.ids.insert(in.ids.begin() + 5, kRoundOnceId);
      in.ids.push_back(kRoundOnceId);
      nrows = in.ids.size();
      break;
  }
  in.rows.assign(nrows * rowLen * typeSize(t), 0);
  for (size_t i = 0; i < nrows; ++i) {
    for (size_t j = 0; j < rowLen; ++j) {
      double v;
      if (s != Scenario::kIntegers) {
        v = normal(gen);
      } else if (in.ids[i] == kRoundOnceId) {
        const bool base = rank == 0 && i == 3;
        v = base ? roundOnceBase(t) : 1.0;
      } else {
        v = static_cast<double>(static_cast<int>(gen() % 33) - 16) * 0.25;
      }
      storeValue(in, i * rowLen + j, v, t);
    }
  }
  return in;
}

struct Reference {
  std::vector<int64_t> ids;              // sorted union
  std::vector<double> sum, absSum;       // exact-ish (double) sums, ids.size() x rowLen
  std::vector<size_t> terms;             // rows summed per id, over all ranks
  std::vector<unsigned char> rankOrder;  // accumulation type, local merge in input order, then rank order,
                                         // rounded once to the datatype
  bool localDuplicates = false;          // some rank repeats an id
};

// Collective: gathers every rank's input.
Reference reference(const SparseInput& mine, spcclDataType_t t, size_t rowLen) {
  const int P = worldSize();
  const size_t es = typeSize(t);
  std::vector<size_t> idOff, rowOff;
  const std::vector<int64_t> ids = allgatherv(mine.ids, &idOff);
  const std::vector<unsigned char> rows = allgatherv(mine.rows, &rowOff);
  Reference ref;
  std::set<int64_t> all(ids.begin(), ids.end());
  ref.ids.assign(all.begin(), all.end());
  const size_t U = ref.ids.size();
  std::map<int64_t, size_t> slot;
  for (size_t u = 0; u < U; ++u) slot[ref.ids[u]] = u;
  ref.sum.assign(U * rowLen, 0.0);
  ref.absSum.assign(U * rowLen, 0.0);
  ref.terms.assign(U, 0);
  std::vector<double> totalD(U * rowLen, 0.0);
  std::vector<float> totalF(U * rowLen, 0.0f);
  for (int r = 0; r < P; ++r) {
    const size_t begin = idOff[static_cast<size_t>(r)], end = idOff[static_cast<size_t>(r) + 1];
    const unsigned char* base = rows.data() + rowOff[static_cast<size_t>(r)];
    std::map<int64_t, std::vector<double>> localD;
    std::map<int64_t, std::vector<float>> localF;
    for (size_t i = begin; i < end; ++i) {
      const int64_t id = ids[i];
      const size_t u = slot[id];
      ++ref.terms[u];
      auto [itD, newD] = localD.try_emplace(id, rowLen, 0.0);
      auto [itF, newF] = localF.try_emplace(id, rowLen, 0.0f);
      if (!newD) ref.localDuplicates = true;
      for (size_t j = 0; j < rowLen; ++j) {
        const double v = loadAsDouble(base, (i - begin) * rowLen + j, t);
        ref.sum[u * rowLen + j] += v;
        ref.absSum[u * rowLen + j] += std::fabs(v);
        itD->second[j] += v;
        itF->second[j] += static_cast<float>(v);
      }
    }
    for (const auto& [id, v] : localD) {
      for (size_t j = 0; j < rowLen; ++j) totalD[slot[id] * rowLen + j] += v[j];
    }
    for (const auto& [id, v] : localF) {
      for (size_t j = 0; j < rowLen; ++j) totalF[slot[id] * rowLen + j] += v[j];
    }
  }
  ref.rankOrder.assign(U * rowLen * es, 0);
  for (size_t e = 0; e < U * rowLen; ++e) {
    if (t == spcclFloat64) {
      std::memcpy(ref.rankOrder.data() + e * 8, &totalD[e], 8);
    } else {
      storeFromFloat(ref.rankOrder.data(), e, totalF[e], t);
    }
  }
  int dup = ref.localDuplicates ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &dup, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
  ref.localDuplicates = dup != 0;
  return ref;
}

// Elements of out (U x rowLen) outside the bound of fp32 (fp64) accumulation
// of `terms` rows plus the final rounding to the datatype.
Diff outsideTolerance(const void* out, const Reference& ref, size_t rowLen, spcclDataType_t t) {
  const double uAcc = t == spcclFloat64 ? 0x1p-53 : 0x1p-24;
  const double uOut = t == spcclFloat16 ? 0x1p-11 : t == spcclBfloat16 ? 0x1p-8 : 0.0;
  const double tiny = t == spcclFloat16 ? 0x1p-24 : 0.0;
  Diff d;
  for (size_t e = 0; e < ref.sum.size(); ++e) {
    const double got = loadAsDouble(out, e, t);
    const double m = static_cast<double>(ref.terms[e / rowLen]);
    const double tol = 2.0 * (m + 1.0) * uAcc * ref.absSum[e] + uOut * std::fabs(ref.sum[e]) * 1.01 + tiny;
    if (!(std::fabs(got - ref.sum[e]) <= tol) && d.count++ == 0) d.first = e;
  }
  return d;
}

class RowSparseTest : public MpiTest {
 protected:
  // One call with capacity `capacity` (the buffers 3 rows longer, to catch
  // writes past the union). checkOutput needs capacity >= the union.
  spcclResult_t call(const SparseInput& in, size_t rowLen, spcclDataType_t t, size_t capacity,
                     std::vector<int64_t>& outIds, std::vector<unsigned char>& outRows, size_t& outN) {
    outIds.assign(capacity + 3, int64_t{0x5A5A5A5A5A5A5A5A});
    outRows.assign((capacity + 3) * rowLen * typeSize(t), 0xA5);
    outN = 987654321;
    const size_t nrows = in.ids.size();
    return spcclAllReduceRowSparse(nrows ? in.ids.data() : nullptr, nrows ? in.rows.data() : nullptr, nrows, rowLen, t,
                                   outIds.data(), outRows.data(), capacity, &outN, comm_.get(), nullptr);
  }

  // Ids, values and cross-rank identity of a successful call's output.
  void checkOutput(const Reference& ref, size_t rowLen, spcclDataType_t t, bool exact,
                   const std::vector<int64_t>& outIds, const std::vector<unsigned char>& outRows, size_t outN) {
    const size_t U = ref.ids.size(), es = typeSize(t);
    EXPECT_EQ(outN, U) << "*outNrows";
    const size_t n = std::min(outN, U);
    size_t badId = 0, firstBadId = 0;
    for (size_t u = 0; u < n; ++u) {
      if (outIds[u] != ref.ids[u] && badId++ == 0) firstBadId = u;
    }
    EXPECT_EQ(badId, 0u) << "ids differ from the sorted union, first at " << firstBadId << ": got "
                         << (n ? outIds[firstBadId] : 0) << ", expected " << (n ? ref.ids[firstBadId] : 0);
    EXPECT_EQ(outIds[U], int64_t{0x5A5A5A5A5A5A5A5A}) << "an id was written past the union";
    if (badId == 0 && outN == U) {
      const Diff d = exact ? compareElements(outRows.data(), ref.rankOrder.data(), U * rowLen, t, false)
                           : outsideTolerance(outRows.data(), ref, rowLen, t);
      EXPECT_EQ(d.count, 0u) << (exact ? "bitwise: " : "tolerance: ")
                             << describeDiff(d, outRows.data(), ref.rankOrder.data(), rowLen, t) << " (id "
                             << (d.count ? ref.ids[d.first / rowLen] : 0) << ", double sum "
                             << (d.count ? ref.sum[d.first] : 0.0) << ")";
    }
    // U (the same on every rank) rather than outN: the broadcast sizes must agree.
    EXPECT_TRUE(identicalOnAllRanks(outIds.data(), U, sizeof(int64_t))) << "ids";
    EXPECT_TRUE(identicalOnAllRanks(outRows.data(), U * rowLen, es)) << "rows";
  }
};

using RowSparseParam = std::tuple<spcclDataType_t, size_t, Scenario>;
class RowSparseReferenceTest : public RowSparseTest, public testing::WithParamInterface<RowSparseParam> {};

TEST_P(RowSparseReferenceTest, EqualsDenseReferenceOverUnion) {
  const auto [type, rowLen, scenario] = GetParam();
  const size_t P = static_cast<size_t>(size_), es = typeSize(type);
  const SparseInput in = makeInput(scenario, type, rowLen, rank_, size_);
  const SparseInput copy = in;
  const Reference ref = reference(in, type, rowLen);
  if (scenario == Scenario::kDistinct) {
    ASSERT_FALSE(ref.localDuplicates) << "test set-up";
  } else {
    ASSERT_TRUE(ref.localDuplicates) << "test set-up";
  }
  const bool exact = scenario == Scenario::kDistinct || scenario == Scenario::kIntegers;

  spcclStats_t s0, s1;
  ASSERT_TRUE(commStats(s0));
  std::vector<int64_t> outIds;
  std::vector<unsigned char> outRows;
  size_t outN = 0;
  ASSERT_TRUE(okOnAllRanks(call(in, rowLen, type, ref.ids.size(), outIds, outRows, outN), comm_.get(),
                           "spcclAllReduceRowSparse"));
  ASSERT_TRUE(commStats(s1));
  EXPECT_TRUE(in.ids == copy.ids && in.rows == copy.rows) << "the input was modified";
  checkOutput(ref, rowLen, type, exact, outIds, outRows, outN);
  if (scenario == Scenario::kIntegers && outN == ref.ids.size()) {
    const size_t u =
        static_cast<size_t>(std::lower_bound(ref.ids.begin(), ref.ids.end(), kRoundOnceId) - ref.ids.begin());
    EXPECT_EQ(loadAsDouble(outRows.data(), u * rowLen, type), roundOnceBase(type) + 2.0 * static_cast<double>(P))
        << "id " << kRoundOnceId << ": rows not summed in fp32 and rounded once";
  }
  EXPECT_EQ(s1.calls - s0.calls, 1u);
  EXPECT_EQ(s1.denseBytes - s0.denseBytes, (P - 1) * in.ids.size() * (8 + rowLen * es))
      << "denseBytes: (P-1) * nrows * (8 + rowLen * size), nrows " << in.ids.size();
  // "Duplicates are merged locally before anything is sent": bytes are bounded
  // by this rank's unique ids, not its rows. A row on the wire is an 8-byte id
  // and rowLen values of at most 8 bytes (fp64; fp32 sums otherwise), plus up
  // to 256 bytes of headers and size exchanges per peer and phase.
  // allgather: this rank's merged rows to each peer; partition: its merged rows
  // to their owners, then at most the whole union from an owner to each peer.
  const uint64_t rowBytes = 8 + rowLen * (type == spcclFloat64 ? 8 : 4);
  const uint64_t uniqueHere = std::set<int64_t>(in.ids.begin(), in.ids.end()).size();
  const uint64_t U = ref.ids.size();
  const std::string algo = envString("SPCCL_ROWSPARSE_ALGO");
  const uint64_t allgatherBound = (P - 1) * (uniqueHere * rowBytes + 256);
  const uint64_t partitionBound = uniqueHere * rowBytes + (P - 1) * (U * rowBytes + 512);
  const uint64_t bound = algo == "allgather"   ? allgatherBound
                         : algo == "partition" ? partitionBound
                                               : std::max(allgatherBound, partitionBound);
  EXPECT_LE(s1.bytesSent - s0.bytesSent, bound)
      << "algorithm " << (algo.empty() ? "auto" : algo) << ": " << in.ids.size() << " rows, " << uniqueHere
      << " unique here, union " << U;
}

INSTANTIATE_TEST_SUITE_P(TypesRowLensScenarios, RowSparseReferenceTest,
                         testing::Combine(testing::Values(spcclFloat32, spcclFloat64, spcclFloat16, spcclBfloat16),
                                          testing::Values(size_t{1}, size_t{33}),
                                          testing::Values(Scenario::kDuplicates, Scenario::kLimits, Scenario::kDistinct,
                                                          Scenario::kIntegers)),
                         [](const testing::TestParamInfo<RowSparseParam>& p) {
                           return std::string(typeName(std::get<0>(p.param))) + "_len" +
                                  std::to_string(std::get<1>(p.param)) + "_" + scenarioName(std::get<2>(p.param));
                         });

// Capacity below the union: spcclInvalidUsage on every rank with the size
// needed in *outNrows; a retry with that capacity succeeds.
TEST_F(RowSparseTest, CapacityTooSmallReportsSizeThenRetrySucceeds) {
  const size_t rowLen = 33;
  const spcclDataType_t type = spcclFloat32;
  const SparseInput in = makeInput(Scenario::kLimits, type, rowLen, rank_, size_);
  const Reference ref = reference(in, type, rowLen);
  const size_t U = ref.ids.size();
  ASSERT_GE(U, 2u);
  std::vector<int64_t> outIds;
  std::vector<unsigned char> outRows;
  size_t outN = 0;
  for (size_t capacity : {size_t{0}, size_t{1}, U - 1}) {
    SCOPED_TRACE("outCapacity " + std::to_string(capacity) + " for a union of " + std::to_string(U));
    const spcclResult_t r = call(in, rowLen, type, capacity, outIds, outRows, outN);
    const std::string other = ranksWhere(r != spcclInvalidUsage);
    EXPECT_TRUE(other.empty()) << "not spcclInvalidUsage on rank(s) " << other << "; here " << static_cast<int>(r)
                               << " (" << spcclGetErrorString(r) << ")";
    EXPECT_EQ(outN, U) << "*outNrows must hold the size needed";
    if (r != spcclSuccess) {
      EXPECT_STRNE(spcclGetLastError(comm_.get()), "") << "no detailed message";
    }
  }
  // Retry with the size reported.
  ASSERT_TRUE(okOnAllRanks(call(in, rowLen, type, outN, outIds, outRows, outN), comm_.get(),
                           "spcclAllReduceRowSparse with the reported capacity"));
  checkOutput(ref, rowLen, type, false, outIds, outRows, outN);
  // More than enough room is fine too.
  ASSERT_TRUE(okOnAllRanks(call(in, rowLen, type, U + 100, outIds, outRows, outN), comm_.get(),
                           "spcclAllReduceRowSparse with spare capacity"));
  checkOutput(ref, rowLen, type, false, outIds, outRows, outN);
}

// Every rank empty: an empty union, success. NULL input pointers with nrows 0;
// NULL outputs with outCapacity 0 (the NCCL convention of the repo: a zero
// count accepts NULL buffers).
TEST_F(RowSparseTest, AllRanksEmpty) {
  size_t outN = 5;
  ASSERT_TRUE(okOnAllRanks(
      spcclAllReduceRowSparse(nullptr, nullptr, 0, 8, spcclFloat32, nullptr, nullptr, 0, &outN, comm_.get(), nullptr),
      comm_.get(), "spcclAllReduceRowSparse, empty everywhere, capacity 0"));
  EXPECT_EQ(outN, 0u);
  std::vector<int64_t> ids(4, 1);
  std::vector<float> rows(4 * 8, 1.0f);
  outN = 5;
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceRowSparse(nullptr, nullptr, 0, 8, spcclFloat32, ids.data(), rows.data(), 4,
                                                   &outN, comm_.get(), nullptr),
                           comm_.get(), "spcclAllReduceRowSparse, empty everywhere, capacity 4"));
  EXPECT_EQ(outN, 0u);
}

// Only one rank has rows (the others pass NULL and 0): its merged rows, exactly.
TEST_F(RowSparseTest, OnlyOneRankHasRows) {
  const size_t rowLen = 33;
  SparseInput in;
  if (rank_ == size_ - 1) in = makeInput(Scenario::kDistinct, spcclFloat32, rowLen, rank_, size_);
  const Reference ref = reference(in, spcclFloat32, rowLen);
  std::vector<int64_t> outIds;
  std::vector<unsigned char> outRows;
  size_t outN = 0;
  ASSERT_TRUE(okOnAllRanks(call(in, rowLen, spcclFloat32, ref.ids.size(), outIds, outRows, outN), comm_.get(),
                           "spcclAllReduceRowSparse"));
  checkOutput(ref, rowLen, spcclFloat32, true, outIds, outRows, outN);
}

void expectInvalidArgument(spcclResult_t r, const std::string& what) {
  EXPECT_EQ(r, spcclInvalidArgument) << what << " returned " << static_cast<int>(r) << " (" << spcclGetErrorString(r)
                                     << ")";
  const char* message = spcclGetLastError(nullptr);
  EXPECT_TRUE(message != nullptr && *message != '\0') << what << ": spcclGetLastError(NULL) is empty";
}

TEST_F(RowSparseTest, InvalidArgumentsFailBeforeCommunicating) {
  const size_t rowLen = 4, nrows = 3, cap = 16;
  std::vector<int64_t> ids = {5, -2, 5}, outIds(cap);
  std::vector<float> rows(nrows * rowLen, 1.0f), outRows(cap * rowLen);
  size_t outN = 0;
  spcclComm_t comm = comm_.get();
  // One rank at a time: a call that communicated before validating would hang.
  for (int turn = 0; turn < size_; ++turn) {
    if (rank_ == turn) {
      expectInvalidArgument(spcclAllReduceRowSparse(nullptr, rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                                    outRows.data(), cap, &outN, comm, nullptr),
                            "NULL rowIds with nrows 3");
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), nullptr, nrows, rowLen, spcclFloat32, outIds.data(),
                                                    outRows.data(), cap, &outN, comm, nullptr),
                            "NULL rows with nrows 3");
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, 0, spcclFloat32, outIds.data(),
                                                    outRows.data(), cap, &outN, comm, nullptr),
                            "rowLen 0");
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                                    outRows.data(), cap, nullptr, comm, nullptr),
                            "NULL outNrows");
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                                    outRows.data(), cap, &outN, nullptr, nullptr),
                            "NULL comm");
      expectInvalidArgument(
          spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, invalidEnum<spcclDataType_t>(42),
                                  outIds.data(), outRows.data(), cap, &outN, comm, nullptr),
          "datatype 42");
      // The header lists fp32, fp64, fp16 and bf16 only.
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclInt32, outIds.data(),
                                                    outRows.data(), cap, &outN, comm, nullptr),
                            "datatype int32");
      // A NULL output with room for rows (NCCL: NULL only with a zero count).
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, nullptr,
                                                    outRows.data(), cap, &outN, comm, nullptr),
                            "NULL outRowIds with outCapacity 16");
      expectInvalidArgument(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                                    nullptr, cap, &outN, comm, nullptr),
                            "NULL outRows with outCapacity 16");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The communicator still works: ids {-2, 5}, rows summed (5 twice per rank).
  ASSERT_TRUE(okOnAllRanks(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                                   outRows.data(), cap, &outN, comm, nullptr),
                           comm, "spcclAllReduceRowSparse after the invalid calls"));
  ASSERT_EQ(outN, 2u);
  EXPECT_EQ(outIds[0], -2);
  EXPECT_EQ(outIds[1], 5);
  EXPECT_EQ(outRows[0], static_cast<float>(size_));
  EXPECT_EQ(outRows[rowLen], 2.0f * static_cast<float>(size_));
}

// rowLen or datatype differing between ranks fails on every rank (never a
// hang or a result), and the communicator stays usable.
TEST_F(RowSparseTest, MismatchedRowLenOrTypeFailsOnEveryRank) {
  struct Case {
    const char* what;
    size_t rowLen;
    spcclDataType_t type;
  };
  const bool odd = rank_ == 0;
  const Case cases[] = {{"rowLen", odd ? size_t{33} : size_t{32}, spcclFloat32},
                        {"datatype", 33, odd ? spcclFloat64 : spcclFloat32}};
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string("mismatched ") + k.what);
    const SparseInput in = makeInput(Scenario::kDistinct, k.type, k.rowLen, rank_, size_);
    std::vector<int64_t> outIds;
    std::vector<unsigned char> outRows;
    size_t outN = 0;
    const spcclResult_t r = call(in, k.rowLen, k.type, 1000, outIds, outRows, outN);
    const std::string succeeded = ranksWhere(r == spcclSuccess);
    EXPECT_TRUE(succeeded.empty()) << "returned success on rank(s) " << succeeded;
    if (r != spcclSuccess) {
      // The message names what differs in the caller's terms: the call has
      // no "count" argument, so a row length must not be reported as one.
      const std::string message = spcclGetLastError(comm_.get());
      EXPECT_NE(message.find(std::string(k.what) == "rowLen" ? "row length" : "datatype"), std::string::npos)
          << message;
    }
  }
  const SparseInput in = makeInput(Scenario::kDuplicates, spcclFloat32, 33, rank_, size_);
  const Reference ref = reference(in, spcclFloat32, 33);
  std::vector<int64_t> outIds;
  std::vector<unsigned char> outRows;
  size_t outN = 0;
  ASSERT_TRUE(okOnAllRanks(call(in, 33, spcclFloat32, ref.ids.size(), outIds, outRows, outN), comm_.get(),
                           "spcclAllReduceRowSparse after the mismatched calls"));
  checkOutput(ref, 33, spcclFloat32, false, outIds, outRows, outN);
}

// Auto decides with the communicator's network model (SPCCL_NET_GBPS,
// SPCCL_NET_LATENCY_US, SPCCL_CALIBRATE: the same on every rank), not the
// built-in defaults. Every rank passes the same 2000 ids (overlap P), so the
// second call's pick follows the model: one second of latency per round makes
// partition's extra rounds dominate (allgather), a 1 Mbit/s link with no
// latency makes its smaller traffic win (partition). Which was taken shows in
// bytesSent, against the same calls with the algorithm fixed. (Auto on the
// built-in default model would take partition here, under one second of latency.)
TEST_F(RowSparseTest, AutoDecidesWithTheCommunicatorsNetworkModel) {
  if (size_ <= 2) GTEST_SKIP() << "auto always takes allgather at P <= 2";
  if (!envString("SPCCL_ROWSPARSE_ALGO").empty()) GTEST_SKIP() << "SPCCL_ROWSPARSE_ALGO is set";
  const size_t nrows = 2000, rowLen = 64;
  std::vector<int64_t> ids(nrows), outIds(nrows);
  for (size_t i = 0; i < nrows; ++i) ids[i] = static_cast<int64_t>(nrows - 1 - i) * 3;
  const std::vector<float> rows = gaussian(nrows * rowLen, seedFor(9, rank_));
  std::vector<float> outRows(nrows * rowLen);
  // bytesSent of the second of two calls on a communicator made under `env`.
  auto secondCallBytes = [&](std::initializer_list<std::pair<const char*, const char*>> env, uint64_t* bytes) {
    std::vector<std::unique_ptr<ScopedEnv>> scoped;
    for (const auto& [name, value] : env) scoped.push_back(std::make_unique<ScopedEnv>(name, value));
    spcclComm_t raw = nullptr;
    const spcclResult_t r = spcclCommInitMPI(&raw, MPI_COMM_WORLD);
    CommPtr c(raw);
    scoped.clear();  // read at creation
    if (!okOnAllRanks(r, nullptr, "spcclCommInitMPI")) return testing::AssertionFailure() << "comm";
    spcclStats_t s0{}, s1{};
    size_t outN = 0;
    for (int call = 0; call < 2; ++call) {
      if (call == 1 && spcclCommGetStats(c.get(), &s0) != spcclSuccess) return testing::AssertionFailure() << "stats";
      const testing::AssertionResult ok =
          okOnAllRanks(spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, spcclFloat32, outIds.data(),
                                               outRows.data(), nrows, &outN, c.get(), nullptr),
                       c.get(), "spcclAllReduceRowSparse");
      if (!ok) return ok;
    }
    if (spcclCommGetStats(c.get(), &s1) != spcclSuccess) return testing::AssertionFailure() << "stats";
    *bytes = s1.bytesSent - s0.bytesSent;
    return testing::AssertionSuccess();
  };
  uint64_t allgather = 0, partition = 0, slowRounds = 0, slowLink = 0;
  ASSERT_TRUE(secondCallBytes({{"SPCCL_ROWSPARSE_ALGO", "allgather"}}, &allgather));
  ASSERT_TRUE(secondCallBytes({{"SPCCL_ROWSPARSE_ALGO", "partition"}}, &partition));
  ASSERT_NE(allgather, partition) << "test set-up: the algorithms must send different amounts";
  ASSERT_TRUE(secondCallBytes({{"SPCCL_NET_LATENCY_US", "1000000"}, {"SPCCL_NET_GBPS", "1000"}}, &slowRounds));
  ASSERT_TRUE(secondCallBytes({{"SPCCL_NET_LATENCY_US", "0.001"}, {"SPCCL_NET_GBPS", "0.001"}}, &slowLink));
  EXPECT_EQ(slowRounds, allgather) << "1 s a round: auto must take allgather (partition sends " << partition << ")";
  EXPECT_EQ(slowLink, partition) << "1 Mbit/s, no latency: auto must take partition (allgather sends " << allgather
                                 << ")";
}

}  // namespace
}  // namespace spccl::test
