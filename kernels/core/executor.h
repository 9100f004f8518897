// Where a collective's arrays live and how the array operations on them run:
// on the host (kernels/host/host_executor.h) or on a CUDA stream
// (kernels/cuda/cuda_executor.h). An algorithm written against Executor
// runs on either. Two rules make that true:
//  - results meant for the host (tau, counts) are read only after settle(),
//    the one point where the executor's queued work has run;
//  - executor memory is touched only inside executor calls: its operations
//    and withMemory (the transport moving it). The host executor's guarded
//    mode keeps its memory inaccessible everywhere else
//    (SPCCL_GUARD_EXECUTOR=1), so an algorithm that reads it directly
//    crashes in CI instead of on a user's GPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "kernels/core/status.h"
#include "kernels/core/wire_section.h"

namespace spccl {

// A grow-only allocation of an executor's memory (host or device).
struct ExecBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// The k-th largest finite |v| (kthLargestMagnitude).
struct ThresholdStats {
  uint32_t tauKey = 0;  // magnitude key of the k-th largest finite |v| (0 if fewer than k finite)
  uint64_t above = 0;   // finite entries with |v| > tau
  uint64_t finite = 0;  // finite entries
};

// A selection's counts left in executor memory (SelectSpec::countsOut): the
// fixed-capacity exchange sends them as they are, never reading them on the host.
struct PairCounts {
  uint64_t selected;        // SelectStats::selected
  uint64_t finiteSelected;  // SelectStats::finiteSelected
};

// The fused select + pack (selectPack): v = send + residual, entries with
// |v| > tau and up to tieBudget with |v| == tau (lowest indices first), NaN
// and Inf always, exact zeros never, appended in index order as (index,
// wire value) pairs; the residual gets v outside the selection and the wire
// rounding error inside it. host::SelectArgs and cuda::SelectArgs say more.
struct SelectSpec {
  const void* send;  // n elements of inType (fp32, fp16 or bf16)
  spcclDataType_t inType;
  const float* residualIn;  // n fp32, or nullptr (zeros)
  float* residualOut;       // n fp32, or nullptr (error feedback off)
  size_t n;
  uint32_t tauKey;
  uint64_t tieBudget;
  uint64_t capacity;  // slots in indices/values; counting goes on past it
  core::ValueType wireType;
  uint32_t* indices;
  void* values;
  bool keepOverflow = false;  // selected entries past the capacity stay whole in the residual
  int scaleExp = 0;           // fp8 wire: values are codes of v / 2^scaleExp
  // > 0: every finite value sent within +-wireBound (core::storeWireValueBounded)
  // instead of the bound inType implies (core::kHalfMax for fp16, else none):
  // sums staged in fp32 for an fp16 buffer (split's owners).
  float wireBound = 0.0f;
  // Optional, executor memory: tau from an estimate that stayed there
  // (kthLargestMagnitudeInMemory); then tauKey = threshold->tauKey and
  // tieBudget = tieCapacity - threshold->above (0 if negative), the rule the
  // host computes from ThresholdStats, with no round trip through the host.
  const ThresholdStats* threshold = nullptr;
  uint64_t tieCapacity = 0;
  // Optional, executor memory: the counts go here and `out` is not written.
  PairCounts* countsOut = nullptr;
};

// The fixed-capacity pass (SPCCL_CAPACITY_MODE=fixed): tau from executor
// memory, `capacity` slots, the overflow kept whole in the residual, the
// counts left in executor memory. tieCapacity: the capacity right after an
// estimate, else no limit (select()'s rule).
inline SelectSpec fixedCapacitySpec(const void* send, spcclDataType_t type, const float* residualIn, float* residualOut,
                                    size_t n, uint64_t capacity, uint64_t tieCapacity, core::ValueType wire,
                                    const ThresholdStats* threshold, uint32_t* indices, void* values,
                                    PairCounts* counts) {
  SelectSpec a{send, type, residualIn, residualOut, n, 0, 0, capacity, wire, indices, values};
  a.keepOverflow = true;
  a.threshold = threshold;
  a.tieCapacity = tieCapacity;
  a.countsOut = counts;
  return a;
}

struct SelectStats {
  uint64_t selected = 0;        // all pairs the rule selected, counted past the capacity
  uint64_t finiteSelected = 0;  // the part the capacity factor limits
  uint32_t maxFiniteKey = 0;    // fp8 wire: magnitude key of the largest finite v selected (0: none)
};

// A stale tau's re-selection from the candidates a pass captured (reselect).
struct ReselectStats {
  uint64_t selected = 0;
  uint32_t tauKey = 0;
};

// One rank's list in a row-sparse merge (mergeRowLists): n ids, each with
// one row of the accumulation type, in executor memory.
struct IdRowsSection {
  const int64_t* ids;
  const void* rows;
  uint64_t n;
};

// A callable borrowed for the length of one call: no allocation, unlike
// std::function (the collectives' hot path allocates nothing once warm).
class StatusFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, StatusFn>>>
  StatusFn(F&& f)  // NOLINT(google-explicit-constructor): passed as a lambda
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o) -> Status { return (*static_cast<std::remove_reference_t<F>*>(o))(); }) {}
  Status operator()() const { return call_(obj_); }

 private:
  void* obj_;
  Status (*call_)(void*);
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;  // "host", "host (guarded)", "cuda"
  virtual bool onDevice() const = 0;

  // Memory. grow: *b holds at least `bytes` (its contents are lost when it
  // grows); release frees it.
  virtual Status grow(ExecBuffer* b, size_t bytes) = 0;
  virtual void release(ExecBuffer* b) = 0;
  // Host <-> executor copies; toHost's destination is valid after settle().
  virtual Status toHost(void* hostDst, const void* src, size_t bytes) = 0;
  virtual Status fromHost(void* dst, const void* hostSrc, size_t bytes) = 0;
  virtual Status fill(void* dst, unsigned char byte, size_t bytes) = 0;
  // dst = a small host value (at most kSmallStoreBytes), as queued work: on a
  // device a kernel parameter, so a CUDA graph captures the value itself and
  // src may change as soon as the call returns (fromHost copies at run time).
  static constexpr size_t kSmallStoreBytes = 64;
  virtual Status storeSmall(void* dst, const void* hostSrc, size_t bytes) = 0;
  // Everything enqueued has run; results meant for the host are there.
  virtual Status settle() = 0;

  // Array operations. Results written to host structs (ThresholdStats,
  // SelectStats, *maxKey) are valid after settle().
  virtual Status kthLargestMagnitude(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                     uint64_t k, ThresholdStats* out) = 0;
  virtual Status selectPack(const SelectSpec& spec, SelectStats* out) = 0;
  // kthLargestMagnitude with its result left in executor memory, for a
  // selectPack's SelectSpec::threshold: no host synchronisation.
  virtual Status kthLargestMagnitudeInMemory(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                             uint64_t k, ThresholdStats* inMemory) = 0;
  // Bytes of the delta index encoding's varint gaps of nnz sorted indices
  // from rangeBegin (*bytes, a host value, valid after settle()): what an
  // index-encoding choice needs from indices the host cannot read.
  virtual Status deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* bytes) = 0;
  // out[index] += value for the first min(*count, capacity) pairs of one
  // rank's slots (count in executor memory: a PairCounts::selected). The
  // slots came from a peer: an index past n, or indices not strictly
  // increasing, is not applied and makes this call (host) or a later
  // settle() (device) fail with spcclRemoteError.
  virtual Status accumulatePairs(const uint32_t* indices, const void* values, core::ValueType wire, uint64_t capacity,
                                 const uint64_t* count, float* out, size_t n) = 0;
  // A pass with a stale tau captured all its `nnz` candidates and more than
  // the capacity allows: tau is re-estimated exactly from them and the
  // selection and residual fixed up in place (host::reselectCandidates).
  virtual Status reselect(const SelectSpec& spec, uint64_t nnz, uint64_t k, uint64_t capacity, ReselectStats* out) = 0;
  // out[j] = base + indices[positions[j]] for j < n: the indices of a
  // selection made from a compacted one (positions are into the compaction).
  virtual Status gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base,
                               uint32_t* out) = 0;
  // Largest finite |v| as a magnitude key (0: none), v = send + residual
  // (residual may be null): fp8's scale.
  virtual Status maxFiniteKey(const void* send, spcclDataType_t type, const float* residual, uint64_t n,
                              uint32_t* maxKey) = 0;
  // dst = the wire codes of src (fp8: of src / 2^scaleExp), rounded and
  // saturated as core::storeWireValue does.
  virtual Status toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) = 0;
  // User float buffers (fp32, fp16, bf16) <-> fp32, rounding to nearest even.
  virtual Status loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) = 0;
  virtual Status storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) = 0;
  // x[i] /= divisor (the average).
  virtual Status divideFloats(float* x, size_t n, float divisor) = 0;
  // out[i] = v[i] + residual[i], residual[i] = 0: a dense call sends the
  // residual. out equals v or does not overlap it.
  virtual Status flushResidual(const float* v, float* residual, float* out, size_t n) = 0;

  // Row-sparse merges. Rows are summed in the accumulation type (fp64 for
  // fp64 input, fp32 else), from +0, in input order. mergeRows: outIds = the
  // n ids sorted and unique (signed order), outRows one summed row each;
  // *unique (a host value, valid after settle()) their count. n < 2^31.
  virtual Status mergeRows(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                           int64_t* outIds, void* outRows, uint64_t* unique) = 0;
  // The union of `count` lists of accType rows, each list's ids strictly
  // increasing (they came from peers: checked), equal ids summed in list
  // order (rank order: every rank adds the same values in the same order).
  // unordered[r] (host, after settle()): 0, or the first position where list
  // r's ids do not increase; then outIds/outRows/*unique hold nothing
  // meaningful. The lists hold fewer than 2^31 ids in all.
  virtual Status mergeRowLists(const IdRowsSection* lists, size_t count, spcclDataType_t accType, uint64_t rowLen,
                               int64_t* outIds, void* outRows, uint64_t* unique, uint64_t* unordered) = 0;
  // The partition algorithm's split: n ids with one accType row each,
  // grouped by owner (core::rowOwner(id, ranks)) into outIds/outRows, owner
  // 0's first, input order kept within each group; perOwner[r] (host, after
  // settle()) the size of owner r's group. n < 2^31.
  virtual Status splitByOwner(const int64_t* ids, const void* rows, spcclDataType_t accType, uint64_t n,
                              uint64_t rowLen, int ranks, int64_t* outIds, void* outRows, uint64_t* perOwner) = 0;

  // DCT-MP rows (the alltoall rows forward and backward). Each of nRows rows
  // of rowLen elements of `rows`.
  // selectRows: the positions of the row's `keep` entries of largest |x|
  // (ties: lower position first) plus every NaN/Inf beyond them, ascending,
  // at positions[r * stride ...], and their values in `wire` (fp32, fp16 or
  // bf16, as gatherRows) at the same slots of `values`, those past stride
  // not written; counts[r] (executor memory) the full count. stride >=
  // rowLen always suffices.
  virtual Status selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                            core::ValueType wire, uint32_t* positions, void* values, uint32_t stride,
                            uint32_t* counts) = 0;
  // Row r's selection (offsets[r+1] - offsets[r] entries, at most stride)
  // from its slots to positions and values[offsets[r] - offsets[0] ...].
  virtual Status compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes,
                             uint32_t stride, const uint64_t* offsets, uint64_t nRows, uint32_t* positions,
                             void* values) = 0;
  // values[j - o] = rows[r][positions[j - o]] in `wire` (fp32, fp16 or bf16:
  // rounded and saturated as core::storeWireValue does), for j in
  // [offsets[r], offsets[r+1]), o = offsets[0]: one block's kept entries.
  virtual Status gatherRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                            const uint32_t* positions, const uint64_t* offsets, core::ValueType wire, void* values) = 0;
  // The reverse: every element of the rows zero, then rows[r][positions[j - o]]
  // = values[j - o] (wire values, fp8 with scaleExp) in the user type,
  // saturating finite values (every kept value came from a buffer of that type).
  virtual Status scatterRows(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                             const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                             void* rows) = 0;
  // A stream's positions section: n positions, each as `bytes` (1, 2 or 4)
  // little-endian bytes (each fits: it is below the row length).
  virtual Status narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) = 0;
  // A received positions section: row r's positions (j in [offsets[r],
  // offsets[r+1]), o = offsets[0]) at src + (j - o) * bytes, to dst[j - o].
  // They came from a peer: *badRow (host, valid after settle()) = 0 when
  // every row's positions are strictly increasing and below rowLen, else 1 +
  // the first row where they are not (dst then holds nothing meaningful).
  virtual Status widenPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                                uint32_t rowLen, uint32_t* dst, uint64_t* badRow) = 0;

  // The int8 row codec (SPCCL_ROWS_CODEC=int8) over one block's values (j
  // in [offsets[r], offsets[r+1]), o = offsets[0], as above). encode: scale
  // r (fp32 bytes at scales + 4r) = core::int8ScaleOfMax of the row's largest
  // finite |v|, codes[j - o] = core::int8Encode(values[j - o], that scale).
  // scatter: scatterRows with value j - o = core::int8Decode(codes[j - o],
  // scale r), in one pass. The scales came from a peer: *badRow (host, valid
  // after settle()) = 0 when each is finite and >= 0, else 1 + the first row
  // whose is not (the rows then hold nothing meaningful).
  virtual Status encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                                unsigned char* codes) = 0;
  virtual Status scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                                 const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                                 void* rows, uint64_t* badRow) = 0;

  // Call agreement inside the data exchange, for calls that never wait for
  // the host (the fixed-capacity policy): `count` exchanged records of
  // `stride` bytes, each opening with `checkedBytes` that every rank's call
  // must share and holding a PairCounts at `countsAt`. Unless every record's
  // checked bytes equal record 0's, every record's counts are zeroed, so the
  // call applies nothing, and the call is reported: by this call on the host
  // (spcclInvalidUsage), by a later settle() or asyncFindings() on a device.
  // The same records on every rank: the same verdict everywhere.
  virtual Status agreeInBand(void* records, size_t stride, size_t checkedBytes, size_t countsAt, size_t count) = 0;
  // What operations that have already run found and not yet reported
  // (agreeInBand's mismatches, accumulatePairs' refused pairs), without
  // waiting for queued work: a device's finding is reported by the first
  // asyncFindings() or settle() after its kernel ran. The host executor
  // reports each in its own call, so it has none.
  virtual Status asyncFindings() = 0;

  // Stream checksums (SPCCL_CHECKSUM). streamCrc32c: *crc (host, valid
  // after settle()) = the CRC32C of `bytes` (>= skipAt + 4) at data with the
  // 4 bytes at skipAt read as zero. sealCrc32c, as queued work (no host
  // round trip): data[flagAt] |= flag, then that CRC stored at skipAt; flag
  // 0: neither. Then, where flipAt < bytes, data[flipAt] ^= 0x10 (a test's
  // corruption in transit).
  virtual Status streamCrc32c(const void* data, size_t bytes, size_t skipAt, uint32_t* crc) = 0;
  virtual Status sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) = 0;

  // Streams. copy: dst = src, both executor memory, not overlapping.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // The index section of nnz strictly increasing indices in [rangeBegin,
  // rangeEnd) in encoding e at dst: kCoo32 the indices, kDelta their varint
  // gaps (deltaIndexBytes of them), kBitmap (rangeEnd - rangeBegin + 7) / 8
  // bytes.
  virtual Status encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin,
                               uint64_t rangeEnd, unsigned char* dst) = 0;
  // out[i] = how many of the n sorted indices lie below keys[i], for
  // `count` keys (keys and out in executor memory): where a sorted
  // selection is cut into ranges.
  virtual Status lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out) = 0;
  // Received sections (host structs over executor memory), all over the
  // same [rangeBegin, rangeEnd): checks[r] gets what checking section r's
  // indices found (host structs, valid after settle()); where every check
  // passes, out[i - outBase] over the range = +0 plus each section's value
  // at i, added in section order (rank order: every rank adds the same
  // floats in the same order). Where one fails, the range of out holds no
  // meaningful values (the caller zeroes it), and nothing is written outside it.
  virtual Status reduceSections(const WireSection* sections, size_t count, float* out, uint64_t outBase,
                                IndexCheck* checks) = 0;
  // Arrays of a type derived from WireSection would be read with the wrong stride.
  template <typename T, typename = std::enable_if_t<!std::is_same_v<T, WireSection>>>
  Status reduceSections(const T* sections, size_t count, float* out, uint64_t outBase, IndexCheck* checks) = delete;

  // fn touches executor memory through something that may (the transport
  // handing it to MPI or NCCL).
  virtual Status withMemory(StatusFn fn) = 0;
};

// An ExecBuffer that its executor frees: grown by ensure(), which also names
// the executor. Growth is geometric (stream sizes that creep up call after
// call reallocate a few times, not on every call); bytes() is the largest
// size asked of it.
class ExecMemory {
 public:
  ExecMemory() = default;
  ExecMemory(const ExecMemory&) = delete;
  ExecMemory& operator=(const ExecMemory&) = delete;
  ~ExecMemory() {
    if (exec_ != nullptr) exec_->release(&buf_);
  }
  Status ensure(Executor& e, size_t bytes) {
    if (exec_ != nullptr && exec_ != &e) {
      exec_->release(&buf_);
      size_ = 0;
    }
    exec_ = &e;
    if (bytes > size_) size_ = bytes;
    if (bytes <= buf_.bytes && buf_.ptr != nullptr) return Status::ok();
    return e.grow(&buf_, std::max(bytes, buf_.bytes + buf_.bytes / 2));
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(buf_.ptr);
  }
  size_t bytes() const { return size_; }

 private:
  Executor* exec_ = nullptr;
  ExecBuffer buf_;
  size_t size_ = 0;
};

}  // namespace spccl
