// The C entry points of the collectives: the drop-in allreduce, alltoall and
// allgather, DCT-MP's rows forward and backward, and the row-sparse allreduce.
// Each checks its arguments, picks the exact or compressed path, and runs it on
// the host or the device (src/api_internal.h).
#include "src/api_internal.h"

using namespace spccl;
using namespace spccl::api;

extern "C" {

spcclResult_t spcclAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                             spcclRedOp_t op, spcclComm_t comm, void* stream) {
  return guarded(comm && commAlive(comm) ? comm->rank : -1, [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, op));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, count, dataTypeSize(datatype), hostStream(comm, stream)));
    const Params& p = comm->params;
    if (takesExactPath(*comm, count, datatype, op, p.allreduceDensity) || count < p.minCompressCount) {
      spcclStats_t call{};
      return runExactAllReduce(comm, sendbuff, recvbuff, count, datatype, op, stream, &call);
    }
    auto key = std::make_tuple(recvbuff, count, static_cast<int>(datatype));
    auto it = comm->implicitCompressors.find(key);
    if (it == comm->implicitCompressors.end()) {
      std::unique_ptr<spcclCompressor> c;
      SPCCL_RETURN_IF_ERROR(makeCompressor(comm, count, datatype, configFromParams(p), true, &c));
      registerCompressor(c.get());
      it = comm->implicitCompressors.emplace(key, std::move(c)).first;
      SPCCL_INFO(comm->rank, "implicit compressor for buffer %p, count %zu, %s", recvbuff, count,
                 dataTypeName(datatype));
      warnIfImplicitCompressorsPileUp(*comm);
    }
    return runCompressed(it->second.get(), sendbuff, recvbuff, op, stream);
  });
}

spcclResult_t spcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t datatype,
                            spcclComm_t comm, void* stream) {
  return guarded(comm && commAlive(comm) ? comm->rank : -1, [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, spcclSum));
    SPCCL_RETURN_IF_ERROR(checkSizes(count, static_cast<size_t>(comm->ranks), dataTypeSize(datatype), "count * ranks"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, count, dataTypeSize(datatype), hostStream(comm, stream)));
    const Params& p = comm->params;
    const uint64_t rowLen = p.alltoallRowLen;
    const bool rows = !p.disable && p.alltoallDensity < 1.0f && rowLen > 0 && count > 0 && count % rowLen == 0 &&
                      isSupportedRowType(datatype);
#if SPCCL_WITH_NCCL
    if (comm->onDevice && !rows) {
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
      ++comm->seq;
      const size_t bytes = count * dataTypeSize(datatype);
      return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * bytes,
                       gpu::allToAll(comm, sendbuff, recvbuff, bytes, static_cast<cudaStream_t>(stream)));
    }
#endif
    if (rows) {  // (in place too: every row is selected and gathered before any is written)
      spcclStats_t call{};
      return counted(comm,
                     runRowsForward(comm, sendbuff, recvbuff, count / rowLen, rowLen, datatype, p.alltoallDensity,
                                    nullptr, stream, &call),
                     call);
    }
    SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, true, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    SPCCL_RETURN_IF_ERROR(agreeOnCall(*comm, *comm->transport,
                                      exactCollectiveDescriptor(Collective::kAlltoAll, comm->seq++, count, datatype)));
    const size_t block = count * dataTypeSize(datatype);
    return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * block,
                     count ? comm->transport->allToAll(sendbuff, block, recvbuff) : Status::ok());
  });
}

