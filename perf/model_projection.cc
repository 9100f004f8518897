// A model, not a measurement: the allreduce cost model of collectives/cost_model.cc (the
// code SPCCL_ALGO=auto runs) evaluated for a GPU cluster, printed as the
// markdown table docs/PERF.md shows. Every number is modelSeconds() of the
// library itself with the parameters given here; nothing is timed.
//
//   build/perf/model_projection                 # the docs/PERF.md table
//   build/perf/model_projection --select-tbps 2 --latency-us 10 --count 16M --density 0.01
#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "include/spccl.h"
#include "codec/codec.h"
#include "src/tuner.h"
#include "size_arg.h"

namespace {

struct Options {
  // The bandwidth the selection and unpack reach: by default selectPack's on an
  // H200 (perf/gpu/kernel_bench, 64 Mi floats, density 0.01:
  // 810.7 MB counted in 482 us, 42% of the 4.0 TB/s device-to-device copy of
  // the same run; docs/PERF.md, "CUDA kernels on an H200").
  double selectTBps = 1.68;
  bool selectGiven = false;
  double latencyUs = 5.0;               // assumed latency per message round
  uint64_t count = uint64_t{64} << 20;  // fp32 gradient elements (256 MiB)
  std::vector<double> densities = {0.01, 0.001};
  std::vector<double> linksGbps = {100, 200, 400};
  std::vector<int> ranks = {8, 64, 256, 1024};
  unsigned wireBytes = 4;
};

std::vector<double> parseList(const char* s) {
  std::vector<double> out;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    out.push_back(std::strtod(p, &end));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--select-tbps T] [--latency-us L] [--count N[K|M|G]] [--density d1,d2]\n"
               "          [--links g1,g2] [--ranks p1,p2] [--wire 4|2]\n",
               argv0);
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, seconds < 0.1 ? "%.2f" : "%.1f", seconds * 1e3);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace spccl;
  Options o;
  const option longOpts[] = {{"select-tbps", required_argument, nullptr, 's'},
                             {"latency-us", required_argument, nullptr, 'l'},
                             {"count", required_argument, nullptr, 'n'},
                             {"density", required_argument, nullptr, 'd'},
                             {"links", required_argument, nullptr, 'g'},
                             {"ranks", required_argument, nullptr, 'p'},
                             {"wire", required_argument, nullptr, 'w'},
                             {"help", no_argument, nullptr, 'h'},
                             {nullptr, 0, nullptr, 0}};
  for (int c; (c = getopt_long(argc, argv, "h", longOpts, nullptr)) != -1;) {
    switch (c) {
      case 's':
        o.selectTBps = std::atof(optarg);
        o.selectGiven = true;
        break;
      case 'l':
        o.latencyUs = std::atof(optarg);
        break;
      case 'n': {  // 0 (refused below) when it is not a count
        size_t count = 0;
        o.count = spccl::perf::parseSizeArg(optarg, &count) ? count : 0;
        break;
      }
      case 'd':
        o.densities = parseList(optarg);
        break;
      case 'g':
        o.linksGbps = parseList(optarg);
        break;
      case 'p': {
        o.ranks.clear();
        for (double v : parseList(optarg)) o.ranks.push_back(static_cast<int>(v));
        break;
      }
      case 'w':
        o.wireBytes = static_cast<unsigned>(std::atoi(optarg));
        break;
      default:
        usage(argv[0]);
        return c == 'h' ? 0 : 2;
    }
  }
  if (o.selectTBps <= 0 || o.latencyUs < 0 || o.count == 0 || (o.wireBytes != 2 && o.wireBytes != 4)) {
    usage(argv[0]);
    return 2;
  }
  std::printf(
      "Model inputs: %llu fp32 elements (%.0f MiB) per rank, %s wire values, selection and unpack at "
      "%.2f TB/s (%s), %.1f us per message round (assumed), one link of the given rate per rank.\n\n",
      static_cast<unsigned long long>(o.count), static_cast<double>(o.count) * 4 / (1 << 20),
      o.wireBytes == 2 ? "fp16" : "fp32", o.selectTBps, o.selectGiven ? "given" : "selectPack measured on an H200",
      o.latencyUs);
  std::printf(
      "| density | ranks | link (Gbit/s) | dense (ms) | allgather (ms) | split (ms) | auto picks | "
      "dense / auto | wire MB per rank: dense / auto | split without re-selection (ms) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (double d : o.densities) {
    for (int p : o.ranks) {
      for (double g : o.linksGbps) {
        CostModel m = applyNetworkParams({}, g, o.latencyUs);
        m.gammaSelect = m.gammaUnpack = 1.0 / (o.selectTBps * 1e12);
        const uint64_t k = static_cast<uint64_t>(std::ceil(d * static_cast<double>(o.count)));
        // The library's defaults: index encoding auto, split re-selecting to
        // ceil(k/P) pairs per owner (SPCCL_SPLIT_RESELECT=1).
        CostInputs in{p, o.count, k, 4, o.wireBytes, -1, kIndexEncodingAuto};
        in.keepPerRange = std::ceil(static_cast<double>(k) / p);
        const double dense = modelSeconds(SPCCL_ALGO_DENSE, in, m);
        const double ag = modelSeconds(SPCCL_ALGO_ALLGATHER, in, m);
        const double split = modelSeconds(SPCCL_ALGO_SPLIT, in, m);
        const int pick = chooseAlgorithm(in, m);
        const double best = modelSeconds(pick, in, m);
        CostInputs whole = in;  // SPCCL_SPLIT_RESELECT=0: owners send the union of their range
        whole.keepPerRange = 0;
        std::printf("| %g | %d | %g | %s | %s | %s | %s | %.1fx | %.0f / %.1f | %s |\n", d, p, g, ms(dense).c_str(),
                    ms(ag).c_str(), ms(split).c_str(), algorithmName(pick), dense / best,
                    modelBytes(SPCCL_ALGO_DENSE, in) / 1e6, modelBytes(pick, in) / 1e6,
                    ms(modelSeconds(SPCCL_ALGO_SPLIT, whole, m)).c_str());
      }
    }
  }
  return 0;
}
