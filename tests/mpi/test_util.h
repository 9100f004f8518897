// Helpers shared by the multi-rank tests: a fixture owning an spccl
// communicator over MPI_COMM_WORLD, cross-rank agreement, deterministic data,
// reference fp16/bf16 rounding and the selection rule of the compressed
// allreduce, restated from the specification (docs/ALGORITHMS.md) so the tests check the
// library against an independent implementation; typed element access, MPI
// alltoall/allgather references, the per-row top-k rule and the rows stream
// sizes. Public API only.
//
// Rule for every test here: every rank makes the same collective calls in the
// same order whatever it observed; a check that can differ between ranks is
// either non-fatal (EXPECT_*) or agreed first (allRanks, okOnAllRanks), so a
// rank that fails alone never leaves the others waiting in a collective.
#ifndef SPCCL_TESTS_MPI_TEST_UTIL_H_
#define SPCCL_TESTS_MPI_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <mpi.h>
#include <spccl.h>
#include <spccl_mpi.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace spccl::test {

inline int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int worldSize() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Ranks where flag is set, as "1, 3" (collective).
inline std::string ranksWhere(bool flag) {
  int mine = flag ? 1 : 0;
  std::vector<int> all(static_cast<size_t>(worldSize()));
  MPI_Allgather(&mine, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::string out;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(r);
  }
  return out;
}

// True on every rank iff ok on every rank (collective).
inline bool allRanks(bool ok) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return v != 0;
}

// Collective: success iff r == spcclSuccess on every rank; the failure names
// the failing ranks and this rank's code and detailed message.
inline testing::AssertionResult okOnAllRanks(spcclResult_t r, spcclComm_t comm, const char* what) {
  const std::string failing = ranksWhere(r != spcclSuccess);
  if (failing.empty()) return testing::AssertionSuccess();
  testing::AssertionResult res = testing::AssertionFailure();
  res << what << " failed on rank(s) " << failing << "; here (rank " << worldRank() << "): " << static_cast<int>(r);
  if (r != spcclSuccess) {
    res << " " << spcclGetErrorString(r) << ": " << spcclGetLastError(comm);
  }
  return res;
}

// Collective: every rank holds the same bytes as rank 0 (NaN payloads included).
inline testing::AssertionResult identicalOnAllRanks(const void* data, size_t count, size_t elemSize) {
  const size_t bytes = count * elemSize;
  std::vector<unsigned char> root(bytes);
  if (worldRank() == 0 && bytes > 0) std::memcpy(root.data(), data, bytes);
  // Chunked: MPI counts are int.
  for (size_t off = 0; off < bytes; off += size_t{1} << 30) {
    const int n = static_cast<int>(std::min(bytes - off, size_t{1} << 30));
    MPI_Bcast(root.data() + off, n, MPI_BYTE, 0, MPI_COMM_WORLD);
  }
  const auto* mine = static_cast<const unsigned char*>(data);
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(mine + i * elemSize, root.data() + i * elemSize, elemSize) != 0) {
      if (mismatches++ == 0) first = i;
    }
  }
  const std::string failing = ranksWhere(mismatches != 0);
  if (failing.empty()) return testing::AssertionSuccess();
  testing::AssertionResult res = testing::AssertionFailure();
  res << "results differ from rank 0's on rank(s) " << failing;
  if (mismatches != 0) {
    res << "; here (rank " << worldRank() << ") " << mismatches << " of " << count
        << " elements differ, first at index " << first;
    if (elemSize == sizeof(float)) {
      float a, b;
      std::memcpy(&a, mine + first * elemSize, sizeof a);
      std::memcpy(&b, root.data() + first * elemSize, sizeof b);
      res << " (" << a << " here vs " << b << " on rank 0, as fp32)";
    }
  }
  return res;
}

// ---------- RAII over the C handles ----------

struct CommDeleter {
  void operator()(spcclComm* c) const { spcclCommDestroy(c); }
};
struct CompressorDeleter {
  void operator()(spcclCompressor* c) const { spcclCompressorDestroy(c); }
};
struct SelectionDeleter {
  void operator()(spcclSelection* s) const { spcclSelectionDestroy(s); }
};
using CommPtr = std::unique_ptr<spcclComm, CommDeleter>;
using CompressorPtr = std::unique_ptr<spcclCompressor, CompressorDeleter>;
using SelectionPtr = std::unique_ptr<spcclSelection, SelectionDeleter>;

