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


class _Bucket:
    """One bucket layout (its parameters, in the buffer's order) and its compressor."""

    def __init__(self, params, numel, comp):
        self.params = params
        self.key = tuple(id(p) for p in params)
        self.sizes = [p.numel() for p in params]
        self.numel = numel
        self.comp = comp


class DCTState:
    """Settings and per-bucket state of :func:`dct_hook`.

    density: fraction of a bucket's entries sent per step, (0, 1].
    threshold_interval: re-estimate the threshold tau every this many steps.
    wire_dtype: value type on the wire: "fp32", "fp16", "bf16" or "fp8"
        (rounding error goes back to the residual).
    start_iter: steps allreduced exactly before compression starts (default 0:
        compressed from the first step). Compressors are keyed by bucket index and
        the bucket's parameters: when DDP rebuilds its buckets after the first step,
        the residuals of the old layout are split by parameter and enter the new
        buckets' next gradients, so no gradient entry is lost.
    """

    def __init__(self, process_group=None, density=0.01, threshold_interval=1000, wire_dtype="fp32", start_iter=0):
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
        if threshold_interval < 1:
            raise ValueError(f"threshold_interval must be >= 1, got {threshold_interval}")
        if wire_dtype not in _WIRE:
            raise ValueError(f"wire_dtype must be one of fp32, fp16, bf16, fp8, got {wire_dtype!r}")
        if int(start_iter) < 0:
            raise ValueError(f"start_iter must be >= 0, got {start_iter}")
        self.process_group = process_group
        self.density = float(density)
        self.threshold_interval = int(threshold_interval)
        self.wire_dtype = wire_dtype
        self.start_iter = int(start_iter)
        self.iter = 0
        self._compressors = {}  # bucket index -> _Bucket
        self._pending_residual = {}  # bucket index -> residual from a checkpoint saved by bucket index
        # id(parameter) -> (parameter, residual) of a replaced layout or from a checkpoint
        self._param_residual = {}
        self._exact = dict.fromkeys(_COUNTERS, 0)  # exact warm-up steps (straight to MPI)
        self._retired = dict.fromkeys(_COUNTERS, 0)  # compressors of replaced layouts, earlier runs

    def _group(self):
        return self.process_group if self.process_group is not None else dist.distributed_c10d._get_default_group()

    def _retire(self, index):
        """Drops bucket index's compressor, keeping its counts and, split by
        parameter, its residual for the buckets that hold those parameters next."""
        b = self._compressors.pop(index)
        s = b.comp.stats()
        for k in _COUNTERS:
            self._retired[k] += s[k]
        if sum(b.sizes) != b.numel:
            warnings.warn(f"spccl dct_hook: bucket {index}'s parameters do not tile its buffer; "
                          "its residual is dropped")
            return
        for p, r in zip(b.params, b.comp.residual(b.numel).split(b.sizes)):
            prev = self._param_residual.get(id(p))
            self._param_residual[id(p)] = (p, r if prev is None else prev[1] + r)

    def _bucket(self, index, bucket, numel):
        """The compressor of this bucket, and the residual its first call must add
        (None when there is none): a new layout (the first compressed step, DDP's
        rebuild) takes over the residuals of the layouts it replaces."""
        from . import backend_of

        params = bucket.parameters()
        key = tuple(id(p) for p in params)
        entry = self._compressors.get(index)
        if entry is not None and entry.key == key and entry.numel == numel:
            return entry.comp, None
        mine = set(key)
        for j in [j for j, b in self._compressors.items() if j == index or mine.intersection(b.key)]:
            self._retire(j)
        comp = _C.Compressor(backend_of(self._group()), self.density, self.threshold_interval, _WIRE[self.wire_dtype])
        b = _Bucket(params, numel, comp)
        self._compressors[index] = b
        carried = None
        if sum(b.sizes) == numel and any(k in self._param_residual for k in key):
            carried = torch.cat([self._param_residual.pop(id(p), (p, torch.zeros(p.numel())))[1].reshape(-1)
                                 for p in params])
        loaded = self._pending_residual.pop(index, None)
        if loaded is not None:
            if loaded.numel() == numel:
                loaded = loaded.reshape(-1)
                carried = loaded if carried is None else carried + loaded
            else:
                warnings.warn(f"spccl dct_hook: checkpointed residual of bucket {index} has another size; dropped")
        return comp, carried

    def stats(self):
        """Totals over the buckets: calls, compressed_calls, bytes_sent (this rank,
        per receiving rank, as spccl counts them) and dense_bytes (what the dense
        allreduce sends: 2(P-1)/P * bytes), exact warm-up steps included; and
        exact_calls and exact_bytes, the warm-up steps' share (sent by MPI, not
        counted by the communicator)."""
        total = {k: self._exact[k] + self._retired[k] for k in _COUNTERS}
        for b in self._compressors.values():
            s = b.comp.stats()
            for k in _COUNTERS:
                total[k] += s[k]
        total["exact_calls"] = self._exact["calls"]
        total["exact_bytes"] = self._exact["bytes_sent"]
        return total

    def parameter_residuals(self):
        """{parameter: its error-feedback residual (fp32, flat)}: what this rank has
        not sent yet, by parameter, over every bucket."""
        out = {}
        for b in self._compressors.values():
            if sum(b.sizes) == b.numel:
                for p, r in zip(b.params, b.comp.residual(b.numel).split(b.sizes)):
                    out[p] = r
        for p, r in self._param_residual.values():
            out[p] = out[p] + r if p in out else r
        return out

    def state_dict(self, module=None):
        """Settings, step count, counters and the error-feedback residual of each
        parameter, keyed by the parameter's index in ``module.parameters()``: pass
        the DDP model (or the module it wraps), needed once there are residuals.
        The keys do not depend on DDP's bucket layout, which a fresh DDP does not
        share with one that has rebuilt its buckets."""
        residuals = self.parameter_residuals()
        by_index = {}
        if residuals:
            if module is None:
                raise ValueError("DCTState.state_dict(module): pass the DDP model; residuals are saved by the "
                                 "parameter's index in module.parameters()")
            index = {id(p): i for i, p in enumerate(module.parameters())}
            for p, r in residuals.items():
                if id(p) not in index:
                    raise ValueError(f"DCTState.state_dict: a parameter of shape {tuple(p.shape)} with a residual "
                                     "is not in the module given")
                by_index[index[id(p)]] = r.clone()
        sd = {
            "density": self.density,
            "threshold_interval": self.threshold_interval,
            "wire_dtype": self.wire_dtype if isinstance(self.wire_dtype, str) else str(self.wire_dtype),
            "start_iter": self.start_iter,
            "iter": self.iter,
            "stats": self.stats(),
            "parameter_residuals": by_index,
        }
        if self._pending_residual:  # loaded by bucket index and not used yet: kept as they came
            sd["residuals"] = {i: r.clone() for i, r in self._pending_residual.items()}
        return sd

    def load_state_dict(self, sd, module=None):
        """Restores a :meth:`state_dict` into a fresh state, with ``module`` the DDP
        model the state is used with (its parameters in the order of the saving
        run's). Each parameter's residual is added to its entries of the next
        gradient of whichever bucket holds it, which is what the compressor would
        have done with it; the threshold is re-estimated at that first call.
        A checkpoint keyed by bucket index (a "residuals" entry) is added to the
        bucket of that index, right only where the saving run's bucket layout
        equals this one's (only the size is checked)."""
        self.density = float(sd["density"])
        self.threshold_interval = int(sd["threshold_interval"])
        wire = sd["wire_dtype"]
        self.wire_dtype = {"torch.float32": torch.float32, "torch.float16": torch.float16,
                           "torch.bfloat16": torch.bfloat16}.get(wire, wire)
        self.start_iter = int(sd["start_iter"])
        self.iter = int(sd["iter"])
        self._compressors = {}
        self._param_residual = {}
        by_index = sd.get("parameter_residuals", {})
        if by_index:
            if module is None:
                raise ValueError("DCTState.load_state_dict(sd, module): pass the DDP model; residuals are keyed "
                                 "by the parameter's index in module.parameters()")
            params = list(module.parameters())
            for i, r in by_index.items():
                i = int(i)
                if not 0 <= i < len(params) or params[i].numel() != r.numel():
                    have = f"{params[i].numel()} entries" if 0 <= i < len(params) else "no such parameter"
                    raise ValueError(f"DCTState.load_state_dict: the residual of parameter {i} has {r.numel()} "
                                     f"entries, the module has {have}: not the model the state was saved with")
                p = params[i]
                self._param_residual[id(p)] = (p, r.detach().to(torch.float32).reshape(-1).clone())
        self._pending_residual = {int(i): r.clone() for i, r in sd.get("residuals", {}).items()}
        st = sd["stats"]
        self._exact = {"calls": int(st.get("exact_calls", 0)), "compressed_calls": 0,
                       "bytes_sent": int(st.get("exact_bytes", 0)), "dense_bytes": int(st.get("exact_bytes", 0))}
        self._retired = {k: int(st[k]) - self._exact[k] for k in _COUNTERS}


def dct_hook(state: DCTState, bucket):
    """Sums the bucket's gradients over the group with spccl's compressed allreduce
    (error feedback on) and divides by the world size, like torch's allreduce hook."""
    group = state._group()
    world = group.size()
    buf = bucket.buffer()
    index = bucket.index()
    step = state.iter
    if bucket.is_last():
        state.iter += 1
    if step < state.start_iter:
        dense = 2 * (world - 1) * buf.numel() * buf.element_size() // world
        for k, v in (("calls", 1), ("bytes_sent", dense), ("dense_bytes", dense)):
            state._exact[k] += v
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0].div_(world))
    comp, carried = state._bucket(index, bucket, buf.numel())
    if carried is not None:
        buf.add_(carried.to(device=buf.device, dtype=buf.dtype).view_as(buf))
    fut = comp.allreduce(buf, False).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))
