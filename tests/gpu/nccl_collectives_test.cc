// End-to-end collectives on an NCCL communicator (device buffers), through
// the public API only, against the same calls on an MPI communicator (host
// buffers) over the same ranks and data. Run under mpirun with one rank per
// GPU; with fewer GPUs than ranks (or none, as in CI) the device tests skip
// themselves on every rank. Arguments that fail before any device work (a
// NULL ncclComm_t) are checked everywhere.
//
// What "the same" means: the device path follows the host compressor rule
// for rule (docs/GPU.md), so compressed outputs and residuals are compared
// bit for bit. The dense algorithm is NCCL's allreduce against MPI's, whose
// summation orders differ: compared with a tolerance when ranks > 1.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <memory>
#include <vector>

#include "spccl.h"
#include "spccl_mpi.h"
#include "spccl_nccl.h"
#include "device_count.h"

namespace {

int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int worldSize() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

#define SPCCL_ASSERT_OK(call) ASSERT_EQ(spcclSuccess, (call)) << #call << ": " << spcclGetLastError(nullptr)
#define CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call

// One NCCL communicator over MPI_COMM_WORLD (one GPU per rank) wrapped by
// spccl, and an MPI communicator over the same ranks.
class NcclWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    rank_ = worldRank();
    ranks_ = worldSize();
    const int gpus = deviceCount();
    if (gpus < ranks_) GTEST_SKIP() << ranks_ << " ranks need as many CUDA devices; " << gpus << " present";
    CUDA_OK(cudaSetDevice(rank_ % gpus));
    ncclUniqueId id;
    if (rank_ == 0) {
      ASSERT_EQ(ncclSuccess, ncclGetUniqueId(&id));
    }
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ASSERT_EQ(ncclSuccess, ncclCommInitRank(&nccl_, ranks_, id, rank_));
    SPCCL_ASSERT_OK(spcclCommInitNccl(&dev_, nccl_));
    SPCCL_ASSERT_OK(spcclCommInitMPI(&host_, MPI_COMM_WORLD));
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (dev_) {
      EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev_));
    }
    if (devFixed_) {
      EXPECT_EQ(spcclSuccess, spcclCommDestroy(devFixed_));
    }
    if (host_) {
      EXPECT_EQ(spcclSuccess, spcclCommDestroy(host_));
    }
    if (nccl_) ncclCommDestroy(nccl_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  // A second spccl communicator over the same NCCL one, in fixed mode.
  void makeFixed() {
    setenv("SPCCL_CAPACITY_MODE", "fixed", 1);
    const spcclResult_t r = spcclCommInitNccl(&devFixed_, nccl_);
    unsetenv("SPCCL_CAPACITY_MODE");
    ASSERT_EQ(spcclSuccess, r) << spcclGetLastError(nullptr);
  }
  // A device and a host communicator made with `var`=`value` in the environment.
  void makePairWith(const char* var, const char* value, spcclComm_t* dev, spcclComm_t* host) {
    setenv(var, value, 1);
    const spcclResult_t d = spcclCommInitNccl(dev, nccl_);
    const spcclResult_t h = spcclCommInitMPI(host, MPI_COMM_WORLD);
    unsetenv(var);
    ASSERT_EQ(spcclSuccess, d) << spcclGetLastError(nullptr);
    ASSERT_EQ(spcclSuccess, h) << spcclGetLastError(nullptr);
  }

  int rank_ = 0, ranks_ = 1;
  ncclComm_t nccl_ = nullptr;
  spcclComm_t dev_ = nullptr, devFixed_ = nullptr, host_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)); }
  ~Dev() { cudaFree(p); }
  void upload(const std::vector<T>& h) { cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

size_t elemBytes(spcclDataType_t t) { return t == spcclFloat32 ? 4 : 2; }

// Index of the first element of two float buffers (fp32, fp16 or bf16) whose
// bits differ, except that any NaN matches any NaN, or n. A float add that
// produces or propagates a NaN returns the canonical NaN on the GPU and an
// operand's payload on x86 (tests/gpu/gpu_test_util.h, sameFloat); every
// finite value, infinity and selection decision is still compared bit for bit.
size_t firstValueMismatch(const void* a, const void* b, size_t n, spcclDataType_t t) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  const size_t eb = elemBytes(t);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u = 0, v = 0;
    std::memcpy(&u, x + i * eb, eb);
    std::memcpy(&v, y + i * eb, eb);
    if (u == v) continue;
    const bool nans = t == spcclFloat32   ? (u & 0x7fffffffu) > 0x7f800000u && (v & 0x7fffffffu) > 0x7f800000u
                      : t == spcclFloat16 ? (u & 0x7fffu) > 0x7c00u && (v & 0x7fffu) > 0x7c00u
                                          : (u & 0x7fffu) > 0x7f80u && (v & 0x7fffu) > 0x7f80u;
    if (!nans) return i;
  }
  return n;
}