inline const char* algorithmName(int algorithm) {
  switch (algorithm) {
    case SPCCL_ALGO_AUTO:
      return "auto";
    case SPCCL_ALGO_DENSE:
      return "dense";
    case SPCCL_ALGO_ALLGATHER:
      return "allgather";
    case SPCCL_ALGO_SPLIT:
      return "split";
    default:
      return "unknown";
  }
}

inline const char* typeName(spcclDataType_t t) {
  switch (t) {
    case spcclInt8:
      return "int8";
    case spcclUint8:
      return "uint8";
    case spcclInt32:
      return "int32";
    case spcclUint32:
      return "uint32";
    case spcclInt64:
      return "int64";
    case spcclUint64:
      return "uint64";
    case spcclFloat16:
      return "fp16";
    case spcclFloat32:
      return "fp32";
    case spcclFloat64:
      return "fp64";
    case spcclBfloat16:
      return "bf16";
    case spcclFloat8e4m3:
      return "fp8";
    default:
      return "unknown";
  }
}

inline const char* opName(spcclRedOp_t op) {
  switch (op) {
    case spcclSum:
      return "sum";
    case spcclProd:
      return "prod";
    case spcclMax:
      return "max";
    case spcclMin:
      return "min";
    case spcclAvg:
      return "avg";
    default:
      return "unknown";
  }
}

// Every test gets a fresh communicator over MPI_COMM_WORLD; compressors made
// in a test body are destroyed before it (spcclCommDestroy frees them too).
class MpiTest : public testing::Test {
 protected:
  void SetUp() override {
    rank_ = worldRank();
    size_ = worldSize();
    spcclComm_t c = nullptr;
    const spcclResult_t r = spcclCommInitMPI(&c, MPI_COMM_WORLD);
    comm_.reset(c);
    ASSERT_TRUE(okOnAllRanks(r, nullptr, "spcclCommInitMPI"));
  }

  // Env defaults, then the fields every compressed test sets explicitly.
  // thresholdWarmup is off: tests that pass an interval pin the calls it
  // schedules; the warm-up's own calls are tested where they are asked for
  // (ScheduleTest.WarmupEstimatesAtThePowersOfTwoBelowTheInterval,
  // threshold_rule_test's grid).
  static spcclCompressConfig_t makeConfig(float density, int algorithm, spcclDataType_t wireValueType,
                                          int thresholdInterval = 1, int errorFeedback = 1) {
    spcclCompressConfig_t c{};
    EXPECT_EQ(spcclCompressConfigInit(&c), spcclSuccess);
    c.density = density;
    c.algorithm = algorithm;
    c.wireValueType = wireValueType;
    c.thresholdInterval = thresholdInterval;
    c.errorFeedback = errorFeedback;
    c.capacityFactor = 2.0f;
    c.thresholdWarmup = 0;
    return c;
  }

  // Collective agreement on a purely local call.
  testing::AssertionResult createCompressor(size_t count, spcclDataType_t type, const spcclCompressConfig_t& config,
                                            CompressorPtr& out) {
    spcclCompressor_t c = nullptr;
    const spcclResult_t r = spcclCompressorCreate(comm_.get(), count, type, &config, &c);
    out.reset(c);
    return okOnAllRanks(r, comm_.get(), "spcclCompressorCreate");
  }

  testing::AssertionResult stats(spcclCompressor_t c, spcclStats_t& s) {
    s = spcclStats_t{};
    return okOnAllRanks(spcclCompressorGetStats(c, &s), comm_.get(), "spcclCompressorGetStats");
  }

  // The communicator's counters (every collective on it).
  testing::AssertionResult commStats(spcclStats_t& s) {
    s = spcclStats_t{};
    return okOnAllRanks(spcclCommGetStats(comm_.get(), &s), comm_.get(), "spcclCommGetStats");
  }

