// DCT-DP compressed allreduce, per rank, per call:
//   v = send + residual; tau = |v| of the k-th largest finite entry, estimated
//   exactly on the first call and every thresholdInterval calls (with
//   thresholdWarmup, also at the calls 2^j below thresholdInterval; and whenever
//   the stored tau would select more than capacityFactor*k entries, or, with
//   thresholdMinFraction > 0, fewer than that share of k: then in that call);
//   the rank
//   sends v on S = {|v| >= tau, v != 0} plus every NaN/Inf; the residual keeps
//   v outside S and the wire rounding inside S.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "src/comm.h"
#include "src/log.h"
#include "transport/timed_transport.h"
#include "src/tuner.h"
#include "kernels/core/types.h"

using namespace spccl;

uint64_t spcclCompressor::selectCount() const {
  return std::clamp<uint64_t>(core::densityCount(config.density, count), 1, std::max<uint64_t>(count, 1));
}

namespace {
uint64_t keepPerRange(bool errorFeedback, float splitReselect, uint64_t k, size_t count, int ranks) {
  if (!errorFeedback || !(splitReselect > 0.0f)) return 0;
  const double keep = std::ceil(static_cast<double>(splitReselect) * static_cast<double>(k) / std::max(1, ranks));
  return std::clamp<uint64_t>(static_cast<uint64_t>(std::min(keep, 1e18)), 1, std::max<uint64_t>(count, 1));
}
}  // namespace

uint64_t spcclCompressor::splitKeepPerRange(int ranks) const {
  return keepPerRange(config.errorFeedback != 0, config.splitReselect, selectCount(), count, ranks);
}

uint64_t spcclCompressor::modelKeepPerRange(int ranks) const {
  const spccl::ModelSettings& m = comm->modelSettings;
  return keepPerRange(m.errorFeedback, m.splitReselect, selectCount(), count, ranks);
}

uint64_t spcclCompressor::pairCapacity() const {
  const uint64_t k = selectCount();
  return std::max<uint64_t>(k, static_cast<uint64_t>(std::floor(static_cast<double>(config.capacityFactor) * k)));
}

bool spcclCompressor::scheduledEstimate(uint64_t call, uint64_t interval, bool warmup) {
  if (call % interval == 0) return true;
  // Warm-up: calls 1, 2, 4, ... below the interval (call 0 is a multiple).
  return warmup && call < interval && (call & (call - 1)) == 0;
}

bool spcclCompressor::takeEstimateDue() {
  const bool due =
      scheduledEstimate(callIndex, static_cast<uint64_t>(config.thresholdInterval), config.thresholdWarmup != 0) ||
      estimateNext;
  estimateNext = false;
  return due;
}

uint64_t spcclCompressor::starveBelow() const {
  // ceil, as every density rule: at k = 1 and any fraction above 0 a stored
  // tau that selects nothing starves.
  return core::densityCount(config.thresholdMinFraction, selectCount());
}

bool spcclCompressor::starved(bool estimated, uint32_t usedTauKey, uint64_t finiteSelected, uint64_t below) {
  return !estimated && usedTauKey != 0 && finiteSelected < below;
}

Status spcclCompressor::estimateThreshold(const void* sendbuff, const float* residualIn, uint64_t k, uint64_t capacity,
                                          uint64_t* tieBudget) {
  const Stopwatch watch(comm->params.profile);
  ThresholdStats t;
  SPCCL_RETURN_IF_ERROR(executor->kthLargestMagnitude(sendbuff, dataType, residualIn, count, k, &t));
  SPCCL_RETURN_IF_ERROR(executor->settle());
  if (comm->params.profile) {
    profile.estimation += watch.seconds();
    ++profile.fullEstimates;
  }
  tauKey = t.tauKey;
  // Entries tied at tau are taken in index order up to the capacity: the
  // exact rule {|v| >= tau} unless ties would break the cap.
  *tieBudget = capacity > t.above ? capacity - t.above : 0;
  ++callUpdates;
  return Status::ok();
}

// The two residual buffers (the current one and the pass's output) exist from
// the first compressed call on: a compressor that only runs dense (SPCCL_ALGO_DENSE,
// or auto settled on dense) never holds their 8 bytes an element.
Status spcclCompressor::ensureResidual() {
  if (residual[0].get() != nullptr) return Status::ok();
  const size_t bytes = count * sizeof(float);
  SPCCL_RETURN_IF_ERROR(residual[0].ensure(*executor, bytes));
  SPCCL_RETURN_IF_ERROR(residual[1].ensure(*executor, bytes));
  return executor->fill(residual[0].get(), 0, bytes);
}

