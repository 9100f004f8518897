"""spccl for PyTorch: the ``spccl`` torch.distributed backend, a DCT communication
hook for DDP (``spccl_torch.hooks.dct_hook``) and a compressed embedding exchange
(``spccl_torch.alltoall_rows``).

``import spccl_torch`` registers the backend; ``init_process_group("spccl")``
also finds it without the import, through the ``torch.distributed.backends``
entry point. Launch with mpirun (ranks come from MPI and are checked against
torch's) or with torchrun (the processes join through Open MPI's ompi-server:
_join_world).
"""
import atexit
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

import torch
import torch.distributed as dist

from . import _C

__all__ = ["allreduce_rowsparse", "alltoall_rows", "backend_of", "cuda_built", "get_stats", "hooks"]

# Process group name -> the spccl backend made for it (for the hook, the op
# and the statistics).
_backends = {}


_joined = False  # the MPI world exists (mpirun, or _join_world)
# Rank 0's ompi-server (torchrun launch) and its folder, stopped at exit.
_ompi_server = None


def _die_with_parent():
    # A rank 0 killed before its exit handler runs must not leave the server behind.
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start_ompi_server(timeout_s):
    """Starts Open MPI's rendezvous server and returns its address."""
    global _ompi_server
    exe = shutil.which("ompi-server")
    if exe is None:
        raise RuntimeError("spccl: launched without mpirun, so the ranks meet through Open MPI's ompi-server, "
                           "which is not on PATH (Debian: apt-get install openmpi-bin)")
    folder = tempfile.mkdtemp(prefix="spccl-ompi-server-")
    uri_file = os.path.join(folder, "uri")
    with open(os.path.join(folder, "log"), "w") as log:  # the server keeps its own descriptor
        proc = subprocess.Popen([exe, "--no-daemonize", "-r", uri_file], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    _ompi_server = (proc, folder)
    deadline = time.monotonic() + timeout_s
    while True:
        if os.path.exists(uri_file):
            with open(uri_file) as f:
                uri = f.read().strip()
            if uri:
                return uri
        if proc.poll() is not None or time.monotonic() > deadline:
            with open(os.path.join(folder, "log")) as f:
                raise RuntimeError(f"spccl: ompi-server did not start: {f.read().strip()}")
        time.sleep(0.01)


def _join_world(store, rank, size, timeout_s):
    """Makes the MPI world of processes that torchrun (not mpirun) started.

    Each starts as an MPI singleton. Rank 0 starts an ompi-server (or uses the
    one OMPI_MCA_pmix_server_uri names) and opens an MPI port; both addresses
    reach the others through torch's store, and the others connect one at a
    time (Open MPI's accept fails now and then when several connects race),
    in rank order. Every rank must set the server's address before MPI starts.
    """
    uri = os.environ.get("OMPI_MCA_pmix_server_uri")
    if uri is None:
        if rank == 0:
            uri = _start_ompi_server(timeout_s)
            store.set("spccl/ompi_server", uri)
        else:
            uri = store.get("spccl/ompi_server").decode()
        os.environ["OMPI_MCA_pmix_server_uri"] = uri
    if rank == 0:
        store.set("spccl/port", _C.join_open_port())
    else:
        store.wait([f"spccl/turn/{rank}"])
        _C.join_connect(store.get("spccl/port").decode())
    for k in range(rank + 1, size):
        if rank == 0:
            store.set(f"spccl/turn/{k}", "1")
        _C.join_accept()
    _C.join_finish(rank, size)


def _create_backend(opts, backend_options):
    # The group's timeout (init_process_group / new_group): an operation that has
    # not completed within it fails, and the group is unusable after that.
    timeout_ms = int(opts.timeout.total_seconds() * 1000) if opts.timeout is not None else 0
    global _joined
    if not _joined and "OMPI_COMM_WORLD_SIZE" not in os.environ and opts.group_size > 1:
        if opts.global_ranks_in_group:
            raise RuntimeError("spccl: without mpirun, the default process group must use the spccl backend "
                               "(its ranks make spccl's MPI world)")
        _join_world(opts.store, opts.group_rank, opts.group_size, timeout_ms / 1000 if timeout_ms else 60)
    _joined = True
    # One backend per group for CPU and CUDA tensors alike (should torch ask
    # once per device type), so a group's operations keep one order and one
    # communicator, and a CPU tensor on one rank against a CUDA tensor on
    # another is an error, not two calls that wait for each other.
    backend = _backends.get(str(opts.group_id))
    if backend is None or backend.is_shut_down():
        backend = _C.create_backend(opts.group_rank, opts.group_size, list(opts.global_ranks_in_group),
                                    str(opts.group_id), timeout_ms)
        _backends[str(opts.group_id)] = backend
    return backend


def _register_backend():
    """Registers ``spccl`` with torch.distributed (idempotent); the entry point's target."""
    if "SPCCL" not in dist.Backend._plugins:
        dist.Backend.register_backend("spccl", _create_backend, extended_api=True, devices=["cpu", "cuda"])


def backend_of(group=None):
    """The spccl backend object of ``group`` (default: the world group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    try:
        return _backends[pg.group_name]
    except KeyError:
        raise RuntimeError(f"spccl_torch: process group {pg.group_name!r} does not use the spccl backend") from None


def cuda_built():
    """True when this build moves CUDA tensors (over NCCL): libspccl had its NCCL
    transport when the package was built."""
    return _C.cuda_built()


def get_stats(group=None):
    """Counters of the spccl calls made on ``group``'s communicator: calls,
    compressed_calls, bytes_sent and dense_bytes (what the dense collective sends,
    nccl-tests' bus convention), ... Exact operations that go straight to MPI or
    NCCL are not counted; the environment opt-in's calls, the DCT hook's,
    alltoall_rows and allreduce_rowsparse are (CPU and CUDA tensors together)."""
    return backend_of(group).comm_stats()


def _shutdown():
    # mpirun expects MPI_Finalize; the groups' threads must stop first.
    _C.shutdown_all()
    if _ompi_server is not None:
        proc, folder = _ompi_server
        proc.terminate()
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


_register_backend()
atexit.register(_shutdown)

from . import hooks  # noqa: E402
from .ops import allreduce_rowsparse, alltoall_rows  # noqa: E402
