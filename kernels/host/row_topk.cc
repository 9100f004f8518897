// DCT-MP's per-row top-k (kernels/cuda/row_topk.cu's twin), with its AVX2 and
// AVX-512 variants picked at run time, and the process-wide SIMD level.
#include "kernels/host/host_kernels.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "kernels/host/host_common.h"

namespace spccl::host {

using core::Pick;
using core::ValueType;
using namespace detail;

namespace {

// The per-row top-k's pieces (selectRowTopK below).

// A row's magnitude keys need only order the row: fp32 and bf16 take the
// fp32 magnitude key (bf16's bits are fp32's upper half), fp16 its own
// magnitude bits shifted up by 13, which orders as the decoded values' fp32
// keys do (fp16 -> fp32 is monotone and one-to-one: the same ties, NaN above
// Inf) without decoding a half. kInf: the type's infinity in that domain.
template <class Load>
struct RowKeys;
template <>
struct RowKeys<LoadF32> {
  static constexpr uint32_t kInf = core::kInfKey;
  static uint32_t at(const LoadF32& l, size_t i) { return core::magnitudeKey(l.p[i]); }
};
template <>
struct RowKeys<LoadBf16> {
  static constexpr uint32_t kInf = core::kInfKey;
  static uint32_t at(const LoadBf16& l, size_t i) { return (uint32_t{l.p[i]} & 0x7fffu) << 16; }
};
template <>
struct RowKeys<LoadF16> {
  static constexpr uint32_t kInf = 0x7c00u << 13;
  static uint32_t at(const LoadF16& l, size_t i) { return (uint32_t{l.p[i]} & 0x7fffu) << 13; }
};

// keys[i] = row[i]'s key (RowKeys) for the whole row, and the floor: the
// smallest of the largest keys of `keep` blocks of the row. Any one key per
// block would give a valid floor (`keep` distinct entries reach it); the
// blocks' maxima give the highest. *nonFinite counts the NaN/Inf keys.
template <class Load>
uint32_t rowKeysAndFloor(const Load& load, uint32_t rowLen, uint32_t keep, uint32_t* keys, uint32_t* nonFinite) {
  using Keys = RowKeys<Load>;
  uint32_t floor = 0xffffffffu, nf = 0;
#if defined(__SSE2__)
  const uint32_t w = rowLen / keep;
  if (w * keep == rowLen && w % 4 == 0) {
    // Blocks of a multiple of 4: four keys an instruction, the block maximum
    // with maxps (keys are non-negative, below 2^31, and ordered as floats
    // as they are as integers; maxps returns one of its operands even for
    // NaN or a denormal under DAZ, and any key of the block makes a valid
    // floor), the minimum over blocks with an integer compare.
    const auto keys4 = [&](size_t i) {
      if constexpr (std::is_same_v<Load, LoadF32>) {
        return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(load.p + i)), _mm_set1_epi32(0x7fffffff));
      } else {
        const __m128i h =
            _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(load.p + i)), _mm_setzero_si128());
        const __m128i magnitude = _mm_and_si128(h, _mm_set1_epi32(0x7fff));
        return std::is_same_v<Load, LoadBf16> ? _mm_slli_epi32(magnitude, 16) : _mm_slli_epi32(magnitude, 13);
      }
    };
    const __m128i finiteTop = _mm_set1_epi32(static_cast<int32_t>(Keys::kInf - 1));
    __m128i nfv = _mm_setzero_si128();
    for (uint32_t b = 0; b < keep; ++b) {
      const size_t begin = size_t{b} * w;
      __m128 mx = _mm_setzero_ps();
      for (uint32_t q = 0; q < w; q += 4) {
        const __m128i k = keys4(begin + q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(keys + begin + q), k);
        mx = _mm_max_ps(_mm_castsi128_ps(k), mx);
        nfv = _mm_sub_epi32(nfv, _mm_cmpgt_epi32(k, finiteTop));
      }
      mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(1, 0, 3, 2)));
      mx = _mm_max_ps(mx, _mm_shuffle_ps(mx, mx, _MM_SHUFFLE(2, 3, 0, 1)));
      floor = std::min(floor, static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_castps_si128(mx))));
    }
    nfv = _mm_add_epi32(nfv, _mm_shuffle_epi32(nfv, _MM_SHUFFLE(1, 0, 3, 2)));
    nfv = _mm_add_epi32(nfv, _mm_shuffle_epi32(nfv, _MM_SHUFFLE(2, 3, 0, 1)));
    *nonFinite = static_cast<uint32_t>(_mm_cvtsi128_si32(nfv));
    return floor;
  }
#endif
  for (uint32_t i = 0; i < rowLen; ++i) {
    keys[i] = Keys::at(load, i);
    nf += keys[i] >= Keys::kInf;
  }
  for (uint32_t b = 0; b < keep; ++b) {
    const auto begin = static_cast<uint32_t>(uint64_t{b} * rowLen / keep);
    const auto end = static_cast<uint32_t>(uint64_t{b + 1} * rowLen / keep);
    uint32_t largest = 0;
    for (uint32_t i = begin; i < end; ++i) largest = std::max(largest, keys[i]);
    floor = std::min(floor, largest);
  }
  *nonFinite = nf;
  return floor;
}