// Raw user-type bytes of normal floats (rounded to fp16/bf16 by truncating
// the conversion through the library's own host path is not available here,
// so fp16/bf16 inputs are built from their bit patterns directly).
std::vector<unsigned char> randomInput(size_t n, spcclDataType_t t, std::mt19937_64& g, bool nonFinite) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<unsigned char> out(n * elemBytes(t));
  for (size_t i = 0; i < n; ++i) {
    float f = normal(g);
    if (nonFinite && g() % 997 == 0) f = (g() & 1) ? INFINITY : NAN;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (t == spcclFloat32) {
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else if (t == spcclBfloat16) {
      const uint16_t b = static_cast<uint16_t>(bits >> 16);
      std::memcpy(out.data() + 2 * i, &b, 2);
    } else {  // fp16: a normal value in range, built from sign, exponent, mantissa
      const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
      const int e = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
      uint16_t h = sign;
      if (!std::isfinite(f)) h = static_cast<uint16_t>(sign | (std::isnan(f) ? 0x7e00u : 0x7c00u));
      else if (e > 0 && e < 31) h = static_cast<uint16_t>(sign | (e << 10) | ((bits >> 13) & 0x3ffu));
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

struct Config {
  spcclDataType_t type;
  spcclDataType_t wire;
  spcclRedOp_t op;
  int algorithm;
  int errorFeedback;
  int interval;
  size_t count;
  bool nonFinite;
  bool shrink = false;       // fp32 input halved every call: a stored tau starves (with minFraction > 0)
  bool mostlyZero = false;   // all but every 512th element zero: fewer non-zeros than k, tau 0, never starved
  float minFraction = 0.0f;  // thresholdMinFraction (this rank's)
  int warmup = 0;            // thresholdWarmup: off unless asked for, so the interval alone pins the estimates
  float density = 0.01f;
  bool spike = false;  // fp32 input: one element 1e6 a call, beyond what tau's fp8 scale holds (448 x 2^6 tau)
};

// Calls among the first `calls` that the schedule estimates on: call 0 and
// every interval-th, and with the warm-up the powers of two below the interval.
uint64_t scheduledEstimates(const Config& c, int calls) {
  uint64_t n = 0;
  for (int i = 0; i < calls; ++i) n += i % c.interval == 0 || (c.warmup != 0 && i < c.interval && (i & (i - 1)) == 0);
  return n;
}

std::string describe(const Config& c) {
  return "type=" + std::to_string(c.type) + " wire=" + std::to_string(c.wire) + " op=" + std::to_string(c.op) +
         " algo=" + std::to_string(c.algorithm) + " ef=" + std::to_string(c.errorFeedback) +
         " interval=" + std::to_string(c.interval) + " count=" + std::to_string(c.count) +
         (c.shrink ? " shrinking" : "") + (c.mostlyZero ? " mostly zero" : "") +
         " minFraction=" + std::to_string(c.minFraction) + " warmup=" + std::to_string(c.warmup) +
         (c.spike ? " spike" : "") + " density=" + std::to_string(c.density);
}

// Runs `calls` compressed allreduces of fresh data on the device comm and
// the host comm; outputs and residuals must agree bit for bit (the dense
// algorithm on > 1 rank: within a tolerance).
void compareWithHost(spcclComm_t dev, spcclComm_t host, const Config& cfg, int calls, cudaStream_t stream, int rank,
                     int ranks, bool fixedMode = false) {
  SCOPED_TRACE(describe(cfg));
  spcclCompressConfig_t c;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&c));
  c.density = cfg.density;
  c.thresholdInterval = cfg.interval;
  c.errorFeedback = cfg.errorFeedback;
  c.algorithm = cfg.algorithm;
  c.wireValueType = cfg.wire;
  c.thresholdMinFraction = cfg.minFraction;
  c.thresholdWarmup = cfg.warmup;
  spcclCompressor_t dc = nullptr, hc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev, cfg.count, cfg.type, &c, &dc)) << spcclGetLastError(nullptr);
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(host, cfg.count, cfg.type, &c, &hc)) << spcclGetLastError(nullptr);
  std::mt19937_64 g(1234 + 7919 * static_cast<uint64_t>(rank) + cfg.count);
  const size_t bytes = cfg.count * elemBytes(cfg.type);
  Dev<unsigned char> dSend(bytes), dRecv(bytes);
  std::vector<unsigned char> hRecv(bytes);
  std::vector<float> hRes(cfg.count), dRes(cfg.count);
  const bool exact = cfg.algorithm != SPCCL_ALGO_DENSE || ranks == 1;
  for (int call = 0; call < calls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    // Drift: later calls are smaller, so a stored tau goes stale.
    std::vector<unsigned char> in = randomInput(cfg.count, cfg.type, g, cfg.nonFinite);
    if (call % 3 == 2 && cfg.type == spcclFloat32)
      for (size_t i = 0; i < cfg.count; ++i) {
        float f;
        std::memcpy(&f, in.data() + 4 * i, 4);
        f *= (i % 2) ? 4.0f : 0.25f;
        std::memcpy(in.data() + 4 * i, &f, 4);
      }
    if (cfg.shrink && cfg.type == spcclFloat32)
      for (size_t i = 0; i < cfg.count; ++i) {
        float f;
        std::memcpy(&f, in.data() + 4 * i, 4);
        f = std::ldexp(f, -call);
        std::memcpy(in.data() + 4 * i, &f, 4);
      }
    if (cfg.mostlyZero)  // zeros, -0.0 at odd indices (the sign bit is the element's last byte)
      for (size_t i = 0; i < cfg.count; ++i)
        if (i % 512 != 0) {
          std::memset(in.data() + i * elemBytes(cfg.type), 0, elemBytes(cfg.type));
          if (i % 2 == 1) in[(i + 1) * elemBytes(cfg.type) - 1] = 0x80;
        }
    if (cfg.spike && cfg.type == spcclFloat32) {
      const float big = 1e6f * static_cast<float>(rank + 1);
      std::memcpy(in.data() + 4 * ((static_cast<size_t>(call) * 7919u) % cfg.count), &big, 4);
    }
    dSend.upload(in);
    ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(dSend.p, dRecv.p, cfg.op, dc, stream)) << spcclGetLastError(dev);
    ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(in.data(), hRecv.data(), cfg.op, hc, nullptr))
        << spcclGetLastError(host);
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
    const std::vector<unsigned char> dOut = dRecv.download();
    ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(dc, dRes.data(), cfg.count));
    ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(hc, hRes.data(), cfg.count));
    if (exact) {
      ASSERT_EQ(cfg.count, firstValueMismatch(dOut.data(), hRecv.data(), cfg.count, cfg.type))
          << "output differs from the host path";
      ASSERT_EQ(cfg.count, firstValueMismatch(dRes.data(), hRes.data(), cfg.count, spcclFloat32)) << "residual differs";
    } else if (cfg.type == spcclFloat32) {
      for (size_t i = 0; i < cfg.count; ++i) {
        float a, b;
        std::memcpy(&a, dOut.data() + 4 * i, 4);
        std::memcpy(&b, hRecv.data() + 4 * i, 4);
        if (!std::isfinite(a) || !std::isfinite(b)) {
          ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << "element " << i << ": " << a << " vs " << b;
          continue;
        }
        ASSERT_NEAR(a, b, 1e-5f * (1.0f + std::fabs(b))) << "element " << i;
      }
    }
    spcclStats_t ds, hs;
    ASSERT_EQ(spcclSuccess, spcclCompressorGetStats(dc, &ds));
    ASSERT_EQ(spcclSuccess, spcclCompressorGetStats(hc, &hs));
    ASSERT_EQ(ds.thresholdUpdates, hs.thresholdUpdates) << "tau estimated on different calls";
    if (cfg.spike && cfg.wire == spcclFloat8e4m3) {  // so the redo at the max rule's scale must have run
      EXPECT_GT(1e6f, 28672.0f * hs.lastThreshold) << "set-up: tau's fp8 scale holds the spike";
    }
    if (!fixedMode) {  // fixed mode keeps the count on the device, and sends whole slots
      ASSERT_EQ(ds.lastSelected, hs.lastSelected);
      // The same descriptors and streams on the wire.
      ASSERT_EQ(ds.bytesSent, hs.bytesSent);
    }
    if (cfg.shrink && !cfg.errorFeedback && call == calls - 1) {
      // Without error feedback a halved input starves the stored tau: with a
      // minimum fraction the rule ran (on both paths, as the per-call
      // comparison above shows); without one tau stays as call 0 fitted it.
      if (cfg.minFraction > 0) {
        EXPECT_GT(hs.thresholdUpdates, scheduledEstimates(cfg, calls))
            << "set-up: the shrinking input should re-estimate tau off the schedule";
      } else {
        EXPECT_EQ(hs.thresholdUpdates, scheduledEstimates(cfg, calls))
            << "no minimum fraction: tau only on the schedule (and the warm-up's calls)";
      }
    }
    if (cfg.mostlyZero && cfg.algorithm != SPCCL_ALGO_DENSE && cfg.interval > calls) {
      // tau 0 selects every non-zero: never starved, estimated on call 0 only.
      EXPECT_EQ(hs.thresholdUpdates, 1u);
    }
  }
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(hc));
}

