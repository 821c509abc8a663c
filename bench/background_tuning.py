"""The background tuner seen from the caller: a session made with an empty tuning cache
(tune="background", the default) is called from N threads back to back from its first
second; per call, its latency and which plan ran. Prints how long until the tuned plan
was swapped in, each phase's median and 95th-percentile latency against the first
plan's and the tuned plan's own (timed alone, interleaved, same process).

    python bench/background_tuning.py resnet18-op17 mobilenet_v2-op13 [--callers 1]
        [--seconds 40] [--pause-ms 0]

--pause-ms: each caller sleeps that long between calls (an app's idle time). With as
many callers as cores and no pause, the tuner waits: it times only on a free core.
"""
import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO  # noqa: E402

import edgenn  # noqa: E402
from edgenn.kernels import isa  # noqa: E402
from edgenn.runtime import session as session_module  # noqa: E402


def alone(plans: dict, feeds: list, names: list, rounds: int = 20) -> dict:
    times = {k: [] for k in plans}
    for _ in range(rounds):
        for k, plan in plans.items():
            t0 = time.perf_counter()
            session_module._run(plan, 1, feeds, names)
            times[k].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--callers", type=int, default=1)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--pause-ms", type=float, default=0.0)
    args = p.parse_args()
    print(f"CPU: {isa.describe()}; {args.callers} caller(s), 1 thread each, "
          f"pause {args.pause_ms} ms between calls")
    os.environ.pop("EDGENN_TUNE", None)
    for name in args.models:
        os.environ["EDGENN_CACHE_DIR"] = tempfile.mkdtemp(prefix="edgenn-bg-")
        path, feeds = ZOO[name]()
        t_start = time.perf_counter()
        sess = edgenn.InferenceSession(str(path), input_shapes={k: v.shape
                                                                for k, v in feeds.items()})
        first = sess.plan
        ready = time.perf_counter() - t_start
        log, stop = [], threading.Event()

        def caller():
            while not stop.is_set():
                plan = next(iter(sess._plans.values()))
                t0 = time.perf_counter()
                sess.run(None, feeds)
                log.append((t0 - t_start, time.perf_counter() - t0, plan is first))
                if args.pause_ms:
                    time.sleep(args.pause_ms / 1e3)

        threads = [threading.Thread(target=caller) for _ in range(args.callers)]
        for t in threads:
            t.start()
        swapped = None
        while time.perf_counter() - t_start < args.seconds:
            if swapped is None and sess.plan is not first:
                swapped = time.perf_counter() - t_start
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join()
        tuned = sess.plan
        names = [v.name for v in sess.graph.outputs]
        x = [feeds[v.name] for v in sess.graph.inputs]
        base = alone({"first": first, "tuned": tuned}, x, names)
        on_first = [d for _, d, f in log if f]
        on_tuned = [d for _, d, f in log if not f]
        print(f"\n{name}: ready in {ready:.2f} s; tuned plan swapped in at "
              f"{swapped if swapped is None else round(swapped, 1)} s; "
              f"{len(log)} calls")
        print(f"  alone, interleaved: first plan {base['first'] * 1e3:.2f} ms, tuned "
              f"{base['tuned'] * 1e3:.2f} ms ({base['first'] / base['tuned']:.3f}x)")
        for label, d in (("while tuning (first plan)", on_first),
                         ("after the swap (tuned plan)", on_tuned)):
            if d:
                print(f"  {label}: median {np.median(d) * 1e3:.2f} ms "
                      f"({np.median(d) / base['first']:.3f}x first plan alone), "
                      f"95th pct {np.percentile(d, 95) * 1e3:.2f} ms "
                      f"({np.percentile(d, 95) / base['first']:.3f}x), n={len(d)}")


if __name__ == "__main__":
    main()
