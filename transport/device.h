// Where a buffer lives, and whether MPI can take device memory. Used by the
// entry points of MPI communicators (host buffers) to reject device buffers
// with a clear error instead of letting host code fault on them.
#pragma once

namespace spccl {

// True when p is CUDA device memory (cudaMalloc and friends; managed memory
// is host-accessible and counts as host). Asks the CUDA driver, and only if
// the process has already loaded it: a process without libcuda has no device
// memory, so CPU-only runs never initialise CUDA here.
bool isDevicePointer(const void* p);

// True when the MPI library says it accepts CUDA device buffers (Open MPI's
// MPIX_Query_cuda_support; false where the MPI cannot tell).
bool mpiCudaAware();

}  // namespace spccl
