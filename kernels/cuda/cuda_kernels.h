// CUDA back end of the kernels: the device versions of kernels/host, for
// buffers that live on the GPU. Every per-element decision (classify,
// magnitude keys, wire rounding with saturation, row ranks) comes from
// kernels/core/elementwise.h, the same inline functions the host loops use,
// so both back ends select, round and accumulate bit-identically.
//
// Conventions shared by every function here:
// - All work is enqueued on `stream`; nothing synchronises with the host.
//   Counts that the host path returns by value (selected pairs, tau, unique
//   ids) are written to device memory instead.
// - Scratch comes from the caller: each kernel family has a
//   `...WorkspaceBytes(n)` query, so the library allocates once per shape.
// - Results that the host contract calls bit-exact (selection, packed pairs,
//   residual, tau, row positions) are bit-exact here too. Accumulation into
//   fp32 runs without float atomics: one stream at a time, in the caller's
//   rank order, with each index touched by one thread.
// - Errors: a Status from the launch (bad arguments, CUDA launch errors).
//   Faults inside a kernel surface at the caller's next synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "kernels/core/status.h"
#include "kernels/core/wire_section.h"

namespace spccl::cuda {

// Turns a failed CUDA runtime call into a Status naming the call and file:line.
Status cudaFailure(cudaError_t err, const char* call, const char* file, int line);

}  // namespace spccl::cuda

// Every CUDA runtime call in the library goes through this.
#define SPCCL_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                         \
    cudaError_t _spccl_cerr = (call);                                                                          \
    if (_spccl_cerr != cudaSuccess) return ::spccl::cuda::cudaFailure(_spccl_cerr, #call, __FILE__, __LINE__); \
  } while (0)

namespace spccl::cuda {

// ---------------------------------------------------------------------------
// Fused select + pack (host: host::selectPack)
// ---------------------------------------------------------------------------

// Device-resident result of selectPack (host::SelectResult).
struct SelectCounts {
  uint64_t selected;        // all pairs the rule selected (finite + non-finite), counted past capacity
  uint64_t finiteSelected;  // the part the capacity factor limits
};

// Device-resident result of kthLargestMagnitude (host::ThresholdResult).
struct ThresholdOut {
  uint32_t tauKey;  // magnitude key of the k-th largest finite |v| (0 if fewer than k finite)
  uint32_t reserved;
  uint64_t above;   // finite entries with |v| > tau
  uint64_t finite;  // finite entries
};

// Same fields and meaning as host::SelectArgs, plus where tau and the counts
// live on the device. Every pointer is device memory.
struct SelectArgs {
  const void* send;  // n elements of inType (fp32, fp16 or bf16)
  spcclDataType_t inType;
  const float* residualIn;  // n fp32, or nullptr (treated as zeros)
  float* residualOut;       // n fp32, or nullptr (error feedback off); may equal residualIn
  size_t n;                 // at most 2^32 (indices are uint32)
  uint32_t tauKey;          // core::magnitudeKey(tau); ignored when `threshold` is set
  uint64_t tieBudget;       // |v| == tau entries sent at most this many, lowest indices first
  // Optional: tau and the tie budget straight from a kthLargestMagnitude on
  // the device, so that estimating and selecting need no host round trip:
  // tauKey = threshold->tauKey, tieBudget = tieCapacity - threshold->above
  // (0 if negative), exactly as the compressor computes them on the host.
  const ThresholdOut* threshold;
  uint64_t tieCapacity;
  uint64_t capacity;  // pairs that fit in indices/values; counting goes on past it
  // What happens to selected entries past the capacity (host::SelectArgs):
  // false, the residual assumes they were sent (the caller redoes the pass);
  // true, they stay in the residual whole (fixed-capacity mode, no redo).
  bool keepOverflow;
  core::ValueType wireType;  // fp32, fp16, bf16 or fp8 e4m3
  int scaleExp = 0;          // fp8: the values are codes of v / 2^scaleExp
  float wireBound = 0.0f;    // > 0: overrides inType's bound on sent values (SelectSpec::wireBound)
  uint32_t* indices;         // capacity slots
  void* values;              // capacity slots of the wire type
  SelectCounts* result;      // written when the pass is complete
  // fp8 (host::SelectResult::maxFiniteKey): the magnitude key of the largest
  // finite v selected, 0 when none; written with `result`. Optional.
  uint32_t* maxFiniteKey = nullptr;
  // Experimental, off everywhere in the library until a device run shows it
  // bit-exact and faster (perf/gpu/README.md lists the check): residual stores of
  // candidate-free rounds issued before the tile's look-back. tests/gpu checks
  // both kernels against the host; kernel_bench times both in one run.
  bool storeEarly = false;
};

// out[j] = base + indices[positions[j]] (host::gatherIndices).
Status gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base, uint32_t* out,
                     cudaStream_t stream);

