#include "kernels/host/host_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SPCCL_HOST_X86 1
// GCC 12's AVX-512 headers build their "undefined" vectors by self-assignment,
// which its own -Wmaybe-uninitialized flags where they are inlined (GCC bug
// 105593, fixed in 13).
#if defined(__clang__)
#include <immintrin.h>
#else
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
#else
#define SPCCL_HOST_X86 0
#endif

namespace spccl::host {

using core::Pick;
using core::ValueType;

namespace {

// Input element loaders: one per user float type, so the inner loops have no
// per-element type switch.
struct LoadF32 {
  const float* p;
  float operator()(size_t i) const { return p[i]; }
};
struct LoadF16 {
  const uint16_t* p;
  float operator()(size_t i) const { return core::halfBitsToFloat(p[i]); }
};
struct LoadBf16 {
  const uint16_t* p;
  float operator()(size_t i) const { return core::bfloat16BitsToFloat(p[i]); }
};

template <typename F>
decltype(auto) withLoader(const void* src, spcclDataType_t type, F&& f) {
  switch (type) {
    case spcclFloat16:
      return f(LoadF16{static_cast<const uint16_t*>(src)});
    case spcclBfloat16:
      return f(LoadBf16{static_cast<const uint16_t*>(src)});
    default:
      return f(LoadF32{static_cast<const float*>(src)});
  }
}

// v = send + residual at i (residual nullptr: zeros), the value every
// threshold and selection rule looks at; selectPackImpl has its own, with the
// residual's presence fixed at compile time.
template <class Load>
inline float vOf(const Load& load, const float* residual, size_t i) {
  return residual ? load(i) + residual[i] : load(i);
}

template <ValueType kWire>
struct WireTag {
  static constexpr ValueType value = kWire;
};

template <typename F>
decltype(auto) withWire(ValueType vt, F&& f) {
  switch (vt) {
    case ValueType::kFloat16:
      return f(WireTag<ValueType::kFloat16>{});
    case ValueType::kBfloat16:
      return f(WireTag<ValueType::kBfloat16>{});
    case ValueType::kFloat8e4m3:
      return f(WireTag<ValueType::kFloat8e4m3>{});
    default:
      return f(WireTag<ValueType::kFloat32>{});
  }
}

// Residuals of large calls are written with non-temporal stores: a block is
// one 64-byte line written whole, so the line need not be read first (a
// plain store reads it for ownership: a third of the pass's traffic) and the
// n-sized output does not evict what the caller will read next. Small ones
// stay in cache for the next call, with plain stores.
constexpr size_t kStreamingMinBytes = size_t{8} << 20;

typedef float F4 __attribute__((vector_size(16)));  // GCC/Clang vector extensions: SSE2, NEON, ... alike
typedef int32_t I4 __attribute__((vector_size(16)));

inline void store4(float* dst, F4 x, bool streaming) {
#if defined(__SSE2__)
  if (streaming) {
    _mm_stream_ps(dst, static_cast<__m128>(x));
    return;
  }
#else
  (void)streaming;
#endif
  std::memcpy(dst, &x, sizeof x);
}

// One block of 16 fp32 elements: v = send + residual in four 4-wide vectors
// and whether any has magnitude key >= minKey (minKey >= 1, so the signed
// compare is exact). No candidate (most blocks): the residual line is stored
// straight from the registers and true is returned. Otherwise v goes to v[]
// for the element-by-element packing and false is returned.
template <bool kHasResidualIn, bool kHasResidualOut>
inline bool plainBlockF32(const float* send, const float* residual, float* out, uint32_t minKey, bool streaming,
                          float* v) {
  F4 x[4];
  I4 any = {0, 0, 0, 0};
  const I4 bound = {static_cast<int32_t>(minKey), static_cast<int32_t>(minKey), static_cast<int32_t>(minKey),
                    static_cast<int32_t>(minKey)};
  for (size_t q = 0; q < 4; ++q) {
    std::memcpy(&x[q], send + 4 * q, sizeof x[q]);
    if constexpr (kHasResidualIn) {
      F4 r;
      std::memcpy(&r, residual + 4 * q, sizeof r);
      x[q] += r;
    }
    I4 key;
    std::memcpy(&key, &x[q], sizeof key);
    any |= (key & 0x7fffffff) >= bound;
  }
#if defined(__SSE2__)
  __m128i anyBits;
  std::memcpy(&anyBits, &any, sizeof anyBits);
  const bool none = _mm_movemask_epi8(anyBits) == 0;
#else
  const bool none = (any[0] | any[1] | any[2] | any[3]) == 0;
#endif
  if (none) {
    if constexpr (kHasResidualOut)
      for (size_t q = 0; q < 4; ++q) store4(out + 4 * q, x[q], streaming);
    return true;
  }
  std::memcpy(v, x, sizeof x);
  return false;
}

// The fused pass in blocks of 16: the first loop over a block (v, "any
// candidate?") has no data-dependent branch and vectorises; the rare blocks
// holding a candidate (|v| >= tau, or NaN/Inf) are revisited element by
// element for the packing. The block's new residual is assembled in
// registers and stored once. Same decisions as a plain scalar loop.
template <typename Load, typename Wire, bool kHasResidualIn, bool kHasResidualOut>
SelectResult selectPackImpl(const SelectArgs& a, Load load, Wire) {
  constexpr size_t kBlock = 16;
  // Exact zeros are never selected, so the candidate test is key >= max(tau, 1);
  // NaN/Inf keys exceed every finite tau's key.
  const uint32_t minKey = a.tauKey > 0 ? a.tauKey : 1u;
  uint64_t written = 0, finite = 0, ties = a.tieBudget;
  uint32_t maxFiniteKey = 0;
  // An fp16 buffer's values must not round above its range (core::kHalfMax).
  const float bound = a.inType == spcclFloat16 ? core::kHalfMax : __builtin_inff();
  auto vAt = [&](size_t i) {
    float v = load(i);
    if constexpr (kHasResidualIn) v += a.residualIn[i];
    return v;
  };
  // v is a candidate; *res holds v and gets what stays behind.
  auto pack = [&](size_t i, float v, float* res) {
    const Pick pick = core::classify(v, a.tauKey);
    if (pick == Pick::kTie) {
      if (ties == 0) return;
      --ties;
    }
    if (pick != Pick::kNonFinite) {
      ++finite;
      maxFiniteKey = std::max(maxFiniteKey, core::magnitudeKey(v));
    }
    if (written >= a.capacity && a.keepOverflow) {  // counted, not sent: the residual keeps v
      ++written;
      return;
    }
    float sent;  // what the receiver decodes: stored once, or rounded alone past the capacity
    if (written < a.capacity) {
      a.indices[written] = static_cast<uint32_t>(i);
      sent = core::storeWireValueBounded(a.values, written, v, Wire::value, a.scaleExp, bound);
    } else {
      sent = core::roundToWireBounded(v, Wire::value, a.scaleExp, bound);
    }
    ++written;
    // A sent NaN/Inf leaves nothing behind: v - v would poison the residual.
    *res = pick == Pick::kNonFinite ? 0.0f : v - sent;
  };
  auto scalar = [&](size_t i) {
    const float v = vAt(i);
    float res = v;
    if (core::magnitudeKey(v) >= minKey) pack(i, v, &res);
    if constexpr (kHasResidualOut) a.residualOut[i] = res;
  };
  size_t i = 0;
  bool streaming = false;
  if constexpr (kHasResidualOut) {
    streaming = a.n * sizeof(float) >= kStreamingMinBytes;
    // Up to the first 64-byte boundary of the output one by one, so blocks are whole lines.
    const size_t misaligned = (reinterpret_cast<uintptr_t>(a.residualOut) / sizeof(float)) % kBlock;
    const size_t head = std::min(a.n, misaligned == 0 ? size_t{0} : kBlock - misaligned);
    for (; i < head; ++i) scalar(i);
  }
  auto storeBlock = [&](size_t at, const float* src) {
    for (size_t q = 0; q < kBlock; q += 4) {
      F4 x;
      std::memcpy(&x, src + q, sizeof x);
      store4(a.residualOut + at + q, x, streaming);
    }
  };
  for (; i + kBlock <= a.n; i += kBlock) {
    float v[kBlock], res[kBlock];
    if constexpr (std::is_same_v<Load, LoadF32>) {
      if (plainBlockF32<kHasResidualIn, kHasResidualOut>(load.p + i, kHasResidualIn ? a.residualIn + i : nullptr,
                                                         kHasResidualOut ? a.residualOut + i : nullptr, minKey,
                                                         streaming, v))
        continue;
    } else {
      bool any = false;
      for (size_t j = 0; j < kBlock; ++j) {
        v[j] = vAt(i + j);
        any |= core::magnitudeKey(v[j]) >= minKey;
      }
      if (!any) {
        if constexpr (kHasResidualOut) storeBlock(i, v);
        continue;
      }
    }
    std::memcpy(res, v, sizeof v);
    for (size_t j = 0; j < kBlock; ++j)
      if (core::magnitudeKey(v[j]) >= minKey) pack(i + j, v[j], &res[j]);
    if constexpr (kHasResidualOut) storeBlock(i, res);
  }
  for (; i < a.n; ++i) scalar(i);
#if defined(__SSE2__)
  if (streaming) _mm_sfence();  // the streamed lines before anything that follows
#endif
  return {written, finite, maxFiniteKey};
}

}  // namespace

SelectResult selectPack(const SelectArgs& a) {
  return withLoader(a.send, a.inType, [&](auto load) {
    return withWire(a.wireType, [&](auto wire) {
      if (a.residualIn && a.residualOut) return selectPackImpl<decltype(load), decltype(wire), true, true>(a, load, wire);
      if (a.residualOut) return selectPackImpl<decltype(load), decltype(wire), false, true>(a, load, wire);
      if (a.residualIn) return selectPackImpl<decltype(load), decltype(wire), true, false>(a, load, wire);
      return selectPackImpl<decltype(load), decltype(wire), false, false>(a, load, wire);
    });
  });
}

// Radix select on the magnitude keys: pass 1 histograms the top 16 bits of
// every finite key (computing v on the fly, no n-sized write), pass 2 copies
// only the keys of the bucket holding the k-th largest into `scratch`, and
// nth_element finishes inside that bucket. Two streaming reads instead of a
// copy plus nth_element over all n. The histogram gives the bucket's count,
// so `scratch` grows to that, not to n (a bucket is 1/128 of a binade: a few
// thousandths of a Gaussian buffer, all of it only when every key shares its
// top 16 bits).
ThresholdResult kthLargestMagnitudeRadix(const void* send, spcclDataType_t inType, const float* residual, size_t n,
                                         uint64_t k, std::vector<uint32_t>* scratchVector) {
  constexpr int kBuckets = 1 << 16;
  thread_local std::vector<uint32_t> hist(kBuckets);
  std::fill(hist.begin(), hist.end(), 0u);
  uint64_t finite = 0, zeros = 0;
  withLoader(send, inType, [&](auto load) {
    for (size_t i = 0; i < n; ++i) {
      const float v = vOf(load, residual, i);
      const uint32_t key = core::magnitudeKey(v);
      if (core::isNonFiniteKey(key)) continue;
      ++finite;
      zeros += key == 0;
      ++hist[key >> 16];
    }
  });
  ThresholdResult r{0, 0, finite};
  if (k == 0 || k > finite) {  // fewer finite entries than k: every non-zero one is selected
    r.above = finite - zeros;
    return r;
  }
  uint64_t higher = 0;  // finite entries in buckets above b
  int b = kBuckets - 1;
  for (; b > 0 && higher + hist[b] < k; --b) higher += hist[b];
  if (scratchVector->size() < hist[b]) scratchVector->resize(hist[b]);
  uint32_t* scratch = scratchVector->data();
  uint64_t m = 0;
  withLoader(send, inType, [&](auto load) {
    for (size_t i = 0; i < n; ++i) {
      const float v = vOf(load, residual, i);
      const uint32_t key = core::magnitudeKey(v);
      if (!core::isNonFiniteKey(key) && static_cast<int>(key >> 16) == b) scratch[m++] = key;
    }
  });
  const uint64_t rank = k - higher;  // 1-based rank of tau inside bucket b
  std::nth_element(scratch, scratch + (rank - 1), scratch + m, std::greater<uint32_t>());
  r.tauKey = scratch[rank - 1];
  r.above = higher + static_cast<uint64_t>(std::count_if(scratch, scratch + (rank - 1),
                                                         [&](uint32_t key) { return key > r.tauKey; }));
  return r;
}

namespace {

// Below this many elements the two radix passes are cheap; above it a
// sample of the keys bounds tau from below first.
constexpr size_t kSampledMinElements = size_t{1} << 16;

}  // namespace

size_t thresholdSampleCount(size_t n) { return n >= kSampledMinElements ? std::min<size_t>(16384, n / 16) : 0; }

size_t thresholdSamplePosition(size_t j, size_t samples, size_t n) {
  const uint64_t lo = static_cast<uint64_t>(j) * n / samples, hi = (static_cast<uint64_t>(j) + 1) * n / samples;
  uint64_t h = (static_cast<uint64_t>(j) + 1) * 0x9e3779b97f4a7c15ull;  // a fixed mix of j: the same every call
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<size_t>(lo + h % (hi - lo));
}

namespace {

// One pass instead of two, for large buffers: a sample of the keys (one
// pseudo-random element of each of `samples` strata: a regular stride could
// line up with rows of the buffer and see one column of them) gives a floor
// L that at least k finite keys reach with high probability
// (the sample's rank of the k-th largest, plus 4 standard deviations and 4);
// the pass counts NaN/Inf and zeros and collects every finite key >= L, and
// nth_element over those few finds tau. The result is the exact k-th largest
// either way: when the floor was too high (fewer than k collected), too low
// (more collected than the room allowed), or the sample could not place it,
// this returns false and the radix select runs instead. The pass reads v
// once and writes only the candidates, so it runs at about the rate of
// selectPack's pass, where the radix select's histogram increments do not.
bool sampledSelect(const void* send, spcclDataType_t inType, const float* residual, size_t n, uint64_t k,
                   std::vector<uint32_t>* scratchVector, ThresholdResult* out) {
  const size_t samples = thresholdSampleCount(n);
  thread_local std::vector<uint32_t> sample;
  sample.clear();
  withLoader(send, inType, [&](auto load) {
    for (size_t j = 0; j < samples; ++j) {
      const size_t i = thresholdSamplePosition(j, samples, n);
      const uint32_t key = core::magnitudeKey(vOf(load, residual, i));
      if (!core::isNonFiniteKey(key)) sample.push_back(key);
    }
  });
  const double q = static_cast<double>(k) * static_cast<double>(samples) / static_cast<double>(n);
  const double rankInSample = std::ceil(q + 4.0 * std::sqrt(q) + 4.0);
  if (rankInSample > static_cast<double>(sample.size())) return false;  // tau among the smallest keys
  const size_t rs = static_cast<size_t>(rankInSample);
  std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(rs - 1), sample.end(),
                   std::greater<uint32_t>());
  const uint32_t floorKey = sample[rs - 1];
  if (floorKey == 0) return false;  // the floor would collect every zero
  // Room for the keys the sample expects at or above the floor, twice over.
  const double expected = rankInSample * static_cast<double>(n) / static_cast<double>(samples);
  const size_t room = static_cast<size_t>(std::min<double>(static_cast<double>(n), 2.0 * expected + 4096.0));
  if (scratchVector->size() < room) scratchVector->resize(room);
  uint32_t* scratch = scratchVector->data();

