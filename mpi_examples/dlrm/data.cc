#include "data.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace dlrm {
namespace {

constexpr int kTeacherDim = 4;
constexpr int kTeacherPairTables = 8;  // tables whose hidden vectors interact pairwise
constexpr uint64_t kEvalStream = 1ull << 62;

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Counter-based stream: sample i's draws depend only on (seed, i), never on
// which rank generates it or in what order.
struct Rng {
  uint64_t state;
  uint64_t next() { return splitmix(state++ * 0x2545f4914f6cdd1dull); }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {
    const double u1 = std::max(uniform(), 1e-300), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// Zipf-like rank in [0, n) by inverting the continuous power-law CDF on [1, n+1).
int64_t zipfRank(double u, int64_t n, double s) {
  const double top = static_cast<double>(n) + 1.0;
  double x;
  if (std::fabs(s - 1.0) < 1e-9) {
    x = std::exp(u * std::log(top));
  } else {
    const double a = 1.0 - s;
    x = std::pow(u * (std::pow(top, a) - 1.0) + 1.0, 1.0 / a);
  }
  const int64_t r = static_cast<int64_t>(x) - 1;
  return std::min<int64_t>(std::max<int64_t>(r, 0), n - 1);
}

float hiddenValue(uint64_t seed, int table, int64_t id, int k) {
  const uint64_t h = splitmix(seed ^ splitmix((static_cast<uint64_t>(table) << 40) ^ static_cast<uint64_t>(id) ^
                                              (static_cast<uint64_t>(k) << 58)));
  // uniform(-1, 1) * sqrt(3): unit variance
  return static_cast<float>((static_cast<double>(h >> 11) * (2.0 / 9007199254740992.0) - 1.0) * 1.7320508075688772);
}

double denseMean(int k) { return 0.5 + 0.15 * k; }

}  // namespace

SyntheticSource::SyntheticSource(SyntheticConfig config) : config_(std::move(config)) {
  Rng rng{splitmix(config_.seed ^ 0x7e4c11e5ull)};
  const int tables = static_cast<int>(config_.tableSizes.size());
  tableWeight_.resize(tables);
  for (int t = 0; t < tables; ++t) tableWeight_[t] = static_cast<float>(0.6 * std::pow(0.9, t));
  denseProj_.resize(kTeacherDim * kDenseFeatures);
  for (float& w : denseProj_) w = static_cast<float>(rng.normal() / std::sqrt(static_cast<double>(kDenseFeatures)));
  u_.resize(kTeacherDim);
  double norm = 0;
  for (float& v : u_) {
    v = static_cast<float>(rng.normal());
    norm += static_cast<double>(v) * v;
  }
  for (float& v : u_) v = static_cast<float>(v / std::sqrt(norm));
}

void SyntheticSource::sample(uint64_t index, Batch* out, int slot, float* teacherProb) const {
  Rng rng{splitmix(config_.seed * 0x9e3779b97f4a7c15ull ^ splitmix(index)) << 8};
  const int tables = out->tables;
  float* dense = &out->dense[static_cast<size_t>(slot) * kDenseFeatures];
  for (int k = 0; k < kDenseFeatures; ++k) {
    const double count = std::floor(std::exp(denseMean(k) + rng.normal()));
    dense[k] = static_cast<float>(std::log1p(count));
  }
  float z[kTeacherPairTables + 1][kTeacherDim];
  for (int d = 0; d < kTeacherDim; ++d) {
    double v = 0;
    for (int k = 0; k < kDenseFeatures; ++k) v += denseProj_[d * kDenseFeatures + k] * (dense[k] - denseMean(k));
    z[0][d] = static_cast<float>(v);
  }
  double logit = -1.5;
  for (int t = 0; t < tables; ++t) {
    const int64_t size = config_.tableSizes[t];
    float h[kTeacherDim] = {0, 0, 0, 0};
    for (int b = 0; b < out->bag; ++b) {
      const int64_t rank = zipfRank(rng.uniform(), size, config_.zipf);
      // Hot ids scattered over the table, not all at its start.
      const int64_t id =
          static_cast<int64_t>(splitmix(static_cast<uint64_t>(rank) ^ (static_cast<uint64_t>(t) << 48) ^ config_.seed) %
                               static_cast<uint64_t>(size));
      out->ids[(static_cast<size_t>(slot) * tables + t) * out->bag + b] = static_cast<int32_t>(id);
      for (int d = 0; d < kTeacherDim; ++d) h[d] += hiddenValue(config_.seed, t, id, d) / static_cast<float>(out->bag);
    }
    double first = 0;
    for (int d = 0; d < kTeacherDim; ++d) first += u_[d] * h[d];
    logit += tableWeight_[t] * first;
    if (t < kTeacherPairTables)
      for (int d = 0; d < kTeacherDim; ++d) z[t + 1][d] = h[d];
  }
  const int vectors = 1 + std::min(tables, kTeacherPairTables);
  double pairs = 0;
  int npairs = 0;
  for (int i = 0; i < vectors; ++i)
    for (int j = i + 1; j < vectors; ++j, ++npairs)
      for (int d = 0; d < kTeacherDim; ++d) pairs += static_cast<double>(z[i][d]) * z[j][d];
  if (npairs > 0) logit += 0.5 * pairs / std::sqrt(static_cast<double>(npairs));
  if (teacherProb != nullptr) *teacherProb = static_cast<float>(1.0 / (1.0 + std::exp(-logit)));
  const double noisy = logit + config_.noise * rng.normal();
  out->labels[slot] = rng.uniform() < 1.0 / (1.0 + std::exp(-noisy)) ? 1.0f : 0.0f;
}

void SyntheticSource::train(uint64_t first, int n, Batch* out) const {
  out->resize(n, static_cast<int>(config_.tableSizes.size()), config_.bag);
  for (int i = 0; i < n; ++i) sample(first + static_cast<uint64_t>(i), out, i, nullptr);
}

void SyntheticSource::eval(uint64_t first, int n, Batch* out) const {
  out->resize(n, static_cast<int>(config_.tableSizes.size()), config_.bag);
  for (int i = 0; i < n; ++i) sample(kEvalStream + first + static_cast<uint64_t>(i), out, i, nullptr);
}

std::vector<float> SyntheticSource::evalTeacherScores(uint64_t first, int n) const {
  Batch b;
  b.resize(n, static_cast<int>(config_.tableSizes.size()), config_.bag);
  std::vector<float> p(n);
  for (int i = 0; i < n; ++i) sample(kEvalStream + first + static_cast<uint64_t>(i), &b, i, &p[i]);
  return p;
}

bool SyntheticSource::writeTsv(const std::string& path, uint64_t rows, std::string* error) const {
  const int tables = static_cast<int>(config_.tableSizes.size());
  if (config_.bag != 1) {
    *error = "--write-tsv needs --bag 1 (Criteo rows have one id per column)";
    return false;
  }
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  Batch b;
  for (uint64_t r = 0; r < rows; ++r) {
    b.resize(1, tables, 1);
    sample(r, &b, 0, nullptr);
    std::fprintf(f, "%d", static_cast<int>(b.labels[0]));
    for (int k = 0; k < kDenseFeatures; ++k) std::fprintf(f, "\t%.0f", std::expm1(static_cast<double>(b.dense[k])));
    for (int c = 0; c < kCriteoCategorical; ++c) {
      if (c < tables) std::fprintf(f, "\t%08x", static_cast<unsigned>(b.ids[c]));
      else std::fputs("\t", f);
    }
    std::fputc('\n', f);
  }
  const bool ok = std::fclose(f) == 0;
  if (!ok) *error = path + ": write failed";
  return ok;
}

std::string CriteoCounts::summary() const {
  std::ostringstream s;
  s << lines << " lines, " << parsed << " parsed, " << malformed() << " malformed (truncated " << truncated
    << ", extra fields " << extraFields << ", bad label " << badLabel << ", non-numeric integer " << badInteger
    << ", bad categorical " << badCategorical << ")";
  return s.str();
}

bool parseCriteoLine(const char* begin, const char* end, float* dense, uint32_t* cats, float* label,
                     CriteoCounts* counts) {
  if (end > begin && end[-1] == '\r') --end;
  constexpr int kFields = 1 + kDenseFeatures + kCriteoCategorical;
  const char* fieldBegin[kFields];
  const char* fieldEnd[kFields];
  int fields = 0;
  const char* p = begin;
  while (true) {
    const char* tab = static_cast<const char*>(std::memchr(p, '\t', static_cast<size_t>(end - p)));
    const char* stop = tab != nullptr ? tab : end;
    if (fields == kFields) {
      ++counts->extraFields;
      return false;
    }
    fieldBegin[fields] = p;
    fieldEnd[fields] = stop;
    ++fields;
    if (tab == nullptr) break;
    p = tab + 1;
  }
  if (fields < kFields || begin == end) {
    ++counts->truncated;
    return false;
  }
  const size_t labelLen = static_cast<size_t>(fieldEnd[0] - fieldBegin[0]);
  if (labelLen != 1 || (fieldBegin[0][0] != '0' && fieldBegin[0][0] != '1')) {
    ++counts->badLabel;
    return false;
  }
  *label = fieldBegin[0][0] == '1' ? 1.0f : 0.0f;
  char buf[32];
  for (int k = 0; k < kDenseFeatures; ++k) {
    const char* b = fieldBegin[1 + k];
    const size_t len = static_cast<size_t>(fieldEnd[1 + k] - b);
    if (len == 0) {
      dense[k] = 0.0f;  // missing
      continue;
    }
    if (len >= sizeof buf) {
      ++counts->badInteger;
      return false;
    }
    std::memcpy(buf, b, len);
    buf[len] = '\0';
    char* stop = nullptr;
    errno = 0;
    const long long v = std::strtoll(buf, &stop, 10);
    if (stop != buf + len || errno == ERANGE || buf[0] == ' ' || buf[0] == '+') {
      ++counts->badInteger;
      return false;
    }
    dense[k] = static_cast<float>(std::log1p(static_cast<double>(std::max<long long>(v, 0))));
  }
  for (int c = 0; c < kCriteoCategorical; ++c) {
    const char* b = fieldBegin[1 + kDenseFeatures + c];
    const size_t len = static_cast<size_t>(fieldEnd[1 + kDenseFeatures + c] - b);
    if (len == 0) {
      cats[c] = 0xffffffffu;  // missing
      continue;
    }
    uint32_t v = 0;
    bool ok = len <= 8;
    for (size_t i = 0; ok && i < len; ++i) {
      const char ch = b[i];
      int d = -1;
      if (ch >= '0' && ch <= '9') d = ch - '0';
      else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
      else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
      ok = d >= 0;
      v = v * 16 + static_cast<uint32_t>(d < 0 ? 0 : d);
    }
    if (!ok) {
      ++counts->badCategorical;
      return false;
    }
    cats[c] = v == 0xffffffffu ? 0xfffffffeu : v;
  }
  ++counts->parsed;
  return true;
}

bool CriteoSource::load(const std::string& path, const std::vector<int64_t>& tableSizes, uint64_t maxRows,
                        double evalFraction, std::string* error) {
  tableSizes_ = tableSizes;
  counts_ = CriteoCounts{};
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open (" + std::strerror(errno) + ")";
    return false;
  }
  std::string line;
  float dense[kDenseFeatures];
  uint32_t cats[kCriteoCategorical];
  float label = 0;
  while ((maxRows == 0 || counts_.parsed < maxRows) && std::getline(in, line)) {
    ++counts_.lines;
    if (!parseCriteoLine(line.data(), line.data() + line.size(), dense, cats, &label, &counts_)) continue;
    dense_.insert(dense_.end(), dense, dense + kDenseFeatures);
    labels_.push_back(label);
    for (int c = 0; c < kCriteoCategorical; ++c) {
      // Column c feeds table c mod T; with more tables than columns the rest see id 0.
      const int64_t size = tableSizes_[static_cast<size_t>(c) % tableSizes_.size()];
      int32_t id = 0;
      if (cats[c] != 0xffffffffu && size > 1) id = static_cast<int32_t>(1 + cats[c] % static_cast<uint64_t>(size - 1));
      cats_.push_back(id);
    }
  }
  const uint64_t rows = labels_.size();
  evalRows_ = static_cast<uint64_t>(std::floor(static_cast<double>(rows) * evalFraction));
  trainRows_ = rows - evalRows_;
  return true;
}

void CriteoSource::copyRow(uint64_t row, Batch* out, int slot) const {
  std::memcpy(&out->dense[static_cast<size_t>(slot) * kDenseFeatures], &dense_[row * kDenseFeatures],
              sizeof(float) * kDenseFeatures);
  out->labels[slot] = labels_[row];
  for (int t = 0; t < out->tables; ++t) {
    const int32_t id = t < kCriteoCategorical ? cats_[row * kCriteoCategorical + static_cast<uint64_t>(t)] : 0;
    out->ids[static_cast<size_t>(slot) * out->tables + t] = id;
  }
}

void CriteoSource::train(uint64_t first, int n, Batch* out) const {
  out->resize(n, static_cast<int>(tableSizes_.size()), 1);
  for (int i = 0; i < n; ++i) copyRow((first + static_cast<uint64_t>(i)) % trainRows_, out, i);
}

void CriteoSource::eval(uint64_t first, int n, Batch* out) const {
  out->resize(n, static_cast<int>(tableSizes_.size()), 1);
  for (int i = 0; i < n; ++i) copyRow(trainRows_ + first + static_cast<uint64_t>(i), out, i);
}

bool parseTableSizes(const std::string& spec, int tables, std::vector<int64_t>* out, std::string* error) {
  out->clear();
  const size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    char* e1 = nullptr;
    char* e2 = nullptr;
    const double lo = std::strtod(spec.c_str(), &e1);
    const double hi = std::strtod(spec.c_str() + colon + 1, &e2);
    if (e1 != spec.c_str() + colon || *e2 != '\0' || !(lo >= 2) || !(hi >= lo) || hi > 2e9) {
      *error = "--table-sizes MIN:MAX needs 2 <= MIN <= MAX <= 2e9, got '" + spec + "'";
      return false;
    }
    for (int t = 0; t < tables; ++t) {
      const double f = tables > 1 ? static_cast<double>(t) / (tables - 1) : 0.0;
      out->push_back(static_cast<int64_t>(std::llround(lo * std::pow(hi / lo, f))));
    }
    return true;
  }
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 2 || v > 2000000000) {
      *error = "--table-sizes: '" + item + "' is not a size in [2, 2e9]";
      return false;
    }
    out->push_back(v);
  }
  if (static_cast<int>(out->size()) != tables) {
    *error = "--table-sizes lists " + std::to_string(out->size()) + " sizes for " + std::to_string(tables) + " tables";
    return false;
  }
  return true;
}

}  // namespace dlrm
