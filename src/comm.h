// The communicator and compressor objects behind the C handles.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/context.h"
#include "include/spccl.h"
#include "codec/codec.h"
#include "src/params.h"
#include "kernels/core/status.h"
#include "transport/transport.h"
#include "src/tuner.h"

struct spcclComm;

namespace spccl {
// Device-side state of NCCL communicators and their compressors
// (src/nccl/device_collectives.cc; empty in host-only builds).
struct DeviceCommState;
}  // namespace spccl

namespace spccl {
// SPCCL_ALGO=auto's state for one shape of compressed allreduce call on the
// host path (count, datatype, density, wire type: what the call descriptor
// carries, so that a call every rank agreed on advanced the same shape on
// every rank), shared by every compressor of the communicator with that
// shape. It follows the calls of that shape, which every rank of a
// matched program makes alike, rather than one compressor's calls: a buffer
// that moves on one rank (a new implicit compressor there), same-shaped
// compressors called in another order on another rank, or one rank calling
// compressor A where another calls same-shaped B, leave it the same on every
// rank (what such a program does to its data is its own, as without auto).
//
// SPCCL_AUTO_TRIALS: the shape's first call takes the model's pick (it also
// pays the first threshold estimate); the next C*trialCallsPerCandidate(T)
// run the C candidates in two blocks of consecutive calls each (trialCall();
// a dense trial holds the residual back), and time themselves (less any tau
// re-estimation, and a compressor's first allocation: steady state pays
// neither). Each opens with a line-up, a descriptor exchange (kAutoLineUp)
// that carries the trial's index and every rank's time of the previous trial;
// the call after the last opens with the settling exchange (kAutoSettle),
// which carries the last one. A trial's time is its slowest rank's, and the
// candidate with the fastest median is kept on every rank alike, for the
// communicator's life. An exchange that fails (a mismatched call on another
// rank) advances nothing, nor does a first call that did not get past its own.
struct AutoShape {
  bool firstCallDone = false;           // the model's call (with trials)
  size_t trialsRun = 0;                 // trial calls past their line-up (the same count on every rank)
  std::vector<int> candidates;          // trialCandidates() at the first trial
  std::vector<float> slowest;           // trial call i's slowest rank's seconds (infinite if it failed on any rank)
  uint64_t lastTrialNs = kNoTrialTime;  // this rank's time of trial call trialsRun - 1, not yet sent
  int settled = -1;                     // SPCCL_ALGO_*, once settled
  double mergedPerRange = -1;           // measured by the shape's last split call (same on every rank)
};
// count, datatype, density (bits), wire value type
using AutoShapeKey = std::tuple<size_t, int, uint32_t, int>;
}  // namespace spccl

struct spcclCompressor {
  spcclComm* comm;
  uint64_t commId;  // the communicator's unique id: detects use after its destroy
  size_t count;
  spcclDataType_t dataType;
  spcclCompressConfig_t config;
  bool implicit;

  // Error-feedback residual, double-buffered: the fused pass writes the new
  // residual into the spare buffer, so a pass abandoned for a stale tau
  // leaves the current one intact. Empty until the first compressed call
  // (ensureResidual): an empty residual reads as zeros. Executor memory,
  // kept alive by `executor` (declared first: destroyed last).
  std::shared_ptr<spccl::Executor> executor;
  spccl::ExecMemory residual[2];
  int current = 0;
  uint32_t tauKey = 0;
  // SPCCL_CAPACITY_MODE=fixed: tau's estimate stays in executor memory.
  spccl::ExecMemory threshold;
  uint64_t callIndex = 0;
  uint64_t callUpdates = 0;  // exact tau estimations in the current call
  // The next compressed call re-estimates tau whatever the schedule says: a
  // dense call sent the residual (tau was fitted to send + a full residual).
  // (A stored tau that starves a selection, with thresholdMinFraction > 0, is
  // re-estimated in its own call: starved().)
  bool estimateNext = false;
  bool residualZero = true;  // host: nothing committed to the residual since a dense call last sent it

