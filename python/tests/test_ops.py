"""Every operation of the spccl backend against gloo on the same inputs, async
work and futures, process subgroups, and the errors bad input must give on
every rank. Run under mpirun (2, 3 and 4 ranks)."""
import functools

import harness
from harness import RANK, WORLD, expect_error

import torch
import torch.distributed as dist

import spccl_torch  # noqa: F401  (registers the backend)

R = dist.ReduceOp
gloo = harness.init_spccl_and_gloo("ops")
C = harness.Checks(gloo)


def data(dtype, n, rank, seed=0):
    g = torch.Generator().manual_seed(7919 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    # Small positive integers: sums and products stay exact in every dtype.
    return torch.randint(1, 4, (n,), generator=g).to(dtype)


def gather_all(x):
    """Every rank's x, through gloo (reference for ops gloo does not have)."""
    if x.dtype == torch.int16:  # gloo has no int16 (spccl has)
        return [o.to(torch.int16) for o in gather_all(x.to(torch.int32))]
    out = [torch.empty_like(x) for _ in range(WORLD)]
    dist.all_gather(out, x, group=gloo)
    return out


def reference_reduce(xs, op):
    acc = xs[0].clone()
    for x in xs[1:]:
        if op == R.SUM or op == R.AVG:
            acc = acc + x
        elif op == R.PRODUCT:
            acc = acc * x
        elif op == R.MIN:
            acc = torch.minimum(acc, x)
        elif op == R.MAX:
            acc = torch.maximum(acc, x)
        elif op == R.BAND:
            acc = acc & x
        elif op == R.BOR:
            acc = acc | x
        elif op == R.BXOR:
            acc = acc ^ x
    if op == R.AVG:
        acc = acc / WORLD
    return acc.to(xs[0].dtype)


def same(a, b):
    if a.dtype.is_floating_point:
        assert torch.allclose(a.double(), b.double(), rtol=1e-2, atol=1e-2), (a, b)
    else:
        assert torch.equal(a, b), (a, b)


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def t_all_reduce(dtype, op):
    x = data(dtype, 37, RANK)
    got = x.clone()
    dist.all_reduce(got, op=op)
    want = x.clone()
    try:
        dist.all_reduce(want, op=op, group=gloo)
    except (RuntimeError, ValueError):  # an op/dtype gloo lacks: local reference
        want = reference_reduce(gather_all(x), op)
    same(got, want)


for dt in FLOATS + INTS:
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    ops += [R.AVG] if dt.is_floating_point else [R.BAND, R.BOR, R.BXOR]
    for op in ops:
        C.run(f"all_reduce {dt} {op}", t_all_reduce, dt, op)


def t_async_future():
    x = torch.full((1000,), float(RANK + 1))
    work = dist.all_reduce(x, async_op=True)
    fut = work.get_future()
    assert work.wait()
    val = fut.wait()
    assert torch.equal(val[0], x)
    assert x[0].item() == WORLD * (WORLD + 1) / 2
    # then() chains like DDP's reducer does.
    y = torch.ones(10)
    fut2 = dist.all_reduce(y, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    assert torch.equal(fut2.wait(), torch.full((10,), 2.0 * WORLD))


C.run("async work and get_future", t_async_future)


def t_coalesced():
    ts = [data(torch.float32, n, RANK, seed=n) for n in (3, 17, 64)]
    got = [t.clone() for t in ts]
    dist.all_reduce_coalesced(got)
    for t, g in zip(ts, got):
        want = t.clone()
        dist.all_reduce(want, group=gloo)
        same(g, want)


C.run("all_reduce_coalesced", t_coalesced)


def t_broadcast(dtype, root):
    x = data(dtype, 29, RANK, seed=3)
    got = x.clone()
    dist.broadcast(got, src=root)
    want = x.clone()
    dist.broadcast(want, src=root, group=gloo)
    same(got, want)


for dt in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
    for root in range(WORLD):
        C.run(f"broadcast {dt} root {root}", t_broadcast, dt, root)


def t_reduce(root):
    x = data(torch.float32, 11, RANK)
    got = x.clone()
    dist.reduce(got, dst=root, op=R.MAX)
    want = x.clone()
    dist.reduce(want, dst=root, op=R.MAX, group=gloo)
    if RANK == root:
        same(got, want)


for root in range(WORLD):
    C.run(f"reduce root {root}", t_reduce, root)


def t_all_gather_even(dtype):
    x = data(dtype, 13, RANK)
    got = [torch.empty_like(x) for _ in range(WORLD)]
    dist.all_gather(got, x)
    want = gather_all(x)
    for g, w in zip(got, want):
        same(g, w)


def t_all_gather_uneven():
    x = data(torch.float32, RANK + 1, RANK).view(-1, 1)
    got = [torch.empty(j + 1, 1) for j in range(WORLD)]
    w = dist.all_gather(got, x, async_op=True)
    fut = w.get_future()
    w.wait()
    for j in range(WORLD):
        same(got[j], data(torch.float32, j + 1, j).view(-1, 1))
    assert len(fut.value()) == WORLD


def t_all_gather_into_tensor():
    x = data(torch.float32, 6, RANK).view(2, 3)
    got = torch.empty(2 * WORLD, 3)
    dist.all_gather_into_tensor(got, x)
    want = torch.empty(2 * WORLD, 3)
    dist.all_gather_into_tensor(want, x, group=gloo)
    same(got, want)


for dt in (torch.float32, torch.float16, torch.int32):
    C.run(f"all_gather {dt}", t_all_gather_even, dt)
C.run("all_gather uneven (lists)", t_all_gather_uneven)
C.run("all_gather_into_tensor", t_all_gather_into_tensor)


def t_reduce_scatter_tensor(dtype, op):
    x = data(dtype, 5 * WORLD, RANK)
    got = torch.empty(5, dtype=dtype)
    dist.reduce_scatter_tensor(got, x, op=op)
    want = reference_reduce(gather_all(x), op)[RANK * 5:(RANK + 1) * 5]
    try:
        w = torch.empty(5, dtype=dtype)
        dist.reduce_scatter_tensor(w, x, op=op, group=gloo)
        want = w
    except (RuntimeError, ValueError):
        pass
    same(got, want)


def t_reduce_scatter_list():
    xs = [data(torch.float32, 4, RANK, seed=j) for j in range(WORLD)]
    got = torch.empty(4)
    dist.reduce_scatter(got, xs)
    want = reference_reduce([data(torch.float32, 4, q, seed=RANK) for q in range(WORLD)], R.SUM)
    same(got, want)


for dt, op in ((torch.float32, R.SUM), (torch.float64, R.MAX), (torch.bfloat16, R.SUM), (torch.int64, R.SUM),
               (torch.float32, R.AVG)):
    C.run(f"reduce_scatter_tensor {dt} {op}", t_reduce_scatter_tensor, dt, op)
C.run("reduce_scatter (list)", t_reduce_scatter_list)


def a2a_input(rank, splits, cols):
    rows = sum(splits)
    return (torch.arange(rows * cols, dtype=torch.float32).view(rows, cols) + 1000 * rank)


def t_all_to_all_single(uneven, in_place):
    cols = 3
    send = [(RANK + j) % 3 + 1 for j in range(WORLD)] if uneven else [2] * WORLD
    recv = [(j + RANK) % 3 + 1 for j in range(WORLD)] if uneven else [2] * WORLD
    x = a2a_input(RANK, send, cols)
    want = torch.empty(sum(recv), cols)
    dist.all_to_all_single(want, x, recv if uneven else None, send if uneven else None, group=gloo)
    if in_place:
        got = x.clone()
        dist.all_to_all_single(got, got, recv if uneven else None, send if uneven else None)
    else:
        got = torch.empty(sum(recv), cols)
        w = dist.all_to_all_single(got, x, recv if uneven else None, send if uneven else None, async_op=True)
        assert torch.equal(w.get_future().wait()[0], got)
    same(got, want)


def t_all_to_all_list():
    xs = [data(torch.int64, RANK + j + 1, RANK, seed=j) for j in range(WORLD)]
    got = [torch.empty(j + RANK + 1, dtype=torch.int64) for j in range(WORLD)]
    dist.all_to_all(got, xs)
    for j in range(WORLD):
        same(got[j], data(torch.int64, j + RANK + 1, j, seed=RANK))


C.run("all_to_all_single equal", t_all_to_all_single, False, False)
C.run("all_to_all_single uneven", t_all_to_all_single, True, False)
C.run("all_to_all_single equal in place", t_all_to_all_single, False, True)
C.run("all_to_all (lists)", t_all_to_all_list)


def t_barrier():
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()


C.run("barrier", t_barrier)


def t_gather(root):
    x = data(torch.float32, 7, RANK)
    got = [torch.empty(7) for _ in range(WORLD)] if RANK == root else None
    dist.gather(x, got, dst=root)
    want = [torch.empty(7) for _ in range(WORLD)] if RANK == root else None
    dist.gather(x, want, dst=root, group=gloo)
    if RANK == root:
        for g, w in zip(got, want):
            same(g, w)


def t_scatter(root):
    xs = [data(torch.int32, 5, j, seed=9) for j in range(WORLD)] if RANK == root else None
    got = torch.empty(5, dtype=torch.int32)
    dist.scatter(got, xs, src=root)
    same(got, data(torch.int32, 5, RANK, seed=9))


for root in range(WORLD):
    C.run(f"gather root {root}", t_gather, root)
    C.run(f"scatter root {root}", t_scatter, root)


def t_send_recv():
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    x = data(torch.float64, 100, RANK)
    got = torch.empty(100, dtype=torch.float64)
    s = dist.isend(x, right, tag=3)
    r = dist.irecv(got, left, tag=3)
    s.wait()
    r.wait()
    same(got, data(torch.float64, 100, left))
    # Blocking pair between ranks 0 and 1, bigger than an eager message.
    if RANK == 0:
        dist.send(torch.arange(300000, dtype=torch.float32), 1)
    elif RANK == 1:
        y = torch.empty(300000)
        dist.recv(y, 0)
        assert torch.equal(y, torch.arange(300000, dtype=torch.float32))


C.run("send/recv", t_send_recv)


def t_send_recv_mismatch():
    if RANK == 0:
        dist.send(torch.ones(4, dtype=torch.float32), 1)
    elif RANK == 1:
        expect_error(lambda: dist.recv(torch.empty(4, dtype=torch.float64), 0), "rank 0", "Float", "Double")
    # The receiver drained the message: the pair still works.
    if RANK == 0:
        dist.send(torch.full((2,), 5.0), 1)
    elif RANK == 1:
        y = torch.empty(2)
        dist.recv(y, 0)
        assert y.tolist() == [5.0, 5.0]


C.run("send/recv dtype mismatch is the receiver's error", t_send_recv_mismatch)


def t_batch_isend_irecv():
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    a = torch.full((3,), float(RANK))
    b = torch.empty(3)
    for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, a, right), dist.P2POp(dist.irecv, b, left)]):
        req.wait()
    assert b.tolist() == [float(left)] * 3


