"""The planted-teacher synthetic data of the C++ DLRM example
(mpi_examples/dlrm/data.cc, SyntheticSource), ported operation for operation so
that it produces the same samples bit for bit: the same dense features, ids and
labels, and the same noise-free teacher probabilities.

Sample i depends only on (seed, i): every rank generates the same global batch
whatever the rank count. Integer hashing is done on uint64 numpy arrays (which
wrap like C++'s uint64_t); float32 steps are done in float32, double steps in
float64, in the C++ order; exp, log, log1p, cos and pow go through Python's
math module, which calls the C library's functions as the C++ code does
(numpy's vectorised versions may differ in the last bit). The ctest
dlrm_torch_data compares this generator's Criteo TSV with the C++ example's
`--write-tsv` byte for byte and the teacher's AUC ceiling with the one it prints.
"""
import math

import numpy as np

DENSE_FEATURES = 13
CRITEO_CATEGORICAL = 26
TEACHER_DIM = 4
TEACHER_PAIR_TABLES = 8
EVAL_STREAM = 1 << 62
_M64 = (1 << 64) - 1


def splitmix_int(x):
    """splitmix64 finaliser on a Python int (mod 2^64)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def splitmix(x):
    """splitmix64 on a uint64 array (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _vmap(fn, a):
    """The C library's fn elementwise (math.fn), as float64."""
    return np.fromiter((fn(v) for v in a.tolist()), dtype=np.float64, count=a.size).reshape(a.shape)


class _ScalarRng:
    """The C++ Rng on one stream (the teacher's fixed weights)."""

    def __init__(self, state):
        self.state = state

    def uniform(self):
        v = splitmix_int((self.state * 0x2545F4914F6CDD1D) & _M64)
        self.state = (self.state + 1) & _M64
        return (v >> 11) * (1.0 / 9007199254740992.0)

    def normal(self):
        u1 = max(self.uniform(), 1e-300)
        u2 = self.uniform()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


class _BatchRng:
    """The C++ Rng of n samples at once: draw k of sample i is
    splitmix((state_i + k) * 0x2545f4914f6cdd1d)."""

    def __init__(self, state):
        self.state = state.copy()

    def uniform(self):
        v = splitmix(self.state * np.uint64(0x2545F4914F6CDD1D))
        self.state = self.state + np.uint64(1)
        return (v >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)

    def normal(self):
        u1 = np.maximum(self.uniform(), 1e-300)
        u2 = self.uniform()
        return np.sqrt(-2.0 * _vmap(math.log, u1)) * _vmap(math.cos, 6.283185307179586 * u2)


def _dense_mean(k):
    return 0.5 + 0.15 * k


def parse_table_sizes(spec, tables):
    """"MIN:MAX" (log-spaced over `tables`, rounded as C++'s llround) or "a,b,c"
    (one per table). Raises ValueError with the C++ example's messages."""
    if ":" in spec:
        lo_s, hi_s = spec.split(":", 1)
        try:
            lo, hi = float(lo_s), float(hi_s)
        except ValueError:
            lo = hi = float("nan")
        if not (lo >= 2 and hi >= lo and hi <= 2e9):
            raise ValueError(f"--table-sizes MIN:MAX needs 2 <= MIN <= MAX <= 2e9, got '{spec}'")
        out = []
        for t in range(tables):
            f = t / (tables - 1) if tables > 1 else 0.0
            v = lo * math.pow(hi / lo, f)
            out.append(int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5)))  # llround
        return out
    out = []
    for item in spec.split(","):
        try:
            v = int(item)
        except ValueError:
            v = -1
        if not 2 <= v <= 2000000000:
            raise ValueError(f"--table-sizes: '{item}' is not a size in [2, 2e9]")
        out.append(v)
    if len(out) != tables:
        raise ValueError(f"--table-sizes lists {len(out)} sizes for {tables} tables")
    return out


class Batch:
    """n samples: dense [n, 13] float32 (log(1 + count)), ids [n, tables, bag]
    int64, labels [n] float32 (0 or 1), teacher [n] float32 (the noise-free
    teacher probability)."""

    def __init__(self, dense, ids, labels, teacher):
        self.dense, self.ids, self.labels, self.teacher = dense, ids, labels, teacher
        self.n = dense.shape[0]


