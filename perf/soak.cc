// soak: many compressed calls of mixed sizes and densities on one
// communicator, as a long training job makes them, watching for errors, for
// ranks that drift apart, and for memory growth.
//
// Each call is drawn (the same draw on every rank) from a mix of:
//   - spcclAllReduceCompressed through 12 explicit compressors: 4 sizes from
//     1,000 to 200,000 elements x densities 0.001 / 0.01 / 0.1, algorithms
//     auto / allgather / split, wire fp32 / fp16 / bf16;
//   - the drop-in spcclAllReduce on 2 buffers (implicit compressors);
//   - spcclAlltoAllRowsCompressed + spcclAlltoAllRowsBackward through a
//     selection, destroyed each time;
//   - spcclAllReduceRowSparse; the drop-in spcclAllGather;
//   - one compressor destroyed and created again (churn).
// Every `--check` calls, a hash of the last output is compared across ranks.
//
// Memory: resident set size from /proc/self/statm, read after a warm-up that
// makes every kind of call on every shape (buffers that grow to a shape's size
// are then at their size) and again at the end, at the same point of the
// cycle (the same objects alive). The run fails when any call fails, ranks
// disagree, or RSS grew by more than --max-growth percent on any rank.
//
// Usage: mpirun -np 4 soak [--calls N] [--warmup N] [--progress N] [--check N]
//                          [--max-growth PCT] [--seed S] [--deliberate-leak BYTES]
// --deliberate-leak loses BYTES per call on purpose: the RSS check must fail.
// Defaults: 100000 calls after a 1000-call warm-up, progress every 10000, growth bound 1%.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <malloc.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "spccl.h"
#include "spccl_mpi.h"

