"""Cold start: a fresh `python -c` from nothing to the first result (import + load + first
run), edgenn (.onnx and pre-converted .enn) vs onnxruntime, median of N processes.
    python scripts/cold_start.py resnet18-op17 [--runs 5]
Caches (Numba, tuning) warm after the first process; pass --cold to wipe them first.
edgenn's bytecode is compiled first (python -m compileall), as a wheel install does: with
PYTHONDONTWRITEBYTECODE set (as in some sandboxes) every process would otherwise recompile
edgenn's sources (~0.15 s) and measure that instead."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from models import ZOO  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("--runs", type=int, default=5)
p.add_argument("--cold", action="store_true", help="empty EDGENN_CACHE_DIR before each run")
args = p.parse_args()
from edgenn.kernels import isa  # noqa: E402
print(f"CPU: {isa.describe()}")   # every figure names the CPU and the kernel tier
path, feeds = ZOO[args.model]()
subprocess.run([sys.executable, "-m", "compileall", "-q",
                os.path.join(os.path.dirname(__file__), "..", "edgenn")], check=True,
               stdout=subprocess.DEVNULL)
tmp = tempfile.mkdtemp()
np.savez(os.path.join(tmp, "feeds.npz"), **feeds)
enn = os.path.join(tmp, "model.enn")
subprocess.run([sys.executable, "-c", f"import edgenn; edgenn.convert({str(path)!r}, {enn!r})"],
               check=True)
PRELUDE = ("import time; t0 = time.perf_counter(); import numpy as np; "
           f"feeds = dict(np.load({os.path.join(tmp, 'feeds.npz')!r})); ")
PROGRAMS = {
    "edgenn .enn": PRELUDE + "import edgenn; s = edgenn.InferenceSession({m!r}); "
                   "s.run(None, feeds); print(time.perf_counter() - t0)".format(m=enn),
    "edgenn .onnx": PRELUDE + "import edgenn; s = edgenn.InferenceSession({m!r}); "
                    "s.run(None, feeds); print(time.perf_counter() - t0)".format(m=str(path)),
    "onnxruntime": PRELUDE + "import onnxruntime as ort; o = ort.SessionOptions(); "
                   "o.intra_op_num_threads = 1; s = ort.InferenceSession({m!r}, o, "
                   "providers=['CPUExecutionProvider']); s.run(None, feeds); "
                   "print(time.perf_counter() - t0)".format(m=str(path)),
}
cache = os.environ.get("EDGENN_CACHE_DIR", os.path.expanduser("~/.cache/edgenn"))
times = {k: [] for k in PROGRAMS}
for _ in range(args.runs):
    for name, code in PROGRAMS.items():
        if args.cold and name.startswith("edgenn"):
            shutil.rmtree(cache, ignore_errors=True)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        times[name].append(float(out.stdout.strip().splitlines()[-1]))
base = np.median(times["onnxruntime"])
print(f"{args.model}: fresh process -> first result, median of {args.runs} "
      f"({'cold' if args.cold else 'warm'} edgenn caches)")
for name, ts in times.items():
    print(f"  {name:14} {np.median(ts) * 1e3:8.0f} ms   {np.median(ts) / base:5.2f}x onnxruntime")