// Scratch of one selectPack pass over n elements: per-tile prefix state for
// the single-pass (decoupled look-back) scan that keeps the pairs in index
// order whatever order the tiles run in.
size_t selectPackWorkspaceBytes(size_t n);
// Zero the workspace once after allocating it (not before every call): each
// pass leaves it ready for the next one. A workspace serves one stream at a
// time; re-initialise it after a failed or aborted pass.
Status initSelectPackWorkspace(void* workspace, size_t workspaceBytes, cudaStream_t stream);
// One launch: v = send + residual, classify against tau, packed pairs in
// index order, residual out, counts to args.result.
Status selectPack(const SelectArgs& args, void* workspace, size_t workspaceBytes, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Threshold: exact k-th largest finite |v| (host: host::kthLargestMagnitude)
// ---------------------------------------------------------------------------

size_t thresholdWorkspaceBytes(size_t n);
// Radix select on the 31-bit magnitude keys: three histogram passes
// (11 + 10 + 10 bits) over v = send + residual computed on the fly, each
// followed by a one-block pass that narrows the bucket; result to `out`.
Status kthLargestMagnitude(const void* send, spcclDataType_t inType, const float* residual, size_t n, uint64_t k,
                           ThresholdOut* out, void* workspace, size_t workspaceBytes, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Accumulation of received streams (host: host::accumulateSection / host::denseAccumulate)
// ---------------------------------------------------------------------------

// Marks an unused slot of a fixed-capacity pairs stream; such slots are
// skipped. They may only follow the stream's last real pair.
constexpr uint32_t kPadIndex = 0xffffffffu;

// acc[index - accBase] += value for the first nnz pairs (or *nnzDevice, when
// given and smaller: the sender's count in fixed-capacity mode). A peer's
// stream is untrusted: an index outside [accBase, accBase + accLen), indices
// not strictly increasing, or a real pair after a pad sets *badStream
// (optional, device) to 1 and the bad pair is not applied.
Status unpackAccumulate(const uint32_t* indices, const void* values, core::ValueType vt, uint64_t nnz,
                        const uint64_t* nnzDevice, float* acc, uint64_t accBase, uint64_t accLen, uint32_t* badStream,
                        cudaStream_t stream);
// *total (device) = bytes of the delta encoding's varint gaps of nnz sorted
// indices from rangeBegin (host::deltaIndexBytes' twin).
Status deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* total,
                       cudaStream_t stream);
// dst[i] += values[i] for len wire values.
Status denseAccumulate(const void* values, core::ValueType vt, uint64_t len, float* dst, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Stream sections (host: codec/codec.cc encodePairs' index section,
// parseStream's index walk and reduceStreams; kernels/cuda/sections.cu)
// ---------------------------------------------------------------------------

// Scratch of encodeIndices (kDelta's varint offsets and their scan).
size_t encodeIndicesWorkspaceBytes(IndexEncoding e, uint64_t nnz);
// The index section of nnz strictly increasing indices in [rangeBegin,
// rangeEnd) at dst (no alignment needed): kCoo32 the indices, kDelta the
// LEB128 varints of their core::deltaGap back to back, kBitmap
// (rangeEnd - rangeBegin + 7) / 8 bytes, bit i of byte i / 8 (LSB first) set
// for index rangeBegin + i. The same bytes as codec/codec.cc encodePairs.
Status encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                     unsigned char* dst, void* workspace, size_t workspaceBytes, cudaStream_t stream);

// out[i] = the number of the n sorted indices below keys[i] (std::lower_bound).
Status lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out,
                   cudaStream_t stream);

// What checking one received section found, in device memory: the lowest
// fault key reported (kNoSectionFault: none) and, for a bad index, the index.
struct SectionCheck {
  unsigned long long key;
  uint64_t index;
};
constexpr unsigned long long kNoSectionFault = ~0ull;
// The host's IndexCheck of a SectionCheck copied back.
IndexCheck sectionCheckResult(const SectionCheck& check);

// Checks a section's arguments (not its indices: those are the peer's) and
// gives the scratch addSection needs for it.
Status sectionWorkspaceBytes(const WireSection& s, size_t* bytes);
// Checks section s's indices into *check (first fault in the host walk's
// order: parseStream) and, where they pass, adds its values into
// out[i - outBase] over [s.rangeBegin, s.rangeEnd); a section that fails
// adds nothing, decided on the device. Sections added one after another on
// one stream sum in that order, as reduceStreams does.
Status addSection(const WireSection& s, float* out, uint64_t outBase, SectionCheck* check, void* workspace,
                  size_t workspaceBytes, cudaStream_t stream);

// fp32 <-> user float buffers (fp32, fp16, bf16): host::loadFloats / storeFloats.
Status loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst, cudaStream_t stream);
Status storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst, cudaStream_t stream);
// fp32 -> wire codes (host::toWire).
Status toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst, cudaStream_t stream);

