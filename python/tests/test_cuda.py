"""CUDA tensors through the spccl backend (NCCL underneath) against the same
operations on CPU copies of the same inputs (the CPU path, which test_ops.py
checks against gloo). Rank r uses cuda:r; NCCL allows one rank per device, so
with fewer devices than ranks, or a build without the NCCL transport, every
rank prints that the tests are skipped and exits 0 (ctest marks it skipped).
Run under mpirun."""
import datetime
import sys

import harness
from harness import RANK, WORLD, expect_error

import torch
import torch.distributed as dist

import spccl_torch

if torch.cuda.device_count() < WORLD or not spccl_torch.cuda_built():
    why = "no NCCL transport in this build" if not spccl_torch.cuda_built() else \
        f"{torch.cuda.device_count()} CUDA devices for {WORLD} ranks"
    print(f"[rank {RANK}] spccl_torch CUDA tests skipped: {why}", flush=True)
    sys.exit(0)

R = dist.ReduceOp
DEV = torch.device("cuda", RANK)
torch.cuda.set_device(DEV)
# A NCCL call that never matches fails the group within 2 minutes, not at ctest's 600 s.
gloo = harness.init_spccl_and_gloo("cuda", timeout=datetime.timedelta(seconds=120))
C = harness.Checks(gloo)


def data(dtype, n, seed=0):
    g = torch.Generator().manual_seed(7919 * seed + RANK)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    return torch.randint(1, 4, (n,), generator=g).to(dtype)


def same(gpu, cpu):
    gpu = gpu.cpu()
    if cpu.dtype.is_floating_point:
        assert torch.allclose(gpu.double(), cpu.double(), rtol=1e-2, atol=1e-2), (gpu, cpu)
    else:
        assert torch.equal(gpu, cpu), (gpu, cpu)


def t_all_reduce(dtype, op):
    x = data(dtype, 1001)
    g, c = x.to(DEV), x.clone()
    dist.all_reduce(g, op=op)
    dist.all_reduce(c, op=op)
    same(g, c)


# NCCL's types and ops, and what goes through the host (int16, bool, bitwise ops).
for dt, ops in ((torch.float32, [R.SUM, R.AVG, R.MAX]), (torch.float16, [R.SUM, R.MIN]),
                (torch.bfloat16, [R.SUM]), (torch.int64, [R.SUM, R.PRODUCT, R.BOR]), (torch.int8, [R.MAX]),
                (torch.uint8, [R.SUM]),
                (torch.int16, [R.SUM, R.BXOR]), (torch.bool, [R.SUM, R.MIN])):
    for op in ops:
        C.run(f"cuda all_reduce {dt} {op}", t_all_reduce, dt, op)


def t_async_stream_order():
    # The input is written on a side stream right before the call: the
    # collective must wait for it, and the result must be there after wait().
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.zeros(1 << 20, device=DEV)
        torch.cuda._sleep(200_000_000)  # keeps s busy well past the call, so only the wait orders them
        x.fill_(float(RANK + 1))
        work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    work.wait()
    assert x[0].item() == WORLD * (WORLD + 1) / 2
    y = torch.ones(10, device=DEV)
    doubled = dist.all_reduce(y, async_op=True).get_future().then(lambda f: f.value()[0] * 2).wait()
    assert torch.equal(doubled.cpu(), torch.full((10,), 2.0 * WORLD))
    assert fut.done()


C.run("cuda async work, stream order, futures", t_async_stream_order)


def t_coalesced():
    ts = [data(torch.float32, n, seed=n) for n in (3, 17, 64)]
    g = [t.to(DEV) for t in ts]
    dist.all_reduce_coalesced(g)
    dist.all_reduce_coalesced(ts)
    for a, b in zip(g, ts):
        same(a, b)


