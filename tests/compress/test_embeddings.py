"""Quantized embedding tables (compress/embeddings.py, the QGather op, kernels/tensor/
embedding.py): a two-tower recommendation model and BERT-tiny's token embedding.

Bound from the arithmetic: codes are round(w / s) clipped to [-qmax, qmax] for the row's
(or block's) scale s, so a dequantized entry is within s / 2 of the float one, or, where
|w| > qmax s (ADMM may fit a scale below max|w| / qmax and clip the extremes), within
|w| - qmax s.
"""
import numpy as np
import pytest
from support.helpers import helper, make_model
from support.models import rel_err

import edgenn
from edgenn.compress.embeddings import embedding_gathers, quantize_embeddings
from edgenn.errors import InputError

RNG = np.random.default_rng(5)


def _two_tower(users=5000, items=3000, dim=32, hidden=16):
    inits = {"users": RNG.standard_normal((users, dim)).astype(np.float32),
             "items": RNG.standard_normal((items, dim)).astype(np.float32) * 0.3,
             "wu": (RNG.standard_normal((dim, hidden)) / np.sqrt(dim)).astype(np.float32),
             "wi": (RNG.standard_normal((dim, hidden)) / np.sqrt(dim)).astype(np.float32),
             "axes": np.array([-1], np.int64)}
    nodes = [helper.make_node("Gather", ["users", "user_id"], ["ue"]),
             helper.make_node("Gather", ["items", "item_id"], ["ie"]),
             helper.make_node("MatMul", ["ue", "wu"], ["uh"]),
             helper.make_node("MatMul", ["ie", "wi"], ["ih"]),
             helper.make_node("Relu", ["uh"], ["u"]), helper.make_node("Relu", ["ih"], ["i"]),
             helper.make_node("Mul", ["u", "i"], ["ui"]),
             helper.make_node("ReduceSum", ["ui", "axes"], ["score"], keepdims=0)]
    model = make_model(nodes, [("user_id", np.int64, [64]), ("item_id", np.int64, [64])],
                       [("score", np.float32, [64])], inits, opset=17)
    feeds = {"user_id": RNG.integers(-users, users, 64), "item_id": RNG.integers(0, items, 64)}
    return model, inits, feeds


@pytest.mark.parametrize("bits", [8, 4])
def test_two_tower_tables_quantized_within_half_a_step(tmp_path, bits):
    model, inits, feeds = _two_tower()
    g = edgenn.load(model.SerializeToString())
    rep = quantize_embeddings(g, bits)
    assert set(rep.tables) == {"users", "items"}
    assert [n.op for n in g.nodes].count("QGather") == 2 and "Gather" not in [n.op for n in g.nodes]
    assert rep.bytes_after < rep.bytes_before / (3.5 if bits == 8 else 6)
    # each gathered row within half a quantization step of the float row
    for table, ids in (("users", feeds["user_id"]), ("items", feeds["item_id"])):
        node = next(n for n in g.nodes if n.op == "QGather" and n.inputs[2] in
                    ("user_id", "item_id") and table in n.inputs[0])
        codes, scale = g.consts[node.inputs[0]], g.consts[node.inputs[1]]
        sess = edgenn.InferenceSession(_just_gather(codes, scale, node.attrs, len(ids)))
        got = sess.run(None, {"i": ids})[0]
        want = inits[table][ids]
        step = np.repeat(scale[ids].astype(np.float32), node.attrs["block"],
                         axis=1)[:, :want.shape[1]]
        qmax = 127 if bits == 8 else 7
        bound = np.maximum(step / 2, np.abs(want) - qmax * step)
        assert np.all(np.abs(got - want) <= bound * (1 + 1e-5) + 1e-7)
    path = tmp_path / "tt.enn"
    edgenn.save(g, str(path), entropy=True)
    score = edgenn.InferenceSession(str(path)).run(None, feeds)[0]
    import onnxruntime as ort                  # the peer, on the fp32 model
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cos = float(score @ ref / (np.linalg.norm(score) * np.linalg.norm(ref)))
    assert cos > (0.999 if bits == 8 else 0.99), cos