Status spcclCompressor::select(const void* sendbuff, uint64_t* nnz, bool* offSchedule) {
  const bool timing = trialTiming;
  const Stopwatch call(timing);
  double lastPass = 0;  // seconds of the last selectPack pass (the one a call without re-estimation makes)
  const uint64_t k = selectCount();
  const uint64_t capacity = pairCapacity();
  const bool ef = config.errorFeedback != 0;
  Executor& ex = *executor;
  if (ef) SPCCL_RETURN_IF_ERROR(ensureResidual());
  const float* residualIn = ef ? residual[current].get<float>() : nullptr;
  float* residualOut = ef ? residual[1 - current].get<float>() : nullptr;
  const core::ValueType wire = toValueType(config.wireValueType);
  // Room for kCandidateSlack x the cap: a moderately stale tau's whole
  // selection fits, and re-estimating from it needs no extra pass over v.
  constexpr uint64_t kCandidateSlack = 4;
  pairSlots = std::max(pairSlots, std::min<uint64_t>(count, kCandidateSlack * capacity));
  SPCCL_RETURN_IF_ERROR(comm->pairsFor(pairSlots, core::wireValueBytes(wire)));
  uint64_t tieBudget = std::numeric_limits<uint64_t>::max();
  bool estimated = false;
  // fp8: the max rule's scale of the selected values, once a pass has shown
  // that tau's scale would saturate them (below).
  int fp8MaxRuleScale = core::kFp8MinScaleExp;
  if (takeEstimateDue()) {
    SPCCL_RETURN_IF_ERROR(estimateThreshold(sendbuff, residualIn, k, capacity, &tieBudget));
    estimated = true;
  }
  for (;;) {
    SelectSpec a{sendbuff,
                 dataType,
                 residualIn,
                 residualOut,
                 count,
                 tauKey,
                 tieBudget,
                 pairSlots,
                 wire,
                 comm->pairIndices.get<uint32_t>(),
                 comm->pairValues.get()};
    if (wire == core::ValueType::kFloat8e4m3) {
      // tau's binade -> e4m3's smallest normal binade: every selected |v| >= tau
      // is a normal code; tau == 0 (fewer non-zeros than k) has no binade, so
      // the largest |v| sets the scale (one more pass, only then).
      if (tauKey != 0 && !core::isNonFiniteKey(tauKey)) {
        scaleExp = std::max(core::fp8ScaleForTau(tauKey), fp8MaxRuleScale);
      } else {
        uint32_t maxKey = 0;
        SPCCL_RETURN_IF_ERROR(ex.maxFiniteKey(sendbuff, dataType, residualIn, count, &maxKey));
        SPCCL_RETURN_IF_ERROR(ex.settle());
        scaleExp = core::fp8ScaleForMax(maxKey);
      }
      a.scaleExp = scaleExp;
    }
    const Stopwatch pass(timing);
    SelectStats r;
    SPCCL_RETURN_IF_ERROR(ex.selectPack(a, &r));
    SPCCL_RETURN_IF_ERROR(ex.settle());
    lastPass = pass.seconds();
    if (wire == core::ValueType::kFloat8e4m3 && core::fp8ScaleForMax(r.maxFiniteKey) > a.scaleExp) {
      // A selected |v| beyond 448 * 2^s (about 28672 tau) would saturate, and
      // its excess would wait in the residual; an input that keeps coming
      // would never arrive, its residual growing to Inf. The pass is redone
      // at the selection's max-rule scale (nothing saturates; values far
      // below the largest may round to zero and wait in the residual
      // instead). residualOut is rewritten whole; residualIn is untouched.
      fp8MaxRuleScale = core::fp8ScaleForMax(r.maxFiniteKey);
      continue;
    }
    if (!estimated && r.finiteSelected > capacity) {  // stale tau: re-estimate exactly in this call
      estimated = true;
      *offSchedule = true;
      if (r.selected <= pairSlots) {  // every candidate was captured
        ReselectStats rs;
        SPCCL_RETURN_IF_ERROR(ex.reselect(a, r.selected, k, capacity, &rs));
        SPCCL_RETURN_IF_ERROR(ex.settle());
        tauKey = rs.tauKey;
        ++callUpdates;
        *nnz = rs.selected;
        break;
      }
      SPCCL_RETURN_IF_ERROR(estimateThreshold(sendbuff, residualIn, k, capacity, &tieBudget));
      continue;
    }
    if (starved(estimated, tauKey, r.finiteSelected, starveBelow())) {
      // thresholdMinFraction > 0 and the stored tau selects fewer than that
      // share of k: re-estimate in this call, as on the high side, so that the
      // call sends about k entries. (The pass's candidates are too few to
      // rank: one full estimate, then one more pass.)
      *offSchedule = true;
      SPCCL_RETURN_IF_ERROR(estimateThreshold(sendbuff, residualIn, k, capacity, &tieBudget));
      estimated = true;
      continue;
    }
    if (r.selected > pairSlots) {  // NaN/Inf beyond the slots: rare, grow and redo
      pairSlots = r.selected;
      SPCCL_RETURN_IF_ERROR(comm->pairsFor(pairSlots, core::wireValueBytes(wire)));
      continue;
    }
    *nnz = r.selected;
    break;
  }
  // All but the last pass: the re-estimation, and a first call's allocation of the residual and pair buffers.
  if (timing) untimedSeconds = call.seconds() - lastPass;
  ++callIndex;
  return Status::ok();  // the new residual is in residual[1 - current] until the call commits
}

