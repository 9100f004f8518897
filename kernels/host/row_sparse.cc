// Row-sparse merges on the host (cuda/row_sparse.cu does them on a device):
// a rank's duplicate ids merged, and the union of the ranks' sorted lists.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "kernels/core/types.h"
#include "kernels/host/host_kernels.h"

namespace spccl::host {

namespace {

int64_t idAt(const int64_t* ids, uint64_t i) {
  int64_t id;
  std::memcpy(&id, ids + i, sizeof id);  // a received stream's section may be unaligned
  return id;
}

template <typename Acc>
uint64_t mergeById(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                   int64_t* outIds, Acc* outRows, std::vector<uint64_t>* order, std::vector<float>* rowBuf) {
  order->resize(n);
  std::iota(order->begin(), order->end(), uint64_t{0});
  // Input order among equal ids (the sums' order), without stable_sort's
  // temporary buffer: the position breaks ties.
  std::sort(order->begin(), order->end(),
            [&](uint64_t a, uint64_t b) { return ids[a] < ids[b] || (ids[a] == ids[b] && a < b); });
  const size_t rowBytes = rowLen * dataTypeSize(type);
  uint64_t unique = 0;
  Acc* acc = nullptr;
  for (uint64_t j = 0; j < n; ++j) {
    const uint64_t i = (*order)[j];
    if (unique == 0 || outIds[unique - 1] != ids[i]) {
      outIds[unique] = ids[i];
      acc = outRows + unique * rowLen;
      std::fill(acc, acc + rowLen, Acc(0));
      ++unique;
    }
    const char* row = static_cast<const char*>(rows) + i * rowBytes;
    if constexpr (sizeof(Acc) == 8) {
      for (uint64_t e = 0; e < rowLen; ++e) {
        double v;
        std::memcpy(&v, row + e * sizeof v, sizeof v);
        acc[e] += v;
      }
    } else {
      rowBuf->resize(rowLen);
      loadFloats(row, type, rowLen, rowBuf->data());
      for (uint64_t e = 0; e < rowLen; ++e) acc[e] += (*rowBuf)[e];
    }
  }
  return unique;
}

template <typename Acc>
uint64_t mergeLists(const IdRowsSection* lists, size_t count, uint64_t rowLen, int64_t* outIds, Acc* outRows,
                    std::vector<uint64_t>* heads) {
  heads->assign(count, 0);
  uint64_t unique = 0;
  for (;;) {
    bool any = false;
    int64_t next = 0;
    for (size_t r = 0; r < count; ++r)
      if ((*heads)[r] < lists[r].n) {
        const int64_t id = idAt(lists[r].ids, (*heads)[r]);
        if (!any || id < next) next = id;
        any = true;
      }
    if (!any) return unique;
    outIds[unique] = next;
    Acc* acc = outRows + unique * rowLen;
    std::fill(acc, acc + rowLen, Acc(0));
    ++unique;
    for (size_t r = 0; r < count; ++r) {
      uint64_t& h = (*heads)[r];
      if (h >= lists[r].n || idAt(lists[r].ids, h) != next) continue;
      const Acc* row = static_cast<const Acc*>(lists[r].rows) + h * rowLen;
      for (uint64_t e = 0; e < rowLen; ++e) acc[e] += row[e];
      ++h;
    }
  }
}

}  // namespace

uint64_t mergeRowsById(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                       int64_t* outIds, void* outRows, std::vector<uint64_t>* order, std::vector<float>* rowBuf) {
  if (type == spcclFloat64)
    return mergeById<double>(ids, rows, type, n, rowLen, outIds, static_cast<double*>(outRows), order, rowBuf);
  return mergeById<float>(ids, rows, type, n, rowLen, outIds, static_cast<float*>(outRows), order, rowBuf);
}

uint64_t firstUnorderedId(const int64_t* ids, uint64_t n) {
  for (uint64_t i = 1; i < n; ++i)
    if (idAt(ids, i) <= idAt(ids, i - 1)) return i;
  return 0;
}

void splitRowsByOwner(const int64_t* ids, const void* rows, size_t rowBytes, uint64_t n, uint32_t ranks,
                      int64_t* outIds, void* outRows, uint64_t* perOwner, std::vector<uint64_t>* next) {
  std::fill(perOwner, perOwner + ranks, uint64_t{0});
  for (uint64_t i = 0; i < n; ++i) ++perOwner[core::rowOwner(idAt(ids, i), ranks)];
  // Each group's next slot, then every row to its group in input order (a
  // second hash per id: cheaper than keeping the owners).
  next->resize(ranks);
  uint64_t at = 0;
  for (uint32_t r = 0; r < ranks; ++r) {
    (*next)[r] = at;
    at += perOwner[r];
  }
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t id = idAt(ids, i);
    const uint64_t j = (*next)[core::rowOwner(id, ranks)]++;
    outIds[j] = id;
    std::memcpy(static_cast<unsigned char*>(outRows) + j * rowBytes,
                static_cast<const unsigned char*>(rows) + i * rowBytes, rowBytes);
  }
}

uint64_t mergeRowLists(const IdRowsSection* lists, size_t count, bool fp64, uint64_t rowLen, int64_t* outIds,
                       void* outRows, std::vector<uint64_t>* heads) {
  if (fp64) return mergeLists<double>(lists, count, rowLen, outIds, static_cast<double*>(outRows), heads);
  return mergeLists<float>(lists, count, rowLen, outIds, static_cast<float*>(outRows), heads);
}

}  // namespace spccl::host