def t_broadcast_reduce(root):
    x = data(torch.float32, 29, seed=3)
    g, c = x.to(DEV), x.clone()
    dist.broadcast(g, src=root)
    dist.broadcast(c, src=root)
    same(g, c)
    z = data(torch.float32, 13, seed=4)
    g, c = z.to(DEV), z.clone()
    dist.reduce(g, dst=root, op=R.SUM)
    dist.reduce(c, dst=root, op=R.SUM)
    if RANK == root:
        same(g, c)
    for op in (R.MAX, R.BAND):
        y = data(torch.int32, 11)
        g, c = y.to(DEV), y.clone()
        dist.reduce(g, dst=root, op=op)
        dist.reduce(c, dst=root, op=op)
        if RANK == root:
            same(g, c)


def t_all_gather():
    # Uneven sizes through the list form.
    x = data(torch.float32, 5 + RANK)
    g = [torch.empty(5 + j, device=DEV) for j in range(WORLD)]
    c = [torch.empty(5 + j) for j in range(WORLD)]
    dist.all_gather(g, x.to(DEV))
    dist.all_gather(c, x)
    for a, b in zip(g, c):
        same(a, b)
    y = data(torch.int64, 7)
    go, co = torch.empty(7 * WORLD, dtype=torch.int64, device=DEV), torch.empty(7 * WORLD, dtype=torch.int64)
    dist.all_gather_into_tensor(go, y.to(DEV))
    dist.all_gather_into_tensor(co, y)
    same(go, co)
    # In place: the input is this rank's slice of the output.
    gi = torch.zeros(7 * WORLD, dtype=torch.int64, device=DEV)
    gi[7 * RANK:7 * (RANK + 1)] = y.to(DEV)
    dist.all_gather_into_tensor(gi, gi[7 * RANK:7 * (RANK + 1)])
    same(gi, co)


def t_reduce_scatter():
    for op in (R.SUM, R.BOR):
        x = data(torch.int32, 6 * WORLD)
        go, co = torch.empty(6, dtype=torch.int32, device=DEV), torch.empty(6, dtype=torch.int32)
        dist.reduce_scatter_tensor(go, x.to(DEV), op=op)
        dist.reduce_scatter_tensor(co, x, op=op)
        same(go, co)
        # In place: the output is this rank's slice of the input.
        gx = x.to(DEV)
        dist.reduce_scatter_tensor(gx[6 * RANK:6 * (RANK + 1)], gx, op=op)
        same(gx[6 * RANK:6 * (RANK + 1)], co)


def t_all_to_all():
    send = [j + 1 for j in range(WORLD)]  # rank r sends j+1 rows to rank j
    recv = [RANK + 1] * WORLD
    x = data(torch.float32, sum(send) * 3).view(-1, 3)
    go, co = torch.empty(sum(recv), 3, device=DEV), torch.empty(sum(recv), 3)
    dist.all_to_all_single(go, x.to(DEV), recv, send)
    dist.all_to_all_single(co, x, recv, send)
    same(go, co)
    ins = [data(torch.int64, 4, seed=j) for j in range(WORLD)]
    g = [torch.empty(4, dtype=torch.int64, device=DEV) for _ in range(WORLD)]
    c = [torch.empty(4, dtype=torch.int64) for _ in range(WORLD)]
    dist.all_to_all(g, [t.to(DEV) for t in ins])
    dist.all_to_all(c, ins)
    for a, b in zip(g, c):
        same(a, b)


def t_gather_scatter(root):
    x = data(torch.float32, 9)
    g = [torch.empty(9, device=DEV) for _ in range(WORLD)] if RANK == root else None
    c = [torch.empty(9) for _ in range(WORLD)] if RANK == root else None
    dist.gather(x.to(DEV), g, dst=root)
    dist.gather(x, c, dst=root)
    if RANK == root:
        for a, b in zip(g, c):
            same(a, b)
    parts = [data(torch.float32, 4, seed=j) for j in range(WORLD)]
    go, co = torch.empty(4, device=DEV), torch.empty(4)
    dist.scatter(go, [p.to(DEV) for p in parts] if RANK == root else None, src=root)
    dist.scatter(co, parts if RANK == root else None, src=root)
    same(go, co)
    dist.barrier()