TEST_F(NcclWorld, CompressedAllReduceMatchesHostPathBitForBit) {
  const size_t counts[] = {1, 1000, 3 * 4096 + 5, (size_t{1} << 20) + 7};
  for (size_t n : counts)
    for (spcclDataType_t type : {spcclFloat32, spcclFloat16, spcclBfloat16})
      for (spcclDataType_t wire : {spcclFloat32, spcclFloat16, spcclBfloat16, spcclFloat8e4m3}) {
        // Large size: one wire per type, and fp8 from fp32.
        if (n > 100000 && wire != type && !(wire == spcclFloat8e4m3 && type == spcclFloat32)) continue;
        // split: the owners' sums re-selected, rounded to the wire (fp8 at
        // their own scale, fp16 buffers' sums bounded) and sent pairs or dense.
        for (int algo : {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT}) {
          compareWithHost(dev_, host_, {type, wire, spcclSum, algo, 1, 3, n, false}, 7, stream_, rank_, ranks_);
          if (HasFatalFailure()) return;
        }
      }
  // A stored tau the input shrank away from: kept (thresholdMinFraction 0,
  // the default), or re-estimated in the call it starved, on both paths alike
  // (thresholdUpdates and lastSelected compared per call). The third setting
  // differs by rank (0 on even ranks, 0.5 on odd): each rank applies its own
  // bound to its own selection, before the descriptors are exchanged. Then the default
  // warm-up (estimates at calls 1, 2 and 4 too), at fractions 0 and 0.5.
  for (int ef : {0, 1})
    for (float fraction : {0.0f, 0.5f, rank_ % 2 ? 0.5f : 0.0f}) {
      Config shrinking{spcclFloat32, spcclFloat32, spcclSum, SPCCL_ALGO_ALLGATHER, ef, 1000, 50001, false};
      shrinking.shrink = true;
      shrinking.minFraction = fraction;
      compareWithHost(dev_, host_, shrinking, 6, stream_, rank_, ranks_);
      if (HasFatalFailure()) return;
    }
  for (float fraction : {0.0f, 0.5f}) {
    Config warm{spcclFloat32, spcclFloat32, spcclSum, SPCCL_ALGO_ALLGATHER, 0, 1000, 50001, false};
    warm.shrink = true;
    warm.minFraction = fraction;
    warm.warmup = 1;
    compareWithHost(dev_, host_, warm, 6, stream_, rank_, ranks_);
    if (HasFatalFailure()) return;
  }
  // Fewer non-zeros than k: tau 0 (the record's tau key 0), never re-estimated off the schedule.
  // fp8: tau 0 has no binade, so the largest |v| sets the scale (maxFiniteKey).
  for (spcclDataType_t wire : {spcclFloat32, spcclFloat8e4m3}) {
    Config sparseInput{spcclFloat32, wire, spcclSum, SPCCL_ALGO_ALLGATHER, 1, 1000, 50001, false};
    sparseInput.mostlyZero = true;
    compareWithHost(dev_, host_, sparseInput, 4, stream_, rank_, ranks_);
    if (HasFatalFailure()) return;
  }
  // The dense algorithm does not add an empty residual: -0.0 inputs stay
  // -0.0, as on the host (bit for bit on one rank).
  Config signedZeros{spcclFloat32, spcclFloat32, spcclSum, SPCCL_ALGO_DENSE, 1, 1000, 50001, false};
  signedZeros.mostlyZero = true;
  compareWithHost(dev_, host_, signedZeros, 3, stream_, rank_, ranks_);
  if (HasFatalFailure()) return;
  // auto: both communicators pick by the model (SPCCL_AUTO_TRIALS is 0 by
  // default), from the same calls, so the same algorithm on every call.
  for (spcclRedOp_t op : {spcclSum, spcclAvg})
    for (int algo : {SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT, SPCCL_ALGO_AUTO, SPCCL_ALGO_DENSE})
      for (int ef : {0, 1}) {
        compareWithHost(dev_, host_, {spcclFloat32, spcclFloat32, op, algo, ef, 2, 50001, true}, 5, stream_, rank_,
                        ranks_);
        if (HasFatalFailure()) return;
      }
  // split's owners send their ranges dense: at density 0.3, and at 0.98
  // after the re-selection has dropped some sums.
  for (float density : {0.3f, 0.98f})
    for (spcclDataType_t wire : {spcclFloat32, spcclFloat16, spcclFloat8e4m3}) {
      Config c{spcclFloat32, wire, spcclSum, SPCCL_ALGO_SPLIT, 1, 2, 20001, true};
      c.density = density;
      compareWithHost(dev_, host_, c, 4, stream_, rank_, ranks_);
      if (HasFatalFailure()) return;
    }
  // fp8 with NaN/Inf, and with a spike tau's scale would saturate: the
  // pass redone at the selection's max-rule scale (maxFiniteKey of the pass).
  for (int ef : {0, 1})
    for (bool spike : {false, true}) {
      Config c{spcclFloat32, spcclFloat8e4m3, spcclSum, SPCCL_ALGO_ALLGATHER, ef, 4, 50001, true};
      c.spike = spike;
      compareWithHost(dev_, host_, c, 6, stream_, rank_, ranks_);
      if (HasFatalFailure()) return;
    }
}

// Calls on alternating streams with no synchronisation between them: each
// call reuses the previous call's scratch and the compressor's residual,
// enqueued on the other stream, so the transport must order them
// (DeviceCall in src/nccl/device_state.h). Every output must equal the
// same calls' on one stream, bit for bit.
TEST_F(NcclWorld, CallsOnAlternatingStreamsMatchOneStream) {
  const size_t n = (size_t{1} << 20) + 7;
  constexpr int kCalls = 6;
  cudaStream_t other = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  spcclCompressConfig_t cfg;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&cfg));
  cfg.density = 0.01f;
  cfg.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t one = nullptr, two = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, &cfg, &one)) << spcclGetLastError(dev_);
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, &cfg, &two)) << spcclGetLastError(dev_);
  std::mt19937_64 g(4242 + static_cast<uint64_t>(rank_));
  std::normal_distribution<float> normal;
  std::vector<std::unique_ptr<Dev<float>>> in, outOne, outTwo;
  for (int c = 0; c < kCalls; ++c) {
    std::vector<float> h(n);
    for (float& x : h) x = normal(g);
    in.push_back(std::make_unique<Dev<float>>(n));
    in.back()->upload(h);
    outOne.push_back(std::make_unique<Dev<float>>(n));
    outTwo.push_back(std::make_unique<Dev<float>>(n));
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int c = 0; c < kCalls; ++c)
    ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(in[c]->p, outOne[c]->p, spcclSum, one, stream_))
        << spcclGetLastError(dev_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  for (int c = 0; c < kCalls; ++c)
    ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(in[c]->p, outTwo[c]->p, spcclSum, two, c % 2 ? other : stream_))
        << spcclGetLastError(dev_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  CUDA_OK(cudaStreamSynchronize(other));
  for (int c = 0; c < kCalls; ++c)
    ASSERT_EQ(n, firstValueMismatch(outTwo[c]->download().data(), outOne[c]->download().data(), n, spcclFloat32))
        << "call " << c;
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(one));
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(two));
  CUDA_OK(cudaStreamDestroy(other));
}

TEST_F(NcclWorld, DropInAllReduceCompressesOnTheDevice) {
  const size_t n = 200000;  // above SPCCL_MIN_COMPRESS_COUNT's default
  std::mt19937_64 g(99 + rank_);
  std::vector<unsigned char> in = randomInput(n, spcclFloat32, g, false);
  Dev<unsigned char> d(n * 4);
  d.upload(in);
  std::vector<unsigned char> h = in;
  ASSERT_EQ(spcclSuccess, spcclAllReduce(d.p, d.p, n, spcclFloat32, spcclSum, dev_, stream_))
      << spcclGetLastError(dev_);
  ASSERT_EQ(spcclSuccess, spcclAllReduce(h.data(), h.data(), n, spcclFloat32, spcclSum, host_, nullptr));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
  EXPECT_EQ(n, firstValueMismatch(d.download().data(), h.data(), n, spcclFloat32))
      << "in-place drop-in differs from the host path";
  spcclStats_t s;
  ASSERT_EQ(spcclSuccess, spcclCommGetStats(dev_, &s));
  EXPECT_EQ(s.compressedCalls, 1u);
  if (ranks_ > 1) {
    EXPECT_LT(s.bytesSent * 10, s.denseBytes);
  }
}

TEST_F(NcclWorld, FixedCapacityModeMatchesHostWhenNothingOverflows) {
  ASSERT_NO_FATAL_FAILURE(makeFixed());
  // Tau estimated on every call: no stale tau, so nothing overflows and the
  // fixed-capacity result is the host result.
  for (spcclDataType_t wire : {spcclFloat32, spcclBfloat16}) {
    compareWithHost(devFixed_, host_, {spcclFloat32, wire, spcclSum, SPCCL_ALGO_ALLGATHER, 1, 1, 70001, false}, 4,
                    stream_, rank_, ranks_, true);
    if (HasFatalFailure()) return;
  }
}

