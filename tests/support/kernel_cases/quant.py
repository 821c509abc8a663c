"""Kernel test cases for QConv and QGemm (the int8 spec): edge geometries, every epilogue
path (integer requantization with Relu / Clip; float path with a residual, each activation,
u8 or float32 output), 7-bit and 8-bit weights, per-tensor and per-channel weight scales.

Each generator yields (node, inputs, const_indices): everything but x / a (0) and the
residual z (9) is a plan-time constant, as fuse_qdq writes them. tests/kernels/int8/test_qkernels.py
runs the same cases on every code path (AVX2 / portable, u8 / int16) bit for bit.
"""
import itertools

import numpy as np

from edgenn.graph.ir import Node

CONST = frozenset(range(1, 12)) - {9}
# activation, params; the integer path takes "", Relu, Clip (with y_scale, no residual)
INT_ACTS = [("", []), ("Relu", []), ("Clip", [0.0, 6.0])]
FLOAT_ACTS = [("", []), ("Relu", []), ("Clip", [-1.0, 4.0]), ("HardSwish", []),
              ("HardSigmoid", [0.2, 0.5]), ("Sigmoid", []), ("SiLU", []), ("LeakyRelu", [0.1])]
TRANSCENDENTAL = ("Sigmoid", "SiLU", "Gelu")   # exp / erf: one output step allowed

# n, c, h, w, m, k, stride, pad, dilation, group
CONV_GEOMS = [
    (1, 3, 17, 13, 8, 3, 1, 1, 1, 1),        # K = 27 (tail of 4), N = 221 (tail of 8)
    (2, 5, 9, 9, 7, 3, 2, 1, 1, 1),          # batch 2, stride 2, M = 7 (tail of 6)
    (1, 16, 8, 8, 32, 1, 1, 0, 1, 1),        # 1x1 direct (K interleave only)
    (1, 17, 9, 7, 12, 1, 2, 0, 1, 1),        # 1x1 stride 2, K = 17
    (1, 1, 1, 1, 4, 1, 1, 0, 1, 1),          # one pixel, one channel
    (1, 4, 10, 10, 6, 5, 1, 2, 1, 1),        # 5x5
    (1, 4, 12, 11, 5, 3, 1, 2, 2, 1),        # dilation 2
    (1, 6, 7, 7, 3, 3, 3, 0, 1, 1),          # stride 3, no padding
    (1, 64, 7, 7, 70, 3, 1, 1, 1, 1),        # 7x7 spatial, K = 576
    (1, 130, 5, 6, 9, 3, 1, 1, 1, 1),        # K = 1170: two s16 chunks (255 groups each)
    (1, 4, 6, 6, 8, 3, 1, 1, 1, 2),          # grouped (group by group through the GEMM)
    (1, 4, 6, 6, 8, 3, 1, 1, 1, 4),          # channel multiplier 2 (group == C, M = 2C)
    (1, 64, 20, 20, 8, 3, 1, 1, 1, 1),       # N = 400 > one pixel block (K = 576)
    (1, 3, 20, 20, 5, 7, 2, 3, 1, 1),        # 7x7 stem-like, stride 2
    # depthwise: 3x3 / 5x5, stride 1 / 2, channel and pixel tails, dilation, 1x1 plane
    (1, 8, 15, 15, 8, 3, 1, 1, 1, 8), (2, 12, 14, 9, 12, 3, 2, 1, 1, 12),
    (1, 5, 11, 11, 5, 5, 2, 2, 1, 5), (1, 6, 19, 37, 6, 5, 1, 2, 1, 6),
    (1, 3, 9, 9, 3, 3, 1, 2, 2, 3), (1, 7, 1, 1, 7, 3, 1, 1, 1, 7),
    (1, 10, 13, 13, 10, 3, 2, 0, 2, 10), (1, 4, 7, 7, 4, 3, 1, 1, 1, 4),
    (1, 4, 40, 66, 4, 3, 2, 1, 1, 4), (2, 3, 18, 35, 3, 3, 1, 1, 1, 3),
    (1, 9, 6, 30, 9, 3, 1, 1, 1, 9),         # depthwise rows of 30 (the rows kernels' tails)
    (1, 3, 9, 12, 3, 5, 1, 2, 1, 3),         # depthwise 5x5 on a narrow plane (flat, any taps)
    (1, 2, 80, 12, 2, 3, 1, 1, 1, 2),        # narrow and tall: more flat vectors than fmask
    (1, 6, 17, 23, 6, 3, 2, 0, 1, 6),        # 3x3 stride 2, no padding, odd sides (u8 rows)
    (1, 5, 3, 16, 5, 3, 1, 1, 1, 5),         # rows of exactly 16 outputs, 3 rows (u8 rows)
    (1, 20, 9, 9, 20, 3, 1, 1, 1, 20),       # depthwise past 16 channels: a channel tail of 4
    (1, 36, 8, 18, 36, 3, 2, 1, 1, 36),      # two full 16-channel groups, stride 2
]


