"""The int8 C kernels (QConv group-1 / grouped / depthwise, QGemm) against the reference of
the int8 spec, on every code path forced: AVX2 and portable C, the vpmaddubsw (u8) and the
int16 (wide) arithmetic. Bit-exact everywhere; one output step (u8) or float rounding
(float32 output) only for the transcendental activations (Sigmoid, SiLU, Gelu).

Cases: tests/support/kernel_cases/quant.py (also run by test_kernels_fast through the registry).
"""
import itertools

import numpy as np
import pytest

from edgenn.graph.infer import infer_node
from edgenn.oplist import load_kernels
from edgenn.registry import KERNELS, REFERENCE, TensorInfo
from support.kernel_cases.quant import (CONV_GEOMS, GEMM_SHAPES, TRANSCENDENTAL,
                                        epilogue_variants, is_depthwise, qconv_case,
                                        qconv_cases, qgemm_case, qgemm_cases,
                                        saturating_conv_case)

load_kernels()
from edgenn.kernels.int8 import _qgemm, qconv, qgemm# noqa: E402

# the rows of the int8 tables (qgemm_table.h) this CPU runs natively (the VNNI bodies
# emulated: test_isa.py): the base rows (portable, AVX2) on every weight path, the VNNI
# rows on the plain u8 one
BASE_ROWS = [r.name for r in _qgemm.rows() if not r.exact]
VNNI_ROWS = [r.name for r in _qgemm.rows() if r.exact and not r.pixel_tiles]
DW_ROWS = [r.name for r in _qgemm.dw_rows()]
VNNI_MODES = [{"row": r} for r in VNNI_ROWS]
AVX512VNNI = "qgemm_u8s8_6x32__avx512vnni"      # the implicit-GEMM plans' row
# the pixel-tile rows (pixels broadcast x 32 channels in the lanes, on the shifted image)
PIXEL_ROWS = [r.name for r in _qgemm.rows() if r.pixel_tiles]
PIXEL_TILES = "qconv_u8s8_7x32__avx512vnni"     # the tuner's first one (its spec's rules)
HAS_AVX512VNNI = _qgemm.has_vnni("avx512vnni")


def _base_of(pixel_row):
    """The row a pixel-tile row's bytes are compared with: the tier's 6-row tiles, or the
    AVX2 row's."""
    isa = _qgemm.ROWS[_qgemm.row_index(pixel_row)].isa
    same = [r for r in VNNI_ROWS if _qgemm.ROWS[_qgemm.row_index(r)].isa == isa]
    return (same or BASE_ROWS)[-1]


def _infos(inputs, const):
    return [None if v is None else TensorInfo.of(v) if i in const else
            TensorInfo(v.dtype.name, v.shape) for i, v in enumerate(inputs)]


def _reference(node, inputs):
    return np.asarray(REFERENCE[node.op](node.attrs, inputs)[0])


def assert_matches(got, want, node, what=""):
    act = node.attrs.get("activation", "")
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if act in TRANSCENDENTAL:
        if got.dtype == np.uint8:
            diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
            assert diff.max(initial=0) <= 1, (what, node.attrs)
        else:
            scale = max(float(np.abs(want).max(initial=0)), 1e-6)
            assert np.abs(got - want).max(initial=0) <= 2e-6 * scale, (what, node.attrs)
    else:
        assert np.array_equal(got, want), (what, node.attrs, int(np.sum(got != want)))


def _paths(node, ins):
    """-> [(name, prepare(node, ins, outs, row=, **mode), [(row, mode)])] for this node:
    the base rows on every weight path (the default, wide, u8 + excess forced), the VNNI
    rows on theirs; the depthwise kernel's rows on its one path."""
    if qconv._is_depthwise(node, ins):
        return [("dw", qconv.prepare_depthwise, [(r, {}) for r in DW_ROWS])]
    runs = [(r, m) for r in BASE_ROWS for m in ({}, {"force_wide": True},
                                                 {"excess_limit": 1.0})]
    runs += [(r, {}) for r in VNNI_ROWS]
    return [("gemm", qgemm.prepare_qgemm if node.op == "QGemm" else qconv.prepare_gemm, runs)]


def check_all_paths(node, inputs, const):
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    want = _reference(node, inputs)
    supported = (qgemm._supports if node.op == "QGemm" else
                 qconv._dw_supports if qconv._is_depthwise(node, ins) else qconv._gemm_supports)
    assert supported(node, ins, outs), node.attrs
    ran = 0
    for name, prepare, runs in _paths(node, ins):
        for row, mode in runs:
            if name == "gemm" and node.op == "QConv" and _can_flat(node, inputs):
                # the in-place (flat) im2col on, and off on the wide path
                mode = dict(mode, flat=not mode.get("force_wide", False))
            run = prepare(node, ins, outs, row=row, **mode)
            for fill in (0, 255):   # every element written
                got = np.full(outs[0].shape, fill, outs[0].dtype)
                run(inputs, [got])
                assert_matches(got, want, node, f"{name} {row} {mode}")
            ran += 1
    return ran


def _can_flat(node, inputs) -> bool:
    """QConvKernel's flat plans: one group, not a direct 1x1 (stride 1, no padding: it
    reads its rows in place already)."""
    w = inputs[3]
    direct = w.shape[2:] == (1, 1) and not any(node.attrs.get("pads", [0] * 4)) and \
        all(v == 1 for v in node.attrs.get("strides", [1, 1]))
    return not direct and node.attrs.get("group", 1) == 1


def _ids(cases):
    return [f"{i}-{c[0].attrs.get('activation') or 'none'}" for i, c in enumerate(cases)]


CONV_CASES = list(qconv_cases())
GEMM_CASES = list(qgemm_cases())


@pytest.mark.parametrize("case", CONV_CASES, ids=_ids(CONV_CASES))
def test_qconv_every_path_matches_reference(case):
    assert check_all_paths(*case) >= 1


