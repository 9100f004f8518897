#include "kernels/host/host_executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>
#include <cstring>

#include "kernels/core/types.h"
#include "kernels/host/host_kernels.h"
#include "kernels/host/sections.h"

namespace spccl::host {

namespace {

size_t pageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

HostExecutor::~HostExecutor() {
  for (const ExecBuffer& m : mapped_) munmap(m.ptr, m.bytes);
}

HostExecutor::Open::Open(HostExecutor& e) : e_(e) {
  if (e_.guarded_ && e_.depth_++ == 0) e_.protectAll(true);
}

HostExecutor::Open::~Open() {
  if (e_.guarded_ && --e_.depth_ == 0) e_.protectAll(false);
}

void HostExecutor::protectAll(bool open) {
  // mprotect fails only for addresses this executor did not map: a bug here,
  // and one the next access would show anyway.
  for (const ExecBuffer& m : mapped_) mprotect(m.ptr, m.bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

Status HostExecutor::grow(ExecBuffer* b, size_t bytes) {
  release(b);
  if (!guarded_) {
    // 64-byte aligned, as the SIMD loops like it; through operator new, so
    // that the hot-path allocation tests count it. (bad_alloc: the entry
    // points' guard reports it as out of host memory.)
    b->ptr = ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64});
    b->bytes = bytes;
    return Status::ok();
  }
  const size_t len = pageRounded(bytes);
  void* p = mmap(nullptr, len, depth_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return systemError("host executor: mmap of guarded memory failed");
  mapped_.push_back(ExecBuffer{p, len});
  b->ptr = p;
  b->bytes = bytes;
  return Status::ok();
}

void HostExecutor::release(ExecBuffer* b) {
  if (b->ptr == nullptr) return;
  if (!guarded_) {
    ::operator delete (b->ptr, std::align_val_t{64});
  } else {
    auto it = std::find_if(mapped_.begin(), mapped_.end(), [&](const ExecBuffer& m) { return m.ptr == b->ptr; });
    if (it != mapped_.end()) {
      munmap(it->ptr, it->bytes);
      mapped_.erase(it);
    }
  }
  *b = ExecBuffer{};
}

Status HostExecutor::toHost(void* hostDst, const void* src, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memcpy(hostDst, src, bytes);
  return Status::ok();
}

Status HostExecutor::fromHost(void* dst, const void* hostSrc, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memcpy(dst, hostSrc, bytes);
  return Status::ok();
}

Status HostExecutor::fill(void* dst, unsigned char byte, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memset(dst, byte, bytes);
  return Status::ok();
}

Status HostExecutor::storeSmall(void* dst, const void* hostSrc, size_t bytes) {
  if (bytes > kSmallStoreBytes) return invalidArgument("host executor: storeSmall takes at most 64 bytes");
  return fromHost(dst, hostSrc, bytes);
}

Status HostExecutor::agreeInBand(void* records, size_t stride, size_t checkedBytes, size_t countsAt, size_t count) {
  Open open(*this);
  auto* base = static_cast<unsigned char*>(records);
  size_t differs = 0;
  for (size_t r = 1; r < count && differs == 0; ++r)
    if (std::memcmp(base + r * stride, base, checkedBytes) != 0) differs = r;
  if (differs == 0) return Status::ok();
  for (size_t r = 0; r < count; ++r) std::memset(base + r * stride + countsAt, 0, sizeof(PairCounts));
  return invalidUsage(formatString(
      "mismatched fixed-capacity call across ranks: rank %zu's call differs from rank 0's (count, datatype, op, "
      "algorithm, wire type, density, capacity or call order); nothing was applied",
      differs));
}

Status HostExecutor::kthLargestMagnitude(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                         uint64_t k, ThresholdStats* out) {
  Open open(*this);
  const ThresholdResult r = host::kthLargestMagnitude(send, type, residual, n, k, &scratch_);
  *out = ThresholdStats{r.tauKey, r.above, r.finite};
  return Status::ok();
}

Status HostExecutor::kthLargestMagnitudeInMemory(const void* send, spcclDataType_t type, const float* residual,
                                                 size_t n, uint64_t k, ThresholdStats* inMemory) {
  return kthLargestMagnitude(send, type, residual, n, k, inMemory);
}

namespace {

// Called inside an executor call: spec.threshold is readable there.
SelectArgs hostArgs(const SelectSpec& s) {
  uint32_t tauKey = s.tauKey;
  uint64_t tieBudget = s.tieBudget;
  if (s.threshold != nullptr) {
    tauKey = s.threshold->tauKey;
    tieBudget = s.tieCapacity > s.threshold->above ? s.tieCapacity - s.threshold->above : 0;
  }
  return SelectArgs{s.send,     s.inType,  s.residualIn, s.residualOut,  s.n,        tauKey,     tieBudget, s.capacity,
                    s.wireType, s.indices, s.values,     s.keepOverflow, s.scaleExp, s.wireBound};
}

}  // namespace

Status HostExecutor::selectPack(const SelectSpec& s, SelectStats* out) {
  Open open(*this);
  const SelectResult r = host::selectPack(hostArgs(s));
  if (s.countsOut != nullptr) *s.countsOut = PairCounts{r.selected, r.finiteSelected};
  else *out = SelectStats{r.selected, r.finiteSelected, r.maxFiniteKey};
  return Status::ok();
}

Status HostExecutor::gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base,
                                   uint32_t* out) {
  Open open(*this);
  host::gatherIndices(indices, positions, n, base, out);
  return Status::ok();
}

Status HostExecutor::deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* bytes) {
  Open open(*this);
  *bytes = host::deltaIndexBytes(indices, nnz, rangeBegin);
  return Status::ok();
}

Status HostExecutor::accumulatePairs(const uint32_t* indices, const void* values, core::ValueType wire,
                                     uint64_t capacity, const uint64_t* count, float* out, size_t n) {
  Open open(*this);
  if (!host::accumulatePairs(indices, values, wire, std::min(*count, capacity), out, n))
    return remoteError(
        "a peer's fixed-capacity pairs have an index out of range or out of order; the pairs before it were "
        "applied");
  return Status::ok();
}

Status HostExecutor::splitByOwner(const int64_t* ids, const void* rows, spcclDataType_t accType, uint64_t n,
                                  uint64_t rowLen, int ranks, int64_t* outIds, void* outRows, uint64_t* perOwner) {
  Open open(*this);
  host::splitRowsByOwner(ids, rows, rowLen * dataTypeSize(accType), n, static_cast<uint32_t>(ranks), outIds, outRows,
                         perOwner, &order_);
  return Status::ok();
}

Status HostExecutor::streamCrc32c(const void* data, size_t bytes, size_t skipAt, uint32_t* crc) {
  if (bytes < skipAt + 4) return invalidArgument("host executor: the checksum field lies past the stream");
  Open open(*this);
  *crc = host::streamCrc32c(data, bytes, skipAt);
  return Status::ok();
}

Status HostExecutor::sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) {
  if (flag != 0 && (bytes < skipAt + 4 || flagAt >= bytes))
    return invalidArgument("host executor: the checksum field or flag lies past the stream");
  Open open(*this);
  host::sealCrc32c(data, bytes, flagAt, flag, skipAt, flipAt);
  return Status::ok();
}