// The positions of the keys >= floor, ascending, without a branch per key:
// each group of four writes its candidates' positions (a table indexed by the
// compare's movemask) at positions + m, m <= the group's first position, so
// nothing is written past positions[rowLen - 1]. Returns how many.
uint32_t rowCandidates(const uint32_t* keys, uint32_t rowLen, uint32_t floor, uint32_t* positions) {
  uint32_t m = 0, i = 0;
#if defined(__SSE2__)
  static const struct Compaction {
    alignas(16) int32_t lanes[16][4];  // the set lanes of a 4-bit mask, in order
    uint8_t count[16];
    Compaction() {
      for (int bits = 0; bits < 16; ++bits) {
        int c = 0;
        for (int lane = 0; lane < 4; ++lane)
          if ((bits >> lane) & 1) lanes[bits][c++] = lane;
        count[bits] = static_cast<uint8_t>(c);
        for (; c < 4; ++c) lanes[bits][c] = 0;
      }
    }
  } table;
  const __m128i below = _mm_set1_epi32(static_cast<int32_t>(floor) - 1);  // keys <= 0x7fffffff: signed is exact
  for (; i + 4 <= rowLen; i += 4) {
    const __m128i k = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + i));
    const int bits = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(k, below)));
    const __m128i lanes = _mm_load_si128(reinterpret_cast<const __m128i*>(table.lanes[bits]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(positions + m),
                     _mm_add_epi32(lanes, _mm_set1_epi32(static_cast<int32_t>(i))));
    m += table.count[bits];
  }
#endif
  for (; i < rowLen; ++i) {
    positions[m] = i;
    m += keys[i] >= floor;
  }
  return m;
}

// How many of keys[0, m) are >= key, padded to whole vectors with -1 (keys
// <= 0x7fffffff, so 32-bit signed compares are exact).
constexpr uint32_t kCountedCandidates = 64;
inline uint32_t countAtLeast(const int32_t* keys, uint32_t m, int32_t key) {
#if defined(__SSE2__)
  const __m128i below = _mm_set1_epi32(key - 1);
  __m128i acc = _mm_setzero_si128();
  for (uint32_t v = 0; v < m; v += 4)
    acc = _mm_sub_epi32(acc, _mm_cmpgt_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(keys + v)), below));
  acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(1, 0, 3, 2)));
  acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(acc));
#else
  uint32_t n = 0;
  for (uint32_t t = 0; t < m; ++t) n += keys[t] >= key;
  return n;
#endif
}

// How many of keys[0, n) outrank keys[j], the keys in position order: one
// before j with an equal key does, one after j only with a larger key.
inline uint32_t outranking(const int32_t* keys, uint32_t n, uint32_t j) {
  const int32_t key = keys[j];
  uint32_t above = 0;
  for (uint32_t t = 0; t < j; ++t) above += keys[t] >= key;
  for (uint32_t t = j + 1; t < n; ++t) above += keys[t] > key;
  return above;
}

// Ties at the cut of m candidates (keys in position order): the exact rule,
// kept positions compacted in order.
uint32_t keepByRule(const int32_t* keys, uint32_t m, uint32_t keep, uint32_t* positions) {
  uint32_t n = 0;
  for (uint32_t j = 0; j < m; ++j) {
    positions[n] = positions[j];
    n += outranking(keys, m, j) < keep;
  }
  return n;
}

// The end of every keepByCount: the tie-free count's `kept` when it found
// exactly `keep`, else the exact rule over the m candidates.
inline uint32_t keptOrByRule(const uint32_t* kept, uint32_t n, const int32_t* keys, uint32_t m, uint32_t keep,
                             uint32_t* positions) {
  if (n == keep) {
    std::memcpy(positions, kept, n * sizeof(uint32_t));
    return n;
  }
  return keepByRule(keys, m, keep, positions);
}

// Keeps, of m <= kCountedCandidates candidates (positions ascending, their
// keys in `keys`, padded with -1 to a multiple of 4), those outranked by
// fewer than `keep` others, compacted in order; returns how many (keep).
uint32_t keepByCount(int32_t* keys, uint32_t m, uint32_t keep, uint32_t* positions) {
  for (uint32_t j = m; j % 4 != 0; ++j) keys[j] = -1;
  // First without ties: a candidate is kept when at most `keep` keys
  // (itself included) reach its key. A tie overcounts, never undercounts,
  // so this keeps a subset of the right set; when it has `keep` members it
  // is the set.
  uint32_t kept[kCountedCandidates];
  uint32_t n = 0;
  for (uint32_t j = 0; j < m; ++j) {
    kept[n] = positions[j];
    n += countAtLeast(keys, m, keys[j]) <= keep;
  }
  return keptOrByRule(kept, n, keys, m, keep, positions);
}

