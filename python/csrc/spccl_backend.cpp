// spccl as a torch.distributed backend (c10d::Backend): CPU tensors over
// MPI and, when libspccl has its NCCL transport (SPCCL_TORCH_CUDA), CUDA
// tensors over NCCL.
//
// Shape taken from PyTorch's ProcessGroupMPI: one worker thread and a queue
// per process group, every MPI and spccl call made under one process-wide
// mutex (MPI_THREAD_SERIALIZED is enough). Before any data moves, each
// collective exchanges a small descriptor (what the rank was asked to do, the
// dtype, the sizes, the error its own input has) with one MPI_Allgather, so a
// mismatch or a bad tensor on any rank becomes the same RuntimeError on every
// rank instead of a hang. Point-to-point calls send a header before the data
// for the same reason and are completed by a second thread per group.
//
// Exact by default: the collectives below are MPI's, on a private copy of the
// group's communicator. spccl's compressed calls are used where the program
// asks for them: the environment opt-in (SPCCL_ALLREDUCE_DENSITY,
// SPCCL_ALLTOALL_DENSITY with SPCCL_ALLTOALL_ROW_LEN), the explicit
// compressors behind the DDP hook, and the alltoall_rows autograd op.
//
// CUDA tensors: the descriptors still go over MPI; the data over a NCCL
// communicator (and spccl's, on top of it) made at a group's first CUDA
// operation, on one stream per group that first waits for the caller's
// current stream. The worker synchronizes that stream before it completes a
// work, so wait() returns with the results in place, as NCCL's blocking wait.

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <spccl_mpi.h>
#ifdef SPCCL_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <spccl_nccl.h>
#endif

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace spccl_torch {

using c10d::OpType;
using c10d::ReduceOp;
using c10d::Work;

// ---------------------------------------------------------------------------
// Process-wide MPI state.

std::mutex& mpiMutex() {
  static std::mutex m;
  return m;
}

bool gWeInitializedMpi = false;
bool gMpiFinalized = false;
// A group was shut down while a call that timed out was still running: it
// holds the MPI mutex, and MPI cannot be finalized.
std::atomic<bool> gStuckCall{false};

void checkMpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    TORCH_CHECK(false, "spccl: ", what, " failed: ", std::string(msg, len));
  }
}

void initMpiOnce() {
  int inited = 0;
  MPI_Initialized(&inited);
  int provided = 0;
  if (!inited) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    TORCH_CHECK(rc == MPI_SUCCESS, "spccl: MPI_Init_thread failed");
    gWeInitializedMpi = true;
  } else {
    MPI_Query_thread(&provided);
  }
  TORCH_CHECK(provided >= MPI_THREAD_SERIALIZED, "spccl: the MPI library gives thread level ", provided,
              ", the backend needs MPI_THREAD_SERIALIZED or higher");
}

// ---------------------------------------------------------------------------
// Timeouts. An MPI call cannot be cancelled: an operation that passed its
// timeout leaves its call running on the group's worker (holding the MPI
// mutex), so the group refuses every operation after it. GroupHealth is shared
// by a group and its Work objects, which can outlive it.

struct GroupHealth {
  GroupHealth(int rank, int size, std::string name, std::chrono::milliseconds timeout)
      : rank(rank), size(size), name(std::move(name)), timeout(timeout) {}
  const int rank;
  const int size;
  const std::string name;
  const std::chrono::milliseconds timeout;  // <= 0: none
  std::mutex m;
  std::condition_variable cv;  // wakes the watchdog and a waiting shutdown
  std::string broken;          // why the group is unusable; empty while it is usable

  std::string timedOut(const std::string& op, std::chrono::milliseconds t, const char* whose) const {
    return c10::str("spccl: ", op, " on rank ", rank, " of ", size, " (process group ", name,
                    ") did not complete within ", whose, " timeout of ", t.count(),
                    " ms; an MPI call cannot be cancelled, so this process group is unusable from now on");
  }
  // Marks the group unusable (the first reason stays); true when this call did.
  bool breakWith(const std::string& why) {
    {
      std::lock_guard<std::mutex> g(m);
      if (!broken.empty()) return false;
      broken = why;
    }
    cv.notify_all();
    return true;
  }
  std::string unusable(const char* title) {
    std::lock_guard<std::mutex> g(m);
    if (broken.empty()) return {};
    return c10::str("spccl: ", title, " on an unusable process group (an earlier operation timed out): ", broken);
  }
};

std::exception_ptr errorPtr(const std::string& msg) { return std::make_exception_ptr(std::runtime_error(msg)); }

// ---------------------------------------------------------------------------
// Work: finished by the worker thread (collectives) or the progress thread
// (send/recv), or failed by the group's watchdog on a timeout; getFuture()
// gives the output tensors.

class SpcclWork : public Work {
 public:
  // devices: where the outputs are, for a CUDA work: its future then orders
  // the streams of whoever uses the value after it (as NCCL's works do).
  SpcclWork(OpType type, std::vector<at::Tensor> outputs, const char* title, std::shared_ptr<GroupHealth> health,
            std::vector<c10::Device> devices = {})
      : Work(-1, type, title),
        outputs_(std::move(outputs)),
        future_(
            c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()), std::move(devices))),
        health_(std::move(health)),
        op_(std::strncmp(title, "spccl:", 6) == 0 ? title + 6 : title) {}

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  std::chrono::milliseconds getTimeout() const override { return health_->timeout; }

  // Without a timeout, Work's wait: the watchdog fails the work once the
  // group's timeout has passed. With one, the same error from here.
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override {
    if (timeout != ::kNoTimeout) {
      bool done;
      {
        std::unique_lock<std::mutex> g(mutex_);
        done = cv_.wait_for(g, timeout, [this] { return completed_; });
      }
      if (!done) {
        std::string why = health_->timedOut(op_, timeout, "work.wait's");
        if (fail(errorPtr(why))) health_->breakWith(why);
      }
    }
    return Work::wait(::kNoTimeout);
  }

  // The first of succeed/fail counts: a call that completes after its work
  // timed out leaves the error in place. The future completes before the
  // work, so whoever sees the work done sees its future done.
  void succeed() {
    if (done_.exchange(true)) return;
    future_->markCompleted(c10::IValue(outputs_));
    finish();
  }
  bool fail(std::exception_ptr e) {
    if (done_.exchange(true)) return false;
    future_->setError(e);
    finish(e);
    return true;
  }
  const std::string& op() const { return op_; }
  int sourceRank() const override { return source_; }
  int source_ = -1;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
  std::shared_ptr<GroupHealth> health_;
  std::string op_;
  std::atomic<bool> done_{false};
};

// ---------------------------------------------------------------------------
// Input checks. A rank's own problem is a code in its descriptor, so that the
// other ranks can name it too.

enum LocalError : int64_t {
  kOk = 0,
  kNonContiguous,
  kDtypeUnsupported,
  kCudaTensor,
  kOtherDevice,
  kSparse,
  kShape,
  kRoot,
  kListSize,
  kReduceOp,
  kTooLarge,
  kDtypeLocal,
  kCudaUnsupported,
  kMixedDevices,
  kNumLocalErrors
};

const char* localErrorText(int64_t e) {
  switch (e) {
    case kNonContiguous:
      return "a tensor is not contiguous (call .contiguous() first)";
    case kDtypeUnsupported:
      return "a tensor has a dtype spccl does not support";
    case kCudaTensor:
      return "a CUDA tensor: this build of spccl_torch moves CPU tensors only (libspccl has no NCCL transport)";
    case kCudaUnsupported:
      return "a CUDA tensor: this operation moves CPU tensors only";
    case kMixedDevices:
      return "the tensors are on different devices, or on a CUDA device other than the one this process group "
             "uses (one per group and process)";
    case kOtherDevice:
#ifdef SPCCL_TORCH_CUDA
      return "a tensor is on a device other than the CPU or a CUDA device";
#else
      return "a tensor is on a device other than the CPU";
#endif
    case kSparse:
      return "a sparse tensor (only dense strided tensors are supported)";
    case kShape:
      return "tensor sizes do not fit the operation (output/input/split sizes)";
    case kRoot:
      return "the root rank is out of range";
    case kListSize:
      return "a tensor list has the wrong length";
    case kReduceOp:
      return "the reduction op is not supported for this dtype";
    case kTooLarge:
      return "a message of 2 GiB or more (not supported)";
    case kDtypeLocal:
      return "input and output tensors have different dtypes";
    default:
      return "unknown error";
  }
}

int64_t checkTensor(const at::Tensor& t) {
#ifndef SPCCL_TORCH_CUDA
  if (t.is_cuda()) return kCudaTensor;
#endif
  if (!t.device().is_cpu() && !t.is_cuda()) return kOtherDevice;
  if (t.layout() != c10::kStrided) return kSparse;
  if (!t.is_contiguous()) return kNonContiguous;
  switch (t.scalar_type()) {
    case at::kFloat:
    case at::kDouble:
    case at::kHalf:
    case at::kBFloat16:
    case at::kChar:
    case at::kByte:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kBool:
      break;
    default:
      return kDtypeUnsupported;
  }
  if (t.nbytes() >= static_cast<size_t>(INT_MAX)) return kTooLarge;
  return kOk;
}

int64_t checkTensors(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) {
    int64_t e = checkTensor(t);
    if (e != kOk) return e;
  }
  return kOk;
}

int64_t sameDtype(const std::vector<at::Tensor>& ts, at::ScalarType dt) {
  for (const auto& t : ts)
    if (t.scalar_type() != dt) return kDtypeLocal;
  return kOk;
}

// MPI type and op for a reduction. Half and bfloat16 are reduced in fp32.
struct ReduceSpec {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  bool viaFloat = false;
  bool average = false;
};

int64_t reduceSpec(at::ScalarType dt, ReduceOp::RedOpType rop, ReduceSpec* s) {
  bool isFloat = at::isFloatingType(dt);
  bool isBool = dt == at::kBool;
  switch (dt) {
    case at::kFloat:
      s->type = MPI_FLOAT;
      break;
    case at::kDouble:
      s->type = MPI_DOUBLE;
      break;
    case at::kHalf:
    case at::kBFloat16:
      s->type = MPI_FLOAT;
      s->viaFloat = true;
      break;
    case at::kChar:
      s->type = MPI_INT8_T;
      break;
    case at::kByte:
      s->type = MPI_UINT8_T;
      break;
    case at::kShort:
      s->type = MPI_INT16_T;
      break;
    case at::kInt:
      s->type = MPI_INT32_T;
      break;
    case at::kLong:
      s->type = MPI_INT64_T;
      break;
    case at::kBool:
      s->type = MPI_C_BOOL;
      break;
    default:
      return kDtypeUnsupported;
  }
  switch (rop) {
    case ReduceOp::SUM:
      s->op = isBool ? MPI_LOR : MPI_SUM;
      break;
    case ReduceOp::AVG:
      if (!isFloat) return kReduceOp;
      s->op = MPI_SUM;
      s->average = true;
      break;
    case ReduceOp::PRODUCT:
      s->op = isBool ? MPI_LAND : MPI_PROD;
      break;
    case ReduceOp::MIN:
      s->op = isBool ? MPI_LAND : MPI_MIN;
      break;
    case ReduceOp::MAX:
      s->op = isBool ? MPI_LOR : MPI_MAX;
      break;
    case ReduceOp::BAND:
      if (isFloat) return kReduceOp;
      s->op = isBool ? MPI_LAND : MPI_BAND;
      break;
    case ReduceOp::BOR:
      if (isFloat) return kReduceOp;
      s->op = isBool ? MPI_LOR : MPI_BOR;
      break;
    case ReduceOp::BXOR:
      if (isFloat) return kReduceOp;
      s->op = isBool ? MPI_LXOR : MPI_BXOR;
      break;
    default:
      return kReduceOp;
  }
  return kOk;
}

