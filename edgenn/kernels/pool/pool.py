"""2-D pooling: MaxPool and AveragePool (C c8 loops, and Numba rows), GlobalAveragePool and
GlobalMaxPool (C). x (N, C, H, W) float32 -> y (N, C, OH, OW).

MaxPool / AveragePool: any kernel, strides, pads / auto_pad, ceil_mode, dilations;
count_include_pad for AveragePool. The window geometry is the reference's
(graph.shapes.nn.window_geometry); the loops are the depthwise ones (depthwise.py) with max
or sum over the taps: pads hold -inf (max) or 0 (sum), and an average divides by the number
of cells each window counts. MaxPool's optional Indices output stays on the reference.
"""
from __future__ import annotations

import numpy as np

from ...graph.shapes.nn import window_geometry
from ...registry import kernel
from .. import scratch
from ..native.threading_cost import c_cost, numba_cost, plan_threads, threaded_only
from ..depthwise.depthwise import Polyphase, _jit, c8_plane, max_threads


def _window_supports(node, ins, outs) -> bool:
    x = ins[0]
    return (len(x.shape) == 4 and x.dtype == "float32"
            and len(node.attrs.get("kernel_shape") or []) == 2
            and (len(node.outputs) < 2 or not node.outputs[1]))


def _geometry(node, x_shape, y_shape):
    """-> (kernel, strides, pads begin, dilations, counts (OH, OW) float32 of AveragePool)."""
    a = node.attrs
    kernel = [int(k) for k in a["kernel_shape"]]
    out, begin, end, strides, dil = window_geometry(node, a, x_shape[2:], kernel,
                                                    bool(a.get("ceil_mode", 0)))
    assert list(out) == list(y_shape[2:]), (out, y_shape)
    counts = []
    for size, o, b, e, s, d, k in zip(x_shape[2:], out, begin, end, strides, dil, kernel):
        lo, hi = (-b, size + e) if a.get("count_include_pad", 0) else (0, size)
        pos = np.arange(o)[:, None] * s - b + np.arange(k)[None, :] * d  # (O, K) cells
        counts.append(((pos >= lo) & (pos < hi)).sum(axis=1))
    cnt = np.require(np.outer(*counts), dtype=np.float32, requirements="C")
    return kernel, strides, begin, dil, cnt


def _prepare_c8(node, ins, outs, is_max: bool, threads: int = 1, row: str | None = None):
    """On the depthwise table's best row of 8 lanes (or `row`); threads > 1: even shares
    of the output rows, a padded plane each (_dwc8.pyx)."""
    from ..depthwise._dwc8 import best_row, pool8
    row = row or best_row(8)
    x, y = ins[0], outs[0]
    kernel, strides, pads, dil, cnt = _geometry(node, x.shape, y.shape)
    hp, wp, off = c8_plane(x.shape[2:], y.shape[2:], kernel, strides, pads, dil)
    threads = max(1, min(threads, y.shape[2]))
    q = scratch.array((threads, hp * wp * 8), np.float32, persistent=True,   # borders keep
                      fill=-np.inf if is_max else 0.0)                         # the fill
    obuf = scratch.array((threads, y.shape[3] * 8), np.float32)

    def run(inputs, outputs):
        pool8(inputs[0], off, cnt, outputs[0], q.get(), obuf.get(), *strides, *pads, hp, wp,
              is_max, row)
    return run