TEST_F(NcclWorld, FixedCapacityModeIsGraphCapturableAndConserves) {
  ASSERT_NO_FATAL_FAILURE(makeFixed());
  const size_t n = 100003;
  spcclCompressConfig_t c;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&c));
  c.density = 0.01f;
  c.thresholdInterval = 1000000;  // one estimate (the first call, outside the graph); the graph replays the stored tau
  c.thresholdWarmup = 0;          // with it, the captured call (call 1) would be an estimate, replayed every time
  c.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t dc = nullptr, hc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(devFixed_, n, spcclFloat32, &c, &dc));
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(host_, n, spcclFloat32, &c, &hc));
  std::mt19937_64 g(5 + rank_);
  Dev<unsigned char> dSend(n * 4), dRecv(n * 4);
  std::vector<unsigned char> hRecv(n * 4);
  // Warm-up (allocates, estimates tau), outside the graph.
  std::vector<unsigned char> in = randomInput(n, spcclFloat32, g, false);
  dSend.upload(in);
  ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(dSend.p, dRecv.p, spcclSum, dc, stream_))
      << spcclGetLastError(devFixed_);
  ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(in.data(), hRecv.data(), spcclSum, hc, nullptr));
  CUDA_OK(cudaStreamSynchronize(stream_));
  ASSERT_EQ(n, firstValueMismatch(dRecv.download().data(), hRecv.data(), n, spcclFloat32));
  // Capture one call, replay it on new data three times.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const spcclResult_t captured = spcclAllReduceCompressed(dSend.p, dRecv.p, spcclSum, dc, stream_);
  CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  ASSERT_EQ(spcclSuccess, captured) << spcclGetLastError(devFixed_);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> dRes(n), hRes(n);
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    in = randomInput(n, spcclFloat32, g, false);
    dSend.upload(in);
    CUDA_OK(cudaGraphLaunch(exec, stream_));
    ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(in.data(), hRecv.data(), spcclSum, hc, nullptr));
    CUDA_OK(cudaStreamSynchronize(stream_));
    const std::vector<unsigned char> dOut = dRecv.download();
    ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(dc, dRes.data(), n));
    ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(hc, hRes.data(), n));
    // Nothing overflows at a fresh tau on same-distribution data only by
    // luck; where it does, the fixed mode keeps the overflow in the residual
    // while the host re-estimates. Conservation holds either way; equality
    // with the host only where the host did not re-estimate.
    spcclStats_t hs;
    ASSERT_EQ(spcclSuccess, spcclCompressorGetStats(hc, &hs));
    if (hs.thresholdUpdates == 1) {
      ASSERT_EQ(n, firstValueMismatch(dOut.data(), hRecv.data(), n, spcclFloat32))
          << "graph replay differs from the host path";
      ASSERT_EQ(n, firstValueMismatch(dRes.data(), hRes.data(), n, spcclFloat32));
    }
    if (ranks_ == 1) {  // fp32 wire, one rank: out + residual == send + previous residual, element by element
      for (size_t i = 0; i < n; i += 101) {
        float o, r = dRes[i];
        std::memcpy(&o, dOut.data() + 4 * i, 4);
        ASSERT_TRUE(o == 0.0f || r == 0.0f) << "element " << i << " both sent and kept";
      }
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(hc));
}