bool spcclCompressor::capturable() const {
  return comm->params.capacityMode == kCapacityModeFixed && executor->onDevice();
}

uint64_t spcclCompressor::fixedCapacity() const {
  return std::min<uint64_t>(pairCapacity(), std::max<size_t>(count, 1));
}

Status spcclCompressor::selectFixed(const void* sendbuff, const FixedSlots& slots) {
  const uint64_t capacity = slots.capacity;
  const bool ef = config.errorFeedback != 0;
  Executor& ex = *executor;
  if (ef) SPCCL_RETURN_IF_ERROR(ensureResidual());
  SPCCL_RETURN_IF_ERROR(threshold.ensure(ex, sizeof(ThresholdStats)));
  auto* tau = threshold.get<ThresholdStats>();
  const float* residualIn = ef ? residual[current].get<float>() : nullptr;
  const bool estimated = takeEstimateDue();
  if (estimated) {
    SPCCL_RETURN_IF_ERROR(ex.kthLargestMagnitudeInMemory(sendbuff, dataType, residualIn, count, selectCount(), tau));
    ++callUpdates;
  }
  // In place where calls never wait for the host: a captured graph would
  // replay one direction of the double buffer's swap forever.
  float* residualOut = !ef            ? nullptr
                       : capturable() ? residual[current].get<float>()
                                      : residual[1 - current].get<float>();
  // Right after an estimate, ties at tau fill the capacity in index order;
  // with a stored tau every tie goes (select()'s rule).
  const SelectSpec a =
      fixedCapacitySpec(sendbuff, dataType, residualIn, residualOut, count, capacity,
                        estimated ? capacity : std::numeric_limits<uint64_t>::max(), toValueType(config.wireValueType),
                        tau, slots.indices, slots.values, &slots.record->counts);
  SelectStats unused;
  SPCCL_RETURN_IF_ERROR(ex.selectPack(a, &unused));
  ++callIndex;
  return Status::ok();
}

Status spcclCompressor::denseReduce(Transport& t, const void* sendbuff, float* out, bool sendResidual) {
  ++callIndex;
  const bool flush = config.errorFeedback && sendResidual;
  if (flush) {
    // tau was fitted to v = send + a full residual; on v = send alone it would
    // select far fewer than k entries, so the next compressed call estimates
    // it afresh (whatever thresholdMinFraction says).
    estimateNext = true;
  }
  // fp32 input goes to the allreduce as it is (no staging copy, the same bytes
  // through memory as a plain MPI_Allreduce); 16-bit input is widened first.
  Executor& ex = *executor;
  const float* v = static_cast<const float*>(sendbuff);
  if (dataType != spcclFloat32) {
    SPCCL_RETURN_IF_ERROR(ex.loadFloats(sendbuff, dataType, count, out));
    v = out;
  }
  // A captured call flushes whatever the host thinks: a graph may replay it
  // after calls outside it filled the residual. (So the residual must exist:
  // allocated by the warm-up call, outside the graph.)
  if (flush && capturable()) SPCCL_RETURN_IF_ERROR(ensureResidual());
  if (flush && (!residualZero || capturable())) {
    // v = send + residual travels exactly; nothing is left behind. One pass
    // forms v and empties the residual (in place when v is out). Otherwise
    // the residual is empty, or held back with its tau as they are.
    const size_t bytes = count * sizeof(float);
    if (sendNeedsMove(v, bytes, out, out, bytes)) {
      // v overlaps out other than in place (sendbuff = recvbuff + 1, say): an
      // elementwise pass on a device would read entries it already wrote. v
      // goes through the spare residual first (the next selection rewrites it).
      float* spare = residual[1 - current].get<float>();
      SPCCL_RETURN_IF_ERROR(ex.copy(spare, v, bytes));
      v = spare;
    }
    SPCCL_RETURN_IF_ERROR(ex.flushResidual(v, residual[current].get<float>(), out, count));
    residualZero = true;
    v = out;
  }
  return ex.withMemory([&] { return t.allReduceDense(v, out, count, spcclFloat32, spcclSum); });
}

