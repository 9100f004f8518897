// libspccl_nccl.so: compressed allreduce for unmodified NCCL programs.
//
// Defines ncclAllReduce, ncclAllGather and ncclAlltoAll (plus the calls it
// must follow: ncclGroupStart/End, ncclCommDestroy/Abort/Finalize) and
// forwards each to NCCL's profiling twin (pncclAllReduce, ...) unless
// compression applies. Every other NCCL symbol is left to the real libnccl.
// Use: LD_PRELOAD=libspccl_nccl.so, or link it before libnccl.
//
// What is compressed (SPCCL_INTERCEPT contains allreduce, or all; off by
// default): ncclAllReduce on a communicator, outside any ncclGroupStart/End,
// handed to spccl's drop-in spcclAllReduce on an spccl communicator wrapping
// the same ncclComm_t, on the caller's stream. spcclAllReduce itself decides
// per call: float buffers (fp32/fp16/bf16) of at least
// SPCCL_MIN_COMPRESS_COUNT elements summed or averaged are compressed (error
// feedback keyed per buffer), everything else is NCCL's exact allreduce.
// Never touched: grouped calls (spccl's exchange cannot join the caller's
// group), calls on a stream being captured into a CUDA graph unless
// SPCCL_CAPACITY_MODE=fixed (the exact mode synchronises with the host), and
// ncclAllGather/ncclAlltoAll (spccl runs them exactly on device buffers, so
// forwarding them is the same result without the detour). See the README,
// "Use it without changing your code".
//
// Settings (SPCCL_INTERCEPT, SPCCL_CAPACITY_MODE, SPCCL_DEBUG) are read at the
// first ncclAllReduce, by spccl's own parameter table compiled in
// (intercept_env.h): an invalid SPCCL_* environment passes every call to NCCL
// unchanged, with a WARN line when SPCCL_INTERCEPT is set.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "intercept_env.h"
#include "spccl.h"
#include "spccl_nccl.h"
#include "src/params.h"

#define SPCCL_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

thread_local int gGroupDepth = 0;

struct Settings {
  bool allreduce = false;
  bool fixedMode = false;
  bool info = false;
};

const Settings& settings() {
  static const Settings s = [] {
    Settings r;
    const char* intercept = std::getenv("SPCCL_INTERCEPT");
    spccl::Params p;
    const spccl::Status env = spccl::loadParamsFromEnv(&p);
    if (env.isOk()) {
      r.allreduce = (p.intercept & spccl::kInterceptAllreduce) != 0;
      r.fixedMode = p.capacityMode == spccl::kCapacityModeFixed;
    } else if (intercept != nullptr && intercept[0] != '\0') {
      std::fprintf(stderr,
                   "SPCCL WARN libspccl_nccl.so: invalid SPCCL_* environment, every call goes to NCCL "
                   "unchanged: %s\n",
                   env.message().c_str());
    }
    r.info = spccl::interpose::debugLevel(env, p) >= spccl::LogLevel::kInfo;
    if (r.info)
      std::fprintf(stderr, "SPCCL INFO libspccl_nccl.so loaded: SPCCL_INTERCEPT=%s (allreduce %s)\n",
                   intercept ? intercept : "off", r.allreduce ? "compressed" : "passed through");
    return r;
  }();
  return s;
}

struct Wrapped {
  spcclComm_t comm = nullptr;
  bool failed = false;  // spcclCommInitNccl failed once: pass this communicator through
  unsigned long long intercepted = 0;
};

std::mutex gMu;
std::map<ncclComm_t, Wrapped>& wrapped() {
  static auto* m = new std::map<ncclComm_t, Wrapped>();  // never destroyed: usable at exit
  return *m;
}

// The spccl communicator over `nccl`, made on first use. Every rank of an
// NCCL communicator makes the same ncclAllReduce calls in the same order, so
// they all get here together, as spcclCommInitNccl (collective) needs.
spcclComm_t spcclFor(ncclComm_t nccl) {
  std::lock_guard<std::mutex> lock(gMu);
  Wrapped& w = wrapped()[nccl];
  if (w.comm == nullptr && !w.failed) {
    if (spcclCommInitNccl(&w.comm, nccl) != spcclSuccess) {
      std::fprintf(stderr,
                   "SPCCL WARN libspccl_nccl.so: spcclCommInitNccl failed (%s); passing this "
                   "communicator's calls to NCCL unchanged\n",
                   spcclGetLastError(nullptr));
      w.failed = true;
      w.comm = nullptr;
    }
  }
  if (w.comm) ++w.intercepted;
  return w.comm;
}

void release(ncclComm_t nccl) {
  spcclComm_t comm = nullptr;
  unsigned long long calls = 0;
  {
    std::lock_guard<std::mutex> lock(gMu);
    auto it = wrapped().find(nccl);
    if (it == wrapped().end()) return;
    comm = it->second.comm;
    calls = it->second.intercepted;
    wrapped().erase(it);
  }
  if (comm == nullptr) return;
  spcclStats_t st{};
  if (settings().info && spcclCommGetStats(comm, &st) == spcclSuccess) {
    int rank = -1;
    spcclCommUserRank(comm, &rank);
    int ranks = 0;
    spcclCommCount(comm, &ranks);
    char bytes[160];
    if (ranks <= 1) std::snprintf(bytes, sizeof bytes, "one rank: nothing crosses the wire");
    else
      std::snprintf(bytes, sizeof bytes, "bytes sent %llu of %llu dense (%.1fx fewer)",
                    static_cast<unsigned long long>(st.bytesSent), static_cast<unsigned long long>(st.denseBytes),
                    st.bytesSent ? static_cast<double>(st.denseBytes) / static_cast<double>(st.bytesSent) : 0.0);
    std::fprintf(stderr,
                 "SPCCL INFO libspccl_nccl.so rank %d: %llu ncclAllReduce calls handed to spccl, %llu compressed; %s\n",
                 rank, calls, static_cast<unsigned long long>(st.compressedCalls), bytes);
  }
  spcclCommDestroy(comm);
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // cannot tell: do not risk it
  }
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

SPCCL_EXPORT ncclResult_t ncclGroupStart() {
  const ncclResult_t r = pncclGroupStart();
  if (r == ncclSuccess) ++gGroupDepth;
  return r;
}

SPCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (gGroupDepth > 0) --gGroupDepth;
  return pncclGroupEnd();
}

SPCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                        ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const Settings& s = settings();
  const bool eligible = s.allreduce && gGroupDepth == 0 && comm != nullptr &&
                        (datatype == ncclFloat32 || datatype == ncclFloat16 || datatype == ncclBfloat16) &&
                        (op == ncclSum || op == ncclAvg) && (s.fixedMode || !capturing(stream));
  if (!eligible) return pncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  spcclComm_t sc = spcclFor(comm);
  if (sc == nullptr) return pncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  // spccl's types and ops carry NCCL's values, and so do its result codes.
  return static_cast<ncclResult_t>(spcclAllReduce(sendbuff, recvbuff, count, static_cast<spcclDataType_t>(datatype),
                                                  static_cast<spcclRedOp_t>(op), sc, stream));
}

SPCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                                        ncclComm_t comm, cudaStream_t stream) {
  return pncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

SPCCL_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) {
  return pncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
}

// The spccl communicator must go before the NCCL one it wraps.
SPCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  release(comm);
  return pncclCommFinalize(comm);
}

SPCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  release(comm);
  return pncclCommDestroy(comm);
}

SPCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  release(comm);
  return pncclCommAbort(comm);
}