// The same for many candidates (m > kCountedCandidates, a large keep): a
// histogram of their keys' top 8 bits above the floor finds the bin holding
// the keep-th largest; every candidate of a higher bin is kept, the cut bin's
// are ranked among themselves (nth_element on their ranks, in `scratch`,
// when there are many: ties, zeros). One pass to bin, one to compact,
// instead of nth_element over all m ranks; a bin is recomputed from its key
// rather than stored.
template <class KeyAt>
uint32_t keepByHistogram(KeyAt keyAt, uint32_t floor, uint32_t m, uint32_t keep, uint32_t* positions,
                         uint64_t* scratch) {
  uint32_t top = floor;
  for (uint32_t j = 0; j < m; ++j) top = std::max(top, keyAt(j));
  const uint32_t span = top - floor;
  const int shift = span < 256 ? 0 : 24 - __builtin_clz(span);  // (span >> shift) < 256
  const auto binOf = [&](uint32_t j) { return (keyAt(j) - floor) >> shift; };
  uint32_t hist[256] = {};
  for (uint32_t j = 0; j < m; ++j) ++hist[binOf(j)];
  uint32_t higher = 0, cutBin = 255;
  while (higher + hist[cutBin] < keep) higher += hist[cutBin--];  // m >= keep: stops at a bin
  const uint32_t need = keep - higher, inCut = hist[cutBin];      // the cut bin's `need` best are kept
  uint32_t n = 0;
  // The compactions below write positions[n], n <= j, after reading
  // candidate j (keyAt(j) may read positions[j]).
  if (inCut <= kCountedCandidates) {
    int32_t cutKeys[kCountedCandidates];
    uint32_t c = 0;
    for (uint32_t j = 0; j < m; ++j)
      if (binOf(j) == cutBin) cutKeys[c++] = static_cast<int32_t>(keyAt(j));
    c = 0;
    for (uint32_t j = 0; j < m; ++j) {
      const uint32_t i = positions[j], bin = binOf(j);
      bool take = bin > cutBin;
      if (bin == cutBin) take = outranking(cutKeys, inCut, c++) < need;
      positions[n] = i;
      n += take;
    }
    return n;
  }
  // Many in the cut bin: the need-th largest of their ranks (distinct).
  uint32_t c = 0;
  for (uint32_t j = 0; j < m; ++j)
    if (binOf(j) == cutBin) scratch[c++] = core::rowRank(keyAt(j), positions[j]);
  std::nth_element(scratch, scratch + (need - 1), scratch + inCut, std::greater<uint64_t>());
  const uint64_t cut = scratch[need - 1];
  for (uint32_t j = 0; j < m; ++j) {
    const uint32_t key = keyAt(j), i = positions[j], bin = (key - floor) >> shift;
    positions[n] = i;
    n += bin > cutBin || (bin == cutBin && core::rowRank(key, i) >= cut);
  }
  return n;
}

#if SPCCL_HOST_X86
// The row top-k sixteen keys an instruction (x86-64 with AVX-512F/BW/DQ/VL,
// picked at run time: hostSimd()), for rows of a multiple of 16 and a keep
// of at most 8. The floor's blocks are the row's lanes rather than its runs:
// lane l of the column maxima is the largest key of the entries at l, l + 16,
// ..., so the 16 lanes are the maxima of 16 disjoint blocks, and the keep-th
// largest of them has `keep` distinct entries at or above it, a valid floor
// and a tighter one than the smallest of `keep` block maxima (about 10
// candidates in a Gaussian row of 128 and keep 8 instead of 20). The floor
// only prunes: the kept set is the rule's either way. Candidates and their
// keys are compacted with vpcompressd; up to 16 of them are ranked in one
// vector. Larger keeps go to rowTopK8 (AVX2) even here: on this project's
// AMD EPYC (Zen 4) it was faster for them (`host_kernel_bench --row-keep N`
// times both), vpcompressd being the likely cost there.
#define SPCCL_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt")))

bool avx512RowShape(uint32_t rowLen, uint32_t keep) { return keep >= 1 && keep <= 8 && rowLen % 16 == 0; }

template <class Load>
SPCCL_AVX512_TARGET inline __m512i rowKeys16(const Load& load, size_t i) {
  if constexpr (std::is_same_v<Load, LoadF32>) {
    return _mm512_and_si512(_mm512_loadu_si512(load.p + i), _mm512_set1_epi32(0x7fffffff));
  } else {
    const __m512i h =
        _mm512_and_si512(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(load.p + i))),
                         _mm512_set1_epi32(0x7fff));
    return std::is_same_v<Load, LoadBf16> ? _mm512_slli_epi32(h, 16) : _mm512_slli_epi32(h, 13);
  }
}

// Lane i: how many of values[0, 16) are >= lane i's (signed).
SPCCL_AVX512_TARGET inline __m512i atLeastCounts16(__m512i lanes, const int32_t* values) {
  __m512i count = _mm512_setzero_si512();
  for (uint32_t j = 0; j < 16; ++j)
    count = _mm512_mask_sub_epi32(count, _mm512_cmpge_epi32_mask(_mm512_set1_epi32(values[j]), lanes), count,
                                  _mm512_set1_epi32(-1));
  return count;
}

// keepByCount for m <= kCountedCandidates candidates whose keys are in
// vectors (padded with -1 to a multiple of 16): 16 or fewer ranked at once.
SPCCL_AVX512_TARGET uint32_t keepByCount16(int32_t* keys, uint32_t m, uint32_t keep, uint32_t* positions) {
  _mm512_storeu_si512(keys + m, _mm512_set1_epi32(-1));
  if (m <= 16) {
    const __m512i k = _mm512_loadu_si512(keys);
    const __mmask16 counted =
        _mm512_cmple_epi32_mask(atLeastCounts16(k, keys), _mm512_set1_epi32(static_cast<int>(keep)));
    const __mmask16 kept = counted & static_cast<__mmask16>((1u << m) - 1);
    if (static_cast<uint32_t>(__builtin_popcount(kept)) == keep) {
      const __m512i p = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << m) - 1), positions);
      _mm512_mask_storeu_epi32(positions, static_cast<__mmask16>((1u << keep) - 1),
                               _mm512_maskz_compress_epi32(kept, p));
      return keep;
    }
    return keepByRule(keys, m, keep, positions);
  }
  constexpr uint32_t kVectors = kCountedCandidates / 16;
  const uint32_t nv = (m + 15) / 16;
  __m512i k[kVectors];
  for (uint32_t v = 0; v < kVectors; ++v) k[v] = v < nv ? _mm512_loadu_si512(keys + 16 * v) : _mm512_set1_epi32(-1);
  uint32_t kept[kCountedCandidates];
  uint32_t n = 0;
  for (uint32_t j = 0; j < m; ++j) {
    const __m512i key = _mm512_set1_epi32(keys[j]);
    uint32_t atLeast = 0;
    for (uint32_t v = 0; v < nv; ++v)
      atLeast += static_cast<uint32_t>(__builtin_popcount(_mm512_cmpge_epi32_mask(k[v], key)));
    kept[n] = positions[j];
    n += atLeast <= keep;
  }
  return keptOrByRule(kept, n, keys, m, keep, positions);
}

