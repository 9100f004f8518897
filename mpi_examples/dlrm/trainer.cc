#include "trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace dlrm {
namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Bytes statsDelta(const spcclStats_t& a, const spcclStats_t& b, bool dp) {
  Bytes d;
  const double sent = static_cast<double>(b.bytesSent - a.bytesSent);
  const double dense = static_cast<double>(b.denseBytes - a.denseBytes);
  if (dp) {
    d.dp = sent;
    d.dpDense = dense;
  } else {
    d.mp = sent;
    d.mpDense = dense;
  }
  return d;
}

}  // namespace

bool MpiMonitor::open(std::string* error) {
  int provided = 0, index = -1;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    *error = "MPI_T_init_thread failed";
    return false;
  }
  if (MPI_T_pvar_get_index("coll_monitoring_messages_size", MPI_T_PVAR_CLASS_SIZE, &index) != MPI_SUCCESS) {
    *error = "MPI_T variable coll_monitoring_messages_size not found: run under mpirun --mca pml_monitoring_enable 1";
    return false;
  }
  MPI_Comm world = MPI_COMM_WORLD;
  if (MPI_T_pvar_session_create(&session_) != MPI_SUCCESS ||
      MPI_T_pvar_handle_alloc(session_, index, &world, &handle_, &count_) != MPI_SUCCESS ||
      MPI_T_pvar_start(session_, handle_) != MPI_SUCCESS) {
    *error = "could not start the coll_monitoring_messages_size counter";
    return false;
  }
  values_.assign(static_cast<size_t>(count_), 0);
  active_ = true;
  return true;
}

unsigned long long MpiMonitor::sent() {
  if (!active_) return 0;
  MPI_T_pvar_read(session_, handle_, values_.data());
  unsigned long long s = 0;
  for (unsigned long long v : values_) s += v;
  return s;
}

std::vector<int> assignTables(const std::vector<int64_t>& sizes, int ranks) {
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sizes[a] > sizes[b]; });
  // At most ceil(T/P) tables per rank: the alltoall's blocks are padded to the
  // largest rank's table count, so an uneven count would send zero rows.
  const int cap = static_cast<int>((sizes.size() + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks));
  std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
  std::vector<int> count(static_cast<size_t>(ranks), 0);
  std::vector<int> owner(sizes.size(), 0);
  for (int t : order) {
    int best = -1;
    for (int r = 0; r < ranks; ++r)
      if (count[r] < cap && (best < 0 || load[r] < load[best])) best = r;
    owner[t] = best;
    load[best] += sizes[t];
    ++count[best];
  }
  return owner;
}

double computeAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  const size_t n = scores.size();
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rankSumPos = 0, pos = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && scores[idx[j]] == scores[idx[i]]) ++j;
    const double avgRank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (labels[idx[k]] > 0.5f) {
        rankSumPos += avgRank;
        pos += 1;
      }
    i = j;
  }
  const double neg = static_cast<double>(n) - pos;
  if (pos == 0 || neg == 0) return 0.5;
  return (rankSumPos - pos * (pos + 1) / 2) / (pos * neg);
}

Trainer::Trainer(const Config& config, const Source& source, spcclComm_t comm, MPI_Comm mpiComm, MpiMonitor* monitor)
    : config_(config), source_(source), comm_(comm), mpiComm_(mpiComm), monitor_(monitor) {}

bool Trainer::fail(const char* what, spcclResult_t r, std::string* error) {
  *error = std::string(what) + ": " + spcclGetErrorString(r) + ": " + spcclGetLastError(comm_);
  return false;
}

// DLRM's initialisation, U(-1/sqrt(rows), 1/sqrt(rows)), from a stream that
// depends on (seed, table, id) only, so any rank count builds the same table
// and a hot row's replica starts as its owner's row.
void Trainer::initRow(int table, int64_t rows, int64_t id, float* out) const {
  const int dim = config_.dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(rows));
  const uint64_t base = mix(config_.seed * 0x100000001b3ull + static_cast<uint64_t>(table) + 17);
  for (int d = 0; d < dim; ++d) {
    const uint64_t i = static_cast<uint64_t>(id) * static_cast<uint64_t>(dim) + static_cast<uint64_t>(d);
    const double u = static_cast<double>(mix(base + i) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
    out[d] = static_cast<float>(u * scale);
  }
}

