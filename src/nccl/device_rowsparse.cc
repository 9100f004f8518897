// Row-sparse allreduce on device buffers: the host path's result
// (collectives/rowsparse_allreduce.cc) bit for bit. Each rank merges its
// duplicate ids (mergeRowsById: stable radix sort, rows summed in input order
// in fp32, fp64 for fp64); every rank's merged list goes to every rank in
// rank order (the allgather algorithm: the partition algorithm's result is
// the same, only its traffic differs); one more merge of the concatenation,
// stable, sums equal ids in rank order, exactly as the host's P-way merge.
// Two synchronisations: the merged counts size the exchange, the union's
// size is checked against outCapacity.
#include <algorithm>
#include <climits>
#include <numeric>
#include <vector>

#include "collectives/other_collectives.h"
#include "src/nccl/device_collectives.h"
#include "src/nccl/device_state.h"
#include "kernels/core/types.h"

namespace spccl::gpu {

Status rowSparse(spcclComm* comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                 spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                 cudaStream_t stream, spcclStats_t* call) {
  NcclTransport& t = transportOf(comm);
  DeviceCall deviceCall(t);
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  DeviceCommState& d = *comm->device;
  const int p = comm->ranks, me = comm->rank;
  const spcclDataType_t accType = type == spcclFloat64 ? spcclFloat64 : spcclFloat32;
  const size_t ab = dataTypeSize(accType), rowBytes = rowLen * ab;
  // An argument error, so before the exchange (as every argument check):
  // after it, the other ranks would wait in the counts allgather. The bound
  // is the merge kernels' (cuda::mergeRowsById: under INT_MAX ids).
  if (nrows >= static_cast<uint64_t>(INT_MAX))
    return invalidArgument(formatString("nrows=%zu: at most 2^31-2 rows on the device", nrows));
  const uint64_t seq = comm->seq++;
  SPCCL_RETURN_IF_ERROR(
      agreeOnDevice(comm, rowSparseDescriptor(comm->params.rowSparseAlgorithm, seq, rowLen, type), stream));

  // 1. Local merge.
  SPCCL_RETURN_IF_ERROR(d.mergedIds.ensure(std::max<size_t>(nrows, 1) * sizeof(int64_t)));
  SPCCL_RETURN_IF_ERROR(d.mergedRows.ensure(std::max<size_t>(nrows, 1) * rowBytes));
  SPCCL_RETURN_IF_ERROR(d.mergedCount.ensure(sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(d.allCounts.ensure(static_cast<size_t>(p) * sizeof(uint64_t)));
  SPCCL_RETURN_IF_ERROR(d.hostRowSparse.ensure(static_cast<size_t>(p + 1) * sizeof(uint64_t)));
  auto* counts = d.allCounts.get<uint64_t>();
  if (nrows > 0) {
    SPCCL_RETURN_IF_ERROR(d.mergeWorkspace.ensure(cuda::mergeRowsByIdWorkspaceBytes(nrows)));
    SPCCL_RETURN_IF_ERROR(cuda::mergeRowsById(ids, rows, type, nrows, rowLen, d.mergedIds.get<int64_t>(),
                                              d.mergedRows.get(), counts + me, d.mergeWorkspace.get(),
                                              d.mergeWorkspace.bytes(), stream));
  } else {
    SPCCL_CUDA_CHECK(cudaMemsetAsync(counts + me, 0, sizeof(uint64_t), stream));
  }
  SPCCL_RETURN_IF_ERROR(t.allGather(counts + me, sizeof(uint64_t), counts));
  auto* host = d.hostRowSparse.get<uint64_t>();
  SPCCL_CUDA_CHECK(
      cudaMemcpyAsync(host, counts, static_cast<size_t>(p) * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
  SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
  d.peerCounts.assign(2 * static_cast<size_t>(p) + 1, 0);  // the communicator's per-call scratch
  uint64_t *unique = d.peerCounts.data(), *first = unique + p;
  std::copy(host, host + p, unique);
  for (int r = 0; r < p; ++r) {
    // A peer never has more unique ids than rows; the counts decide buffer
    // sizes, so an absurd one is refused before anything is allocated.
    if (unique[r] >= (uint64_t{1} << 31))
      return remoteError(formatString("row-sparse allreduce: rank %d announced %llu unique ids", r,
                                      static_cast<unsigned long long>(unique[r])));
    first[r + 1] = first[r] + unique[r];
  }
  const uint64_t sumUnique = first[p];
  if (sumUnique >= static_cast<uint64_t>(INT_MAX))  // (the same on every rank)
    return invalidArgument("row-sparse allreduce on the device: more than 2^31-2 ids over all ranks");

  // 2. Every rank's merged list, in rank order.
  SPCCL_RETURN_IF_ERROR(d.allIds.ensure(std::max<uint64_t>(sumUnique, 1) * sizeof(int64_t)));
  SPCCL_RETURN_IF_ERROR(d.allRows.ensure(std::max<uint64_t>(sumUnique, 1) * rowBytes));
  size_t* idBytes = d.peerSizeArrays(p, 4);
  size_t *idOff = idBytes + p, *rowLens = idOff + p, *rowOff = rowLens + p;
  for (int r = 0; r < p; ++r) {
    idBytes[r] = unique[r] * sizeof(int64_t);
    idOff[r] = first[r] * sizeof(int64_t);
    rowLens[r] = unique[r] * rowBytes;
    rowOff[r] = first[r] * rowBytes;
  }
  SPCCL_RETURN_IF_ERROR(t.allGatherV(d.mergedIds.get(), idBytes[me], d.allIds.get(), idBytes, idOff));
  SPCCL_RETURN_IF_ERROR(t.allGatherV(d.mergedRows.get(), rowLens[me], d.allRows.get(), rowLens, rowOff));

  // 3. The union, equal ids summed in rank order.
  uint64_t unionSize = 0;
  if (sumUnique > 0) {
    SPCCL_RETURN_IF_ERROR(d.unionIds.ensure(sumUnique * sizeof(int64_t)));
    SPCCL_RETURN_IF_ERROR(d.unionRows.ensure(sumUnique * rowBytes));
    SPCCL_RETURN_IF_ERROR(d.unionCount.ensure(sizeof(uint64_t)));
    SPCCL_RETURN_IF_ERROR(d.mergeWorkspace.ensure(cuda::mergeRowsByIdWorkspaceBytes(sumUnique)));
    SPCCL_RETURN_IF_ERROR(cuda::mergeRowsById(
        d.allIds.get<int64_t>(), d.allRows.get(), accType, sumUnique, rowLen, d.unionIds.get<int64_t>(),
        d.unionRows.get(), d.unionCount.get<uint64_t>(), d.mergeWorkspace.get(), d.mergeWorkspace.bytes(), stream));
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(host + p, d.unionCount.get(), sizeof(uint64_t), cudaMemcpyDeviceToHost, stream));
    SPCCL_CUDA_CHECK(cudaStreamSynchronize(stream));
    unionSize = host[p];
  }
  *outNrows = unionSize;
  *call = spcclStats_t{};
  call->calls = 1;
  call->compressedCalls = 1;
  call->bytesSent = static_cast<uint64_t>(p - 1) *
                    (sizeof(cuda::CallRecord) + sizeof(uint64_t) + unique[me] * (sizeof(int64_t) + rowBytes));
  call->denseBytes = static_cast<uint64_t>(p - 1) * nrows * (sizeof(int64_t) + rowLen * dataTypeSize(type));
  if (unionSize > outCapacity)
    return invalidUsage(formatString("row-sparse allreduce: the union has %llu ids, outCapacity is %zu (*outNrows "
                                     "holds the size needed)",
                                     static_cast<unsigned long long>(unionSize), outCapacity))
        .markExpected();
  if (unionSize == 0) return Status::ok();
  SPCCL_CUDA_CHECK(
      cudaMemcpyAsync(outIds, d.unionIds.get(), unionSize * sizeof(int64_t), cudaMemcpyDeviceToDevice, stream));
  if (accType == spcclFloat64) {
    SPCCL_CUDA_CHECK(
        cudaMemcpyAsync(outRows, d.unionRows.get(), unionSize * rowBytes, cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  return cuda::storeFloats(d.unionRows.get<float>(), unionSize * rowLen, type, outRows, stream);
}

}  // namespace spccl::gpu
