"""Sparse fully connected layers (kernels/sparse/_spgemm.h through _spmm.pyx's SparseGemm;
kernels/sparse/sparse_gemm.py).

Both algorithms (spmv: gathered dot products; tiled: y^T = W^T x^T on the spmm register
tiles) on every row of their tables this CPU runs and on the AVX2 / AVX-512F rows built on
SIMDe (any CPU), against float64: rows M from 1 to 130 (spmv's blocks of 4 rows, the tiles' 8 to 64
rows with a partial last tile), K and N around the vector widths (gathers of 8 / 16
nonzeros and their masked tails), every K x N pair over the M's, sparsities 0.5 to 1 with
an output that reads nothing, one that reads every input and an input nobody reads, with
and without bias and residual, each fused activation. The bound is test_sparse's (_check,
on the transposed product): gamma_{nnz + 2} of sum |w| |x| + |b| + |z|. Broken kernels
must fail that check, so it is not vacuous. Then the Python specs (transB, alpha / beta,
C and Z forms, MatMul with batch dims), the planner (a pruned Gemm / MatMul offers the
sparse specs, a dense one and the forms they refuse do not) and a pruned MLP against
onnxruntime.
"""
import numpy as np
import pytest
from support.helpers import helper, make_model, mlp, ort_run
from support import kernel_tables as tables
from kernels.sparse.test_sparse import EPS, _check, _sparse

import edgenn
from edgenn.graph.ir import Node
from edgenn.kernels.sparse import _spmm, _spmm_emu, sparse_gemm
from edgenn.kernels.sparse.sparse import MIN_ZEROS, csr
from edgenn.registry import KERNELS, REFERENCE, TensorInfo

RNG = np.random.default_rng(12)
# every row of both tables (spmm_table.h): spmv's dot products and the tiled algorithm's tiles
PATHS = tables.paths(_spmm.spmv_rows(), _spmm_emu.spmv_rows()) + \
    tables.paths(_spmm.rows(), _spmm_emu.rows())
PORTABLE_SPMV, PORTABLE_TILED = _spmm.SPMV_ROWS[0].name, _spmm.ROWS[0].name
USABLE = {r.name for r in _spmm.spmv_rows() + _spmm.rows()}     # natively, on this CPU

MS = (1, 2, 3, 7, 16, 33, 64, 130)
DIMS = (1, 5, 15, 16, 17, 31, 33, 64, 100, 384)
# per M every K, with two N each: over the eight M's every (K, N) pair of DIMS comes up
CASES = [(m, k, DIMS[(j + 3 * i + d) % len(DIMS)])
         for i, m in enumerate(MS) for j, k in enumerate(DIMS) for d in (0, 5)]
SPARSITY = (0.5, 0.7, 0.9, 0.97, 1.0)
EPILOGUES = [("", False, False), ("Relu", True, False), ("Clip", True, True),
             ("", True, True), ("Relu", False, True), ("Clip", False, False)]
CLIP = (-0.5, 0.7)


def _lib(path):
    return tables.lib_and_row(path, _spmm, _spmm_emu)


def _weights_t(n, k, sparsity):
    """W^T (N, K): test_sparse's rows (output 0 reads nothing, output 1 every input) and,
    for K > 2, input K-1 read by no output."""
    wt = _sparse(n, k, sparsity)
    if k > 2 and sparsity < 1:
        wt[:, k - 1] = 0
    return wt


def _case(c, i):
    """Operands of case c (the i-th): x (M, K), W^T (N, K), bias, residual, epilogue."""
    m, k, n = c
    act, with_b, with_z = EPILOGUES[i % len(EPILOGUES)]
    lo, hi = CLIP if act == "Clip" else (0.0, 0.0)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    wt = _weights_t(n, k, SPARSITY[i % len(SPARSITY)])
    b = RNG.standard_normal(n).astype(np.float32) if with_b else None
    z = RNG.standard_normal((m, n)).astype(np.float32) if with_z else None
    return x, wt, b, z, act, lo, hi