spcclResult_t spcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, spcclDataType_t datatype,
                             spcclComm_t comm, void* stream) {
  return guarded(comm && commAlive(comm) ? comm->rank : -1, [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(datatype, spcclSum));
    SPCCL_RETURN_IF_ERROR(
        checkSizes(sendcount, static_cast<size_t>(comm->ranks), dataTypeSize(datatype), "sendcount * ranks"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, sendcount, dataTypeSize(datatype), hostStream(comm, stream),
                                       "sendbuff", "recvbuff", "sendcount"));
    const Params& p = comm->params;
    const bool topk = !p.disable && p.allgatherDensity < 1.0f && sendcount > 0 && isCompressibleType(datatype);
#if SPCCL_WITH_NCCL
    if (comm->onDevice)
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(comm, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    if (comm->onDevice && topk) {
      if (sendcount > UINT32_MAX)
        return invalidArgument(formatString("sendcount=%zu exceeds the 32-bit index encoding", sendcount));
      spcclStats_t call{};
      return counted(comm,
                     gpu::allGatherTopK(comm, sendbuff, recvbuff, sendcount, datatype, p.allgatherDensity,
                                        static_cast<cudaStream_t>(stream), &call),
                     call);
    }
    if (comm->onDevice) {
      ++comm->seq;
      const size_t bytes = sendcount * dataTypeSize(datatype);
      return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * bytes,
                       gpu::allGather(comm, sendbuff, recvbuff, bytes, static_cast<cudaStream_t>(stream)));
    }
#endif
    SPCCL_RETURN_IF_ERROR(checkHostMemory(*comm, !topk, {{"sendbuff", sendbuff}, {"recvbuff", recvbuff}}));
    if (topk) {
      if (sendcount > UINT32_MAX)
        return invalidArgument(formatString("sendcount=%zu exceeds the 32-bit index encoding", sendcount));
      spcclStats_t call{};
      return counted(comm, allGatherTopK(*comm, sendbuff, recvbuff, sendcount, datatype, p.allgatherDensity, &call),
                     call);
    }
    SPCCL_RETURN_IF_ERROR(agreeOnCall(
        *comm, *comm->transport, exactCollectiveDescriptor(Collective::kAllGather, comm->seq++, sendcount, datatype)));
    const size_t block = sendcount * dataTypeSize(datatype);
    return exactCall(comm, static_cast<uint64_t>(comm->ranks - 1) * block,
                     sendcount ? comm->transport->allGather(sendbuff, block, recvbuff) : Status::ok());
  });
}

spcclResult_t spcclAlltoAllRowsCompressed(const void* sendbuff, void* recvbuff, size_t rowsPerPeer, size_t rowLen,
                                          spcclDataType_t datatype, float density, spcclSelection_t* selection,
                                          spcclComm_t comm, void* stream) {
  return guarded(comm && commAlive(comm) ? comm->rank : -1, [&]() -> Status {
    if (selection) *selection = nullptr;
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (!isSupportedRowType(datatype))
      return invalidArgument(
          formatString("datatype=%s: row compression takes float32, float16 or bfloat16", dataTypeName(datatype)));
    if (rowLen == 0) return invalidArgument("rowLen=0: rows must have at least one element");
    if (rowLen > UINT32_MAX) return invalidArgument(formatString("rowLen=%zu exceeds 2^32-1", rowLen));
    if (!(density > 0.0f && density <= 1.0f))
      return invalidArgument(formatString("density=%g must be in (0, 1]", static_cast<double>(density)));
    SPCCL_RETURN_IF_ERROR(checkSizes(rowsPerPeer, rowLen, static_cast<size_t>(comm->ranks) * dataTypeSize(datatype),
                                     "rowsPerPeer * rowLen * (ranks x element size)"));
    SPCCL_RETURN_IF_ERROR(checkBuffers(sendbuff, recvbuff, rowsPerPeer * rowLen, dataTypeSize(datatype),
                                       hostStream(comm, stream), "sendbuff", "recvbuff", "rowsPerPeer*rowLen"));
    if (sendbuff == recvbuff && rowsPerPeer > 0)
      return invalidArgument("sendbuff == recvbuff: the rows alltoall is not in place");
    std::unique_ptr<spcclSelection> sel;
    if (selection) {
      sel = std::make_unique<spcclSelection>();
      sel->comm = comm;
      sel->commId = comm->id;
    }
    spcclStats_t call{};
    SPCCL_RETURN_IF_ERROR(counted(
        comm,
        runRowsForward(comm, sendbuff, recvbuff, rowsPerPeer, rowLen, datatype, density, sel.get(), stream, &call),
        call));
    if (selection) {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().selections[sel.get()] = true;
      *selection = sel.release();
    }
    return Status::ok();
  });
}

