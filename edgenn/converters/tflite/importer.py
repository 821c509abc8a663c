"""TFLite -> edgenn IR: .tflite files load and run directly (`edgenn.InferenceSession(
"model.tflite")`): float32 models, float16 weights, int8 weights of float models
(dequantized at import), and fully integer int8 / uint8 models (quantized.py: onto
edgenn's QDQ form and its integer kernels).

Layout. TFLite activations are NHWC; edgenn's convolutions, pools, Resize and
DepthToSpace are NCHW. Each of those ops is written as Transpose(NHWC->NCHW) -> op ->
Transpose(NCHW->NHWC), every other op (elementwise, Pad, Concat, Mean, Reshape,
FullyConnected, StridedSlice) keeps TFLite's axes, and the graph's inputs and outputs
stay NHWC, as LiteRT's are. The transpose pass (graph/passes/transpose.py) then moves the
transposes through the layout-agnostic ops until the pairs meet and cancel: a chain of
convolutions runs NCHW end to end with a transpose at its two ends only (the TinyNN
point: a naive conversion leaves a transpose pair per layer).

Weights: Conv2D OHWI -> OIHW; DepthwiseConv2D (1, H, W, C*m) -> (C*m, 1, H, W) with
group = C; FullyConnected (out, in) -> Gemm with transB. SAME padding is ONNX's
SAME_UPPER (TF puts the odd pixel at the end); average pools exclude the padding.
"""
from __future__ import annotations

import numpy as np

from ...errors import ModelFormatError, UnsupportedOpError
from ...graph.ir import Graph, Node, ValueInfo, fresh_name
from . import quantized
from .reader import TOp, TTensor, read

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]
ACT = {0: None, 1: ("Relu", []), 2: ("Clip", [-1.0, 1.0]), 3: ("Clip", [0.0, 6.0]),
       4: ("Tanh", [])}
RESIZE_ATTRS = {"antialias": 0, "cubic_coeff_a": -0.75, "exclude_outside": 0,
                "extrapolation_value": 0.0, "keep_aspect_ratio_policy": "stretch",
                "nearest_mode": "round_prefer_floor"}


class _Builder:
    def __init__(self, tensors: list[TTensor]):
        self.t = tensors
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.names = [t.name or f"t{i}" for i, t in enumerate(tensors)]
        seen: dict[str, int] = {}
        for i, n in enumerate(self.names):     # tensor names are not unique in every file
            if n in seen:
                self.names[i] = f"{n}#{i}"
            seen[n] = i
        self.taken = set(self.names)
        self.u8_consts: dict[int, tuple[str, str]] = {}   # quantized.py: (scale, zp) names
        self.u8_alias: dict[int, str] = {}      # int8 graph inputs / outputs -> uint8
        self.integer_weights = False            # the op being imported is integer
        for i, t in enumerate(tensors):
            if t.data is not None:
                self.consts[self.names[i]] = t.data

    def fresh(self, prefix: str) -> str:
        return fresh_name(self.taken, prefix, "~")

    def const(self, prefix: str, value) -> str:
        n = self.fresh(prefix)
        self.consts[n] = np.require(np.asarray(value), requirements="C")
        return n

    def value(self, i: int) -> np.ndarray | None:
        if i < 0:
            return None
        return self.consts.get(self.names[i])

    def emit(self, op: str, ins: list[str], outs: list[str], attrs: dict, name: str) -> None:
        self.nodes.append(Node(op, ins, outs, attrs, self.fresh(name)))

    def transpose(self, x: str, perm, base: str) -> str:
        y = self.fresh(f"{base}/{'nchw' if perm == TO_NCHW else 'nhwc'}")
        self.emit("Transpose", [x], [y], {"perm": list(perm)}, f"{base}/transpose")
        return y

    def activation(self, y_pre: str, y: str, code: int, base: str) -> None:
        if code not in ACT:
            raise UnsupportedOpError({f"fused activation {code}": [base]},
                                     "the SIGN_BIT fused activation is not supported")
        act = ACT[code]
        if act is None:
            self.emit("Identity", [y_pre], [y], {}, f"{base}/out")
        elif act[0] == "Clip":
            lo = self.const(f"{base}/lo", np.float32(act[1][0]))
            hi = self.const(f"{base}/hi", np.float32(act[1][1]))
            self.emit("Clip", [y_pre, lo, hi], [y], {}, f"{base}/act")
        else:
            self.emit(act[0], [y_pre], [y], {}, f"{base}/act")