  // Blocks of 16 keys with straight-line counts, the rare block holding a
  // key at or above the floor visited again one key at a time.
  uint64_t nonFinite = 0, zeros = 0, m = 0;
  bool overflow = false;
  withLoader(send, inType, [&](auto load) {
    constexpr size_t kBlock = 16;
    size_t i = 0;
    auto collect = [&](uint32_t key) {
      if (key < floorKey || core::isNonFiniteKey(key)) return;
      if (m == room) {
        overflow = true;
        return;
      }
      scratch[m++] = key;
    };
    for (; i + kBlock <= n && !overflow; i += kBlock) {
      uint32_t keys[kBlock];
      uint32_t nf = 0, z = 0, any = 0;
      for (size_t j = 0; j < kBlock; ++j) {
        keys[j] = core::magnitudeKey(vOf(load, residual, i + j));
        nf += keys[j] >= core::kInfKey;
        z += keys[j] == 0;
        any |= keys[j] >= floorKey;
      }
      nonFinite += nf;
      zeros += z;
      if (any)
        for (size_t j = 0; j < kBlock; ++j) collect(keys[j]);
    }
    for (; i < n && !overflow; ++i) {
      const uint32_t key = core::magnitudeKey(vOf(load, residual, i));
      nonFinite += key >= core::kInfKey;
      zeros += key == 0;
      collect(key);
    }
  });
  if (overflow) return false;  // the floor was far too low
  const uint64_t finite = n - nonFinite;
  ThresholdResult r{0, 0, finite};
  if (k > finite) {  // as the radix select: every non-zero finite entry is selected
    r.above = finite - zeros;
    *out = r;
    return true;
  }
  if (m < k) return false;  // the floor was too high: tau lies below it
  // Every finite key >= floor is here and at least k of them: the k-th
  // largest of these is the k-th largest of all.
  std::nth_element(scratch, scratch + (k - 1), scratch + m, std::greater<uint32_t>());
  r.tauKey = scratch[k - 1];
  r.above = static_cast<uint64_t>(std::count_if(scratch, scratch + (k - 1), [&](uint32_t key) {
    return key > r.tauKey;
  }));
  *out = r;
  return true;
}

}  // namespace

