"""Weight-only int8 / int4 coding (compress/weights.py, codec "qblock" of the .enn file):
round trips over awkward shapes, error bounds, save/load exactness, corruption caught."""
import numpy as np
import pytest

from edgenn.compress.weights import INT4_BLOCK, compress_weights, decode, encode
from edgenn.errors import ModelFormatError
from edgenn.graph import format as enn
from edgenn.graph.ir import Graph, Node, ValueInfo

SHAPES = [((64, 3, 3, 3), 0), ((384, 1536), 1), ((33, 7, 5), 2), ((10, 100), 0),
          ((1, 31), 0), ((5, 1), 1), ((16, 8, 1, 1), 0), ((3, 65), -1)]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("shape,axis", SHAPES)
def test_round_trip_error_is_bounded(shape, axis, bits):
    rng = np.random.default_rng(len(shape) * 7 + bits)
    w = (rng.standard_normal(shape) * rng.uniform(0.01, 3)).astype(np.float32)
    coded = encode(w, axis, bits)
    d = decode(coded["q"], coded["scale"], coded["meta"])
    assert d.shape == w.shape and d.dtype == np.float32
    qmax = 127 if bits == 8 else 7
    # per block: the error of a value inside the clipping range is at most half a step, a
    # clipped one at most its distance past qmax * scale
    wc = np.moveaxis(w, axis % w.ndim, 0).reshape(w.shape[axis], -1)
    dc = np.moveaxis(d, axis % w.ndim, 0).reshape(w.shape[axis], -1)
    block = wc.shape[1] if bits == 8 else INT4_BLOCK
    for c in range(wc.shape[0]):
        for b, s in enumerate(coded["scale"][c]):
            sl = slice(b * block, (b + 1) * block)
            err = np.abs(wc[c, sl] - dc[c, sl])
            over = np.maximum(np.abs(wc[c, sl]) - qmax * s, 0)
            assert np.all(err <= s / 2 + over + 1e-6 * np.abs(wc[c, sl]).max()), (c, b)
    rel = np.sqrt(np.mean((d - w) ** 2) / np.mean(w ** 2))
    assert rel < (0.01 if bits == 8 else 0.15), rel


def test_int4_packs_two_codes_per_byte():
    w = np.arange(-7, 8, dtype=np.float32).reshape(1, 15)      # one block, odd length
    coded = encode(w, 0, 4)
    assert coded["q"].dtype == np.uint8 and coded["q"].size == INT4_BLOCK // 2
    np.testing.assert_allclose(decode(coded["q"], coded["scale"], coded["meta"]), w,
                               rtol=1e-6)


def test_decode_rejects_inconsistent_sizes():
    coded = encode(np.ones((4, 40), np.float32), 0, 4)
    with pytest.raises(ValueError):
        decode(coded["q"][:-1], coded["scale"], coded["meta"])
    with pytest.raises(ValueError):
        decode(coded["q"], coded["scale"][:, :1], coded["meta"])
    with pytest.raises(ValueError):
        decode(coded["q"], coded["scale"], dict(coded["meta"], bits=3))
    for bad in (np.nan, np.inf):                 # a hostile file's scales
        scale = coded["scale"].copy()
        scale[1, 0] = bad
        with pytest.raises(ValueError, match="finite"):
            decode(coded["q"], scale, coded["meta"])


def test_a_file_with_non_finite_scales_is_refused():
    from edgenn.graph.codecs import remember
    g = _matmul_graph(np.random.default_rng(3))
    compress_weights(g, 4, min_elements=16)
    coded = encode(g.consts["w"], 1, 4)
    coded["scale"] = coded["scale"].astype(np.float32)
    coded["scale"][0, 0] = np.nan                # what a hostile file would hold
    remember(g.consts["w"], coded)               # so the writer stores exactly these
    with pytest.raises(ModelFormatError, match="finite"):
        enn.from_buffer(enn.to_bytes(g))


def test_saved_codes_follow_the_codec_asked_for():
    """The remembered codes are written only when bits, axis and block all match."""
    from edgenn.graph.codecs import coded_form, remember
    rng = np.random.default_rng(4)
    coded = encode(rng.standard_normal((8, 64)).astype(np.float32), 0, 4, block=16)
    w = decode(coded["q"], coded["scale"], coded["meta"])
    remember(w, coded)
    assert coded_form(w, 4, 0) is coded and coded_form(w, 4, 0, 16) is coded
    assert coded_form(w, 4, 0, 32)["meta"]["block"] == 32
    assert coded_form(w, 4, 1)["meta"]["axis"] == 1
    assert coded_form(w, 8, 0)["meta"]["bits"] == 8