AutoShape& spcclCompressor::shapeState() {
  if (autoShape == nullptr) {
    uint32_t density = 0;
    std::memcpy(&density, &config.density, sizeof density);
    autoShape = &comm->autoShapes[AutoShapeKey{count, static_cast<int>(dataType), density,
                                               static_cast<int>(config.wireValueType)}];
  }
  return *autoShape;
}

Status spcclCompressor::autoPick(AutoShape& a, int ranks, spcclRedOp_t op, int* algorithm, int* trial) {
  *trial = -1;
  if (a.settled >= 0) {
    *algorithm = a.settled;
    return Status::ok();
  }
  const core::ValueType wire = toValueType(config.wireValueType);
  CostInputs in{ranks,
                count,
                selectCount(),
                static_cast<uint32_t>(dataTypeSize(dataType)),
                core::wireValueBytes(wire),
                a.mergedPerRange,
                comm->modelSettings.indexEncoding,
                static_cast<double>(modelKeepPerRange(ranks)),
                executor->onDevice()};
  const int trials = comm->params.autoTrials;
  if (trials <= 0 || !a.firstCallDone) {  // the model's pick (with trials: the shape's first call's)
    *algorithm = chooseAlgorithm(in, comm->costModel);
    if (stats.calls == 0 || stats.lastAlgorithm != *algorithm)  // why, once per change of mind
      SPCCL_INFO(comm->rank, "%s", explainChoice(in, comm->costModel).c_str());
    return Status::ok();
  }
  const size_t perCandidate = trialCallsPerCandidate(static_cast<size_t>(trials));
  if (a.candidates.empty()) {
    a.candidates = trialCandidates(in, comm->costModel);
    a.slowest.assign(a.candidates.size() * perCandidate, std::numeric_limits<float>::infinity());
    SPCCL_INFO(comm->rank,
               "auto: timing %zu candidate(s) on %d counted call(s) each (%zu calls each with the "
               "uncounted warm-up and lead-in calls, in blocks of consecutive calls) before settling; %s",
               a.candidates.size(), a.candidates.size() > 1 ? trials : 0, perCandidate,
               explainChoice(in, comm->costModel).c_str());
    if (a.candidates.size() == 1) {  // nothing to compare
      *algorithm = a.settled = a.candidates[0];
      return Status::ok();
    }
  }
  // The line-up before a trial call, or the settling exchange once every trial
  // has run: a descriptor exchange like the call's own, carrying the trial's
  // index (ranks at different points of the schedule disagree) and this rank's
  // time of the previous trial call. It lines the ranks up (each rank's time
  // runs from a common start) and gathers the times (a call's time is its
  // slowest rank's, as perf/allreduce_perf measures it).
  const bool settle = a.trialsRun == a.slowest.size();
  CallDescriptor mine{kStreamMagic,
                      settle ? kAutoSettle : kAutoLineUp,
                      static_cast<uint8_t>(wire),
                      static_cast<uint8_t>(dataType),
                      static_cast<uint8_t>(op),
                      comm->seq,
                      count,
                      a.trialsRun};
  mine.streamBytes = a.lastTrialNs;
  mine.density = config.density;
  mine.flags = kCallAuto;
  std::vector<CallDescriptor>& all = comm->descriptors;
  const Status agreed = agreeOnCall(*comm, *comm->transport, mine);
  // On the wire like the call's own descriptor: its bytes count in this call's bytesSent.
  if (agreed.isOk()) autoExchangeBytes = static_cast<uint64_t>(ranks - 1) * sizeof(CallDescriptor);
  if (!agreed.isOk()) {
    // Another rank is in another call, which took this seq: take it too, so
    // the ranks stay in step. Nothing advances: the next call of this shape
    // repeats this exchange, with the same time.
    ++comm->seq;
    return agreed;
  }
  if (a.trialsRun > 0) {
    uint64_t slowestNs = 0;
    for (const CallDescriptor& d : all) slowestNs = std::max(slowestNs, d.streamBytes);
    if (slowestNs != kNoTrialTime)
      a.slowest[a.trialsRun - 1] = static_cast<float>(1e-9 * static_cast<double>(slowestNs));
  }
  a.lastTrialNs = kNoTrialTime;
  if (!settle) {
    *trial = static_cast<int>(trialCall(a.trialsRun++, a.candidates.size(), static_cast<size_t>(trials)).slot);
    *algorithm = a.candidates[static_cast<size_t>(*trial)];
    return Status::ok();
  }
  // Each candidate's median call counts (the statistic perf/allreduce_perf
  // reports; unlike the fastest call it charges an algorithm that is often
  // held up, e.g. by more synchronisation points on oversubscribed cores).
  const std::vector<float> median = trialMedians(a.slowest, a.candidates.size(), static_cast<size_t>(trials));
  a.settled = pickMeasured(a.candidates, median.data());
  std::string times;
  for (size_t i = 0; i < a.candidates.size(); ++i)
    times += formatString(" %s %.4g ms;", algorithmName(a.candidates[i]), 1e3 * static_cast<double>(median[i]));
  SPCCL_INFO(comm->rank, "auto: measured (median of %d calls, each the slowest rank's time):%s -> %s", trials,
             times.c_str(), algorithmName(a.settled));
  *algorithm = a.settled;
  return Status::ok();
}

