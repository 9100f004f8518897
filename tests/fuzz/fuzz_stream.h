// The body of the three parseStream targets (pairs, dense, error streams):
// they differ in whether the receiver accepts a dense stream and in their
// seed corpus, not in what is checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/host/host_executor.h"
#include "kernels/host/sections.h"
#include "tests/fuzz/fuzz_common.h"

namespace spccl::fuzz {

enum class DenseRule { kFromPrefix, kAlways };

// The collectives' path over executor memory (reduceStreamsOn: the header
// on the host, the sections checked and summed by the executor) reaches
// parseStream's verdict, message for message, and when it accepts, the
// bits of zeroing the range and accumulating the view.
inline void checkExecutorPath(const StreamCopy& s, const StreamExpect& e) {
  const uint64_t len = e.rangeEnd - e.rangeBegin;
  StreamView v;
  const Status parsed = parseStream(s.data(), s.size(), e, 0, &v);  // rank 0: the one stream's sender below
  host::HostExecutor ex;
  StreamsScratch scratch;
  const size_t offset = 0, bytes = s.size();
  std::unique_ptr<float[]> got(new float[len]()), want(new float[len]());
  const Status st = reduceStreamsOn(ex, s.data(), &offset, &bytes, 1, e, got.get(), e.rangeBegin, &scratch);
  SPCCL_FUZZ_CHECK(st.code() == parsed.code() && st.message() == parsed.message());
  if (!st.isOk()) return;
  host::accumulateSection(v, want.get(), e.rangeBegin);
  SPCCL_FUZZ_CHECK(std::memcmp(got.get(), want.get(), len * sizeof(float)) == 0);
}

inline int fuzzStream(const uint8_t* data, size_t size, DenseRule rule) {
  if (size < StreamPrefix::kBytes) return 0;
  StreamExpect e = readStreamPrefix(data).expect;
  if (rule == DenseRule::kAlways) e.allowDense = true;
  const StreamCopy s(data + StreamPrefix::kBytes, size - StreamPrefix::kBytes);
  StreamView v;
  const Status st = parseStream(s.data(), s.size(), e, 1, &v);
  if (!e.allowError) checkExecutorPath(s, e);
  if (!st.isOk()) {
    checkRejection(st);
    return 0;
  }
  if (v.kind == StreamKind::kError) {
    // The sender's code, never success: a receiver turns it into its own failure.
    SPCCL_FUZZ_CHECK(v.peerStatus > spcclSuccess && v.peerStatus < spcclNumResults);
    return 0;
  }
  const uint64_t len = e.rangeEnd - e.rangeBegin;
  const uint64_t wb = core::wireValueBytes(e.valueType);
  SPCCL_FUZZ_CHECK(v.valueType == e.valueType && v.rangeBegin == e.rangeBegin && v.rangeEnd == e.rangeEnd);
  SPCCL_FUZZ_CHECK(v.peerStatus == spcclSuccess);
  if (v.kind == StreamKind::kDense) {
    SPCCL_FUZZ_CHECK(e.allowDense);
    SPCCL_FUZZ_CHECK(v.nnz == len && v.indices == nullptr);
    SPCCL_FUZZ_CHECK(s.size() == denseStreamBytes(len, e.valueType));
    SPCCL_FUZZ_CHECK(s.contains(v.values, len * wb));
  } else {
    SPCCL_FUZZ_CHECK(v.kind == StreamKind::kPairs);
    SPCCL_FUZZ_CHECK(v.nnz <= len);
    SPCCL_FUZZ_CHECK(s.contains(v.values, v.nnz * wb));
    if (v.encoding == IndexEncoding::kCoo32) {
      SPCCL_FUZZ_CHECK(s.size() == pairsStreamBytes(v.nnz, e.valueType));
      SPCCL_FUZZ_CHECK(s.contains(v.indices, v.nnz * sizeof(uint32_t)));
    } else {  // kDelta / kBitmap: the index section lies inside the stream
      SPCCL_FUZZ_CHECK(v.encoding == IndexEncoding::kDelta || v.encoding == IndexEncoding::kBitmap);
      SPCCL_FUZZ_CHECK(v.indices == nullptr && s.contains(v.indexBytes, 0));
      SPCCL_FUZZ_CHECK(s.size() <= maxPairsStreamBytes(v.nnz, len, e.valueType));
    }
    uint64_t prev = 0, count = 0;
    host::forEachPair(v, [&](uint64_t index, uint64_t j) {
      SPCCL_FUZZ_CHECK(j == count);
      SPCCL_FUZZ_CHECK(index >= e.rangeBegin && index < e.rangeEnd);
      SPCCL_FUZZ_CHECK(j == 0 || index > prev);
      prev = index;
      ++count;
    });
    SPCCL_FUZZ_CHECK(count == v.nnz);
  }
  // Consume the view as the library does: the split owner accumulates into a
  // buffer of its range, the allgather algorithms into one of the whole count.
  // Both blocks are exactly as large as the expectation says.
  std::unique_ptr<float[]> range(new float[len]());
  host::accumulateSection(v, range.get(), e.rangeBegin);
  std::unique_ptr<float[]> whole(new float[e.denseCount]());
  host::accumulateSection(v, whole.get(), 0);
  float sum = 0.0f;
  for (uint64_t j = 0; j < v.nnz; ++j) sum += core::loadWireValue(v.values, j, e.valueType, v.scaleExp);
  volatile float sink = sum;
  (void)sink;
  return 0;
}

}  // namespace spccl::fuzz