TEST_F(NcclWorld, ExactCollectivesMatchMpi) {
  const size_t n = 4099;
  std::vector<int32_t> in(n), out(n * ranks_), want(n * ranks_);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<int32_t>(i * 7 + rank_ * 1000003);
  Dev<int32_t> dIn(n), dOut(n * ranks_);
  dIn.upload(in);
  // allreduce (int: exact in any order), max
  ASSERT_EQ(spcclSuccess, spcclAllReduce(dIn.p, dOut.p, n, spcclInt32, spcclMax, dev_, stream_));
  ASSERT_EQ(spcclSuccess, spcclAllReduce(in.data(), want.data(), n, spcclInt32, spcclMax, host_, nullptr));
  CUDA_OK(cudaStreamSynchronize(stream_));
  out = dOut.download();
  ASSERT_EQ(0, std::memcmp(out.data(), want.data(), n * 4)) << "allreduce";
  // allgather
  ASSERT_EQ(spcclSuccess, spcclAllGather(dIn.p, dOut.p, n, spcclInt32, dev_, stream_));
  ASSERT_EQ(spcclSuccess, spcclAllGather(in.data(), want.data(), n, spcclInt32, host_, nullptr));
  CUDA_OK(cudaStreamSynchronize(stream_));
  out = dOut.download();
  ASSERT_EQ(out, want) << "allgather";
  // alltoall, out of place and in place
  std::vector<int32_t> blocks(n * ranks_);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i + 31 * rank_);
  Dev<int32_t> dBlocks(n * ranks_);
  dBlocks.upload(blocks);
  ASSERT_EQ(spcclSuccess, spcclAlltoAll(dBlocks.p, dOut.p, n, spcclInt32, dev_, stream_));
  ASSERT_EQ(spcclSuccess, spcclAlltoAll(blocks.data(), want.data(), n, spcclInt32, host_, nullptr));
  CUDA_OK(cudaStreamSynchronize(stream_));
  ASSERT_EQ(dOut.download(), want) << "alltoall";
  ASSERT_EQ(spcclSuccess, spcclAlltoAll(dBlocks.p, dBlocks.p, n, spcclInt32, dev_, stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  ASSERT_EQ(dBlocks.download(), want) << "in-place alltoall";
}

// Send buffers that overlap the receive buffer other than in NCCL's in-place
// form (the host path's MpiTest.OverlappingBuffersGiveTheSeparateBuffersResult):
// the result of separate buffers, never NCCL reading what it already wrote.
TEST_F(NcclWorld, OverlappingBuffersGiveTheSeparateBuffersResult) {
  const size_t P = static_cast<size_t>(ranks_);
  for (size_t n : {size_t{5}, size_t{1000}, size_t{1000003}}) {
    SCOPED_TRACE(n);
    // Allgather, sendbuff == recvbuff on every rank.
    std::vector<int32_t> gather(n * P, -1);
    for (size_t i = 0; i < n; ++i) gather[i] = static_cast<int32_t>(rank_ * 1000003 + i);
    Dev<int32_t> dGather(n * P);
    dGather.upload(gather);
    ASSERT_EQ(spcclSuccess, spcclAllGather(dGather.p, dGather.p, n, spcclInt32, dev_, stream_))
        << spcclGetLastError(dev_);
    CUDA_OK(cudaStreamSynchronize(stream_));
    gather = dGather.download();
    size_t bad = 0;
    for (size_t r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) bad += gather[r * n + i] != static_cast<int32_t>(r * 1000003 + i);
    EXPECT_EQ(bad, 0u) << "allgather with sendbuff == recvbuff";

    // Alltoall, sendbuff = recvbuff + 1.
    std::vector<int32_t> a2a(n * P + 1, -1);
    for (size_t j = 0; j < P; ++j)
      for (size_t i = 0; i < n; ++i) a2a[1 + j * n + i] = static_cast<int32_t>(rank_ * 7 + j * 1000003 + i);
    Dev<int32_t> dA2a(n * P + 1);
    dA2a.upload(a2a);
    ASSERT_EQ(spcclSuccess, spcclAlltoAll(dA2a.p + 1, dA2a.p, n, spcclInt32, dev_, stream_)) << spcclGetLastError(dev_);
    CUDA_OK(cudaStreamSynchronize(stream_));
    a2a = dA2a.download();
    bad = 0;
    for (size_t j = 0; j < P; ++j)
      for (size_t i = 0; i < n; ++i) bad += a2a[j * n + i] != static_cast<int32_t>(j * 7 + rank_ * 1000003 + i);
    EXPECT_EQ(bad, 0u) << "alltoall with sendbuff = recvbuff + 1";

    // Allreduce, sendbuff = recvbuff + 1 and recvbuff = sendbuff + 1 (exact: int32).
    std::vector<int32_t> mine(n), want(n);
    for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(i * (rank_ + 1));
    ASSERT_EQ(spcclSuccess, spcclAllReduce(mine.data(), want.data(), n, spcclInt32, spcclSum, host_, nullptr));
    for (int shift : {1, -1}) {
      std::vector<int32_t> ar(n + 1, -1);
      std::copy(mine.begin(), mine.end(), ar.begin() + (shift > 0 ? 1 : 0));
      Dev<int32_t> dAr(n + 1);
      dAr.upload(ar);
      int32_t* send = shift > 0 ? dAr.p + 1 : dAr.p;
      int32_t* recv = shift > 0 ? dAr.p : dAr.p + 1;
      ASSERT_EQ(spcclSuccess, spcclAllReduce(send, recv, n, spcclInt32, spcclSum, dev_, stream_))
          << spcclGetLastError(dev_);
      CUDA_OK(cudaStreamSynchronize(stream_));
      ar = dAr.download();
      bad = 0;
      for (size_t i = 0; i < n; ++i) bad += ar[i + (shift > 0 ? 0 : 1)] != want[i];
      EXPECT_EQ(bad, 0u) << "allreduce with sendbuff = recvbuff " << (shift > 0 ? "+ 1" : "- 1");
    }
  }
}

// Overlapping buffers go through the transport's scratch, also in a captured
// graph. A capture cannot allocate it (cudaMalloc/cudaFree on a capturing
// stream invalidate the caller's capture): the call is refused by name and
// the capture stays valid. Once a call outside the graph sized it, the graph
// copies into it on every replay, so a later call that outgrows it must not
// free it: the graph would write into freed memory, which the next
// allocation (`victim` below, the size of the old scratch) may hold.
TEST_F(NcclWorld, OverlapScratchIsNeverFreedUnderACapturedGraph) {
  const size_t n = 1000, P = static_cast<size_t>(ranks_);
  std::vector<int32_t> mine(n), want(n);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(i * (rank_ + 1));
  ASSERT_EQ(spcclSuccess, spcclAllReduce(mine.data(), want.data(), n, spcclInt32, spcclSum, host_, nullptr));
  Dev<int32_t> dAr(n + 1);
  auto fill = [&] {
    std::vector<int32_t> ar(n + 1, -1);
    std::copy(mine.begin(), mine.end(), ar.begin() + 1);
    dAr.upload(ar);
  };
  auto check = [&](const char* what) {
    const std::vector<int32_t> ar = dAr.download();
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += ar[i] != want[i];
    EXPECT_EQ(bad, 0u) << what;
  };

  // 1. No scratch yet: refused while capturing; the capture is still valid.
  fill();
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const spcclResult_t early = spcclAllReduce(dAr.p + 1, dAr.p, n, spcclInt32, spcclSum, dev_, stream_);
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  EXPECT_EQ(spcclInvalidUsage, early) << spcclGetLastError(dev_);
  EXPECT_EQ(cudaSuccess, ended) << "the refused call left the capture invalid";
  if (graph != nullptr) cudaGraphDestroy(graph);
  graph = nullptr;
  (void)cudaGetLastError();

  // 2. Sized outside the graph, then captured.
  fill();
  ASSERT_EQ(spcclSuccess, spcclAllReduce(dAr.p + 1, dAr.p, n, spcclInt32, spcclSum, dev_, stream_))
      << spcclGetLastError(dev_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  check("warm-up call");
  fill();
  CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const spcclResult_t captured = spcclAllReduce(dAr.p + 1, dAr.p, n, spcclInt32, spcclSum, dev_, stream_);
  CUDA_OK(cudaStreamEndCapture(stream_, &graph));
  ASSERT_EQ(spcclSuccess, captured) << spcclGetLastError(dev_);
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  // 3. Outgrown outside the graph (an in-place alltoall stages 4 x as much),
  // then a buffer of the old scratch's size is allocated and filled.
  const size_t m = 4 * n;
  Dev<int32_t> big(m * P);
  big.upload(std::vector<int32_t>(m * P, 7));
  ASSERT_EQ(spcclSuccess, spcclAlltoAll(big.p, big.p, m, spcclInt32, dev_, stream_)) << spcclGetLastError(dev_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  Dev<int32_t> victim(n);
  const std::vector<int32_t> pattern(n, 0x5a5a5a5a);
  victim.upload(pattern);

  // 4. The replay still gives the sum, and writes nothing but its output.
  fill();
  CUDA_OK(cudaGraphLaunch(exec, stream_));
  CUDA_OK(cudaStreamSynchronize(stream_));
  check("graph replay after the scratch was outgrown");
  EXPECT_TRUE(victim.download() == pattern) << "the replay wrote into memory freed under it";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_F(NcclWorld, DeviceBuffersOnAnMpiCommunicatorAreRejected) {
  Dev<float> d(1000);
  std::vector<float> h(1000, 1.0f);
  // Compressed path: never (host kernels cannot read device memory).
  spcclCompressor_t hc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(host_, 1000, spcclFloat32, nullptr, &hc));
  EXPECT_EQ(spcclInvalidUsage, spcclAllReduceCompressed(d.p, h.data(), spcclSum, hc, nullptr));
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(host_), "sendbuff=")) << spcclGetLastError(host_);
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(host_), "spcclCommInitNccl")) << spcclGetLastError(host_);
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(hc));
  // Managed memory is host-accessible wherever its pages are (the driver may
  // report it as device memory): the host path takes it, on every rank alike.
  float* managed = nullptr;
  CUDA_OK(cudaMallocManaged(&managed, 2000 * sizeof(float)));
  CUDA_OK(cudaMemset(managed, 0, 2000 * sizeof(float)));  // its pages touched on the device
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(host_, 1000, spcclFloat32, nullptr, &hc));
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(managed, managed + 1000, spcclSum, hc, nullptr))
      << spcclGetLastError(host_);
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(hc));
  CUDA_OK(cudaFree(managed));
  // Exact path: only where the MPI is CUDA-aware (Debian's Open MPI is not).
  const spcclResult_t r = spcclAllReduce(h.data(), d.p, 1000, spcclInt32, spcclSum, host_, nullptr);
  EXPECT_TRUE(r == spcclInvalidUsage || r == spcclSuccess) << spcclGetErrorString(r);
  // A stream on an MPI communicator.
  EXPECT_EQ(spcclInvalidArgument,
            spcclAllReduce(h.data(), h.data(), 1000, spcclFloat32, spcclSum, host_, static_cast<void*>(stream_)));
}

