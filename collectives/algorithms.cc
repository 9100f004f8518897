#include "collectives/algorithms.h"

#include "include/spccl.h"
#include "src/codec.h"

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

size_t layoutStreams(const std::vector<size_t>& sizes, std::vector<size_t>* offsets) {
  offsets->resize(sizes.size());
  size_t total = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    (*offsets)[r] = total;
    total += sizes[r];
  }
  return total;
}

size_t announcedSize(uint64_t announced, size_t most, int peer, const char* what, Status* local) {
  if (announced <= most && announced % 8 == 0) return static_cast<size_t>(announced);
  if (local->isOk())
    *local = remoteError(formatString("%s: rank %d announced a %llu-byte stream, at most %zu fit", what, peer,
                                      static_cast<unsigned long long>(announced), most));
  return 0;
}

Status agreeOnCall(Transport& t, const CallDescriptor& mine, std::vector<CallDescriptor>* all) {
  all->resize(t.size());
  SPCCL_RETURN_IF_ERROR(t.allGather(&mine, sizeof mine, all->data()));
  return checkDescriptors(all->data(), t.size(), mine);
}

}  // namespace spccl
