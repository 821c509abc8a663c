"""Scalable families of real models on this host (issue #12): MobileNetV2 and ResNet-18
(test-suite weights, BatchNorm statistics from real photos; fidelity = output cosine
against the source model on held-out photos) and the PP-OCR mobile direction classifier
(real weights; fidelity = accuracy on held-out text-line crops, upright and rotated) and
the PP-OCRv4 recognizer (real weights; fidelity = agreement of the text it reads, greedy
CTC decoding, 1 - edit distance / length against the source model's reading, on
held-out text lines of a photographed page; its input size, and so its sequence length,
scales) and the PP-OCRv4 text detector (real weights, calibrated on windows of a
photographed book page's upper part; fidelity = IoU of the text mask (probability > 0.3)
with the source model's on windows of its lower part, lines never calibrated on).
Writes OUT/<model>.ennf, OUT/<model>-pareto.png and prints the search table and the
family. A second run over the same inputs is served from the cache (no measuring).

    python tools/scale_report.py mobilenet_v2 resnet18 ppocr_cls --budget 24 --out /tmp/escale
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def photo_data():
    from support.models import imagenet_calibration
    calib = np.concatenate(imagenet_calibration(224))
    held = np.concatenate(imagenet_calibration(224, held_out=True))
    held = np.concatenate([held, held[..., ::-1]])                 # and their mirror images
    return calib, np.ascontiguousarray(held)


def model_and_data(name: str):
    if name == "ppocr_det":
        from support.models import _resize, _rgb, build_all
        from skimage import data
        path = str(build_all(["ppocr_v4_det"], verbose=False).popitem()[1]["path"])

        def det(img):                      # RapidOCR's DetPreProcess at 192x384
            x = (_resize(_rgb(img), (192, 384)) / 255.0 - 0.5) / 0.5
            return np.ascontiguousarray(x.transpose(2, 0, 1), np.float32)
        page = data.page()                 # a photographed book page, 191 x 384
        # calibration: windows of its upper part; held out: of its lower part (the text
        # lines below row 100 are never seen in calibration)
        calib = np.stack([det(page[:100, :200]), det(page[:100, 184:]),
                          det(page[:100, 90:290]), det(page[:100, :])])
        held = np.stack([det(page[100:, :182]), det(page[100:, 202:]),
                         det(page[100:, 100:282]), det(page[100:, :])])
        return path, {"x": calib}, {"x": held}, "iou"
    if name == "ppocr_rec":
        from support.models import _rgb, build_all, ppocr_line_feeds
        from support.quant_data import CALIB_LINES, HELD_OUT_LINES, _crops
        path = str(build_all(["ppocr_v4_rec"], verbose=False).popitem()[1]["path"])

        def lines(names, step):       # text-line windows of the photographed page, 48x320
            return np.concatenate([ppocr_line_feeds(_rgb(c), 48, 320)["x"]
                                   for c in _crops(names, step=step)])
        calib, held = lines(CALIB_LINES, 96)[::3], lines(HELD_OUT_LINES, 48)[::2]
        return path, {"x": calib}, {"x": held}, "text"
    if name == "ppocr_cls":
        from support.quant_data import ppocr_cls_path, text_crops
        calib, _ = text_crops(False, limit=48)
        held, labels = text_crops(True)
        return ppocr_cls_path(), {"x": calib}, {"x": held, "labels": labels}, "accuracy"
    from support.models import build_all
    path = str(build_all([{"mobilenet_v2": "mobilenet_v2-op13",
                           "resnet18": "resnet18-op17"}[name]], verbose=False).popitem()[1]["path"])
    calib, held = photo_data()
    return path, {"input": calib}, {"input": held}, "cosine"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", choices=("mobilenet_v2", "resnet18", "ppocr_cls", "ppocr_rec", "ppocr_det"))
    p.add_argument("--budget", type=int, default=24)
    p.add_argument("--members", type=int, default=6)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default="/tmp/edgenn-scale")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from edgenn import plots
    from edgenn.progress import bars
    from edgenn.scale.build import build
    from edgenn.scale.family import load_family
    for name in args.models:
        model, calib, held, metric = model_and_data(name)
        out = os.path.join(args.out, f"{name}.ennf")
        t0 = time.perf_counter()
        result, doc = build(model, calib, held, output=out, budget=args.budget,
                            members=args.members, threads=args.threads, metric=metric,
                            progress=bars(after_s=0.0))
        print(f"\n== {name}: {time.perf_counter() - t0:.1f} s wall")
        print(result.table())
        fam = load_family(out)
        print(fam.table())
        lat = [m.latency_ms for m in fam.members]
        print(f"members span {max(lat) / min(lat):.2f}x in latency")
        target = float(np.sqrt(min(lat) * max(lat)))
        chosen = fam.choose(latency_ms=target, threads=args.threads)
        print(f"for {target:.2f} ms here: member {chosen.index} ({chosen.describe()})")
        png = plots.plot_pareto(doc["search"], doc["device"],
                                os.path.join(args.out, f"{name}-pareto.png"), name,
                                chosen=json.loads(chosen.factors.key()),
                                members=[json.loads(m.factors.key()) for m in fam.members])
        print(f"wrote {out}, {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
