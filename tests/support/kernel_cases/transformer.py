"""Kernel test cases for FusedAttention, LayerNormalization, RMSNormalization, (Log)Softmax
and Gelu: head counts and lead-dim broadcasting, additive and boolean masks of every
broadcast form, rows not a multiple of the vector width, large and tiny magnitudes,
statistics outputs."""
import numpy as np

from edgenn.graph.ir import Node

RT = set()  # every input is a run-time tensor (not a plan-time constant)


def attention_cases():
    rng = np.random.default_rng(0)
    f = np.float32
    shapes = [  # q lead, kt lead, v lead, S, D, T, Dv
        ((1, 12), (1, 12), (1, 12), 128, 32, 128, 32),   # MiniLM
        ((1, 8), (1, 8), (1, 8), 40, 15, 40, 15),        # PP-OCRv4 rec
        ((2, 3), (2, 3), (2, 3), 7, 5, 9, 6),            # S != T, Dv != D, batch 2
        ((3,), (3,), (3,), 1, 4, 1, 4),                  # one query, one key
        ((2, 4), (1, 4), (2, 1), 5, 8, 11, 3),           # lead dims broadcast
        ((1, 1, 2), (1, 1, 2), (1, 1, 2), 17, 16, 33, 16),
    ]
    for ql, kl, vl, s, d, t, dv in shapes:
        q = rng.standard_normal(ql + (s, d)).astype(f)
        kt = rng.standard_normal(kl + (d, t)).astype(f)
        v = rng.standard_normal(vl + (t, dv)).astype(f)
        lead = np.broadcast_shapes(ql, kl, vl)
        yield Node("FusedAttention", ["q", "k", "v"], ["y"], {}, "attn"), [q, kt, v], RT
        yield (Node("FusedAttention", ["q", "k", "v"], ["y"], {"scale": 0.37}, "attn"),
               [q * 3, kt, v], RT)
        for mshape in [(t,), (1, t), (s, t), lead[:-1] + (1, 1, t), lead + (s, t),
                       (lead[-1], 1, t)]:
            add = rng.standard_normal(mshape).astype(f) * 4
            add[..., 0] = -1e9  # a masked-out key, as BERT's (1 - mask) * -1e9
            yield (Node("FusedAttention", ["q", "k", "v", "m"], ["y"],
                        {"scale": 0.25, "mask_kind": "add"}, "attn"), [q, kt, v, add], RT)
            keep = rng.random(mshape) < 0.6
            keep[..., -1] = True  # never a fully masked row (that gives NaN, as unfused)
            yield (Node("FusedAttention", ["q", "k", "v", "m"], ["y"],
                        {"mask_kind": "bool"}, "attn"), [q, kt, v, keep], RT)
    # heads stored as (B, S, H, D) (the absorbed Transposes): q / v / y through perms, k_t
    # as a copy or also through its perm; MiniLM's 12 x 128 (per-head path) and a small one
    # (the stacked path), with a mask
    for b, s, h, d, t in ((1, 128, 12, 32, 128), (2, 5, 3, 4, 7)):
        q = rng.standard_normal((b, s, h, d)).astype(f)
        k = rng.standard_normal((b, t, h, d)).astype(f)
        v = rng.standard_normal((b, t, h, d)).astype(f)
        mask = (rng.standard_normal((b, 1, 1, t)) * 3).astype(f)
        heads = {"perm_q": [0, 2, 1, 3], "perm_v": [0, 2, 1, 3], "perm_y": [0, 2, 1, 3]}
        yield (Node("FusedAttention", ["q", "k", "v", "m"], ["y"], heads, "attn"),
               [q, np.ascontiguousarray(k.transpose(0, 2, 3, 1)), v, mask], RT)
        yield (Node("FusedAttention", ["q", "k", "v"], ["y"],
                    dict(heads, perm_k=[0, 2, 3, 1], scale=0.3), "attn"), [q, k, v], RT)
    # large scores: the row max must be subtracted; tiny: all probabilities ~ equal
    q = rng.standard_normal((1, 2, 6, 4)).astype(f)
    kt = rng.standard_normal((1, 2, 4, 10)).astype(f)
    v = rng.standard_normal((1, 2, 10, 4)).astype(f)
    for sc in (300.0, 1e-6):
        yield (Node("FusedAttention", ["q", "k", "v"], ["y"], {"scale": sc}, "attn"),
               [q, kt, v], RT)