def _tiles_supports(node, ins, outs) -> bool:
    """Non-overlapping windows: kernel == strides, no padding, dilation 1 (floor mode, or
    ceil mode where the windows divide the plane)."""
    if not _window_supports(node, ins, outs):
        return False
    a = node.attrs
    k = [int(v) for v in a["kernel_shape"]]
    s = [int(v) for v in a.get("strides") or [1, 1]]
    d = [int(v) for v in a.get("dilations") or [1, 1]]
    pads = [int(v) for v in a.get("pads") or [0, 0, 0, 0]]
    if k != s or d != [1, 1] or any(pads) or a.get("auto_pad", "NOTSET") not in \
            ("NOTSET", "VALID"):
        return False
    h, w = ins[0].shape[2:]
    return list(outs[0].shape[2:]) == [h // k[0], w // k[1]]


@kernel("MaxPool", "maxpool_tiles_c", supports=_tiles_supports, cost=c_cost)
def prepare_maxpool_tiles(node, ins, outs, build: str | None = None):
    """kernel == stride MaxPool on the NCHW planes (_pool_tiles.h): rows reduced, then
    column pairs deinterleaved; on the table's best row this CPU runs, or `build`."""
    from ..depthwise._dwc8 import maxpool_tiles_nchw
    n, c, h, w = ins[0].shape
    kh, kw = (int(v) for v in node.attrs["kernel_shape"])
    oh, ow = outs[0].shape[2:]
    row = scratch.array(max(w, 1), np.float32)

    def run(inputs, outputs):
        maxpool_tiles_nchw(inputs[0].reshape(n * c, h, w), outputs[0].reshape(n * c, oh, ow),
                           kh, kw, row.get(), build)
    return run


def _prepare_numba(node, ins, outs, is_max: bool):
    import numba
    jit = _jit()
    x, y = ins[0], outs[0]
    kernel, strides, pads, dil, cnt = _geometry(node, x.shape, y.shape)
    n, c, oh, ow = y.shape
    geo = Polyphase(oh, ow, kernel[0], kernel[1], strides, pads, dil)
    threads = min(max_threads(), n * c)
    P, tmp = geo.scratch(threads, -np.inf if is_max else 0.0)
    # 1 / count laid out like the tmp rows (row pitch wq; 1 in the dropped columns)
    inv = np.ones((oh, geo.wq), np.float32)
    inv[:, :ow] = 1 / cnt
    inv = np.concatenate([inv.ravel(), np.ones(geo.tmp, np.float32)])
    ones = np.ones(kernel[0] * kernel[1], np.float32)
    off, g = geo.off, geo.args()

    def run(inputs, outputs):
        nt = min(threads, numba.get_num_threads())
        if nt > 1:
            jit.pool_par(nt, inputs[0], off, ones, inv, is_max, outputs[0], P.get(), tmp.get(), *g)
        else:
            jit.pool(inputs[0], off, ones, inv, is_max, outputs[0], P.get(), tmp.get(), *g)
    return run


@kernel("MaxPool", "maxpool_c8", supports=_window_supports, cost=c_cost)
def prepare_maxpool_c8(node, ins, outs):
    return _prepare_c8(node, ins, outs, True)


@kernel("AveragePool", "avgpool_c8", supports=_window_supports, cost=c_cost)
def prepare_avgpool_c8(node, ins, outs):
    return _prepare_c8(node, ins, outs, False)


def _rows_supports(node, ins, outs) -> bool:
    """Output rows for every thread to take one."""
    return _window_supports(node, ins, outs) and outs[0].shape[2] >= plan_threads()


# the session's threads over the output rows (a large early pool on one thread leaves the
# others idle for a visible share of the run); rows, as the stem conv
# before it splits them, so each thread pools mostly what it wrote
for _op, _name, _max in (("MaxPool", "maxpool_c8_mt", True),
                         ("AveragePool", "avgpool_c8_mt", False)):
    kernel(_op, _name, supports=threaded_only(_rows_supports), cost=c_cost)(
        lambda node, ins, outs, is_max=_max: _prepare_c8(node, ins, outs, is_max,
                                                         plan_threads()))


@kernel("MaxPool", "maxpool_numba", supports=_window_supports,
        cost=numba_cost, requires=("numba",))
def prepare_maxpool_numba(node, ins, outs):
    return _prepare_numba(node, ins, outs, True)


@kernel("AveragePool", "avgpool_numba", supports=_window_supports,
        cost=numba_cost, requires=("numba",))
def prepare_avgpool_numba(node, ins, outs):
    return _prepare_numba(node, ins, outs, False)


def _global_supports(node, ins, outs) -> bool:
    return len(ins[0].shape) == 4 and ins[0].dtype == "float32"


def _global_rows_supports(node, ins, outs) -> bool:
    """Rows (n * c) for every thread to take two."""
    return _global_supports(node, ins, outs) and \
        ins[0].shape[0] * ins[0].shape[1] >= 2 * plan_threads()


def _prepare_global(node, ins, outs, is_max: bool, threads: int = 1):
    from ..depthwise._dwc8 import global_pool
    n, c, h, w = ins[0].shape

    def run(inputs, outputs):
        global_pool(inputs[0].reshape(n * c, h * w), outputs[0].reshape(n * c), is_max,
                    None, threads)
    return run


@kernel("GlobalAveragePool", "global_avgpool_c", supports=_global_supports)
def prepare_global_avg(node, ins, outs):
    return _prepare_global(node, ins, outs, False)


@kernel("GlobalMaxPool", "global_maxpool_c", supports=_global_supports)
def prepare_global_max(node, ins, outs):
    return _prepare_global(node, ins, outs, True)


# the session's threads over the rows (channels), so each thread mostly reads what it
# wrote: on one thread, the mean reads the other threads' shares from their cores' caches
for _op, _name, _max in (("GlobalAveragePool", "global_avgpool_c_mt", False),
                         ("GlobalMaxPool", "global_maxpool_c_mt", True)):
    kernel(_op, _name, supports=threaded_only(_global_rows_supports))(
        lambda node, ins, outs, is_max=_max: _prepare_global(node, ins, outs, is_max,
                                                             plan_threads()))


# -- MaxPool on quantized (uint8 / int8) tensors -------------------------------------------------

def _int_window_supports(node, ins, outs) -> bool:
    return (len(ins[0].shape) == 4 and ins[0].dtype in ("uint8", "int8")
            and len(node.attrs.get("kernel_shape") or []) == 2
            and (len(node.outputs) < 2 or not node.outputs[1]))


@kernel("MaxPool", "maxpool_int_views", supports=_int_window_supports, cost=c_cost)
def prepare_maxpool_int(node, ins, outs):
    """Max over the KH*KW strided views of a padded copy: one np.maximum(out=) per tap over
    the (small, 1-byte) output. The padding is the dtype's minimum, below every value, which
    quantization keeps monotone: max commutes with it, so this is exact."""
    x, y = ins[0], outs[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _ = _geometry(node, x.shape, y.shape)
    n, c, h, w = x.shape
    oh, ow = y.shape[2:]
    # the padded image must hold every window, ceil_mode's partial ones included
    hp = max(h + ph, (oh - 1) * sh + (kh - 1) * dh + 1)
    wp = max(w + pw, (ow - 1) * sw + (kw - 1) * dw + 1)
    low = np.iinfo(x.dtype).min
    padded = np.full((n, c, hp, wp), low, x.dtype)
    inner = padded[:, :, ph:ph + h, pw:pw + w]
    taps = [padded[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for i in range(kh) for j in range(kw)]

    def run(inputs, outputs):
        np.copyto(inner, inputs[0])
        out = outputs[0]
        np.maximum(taps[0], taps[1], out=out) if len(taps) > 1 else np.copyto(out, taps[0])
        for tap in taps[2:]:
            np.maximum(out, tap, out=out)
    return run


@kernel("MaxPool", "maxpool_bytes_c", supports=_int_window_supports, cost=c_cost)
def prepare_maxpool_bytes(node, ins, outs, threads: int = 1):
    """The same max in C straight on the NCHW byte planes (_pool_bytes.h): per output row
    the in-image rows reduced elementwise, then each window's columns; no padded copy.
    threads > 1: even shares of the planes."""
    from ..depthwise._dwc8 import maxpool_bytes, maxpool_bytes_scratch
    x, y = ins[0], outs[0]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), _ = _geometry(node, x.shape, y.shape)
    n, c, h, w = x.shape
    oh, ow = y.shape[2:]
    signed = x.dtype == "int8"
    threads = max(1, min(threads, n * c))
    row_h = scratch.array(threads * maxpool_bytes_scratch(w, ow, kw, sw, pw, dw), np.uint8)

    def run(inputs, outputs):
        xs = np.ascontiguousarray(inputs[0]).reshape(n * c, h, w).view(np.uint8)
        maxpool_bytes(xs, outputs[0].reshape(n * c, oh, ow).view(np.uint8), signed,
                      kh, kw, sh, sw, ph, pw, dh, dw, row_h.get(), threads)
    return run


def _int_planes_supports(node, ins, outs) -> bool:
    """More than one plane to share."""
    return ins[0].shape[0] * ins[0].shape[1] > 1 and _int_window_supports(node, ins, outs)


# the session's threads over the planes (a large early pool on one thread leaves the
# others idle for a visible share of an int8 model's run)
kernel("MaxPool", "maxpool_bytes_c_mt", supports=threaded_only(_int_planes_supports), cost=c_cost)(
    lambda node, ins, outs: prepare_maxpool_bytes(node, ins, outs, plan_threads()))
