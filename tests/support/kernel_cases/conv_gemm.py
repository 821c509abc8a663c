"""Kernel test cases for Conv, Gemm and MatMul: edge geometries and every fused epilogue."""
import itertools

import numpy as np

from edgenn.graph.ir import Node

ACTS = [("", []), ("Relu", []), ("Clip", [0.0, 6.0]), ("HardSwish", []),
        ("HardSigmoid", [0.2, 0.5]), ("Sigmoid", []), ("SiLU", []), ("LeakyRelu", [0.1]),
        ("Gelu", [])]
# attribute extremes every fused epilogue must honour: alpha > 1 and < 0 (max(y, alpha y)
# would be wrong), a Clip range below zero, a decreasing HardSigmoid
EXTREME_ACTS = [("LeakyRelu", [2.0]), ("LeakyRelu", [-0.5]), ("Clip", [-1.0, -0.25]),
                ("HardSigmoid", [-0.3, 0.6])]


def conv_cases():
    rng = np.random.default_rng(0)
    geoms = [  # n, c, h, w, m, k, stride, pad, dil, group
        (1, 3, 17, 13, 8, 3, 1, 1, 1, 1), (2, 5, 9, 9, 7, 3, 2, 1, 1, 1),
        (1, 16, 8, 8, 32, 1, 1, 0, 1, 1), (1, 16, 9, 7, 12, 1, 2, 0, 1, 1),
        (1, 1, 1, 1, 4, 1, 1, 0, 1, 1), (1, 4, 10, 10, 6, 5, 1, 2, 1, 1),
        (1, 4, 12, 11, 4, 3, 1, 2, 2, 1), (1, 6, 7, 7, 3, 3, 3, 0, 1, 1),
        (1, 8, 15, 15, 8, 3, 1, 1, 1, 8), (2, 12, 14, 9, 12, 3, 2, 1, 1, 12),
        (1, 5, 11, 11, 5, 5, 2, 2, 1, 5), (1, 3, 9, 9, 3, 3, 1, 2, 2, 3),
        (1, 7, 1, 1, 7, 3, 1, 1, 1, 7), (1, 4, 6, 6, 8, 3, 1, 1, 1, 2),
        # depthwise: channel and pixel tails past 8, 5x5 s2, 7x7, 1x1, dilation with stride
        (1, 17, 23, 37, 17, 3, 1, 1, 1, 17), (2, 9, 20, 19, 9, 5, 2, 2, 1, 9),
        (1, 10, 13, 13, 10, 3, 2, 0, 2, 10), (1, 16, 30, 30, 16, 7, 1, 3, 1, 16),
        (1, 24, 9, 9, 24, 1, 1, 0, 1, 24),
        # small planes (flat pack / unpack of _dwc8.h: W < 8): 7x7 with a channel tail,
        # 4x4 s2, 9x6 s2 batch 2 (a 5x3 output), a plane under 8 pixels (row-wise path)
        (1, 20, 7, 7, 20, 3, 1, 1, 1, 20), (1, 9, 4, 4, 9, 3, 2, 1, 1, 9),
        (2, 11, 9, 6, 11, 3, 2, 1, 1, 11),
        (1, 9, 2, 3, 9, 3, 1, 1, 1, 9),
        # 16 lanes (depthwise_c16): a 14x14 plane and 7x7 output flat with a channel tail,
        # full groups on rows past 16 (stride 2, the tail block overlapping), 5x5 on
        # 16-wide rows, a plane of 15 pixels under 16 columns (row-wise, scalar rows)
        (1, 40, 14, 14, 40, 3, 1, 1, 1, 40), (1, 33, 13, 13, 33, 3, 2, 1, 1, 33),
        (1, 32, 20, 37, 32, 3, 2, 1, 1, 32), (1, 48, 17, 16, 48, 5, 1, 2, 1, 48),
        (1, 18, 3, 5, 18, 3, 1, 1, 1, 18),
        # tall narrow planes (the rows split: >= 8 output rows a thread; flat bands of
        # W < 16), stride 1 and 2
        (1, 20, 34, 7, 20, 3, 1, 1, 1, 20), (1, 19, 40, 12, 19, 3, 2, 1, 1, 19),
        # 1x1 convs narrowing >= 2x (projections: threads may split K), K tails past 16
        (1, 96, 7, 7, 16, 1, 1, 0, 1, 1), (2, 70, 9, 11, 24, 1, 1, 0, 1, 1),
        (1, 40, 5, 5, 17, 1, 1, 0, 1, 1),
        # 3x3 stride 1 (Winograd): sizes no tile divides, one channel, batch 2, pads 0/1/2
        (2, 1, 11, 7, 5, 3, 1, 0, 1, 1), (1, 2, 2, 3, 3, 3, 1, 2, 1, 1),
        (2, 4, 9, 14, 6, 3, 1, 1, 1, 1), (1, 5, 3, 4, 6, 3, 1, 0, 1, 1),
    ]
    for (n, c, h, w, m, k, s, p, d, g), (act, params), residual in itertools.product(
            geoms, ACTS[:4], (False, True)):
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                     group=g, auto_pad="NOTSET", activation=act, activation_params=params)
        oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
        inputs = [x, wt, b]
        if residual:
            inputs.append(rng.standard_normal((n, m, oh, ow)).astype(np.float32))
        yield Node("Conv", ["x", "w", "b", "z"][:len(inputs)], ["y"], attrs, "conv"), inputs
    for gi, (act, params) in itertools.product((0, 2, 8, 19), EXTREME_ACTS):
        n, c, h, w, m, k, s, p, d, g = geoms[gi]   # 3x3, 1x1 in place, depthwise, Winograd
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                     group=g, auto_pad="NOTSET", activation=act, activation_params=params)
        yield Node("Conv", ["x", "w", "b"], ["y"], attrs, "conv"), \
            [x, wt, rng.standard_normal(m).astype(np.float32)]
    yield from sparse_conv_cases(rng)
    yield from first_layer_cases(rng)
    for gi in (0, 2, 3, 21):   # per-channel PRelu (sgemm epilogue): 3x3, 1x1 in place, stride 2
        n, c, h, w, m, k, s, p, d, g = geoms[gi]
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                     group=g, auto_pad="NOTSET", activation="PRelu",
                     activation_params=prelu_slopes(rng, m))
        inputs = [rng.standard_normal((n, c, h, w)).astype(np.float32),
                  rng.standard_normal((m, c // g, k, k)).astype(np.float32),
                  rng.standard_normal(m).astype(np.float32)]
        oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
        inputs.append(rng.standard_normal((n, m, oh, ow)).astype(np.float32))
        yield Node("Conv", ["x", "w", "b", "z"], ["y"], attrs, "conv"), inputs
    for act, params in ACTS[4:]:  # the remaining activations on one geometry
        x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
        wt = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
        attrs = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4, dilations=[1, 1],
                     group=1, auto_pad="NOTSET", activation=act, activation_params=params)
        yield Node("Conv", ["x", "w"], ["y"], attrs, "conv"), [x, wt]


# pruned weights (the sparse kernels, from 50% zeros): 1x1 around the 32 / 64-pixel tiles,
# KxK with pads, dilation and SAME, stride 1 and strided (the stride-phase planes);
# n, c, h, w, m, k, pad, dil, stride
SPARSE_GEOMS = [(1, 16, 8, 8, 32, 1, 0, 1, 1), (2, 24, 7, 7, 40, 1, 0, 1, 1),
                (1, 9, 5, 13, 6, 1, 0, 1, 1), (1, 8, 9, 9, 12, 3, 1, 1, 1),
                (2, 5, 11, 7, 6, 3, 2, 2, 1), (1, 4, 6, 6, 8, 5, 2, 1, 1),
                (1, 6, 10, 10, 16, 3, 0, 1, 1), (1, 8, 14, 14, 16, 3, 1, 1, 2),
                (2, 5, 9, 12, 6, 3, 1, 1, 2), (1, 6, 11, 11, 8, 1, 0, 1, 2)]


# few input channels (conv_direct): CRNN / MobileNet / ResNet stems, gray, ragged output
# channels (13, 20: no tile divides), widths past one 48-pixel tile, stride 2 with odd
# sizes, 1x1, rectangular kernels, asymmetric pads and SAME_UPPER / SAME_LOWER / VALID
# n, c, h, w, m, (kh, kw), (sh, sw), pads (t, l, b, r) or auto_pad
FIRST_LAYER_GEOMS = [
    (1, 3, 32, 256, 32, (3, 3), (1, 1), (1, 1, 1, 1)), (1, 3, 33, 35, 32, (3, 3), (2, 2), (1, 1, 1, 1)),
    (2, 3, 23, 29, 64, (7, 7), (2, 2), (3, 3, 3, 3)), (1, 1, 16, 50, 13, (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 8, 12, 100, 20, (5, 5), (2, 2), (2, 2, 2, 2)), (1, 2, 9, 9, 7, (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 3, 5, 6, 9, (3, 3), (2, 2), (0, 0, 0, 0)), (1, 4, 10, 61, 24, (1, 7), (1, 2), (0, 3, 0, 3)),
    (1, 3, 17, 19, 16, (3, 3), (2, 1), (0, 1, 2, 0)), (1, 3, 20, 20, 8, (3, 3), (2, 2), "SAME_UPPER"),
    (1, 3, 21, 22, 12, (4, 4), (2, 2), "SAME_LOWER"), (1, 3, 15, 49, 40, (3, 3), (1, 1), "VALID"),
]


def prelu_slopes(rng, m):
    """Per-channel PRelu slopes: negative, zero, one, above one, ordinary."""
    s = rng.standard_normal(m) * 0.5
    s[: min(m, 4)] = [-0.7, 0.0, 1.0, 2.5][: min(m, 4)]
    return [float(v) for v in s]


def first_layer_cases(rng):
    for (n, c, h, w, m, k, s, pads), (act, params) in itertools.product(
            FIRST_LAYER_GEOMS, [ACTS[0], ACTS[1], ACTS[2], EXTREME_ACTS[2], ("PRelu", None)]):
        if act == "PRelu":
            params = prelu_slopes(rng, m)
        attrs = dict(kernel_shape=list(k), strides=list(s), dilations=[1, 1], group=1,
                     activation=act, activation_params=params)
        if isinstance(pads, str):
            attrs["auto_pad"] = pads
        else:
            attrs.update(auto_pad="NOTSET", pads=list(pads))
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c, *k)).astype(np.float32)
        yield Node("Conv", ["x", "w", "b"], ["y"], attrs, "conv"), \
            [x, wt, rng.standard_normal(m).astype(np.float32)]
    x = rng.standard_normal((1, 3, 12, 40)).astype(np.float32)       # no bias
    yield Node("Conv", ["x", "w"], ["y"], dict(kernel_shape=[3, 3], strides=[1, 1],
                                               pads=[1, 1, 1, 1]), "conv"), \
        [x, rng.standard_normal((10, 3, 3, 3)).astype(np.float32)]


def pruned(rng, shape, zeros=0.8):
    """Weights with `zeros` of them zero, one output channel empty and one full."""
    w = rng.standard_normal(shape).astype(np.float32)
    w[rng.random(shape) < zeros] = 0
    w[0] = 0
    w[-1] = rng.standard_normal(shape[1:])
    return w


def sparse_conv_cases(rng):
    for (n, c, h, w, m, k, p, d, s), (act, params), residual in itertools.product(
            SPARSE_GEOMS, ACTS[:3] + [EXTREME_ACTS[2]], (False, True)):
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[d, d],
                     group=1, auto_pad="NOTSET", activation=act, activation_params=params)
        oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
        inputs = [x, pruned(rng, (m, c, k, k)), rng.standard_normal(m).astype(np.float32)]
        if residual:
            inputs.append(rng.standard_normal((n, m, oh, ow)).astype(np.float32))
        yield Node("Conv", ["x", "w", "b", "z"][:len(inputs)], ["y"], attrs, "conv"), inputs
    x = rng.standard_normal((1, 6, 9, 8)).astype(np.float32)     # SAME_UPPER, no bias
    attrs = dict(kernel_shape=[3, 3], strides=[1, 1], auto_pad="SAME_UPPER", group=1,
                 dilations=[1, 1], activation="Relu", activation_params=[])
    yield Node("Conv", ["x", "w"], ["y"], attrs, "conv"), [x, pruned(rng, (5, 6, 3, 3))]
    from edgenn.compress.prune import pattern_mask     # output channels pruned in pairs
    for stride, m in ((1, 12), (2, 9)):
        w = rng.standard_normal((m, 8, 3, 3)).astype(np.float32)
        w *= pattern_mask(w, 4, 4, 0.5, pairs=True)[0]
        attrs = dict(kernel_shape=[3, 3], strides=[stride] * 2, pads=[1] * 4, group=1,
                     dilations=[1, 1], auto_pad="NOTSET", activation="", activation_params=[])
        yield Node("Conv", ["x", "w", "b"], ["y"], attrs, "conv"), \
            [rng.standard_normal((1, 8, 13, 11)).astype(np.float32), w,
             rng.standard_normal(m).astype(np.float32)]