// The hot rows: per table, the hotRows ids seen most often (at least
// hotMinCount times; ties: lower id) in the first hotSample training samples.
// Every rank counts the same samples, so every rank picks the same rows.
// Returns each table's cold load: the counted bags with a cold id.
std::vector<int64_t> Trainer::chooseHotRows() {
  hotSlot_.assign(static_cast<size_t>(tables_), {});
  hotOffset_.assign(static_cast<size_t>(tables_) + 1, 0);
  hotId_.clear();
  hotW_.clear();
  hotAccum_.clear();
  std::vector<int64_t> coldLoad(static_cast<size_t>(tables_), 0);
  if (config_.hotRows <= 0) return coldLoad;
  std::vector<std::vector<uint32_t>> counts(static_cast<size_t>(tables_));
  std::vector<int32_t> seen;  // the counted ids, [sample][table][bag]
  for (int t = 0; t < tables_; ++t) counts[t].assign(static_cast<size_t>(config_.tableSizes[t]), 0);
  Batch b;
  for (uint64_t first = 0; first < config_.hotSample;) {
    const int n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(config_.batch), config_.hotSample - first));
    source_.train(first, n, &b);
    for (int g = 0; g < n; ++g)
      for (int t = 0; t < tables_; ++t)
        for (int k = 0; k < b.bag; ++k) ++counts[t][static_cast<size_t>(b.id(g, t, k))];
    seen.insert(seen.end(), b.ids.begin(), b.ids.end());
    first += static_cast<uint64_t>(n);
  }
  const uint32_t minCount = static_cast<uint32_t>(std::max(1, config_.hotMinCount));
  std::vector<int32_t> ids;
  for (int t = 0; t < tables_; ++t) {
    const std::vector<uint32_t>& c = counts[t];
    ids.clear();
    for (size_t id = 0; id < c.size(); ++id)
      if (c[id] >= minCount) ids.push_back(static_cast<int32_t>(id));
    const size_t keep = std::min(ids.size(), static_cast<size_t>(config_.hotRows));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(),
                      [&](int32_t x, int32_t y) { return c[x] > c[y] || (c[x] == c[y] && x < y); });
    hotSlot_[t].assign(c.size(), -1);
    for (size_t slot = 0; slot < keep; ++slot) {
      hotSlot_[t][static_cast<size_t>(ids[slot])] = static_cast<int32_t>(slot);
      hotId_.push_back(ids[slot]);
    }
    hotOffset_[t + 1] = hotOffset_[t] + static_cast<int64_t>(keep);
  }
  const size_t hot = hotId_.size(), dim = static_cast<size_t>(config_.dim);
  hotW_.resize(hot * dim);
  hotAccum_.assign(hot, 0.0f);
  for (int t = 0; t < tables_; ++t)
    for (int64_t key = hotOffset_[t]; key < hotOffset_[t + 1]; ++key)
      initRow(t, config_.tableSizes[t], hotId_[static_cast<size_t>(key)], &hotW_[static_cast<size_t>(key) * dim]);
  hotPos_.assign(hot, -1);
  const size_t bag = static_cast<size_t>(config_.bag), bags = seen.size() / bag;
  for (size_t i = 0; i < bags; ++i) {
    const int t = static_cast<int>(i % static_cast<size_t>(tables_));
    for (size_t k = 0; k < bag; ++k)
      if (hotSlot_[t][static_cast<size_t>(seen[i * bag + k])] < 0) {
        ++coldLoad[t];
        break;
      }
  }
  return coldLoad;
}

bool Trainer::setup(std::string* error) {
  MPI_Comm_rank(mpiComm_, &rank_);
  MPI_Comm_size(mpiComm_, &ranks_);
  tables_ = static_cast<int>(config_.tableSizes.size());
  local_ = config_.batch / ranks_;
  // With hot rows the alltoall carries the cold bags only, and its blocks are
  // as large as the largest pair's: tables are balanced by cold load instead.
  const std::vector<int64_t> coldLoad = chooseHotRows();
  owner_ = assignTables(config_.hotRows > 0 ? coldLoad : config_.tableSizes, ranks_);
  ownedBy_.assign(static_cast<size_t>(ranks_), {});
  for (int t = 0; t < tables_; ++t) ownedBy_[owner_[t]].push_back(t);
  maxOwned_ = 1;
  for (const auto& v : ownedBy_) maxOwned_ = std::max(maxOwned_, static_cast<int>(v.size()));

  const int dim = config_.dim;
  owned_.clear();
  for (int t : ownedBy_[rank_]) {
    Table table;
    table.index = t;
    table.rows = config_.tableSizes[t];
    table.weights.resize(static_cast<size_t>(table.rows) * dim);
    table.accum.assign(static_cast<size_t>(table.rows), 0.0f);
    for (int64_t id = 0; id < table.rows; ++id)
      initRow(t, table.rows, id, &table.weights[static_cast<size_t>(id) * dim]);
    owned_.push_back(std::move(table));
  }

  std::vector<int> bottomSizes{kDenseFeatures};
  bottomSizes.insert(bottomSizes.end(), config_.bottom.begin(), config_.bottom.end());
  const int interactionOut = dim + (tables_ + 1) * tables_ / 2;
  std::vector<int> topSizes{interactionOut};
  topSizes.insert(topSizes.end(), config_.top.begin(), config_.top.end());
  bottom_.init(bottomSizes, /*lastRelu=*/true, config_.seed * 2 + 1);
  top_.init(topSizes, /*lastRelu=*/false, config_.seed * 2 + 2);

  // One compressor per gradient bucket (= MLP layer), error feedback on.
  // Density 1 (the dense run) takes the library's exact path.
  spcclCompressConfig_t cc;
  spcclResult_t r = spcclCompressConfigInit(&cc);
  if (r != spcclSuccess) return fail("spcclCompressConfigInit", r, error);
  cc.density = config_.compressed ? config_.dpDensity : 1.0f;
  cc.errorFeedback = 1;
  cc.thresholdInterval = config_.tauInterval;
  for (Mlp* mlp : {&bottom_, &top_})
    for (Layer& layer : mlp->layers()) {
      spcclCompressor_t c = nullptr;
      r = spcclCompressorCreate(comm_, layer.grad.size(), spcclFloat32, &cc, &c);
      if (r != spcclSuccess) return fail("spcclCompressorCreate", r, error);
      compressors_.push_back(c);
      reduced_.emplace_back(layer.grad.size());
    }
  return true;
}