spcclResult_t spcclAlltoAllRowsBackward(const void* gradSendbuff, void* gradRecvbuff, spcclSelection_t selection,
                                        void* stream) {
  int rank = -1;
  return guarded(rank, [&]() -> Status {
    if (selection == nullptr) return invalidArgument("selection is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().selections.count(selection) == 0)
        return invalidUsage(formatString("selection=%p is not a live selection (destroyed, or never created)",
                                         static_cast<const void*>(selection)));
      auto it = registry().comms.find(selection->comm);
      if (it == registry().comms.end() || it->second != selection->commId)
        return invalidUsage(
            formatString("selection=%p: its communicator has been destroyed", static_cast<const void*>(selection)));
    }
    rank = selection->comm->rank;
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*selection->comm));
    if (selection->used)
      return invalidUsage(formatString("selection=%p has already served a backward (a selection serves one)",
                                       static_cast<const void*>(selection)));
    const size_t elems = selection->rowsPerPeer * selection->rowLen;
    SPCCL_RETURN_IF_ERROR(checkBuffers(gradSendbuff, gradRecvbuff, elems, dataTypeSize(selection->dataType),
                                       hostStream(selection->comm, stream), "gradSendbuff", "gradRecvbuff",
                                       "the selection's rowsPerPeer*rowLen"));
    if (gradSendbuff == gradRecvbuff && elems > 0)
      return invalidArgument("gradSendbuff == gradRecvbuff: the rows backward is not in place");
    spcclStats_t call{};  // the backward marks the selection used once every rank agreed on the call
    return counted(selection->comm, runRowsBackward(selection, gradSendbuff, gradRecvbuff, stream, &call), call);
  });
}

spcclResult_t spcclSelectionDestroy(spcclSelection_t selection) {
  return guarded([&]() -> Status {
    if (selection == nullptr) return invalidArgument("selection is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().selections.erase(selection) == 0)
        return invalidUsage(formatString("selection=%p is not a live selection (destroyed twice, or never created)",
                                         static_cast<const void*>(selection)));
    }
    delete selection;
    return Status::ok();
  });
}

spcclResult_t spcclAllReduceRowSparse(const int64_t* rowIds, const void* rows, size_t nrows, size_t rowLen,
                                      spcclDataType_t datatype, int64_t* outRowIds, void* outRows, size_t outCapacity,
                                      size_t* outNrows, spcclComm_t comm, void* stream) {
  return guarded(comm && commAlive(comm) ? comm->rank : -1, [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*comm));
    if (outNrows == nullptr) return invalidArgument("outNrows is NULL");
    *outNrows = 0;
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (!isCompressibleType(datatype) && datatype != spcclFloat64)
      return invalidArgument(
          formatString("datatype=%s: rows must be float32, float64, float16 or bfloat16", dataTypeName(datatype)));
    if (rowLen == 0) return invalidArgument("rowLen=0: rows must have at least one element");
    SPCCL_RETURN_IF_ERROR(checkSizes(nrows, rowLen, 8, "nrows * rowLen"));
    SPCCL_RETURN_IF_ERROR(checkSizes(outCapacity, rowLen, 8, "outCapacity * rowLen"));
    if (nrows > 0 && rowIds == nullptr) return invalidArgument(formatString("rowIds is NULL with nrows=%zu", nrows));
    if (nrows > 0 && rows == nullptr) return invalidArgument(formatString("rows is NULL with nrows=%zu", nrows));
    if (outCapacity > 0 && outRowIds == nullptr)
      return invalidArgument(formatString("outRowIds is NULL with outCapacity=%zu", outCapacity));
    if (outCapacity > 0 && outRows == nullptr)
      return invalidArgument(formatString("outRows is NULL with outCapacity=%zu", outCapacity));
    spcclStats_t call{};
#if SPCCL_WITH_NCCL
    if (comm->onDevice) {
      SPCCL_RETURN_IF_ERROR(gpu::checkDeviceMemory(
          comm, {{"rowIds", rowIds}, {"rows", rows}, {"outRowIds", outRowIds}, {"outRows", outRows}}));
      return counted(comm,
                     gpu::rowSparse(comm, rowIds, rows, nrows, rowLen, datatype, outRowIds, outRows, outCapacity,
                                    outNrows, static_cast<cudaStream_t>(stream), &call),
                     call);
    }
#endif
    if (stream != nullptr)
      return invalidArgument(formatString("stream=%p must be NULL on an MPI communicator (host buffers)", stream));
    SPCCL_RETURN_IF_ERROR(checkHostMemory(
        *comm, false, {{"rowIds", rowIds}, {"rows", rows}, {"outRowIds", outRowIds}, {"outRows", outRows}}));
    return counted(comm,
                   allReduceRowSparse(*comm, rowIds, rows, nrows, rowLen, datatype, outRowIds, outRows, outCapacity,
                                      outNrows, &call),
                   call);
  });
}

// The name in parentheses: spccl.h also defines spcclCompressConfigInit as a
// macro that calls spcclCompressConfigInitVersion with the caller's layout.
// The function itself is what programs built before that macro call, with a
// version 1 or 2 struct of 40 bytes: it writes version 2's layout, never
// more, so the struct's growth (version 3) cannot overrun them.

}  // extern "C"
