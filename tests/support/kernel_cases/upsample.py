"""Kernel test cases for Resize (nearest / linear / cubic, every coordinate transform but
tf_crop_and_resize, integer and fractional scales, sizes, down-sampling, antialias, batch 2,
odd sizes), ConvTranspose (2x2/s2 tiling, overlapping 3x3/s2 and 4x4/s2 with pads,
output_padding, dilation, bias, batch 2) and Concat (every axis, batch 2, one input)."""
import itertools

import numpy as np

from edgenn.graph.ir import Node

F = np.float32


def _resize_cases():
    rng = np.random.default_rng(11)
    ctms = ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
            "half_pixel_symmetric", "tf_half_pixel_for_nn")
    shapes = [(1, 3, 5, 7), (2, 4, 6, 6), (1, 1, 1, 9), (1, 16, 12, 24)]
    scale_sets = [(1, 1, 2, 2), (1, 1, 4, 4), (1, 1, 8, 8), (1, 1, 2, 3), (1, 1, 1.5, 0.6),
                  (1, 1, 0.5, 0.5)]
    for shape, sc in itertools.product(shapes, scale_sets):
        x = rng.standard_normal(shape).astype(F)
        scales = np.array(sc, F)
        for mode, ctm in itertools.product(("nearest", "linear"), ctms):
            if mode == "linear" and ctm == "tf_half_pixel_for_nn":
                continue
            attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
            nms = ("floor", "round_prefer_floor", "round_prefer_ceil", "ceil") \
                if mode == "nearest" and ctm == "asymmetric" else (None,)
            for nm in nms:
                a = dict(attrs) if nm is None else dict(attrs, nearest_mode=nm)
                yield Node("Resize", ["x", "", "s", ""], ["y"], a, "rs"), \
                    [x, None, scales, None], {2}
    # sizes instead of scales; cubic; antialias down-sampling; a resized channel axis
    x = rng.standard_normal((2, 3, 9, 11)).astype(F)
    for mode in ("nearest", "linear", "cubic"):
        sizes = np.array([2, 3, 17, 6], np.int64)
        yield Node("Resize", ["x", "", "", "z"], ["y"], dict(mode=mode), "rs"), \
            [x, None, None, sizes], {3}
        yield Node("Resize", ["x", "", "s"], ["y"], dict(mode=mode, antialias=1), "rs"), \
            [x, None, np.array([1, 1, 0.4, 0.7], F)], {2}
        yield Node("Resize", ["x", "", "s"], ["y"], dict(mode=mode), "rs"), \
            [x, None, np.array([1, 2, 2, 1], F)], {2}
    # identity
    yield Node("Resize", ["x", "", "s"], ["y"], dict(mode="linear"), "rs"), \
        [x, None, np.ones(4, F)], {2}


def _convtranspose_cases():
    rng = np.random.default_rng(12)
    # n, c, h, w, m, k, stride, pads, output_padding, dilation, bias
    geoms = [
        (1, 24, 48, 96, 24, 2, 2, (0, 0, 0, 0), (0, 0), 1, False),   # DB head
        (2, 5, 7, 9, 3, 2, 2, (0, 0, 0, 0), (0, 0), 1, True),
        (1, 1, 1, 1, 1, 2, 2, (0, 0, 0, 0), (0, 0), 1, True),
        (1, 6, 5, 5, 4, 3, 3, (0, 0, 0, 0), (0, 0), 1, False),
        (1, 8, 6, 7, 5, 3, 2, (1, 1, 1, 1), (1, 1), 1, True),      # overlapping taps
        (2, 4, 5, 4, 6, 4, 2, (1, 1, 1, 1), (0, 0), 1, True),
        (1, 3, 6, 6, 2, 3, 1, (0, 1, 2, 0), (0, 0), 2, False),     # dilation, asym pads
        (1, 7, 3, 8, 3, 2, 2, (1, 0, 0, 1), (0, 1), 1, True),      # cropped tiling
    ]
    for n, c, h, w, m, k, s, pads, opad, d, bias in geoms:
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=list(pads),
                     output_padding=list(opad), dilations=[d, d], group=1)
        x = rng.standard_normal((n, c, h, w)).astype(F)
        wt = rng.standard_normal((c, m, k, k)).astype(F)
        ins = [x, wt] + ([rng.standard_normal(m).astype(F)] if bias else [])
        names = ["x", "w", "b"][:len(ins)]
        yield Node("ConvTranspose", names, ["y"], attrs, "ct"), ins, {1, 2}
    # output_shape attribute
    x = rng.standard_normal((1, 3, 4, 5)).astype(F)
    yield Node("ConvTranspose", ["x", "w"], ["y"], dict(strides=[2, 2], output_shape=[9, 11]),
               "ct"), [x, rng.standard_normal((3, 2, 3, 3)).astype(F)], {1}


def _concat_cases():
    rng = np.random.default_rng(13)
    for axis in (0, 1, 2, 3, -1):
        shapes = [[2, 3, 4, 5] for _ in range(3)]
        for k, s in enumerate(shapes):
            s[axis] += k
        xs = [rng.standard_normal(s).astype(F) for s in shapes]
        yield Node("Concat", ["a", "b", "c"], ["y"], dict(axis=axis), "cat"), xs, set()
    yield Node("Concat", ["a"], ["y"], dict(axis=1), "cat"), \
        [rng.standard_normal((1, 7, 3)).astype(F)], set()
    yield Node("Concat", ["a", "b"], ["y"], dict(axis=0), "cat"), \
        [rng.standard_normal(4).astype(F), rng.standard_normal(3).astype(F)], set()


CASES = {"Resize": _resize_cases, "ConvTranspose": _convtranspose_cases,
         "Concat": _concat_cases}
