"""PP-OCR mobile v2 cls (the text-direction classifier rapidocr-onnxruntime ships, real
trained weights) compressed >= 10x with retraining: its 1x1 convs pruned by magnitude,
fine-tuned with the masks held and the weights on the int4 grid (torch_quant) by
distillation from the original (no labels), then weight-only int4 codes (exactly the grid
trained on; --no-qat: chosen by GPTQ after fine-tuning instead) and the compact coded
.enn; size, held-out accuracy and agreement with the original at each step.

Data (tests/support/quant_data.py): held-out = crops of three text lines of skimage's photographed
page, each upright and rotated 180 degrees (the accuracy labels; 186 crops); training
inputs = the page's four other lines, cropped at random widths and offsets with contrast
and noise jitter, and text lines rendered in matplotlib's DejaVu fonts from standard-
library docstrings, both orientations; the targets are the original model's outputs.
The PyTorch form of the model comes from edgenn's own export (BatchNorm folded) through
onnx2torch, which this script needs besides the test extras: pip install onnx2torch.

    python examples/compress_ppocr_cls.py [--sparse 0.8] [--epochs 4] [--block 64]
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.quant_data import (CALIB_LINES, PAGE_LINES, _cls_input,  # noqa: E402
                                ppocr_cls_path, text_crops)

import edgenn  # noqa: E402
from edgenn.compress import torch_masks, torch_quant  # noqa: E402
from edgenn.compress.weights import compress_weights  # noqa: E402
from edgenn.graph import format as enn  # noqa: E402


def torch_model(onnx_path: str, workdir: str):
    """The model as a trainable torch module: edgenn's optimized export (BatchNorm folded
    into the convs), its dynamic flatten (Shape, Slice, Concat, Reshape) made a Flatten,
    then onnx2torch (which reads opsets up to 14-17: every op left is unchanged since)."""
    import onnx
    from onnx import helper
    from onnx2torch import convert
    out = os.path.join(workdir, "cls_opt.onnx")
    subprocess.run([sys.executable, "-m", "edgenn.cli", "export", onnx_path, "-o", out],
                   check=True, capture_output=True)
    m = onnx.load(out)
    nodes, source = [], None
    for n in m.graph.node:
        if n.op_type == "Shape":
            source = n.input[0]
        if n.op_type in ("Shape", "Slice", "Concat", "Cast"):
            continue
        nodes.append(helper.make_node("Flatten", [source], list(n.output), axis=1)
                     if n.op_type == "Reshape" else n)
    ops = {n.op_type for n in nodes}
    assert ops <= {"Conv", "Relu", "HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul",
                   "Add", "MaxPool", "Flatten", "MatMul", "Softmax"}, ops
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    kept = [t for t in m.graph.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    m.opset_import[0].version = 14
    return convert(m).eval()


def _docstring_words() -> list[str]:
    import argparse as a
    import collections
    import json
    import logging
    import pathlib
    import re
    import string
    import textwrap
    words = []
    for mod in (a, collections, json, logging, pathlib, re, string, textwrap, os.path):
        for obj in vars(mod).values():
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                words += [w for w in doc.split() if w.isprintable()]
    return words


def rendered_lines(n: int, seed: int) -> list[np.ndarray]:
    """Text lines rendered in matplotlib's DejaVu fonts (gray uint8, dark on light)."""
    import matplotlib
    from PIL import Image, ImageDraw, ImageFilter, ImageFont
    ttf = os.path.join(os.path.dirname(matplotlib.__file__), "mpl-data", "fonts", "ttf")
    fonts = [os.path.join(ttf, f) for f in ("DejaVuSans.ttf", "DejaVuSerif.ttf",
                                            "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf",
                                            "DejaVuSerif-Italic.ttf", "DejaVuSans-Oblique.ttf")]
    words = _docstring_words()
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        font = ImageFont.truetype(fonts[rng.integers(len(fonts))], int(rng.integers(14, 40)))
        text = " ".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(1, 9))))
        left, top, right, bottom = font.getbbox(text)
        img = Image.new("L", (right - left + 8, bottom - top + 8), int(rng.integers(170, 256)))
        ImageDraw.Draw(img).text((4 - left, 4 - top), text, fill=int(rng.integers(0, 90)),
                                 font=font)
        if rng.random() < 0.5:
            img = img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 1.2)))
        a = np.asarray(img, np.float32)
        a = np.clip(a + rng.normal(0, rng.uniform(0, 12), a.shape), 0, 255).astype(np.uint8)
        width = int(a.shape[0] * 4 * rng.uniform(0.3, 1.6))
        x0 = int(rng.integers(0, max(1, a.shape[1] - width + 1)))
        out.append(a[:, x0:x0 + width])
    return out


