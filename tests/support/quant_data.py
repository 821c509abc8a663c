"""Real data for the quantizer's validation: the digits CNN's held-out images and text-line
crops for the PP-OCR mobile direction classifier (cls); token batches for BERT-style models.

Text crops: windows of several widths slid along the text lines of skimage.data.page()
(a photographed book page), each also rotated by 180 degrees, preprocessed as RapidOCR's
cls does (height 48 keeping the aspect ratio, right-padded to 192, (x/255 - 0.5)/0.5).
Labels: 0 = upright, 1 = rotated 180 degrees (the cls model's two classes). Calibration
and held-out crops come from different lines, so no held-out window was seen in
calibration.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from edgenn.demo import DEMO_MODEL, DEMO_SAMPLES

# rows of skimage.data.page() holding one text line each (title, five body lines, code)
PAGE_LINES = {"title": (2, 36), "l1": (44, 68), "l2": (62, 86), "l3": (80, 104),
              "l4": (98, 122), "l5": (116, 140), "code": (167, 191)}
CALIB_LINES = ("title", "l1", "l3", "l5")
HELD_OUT_LINES = ("l2", "l4", "code")
WIDTHS = (96, 160, 240, 384)


def digits(n_calib: int = 100):
    """(calibration images, held-out images, held-out labels) of the demo digits CNN."""
    d = np.load(DEMO_SAMPLES)
    x, y = d["images"], d["labels"]
    return x[:n_calib], x[n_calib:], y[n_calib:]


def _crops(lines, step: int = 48):
    from skimage import data
    page = data.page()
    out = []
    for name in lines:
        r0, r1 = PAGE_LINES[name]
        row = page[r0:r1]
        for w in WIDTHS:
            for x0 in range(0, max(1, page.shape[1] - w + 1), step if w < 384 else 1):
                out.append(row[:, x0:x0 + w])
    return out


def _cls_input(crop: np.ndarray) -> np.ndarray:
    from .models import ppocr_line_feeds, _rgb
    return ppocr_line_feeds(_rgb(crop), 48, 192)["x"][0]


@lru_cache(maxsize=None)
def text_crops(held_out: bool = False, limit: int | None = None):
    """(x (N, 3, 48, 192) float32, labels (N,) int64): each crop upright, then rotated."""
    crops = _crops(HELD_OUT_LINES, step=24) if held_out else _crops(CALIB_LINES)
    if limit:
        idx = np.linspace(0, len(crops) - 1, limit).round().astype(int)
        crops = [crops[i] for i in idx]
    xs, ys = [], []
    for c in crops:
        xs += [_cls_input(c), _cls_input(c[::-1, ::-1])]
        ys += [0, 1]
    return np.stack(xs).astype(np.float32), np.array(ys, np.int64)


def ppocr_cls_path() -> str:
    import rapidocr_onnxruntime
    return os.path.join(os.path.dirname(rapidocr_onnxruntime.__file__), "models",
                        "ch_ppocr_mobile_v2.0_cls_infer.onnx")


def ort_int8(model: str, calibration: list[dict]) -> str:
    """onnxruntime's quantize_static (quant_pre_process, then QDQ, per-channel s8 weights,
    u8 activations, min-max) on the same calibration feeds; cached (edgenn.bench)."""
    from edgenn.bench import onnxruntime_int8_model
    return onnxruntime_int8_model(model, calibration)


__all__ = ["digits", "text_crops", "ppocr_cls_path", "ort_int8", "DEMO_MODEL"]


def token_calibration(feeds: dict, count: int = 8) -> list[dict]:
    """Calibration batches for a BERT-style model: `count` token batches shaped and padded
    like `feeds` (seeds 100.., never the measured batch itself; vocabulary: the largest
    id in feeds)."""
    from .models import token_batch
    ids = feeds["input_ids"]
    lengths = [int(m.sum()) for m in feeds["attention_mask"]]
    vocab = int(ids.max()) + 1
    return [token_batch(lengths, ids.shape[1], vocab, 100 + i) for i in range(count)]
