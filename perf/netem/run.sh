#!/usr/bin/env bash
# Run a command (a perf binary) under Open MPI on P emulated hosts: one network
# namespace per rank, each joined by a veth pair to a Linux bridge that lives in
# its own namespace, each link shaped with tc (rate and delay, both directions),
# ranks talking over TCP only. Addresses come from 198.18.0.0/15 (RFC 2544's
# benchmark range); nothing is added to the root namespace, so nothing leaves
# the machine. Usage: perf/netem/run.sh -h, and perf/netem/README.md.
set -Eeuo pipefail

readonly PREFIX=spcclnet              # every namespace this script creates starts with "$PREFIX-"
readonly BRNS="$PREFIX-br"            # the switch: bridge, hosts mpirun
readonly SUBNET_PREFIX=198.18.0       # rank i is 198.18.0.(i+1); the bridge is .254
readonly SUBNET="$SUBNET_PREFIX.0/24"
readonly BRIDGE_ADDR="$SUBNET_PREFIX.254"
readonly LOCK=/run/lock/spccl-netem.lock
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly SCRIPT_DIR
readonly AGENT="$SCRIPT_DIR/ns_agent.sh"

readonly DEFAULT_RANKS=4 DEFAULT_RATE=10gbit DEFAULT_DELAY=0 DEFAULT_MTU=1500
ranks=$DEFAULT_RANKS
rate=$DEFAULT_RATE
delay=$DEFAULT_DELAY
mtu=$DEFAULT_MTU
mpi_args=()
verbose=0
cleanup_only=0

usage() {
  cat <<EOF
usage: $0 [options] -- COMMAND [ARGS...]
       $0 --cleanup

Creates P network namespaces ($PREFIX-r0 .. r<P-1>, addresses $SUBNET_PREFIX.1 ..)
joined by veth pairs to a bridge (namespace $BRNS, $BRIDGE_ADDR), shapes
every link in both directions, and runs COMMAND on P ranks with Open MPI over
TCP (btl tcp,self, pml ob1; one orted per namespace). Removes everything on exit,
on Ctrl-C and on SIGTERM, and leftovers of an earlier run at start.

options:
  --ranks P        ranks = namespaces (2..250)                       [$DEFAULT_RANKS]
  --rate R         link rate per direction, tc units (1gbit, 10gbit,
                   25gbit, 500mbit) or 'none' for no rate limit     [$DEFAULT_RATE]
  --delay D        delay added per link and direction (tc units: 20us,
                   1ms) or 0; rank to rank one way crosses 2 links   [$DEFAULT_DELAY]
  --mtu N          MTU of every veth and the bridge                  [$DEFAULT_MTU]
  --mpi-arg ARG    pass ARG to mpirun (repeat for each word, e.g.
                   --mpi-arg --mca --mpi-arg pml_monitoring_enable --mpi-arg 1)
  --verbose        print every ip/tc command and the mpirun line
  --cleanup        only remove leftovers of earlier runs, then exit
  -h, --help       this text

Must run as root. Needs iproute2 (ip, tc; installed with apt-get when missing),
unshare and flock (util-linux), and Open MPI's mpirun.
EOF
}

die() { echo "run.sh: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) [ $# -ge 2 ] || die "--ranks needs a value"; ranks=$2; shift 2 ;;
    --rate) [ $# -ge 2 ] || die "--rate needs a value"; rate=$2; shift 2 ;;
    --delay) [ $# -ge 2 ] || die "--delay needs a value"; delay=$2; shift 2 ;;
    --mtu) [ $# -ge 2 ] || die "--mtu needs a value"; mtu=$2; shift 2 ;;
    --mpi-arg) [ $# -ge 2 ] || die "--mpi-arg needs a value"; mpi_args+=("$2"); shift 2 ;;
    --verbose) verbose=1; shift ;;
    --cleanup) cleanup_only=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) usage >&2; die "unknown option '$1' (the command goes after --)" ;;
  esac
