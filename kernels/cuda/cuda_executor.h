// The CUDA executor: kernels/cuda on one stream, over device memory
// (kernels/core/executor.h). Results meant for the host go to pinned
// memory and reach their host structs at settle(), the one stream
// synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/core/executor.h"
#include "kernels/cuda/cuda_kernels.h"

namespace spccl::cuda {

class CudaExecutor final : public Executor {
 public:
  CudaExecutor() = default;
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // The stream every operation is enqueued on (the caller's, per call).
  void setStream(cudaStream_t stream) { stream_ = stream; }

  const char* name() const override { return "cuda"; }
  bool onDevice() const override { return true; }

  Status grow(ExecBuffer* b, size_t bytes) override;
  void release(ExecBuffer* b) override;
  Status toHost(void* hostDst, const void* src, size_t bytes) override;
  Status fromHost(void* dst, const void* hostSrc, size_t bytes) override;
  Status fill(void* dst, unsigned char byte, size_t bytes) override;
  Status settle() override;
  Status storeSmall(void* dst, const void* hostSrc, size_t bytes) override;

  Status kthLargestMagnitude(const void* send, spcclDataType_t type, const float* residual, size_t n, uint64_t k,
                             ThresholdStats* out) override;
  Status kthLargestMagnitudeInMemory(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                     uint64_t k, ThresholdStats* inMemory) override;
  Status selectPack(const SelectSpec& spec, SelectStats* out) override;
  Status gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base,
                       uint32_t* out) override;
  Status deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* bytes) override;
  Status accumulatePairs(const uint32_t* indices, const void* values, core::ValueType wire, uint64_t capacity,
                         const uint64_t* count, float* out, size_t n) override;
  Status reselect(const SelectSpec& spec, uint64_t nnz, uint64_t k, uint64_t capacity, ReselectStats* out) override;
  Status maxFiniteKey(const void* send, spcclDataType_t type, const float* residual, uint64_t n,
                      uint32_t* maxKey) override;
  Status toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) override;
  Status loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) override;
  Status storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) override;
  Status divideFloats(float* x, size_t n, float divisor) override;
  Status flushResidual(const float* v, float* residual, float* out, size_t n) override;
  Status mergeRows(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                   int64_t* outIds, void* outRows, uint64_t* unique) override;
  Status mergeRowLists(const IdRowsSection* lists, size_t count, spcclDataType_t accType, uint64_t rowLen,
                       int64_t* outIds, void* outRows, uint64_t* unique, uint64_t* unordered) override;

  Status splitByOwner(const int64_t* ids, const void* rows, spcclDataType_t accType, uint64_t n, uint64_t rowLen,
                      int ranks, int64_t* outIds, void* outRows, uint64_t* perOwner) override;

  Status selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                    core::ValueType wire, uint32_t* positions, void* values, uint32_t stride,
                    uint32_t* counts) override;
  Status compactRows(const uint32_t* stridedPositions, const void* stridedValues, uint32_t valueBytes, uint32_t stride,
                     const uint64_t* offsets, uint64_t nRows, uint32_t* positions, void* values) override;
  Status gatherRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, const uint32_t* positions,
                    const uint64_t* offsets, core::ValueType wire, void* values) override;
  Status scatterRows(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                     const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type,
                     void* rows) override;
  Status narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst) override;
  Status widenPositions(const unsigned char* src, uint32_t bytes, const uint64_t* offsets, uint64_t nRows,
                        uint32_t rowLen, uint32_t* dst, uint64_t* badRow) override;

  Status encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                        unsigned char* codes) override;
  Status scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                         const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows,
                         uint64_t* badRow) override;
  Status agreeInBand(void* records, size_t stride, size_t checkedBytes, size_t countsAt, size_t count) override;
  Status asyncFindings() override;

  Status streamCrc32c(const void* data, size_t bytes, size_t skipAt, uint32_t* crc) override;
  Status sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) override;

  Status copy(void* dst, const void* src, size_t bytes) override;
  Status encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                       unsigned char* dst) override;
  Status reduceSections(const WireSection* sections, size_t count, float* out, uint64_t outBase,
                        IndexCheck* checks) override;
  Status lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out) override;

  Status withMemory(StatusFn fn) override { return fn(); }

 private:
  // A device result on its way to a host struct: the device slot is copied
  // to pinned slot `slot` on the stream, and settle() converts it into *out.
  // kSelectFp8: the counts, then the selection's largest finite key.
  enum class Result { kThreshold, kSelect, kSelectFp8, kMaxKey, kCount, kCrc };
  struct Pending {
    size_t slot;
    Result kind;
    void* out;
  };
  Status resultSlot(size_t bytes, void** device, size_t* slot);
  Status enqueueKth(const void* send, spcclDataType_t type, const float* residual, size_t n, uint64_t k, Result kind,
                    void* out);
  Status reserveChecks(size_t more);

  cudaStream_t stream_ = nullptr;
  std::vector<void*> retired_;  // grown-out-of allocations (grow), freed with the executor
  bool captureSeen_ = false;    // a call was captured in a CUDA graph: grow() keeps old allocations
  ExecBuffer thresholdWorkspace_, selectWorkspace_;
  ExecBuffer sectionWorkspace_;  // encodeIndices' and reduceSections' scratch
  size_t selectWorkspaceN_ = 0;
  // Per-settle result slots, 64 bytes each: device and pinned host.
  static constexpr size_t kSlotBytes = 64, kSlots = 64;
  void* deviceSlots_ = nullptr;
  void* hostSlots_ = nullptr;
  std::vector<Pending> pending_;
  // What kernels found after their call returned: one word of mapped host
  // memory per kind, which kernels set to 1 and the host takes
  // (takeFindings) at settle() or asyncFindings() without waiting.
  static constexpr int kFindingBadPairs = 0;  // accumulatePairs refused a peer's pair
  static constexpr int kFindingMismatch = 1;  // agreeInBand: the ranks' calls differ
  static constexpr int kFindingKinds = 2;
  Status ensureFindings();
  Status takeFindings();
  volatile uint32_t* findings_ = nullptr;
  uint32_t* findingsDevice_ = nullptr;
  // reselect's second pass: its tau in device memory, its results on their
  // way to *reselectOut_ at settle().
  ThresholdStats* reselectThreshold_ = nullptr;
  ThresholdStats reselectTau_{};
  SelectStats reselectSelect_{};
  ReselectStats* reselectOut_ = nullptr;
  // reduceSections' findings, one per section since the last settle(): a
  // device slot each (as many as a call brings, unlike the fixed result
  // slots: a section per rank), copied to pinned memory and converted into
  // the caller's IndexCheck at settle().
  SectionCheck* deviceChecks_ = nullptr;
  size_t deviceCheckCapacity_ = 0;
  SectionCheck* hostChecks_ = nullptr;
  size_t hostCheckCapacity_ = 0;
  std::vector<IndexCheck*> pendingChecks_;
  // The row-sparse merges: CUB's workspace, the lists gathered end to end,
  // and the lists' order checks (~0: in order), turned into 0 at settle().
  ExecBuffer mergeWorkspace_, gatheredIds_, gatheredRows_, unorderedDevice_;
  ExecBuffer splitWorkspace_, perOwnerDevice_;  // splitByOwner's
  ExecBuffer crcWorkspace_;                     // the checksums' per-piece CRCs
  struct UnorderedOut {
    uint64_t* out;
    size_t count;
  };
  std::vector<UnorderedOut> pendingUnordered_;
  // The row checks' findings (widenPositions, scatterRowsInt8) since the last
  // settle(), one word each (~0: none), converted as the merges' order
  // checks are.
  template <typename F>
  Status rowCheck(uint64_t* badRow, F&& launch);
  ExecBuffer rowChecks_;
  size_t rowChecksUsed_ = 0;
};

}  // namespace spccl::cuda