def _run(lib, row, x, wt, b, z, act, lo, hi, csr_parts=None, threads=1):
    kern = lib.SparseGemm(*(csr_parts or csr(wt)), wt.shape[1], b, act, lo, hi, row=row)
    y = np.full((x.shape[0], wt.shape[0]), np.nan, np.float32)
    ws = np.full(max(kern.workspace_floats * threads, 1), np.nan, np.float32)
    kern.run(x, y, z, ws, threads)
    return y


def _check_fc(y, x, wt, b, z, act, lo, hi):
    """test_sparse._check on y^T = W^T x^T (+ b per row of y^T, + z^T)."""
    _check(y.T, wt, x.T, b, None if z is None else z.T, act, lo, hi)


@pytest.mark.parametrize("path", PATHS)
def test_kernel_matches_float64(path):
    lib, row = _lib(path)
    for i, c in enumerate(CASES):
        x, wt, b, z, act, lo, hi = _case(c, i)
        y = _run(lib, row, x, wt, b, z, act, lo, hi)
        _check_fc(y, x, wt, b, z, act, lo, hi)


@pytest.mark.parametrize("path", PATHS)
def test_threads_split_the_outputs_with_the_same_bits(path):
    """The *_mt specs: the outputs in ranges of whole pairs over 2 / 3 / 8 OpenMP threads
    (more threads than outputs too), every output by the same code: the same bits."""
    lib, row = _lib(path)
    for i, c in enumerate(CASES[::7]):
        x, wt, b, z, act, lo, hi = _case(c, i)
        one = _run(lib, row, x, wt, b, z, act, lo, hi)
        for threads in (2, 3, 8):
            np.testing.assert_array_equal(
                _run(lib, row, x, wt, b, z, act, lo, hi, threads=threads), one)


def _broken(row_ptr, col, val, k):
    """Three wrong kernels' weights: each row's last nonzero dropped (a lost tail), every
    column shifted by one (a wrong gather index), the largest weight off by 2^-10."""
    counts = np.diff(row_ptr)
    keep = np.ones(len(col), bool)
    keep[row_ptr[1:][counts > 0] - 1] = False
    short = np.concatenate([[0], np.cumsum(counts - (counts > 0))]).astype(np.int32)
    nudged = val.copy()
    nudged[np.argmax(np.abs(val))] *= 1 + 2.0 ** -10
    return (short, col[keep], val[keep]), (row_ptr, (col + 1) % k, val), (row_ptr, col, nudged)


@pytest.mark.parametrize("path", PATHS)
def test_broken_kernels_fail_the_check(path):
    """The bound is tight enough to catch a lost tail element, a wrong index and a small
    weight error, on the shapes of the masked tails (33 nonzeros: 2 x 16 + 1, 4 x 8 + 1)."""
    lib, row = _lib(path)
    x = RNG.standard_normal((7, 33)).astype(np.float32)
    wt = RNG.standard_normal((5, 33)).astype(np.float32)      # dense rows: every tail used
    b = RNG.standard_normal(5).astype(np.float32)
    _check_fc(_run(lib, row, x, wt, b, None, "", 0, 0), x, wt, b, None, "", 0, 0)
    for parts in _broken(*csr(wt), 33):
        y = _run(lib, row, x, wt, b, None, "", 0, 0, csr_parts=parts)
        with pytest.raises(AssertionError):
            _check_fc(y, x, wt, b, None, "", 0, 0)
    y = _run(lib, row, x, wt, None, None, "", 0, 0)               # bias forgotten
    with pytest.raises(AssertionError):
        _check_fc(y, x, wt, b, None, "", 0, 0)


