#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace spccl {

// The unit, in bytes, in which allGather and allToAll move a block of `bytes`
// per rank: the smallest of 1, 2, 4 and 8 that divides it and leaves a count
// MPI's int holds. A block of up to INT_MAX elements of any datatype has one
// (its element size), as MPI_Allgather / MPI_Alltoall of that datatype would
// take it. 0: none does.
size_t blockUnit(size_t bytes);

class MpiTransport final : public Transport {
 public:
  // Duplicates `parent` and sets MPI_ERRORS_RETURN on the copy.
  static Status create(MPI_Comm parent, std::unique_ptr<MpiTransport>* out);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                        spcclRedOp_t op) override;
  Status allGather(const void* send, size_t bytes, void* recv) override;
  Status allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                    const size_t* recvOffsets) override;
  Status allToAll(const void* send, size_t bytes, void* recv) override;
  Status allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                   const size_t* recvBytes, const size_t* recvOffsets) override;

 private:
  MpiTransport() = default;
  Status blockType(size_t bytes, MPI_Datatype* type, int* count) const;
  Status toWords(const size_t* bytes, const size_t* offsets, std::vector<int>* counts, std::vector<int>* displs) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  MPI_Datatype word_ = MPI_DATATYPE_NULL;  // 8 contiguous bytes
  MPI_Datatype half_ = MPI_DATATYPE_NULL;  // 2 bytes, for fp16/bf16 dense reductions
  MPI_Datatype quad_ = MPI_DATATYPE_NULL;  // 4 contiguous bytes
  MPI_Op halfOps_[2][4] = {};              // [fp16, bf16][sum, prod, max, min]
  std::vector<int> counts_, displs_, rcounts_, rdispls_;
  std::vector<float> widened_;  // fp16/bf16 avg summed in fp32, grown to the largest such call
};

}  // namespace spccl
