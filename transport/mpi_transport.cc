#include "transport/mpi_transport.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "kernels/core/elementwise.h"
#include "kernels/host/host_kernels.h"
#include "transport/device.h"
#include "kernels/core/types.h"

namespace spccl {

namespace {

// MPI has no fp16/bf16 types: dense reductions of them use user ops that
// widen to fp32, combine, and round back (nearest even), like NCCL does.
template <bool kBf16>
float widen(uint16_t h) {
  return kBf16 ? core::bfloat16BitsToFloat(h) : core::halfBitsToFloat(h);
}
template <bool kBf16>
uint16_t narrow(float f) {
  return kBf16 ? core::floatToBfloat16Bits(f) : core::floatToHalfBits(f);
}

template <bool kBf16, int kOp>
void halfReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = widen<kBf16>(a[i]), y = widen<kBf16>(b[i]);
    float r;
    if constexpr (kOp == spcclSum) r = x + y;
    else if constexpr (kOp == spcclProd) r = x * y;
    else if constexpr (kOp == spcclMax) r = std::max(x, y);
    else r = std::min(x, y);
    b[i] = narrow<kBf16>(r);
  }
}

using HalfFn = void (*)(void*, void*, int*, MPI_Datatype*);
constexpr HalfFn kHalfFns[2][4] = {
    {halfReduce<false, spcclSum>, halfReduce<false, spcclProd>, halfReduce<false, spcclMax>,
     halfReduce<false, spcclMin>},
    {halfReduce<true, spcclSum>, halfReduce<true, spcclProd>, halfReduce<true, spcclMax>, halfReduce<true, spcclMin>},
};

MPI_Datatype mpiType(spcclDataType_t t) {
  switch (t) {
    case spcclInt8:
      return MPI_INT8_T;
    case spcclUint8:
      return MPI_UINT8_T;
    case spcclInt32:
      return MPI_INT32_T;
    case spcclUint32:
      return MPI_UINT32_T;
    case spcclInt64:
      return MPI_INT64_T;
    case spcclUint64:
      return MPI_UINT64_T;
    case spcclFloat32:
      return MPI_FLOAT;
    case spcclFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpiOp(spcclRedOp_t op) {
  switch (op) {
    case spcclProd:
      return MPI_PROD;
    case spcclMax:
      return MPI_MAX;
    case spcclMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // sum, and avg = sum then divide
  }
}

template <typename T>
void divideAll(void* buf, size_t n, int p) {
  T* x = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / static_cast<T>(p));
}

void divideByRanks(void* buf, size_t n, spcclDataType_t t, int p) {
  switch (t) {
    case spcclInt8:
      return divideAll<int8_t>(buf, n, p);
    case spcclUint8:
      return divideAll<uint8_t>(buf, n, p);
    case spcclInt32:
      return divideAll<int32_t>(buf, n, p);
    case spcclUint32:
      return divideAll<uint32_t>(buf, n, p);
    case spcclInt64:
      return divideAll<int64_t>(buf, n, p);
    case spcclUint64:
      return divideAll<uint64_t>(buf, n, p);
    case spcclFloat32:
      return divideAll<float>(buf, n, p);
    case spcclFloat64:
      return divideAll<double>(buf, n, p);
    case spcclFloat16:
    case spcclBfloat16: {
      auto* h = static_cast<uint16_t*>(buf);
      const bool bf = t == spcclBfloat16;
      for (size_t i = 0; i < n; ++i) {
        const float f = (bf ? core::bfloat16BitsToFloat(h[i]) : core::halfBitsToFloat(h[i])) / static_cast<float>(p);
        h[i] = bf ? core::floatToBfloat16Bits(f) : core::floatToHalfBits(f);
      }
      return;
    }
    default:
      return;
  }
}

constexpr size_t kMaxChunk = size_t{1} << 30;  // elements per MPI call: int counts

// A send buffer that overlaps the receive buffer without being the call's
// in-place form would reach MPI aliased (erroneous in MPI; silently wrong
// results in Open MPI). Host memory: the send data is moved to where the
// in-place form expects it (memmove handles the overlap), so the call runs
// in place and gives what separate buffers give. Returns whether it did.
bool moveIntoPlace(const void* send, size_t sendBytes, void* slot, const void* recv, size_t recvBytes) {
  if (!sendNeedsMove(send, sendBytes, slot, recv, recvBytes) || isDevicePointer(send)) return false;
  std::memmove(slot, send, sendBytes);
  return true;
}

}  // namespace

