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
exact sum hook over the backend's all_reduce. The synthetic data (data.py) is the C++
generator's, sample for sample.
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


def embedding_update(torch, a, w, accum, ids, grad):
    """Sparse update of one table from its per-sample gradients grad [B, dim]
    (ids [B, bag]), as the C++ example makes it: sample by sample in global
    order, SGD or row-wise Adagrad, where each occurrence of an id first adds the
    mean of its squared gradient to the row's accumulator and then steps by
    emb_lr / (sqrt(accumulator) + 1e-8). Vectorised: occurrences sorted by id
    (stably, so in sample order), the accumulator a running sum per id."""
    flat = ids.reshape(-1)
    g = grad.repeat_interleave(ids.shape[1], dim=0) if ids.shape[1] > 1 else grad
    if a.optimizer != "adagrad":
        w.index_add_(0, flat, g, alpha=-a.emb_lr)
        return
    order = torch.sort(flat, stable=True).indices
    sid, sg = flat[order], g[order]
    s = (sg * sg).sum(dim=1, dtype=torch.float64) / grad.shape[1]
    uniq, counts = torch.unique_consecutive(sid, return_counts=True)
    csum = torch.cumsum(s, 0)
    ends = torch.cumsum(counts, 0)
    before = torch.cat([csum.new_zeros(1), csum[ends[:-1] - 1]])  # running sum before each id's first occurrence
    acc = accum[sid].double() + csum - before.repeat_interleave(counts)
    step = (a.emb_lr / (acc.float().sqrt() + 1e-8)).unsqueeze(1)
    w.index_add_(0, sid, -step * sg)
    accum[uniq] = acc[ends - 1].float()


# ---------------------------------------------------------------------------
# Training