def _pads_same(op: TOp) -> dict:
    pad = op.options.Padding() if op.options is not None else 1
    return {"auto_pad": "SAME_UPPER"} if pad == 0 else {"auto_pad": "VALID"}


def _nchw_op(b: _Builder, op: TOp, onnx_op: str, ins: list[str], attrs: dict,
             act: int = 0) -> None:
    """An NCHW-only op on NHWC data: transpose in, op, transpose out, fused activation."""
    base = b.names[op.outputs[0]]
    x = b.transpose(ins[0], TO_NCHW, base)
    y = b.fresh(f"{base}/nchw_out")
    b.emit(onnx_op, [x] + ins[1:], [y], attrs, base)
    pre = b.transpose(y, TO_NHWC, base)
    b.activation(pre, b.names[op.outputs[0]], act, base)


def _conv(b: _Builder, op: TOp, depthwise: bool = False) -> None:
    """CONV_2D (weights OHWI -> OIHW) or DEPTHWISE_CONV_2D ((1, H, W, C*m) -> (C*m, 1, H,
    W), group = C)."""
    o = op.options
    base = b.names[op.outputs[0]]
    w = b.t[op.inputs[1]]
    if b.value(op.inputs[1]) is None:
        raise UnsupportedOpError({f"{op.op} with run-time weights": [base]})
    perm, group = ((3, 0, 1, 2), int(b.t[op.inputs[0]].shape[3])) if depthwise else \
        ((0, 3, 1, 2), 1)
    wn = quantized.weight(b, op.inputs[1], perm, f"{base}/w", b.integer_weights)
    ins = [b.names[op.inputs[0]], wn] + ([b.names[op.inputs[2]]] if len(op.inputs) > 2 and
                                         op.inputs[2] >= 0 else [])
    attrs = dict(_pads_same(op), strides=[o.StrideH(), o.StrideW()],
                 dilations=[o.DilationHFactor(), o.DilationWFactor()],
                 kernel_shape=[int(w.shape[1]), int(w.shape[2])], group=group)
    _nchw_op(b, op, "Conv", ins, attrs, o.FusedActivationFunction())


def _pool(b: _Builder, op: TOp, onnx_op: str) -> None:
    o = op.options
    attrs = dict(_pads_same(op), strides=[o.StrideH(), o.StrideW()],
                 kernel_shape=[o.FilterHeight(), o.FilterWidth()], ceil_mode=0)
    if onnx_op == "AveragePool":
        attrs["count_include_pad"] = 0
    _nchw_op(b, op, onnx_op, [b.names[op.inputs[0]]], attrs, o.FusedActivationFunction())


def _binary(b: _Builder, op: TOp, onnx_op: str) -> None:
    base = b.names[op.outputs[0]]
    pre = b.fresh(f"{base}/pre")
    b.emit(onnx_op, [b.names[i] for i in op.inputs[:2]], [pre], {}, base)
    act = op.options.FusedActivationFunction() if op.options is not None and \
        hasattr(op.options, "FusedActivationFunction") else 0
    b.activation(pre, base, act, base)


def _resize(b: _Builder, op: TOp) -> None:
    o = op.options
    size = b.value(op.inputs[1])
    if size is None:
        raise UnsupportedOpError({"RESIZE_BILINEAR with a run-time size": [b.names[op.outputs[0]]]})
    x = b.t[op.inputs[0]]
    mode = "align_corners" if o.AlignCorners() else "half_pixel" if o.HalfPixelCenters() \
        else "asymmetric"
    sizes = b.const(f"{b.names[op.outputs[0]]}/sizes",
                    np.array([x.shape[0], x.shape[3], int(size[0]), int(size[1])], np.int64))
    attrs = dict(RESIZE_ATTRS, mode="linear", coordinate_transformation_mode=mode)
    _nchw_op(b, op, "Resize", [b.names[op.inputs[0]], "", "", sizes], attrs)


