"""How close decoding comes to the memory roofline: the bytes a decode step must read
(every weight of the plan's steps once, plus the key / value cache rows it attends over)
over the bandwidth a plain streaming read of a buffer of that size reaches on this CPU, in
the same cache level (a decoder small enough to stay in L3 is held to L3's rate).

    python bench/roofline_decode.py smollm2-8l:int4 [--threads 1]

Prints the CPU and tier, the streaming rate, the step's bytes and time, and the fraction
of the roofline reached (the bytes at the streaming rate over the measured step time).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import compare_decoders as cd  # noqa: E402


def stream_rate(nbytes: int, rounds: int = 30) -> float:
    """Bytes per second of a summing read of an nbytes buffer (int64 lanes, vectorized
    by NumPy), best of `rounds` passes after one to warm the caches."""
    a = np.ones(nbytes // 8, np.int64)
    a.sum()
    best = min(_timed(a.sum) for _ in range(rounds))
    return a.nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def step_bytes(plan, cache_rows: int, cache_row_bytes: int) -> int:
    """Constant bytes every step reads (weights, packed or not), plus the cache."""
    seen, total = set(), 0
    for step in plan.steps:
        for ref in step.in_refs:
            if ref is not None and ref[0] == "const" and id(ref[1]) not in seen:
                seen.add(id(ref[1]))
                if step.node.op != "QGather":        # an embedding reads one row
                    total += ref[1].nbytes
    return total + cache_rows * cache_row_bytes


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("model", help="shape:precision (tests/support/decoders.py) or a folder")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--context", type=int, default=64, help="tokens in the cache")
    args = p.parse_args()
    from edgenn.kernels import isa
    from edgenn.lm import Generator
    print(f"CPU: {isa.describe()}")
    gen = Generator(cd._folder(args.model), threads=args.threads, eos_token_ids=[])
    gen.generate([1, 2], 2)
    gen.session.wait_tuned()
    cap = 256
    cache = gen._arrays(1, cap)
    n = args.context
    feed = gen._feed(np.array([[5]]), np.array([[n]]), np.array([n + 1]), cache, cap)
    call = gen.session.bind([gen.io.logits], feed)
    for _ in range(5):
        call()
    times = [_timed(call) for _ in range(50)]
    call.close()
    plan = gen.session._plans[tuple(feed[v.name].shape for v in gen.session.graph.inputs)]
    row = 2 * len(gen.io.slots) * gen.io.kv_heads * gen.io.head_size * 4
    nbytes = step_bytes(plan, n + 1, row)
    rate = stream_rate(nbytes)
    step = float(np.median(times))
    print(f"streaming read of {nbytes / 1e6:.1f} MB: {rate / 1e9:.1f} GB/s")
    print(f"decode step: {nbytes / 1e6:.1f} MB in {step * 1e3:.3f} ms = "
          f"{nbytes / step / 1e9:.1f} GB/s, {nbytes / rate / step:.0%} of the roofline "
          f"({args.threads} thread(s), {n} tokens cached)")


if __name__ == "__main__":
    main()