def t_object_collectives():
    objs = [{"a": 1, "b": [1, 2, 3]}] if RANK == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    assert objs == [{"a": 1, "b": [1, 2, 3]}]
    out = [None] * WORLD
    dist.all_gather_object(out, {"r": RANK, "pad": "x" * RANK * 10})  # uneven pickles
    assert [o["r"] for o in out] == list(range(WORLD))


C.run("batch_isend_irecv", t_batch_isend_irecv)
C.run("broadcast_object_list and all_gather_object", t_object_collectives)


def t_subgroups():
    members = list(range(0, WORLD, 2))  # every rank must call new_group
    sub = dist.new_group(members, backend="spccl")
    odd = dist.new_group(list(range(1, WORLD, 2)), backend="spccl")
    x = torch.full((5,), float(RANK + 1))
    if RANK in members:
        dist.all_reduce(x, group=sub)
        assert x[0].item() == sum(m + 1 for m in members), x
        out = [torch.empty(1) for _ in members]
        dist.all_gather(out, torch.tensor([float(RANK)]), group=sub)
        assert [o.item() for o in out] == [float(m) for m in members]
    else:
        dist.all_reduce(x, group=odd)
        assert x[0].item() == sum(m + 1 for m in range(1, WORLD, 2))
    dist.destroy_process_group(sub)
    dist.destroy_process_group(odd)


