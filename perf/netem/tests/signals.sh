#!/bin/bash
# A second signal during clean-up does not abort it. The rank ignores SIGTERM, so
# mpirun takes seconds to stop; run.sh gets SIGTERM, then SIGTERM and SIGHUP during its
# clean-up (as a second Ctrl-C would). Nothing may be left. Skips (77) without root/netns/mpirun.
#
# Only what this test started is looked at: the rank sleeps for a duration no other
# process on the machine uses (this shell's pid in its fraction), so a stray
# `sleep 60` elsewhere neither fails the test nor is touched by it; the namespaces are
# checked while holding run.sh's lock, so no other run's namespaces can be alive then.
R=$(realpath "${1:?run.sh path}")
LOCK=/run/lock/spccl-netem.lock   # run.sh's
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v mpirun >/dev/null || exit 77
ip netns add spcclnet-probe 2>/dev/null || exit 77; ip netns del spcclnet-probe
fail=0
n=0
for second in TERM HUP; do
  n=$((n + 1))
  token="60.$$$n"                  # e.g. sleep 60.123451: 60 s, and ours alone
  "$R" --ranks 2 --rate none -- sh -c "trap '' TERM INT HUP; sleep $token" >/dev/null 2>&1 &
  p=$!
  started=0
  for _ in $(seq 1 100); do
    pgrep -f "sleep $token\$" >/dev/null && { started=1; break; }
    sleep 0.1
  done
  [ $started = 1 ] || { echo "FAIL: TERM then $second: the rank never started"; fail=1; }
  kill -TERM $p; sleep 1; kill -"$second" $p 2>/dev/null
  wait $p
  sleep 0.5
  exec 8>"$LOCK"
  flock -w 120 8 || { echo "FAIL: could not take $LOCK to check what the run left"; exit 1; }
  left=$(ip netns list | grep '^spcclnet-' | tr '\n' ' ')
  exec 8>&-
  procs=$(pgrep -f "sleep $token\$" | tr '\n' ' ')
  if [ -n "$left" ] || [ -n "$procs" ]; then
    echo "FAIL: TERM then $second: namespaces [$left] processes [$procs]"; fail=1
    [ -n "$procs" ] && kill -KILL $procs 2>/dev/null
    [ -n "$left" ] && "$R" --cleanup >/dev/null 2>&1
  fi
done
[ $fail = 0 ] && echo PASS; exit $fail
