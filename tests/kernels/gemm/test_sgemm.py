"""edgenn's packed sgemm (kernels/gemm/_sgemm.pyx + sgemm.h) against float64 matmul:
exact results on integer data, tails around the 6 x 16 micro-tile and the K blocks, both
operand layouts (constant A packed / constant B packed), B read in place, implicit im2col,
every epilogue, on every row of the family's table (sgemm_table.h) this CPU runs, and
on every SIMD row again built on SIMDe (emulated, any CPU): a row added to the table is
tested here with no edit."""
import itertools

import numpy as np
import pytest
from support import kernel_tables as tables

from edgenn.kernels.gemm import _sgemm as sg
from edgenn.kernels.gemm import _sgemm_emu
from edgenn.kernels.reference.nn import apply_activation

PATHS = tables.paths(sg.rows(), _sgemm_emu.rows())


def _lib(path):
    return tables.lib_and_row(path, sg, _sgemm_emu)


def _has_rows_mode(path):
    lib, row = _lib(path)
    return lib.ROWS[lib.row_index(row)].rows_mode


def _modes(path):
    """The operand layouts a row runs: constant A or B packed, B read in place, and where
    the row has it the rows mode (W^T packed, pixels broadcast)."""
    return ["A", "B", "direct"] + ["rows"] * _has_rows_mode(path)


MODE_TIERS = [(mode, path) for path in PATHS for mode in _modes(path)]
ACTS = [("", []), ("Relu", []), ("Clip", [-0.5, 0.7]), ("HardSwish", []),
        ("HardSigmoid", [0.2, 0.5]), ("Sigmoid", []), ("SiLU", []), ("LeakyRelu", [0.1]),
        ("Gelu", []), ("PRelu", None)]   # PRelu: one slope per row (a conv's channel)
TAILS = [1, 2, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]


def _rel(got, want):
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-6)


