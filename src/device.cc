#include "src/device.h"

#include <dlfcn.h>
#include <mpi.h>

#include <atomic>
#include <cstdint>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace spccl {

namespace {

// The driver API's cuPointerGetAttribute, looked up in an already loaded
// libcuda (RTLD_NOLOAD): no link dependency on CUDA, no driver start-up in a
// process that never used CUDA.
using PointerGetAttribute = int (*)(void* data, int attribute, uintptr_t ptr);
constexpr int kAttributeMemoryType = 2;  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

PointerGetAttribute driverQuery() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  auto fn = reinterpret_cast<PointerGetAttribute>(dlsym(lib, "cuPointerGetAttribute"));
  dlclose(lib);  // still loaded by whoever loaded it; RTLD_NOLOAD took a reference
  return fn;
}

}  // namespace

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  // Found once, kept (libcuda is never unloaded); looked up again while it
  // is absent, since the application may load it after our first call.
  static std::atomic<PointerGetAttribute> cached{nullptr};
  PointerGetAttribute query = cached.load(std::memory_order_acquire);
  if (query == nullptr) {
    query = driverQuery();
    if (query == nullptr) return false;
    cached.store(query, std::memory_order_release);
  }
  unsigned type = 0;
  // Host memory the driver does not know gives an error: host.
  if (query(&type, kAttributeMemoryType, reinterpret_cast<uintptr_t>(p)) != 0) return false;
  return type == kMemoryTypeDevice;
}

bool mpiCudaAware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace spccl
