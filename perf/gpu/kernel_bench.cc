// Device kernel benchmark: selectPack, threshold (radix select), unpack and
// row top-k at several sizes, timed with CUDA events (median of repeated
// runs after warm-up) and reported as achieved GB/s next to a
// device-to-device copy measured in the same run. Every size is also checked
// against kernels/host (bit-exact selection, residual and tau), so a run
// where the tests could not be built still says whether the kernels are
// right. Prints a short table last.
//
//   kernel_bench [--sizes 16,64,256] (Mi floats) [--iters 20] [--density 0.01] [--no-check]
//
// Bytes counted (each input read once, each output written once):
//   copy       4n read + 4n written
//   selectPack send 4n + residual 4n read, residual 4n written, pairs 8 B each written
//              (selectEarly: the same kernel with SelectArgs::storeEarly, same bytes)
//   threshold  3 passes x (send 4n + residual 4n) read (what the kernel streams)
//   unpack     pairs 8 B each read, accumulator 4 B read + 4 B written per pair
//   rowTopK    rows 4n read, positions 4 B x kept + counts 4 B x rows written
//              (rowFloor: the same with RowTopKMethod::kFloorFirst, same bytes)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/host/host_kernels.h"
#include "perf/gpu/bench_fill.h"

using namespace spccl;

#define CHECK_CUDA(call)                                                                                 \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                                      \
    }                                                                                                    \
  } while (0)

#define CHECK_STATUS(expr)                                                                             \
  do {                                                                                                 \
    spccl::Status s_ = (expr);                                                                         \
    if (!s_.isOk()) {                                                                                  \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, s_.message().c_str()); \
      std::exit(2);                                                                                    \
    }                                                                                                  \
  } while (0)

namespace {

struct Options {
  std::vector<size_t> sizesMi{16, 64, 256};
  int iters = 20;
  double density = 0.01;
  bool check = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      o.sizesMi.clear();
      std::string s = argv[++i];
      size_t at = 0;
      while (at < s.size()) {
        const size_t comma = s.find(',', at);
        o.sizesMi.push_back(std::strtoull(s.substr(at, comma - at).c_str(), nullptr, 10));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
    } else if (a == "--iters" && i + 1 < argc) {
      o.iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--density" && i + 1 < argc) {
      o.density = std::atof(argv[++i]);
    } else if (a == "--no-check") {
      o.check = false;
    } else {
      std::fprintf(stderr, "usage: %s [--sizes 16,64,256] [--iters N] [--density D] [--no-check]\n", argv[0]);
      std::exit(a == "--help" ? 0 : 1);
    }
  }
  return o;
}

// Median time of f() in milliseconds, events around each run, after warm-up.
template <typename F>
double medianMs(F&& f, int iters, cudaStream_t s) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(a, s));
    f();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&t[i], a, b));
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

// Two variants of one kernel side by side: run(false) then run(true), twice
// over, the better median of each; {false's, true's}. run(true) runs last.
template <typename F>
std::pair<double, double> medianMsOfTwo(F&& run, int iters, cudaStream_t s) {
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 2; ++round)
    for (bool second : {false, true}) best[second] = std::min(best[second], medianMs([&] { run(second); }, iters, s));
  return {best[0], best[1]};
}

struct Row {
  std::string kernel;
  size_t n;
  double ms, bytes, copyGbs;
  std::string check;
};

template <typename T>
T* deviceAlloc(size_t n) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

