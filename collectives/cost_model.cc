// The cost model: what each algorithm costs one rank (collectives/cost_model.h).
#include "collectives/cost_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "codec/codec.h"
#include "collectives/algorithms.h"
#include "collectives/other_collectives.h"
#include "include/spccl.h"
#include "kernels/host/sections.h"

namespace spccl {

namespace {

constexpr double kHeader = sizeof(StreamHeader);
constexpr double kSizeWord = 8;  // one uint64 size per peer

// Expected pairs an owner sends for its range: when ranks select
// independently a position survives the merge if any of the P ranks
// selected it; re-selection caps that at keepPerRange. A measured value
// (the previous split call's) is already after re-selection.
// Compare-bound steps, in bytes-equivalent of the calibrated memory rates,
// fitted to profiles on the development machine (docs/ALGORITHMS.md): each
// selected entry's classification and packing in selectPack (a branch taken
// at random, then scalar stores), and each merged entry of a re-selecting
// split owner (key, nth_element, drop pass).
constexpr double kPickBytes = 256;
constexpr double kReselectBytes = 384;
// Received pairs, per pair beyond its own bytes (host::reduceSections,
// host_kernel_bench's unpack rows at densities 0.0001-0.05):
// the blocked pass decodes and adds each in the first-level cache; below
// one pair in kScatterBelow elements each lands on a line memset has left
// in memory, a read-modify-write that waits on the miss.
constexpr double kBlockedPairBytes = 40;
constexpr double kScatteredPairBytes = 320;

double mergedBeforeReselection(const CostInputs& in) {
  const double n = static_cast<double>(in.count), p = in.ranks;
  const double d = std::min(1.0, static_cast<double>(in.k) / std::max(1.0, n));
  return n / p * (1.0 - std::pow(1.0 - d, p));
}

double mergedPerRange(const CostInputs& in) {
  if (in.mergedPerRange >= 0) return in.mergedPerRange;
  const double merged = mergedBeforeReselection(in);
  return in.keepPerRange > 0 ? std::min(merged, in.keepPerRange) : merged;
}

}  // namespace

double log2Rounds(int p) { return p > 1 ? std::ceil(std::log2(static_cast<double>(p))) : 0; }

double indexBytesPerPair(int indexEncoding, double len, double nnz) {
  if (nnz <= 0) return 4.0;
  const double coo = 4.0, bitmap = len / 8.0 / nnz;
  double delta = 1.0;  // LEB128: 7 bits of the gap per byte
  for (double gap = len / nnz; gap >= 128.0 && delta < 5.0; gap /= 128.0) delta += 1.0;
  switch (indexEncoding) {
    case kIndexEncodingCoo:
      return coo;
    case kIndexEncodingDelta:
      return delta;
    case kIndexEncodingBitmap:
      return bitmap;
    default:
      return std::min({coo, delta, bitmap});
  }
}

double selectPassBytes(double n, double elemBytes, double k) {
  const double d = std::min(1.0, k / std::max(1.0, n));
  return n * (elemBytes + 8.0) + 64.0 * (n / 16.0) * (1.0 - std::pow(1.0 - d, 16.0)) + kPickBytes * k;
}

double reduceBytes(double pairs, double span, double pairBytes) {
  if (pairs * static_cast<double>(host::kScatterBelow) < span)
    return 2.0 * span + pairs * (pairBytes + kScatteredPairBytes);
  return 4.0 * span + pairs * (pairBytes + kBlockedPairBytes);
}

namespace {

// A pair: its index in the stream's encoding plus the wire value. The
// allgather stream and the split pieces spread k pairs over the range they
// cover; the owners' merged ranges spread theirs over n / p.
double pairBytes(const CostInputs& in) {
  return indexBytesPerPair(in.indexEncoding, static_cast<double>(in.count), static_cast<double>(in.k)) + in.wireBytes;
}

double descriptorBytes(const CostInputs& in) { return (in.ranks - 1) * static_cast<double>(sizeof(CallDescriptor)); }

}  // namespace

// Local work. Dense, in steady state (a dense call after a dense call: the
// residual is already empty and the input goes out as it is): the
// reduce-scatter's additions, and for 16-bit inputs their conversion to
// fp32 (read e, write 4). The one pass of v = send + residual that a dense
// call right after a compressed one makes is not charged: auto weighs what
// an algorithm costs call after call. Sparse: the fused pass (selectPassBytes);
// every rank sums what it receives into its zeroed output (reduceBytes).
CostTerms costDense(const CostInputs& in) {
  CostTerms t;
  const double p = in.ranks, n = static_cast<double>(in.count);
  t.rounds = in.ranks > 1 ? 2.0 * (p - 1) + log2Rounds(in.ranks) : 0;  // ring allreduce + the call descriptor
  t.unpackBytes = (in.elemBytes == 4 ? 0.0 : n * (in.elemBytes + 4.0)) + (in.ranks > 1 ? (p - 1) / p * n * 4.0 : 0);
  if (in.ranks > 1) t.wireBytes = descriptorBytes(in) + 2.0 * (p - 1) / p * n * in.elemBytes;
  return t;
}

CostTerms costAllgather(const CostInputs& in) {
  CostTerms t;
  const double p = in.ranks, k = static_cast<double>(in.k), n = static_cast<double>(in.count);
  t.rounds = in.ranks > 1 ? (p - 1) + log2Rounds(in.ranks) : 0;
  t.selectBytes = selectPassBytes(n, in.elemBytes, k);
  t.unpackBytes = reduceBytes(p * k, n, pairBytes(in));
  if (in.ranks > 1) t.wireBytes = descriptorBytes(in) + (p - 1) * (kHeader + k * pairBytes(in));
  return t;
}

CostTerms costSplit(const CostInputs& in) {
  CostTerms t;
  const double p = in.ranks, k = static_cast<double>(in.k), n = static_cast<double>(in.count);
  const double pair = pairBytes(in);
  const double mergedPair = indexBytesPerPair(in.indexEncoding, n / p, mergedPerRange(in)) + in.wireBytes;
  t.rounds = in.ranks > 1 ? 2.0 * (p - 1) + 3 * log2Rounds(in.ranks) : 0;
  t.selectBytes = selectPassBytes(n, in.elemBytes, k);
  // Owners sum ~k pairs into their range, scan it for the nonzeros (4 n/P)
  // and, re-selecting, sort out the merged entries beyond the budget (a
  // 64-bit key each, nth_element, a pass in index order: kReselectBytes
  // an entry); then every rank stores the P ranges, each as pairs or,
  // where that is smaller, dense (memset, then a pass adding the values).
  const double range = n / p, sent = mergedPerRange(in), merged = mergedBeforeReselection(in);
  const double reselect = in.keepPerRange > 0 && merged > in.keepPerRange ? kReselectBytes * merged : 0.0;
  t.unpackBytes = reduceBytes(k, range, pair) + 4.0 * range + reselect +
                  p * std::min(reduceBytes(sent, range, mergedPair), range * (in.wireBytes + 10.0));
  if (in.ranks > 1) {
    const double stage1 = (p - 1) / p * k * pair + (p - 1) * (kHeader + kSizeWord);
    const double owned = std::min(mergedPerRange(in) * mergedPair, n / p * in.wireBytes);
    t.wireBytes = descriptorBytes(in) + stage1 + (p - 1) * (kSizeWord + kHeader + owned);
  }
  return t;
}

CostTerms modelTerms(int algorithm, const CostInputs& in) {
  const AllreduceAlgorithm* a = findAllreduceAlgorithm(algorithm);
  return a != nullptr ? a->cost(in) : CostTerms{};
}

double modelBytes(int algorithm, const CostInputs& in) { return modelTerms(algorithm, in).wireBytes; }

double modelSeconds(int algorithm, const CostInputs& in, const CostModel& m) {
  const CostTerms t = modelTerms(algorithm, in);
  return t.rounds * m.alpha + t.wireBytes * m.beta + t.selectBytes * m.gammaSelect + t.unpackBytes * m.gammaUnpack;
}

int chooseAlgorithm(const CostInputs& in, const CostModel& m) {
  const AllreduceAlgorithm* best = nullptr;
  double bestSeconds = 0;
  for (const AllreduceAlgorithm& a : allreduceAlgorithms()) {
    if (!a.supports(AllreduceRequest{in.onDevice})) continue;
    const double seconds = modelSeconds(a.id, in, m);
    if (best == nullptr || seconds < bestSeconds || (seconds == bestSeconds && a.tieOrder < best->tieOrder))
      best = &a, bestSeconds = seconds;
  }
  return best->id;
}

std::string explainChoice(const CostInputs& in, const CostModel& m) {
  std::string out =
      formatString("auto: P=%d n=%llu k=%llu wire %uB:", in.ranks, static_cast<unsigned long long>(in.count),
                   static_cast<unsigned long long>(in.k), in.wireBytes);
  for (const AllreduceAlgorithm& row : allreduceAlgorithms()) {
    const int a = row.id;
    const CostTerms t = row.cost(in);
    out +=
        formatString(" %s %.4g ms (latency %.3g + wire %.3g [%.4g MB] + select %.3g + unpack %.3g);", algorithmName(a),
                     1e3 * modelSeconds(a, in, m), 1e3 * t.rounds * m.alpha, 1e3 * t.wireBytes * m.beta,
                     t.wireBytes / 1e6, 1e3 * t.selectBytes * m.gammaSelect, 1e3 * t.unpackBytes * m.gammaUnpack);
  }
  return out + " -> " + algorithmName(chooseAlgorithm(in, m));
}

std::string describeCostModel(const CostModel& m) {
  auto rate = [](double secondsPerByte) { return secondsPerByte > 0 ? 1e-9 / secondsPerByte : 0.0; };
  return formatString(
      "latency %.3g us per round, wire %.4g GB/s (%.4g Gbit/s), selection %.4g GB/s, unpack %.4g GB/s "
      "(0 = not modelled)",
      m.alpha * 1e6, rate(m.beta), 8 * rate(m.beta), rate(m.gammaSelect), rate(m.gammaUnpack));
}

int chooseRowSparseAlgorithm(int ranks, uint64_t sumUnique, uint64_t rowLen, uint32_t valueBytes, double overlap,
                             const CostModel& m) {
  if (ranks <= 2) return kRowSparseAllgather;
  const double p = ranks, u = static_cast<double>(sumUnique) / p;
  const double row = 8.0 + static_cast<double>(rowLen) * valueBytes, ov = overlap > 0 ? overlap : 1.0;
  const double allgather = (p - 1) * u * row * m.beta + (p - 1) * m.alpha;
  const double partition = ((p - 1) / p * u + (p - 1) * u / ov) * row * m.beta + 2 * (p - 1) * m.alpha;
  return partition < allgather ? kRowSparsePartition : kRowSparseAllgather;
}

}  // namespace spccl
