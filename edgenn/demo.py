"""`edgenn demo`: the main job on the embedded default model, stage by stage.

The model is a small residual CNN trained on scikit-learn's 8x8 digits
(tools/make_demo_model.py); it ships in the package with 297 held-out test images.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

MODELS = os.path.join(os.path.dirname(__file__), "models")
DEMO_MODEL = os.path.join(MODELS, "digits.onnx")
# the same model converted (tools/make_demo_model.py; tests/project/test_lean_install.py checks
# it against a fresh conversion)
DEMO_ENN = os.path.join(MODELS, "digits.enn")
DEMO_SAMPLES = os.path.join(MODELS, "digits_samples.npz")


def _stage(name: str, t0: float) -> float:
    t = time.perf_counter()
    print(f"  [{(t - t0) * 1e3:8.1f} ms] {name}")
    return t


def main(threads: int = 1) -> int:
    from .api import InferenceSession
    from .tools import describe, rel_err

    print(f"edgenn demo: {os.path.basename(DEMO_MODEL)} "
          f"({os.path.getsize(DEMO_MODEL) / 1e3:.0f} kB ONNX), {threads} thread(s)")
    samples = np.load(DEMO_SAMPLES)
    images, labels = samples["images"], samples["labels"]
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        from .api import convert
        enn_path = os.path.join(tmp, "digits.enn")
        graph = convert(DEMO_MODEL, enn_path)
        t = _stage(f"convert + optimize -> .enn ({os.path.getsize(enn_path) / 1e3:.0f} kB,"
                   f" {len(graph.nodes)} nodes from {graph.meta.get('source_nodes')})", t)
        sess = InferenceSession(enn_path, threads=threads, input_shapes={"image": images.shape})
        t = _stage("load .enn + plan (kernels chosen, memory planned)", t)
        (probs,) = sess.run(None, {"image": images})
        t = _stage(f"first run: {len(images)} images", t)
        if sess.wait_tuned(10):
            t = _stage("kernels tuned in the background, tuned plan swapped in", t)
        else:
            t = _stage("kernels still tuning in the background (the machine is busy)", t)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            sess.run(None, {"image": images})
            times.append(time.perf_counter() - t0)
        t = _stage(f"5 more runs, median {np.median(times) * 1e3:.2f} ms per batch", t)
        accuracy = float(np.mean(probs.argmax(1) == labels))
        try:
            import onnxruntime as ort
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            ref = ort.InferenceSession(DEMO_MODEL, opts, providers=["CPUExecutionProvider"])
            err = rel_err(probs, ref.run(None, {"image": images})[0])
            _stage(f"check against onnxruntime: max relative error {err:.2e}", t)
        except ImportError:
            err = 0.0
            print("  (onnxruntime not installed: skipped the side-by-side check)")
        print()
        print(describe(enn_path))
    print()
    print(f"accuracy on {len(labels)} held-out digits: {accuracy:.2%}")
    for img, p in list(zip(images, probs))[:3]:
        print(_ascii(img[0]), f"-> {int(p.argmax())} (p={p.max():.2f})")
    return 0 if err <= 1e-4 else 1


def _ascii(img: np.ndarray) -> str:
    ramp = " .:-=+*#%@"
    return "\n".join("".join(ramp[min(int(v * 9.99), 9)] * 2 for v in row) for row in img)