Status spcclCompressor::allReduce(const void* sendbuff, void* recvbuff, spcclRedOp_t op) {
  int trial = -1;
  int algorithm = config.algorithm;
  autoExchangeBytes = 0;
  AutoShape* shape = algorithm == SPCCL_ALGO_AUTO ? &shapeState() : nullptr;
  if (shape) SPCCL_RETURN_IF_ERROR(autoPick(*shape, comm->ranks, op, &algorithm, &trial));
  trialTiming = trial >= 0;
  untimedSeconds = 0;
  const Stopwatch watch(comm->params.profile || trial >= 0);
  Status s;
  if (comm->params.profile) {
    TimedTransport timedTransport(*comm->transport, &profile.communication);
    s = allReduceOn(timedTransport, sendbuff, recvbuff, op, algorithm);
  } else {
    s = allReduceOn(*comm->transport, sendbuff, recvbuff, op, algorithm);
  }
  const double seconds = watch.seconds();
  trialTiming = false;
  if (comm->params.profile) {
    profile.total += seconds;
    ++profile.calls;
  }
  if (trial < 0) return s;
  // What this call spent re-estimating tau does not count: right after a
  // compressor starts, or after a dense call flushed the residual, tau moves
  // and is re-estimated on most calls, where in steady state that happens once
  // per thresholdInterval calls. The time goes out with the next exchange
  // (a failed call's as kNoTrialTime: that trial counts as infinitely slow).
  const double counted = std::max(0.0, seconds - untimedSeconds);
  shape->lastTrialNs = s.isOk() ? static_cast<uint64_t>(std::llround(1e9 * counted)) : kNoTrialTime;
  SPCCL_TRACE(comm->rank,
              "auto: trial call %zu: %s %.4g ms (%.4g ms of it re-estimating tau or allocating, not "
              "counted)",
              shape->trialsRun - 1, algorithmName(algorithm), 1e3 * seconds, 1e3 * untimedSeconds);
  return s;
}

spcclCompressor::~spcclCompressor() {
  if (profile.calls == 0) return;
  const double n = static_cast<double>(profile.calls);
  const double local = profile.total - profile.selection - profile.communication;
  logMessage(LogLevel::kInfo, profileRank,
             "profile: compressor of %zu elements, %llu allreduce calls, per call %.3f ms = selection %.3f ms "
             "(%.0f%%) + communication %.3f ms (%.0f%%: wire and waiting for other ranks) + local %.3f ms (%.0f%%: "
             "encoding, owners' reduction, re-selection, unpacking); tau estimated %llu times, %llu of them over "
             "the whole buffer at %.3f ms each (part of selection)",
             count, static_cast<unsigned long long>(profile.calls), 1e3 * profile.total / n,
             1e3 * profile.selection / n, 100 * profile.selection / profile.total, 1e3 * profile.communication / n,
             100 * profile.communication / profile.total, 1e3 * local / n, 100 * local / profile.total,
             static_cast<unsigned long long>(stats.thresholdUpdates),
             static_cast<unsigned long long>(profile.fullEstimates),
             profile.fullEstimates ? 1e3 * profile.estimation / static_cast<double>(profile.fullEstimates) : 0.0);
}

