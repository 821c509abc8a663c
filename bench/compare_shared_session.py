"""Throughput of one 1-thread session shared by several caller threads, edgenn and
onnxruntime side by side (interleaved rounds, medians).

    python bench/compare_shared_session.py mobilenet_v2-op13 minilm_l6-op17
    python bench/compare_shared_session.py --callers 2 --int8 mobilenet_v2-op13

Each round: `calls` runs by 1 caller, then the same number split over `callers` threads
calling the same session at once; throughput = calls / wall time. The scaling column is
(throughput with N callers) / (throughput with 1): it needs the kernels to release the GIL
and the session to let calls run side by side (execution contexts).
"""
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from support.models import ZOO, imagenet_calibration  # noqa: E402

from edgenn import bench  # noqa: E402


def throughput(run, feeds, callers: int, calls: int) -> float:
    """calls / second with `callers` threads sharing `run`."""
    per = calls // callers
    start = threading.Barrier(callers + 1)

    def caller():
        start.wait()
        for _ in range(per):
            run(feeds)
    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return per * callers / (time.perf_counter() - t0)


def runners(name: str, int8: bool):
    path, feeds = ZOO[name]()
    shapes = {k: v.shape for k, v in feeds.items()}
    if not int8:
        return feeds, [bench.edgenn_runner(str(path), 1, shapes),
                       bench.onnxruntime_runner(str(path), 1, shapes)]
    import edgenn
    (inp, x), = feeds.items()
    calib = [{inp: b} for b in imagenet_calibration(x.shape[-1])]
    mine = edgenn.InferenceSession(edgenn.quantize(str(path), calib), threads=1)
    ort = bench.onnxruntime_runner(bench.onnxruntime_int8_model(str(path), calib), 1)
    r = bench.Runner("edgenn-int8", lambda f: mine.run(None, f), 0.0)
    ort.name = "ort-int8"
    return feeds, [r, ort]


def main():
    args = bench.script_args(__doc__.splitlines()[0], callers=2, calls=40, int8=False)
    for name in args.models:
        feeds, rs = runners(name, args.int8)
        res = {r.name: {1: [], args.callers: []} for r in rs}
        for r in rs:                                   # warm-up (plans, contexts)
            throughput(r.run, feeds, args.callers, args.callers * 2)
        for _ in range(args.rounds):
            for r in rs:
                for n in (1, args.callers):
                    res[r.name][n].append(throughput(r.run, feeds, n, args.calls))
        print(f"\n{name}{' int8' if args.int8 else ''}: one session (threads=1), "
              f"{args.calls} calls per measure, median of {args.rounds} interleaved rounds")
        print(f"{'runtime':14} {'1 caller/s':>11} {f'{args.callers} callers/s':>12} "
              f"{'scaling':>8}")
        for r in rs:
            one = float(np.median(res[r.name][1]))
            many = float(np.median(res[r.name][args.callers]))
            print(f"{r.name:14} {one:11.1f} {many:12.1f} {many / one:7.2f}x")


if __name__ == "__main__":
    main()
