"""Per-kernel throughput on real layer shapes, every capable registered kernel forced,
next to OpenBLAS sgemm (np.matmul) on the equivalent GEMM. GFLOP/s = direct-conv FLOPs /
median time, in `extra_info`.

    python -m pytest bench/test_bench_kernels.py --benchmark-columns=median \
        --benchmark-group-by=param:layer
"""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.oplist import load_kernels
from edgenn.registry import KERNELS, TensorInfo

load_kernels()
# name: (c, h, w, m, k, stride, pad, group)  -- ResNet-18, MobileNetV2, PP-OCR layers
LAYERS = {
    "r18_3x3_64x56": (64, 56, 56, 64, 3, 1, 1, 1),
    "r18_3x3_128x28": (128, 28, 28, 128, 3, 1, 1, 1),
    "r18_3x3_256x14": (256, 14, 14, 256, 3, 1, 1, 1),
    "r18_3x3_512x7": (512, 7, 7, 512, 3, 1, 1, 1),
    "r18_7x7_stem": (3, 224, 224, 64, 7, 2, 3, 1),
    "mv2_1x1_16to96x112": (16, 112, 112, 96, 1, 1, 0, 1),
    "mv2_1x1_144to24x56": (144, 56, 56, 24, 1, 1, 0, 1),
    "mv2_1x1_960to160x7": (960, 7, 7, 160, 1, 1, 0, 1),
    "mv2_dw_144x56": (144, 56, 56, 144, 3, 1, 1, 144),
    "mv2_dw_96x112_s2": (96, 112, 112, 96, 3, 2, 1, 96),
}


def conv_case(c, h, w, m, k, s, p, g):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = Node("Conv", ["x", "w", "b"], ["y"],
                dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[1, 1],
                     group=g, auto_pad="NOTSET", activation="Relu", activation_params=[]),
                "conv")
    ins = [TensorInfo("float32", x.shape), TensorInfo.of(wt), TensorInfo.of(b)]
    outs = infer_node(node, ins, fold=False)
    flops = 2 * int(np.prod(outs[0].shape)) * (c // g) * k * k
    return node, ins, outs, [x, wt, b], flops


def _candidates():
    for layer, geom in LAYERS.items():
        node, ins, outs, _, _ = conv_case(*geom)
        for spec in KERNELS.get("Conv", []):
            if spec.supports(node, ins, outs):
                yield pytest.param(layer, spec.name, id=f"{layer}-{spec.name}")
        if geom[-1] == 1:
            yield pytest.param(layer, "openblas_sgemm", id=f"{layer}-openblas_sgemm")


@pytest.mark.parametrize("layer,kernel", list(_candidates()))
def test_conv_kernel(benchmark, layer, kernel):
    node, ins, outs, inputs, flops = conv_case(*LAYERS[layer])
    out = np.empty(outs[0].shape, np.float32)
    with threadpool_limits(1):
        if kernel == "openblas_sgemm":  # the GEMM at the heart of im2col conv, alone
            c, h, w, m, k, s, p, g = LAYERS[layer]
            a = inputs[1].reshape(m, -1)
            cols = np.random.default_rng(1).standard_normal(
                (a.shape[1], out.shape[2] * out.shape[3])).astype(np.float32)
            y = np.empty((m, cols.shape[1]), np.float32)
            fn = lambda: np.matmul(a, cols, out=y)  # noqa: E731
        else:
            spec = next(s for s in KERNELS["Conv"] if s.name == kernel)
            run = spec.prepare(node, ins, outs)
            fn = lambda: run(inputs, [out])  # noqa: E731
        benchmark.group = layer
        benchmark.pedantic(fn, rounds=15, warmup_rounds=2)
    benchmark.extra_info["gflops"] = flops / benchmark.stats.stats.median / 1e9