class Run:
    """One training run (exact or compressed) on every rank."""

    def __init__(self, torch, dist, spccl_torch, a, source, compressed, label):
        self.torch, self.dist, self.spccl = torch, dist, spccl_torch
        self.a, self.source, self.compressed, self.label = a, source, compressed, label
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local = a.batch // self.world
        self.owner = assign_tables(a.sizes, self.world)
        self.owned_by = [[t for t in range(a.tables) if self.owner[t] == r] for r in range(self.world)]
        self.max_owned = max(1, max(len(v) for v in self.owned_by))
        # table t's position among the received rows of a sample: owner * max_owned + slot
        self.table_pos = torch.tensor([self.owner[t] * self.max_owned + self.owned_by[self.owner[t]].index(t)
                                       for t in range(a.tables)])
        self.tables = {t: make_table(torch, a, t) for t in self.owned_by[self.rank]}
        self.accum = {t: torch.zeros(a.sizes[t]) for t in self.tables}
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
        """send [B * max_owned, dim], block j = rows for rank j's samples."""
        if self.mp_compressed:
            return self.spccl.alltoall_rows(send, self.a.mp_density)
        return _exact_alltoall(self.torch, self.dist).apply(send)

    def pooled(self, ids):
        """[B * max_owned, dim]: row (g * max_owned + slot) = this rank's table in
        that slot, pooled for sample g; zeros in the padding slots."""
        torch = self.torch
        n = ids.shape[0]
        out = torch.zeros(n, self.max_owned, self.a.dim)
        for slot, t in enumerate(self.owned_by[self.rank]):
            idx = ids[:, t, :]
            out[:, slot] = self.tables[t][idx].sum(dim=1) if idx.shape[1] > 1 else self.tables[t][idx[:, 0]]
        return out.reshape(n * self.max_owned, self.a.dim)

    def forward(self, batch, ids, send):
        torch = self.torch
        n = batch.n
        local = n // self.world
        if self.a.inject_routing_bug:  # testing only: block j carries rank j-1's samples' rows
            send = send.view(self.world, -1, self.a.dim).roll(1, 0).reshape(send.shape)
        recv = self.exchange(send)
        emb = recv.view(self.world, local, self.max_owned, self.a.dim).permute(1, 0, 2, 3)
        emb = emb.reshape(local, self.world * self.max_owned, self.a.dim)[:, self.table_pos]
        first = self.rank * local
        dense = torch.from_numpy(batch.dense[first:first + local])
        z = self.bottom(dense)
        return self.top(interact(torch, z, emb)).squeeze(1)

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
            send = self.pooled(ids).requires_grad_(True)
            logit = self.forward(batch, ids, send)
            first = self.rank * self.local
            y = torch.from_numpy(batch.labels[first:first + self.local])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y, reduction="sum") / a.batch
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            g = send.grad.view(a.batch, self.max_owned, a.dim)
            for slot, t in enumerate(self.owned_by[self.rank]):
                embedding_update(torch, a, self.tables[t], self.accum[t], ids[:, t, :], g[:, slot])
            loss_value = loss.item() * p
            loss_total += loss_value
            if progress:
                progress.update(s + 1, loss_value)
            if s + 1 == parity_at:
                self.parity = self.evaluate()[0], self.mlp_params().clone()
        elapsed = time.monotonic() - start
        c1 = self.counters()
        steps = max(a.steps, 1)
        if self.mp_compressed:
            mp_sent, mp_dense = (c1 - c0) / steps
        else:
            mp_sent = mp_dense = mp_dense_step
        if self.states:
            dp_sent, dp_dense = (x / steps for x in self.dp_bytes())
        else:
            dp_sent = dp_dense = ex_dense
        v = torch.tensor([mp_sent, mp_dense, dp_sent, dp_dense, loss_total / steps], dtype=torch.float64)
        self.dist.all_reduce(v)
        v /= p
        t = torch.tensor([elapsed], dtype=torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return {"mp": v[0].item(), "mp_dense": v[1].item(), "dp": v[2].item(), "dp_dense": v[3].item(),
                "train_loss": v[4].item(), "step_ms": t.item() / steps * 1e3, "mp_dense_convention": mp_dense_step,
                "dp_dense_convention": ex_dense, "mp_compressed": self.mp_compressed}

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
                logit = self.forward(batch, ids, self.pooled(ids))
                mine = torch.sigmoid(logit).contiguous()
                parts = [torch.empty_like(mine) for _ in range(self.world)]
                self.dist.all_gather(parts, mine)
                probs.append(torch.cat(parts).numpy())
                labels.append(batch.labels)
                teacher.append(batch.teacher)
        return np.concatenate(probs), np.concatenate(labels), np.concatenate(teacher)

    def mlp_params(self):
        return self.torch.cat([q.detach().reshape(-1) for m in (self.bottom, self.top) for q in m.parameters()])


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
    """The exact run's global batches in one process: every table local, the
    loss the mean over the global batch, no communication."""
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
            embedding_update(torch, a, tables[t], accum[t], ids[:, t, :], emb.grad[:, t])
    total = a.eval_samples // WORLD_ENV * WORLD_ENV
    probs = []
    with torch.no_grad():
        for first in range(0, total, a.batch):
            batch = source.eval(first, min(a.batch, total - first))
            ids = torch.from_numpy(batch.ids)
            probs.append(torch.sigmoid(fwd(batch, ids, pooled(ids))).numpy())
    return np.concatenate(probs), torch.cat([q.detach().reshape(-1) for q in params])


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
    if rank == 0:
        print(f"{world} ranks, global batch {a.batch}, {a.steps} steps, {a.tables} tables (dim {a.dim}), "
              f"tables per rank {[owner.count(r) for r in range(world)]}, DP density {a.dp_density:g}, "
              f"MP density {a.mp_density:g} ({codec} values), tau every {a.tau_interval} steps", flush=True)

    def one(compressed, label):
        run = Run(torch, dist, spccl_torch, a, source, compressed, label)
        res = run.train(a.parity_steps if a.check_single and not compressed else 0)
        if not compressed and a.check_single:
            res["parity"] = run.parity
        p, y, teacher = run.evaluate()
        res.update(metrics(p, y))
        res["teacher_auc"] = dlrm_data.auc(teacher, y)
        res["probs"] = p
        params = run.mlp_params()
        root = params.clone()
        dist.broadcast(root, 0)
        same = torch.tensor([1 if torch.equal(root, params) else 0], dtype=torch.int32)
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        res["replicas_identical"] = bool(same.item())
        res["params"] = params
        if rank == 0:
            print(f"[{label}] held-out: AUC {res['auc']:.5f}  logloss {res['logloss']:.5f}  "
                  f"accuracy {res['accuracy']:.5f}  (positives {res['positives']:.3f}, "
                  f"teacher's AUC ceiling {res['teacher_auc']:.5f})\n"
                  f"[{label}] bytes/step/rank: DP {human(res['dp'])} (dense {human(res['dp_dense'])}, "
                  f"{ratio(res['dp_dense'], res['dp']):.1f}x less)  MP {human(res['mp'])} "
                  f"(dense {human(res['mp_dense'])}, {ratio(res['mp_dense'], res['mp']):.1f}x less)  "
                  f"step {res['step_ms']:.1f} ms", flush=True)
        return res

    status = 0
    checks = []
    results = {}
    if a.compare or a.dense or a.check_single:
        results["exact"] = one(False, "exact")
    if a.compare or not (a.dense or a.check_single):
        results["compressed"] = one(True, "compressed")
    for name, r in results.items():
        checks.append((f"{name}: MLP replicas bitwise identical on every rank", r["replicas_identical"]))
        if a.min_auc is not None:
            checks.append((f"{name}: AUC {r['auc']:.5f} >= {a.min_auc}", r["auc"] >= a.min_auc))
    if rank == 0 and a.compare:
        d, c = results["exact"], results["compressed"]
        print(f"\n{world} ranks, global batch {a.batch}, {a.steps} steps, {a.tables} tables (dim {a.dim}), "
              f"DP density {a.dp_density:g}, MP density {a.mp_density:g} ({codec} values), "
              f"tau every {a.tau_interval} steps")
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
            if c["mp_compressed"]:
                checks.append((f"compressed run's MP dense bytes {c['mp_dense']:.0f} = the exact convention "
                               f"{d['mp']:.0f}", abs(c["mp_dense"] - d["mp"]) <= 1e-6 * d["mp"]))
    if a.check_single:
        d = results["exact"]
        ok = True
        if rank == 0:
            p1, params1 = single_reference(torch, a, source)
            pp, paramsp = d["parity"]
            diff = float(np.max(np.abs(p1 - pp))) if p1.size else 0.0
            pdiff = float((params1 - paramsp).abs().max() / params1.abs().max().clamp_min(1e-30))
            labels = np.concatenate([source.eval(f, min(a.batch, p1.size - f)).labels
                                     for f in range(0, p1.size, a.batch)])
            auc_p, auc1 = dlrm_data.auc(pp, labels), dlrm_data.auc(p1, labels)
            ok = diff <= a.parity_tol and pdiff <= a.parity_tol
            print(f"parity check ({world} ranks vs 1 process, {a.parity_steps} steps): max |p_P - p_1| {diff:.3g}, "
                  f"max MLP parameter difference {pdiff:.3g} of the largest, AUC {auc_p:.6f} vs {auc1:.6f}: "
                  f"{'OK' if ok else 'MISMATCH'}", flush=True)
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
