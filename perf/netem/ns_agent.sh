#!/bin/sh
# plm_rsh_agent for perf/netem/run.sh: each network namespace is a "host".
#
# mpirun (plm rsh) calls this as `ns_agent.sh [options] HOST WORD...`, as it
# would call ssh: WORD... is one shell command line (PATH/LD_LIBRARY_PATH
# exports, then orted with quoted arguments) meant for a remote shell to
# parse. So the words are joined with spaces and given to `sh -c`, exactly as
# sshd would do. HOST is an address from run.sh's hostfile; run.sh exports
# SPCCL_NETEM_HOSTMAP ("ADDR=NS ADDR=NS ...") so this script maps it to its
# namespace. The daemon runs in that namespace with its own UTS namespace and
# the namespace's name as hostname, so Open MPI sees P distinct nodes (no
# shared memory between ranks) and each node's PMIx server (loopback of its
# namespace) is reachable by the ranks it starts.
set -eu

while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;          # ssh-style options (e.g. -x), meaningless here
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "ns_agent.sh: usage: ns_agent.sh [options] HOST COMMAND..." >&2
  exit 255
fi
host=$1
shift

ns=
for pair in ${SPCCL_NETEM_HOSTMAP:-}; do
  if [ "${pair%%=*}" = "$host" ]; then
    ns=${pair#*=}
    break
  fi
done
if [ -z "$ns" ]; then
  echo "ns_agent.sh: host '$host' is not in SPCCL_NETEM_HOSTMAP ('${SPCCL_NETEM_HOSTMAP:-}')" >&2
  exit 255
fi

# "$*" joins the words with single spaces (IFS's first character).
IFS=' '
cmd="$*"
exec ip netns exec "$ns" unshare --uts sh -c "hostname '$ns' && $cmd"