// The rows of the exchange for one batch. Without hot rows every rank pools
// its tables for every sample of the global batch and the rows for the
// samples of rank j form block j: row (i * maxOwned + slot) holds table
// ownedBy[rank][slot] of rank j's local sample i (zeros in the padding slots
// of ranks that own fewer tables). With hot rows only the bags with a cold id
// have a row, packed in the same order (rank j's local samples, then the
// owner's slots), and every block has room for the largest pair's count, so
// that the alltoall's blocks are equal; every rank has the global batch's ids
// and the hot set, so sender and receiver agree on every row's place.
void Trainer::layoutRows(const Batch& batch, bool training) {
  const int n = batch.n, local = n / ranks_, owned = static_cast<int>(owned_.size());
  const bool bug = config_.injectRoutingBug && ranks_ > 1;
  // The negative control of the parity test: the row of sample d carries the
  // bag of sample d - local (the rows of sample g go where g + local belongs).
  auto content = [&](int d) { return bug ? (d - local + n) % n : d; };
  sendRow_.assign(static_cast<size_t>(n) * maxOwned_, -1);
  recvRow_.assign(static_cast<size_t>(local) * tables_, -1);
  double used = 0;
  if (hotId_.empty()) {
    rowsPerPeer_ = static_cast<size_t>(local) * maxOwned_;
    for (int d = 0; d < n; ++d)
      for (int s = 0; s < owned; ++s)
        sendRow_[static_cast<size_t>(content(d)) * maxOwned_ + s] = static_cast<int64_t>(d) * maxOwned_ + s;
    for (int j = 0; j < ranks_; ++j)
      for (int i = 0; i < local; ++i)
        for (size_t s = 0; s < ownedBy_[j].size(); ++s)
          recvRow_[static_cast<size_t>(i) * tables_ + ownedBy_[j][s]] =
              (static_cast<int64_t>(j) * local + i) * maxOwned_ + static_cast<int64_t>(s);
    used = static_cast<double>(n) * tables_;
  } else {
    cold_.assign(static_cast<size_t>(n) * tables_, 0);
    double hotBags = 0;
    for (int d = 0; d < n; ++d)
      for (int t = 0; t < tables_; ++t) {
        uint8_t c = 0;
        for (int k = 0; k < batch.bag; ++k) c |= hotSlot_[t][static_cast<size_t>(batch.id(d, t, k))] < 0;
        cold_[static_cast<size_t>(d) * tables_ + t] = c;
        hotBags += c ? 0 : 1;
      }
    size_t most = 0;
    for (int j = 0; j < ranks_; ++j)
      for (int i = 0; i < ranks_; ++i) {
        size_t count = 0;
        for (int d = i * local; d < (i + 1) * local; ++d)
          for (int t : ownedBy_[j]) count += cold_[static_cast<size_t>(d) * tables_ + t];
        most = std::max(most, count);
        used += static_cast<double>(count);
      }
    rowsPerPeer_ = most;
    for (int i = 0; i < ranks_; ++i) {
      int64_t pos = static_cast<int64_t>(i) * static_cast<int64_t>(most);
      for (int d = i * local; d < (i + 1) * local; ++d)
        for (int s = 0; s < owned; ++s)
          if (cold_[static_cast<size_t>(d) * tables_ + owned_[s].index])
            sendRow_[static_cast<size_t>(content(d)) * maxOwned_ + s] = pos++;
    }
    for (int j = 0; j < ranks_; ++j) {
      int64_t pos = static_cast<int64_t>(j) * static_cast<int64_t>(most);
      for (int i = 0; i < local; ++i)
        for (int t : ownedBy_[j])
          if (cold_[(static_cast<size_t>(rank_) * local + i) * tables_ + t])
            recvRow_[static_cast<size_t>(i) * tables_ + t] = pos++;
    }
    if (training) hotBags_ += hotBags;
  }
  if (training) {
    bagsSeen_ += static_cast<double>(n) * tables_;
    rowsUsed_ += used;
    rowsSent_ += static_cast<double>(rowsPerPeer_) * ranks_ * ranks_;
  }
}

