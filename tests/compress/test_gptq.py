"""GPTQ weight codes (compress/gptq.py): the same codes as plain rounding when the inputs
are uncorrelated (H diagonal: nothing to compensate), a smaller output error than plain
rounding on correlated inputs, awkward shapes and dead inputs, and the codes it chooses
saved and re-saved exactly."""
import numpy as np
import pytest

from edgenn.compress import gptq
from edgenn.compress.weights import compress_weights, decode, encode
from edgenn.errors import InputError
from edgenn.graph import codecs
from edgenn.graph import format as enn
from edgenn.graph.ir import Graph, Node, ValueInfo


def _correlated_inputs(rng, p, k):
    """(P, K) inputs with a strongly correlated, unevenly scaled covariance (as a layer's
    activations are)."""
    mix = rng.standard_normal((k, k)) / np.sqrt(k) + np.eye(k)
    return rng.standard_normal((p, k)) @ mix * rng.uniform(0.1, 3, k)


def _plain(w2d, bits, block):
    coded = encode(w2d.astype(np.float32), 0, bits, block=block)
    return decode(coded["q"], coded["scale"], coded["meta"]).astype(np.float64)


def _gptq(w2d, h, bits, block):
    q, s = gptq.quantize(w2d, h, bits, block)
    coded = codecs.pack(q, s, 0, bits, block, w2d.shape)
    return q, s, decode(coded["q"], coded["scale"], coded["meta"]).astype(np.float64)


@pytest.mark.parametrize("bits,block", [(4, 32), (4, 8), (4, 64), (8, 40)])
@pytest.mark.parametrize("n,k", [(1, 32), (16, 40), (24, 96), (7, 130), (40, 33)])
def test_diagonal_h_gives_plain_rounding(n, k, bits, block):
    rng = np.random.default_rng(n * 1000 + k + bits)
    w = rng.standard_normal((n, k)).astype(np.float32).astype(np.float64)
    h = np.diag(rng.uniform(0.5, 2.0, k))
    _, _, got = _gptq(w, h, bits, block)
    np.testing.assert_array_equal(got, _plain(w, bits, block))


@pytest.mark.parametrize("bits,block", [(4, 32), (4, 128), (8, 96)])
@pytest.mark.parametrize("n,k", [(8, 96), (64, 96), (33, 200)])
def test_correlated_inputs_lower_the_output_error(n, k, bits, block):
    rng = np.random.default_rng(n + 7 * k + bits)
    w = rng.standard_normal((n, k))
    x = _correlated_inputs(rng, 4 * k, k)
    q, s, got = _gptq(w, x.T @ x, bits, block)
    qmax = codecs.QMAX[bits]
    assert q.dtype == np.int8 and np.abs(q).max() <= qmax and np.all(s > 0)
    err = np.linalg.norm((got - w) @ x.T)
    plain = np.linalg.norm((_plain(w, bits, block) - w) @ x.T)
    # the greedy OBS steps are not an optimum, but on inputs this correlated they remove
    # a large share of the rounding error (measured 0.70-0.79x here); 0.85 leaves margin
    assert err < 0.85 * plain, (err, plain)


def test_dead_inputs_and_a_singular_h():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((12, 64))
    x = _correlated_inputs(rng, 200, 64)
    x[:, [0, 5, 63]] = 0.0                       # inputs never excited
    x[:, 10] = x[:, 11]                          # H singular
    q, s, got = _gptq(w, x.T @ x, 4, 32)
    assert np.all(np.isfinite(got)) and np.abs(q).max() <= 7


def _mlp(rng, k=64, n=48):
    w1 = rng.standard_normal((k, n)).astype(np.float32)
    w2 = rng.standard_normal((n, 16)).astype(np.float32) / 4
    nodes = [Node("MatMul", ["x", "w1"], ["h"], {}, "mm1"), Node("Relu", ["h"], ["r"], {}, "relu"),
             Node("MatMul", ["r", "w2"], ["y"], {}, "mm2")]
    return Graph(nodes, [ValueInfo("x", "float32", ("n", k))],
                 [ValueInfo("y", "float32", ("n", 16))], {"w1": w1, "w2": w2})


def test_compress_weights_with_calibration_uses_gptq_and_saves_exactly(tmp_path):
    from edgenn.runtime.session import InferenceSession
    rng = np.random.default_rng(0)
    x = _correlated_inputs(rng, 256, 64).astype(np.float32)
    calib, held = x[:192], x[192:]
    ref = InferenceSession(_mlp(np.random.default_rng(1))).run(None, {"x": held})[0]
    errs = {}
    for how in ("plain", "gptq"):
        g = _mlp(np.random.default_rng(1))
        rep = compress_weights(g, 4, min_elements=16, calib=calib if how == "gptq" else None)
        assert rep["tensors"] == 2 and rep["gptq"] == (2 if how == "gptq" else 0)
        got = InferenceSession(g).run(None, {"x": held})[0]
        errs[how] = np.linalg.norm(got - ref)
        path = tmp_path / f"{how}.enn"
        enn.save(g, str(path))
        loaded = enn.load(str(path))
        for name in ("w1", "w2"):
            np.testing.assert_array_equal(loaded.consts[name], g.consts[name])
        again = tmp_path / f"{how}.again.enn"
        enn.save(loaded, str(again))
        assert again.read_bytes() == path.read_bytes()
    assert errs["gptq"] < 0.85 * errs["plain"], errs        # held-out rows, not calibrated on