C.run("cuda all_reduce_coalesced", t_coalesced)
for root in range(WORLD):
    C.run(f"cuda broadcast and reduce root {root}", t_broadcast_reduce, root)
    C.run(f"cuda gather and scatter root {root}", t_gather_scatter, root)
C.run("cuda all_gather (uneven) and all_gather_into_tensor", t_all_gather)
C.run("cuda reduce_scatter_tensor", t_reduce_scatter)
C.run("cuda all_to_all_single (uneven) and all_to_all", t_all_to_all)


def t_errors():
    # A CUDA tensor on some ranks and a CPU tensor on others: the same error everywhere.
    x = torch.ones(4, device=DEV) if RANK % 2 == 0 else torch.ones(4)
    if WORLD > 1:
        expect_error(lambda: dist.all_reduce(x), "device mismatch across ranks")
    # Input on the GPU, output on the CPU.
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(4 * WORLD), torch.ones(4, device=DEV)),
                 "on different devices")
    # Point to point moves CPU tensors only.
    if WORLD > 1:
        peer = RANK ^ 1
        if peer < WORLD:
            t = torch.ones(3, device=DEV)
            fn = (lambda: dist.send(t, peer)) if RANK % 2 == 0 else (lambda: dist.recv(t, peer))
            expect_error(fn, "moves CPU tensors only")
    dist.all_reduce(torch.ones(2, device=DEV))  # still usable


C.run("cuda errors on every rank", t_errors)


def t_spccl_ops():
    # The compressed calls on device buffers give the host path's bits, forward and backward.
    x = torch.randn(8 * WORLD, 64, generator=torch.Generator().manual_seed(RANK))
    up = torch.randn(8 * WORLD, 64, generator=torch.Generator().manual_seed(50 + RANK))
    xc = x.clone().requires_grad_()
    c = spccl_torch.alltoall_rows(xc, 0.125)
    (c * up).sum().backward()
    before = spccl_torch.get_stats()
    xg = x.to(DEV).requires_grad_()
    g = spccl_torch.alltoall_rows(xg, 0.125)
    (g * up.to(DEV)).sum().backward()
    after = spccl_torch.get_stats()
    assert torch.equal(g.detach().cpu(), c.detach()), "alltoall_rows: device and host differ"
    assert torch.equal(xg.grad.cpu(), xc.grad), "alltoall_rows backward: device and host differ"
    assert after["calls"] >= before["calls"] + 2, (before, after)  # the CUDA calls are counted
    ids = torch.tensor([RANK, 7, 7, 100 + RANK])
    rows = torch.randn(4, 8, generator=torch.Generator().manual_seed(11 + RANK))
    gi, gr = spccl_torch.allreduce_rowsparse(ids.to(DEV), rows.to(DEV))
    ci, cr = spccl_torch.allreduce_rowsparse(ids, rows)
    assert gi.is_cuda and gr.is_cuda
    assert torch.equal(gi.cpu(), ci) and torch.equal(gr.cpu(), cr), "allreduce_rowsparse: device and host differ"


C.run("cuda alltoall_rows and allreduce_rowsparse equal the host's", t_spccl_ops)


def t_ddp_hook():
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(DEV)
    model = DDP(net, device_ids=[RANK])
    state = spccl_torch.hooks.DCTState(density=0.05, threshold_interval=10)
    model.register_comm_hook(state, spccl_torch.hooks.dct_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + RANK)
    w = torch.randn(32, 1, generator=torch.Generator().manual_seed(5))
    for _ in range(30):
        xb = torch.randn(64, 32, generator=g)
        loss = torch.nn.functional.mse_loss(model(xb.to(DEV)), (xb @ w).to(DEV))
        opt.zero_grad()
        loss.backward()
        opt.step()
    # Replicas stay identical (every rank applied the same compressed sum).
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    assert torch.equal(flat, ref), "DDP replicas differ after the DCT hook on CUDA"
    s = state.stats()
    if WORLD > 1:
        assert s["compressed_calls"] > 0 and s["bytes_sent"] < s["dense_bytes"], s


C.run("cuda DDP with the DCT hook", t_ddp_hook)

C.finish("spccl_torch CUDA")