  // This call's selected pairs live in the communicator's pair buffers
  // (spcclComm::pairsFor); pairSlots is how many of them this compressor's
  // passes may fill: min(count, 4 x pairCapacity()), grown past that only by
  // a call with more NaN/Inf than slots. Its own, not the shared buffers'
  // size, so that a compressor selects alike with or without larger neighbours.
  uint64_t pairSlots = 0;
  int scaleExp = 0;                // fp8 wire: the scale exponent this call's values were stored with
  bool warnedUnsupported = false;  // said once that an algorithm not on this executor runs as allgather
  spcclStats_t stats{};

  // SPCCL_PROFILE: wall time of the compressed allreduce calls, printed (one
  // line per rank) when the compressor is destroyed.
  struct Profile {
    uint64_t calls = 0;
    double total = 0, selection = 0, communication = 0;  // seconds
    uint64_t fullEstimates = 0;  // exact tau estimates over the whole buffer (not from captured candidates)
    double estimation = 0;       // their seconds (part of selection)
  } profile;
  int profileRank = 0;

  // SPCCL_ALGO=auto on the host path: the state of this compressor's call
  // shape (the communicator's autoShapes; set at its first auto call), and
  // this call's trial timing.
  spccl::AutoShape* autoShape = nullptr;
  bool trialTiming = false;        // this call is a trial: select() times what steady state would not pay
  uint64_t autoExchangeBytes = 0;  // this call's line-up or settling exchange, sent before its own descriptor
  double untimedSeconds = 0;       // that much of this call: tau re-estimation beyond one pass, first allocation

  ~spcclCompressor();
  spccl::Status allReduce(const void* sendbuff, void* recvbuff, spcclRedOp_t op);
  // k = ceil(density * count) (core::densityCount), at least 1; and the most finite pairs one call
  // may send, max(k, floor(capacityFactor * k)). The host and device paths both use them.
  uint64_t selectCount() const;
  uint64_t pairCapacity() const;
  // Whether this call estimates tau exactly: the first call and every
  // thresholdInterval-th (scheduledEstimate: with thresholdWarmup also the
  // calls 2^j below thresholdInterval), or estimateNext (which it clears).
  // The host and device paths both use it.
  static bool scheduledEstimate(uint64_t call, uint64_t interval, bool warmup);
  bool takeEstimateDue();
  // The low side of the re-estimation rule (thresholdMinFraction): a call
  // whose stored (not just estimated), non-zero tau selected fewer than
  // starveBelow() = ceil(thresholdMinFraction * k) finite entries starved;
  // it then re-estimates and selects again, as a stored tau that selects more
  // than the capacity does. 0 (the default) never starves: DCT keeps tau
  // between scheduled estimates. tau 0 already selects every non-zero. Each
  // rank applies its own setting to its own selection.
  uint64_t starveBelow() const;
  static bool starved(bool estimated, uint32_t usedTauKey, uint64_t finiteSelected, uint64_t below);
  // Split's re-selection budget per owner range, ceil(splitReselect * k / P),
  // at least 1; 0 when off (splitReselect 0 or no error feedback).
  uint64_t splitKeepPerRange(int ranks) const;
  // The re-selection budget auto's model assumes: the communicator's agreed
  // (rank 0's) SPCCL_ERROR_FEEDBACK and SPCCL_SPLIT_RESELECT, not this
  // compressor's own, which may differ between ranks.
  uint64_t modelKeepPerRange(int ranks) const;

 private:
  spccl::Status ensureResidual();
  // *offSchedule set: the call re-estimated the stored tau off the schedule
  // (over the capacity or starving the selection); the caller puts the tau
  // it had before back if the call is refused. Untouched otherwise.
  spccl::Status select(const void* sendbuff, uint64_t* nnz, bool* offSchedule);
  // SPCCL_CAPACITY_MODE=fixed: the same rule into capacity slots, the
  // overflow kept in the residual, tau estimated on the schedule only, and
  // nothing read back on the host.
  spccl::Status selectFixed(const void* sendbuff, const spccl::FixedSlots& slots);
  uint64_t fixedCapacity() const;  // its slots per rank: pairCapacity(), at most count
  // SPCCL_CAPACITY_MODE=fixed on a device: no call waits for the host, so a
  // CUDA graph can capture it (docs/GPU.md): agreement inside the exchange
  // only, the residual updated in place, every dense call flushing it.
  bool capturable() const;
  spccl::Status estimateThreshold(const void* sendbuff, const float* residualIn, uint64_t k, uint64_t capacity,
                                  uint64_t* tieBudget);
  // SPCCL_ALGO_AUTO's pick for this call: the model's, a trial's or the settled one (with trials, after
  // the exchange that opens the call; its failure fails the call). *trial: the index in the shape's
  // candidates when this call is a timed trial, else -1.
  spccl::Status autoPick(spccl::AutoShape& shape, int ranks, spcclRedOp_t op, int* algorithm, int* trial);
  spccl::AutoShape& shapeState();
  spccl::Status allReduceOn(spccl::Transport& t, const void* sendbuff, void* recvbuff, spcclRedOp_t op, int algorithm);
  // Exact allreduce of send + residual (the residual emptied), or of send alone with the residual and tau
  // left as they are when !sendResidual.
  spccl::Status denseReduce(spccl::Transport& t, const void* sendbuff, float* out, bool sendResidual);
};

