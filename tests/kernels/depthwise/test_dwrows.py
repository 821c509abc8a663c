"""The depthwise rows kernels (kernels/depthwise/_dwrows.h: NCHW planes, a row's outputs in 8,
16 or NEON's 4 lanes) on every width, natively where the CPU has them and on SIMDe
(_dwrows_emu, any CPU), over every geometry the C code takes (the tuner is offered them only on wide
unit-stride planes, but the kernel computes them all): strides 1 / 2 / 3, dilation,
3x3 (weights in registers) and 1x1 / 5x5 / 7x7 (the general taps), rows shorter than
one vector and with tails, batch 2, residual (also in place, z is y), Relu / Clip.
Bound from the arithmetic: the sum of T products, the bias and z in float32 is within
gamma_(T+2) = (T+2) eps / (1 - (T+2) eps) of the exact one, relative to
sum |w| |x| + |b| + |z| (Higham 2002 (3.5)); clamping never widens it."""
import numpy as np
import pytest
from support import kernel_tables as tables

from edgenn import oplist
from edgenn.kernels.depthwise import _dwrows, _dwrows_emu
from edgenn.registry import REFERENCE

oplist.load_rules()   # the reference Conv

EPS = np.finfo(np.float32).eps
PATHS = tables.paths(_dwrows.rows(), _dwrows_emu.rows())    # every row of _dwrows.h's table
# n, c, h, w, k, stride, pad, dilation
GEOMS = [(1, 3, 7, 7, 3, 1, 1, 1), (2, 5, 14, 14, 3, 2, 1, 1), (1, 4, 13, 29, 3, 1, 1, 1),
         (1, 2, 112, 112, 3, 2, 1, 1), (1, 3, 9, 9, 5, 1, 2, 1), (1, 2, 10, 11, 3, 1, 2, 2),
         (1, 1, 1, 1, 3, 1, 1, 1), (1, 3, 17, 40, 3, 2, 0, 1), (1, 2, 8, 8, 1, 1, 0, 1),
         (1, 2, 20, 33, 7, 3, 3, 1), (1, 2, 30, 70, 3, 1, 1, 1), (1, 1, 5, 100, 3, 2, 1, 1)]


def _case(rng, geom, act, residual):
    n, c, h, w, k, s, p, d = geom
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    attrs = dict(group=c, strides=[s, s], pads=[p] * 4, dilations=[d, d], kernel_shape=[k, k])
    conv = REFERENCE["Conv"]
    exact = conv(attrs, [x.astype(np.float64), wt.astype(np.float64), b.astype(np.float64)])[0]
    mag = conv(attrs, [np.abs(x).astype(np.float64), np.abs(wt).astype(np.float64),
                       np.abs(b).astype(np.float64)])[0]
    z = rng.standard_normal(exact.shape).astype(np.float32) if residual else None
    if residual:
        exact, mag = exact + z, mag + np.abs(z)
    if act == "Clip":
        exact = np.clip(exact, -0.5, 0.7)
    elif act == "Relu":
        exact = np.maximum(exact, 0)
    t = k * k + 2
    return x, wt, b, z, exact, t * EPS / (1 - t * EPS) * mag + 1e-30


@pytest.mark.parametrize("path", PATHS)
def test_rows_kernel_within_the_sum_bound(path):
    lib, row = tables.lib_and_row(path, _dwrows, _dwrows_emu)
    rng = np.random.default_rng(0)
    for geom in GEOMS:
        for act in ("", "Relu", "Clip"):
            for residual in (False, True):
                x, wt, b, z, exact, bound = _case(rng, geom, act, residual)
                n, c, h, w, k, s, p, d = geom
                y = np.full(exact.shape, np.nan, np.float32)
                hp, wq = lib.plane(x.shape, y.shape, k, k, (s, s), (p, p), (d, d), row)
                P = np.zeros((2, hp * s * wq), np.float32)      # two threads' planes
                lib.run(x, wt.reshape(c, -1), b if act else None, z, y, P, k, k, (s, s),
                        (p, p), (d, d), act, -0.5, 0.7, row)
                if not act:    # without the bias: it is optional
                    exact = exact - b.reshape(1, -1, 1, 1)
                assert np.all(np.abs(y - exact) <= bound), (path, geom, act, residual)


@pytest.mark.parametrize("path", PATHS)
def test_in_place_residual_and_nan(path):
    lib, row = tables.lib_and_row(path, _dwrows, _dwrows_emu)
    # z is y (the planner may reuse a dead residual's buffer): each z value is read
    # before its own output overwrites it; a NaN input stays NaN through Relu / Clip
    rng = np.random.default_rng(1)
    for geom in [(1, 3, 7, 7, 3, 1, 1, 1), (1, 2, 9, 21, 3, 1, 1, 1), (1, 2, 30, 70, 3, 1, 1, 1)]:
        x, wt, b, z, exact, bound = _case(rng, geom, "Clip", True)
        n, c, h, w, k, s, p, d = geom
        y = z.copy()
        hp, wq = lib.plane(x.shape, y.shape, k, k, (s, s), (p, p), (d, d), row)
        P = np.zeros((1, hp * s * wq), np.float32)
        lib.run(x, wt.reshape(c, -1), b, y, y, P, k, k, (s, s), (p, p), (d, d), "Clip",
                -0.5, 0.7, row)
        assert np.all(np.abs(y - exact) <= bound), (path, geom)
    x = np.zeros((1, 1, 5, 40), np.float32)
    x[0, 0, 2, 17] = np.nan
    wt = np.ones((1, 9), np.float32)
    y = np.zeros((1, 1, 5, 40), np.float32)
    hp, wq = lib.plane(x.shape, y.shape, 3, 3, (1, 1), (1, 1), (1, 1), row)
    for act in ("Relu", "Clip"):
        lib.run(x, wt, None, None, y, np.zeros((1, hp * wq), np.float32), 3, 3, (1, 1),
                (1, 1), (1, 1), act, 0.0, 6.0, row)
        assert np.isnan(y[0, 0, 1:4, 16:19]).all() and np.isfinite(y).sum() == 200 - 9, act


ROW = _dwrows_emu.ROWS[0].name


def test_rejects_what_it_cannot_run():
    x = np.zeros((1, 2, 8, 8), np.float32)
    y = np.zeros((1, 2, 8, 8), np.float32)
    with pytest.raises(ValueError, match="scratch or weights"):
        _dwrows_emu.run(x, np.zeros((2, 9), np.float32), None, None, y,
                        np.zeros((1, 4), np.float32), 3, 3, (1, 1), (1, 1), (1, 1), "", 0, 0, ROW)
    with pytest.raises(ValueError, match="geometry"):
        _dwrows_emu.plane(x.shape, y.shape, 3, 3, (0, 1), (1, 1), (1, 1), ROW)
