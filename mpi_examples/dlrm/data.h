// Criteo-shaped data for the DLRM example: a seeded synthetic generator with
// a planted teacher (so there is signal to learn and a known ceiling), and a
// reader for the public Criteo TSV format. Both hand out samples by a global
// index, so every rank sees the same global batch whatever the rank count.
#ifndef SPCCL_DLRM_DATA_H_
#define SPCCL_DLRM_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

namespace dlrm {

constexpr int kDenseFeatures = 13;      // Criteo's integer columns
constexpr int kCriteoCategorical = 26;  // Criteo's categorical columns

// n samples: dense[n x 13] (already log(1 + max(x, 0))), ids[n x tables x bag],
// labels[n] (0 or 1).
struct Batch {
  int n = 0;
  int tables = 0;
  int bag = 1;
  std::vector<float> dense;
  std::vector<int32_t> ids;
  std::vector<float> labels;
  void resize(int samples, int numTables, int bagSize) {
    n = samples;
    tables = numTables;
    bag = bagSize;
    dense.assign(static_cast<size_t>(n) * kDenseFeatures, 0.0f);
    ids.assign(static_cast<size_t>(n) * tables * bag, 0);
    labels.assign(static_cast<size_t>(n), 0.0f);
  }
  int32_t id(int sample, int table, int k) const {
    return ids[(static_cast<size_t>(sample) * tables + table) * bag + k];
  }
};

class Source {
 public:
  virtual ~Source() = default;
  // Training samples [first, first + n) (the source wraps around as it needs).
  virtual void train(uint64_t first, int n, Batch* out) const = 0;
  // Held-out samples [first, first + n), first + n <= evalSize().
  virtual void eval(uint64_t first, int n, Batch* out) const = 0;
  virtual uint64_t evalSize() const = 0;
  // Noise-free teacher probability of each held-out sample (synthetic data
  // only): the ceiling any model can reach. Empty when unknown.
  virtual std::vector<float> evalTeacherScores(uint64_t first, int n) const = 0;
};

struct SyntheticConfig {
  uint64_t seed = 1;
  std::vector<int64_t> tableSizes;
  int bag = 1;         // ids per table per sample (sum pooling)
  double zipf = 1.05;  // exponent of the id distribution
  double noise = 0.5;  // std-dev of the Gaussian noise on the teacher's logit
  uint64_t evalSamples = 32768;
};

// Planted teacher (see docs/DLRM.md): per table t and id, a hidden vector
// h_t(id) in R^4 derived from a hash (no memory). The logit is
//   bias + sum_t a_t <u, h_t(id)> + (1/sqrt(#pairs)) sum_{pairs} <z_i, z_j> + noise
// with z = [W_d x, h_0, ..., h_7] (the dense projection and the first 8 tables)
// and the label is Bernoulli(sigmoid(logit)).
class SyntheticSource : public Source {
 public:
  explicit SyntheticSource(SyntheticConfig config);
  void train(uint64_t first, int n, Batch* out) const override;
  void eval(uint64_t first, int n, Batch* out) const override;
  uint64_t evalSize() const override { return config_.evalSamples; }
  std::vector<float> evalTeacherScores(uint64_t first, int n) const override;
  // Writes `rows` training samples as Criteo TSV (for trying --data on the same signal).
  bool writeTsv(const std::string& path, uint64_t rows, std::string* error) const;

 private:
  void sample(uint64_t index, Batch* out, int slot, float* teacherProb) const;
  SyntheticConfig config_;
  std::vector<float> tableWeight_;  // a_t
  std::vector<float> denseProj_;    // W_d: 4 x 13
  std::vector<float> u_;            // 4
};

struct CriteoCounts {
  uint64_t lines = 0;
  uint64_t parsed = 0;
  uint64_t truncated = 0;       // fewer than 40 tab-separated fields (empty lines included)
  uint64_t extraFields = 0;     // more than 40
  uint64_t badLabel = 0;        // label not 0 or 1
  uint64_t badInteger = 0;      // an integer column that is not an integer
  uint64_t badCategorical = 0;  // a categorical column that is not hexadecimal
  uint64_t malformed() const { return truncated + extraFields + badLabel + badInteger + badCategorical; }
  std::string summary() const;
};

// Loads up to maxRows parsed rows of a Criteo TSV file (label, 13 integer
// columns, 26 hashed categorical columns in hex; empty = missing). Rows that do
// not parse are counted by reason and skipped. Categorical column c maps to
// table c mod tables; hex value h becomes id 1 + h mod (size - 1), missing = 0.
// The last evalFraction of the parsed rows are held out.
class CriteoSource : public Source {
 public:
  // Returns false (with *error set) only when the file cannot be opened.
  bool load(const std::string& path, const std::vector<int64_t>& tableSizes, uint64_t maxRows, double evalFraction,
            std::string* error);
  const CriteoCounts& counts() const { return counts_; }
  uint64_t trainSize() const { return trainRows_; }
  void train(uint64_t first, int n, Batch* out) const override;
  void eval(uint64_t first, int n, Batch* out) const override;
  uint64_t evalSize() const override { return evalRows_; }
  std::vector<float> evalTeacherScores(uint64_t, int) const override { return {}; }

 private:
  void copyRow(uint64_t row, Batch* out, int slot) const;
  std::vector<int64_t> tableSizes_;
  CriteoCounts counts_;
  uint64_t trainRows_ = 0, evalRows_ = 0;
  std::vector<float> dense_;
  std::vector<int32_t> cats_;  // rows x 26
  std::vector<float> labels_;
};

// Parses one line (without its newline). Returns true and fills the outputs
// on success; otherwise increments the matching counter in *counts.
bool parseCriteoLine(const char* begin, const char* end, float* dense, uint32_t* cats, float* label,
                     CriteoCounts* counts);

// "300:1000000" (log-spaced over `tables`) or "a,b,c,..." (one per table).
bool parseTableSizes(const std::string& spec, int tables, std::vector<int64_t>* out, std::string* error);

}  // namespace dlrm

#endif  // SPCCL_DLRM_DATA_H_