def _just_gather(codes, scale, attrs, n):
    """A model of one QGather (the op exists only inside edgenn: built as a Graph)."""
    from edgenn.graph.ir import Graph, Node, ValueInfo
    node = Node("QGather", ["q", "s", "i"], ["y"], dict(attrs), "qg")
    return Graph([node], [ValueInfo("i", "int64", (n,))],
                 [ValueInfo("y", "float32", (n, attrs["dim"]))], {"q": codes, "s": scale}, {})


def test_out_of_range_index_is_an_input_error():
    model, _, feeds = _two_tower()
    g = edgenn.load(model.SerializeToString())
    quantize_embeddings(g, 8)
    sess = edgenn.InferenceSession(g)
    bad = dict(feeds, item_id=np.full(64, 3000, np.int64))
    with pytest.raises(InputError, match="QGather"):
        sess.run(None, bad)


def test_a_tied_table_is_left_alone():
    emb = RNG.standard_normal((2000, 16)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("Transpose", ["emb"], ["embT"], perm=[1, 0]),
             helper.make_node("MatMul", ["e", "embT"], ["logits"])]
    model = make_model(nodes, [("ids", np.int64, [3])], [("logits", np.float32, [3, 2000])],
                       {"emb": emb})
    g = edgenn.load(model.SerializeToString(), optimized=False)
    assert embedding_gathers(g) == {}
    assert quantize_embeddings(g).tables == {}


@pytest.mark.parametrize("bits, cosine", [(8, 0.9999), (4, 0.99)])
def test_bert_tiny_token_embedding(zoo, tmp_path, bits, cosine):
    """BERT-tiny (vocab 30522 x 128): the word table quantized (position and token-type
    tables are below MIN_ROWS), the encoder's outputs against onnxruntime's fp32
    (measured on the zoo's weights: int8 cosine >= 0.99998, int4 >= 0.9945)."""
    case = zoo("bert_tiny-op17")
    g = edgenn.load(str(case.path))
    rep = quantize_embeddings(g, bits)
    (name, (rows, dim, before, after)), = rep.tables.items()
    assert (rows, dim) == (30522, 128)
    path = tmp_path / "bert.enn"
    edgenn.save(g, str(path), entropy=True)
    plain = tmp_path / "bert_fp32.enn"
    edgenn.convert(str(case.path), str(plain))
    saved = plain.stat().st_size - path.stat().st_size
    assert saved > 0.7 * before if bits == 8 else saved > 0.8 * before
    outs = edgenn.InferenceSession(str(path), input_shapes=case.input_shapes).run(None, case.feeds)
    for got, want in zip(outs, case.expected):
        g64, w64 = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        assert g64 @ w64 / (np.linalg.norm(g64) * np.linalg.norm(w64)) > cosine
    if bits == 8:
        assert max(rel_err(a, b) for a, b in zip(outs, case.expected)) < 0.05


def test_chain_with_embeddings_and_int8():
    """compress(): tables int8, then the MatMuls int8 by the quantizer, the fp32 graph
    untouched by either step."""
    from edgenn.compress.chain import compress
    model, _, feeds = _two_tower()
    fp32 = edgenn.load(model.SerializeToString())
    ops = [n.op for n in fp32.nodes]
    calib = [{k: RNG.integers(0, 3000, 64) for k in feeds} for _ in range(4)]
    graph, rep = compress(fp32, calib, embeddings=8, data=calib, rounds=3)
    assert [s.name for s in rep.steps] == ["fp32", "embedded", "int8", "coded"]
    assert [n.op for n in fp32.nodes] == ops                      # the input graph as it was
    assert "QGather" in [n.op for n in graph.nodes]
    assert rep.steps[-1].bytes < rep.steps[0].bytes / 3
    assert all(s.cosine > 0.99 for s in rep.steps[1:])
