#include "src/tuner.h"

#include <algorithm>
#include <cmath>

#include "include/spccl.h"
#include "src/codec.h"
#include "src/params.h"

namespace spccl {

namespace {

constexpr double kHeader = sizeof(StreamHeader);
constexpr double kSizeWord = 8;  // one uint64 size per peer

double log2Rounds(int p) { return p > 1 ? std::ceil(std::log2(static_cast<double>(p))) : 0; }

// Expected pairs per owner range when ranks select independently:
// a position survives the merge if any of the P ranks selected it.
double mergedPerRange(const CostInputs& in) {
  if (in.mergedPerRange >= 0) return in.mergedPerRange;
  const double n = static_cast<double>(in.count), p = in.ranks;
  const double d = std::min(1.0, static_cast<double>(in.k) / std::max(1.0, n));
  return n / p * (1.0 - std::pow(1.0 - d, p));
}

double rounds(int algorithm, int p) {
  if (p <= 1) return 0;
  switch (algorithm) {
    case SPCCL_ALGO_DENSE:
      return 2.0 * (p - 1) + log2Rounds(p);  // ring allreduce + the call descriptor
    case SPCCL_ALGO_ALLGATHER:
      return (p - 1) + log2Rounds(p);
    default:
      return 2.0 * (p - 1) + 3 * log2Rounds(p);
  }
}

}  // namespace

double modelBytes(int algorithm, const CostInputs& in) {
  const double p = in.ranks;
  if (in.ranks <= 1) return 0;
  const double pair = 4.0 + in.wireBytes, k = static_cast<double>(in.k), n = static_cast<double>(in.count);
  const double desc = (p - 1) * static_cast<double>(sizeof(CallDescriptor));
  switch (algorithm) {
    case SPCCL_ALGO_DENSE:
      return desc + 2.0 * (p - 1) / p * n * in.elemBytes;
    case SPCCL_ALGO_ALLGATHER:
      return desc + (p - 1) * (kHeader + k * pair);
    default: {
      const double stage1 = (p - 1) / p * k * pair + (p - 1) * (kHeader + kSizeWord);
      const double range = std::min(mergedPerRange(in) * pair, n / p * in.wireBytes);
      return desc + stage1 + (p - 1) * (kSizeWord + kHeader + range);
    }
  }
}

double modelSeconds(int algorithm, const CostInputs& in, const CostModel& m) {
  return rounds(algorithm, in.ranks) * m.alpha + modelBytes(algorithm, in) * m.beta;
}

int chooseAlgorithm(const CostInputs& in, const CostModel& m) {
  int best = SPCCL_ALGO_ALLGATHER;
  for (int a : {SPCCL_ALGO_SPLIT, SPCCL_ALGO_DENSE})
    if (modelSeconds(a, in, m) < modelSeconds(best, in, m)) best = a;
  return best;
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
