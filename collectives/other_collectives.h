// The collectives besides the compressed allreduce: alltoall rows (DCT-MP
// forward and backward), the sparsified allgather, and the row-sparse
// allreduce. Each is written once against the Transport interface and the
// kernels; the communicator lends its scratch buffers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "codec/codec.h"
#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "kernels/core/status.h"

namespace spccl {

struct CallDescriptor;
struct CollectiveContext;
struct RowsProfile;
struct RowsSelection;
enum class Collective : uint8_t;

// Row-sparse allreduce algorithms (SPCCL_ROWSPARSE_ALGO choice order).
constexpr int kRowSparseAuto = 0;
constexpr int kRowSparseAllgather = 1;
constexpr int kRowSparsePartition = 2;

// The call descriptor of an alltoall-rows call (forward or backward), one
// definition for the host path and the NCCL path. `agreed` is what every
// rank must also share (in streamBytes, codec/codec.h): the forward's entries
// kept per row, the backward's forward call (its sequence number).
CallDescriptor rowsDescriptor(Collective coll, uint64_t seq, size_t rowsPerPeer, size_t rowLen, spcclDataType_t type,
                              core::ValueType wire, uint64_t agreed);
// The value type of the collectives that send a buffer's own values without
// reducing them (alltoall rows, the sparsified allgather): SPCCL_VALUE_TYPE,
// except that where it is fp32 a 16-bit buffer's values travel in their own
// type, as exact at half the bytes. One rule for the host and NCCL paths.
inline core::ValueType ownValuesWireType(core::ValueType requested, spcclDataType_t type) {
  if (requested != core::ValueType::kFloat32) return requested;
  if (type == spcclFloat16) return core::ValueType::kFloat16;
  if (type == spcclBfloat16) return core::ValueType::kBfloat16;
  return requested;
}

// The value type of an alltoall-rows forward's values and of its backward
// (host and NCCL paths): the low-precision codecs' own; the bounded codec's
// raw rows and exact backward in the buffer's own type; else
// SPCCL_VALUE_TYPE's (ownValuesWireType).
inline core::ValueType rowsWireType(int codec, core::ValueType requested, spcclDataType_t type) {
  switch (codec) {
    case kRowsCodecFp16:
      return core::ValueType::kFloat16;
    case kRowsCodecBf16:
      return core::ValueType::kBfloat16;
    case kRowsCodecFp8:
      return core::ValueType::kFloat8e4m3;
    case kRowsCodecBounded:
      return ownValuesWireType(core::ValueType::kFloat32, type);
    default:
      return ownValuesWireType(requested, type);
  }
}

// The sparsified allgather's rule (host and NCCL paths): each rank keeps
// the k = ceil(density * n) entries (core::densityCount) of largest magnitude, NaN/Inf ranking
// above every finite value (all of them kept, even beyond k), ties by lower
// index; so k - (NaN/Inf count) finite entries join them. Gives the threshold
// and tie budget for selectPack from one or two exact estimates:
// kth(kk, &tauKey, &above, &finite) is the kk-th largest finite |x| (host or
// device kthLargestMagnitude).
inline uint64_t allGatherTopKCount(float density, uint64_t n) {
  return std::clamp<uint64_t>(core::densityCount(density, n), 1, n);
}
// Its call descriptor (host and NCCL paths): this rank's kept count in nnz;
// the host path adds its stream size.
CallDescriptor allGatherTopKDescriptor(uint64_t seq, uint64_t n, spcclDataType_t type, core::ValueType wire,
                                       uint64_t nnz, float density);
template <typename Kth>
Status allGatherTopKThreshold(uint64_t n, uint64_t k, Kth&& kth, uint32_t* tauKey, uint64_t* tieBudget) {
  uint64_t above = 0, finite = 0;
  SPCCL_RETURN_IF_ERROR(kth(k, tauKey, &above, &finite));
  const uint64_t nonFinite = n - finite;
  uint64_t kFinite = k;
  if (nonFinite > 0) {
    kFinite = k > nonFinite ? k - nonFinite : 0;
    if (kFinite > 0) {
      SPCCL_RETURN_IF_ERROR(kth(kFinite, tauKey, &above, &finite));
    } else {  // only NaN/Inf: every finite key ties or falls below, with no tie budget
      *tauKey = core::kInfKey - 1;
      above = 0;
    }
  }
  *tieBudget = kFinite - std::min(kFinite, above);
  return Status::ok();
}

// The same for the row-sparse allreduce (algorithmSetting: SPCCL_ROWSPARSE_ALGO).
CallDescriptor rowSparseDescriptor(int algorithmSetting, uint64_t seq, size_t rowLen, spcclDataType_t type);

// sel may be nullptr (the selection is not kept).
Status alltoAllRowsForward(CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer,
                           size_t rowLen, spcclDataType_t type, float density, RowsSelection* sel, spcclStats_t* call);
Status alltoAllRowsBackward(CollectiveContext& comm, const void* gradSend, void* gradRecv, RowsSelection& sel,
                            spcclStats_t* call);
// SPCCL_PROFILE: one line with the mean split of a communicator's
// alltoall-rows calls; empty if it made none.
std::string describeRowsProfile(const RowsProfile& p);
Status allGatherTopK(CollectiveContext& comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                     spcclDataType_t type, float density, spcclStats_t* call);
Status allReduceRowSparse(CollectiveContext& comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                          spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                          spcclStats_t* call);

}  // namespace spccl