GROUP_CONV_CASES = [c for c in CONV_CASES
                    if not qconv._is_depthwise(c[0], _infos(c[1], c[2]))]


@pytest.mark.parametrize("case", GROUP_CONV_CASES, ids=_ids(GROUP_CONV_CASES))
def test_qconv_threads_give_the_one_thread_bytes(case):
    """At 2 and 3 threads a group-1 QConv's threads fill their shares of the padded image
    (plain, phase planes, shifted copies or 4-channel interleaved), of the residual's and
    the output's flat copies, and split the columns or the output channels: every byte as
    at one thread, on every tier and plan (flat or gathered); the outputs pre-filled with 0
    and 255."""
    node, inputs, const = case
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    want = _reference(node, inputs)
    modes = [{}, {"force_wide": True}] + VNNI_MODES
    if _can_flat(node, inputs):
        modes += [dict(m, flat=True) for m in [{}] + VNNI_MODES]
    for mode in modes:
        base = np.empty(outs[0].shape, outs[0].dtype)
        qconv.prepare_gemm(node, ins, outs, **mode)(inputs, [base])
        assert_matches(base, want, node, f"{mode}")
        for threads, fill, split in itertools.product((2, 3), (0, 255), (False, True)):
            got = np.full(outs[0].shape, fill, outs[0].dtype)
            run = qconv.prepare_gemm(node, ins, outs, threads=threads, split_channels=split,
                                     **mode)
            run(inputs, [got])
            np.testing.assert_array_equal(got, base, f"{mode} threads={threads} {split}")
            per_group = outs[0].shape[1] // node.attrs.get("group", 1)
            assert run.kernel.splits_channels == (split and per_group > 6)   # >= 2 panels


def test_qgemm_threads_give_the_one_thread_bytes():
    """At 2 and 3 threads QGemm's threads split the rows (whole 6-row panels) or, with
    fewer panels than threads, the columns (whole groups of 32): every byte as at one
    thread, on every tier and path; the outputs pre-filled with 0 and 255."""
    split_cols = 0
    for node, inputs, const in GEMM_CASES:
        ins = _infos(inputs, const)
        outs = infer_node(node, ins, fold=False)
        for mode in [{}, {"force_wide": True}, {"excess_limit": 1.0}] + VNNI_MODES:
            base = np.empty(outs[0].shape, outs[0].dtype)
            qgemm.prepare_qgemm(node, ins, outs, **mode)(inputs, [base])
            for threads, fill in itertools.product((2, 3), (0, 255)):
                got = np.full(outs[0].shape, fill, outs[0].dtype)
                run = qgemm.prepare_qgemm(node, ins, outs, threads=threads, **mode)
                run(inputs, [got])
                np.testing.assert_array_equal(got, base, f"{mode} threads={threads}")
                split_cols += run.kernel.splits_columns
    assert split_cols >= 10          # the one-row and few-row cases of >= 64 columns


@pytest.mark.parametrize("case", GEMM_CASES, ids=_ids(GEMM_CASES))
def test_qgemm_every_path_matches_reference(case):
    assert check_all_paths(*case) >= 1


DW_GEOMS = [g for g in CONV_GEOMS if is_depthwise(g)]


@pytest.mark.parametrize("geom", [CONV_GEOMS[0], CONV_GEOMS[2], DW_GEOMS[0], DW_GEOMS[1],
                                  DW_GEOMS[-1]], ids=["3x3", "1x1", "dw_s1", "dw_s2", "dw_s1_wide"])
def test_qconv_every_epilogue(geom):
    """Each epilogue variant (integer path, float path with / without residual, float
    output) on one group-1 3x3, one 1x1 and two depthwise geometries."""
    rng = np.random.default_rng(5)
    for act, params, yq, res in epilogue_variants():
        check_all_paths(*qconv_case(rng, geom, act, params, yq, res))


def test_qgemm_every_epilogue():
    rng = np.random.default_rng(6)
    variants = list(epilogue_variants()) + [("Gelu", [], True, False), ("Gelu", [], False, False)]
    for lead, k, n in (GEMM_SHAPES[2], GEMM_SHAPES[6]):
        for act, params, yq, res in variants:
            check_all_paths(*qgemm_case(rng, lead, k, n, act, params, yq, res))


# -- the saturating corner --------------------------------------------------------------------

