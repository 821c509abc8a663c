"""The nbits family (graph/shapes/nbits.py): com.microsoft.MatMulNBits and
GatherBlockQuantized against onnxruntime over their variants, through edgenn's converter,
its reference kernels, the QGather rewrite (graph/passes/nbits.py), .enn save / load and
export back to ONNX; malformed nodes give edgenn errors naming the node.

Tolerances come from the arithmetic: at accuracy_level 0 both sides dequantize W and sum
float32 products, so they differ by float32 rounding of sums, bounded by a few units of
2^-24 times sum_k |a_k| |w_nk| (S below; rtol 1e-5 of S leaves room for any summation
order). At accuracy_level 4 onnxruntime rounds A to int8 per block of block_size values
(step = max |a| of the block / 127), so it may move by half a step per element: the bound
is S plus 0.5 * sum over blocks of step * sum |w| of that block.
"""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgenn
from edgenn.errors import EdgennError, UnsupportedOpError
from edgenn.kernels.reference.nbits import dequantize_nbits
from support.helpers import ort_run

MS = "com.microsoft"


def _model(nodes, inputs, outputs, inits):
    """inputs / outputs: [(name, onnx elem type, shape)]; inits: [TensorProto]."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    return m


# -- MatMulNBits ------------------------------------------------------------------------------

def _oracle_weight(codes, scales, zp, blk):
    """float64 W (N, K) from unpacked codes (N, K), per-block scales / zero points (N, kb)
    and the block of each column."""
    return (codes - zp[:, blk]) * scales[:, blk]


def _pack(codes, bits):
    """uint8 codes (..., n) -> packed bytes, first code in the lowest bits (written here
    independently of edgenn's pack_codes)."""
    per = 8 // bits
    c = codes.reshape(codes.shape[:-1] + (-1, per)).astype(np.uint16)
    return sum(c[..., i] << (bits * i) for i in range(per)).astype(np.uint8)


def _nbits_case(K, N, bits, block, a_shape, zp=None, g_idx=False, bias=False, level=0,
                dtype=np.float32, seed=0):
    """A single-node model, its feed and the float64 oracle weight (N, K).
    zp: None, "u8" (packed uint8) or "float"."""
    rng = np.random.default_rng(seed)
    kb = (K + block - 1) // block
    codes = rng.integers(0, 1 << bits, (N, kb * block)).astype(np.uint8)
    b = _pack(codes, bits).reshape(N, kb, block * bits // 8)
    scales = rng.uniform(0.01, 0.1, (N, kb)).astype(dtype)
    if g_idx:
        blk = (rng.permutation(K) % kb).astype(np.int32)     # act-order: shuffled blocks
    else:
        blk = (np.arange(K) // block).astype(np.int32)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")]
    names = ["A", "B", "scales", "", "", ""]
    zp_f = np.full((N, kb), float(1 << (bits - 1)))
    if zp == "u8":
        zc = rng.integers(0, 1 << bits, (N, kb)).astype(np.uint8)
        zb = (kb * bits + 7) // 8
        padded = np.zeros((N, zb * 8 // bits), np.uint8)
        padded[:, :kb] = zc
        inits.append(numpy_helper.from_array(_pack(padded, bits), "zp"))
        names[3], zp_f = "zp", zc.astype(np.float64)
    elif zp == "float":
        zv = rng.uniform(0, (1 << bits) - 1, (N, kb)).astype(dtype)
        inits.append(numpy_helper.from_array(zv, "zp"))
        names[3], zp_f = "zp", zv.astype(np.float64)
    if g_idx:
        inits.append(numpy_helper.from_array(blk, "g_idx"))
        names[4] = "g_idx"
    bias_v = np.zeros(N)
    if bias:
        bias_v = rng.standard_normal(N).astype(dtype)
        inits.append(numpy_helper.from_array(bias_v, "bias"))
        names[5] = "bias"
    while not names[-1]:
        names.pop()
    node = helper.make_node("MatMulNBits", names, ["Y"], "mnb", domain=MS, K=K, N=N,
                            bits=bits, block_size=block, accuracy_level=level)
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([node], [("A", et, list(a_shape))],
                   [("Y", et, list(a_shape[:-1]) + [N])], inits)
    a = rng.standard_normal(a_shape).astype(dtype)
    w = _oracle_weight(codes[:, :K].astype(np.float64), scales.astype(np.float64), zp_f, blk)
    return model, {"A": a}, w, np.asarray(bias_v, np.float64), (b, scales, blk)


def _edgenn_runs(model, feeds):
    """(the planned session's output: a fast kernel where one supports the node, the
    reference interpreter's output)."""
    from edgenn.converters.onnx.importer import import_onnx
    from edgenn.graph.infer import execute
    got = edgenn.InferenceSession(edgenn.convert(model)).run(None, feeds)[0]
    ref = list(execute(import_onnx(model), feeds).values())[0]
    assert got.dtype == ref.dtype and got.shape == ref.shape
    return got, ref


def _edgenn_run(model, feeds):
    """Both of edgenn's outputs for the caller's checks, stacked on a new first axis."""
    return np.stack(_edgenn_runs(model, feeds))


def _check_exact(got, a, w, bias, rtol=1e-5):
    """got within float32 rounding of A @ W^T + bias (float64)."""
    a64 = a.astype(np.float64)
    want = a64 @ w.T + bias
    s = np.abs(a64) @ np.abs(w).T + np.abs(bias)
    assert np.all(np.abs(got.astype(np.float64) - want) <= rtol * s + 1e-6), \
        np.max(np.abs(got - want) / (s + 1e-12))


# (bits, block_size, K): every block size, K a multiple of it or not (padded last block)
GEOMETRIES = [(b, bs, k) for b in (2, 4, 8) for bs, k in
              ((16, 48), (32, 70), (64, 64), (128, 200), (256, 300))]


@pytest.mark.parametrize("bits,block,K", GEOMETRIES)
@pytest.mark.parametrize("zp", [None, "u8"])
def test_matmul_nbits_against_onnxruntime(bits, block, K, zp):
    model, feeds, w, bias, _ = _nbits_case(K, 24, bits, block, (5, K), zp=zp,
                                           seed=bits * block + K)
    want = ort_run(model, feeds)[0]
    got = _edgenn_run(model, feeds)
    assert got.dtype == np.float32 and got.shape == (2, 5, 24)
    _check_exact(want, feeds["A"], w, bias)    # the oracle is onnxruntime's semantics
    _check_exact(got, feeds["A"], w, bias)


@pytest.mark.parametrize("a_shape", [(1, 96), (2, 3, 96), (1, 1, 96), (96,)])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_nbits_ranks_and_bias(a_shape, bias):
    model, feeds, w, b, _ = _nbits_case(96, 40, 4, 32, a_shape, zp="u8", bias=bias, seed=3)
    want = ort_run(model, feeds)[0]
    got = _edgenn_run(model, feeds)
    assert got.shape[1:] == want.shape == tuple(a_shape[:-1]) + (40,)
    _check_exact(want, feeds["A"], w, b)
    _check_exact(got, feeds["A"], w, b)


@pytest.mark.parametrize("K,block", [(64, 16), (80, 32)])
@pytest.mark.parametrize("zp", [None, "float"])
def test_matmul_nbits_g_idx_and_float_zero_points(K, block, zp):
    """4-bit act-order (g_idx) and float zero points: onnxruntime's unpacked path."""
    model, feeds, w, b, _ = _nbits_case(K, 16, 4, block, (3, K), zp=zp, g_idx=True,
                                        bias=True, seed=K)
    want = ort_run(model, feeds)[0]
    got = _edgenn_run(model, feeds)
    _check_exact(want, feeds["A"], w, b)
    _check_exact(got, feeds["A"], w, b)


def test_matmul_nbits_float_zero_points_without_g_idx():
    model, feeds, w, b, _ = _nbits_case(70, 16, 4, 16, (4, 70), zp="float", seed=7)
    _check_exact(ort_run(model, feeds)[0], feeds["A"], w, b)
    _check_exact(_edgenn_run(model, feeds), feeds["A"], w, b)


@pytest.mark.parametrize("bits,zp", [(4, "u8"), (2, None), (8, "u8"), (8, None)])
def test_matmul_nbits_g_idx_beyond_onnxruntime(bits, zp):
    """Variants onnxruntime 1.32 does not compute as specified: with g_idx it reads no
    uint8 zero points (its act-order dequantizer keeps the default 8) and refuses 2-
    and 8-bit weights. edgenn follows the operator's definition: checked on the oracle."""
    model, feeds, w, b, _ = _nbits_case(96, 12, bits, 32, (3, 96), zp=zp, g_idx=True,
                                        seed=bits)
    _check_exact(_edgenn_run(model, feeds), feeds["A"], w, b)


def test_matmul_nbits_flat_scales_and_zero_points():
    """The 1-D scales (N * k_blocks) and zero points (N * zp_blob) older exports write."""
    K, N, block = 48, 6, 16
    model, feeds, w, b, _ = _nbits_case(K, N, 4, block, (2, K), zp="u8", seed=11)
    for t in model.graph.initializer:
        if t.name in ("scales", "zp"):
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).reshape(-1), t.name))
    _check_exact(ort_run(model, feeds)[0], feeds["A"], w, b)
    _check_exact(_edgenn_run(model, feeds), feeds["A"], w, b)


@pytest.mark.parametrize("zp", [None, "u8"])
def test_matmul_nbits_float16(zp):
    """float16 A / scales / bias: computed in float32, rounded once to float16."""
    model, feeds, w, b, _ = _nbits_case(96, 20, 4, 32, (3, 96), zp=zp, bias=True,
                                        dtype=np.float16, seed=5)
    want = ort_run(model, feeds)[0]
    got = _edgenn_run(model, feeds)
    assert got.dtype == want.dtype == np.float16
    a64 = feeds["A"].astype(np.float64)
    exact = a64 @ w.T + b
    s = np.abs(a64) @ np.abs(w).T + np.abs(b)
    for y in (got, want):            # half an fp16 ulp from the rounding, plus the sums
        assert np.all(np.abs(y - exact) <= 2.0 ** -11 * np.abs(exact) + 1e-5 * s + 2 ** -24)


def _int8_a_bound(a, w, block):
    """0.5 * sum over blocks of (max |a| in block / 127) * sum |w| of the block: how far
    onnxruntime's per-block int8 rounding of A may move each output."""
    a64, w64 = np.abs(a.astype(np.float64)), np.abs(w)
    K = a.shape[-1]
    bound = np.zeros(a.shape[:-1] + (w.shape[0],))
    for k0 in range(0, K, block):
        step = a64[..., k0:k0 + block].max(axis=-1, keepdims=True) / 127.0
        bound += 0.5 * step * (w64[:, k0:k0 + block].sum(axis=1))
    return bound


@pytest.mark.parametrize("bits,block,K,zp", [(4, 32, 128, None), (4, 16, 70, "u8"),
                                             (8, 64, 200, "u8"), (4, 128, 256, "u8"),
                                             (8, 32, 96, None)])
@pytest.mark.parametrize("M", [1, 4])
def test_matmul_nbits_accuracy_level_4(bits, block, K, zp, M):
    model, feeds, w, b, _ = _nbits_case(K, 32, bits, block, (M, K), zp=zp, level=4,
                                        seed=K + M)
    want = ort_run(model, feeds)[0]
    got, ref = _edgenn_runs(model, feeds)
    a = feeds["A"]
    exact = a.astype(np.float64) @ w.T + b
    s = np.abs(a.astype(np.float64)) @ np.abs(w).T
    bound = _int8_a_bound(a, w, block) * (1 + 1e-3) + 1e-5 * s + 1e-6
    for y in (want, got):             # a fast kernel may round A as onnxruntime does
        assert np.all(np.abs(y - exact) <= bound), np.max(np.abs(y - exact) / bound)
    _check_exact(ref, a, w, b)        # the reference stays at float32 accuracy


def test_dequantize_nbits_matches_the_oracle():
    """The helper the fast-kernel tests import: layout of B, scales, zero points, g_idx."""
    for bits in (2, 4, 8):
        for zp in (None, "u8", "float"):
            for g in (False, True):
                model, _, w, _, (b, scales, blk) = _nbits_case(
                    70, 5, bits, 16, (1, 70), zp=zp, g_idx=g, seed=bits)
                inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
                got = dequantize_nbits(b, scales, inits.get("zp"), inits.get("g_idx"),
                                       70, 5, bits, 16)
                assert got.dtype == np.float32 and got.shape == (5, 70)
                np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7)


def test_matmul_nbits_enn_round_trip_and_export(tmp_path):
    import onnx
    from edgenn.converters.onnx.exporter import to_model
    model, feeds, w, b, _ = _nbits_case(100, 24, 4, 32, (2, 3, 100), zp="u8", g_idx=True,
                                        bias=True, seed=9)
    graph = edgenn.convert(model)
    assert graph.op_counts()["MatMulNBits"] == 1
    node = next(n for n in graph.nodes if n.op == "MatMulNBits")
    assert graph.consts[node.inputs[1]].dtype == np.uint8          # stays packed
    path = str(tmp_path / "m.enn")
    edgenn.save(graph, path)
    loaded = edgenn.load(path)
    assert loaded.op_counts()["MatMulNBits"] == 1
    got = edgenn.InferenceSession(path).run(None, feeds)[0]
    _check_exact(got, feeds["A"], w, b)
    exported = to_model(loaded)
    onnx.checker.check_model(exported)
    assert [(n.op_type, n.domain) for n in exported.graph.node] == [("MatMulNBits", MS)]
    again = edgenn.InferenceSession(edgenn.convert(exported)).run(None, feeds)[0]
    np.testing.assert_array_equal(again, got)


def test_matmul_nbits_export_runs_in_onnxruntime():
    from edgenn.converters.onnx.exporter import to_model
    model, feeds, w, b, _ = _nbits_case(64, 8, 8, 16, (2, 64), zp="u8", bias=True, seed=2)
    exported = to_model(edgenn.convert(model))
    _check_exact(ort_run(exported, feeds)[0], feeds["A"], w, b)


# -- GatherBlockQuantized ---------------------------------------------------------------------

def _gbq_model(data, scales, zp, idx_shape, out_shape, idx_type=TensorProto.INT64,
               data_tensor=None, zp_tensor=None, reshape_to=None, **attrs):
    """data / zp: numpy arrays (uint8) or, for int4 / uint4, TensorProtos given as
    data_tensor / zp_tensor. reshape_to: data stored in another shape, Reshaped first (as
    the builder's tied embedding)."""
    inits = [data_tensor or numpy_helper.from_array(data, "data"),
             numpy_helper.from_array(scales, "scales")]
    nodes, ins = [], ["data", "ids", "scales"]
    if reshape_to is not None:
        inits[0] = numpy_helper.from_array(data.reshape(-1, 2, data.shape[-1] // 2), "data")
        inits.append(numpy_helper.from_array(np.array(reshape_to, np.int64), "shape"))
        nodes.append(helper.make_node("Reshape", ["data", "shape"], ["table"], "reshape"))
        ins[0] = "table"
    if zp is not None or zp_tensor is not None:
        inits.append(zp_tensor or numpy_helper.from_array(zp, "zp"))
        ins.append("zp")
    nodes.append(helper.make_node("GatherBlockQuantized", ins, ["y"], "gbq", domain=MS,
                                  **attrs))
    et = helper.np_dtype_to_tensor_dtype(scales.dtype)
    return _model(nodes, [("ids", idx_type, list(idx_shape))], [("y", et, list(out_shape))],
                  inits)


def _check_gbq(model, ids, want_ops=None, rtol=0.0):
    want = ort_run(model, {"ids": ids})[0]
    graph = edgenn.convert(model)
    if want_ops is not None:
        assert set(graph.op_counts()) == set(want_ops), graph.op_counts()
    got = edgenn.InferenceSession(graph).run(None, {"ids": ids})[0]
    ref = edgenn.InferenceSession(edgenn.convert(model, optimized=False)).run(
        None, {"ids": ids})[0]                       # the reference kernel, unrewritten
    for y in (got, ref):
        assert y.dtype == want.dtype and y.shape == want.shape
        np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=rtol,
                                   atol=0)
    return graph


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("D,block", [(64, 32), (96, 64), (128, 16)])
@pytest.mark.parametrize("with_zp", [False, True])
def test_gather_block_quantized_uint8(bits, D, block, with_zp):
    rng = np.random.default_rng(bits + D + block)
    V, per = 37, 8 // bits
    data = rng.integers(0, 256, (V, D // per)).astype(np.uint8)
    blocks = (D + block - 1) // block
    scales = rng.uniform(0.01, 0.1, (V, blocks)).astype(np.float32)
    zp = None
    if with_zp:
        zp = rng.integers(0, 256, (V, (blocks + per - 1) // per)).astype(np.uint8)
    ids = rng.integers(-V, V, (2, 5)).astype(np.int64)
    model = _gbq_model(data, scales, zp, (2, 5), (2, 5, D), bits=bits, block_size=block,
                       gather_axis=0, quantize_axis=1)
    # every constant uint8 table fits QGather (4-bit or 8-bit signed codes) except 8-bit
    # codes with zero points, whose differences can leave int8
    graph = _check_gbq(model, ids)
    if not (bits == 8 and with_zp):
        assert set(graph.op_counts()) == {"QGather"}


def test_gather_block_quantized_builder_tied_embedding():
    """The builder's form: a Reshape of the lm_head MatMulNBits weight, 4 bits, block 32,
    no zero points: becomes a 4-bit QGather with every nibble's top bit flipped."""
    rng = np.random.default_rng(0)
    V, D = 50, 96
    data = rng.integers(0, 256, (V, D // 2)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (V, D // 32)).astype(np.float32)
    ids = rng.integers(0, V, (1, 7)).astype(np.int64)
    model = _gbq_model(data, scales, None, (1, 7), (1, 7, D), reshape_to=(V, D // 2),
                       bits=4, block_size=32, gather_axis=0, quantize_axis=1)
    graph = _check_gbq(model, ids, want_ops={"QGather"})
    node = graph.nodes[0]
    assert node.attrs["bits"] == 4
    np.testing.assert_array_equal(graph.consts[node.inputs[0]], data ^ 0x88)


def test_gather_block_quantized_float16_scales_and_int32_indices():
    rng = np.random.default_rng(1)
    V, D = 20, 64
    data = rng.integers(0, 256, (V, D // 2)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (V, 2)).astype(np.float16)
    ids = rng.integers(-V, V, (6,)).astype(np.int32)
    model = _gbq_model(data, scales, None, (6,), (6, D), idx_type=TensorProto.INT32,
                       bits=4, block_size=32)
    _check_gbq(model, ids, want_ops={"GatherBlockQuantized"})   # QGather is float32 only


def _int4_tensor(name, values, signed):
    return helper.make_tensor(name, TensorProto.INT4 if signed else TensorProto.UINT4,
                              list(values.shape), values.reshape(-1).tolist())


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("shape,g,q,block", [((30, 64), 0, 1, 32), ((30, 40), 0, 1, 16),
                                             ((48, 6), 1, 0, 16), ((4, 32, 5), 1, 1, 16),
                                             ((3, 6, 32), -1, 1, 16)])
def test_gather_block_quantized_int4(signed, with_zp, shape, g, q, block):
    rng = np.random.default_rng(len(shape) + g + q)
    lo, hi = (-8, 8) if signed else (0, 16)
    codes = rng.integers(lo, hi, shape).astype(np.int8)
    qa = q % len(shape)
    sshape = tuple((d + block - 1) // block if i == qa else d for i, d in enumerate(shape))
    scales = rng.uniform(0.01, 0.1, sshape).astype(np.float32)
    zp_t = _int4_tensor("zp", rng.integers(lo, hi, sshape), signed) if with_zp else None
    ga = g % len(shape)
    ids = rng.integers(-shape[ga], shape[ga], (2, 3)).astype(np.int64)
    out = shape[:ga] + (2, 3) + shape[ga + 1:]
    model = _gbq_model(None, scales, None, (2, 3), out, data_tensor=_int4_tensor(
        "data", codes, signed), zp_tensor=zp_t, bits=4, block_size=block, gather_axis=g,
        quantize_axis=q)
    _check_gbq(model, ids)


def test_gather_block_quantized_enn_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    V, D = 16, 64
    data = rng.integers(0, 256, (V, D)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (V, 2)).astype(np.float16)
    zp = rng.integers(0, 256, (V, 2)).astype(np.uint8)
    model = _gbq_model(data, scales, zp, (3,), (3, D), bits=8, block_size=32)
    ids = np.array([0, -1, 5], np.int64)
    path = str(tmp_path / "g.enn")
    edgenn.save(edgenn.convert(model), path)
    got = edgenn.InferenceSession(path).run(None, {"ids": ids})[0]
    np.testing.assert_array_equal(got, ort_run(model, {"ids": ids})[0])


# -- malformed nodes --------------------------------------------------------------------------

def _bad_matmul(change):
    model, feeds, *_ = _nbits_case(64, 8, 4, 32, (2, 64), zp="u8", seed=0)
    node = model.graph.node[0]
    inits = {t.name: t for t in model.graph.initializer}
    change(node, inits)
    return model, feeds


def _set_attr(node, key, value):
    for a in node.attribute:
        if a.name == key:
            a.CopyFrom(helper.make_attribute(key, value))


def _set_init(inits, name, value):
    inits[name].CopyFrom(numpy_helper.from_array(value, name))


BAD_MATMUL = {
    "blob size": (lambda n, i: _set_init(i, "B", np.zeros((8, 2, 8), np.uint8)),
                  "block_size * bits / 8"),
    "k_blocks": (lambda n, i: _set_init(i, "B", np.zeros((8, 3, 16), np.uint8)), "B"),
    "scales shape": (lambda n, i: _set_init(i, "scales", np.ones((8, 3), np.float32)),
                     "scales"),
    "zero points shape": (lambda n, i: _set_init(i, "zp", np.zeros((8, 2), np.uint8)),
                          "zero_points"),
    "block size": (lambda n, i: _set_attr(n, "block_size", 24), "block_size"),
    "K": (lambda n, i: _set_attr(n, "K", 60), "K=60"),
    "bits 3": (lambda n, i: _set_attr(n, "bits", 3), "bits 3"),
}


@pytest.mark.parametrize("case", sorted(BAD_MATMUL))
def test_matmul_nbits_malformed_names_the_node(case):
    change, words = BAD_MATMUL[case]
    model, feeds = _bad_matmul(change)
    with pytest.raises(EdgennError) as err:
        edgenn.InferenceSession(model).run(None, feeds)
    assert "mnb" in str(err.value) and words in str(err.value), str(err.value)


def test_matmul_nbits_g_idx_out_of_range_names_the_node():
    model, feeds, *_ = _nbits_case(64, 8, 4, 32, (2, 64), g_idx=True, seed=0)
    for t in model.graph.initializer:
        if t.name == "g_idx":
            t.CopyFrom(numpy_helper.from_array(np.full(64, 2, np.int32), "g_idx"))
    with pytest.raises(EdgennError, match="mnb.*g_idx"):
        edgenn.InferenceSession(model).run(None, feeds)


def test_unsupported_variants_are_listed_by_node():
    bits3, _ = _bad_matmul(lambda n, i: _set_attr(n, "bits", 3))
    with pytest.raises(UnsupportedOpError) as err:
        edgenn.convert(bits3)
    assert err.value.unsupported == {"com.microsoft.MatMulNBits (bits 3)": ["mnb"]}
    data = np.zeros((4, 16), np.uint8)
    model = _gbq_model(data, np.ones((4, 1), np.float32), None, (2,), (2, 128), bits=1,
                       block_size=32)
    with pytest.raises(UnsupportedOpError, match="gbq"):
        edgenn.convert(model)


def test_gather_block_quantized_bad_scales_names_the_node():
    data = np.zeros((4, 32), np.uint8)
    model = _gbq_model(data, np.ones((4, 3), np.float32), None, (2,), (2, 64), bits=4,
                       block_size=32)
    with pytest.raises(EdgennError, match="gbq.*scales"):
        edgenn.InferenceSession(model).run(None, {"ids": np.array([0, 1], np.int64)})
