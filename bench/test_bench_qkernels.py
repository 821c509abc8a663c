"""int8 QConv kernels (_qgemm.pyx) against the fp32 kernels on real layer shapes: ResNet-18
3x3 convs and MobileNetV2 1x1 expand / project and depthwise 3x3 layers, 1 thread.

Per layer, one benchmark for the int8 kernel; the fp32 candidates (conv_sgemm, the best
Winograd for 3x3 stride 1, depthwise_c8 for depthwise; OpenBLAS sgemm on the equivalent
GEMM, im2col not counted, for group-1 layers) are timed interleaved with it in the same
test (A B A B ..., medians of 15 after warm-up) and land in extra_info with the ratio
int8 / best fp32 and GOPS (2 * MACs / time). Print the table:

    python bench/test_bench_qkernels.py [layer substrings...]
    python -m pytest bench/test_bench_qkernels.py --benchmark-columns=median \\
        --benchmark-group-by=param:layer
"""
import os
import sys
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from edgenn.graph.infer import infer_node
from edgenn.graph.ir import Node
from edgenn.kernels import isa
from edgenn.kernels.gemm import _sgemm
from edgenn.oplist import load_kernels
from edgenn.registry import KERNELS, TensorInfo

load_kernels()

# name: (c, h, w, m, k, stride, pad, group)
LAYERS = {
    "r18_3x3_64x56": (64, 56, 56, 64, 3, 1, 1, 1),
    "r18_3x3_128x28": (128, 28, 28, 128, 3, 1, 1, 1),
    "r18_3x3_256x14": (256, 14, 14, 256, 3, 1, 1, 1),
    "r18_3x3_512x7": (512, 7, 7, 512, 3, 1, 1, 1),
    "r18_3x3s2_64to128x56": (64, 56, 56, 128, 3, 2, 1, 1),
    "r18_7x7s2_stem": (3, 224, 224, 64, 7, 2, 3, 1),
    "mv2_3x3s2_stem": (3, 224, 224, 32, 3, 2, 1, 1),
    "mv2_1x1_32to16x112": (32, 112, 112, 16, 1, 1, 0, 1),
    "mv2_1x1_16to96x112": (16, 112, 112, 96, 1, 1, 0, 1),
    "mv2_1x1_24to144x56": (24, 56, 56, 144, 1, 1, 0, 1),
    "mv2_1x1_144to24x56": (144, 56, 56, 24, 1, 1, 0, 1),
    "mv2_1x1_32to192x28": (32, 28, 28, 192, 1, 1, 0, 1),
    "mv2_1x1_192to32x28": (192, 28, 28, 32, 1, 1, 0, 1),
    "mv2_1x1_64to384x14": (64, 14, 14, 384, 1, 1, 0, 1),
    "mv2_1x1_384to64x14": (384, 14, 14, 64, 1, 1, 0, 1),
    "mv2_1x1_160to960x7": (160, 7, 7, 960, 1, 1, 0, 1),
    "mv2_1x1_960to160x7": (960, 7, 7, 160, 1, 1, 0, 1),
    "mv2_1x1_320to1280x7": (320, 7, 7, 1280, 1, 1, 0, 1),
    "mv2_dw_32x112": (32, 112, 112, 32, 3, 1, 1, 32),
    "mv2_dw_96x112_s2": (96, 112, 112, 96, 3, 2, 1, 96),
    "mv2_dw_144x56": (144, 56, 56, 144, 3, 1, 1, 144),
    "mv2_dw_144x56_s2": (144, 56, 56, 144, 3, 2, 1, 144),
    "mv2_dw_192x28": (192, 28, 28, 192, 3, 1, 1, 192),
    "mv2_dw_384x14": (384, 14, 14, 384, 3, 1, 1, 384),
    "mv2_dw_576x14_s2": (576, 14, 14, 576, 3, 2, 1, 576),
    "mv2_dw_960x7": (960, 7, 7, 960, 3, 1, 1, 960),
}
ROUNDS, WARMUP = 15, 2


def _attrs(k, s, p, g, act="Relu"):
    return dict(kernel_shape=[k, k], strides=[s, s], pads=[p] * 4, dilations=[1, 1], group=g,
                auto_pad="NOTSET", activation=act, activation_params=[])


