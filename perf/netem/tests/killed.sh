#!/bin/bash
# What a run killed with SIGKILL leaves (namespaces, processes, its temporary
# directory) is removed by run.sh --cleanup, and by the next run. Skips (77) without root/netns/mpirun.
R=$(realpath "${1:?run.sh path}")
LOCK=/run/lock/spccl-netem.lock   # run.sh's
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v mpirun >/dev/null || exit 77
ip netns add spcclnet-probe 2>/dev/null || exit 77; ip netns del spcclnet-probe
fail=0
for how in cleanup nextrun; do
  before=$(ls -d /tmp/spccl-netem.* 2>/dev/null | sort)
  "$R" --ranks 2 --rate none -- sleep 60 >/dev/null 2>&1 &
  p=$!
  for _ in $(seq 1 100); do [ "$(ip netns pids spcclnet-r1 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.1; done
  new=$(comm -13 <(echo "$before") <(ls -d /tmp/spccl-netem.* 2>/dev/null | sort))
  kill -KILL $p; wait $p 2>/dev/null
  [ -n "$new" ] || { echo "FAIL: $how: no temporary directory seen"; fail=1; }
  if [ $how = cleanup ]; then "$R" --cleanup >/dev/null 2>&1; else "$R" --ranks 2 --rate none -- true >/dev/null 2>&1; fi
  for d in $new; do [ -e "$d" ] && { echo "FAIL: $how left $d"; fail=1; rm -rf "$d"; }; done
  # Checked under run.sh's lock: no other run's namespaces can be alive then.
  exec 8>"$LOCK"
  flock -w 120 8 || { echo "FAIL: could not take $LOCK to check what the run left"; exit 1; }
  left=$(ip netns list | grep '^spcclnet-')
  exec 8>&-
  [ -z "$left" ] || { echo "FAIL: $how left namespaces"; fail=1; "$R" --cleanup >/dev/null 2>&1; }
done
[ $fail = 0 ] && echo PASS; exit $fail
