"""Hybrid-parallel DLRM in PyTorch over spccl (docs/DLRM.md, "The PyTorch example").

    mpirun -np 4 python dlrm.py                  one compressed run: progress, held-out metrics
    mpirun -np 4 python dlrm.py --compare        exact, then compressed, same seed and data: one table
    mpirun -np 4 python dlrm.py --check-single   the P-rank exact run against a 1-process run
    python dlrm.py --write-tsv FILE              the synthetic training stream as Criteo TSV

The model, the data and the parallel layout are those of the C++ example
(mpi_examples/dlrm): embedding tables model parallel (greedy balance by size),
bottom and top MLPs data parallel. Pooled embeddings go to the ranks that hold
their samples through spccl_torch.alltoall_rows (DCT-MP: each row keeps its
largest entries, the backward returns the gradients of exactly those) or, exact,
through the spccl backend's all_to_all_single; the MLPs are wrapped in DDP with
spccl's DCT hook (DCT-DP: thresholded allreduce with error feedback) or an
exact sum hook over the backend's all_reduce. With --hot-rows the most frequent
ids of every table are replicated on every rank, by the C++ example's rules: only
the sums of a bag's cold ids cross the exchange, and the hot rows' gradients are
summed over ranks by spccl_torch.allreduce_rowsparse. The synthetic data (data.py)
is the C++ generator's, sample for sample.
"""
import argparse
import math
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data as dlrm_data  # noqa: E402

RANK_ENV = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
WORLD_ENV = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def sizes_arg(name, last):
    def parse(s):
        try:
            v = [int(x) for x in s.split("-")]
        except ValueError:
            v = []
        if not v or any(x < 1 or x > 1000000 for x in v):
            raise argparse.ArgumentTypeError(f"expected sizes like {last}, got '{s}'")
        return v
    parse.__name__ = name
    return parse


def ranged(kind, lo, hi, lo_open=False):
    def parse(s):
        try:
            x = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {'(' if lo_open else '['}{lo}, {hi}], got '{s}'")
        if not ((x > lo if lo_open else x >= lo) and x <= hi) or (isinstance(x, float) and math.isnan(x)):
            raise argparse.ArgumentTypeError(f"expected a number in {'(' if lo_open else '['}{lo}, {hi}], got '{s}'")
        return x
    parse.__name__ = "number"
    return parse


