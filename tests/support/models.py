"""The end-to-end test model zoo.

`ZOO` maps a model name to a builder; `ZOO[name](cache_dir=None)` returns
`(onnx_path, feeds)`: the path of an ONNX file and a dict of realistic input arrays
(real images from scikit-image, token ids for the BERT models).

Two kinds of models:
- architectures written here in torch (MobileNetV1/V2/V3-Small, ResNet-18/50,
  SqueezeNet 1.1, ShuffleNetV2, EfficientNet-Lite0, a YOLO-style detector, a
  BERT/MiniLM encoder), with random weights from a fixed seed and BatchNorm running
  statistics calibrated on real images (so they are far from mean 0 / var 1 and a
  Conv+BN fold is really exercised), exported with `torch.onnx.export`;
- the real PP-OCRv4 det/rec and PP-OCR mobile cls models shipped inside the installed
  `rapidocr_onnxruntime` package.

Exported files are cached under `<cache_dir>/<SOURCE_HASH>/<name>.onnx`; SOURCE_HASH is a
hash of this file and of the torch/onnx versions, so any edit here re-exports. The cache
dir is `$EDGENN_TEST_MODELS`, else ~/.cache/edgenn-test-models. torch is imported only
when a model must be exported (it costs seconds to import).

Export settings (torch 2.13): the TorchScript exporter (`dynamo=False`) is still present
and honours opset_version 11..21 exactly; we export with `training=PRESERVE` so that it
keeps BatchNormalization nodes (with the default EVAL it folds them into the Conv
weights). A few `*-dynamo18` entries use the dynamo exporter (torch.export + onnxscript,
its default optimizer on), which cannot go below opset 18.

Run `python tests/models.py [--check-torch] [names...]` to build the zoo one model at a
time and print each model's op types and onnxruntime's time (--check-torch: also compare
onnxruntime with the torch model, i.e. check that the export is faithful).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import math
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

CACHE_ENV = "EDGENN_TEST_MODELS"
SEED = 20240601


class ModelUnavailable(RuntimeError):
    """The model cannot be built on this machine (e.g. an optional package is missing)."""


# ----------------------------------------------------------------------------- helpers

def rel_err(a, b) -> float:
    """max|a - b| / max(max|b|, 1e-12) over the finite values; b is the reference.
    Non-finite values must sit at the same places with the same value (NaN where b has
    NaN, the same infinity), else the error is inf: a NaN never passes a tolerance."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs reference {b.shape}")
    if b.size == 0:
        return 0.0
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fb], b[~fb], equal_nan=True):
        return float("inf")
    if not fb.any():
        return 0.0
    scale = max(float(np.max(np.abs(b[fb]))), 1e-12)
    return float(np.max(np.abs(a[fb] - b[fb])) / scale)


