// auto_compare: the three fixed allreduce algorithms (dense, allgather,
// split), SPCCL_ALGO=auto and a plain MPI_Allreduce on the same data in one
// process, their calls interleaved, so that auto is compared with the fixed
// algorithms side by side under the same load (perf/grid.py --interleaved).
// Separate mpiruns per algorithm, as allreduce_perf -a measures them, differ
// by tens of percent from run to run on a shared or oversubscribed machine;
// here every iteration runs each contender once, on the same input, in an
// order shuffled afresh each iteration (the same on every rank).
//
//   mpirun -np 4 build/perf/auto_compare -b 1M -D 0.01 -n 50 -w 29 -J out.json
//
// Each contender has its own compressor (its own residual and threshold), as
// a separate run would. -w warm-up iterations come first (auto's trials,
// SPCCL_AUTO_TRIALS, happen in them when it is set), then -n timed ones; a
// call's time is the slowest rank's, after a barrier; the median is reported.
// Output (rank 0): one line per contender with its median time, bytes sent
// per rank and call, auto's settled algorithm and the threshold re-estimations
// during the timed calls; -J writes the same as JSON. -T 1 adds "dense2", a
// second fixed dense compressor: dense2 / dense is the spread between two
// identical contenders, the floor under any ratio this run reports. -C names
// the contenders to run (a comma list of dense, allgather, split, auto, mpi;
// default all): "-C auto,split,mpi" holds two compressors' state instead of
// four, for buffers where four do not fit (perf/grid.py --pairs).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "size_arg.h"

namespace spccl::perf {
namespace {

struct Args {
  size_t bytes = size_t{1} << 20;
  float density = 0.01f;
  int iters = 20;
  int warmup = 29;
  bool twin = false;
  std::string json;
  std::string contenders = "dense,allgather,split,auto,mpi";
};

// why NULL: -h, the usage alone on stdout and exit status 0; else the reason
// and the usage on stderr, status 2.
[[noreturn]] void usage(int rank, const char* why) {
  if (rank == 0) {
    if (why != nullptr) std::fprintf(stderr, "auto_compare: %s\n", why);
    std::fprintf(why != nullptr ? stderr : stdout,
                 "usage: auto_compare [-b SIZE] [-D density] [-n iters] [-w warmup] [-T 0|1] [-C names] [-J file]\n"
                 "  -b  bytes per rank (fp32; K/M/G suffixes, default 1M), -D  density (0, 1], default 0.01\n"
                 "  -n  timed iterations (default 20), -w  warm-up iterations (default 29)\n"
                 "  -T 1  adds dense2, a second fixed dense compressor: its ratio to dense is the\n"
                 "        spread between two identical contenders, the comparison's noise floor\n"
                 "  -C  the contenders, a comma list of dense, allgather, split, auto, mpi (default all)\n"
                 "  -J  also write the results as JSON to this file (rank 0)\n"
                 "  -h  this text\n");
  }
  MPI_Finalize();
  std::exit(why != nullptr ? 2 : 0);
}

Args parse(int argc, char** argv, int rank) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage(rank, nullptr);
    static const char* const kFlags[] = {"-b", "-D", "-n", "-w", "-T", "-J", "-C"};
    if (std::find(std::begin(kFlags), std::end(kFlags), flag) == std::end(kFlags))
      usage(rank, ("unknown flag " + flag).c_str());
    if (i + 1 >= argc) usage(rank, ("missing value after " + flag).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    if (flag == "-b") {
      if (!parseSizeArg(v, &a.bytes) || a.bytes < 4) usage(rank, "-b wants a size of at least 4 bytes");
    } else if (flag == "-D") {
      a.density = std::strtof(v, &end);
      if (*end != '\0' || !(a.density > 0.0f && a.density <= 1.0f)) usage(rank, "-D wants a density in (0, 1]");
    } else if (flag == "-n" || flag == "-w") {
      const long n = std::strtol(v, &end, 10);
      if (*end != '\0' || n < (flag == "-n" ? 1 : 0) || n > 1000000) usage(rank, (flag + " wants a count").c_str());
      (flag == "-n" ? a.iters : a.warmup) = static_cast<int>(n);
    } else if (flag == "-T") {
      if (std::strcmp(v, "0") != 0 && std::strcmp(v, "1") != 0) usage(rank, "-T wants 0 or 1");
      a.twin = v[0] == '1';
    } else if (flag == "-J") {
      a.json = v;
    } else if (flag == "-C") {
      a.contenders = v;
    } else {
      usage(rank, ("unknown flag " + flag).c_str());
    }
  }
  return a;
}

struct Contender {
  Contender(const char* n, int a) : name(n), algorithm(a) {}
  const char* name;
  int algorithm;  // SPCCL_ALGO_*, or -1 for the plain MPI_Allreduce
  spcclCompressor_t compressor = nullptr;
  std::vector<double> times;
  spcclStats_t before{}, after{};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

int run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Args args = parse(argc, argv, rank);
  const size_t count = args.bytes / sizeof(float);

  spcclComm_t comm = nullptr;
  SPCCL_PERF_CHECK(spcclCommInitMPI(&comm, MPI_COMM_WORLD));
  std::vector<float> send(count), recv(count);
  fillGaussian(send.data(), count, spcclFloat32, static_cast<uint64_t>(rank));

