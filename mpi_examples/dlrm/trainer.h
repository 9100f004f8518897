// Hybrid-parallel DLRM training over spccl: embedding tables model-parallel
// (each table on one rank), MLPs data-parallel (replicated), the pooled
// embeddings moved to the ranks that hold their samples by an alltoall of rows
// and their gradients moved back by its backward, the MLP gradients summed by
// one allreduce per layer. Optionally the hottest ids of every table are
// replicated on every rank: only the sums of a bag's cold ids cross the
// alltoall, and the hot rows' gradients are summed by the row-sparse allreduce.
#ifndef SPCCL_DLRM_TRAINER_H_
#define SPCCL_DLRM_TRAINER_H_

#include <cstdint>
#include <string>
#include <vector>

#include <spccl_mpi.h>

#include "data.h"
#include "model.h"

namespace dlrm {

struct Config {
  std::vector<int> bottom{512, 256, 64};  // after the 13 dense inputs; last = dim
  std::vector<int> top{512, 256, 1};      // after the interaction; last = 1
  int dim = 64;
  std::vector<int64_t> tableSizes;
  int bag = 1;
  int batch = 1024;  // global
  int steps = 500;
  float lr = 0.01f;
  float embLr = 0.05f;
  Optimizer optimizer = Optimizer::kAdagrad;
  bool compressed = true;  // false: exact collectives (the dense baseline)
  // The defaults are the operating point of docs/DLRM.md's frontier: DP
  // density 0.001, the top 7 of 64 entries of each row (with fp8 values, the
  // communicator's SPCCL_ROWS_CODEC, set by dlrm.cc), merged table updates;
  // dlrm.cc also turns the hot rows on for compressed runs.
  float dpDensity = 0.001f;
  float mpDensity = 0.109375f;
  int mpDenseSteps = 0;  // a dense warm-up: the first steps exchange the embedding rows exactly
  int tauInterval = 100;
  uint64_t seed = 1;
  uint64_t evalSamples = 32768;
  int printEvery = 50;
  // Embedding update: kPerSample applies row-wise Adagrad once per occurrence,
  // in global sample order; kMerged sums each id's gradients over the batch
  // first and applies one update per distinct id (FBGEMM's exact row-wise
  // Adagrad). Hot rows need kMerged: their gradients arrive merged.
  bool mergedUpdates = true;
  // Hot rows: the hotRows most frequent ids of each table (seen at least
  // hotMinCount times in the first hotSample training samples) live on every
  // rank. 0 = off. With the defaults' 4096 an id is hot when it is expected in
  // 64 or more bags per step of 1024 samples (32 ids on the default data).
  int hotRows = 0;
  int hotMinCount = 4096;
  uint64_t hotSample = 65536;
  bool monitor = false;           // read Open MPI's coll_monitoring counters around each exchange
  bool injectRoutingBug = false;  // test-only: sends each sample's rows to the wrong rank
  bool injectHotBug = false;      // test-only: hot rows updated from this rank's samples only
  bool quiet = false;
};

// Open MPI's own count of bytes this rank handed to peers inside collective
// calls (MPI_T pvar coll_monitoring_messages_size, every communicator), under
// `mpirun --mca pml_monitoring_enable 1`.
class MpiMonitor {
 public:
  bool open(std::string* error);
  bool active() const { return active_; }
  unsigned long long sent();

 private:
  bool active_ = false;
  MPI_T_pvar_session session_{};
  MPI_T_pvar_handle handle_{};
  int count_ = 0;
  std::vector<unsigned long long> values_;
};

// Per rank and step, averaged over ranks.
struct Bytes {
  double dp = 0, dpDense = 0, mp = 0, mpDense = 0;
  double mpHot = 0;               // of mp: the hot rows' row-sparse allreduce
  double mpiDp = -1, mpiMp = -1;  // Open MPI's count, -1 without --monitor
};

// Seconds per step inside spccl calls, averaged over ranks: the alltoalls and
// the hot rows' row-sparse allreduce (MP), the MLP allreduces (DP).
struct Timing {
  double mp = 0, dp = 0;
};

// The held-out evaluation's metrics, and the MP bytes its exchange sent
// (per rank, summed over the evaluation's batches, averaged over ranks).
struct Served {
  double auc = 0, logloss = 0, accuracy = 0;
  double mpBytes = 0, mpDense = 0;
};

struct RunResult {
  bool ok = false;
  std::string error;
  // Held-out metrics served the way the model was trained: through the
  // training's exchange, compressed when training was.
  double auc = 0, logloss = 0, accuracy = 0, teacherAuc = -1, positiveRate = 0;
  double evalMpBytes = 0, evalMpDense = 0;
  // A run trained with a lossy embedding exchange is also evaluated with the
  // exact one (spcclAlltoAll, every entry in fp32; hot rows as in training,
  // they are exact): the same trained model, served without compression.
  bool servedExactDone = false;
  Served servedExact;
  double finalTrainLoss = 0;
  double stepSeconds = 0;  // slowest rank's training-loop time / steps
  Timing comm;
  Bytes bytes;
  // Hot rows: replicated rows over all tables; the share of the training
  // (sample, table) bags with no cold id (they send nothing); the alltoall
  // blocks' padding (rows sent beyond the pair's own cold rows / rows sent).
  int64_t hotRowsTotal = 0;
  double hotBagShare = 0, padShare = 0;
  // Rank 0 only, for the parity check: held-out probabilities, every MLP
  // parameter, two checksums per table (sum, position-weighted sum).
  std::vector<float> evalProbs;
  std::vector<float> mlpParams;
  std::vector<double> tableChecksums;
  bool replicasIdentical = true;  // MLP parameters (and hot rows) bitwise equal on every rank
};

// The greedy balance: tables by size (rows, or with hot rows the cold load),
// largest first, each to the rank with the least so far among those holding
// fewer than ceil(T/P) tables (lowest rank on ties). owner[t] = rank.
std::vector<int> assignTables(const std::vector<int64_t>& sizes, int ranks);

class Trainer {
 public:
  // comm is a spccl communicator over mpiComm; monitor may be null.
  Trainer(const Config& config, const Source& source, spcclComm_t comm, MPI_Comm mpiComm, MpiMonitor* monitor);
  RunResult run(const std::string& label);

