"""Under torchrun (no mpirun) spccl's MPI world is made from the default
group's ranks, so a spccl subgroup under a gloo default group must fail with
the error that says so, on every rank, and leave the gloo group usable.
Launch: torchrun --standalone --nproc-per-node N torchrun_subgroup.py
"""
import sys
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
ok = 0
try:
    dist.new_group(backend="spccl")
except RuntimeError as err:
    ok = int("the default process group must use the spccl backend" in str(err))
flag = torch.tensor([ok])
dist.all_reduce(flag, op=dist.ReduceOp.MIN)
if rank == 0:
    print(f"spccl subgroup under a gloo default group on {world} ranks: "
          f"{'refused with its message' if flag.item() else 'NOT refused as documented'}", flush=True)
dist.destroy_process_group()
sys.exit(0 if flag.item() else 1)