  testing::AssertionResult residual(spcclCompressor_t c, std::vector<float>& out) {
    return okOnAllRanks(spcclCompressorGetResidual(c, out.data(), out.size()), comm_.get(),
                        "spcclCompressorGetResidual");
  }

  int rank_ = 0;
  int size_ = 1;
  CommPtr comm_;
};

// ---------- deterministic data ----------

inline uint64_t seedFor(uint64_t tag, int rank, uint64_t call = 0) {
  return tag * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(rank) + 1) * 0xBF58476D1CE4E5B9ull ^
         (call + 1) * 0x94D049BB133111EBull;
}

inline std::vector<float> gaussian(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// |v_i| = (perm_i + f_i) * scale, perm a permutation of {1..n}, f_i random in
// [0.25, 0.75), random signs: no two entries of one rank tie in magnitude (the
// intervals are disjoint and far wider than float rounding for n < 2^20), so
// the selected set has exactly k entries; the random fractions fill the
// mantissas, so sums of several ranks' values round and their order matters.
inline std::vector<float> distinctMagnitudes(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 gen(seed);
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 1u);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::uniform_real_distribution<float> frac(0.25f, 0.75f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float m = (static_cast<float>(perm[i]) + frac(gen)) * scale;
    v[i] = (gen() & 1) ? m : -m;
  }
  return v;
}

// MPI_Allgather of equal-length float vectors, rank-major.
inline std::vector<float> allgatherFloats(const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * static_cast<size_t>(worldSize()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), static_cast<int>(mine.size()),
                MPI_FLOAT, MPI_COMM_WORLD);
  return all;
}

// ---------- MPI reference reductions ----------

template <typename T>
MPI_Datatype mpiType() {
  if constexpr (std::is_same_v<T, float>) {
    return MPI_FLOAT;
  } else if constexpr (std::is_same_v<T, double>) {
    return MPI_DOUBLE;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    return MPI_INT32_T;
  } else {
    static_assert(std::is_same_v<T, int64_t>);
    return MPI_INT64_T;
  }
}

inline MPI_Op mpiOp(spcclRedOp_t op) {
  switch (op) {
    case spcclProd:
      return MPI_PROD;
    case spcclMax:
      return MPI_MAX;
    case spcclMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // avg = sum, then divided by the rank count
  }
}

// MPI_Allreduce of the same data over MPI_COMM_WORLD; avg is the sum divided
// by the rank count in the element type (integer division for integers), as
// the specification defines it ("divided by the rank count").
template <typename T>
std::vector<T> mpiReference(const std::vector<T>& in, spcclRedOp_t op) {
  std::vector<T> out(in.size());
  MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), mpiType<T>(), mpiOp(op), MPI_COMM_WORLD);
  if (op == spcclAvg) {
    for (T& x : out) x = static_cast<T>(x / static_cast<T>(worldSize()));
  }
  return out;
}

// First index where a and b differ bitwise, or a.size().
template <typename T>
size_t firstBitDifference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return i;
  }
  return a.size();
}

// ---------- reference fp16 / bf16 (IEEE round to nearest even) ----------

inline uint16_t floatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);   // NaN
  if (absx >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 2^16: Inf
  if (absx < 0x38800000u) {                                               // below 2^-14: subnormal half (or zero)
    // value = absx as float; half subnormal unit is 2^-24.
    const float a = std::bit_cast<float>(absx);
    const float scaled = a * 16777216.0f;                              // exact: a * 2^24
    const uint32_t q = static_cast<uint32_t>(std::nearbyint(scaled));  // default mode: RNE
    return static_cast<uint16_t>(sign | q);                            // q == 0x400 is the smallest normal: still right
  }
  // Normal: rebias exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((absx - 0x38000000u) >> 13);
  const uint32_t rem = absx & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent
  return static_cast<uint16_t>(sign | h);
}

