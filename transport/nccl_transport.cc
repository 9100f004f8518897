#include "transport/nccl_transport.h"

#include <cstdio>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/core/types.h"

namespace spccl {

Status ncclFailure(ncclResult_t r, const char* call, ncclComm_t comm, const char* file, int line) {
  spcclResult_t code = spcclInternalError;
  switch (r) {
    case ncclUnhandledCudaError:
      code = spcclUnhandledCudaError;
      break;
    case ncclSystemError:
      code = spcclSystemError;
      break;
    case ncclInvalidArgument:
      code = spcclInvalidArgument;
      break;
    case ncclInvalidUsage:
      code = spcclInvalidUsage;
      break;
    case ncclRemoteError:
      code = spcclRemoteError;
      break;
    default:
      break;
  }
  const char* detail = comm != nullptr ? pncclGetLastError(comm) : nullptr;
  return Status(code, formatString("NCCL call %s failed at %s:%d: %s%s%s", call, file, line, pncclGetErrorString(r),
                                   detail && *detail ? " - " : "", detail ? detail : ""));
}

ncclResult_t settleNccl(ncclResult_t r, ncclComm_t comm) {
  return settleNcclResult(r, [comm](ncclResult_t* state) { return pncclCommGetAsyncError(comm, state); });
}

Status NcclTransport::create(ncclComm_t comm, std::unique_ptr<NcclTransport>* out) {
  std::unique_ptr<NcclTransport> t(new NcclTransport());
  t->comm_ = comm;
  // A non-blocking communicator may still be initialising: NCCL then refuses
  // every query with ncclInvalidArgument (not ncclInProgress), so wait first.
  // A ready communicator answers at once.
  const ncclResult_t ready = settleNccl(ncclInProgress, comm);
  if (ready != ncclSuccess)
    return ncclFailure(ready, "ncclCommGetAsyncError (waiting for the communicator to be ready)", comm, __FILE__,
                       __LINE__);
  SPCCL_NCCL_CHECK(pncclCommUserRank(comm, &t->rank_), comm);
  SPCCL_NCCL_CHECK(pncclCommCount(comm, &t->size_), comm);
  SPCCL_NCCL_CHECK(pncclCommCuDevice(comm, &t->device_), comm);
  *out = std::move(t);
  return Status::ok();
}

NcclTransport::~NcclTransport() {
  if (scratch_ != nullptr) cudaFree(scratch_);
  for (void* p : retired_) cudaFree(p);
  if (lastCallEnd_ != nullptr) cudaEventDestroy(lastCallEnd_);
}

namespace {
// Whether s is not capturing a graph. A query that fails (the legacy stream
// while another stream captures) counts as capturing, and its error is
// cleared so no later launch check reports it.
bool notCapturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusNone;
}
}  // namespace

Status NcclTransport::beginCall(cudaStream_t s) {
  // Also on the same stream (redundant there, and cheap): a handle equal to
  // the last one may be a new stream that took a destroyed one's handle.
  stream_ = s;
  capturing_ = !notCapturing(s);  // asked once per call: a call neither begins nor ends a capture
  if (lastCallRecorded_ && !capturing_) SPCCL_CUDA_CHECK(cudaStreamWaitEvent(s, lastCallEnd_, 0));
  return Status::ok();
}