def _check(got, a, b, what):
    """max |got - want| <= 1e-5 * scale, want in float64; scale = max |want|, or, where
    cancellation leaves that tiny (one dot product of 385 random terms), max(|A| @ |B|) /
    sqrt(K): the size a sum of K random-sign terms reaches, fp32 rounding scales with it."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    mag = np.abs(a).astype(np.float64) @ np.abs(b) / np.sqrt(a.shape[1])
    scale = max(float(np.max(np.abs(want))), float(np.max(mag)), 1e-6)
    err = float(np.max(np.abs(got - want))) / scale
    assert err <= 1e-5, (what, err)


def _run(mode, a, b, path, bias_row=None, bias_col=None, z=None, act="",
         params=()):
    """out = act(a @ b + bias + z) through SGemm with `mode` in {A, B, direct, rows}."""
    m, k = a.shape
    n = b.shape[1]
    lib, row = _lib(path)
    if mode == "rows":
        g = lib.SGemm(m, n, k, packed_wt=lib.pack_b(np.ascontiguousarray(a.T)),
                      bias_row=bias_row, bias_col=bias_col, act=act, params=params, row=row)
        src = b
    elif mode == "B":
        g = lib.SGemm(m, n, k, packed_b=lib.pack_b(b), bias_row=bias_row, bias_col=bias_col,
                      act=act, params=params, row=row)
        src = a
    else:
        g = lib.SGemm(m, n, k, packed_a=lib.pack_a(a), bias_row=bias_row, bias_col=bias_col,
                      act=act, params=params, row=row,
                     direct_b=mode == "direct")
        src = b
    assert g.row_name == row
    out = np.full((m, n), np.nan, np.float32)
    g.run(src, out, z)
    return out


@pytest.mark.parametrize("mode,path", MODE_TIERS)
def test_exact_on_small_integers(mode, path):
    # products and sums of small integers are exact in fp32: any packing slip shows
    rng = np.random.default_rng(0)
    for m, n, k in [(1, 1, 1), (7, 17, 5), (13, 33, 400), (65, 31, 900)]:
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32)
        assert np.array_equal(_run(mode, a, b, path), want), (m, n, k)


@pytest.mark.parametrize("mode,path", MODE_TIERS)
def test_tails_around_the_tile(mode, path):
    rng = np.random.default_rng(1)
    shapes = [(m, n, k) for m, n in itertools.product(TAILS, TAILS)
              for k in (rng.choice(TAILS),)]
    shapes += [(m, n, k) for m in (1, 6, 13) for n in (1, 16, 49) for k in (383, 385, 1000)]
    for m, n, k in shapes:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        _check(_run(mode, a, b, path), a, b, (m, n, k))


@pytest.mark.parametrize("path", PATHS)
def test_large(path):
    rng = np.random.default_rng(2)
    for m, n, k in [(64, 3136, 576), (512, 49, 4608), (130, 1000, 700)]:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        for mode in _modes(path):
            _check(_run(mode, a, b, path), a, b, (mode, m, n, k))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("act,params", ACTS)
def test_every_epilogue(act, params, path):
    rng = np.random.default_rng(3)
    for (m, n, k), mode in itertools.product([(6, 16, 8), (13, 37, 20), (20, 50, 700),
                                              (40, 49, 64), (1, 70, 700), (2, 37, 20)],
                                             _modes(path)):
        a = (rng.standard_normal((m, k)) / np.sqrt(k) * 3).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        br = rng.standard_normal(m).astype(np.float32)
        bc = rng.standard_normal(n).astype(np.float32)
        z = rng.standard_normal((m, n)).astype(np.float32)
        y = a.astype(np.float64) @ b + br[:, None] + bc[None, :] + z
        if act == "PRelu":            # slopes negative, 0, 1, > 1, then ordinary
            slopes = rng.standard_normal(m).astype(np.float32)
            slopes[:4] = [-0.7, 0.0, 1.0, 2.5][:m]
            params, want = list(slopes), np.where(y >= 0, y, y * slopes[:, None])
        else:
            want = apply_activation(y, act, params)
        got = _run(mode, a, b, path, bias_row=br, bias_col=bc, z=z, act=act,
                   params=params)
        assert _rel(got, want) <= 1e-5, (act, mode, m, n, k)


def test_activation_extremes():
    # exp/erf approximations at large |x| (saturation, no inf/nan)
    x = np.array([-1e4, -100, -88, -87.5, -20, -3, -1e-3, 0, 1e-3, 3, 20, 88, 100, 1e4],
                 np.float32)
    m, n = 1, x.size
    for act in ("Sigmoid", "SiLU", "Gelu"):
        for path in PATHS:
            got = _run("A", np.ones((1, 1), np.float32), x.reshape(1, n), path, act=act)
            want = apply_activation(x.astype(np.float64), act, [])
            assert np.all(np.isfinite(got))
            assert np.allclose(got.ravel(), want, rtol=1e-5, atol=1e-6), (act, got, want)


def _conv_ref(x, w, s, p, d):
    """x (C, H, W), w (M, C, KH, KW) -> (M, OH*OW), float64, by explicit taps."""
    c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (p, p), (p, p)))
    oh = (h + 2 * p - d * (kh - 1) - 1) // s + 1
    ow = (wd + 2 * p - d * (kw - 1) - 1) // s + 1
    y = np.zeros((m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
            y += np.einsum("mc,chw->mhw", w[:, :, i, j].astype(np.float64), patch)
    return y.reshape(m, oh * ow), oh, ow


@pytest.mark.parametrize("path", PATHS)
def test_implicit_im2col(path):
    rng = np.random.default_rng(4)
    for c, h, wd, m, k, s, p, d in [(3, 17, 13, 8, 3, 1, 1, 1), (5, 9, 9, 7, 3, 2, 1, 1),
                                    (16, 9, 7, 12, 1, 2, 0, 1), (4, 12, 11, 4, 3, 1, 2, 2),
                                    (64, 14, 14, 20, 3, 1, 1, 1), (6, 5, 40, 9, 5, 3, 2, 1),
                                    (2, 1, 1, 3, 3, 1, 1, 1), (40, 7, 7, 33, 3, 1, 1, 1)]:
        x = rng.standard_normal((c, h, wd)).astype(np.float32)
        w = rng.standard_normal((m, c, k, k)).astype(np.float32)
        want, oh, ow = _conv_ref(x, w, s, p, d)
        lib, row = _lib(path)
        geom = (c, h, wd, k, k, s, s, p, p, d, d, oh, ow)
        wm = w.reshape(m, -1)
        gs = [lib.SGemm(m, oh * ow, c * k * k, packed_a=lib.pack_a(wm), conv=geom, row=row)]
        if "rows" in _modes(path):   # the rows mode on the explicit im2col
            gs.append(lib.SGemm(m, oh * ow, c * k * k, conv=geom, row=row,
                                packed_wt=lib.pack_b(np.ascontiguousarray(wm.T))))
        for g in gs:
            got = np.full((m, oh * ow), np.nan, np.float32)
            g.run(x, got)
            assert _rel(got, want) <= 1e-5, (c, h, wd, m, k, s, p, d)


@pytest.mark.parametrize("path", PATHS)
def test_strided_operands(path):
    # transposed / strided views of the per-call operand are packed correctly
    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 23)).astype(np.float32)
    b = rng.standard_normal((23, 37)).astype(np.float32)
    want = a.astype(np.float64) @ b
    at = np.ascontiguousarray(a.T).T          # column-major view of a
    assert _rel(_run("B", at, b, path), want) <= 1e-5
    wide = np.zeros((40, 30), np.float32)
    wide[:, 3:26] = a                         # rows 30 floats apart, 23 of them read
    assert _rel(_run("B", wide[:, 3:26], b, path), want) <= 1e-5
    bt = np.ascontiguousarray(b.T).T
    assert _rel(_run("A", a, bt, path), want) <= 1e-5
    assert _rel(_run("A", a, b[:, ::1], path), want) <= 1e-5
    for mode in _modes(path)[3:]:     # rows mode: a strided B is copied, then read in place
        assert _rel(_run(mode, a, bt, path), want) <= 1e-5


@pytest.mark.parametrize("path", PATHS)
def test_read_only_constants(path):
    # plan-time constants (weights, bias) arrive read-only
    rng = np.random.default_rng(6)
    a = rng.standard_normal((9, 20)).astype(np.float32)
    b = rng.standard_normal((20, 18)).astype(np.float32)
    br = rng.standard_normal(9).astype(np.float32)
    bc = rng.standard_normal(18).astype(np.float32)
    for arr in (a, b, br, bc):
        arr.flags.writeable = False
    want = a.astype(np.float64) @ b + br[:, None] + bc
    for mode in _modes(path):
        got = _run(mode, a, b, path, bias_row=br, bias_col=bc)
        assert _rel(got, want) <= 1e-5, mode


@pytest.mark.parametrize("chunk", [0, 4096, 65536])
def test_pointwise_conv_across_column_chunks(chunk):
    """1x1 convs stream X in column chunks (run_images): ragged N, batch > 1, residual."""
    from edgenn.graph.infer import infer_node
    from edgenn.graph.ir import Node
    from edgenn.registry import KERNELS, REFERENCE, TensorInfo
    spec = next(s for s in KERNELS["Conv"] if s.name == "conv_" + sg.rows()[-1].name)
    rng = np.random.default_rng(3)
    try:
        sg.set_direct_chunk(chunk)
        for n, c, m, hw in [(2, 16, 96, (37, 41)), (1, 3, 7, (113, 1)), (1, 64, 24, (56, 56))]:
            x = rng.standard_normal((n, c) + hw).astype(np.float32)
            w = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
            b = rng.standard_normal(m).astype(np.float32)
            z = rng.standard_normal((n, m) + hw).astype(np.float32)
            node = Node("Conv", ["x", "w", "b", "z"], ["y"],
                        dict(kernel_shape=[1, 1], strides=[1, 1], pads=[0] * 4, dilations=[1, 1],
                             group=1, auto_pad="NOTSET", activation="Clip",
                             activation_params=[0.0, 6.0]), "pw")
            ins = [TensorInfo("float32", x.shape), TensorInfo.of(w), TensorInfo.of(b),
                   TensorInfo("float32", z.shape)]
            outs = infer_node(node, ins, fold=False)
            got = np.full(outs[0].shape, np.nan, np.float32)
            spec.prepare(node, ins, outs)([x, w, b, z], [got])
            want = REFERENCE["Conv"](node.attrs, [x, w, b, z])[0]
            assert _rel(got, want) <= 1e-5, (chunk, x.shape)
    finally:
        sg.set_direct_chunk(65536)


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_columns_match_one_thread(threads):
    """run_images split over OpenMP threads by NR-aligned column ranges: same result as one
    thread, for implicit im2col and direct 1x1, ragged N, residual, batch 2, N < 2 panels."""
    rng = np.random.default_rng(7)
    for c, h, wd, m, k, s, p in [(8, 17, 13, 24, 3, 1, 1), (32, 7, 7, 40, 1, 1, 0),
                                 (16, 56, 56, 16, 1, 1, 0), (5, 3, 3, 7, 3, 1, 1),
                                 (12, 20, 9, 8, 3, 2, 1)]:
        oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
        x = rng.standard_normal((2, c, h, wd)).astype(np.float32)
        w = rng.standard_normal((m, c, k, k)).astype(np.float32)
        z = rng.standard_normal((2, m, oh, ow)).astype(np.float32)
        direct = k == 1 and s == 1 and p == 0
        outs = []
        for t in (1, threads):
            g = sg.SGemm(m, oh * ow, c * k * k, packed_a=sg.pack_a(w.reshape(m, -1)),
                         conv=None if direct else (c, h, wd, k, k, s, s, p, p, 1, 1, oh, ow),
                         direct_b=direct, act="Relu", threads=t)
            y = np.full((2, m, oh, ow), np.nan, np.float32)
            g.run_images(x, y, z)
            outs.append(y)
        np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [2, 3])
def test_threads_split_whole_panels_evenly(path, threads):
    """Threads take balanced runs of 16-wide panels (channels in the rows mode, columns
    otherwise), ragged last panels and shares that start mid-pair included: bit for bit one
    thread's result, on every row this CPU runs and on the emulated ones."""
    rng = np.random.default_rng(9)
    lib, row = _lib(path)
    rows_mode = "rows" in _modes(path)
    for m, k, n in [(96, 64, 196), (160, 48, 49), (48, 40, 49), (200, 33, 30), (64, 8, 67)]:
        w = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        for mode in ["A"] + ["rows"] * rows_mode:
            outs = []
            for t in (1, threads):
                if mode == "rows":
                    g = lib.SGemm(m, n, k, packed_wt=lib.pack_b(np.ascontiguousarray(w.T)),
                                  bias_row=bias, act="Relu", threads=t, row=row)
                else:
                    g = lib.SGemm(m, n, k, packed_a=lib.pack_a(w), bias_row=bias, act="Relu",
                                  direct_b=True, threads=t, row=row)
                out = np.full((m, n), np.nan, np.float32)
                g.run_images(b.reshape(1, k, 1, n), out.reshape(1, m, 1, n))
                outs.append(out)
            np.testing.assert_array_equal(outs[0], outs[1])
            assert _rel(outs[0], np.maximum(w.astype(np.float64) @ b + bias[:, None], 0)) <= 1e-5


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("threads", [2, 3])
def test_threads_over_a_constant_b_match_one_thread(path, threads):
    """A constant B (a Gemm's weights): run() splits the columns over the threads, bit for
    bit one thread's result; a batch-1 classifier, ragged panels, K past one block; 1 and 2
    rows run as GEMVs (SG_GEMV_ROWS), 3 and 7 through the tiles."""
    lib, row = _lib(path)
    rng = np.random.default_rng(8)
    for rows, kk, n in [(1, 1280, 1000), (2, 17, 65), (1, 3, 1), (2, 400, 33), (3, 17, 65),
                        (7, 400, 64)]:
        a = rng.standard_normal((rows, kk)).astype(np.float32)
        b = rng.standard_normal((kk, n)).astype(np.float32)
        bc = rng.standard_normal(n).astype(np.float32)
        outs = []
        for t in (1, threads):
            g = lib.SGemm(rows, n, kk, packed_b=lib.pack_b(b), bias_col=bc, act="Relu",
                          threads=t, row=row)
            out = np.full((rows, n), np.nan, np.float32)
            g.run(a, out)
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        assert _rel(outs[0], np.maximum(a.astype(np.float64) @ b + bc, 0)) <= 1e-5