inline float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {
    const float m = static_cast<float>(man) * (1.0f / 16777216.0f);  // man * 2^-24
    return sign ? -m : m;
  }
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t floatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// fp8 e4m3 wire (spccl's: OCP E4M3 finite codes times 2^scaleExp, NaN and
// +-Inf carried as themselves, finite values saturating at 448 * 2^scaleExp),
// written from the definition: the nearest of the 127 finite magnitudes,
// ties to the even code.
inline double e4m3Magnitude(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}
inline float fp8RoundRef(float v, int scaleExp) {
  if (!std::isfinite(v)) return v;
  const double q = std::ldexp(std::fabs(static_cast<double>(v)), -scaleExp);
  int best = 0;
  double bestDist = q;
  for (int c = 1; c <= 0x7e; ++c) {
    const double d = std::fabs(q - e4m3Magnitude(c));
    if (d < bestDist || (d == bestDist && (c & 1) == 0)) best = c, bestDist = d;
  }
  if (best == 0) return 0.0f;
  const float r = static_cast<float>(std::ldexp(e4m3Magnitude(best), scaleExp));
  return v < 0 ? -r : r;
}
constexpr int kFp8MinScale = -116, kFp8MaxScale = 119;
// The allreduce senders' scale: tau's binade onto e4m3's smallest normal (2^-6).
inline int fp8TauScale(float tau) {
  if (tau == 0.0f || !std::isfinite(tau)) return 0;  // no binade (the library then uses the max rule)
  return std::clamp(std::ilogb(tau) + 6, kFp8MinScale, kFp8MaxScale);
}
// The max rule (split owners, row streams): the smallest s with max|v| <= 448 * 2^s.
inline int fp8MaxScale(float maxAbs) {
  if (maxAbs == 0.0f) return 0;
  int s = std::ilogb(maxAbs) - 9;
  while (std::ldexp(448.0, s) < static_cast<double>(maxAbs)) ++s;
  return std::clamp(s, kFp8MinScale, kFp8MaxScale);
}

// The value a wire of this type carries for v (fp8: at scale exponent scaleExp).
inline float roundToWire(float v, spcclDataType_t wire, int scaleExp = 0) {
  switch (wire) {
    case spcclFloat16:
      return halfToFloat(floatToHalf(v));
    case spcclBfloat16:
      return bf16ToFloat(floatToBf16(v));
    case spcclFloat8e4m3:
      return fp8RoundRef(v, scaleExp);
    default:
      return v;
  }
}

inline size_t wireValueBytes(spcclDataType_t wire) {
  return wire == spcclFloat32 ? 4 : (wire == spcclFloat8e4m3 ? 1 : 2);
}

inline bool sameBits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// ---------- the selection rule of the compressed allreduce ----------

// k = ceil(density * count), the product read as the decimal density means
// (docs/ALGORITHMS.md): no further above a whole number than the float's
// rounding (relative 2^-24) counts as that number (0.1f x 10 keeps 1).
inline size_t selectionSize(size_t count, float density) {
  const double x = static_cast<double>(density) * static_cast<double>(count);
  const double whole = std::floor(x);
  return static_cast<size_t>(x - whole > std::ldexp(x, -24) ? whole + 1 : whole);
}

// Split's re-selection budget per owner range (docs/ALGORITHMS.md):
// ceil(splitReselect * k / P), at least 1; 0 = off (also without error feedback).
inline size_t splitKeepPerRange(const spcclCompressConfig_t& c, size_t k, size_t ranks) {
  if (c.algorithm != SPCCL_ALGO_SPLIT || c.errorFeedback == 0 || !(c.splitReselect > 0.0f)) return 0;
  const double keep =
      std::ceil(static_cast<double>(c.splitReselect) * static_cast<double>(k) / static_cast<double>(ranks));
  return std::max<size_t>(1, static_cast<size_t>(keep));
}

// [begin, end) of the index range rank r owns in split: P near-equal ranges,
// the first count % P one longer.
inline size_t splitRangeBegin(size_t count, size_t ranks, size_t r) {
  return r * (count / ranks) + std::min(r, count % ranks);
}