// selectRowTopK's floor-and-candidates path for avx512RowShape rows;
// candidateKeys holds rowLen + 16. Returns kRowGeneral when more than
// `keep` keys are NaN/Inf (the general path's case).
constexpr uint32_t kRowGeneral = 0xffffffffu;
template <class Load>
SPCCL_AVX512_TARGET uint32_t rowTopK16(const Load& load, uint32_t rowLen, uint32_t keep, uint32_t* positions,
                                       uint64_t* scratch, int32_t* candidateKeys) {
  using Keys = RowKeys<Load>;
  const uint32_t vectors = rowLen / 16;
  const __m512i finiteTop = _mm512_set1_epi32(static_cast<int32_t>(Keys::kInf - 1));
  __m512i columnMax = _mm512_setzero_si512();
  uint32_t nonFinite = 0;
  for (uint32_t v = 0; v < vectors; ++v) {
    const __m512i k = rowKeys16(load, size_t{v} * 16);
    columnMax = _mm512_max_epu32(columnMax, k);
    nonFinite += static_cast<uint32_t>(__builtin_popcount(_mm512_cmpgt_epu32_mask(k, finiteTop)));
  }
  if (nonFinite > keep) return kRowGeneral;
  // The keep-th largest lane: the largest that is >= `keep` lanes (keys
  // < 2^31: signed compares are exact).
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, columnMax);
  const __mmask16 enough =
      _mm512_cmpge_epi32_mask(atLeastCounts16(columnMax, lanes), _mm512_set1_epi32(static_cast<int>(keep)));
  const uint32_t floor = _mm512_mask_reduce_max_epu32(enough, columnMax);
  const __m512i floorV = _mm512_set1_epi32(static_cast<int32_t>(floor));
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint32_t m = 0;
  for (uint32_t v = 0; v < vectors; ++v) {
    const __m512i k = rowKeys16(load, size_t{v} * 16);
    const __mmask16 at = _mm512_cmpge_epu32_mask(k, floorV);
    // m <= 16 v: the stores end inside positions[0, rowLen) and candidateKeys.
    _mm512_storeu_si512(positions + m, _mm512_maskz_compress_epi32(at, index));
    _mm512_storeu_si512(candidateKeys + m, _mm512_maskz_compress_epi32(at, k));
    m += static_cast<uint32_t>(__builtin_popcount(at));
    index = _mm512_add_epi32(index, _mm512_set1_epi32(16));
  }
  if (m == keep) return m;
  if (m > kCountedCandidates)
    return keepByHistogram([&](uint32_t j) { return static_cast<uint32_t>(candidateKeys[j]); }, floor, m, keep,
                           positions, scratch);
  return keepByCount16(candidateKeys, m, keep, positions);
}

// The same eight keys an instruction (AVX2, for CPUs without AVX-512: AMD
// before Zen 4, Intel client cores), for rows of a multiple of 8. The floor's
// blocks are the lanes of R runs of the row's vectors, 8R of them, R the
// smallest power of two (at most 4) with 8R >= 2 keep where the vectors
// split into R runs: the keep-th largest of their maxima (keep <= 16); keeps
// past 16 that are multiples of 8 take the smallest of keep / 8 runs' lane
// maxima. Candidates are compacted through a 256-entry table of lane orders
// (vpermd), and up to 16 are ranked in two vectors.
#define SPCCL_AVX2_TARGET __attribute__((target("avx2,popcnt")))

// Runs of the floor's blocks for a row of rowLen (a multiple of 8) and keep;
// 0: not this path's shape. *ranked: the keep-th largest of 8 x runs maxima
// (else their smallest).
uint32_t avx2FloorRuns(uint32_t rowLen, uint32_t keep, bool* ranked) {
  if (keep == 0 || rowLen % 8 != 0) return 0;
  const uint32_t vectors = rowLen / 8;
  if (keep <= 16) {
    uint32_t runs = 1;
    while (runs < 4 && 8 * runs < 2 * keep && vectors % (2 * runs) == 0) runs *= 2;
    if (8 * runs < keep) return 0;  // 9-16 kept from one run of 8 lanes: too few blocks
    *ranked = 8 * runs > keep;
    return runs;
  }
  *ranked = false;
  return keep % 8 == 0 && vectors % (keep / 8) == 0 ? keep / 8 : 0;
}

template <class Load>
SPCCL_AVX2_TARGET inline __m256i rowKeys8(const Load& load, size_t i) {
  if constexpr (std::is_same_v<Load, LoadF32>) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(load.p + i)),
                            _mm256_set1_epi32(0x7fffffff));
  } else {
    const __m256i h =
        _mm256_and_si256(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(load.p + i))),
                         _mm256_set1_epi32(0x7fff));
    return std::is_same_v<Load, LoadBf16> ? _mm256_slli_epi32(h, 16) : _mm256_slli_epi32(h, 13);
  }
}