spcclDataType_t spcclType(at::ScalarType dt) {
  switch (dt) {
    case at::kFloat:
      return spcclFloat32;
    case at::kHalf:
      return spcclFloat16;
    case at::kBFloat16:
      return spcclBfloat16;
    case at::kDouble:
      return spcclFloat64;
    default:
      return spcclFloat32;
  }
}

#ifdef SPCCL_TORCH_CUDA
// NCCL's type and op for a reduction, where NCCL has both (no bool, no int16,
// no bitwise ops: those go through the host).
bool ncclReduction(at::ScalarType dt, ReduceOp::RedOpType rop, ncclDataType_t* type, ncclRedOp_t* op) {
  switch (dt) {
    case at::kFloat:
      *type = ncclFloat32;
      break;
    case at::kDouble:
      *type = ncclFloat64;
      break;
    case at::kHalf:
      *type = ncclFloat16;
      break;
    case at::kBFloat16:
      *type = ncclBfloat16;
      break;
    case at::kChar:
      *type = ncclInt8;
      break;
    case at::kByte:
      *type = ncclUint8;
      break;
    case at::kInt:
      *type = ncclInt32;
      break;
    case at::kLong:
      *type = ncclInt64;
      break;
    default:
      return false;
  }
  switch (rop) {
    case ReduceOp::SUM:
      *op = ncclSum;
      break;
    case ReduceOp::PRODUCT:
      *op = ncclProd;
      break;
    case ReduceOp::MIN:
      *op = ncclMin;
      break;
    case ReduceOp::MAX:
      *op = ncclMax;
      break;
    case ReduceOp::AVG:
      *op = ncclAvg;
      break;
    default:
      return false;
  }
  return true;
}

void ncclCheck(ncclResult_t r, const char* what) {
  TORCH_CHECK(r == ncclSuccess, "spccl: ", what, " failed: ", ncclGetErrorString(r));
}
#endif

bool isSpcclFloat(at::ScalarType dt) { return dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16; }

int asInt(size_t v) { return static_cast<int>(v); }

// ---------------------------------------------------------------------------
// The descriptor every collective agrees on before moving data: a header and,
// per peer, two counts (what this rank sends to / expects from that peer).

enum Kind : int64_t {
  kAllreduce = 1,
  kAllreduceCoalesced,
  kBroadcast,
  kReduce,
  kAllgather,
  kAllgatherBase,
  kReduceScatter,
  kReduceScatterBase,
  kAlltoallBase,
  kAlltoall,
  kBarrier,
  kGather,
  kScatter,
  kCompressedAllreduce,
  kAlltoallRows,
  kAlltoallRowsBackward,
  kAllreduceRowSparse,
};

const char* kindName(int64_t k) {
  switch (k) {
    case kAllreduce:
      return "all_reduce";
    case kAllreduceCoalesced:
      return "all_reduce_coalesced";
    case kBroadcast:
      return "broadcast";
    case kReduce:
      return "reduce";
    case kAllgather:
      return "all_gather";
    case kAllgatherBase:
      return "all_gather_into_tensor";
    case kReduceScatter:
      return "reduce_scatter";
    case kReduceScatterBase:
      return "reduce_scatter_tensor";
    case kAlltoallBase:
      return "all_to_all_single";
    case kAlltoall:
      return "all_to_all";
    case kBarrier:
      return "barrier";
    case kGather:
      return "gather";
    case kScatter:
      return "scatter";
    case kCompressedAllreduce:
      return "compressed all_reduce (dct_hook)";
    case kAlltoallRows:
      return "alltoall_rows";
    case kAlltoallRowsBackward:
      return "alltoall_rows backward";
    case kAllreduceRowSparse:
      return "allreduce_rowsparse";
    default:
      return "unknown collective";
  }
}

enum Field : int {
  fErr = 0,
  fKind,
  fDtype,
  fOp,
  fRoot,
  fNumel,  // what must match across ranks, per operation
  fAux,
  fDevice,  // 0: CPU, 1: CUDA
  kHeader
};

struct Desc {
  explicit Desc(int P) : v(kHeader + 2 * P, 0) {}
  std::vector<int64_t> v;
  int64_t& operator[](int i) { return v[i]; }
  int64_t& send(int j) { return v[kHeader + j]; }
  int64_t& recv(int j, int P) { return v[kHeader + P + j]; }
};

// ---------------------------------------------------------------------------

// What allreduceRowSparse returns: the union's ids and their summed rows.
struct RowSparseResult {
  at::Tensor ids, rows;
};

class SpcclBackend;
std::mutex& registryMutex() {
  static std::mutex m;
  return m;
}
std::set<SpcclBackend*>& registry() {
  static std::set<SpcclBackend*> r;
  return r;
}

class SpcclBackend : public c10d::Backend {
 public:
  SpcclBackend(int rank, int size, MPI_Comm comm, std::string name, std::chrono::milliseconds timeout)
      : Backend(rank, size), comm_(comm), health_(std::make_shared<GroupHealth>(rank, size, std::move(name), timeout)) {
    {
      std::lock_guard<std::mutex> g(mpiMutex());
      checkMpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      checkMpi(MPI_Comm_dup(comm_, &p2pComm_), "MPI_Comm_dup");
      checkMpi(MPI_Comm_set_errhandler(p2pComm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      spcclResult_t r = spcclCommInitMPI(&spccl_, comm_);
      TORCH_CHECK(r == spcclSuccess, "spccl: spcclCommInitMPI failed: ", spcclGetLastError(nullptr));
    }
    const char* d = std::getenv("SPCCL_ALLREDUCE_DENSITY");
    envAllreduce_ = d != nullptr && *d != '\0';
    const char* a = std::getenv("SPCCL_ALLTOALL_DENSITY");
    const char* l = std::getenv("SPCCL_ALLTOALL_ROW_LEN");
    envAlltoall_ = a != nullptr && *a != '\0' && l != nullptr && *l != '\0';
    worker_ = std::thread([this] { workerLoop(); });
    progress_ = std::thread([this] { progressLoop(); });
    watchdog_ = std::thread([this] { watchdogLoop(); });
    std::lock_guard<std::mutex> g(registryMutex());
    registry().insert(this);
  }

  ~SpcclBackend() override {
    shutdown();
    std::lock_guard<std::mutex> g(registryMutex());
    registry().erase(this);
  }

  const std::string getBackendName() const override { return "spccl"; }

  // Stops the threads, fails what is still queued, frees the communicators.
  // A call that timed out and is still running cannot be stopped: then the
  // threads are left to it and the group is never freed (they use it; only a
  // shutdown from the destructor cannot keep it), and no group frees its MPI
  // communicators (the stuck call holds the MPI mutex).
  void shutdown() override {
    {
      std::lock_guard<std::mutex> g(queueMutex_);
      if (stopped_) return;
      stopping_ = true;
    }
    queueCv_.notify_all();
    p2pCv_.notify_all();
    bool stuck;
    {
      // The watchdog still runs here: a call that hangs now times out too.
      std::unique_lock<std::mutex> g(health_->m);
      health_->cv.wait(g, [this] { return workerExited_ || (!health_->broken.empty() && inCall_); });
      stuck = !workerExited_;
      watchStop_ = true;
    }
    health_->cv.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (stuck) {
      // The progress thread may wait for the MPI mutex the stuck call holds.
      worker_.detach();
      progress_.detach();
      gStuckCall = true;
      if (c10::raw::intrusive_ptr::use_count(this) > 0) c10::raw::intrusive_ptr::incref(this);
      std::lock_guard<std::mutex> q(queueMutex_);
      stopped_ = true;
      return;
    }
    if (worker_.joinable()) worker_.join();
    if (progress_.joinable()) progress_.join();
    if (gStuckCall) {
      std::lock_guard<std::mutex> q(queueMutex_);
      stopped_ = true;
      return;
    }
    std::lock_guard<std::mutex> g(mpiMutex());
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (spccl_ != nullptr) spcclCommDestroy(spccl_);
      MPI_Comm_free(&p2pComm_);
      MPI_Comm_free(&comm_);
    }
    spccl_ = nullptr;
#ifdef SPCCL_TORCH_CUDA
    // Every work has completed (its stream drained): abort frees the NCCL
    // communicator without waiting for the other ranks, whose groups may
    // shut down in another order.
    if (nccl_ != nullptr) {
      c10::cuda::CUDAGuard device(static_cast<c10::DeviceIndex>(device_));
      if (spcclCuda_ != nullptr) spcclCommDestroy(spcclCuda_);
      ncclCommAbort(nccl_);
      spcclCuda_ = nullptr;
      nccl_ = nullptr;
    }
#endif
    std::lock_guard<std::mutex> q(queueMutex_);
    stopped_ = true;
  }

  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  // True while a call that timed out is still in MPI.
  bool stuck() {
    std::lock_guard<std::mutex> g(health_->m);
    return !health_->broken.empty() && inCall_;
  }

  // Counters of every spccl call on this group, the CPU and the CUDA
  // communicator together (last_*: the one that made the latest call).
  spcclStats_t stats() const {
    spcclStats_t s{};
    if (spccl_ != nullptr) spcclCommGetStats(spccl_, &s);
#ifdef SPCCL_TORCH_CUDA
    spcclStats_t c{};
    if (spcclCuda_ != nullptr) spcclCommGetStats(spcclCuda_, &c);
    spcclStats_t sum = lastOnCuda_ ? c : s;
    sum.calls = s.calls + c.calls;
    sum.compressedCalls = s.compressedCalls + c.compressedCalls;
    sum.bytesSent = s.bytesSent + c.bytesSent;
    sum.denseBytes = s.denseBytes + c.denseBytes;
    sum.thresholdUpdates = s.thresholdUpdates + c.thresholdUpdates;
    return sum;
#else
    return s;
#endif
  }
  bool isShutDown() {
    std::lock_guard<std::mutex> g(queueMutex_);
    return stopping_;
  }
  bool envAllreduce() const { return envAllreduce_; }
  bool envAlltoall() const { return envAlltoall_; }

  // ---- collectives ------------------------------------------------------

  c10::intrusive_ptr<Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    auto rop = opts.reduceOp.op_;
    return enqueue(OpType::ALLREDUCE, tensors, {}, "spccl:all_reduce", [this, tensors, rop] {
      Desc d(size_);
      d[fKind] = kAllreduce;
      ReduceSpec spec;
      d[fErr] = tensors.size() != 1 ? kListSize : checkTensors(tensors);
      at::Tensor t = tensors.empty() ? at::Tensor() : tensors[0];
      if (d[fErr] == kOk) d[fErr] = reduceSpec(t.scalar_type(), rop, &spec);
      if (t.defined()) {
        d[fDtype] = static_cast<int64_t>(t.scalar_type());
        d[fNumel] = t.numel();
      }
      d[fOp] = rop;
      agree(d, true);
      reduceInPlace(t, rop, spec, /*allowSpccl=*/true);
    });
  }