Status HostExecutor::mergeRows(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                               int64_t* outIds, void* outRows, uint64_t* unique) {
  Open open(*this);
  *unique = host::mergeRowsById(ids, rows, type, n, rowLen, outIds, outRows, &order_, &rowBuf_);
  return Status::ok();
}

Status HostExecutor::mergeRowLists(const IdRowsSection* lists, size_t count, spcclDataType_t accType, uint64_t rowLen,
                                   int64_t* outIds, void* outRows, uint64_t* unique, uint64_t* unordered) {
  Open open(*this);
  bool ordered = true;
  for (size_t r = 0; r < count; ++r) {
    unordered[r] = host::firstUnorderedId(lists[r].ids, lists[r].n);
    ordered = ordered && unordered[r] == 0;
  }
  *unique = 0;
  if (ordered) *unique = host::mergeRowLists(lists, count, accType == spcclFloat64, rowLen, outIds, outRows, &order_);
  return Status::ok();
}

Status HostExecutor::selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                                core::ValueType wire, uint32_t* positions, void* values, uint32_t stride,
                                uint32_t* counts) {
  if (wire == core::ValueType::kFloat8e4m3) return invalidArgument("selectRows: fp8 is scaled by toWire");
  Open open(*this);
  // selectRowTopK may write a whole row's length: one row's scratch.
  if (rowPositions_.size() < rowLen) rowPositions_.resize(rowLen);
  if (rowKeys_.size() < rowLen) rowKeys_.resize(rowLen);
  host::selectRows(rows, type, nRows, rowLen, keep, wire, positions, values, stride, counts, rowPositions_.data(),
                   rowKeys_.data());
  return Status::ok();
}

namespace {

// compactRows with the values' width known at compile time.
template <typename V>
void compactAs(const uint32_t* stridedPositions, const V* stridedValues, uint32_t stride, const uint64_t* offsets,
               uint64_t nRows, uint32_t* positions, V* values) {
  // A few entries a row: plain loops (a memcpy call a row cost more than its copy).
  for (uint64_t r = 0; r < nRows; ++r) {
    const uint64_t at = offsets[r] - offsets[0], n = std::min<uint64_t>(offsets[r + 1] - offsets[r], stride);
    const uint32_t* p = stridedPositions + r * stride;
    const V* v = stridedValues + r * stride;
    for (uint64_t e = 0; e < n; ++e) {
      positions[at + e] = p[e];
      values[at + e] = v[e];
    }
  }
}

}  // namespace

