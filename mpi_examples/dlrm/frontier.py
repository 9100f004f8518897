#!/usr/bin/python3
"""The accuracy/bytes frontier of the DLRM example's embedding exchange.

Runs the example (mpirun -np P) once per method and seed: the dense baselines
(per-sample and merged table updates) and each compressed method, all with the
same DP density, and writes, for every method, the model-parallel bytes per
step per rank and the held-out AUC lost against the dense run of the same seed
and update rule (mean and worst over the seeds):

  /usr/bin/python3 mpi_examples/dlrm/frontier.py --out docs/DLRM_frontier
      -> docs/DLRM_frontier.csv (one row per run), docs/DLRM_frontier.md (the
         table), docs/DLRM_frontier.png (mean AUC loss against MP bytes, log x,
         seeds as small marks, the Pareto front marked)

A method whose run fails (an SPCCL_ROWS_CODEC value this build does not have)
is reported and left out. Runs already in the CSV (same method, seed, steps)
are reused with --resume, so an interrupted sweep continues where it stopped.
Needs matplotlib (Debian: python3-matplotlib, hence /usr/bin/python3).
"""
import argparse
import csv
import os
import re
import subprocess
import sys

# name, environment, dlrm arguments, baseline ("per-sample" or "merged")
HOT = ["--hot-rows", "1000000", "--hot-min-count"]
METHODS = [
    ("hot rows (1024) + top 8/64, int8", {"SPCCL_ROWS_CODEC": "int8"}, ["--mp-density", "0.125"] + HOT + ["1024"],
     "merged"),
    ("hot rows (64), exact", {}, ["--mp-density", "1"] + HOT + ["64"], "merged"),
    ("top 8/64, fp8", {"SPCCL_ROWS_CODEC": "fp8"}, ["--mp-density", "0.125"], "per-sample"),
    ("top 8/64, fp16", {"SPCCL_ROWS_CODEC": "fp16"}, ["--mp-density", "0.125"], "per-sample"),
    ("top 8/64, bounded 1% of range", {"SPCCL_ROWS_CODEC": "bounded", "SPCCL_ROWS_ERROR_BOUND": "0.01",
                                       "SPCCL_ROWS_ERROR_RELATIVE": "1"}, ["--mp-density", "0.125"], "per-sample"),
    ("hot rows (1024) + top 4/64, fp32", {}, ["--mp-density", "0.0625"] + HOT + ["1024"], "merged"),
    ("top 8/64, int8", {"SPCCL_ROWS_CODEC": "int8"}, ["--mp-density", "0.125"], "per-sample"),
    ("top 4/64, fp32", {}, ["--mp-density", "0.0625"], "per-sample"),
    ("top 8/64, fp32", {}, ["--mp-density", "0.125"], "per-sample"),
    ("top 4/64, int8", {"SPCCL_ROWS_CODEC": "int8"}, ["--mp-density", "0.0625"], "per-sample"),
    ("hot rows (4096) + top 8/64, fp8", {"SPCCL_ROWS_CODEC": "fp8"}, ["--mp-density", "0.125"] + HOT + ["4096"],
     "merged"),
    ("hot rows (4096) + top 7/64, fp8", {"SPCCL_ROWS_CODEC": "fp8"}, ["--mp-density", "0.109375"] + HOT + ["4096"],
     "merged"),
    ("hot rows (4096) + top 7/64, fp8, exact first 20 steps", {"SPCCL_ROWS_CODEC": "fp8"},
     ["--mp-density", "0.109375", "--mp-dense-steps", "20"] + HOT + ["4096"], "merged"),
    # The bound's schedules over the 300 steps (SPCCL_ROWS_ERROR_DECAY per bounded forward): 4% -> 1% and 1% -> 4%.
    ("top 8/64, bounded 4% tightening to 1% of range", {"SPCCL_ROWS_CODEC": "bounded", "SPCCL_ROWS_ERROR_BOUND": "0.04",
                                                         "SPCCL_ROWS_ERROR_RELATIVE": "1",
                                                         "SPCCL_ROWS_ERROR_DECAY": "0.99539"},
     ["--mp-density", "0.125"], "per-sample"),
    ("top 8/64, bounded 1% loosening to 4% of range", {"SPCCL_ROWS_CODEC": "bounded", "SPCCL_ROWS_ERROR_BOUND": "0.01",
                                                        "SPCCL_ROWS_ERROR_RELATIVE": "1",
                                                        "SPCCL_ROWS_ERROR_DECAY": "1.00463"},
     ["--mp-density", "0.125"], "per-sample"),
]
BASELINES = {"per-sample": ["--emb-update", "per-sample"], "merged": ["--emb-update", "merged"]}

