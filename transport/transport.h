// The byte-moving interface the collective algorithms are written against.
// Implementations: MPI (host buffers, transport/mpi_transport.cc); the
// NCCL transport of the GPU path implements the same calls on device memory.
//
// All sizes are in bytes and must be multiples of 8 (streams are padded), so
// the MPI transport can move up to 16 GiB per peer with int counts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "kernels/core/status.h"

namespace spccl {

// Whether a send buffer must be moved before a collective may read it: it
// overlaps the receive buffer [recv, recv + recvBytes) without sitting at
// `slot`, where the call's in-place form expects it. MPI forbids such
// aliasing and NCCL reads what it has already written; both transports then
// move the send data first, so the call gives what separate buffers give.
inline bool sendNeedsMove(const void* send, size_t sendBytes, const void* slot, const void* recv, size_t recvBytes) {
  const auto x = reinterpret_cast<uintptr_t>(send), y = reinterpret_cast<uintptr_t>(recv);
  return send != slot && sendBytes > 0 && recvBytes > 0 && x < y + recvBytes && y < x + sendBytes;
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Exact dense allreduce of the user's buffer (sendbuff may equal recvbuff,
  // or overlap it otherwise: sendNeedsMove).
  virtual Status allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                spcclRedOp_t op) = 0;
  // Every rank contributes `bytes`; recv holds size()*bytes, rank order. In
  // place when send == recv + rank()*bytes; any other overlap: sendNeedsMove.
  virtual Status allGather(const void* send, size_t bytes, void* recv) = 0;
  // Rank r contributes recvBytes[r] bytes placed at recv + recvOffsets[r].
  virtual Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                            const size_t* recvOffsets) = 0;
  // Block j of `bytes` goes to rank j. In place when send == recv; any other
  // overlap: sendNeedsMove.
  virtual Status allToAll(const void* send, size_t bytes, void* recv) = 0;
  virtual Status allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                           const size_t* recvBytes, const size_t* recvOffsets) = 0;
};

}  // namespace spccl