C.run("new_group subgroups", t_subgroups)

# ---- errors: the same RuntimeError on every rank, no hang -----------------


def t_err_noncontiguous():
    x = torch.ones(4, 6)
    t = x.t() if RANK == 0 else x.clone()
    expect_error(lambda: dist.all_reduce(t), "rank 0", "not contiguous")
    dist.all_reduce(torch.ones(3))  # the group still works


def t_err_size_mismatch():
    expect_error(lambda: dist.all_reduce(torch.ones(10 + (RANK == WORLD - 1))), "size", "mismatch")
    expect_error(lambda: dist.broadcast(torch.ones(4 + RANK), 0), "mismatch")


def t_err_dtype_mismatch():
    t = torch.ones(4, dtype=torch.float64 if RANK == 1 else torch.float32)
    expect_error(lambda: dist.all_reduce(t), "dtype mismatch", "Double", "Float")


def t_err_splits():
    send = [1] * WORLD
    recv = [1] * WORLD
    if RANK == 0:
        recv[WORLD - 1] = 2  # expects more than the peer sends
    x = torch.ones(WORLD, 2)
    out = torch.empty(sum(recv), 2)
    expect_error(lambda: dist.all_to_all_single(out, x, recv, send), "split sizes disagree")


def t_err_bad_op():
    expect_error(lambda: dist.all_reduce(torch.ones(4), op=R.BAND), "not supported for this dtype")


