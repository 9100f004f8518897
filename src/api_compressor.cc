// The C entry points of explicit compressors: config initialisation (with
// its versioned layouts), creation, the compressed allreduce, statistics,
// the residual, and destruction.
#include "src/api_internal.h"

using namespace spccl;
using namespace spccl::api;

extern "C" {

spcclResult_t(spcclCompressConfigInit)(spcclCompressConfig_t* config) {
  static_assert(offsetof(spcclCompressConfig_t, thresholdMinFraction) == 40, "version 2's layout is 40 bytes");
  return spcclCompressConfigInitVersion(config, offsetof(spcclCompressConfig_t, thresholdMinFraction), 2);
}

spcclResult_t spcclCompressConfigInitVersion(spcclCompressConfig_t* config, size_t size, unsigned int version) {
  return guarded([&]() -> Status {
    if (config == nullptr) return invalidArgument("config is NULL");
    const size_t known = configLayoutBytes(version);
    if (known == 0)
      return invalidArgument(
          formatString("config version %u is newer than this library's (%d): the program was "
                       "built against a later spccl.h",
                       version, SPCCL_COMPRESS_CONFIG_VERSION));
    if (size < known)
      return invalidArgument(
          formatString("config size %zu is smaller than version %u's %zu bytes", size, version, known));
    Params p;
    SPCCL_RETURN_IF_ERROR(loadParamsFromEnv(&p));
    spcclCompressConfig_t full = configFromParams(p);
    full.size = size;
    full.version = version;
    // Only the caller's fields: its struct may be shorter than this library's.
    std::memcpy(config, &full, known);
    return Status::ok();
  });
}

spcclResult_t spcclCompressorCreate(spcclComm_t comm, size_t count, spcclDataType_t datatype,
                                    const spcclCompressConfig_t* config, spcclCompressor_t* out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return invalidArgument("out is NULL");
    *out = nullptr;
    SPCCL_RETURN_IF_ERROR(checkComm(comm));
    SPCCL_RETURN_IF_ERROR(checkDataType(datatype));
    if (count > SIZE_MAX / 16) return invalidArgument(formatString("count=%zu is too large", count));
    if (count > UINT32_MAX)
      return invalidArgument(
          formatString("count=%zu exceeds the 32-bit index encoding (at most %u)", count, UINT32_MAX));
    spcclCompressConfig_t cfg;
    SPCCL_RETURN_IF_ERROR(readConfig(config, comm->params, &cfg));
    SPCCL_RETURN_IF_ERROR(checkConfig(cfg));
    std::unique_ptr<spcclCompressor> c;
    SPCCL_RETURN_IF_ERROR(makeCompressor(comm, count, datatype, cfg, false, &c));
    registerCompressor(c.get());
    *out = c.release();
    return Status::ok();
  });
}

spcclResult_t spcclAllReduceCompressed(const void* sendbuff, void* recvbuff, spcclRedOp_t op, spcclCompressor_t c,
                                       void* stream) {
  return guarded(c && checkCompressor(c).isOk() ? c->comm->rank : -1, [&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    SPCCL_RETURN_IF_ERROR(checkMpiLive(*c->comm));
    SPCCL_RETURN_IF_ERROR(checkTypeAndOp(c->dataType, op));
    SPCCL_RETURN_IF_ERROR(
        checkBuffers(sendbuff, recvbuff, c->count, dataTypeSize(c->dataType), hostStream(c->comm, stream)));
    spcclComm& comm = *c->comm;
    if (takesExactPath(comm, c->count, c->dataType, op, c->config.density)) {
      // Exact: the residual (if any) is not involved; it waits for the next compressed call.
      spcclStats_t call{};
      SPCCL_RETURN_IF_ERROR(runExactAllReduce(&comm, sendbuff, recvbuff, c->count, c->dataType, op, stream, &call));
      addStats(&c->stats, call);
      return Status::ok();
    }
    return runCompressed(c, sendbuff, recvbuff, op, stream);
  });
}

spcclResult_t spcclCompressorGetStats(const spcclCompressor_t c, spcclStats_t* stats) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    if (stats == nullptr) return invalidArgument("stats is NULL");
    *stats = c->stats;
    return Status::ok();
  });
}

spcclResult_t spcclCompressorGetResidual(const spcclCompressor_t c, float* residual, size_t count) {
  return guarded([&]() -> Status {
    SPCCL_RETURN_IF_ERROR(checkCompressor(c));
    if (count != c->count)
      return invalidArgument(formatString("count=%zu differs from the compressor's count %zu", count, c->count));
    if (residual == nullptr && count > 0)
      return invalidArgument(formatString("residual is NULL with count=%zu", count));
#if SPCCL_WITH_NCCL
    if (c->comm->onDevice) return gpu::copyResidual(c, residual);
#endif
    if (count == 0) return Status::ok();  // residual may be NULL: no 0-byte memcpy/memset on it
    if (c->config.errorFeedback && c->residual[c->current].get() != nullptr) {
      SPCCL_RETURN_IF_ERROR(c->executor->toHost(residual, c->residual[c->current].get(), count * sizeof(float)));
      return c->executor->settle();
    } else  // no error feedback, or no compressed call yet: nothing held back
      std::memset(residual, 0, count * sizeof(float));
    return Status::ok();
  });
}

spcclResult_t spcclCompressorDestroy(spcclCompressor_t c) {
  return guarded([&]() -> Status {
    if (c == nullptr) return invalidArgument("compressor is NULL");
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      if (registry().compressors.count(c) == 0)
        return invalidUsage(formatString("compressor=%p is not a live compressor (destroyed twice, or never created)",
                                         static_cast<const void*>(c)));
      if (c->implicit)
        return invalidUsage(
            formatString("compressor=%p is implicit: it belongs to its communicator", static_cast<const void*>(c)));
      registry().compressors.erase(c);
    }
    delete c;
    return Status::ok();
  });
}

}  // extern "C"
