"""A training script that picks its torch.distributed backend by name, as DLRM-style
scripts do, and knows nothing about spccl: it does not import spccl_torch, so with
--backend spccl torch finds the backend through the package's entry point.

Hybrid parallel: one embedding table per rank (model parallel), embedding rows
exchanged with an async all_to_all_single with per-rank batch sizes (forward and,
in autograd, backward), a bottom and a top MLP wrapped in DDP, all_gather and
barrier at evaluation. Launch: mpirun -np N python train_by_name.py --backend spccl,
or torchrun --standalone --nproc-per-node N train_by_name.py --backend spccl
"""
import argparse
import os
import sys
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--backend", default="gloo")
p.add_argument("--steps", type=int, default=60)
args = p.parse_args()

if "OMPI_COMM_WORLD_RANK" in os.environ:  # mpirun; torchrun sets all four itself
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # A MASTER_PORT from the environment wins (ctest passes a free one: isolated.py);
    # by hand, a port from the mpirun job id.
    job = int(os.environ.get("OMPI_MCA_ess_base_jobid", "0"))
    os.environ.setdefault("MASTER_PORT", str(20000 + (job + 7) % 20000))
dist.init_process_group(backend=args.backend)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
torch.set_num_threads(1)

ROWS, DIM, DENSE_IN = 50, 8, 16
BATCH = [6 + 2 * r for r in range(world)]  # every rank its own batch size
GLOBAL = sum(BATCH)
START = sum(BATCH[:rank])


class Exchange(torch.autograd.Function):
    """Rows for rank j's samples go to rank j; gradients come back the same way."""

    @staticmethod
    def forward(ctx, emb):
        out = emb.new_empty(world * BATCH[rank], DIM)
        work = dist.all_to_all_single(out, emb.contiguous(), [BATCH[rank]] * world, BATCH, async_op=True)
        work.wait()
        return out

    @staticmethod
    def backward(ctx, grad):
        back = grad.new_empty(GLOBAL, DIM)
        work = dist.all_to_all_single(back, grad.contiguous(), BATCH, [BATCH[rank]] * world, async_op=True)
        work.wait()
        return back


def make_batch(step):
    """Every rank draws the same global batch; the sparse id of table t for every
    sample, and the dense features and labels of its own samples."""
    g = torch.Generator().manual_seed(1000 + step)
    ids = torch.randint(0, ROWS, (GLOBAL, world), generator=g)
    dense = torch.randn(GLOBAL, DENSE_IN, generator=g)
    # Planted teacher: the label depends on the ids and the dense features.
    score = ((ids % 7).float() - 3).sum(dim=1) / world + dense[:, 0] - dense[:, 1]
    labels = (score > 0).float()
    mine = slice(START, START + BATCH[rank])
    return ids[:, rank], dense[mine], labels[mine]


table = nn.Embedding(ROWS, DIM)  # this rank's table, model parallel
bottom = DDP(nn.Sequential(nn.Linear(DENSE_IN, 16), nn.ReLU(), nn.Linear(16, DIM)))
top = DDP(nn.Sequential(nn.Linear(DIM * (world + 1), 32), nn.ReLU(), nn.Linear(32, 1)))
params = list(table.parameters()) + list(bottom.parameters()) + list(top.parameters())
opt = torch.optim.Adam(params, lr=0.02)


def forward(step):
    ids, dense, labels = make_batch(step)
    emb = Exchange.apply(table(ids))  # [world * my batch, DIM], block j from table j
    emb = emb.view(world, BATCH[rank], DIM).transpose(0, 1).reshape(BATCH[rank], world * DIM)
    logits = top(torch.cat([bottom(dense), emb], dim=1)).squeeze(1)
    return logits, labels


losses = []
for step in range(args.steps):
    opt.zero_grad()
    logits, labels = forward(step)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
    loss.backward()
    opt.step()
    losses.append(loss.item())

# Evaluation: every rank's correct count gathered, then a barrier.
with torch.no_grad():
    correct = torch.zeros(1)
    for step in range(10_000, 10_010):
        logits, labels = forward(step)
        correct += ((logits > 0).float() == labels).sum()
    counts = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(counts, correct)
    dist.barrier()
accuracy = sum(c.item() for c in counts) / (10 * GLOBAL)
first = sum(losses[:10]) / 10
last = sum(losses[-10:]) / 10
via_entry_point = "spccl_torch" in sys.modules
if rank == 0:
    print(f"backend {args.backend} on {world} ranks: loss {first:.3f} -> {last:.3f}, held-out accuracy {accuracy:.3f}"
          + (f", spccl_torch loaded by torch: {via_entry_point}" if args.backend == "spccl" else ""), flush=True)
ok = last < first and accuracy > 0.7 and (args.backend != "spccl" or via_entry_point)
dist.destroy_process_group()
sys.exit(0 if ok else 1)
