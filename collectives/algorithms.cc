#include "collectives/algorithms.h"

#include "include/spccl.h"
#include "codec/codec.h"

namespace spccl {

namespace {
constexpr AlgorithmInfo kAlgorithms[] = {
    {SPCCL_ALGO_AUTO, "auto", "chosen per call by the cost model (docs/ALGORITHMS.md)"},
    {SPCCL_ALGO_DENSE, "dense", "exact allreduce of v = input + residual; the residual is emptied"},
    {SPCCL_ALGO_ALLGATHER, "allgather",
     "every rank's packed stream is allgathered; each rank unpacks all streams in rank order"},
    {SPCCL_ALGO_SPLIT, "split",
     "pairs go to the owner of their index range (alltoallv); owners sum; each owner's range is "
     "allgathered as pairs or dense, whichever is smaller"},
};
}  // namespace

std::span<const AlgorithmInfo> algorithmTable() { return kAlgorithms; }

const char* algorithmName(int id) {
  for (const AlgorithmInfo& a : kAlgorithms)
    if (a.id == id) return a.name;
  return "unknown";
}

}  // namespace spccl
