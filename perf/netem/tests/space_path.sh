#!/bin/bash
# run.sh works from a directory whose path has a space. Skips (77) without root/netns/mpirun.
R=$(realpath "${1:?run.sh path}")
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v mpirun >/dev/null || exit 77
ip netns add spcclnet-probe 2>/dev/null || exit 77; ip netns del spcclnet-probe
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir "$d/a b"; cp "$R" "$(dirname "$R")/ns_agent.sh" "$d/a b/"
out=$("$d/a b/run.sh" --ranks 2 --rate none -- hostname 2>&1); rc=$?
if [ $rc -ne 0 ] || [ "$(grep -c '^spcclnet-r[01]$' <<<"$out")" != 2 ]; then echo "FAIL rc=$rc: $(grep -m1 -e plm_rsh_agent -e Error <<<"$out")"; exit 1; fi
echo PASS