def _int_conv(x, x_zp, w, bias, stride, pad):
    """Independent integer oracle: int64 direct 2-D conv (group 1, dilation 1)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
            acc += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j].astype(np.int64))
    return acc + bias.reshape(1, m, 1, 1)


@pytest.mark.parametrize("geom", [
    (1, 5, 7, 7, 5, 3, 1, 1, 1, 5),          # 7x7 rows, odd height: two rows per vector
    (1, 3, 8, 8, 3, 3, 1, 1, 1, 3),          # rows of exactly 8, even height
    (2, 4, 14, 14, 4, 3, 2, 1, 1, 4),        # stride 2 to 7x7 (MobileNetV2's 576 @ 14x14)
    (1, 6, 5, 9, 6, 3, 2, 0, 1, 6),          # stride 2, no padding: 2 x 4 outputs
    (1, 2, 2, 3, 2, 3, 1, 1, 1, 2),          # two rows of 3
    (1, 17, 1, 6, 17, 3, 1, 1, 1, 17),       # one row (the pair's second half not stored)
    (1, 3, 9, 18, 3, 3, 1, 1, 1, 3),         # rows of 18: the one-row-per-vector sweep
], ids=lambda g: "x".join(map(str, g[1:4])) + f"_s{g[6]}")
@pytest.mark.parametrize("act", ["Relu", ""])
def test_integer_depthwise_on_narrow_planes(geom, act):
    """The integer epilogue (u8 out, no residual) on planes whose rows are <= 8 outputs:
    on AVX-512 VNNI the u8 plane kernel packs two output rows into each vector. Bit-exact
    against the reference on every path this CPU has, every output written."""
    rng = np.random.default_rng(geom[1] * 31 + geom[3])
    node, inputs, const = qconv_case(rng, geom, act, (), True, False, bits=8)
    assert check_all_paths(node, inputs, const) >= 1


def test_saturating_weights_take_the_exact_path():
    rng = np.random.default_rng(7)
    node, inputs, const = saturating_conv_case(rng)
    w = inputs[3]
    assert not qgemm.u8_path_exact(w.reshape(w.shape[0], -1))
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    for row in BASE_ROWS:
        run = qconv.prepare_gemm(node, ins, outs, row=row)
        assert run.wide
    # the accumulators themselves, against an integer oracle: float epilogue, scale 1
    node.attrs["activation"] = ""
    inputs = inputs[:6] + [None, None] + inputs[8:]
    inputs[1] = np.array(np.float32(1.0))
    inputs[4] = np.ones(w.shape[0], np.float32)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    want = _int_conv(inputs[0], 0, w, inputs[8], 1, 1).astype(np.float32)
    for row in BASE_ROWS:
        got = np.empty(outs[0].shape, np.float32)
        qconv.prepare_gemm(node, ins, outs, row=row)(inputs, [got])
        assert np.array_equal(got, want)
    check_all_paths(*saturating_conv_case(rng))


def test_u8_path_limits_are_exact():
    """Pairs right at the bound (|w_2j + w_2j+1| = 128, same sign) against x = 255 stay on
    the u8 path and are exact; one past the bound is refused."""
    w = np.zeros((4, 8), np.int8)
    w[0, :] = 64
    w[1, :] = [-128, 0] * 4
    w[2, :] = [-64, -64, 127, -128, 100, 28, -1, -127]
    w[3, :] = [127, 1, -128, 0, 0, -128, 1, 127]
    assert qgemm.u8_path_exact(w)
    assert not qgemm.u8_path_exact(np.array([[65, 64]], np.int8))
    assert not qgemm.u8_path_exact(np.array([[-65, -64]], np.int8))
    assert qgemm.u8_path_exact(np.array([[-128, 127]], np.int8))   # mixed signs never saturate
    rng = np.random.default_rng(8)
    x = np.full((1, 8, 5, 5), 255, np.uint8)
    wc = w.reshape(4, 8, 1, 1)
    node, inputs, const = qconv_case(rng, (1, 8, 5, 5, 4, 1, 1, 0, 1, 1), x=x, w=wc, x_zp=0,
                                     y_quant=False)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    assert not qconv.prepare_gemm(node, ins, outs).wide
    check_all_paths(node, inputs, const)
    b = np.ascontiguousarray(w.T)     # the same pairs along K for QGemm
    check_all_paths(*qgemm_case(rng, (3,), 8, 4, a=np.full((3, 8), 255, np.uint8), b=b, a_zp=0))


@pytest.mark.parametrize("w_value", [63, -64, 64, -128])
def test_s16_accumulation_extremes(w_value):
    """Long K (several 255-group chunks) with every pair sum at its extreme: the wrapping
    s16 sums of the u8 path must still recover the exact int32 totals."""
    rng = np.random.default_rng(9)
    k = 4 * 600 + 3
    a = np.full((7, k), 255, np.uint8)
    b = np.full((k, 9), w_value, np.int8)
    b[:, 1] = -b[:, 0] if w_value != -128 else 127
    node, inputs, const = qgemm_case(rng, (7,), k, 9, a=a, b=b, a_zp=0, y_quant=False,
                                     bias=False)
    inputs[1] = np.array(np.float32(1.0))
    inputs[4] = np.ones(9, np.float32)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
    for row in BASE_ROWS:
        for wide in (False, True):
            run = qgemm.prepare_qgemm(node, ins, outs, row=row, force_wide=wide)
            got = np.empty(outs[0].shape, np.float32)
            run(inputs, [got])
            assert np.array_equal(got, want), (row, wide)


# -- plumbing ---------------------------------------------------------------------------------

@pytest.mark.skipif(len(BASE_ROWS) < 2, reason="no AVX2 row on this CPU (or EDGENN_MAX_ISA)")
def test_avx2_and_portable_agree_bit_for_bit():
    rng = np.random.default_rng(12)
    node, inputs, const = qconv_case(rng, (2, 19, 23, 17, 13, 3, 1, 1, 1, 1), "HardSwish", (),
                                     True, True, bits=8)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    got = [np.empty(outs[0].shape, np.uint8) for _ in BASE_ROWS]
    for g, row in zip(got, BASE_ROWS):
        run = qconv.prepare_gemm(node, ins, outs, row=row)
        assert run.kernel.row_name == row
        run(inputs, [g])
    assert all(np.array_equal(got[0], g) for g in got[1:])


def test_strided_input_is_accepted():
    rng = np.random.default_rng(13)
    node, inputs, const = qconv_case(rng, (1, 6, 9, 9, 4, 3, 1, 1, 1, 1), "Relu")
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    want = _reference(node, inputs)
    big = np.zeros((1, 6, 9, 18), np.uint8)
    big[..., ::2] = inputs[0]
    inputs[0] = big[..., ::2]
    got = np.empty(outs[0].shape, np.uint8)
    qconv.prepare_gemm(node, ins, outs)(inputs, [got])
    assert np.array_equal(got, want)


def test_registered_and_capability_filter():
    names = {s.name for s in KERNELS["QConv"]} | {s.name for s in KERNELS["QGemm"]}
    assert {"qconv_gemm_int8", "qconv_dw_int8", "qgemm_int8", "qconv_gemm_int8_exp",
            "qconv_dw_int8_exp", "qgemm_int8_exp"} <= names
    rng = np.random.default_rng(14)
    node, inputs, const = qconv_case(rng, (1, 4, 6, 6, 5, 3, 1, 1, 1, 1))
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    assert qconv._gemm_supports(node, ins, outs) and not qconv._dw_supports(node, ins, outs)
    bad_zp = list(ins)
    bad_zp[5] = TensorInfo.of(np.ones(5, np.int8))
    assert not qconv._gemm_supports(node, bad_zp, outs)
    runtime_w = list(ins)
    runtime_w[3] = TensorInfo("int8", inputs[3].shape)
    assert not qconv._gemm_supports(node, runtime_w, outs)
    runtime_scale = list(ins)
    runtime_scale[1] = TensorInfo("float32", ())
    assert not qconv._gemm_supports(node, runtime_scale, outs)


def test_plan_once_run_many():
    """run() is a bound call on preallocated state: no new arrays per call (a pure C path)."""
    import tracemalloc
    rng = np.random.default_rng(15)
    node, inputs, const = qconv_case(rng, (1, 16, 14, 14, 24, 3, 1, 1, 1, 1), "Relu")
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    run = qconv.prepare_gemm(node, ins, outs)
    y = np.empty(outs[0].shape, np.uint8)
    run(inputs, [y])
    tracemalloc.start()
    for _ in range(20):
        run(inputs, [y])
    size, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4096, peak


# -- 8-bit weights: the u8 path plus the sparse excess ------------------------------------------

def test_split_excess_is_exact_and_sparse():
    rng = np.random.default_rng(21)
    w = rng.integers(-128, 128, (37, 61)).astype(np.int8)
    w[0, :6] = [-128, -128, 127, 127, -128, 127]          # the extremes, both signs
    main, excess = qgemm.split_excess(w)
    assert np.array_equal(main.astype(np.int16) + excess, w)
    assert qgemm.u8_path_exact(main)
    assert qgemm.u8_path_exact(excess)                     # vpmaddubsw exact on it too
    pairs = np.pad(excess, ((0, 0), (0, 1))).reshape(37, -1, 2)
    assert np.all(np.count_nonzero(pairs, axis=2) <= 1)    # one element per pair
    assert list(main[0, :6]) == [-128, 0, 127, 1, -128, 127]


def test_pair_analysis_on_every_int8_pair():
    """All 65,536 pairs (a, b), each a row of its own: a row is exact exactly when 255 x
    its same-signed parts fit in int16 (the vpmaddubsw rule itself), and the split keeps a
    and moves what b brings past 128 into the excess."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    rows = np.stack([a.ravel(), b.ravel()], axis=1).astype(np.int8)
    pos = np.maximum(rows, 0).astype(int).sum(1)
    neg = np.maximum(-rows.astype(int), 0).sum(1)
    saturates = (255 * pos > 32767) | (255 * neg > 32768)
    assert [qgemm.u8_path_exact(r[None]) for r in rows[::97]] == list(~saturates[::97])
    main, excess = qgemm.split_excess(rows)
    assert np.array_equal(main[:, 0], rows[:, 0])
    assert np.array_equal(main.astype(np.int16) + excess, rows)
    assert np.array_equal(excess[:, 1] != 0, saturates)
    assert qgemm.u8_path_exact(main) and qgemm.u8_path_exact(excess)