ThresholdResult kthLargestMagnitude(const void* send, spcclDataType_t inType, const float* residual, size_t n,
                                    uint64_t k, std::vector<uint32_t>* scratchVector) {
  ThresholdResult r;
  if (thresholdSampleCount(n) > 0 && k > 0 && sampledSelect(send, inType, residual, n, k, scratchVector, &r))
    return r;
  return kthLargestMagnitudeRadix(send, inType, residual, n, k, scratchVector);
}

ReselectResult reselectCandidates(const SelectArgs& a, uint64_t nnz, uint64_t k, uint64_t capacity,
                                  uint32_t* scratch) {
  return withLoader(a.send, a.inType, [&](auto load) {
    auto vAt = [&](uint32_t i) { return vOf(load, a.residualIn, i); };
    uint64_t m = 0;
    for (uint64_t j = 0; j < nnz; ++j) {
      const uint32_t key = core::magnitudeKey(vAt(a.indices[j]));
      if (!core::isNonFiniteKey(key)) scratch[m++] = key;
    }
    // Callers guarantee m > capacity >= k finite candidates.
    std::nth_element(scratch, scratch + (k - 1), scratch + m, std::greater<uint32_t>());
    const uint32_t tauKey = scratch[k - 1];
    const uint64_t above =
        static_cast<uint64_t>(std::count_if(scratch, scratch + (k - 1), [&](uint32_t key) { return key > tauKey; }));
    uint64_t ties = capacity > above ? capacity - above : 0;
    const uint32_t vb = core::wireValueBytes(a.wireType);
    auto* values = static_cast<unsigned char*>(a.values);
    uint64_t kept = 0;
    for (uint64_t j = 0; j < nnz; ++j) {
      const uint32_t i = a.indices[j];
      const float v = vAt(i);
      const Pick pick = core::classify(v, tauKey);
      bool take = pick == Pick::kAbove || pick == Pick::kNonFinite;
      if (pick == Pick::kTie && ties > 0) {
        --ties;
        take = true;
      }
      if (!take) {
        if (a.residualOut) a.residualOut[i] = v;
        continue;
      }
      if (kept != j) {
        a.indices[kept] = i;
        std::memmove(values + kept * vb, values + j * vb, vb);
      }
      ++kept;
    }
    return ReselectResult{kept, tauKey};
  });
}

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
        return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(load.p + i)),
                             _mm_set1_epi32(0x7fffffff));
      } else {
        const __m128i h = _mm_unpacklo_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(load.p + i)),
                                             _mm_setzero_si128());
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
  const uint32_t need = keep - higher, inCut = hist[cutBin];  // the cut bin's `need` best are kept
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
// AMD EPYC (Zen 4) it was faster for them (docs/PERF.md), vpcompressd being
// the likely cost there.
#define SPCCL_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt")))