def _strided_slice(b: _Builder, op: TOp) -> None:
    o = op.options
    if o.EllipsisMask() or o.NewAxisMask():
        raise UnsupportedOpError({"STRIDED_SLICE with ellipsis / new-axis masks":
                                  [b.names[op.outputs[0]]]})
    begin, end, strides = (b.value(i) for i in op.inputs[1:4])
    if begin is None or end is None or strides is None:
        raise UnsupportedOpError({"STRIDED_SLICE with run-time bounds": [b.names[op.outputs[0]]]})
    rank = len(begin)
    big = np.iinfo(np.int64).max
    starts, ends = [], []
    for k in range(rank):
        s = int(strides[k])
        starts.append((0 if s > 0 else -1) if o.BeginMask() >> k & 1 else int(begin[k]))
        ends.append((big if s > 0 else -big) if o.EndMask() >> k & 1 else int(end[k]))
        if o.ShrinkAxisMask() >> k & 1:
            ends[k] = starts[k] + 1 if starts[k] != -1 else big
    base = b.names[op.outputs[0]]
    shrink = [k for k in range(rank) if o.ShrinkAxisMask() >> k & 1]
    y = b.fresh(f"{base}/slice") if shrink else base
    b.emit("Slice", [b.names[op.inputs[0]], b.const(f"{base}/starts", np.array(starts)),
                     b.const(f"{base}/ends", np.array(ends)),
                     b.const(f"{base}/axes", np.arange(rank)),
                     b.const(f"{base}/steps", np.array(strides, np.int64))], [y], {}, base)
    if shrink:
        b.emit("Squeeze", [y, b.const(f"{base}/sq", np.array(shrink, np.int64))], [base], {},
               f"{base}/shrink")


def _convert(b: _Builder, op: TOp) -> None:
    n = op.op
    out = b.names[op.outputs[0]] if op.outputs else ""
    ins = [b.names[i] if i >= 0 else "" for i in op.inputs]
    if n in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        _conv(b, op, depthwise=n == "DEPTHWISE_CONV_2D")
    elif n in ("MAX_POOL_2D", "AVERAGE_POOL_2D"):
        _pool(b, op, "MaxPool" if n == "MAX_POOL_2D" else "AveragePool")
    elif n in ("ADD", "MUL", "SUB", "DIV"):
        _binary(b, op, n.capitalize())
    elif n in ("RELU", "LOGISTIC", "TANH", "HARD_SWISH", "RELU6", "RELU_N1_TO_1"):
        if n in ("RELU6", "RELU_N1_TO_1"):
            b.activation(ins[0], out, 3 if n == "RELU6" else 2, out)
        else:
            b.emit({"RELU": "Relu", "LOGISTIC": "Sigmoid", "TANH": "Tanh",
                    "HARD_SWISH": "HardSwish"}[n], ins[:1], [out], {}, out)
    elif n == "PRELU":
        b.emit("PRelu", ins[:2], [out], {}, out)
    elif n == "LEAKY_RELU":
        b.emit("LeakyRelu", ins[:1], [out], {"alpha": float(op.options.Alpha())}, out)
    elif n == "DEQUANTIZE":
        _dequantize(b, op)
    elif n == "PAD":
        p = b.value(op.inputs[1])
        if p is None:
            raise UnsupportedOpError({"PAD with run-time paddings": [out]})
        pads = np.concatenate([p[:, 0], p[:, 1]]).astype(np.int64)
        b.emit("Pad", [ins[0], b.const(f"{out}/pads", pads)], [out], {"mode": "constant"}, out)
    elif n == "CONCATENATION":
        pre = b.fresh(f"{out}/pre")
        b.emit("Concat", ins, [pre], {"axis": int(op.options.Axis())}, out)
        b.activation(pre, out, op.options.FusedActivationFunction(), out)
    elif n == "RESHAPE":
        shape = np.array(b.t[op.outputs[0]].shape, np.int64)
        b.emit("Reshape", [ins[0], b.const(f"{out}/shape", shape)], [out], {"allowzero": 0},
               out)
    elif n == "MEAN":
        axes = b.value(op.inputs[1])
        if axes is None:
            raise UnsupportedOpError({"MEAN with run-time axes": [out]})
        b.emit("ReduceMean", [ins[0], b.const(f"{out}/axes", np.asarray(axes, np.int64)
                                                    .reshape(-1))], [out],
               {"keepdims": int(op.options.KeepDims())}, out)
    elif n == "FULLY_CONNECTED":
        _fully_connected(b, op)
    elif n == "RESIZE_BILINEAR":
        _resize(b, op)
    elif n == "STRIDED_SLICE":
        _strided_slice(b, op)
    elif n == "DEPTH_TO_SPACE":
        _nchw_op(b, op, "DepthToSpace", ins[:1], {"blocksize": int(op.options.BlockSize()),
                                                  "mode": "DCR"})
    elif n == "SOFTMAX":
        b.emit("Softmax", ins[:1], [out], {"axis": -1}, out)
    else:
        raise UnsupportedOpError({n: [out]})