def _gaussian_weights(rng, shape):
    """Weights as onnxruntime's int8 quantizer writes them (8-bit, max-abs per tensor):
    saturating pairs are rare, so the default path is u8 + excess."""
    w = rng.standard_normal(shape)
    return np.clip(np.rint(w / np.abs(w).max() * 127), -127, 127).astype(np.int8)


@pytest.mark.parametrize("op", ["QGemm", "QConv"])
def test_realistic_8bit_weights_take_u8_plus_excess(op):
    rng = np.random.default_rng(22)
    if op == "QGemm":
        node, inputs, const = qgemm_case(rng, (13,), 300, 70, b=_gaussian_weights(rng, (300, 70)))
        prepare, w_rows = qgemm.prepare_qgemm, inputs[3].T
    else:
        geom = (1, 16, 12, 11, 20, 3, 1, 1, 1, 1)   # K = 144 (past the small-K kernel), M = 20
        node, inputs, const = qconv_case(rng, geom)
        inputs[3] = _gaussian_weights(rng, inputs[3].shape)
        prepare, w_rows = qconv.prepare_gemm, inputs[3].reshape(inputs[3].shape[0], -1)
    assert not qgemm.u8_path_exact(w_rows)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    for row in BASE_ROWS:
        run = prepare(node, ins, outs, row=row)
        assert run.excess and not run.wide
        got = np.empty(outs[0].shape, outs[0].dtype)
        run(inputs, [got])
        assert_matches(got, _reference(node, inputs), node, row)
    check_all_paths(node, inputs, const)


# -- run-time activation scale (onnxruntime's quantize_dynamic form) -------------------------------

@pytest.mark.parametrize("geom", [(1, 5, 9, 8, 7, 3, 1, 1, 1, 1), (2, 6, 9, 9, 6, 3, 2, 1, 1, 6),
                                  (1, 16, 7, 7, 13, 5, 1, 2, 1, 1), (1, 4, 6, 6, 6, 3, 1, 1, 1, 2),
                                  (1, 8, 9, 8, 7, 3, 1, 1, 1, 1)],
                         ids=["3x3_pad", "dw_s2", "5x5_pad2", "grouped", "3x3_4k"])
