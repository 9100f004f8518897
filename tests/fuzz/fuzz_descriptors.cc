// libFuzzer target: checkDescriptors over P call descriptors as the
// allgather at the start of every compressed call delivers them. Checks that
// every rank (whichever descriptor is its own) reaches the same verdict, and
// that the verdict is the one the rules in codec.h give.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

namespace spccl::fuzz {
namespace {

// codec.h's rules, written out independently of checkDescriptors.
bool consistent(const std::vector<CallDescriptor>& all) {
  const CallDescriptor& ref = all[0];
  const bool other = (ref.op & kOtherCollective) != 0;
  const bool nnzIsShape = other && (ref.op & ~kOtherCollective) != static_cast<uint8_t>(Collective::kAllGather);
  // An auto compressor's line-up and settling exchange: nnz is the trial's index, equal everywhere.
  const bool nnzIsTrial = !other && (ref.algorithm == kAutoLineUp || ref.algorithm == kAutoSettle);
  // Rows forward and backward: streamBytes (kept per row, the forward's seq) equal everywhere.
  const bool streamBytesAgreed =
      other && ((ref.op & ~kOtherCollective) == static_cast<uint8_t>(Collective::kAlltoAllRows) ||
                (ref.op & ~kOtherCollective) == static_cast<uint8_t>(Collective::kAlltoAllRowsBackward));
  for (const CallDescriptor& d : all) {
    if (d.magic != kStreamMagic || d.seq != ref.seq || d.count != ref.count || d.dataType != ref.dataType ||
        d.op != ref.op || d.algorithm != ref.algorithm || d.valueType != ref.valueType)
      return false;
    if (nnzIsShape || nnzIsTrial ? d.nnz != ref.nnz : d.nnz > d.count) return false;
    if (std::memcmp(&d.density, &ref.density, sizeof d.density) != 0) return false;  // bits, NaN included
    if (d.flags != ref.flags) return false;
    if (streamBytesAgreed && d.streamBytes != ref.streamBytes) return false;
  }
  return true;
}

}  // namespace
}  // namespace spccl::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spccl;
  using namespace spccl::fuzz;
  if (size < 1) return 0;
  const int ranks = ranksOf(data[0]);
  if (size < 1 + static_cast<size_t>(ranks) * sizeof(CallDescriptor)) return 0;
  // Exactly `ranks` descriptors, as the allgather's receive block holds.
  std::vector<CallDescriptor> all(static_cast<size_t>(ranks));
  std::memcpy(all.data(), data + 1, all.size() * sizeof(CallDescriptor));
  spcclResult_t verdict = spcclSuccess;
  for (int me = 0; me < ranks; ++me) {
    const Status st = checkDescriptors(all.data(), ranks, all[static_cast<size_t>(me)]);
    if (me == 0) verdict = st.code();
    SPCCL_FUZZ_CHECK(st.code() == verdict);
    if (!st.isOk()) SPCCL_FUZZ_CHECK(st.code() == spcclInvalidUsage && !st.message().empty());
  }
  SPCCL_FUZZ_CHECK((verdict == spcclSuccess) == consistent(all));
  return 0;
}