def ort_outputs(path, feeds: dict, threads: int = 1) -> list[np.ndarray]:
    """Run the model in onnxruntime (CPU, graph optimizations off: the literal graph)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def op_types(path) -> dict[str, int]:
    """Op type -> count of nodes in the model's main graph (domain-qualified if not ai.onnx)."""
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    counts: dict[str, int] = {}
    for n in model.graph.node:
        key = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def opset_of(path) -> int:
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    return next(int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx"))


def has_dynamic_inputs(path) -> bool:
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    for v in model.graph.input:
        if v.name in inits:
            continue
        for d in v.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                return True
    return False


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    import onnx
    h = hashlib.sha256(Path(__file__).read_bytes())
    try:
        from importlib.metadata import version
        h.update(version("torch").encode())
    except Exception:
        pass
    h.update(onnx.__version__.encode())
    return h.hexdigest()[:16]


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "edgenn-test-models"


# ----------------------------------------------------------------------------- inputs

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def _resize(img: np.ndarray, hw) -> np.ndarray:
    """uint8 HxW(xC) -> float32 in [0, 255] resized to hw (bilinear, anti-aliased)."""
    from skimage.transform import resize
    out = resize(img.astype(np.float32), tuple(hw) + img.shape[2:], order=1,
                 anti_aliasing=True, preserve_range=True)
    return out.astype(np.float32)


def _rgb(img: np.ndarray) -> np.ndarray:
    return np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img[..., :3]


def imagenet_batch(names=("astronaut",), size=224) -> np.ndarray:
    """skimage.data images, center-cropped square, resized, ImageNet-normalized, NCHW."""
    from skimage import data
    out = []
    for name in names:
        img = _rgb(getattr(data, name)())
        h, w = img.shape[:2]
        s = min(h, w)
        img = img[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
        x = (_resize(img, (size, size)) / 255.0 - IMAGENET_MEAN) / IMAGENET_STD
        out.append(x.transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(out), dtype=np.float32)


# skimage.data color/gray photos for int8 calibration (first 8) and held-out checks (rest)
CALIBRATION_IMAGES = ("astronaut", "coffee", "chelsea", "rocket", "camera",
                      "immunohistochemistry", "hubble_deep_field", "retina",
                      "coins", "clock", "grass", "brick", "cell", "moon", "colorwheel", "gravel")


def imagenet_calibration(size=224, held_out=False) -> list[np.ndarray]:
    """One (1, 3, size, size) batch per image: 8 for calibration, or the 8 held out."""
    names = CALIBRATION_IMAGES[8:] if held_out else CALIBRATION_IMAGES[:8]
    return [imagenet_batch((n,), size) for n in names]


def yolo_batch(names=("astronaut",), size=320) -> np.ndarray:
    """YOLO preprocessing: RGB / 255, letterboxed to size x size with gray (114) bars."""
    from skimage import data
    out = []
    for name in names:
        img = _rgb(getattr(data, name)())
        h, w = img.shape[:2]
        r = size / max(h, w)
        nh, nw = round(h * r), round(w * r)
        canvas = np.full((size, size, 3), 114.0, np.float32)
        top, left = (size - nh) // 2, (size - nw) // 2
        canvas[top:top + nh, left:left + nw] = _resize(img, (nh, nw))
        out.append((canvas / 255.0).transpose(2, 0, 1))
    return np.ascontiguousarray(np.stack(out), dtype=np.float32)


CALIB_IMAGES = ("astronaut", "coffee", "chelsea", "rocket")


def token_batch(lengths, seq_len, vocab, seed, pair=True):
    """BERT inputs: [CLS] a [SEP] b [SEP] + padding; int64 ids, mask and token types."""
    rng = np.random.default_rng(seed)
    b = len(lengths)
    ids = np.zeros((b, seq_len), np.int64)
    mask = np.zeros((b, seq_len), np.int64)
    types = np.zeros((b, seq_len), np.int64)
    for i, n in enumerate(lengths):
        n = min(n, seq_len)
        body = rng.integers(1000, vocab, size=n)   # ids below 1000 are special/unused in BERT
        body[0] = 101                               # [CLS]
        body[n - 1] = 102                           # [SEP]
        if pair and n > 6:
            cut = n // 2
            body[cut] = 102
            types[i, cut + 1:n] = 1
        ids[i, :n] = body
        mask[i, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def ocr_line_crop(which: str) -> np.ndarray:
    """A text line from skimage.data.page() as a 3-channel uint8 image."""
    from skimage import data
    page = data.page()
    crops = {"title": page[2:36, 0:300],          # "Region-based segmentation"
             "line2": page[42:66, 0:384],         # "Let us first determine markers of ..."
             "word": page[42:66, 0:150]}
    return _rgb(crops[which])


def ppocr_det_feeds(hw=(192, 384), image="page") -> dict:
    """RapidOCR DetPreProcess: resize to multiples of 32, x/255, (x-0.5)/0.5, CHW."""
    from skimage import data
    img = _rgb(getattr(data, image)())
    x = (_resize(img, hw) / 255.0 - 0.5) / 0.5
    return {"x": np.ascontiguousarray(x.transpose(2, 0, 1)[None], dtype=np.float32)}


def ppocr_line_feeds(img: np.ndarray, h: int, w: int) -> dict:
    """RapidOCR rec/cls resize_norm_img: height h keeping the ratio, right-padded to w."""
    ih, iw = img.shape[:2]
    rw = min(w, int(math.ceil(h * iw / ih)))
    x = (_resize(img, (h, rw)) / 255.0 - 0.5) / 0.5
    out = np.zeros((1, 3, h, w), np.float32)
    out[0, :, :, :rw] = x.transpose(2, 0, 1)
    return {"x": out}


# ----------------------------------------------------------------------------- torch nets

@functools.lru_cache(maxsize=1)
def nets():
    """The torch architectures, defined on first use so that `import models` stays light."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    def make_divisible(v, divisor=8, min_value=None):
        min_value = min_value or divisor
        new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
        return new_v + divisor if new_v < 0.9 * v else new_v

    class ConvBNAct(nn.Sequential):
        def __init__(self, cin, cout, k=3, s=1, groups=1, act=nn.ReLU, pad=None):
            pad = (k - 1) // 2 if pad is None else pad
            layers = [nn.Conv2d(cin, cout, k, s, pad, groups=groups, bias=False),
                      nn.BatchNorm2d(cout)]
            if act is not None:
                layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish,
                                                           nn.SiLU) else act())
            super().__init__(*layers)

    # ---- MobileNetV1 (Howard et al. 2017): 3x3 conv + 13 depthwise-separable blocks
    class MobileNetV1(nn.Module):
        CFG = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1),
               (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]

        def __init__(self, alpha=1.0, num_classes=1000):
            super().__init__()
            c = int(32 * alpha)
            layers = [ConvBNAct(3, c, 3, 2)]
            for out, s in self.CFG:
                out = int(out * alpha)
                layers += [ConvBNAct(c, c, 3, s, groups=c), ConvBNAct(c, out, 1)]
                c = out
            self.features = nn.Sequential(*layers)
            self.pool = nn.AvgPool2d(7)
            self.fc = nn.Linear(c, num_classes)

        def forward(self, x):
            x = self.pool(self.features(x))
            return self.fc(x.view(x.size(0), -1))

    # ---- MobileNetV2 (torchvision layout)
    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            hidden = int(round(cin * t))
            self.use_res = stride == 1 and cin == cout
            layers = [] if t == 1 else [ConvBNAct(cin, hidden, 1, act=nn.ReLU6)]
            layers += [ConvBNAct(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                       nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res else self.conv(x)

    class MobileNetV2(nn.Module):
        CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
               (6, 160, 3, 2), (6, 320, 1, 1)]

        def __init__(self, width=1.0, num_classes=1000):
            super().__init__()
            c = make_divisible(32 * width)
            last = make_divisible(1280 * max(1.0, width))
            layers = [ConvBNAct(3, c, 3, 2, act=nn.ReLU6)]
            for t, out, n, s in self.CFG:
                out = make_divisible(out * width)
                for i in range(n):
                    layers.append(InvertedResidual(c, out, s if i == 0 else 1, t))
                    c = out
            layers.append(ConvBNAct(c, last, 1, act=nn.ReLU6))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

        def forward(self, x):
            x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(torch.flatten(x, 1))

    # ---- MobileNetV3-Small (torchvision layout: SE with Hardsigmoid, Hardswish)
    class SqueezeExcite(nn.Module):
        def __init__(self, c, squeeze):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(c, squeeze, 1)
            self.relu = nn.ReLU()
            self.fc2 = nn.Conv2d(squeeze, c, 1)
            self.scale_act = nn.Hardsigmoid()

        def forward(self, x):
            s = self.scale_act(self.fc2(self.relu(self.fc1(self.avgpool(x)))))
            return s * x

    class V3Block(nn.Module):
        def __init__(self, cin, k, exp, cout, se, act, s):
            super().__init__()
            self.use_res = s == 1 and cin == cout
            layers = []
            if exp != cin:
                layers.append(ConvBNAct(cin, exp, 1, act=act))
            layers.append(ConvBNAct(exp, exp, k, s, groups=exp, act=act))
            if se:
                layers.append(SqueezeExcite(exp, make_divisible(exp // 4, 8)))
            layers.append(ConvBNAct(exp, cout, 1, act=None))
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return y + x if self.use_res else y

    class MobileNetV3Small(nn.Module):
        CFG = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2),
               (3, 88, 24, False, "RE", 1), (5, 96, 40, True, "HS", 2),
               (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
               (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1),
               (5, 288, 96, True, "HS", 2), (5, 576, 96, True, "HS", 1),
               (5, 576, 96, True, "HS", 1)]

        def __init__(self, width=1.0, num_classes=1000):
            super().__init__()
            c = make_divisible(16 * width)
            layers = [ConvBNAct(3, c, 3, 2, act=nn.Hardswish)]
            for k, exp, out, se, nl, s in self.CFG:
                exp, out = make_divisible(exp * width), make_divisible(out * width)
                layers.append(V3Block(c, k, exp, out, se,
                                      nn.ReLU if nl == "RE" else nn.Hardswish, s))
                c = out
            last = 6 * c
            layers.append(ConvBNAct(c, last, 1, act=nn.Hardswish))
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(last, 1024), nn.Hardswish(inplace=True),
                                            nn.Dropout(0.2), nn.Linear(1024, num_classes))

        def forward(self, x):
            x = self.avgpool(self.features(x))
            return self.classifier(torch.flatten(x, 1))

    # ---- ResNet (torchvision layout)
    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    class ResNet(nn.Module):
        def __init__(self, block, layers, width=1.0, num_classes=1000):
            super().__init__()
            self.cin = int(64 * width)
            self.conv1 = nn.Conv2d(3, self.cin, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.cin)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            self.layer1 = self._layer(block, int(64 * width), layers[0], 1)
            self.layer2 = self._layer(block, int(128 * width), layers[1], 2)
            self.layer3 = self._layer(block, int(256 * width), layers[2], 2)
            self.layer4 = self._layer(block, int(512 * width), layers[3], 2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(self.cin, num_classes)

        def _layer(self, block, planes, n, stride):
            down = None
            if stride != 1 or self.cin != planes * block.expansion:
                down = nn.Sequential(nn.Conv2d(self.cin, planes * block.expansion, 1, stride,
                                               bias=False),
                                     nn.BatchNorm2d(planes * block.expansion))
            blocks = [block(self.cin, planes, stride, down)]
            self.cin = planes * block.expansion
            blocks += [block(self.cin, planes) for _ in range(1, n)]
            return nn.Sequential(*blocks)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    # ---- SqueezeNet 1.1 (no BatchNorm; ceil_mode max pools)
    class Fire(nn.Module):
        def __init__(self, cin, squeeze, e1, e3):
            super().__init__()
            self.squeeze = nn.Conv2d(cin, squeeze, 1)
            self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
            self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            x = self.act(self.squeeze(x))
            return torch.cat([self.act(self.expand1x1(x)), self.act(self.expand3x3(x))], 1)

    class SqueezeNet11(nn.Module):
        def __init__(self, num_classes=1000):
            super().__init__()
            pool = functools.partial(nn.MaxPool2d, 3, 2, ceil_mode=True)
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(),
                Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
                Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(),
                Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
                Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
            self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1),
                                            nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

        def forward(self, x):
            return torch.flatten(self.classifier(self.features(x)), 1)

    # ---- ShuffleNetV2 (torchvision layout: chunk, concat, channel shuffle by view/transpose)
    def channel_shuffle(x, groups):
        b, c, h, w = x.size()
        x = x.view(b, groups, c // groups, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(b, -1, h, w)

    class ShuffleUnit(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            half = cout // 2
            if stride > 1:
                self.branch1 = nn.Sequential(
                    nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                    nn.BatchNorm2d(cin),
                    nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half),
                    nn.ReLU(inplace=True))
            else:
                self.branch1 = nn.Sequential()
            c2 = cin if stride > 1 else half
            self.branch2 = nn.Sequential(
                nn.Conv2d(c2, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True),
                nn.Conv2d(half, half, 3, stride, 1, groups=half, bias=False),
                nn.BatchNorm2d(half),
                nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
            return channel_shuffle(out, 2)

    class ShuffleNetV2(nn.Module):
        WIDTHS = {0.5: [24, 48, 96, 192, 1024], 1.0: [24, 116, 232, 464, 1024]}

        def __init__(self, width=1.0, num_classes=1000):
            super().__init__()
            chans = self.WIDTHS[width]
            self.conv1 = ConvBNAct(3, chans[0], 3, 2)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            c = chans[0]
            stages = []
            for n, out in zip((4, 8, 4), chans[1:4]):
                units = [ShuffleUnit(c, out, 2)] + [ShuffleUnit(out, out, 1) for _ in range(n - 1)]
                stages.append(nn.Sequential(*units))
                c = out
            self.stage2, self.stage3, self.stage4 = stages
            self.conv5 = ConvBNAct(c, chans[4], 1)
            self.fc = nn.Linear(chans[4], num_classes)

        def forward(self, x):
            x = self.maxpool(self.conv1(x))
            x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
            return self.fc(x.mean([2, 3]))

    # ---- EfficientNet-Lite0 (timm tf_efficientnet_lite0: ReLU6, no SE, TF 'same' padding)
    class Conv2dSame(nn.Conv2d):
        """TF 'SAME' padding: asymmetric (more at the end) for stride 2, done with F.pad."""

        def forward(self, x):
            ih, iw = x.shape[-2:]
            kh, kw = self.weight.shape[-2:]
            sh, sw = self.stride
            ph = max((math.ceil(ih / sh) - 1) * sh + kh - ih, 0)
            pw = max((math.ceil(iw / sw) - 1) * sw + kw - iw, 0)
            if ph or pw:
                x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
            return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation,
                            self.groups)

    def conv_same(cin, cout, k, s=1, groups=1, act=True):
        conv = (Conv2dSame(cin, cout, k, s, 0, groups=groups, bias=False) if s > 1
                else nn.Conv2d(cin, cout, k, 1, k // 2, groups=groups, bias=False))
        layers = [conv, nn.BatchNorm2d(cout)] + ([nn.ReLU6(inplace=True)] if act else [])
        return nn.Sequential(*layers)

    class MBConv(nn.Module):
        def __init__(self, cin, cout, k, s, t):
            super().__init__()
            hidden = cin * t
            self.use_res = s == 1 and cin == cout
            layers = [] if t == 1 else [conv_same(cin, hidden, 1)]
            layers += [conv_same(hidden, hidden, k, s, groups=hidden),
                       conv_same(hidden, cout, 1, act=False)]
            self.block = nn.Sequential(*layers)

        def forward(self, x):
            y = self.block(x)
            return y + x if self.use_res else y

    class EfficientNetLite(nn.Module):
        # (expand t, channels, repeats, stride, kernel) for Lite0 (width 1.0, depth 1.0)
        CFG = [(1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5), (6, 80, 3, 2, 3),
               (6, 112, 3, 1, 5), (6, 192, 4, 2, 5), (6, 320, 1, 1, 3)]

        def __init__(self, width=1.0, num_classes=1000):
            super().__init__()
            layers = [conv_same(3, 32, 3, 2)]      # Lite keeps the stem and head fixed
            c = 32
            for t, out, n, s, k in self.CFG:
                out = make_divisible(out * width)
                for i in range(n):
                    layers.append(MBConv(c, out, k, s if i == 0 else 1, t))
                    c = out
            layers.append(conv_same(c, 1280, 1))
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x):
            x = F.adaptive_avg_pool2d(self.features(x), 1)
            return self.classifier(x.flatten(1))

    # ---- a YOLOv8-style backbone/neck (C2f, SPPF, PAN) with a YOLOv5 anchor head
    class YConv(ConvBNAct):
        def __init__(self, cin, cout, k=1, s=1):
            super().__init__(cin, cout, k, s, act=nn.SiLU)

    class YBottleneck(nn.Module):
        def __init__(self, c, shortcut=True):
            super().__init__()
            self.cv1, self.cv2 = YConv(c, c, 3), YConv(c, c, 3)
            self.add = shortcut

        def forward(self, x):
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, cin, cout, n=1, shortcut=False):
            super().__init__()
            self.c = cout // 2
            self.cv1 = YConv(cin, 2 * self.c, 1)
            self.cv2 = YConv((2 + n) * self.c, cout, 1)
            self.m = nn.ModuleList(YBottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x):
            y = list(self.cv1(x).split((self.c, self.c), 1))   # YOLOv8 forward_split
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, cin, cout, k=5):
            super().__init__()
            self.cv1 = YConv(cin, cin // 2, 1)
            self.cv2 = YConv(cin // 2 * 4, cout, 1)
            self.m = nn.MaxPool2d(k, 1, k // 2)

        def forward(self, x):
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Detect(nn.Module):
        ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119],
                   [116, 90, 156, 198, 373, 326]]
        STRIDES = (8, 16, 32)

        def __init__(self, chans, img_size, nc=80):
            super().__init__()
            self.nc, self.no, self.na = nc, nc + 5, 3
            self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in chans)
            for i, s in enumerate(self.STRIDES):
                ny = nx = img_size // s
                yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
                grid = torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float() - 0.5
                anchors = torch.tensor(self.ANCHORS[i], dtype=torch.float32).view(1, 3, 1, 1, 2)
                self.register_buffer(f"grid{i}", grid, persistent=False)
                self.register_buffer(f"anchor_grid{i}", anchors.expand(1, 3, ny, nx, 2).clone(),
                                     persistent=False)

        def forward(self, xs):
            z = []
            for i, x in enumerate(xs):
                x = self.m[i](x)
                bs, _, ny, nx = x.shape
                x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
                y = x.sigmoid()
                xy = (y[..., 0:2] * 2 + getattr(self, f"grid{i}")) * self.STRIDES[i]
                wh = (y[..., 2:4] * 2) ** 2 * getattr(self, f"anchor_grid{i}")
                z.append(torch.cat((xy, wh, y[..., 4:]), -1).view(bs, self.na * nx * ny, self.no))
            return torch.cat(z, 1)

    class TinyYolo(nn.Module):
        def __init__(self, img_size=320, w=16, nc=80):
            super().__init__()
            c1, c2, c3, c4, c5 = w, 2 * w, 4 * w, 8 * w, 16 * w
            self.b0 = nn.Sequential(YConv(3, c1, 3, 2), YConv(c1, c2, 3, 2), C2f(c2, c2, 1, True),
                                    YConv(c2, c3, 3, 2), C2f(c3, c3, 2, True))          # P3
            self.b1 = nn.Sequential(YConv(c3, c4, 3, 2), C2f(c4, c4, 2, True))          # P4
            self.b2 = nn.Sequential(YConv(c4, c5, 3, 2), C2f(c5, c5, 1, True),
                                    SPPF(c5, c5))                                       # P5
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n4 = C2f(c5 + c4, c4)
            self.n3 = C2f(c4 + c3, c3)
            self.d3 = YConv(c3, c3, 3, 2)
            self.p4 = C2f(c3 + c4, c4)
            self.d4 = YConv(c4, c4, 3, 2)
            self.p5 = C2f(c4 + c5, c5)
            self.detect = Detect((c3, c4, c5), img_size, nc)

        def forward(self, x):
            p3 = self.b0(x)
            p4 = self.b1(p3)
            p5 = self.b2(p4)
            n4 = self.n4(torch.cat([self.up(p5), p4], 1))
            o3 = self.n3(torch.cat([self.up(n4), p3], 1))
            o4 = self.p4(torch.cat([self.d3(o3), n4], 1))
            o5 = self.p5(torch.cat([self.d4(o4), p5], 1))
            return self.detect([o3, o4, o5])

    # ---- BERT / MiniLM encoder, written as HF BertModel + sentence-transformers pooling
    class BertEmbeddings(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.word_embeddings = nn.Embedding(cfg["vocab"], cfg["hidden"], padding_idx=0)
            self.position_embeddings = nn.Embedding(cfg["max_pos"], cfg["hidden"])
            self.token_type_embeddings = nn.Embedding(2, cfg["hidden"])
            self.LayerNorm = nn.LayerNorm(cfg["hidden"], eps=1e-12)
            self.dropout = nn.Dropout(0.1)
            self.register_buffer("position_ids", torch.arange(cfg["max_pos"]).expand((1, -1)),
                                 persistent=False)

        def forward(self, input_ids, token_type_ids):
            seq_length = input_ids.size()[1]
            position_ids = self.position_ids[:, 0:seq_length]
            emb = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
                   + self.position_embeddings(position_ids))
            return self.dropout(self.LayerNorm(emb))

    class BertSelfAttention(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.num_attention_heads = cfg["heads"]
            self.attention_head_size = cfg["hidden"] // cfg["heads"]
            self.all_head_size = self.num_attention_heads * self.attention_head_size
            self.query = nn.Linear(cfg["hidden"], self.all_head_size)
            self.key = nn.Linear(cfg["hidden"], self.all_head_size)
            self.value = nn.Linear(cfg["hidden"], self.all_head_size)
            self.dropout = nn.Dropout(0.1)

        def transpose_for_scores(self, x):
            new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
            return x.view(new_x_shape).permute(0, 2, 1, 3)

        def forward(self, hidden_states, attention_mask):
            query_layer = self.transpose_for_scores(self.query(hidden_states))
            key_layer = self.transpose_for_scores(self.key(hidden_states))
            value_layer = self.transpose_for_scores(self.value(hidden_states))
            scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
            scores = scores / math.sqrt(self.attention_head_size)
            scores = scores + attention_mask
            probs = self.dropout(nn.functional.softmax(scores, dim=-1))
            context = torch.matmul(probs, value_layer)
            context = context.permute(0, 2, 1, 3).contiguous()
            new_shape = context.size()[:-2] + (self.all_head_size,)
            return context.view(new_shape)

    class BertSelfOutput(nn.Module):
        def __init__(self, cfg, din):
            super().__init__()
            self.dense = nn.Linear(din, cfg["hidden"])
            self.LayerNorm = nn.LayerNorm(cfg["hidden"], eps=1e-12)
            self.dropout = nn.Dropout(0.1)

        def forward(self, hidden_states, input_tensor):
            return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)

    class BertLayer(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.attention = BertSelfAttention(cfg)
            self.attention_output = BertSelfOutput(cfg, cfg["hidden"])
            self.intermediate = nn.Linear(cfg["hidden"], cfg["intermediate"])
            self.output = BertSelfOutput(cfg, cfg["intermediate"])

        def forward(self, hidden_states, attention_mask):
            attn = self.attention_output(self.attention(hidden_states, attention_mask),
                                         hidden_states)
            inter = nn.functional.gelu(self.intermediate(attn))     # exact (erf) GELU
            return self.output(inter, attn)

    class Bert(nn.Module):
        """Outputs: last_hidden_state, pooler_output (tanh dense on [CLS]) and
        sentence_embedding (masked mean pooling + L2 normalize, as all-MiniLM-L6-v2)."""

        def __init__(self, cfg):
            super().__init__()
            self.embeddings = BertEmbeddings(cfg)
            self.layer = nn.ModuleList(BertLayer(cfg) for _ in range(cfg["layers"]))
            self.pooler = nn.Linear(cfg["hidden"], cfg["hidden"])

        @staticmethod
        def extended_mask(mask, dtype, tgt_len):
            # transformers AttentionMaskConverter._expand_mask
            bsz, src_len = mask.size()
            expanded = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)
            inverted = 1.0 - expanded
            return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.embeddings(input_ids, token_type_ids)
            ext = self.extended_mask(attention_mask, h.dtype, input_ids.size()[1])
            for layer in self.layer:
                h = layer(h, ext)
            pooled = torch.tanh(self.pooler(h[:, 0]))
            m = attention_mask.unsqueeze(-1).expand(h.size()).float()
            mean = torch.sum(h * m, 1) / torch.clamp(m.sum(1), min=1e-9)
            return h, pooled, nn.functional.normalize(mean, p=2, dim=1)

    # ---- CRNN (Shi et al. 2015), edge-sized: a VGG-style CNN pools the 32-pixel height
    #      away, a 2-layer bidirectional LSTM reads the columns, per-column class logits
    #      (CTC, log-softmax), (T, N, classes) with T = W / 4
    class CRNN(nn.Module):
        def __init__(self, classes=97, hidden=128, width=(32, 64, 128, 128)):
            super().__init__()
            c1, c2, c3, c4 = width
            self.cnn = nn.Sequential(
                ConvBNAct(3, c1), nn.MaxPool2d(2, 2),                      # 16 x W/2
                ConvBNAct(c1, c2), nn.MaxPool2d(2, 2),                     # 8 x W/4
                ConvBNAct(c2, c3), ConvBNAct(c3, c3), nn.MaxPool2d((2, 1), (2, 1)),
                ConvBNAct(c3, c4), nn.MaxPool2d((4, 1), (4, 1)))           # 1 x W/4
            self.rnn = nn.LSTM(c4, hidden, num_layers=2, bidirectional=True)
            self.fc = nn.Linear(2 * hidden, classes)

        def forward(self, x):
            f = self.cnn(x).squeeze(2).permute(2, 0, 1)                    # (T, N, C)
            y, _ = self.rnn(f)
            return self.fc(y).log_softmax(-1)

    classes = {k: v for k, v in dict(locals()).items()
               if isinstance(v, type) and issubclass(v, nn.Module)}
    return types.SimpleNamespace(**classes)


def _init_weights(model, seed: int, calib=None, std=None) -> None:
    """Random weights (fixed seed) and BatchNorm statistics taken from real images.

    Conv/Linear: He-normal (or N(0, std) if given, as BERT's initializer_range);
    BN gamma ~ U(0.5, 1.5), beta ~ N(0, 0.2); then one train-mode forward of `calib`
    with momentum=None sets running_mean/var to the actual activation statistics, so
    BN is far from identity but activations stay O(1) through deep nets.
    """
    import torch
    from torch import nn
    g = torch.Generator().manual_seed(seed)
    bns = []
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                s = std if std is not None else math.sqrt(2.0 / fan_in)
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * s)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
            elif isinstance(m, nn.Embedding):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * (std or 1.0))
                if m.padding_idx is not None:
                    m.weight[m.padding_idx].zero_()
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.2 * (torch.rand(m.weight.shape, generator=g) - 0.5))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.05)
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.2)
                m.reset_running_stats()
                m.momentum = None
                bns.append(m)
        if bns:
            model.train()
            model(torch.from_numpy(calib))
            for m in bns:
                m.momentum = 0.1
    model.eval()


# ----------------------------------------------------------------------------- the zoo

@dataclasses.dataclass
class TorchModel:
    """A torch architecture exported to ONNX (cached), with its feeds."""
    name: str
    make: Callable                      # () -> torch.nn.Module (initialized, eval)
    feeds: Callable[[], dict]           # () -> {input name: array}, in forward() order
    opset: int
    output_names: tuple[str, ...] = ("output",)
    dynamo: bool = False
    dynamic_axes: dict | None = None    # legacy exporter: {name: {axis: "dim name"}}
    trace_feeds: Callable[[], dict] | None = None   # example inputs for export if != feeds
    slow: bool = False
    doc: str = ""

    def path(self, cache_dir=None) -> Path:
        return Path(cache_dir or default_cache_dir()) / source_hash() / f"{self.name}.onnx"

    def __call__(self, cache_dir=None):
        path = self.path(cache_dir)
        if not path.exists():
            self.export(path)
        return path, self.feeds()

    def module(self):
        """The initialized torch module (eval mode); the same weights on every call."""
        import torch
        torch.manual_seed(SEED)
        return self.make()

    def torch_outputs(self, feeds: dict) -> list[np.ndarray]:
        """The torch model's outputs on `feeds` (to check that the export is faithful)."""
        import torch
        with _one_torch_thread(), torch.no_grad():
            out = self.module()(*(torch.from_numpy(v) for v in feeds.values()))
        out = out if isinstance(out, tuple) else (out,)
        return [o.numpy() for o in out]

    def export(self, path: Path) -> None:
        import onnx
        import torch
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with _one_torch_thread(), warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            model = self.module()
            example = (self.trace_feeds or self.feeds)()
            args = tuple(torch.from_numpy(v) for v in example.values())
            kw = dict(input_names=list(example), output_names=list(self.output_names),
                      opset_version=self.opset)
            if self.dynamo:
                dyn = None
                if self.dynamic_axes:
                    dyn = {k: {a: torch.export.Dim.AUTO for a in v}
                           for k, v in self.dynamic_axes.items() if k in example}
                torch.onnx.export(model, args, str(tmp), dynamo=True, external_data=False,
                                  dynamic_shapes=dyn, verbose=False, **kw)
            else:
                torch.onnx.export(model, args, str(tmp), dynamo=False,
                                  training=torch.onnx.TrainingMode.PRESERVE,
                                  do_constant_folding=True, dynamic_axes=self.dynamic_axes,
                                  **kw)
        onnx.checker.check_model(str(tmp))
        os.replace(tmp, path)


@contextlib.contextmanager
def _one_torch_thread():
    """torch on 1 thread: the 2-core machine is shared and export is faster so."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@dataclasses.dataclass
class PackagedModel:
    """A real trained model file shipped inside a PyPI package (in the test extras):
    `package`/`subdir`/`filename`."""
    name: str
    filename: str
    feeds: Callable[[], dict]
    slow: bool = False
    doc: str = ""
    package: str = "rapidocr_onnxruntime"     # PP-OCR's det / rec / cls
    subdir: str = "models"

    def __call__(self, cache_dir=None):
        import importlib
        try:
            module = importlib.import_module(self.package)
        except ImportError as exc:
            raise ModelUnavailable(f"{self.package} is not installed") from exc
        path = Path(module.__file__).parent / self.subdir / self.filename
        if not path.exists():
            raise ModelUnavailable(f"{path} is missing")
        return path, self.feeds()


def _vad_feeds(rate=16000, chunk=512, context=64):
    """One silero-vad call: a windowed 220 Hz tone as the chunk after its context, zero
    state (the streaming use on real speech: tests/test_silero_vad.py)."""
    t = np.arange(context + chunk) / rate
    x = (0.3 * np.sin(2 * np.pi * 220 * t) * np.hanning(t.size)).astype(np.float32)
    return {"input": x[None], "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(rate, np.int64)}


def _cnn(name, make, opset, feeds=None, **kw):
    feeds = feeds or (lambda: {"input": imagenet_batch()})
    return TorchModel(name, make, feeds, opset, **kw)


def _classifier(factory, size=224, calib_size=None):
    def make():
        model = factory(nets())
        _init_weights(model, SEED, imagenet_batch(CALIB_IMAGES, calib_size or size))
        return model
    return make


def text_lines(w=320) -> np.ndarray:
    """The three text-line crops of page() at 3 x 32 x w (CRNN's input), one batch."""
    return np.concatenate([ppocr_line_feeds(ocr_line_crop(c), 32, w)["x"]
                           for c in ("title", "line2", "word")])


def _crnn():
    model = nets().CRNN()
    _init_weights(model, SEED, text_lines())   # BN statistics from real text lines
    return model


def _yolo():
    import torch
    model = nets().TinyYolo(img_size=320, w=16)
    _init_weights(model, SEED, yolo_batch(CALIB_IMAGES, 320))
    det = model.detect
    with torch.no_grad():          # YOLOv5 Detect._initialize_biases, small head weights
        for conv, s in zip(det.m, det.STRIDES):
            conv.weight.mul_(0.2)
            b = conv.bias.view(det.na, -1)
            b[:, 4] += math.log(8 / (320 / s) ** 2)        # objectness: ~8 objects per image
            b[:, 5:] += math.log(0.6 / (det.nc - 0.99))     # class priors
    return model


MINILM_L6 = dict(vocab=30522, hidden=384, heads=12, layers=6, intermediate=1536, max_pos=512)
BERT_TINY = dict(vocab=30522, hidden=128, heads=4, layers=2, intermediate=512, max_pos=512)
BERT_AXES = {"input_ids": {0: "batch", 1: "sequence"},
             "attention_mask": {0: "batch", 1: "sequence"},
             "token_type_ids": {0: "batch", 1: "sequence"},
             "last_hidden_state": {0: "batch", 1: "sequence"},
             "pooler_output": {0: "batch"},
             "sentence_embedding": {0: "batch"}}
BERT_OUTPUTS = ("last_hidden_state", "pooler_output", "sentence_embedding")


def _bert(cfg):
    def make():
        model = nets().Bert(cfg)
        _init_weights(model, SEED)
        return model
    return make


def _bert_model(name, cfg, opset, feeds, dynamo=False, slow=False, doc=""):
    return TorchModel(name, _bert(cfg), feeds, opset, BERT_OUTPUTS, dynamo=dynamo,
                      dynamic_axes=BERT_AXES,
                      # trace with another shape than the feeds: dims must really be dynamic
                      trace_feeds=lambda: token_batch([9, 16], 16, cfg["vocab"], 7),
                      slow=slow, doc=doc)


def _tiny_feeds():
    return token_batch([40, 23], 48, BERT_TINY["vocab"], 1)


def _minilm_feeds():
    return token_batch([100], 128, MINILM_L6["vocab"], 2)


_MODELS = [
    _cnn("mobilenet_v1-op11", _classifier(lambda n: n.MobileNetV1(alpha=0.5)), 11,
         doc="MobileNetV1 alpha 0.5, 224, AveragePool 7x7 + Reshape"),
    _cnn("mobilenet_v2-op13", _classifier(lambda n: n.MobileNetV2()), 13,
         doc="MobileNetV2 1.0, 224, ReLU6 as Clip"),
    _cnn("mobilenet_v2-op17", _classifier(lambda n: n.MobileNetV2(width=0.75)), 17,
         doc="MobileNetV2 0.75, 224"),
    _cnn("mobilenet_v2-dynamo18", _classifier(lambda n: n.MobileNetV2()), 18, dynamo=True,
         doc="MobileNetV2 1.0 via the dynamo exporter (Conv+BN folded by onnxscript)"),
    _cnn("mobilenet_v3_small-op13", _classifier(lambda n: n.MobileNetV3Small()), 13,
         doc="MobileNetV3-Small, HardSwish decomposed (no HardSwish op before opset 14)"),
    _cnn("mobilenet_v3_small-op17", _classifier(lambda n: n.MobileNetV3Small()), 17,
         doc="MobileNetV3-Small, HardSwish/HardSigmoid ops, SE blocks"),
    _cnn("resnet18-op11", _classifier(lambda n: n.ResNet(n.BasicBlock, [2, 2, 2, 2])), 11,
         feeds=lambda: {"input": imagenet_batch(("astronaut", "coffee"))},
         doc="ResNet-18, batch 2"),
    _cnn("resnet18-op17", _classifier(lambda n: n.ResNet(n.BasicBlock, [2, 2, 2, 2])), 17),
    _cnn("resnet50-op17", _classifier(lambda n: n.ResNet(n.Bottleneck, [3, 4, 6, 3]),
                                      calib_size=160), 17, slow=True, doc="ResNet-50, 224"),
    _cnn("squeezenet1_1-op11", _classifier(lambda n: n.SqueezeNet11()), 11,
         doc="SqueezeNet 1.1: no BN, ceil_mode MaxPool, Concat"),
    _cnn("shufflenet_v2-op11", _classifier(lambda n: n.ShuffleNetV2(1.0)), 11,
         doc="ShuffleNetV2 1.0: Split (attr), Concat, Reshape/Transpose shuffle"),
    _cnn("shufflenet_v2-op18", _classifier(lambda n: n.ShuffleNetV2(0.5)), 18,
         doc="ShuffleNetV2 0.5: Split with num_outputs, ReduceMean with axes input"),
    _cnn("efficientnet_lite0-op13", _classifier(lambda n: n.EfficientNetLite()), 13,
         doc="EfficientNet-Lite0: ReLU6, no SE, TF-same Pad before stride-2 convs"),
    TorchModel("yolo_tiny-op11", _yolo, lambda: {"images": yolo_batch()}, 11,
               doc="YOLO-style: SiLU, C2f Split, SPPF MaxPool, Resize nearest, head "
                   "Reshape/Transpose/Sigmoid/Slice/Pow, 320x320"),
    TorchModel("yolo_tiny-op18", _yolo, lambda: {"images": yolo_batch(("coffee",))}, 18),
    _bert_model("bert_tiny-op11", BERT_TINY, 11, _tiny_feeds,
                doc="2-layer BERT, hidden 128, decomposed LayerNorm, Unsqueeze axes attr"),
    _bert_model("bert_tiny-op14", BERT_TINY, 14, _tiny_feeds, doc="decomposed LayerNorm"),
    _bert_model("bert_tiny-op17", BERT_TINY, 17, _tiny_feeds, doc="LayerNormalization op"),
    _bert_model("bert_tiny-op20", BERT_TINY, 20, _tiny_feeds, doc="Gelu op"),
    _bert_model("bert_tiny-dynamo18", BERT_TINY, 18, _tiny_feeds, dynamo=True),
    _bert_model("minilm_l6-op17", MINILM_L6, 17, _minilm_feeds, slow=True,
                doc="MiniLM-L6 shape: hidden 384, 12 heads, 6 layers, 128 tokens"),
    _bert_model("minilm_l6-op14", MINILM_L6, 14, _minilm_feeds, slow=True,
                doc="MiniLM-L6, decomposed LayerNorm"),
    TorchModel("crnn_bilstm-op14", _crnn,
               lambda: {"input": ppocr_line_feeds(ocr_line_crop("title"), 32, 320)["x"]}, 14,
               dynamic_axes={"input": {0: "batch", 3: "width"}, "output": {0: "steps", 1: "batch"}},
               doc="CRNN text recognizer: CNN + 2-layer bidirectional LSTM (hidden 128) + "
                   "Linear, a real text line at 1x3x32x320 (80 steps)"),
    PackagedModel("silero_vad", "silero_vad.onnx", _vad_feeds, package="silero_vad",
                  subdir="data", doc="silero-vad v6 (16 kHz / 8 kHz): STFT conv, encoder, "
                  "LSTM decoder inside nested Ifs, a run-time If on the sample rate"),
    PackagedModel("ppocr_v4_det", "ch_PP-OCRv4_det_infer.onnx", ppocr_det_feeds, slow=True,
                  doc="PP-OCRv4 det (DBNet), skimage page() at 1x3x192x384"),
    PackagedModel("ppocr_v4_rec", "ch_PP-OCRv4_rec_infer.onnx",
                  lambda: ppocr_line_feeds(ocr_line_crop("title"), 48, 320),
                  doc="PP-OCRv4 rec (SVTR), a text line at 1x3x48x320"),
    PackagedModel("ppocr_mobile_v2_cls", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  lambda: ppocr_line_feeds(ocr_line_crop("word"), 48, 192),
                  doc="PP-OCR mobile v2.0 direction classifier at 1x3x48x192"),
]

ZOO: dict[str, Callable] = {m.name: m for m in _MODELS}
SLOW = frozenset(m.name for m in _MODELS if m.slow)

# The ops each model is in the zoo for ("-Op": must be absent). A torch upgrade that changes
# what the exporter emits (e.g. folds BatchNormalization away) fails test_zoo_key_ops.
_CNN_BN = {"Conv", "BatchNormalization"}
KEY_OPS: dict[str, set[str]] = {
    "crnn_bilstm-op14": _CNN_BN | {"LSTM", "MaxPool", "Squeeze", "Transpose", "LogSoftmax"},
    "mobilenet_v1-op11": _CNN_BN | {"AveragePool", "Reshape", "Gemm"},
    "mobilenet_v2-op13": _CNN_BN | {"Clip", "Add", "GlobalAveragePool", "Flatten"},
    "mobilenet_v2-op17": _CNN_BN | {"Clip"},
    "mobilenet_v2-dynamo18": {"Conv", "Clip", "ReduceMean", "-BatchNormalization"},
    "mobilenet_v3_small-op13": _CNN_BN | {"HardSigmoid", "Mul", "-HardSwish"},
    "mobilenet_v3_small-op17": _CNN_BN | {"HardSwish", "HardSigmoid", "GlobalAveragePool"},
    "resnet18-op11": _CNN_BN | {"MaxPool", "Add", "Relu"},
    "resnet18-op17": _CNN_BN | {"MaxPool", "Add"},
    "resnet50-op17": _CNN_BN | {"MaxPool", "Add"},
    "squeezenet1_1-op11": {"Conv", "Concat", "MaxPool", "-BatchNormalization"},
    "shufflenet_v2-op11": _CNN_BN | {"Slice", "Concat", "Reshape", "Transpose", "ReduceMean"},
    "shufflenet_v2-op18": _CNN_BN | {"Slice", "Concat", "Reshape", "Transpose", "ReduceMean"},
    "efficientnet_lite0-op13": _CNN_BN | {"Pad", "Clip"},
    "yolo_tiny-op11": _CNN_BN | {"Resize", "Split", "Slice", "Sigmoid", "Transpose", "Pow"},
    "yolo_tiny-op18": _CNN_BN | {"Resize", "Split", "Slice", "Sigmoid", "Transpose", "Pow"},
    "bert_tiny-op11": {"Gather", "Where", "Expand", "Cast", "Erf", "Softmax", "Shape",
                       "Unsqueeze", "Concat", "Reshape", "ReduceMean", "-LayerNormalization"},
    "bert_tiny-op14": {"Erf", "ReduceMean", "Pow", "Sqrt", "-LayerNormalization"},
    "bert_tiny-op17": {"LayerNormalization", "Erf", "Where", "Shape", "Reshape"},
    "bert_tiny-op20": {"LayerNormalization", "Gelu", "-Erf"},
    "bert_tiny-dynamo18": {"LayerNormalization", "MatMul", "Softmax"},
    "minilm_l6-op17": {"LayerNormalization", "Erf", "Where", "Shape", "Reshape"},
    "minilm_l6-op14": {"ReduceMean", "Erf", "-LayerNormalization"},
}

# Other input shapes for models with symbolic dims: a session must rebind its plan.
ALT_FEEDS: dict[str, Callable[[], dict]] = {
    "bert_tiny-op17": lambda: token_batch([13, 7, 20], 20, BERT_TINY["vocab"], 3),
    "bert_tiny-dynamo18": lambda: token_batch([13, 7, 20], 20, BERT_TINY["vocab"], 3),
    "crnn_bilstm-op14": lambda: {"input": text_lines(256)},
    "silero_vad": lambda: _vad_feeds(8000, 256, 32),
    "ppocr_v4_det": lambda: ppocr_det_feeds((224, 448)),   # (text() at 160x448: no text found)
    "ppocr_v4_rec": lambda: {"x": np.concatenate(
        [ppocr_line_feeds(ocr_line_crop(c), 48, 480)["x"] for c in ("title", "line2")])},
    "ppocr_mobile_v2_cls": lambda: {"x": np.concatenate(
        [ppocr_line_feeds(ocr_line_crop(c), 48, 192)["x"] for c in ("word", "title", "line2")])},
}


def prune_cache(cache_dir, keep: int = 3) -> None:
    """Mark this version's cache dir as used; delete all but the `keep` latest used ones.

    Every edit of this file makes a new ~600 MB version dir, so old ones must go.
    """
    import shutil
    import time
    cache_dir = Path(cache_dir)
    mine = cache_dir / source_hash()
    mine.mkdir(parents=True, exist_ok=True)
    (mine / ".last_used").write_text(str(time.time()))
    versions = []
    for d in cache_dir.iterdir():
        if d.is_dir() and len(d.name) == 16 and all(ch in "0123456789abcdef" for ch in d.name):
            stamp = d / ".last_used"
            versions.append((stamp.stat().st_mtime if stamp.exists() else d.stat().st_mtime, d))
    for _, d in sorted(versions, reverse=True)[keep:]:
        if d != mine:
            shutil.rmtree(d, ignore_errors=True)


@dataclasses.dataclass
class Case:
    """A built zoo model: its file, its feeds and (lazily) onnxruntime's outputs."""
    name: str
    path: Path
    feeds: dict
    dynamic: bool                       # some input dim is symbolic in the file
    _expected: list | None = None

    @property
    def expected(self) -> list[np.ndarray]:
        if self._expected is None:
            self._expected = ort_outputs(self.path, self.feeds)
        return self._expected

    @property
    def input_shapes(self) -> dict | None:
        """What to pass as InferenceSession(input_shapes=...) to bind symbolic dims."""
        return {k: tuple(v.shape) for k, v in self.feeds.items()} if self.dynamic else None


class ZooCache:
    """Builds each zoo model once per process (export on first use), one at a time."""

    def __init__(self, cache_dir=None, keep: int = 3):
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self._cases: dict[str, Case] = {}
        prune_cache(self.cache_dir, keep)

    def __call__(self, name: str) -> Case:
        if name not in self._cases:
            path, feeds = ZOO[name](self.cache_dir)
            self._cases[name] = Case(name, Path(path), feeds, has_dynamic_inputs(path))
        return self._cases[name]


def build_all(names=None, cache_dir=None, verbose=True, check_torch=False) -> dict:
    """Build (export if needed) the zoo one model at a time; returns per-model info.

    check_torch: also run each torch model and report rel_err(onnxruntime, torch).
    """
    import time
    info = {}
    for name in names or ZOO:
        entry = ZOO[name]
        t0 = time.perf_counter()
        path, feeds = entry(cache_dir)
        t1 = time.perf_counter()
        outs = ort_outputs(path, feeds)
        t2 = time.perf_counter()
        i = info[name] = dict(path=str(path), opset=opset_of(path), ops=op_types(path),
                              build_s=t1 - t0, ort_s=t2 - t1,
                              inputs={k: (v.shape, str(v.dtype)) for k, v in feeds.items()},
                              outputs=[o.shape for o in outs],
                              size_mb=os.path.getsize(path) / 1e6)
        if check_torch and isinstance(entry, TorchModel):
            i["torch_rel_err"] = [rel_err(o, r) for o, r in zip(outs, entry.torch_outputs(feeds))]
        if verbose:
            print(f"{name}: opset {i['opset']}, {i['size_mb']:.1f} MB, build {i['build_s']:.1f}s, "
                  f"ort {i['ort_s']:.2f}s, in {i['inputs']}, out {i['outputs']}"
                  + (f", ort-vs-torch {['%.1e' % e for e in i['torch_rel_err']]}"
                     if "torch_rel_err" in i else "")
                  + f"\n    {i['ops']}", flush=True)
    return info


if __name__ == "__main__":
    args = sys.argv[1:]
    check = "--check-torch" in args
    build_all([a for a in args if not a.startswith("--")] or None, check_torch=check)