def _dequantize(b: _Builder, op: TOp) -> None:
    """A constant's float16 or int8 form -> a float32 constant (at import)."""
    src, dst = b.t[op.inputs[0]], op.outputs[0]
    if src.data is None:
        raise UnsupportedOpError({"DEQUANTIZE of run-time data": [b.names[dst]]},
                                 "only int8 / uint8 run-time tensors are dequantized")
    v = quantized.dequantized(src) if quantized.is_quantized_const(b, op.inputs[0]) else \
        src.data.astype(np.float32)
    b.consts[b.names[dst]] = np.require(v.astype(np.float32), requirements="C")


def _fully_connected(b: _Builder, op: TOp) -> None:
    o = op.options
    out = b.names[op.outputs[0]]
    w = b.t[op.inputs[1]]
    if b.value(op.inputs[1]) is None:
        raise UnsupportedOpError({"FULLY_CONNECTED with run-time weights": [out]})
    x = b.t[op.inputs[0]]
    k = int(w.shape[1])
    a = b.names[op.inputs[0]]
    if len(x.shape) != 2 or x.shape[1] != k:
        flat = b.fresh(f"{out}/flat")
        b.emit("Reshape", [a, b.const(f"{out}/fshape", np.array([-1, k], np.int64))], [flat],
               {"allowzero": 0}, f"{out}/flatten")
        a = flat
    ins = [a, quantized.weight(b, op.inputs[1], None, f"{out}/w", b.integer_weights)] + \
        ([b.names[op.inputs[2]]] if len(op.inputs) > 2 and
                                        op.inputs[2] >= 0 else [])
    y_shape = b.t[op.outputs[0]].shape
    pre = b.fresh(f"{out}/gemm")
    b.emit("Gemm", ins, [pre], {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 1}, out)
    if len(y_shape) != 2:
        res = b.fresh(f"{out}/shaped")
        b.emit("Reshape", [pre, b.const(f"{out}/yshape", np.array(y_shape, np.int64))], [res],
               {"allowzero": 0}, f"{out}/reshape")
        pre = res
    b.activation(pre, out, o.FusedActivationFunction(), out)


def import_tflite(data: bytes, source: str = "<tflite>") -> Graph:
    """A .tflite model's bytes -> Graph (see the module docstring). Every unsupported op
    is listed at once, with its output tensor's name."""
    tensors, ops, g_in, g_out = read(data, source)
    b = _Builder(tensors)
    missing: dict[str, list[str]] = {}
    quantized.boundary(b, g_in, g_out)
    for op in ops:
        try:
            if quantized.involved(b, op):
                quantized.convert(b, op, _convert)
            else:
                _convert(b, op)
        except UnsupportedOpError as exc:
            for k, v in exc.unsupported.items():
                missing.setdefault(k, []).extend(v)
        except (AttributeError, IndexError, TypeError, ValueError) as exc:
            raise ModelFormatError(f"{source}: operator {op.index} ({op.op}) is malformed: "
                                   f"{exc}") from None
    if missing:
        raise UnsupportedOpError(missing, "nothing was run; these TFLite ops need support")
    quantized.finish(b, g_out)
    inputs = [ValueInfo(b.names[i], tensors[i].dtype, tensors[i].shape) for i in g_in
              if tensors[i].data is None]
    outputs = [ValueInfo(b.names[i], tensors[i].dtype, tensors[i].shape) for i in g_out]
    graph = Graph(b.nodes, inputs, outputs, b.consts, {"opset": 21, "producer": "tflite"})
    graph.validate()
    return graph
