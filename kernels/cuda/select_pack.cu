// Fused threshold-select-and-pack: one launch, one read of send and
// residual, one write of the residual and of the packed pairs.
//
// Pairs must land in index order whatever order the tiles run in, so the
// write position of a selected element is a global prefix count. Tiles take
// ids in the order they start (an atomic counter, so every predecessor of a
// running tile is running or done) and resolve their prefix with a
// decoupled look-back: each tile publishes its own counts as soon as it has
// them, then its inclusive prefix once known; a successor sums the
// predecessors' published counts back to the first inclusive one.
//
// Ties at tau are taken lowest index first up to a budget. The position of a
// selected element is (non-tie selected before it) + min(ties before it,
// budget), so the scan carries two plain counts and the budget is applied
// afterwards: no sequential dependence between tiles beyond the two sums.
//
// The workspace needs no clearing between calls: each status word carries
// the pass's generation number, and the last block to finish bumps the
// generation and resets the tile counters, so one launch is the whole pass.
#include <cub/block/block_scan.cuh>
#include <cuda/atomic>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/select_pack_layout.h"

namespace spccl::cuda {

namespace {

using core::Pick;
using detail::Bf16In;
using detail::F16In;
using detail::F32In;

constexpr int kThreads = 256;
constexpr int kItems = 16;  // elements per thread per tile
constexpr uint64_t kTile = static_cast<uint64_t>(kThreads) * kItems;
static_assert(2 * kItems <= 32, "a thread's picks (2 bits an element) live in one uint32_t");

constexpr unsigned long long kStateAggregate = 1;
constexpr unsigned long long kStateInclusive = 2;

// a: selected regardless of the budget (|v| > tau, or NaN/Inf); t: ties at
// tau; nf: NaN/Inf (only needed for the final finite count).
struct Counts {
  unsigned long long a, t, nf;
};
__device__ __forceinline__ Counts operator+(const Counts& x, const Counts& y) {
  return {x.a + y.a, x.t + y.t, x.nf + y.nf};
}

// Per-thread counts of each load round, one 16-bit field per round (a
// round's block-wide count is at most kThreads * 8 < 2^16).
struct RoundCounts {
  unsigned long long a, t;
};
struct RoundCountsSum {
  __device__ __forceinline__ RoundCounts operator()(const RoundCounts& x, const RoundCounts& y) const {
    return {x.a + y.a, x.t + y.t};
  }
};
__device__ __forceinline__ unsigned long long field(unsigned long long packed, int r) {
  return (packed >> (16 * r)) & 0xffffu;
}

// No candidate among this thread's kVec elements of load round r.
template <int kVec>
__device__ __forceinline__ bool roundQuiet(uint32_t picks, int r) {
  constexpr uint32_t kMask = kVec * 2 >= 32 ? 0xffffffffu : (1u << (2 * kVec)) - 1u;
  return ((picks >> (2 * r * kVec)) & kMask) == 0u;
}

struct alignas(64) SelectState {
  unsigned long long generation;
  unsigned int tileCounter;
  unsigned int doneCounter;
  unsigned int maxFiniteKey;  // fp8: the pass's running maximum, reset by its last block
};

static_assert(sizeof(SelectState) <= kSelectStateBytes, "select_pack_layout.h: the pass state");
static_assert(sizeof(unsigned long long) == kSelectTileFlagBytes, "select_pack_layout.h: a tile's flag");
static_assert(sizeof(Counts) == kSelectTileCountsBytes, "select_pack_layout.h: a tile's counts");

struct Params {
  const void* send;
  const float* residualIn;
  float* residualOut;
  uint64_t n;
  uint32_t tauKey;
  uint64_t tieBudget;
  const ThresholdOut* threshold;
  uint64_t tieCapacity;
  uint64_t capacity;
  bool keepOverflow;
  int scaleExp;  // fp8 wire
  uint32_t* indices;
  void* values;
  SelectCounts* result;
  uint32_t* maxFiniteKey;  // fp8 wire, optional
  SelectState* state;
  unsigned long long* status;
  Counts* agg;
  Counts* incl;
  unsigned numTiles;
  bool vec;  // send and residuals 16-byte aligned: vector loads and stores on full tiles
  // |value sent| <= this for finite values: an fp16 input's largest finite
  // value (a bf16 wire rounds 65504 to 65536, which the fp16 output would
  // receive as Inf; the residual keeps the excess), else +Inf. The host's
  // fused pass applies the same bound (kernels/host/host_kernels.cc).
  float wireBound;
};

using DeviceU64 = ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>;

__device__ __forceinline__ Counts loadCounts(const Counts* c) {
  const volatile Counts* v = c;
  return {v->a, v->t, v->nf};
}

__device__ __forceinline__ unsigned long long warpSum(unsigned long long x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Run by all 32 lanes of warp 0: the counts of tiles [0, tile). Lane l
// inspects tile (window - l), so a warp covers 32 predecessors per step.
__device__ Counts lookBack(const Params& p, unsigned tile, unsigned long long generation) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  Counts prefix{0, 0, 0};
  long long window = static_cast<long long>(tile) - 1;
  for (;;) {
    const long long idx = window - lane;
    unsigned long long state = kStateInclusive;  // before tile 0: nothing
    if (idx >= 0) {
      DeviceU64 word(p.status[idx]);
      unsigned long long w = word.load(::cuda::memory_order_acquire);
      unsigned sleep = 8;
      // A word of an older generation is a previous pass's: not ready yet.
      while ((w >> 2) != generation || (w & 3u) == 0) {
        __nanosleep(sleep);
        if (sleep < 256) sleep *= 2;
        w = word.load(::cuda::memory_order_acquire);
      }
      state = w & 3u;
    }
    const unsigned inclusive = __ballot_sync(0xffffffffu, state == kStateInclusive);
    const int stop = inclusive ? __ffs(static_cast<int>(inclusive)) - 1 : 31;
    Counts c{0, 0, 0};
    if (idx >= 0 && lane <= stop) c = loadCounts(state == kStateInclusive ? p.incl + idx : p.agg + idx);
    prefix.a += warpSum(c.a);
    prefix.t += warpSum(c.t);
    prefix.nf += warpSum(c.nf);
    if (inclusive) return prefix;
    window -= 32;
  }
}

// One load round's residual: vector stores on full tiles, guarded scalar
// stores on the last.
template <int kVec>
__device__ __forceinline__ void storeResidualRound(const Params& p, bool full, uint64_t e0, const float (&res)[kVec]) {
  if (full) {
    detail::storeF32<kVec, true>(p.residualOut + e0, res);
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      if (e0 + j < p.n) p.residualOut[e0 + j] = res[j];
  }
}

// kEarly (SelectArgs::storeEarly): warps 1-7 store the residual (= v) of
// their load rounds without a candidate while warp 0 publishes the tile's
// counts and looks back, instead of every warp waiting at the barrier with
// all its stores still to issue; warp 0 and the rounds with a candidate
// store after the barrier as before. Same bits either way, only the order of
// the stores changes (every element was loaded before any store, so an
// in-place residual is safe).
template <class In, core::ValueType kWire, bool kEarly>
__global__ void __launch_bounds__(kThreads, 3) selectPackKernel(const Params p) {
  using Raw = typename In::Raw;
  constexpr int kVec = In::kVec;
  constexpr int kRounds = kItems / kVec;
  using Scan = cub::BlockScan<RoundCounts, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage scanTemp;
  __shared__ unsigned sTile;
  __shared__ unsigned long long sGeneration;
  __shared__ unsigned sNonFinite;
  __shared__ Counts sPrefix;

  if (threadIdx.x == 0) {
    sTile = atomicAdd(&p.state->tileCounter, 1u);
    sGeneration = DeviceU64(p.state->generation).load(::cuda::memory_order_relaxed);
    sNonFinite = 0;
  }
  uint32_t tauKey = p.tauKey;
  uint64_t budget = p.tieBudget;
  if (p.threshold != nullptr) {
    tauKey = p.threshold->tauKey;
    const uint64_t above = p.threshold->above;
    budget = p.tieCapacity > above ? p.tieCapacity - above : 0;
  }
  __syncthreads();
  const unsigned tile = sTile;
  const unsigned long long generation = sGeneration;
  const uint64_t base = static_cast<uint64_t>(tile) * kTile;
  const bool full = p.vec && base + kTile <= p.n;
  const Raw* send = static_cast<const Raw*>(p.send);

  // v in registers for the whole tile; picks 2 bits each.
  float v[kItems];
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t e0 = base + (static_cast<uint64_t>(r) * kThreads + threadIdx.x) * kVec;
    float x[kVec];
    if (full) {
      detail::load16<In, true>(send + e0, x);
      if (p.residualIn != nullptr) {
        float res[kVec];
        detail::loadF32<kVec, true>(p.residualIn + e0, res);
#pragma unroll
        for (int j = 0; j < kVec; ++j) x[j] += res[j];
      }
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        x[j] = 0.0f;  // past the end: key 0, never selected
        if (e0 + j < p.n) {
          x[j] = In::convert(send[e0 + j]);
          if (p.residualIn != nullptr) x[j] += p.residualIn[e0 + j];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) v[r * kVec + j] = x[j];
  }

  uint32_t picks = 0;
  RoundCounts mine{0, 0};
  unsigned nonFinite = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    unsigned a = 0, t = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      const Pick pick = core::classify(v[r * kVec + j], tauKey);
      picks |= static_cast<uint32_t>(pick) << (2 * (r * kVec + j));
      a += pick == Pick::kAbove || pick == Pick::kNonFinite;
      t += pick == Pick::kTie;
      nonFinite += pick == Pick::kNonFinite;
    }
    mine.a |= static_cast<unsigned long long>(a) << (16 * r);
    mine.t |= static_cast<unsigned long long>(t) << (16 * r);
  }
  const unsigned warpNonFinite = detail::warpSumFull(nonFinite);
  if ((threadIdx.x & 31u) == 0 && warpNonFinite != 0) atomicAdd(&sNonFinite, warpNonFinite);