// counts[v] lane i: how many of values[0, kN) are >= lane i of lanes[v], for
// kN / 8 vectors (signed: keys < 2^31).
template <uint32_t kN>
SPCCL_AVX2_TARGET inline void atLeastCounts8(const __m256i* lanes, const int32_t* values, __m256i* counts) {
  // kN less those below: values[j] >= x unless x > values[j].
  constexpr uint32_t kVectors = kN / 8;
  for (uint32_t v = 0; v < kVectors; ++v) counts[v] = _mm256_set1_epi32(static_cast<int>(kN));
  for (uint32_t j = 0; j < kN; ++j) {
    const __m256i value = _mm256_set1_epi32(values[j]);
    for (uint32_t v = 0; v < kVectors; ++v)
      counts[v] = _mm256_add_epi32(counts[v], _mm256_cmpgt_epi32(lanes[v], value));
  }
}

// The keep-th largest of the kN values in `lanes` (kN / 8 vectors, stored in
// `values`): the largest that is >= `keep` of them.
template <uint32_t kN>
SPCCL_AVX2_TARGET inline uint32_t keepthLargest8(const __m256i* lanes, const int32_t* values, uint32_t keep) {
  __m256i counts[kN / 8];
  atLeastCounts8<kN>(lanes, values, counts);
  const __m256i enough = _mm256_set1_epi32(static_cast<int>(keep) - 1);
  __m256i best = _mm256_setzero_si256();
  for (uint32_t v = 0; v < kN / 8; ++v)
    best = _mm256_max_epi32(best, _mm256_and_si256(lanes[v], _mm256_cmpgt_epi32(counts[v], enough)));
  best = _mm256_max_epi32(best, _mm256_permute2x128_si256(best, best, 1));
  best = _mm256_max_epi32(best, _mm256_shuffle_epi32(best, _MM_SHUFFLE(1, 0, 3, 2)));
  best = _mm256_max_epi32(best, _mm256_shuffle_epi32(best, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm256_cvtsi256_si32(best));
}

// The set lanes of an 8-bit mask, in order, a byte each (unset: 0).
struct LaneOrder8 {
  uint64_t lanes[256];
  LaneOrder8() {
    for (int bits = 0; bits < 256; ++bits) {
      uint64_t packed = 0;
      int c = 0;
      for (int lane = 0; lane < 8; ++lane)
        if ((bits >> lane) & 1) packed |= uint64_t(lane) << (8 * c++);
      lanes[bits] = packed;
    }
  }
};
const LaneOrder8 kLaneOrder8;

// keepByCount for m <= kCountedCandidates candidates (keys padded with -1 to
// a multiple of 16): up to 16 ranked in two vectors, more one at a time.
SPCCL_AVX2_TARGET uint32_t keepByCount8(int32_t* keys, uint32_t m, uint32_t keep, uint32_t* positions) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + m), _mm256_set1_epi32(-1));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys + m + 8), _mm256_set1_epi32(-1));
  if (m <= 16) {
    const __m256i k[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys)),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + 8))};
    __m256i counts[2];
    atLeastCounts8<16>(k, keys, counts);
    const __m256i most = _mm256_set1_epi32(static_cast<int>(keep) + 1);  // count <= keep
    const uint32_t kept =
        (static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(most, counts[0])))) |
         static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(most, counts[1])))) << 8) &
        ((1u << m) - 1);
    if (static_cast<uint32_t>(__builtin_popcount(kept)) == keep) {
      uint32_t n = 0;
      for (uint32_t bits = kept; bits != 0; bits &= bits - 1) positions[n++] = positions[__builtin_ctz(bits)];
      return n;
    }
    return keepByRule(keys, m, keep, positions);
  }
  constexpr uint32_t kVectors = kCountedCandidates / 8;
  const uint32_t nv = (m + 7) / 8;
  __m256i k[kVectors];
  for (uint32_t v = 0; v < kVectors; ++v)
    k[v] = v < nv ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + 8 * v)) : _mm256_set1_epi32(-1);
  uint32_t kept[kCountedCandidates];
  uint32_t n = 0;
  for (uint32_t j = 0; j < m; ++j) {
    const __m256i below = _mm256_set1_epi32(keys[j] - 1);
    uint32_t atLeast = 0;
    for (uint32_t v = 0; v < nv; ++v)
      atLeast += static_cast<uint32_t>(
          __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k[v], below)))));
    kept[n] = positions[j];
    n += atLeast <= keep;
  }
  return keptOrByRule(kept, n, keys, m, keep, positions);
}