  c10::intrusive_ptr<Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                               const c10d::AllreduceCoalescedOptions& opts) override {
    auto rop = opts.reduceOp.op_;
    return enqueue(OpType::ALLREDUCE_COALESCED, tensors, {}, "spccl:all_reduce_coalesced", [this, tensors, rop] {
      Desc d(size_);
      d[fKind] = kAllreduceCoalesced;
      ReduceSpec spec;
      d[fErr] = tensors.empty() ? kListSize : checkTensors(tensors);
      if (d[fErr] == kOk) d[fErr] = sameDtype(tensors, tensors[0].scalar_type());
      if (d[fErr] == kOk) d[fErr] = reduceSpec(tensors[0].scalar_type(), rop, &spec);
      int64_t total = 0;
      for (const auto& t : tensors) total += t.numel();
      if (!tensors.empty()) d[fDtype] = static_cast<int64_t>(tensors[0].scalar_type());
      d[fNumel] = total;
      d[fAux] = static_cast<int64_t>(tensors.size());
      d[fOp] = rop;
      if (d[fErr] == kOk && total * tensors[0].element_size() >= INT_MAX) d[fErr] = kTooLarge;
      agree(d, true, /*sameAux=*/true);
      std::vector<at::Tensor> flat;
      for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
      at::Tensor buf = at::cat(flat);
      reduceInPlace(buf, rop, spec, /*allowSpccl=*/false);
      int64_t off = 0;
      for (const auto& t : tensors) {
        t.view({-1}).copy_(buf.narrow(0, off, t.numel()));
        off += t.numel();
      }
    });
  }

  c10::intrusive_ptr<Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    int64_t root = opts.rootRank;
    return enqueue(OpType::BROADCAST, tensors, {}, "spccl:broadcast", [this, tensors, root] {
      Desc d(size_);
      d[fKind] = kBroadcast;
      d[fErr] = tensors.size() != 1 ? kListSize : checkTensors(tensors);
      if (d[fErr] == kOk && (root < 0 || root >= size_)) d[fErr] = kRoot;
      if (!tensors.empty()) {
        d[fDtype] = static_cast<int64_t>(tensors[0].scalar_type());
        d[fNumel] = tensors[0].numel();
      }
      d[fRoot] = root;
      agree(d, true);
      broadcastBytes(tensors[0], static_cast<int>(root));
    });
  }

  c10::intrusive_ptr<Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    int64_t root = opts.rootRank;
    auto rop = opts.reduceOp.op_;
    return enqueue(OpType::REDUCE, tensors, {}, "spccl:reduce", [this, tensors, root, rop] {
      Desc d(size_);
      d[fKind] = kReduce;
      ReduceSpec spec;
      d[fErr] = tensors.size() != 1 ? kListSize : checkTensors(tensors);
      if (d[fErr] == kOk) d[fErr] = reduceSpec(tensors[0].scalar_type(), rop, &spec);
      if (d[fErr] == kOk && (root < 0 || root >= size_)) d[fErr] = kRoot;
      if (!tensors.empty()) {
        d[fDtype] = static_cast<int64_t>(tensors[0].scalar_type());
        d[fNumel] = tensors[0].numel();
      }
      d[fRoot] = root;
      d[fOp] = rop;
      agree(d, true);
      reduceTo(tensors[0], rop, spec, static_cast<int>(root));
    });
  }

  c10::intrusive_ptr<Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions&) override {
    std::vector<at::Tensor> outs = outputs.empty() ? std::vector<at::Tensor>() : outputs[0];
    return enqueue(OpType::ALLGATHER, outs, inputs, "spccl:all_gather", [this, outs, inputs] {
      Desc d(size_);
      d[fKind] = kAllgather;
      d[fErr] = inputs.size() != 1 ? kListSize : checkTensors(inputs);
      if (d[fErr] == kOk && static_cast<int>(outs.size()) != size_) d[fErr] = kListSize;
      if (d[fErr] == kOk) d[fErr] = checkTensors(outs);
      if (d[fErr] == kOk) d[fErr] = sameDtype(outs, inputs[0].scalar_type());
      if (!inputs.empty()) {
        d[fDtype] = static_cast<int64_t>(inputs[0].scalar_type());
        d[fNumel] = inputs[0].numel();
      }
      for (int j = 0; j < size_ && j < static_cast<int>(outs.size()); ++j) d.recv(j, size_) = outs[j].numel();
      auto all = agree(d, false);
      // Uneven sizes are fine as long as rank r's output j has rank j's input size.
      for (int r = 0; r < size_; ++r)
        for (int j = 0; j < size_; ++j)
          if (row(all, r)[kHeader + size_ + j] != row(all, j)[fNumel])
            throwAll(c10::str("spccl all_gather: rank ", r, " expects ", row(all, r)[kHeader + size_ + j],
                              " elements from rank ", j, ", which sends ", row(all, j)[fNumel]));
      allgatherv(inputs[0], outs);
    });
  }

  c10::intrusive_ptr<Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                           const c10d::AllgatherOptions&) override {
    std::vector<at::Tensor> outs{output};
    return enqueue(OpType::_ALLGATHER_BASE, outs, {input}, "spccl:all_gather_into_tensor", [this, output, input] {
      Desc d(size_);
      d[fKind] = kAllgatherBase;
      d[fErr] = checkTensors({input, output});
      if (d[fErr] == kOk && output.scalar_type() != input.scalar_type()) d[fErr] = kDtypeLocal;
      if (d[fErr] == kOk && output.numel() != size_ * input.numel()) d[fErr] = kShape;
      d[fDtype] = static_cast<int64_t>(input.scalar_type());
      d[fNumel] = input.numel();
      agree(d, true);
      allgather(input, output);
    });
  }

  c10::intrusive_ptr<Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                          std::vector<std::vector<at::Tensor>>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    auto rop = opts.reduceOp.op_;
    std::vector<at::Tensor> ins = inputs.empty() ? std::vector<at::Tensor>() : inputs[0];
    return enqueue(OpType::REDUCE_SCATTER, outputs, ins, "spccl:reduce_scatter", [this, outputs, ins, rop] {
      Desc d(size_);
      d[fKind] = kReduceScatter;
      ReduceSpec spec;
      d[fErr] = outputs.size() != 1 ? kListSize : checkTensors(outputs);
      if (d[fErr] == kOk && static_cast<int>(ins.size()) != size_) d[fErr] = kListSize;
      if (d[fErr] == kOk) d[fErr] = checkTensors(ins);
      if (d[fErr] == kOk) d[fErr] = sameDtype(ins, outputs[0].scalar_type());
      if (d[fErr] == kOk)
        for (const auto& t : ins)
          if (t.numel() != outputs[0].numel()) d[fErr] = kShape;
      if (d[fErr] == kOk) d[fErr] = reduceSpec(outputs[0].scalar_type(), rop, &spec);
      if (!outputs.empty()) {
        d[fDtype] = static_cast<int64_t>(outputs[0].scalar_type());
        d[fNumel] = outputs[0].numel();
      }
      d[fOp] = rop;
      agree(d, true);
      std::vector<at::Tensor> flat;
      for (const auto& t : ins) flat.push_back(t.reshape({-1}));
      reduceScatter(outputs[0], at::cat(flat), rop, spec);
    });
  }

  c10::intrusive_ptr<Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                const c10d::ReduceScatterOptions& opts) override {
    auto rop = opts.reduceOp.op_;
    std::vector<at::Tensor> outs{output};
    return enqueue(OpType::_REDUCE_SCATTER_BASE, outs, {input}, "spccl:reduce_scatter_tensor",
                   [this, output, input, rop] {
                     Desc d(size_);
                     d[fKind] = kReduceScatterBase;
                     ReduceSpec spec;
                     d[fErr] = checkTensors({input, output});
                     if (d[fErr] == kOk && output.scalar_type() != input.scalar_type()) d[fErr] = kDtypeLocal;
                     if (d[fErr] == kOk && input.numel() != size_ * output.numel()) d[fErr] = kShape;
                     if (d[fErr] == kOk) d[fErr] = reduceSpec(output.scalar_type(), rop, &spec);
                     d[fDtype] = static_cast<int64_t>(output.scalar_type());
                     d[fNumel] = output.numel();
                     d[fOp] = rop;
                     agree(d, true);
                     reduceScatter(output, input, rop, spec);
                   });
  }

  c10::intrusive_ptr<Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                                         std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions&) override {
    std::vector<at::Tensor> outs{output};
    return enqueue(OpType::ALLTOALL_BASE, outs, {input}, "spccl:all_to_all_single",
                   [this, output, input, outputSplits, inputSplits] {
                     Desc d(size_);
                     d[fKind] = kAlltoallBase;
                     d[fErr] = checkTensors({input, output});
                     if (d[fErr] == kOk && output.scalar_type() != input.scalar_type()) d[fErr] = kDtypeLocal;
                     if (d[fErr] == kOk && (input.dim() == 0 || output.dim() == 0)) d[fErr] = kShape;
                     std::vector<int64_t> sendCounts, recvCounts;
                     if (d[fErr] == kOk) d[fErr] = splitCounts(input, inputSplits, &sendCounts);
                     if (d[fErr] == kOk) d[fErr] = splitCounts(output, outputSplits, &recvCounts);
                     if (d[fErr] == kOk)
                       for (int j = 0; j < size_; ++j) {
                         d.send(j) = sendCounts[j];
                         d.recv(j, size_) = recvCounts[j];
                       }
                     d[fDtype] = static_cast<int64_t>(input.scalar_type());
                     auto all = agree(d, false);
                     checkPairs(all, "all_to_all_single");
                     // The environment opt-in: equal blocks of floats go through spccl's
                     // drop-in alltoall, which compresses them row by row.
                     bool equal = true;
                     for (int r = 0; r < size_ && equal; ++r)
                       for (int j = 0; j < size_; ++j)
                         if (row(all, r)[kHeader + j] != row(all, 0)[kHeader]) {
                           equal = false;
                           break;
                         }
                     at::Tensor in = input;
                     if (overlaps(input, output)) in = input.clone();
                     if (envAlltoall_ && equal && isSpcclFloat(input.scalar_type())) {
                       spcclCheck(spcclAlltoAll(in.data_ptr(), output.data_ptr(), static_cast<size_t>(sendCounts[0]),
                                                spcclType(input.scalar_type()), spcclFor(), streamArg()),
                                  "spcclAlltoAll");
                       return;
                     }
                     alltoallv(in, sendCounts, output, recvCounts);
                   });
  }

  c10::intrusive_ptr<Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                    const c10d::AllToAllOptions&) override {
    return enqueue(OpType::ALLTOALL, outputs, inputs, "spccl:all_to_all", [this, outputs, inputs] {
      Desc d(size_);
      d[fKind] = kAlltoall;
      d[fErr] = static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_
                    ? kListSize
                    : checkTensors(inputs);
      if (d[fErr] == kOk) d[fErr] = checkTensors(outputs);
      if (d[fErr] == kOk) d[fErr] = sameDtype(inputs, inputs[0].scalar_type());
      if (d[fErr] == kOk) d[fErr] = sameDtype(outputs, inputs[0].scalar_type());
      std::vector<int64_t> sendCounts(size_), recvCounts(size_);
      if (d[fErr] == kOk)
        for (int j = 0; j < size_; ++j) {
          d.send(j) = sendCounts[j] = inputs[j].numel();
          d.recv(j, size_) = recvCounts[j] = outputs[j].numel();
        }
      if (!inputs.empty()) d[fDtype] = static_cast<int64_t>(inputs[0].scalar_type());
      auto all = agree(d, false);
      checkPairs(all, "all_to_all");
      std::vector<at::Tensor> flatIn, flatOutViews;
      for (const auto& t : inputs) flatIn.push_back(t.reshape({-1}));
      at::Tensor in = at::cat(flatIn);
      int64_t totalOut = 0;
      for (const auto& t : outputs) totalOut += t.numel();
      at::Tensor out = at::empty({totalOut}, inputs[0].options());
      alltoallv(in, sendCounts, out, recvCounts);
      int64_t off = 0;
      for (const auto& t : outputs) {
        t.view({-1}).copy_(out.narrow(0, off, t.numel()));
        off += t.numel();
      }
    });
  }

  c10::intrusive_ptr<Work> barrier(const c10d::BarrierOptions&) override {
    return enqueue(OpType::BARRIER, {}, {}, "spccl:barrier", [this] {
      Desc d(size_);
      d[fKind] = kBarrier;
      agree(d, true);
      checkMpi(MPI_Barrier(comm_), "MPI_Barrier");
    });
  }

  c10::intrusive_ptr<Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::GatherOptions& opts) override {
    int64_t root = opts.rootRank;
    std::vector<at::Tensor> outs = outputs.empty() ? std::vector<at::Tensor>() : outputs[0];
    return enqueue(OpType::GATHER, outs, inputs, "spccl:gather", [this, outs, inputs, root] {
      Desc d(size_);
      d[fKind] = kGather;
      d[fErr] = inputs.size() != 1 ? kListSize : checkTensors(inputs);
      if (d[fErr] == kOk && (root < 0 || root >= size_)) d[fErr] = kRoot;
      if (d[fErr] == kOk && rank_ == root) {
        if (static_cast<int>(outs.size()) != size_) d[fErr] = kListSize;
        if (d[fErr] == kOk) d[fErr] = checkTensors(outs);
        if (d[fErr] == kOk) d[fErr] = sameDtype(outs, inputs[0].scalar_type());
        if (d[fErr] == kOk)
          for (const auto& t : outs)
            if (t.numel() != inputs[0].numel()) d[fErr] = kShape;
      }
      if (!inputs.empty()) {
        d[fDtype] = static_cast<int64_t>(inputs[0].scalar_type());
        d[fNumel] = inputs[0].numel();
      }
      d[fRoot] = root;
      agree(d, true);
      gatherTo(inputs[0], outs, static_cast<int>(root));
    });
  }

  c10::intrusive_ptr<Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                   const c10d::ScatterOptions& opts) override {
    int64_t root = opts.rootRank;
    std::vector<at::Tensor> ins = inputs.empty() ? std::vector<at::Tensor>() : inputs[0];
    return enqueue(OpType::SCATTER, outputs, ins, "spccl:scatter", [this, outputs, ins, root] {
      Desc d(size_);
      d[fKind] = kScatter;
      d[fErr] = outputs.size() != 1 ? kListSize : checkTensors(outputs);
      if (d[fErr] == kOk && (root < 0 || root >= size_)) d[fErr] = kRoot;
      if (d[fErr] == kOk && rank_ == root) {
        if (static_cast<int>(ins.size()) != size_) d[fErr] = kListSize;
        if (d[fErr] == kOk) d[fErr] = checkTensors(ins);
        if (d[fErr] == kOk) d[fErr] = sameDtype(ins, outputs[0].scalar_type());
        if (d[fErr] == kOk)
          for (const auto& t : ins)
            if (t.numel() != outputs[0].numel()) d[fErr] = kShape;
      }
      if (!outputs.empty()) {
        d[fDtype] = static_cast<int64_t>(outputs[0].scalar_type());
        d[fNumel] = outputs[0].numel();
      }
      d[fRoot] = root;
      agree(d, true);
      scatterFrom(ins, outputs[0], static_cast<int>(root));
    });
  }

  // ---- point to point ---------------------------------------------------
  // A 3-value header (error, dtype, numel) goes first, then the data; the
  // receiver checks the header against its tensor, so a mismatch or a bad
  // tensor on the sender is an error on the receiver instead of a hang.

  c10::intrusive_ptr<Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(dst >= 0 && dst < size_, "spccl send: destination rank ", dst, " out of range");
    TORCH_CHECK(tag >= 0 && tag <= 32767, "spccl send: tag ", tag, " out of range [0, 32767]");
    checkUsable("send");
    auto op = std::make_shared<P2P>();
    op->work = c10::make_intrusive<SpcclWork>(OpType::SEND, tensors, "spccl:send", health_);
    int64_t err = tensors.size() != 1 ? kListSize : checkTensors(tensors);
    if (err == kOk && tensors[0].is_cuda()) err = kCudaUnsupported;
    op->header[0] = err;
    if (err == kOk) {
      op->header[1] = static_cast<int64_t>(tensors[0].scalar_type());
      op->header[2] = tensors[0].numel();
      op->tensor = tensors[0];
    }
    {
      std::lock_guard<std::mutex> g(mpiMutex());
      MPI_Request r;
      checkMpi(MPI_Isend(op->header, 3, MPI_INT64_T, dst, tag, p2pComm_, &r), "MPI_Isend");
      op->requests.push_back(r);
      if (err == kOk) {
        checkMpi(MPI_Isend(op->tensor.data_ptr(), asInt(op->tensor.nbytes()), MPI_BYTE, dst, tag, p2pComm_, &r),
                 "MPI_Isend");
        op->requests.push_back(r);
      }
    }
    if (err != kOk) {
      // The header (which tells the receiver) is still in flight: the progress
      // thread keeps it alive until it is sent; this work fails with the error.
      std::string msg = c10::str("spccl send to rank ", dst, ": ", localErrorText(err));
      op->error = msg;
      addP2P(op);
      TORCH_CHECK(false, msg);
    }
    startClock(op->work);
    addP2P(op);
    return op->work;
  }

  c10::intrusive_ptr<Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(src >= 0 && src < size_, "spccl recv: source rank ", src, " out of range");
    TORCH_CHECK(tag >= 0 && tag <= 32767, "spccl recv: tag ", tag, " out of range [0, 32767]");
    checkUsable("recv");
    auto op = std::make_shared<P2P>();
    op->work = c10::make_intrusive<SpcclWork>(OpType::RECV, tensors, "spccl:recv", health_);
    op->work->source_ = src;
    op->isRecv = true;
    op->peer = src;
    op->tag = tag;
    op->localErr = tensors.size() != 1 ? kListSize : checkTensors(tensors);
    if (op->localErr == kOk && tensors[0].is_cuda()) op->localErr = kCudaUnsupported;
    if (op->localErr == kOk) op->tensor = tensors[0];
    {
      std::lock_guard<std::mutex> g(mpiMutex());
      MPI_Request r;
      checkMpi(MPI_Irecv(op->header, 3, MPI_INT64_T, src, tag, p2pComm_, &r), "MPI_Irecv");
      op->requests.push_back(r);
    }
    startClock(op->work);
    addP2P(op);
    return op->work;
  }

  // ---- spccl's own calls, run on the worker like any collective --------

  // `owner` keeps the object that holds *comp and *compOnCuda alive until
  // the call has run. A compressor stays on the communicator it was made on.
  c10::intrusive_ptr<Work> compressedAllreduce(std::shared_ptr<void> owner, spcclCompressor_t* comp, bool* compOnCuda,
                                               at::Tensor t, float density, int interval, int wire, bool avg) {
    std::vector<at::Tensor> outs{t};
    return enqueue(
        OpType::ALLREDUCE, outs, {}, "spccl:dct_allreduce",
        [this, owner, comp, compOnCuda, t, density, interval, wire, avg] {
          Desc d(size_);
          d[fKind] = kCompressedAllreduce;
          d[fErr] = checkTensor(t);
          if (d[fErr] == kOk && !isSpcclFloat(t.scalar_type())) d[fErr] = kDtypeUnsupported;
          d[fDtype] = static_cast<int64_t>(t.scalar_type());
          d[fNumel] = t.numel();
          agree(d, true);
          if (*comp != nullptr && *compOnCuda != t.is_cuda())
            throwAll(c10::str("spccl dct_hook: this compressor's buffer was on ", *compOnCuda ? "CUDA" : "the CPU",
                              " and is now on ", t.device(), "; make a new hook state after moving the model"));
          if (*comp == nullptr) {
            spcclCompressConfig_t cfg;
            spcclCheck(spcclCompressConfigInit(&cfg), "spcclCompressConfigInit");
            cfg.density = density;
            cfg.thresholdInterval = interval;
            cfg.errorFeedback = 1;
            cfg.wireValueType = static_cast<spcclDataType_t>(wire);
            spcclCheck(spcclCompressorCreate(spcclFor(), static_cast<size_t>(t.numel()), spcclType(t.scalar_type()),
                                             &cfg, comp),
                       "spcclCompressorCreate");
            *compOnCuda = t.is_cuda();
          }
          spcclCheck(
              spcclAllReduceCompressed(t.data_ptr(), t.data_ptr(), avg ? spcclAvg : spcclSum, *comp, streamArg()),
              "spcclAllReduceCompressed");
        });
  }

  c10::intrusive_ptr<Work> alltoallRows(at::Tensor in, at::Tensor out, int64_t rowsPerPeer, int64_t rowLen,
                                        float density, spcclSelection_t* sel) {
    std::vector<at::Tensor> outs{out};
    return enqueue(
        OpType::ALLTOALL, outs, {in}, "spccl:alltoall_rows", [this, in, out, rowsPerPeer, rowLen, density, sel] {
          Desc d(size_);
          d[fKind] = kAlltoallRows;
          d[fErr] = checkTensors({in, out});
          if (d[fErr] == kOk && !isSpcclFloat(in.scalar_type())) d[fErr] = kDtypeUnsupported;
          if (d[fErr] == kOk && out.scalar_type() != in.scalar_type()) d[fErr] = kDtypeLocal;
          if (d[fErr] == kOk && (in.numel() != size_ * rowsPerPeer * rowLen || out.numel() != in.numel()))
            d[fErr] = kShape;
          d[fDtype] = static_cast<int64_t>(in.scalar_type());
          d[fNumel] = rowsPerPeer;
          d[fAux] = rowLen;
          agree(d, true, true);
          spcclCheck(spcclAlltoAllRowsCompressed(in.data_ptr(), out.data_ptr(), static_cast<size_t>(rowsPerPeer),
                                                 static_cast<size_t>(rowLen), spcclType(in.scalar_type()), density, sel,
                                                 spcclFor(), streamArg()),
                     "spcclAlltoAllRowsCompressed");
        });
  }

  // spcclAllReduceRowSparse: every rank's (id, row) pairs summed per id; the
  // union's sorted ids and their sums, the same on every rank, into *out.
  // The union is at most the sum of every rank's row count, which the
  // descriptors carry, so the outputs are sized before the call.
  c10::intrusive_ptr<Work> allreduceRowSparse(at::Tensor ids, at::Tensor rows, std::shared_ptr<RowSparseResult> out) {
    return enqueue(OpType::ALLREDUCE, {}, {ids, rows}, "spccl:allreduce_rowsparse", [this, ids, rows, out] {
      Desc d(size_);
      d[fKind] = kAllreduceRowSparse;
      d[fErr] = checkTensors({ids, rows});
      if (d[fErr] == kOk &&
          (ids.scalar_type() != at::kLong || !(isSpcclFloat(rows.scalar_type()) || rows.scalar_type() == at::kDouble)))
        d[fErr] = kDtypeUnsupported;
      if (d[fErr] == kOk && (ids.dim() != 1 || rows.dim() != 2 || rows.size(0) != ids.numel())) d[fErr] = kShape;
      d[fDtype] = static_cast<int64_t>(rows.scalar_type());
      d[fAux] = rows.dim() == 2 ? rows.size(1) : -1;
      d.send(0) = ids.numel();
      const auto all = agree(d, false, true);
      int64_t capacity = 0;
      for (int r = 0; r < size_; ++r) capacity += row(all, r)[kHeader];
      const int64_t rowLen = rows.size(1);
      at::Tensor outIds = at::empty({capacity}, ids.options());
      at::Tensor outRows = at::empty({capacity, rowLen}, rows.options());
      size_t got = 0;
      spcclCheck(spcclAllReduceRowSparse(ids.data_ptr<int64_t>(), rows.data_ptr(), static_cast<size_t>(ids.numel()),
                                         static_cast<size_t>(rowLen), spcclType(rows.scalar_type()),
                                         outIds.data_ptr<int64_t>(), outRows.data_ptr(), static_cast<size_t>(capacity),
                                         &got, spcclFor(), streamArg()),
                 "spcclAllReduceRowSparse");
      out->ids = outIds.narrow(0, 0, static_cast<int64_t>(got));
      out->rows = outRows.narrow(0, 0, static_cast<int64_t>(got));
    });
  }

  c10::intrusive_ptr<Work> alltoallRowsBackward(at::Tensor grad, at::Tensor out, spcclSelection_t sel) {
    std::vector<at::Tensor> outs{out};
    return enqueue(OpType::ALLTOALL, outs, {grad}, "spccl:alltoall_rows_backward", [this, grad, out, sel] {
      Desc d(size_);
      d[fKind] = kAlltoallRowsBackward;
      d[fErr] = checkTensors({grad, out});
      if (d[fErr] == kOk && out.scalar_type() != grad.scalar_type()) d[fErr] = kDtypeLocal;
      d[fDtype] = static_cast<int64_t>(grad.scalar_type());
      d[fNumel] = grad.numel();
      agree(d, true);
      spcclCheck(spcclAlltoAllRowsBackward(grad.data_ptr(), out.data_ptr(), sel, streamArg()),
                 "spcclAlltoAllRowsBackward");
    });
  }

 private:
  struct Job {
    c10::intrusive_ptr<SpcclWork> work;
    std::function<void()> fn;
    int device = -1;          // the CUDA device its tensors are on; -1: the CPU
    int64_t deviceErr = kOk;  // kMixedDevices: its tensors disagree
#ifdef SPCCL_TORCH_CUDA
    std::shared_ptr<at::cuda::CUDAEvent> ready;  // recorded on the caller's stream
#endif
  };

  struct P2P {
    c10::intrusive_ptr<SpcclWork> work;
    std::vector<MPI_Request> requests;
    int64_t header[3] = {0, 0, 0};
    at::Tensor tensor;
    at::Tensor drain;  // where a rejected payload is received
    bool isRecv = false;
    bool dataPosted = false;
    int peer = -1;
    int tag = 0;
    int64_t localErr = kOk;
    std::string error;
  };

  // `inputs`: tensors the call reads besides `outputs`, for its device.
  c10::intrusive_ptr<Work> enqueue(OpType type, std::vector<at::Tensor> outputs, const std::vector<at::Tensor>& inputs,
                                   const char* title, std::function<void()> fn) {
    checkUsable(title + 6);
    Job job;
    int device = -1;
    bool cpu = false, mixed = false;
    auto scan = [&](const std::vector<at::Tensor>& ts) {
      for (const auto& t : ts) {
        if (!t.defined() || !t.is_cuda()) {
          cpu = cpu || t.defined();
          continue;
        }
        if (device < 0) device = t.get_device();
        mixed = mixed || t.get_device() != device;
      }
    };
    scan(outputs);
    scan(inputs);
    mixed = mixed || (device >= 0 && cpu);
    c10::intrusive_ptr<SpcclWork> work;
    {
      std::lock_guard<std::mutex> g(queueMutex_);
      TORCH_CHECK(!stopping_, "spccl: ", title, " on a process group that was shut down");
      // The watchdog closed the queue after checkUsable above.
      TORCH_CHECK(closed_.empty(), closed_);
#ifdef SPCCL_TORCH_CUDA
      // The group's device is the first one it is used with.
      if (device >= 0 && !mixed && device_ < 0) {
        device_ = device;
        stream_ = at::cuda::getStreamFromPool(/*isHighPriority=*/true, static_cast<c10::DeviceIndex>(device));
      }
      mixed = mixed || (device >= 0 && device != device_);
      if (device >= 0 && !mixed) {
        job.device = device;
        job.ready = std::make_shared<at::cuda::CUDAEvent>();
        job.ready->record(at::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)));
      }