def gemm_cases():
    rng = np.random.default_rng(1)
    for (lead, k, n), trans_b, (act, params) in itertools.product(
            [((1,), 1, 1), ((5,), 17, 3), ((2, 7), 16, 33), ((3, 4, 5), 8, 8)],
            (0, 1), ACTS[::2]):
        a = rng.standard_normal(lead + (k,)).astype(np.float32)
        b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
        c = rng.standard_normal(n).astype(np.float32)
        attrs = dict(alpha=0.7, beta=1.3, transA=0, transB=trans_b, activation=act,
                     activation_params=params)
        yield Node("Gemm", ["a", "b", "c"], ["y"], attrs, "gemm"), [a, b, c]
    for act, params in EXTREME_ACTS:
        attrs = dict(alpha=1.0, beta=1.0, transA=0, transB=0, activation=act,
                     activation_params=params)
        yield Node("Gemm", ["a", "b", "c"], ["y"], attrs, "gemm"), [
            rng.standard_normal((7, 20)).astype(np.float32),
            rng.standard_normal((20, 33)).astype(np.float32),
            rng.standard_normal(33).astype(np.float32)]
    # wide outputs (the threaded kernels split them: >= 4 column panels), a batch-1
    # classifier, a ragged last panel, leading dims, a residual Z
    for (lead, k, n), trans_b, (act, params) in itertools.product(
            [((1,), 40, 1000), ((3,), 17, 65), ((2, 5), 33, 97), ((1,), 300, 64)], (0, 1),
            ACTS[:3]):
        attrs = dict(alpha=0.7, beta=1.3, transA=0, transB=trans_b, activation=act,
                     activation_params=params)
        inputs = [rng.standard_normal(lead + (k,)).astype(np.float32),
                  rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32),
                  rng.standard_normal(n).astype(np.float32)]
        if trans_b:
            inputs.append(rng.standard_normal(lead + (n,)).astype(np.float32))
        yield Node("Gemm", ["a", "b", "c", "z"][:len(inputs)], ["y"], attrs, "gemm"), inputs
    a = rng.standard_normal((6, 4)).astype(np.float32)  # transA, no C
    yield Node("Gemm", ["a", "b"], ["y"], dict(alpha=1.0, beta=1.0, transA=1, transB=0),
               "gemm"), [a, rng.standard_normal((6, 3)).astype(np.float32)]
    yield from sparse_gemm_cases(rng)