// selectRowTopK's floor-and-candidates path for rows avx2FloorRuns accepts
// (runs, ranked from it); candidateKeys holds rowLen + 16. Returns
// kRowGeneral when more than `keep` keys are NaN/Inf.
template <class Load>
SPCCL_AVX2_TARGET uint32_t rowTopK8(const Load& load, uint32_t rowLen, uint32_t keep, uint32_t runs, bool ranked,
                                    uint32_t* positions, uint64_t* scratch, int32_t* candidateKeys) {
  using Keys = RowKeys<Load>;
  const uint32_t vectors = rowLen / 8, perRun = vectors / runs;
  const __m256i finiteTop = _mm256_set1_epi32(static_cast<int32_t>(Keys::kInf - 1));
  __m256i maxima[4];
  __m256i floors = _mm256_set1_epi32(0x7fffffff);
  uint32_t nonFinite = 0;
  for (uint32_t g = 0; g < runs; ++g) {
    __m256i columnMax = _mm256_setzero_si256();
    for (uint32_t v = g * perRun; v < (g + 1) * perRun; ++v) {
      const __m256i k = rowKeys8(load, size_t{v} * 8);
      columnMax = _mm256_max_epi32(columnMax, k);
      nonFinite += static_cast<uint32_t>(
          __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, finiteTop)))));
    }
    if (ranked) maxima[g] = columnMax;  // ranked: runs <= 4
    floors = _mm256_min_epi32(floors, columnMax);
  }
  if (nonFinite > keep) return kRowGeneral;
  uint32_t floor;
  if (ranked) {
    alignas(32) int32_t lanes[32];
    for (uint32_t g = 0; g < runs; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * g), maxima[g]);
    floor = runs == 1   ? keepthLargest8<8>(maxima, lanes, keep)
            : runs == 2 ? keepthLargest8<16>(maxima, lanes, keep)
                        : keepthLargest8<32>(maxima, lanes, keep);
  } else {
    floors = _mm256_min_epi32(floors, _mm256_permute2x128_si256(floors, floors, 1));
    floors = _mm256_min_epi32(floors, _mm256_shuffle_epi32(floors, _MM_SHUFFLE(1, 0, 3, 2)));
    floors = _mm256_min_epi32(floors, _mm256_shuffle_epi32(floors, _MM_SHUFFLE(2, 3, 0, 1)));
    floor = static_cast<uint32_t>(_mm256_cvtsi256_si32(floors));
  }
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(floor) - 1);  // floor 0: -1, every key
  __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  uint32_t m = 0;
  for (uint32_t v = 0; v < vectors; ++v) {
    const __m256i k = rowKeys8(load, size_t{v} * 8);
    const int bits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(k, below)));
    const __m256i order =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kLaneOrder8.lanes[bits])));
    // m <= 8 v: the stores end inside positions[0, rowLen) and candidateKeys.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(positions + m), _mm256_permutevar8x32_epi32(index, order));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(candidateKeys + m), _mm256_permutevar8x32_epi32(k, order));
    m += static_cast<uint32_t>(__builtin_popcount(bits));
    index = _mm256_add_epi32(index, _mm256_set1_epi32(8));
  }
  if (m == keep) return m;
  if (m > kCountedCandidates)
    return keepByHistogram([&](uint32_t j) { return static_cast<uint32_t>(candidateKeys[j]); }, floor, m, keep,
                           positions, scratch);
  return keepByCount8(candidateKeys, m, keep, positions);
}
#endif  // SPCCL_HOST_X86

// Every row selectRowTopK's floor does not serve: nth_element over the
// row's 64-bit ranks.
uint32_t selectRowTopKGeneral(const void* row, spcclDataType_t type, uint32_t rowLen, uint32_t keep,
                              uint32_t* positions, uint64_t* scratch) {
  uint32_t nonFinite = 0;
  withLoader(row, type, [&](auto load) {
    for (uint32_t i = 0; i < rowLen; ++i) {
      const uint32_t key = core::magnitudeKey(load(i));
      nonFinite += core::isNonFiniteKey(key);
      scratch[i] = core::rowRank(key, i);
    }
  });
  const uint32_t n = std::min(rowLen, std::max(keep, nonFinite));
  if (n > 0 && n < rowLen) std::nth_element(scratch, scratch + (n - 1), scratch + rowLen, std::greater<uint64_t>());
  for (uint32_t j = 0; j < n; ++j) positions[j] = core::rowRankPosition(scratch[j]);
  std::sort(positions, positions + n);
  return n;
}

}  // namespace

uint32_t selectRowTopK(const void* row, spcclDataType_t type, uint32_t rowLen, uint32_t keep, uint32_t* positions,
                       uint64_t* scratch) {
  // One 64-bit rank per entry: magnitude key above, inverted position below,
  // so a larger rank is a larger |x|, then a lower position. NaN/Inf keys
  // exceed every finite key, so they rank first.
  if (keep > 0 && keep < rowLen) {
    // A floor under the kept keys first (rowKeysAndFloor): those `keep`
    // maxima are distinct entries with key >= floor, so the keep-th largest
    // rank has a key >= floor, and so has every rank above it: only entries
    // with key >= floor can be kept (about 2.5 x keep of them in a Gaussian
    // row of 128 and keep 8). Neither the keys, the floor nor the candidates
    // take a branch per entry (the old insertion into a sorted top-`keep`
    // mispredicted on every insert: 4.2 ns an element at 128/8 here). The
    // row's keys are computed once, into a buffer of this thread's (with
    // AVX-512 or AVX2, rowTopK16 and rowTopK8: the candidates' keys, compacted).
    thread_local std::vector<uint32_t> keyBuffer;
    if (keyBuffer.size() < size_t{rowLen} + 16) keyBuffer.resize(size_t{rowLen} + 16);
    uint32_t* const keys = keyBuffer.data();
#if SPCCL_HOST_X86
    const HostSimd simd = hostSimd();
    if (simd == HostSimd::kAvx512 && avx512RowShape(rowLen, keep)) {
      const uint32_t n = withLoader(row, type, [&](auto load) {
        return rowTopK16(load, rowLen, keep, positions, scratch, reinterpret_cast<int32_t*>(keys));
      });
      return n != kRowGeneral ? n : selectRowTopKGeneral(row, type, rowLen, keep, positions, scratch);
    }
    bool ranked = false;
    const uint32_t runs = simd == HostSimd::kBaseline ? 0 : avx2FloorRuns(rowLen, keep, &ranked);
    if (runs != 0) {
      const uint32_t n = withLoader(row, type, [&](auto load) {
        return rowTopK8(load, rowLen, keep, runs, ranked, positions, scratch, reinterpret_cast<int32_t*>(keys));
      });
      return n != kRowGeneral ? n : selectRowTopKGeneral(row, type, rowLen, keep, positions, scratch);
    }
#endif
    uint32_t nonFinite = 0;
    const uint32_t floor =
        withLoader(row, type, [&](auto load) { return rowKeysAndFloor(load, rowLen, keep, keys, &nonFinite); });
    if (nonFinite <= keep) {  // else more NaN/Inf than `keep`: all of them stay, the general path below
      const uint32_t m = rowCandidates(keys, rowLen, floor, positions);
      if (m == keep) return m;
      if (m > kCountedCandidates)
        return keepByHistogram([&](uint32_t j) { return keys[positions[j]]; }, floor, m, keep, positions, scratch);
      alignas(16) int32_t candidateKeys[kCountedCandidates];
      for (uint32_t j = 0; j < m; ++j) candidateKeys[j] = static_cast<int32_t>(keys[positions[j]]);
      return keepByCount(candidateKeys, m, keep, positions);
    }
  }
  return selectRowTopKGeneral(row, type, rowLen, keep, positions, scratch);
}