bool Trainer::forwardExchange(const Batch& batch, bool training, bool exact, std::string* error) {
  layoutRows(batch, training);
  const int dim = config_.dim;
  const int local = batch.n / ranks_;
  const size_t rowsPerPeer = rowsPerPeer_;
  const size_t total = rowsPerPeer * ranks_ * dim;
  send_.assign(total, 0.0f);
  recv_.resize(total);
  for (size_t s = 0; s < owned_.size(); ++s) {
    const Table& table = owned_[s];
    const std::vector<int32_t>* hot = hotId_.empty() ? nullptr : &hotSlot_[table.index];
    for (int g = 0; g < batch.n; ++g) {
      const int64_t r = sendRow_[static_cast<size_t>(g) * maxOwned_ + s];
      if (r < 0) continue;
      float* row = &send_[static_cast<size_t>(r) * dim];
      for (int k = 0; k < batch.bag; ++k) {
        const int32_t id = batch.id(g, table.index, k);
        if (hot != nullptr && (*hot)[static_cast<size_t>(id)] >= 0) continue;  // summed by the receiver
        const float* w = &table.weights[static_cast<size_t>(id) * dim];
        for (int d = 0; d < dim; ++d) row[d] += w[d];
      }
    }
  }
  const double t0 = MPI_Wtime();
  spcclResult_t r = spcclSuccess;
  if (rowsPerPeer == 0) {
    // Every bag of the batch is hot: nothing to send (every rank knows it).
  } else if (config_.compressed && config_.mpDensity < 1.0f && !exact) {
    r = spcclAlltoAllRowsCompressed(send_.data(), recv_.data(), rowsPerPeer, static_cast<size_t>(dim), spcclFloat32,
                                    config_.mpDensity, training ? &selection_ : nullptr, comm_, nullptr);
    if (r != spcclSuccess) return fail("spcclAlltoAllRowsCompressed", r, error);
  } else {
    spcclStats_t before{}, after{};
    spcclCommGetStats(comm_, &before);
    r = spcclAlltoAll(send_.data(), recv_.data(), rowsPerPeer * dim, spcclFloat32, comm_, nullptr);
    if (r != spcclSuccess) return fail("spcclAlltoAll", r, error);
    spcclCommGetStats(comm_, &after);
    // Exact means every entry of every row in fp32: spcclAlltoAll compresses
    // when SPCCL_ALLTOALL_DENSITY < 1 is set, so check what it did.
    const uint64_t block = static_cast<uint64_t>(rowsPerPeer) * static_cast<uint64_t>(dim) * sizeof(float);
    const uint64_t expect = static_cast<uint64_t>(ranks_ - 1) * block;
    // (Recorded, not returned: evaluate() fails on every rank together.)
    if (exact && exactMismatch_.empty() &&
        (after.compressedCalls != before.compressedCalls || after.bytesSent - before.bytesSent != expect ||
         after.denseBytes - before.denseBytes != expect))
      exactMismatch_ = "the exact exchange was not exact: spcclAlltoAll sent " +
                       std::to_string(after.bytesSent - before.bytesSent) + " bytes in " +
                       std::to_string(after.compressedCalls - before.compressedCalls) + " compressed calls, expected " +
                       std::to_string(expect) + " bytes uncompressed (is SPCCL_ALLTOALL_DENSITY set?)";
  }
  exchangeSeconds_ = MPI_Wtime() - t0;
  // Unpack into emb_ (local x tables*dim, table-major per sample): the cold
  // sum from the owner, then the hot rows of the bag from the replicas.
  emb_.resize(local, static_cast<Eigen::Index>(tables_) * dim);
  for (int i = 0; i < local; ++i)
    for (int t = 0; t < tables_; ++t) {
      float* dst = emb_.row(i).data() + static_cast<size_t>(t) * dim;
      const int64_t row = recvRow_[static_cast<size_t>(i) * tables_ + t];
      if (row >= 0) std::memcpy(dst, &recv_[static_cast<size_t>(row) * dim], sizeof(float) * dim);
      else std::memset(dst, 0, sizeof(float) * dim);
      if (hotId_.empty()) continue;
      for (int k = 0; k < batch.bag; ++k) {
        const int32_t slot = hotSlot_[t][static_cast<size_t>(batch.id(rank_ * local + i, t, k))];
        if (slot < 0) continue;
        const float* w = &hotW_[static_cast<size_t>(hotOffset_[t] + slot) * dim];
        for (int d = 0; d < dim; ++d) dst[d] += w[d];
      }
    }
  return true;
}

void Trainer::forwardLocal(const Batch& batch, int firstLocal) {
  const int local = static_cast<int>(emb_.rows());
  denseIn_ = ConstMatrixMap(&batch.dense[static_cast<size_t>(firstLocal) * kDenseFeatures], local, kDenseFeatures);
  const Matrix& z = bottom_.forward(denseIn_);
  interactForward(z, emb_, tables_, config_.dim, &inter_);
  top_.forward(inter_);
}

namespace {

// Row-wise Adagrad (or SGD) on one row with gradient g.
void updateRow(Optimizer optimizer, float lr, int dim, const float* g, float* w, float* accum) {
  float sq = 0;
  for (int d = 0; d < dim; ++d) sq += g[d] * g[d];
  if (sq == 0.0f) return;
  float step = lr;
  if (optimizer == Optimizer::kAdagrad) {
    *accum += sq / static_cast<float>(dim);
    step = lr / (std::sqrt(*accum) + 1e-8f);
  }
  for (int d = 0; d < dim; ++d) w[d] -= step * g[d];
}

// Adds a gradient row to key's sum: sums in first-seen key order in rows,
// pos[key] its position (-1: not yet; the caller resets the keys it set).
template <typename Key>
void addToKeyedSum(Key key, const float* grad, int dim, std::vector<int32_t>* pos, std::vector<Key>* keys,
                   std::vector<float>* rows) {
  int32_t& p = (*pos)[static_cast<size_t>(key)];
  if (p < 0) {
    p = static_cast<int32_t>(keys->size());
    keys->push_back(key);
    rows->resize(rows->size() + static_cast<size_t>(dim), 0.0f);
  }
  float* acc = &(*rows)[static_cast<size_t>(p) * static_cast<size_t>(dim)];
  for (int d = 0; d < dim; ++d) acc[d] += grad[d];
}

}  // namespace