// ---------------------------------------------------------------------------
// DCT-MP rows (host: host::selectRowTopK and the alltoall rows gather/scatter)
// ---------------------------------------------------------------------------

// For each of nRows rows of rowLen elements: the positions of the `keep`
// entries of largest |x| (ties: lower position first) plus every NaN/Inf
// beyond them, ascending, at positions[row * posStride ...]; counts[row] gets
// how many (always the full count). Positions past posStride are not
// written: posStride >= rowLen always suffices, posStride >= keep when the
// rows hold fewer than `keep` NaN/Inf each. One block per row.
// kRadix: an 8-bit radix select over the 64-bit ranks (the measured kernel).
// kFloorFirst (experimental, off everywhere in the library until a device run
// shows it bit-exact and faster: perf/gpu/README.md lists the check): the host's floor
// under the kept keys first, the few keys reaching it ranked pairwise in
// shared memory, the radix select only for rows where that does not apply.
// tests/gpu checks both against the host; kernel_bench times both.
enum class RowTopKMethod { kRadix, kFloorFirst };
Status selectRowsTopK(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                      uint32_t* positions, uint32_t posStride, uint32_t* counts, cudaStream_t stream,
                      RowTopKMethod method = RowTopKMethod::kRadix);

// The row passes below index their compact arrays from offsets[0] (one
// block of a larger selection: Executor::compactRows says more).
// The values of selectRowsTopK's slots: row r's min(counts[r], stride)
// values, in `wire` (fp32, fp16, bf16), at the same slots of `values`.
Status gatherStridedRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                              const uint32_t* positions, uint32_t stride, const uint32_t* counts, core::ValueType wire,
                              void* values, cudaStream_t stream);
// Concatenates the slots: row r's min(offsets[r+1] - offsets[r], stride)
// positions (and values of valueBytes each, unless values is null) to
// positions[offsets[r] - offsets[0] ...].
Status compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes, uint32_t stride,
                   const uint64_t* offsets, uint64_t nRows, uint32_t* positions, void* values, cudaStream_t stream);
// values[j] = wire(rows[r][positions[j]]) for j in [offsets[r], offsets[r+1]):
// the values of the kept entries (forward) or the gradient at the kept
// positions (backward), rounded and saturated as core::storeWireValue does.
Status gatherRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen,
                       const uint32_t* positions, const uint64_t* offsets, core::ValueType wire, void* values,
                       cudaStream_t stream);
// rows[r][positions[j]] = values[j] (decoded from the wire type, fp8 with
// scaleExp, stored in the user type saturating finite values, as
// host::scatterRowValues), every other element zero.
Status scatterRowValues(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                        const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows,
                        cudaStream_t stream);
// host::narrowPositions and host::widenRowPositions (Executor's
// narrowPositions and widenPositions); *badRow (device memory) = ~0 when
// every row passes, else 1 + the first failing row.
Status narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst, cudaStream_t stream);
// The int8 row codec (host::encodeRowsInt8, host::scatterRowsInt8); *badRow
// (device memory) as widenRowPositions'.
Status encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                      unsigned char* codes, cudaStream_t stream);
Status scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                       const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows,
                       uint64_t* badRow, cudaStream_t stream);
