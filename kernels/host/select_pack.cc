// The fused select+pack pass, its re-selection from candidates, and the
// largest finite magnitude (the fp8 scale): kernels/cuda/select_pack.cu's twins.
#include "kernels/host/host_kernels.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/host/host_common.h"

namespace spccl::host {

using core::Pick;
using core::ValueType;
using namespace detail;

namespace {

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
// and which have magnitude key >= minKey (minKey >= 1, so the signed compare
// is exact): bit j of the returned mask for element j. No candidate (most
// blocks): the residual line is stored straight from the registers and 0 is
// returned. Otherwise v goes to v[] for the packing of the set bits.
template <bool kHasResidualIn, bool kHasResidualOut>
inline uint32_t candidatesF32(const float* send, const float* residual, float* out, uint32_t minKey, bool streaming,
                              float* v) {
  F4 x[4];
  uint32_t mask = 0;
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
    const I4 hit = (key & 0x7fffffff) >= bound;
#if defined(__SSE2__)
    __m128 bits;
    std::memcpy(&bits, &hit, sizeof bits);
    mask |= static_cast<uint32_t>(_mm_movemask_ps(bits)) << (4 * q);
#else
    for (size_t j = 0; j < 4; ++j) mask |= static_cast<uint32_t>(hit[j] != 0) << (4 * q + j);
#endif
  }
  if (mask == 0) {
    if constexpr (kHasResidualOut)
      for (size_t q = 0; q < 4; ++q) store4(out + 4 * q, x[q], streaming);
    return 0;
  }
  std::memcpy(v, x, sizeof x);
  return mask;
}

// The fused pass in blocks of 16: the first loop over a block (v, and which
// elements are candidates) has no data-dependent branch and vectorises; the
// rare blocks holding a candidate (|v| >= tau, or NaN/Inf) pack their
// candidates in index order, walking the block's mask. The block's new residual is assembled in
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
  const float bound = a.wireBound > 0.0f ? a.wireBound : a.inType == spcclFloat16 ? core::kHalfMax : __builtin_inff();
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
    uint32_t mask = 0;
    if constexpr (std::is_same_v<Load, LoadF32>) {
      mask = candidatesF32<kHasResidualIn, kHasResidualOut>(load.p + i, kHasResidualIn ? a.residualIn + i : nullptr,
                                                            kHasResidualOut ? a.residualOut + i : nullptr, minKey,
                                                            streaming, v);
      if (mask == 0) continue;
    } else {
      for (size_t j = 0; j < kBlock; ++j) {
        v[j] = vAt(i + j);
        mask |= static_cast<uint32_t>(core::magnitudeKey(v[j]) >= minKey) << j;
      }
      if (mask == 0) {
        if constexpr (kHasResidualOut) storeBlock(i, v);
        continue;
      }
    }
    std::memcpy(res, v, sizeof v);
    for (; mask != 0; mask &= mask - 1) {
      const size_t j = static_cast<size_t>(__builtin_ctz(mask));
      pack(i + j, v[j], &res[j]);
    }
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
      if (a.residualIn && a.residualOut)
        return selectPackImpl<decltype(load), decltype(wire), true, true>(a, load, wire);
      if (a.residualOut) return selectPackImpl<decltype(load), decltype(wire), false, true>(a, load, wire);
      if (a.residualIn) return selectPackImpl<decltype(load), decltype(wire), true, false>(a, load, wire);
      return selectPackImpl<decltype(load), decltype(wire), false, false>(a, load, wire);
    });
  });
}

void gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base, uint32_t* out) {
  for (uint64_t j = 0; j < n; ++j) out[j] = base + indices[positions[j]];
}

ReselectResult reselectCandidates(const SelectArgs& a, uint64_t nnz, uint64_t k, uint64_t capacity, uint32_t* scratch) {
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

}  // namespace spccl::host
