#include "src/tuner.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

#include "collectives/algorithms.h"
#include "include/spccl.h"
#include "kernels/host/host_kernels.h"
#include "codec/codec.h"
#include "kernels/host/sections.h"
#include "src/log.h"
#include "src/params.h"
#include "transport/transport.h"

namespace spccl {

std::vector<int> trialCandidates(const CostInputs& in, const CostModel& m) {
  // By modelled time, ties in chooseAlgorithm's order (the table's tieOrder).
  std::vector<std::tuple<double, int, int>> order;  // seconds, tieOrder, id
  for (const AllreduceAlgorithm& a : allreduceAlgorithms())
    if (a.supports(AllreduceRequest{in.onDevice})) order.emplace_back(modelSeconds(a.id, in, m), a.tieOrder, a.id);
  std::sort(order.begin(), order.end());
  const double limit = kTrialPruneFactor * std::get<0>(order.front());
  std::vector<int> out;
  for (const auto& [seconds, tie, a] : order)
    if (a == std::get<2>(order.front()) || seconds <= limit) out.push_back(a);
  // The exact algorithm first: a tie of measured times goes to it.
  std::stable_partition(out.begin(), out.end(), [](int a) { return !findAllreduceAlgorithm(a)->sparse; });
  return out;
}

int pickMeasured(const std::vector<int>& candidates, const float* seconds) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!std::isfinite(seconds[i])) continue;
    if (!found || seconds[i] < seconds[best]) best = i;
    found = true;
  }
  return candidates.empty() ? SPCCL_ALGO_ALLGATHER : candidates[best];
}

TrialCall trialCall(size_t call, size_t candidates, size_t trials) {
  const size_t c = candidates;
  const size_t first = trialFirstBlock(trials);    // warm-ups, then ceil(T/2) counted
  const size_t second = trialSecondBlock(trials);  // a lead-in, then floor(T/2) counted
  if (c == 0) return {0, false};
  if (call < c * first) return {call / first, call % first >= kTrialWarmupCalls};
  const size_t j = call - c * first;
  if (second == 0 || j >= c * second) return {0, false};  // past the schedule
  return {c - 1 - j / second, j % second >= 1};
}

std::vector<float> trialMedians(const std::vector<float>& times, size_t candidates, size_t trials) {
  const size_t c = candidates;
  std::vector<std::vector<float>> per(c);
  for (size_t i = 0; i < times.size() && i < c * trialCallsPerCandidate(trials); ++i) {
    const TrialCall t = trialCall(i, c, trials);
    if (t.counted) per[t.slot].push_back(times[i]);
  }
  const auto order = [](float x, float y) { return std::isnan(y) ? !std::isnan(x) : x < y; };  // NaN last
  std::vector<float> out(c, std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < c; ++i) {
    std::vector<float>& v = per[i];
    if (v.empty()) continue;
    std::sort(v.begin(), v.end(), order);
    const size_t n = v.size();
    out[i] = n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
  }
  return out;
}
// ---------------------------------------------------------------- parameter sources

CostModel applyNetworkParams(CostModel m, double gbps, double latencyUs) {
  if (gbps > 0) m.beta = 8.0 / (gbps * 1e9);
  if (latencyUs > 0) m.alpha = latencyUs * 1e-6;
  return m;
}

