"""DDP communication hook: DCT-DP, a thresholded compressed allreduce with error
feedback, one spccl compressor per gradient bucket.

    state = spccl_torch.hooks.DCTState(density=0.01)
    ddp_model.register_comm_hook(state, spccl_torch.hooks.dct_hook)

The process group must use the spccl backend.
"""
import warnings

import torch
import torch.distributed as dist

from . import _C

_WIRE = {
    "fp32": _C.SPCCL_FLOAT32,
    "fp16": _C.SPCCL_FLOAT16,
    "bf16": _C.SPCCL_BFLOAT16,
    "fp8": _C.SPCCL_FLOAT8E4M3,
    torch.float32: _C.SPCCL_FLOAT32,
    torch.float16: _C.SPCCL_FLOAT16,
    torch.bfloat16: _C.SPCCL_BFLOAT16,
}

_COUNTERS = ("calls", "compressed_calls", "bytes_sent", "dense_bytes")


class DCTState:
    """Settings and per-bucket state of :func:`dct_hook`.

    density: fraction of a bucket's entries sent per step, (0, 1].
    threshold_interval: re-estimate the threshold tau every this many steps.
    wire_dtype: value type on the wire: "fp32", "fp16", "bf16" or "fp8"
        (rounding error goes back to the residual).
    start_iter: steps allreduced exactly before compression starts. DDP rebuilds
        its buckets after the first step, so compressors (keyed by bucket index)
        are created from step ``start_iter`` (at least 1) on.
    """

    def __init__(self, process_group=None, density=0.01, threshold_interval=1000, wire_dtype="fp32", start_iter=1):
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        if threshold_interval < 1:
            raise ValueError(f"threshold_interval must be >= 1, got {threshold_interval}")
        if wire_dtype not in _WIRE:
            raise ValueError(f"wire_dtype must be one of fp32, fp16, bf16, fp8, got {wire_dtype!r}")
        self.process_group = process_group
        self.density = float(density)
        self.threshold_interval = int(threshold_interval)
        self.wire_dtype = wire_dtype
        self.start_iter = max(1, int(start_iter))
        self.iter = 0
        self._compressors = {}  # bucket index -> (numel, _C.Compressor)
        self._pending_residual = {}  # bucket index -> residual loaded from a checkpoint
        self._dense = dict.fromkeys(_COUNTERS, 0)  # exact warm-up steps and earlier runs

    def _group(self):
        return self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()

    def _compressor(self, index, numel):
        from . import backend_of

        entry = self._compressors.get(index)
        if entry is not None and entry[0] == numel:
            return entry[1]
        if entry is not None:
            warnings.warn(f"spccl dct_hook: bucket {index} changed size ({entry[0]} -> {numel}); its residual is dropped")
            self._keep_counts(entry[1])
        comp = _C.Compressor(backend_of(self._group()), self.density, self.threshold_interval, _WIRE[self.wire_dtype])
        self._compressors[index] = (numel, comp)
        return comp

    def _keep_counts(self, comp):
        s = comp.stats()
        for k in _COUNTERS:
            self._dense[k] += s[k]

    def stats(self):
        """Totals over the buckets: calls, compressed_calls, bytes_sent (this rank,
        per receiving rank, as spccl counts them) and dense_bytes (what the dense
        allreduce sends: 2(P-1)/P * bytes), exact warm-up steps included."""
        total = dict(self._dense)
        for _, comp in self._compressors.values():
            s = comp.stats()
            for k in _COUNTERS:
                total[k] += s[k]
        return total

    def state_dict(self):
        """Settings, step count, counters and each bucket's error-feedback residual."""
        residuals = {i: comp.residual(n) for i, (n, comp) in self._compressors.items()}
        residuals.update({i: r for i, r in self._pending_residual.items() if i not in residuals})
        return {
            "density": self.density,
            "threshold_interval": self.threshold_interval,
            "wire_dtype": self.wire_dtype if isinstance(self.wire_dtype, str) else str(self.wire_dtype),
            "start_iter": self.start_iter,
            "iter": self.iter,
            "stats": self.stats(),
            "residuals": residuals,
        }

    def load_state_dict(self, sd):
        """Restores a :meth:`state_dict`. The residuals are added to each bucket's
        next gradient, which is what the compressor would have done with them; the
        threshold is re-estimated at that first call."""
        self.density = float(sd["density"])
        self.threshold_interval = int(sd["threshold_interval"])
        wire = sd["wire_dtype"]
        self.wire_dtype = {"torch.float32": torch.float32, "torch.float16": torch.float16,
                           "torch.bfloat16": torch.bfloat16}.get(wire, wire)
        self.start_iter = int(sd["start_iter"])
        self.iter = int(sd["iter"])
        self._compressors = {}
        self._pending_residual = {int(i): r.clone() for i, r in sd["residuals"].items()}
        self._dense = {k: int(sd["stats"][k]) for k in _COUNTERS}


def dct_hook(state: DCTState, bucket):
    """Sums the bucket's gradients over the group with spccl's compressed allreduce
    (error feedback on) and divides by the world size, like torch's allreduce hook."""
    group = state._group()
    world = group.size()
    buf = bucket.buffer()
    index = bucket.index()
    # Steps before start_iter are exact (DDP rebuilds its buckets after step 0).
    step = state.iter
    if bucket.is_last():
        state.iter += 1
    if step < state.start_iter:
        dense = 2 * (world - 1) * buf.numel() * buf.element_size() // world
        state._dense["calls"] += 1
        state._dense["bytes_sent"] += dense
        state._dense["dense_bytes"] += dense
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))
    comp = state._compressor(index, buf.numel())
    residual = state._pending_residual.pop(index, None)
    if residual is not None:
        if residual.numel() == buf.numel():
            buf.add_(residual.to(buf.dtype).view_as(buf))
        else:
            warnings.warn(f"spccl dct_hook: checkpointed residual of bucket {index} has another size; dropped")
    fut = comp.allreduce(buf, False).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))