def test_block_sizes_are_checked_and_kept():
    g = _mlp(np.random.default_rng(2))
    with pytest.raises(InputError):
        compress_weights(g, 4, min_elements=16, block=5)
    with pytest.raises(InputError):
        compress_weights(g, 4, min_elements=16, block=0)
    compress_weights(g, 4, min_elements=16, block=64)
    assert g.meta["weight_codecs"]["w1"]["block"] == 64
    loaded = enn.from_buffer(enn.to_bytes(g))
    np.testing.assert_array_equal(loaded.consts["w1"], g.consts["w1"])


def test_only_layers_with_one_input_covariance_take_gptq():
    rng = np.random.default_rng(4)
    consts = {"w2": rng.standard_normal((16, 8)).astype(np.float32),
              "w3": rng.standard_normal((2, 16, 8)).astype(np.float32),   # batched MatMul
              "shared": rng.standard_normal((16, 8)).astype(np.float32)}
    nodes = [Node("MatMul", ["x", "w2"], ["a"], {}, "plain"),
             Node("MatMul", ["x3", "w3"], ["b"], {}, "batched"),
             Node("MatMul", ["x", "shared"], ["c"], {}, "one"),
             Node("Add", ["c", "a"], ["d"], {}, "add"),
             Node("MatMul", ["x", "shared"], ["e"], {}, "two")]      # read twice
    g = Graph(nodes, [ValueInfo("x", "float32", (4, 16)),
                      ValueInfo("x3", "float32", (4, 2, 3, 16))],
              [ValueInfo(n, "float32", ()) for n in ("b", "d", "e")], consts)
    calib = {"x": rng.standard_normal((4, 16)).astype(np.float32),
             "x3": rng.standard_normal((4, 2, 3, 16)).astype(np.float32)}
    hs = gptq.hessians(g, ["w2", "w3", "shared"], [calib])
    assert set(hs) == {"w2"} and hs["w2"].shape == (16, 16)
    rep = compress_weights(g, 4, min_elements=16, calib=[calib])
    assert rep["tensors"] == 3 and rep["gptq"] == 1


@pytest.mark.parametrize("bits,block", [(4, 96), (4, 256), (8, 384), (4, 32)])
def test_lazy_batches_give_the_codes_of_one_batch(monkeypatch, bits, block):
    """Batches of whole blocks: each block's scales are fitted after every earlier column's
    update has reached it, so the lazy result is the one-batch (plain OBS) result; a block
    that straddled a batch boundary was fitted from weights without the batch's updates."""
    rng = np.random.default_rng(block + bits)
    w = rng.standard_normal((24, 384))
    x = _correlated_inputs(rng, 1000, 384)
    q, s = gptq.quantize(w, x.T @ x, bits, block)
    monkeypatch.setattr(gptq, "BATCH", 10_000)
    q1, s1 = gptq.quantize(w, x.T @ x, bits, block)
    np.testing.assert_allclose(s, s1, rtol=1e-5)
    assert np.mean(q != q1) < 1e-3                 # float rounding may flip a tie or two


def test_pruned_zeros_stay_zero_and_their_error_is_compensated():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((32, 128))
    w[rng.random(w.shape) < 0.7] = 0.0                       # 70% pruned
    x = _correlated_inputs(rng, 600, 128)
    q, s, got = _gptq(w, x.T @ x, 4, 32)
    assert np.all(q[w == 0] == 0) and np.all(got[w == 0] == 0)
    err = np.linalg.norm((got - w) @ x.T)
    plain = np.linalg.norm((_plain(w, 4, 32) - w) @ x.T)
    assert err < plain, (err, plain)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_hessian_falls_back_to_the_data_free_codes(bad):
    rng = np.random.default_rng(6)
    w = rng.standard_normal((16, 64)).astype(np.float32)
    x = _correlated_inputs(rng, 200, 64)
    h = x.T @ x
    h[3, :] = bad
    with pytest.raises(np.linalg.LinAlgError):
        gptq.quantize(w.astype(np.float64), h, 4, 32)
    coded = gptq.coded(w, 0, h, 4, 32)
    want = encode(w, 0, 4, block=32)
    np.testing.assert_array_equal(coded["q"], want["q"])
    np.testing.assert_array_equal(coded["scale"], want["scale"])


def test_a_graph_copy_has_its_own_codec_table():
    """compress_weights on a copy must not mark the original's weights (which would then
    be saved coded, with fresh codes, though they were never replaced)."""
    from edgenn.quant.observe import copy_graph
    g = _mlp(np.random.default_rng(7))
    g.meta["weight_codecs"] = {}
    c = copy_graph(g)
    compress_weights(c, 4, min_elements=16)
    assert set(c.meta["weight_codecs"]) == {"w1", "w2"} and g.meta["weight_codecs"] == {}
    np.testing.assert_array_equal(enn.from_buffer(enn.to_bytes(g)).consts["w1"], g.consts["w1"])