@pytest.mark.parametrize("path", PATHS)
def test_inputs_no_weight_reads_do_not_leak(path):
    """inf / NaN in an input column that no output reads stay out of every output: the
    masked-off gather lanes (index 0) and the tiles' padding rows contribute exact zeros."""
    lib, row = _lib(path)
    for m, k, n in ((1, 21, 6), (5, 40, 9), (33, 17, 3)):
        x = RNG.standard_normal((m, k)).astype(np.float32)
        x[:, 0] = np.inf
        x[m // 2, 0] = np.nan
        wt = _weights_t(n, k, 0.6)
        wt[:, 0] = 0
        y = _run(lib, row, x, wt, None, None, "Relu", 0, 0)
        assert np.all(np.isfinite(y))
        x[:, 0] = 0
        _check_fc(y, x, wt, None, None, "Relu", 0, 0)


def test_specs_follow_the_tables():
    """One spec per row of each table, named after it, needing the row's tier; a tiled
    spec's rows per tile are its row's pixels."""
    specs = {name: (need, row, algo, t) for name, need, row, algo, t in sparse_gemm.SPECS}
    assert len(specs) == len(_spmm.SPMV_ROWS) + len(_spmm.ROWS)
    for r in _spmm.SPMV_ROWS:
        assert specs[r.name] == ("" if r.isa == "scalar" else r.isa, r.name, "spmv", 0)
    for r in _spmm.ROWS:
        name = r.name.replace("spmm_", "spgemm_")
        assert name.startswith(f"spgemm_{r.pixels}x1__")
        assert specs[name] == ("" if r.isa == "scalar" else r.isa, r.name, "tiled", r.pixels)
        assert _spmm.SparseGemm(*csr(np.eye(3, dtype=np.float32)), 3, row=r.name if
                                r.usable else PORTABLE_TILED).algo == "tiled"


def test_bad_arguments_refused():
    wt = np.array([[0, 2, 0], [0, 0, 0], [1, 0, 0]], np.float32)       # W^T (N 3, K 3)
    row_ptr, col, val = csr(wt)
    for args, msg in [((row_ptr, np.array([1, 3, 0]), val, 3), "outside"),   # k >= K
                      ((np.array([0, 2, 1, 2]), col, val, 3), "CSR"),         # decreasing
                      ((row_ptr, col, val[:1], 3), "CSR")]:                   # val short
        with pytest.raises(ValueError, match=msg):
            _spmm.SparseGemm(*args, row=PORTABLE_SPMV)
    with pytest.raises(ValueError, match="no spmm row 'dense'"):
        _spmm.SparseGemm(row_ptr, col, val, 3, row="dense")
    with pytest.raises(ValueError, match="activation"):
        _spmm.SparseGemm(row_ptr, col, val, 3, act="Gelu", row=PORTABLE_SPMV)
    kern = _spmm.SparseGemm(row_ptr, col, val, 3, row=PORTABLE_TILED)
    x, y = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="shapes"):
        kern.run(np.zeros((4, 2), np.float32), y)
    with pytest.raises(ValueError, match="workspace"):
        kern.run(x, y, None, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="residual"):
        kern.run(x, y, np.zeros((4, 2), np.float32), np.zeros(kern.workspace_floats,
                                                              np.float32))


# -- the specs: Gemm / MatMul forms --------------------------------------------------------

def _node_case(op, x_shape, k, n, attrs, c_shape, with_z, sparsity=0.8):
    """(node, ins, outs, feeds): Gemm(x, B, [C], [Z]) or MatMul(x, W), B by transB."""
    wt = _weights_t(n, k, sparsity)
    b = wt if attrs.get("transB") else np.ascontiguousarray(wt.T)
    ins = [TensorInfo("float32", x_shape), TensorInfo.of(b)]
    names = ["x", "b"]
    out = tuple(x_shape[:-1]) + (n,)
    if c_shape is not None:
        ins.append(TensorInfo.of(RNG.standard_normal(c_shape).astype(np.float32)))
        names.append("c")
    if with_z:
        ins += [None] * (3 - len(ins)) + [TensorInfo("float32", out)]
        names += [""] * (3 - len(names)) + ["z"]
    node = Node(op, names, ["y"], dict(attrs), op.lower())
    feeds = [RNG.standard_normal(x_shape).astype(np.float32), b] + \
        [None if i is None else i.value for i in ins[2:3]] + \
        ([RNG.standard_normal(out).astype(np.float32)] if with_z else [])
    return node, ins, [TensorInfo("float32", out)], feeds


FORMS = [("Gemm", (3, 40), 40, 24, {"transB": 1}, (24,), False, ""),
         ("Gemm", (70, 17), 17, 33, {"transB": 0, "alpha": 0.5, "beta": 2.0}, (1, 33), True,
          "Relu"),
         ("Gemm", (1, 64), 64, 10, {"transB": 1}, (1,), True, "Clip"),
         ("Gemm", (9, 31), 31, 16, {"transB": 0}, None, True, ""),
         ("Gemm", (2, 5, 16), 16, 15, {"transB": 1}, (15,), False, "Relu"),
         ("MatMul", (2, 5, 33), 33, 17, {}, None, False, ""),
         ("MatMul", (17,), 17, 64, {}, None, False, ""),
         ("MatMul", (4, 3, 100), 100, 5, {}, None, False, "")]


