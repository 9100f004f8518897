#!/usr/bin/env bash
# libspccl_mpi.so's corners on NP ranks (edge_check.c and collectives_check.c,
# plain MPI programs). Each run is bounded by timeout: a hang is a failure.
#   1. mixed datatypes, same signatures, SPCCL_INTERCEPT=all, densities 1  -> no hang, every
#      result MPI's, every call handed to spccl (finalize report)
#   2. as 1, compressed densities                                          -> no hang, every call handed
#   3. the program's attribute callbacks, SPCCL_INTERCEPT=allreduce         -> copy never, delete once
#  3b. one buffer as send and receive buffer on rank 0, disjoint types     -> no hang, MPI's results, handed
#   4. MPI_Allreduce(a, a, ...) without MPI_IN_PLACE                       -> MPI's error code
#   5. last rank: no SPCCL_INTERCEPT, invalid SPCCL_MIN_COMPRESS_COUNT     -> rank 0 warns, everything exact
#   6. last rank: SPCCL_DISABLE=1                                          -> warned naming SPCCL_DISABLE, exact
#   7. SPCCL_DEBUG=NONE with an invalid SPCCL_INTERCEPT                    -> no interposer line at all
#   8. one rank differs on a setting spccl compares across ranks           -> warned naming it, everything exact
#      (SPCCL_ALLREDUCE_DENSITY, SPCCL_ALGO, SPCCL_VALUE_TYPE, SPCCL_ALLTOALL_DENSITY,
#      SPCCL_ALLTOALL_ROW_LEN, SPCCL_ALLGATHER_DENSITY)
#   9. SPCCL_INTERCEPT=allreduce, ranks differ on SPCCL_ALLGATHER_DENSITY  -> not a disagreement: intercepted
#
# usage: run_edge.sh NP EDGE COLLECTIVES PRELOAD_LIB -- MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail

NP=$1 EDGE=$2 CHECK=$3 PRELOAD=$4
shift 4
[[ ${1:-} == -- ]] || { echo "usage: $0 NP EDGE COLLECTIVES PRELOAD -- MPIEXEC [FLAGS...]" >&2; exit 2; }
shift
MPIRUN=("$@")
unset LD_PRELOAD SPCCL_INTERCEPT SPCCL_DEBUG SPCCL_DISABLE SPCCL_MIN_COMPRESS_COUNT SPCCL_ALLREDUCE_DENSITY \
  SPCCL_ALGO SPCCL_VALUE_TYPE SPCCL_ALLTOALL_DENSITY SPCCL_ALLTOALL_ROW_LEN SPCCL_ALLGATHER_DENSITY
DENSITIES=(SPCCL_ALLTOALL_DENSITY=0.125 SPCCL_ALLTOALL_ROW_LEN=64 SPCCL_ALLGATHER_DENSITY=0.01)
LIMIT=${SPCCL_EDGE_TIMEOUT:-120}  # seconds per run; each takes a few
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

fail() { echo "FAIL (np=$NP): $*" >&2; cat "$OUT" >&2; exit 1; }
# expect_ok NAME mpirun-arguments...: the run must exit 0 within LIMIT; output in $OUT
expect_ok() {
  local name=$1 rc=0
  shift
  timeout -k 10 "$LIMIT" "${MPIRUN[@]}" "$@" >"$OUT" 2>&1 || rc=$?
  [[ $rc != 124 && $rc != 137 ]] || fail "$name hung (killed after ${LIMIT}s)"
  [[ $rc == 0 ]] || fail "$name exited with $rc"
  echo "ok: $name"
}
# expect_line FIXED-STRING: $OUT has it
expect_line() { grep -qF -- "$1" "$OUT" || fail "the output lacks: $1"; }
# handed COLL CALLS: the finalize report says all CALLS per rank of COLL were handed to spccl
handed() { expect_line "interpose: $1 (all $NP ranks): $(($2 * NP)) calls, $(($2 * NP)) handed to spccl"; }
last=$((NP - 1))  # the rank that differs (MPMD: -np LAST ... : -np 1 ...)

expect_ok "1 mixed datatypes, densities 1" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all SPCCL_DEBUG=INFO \
  "$EDGE" types
handed alltoall 12
handed allgather 12

expect_ok "2 mixed datatypes, compressed" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all SPCCL_DEBUG=INFO \
  "${DENSITIES[@]}" "$EDGE" types nocheck
handed alltoall 12
handed allgather 12

expect_ok "3 attribute callbacks" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO \
  "$EDGE" attr
handed allreduce 3

expect_ok "3b one buffer, disjoint datatypes" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all SPCCL_DEBUG=INFO \
  "$EDGE" samebuf
handed alltoall 1
handed allgather 1

expect_ok "4 aliased buffers" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "$EDGE" alias

expect_ok "5 an invalid value on a rank without SPCCL_INTERCEPT" \
  -np "$last" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "${DENSITIES[@]}" "$CHECK" exact : \
  -np 1 env LD_PRELOAD="$PRELOAD" "${DENSITIES[@]}" SPCCL_MIN_COMPRESS_COUNT=64k "$CHECK" exact
expect_line "[0] SPCCL WARN interpose: invalid SPCCL_* environment on rank $last"
expect_line "[$last] SPCCL WARN interpose: invalid SPCCL_* environment, every call passes through:"
expect_line "SPCCL_MIN_COMPRESS_COUNT='64k'"

expect_ok "6 SPCCL_DISABLE=1 on one rank" \
  -np "$last" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "${DENSITIES[@]}" "$CHECK" exact : \
  -np 1 env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "${DENSITIES[@]}" SPCCL_DISABLE=1 "$CHECK" exact
expect_line "[0] SPCCL WARN interpose: ranks disagree on SPCCL_DISABLE, every call passes through"
! grep -q "disagree on SPCCL_INTERCEPT\|SPCCL_MIN_COMPRESS_COUNT" "$OUT" || fail "6: names the wrong variable"

expect_ok "7 SPCCL_DEBUG=NONE" -np "$NP" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=allreduc SPCCL_DEBUG=NONE \
  "$CHECK" exact
! grep -q "interpose:" "$OUT" || fail "7: SPCCL_DEBUG=NONE printed interposer lines"

for setting in SPCCL_ALLREDUCE_DENSITY=0.5 SPCCL_ALGO=allgather SPCCL_VALUE_TYPE=fp16 SPCCL_ALLTOALL_DENSITY=0.5 \
               SPCCL_ALLTOALL_ROW_LEN=32 SPCCL_ALLGATHER_DENSITY=0.5; do
  expect_ok "8 $setting on rank 0 only" \
    -np 1 env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "${DENSITIES[@]}" "$setting" "$CHECK" exact : \
    -np "$last" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "${DENSITIES[@]}" "$CHECK" exact
  expect_line "[0] SPCCL WARN interpose: ranks disagree on ${setting%%=*}, every call passes through"
done

expect_ok "9 SPCCL_INTERCEPT=allreduce, SPCCL_ALLGATHER_DENSITY on rank 0 only" \
  -np 1 env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO SPCCL_ALLGATHER_DENSITY=0.5 \
  "$EDGE" attr : \
  -np "$last" env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=allreduce SPCCL_DEBUG=INFO "$EDGE" attr
! grep -q "disagree" "$OUT" || fail "9: a setting of a collective not intercepted counted as a disagreement"
handed allreduce 3
echo "PASS (np=$NP)"