@pytest.mark.parametrize("threads", [1, 2])
def test_dynamic_scale_changes_every_call(geom, threads):
    """One prepared kernel, several calls with a new x_scale / x_zp each: the per-channel
    constants and the padding (which reads the zero point) follow every call."""
    rng = np.random.default_rng(31)
    node, inputs, const = qconv_case(rng, geom, "Relu", (), False, dynamic=True, fbias=True)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    depthwise = qconv._is_depthwise(node, ins)
    four_k = geom[1] % 4 == 0 and geom[6] == 1 and geom[-1] == 1  # for 3x3_4k and 5x5_pad2
    rows = DW_ROWS if depthwise else BASE_ROWS + VNNI_ROWS   # VNNI: the implicit GEMM
    if four_k and not depthwise:                               # and the pixel tiles
        rows = rows + PIXEL_ROWS
    for row in rows:
        mode = {"row": row}
        if depthwise:
            run = qconv.prepare_depthwise(node, ins, outs, threads=threads, **mode)
        else:
            run = qconv.prepare_gemm(node, ins, outs, threads=threads, **mode)
            assert run.implicit == (row in [AVX512VNNI] + PIXEL_ROWS and four_k)
        for x_zp, scale in ((0, 0.02), (255, 0.5), (117, 0.003), (117, 0.04)):
            inputs[1], inputs[2] = np.array(np.float32(scale)), np.array(np.uint8(x_zp))
            inputs[0] = rng.integers(0, 256, inputs[0].shape, dtype=np.uint8)
            got = np.empty(outs[0].shape, np.float32)
            run(inputs, [got])
            assert_matches(got, _reference(node, inputs), node,
                           f"zp {x_zp} {row}")


# -- flat plans: the im2col read in place over the padded width ---------------------------------

FLAT_GEOMS = [  # (n, C, H, W, M, k, stride, pad, dilation, group): group 1
    (1, 64, 56, 56, 16, 3, 1, 1, 1, 1),      # ResNet-like: several pixel blocks
    (2, 5, 9, 13, 7, 3, 1, 1, 1, 1),         # batch 2, K / M / N tails
    (1, 4, 12, 11, 5, 3, 1, 2, 2, 1),        # dilation 2, pad 2
    (1, 3, 10, 17, 6, 5, 1, 0, 1, 1),        # 5x5, no padding (Wp = W)
    (1, 8, 7, 7, 12, 3, 1, 1, 1, 1),         # 7x7: 1 dropped column of 8
    (1, 2, 3, 40, 6, 3, 1, 1, 1, 1),         # wide and short
    (1, 16, 8, 8, 8, 1, 1, 1, 1, 1),         # 1x1 with padding: not direct
    # strided: through the phase planes
    (1, 64, 56, 56, 16, 3, 2, 1, 1, 1),      # ResNet's 3x3 stride 2
    (2, 5, 15, 13, 7, 3, 2, 1, 1, 1),        # odd sizes, batch 2
    (1, 3, 40, 37, 8, 7, 2, 3, 1, 1),        # 7x7 stem, stride 2, pad 3
    (1, 16, 14, 14, 12, 1, 2, 0, 1, 1),      # 1x1 stride 2 (the downsample): no waste
    (1, 6, 17, 19, 5, 3, 3, 0, 1, 1),        # stride 3, no padding
    (1, 4, 20, 21, 6, 3, 2, 2, 2, 1),        # stride 2, dilation 2
]


def _output_case(rng, geom, out):
    """A Relu QConv with 8-bit weights and the output `out` (u8, f32 or u8+residual) ->
    (node, inputs, infos, output infos, the reference's output)."""
    node, inputs, const = qconv_case(rng, geom, "Relu" if out != "f32" else "",
                                     y_quant=out != "f32", bits=8,
                                     residual=out == "u8+residual")
    ins = _infos(inputs, const)
    return node, inputs, ins, infer_node(node, ins, fold=False), _reference(node, inputs)


@pytest.mark.parametrize("geom", FLAT_GEOMS)
@pytest.mark.parametrize("out", ["u8", "f32", "u8+residual"])
def test_flat_plans_match_the_reference(geom, out):
    """Every computed column the flat plan drops is dropped, every kept one is the gathered
    plan's byte, on each tier and thread count (the threads split the flat columns); a
    residual is read through its copy in the flat layout."""
    node, inputs, ins, outs, want = _output_case(np.random.default_rng(sum(geom)), geom, out)
    for row in BASE_ROWS + VNNI_ROWS:
        for threads in (1, 2, 3):
            run = qconv.prepare_gemm(node, ins, outs, row=row, threads=threads, flat=True)
            assert run.flat
            got = np.full(outs[0].shape, 7, outs[0].dtype)
            run(inputs, [got])
            assert_matches(got, want, node, f"flat {row} threads={threads}")


def test_flat_is_chosen_where_the_dropped_columns_are_few():
    rng = np.random.default_rng(3)
    for geom, flat in [((1, 8, 56, 56, 8, 3, 1, 1, 1, 1), True),     # 1 of 57 columns
                       ((1, 8, 7, 7, 8, 3, 1, 1, 1, 1), True),       # 1 of 8
                       ((1, 8, 3, 3, 8, 5, 1, 2, 1, 1), False),      # 2 of 5
                       ((1, 8, 56, 56, 8, 3, 2, 1, 1, 1), True),     # stride 2: 1 of 29
                       ((1, 8, 4, 4, 8, 5, 2, 2, 1, 1), False)]:     # stride 2: 2 of 4
        node, inputs, const = qconv_case(rng, geom)
        ins = _infos(inputs, const)
        run = qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False))
        assert run.flat == flat, geom
    node, inputs, const = qconv_case(rng, (1, 8, 56, 56, 8, 3, 1, 1, 1, 1), residual=True)
    ins = _infos(inputs, const)
    assert qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False)).flat
    node, inputs, const = qconv_case(rng, (1, 8, 56, 56, 8, 3, 1, 1, 1, 4))   # 4 groups
    ins = _infos(inputs, const)
    with pytest.raises(ValueError, match="flat"):
        qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False), flat=True)


