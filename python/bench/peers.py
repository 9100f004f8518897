"""spccl's DCT hook next to torch's own DDP communication hooks, in one run.

Launch: mpirun -np N python python/bench/peers.py [--steps 300] [--width 512] [--link NAME]
(on emulated links: perf/netem/run.sh ... -- python python/bench/peers.py --link "1 Gbit/s",
docs/TORCH.md)

The same model, data and optimizer under DDP with: gloo dense (torch's allreduce_hook), torch's
fp16_compress_hook and bf16_compress_hook, PowerSGD at rank 1 and 4 (all over a gloo
group), and spccl_torch's dct_hook at density 0.01 and 0.001 (spccl group). Prints,
per configuration, bytes per step per rank, mean step time and the held-out loss.

Bytes: for the torch hooks, every dist.all_reduce they make is counted with the bus
convention spccl's counters use for the dense allreduce, 2(P-1)/P * bytes; for
dct_hook, spccl's own counters (bytes this rank put on the wire, headers included).
Step time is measured on whatever carries the ranks' traffic: --link names it in the
table (loopback by default; perf/netem's shaped links carry gloo's and MPI's TCP alike).
"""
import argparse
import os
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import spccl_torch  # noqa: E402
from spccl_torch.hooks import DCTState, dct_hook  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=300)
p.add_argument("--width", type=int, default=512)
p.add_argument("--link", default="loopback", help="what carries the traffic, for the table's header")
args = p.parse_args()

RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
WORLD = int(os.environ["OMPI_COMM_WORLD_SIZE"])
JOB = os.environ.get("OMPI_MCA_ess_base_jobid", "0")
store = f"/tmp/spccl_torch_peers_{JOB}"
dist.init_process_group("spccl", init_method=f"file://{store}", rank=RANK, world_size=WORLD)
gloo = dist.new_group(backend="gloo")
torch.set_num_threads(1)

# One bucket for the whole model, the same for every configuration. (With two
# buckets, PowerSGD over gloo hung here: two buckets' callbacks blocked in gloo
# allreduces on two threads at once.)
BUCKET_MB = 256

counted = {"bytes": 0}
_all_reduce = dist.all_reduce


def counting_all_reduce(tensor, *a, **kw):
    counted["bytes"] += 2 * (WORLD - 1) * tensor.numel() * tensor.element_size() // WORLD
    return _all_reduce(tensor, *a, **kw)


def mlp(seed, width, d_in=64):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(d_in, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))


def batches(steps, seed, batch=64, d_in=64):
    teacher = mlp(1234, 32, d_in)
    g = torch.Generator().manual_seed(seed * 1000 + RANK)
    out = []
    with torch.no_grad():
        for _ in range(steps):
            x = torch.randn(batch, d_in, generator=g)
            out.append((x, teacher(x)))
    return out


train_data = batches(args.steps, 11)
held_out = batches(16, 99)


def run(name, setup):
    model = mlp(7, args.width)
    ddp, bytes_fn = setup(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    counted["bytes"] = 0
    dist.all_reduce = counting_all_reduce
    dist.barrier(group=gloo)
    t0 = time.perf_counter()
    for x, y in train_data:
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    elapsed = time.perf_counter() - t0
    dist.all_reduce = _all_reduce
    with torch.no_grad():
        loss = sum(nn.functional.mse_loss(ddp(x), y) for x, y in held_out).reshape(1) / len(held_out)
    dist.all_reduce(loss, group=gloo)
    per_step = bytes_fn() / args.steps
    if RANK == 0 and os.environ.get("PEERS_VERBOSE"):
        print(f"done: {name} in {elapsed:.1f} s", flush=True)
    return name, per_step, 1000 * elapsed / args.steps, loss.item() / WORLD


def hook(h):
    def setup(model):
        ddp = DDP(model, process_group=gloo, bucket_cap_mb=BUCKET_MB)
        ddp.register_comm_hook(gloo, h)
        return ddp, lambda: counted["bytes"]
    return setup


def powersgd(rank):
    def setup(model):
        ddp = DDP(model, process_group=gloo, bucket_cap_mb=BUCKET_MB)
        state = psgd.PowerSGDState(process_group=gloo, matrix_approximation_rank=rank, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        return ddp, lambda: counted["bytes"]
    return setup


def dct(density):
    def setup(model):
        ddp = DDP(model, bucket_cap_mb=BUCKET_MB)
        # One exact first step (PowerSGD above: two): the configuration docs/TORCH.md's tables measured
        state = DCTState(density=density, threshold_interval=100, start_iter=1)
        ddp.register_comm_hook(state, dct_hook)
        return ddp, lambda: state.stats()["bytes_sent"]
    return setup


rows = [
    run("gloo dense (allreduce_hook)", hook(default_hooks.allreduce_hook)),
    run("fp16_compress_hook", hook(default_hooks.fp16_compress_hook)),
    run("bf16_compress_hook", hook(default_hooks.bf16_compress_hook)),
    run("PowerSGD rank 1", powersgd(1)),
    run("PowerSGD rank 4", powersgd(4)),
    run("spccl dct_hook density 0.01", dct(0.01)),
    run("spccl dct_hook density 0.001", dct(0.001)),
]
if RANK == 0:
    nparams = sum(p.numel() for p in mlp(7, args.width).parameters())
    dense = rows[0][1]
    print(f"{WORLD} ranks, MLP of {nparams} parameters, {args.steps} steps, batch 64 per rank\n")
    print(f"| hook | bytes/step/rank | vs dense | step time (ms, {args.link}) | held-out loss |")
    print("|---|---|---|---|---|")
    for name, b, ms, loss in rows:
        print(f"| {name} | {b:,.0f} | {dense / max(b, 1):.1f}x fewer | {ms:.1f} | {loss:.5f} |")
dist.destroy_process_group()
