// The compressed allreduce's algorithms, each written once against the
// Transport interface and the kernels, and their table (allreduceAlgorithms),
// which SPCCL_ALGO parsing, SPCCL_ALGO=auto (model and trials), the logs and
// docs/ENV.md read.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/core/elementwise.h"
#include "kernels/core/executor.h"
#include "codec/codec.h"
#include "collectives/cost_model.h"
#include "collectives/agreement.h"
#include "kernels/core/status.h"
#include "transport/transport.h"

namespace spccl {

struct Integrity;  // codec/codec.h

// What a call asks of an algorithm before it is chosen.
struct AllreduceRequest {
  bool onDevice = false;  // device buffers (an NCCL communicator)
};

struct SparseContribution;
struct ReduceContext;

// One row per compressed-allreduce algorithm. Adding one is a row here, a
// file with its run (and cost in cost_model.cc), and its SPCCL_ALGO_* id.
struct AllreduceAlgorithm {
  int id;  // SPCCL_ALGO_*: also its position in SPCCL_ALGO's choices
  const char* name;
  const char* description;
  int tieOrder;  // auto's preference where modelled times tie (lower first)
  // Runs on this rank's selected pairs (run); false: the exact allreduce of
  // v = input + residual, which the compressor forms (its residual is its own).
  bool sparse;
  // This rank's stream size travels in its call descriptor: its index
  // encoding, and so its size, only the sender knows before the exchange.
  bool announcesStream;
  bool (*supports)(const AllreduceRequest& request);
  CostTerms (*cost)(const CostInputs& in);
  Status (*run)(const SparseContribution& mine, ReduceContext* ctx);  // sparse algorithms
};

// In SPCCL_ALGO_* order, from SPCCL_ALGO_DENSE (SPCCL_ALGO_AUTO, a policy
// over these, has no row).
std::span<const AllreduceAlgorithm> allreduceAlgorithms();
const AllreduceAlgorithm* findAllreduceAlgorithm(int id);  // nullptr for auto and unknown ids
const char* algorithmName(int id);                         // "auto", a row's name, or "unknown"
// SPCCL_ALGO's choices in id order: "auto|dense|allgather|split".
std::string algorithmChoices();

// Scratch reused across calls of one compressor: buffers only grow, so a
// steady shape allocates nothing after its first calls.
struct Workspace {
  // Streams sent, received and staged, and split's owner sums, in executor
  // memory (collectives on the executor); the vectors below serve the rest.
  ExecMemory sendStream, recvStream, stageStream, rangeSums, sizeSend, sizeRecv;
  ExecMemory cutKeys, cutPoints;  // split stage 1: the owners' range starts, where they cut the selection
  // split's owner: its range's nonzero sums compacted (offsets in the range,
  // values), the re-selection's positions among them, the kept entries'
  // indices and wire values, what each compacted sum leaves behind, and
  // their count.
  ExecMemory rangeOffsets, rangeValues, keptPositions, keptIndices, keptValues, rangeRest, rangeCount;
  // The check of a rank's own pairs decoded into its dense stream (split's
  // owner, the sparsified allgather): a device writes it at the next
  // settle(), so it must outlive the call that enqueued it.
  IndexCheck ownPairsCheck{};
  // SPCCL_CAPACITY_MODE=fixed: every rank's capacity slots of indices and
  // values and its FixedRecord, in rank order (fixedSlots).
  ExecMemory fixedIndices, fixedValues, fixedRecords;
  std::vector<size_t> sizes, offsets, recvSizes, recvOffsets;
  std::vector<uint64_t> counts, recvCounts, cuts, bounds, nnzPerRank, deltaBytes;
  StreamsScratch streams;                // received streams' headers and sections (reduceStreamsOn)
  std::vector<IndexEncoding> encodings;  // split stage 1: one per owner
  // The row-sparse allreduce in executor memory: this rank's merged rows, the
  // union, and the received streams' headers, lists and order checks.
  ExecMemory mergedRows, unionIds, unionRows;
  std::vector<RowsHeader> idRowsHeaders;
  std::vector<IdRowsSection> idRowsLists;
  std::vector<uint64_t> unordered;
  // The alltoall rows: the selection's slots (positions, values) and counts,
  // its values compacted (and a bounded stream's decoded values), and per
  // stream its layout, entries, fp8 key or scale and positions or scales check.
  ExecMemory rowsStrided, rowsStridedValues, rowCounts, rowsStaged;
  std::vector<RowsLayout> rowsLayouts;
  std::vector<uint64_t> rowsEntries, rowsBad;
  std::vector<uint32_t> rowsMaxKeys;
  std::vector<int> rowsScaleExps;
};

// This rank's selected entries: sorted global indices and wire-typed values.
struct SparseContribution {
  const uint32_t* indices;
  const void* values;
  uint64_t nnz;
};

struct ReduceContext {
  Transport* transport;
  Executor* exec;  // where out, residual and the contribution's arrays live
  uint64_t seq;
  uint64_t count;
  core::ValueType wire;
  int algorithm;
  const uint64_t* nnzPerRank;  // every rank's nnz, from the call descriptors
  float* out;                  // count fp32, receives the sum over ranks in rank order
  float* residual;             // owner-stage rounding error goes here; nullptr = dropped
  Workspace* ws;
  uint64_t bytesSent = 0;          // out: bytes put on the wire to other ranks
  uint64_t mergedNnz = 0;          // out (split): pairs the owners sent, all ranges
  uint64_t keepPerRange = 0;       // split: owners re-select to this many finite pairs (0: keep all; needs residual)
  uint64_t reselectDropped = 0;    // out (split): reduced entries this owner kept back in its residual
  Integrity* integrity = nullptr;  // seals every stream sent (SPCCL_CHECKSUM); nullptr = none
  int indexEncoding = 0;           // SPCCL_INDEX_ENCODING (codec.h kIndexEncoding*)
  // allgather: every rank's stream size and this rank's encoding, decided
  // before the descriptors went out (a compact encoding's size depends on
  // the indices, which only the sender has). nullptr: 32-bit indices.
  const uint64_t* streamBytesPerRank = nullptr;
  IndexEncoding myEncoding = IndexEncoding::kCoo32;
  int scaleExp = 0;  // fp8 wire: the scale exponent this rank's values were packed with
  // split: the owner's wire values stay within +-wireBound (core::kHalfMax for
  // an fp16 buffer, as the fused pass's; +Inf: no bound)
  float wireBound = __builtin_inff();
};

// [begin, end) of the index range rank r owns in the split algorithm: P
// near-equal contiguous ranges, the first count % P one longer.
inline uint64_t rangeBegin(uint64_t count, int p, int r) {
  const uint64_t base = count / static_cast<uint64_t>(p), rem = count % static_cast<uint64_t>(p);
  return static_cast<uint64_t>(r) * base + std::min<uint64_t>(static_cast<uint64_t>(r), rem);
}

Status sparseAllgather(const SparseContribution& mine, ReduceContext* ctx);

// choosePairsEncoding for `pieces` runs of sorted indices held in executor
// memory: piece r is indices[cuts[r], cuts[r + 1]) over the range
// [bounds[r], bounds[r + 1]); the delta encoding's size from
// Executor::deltaIndexBytes (into deltaBytes[r]; one settle() for all, only
// where the setting may pick it). encodings and bytes get one entry a piece.
Status choosePairsEncodingsOn(Executor& ex, int setting, const uint32_t* indices, const uint64_t* cuts,
                              const uint64_t* bounds, size_t pieces, core::ValueType wire, uint64_t* deltaBytes,
                              IndexEncoding* encodings, size_t* bytes);
// The same for one run: nnz sorted indices in [0, count).
Status choosePairsEncodingOn(Executor& ex, int setting, const uint32_t* indices, uint64_t nnz, uint64_t count,
                             core::ValueType wire, IndexEncoding* encoding, size_t* bytes);

// Stream sizes through executor memory (what a device transport can move):
// ws.sizes[j], the bytes of this rank's stream to rank j, go to rank j;
// ws.recvCounts[j] = what rank j announces it sends here, on the host.
Status exchangeSizes(Executor& ex, Transport& t, Workspace& ws);

// The allgather algorithm's fixed-capacity policy (SPCCL_CAPACITY_MODE=fixed):
// each rank's selection is written straight into its slots (fixedSlots:
// `capacity` indices and values, pads index 0xffffffff, and its FixedRecord,
// all executor memory), every rank's slots and record go to every rank in
// fixed sizes, and each rank sums the first min(selected, capacity) pairs of
// every rank in rank order. Nothing depends on a value the host would have
// to read, the call agreement included: the records carry the descriptors,
// and agreeInBand zeroes every count where they differ.
struct FixedRecord {
  CallDescriptor call;  // equal on every rank (a fixed call's descriptor has no per-rank field)
  PairCounts counts;    // the selection's, written by selectPack
};
struct FixedSlots {
  uint64_t capacity;  // slots per rank
  uint32_t* indices;
  void* values;
  FixedRecord* record;
};
// Sizes the slots and stores `call` in this rank's record.
Status fixedSlots(Executor& ex, Workspace& ws, int ranks, int rank, uint64_t capacity, uint32_t valueBytes,
                  const CallDescriptor& call, FixedSlots* mine);
Status sparseAllgatherFixed(uint64_t capacity, ReduceContext* ctx);

Status sparseSplit(const SparseContribution& mine, ReduceContext* ctx);

}  // namespace spccl
