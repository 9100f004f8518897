#include "kernels/host/host_executor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kernels/host/host_kernels.h"

namespace spccl::host {

namespace {

size_t pageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

HostExecutor::~HostExecutor() {
  for (const ExecBuffer& m : mapped_) munmap(m.ptr, m.bytes);
}

HostExecutor::Open::Open(HostExecutor& e) : e_(e) {
  if (e_.guarded_ && e_.depth_++ == 0) e_.protectAll(true);
}

HostExecutor::Open::~Open() {
  if (e_.guarded_ && --e_.depth_ == 0) e_.protectAll(false);
}

void HostExecutor::protectAll(bool open) {
  // mprotect fails only for addresses this executor did not map: a bug here,
  // and one the next access would show anyway.
  for (const ExecBuffer& m : mapped_) mprotect(m.ptr, m.bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

Status HostExecutor::grow(ExecBuffer* b, size_t bytes) {
  release(b);
  if (!guarded_) {
    // 64-byte aligned, as the SIMD loops like it.
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (p == nullptr) return systemError("host executor: out of host memory");
    b->ptr = p;
    b->bytes = bytes;
    return Status::ok();
  }
  const size_t len = pageRounded(bytes);
  void* p = mmap(nullptr, len, depth_ > 0 ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return systemError("host executor: mmap of guarded memory failed");
  mapped_.push_back(ExecBuffer{p, len});
  b->ptr = p;
  b->bytes = bytes;
  return Status::ok();
}

void HostExecutor::release(ExecBuffer* b) {
  if (b->ptr == nullptr) return;
  if (!guarded_) {
    std::free(b->ptr);
  } else {
    auto it = std::find_if(mapped_.begin(), mapped_.end(), [&](const ExecBuffer& m) { return m.ptr == b->ptr; });
    if (it != mapped_.end()) {
      munmap(it->ptr, it->bytes);
      mapped_.erase(it);
    }
  }
  *b = ExecBuffer{};
}

Status HostExecutor::toHost(void* hostDst, const void* src, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memcpy(hostDst, src, bytes);
  return Status::ok();
}

Status HostExecutor::fromHost(void* dst, const void* hostSrc, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memcpy(dst, hostSrc, bytes);
  return Status::ok();
}

Status HostExecutor::fill(void* dst, unsigned char byte, size_t bytes) {
  Open open(*this);
  if (bytes > 0) std::memset(dst, byte, bytes);
  return Status::ok();
}

Status HostExecutor::kthLargestMagnitude(const void* send, spcclDataType_t type, const float* residual, size_t n,
                                         uint64_t k, ThresholdStats* out) {
  Open open(*this);
  const ThresholdResult r = host::kthLargestMagnitude(send, type, residual, n, k, &scratch_);
  *out = ThresholdStats{r.tauKey, r.above, r.finite};
  return Status::ok();
}

Status HostExecutor::selectPack(const SelectSpec& s, SelectStats* out) {
  Open open(*this);
  SelectArgs a{s.send,     s.inType,  s.residualIn, s.residualOut,  s.n,       s.tauKey, s.tieBudget, s.capacity,
               s.wireType, s.indices, s.values,     s.keepOverflow, s.scaleExp};
  const SelectResult r = host::selectPack(a);
  *out = SelectStats{r.selected, r.finiteSelected};
  return Status::ok();
}

Status HostExecutor::maxFiniteKey(const float* values, uint64_t n, uint32_t* maxKey) {
  Open open(*this);
  *maxKey = host::maxFiniteMagnitudeKey(values, spcclFloat32, nullptr, n);
  return Status::ok();
}

Status HostExecutor::toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) {
  Open open(*this);
  host::toWire(src, n, wire, scaleExp, dst);
  return Status::ok();
}

Status HostExecutor::withMemory(StatusFn fn) {
  Open open(*this);
  return fn();
}

Status HostExecutor::hostOnly(const char*, StatusFn fn) {
  Open open(*this);
  return fn();
}

}  // namespace spccl::host
