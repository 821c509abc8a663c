"""Test helper: write .tflite flatbuffers, float32 or fully integer, from a small network
description, so the TFLite importer is checked against LiteRT on integer models (no PyPI
package ships a fully int8 .tflite one can use here).

    net = Net(seed=0)
    x = net.input("image", (1, 32, 32, 3))
    y = net.conv(x, 16, 3, stride=2, act="RELU6")
    net.output(net.softmax(net.fc(net.mean(y, (1, 2)), 10)))
    float_bytes = net.build()
    ranges = net.calibrate(float_bytes, [batch, ...])     # per-tensor (min, max) by LiteRT
    int8_bytes = net.build(ranges, io="int8")             # or io="float": QUANTIZE / DEQUANTIZE

Quantization follows TFLite's int8 spec (what its converter writes): activations int8
asymmetric per tensor; conv / depthwise weights int8 symmetric per output channel (axis 0
of OHWI, axis 3 of depthwise 1HWC), fully-connected weights per tensor; biases int32 at
input scale x weight scale; pools, reshapes, pads and concatenations keep their input's
parameters (a concatenation's inputs share its output's); softmax and logistic write
scale 1/256, zero point -128. With weights="uint8" the legacy uint8 scheme instead:
uint8 activations and per-tensor asymmetric uint8 weights. Without ranges, weights="hybrid"
writes TFLite's dynamic-range form (float activations, int8 weights with their scales) and
weights="dequantized" the float model with those weights' dequantized values.

Field slots are read from the `tflite` package's reader classes, so the writer and the
reader cannot disagree on the schema."""
from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from functools import lru_cache

import flatbuffers
import numpy as np
import tflite