def page_lines(n: int, seed: int) -> list[np.ndarray]:
    """Random crops of the page's calibration lines (never the held-out ones), jittered."""
    from skimage import data
    page = data.page().astype(np.float32)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        r0, r1 = PAGE_LINES[CALIB_LINES[rng.integers(len(CALIB_LINES))]]
        dy = int(rng.integers(-2, 3))
        w = int(rng.integers(48, 500))              # wider than the page: the whole line
        x0 = int(rng.integers(0, max(1, page.shape[1] - w)))
        a = page[max(0, r0 + dy):r1 + dy, x0:x0 + w]
        a = (a - a.mean()) * rng.uniform(0.6, 1.3) + a.mean() + rng.uniform(-25, 25)
        a = a + rng.normal(0, rng.uniform(0, 8), a.shape)
        out.append(np.clip(a, 0, 255).astype(np.uint8))
    return out


def both_ways(crops) -> np.ndarray:
    return np.stack([_cls_input(c) for a in crops for c in (a, a[::-1, ::-1])])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sparse", type=float, default=0.8, help="zeros in every 1x1 conv")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--block", type=int, default=64, help="int4 values per scale")
    p.add_argument("--no-qat", dest="qat", action="store_false",
                   help="fine-tune in float, then GPTQ codes (not the trained grid)")
    args = p.parse_args()
    import torch
    torch.manual_seed(0)
    from edgenn.kernels import isa
    t0 = time.perf_counter()
    source = ppocr_cls_path()
    onnx_bytes = os.path.getsize(source)
    work = tempfile.mkdtemp(prefix="edgenn-cls-")
    xc, _ = text_crops(False)
    xh, yh = text_crops(True)
    reference = edgenn.InferenceSession(source).run(None, {"x": xh})[0].argmax(1)
    print(f"CPU: {isa.describe()}; {len(xh)} held-out crops; PP-OCR cls fp32 ONNX "
          f"{onnx_bytes / 1e3:.1f} KB, held-out accuracy {np.mean(reference == yh):.2%}")
    teacher = torch_model(source, work)
    x = np.concatenate([xc, both_ways(rendered_lines(1500, 0)), both_ways(page_lines(2400, 1))])
    rows = []

    def measure(step, graph_or_path, detail=""):
        sess = edgenn.InferenceSession(graph_or_path)
        pred = sess.run(None, {sess.get_inputs()[0].name: xh})[0].argmax(1)
        if isinstance(graph_or_path, str) and not graph_or_path.endswith(".onnx"):
            size = os.path.getsize(graph_or_path)         # the coded .enn as written
        elif graph_or_path == source:
            size = onnx_bytes
        else:       # an exported or in-memory model: as a plain .enn (sparse codec applies)
            size = len(enn.to_bytes(edgenn.load(graph_or_path)
                                    if isinstance(graph_or_path, str) else graph_or_path))
        rows.append((step, size, np.mean(pred == yh), np.mean(pred == reference), detail))

    measure("fp32", source, "the shipped ONNX")
    for dense in (True, False):
        student = copy.deepcopy(teacher)
        masked = {} if dense else torch_masks.apply(student, sparse=args.sparse)
        qat = not dense and args.qat
        if qat:
            torch_quant.apply(student, bits=4, block=args.block)
        torch_masks.distill(student, teacher, x, epochs=args.epochs, lr=args.lr,
                            progress=lambda e, v: print(f"  epoch {e}: loss {v:.4f} "
                                                        f"({time.perf_counter() - t0:.0f} s)"))
        torch_quant.finalize(student)
        torch_masks.finalize(student)
        path = os.path.join(work, f"{'dense' if dense else 'pruned'}.onnx")
        torch.onnx.export(student, (torch.from_numpy(xh[:1]),), path, input_names=["x"],
                          output_names=["y"], opset_version=14, dynamo=False,
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        if dense:
            measure("tuned", path, "dense, fine-tuned the same way (the data's own effect)")
            continue
        measure("pruned", path, f"{len(masked)} 1x1 convs {args.sparse:.0%} zeros, distilled "
                                f"{args.epochs} epochs{' on the int4 grid' if qat else ''}")
        graph = edgenn.load(path)
        if qat:            # the grid trained on: each block's max-abs scale is its own
            r = compress_weights(graph, 4, min_elements=64, block=args.block, fit="maxabs")
        else:
            calib = [{"x": xc[i:i + 34]} for i in range(0, len(xc), 34)]
            r = compress_weights(graph, 4, min_elements=64, calib=calib, block=args.block)
        measure("int4w", graph, f"{r['tensors']} weights int4 "
                                f"({'the trained grid' if qat else 'GPTQ'}), block {args.block}")
        graph.meta["entropy_coding"] = "zstd"
        out = os.path.join(work, "cls.enn")
        edgenn.save(graph, out)
        measure("coded", out, "compact .enn, zstd")
    print(f"\n{'step':8} {'size KB':>8} {'vs ONNX':>8} {'accuracy':>9} {'agreement':>9}  detail")
    for step, size, acc, agree, detail in rows:
        print(f"{step:8} {size / 1e3:8.1f} {onnx_bytes / size:7.2f}x {acc:9.2%} {agree:9.2%}  "
              f"{detail}")
    print(f"({time.perf_counter() - t0:.0f} s; files in {work})")


if __name__ == "__main__":
    main()