// Sparse row updates of the owned tables from the gradients received for the
// global batch (hot ids aside: their replicas are updated by updateHot).
void Trainer::updateOwned(const Batch& batch) {
  const int dim = config_.dim;
  for (size_t sl = 0; sl < owned_.size(); ++sl) {
    Table& table = owned_[sl];
    const std::vector<int32_t>* hot = hotId_.empty() ? nullptr : &hotSlot_[table.index];
    // Every cold occurrence of this table's ids with its gradient, in global
    // sample order.
    const auto forEachOccurrence = [&](auto&& fn) {
      for (int g = 0; g < batch.n; ++g) {
        const int64_t r = sendRow_[static_cast<size_t>(g) * maxOwned_ + sl];
        if (r < 0) continue;
        const float* grad = &gradRecv_[static_cast<size_t>(r) * dim];
        for (int k = 0; k < batch.bag; ++k) {
          const int32_t id = batch.id(g, table.index, k);
          if (hot != nullptr && (*hot)[static_cast<size_t>(id)] >= 0) continue;
          fn(id, grad);
        }
      }
    };
    if (!config_.mergedUpdates) {  // one update per occurrence
      forEachOccurrence([&](int32_t id, const float* grad) {
        updateRow(config_.optimizer, config_.embLr, dim, grad, &table.weights[static_cast<size_t>(id) * dim],
                  &table.accum[static_cast<size_t>(id)]);
      });
      continue;
    }
    // Merged: each id's gradients summed in global sample order, then one
    // update per distinct id.
    if (mergedPos_.size() < static_cast<size_t>(table.rows)) mergedPos_.resize(static_cast<size_t>(table.rows), -1);
    mergedIds_.clear();
    merged_.clear();
    forEachOccurrence(
        [&](int32_t id, const float* grad) { addToKeyedSum(id, grad, dim, &mergedPos_, &mergedIds_, &merged_); });
    for (size_t p = 0; p < mergedIds_.size(); ++p) {
      const int32_t id = mergedIds_[p];
      mergedPos_[static_cast<size_t>(id)] = -1;
      updateRow(config_.optimizer, config_.embLr, dim, &merged_[p * dim], &table.weights[static_cast<size_t>(id) * dim],
                &table.accum[static_cast<size_t>(id)]);
    }
  }
}

// The hot rows' gradients: this rank's samples merged per row (in sample
// order), summed over ranks by the row-sparse allreduce (in rank order,
// bitwise identical everywhere), then one update per row on every replica.
bool Trainer::updateHot(const Batch& batch, std::string* error) {
  const int dim = config_.dim;
  hotKeys_.clear();
  hotGrad_.clear();
  for (int i = 0; i < local_; ++i)
    for (int t = 0; t < tables_; ++t)
      for (int k = 0; k < batch.bag; ++k) {
        const int32_t slot = hotSlot_[t][static_cast<size_t>(batch.id(rank_ * local_ + i, t, k))];
        if (slot < 0) continue;
        const int64_t key = hotOffset_[t] + slot;
        addToKeyedSum(key, demb_.row(i).data() + static_cast<size_t>(t) * dim, dim, &hotPos_, &hotKeys_, &hotGrad_);
      }
  for (int64_t key : hotKeys_) hotPos_[static_cast<size_t>(key)] = -1;
  if (config_.injectHotBug && ranks_ > 1) {
    // The negative control: no allreduce, each replica follows its own rank's samples.
    for (size_t o = 0; o < hotKeys_.size(); ++o) {
      const size_t key = static_cast<size_t>(hotKeys_[o]);
      updateRow(config_.optimizer, config_.embLr, dim, &hotGrad_[o * dim], &hotW_[key * dim], &hotAccum_[key]);
    }
    return true;
  }
  const size_t capacity = hotId_.size();
  outKeys_.resize(capacity);
  outGrad_.resize(capacity * dim);
  size_t n = 0;
  const spcclResult_t r =
      spcclAllReduceRowSparse(hotKeys_.data(), hotGrad_.data(), hotKeys_.size(), static_cast<size_t>(dim), spcclFloat32,
                              outKeys_.data(), outGrad_.data(), capacity, &n, comm_, nullptr);
  if (r != spcclSuccess) return fail("spcclAllReduceRowSparse", r, error);
  for (size_t o = 0; o < n; ++o) {
    const size_t key = static_cast<size_t>(outKeys_[o]);
    updateRow(config_.optimizer, config_.embLr, dim, &outGrad_[o * dim], &hotW_[key * dim], &hotAccum_[key]);
  }
  return true;
}