 private:
  struct Table {
    int index = 0;
    int64_t rows = 0;
    std::vector<float> weights;
    std::vector<float> accum;  // row-wise Adagrad
  };
  bool setup(std::string* error);
  void initRow(int table, int64_t rows, int64_t id, float* out) const;
  std::vector<int64_t> chooseHotRows();
  void layoutRows(const Batch& batch, bool training);
  void updateOwned(const Batch& batch);
  bool updateHot(const Batch& batch, std::string* error);
  bool step(int s, double* lossSum, Bytes* bytes, Timing* timing, std::string* error);
  // exact: the exact alltoall whatever the training used (checked: no
  // compressed call, bytes = the dense count of the block).
  bool forwardExchange(const Batch& batch, bool training, bool exact, std::string* error);
  void forwardLocal(const Batch& batch, int firstLocal);
  // The held-out set through the training's exchange (exact = false: into
  // result's metrics and evalProbs) or through the exact one (into
  // result->servedExact).
  bool evaluate(RunResult* result, bool exact, std::string* error);
  void checksums(RunResult* result);
  bool fail(const char* what, spcclResult_t r, std::string* error);

  Config config_;
  const Source& source_;
  spcclComm_t comm_;
  MPI_Comm mpiComm_;
  MpiMonitor* monitor_;
  int rank_ = 0, ranks_ = 1, tables_ = 0, maxOwned_ = 1, local_ = 0;
  std::vector<int> owner_;
  std::vector<Table> owned_;               // this rank's tables, by index
  std::vector<std::vector<int>> ownedBy_;  // ownedBy_[r] = tables of rank r, by index
  Mlp bottom_, top_;
  std::vector<spcclCompressor_t> compressors_;  // one per MLP layer (bottom, then top)
  std::vector<std::vector<float>> reduced_;
  std::vector<float> send_, recv_, gradSend_, gradRecv_;
  spcclSelection_t selection_ = nullptr;
  Matrix denseIn_, emb_, inter_, dinter_, dz_, demb_, dlogit_;
  std::vector<float> probs_;

  // The rows of the current batch's exchange. Owner side: sendRow_[g *
  // maxOwned + slot] = the row of sample g's bag of owned table `slot` in
  // send_ (and gradRecv_), -1 when nothing is sent. Receiver side:
  // recvRow_[i * tables + t] = the row of local sample i, table t in recv_
  // (and gradSend_), -1 when nothing arrives. rowsPerPeer_ rows per block.
  std::vector<int64_t> sendRow_, recvRow_;
  size_t rowsPerPeer_ = 0;
  std::vector<uint8_t> cold_;   // [g * tables + t]: the bag has a cold id (hot rows on)
  double exchangeSeconds_ = 0;  // the last forward alltoall
  std::string exactMismatch_;   // set when an exact exchange was not (forwardExchange)
  double bagsSeen_ = 0, hotBags_ = 0, rowsSent_ = 0, rowsUsed_ = 0;  // training steps only

  // Hot rows: key = hotOffset_[t] + slot; hotSlot_[t][id] = slot or -1.
  std::vector<std::vector<int32_t>> hotSlot_;
  std::vector<int64_t> hotOffset_;
  std::vector<int32_t> hotId_;              // key -> id in its table
  std::vector<float> hotW_, hotAccum_;      // key x dim, key
  std::vector<int32_t> hotPos_;             // key -> position in hotKeys_, -1
  std::vector<int64_t> hotKeys_, outKeys_;  // this rank's merged keys; the allreduce's output
  std::vector<float> hotGrad_, outGrad_;
  std::vector<float> merged_;       // owner's merged gradients, one table at a time
  std::vector<int32_t> mergedPos_;  // id -> position in merged_, -1
  std::vector<int32_t> mergedIds_;
};

// Rank-order AUC with ties averaged; logloss and accuracy at 0.5.
double computeAuc(const std::vector<float>& scores, const std::vector<float>& labels);

}  // namespace dlrm

#endif  // SPCCL_DLRM_TRAINER_H_
