// SPCCL_ALGO=auto beyond the model (collectives/cost_model.h): the timed
// trials (SPCCL_AUTO_TRIALS) and where the model's parameters come from
// (defaults, SPCCL_NET_*, the calibration and its cache).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/cost_model.h"
#include "kernels/core/status.h"

namespace spccl {

class Transport;
struct Params;

// SPCCL_AUTO_TRIALS (docs/ALGORITHMS.md "Measured choice"): the algorithms
// auto times before it settles are those whose modelled time is at most
// kTrialPruneFactor times the model's best: dense first (a tie of measured
// times goes to the earlier candidate, and dense is exact), then the sparse
// ones fastest-modelled first. The factor keeps a model that is off by a few
// times from ruling out the real winner, while an algorithm modelled an order
// of magnitude slower (dense on a slow link) costs no trial calls.
constexpr double kTrialPruneFactor = 8;
std::vector<int> trialCandidates(const CostInputs& in, const CostModel& m);
// The candidate with the least time (seconds[i] belongs to candidates[i]: its
// median trial call). Ties go to the earlier candidate; a non-finite time
// never wins; none finite: candidates[0].
int pickMeasured(const std::vector<int>& candidates, const float* seconds);
// Each candidate's first kTrialWarmupCalls trial calls run but are not
// counted: a process's first calls of an algorithm at a size pay for pages
// touched the first time and for the MPI library growing its buffers (2 ranks,
// 1 MiB on shared memory: dense's first two calls took 3-4x its later ones,
// allgather's 1.5-2x, and in a median of 4 that put dense behind allgather
// where it is 1.6x faster warm).
constexpr size_t kTrialWarmupCalls = 2;
// SPCCL_AUTO_TRIALS=T: each candidate runs its trial calls in two blocks of
// consecutive calls, the candidates in order in the first round and in
// reverse order in the second: block 1 is kTrialWarmupCalls uncounted calls
// then ceil(T/2) counted ones, block 2 (when T >= 2) one uncounted lead-in
// call then floor(T/2) counted ones. Every counted call follows a call of the
// same algorithm, as every call of a compressor settled on it does. That
// matters because the candidates share one residual and each leaves it in its
// own state: split's owners return what their re-selection drops, so at
// density 0.1 the call after a split selected 1.5-1.7x the entries of the
// call after an allgather (4 ranks, 16 MiB, emulated 10 Gbit/s links), and
// with the candidates interleaved call by call whichever followed split paid
// for it (split was taken where allgather is 1.3x faster). Two blocks, not
// one, so that a burst of load falls on more than one stretch of calls.
struct TrialCall {
  size_t slot;   // index into the candidates
  bool counted;  // false: a warm-up or lead-in call, run but not timed into the median
};
// The two blocks' lengths, and their sum: the trial calls per candidate
// (T counted, the warm-ups, and block 2's lead-in).
inline size_t trialFirstBlock(size_t trials) { return kTrialWarmupCalls + (trials + 1) / 2; }
inline size_t trialSecondBlock(size_t trials) { return trials >= 2 ? 1 + trials / 2 : 0; }
inline size_t trialCallsPerCandidate(size_t trials) { return trialFirstBlock(trials) + trialSecondBlock(trials); }
// Trial call `call` (0 .. C * trialCallsPerCandidate(trials) - 1) of C candidates.
TrialCall trialCall(size_t call, size_t candidates, size_t trials);
// The median time of each candidate's counted trial calls (times[i] is trial
// call i's; the mean of the middle two for an even count). A non-finite time
// sorts last.
std::vector<float> trialMedians(const std::vector<float>& times, size_t candidates, size_t trials);
// ---- where the parameters come from (communicator creation) ----

// SPCCL_NET_GBPS (Gbit/s, sets beta) and SPCCL_NET_LATENCY_US (sets alpha)
// over `m`; a value <= 0 leaves that parameter as it is.
CostModel applyNetworkParams(CostModel m, double gbps, double latencyUs);

// The calibration cache: one file per host set and rank count. The
// directory is $XDG_CACHE_HOME/spccl, else $HOME/.cache/spccl; "" when
// neither variable is set.
std::string calibrationCacheDir(const std::function<const char*(const char*)>& env);
// A key for the sorted multiset of host names (one entry per rank) and the rank count.
std::string hostSetKey(std::vector<std::string> hosts, int ranks);
std::string calibrationCachePath(const std::string& dir, const std::string& key, int ranks);
// False (and *out untouched) when the file is missing, unreadable, of
// another format version, key or rank count, or holds an invalid value.
bool readCalibrationCache(const std::string& path, const std::string& key, int ranks, CostModel* out);
// Creates the directory if needed and replaces the file atomically; false on
// any failure (the caller only logs it).
bool writeCalibrationCache(const std::string& path, const std::string& key, int ranks, const CostModel& m);

// Collective over `t`: times small and large allgathers and a host
// selection/unpack pass, then takes each parameter's maximum over ranks, so
// every rank returns bitwise the same model.
Status measureCostModel(Transport& t, CostModel* out);

// Rank 0's values of the settings that are local to each rank but that
// SPCCL_ALGO=auto's model reads (the index bytes of a pair, split's
// re-selection budget): a rank's own values could make it pick another
// algorithm than the others, and every auto call would be refused.
struct ModelSettings {
  int indexEncoding = 0;       // SPCCL_INDEX_ENCODING
  bool errorFeedback = true;   // SPCCL_ERROR_FEEDBACK (re-selection needs it)
  float splitReselect = 1.0f;  // SPCCL_SPLIT_RESELECT
};

// Communicator creation: rank 0's SPCCL_CALIBRATE / SPCCL_NET_* /
// SPCCL_AUTO_TRIALS settings decide for every rank (one small allgather;
// *autoTrials, when given, gets rank 0's trial count, *settings rank 0's
// ModelSettings); with SPCCL_CALIBRATE=1
// the model comes from rank 0's cache file or, failing that, from
// measureCostModel (then rank 0 writes the cache); =2 always measures.
// SPCCL_NET_* override the wire parameters last. *origin says where each
// part came from. Collective: every rank must call it.
Status resolveCostModel(Transport& t, const Params& p, const std::function<const char*(const char*)>& env,
                        CostModel* out, std::string* origin, int* autoTrials = nullptr,
                        ModelSettings* settings = nullptr);
// The same, reading XDG_CACHE_HOME and HOME from the process environment.
Status resolveCostModel(Transport& t, const Params& p, CostModel* out, std::string* origin, int* autoTrials = nullptr,
                        ModelSettings* settings = nullptr);

}  // namespace spccl