namespace {

struct Options {
  uint64_t calls = 100000;
  uint64_t warmup = 1000;  // random calls after two passes over every kind of call
  uint64_t progress = 10000;
  uint64_t check = 1000;
  double maxGrowthPct = 1.0;
  uint64_t seed = 1;
  uint64_t leakBytes = 0;  // --deliberate-leak: lose this much per call (checks the RSS check)
};

int gRank = 0, gRanks = 1;

long pageSize() { return sysconf(_SC_PAGESIZE); }

// Resident set size in bytes (second field of /proc/self/statm, in pages).
// trim: first hand free heap pages back to the OS (malloc_trim), so the figure
// counts memory held by live allocations rather than what glibc keeps cached;
// the bound applies to this figure, the raw one is printed too.
uint64_t residentBytes(bool trim = true) {
  if (trim) malloc_trim(0);
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<uint64_t>(resident) * static_cast<uint64_t>(pageSize()) : 0;
}

uint64_t fnv1a(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

struct Soak {
  Options opts;
  spcclComm_t comm = nullptr;
  struct Slot {
    size_t count;
    spcclCompressConfig_t config;
    spcclCompressor_t compressor = nullptr;
  };
  std::vector<Slot> slots;
  std::vector<float> send, recv, dropA, dropB, rowsIn, rowsOut, grad, gradOut, gathered;
  std::vector<int64_t> ids, outIds;
  uint64_t errors = 0, lastHash = 0, rowsHash = 0, calls = 0;
  std::string firstError;

  static constexpr size_t kMaxCount = 200000;
  static constexpr size_t kDropCount = 100000;
  static constexpr size_t kRowsPerPeer = 64, kRowLen = 128;
  static constexpr size_t kSparseRows = 512, kSparseRowLen = 32;
  static constexpr size_t kGatherCount = 20000;

  bool ok(spcclResult_t r, const char* what) {
    if (r == spcclSuccess) return true;
    if (errors++ == 0) firstError = std::string(what) + ": " + spcclGetErrorString(r) + ": " + spcclGetLastError(comm);
    return false;
  }

  void createSlot(Slot& s) {
    ok(spcclCompressorCreate(comm, s.count, spcclFloat32, &s.config, &s.compressor), "create");
  }

  bool init() {
    if (!ok(spcclCommInitMPI(&comm, MPI_COMM_WORLD), "spcclCommInitMPI")) return false;
    const size_t counts[4] = {1000, 20000, 60000, kMaxCount};
    const float densities[3] = {0.001f, 0.01f, 0.1f};
    const int algorithms[3] = {SPCCL_ALGO_AUTO, SPCCL_ALGO_ALLGATHER, SPCCL_ALGO_SPLIT};
    const spcclDataType_t wires[3] = {spcclFloat32, spcclFloat16, spcclBfloat16};
    for (int i = 0; i < 12; ++i) {
      Slot s;
      s.count = counts[i % 4];
      if (!ok(spcclCompressConfigInit(&s.config), "spcclCompressConfigInit")) return false;
      s.config.density = densities[i % 3];
      s.config.algorithm = algorithms[(i / 3) % 3];
      s.config.wireValueType = wires[(i / 4) % 3];
      s.config.thresholdInterval = 1 + i % 4 * 50;  // 1, 51, 101, 151
      slots.push_back(s);
      createSlot(slots.back());
    }
    std::mt19937 g(static_cast<unsigned>(1000 + gRank));
    std::normal_distribution<float> n(0.0f, 1.0f);
    send.resize(kMaxCount);
    for (float& x : send) x = n(g);
    recv.resize(kMaxCount);
    dropA.resize(kDropCount);
    dropB.resize(kDropCount);
    const size_t rowsElems = static_cast<size_t>(gRanks) * kRowsPerPeer * kRowLen;
    rowsIn.resize(rowsElems);
    for (float& x : rowsIn) x = n(g);
    rowsOut.resize(rowsElems);
    grad.resize(rowsElems);
    gradOut.resize(rowsElems);
    ids.resize(kSparseRows);
    outIds.resize(kSparseRows * static_cast<size_t>(gRanks));
    gathered.resize(std::max(kGatherCount * static_cast<size_t>(gRanks), outIds.size() * kSparseRowLen));
    return errors == 0;
  }

  // One call of kind `kind` (0..17), with `r` a per-call random number equal on every rank.
  void call(int kind, uint64_t r) {
    ++calls;
    if (kind < 12) {
      Slot& s = slots[static_cast<size_t>(kind)];
      // A different window of the input each call (a gradient changes every step).
      const size_t off = static_cast<size_t>(r % (kMaxCount - s.count + 1));
      if (ok(spcclAllReduceCompressed(send.data() + off, recv.data(), spcclSum, s.compressor, nullptr),
             "spcclAllReduceCompressed"))
        lastHash = fnv1a(recv.data(), s.count * sizeof(float));
    } else if (kind == 12 || kind == 13) {
      std::vector<float>& buf = kind == 12 ? dropA : dropB;
      std::memcpy(buf.data(), send.data() + (r % 1000), kDropCount * sizeof(float));
      if (ok(spcclAllReduce(buf.data(), buf.data(), kDropCount, spcclFloat32, spcclSum, comm, nullptr),
             "spcclAllReduce (drop-in, in place)"))
        lastHash = fnv1a(buf.data(), kDropCount * sizeof(float));
    } else if (kind == 14) {
      spcclSelection_t sel = nullptr;
      const float density = (r & 1) ? 0.0625f : 0.25f;
      if (ok(spcclAlltoAllRowsCompressed(rowsIn.data(), rowsOut.data(), kRowsPerPeer, kRowLen, spcclFloat32, density,
                                         &sel, comm, nullptr),
             "spcclAlltoAllRowsCompressed")) {
        ok(spcclAlltoAllRowsBackward(rowsOut.data(), gradOut.data(), sel, nullptr), "spcclAlltoAllRowsBackward");
        ok(spcclSelectionDestroy(sel), "spcclSelectionDestroy");
        // Each rank receives other blocks: not compared across ranks (lastHash kept).
        rowsHash ^= fnv1a(gradOut.data(), gradOut.size() * sizeof(float));
      }
    } else if (kind == 15) {
      for (size_t i = 0; i < kSparseRows; ++i)
        ids[i] = static_cast<int64_t>((r + i * 13 + static_cast<uint64_t>(gRank) * 7) % 2000);
      size_t outN = 0;
      if (ok(spcclAllReduceRowSparse(ids.data(), rowsIn.data(), kSparseRows, kSparseRowLen, spcclFloat32, outIds.data(),
                                     gathered.data(), outIds.size(), &outN, comm, nullptr),
             "spcclAllReduceRowSparse"))
        lastHash = fnv1a(gathered.data(), outN * kSparseRowLen * sizeof(float));
    } else if (kind == 16) {
      if (ok(spcclAllGather(send.data() + r % 100, gathered.data(), kGatherCount, spcclFloat32, comm, nullptr),
             "spcclAllGather"))
        lastHash = fnv1a(gathered.data(), kGatherCount * static_cast<size_t>(gRanks) * sizeof(float));
    } else {  // churn: a compressor destroyed and made again (local, no communication)
      Slot& s = slots[static_cast<size_t>(r % slots.size())];
      ok(spcclCompressorDestroy(s.compressor), "spcclCompressorDestroy");
      s.compressor = nullptr;
      createSlot(s);
    }
  }

  static constexpr int kKinds = 18;

  // Every kind on every shape, in order (the warm-up and the cycle end).
  void everyKind(uint64_t r) {
    for (int k = 0; k < kKinds; ++k) call(k, r + static_cast<uint64_t>(k));
  }

  // Ranks agree on the last output (collective).
  bool ranksAgree() {
    uint64_t mm[2] = {lastHash, ~lastHash};
    MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return mm[0] == ~mm[1];
  }

  void destroy() {
    for (Slot& s : slots)
      if (s.compressor) ok(spcclCompressorDestroy(s.compressor), "spcclCompressorDestroy");
    ok(spcclCommDestroy(comm), "spcclCommDestroy");
  }
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--calls") o->calls = std::strtoull(v, nullptr, 10);
    else if (a == "--warmup") o->warmup = std::strtoull(v, nullptr, 10);
    else if (a == "--progress") o->progress = std::strtoull(v, nullptr, 10);
    else if (a == "--check") o->check = std::strtoull(v, nullptr, 10);
    else if (a == "--max-growth") o->maxGrowthPct = std::strtod(v, nullptr);
    else if (a == "--seed") o->seed = std::strtoull(v, nullptr, 10);
    else if (a == "--deliberate-leak") o->leakBytes = std::strtoull(v, nullptr, 10);
    else return false;
  }
  return o->calls > 0 && o->progress > 0 && o->check > 0;
}

// Max and min over ranks.
void minMax(uint64_t v, uint64_t* lo, uint64_t* hi) {
  uint64_t mm[2] = {v, ~v};
  MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  *hi = mm[0];
  *lo = ~mm[1];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gRanks);
  Soak s;
  if (!parse(argc, argv, &s.opts)) {
    if (gRank == 0)
      std::fprintf(stderr,
                   "usage: soak [--calls N] [--warmup N] [--progress N] [--check N] [--max-growth PCT] "
                   "[--seed S] [--deliberate-leak BYTES]\n");
    MPI_Finalize();
    return 2;
  }
  const Options& o = s.opts;
  bool good = s.init();
  std::mt19937_64 draw(o.seed);  // same seed on every rank: same call sequence
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();