Status spcclCompressor::allReduceOn(Transport& t, const void* sendbuff, void* recvbuff, spcclRedOp_t op,
                                    int algorithm) {
  // Fixed capacity runs every sparse algorithm as allgather's fixed policy.
  const bool fixed = comm->params.capacityMode == kCapacityModeFixed && algorithm != SPCCL_ALGO_DENSE;
  if (fixed) algorithm = SPCCL_ALGO_ALLGATHER;
  Executor& ex = *executor;
  if (!findAllreduceAlgorithm(algorithm)->supports(AllreduceRequest{ex.onDevice()})) {
    // Parts of it have no device kernel yet: the same result, allgather's traffic.
    if (!warnedUnsupported)
      SPCCL_INFO(comm->rank, "%s executor: the %s algorithm runs as allgather (docs/GPU.md)", ex.name(),
                 algorithmName(algorithm));
    warnedUnsupported = true;
    algorithm = SPCCL_ALGO_ALLGATHER;
  }
  const AllreduceAlgorithm& algo = *findAllreduceAlgorithm(algorithm);
  const int p = t.size();
  const core::ValueType wire = toValueType(config.wireValueType);
  if (fixed && wire == core::ValueType::kFloat8e4m3)
    return invalidUsage(
        "SPCCL_CAPACITY_MODE=fixed does not take fp8 wire values (their scale is chosen from counts read on the "
        "host): use fp32, fp16 or bf16, or the exact mode");
  const uint64_t seq = comm->seq++;
  callUpdates = 0;
  // fp32 results accumulate straight into the user's buffer (the input has
  // been consumed by the fused pass first, so in-place is safe).
  float* out = static_cast<float*>(recvbuff);
  if (dataType != spcclFloat32) {
    SPCCL_RETURN_IF_ERROR(comm->accumulator.ensure(ex, count * sizeof(float)));
    out = comm->accumulator.get<float>();
  }

  // Fixed calls on a device never wait for the host: an error their kernels
  // found after they returned is reported by a later call, this one. It still
  // takes part in every exchange (a rank that returned early would leave the
  // others waiting), its record saying so: where only some ranks have seen
  // the error yet, the records differ and nothing is applied anywhere.
  const bool inBandOnly = capturable();
  const Status earlier = inBandOnly ? ex.asyncFindings() : Status::ok();
  // Fixed: nnz is the slots sent, what the descriptors agree on.
  uint64_t nnz = fixed ? fixedCapacity() : 0;
  CallDescriptor mine{kStreamMagic,
                      static_cast<uint8_t>(algorithm),
                      static_cast<uint8_t>(wire),
                      static_cast<uint8_t>(dataType),
                      static_cast<uint8_t>(op),
                      seq,
                      count,
                      nnz};
  mine.density = config.density;
  if (config.algorithm == SPCCL_ALGO_AUTO) mine.flags = kCallAuto;
  if (fixed) mine.flags |= kCallFixed;
  if (!earlier.isOk()) mine.flags |= kCallAfterError;

  const uint32_t storedTau = tauKey;  // what a refused call that re-estimated off the schedule goes back to
  bool offSchedule = false;
  FixedSlots slots{};
  if (fixed)
    SPCCL_RETURN_IF_ERROR(fixedSlots(ex, comm->workspace, p, t.rank(), nnz, core::wireValueBytes(wire), mine, &slots));
  if (algo.sparse) {
    const Stopwatch watch(comm->params.profile);
    SPCCL_RETURN_IF_ERROR(fixed ? selectFixed(sendbuff, slots) : select(sendbuff, &nnz, &offSchedule));
    profile.selection += watch.seconds();
  }
  mine.nnz = nnz;
  // allgather: this rank's stream size in its index encoding goes out with
  // the descriptor (split exchanges its sizes itself).
  IndexEncoding encoding = IndexEncoding::kCoo32;
  if (algo.announcesStream && !fixed) {
    size_t bytes = 0;
    SPCCL_RETURN_IF_ERROR(choosePairsEncodingOn(ex, comm->params.indexEncoding, comm->pairIndices.get<uint32_t>(), nnz,
                                                count, wire, &encoding, &bytes));
    mine.streamBytes = bytes;
  }
  std::vector<CallDescriptor>& descriptors = comm->descriptors;
  // Agreed before anything moves, unless the call may not wait for the host:
  // then a fixed call agrees inside its exchange (FixedRecord), and a dense
  // one, as NCCL's own, not at all. (On the host a fixed call does both: a
  // mismatch fails here, with the field named, before the slots move.)
  const Status agreed = inBandOnly ? Status::ok() : agreeOnCall(*comm, t, mine);
  if (!agreed.isOk()) {
    // A refused call's input must not set the tau of the calls after it: a
    // stale or starved tau it re-estimated goes back to the stored one, so
    // the next call applies the rule to its own input. A scheduled estimate
    // stays (the schedule counted this call).
    if (offSchedule) tauKey = storedTau;
    return agreed;
  }
  // Every rank agreed on it: this was the shape's first call, if none was yet
  // (one every rank refused was not).
  if (autoShape) autoShape->firstCallDone = true;
  // The call is consistent on every rank: commit this call's residual. A
  // call rejected above leaves it as it was (and a stale tau, above).
  if (algo.sparse && config.errorFeedback) {
    if (!inBandOnly) current = 1 - current;  // (in place otherwise: selectFixed)
    residualZero = false;
  }

  spcclStats_t call{};
  call.calls = 1;
  call.compressedCalls = algo.sparse;
  call.denseBytes = denseBytesPerCall(p, count, dataType);
  call.bytesSent = (inBandOnly ? 0 : static_cast<uint64_t>(p - 1) * sizeof(CallDescriptor)) + autoExchangeBytes;
  call.lastAlgorithm = algorithm;
  if (!algo.sparse) {
    // auto's dense trials hold the residual back (sending only the input is
    // as exact: nothing is lost, it waits): the sparse trials after them and
    // a sparse pick then run on the residual and tau of steady state instead
    // of refilling a flushed residual, and dense is timed as it runs settled.
    SPCCL_RETURN_IF_ERROR(denseReduce(t, sendbuff, out, /*sendResidual=*/!trialTiming));
    call.bytesSent += call.denseBytes;
    call.lastSelected = count;
  } else {
    Workspace& workspace = comm->workspace;
    std::vector<uint64_t>& nnzPerRank = workspace.nnzPerRank;
    nnzPerRank.resize(p);
    for (int r = 0; r < p; ++r) nnzPerRank[r] = fixed ? nnz : descriptors[r].nnz;  // (fixed: maybe none exchanged)
    ReduceContext ctx{&t,
                      &ex,
                      seq,
                      count,
                      wire,
                      algorithm,
                      nnzPerRank.data(),
                      out,
                      config.errorFeedback ? residual[current].get<float>() : nullptr,
                      &workspace};
    ctx.scaleExp = scaleExp;
    ctx.wireBound = dataType == spcclFloat16 ? core::kHalfMax : __builtin_inff();
    ctx.integrity = &comm->integrity;
    ctx.indexEncoding = comm->params.indexEncoding;
    ctx.keepPerRange = splitKeepPerRange(p);
    std::vector<uint64_t>& streamBytes = workspace.counts;
    if (algo.announcesStream && !fixed) {
      streamBytes.resize(p);
      for (int r = 0; r < p; ++r) streamBytes[r] = descriptors[r].streamBytes;
      ctx.streamBytesPerRank = streamBytes.data();
      ctx.myEncoding = encoding;
    }
    if (fixed) {
      SPCCL_RETURN_IF_ERROR(sparseAllgatherFixed(nnz, &ctx));
    } else {
      const SparseContribution pairs{comm->pairIndices.get<uint32_t>(), comm->pairValues.get(), nnz};
      SPCCL_RETURN_IF_ERROR(algo.run(pairs, &ctx));
    }
    if (algorithm == SPCCL_ALGO_SPLIT && autoShape) autoShape->mergedPerRange = static_cast<double>(ctx.mergedNnz) / p;
    call.bytesSent += ctx.bytesSent;
    // Fixed: the count and tau stay in executor memory (reading them would
    // be the synchronisation the mode avoids on a device).
    call.lastSelected = fixed ? 0 : nnz;
    call.lastThreshold = fixed ? 0.0f : core::bitsFloat(tauKey);
  }
  if (op == spcclAvg) SPCCL_RETURN_IF_ERROR(ex.divideFloats(out, count, static_cast<float>(p)));
  if (dataType != spcclFloat32) SPCCL_RETURN_IF_ERROR(ex.storeFloats(out, count, dataType, recvbuff));

  call.thresholdUpdates = callUpdates;
  addStats(&stats, call);
  addStats(&comm->stats, call);
  SPCCL_TRACE(comm->rank, "allreduce #%llu count=%zu algo=%s selected=%llu tau=%g bytesSent=%llu",
              static_cast<unsigned long long>(seq), count, algorithmName(algorithm),
              static_cast<unsigned long long>(nnz), static_cast<double>(call.lastThreshold),
              static_cast<unsigned long long>(call.bytesSent));
  return earlier;
}