namespace {
std::atomic<int> gHostSimd{-1};  // -1: not yet picked
}  // namespace

bool hostSimdAvailable(HostSimd simd) {
  if (simd == HostSimd::kBaseline) return true;
#if SPCCL_HOST_X86
  // libgcc's and compiler-rt's checks include the OS's saving of the ymm/zmm state (XCR0).
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return simd == HostSimd::kAvx512 ? avx512 : avx2;
#else
  return false;
#endif
}

HostSimd widestHostSimd(bool (*available)(HostSimd)) {
  return available(HostSimd::kAvx512) ? HostSimd::kAvx512
         : available(HostSimd::kAvx2) ? HostSimd::kAvx2
                                      : HostSimd::kBaseline;
}

HostSimd hostSimd() {
  int v = gHostSimd.load(std::memory_order_relaxed);
  if (v < 0) {
    v = static_cast<int>(widestHostSimd());
    gHostSimd.store(v, std::memory_order_relaxed);
  }
  return static_cast<HostSimd>(v);
}

bool setHostSimd(HostSimd simd) {
  if (!hostSimdAvailable(simd)) return false;
  gHostSimd.store(static_cast<int>(simd), std::memory_order_relaxed);
  return true;
}

const char* hostSimdName(HostSimd simd) {
  return simd == HostSimd::kAvx512 ? "avx512" : simd == HostSimd::kAvx2 ? "avx2" : "baseline";
}

// ---- The alltoall rows' gather, scatter and positions (row_topk.cu's twins) ----

namespace {

// Element formats of user buffers and wire values, so that the per-entry
// loops are compiled once per pair of formats with no switch inside.
// toFloat reads, wireFromFloat writes (finite values saturate: storeWireValue).
struct Fp32 {
  using Raw = float;
  static float toFloat(Raw r, int) { return r; }
  static Raw wireFromFloat(float v) { return v; }
};
struct Fp16 {
  using Raw = uint16_t;
  static float toFloat(Raw r, int) { return core::halfBitsToFloat(r); }
  static Raw wireFromFloat(float v) { return core::wireHalfBits(v); }
};
struct Bf16 {
  using Raw = uint16_t;
  static float toFloat(Raw r, int) { return core::bfloat16BitsToFloat(r); }
  static Raw wireFromFloat(float v) { return core::wireBfloat16Bits(v); }
};
struct Fp8 {  // wire only, read side (a sender gathers fp32: the scale needs every value)
  using Raw = uint8_t;
  static float toFloat(Raw r, int scaleExp) { return core::loadWireValue(&r, 0, ValueType::kFloat8e4m3, scaleExp); }
};

template <typename F>
decltype(auto) withBufferFormat(spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(Fp16{});
    case spcclBfloat16:
      return f(Bf16{});
    default:
      return f(Fp32{});
  }
}

template <typename F>
decltype(auto) withWireFormat(ValueType wire, F&& f) {
  switch (wire) {
    case ValueType::kFloat16:
      return f(Fp16{});
    case ValueType::kBfloat16:
      return f(Bf16{});
    case ValueType::kFloat8e4m3:
      return f(Fp8{});
    default:
      return f(Fp32{});
  }
}

// One format's element as another's: the bits as they are where the formats
// agree, else through fp32, saturating (a value that came from a buffer of
// type To and rounded past its range on the wire, 65504 -> 65536 in bf16 for
// an fp16 buffer, must not come back as Inf). NaN/Inf pass unchanged.
template <typename From, typename To>
typename To::Raw convertRaw(typename From::Raw x, int scaleExp) {
  if constexpr (std::is_same_v<From, To>) return x;
  else return To::wireFromFloat(From::toFloat(x, scaleExp));
}

template <typename T>
T loadRaw(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof v);
  return v;
}
template <typename T>
void storeRaw(void* base, size_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * sizeof(T), &v, sizeof v);
}

template <typename Buf, typename Wire>
void gatherAs(const void* rows, uint64_t nRows, uint32_t rowLen, const uint32_t* positions, const uint64_t* offsets,
              void* values) {
  const uint64_t o = offsets[0];
  for (uint64_t r = 0; r < nRows; ++r) {
    const char* row = static_cast<const char*>(rows) + r * rowLen * sizeof(typename Buf::Raw);
    for (uint64_t j = offsets[r] - o; j < offsets[r + 1] - o; ++j)
      storeRaw(values, j, convertRaw<Buf, Wire>(loadRaw<typename Buf::Raw>(row, positions[j]), 0));
  }
}