// The compressed allreduce's dense algorithm sums fp32 in recvbuff: a send
// buffer one element off it gives what separate buffers give (the host path's
// denseReduce and moveIntoPlace), with and without error feedback.
TEST_F(NcclWorld, CompressedDenseWithOverlappingBuffersMatchesSeparateBuffers) {
  const size_t n = 50001;
  std::mt19937_64 g(4242 + static_cast<uint64_t>(rank_));
  std::normal_distribution<float> normal;
  std::vector<float> in(n);
  for (float& f : in) f = normal(g);
  for (int ef : {0, 1})
    for (int shift : {1, -1}) {
      SCOPED_TRACE("ef " + std::to_string(ef) + " shift " + std::to_string(shift));
      spcclCompressConfig_t c;
      ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&c));
      c.density = 0.01f;
      c.errorFeedback = ef;
      c.algorithm = SPCCL_ALGO_DENSE;
      spcclCompressor_t overlapping = nullptr, separate = nullptr;
      ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, &c, &overlapping));
      ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, &c, &separate));
      Dev<float> buf(n + 1), dSend(n), dRecv(n);
      std::vector<float> staged(n + 1, -7.0f);
      std::copy(in.begin(), in.end(), staged.begin() + (shift > 0 ? 1 : 0));
      buf.upload(staged);
      dSend.upload(in);
      float* send = shift > 0 ? buf.p + 1 : buf.p;
      float* recv = shift > 0 ? buf.p : buf.p + 1;
      ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(send, recv, spcclSum, overlapping, stream_))
          << spcclGetLastError(dev_);
      ASSERT_EQ(spcclSuccess, spcclAllReduceCompressed(dSend.p, dRecv.p, spcclSum, separate, stream_))
          << spcclGetLastError(dev_);
      CUDA_OK(cudaStreamSynchronize(stream_));
      const std::vector<float> all = buf.download(), want = dRecv.download();
      for (size_t i = 0; i < n; ++i) {
        const float got = all[i + (shift > 0 ? 0 : 1)];
        if (ranks_ == 1) {
          ASSERT_EQ(got, want[i]) << "element " << i;
        } else {
          ASSERT_NEAR(got, want[i], 1e-5f * (1.0f + std::fabs(want[i]))) << "element " << i;
        }
      }
      EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(overlapping));
      EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(separate));
    }
}

// The other way round: pageable host memory on an NCCL communicator is
// refused by name on every rank (no kernel faults on it, which would poison
// the CUDA context), as a device buffer on an MPI communicator is. Managed
// memory passes.
TEST_F(NcclWorld, HostBuffersOnAnNcclCommunicatorAreRejected) {
  int device = 0, pageable = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device));
  if (pageable) GTEST_SKIP() << "this system's devices read pageable host memory (HMM/ATS)";
  const size_t n = 100000;
  Dev<float> d(n), d2(n);
  std::vector<float> h(n, 1.0f);
  auto refusedNaming = [&](spcclResult_t r, const char* name) {
    EXPECT_EQ(spcclInvalidUsage, r) << name;
    EXPECT_NE(nullptr, std::strstr(spcclGetLastError(dev_), name)) << spcclGetLastError(dev_);
    EXPECT_NE(nullptr, std::strstr(spcclGetLastError(dev_), "NCCL communicator")) << spcclGetLastError(dev_);
  };
  refusedNaming(spcclAllReduce(h.data(), d.p, 1000, spcclInt32, spcclSum, dev_, stream_), "sendbuff=");
  refusedNaming(spcclAllReduce(d.p, h.data(), n, spcclFloat32, spcclSum, dev_, stream_), "recvbuff=");
  spcclCompressor_t dc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, nullptr, &dc));
  refusedNaming(spcclAllReduceCompressed(h.data(), d.p, spcclSum, dc, stream_), "sendbuff=");
  refusedNaming(spcclAlltoAll(d.p, h.data(), n / static_cast<size_t>(ranks_), spcclFloat32, dev_, stream_),
                "recvbuff=");
  refusedNaming(spcclAllGather(h.data(), d.p, n / static_cast<size_t>(ranks_), spcclFloat32, dev_, stream_),
                "sendbuff=");
  refusedNaming(spcclAlltoAllRowsCompressed(h.data(), d.p, 10, 100 / static_cast<size_t>(ranks_) + 1, spcclFloat32,
                                            0.1f, nullptr, dev_, stream_),
                "sendbuff=");
  std::vector<int64_t> ids(10, 1);
  size_t outNrows = 0;
  refusedNaming(
      spcclAllReduceRowSparse(ids.data(), d.p, 10, 8, spcclFloat32, nullptr, nullptr, 0, &outNrows, dev_, stream_),
      "rowIds=");
  // Managed memory: the device reads it; the compressed call runs.
  float* managed = nullptr;
  CUDA_OK(cudaMallocManaged(&managed, n * sizeof(float)));
  std::fill(managed, managed + n, 1.0f);
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(managed, d2.p, spcclSum, dc, stream_)) << spcclGetLastError(dev_);
  CUDA_OK(cudaStreamSynchronize(stream_));
  CUDA_OK(cudaFree(managed));
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
  CUDA_OK(cudaGetLastError());  // nothing faulted
}

// DCT-MP rows: forward and backward on the device against the host path,
// bit for bit (dense rows out, gradients back at exactly the kept positions).
TEST_F(NcclWorld, AlltoAllRowsMatchHostPathBitForBit) {
  struct RowsCase {
    size_t rowsPerPeer, rowLen;
    float density;
    spcclDataType_t type;
    bool nonFinite;
  };
  const RowsCase cases[] = {{7, 64, 1.0f / 16, spcclFloat32, false},
                            {3, 1024, 0.01f, spcclFloat32, true},
                            {5, 1500, 0.25f, spcclFloat16, false},
                            {0, 32, 0.5f, spcclFloat32, false},
                            {64, 128, 1.0f / 16, spcclBfloat16, true}};
  std::mt19937_64 g(4242 + rank_);
  for (const RowsCase& rc : cases) {
    SCOPED_TRACE("rowsPerPeer=" + std::to_string(rc.rowsPerPeer) + " rowLen=" + std::to_string(rc.rowLen) +
                 " density=" + std::to_string(rc.density) + " type=" + std::to_string(rc.type));
    const size_t elems = rc.rowsPerPeer * rc.rowLen * ranks_, bytes = elems * elemBytes(rc.type);
    const std::vector<unsigned char> in = randomInput(elems, rc.type, g, rc.nonFinite);
    const std::vector<unsigned char> grad = randomInput(elems, rc.type, g, false);
    Dev<unsigned char> dIn(bytes), dOut(bytes), dGrad(bytes), dGradOut(bytes);
    dIn.upload(in);
    dGrad.upload(grad);
    std::vector<unsigned char> hOut(bytes), hGradOut(bytes);
    spcclSelection_t ds = nullptr, hs = nullptr;
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsCompressed(dIn.p, dOut.p, rc.rowsPerPeer, rc.rowLen, rc.type, rc.density,
                                                        &ds, dev_, stream_))
        << spcclGetLastError(dev_);
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsCompressed(in.data(), hOut.data(), rc.rowsPerPeer, rc.rowLen, rc.type,
                                                        rc.density, &hs, host_, nullptr))
        << spcclGetLastError(host_);
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsBackward(dGrad.p, dGradOut.p, ds, stream_)) << spcclGetLastError(dev_);
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsBackward(grad.data(), hGradOut.data(), hs, nullptr));
    CUDA_OK(cudaStreamSynchronize(stream_));
    ASSERT_EQ(0, std::memcmp(dOut.download().data(), hOut.data(), bytes)) << "forward rows differ";
    ASSERT_EQ(0, std::memcmp(dGradOut.download().data(), hGradOut.data(), bytes)) << "backward gradients differ";
    EXPECT_EQ(spcclSuccess, spcclSelectionDestroy(ds));
    EXPECT_EQ(spcclSuccess, spcclSelectionDestroy(hs));
  }
  // The drop-in alltoall with SPCCL_ALLTOALL_* unset stays exact (checked in
  // ExactCollectivesMatchMpi); repeated forwards reuse pooled selection memory.
  for (int step = 0; step < 3; ++step) {
    Dev<float> a(64 * 16 * ranks_), b(64 * 16 * ranks_);
    cudaMemset(a.p, 0, 64 * 16 * ranks_ * sizeof(float));
    spcclSelection_t s = nullptr;
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsCompressed(a.p, b.p, 16, 64, spcclFloat32, 0.25f, &s, dev_, stream_));
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsBackward(b.p, a.p, s, stream_));
    ASSERT_EQ(spcclSuccess, spcclSelectionDestroy(s));
  }
  CUDA_OK(cudaStreamSynchronize(stream_));
}

