// Hybrid-parallel DLRM training over spccl: "less communication, same accuracy".
//
//   mpirun -np 4 dlrm                      one compressed run, progress lines, held-out metrics
//   mpirun -np 4 dlrm --compare            dense collectives, then compressed, same seed and data: one table
//   mpirun -np 4 dlrm --sweep              a grid of DP x MP densities: CSV and a PNG (gnuplot)
//   mpirun -np 2 dlrm --check-single       the P-rank dense run against a 1-rank run of the same global batch
//   mpirun -np 4 dlrm --data train.txt     Criteo TSV (Kaggle / Terabyte) instead of the synthetic data
//
// Embedding tables are model parallel (greedy balance by size), MLPs data
// parallel. spcclAlltoAllRowsCompressed moves pooled embeddings to the ranks
// that hold their samples, spcclAlltoAllRowsBackward brings their gradients
// back, spcclAllReduceCompressed (one compressor per layer, error feedback on)
// sums the MLP gradients. The dense baseline uses spcclAlltoAll and
// compressors of density 1 (the library's exact path), so both runs' bytes
// come from the same counters (spcclCommGetStats). docs/DLRM.md has the rest.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spccl_mpi.h>

#include "data.h"
#include "trainer.h"

namespace {

using dlrm::Config;
using dlrm::RunResult;

// The compressed run's defaults beyond Config's: docs/DLRM.md's frontier point
// (DP 0.001, hot rows seen in 64 or more bags per step, top 7 of 64 entries
// in fp8, merged table updates), the one that met the goal there.
constexpr int kDefaultHotRows = 1000000;  // per table: every id above --hot-min-count
const char* const kDefaultRowsCodec = "fp8";
const char* const kRowsCodecs[] = {"wire", "int8", "bounded", "fp16", "bf16", "fp8"};

struct Options {
  Config config;
  std::string tableSizes = "300:1000000";
  int tables = 26;
  bool bottomGiven = false;
  double zipf = 1.05, noise = 0.5;
  std::string data;
  uint64_t maxRows = 2000000;
  double evalFraction = 0.1;
  bool compare = false, sweep = false, dense = false, checkSingle = false;
  bool embUpdateGiven = false, hotRowsGiven = false;
  std::string rowsCodec;  // SPCCL_ROWS_CODEC for the spccl communicator
  bool rowsCodecGiven = false;
  std::string rowsCodecFrom;  // "--rows-codec", "SPCCL_ROWS_CODEC", "default"
  std::vector<float> sweepDp{1.0f, 0.1f, 0.01f, 0.001f};
  std::vector<float> sweepMp{1.0f, 0.5f, 0.25f, 0.125f, 0.0625f};
  std::string csv = "dlrm_sweep.csv", png = "dlrm_sweep.png";
  double minAuc = -1, maxAucDiff = -1, parityTol = 1e-3;
  std::string writeTsv;
  uint64_t tsvRows = 100000;
};

const char* kUsage =
    "usage: mpirun -np P dlrm [options]\n"
    "model:\n"
    "  --bottom-mlp A-B-C     bottom MLP after the 13 dense inputs (default 512-256-64; last = --dim)\n"
    "  --top-mlp A-B-1        top MLP after the interaction (default 512-256-1)\n"
    "  --dim D                embedding dimension (default 64)\n"
    "  --tables T             number of tables (default 26)\n"
    "  --table-sizes MIN:MAX  log-spaced sizes, or a,b,c,... one per table (default 300:1000000)\n"
    "  --bag L                ids per table per sample, sum-pooled (synthetic data; default 1)\n"
    "training:\n"
    "  --batch B              global batch, divisible by P (default 1024)\n"
    "  --steps N              (default 500)\n"
    "  --optimizer sgd|adagrad (default adagrad; row-wise Adagrad for the tables)\n"
    "  --lr X, --emb-lr X     MLP and embedding learning rates (default 0.01, 0.05)\n"
    "  --dp-density X         fraction of MLP gradient entries sent (default 0.001)\n"
    "  --mp-density X         fraction of each embedding row sent (default 0.109375 = 7 of 64)\n"
    "  --mp-dense-steps N     the first N training steps exchange the embedding rows exactly (a dense\n"
    "                         warm-up; default 0)\n"
    "  --rows-codec wire|int8|bounded|fp16|bf16|fp8  values of the embedding rows sent (SPCCL_ROWS_CODEC of the\n"
    "                         spccl communicator, docs/ENV.md; default fp8, or SPCCL_ROWS_CODEC when it is set)\n"
    "  --tau-interval N       calls between exact threshold estimations (default 100)\n"
    "  --emb-update per-sample|merged  table updates once per occurrence in sample order, or once per\n"
    "                         distinct id on its summed gradient (default merged, dense runs included)\n"
    "  --hot-rows N           replicate each table's N most frequent ids on every rank: only bags with a\n"
    "                         cold id cross the alltoall, hot rows' gradients go through the row-sparse\n"
    "                         allreduce (exact; 0 = off; default 1000000 in compressed runs with merged\n"
    "                         updates, 0 in dense runs; --compare: the compressed run only)\n"
    "  --hot-min-count C      an id is hot only if seen at least C times (default 4096: in 64 or more bags\n"
    "                         per step of 1024 samples)\n"
    "  --hot-sample N         training samples counted to pick the hot ids (default 65536)\n"
    "  --dense                exact collectives only (the baseline)\n"
    "  --seed S, --eval-samples N, --print-every N (default 1, 32768, 50)\n"
    "data:\n"
    "  --zipf S, --noise X    synthetic id skew and teacher noise (default 1.05, 0.5)\n"
    "  --data FILE            Criteo TSV (label, 13 integers, 26 hex categoricals)\n"
    "  --max-rows N           rows loaded from FILE (default 2000000; 0 = all)\n"
    "  --eval-fraction X      last fraction of FILE's rows held out (default 0.1)\n"
    "  --write-tsv FILE       write --tsv-rows N synthetic training rows (default 100000) as Criteo TSV\n"
    "                         and exit\n"
    "modes:\n"
    "  --compare              dense then compressed, same seed and data, one table; the compressed model\n"
    "                         is evaluated served trained (its compressed exchange) and served exact\n"
    "  --sweep                grid --sweep-dp a,b,.. x --sweep-mp a,b,..; --csv FILE, --png FILE\n"
    "  --check-single         P-rank dense run vs a 1-rank run of the same global batch\n"
    "  --monitor              also count bytes with Open MPI's monitoring\n"
    "                         (mpirun --mca pml_monitoring_enable 1)\n"
    "checks (exit status 1 when violated):\n"
    "  --min-auc X            every run's held-out AUC >= X (served trained and, after a lossy embedding\n"
    "                         exchange, served exact)\n"
    "  --max-auc-diff X       --compare: |AUC(compressed) - AUC(dense)| <= X\n"
    "  --parity-tol X         --check-single: max |p_P - p_1| over held-out samples (default 1e-3)\n"
    "testing only:\n"
    "  --inject-routing-bug   route each sample's embedding rows to the next rank's samples (parity must fail)\n"
    "  --inject-hot-bug       update the hot rows from each rank's own samples only (parity must fail)\n";

bool parseList(const std::string& s, char sep, std::vector<double>* out) {
  out->clear();
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0') return false;
    out->push_back(v);
  }
  return !out->empty();
}

