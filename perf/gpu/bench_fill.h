// Device-side random fill for kernel_bench (a kernel needs nvcc; the
// benchmark itself is host C++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// p[i] = scale * (roughly normal, every ~1000th entry 100x larger), from a
// counter-based hash of (seed, i): the same data for the same seed.
cudaError_t benchFill(float* p, size_t n, uint64_t seed, float scale, cudaStream_t stream);
