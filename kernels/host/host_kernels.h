// CPU back end of the kernels: the loops the CUDA kernels mirror, built on the
// element rules in kernels/core. The library picks this back end for host
// buffers (stream == NULL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "kernels/core/executor.h"

namespace spccl::host {

// Arguments of the fused pass: v = send + residual, classify against tau,
// append selected (index, wire value) pairs in index order, write the new
// residual (v outside the selection, wire rounding error inside it).
struct SelectArgs {
  const void* send;  // n elements of inType (fp32, fp16 or bf16)
  spcclDataType_t inType;
  const float* residualIn;  // n fp32, or nullptr (treated as zeros)
  float* residualOut;       // n fp32, or nullptr (error feedback off); may equal residualIn
  size_t n;
  uint32_t tauKey;     // core::magnitudeKey(tau)
  uint64_t tieBudget;  // |v| == tau entries sent at most this many, lowest indices first
  uint64_t capacity;   // pairs that fit in indices/values; counting goes on past it
  core::ValueType wireType;
  uint32_t* indices;
  void* values;  // capacity slots of the wire type
  // Selected entries past the capacity are counted either way. false: the
  // residual is written as if they were sent (the caller must redo the pass
  // with more room, as the compressor does); true: they keep all of v in the
  // residual, so a pass that overflows loses nothing and needs no redo (the
  // device path's fixed-capacity mode).
  bool keepOverflow = false;
  // fp8 wire: values are stored as e4m3 codes of v / 2^scaleExp (the stream
  // header carries scaleExp); the residual gets v - decoded. Ignored otherwise.
  int scaleExp = 0;
  float wireBound = 0.0f;  // > 0: overrides inType's bound on sent values (SelectSpec::wireBound)
};

struct SelectResult {
  uint64_t selected;        // all pairs the rule selected (finite + non-finite)
  uint64_t finiteSelected;  // the part the capacity factor limits
  uint32_t maxFiniteKey;    // magnitude key of the largest finite v selected (0: none); fp8's max rule
};

SelectResult selectPack(const SelectArgs& args);
// out[j] = base + indices[positions[j]] (Executor::gatherIndices).
void gatherIndices(const uint32_t* indices, const uint32_t* positions, uint64_t n, uint32_t base, uint32_t* out);

// A stale tau selected `nnz` candidates (all of them stored in args.indices /
// args.values, in index order) and more than the capacity factor allows. The
// exact k-th largest |v| over the whole buffer is among them (every entry
// outside has |v| < old tau <= the new tau), so tau is re-estimated exactly
// from the candidates alone, and the selection and residual are fixed up:
// dropped candidates get residualOut[i] = v again. `scratch` holds nnz uint32.
// Needs residualIn != residualOut (v is recomputed from send + residualIn,
// which the first pass must not have overwritten): the compressor
// double-buffers its residual for this.
struct ReselectResult {
  uint64_t selected;
  uint32_t tauKey;
};
ReselectResult reselectCandidates(const SelectArgs& args, uint64_t nnz, uint64_t k, uint64_t capacity,
                                  uint32_t* scratch);

struct ThresholdResult {
  uint32_t tauKey;  // magnitude key of the k-th largest finite |v| (0 if fewer than k finite)
  uint64_t above;   // finite entries with |v| > tau
  uint64_t finite;  // finite entries
};

// Exact k-th largest |v| over finite entries, v = send + residual. From 2^16
// elements one pass collects the keys at or above a floor that a sample of
// the keys places under tau, and nth_element ranks those; where
// the sample misleads (too few or too many collected) the radix select below
// runs instead. Either way the result is the same exact one. `scratch`
// receives the candidates: grown (never shrunk), at most n.
ThresholdResult kthLargestMagnitude(const void* send, spcclDataType_t inType, const float* residual, size_t n,
                                    uint64_t k, std::vector<uint32_t>* scratch);
// The radix select alone (two passes: a histogram of the keys' top 16 bits,
// then the one bucket holding tau): kthLargestMagnitude's fallback, exposed
// for the benchmark and the tests that compare the two.
ThresholdResult kthLargestMagnitudeRadix(const void* send, spcclDataType_t inType, const float* residual, size_t n,
                                         uint64_t k, std::vector<uint32_t>* scratch);
// kthLargestMagnitude's sample: thresholdSampleCount(n) elements (0 below
// 2^16), the j-th a fixed pseudo-random element of the j-th of that many
// equal strata, so that no layout (rows of a power-of-two length, say) lines
// up with it. Exposed for tests that build inputs to fool it.
size_t thresholdSampleCount(size_t n);
size_t thresholdSamplePosition(size_t j, size_t samples, size_t n);

// Vector instructions past the build's baseline (SSE2 on x86-64), picked at
// run time from the CPU: AVX-512 (F, BW, DQ, VL) serves selectRowTopK's rows
// of a multiple of 16 (rowTopK16), AVX2 those of a multiple of 8 (rowTopK8;
// also under kAvx512 for the rows rowTopK16 does not take). Every path
// returns the same result; setHostSimd pins one (SPCCL_HOST_SIMD, tests,
// benchmarks). Process-wide.
enum class HostSimd { kBaseline, kAvx2, kAvx512 };
bool hostSimdAvailable(HostSimd simd);  // this build and this CPU can run it
// The widest level `available` grants (tests pass a CPU of their own making).
HostSimd widestHostSimd(bool (*available)(HostSimd) = hostSimdAvailable);
HostSimd hostSimd();                      // in use: the widest available unless pinned
bool setHostSimd(HostSimd simd);          // false, and nothing changes, where not available
const char* hostSimdName(HostSimd simd);  // "baseline", "avx2", "avx512"

// DCT-MP per-row selection: the positions of the `keep` entries of largest
// |x| in a row of rowLen elements (ties: lower position first), plus every
// NaN/Inf beyond them, written ascending to `positions`. Returns how many
// (keep 0: the NaN/Inf alone). `positions` and `scratch` hold rowLen
// entries each (positions past the returned count are left unspecified).
uint32_t selectRowTopK(const void* row, spcclDataType_t type, uint32_t rowLen, uint32_t keep, uint32_t* positions,
                       uint64_t* scratch);

// The alltoall rows' array passes (cuda/row_topk.cu's twins; Executor's
// gatherRows, scatterRows, narrowPositions and widenPositions say what they
// compute). gatherRowValues' wire: fp32, fp16 or bf16.
// Executor::selectRows; rowPositions and scratch hold rowLen entries each.
void selectRows(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, uint32_t keep,
                core::ValueType wire, uint32_t* positions, void* values, uint32_t stride, uint32_t* counts,
                uint32_t* rowPositions, uint64_t* scratch);
void gatherRowValues(const void* rows, spcclDataType_t type, uint64_t nRows, uint32_t rowLen, const uint32_t* positions,
                     const uint64_t* offsets, core::ValueType wire, void* values);
void scatterRowValues(const void* values, core::ValueType wire, int scaleExp, const uint32_t* positions,
                      const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows);
void narrowPositions(const uint32_t* positions, uint64_t n, uint32_t bytes, unsigned char* dst);
// The int8 row codec (Executor::encodeRowsInt8, scatterRowsInt8); the
// scatter returns 0, or 1 + the first row whose scale is not finite and >= 0.
void encodeRowsInt8(const float* values, const uint64_t* offsets, uint64_t nRows, unsigned char* scales,
                    unsigned char* codes);
uint64_t scatterRowsInt8(const unsigned char* scales, const unsigned char* codes, const uint32_t* positions,
                         const uint64_t* offsets, uint64_t nRows, uint32_t rowLen, spcclDataType_t type, void* rows);
// Row r's countOf(r) positions of `bytes` each at src (one row after
// another), checked strictly increasing and below rowLen, widened to dst
// (may be null). Returns 0, or 1 + the first row that fails (*badPos: the
// position that failed it).
template <typename Index, typename CountOf>
uint64_t widenRowPositionsAs(const unsigned char* src, uint64_t nRows, uint32_t rowLen, CountOf countOf, uint32_t* dst,
                             uint32_t* badPos) {
  uint64_t j = 0;
  for (uint64_t r = 0; r < nRows; ++r) {
    const uint64_t c = countOf(r);
    int64_t previous = -1;
    for (uint64_t e = 0; e < c; ++e, ++j) {
      Index raw;
      std::memcpy(&raw, src + j * sizeof(Index), sizeof raw);  // little-endian hosts only (as the whole wire format)
      const uint32_t pos = raw;
      if (pos >= rowLen || static_cast<int64_t>(pos) <= previous) {
        *badPos = pos;
        return r + 1;
      }
      previous = pos;
      if (dst) dst[j] = pos;
    }
  }
  return 0;
}
template <typename CountOf>
uint64_t widenRowPositions(const unsigned char* src, uint32_t bytes, uint64_t nRows, uint32_t rowLen, CountOf countOf,
                           uint32_t* dst, uint32_t* badPos) {
  if (bytes == 1) return widenRowPositionsAs<uint8_t>(src, nRows, rowLen, countOf, dst, badPos);
  if (bytes == 2) return widenRowPositionsAs<uint16_t>(src, nRows, rowLen, countOf, dst, badPos);
  return widenRowPositionsAs<uint32_t>(src, nRows, rowLen, countOf, dst, badPos);
}

// out[i] = v[i] + residual[i], residual[i] = 0; out equals v or does not
// overlap it (as cuda::flushResidual).
void flushResidual(const float* v, float* residual, float* out, size_t n);
// x[i] /= divisor (cuda::divideFloats).
void divideFloats(float* x, size_t n, float divisor);

// Bytes of the delta encoding's varint gaps of nnz sorted indices from
// rangeBegin (cuda::deltaIndexBytes' twin).
uint64_t deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin);
// out[indices[i]] += values[i] for i < nnz wire pairs (not fp8) from a peer
// (cuda::unpackAccumulate's twin): stops at the first index past n or not
// above the one before it, and returns false; true when every pair applied.
bool accumulatePairs(const uint32_t* indices, const void* values, core::ValueType vt, uint64_t nnz, float* out,
                     size_t n);
