"""spccl for PyTorch: the ``spccl`` torch.distributed backend, a DCT communication
hook for DDP (``spccl_torch.hooks.dct_hook``) and a compressed embedding exchange
(``spccl_torch.alltoall_rows``).

``import spccl_torch`` registers the backend; ``init_process_group("spccl")``
also finds it without the import, through the ``torch.distributed.backends``
entry point. Launch with mpirun: ranks come from MPI and are checked against
torch's.
"""
import atexit

import torch
import torch.distributed as dist

from . import _C

__all__ = ["alltoall_rows", "backend_of", "get_stats", "hooks"]

# Process group name -> the spccl backend made for it (for the hook, the op
# and the statistics).
_backends = {}


def _create_backend(opts, backend_options):
    # The group's timeout (init_process_group / new_group): an operation that has
    # not completed within it fails, and the group is unusable after that.
    timeout_ms = int(opts.timeout.total_seconds() * 1000) if opts.timeout is not None else 0
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


def get_stats(group=None):
    """Counters of the spccl calls made on ``group``'s communicator: calls,
    compressed_calls, bytes_sent and dense_bytes (what the dense collective sends,
    nccl-tests' bus convention), ... Exact operations that go straight to MPI are
    not counted; the environment opt-in's calls and alltoall_rows are."""
    return backend_of(group).comm_stats()


def _shutdown():
    # mpirun expects MPI_Finalize; the groups' threads must stop first.
    _C.shutdown_all()


_register_backend()
atexit.register(_shutdown)

from . import hooks  # noqa: E402
from .ops import alltoall_rows  # noqa: E402