#endif
      // Without CUDA, checkTensor rejects CUDA tensors; the job runs as a CPU one.
      if (mixed) job.deviceErr = kMixedDevices;
      std::vector<c10::Device> devices;
      if (job.device >= 0) devices.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(job.device));
      work = c10::make_intrusive<SpcclWork>(type, std::move(outputs), title, health_, std::move(devices));
      job.work = work;
      job.fn = std::move(fn);
      queue_.push_back(std::move(job));
    }
    queueCv_.notify_one();
    return work;
  }

  void checkUsable(const char* op) {
    std::string why = health_->unusable(op);
    TORCH_CHECK(why.empty(), why);
  }

  // ---- timeouts ------------------------------------------------------------
  // A work's clock starts when its call starts (a collective taken from the
  // queue, a send/recv posted); the watchdog fails it once the group's timeout
  // has passed. Queued works need no clock: a timeout fails them all.

  void startClock(const c10::intrusive_ptr<SpcclWork>& work) {
    if (health_->timeout.count() <= 0) return;
    {
      std::lock_guard<std::mutex> g(health_->m);
      active_.push_back({work, std::chrono::steady_clock::now() + health_->timeout});
    }
    health_->cv.notify_all();
  }

  void stopClock(const SpcclWork* work) {
    std::lock_guard<std::mutex> g(health_->m);
    active_.remove_if([work](const Clock& c) { return c.work.get() == work; });
  }

  void watchdogLoop() {
    std::unique_lock<std::mutex> g(health_->m);
    bool queueFailed = false;
    for (;;) {
      if (watchStop_) return;
      auto now = std::chrono::steady_clock::now();
      auto next = std::chrono::steady_clock::time_point::max();
      for (auto& c : active_) {
        if (health_->broken.empty() && c.deadline <= now && !c.work->isCompleted())
          health_->broken = health_->timedOut(c.work->op(), health_->timeout, "the group's");
        next = std::min(next, c.deadline);
      }
      if (!health_->broken.empty() && (!active_.empty() || !queueFailed)) {
        // Fail what is running and what is queued; the group takes no more.
        std::string why = health_->broken;
        std::vector<c10::intrusive_ptr<SpcclWork>> victims;
        for (auto& c : active_) victims.push_back(c.work);
        active_.clear();
        g.unlock();
        if (!queueFailed) {
          std::lock_guard<std::mutex> q(queueMutex_);
          closed_ =
              c10::str("spccl: process group ", health_->name, " is unusable (an earlier operation timed out): ", why);
          for (auto& j : queue_) victims.push_back(j.work);
          queue_.clear();
          queueFailed = true;
        }
        for (auto& w : victims) w->fail(errorPtr(why));
        g.lock();
        continue;
      }
      if (next == std::chrono::steady_clock::time_point::max()) health_->cv.wait(g);
      else health_->cv.wait_until(g, next);
    }
  }

  void workerLoop() {
    runQueue();
    {
      std::lock_guard<std::mutex> g(health_->m);
      workerExited_ = true;
    }
    health_->cv.notify_all();
  }

  void runQueue() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> g(queueMutex_);
        queueCv_.wait(g, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        if (stopping_) {
          // Nothing can run once the group is going away: fail what is left.
          for (auto& j : queue_)
            j.work->fail(std::make_exception_ptr(std::runtime_error("spccl: process group shut down")));
          queue_.clear();
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string broken;
      {
        std::lock_guard<std::mutex> g(health_->m);
        broken = health_->broken;
        inCall_ = broken.empty();
      }
      if (!broken.empty()) {
        job.work->fail(errorPtr(broken));
        continue;
      }
      startClock(job.work);
      std::exception_ptr err;
      {
        std::lock_guard<std::mutex> g(mpiMutex());
        try {
          ++seq_;
          cur_ = &job;
          runJob(job);
          lastOnCuda_ = job.device >= 0;
        } catch (...) {
          err = std::current_exception();
        }
        cur_ = nullptr;
        // Cleared under the MPI mutex: a thread that holds it next knows this
        // group is out of its call (shutdown relies on that).
        std::lock_guard<std::mutex> h(health_->m);
        inCall_ = false;
      }
      stopClock(job.work.get());
      // A CUDA work's future records its event on the group's stream.
      completeOn(job, err);
    }
  }

  // A CUDA job runs on the group's stream, after the caller's stream reached
  // the job's enqueue; the stream is drained before the work completes.
  void runJob(Job& job) {
#ifdef SPCCL_TORCH_CUDA
    if (job.device >= 0) {
      // The worker's own device too: what runs on it outside a guard (a
      // future's callbacks) must not start a context on device 0.
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(job.device));
      c10::cuda::CUDAStreamGuard stream(*stream_);
      job.ready->block(*stream_);
      try {
        job.fn();
      } catch (...) {
        // What was enqueued still uses the job's tensors: let it finish first.
        if (!ncclAborted_) drainStream();
        throw;
      }
      drainStream();
      return;
    }