// The collectives below call PMPI_* directly: spccl's own traffic must never
// come back through an interposed MPI_Allreduce/MPI_Alltoall/MPI_Allgather
// (interpose/mpi_interpose.cc, libspccl_mpi.so), which would compress an
// exact path the caller asked for, or recurse. The cost: a PMPI-based
// profiler does not see these collectives as MPI_* calls.
// Object creation and frees stay on MPI_* (tests/sanitize counts them).

Status MpiTransport::create(MPI_Comm parent, std::unique_ptr<MpiTransport>* out) {
  std::unique_ptr<MpiTransport> t(new MpiTransport());
  // The same group in the same order, without MPI_Comm_dup: a duplicate
  // copies the parent's attributes, so the program's attribute copy and
  // delete callbacks would run on spccl's private communicator (when the
  // interposer, libspccl_mpi.so, makes one inside an intercepted call, say).
  // MPI_Comm_split copies none.
  int parentRank = 0;
  SPCCL_MPI_CHECK(MPI_Comm_rank(parent, &parentRank));
  SPCCL_MPI_CHECK(MPI_Comm_split(parent, 0, parentRank, &t->comm_));
  SPCCL_MPI_CHECK(MPI_Comm_set_errhandler(t->comm_, MPI_ERRORS_RETURN));
  SPCCL_MPI_CHECK(MPI_Comm_rank(t->comm_, &t->rank_));
  SPCCL_MPI_CHECK(MPI_Comm_size(t->comm_, &t->size_));
  SPCCL_MPI_CHECK(MPI_Type_contiguous(8, MPI_BYTE, &t->word_));
  SPCCL_MPI_CHECK(MPI_Type_commit(&t->word_));
  SPCCL_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &t->half_));
  SPCCL_MPI_CHECK(MPI_Type_commit(&t->half_));
  SPCCL_MPI_CHECK(MPI_Type_contiguous(4, MPI_BYTE, &t->quad_));
  SPCCL_MPI_CHECK(MPI_Type_commit(&t->quad_));
  for (int b = 0; b < 2; ++b)
    for (int o = 0; o < 4; ++o) SPCCL_MPI_CHECK(MPI_Op_create(kHalfFns[b][o], 1, &t->halfOps_[b][o]));
  t->counts_.resize(t->size_);
  t->displs_.resize(t->size_);
  t->rcounts_.resize(t->size_);
  t->rdispls_.resize(t->size_);
  *out = std::move(t);
  return Status::ok();
}

