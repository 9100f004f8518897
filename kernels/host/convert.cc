// User float buffers <-> fp32 (the conversions of kernels/cuda/accumulate.cu).
#include "kernels/host/host_kernels.h"

#include <algorithm>

#include "kernels/host/host_common.h"

namespace spccl::host {

using core::Pick;
using core::ValueType;
using namespace detail;

void loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst) {
  withLoader(src, type, [&](auto load) {
    for (size_t i = 0; i < n; ++i) dst[i] = load(i);
  });
}

void storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst) {
  switch (type) {
    case spcclFloat16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = core::floatToHalfBits(src[i]);
      break;
    case spcclBfloat16:
      for (size_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = core::floatToBfloat16Bits(src[i]);
      break;
    default:
      if (static_cast<const void*>(src) != dst) std::copy(src, src + n, static_cast<float*>(dst));
  }
}

void toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) {
  for (uint64_t j = 0; j < n; ++j) core::storeWireValue(dst, j, src[j], wire, scaleExp);
}

}  // namespace spccl::host
