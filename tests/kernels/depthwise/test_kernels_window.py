"""Depthwise-conv and pooling kernels beyond the shared cases of test_kernels_fast.py:
every fused activation on depthwise geometries, and the portable (non-AVX2) build of the
c8 loops forced, as on a CPU without AVX2."""
import dataclasses
import itertools

import numpy as np
import pytest

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.kernels.depthwise import _dwc8, _dwc8_emu, depthwise
from edgenn.kernels.pool import pool
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, REFERENCE, TensorInfo
from support.kernel_cases.conv_gemm import ACTS
from support.kernel_cases.depthwise_pool import CASES as POOL_CASES

load_all()


def _check(spec, node, inputs, const):
    ins = [TensorInfo.of(v) if i in const else TensorInfo(v.dtype.name, v.shape)
           for i, v in enumerate(inputs)]
    outs = infer_node(node, ins, fold=False)
    if not spec.supports(node, ins, outs):
        return False
    want = REFERENCE[node.op](node.attrs, inputs)[0]
    got = np.full(outs[0].shape, np.nan, np.float32)
    spec.prepare(node, ins, outs)(inputs, [got])
    err = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-6)
    assert err <= 1e-5, (spec.name, node.attrs, [x.shape for x in inputs], err)
    return True


def _depthwise_cases():
    rng = np.random.default_rng(5)
    for (n, c, h, w, k, s, p, d), (act, params), residual in itertools.product(
            [(1, 11, 12, 19, 3, 1, 1, 1), (2, 8, 9, 9, 3, 2, 1, 1), (1, 5, 8, 10, 5, 1, 2, 2)],
            ACTS, (False, True)):
        x = rng.standard_normal((n, c, h, w)).astype(np.float32) * 2
        wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                     group=c, activation=act, activation_params=params)
        oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
        inputs = [x, wt, rng.standard_normal(c).astype(np.float32)]
        if residual:
            inputs.append(rng.standard_normal((n, c, oh, ow)).astype(np.float32))
        yield Node("Conv", ["x", "w", "b", "z"][:len(inputs)], ["y"], attrs, "dw"), inputs


@pytest.mark.parametrize("name", ["depthwise_c8", "depthwise_numba"])
def test_depthwise_every_activation(name):
    spec = next(s for s in KERNELS["Conv"] if s.name == name)
    assert sum(_check(spec, node, inputs, {1, 2}) for node, inputs in _depthwise_cases()) == 54


def _on(spec, prepare):
    """spec, its prepare replaced (the same supports)."""
    return dataclasses.replace(spec, prepare=prepare)


PORTABLE_POOL = _dwc8.POOL_TABLE.rows[0].name     # the NCHW pooling loops' portable row


def test_c8_portable_build():
    # the specs' kernels on the table's portable row of 8 lanes (and the portable NCHW
    # max-pool loops), whatever this CPU runs
    row = _dwc8.ROWS[0].name
    assert _dwc8.ROWS[0].lanes == 8 and not _dwc8.ROWS[0].vector
    conv = _on(next(s for s in KERNELS["Conv"] if s.name == "depthwise_c8"),
               lambda n, i, o: depthwise._prepare_c8(n, i, o, 1, row=row))
    assert sum(_check(conv, node, inputs, {1, 2}) for node, inputs in _depthwise_cases()) == 54
    for op, name, least, prepare in (
            ("MaxPool", "maxpool_c8", 10,
             lambda n, i, o: pool._prepare_c8(n, i, o, True, row=row)),
            ("AveragePool", "avgpool_c8", 10,
             lambda n, i, o: pool._prepare_c8(n, i, o, False, row=row)),
            ("MaxPool", "maxpool_tiles_c", 9,
             lambda n, i, o: pool.prepare_maxpool_tiles(n, i, o, PORTABLE_POOL))):
        spec = _on(next(s for s in KERNELS[op] if s.name == name), prepare)
        assert sum(_check(spec, *case) for case in POOL_CASES[op]()) >= least


def test_maxpool_indices_left_to_reference():
    node = Node("MaxPool", ["x"], ["y", "i"], dict(kernel_shape=[2, 2]), "p")
    ins = [TensorInfo("float32", (1, 2, 4, 4))]
    outs = infer_node(node, ins, fold=False)
    assert not any(s.supports(node, ins, outs) for s in KERNELS["MaxPool"])


# every row of the NCHW pooling loops' table (_pool_tiles.h): native, and again through the
# SIMDe twin (NEON's on x86): (the extension, the row's name)
POOL_BUILDS = [(_dwc8, r.name) for r in _dwc8.pool_rows_usable()] + \
    [(_dwc8_emu, r.name) for r in _dwc8_emu.pool_rows_usable() if r.isa != "scalar"]


@pytest.mark.parametrize("rows,size", [(1280, 49), (7, 3), (3, 1), (5, 12544), (2, 5), (9, 196),
                                       (4, 6), (3, 7)])