@pytest.mark.parametrize("form", FORMS, ids=lambda f: f"{f[0]}{'x'.join(map(str, f[1]))}"
                         f"-n{f[3]}{f[7]}")
def test_specs_match_the_reference(form):
    op, x_shape, k, n, attrs, c_shape, with_z, act = form
    node, ins, outs, feeds = _node_case(op, x_shape, k, n, attrs, c_shape, with_z)
    if act:
        node.attrs.update(activation=act, activation_params=list(CLIP) if act == "Clip" else [])
    rows = int(np.prod(x_shape[:-1]))
    plain = {a: v for a, v in node.attrs.items() if not a.startswith("activation")}
    f64 = [None if f is None else f.astype(np.float64) for f in feeds]
    want = REFERENCE[op](plain, f64[:2] if op == "MatMul" else f64[:3])[0]
    mag = REFERENCE[op](plain, [None if f is None else np.abs(f) for f in f64[:2]]
                        + ([] if op == "MatMul" else [None if f64[2] is None
                                                      else np.abs(f64[2])]))[0]
    if with_z:
        want, mag = want + f64[3], mag + np.abs(f64[3])
    want = np.clip(want, *CLIP) if act == "Clip" else np.maximum(want, 0) \
        if act == "Relu" else want
    bound = (k + 3) * EPS / (1 - (k + 3) * EPS) * mag + 1e-30   # + alpha / beta roundings
    offered = set()
    for name, need, row, algo, t in sparse_gemm.SPECS:
        spec = next(s for s in KERNELS[op] if s.name == name)
        if spec.supports(node, ins, outs):
            offered.add(name)
        for lib in [_spmm_emu] + ([_spmm] if row in USABLE else []):
            run = sparse_gemm._prepare(node, ins, outs, row, lib)
            y = np.full(outs[0].shape, np.nan, np.float32)
            run(feeds, [y])
            assert np.all(np.abs(y - want) <= bound), (name, lib.__name__)
    assert offered == {name for name, need, _, algo, t in sparse_gemm.SPECS
                       if sparse_gemm._offered(rows, need, algo, t)}


def test_refused_forms():
    def offers(node, ins, outs):
        return [s.name for s in KERNELS[node.op]
                if s.name in {t[0] for t in sparse_gemm.SPECS} and s.supports(node, ins, outs)]
    node, ins, outs, _ = _node_case("Gemm", (4, 40), 40, 24, {"transB": 1}, (24,), False)
    assert offers(node, ins, outs)
    for change in ({"transA": 1}, {"activation": "Sigmoid"}):
        assert not offers(Node("Gemm", node.inputs, ["y"], dict(node.attrs, **change)), ins,
                          outs), change
    per_row = ins[:2] + [TensorInfo.of(np.ones((4, 1), np.float32))]
    assert not offers(node, per_row, outs)                                # C (M, 1)
    assert not offers(node, ins[:2] + [TensorInfo("float32", (24,))], outs)   # C not constant
    dense = [ins[0], TensorInfo.of(RNG.standard_normal((24, 40)).astype(np.float32))] + ins[2:]
    assert not offers(node, dense, outs)
    mm = Node("MatMul", ["x", "w"], ["y"], {}, "mm")
    x_var = [TensorInfo("float32", (4, 40)), TensorInfo("float32", (40, 24))]
    assert not offers(mm, x_var, outs)                                    # W not constant


# -- the planner ---------------------------------------------------------------------------

def _fc_model(wt, rows, op="Gemm"):
    n, k = wt.shape
    if op == "Gemm":
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["c"], transB=1, name="fc"),
                 helper.make_node("Relu", ["c"], ["y"])]
        inits = {"w": wt, "b": RNG.standard_normal(n).astype(np.float32)}
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
        inits = {"w": np.ascontiguousarray(wt.T)}
    return make_model(nodes, [("x", np.float32, [rows, k])], [("y", np.float32, [rows, n])],
                      inits)


