// The collectives besides the compressed allreduce: alltoall rows (DCT-MP
// forward and backward), the sparsified allgather, and the row-sparse
// allreduce. Each is written once against the Transport interface and the
// kernels; the communicator lends its scratch buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "include/spccl.h"
#include "kernels/core/elementwise.h"
#include "src/status.h"

struct spcclComm;
struct spcclSelection;

namespace spccl {

struct CallDescriptor;
enum class Collective : uint8_t;

// The call descriptor of an alltoall-rows call (forward or backward), one
// definition for the host path and the NCCL path.
CallDescriptor rowsDescriptor(Collective coll, uint64_t seq, size_t rowsPerPeer, size_t rowLen, spcclDataType_t type,
                              core::ValueType wire);
// The same for the row-sparse allreduce (algorithmSetting: SPCCL_ROWSPARSE_ALGO).
CallDescriptor rowSparseDescriptor(int algorithmSetting, uint64_t seq, size_t rowLen, spcclDataType_t type);

// sel may be nullptr (the selection is not kept).
Status alltoAllRowsForward(spcclComm& comm, const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                           spcclDataType_t type, float density, spcclSelection* sel, spcclStats_t* call);
Status alltoAllRowsBackward(spcclComm& comm, const void* gradSend, void* gradRecv, const spcclSelection& sel,
                            spcclStats_t* call);
Status allGatherTopK(spcclComm& comm, const void* sendbuff, void* recvbuff, size_t sendcount, spcclDataType_t type,
                     float density, spcclStats_t* call);
Status allReduceRowSparse(spcclComm& comm, const int64_t* ids, const void* rows, size_t nrows, size_t rowLen,
                          spcclDataType_t type, int64_t* outIds, void* outRows, size_t outCapacity, size_t* outNrows,
                          spcclStats_t* call);

}  // namespace spccl
