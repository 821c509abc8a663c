"""Fully integer .tflite test models, written with tflite_writer.py: each network is built
in float32, calibrated by LiteRT on real photos (scikit-image), then written int8 (or
legacy uint8) the way TFLite's converter quantizes (see tflite_writer.py)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from .mediapipe_models import image_input
from .tflite_writer import Net

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def block_net() -> Net:
    """MobileNet-style blocks: strided conv, depthwise, 1x1, residual add, max / average
    pool into a concatenation, hard-swish, global mean, fully connected, softmax."""
    net = Net(0)
    x = net.input("image", (1, 32, 32, 3))
    y = net.conv(x, 16, 3, stride=2, act="RELU6")
    z = net.conv(net.depthwise(y, 3, act="RELU6"), 16, 1, act=None)
    y = net.add(y, z)
    c = net.concat([net.pool(y, "MAX"), net.pool(y, "AVERAGE")])
    h = net.unary(net.conv(c, 24, 3, stride=2), "HARD_SWISH")
    net.output(net.softmax(net.fc(net.mean(h, (1, 2)), 10)))
    return net


def head_net() -> Net:
    """Dilated VALID conv, depthwise with multiplier 2 and stride 2, tanh, pad, a gated
    1x1 pair (RELU_N1_TO_1 x logistic), flatten, two fully connected outputs."""
    net = Net(1)
    x = net.input("image", (1, 40, 48, 3))
    y = net.conv(x, 12, 3, padding="VALID", act="RELU", dilation=2)
    y = net.unary(net.depthwise(y, 3, stride=2, mult=2, act=None), "TANH")
    y = net.pad(y, [(0, 0), (1, 1), (2, 0), (0, 0)])
    g = net.mul(net.conv(y, 24, 1, act="RELU_N1_TO_1"),
                net.unary(net.conv(y, 24, 1, act=None), "LOGISTIC"))
    flat = net.reshape(g, (1, int(np.prod(net.t[g].shape))))
    net.output(net.unary(net.fc(flat, 8), "LOGISTIC"))
    net.output(net.fc(flat, 5, act="RELU"))
    return net


def mobilenet_v2_net(size: int = 224, width: float = 1.0) -> Net:
    """MobileNetV2's layer shapes (inverted residuals, expansion 6) with random weights:
    the latency model."""
    net = Net(2)
    x = net.input("image", (1, size, size, 3))

    def ch(c):
        return max(8, int(c * width + 4) // 8 * 8)
    y = net.conv(x, ch(32), 3, stride=2, act="RELU6")
    cin = ch(32)
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            h = net.conv(y, cin * t, 1, act="RELU6") if t != 1 else y
            h = net.depthwise(h, 3, stride=s if i == 0 else 1, act="RELU6")
            h = net.conv(h, ch(c), 1, act=None)
            y = net.add(y, h) if i > 0 and cin == ch(c) else h
            cin = ch(c)
    y = net.conv(y, 1280, 1, act="RELU6")
    net.output(net.softmax(net.fc(net.mean(y, (1, 2)), 1000)))
    return net


NETS = {"block": block_net, "head": head_net, "mobilenet_v2": mobilenet_v2_net}


def photos(shape) -> list[np.ndarray]:
    return [image_input(shape, name=n) for n in PHOTOS]


@lru_cache(None)
def model(name: str, io: str = "int8", weights: str = "int8") -> bytes:
    """The quantized model's bytes (io "int8": integer inputs / outputs; "float":
    QUANTIZE / DEQUANTIZE at the ends)."""
    net = NETS[name]()
    float_model = net.build()
    shape = net.t[net.inputs[0]].shape
    ranges = net.calibrate(float_model, [[p] for p in photos(shape)])
    return net.build(ranges, io=io, weights=weights)


def quantize_input(x: np.ndarray, detail: dict) -> np.ndarray:
    """A float input as the model's integer input tensor (LiteRT's input details)."""
    if np.dtype(detail["dtype"]).kind == "f":
        return x.astype(np.float32)
    scale, zp = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(detail["dtype"])