bool Trainer::step(int s, double* lossSum, Bytes* bytes, Timing* timing, std::string* error) {
  Batch batch;
  source_.train(static_cast<uint64_t>(s) * config_.batch, config_.batch, &batch);
  const int dim = config_.dim;
  const int first = rank_ * local_;

  spcclStats_t st0{}, st1{}, st2{}, st3{}, st4{};
  unsigned long long m0 = 0, m1 = 0, m2 = 0, m3 = 0, m4 = 0;
  spcclCommGetStats(comm_, &st0);
  if (monitor_) m0 = monitor_->sent();
  if (!forwardExchange(batch, true, s < config_.mpDenseSteps, error)) return false;
  if (monitor_) m1 = monitor_->sent();
  spcclCommGetStats(comm_, &st1);
  timing->mp += exchangeSeconds_;

  forwardLocal(batch, first);
  bceForwardBackward(top_.layers().back().output, &batch.labels[first], 1.0f / static_cast<float>(config_.batch),
                     lossSum, &dlogit_, &probs_);
  dinter_ = top_.backward(dlogit_);
  interactBackward(bottom_.layers().back().output, emb_, tables_, dim, dinter_, &dz_, &demb_);
  bottom_.backward(dz_);

  // Embedding gradients back in the forward's receive layout.
  const size_t total = rowsPerPeer_ * ranks_ * dim;
  gradSend_.assign(total, 0.0f);
  gradRecv_.resize(total);
  for (int i = 0; i < local_; ++i)
    for (int t = 0; t < tables_; ++t) {
      const int64_t row = recvRow_[static_cast<size_t>(i) * tables_ + t];
      if (row >= 0)
        std::memcpy(&gradSend_[static_cast<size_t>(row) * dim], demb_.row(i).data() + static_cast<size_t>(t) * dim,
                    sizeof(float) * dim);
    }
  spcclCommGetStats(comm_, &st2);
  if (monitor_) m2 = monitor_->sent();
  double t0 = MPI_Wtime();
  spcclResult_t r;
  if (selection_ != nullptr) {
    r = spcclAlltoAllRowsBackward(gradSend_.data(), gradRecv_.data(), selection_, nullptr);
    spcclSelectionDestroy(selection_);
    selection_ = nullptr;
    if (r != spcclSuccess) return fail("spcclAlltoAllRowsBackward", r, error);
  } else if (rowsPerPeer_ > 0) {
    r = spcclAlltoAll(gradSend_.data(), gradRecv_.data(), total / ranks_, spcclFloat32, comm_, nullptr);
    if (r != spcclSuccess) return fail("spcclAlltoAll (backward)", r, error);
  }
  spcclStats_t hot0{}, hot1{};
  spcclCommGetStats(comm_, &hot0);
  if (!hotId_.empty() && !updateHot(batch, error)) return false;
  spcclCommGetStats(comm_, &hot1);
  timing->mp += MPI_Wtime() - t0;
  if (monitor_) m3 = monitor_->sent();
  spcclCommGetStats(comm_, &st3);

  // Data parallel: sum the MLP gradients (already scaled by 1/global batch).
  t0 = MPI_Wtime();
  size_t c = 0;
  for (Mlp* mlp : {&bottom_, &top_})
    for (Layer& layer : mlp->layers()) {
      r = spcclAllReduceCompressed(layer.grad.data(), reduced_[c].data(), spcclSum, compressors_[c], nullptr);
      if (r != spcclSuccess) return fail("spcclAllReduceCompressed", r, error);
      layer.grad.swap(reduced_[c]);
      ++c;
    }
  timing->dp += MPI_Wtime() - t0;
  if (monitor_) m4 = monitor_->sent();
  spcclCommGetStats(comm_, &st4);

  bottom_.step(config_.optimizer, config_.lr);
  top_.step(config_.optimizer, config_.lr);
  updateOwned(batch);

  const Bytes mpF = statsDelta(st0, st1, false), mpB = statsDelta(st2, st3, false), dp = statsDelta(st3, st4, true);
  bytes->mp += mpF.mp + mpB.mp;
  bytes->mpDense += mpF.mpDense + mpB.mpDense;
  bytes->dp += dp.dp;
  bytes->dpDense += dp.dpDense;
  bytes->mpHot += static_cast<double>(hot1.bytesSent - hot0.bytesSent);
  if (monitor_) {
    bytes->mpiMp += static_cast<double>((m1 - m0) + (m3 - m2));
    bytes->mpiDp += static_cast<double>(m4 - m3);
  }
  return true;
}