# pruned weights (the sparse FC kernels): rows for spmv (<= 8) and every tile width (8 ..
# 64 rows, partial last tiles), K past the 8 / 16-nonzero gathers; leading dims, K, N
SPARSE_FC = [((1,), 33, 17), ((3,), 40, 24), ((7,), 17, 9), ((2, 9), 31, 16),
             ((40,), 64, 20), ((70,), 33, 5), ((130,), 20, 12)]


def sparse_gemm_cases(rng):
    """C as a bias row, a scalar or none; Z on some; Relu / Clip (also below zero)."""
    for i, ((lead, k, n), trans_b, (act, params)) in enumerate(itertools.product(
            SPARSE_FC, (0, 1), ACTS[:3] + [EXTREME_ACTS[2]])):
        a = rng.standard_normal(lead + (k,)).astype(np.float32)
        b = pruned(rng, (n, k) if trans_b else (k, n))
        c = [rng.standard_normal(n).astype(np.float32), np.float32(0.5), None][i % 3]
        attrs = dict(alpha=0.7, beta=1.3, transA=0, transB=trans_b, activation=act,
                     activation_params=params)
        inputs = [a, b, c] + ([rng.standard_normal(lead + (n,)).astype(np.float32)]
                              if i % 2 else [])
        yield Node("Gemm", ["a", "b", "c" if c is not None else "", "z"][:len(inputs)], ["y"],
                   attrs, "gemm"), inputs


def matmul_cases():
    rng = np.random.default_rng(2)
    for sa, sb in [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((2, 1, 3, 4), (5, 4, 2)),
                   ((1, 12, 16, 32), (1, 12, 32, 16))]:
        yield Node("MatMul", ["a", "b"], ["y"], {}, "mm"), [
            rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)]
    for lead, k, n in SPARSE_FC + [((), 33, 17), ((4, 16), 17, 9), ((5,), 16, 16)]:  # pruned W
        yield Node("MatMul", ["a", "b"], ["y"], {}, "mm"), [
            rng.standard_normal(lead + (k,)).astype(np.float32), pruned(rng, (k, n))]


CASES = {"Conv": conv_cases, "Gemm": gemm_cases, "MatMul": matmul_cases}