// Split's re-selection applied to the reduced sums `sum`: in each owner's
// range, the finite nonzeros beyond the `keep` largest in magnitude (ties:
// lower index) are marked dropped. keep == 0: nothing is.
inline std::vector<uint8_t> splitDropped(const std::vector<float>& sum, size_t ranks, size_t keep) {
  std::vector<uint8_t> dropped(sum.size(), 0);
  if (keep == 0) return dropped;
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<size_t> idx;
    for (size_t i = splitRangeBegin(sum.size(), ranks, r); i < splitRangeBegin(sum.size(), ranks, r + 1); ++i)
      if (sum[i] != 0.0f && std::isfinite(sum[i])) idx.push_back(i);
    if (idx.size() <= keep) continue;
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
      return std::fabs(sum[a]) > std::fabs(sum[b]) || (std::fabs(sum[a]) == std::fabs(sum[b]) && a < b);
    });
    for (size_t j = keep; j < idx.size(); ++j) dropped[idx[j]] = 1;
  }
  return dropped;
}

// Magnitude of the k-th largest |v| (finite data).
inline float kthLargestMagnitude(const std::vector<float>& v, size_t k) {
  std::vector<float> mag(v.size());
  std::transform(v.begin(), v.end(), mag.begin(), [](float x) { return std::fabs(x); });
  std::nth_element(mag.begin(), mag.begin() + static_cast<std::ptrdiff_t>(k - 1), mag.end(), std::greater<float>());
  return mag[k - 1];
}

// S = {i : |v_i| >= tau}, never exact zeros, always NaN and Inf.
inline std::vector<uint8_t> selectionMask(const std::vector<float>& v, float tau) {
  std::vector<uint8_t> s(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    s[i] = std::isnan(v[i]) || std::isinf(v[i]) || (v[i] != 0.0f && std::fabs(v[i]) >= tau);
  }
  return s;
}

// |S| for the same rule.
inline uint64_t selectedCount(const std::vector<float>& v, float tau) {
  const std::vector<uint8_t> s = selectionMask(v, tau);
  return static_cast<uint64_t>(std::count(s.begin(), s.end(), 1));
}

// ---------- element access, MPI references, rows selection ----------

// A value a C caller can pass but C++ may not static_cast to the enum (outside
// the enum's range is undefined behaviour): copy the int's representation.
template <typename E>
E invalidEnum(int value) {
  static_assert(sizeof(E) == sizeof(int));
  E e;
  std::memcpy(&e, &value, sizeof e);
  return e;
}

inline size_t typeSize(spcclDataType_t t) {
  switch (t) {
    case spcclInt8:
    case spcclUint8:
      return 1;
    case spcclFloat16:
    case spcclBfloat16:
      return 2;
    case spcclInt32:
    case spcclUint32:
    case spcclFloat32:
      return 4;
    default:
      return 8;
  }
}

inline bool isCompressibleFloat(spcclDataType_t t) {
  return t == spcclFloat32 || t == spcclFloat16 || t == spcclBfloat16;
}

// Element i of a buffer of fp32, fp16, bf16 or fp64, widened to double (exact).
inline double loadAsDouble(const void* buf, size_t i, spcclDataType_t t) {
  const auto* p = static_cast<const unsigned char*>(buf);
  switch (t) {
    case spcclFloat16:
    case spcclBfloat16: {
      uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return t == spcclFloat16 ? halfToFloat(h) : bf16ToFloat(h);
    }
    case spcclFloat64: {
      double d;
      std::memcpy(&d, p + i * 8, 8);
      return d;
    }
    default: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
  }
}

inline float loadAsFloat(const void* buf, size_t i, spcclDataType_t t) {
  return static_cast<float>(loadAsDouble(buf, i, t));
}

// Stores v into element i, rounded to nearest even for fp16/bf16.
inline void storeFromFloat(void* buf, size_t i, float v, spcclDataType_t t) {
  auto* p = static_cast<unsigned char*>(buf);
  if (t == spcclFloat16 || t == spcclBfloat16) {
    const uint16_t h = t == spcclFloat16 ? floatToHalf(v) : floatToBf16(v);
    std::memcpy(p + i * 2, &h, 2);
  } else {
    std::memcpy(p + i * 4, &v, 4);
  }
}

// Element i as "type:bits (value)", for failure messages.
inline std::string describeElement(const void* buf, size_t i, spcclDataType_t t) {
  const size_t es = typeSize(t);
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const unsigned char*>(buf) + i * es, es);
  std::ostringstream o;
  o << "0x" << std::hex << bits << std::dec;
  if (t == spcclFloat32 || t == spcclFloat16 || t == spcclBfloat16 || t == spcclFloat64) {
    o << " (" << loadAsDouble(buf, i, t) << ")";
  }
  return o.str();
}