#endif
    job.fn();
  }

  void completeOn(Job& job, std::exception_ptr err) {
#ifdef SPCCL_TORCH_CUDA
    std::optional<c10::cuda::CUDAStreamGuard> stream;
    if (job.device >= 0) stream.emplace(*stream_);
#endif
    if (err) job.work->fail(err);
    else job.work->succeed();
  }

  void addP2P(std::shared_ptr<P2P> op) {
    {
      std::lock_guard<std::mutex> g(p2pMutex_);
      pending_.push_back(std::move(op));
    }
    p2pCv_.notify_one();
  }

  // Completes send/recv requests. MPI progresses inside blocking collectives
  // too, so testing from here while a worker holds the MPI mutex is not needed.
  void progressLoop() {
    for (;;) {
      std::list<std::shared_ptr<P2P>> ops;
      {
        std::unique_lock<std::mutex> g(p2pMutex_);
        p2pCv_.wait(g, [this] { return stopping_ || !pending_.empty(); });
        if (stopping_ && pending_.empty()) return;
        ops.swap(pending_);
      }
      std::list<std::shared_ptr<P2P>> notDone;
      for (auto& op : ops) {
        bool done = false;
        std::exception_ptr err;
        try {
          std::lock_guard<std::mutex> g(mpiMutex());
          done = stepP2P(*op);
        } catch (...) {
          err = std::current_exception();
          done = true;
        }
        if (!done) {
          notDone.push_back(op);
          continue;
        }
        if (!err && !op->error.empty()) {
          try {
            TORCH_CHECK(false, op->error);
          } catch (...) {
            err = std::current_exception();
          }
        }
        stopClock(op->work.get());
        if (err) op->work->fail(err);
        else op->work->succeed();
      }
      bool stop;
      {
        std::lock_guard<std::mutex> g(p2pMutex_);
        pending_.splice(pending_.end(), notDone);
        stop = stopping_;
      }
      if (stop) {
        std::lock_guard<std::mutex> g(p2pMutex_);
        for (auto& op : pending_)
          op->work->fail(std::make_exception_ptr(std::runtime_error("spccl: process group shut down")));
        pending_.clear();
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // One test of an operation's requests; true when it is finished.
  bool stepP2P(P2P& op) {
    int flag = 0;
    checkMpi(MPI_Testall(static_cast<int>(op.requests.size()), op.requests.data(), &flag, MPI_STATUSES_IGNORE),
             "MPI_Testall");
    if (!flag) return false;
    op.requests.clear();
    if (!op.isRecv || op.dataPosted) return true;
    // The header arrived: check it, then receive the data (into a scratch
    // buffer when the data cannot be used, so the sender still completes).
    int64_t peerErr = op.header[0];
    if (peerErr != kOk) {
      op.error =
          c10::str("spccl recv from rank ", op.peer, ": the sender's tensor was rejected: ", localErrorText(peerErr));
      return true;
    }
    auto peerType = static_cast<at::ScalarType>(op.header[1]);
    int64_t peerNumel = op.header[2];
    if (op.localErr != kOk) {
      op.error = c10::str("spccl recv from rank ", op.peer, ": ", localErrorText(op.localErr));
    } else if (peerType != op.tensor.scalar_type() || peerNumel != op.tensor.numel()) {
      op.error = c10::str("spccl recv from rank ", op.peer, ": the sender sent ", peerNumel, " elements of ",
                          c10::toString(peerType), ", this rank expects ", op.tensor.numel(), " elements of ",
                          c10::toString(op.tensor.scalar_type()));
    }
    MPI_Request r;
    if (op.error.empty()) {
      checkMpi(MPI_Irecv(op.tensor.data_ptr(), asInt(op.tensor.nbytes()), MPI_BYTE, op.peer, op.tag, p2pComm_, &r),
               "MPI_Irecv");
    } else {
      op.drain = at::empty({peerNumel}, at::TensorOptions().dtype(peerType));
      checkMpi(MPI_Irecv(op.drain.data_ptr(), asInt(op.drain.nbytes()), MPI_BYTE, op.peer, op.tag, p2pComm_, &r),
               "MPI_Irecv");
    }
    op.requests.push_back(r);
    op.dataPosted = true;
    return false;
  }

  // ---- helpers run on the worker ----------------------------------------

  const int64_t* row(const std::vector<int64_t>& all, int r) const {
    return all.data() + static_cast<size_t>(r) * (kHeader + 2 * size_);
  }

  [[noreturn]] void throwAll(const std::string& msg) { TORCH_CHECK(false, msg); }

  // Exchanges descriptors; throws the same error on every rank when any rank
  // rejected its input or the ranks disagree on what they were asked to do.
  std::vector<int64_t> agree(Desc& d, bool sameNumel, bool sameAux = false) {
    const int W = kHeader + 2 * size_;
    if (d[fErr] == kOk && cur_ != nullptr) d[fErr] = cur_->deviceErr;
    d[fDevice] = onCuda() ? 1 : 0;
    std::vector<int64_t> all(static_cast<size_t>(W) * size_);
    checkMpi(MPI_Allgather(d.v.data(), W, MPI_INT64_T, all.data(), W, MPI_INT64_T, comm_),
             "MPI_Allgather (call descriptor)");
    auto at = [&](int r, int f) { return all[static_cast<size_t>(r) * W + f]; };
    const char* name = kindName(d[fKind]);
    for (int r = 0; r < size_; ++r)
      if (at(r, fKind) != at(0, fKind)) {
        std::ostringstream m;
        m << "spccl: ranks called different collectives:";
        for (int q = 0; q < size_; ++q)
          m << " rank " << q << " " << kindName(at(q, fKind)) << (q + 1 < size_ ? "," : "");
        TORCH_CHECK(false, m.str());
      }
    std::ostringstream bad;
    for (int r = 0; r < size_; ++r)
      if (at(r, fErr) != kOk) bad << " rank " << r << ": " << localErrorText(at(r, fErr)) << ";";
    TORCH_CHECK(bad.str().empty(), "spccl ", name, " rejected on every rank:", bad.str());
    enum Show { kNumber, kDtype, kDevice };
    auto mismatch = [&](int f, const char* what, Show show) {
      for (int r = 1; r < size_; ++r)
        if (at(r, f) != at(0, f)) {
          std::ostringstream m;
          m << "spccl " << name << ": " << what << " mismatch across ranks (";
          for (int q = 0; q < size_; ++q) {
            m << "rank " << q << ": ";
            if (show == kDtype) m << c10::toString(static_cast<at::ScalarType>(at(q, f)));
            else if (show == kDevice) m << (at(q, f) == 1 ? "CUDA" : "CPU");
            else m << at(q, f);
            m << (q + 1 < size_ ? ", " : ")");
          }
          TORCH_CHECK(false, m.str());
        }
    };
    mismatch(fDevice, "device", kDevice);
    mismatch(fDtype, "dtype", kDtype);
    mismatch(fOp, "reduce op", kNumber);
    mismatch(fRoot, "root rank", kNumber);
    if (sameNumel) mismatch(fNumel, "tensor size (elements)", kNumber);
    if (sameAux) mismatch(fAux, "tensor count / row length", kNumber);
#ifdef SPCCL_TORCH_CUDA
    if (onCuda() && nccl_ == nullptr) initNccl();  // every rank is here: the call is agreed
#endif
    return all;
  }

  void checkPairs(const std::vector<int64_t>& all, const char* name) {
    const int W = kHeader + 2 * size_;
    for (int r = 0; r < size_; ++r)
      for (int j = 0; j < size_; ++j) {
        int64_t sends = all[static_cast<size_t>(r) * W + kHeader + j];
        int64_t expects = all[static_cast<size_t>(j) * W + kHeader + size_ + r];
        TORCH_CHECK(sends == expects, "spccl ", name, ": rank ", r, " sends ", sends, " elements to rank ", j,
                    ", which expects ", expects, " (split sizes disagree)");
      }
  }

  int64_t splitCounts(const at::Tensor& t, const std::vector<int64_t>& splits, std::vector<int64_t>* counts) {
    int64_t rows = t.size(0);
    int64_t rowElems = rows > 0 ? t.numel() / rows : 0;
    if (rows == 0) {
      rowElems = 1;
      for (int64_t i = 1; i < t.dim(); ++i) rowElems *= t.size(i);
    }
    counts->assign(size_, 0);
    if (splits.empty()) {
      if (rows % size_ != 0) return kShape;
      for (int j = 0; j < size_; ++j) (*counts)[j] = rows / size_ * rowElems;
      return kOk;
    }
    if (static_cast<int>(splits.size()) != size_) return kListSize;
    int64_t sum = 0;
    for (int j = 0; j < size_; ++j) {
      if (splits[j] < 0) return kShape;
      sum += splits[j];
      (*counts)[j] = splits[j] * rowElems;
    }
    return sum == rows ? kOk : kShape;
  }

  static bool overlaps(const at::Tensor& a, const at::Tensor& b) {
    auto* a0 = static_cast<const char*>(a.data_ptr());
    auto* b0 = static_cast<const char*>(b.data_ptr());
    return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
  }

  // ---- data movement: MPI for CPU tensors, NCCL for CUDA ones -------------

  bool onCuda() const { return cur_ != nullptr && cur_->device >= 0; }
  // spccl's communicator and stream for the running job.
  spcclComm_t spcclFor() const {
#ifdef SPCCL_TORCH_CUDA
    if (onCuda()) {
      TORCH_CHECK(spcclCuda_ != nullptr, "spccl: spccl's communicator on NCCL could not be made: ", spcclCudaError_);
      return spcclCuda_;
    }
#endif
    return spccl_;
  }
  void* streamArg() const {
#ifdef SPCCL_TORCH_CUDA
    if (onCuda()) return stream_->stream();
#endif
    return nullptr;
  }

#ifdef SPCCL_TORCH_CUDA
  cudaStream_t cudaStream() const { return stream_->stream(); }

  // The group's NCCL communicator (rank 0's id over MPI) and spccl's on it.
  // Every step's outcome is agreed over MPI, so a failure on one rank is an
  // error on all of them, never a rank left waiting. spccl's communicator can
  // fail where NCCL's works (a setting it refuses on device buffers): then only
  // the spccl calls on CUDA tensors fail, with its error (spcclFor).
  void initNccl() {
    struct {
      int32_t ok;
      ncclUniqueId id;
    } root{1, {}};
    if (rank_ == 0) root.ok = ncclGetUniqueId(&root.id) == ncclSuccess;
    checkMpi(MPI_Bcast(&root, sizeof root, MPI_BYTE, 0, comm_), "MPI_Bcast (NCCL id)");
    TORCH_CHECK(root.ok, "spccl: ncclGetUniqueId failed on rank 0");
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, size_, root.id, rank_);
    int ok = r == ncclSuccess, all = 0;
    checkMpi(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce (NCCL init)");
    if (!all) {
      if (r == ncclSuccess) ncclCommAbort(comm);
      TORCH_CHECK(false, "spccl: ncclCommInitRank failed on ", ok ? "another rank" : "this rank", ": ",
                  ncclGetErrorString(r));
    }
    nccl_ = comm;
    if (spcclCommInitNccl(&spcclCuda_, nccl_) != spcclSuccess) {
      spcclCuda_ = nullptr;
      spcclCudaError_ = spcclGetLastError(nullptr);
    }
  }

  // Waits for the group's stream; a NCCL error or the group's timeout (the
  // watchdog marks the group broken) aborts the NCCL communicator, which ends
  // its kernels, instead of waiting forever.
  void drainStream() {
    for (;;) {
      cudaError_t q = cudaStreamQuery(stream_->stream());
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) C10_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      if (nccl_ != nullptr) ncclCommGetAsyncError(nccl_, &async);
      std::string broken;
      {
        std::lock_guard<std::mutex> g(health_->m);
        broken = health_->broken;
      }
      if (nccl_ != nullptr && (async != ncclSuccess || !broken.empty())) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
        ncclAborted_ = true;
        std::string why = async != ncclSuccess ? c10::str("spccl: NCCL error: ", ncclGetErrorString(async),
                                                          "; the NCCL communicator was aborted, the group is unusable")
                                               : broken;
        health_->breakWith(why);
        stream_->synchronize();
        TORCH_CHECK(false, why);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  // Byte-wise sends and receives with every peer, as one NCCL group.
  template <typename F>
  void ncclGroup(const char* what, F f) {
    ncclCheck(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t r = f();
    ncclResult_t e = ncclGroupEnd();
    ncclCheck(r != ncclSuccess ? r : e, what);
  }
#endif

  void broadcastBytes(const at::Tensor& t, int root) {
#ifdef SPCCL_TORCH_CUDA
    if (t.is_cuda()) {
      ncclCheck(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root, nccl_, cudaStream()),
                "ncclBroadcast");
      return;
    }
#endif
    checkMpi(MPI_Bcast(t.data_ptr(), asInt(t.nbytes()), MPI_BYTE, root, comm_), "MPI_Bcast");
  }

  void reduceTo(const at::Tensor& t, ReduceOp::RedOpType rop, const ReduceSpec& spec, int root) {
#ifdef SPCCL_TORCH_CUDA
    if (t.is_cuda()) {
      ncclDataType_t type;
      ncclRedOp_t op;
      if (ncclReduction(t.scalar_type(), rop, &type, &op)) {
        ncclCheck(ncclReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, op, root, nccl_, cudaStream()), "ncclReduce");
      } else {  // what NCCL cannot reduce: MPI on a host copy
        at::Tensor h = t.cpu();
        reduceTo(h, rop, spec, root);
        if (rank_ == root) t.copy_(h);
      }
      return;
    }
#endif
    at::Tensor work = spec.viaFloat ? t.to(at::kFloat) : t;
    void* buf = work.data_ptr();
    int n = asInt(work.numel());
    if (rank_ == root) {
      checkMpi(MPI_Reduce(MPI_IN_PLACE, buf, n, spec.type, spec.op, root, comm_), "MPI_Reduce");
      if (spec.average) work.div_(size_);
      if (spec.viaFloat) t.copy_(work);
    } else {
      checkMpi(MPI_Reduce(buf, nullptr, n, spec.type, spec.op, root, comm_), "MPI_Reduce");
    }
  }

  // outs[j] receives rank j's `in` (sizes may differ; agreed by the caller).
  void allgatherv(const at::Tensor& in, const std::vector<at::Tensor>& outs) {
#ifdef SPCCL_TORCH_CUDA
    if (in.is_cuda()) {
      ncclGroup("ncclBroadcast (all_gather)", [&] {
        for (int j = 0; j < size_; ++j) {
          ncclResult_t r =
              ncclBroadcast(in.data_ptr(), outs[j].data_ptr(), outs[j].nbytes(), ncclUint8, j, nccl_, cudaStream());
          if (r != ncclSuccess) return r;
        }
        return ncclSuccess;
      });
      return;
    }
#endif
    std::vector<int> counts(size_), displs(size_);
    size_t total = 0;
    for (int j = 0; j < size_; ++j) {
      counts[j] = asInt(outs[j].nbytes());
      displs[j] = asInt(total);
      total += counts[j];
    }
    if (total >= static_cast<size_t>(INT_MAX)) throwAll("spccl all_gather: 2 GiB or more in total");
    at::Tensor flat = at::empty({static_cast<int64_t>(total)}, in.options().dtype(at::kByte));
    checkMpi(MPI_Allgatherv(in.data_ptr(), asInt(in.nbytes()), MPI_BYTE, flat.data_ptr(), counts.data(), displs.data(),
                            MPI_BYTE, comm_),
             "MPI_Allgatherv");
    auto* base = static_cast<char*>(flat.data_ptr());
    for (int j = 0; j < size_; ++j) std::memcpy(outs[j].data_ptr(), base + displs[j], counts[j]);
  }

  void allgather(const at::Tensor& in, const at::Tensor& out) {
#ifdef SPCCL_TORCH_CUDA
    if (in.is_cuda()) {
      ncclCheck(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, nccl_, cudaStream()),
                "ncclAllGather");
      return;
    }
#endif
    checkMpi(
        MPI_Allgather(in.data_ptr(), asInt(in.nbytes()), MPI_BYTE, out.data_ptr(), asInt(in.nbytes()), MPI_BYTE, comm_),
        "MPI_Allgather");
  }

  // Every rank's `in` (the same size) into root's outs[j].
  void gatherTo(const at::Tensor& in, const std::vector<at::Tensor>& outs, int root) {
    const size_t n = in.nbytes();
#ifdef SPCCL_TORCH_CUDA
    if (in.is_cuda()) {
      ncclGroup("ncclSend/ncclRecv (gather)", [&] {
        ncclResult_t r = ncclSend(in.data_ptr(), n, ncclUint8, root, nccl_, cudaStream());
        for (int j = 0; j < size_ && r == ncclSuccess && rank_ == root; ++j)
          r = ncclRecv(outs[j].data_ptr(), n, ncclUint8, j, nccl_, cudaStream());
        return r;
      });
      return;
    }
#endif
    if (n * size_ >= static_cast<size_t>(INT_MAX)) throwAll("spccl gather: 2 GiB or more in total");
    at::Tensor flat;
    if (rank_ == root) flat = at::empty({static_cast<int64_t>(n) * size_}, in.options().dtype(at::kByte));
    checkMpi(MPI_Gather(in.data_ptr(), asInt(n), MPI_BYTE, rank_ == root ? flat.data_ptr() : nullptr, asInt(n),
                        MPI_BYTE, root, comm_),
             "MPI_Gather");
    if (rank_ == root) {
      auto* base = static_cast<char*>(flat.data_ptr());
      for (int j = 0; j < size_; ++j) std::memcpy(outs[j].data_ptr(), base + j * n, n);
    }
  }

  // root's ins[j] (each the size of `out`) into rank j's `out`.
  void scatterFrom(const std::vector<at::Tensor>& ins, const at::Tensor& out, int root) {
    const size_t n = out.nbytes();
#ifdef SPCCL_TORCH_CUDA
    if (out.is_cuda()) {
      ncclGroup("ncclSend/ncclRecv (scatter)", [&] {
        ncclResult_t r = ncclSuccess;
        for (int j = 0; j < size_ && r == ncclSuccess && rank_ == root; ++j)
          r = ncclSend(ins[j].data_ptr(), n, ncclUint8, j, nccl_, cudaStream());
        if (r == ncclSuccess) r = ncclRecv(out.data_ptr(), n, ncclUint8, root, nccl_, cudaStream());
        return r;
      });
      return;
    }
#endif
    if (n * size_ >= static_cast<size_t>(INT_MAX)) throwAll("spccl scatter: 2 GiB or more in total");
    at::Tensor flat;
    if (rank_ == root) {
      std::vector<at::Tensor> parts;
      for (const auto& t : ins) parts.push_back(t.reshape({-1}));
      flat = at::cat(parts);
    }
    checkMpi(MPI_Scatter(rank_ == root ? flat.data_ptr() : nullptr, asInt(n), MPI_BYTE, out.data_ptr(), asInt(n),
                         MPI_BYTE, root, comm_),
             "MPI_Scatter");
  }

  // Counts in elements; blocks packed in rank order in `in` and `out`.
  void alltoallv(const at::Tensor& in, const std::vector<int64_t>& sendCounts, const at::Tensor& out,
                 const std::vector<int64_t>& recvCounts) {
    const size_t es = in.element_size();
#ifdef SPCCL_TORCH_CUDA
    if (in.is_cuda()) {
      auto* src = static_cast<char*>(in.data_ptr());
      auto* dst = static_cast<char*>(out.data_ptr());
      ncclGroup("ncclSend/ncclRecv (all_to_all)", [&] {
        size_t so = 0, ro = 0;
        for (int j = 0; j < size_; ++j) {
          const size_t sb = sendCounts[j] * es, rb = recvCounts[j] * es;
          ncclResult_t r = ncclSuccess;
          if (sb > 0) r = ncclSend(src + so, sb, ncclUint8, j, nccl_, cudaStream());
          if (r == ncclSuccess && rb > 0) r = ncclRecv(dst + ro, rb, ncclUint8, j, nccl_, cudaStream());
          if (r != ncclSuccess) return r;
          so += sb;
          ro += rb;
        }
        return ncclSuccess;
      });
      return;
    }
#endif
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    size_t so = 0, ro = 0;
    for (int j = 0; j < size_; ++j) {
      sc[j] = asInt(sendCounts[j] * es);
      sd[j] = asInt(so);
      so += sc[j];
      rc[j] = asInt(recvCounts[j] * es);
      rd[j] = asInt(ro);
      ro += rc[j];
    }
    checkMpi(MPI_Alltoallv(in.data_ptr(), sc.data(), sd.data(), MPI_BYTE, out.data_ptr(), rc.data(), rd.data(),
                           MPI_BYTE, comm_),
             "MPI_Alltoallv");
  }

  void reduceInPlace(const at::Tensor& t, ReduceOp::RedOpType rop, const ReduceSpec& spec, bool allowSpccl) {
    // The environment opt-in: float sums through spccl's drop-in allreduce,
    // which compresses the large ones with the SPCCL_* settings.
    if (allowSpccl && envAllreduce_ && isSpcclFloat(t.scalar_type()) &&
        (rop == ReduceOp::SUM || rop == ReduceOp::AVG)) {
      spcclCheck(spcclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), spcclType(t.scalar_type()),
                                rop == ReduceOp::AVG ? spcclAvg : spcclSum, spcclFor(), streamArg()),
                 "spcclAllReduce");
      return;
    }
#ifdef SPCCL_TORCH_CUDA
    if (t.is_cuda()) {
      ncclDataType_t type;
      ncclRedOp_t op;
      if (ncclReduction(t.scalar_type(), rop, &type, &op)) {
        ncclCheck(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, op, nccl_, cudaStream()), "ncclAllReduce");
      } else {  // what NCCL cannot reduce: MPI on a host copy
        at::Tensor h = t.cpu();
        reduceInPlace(h, rop, spec, false);
        t.copy_(h);
      }
      return;
    }
