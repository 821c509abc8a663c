"""Entropy coding of real weights: bits per weight against the empirical entropy, per coder.

For each model, the weights are coded as edgenn stores them (weight-only int8 per channel,
int4 in blocks of 32: compress/weights.py; or the int8 layers of an already quantized
.enn), then each integer blob is coded by zstd (what .enn uses), LZMA (stdlib) and, if
installed, constriction's ANS with the tensor's own categorical model (its frequency table
counted in its size): total and worst-tensor ratio to the entropy, decode throughput.

    python tools/entropy_report.py                         # the PP-OCR models rapidocr ships
    python tools/entropy_report.py model.onnx model.int8.enn --bits 8
"""
import argparse
import glob
import lzma
import os
import time

import numpy as np

import edgenn
from edgenn.compress.entropy_report import entropy_report
from edgenn.compress.weights import compress_weights
from edgenn.graph import entropy
from edgenn.graph import format as enn


def _default_models():
    import rapidocr_onnxruntime
    root = os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models")
    return sorted(glob.glob(os.path.join(root, "*.onnx")))


def _blobs(graph):
    """The integer blobs .enn would entropy-code: (name, uint8 bytes)."""
    graph.meta.pop("entropy_coding", None)
    for name, entry, arrays in enn.stored_entries(graph):
        for key in entry["blobs"].values():
            if entropy.codable(arrays[key]):
                yield name, np.ascontiguousarray(arrays[key]).view(np.uint8).reshape(-1)


def _lzma(b):
    f = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "lc": 0, "lp": 0, "pb": 0}]
    c = lzma.compress(b.tobytes(), format=lzma.FORMAT_RAW, filters=f)
    return len(c), lambda: lzma.decompress(c, format=lzma.FORMAT_RAW, filters=f)


def _zstd(b):
    c = entropy.encode(b)
    if c is None:                       # not smaller: .enn keeps it raw
        return b.size, lambda: None
    z = entropy._zstd()
    return len(c), lambda: z.decompress(c)


def _ans(b):
    import constriction
    x = b.astype(np.int32)
    lo, hi = int(x.min()), int(x.max())
    counts = np.bincount(x - lo, minlength=hi - lo + 1)
    model = constriction.stream.model.Categorical(counts / counts.sum(), perfect=False)
    enc = constriction.stream.stack.AnsCoder()
    enc.encode_reverse(x - lo, model)
    c = enc.get_compressed()
    size = c.nbytes + 4 * int(np.count_nonzero(counts)) + 2     # (symbol, count) table
    return size, lambda: constriction.stream.stack.AnsCoder(c).decode(model, x.size)


CODERS = {"zstd": _zstd, "lzma": _lzma, "ans": _ans}


def report(path, bits):
    graph = edgenn.load(path)
    if path.endswith(".onnx"):
        compress_weights(graph, bits)
    blobs = list(_blobs(graph))
    raw = sum(b.size for _, b in blobs)
    ent = {n: entropy.entropy_bits(b, 4 if bits == 4 and path.endswith(".onnx") else 8) / 8
           for n, b in blobs}
    total_h = sum(ent.values())
    label = f"weight-only int{bits}" if path.endswith(".onnx") else "stored int8"
    print(f"{os.path.basename(path)} ({label}): {len(blobs)} coded blobs, {raw / 1e6:.2f} MB; "
          f"entropy {8 * total_h / raw:.3f} bits per stored byte")
    for coder, fn in CODERS.items():
        try:
            sizes, decoders = zip(*(fn(b) for _, b in blobs))
        except ImportError:
            print(f"  {coder:5} (not installed)")
            continue
        t0 = time.perf_counter()
        for d in decoders:
            d()
        dt = time.perf_counter() - t0
        ratios = [s / ent[n] for s, (n, b) in zip(sizes, blobs) if ent[n]]
        big = [r for r, (n, b) in zip(ratios, blobs) if b.size >= 65536]
        print(f"  {coder:5} {sum(sizes) / total_h:.4f}x entropy in all; worst tensor "
              f"{max(ratios):.3f}x (of >= 64 KB: {max(big, default=float('nan')):.3f}x); "
              f"decode {raw / dt / 1e6:6.0f} MB/s")
    graph.meta["entropy_coding"] = "zstd"
    print("  " + entropy_report(graph).table(0).replace("\n", "\n  "))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*")
    p.add_argument("--bits", type=int, nargs="+", default=[8, 4])
    args = p.parse_args()
    from edgenn.kernels import isa
    print(f"CPU: {isa.describe()}")
    for path in args.models or _default_models():
        for bits in args.bits if path.endswith(".onnx") else [8]:
            report(path, bits)


if __name__ == "__main__":
    main()