def build_parser():
    p = Parser(prog="dlrm.py", description="Hybrid-parallel DLRM over spccl (PyTorch); launch with mpirun.",
               formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    m = p.add_argument_group("model")
    m.add_argument("--bottom-mlp", type=sizes_arg("bottom", "512-256-64"), default=None,
                   help="bottom MLP after the 13 dense inputs; last = --dim (default 512-256-DIM)")
    m.add_argument("--top-mlp", type=sizes_arg("top", "512-256-1"), default=[512, 256, 1],
                   help="top MLP after the interaction; last = 1")
    m.add_argument("--dim", type=ranged(int, 1, 4096), default=64, help="embedding dimension")
    m.add_argument("--tables", type=ranged(int, 1, 1000), default=26, help="number of tables")
    m.add_argument("--table-sizes", default="300:1000000", help="MIN:MAX log-spaced, or a,b,c one per table")
    m.add_argument("--bag", type=ranged(int, 1, 1000), default=1, help="ids per table per sample (sum pooling)")
    t = p.add_argument_group("training")
    t.add_argument("--batch", type=ranged(int, 1, 10000000), default=1024, help="global batch, divisible by P")
    t.add_argument("--steps", type=ranged(int, 0, 1000000000), default=500)
    t.add_argument("--optimizer", choices=["sgd", "adagrad"], default="adagrad",
                   help="adagrad: Adagrad for the MLPs, row-wise Adagrad for the tables")
    t.add_argument("--lr", type=ranged(float, 0, 1000), default=0.01, help="MLP learning rate")
    t.add_argument("--emb-lr", type=ranged(float, 0, 1000), default=0.05, help="embedding learning rate")
    t.add_argument("--dp-density", type=ranged(float, 0, 1, lo_open=True), default=0.001,
                   help="fraction of MLP gradient entries sent (DCT hook)")
    t.add_argument("--mp-density", type=ranged(float, 0, 1, lo_open=True), default=0.125,
                   help="fraction of each embedding row sent (alltoall_rows)")
    t.add_argument("--rows-codec", choices=["wire", "int8", "bounded", "fp16", "bf16", "fp8"], default=None,
                   help="how alltoall_rows sends the kept entries' values (SPCCL_ROWS_CODEC, docs/ENV.md; "
                        "default fp8, or SPCCL_ROWS_CODEC when it is set)")
    t.add_argument("--tau-interval", type=ranged(int, 1, 1000000000), default=100,
                   help="steps between exact threshold estimations")
    t.add_argument("--dp-exact-steps", type=ranged(int, 0, 1000000000), default=0,
                   help="DCT hook: first steps allreduced exactly before compression starts (its start_iter)")
    t.add_argument("--bucket-mb", type=ranged(float, 0, 1024, lo_open=True), default=None,
                   help="DDP's bucket size in MiB (default: DDP's, 25 with a first bucket of 1): one "
                        "compressor per bucket; a size below the smallest parameter gives one bucket, and "
                        "one compressor, per weight and per bias")
    t.add_argument("--emb-update", choices=["per-sample", "merged"], default=None,
                   help="table updates once per occurrence of an id in global sample order, or once per distinct "
                        "id on its gradient summed over the global batch (default per-sample; merged, and only "
                        "merged, with --hot-rows; --compare gives both runs the same rule)")
    t.add_argument("--hot-rows", type=ranged(int, 0, 100000000), default=0, metavar="N",
                   help="replicate each table's N most frequent ids on every rank: only bags with a cold id cross "
                        "the alltoall, the hot rows' gradients go through the row-sparse allreduce (exact; 0 = off; "
                        "--compare: the compressed run only)")
    t.add_argument("--hot-min-count", type=ranged(int, 1, 1000000000), default=4096, metavar="C",
                   help="an id is hot only if seen at least C times in the --hot-sample samples (4096: in 64 or "
                        "more bags per step of 1024 samples)")
    t.add_argument("--hot-sample", type=ranged(int, 1, 10**10), default=65536, metavar="N",
                   help="training samples counted to pick the hot ids (the first N)")
    t.add_argument("--dense", action="store_true", help="exact collectives only (the baseline)")
    t.add_argument("--seed", type=ranged(int, 0, 2**63 - 1), default=1)
    t.add_argument("--eval-samples", type=ranged(int, 1, 1000000000), default=32768)
    d = p.add_argument_group("data (synthetic, planted teacher: the C++ example's generator)")
    d.add_argument("--zipf", type=ranged(float, 0.1, 10), default=1.05, help="id skew")
    d.add_argument("--noise", type=ranged(float, 0, 100), default=0.5, help="teacher logit noise")
    d.add_argument("--write-tsv", metavar="FILE", help="write --tsv-rows training rows as Criteo TSV and exit")
    d.add_argument("--tsv-rows", type=ranged(int, 1, 10**10), default=100000)
    o = p.add_argument_group("modes and output")
    o.add_argument("--compare", action="store_true", help="exact then compressed, same seed and data, one table")
    o.add_argument("--check-single", action="store_true",
                   help="compare the exact run after --parity-steps steps with a 1-process run of the same "
                        "global batches (on rank 0)")
    o.add_argument("--parity-steps", type=ranged(int, 1, 1000000000), default=30,
                   help="--check-single: steps before the comparison (at most --steps)")
    o.add_argument("--progress", choices=["auto", "bar", "lines", "off"], default="auto",
                   help="rank 0's progress on stderr: a redrawn bar on a terminal, a line every "
                        "--progress-seconds otherwise")
    o.add_argument("--progress-seconds", type=ranged(float, 0, 86400), default=5.0)
    c = p.add_argument_group("checks (exit status 1 when violated)")
    c.add_argument("--min-auc", type=ranged(float, 0, 1), default=None, help="every run's held-out AUC >= X")
    c.add_argument("--max-auc-diff", type=ranged(float, 0, 1), default=None,
                   help="--compare: |AUC(compressed) - AUC(exact)| <= X")
    c.add_argument("--expect-fewer-bytes", action="store_true",
                   help="--compare: the compressed run sends fewer MP bytes and fewer DP bytes per step")
    c.add_argument("--parity-tol", type=ranged(float, 0, 1), default=1e-4,
                   help="--check-single: max |p_P - p_1| over the held-out probabilities")
    x = p.add_argument_group("testing only (negative controls of --check-single: it must report FAILED)")
    x.add_argument("--inject-routing-bug", action="store_true",
                   help="send each sample's embedding rows to the next rank's samples (gradients come back "
                        "the same wrong way), in the P-rank runs only")
    x.add_argument("--inject-hot-bug", action="store_true",
                   help="update the hot rows from each rank's own samples only (no allreduce), in the P-rank "
                        "runs only")
    x.add_argument("--inject-reference-offset", type=ranged(float, -1, 1), default=0.0, metavar="X",
                   help="add X to the 1-process reference's output bias (every logit) before it trains")
    return p


def parse_args(argv):
    p = build_parser()
    a = p.parse_args(argv)
    if a.bottom_mlp is None:
        a.bottom_mlp = [512, 256, a.dim]
    if a.bottom_mlp[-1] != a.dim:
        p.error(f"the bottom MLP's last size ({a.bottom_mlp[-1]}) must equal --dim ({a.dim}): "
                "the interaction dots it with the embeddings")
    if a.top_mlp[-1] != 1:
        p.error(f"the top MLP's last size must be 1 (one logit), got {a.top_mlp[-1]}")
    if a.compare and a.dense:
        p.error("--compare runs the exact baseline itself: drop --dense")
    if a.hot_rows > 0:
        if a.emb_update == "per-sample":
            p.error("--hot-rows needs --emb-update merged (the hot rows' gradients arrive merged over the batch)")
        a.emb_update = "merged"
    elif a.inject_hot_bug:
        p.error("--inject-hot-bug perturbs the hot rows' update: add --hot-rows")
    if a.emb_update is None:
        a.emb_update = "per-sample"
    try:
        a.sizes = dlrm_data.parse_table_sizes(a.table_sizes, a.tables)
    except ValueError as e:
        p.error(str(e))
    if a.write_tsv is None:
        if a.batch % WORLD_ENV != 0:
            p.error(f"--batch {a.batch} is not divisible by the {WORLD_ENV} ranks")
        if a.eval_samples < WORLD_ENV:
            p.error(f"--eval-samples {a.eval_samples}: need at least one held-out sample per rank ({WORLD_ENV})")
        if (a.max_auc_diff is not None or a.expect_fewer_bytes) and not a.compare:
            p.error("--max-auc-diff and --expect-fewer-bytes check --compare's two runs: add --compare")
        if a.check_single and a.parity_steps > a.steps:
            p.error(f"--parity-steps {a.parity_steps} is more than --steps {a.steps}")
        if a.inject_reference_offset != 0.0 and not a.check_single:
            p.error("--inject-reference-offset perturbs --check-single's reference: add --check-single")
        if a.check_single and a.compare and a.hot_rows > 0:
            p.error("--check-single checks the exact run, which --compare keeps without hot rows: drop --compare "
                    "to check --hot-rows")
    elif a.bag != 1:
        p.error("--write-tsv needs --bag 1 (Criteo rows have one id per column)")
    return a


# ---------------------------------------------------------------------------
# Progress on rank 0 (stderr)


class Progress:
    def __init__(self, label, total, mode, every_s):
        self.label, self.total = label, total
        tty = sys.stderr.isatty()
        self.mode = ("bar" if tty else "lines") if mode == "auto" else mode
        self.every_s = every_s
        self.start = time.monotonic()
        self.last = -1e9
        self.loss_sum, self.loss_n = 0.0, 0

    def update(self, done, loss):
        if self.mode == "off":
            return
        self.loss_sum += loss
        self.loss_n += 1
        now = time.monotonic()
        final = done == self.total
        if self.mode == "bar":
            if not final and now - self.last < 0.2:
                return
        elif not final and now - self.last < self.every_s:
            return
        self.last = now
        elapsed = now - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        loss = self.loss_sum / max(self.loss_n, 1)
        self.loss_sum, self.loss_n = 0.0, 0
        pct = 100.0 * done / max(self.total, 1)
        text = (f"[{self.label}] step {done}/{self.total} {pct:5.1f}%  loss (rank 0) {loss:.5f}  "
                f"elapsed {fmt_s(elapsed)}  ETA {fmt_s(eta)}")
        if self.mode == "bar":
            width = 24
            fill = int(width * done / max(self.total, 1))
            sys.stderr.write(f"\r[{self.label}] |{'#' * fill}{'.' * (width - fill)}| " + text[len(self.label) + 3:]
                             + "\x1b[K" + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()


def fmt_s(s):
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# ---------------------------------------------------------------------------
# Model


def mix(x):
    return dlrm_data.splitmix_int(x)


def assign_tables(sizes, ranks):
    """The C++ example's greedy balance: largest table first, each to the rank
    with the fewest rows among those holding fewer than ceil(T/P) tables."""
    order = sorted(range(len(sizes)), key=lambda t: -sizes[t])  # stable, like std::stable_sort
    cap = (len(sizes) + ranks - 1) // ranks
    load, count, owner = [0] * ranks, [0] * ranks, [0] * len(sizes)
    for t in order:
        best = -1
        for r in range(ranks):
            if count[r] < cap and (best < 0 or load[r] < load[best]):
                best = r
        owner[t] = best
        load[best] += sizes[t]
        count[best] += 1
    return owner


def make_mlp(torch, sizes, last_relu, seed):
    """Linear layers with ReLU (after the last one too when last_relu), DLRM's
    initialisation: W ~ N(0, 2/(in+out)), b ~ N(0, 1/out), from one seeded
    generator, so every rank and the 1-process reference build the same weights."""
    nn = torch.nn
    g = torch.Generator().manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        with torch.no_grad():
            lin.weight.normal_(0.0, math.sqrt(2.0 / (sizes[i] + sizes[i + 1])), generator=g)
            lin.bias.normal_(0.0, math.sqrt(1.0 / sizes[i + 1]), generator=g)
        layers.append(lin)
        if last_relu or i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def make_table(torch, a, t):
    """Table t: U(-1/sqrt(rows), 1/sqrt(rows)) from a generator seeded by (seed, t)
    only, so any rank count builds the same table."""
    rows = a.sizes[t]
    g = torch.Generator().manual_seed(mix((a.seed * 0x100000001B3 + t + 17) & ((1 << 64) - 1)) >> 1)
    w = torch.empty(rows, a.dim)
    w.uniform_(-1.0 / math.sqrt(rows), 1.0 / math.sqrt(rows), generator=g)
    return w


def interact(torch, z, emb):
    """[z, <v_i, v_j> for i < j] over v = [z, e_0, .., e_{T-1}], row-major pair order."""
    v = torch.cat([z.unsqueeze(1), emb], dim=1)
    gram = torch.bmm(v, v.transpose(1, 2))
    n = v.shape[1]
    iu, ju = torch.triu_indices(n, n, offset=1)
    return torch.cat([z, gram[:, iu, ju]], dim=1)


def occurrences(ids, grad):
    """Each id of the bags ids [n, bag] with its bag's gradient (grad [n, dim]),
    in sample order: ([n * bag], [n * bag, dim])."""
    flat = ids.reshape(-1)
    return flat, (grad.repeat_interleave(ids.shape[1], dim=0) if ids.shape[1] > 1 else grad)


def update_rows(torch, a, w, accum, ids, g):
    """One update per row (the C++ example's updateRow): ids distinct, g [n, dim]
    each row's gradient; SGD, or row-wise Adagrad, where the row's accumulator
    first gains the mean of its squared gradient and the row then steps by
    emb_lr / (sqrt(accumulator) + 1e-8)."""
    if a.optimizer != "adagrad":
        w.index_add_(0, ids, g, alpha=-a.emb_lr)
        return
    acc = accum[ids] + (g * g).sum(dim=1) / g.shape[1]
    accum[ids] = acc
    w.index_add_(0, ids, -(a.emb_lr / (acc.sqrt() + 1e-8)).unsqueeze(1) * g)


def embedding_update(torch, a, w, accum, ids, g):
    """Sparse update of one table from the occurrences of its ids, ids [m] with
    their gradients g [m, dim] in global sample order, as the C++ example makes
    it. --emb-update merged: each id's gradients summed, then one update per
    distinct id (FBGEMM's exact row-wise Adagrad). per-sample: one update per
    occurrence, in order, where each occurrence first adds the mean of its
    squared gradient to the row's accumulator and then steps by
    emb_lr / (sqrt(accumulator) + 1e-8); vectorised: occurrences sorted by id
    (stably, so in sample order), the accumulator a running sum per id."""
    if a.emb_update == "merged":
        uniq, inv = torch.unique(ids, return_inverse=True)
        update_rows(torch, a, w, accum, uniq, torch.zeros(uniq.shape[0], g.shape[1]).index_add_(0, inv, g))
        return
    if a.optimizer != "adagrad":
        w.index_add_(0, ids, g, alpha=-a.emb_lr)
        return
    order = torch.sort(ids, stable=True).indices
    sid, sg = ids[order], g[order]
    s = (sg * sg).sum(dim=1, dtype=torch.float64) / g.shape[1]
    uniq, counts = torch.unique_consecutive(sid, return_counts=True)
    csum = torch.cumsum(s, 0)
    ends = torch.cumsum(counts, 0)
    before = torch.cat([csum.new_zeros(1), csum[ends[:-1] - 1]])  # running sum before each id's first occurrence
    acc = accum[sid].double() + csum - before.repeat_interleave(counts)
    step = (a.emb_lr / (acc.float().sqrt() + 1e-8)).unsqueeze(1)
    w.index_add_(0, sid, -step * sg)
    accum[uniq] = acc[ends - 1].float()


def table_checksums(torch, a, tables):
    """The C++ example's two checksums per table (float64): the sum of its
    weights and a position-weighted sum (weight mix(i) % 7 - 3 for flat index i),
    which a row in the wrong place changes. tables: {t: [rows, dim]}; [T, 2],
    zeros for the tables not given."""
    out = torch.zeros(a.tables, 2, dtype=torch.float64)
    for t, w in tables.items():
        flat = w.reshape(-1).double()
        out[t, 0] = flat.sum()
        chunk = 1 << 22
        for lo in range(0, flat.numel(), chunk):
            i = np.arange(lo, min(lo + chunk, flat.numel()), dtype=np.uint64)
            weight = torch.from_numpy((dlrm_data.splitmix(i) % np.uint64(7)).astype(np.float64) - 3.0)
            out[t, 1] += (flat[lo:lo + weight.numel()] * weight).sum()
    return out


class HotRows:
    """The hot rows (the C++ example's chooseHotRows): per table, the --hot-rows
    ids seen most often, at least --hot-min-count times, in the first
    --hot-sample training samples (ties: the lower id). Every rank counts the
    same samples, so every rank picks the same rows, in the same slots: key =
    offset[t] + slot, slots most frequent first, as in the C++ example (the
    row-sparse allreduce's partition places rows by key). cold_load[t] = the
    counted bags with a cold id: with hot rows the alltoall carries only those,
    so tables are balanced over the ranks by it instead of by rows."""

    def __init__(self, torch, a, source):
        self.torch = torch
        counts = [np.zeros(n, dtype=np.int64) for n in a.sizes]
        seen = []
        chunk = 8192
        for first in range(0, a.hot_sample, chunk):
            ids = source.train(first, min(chunk, a.hot_sample - first)).ids
            for t in range(a.tables):
                counts[t] += np.bincount(ids[:, t, :].reshape(-1), minlength=a.sizes[t])
            seen.append(ids)
        self.ids = []
        for c in counts:
            cand = np.flatnonzero(c >= a.hot_min_count)
            self.ids.append(cand[np.lexsort((cand, -c[cand]))][:a.hot_rows])
        self.offset = np.concatenate([[0], np.cumsum([len(h) for h in self.ids])]).astype(np.int64)
        self.total = int(self.offset[-1])
        # key_of[t][id]: the row's key, -1 for a cold id
        self.key_of = []
        for t, h in enumerate(self.ids):
            k = torch.full((a.sizes[t],), -1, dtype=torch.int64)
            k[torch.from_numpy(h)] = torch.arange(int(self.offset[t]), int(self.offset[t + 1]))
            self.key_of.append(k)
        self.cold_load = [0] * a.tables
        for ids in seen:
            for t in range(a.tables):
                self.cold_load[t] += int((self.key_of[t].numpy()[ids[:, t, :]] < 0).any(axis=1).sum())

    def cold(self, ids):
        """[n, T] bool: the bag (sample, table) has a cold id."""
        return self.torch.stack([(k[ids[:, t, :]] < 0).any(dim=1) for t, k in enumerate(self.key_of)], dim=1)

    def keys(self, ids):
        """[n, T, bag]: each id's key, -1 for the cold ones."""
        return self.torch.stack([k[ids[:, t, :]] for t, k in enumerate(self.key_of)], dim=1)


# ---------------------------------------------------------------------------
# Training


class Run:
    """One training run (exact or compressed) on every rank; hot: a HotRows, or
    None for every row in its owner's table only."""

    def __init__(self, torch, dist, spccl_torch, a, source, compressed, label, hot=None):
        self.torch, self.dist, self.spccl = torch, dist, spccl_torch
        self.a, self.source, self.compressed, self.label = a, source, compressed, label
        self.hot = hot
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local = a.batch // self.world
        self.owner = assign_tables(hot.cold_load if hot else a.sizes, self.world)
        self.owned_by = [[t for t in range(a.tables) if self.owner[t] == r] for r in range(self.world)]
        self.max_owned = max(1, max(len(v) for v in self.owned_by))
        # table t's position among the received rows of a sample: owner * max_owned + slot
        self.table_pos = torch.tensor([self.owner[t] * self.max_owned + self.owned_by[self.owner[t]].index(t)
                                       for t in range(a.tables)])
        self.tables = {t: make_table(torch, a, t) for t in self.owned_by[self.rank]}
        self.accum = {t: torch.zeros(a.sizes[t]) for t in self.tables}
        if hot:
            # Every replica starts as its owner's row; the owner's own copy of a
            # hot row stays unused (checksums() puts the replica in its place).
            self.hot_w = torch.empty(hot.total, a.dim)
            self.hot_accum = torch.zeros(hot.total)
            for t in range(a.tables):
                lo, hi = int(hot.offset[t]), int(hot.offset[t + 1])
                if hi > lo:
                    w = self.tables[t] if t in self.tables else make_table(torch, a, t)
                    self.hot_w[lo:hi] = w[torch.from_numpy(hot.ids[t])]
        # Per training step, summed: the exact convention of the blocks sent, the
        # hot rows' allreduce (sent, spccl's dense count), and the bags and rows.
        self.convention = self.hot_sent = self.hot_dense = 0.0
        self.bags_seen = self.hot_bags = self.rows_used = self.rows_sent = 0.0
        from torch.nn.parallel import DistributedDataParallel as DDP
        self.bottom = DDP(make_mlp(torch, [dlrm_data.DENSE_FEATURES] + a.bottom_mlp, True, a.seed * 2 + 1),
                          bucket_cap_mb=a.bucket_mb)
        top_in = a.dim + (a.tables + 1) * a.tables // 2
        self.top = DDP(make_mlp(torch, [top_in] + a.top_mlp, False, a.seed * 2 + 2), bucket_cap_mb=a.bucket_mb)
        # The loss is each rank's share of the global batch's mean (sum over its
        # samples / B), as in the C++ example, so the MLP gradients are summed, not
        # averaged: an exact sum hook, or the DCT hook (which averages) times P.
        self.states = []
        for m in (self.bottom, self.top):
            if compressed:
                st = spccl_torch.hooks.DCTState(density=a.dp_density, threshold_interval=a.tau_interval,
                                                start_iter=a.dp_exact_steps)
                m.register_comm_hook(st, _dct_sum_hook)
                self.states.append(st)
            else:
                m.register_comm_hook(None, _sum_hook)
        params = list(self.bottom.parameters()) + list(self.top.parameters())
        self.mlp_numel = sum(p.numel() for p in params)
        if a.optimizer == "adagrad":
            self.opt = torch.optim.Adagrad(params, lr=a.lr, eps=1e-8)
        else:
            self.opt = torch.optim.SGD(params, lr=a.lr)
        self.mp_compressed = compressed and a.mp_density < 1.0
        self.block_bytes = self.local * self.max_owned * a.dim * 4

    # the exchange -----------------------------------------------------------
    def exchange(self, send):
        """send [P * rows, dim], block j = rows for rank j's samples."""
        if self.mp_compressed:
            return self.spccl.alltoall_rows(send, self.a.mp_density)
        return _exact_alltoall(self.torch, self.dist).apply(send)

    def layout(self, ids, training):
        """With hot rows, the places of the rows of one batch (the C++ example's
        layoutRows): only the bags with a cold id have a row, packed per (owner,
        receiver) pair in sample order and then the owner's slots, every block as
        large as the largest pair's count, so the alltoall's blocks are equal.
        Every rank has the global batch's ids and the hot set, so sender and
        receiver agree on every place without exchanging it. Returns (rows per
        block, send_pos [n, owned]: the row of each of this rank's bags, -1 for
        none; src [local * T]: the received row of each of this rank's samples'
        bags, rows * P (a zero row) for none)."""
        torch, p = self.torch, self.world
        n = ids.shape[0]
        local = n // p
        cold = self.hot.cold(ids)
        counts = torch.stack([cold[:, v].reshape(p, local * len(v)).sum(dim=1) for v in self.owned_by])
        most = int(counts.max())
        mine = self.owned_by[self.rank]
        m = cold[:, mine].reshape(p, local * len(mine))
        pos = torch.cumsum(m, dim=1) - 1 + torch.arange(p).unsqueeze(1) * most
        send_pos = torch.where(m, pos, -1).reshape(n, len(mine))
        src = torch.full((local, self.a.tables), p * most, dtype=torch.int64)
        here = cold[self.rank * local:(self.rank + 1) * local]
        for j, v in enumerate(self.owned_by):
            if v:
                mj = here[:, v].reshape(-1)
                src[:, v] = torch.where(mj, torch.cumsum(mj, 0) - 1 + j * most, p * most).reshape(local, len(v))
        if training:
            self.bags_seen += cold.numel()
            self.hot_bags += float((~cold).sum())
            self.rows_used += float(counts.sum())
            self.rows_sent += most * p * p
            self.convention += 2.0 * (p - 1) * most * self.a.dim * 4
        return most, send_pos, src.reshape(-1)

    def pooled(self, ids, lay=None):
        """The rows this rank sends. Without hot rows [B * max_owned, dim]: row
        (g * max_owned + slot) = this rank's table in that slot, pooled for sample
        g; zeros in the padding slots. With hot rows [P * rows, dim]: each bag's
        cold ids summed, at its place in lay (the receiver adds the hot ones)."""
        torch = self.torch
        n = ids.shape[0]
        if lay is None:
            out = torch.zeros(n, self.max_owned, self.a.dim)
            for slot, t in enumerate(self.owned_by[self.rank]):
                idx = ids[:, t, :]
                out[:, slot] = self.tables[t][idx].sum(dim=1) if idx.shape[1] > 1 else self.tables[t][idx[:, 0]]
            return out.reshape(n * self.max_owned, self.a.dim)
        most, send_pos, _ = lay
        out = torch.zeros(self.world * most, self.a.dim)
        for slot, t in enumerate(self.owned_by[self.rank]):
            sel = send_pos[:, slot] >= 0
            idx = ids[sel, t, :]
            rows = self.tables[t][idx] * (self.hot.key_of[t][idx] < 0).unsqueeze(-1)
            out[send_pos[sel, slot]] = rows.sum(dim=1)
        return out

    def forward(self, batch, ids, send, lay=None):
        torch, a = self.torch, self.a
        n = batch.n
        local = n // self.world
        first = self.rank * local
        if a.inject_routing_bug and send.shape[0] > 0:  # testing only: block j carries rank j-1's samples' rows
            send = send.view(self.world, -1, a.dim).roll(1, 0).reshape(send.shape)
        if lay is None:
            recv = self.exchange(send)
            emb = recv.view(self.world, local, self.max_owned, a.dim).permute(1, 0, 2, 3)
            emb = emb.reshape(local, self.world * self.max_owned, a.dim)[:, self.table_pos]
        else:
            # A batch whose bags are all hot sends nothing (every rank knows it).
            recv = self.exchange(send) if lay[0] > 0 else send
            emb = torch.cat([recv, recv.new_zeros(1, a.dim)])[lay[2]]
            # The bags' hot rows from the replicas; their gradients, summed per
            # row over this rank's samples, arrive in self.hot_grad's leaf.
            keys = self.hot.keys(ids[first:first + local])
            hot = keys >= 0
            bag_of = torch.arange(local * a.tables).repeat_interleave(a.bag).view(keys.shape)
            uniq, inv = torch.unique(keys[hot], return_inverse=True)
            leaf = self.hot_w[uniq]
            if torch.is_grad_enabled():
                leaf.requires_grad_(True)
            emb = emb.index_add(0, bag_of[hot], leaf[inv]).view(local, a.tables, a.dim)
            self.hot_grad = (uniq, leaf)
        dense = torch.from_numpy(batch.dense[first:first + local])
        z = self.bottom(dense)
        return self.top(interact(torch, z, emb)).squeeze(1)

    def update_hot(self):
        """The hot rows' update: this rank's merged gradients summed over ranks by
        the row-sparse allreduce (bit for bit the same on every rank), then one
        update per row on every replica."""
        torch, a = self.torch, self.a
        uniq, leaf = self.hot_grad
        self.hot_grad = None
        grad = leaf.grad if leaf.grad is not None else torch.zeros(uniq.shape[0], a.dim)
        if a.inject_hot_bug and self.world > 1:  # testing only: each replica follows its own rank's samples
            keys, rows = uniq, grad
        else:
            s0 = self.spccl.get_stats()
            keys, rows = self.spccl.allreduce_rowsparse(uniq, grad)
            s1 = self.spccl.get_stats()
            self.hot_sent += s1["bytes_sent"] - s0["bytes_sent"]
            self.hot_dense += s1["dense_bytes"] - s0["dense_bytes"]
        update_rows(torch, a, self.hot_w, self.hot_accum, keys, rows)

    def counters(self):
        s = self.spccl.get_stats()
        dp_sent = dp_dense = 0
        for st in self.states:
            h = st.stats()
            # the hook's exact warm-up steps (if any) go straight to MPI: not in the communicator's count
            dp_sent += h["bytes_sent"] - h["exact_bytes"]
            dp_dense += h["dense_bytes"] - h["exact_bytes"]
        return np.array([s["bytes_sent"] - dp_sent, s["dense_bytes"] - dp_dense], dtype=np.float64)

    def dp_bytes(self):
        sent = sum(st.stats()["bytes_sent"] for st in self.states)
        dense = sum(st.stats()["dense_bytes"] for st in self.states)
        return sent, dense

    def train(self, parity_at=0):
        torch, a = self.torch, self.a
        p = self.world
        progress = Progress(self.label, a.steps, a.progress, a.progress_seconds) if self.rank == 0 else None
        ex_dense = 2.0 * (p - 1) / p * self.mlp_numel * 4  # DP, the ring convention
        mp_dense_step = 2.0 * (p - 1) * self.block_bytes   # MP fwd + bwd: (P-1) blocks each way
        mp_sent = mp_dense = 0.0
        loss_total = 0.0
        self.dist.barrier()
        start = time.monotonic()
        c0 = self.counters()
        for s in range(a.steps):
            batch = self.source.train(s * a.batch, a.batch)
            ids = torch.from_numpy(batch.ids)
            lay = self.layout(ids, True) if self.hot else None
            send = self.pooled(ids, lay).requires_grad_(True)
            logit = self.forward(batch, ids, send, lay)
            first = self.rank * self.local
            y = torch.from_numpy(batch.labels[first:first + self.local])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="sum") / a.batch
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            if lay is None:
                g = send.grad.view(a.batch, self.max_owned, a.dim)
                for slot, t in enumerate(self.owned_by[self.rank]):
                    embedding_update(torch, a, self.tables[t], self.accum[t], *occurrences(ids[:, t, :], g[:, slot]))
            else:
                # The cold ids of the bags this rank sent (hot ones: update_hot).
                for slot, t in enumerate(self.owned_by[self.rank]):
                    sel = lay[1][:, slot] >= 0
                    if bool(sel.any()):
                        flat, g = occurrences(ids[sel, t, :], send.grad[lay[1][sel, slot]])
                        cold = self.hot.key_of[t][flat] < 0
                        embedding_update(torch, a, self.tables[t], self.accum[t], flat[cold], g[cold])
                self.update_hot()
            loss_value = loss.item() * p
            loss_total += loss_value
            if progress:
                progress.update(s + 1, loss_value)
            if s + 1 == parity_at:
                self.parity = self.evaluate()[0], self.mlp_params().clone(), self.checksums()
        elapsed = time.monotonic() - start
        c1 = self.counters()
        steps = max(a.steps, 1)
        convention = self.convention / steps if self.hot else mp_dense_step
        if self.mp_compressed:
            mp_sent, mp_dense = (c1 - c0) / steps
        else:
            mp_sent, mp_dense = convention + self.hot_sent / steps, convention + self.hot_dense / steps
        if self.states:
            dp_sent, dp_dense = (x / steps for x in self.dp_bytes())
        else:
            dp_sent = dp_dense = ex_dense
        v = torch.tensor([mp_sent, mp_dense, dp_sent, dp_dense, loss_total / steps, self.hot_sent / steps,
                          self.hot_dense / steps, convention], dtype=torch.float64)
        self.dist.all_reduce(v)
        v /= p
        t = torch.tensor([elapsed], dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return {"mp": v[0].item(), "mp_dense": v[1].item(), "dp": v[2].item(), "dp_dense": v[3].item(),
                "train_loss": v[4].item(), "step_ms": t.item() / steps * 1e3, "mp_dense_convention": v[7].item(),
                "dp_dense_convention": ex_dense, "mp_compressed": self.mp_compressed, "mp_hot": v[5].item(),
                "mp_hot_dense": v[6].item(), "hot_rows": self.hot.total if self.hot else 0,
                "hot_bag_share": self.hot_bags / self.bags_seen if self.bags_seen else 0.0,
                "pad_share": 1.0 - self.rows_used / self.rows_sent if self.rows_sent else 0.0}

    def evaluate(self):
        """Held-out probabilities in global sample order (rank 0), the exchange
        as in training (compressed when training used it)."""
        torch, a = self.torch, self.a
        total = a.eval_samples // self.world * self.world
        probs, labels, teacher = [], [], []
        with torch.no_grad():
            for first in range(0, total, a.batch):
                n = min(a.batch, total - first)
                batch = self.source.eval(first, n)
                ids = torch.from_numpy(batch.ids)
                lay = self.layout(ids, False) if self.hot else None
                logit = self.forward(batch, ids, self.pooled(ids, lay), lay)
                mine = torch.sigmoid(logit).contiguous()
                parts = [torch.empty_like(mine) for _ in range(self.world)]
                self.dist.all_gather(parts, mine)
                probs.append(torch.cat(parts).numpy())
                labels.append(batch.labels)
                teacher.append(batch.teacher)
        self.hot_grad = None
        return np.concatenate(probs), np.concatenate(labels), np.concatenate(teacher)

    def mlp_params(self):
        return self.torch.cat([q.detach().reshape(-1) for m in (self.bottom, self.top) for q in m.parameters()])

    def replicated(self):
        """What must be bitwise equal on every rank: the MLPs, and the hot rows."""
        mlp = self.mlp_params()
        return self.torch.cat([mlp, self.hot_w.reshape(-1)]) if self.hot else mlp

    def checksums(self):
        """table_checksums of every table, summed over the owners (on every
        rank), the hot rows' replicas in their owners' places."""
        tables = {}
        for t, w in self.tables.items():
            if self.hot and len(self.hot.ids[t]):
                w = w.clone()
                lo, hi = int(self.hot.offset[t]), int(self.hot.offset[t + 1])
                w[self.torch.from_numpy(self.hot.ids[t])] = self.hot_w[lo:hi]
            tables[t] = w
        out = table_checksums(self.torch, self.a, tables)
        self.dist.all_reduce(out)
        return out


def _sum_hook(_, bucket):
    """DDP communication hook: the exact sum over the group (the spccl backend's
    all_reduce), without DDP's division by the world size."""
    import torch.distributed as dist
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])


