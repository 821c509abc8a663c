"""The int8 quantizer on real trained models with real data: every method side by side
with onnxruntime's quantizer.

Models and data (tests/support/quant_data.py):
  digits   the demo CNN (edgenn/models/digits.onnx); calibration: the first 100 of the 297
           held-out digit images; evaluation: the other 197 (labels: accuracy).
  ppocr-cls  PP-OCR mobile v2 direction classifier (rapidocr_onnxruntime); calibration:
           136 text-line crops (4 lines of skimage's page, upright + rotated 180);
           evaluation: 186 crops of 3 other lines (label: upright / rotated).
For each: fp32 accuracy; per method the int8 accuracy, top-1 agreement with fp32, mean
output cosine, SQNR, time to quantize; "kl+fidelity" = kl with fidelity=0.99 (sensitive
layers kept fp32); "ORT q" = onnxruntime.quantization.quantize_static (QDQ, per-channel
QInt8 weights, QUInt8 activations, min-max, same calibration batches), run by onnxruntime
and by edgenn (the same QDQ model through fuse_qdq: the quantizer's choices without
onnxruntime's int8 runtime). The speed check is off here: every row is the all-int8
model of its method (a timing-dependent fp32 layer would blur the comparison).

    python tools/quant_report.py [digits] [ppocr-cls] [--reference] [--layers]
                                   [--weight-bits 8]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support import quant_data  # noqa: E402

import edgenn  # noqa: E402
from edgenn.quant.accuracy import format_report, report  # noqa: E402
from edgenn.quant.metrics import compare  # noqa: E402

METHODS = ("minmax", "percentile", "kl", "admm", "auto")


def cases():
    def digits():
        calib, x, y = quant_data.digits()
        return (quant_data.DEMO_MODEL, "image",
                [{"image": calib[i:i + 32]} for i in range(0, len(calib), 32)], x, y)

    def ppocr_cls():
        xc, _ = quant_data.text_crops()
        x, y = quant_data.text_crops(held_out=True)
        return (quant_data.ppocr_cls_path(), "x",
                [{"x": xc[i:i + 16]} for i in range(0, len(xc), 16)], x, y)
    return {"digits": digits, "ppocr-cls": ppocr_cls}


def ort_rows(path, name, calib, x, y, reference):
    """onnxruntime's quantizer: its model run by onnxruntime, and the same QDQ model run
    by edgenn (fuse_qdq), which separates the quantizer's choices from the runtime."""
    import onnxruntime as ort
    t0 = time.perf_counter()
    q = quant_data.ort_int8(path, calib)
    dt = time.perf_counter() - t0
    s32 = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    s8 = ort.InferenceSession(q, providers=["CPUExecutionProvider"])
    a, b = s32.run(None, {name: x})[0], s8.run(None, {name: x})[0]
    rows = [("ORT q, ORT run", dict(compare([[a]], [[b]])[0],
                                    acc=float(np.mean(b.argmax(1) == y)), seconds=dt))]
    c = edgenn.InferenceSession(q, reference=reference).run(None, {name: x})[0]
    rows.append(("ORT q, edgenn run", dict(compare([[a]], [[c]])[0],
                                           acc=float(np.mean(c.argmax(1) == y)), seconds=dt)))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cases", nargs="*", default=["digits", "ppocr-cls"])
    p.add_argument("--reference", action="store_true",
                   help="run the int8 models on the reference kernels")
    p.add_argument("--layers", action="store_true", help="also print the per-layer table "
                   "of kl+fidelity")
    p.add_argument("--weight-bits", type=int, default=7, choices=(7, 8))
    args = p.parse_args()
    for case in args.cases:
        path, name, calib, x, y = cases()[case]()
        print(f"\n== {case}: {os.path.basename(str(path))}, {sum(len(c[name]) for c in calib)} "
              f"calibration inputs, {len(x)} held-out, {args.weight_bits}-bit weights "
              f"(depthwise 8)")
        print(f"{'method':18} {'acc fp32':>9} {'acc int8':>9} {'top-1 agree':>11} "
              f"{'cosine':>8} {'worst':>7} {'SQNR dB':>8} {'quantize s':>10}")
        rows = [(m, dict(method=m)) for m in METHODS] + \
            [("kl+fidelity", dict(method="kl", fidelity=0.99)),
             ("kl+fid .999", dict(method="kl", fidelity=0.999)),
             ("kl+fid .999+8bit", dict(method="kl", fidelity=0.999, bits8_first=True))]
        last = None
        for label, kw in rows:
            t0 = time.perf_counter()
            g = edgenn.quantize(str(path), calib, weight_bits=args.weight_bits,
                                speed_check=False, **kw)
            dt = time.perf_counter() - t0
            rep = report(str(path), g, [({name: x}, y)], reference=args.reference,
                         layers=args.layers and label == "kl+fidelity")
            m = next(iter(rep["outputs"].values()))
            acc = rep["accuracy"]
            extra = ""
            mixed = g.meta["quantization"].get("mixed_precision")
            if mixed:
                n8 = len(mixed.get("bits8_layers") or ())
                extra = f"  ({len(mixed['fp32_layers'])} layers fp32" + \
                    (f", {n8} with 8-bit weights)" if n8 else ")")
            print(f"{label:18} {acc['fp32']:9.2%} {acc['int8']:9.2%} {m['top1']:11.2%} "
                  f"{m['cosine']:8.5f} {m['cosine_min']:7.4f} {m['sqnr_db']:8.1f} "
                  f"{dt:10.1f}{extra}")
            last = rep
        for label, o in ort_rows(str(path), name, calib, x, y, args.reference):
            print(f"{label:18} {'':9} {o['acc']:9.2%} {o['top1']:11.2%} "
                  f"{o['cosine']:8.5f} {o['cosine_min']:7.4f} {o['sqnr_db']:8.1f} "
                  f"{o['seconds']:10.1f}")
        if args.layers and last is not None:
            print()
            print(format_report(last))


if __name__ == "__main__":
    main()
