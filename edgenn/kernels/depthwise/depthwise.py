"""Depthwise 2-D convolution (group == C == M, one filter per channel).

x (N, C, H, W), w (C, 1, KH, KW) -> y (N, C, OH, OW); any kernel size, stride, dilation
and padding; y = act(conv(x, w) + B + Z), the bias, residual Z and activation applied
while the output is still in registers or L1 (no extra pass over memory).

Three algorithms, all registered (the selector times them):
- depthwise_c8 (C, _dwc8.h; the default): eight channels interleaved per SIMD vector, so
  every tap of every output pixel is one AVX2 multiply-add whatever the stride, and small
  planes (7x7, 14x14) cost no more per pixel than large ones; depthwise_c16__avx512f the
  same body on 16 channels per AVX-512 vector (half the multiply-adds, 16 x 16 transposes
  to interleave). _mt twins split the channel groups over the session's threads.
- depthwise_rows8__avx2 / depthwise_rows16__avx512f / depthwise_rows4__neon (C, _dwrows.h):
  straight on the NCHW planes, a row's output pixels in the vector lanes, no interleaving: faster
  than c8 on wide unit-stride planes (112x112, 56x56), offered only there.
- depthwise_numba (_window_jit.py): per channel, a padded polyphase copy of the plane turns
  every tap into a contiguous run over the output rows; nine taps at a time, held in
  scalars. Threads (numba.set_num_threads > 1) split the channels.
"""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..native.threading_cost import c_cost, numba_cost, plan_threads
from ..native import epilogue
from ..gemm.conv import geometry

CHUNK = 2048        # output floats computed per block (8 KB: stays in L1 with its taps)
BLOCK = 32          # = _window_jit.BLOCK (not imported: that module imports numba)


def _jit():
    from . import _window_jit  # imports numba: only once a model plans this kernel
    return _window_jit


def act_params(node) -> tuple[int, np.float32, np.float32]:
    """-> (activation code, p0, p1) of the fused activation of `node` (epilogue.act_args)."""
    code, p0, p1 = epilogue.act_args(node)
    return code, np.float32(p0), np.float32(p1)


def activations() -> tuple[str, ...]:
    """The activations the depthwise kernels fuse: _dwc8.h's (the numba window kernels,
    _window_jit.py, compute the same ones)."""
    from . import _dwc8
    return _dwc8.ACTIVATIONS