class SyntheticSource:
    def __init__(self, seed, table_sizes, bag=1, zipf=1.05, noise=0.5, eval_samples=32768):
        self.seed = int(seed) & _M64
        self.table_sizes = [int(s) for s in table_sizes]
        self.bag = int(bag)
        self.zipf = float(zipf)
        self.noise = float(noise)
        self.eval_samples = int(eval_samples)
        tables = len(self.table_sizes)
        rng = _ScalarRng(splitmix_int(self.seed ^ 0x7E4C11E5))
        self.table_weight = np.array([0.6 * math.pow(0.9, t) for t in range(tables)], dtype=np.float32)
        proj = [rng.normal() / math.sqrt(float(DENSE_FEATURES)) for _ in range(TEACHER_DIM * DENSE_FEATURES)]
        self.dense_proj = np.array(proj, dtype=np.float32).reshape(TEACHER_DIM, DENSE_FEATURES)
        u = np.array([rng.normal() for _ in range(TEACHER_DIM)], dtype=np.float32)
        norm = 0.0
        for v in u.tolist():
            norm += v * v
        self.u = np.array([v / math.sqrt(norm) for v in u.tolist()], dtype=np.float32)
        # pow(n + 1, 1 - s) per table (the Zipf inverse CDF's constant).
        self._zipf_top = [math.pow(float(n) + 1.0, 1.0 - self.zipf) for n in self.table_sizes]

    def _zipf_rank(self, u, n, t):
        top = float(n) + 1.0
        s = self.zipf
        if abs(s - 1.0) < 1e-9:
            x = _vmap(math.exp, u * math.log(top))
        else:
            a = 1.0 - s
            base = u * (self._zipf_top[t] - 1.0) + 1.0
            inv = 1.0 / a
            x = np.fromiter((math.pow(b, inv) for b in base.tolist()), dtype=np.float64, count=base.size)
        r = x.astype(np.int64) - 1
        return np.minimum(np.maximum(r, 0), n - 1)

    def _hidden(self, t, ids):
        """hiddenValue(seed, t, id, k) for k = 0..3: [n, 4] float32."""
        out = np.empty((ids.size, TEACHER_DIM), dtype=np.float32)
        base = ids.astype(np.uint64) ^ np.uint64((t << 40) & _M64)
        for k in range(TEACHER_DIM):
            h = splitmix(np.uint64(self.seed) ^ splitmix(base ^ np.uint64((k << 58) & _M64)))
            v = ((h >> np.uint64(11)).astype(np.float64) * (2.0 / 9007199254740992.0) - 1.0) * 1.7320508075688772
            out[:, k] = v.astype(np.float32)
        return out

    def samples(self, first_index, n):
        """Samples first_index .. first_index + n - 1 of the raw stream (training
        stream from 0, held-out stream from EVAL_STREAM)."""
        tables = len(self.table_sizes)
        bag = self.bag
        index = np.arange(n, dtype=np.uint64) + np.uint64(first_index & _M64)
        state = splitmix(np.uint64((self.seed * 0x9E3779B97F4A7C15) & _M64) ^ splitmix(index)) << np.uint64(8)
        rng = _BatchRng(state)
        dense = np.empty((n, DENSE_FEATURES), dtype=np.float32)
        for k in range(DENSE_FEATURES):
            count = np.floor(_vmap(math.exp, _dense_mean(k) + rng.normal()))
            dense[:, k] = _vmap(math.log1p, count).astype(np.float32)
        z = np.zeros((TEACHER_PAIR_TABLES + 1, n, TEACHER_DIM), dtype=np.float32)
        dense64 = dense.astype(np.float64)
        for d in range(TEACHER_DIM):
            v = np.zeros(n, dtype=np.float64)
            for k in range(DENSE_FEATURES):
                v = v + float(self.dense_proj[d, k]) * (dense64[:, k] - _dense_mean(k))
            z[0, :, d] = v.astype(np.float32)
        logit = np.full(n, -1.5, dtype=np.float64)
        ids = np.empty((n, tables, bag), dtype=np.int64)
        fbag = np.float32(bag)
        for t in range(tables):
            size = self.table_sizes[t]
            h = np.zeros((n, TEACHER_DIM), dtype=np.float32)
            for b in range(bag):
                rank = self._zipf_rank(rng.uniform(), size, t)
                key = rank.astype(np.uint64) ^ np.uint64((t << 48) & _M64) ^ np.uint64(self.seed)
                idv = (splitmix(key) % np.uint64(size)).astype(np.int64)
                ids[:, t, b] = idv
                h = h + self._hidden(t, idv) / fbag
            first = np.zeros(n, dtype=np.float64)
            for d in range(TEACHER_DIM):
                first = first + (self.u[d] * h[:, d]).astype(np.float64)
            logit = logit + float(self.table_weight[t]) * first
            if t < TEACHER_PAIR_TABLES:
                z[t + 1] = h
        vectors = 1 + min(tables, TEACHER_PAIR_TABLES)
        pairs = np.zeros(n, dtype=np.float64)
        npairs = 0
        for i in range(vectors):
            for j in range(i + 1, vectors):
                npairs += 1
                for d in range(TEACHER_DIM):
                    pairs = pairs + z[i, :, d].astype(np.float64) * z[j, :, d].astype(np.float64)
        if npairs > 0:
            logit = logit + 0.5 * pairs / math.sqrt(float(npairs))
        teacher = (1.0 / (1.0 + _vmap(math.exp, -logit))).astype(np.float32)
        noisy = logit + self.noise * rng.normal()
        labels = (rng.uniform() < 1.0 / (1.0 + _vmap(math.exp, -noisy))).astype(np.float32)
        return Batch(dense, ids, labels, teacher)

    def train(self, first, n):
        return self.samples(first, n)

    def eval(self, first, n):
        return self.samples(EVAL_STREAM + first, n)

    def write_tsv(self, path, rows, chunk=4096):
        """The C++ example's --write-tsv: `rows` training samples as Criteo TSV."""
        if self.bag != 1:
            raise ValueError("--write-tsv needs --bag 1 (Criteo rows have one id per column)")
        tables = len(self.table_sizes)
        with open(path, "w") as f:
            for first in range(0, rows, chunk):
                b = self.train(first, min(chunk, rows - first))
                for i in range(b.n):
                    fields = ["%d" % int(b.labels[i])]
                    fields += ["%.0f" % math.expm1(float(x)) for x in b.dense[i].tolist()]
                    fields += ["%08x" % (int(b.ids[i, c, 0]) & 0xFFFFFFFF) if c < tables else ""
                               for c in range(CRITEO_CATEGORICAL)]
                    f.write("\t".join(fields) + "\n")


def auc(scores, labels):
    """Rank-based AUC with ties averaged (the C++ example's computeAuc)."""
    scores = np.asarray(scores, dtype=np.float32)
    labels = np.asarray(labels) > 0.5
    n = scores.size
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    # average rank of each run of equal scores
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], n]
    avg = 0.5 * (starts + 1 + ends)
    ranks = np.repeat(avg, ends - starts)
    pos = float(labels[order].sum())
    neg = n - pos
    if pos == 0 or neg == 0:
        return 0.5
    rank_sum = float(ranks[labels[order]].sum())
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)
