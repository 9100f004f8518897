// The exact k-th largest finite magnitude (kernels/cuda/threshold.cu's twin):
// a sampled floor and one pass where it serves, the radix select otherwise.
#include "kernels/host/host_kernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/host/host_common.h"

namespace spccl::host {

using core::Pick;
using core::ValueType;
using namespace detail;

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
  r.above = higher + static_cast<uint64_t>(
                         std::count_if(scratch, scratch + (rank - 1), [&](uint32_t key) { return key > r.tauKey; }));
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
  r.above =
      static_cast<uint64_t>(std::count_if(scratch, scratch + (k - 1), [&](uint32_t key) { return key > r.tauKey; }));
  *out = r;
  return true;
}

}  // namespace

ThresholdResult kthLargestMagnitude(const void* send, spcclDataType_t inType, const float* residual, size_t n,
                                    uint64_t k, std::vector<uint32_t>* scratchVector) {
  ThresholdResult r;
  if (thresholdSampleCount(n) > 0 && k > 0 && sampledSelect(send, inType, residual, n, k, scratchVector, &r)) return r;
  return kthLargestMagnitudeRadix(send, inType, residual, n, k, scratchVector);
}

}  // namespace spccl::host
