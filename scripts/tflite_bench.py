"""edgenn vs LiteRT on the mediapipe .tflite models, side by side (interleaved rounds,
medians), on real photos; prints the CPU, the tier and a markdown table.

    python scripts/tflite_bench.py [--threads 1] [--rounds 30]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from mediapipe_models import MODELS, image_input, path  # noqa: E402

from edgenn.bench import edgenn_runner, interleave, litert_runner  # noqa: E402
from edgenn.kernels import isa  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    print(f"{isa.describe()}; {args.threads} thread(s), {args.rounds} interleaved rounds")
    print("| model | edgenn ms | LiteRT ms | edgenn / LiteRT |")
    print("|---|---|---|---|")
    for name in sorted(MODELS):
        p = str(path(name))
        ours = edgenn_runner(p, args.threads, None)
        theirs = litert_runner(p, args.threads)
        from edgenn.api import InferenceSession
        sess = InferenceSession(p)
        feeds = {a.name: image_input(tuple(a.shape)) for a in sess.get_inputs()}
        interleave([ours, theirs], feeds, args.rounds)
        a, b = np.median(ours.times) * 1e3, np.median(theirs.times) * 1e3
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f} |", flush=True)


if __name__ == "__main__":
    main()
