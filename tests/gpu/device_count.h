// CUDA devices visible to this process (0 when the runtime finds none or
// fails: the NCCL tests then skip), for the NCCL test binaries.
#ifndef SPCCL_TESTS_GPU_DEVICE_COUNT_H_
#define SPCCL_TESTS_GPU_DEVICE_COUNT_H_

#include <cuda_runtime_api.h>

inline int deviceCount() {
  int c = 0;
  if (cudaGetDeviceCount(&c) != cudaSuccess) {
    (void)cudaGetLastError();
    c = 0;
  }
  return c;
}

#endif  // SPCCL_TESTS_GPU_DEVICE_COUNT_H_