// dst[i] += values[i] for len wire values.
void denseAccumulate(const void* values, core::ValueType vt, uint64_t len, float* dst, int scaleExp = 0);

// Largest finite |v| as a magnitude key (0: none), v = send + residual: the
// fp8 scale when tau gives none (tau == 0).
uint32_t maxFiniteMagnitudeKey(const void* send, spcclDataType_t inType, const float* residual, size_t n);

// fp32 <-> user float buffers (fp32, fp16, bf16); round to nearest even.
void loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst);
void storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst);
// dst = the wire codes of n fp32 values (fp8: of src / 2^scaleExp), rounded
// and saturated as core::storeWireValue does.
void toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst);

// Row-sparse merges (cuda/row_sparse.cu's twins; Executor::mergeRows and
// mergeRowLists say what they compute). Rows are summed in fp64 for fp64
// input, fp32 else. mergeRowsById returns the unique count; order and rowBuf
// are scratch.
uint64_t mergeRowsById(const int64_t* ids, const void* rows, spcclDataType_t type, uint64_t n, uint64_t rowLen,
                       int64_t* outIds, void* outRows, std::vector<uint64_t>* order, std::vector<float>* rowBuf);
// 0 when the n ids increase strictly, else the first position where they do not.
uint64_t firstUnorderedId(const int64_t* ids, uint64_t n);
// The n rows (rowBytes each) grouped by core::rowOwner(id, ranks), owner 0's
// first, input order kept within each group; perOwner[r] their counts. next
// is scratch.
void splitRowsByOwner(const int64_t* ids, const void* rows, size_t rowBytes, uint64_t n, uint32_t ranks,
                      int64_t* outIds, void* outRows, uint64_t* perOwner, std::vector<uint64_t>* next);
