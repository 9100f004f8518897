"""Shared by the tests: launched by mpirun or torchrun, one process per rank.

Every check runs on every rank; failures are agreed over a gloo group before
anything is asserted, so a rank that fails alone never leaves the others
waiting in a collective. The process exits 1 on every rank if any check failed
on any rank.
"""
import datetime
import os
import sys
import tempfile
import traceback
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

# mpirun's variables, else torchrun's.
RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
WORLD = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
JOB = os.environ.get("OMPI_MCA_ess_base_jobid",
                     os.environ.get("PMIX_NAMESPACE", os.environ.get("TORCHELASTIC_RUN_ID", "0")))


def job_dir():
    """A folder every rank of this job agrees on: the launcher's fresh one
    (tests/isolated.py), else one named after the job id for runs by hand."""
    d = os.environ.get("SPCCL_TORCH_TEST_DIR") or os.path.join(tempfile.gettempdir(), f"spccl_torch_test_{JOB}")
    os.makedirs(d, exist_ok=True)
    return d


def init_spccl_and_gloo(name, timeout=None):
    """World group on spccl (file store) plus a separate gloo group for reference
    results and for agreeing on pass/fail. timeout: the spccl group's (a timedelta)."""
    d = job_dir()
    kw = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group("spccl", init_method=f"file://{d}/{name}_spccl", rank=RANK, world_size=WORLD, **kw)
    # A short timeout: if one rank cannot join, the others fail in minutes, not ctest's 600 s.
    gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
    return gloo


class Checks:
    def __init__(self, gloo):
        self.gloo = gloo
        self.failed = []
        self.passed = 0

    def run(self, name, fn, *args):
        ok = 1
        try:
            fn(*args)
        except Exception:
            ok = 0
            sys.stderr.write(f"[rank {RANK}] FAIL {name}\n{traceback.format_exc()}\n")
        flag = torch.tensor([ok], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.gloo)
        if flag.item() == 1:
            self.passed += 1
        else:
            self.failed.append(name)

    def finish(self, label):
        if RANK == 0:
            print(f"{label}: {self.passed} passed, {len(self.failed)} failed on {WORLD} ranks"
                  + (f": {', '.join(self.failed)}" if self.failed else ""), flush=True)
        dist.destroy_process_group()
        sys.exit(1 if self.failed else 0)


def expect_error(fn, *needles):
    """fn must raise a RuntimeError whose message holds every needle."""
    try:
        fn()
    except RuntimeError as err:
        msg = str(err)
        for n in needles:
            if n not in msg:
                raise AssertionError(f"error message {msg!r} lacks {n!r}") from err
        return msg
    raise AssertionError("no error raised")
