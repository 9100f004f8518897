// The perf binaries' NCCL backend (-B nccl): one GPU per rank, every buffer in
// device memory, the compressed calls on an spccl communicator made by
// spcclCommInitNccl, and the dense side of each row NCCL's own collective
// (ncclAllReduce, ncclAlltoAll, ncclAllGather) on the same stream. Built where
// the library's NCCL transport is (SPCCL_WITH_NCCL).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "harness.h"
#include "spccl_nccl.h"

namespace spccl::perf {
namespace {

[[noreturn]] void failDevice(const char* call, const char* detail, const char* file, int line) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "rank %d: %s:%d: %s failed: %s\n", rank, file, line, call, detail);
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);  // MPI_Abort does not return
}

#define SPCCL_PERF_CUDA(call)                                                                                     \
  do {                                                                                                            \
    const cudaError_t spcclPerfCuda_ = (call);                                                                    \
    if (spcclPerfCuda_ != cudaSuccess) failDevice(#call, cudaGetErrorString(spcclPerfCuda_), __FILE__, __LINE__); \
  } while (0)

#define SPCCL_PERF_NCCL(call)                                                                                     \
  do {                                                                                                            \
    const ncclResult_t spcclPerfNccl_ = (call);                                                                   \
    if (spcclPerfNccl_ != ncclSuccess) failDevice(#call, ncclGetErrorString(spcclPerfNccl_), __FILE__, __LINE__); \
  } while (0)

struct DeviceMemoryExhausted : std::bad_alloc {
  const char* what() const noexcept override { return "cudaMalloc: out of device memory"; }
};

ncclDataType_t ncclTypeOf(spcclDataType_t datatype) {
  switch (datatype) {
    case spcclFloat16:
      return ncclFloat16;
    case spcclBfloat16:
      return ncclBfloat16;
    default:
      return ncclFloat32;  // the flags admit float, half and bfloat16 only
  }
}

class NcclTransport final : public Transport {
 public:
  NcclTransport(MPI_Comm mpiComm, int device) : device_(device) {
    int rank = 0;
    int nRanks = 1;
    MPI_Comm_rank(mpiComm, &rank);
    MPI_Comm_size(mpiComm, &nRanks);
    SPCCL_PERF_CUDA(cudaSetDevice(device));
    ncclUniqueId id{};
    if (rank == 0) SPCCL_PERF_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpiComm);
    SPCCL_PERF_NCCL(ncclCommInitRank(&nccl_, nRanks, id, rank));
    SPCCL_PERF_CHECK(spcclCommInitNccl(&comm_, nccl_));
    SPCCL_PERF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclTransport() override {
    cudaStreamSynchronize(stream_);
    if (comm_ != nullptr) SPCCL_PERF_CHECK(spcclCommDestroy(comm_));
    ncclCommDestroy(nccl_);
    cudaStreamDestroy(stream_);
  }
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  std::string describe() const override {
    int version = 0;
    ncclGetVersion(&version);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, device_);
    char text[512];
    std::snprintf(text, sizeof text,
                  "NCCL %d.%d.%d on device buffers, one GPU a rank (rank 0: device %d, %s, sm_%d%d), "
                  "one non-blocking stream; SPCCL_CAPACITY_MODE=%s",
                  version / 10000, version / 100 % 100, version % 100, device_, prop.name, prop.major, prop.minor,
                  std::getenv("SPCCL_CAPACITY_MODE") ? std::getenv("SPCCL_CAPACITY_MODE") : "exact (default)");
    return text;
  }
  spcclComm_t comm() const override { return comm_; }
  void* stream() const override { return stream_; }

  void allReduce(const void* send, void* recv, size_t count, spcclDataType_t datatype, spcclRedOp_t op) const override {
    SPCCL_PERF_NCCL(
        ncclAllReduce(send, recv, count, ncclTypeOf(datatype), op == spcclAvg ? ncclAvg : ncclSum, nccl_, stream_));
  }
  void allToAll(const void* send, void* recv, size_t countPerPeer, spcclDataType_t datatype) const override {
    SPCCL_PERF_NCCL(ncclAlltoAll(send, recv, countPerPeer, ncclTypeOf(datatype), nccl_, stream_));
  }
  void allGather(const void* send, void* recv, size_t countPerRank, spcclDataType_t datatype) const override {
    SPCCL_PERF_NCCL(ncclAllGather(send, recv, countPerRank, ncclTypeOf(datatype), nccl_, stream_));
  }
  void synchronize() const override { SPCCL_PERF_CUDA(cudaStreamSynchronize(stream_)); }

  bool deviceMemory() const override { return true; }
  // Out of device memory: std::bad_alloc saying so, which the harness reports on every rank.
  void* allocate(size_t bytes) override {
    void* buffer = nullptr;
    const cudaError_t result = cudaMalloc(&buffer, bytes);
    if (result == cudaErrorMemoryAllocation) {
      static_cast<void>(cudaGetLastError());  // not sticky: clear it for the calls that follow
      throw DeviceMemoryExhausted();
    }
    SPCCL_PERF_CUDA(result);
    return buffer;
  }
  void deallocate(void* buffer) override { cudaFree(buffer); }
  void upload(void* buffer, const void* host, size_t bytes) const override {
    SPCCL_PERF_CUDA(cudaMemcpyAsync(buffer, host, bytes, cudaMemcpyHostToDevice, stream_));
    synchronize();
  }
  void download(void* host, const void* buffer, size_t bytes) const override {
    SPCCL_PERF_CUDA(cudaMemcpyAsync(host, buffer, bytes, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }

 private:
  int device_;
  ncclComm_t nccl_ = nullptr;
  spcclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Transport> makeNcclTransport(MPI_Comm comm, std::string* why) {
  // Ranks on one host take its visible devices in local-rank order (a rank
  // that sees one device, as under CUDA_VISIBLE_DEVICES per rank, takes it).
  // NCCL runs one rank a GPU: two ranks of a host on the same GPU (by UUID)
  // are refused here, before NCCL would fail inside ncclCommInitRank.
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm host;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  int localRank = 0;
  int localRanks = 1;
  MPI_Comm_rank(host, &localRank);
  MPI_Comm_size(host, &localRanks);

  int devices = 0;
  int device = -1;
  unsigned char uuid[16] = {};  // all zero: no device
  const cudaError_t counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    *why = std::string("no usable CUDA device (cudaGetDeviceCount: ") +
           (counted != cudaSuccess ? cudaGetErrorString(counted) : "0 devices") + ")";
    (void)cudaGetLastError();
  } else {
    device = localRank % devices;
    cudaDeviceProp prop{};
    const cudaError_t got = cudaGetDeviceProperties(&prop, device);
    if (got != cudaSuccess) {
      *why = "device " + std::to_string(device) + ": cudaGetDeviceProperties: " + cudaGetErrorString(got);
    } else {
      static_assert(sizeof prop.uuid == sizeof uuid, "a CUDA device UUID is 16 bytes");
      std::memcpy(uuid, &prop.uuid, sizeof uuid);
    }
  }
  std::vector<unsigned char> all(static_cast<size_t>(localRanks) * sizeof uuid);
  MPI_Allgather(uuid, sizeof uuid, MPI_BYTE, all.data(), sizeof uuid, MPI_BYTE, host);
  MPI_Comm_free(&host);
  if (why->empty()) {
    for (int other = 0; other < localRanks; ++other) {
      if (other == localRank || std::memcmp(all.data() + other * sizeof uuid, uuid, sizeof uuid) != 0) continue;
      // Worded alike on every rank that shares, so rank 0 prints it once for all of them.
      *why = std::to_string(localRanks) + " ranks on this host and " + std::to_string(devices) +
             " CUDA device(s) visible: ranks would share a GPU, and NCCL needs one GPU a rank (run fewer "
             "ranks a host, or give each its own device)";
      break;
    }
  }
  int ok = why->empty() ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  if (!ok) return nullptr;
  return std::make_unique<NcclTransport>(comm, device);
}

}  // namespace spccl::perf
