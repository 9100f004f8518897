// Receive side and conversions: received streams into the fp32 accumulator
// (one stream per launch, launched in rank order by the caller: the sum is
// the host's, in the host's order), user float buffers <-> fp32, and the
// average's division.
// Plus the host-side helpers of the CUDA back end (errors, device queries).
#include <cub/block/block_reduce.cuh>
#include <cstdio>
#include <string>

#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

Status cudaFailure(cudaError_t err, const char* call, const char* file, int line) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "CUDA call %s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorName(err),
                cudaGetErrorString(err));
  return Status(spcclUnhandledCudaError, buf);
}

namespace detail {

int multiprocessorCount() {
  constexpr int kMaxDevices = 64;
  thread_local int cached[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0) return 132;
  if (device < kMaxDevices && cached[device] > 0) return cached[device];
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms <= 0) sms = 132;
  if (device < kMaxDevices) cached[device] = sms;
  return sms;
}

}  // namespace detail

namespace {

constexpr int kThreads = 256;

template <core::ValueType kWire>
__global__ void __launch_bounds__(kThreads)
    unpackKernel(const uint32_t* indices, const void* values, uint64_t nnz, const uint64_t* nnzDevice, float* acc,
                 uint64_t accBase, uint64_t accLen, uint32_t* bad) {
  uint64_t count = nnz;
  if (nnzDevice != nullptr && *nnzDevice < count) count = *nnzDevice;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  bool wrong = false;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < count; j += stride) {
    const uint32_t i = indices[j];
    const uint32_t prev = j > 0 ? indices[j - 1] : 0u;
    if (i == kPadIndex) continue;                     // unused slot: checked from the next one's side
    if (j > 0 && (prev == kPadIndex || prev >= i)) {  // a real pair after a pad, or not increasing
      wrong = true;
      continue;
    }
    if (i < accBase || i - accBase >= accLen) {
      wrong = true;
      continue;
    }
    acc[i - accBase] += core::loadWireValue(values, j, kWire);
  }
  if (wrong && bad != nullptr) *bad = 1u;
}

template <core::ValueType kWire>
__global__ void __launch_bounds__(kThreads) denseKernel(const void* values, uint64_t len, float* dst, bool vec) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t groups = vec ? len / 4 : 0;
  for (uint64_t g = first; g < groups; g += stride) {
    float4 d = reinterpret_cast<float4*>(dst)[g];
    d.x += core::loadWireValue(values, 4 * g, kWire);
    d.y += core::loadWireValue(values, 4 * g + 1, kWire);
    d.z += core::loadWireValue(values, 4 * g + 2, kWire);
    d.w += core::loadWireValue(values, 4 * g + 3, kWire);
    reinterpret_cast<float4*>(dst)[g] = d;
  }
  for (uint64_t i = groups * 4 + first; i < len; i += stride) dst[i] += core::loadWireValue(values, i, kWire);
}

template <class In>
__global__ void __launch_bounds__(kThreads) loadKernel(const typename In::Raw* src, uint64_t n, float* dst, bool vec) {
  constexpr int kVec = In::kVec;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t chunks = vec ? n / kVec : 0;
  for (uint64_t c = first; c < chunks; c += stride) {
    float x[kVec];
    detail::load16<In, true>(src + c * kVec, x);
    detail::storeF32<kVec, false>(dst + c * kVec, x);
  }
  for (uint64_t i = chunks * kVec + first; i < n; i += stride) dst[i] = In::convert(src[i]);
}

// fp32 -> fp16/bf16 with the rounding of host::storeFloats (overflow to Inf:
// this is the user's own buffer, not the wire).
template <bool kHalf>
__device__ __forceinline__ uint16_t toUser16(float x) {
  return kHalf ? core::floatToHalfBits(x) : core::floatToBfloat16Bits(x);
}

template <bool kHalf>
__global__ void __launch_bounds__(kThreads) store16Kernel(const float* src, uint64_t n, uint16_t* dst, bool vec) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const uint64_t chunks = vec ? n / 8 : 0;
  for (uint64_t c = first; c < chunks; c += stride) {
    float x[8];
    detail::loadF32<8, true>(src + c * 8, x);
    uint4 u;
    u.x = toUser16<kHalf>(x[0]) | (static_cast<uint32_t>(toUser16<kHalf>(x[1])) << 16);
    u.y = toUser16<kHalf>(x[2]) | (static_cast<uint32_t>(toUser16<kHalf>(x[3])) << 16);
    u.z = toUser16<kHalf>(x[4]) | (static_cast<uint32_t>(toUser16<kHalf>(x[5])) << 16);
    u.w = toUser16<kHalf>(x[6]) | (static_cast<uint32_t>(toUser16<kHalf>(x[7])) << 16);
    reinterpret_cast<uint4*>(dst)[c] = u;
  }
  for (uint64_t i = chunks * 8 + first; i < n; i += stride) dst[i] = toUser16<kHalf>(src[i]);
}

__global__ void __launch_bounds__(kThreads)
    toWireKernel(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst) {
  for (uint64_t j = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; j < n;
       j += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    core::storeWireValue(dst, j, src[j], wire, scaleExp);
}

__global__ void __launch_bounds__(kThreads) flushKernel(const float* v, float* residual, float* out, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    out[i] = v[i] + residual[i];
    residual[i] = 0.0f;
  }
}

// Each block sums its gaps' varint bytes and adds them to *total (integer
// atomics: the order does not change the sum).
__global__ void __launch_bounds__(kThreads)
    deltaBytesKernel(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, unsigned long long* total) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  unsigned long long mine = 0;
  for (uint64_t j = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nnz; j += stride)
    mine += core::varintBytes(core::deltaGap(indices, j, rangeBegin));
  const unsigned long long block = Reduce(temp).Sum(mine);
  if (threadIdx.x == 0 && block != 0) atomicAdd(total, block);
}

