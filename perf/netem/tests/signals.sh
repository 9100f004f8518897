#!/bin/bash
# A second signal during clean-up does not abort it. The rank ignores SIGTERM, so
# mpirun takes seconds to stop; run.sh gets SIGTERM, then SIGTERM and SIGHUP during its
# clean-up (as a second Ctrl-C would). Nothing may be left. Skips (77) without root/netns/mpirun.
R=$(realpath "${1:?run.sh path}")
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v mpirun >/dev/null || exit 77
ip netns add spcclnet-probe 2>/dev/null || exit 77; ip netns del spcclnet-probe
fail=0
for second in TERM HUP; do
  "$R" --ranks 2 --rate none -- sh -c 'trap "" TERM INT HUP; sleep 60' >/dev/null 2>&1 &
  p=$!
  for _ in $(seq 1 100); do [ "$(ip netns pids spcclnet-r1 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.1; done
  kill -TERM $p; sleep 1; kill -"$second" $p 2>/dev/null
  wait $p
  sleep 0.5
  left=$(ip netns list | grep '^spcclnet-' | tr '\n' ' ')
  procs=$(pgrep -f 'sleep 60$' | tr '\n' ' ')
  if [ -n "$left" ] || [ -n "$procs" ]; then
    echo "FAIL: TERM then $second: namespaces [$left] processes [$procs]"; fail=1
    "$R" --cleanup >/dev/null 2>&1
  fi
done
[ $fail = 0 ] && echo PASS; exit $fail