#endif
    at::Tensor work = spec.viaFloat ? t.to(at::kFloat) : t;
    checkMpi(MPI_Allreduce(MPI_IN_PLACE, work.data_ptr(), asInt(work.numel()), spec.type, spec.op, comm_),
             "MPI_Allreduce");
    if (spec.average) work.div_(size_);
    if (spec.viaFloat) t.copy_(work);
  }

  void reduceScatter(const at::Tensor& out, const at::Tensor& in, ReduceOp::RedOpType rop, const ReduceSpec& spec) {
#ifdef SPCCL_TORCH_CUDA
    if (in.is_cuda()) {
      ncclDataType_t type;
      ncclRedOp_t op;
      if (ncclReduction(out.scalar_type(), rop, &type, &op)) {
        at::Tensor src = in.contiguous();
        ncclCheck(ncclReduceScatter(src.data_ptr(), out.data_ptr(), out.numel(), type, op, nccl_, cudaStream()),
                  "ncclReduceScatter");
      } else {  // what NCCL cannot reduce: MPI on host copies
        at::Tensor h = at::empty(out.sizes(), out.options().device(at::kCPU));
        reduceScatter(h, in.cpu(), rop, spec);
        out.copy_(h);
      }
      return;
    }
#endif
    at::Tensor win = spec.viaFloat ? in.to(at::kFloat) : in.contiguous();
    at::Tensor wout = spec.viaFloat ? at::empty({out.numel()}, out.options().dtype(at::kFloat)) : out;
    checkMpi(MPI_Reduce_scatter_block(win.data_ptr(), wout.data_ptr(), asInt(out.numel()), spec.type, spec.op, comm_),
             "MPI_Reduce_scatter_block");
    if (spec.average) wout.div_(size_);
    if (spec.viaFloat) out.view({-1}).copy_(wout);
  }

  void spcclCheck(spcclResult_t r, const char* what) {
    TORCH_CHECK(r == spcclSuccess, "spccl: ", what, " failed (", spcclGetErrorString(r),
                "): ", spcclGetLastError(spcclFor()));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::shared_ptr<GroupHealth> health_;
  const Job* cur_ = nullptr;  // the job the worker runs
  bool lastOnCuda_ = false;   // under the MPI mutex: the latest job's device
#ifdef SPCCL_TORCH_CUDA
  int device_ = -1;  // under queueMutex_; set once, by the first CUDA job's enqueue
  std::optional<c10::cuda::CUDAStream> stream_;
  ncclComm_t nccl_ = nullptr;
  spcclComm_t spcclCuda_ = nullptr;
  std::string spcclCudaError_;  // why spcclCuda_ is null after initNccl
  bool ncclAborted_ = false;
#endif
  MPI_Comm p2pComm_ = MPI_COMM_NULL;
  spcclComm_t spccl_ = nullptr;
  bool envAllreduce_ = false;
  bool envAlltoall_ = false;
  std::atomic<uint64_t> seq_{0};

  std::mutex queueMutex_;
  std::condition_variable queueCv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  bool stopped_ = false;
  std::thread worker_;

  std::mutex p2pMutex_;
  std::condition_variable p2pCv_;
  std::list<std::shared_ptr<P2P>> pending_;
  std::thread progress_;

  // Timeouts: under health_->m.
  struct Clock {
    c10::intrusive_ptr<SpcclWork> work;
    std::chrono::steady_clock::time_point deadline;
  };
  std::list<Clock> active_;
  bool inCall_ = false;
  bool workerExited_ = false;
  bool watchStop_ = false;
  std::thread watchdog_;
  std::string closed_;  // under queueMutex_: set once a timeout failed the queue
};

