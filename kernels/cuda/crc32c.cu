// CRC32C of a stream in device memory (kernels/host/crc32c.cc's twin): the
// stream in pieces, one thread per piece with a byte table in shared memory,
// each piece's CRC shifted by the bytes after it and all xor-ed together
// (CRCs are linear: kernels/core/crc32c.h). A debugging feature's checksum,
// so simple rather than fast: each piece is read a byte at a time.
#include <algorithm>

#include "kernels/core/crc32c.h"
#include "kernels/core/elementwise.h"
#include "kernels/cuda/cuda_common.cuh"

namespace spccl::cuda {

namespace {

constexpr int kThreads = 256;
constexpr uint64_t kMinPiece = 1024, kMaxPieces = 16384;

uint64_t pieceBytes(uint64_t bytes) { return std::max<uint64_t>(kMinPiece, (bytes + kMaxPieces - 1) / kMaxPieces); }
uint64_t pieceCount(uint64_t bytes) { return (bytes + pieceBytes(bytes) - 1) / pieceBytes(bytes); }

__global__ void setFlagKernel(unsigned char* data, uint64_t at, uint8_t flag) { data[at] |= flag; }

// *acc ^= each piece's raw CRC (register from 0, no final xor) times x^(8
// bytes after the piece): by linearity, the raw CRC of the whole stream. The
// 4 bytes at skipAt read as zero. One thread per piece, each warp's share
// xor-reduced before one atomic.
__global__ void __launch_bounds__(kThreads) crcPiecesKernel(const unsigned char* data, uint64_t bytes, uint64_t skipAt,
                                                            uint64_t piece, uint64_t pieces, unsigned int* acc) {
  __shared__ uint32_t table[256];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) table[i] = core::crc32cTableEntry(i);
  __syncthreads();
  uint32_t mine = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t p = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x; p < pieces; p += stride) {
    const uint64_t begin = p * piece, end = begin + piece < bytes ? begin + piece : bytes;
    uint32_t c = 0;
    for (uint64_t j = begin; j < end; ++j) {
      const uint32_t b = j - skipAt < 4 ? 0u : data[j];  // (unsigned: j in [skipAt, skipAt + 4))
      c = (c >> 8) ^ table[(c ^ b) & 0xffu];
    }
    mine ^= core::crc32cMultModP(c, core::crc32cXPow8n(bytes - end));
  }
  for (int lane = 16; lane > 0; lane >>= 1) mine ^= __shfl_xor_sync(0xffffffffu, mine, lane);
  if ((threadIdx.x & 31u) == 0 && mine != 0) atomicXor(acc, mine);
}

// One thread: the CRC32C from the stream's raw CRC (the register started at
// ~0: its share is ~0 times x^(8 bytes)), to *out and/or, little endian as
// the host stores it, to stream + storeAt; then the test's flip.
__global__ void crcFinishKernel(const unsigned int* acc, uint64_t bytes, uint32_t* out, unsigned char* stream,
                                uint64_t storeAt, uint64_t flipAt) {
  const uint32_t crc = ~(core::crc32cMultModP(~0u, core::crc32cXPow8n(bytes)) ^ *acc);
  if (out != nullptr) *out = crc;
  if (stream != nullptr) {
    for (int k = 0; k < 4; ++k) stream[storeAt + k] = static_cast<unsigned char>(crc >> (8 * k));
    if (flipAt < bytes) stream[flipAt] ^= 0x10;
  }
}

__global__ void flipKernel(unsigned char* data, uint64_t at) { data[at] ^= 0x10; }

Status checkCrcArgs(uint64_t bytes, uint64_t skipAt, size_t workspaceBytes, const void* workspace) {
  if (bytes < skipAt + 4) return invalidArgument("crc32c: the checksum field lies past the stream");
  if (workspace == nullptr || workspaceBytes < sizeof(unsigned int))
    return invalidArgument("crc32c: workspace smaller than crc32cWorkspaceBytes(bytes)");
  return Status::ok();
}

Status launchCrc(const unsigned char* data, uint64_t bytes, uint64_t skipAt, uint32_t* out, unsigned char* stream,
                 uint64_t flipAt, void* workspace, cudaStream_t s) {
  const uint64_t piece = pieceBytes(bytes), pieces = pieceCount(bytes);
  auto* acc = static_cast<unsigned int*>(workspace);
  SPCCL_CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof *acc, s));
  crcPiecesKernel<<<detail::gridFor(pieces, kThreads), kThreads, 0, s>>>(data, bytes, skipAt, piece, pieces, acc);
  SPCCL_CUDA_CHECK_LAUNCH();
  crcFinishKernel<<<1, 1, 0, s>>>(acc, bytes, out, stream, skipAt, flipAt);
  SPCCL_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace

size_t crc32cWorkspaceBytes(uint64_t) { return sizeof(unsigned int); }

Status streamCrc32c(const void* data, uint64_t bytes, uint64_t skipAt, uint32_t* out, void* workspace,
                    size_t workspaceBytes, cudaStream_t stream) {
  SPCCL_RETURN_IF_ERROR(checkCrcArgs(bytes, skipAt, workspaceBytes, workspace));
  return launchCrc(static_cast<const unsigned char*>(data), bytes, skipAt, out, nullptr, ~uint64_t{0}, workspace,
                   stream);
}

Status sealCrc32c(void* data, uint64_t bytes, uint64_t flagAt, uint8_t flag, uint64_t skipAt, uint64_t flipAt,
                  void* workspace, size_t workspaceBytes, cudaStream_t stream) {
  auto* p = static_cast<unsigned char*>(data);
  if (flag == 0) {
    if (flipAt < bytes) {
      flipKernel<<<1, 1, 0, stream>>>(p, flipAt);
      SPCCL_CUDA_CHECK_LAUNCH();
    }
    return Status::ok();
  }
  SPCCL_RETURN_IF_ERROR(checkCrcArgs(bytes, skipAt, workspaceBytes, workspace));
  if (flagAt >= bytes) return invalidArgument("crc32c: the flag lies past the stream");
  setFlagKernel<<<1, 1, 0, stream>>>(p, flagAt, flag);
  SPCCL_CUDA_CHECK_LAUNCH();
  return launchCrc(p, bytes, skipAt, nullptr, p, flipAt, workspace, stream);
}

}  // namespace spccl::cuda
