#!/usr/bin/env bash
# Two builds of libspccl under one perf binary, alternated A B A B ...: the
# way to show that a change to the library costs no time, on a machine whose
# load drifts between runs. The binary resolves libspccl.so.0 through
# LD_LIBRARY_PATH (searched before its own RUNPATH), so both libraries must
# export the same API.
#
#   perf/ab_lib.sh DIR_A DIR_B [ROUNDS] -- BINARY [ARGS...]
#
# DIR_A and DIR_B hold libspccl.so.0 (a build tree's top folder). Prints each
# run's table, then per size row every run's compressed time and its speedup
# over the dense call timed beside it in the same run (the ratio is what to
# compare: it cancels most of the load the two runs saw differently).
# The tables are those of the perf binaries (perf/harness.cc): size, count,
# algo, time, dense, speedup, ...
# Example (the README's main job, the previous commit against this one):
#   perf/ab_lib.sh /tmp/build-base build 2 -- build/perf/allreduce_perf -b 1M -e 64M -f 4 -D 0.01
set -euo pipefail

if [ $# -lt 4 ]; then
  sed -n '2,14p' "$0" >&2
  exit 2
fi
a=$1 b=$2
shift 2
rounds=2
if [ "$1" != "--" ]; then
  rounds=$1
  shift
fi
[ "$1" = "--" ] || { echo "ab_lib.sh: expected -- before the binary" >&2; exit 2; }
shift
for d in "$a" "$b"; do
  [ -e "$d/libspccl.so.0" ] || { echo "ab_lib.sh: no libspccl.so.0 in $d" >&2; exit 2; }
done
np=${NP:-4}
mpirun=(mpirun --oversubscribe -np "$np")
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; ++r)); do
  for side in A B; do
    dir=$a
    [ "$side" = B ] && dir=$b
    echo "== round $r, $side: $dir"
    LD_LIBRARY_PATH="$(cd "$dir" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "${mpirun[@]}" -x LD_LIBRARY_PATH "$@" | tee "$out/$side.$r"
  done
done
echo "== side by side: time (us) / speedup of each run"
printf '%12s %10s' size algo
for side in A B; do for ((r = 1; r <= rounds; ++r)); do printf ' %22s' "$side$r"; done; done
echo
files=()
for side in A B; do for ((r = 1; r <= rounds; ++r)); do files+=("$out/$side.$r"); done; done
awk '
  FNR == 1 { f++ }
  /^ *[0-9]/ { key = $1; if (f == 1) { order[++n] = key; algo[key] = $3 } cell[key, f] = sprintf("%12.1f / %6.2fx", $4, $6) }
  END { for (i = 1; i <= n; i++) { k = order[i]; line = sprintf("%12s %10s", k, algo[k]);
          for (j = 1; j <= f; j++) line = line sprintf(" %22s", cell[k, j]); print line } }
' "${files[@]}"