@pytest.mark.parametrize("op, rows", [("Gemm", 1), ("Gemm", 64), ("MatMul", 3)])
def test_pruned_fc_offers_the_sparse_kernels(op, rows):
    wt = _weights_t(96, 80, 0.9)
    model = _fc_model(wt, rows, op)
    # MatMul: unoptimized, else the declutter pass makes it a Gemm
    graph = edgenn.load(model.SerializeToString(), optimized=op == "Gemm")
    sess = edgenn.InferenceSession(graph, tune="full")
    feeds = {"x": RNG.standard_normal((rows, 80)).astype(np.float32)}
    got = sess.run(None, feeds)[0]
    ref = edgenn.InferenceSession(graph, reference=True).run(None, feeds)[0]
    step = next(s for s in sess.plan.steps if s.node.op == op)
    if op == "Gemm":
        assert step.node.attrs.get("activation") == "Relu"          # fused: the C epilogue
    usable = {name for name, need, row, algo, t in sparse_gemm.SPECS
              if row in USABLE and sparse_gemm._offered(rows, need, algo, t)}
    assert usable and usable <= set(step.choice.times), step.choice.times   # all timed
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_dense_fc_does_not_offer_the_sparse_kernels():
    wt = _weights_t(96, 80, MIN_ZEROS * 0.6)
    sess = edgenn.InferenceSession(_fc_model(wt, 4).SerializeToString(), tune="full")
    sess.run(None, {"x": RNG.standard_normal((4, 80)).astype(np.float32)})
    step = next(s for s in sess.plan.steps if s.node.op == "Gemm")
    assert not any(n.startswith(("spmv", "spgemm")) for n in step.choice.times)


# -- a pruned MLP against onnxruntime ------------------------------------------------------

def _mlp(sizes, sparsity, rows):
    """helpers.mlp (Gemm (transB) + Relu) with every weight magnitude-pruned to `sparsity`
    -> (model, [(W (N, K), b)] per layer)."""
    from onnx import numpy_helper

    from edgenn.compress.prune import magnitude_mask
    model = mlp(sizes, rows, seed=int(RNG.integers(1 << 30)))
    layers = []
    for i in range(len(sizes) - 1):
        inits = {t.name: t for t in model.graph.initializer}
        w = numpy_helper.to_array(inits[f"w{i}"])
        w = np.where(magnitude_mask(w, sparsity), w, 0).astype(np.float32)
        inits[f"w{i}"].CopyFrom(numpy_helper.from_array(w, f"w{i}"))
        layers.append((w, numpy_helper.to_array(inits[f"b{i}"])))
    return model, layers


def _mlp_bound(layers, x):
    """A bound on |float32 result - exact| of any summation order, propagated layer by
    layer: e' = |W| e + gamma_{K+1} (|W| |h| + |b|) (Relu is 1-Lipschitz)."""
    h, e = x.astype(np.float64), np.zeros(x.shape)
    for i, (w, b) in enumerate(layers):
        k = w.shape[1]
        g = (k + 1) * EPS / (1 - (k + 1) * EPS)
        aw = np.abs(w).astype(np.float64)
        e = e @ aw.T + g * (np.abs(h) @ aw.T + np.abs(b))
        h = h @ w.T.astype(np.float64) + b
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    return h, e


@pytest.mark.parametrize("rows, sparsity", [(1, 0.9), (64, 0.8)])
def test_pruned_mlp_matches_onnxruntime(rows, sparsity):
    model, layers = _mlp((784, 1024, 1024, 10), sparsity, rows)
    x = RNG.standard_normal((rows, 784)).astype(np.float32)
    sess = edgenn.InferenceSession(model.SerializeToString(), tune="full")
    got = sess.run(None, {"x": x})[0]
    want = ort_run(model, {"x": x})[0]
    exact, err = _mlp_bound(layers, x)
    assert np.all(np.abs(got - exact) <= err) and np.all(np.abs(want - exact) <= err)
    assert np.all(np.abs(got - want) <= 2 * err)
    chosen = [s.choice for s in sess.plan.steps if s.node.op == "Gemm"]
    assert len(chosen) == 3
    assert all(any(n.startswith(("spmv", "spgemm")) for n in c.times) for c in chosen)
