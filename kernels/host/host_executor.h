// The host executor: kernels/host's loops over host memory. Guarded, every
// allocation it owns is kept PROT_NONE except inside its own calls, so that
// an algorithm reading executor memory directly (which on a GPU would read
// device memory from the CPU) faults at once (kernels/core/executor.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/executor.h"
#include "kernels/host/host_kernels.h"
#include "kernels/host/sections.h"

namespace spccl::host {

class HostExecutor final : public Executor {
 public:
  explicit HostExecutor(bool guarded = false) : guarded_(guarded) {}
  ~HostExecutor() override;
  HostExecutor(const HostExecutor&) = delete;
  HostExecutor& operator=(const HostExecutor&) = delete;

  const char* name() const override { return guarded_ ? "host (guarded)" : "host"; }
  bool onDevice() const override { return false; }
  bool guarded() const { return guarded_; }
  // Elements of the candidates' scratch (threshold, reselect): grown to the
  // largest need of any call, shared by every compressor on the communicator.
  size_t scratchElements() const { return scratch_.size(); }

  Status grow(ExecBuffer* b, size_t bytes) override;
  void release(ExecBuffer* b) override;
  Status toHost(void* hostDst, const void* src, size_t bytes) override;
  Status fromHost(void* dst, const void* hostSrc, size_t bytes) override;
  Status fill(void* dst, unsigned char byte, size_t bytes) override;
  Status settle() override { return Status::ok(); }
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
  Status asyncFindings() override { return Status::ok(); }

  Status splitByOwner(const int64_t* ids, const void* rows, spcclDataType_t accType, uint64_t n, uint64_t rowLen,
                      int ranks, int64_t* outIds, void* outRows, uint64_t* perOwner) override;

  Status streamCrc32c(const void* data, size_t bytes, size_t skipAt, uint32_t* crc) override;
  Status sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt) override;

  Status copy(void* dst, const void* src, size_t bytes) override;
  Status encodeIndices(IndexEncoding e, const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t rangeEnd,
                       unsigned char* dst) override;
  Status lowerBounds(const uint32_t* sorted, uint64_t n, const uint64_t* keys, size_t count, uint64_t* out) override;
  Status reduceSections(const WireSection* sections, size_t count, float* out, uint64_t outBase,
                        IndexCheck* checks) override;

  Status withMemory(StatusFn fn) override;

 private:
  // Opens every guarded allocation for the length of one call (nested calls
  // share the outermost's).
  class Open {
   public:
    explicit Open(HostExecutor& e);
    ~Open();

   private:
    HostExecutor& e_;
  };
  void protectAll(bool open);

  bool guarded_;
  int depth_ = 0;
  std::vector<ExecBuffer> mapped_;      // guarded allocations, page-rounded
  std::vector<PairCursor> cursors_;     // reduceSections' scratch
  std::vector<uint32_t> scratch_;       // kthLargestMagnitude's and reselect's candidates
  std::vector<uint64_t> order_;         // the row-sparse merges' sort order and list heads
  std::vector<float> rowBuf_;           // a row widened to fp32
  std::vector<uint32_t> rowPositions_;  // selectRows: one row's selection
  std::vector<uint64_t> rowKeys_;       // and its keys
};

}  // namespace spccl::host