  RoundCounts before, total;
  Scan(scanTemp).ExclusiveScan(mine, before, RoundCounts{0, 0}, RoundCountsSum{}, total);
  __syncthreads();  // sNonFinite complete

  if (threadIdx.x < 32) {
    Counts tileCounts{0, 0, sNonFinite};
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      tileCounts.a += field(total.a, r);
      tileCounts.t += field(total.t, r);
    }
    Counts prefix{0, 0, 0};
    const bool lead = threadIdx.x == 0;
    if (tile == 0) {
      if (lead) {
        p.incl[0] = tileCounts;
        DeviceU64(p.status[0]).store((generation << 2) | kStateInclusive, ::cuda::memory_order_release);
      }
    } else {
      if (lead) {
        p.agg[tile] = tileCounts;
        DeviceU64(p.status[tile]).store((generation << 2) | kStateAggregate, ::cuda::memory_order_release);
      }
      prefix = lookBack(p, tile, generation);
      if (lead) {
        p.incl[tile] = prefix + tileCounts;
        DeviceU64(p.status[tile]).store((generation << 2) | kStateInclusive, ::cuda::memory_order_release);
      }
    }
    if (lead) sPrefix = prefix;
  } else if constexpr (kEarly) {
    // Warps 1-7 store their candidate-free rounds while warp 0 looks back.
    if (p.residualOut != nullptr) {
#pragma unroll
      for (int r = 0; r < kRounds; ++r) {
        if (!roundQuiet<kVec>(picks, r)) continue;
        float x[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) x[j] = v[r * kVec + j];
        storeResidualRound<kVec>(p, full, base + (static_cast<uint64_t>(r) * kThreads + threadIdx.x) * kVec, x);
      }
    }
  }
  __syncthreads();
  const bool storedEarly = kEarly && threadIdx.x >= 32;  // the quiet rounds, above

  // Every element's residual defaults to v; the candidates (rare) are
  // visited through a bit mask, so the packing code exists once per round
  // instead of once per element, and v stays in registers (the value of a
  // candidate is picked out with an unrolled select, not a run-time index).
  const Counts prefix = sPrefix;
  uint64_t roundA = prefix.a, roundT = prefix.t;  // counts before round r of this tile
  uint32_t maxKey = 0;                            // fp8: the largest finite |v| this thread selects
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t e0 = base + (static_cast<uint64_t>(r) * kThreads + threadIdx.x) * kVec;
    uint64_t a = roundA + field(before.a, r);
    uint64_t t = roundT + field(before.t, r);
    float res[kVec];
    uint32_t live = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
      res[j] = v[r * kVec + j];
      live |= static_cast<uint32_t>(((picks >> (2 * (r * kVec + j))) & 3u) != 0u) << j;
    }
    while (live != 0) {
      const int jj = __ffs(static_cast<int>(live)) - 1;
      live &= live - 1;
      float x = 0.0f;
#pragma unroll
      for (int q = 0; q < kVec; ++q)
        if (q == jj) x = v[r * kVec + q];
      const Pick pick = static_cast<Pick>((picks >> (2 * (r * kVec + jj))) & 3u);
      const uint64_t pos = a + (t < budget ? t : budget);
      bool take = true;
      if (pick == Pick::kTie) {
        take = t < budget;
        ++t;
      } else {
        ++a;
      }
      if (!take) continue;  // a tie past the budget: all of v stays behind
      if constexpr (kWire == core::ValueType::kFloat8e4m3) {
        const uint32_t key = core::magnitudeKey(x);
        if (pick != Pick::kNonFinite && key > maxKey) maxKey = key;
      }
      float sent;
      if (pos < p.capacity) {
        p.indices[pos] = static_cast<uint32_t>(e0 + jj);
        sent = core::storeWireValueBounded(p.values, pos, x, kWire, p.scaleExp, p.wireBound);
      } else if (p.keepOverflow) {
        continue;  // counted, not sent: all of v stays in the residual
      } else {
        sent = core::roundToWireBounded(x, kWire, p.scaleExp, p.wireBound);
      }
      // A sent NaN/Inf leaves nothing behind: v - v would poison the residual.
      const float out = pick == Pick::kNonFinite ? 0.0f : x - sent;
#pragma unroll
      for (int q = 0; q < kVec; ++q)
        if (q == jj) res[q] = out;
    }
    if (p.residualOut != nullptr && !(storedEarly && roundQuiet<kVec>(picks, r)))
      storeResidualRound<kVec>(p, full, e0, res);
    roundA += field(total.a, r);
    roundT += field(total.t, r);
  }

  if constexpr (kWire == core::ValueType::kFloat8e4m3) {
    // Candidates are rare: one atomic a warp that has one.
    const uint32_t warpMax = detail::warpMaxFull(maxKey);
    if ((threadIdx.x & 31u) == 0 && warpMax != 0) atomicMax(&p.state->maxFiniteKey, warpMax);
  }

  // The last block to finish writes the totals and readies the workspace
  // for the next pass.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> done(p.state->doneCounter);
    if (done.fetch_add(1u, ::cuda::memory_order_acq_rel) == p.numTiles - 1) {
      __threadfence();
      const Counts all = loadCounts(p.incl + (p.numTiles - 1));
      const uint64_t selected = all.a + (all.t < budget ? all.t : budget);
      p.result->selected = selected;
      p.result->finiteSelected = selected - all.nf;
      if constexpr (kWire == core::ValueType::kFloat8e4m3) {
        ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> passMax(p.state->maxFiniteKey);
        if (p.maxFiniteKey != nullptr) *p.maxFiniteKey = passMax.load(::cuda::memory_order_relaxed);
        passMax.store(0u, ::cuda::memory_order_relaxed);
      }
      p.state->tileCounter = 0;
      p.state->doneCounter = 0;
      DeviceU64(p.state->generation).store(generation + 1, ::cuda::memory_order_relaxed);
    }
  }
}

