// Dense wire values into the fp32 accumulator (kernels/cuda/accumulate.cu's twin;
// pairs streams are decoded by codec/codec.h's reduceStreams).
#include "kernels/host/host_kernels.h"

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

}  // namespace spccl::host
