"""Time to the first result: a fresh process from nothing (import + load + first run),
edgenn against onnxruntime, median of N processes, the runtimes interleaved.

    python bench/cold_start.py mobilenet_v2-op13 resnet18-op17 [--runs 5] [--threads 1]
    python bench/cold_start.py resnet18-op17:int8       # onnxruntime's QDQ model, both

edgenn is timed from .onnx with an empty tuning cache (a new machine: the first plan from
the cost model, tuning left to the background), from .onnx with a warm cache (`edgenn
tune` ran before: here a first process with tune="cached") and from .enn with a warm
cache. ":int8" runs onnxruntime's static QDQ
quantization of the model (what a user brings) through both. edgenn's bytecode is
compiled first (python -m compileall), as a wheel install does.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO, imagenet_calibration  # noqa: E402

TIMER = "import time; t0 = time.perf_counter(); import numpy as np; "
EDGENN = (TIMER + "feeds = dict(np.load({feeds!r})); import edgenn; "
          "s = edgenn.InferenceSession({model!r}, threads={threads}); s.run(None, feeds); "
          "print(time.perf_counter() - t0)")
ORT = (TIMER + "feeds = dict(np.load({feeds!r})); import onnxruntime as ort; "
       "o = ort.SessionOptions(); o.intra_op_num_threads = {threads}; "
       "s = ort.InferenceSession({model!r}, o, providers=['CPUExecutionProvider']); "
       "s.run(None, feeds); print(time.perf_counter() - t0)")


def prepare(name: str, tmp: str):
    """-> (.onnx path, .enn path, feeds path)."""
    base, _, kind = name.partition(":")
    path, feeds = ZOO[base]()
    path = str(path)
    if kind == "int8":
        from edgenn.bench import onnxruntime_int8_model
        (input_name, x), = feeds.items()
        path = onnxruntime_int8_model(path, [{input_name: b}
                                             for b in imagenet_calibration(x.shape[-1])])
    feeds_path = os.path.join(tmp, f"{base}-{kind}.feeds.npz")
    np.savez(feeds_path, **feeds)
    enn = os.path.join(tmp, f"{base}-{kind}.enn")
    subprocess.run([sys.executable, "-c", f"import edgenn; edgenn.convert({path!r}, {enn!r})"],
                   check=True)
    return path, enn, feeds_path


def run(code: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    return float(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    from edgenn.kernels import isa
    print(f"CPU: {isa.describe()}")          # every figure names the CPU and the kernel tier
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    os.path.join(os.path.dirname(__file__), "..", "edgenn")], check=True,
                   stdout=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="edgenn-cold-")
    env = {k: v for k, v in os.environ.items() if k != "EDGENN_TUNE"}
    rows = []
    for name in args.models:
        onnx_path, enn, feeds = prepare(name, tmp)
        warm = dict(env, EDGENN_CACHE_DIR=os.path.join(tmp, "warm-" + name))
        fill = dict(feeds=feeds, threads=args.threads)
        for path in (onnx_path, enn):      # tuned ahead, as `edgenn tune` does
            run(EDGENN.format(model=path, **fill), dict(warm, EDGENN_TUNE="cached"))
        programs = {
            "empty": (EDGENN.format(model=onnx_path, **fill), None),
            "warm": (EDGENN.format(model=onnx_path, **fill), warm),
            "enn": (EDGENN.format(model=enn, **fill), warm),
            "onnxruntime": (ORT.format(model=onnx_path, **fill), env),
        }
        times = {k: [] for k in programs}
        for r in range(args.runs):
            for key, (code, e) in programs.items():
                if e is None:   # a new, empty tuning cache for every run
                    e = dict(env, EDGENN_CACHE_DIR=os.path.join(tmp, f"empty-{name}-{r}"))
                times[key].append(run(code, e))
        rows.append((name, {k: float(np.median(v)) for k, v in times.items()}))
    print(f"\nfresh process -> first result, {args.threads} thread(s), median of {args.runs}"
          f" processes (import + load + first run)")
    print(f"| model | edgenn .onnx, empty tuning cache | edgenn .onnx, warm cache | "
          f"edgenn .enn | onnxruntime |")
    print("|---|---|---|---|---|")
    for name, t in rows:
        o = t["onnxruntime"]
        print(f"| {name} | {t['empty']:.3f} s ({t['empty'] / o:.2f}x) | {t['warm']:.3f} s "
              f"({t['warm'] / o:.2f}x) | {t['enn']:.3f} s ({t['enn'] / o:.2f}x) | {o:.3f} s |")


if __name__ == "__main__":
    main()