def t_err_unsupported():
    expect_error(lambda: dist.recv(torch.empty(1)), "spccl", "recvAnysource")
    expect_error(lambda: dist.monitored_barrier(), "spccl", "monitoredBarrier")


def t_err_different_collectives():
    if RANK == 0:
        expect_error(lambda: dist.broadcast(torch.ones(4), 0), "different collectives")
    else:
        expect_error(lambda: dist.all_reduce(torch.ones(4)), "different collectives")


def t_cuda():
    if not torch.cuda.is_available():
        if RANK == 0:
            print("SKIP CUDA tensor test: no CUDA device", flush=True)
        return
    t = torch.ones(4, device="cuda")
    expect_error(lambda: dist.all_reduce(t), "CUDA")


def rowsparse_input(rank, dtype, row_len, seed):
    """Rank `rank`'s ids (repeats, a shared range so ranks overlap) and rows
    (small integers: every sum is exact in every dtype); rank 1 passes none."""
    n = 0 if rank == 1 else 4 + 3 * rank
    g = torch.Generator().manual_seed(1000 * seed + rank)
    ids = torch.randint(0, 3 * WORLD + 5, (n,), generator=g, dtype=torch.int64)
    rows = torch.randint(-3, 4, (n, row_len), generator=g).to(dtype)
    return ids, rows


def t_allreduce_rowsparse(dtype, row_len, seed):
    ids, rows = rowsparse_input(RANK, dtype, row_len, seed)
    out_ids, out_rows = spccl_torch.allreduce_rowsparse(ids, rows)
    # The reference from every rank's input (each rank can draw them all).
    sums = {}
    for r in range(WORLD):
        i, x = rowsparse_input(r, dtype, row_len, seed)
        for k in range(i.numel()):
            key = int(i[k])
            sums[key] = sums.get(key, torch.zeros(row_len, dtype=torch.float64)) + x[k].double()
    want_ids = sorted(sums)
    assert out_ids.dtype == torch.int64 and out_rows.dtype == dtype, (out_ids.dtype, out_rows.dtype)
    assert out_ids.tolist() == want_ids, (out_ids.tolist(), want_ids)
    want = torch.stack([sums[k] for k in want_ids]) if want_ids else torch.zeros(0, row_len, dtype=torch.float64)
    assert torch.equal(out_rows.double(), want), (out_rows, want)
    # Bit for bit the same on every rank.
    mine = torch.cat([out_ids.double(), out_rows.double().flatten()])
    for other in gather_all(mine):
        assert torch.equal(other, mine)


def t_err_rowsparse():
    ids = torch.arange(4, dtype=torch.int32 if RANK == 0 else torch.int64)
    expect_error(lambda: spccl_torch.allreduce_rowsparse(ids, torch.ones(4, 3)), "allreduce_rowsparse",
                 "rank 0", "dtype")
    row_len = 3 if RANK == 0 else 4
    expect_error(lambda: spccl_torch.allreduce_rowsparse(torch.arange(2), torch.ones(2, row_len)),
                 "row length mismatch")
    rows = torch.ones(5, 3) if RANK == WORLD - 1 else torch.ones(4, 3)
    expect_error(lambda: spccl_torch.allreduce_rowsparse(torch.arange(4), rows), "sizes do not fit")


for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    C.run(f"allreduce_rowsparse {dt}", t_allreduce_rowsparse, dt, 5, 1)
C.run("allreduce_rowsparse row_len 1", t_allreduce_rowsparse, torch.float32, 1, 2)
C.run("error: allreduce_rowsparse arguments", t_err_rowsparse)

C.run("error: non-contiguous on one rank", t_err_noncontiguous)
C.run("error: size mismatch", t_err_size_mismatch)
C.run("error: dtype mismatch", t_err_dtype_mismatch)
C.run("error: all_to_all_single splits", t_err_splits)
C.run("error: bitwise op on float", t_err_bad_op)
C.run("error: unsupported operations named", t_err_unsupported)
C.run("error: different collectives", t_err_different_collectives)
C.run("CUDA tensors (skip without a device)", t_cuda)

C.finish("test_ops")