Status widenRowPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                         uint32_t rowLen, uint32_t* dst, uint64_t* badRow, cudaStream_t stream);

// ---------------------------------------------------------------------------
// Row-sparse allreduce: merge of duplicate ids (host::mergeRowsById's
// twin, kernels/host/row_sparse.cc). n < 2^31 ids.
// ---------------------------------------------------------------------------

// sortedIds = ids in ascending (signed) order; order[j] = the input position
// of sortedIds[j]; equal ids keep input order (stable radix sort).
size_t sortIdsWorkspaceBytes(uint64_t n);
Status sortIdsStable(const int64_t* ids, uint64_t n, int64_t* sortedIds, uint32_t* order, void* workspace,
                     size_t workspaceBytes, cudaStream_t stream);
// Runs of equal ids: uniqueIds[s] and segment s = [segmentOffsets[s],
// segmentOffsets[s+1]) of the sorted order; *numUnique (device) the count.
// segmentOffsets has n + 1 entries; those past numUnique hold n.
size_t uniqueIdsWorkspaceBytes(uint64_t n);
Status uniqueIdSegments(const int64_t* sortedIds, uint64_t n, int64_t* uniqueIds, uint32_t* segmentOffsets,
                        uint64_t* numUnique, void* workspace, size_t workspaceBytes, cudaStream_t stream);
// outRows[s] = 0 + rows[order[first]] + ... + rows[order[last]] of segment s,
// element-wise, in that order (input order): fp32 sums for fp32/fp16/bf16
// rows, fp64 for fp64. maxSegments bounds *numUnique (usually n).
Status segmentedRowSum(const void* rows, spcclDataType_t type, uint64_t rowLen, const uint32_t* order,
                       const uint32_t* segmentOffsets, const uint64_t* numUnique, uint64_t maxSegments, void* outRows,
                       cudaStream_t stream);
// The three above in one call: sorted unique ids, one summed row each.
size_t mergeRowsByIdWorkspaceBytes(uint64_t n);
Status mergeRowsById(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                     int64_t* outIds, void* outRows, uint64_t* outCount, void* workspace, size_t workspaceBytes,
                     cudaStream_t stream);

// The partition algorithm's split (host::splitRowsByOwner's twin): rows of
// elementBytes-sized elements (4 or 8) grouped by core::rowOwner, input order
// kept within each group; perOwner (device, `ranks` entries) their counts.
size_t splitRowsByOwnerWorkspaceBytes(uint64_t n);
Status splitRowsByOwner(const int64_t* ids, const void* rows, size_t elementBytes, uint64_t n, uint64_t rowLen,
                        uint32_t ranks, int64_t* outIds, void* outRows, uint64_t* perOwner, void* workspace,
                        size_t workspaceBytes, cudaStream_t stream);

// Stream checksums (crc32c.cu; host::streamCrc32c's twin). streamCrc32c:
// *out (device) = the CRC32C of `bytes` at data with the 4 bytes at skipAt
// read as zero. sealCrc32c: data[flagAt] |= flag, that CRC stored at skipAt
// (flag 0: neither), then data[flipAt] ^= 0x10 where flipAt < bytes.
size_t crc32cWorkspaceBytes(uint64_t bytes);
Status streamCrc32c(const void* data, uint64_t bytes, uint64_t skipAt, uint32_t* out, void* workspace,
                    size_t workspaceBytes, cudaStream_t stream);
Status sealCrc32c(void* data, uint64_t bytes, uint64_t flagAt, uint8_t flag, uint64_t skipAt, uint64_t flipAt,
                  void* workspace, size_t workspaceBytes, cudaStream_t stream);

// *firstBad (device) = the lowest i in [1, n) where ids[i] <= ids[i - 1],
// lowered only (the caller sets ~0 first): a peer's list must increase.
Status findUnorderedIds(const int64_t* ids, uint64_t n, uint64_t* firstBad, cudaStream_t stream);

// out[i] = v[i] + residual[i], residual[i] = 0 (host::flushResidual); out
// equal to v or disjoint from it.
Status flushResidual(const float* v, float* residual, float* out, size_t n, cudaStream_t stream);

// x[i] = x[i] / divisor (the average), bit-identical to the host loop.
Status divideFloats(float* x, size_t n, float divisor, cudaStream_t stream);

}  // namespace spccl::cuda
