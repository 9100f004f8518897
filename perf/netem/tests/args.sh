#!/bin/bash
# Numerals with leading zeros or beyond 64 bits are refused (exit 2, "--ranks must"/"--mtu must"), nothing built.
# Needs no root for the refusal (validation precedes the root check); skips (77) if iproute2 is missing.
R=${1:?run.sh path}
command -v ip >/dev/null || exit 77
# run.sh's namespaces, listed under its lock: no other run's can be alive then.
netns_left() { flock -w 120 /run/lock/spccl-netem.lock ip netns list 2>/dev/null | grep '^spcclnet-'; }
fail=0
for a in "--ranks 08" "--ranks 010" "--ranks 99999999999999999999" "--mtu 02000" "--mtu 99999999999999999999"; do
  out=$("$R" $a -- true 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -q -e "--ranks must" -e "--mtu must" <<<"$out"; then echo "FAIL: $a rc=$rc: $(tail -1 <<<"$out")"; fail=1; fi
done
[ -z "$(netns_left)" ] || { echo "FAIL: namespaces left"; fail=1; }
[ $fail = 0 ] && echo PASS; exit $fail