def layernorm_cases():
    rng = np.random.default_rng(1)
    f = np.float32
    for shape, axis in [((1, 128, 384), -1), ((1, 40, 120), -1), ((2, 3, 5), 1),
                        ((7, 1), -1), ((3, 33), 1), ((4, 6, 10), 0), ((2, 9), -1)]:
        x = (rng.standard_normal(shape) * 3 + 5).astype(f)
        norm = shape[axis % len(shape):]
        scale = rng.standard_normal(norm).astype(f)
        bias = rng.standard_normal(norm).astype(f)
        for eps in (1e-5, 1e-12):
            attrs = {"axis": axis, "epsilon": eps, "stash_type": 1}
            yield (Node("LayerNormalization", ["x", "s", "b"], ["y"], attrs, "ln"),
                   [x, scale, bias])
        yield Node("LayerNormalization", ["x", "s"], ["y"], {"axis": axis}, "ln"), [x, scale]
        # scale and bias computed at run time
        yield (Node("LayerNormalization", ["x", "s", "b"], ["y"], {"axis": axis}, "ln"),
               [x, scale, bias], RT)
    x = np.full((3, 8), 2.5, f)  # constant rows: variance 0, y = bias
    yield (Node("LayerNormalization", ["x", "s", "b"], ["y"], {}, "ln"),
           [x, np.ones(8, f), np.arange(8, dtype=f)])


def rmsnorm_cases():
    rng = np.random.default_rng(4)
    f = np.float32
    for shape, axis in [((1, 8, 576), -1), ((1, 1, 576), -1), ((2, 3, 5), 1), ((7, 1), -1),
                        ((3, 33), -1), ((4, 6, 10), 0), ((2, 9), -1)]:
        x = (rng.standard_normal(shape) * 3 + 1).astype(f)
        scale = rng.standard_normal(shape[axis % len(shape):]).astype(f)
        for eps in (1e-5, 1e-12):
            attrs = {"axis": axis, "epsilon": eps, "stash_type": 1}
            yield Node("RMSNormalization", ["x", "s"], ["y"], attrs, "rms"), [x, scale]
        # scale computed at run time
        yield Node("RMSNormalization", ["x", "s"], ["y"], {"axis": axis}, "rms"), [x, scale], RT
    yield (Node("RMSNormalization", ["x", "s"], ["y"], {}, "rms"),   # zero rows: y = 0
           [np.zeros((3, 8), f), np.arange(8, dtype=f)])


def softmax_cases(op="Softmax"):
    rng = np.random.default_rng(2)
    f = np.float32
    for shape, attrs in [((1, 40, 6625), {"axis": 2, "coerce_2d": 1}),
                         ((1, 12, 128, 128), {"axis": -1}), ((3, 7), {}), ((5,), {"axis": 0}),
                         ((2, 3, 4, 5), {"axis": 1, "coerce_2d": 1}),
                         ((2, 3, 4), {"axis": 2}), ((4, 1), {"axis": -1}),
                         ((6, 9), {"axis": 0, "coerce_2d": 1})]:
        x = rng.standard_normal(shape).astype(f)
        yield Node(op, ["x"], ["y"], attrs, "sm"), [x * 10], RT
        yield Node(op, ["x"], ["y"], attrs, "sm"), [x * 1e-3 + 50], RT
    x = rng.standard_normal((4, 17)).astype(f)
    x[1, 3], x[2, :] = -np.inf, -1e30  # a -inf entry; a row of huge negatives
    x[3, 4] = 95.0  # exp would overflow without the max subtracted
    yield Node(op, ["x"], ["y"], {}, "sm"), [x], RT


def gelu_cases():
    rng = np.random.default_rng(3)
    f = np.float32
    # the error is absolute (|erf error| < 5e-7): relative to the largest output, as tested
    # here, it is tiny; per element, for x < -3 where 1 + erf cancels, neither the float32
    # reference nor any float32 erf is accurate to 1e-5
    for shape in [(1, 128, 1536), (7,), (3, 5, 9), (33,)]:
        x = (rng.standard_normal(shape) * 3).astype(f)
        yield Node("Gelu", ["x"], ["y"], {}, "gelu"), [x], RT
    x = np.array([-1e4, -9, -4, -3.9, -1e-7, 0, 1e-7, 3.9, 4, 9, 1e4], f)
    yield Node("Gelu", ["x"], ["y"], {"approximate": "none"}, "gelu"), [x], RT


CASES = {"FusedAttention": attention_cases, "LayerNormalization": layernorm_cases,
         "RMSNormalization": rmsnorm_cases,
         "Softmax": softmax_cases, "LogSoftmax": lambda: softmax_cases("LogSoftmax"),
         "Gelu": gelu_cases}
