#!/usr/bin/env python3
"""Is SPCCL_ALGO=auto within 10% of the best fixed algorithm?

For every point of a grid (buffer size x density x ranks) this runs
perf/allreduce_perf once per fixed algorithm (dense, allgather, split) and once
with auto, reads each run's JSON (-J), and prints a markdown table: each
algorithm's median time, auto's pick, auto / best fixed, and whether that is
within the tolerance. Auto runs with SPCCL_CALIBRATE=1 unless --no-calibrate
(the first run per rank count measures and caches, the rest reuse the cache),
and with SPCCL_AUTO_TRIALS=--trials (default 2; 0 = the model alone picks):
every run then gets at least 1 + 3 x (trials + 3) + --settle warm-up calls
(auto's first call, up to three candidates each timed on `trials` calls in two
blocks with 3 uncounted calls among them, 2 for trials = 1, then the settling), so
auto's timed calls come after it has settled (every run gets the same warm-up).

Every run also times MPI_Allreduce on the same data right after its own
calls; the "normalized" column compares each algorithm's time over its own
run's MPI_Allreduce, which cancels load that changes between runs.

  perf/grid.py --build build --sizes 64K,1M,16M,256M --densities 0.001,0.01,0.1 --ranks 2,4,8
  perf/grid.py --build build --sizes 1M,16M --densities 0.01 --ranks 4 -n 5 -w 2 --json out.json
  # on the emulated network, one rank per namespace:
  perf/grid.py --build build-netem --launcher "perf/netem/run.sh --ranks {np} --rate 10gbit --" ...

The runs of one point are separate processes one after the other, so on a
shared or oversubscribed machine the comparison carries that noise; --repeat
R runs every algorithm R times, interleaved, and keeps each one's best median.
--interleaved instead runs perf/auto_compare once per point (and repeat): the
three fixed algorithms, auto and MPI_Allreduce in one process, each with its
own compressor, their calls interleaved on the same data, so the ratios are
measured side by side under the same load (three compressors' residuals at
once and the largest call's scratch: 3.4 GB a rank at 256 MiB, 4 ranks, density
0.1, with --twin, about 13 x the buffer; 8 ranks at 256 MiB need about 29 GB). --twin adds a second fixed
dense compressor to those runs: its time over dense's ("twin" column) is how far apart two
identical contenders come out, the noise floor under every ratio of the point.
--pairs (with --interleaved) runs auto_compare once per fixed algorithm X with
only auto, X and MPI_Allreduce in it (two compressors' memory instead of four):
auto is within the tolerance of the fastest fixed algorithm exactly when it is
within it of every one, so "auto / fastest" is the largest of the three
side-by-side ratios auto / X, each from its own run (the "auto (ms)" column is
auto's time in the run with the fastest X; which X is fastest compares the
runs' X times, which does not enter the ratio).
Exit status 1 when some point is outside the tolerance.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile

ALGOS = ["dense", "allgather", "split", "auto"]


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def size_label(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def warmup_calls(args):
    # trialCallsPerCandidate() in src/tuner.h: T counted, kTrialWarmupCalls (2), and a lead-in call when T >= 2.
    per_candidate = args.trials + 2 + (1 if args.trials >= 2 else 0)
    return max(args.warmup, 1 + 3 * per_candidate + args.settle) if args.trials > 0 else args.warmup


def iters_for(args, size):
    """Timed calls per run: more for small buffers, whose calls are cheap and noisiest."""
    return max(args.iters, args.small_iters) if size <= parse_size(args.small_max) else args.iters


def launch(args, np_, bench, out, env):
    """Runs `bench` on np_ ranks (mpirun, or --launcher) and returns its -J JSON, or None after reporting why."""
    if args.launcher:
        cmd = shlex.split(args.launcher.format(np=np_)) + bench
    else:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_)] + bench
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0 or not os.path.exists(out):
        sys.stderr.write(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stdout[-2000:]}{res.stderr[-2000:]}\n")
        return None
    with open(out) as f:
        return json.load(f)


def auto_env(args):
    """The environment of a run with auto in it (the fixed algorithms ignore both settings)."""
    env = dict(os.environ)
    if not args.no_calibrate:
        env["SPCCL_CALIBRATE"] = "1"
    env["SPCCL_AUTO_TRIALS"] = str(args.trials)
    return env


def run_one(args, np_, size, density, algo, tmpdir):
    out = os.path.join(tmpdir, f"r{np_}_{size}_{density}_{algo}.json")
    binary = os.path.join(args.build, "perf", "allreduce_perf")
    bench = [binary, "-b", str(size), "-e", str(size), "-D", str(density), "-a", algo,
             "-n", str(iters_for(args, size)), "-w", str(warmup_calls(args)), "-c", "0", "-J", out]
    result = launch(args, np_, bench, out, auto_env(args) if algo == "auto" else dict(os.environ))
    return None if result is None else result["rows"][0]


HEADER = ("| ranks | size | density | dense (ms) | allgather (ms) | split (ms) | auto (ms) | fastest fixed | "
          "auto took | auto / fastest | within {tol}% | normalized | twin |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def render(point, tolerance):
    times = point["times_us"]
    fixed = {a: times[a] for a in ALGOS[:3] if a in times}
    fastest = min(fixed, key=fixed.get)
    cells = [f"{times[a] / 1e3:.3g}" if a in times else "-" for a in ALGOS]
    took = point["auto_algo"]
    mark = "" if took == fastest else " (other)"
    return (f"| {point['ranks']} | {size_label(point['size'])} | {point['density']:g} | " + " | ".join(cells) +
            f" | {fastest} | {took}{mark} | {point['auto_over_best']:.2f} | {'yes' if point['within'] else 'NO'} | "
            f"{normalized_cell(point)} | {twin_cell(point)} |")


def twin_cell(point):
    r = point.get("twin_over_dense")
    return "-" if r is None else f"{r:.2f}"


def normalized_cell(point):
    r = point.get("normalized_auto_over_best")
    return "-" if r is None else f"{r:.2f}"


def summary(points, tolerance):
    within = sum(1 for p in points if p["within"])
    same = sum(1 for p in points
               if p["auto_algo"] == min((a for a in ALGOS[:3] if a in p["times_us"]), key=p["times_us"].get))
    # The choice alone, free of the auto run's own noise: the fixed runs' time
    # of the algorithm auto took against the fastest fixed run.
    chose_well = sum(1 for p in points if p["auto_algo"] in p["times_us"] and
                     p["times_us"][p["auto_algo"]] <= (1.0 + tolerance) * min(p["times_us"][a] for a in ALGOS[:3]
                                                                               if a in p["times_us"]))
    norm = [p for p in points if p.get("normalized_auto_over_best") is not None]
    norm_within = sum(1 for p in norm if p["normalized_auto_over_best"] <= 1.0 + tolerance)
    out = (f"{within} of {len(points)} points within {round(100 * tolerance)}% of the fastest fixed algorithm; "
           f"auto took the fastest fixed algorithm at {same} of {len(points)}, and one whose fixed run was within "
           f"{round(100 * tolerance)}% of the fastest at {chose_well} of {len(points)}")
    if norm:
        out += (f"; normalized by each run's own MPI_Allreduce, {norm_within} of {len(norm)} within "
                f"{round(100 * tolerance)}%")
    twins = sorted(p["twin_over_dense"] for p in points if p.get("twin_over_dense") is not None)
    if twins:
        apart = sum(1 for t in twins if max(t, 1.0 / t) > 1.0 + tolerance)
        out += (f"; two identical dense compressors (twin = dense2 / dense): {twins[0]:.2f} to {twins[-1]:.2f}, "
                f"median {twins[len(twins) // 2]:.2f}, more than {round(100 * tolerance)}% apart at {apart} of "
                f"{len(twins)}")
    return out


def run_compare(args, np_, size, density, tmpdir):
    """--interleaved: one auto_compare run; {name: row} for dense, allgather, split, auto and mpi."""
    out = os.path.join(tmpdir, f"c{np_}_{size}_{density}.json")
    binary = os.path.join(args.build, "perf", "auto_compare")
    bench = [binary, "-b", str(size), "-D", str(density), "-n", str(iters_for(args, size)),
             "-w", str(warmup_calls(args)), "-T", "1" if args.twin else "0", "-J", out]
    result = launch(args, np_, bench, out, auto_env(args))
    return None if result is None else {c["name"]: c for c in result["contenders"]}


def run_pairs(args, np_, size, density, tmpdir):
    """--pairs: one auto_compare run per fixed algorithm X with only auto, X and mpi (and dense2 with --twin in
    X = dense's run); {X: {name: row}} for the runs that succeeded."""
    runs = {}
    binary = os.path.join(args.build, "perf", "auto_compare")
    for algo in ALGOS[:3]:
        out = os.path.join(tmpdir, f"p{np_}_{size}_{density}_{algo}.json")
        bench = [binary, "-b", str(size), "-D", str(density), "-n", str(iters_for(args, size)),
                 "-w", str(warmup_calls(args)), "-C", f"auto,{algo},mpi",
                 "-T", "1" if args.twin and algo == "dense" else "0", "-J", out]
        result = launch(args, np_, bench, out, auto_env(args))
        if result is not None:
            runs[algo] = {c["name"]: c for c in result["contenders"]}
    return runs


def measure_pairs(args, np_, size, density, tmpdir):
    """--pairs: the point's JSON fields from --repeat rounds of run_pairs (best median of each contender per X)."""
    best, auto_in, algo_in = {}, {}, {}
    for _ in range(args.repeat):
        for algo, rows in run_pairs(args, np_, size, density, tmpdir).items():
            if algo not in rows or "auto" not in rows:
                continue
            best[algo] = min(best.get(algo, float("inf")), rows[algo]["time_us"])
            if rows["auto"]["time_us"] < auto_in.get(algo, float("inf")):
                auto_in[algo], algo_in[algo] = rows["auto"]["time_us"], rows["auto"]["algo"]
            if "dense2" in rows:
                best["dense2"] = min(best.get("dense2", float("inf")), rows["dense2"]["time_us"])
    fixed = [a for a in ALGOS[:3] if a in best and a in auto_in]
    if len(fixed) < 3:
        return None
    fastest = min(fixed, key=best.get)
    pair = {a: auto_in[a] / best[a] for a in fixed}
    times = {a: best[a] for a in fixed}
    times["auto"] = auto_in[fastest]
    if "dense2" in best:
        times["dense2"] = best["dense2"]
    return {"times_us": times, "auto_algo": algo_in[fastest], "auto_over_best": max(pair.values()),
            "normalized_auto_over_best": None, "over_own_mpi": {}, "pairs": True,
            "pair_ratios": pair, "auto_algo_per_pair": algo_in}


def measure_point(args, np_, size, density, tmpdir):
    """Best median per algorithm (and dense2 with --twin) over --repeat runs, auto's pick, and each time over its
    run's MPI_Allreduce."""
    best, rel = {}, {}
    took = "?"
    for _ in range(args.repeat):
        if args.interleaved:
            rows = run_compare(args, np_, size, density, tmpdir) or {}
            mpi = rows.get("mpi", {}).get("time_us")
            if "dense2" in rows:  # --twin: best of its runs, like the others
                best["dense2"] = min(best.get("dense2", float("inf")), rows["dense2"]["time_us"])
            runs = [(a, rows[a]["time_us"], mpi, rows[a]["algo"]) for a in ALGOS if a in rows]
        else:
            runs = []
            for algo in ALGOS:
                row = run_one(args, np_, size, density, algo, tmpdir)
                if row is not None and row.get("time_us") is not None:
                    runs.append((algo, row["time_us"], row.get("dense_time_us"), row["algo"]))
        for algo, t, d, label in runs:
            if d:
                rel[algo] = min(rel.get(algo, float("inf")), t / d)
            if algo not in best or t < best[algo]:
                best[algo] = t
                if algo == "auto":
                    took = label
    return best, rel, took


def measure_all_algorithms(args, np_, size, density, tmpdir):
    """Without --pairs: the point's JSON fields from measure_point (one run per algorithm, or one auto_compare run
    with --interleaved), or None when auto or every fixed algorithm failed to run."""
    best, rel, took = measure_point(args, np_, size, density, tmpdir)
    fixed = [best[a] for a in ALGOS[:3] if a in best]
    if "auto" not in best or not fixed:
        return None
    rel_fixed = [rel[a] for a in ALGOS[:3] if a in rel]
    norm = rel["auto"] / min(rel_fixed) if "auto" in rel and rel_fixed else None
    return {"times_us": best, "auto_algo": took, "auto_over_best": best["auto"] / min(fixed),
            "normalized_auto_over_best": norm, "over_own_mpi": rel}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory holding perf/allreduce_perf")
    ap.add_argument("--sizes", default="64K,1M,16M,256M", help="buffer sizes per rank (K/M/G)")
    ap.add_argument("--densities", default="0.001,0.01,0.1")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("-n", "--iters", type=int, default=10)
    ap.add_argument("-w", "--warmup", type=int, default=2)
    ap.add_argument("--small-iters", type=int, default=50, help="timed calls per run for sizes up to --small-max")
    ap.add_argument("--small-max", default="1M", help="largest size that gets --small-iters")
    ap.add_argument("--repeat", type=int, default=1, help="runs per algorithm and point (best median kept)")
    ap.add_argument("--tolerance", type=float, default=0.10, help="auto may be this much slower than the best")
    ap.add_argument("--launcher", help="command before the binary instead of mpirun; {np} is the rank count")
    ap.add_argument("--no-calibrate", action="store_true", help="auto with the default model (no SPCCL_CALIBRATE)")
    ap.add_argument("--trials", type=int, default=2, help="SPCCL_AUTO_TRIALS for auto (0: the model alone picks)")
    ap.add_argument("--settle", type=int, default=10,
                    help="extra warm-up calls after auto's trials")
    ap.add_argument("--interleaved", action="store_true",
                    help="one perf/auto_compare run per point: every algorithm and auto in one process, their "
                         "calls interleaved on the same data (needs memory for four compressors at once)")
    ap.add_argument("--pairs", action="store_true",
                    help="with --interleaved: one run per fixed algorithm with only it, auto and MPI_Allreduce "
                         "(two compressors' memory); auto / fastest is the largest side-by-side auto / X")
    ap.add_argument("--twin", action="store_true",
                    help="with --interleaved: a second fixed dense compressor in each run; the twin column is its "
                         "time over dense's, the spread between identical contenders")
    ap.add_argument("--json", help="also write every point as JSON here")
    ap.add_argument("--render", help="print the table of an earlier run's --json file; run nothing")
    args = ap.parse_args()
    if args.twin and not args.interleaved:
        ap.error("--twin needs --interleaved (the twin runs in the same process as dense)")
    if args.pairs and not args.interleaved:
        ap.error("--pairs needs --interleaved")
    if args.render:
        with open(args.render) as f:
            points = json.load(f)
        print(HEADER.format(tol=round(100 * args.tolerance)))
        for p in points:
            print(render(p, args.tolerance))
        print("\n" + summary(points, args.tolerance))
        return 0 if all(p["within"] for p in points) else 1

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    densities = [float(d) for d in args.densities.split(",")]
    ranks = [int(r) for r in args.ranks.split(",")]
    points, misses = [], 0
    print(HEADER.format(tol=round(100 * args.tolerance)))
    with tempfile.TemporaryDirectory(prefix="spccl_grid_") as tmpdir:
        for np_ in ranks:
            for size in sizes:
                for density in densities:
                    measure = measure_pairs if args.pairs else measure_all_algorithms
                    fields = measure(args, np_, size, density, tmpdir)
                    if fields is None:
                        print(f"| {np_} | {size_label(size)} | {density:g} | run failed | | | | | | | | | |")
                        misses += 1
                        continue
                    ok = fields["auto_over_best"] <= 1.0 + args.tolerance
                    misses += 0 if ok else 1
                    times = fields["times_us"]
                    points.append({"ranks": np_, "size": size, "density": density, **fields, "within": ok,
                                   "twin_over_dense": times["dense2"] / times["dense"] if "dense2" in times and
                                   "dense" in times else None,
                                   "trials": args.trials, "warmup": warmup_calls(args),
                                   "interleaved": args.interleaved,
                                   "iters": iters_for(args, size)})
                    print(render(points[-1], args.tolerance), flush=True)
    failed = misses - sum(1 for p in points if not p["within"])
    print("\n" + summary(points, args.tolerance) + (f"; {failed} points failed to run" if failed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(points, f, indent=1)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
