// Device-side state of the NCCL path (src/nccl): memory owners, the
// communicator's state, and the helpers every device collective shares.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_executor.h"
#include "kernels/cuda/cuda_kernels.h"
#include "codec/codec.h"
#include "src/comm.h"
#include "transport/nccl_transport.h"
#include "kernels/core/status.h"

namespace spccl {

// Grow-only device allocation (freed with its owner).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  // Callers make sure no queued work still uses the old allocation
  // (cudaFree waits for the device; growth happens only after a
  // stream synchronisation or on the first call).
  Status ensure(size_t bytes) {
    if (bytes <= bytes_ && ptr_ != nullptr) return Status::ok();
    if (ptr_ != nullptr) SPCCL_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
    SPCCL_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 256)));
    bytes_ = std::max<size_t>(bytes, 256);
    return Status::ok();
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedMemory {
 public:
  PinnedMemory() = default;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  ~PinnedMemory() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  Status ensure(size_t bytes, unsigned flags = cudaHostAllocDefault) {
    if (bytes <= bytes_ && ptr_ != nullptr) return Status::ok();
    if (ptr_ != nullptr) SPCCL_CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
    SPCCL_CUDA_CHECK(cudaHostAlloc(&ptr_, bytes, flags));
    bytes_ = bytes;
    return Status::ok();
  }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Makes the communicator's device current for the length of a call.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      if (cudaSetDevice(device) == cudaSuccess) switched_ = true;
    }
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// One device call: on the transport's device for its scope, and on the
// caller's stream from begin() (NcclTransport::beginCall: after what the
// previous call enqueued); the end of the scope marks where the next call
// waits (endCall), while the device is still set.
class DeviceCall {
 public:
  explicit DeviceCall(NcclTransport& t) : guard_(t.device()), t_(t) {}
  DeviceCall(const DeviceCall&) = delete;
  DeviceCall& operator=(const DeviceCall&) = delete;
  ~DeviceCall() {
    if (began_) t_.endCall();
  }
  Status begin(cudaStream_t s) {
    SPCCL_RETURN_IF_ERROR(t_.beginCall(s));
    began_ = true;
    return Status::ok();
  }

 private:
  DeviceGuard guard_;
  NcclTransport& t_;
  bool began_ = false;
};

struct DeviceCommState {
  NcclTransport* transport = nullptr;      // owned by the comm
  cuda::CudaExecutor* executor = nullptr;  // the comm's (comm->executor), set to each call's stream
  bool pageableAccess = false;  // the device reads pageable host memory (HMM, ATS): checkDeviceMemory passes all
  PinnedMemory staging;         // exact collectives: small host copies
};

inline NcclTransport& transportOf(spcclComm* comm) { return *static_cast<NcclTransport*>(comm->transport.get()); }

// Runs fn, one of the shared collectives (collectives/, src/compressor.cc),
// on the communicator's CUDA executor on the caller's stream, ordered after
// the previous call (DeviceCall).
template <typename F>
Status onStream(spcclComm* comm, cudaStream_t stream, F&& fn) {
  DeviceCall deviceCall(transportOf(comm));
  SPCCL_RETURN_IF_ERROR(deviceCall.begin(stream));
  comm->device->executor->setStream(stream);
  return fn();
}

}  // namespace spccl
