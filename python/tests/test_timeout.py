"""Group timeouts: the last rank skips an operation, the others' wait raises within
the group's timeout (or work.wait's), naming the operation, the rank and the
timeout, and the group refuses every operation after that. Run under mpirun
(np >= 2).

An MPI call cannot be cancelled, so the waiting ranks' calls stay in MPI after
the error. To end cleanly, the skipping rank joins each skipped operation late,
once the others have checked their error: their stuck calls then complete, the
process can use new groups again (checked at the end) and finalize MPI, and
mpirun returns 0. A rank whose error never comes stops the job after LIMIT s
with exit status 3.
"""
import datetime
import os
import sys
import threading
import time

import harness
from harness import RANK, WORLD

import torch
import torch.distributed as dist

LIMIT = 90


def overdue():
    sys.stderr.write(f"[rank {RANK}] test_timeout: still running after {LIMIT} s: "
                     "an expected timeout error did not come\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(3)  # the main thread may be blocked in a wait that never returns


timer = threading.Timer(LIMIT, overdue)
timer.daemon = True
timer.start()

SKIP = WORLD - 1  # the rank that skips; every other rank waits
waiter = RANK != SKIP
d = harness.job_dir()
dist.init_process_group("spccl", init_method=f"file://{d}/timeout_spccl", rank=RANK, world_size=WORLD,
                        timeout=datetime.timedelta(seconds=2))
gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
C = harness.Checks(gloo)
torch.set_num_threads(1)


def timed(fn):
    t0 = time.monotonic()
    try:
        fn()
    except RuntimeError as err:
        return str(err), time.monotonic() - t0
    raise AssertionError("no error raised")


def expect_timeout(msg, took, op, ms, whose, lo, hi):
    for needle in (f"spccl: {op} on rank {RANK} of {WORLD}", f"{whose} timeout of {ms} ms", "unusable"):
        assert needle in msg, (needle, msg)
    assert lo <= took <= hi, f"raised after {took:.2f} s, expected within [{lo}, {hi}] s: {msg}"


def expect_refused(group):
    """Every later operation on the group fails at once."""
    x = torch.ones(4)
    for name, call in (("all_reduce", lambda: dist.all_reduce(x, group=group)),
                       ("broadcast", lambda: dist.broadcast(x, src=0, group=group, async_op=True)),
                       ("send", lambda: dist.send(x, dst=SKIP, group=group))):
        msg, took = timed(call)
        assert f"spccl: {name} on an unusable process group" in msg or "is unusable" in msg, (name, msg)
        assert "timeout" in msg, msg
        assert took < 0.5, (name, took)


# 1. The group's timeout from init_process_group, a synchronous all_reduce.
def t_sync():
    if not waiter:
        return
    x = torch.ones(8)
    msg, took = timed(lambda: dist.all_reduce(x))
    expect_timeout(msg, took, "all_reduce", 2000, "the group's", 1.9, 10)
    if RANK == 0:
        print(f"rank 0 raised after {took:.2f} s: {msg}", flush=True)
    expect_refused(None)


C.run("sync all_reduce raises after init_process_group's timeout; the group refuses later calls", t_sync)
if not waiter:
    dist.all_reduce(torch.ones(8))  # the late join

# 2. new_group's timeout: async work.wait() and the future of work queued behind it.
g2 = dist.new_group(backend="spccl", timeout=datetime.timedelta(seconds=2))


def t_async():
    if not waiter:
        return
    x, y = torch.ones(8), torch.ones(8)
    w1 = dist.broadcast(x, src=SKIP, group=g2, async_op=True)
    w2 = dist.all_reduce(y, group=g2, async_op=True)  # queued behind w1: it never starts
    msg, took = timed(w1.wait)
    expect_timeout(msg, took, "broadcast", 2000, "the group's", 1.9, 10)
    msg2, took2 = timed(lambda: w2.get_future().wait())
    assert "broadcast" in msg2 and "2000 ms" in msg2 and took2 < 0.5, (msg2, took2)
    msg3, took3 = timed(w2.wait)
    assert msg3 == msg2 and took3 < 0.5, (msg3, took3)
    expect_refused(g2)


C.run("new_group timeout: work.wait() raises, queued work's future fails too", t_async)
if not waiter:
    dist.broadcast(torch.ones(8), src=SKIP, group=g2)

# 3. An explicit work.wait(timeout) on a group with a long timeout.
g3 = dist.new_group(backend="spccl", timeout=datetime.timedelta(seconds=60))


def t_explicit():
    if not waiter:
        return
    x = torch.ones(8)
    w = dist.all_reduce(x, group=g3, async_op=True)
    msg, took = timed(lambda: w.wait(timeout=datetime.timedelta(seconds=1)))
    expect_timeout(msg, took, "all_reduce", 1000, "work.wait's", 0.9, 8)
    expect_refused(g3)


C.run("work.wait(timeout) raises after that timeout", t_explicit)
if not waiter:
    dist.all_reduce(torch.ones(8), group=g3)

# 4. recv from the skipping rank, under new_group's timeout.
g4 = dist.new_group(backend="spccl", timeout=datetime.timedelta(seconds=2))


def t_recv():
    if not waiter:
        return
    x = torch.zeros(8)
    w = dist.irecv(x, src=SKIP, group=g4)
    msg, took = timed(w.wait)
    expect_timeout(msg, took, "recv", 2000, "the group's", 1.9, 10)
    expect_refused(g4)


C.run("irecv from a rank that does not send raises after the group's timeout", t_recv)
if not waiter:
    for r in range(WORLD - 1):
        dist.send(torch.full((8,), 7.0), dst=r, group=g4)


# 5. After the late joins: the process works again in a new group; the timed-out
# groups stay unusable.
def t_after():
    g5 = dist.new_group(backend="spccl", timeout=datetime.timedelta(seconds=60))
    x = torch.full((8,), float(RANK + 1))
    dist.all_reduce(x, group=g5)
    assert torch.equal(x, torch.full((8,), float(WORLD * (WORLD + 1) // 2))), x
    if waiter:
        for g in (None, g2, g3, g4):
            expect_refused(g)


C.run("a new group works after the late joins; the timed-out groups stay unusable", t_after)
timer.cancel()
C.finish("test_timeout")