done

# Decimal numerals without leading zeros and of at most 5 digits: bash
# arithmetic reads 010 as octal (8) and ip reads an MTU of 02000 as 1024, and
# [ -lt ] rejects a number beyond 64 bits as an error that would pass the check.
if ! [[ "$ranks" =~ ^[1-9][0-9]{0,4}$ ]] || [ "$ranks" -lt 2 ] || [ "$ranks" -gt 250 ]; then
  die "--ranks must be 2..250, not '$ranks'"
fi
[[ "$rate" == none || "$rate" =~ ^[0-9]+(\.[0-9]+)?([kKmMgGtT]?(bit|bps))$ ]] ||
  die "--rate must be like 1gbit, 10gbit, 25gbit, 500mbit or 'none', not '$rate'"
[[ "$delay" == 0 || "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|usec|ms|msec|s|sec)$ ]] ||
  die "--delay must be like 20us, 1ms or 0, not '$delay'"
if ! [[ "$mtu" =~ ^[1-9][0-9]{0,4}$ ]] || [ "$mtu" -lt 1280 ] || [ "$mtu" -gt 65535 ]; then
  die "--mtu must be 1280..65535, not '$mtu'"
fi
if [ "$cleanup_only" = 0 ] && [ $# -eq 0 ]; then
  usage >&2
  die "no command given (put it after --)"
fi

# ---- preconditions: root, tools -------------------------------------------------
[ "$(id -u)" = 0 ] || die "must run as root (it creates network namespaces and tc qdiscs); try: sudo $0 ..."
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "run.sh: iproute2 (ip, tc) missing: installing it with apt-get" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 >&2 ||
      { DEBIAN_FRONTEND=noninteractive apt-get update >&2 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iproute2 >&2; } ||
      die "iproute2 (ip, tc) is missing and apt-get could not install it"
  fi
  if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
    die "iproute2 (ip, tc) is missing; install it (Debian: apt-get install iproute2)"
  fi
fi
for tool in unshare flock; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing (Debian package util-linux)"
done
if [ "$cleanup_only" = 0 ]; then
  command -v mpirun >/dev/null 2>&1 || die "mpirun is missing (Debian: apt-get install openmpi-bin)"
  mpirun --version 2>/dev/null | grep -q 'Open MPI' || die "mpirun is not Open MPI's (plm_rsh_agent and the MCA flags are Open MPI's)"
  [ -x "$AGENT" ] || die "$AGENT is missing or not executable"
fi

# One run at a time: the namespace names are fixed, so that a run can remove an
# interrupted run's leftovers. The lock's descriptor is closed for every child
# (9>&-), so a killed script does not leave its lock held by an orphan.
mkdir -p "$(dirname "$LOCK")"
exec 9>"$LOCK"
flock -n 9 || die "another perf/netem/run.sh is running (lock $LOCK)"

run() {
  [ "$verbose" = 1 ] && echo "+ $*" >&2
  local rc=0
  "$@" || rc=$?
  [ "$rc" = 0 ] || echo "run.sh: setup step failed (exit $rc): $*" >&2
  return "$rc"
}

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-" || true
}

# Remove every namespace of ours, first ending the processes still in it (by
# pid: an orted or rank left behind by a killed run keeps its namespace alive
# after `ip netns del`). Deleting the namespaces removes the veths and the bridge.
remove_namespaces() {
  local ns pids i
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${pids// /}" ]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
        [ -z "${pids// /}" ] && break
        sleep 0.2
      done
      if [ -n "${pids// /}" ]; then
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
      fi
    fi
    ip netns del "$ns" 2>/dev/null || true
  done
}

# Temporary directories of earlier runs (mktemp -d "$TMP_PATTERN"): a run
# killed with SIGKILL leaves its own. Under the lock no other run is alive, so
# every one of them is a leftover.
readonly TMP_PATTERN=/tmp/spccl-netem.XXXXXX
our_tmpdirs() {
  compgen -G "${TMP_PATTERN%XXXXXX}??????" || true
}

if [ "$cleanup_only" = 1 ]; then
  left=$(our_namespaces | tr '\n' ' ')
  left+=$(our_tmpdirs | tr '\n' ' ')
  remove_namespaces
  our_tmpdirs | while read -r d; do rm -rf -- "$d"; done
  echo "run.sh: removed: ${left:-nothing}"
  exit 0
fi

# ---- cleanup on every way out ----------------------------------------------------
mpi_pid=
tmpdir=
# shellcheck disable=SC2317  # trap handlers
on_exit() {
  local rc=$?
  # Ignore further signals until everything is removed: a second Ctrl-C,
  # SIGTERM or SIGHUP must not abort the clean-up half way.
  trap - EXIT ERR
  trap '' INT TERM HUP
  set +e
  if [ -n "$mpi_pid" ] && kill -0 "$mpi_pid" 2>/dev/null; then
    kill -TERM "$mpi_pid" 2>/dev/null      # mpirun then stops its daemons and ranks
    for _ in $(seq 1 25); do kill -0 "$mpi_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$mpi_pid" 2>/dev/null
    wait "$mpi_pid" 2>/dev/null
  fi
  remove_namespaces
  [ -n "$tmpdir" ] && rm -rf "$tmpdir"
  if [ -n "$(our_namespaces)" ]; then
    echo "run.sh: could not remove: $(our_namespaces | tr '\n' ' ')" >&2
    [ "$rc" = 0 ] && rc=1
  fi
  exit "$rc"
}
# shellcheck disable=SC2317
on_signal() {
  echo "run.sh: caught SIG$1, cleaning up" >&2
  case "$1" in
    INT) exit 130 ;;
    HUP) exit 129 ;;
  esac
  exit 143
}
trap on_exit EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP
trap 'echo "run.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

left=$(our_namespaces | tr '\n' ' ')
left+=$(our_tmpdirs | tr '\n' ' ')
if [ -n "$left" ]; then
  echo "run.sh: removing leftovers of an earlier run: $left" >&2
  remove_namespaces
  our_tmpdirs | while read -r d; do rm -rf -- "$d"; done
fi

# ---- build the network -----------------------------------------------------------
# Shape one direction of a link: HTB caps the rate, netem (its leaf) adds delay.
# HTB (not TBF) so that the veth's 64 KiB GSO packets are rated whole instead of
# being segmented in software.
shape() {
  local ns=$1 dev=$2 parent=root
  if [ "$rate" != none ]; then
    run tc -n "$ns" qdisc add dev "$dev" root handle 1: htb default 1
    run tc -n "$ns" class add dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" quantum 200000
    parent="parent 1:1"
  fi
  if [ "$delay" != 0 ]; then
    # shellcheck disable=SC2086
    run tc -n "$ns" qdisc add dev "$dev" $parent handle 10: netem delay "$delay" limit 100000
  fi
}

run ip netns add "$BRNS"
run ip -n "$BRNS" link set lo up
run ip -n "$BRNS" link add br0 type bridge stp_state 0 forward_delay 0
run ip -n "$BRNS" link set br0 mtu "$mtu"
run ip -n "$BRNS" addr add "$BRIDGE_ADDR/24" dev br0
run ip -n "$BRNS" link set br0 up

# Probe the kernel's qdiscs once, on the bridge, before building the rest.
probe_qdisc() {  # probe_qdisc KIND HINT [TC ARGS...]
  local kind=$1 hint=$2 err
  shift 2
  if ! err=$(tc -n "$BRNS" qdisc add dev br0 root handle 1: "$kind" "$@" 2>&1); then
    die "this kernel cannot add a '$kind' qdisc ($err; kernel option CONFIG_NET_SCH_${kind^^}). $hint"
  fi
  tc -n "$BRNS" qdisc del dev br0 root
}
if [ "$rate" != none ]; then
  probe_qdisc htb "Use --rate none to run without a rate limit." default 1
  # The rate itself: tc refuses one below 8bit (1 byte/s), e.g. 0bit.
  tc -n "$BRNS" qdisc add dev br0 root handle 1: htb default 1
  if ! err=$(tc -n "$BRNS" class add dev br0 parent 1: classid 1:1 htb rate "$rate" ceil "$rate" 2>&1); then
    die "tc refuses --rate '$rate' ($err); the smallest rate is 8bit"
  fi
  tc -n "$BRNS" qdisc del dev br0 root
fi
if [ "$delay" != 0 ]; then
  probe_qdisc netem "Use --delay 0 to shape the rate only." delay "$delay"
fi

tmpdir=$(mktemp -d "$TMP_PATTERN")
hostfile="$tmpdir/hostfile"
: >"$hostfile"
hostmap=
for ((i = 0; i < ranks; i++)); do
  ns="$PREFIX-r$i"
  addr="$SUBNET_PREFIX.$((i + 1))"
  run ip netns add "$ns"
  run ip -n "$ns" link set lo up       # the node's PMIx server listens on loopback
  run ip -n "$BRNS" link add "port$i" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
  run ip -n "$BRNS" link set "port$i" master br0
  run ip -n "$BRNS" link set "port$i" up
  run ip -n "$ns" addr add "$addr/24" dev eth0
  run ip -n "$ns" link set eth0 up
  shape "$ns" eth0                     # rank -> switch
  shape "$BRNS" "port$i"               # switch -> rank
  echo "$addr slots=1" >>"$hostfile"
  hostmap+="$addr=$ns "
done
export SPCCL_NETEM_HOSTMAP="$hostmap"

# ---- run ------------------------------------------------------------------------
# mpirun runs in the bridge namespace, so its daemons reach it over the bridge;
# each namespace is a node with one slot. --bind-to none: every orted sees all
# cores as its own and would pin its rank to core 0. mpi_yield_when_idle: Open
# MPI cannot see that P "nodes" share this machine's cores, so it would not
# yield on its own as it does with --oversubscribe.
# Both are defaults: an --mpi-arg that sets them replaces them (mpirun refuses
# an MCA parameter given twice).
# Open MPI splits plm_rsh_agent at spaces (it takes "ssh : rsh" and options),
# so the agent is run from the temporary directory, whose path has none.
agent="$tmpdir/ns_agent.sh"
cp "$AGENT" "$agent"
bind_default=(--bind-to none)
yield_default=(--mca mpi_yield_when_idle 1)
for arg in ${mpi_args[@]+"${mpi_args[@]}"}; do
  case "$arg" in
    --bind-to|--bind-to=*|-bind-to) bind_default=() ;;
    mpi_yield_when_idle) yield_default=() ;;
  esac
done
# shellcheck disable=SC2054  # "tcp,self" is one word
mpirun_cmd=(
  mpirun --allow-run-as-root -np "$ranks" --hostfile "$hostfile"
  --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
  --mca pml ob1 --mca btl tcp,self
  --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET"
  ${bind_default[@]+"${bind_default[@]}"} ${yield_default[@]+"${yield_default[@]}"}
  ${mpi_args[@]+"${mpi_args[@]}"}
  "$@"
)
echo "# netem: $ranks ranks, rate $rate, delay $delay per link and direction, mtu $mtu," \
  "hosts $SUBNET_PREFIX.1-$SUBNET_PREFIX.$ranks, Open MPI over TCP" >&2
[ "$verbose" = 1 ] && echo "+ ip netns exec $BRNS ${mpirun_cmd[*]}" >&2
ip netns exec "$BRNS" "${mpirun_cmd[@]}" </dev/null 9>&- &
mpi_pid=$!
rc=0
wait "$mpi_pid" || rc=$?
mpi_pid=
exit "$rc"