bool Trainer::evaluate(RunResult* result, bool exact, std::string* error) {
  const uint64_t total = source_.evalSize() / ranks_ * ranks_;
  if (total == 0) {
    *error = "no held-out samples to evaluate (need at least one per rank)";
    return false;
  }
  std::vector<float> labels, mine, all, exactProbs;
  std::vector<float>& probs = exact ? exactProbs : result->evalProbs;
  Batch batch;
  spcclStats_t st0{}, st1{};
  double mpBytes = 0, mpDense = 0;
  for (uint64_t first = 0; first < total;) {
    const int n = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(config_.batch), total - first));
    source_.eval(first, n, &batch);
    spcclCommGetStats(comm_, &st0);
    if (!forwardExchange(batch, false, exact, error)) return false;
    spcclCommGetStats(comm_, &st1);
    mpBytes += static_cast<double>(st1.bytesSent - st0.bytesSent);
    mpDense += static_cast<double>(st1.denseBytes - st0.denseBytes);
    const int local = n / ranks_;
    forwardLocal(batch, rank_ * local);
    const Matrix& logits = top_.layers().back().output;
    mine.resize(static_cast<size_t>(local) * 2);
    for (int i = 0; i < local; ++i) {
      mine[i] = 1.0f / (1.0f + std::exp(-logits(i, 0)));
      mine[static_cast<size_t>(local) + i] = batch.labels[static_cast<size_t>(rank_) * local + i];
    }
    // Gathered in global sample order: chunk by chunk, rank by rank.
    all.resize(rank_ == 0 ? static_cast<size_t>(n) * 2 : 0);
    MPI_Gather(mine.data(), 2 * local, MPI_FLOAT, all.data(), 2 * local, MPI_FLOAT, 0, mpiComm_);
    if (rank_ == 0)
      for (int j = 0; j < ranks_; ++j)
        for (int i = 0; i < local; ++i) {
          probs.push_back(all[static_cast<size_t>(j) * 2 * local + i]);
          labels.push_back(all[static_cast<size_t>(j) * 2 * local + local + i]);
        }
    first += static_cast<uint64_t>(n);
  }
  double metrics[7] = {0, 0, 0, -1, 0, 0, 0};
  if (rank_ == 0) {
    const std::vector<float>& p = probs;
    double ll = 0, correct = 0, positives = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      const double q = std::min(std::max(static_cast<double>(p[i]), 1e-7), 1.0 - 1e-7);
      ll -= labels[i] > 0.5f ? std::log(q) : std::log(1.0 - q);
      correct += (p[i] >= 0.5f) == (labels[i] > 0.5f);
      positives += labels[i] > 0.5f;
    }
    metrics[0] = computeAuc(p, labels);
    metrics[1] = ll / static_cast<double>(p.size());
    metrics[2] = correct / static_cast<double>(p.size());
    metrics[4] = positives / static_cast<double>(p.size());
    if (!exact) {
      const std::vector<float> teacher = source_.evalTeacherScores(0, static_cast<int>(total));
      if (!teacher.empty()) metrics[3] = computeAuc(teacher, labels);
    }
  }
  int mismatch = exactMismatch_.empty() ? 0 : 1, anyMismatch = 0;
  MPI_Allreduce(&mismatch, &anyMismatch, 1, MPI_INT, MPI_MAX, mpiComm_);
  if (anyMismatch) {
    *error = mismatch ? exactMismatch_ : "another rank's exact exchange was not exact";
    return false;
  }
  MPI_Bcast(metrics, 5, MPI_DOUBLE, 0, mpiComm_);
  const double evalBytes[2] = {mpBytes, mpDense};
  MPI_Allreduce(evalBytes, &metrics[5], 2, MPI_DOUBLE, MPI_SUM, mpiComm_);
  if (exact) {
    result->servedExactDone = true;
    result->servedExact.auc = metrics[0];
    result->servedExact.logloss = metrics[1];
    result->servedExact.accuracy = metrics[2];
    result->servedExact.mpBytes = metrics[5] / ranks_;
    result->servedExact.mpDense = metrics[6] / ranks_;
    return true;
  }
  result->evalMpBytes = metrics[5] / ranks_;
  result->evalMpDense = metrics[6] / ranks_;
  result->auc = metrics[0];
  result->logloss = metrics[1];
  result->accuracy = metrics[2];
  result->teacherAuc = metrics[3];
  result->positiveRate = metrics[4];
  return true;
}

void Trainer::checksums(RunResult* result) {
  // Two checksums per table: the sum of its weights and a position-weighted
  // sum (a row moved to the wrong place changes the second).
  // The hot rows' replicas first go back into their owners' tables.
  const size_t dim = static_cast<size_t>(config_.dim);
  for (Table& t : owned_)
    for (int64_t key = hotOffset_[t.index]; key < hotOffset_[t.index + 1]; ++key) {
      const size_t id = static_cast<size_t>(hotId_[static_cast<size_t>(key)]);
      std::memcpy(&t.weights[id * dim], &hotW_[static_cast<size_t>(key) * dim], sizeof(float) * dim);
      t.accum[id] = hotAccum_[static_cast<size_t>(key)];
    }
  std::vector<double> mine(static_cast<size_t>(tables_) * 2, 0.0), all(mine.size(), 0.0);
  for (const Table& t : owned_) {
    double sum = 0, weighted = 0;
    for (size_t i = 0; i < t.weights.size(); ++i) {
      sum += t.weights[i];
      weighted += t.weights[i] * static_cast<double>(static_cast<int>(mix(i) % 7) - 3);
    }
    mine[static_cast<size_t>(t.index) * 2] = sum;
    mine[static_cast<size_t>(t.index) * 2 + 1] = weighted;
  }
  MPI_Reduce(mine.data(), all.data(), static_cast<int>(mine.size()), MPI_DOUBLE, MPI_SUM, 0, mpiComm_);
  result->tableChecksums = rank_ == 0 ? all : std::vector<double>{};

  std::vector<float> params;
  for (Mlp* mlp : {&bottom_, &top_})
    for (const Layer& layer : mlp->layers()) params.insert(params.end(), layer.param.begin(), layer.param.end());
  // Replicas must be bitwise identical: compare every rank's parameters with rank 0's.
  // The hot rows' replicas too.
  params.insert(params.end(), hotW_.begin(), hotW_.end());
  std::vector<float> root(params);
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, mpiComm_);
  int same = std::memcmp(root.data(), params.data(), params.size() * sizeof(float)) == 0 ? 1 : 0, allSame = 0;
  MPI_Allreduce(&same, &allSame, 1, MPI_INT, MPI_MIN, mpiComm_);
  result->replicasIdentical = allSame == 1;
  params.resize(params.size() - hotW_.size());
  if (rank_ == 0) result->mlpParams = std::move(params);
}