STRIDED_IMPLICIT_GEOMS = [    # on the shifted image: strided, group 1, 4k channels
    (1, 64, 56, 56, 24, 3, 2, 1, 1, 1),      # ResNet's 3x3 stride 2
    (2, 8, 15, 13, 7, 3, 2, 1, 1, 1),        # odd sides, batch 2
    (1, 16, 14, 14, 12, 1, 2, 0, 1, 1),      # 1x1 stride 2 (the downsample)
    (1, 4, 17, 19, 5, 3, 3, 0, 1, 1),        # stride 3, no padding
    (1, 8, 20, 21, 6, 3, 2, 2, 2, 1),        # stride 2, dilation 2
    (1, 12, 9, 40, 8, 5, 2, 2, 1, 1),        # 5x5 stride 2 on a wide plane (vector fill)
]

IMPLICIT_GEOMS = [    # stride 1, group 1, 4k channels: the implicit GEMM's convs
    (1, 64, 7, 7, 70, 3, 1, 1, 1, 1),        # 7x7, a channel tail of 4
    (2, 8, 9, 11, 13, 3, 1, 1, 1, 1),        # batch 2, odd sides
    (1, 4, 12, 11, 5, 3, 1, 2, 2, 1),        # dilation 2, pad 2
    (1, 16, 5, 6, 9, 5, 1, 2, 1, 1),         # 5x5
    (1, 12, 20, 20, 40, 3, 1, 0, 1, 1),      # no padding: 18 x 18
    (1, 32, 3, 3, 8, 3, 1, 1, 1, 1),         # a plane smaller than one tile
    (1, 64, 56, 56, 16, 3, 1, 1, 1, 1),      # several pixel blocks
]


@pytest.mark.skipif(not HAS_AVX512VNNI, reason="AVX-512 VNNI not on this CPU (or "
                    "EDGENN_MAX_ISA): the implicit GEMM is that tier's")