// Random bytes (every bit pattern, NaN payloads included, for bitwise checks).
inline std::vector<unsigned char> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<unsigned char> v(n);
  for (unsigned char& b : v) b = static_cast<unsigned char>(gen() >> 56);
  return v;
}

// MPI_Alltoall / MPI_Allgather on raw bytes: the bitwise references of the
// exact drop-ins. blockBytes must fit an int (the tests keep blocks small).
inline std::vector<unsigned char> mpiAlltoallBytes(const void* send, size_t blockBytes) {
  std::vector<unsigned char> out(blockBytes * static_cast<size_t>(worldSize()));
  MPI_Alltoall(send, static_cast<int>(blockBytes), MPI_BYTE, out.data(), static_cast<int>(blockBytes), MPI_BYTE,
               MPI_COMM_WORLD);
  return out;
}

inline std::vector<unsigned char> mpiAllgatherBytes(const void* send, size_t blockBytes) {
  std::vector<unsigned char> out(blockBytes * static_cast<size_t>(worldSize()));
  MPI_Allgather(send, static_cast<int>(blockBytes), MPI_BYTE, out.data(), static_cast<int>(blockBytes), MPI_BYTE,
                MPI_COMM_WORLD);
  return out;
}

// MPI_Allgatherv of a vector of trivially copyable T, rank-major; displs[r]
// (optional) receives the element offset of rank r's part, size P + 1.
template <typename T>
std::vector<T> allgatherv(const std::vector<T>& mine, std::vector<size_t>* displs = nullptr) {
  static_assert(std::is_trivially_copyable_v<T>);
  const int P = worldSize();
  int myBytes = static_cast<int>(mine.size() * sizeof(T));
  std::vector<int> bytes(static_cast<size_t>(P)), offs(static_cast<size_t>(P));
  MPI_Allgather(&myBytes, 1, MPI_INT, bytes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < P; ++r) {
    offs[static_cast<size_t>(r)] = total;
    total += bytes[static_cast<size_t>(r)];
  }
  std::vector<T> all(static_cast<size_t>(total) / sizeof(T));
  MPI_Allgatherv(mine.data(), myBytes, MPI_BYTE, all.data(), bytes.data(), offs.data(), MPI_BYTE, MPI_COMM_WORLD);
  if (displs != nullptr) {
    displs->assign(static_cast<size_t>(P) + 1, 0);
    for (int r = 0; r < P; ++r)
      (*displs)[static_cast<size_t>(r)] = static_cast<size_t>(offs[static_cast<size_t>(r)]) / sizeof(T);
    (*displs)[static_cast<size_t>(P)] = all.size();
  }
  return all;
}

// ---------- env-driven expectations ----------

inline std::string envString(const char* name) {
  const char* s = std::getenv(name);
  return s == nullptr ? std::string() : std::string(s);
}

// The density a drop-in reads from `name` (default 1).
inline float envDensity(const char* name) {
  const std::string s = envString(name);
  return s.empty() ? 1.0f : std::strtof(s.c_str(), nullptr);
}

inline size_t envSize(const char* name) {
  const std::string s = envString(name);
  return s.empty() ? 0 : static_cast<size_t>(std::strtoull(s.c_str(), nullptr, 10));
}

// SPCCL_VALUE_TYPE: the wire type of compressed values (default fp32).
// Sets an environment variable for the life of the object, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

inline spcclDataType_t wireTypeFromEnv() {
  const std::string s = envString("SPCCL_VALUE_TYPE");
  return s == "fp16" ? spcclFloat16 : s == "bf16" ? spcclBfloat16 : s == "fp8" ? spcclFloat8e4m3 : spcclFloat32;
}