// ---------------------------------------------------------------------------
// The world: MPI_COMM_WORLD under mpirun. Under torchrun every process starts
// as an MPI singleton; spccl_torch._join_world joins them one at a time with
// MPI_Comm_connect/accept (joinConnect, joinAccept: Open MPI's accept is not
// safe with several connects racing) and joinFinish ranks the result as torch
// ranks it.

MPI_Comm gWorld = MPI_COMM_WORLD;
MPI_Comm gJoining = MPI_COMM_NULL;  // the processes joined so far
std::string gPort;                  // rank 0's port while they join

void checkJoinable() {
  TORCH_CHECK(!gMpiFinalized, "spccl: MPI was finalized already");
  initMpiOnce();
  int worldSize = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  TORCH_CHECK(worldSize == 1 && gWorld == MPI_COMM_WORLD, "spccl: this process is one of ", worldSize,
              " MPI processes already (mpirun): there is nothing to join");
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);  // a failed connect is a RuntimeError
}

std::string joinOpenPort() {
  std::lock_guard<std::mutex> g(mpiMutex());
  checkJoinable();
  char port[MPI_MAX_PORT_NAME] = {};
  checkMpi(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
  gPort = port;
  checkMpi(MPI_Comm_dup(MPI_COMM_SELF, &gJoining), "MPI_Comm_dup");
  return gPort;
}

void mergeInto(MPI_Comm inter, bool high) {
  MPI_Comm merged = MPI_COMM_NULL;
  int rc = MPI_Intercomm_merge(inter, high ? 1 : 0, &merged);
  MPI_Comm_free(&inter);
  checkMpi(rc, "MPI_Intercomm_merge");
  if (gJoining != MPI_COMM_NULL) MPI_Comm_free(&gJoining);
  gJoining = merged;
  MPI_Comm_set_errhandler(gJoining, MPI_ERRORS_RETURN);
}

void joinConnect(const std::string& port) {
  std::lock_guard<std::mutex> g(mpiMutex());
  checkJoinable();
  MPI_Comm inter = MPI_COMM_NULL;
  checkMpi(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter), "MPI_Comm_connect");
  mergeInto(inter, true);
}