bool parseInts(const std::string& s, std::vector<int>* out) {
  std::vector<double> v;
  if (!parseList(s, '-', &v)) return false;
  out->clear();
  for (double x : v) {
    if (x < 1 || x > 1e6 || x != std::floor(x)) return false;
    out->push_back(static_cast<int>(x));
  }
  return true;
}

bool parseFloats(const std::string& s, std::vector<float>* out) {
  std::vector<double> v;
  if (!parseList(s, ',', &v)) return false;
  out->clear();
  for (double x : v) {
    if (!(x > 0 && x <= 1)) return false;
    out->push_back(static_cast<float>(x));
  }
  return true;
}

bool parseArgs(int argc, char** argv, Options* o, std::string* error) {
  auto num = [&](const std::string& name, const std::string& v, double lo, double hi, double* out) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !(x >= lo && x <= hi)) {
      *error = name + " " + v + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
      return false;
    }
    *out = x;
    return true;
  };
  Config& c = o->config;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    const bool flag = a == "--compare" || a == "--sweep" || a == "--dense" || a == "--check-single" ||
                      a == "--monitor" || a == "--inject-routing-bug" || a == "--inject-hot-bug" || a == "--help" ||
                      a == "-h";
    if (!flag && eq == std::string::npos) {
      if (i + 1 >= argc) {
        *error = a + " needs a value";
        return false;
      }
      v = argv[++i];
    }
    double x = 0;
    if (a == "--help" || a == "-h") {
      *error = "help";
      return false;
    } else if (a == "--compare") o->compare = true;
    else if (a == "--sweep") o->sweep = true;
    else if (a == "--dense") o->dense = true;
    else if (a == "--check-single") o->checkSingle = true;
    else if (a == "--monitor") c.monitor = true;
    else if (a == "--inject-routing-bug") c.injectRoutingBug = true;
    else if (a == "--inject-hot-bug") c.injectHotBug = true;
    else if (a == "--bottom-mlp") {
      if (!parseInts(v, &c.bottom)) return *error = "--bottom-mlp " + v + ": expected sizes like 512-256-64", false;
      o->bottomGiven = true;
    } else if (a == "--top-mlp") {
      if (!parseInts(v, &c.top)) return *error = "--top-mlp " + v + ": expected sizes like 512-256-1", false;
    } else if (a == "--dim") {
      if (!num(a, v, 1, 4096, &x)) return false;
      c.dim = static_cast<int>(x);
    } else if (a == "--tables") {
      if (!num(a, v, 1, 1000, &x)) return false;
      o->tables = static_cast<int>(x);
    } else if (a == "--table-sizes") o->tableSizes = v;
    else if (a == "--bag") {
      if (!num(a, v, 1, 1000, &x)) return false;
      c.bag = static_cast<int>(x);
    } else if (a == "--batch") {
      if (!num(a, v, 1, 1e7, &x)) return false;
      c.batch = static_cast<int>(x);
    } else if (a == "--steps") {
      if (!num(a, v, 0, 1e9, &x)) return false;
      c.steps = static_cast<int>(x);
    } else if (a == "--optimizer") {
      if (v == "sgd") c.optimizer = dlrm::Optimizer::kSgd;
      else if (v == "adagrad") c.optimizer = dlrm::Optimizer::kAdagrad;
      else return *error = "--optimizer " + v + ": sgd or adagrad", false;
    } else if (a == "--lr") {
      if (!num(a, v, 0, 1e3, &x)) return false;
      c.lr = static_cast<float>(x);
    } else if (a == "--emb-lr") {
      if (!num(a, v, 0, 1e3, &x)) return false;
      c.embLr = static_cast<float>(x);
    } else if (a == "--dp-density") {
      if (!num(a, v, 1e-9, 1, &x)) return false;
      c.dpDensity = static_cast<float>(x);
    } else if (a == "--mp-density") {
      if (!num(a, v, 1e-9, 1, &x)) return false;
      c.mpDensity = static_cast<float>(x);
    } else if (a == "--mp-dense-steps") {
      if (!num(a, v, 0, 1e9, &x)) return false;
      c.mpDenseSteps = static_cast<int>(x);
    } else if (a == "--rows-codec") {
      if (std::find(std::begin(kRowsCodecs), std::end(kRowsCodecs), v) == std::end(kRowsCodecs))
        return *error = "--rows-codec " + v + ": wire, int8, bounded, fp16, bf16 or fp8", false;
      o->rowsCodec = v;
      o->rowsCodecGiven = true;
    } else if (a == "--emb-update") {
      if (v == "merged") c.mergedUpdates = true;
      else if (v == "per-sample") c.mergedUpdates = false;
      else return *error = "--emb-update " + v + ": per-sample or merged", false;
      o->embUpdateGiven = true;
    } else if (a == "--hot-rows") {
      if (!num(a, v, 0, 1e8, &x)) return false;
      c.hotRows = static_cast<int>(x);
      o->hotRowsGiven = true;
    } else if (a == "--hot-min-count") {
      if (!num(a, v, 1, 1e9, &x)) return false;
      c.hotMinCount = static_cast<int>(x);
    } else if (a == "--hot-sample") {
      if (!num(a, v, 1, 1e10, &x)) return false;
      c.hotSample = static_cast<uint64_t>(x);
    } else if (a == "--tau-interval") {
      if (!num(a, v, 1, 1e9, &x)) return false;
      c.tauInterval = static_cast<int>(x);
    } else if (a == "--seed") {
      if (!num(a, v, 0, 1e18, &x)) return false;
      c.seed = static_cast<uint64_t>(x);
    } else if (a == "--eval-samples") {
      if (!num(a, v, 1, 1e9, &x)) return false;
      c.evalSamples = static_cast<uint64_t>(x);
    } else if (a == "--print-every") {
      if (!num(a, v, 0, 1e9, &x)) return false;
      c.printEvery = static_cast<int>(x);
    } else if (a == "--zipf") {
      if (!num(a, v, 0.1, 10, &o->zipf)) return false;
    } else if (a == "--noise") {
      if (!num(a, v, 0, 100, &o->noise)) return false;
    } else if (a == "--data") o->data = v;
    else if (a == "--max-rows") {
      if (!num(a, v, 0, 1e12, &x)) return false;
      o->maxRows = static_cast<uint64_t>(x);
    } else if (a == "--eval-fraction") {
      if (!num(a, v, 0, 0.9, &o->evalFraction)) return false;
    } else if (a == "--sweep-dp") {
      if (!parseFloats(v, &o->sweepDp))
        return *error = "--sweep-dp " + v + ": densities in (0, 1], comma-separated", false;
    } else if (a == "--sweep-mp") {
      if (!parseFloats(v, &o->sweepMp))
        return *error = "--sweep-mp " + v + ": densities in (0, 1], comma-separated", false;
    } else if (a == "--csv") o->csv = v;
    else if (a == "--png") o->png = v;
    else if (a == "--min-auc") {
      if (!num(a, v, 0, 1, &o->minAuc)) return false;
    } else if (a == "--max-auc-diff") {
      if (!num(a, v, 0, 1, &o->maxAucDiff)) return false;
    } else if (a == "--parity-tol") {
      if (!num(a, v, 0, 1, &o->parityTol)) return false;
    } else if (a == "--write-tsv") o->writeTsv = v;
    else if (a == "--tsv-rows") {
      if (!num(a, v, 1, 1e10, &x)) return false;
      o->tsvRows = static_cast<uint64_t>(x);
    } else {
      *error = "unknown option " + a + " (--help lists them)";
      return false;
    }
  }
  if (!o->bottomGiven) c.bottom.back() = c.dim;
  if (c.bottom.back() != c.dim) {
    *error = "the bottom MLP's last size (" + std::to_string(c.bottom.back()) + ") must equal --dim (" +
             std::to_string(c.dim) + "): the interaction dots it with the embeddings";
    return false;
  }
  if (c.top.back() != 1) {
    *error = "the top MLP's last size must be 1 (one logit)";
    return false;
  }
  // Hot rows are part of the compressed run's defaults. A dense run (the
  // baseline; --check-single checks one) replicates none unless asked, and
  // --emb-update per-sample, which hot rows cannot use, turns the default off.
  if (!o->hotRowsGiven && !o->dense && !o->checkSingle && c.mergedUpdates) c.hotRows = kDefaultHotRows;
  if (c.hotRows > 0) {
    // Hot rows' gradients arrive summed over the batch: one update per row.
    if (o->embUpdateGiven && !c.mergedUpdates) {
      *error = "--hot-rows needs --emb-update merged (the hot rows' gradients arrive merged over the batch)";
      return false;
    }
    c.mergedUpdates = true;
  }
  if ((o->compare ? 1 : 0) + (o->sweep ? 1 : 0) + (o->checkSingle ? 1 : 0) > 1) {
    *error = "--compare, --sweep and --check-single are separate modes: pick one";
    return false;
  }
  return dlrm::parseTableSizes(o->tableSizes, o->tables, &c.tableSizes, error);
}

