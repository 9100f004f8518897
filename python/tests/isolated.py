"""Runs a command with its own TCP port and its own scratch folder:

    isolated.py mpirun ... -x MASTER_PORT -x SPCCL_TORCH_TEST_DIR ... python script.py

MASTER_PORT is a port no other process holds, for scripts that rendezvous
through env:// (a TCPStore). The OS picks it (bind to port 0) and this process
keeps its socket bound, not listening, until the command ends: the kernel gives
a bound port to no other bind(0) or outgoing connection, so it stays free for
rank 0's store, which can still bind it because both sockets set SO_REUSEADDR
(torch's TCPStore does). A port derived from the mpirun job id collided when
several ctest runs shared the machine.

SPCCL_TORCH_TEST_DIR is a new empty folder (the file stores, checkpoints),
removed when the command ends. A folder named after the job id could hold a
store file left by an earlier job with the same id (Open MPI's ids repeat), whose
stale peer addresses made gloo's connect fail on one rank while the others
waited. The exit status is the command's.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

if len(sys.argv) < 2:
    sys.exit("usage: isolated.py COMMAND [ARG...]")
scratch = tempfile.mkdtemp(prefix="spccl_torch_test_")
try:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("", 0))
        env = dict(os.environ, MASTER_PORT=str(held.getsockname()[1]), SPCCL_TORCH_TEST_DIR=scratch)
        code = subprocess.call(sys.argv[1:], env=env)
finally:
    shutil.rmtree(scratch, ignore_errors=True)
sys.exit(code)