// SPCCL_ROWS_CODEC=fp16 and bf16 on the device (a value type both ways)
// against the host path, bit for bit; the codecs the device lacks are refused
// by name.
TEST_F(NcclWorld, AlltoAllRowsCodecsMatchHostPath) {
  for (const char* codec : {"fp16", "bf16", "fp8", "int8", "bounded"}) {
    SCOPED_TRACE(codec);
    spcclComm_t dev = nullptr, host = nullptr;
    ASSERT_NO_FATAL_FAILURE(makePairWith("SPCCL_ROWS_CODEC", codec, &dev, &host));
    const size_t rowsPerPeer = 9, rowLen = 96, elems = rowsPerPeer * rowLen * ranks_, bytes = elems * 4;
    std::mt19937_64 g(99 + rank_);
    const std::vector<unsigned char> in = randomInput(elems, spcclFloat32, g, true);
    Dev<unsigned char> dIn(bytes), dOut(bytes);
    dIn.upload(in);
    std::vector<unsigned char> hOut(bytes);
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsCompressed(dIn.p, dOut.p, rowsPerPeer, rowLen, spcclFloat32, 0.125f,
                                                        nullptr, dev, stream_))
        << spcclGetLastError(dev);
    ASSERT_EQ(spcclSuccess, spcclAlltoAllRowsCompressed(in.data(), hOut.data(), rowsPerPeer, rowLen, spcclFloat32,
                                                        0.125f, nullptr, host, nullptr))
        << spcclGetLastError(host);
    CUDA_OK(cudaStreamSynchronize(stream_));
    EXPECT_EQ(0, std::memcmp(dOut.download().data(), hOut.data(), bytes)) << "rows differ";
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev));
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(host));
    if (HasFatalFailure()) return;
  }
}

// Row-sparse allreduce on the device against the host path, both
// algorithms: same union, same sums in rank order, bit for bit; too small an
// output on both.
TEST_F(NcclWorld, RowSparseMatchesHostPathBitForBit) {
  for (const char* algo : {"allgather", "partition"}) {
    SCOPED_TRACE(algo);
    spcclComm_t dev = nullptr, host = nullptr;
    ASSERT_NO_FATAL_FAILURE(makePairWith("SPCCL_ROWSPARSE_ALGO", algo, &dev, &host));
    std::mt19937_64 g(777 + rank_);
    for (spcclDataType_t type : {spcclFloat32, spcclFloat16, spcclFloat64}) {
      for (size_t rowLen : {size_t{1}, size_t{16}, size_t{130}}) {
        SCOPED_TRACE("type=" + std::to_string(type) + " rowLen=" + std::to_string(rowLen));
        const size_t nrows = rank_ == 1 ? 0 : 300 + 17 * rank_;  // rank 1 contributes nothing
        std::vector<int64_t> ids(nrows);
        for (int64_t& id : ids) id = static_cast<int64_t>(g() % 500) - 100;  // duplicates, negatives, overlaps
        const size_t eb = type == spcclFloat64 ? 8 : elemBytes(type);
        std::vector<unsigned char> rows;
        if (type == spcclFloat64) {
          std::normal_distribution<double> normal;
          rows.resize(nrows * rowLen * 8);
          for (size_t i = 0; i < nrows * rowLen; ++i) {
            const double x = normal(g);
            std::memcpy(rows.data() + 8 * i, &x, 8);
          }
        } else {
          rows = randomInput(nrows * rowLen, type, g, false);
        }
        const size_t cap = 600;
        Dev<int64_t> dIds(nrows), dOutIds(cap);
        Dev<unsigned char> dRows(nrows * rowLen * eb), dOutRows(cap * rowLen * eb);
        if (nrows) {
          dIds.upload(ids);
          dRows.upload(rows);
        }
        std::vector<int64_t> hOutIds(cap);
        std::vector<unsigned char> hOutRows(cap * rowLen * eb);
        size_t dN = 0, hN = 0;
        ASSERT_EQ(spcclSuccess, spcclAllReduceRowSparse(nrows ? dIds.p : nullptr, nrows ? dRows.p : nullptr, nrows,
                                                        rowLen, type, dOutIds.p, dOutRows.p, cap, &dN, dev, stream_))
            << spcclGetLastError(dev);
        ASSERT_EQ(spcclSuccess, spcclAllReduceRowSparse(ids.data(), rows.data(), nrows, rowLen, type, hOutIds.data(),
                                                        hOutRows.data(), cap, &hN, host, nullptr))
            << spcclGetLastError(host);
        CUDA_OK(cudaStreamSynchronize(stream_));
        ASSERT_EQ(dN, hN);
        const std::vector<int64_t> gotIds = dOutIds.download();
        const std::vector<unsigned char> gotRows = dOutRows.download();
        ASSERT_EQ(0, std::memcmp(gotIds.data(), hOutIds.data(), hN * 8)) << "ids differ";
        ASSERT_EQ(hN * rowLen, firstValueMismatch(gotRows.data(), hOutRows.data(), hN * rowLen, type)) << "rows differ";
        // Too small an output: spcclInvalidUsage on every rank, the size needed in outNrows.
        EXPECT_EQ(spcclInvalidUsage,
                  spcclAllReduceRowSparse(nrows ? dIds.p : nullptr, nrows ? dRows.p : nullptr, nrows, rowLen, type,
                                          dOutIds.p, dOutRows.p, 10, &dN, dev, stream_));
        EXPECT_EQ(dN, hN);
      }
    }
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev));
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(host));
    if (HasFatalFailure()) return;
  }
}

// SPCCL_ALLGATHER_DENSITY: the sparsified allgather on the device against
// the host path, bit for bit (NaN/Inf always kept, ties by lower index).
TEST_F(NcclWorld, SparsifiedAllGatherMatchesHostPath) {
  setenv("SPCCL_ALLGATHER_DENSITY", "0.05", 1);
  spcclComm_t d2 = nullptr, h2 = nullptr;
  const spcclResult_t r1 = spcclCommInitNccl(&d2, nccl_);
  const spcclResult_t r2 = spcclCommInitMPI(&h2, MPI_COMM_WORLD);
  unsetenv("SPCCL_ALLGATHER_DENSITY");
  ASSERT_EQ(spcclSuccess, r1);
  ASSERT_EQ(spcclSuccess, r2);
  std::mt19937_64 g(31337 + rank_);
  for (spcclDataType_t type : {spcclFloat32, spcclBfloat16})
    for (size_t n : {size_t{1}, size_t{1000}, size_t{3 * 4096 + 1}})
      for (bool nonFinite : {false, true}) {
        SCOPED_TRACE("type=" + std::to_string(type) + " n=" + std::to_string(n) +
                     " nonFinite=" + std::to_string(nonFinite));
        const size_t eb = elemBytes(type);
        const std::vector<unsigned char> in = randomInput(n, type, g, nonFinite);
        Dev<unsigned char> dIn(n * eb), dOut(n * eb * ranks_);
        dIn.upload(in);
        std::vector<unsigned char> hOut(n * eb * ranks_);
        ASSERT_EQ(spcclSuccess, spcclAllGather(dIn.p, dOut.p, n, type, d2, stream_)) << spcclGetLastError(d2);
        ASSERT_EQ(spcclSuccess, spcclAllGather(in.data(), hOut.data(), n, type, h2, nullptr));
        CUDA_OK(cudaStreamSynchronize(stream_));
        ASSERT_EQ(n * ranks_, firstValueMismatch(dOut.download().data(), hOut.data(), n * ranks_, type))
            << "allgather blocks differ";
      }
  spcclStats_t st;
  ASSERT_EQ(spcclSuccess, spcclCommGetStats(d2, &st));
  EXPECT_GT(st.compressedCalls, 0u);
  EXPECT_EQ(spcclSuccess, spcclCommDestroy(d2));
  EXPECT_EQ(spcclSuccess, spcclCommDestroy(h2));
}