void NcclTransport::endCall() {
  // Recorded while the caller's stream is surely alive (it may destroy it
  // after the call); a failure only drops the ordering, and is cleared.
  lastCallRecorded_ = false;
  if (capturing()) return;
  if (lastCallEnd_ == nullptr && cudaEventCreateWithFlags(&lastCallEnd_, cudaEventDisableTiming) != cudaSuccess) {
    lastCallEnd_ = nullptr;
    (void)cudaGetLastError();
    return;
  }
  if (cudaEventRecord(lastCallEnd_, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  lastCallRecorded_ = true;
}

Status NcclTransport::stageSend(const void** send, size_t bytes) {
  if (scratchBytes_ < bytes) {
    // No allocation while capturing: cudaMalloc/cudaFree are not allowed in a
    // capture (they would invalidate the caller's graph), as for the fixed
    // mode's buffers: one call outside the graph sizes the scratch.
    if (capturing_)
      return invalidUsage(formatString(
          "a send buffer that overlaps the receive buffer (other than in place) is staged through %zu bytes of "
          "scratch, which a call on a capturing stream cannot allocate: make the call once outside the graph first",
          bytes));
    // A buffer a captured graph copies into outlives every replay: it is kept
    // until the transport goes, never freed under a graph.
    if (scratch_ != nullptr) {
      if (scratchCaptured_) {
        retired_.push_back(scratch_);
      } else {
        SPCCL_CUDA_CHECK(cudaFree(scratch_));  // (waits for the device: no call still reads it)
      }
    }
    scratch_ = nullptr;
    scratchBytes_ = 0;
    scratchCaptured_ = false;
    SPCCL_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratchBytes_ = bytes;
  }
  if (capturing_) scratchCaptured_ = true;
  SPCCL_CUDA_CHECK(cudaMemcpyAsync(scratch_, *send, bytes, cudaMemcpyDeviceToDevice, stream_));
  *send = scratch_;
  return Status::ok();
}

Status NcclTransport::allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                     spcclRedOp_t op) {
  const size_t bytes = count * dataTypeSize(type);
  if (sendNeedsMove(sendbuff, bytes, recvbuff, recvbuff, bytes)) SPCCL_RETURN_IF_ERROR(stageSend(&sendbuff, bytes));
  // spcclDataType_t and spcclRedOp_t carry NCCL's values (include/spccl.h).
  SPCCL_NCCL_CHECK(pncclAllReduce(sendbuff, recvbuff, count, static_cast<ncclDataType_t>(type),
                                  static_cast<ncclRedOp_t>(op), comm_, stream_),
                   comm_);
  return Status::ok();
}

Status NcclTransport::allGather(const void* send, size_t bytes, void* recv) {
  // NCCL's in-place form is the same as ours: send == recv + rank * bytes.
  const char* slot = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes;
  if (sendNeedsMove(send, bytes, slot, recv, static_cast<size_t>(size_) * bytes))
    SPCCL_RETURN_IF_ERROR(stageSend(&send, bytes));
  SPCCL_NCCL_CHECK(pncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_), comm_);
  return Status::ok();
}

Status NcclTransport::allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                                 const size_t* recvOffsets) {
  auto* out = static_cast<unsigned char*>(recv);
  if (sendBytes > 0 && out + recvOffsets[rank_] != send)
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(out + recvOffsets[rank_], send, sendBytes, cudaMemcpyDeviceToDevice, stream_));
  NcclGroup group(comm_);
  SPCCL_RETURN_IF_ERROR(group.start());
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (sendBytes > 0) SPCCL_NCCL_CHECK_IN_GROUP(pncclSend(send, sendBytes, ncclUint8, q, comm_, stream_), comm_);
    if (recvBytes[q] > 0)
      SPCCL_NCCL_CHECK_IN_GROUP(pncclRecv(out + recvOffsets[q], recvBytes[q], ncclUint8, q, comm_, stream_), comm_);
  }
  return group.end();
}

Status NcclTransport::allToAll(const void* send, size_t bytes, void* recv) {
  auto* out = static_cast<unsigned char*>(recv);
  const size_t total = bytes * static_cast<size_t>(size_);
  // In place, or any other overlap: send/recv pairs must not overlap, so the
  // send blocks go through scratch (nullptr as the slot: even send == recv).
  if (sendNeedsMove(send, total, nullptr, recv, total)) SPCCL_RETURN_IF_ERROR(stageSend(&send, total));
  const unsigned char* in = static_cast<const unsigned char*>(send);
  if (bytes > 0)
    SPCCL_CUDA_CHECK(
        cudaMemcpyAsync(out + rank_ * bytes, in + rank_ * bytes, bytes, cudaMemcpyDeviceToDevice, stream_));
  NcclGroup group(comm_);
  SPCCL_RETURN_IF_ERROR(group.start());
  for (int q = 0; q < size_ && bytes > 0; ++q) {
    if (q == rank_) continue;
    SPCCL_NCCL_CHECK_IN_GROUP(pncclSend(in + q * bytes, bytes, ncclUint8, q, comm_, stream_), comm_);
    SPCCL_NCCL_CHECK_IN_GROUP(pncclRecv(out + q * bytes, bytes, ncclUint8, q, comm_, stream_), comm_);
  }
  return group.end();
}

Status NcclTransport::allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                                const size_t* recvBytes, const size_t* recvOffsets) {
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  if (sendBytes[rank_] > 0)
    SPCCL_CUDA_CHECK(cudaMemcpyAsync(out + recvOffsets[rank_], in + sendOffsets[rank_], sendBytes[rank_],
                                     cudaMemcpyDeviceToDevice, stream_));
  NcclGroup group(comm_);
  SPCCL_RETURN_IF_ERROR(group.start());
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (sendBytes[q] > 0)
      SPCCL_NCCL_CHECK_IN_GROUP(pncclSend(in + sendOffsets[q], sendBytes[q], ncclUint8, q, comm_, stream_), comm_);
    if (recvBytes[q] > 0)
      SPCCL_NCCL_CHECK_IN_GROUP(pncclRecv(out + recvOffsets[q], recvBytes[q], ncclUint8, q, comm_, stream_), comm_);
  }
  return group.end();
}

}  // namespace spccl