// A forward on an MPI communicator keeps its positions in the RowsSelection
// (shared with the communicator's pool), one on an NCCL communicator on the
// device.
struct spcclSelection : spccl::RowsSelection {
  spcclComm* comm;
  uint64_t commId;
};

// The collectives' context (collectives/context.h: transport, call sequence,
// shared scratch) and what only the C API and the compressors use.
struct spcclComm : spccl::CollectiveContext {
  uint64_t id;
  spccl::Params params;
  spcclStats_t stats{};
  std::map<std::tuple<void*, size_t, int>, std::unique_ptr<spcclCompressor>> implicitCompressors;
  spcclComm() { settings = &params; }
  spcclComm(const spcclComm&) = delete;
  spcclComm& operator=(const spcclComm&) = delete;
  // Executor memory of the host compressors' calls (grow-only, shared):
  spccl::ExecMemory accumulator;  // a compressed allreduce's fp32 result for 16-bit user buffers
  spccl::ExecMemory pairIndices;  // a compressed allreduce's selected pairs: indices
  spccl::ExecMemory pairValues;   // and wire-typed values
  // The pair buffers with room for at least `slots` pairs of `valueBytes` bytes.
  spccl::Status pairsFor(uint64_t slots, uint32_t valueBytes) {
    SPCCL_RETURN_IF_ERROR(pairIndices.ensure(*executor, slots * sizeof(uint32_t)));
    return pairValues.ensure(*executor, slots * valueBytes);
  }
  spccl::ModelSettings modelSettings;  // rank 0's SPCCL_INDEX_ENCODING etc. as auto's model reads them
  std::map<spccl::AutoShapeKey, spccl::AutoShape> autoShapes;  // SPCCL_ALGO=auto's state per call shape
  // Made by spcclCommInitNccl: device buffers, NCCL transport, CUDA kernels.
  bool onDevice = false;
  std::shared_ptr<spccl::DeviceCommState> device;

  spccl::Status exactAllReduce(const void* sendbuff, void* recvbuff, size_t count, spcclDataType_t type,
                               spcclRedOp_t op, spcclStats_t* call);
};

namespace spccl {

// spcclAllReduce warns when a communicator's implicit compressors reach this
// many, and at each doubling after (src/api_checks.cc).
constexpr size_t kImplicitCompressorsWarnAt = 64;

// Validates a config and fills defaults from the communicator's params.
Status checkConfig(const spcclCompressConfig_t& c);
spcclCompressConfig_t configFromParams(const Params& p);
// A caller's config (nullptr: the env defaults) in the current layout. A
// version-1 config (before splitReselect) is read up to its own size and the
// newer fields take their env defaults.
Status readConfig(const spcclCompressConfig_t* user, const Params& p, spcclCompressConfig_t* out);
// The bytes of spcclCompressConfig_t that layout `version` defines (1: up to
// capacityFactor; 2, the current one: the whole struct), 0 for a version this
// library does not know.
size_t configLayoutBytes(unsigned int version);
uint64_t denseBytesPerCall(int ranks, size_t count, spcclDataType_t type);
// An allreduce call into its compressor's and communicator's statistics: the
// counters and the last* fields (spccl.h: the last* fields describe the last
// allreduce).
void addStats(spcclStats_t* into, const spcclStats_t& call);
// Any other collective into its communicator's statistics: the counters only.
void addCounters(spcclStats_t* into, const spcclStats_t& call);

}  // namespace spccl