bool sameBitsOrNaN(float a, float b) {
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y || (std::isnan(a) && std::isnan(b));
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("kernel_bench: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# kernel_bench: %s, %d SMs, %.1f GiB, L2 %.0f MiB, sm_%d%d; density %.4g, %d timed runs (median)\n",
              prop.name, prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
              prop.l2CacheSize / double(1 << 20), prop.major, prop.minor, opt.density, opt.iters);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<Row> rows;
  bool allOk = true;

  for (size_t mi : opt.sizesMi) {
    const size_t n = mi << 20;
    const uint64_t k =
        std::max<uint64_t>(1, core::densityCount(static_cast<float>(opt.density), n));  // the library's k
    const uint64_t capacity = std::min<uint64_t>(n, 4 * k);
    std::printf("# n = %zu floats (%zu Mi), k = %llu\n", n, mi, static_cast<unsigned long long>(k));
    std::fflush(stdout);

    float* send = deviceAlloc<float>(n);
    float* resIn = deviceAlloc<float>(n);
    float* resOut = deviceAlloc<float>(n);
    float* acc = deviceAlloc<float>(n);
    uint32_t* idx = deviceAlloc<uint32_t>(capacity);
    float* val = deviceAlloc<float>(capacity);
    auto* counts = deviceAlloc<cuda::SelectCounts>(1);
    auto* thr = deviceAlloc<cuda::ThresholdOut>(1);
    const size_t selWsBytes = cuda::selectPackWorkspaceBytes(n);
    const size_t thrWsBytes = cuda::thresholdWorkspaceBytes(n);
    void* selWs = deviceAlloc<unsigned char>(selWsBytes);
    void* thrWs = deviceAlloc<unsigned char>(thrWsBytes);
    CHECK_STATUS(cuda::initSelectPackWorkspace(selWs, selWsBytes, stream));
    CHECK_CUDA(benchFill(send, n, 0x1234 + mi, 1.0f, stream));
    CHECK_CUDA(benchFill(resIn, n, 0x9876 + mi, 0.05f, stream));
    CHECK_CUDA(benchFill(acc, n, 0x5555 + mi, 1.0f, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));

    // Copy ceiling.
    const double copyMs =
        medianMs([&] { CHECK_CUDA(cudaMemcpyAsync(acc, send, n * sizeof(float), cudaMemcpyDeviceToDevice, stream)); },
                 opt.iters, stream);
    const double copyGbs = 8.0 * n / (copyMs * 1e6);
    rows.push_back({"d2d copy", n, copyMs, 8.0 * n, copyGbs, "-"});

    // Threshold.
    const double thrMs = medianMs(
        [&] {
          CHECK_STATUS(cuda::kthLargestMagnitude(send, spcclFloat32, resIn, n, k, thr, thrWs, thrWsBytes, stream));
        },
        opt.iters, stream);

    // selectPack, tau and budget from the device threshold (no host round trip).
    cuda::SelectArgs a{};
    a.send = send;
    a.inType = spcclFloat32;
    a.residualIn = resIn;
    a.residualOut = resOut;
    a.n = n;
    a.threshold = thr;
    a.tieCapacity = k;
    a.capacity = capacity;
    a.wireType = core::ValueType::kFloat32;
    a.indices = idx;
    a.values = val;
    a.result = counts;
    // Both kernels (SelectArgs::storeEarly off and on, perf/gpu/README.md).
    const auto [selMs, earlyMs] = medianMsOfTwo(
        [&](bool early) {
          a.storeEarly = early;
          CHECK_STATUS(cuda::selectPack(a, selWs, selWsBytes, stream));
        },
        opt.iters, stream);
    a.storeEarly = false;
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const cuda::SelectCounts sc = download(counts, 1)[0];
    const uint64_t pairs = std::min<uint64_t>(sc.selected, capacity);

    // Unpack of the stream just packed into the accumulator.
    const double unpackMs = medianMs(
        [&] {
          CHECK_STATUS(
              cuda::unpackAccumulate(idx, val, core::ValueType::kFloat32, pairs, nullptr, acc, 0, n, nullptr, stream));
        },
        opt.iters, stream);

    // Row top-k: rows of 1024, keep 1/16 (the alltoall rows setting of docs/PERF.md).
    const uint32_t rowLen = 1024, keep = core::rowKeep(rowLen, 1.0f / 16);
    const uint64_t nRows = n / rowLen;
    uint32_t* rowPos = reinterpret_cast<uint32_t*>(acc);  // n/16 positions fit easily
    uint32_t* rowCounts = deviceAlloc<uint32_t>(nRows);
    // Both kernels (RowTopKMethod, perf/gpu/README.md), the radix select
    // last: its output is checked below, the floor-first kernel's after it.
    const auto [floorMs, topkMs] = medianMsOfTwo(
        [&](bool radix) {
          CHECK_STATUS(cuda::selectRowsTopK(send, spcclFloat32, nRows, rowLen, keep, rowPos, keep, rowCounts, stream,
                                            radix ? cuda::RowTopKMethod::kRadix : cuda::RowTopKMethod::kFloorFirst));
        },
        opt.iters, stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));

    // Checks against kernels/host.
    std::string selCheck = "skipped", earlyCheck = "skipped", thrCheck = "skipped", topkCheck = "skipped",
                floorCheck = "skipped";
    if (opt.check) {
      const std::vector<float> hSend = download(send, n), hRes = download(resIn, n);
      std::vector<uint32_t> scratch(n);
      const host::ThresholdResult ht =
          host::kthLargestMagnitude(hSend.data(), spcclFloat32, hRes.data(), n, k, &scratch);
      const cuda::ThresholdOut dt = download(thr, 1)[0];
      thrCheck = dt.tauKey == ht.tauKey && dt.above == ht.above && dt.finite == ht.finite ? "ok" : "MISMATCH";
      std::vector<float> hOut(n);
      std::vector<uint32_t> hIdx(capacity);
      std::vector<float> hVal(capacity);
      const uint64_t budget = k > ht.above ? k - ht.above : 0;
      host::SelectArgs ha{hSend.data(),
                          spcclFloat32,
                          hRes.data(),
                          hOut.data(),
                          n,
                          ht.tauKey,
                          budget,
                          capacity,
                          core::ValueType::kFloat32,
                          hIdx.data(),
                          hVal.data()};
      const host::SelectResult hr = host::selectPack(ha);
      // Each kernel's outputs from a fresh pass (the residual out poisoned first).
      const auto selectMatches = [&](bool early) {
        CHECK_CUDA(cudaMemsetAsync(resOut, 0xa5, n * sizeof(float), stream));
        a.storeEarly = early;
        CHECK_STATUS(cuda::selectPack(a, selWs, selWsBytes, stream));
        a.storeEarly = false;
        CHECK_CUDA(cudaStreamSynchronize(stream));
        const cuda::SelectCounts dc = download(counts, 1)[0];
        bool same = dc.selected == hr.selected && dc.finiteSelected == hr.finiteSelected;
        const uint64_t m = std::min<uint64_t>(hr.selected, capacity);
        if (same) {
          const std::vector<uint32_t> dIdx = download(idx, m);
          const std::vector<float> dVal = download(val, m);
          same = std::equal(dIdx.begin(), dIdx.end(), hIdx.begin()) &&
                 std::equal(dVal.begin(), dVal.end(), hVal.begin(), sameBitsOrNaN);
        }
        if (same) {
          const std::vector<float> dOut = download(resOut, n);
          same = std::equal(dOut.begin(), dOut.end(), hOut.begin(), sameBitsOrNaN);
        }
        return same;
      };
      selCheck = selectMatches(false) ? "ok" : "MISMATCH";
      earlyCheck = selectMatches(true) ? "ok" : "MISMATCH";
      // Top-k: the radix select's output (the last timed run), then the floor-first kernel's; the first
      // rows and the last ones (past the grid, so blocks that went round their row loop are checked too).
      const auto rowsMatch = [&] {
        const std::vector<uint32_t> dCounts = download(rowCounts, nRows);
        const std::vector<uint32_t> dPos = download(rowPos, nRows * keep);
        std::vector<uint32_t> pos(rowLen);
        std::vector<uint64_t> rankScratch(rowLen);
        bool ok = true;
        for (uint64_t r = 0; r < nRows && ok; ++r) {
          if (r == 2000 && nRows > 4000) r = nRows - 2000;
          const uint32_t c = host::selectRowTopK(hSend.data() + r * rowLen, spcclFloat32, rowLen, keep, pos.data(),
                                                 rankScratch.data());
          ok = c == dCounts[r] && std::equal(pos.begin(), pos.begin() + std::min(c, keep), dPos.begin() + r * keep);
        }
        return ok;
      };
      topkCheck = rowsMatch() ? "ok" : "MISMATCH";
      CHECK_CUDA(cudaMemsetAsync(rowPos, 0xa5, nRows * keep * sizeof(uint32_t), stream));
      CHECK_CUDA(cudaMemsetAsync(rowCounts, 0xa5, nRows * sizeof(uint32_t), stream));
      CHECK_STATUS(cuda::selectRowsTopK(send, spcclFloat32, nRows, rowLen, keep, rowPos, keep, rowCounts, stream,
                                        cuda::RowTopKMethod::kFloorFirst));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      floorCheck = rowsMatch() ? "ok" : "MISMATCH";
      allOk = allOk && selCheck == "ok" && earlyCheck == "ok" && thrCheck == "ok" && topkCheck == "ok" &&
              floorCheck == "ok";
    }

    rows.push_back({"selectPack", n, selMs, 12.0 * n + 8.0 * static_cast<double>(pairs), copyGbs, selCheck});
    rows.push_back({"selectEarly", n, earlyMs, 12.0 * n + 8.0 * static_cast<double>(pairs), copyGbs, earlyCheck});
    rows.push_back({"threshold", n, thrMs, 24.0 * n, copyGbs, thrCheck});
    rows.push_back({"unpack", n, unpackMs, 16.0 * static_cast<double>(pairs), copyGbs, "-"});
    rows.push_back({"rowTopK", n, topkMs, 4.0 * n + 4.0 * static_cast<double>(nRows) * (keep + 1), copyGbs, topkCheck});
    rows.push_back(
        {"rowFloor", n, floorMs, 4.0 * n + 4.0 * static_cast<double>(nRows) * (keep + 1), copyGbs, floorCheck});
    std::printf("#   selected %llu pairs (%llu finite), copy %.1f GB/s\n", static_cast<unsigned long long>(sc.selected),
                static_cast<unsigned long long>(sc.finiteSelected), copyGbs);

    for (void* p : {static_cast<void*>(send), static_cast<void*>(resIn), static_cast<void*>(resOut),
                    static_cast<void*>(acc), static_cast<void*>(idx), static_cast<void*>(val),
                    static_cast<void*>(counts), static_cast<void*>(thr), selWs, thrWs, static_cast<void*>(rowCounts)})
      if (p) CHECK_CUDA(cudaFree(p));
  }

  std::printf("\n%-11s %12s %10s %10s %9s %7s  %s\n", "kernel", "n (floats)", "time (us)", "bytes (MB)", "GB/s",
              "% copy", "check vs host");
  for (const Row& r : rows) {
    const double gbs = r.bytes / (r.ms * 1e6);
    std::printf("%-11s %12zu %10.1f %10.1f %9.1f %6.0f%%  %s\n", r.kernel.c_str(), r.n, r.ms * 1e3, r.bytes / 1e6, gbs,
                100.0 * gbs / r.copyGbs, r.check.c_str());
  }
  if (!allOk) std::printf("kernel_bench: a device result differs from kernels/host\n");
  return allOk ? 0 : 1;
}
