"""Multi-thread latency, one runtime per fresh process (in one process, the runtimes'
thread pools spin and starve each other, so interleaving is only fair at 1 thread).

    python bench/compare_processes.py --threads 2 mobilenet_v2-op13 resnet18-op17
    python bench/compare_processes.py --threads 2 --int8 mobilenet_v2-op13
    python bench/compare_processes.py --threads 2 --repeats 5 mobilenet_v2-op13     # A B A B ...

Runtimes: edgenn, onnxruntime, mnn (fp32); with --int8 also edgenn-int8 (its own
quantizer), onnxruntime-int8 (quantize_static QDQ) and mnn-int8 (its own quantizer, Session
API), all calibrated on the same images; or any of them listed in --runtimes. Ratios are to
the first runtime listed, with each pair of processes run back to back.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = r"""
import json, os, sys, time
import numpy as np
sys.path.insert(0, os.path.join({here!r}, "..", "tests"))
from support.models import IMAGENET_MEAN, IMAGENET_STD, ZOO, imagenet_calibration
from edgenn import bench
name, runtime, threads, rounds = {name!r}, {runtime!r}, {threads}, {rounds}
path, feeds = ZOO[name]()
shapes = {{k: v.shape for k, v in feeds.items()}}
if runtime.endswith("-int8"):
    (inp, x), = feeds.items()
    calib = [{{inp: b}} for b in imagenet_calibration(x.shape[-1])]
    if runtime == "edgenn-int8":
        import edgenn
        int8 = os.path.join({tmp!r}, name + ".int8.enn")
        if not os.path.exists(int8):
            edgenn.save(edgenn.quantize(str(path), calib), int8)
        runner = bench.edgenn_runner(int8, threads, shapes)
    elif runtime == "mnn-int8":
        model = bench.mnn_int8_model(str(path), [c[inp] for c in calib], IMAGENET_MEAN,
                                     IMAGENET_STD)
        runner = bench.mnn_session_runner(model, threads)
    else:
        runner = bench.onnxruntime_runner(bench.onnxruntime_int8_model(str(path), calib), threads)
elif runtime == "edgenn":
    runner = bench.edgenn_runner(str(path), threads, shapes)
else:
    runner = bench.PEERS[runtime](str(path), threads, shapes)
bench.interleave([runner], feeds, rounds, warmup=5)
print("RESULT", json.dumps(runner.times))
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--int8", action="store_true")
    p.add_argument("--repeats", type=int, default=1,
                   help="processes per runtime, alternated (A B A B ...): on a shared "
                        "machine the second core's availability drifts over minutes")
    p.add_argument("--runtimes", default="edgenn,onnxruntime,mnn")
    args = p.parse_args()
    from edgenn.kernels import isa  # noqa: E402
    print(f"CPU: {isa.describe()}")   # every figure names the CPU and the kernel tier
    runtimes = args.runtimes.split(",") + (["edgenn-int8", "onnxruntime-int8", "mnn-int8"]
                                             if args.int8 else [])
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "edgenn-compare")
    os.makedirs(tmp, exist_ok=True)
    import numpy as np
    for name in args.models:
        print(f"\n== {name}: {args.threads} thread(s), {args.repeats} process(es) per runtime "
              f"alternated, median of {args.rounds} runs each after 5 warm-up runs")
        per_process: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            for rt in runtimes:
                ms = _one_process(rt, name, args, tmp)
                if ms is not None:
                    per_process.setdefault(rt, []).append(ms)
        rows = {rt: float(np.median(v)) for rt, v in per_process.items()}
        first = runtimes[0]                    # the ratios' base: the first runtime listed
        base = rows.get(first)
        for rt, ms in rows.items():
            ratio = f"{ms / base:6.2f}x" if base else ""
            spread = per_process[rt]
            span = f"  (processes: {min(spread):.2f}-{max(spread):.2f})" if len(spread) > 1 else ""
            if len(spread) > 1 and base:
                best = min(spread) / min(per_process[first])
                span += f"  best {min(spread):.2f} = {best:.2f}x"
            print(f"{rt:18} {ms:9.2f} ms  {ratio} of {first}{span}")
            if len(spread) > 1:
                print(f"{'':18} each process, in order: {' '.join(f'{x:.2f}' for x in spread)}")
            if rt != first and base and len(spread) > 1:
                # process k of each runtime ran back to back: a ratio per such pair sees
                # the same state of the shared machine, where the medians above mix states
                pairs = [b / a for a, b in zip(per_process[first], spread)]
                print(f"{'':18} paired ratio (same minute): median {np.median(pairs):.3f}, "
                      f"range {min(pairs):.2f}-{max(pairs):.2f}")


def _one_process(rt, name, args, tmp):
    """Median ms of one fresh process running `rt`, or None (printed) when it failed."""
    import numpy as np
    code = CHILD.format(here=HERE, name=name, runtime=rt, threads=args.threads,
                        rounds=args.rounds, tmp=tmp)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not line:
        print(f"{rt:18} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
        return None
    return float(np.median(json.loads(line[0][7:]))) * 1e3


if __name__ == "__main__":
    main()
