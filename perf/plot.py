#!/usr/bin/python3
"""Render docs/PERF.md's figures as PNG from the perf binaries' JSON (-J FILE).

Three figures, one subcommand each:

  time     time per call against buffer size, compressed and dense (log-log),
           one pair of lines per JSON file (e.g. one per algorithm or rank count)
  speedup  speedup (dense time / compressed time) against link speed, one line
           per buffer size, from runs of the same command under perf/netem at
           several rates: each argument is RATE_GBPS=FILE
  bytes    bytes each rank sends per call against density, from runs at several
           -D, with the dense collective's bytes for reference

  /usr/bin/python3 perf/plot.py time -o time.png split=split.json allgather=ag.json
  /usr/bin/python3 perf/plot.py speedup -o speedup.png 1=r1.json 10=r10.json 25=r25.json
  /usr/bin/python3 perf/plot.py bytes -o bytes.png d0.001.json d0.01.json d0.1.json

A FILE argument may be LABEL=FILE; the label defaults to what the file says
(collective, ranks, algorithm). Needs matplotlib (Debian: python3-matplotlib,
hence /usr/bin/python3 rather than a virtual environment's python).
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def load(arg):
    label, sep, path = arg.partition("=")
    if not sep:
        label, path = "", arg
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc.get("rows", []) if r.get("time_us") is not None]
    if not rows:
        sys.exit(f"{path}: no rows with a time")
    return label, doc, rows


def default_label(doc):
    parts = [doc.get("collective", "?"), f"{doc.get('ranks', '?')} ranks"]
    if "algo" in doc:
        parts.append(doc["algo"])
    parts.append(f"D={doc.get('density')}")
    if doc.get("wire", "fp32") != "fp32":
        parts.append(doc["wire"])
    return ", ".join(parts)


def size_label(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def bus_factor(doc):
    """Dense bytes a rank sends per byte of buffer (nccl-tests' bus factors)."""
    p = doc["ranks"]
    if p <= 1:
        return 0.0
    return 2.0 * (p - 1) / p if doc["collective"] == "allreduce" else (p - 1) / p


def plot_time(args):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, arg in enumerate(args.files):
        label, doc, rows = load(arg)
        label = label or default_label(doc)
        color = f"C{i}"
        sizes = [r["size"] for r in rows]
        # Rows of one size from different passes (alltoall fwd/bwd) get their own line.
        for algo in sorted({r["algo"] for r in rows}):
            sel = [r for r in rows if r["algo"] == algo]
            tag = f"{label} [{algo}]" if len({r['algo'] for r in rows}) > 1 else label
            ax.plot([r["size"] for r in sel], [r["time_us"] / 1e3 for r in sel], "o-", color=color,
                    label=f"{tag}: compressed")
        ax.plot(sizes, [r["dense_time_us"] / 1e3 for r in rows], "s--", color=color, alpha=0.6,
                label=f"{label}: dense MPI")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("buffer size per rank")
    ax.set_ylabel("time per call (ms, median)")
    ticks = sorted({r["size"] for a in args.files for r in load(a)[2]})
    ax.set_xticks(ticks, [size_label(t) for t in ticks], rotation=30)
    ax.minorticks_off()
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(args.title or "Time per call against buffer size")
    return fig


def plot_speedup(args):
    runs = []
    for arg in args.files:
        rate, sep, path = arg.partition("=")
        if not sep:
            sys.exit(f"speedup: '{arg}' is not RATE_GBPS=FILE")
        _, doc, rows = load(path)
        runs.append((float(rate), doc, rows))
    runs.sort(key=lambda r: r[0])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = sorted({(r["size"], r["algo"]) for _, _, rows in runs for r in rows})
    multi_algo = len({a for _, a in keys}) > 1
    for i, (size, algo) in enumerate(keys):
        pts = [(rate, r["speedup"]) for rate, _, rows in runs for r in rows
               if r["size"] == size and r["algo"] == algo and r.get("speedup") is not None]
        if not pts:
            continue
        label = size_label(size) + (f" [{algo}]" if multi_algo else "")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=label)
    ax.axhline(1.0, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    rates = [r[0] for r in runs]
    ax.set_xticks(rates, [f"{r:g}" for r in rates])
    ax.minorticks_off()
    ax.set_xlabel("link rate (Gbit/s, perf/netem)")
    ax.set_ylabel("speedup over dense MPI (x)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, title="buffer size")
    doc = runs[0][1]
    ax.set_title(args.title or f"{doc['collective']}, {doc['ranks']} ranks, density {doc['density']}: speedup "
                 "against link rate")
    return fig


def plot_bytes(args):
    series = {}  # label -> [(density, size, bytes, dense bytes)]
    dense = {}
    for arg in args.files:
        label, doc, rows = load(arg)
        label = label or f"{doc['collective']} {doc.get('algo', '')} {doc.get('wire', '')}".strip()
        for r in rows:
            if r.get("bytes_sent_per_call") is None:
                continue
            series.setdefault((label, r["size"]), []).append((doc["density"], r["bytes_sent_per_call"]))
            dense[r["size"]] = bus_factor(doc) * r["size"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    multi_size = len(dense) > 1
    for i, ((label, size), pts) in enumerate(sorted(series.items())):
        pts.sort()
        name = label + (f", {size_label(size)}" if multi_size else "")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=f"C{i}", label=name)
    for size, b in sorted(dense.items()):
        ax.axhline(b, color="grey", ls="--", lw=1)
        ax.annotate(f"dense, {size_label(size)}: {b / 1e6:.3g} MB", (0.02, b), xycoords=("axes fraction", "data"),
                    va="bottom", fontsize=8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("density (fraction of entries kept)")
    ax.set_ylabel("bytes sent per rank per call")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(args.title or "Bytes on the wire against density")
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figure", choices=["time", "speedup", "bytes"])
    parser.add_argument("files", nargs="+", help="JSON files from -J (LABEL=FILE, or RATE_GBPS=FILE for speedup)")
    parser.add_argument("-o", "--output", required=True, help="PNG file to write")
    parser.add_argument("--title", help="figure title (default: derived from the files)")
    parser.add_argument("--dpi", type=int, default=110)
    args = parser.parse_args()
    fig = {"time": plot_time, "speedup": plot_speedup, "bytes": plot_bytes}[args.figure](args)
    fig.tight_layout()
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
