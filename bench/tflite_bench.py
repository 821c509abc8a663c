"""edgenn vs LiteRT on the mediapipe .tflite models and the fully integer test models
(tests/support/int8_tflite_models.py: MobileNetV2's shapes, int8 with int8 or float I/O), side by
side (interleaved rounds, medians), on real photos; prints the CPU, the tier and a
markdown table.

    python bench/tflite_bench.py [--threads 1] [--rounds 30] [--only int8]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.int8_tflite_models import model as int8_model  # noqa: E402
from support.int8_tflite_models import quantize_input  # noqa: E402
from support.mediapipe_models import MODELS, image_input, path  # noqa: E402

from edgenn.bench import edgenn_runner, interleave, litert_runner  # noqa: E402
from edgenn.kernels import isa  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--only", choices=["float", "int8"], default=None)
    args = ap.parse_args()
    print(f"{isa.describe()}; {args.threads} thread(s), {args.rounds} interleaved rounds")
    print("| model | edgenn ms | LiteRT ms | edgenn / LiteRT |")
    print("|---|---|---|---|")
    models = {} if args.only == "int8" else {n: str(path(n)) for n in sorted(MODELS)}
    if args.only != "float":
        tmp = tempfile.mkdtemp()
        for io in ("int8", "float"):
            p = os.path.join(tmp, f"mobilenet_v2_int8_{io}_io.tflite")
            with open(p, "wb") as f:
                f.write(int8_model("mobilenet_v2", io=io))
            models[f"MobileNetV2 int8 ({io} I/O)"] = p
    from edgenn.api import InferenceSession
    for name, p in models.items():
        ours = edgenn_runner(p, args.threads, None)
        theirs = litert_runner(p, args.threads)
        sess = InferenceSession(p)
        feeds = {a.name: quantize_input(image_input(tuple(a.shape)), _detail(p, a.name))
                 for a in sess.get_inputs()}
        interleave([ours, theirs], feeds, args.rounds)
        a, b = np.median(ours.times) * 1e3, np.median(theirs.times) * 1e3
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)


def _detail(p: str, name: str) -> dict:
    from ai_edge_litert.interpreter import Interpreter
    return next(d for d in Interpreter(model_path=p).get_input_details() if d["name"] == name)


if __name__ == "__main__":
    main()
