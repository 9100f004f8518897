#!/usr/bin/env bash
# collectives_check.c (a plain MPI program) under libspccl_mpi.so on NP ranks:
#   1. no interposer, "exact"                         -> every result is PMPI's
#   2. LD_PRELOAD, interception off, "exact"          -> the same
#   3. LD_PRELOAD, SPCCL_INTERCEPT=all, "compressed"  -> eligible calls show spccl's
#      compressed results, the rest PMPI's, and the finalize report counts them
#   4. LD_PRELOAD, SPCCL_INTERCEPT=allreduc (a typo)  -> warned, named, everything exact
#   5. LD_PRELOAD, SPCCL_INTERCEPT=all on rank 0 only -> ranks disagree: warned, everything exact
#   6. no interposer, "compressed"                    -> must fail: the checks can tell
#   7. as 3, SPCCL_MIN_COMPRESS_COUNT=6.5536e4        -> the default spelled as a float: as 3
#   8. as 3, SPCCL_MIN_COMPRESS_COUNT=2e5             -> every call below it: none handed, everything exact
#   9. as 3, SPCCL_DISABLE=1.0                        -> none handed, everything exact
#  10. as 3, SPCCL_MIN_COMPRESS_COUNT=64k             -> invalid: warned, named, everything exact
# (7-10: the interposer reads SPCCL_* through spccl's own parameter table, so
# every spelling it accepts means the same as in the library.)
#
# usage: run_collectives.sh NP CHECK PRELOAD_LIB -- MPIEXEC [MPIRUN_FLAGS...]
set -euo pipefail

NP=$1 CHECK=$2 PRELOAD=$3
shift 3
[[ ${1:-} == -- ]] || { echo "usage: $0 NP CHECK PRELOAD -- MPIEXEC [FLAGS...]" >&2; exit 2; }
shift
MPIRUN=("$@")
unset LD_PRELOAD SPCCL_INTERCEPT SPCCL_DEBUG SPCCL_DISABLE SPCCL_MIN_COMPRESS_COUNT
DENSITIES=(-x SPCCL_ALLTOALL_DENSITY=0.125 -x SPCCL_ALLTOALL_ROW_LEN=64 -x SPCCL_ALLGATHER_DENSITY=0.01)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

fail() { echo "FAIL (np=$NP): $*" >&2; cat "$OUT" >&2; exit 1; }
# expect_ok NAME mpirun-arguments...: the run must exit 0; output in $OUT
expect_ok() {
  local name=$1
  shift
  "${MPIRUN[@]}" "$@" >"$OUT" 2>&1 || fail "$name exited with an error"
  echo "ok: $name"
}

expect_ok "1 no interposer" -np "$NP" "$CHECK" exact
expect_ok "2 preloaded, interception off" -np "$NP" -x LD_PRELOAD="$PRELOAD" "${DENSITIES[@]}" "$CHECK" exact

expect_ok "3 preloaded, SPCCL_INTERCEPT=all" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=all \
  "${DENSITIES[@]}" -x SPCCL_DEBUG=INFO "$CHECK" compressed
# expect_report AR AT AG: the finalize report (SPCCL_DEBUG=INFO) in $OUT says
# that per rank AR of the 9 allreduce calls, AT of the 4 alltoall calls and AG
# of the 4 allgather calls were handed to spccl, and that spccl compressed them.
expect_report() {
  local expect
  for expect in "allreduce (all $NP ranks): $((9 * NP)) calls, $(($1 * NP)) handed to spccl ($(($1 * NP)) compressed), $(((9 - $1) * NP)) passed through" \
                "alltoall (all $NP ranks): $((4 * NP)) calls, $(($2 * NP)) handed to spccl ($(($2 * NP)) compressed), $(((4 - $2) * NP)) passed through" \
                "allgather (all $NP ranks): $((4 * NP)) calls, $(($3 * NP)) handed to spccl ($(($3 * NP)) compressed), $(((4 - $3) * NP)) passed through"; do
    grep -qF "interpose: $expect" "$OUT" || fail "the finalize report lacks: $expect"
  done
  grep "interpose: all" "$OUT"
}
# Per rank: allreduce 9 calls (4 eligible), alltoall 4 (2), allgather 4 (2).
expect_report 4 2 2

expect_ok "4 preloaded, SPCCL_INTERCEPT=allreduc" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=allreduc \
  "$CHECK" exact
grep -q "WARN interpose: invalid SPCCL_\* environment.*SPCCL_INTERCEPT='allreduc'" "$OUT" ||
  fail "no warning naming SPCCL_INTERCEPT='allreduc'"

expect_ok "5 SPCCL_INTERCEPT=all on rank 0 only" -np 1 env LD_PRELOAD="$PRELOAD" SPCCL_INTERCEPT=all "$CHECK" exact : \
  -np $((NP - 1)) env LD_PRELOAD="$PRELOAD" "$CHECK" exact
grep -q "WARN interpose: ranks disagree on SPCCL_INTERCEPT" "$OUT" || fail "no warning that the ranks disagree"

if "${MPIRUN[@]}" -np "$NP" "$CHECK" compressed >"$OUT" 2>&1; then
  fail "6: without the interposer, \"compressed\" checks passed: they cannot tell"
fi
grep -q "FAIL: allreduce MPI_FLOAT sum in place" "$OUT" || fail "6: the checker failed for another reason"
echo "ok: 6 the checks fail without compression"

expect_ok "7 SPCCL_MIN_COMPRESS_COUNT=6.5536e4" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=all \
  "${DENSITIES[@]}" -x SPCCL_DEBUG=INFO -x SPCCL_MIN_COMPRESS_COUNT=6.5536e4 "$CHECK" compressed
expect_report 4 2 2

expect_ok "8 SPCCL_MIN_COMPRESS_COUNT=2e5" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=all \
  "${DENSITIES[@]}" -x SPCCL_DEBUG=INFO -x SPCCL_MIN_COMPRESS_COUNT=2e5 "$CHECK" exact
grep -qF "send buffers of at least 200000 elements go to spccl" "$OUT" || fail "8: the minimum is not 200000"
expect_report 0 0 0

expect_ok "9 SPCCL_DISABLE=1.0" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=all \
  "${DENSITIES[@]}" -x SPCCL_DEBUG=INFO -x SPCCL_DISABLE=1.0 "$CHECK" exact
grep -qF "interception off: every call passes through" "$OUT" || fail "9: SPCCL_DISABLE=1.0 did not turn it off"

expect_ok "10 SPCCL_MIN_COMPRESS_COUNT=64k" -np "$NP" -x LD_PRELOAD="$PRELOAD" -x SPCCL_INTERCEPT=all \
  "${DENSITIES[@]}" -x SPCCL_MIN_COMPRESS_COUNT=64k "$CHECK" exact
grep -q "WARN interpose: invalid SPCCL_\* environment.*SPCCL_MIN_COMPRESS_COUNT='64k'" "$OUT" ||
  fail "10: no warning naming SPCCL_MIN_COMPRESS_COUNT='64k'"
echo "PASS (np=$NP)"
