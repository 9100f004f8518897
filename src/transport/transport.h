// The byte-moving interface the collective algorithms are written against.
// Implementations: MPI (host buffers, src/transport/mpi_transport.cc); the
// NCCL transport of the GPU path implements the same calls on device memory.
//
// All sizes are in bytes and must be multiples of 8 (streams are padded), so
// the MPI transport can move up to 16 GiB per peer with int counts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "src/status.h"

namespace spccl {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Exact dense allreduce of the user's buffer (sendbuff may equal recvbuff).
  virtual Status allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                spcclRedOp_t op) = 0;
  // Every rank contributes `bytes`; recv holds size()*bytes, rank order. In
  // place when send == recv + rank()*bytes.
  virtual Status allGather(const void* send, size_t bytes, void* recv) = 0;
  // Rank r contributes recvBytes[r] bytes placed at recv + recvOffsets[r].
  virtual Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                            const size_t* recvOffsets) = 0;
  // Block j of `bytes` goes to rank j. In place when send == recv.
  virtual Status allToAll(const void* send, size_t bytes, void* recv) = 0;
  virtual Status allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                           const size_t* recvBytes, const size_t* recvOffsets) = 0;
};

}  // namespace spccl
