#!/bin/bash
# A rate tc refuses (0bit, 7bit) is refused with exit 2 naming --rate; a setup step that
# fails is named by its command. Skips (77) without root or network namespaces.
R=$(realpath "${1:?run.sh path}")
[ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v mpirun >/dev/null || exit 77
ip netns add spcclnet-probe 2>/dev/null || exit 77; ip netns del spcclnet-probe
# run.sh's namespaces, listed under its lock: no other run's can be alive then.
netns_left() { flock -w 120 /run/lock/spccl-netem.lock ip netns list 2>/dev/null | grep '^spcclnet-'; }
fail=0
for r in 0bit 7bit; do
  out=$("$R" --ranks 2 --rate $r -- true 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -q -- "--rate '$r'" <<<"$out"; then echo "FAIL: --rate $r rc=$rc: $(tail -1 <<<"$out")"; fail=1; fi
done
# a tc that fails on the rank side's class: the message must name that command
shim=$(mktemp -d); trap 'rm -rf "$shim"' EXIT
printf '#!/bin/sh\ncase "$*" in *"class add dev eth0"*) echo "shim: refused" >&2; exit 3;; esac\nexec %s "$@"\n' "$(command -v tc)" >"$shim/tc"; chmod +x "$shim/tc"
out=$(PATH="$shim:$PATH" "$R" --ranks 2 --rate 1gbit -- true 2>&1); rc=$?
if [ $rc -ne 3 ] || ! grep -q "tc -n spcclnet-r0 class add dev eth0" <<<"$out"; then echo "FAIL: step not named (rc=$rc): $(tail -1 <<<"$out")"; fail=1; fi
[ -z "$(netns_left)" ] || { echo "FAIL: namespaces left"; fail=1; }
[ $fail = 0 ] && echo PASS; exit $fail
