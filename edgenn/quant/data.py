"""Calibration and evaluation data: every accepted form becomes a list of feed dicts.

Accepted forms (`load_batches`):
  - a feed dict {input name: array}, or an array (single-input models);
  - a Python iterable of those (each one batch; an array one rank short is one sample);
  - a .npy / .npz file, or a folder of them (each file one batch; sorted by name). In a
    .npz the arrays are named like the inputs; a single-input model also takes an .npz
    with one array of another name. A key "labels" (or "label", "y") gives class labels;
  - a folder of images plus an `ImageSpec` (size, mean, std, layout, channel order,
    resize mode), read with Pillow or imageio, whichever is installed (neither is a
    dependency of edgenn).
A single array (or file) with more rows than `batch_size` is split into batches along
axis 0 when the model's batch dim is free; a fixed batch dim b splits into batches of b.
Single samples (arrays one rank short, images) are stacked into batches of that size.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError

IMAGE_EXTS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")
LABEL_KEYS = ("labels", "label", "y")
DEFAULT_BATCH = 32


@dataclass
class Batches:
    """Feed dicts (one per batch) and, when the data carried them, labels per batch."""
    feeds: list[dict]
    labels: list[np.ndarray | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.feeds)

    @property
    def all_labels(self) -> np.ndarray | None:
        if not self.labels or any(lab is None for lab in self.labels):
            return None
        return np.concatenate([np.asarray(lab).reshape(-1) for lab in self.labels])

    def split(self, held_out: float = 0.2) -> tuple["Batches", "Batches"]:
        """(calibration, held-out): the last ~`held_out` of the batches are held out
        (at least one); a single batch is split along axis 0 when it has 2+ rows."""
        feeds, labels = self.feeds, self.labels or [None] * len(self.feeds)
        if len(feeds) == 1:
            n = _rows(feeds[0])
            if n < 2:
                return self, self
            cut = max(1, int(round(n * (1 - held_out))))
            cut = min(cut, n - 1)
            f0, l0 = feeds[0], labels[0]
            a = Batches([{k: v[:cut] for k, v in f0.items()}], [None if l0 is None else l0[:cut]])
            b = Batches([{k: v[cut:] for k, v in f0.items()}], [None if l0 is None else l0[cut:]])
            return a, b
        k = max(1, int(round(len(feeds) * held_out)))
        return (Batches(feeds[:-k], labels[:-k]), Batches(feeds[-k:], labels[-k:]))


def _rows(feed: dict) -> int:
    return min(int(v.shape[0]) if v.ndim else 1 for v in feed.values())


@dataclass
class ImageSpec:
    """How to turn an image file into a model input.

    size: (height, width) of the input (default: the model input's static H, W).
    mean, std: per channel, applied to pixel / 255 (ImageNet defaults; PP-OCR uses 0.5).
    layout: "NCHW" or "NHWC". channels: "RGB", "BGR" or "L" (grey).
    resize: "stretch" to size, or "pad": scale to the height keeping the aspect ratio
        (width capped), then pad right/bottom with zeros after normalization (PP-OCR)."""
    size: tuple[int, int] | None = None
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    layout: str = "NCHW"
    channels: str = "RGB"
    resize: str = "stretch"

    def __post_init__(self):
        if self.layout not in ("NCHW", "NHWC"):
            raise InputError(f"image layout must be NCHW or NHWC, got {self.layout!r}")
        if self.channels not in ("RGB", "BGR", "L"):
            raise InputError(f"image channels must be RGB, BGR or L, got {self.channels!r}")
        if self.resize not in ("stretch", "pad"):
            raise InputError(f"image resize must be 'stretch' or 'pad', got {self.resize!r}")


def load_batches(data, inputs, batch_size: int | None = None,
                 image_spec: ImageSpec | None = None) -> Batches:
    """Normalize `data` (module doc) into Batches for a model with `inputs` (ValueInfos)."""
    if data is None:
        raise InputError("no calibration data given")
    out = Batches([], [])
    pending: list[tuple[dict, np.ndarray | None]] = []  # single samples, stacked in batches

    def flush():
        if pending:
            feed = {k: np.concatenate([f[k] for f, _ in pending]) for k in pending[0][0]}
            labs = [lab for _, lab in pending]
            label = None if any(lab is None for lab in labs) else \
                np.concatenate([np.asarray(lab).reshape(-1) for lab in labs])
            out.feeds.append(feed)
            out.labels.append(label)
            pending.clear()

    limit = _batch_limit(inputs, batch_size)
    for item, label in _items(data, inputs, image_spec):
        feed, found, sample = _feed(item, inputs)
        label = found if label is None else label
        if sample:
            if pending and (len(pending) >= limit or any(
                    pending[0][0][k].shape[1:] != v.shape[1:] for k, v in feed.items())):
                flush()
            pending.append((feed, label))
            continue
        flush()
        for part, lab in _split_rows(feed, label, inputs, batch_size):
            out.feeds.append(part)
            out.labels.append(lab)
    flush()
    if not out.feeds:
        raise InputError(f"the calibration data {_describe(data)} holds no batches")
    return out


def _describe(data) -> str:
    return repr(data) if isinstance(data, (str, os.PathLike)) else type(data).__name__


def _items(data, inputs, image_spec):
    """Yield (array or dict, labels or None) from any accepted form."""
    if isinstance(data, (str, os.PathLike)):
        yield from _path_items(os.fspath(data), inputs, image_spec)
        return
    if isinstance(data, (dict, np.ndarray)):
        yield data, None
        return
    try:
        iterator = iter(data)
    except TypeError:
        raise InputError(f"calibration data must be feed dicts, arrays, an iterable of "
                         f"them, or a path; got {type(data).__name__}") from None
    for item in iterator:
        if isinstance(item, tuple) and len(item) == 2:  # (feed, labels)
            yield item[0], np.asarray(item[1])
        else:
            yield item, None


def _path_items(path: str, inputs, image_spec):
    if os.path.isfile(path):
        yield _load_array_file(path), None
        return
    if not os.path.isdir(path):
        raise InputError(f"calibration data {path!r}: no such file or directory")
    names = sorted(os.listdir(path))
    arrays = [n for n in names if n.lower().endswith((".npy", ".npz"))]
    images = [n for n in names if n.lower().endswith(IMAGE_EXTS)]
    if arrays and images:
        raise InputError(f"{path!r} mixes .npy/.npz files and images; keep one kind")
    if arrays:
        for n in arrays:
            yield _load_array_file(os.path.join(path, n)), None
        return
    if images:
        spec = image_spec or ImageSpec()
        for n in images:
            yield _image_feed(os.path.join(path, n), spec, inputs), None
        return
    raise InputError(f"{path!r} holds no .npy, .npz or image files")


def _load_array_file(path: str):
    try:
        if path.lower().endswith(".npz"):
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path!r}: {exc}") from exc


def _feed(item, inputs) -> tuple[dict, np.ndarray | None, bool]:
    """One item -> ({input name: array of the input's dtype}, labels found in it,
    whether it was a single sample, one rank short)."""
    names = [v.name for v in inputs]
    labels = None
    if isinstance(item, dict):
        item = dict(item)
        for key in LABEL_KEYS:
            if key in item and key not in names:
                labels = np.asarray(item.pop(key))
                break
        if len(names) == 1 and names[0] not in item and len(item) == 1:
            item = {names[0]: next(iter(item.values()))}
        missing = [n for n in names if n not in item]
        extra = [k for k in item if k not in names]
        if missing or extra:
            raise InputError(f"calibration feed has arrays {sorted(item)}; the model's "
                             f"inputs are {names} (missing {missing}, unknown {extra})")
    else:
        if len(names) != 1:
            raise InputError(f"the model has {len(names)} inputs {names}: give feed dicts "
                             f"(or .npz files with those names), not bare arrays")
        item = {names[0]: item}
    feed = {}
    sample = False
    for v in inputs:
        x = np.asarray(item[v.name])
        if x.ndim == len(v.shape) - 1:  # one sample
            x = x[None]
            sample = True
        if x.ndim != len(v.shape):
            raise InputError(f"calibration array for input {v.name!r} has shape {x.shape}; "
                             f"the model expects rank {len(v.shape)} {tuple(v.shape)}")
        if x.dtype.name != v.dtype:
            if x.dtype.kind not in "fiub":
                raise InputError(f"calibration array for input {v.name!r} is {x.dtype}, "
                                 f"the model expects {v.dtype}")
            x = x.astype(v.dtype)
        feed[v.name] = np.ascontiguousarray(x)
    return feed, labels, sample


def _batch_limit(inputs, batch_size) -> int:
    fixed = {v.shape[0] for v in inputs if v.shape and isinstance(v.shape[0], int)
             and v.shape[0] > 0}
    return next(iter(fixed)) if len(fixed) == 1 else (batch_size or DEFAULT_BATCH)


def _split_rows(feed: dict, labels, inputs, batch_size):
    """Split a large feed into batches along axis 0 (all inputs together)."""
    fixed = {v.shape[0] for v in inputs if v.shape and isinstance(v.shape[0], int)
             and v.shape[0] > 0}
    n = _rows(feed)
    size = _batch_limit(inputs, batch_size)
    if fixed and n % size:
        raise InputError(f"the model's batch dim is fixed to {size}; the calibration data "
                         f"has {n} rows, not a multiple of it")
    if any(v.shape[0] != n for v in feed.values() if v.ndim) or n <= size:
        yield feed, labels
        return
    for start in range(0, n, size):
        part = {k: v[start:start + size] for k, v in feed.items()}
        yield part, None if labels is None else labels[start:start + size]


# -- images -------------------------------------------------------------------------------
def _read_image(path: str) -> np.ndarray:
    """(H, W, C) or (H, W) uint8 via Pillow or imageio (whichever is installed)."""
    try:
        from PIL import Image
    except ImportError:
        Image = None
    try:
        if Image is not None:
            with Image.open(path) as im:
                return np.asarray(im.convert("RGB") if im.mode not in ("L", "RGB") else im)
        import imageio.v3 as iio
        return np.asarray(iio.imread(path))
    except ImportError:
        raise InputError("reading image folders needs Pillow or imageio "
                         "(pip install pillow); or give .npy/.npz files") from None
    except Exception as exc:  # noqa: BLE001 - any decoder error names the file
        raise InputError(f"cannot read image {path!r}: {exc}") from exc


def resize_bilinear(img: np.ndarray, h: int, w: int) -> np.ndarray:
    """(H, W, C) float -> (h, w, C), bilinear with half-pixel centres (no antialiasing)."""
    ih, iw = img.shape[:2]

    def axis(n_out, n_in):
        x = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        x = np.clip(x, 0, n_in - 1)
        x0 = np.floor(x).astype(np.int64)
        x1 = np.minimum(x0 + 1, n_in - 1)
        return x0, x1, (x - x0).astype(np.float32)

    y0, y1, fy = axis(h, ih)
    x0, x1, fx = axis(w, iw)
    fy, fx = fy[:, None, None], fx[None, :, None]
    top = img[y0][:, x0] * (1 - fx) + img[y0][:, x1] * fx
    bottom = img[y1][:, x0] * (1 - fx) + img[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def preprocess_image(img: np.ndarray, spec: ImageSpec, size: tuple[int, int]) -> np.ndarray:
    """uint8 image -> one normalized sample in the spec's layout, (C, H, W) or (H, W, C)."""
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    img = img[:, :, :3].astype(np.float32)
    if spec.channels == "L":
        img = img.mean(axis=2, keepdims=True) if img.shape[2] == 3 else img
    else:
        if img.shape[2] == 1:
            img = np.repeat(img, 3, axis=2)
        if spec.channels == "BGR":
            img = img[:, :, ::-1]
    h, w = size
    c = img.shape[2]
    mean = np.resize(np.asarray(spec.mean, np.float32), c)
    std = np.resize(np.asarray(spec.std, np.float32), c)
    if spec.resize == "stretch":
        out = (resize_bilinear(img, h, w) / 255.0 - mean) / std
    else:
        rw = min(w, max(1, int(np.ceil(h * img.shape[1] / img.shape[0]))))
        out = np.zeros((h, w, c), np.float32)
        out[:, :rw] = (resize_bilinear(img, h, rw) / 255.0 - mean) / std
    out = out.astype(np.float32)
    return np.ascontiguousarray(out.transpose(2, 0, 1) if spec.layout == "NCHW" else out)


def _image_feed(path: str, spec: ImageSpec, inputs) -> dict:
    if len(inputs) != 1:
        raise InputError(f"image folders feed single-input models; this one has inputs "
                         f"{[v.name for v in inputs]}")
    v = inputs[0]
    size = spec.size
    if size is None:
        dims = v.shape[2:4] if spec.layout == "NCHW" else v.shape[1:3]
        if len(v.shape) != 4 or not all(isinstance(d, int) and d > 0 for d in dims):
            raise InputError(f"input {v.name!r} has shape {tuple(v.shape)}: give the image "
                             f"size (--size HxW / ImageSpec(size=...))")
        size = (int(dims[0]), int(dims[1]))
    return {v.name: preprocess_image(_read_image(path), spec, size)}  # one sample