RunResult Trainer::run(const std::string& label) {
  RunResult result;
  std::string error;
  bool ok = setup(&error);
  Bytes bytes, window;
  Timing timing;
  double lossSum = 0, windowLoss = 0;
  const double start = MPI_Wtime();
  double windowStart = start;
  int windowSteps = 0;
  if (monitor_) bytes.mpiDp = bytes.mpiMp = 0;
  for (int s = 0; ok && s < config_.steps; ++s) {
    Bytes b;
    if (monitor_) b.mpiDp = b.mpiMp = 0;
    double loss = 0;
    ok = step(s, &loss, &b, &timing, &error);
    lossSum += loss;
    windowLoss += loss;
    ++windowSteps;
    for (Bytes* acc : {&bytes, &window}) {
      acc->dp += b.dp;
      acc->dpDense += b.dpDense;
      acc->mp += b.mp;
      acc->mpDense += b.mpDense;
      acc->mpHot += b.mpHot;
      acc->mpiDp += b.mpiDp;
      acc->mpiMp += b.mpiMp;
    }
    // Every rank takes part in the progress reduction, so a rank that failed
    // stops the others here instead of leaving them in a collective.
    const bool last = s + 1 == config_.steps;
    if (!ok || (config_.printEvery > 0 && ((s + 1) % config_.printEvery == 0 || last))) {
      double v[5] = {windowLoss, window.dp, window.mp, ok ? 0.0 : 1.0, 0}, sum[5];
      MPI_Allreduce(v, sum, 5, MPI_DOUBLE, MPI_SUM, mpiComm_);
      if (sum[3] > 0) {
        ok = false;
        if (error.empty()) error = "another rank failed";
        break;
      }
      const double now = MPI_Wtime(), elapsed = now - start;
      if (rank_ == 0 && !config_.quiet) {
        const double eta = elapsed / (s + 1) * (config_.steps - s - 1);
        std::printf(
            "[%s] step %5d/%d  loss %.5f  %8.0f samples/s  bytes/step/rank DP %10.0f  MP %10.0f  elapsed %6.1fs  ETA "
            "%6.1fs\n",
            label.c_str(), s + 1, config_.steps, sum[0] / (static_cast<double>(windowSteps) * config_.batch),
            windowSteps * static_cast<double>(config_.batch) / (now - windowStart), sum[1] / (ranks_ * windowSteps),
            sum[2] / (ranks_ * windowSteps), elapsed, eta);
        std::fflush(stdout);
      }
      window = Bytes{};
      if (monitor_) window.mpiDp = window.mpiMp = 0;
      windowLoss = 0;
      windowSteps = 0;
      windowStart = now;
    }
  }
  const double loopSeconds = MPI_Wtime() - start;
  {
    int bad = ok ? 0 : 1, anyBad = 0;
    MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, mpiComm_);
    if (anyBad && ok) {
      ok = false;
      error = "another rank failed";
    }
  }
  if (ok) {
    double v[10] = {bytes.dp,    bytes.dpDense, bytes.mp,  bytes.mpDense, bytes.mpiDp,
                    bytes.mpiMp, lossSum,       timing.mp, timing.dp,     bytes.mpHot},
           sum[10];
    MPI_Allreduce(v, sum, 10, MPI_DOUBLE, MPI_SUM, mpiComm_);
    const double per = static_cast<double>(ranks_) * std::max(config_.steps, 1);
    result.bytes.dp = sum[0] / per;
    result.bytes.dpDense = sum[1] / per;
    result.bytes.mp = sum[2] / per;
    result.bytes.mpDense = sum[3] / per;
    result.bytes.mpiDp = monitor_ ? sum[4] / per : -1;
    result.bytes.mpiMp = monitor_ ? sum[5] / per : -1;
    result.finalTrainLoss = sum[6] / (static_cast<double>(std::max(config_.steps, 1)) * config_.batch);
    result.comm.mp = sum[7] / per;
    result.bytes.mpHot = sum[9] / per;
    result.comm.dp = sum[8] / per;
    result.hotRowsTotal = static_cast<int64_t>(hotId_.size());
    result.hotBagShare = bagsSeen_ > 0 ? hotBags_ / bagsSeen_ : 0.0;
    result.padShare = rowsSent_ > 0 ? 1.0 - rowsUsed_ / rowsSent_ : 0.0;
    MPI_Allreduce(&loopSeconds, &result.stepSeconds, 1, MPI_DOUBLE, MPI_MAX, mpiComm_);
    result.stepSeconds /= std::max(config_.steps, 1);
    ok = evaluate(&result, false, &error);
    // Trained with a lossy exchange: the same model served exactly as well.
    if (ok && config_.compressed && config_.mpDensity < 1.0f) ok = evaluate(&result, true, &error);
    int bad = ok ? 0 : 1, anyBad = 0;
    MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, mpiComm_);
    if (anyBad && ok) {
      ok = false;
      error = "another rank failed in evaluation";
    }
  }
  if (ok) checksums(&result);
  if (selection_ != nullptr) spcclSelectionDestroy(selection_);
  selection_ = nullptr;
  for (spcclCompressor_t c : compressors_) spcclCompressorDestroy(c);
  compressors_.clear();
  result.ok = ok;
  result.error = error;
  return result;
}

}  // namespace dlrm