ACT = {None: 0, "RELU": 1, "RELU_N1_TO_1": 2, "RELU6": 3, "TANH": 4}
TYPE = {"float32": 0, "int32": 2, "uint8": 3, "int8": 9}
FIXED_OUT = {"SOFTMAX": (1 / 256, -128), "LOGISTIC": (1 / 256, -128), "TANH": (1 / 128, 0)}
SAME_AS_INPUT = {"MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "PAD"}


@lru_cache(None)
def _slots(cls: str) -> dict[str, int]:
    """Field name -> vtable slot, from the tflite reader class `cls`."""
    src = inspect.getsource(importlib.import_module(f"tflite.{cls}"))
    pat = r"def (\w+)\(self[^)]*\):\n(?:.*\n){0,2}?\s+o = flatbuffers\.number_types\." \
          r"UOffsetTFlags\.py_type\(self\._tab\.Offset\((\d+)\)\)"
    out: dict[str, int] = {}
    for name, off in re.findall(pat, src):
        out.setdefault(name, (int(off) - 4) // 2)
    return out


def _table(b: flatbuffers.Builder, cls: str, fields: list[tuple[str, str, object]]) -> int:
    """One table: fields (name, kind, value), kind i8 / u8 / i32 / u32 / f32 / bool / off;
    every offset must already be built."""
    slots = _slots(cls)
    b.StartObject(max(slots.values()) + 1)
    put = {"i8": b.PrependInt8Slot, "u8": b.PrependUint8Slot, "i32": b.PrependInt32Slot,
           "u32": b.PrependUint32Slot, "f32": b.PrependFloat32Slot, "bool": b.PrependBoolSlot,
           "off": b.PrependUOffsetTRelativeSlot}
    for name, kind, value in fields:
        put[kind](slots[name], value, 0 if kind != "f32" else 0.0)
    return b.EndObject()


def _offsets(b: flatbuffers.Builder, offs: list[int]) -> int:
    b.StartVector(4, len(offs), 4)
    for o in reversed(offs):
        b.PrependUOffsetTRelative(o)
    return b.EndVector()


def _raw(b: flatbuffers.Builder, data: bytes, align: int = 16) -> int:
    b.StartVector(1, len(data), align)
    b.head -= len(data)
    b.Bytes[b.head:b.head + len(data)] = data
    return b.EndVector()


@dataclass
class _T:
    shape: tuple
    value: np.ndarray | None = None    # float32 constant
    role: str = ""                     # "" activation; weight / dw_weight / fc_weight / bias


@dataclass
class _Op:
    op: str
    inputs: list[int]
    outputs: list[int]
    options: tuple[str, list] | None = None       # (options class, fields)
    extra: dict = field(default_factory=dict)


class Net:
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.t: list[_T] = []
        self.ops: list[_Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    # -- description ----------------------------------------------------------------------
    def _tensor(self, shape, value=None, role="") -> int:
        self.t.append(_T(tuple(int(d) for d in shape), value, role))
        return len(self.t) - 1

    def _op(self, op, inputs, out_shape, options=None, **extra) -> int:
        y = self._tensor(out_shape)
        self.ops.append(_Op(op, list(inputs), [y], options, extra))
        return y

    def input(self, name: str, shape) -> int:
        i = self._tensor(shape)
        self.inputs.append(i)
        return i

    def output(self, i: int) -> None:
        self.outputs.append(i)

    @staticmethod
    def _out_hw(h, k, s, d, padding):
        return -(-h // s) if padding == "SAME" else (h - (k - 1) * d - 1) // s + 1

    def _weights(self, shape, fan_in):
        return (self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def conv(self, x, cout, k, stride=1, padding="SAME", act="RELU", dilation=1) -> int:
        n, h, w, c = self.t[x].shape
        wt = self._tensor((cout, k, k, c), self._weights((cout, k, k, c), k * k * c), "weight")
        bias = self._tensor((cout,), (self.rng.standard_normal(cout) * 0.1).astype(np.float32),
                            "bias")
        oh = self._out_hw(h, k, stride, dilation, padding)
        ow = self._out_hw(w, k, stride, dilation, padding)
        opts = ("Conv2DOptions", [("Padding", "i8", 0 if padding == "SAME" else 1),
                                  ("StrideW", "i32", stride), ("StrideH", "i32", stride),
                                  ("FusedActivationFunction", "i8", ACT[act]),
                                  ("DilationWFactor", "i32", dilation),
                                  ("DilationHFactor", "i32", dilation)])
        return self._op("CONV_2D", [x, wt, bias], (n, oh, ow, cout), opts)

    def depthwise(self, x, k=3, stride=1, padding="SAME", act="RELU", mult=1) -> int:
        n, h, w, c = self.t[x].shape
        wt = self._tensor((1, k, k, c * mult), self._weights((1, k, k, c * mult), k * k),
                          "dw_weight")
        bias = self._tensor((c * mult,), (self.rng.standard_normal(c * mult) * 0.1)
                            .astype(np.float32), "bias")
        oh, ow = self._out_hw(h, k, stride, 1, padding), self._out_hw(w, k, stride, 1, padding)
        opts = ("DepthwiseConv2DOptions", [
            ("Padding", "i8", 0 if padding == "SAME" else 1), ("StrideW", "i32", stride),
            ("StrideH", "i32", stride), ("DepthMultiplier", "i32", mult),
            ("FusedActivationFunction", "i8", ACT[act]), ("DilationWFactor", "i32", 1),
            ("DilationHFactor", "i32", 1)])
        return self._op("DEPTHWISE_CONV_2D", [x, wt, bias], (n, oh, ow, c * mult), opts)

    def fc(self, x, units, act=None) -> int:
        shape = self.t[x].shape
        k = shape[-1]
        wt = self._tensor((units, k), self._weights((units, k), k), "fc_weight")
        bias = self._tensor((units,), (self.rng.standard_normal(units) * 0.1)
                            .astype(np.float32), "bias")
        opts = ("FullyConnectedOptions", [("FusedActivationFunction", "i8", ACT[act])])
        return self._op("FULLY_CONNECTED", [x, wt, bias], (int(np.prod(shape[:-1])), units),
                        opts)

    def pool(self, x, kind, k=2, stride=2, padding="VALID", act=None) -> int:
        n, h, w, c = self.t[x].shape
        oh, ow = self._out_hw(h, k, stride, 1, padding), self._out_hw(w, k, stride, 1, padding)
        opts = ("Pool2DOptions", [("Padding", "i8", 0 if padding == "SAME" else 1),
                                  ("StrideW", "i32", stride), ("StrideH", "i32", stride),
                                  ("FilterWidth", "i32", k), ("FilterHeight", "i32", k),
                                  ("FusedActivationFunction", "i8", ACT[act])])
        return self._op(f"{kind}_POOL_2D", [x], (n, oh, ow, c), opts)

    def add(self, a, b, act=None) -> int:
        return self._op("ADD", [a, b], self.t[a].shape,
                        ("AddOptions", [("FusedActivationFunction", "i8", ACT[act])]))

    def mul(self, a, b, act=None) -> int:
        return self._op("MUL", [a, b], self.t[a].shape,
                        ("MulOptions", [("FusedActivationFunction", "i8", ACT[act])]))

    def unary(self, x, op: str) -> int:   # LOGISTIC / TANH / HARD_SWISH / RELU
        return self._op(op, [x], self.t[x].shape)

    def softmax(self, x) -> int:
        return self._op("SOFTMAX", [x], self.t[x].shape,
                        ("SoftmaxOptions", [("Beta", "f32", 1.0)]))

    def mean(self, x, axes, keep=False) -> int:
        shape = self.t[x].shape
        ax = self._tensor((len(axes),), np.array(axes, np.int32), "int")
        out = tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)
        return self._op("MEAN", [x, ax], out, ("ReducerOptions", [("KeepDims", "bool", keep)]))

    def reshape(self, x, shape) -> int:
        s = self._tensor((len(shape),), np.array(shape, np.int32), "int")
        return self._op("RESHAPE", [x, s], shape)

    def pad(self, x, pads) -> int:
        p = self._tensor((len(pads), 2), np.array(pads, np.int32), "int")
        out = tuple(d + a + b for d, (a, b) in zip(self.t[x].shape, pads))
        return self._op("PAD", [x, p], out)

    def concat(self, xs, axis=-1) -> int:
        shape = list(self.t[xs[0]].shape)
        ax = axis % len(shape)
        shape[ax] = sum(self.t[i].shape[ax] for i in xs)
        return self._op("CONCATENATION", xs, shape, ("ConcatenationOptions", [
            ("Axis", "i32", axis), ("FusedActivationFunction", "i8", 0)]))

    # -- calibration ------------------------------------------------------------------------
    def calibrate(self, float_model: bytes, batches) -> dict[int, tuple[float, float]]:
        """Per activation tensor (min, max) over `batches` (lists of input arrays), read
        from LiteRT's builtin kernels with every tensor kept."""
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        it = Interpreter(model_content=float_model, experimental_preserve_all_tensors=True,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
        lo: dict[int, float] = {}
        hi: dict[int, float] = {}
        for feeds in batches:
            for i, v in zip(self.inputs, feeds):
                it.set_tensor(i, v)
            it.invoke()
            for i, t in enumerate(self.t):
                if t.value is None:
                    v = it.get_tensor(i)
                    lo[i] = min(lo.get(i, np.inf), float(v.min()))
                    hi[i] = max(hi.get(i, -np.inf), float(v.max()))
        return {i: (lo[i], hi[i]) for i in lo}

    # -- quantization parameters ------------------------------------------------------------
    def _activation_params(self, ranges, unsigned: bool) -> dict[int, tuple[float, int]]:
        qmin = 0 if unsigned else -128
        params: dict[int, tuple[float, int]] = {}

        def from_range(lo, hi):
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            scale = max(hi - lo, 1e-6) / 255.0
            return float(np.float32(scale)), int(np.clip(round(qmin - lo / scale), qmin,
                                                         qmin + 255))
        for i, r in ranges.items():
            params[i] = from_range(*r)
        producer = {o.outputs[0]: o for o in self.ops}

        def forward():                        # ops whose output parameters are fixed
            for op in self.ops:
                y = op.outputs[0]
                if op.op in FIXED_OUT:
                    s, z = FIXED_OUT[op.op]
                    params[y] = (s, z + 128 if unsigned else z)
                elif op.op in SAME_AS_INPUT:
                    params[y] = params[op.inputs[0]]

        def unify(i, p):                      # back through pools / reshapes / pads
            params[i] = p
            src = producer.get(i)
            if src is not None and src.op in SAME_AS_INPUT:
                unify(src.inputs[0], p)
        forward()
        for op in self.ops:
            if op.op == "CONCATENATION":
                lo = min(ranges[i][0] for i in op.inputs + op.outputs)
                hi = max(ranges[i][1] for i in op.inputs + op.outputs)
                for i in op.inputs + op.outputs:
                    unify(i, from_range(lo, hi))
        forward()
        return params

    # -- serialization ----------------------------------------------------------------------
    def build(self, ranges: dict | None = None, io: str = "int8", weights: str = "int8"
              ) -> bytes:
        """float32 model (ranges None) or the integer one: io "int8" (integer inputs and
        outputs) or "float" (QUANTIZE after each input, DEQUANTIZE before each output)."""
        unsigned = weights == "uint8"
        act_dtype = "uint8" if unsigned else "int8"
        params = self._activation_params(ranges, unsigned) if ranges is not None else {}
        tensors: list[dict] = []
        for i, t in enumerate(self.t):
            if ranges is None and weights in ("hybrid", "dequantized") and \
                    t.role in ("weight", "dw_weight", "fc_weight"):
                rec = self._tensor_record(i, t, {i: None}, act_dtype, False)
                if weights == "dequantized":
                    rec = dict(name=rec["name"], shape=rec["shape"], dtype="float32",
                               data=_dequantize(rec))
                tensors.append(rec)
                continue
            tensors.append(self._tensor_record(i, t, params, act_dtype, unsigned))
        ops = [(o.op, o.inputs, o.outputs, o.options) for o in self.ops]
        inputs, outputs = list(self.inputs), list(self.outputs)
        if ranges is not None and io == "float":
            for k, i in enumerate(inputs):
                f = len(tensors)
                tensors.append(dict(name=f"t{i}_float", shape=self.t[i].shape, dtype="float32"))
                ops.insert(k, ("QUANTIZE", [f], [i], None))
                inputs[k] = f
            for k, o in enumerate(outputs):
                f = len(tensors)
                tensors.append(dict(name=f"t{o}_float", shape=self.t[o].shape, dtype="float32"))
                ops.append(("DEQUANTIZE", [o], [f], None))
                outputs[k] = f
        return _serialize(tensors, ops, inputs, outputs)

    def _tensor_record(self, i, t: _T, params, act_dtype, unsigned) -> dict:
        rec = dict(name=f"t{i}", shape=t.shape, dtype="float32")
        if t.role == "int":
            return dict(rec, dtype="int32", data=t.value.astype(np.int32))
        if not params:
            return dict(rec, data=t.value)
        if t.value is None:
            s, z = params[i]
            return dict(rec, dtype=act_dtype, scale=[s], zero_point=[z])
        if t.role == "bias":
            op = next(o for o in self.ops if i in o.inputs)
            s_in = params[op.inputs[0]][0]
            w_scale = self._weight_scale(self.t[op.inputs[1]], unsigned)[0]
            scale = (np.float32(s_in) * w_scale).astype(np.float32)
            q = np.rint(t.value / scale).astype(np.int32)
            axis_scale = list(map(float, np.broadcast_to(scale, t.value.shape)))
            return dict(rec, dtype="int32", data=q, scale=axis_scale,
                        zero_point=[0] * len(axis_scale))
        scale, zp, axis = self._weight_scale(t, unsigned)
        shape = [1] * t.value.ndim
        if scale.size > 1:
            shape[axis] = -1
        q = np.rint(t.value / scale.reshape(shape)) + zp
        q = np.clip(q, 0, 255).astype(np.uint8) if unsigned else \
            np.clip(q, -127, 127).astype(np.int8)
        return dict(rec, dtype=str(q.dtype), data=q, scale=list(map(float, scale)),
                    zero_point=[int(zp)] * scale.size, axis=axis)

    @staticmethod
    def _weight_scale(t: _T, unsigned: bool) -> tuple[np.ndarray, int, int]:
        """(scale (channels,) or (1,), zero point, quantized axis) of a weight tensor."""
        if unsigned:                              # legacy: per tensor, asymmetric uint8
            lo, hi = min(float(t.value.min()), 0.0), max(float(t.value.max()), 0.0)
            s = np.float32(max(hi - lo, 1e-8) / 255.0)
            return np.array([s], np.float32), round(-lo / float(s)), 0
        axis = {"weight": 0, "dw_weight": 3}.get(t.role)
        if axis is None:                          # fully connected: per tensor
            return np.array([np.abs(t.value).max() / 127.0], np.float32), 0, 0
        red = tuple(a for a in range(t.value.ndim) if a != axis)
        return (np.maximum(np.abs(t.value).max(axis=red), 1e-8) / 127.0).astype(np.float32), \
            0, axis


def _dequantize(rec: dict) -> np.ndarray:
    q = rec["data"].astype(np.float32)
    scale = np.array(rec["scale"], np.float32)
    shape = [1] * q.ndim
    if scale.size > 1:
        shape[rec["axis"]] = -1
    return (q * scale.reshape(shape)).astype(np.float32)


def _serialize(tensors: list[dict], ops, inputs, outputs) -> bytes:
    b = flatbuffers.Builder(1 << 16)
    b.ForceDefaults(True)
    codes = sorted({op[0] for op in ops})
    buffers = [_table(b, "Buffer", [])]          # buffer 0: the empty sentinel
    tensor_offs = []
    for k, t in enumerate(tensors):
        buf = 0
        if t.get("data") is not None:
            data = _raw(b, np.ascontiguousarray(t["data"]).tobytes())
            buffers.append(_table(b, "Buffer", [("Data", "off", data)]))
            buf = len(buffers) - 1
        name = b.CreateString(t["name"])
        shape = b.CreateNumpyVector(np.array(t["shape"], np.int32))
        quant = None
        if "scale" in t:
            sc = b.CreateNumpyVector(np.array(t["scale"], np.float32))
            zp = b.CreateNumpyVector(np.array(t["zero_point"], np.int64))
            quant = _table(b, "QuantizationParameters", [
                ("Scale", "off", sc), ("ZeroPoint", "off", zp),
                ("QuantizedDimension", "i32", int(t.get("axis", 0)))])
        fields = [("Shape", "off", shape), ("Type", "i8", TYPE[t["dtype"]]),
                  ("Buffer", "u32", buf), ("Name", "off", name)]
        if quant is not None:
            fields.append(("Quantization", "off", quant))
        tensor_offs.append(_table(b, "Tensor", fields))
    op_offs = []
    for name, ins, outs, options in ops:
        i_vec = b.CreateNumpyVector(np.array(ins, np.int32))
        o_vec = b.CreateNumpyVector(np.array(outs, np.int32))
        fields = [("OpcodeIndex", "u32", codes.index(name)), ("Inputs", "off", i_vec),
                  ("Outputs", "off", o_vec)]
        if options is not None:
            cls, opt_fields = options
            opt = _table(b, cls, opt_fields)
            fields += [("BuiltinOptionsType", "u8", getattr(tflite.BuiltinOptions, cls)),
                       ("BuiltinOptions", "off", opt)]
        op_offs.append(_table(b, "Operator", fields))
    sg = _table(b, "SubGraph", [
        ("Tensors", "off", _offsets(b, tensor_offs)),
        ("Inputs", "off", b.CreateNumpyVector(np.array(inputs, np.int32))),
        ("Outputs", "off", b.CreateNumpyVector(np.array(outputs, np.int32))),
        ("Operators", "off", _offsets(b, op_offs)), ("Name", "off", b.CreateString("main"))])
    code_offs = []
    for name in codes:
        c = getattr(tflite.BuiltinOperator, name)
        code_offs.append(_table(b, "OperatorCode", [
            ("DeprecatedBuiltinCode", "i8", min(c, 127)), ("Version", "i32", 1),
            ("BuiltinCode", "i32", c)]))
    model = _table(b, "Model", [
        ("Version", "u32", 3), ("OperatorCodes", "off", _offsets(b, code_offs)),
        ("Subgraphs", "off", _offsets(b, [sg])), ("Description", "off",
                                                    b.CreateString("edgenn test model")),
        ("Buffers", "off", _offsets(b, buffers))])
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())
