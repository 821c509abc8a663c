"""Run small models under valgrind memcheck and report every error or leak whose stack
passes through edgenn's C kernels (edgenn/kernels/<family>/*.so).

    apt-get install valgrind
    EDGENN_DEBUG_BUILD=1 python setup.py build_ext --inplace --force   # file:line in stacks
    python tools/memcheck.py                   # exit 1 on any finding in edgenn's code

valgrind has no AVX-512, so its virtual CPU shows AVX2 and the kernels run their AVX2 and
portable tiers (each tier's C is checked by running it here; EDGENN_MAX_ISA=scalar for the
portable one). The workload: the digits CNN fp32 and int8, a conv / depthwise / pool /
gemm net, an attention block (row ops), every kernel candidate of each heavy node timed
by the tuner (tune="full"), several runs each, concurrent callers included.
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = r"""
import sys, threading
import numpy as np
sys.path.insert(0, {fuzz!r})
import edgenn, seeds
from edgenn.demo import DEMO_MODEL
x = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"][:4]
fp32 = edgenn.InferenceSession(DEMO_MODEL, tune="full")
int8 = edgenn.InferenceSession(edgenn.quantize(DEMO_MODEL, [{{"image": x}}]), tune="full")
m = seeds.tiny_models()
cnn = edgenn.InferenceSession(m["cnn"].SerializeToString(), tune="full")
attn = edgenn.InferenceSession(m["attn"].SerializeToString(), tune="full")
jobs = [(fp32, {{"image": x}}), (int8, {{"image": x}}),
        (cnn, {{"x": np.ones((2, 3, 16, 16), np.float32)}}),
        (attn, {{"x": np.ones((1, 7, 8), np.float32)}})]
def work():
    for s, f in jobs:
        for _ in range(3):
            s.run(None, f)
ts = [threading.Thread(target=work) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
kernels = sorted({{st.choice.kernel for s, _ in jobs for st in s.plan.steps}})
print("KERNELS", " ".join(kernels))
"""
OURS = re.compile(r"edgenn/kernels/\w+/_\w+\.cpython")


def main() -> int:
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "workload.py")
        with open(script, "w") as f:
            f.write(WORKLOAD.format(fuzz=os.path.join(HERE, "..", "fuzz")))
        log = os.path.join(tmp, "vg.log")
        env = dict(os.environ, PYTHONMALLOC="malloc", EDGENN_CACHE_DIR=tmp)
        r = subprocess.run(["valgrind", "--error-limit=no", "--leak-check=full",
                            "--show-leak-kinds=definite,indirect", "--num-callers=40",
                            f"--log-file={log}", python, script], env=env,
                           capture_output=True, text=True)
        text = open(log).read()
    print(r.stdout.strip())
    if r.returncode != 0:
        print(r.stderr[-3000:])
        return 1
    records = re.split(r"\n==\d+== \n", text)
    ours = [rec for rec in records if OURS.search(rec)
            and re.search(r"Invalid|uninitialised|Mismatched|definitely|indirectly|overlap",
                          rec)]
    summary = [line for line in text.splitlines() if "ERROR SUMMARY" in line]
    print(f"valgrind: {len(records)} records in all (Python / numpy / glibc start-up "
          f"included); {len(ours)} with edgenn's C kernels on the stack")
    for rec in ours[:10]:
        print(rec[:3000])
    print(summary[-1] if summary else "")
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