// A communicator whose rank 0 has SPCCL_ROWS_CODEC=first and the others
// `rest`: a rows call on it fails on every rank (the codecs' streams differ).
inline void expectMixedRowsCodecsFail(int rank, int size, const char* first, const char* rest) {
  spcclComm_t c = nullptr;
  {
    ScopedEnv env("SPCCL_ROWS_CODEC", rank == 0 ? first : rest);
    ASSERT_TRUE(okOnAllRanks(spcclCommInitMPI(&c, MPI_COMM_WORLD), nullptr, "spcclCommInitMPI"));
  }
  CommPtr mixed(c);
  const size_t P = static_cast<size_t>(size), rowLen = 16;
  std::vector<float> send(P * rowLen, 1.0f), recv(send.size());
  const spcclResult_t r = spcclAlltoAllRowsCompressed(send.data(), recv.data(), 1, rowLen, spcclFloat32, 0.25f, nullptr,
                                                      mixed.get(), nullptr);
  EXPECT_EQ(ranksWhere(r == spcclSuccess), "");
  EXPECT_NE(r, spcclSuccess) << spcclGetLastError(mixed.get());
}

// The value type of the alltoall rows: SPCCL_ROWS_CODEC=fp16|bf16|fp8's,
// else SPCCL_VALUE_TYPE's.
inline spcclDataType_t rowsWireTypeFromEnv() {
  const std::string s = envString("SPCCL_ROWS_CODEC");
  return s == "fp16" ? spcclFloat16 : s == "bf16" ? spcclBfloat16 : s == "fp8" ? spcclFloat8e4m3 : wireTypeFromEnv();
}

// The value type of the collectives that move a buffer's own values (alltoall
// rows, the sparsified allgather): SPCCL_VALUE_TYPE, except that where it is
// fp32, 16-bit data travels in its own type (as exact, half the bytes).
inline spcclDataType_t ownValuesWire(spcclDataType_t data, spcclDataType_t wire) {
  return wire == spcclFloat32 && (data == spcclFloat16 || data == spcclBfloat16) ? data : wire;
}

// ---------- the per-row selection of spcclAlltoAllRowsCompressed ----------

// kr = max(1, ceil(density * rowLen)), at most rowLen; the product read as
// selectionSize reads it.
inline size_t rowKeepCount(size_t rowLen, float density) {
  const size_t k = std::max<size_t>(1, selectionSize(rowLen, density));
  return std::min(k, rowLen);
}

// Kept positions of one row, by a naive sort: NaN and Inf first (always kept,
// even beyond kr), then larger |x|, ties to the lower position; the first
// max(kr, number of NaN/Inf) are kept. Values are read exactly (as double).
inline std::vector<uint8_t> rowKeepMask(const void* buf, size_t rowStart, size_t rowLen, spcclDataType_t t, size_t kr) {
  std::vector<size_t> order(rowLen);
  std::iota(order.begin(), order.end(), size_t{0});
  std::vector<double> key(rowLen);
  size_t nonFinite = 0;
  for (size_t i = 0; i < rowLen; ++i) {
    const double v = loadAsDouble(buf, rowStart + i, t);
    const bool finite = std::isfinite(v);
    nonFinite += finite ? 0 : 1;
    key[i] = finite ? std::fabs(v) : std::numeric_limits<double>::infinity();
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] > key[b]; });
  std::vector<uint8_t> mask(rowLen, 0);
  const size_t keep = std::min(rowLen, std::max(kr, nonFinite));
  for (size_t j = 0; j < keep; ++j) mask[order[j]] = 1;
  return mask;
}

// ---------- bytes of the rows streams (wire layout of codec.h) ----------

inline uint64_t alignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

constexpr uint64_t kRowsStreamHeaderBytes = 56;

// 8-bit indices up to 256 elements per row, 16-bit up to 65536, else 32-bit.
inline uint64_t rowIndexBytes(size_t rowLen) { return rowLen <= 256 ? 1 : rowLen <= 65536 ? 2 : 4; }

// One forward stream of `rows` rows keeping kr entries each (no per-row counts):
// header, indices padded to 4 bytes, values, the whole padded to 8 bytes.
inline uint64_t rowsForwardStreamBytes(size_t rows, size_t rowLen, size_t kr, spcclDataType_t wire) {
  const uint64_t nnz = static_cast<uint64_t>(rows) * kr;
  return alignUp(alignUp(kRowsStreamHeaderBytes + nnz * rowIndexBytes(rowLen), 4) + nnz * wireValueBytes(wire), 8);
}