def test_global_mean_every_row_gives_the_same_bits(rows, size):
    # _pool_tiles.h: the SIMD rows keep the portable loop's four double lanes in vectors,
    # so the same sums in the same order; all within float32 rounding of the mean
    x = (np.random.default_rng(rows).standard_normal((rows, size)) * 100).astype(np.float32)
    x[0, -1] = 1e30     # a tail value that dominates its row
    got = []
    for lib, build in POOL_BUILDS:
        got.append(np.empty(rows, np.float32))
        lib.global_pool(x, got[-1], False, build)
    for g in got[1:]:
        np.testing.assert_array_equal(g, got[0])
    exact = x.astype(np.float64).mean(axis=1)
    assert np.all(np.abs(got[0] - exact) <= np.abs(exact) * 2 ** -23 + 1e-30)


@pytest.mark.parametrize("lib,build", POOL_BUILDS, ids=[f"{b}-{lib.__name__.rsplit('.')[-1]}"
                                                        for lib, b in POOL_BUILDS])
@pytest.mark.parametrize("kh,kw", [(2, 2), (2, 1), (4, 1), (1, 2), (3, 3), (1, 1)])
def test_maxpool_tiles_every_row_is_exact(lib, build, kh, kw):
    # max is exact: every row gives NumPy's window max, over widths with vector tails,
    # trailing rows / columns that fill no window, NaN and -inf inputs
    rng = np.random.default_rng(kh * 10 + kw)
    for p, h, w in ((3, 9, 37), (2, 4, 8), (1, 7, 5), (2, 2, 19)):
        x = rng.standard_normal((p, h, w)).astype(np.float32)
        x[0, 0, 1] = -np.inf
        oh, ow = h // kh, w // kw
        y = np.full((p, oh, ow), np.nan, np.float32)
        lib.maxpool_tiles_nchw(x, y, kh, kw, np.empty(w, np.float32), build)
        want = x[:, :oh * kh, :ow * kw].reshape(p, oh, kh, ow, kw).max(axis=(2, 4))
        np.testing.assert_array_equal(y, want)


# tall planes for pool8's row split: stride 2 with pads (ResNet's 3x3 / 2 stem pool), ceil
# mode, kernel == stride, a 5x5 window, batch 2, a channel tail (C not a multiple of 8)
POOL_ROW_GEOMS = [((1, 16, 23, 20), [3, 3], [2, 2], [1, 1, 1, 1], 0),
                  ((2, 11, 17, 9), [2, 2], [2, 2], [0, 0, 0, 0], 1),
                  ((1, 8, 30, 13), [5, 5], [1, 1], [2, 2, 2, 2], 0),
                  ((1, 3, 9, 31), [3, 2], [2, 1], [1, 0, 1, 1], 1)]


@pytest.mark.parametrize("row", [r.name for r in _dwc8.rows() if r.lanes == 8])
@pytest.mark.parametrize("is_max", [True, False], ids=["max", "avg"])
def test_pool8_rows_split_gives_the_one_thread_bits(row, is_max):
    # each thread packs the rows its share of outputs reads into its own plane; the
    # planes' interiors start as +inf (max) / NaN (average), so an output computed from a
    # row its thread did not pack shows, and y starts as NaN, so one left unwritten shows
    rng = np.random.default_rng(3)
    for shape, k, s, pads, ceil in POOL_ROW_GEOMS:
        op = "MaxPool" if is_max else "AveragePool"
        node = Node(op, ["x"], ["y"], dict(kernel_shape=k, strides=s, pads=pads,
                                           ceil_mode=ceil), "p")
        x = rng.standard_normal(shape).astype(np.float32)
        (oshape,) = [o.shape for o in infer_node(node, [TensorInfo("float32", shape)],
                                                 fold=False)]
        kernel, strides, begin, dil, cnt = pool._geometry(node, shape, oshape)
        hp, wp, off = depthwise.c8_plane(shape[2:], oshape[2:], kernel, strides, begin, dil)

        def run(threads):
            q = np.full((threads, hp, wp, 8), -np.inf if is_max else 0.0, np.float32)
            q[:, begin[0]:begin[0] + shape[2], begin[1]:begin[1] + shape[3]] = \
                np.inf if is_max else np.nan
            y = np.full(oshape, np.nan, np.float32)
            _dwc8.pool8(x, off, cnt, y, q.reshape(threads, -1),
                        np.zeros((threads, oshape[3] * 8), np.float32), *strides, *begin,
                        hp, wp, is_max, row)
            return y
        want = run(1)
        np.testing.assert_allclose(want, REFERENCE[op](node.attrs, [x])[0], rtol=1e-6,
                                   atol=1e-6)
        for threads in sorted({2, 3, oshape[2]}):
            np.testing.assert_array_equal(run(threads), want, err_msg=f"{shape} {threads}")