@pytest.mark.parametrize("geom", IMPLICIT_GEOMS + STRIDED_IMPLICIT_GEOMS)
@pytest.mark.parametrize("out", ["u8", "f32", "u8+residual"])
def test_implicit_gemm_is_the_packed_plan_bit_for_bit(geom, out):
    """No im2col block: the tiles read the image laid out 4 channels per pixel at each
    group's offset; the same bytes as the packed flat plan and the reference, any thread
    count, every epilogue (integer, float with residual, float output)."""
    node, inputs, ins, outs, want = _output_case(np.random.default_rng(sum(geom) + len(out)),
                                                 geom, out)
    packed = qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI, flat=True, implicit=False)
    base = np.empty(outs[0].shape, outs[0].dtype)
    packed(inputs, [base])
    assert not packed.implicit
    strided = geom[6] > 1            # strided convs: the shifted image only
    for threads, exact in itertools.product((1, 2, 3), (True,) if strided else (False, True)):
        run = qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI, threads=threads,
                                 implicit=True, exact=exact)
        assert run.implicit and run.flat and run.exact == exact
        # no B block or row buffers: per thread 64 bytes and the last columns' patterns,
        # 192 bytes a column per 8 K groups (the packed plan: 37-186 KB here)
        patterns = _qgemm.TAIL_COLUMNS * 192 * -(-run.kernel.plan_groups // 8)
        assert run.kernel.workspace_bytes <= (64 + patterns) * threads
        got = np.full(outs[0].shape, 7, outs[0].dtype)
        run(inputs, [got])
        np.testing.assert_array_equal(got, base, f"threads={threads} exact={exact}")
        assert_matches(got, want, node, f"implicit threads={threads} exact={exact}")


PIXEL_TILE_GEOMS = [  # 1x1 convs too: the 7 x 32 tiles read every image 4 channels a pixel
    (1, 64, 7, 7, 70, 1, 1, 0, 1, 1),        # 1x1: 49 pixels = 7 tiles, a 6-channel block
    (1, 16, 14, 14, 33, 1, 1, 0, 1, 1),      # a 1-channel block
    (2, 8, 5, 3, 40, 1, 1, 0, 1, 1),         # batch 2, 15 pixels: a last tile of 1
    (1, 4, 2, 2, 16, 1, 1, 0, 1, 1),         # one tile of 4 pixels, one zmm of channels
    (1, 8, 6, 6, 48, 3, 1, 1, 1, 1),         # 36 pixels: 5 tiles + 1, channels 32 + 16
]


@pytest.mark.parametrize("row", PIXEL_ROWS)
@pytest.mark.parametrize("geom", IMPLICIT_GEOMS + STRIDED_IMPLICIT_GEOMS + PIXEL_TILE_GEOMS)
@pytest.mark.parametrize("out", ["u8", "f32", "u8+residual"])
def test_pixel_tiles_are_the_default_plan_bit_for_bit(geom, out, row):
    """qconv_u8s8_7x32: 7 pixels broadcast x 32 channels in the lanes over the shifted
    image, the outputs written through a byte (float output: 8 x 8 float) transpose, the
    residual read through its inverse: the default plan's bytes and the reference's, with
    partial tiles of pixels and channels, any thread count, the threads splitting pixels
    or channel blocks, every epilogue; no output left unwritten."""
    node, inputs, ins, outs, want = _output_case(np.random.default_rng(sum(geom) + len(out)),
                                                 geom, out)
    base = np.empty(outs[0].shape, outs[0].dtype)
    qconv.prepare_gemm(node, ins, outs, row=_base_of(row))(inputs, [base])
    for threads, split in itertools.product((1, 2, 3), (False, True)):
        run = qconv.prepare_gemm(node, ins, outs, row=row, threads=threads,
                                 split_channels=split)
        assert run.pixel_tiles and run.implicit and run.exact
        got = np.full(outs[0].shape, 7, outs[0].dtype)
        run(inputs, [got])
        np.testing.assert_array_equal(got, base, f"threads={threads} split={split}")
        assert_matches(got, want, node, f"pixel tiles threads={threads}")


@pytest.mark.parametrize("row", PIXEL_ROWS)
@pytest.mark.parametrize("variant", list(epilogue_variants()), ids=str)
def test_pixel_tiles_every_epilogue_bit_for_bit(variant, row):
    """Every epilogue of the int8 spec (integer path, float path with and without a
    residual, float output; each activation, post affine and float bias) on the 7 x 32
    tiles, in registers or per channel row: the default plan's bytes (Sigmoid / SiLU: the
    reference's within its tolerance, exp per row against 8 lanes) and the reference's, a
    partial channel block and a last tile of 3 pixels (45 pixels)."""
    act, params, y_quant, residual = variant
    rng = np.random.default_rng(len(act) + 3 * residual + 5 * y_quant)
    for post, fbias in ((None, False), ((0.5, -0.25), not y_quant)):
        node, inputs, const = qconv_case(rng, (1, 8, 5, 9, 40, 3, 1, 1, 1, 1), act, params,
                                         y_quant, residual, bits=8, fbias=fbias, post=post)
        ins = _infos(inputs, const)
        outs = infer_node(node, ins, fold=False)
        base = np.empty(outs[0].shape, outs[0].dtype)
        qconv.prepare_gemm(node, ins, outs, row=_base_of(row))(inputs, [base])
        run = qconv.prepare_gemm(node, ins, outs, row=row)
        got = np.full(outs[0].shape, 7, outs[0].dtype)
        run(inputs, [got])
        if act not in TRANSCENDENTAL:   # exp per channel row (qe_span_c) vs 8 lanes: 1 ulp
            np.testing.assert_array_equal(got, base, f"{variant} post={post}")
        assert_matches(got, _reference(node, inputs), node, f"{variant} post={post}")


@pytest.mark.skipif(not HAS_AVX512VNNI, reason="AVX-512 VNNI not on this CPU (or "
                    "EDGENN_MAX_ISA): the pixel tiles are that tier's")
def test_pixel_tiles_are_offered_where_they_run_in_registers():
    """The tuner's candidate: group-1 convs of 4k channels with an epilogue in registers
    (u8 or float out, activation none / Relu / Clip); not a Sigmoid, 3 input channels or
    a grouped conv (the direct API computes those)."""
    specs = lambda node, ins, outs: {s.name for s in KERNELS["QConv"]
                                     if s.supports(node, ins, outs)}
    for geom, out, offered in [((1, 8, 6, 6, 48, 3, 1, 1, 1, 1), "u8", True),
                               ((1, 8, 6, 6, 48, 1, 2, 0, 1, 1), "u8+residual", True),
                               ((1, 8, 6, 6, 48, 3, 1, 1, 1, 1), "f32", True),
                               ((1, 3, 6, 6, 48, 3, 1, 1, 1, 1), "u8", False),
                               ((1, 8, 6, 6, 48, 3, 1, 1, 1, 2), "u8", False)]:
        node, inputs, ins, outs, _ = _output_case(np.random.default_rng(1), geom, out)
        assert ("qconv_u8s8_7x32__avx512vnni" in specs(node, ins, outs)) == offered, (geom, out)
    for y_quant in (False, True):
        node, inputs, const = qconv_case(np.random.default_rng(1), (1, 8, 6, 6, 48, 3, 1, 1, 1, 1),
                                         "Sigmoid", y_quant=y_quant, bits=8)
        ins = _infos(inputs, const)
        assert "qconv_u8s8_7x32__avx512vnni" not in specs(node, ins, infer_node(node, ins,
                                                                                  fold=False))
    with pytest.raises(ValueError, match="pixel tiles"):
        node, inputs, ins, outs, _ = _output_case(np.random.default_rng(1),
                                                  (1, 8, 6, 6, 48, 3, 1, 1, 1, 2), "u8")
        qconv.prepare_gemm(node, ins, outs, row=PIXEL_TILES)


@pytest.mark.skipif(not HAS_AVX512VNNI, reason="AVX-512 VNNI not on this CPU (or "
                    "EDGENN_MAX_ISA): the implicit GEMM is that tier's")
@pytest.mark.parametrize("width", [1, 2, 5, 8, 17, 23, 24, 40, 57])
@pytest.mark.parametrize("channels", [4, 12, 64])
def test_implicit_gemm_last_columns_with_the_rows_in_the_lanes(width, channels):
    """A block's last 1 / 2 columns run with the 6 weight rows in the lanes (_qgemm_vnni_
    tail.h), 3..8 on the ymm tile, in the implicit and the packed plans (a 1x1 conv read
    in place): 1 x width planes give every count of them, with K
    groups of 9, 27 and 144 (partial and whole blocks of 8 groups), a channel tail of 1,
    every epilogue; the same bytes as the packed plan."""
    for out in ("u8", "f32", "u8+residual"):
        geom = (1, channels, 1, width, 13, 3, 1, 1, 1, 1)
        node, inputs, ins, outs, want = _output_case(
            np.random.default_rng(width * channels + len(out)), geom, out)
        packed = qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI, flat=True,
                                    implicit=False)
        base = np.empty(outs[0].shape, outs[0].dtype)
        packed(inputs, [base])
        for exact, threads in itertools.product((False, True), (1, 2)):
            run = qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI, implicit=True,
                                     exact=exact, threads=threads)
            got = np.full(outs[0].shape, 7, outs[0].dtype)
            run(inputs, [got])
            np.testing.assert_array_equal(got, base, f"{out} exact={exact} threads={threads}")
            assert_matches(got, want, node, f"{out} exact={exact}")
        # the packed plans take them from their B block: a 1x1 conv read in place
        geom = (1, channels, 1, width, 13, 1, 1, 0, 1, 1)
        node, inputs, ins, outs, want = _output_case(np.random.default_rng(width), geom, out)
        for threads in (1, 2):
            run = qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI, threads=threads)
            got = np.full(outs[0].shape, 7, outs[0].dtype)
            run(inputs, [got])
            assert_matches(got, want, node, f"1x1 {out} threads={threads}")


@pytest.mark.skipif(not HAS_AVX512VNNI, reason="AVX-512 VNNI not on this CPU (or "
                    "EDGENN_MAX_ISA): the implicit GEMM is that tier's")