// One backward stream: header and values only (both sides know the positions).
inline uint64_t rowsBackwardStreamBytes(size_t rows, size_t kr, spcclDataType_t wire) {
  return alignUp(kRowsStreamHeaderBytes + static_cast<uint64_t>(rows) * kr * wireValueBytes(wire), 8);
}

// ---------- comparing buffers of any type ----------

struct Diff {
  size_t count = 0;
  size_t first = 0;
};

// Elements of got that differ from want: bitwise, except that (when
// anyNan) any NaN matches any NaN (fp16/bf16 conversions canonicalise payloads).
inline Diff compareElements(const void* got, const void* want, size_t n, spcclDataType_t t, bool anyNan) {
  const size_t es = typeSize(t);
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* w = static_cast<const unsigned char*>(want);
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(g + i * es, w + i * es, es) == 0) continue;
    if (anyNan && isCompressibleFloat(t) && std::isnan(loadAsDouble(got, i, t)) && std::isnan(loadAsDouble(want, i, t)))
      continue;
    if (d.count++ == 0) d.first = i;
  }
  return d;
}

inline std::string describeDiff(const Diff& d, const void* got, const void* want, size_t rowLen, spcclDataType_t t) {
  if (d.count == 0) return "no difference";
  std::ostringstream o;
  o << d.count << " element(s) differ, first at element " << d.first << " (row " << d.first / rowLen << ", position "
    << d.first % rowLen << "): got " << describeElement(got, d.first, t) << ", expected "
    << describeElement(want, d.first, t);
  return o.str();
}

// rows x rowLen elements: where maskSource's row keeps a position (naive sort,
// kr per row), values' element through the wire type, else +0. fp32 values on
// an fp32 wire are copied bitwise; the rest go through float and back. fp8:
// each block of rowsPerBlock rows (one peer's stream) has the scale of its
// largest finite kept |value| (codec_rows' rule); 0 = rows/P for this
// communicator's P.
inline std::vector<unsigned char> maskedThroughWire(const std::vector<unsigned char>& values,
                                                    const std::vector<unsigned char>& maskSource, size_t rows,
                                                    size_t rowLen, spcclDataType_t t, size_t kr, spcclDataType_t wire,
                                                    size_t rowsPerBlock = 0) {
  if (rowsPerBlock == 0) {
    int P = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    rowsPerBlock = std::max<size_t>(1, rows / static_cast<size_t>(P));
  }
  std::vector<unsigned char> out(rows * rowLen * typeSize(t), 0);
  std::vector<std::vector<uint8_t>> masks(rows);
  for (size_t r = 0; r < rows; ++r) masks[r] = rowKeepMask(maskSource.data(), r * rowLen, rowLen, t, kr);
  std::vector<int> scale((rows + rowsPerBlock - 1) / rowsPerBlock, 0);
  if (wire == spcclFloat8e4m3) {
    for (size_t b = 0; b < scale.size(); ++b) {
      float most = 0.0f;
      for (size_t r = b * rowsPerBlock; r < std::min(rows, (b + 1) * rowsPerBlock); ++r)
        for (size_t i = 0; i < rowLen; ++i) {
          const float x = loadAsFloat(values.data(), r * rowLen + i, t);
          if (masks[r][i] && std::isfinite(x)) most = std::max(most, std::fabs(x));
        }
      scale[b] = fp8MaxScale(most);
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t>& mask = masks[r];
    for (size_t i = 0; i < rowLen; ++i) {
      if (!mask[i]) continue;
      const size_t e = r * rowLen + i;
      if (t == spcclFloat32 && wire == spcclFloat32) {
        std::memcpy(out.data() + e * 4, values.data() + e * 4, 4);  // exact, NaN payload included
      } else {
        storeFromFloat(out.data(), e, roundToWire(loadAsFloat(values.data(), e, t), wire, scale[r / rowsPerBlock]), t);
      }
    }
  }
  return out;
}

}  // namespace spccl::test

#endif  // SPCCL_TESTS_MPI_TEST_UTIL_H_
