// Row-sparse merge on the device (sort, unique, segmented sum) against the
// host path's local merge: stable sort by id, rows of equal ids summed in
// input order from zero, fp32 sums (fp64 for fp64 rows).
#include <algorithm>
#include <climits>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/host/host_kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace spccl::gputest {
namespace {

// The merge rule (host::mergeRowsById), written out here as an independent reference.
template <typename Acc>
void hostMerge(const std::vector<int64_t>& ids, const std::vector<unsigned char>& rows, spcclDataType_t type,
               size_t rowLen, std::vector<int64_t>* outIds, std::vector<Acc>* outRows) {
  std::vector<uint64_t> order(ids.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return ids[a] < ids[b]; });
  outIds->clear();
  outRows->clear();
  std::vector<Acc> row(rowLen);
  const size_t es = elementBytes(type);
  for (uint64_t i : order) {
    if (outIds->empty() || outIds->back() != ids[i]) {
      outIds->push_back(ids[i]);
      outRows->resize(outRows->size() + rowLen, Acc(0));
    }
    if constexpr (sizeof(Acc) == 8) {
      std::memcpy(row.data(), rows.data() + i * rowLen * es, rowLen * sizeof(double));
    } else {
      host::loadFloats(rows.data() + i * rowLen * es, type, rowLen, row.data());
    }
    Acc* acc = outRows->data() + outRows->size() - rowLen;
    for (size_t e = 0; e < rowLen; ++e) acc[e] += row[e];
  }
}

std::vector<int64_t> makeIds(size_t n, std::mt19937_64& g) {
  // Few distinct ids (many duplicates), both signs, and the extremes.
  const uint64_t distinct = 1 + n / 3;
  std::vector<int64_t> pool(distinct);
  for (auto& p : pool) p = static_cast<int64_t>(g());
  pool[0] = INT64_MIN;
  if (distinct > 1) pool[1] = INT64_MAX;
  if (distinct > 2) pool[2] = -1;
  if (distinct > 3) pool[3] = 0;
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = pool[g() % distinct];
  return ids;
}

template <typename Acc>
void checkMerge(size_t n, size_t rowLen, spcclDataType_t type, std::mt19937_64& g) {
  SCOPED_TRACE("n=" + std::to_string(n) + " rowLen=" + std::to_string(rowLen) + " type=" + typeName(type) + " " +
               seedTrace());
  const std::vector<int64_t> ids = makeIds(n, g);
  const size_t es = elementBytes(type);
  std::vector<unsigned char> rows(n * rowLen * es);
  if (type == spcclFloat64) {
    std::normal_distribution<double> normal(0.0, 1.0);
    for (size_t i = 0; i < n * rowLen; ++i) {
      const double x = normal(g);
      std::memcpy(rows.data() + 8 * i, &x, 8);
    }
  } else {
    rows = encodeUser(makeFloats(n * rowLen, Dist::kWide, g), type, Dist::kWide, g);
  }
  std::vector<int64_t> hIds;
  std::vector<Acc> hRows;
  hostMerge<Acc>(ids, rows, type, rowLen, &hIds, &hRows);

  DeviceBuffer<int64_t> dIds(n), dOutIds(n);
  DeviceBuffer<unsigned char> dRows(rows.size());
  DeviceBuffer<Acc> dOut(n * rowLen);
  DeviceBuffer<uint64_t> dCount(1);
  DeviceBuffer<unsigned char> ws(cuda::mergeRowsByIdWorkspaceBytes(n));
  CUDA_ASSERT(dIds.upload(ids));
  CUDA_ASSERT(dRows.upload(rows));
  CUDA_ASSERT(dOut.poison());
  CUDA_ASSERT(dCount.poison());
  STATUS_ASSERT(cuda::mergeRowsById(dIds.get(), dRows.get(), type, n, rowLen, dOutIds.get(), dOut.get(), dCount.get(),
                                    ws.get(), ws.bytes(), nullptr));
  SYNC_ASSERT();
  std::vector<uint64_t> count;
  CUDA_ASSERT(dCount.download(count));
  ASSERT_EQ(count[0], hIds.size());
  std::vector<int64_t> gotIds;
  std::vector<Acc> gotRows;
  CUDA_ASSERT(dOutIds.download(gotIds, hIds.size()));
  CUDA_ASSERT(dOut.download(gotRows, hRows.size()));
  ASSERT_EQ(gotIds, hIds);
  for (size_t i = 0; i < hRows.size(); ++i) {
    if constexpr (sizeof(Acc) == 8) ASSERT_TRUE(sameDouble(gotRows[i], hRows[i])) << "row element " << i;
    else ASSERT_TRUE(sameFloat(gotRows[i], hRows[i])) << "row element " << i;
  }
}

