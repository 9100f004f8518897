"""Runs a command with MASTER_PORT set to a TCP port that no other process holds:

    with_free_port.py mpirun ... -x MASTER_PORT ... python script.py

For the ctests whose scripts rendezvous through env:// (a TCPStore on
MASTER_PORT): a port derived from the mpirun job id collided now and then when
several ctest runs shared the machine (EADDRINUSE). Here the OS picks the port
(bind to port 0) and this process keeps its socket bound, not listening, until
the command ends: the kernel gives a bound port to no other bind(0) or outgoing
connection, so it stays free for rank 0's store, which can still bind it because
both sockets set SO_REUSEADDR (torch's TCPStore does). The exit status is the
command's.
"""
import os
import socket
import subprocess
import sys

if len(sys.argv) < 2:
    sys.exit("usage: with_free_port.py COMMAND [ARG...]")
with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("", 0))
    env = dict(os.environ, MASTER_PORT=str(held.getsockname()[1]))
    sys.exit(subprocess.call(sys.argv[1:], env=env))