MpiTransport::~MpiTransport() {
  // Frees are local; after MPI_Finalize they are skipped (nothing left to free).
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& row : halfOps_)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (quad_ != MPI_DATATYPE_NULL) MPI_Type_free(&quad_);
  if (half_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_);
  if (word_ != MPI_DATATYPE_NULL) MPI_Type_free(&word_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Status MpiTransport::allReduceDense(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                                    spcclRedOp_t op) {
  const bool half = type == spcclFloat16 || type == spcclBfloat16;
  if (half && op == spcclAvg) {
    // Summed in the 16-bit type, an average that fits overflows when the sum
    // does not (2 x 40000 in fp16 is +Inf): the ranks' values are widened to
    // fp32, summed and divided there, and rounded once, as the compressed
    // path does (and as ncclAvg's pre-multiplied sum does not overflow).
    if (widened_.size() < count) widened_.resize(count);
    host::loadFloats(sendbuff, type, count, widened_.data());
    SPCCL_RETURN_IF_ERROR(allReduceDense(widened_.data(), widened_.data(), count, spcclFloat32, spcclAvg));
    host::storeFloats(widened_.data(), count, type, recvbuff);
    return Status::ok();
  }
  const MPI_Datatype dt = half ? half_ : mpiType(type);
  const int opIndex = op == spcclAvg ? 0 : static_cast<int>(op);
  const MPI_Op mop = half ? halfOps_[type == spcclBfloat16][opIndex] : mpiOp(op);
  const size_t esize = dataTypeSize(type);
  if (moveIntoPlace(sendbuff, count * esize, recvbuff, recvbuff, count * esize)) sendbuff = recvbuff;
  for (size_t off = 0; off < count; off += kMaxChunk) {
    const int n = static_cast<int>(std::min(kMaxChunk, count - off));
    char* r = static_cast<char*>(recvbuff) + off * esize;
    const void* s = sendbuff == recvbuff ? MPI_IN_PLACE : static_cast<const char*>(sendbuff) + off * esize;
    SPCCL_MPI_CHECK(PMPI_Allreduce(s, r, n, dt, mop, comm_));
  }
  if (op == spcclAvg) divideByRanks(recvbuff, count, type, size_);
  return Status::ok();
}

Status MpiTransport::toWords(const size_t* bytes, const size_t* offsets, std::vector<int>* counts,
                             std::vector<int>* displs) const {
  for (int r = 0; r < size_; ++r) {
    if (bytes[r] % 8 != 0 || offsets[r] % 8 != 0)
      return internalError(
          formatString("transport: block of %zu bytes at %zu is not 8-byte aligned", bytes[r], offsets[r]));
    if (bytes[r] / 8 > static_cast<size_t>(INT_MAX) || offsets[r] / 8 > static_cast<size_t>(INT_MAX))
      return invalidUsage(
          formatString("transport: a %zu-byte exchange exceeds MPI's int count limit (16 GiB)", bytes[r]));
    (*counts)[r] = static_cast<int>(bytes[r] / 8);
    (*displs)[r] = static_cast<int>(offsets[r] / 8);
  }
  return Status::ok();
}

size_t blockUnit(size_t bytes) {
  for (size_t unit : {size_t{1}, size_t{2}, size_t{4}, size_t{8}})
    if (bytes % unit == 0 && bytes / unit <= static_cast<size_t>(INT_MAX)) return unit;
  return 0;
}

Status MpiTransport::blockType(size_t bytes, MPI_Datatype* type, int* count) const {
  const size_t unit = blockUnit(bytes);
  if (unit == 0)
    return invalidUsage(formatString("transport: a %zu-byte block per rank exceeds MPI's int count limit", bytes));
  *type = unit == 1 ? MPI_BYTE : unit == 2 ? half_ : unit == 4 ? quad_ : word_;
  *count = static_cast<int>(bytes / unit);
  return Status::ok();
}

Status MpiTransport::allGather(const void* send, size_t bytes, void* recv) {
  MPI_Datatype type;
  int count;
  SPCCL_RETURN_IF_ERROR(blockType(bytes, &type, &count));
  // In place when this rank's block already sits at its slot of recv.
  char* slot = static_cast<char*>(recv) + static_cast<size_t>(rank_) * bytes;
  const bool inPlace = send == slot || moveIntoPlace(send, bytes, slot, recv, static_cast<size_t>(size_) * bytes);
  SPCCL_MPI_CHECK(PMPI_Allgather(inPlace ? MPI_IN_PLACE : send, count, type, recv, count, type, comm_));
  return Status::ok();
}

Status MpiTransport::allGatherV(const void* send, size_t sendBytes, void* recv, const size_t* recvBytes,
                                const size_t* recvOffsets) {
  SPCCL_RETURN_IF_ERROR(toWords(recvBytes, recvOffsets, &rcounts_, &rdispls_));
  if (sendBytes != recvBytes[rank_]) return internalError("transport: allGatherV send size disagrees with its slot");
  SPCCL_MPI_CHECK(PMPI_Allgatherv(send, rcounts_[rank_], word_, recv, rcounts_.data(), rdispls_.data(), word_, comm_));
  return Status::ok();
}

Status MpiTransport::allToAll(const void* send, size_t bytes, void* recv) {
  MPI_Datatype type;
  int count;
  SPCCL_RETURN_IF_ERROR(blockType(bytes, &type, &count));
  const size_t all = static_cast<size_t>(size_) * bytes;
  if (moveIntoPlace(send, all, recv, recv, all)) send = recv;
  SPCCL_MPI_CHECK(PMPI_Alltoall(send == recv ? MPI_IN_PLACE : send, count, type, recv, count, type, comm_));
  return Status::ok();
}

Status MpiTransport::allToAllV(const void* send, const size_t* sendBytes, const size_t* sendOffsets, void* recv,
                               const size_t* recvBytes, const size_t* recvOffsets) {
  SPCCL_RETURN_IF_ERROR(toWords(sendBytes, sendOffsets, &counts_, &displs_));
  SPCCL_RETURN_IF_ERROR(toWords(recvBytes, recvOffsets, &rcounts_, &rdispls_));
  SPCCL_MPI_CHECK(PMPI_Alltoallv(send, counts_.data(), displs_.data(), word_, recv, rcounts_.data(), rdispls_.data(),
                                 word_, comm_));
  return Status::ok();
}

}  // namespace spccl
