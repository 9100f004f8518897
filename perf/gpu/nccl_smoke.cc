// NCCL smoke test on one rank: a communicator from a fresh unique id, one
// ncclAllReduce (sum over one rank: the input comes back unchanged), checked
// on the host. Exit 0: ok; 1: NCCL or CUDA failed or the result is wrong;
// prints a line saying which.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <vector>

#define SMOKE_CUDA(call)                                                          \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      std::printf("nccl_smoke: FAILED: %s: %s\n", #call, cudaGetErrorString(e_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)
#define SMOKE_NCCL(call)                                                          \
  do {                                                                            \
    ncclResult_t r_ = (call);                                                     \
    if (r_ != ncclSuccess) {                                                      \
      std::printf("nccl_smoke: FAILED: %s: %s\n", #call, ncclGetErrorString(r_)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main() {
  int version = 0;
  SMOKE_NCCL(ncclGetVersion(&version));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("nccl_smoke: no CUDA device (NCCL %d linked)\n", version);
    return 1;
  }
  SMOKE_CUDA(cudaSetDevice(0));
  ncclUniqueId id;
  SMOKE_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm;
  SMOKE_NCCL(ncclCommInitRank(&comm, 1, id, 0));
  const size_t n = size_t{1} << 20;
  std::vector<float> in(n), out(n, -1.0f);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1009) * 0.25f - 100.0f;
  float *dIn = nullptr, *dOut = nullptr;
  SMOKE_CUDA(cudaMalloc(&dIn, n * sizeof(float)));
  SMOKE_CUDA(cudaMalloc(&dOut, n * sizeof(float)));
  cudaStream_t stream;
  SMOKE_CUDA(cudaStreamCreate(&stream));
  SMOKE_CUDA(cudaMemcpy(dIn, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  SMOKE_NCCL(ncclAllReduce(dIn, dOut, n, ncclFloat, ncclSum, comm, stream));
  SMOKE_CUDA(cudaStreamSynchronize(stream));
  SMOKE_CUDA(cudaMemcpy(out.data(), dOut, n * sizeof(float), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += out[i] != in[i];
  SMOKE_NCCL(ncclCommDestroy(comm));
  cudaFree(dIn);
  cudaFree(dOut);
  cudaStreamDestroy(stream);
  if (bad != 0) {
    std::printf("nccl_smoke: FAILED: %zu of %zu elements differ after a one-rank allreduce\n", bad, n);
    return 1;
  }
  std::printf("nccl_smoke: ok (NCCL %d, one rank, ncclAllReduce of %zu floats)\n", version, n);
  return 0;
}
