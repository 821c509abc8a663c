"""The decoder family (graph/shapes/decoder.py): RotaryEmbedding (com.microsoft and ONNX
opset 23) and com.microsoft GroupQueryAttention, each a one-node model run by onnxruntime
and by edgenn (converted, planned, its reference kernel), over their variants; the .enn
round trip; the in-place cache update (kv_in_place) against onnxruntime's present; and the
errors of bad graphs and bad data.

Tolerances come from float32 arithmetic, never from a run: a rotation is two products and a
sum per channel, so within a few units of roundoff of max |x|; attention sums H products per
score (error <= H eps |q| |k| scale) and T weighted values per output (error <= the score
error times the value range, plus T eps of it), with a factor 4 for the softmax's exp and
division. Only what onnxruntime defines is compared: output rows of the kept tokens and
the cache rows 0 .. T_b - 1 of every entry (rows past T_b and padded query rows are
unspecified)."""
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgenn
from edgenn.errors import GraphError, InputError, UnsupportedOpError

EPS = float(np.finfo(np.float32).eps)
RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _model(node, feeds: dict, consts: dict, outputs, opset=17) -> bytes:
    vi = [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for k, v in feeds.items()]
    outs = [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs]
    g = h.make_graph([node], "g", vi, outs, [nh.from_array(v, k) for k, v in consts.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset),
                                       h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m.SerializeToString()


def _ort(model: bytes, feeds: dict) -> list:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _rotary_caches(positions: int, half: int):
    angle = np.arange(positions)[:, None] * (10000.0 ** (-np.arange(half) / half))[None]
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


# ---------------------------------------------------------------- RotaryEmbedding

def _check_rotary(node, feeds, opset):
    model = _model(node, feeds, {}, ["y"], opset)
    want = _ort(model, feeds)[0]
    got = edgenn.InferenceSession(model).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    # a cos - b sin: two products and a sum of terms <= max |x|
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * EPS * float(np.abs(feeds["x"]).max()))


@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 8])
@pytest.mark.parametrize("positions", ["ids", "offset"])
def test_rotary_embedding_contrib(layout, interleaved, rotary_dim, positions):
    b, s, n, hd, m = 2, 5, 3, 16, 32
    x = _f(b, s, n * hd) if layout == "bsd" else _f(b, n, s, hd)
    cos, sin = _rotary_caches(m, (rotary_dim or hd) // 2)
    pos = RNG.integers(0, m, (b, s)).astype(np.int64) if positions == "ids" \
        else np.array([7], np.int64)
    attrs = {"interleaved": interleaved}
    if rotary_dim:
        attrs.update(rotary_embedding_dim=rotary_dim, num_heads=n)
    node = h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"],
                       domain="com.microsoft", **attrs)
    _check_rotary(node, {"x": x, "pos": pos, "cos": cos, "sin": sin}, 17)