// Each row is zeroed right before its entries are stored, so the stores hit
// the lines just brought in.
template <typename Wire, typename Buf>
void scatterAs(const void* values, int scaleExp, const uint32_t* positions, const uint64_t* offsets, uint64_t nRows,
               uint32_t rowLen, void* rows) {
  using Raw = typename Buf::Raw;
  const uint64_t o = offsets[0];
  for (uint64_t r = 0; r < nRows; ++r) {
    char* row = static_cast<char*>(rows) + r * rowLen * sizeof(Raw);
    std::memset(row, 0, size_t{rowLen} * sizeof(Raw));
    for (uint64_t j = offsets[r] - o; j < offsets[r + 1] - o; ++j)
      storeRaw(row, positions[j], convertRaw<Wire, Buf>(loadRaw<typename Wire::Raw>(values, j), scaleExp));
  }
}

template <typename Buf>
uint64_t scatterInt8As(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                       const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, void* rows) {
  using Raw = typename Buf::Raw;
  const uint64_t o = offsets[0];
  uint64_t bad = 0;  // as the device's: a row with a bad scale stays zero, the first is reported
  for (uint64_t r = 0; r < nRows; ++r) {
    char* row = static_cast<char*>(rows) + r * rowLen * sizeof(Raw);
    std::memset(row, 0, size_t{rowLen} * sizeof(Raw));
    float scale;
    std::memcpy(&scale, scales + r * sizeof(float), sizeof scale);
    if (!core::int8ScaleValid(scale)) {
      if (bad == 0) bad = r + 1;
      continue;
    }
    for (uint64_t j = offsets[r] - o; j < offsets[r + 1] - o; ++j)
      storeRaw(row, positions[j], convertRaw<Fp32, Buf>(core::int8Decode(static_cast<int8_t>(codes[j]), scale), 0));
  }
  return bad;
}

template <typename Index>
void narrowAs(const uint32_t* positions, uint64_t n, unsigned char* dst) {
  for (uint64_t j = 0; j < n; ++j) {
    const auto v = static_cast<Index>(positions[j]);
    std::memcpy(dst + j * sizeof(Index), &v, sizeof v);
  }
}

}  // namespace

void gatherRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, const uint32_t* positions,
                     const uint64_t* offsets, ValueType wire, void* values) {
  withBufferFormat(type, [&](auto b) {
    withWireFormat(wire, [&](auto w) {
      if constexpr (!std::is_same_v<decltype(w), Fp8>)
        gatherAs<decltype(b), decltype(w)>(rows, nRows, rowLen, positions, offsets, values);
    });
  });
}

void scatterRowValues(const void* values, ValueType wire, int scaleExp, const uint32_t* positions,
                      const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows) {
  withWireFormat(wire, [&](auto w) {
    withBufferFormat(type, [&](auto b) {
      scatterAs<decltype(w), decltype(b)>(values, scaleExp, positions, offsets, nRows, rowLen, rows);
    });
  });
}

namespace {

template <typename Buf, typename Wire>
void selectRowsAs(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                  uint32_t* positions, void* values, uint32_t stride, uint32_t* counts, uint32_t* rowPositions,
                  uint64_t* scratch) {
  using BufRaw = typename Buf::Raw;
  using WireRaw = typename Wire::Raw;
  for (uint64_t r = 0; r < nRows; ++r) {
    const auto* row = static_cast<const BufRaw*>(rows) + r * rowLen;
    const uint32_t n = selectRowTopK(row, type, rowLen, keep, rowPositions, scratch);
    const uint32_t kept = std::min(n, stride);
    uint32_t* slot = positions + r * stride;
    auto* vals = static_cast<WireRaw*>(values) + r * stride;
    for (uint32_t e = 0; e < kept; ++e) {  // the row is still in the cache
      slot[e] = rowPositions[e];
      vals[e] = convertRaw<Buf, Wire>(row[rowPositions[e]], 0);
    }
    counts[r] = n;
  }
}

}  // namespace

void selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep, ValueType wire,
                uint32_t* positions, void* values, uint32_t stride, uint32_t* counts, uint32_t* rowPositions,
                uint64_t* scratch) {
  withBufferFormat(type, [&](auto b) {
    withWireFormat(wire, [&](auto w) {
      if constexpr (!std::is_same_v<decltype(w), Fp8>)
        selectRowsAs<decltype(b), decltype(w)>(rows, type, nRows, rowLen, keep, positions, values, stride, counts,
                                               rowPositions, scratch);
    });
  });
}

void encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                    unsigned char* codes) {
  const uint64_t o = offsets[0];
  for (uint64_t r = 0; r < nRows; ++r) {
    const uint64_t begin = offsets[r] - o, end = offsets[r + 1] - o;
    float m = 0.0f;
    for (uint64_t j = begin; j < end; ++j) m = std::max(m, core::int8FiniteMagnitude(values[j]));
    const float scale = core::int8ScaleOfMax(m);
    std::memcpy(scales + r * sizeof(float), &scale, sizeof scale);
    for (uint64_t j = begin; j < end; ++j) {
      const int8_t code = core::int8Encode(values[j], scale);
      std::memcpy(codes + j, &code, 1);
    }
  }
}

uint64_t scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                         const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows) {
  return withBufferFormat(
      type, [&](auto b) { return scatterInt8As<decltype(b)>(scales, codes, positions, offsets, nRows, rowLen, rows); });
}

void narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) {
  if (bytes == 1) narrowAs<uint8_t>(positions, n, dst);
  else if (bytes == 2) narrowAs<uint16_t>(positions, n, dst);
  else narrowAs<uint32_t>(positions, n, dst);
}

}  // namespace spccl::host