__global__ void __launch_bounds__(kThreads) divideKernel(float* x, uint64_t n, float divisor) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    x[i] = x[i] / divisor;  // a division, as the host path does: not a multiply by 1/p
}

}  // namespace

Status unpackAccumulate(const uint32_t* indices, const void* values, core::ValueType vt, uint64_t nnz,
                        const uint64_t* nnzDevice, float* acc, uint64_t accBase, uint64_t accLen, uint32_t* badStream,
                        cudaStream_t stream) {
  if (!detail::isWireType(vt)) return invalidArgument("unpackAccumulate: wire type must be fp32/fp16/bf16");
  if (nnz == 0) return Status::ok();
  if (indices == nullptr || values == nullptr || acc == nullptr)
    return invalidArgument("unpackAccumulate: null buffer");
  const unsigned grid = detail::gridFor(nnz, kThreads * 4u, 8);
  detail::withWire(vt, [&](auto wire) {
    unpackKernel<decltype(wire)::value>
        <<<grid, kThreads, 0, stream>>>(indices, values, nnz, nnzDevice, acc, accBase, accLen, badStream);
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status deltaIndexBytes(const uint32_t* indices, uint64_t nnz, uint64_t rangeBegin, uint64_t* total,
                       cudaStream_t stream) {
  SPCCL_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(uint64_t), stream));
  if (nnz == 0) return Status::ok();
  if (indices == nullptr || total == nullptr) return invalidArgument("deltaIndexBytes: null buffer");
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "atomicAdd on the 64-bit total");
  deltaBytesKernel<<<detail::gridFor(nnz, kThreads * 8u, 8), kThreads, 0, stream>>>(
      indices, nnz, rangeBegin, reinterpret_cast<unsigned long long*>(total));
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status denseAccumulate(const void* values, core::ValueType vt, uint64_t len, float* dst, cudaStream_t stream) {
  if (!detail::isWireType(vt)) return invalidArgument("denseAccumulate: wire type must be fp32/fp16/bf16");
  if (len == 0) return Status::ok();
  if (values == nullptr || dst == nullptr) return invalidArgument("denseAccumulate: null buffer");
  const unsigned grid = detail::gridFor(len, kThreads * 16u, 8);
  const bool vec = detail::aligned16(dst);
  detail::withWire(
      vt, [&](auto wire) { denseKernel<decltype(wire)::value><<<grid, kThreads, 0, stream>>>(values, len, dst, vec); });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status loadFloats(const void* src, spcclDataType_t type, size_t n, float* dst, cudaStream_t stream) {
  if (!detail::isFloatInput(type)) return invalidArgument("loadFloats: type must be fp32/fp16/bf16");
  if (n == 0) return Status::ok();
  if (src == nullptr || dst == nullptr) return invalidArgument("loadFloats: null buffer");
  const unsigned grid = detail::gridFor(n, kThreads * 16u, 8);
  const bool vec = detail::aligned16(src) && detail::aligned16(dst);
  detail::withLoader(type, [&](auto in) {
    using In = decltype(in);
    loadKernel<In><<<grid, kThreads, 0, stream>>>(static_cast<const typename In::Raw*>(src), n, dst, vec);
  });
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status storeFloats(const float* src, size_t n, spcclDataType_t type, void* dst, cudaStream_t stream) {
  if (!detail::isFloatInput(type)) return invalidArgument("storeFloats: type must be fp32/fp16/bf16");
  if (n == 0) return Status::ok();
  if (src == nullptr || dst == nullptr) return invalidArgument("storeFloats: null buffer");
  if (type == spcclFloat32) {
    if (static_cast<const void*>(src) != dst)
      SPCCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  const unsigned grid = detail::gridFor(n, kThreads * 16u, 8);
  const bool vec = detail::aligned16(src) && detail::aligned16(dst);
  auto* d = static_cast<uint16_t*>(dst);
  if (type == spcclFloat16) store16Kernel<true><<<grid, kThreads, 0, stream>>>(src, n, d, vec);
  else store16Kernel<false><<<grid, kThreads, 0, stream>>>(src, n, d, vec);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status toWire(const float* src, uint64_t n, core::ValueType wire, int scaleExp, void* dst, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (!detail::isWireType(wire) && wire != core::ValueType::kFloat8e4m3)
    return invalidArgument("toWire: not a wire value type");
  if (src == nullptr || dst == nullptr) return invalidArgument("toWire: null buffer");
  toWireKernel<<<detail::gridFor(n, kThreads), kThreads, 0, stream>>>(src, n, wire, scaleExp, dst);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status flushResidual(const float* v, float* residual, float* out, size_t n, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (v == nullptr || residual == nullptr || out == nullptr) return invalidArgument("flushResidual: null buffer");
  const auto o = reinterpret_cast<uintptr_t>(out), x = reinterpret_cast<uintptr_t>(v);
  if (o != x && o < x + n * sizeof(float) && x < o + n * sizeof(float))
    return invalidArgument("flushResidual: out overlaps v other than in place");
  flushKernel<<<detail::gridFor(n, kThreads), kThreads, 0, stream>>>(v, residual, out, n);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status divideFloats(float* x, size_t n, float divisor, cudaStream_t stream) {
  if (n == 0) return Status::ok();
  if (x == nullptr) return invalidArgument("divideFloats: null buffer");
  divideKernel<<<detail::gridFor(n, kThreads), kThreads, 0, stream>>>(x, n, divisor);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace spccl::cuda
