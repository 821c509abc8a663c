"""Soak: many runs with varying dynamic shapes (batch, sequence length) from several
threads on one session; resident memory must stay bounded (plans are an LRU of
MAX_PLANS, execution contexts are pooled and reused).

    python tools/soak.py --runs 10000 --callers 4

Prints the resident set size every --every runs; exit 1 if the RSS grew by more than
--max-growth-mb between the first and the last checkpoint after warm-up, or if any
result differed from a single caller's result for the same input.
"""
import argparse
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="bert_tiny-op17")
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--callers", type=int, default=4)
    p.add_argument("--every", type=int, default=1000)
    p.add_argument("--max-growth-mb", type=float, default=64.0)
    args = p.parse_args()
    import edgenn
    from edgenn.kernels import isa
    from edgenn.runtime.session import MAX_PLANS
    from support.models import BERT_TINY, ZOO, token_batch
    print(f"CPU: {isa.describe()}")
    path, feeds = ZOO[args.model]()
    sess = edgenn.InferenceSession(str(path))
    # more distinct shapes than the plan LRU holds: plans are built and evicted all along
    shapes = [(b, s) for b in (1, 2, 3) for s in (8, 16, 24, 33, 48)]
    assert len(shapes) > MAX_PLANS
    inputs = [token_batch([s] * b, s, BERT_TINY["vocab"], k) for k, (b, s) in enumerate(shapes)]
    want = [sess.run(None, f) for f in inputs]
    lock, done, wrong, marks = threading.Lock(), [0], [0], []

    def caller(t: int) -> None:
        rng = np.random.default_rng(t)
        while True:
            with lock:
                if done[0] >= args.runs:
                    return
                done[0] += 1
                n = done[0]
            k = int(rng.integers(len(inputs)))
            got = sess.run(None, inputs[k])
            if not all(np.array_equal(a, b) for a, b in zip(got, want[k])):
                with lock:
                    wrong[0] += 1
            if n % args.every == 0:
                with lock:
                    marks.append((n, rss_mb()))
                    print(f"{n:7d} runs  rss {marks[-1][1]:8.1f} MB  plans {len(sess._plans)}",
                          flush=True)
    ts = [threading.Thread(target=caller, args=(t,)) for t in range(args.callers)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    after_warmup = marks[min(1, len(marks) - 1)][1]
    growth = marks[-1][1] - after_warmup
    print(f"{args.runs} runs, {args.callers} callers, {len(shapes)} shapes "
          f"(plan LRU {MAX_PLANS}): wrong results {wrong[0]}, RSS growth after warm-up "
          f"{growth:+.1f} MB")
    return 0 if wrong[0] == 0 and growth <= args.max_growth_mb else 1


if __name__ == "__main__":
    sys.exit(main())
