"""The embedding-to-MLP exchange of DCT-MP as an autograd function."""
import torch
import torch.distributed as dist

from . import _C


class _AlltoallRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, density, group):
        from . import backend_of

        backend = backend_of(group)
        world = dist.get_world_size(group)
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        selection = _C.Selection()
        out = _C.alltoall_rows_forward(
            backend, rows, rows.shape[0] // world, rows.shape[1], float(density), selection
        )
        ctx.backend = backend
        ctx.selection = selection
        ctx.shape = x.shape
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        if ctx.selection is None:
            raise RuntimeError("spccl_torch.alltoall_rows: a selection serves one backward (retain_graph is not supported)")
        g = grad.reshape(-1, ctx.shape[-1]).contiguous()
        out = _C.alltoall_rows_backward(ctx.backend, g, ctx.selection)
        ctx.selection = None
        return out.view(ctx.shape), None, None


def alltoall_rows(x, density, group=None):
    """DCT-MP exchange: ``x`` holds ``world_size`` equal blocks of rows (block j
    goes to rank j; its last dimension is the row). Each row keeps its
    ``max(1, ceil(density * row_len))`` entries of largest magnitude; the result
    holds the blocks received, zeros at the dropped positions. The backward pass
    sends back the gradients of exactly the kept entries (zeros elsewhere).
    float32, float16 and bfloat16; CPU tensors, or CUDA tensors where
    :func:`spccl_torch.cuda_built` (spccl's NCCL communicator)."""
    return _AlltoallRows.apply(x, density, group)


def allreduce_rowsparse(ids, rows, group=None):
    """Row-sparse allreduce (``spcclAllReduceRowSparse``), for embedding
    gradients: each rank passes ``ids`` (int64, shape [n], any order, repeats
    allowed) and ``rows`` (shape [n, row_len]: float32, float64, float16 or
    bfloat16). Returns ``(ids, rows)`` on every rank, bit for bit the same: the
    sorted unique ids of the union over ranks, each with the sum of all its
    rows (summed in fp32, fp64 for float64, in rank order; duplicates merged
    first on each rank). ``n`` may differ between ranks, and be 0; row_len and
    dtype may not. CPU or CUDA tensors (as ``alltoall_rows``); a bad argument
    fails on every rank."""
    from . import backend_of

    return _C.allreduce_rowsparse(backend_of(group), ids.contiguous(), rows.contiguous())