@pytest.mark.parametrize("path", PATHS)
def test_pack_a_batch_is_each_pack_and_direct_path_exact(path):
    """pack_a_batch (the Winograd U[xi]): the count packed operands back to back, each
    pack_a's bytes; a product on one of them through the direct path (B in place, the
    way _winograd_run.h calls it) exact on small integers over tile / K-block tails."""
    lib, row = _lib(path)
    rng = np.random.default_rng(7)
    for count, m, k, n in [(1, 1, 1, 1), (3, 7, 5, 17), (4, 13, 400, 33), (16, 6, 3, 49)]:
        a = rng.integers(-3, 4, (count, m, k)).astype(np.float32)
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        packed, size = lib.pack_a_batch(a[:, :, :]), lib.packed_a_size(m, k)
        assert packed.size == count * size
        for i in range(count):
            one = lib.pack_a(a[i])
            assert np.array_equal(packed[i * size:(i + 1) * size], one[:size])
            g = lib.SGemm(m, n, k, packed_a=packed[i * size:(i + 1) * size], direct_b=True,
                          row=row)
            got = np.empty((m, n), np.float32)
            g.run(b, got)
            assert np.array_equal(got, (a[i].astype(np.int64) @ b.astype(np.int64)))
    assert lib.direct_workspace_bytes(6, 49, 3, 2) == 2 * lib.direct_workspace_bytes(6, 49, 3)
    with pytest.raises(ValueError, match="no sgemm row"):
        lib.row_index("sgemm_6x16__sse9")