std::string calibrationCacheDir(const std::function<const char*(const char*)>& env) {
  const char* xdg = env("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/spccl";  // the XDG spec ignores relative paths
  const char* home = env("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.cache/spccl";
  return "";
}

std::string hostSetKey(std::vector<std::string> hosts, int ranks) {
  // FNV-1a over the sorted names: the same set of hosts (with as many ranks
  // on each) gives the same key whatever the rank order.
  std::sort(hosts.begin(), hosts.end());
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const std::string& s) {
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // separator: {"ab","c"} != {"a","bc"}
  };
  for (const std::string& s : hosts) mix(s);
  mix(std::to_string(ranks));
  return formatString("%016llx", static_cast<unsigned long long>(h));
}

std::string calibrationCachePath(const std::string& dir, const std::string& key, int ranks) {
  if (dir.empty()) return "";
  return formatString("%s/calibration-%s-np%d.txt", dir.c_str(), key.c_str(), ranks);
}

namespace {
constexpr const char* kCacheMagic = "spccl-cost-model";
constexpr int kCacheVersion = 2;  // 2: unpack_s_per_byte of host::reduceSections (blocked), not of memset and scatter
constexpr off_t kCacheMaxBytes = 4096;  // the file spccl writes is about 200 bytes

bool validModel(const CostModel& m) {
  for (double v : {m.alpha, m.beta, m.gammaSelect, m.gammaUnpack})
    if (!std::isfinite(v) || v < 0 || v > 1.0) return false;  // > 1 s per byte or round: corrupt
  // alpha and beta are always measured, and an allgather takes time: 0 (or
  // a denormal) would model a free network, not a fast one.
  return std::isnormal(m.alpha) && std::isnormal(m.beta);
}

bool makeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st {};
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
}  // namespace

bool readCalibrationCache(const std::string& path, const std::string& key, int ranks, CostModel* out) {
  if (path.empty()) return false;
  // Only a small regular file: open() of a FIFO would block for ever (and
  // the other ranks with it), and a huge file or a link to a device would be
  // read whole into memory. O_NONBLOCK keeps the open itself from waiting.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  std::string text;
  const bool readable = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kCacheMaxBytes;
  if (readable) {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t r = ::read(fd, &text[got], text.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    text.resize(got);
  }
  ::close(fd);
  if (!readable) return false;
  std::istringstream f(text);
  std::string magic, fileKey, field;
  int version = 0, fileRanks = 0;
  CostModel m;
  if (!(f >> magic >> version) || magic != kCacheMagic || version != kCacheVersion) return false;
  int seen = 0;
  while (f >> field) {
    if (field == "key") {
      if (!(f >> fileKey)) return false;
      seen |= 1;
    } else if (field == "ranks") {
      if (!(f >> fileRanks)) return false;
      seen |= 2;
    } else {
      double v = 0;
      if (!(f >> v)) return false;
      if (field == "alpha_s") {
        m.alpha = v;
        seen |= 4;
      } else if (field == "beta_s_per_byte") {
        m.beta = v;
        seen |= 8;
      } else if (field == "select_s_per_byte") {
        m.gammaSelect = v;
        seen |= 16;
      } else if (field == "unpack_s_per_byte") {
        m.gammaUnpack = v;
        seen |= 32;
      }
    }
  }
  if (seen != 63 || fileKey != key || fileRanks != ranks || !validModel(m)) return false;
  *out = m;
  return true;
}

bool writeCalibrationCache(const std::string& path, const std::string& key, int ranks, const CostModel& m) {
  if (path.empty()) return false;
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || !makeDirs(path.substr(0, slash))) return false;
  const std::string tmp = formatString("%s.tmp.%ld", path.c_str(), static_cast<long>(::getpid()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return false;
    f << kCacheMagic << ' ' << kCacheVersion << '\n' << "key " << key << '\n' << "ranks " << ranks << '\n';
    f << formatString("alpha_s %.17g\nbeta_s_per_byte %.17g\nselect_s_per_byte %.17g\nunpack_s_per_byte %.17g\n",
                      m.alpha, m.beta, m.gammaSelect, m.gammaUnpack);
    f.flush();
    if (!f) {
      ::unlink(tmp.c_str());
      return false;
    }
  }
  // rename is atomic: a concurrent reader sees the old file or the new one.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The minimum of repeated timings: what the machine can do. Medians were
// tried first; on the shared 2-core development machine they moved by 10x
// between runs with the load, and the wire and local parameters moved
// independently of each other, flipping auto's choice at random.
double fastest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

// Fastest of `reps` allgathers of `bytes` per rank (after one warm-up), each
// started right after a small allgather so the ranks start together.
Status timeAllGather(Transport& t, size_t bytes, int reps, double* seconds) {
  std::vector<unsigned char> send(bytes, 0x5a), recv(bytes * static_cast<size_t>(t.size()));
  uint64_t token = 0;
  std::vector<uint64_t> tokens(static_cast<size_t>(t.size()));
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    SPCCL_RETURN_IF_ERROR(t.allGather(&token, sizeof token, tokens.data()));
    const Clock::time_point t0 = Clock::now();
    SPCCL_RETURN_IF_ERROR(t.allGather(send.data(), bytes, recv.data()));
    if (i > 0) times.push_back(since(t0));
  }
  *seconds = fastest(times);
  return Status::ok();
}

// Seconds per byte of the fused selection pass and of the accumulation, on
// Gaussian-like data at about 1% density: the minimum of a few passes.
void timeLocalPasses(int rank, double* selectPerByte, double* unpackPerByte) {
  // 8M floats (32 MiB an array): past the caches, as the buffers worth
  // compressing are, so the rates are memory's, not the cache's.
  constexpr size_t n = size_t{1} << 23;
  constexpr size_t capacity = n / 32;
  std::vector<float> send(n), resIn(n), resOut(n), acc(n);
  std::vector<uint32_t> indices(capacity);
  std::vector<float> values(capacity);
  uint64_t s = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(rank + 1);
  auto uniform = [&s]() {  // xorshift64*: cheap, deterministic
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return static_cast<float>((s * 2685821657736338717ull) >> 40) * (1.0f / 16777216.0f);
  };
  for (size_t i = 0; i < n; ++i) {
    // Sum of four uniforms, scaled to unit variance: close enough to Gaussian.
    send[i] = (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f;
    resIn[i] = 0.1f * (uniform() - 0.5f);
  }
  host::SelectArgs a{send.data(),
                     spcclFloat32,
                     resIn.data(),
                     resOut.data(),
                     n,
                     core::magnitudeKey(2.5f),
                     std::numeric_limits<uint64_t>::max(),
                     capacity,
                     core::ValueType::kFloat32,
                     indices.data(),
                     values.data()};
  std::vector<double> selectTimes, unpackTimes;
  std::vector<unsigned char> stream;
  std::vector<host::PairCursor> cursors;
  uint64_t nnz = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const Clock::time_point t0 = Clock::now();
    nnz = std::min<uint64_t>(host::selectPack(a).selected, capacity);
    selectTimes.push_back(since(t0));
    // The selection as a received stream (32-bit indices, fp32 values),
    // summed into the zeroed output the way the collectives do.
    StreamInfo info{n, 0, n, nnz, 0, SPCCL_ALGO_ALLGATHER, core::ValueType::kFloat32, StreamKind::kPairs};
    stream.resize(pairsStreamBytes(nnz, info.valueType));
    encodePairs(stream.data(), info, indices.data(), values.data());
    StreamView view{};
    const StreamExpect expect{n, 0, n, 0, SPCCL_ALGO_ALLGATHER, info.valueType, false};
    if (!parseStream(stream.data(), stream.size(), expect, rank, &view).isOk()) continue;  // cannot happen
    const Clock::time_point t1 = Clock::now();
    const WireSection section = view;
    host::reduceSections(&section, 1, acc.data(), 0, &cursors);
    unpackTimes.push_back(since(t1));
  }
  // Per byte as modelTerms counts them, so the model's terms times these
  // rates reproduce the timed passes.
  const double nd = static_cast<double>(n), kd = static_cast<double>(nnz);
  *selectPerByte = fastest(selectTimes) / selectPassBytes(nd, 4.0, kd);
  *unpackPerByte = fastest(unpackTimes) / reduceBytes(kd, nd, 8.0);
}

}  // namespace

Status measureCostModel(Transport& t, CostModel* out) {
  const int p = t.size();
  CostModel m;
  if (p > 1) {
    // Small allgathers take log2(P) rounds (recursive doubling / Bruck);
    // large ones a ring: P-1 rounds of `bytes` each.
    constexpr size_t kSmall = 8;
    double small = 0, large = 0;
    SPCCL_RETURN_IF_ERROR(timeAllGather(t, kSmall, 15, &small));
    // The large message grows (x4) until one allgather takes 4 ms: over
    // shared memory 1 MiB stays in cache and is several times faster than
    // the buffers auto decides for; on a slow link 1 MiB is already enough.
    // Every rank must pick the same size, so the probe times are agreed
    // (maximum over ranks). At most 64 MiB received per rank.
    size_t bytes = size_t{1} << 20;
    const size_t maxBytes = std::max<size_t>(bytes, (size_t{64} << 20) / static_cast<size_t>(p));
    for (;;) {
      double probe = 0;
      SPCCL_RETURN_IF_ERROR(timeAllGather(t, bytes, 1, &probe));
      std::vector<double> probes(static_cast<size_t>(p));
      SPCCL_RETURN_IF_ERROR(t.allGather(&probe, sizeof probe, probes.data()));
      if (*std::max_element(probes.begin(), probes.end()) >= 4e-3 || bytes * 4 > maxBytes) break;
      bytes *= 4;
    }
    SPCCL_RETURN_IF_ERROR(timeAllGather(t, bytes, 8, &large));
    m.alpha = small / log2Rounds(p);
    const double ring = static_cast<double>(p - 1);
    m.beta = std::max(large - ring * m.alpha, 0.25 * large) / (ring * static_cast<double>(bytes));
  }
  timeLocalPasses(t.rank(), &m.gammaSelect, &m.gammaUnpack);
  // Each parameter's maximum over ranks: the slowest rank sets a
  // collective's pace, and every rank ends with the same bits.
  double mine[4] = {m.alpha, m.beta, m.gammaSelect, m.gammaUnpack};
  std::vector<double> all(4 * static_cast<size_t>(p));
  SPCCL_RETURN_IF_ERROR(t.allGather(mine, sizeof mine, all.data()));
  for (int r = 0; r < p; ++r)
    for (int j = 0; j < 4; ++j) mine[j] = std::max(mine[j], all[4 * static_cast<size_t>(r) + j]);
  *out = CostModel{mine[0], mine[1], mine[2], mine[3]};
  return Status::ok();
}

Status resolveCostModel(Transport& t, const Params& p, const std::function<const char*(const char*)>& env,
                        CostModel* out, std::string* origin, int* autoTrials, ModelSettings* settings) {
  const int ranks = t.size(), rank = t.rank();
  // Rank 0's settings decide: the choice must agree on every rank, or the
  // call descriptor check would reject every auto call. The last three are
  // local to each rank (and differ without a warning); only the model takes
  // rank 0's.
  constexpr size_t kWarned = 4;
  const double mine[7] = {static_cast<double>(p.calibrate),
                          p.netGbps,
                          p.netLatencyUs,
                          static_cast<double>(p.autoTrials),
                          static_cast<double>(p.indexEncoding),
                          p.errorFeedback ? 1.0 : 0.0,
                          static_cast<double>(p.splitReselect)};
  std::vector<double> all(7 * static_cast<size_t>(ranks));
  SPCCL_RETURN_IF_ERROR(t.allGather(mine, sizeof mine, all.data()));
  const int calibrate = static_cast<int>(all[0]);
  const double gbps = all[1], latencyUs = all[2];
  if (autoTrials) *autoTrials = static_cast<int>(all[3]);
  if (settings) *settings = ModelSettings{static_cast<int>(all[4]), all[5] != 0, static_cast<float>(all[6])};
  if (std::memcmp(mine, all.data(), kWarned * sizeof(double)) != 0)
    SPCCL_WARN(rank,
               "SPCCL_CALIBRATE/SPCCL_NET_GBPS/SPCCL_NET_LATENCY_US/SPCCL_AUTO_TRIALS differ from rank 0's; rank 0's "
               "are used");

  CostModel m;
  std::string from = "defaults";
  if (calibrate > 0) {
    char name[64] = {};
    if (::gethostname(name, sizeof name - 1) != 0) std::snprintf(name, sizeof name, "unknown");
    std::vector<char> names(sizeof name * static_cast<size_t>(ranks));
    SPCCL_RETURN_IF_ERROR(t.allGather(name, sizeof name, names.data()));
    std::vector<std::string> hosts;
    for (int r = 0; r < ranks; ++r) hosts.emplace_back(names.data() + sizeof name * static_cast<size_t>(r));
    const std::string key = hostSetKey(hosts, ranks);
    // Only rank 0's file counts: home directories may differ between hosts.
    std::string path;
    double cached[5] = {};
    if (rank == 0) {
      path = calibrationCachePath(calibrationCacheDir(env), key, ranks);
      CostModel c;
      if (calibrate == 1 && readCalibrationCache(path, key, ranks, &c))
        cached[0] = 1, cached[1] = c.alpha, cached[2] = c.beta, cached[3] = c.gammaSelect, cached[4] = c.gammaUnpack;
    }
    std::vector<double> shared(5 * static_cast<size_t>(ranks));
    SPCCL_RETURN_IF_ERROR(t.allGather(cached, sizeof cached, shared.data()));
    if (shared[0] == 1) {
      m = CostModel{shared[1], shared[2], shared[3], shared[4]};
      from = rank == 0 ? "calibration cache " + path : "rank 0's calibration cache";
    } else {
      const Clock::time_point t0 = Clock::now();
      SPCCL_RETURN_IF_ERROR(measureCostModel(t, &m));
      from = formatString("calibrated at creation in %.2f s", since(t0));
      if (rank == 0) {
        if (writeCalibrationCache(path, key, ranks, m)) from += ", cached in " + path;
        else SPCCL_INFO(rank, "could not write the calibration cache '%s' (not an error)", path.c_str());
      }
    }
  }
  if (gbps > 0 || latencyUs > 0) from += " + SPCCL_NET_*";
  *out = applyNetworkParams(m, gbps, latencyUs);
  *origin = from;
  return Status::ok();
}

Status resolveCostModel(Transport& t, const Params& p, CostModel* out, std::string* origin, int* autoTrials,
                        ModelSettings* settings) {
  return resolveCostModel(
      t, p, [](const char* name) -> const char* { return std::getenv(name); }, out, origin, autoTrials, settings);
}

}  // namespace spccl
