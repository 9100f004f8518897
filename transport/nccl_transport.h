// Transport over NCCL on device memory (the GPU path). Every call enqueues on
// the stream set by beginCall() (the caller's stream of the current
// collective) and returns without waiting: completion is stream-ordered, as
// with NCCL itself. Variable-size exchanges are ncclSend/ncclRecv pairs
// inside one ncclGroupStart/End.
//
// spccl calls NCCL only by its profiling names (pncclAllGather, ...): its own
// traffic must never come back through an interposer of the nccl* names,
// libspccl_nccl.so's or a profiler's.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "transport/nccl_settle.h"
#include "kernels/core/status.h"
#include "transport/transport.h"

namespace spccl {

// NCCL result -> Status with NCCL's own message (ncclGetLastError).
Status ncclFailure(ncclResult_t r, const char* call, ncclComm_t comm, const char* file, int line);

// Waits for the call's result on a non-blocking communicator
// (settleNcclResult, transport/nccl_settle.h).
ncclResult_t settleNccl(ncclResult_t r, ncclComm_t comm);

#define SPCCL_NCCL_CHECK(call, comm)                                                                             \
  do {                                                                                                           \
    ncclResult_t _spccl_nres = ::spccl::settleNccl((call), (comm));                                              \
    if (_spccl_nres != ncclSuccess) return ::spccl::ncclFailure(_spccl_nres, #call, (comm), __FILE__, __LINE__); \
  } while (0)

// A call between ncclGroupStart and ncclGroupEnd: NCCL only records it, and
// the group's end is what settles (NcclGroup::end).
#define SPCCL_NCCL_CHECK_IN_GROUP(call, comm)                                      \
  do {                                                                             \
    ncclResult_t _spccl_nres = (call);                                             \
    if (_spccl_nres != ncclSuccess && _spccl_nres != ncclInProgress)               \
      return ::spccl::ncclFailure(_spccl_nres, #call, (comm), __FILE__, __LINE__); \
  } while (0)

// An NCCL group that always ends: a call inside it that fails returns
// through SPCCL_NCCL_CHECK_IN_GROUP, and the destructor then ends the group, so the
// thread's group depth never stays raised (NCCL would defer every later call
// on this thread into a group that never launches). end() reports the end's
// own result on the normal path.
class NcclGroup {
 public:
  explicit NcclGroup(ncclComm_t comm) : comm_(comm) {}
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  ~NcclGroup() {
    if (open_) (void)settleNccl(pncclGroupEnd(), comm_);  // settled: the next call finds the communicator ready
  }
  Status start() {
    SPCCL_NCCL_CHECK_IN_GROUP(pncclGroupStart(), comm_);
    open_ = true;
    return Status::ok();
  }
  Status end() {
    open_ = false;
    SPCCL_NCCL_CHECK(pncclGroupEnd(), comm_);
    return Status::ok();
  }

 private:
  ncclComm_t comm_;
  bool open_ = false;
};

class NcclTransport final : public Transport {
 public:
  // Does not own `comm` (spcclCommInitNccl wraps the application's).
  static Status create(ncclComm_t comm, std::unique_ptr<NcclTransport>* out);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  ncclComm_t nccl() const { return comm_; }
  cudaStream_t stream() const { return stream_; }
  // A call on stream s (DeviceCall, src/nccl/device_state.h): spccl's device buffers (the
  // communicator's and its compressors' scratch and residuals, scratch_)
  // serve every call whatever its stream, so a call first waits for the
  // event the previous call's end recorded on its stream. Neither
  // happens on a stream capturing a graph (a wait would join the captures;
  // SPCCL_CAPACITY_MODE=fixed graphs are captured and replayed by the caller,
  // who orders them).
  Status beginCall(cudaStream_t s);
  void endCall();
  // Whether the current call's stream is capturing a CUDA graph.
  bool capturing() const { return capturing_; }

  Status allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                        spcclRedOp_t op) override;
  Status allGather(const void* send, size_t bytes, void* recv) override;
  Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                    const size_t* recvOffsets) override;
  Status allToAll(const void* send, size_t bytes, void* recv) override;
  Status allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                   const size_t* recvBytes, const size_t* recvOffsets) override;

 private:
  NcclTransport() = default;
  // *send, `bytes` long, copied to scratch_ and *send pointed there: for a
  // send buffer that overlaps the receive buffer other than in the call's
  // in-place form (sendNeedsMove), which NCCL would read after writing it.
  // (cudaMemcpy of overlapping ranges is undefined, so no move in place.)
  Status stageSend(const void** send, size_t bytes);
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool capturing_ = false;             // stream_ is capturing a graph (asked in beginCall)
  cudaEvent_t lastCallEnd_ = nullptr;  // recorded at the end of the last call not in a capture
  bool lastCallRecorded_ = false;
  void* scratch_ = nullptr;  // a copy of send data that overlaps the receive buffer (stageSend)
  size_t scratchBytes_ = 0;
  bool scratchCaptured_ = false;  // a graph captured a copy into scratch_: never freed while the transport lives
  std::vector<void*> retired_;    // scratch buffers outgrown after a capture used them (freed with the transport)

 public:
  ~NcclTransport() override;
};

}  // namespace spccl
