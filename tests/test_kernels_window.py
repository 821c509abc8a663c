"""Depthwise-conv and pooling kernels beyond the shared cases of test_kernels_fast.py:
every fused activation on depthwise geometries, and the portable (non-AVX2) build of the
c8 loops forced, as on a CPU without AVX2."""
import itertools

import numpy as np
import pytest

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.kernels.fast import depthwise
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, REFERENCE, TensorInfo
from kernel_cases.conv_gemm import ACTS
from kernel_cases.depthwise_pool import CASES as POOL_CASES

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


@pytest.fixture
def portable(monkeypatch):
    monkeypatch.setattr(depthwise, "C8_AVX2", False)


def test_c8_portable_build(portable):
    conv = next(s for s in KERNELS["Conv"] if s.name == "depthwise_c8")
    assert sum(_check(conv, node, inputs, {1, 2}) for node, inputs in _depthwise_cases()) == 54
    for op, name, least in (("MaxPool", "maxpool_c8", 10), ("AveragePool", "avgpool_c8", 10),
                            ("MaxPool", "maxpool_tiles_c", 9)):
        spec = next(s for s in KERNELS[op] if s.name == name)
        assert sum(_check(spec, *case) for case in POOL_CASES[op]()) >= least


def test_maxpool_indices_left_to_reference():
    node = Node("MaxPool", ["x"], ["y", "i"], dict(kernel_shape=[2, 2]), "p")
    ins = [TensorInfo("float32", (1, 2, 4, 4))]
    outs = infer_node(node, ins, fold=False)
    assert not any(s.supports(node, ins, outs) for s in KERNELS["MaxPool"])


@pytest.mark.parametrize("rows,size", [(1280, 49), (7, 3), (3, 1), (5, 12544), (2, 5), (9, 196),
                                       (4, 6), (3, 7)])
def test_global_mean_vector_and_portable_give_the_same_bits(rows, size):
    # _pool_tiles.h: the AVX2 build keeps the portable loop's four double lanes in one
    # vector, so the same sums in the same order; both within float32 rounding of the mean
    from edgenn.kernels.fast._dwc8 import global_pool
    x = (np.random.default_rng(rows).standard_normal((rows, size)) * 100).astype(np.float32)
    x[0, -1] = 1e30     # a tail value that dominates its row
    vec, port = np.empty(rows, np.float32), np.empty(rows, np.float32)
    global_pool(x, vec, False)
    global_pool(x, port, False, False)
    np.testing.assert_array_equal(vec, port)
    exact = x.astype(np.float64).mean(axis=1)
    assert np.all(np.abs(vec - exact) <= np.abs(exact) * 2 ** -23 + 1e-30)