AUC_RE = re.compile(r"^\[(\w+)\] held-out: AUC ([0-9.]+)", re.M)
BYTES_RE = re.compile(r"^\[\w+\] bytes/step/rank: DP ([0-9.]+ [kMG]?B) .*?MP ([0-9.]+ [kMG]?B)", re.M)
UNITS = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def to_bytes(s):
    value, unit = s.split()
    return float(value) * UNITS[unit]


def run(args, name, env, extra, seed, dense, base):
    # Every setting explicit, not the program's defaults: the update rule of
    # the method's baseline, no hot rows unless the method has them, and the
    # rows codec of its environment (wire when it sets none).
    explicit = BASELINES[base] + ([] if "--hot-rows" in extra else ["--hot-rows", "0"])
    explicit += ["--rows-codec", env.get("SPCCL_ROWS_CODEC", "wire")]
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np), args.dlrm, "--steps",
           str(args.steps), "--eval-samples", str(args.eval_samples), "--dp-density", str(args.dp_density), "--seed",
           str(seed), "--print-every", "0"] + (["--dense"] if dense else []) + explicit + extra
    e = dict(os.environ)
    e.update(env)
    print(f"[{name}, seed {seed}] {' '.join(f'{k}={v}' for k, v in env.items())} {' '.join(cmd)}", flush=True)
    p = subprocess.run(cmd, env=e, capture_output=True, text=True)
    auc, by = AUC_RE.search(p.stdout), BYTES_RE.search(p.stdout)
    if p.returncode != 0 or not auc or not by:
        tail = (p.stdout + p.stderr).strip().splitlines()[-3:]
        print(f"  failed (exit {p.returncode}): {' | '.join(tail)}", flush=True)
        return None
    row = {"method": name, "seed": seed, "steps": args.steps, "auc": float(auc.group(2)),
           "dp_bytes": to_bytes(by.group(1)), "mp_bytes": to_bytes(by.group(2))}
    print(f"  AUC {row['auc']:.5f}, MP {row['mp_bytes']:.0f} B, DP {row['dp_bytes']:.0f} B", flush=True)
    return row


