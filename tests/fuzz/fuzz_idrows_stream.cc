// libFuzzer target: id-rows streams (row-sparse allreduce: sorted unique
// int64 ids, one fp32 or fp64 row each) as parseIdRows sees them. An accepted
// stream is consumed as rowsparse_allreduce.cc's merge does: every id read
// through idAt, every row read as the accumulation type and summed into a
// buffer of rowLen.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tests/fuzz/fuzz_common.h"

namespace {

template <typename Acc>
void consume(const spccl::IdRowsView& v, uint64_t rowLen) {
  std::unique_ptr<Acc[]> acc(new Acc[rowLen]());
  for (uint64_t i = 0; i < v.nIds; ++i) {
    const Acc* row = static_cast<const Acc*>(v.rows) + i * rowLen;
    for (uint64_t e = 0; e < rowLen; ++e) acc[e] += row[e];
  }
  // Read back into a volatile: the loads cannot be dropped as dead.
  Acc total = 0;
  for (uint64_t e = 0; e < rowLen; ++e) total += acc[e];
  volatile Acc sink = total;
  (void)sink;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace spccl;
  using namespace spccl::fuzz;
  if (size < IdRowsPrefix::kBytes) return 0;
  const IdRowsPrefix x = readIdRowsPrefix(data);
  const StreamCopy s(data + IdRowsPrefix::kBytes, size - IdRowsPrefix::kBytes);
  IdRowsView v;
  const Status st = parseIdRows(s.data(), s.size(), x.rowLen, x.valueBytes, x.seq, 1, &v);
  if (!st.isOk()) {
    checkRejection(st);
    return 0;
  }
  SPCCL_FUZZ_CHECK(s.size() == idRowsStreamBytes(v.nIds, x.rowLen, x.valueBytes));
  SPCCL_FUZZ_CHECK(s.contains(v.ids, v.nIds * sizeof(int64_t)));
  SPCCL_FUZZ_CHECK(s.contains(v.rows, v.nIds * x.rowLen * x.valueBytes));
  int64_t prev = 0;
  for (uint64_t i = 0; i < v.nIds; ++i) {
    const int64_t id = idAt(v, i);
    SPCCL_FUZZ_CHECK(i == 0 || id > prev);
    prev = id;
  }
  if (x.valueBytes == 8) consume<double>(v, x.rowLen);
  else consume<float>(v, x.rowLen);
  return 0;
}