def int8_case(c, h, w, m, k, s, p, g):
    """QConv with 7-bit weights, per-channel scales, u8 output, fused Relu (integer path)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, c, h, w), dtype=np.uint8)
    wt = rng.integers(-63, 64, (m, c // g, k, k)).astype(np.int8)
    inputs = [x, np.array(np.float32(0.02)), np.array(np.uint8(110)), wt,
              (rng.random(m) * 0.01 + 0.001).astype(np.float32), np.zeros(m, np.int8),
              np.array(np.float32(0.05)), np.array(np.uint8(7)),
              rng.integers(-500, 500, m).astype(np.int32)]
    node = Node("QConv", [f"i{i}" for i in range(9)], ["y"], _attrs(k, s, p, g), "qconv")
    ins = [TensorInfo("uint8", x.shape)] + [TensorInfo.of(v) for v in inputs[1:]]
    outs = infer_node(node, ins, fold=False)
    return node, ins, outs, inputs


def fp32_case(c, h, w, m, k, s, p, g):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = Node("Conv", ["x", "w", "b"], ["y"], _attrs(k, s, p, g), "conv")
    ins = [TensorInfo("float32", x.shape), TensorInfo.of(wt), TensorInfo.of(b)]
    outs = infer_node(node, ins, fold=False)
    return node, ins, outs, [x, wt, b]


def _runner(spec, node, ins, outs, inputs):
    run = spec.prepare(node, ins, outs)
    out = np.empty(outs[0].shape, outs[0].dtype)
    return lambda: run(inputs, [out])


def candidates(layer):
    """-> {name: zero-argument callable}: the int8 kernel first, then the fp32 ones."""
    geom = LAYERS[layer]
    c, h, w, m, k, s, p, g = geom
    node, ins, outs, inputs = int8_case(*geom)
    fns = {}
    for spec in KERNELS["QConv"]:   # the tiers this CPU has (Zen 4: AVX-512 VNNI, no AVX-VNNI)
        if spec.isa and not isa.usable(spec.isa):
            continue
        if spec.name.startswith("qconv_") and spec.supports(node, ins, outs):
            fns["int8:" + spec.name] = _runner(spec, node, ins, outs, inputs)
    fnode, fins, fouts, finputs = fp32_case(*geom)
    wanted = ("conv_" + _sgemm.best_row(), "winograd_f43", "winograd_f23", "depthwise_c8")
    for spec in KERNELS["Conv"]:
        if spec.name in wanted and spec.supports(fnode, fins, fouts):
            fns["fp32:" + spec.name] = _runner(spec, fnode, fins, fouts, finputs)
    if g == 1:   # the GEMM at the heart of im2col conv, alone
        a = finputs[1].reshape(m, -1)
        cols = np.random.default_rng(1).standard_normal(
            (a.shape[1], fouts[0].shape[2] * fouts[0].shape[3])).astype(np.float32)
        y = np.empty((m, cols.shape[1]), np.float32)
        fns["fp32:openblas_sgemm"] = lambda: np.matmul(a, cols, out=y)
    macs = int(np.prod(outs[0].shape)) * (c // g) * k * k
    return fns, macs


def interleaved(fns, rounds=ROUNDS, warmup=WARMUP):
    """A B A B ... rounds; -> {name: median seconds}."""
    samples = {n: [] for n in fns}
    with threadpool_limits(1):
        for r in range(warmup + rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                if r >= warmup:
                    samples[name].append(time.perf_counter() - t0)
    return {n: float(np.median(v)) for n, v in samples.items()}


def summary(layer, times, macs):
    int8 = min((t, n) for n, t in times.items() if n.startswith("int8:"))
    fp32_ours = [(t, n) for n, t in times.items() if n.startswith("fp32:") and "openblas" not in n]
    best = min(fp32_ours)
    return dict(layer=layer, int8_kernel=int8[1][5:], int8_ms=int8[0] * 1e3,
                fp32_kernel=best[1][5:], fp32_ms=best[0] * 1e3,
                openblas_ms=times.get("fp32:openblas_sgemm", float("nan")) * 1e3,
                ratio=int8[0] / best[0], int8_gops=2 * macs / int8[0] / 1e9,
                fp32_gflops=2 * macs / best[0] / 1e9)


@pytest.mark.parametrize("layer", list(LAYERS))
def test_qconv_layer(benchmark, layer):
    fns, macs = candidates(layer)
    row = summary(layer, interleaved(fns), macs)
    benchmark.group = layer
    benchmark.extra_info.update(row)
    int8_fn = fns["int8:" + row["int8_kernel"]]
    with threadpool_limits(1):
        benchmark.pedantic(int8_fn, rounds=ROUNDS, warmup_rounds=WARMUP)


def main(argv):
    sel = [k for k in LAYERS if not argv or any(a in k for a in argv)]
    print(f"{'layer':24s} {'int8 ms':>8s} {'GOPS':>6s} {'fp32 ms':>8s} {'GFLOP/s':>7s} "
          f"{'fp32 kernel':>13s} {'openblas':>8s} {'int8/fp32':>9s}")
    tot8 = tot32 = 0.0
    for layer in sel:
        fns, macs = candidates(layer)
        r = summary(layer, interleaved(fns), macs)
        tot8, tot32 = tot8 + r["int8_ms"], tot32 + r["fp32_ms"]
        print(f"{layer:24s} {r['int8_ms']:8.3f} {r['int8_gops']:6.1f} {r['fp32_ms']:8.3f} "
              f"{r['fp32_gflops']:7.1f} {r['fp32_kernel']:>13s} {r['openblas_ms']:8.3f} "
              f"{r['ratio']:9.2f}")
    print(f"{'total':24s} {tot8:8.3f} {'':6s} {tot32:8.3f} {'':7s} {'':13s} {'':8s} "
          f"{tot8 / tot32:9.2f}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    main(sys.argv[1:])