void joinAccept() {
  std::lock_guard<std::mutex> g(mpiMutex());
  TORCH_CHECK(gJoining != MPI_COMM_NULL, "spccl: join_accept before joining");
  MPI_Comm inter = MPI_COMM_NULL;
  checkMpi(MPI_Comm_accept(gPort.c_str(), MPI_INFO_NULL, 0, gJoining, &inter), "MPI_Comm_accept");
  mergeInto(inter, false);
}

void joinFinish(int rank, int size) {
  std::lock_guard<std::mutex> g(mpiMutex());
  TORCH_CHECK(gJoining != MPI_COMM_NULL, "spccl: join_finish before joining");
  int joined = 0;
  MPI_Comm_size(gJoining, &joined);
  TORCH_CHECK(joined == size, "spccl: ", joined, " processes joined, torch.distributed has ", size);
  MPI_Comm ranked = MPI_COMM_NULL;
  checkMpi(MPI_Comm_split(gJoining, 0, rank, &ranked), "MPI_Comm_split");
  MPI_Comm_free(&gJoining);
  if (!gPort.empty()) {
    MPI_Close_port(gPort.c_str());
    gPort.clear();
  }
  gWorld = ranked;
}

// ---------------------------------------------------------------------------
// Creation: the MPI communicator of a torch process group.

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

c10::intrusive_ptr<SpcclBackend> createBackend(int groupRank, int groupSize, std::vector<int64_t> globalRanks,
                                               std::string name, int64_t timeoutMs) {
  MPI_Comm comm = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> g(mpiMutex());
    TORCH_CHECK(!gMpiFinalized, "spccl: MPI was finalized already");
    initMpiOnce();
    int worldRank = 0, worldSize = 0;
    MPI_Comm_rank(gWorld, &worldRank);
    MPI_Comm_size(gWorld, &worldSize);
    int ompiRank = envInt("OMPI_COMM_WORLD_RANK", worldRank);
    int ompiSize = envInt("OMPI_COMM_WORLD_SIZE", worldSize);
    if (globalRanks.empty()) {
      TORCH_CHECK(groupSize == worldSize && groupRank == worldRank && ompiRank == worldRank && ompiSize == worldSize,
                  "spccl: torch.distributed has rank ", groupRank, " of ", groupSize, " but MPI has rank ", worldRank,
                  " of ", worldSize, " (OMPI_COMM_WORLD_RANK=", ompiRank, ", OMPI_COMM_WORLD_SIZE=", ompiSize,
                  "): under mpirun, set RANK and WORLD_SIZE from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE");
      checkMpi(MPI_Comm_dup(gWorld, &comm), "MPI_Comm_dup");
    } else {
      TORCH_CHECK(static_cast<int>(globalRanks.size()) == groupSize && groupRank >= 0 && groupRank < groupSize &&
                      globalRanks[groupRank] == worldRank,
                  "spccl: new_group: this process (MPI rank ", worldRank, ") is not rank ", groupRank,
                  " of the group's ranks");
      for (auto r : globalRanks) TORCH_CHECK(r >= 0 && r < worldSize, "spccl: new_group: rank ", r, " out of range");
      MPI_Group world, sub;
      MPI_Comm_group(gWorld, &world);
      std::vector<int> ranks(globalRanks.begin(), globalRanks.end());
      MPI_Group_incl(world, groupSize, ranks.data(), &sub);
      int rc = MPI_Comm_create_group(gWorld, sub, 0, &comm);
      MPI_Group_free(&sub);
      MPI_Group_free(&world);
      checkMpi(rc, "MPI_Comm_create_group");
      int r = -1;
      MPI_Comm_rank(comm, &r);
      TORCH_CHECK(r == groupRank, "spccl: new_group: MPI rank ", r, " in the group, torch says ", groupRank);
    }
  }
  return c10::make_intrusive<SpcclBackend>(groupRank, groupSize, comm, std::move(name),
                                           std::chrono::milliseconds(timeoutMs));
}

// At interpreter exit (registered from Python): stop every group's threads
// and finalize MPI if this module initialized it; mpirun wants MPI_Finalize.
void shutdownAll() {
  std::vector<SpcclBackend*> live;
  {
    std::lock_guard<std::mutex> g(registryMutex());
    live.assign(registry().begin(), registry().end());
  }
  // Checked first: a group shut down before the stuck one must not wait for the MPI mutex.
  for (auto* b : live)
    if (b->stuck()) gStuckCall = true;
  for (auto* b : live) b->shutdown();
  if (gStuckCall) return;  // the stuck call holds the MPI mutex: the process ends without MPI_Finalize
  std::lock_guard<std::mutex> g(mpiMutex());
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized && gWeInitializedMpi) {
    MPI_Finalize();
    gMpiFinalized = true;
  }
}

py::dict statsDict(const spcclStats_t& s) {
  py::dict d;
  d["calls"] = s.calls;
  d["compressed_calls"] = s.compressedCalls;
  d["bytes_sent"] = s.bytesSent;
  d["dense_bytes"] = s.denseBytes;
  d["threshold_updates"] = s.thresholdUpdates;
  d["last_selected"] = s.lastSelected;
  d["last_threshold"] = s.lastThreshold;
  d["last_algorithm"] = s.lastAlgorithm;
  return d;
}

// An explicit compressor of one buffer (the DDP hook keeps one per bucket).
class Compressor : public std::enable_shared_from_this<Compressor> {
 public:
  Compressor(c10::intrusive_ptr<SpcclBackend> backend, float density, int interval, int wire)
      : backend_(std::move(backend)), density_(density), interval_(interval), wire_(wire) {}
  ~Compressor() {
    std::lock_guard<std::mutex> g(mpiMutex());
    if (comp_ != nullptr) spcclCompressorDestroy(comp_);
  }
  // The work finishes with `t` reduced in place (sum, or average when avg).
  c10::intrusive_ptr<Work> allreduce(at::Tensor t, bool avg) {
    return backend_->compressedAllreduce(shared_from_this(), &comp_, &onCuda_, t, density_, interval_, wire_, avg);
  }
  py::dict stats() {
    spcclStats_t s{};
    {
      // A CUDA job holds the MPI mutex through its stream's wait.
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> g(mpiMutex());
      if (comp_ != nullptr) spcclCompressorGetStats(comp_, &s);
    }
    return statsDict(s);
  }
  at::Tensor residual(int64_t count) {
    at::Tensor r = at::zeros({count}, at::kFloat);
    std::lock_guard<std::mutex> g(mpiMutex());
    if (comp_ != nullptr) {
      spcclResult_t rc = spcclCompressorGetResidual(comp_, r.data_ptr<float>(), static_cast<size_t>(count));
      TORCH_CHECK(rc == spcclSuccess, "spccl: spcclCompressorGetResidual failed: ", spcclGetLastError(nullptr));
    }
    return r;
  }

 private:
  c10::intrusive_ptr<SpcclBackend> backend_;
  spcclCompressor_t comp_ = nullptr;
  bool onCuda_ = false;  // made on the group's NCCL communicator
  float density_;
  int interval_;
  int wire_;
};

// The selection of one alltoall_rows forward, kept for its backward.
class Selection {
 public:
  ~Selection() {
    std::lock_guard<std::mutex> g(mpiMutex());
    if (sel_ != nullptr) spcclSelectionDestroy(sel_);
  }
  spcclSelection_t sel_ = nullptr;
};

}  // namespace spccl_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace spccl_torch;
  py::module::import("torch.distributed");
  py::class_<SpcclBackend, c10d::Backend, c10::intrusive_ptr<SpcclBackend>>(m, "SpcclBackend")
      .def("comm_stats",
           [](SpcclBackend& b) {
             spcclStats_t s{};
             {
               py::gil_scoped_release nogil;
               std::lock_guard<std::mutex> g(mpiMutex());
               s = b.stats();
             }
             return statsDict(s);
           })
      .def("is_shut_down", &SpcclBackend::isShutDown)
      .def("env_allreduce", &SpcclBackend::envAllreduce)
      .def("env_alltoall", &SpcclBackend::envAlltoall);
  m.def("create_backend", &createBackend, py::arg("group_rank"), py::arg("group_size"), py::arg("global_ranks"),
        py::arg("name"), py::arg("timeout_ms"), py::call_guard<py::gil_scoped_release>());
  m.def("join_open_port", &joinOpenPort, py::call_guard<py::gil_scoped_release>());
  m.def("join_connect", &joinConnect, py::arg("port"), py::call_guard<py::gil_scoped_release>());
  m.def("join_accept", &joinAccept, py::call_guard<py::gil_scoped_release>());
  m.def("join_finish", &joinFinish, py::arg("rank"), py::arg("size"), py::call_guard<py::gil_scoped_release>());
  m.def("shutdown_all", &shutdownAll, py::call_guard<py::gil_scoped_release>());
  m.def("cuda_built", [] {
#ifdef SPCCL_TORCH_CUDA
    return true;
#else
    return false;
#endif
  });
  py::class_<Compressor, std::shared_ptr<Compressor>>(m, "Compressor")
      .def(py::init<c10::intrusive_ptr<SpcclBackend>, float, int, int>())
      .def("allreduce", &Compressor::allreduce, py::call_guard<py::gil_scoped_release>())
      .def("stats", &Compressor::stats)
      .def("residual", &Compressor::residual, py::call_guard<py::gil_scoped_release>());
  py::class_<Selection, std::shared_ptr<Selection>>(m, "Selection").def(py::init<>());
  m.def(
      "alltoall_rows_forward",
      [](c10::intrusive_ptr<SpcclBackend> b, at::Tensor in, int64_t rowsPerPeer, int64_t rowLen, float density,
         std::shared_ptr<Selection> sel) {
        at::Tensor out = at::empty_like(in);
        auto w = b->alltoallRows(in, out, rowsPerPeer, rowLen, density, &sel->sel_);
        w->wait();
        return out;
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "alltoall_rows_backward",
      [](c10::intrusive_ptr<SpcclBackend> b, at::Tensor grad, std::shared_ptr<Selection> sel) {
        TORCH_CHECK(sel->sel_ != nullptr, "spccl alltoall_rows: backward without a forward selection");
        at::Tensor out = at::empty_like(grad);
        auto w = b->alltoallRowsBackward(grad, out, sel->sel_);
        w->wait();
        return out;
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "allreduce_rowsparse",
      [](c10::intrusive_ptr<SpcclBackend> b, at::Tensor ids, at::Tensor rows) {
        auto out = std::make_shared<RowSparseResult>();
        b->allreduceRowSparse(ids, rows, out)->wait();
#ifdef SPCCL_TORCH_CUDA
        // Made on the group's stream, used on the caller's from here on.
        if (out->ids.is_cuda()) {
          auto caller = at::cuda::getCurrentCUDAStream(out->ids.get_device());
          out->ids.record_stream(caller);
          out->rows.record_stream(caller);
        }
#endif
        return std::make_tuple(out->ids, out->rows);
      },
      py::call_guard<py::gil_scoped_release>());
  m.attr("SPCCL_FLOAT32") = static_cast<int>(spcclFloat32);
  m.attr("SPCCL_FLOAT16") = static_cast<int>(spcclFloat16);
  m.attr("SPCCL_BFLOAT16") = static_cast<int>(spcclBfloat16);
  m.attr("SPCCL_FLOAT8E4M3") = static_cast<int>(spcclFloat8e4m3);
}