TEST(GpuRowSparse, SortIsStableAndSigned) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuRowSparse.SortIsStableAndSigned");
  for (size_t n : {size_t{1}, size_t{7}, size_t{1000}, size_t{100003}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " " + seedTrace());
    const std::vector<int64_t> ids = makeIds(n, g);
    std::vector<uint32_t> hOrder(n);
    std::iota(hOrder.begin(), hOrder.end(), 0u);
    std::stable_sort(hOrder.begin(), hOrder.end(), [&](uint32_t a, uint32_t b) { return ids[a] < ids[b]; });
    DeviceBuffer<int64_t> dIds(n), dSorted(n);
    DeviceBuffer<uint32_t> dOrder(n);
    DeviceBuffer<unsigned char> ws(cuda::sortIdsWorkspaceBytes(n));
    CUDA_ASSERT(dIds.upload(ids));
    STATUS_ASSERT(cuda::sortIdsStable(dIds.get(), n, dSorted.get(), dOrder.get(), ws.get(), ws.bytes(), nullptr));
    SYNC_ASSERT();
    std::vector<int64_t> sorted;
    std::vector<uint32_t> order;
    CUDA_ASSERT(dSorted.download(sorted));
    CUDA_ASSERT(dOrder.download(order));
    ASSERT_EQ(order, hOrder);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], ids[hOrder[i]]) << i;

    // Segments: offsets of each run, n past the last.
    DeviceBuffer<int64_t> dUnique(n);
    DeviceBuffer<uint32_t> dOffsets(n + 1);
    DeviceBuffer<uint64_t> dCount(1);
    DeviceBuffer<unsigned char> uws(cuda::uniqueIdsWorkspaceBytes(n));
    STATUS_ASSERT(cuda::uniqueIdSegments(dSorted.get(), n, dUnique.get(), dOffsets.get(), dCount.get(), uws.get(),
                                         uws.bytes(), nullptr));
    SYNC_ASSERT();
    std::vector<uint64_t> count;
    std::vector<uint32_t> offsets;
    CUDA_ASSERT(dCount.download(count));
    CUDA_ASSERT(dOffsets.download(offsets));
    std::vector<uint32_t> hOffsets;
    for (size_t i = 0; i < n; ++i)
      if (i == 0 || sorted[i] != sorted[i - 1]) hOffsets.push_back(static_cast<uint32_t>(i));
    ASSERT_EQ(count[0], hOffsets.size());
    hOffsets.resize(n + 1, static_cast<uint32_t>(n));
    ASSERT_EQ(offsets, hOffsets);
  }
}

TEST(GpuRowSparse, MergeMatchesHost) {
  SPCCL_REQUIRE_DEVICE();
  auto g = rngFor("GpuRowSparse.MergeMatchesHost");
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{100003}})
    for (size_t rowLen : {size_t{1}, size_t{3}, size_t{64}, size_t{130}}) {
      if (n * rowLen > (size_t{1} << 24)) continue;
      checkMerge<float>(n, rowLen, spcclFloat32, g);
      if (HasFatalFailure()) return;
      checkMerge<float>(n, rowLen, spcclFloat16, g);
      if (HasFatalFailure()) return;
      checkMerge<float>(n, rowLen, spcclBfloat16, g);
      if (HasFatalFailure()) return;
      checkMerge<double>(n, rowLen, spcclFloat64, g);
      if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace spccl::gputest
