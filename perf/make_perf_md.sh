#!/usr/bin/env bash
# Regenerates docs/PERF.md: runs every benchmark the repository has on this machine
# and writes each table under the command that produced it, with one environment
# line at the top. The prose between the tables says what to read from them; it is
# written so that it holds for any run (ratios, not absolute times).
#
#   perf/make_perf_md.sh [--build DIR] [--scale quick|normal|full] [--out FILE]
#                        [--skip netem,grid,...]
#
# --scale sets the sizes and iteration counts: quick (a minute, to try the script),
# normal (10 to 20 minutes on 2 cores, the default), full (more sizes, 8 ranks and
# 256 MiB grid points: an hour or more, and about 30 GB of memory). --skip leaves
# out sections by name: main, alltoall, allgather, kernels, grid, netem, dlrm, model,
# gpu. The netem section needs root and iproute2 (perf/netem/README.md); without them it is skipped
# with a note. Needs a build with SPCCL_BUILD_PERF and SPCCL_BUILD_EXAMPLES (the
# default); CUDA is not used.
set -Eeuo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$repo/build"
scale=normal
out="$repo/docs/PERF.md"
skip=","

while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip) skip=",$2,"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make_perf_md.sh: unknown option '$1' (-h for help)" >&2; exit 2 ;;
  esac
done

case "$scale" in
  quick)
    MAIN="-b 1M -e 4M -f 4 -n 5 -w 2"; A2A="-b 1M -e 1M -n 5 -w 2"; AG="-b 1M -e 1M -n 5 -w 2"
    KERN="--floats 4M --iters 3"; GRID="--sizes 1M --densities 0.01 --ranks 2 -n 5 -w 2"
    NETEM="-b 4M -e 4M -n 3 -w 2"; DLRM="--steps 30" ;;
  normal)
    MAIN="-b 1M -e 64M -f 4"; A2A="-b 1M -e 16M -f 4 -n 10 -w 3"
    AG="-b 1M -e 16M -f 4 -n 10 -w 3"; KERN="--floats 16M --iters 5"
    GRID="--sizes 1M,4M,16M --densities 0.001,0.01,0.1 --ranks 2,4 -n 10 -w 3 --repeat 2"
    NETEM="-b 4M -e 64M -f 4 -n 5 -w 3"; DLRM="" ;;
  full)
    MAIN="-b 1M -e 64M -f 4"; A2A="-b 1M -e 64M -f 4"; AG="-b 1M -e 64M -f 4"; KERN=""
    GRID="--sizes 64K,1M,16M,256M --densities 0.001,0.01,0.1 --ranks 2,4,8 --repeat 3"
    NETEM="-b 4M -e 64M -f 4"; DLRM="" ;;
  *) echo "make_perf_md.sh: --scale quick, normal or full, not '$scale'" >&2; exit 2 ;;
esac