Status HostExecutor::compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes,
                                 uint32_t stride, const uint64_t* offsets, uint64_t nRows, uint32_t* positions,
                                 void* values) {
  Open open(*this);
  if (valueBytes == 4)
    compactAs(stridedPositions, static_cast<const uint32_t*>(stridedValues), stride, offsets, nRows, positions,
              static_cast<uint32_t*>(values));
  else if (valueBytes == 2)
    compactAs(stridedPositions, static_cast<const uint16_t*>(stridedValues), stride, offsets, nRows, positions,
              static_cast<uint16_t*>(values));
  else
    compactAs(stridedPositions, static_cast<const uint8_t*>(stridedValues), stride, offsets, nRows, positions,
              static_cast<uint8_t*>(values));
  return Status::ok();
}

Status HostExecutor::gatherRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                                const uint32_t* positions, const uint64_t* offsets, core::ValueType wire,
                                void* values) {
  if (wire == core::ValueType::kFloat8e4m3) return invalidArgument("gatherRows: fp8 is scaled by toWire");
  Open open(*this);
  host::gatherRowValues(rows, type, nRows, rowLen, positions, offsets, wire, values);
  return Status::ok();
}

Status HostExecutor::scatterRows(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                                 const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                                 void* rows) {
  Open open(*this);
  host::scatterRowValues(values, wire, scaleExp, positions, offsets, nRows, rowLen, type, rows);
  return Status::ok();
}

Status HostExecutor::narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) {
  Open open(*this);
  host::narrowPositions(positions, n, bytes, dst);
  return Status::ok();
}

Status HostExecutor::widenPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                                    uint32_t rowLen, uint32_t* dst, uint64_t* badRow) {
  Open open(*this);
  uint32_t badPos = 0;
  *badRow = host::widenRowPositions(
      src, bytes, nRows, rowLen, [&](uint64_t r) { return offsets[r + 1] - offsets[r]; }, dst, &badPos);
  return Status::ok();
}

Status HostExecutor::encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                                    unsigned char* codes) {
  Open open(*this);
  host::encodeRowsInt8(values, offsets, nRows, scales, codes);
  return Status::ok();
}

Status HostExecutor::scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                                     const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                                     void* rows, uint64_t* badRow) {
  Open open(*this);
  *badRow = host::scatterRowsInt8(scales, codes, positions, offsets, nRows, rowLen, type, rows);
  return Status::ok();
}

Status HostExecutor::copy(void* dst, const void* src, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memcpy(dst, src, bytes);
  return Status::ok();
}

Status HostExecutor::encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                                   uint64_t rangeEnd, unsigned char* dst) {
  Open open(*this);
  host::encodeIndexSection(e, indices, nnz, rangeBegin, rangeEnd, dst);
  return Status::ok();
}

Status HostExecutor::lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count,
                                 uint64_t* out) {
  Open open(*this);
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<uint64_t>(std::lower_bound(sorted, sorted + n, keys[i]) - sorted);
  return Status::ok();
}

Status HostExecutor::reduceSections(const WireSection* sections, size_t count, float* out, uint64_t outBase,
                                    IndexCheck* checks) {
  Open open(*this);
  bool ok = true;
  for (size_t r = 0; r < count; ++r) {
    checks[r] = sections[r].dense ? IndexCheck{IndexFault::kNone, 0, 0} : host::checkIndexSection(sections[r]);
    ok = ok && checks[r].fault == IndexFault::kNone;
  }
  if (ok) host::reduceSections(sections, count, out, outBase, &cursors_);
  return Status::ok();
}

Status HostExecutor::reselect(const SelectSpec& s, uint64_t nnz, uint64_t k, uint64_t capacity, ReselectStats* out) {
  Open open(*this);
  if (scratch_.size() < nnz) scratch_.resize(nnz);
  const ReselectResult r = host::reselectCandidates(hostArgs(s), nnz, k, capacity, scratch_.data());
  *out = ReselectStats{r.selected, r.tauKey};
  return Status::ok();
}

Status HostExecutor::maxFiniteKey(const void* send, spcclDataType_t type, const float* residual, uint64_t n,
                                  uint32_t* maxKey) {
  Open open(*this);
  *maxKey = host::maxFiniteMagnitudeKey(send, type, residual, n);
  return Status::ok();
}

Status HostExecutor::toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) {
  Open open(*this);
  host::toWire(src, n, wire, scaleExp, dst);
  return Status::ok();
}

Status HostExecutor::loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) {
  Open open(*this);
  host::loadFloats(src, type, n, dst);
  return Status::ok();
}

Status HostExecutor::storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) {
  Open open(*this);
  host::storeFloats(src, n, type, dst);
  return Status::ok();
}

Status HostExecutor::divideFloats(float* x, size_t n, float divisor) {
  Open open(*this);
  host::divideFloats(x, n, divisor);
  return Status::ok();
}

Status HostExecutor::flushResidual(const float* v, float* residual, float* out, size_t n) {
  Open open(*this);
  host::flushResidual(v, residual, out, n);
  return Status::ok();
}

Status HostExecutor::withMemory(StatusFn fn) {
  Open open(*this);
  return fn();
}

}  // namespace spccl::host
