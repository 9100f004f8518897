// Cost model of the allreduce algorithms: bytes and message rounds per rank,
// turned into time with an alpha-beta model. SPCCL_ALGO=auto picks the
// cheapest. Inputs are the same on every rank (config, count, ranks and
// globally exchanged sizes), so every rank picks the same algorithm.
// docs/ALGORITHMS.md states the formulas.
#pragma once

#include <cstdint>

namespace spccl {

struct CostInputs {
  int ranks;
  uint64_t count;      // elements
  uint64_t k;          // expected selected entries per rank
  uint32_t elemBytes;  // user element size (dense path)
  uint32_t wireBytes;  // wire value size
  double mergedPerRange = -1;  // measured pairs per owner range after merge; < 0: unknown
};

struct CostModel {
  double alpha = 20e-6;      // seconds per message round
  double beta = 1.0 / 5e9;   // seconds per byte
};

// Bytes one rank sends to others for one call (headers and size exchanges included).
double modelBytes(int algorithm, const CostInputs& in);
double modelSeconds(int algorithm, const CostInputs& in, const CostModel& m = {});
// SPCCL_ALGO_DENSE, _ALLGATHER or _SPLIT.
int chooseAlgorithm(const CostInputs& in, const CostModel& m = {});

// Row-sparse allreduce: kRowSparseAllgather or kRowSparsePartition. Per rank,
// with U unique ids on average and overlap = (sum of unique ids) / union:
//   allgather: (P-1) U row bytes, 1 round
//   partition: (P-1)/P U + (P-1) U/overlap row bytes, 2 rounds
// overlap < 0 (no earlier call) is taken as 1: no shared ids.
int chooseRowSparseAlgorithm(int ranks, uint64_t sumUnique, uint64_t rowLen, uint32_t valueBytes, double overlap,
                             const CostModel& m = {});

}  // namespace spccl