for bin in perf/allreduce_perf perf/alltoall_perf perf/allgather_perf perf/host_kernel_bench \
           perf/model_projection mpi_examples/dlrm/dlrm; do
  [ -x "$build/$bin" ] || { echo "make_perf_md.sh: $build/$bin missing: build first" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/spccl-perf-md.XXXXXX")
trap 'rm -rf "$work"' EXIT
body="$work/body.md"
: >"$body"

MPIRUN="mpirun --allow-run-as-root --oversubscribe"
# Commands are printed relative to the repository root, as a reader would type them.
rel() { local p=$1; echo "${p#"$repo"/}"; }
B=$(rel "$build")

skipped() { [[ "$skip" == *",$1,"* ]]; }
say() { printf '%s\n' "$@" >>"$body"; }
section() { say "" "## $1" ""; }
# run_block TITLE_CMD CMD...: prints the command, runs it (from the repository root),
# and puts its table lines (the perf binaries' rows and column headers, or all of the
# output when FILTER is cat) in a text block.
run_block() {
  local filter=$1; shift
  local shown=$1; shift
  echo "make_perf_md.sh: $shown" >&2
  say '```sh' "$shown" '```' "" '```text'
  local log="$work/log.$RANDOM"
  local rc=0
  (cd "$repo" && "$@") >"$log" 2>&1 || rc=$?
  "$filter" <"$log" >>"$body"
  if [ "$rc" != 0 ]; then
    say "(exit status $rc)"
    # A run that printed no table at all: show how it ended instead.
    [ -n "$("$filter" <"$log")" ] || tail -n 5 "$log" >>"$body"
  fi
  say '```' ""
}
# The perf binaries' tables: column headers and data rows, not their preamble.
perf_rows() { grep -E '^#( link)? +(size|\(B\))|^ *[0-9]+ |^ *(1gbit|10gbit) ' || true; }
kern_rows() { grep -vE '^\s*$' || true; }
all_rows() { cat; }
dlrm_rows() { grep -vE '^\s*$|^step |^\[' | tail -n 30 || true; }

started=$(date -u +%s)
env_line() {
  local cpu mem os gcc ompi
  cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
  mem=$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
  os=$(. /etc/os-release && echo "$PRETTY_NAME")
  gcc=$(g++ -dumpfullversion 2>/dev/null || echo '?')
  ompi=$(mpirun --version 2>/dev/null | head -n 1 | sed 's/.*) //')
  echo "$(nproc) cores ($cpu), $mem, $os, g++ $gcc, Open MPI $ompi, no GPU; $(date -u '+%Y-%m-%d %H:%M UTC'), scale $scale"
}

if ! skipped main; then
  section "Allreduce, 4 ranks, density 0.01, fp32 (the README's main job)"
  run_block perf_rows "$MPIRUN -np 4 $B/perf/allreduce_perf $MAIN -D 0.01" \
    $MPIRUN -np 4 "$build/perf/allreduce_perf" $MAIN -D 0.01
  say "Each row times the compressed allreduce (\`time\`, auto's pick in \`algo\`) and a dense" \
      "\`MPI_Allreduce\` of the same data (\`dense\`) in the same process, one after the other;" \
      "\`speedup\` is their ratio, \`ratio\` the dense bytes over the bytes spccl sent. The byte" \
      "counts are exact and do not depend on the machine; the times do. Over shared memory," \
      "with 4 ranks on 2 cores, both sides are CPU-bound: at small sizes the selection pass and" \
      "the descriptor exchange cost about what the saved bytes would, and the compressed call" \
      "wins only where the dense one has much more to move. Allgather sends each rank's k" \
      "pairs to every peer (a ratio near 27 at 4 ranks); split, which auto takes for the" \
      "largest buffers, re-selects after reducing and sends about k pairs in all, whatever" \
      "the rank count. The emulated links below show what a slower wire does."
fi

if ! skipped alltoall; then
  section "Alltoall rows (DCT-MP forward and backward), 4 ranks, rowLen 128, density 1/16"
  run_block perf_rows "$MPIRUN -np 4 $B/perf/alltoall_perf $A2A -R 128 -D 0.0625" \
    $MPIRUN -np 4 "$build/perf/alltoall_perf" $A2A -R 128 -D 0.0625
  say "\`fwd\` rows send each row's 8 largest entries with their 1-byte positions, 40 bytes a" \
      "row against 512 dense (1/12.8 with headers); \`bwd\` rows send only the 8 values back" \
      "(no positions, both sides know them), 1/16. The byte ratios are fixed by the format." \
      "Over shared memory the forward's row top-k pass costs more than the bytes it saves" \
      "(speedup below 1); the backward, which only scatters values, breaks even or wins."
fi

if ! skipped allgather; then
  section "Allgather, 4 ranks, density 0.01, fp32"
  run_block perf_rows "$MPIRUN -np 4 $B/perf/allgather_perf $AG -D 0.01" \
    $MPIRUN -np 4 "$build/perf/allgather_perf" $AG -D 0.01
  say "The drop-in \`spcclAllGather\` with \`SPCCL_ALLGATHER_DENSITY=0.01\`: every block's 1%" \
      "largest entries as pairs, against \`MPI_Allgather\` of the whole blocks: about 75x fewer" \
      "bytes. No residual (an allgather does not reduce), so \`rel_err\` is what the dropped" \
      "entries weigh. Over shared memory an allgather is a copy, cheaper than the selection," \
      "so the speedup stays below 1 here; the bytes are what a network would see."
fi

if ! skipped kernels; then
  section "Host kernels against memcpy (build/perf/host_kernel_bench)"
  run_block kern_rows "$B/perf/host_kernel_bench $KERN" "$build/perf/host_kernel_bench" $KERN
  say "Each kernel's \`bytes\` are what it must move (select+pack: the input and the residual" \
      "in, the new residual and the pairs out), so its percentage of \`memcpy\` is how close it" \
      "comes to the memory floor; select+pack's rate is what the cost model's selection term" \
      "(gamma_s) charges, \`unpackBlock\` the receiving side's (gamma_u). \`threshold\` is the" \
      "exact tau estimate, run once every \`SPCCL_THRESHOLD_INTERVAL\` calls, so its rate matters" \
      "little. The row top-k rows time every SIMD level the CPU has (\`SPCCL_HOST_SIMD\`)."
fi

if ! skipped grid; then
  section "Auto against the fixed algorithms (perf/grid.py)"
  run_block all_rows "python3 perf/grid.py --build $B $GRID --interleaved --twin --trials 4" \
    python3 "$repo/perf/grid.py" --build "$build" $GRID --interleaved --twin --trials 4
  say "For each point (size per rank, density, ranks) perf/auto_compare runs the three fixed" \
      "algorithms, auto (calibrated, with \`SPCCL_AUTO_TRIALS=4\`), a second dense compressor" \
      "(\`twin\`) and \`MPI_Allreduce\` in one process, calls interleaved on the same data, so" \
      "the ratios are side by side; each point runs twice and keeps each algorithm's best." \
      "Auto should be within 10% of the fastest fixed algorithm. The \`twin\` column is how far" \
      "apart two identical contenders come out, the noise floor under every ratio of its row:" \
      "on 2 cores shared with other work, a miss whose twin is as far off says nothing about" \
      "auto. Misses also cluster near crossovers, where two algorithms are within tens of" \
      "percent and which one a trial measures faster is close to a coin toss."
fi

if ! skipped netem; then
  section "Emulated cluster network (perf/netem), 4 ranks, allreduce density 0.01"
  if [ "$(id -u)" -ne 0 ] || ! command -v tc >/dev/null || ! ip netns list >/dev/null 2>&1; then
    say "Not run: needs root, iproute2 and network namespaces (perf/netem/README.md)."
  else
    for rate in 1gbit 10gbit; do
      run_block perf_rows \
        "perf/netem/run.sh --ranks 4 --rate $rate -- $B/perf/allreduce_perf $NETEM -D 0.01" \
        "$repo/perf/netem/run.sh" --ranks 4 --rate "$rate" -- \
        "$build/perf/allreduce_perf" $NETEM -D 0.01
    done
    say "Each rank is its own network namespace behind a link shaped to the rate, Open MPI" \
        "over TCP, no shared memory. Here the wire is the bottleneck the method is for: the" \
        "dense allreduce's time follows the link (about three times longer at 1 Gbit/s than" \
        "at 10 here, not ten: 2 cores cannot drive four 10 Gbit/s links, perf/netem/README.md)," \
        "while the compressed call's moves far less (its few bytes cross either link quickly" \
        "and its passes run on the same 2 cores), so the speedup grows as the link slows. It" \
        "stays below the byte ratio because those passes, and 4 ranks sharing 2 cores, cost" \
        "time no link removes."
  fi
fi

if ! skipped dlrm; then
  section "DLRM, hybrid parallel, 4 ranks: compressed against exact collectives"
  run_block dlrm_rows "$MPIRUN -np 4 $B/mpi_examples/dlrm/dlrm --compare${DLRM:+ $DLRM}" \
    $MPIRUN -np 4 "$build/mpi_examples/dlrm/dlrm" --compare $DLRM
  say "The same model, data and seed trained twice, over exact collectives and over spccl's" \
      "at the example's defaults (DP density 0.001 with error feedback; the hottest ids" \
      "replicated on every rank; the top 7 of 64 entries of each other embedding row, in" \
      "fp8, forward and backward; merged table updates in both runs). The bytes per step" \
      "are exact and the run is deterministic, so they and the AUCs repeat run to run; the" \
      "step times do not (4 ranks on 2 cores). What the compression costs in AUC over" \
      "seeds and settings: docs/DLRM.md (the frontier, and this command over three seeds)."
fi

if ! skipped model; then
  section "A model, not a measurement: dense and compressed allreduce on a GPU cluster"
  run_block all_rows "$B/perf/model_projection" "$build/perf/model_projection"
  say "The library's own cost model (collectives/cost_model.cc, docs/ALGORITHMS.md) evaluated for" \
      "256 MiB of fp32 gradients per rank, with the selection and unpack rate of the H200" \
      "table below and the message latency stated in its first line; nothing here ran on" \
      "a cluster. It shows the shape the measurements above cannot: split's re-selection" \
      "keeps a rank's bytes near k pairs as the rank count grows, where the allgather" \
      "algorithm's grow with it, and the gain shrinks as links get faster, since the" \
      "selection pass then costs a larger share of the call."
fi

if ! skipped gpu; then
  section "CUDA kernels on an H200 (not rerun by this script)"
  cat "$repo/perf/gpu/h200_kernels.md" >>"$body"
fi

elapsed=$(( $(date -u +%s) - started ))
{
  echo "# Measured performance"
  echo ""
  echo "Generated by \`perf/make_perf_md.sh --scale $scale\` in $((elapsed / 60)) minutes on:"
  echo ""
  echo "    $(env_line)"
  echo ""
  echo "All ranks share one machine. On a shared, oversubscribed machine only ratios measured"
  echo "side by side mean anything: compressed and dense rows are timed in the same process on"
  echo "the same data, one right after the other. Column meanings: perf/README.md. Every perf"
  echo "binary here runs \`-B mpi\` (host buffers, the dense side plain MPI)."
  cat "$body"
} >"$work/out.md"
mv "$work/out.md" "$out"
echo "make_perf_md.sh: wrote $out ($(wc -l <"$out") lines, ${elapsed} s)" >&2