bool avx512RowShape(uint32_t rowLen, uint32_t keep) { return keep >= 1 && keep <= 8 && rowLen % 16 == 0; }

template <class Load>
SPCCL_AVX512_TARGET inline __m512i rowKeys16(const Load& load, size_t i) {
  if constexpr (std::is_same_v<Load, LoadF32>) {
    return _mm512_and_si512(_mm512_loadu_si512(load.p + i), _mm512_set1_epi32(0x7fffffff));
  } else {
    const __m512i h = _mm512_and_si512(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(load.p + i))),
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
    const __mmask16 counted = _mm512_cmple_epi32_mask(atLeastCounts16(k, keys), _mm512_set1_epi32(static_cast<int>(keep)));
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
    const __m256i h = _mm256_and_si256(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(load.p + i))),
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
    for (uint32_t v = 0; v < kVectors; ++v) counts[v] = _mm256_add_epi32(counts[v], _mm256_cmpgt_epi32(lanes[v], value));
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
    floor = runs == 1 ? keepthLargest8<8>(maxima, lanes, keep)
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
    const __m256i order = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(&kLaneOrder8.lanes[bits])));
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
    const uint32_t floor = withLoader(
        row, type, [&](auto load) { return rowKeysAndFloor(load, rowLen, keep, keys, &nonFinite); });
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

void denseAccumulate(const void* values, ValueType vt, uint64_t len, float* dst, int scaleExp) {
  withWire(vt, [&](auto wire) {
    for (uint64_t i = 0; i < len; ++i) dst[i] += core::loadWireValue(values, i, decltype(wire)::value, scaleExp);
  });
}

uint32_t maxFiniteMagnitudeKey(const void* send, spcclDataType_t inType, const float* residual, size_t n) {
  return withLoader(send, inType, [&](auto load) {
    uint32_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t key = core::magnitudeKey(vOf(load, residual, i));
      if (!core::isNonFiniteKey(key) && key > best) best = key;
    }
    return best;
  });
}

void loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) {
  withLoader(src, type, [&](auto load) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i);
  });
}

void storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) {
  switch (type) {
    case spcclFloat16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = core::floatToHalfBits(src[i]);
      break;
    case spcclBfloat16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = core::floatToBfloat16Bits(src[i]);
      break;
    default:
      if (static_cast<const void*>(src) != dst) std::copy(src, src + n, static_cast<float*>(dst));
  }
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

}  // namespace spccl::host
