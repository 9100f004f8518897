// Cost model of the allreduce algorithms: message rounds, bytes on the wire
// and bytes of local work (selection, unpack) per rank, turned into time with
// an alpha-beta-gamma model. SPCCL_ALGO=auto picks the cheapest. Inputs are
// the same on every rank (config, count, ranks, globally exchanged sizes, and
// a CostModel every rank took from rank 0 or from a max over ranks), so every
// rank picks the same algorithm. docs/ALGORITHMS.md states the formulas and
// where the parameters come from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/status.h"

namespace spccl {

class Transport;
struct Params;

struct CostInputs {
  int ranks;
  uint64_t count;      // elements
  uint64_t k;          // expected selected entries per rank
  uint32_t elemBytes;  // user element size (dense path)
  uint32_t wireBytes;  // wire value size
  double mergedPerRange = -1;  // measured pairs per owner range after merge; < 0: unknown
  int indexEncoding = 1;       // SPCCL_INDEX_ENCODING (codec.h kIndexEncoding*); 1 = coo, 32-bit indices
  double keepPerRange = 0;     // split's re-selection budget per owner range; 0: owners send all they merged
};

// Expected bytes per index of `nnz` sorted indices spread over a range of
// `len` positions in the given index encoding (auto: the smallest): coo 4,
// delta the varint length of the mean gap, bitmap len / 8 / nnz.
double indexBytesPerPair(int indexEncoding, double len, double nnz);

// The model's parameters. The defaults (used unless SPCCL_CALIBRATE or
// SPCCL_NET_* say otherwise) compare wire costs only: local work is free.
struct CostModel {
  double alpha = 20e-6;       // seconds per message round
  double beta = 1.0 / 5e9;    // seconds per byte one rank sends
  double gammaSelect = 0;     // seconds per byte of the fused selection pass (n (e + 8) bytes)
  double gammaUnpack = 0;     // seconds per byte of local accumulation (zeroing, unpacking, dense adds)
};

// What one algorithm costs one rank, in the model's units.
struct CostTerms {
  double rounds = 0;       // message rounds (latency terms)
  double wireBytes = 0;    // bytes sent to other ranks
  double selectBytes = 0;  // bytes the selection pass streams
  double unpackBytes = 0;  // bytes of local accumulation
};

// Bytes-equivalent of the fused selection pass over n elements of elemBytes
// with k selected: the stream (input and residual read, residual written:
// n (e + 8)), the 16-element blocks holding a candidate, which are revisited
// element by element (64 bytes each; 1 - (1 - k/n)^16 of the n/16 blocks),
// and 256 per selected entry (its classification and packing).
double selectPassBytes(double n, double elemBytes, double k);
// Bytes-equivalent of summing `pairs` received pairs of pairBytes into a
// zeroed output of `span` floats, the way codec.h's reduceStreams and
// storeStream do it: one blocked pass over the output (4 span; 40 a pair to
// decode and add, beyond its bytes) or, below one pair in kScatterBelow
// elements, memset's streaming stores (2 span) and a cache miss a pair (320).
double reduceBytes(double pairs, double span, double pairBytes);

CostTerms modelTerms(int algorithm, const CostInputs& in);
// Bytes one rank sends to others for one call (headers and size exchanges included).
double modelBytes(int algorithm, const CostInputs& in);
double modelSeconds(int algorithm, const CostInputs& in, const CostModel& m = {});
// SPCCL_ALGO_DENSE, _ALLGATHER or _SPLIT. Ties go to allgather, then split.
int chooseAlgorithm(const CostInputs& in, const CostModel& m = {});
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
// One line for SPCCL_DEBUG=INFO: the inputs, each algorithm's modelled time
// and its parts, and the pick.
std::string explainChoice(const CostInputs& in, const CostModel& m);
std::string describeCostModel(const CostModel& m);

// Row-sparse allreduce: kRowSparseAllgather or kRowSparsePartition. Per rank,
// with U unique ids on average and overlap = (sum of unique ids) / union:
//   allgather: (P-1) U row bytes, 1 round
//   partition: (P-1)/P U + (P-1) U/overlap row bytes, 2 rounds
// overlap < 0 (no earlier call) is taken as 1: no shared ids.
int chooseRowSparseAlgorithm(int ranks, uint64_t sumUnique, uint64_t rowLen, uint32_t valueBytes, double overlap,
                             const CostModel& m = {});

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
  int indexEncoding = 0;      // SPCCL_INDEX_ENCODING
  bool errorFeedback = true;  // SPCCL_ERROR_FEEDBACK (re-selection needs it)
  float splitReselect = 1.0f; // SPCCL_SPLIT_RESELECT
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
Status resolveCostModel(Transport& t, const Params& p, CostModel* out, std::string* origin,
                        int* autoTrials = nullptr, ModelSettings* settings = nullptr);

}  // namespace spccl
