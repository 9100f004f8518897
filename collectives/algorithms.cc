#include "collectives/algorithms.h"

#include <string>

#include "include/spccl.h"
#include "codec/codec.h"

namespace spccl {

namespace {

bool everywhere(const AllreduceRequest&) { return true; }

constexpr AllreduceAlgorithm kAllreduce[] = {
    {SPCCL_ALGO_DENSE, "dense", "exact allreduce of v = input + residual; the residual is emptied", 2, false, false,
     everywhere, costDense, nullptr},
    {SPCCL_ALGO_ALLGATHER, "allgather",
     "every rank's packed stream is allgathered; each rank unpacks all streams in rank order", 0, true, true,
     everywhere, costAllgather, sparseAllgather},
    {SPCCL_ALGO_SPLIT, "split",
     "pairs go to the owner of their index range (alltoallv); owners sum; each owner's range is "
     "allgathered as pairs or dense, whichever is smaller",
     1, true, false, everywhere, costSplit, sparseSplit},
};
static_assert(kAllreduce[0].id == SPCCL_ALGO_AUTO + 1, "rows in SPCCL_ALGO_* order, from dense");

}  // namespace

std::span<const AllreduceAlgorithm> allreduceAlgorithms() { return kAllreduce; }

const AllreduceAlgorithm* findAllreduceAlgorithm(int id) {
  for (const AllreduceAlgorithm& a : kAllreduce)
    if (a.id == id) return &a;
  return nullptr;
}

const char* algorithmName(int id) {
  if (id == SPCCL_ALGO_AUTO) return "auto";
  const AllreduceAlgorithm* a = findAllreduceAlgorithm(id);
  return a != nullptr ? a->name : "unknown";
}

std::string algorithmChoices() {
  std::string out = "auto";
  for (const AllreduceAlgorithm& a : kAllreduce) out += std::string("|") + a.name;
  return out;
}

}  // namespace spccl