def _matmul_graph(rng, k=96, n=80):
    w = rng.standard_normal((k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    nodes = [Node("MatMul", ["x", "w"], ["h"], {}, "mm"), Node("Add", ["h", "b"], ["y"], {}, "add")]
    return Graph(nodes, [ValueInfo("x", "float32", (2, k))], [ValueInfo("y", "float32", (2, n))],
                 {"w": w, "b": b})


@pytest.mark.parametrize("bits", [8, 4])
def test_saved_file_decodes_to_the_in_memory_weights(tmp_path, bits):
    g = _matmul_graph(np.random.default_rng(bits))
    w0 = g.consts["w"].copy()
    report = compress_weights(g, bits, min_elements=16)
    assert report["tensors"] == 1 and report["bytes_after"] < report["bytes_before"] / 3
    assert "b" not in g.meta["weight_codecs"]              # 1-D: stays raw
    path = tmp_path / "m.enn"
    enn.save(g, str(path))
    loaded = enn.load(str(path))
    np.testing.assert_array_equal(loaded.consts["w"], g.consts["w"])
    assert not np.array_equal(loaded.consts["w"], w0)      # it really is coded
    again = tmp_path / "again.enn"
    enn.save(loaded, str(again))
    np.testing.assert_array_equal(enn.load(str(again)).consts["w"], g.consts["w"])


def test_corrupt_codes_are_caught(tmp_path):
    g = _matmul_graph(np.random.default_rng(0))
    compress_weights(g, 8, min_elements=16)
    path = tmp_path / "m.enn"
    enn.save(g, str(path))
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x40                                     # inside the tensor data
    with pytest.raises(ModelFormatError, match="checksum"):
        enn.from_buffer(bytes(data))


def test_model_weight_only_int8_keeps_fidelity_and_shrinks(tmp_path):
    import os

    from support.models import ZOO

    import edgenn
    path, feeds = ZOO["mobilenet_v2-op13"]()
    ref = edgenn.InferenceSession(str(path)).run(None, feeds)[0]
    g = edgenn.load(str(path))
    compress_weights(g, 8)
    out = tmp_path / "w8.enn"
    edgenn.save(g, str(out))
    got = edgenn.InferenceSession(str(out)).run(None, feeds)[0]
    cos = float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cos > 0.99, cos
    assert os.path.getsize(out) <= 0.27 * os.path.getsize(path)


def test_int4_scales_are_stored_as_float16_when_they_fit():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((24, 96)).astype(np.float32)
    coded = encode(w, 0, 4)
    assert coded["scale"].dtype == np.float16                    # half a bit a weight
    d = decode(coded["q"], coded["scale"], coded["meta"])
    # the codes were chosen against the float16 scales: still within half a step
    s = np.repeat(coded["scale"].astype(np.float32), INT4_BLOCK, axis=1)
    assert np.all(np.abs(d - w) <= np.maximum(s / 2, np.abs(w) - 7 * s) * (1 + 1e-6))
    assert encode(w, 0, 8)["scale"].dtype == np.float32          # int8: per channel, f32
    tiny = (w * 1e-9).astype(np.float32)                         # below float16's range
    coded = encode(tiny, 0, 4)
    assert coded["scale"].dtype == np.float32
    d = decode(coded["q"], coded["scale"], coded["meta"])
    assert np.sqrt(np.mean((d - tiny) ** 2) / np.mean(tiny ** 2)) < 0.15
    g = _matmul_graph(rng)
    compress_weights(g, 4, min_elements=16)
    loaded = enn.from_buffer(enn.to_bytes(g))
    np.testing.assert_array_equal(loaded.consts["w"], g.consts["w"])


@pytest.mark.parametrize("k, block, bits, want", [
    (25, 64, 4, 26),      # a 5x5 depthwise row: one block (int4: even), not 64 codes
    (9, 32, 8, 9),        # a 3x3 depthwise row, int8 blocks of any size
    (200, 64, 4, 50),     # the largest divisor from 64 down to 32: no padding
    (384, 32, 4, 32),     # a block that divides the row is kept
    (1536, 128, 4, 128),
    (131, 32, 4, 32),     # a prime: no divisor in range, the last block padded
    (66, 64, 4, 64),      # its one divisor in [32, 64] is 33, odd: int4 pads instead
    (66, 64, 8, 33),
])
def test_row_block_fits_the_row(k, block, bits, want):
    from edgenn.compress.weights import row_block
    got = row_block(k, block, bits)
    assert got == want
    assert bits != 4 or got % 2 == 0


def test_short_rows_store_no_padding_codes():
    """A (200, 50) 1x1 conv at block 64 (the PP-OCR cls SE layers' shape): one block per row
    of 50 values, 5000 code bytes and 200 scales; at block 64 padded it took 6400 and 200."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((200, 50, 1, 1)).astype(np.float32)
    nodes = [Node("Conv", ["x", "w"], ["y"], {"kernel_shape": [1, 1]}, "conv")]
    g = Graph(nodes, [ValueInfo("x", "float32", (1, 50, 4, 4))],
              [ValueInfo("y", "float32", (1, 200, 4, 4))], {"w": w})
    report = compress_weights(g, 4, min_elements=16, block=64)
    assert report["bytes_after"] == 200 * 50 // 2 + 200 * 2    # codes + float16 scales
    assert g.meta["weight_codecs"]["w"]["block"] == 50
    back = enn.from_buffer(enn.to_bytes(g)).consts["w"]
    np.testing.assert_array_equal(back, g.consts["w"])
    assert np.linalg.norm(back - w) < 0.15 * np.linalg.norm(w)     # int4: ~20 dB SQNR