@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("interleaved,rotary_dim", [(0, 0), (1, 0), (0, 8), (1, 8)])
@pytest.mark.parametrize("with_ids", [True, False])
def test_rotary_embedding_onnx23(layout, interleaved, rotary_dim, with_ids):
    b, s, n, hd, m = 2, 4, 2, 16, 24
    x = _f(b, s, n * hd) if layout == "bsd" else _f(b, n, s, hd)
    cos, sin = _rotary_caches(m, (rotary_dim or hd) // 2)
    pos = RNG.integers(0, m, (b, s)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    if layout == "bsd":
        attrs["num_heads"] = n
    if with_ids:
        feeds = {"x": x, "cos": cos, "sin": sin, "pos": pos}
    else:                                   # caches per token: (B, S, r/2)
        feeds = {"x": x, "cos": cos[pos], "sin": sin[pos]}
    node = h.make_node("RotaryEmbedding", list(feeds), ["y"], **attrs)
    _check_rotary(node, feeds, 23)


# ---------------------------------------------------------------- GroupQueryAttention

def gqa_case(b=1, s=4, n=4, kvn=2, hd=16, past=0, seqlens=None, total=None, packed=False,
             rotary=False, interleaved=0, position_ids=None, bias=False, sink=False,
             **attrs):
    """A one-node GroupQueryAttention model and its feeds. seqlens (B,): keys after the step
    minus one (default past + s - 1); total: total_sequence_length (default the longest
    T), an initializer as the attention mask's width is once shapes are bound."""
    seqlens = np.array([past + s - 1] * b if seqlens is None else seqlens, np.int32)
    total = int(seqlens.max()) + 1 if total is None else total
    feeds, consts = {}, {"total": np.array(total, np.int32)}
    if packed:
        feeds["query"] = _f(b, s, (n + 2 * kvn) * hd)
        ins = ["query", "", ""]
    else:
        feeds.update(query=_f(b, s, n * hd), key=_f(b, s, kvn * hd), value=_f(b, s, kvn * hd))
        ins = ["query", "key", "value"]
    if past:
        feeds.update(past_key=_f(b, kvn, past, hd), past_value=_f(b, kvn, past, hd))
        ins += ["past_key", "past_value"]
    else:
        ins += ["", ""]
    feeds["seqlens_k"] = seqlens
    ins += ["seqlens_k", "total"]
    attrs = dict(num_heads=n, kv_num_heads=kvn, **attrs)
    if rotary:
        cos, sin = _rotary_caches(max(64, total + 8), hd // 2)
        consts.update(cos=cos, sin=sin)
        ins += ["cos", "sin"]
        attrs.update(do_rotary=1, rotary_interleaved=interleaved)
    else:
        ins += ["", ""]
    extra = {}
    if position_ids is not None:
        extra["position_ids"] = np.asarray(position_ids, np.int64)
    if bias:
        extra["attention_bias"] = _f(b, 1, s, total)
    if sink:
        extra["head_sink"] = _f(n)
    for name in ("position_ids", "attention_bias", "head_sink"):
        ins.append(name if name in extra else "")
    feeds.update(extra)
    while not ins[-1]:
        ins.pop()
    node = h.make_node("GroupQueryAttention", ins, ["y", "present_key", "present_value"],
                       domain="com.microsoft", name="gqa", **attrs)
    return node, feeds, consts


def attention_atol(feeds, node) -> float:
    """The float32 error bound of GQA's output (module docstring): score error from H
    products of |q| |k| (scaled), output error from T values of |v|."""
    a = {x.name: h.get_attribute_value(x) for x in node.attribute}
    n, kvn = a["num_heads"], a["kv_num_heads"]
    q = feeds["query"]
    hd = q.shape[-1] // (n + 2 * kvn if "key" not in feeds else n)
    kv = [np.abs(feeds[k]).max(initial=0) for k in ("key", "value", "past_key", "past_value")
          if k in feeds]
    big = max([float(np.abs(q).max())] + [float(x) for x in kv])
    scale = a.get("scale") or 1 / np.sqrt(hd)
    t = int(feeds["seqlens_k"].max()) + 1
    score_err = hd * EPS * big * big * scale
    if "attention_bias" in feeds:
        score_err += EPS * float(np.abs(feeds["attention_bias"]).max())
    return 4 * (score_err + t * EPS) * big


def check_gqa(node, feeds, consts):
    model = _model(node, feeds, consts, ["y", "present_key", "present_value"])
    want = _ort(model, feeds)
    got = edgenn.InferenceSession(model).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
    s = feeds["query"].shape[1]
    kept = np.minimum(feeds["seqlens_k"] + 1, s)
    atol = attention_atol(feeds, node)
    for b, t in enumerate(feeds["seqlens_k"] + 1):
        np.testing.assert_allclose(got[0][b, :kept[b]], want[0][b, :kept[b]], rtol=0, atol=atol)
        for g, w in zip(got[1:], want[1:]):   # past rows copied, new rows (rotated) stored
            np.testing.assert_allclose(g[b, :, :t], w[b, :, :t], rtol=0,
                                       atol=4 * EPS * float(np.abs(w).max()))
    return model, got


GQA_CASES = {
    "first_prompt": dict(s=6),
    "decode": dict(s=1, past=7),
    "prompt_after_past": dict(s=3, past=5),
    "shared_buffer_decode": dict(s=1, past=16, seqlens=[6], total=16),
    "shared_buffer_prompt": dict(s=4, past=16, seqlens=[3], total=16),
    "shared_buffer_prompt_after_past": dict(s=3, past=16, seqlens=[9], total=16),
    "batch2_seqlens": dict(b=2, s=1, past=16, seqlens=[4, 11], total=16),
    "batch2_padded_prompt": dict(b=2, s=5, seqlens=[4, 2], total=5),
    "packed_decode": dict(s=1, past=7, packed=True),
    "packed_prompt_rotary": dict(s=5, packed=True, rotary=True),
    "rotary_prompt": dict(s=6, rotary=True),
    "rotary_decode": dict(s=1, past=9, rotary=True),
    "rotary_interleaved": dict(s=3, past=5, rotary=True, interleaved=1),
    "rotary_shared_batch2": dict(b=2, s=1, past=12, seqlens=[3, 8], total=12, rotary=True),
    "position_ids_decode": dict(s=1, past=5, rotary=True, position_ids=[[9]]),
    "position_ids_first_prompt": dict(s=4, rotary=True, position_ids=[[3, 4, 5, 6]]),
    "position_ids_later_prompt": dict(s=3, past=16, seqlens=[7], total=16, rotary=True,
                                      position_ids=[[10, 2, 5]]),
    "local_window_prompt": dict(s=6, local_window_size=3),
    "local_window_decode": dict(s=1, past=16, seqlens=[11], total=16, local_window_size=4),
    "softcap": dict(s=2, past=5, softcap=2.0),
    "scale": dict(s=1, past=4, scale=0.3),
    "smooth_softmax": dict(s=2, past=5, smooth_softmax=1),
    "head_sink": dict(s=2, past=5, sink=True),
    "attention_bias": dict(s=1, past=5, bias=True),
    "attention_bias_softcap_prompt": dict(s=4, bias=True, softcap=1.0),
    "ratio1": dict(n=2, kvn=2, s=3, past=2),
    "ratio3_head64": dict(n=9, kvn=3, hd=64, s=1, past=10, rotary=True),
    "ratio3_head64_prompt": dict(n=9, kvn=3, hd=64, s=8, rotary=True),
    "ratio4": dict(n=8, kvn=2, s=2, past=6, rotary=True),
}


@pytest.mark.parametrize("case", sorted(GQA_CASES))
def test_group_query_attention(case):
    check_gqa(*gqa_case(**GQA_CASES[case]))


def test_gqa_enn_round_trip(tmp_path):
    node, feeds, consts = gqa_case(s=1, past=16, seqlens=[9], total=16, rotary=True,
                                   n=9, kvn=3, hd=64)
    model, got = check_gqa(node, feeds, consts)
    src = tmp_path / "gqa.onnx"
    src.write_bytes(model)
    graph = edgenn.convert(str(src))
    assert [n.op for n in graph.nodes] == ["GroupQueryAttention"]
    edgenn.save(graph, str(tmp_path / "gqa.enn"))
    again = edgenn.InferenceSession(str(tmp_path / "gqa.enn")).run(None, feeds)
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- the cache in place

def _attrs(node) -> dict:
    return {a.name: h.get_attribute_value(a) for a in node.attribute}


def _inputs(node, feeds, consts) -> list:
    return [None if not i else feeds[i] if i in feeds else consts[i] for i in node.input]


@pytest.mark.parametrize("kw", [dict(s=1, seqlens=[9]), dict(s=4, seqlens=[3]),
                                dict(b=2, s=1, seqlens=[2, 12], rotary=True),
                                dict(s=3, seqlens=[7], packed=True, rotary=True)],
                         ids=["decode", "prompt", "batch2_rotary", "packed_later_prompt"])
def test_kv_in_place_matches_present(kw):
    """The reference kernel with kv_in_place = 1 writes the new keys / values into the past
    arrays it is given (the same objects, no copy) and returns the output only; those arrays
    then equal onnxruntime's present where onnxruntime defines it (rows 0 .. T_b - 1)."""
    from edgenn.oplist import load_rules
    from edgenn.registry import REFERENCE
    load_rules()
    node, feeds, consts = gqa_case(past=16, total=16, **kw)
    want = _ort(_model(node, feeds, consts, ["y", "present_key", "present_value"]), feeds)
    ins = _inputs(node, {k: v.copy() for k, v in feeds.items()}, consts)
    past_k, past_v = ins[3], ins[4]
    outs = REFERENCE["GroupQueryAttention"]({**_attrs(node), "kv_in_place": 1}, ins)
    assert len(outs) == 1 and ins[3] is past_k and ins[4] is past_v
    s = feeds["query"].shape[1]
    for b, t in enumerate(feeds["seqlens_k"] + 1):
        kept = min(s, t)
        np.testing.assert_allclose(outs[0][b, :kept], want[0][b, :kept], rtol=0,
                                   atol=attention_atol(feeds, node))
        for mine, theirs in ((past_k, want[1]), (past_v, want[2])):
            np.testing.assert_allclose(mine[b, :, :t], theirs[b, :, :t], rtol=0,
                                       atol=4 * EPS * float(np.abs(theirs).max()))
        # rows past this step's new ones are left as they were
        after = t - kept + s
        np.testing.assert_array_equal(past_k[b, :, after:], feeds["past_key"][b, :, after:])


def test_kv_in_place_decode_steps():
    """A prompt then decode steps, each in place in one fixed buffer, equal onnxruntime
    stepped with its present fed back as past (the usual session loop)."""
    from edgenn.oplist import load_rules
    from edgenn.registry import REFERENCE
    load_rules()
    n, kvn, hd, cap = 4, 2, 16, 12
    attrs = dict(num_heads=n, kv_num_heads=kvn, do_rotary=1)
    cos, sin = _rotary_caches(32, hd // 2)
    buf_k, buf_v = np.zeros((1, kvn, cap, hd), np.float32), np.zeros((1, kvn, cap, hd), np.float32)
    ort_k, ort_v = np.zeros((1, kvn, 0, hd), np.float32), np.zeros((1, kvn, 0, hd), np.float32)
    length = 0
    for s in (5, 1, 1, 1):
        q, k, v = _f(1, s, n * hd), _f(1, s, kvn * hd), _f(1, s, kvn * hd)
        length += s
        seq = np.array([length - 1], np.int32)
        feeds = {"query": q, "key": k, "value": v, "past_key": ort_k, "past_value": ort_v,
                 "seqlens_k": seq}
        node = h.make_node("GroupQueryAttention", ["query", "key", "value", "past_key",
                                                   "past_value", "seqlens_k", "total", "cos",
                                                   "sin"],
                           ["y", "present_key", "present_value"], domain="com.microsoft",
                           **attrs)
        consts = {"total": np.array(length, np.int32), "cos": cos, "sin": sin}
        y, ort_k, ort_v = _ort(_model(node, feeds, consts, ["y", "present_key",
                                                            "present_value"]), feeds)
        (mine,) = REFERENCE["GroupQueryAttention"](
            {**attrs, "kv_in_place": 1},
            [q, k, v, buf_k, buf_v, seq, np.array(cap, np.int32), cos, sin])
        np.testing.assert_allclose(mine, y, rtol=0, atol=attention_atol(feeds, node))
        np.testing.assert_allclose(buf_k[:, :, :length], ort_k, rtol=0,
                                   atol=4 * EPS * float(np.abs(ort_k).max()))
        np.testing.assert_array_equal(buf_v[:, :, :length], ort_v)


def test_kv_in_place_shape_rule():
    """kv_in_place = 1: one output, present omitted; 0: present required."""
    from edgenn.graph.ir import Node
    from edgenn.graph.shapes.decoder import group_query_attention
    from edgenn.registry import TensorInfo
    ins = [TensorInfo("float32", (1, 1, 64)), TensorInfo("float32", (1, 1, 32)),
           TensorInfo("float32", (1, 1, 32)), TensorInfo("float32", (1, 2, 10, 16)),
           TensorInfo("float32", (1, 2, 10, 16)), TensorInfo("int32", (1,)),
           TensorInfo("int32", (), np.array(10, np.int32))]
    attrs = {"num_heads": 4, "kv_num_heads": 2}

    def rule(outputs, **more):
        return group_query_attention(Node("GroupQueryAttention", ["i"] * 7, outputs,
                                          {**attrs, **more}, "attn"), ins)
    assert [o.shape for o in rule(["y", "", ""], kv_in_place=1)] == [(1, 1, 64)]
    assert [o.shape for o in rule(["y", "pk", "pv"])] == [(1, 1, 64), (1, 2, 10, 16),
                                                          (1, 2, 10, 16)]
    with pytest.raises(GraphError, match="'attn'.*must be omitted"):
        rule(["y", "pk", "pv"], kv_in_place=1)
    with pytest.raises(GraphError, match="'attn'.*only with kv_in_place"):
        rule(["y", "", ""])


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("kw,match", [
    (dict(n=5, kvn=2), "multiple of kv_num_heads"),
    (dict(n=4, kvn=0), "multiple of kv_num_heads"),
])
def test_gqa_bad_head_counts(kw, match):
    node, feeds, consts = gqa_case(s=2, **kw)
    with pytest.raises(GraphError, match=f"'gqa'.*{match}"):
        edgenn.InferenceSession(_model(node, feeds, consts, ["y", "present_key",
                                                              "present_value"]))


def test_gqa_hidden_not_divisible():
    node, feeds, consts = gqa_case(s=2)
    feeds["query"] = _f(1, 2, 62)
    with pytest.raises(GraphError, match="'gqa'.*not divisible"):
        edgenn.InferenceSession(_model(node, feeds, consts, ["y", "present_key",
                                                              "present_value"]))


@pytest.mark.parametrize("seqlens", [[16], [-1], [40]])
def test_gqa_seqlens_beyond_the_buffer(seqlens):
    node, feeds, consts = gqa_case(s=1, past=16, seqlens=[3], total=16)
    sess = edgenn.InferenceSession(_model(node, feeds, consts, ["y", "present_key",
                                                                 "present_value"]))
    feeds["seqlens_k"] = np.array(seqlens, np.int32)
    with pytest.raises(InputError, match="'gqa'.*seqlens_k"):
        sess.run(None, feeds)


def test_rotary_positions_beyond_the_cache():
    x, (cos, sin) = _f(1, 2, 16), _rotary_caches(8, 8)
    node = h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope",
                       domain="com.microsoft")
    feeds = {"x": x, "pos": np.array([[1, 8]], np.int64)}
    sess = edgenn.InferenceSession(_model(node, feeds, {"cos": cos, "sin": sin}, ["y"]))
    with pytest.raises(InputError, match="'rope'.*outside the cos / sin caches"):
        sess.run(None, feeds)


def test_rotary_hidden_not_divisible():
    cos, sin = _rotary_caches(8, 4)
    node = h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="rope",
                       domain="com.microsoft", num_heads=3, rotary_embedding_dim=8)
    feeds = {"x": _f(1, 2, 16), "pos": np.array([0], np.int64)}
    with pytest.raises(GraphError, match="'rope'.*not divisible by num_heads 3"):
        edgenn.InferenceSession(_model(node, feeds, {"cos": cos, "sin": sin}, ["y"]))


@pytest.mark.parametrize("variant,match", [
    (dict(causal=0), "causal = 0"), (dict(qk_output=1), "qk_output"),
    (dict(sliding_window_cache=1, local_window_size=4), "sliding_window_cache"),
    (dict(k_quant_type="PER_TENSOR"), "quantized KV cache"),
    ("query_seqlens", "query_seqlens"),
])
def test_gqa_refused_variants(variant, match):
    node, feeds, consts = gqa_case(s=1, past=4)
    if variant == "query_seqlens":
        node.input.extend([""] * (16 - len(node.input)) + ["qlens"])
        feeds["qlens"] = np.array([1], np.int32)
    else:
        node.attribute.extend(h.make_attribute(k, v) for k, v in variant.items())
    with pytest.raises(UnsupportedOpError, match=f"GroupQueryAttention \\({match}.*: gqa"):
        edgenn.convert(_model(node, feeds, consts, ["y", "present_key", "present_value"]))
