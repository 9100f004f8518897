// Wire values into the fp32 accumulator (kernels/cuda/accumulate.cu's twin;
// pairs streams are decoded by sections.cc's reduceSections, raw pair slots here).
#include "kernels/host/host_kernels.h"

#include <cstdint>

#include "kernels/host/host_common.h"

namespace spccl::host {

using core::Pick;
using core::ValueType;
using namespace detail;

void denseAccumulate(const void* values, ValueType vt, uint64_t len, float* dst, int scaleExp) {
  withWire(vt, [&](auto wire) {
    for (uint64_t i = 0; i < len; ++i) dst[i] += core::loadWireValue(values, i, decltype(wire)::value, scaleExp);
  });
}

uint64_t deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin) {
  uint64_t total = 0;
  for (uint64_t j = 0; j < nnz; ++j) total += core::varintBytes(core::deltaGap(indices, j, rangeBegin));
  return total;
}

bool accumulatePairs(const uint32_t* indices, const void* values, ValueType vt, uint64_t nnz, float* out, size_t n) {
  return withWire(vt, [&](auto wire) {
    for (uint64_t i = 0; i < nnz; ++i) {
      const uint32_t index = indices[i];
      if (index >= n || (i > 0 && index <= indices[i - 1])) return false;
      out[index] += core::loadWireValue(values, i, decltype(wire)::value, 0);
    }
    return true;
  });
}

void flushResidual(const float* v, float* residual, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = v[i] + residual[i];
    residual[i] = 0.0f;
  }
}

void divideFloats(float* x, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) x[i] /= divisor;
}

}  // namespace spccl::host