__global__ void gatherIndicesKernel(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base,
                                    uint32_t* out) {
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    out[j] = base + indices[positions[j]];
}

}  // namespace

Status gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base, uint32_t* out,
                     cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (indices == nullptr || positions == nullptr || out == nullptr)
    return invalidArgument("gatherIndices: null buffer");
  gatherIndicesKernel<<<detail::gridFor(n, kThreads), kThreads, 0, stream>>>(indices, positions, n, base, out);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

size_t selectPackWorkspaceBytes(size_t n) {
  const uint64_t tiles = (static_cast<uint64_t>(n) + kTile - 1) / kTile;
  return selectPackLayoutForTiles(tiles > 0 ? tiles : 1).total;
}

Status initSelectPackWorkspace(void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  if (workspace == nullptr || workspaceBytes < selectPackLayoutForTiles(1).total)
    return invalidArgument("selectPack workspace: null or too small");
  SPCCL_CUDA_CHECK(cudaMemsetAsync(workspace, 0, workspaceBytes, stream));
  return Status::ok();
}

Status selectPack(const SelectArgs& a, void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  const bool fp8 = a.wireType == core::ValueType::kFloat8e4m3;
  if (!detail::isFloatInput(a.inType) || !(detail::isWireType(a.wireType) || fp8))
    return invalidArgument("selectPack: input must be fp32/fp16/bf16 and the wire type fp32/fp16/bf16/fp8");
  if (a.result == nullptr || (a.send == nullptr && a.n > 0) || (a.capacity > 0 && (!a.indices || !a.values)))
    return invalidArgument("selectPack: null buffer");
  if (static_cast<uint64_t>(a.n) > (uint64_t{1} << 32))
    return invalidArgument("selectPack: more than 2^32 elements (indices are uint32)");
  if (a.n == 0) {
    SPCCL_CUDA_CHECK(cudaMemsetAsync(a.result, 0, sizeof(SelectCounts), stream));
    if (fp8 && a.maxFiniteKey != nullptr)
      SPCCL_CUDA_CHECK(cudaMemsetAsync(a.maxFiniteKey, 0, sizeof(uint32_t), stream));
    return Status::ok();
  }
  const uint64_t tiles = (static_cast<uint64_t>(a.n) + kTile - 1) / kTile;
  const SelectPackLayout l = selectPackLayoutForBytes(workspaceBytes);
  if (workspace == nullptr || l.tiles < tiles)
    return invalidArgument("selectPack: workspace smaller than selectPackWorkspaceBytes(n)");
  auto* ws = static_cast<unsigned char*>(workspace);
  Params p{a.send,
           a.residualIn,
           a.residualOut,
           a.n,
           a.tauKey,
           a.tieBudget,
           a.threshold,
           a.tieCapacity,
           a.capacity,
           a.keepOverflow,
           a.scaleExp,
           a.indices,
           a.values,
           a.result,
           a.maxFiniteKey,
           reinterpret_cast<SelectState*>(ws),
           reinterpret_cast<unsigned long long*>(ws + l.status),
           reinterpret_cast<Counts*>(ws + l.agg),
           reinterpret_cast<Counts*>(ws + l.incl),
           static_cast<unsigned>(tiles),
           detail::aligned16(a.send) && (a.residualIn == nullptr || detail::aligned16(a.residualIn)) &&
               (a.residualOut == nullptr || detail::aligned16(a.residualOut)),
           a.wireBound > 0.0f         ? a.wireBound
           : a.inType == spcclFloat16 ? core::kHalfMax
                                      : __builtin_inff()};
  detail::withLoader(a.inType, [&](auto in) {
    auto launch = [&](auto wire) {
      if (a.storeEarly)
        selectPackKernel<decltype(in), decltype(wire)::value, true>
            <<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p);
      else
        selectPackKernel<decltype(in), decltype(wire)::value, false>
            <<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(p);
    };
    if (fp8) launch(detail::WireTag<core::ValueType::kFloat8e4m3>{});
    else detail::withWire(a.wireType, launch);
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace spccl::cuda