def _dct_sum_hook(state, bucket):
    """spccl's DCT hook, which averages like torch's hooks, times the world size: the sum."""
    import spccl_torch
    import torch.distributed as dist
    world = dist.get_world_size(state.process_group)
    return spccl_torch.hooks.dct_hook(state, bucket).then(lambda f: f.value().mul_(world))


def _exact_alltoall(torch, dist):
    """The exact exchange through the backend's all_to_all_single, forward and
    backward (equal blocks)."""

    class Exact(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = torch.empty_like(x)
            dist.all_to_all_single(out, x.contiguous())
            return out

        @staticmethod
        def backward(ctx, g):
            out = torch.empty_like(g)
            dist.all_to_all_single(out, g.contiguous())
            return out

    return Exact


def metrics(p, y):
    q = np.clip(p.astype(np.float64), 1e-7, 1 - 1e-7)
    pos = y > 0.5
    ll = -np.mean(np.where(pos, np.log(q), np.log(1 - q)))
    acc = np.mean((p >= 0.5) == pos)
    return {"auc": dlrm_data.auc(p, y), "logloss": float(ll), "accuracy": float(acc), "positives": float(pos.mean())}


def single_reference(torch, a, source):
    """The exact run's global batches in one process: every table local (no
    hot rows: replicating them must change nothing), the loss the mean over the
    global batch, no communication."""
    tables = [make_table(torch, a, t) for t in range(a.tables)]
    accum = [torch.zeros(s) for s in a.sizes]
    bottom = make_mlp(torch, [dlrm_data.DENSE_FEATURES] + a.bottom_mlp, True, a.seed * 2 + 1)
    top = make_mlp(torch, [a.dim + (a.tables + 1) * a.tables // 2] + a.top_mlp, False, a.seed * 2 + 2)
    if a.inject_reference_offset != 0.0:  # testing only: the reference no longer matches
        with torch.no_grad():
            top[len(top) - 1].bias[0] += a.inject_reference_offset  # every logit moves by X
    params = list(bottom.parameters()) + list(top.parameters())
    opt = torch.optim.Adagrad(params, lr=a.lr, eps=1e-8) if a.optimizer == "adagrad" else \
        torch.optim.SGD(params, lr=a.lr)

    def fwd(batch, ids, emb):
        z = bottom(torch.from_numpy(batch.dense))
        return top(interact(torch, z, emb)).squeeze(1)

    def pooled(ids):
        return torch.stack([tables[t][ids[:, t, :]].sum(dim=1) for t in range(a.tables)], dim=1)

    for s in range(a.parity_steps):
        batch = source.train(s * a.batch, a.batch)
        ids = torch.from_numpy(batch.ids)
        emb = pooled(ids).requires_grad_(True)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            fwd(batch, ids, emb), torch.from_numpy(batch.labels), reduction="sum") / a.batch
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        for t in range(a.tables):
            embedding_update(torch, a, tables[t], accum[t], *occurrences(ids[:, t, :], emb.grad[:, t]))
    checksums = table_checksums(torch, a, dict(enumerate(tables)))
    total = a.eval_samples // WORLD_ENV * WORLD_ENV
    probs = []
    with torch.no_grad():
        for first in range(0, total, a.batch):
            batch = source.eval(first, min(a.batch, total - first))
            ids = torch.from_numpy(batch.ids)
            probs.append(torch.sigmoid(fwd(batch, ids, pooled(ids))).numpy())
    return np.concatenate(probs), torch.cat([q.detach().reshape(-1) for q in params]), checksums


def human(b):
    if b >= 1e9:
        return f"{b / 1e9:.2f} GB"
    if b >= 1e6:
        return f"{b / 1e6:.2f} MB"
    if b >= 1e3:
        return f"{b / 1e3:.1f} kB"
    return f"{b:.0f} B"


def ratio(dense, sent):
    return dense / sent if sent > 0 else 0.0


def main(argv):
    try:
        a = parse_args(argv)
    except UsageError as e:
        if RANK_ENV == 0:
            sys.stderr.write(f"dlrm.py: error: {e}\n(--help lists the options)\n")
        return 2

    if a.write_tsv is not None:
        src = dlrm_data.SyntheticSource(a.seed, a.sizes, a.bag, a.zipf, a.noise, a.eval_samples)
        try:
            src.write_tsv(a.write_tsv, a.tsv_rows)
        except OSError as e:
            sys.stderr.write(f"dlrm.py: {a.write_tsv}: {e.strerror}\n")
            return 2
        print(f"wrote {a.tsv_rows} rows to {a.write_tsv}")
        return 0

    import torch
    import torch.distributed as dist
    import spccl_torch

    torch.set_num_threads(1)
    os.environ.setdefault("RANK", str(RANK_ENV))
    os.environ.setdefault("WORLD_SIZE", str(WORLD_ENV))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # A MASTER_PORT from the environment wins (the ctests pass a free one:
    # python/tests/isolated.py); otherwise a port from the mpirun job id.
    job = int(os.environ.get("OMPI_MCA_ess_base_jobid", "0") or 0)
    os.environ.setdefault("MASTER_PORT", str(21000 + (job + 11) % 20000))
    # Read when the backend makes its communicator.
    os.environ["SPCCL_ROWS_CODEC"] = a.rows_codec or os.environ.get("SPCCL_ROWS_CODEC", "fp8")
    codec = os.environ["SPCCL_ROWS_CODEC"]
    dist.init_process_group("spccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    source = dlrm_data.SyntheticSource(a.seed, a.sizes, a.bag, a.zipf, a.noise, a.eval_samples)
    owner = assign_tables(a.sizes, world)
    # Chosen once: --compare's exact run is its baseline, without hot rows.
    hot = HotRows(torch, a, source) if a.hot_rows > 0 else None
    if rank == 0:
        print(f"{world} ranks, global batch {a.batch}, {a.steps} steps, {a.tables} tables (dim {a.dim}), "
              f"tables per rank {[owner.count(r) for r in range(world)]}, DP density {a.dp_density:g}, "
              f"MP density {a.mp_density:g} ({codec} values), tau every {a.tau_interval} steps, "
              f"{a.emb_update} table updates", flush=True)
        if hot:
            hot_owner = assign_tables(hot.cold_load, world)
            print(f"hot rows{' (compressed run)' if a.compare else ''}: up to {a.hot_rows} per table seen >= "
                  f"{a.hot_min_count} times in the first {a.hot_sample} samples, {hot.total} replicated; tables "
                  f"per rank by cold load {[hot_owner.count(r) for r in range(world)]}", flush=True)

    def one(compressed, label):
        run = Run(torch, dist, spccl_torch, a, source, compressed, label,
                  hot if compressed or not a.compare else None)
        res = run.train(a.parity_steps if a.check_single and not compressed else 0)
        if not compressed and a.check_single:
            res["parity"] = run.parity
        p, y, teacher = run.evaluate()
        res.update(metrics(p, y))
        res["teacher_auc"] = dlrm_data.auc(teacher, y)
        res["probs"] = p
        params = run.replicated()
        root = params.clone()
        dist.broadcast(root, 0)
        same = torch.tensor([1 if torch.equal(root, params) else 0], dtype=torch.int32)
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        res["replicas_identical"] = bool(same.item())
        if rank == 0:
            print(f"[{label}] held-out: AUC {res['auc']:.5f}  logloss {res['logloss']:.5f}  "
                  f"accuracy {res['accuracy']:.5f}  (positives {res['positives']:.3f}, "
                  f"teacher's AUC ceiling {res['teacher_auc']:.5f})\n"
                  f"[{label}] bytes/step/rank: DP {human(res['dp'])} (dense {human(res['dp_dense'])}, "
                  f"{ratio(res['dp_dense'], res['dp']):.1f}x less)  MP {human(res['mp'])} "
                  f"(dense {human(res['mp_dense'])}, {ratio(res['mp_dense'], res['mp']):.1f}x less)  "
                  f"step {res['step_ms']:.1f} ms", flush=True)
            if res["hot_rows"]:
                print(f"[{label}] hot rows: {res['hot_rows']} replicated, {100 * res['hot_bag_share']:.1f}% of the "
                      f"bags all hot (nothing sent), {100 * res['pad_share']:.1f}% of the alltoall's rows padding, "
                      f"MP = alltoalls {human(res['mp'] - res['mp_hot'])} + hot rows' allreduce "
                      f"{human(res['mp_hot'])}", flush=True)
        return res

    status = 0
    checks = []
    results = {}
    if a.compare or a.dense or a.check_single:
        results["exact"] = one(False, "exact")
    if a.compare or not (a.dense or a.check_single):
        results["compressed"] = one(True, "compressed")
    for name, r in results.items():
        what = "MLP replicas and hot rows" if r["hot_rows"] else "MLP replicas"
        checks.append((f"{name}: {what} bitwise identical on every rank", r["replicas_identical"]))
        if a.min_auc is not None:
            checks.append((f"{name}: AUC {r['auc']:.5f} >= {a.min_auc}", r["auc"] >= a.min_auc))
    if rank == 0 and a.compare:
        d, c = results["exact"], results["compressed"]
        print(f"\n{world} ranks, global batch {a.batch}, {a.steps} steps, {a.tables} tables (dim {a.dim}), "
              f"DP density {a.dp_density:g}, MP density {a.mp_density:g} ({codec} values), "
              f"tau every {a.tau_interval} steps, {a.emb_update} table updates"
              + (f", {hot.total} hot rows (compressed run)" if hot else ""))
        print(f"| {'':28s} | {'exact':>14s} | {'compressed':>14s} | {'ratio / diff':>14s} |")
        print(f"|{'-' * 30}|{'-' * 16}|{'-' * 16}|{'-' * 16}|")
        for key, name in (("auc", "held-out AUC"), ("logloss", "held-out logloss"), ("accuracy", "held-out accuracy")):
            print(f"| {name:28s} | {d[key]:14.5f} | {c[key]:14.5f} | {c[key] - d[key]:+14.5f} |")
        for key, name in (("dp", "DP bytes/step/rank"), ("mp", "MP bytes/step/rank (fwd+bwd)")):
            print(f"| {name:28s} | {d[key]:14.0f} | {c[key]:14.0f} | {ratio(d[key], c[key]):13.1f}x |")
        dt, ct = d["dp"] + d["mp"], c["dp"] + c["mp"]
        print(f"| {'total bytes/step/rank':28s} | {dt:14.0f} | {ct:14.0f} | {ratio(dt, ct):13.1f}x |")
        print(f"| {'step time (ms)':28s} | {d['step_ms']:14.1f} | {c['step_ms']:14.1f} | "
              f"{ratio(d['step_ms'], c['step_ms']):13.2f}x |")
        print(f"teacher's AUC ceiling on the held-out set: {d['teacher_auc']:.5f}")
        print(f"AUC difference (compressed - exact): {c['auc'] - d['auc']:+.5f}", flush=True)
    if a.compare:
        d, c = results["exact"], results["compressed"]
        if a.max_auc_diff is not None:
            checks.append((f"|AUC difference| {abs(c['auc'] - d['auc']):.5f} <= {a.max_auc_diff}",
                           abs(c["auc"] - d["auc"]) <= a.max_auc_diff))
        if a.expect_fewer_bytes:
            checks.append((f"compressed MP bytes {c['mp']:.0f} < exact {d['mp']:.0f}", c["mp"] < d["mp"]))
            checks.append((f"compressed DP bytes {c['dp']:.0f} < exact {d['dp']:.0f}", c["dp"] < d["dp"]))
            # spccl's own dense count of the compressed calls is the convention the exact run uses
            if c["mp_compressed"] and not c["hot_rows"]:
                checks.append((f"compressed run's MP dense bytes {c['mp_dense']:.0f} = the exact convention "
                               f"{d['mp']:.0f}", abs(c["mp_dense"] - d["mp"]) <= 1e-6 * d["mp"]))
            elif c["mp_compressed"]:
                # with hot rows the blocks are the cold bags' (their size varies by step); the
                # row-sparse allreduce's dense count is its own
                x, conv = c["mp_dense"] - c["mp_hot_dense"], c["mp_dense_convention"]
                checks.append((f"compressed run's alltoall dense bytes {x:.0f} = the exact convention of its "
                               f"blocks {conv:.0f}", abs(x - conv) <= 1e-6 * conv))
    if a.check_single:
        d = results["exact"]
        ok = True
        if rank == 0:
            p1, params1, sums1 = single_reference(torch, a, source)
            pp, paramsp, sumsp = d["parity"]
            diff = float(np.max(np.abs(p1 - pp))) if p1.size else 0.0
            pdiff = float((params1 - paramsp).abs().max() / params1.abs().max().clamp_min(1e-30))
            tdiff = float(((sums1 - sumsp).abs() / sums1.abs().clamp_min(1.0)).max())
            labels = np.concatenate([source.eval(f, min(a.batch, p1.size - f)).labels
                                     for f in range(0, p1.size, a.batch)])
            auc_p, auc1 = dlrm_data.auc(pp, labels), dlrm_data.auc(p1, labels)
            ok = diff <= a.parity_tol and pdiff <= a.parity_tol and tdiff <= a.parity_tol
            print(f"parity check ({world} ranks vs 1 process, {a.parity_steps} steps): max |p_P - p_1| {diff:.3g}, "
                  f"max MLP parameter difference {pdiff:.3g} of the largest, max table checksum difference "
                  f"{tdiff:.3g} (relative), AUC {auc_p:.6f} vs {auc1:.6f}: {'OK' if ok else 'MISMATCH'}", flush=True)
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
        dist.broadcast(flag, 0)
        checks.append((f"parity with a 1-process run within {a.parity_tol:g}", bool(flag.item())))
    failed = [name for name, ok in checks if not ok]
    if rank == 0 and checks:
        for name, ok in checks:
            print(f"check {name}: {'PASSED' if ok else 'FAILED'}")
        print("checks: " + ("all passed" if not failed else f"{len(failed)} FAILED"), flush=True)
    if failed:
        status = 1
    dist.barrier()
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
