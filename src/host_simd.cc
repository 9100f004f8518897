// SPCCL_HOST_SIMD's resolution (declared in src/params.h), kept out of
// src/params.cc so that the parameter table does not need the host kernels
// (the interposers compile the table in, see interpose/CMakeLists.txt).
#include "kernels/host/host_kernels.h"
#include "src/params.h"

namespace spccl {

Status resolveHostSimd(int setting, bool (*available)(host::HostSimd), host::HostSimd* out) {
  using host::HostSimd;
  if (setting == kHostSimdBaseline) {
    *out = HostSimd::kBaseline;
  } else if (setting == kHostSimdAvx512 || setting == kHostSimdAvx2) {
    const HostSimd simd = setting == kHostSimdAvx512 ? HostSimd::kAvx512 : HostSimd::kAvx2;
    if (!available(simd))
      return invalidArgument(formatString("SPCCL_HOST_SIMD=%s: this CPU (or this build) lacks %s; use auto or baseline",
                                          host::hostSimdName(simd),
                                          simd == HostSimd::kAvx512 ? "AVX-512 F, BW, DQ and VL" : "AVX2"));
    *out = simd;
  } else {
    *out = host::widestHostSimd(available);
  }
  return Status::ok();
}

}  // namespace spccl
