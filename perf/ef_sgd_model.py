#!/usr/bin/env python3
"""A plain model of spccl's selection rule on perf/gpu/nccl_plain_sgd.cc's problem.

Least squares with unit curvature: loss = mean((w - t)^2) / 2, gradient w - t,
one rank. Each step sends v = gradient + residual through the DCT-DP rule of
docs/ALGORITHMS.md: tau is the k-th largest |v| on step 0 and every `interval`
steps (with --warmup 1, SPCCL_THRESHOLD_WARMUP's default, also on steps 1, 2,
4, 8, ... below the interval), and re-estimated in the step whose stored tau selects more than
capacity x k entries or, with --min-fraction F > 0 (SPCCL_THRESHOLD_MIN_FRACTION),
fewer than ceil(F x k) (--next-call: the low side re-estimated one step late
instead, a variant the library does not use); the
entries with |v| >= tau are applied, the rest stay in the residual (error
feedback). Ties, NaN/Inf and wire rounding are left out (fp32, random normal
data). Pure Python, no dependencies; n = 20000 takes seconds.

It shows what the rule does to training, apart from any implementation: on an
H200 the interposed NCCL program (density 0.1, lr 0.1, 60 steps, no warm-up)
printed losses 0.4999, 0.0777, 0.0137, 0.0069, 0.0073,
0.0092, 0.0110 every 10 steps; this model with the same settings (--warmup 0)
prints 0.4974, 0.0767, 0.0136, 0.0069, 0.0074, 0.0092, 0.0109. With the warm-up
(the default) it prints 0.4974, 0.0770, 0.0125, 0.0042, 0.0040, 0.0031, 0.0038.
At lr 0.5 and density 0.01 the device run diverged (1.09, 4.99, 31.2, 119, 228,
437) and so does the model with --warmup 0 (1.09, 5.31, 25.0, 132, 225, 438;
with the warm-up 1.09, 5.31, 25.0, 140, 473, 555): an entry applies about
1/density steps of gradient at once.

  perf/ef_sgd_model.py                       # density 0.1, lr 0.1, intervals 1000, 10, 1
  perf/ef_sgd_model.py --warmup 0            # the schedule alone (the H200 run's rule)
  perf/ef_sgd_model.py --min-fraction 0.5    # the low side on
  perf/ef_sgd_model.py --density 0.01 --lr 0.5 --intervals 1000 --warmup 0
"""
import argparse
import math
import random


def scheduled(step, interval, warmup):
    if step % interval == 0:
        return True
    return warmup and step < interval and step & (step - 1) == 0


def run(n, density, lr, interval, steps, capacity, seed, min_fraction=0.0, next_call=False, warmup=True):
    rnd = random.Random(seed)
    target = [rnd.gauss(0.0, 1.0) for _ in range(n)]
    w = [0.0] * n
    residual = [0.0] * n
    k = max(1, int(round(n * density)))
    tau = None
    estimate_next = False
    losses = []

    def kth(v):
        return sorted((abs(x) for x in v), reverse=True)[k - 1]

    for step in range(steps + 1):
        grad = [w[i] - target[i] for i in range(n)]
        loss = 0.5 * sum(g * g for g in grad) / n
        if step % 10 == 0 or step == steps:
            losses.append((step, loss))
        if step == steps:
            break
        v = [grad[i] + residual[i] for i in range(n)]
        estimated = scheduled(step, interval, warmup) or estimate_next
        estimate_next = False
        if estimated:
            tau = kth(v)
        sent = [i for i in range(n) if abs(v[i]) >= tau]
        starved = not estimated and tau > 0 and len(sent) < math.ceil(min_fraction * k)
        if starved and next_call:
            estimate_next = True  # the selection stands; the next step re-estimates
        elif len(sent) > capacity * k or starved:  # stale tau, too many or too few: re-estimate now
            tau = kth(v)
            sent = [i for i in range(n) if abs(v[i]) >= tau]
            estimated = True
        residual = v
        for i in sent:
            w[i] -= lr * v[i]
            residual[i] = 0.0
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20000, help="elements (default 20000)")
    ap.add_argument("--density", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--capacity", type=float, default=2.0, help="SPCCL_CAPACITY_FACTOR (default 2)")
    ap.add_argument("--intervals", default="1000,10,1", help="thresholdInterval values to compare")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--min-fraction", type=float, default=0.0,
                    help="SPCCL_THRESHOLD_MIN_FRACTION: a stored tau selecting fewer than ceil(F x k) entries is "
                         "re-estimated in that step (default 0: never, the library's default)")
    ap.add_argument("--warmup", type=int, choices=(0, 1), default=1,
                    help="SPCCL_THRESHOLD_WARMUP: also estimate on steps 1, 2, 4, ... below the interval (default 1, "
                         "the library's default; 0: the interval alone)")
    ap.add_argument("--next-call", action="store_true",
                    help="re-estimate a starved tau in the next step instead (a variant, not the library's rule)")
    a = ap.parse_args()
    if a.n < 1 or not 0 < a.density <= 1 or a.lr <= 0 or a.steps < 1 or not 0 <= a.min_fraction <= 1:
        ap.error("need n >= 1, 0 < density <= 1, lr > 0, steps >= 1, 0 <= min-fraction <= 1")
    intervals = [int(x) for x in a.intervals.split(",") if x]
    if not intervals or min(intervals) < 1:
        ap.error("--intervals: positive integers")
    print(f"# n {a.n}, density {a.density}, lr {a.lr}, capacity factor {a.capacity}, min fraction "
          f"{a.min_fraction}{' (next call)' if a.next_call else ''}, warm-up {a.warmup}: loss every 10 steps")
    for interval in intervals:
        losses = run(a.n, a.density, a.lr, interval, a.steps, a.capacity, a.seed, a.min_fraction, a.next_call,
                     a.warmup == 1)
        print(f"interval {interval:5d}: " + " ".join(f"{loss:.4f}" for _, loss in losses))


if __name__ == "__main__":
    main()
