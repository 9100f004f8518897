// Replaces the global operator new and delete of the binary that includes it
// (include it in exactly one translation unit), for tests that count heap
// allocations. Every form of operator new first calls the including file's
//   void onAllocation(const void* caller);
// (caller: the return address of operator new, so that a test may count only
// some callers' allocations), then takes the memory from std::malloc or
// posix_memalign; every delete frees it with std::free.
#ifndef SPCCL_TESTS_COMMON_REPLACE_NEW_H_
#define SPCCL_TESTS_COMMON_REPLACE_NEW_H_

#include <cstddef>
#include <cstdlib>
#include <new>

void onAllocation(const void* caller);

namespace spccl_replace_new {
inline void* allocate(std::size_t bytes, std::size_t align, const void* caller) {
  onAllocation(caller);
  if (bytes == 0) bytes = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(bytes);
  } else if (posix_memalign(&p, align, bytes) != 0) {
    p = nullptr;
  }
  return p;
}
// Out of line, so that GCC does not pair an inlined operator new with this
// free (-Wmismatched-new-delete): both ends are the including binary's.
[[gnu::noinline]] inline void release(void* p) noexcept { std::free(p); }
}  // namespace spccl_replace_new

#define SPCCL_NEW_CALLER __builtin_return_address(0)
void* operator new(std::size_t n) {
  if (void* p = spccl_replace_new::allocate(n, 0, SPCCL_NEW_CALLER)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = spccl_replace_new::allocate(n, 0, SPCCL_NEW_CALLER)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = spccl_replace_new::allocate(n, static_cast<std::size_t>(a), SPCCL_NEW_CALLER)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) {
  if (void* p = spccl_replace_new::allocate(n, static_cast<std::size_t>(a), SPCCL_NEW_CALLER)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return spccl_replace_new::allocate(n, 0, SPCCL_NEW_CALLER);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return spccl_replace_new::allocate(n, 0, SPCCL_NEW_CALLER);
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return spccl_replace_new::allocate(n, static_cast<std::size_t>(a), SPCCL_NEW_CALLER);
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return spccl_replace_new::allocate(n, static_cast<std::size_t>(a), SPCCL_NEW_CALLER);
}
#undef SPCCL_NEW_CALLER
void operator delete(void* p) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p) noexcept { spccl_replace_new::release(p); }
void operator delete(void* p, std::size_t) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p, std::size_t) noexcept { spccl_replace_new::release(p); }
void operator delete(void* p, std::align_val_t) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { spccl_replace_new::release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { spccl_replace_new::release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { spccl_replace_new::release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { spccl_replace_new::release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { spccl_replace_new::release(p); }

#endif  // SPCCL_TESTS_COMMON_REPLACE_NEW_H_