def pareto(points):
    """Indices of the points no other point beats on both bytes and loss."""
    front = []
    for i, (b, l) in enumerate(points):
        if not any((b2 <= b and l2 <= l) and (b2 < b or l2 < l) for b2, l2 in points):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlrm", default="build/mpi_examples/dlrm/dlrm")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--eval-samples", type=int, default=16384)
    ap.add_argument("--dp-density", type=float, default=0.001)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--methods", default="", help="comma-separated indices into the method list (default: all)")
    ap.add_argument("--out", default="dlrm_frontier", help="prefix of the .csv, .md and .png written")
    ap.add_argument("--resume", action="store_true", help="reuse the runs already in the CSV")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = METHODS if not args.methods else [METHODS[int(i)] for i in args.methods.split(",")]

    path = args.out + ".csv"
    rows = []
    if args.resume and os.path.exists(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                rows.append({"method": r["method"], "seed": int(r["seed"]), "steps": int(r["steps"]),
                             "auc": float(r["auc"]), "dp_bytes": float(r["dp_bytes"]),
                             "mp_bytes": float(r["mp_bytes"])})

    def have(name, seed):
        return next((r for r in rows if r["method"] == name and r["seed"] == seed and r["steps"] == args.steps), None)

    def save():
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["method", "seed", "steps", "auc", "dp_bytes", "mp_bytes"])
            w.writeheader()
            w.writerows(rows)

    needed = sorted({m[3] for m in methods})
    for seed in seeds:
        for base in needed:
            name = "dense, " + base + " updates"
            if not have(name, seed):
                r = run(args, name, {}, [], seed, dense=True, base=base)
                if r:
                    rows.append(r)
                    save()
    failed = set()
    for name, env, extra, base in methods:
        for seed in seeds:
            if name in failed or have(name, seed):
                continue
            r = run(args, name, env, extra, seed, dense=False, base=base)
            if r:
                rows.append(r)
                save()
            else:
                failed.add(name)

    # The table: per method, MP bytes (the same for every seed up to the hot
    # rows' per-batch variation: the mean), AUC - dense per seed, mean, worst.
    table = []
    for name, env, extra, base in methods:
        runs = [have(name, s) for s in seeds]
        dense = [have("dense, " + base + " updates", s) for s in seeds]
        if any(r is None for r in runs) or any(d is None for d in dense):
            continue
        diffs = [r["auc"] - d["auc"] for r, d in zip(runs, dense)]
        mp = sum(r["mp_bytes"] for r in runs) / len(runs)
        dp = sum(r["dp_bytes"] for r in runs) / len(runs)
        mp_dense = sum(d["mp_bytes"] for d in dense) / len(dense)
        dp_dense = sum(d["dp_bytes"] for d in dense) / len(dense)
        table.append({"method": name, "env": " ".join(f"{k}={v}" for k, v in env.items()), "args": " ".join(extra),
                      "base": base, "mp": mp, "mp_x": mp_dense / mp, "dp_x": dp_dense / dp, "diffs": diffs,
                      "mean": sum(diffs) / len(diffs), "worst": min(diffs)})
    points = [(t["mp"], -t["mean"]) for t in table]
    front = set(pareto(points))
    with open(args.out + ".md", "w") as f:
        f.write(f"| method | MP bytes/step/rank | MP reduction | DP reduction | AUC - dense, seeds "
                f"{' / '.join(map(str, seeds))} | mean | worst | Pareto |\n|---|---|---|---|---|---|---|---|\n")
        for j in sorted(range(len(table)), key=lambda j: table[j]["mp"]):
            t = table[j]
            f.write(f"| {t['method']} | {t['mp'] / 1e3:.1f} kB | {t['mp_x']:.1f}x | {t['dp_x']:.0f}x | "
                    f"{' / '.join(f'{d:+.4f}' for d in t['diffs'])} | {t['mean']:+.4f} | {t['worst']:+.4f} | "
                    f"{'yes' if j in front else ''} |\n")
    print(open(args.out + ".md").read())

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 6.5))
    for j, t in enumerate(table):
        ax.scatter([t["mp"]] * len(t["diffs"]), [-d for d in t["diffs"]], s=10, color="0.6", zorder=2)
        ax.scatter([t["mp"]], [-t["mean"]], s=45, color="tab:red" if j in front else "tab:blue", zorder=3)
        ax.annotate(t["method"], (t["mp"], -t["mean"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    fr = sorted(front, key=lambda j: table[j]["mp"])
    ax.plot([table[j]["mp"] for j in fr], [-table[j]["mean"] for j in fr], color="tab:red", lw=1.2,
            label="Pareto front (mean over seeds)", zorder=1)
    dense_mp = 2752512.0
    for r in rows:
        if r["method"].startswith("dense"):
            dense_mp = r["mp_bytes"]
            break
    ax.axvline(dense_mp / 20, color="0.4", ls="--", lw=1, label="20x fewer MP bytes than dense")
    ax.axhline(0.001, color="0.4", ls=":", lw=1, label="AUC loss 0.001")
    ax.axhline(0.0, color="0.8", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("MP bytes per step per rank (alltoall forward + backward + hot rows' allreduce)")
    ax.set_ylabel("held-out AUC loss against dense (mean of seeds; grey: each seed)")
    ax.set_title(f"DLRM, {args.np} ranks, {args.steps} steps, DP density {args.dp_density:g}: "
                 f"AUC loss against MP bytes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=110)
    print(f"wrote {path}, {args.out}.md, {args.out}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