def test_implicit_gemm_applies_only_where_it_computes_the_conv():
    rng = np.random.default_rng(5)
    for geom in [(1, 64, 56, 56, 64, 3, 1, 1, 1, 1), (1, 512, 7, 7, 512, 3, 1, 1, 1, 1)]:
        node, inputs, const = qconv_case(rng, geom)     # ResNet-18's: chosen by default
        ins = _infos(inputs, const)
        outs = infer_node(node, ins, fold=False)
        assert qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI).implicit, geom
    # the shifted image where it saves products (per K group, in 16-column zmm products:
    # 14x14's 209 flat columns 13.06, its 196 pixels 12.25; 7x7's 55 columns 3.44, its 49
    # pixels 3.06); 56x56 keeps the flat one (3191 columns 199.4, 3136 pixels 196)
    for geom, exact in [((1, 256, 14, 14, 256, 3, 1, 1, 1, 1), True),
                        ((1, 512, 7, 7, 512, 3, 1, 1, 1, 1), True),
                        ((1, 64, 56, 56, 64, 3, 1, 1, 1, 1), False),
                        ((1, 8, 9, 9, 8, 3, 2, 1, 1, 1), True),      # strided: always
                        ((1, 64, 56, 56, 128, 1, 2, 0, 1, 1), True)]:
        node, inputs, const = qconv_case(rng, geom)
        ins = _infos(inputs, const)
        run = qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False), row=AVX512VNNI)
        assert run.implicit and run.exact == exact, geom
    for geom in [(1, 8, 3, 3, 8, 5, 1, 2, 1, 1),        # not flat: 2 dropped columns of 5
                 (1, 6, 9, 9, 8, 3, 1, 1, 1, 1),        # channels not a multiple of 4
                 (1, 8, 9, 9, 8, 3, 1, 1, 1, 2),        # grouped
                 (1, 8, 9, 9, 8, 1, 1, 0, 1, 1)]:       # 1x1 direct (read in place)
        node, inputs, const = qconv_case(rng, geom)
        ins = _infos(inputs, const)
        outs = infer_node(node, ins, fold=False)
        assert not qconv.prepare_gemm(node, ins, outs, row=AVX512VNNI).implicit, geom
    node, inputs, const = qconv_case(rng, (1, 6, 9, 9, 8, 3, 1, 1, 1, 1))
    ins = _infos(inputs, const)
    with pytest.raises(ValueError, match="implicit"):
        qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False), row=AVX512VNNI,
                           implicit=True)
    with pytest.raises(ValueError, match="exact"):
        qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False), row=AVX512VNNI,
                           exact=True)
    node, inputs, const = qconv_case(rng, (1, 8, 9, 9, 8, 3, 2, 1, 1, 1))
    ins = _infos(inputs, const)
    with pytest.raises(ValueError, match="exact"):
        qconv.prepare_gemm(node, ins, infer_node(node, ins, fold=False), row=AVX512VNNI,
                           implicit=True, exact=False)


WIDE_GEOMS = [   # long rows: many 16-pixel chunks of the fill's interleave, then a tail
    (1, 8, 3, 300, 8, 3, 1, 1, 1, 1),
    (1, 4, 2, 520, 4, 5, 1, 2, 2, 1),        # dilation 2
]


@pytest.mark.parametrize("geom,shifted", [(g, False) for g in IMPLICIT_GEOMS] +
                         [(g, True) for g in IMPLICIT_GEOMS + STRIDED_IMPLICIT_GEOMS
                          + WIDE_GEOMS])
def test_implicit_gemm_image_is_the_padded_input(geom, shifted):
    """The bytes the implicit tiles read, on every machine (the tiles themselves run on
    SIMDe in tests/kernels/native/test_isa.py): the zero-point padded image 4 channels per pixel, its
    rows sharing their padding (Wp = W + pw for a same conv), or (shifted) per row phase
    pi and kernel column tj the padded rows u * sh + pi at columns ox * sw + tj * dw;
    C / 4 quads, each group's 16 pixels contiguous."""
    n, c, h, w, m, k, s, p, d, _ = geom
    oh, ow = (h + 2 * p - d * (k - 1) - 1) // s + 1, (w + 2 * p - d * (k - 1) - 1) // s + 1
    x = np.random.default_rng(sum(geom)).integers(0, 255, (c, h, w), dtype=np.uint8)
    img = _qgemm.nc4_image(x, (c, h, w, k, k, s, s, p, p, d, d, oh, ow), 255, shifted)
    if shifted:
        hq = img.shape[3]
        assert img.shape == (c // 4, s, k, oh + (k - 1) * d // s, ow, 4)
        big = np.pad(x, ((0, 0), (p, hq * s + p), (p, ow * s + k * d + p)),
                     constant_values=255)                           # padded, with room
        for pi, tj in itertools.product(range(s), range(k)):
            want = big[:, pi:pi + hq * s:s, tj * d:tj * d + ow * s:s]   # (C, Hq, ow)
            np.testing.assert_array_equal(
                img[:, pi, tj], want.reshape(c // 4, 4, hq, ow).transpose(0, 2, 3, 1),
                f"phase {pi} column {tj}")
        return
    hp = img.shape[1]
    padded = np.pad(x, ((0, 0), (p, hp - p - h), (p, p)), constant_values=255)
    wp = img.shape[2]
    assert wp == (w + p if p and w + p >= ow else w + 2 * p)      # shared padding
    # the flat reading: padded pixel (y, x) at y * Wp + x - (x >= Wp: the next row's pad)
    flat = img.reshape(c // 4, -1, 4)
    for y in range(oh + (k - 1) * d):                             # the rows a tap reads
        for xx in range(ow + (k - 1) * d):
            np.testing.assert_array_equal(flat[:, y * wp + xx, :],
                                          padded[:, y, xx].reshape(c // 4, 4), f"{y} {xx}")