namespace spccl {

uint64_t denseBytesPerCall(int ranks, size_t count, spcclDataType_t type) {
  return 2ull * static_cast<uint64_t>(ranks - 1) * count * dataTypeSize(type) / static_cast<uint64_t>(ranks);
}

void addCounters(spcclStats_t* into, const spcclStats_t& call) {
  into->calls += call.calls;
  into->compressedCalls += call.compressedCalls;
  into->bytesSent += call.bytesSent;
  into->denseBytes += call.denseBytes;
  into->thresholdUpdates += call.thresholdUpdates;
}

void addStats(spcclStats_t* into, const spcclStats_t& call) {
  addCounters(into, call);
  into->lastSelected = call.lastSelected;
  into->lastThreshold = call.lastThreshold;
  into->lastAlgorithm = call.lastAlgorithm;
}

spcclCompressConfig_t configFromParams(const Params& p) {
  spcclCompressConfig_t c{};
  c.size = sizeof c;
  c.version = SPCCL_COMPRESS_CONFIG_VERSION;
  c.density = p.allreduceDensity;
  c.thresholdInterval = p.thresholdInterval;
  c.errorFeedback = p.errorFeedback ? 1 : 0;
  c.algorithm = p.algorithm;
  c.wireValueType = static_cast<spcclDataType_t>(p.valueType);
  c.capacityFactor = p.capacityFactor;
  c.splitReselect = p.splitReselect;
  c.thresholdMinFraction = p.thresholdMinFraction;
  c.thresholdWarmup = p.thresholdWarmup ? 1 : 0;
  return c;
}

size_t configLayoutBytes(unsigned int version) {
  static_assert(SPCCL_COMPRESS_CONFIG_VERSION == 4, "a new layout version needs its size here");
  if (version == 1) return offsetof(spcclCompressConfig_t, splitReselect);         // fields up to capacityFactor
  if (version == 2) return offsetof(spcclCompressConfig_t, thresholdMinFraction);  // up to splitReselect
  if (version == 3) return offsetof(spcclCompressConfig_t, thresholdWarmup);       // up to thresholdMinFraction
  if (version == SPCCL_COMPRESS_CONFIG_VERSION) return sizeof(spcclCompressConfig_t);
  return 0;
}

Status readConfig(const spcclCompressConfig_t* user, const Params& p, spcclCompressConfig_t* out) {
  *out = configFromParams(p);
  if (user == nullptr) return Status::ok();
  // Read size and version first: a caller built against an older header
  // passes a shorter struct, and only its own bytes may be read.
  size_t size;
  unsigned int version;
  std::memcpy(&size, reinterpret_cast<const char*>(user) + offsetof(spcclCompressConfig_t, size), sizeof size);
  std::memcpy(&version, reinterpret_cast<const char*>(user) + offsetof(spcclCompressConfig_t, version), sizeof version);
  const size_t known = configLayoutBytes(version);
  if (known == 0 || size < known)
    return invalidArgument(
        formatString("config.size=%zu / config.version=%u: initialise the config with "
                     "spcclCompressConfigInit() (expected size %zu, version %d)",
                     size, version, sizeof(spcclCompressConfig_t), SPCCL_COMPRESS_CONFIG_VERSION));
  std::memcpy(out, user, known);  // versions 1 to 3: later fields keep their env defaults
  out->size = sizeof *out;
  out->version = SPCCL_COMPRESS_CONFIG_VERSION;
  return Status::ok();
}

Status checkConfig(const spcclCompressConfig_t& c) {
  if (c.size < sizeof(spcclCompressConfig_t) || c.version != SPCCL_COMPRESS_CONFIG_VERSION)
    return invalidArgument(
        formatString("config.size=%zu / config.version=%u: initialise the config with "
                     "spcclCompressConfigInit() (expected size %zu, version %d)",
                     c.size, c.version, sizeof(spcclCompressConfig_t), SPCCL_COMPRESS_CONFIG_VERSION));
  if (!(c.density > 0.0f && c.density <= 1.0f))
    return invalidArgument(formatString("config.density=%g must be in (0, 1]", static_cast<double>(c.density)));
  if (c.thresholdInterval < 1)
    return invalidArgument(formatString("config.thresholdInterval=%d must be >= 1", c.thresholdInterval));
  if (c.errorFeedback != 0 && c.errorFeedback != 1)
    return invalidArgument(formatString("config.errorFeedback=%d must be 0 or 1", c.errorFeedback));
  if (c.algorithm != SPCCL_ALGO_AUTO && findAllreduceAlgorithm(c.algorithm) == nullptr)
    return invalidArgument(formatString("config.algorithm=%d is not an SPCCL_ALGO_* value", c.algorithm));
  if (!isWireValueType(c.wireValueType))
    return invalidArgument(
        formatString("config.wireValueType=%d must be spcclFloat32, spcclFloat16, spcclBfloat16 or "
                     "spcclFloat8e4m3",
                     static_cast<int>(c.wireValueType)));
  if (!(c.capacityFactor >= 1.0f && c.capacityFactor <= 1e6f))
    return invalidArgument(
        formatString("config.capacityFactor=%g must be in [1, 1e6]", static_cast<double>(c.capacityFactor)));
  if (!(c.splitReselect >= 0.0f && c.splitReselect <= 1e6f))
    return invalidArgument(
        formatString("config.splitReselect=%g must be in [0, 1e6] (0 = off)", static_cast<double>(c.splitReselect)));
  if (!(c.thresholdMinFraction >= 0.0f && c.thresholdMinFraction <= 1.0f))
    return invalidArgument(formatString("config.thresholdMinFraction=%g must be in [0, 1] (0 = off)",
                                        static_cast<double>(c.thresholdMinFraction)));
  if (c.thresholdWarmup != 0 && c.thresholdWarmup != 1)
    return invalidArgument(formatString("config.thresholdWarmup=%d must be 0 or 1", c.thresholdWarmup));
  return Status::ok();
}

}  // namespace spccl