  const std::vector<Contender> known = {{"dense", SPCCL_ALGO_DENSE},
                                        {"allgather", SPCCL_ALGO_ALLGATHER},
                                        {"split", SPCCL_ALGO_SPLIT},
                                        {"auto", SPCCL_ALGO_AUTO},
                                        {"mpi", -1}};
  std::vector<Contender> all;
  for (size_t at = 0; at <= args.contenders.size();) {
    const size_t comma = std::min(args.contenders.find(',', at), args.contenders.size());
    const std::string name = args.contenders.substr(at, comma - at);
    at = comma + 1;
    const auto it = std::find_if(known.begin(), known.end(), [&](const Contender& c) { return name == c.name; });
    if (it == known.end()) usage(rank, ("-C: unknown contender '" + name + "'").c_str());
    if (std::any_of(all.begin(), all.end(), [&](const Contender& c) { return name == c.name; }))
      usage(rank, ("-C: " + name + " twice").c_str());
    all.push_back(*it);
  }
  if (args.twin) all.emplace_back("dense2", SPCCL_ALGO_DENSE);
  for (Contender& c : all) {
    if (c.algorithm < 0) continue;
    spcclCompressConfig_t config;
    SPCCL_PERF_CHECK(spcclCompressConfigInit(&config));
    config.density = args.density;
    config.algorithm = c.algorithm;
    SPCCL_PERF_CHECK(spcclCompressorCreate(comm, count, spcclFloat32, &config, &c.compressor));
  }
  const auto call = [&](Contender& c) {
    if (c.compressor)
      SPCCL_PERF_CHECK(spcclAllReduceCompressed(send.data(), recv.data(), spcclSum, c.compressor, nullptr));
    else MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };

  const size_t n = all.size();
  for (int it = 0; it < args.warmup + args.iters; ++it) {
    flipSigns(send.data(), count, spcclFloat32, static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(it));
    const bool timed = it >= args.warmup;
    if (it == args.warmup)
      for (Contender& c : all)
        if (c.compressor) SPCCL_PERF_CHECK(spcclCompressorGetStats(c.compressor, &c.before));
    // A fresh order every iteration, the same on every rank (a seeded shuffle):
    // each contender follows each other one alike, so none always runs right
    // after the one that leaves the caches coldest.
    std::vector<size_t> order(n);
    for (size_t j = 0; j < n; ++j) order[j] = j;
    std::mt19937 shuffle(0x5eedu + static_cast<unsigned>(it));
    std::shuffle(order.begin(), order.end(), shuffle);
    for (size_t j = 0; j < n; ++j) {
      Contender& c = all[order[j]];
      if (!timed) {
        call(c);
        continue;
      }
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      call(c);
      double seconds = MPI_Wtime() - start;
      MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      c.times.push_back(seconds);
    }
  }

  FILE* json = nullptr;
  if (rank == 0 && !args.json.empty()) {
    json = std::fopen(args.json.c_str(), "w");
    if (!json) std::fprintf(stderr, "auto_compare: cannot write %s\n", args.json.c_str());
  }
  if (rank == 0) {
    std::printf(
        "# auto_compare: %d ranks, %zu bytes per rank, density %g, %d warm-up + %d timed iterations, "
        "contenders interleaved\n#%10s %12s %14s %10s %12s\n",
        ranks, args.bytes, static_cast<double>(args.density), args.warmup, args.iters, "contender", "median (us)",
        "bytes/call", "algorithm", "tau updates");
  }
  if (json)
    std::fprintf(json,
                 "{\"ranks\": %d, \"bytes\": %zu, \"density\": %g, \"iters\": %d, \"warmup\": %d,\n"
                 " \"contenders\": [",
                 ranks, args.bytes, static_cast<double>(args.density), args.iters, args.warmup);
  for (size_t i = 0; i < n; ++i) {
    Contender& c = all[i];
    double bytesPerCall = static_cast<double>(args.bytes) * 2.0 * (ranks - 1) / ranks;  // MPI: a ring's bytes
    std::string algorithm = "mpi";
    uint64_t updates = 0;  // threshold re-estimations during the timed calls
    if (c.compressor) {
      SPCCL_PERF_CHECK(spcclCompressorGetStats(c.compressor, &c.after));
      bytesPerCall = static_cast<double>(c.after.bytesSent - c.before.bytesSent) / args.iters;
      algorithm = std::string(allreduceAlgorithmName(c.after.lastAlgorithm));
      updates = c.after.thresholdUpdates - c.before.thresholdUpdates;
    }
    const double us = 1e6 * median(c.times);
    if (rank == 0)
      std::printf(" %10s %12.1f %14.0f %10s %12llu\n", c.name, us, bytesPerCall, algorithm.c_str(),
                  static_cast<unsigned long long>(updates));
    if (json)
      std::fprintf(json,
                   "%s\n  {\"name\": \"%s\", \"time_us\": %.3f, \"bytes_per_call\": %.0f, \"algo\": \"%s\", "
                   "\"tau_updates\": %llu}",
                   i ? "," : "", c.name, us, bytesPerCall, algorithm.c_str(), static_cast<unsigned long long>(updates));
  }
  if (json) {
    std::fprintf(json, "\n ]}\n");
    std::fclose(json);
  }
  for (Contender& c : all)
    if (c.compressor) SPCCL_PERF_CHECK(spcclCompressorDestroy(c.compressor));
  SPCCL_PERF_CHECK(spcclCommDestroy(comm));
  return 0;
}

}  // namespace
}  // namespace spccl::perf

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int rc = spccl::perf::run(argc, argv);
  MPI_Finalize();
  return rc;
}