  // Warm-up: every kind twice (or --warmup random calls after that).
  if (good) {
    s.everyKind(draw());
    s.everyKind(draw());
    for (uint64_t i = 0; i < o.warmup; ++i) s.call(static_cast<int>(draw() % Soak::kKinds), draw());
    s.everyKind(draw());  // the cycle end: the same objects alive as at the end
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const uint64_t rawStart = residentBytes(false);
  const uint64_t rssStart = residentBytes();
  uint64_t lo, hi;
  minMax(rssStart, &lo, &hi);
  if (gRank == 0)
    std::printf(
        "# soak: %d ranks, %llu calls after a warm-up of %llu, seed %llu; RSS after warm-up %.2f-%.2f MiB "
        "(min-max over ranks)\n",
        gRanks, static_cast<unsigned long long>(o.calls), static_cast<unsigned long long>(s.calls),
        static_cast<unsigned long long>(o.seed), lo / 1048576.0, hi / 1048576.0);
  uint64_t disagreements = 0;
  const auto t1 = Clock::now();
  for (uint64_t i = 1; i <= o.calls && good; ++i) {
    const uint64_t k = draw(), r = draw();
    s.call(static_cast<int>(k % Soak::kKinds), r);
    if (o.leakBytes > 0) {  // never freed, and touched so that it is resident
      auto* lost = static_cast<char*>(std::malloc(o.leakBytes));
      if (lost != nullptr) std::memset(lost, static_cast<int>(i & 0xFF) | 1, o.leakBytes);
    }
    if (i % o.check == 0 && !s.ranksAgree()) ++disagreements;
    if (i % o.progress == 0 || i == o.calls) {
      uint64_t errs = s.errors, errLo, errHi, rLo, rHi;
      minMax(errs, &errLo, &errHi);
      minMax(residentBytes(), &rLo, &rHi);
      const double secs = std::chrono::duration<double>(Clock::now() - t1).count();
      if (gRank == 0)
        std::printf(
            "calls %8llu/%llu  %7.1f s  %7.0f calls/s  RSS %.2f-%.2f MiB  errors %llu  rank disagreements "
            "%llu\n",
            static_cast<unsigned long long>(i), static_cast<unsigned long long>(o.calls), secs, i / secs,
            rLo / 1048576.0, rHi / 1048576.0, static_cast<unsigned long long>(errHi),
            static_cast<unsigned long long>(disagreements));
      std::fflush(stdout);
      if (errHi > 0) good = false;  // every rank stops at the same call
    }
  }
  // Same point of the cycle as the start measurement.
  if (good) s.everyKind(draw());
  MPI_Barrier(MPI_COMM_WORLD);
  const uint64_t rawEnd = residentBytes(false);
  const uint64_t rssEnd = residentBytes();
  double rawGrowth = 100.0 * (static_cast<double>(rawEnd) - static_cast<double>(rawStart)) /
                     static_cast<double>(rawStart ? rawStart : 1);
  MPI_Allreduce(MPI_IN_PLACE, &rawGrowth, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  const double growthPct = 100.0 * (static_cast<double>(rssEnd) - static_cast<double>(rssStart)) /
                           static_cast<double>(rssStart ? rssStart : 1);
  double worst = growthPct;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  uint64_t totalErrors = s.errors;
  MPI_Allreduce(MPI_IN_PLACE, &totalErrors, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (s.errors > 0) std::fprintf(stderr, "[rank %d] first error: %s\n", gRank, s.firstError.c_str());
  spcclStats_t st{};
  spcclCommGetStats(s.comm, &st);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  minMax(rssEnd, &lo, &hi);
  const bool pass = good && totalErrors == 0 && disagreements == 0 && worst <= o.maxGrowthPct;
  if (gRank == 0) {
    std::printf(
        "# soak: %llu calls (%llu in the warm-up and cycle ends), %llu collectives on the communicator "
        "(%llu compressed), %.1f s\n",
        static_cast<unsigned long long>(s.calls), static_cast<unsigned long long>(s.calls - o.calls),
        static_cast<unsigned long long>(st.calls), static_cast<unsigned long long>(st.compressedCalls), secs);
    std::printf(
        "# soak: RSS at end %.2f-%.2f MiB, largest growth over ranks %+.3f%% (bound %.2f%%; before "
        "malloc_trim %+.3f%%), errors %llu, rank disagreements %llu: %s\n",
        lo / 1048576.0, hi / 1048576.0, worst, o.maxGrowthPct, rawGrowth, static_cast<unsigned long long>(totalErrors),
        static_cast<unsigned long long>(disagreements), pass ? "PASS" : "FAIL");
  }
  s.destroy();
  MPI_Finalize();
  return pass ? 0 : 1;
}
