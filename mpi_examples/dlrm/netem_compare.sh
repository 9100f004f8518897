#!/usr/bin/env bash
# DLRM --compare on emulated links: perf/netem/run.sh (4 ranks, one per network
# namespace, Open MPI over TCP, each link shaped to the rate) at each rate in
# RATES, the dense and the compressed run side by side in one invocation.
# Arguments go to dlrm. perf/netem/run.sh takes a global lock and refuses
# while another run holds it: this script waits and retries.
#
#   RATES="1gbit 10gbit 25gbit" mpi_examples/dlrm/netem_compare.sh --steps 60 --eval-samples 2048
#
# Environment: DLRM (the binary, default build/mpi_examples/dlrm/dlrm), RANKS
# (default 4), RATES (default "1gbit 10gbit 25gbit"), WAIT_S (how long to wait
# for the lock, default 1800). SPCCL_* variables set here reach every rank.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dlrm=${DLRM:-$root/build/mpi_examples/dlrm/dlrm}
ranks=${RANKS:-4}
rates=${RATES:-"1gbit 10gbit 25gbit"}
wait_s=${WAIT_S:-1800}
[ -x "$dlrm" ] || { echo "netem_compare.sh: $dlrm: not built (cmake --build build --target dlrm)" >&2; exit 2; }
# Open MPI forwards only the variables named with -x.
mpi_args=()
while IFS='=' read -r name _; do
  mpi_args+=(--mpi-arg -x --mpi-arg "$name")
done < <(env | grep '^SPCCL_' || true)

for rate in $rates; do
  waited=0
  while :; do
    status=0
    out=$("$root/perf/netem/run.sh" --ranks "$ranks" --rate "$rate" "${mpi_args[@]}" -- "$dlrm" --compare "$@" 2>&1) ||
      status=$?
    if [ "$status" -ne 0 ] && grep -q "another perf/netem/run.sh is running" <<<"$out" && [ "$waited" -lt "$wait_s" ]; then
      sleep 15
      waited=$((waited + 15))
      continue
    fi
    break
  done
  echo "== rate $rate per link and direction, $ranks ranks (exit status $status)"
  grep -E '^(# netem|dlrm:|\[[a-z]+\] (held-out|bytes|time|hot))' <<<"$out" || true
  sed -n '/^[0-9]* ranks, global batch/,$p' <<<"$out"
  [ "$status" -eq 0 ] || { echo "$out" | tail -20; exit "$status"; }
done