def test_rows_mode_only_on_rows_that_have_it():
    w = np.ones((4, 3), np.float32)
    for path in [p for p in PATHS if not _has_rows_mode(p)]:
        lib, row = _lib(path)
        with pytest.raises(ValueError, match="rows mode"):
            lib.SGemm(4, 5, 3, packed_wt=lib.pack_b(np.ascontiguousarray(w.T)), row=row)


@pytest.mark.parametrize("path", [p for p in PATHS if _has_rows_mode(p)])
def test_rows_mode_threads_splitting_k(path):
    """k_split (a 1x1 conv's threads take its input channels in groups of 16, each its
    partial product in the workspace, then each sums a share of them with the bias, the
    residual and the activation): within the one-thread bound, over K tails, K under 16
    per thread (fewer parts than threads), pixel and channel tails, batch 2. The
    workspace starts as NaN, so a partial product left short shows."""
    lib, row = _lib(path)
    rng = np.random.default_rng(9)
    for (m, k, n), threads, (act, params) in itertools.product(
            [(64, 384, 196), (160, 960, 49), (24, 100, 7), (17, 40, 33), (5, 17, 1),
             (32, 64, 12)],
            (2, 3, 5), [("", []), ("Relu", []), ("Clip", [-0.5, 0.7])]):
        w = rng.standard_normal((m, k)).astype(np.float32)
        x = rng.standard_normal((2, k, n)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        z = rng.standard_normal((2, m, n)).astype(np.float32)
        g = lib.SGemm(m, n, k, packed_wt=lib.pack_b(np.ascontiguousarray(w.T)), bias_row=bias,
                      act=act, params=params, threads=threads, row=row, k_split=True)
        groups = -(-k // 16)
        per = -(-groups // threads)
        assert g.k_parts == -(-groups // per), (m, k, n, threads)
        ws = np.full(max(g.workspace_bytes // 4, 1), np.nan, np.float32)
        out = np.full((2, m, n), np.nan, np.float32)
        g.run_images(x, out, z, ws)
        for b in range(2):
            want = w.astype(np.float64) @ x[b] + bias[:, None] + z[b]
            want = apply_activation(want, act, params)
            mag = np.abs(w).astype(np.float64) @ np.abs(x[b]) + np.abs(bias)[:, None] + \
                np.abs(z[b])
            # K + 2 terms in float32, summed in any order: gamma_(K+2) of the magnitudes
            bound = (k + 2) * 2.0 ** -24 / (1 - (k + 2) * 2.0 ** -24) * mag + 1e-30
            assert np.all(np.abs(out[b] - want) <= bound), (path, m, k, n, threads, act)


def test_k_split_only_where_it_applies():
    """One thread, a conv's explicit im2col, or an activation the sum does not apply: the
    threads split M as before."""
    lib, row = _lib(next(p for p in PATHS if p.endswith(tables.EMULATED) and _has_rows_mode(p)))
    w = np.ones((32, 64), np.float32)
    pw = lib.pack_b(np.ascontiguousarray(w.T))
    assert lib.SGemm(32, 9, 64, packed_wt=pw, threads=2, row=row, k_split=True).k_parts == 2
    assert lib.SGemm(32, 9, 64, packed_wt=pw, threads=1, row=row, k_split=True).k_parts == 0
    assert lib.SGemm(32, 9, 64, packed_wt=pw, threads=2, row=row, act="HardSwish",
                     k_split=True).k_parts == 0
    conv = (16, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2)    # 2x2 conv: K = 16 * 4
    assert lib.SGemm(32, 4, 64, packed_wt=pw, threads=2, row=row, conv=conv,
                     k_split=True).k_parts == 0


def test_the_table_names_each_row_by_tile_and_isa():
    """Row names are sgemm_<mr>x<nr>__<isa...>, the tile and tier they declare; each row
    the table holds is offered to the tuner (conv_sgemm_<tile>__<isa>, gemm_sgemm_...)."""
    import re

    from edgenn import oplist
    from edgenn.registry import KERNELS
    oplist.load_kernels()
    conv = {s.name: s for s in KERNELS["Conv"]}
    gemm = {s.name: s for s in KERNELS["Gemm"]}
    assert sg.ROWS[0].isa == "scalar"       # the fallback every CPU runs
    for r in sg.ROWS:
        m = re.fullmatch(r"sgemm_(\d+)x(\d+)__(\w+)", r.name)
        assert m and (int(m[1]), int(m[2])) == (r.mr, r.nr), r
        assert m[3].startswith(r.isa), r
        assert r.mr % sg.MR == 0 and r.nr % sg.NR == 0, r
        tile = r.name[len("sgemm_"):]
        for spec in (conv[f"conv_sgemm_{tile}"], gemm[f"gemm_sgemm_{tile}"]):
            assert spec.isa == ("" if r.isa == "scalar" else r.isa)


def test_the_portable_row_is_offered_only_where_no_simd_row_runs():
    """The table's portable row is its family's fallback (KernelSpec.fallback): the planner
    offers it where it is the only row, and never beside a SIMD row."""
    import os
    import subprocess
    import sys

    from edgenn import oplist
    from edgenn.registry import KERNELS
    from edgenn.runtime.select import _runnable
    oplist.load_kernels()
    scalar = next(s for s in KERNELS["Conv"] if s.name == "conv_sgemm_6x16__scalar")
    assert scalar.fallback and scalar.family == "sgemm"
    assert _runnable(scalar) == (len(sg.rows()) == 1)
    code = ("from edgenn import oplist; from edgenn.registry import KERNELS;"
            "from edgenn.runtime.select import _runnable; oplist.load_kernels();"
            "print(sorted(s.name for s in KERNELS['Gemm'] if s.family == 'sgemm'"
            " and _runnable(s)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "EDGENN_MAX_ISA": "scalar"},
                         check=True).stdout
    assert out.strip() == "['gemm_sgemm_6x16__scalar', 'gemm_sgemm_6x16__scalar_mt']"
