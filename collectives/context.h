// What a communicator lends its collectives: the transport, the call
// sequence, the scratch they share, and the settings they read. The
// communicator (src/comm.h) is one; the algorithms see nothing else of it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "codec/codec.h"
#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "kernels/core/elementwise.h"
#include "kernels/core/executor.h"
#include "transport/transport.h"

namespace spccl {

// The environment settings the collectives read (src/params.h's Params
// holds them, parsed from SPCCL_VALUE_TYPE, SPCCL_INDEX_ENCODING,
// SPCCL_ROWSPARSE_ALGO, SPCCL_PROFILE, SPCCL_ROWS_CODEC and SPCCL_ROWS_ERROR_*).
struct CollectiveSettings {
  core::ValueType valueType = core::ValueType::kFloat32;
  int indexEncoding = 0;       // codec.h kIndexEncoding*: how pairs streams write their indices
  int rowSparseAlgorithm = 0;  // kRowSparse* (collectives/other_collectives.h)
  bool profile = false;        // time split of compressed calls, reported at destroy
  int rowsCodec = 0;           // codec.h kRowsCodec*: how alltoall rows (both ways) write their values
  // kRowsCodecBounded: the bound (absolute, or a fraction of the call's value
  // range when rowsErrorRelative) and its factor per bounded forward.
  float rowsErrorBound = 1e-3f;
  bool rowsErrorRelative = false;
  double rowsErrorDecay = 1.0;
};

// A rows forward's kept positions, row by row, block by block (peer j's
// rows are j*rowsPerPeer ...): how many each row kept and where each row's
// start (on the host), the offsets again and the positions in executor
// memory. The context pools them (freeRowsPositions).
struct RowsPositions {
  std::shared_ptr<Executor> exec;  // declared first: outlives the memory below, which it frees
  std::vector<uint32_t> sentCounts, recvCounts;
  std::vector<uint64_t> sentOffsets, recvOffsets;  // rows + 1 each
  ExecMemory sentOffsetsIn, sentPositions, recvOffsetsIn, recvPositions;
};

// What an alltoall-rows forward keeps for its backward.
struct RowsSelection {
  bool used = false;        // set once every rank agreed on its backward
  uint64_t forwardSeq = 0;  // the forward's call sequence number: its backward names it
  size_t rowsPerPeer = 0, rowLen = 0;
  spcclDataType_t dataType = spcclFloat32;
  core::ValueType wire = core::ValueType::kFloat32;
  int codec = 0;                             // kRowsCodec* of the forward; its backward uses the same
  std::shared_ptr<RowsPositions> positions;  // the forward's (shared with the pool)
};

// SPCCL_PROFILE: the time split of a communicator's alltoall-rows calls
// (host path), reported when the communicator is destroyed.
struct RowsProfile {
  uint64_t forwardCalls = 0, backwardCalls = 0;
  double forward = 0, forwardSelection = 0, forwardCommunication = 0;
  double backward = 0, backwardCommunication = 0;
};

struct CollectiveContext {
  std::unique_ptr<Transport> transport;
  // Where the collectives' arrays live and run (kernels/core/executor.h).
  // Declared before the ExecMemory it frees; shared with the communicator's
  // compressors, which may outlive it (their residuals are its memory).
  std::shared_ptr<Executor> executor;
  // Executor memory of the sparsified allgather (the selected pairs, their
  // values in fp32 for an fp8 wire, the decoded blocks) and of every call's
  // descriptor exchange (agreeOnCall).
  struct {
    ExecMemory indices, values, staged, floats;
    ExecMemory descriptors;
  } exec;
  const CollectiveSettings* settings = nullptr;  // the communicator's, for its life
  int rank = 0;
  int ranks = 1;
  uint64_t seq = 0;  // collective calls so far; stamped on every stream
  // Per-call scratch (grow only) of every collective on the communicator.
  // Calls on one communicator never overlap (one thread at a time, as for
  // NCCL), so one set serves them all: a compressor keeps only what outlives
  // its call (residual, tau, counters), and a program with many compressors
  // holds the largest call's scratch once instead of every compressor's.
  Workspace workspace;
  std::vector<float> floats;
  std::vector<uint32_t> positions;
  std::vector<uint64_t> ranks64;
  std::vector<CallDescriptor> descriptors;  // one per rank, this call
  Integrity integrity;                      // SPCCL_CHECKSUM (and its test hook)
  CostModel costModel;                      // SPCCL_ALGO=auto's parameters, resolved at creation (same on every rank)
  RowsProfile rowsProfile;
  uint64_t boundedForwards = 0;               // rows forwards with kRowsCodecBounded so far (the bound's schedule)
  std::vector<float> boundedDecoded;          // such a forward's received stream, decoded (one peer's at a time)
  std::vector<unsigned char> boundedStreams;  // such a forward's streams, on the host (sent, then received)
  double rowSparseOverlap = -1;               // sum of unique ids over ranks / union, last row-sparse call
  // Rows forwards' positions: one no selection holds any more (use
  // count 1, only this pool) serves the next forward, so a loop of forward,
  // backward and spcclSelectionDestroy (or forwards that keep no selection)
  // allocates nothing once warm. Grows to the most selections alive at once.
  std::vector<std::shared_ptr<RowsPositions>> rowsPositionsPool;
  std::shared_ptr<RowsPositions> freeRowsPositions() {
    for (const auto& p : rowsPositionsPool)
      if (p.use_count() == 1) return p;
    rowsPositionsPool.push_back(std::make_shared<RowsPositions>());
    rowsPositionsPool.back()->exec = executor;
    return rowsPositionsPool.back();
  }
};

}  // namespace spccl
