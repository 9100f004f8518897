#include "perf/gpu/bench_fill.h"

#include <cuda_runtime.h>

namespace {

__device__ __forceinline__ uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fillKernel(float* p, size_t n, uint64_t seed, float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint64_t r = splitmix(seed ^ (i * 0x2545f4914f6cdd1dull));
    const float u1 = (static_cast<float>(r & 0xffffff) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = static_cast<float>((r >> 24) & 0xffffff) * (1.0f / 16777216.0f);
    float x = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    if (((r >> 48) & 1023u) == 0) x *= 100.0f;
    p[i] = x * scale;
  }
}

}  // namespace

cudaError_t benchFill(float* p, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  fillKernel<<<4 * sms, 256, 0, stream>>>(p, n, seed, scale);
  return cudaGetLastError();
}
