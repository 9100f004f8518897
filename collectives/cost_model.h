// Cost model of the allreduce algorithms: message rounds, bytes on the wire
// and bytes of local work (selection, unpack) per rank, turned into time with
// an alpha-beta-gamma model. SPCCL_ALGO=auto picks the cheapest. Inputs are
// the same on every rank (config, count, ranks, globally exchanged sizes, and
// a CostModel every rank took from rank 0 or from a max over ranks), so every
// rank picks the same algorithm. docs/ALGORITHMS.md states the formulas; the
// parameters come from src/tuner.h (defaults, SPCCL_NET_*, calibration).
#pragma once

#include <cstdint>
#include <string>

namespace spccl {

// Message rounds of a small exchange among p ranks (ceil(log2 p)): the call
// descriptor's allgather; the calibration fits alpha with it.
double log2Rounds(int p);

struct CostInputs {
  int ranks;
  uint64_t count;              // elements
  uint64_t k;                  // expected selected entries per rank
  uint32_t elemBytes;          // user element size (dense path)
  uint32_t wireBytes;          // wire value size
  double mergedPerRange = -1;  // measured pairs per owner range after merge; < 0: unknown
  int indexEncoding = 1;       // SPCCL_INDEX_ENCODING (codec.h kIndexEncoding*); 1 = coo, 32-bit indices
  double keepPerRange = 0;     // split's re-selection budget per owner range; 0: owners send all they merged
  bool onDevice = false;       // the executor's: only the algorithms that support it are chosen
};

// Expected bytes per index of `nnz` sorted indices spread over a range of
// `len` positions in the given index encoding (auto: the smallest): coo 4,
// delta the varint length of the mean gap, bitmap len / 8 / nnz.
double indexBytesPerPair(int indexEncoding, double len, double nnz);

// The model's parameters. The defaults (used unless SPCCL_CALIBRATE or
// SPCCL_NET_* say otherwise) compare wire costs only: local work is free.
struct CostModel {
  double alpha = 20e-6;     // seconds per message round
  double beta = 1.0 / 5e9;  // seconds per byte one rank sends
  double gammaSelect = 0;   // seconds per byte of the fused selection pass (n (e + 8) bytes)
  double gammaUnpack = 0;   // seconds per byte of local accumulation (zeroing, unpacking, dense adds)
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
// zeroed output of `span` floats, the way host::reduceSections does it
// (kernels/host/sections.h): one blocked pass over the output (4 span; 40 a pair to
// decode and add, beyond its bytes) or, below one pair in kScatterBelow
// elements, memset's streaming stores (2 span) and a cache miss a pair (320).
double reduceBytes(double pairs, double span, double pairBytes);

// Each allreduce algorithm's terms (its row of collectives/algorithms.h's table).
CostTerms costDense(const CostInputs& in);
CostTerms costAllgather(const CostInputs& in);
CostTerms costSplit(const CostInputs& in);
// The terms of algorithm `algorithm` (SPCCL_ALGO_*; none for another id).
CostTerms modelTerms(int algorithm, const CostInputs& in);
// Bytes one rank sends to others for one call (headers and size exchanges included).
double modelBytes(int algorithm, const CostInputs& in);
double modelSeconds(int algorithm, const CostInputs& in, const CostModel& m = {});
// The algorithm of least modelled time; ties go by the table's tieOrder
// (allgather, then split, then dense).
int chooseAlgorithm(const CostInputs& in, const CostModel& m = {});
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

}  // namespace spccl
