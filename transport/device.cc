#include "transport/device.h"

#include <dlfcn.h>
#include <link.h>
#include <mpi.h>

#include <atomic>
#include <cstddef>
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
constexpr int kAttributeMemoryType = 2;    // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kAttributeIsManaged = 8;     // CU_POINTER_ATTRIBUTE_IS_MANAGED (a boolean)
constexpr unsigned kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE

PointerGetAttribute driverQuery() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  auto fn = reinterpret_cast<PointerGetAttribute>(dlsym(lib, "cuPointerGetAttribute"));
  dlclose(lib);  // still loaded by whoever loaded it; RTLD_NOLOAD took a reference
  return fn;
}

// How many objects the dynamic loader has ever loaded (glibc's dlpi_adds, an
// in-memory counter); 0 when this libc does not say.
unsigned long long loadedObjectsEver() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* out) -> int {
        if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
          *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;  // the first object carries the counter: stop there
      },
      &adds);
  return adds;
}

}  // namespace

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  // Found once, kept (libcuda is never unloaded); looked up again while it
  // is absent, since the application may load it after our first call, but
  // only when the loader has loaded something since the last look: a
  // dlopen(RTLD_NOLOAD) of a library that is not there walks the search
  // path on disk (tens of microseconds, on every compressed call).
  static std::atomic<PointerGetAttribute> cached{nullptr};
  static std::atomic<unsigned long long> absentAt{0};  // loader count at the last failed look
  PointerGetAttribute query = cached.load(std::memory_order_acquire);
  if (query == nullptr) {
    const unsigned long long adds = loadedObjectsEver();
    if (adds != 0 && adds == absentAt.load(std::memory_order_relaxed)) return false;
    query = driverQuery();
    if (query == nullptr) {
      absentAt.store(adds, std::memory_order_relaxed);
      return false;
    }
    cached.store(query, std::memory_order_release);
  }
  unsigned type = 0;
  // Host memory the driver does not know gives an error: host.
  if (query(&type, kAttributeMemoryType, reinterpret_cast<uintptr_t>(p)) != 0) return false;
  if (type != kMemoryTypeDevice) return false;
  // Managed memory may report either type wherever its pages are; it is
  // host-accessible, so it is not device memory here.
  unsigned long long managed = 0;  // wide enough whatever width the driver writes the boolean in
  return query(&managed, kAttributeIsManaged, reinterpret_cast<uintptr_t>(p)) != 0 || managed == 0;
}

bool mpiCudaAware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace spccl