class Polyphase:
    """Geometry of the padded polyphase plane for a window op on an (H, W) input with
    output (OH, OW): strides (sh, sw), pads begin (ph, pw), dilations (dh, dw), kernel
    (kh, kw). off[t] are the flat tap offsets (row-major taps), size the plane length."""

    def __init__(self, oh, ow, kh, kw, strides, pads, dilations):
        (self.sh, self.sw), (self.ph, self.pw), (dh, dw) = strides, pads, dilations
        qi = [(i * dh) // self.sh for i in range(kh)]
        qj = [(j * dw) // self.sw for j in range(kw)]
        self.hq, self.wq = oh + max(qi), ow + max(qj)
        plane = self.hq * self.wq
        self.off = np.array([(((i * dh) % self.sh) * self.sw + (j * dw) % self.sw) * plane
                             + qi[i] * self.wq + qj[j]
                             for i in range(kh) for j in range(kw)], np.int64)
        self.rows = max(1, min(oh, CHUNK // self.wq))
        # runs are rounded up to whole blocks of BLOCK floats: reads then reach up to
        # max(qj) + BLOCK cells past the last phase block (dropped columns)
        self.size = self.sh * self.sw * plane + self.wq + 2 * BLOCK
        self.tmp = self.rows * self.wq + BLOCK

    def scratch(self, threads: int, fill: float) -> tuple[scratch.Scratch, scratch.Scratch]:
        """-> handles of (P (threads, size) pre-filled with the pad value, tmp (threads,
        rows*wq+) zeroed), kept per execution context."""
        return (scratch.array((threads, self.size), np.float32, persistent=True, fill=fill),
                scratch.array((threads, self.tmp), np.float32, persistent=True, fill=0.0))

    def args(self):
        return self.ph, self.pw, self.sh, self.sw, self.hq, self.wq, self.rows


def c8_plane(size, out, kernel, strides, pads, dil, lanes: int = 8):
    """Padded channel-interleaved plane of the c8 / c16 kernels (_dwc8.h): -> (Hp, Wp, tap
    offsets ((i*dh)*Wp + j*dw)*lanes). It holds the whole padded input and every window."""
    hp, wp = (max(i + p, (o - 1) * s + (k - 1) * d + 1)
              for i, p, o, s, k, d in zip(size, pads, out, strides, kernel, dil))
    off = np.array([(i * dil[0] * wp + j * dil[1]) * lanes
                    for i in range(kernel[0]) for j in range(kernel[1])], np.int64)
    return hp, wp, off


def max_threads() -> int:
    import numba
    return int(numba.config.NUMBA_NUM_THREADS)


def _supports(node, ins, outs) -> bool:
    x, w = ins[0], ins[1]
    return (len(x.shape) == 4 and x.dtype == "float32" and w.value is not None
            and node.attrs.get("group", 1) == x.shape[1] == w.shape[0] and w.shape[1] == 1
            and node.attrs.get("activation", "") in activations()
            and (len(ins) < 3 or ins[2] is None or ins[2].value is not None)
            and (len(ins) < 4 or ins[3] is None or tuple(ins[3].shape) == tuple(outs[0].shape)))


@kernel("Conv", "depthwise_c8", supports=_supports, cost=c_cost)
def prepare_c8(node, ins, outs):
    """Eight channels per SIMD vector (C, _dwc8.h)."""
    return _prepare_c8(node, ins, outs, 1)


def _mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and ins[0].shape[1] > 8 and _supports(node, ins, outs)


@kernel("Conv", "depthwise_c8_mt", supports=_mt_supports, cost=c_cost)
def prepare_c8_mt(node, ins, outs):
    """The channel groups split over the session's threads (OpenMP), scratch per thread."""
    return _prepare_c8(node, ins, outs, plan_threads())


def _c16_mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and ins[0].shape[1] > 16 and _supports(node, ins, outs)


# 16 channels per AVX-512 vector: the same loops (_dwc_vec.h), half the multiply-adds
kernel("Conv", "depthwise_c16__avx512f", supports=_supports, isa="avx512", cost=c_cost)(
    lambda node, ins, outs: _prepare_c8(node, ins, outs, 1, lanes=16))
kernel("Conv", "depthwise_c16__avx512f_mt", supports=_c16_mt_supports, isa="avx512",
       cost=c_cost)(
    lambda node, ins, outs: _prepare_c8(node, ins, outs, plan_threads(), lanes=16))

# Threads splitting the output rows instead (every channel group, a band of rows each):
# where the groups split unevenly (144 channels: 9 groups of 16, 5 against 4) and on
# large planes. Each band fills the padded rows it reads, so the (KH-1)*dh rows between
# two bands are packed (or, ExpandDepthwise, expanded) twice, and the lines where two
# bands meet are written by both threads. Neither split wins everywhere: rows tend to on
# large planes, groups on small ones (the packing twice of the rows between bands weighs
# more there). Offered where each
# thread has ROW_SPLIT_MIN_ROWS output rows; the tuner keeps whichever split is faster.
ROW_SPLIT_MIN_ROWS = 8


def row_split_ok(outs) -> bool:
    """Enough output rows for every thread to take a band of ROW_SPLIT_MIN_ROWS."""
    return plan_threads() > 1 and outs[0].shape[2] >= ROW_SPLIT_MIN_ROWS * plan_threads()


def _rows_split_supports(node, ins, outs) -> bool:
    return row_split_ok(outs) and _supports(node, ins, outs)


def rowsplit_name(name: str) -> str:
    """The rows-split twin's name: depthwise_c16__avx512f -> depthwise_c16_rowsplit__avx512f
    (its threaded spec then ends in _mt, as every OpenMP one)."""
    base, tier = (name.split("__", 1) + [""])[:2]
    return base + "_rowsplit" + ("__" + tier if tier else "")


for _lanes, _name, _isa in ((8, "depthwise_c8", ""), (16, "depthwise_c16__avx512f", "avx512")):
    kernel("Conv", rowsplit_name(_name) + "_mt", supports=_rows_split_supports, isa=_isa,
           cost=c_cost, thread_split="rows")(
        lambda node, ins, outs, lanes=_lanes: _prepare_c8(node, ins, outs, plan_threads(),
                                                          lanes, split_rows=True))


def c8_row(lib, lanes: int, row: str | None) -> tuple:
    """-> (row name, its lanes): `row` of lib's table (_dwc8.h's dwc_rows), or the best
    row of `lanes` lanes this CPU runs."""
    row = row or lib.best_row(lanes)
    return row, lib.ROWS[lib.row_index(row)].lanes


def _prepare_c8(node, ins, outs, threads: int, lanes: int = 8, lib=None,
                split_rows: bool = False, row: str | None = None):
    """On the table's best row of `lanes` channels per vector (8: AVX2, 16: AVX-512F) or
    on `row`; threads split the channel groups, or with split_rows the output rows; lib:
    the extension (tests pass the SIMDe-emulated _dwc8_emu)."""
    if lib is None:
        from . import _dwc8 as lib
    row, lanes = c8_row(lib, lanes, row)
    threads = split_threads(threads, outs[0].shape[1], outs[0].shape[2], lanes, split_rows)
    p = c8_parts(node, ins[1].value, ins, ins[0].shape, outs[0].shape, threads, lanes, lib)
    p.row = row
    return c8_runner(p, lib, ins[0].shape, outs[0].shape, split_rows, 3)


def c8_runner(p, lib, xshape, yshape, split_rows: bool, z_input: int, expand=()):
    """run(inputs, outputs) of the c8 / c16 loops on C8Parts p, bound once as a Dwc8Layer
    (expand: a fused 1x1 conv's (ew, eb, emode, ep0, ep1)); the residual is inputs[z_input]."""
    layer = lib.Dwc8Layer(p.w8, p.b8, p.off, xshape, yshape, *p.geom, p.mode, p.p0, p.p1,
                          p.has_z, p.row, split_rows, *expand).run
    q, obuf, has_z = p.q, p.obuf, p.has_z

    def run(inputs, outputs):
        layer(np.ascontiguousarray(inputs[0]), inputs[z_input] if has_z else None, outputs[0],
              q.get(), obuf.get())
    return run


def split_threads(threads: int, channels: int, out_rows: int, lanes: int,
                  split_rows: bool) -> int:
    """Threads with work: at most one per output row (split_rows) or (channel group,
    output row) pair (the groups split: whole groups, and the rows of the groups where
    the shares meet, _dwc8.h's dwc8_run_share)."""
    groups = -(-channels // lanes)
    return max(1, min(threads, out_rows if split_rows else groups * out_rows))


class C8Parts:
    """What the c8 / c16 loops take for one depthwise conv: weights w8 (groups, taps,
    lanes) and bias b8 (groups, lanes), zero past C; tap offsets; the per-thread padded
    plane q and row buffer obuf (scratch handles); geom (sh, sw, ph, pw, Hp, Wp); the
    fused activation (mode, p0, p1), whether a residual is added, and the table's row
    that runs them (set by the caller)."""


def c8_parts(node, w, ins, xshape, yshape, threads: int, lanes: int, lib) -> C8Parts:
    """The depthwise conv `node` (weights w (C, 1, KH, KW), inputs ins: bias at 2,
    residual at 3) over x of xshape -> yshape, for the c8 / c16 loops (C8Parts)."""
    c, _, kh, kw = w.shape
    h, wd, oh, ow = xshape[2], xshape[3], yshape[2], yshape[3]
    strides, pads, dil = geometry(node, xshape, w.shape, yshape)
    hp, wp, off = c8_plane((h, wd), (oh, ow), (kh, kw), strides, pads, dil, lanes)
    groups = -(-c // lanes)
    p = C8Parts()
    p.off, p.w8 = off, lane_major(w.reshape(c, kh * kw), lanes)    # (g, tap, lane)
    p.b8 = np.zeros(groups * lanes, np.float32)
    if len(ins) > 2 and ins[2] is not None:
        p.b8[:c] = ins[2].value
    p.b8 = p.b8.reshape(groups, lanes)
    # per thread: the padded plane of `lanes` lanes (borders stay zero), an output row (a
    # small plane: all its rows)
    p.q = scratch.array((threads, hp * wp * lanes), np.float32, persistent=True, fill=0.0)
    p.obuf = scratch.array((threads, lib.obuf_floats(oh, ow, lanes)), np.float32)
    p.has_z = len(ins) > 3 and ins[3] is not None
    p.mode, p.p0, p.p1 = act_params(node)
    p.geom = (*strides, *pads, hp, wp)
    return p


def lane_major(rows: np.ndarray, lanes: int) -> np.ndarray:
    """(C, T) per-channel rows -> (ceil(C/lanes), T, lanes) float32, channel g*lanes+l in
    lane l of group g, zero past C."""
    c, t = rows.shape
    groups = -(-c // lanes)
    out = np.zeros((groups * lanes, t), np.float32)
    out[:c] = rows
    return np.require(out.reshape(groups, lanes, t).transpose(0, 2, 1), requirements="C")


# the rows kernels are offered to the tuner where they can win: unit stride and rows of
# >= 28 outputs (they win on wide planes; on narrower ones and at stride 2 the per-plane
# fill and the short rows cost more than they save)
ROWS_MIN_WIDTH = 28


def _rows_supports(node, ins, outs) -> bool:
    from ._dwrows import ACTIVATIONS, MAX_TAPS
    w = ins[1]
    if not (_supports(node, ins, outs) and node.attrs.get("activation", "") in ACTIVATIONS
            and 0 < w.shape[2] * w.shape[3] <= MAX_TAPS and outs[0].shape[3] >= ROWS_MIN_WIDTH):
        return False
    strides, _, _ = geometry(node, ins[0].shape, w.shape, outs[0].shape)
    return tuple(strides) == (1, 1)


def _rows_mt_supports(node, ins, outs) -> bool:
    return plan_threads() > 1 and ins[0].shape[0] * ins[0].shape[1] > 1 \
        and _rows_supports(node, ins, outs)


def _prepare_rows(node, ins, outs, threads: int, row: str, lib=None):
    """Planes straight from NCHW, row pixels in the vectors of the table's `row` (C,
    _dwrows.h); threads > 1: the planes split over OpenMP threads, a phase plane each.
    lib: the extension (tests pass the SIMDe-emulated _dwrows_emu)."""
    if lib is None:
        from . import _dwrows as lib
    x, w, y = ins[0], ins[1].value, outs[0]
    c, _, kh, kw = w.shape
    strides, pads, dil = geometry(node, x.shape, w.shape, y.shape)
    hp, wq = lib.plane(tuple(x.shape), tuple(y.shape), kh, kw, strides, pads, dil, row)
    taps = np.require(w.reshape(c, kh * kw), np.float32, requirements="C")
    bias, act, lo, hi, _ = epilogue.constant_parts(node, ins, c)
    has_z = len(ins) > 3 and ins[3] is not None
    threads = max(1, min(threads, x.shape[0] * c))
    plane = scratch.array((threads, hp * strides[1] * wq), np.float32, persistent=True,
                          fill=0.0)
    run_c = lib.run

    def run(inputs, outputs):
        run_c(np.ascontiguousarray(inputs[0]), taps, bias,
              np.ascontiguousarray(inputs[3]) if has_z else None, outputs[0], plane.get(),
              kh, kw, strides, pads, dil, act, lo, hi, row)
    return run


def register_widths(op, widths, supports, mt_supports, prepare, cost=c_cost,
                    rows_split_supports=None):
    """One spec per (key, name, isa) of `widths`, prepare(node, ins, outs, threads, key)
    (key: the lanes, or a table's row), and its *_mt twin on the session's threads (with
    rows_split_supports, a rowsplit_name(name) + "_mt" one too: prepare(...,
    split_rows=True))."""
    for lanes, name, isa in widths:
        kernel(op, name, supports=supports, isa=isa, cost=cost)(
            lambda node, ins, outs, lanes=lanes: prepare(node, ins, outs, 1, lanes))
        kernel(op, name + "_mt", supports=mt_supports, isa=isa, cost=cost)(
            lambda node, ins, outs, lanes=lanes: prepare(node, ins, outs, plan_threads(),
                                                         lanes))
        if rows_split_supports is not None:
            kernel(op, rowsplit_name(name) + "_mt", supports=rows_split_supports, isa=isa,
                   cost=cost, thread_split="rows")(
                lambda node, ins, outs, lanes=lanes: prepare(
                    node, ins, outs, plan_threads(), lanes, split_rows=True))


def _dwrows():
    from . import _dwrows
    return _dwrows


# the rows kernels: a spec per row of their table (_dwrows.h), named after it
register_widths("Conv", ((r.name, r.name, r.isa) for r in _dwrows().ROWS),
                _rows_supports, _rows_mt_supports, _prepare_rows)


def other_widths(prefix: str, lib=None) -> tuple:
    """(lanes, name, isa) of the c<lanes> table's vector rows of widths other than the x86
    8 and 16 above (ARM64's depthwise_c4__neon), named <prefix>_c<lanes>__<isa>: specs
    of their own on the CPUs that build them. lib: the extension (tests: _dwc8_emu)."""
    if lib is None:
        from . import _dwc8 as lib
    return tuple((r.lanes, prefix + r.name[len("depthwise"):], r.isa) for r in lib.ROWS
                 if r.vector and r.lanes not in (8, 16))


register_widths("Conv", other_widths("depthwise"), _supports, _mt_supports,
                lambda node, ins, outs, threads, lanes, split_rows=False: _prepare_c8(
                    node, ins, outs, threads, lanes, split_rows=split_rows),
                rows_split_supports=_rows_split_supports)


@kernel("Conv", "depthwise_numba", supports=_supports,
        cost=numba_cost, requires=("numba",))
def prepare_numba(node, ins, outs):
    """Per-channel polyphase rows (Numba, _window_jit.py); threaded over channels."""
    import numba
    jit = _jit()
    x, w, y = ins[0], ins[1].value, outs[0]
    c, _, kh, kw = w.shape
    n, _, oh, ow = y.shape
    strides, pads, dil = geometry(node, x.shape, w.shape, y.shape)
    geo = Polyphase(oh, ow, kh, kw, strides, pads, dil)
    taps = np.require(w.reshape(c, kh * kw), dtype=np.float32, requirements="C")
    bias = (np.require(ins[2].value, dtype=np.float32, requirements="C")
            if len(ins) > 2 and ins[2] is not None else np.zeros(c, np.float32))
    has_z = len(ins) > 3 and ins[3] is not None
    mode, p0, p1 = act_params(node)
    threads = min(max_threads(), n * c)
    P, tmp = geo.scratch(threads, 0.0)
    dummy = np.zeros((1, 1, 1, 1), np.float32)
    off, g = geo.off, geo.args()
    serial, parallel = jit.depthwise, jit.depthwise_par

    def run(inputs, outputs):
        z = inputs[3] if has_z else dummy
        nt = min(threads, numba.get_num_threads())
        pp, tt = P.get(), tmp.get()
        if nt > 1:
            parallel(nt, inputs[0], taps, off, bias, z, has_z, outputs[0], pp, tt, *g,
                     mode, p0, p1)
        else:
            serial(inputs[0], taps, off, bias, z, has_z, outputs[0], pp, tt, *g, mode, p0, p1)
    return run