std::string human(double bytes) {
  char buf[32];
  if (bytes >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  else if (bytes >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
  else if (bytes >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", bytes / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

void printResult(const std::string& label, const RunResult& r) {
  std::printf("[%s] held-out: AUC %.5f  logloss %.5f  accuracy %.5f  (positives %.3f", label.c_str(), r.auc, r.logloss,
              r.accuracy, r.positiveRate);
  if (r.teacherAuc >= 0) std::printf(", teacher's AUC ceiling %.5f", r.teacherAuc);
  std::printf(")\n[%s] bytes/step/rank: DP %s (dense %s, %.1fx less)  MP %s (dense %s, %.1fx less)  step %.1f ms\n",
              label.c_str(), human(r.bytes.dp).c_str(), human(r.bytes.dpDense).c_str(),
              r.bytes.dp > 0 ? r.bytes.dpDense / r.bytes.dp : 0.0, human(r.bytes.mp).c_str(),
              human(r.bytes.mpDense).c_str(), r.bytes.mp > 0 ? r.bytes.mpDense / r.bytes.mp : 0.0, r.stepSeconds * 1e3);
  if (r.servedExactDone)
    std::printf(
        "[%s] held-out, served exact: AUC %.5f  logloss %.5f  accuracy %.5f  (the same model, the embedding exchange "
        "exact: every entry in fp32, MP %s per rank over the evaluation = the dense count %s; served trained: %s)\n",
        label.c_str(), r.servedExact.auc, r.servedExact.logloss, r.servedExact.accuracy,
        human(r.servedExact.mpBytes).c_str(), human(r.servedExact.mpDense).c_str(), human(r.evalMpBytes).c_str());
  std::printf("[%s] time in spccl calls per step: MP %.1f ms, DP %.1f ms (%.0f%% of the step)\n", label.c_str(),
              r.comm.mp * 1e3, r.comm.dp * 1e3,
              r.stepSeconds > 0 ? 100.0 * (r.comm.mp + r.comm.dp) / r.stepSeconds : 0.0);
  if (r.hotRowsTotal > 0)
    std::printf(
        "[%s] hot rows: %lld replicated, %.1f%% of the bags all hot (nothing sent), %.1f%% of the alltoall's "
        "rows padding, MP = alltoalls %s + hot rows' allreduce %s\n",
        label.c_str(), static_cast<long long>(r.hotRowsTotal), 100.0 * r.hotBagShare, 100.0 * r.padShare,
        human(r.bytes.mp - r.bytes.mpHot).c_str(), human(r.bytes.mpHot).c_str());
  if (r.bytes.mpiDp >= 0)
    std::printf("[%s] Open MPI coll monitoring, bytes/step/rank: DP %s  MP %s\n", label.c_str(),
                human(r.bytes.mpiDp).c_str(), human(r.bytes.mpiMp).c_str());
  std::fflush(stdout);
}

struct Env {
  int rank = 0, ranks = 1;
  spcclComm_t comm = nullptr;
  dlrm::MpiMonitor monitor;
  bool monitorOn = false;
};

RunResult train(const Options& o, const dlrm::Source& src, Env& env, Config c, const std::string& label) {
  dlrm::Trainer trainer(c, src, env.comm, MPI_COMM_WORLD, env.monitorOn ? &env.monitor : nullptr);
  RunResult r = trainer.run(label);
  (void)o;
  if (env.rank == 0) {
    if (r.ok) printResult(label, r);
    else std::fprintf(stderr, "[%s] rank 0: training failed: %s\n", label.c_str(), r.error.c_str());
  }
  if (!r.ok && env.rank != 0 && r.error != "another rank failed" && r.error != "another rank failed in evaluation")
    std::fprintf(stderr, "[%s] rank %d: training failed: %s\n", label.c_str(), env.rank, r.error.c_str());
  return r;
}

double ratio(double dense, double sent) { return sent > 0 ? dense / sent : 0.0; }

int runCompare(const Options& o, const dlrm::Source& src, Env& env) {
  Config dense = o.config, comp = o.config;
  dense.compressed = false;
  dense.hotRows = 0;  // the baseline: every bag through the exact alltoall
  comp.compressed = true;
  const RunResult d = train(o, src, env, dense, "dense");
  if (!d.ok) return 1;
  const RunResult c = train(o, src, env, comp, "compressed");
  if (!c.ok) return 1;
  int status = 0;
  if (env.rank == 0) {
    std::printf(
        "\n%d ranks, global batch %d, %d steps, %zu tables (dim %d), DP density %g, MP density %g, tau every %d "
        "calls",
        env.ranks, o.config.batch, o.config.steps, o.config.tableSizes.size(), o.config.dim,
        static_cast<double>(o.config.dpDensity), static_cast<double>(o.config.mpDensity), o.config.tauInterval);
    if (o.config.hotRows > 0)
      std::printf(", hot rows %d per table seen >= %d times (compressed run)", o.config.hotRows, o.config.hotMinCount);
    if (o.config.mpDenseSteps > 0) std::printf(", MP exact for the first %d steps", o.config.mpDenseSteps);
    std::printf(", %s table updates, rows codec %s\n", o.config.mergedUpdates ? "merged" : "per-sample",
                o.rowsCodec.c_str());
    std::printf("| %-28s | %14s | %14s | %14s |\n", "", "dense", "compressed", "ratio / diff");
    std::printf("|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(16, '-').c_str(),
                std::string(16, '-').c_str(), std::string(16, '-').c_str());
    std::printf("| %-28s | %14.5f | %14.5f | %+14.5f |\n", "held-out AUC", d.auc, c.auc, c.auc - d.auc);
    std::printf("| %-28s | %14.5f | %14.5f | %+14.5f |\n", "held-out logloss", d.logloss, c.logloss,
                c.logloss - d.logloss);
    std::printf("| %-28s | %14.5f | %14.5f | %+14.5f |\n", "held-out accuracy", d.accuracy, c.accuracy,
                c.accuracy - d.accuracy);
    if (c.servedExactDone) {
      // The compressed run's model once more, its held-out set through the
      // exact exchange (the dense run is served exactly either way).
      std::printf("| %-28s | %14.5f | %14.5f | %+14.5f |\n", "AUC, served exact", d.auc, c.servedExact.auc,
                  c.servedExact.auc - d.auc);
      std::printf("| %-28s | %14.5f | %14.5f | %+14.5f |\n", "logloss, served exact", d.logloss, c.servedExact.logloss,
                  c.servedExact.logloss - d.logloss);
    }
    std::printf("| %-28s | %14.0f | %14.0f | %13.1fx |\n", "DP bytes/step/rank", d.bytes.dp, c.bytes.dp,
                ratio(d.bytes.dp, c.bytes.dp));
    std::printf("| %-28s | %14.0f | %14.0f | %13.1fx |\n", "MP bytes/step/rank (fwd+bwd)", d.bytes.mp, c.bytes.mp,
                ratio(d.bytes.mp, c.bytes.mp));
    std::printf("| %-28s | %14.0f | %14.0f | %13.1fx |\n", "total bytes/step/rank", d.bytes.dp + d.bytes.mp,
                c.bytes.dp + c.bytes.mp, ratio(d.bytes.dp + d.bytes.mp, c.bytes.dp + c.bytes.mp));
    if (d.bytes.mpiDp >= 0) {
      std::printf("| %-28s | %14.0f | %14.0f | %13.1fx |\n", "DP, Open MPI's count", d.bytes.mpiDp, c.bytes.mpiDp,
                  ratio(d.bytes.mpiDp, c.bytes.mpiDp));
      std::printf("| %-28s | %14.0f | %14.0f | %13.1fx |\n", "MP, Open MPI's count", d.bytes.mpiMp, c.bytes.mpiMp,
                  ratio(d.bytes.mpiMp, c.bytes.mpiMp));
    }
    std::printf("| %-28s | %14.1f | %14.1f | %13.2fx |\n", "step time (ms)", d.stepSeconds * 1e3, c.stepSeconds * 1e3,
                ratio(d.stepSeconds, c.stepSeconds));
    std::printf("| %-28s | %14.1f | %14.1f | %13.2fx |\n", "MP time/step (ms)", d.comm.mp * 1e3, c.comm.mp * 1e3,
                ratio(d.comm.mp, c.comm.mp));
    std::printf("| %-28s | %14.1f | %14.1f | %13.2fx |\n", "DP time/step (ms)", d.comm.dp * 1e3, c.comm.dp * 1e3,
                ratio(d.comm.dp, c.comm.dp));
    auto share = [](const RunResult& r) {
      return r.stepSeconds > 0 ? 100.0 * (r.comm.mp + r.comm.dp) / r.stepSeconds : 0.0;
    };
    std::printf("| %-28s | %13.1f%% | %13.1f%% | %+13.1f%% |\n", "communication share of step", share(d), share(c),
                share(c) - share(d));
    if (d.teacherAuc >= 0) std::printf("teacher's AUC ceiling on the held-out set: %.5f\n", d.teacherAuc);
    std::printf("AUC difference (compressed - dense): %+.5f\n", c.auc - d.auc);
    if (c.servedExactDone)
      std::printf("AUC difference (compressed, served exact - dense): %+.5f\n", c.servedExact.auc - d.auc);
    if (o.maxAucDiff >= 0) {
      const bool pass = std::fabs(c.auc - d.auc) <= o.maxAucDiff;
      std::printf("check |AUC difference| <= %g: %s\n", o.maxAucDiff, pass ? "PASSED" : "FAILED");
      if (!pass) status = 1;
    }
  }
  if (o.minAuc >= 0) {
    const bool pass = d.auc >= o.minAuc && c.auc >= o.minAuc && (!c.servedExactDone || c.servedExact.auc >= o.minAuc);
    if (env.rank == 0) {
      std::printf("check AUC >= %g: %s (dense %.5f, compressed %.5f", o.minAuc, pass ? "PASSED" : "FAILED", d.auc,
                  c.auc);
      if (c.servedExactDone) std::printf(", compressed served exact %.5f", c.servedExact.auc);
      std::printf(")\n");
    }
    if (!pass) status = 1;
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return status;
}

int runSweep(const Options& o, const dlrm::Source& src, Env& env) {
  FILE* csv = nullptr;
  int opened = 1;
  if (env.rank == 0) {
    csv = std::fopen(o.csv.c_str(), "w");
    opened = csv != nullptr;
    if (!opened) std::fprintf(stderr, "cannot write %s\n", o.csv.c_str());
  }
  MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!opened) return 1;
  if (csv)
    std::fprintf(csv,
                 "dp_density,mp_density,auc,logloss,accuracy,dp_bytes,mp_bytes,dp_dense_bytes,mp_dense_bytes,"
                 "dp_reduction,mp_reduction,total_bytes,step_ms,auc_minus_dense\n");
  double denseAuc = -1;
  struct Row {
    float dp, mp;
    RunResult r;
  };
  std::vector<Row> rows;
  for (float dp : o.sweepDp)
    for (float mp : o.sweepMp) {
      Config c = o.config;
      c.compressed = dp < 1.0f || mp < 1.0f;
      if (!c.compressed) c.hotRows = 0;
      c.dpDensity = dp;
      c.mpDensity = mp;
      char label[64];
      std::snprintf(label, sizeof label, "dp %g mp %g", static_cast<double>(dp), static_cast<double>(mp));
      const RunResult r = train(o, src, env, c, label);
      if (!r.ok) return 1;
      if (dp >= 1.0f && mp >= 1.0f) denseAuc = r.auc;
      rows.push_back({dp, mp, r});
    }
  if (env.rank == 0) {
    for (const Row& row : rows) {
      const RunResult& r = row.r;
      std::fprintf(csv, "%g,%g,%.6f,%.6f,%.6f,%.0f,%.0f,%.0f,%.0f,%.2f,%.2f,%.0f,%.2f,%s\n",
                   static_cast<double>(row.dp), static_cast<double>(row.mp), r.auc, r.logloss, r.accuracy, r.bytes.dp,
                   r.bytes.mp, r.bytes.dpDense, r.bytes.mpDense, ratio(r.bytes.dpDense, r.bytes.dp),
                   ratio(r.bytes.mpDense, r.bytes.mp), r.bytes.dp + r.bytes.mp, r.stepSeconds * 1e3,
                   denseAuc >= 0 ? std::to_string(r.auc - denseAuc).c_str() : "");
    }
    std::fclose(csv);
    std::printf("\nsweep written to %s\n", o.csv.c_str());
    std::printf(
        "| DP density | MP density | AUC | AUC - dense | DP reduction | MP reduction | total bytes/step/rank |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const Row& row : rows)
      std::printf("| %g | %g | %.5f | %+.5f | %.1fx | %.1fx | %.0f |\n", static_cast<double>(row.dp),
                  static_cast<double>(row.mp), row.r.auc, denseAuc >= 0 ? row.r.auc - denseAuc : 0.0,
                  ratio(row.r.bytes.dpDense, row.r.bytes.dp), ratio(row.r.bytes.mpDense, row.r.bytes.mp),
                  row.r.bytes.dp + row.r.bytes.mp);
    // The plot: gnuplot script beside the CSV, run when gnuplot is installed.
    const std::string gp = o.csv + ".gp";
    FILE* g = std::fopen(gp.c_str(), "w");
    if (g != nullptr) {
      std::fprintf(
          g,
          "set terminal pngcairo size 1000,650 noenhanced\n"
          "set output '%s'\n"
          "set datafile separator ','\n"
          "set logscale x\n"
          "set xlabel 'bytes per step per rank (DP + MP, spccl stats)'\n"
          "set ylabel 'held-out AUC'\n"
          "set title 'DLRM, %d ranks, %d steps: AUC against communication (labels: DP density / MP density)'\n"
          "set key bottom right\n"
          "set grid\n"
          "plot '%s' every ::1 using 12:3 with points pt 7 ps 1.2 title 'runs', \\\n"
          "     '' every ::1 using 12:3:(sprintf('%%g/%%g', $1, $2)) with labels offset 0,0.8 font ',8' notitle",
          o.png.c_str(), env.ranks, o.config.steps, o.csv.c_str());
      if (denseAuc >= 0)
        std::fprintf(
            g, ", \\\n     %.6f title 'dense AUC' lc rgb 'gray', %.6f title 'dense AUC - 0.001' dt 2 lc rgb 'gray'",
            denseAuc, denseAuc - 0.001);
      std::fprintf(g, "\n");
      std::fclose(g);
      if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
        const std::string cmd = "gnuplot '" + gp + "'";
        if (std::system(cmd.c_str()) == 0) std::printf("plot written to %s\n", o.png.c_str());
        else std::printf("gnuplot failed on %s\n", gp.c_str());
      } else {
        std::printf("gnuplot not found: install it (apt-get install gnuplot-nox) and run gnuplot %s\n", gp.c_str());
      }
    }
  }
  return 0;
}

// The parallelism is right when the P-rank run with exact collectives
// computes what one rank computes on the same global batch: same held-out
// predictions, same MLP parameters, same tables, up to float summation order.
int runCheckSingle(const Options& o, const dlrm::Source& src, Env& env) {
  Config c = o.config;
  c.compressed = false;
  const RunResult multi = train(o, src, env, c, "hybrid " + std::to_string(env.ranks) + " ranks");
  int status = multi.ok ? 0 : 1;
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (status != 0) return 1;
  if (env.rank == 0) {
    spcclComm_t self = nullptr;
    spcclResult_t r = spcclCommInitMPI(&self, MPI_COMM_SELF);
    if (r != spcclSuccess) {
      std::fprintf(stderr, "spcclCommInitMPI(MPI_COMM_SELF): %s\n", spcclGetLastError(nullptr));
      status = 1;
    } else {
      // The reference keeps every row in its table: with --hot-rows the
      // check is that replicating hot rows changes nothing.
      Config reference = c;
      reference.hotRows = 0;
      dlrm::Trainer single(reference, src, self, MPI_COMM_SELF, nullptr);
      const RunResult one = single.run("single rank");
      spcclCommDestroy(self);
      if (!one.ok) {
        std::fprintf(stderr, "single-rank run failed: %s\n", one.error.c_str());
        status = 1;
      } else {
        printResult("single rank", one);
        double maxProb = 0, maxParam = 0, paramScale = 0, maxTable = 0;
        for (size_t i = 0; i < one.evalProbs.size(); ++i)
          maxProb = std::max(maxProb, static_cast<double>(std::fabs(one.evalProbs[i] - multi.evalProbs[i])));
        for (size_t i = 0; i < one.mlpParams.size(); ++i) {
          maxParam = std::max(maxParam, static_cast<double>(std::fabs(one.mlpParams[i] - multi.mlpParams[i])));
          paramScale = std::max(paramScale, static_cast<double>(std::fabs(one.mlpParams[i])));
        }
        for (size_t i = 0; i < one.tableChecksums.size(); ++i) {
          const double a = one.tableChecksums[i], b = multi.tableChecksums[i];
          maxTable = std::max(maxTable, std::fabs(a - b) / std::max(1.0, std::fabs(a)));
        }
        const bool sizes = one.evalProbs.size() == multi.evalProbs.size() &&
                           one.mlpParams.size() == multi.mlpParams.size() &&
                           one.tableChecksums.size() == multi.tableChecksums.size();
        const double relParam = paramScale > 0 ? maxParam / paramScale : maxParam;
        std::printf(
            "parity: max |p_%d - p_1| over %zu held-out samples = %.3g (tol %.3g); max MLP parameter diff = %.3g "
            "(relative %.3g, tol %.3g); max table checksum diff (relative) = %.3g (tol %.3g); AUC %.6f vs %.6f; "
            "replicas bitwise identical: %s\n",
            env.ranks, one.evalProbs.size(), maxProb, o.parityTol, maxParam, relParam, o.parityTol, maxTable,
            o.parityTol, multi.auc, one.auc, multi.replicasIdentical ? "yes" : "NO");
        const bool pass = sizes && maxProb <= o.parityTol && relParam <= o.parityTol && maxTable <= o.parityTol &&
                          multi.replicasIdentical;
        std::printf("parity check: %s\n", pass ? "PASSED" : "MISMATCH");
        status = pass ? 0 : 1;
      }
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (status == 0 && o.minAuc >= 0 && multi.auc < o.minAuc) {
    if (env.rank == 0) std::printf("check AUC >= %g: FAILED (%.5f)\n", o.minAuc, multi.auc);
    status = 1;
  }
  return status;
}

int runWithComm(Options& o, Env& env);

int runMain(int argc, char** argv, Env& env) {
  Options o;
  std::string error;
  if (!parseArgs(argc, argv, &o, &error)) {
    if (env.rank == 0) {
      if (error == "help") std::fputs(kUsage, stdout);
      else std::fprintf(stderr, "dlrm: %s\n", error.c_str());
    }
    return error == "help" ? 0 : 2;
  }
  if (o.config.batch % env.ranks != 0) {
    if (env.rank == 0)
      std::fprintf(stderr, "dlrm: --batch %d is not divisible by the %d ranks\n", o.config.batch, env.ranks);
    return 2;
  }
  o.config.compressed = !o.dense;

  // The rows codec is a communicator parameter, read from the environment
  // when the communicator is created: the flag wins, then the user's
  // SPCCL_ROWS_CODEC, then the default.
  const char* fromEnv = std::getenv("SPCCL_ROWS_CODEC");
  const bool envSet = fromEnv != nullptr && *fromEnv != '\0';
  if (o.rowsCodecGiven) {
    o.rowsCodecFrom = "--rows-codec";
    if (env.rank == 0 && envSet && o.rowsCodec != fromEnv)
      std::printf("dlrm: --rows-codec %s overrides SPCCL_ROWS_CODEC=%s from the environment\n", o.rowsCodec.c_str(),
                  fromEnv);
  } else if (envSet) {
    o.rowsCodec = fromEnv;
    o.rowsCodecFrom = "SPCCL_ROWS_CODEC";
    if (env.rank == 0)
      std::printf(
          "dlrm: rows codec %s from SPCCL_ROWS_CODEC in the environment (no --rows-codec given; the default is %s)\n",
          fromEnv, kDefaultRowsCodec);
  } else {
    o.rowsCodec = kDefaultRowsCodec;
    o.rowsCodecFrom = "default";
  }
  if (setenv("SPCCL_ROWS_CODEC", o.rowsCodec.c_str(), 1) != 0) {
    std::fprintf(stderr, "dlrm: setenv(SPCCL_ROWS_CODEC): %s\n", std::strerror(errno));
    return 1;
  }
  const spcclResult_t created = spcclCommInitMPI(&env.comm, MPI_COMM_WORLD);
  if (created != spcclSuccess) {
    std::fprintf(stderr, "rank %d: spcclCommInitMPI: %s: %s\n", env.rank, spcclGetErrorString(created),
                 spcclGetLastError(nullptr));
    return 1;
  }
  const int status = runWithComm(o, env);
  spcclCommDestroy(env.comm);
  env.comm = nullptr;
  return status;
}

int runWithComm(Options& o, Env& env) {
  std::string error;

  dlrm::SyntheticConfig sc;
  sc.seed = o.config.seed;
  sc.tableSizes = o.config.tableSizes;
  sc.bag = o.config.bag;
  sc.zipf = o.zipf;
  sc.noise = o.noise;
  sc.evalSamples = o.config.evalSamples;
  std::unique_ptr<dlrm::Source> source;
  if (!o.writeTsv.empty()) {
    int ok = 1;
    if (env.rank == 0) {
      dlrm::SyntheticSource s(sc);
      ok = s.writeTsv(o.writeTsv, o.tsvRows, &error) ? 1 : 0;
      if (ok)
        std::printf("wrote %llu synthetic rows to %s\n", static_cast<unsigned long long>(o.tsvRows),
                    o.writeTsv.c_str());
      else std::fprintf(stderr, "dlrm: %s\n", error.c_str());
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return ok ? 0 : 1;
  }
  if (!o.data.empty()) {
    if (o.config.bag != 1) {
      if (env.rank == 0) std::fprintf(stderr, "dlrm: --data reads one id per column: --bag must be 1\n");
      return 2;
    }
    auto criteo = std::make_unique<dlrm::CriteoSource>();
    // Every rank parses the same file: each needs the ids of its tables for the
    // whole global batch; the counts are the same everywhere.
    const bool opened = criteo->load(o.data, o.config.tableSizes, o.maxRows, o.evalFraction, &error);
    if (!opened) {
      if (env.rank == 0) std::fprintf(stderr, "dlrm: %s\n", error.c_str());
      return 2;
    }
    const dlrm::CriteoCounts& n = criteo->counts();
    if (env.rank == 0) {
      std::printf("criteo reader: %s: %s\n", o.data.c_str(), n.summary().c_str());
      if (n.malformed() > 0)
        std::printf("criteo reader: %llu malformed rows skipped (not used for training or evaluation)\n",
                    static_cast<unsigned long long>(n.malformed()));
      std::fflush(stdout);
    }
    if (criteo->trainSize() == 0 || criteo->evalSize() < static_cast<uint64_t>(env.ranks)) {
      if (env.rank == 0)
        std::fprintf(stderr,
                     "dlrm: %s: no usable rows to train on (%llu training, %llu held-out rows after skipping %llu "
                     "malformed; need at least 1 and %d)\n",
                     o.data.c_str(), static_cast<unsigned long long>(criteo->trainSize()),
                     static_cast<unsigned long long>(criteo->evalSize()),
                     static_cast<unsigned long long>(n.malformed()), env.ranks);
      return 2;
    }
    source = std::move(criteo);
  } else {
    source = std::make_unique<dlrm::SyntheticSource>(sc);
  }

  if (o.config.monitor) {
    env.monitorOn = env.monitor.open(&error);
    int on = env.monitorOn ? 1 : 0, all = 0;
    MPI_Allreduce(&on, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
      if (env.rank == 0) std::fprintf(stderr, "dlrm: --monitor: %s\n", error.c_str());
      return 2;
    }
  }
  if (env.rank == 0) {
    std::printf("dlrm: %d ranks, global batch %d, %d steps, %zu tables (sizes %lld..%lld, dim %d), bottom MLP 13",
                env.ranks, o.config.batch, o.config.steps, o.config.tableSizes.size(),
                static_cast<long long>(*std::min_element(o.config.tableSizes.begin(), o.config.tableSizes.end())),
                static_cast<long long>(*std::max_element(o.config.tableSizes.begin(), o.config.tableSizes.end())),
                o.config.dim);
    for (int s : o.config.bottom) std::printf("-%d", s);
    std::printf(", top MLP %d", o.config.dim + (o.tables + 1) * o.tables / 2);
    for (int s : o.config.top) std::printf("-%d", s);
    std::printf(", %s, rows codec %s (%s), data: %s\n", o.config.optimizer == dlrm::Optimizer::kSgd ? "SGD" : "Adagrad",
                o.rowsCodec.c_str(), o.rowsCodecFrom.c_str(),
                o.data.empty() ? "synthetic (planted teacher)" : o.data.c_str());
    if (!o.sweep && !o.checkSingle) {
      if (o.dense) {
        std::printf("dlrm: dense run (exact collectives), %s table updates",
                    o.config.mergedUpdates ? "merged" : "per-sample");
      } else {
        std::printf("dlrm: %s: DP density %g, MP density %g", o.compare ? "compressed run" : "compressed",
                    static_cast<double>(o.config.dpDensity), static_cast<double>(o.config.mpDensity));
        if (o.config.hotRows > 0)
          std::printf(", hot rows: up to %d per table seen >= %d times in the first %llu samples", o.config.hotRows,
                      o.config.hotMinCount, static_cast<unsigned long long>(o.config.hotSample));
        else std::printf(", no hot rows");
        std::printf(", %s table updates", o.config.mergedUpdates ? "merged" : "per-sample");
      }
      std::printf("\n");
    }
    const std::vector<int> owner = dlrm::assignTables(o.config.tableSizes, env.ranks);
    std::vector<long long> rows(static_cast<size_t>(env.ranks), 0);
    std::vector<int> count(static_cast<size_t>(env.ranks), 0);
    for (size_t t = 0; t < owner.size(); ++t) {
      rows[owner[t]] += o.config.tableSizes[t];
      ++count[owner[t]];
    }
    std::printf("dlrm: tables per rank:");
    for (int r = 0; r < env.ranks; ++r) std::printf(" %d (%lld rows)", count[r], rows[r]);
    std::printf("\n");
    std::fflush(stdout);
  }

  if (o.compare) return runCompare(o, *source, env);
  if (o.sweep) return runSweep(o, *source, env);
  if (o.checkSingle) return runCheckSingle(o, *source, env);
  const RunResult r = train(o, *source, env, o.config, o.config.compressed ? "compressed" : "dense");
  if (!r.ok) return 1;
  if (o.minAuc >= 0) {
    // Every AUC the run reports: served trained and, after a lossy exchange, served exact.
    const bool pass = r.auc >= o.minAuc && (!r.servedExactDone || r.servedExact.auc >= o.minAuc);
    if (env.rank == 0) {
      std::printf("check AUC >= %g: %s (%.5f", o.minAuc, pass ? "PASSED" : "FAILED", r.auc);
      if (r.servedExactDone) std::printf(", served exact %.5f", r.servedExact.auc);
      std::printf(")\n");
    }
    return pass ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Env env;
  MPI_Comm_rank(MPI_COMM_WORLD, &env.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &env.ranks);
  const int status = runMain(argc, argv, env);
  MPI_Finalize();
  return status;
}