// SPCCL_CHECKSUM=1 on the device (the CRC32C on the CUDA executor): the
// compressed allreduce gives the host path's bits and bytes; a bit flipped in transit (SPCCL_TEST_CORRUPT_STREAMS) fails the call
// on every rank with spcclRemoteError naming the CRC.
TEST_F(NcclWorld, ChecksummedStreamsMatchHostPath) {
  setenv("SPCCL_CHECKSUM", "1", 1);
  spcclComm_t dev = nullptr, host = nullptr;
  const spcclResult_t d = spcclCommInitNccl(&dev, nccl_);
  const spcclResult_t h = spcclCommInitMPI(&host, MPI_COMM_WORLD);
  ASSERT_EQ(spcclSuccess, d) << spcclGetLastError(nullptr);
  ASSERT_EQ(spcclSuccess, h) << spcclGetLastError(nullptr);
  compareWithHost(dev, host, {spcclFloat32, spcclFloat32, spcclSum, SPCCL_ALGO_ALLGATHER, 1, 3, 100003, false}, 4,
                  stream_, rank_, ranks_);
  EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev));
  EXPECT_EQ(spcclSuccess, spcclCommDestroy(host));
  if (HasFatalFailure()) return;

  setenv("SPCCL_TEST_CORRUPT_STREAMS", "1", 1);
  const spcclResult_t c = spcclCommInitNccl(&dev, nccl_);
  unsetenv("SPCCL_TEST_CORRUPT_STREAMS");
  unsetenv("SPCCL_CHECKSUM");
  ASSERT_EQ(spcclSuccess, c) << spcclGetLastError(nullptr);
  const size_t n = 30000;
  spcclCompressConfig_t cfg;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&cfg));
  cfg.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t dc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev, n, spcclFloat32, &cfg, &dc));
  std::mt19937_64 g(9 + rank_);
  const std::vector<unsigned char> in = randomInput(n, spcclFloat32, g, false);
  Dev<unsigned char> buf(n * 4);
  buf.upload(in);
  EXPECT_EQ(spcclRemoteError, spcclAllReduceCompressed(buf.p, buf.p, spcclSum, dc, stream_));
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(dev), "CRC32C")) << spcclGetLastError(dev);
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
  EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev));
}

// The index encodings run on the device too (the shared algorithms on the
// CUDA executor): each gives the host path's bits and bytes.
TEST_F(NcclWorld, IndexEncodingsMatchHostPathBitForBit) {
  for (const char* encoding : {"coo", "delta", "bitmap", "auto"}) {
    SCOPED_TRACE(encoding);
    spcclComm_t dev = nullptr, host = nullptr;
    ASSERT_NO_FATAL_FAILURE(makePairWith("SPCCL_INDEX_ENCODING", encoding, &dev, &host));
    compareWithHost(dev, host, {spcclFloat32, spcclFloat32, spcclSum, SPCCL_ALGO_ALLGATHER, 1, 3, 100003, false}, 4,
                    stream_, rank_, ranks_);
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(dev));
    EXPECT_EQ(spcclSuccess, spcclCommDestroy(host));
    if (HasFatalFailure()) return;
  }
}

TEST_F(NcclWorld, MismatchedCallsFailOnEveryRank) {
  if (ranks_ < 2) GTEST_SKIP() << "needs 2 ranks";
  const size_t n = 30000;
  spcclCompressConfig_t c;
  ASSERT_EQ(spcclSuccess, spcclCompressConfigInit(&c));
  c.algorithm = SPCCL_ALGO_ALLGATHER;
  spcclCompressor_t dc = nullptr;
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(dev_, n, spcclFloat32, &c, &dc));
  Dev<float> d(n);
  cudaMemset(d.p, 0, n * 4);
  std::vector<float> before(n), after(n);
  ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(dc, before.data(), n));
  // Exact mode: rank 0 sums, the others average -> spcclInvalidUsage everywhere.
  const spcclRedOp_t op = rank_ == 0 ? spcclSum : spcclAvg;
  EXPECT_EQ(spcclInvalidUsage, spcclAllReduceCompressed(d.p, d.p, op, dc, stream_));
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(dev_), "mismatched")) << spcclGetLastError(dev_);
  ASSERT_EQ(spcclSuccess, spcclCompressorGetResidual(dc, after.data(), n));
  EXPECT_EQ(before, after) << "a rejected call changed the residual";
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(d.p, d.p, spcclSum, dc, stream_)) << spcclGetLastError(dev_);
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
  // Fixed mode: found on the device, reported by the next call.
  ASSERT_NO_FATAL_FAILURE(makeFixed());
  ASSERT_EQ(spcclSuccess, spcclCompressorCreate(devFixed_, n, spcclFloat32, &c, &dc));
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(d.p, d.p, op, dc, stream_));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
  EXPECT_EQ(spcclInvalidUsage, spcclAllReduceCompressed(d.p, d.p, spcclSum, dc, stream_));
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(devFixed_), "fixed-capacity")) << spcclGetLastError(devFixed_);
  // Without the caller's synchronisation, the next call that synchronises
  // (here the rows forward's agreement) reports it, on every rank alike: every
  // rank's device judged the same records. Reported once: the calls after succeed.
  const size_t rows = 8, rowLen = 32, elems = rows * rowLen * ranks_;
  Dev<float> a(elems), b(elems);
  cudaMemset(a.p, 0, elems * sizeof(float));
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(d.p, d.p, op, dc, stream_));
  EXPECT_EQ(spcclInvalidUsage,
            spcclAlltoAllRowsCompressed(a.p, b.p, rows, rowLen, spcclFloat32, 0.25f, nullptr, devFixed_, stream_));
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(devFixed_), "fixed-capacity")) << spcclGetLastError(devFixed_);
  EXPECT_EQ(spcclSuccess,
            spcclAlltoAllRowsCompressed(a.p, b.p, rows, rowLen, spcclFloat32, 0.25f, nullptr, devFixed_, stream_))
      << spcclGetLastError(devFixed_);
  EXPECT_EQ(spcclSuccess, spcclAllReduceCompressed(d.p, d.p, spcclSum, dc, stream_)) << spcclGetLastError(devFixed_);
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream_));
  EXPECT_EQ(spcclSuccess, spcclCompressorDestroy(dc));
}

// Needs no device: the arguments are checked before any CUDA or NCCL call.
TEST(NcclArguments, NullHandlesAreInvalidArguments) {
  spcclComm_t comm = reinterpret_cast<spcclComm_t>(0x1);
  EXPECT_EQ(spcclInvalidArgument, spcclCommInitNccl(&comm, nullptr));
  EXPECT_EQ(nullptr, comm) << "the output is cleared on failure";
  EXPECT_NE(nullptr, std::strstr(spcclGetLastError(nullptr), "nccl")) << spcclGetLastError(nullptr);
  EXPECT_EQ(spcclInvalidArgument, spcclCommInitNccl(nullptr, reinterpret_cast<ncclComm_t>(0x1)));
}

}  // namespace