def is_depthwise(geom) -> bool:
    n, c, h, w, m, k, s, p, d, g = geom
    return g > 1 and g == c == m


def weight_values(rng, shape, bits: int) -> np.ndarray:
    """7-bit weights |q| <= 63 (our quantizer) or 8-bit [-128, 127] (imported models)."""
    lim = 63 if bits == 7 else 127
    return rng.integers(-lim - (bits == 8), lim, shape, endpoint=True).astype(np.int8)


def qconv_case(rng, geom, act="", params=(), y_quant=True, residual=False, bits=7,
               per_channel=True, bias=True, x=None, w=None, x_zp=None, dynamic=False,
               fbias=False, post=None):
    """-> (node, inputs, const_indices) for one QConv (inputs per the int8 spec); dynamic /
    fbias / post (the post_affine (s, b) attribute) as qgemm_case's."""
    n, c, h, wd, m, k, s, p, d, g = geom
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (wd + 2 * p - d * (k - 1) - 1) // s + 1
    x = rng.integers(0, 256, (n, c, h, wd), dtype=np.uint8) if x is None else x
    w = weight_values(rng, (m, c // g, k, k), bits) if w is None else w
    x_zp = int(rng.integers(0, 256)) if x_zp is None else x_zp
    w_scale = (rng.random(m) * 0.02 + 0.002).astype(np.float32) if per_channel \
        else np.array(np.float32(0.01))
    inputs = [x, np.array(np.float32(0.03)), np.array(np.uint8(x_zp)), w, w_scale,
              np.zeros(m if per_channel else (), np.int8)]
    if y_quant:
        inputs += [np.array(np.float32(rng.random() * 0.5 + 0.05)),
                   np.array(np.uint8(rng.integers(0, 256)))]
    else:
        inputs += [None, None]
    inputs.append(rng.integers(-3000, 3000, m).astype(np.int32) if bias else None)
    if residual:
        inputs += [rng.integers(0, 256, (n, m, oh, ow), dtype=np.uint8),
                   np.array(np.float32(0.07)), np.array(np.uint8(rng.integers(0, 256)))]
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                 group=g, auto_pad="NOTSET", activation=act, activation_params=list(params))
    return _finish("QConv", rng, inputs, attrs, m, dynamic, fbias, post)


def _finish(op, rng, inputs, attrs, channels, dynamic, fbias, post=None):
    """Optional float bias D (input 12) and run-time x_scale / x_zp (not constant)."""
    if post is not None:
        attrs["post_affine"] = list(post)
    if fbias:
        inputs += [None] * (12 - len(inputs)) + [
            (rng.standard_normal(channels) * 3).astype(np.float32)]
    if dynamic:
        inputs[1] = np.array(np.float32(rng.random() * 0.05 + 0.001))
    while inputs[-1] is None:
        inputs.pop()
    names = [f"i{i}" if v is not None else "" for i, v in enumerate(inputs)]
    const = set(CONST) | {12}
    if dynamic:
        const -= {1, 2}
    return Node(op, names, ["y"], attrs, op.lower()), inputs, const


def epilogue_variants():
    """(act, params, y_quant, residual): the integer path, then the float path."""
    for act, params in INT_ACTS:
        yield act, params, True, False
    for (act, params), residual in itertools.product(FLOAT_ACTS, (False, True)):
        yield act, params, True, residual
    for act, params in FLOAT_ACTS[::2]:
        yield act, params, False, False     # float32 output


def qconv_cases(all_variants: bool = False):
    """Every geometry with a rotating epilogue (all of them with all_variants), 7- and
    8-bit weights, plus the saturating corner."""
    rng = np.random.default_rng(10)
    variants = list(epilogue_variants())
    for i, geom in enumerate(CONV_GEOMS):
        chosen = variants if all_variants else [variants[i % len(variants)],
                                                variants[(i * 7 + 3) % len(variants)]]
        for j, (act, params, yq, res) in enumerate(chosen):
            yield qconv_case(rng, geom, act, params, yq, res, bits=8 if (i + j) % 3 == 0 else 7,
                             per_channel=(i + j) % 4 != 1, bias=(i + j) % 5 != 2)
    # u8 outputs through exp (the kernels' "_exp" specs): group-1, grouped and depthwise
    some = [g for g in CONV_GEOMS if not is_depthwise(g)][::3] + \
        [g for g in CONV_GEOMS if is_depthwise(g)][::2]
    for i, (geom, act) in enumerate(zip(some, itertools.cycle(("Sigmoid", "SiLU")))):
        yield qconv_case(rng, geom, act, (), True, i % 2 == 0, bits=8 if i % 3 else 7)
    yield saturating_conv_case(rng)
    # PP-OCR's learnable affine blocks: v * s + b after the activation (float path), u8 and
    # float outputs, group-1 and depthwise
    for i, geom in enumerate(CONV_GEOMS[::2]):
        yield qconv_case(rng, geom, ("HardSwish", "Relu", "")[i % 3], (), i % 4 != 3,
                         post=(1.0 + 0.37 * i, 0.25 - 0.1 * i), bits=8 if i % 2 else 7)
    # pruned int8 weights (80% zeros): the sparse fp32 kernels run them (the *_f32 specs)
    for i, geom in enumerate([(1, 16, 8, 8, 32, 1, 1, 0, 1, 1), (1, 8, 9, 9, 12, 3, 1, 1, 1, 1),
                              (2, 24, 7, 7, 40, 1, 1, 0, 1, 1), (1, 6, 10, 10, 16, 3, 1, 0, 1, 1),
                              (1, 9, 5, 13, 6, 1, 1, 0, 1, 1), (1, 5, 11, 7, 6, 3, 1, 2, 2, 1),
                              (1, 32, 3, 3, 8, 1, 1, 0, 1, 1), (1, 4, 6, 6, 8, 5, 1, 2, 1, 1)]):
        n, c, h, wd, m, k = geom[:6]
        w = weight_values(rng, (m, c, k, k), 7)
        w[rng.random(w.shape) < 0.8] = 0
        yield qconv_case(rng, geom, ("Relu", "", "Clip")[i % 3],
                         [0.0, 6.0] if i % 3 == 2 else (), False, i % 2 == 1, w=w)
    # onnxruntime's quantize_dynamic form (ConvInteger): run-time x_scale / x_zp, float
    # output, float bias; group-1 (padded, strided, 1x1 direct), grouped and depthwise
    for i, geom in enumerate(CONV_GEOMS):
        yield qconv_case(rng, geom, ("", "Relu", "HardSwish")[i % 3], (), False,
                         bits=8 if i % 2 else 7, per_channel=i % 3 != 0, bias=i % 4 == 3,
                         dynamic=True, fbias=i % 4 != 1)


def saturating_conv_case(rng, geom=(1, 8, 6, 6, 7, 3, 1, 1, 1, 1), act=""):
    """8-bit weights at -128 / 127 in same-signed pairs and activations of 255 (x_zp 0):
    vpmaddubsw would saturate (255 * 254 > 32767); the kernel must take the exact path."""
    n, c, h, wd, m, k, s, p, d, g = geom
    x = np.full((n, c, h, wd), 255, np.uint8)
    x[..., ::3, ::2] = rng.integers(200, 256, x[..., ::3, ::2].shape, dtype=np.uint8)
    w = np.where(rng.random((m, c // g, k, k)) < 0.5, -128, 127).astype(np.int8)
    w[::2] = -128
    w[1::3] = 127
    return qconv_case(rng, geom, act, (), True, False, x=x, w=w, x_zp=0)


def qgemm_case(rng, lead, k, n, act="", params=(), y_quant=True, residual=False, bits=7,
               per_channel=True, bias=True, a=None, b=None, a_zp=None, dynamic=False,
               fbias=False, post=None):
    """dynamic: a_scale / a_zp are run-time inputs (DynamicQuantizeLinear's outputs);
    fbias: the float bias D (float output only); post: post_affine (s, b)."""
    a = rng.integers(0, 256, lead + (k,), dtype=np.uint8) if a is None else a
    b = weight_values(rng, (k, n), bits) if b is None else b
    a_zp = int(rng.integers(0, 256)) if a_zp is None else a_zp
    b_scale = (rng.random(n) * 0.02 + 0.002).astype(np.float32) if per_channel \
        else np.array(np.float32(0.01))
    inputs = [a, np.array(np.float32(0.03)), np.array(np.uint8(a_zp)), b, b_scale,
              np.zeros(n if per_channel else (), np.int8)]
    if y_quant:
        inputs += [np.array(np.float32(rng.random() * 0.5 + 0.05)),
                   np.array(np.uint8(rng.integers(0, 256)))]
    else:
        inputs += [None, None]
    inputs.append(rng.integers(-3000, 3000, n).astype(np.int32) if bias else None)
    if residual:
        inputs += [rng.integers(0, 256, lead + (n,), dtype=np.uint8),
                   np.array(np.float32(0.07)), np.array(np.uint8(rng.integers(0, 256)))]
    attrs = dict(activation=act, activation_params=list(params))
    return _finish("QGemm", rng, inputs, attrs, n, dynamic, fbias, post)


# leading dims (rows), K, N: M = 1 (row kernel), 7 (one 6-row panel + a row), K and N tails
GEMM_SHAPES = [((1,), 1, 1), ((5,), 17, 3), ((2, 7), 16, 33), ((3, 4, 5), 8, 8),
               ((1,), 300, 70), ((13,), 70, 40), ((7,), 1100, 9), ((2, 3), 64, 100),
               ((130,), 1100, 9)]   # rows past one packed A block


def qgemm_cases(all_variants: bool = False):
    rng = np.random.default_rng(11)
    variants = list(epilogue_variants()) + [("Gelu", [], True, False), ("Gelu", [], False, False)]
    for i, (lead, k, n) in enumerate(GEMM_SHAPES):
        chosen = variants if all_variants else [variants[(i * 3 + s) % len(variants)]
                                                for s in range(3)]
        for j, (act, params, yq, res) in enumerate(chosen):
            yield qgemm_case(rng, lead, k, n, act, params, yq, res,
                             bits=8 if (i + j) % 3 == 0 else 7,
                             per_channel=(i + j) % 4 != 1, bias=(i + j) % 5 != 2)
    for i, act in enumerate(("Sigmoid", "SiLU", "Gelu", "Sigmoid")):
        lead, k, n = GEMM_SHAPES[i + 1]
        yield qgemm_case(rng, lead, k, n, act, (), True, i % 2 == 1)
    # run-time scale with a uint8 residual, float output
    yield qgemm_case(rng, (7,), 40, 16, "Relu", (), False, residual=True, dynamic=True,
                     fbias=True)
    for i, (lead, k, n) in enumerate(GEMM_SHAPES[::3]):   # post affine
        yield qgemm_case(rng, lead, k, n, ("HardSwish", "Relu")[i % 2], (), i % 2 == 0,
                         post=(0.8 + 0.2 * i, -0.3 + 0.2 * i))
    # onnxruntime's quantize_dynamic form: run-time a_scale / a_zp, float output, float bias,
    # 8-bit (wide path) and 7-bit weights, with and without a fused activation
    for i, (lead, k, n) in enumerate(GEMM_SHAPES):
        act = ("", "Gelu", "Relu")[i % 3]
        yield qgemm_case(rng, lead, k, n, act, (), False, bits=8 if i % 2 else 7,
                         per_channel=i % 3 != 0, bias=i % 4 == 3, dynamic=True,
                         fbias=i % 4 != 1)
    # pruned int8 weights (80% zeros): the sparse fp32 FC kernels run them (spmv_*_f32 for
    # <= 8 rows, spgemm_*_f32 in tiles of 8 .. 64 rows), u8 and float outputs
    for i, ((lead, k, n), yq) in enumerate(itertools.product(
            [((1,), 40, 24), ((3,), 33, 17), ((7,), 64, 9), ((2, 9), 31, 16), ((40,), 64, 20),
             ((70,), 33, 5), ((130,), 20, 12)], (True, False))):
        b = weight_values(rng, (k, n), 7)
        b[rng.random(b.shape) < 0.8] = 0
        act = ("Relu", "", "Clip")[i % 3]
        yield qgemm_case(rng, lead, k, n, act, [0.0, 6.0] if act == "Clip" else (), yq,
                         per_channel=i % 2 == 0, b=b)
    # saturating corner: 8-bit extremes against a = 255
    a = np.full((3, 40), 255, np.uint8)
    b = np.where(rng.random((40, 11)) < 0.5, -128, 127).astype(np.int8)
    b[::2] = -128
    yield qgemm_case(rng, (3,), 40, 11, a=a, b=b, a_zp=0)


def qgather_cases():
    """Quantized embedding tables: int8 per row and int4 in blocks of 32 (rows padded when
    the dim is not a multiple), indices of every rank, negative, int32 and int64."""
    from edgenn.graph.codecs import encode
    rng = np.random.default_rng(12)
    for (rows, dim), bits, idx_shape, dtype in itertools.product(
            [(7, 5), (50, 32), (33, 70)], (8, 4), [(), (4,), (2, 3)], (np.int64, np.int32)):
        coded = encode(rng.standard_normal((rows, dim)).astype(np.float32), 0, bits,
                       fit="maxabs")
        idx = rng.integers(-rows, rows, idx_shape).astype(dtype)
        attrs = {"bits": bits, "block": int(coded["meta"]["block"]), "dim": dim}
        yield Node("QGather", ["q", "s", "i"], ["y"], attrs, "qgather"), \
            [coded["q"].reshape(rows, -1), coded["scale"], idx], {0, 1}


CASES = {"QConv": qconv_cases, "QGemm": qgemm_cases, "QGather": qgather_cases}
