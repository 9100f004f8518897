// The call record of the NCCL path's collectives (src/nccl): what every rank
// publishes before a compressed call on device buffers, and the two device
// steps that write and judge records without a host round trip (the
// fixed-capacity mode stays capturable in a CUDA graph).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/core/status.h"
#include "kernels/cuda/cuda_kernels.h"

namespace spccl::cuda {

// What every rank publishes (one ncclAllGather) at the start of a
// collective on device buffers that checks its call in src/nccl (the
// fixed-capacity compressed allreduce, and the rows and row-sparse calls
// through agreeOnDevice): its call descriptor (codec/codec.h CallDescriptor,
// 48 bytes, nnz and streamBytes unused by the allreduce), its pair capacity
// and slots, whether it estimated tau, selectPack's counts, which the kernel
// writes straight into the record on the device, and the asynchronous
// errors this rank's device recorded since its last record. One size for
// every such call, and for the shared collectives' padded descriptors
// (collectives/agreement.h), so that two different calls that meet exchange
// the same number of bytes and the check refuses them.
struct CallRecordHeader {
  unsigned char descriptor[48];
  uint64_t capacity;   // pairs a rank may send (capacity factor x k)
  uint64_t slots;      // pairs its buffers hold in this round
  uint32_t estimated;  // 1: tau was estimated exactly in this call
};
struct CallRecord {
  unsigned char descriptor[48];
  uint64_t capacity;
  uint64_t slots;
  uint32_t estimated;
  uint32_t tauKey;  // the magnitude key this round selected with (0: every non-zero); not compared across ranks
  SelectCounts counts;
  uint32_t asyncErrors;  // kAsync* bits taken from this rank's pending word (below); not compared
  uint32_t unused;       // zero (the record stays 96 bytes)
};
static_assert(sizeof(CallRecord) == 96, "the call record is exchanged as 96 bytes");
// Descriptor bytes every rank must agree on: [0, 24) (magic to count) and
// the density and flags at [40, 48); nnz and streamBytes may differ.
constexpr int kRecordCheckedBytes = 24;
constexpr int kRecordDensityOffset = 40;
constexpr int kRecordDensityAndFlagsBytes = 8;
// A communicator's asynchronous errors: what a kernel finds wrong after its
// call has returned (no host round trip).
//  - pending: one word of device memory that only kernels touch. Kernels
//    or-in kAsync* bits (unpackAccumulate's errorFlags); the next call's
//    record takes them (writeCallRecordHeader: an exchange on the device, in
//    stream order), so every rank learns every rank's bits from the records.
//  - reported: kAsyncKinds counters in mapped host memory, one per bit, that
//    only the fixed-capacity verdict writes (one thread, verdicts in stream
//    order: no atomics across the bus) and the host only reads: a verdict
//    counts every bit that any record carried, or its own mismatch. The same
//    records on every rank: the same counts.
// A call whose records come back to the host fails on every rank when any
// record carries bits or a counter moved since the host last looked (src/nccl).
constexpr uint32_t kAsyncBadStream = 1u;  // a peer's stream failed unpackAccumulate's checks
constexpr uint32_t kAsyncMismatch = 2u;   // ranks disagreed on a fixed-capacity call
constexpr int kAsyncKinds = 2;            // counter i counts bit 1 << i

// Writes the header fields of *dst (not the counts) on the stream, its
// tauKey from *threshold (0 when threshold is null), and its asyncErrors
// from *pending, which it clears (pending null: asyncErrors 0).
Status writeCallRecordHeader(CallRecord* dst, const CallRecordHeader& header, const ThresholdOut* threshold,
                             uint32_t* pending, cudaStream_t stream);
// Fixed-capacity verdict: if every record matches rank 0's (checked
// descriptor bytes and capacity), nnz[r] = min(selected_r, capacity_r);
// otherwise every nnz[r] = 0 (nothing is accumulated). Counts, in
// reported[0..kAsyncKinds) (device-visible, e.g. mapped host memory; null:
// not counted), each bit that any record's asyncErrors carries or, for
// kAsyncMismatch, this verdict's own mismatch.
Status resolveFixedCounts(const CallRecord* records, int ranks, uint64_t* nnz, uint32_t* reported, cudaStream_t stream);

}  // namespace spccl::cuda