// lists: count lists of strictly increasing ids; heads is scratch.
uint64_t mergeRowLists(const IdRowsSection* lists, size_t count, bool fp64, uint64_t rowLen, int64_t* outIds,
                       void* outRows, std::vector<uint64_t>* heads);

// CRC32C (crc32c.cc). crc32c("123456789") == 0xE3069283; crc32cExtend
// continues a CRC: crc32cExtend(crc32c(a), b) == crc32c(a followed by b).
uint32_t crc32c(const void* data, size_t bytes);
uint32_t crc32cExtend(uint32_t crc, const void* data, size_t bytes);
uint32_t crc32cSoftware(uint32_t crc, const void* data, size_t bytes);
bool crc32cHardwareAvailable();
uint32_t crc32cHardware(uint32_t crc, const void* data, size_t bytes);  // only where available
// The CRC32C of `bytes` (>= skipAt + 4) with the 4 bytes at skipAt read as zero:
// a stream's checksum, which sits in those bytes.
uint32_t streamCrc32c(const void* data, size_t bytes, size_t skipAt);
// Executor::sealCrc32c on host memory: data[flagAt] |= flag and that CRC
// stored at skipAt (flag 0: neither), then data[flipAt] ^= 0x10 where
// flipAt < bytes.
void sealCrc32c(void* data, size_t bytes, size_t flagAt, uint8_t flag, size_t skipAt, size_t flipAt);

}  // namespace spccl::host
