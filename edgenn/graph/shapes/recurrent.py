"""Shape rules of the recurrent family: LSTM, GRU, RNN (ONNX semantics, opset 7-22).

Inputs (layout 0; layout 1 swaps the first two dims of X, Y, Y_h, Y_c):
    X (T, B, I), W (D, G*H, I), R (D, G*H, H), [B (D, 2*G*H)], [sequence_lens int32 (B,)],
    [initial_h (D, B, H)], LSTM also [initial_c (D, B, H)], [P (D, 3*H)] (peepholes i, o, f)
with D = 2 for direction "bidirectional" else 1 and G = 4 (LSTM, gates i o f c), 3 (GRU,
z r h) or 1 (RNN). Outputs: Y (T, D, B, H), Y_h (D, B, H), LSTM also Y_c (D, B, H); a
trailing output may be omitted ("").
"""
from __future__ import annotations

from ...errors import GraphError
from ...registry import TensorInfo, shape_rule

OPS = ("LSTM", "GRU", "RNN")
CONST_INPUTS: dict = {}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DIRECTIONS = ("forward", "reverse", "bidirectional")
FLOATS = ("float16", "float32", "float64")
# the activation functions the ONNX spec allows (name -> how many of alpha / beta it reads)
ACTIVATIONS = {"Relu": 0, "Tanh": 0, "Sigmoid": 0, "Affine": 2, "LeakyRelu": 1,
               "ThresholdedRelu": 1, "ScaledTanh": 2, "HardSigmoid": 2, "Elu": 1,
               "Softsign": 0, "Softplus": 0}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}


def directions(node) -> int:
    d = node.attrs.get("direction", "forward") or "forward"
    if d not in DIRECTIONS:
        raise GraphError(f"{node.op} node {node.name!r}: direction {d!r} is not one of "
                         f"{DIRECTIONS}")
    return 2 if d == "bidirectional" else 1


def activations(node) -> list[tuple[str, float | None, float | None]]:
    """The activation functions of every direction, in order, each with its alpha and beta
    (None: the function's default): [f, g(, h)] of direction 0, then of direction 1."""
    nd, per = directions(node), len(DEFAULT_ACTIVATIONS[node.op])
    names = list(node.attrs.get("activations") or [])
    if not names:
        names = list(DEFAULT_ACTIVATIONS[node.op]) * nd
    if len(names) == per and nd == 2:
        names = names * 2        # one list given: both directions use it (as onnxruntime)
    elif len(names) == 2 * per and nd == 1:
        names = names[:per]      # RNN's schema default ["Tanh", "Tanh"] on one direction
    if len(names) != per * nd:
        raise GraphError(f"{node.op} node {node.name!r}: activations {names} needs "
                         f"{per * nd} names ({per} per direction)")
    alphas = list(node.attrs.get("activation_alpha") or [])
    betas = list(node.attrs.get("activation_beta") or [])
    out, ia, ib = [], 0, 0
    for name in names:
        if name not in ACTIVATIONS:
            raise GraphError(f"{node.op} node {node.name!r}: activation {name!r} is not one "
                             f"of {sorted(ACTIVATIONS)}")
        n = ACTIVATIONS[name]
        a = b = None
        if n >= 1 and ia < len(alphas):        # alphas / betas are consumed in order by
            a, ia = float(alphas[ia]), ia + 1  # the functions that take them
        if n >= 2 and ib < len(betas):
            b, ib = float(betas[ib]), ib + 1
        out.append((name, a, b))
    return out


def _check(node, info, name: str, shape: tuple, dtype: str) -> None:
    if info is None:
        return
    if tuple(info.shape) != shape or info.dtype != dtype:
        raise GraphError(f"{node.op} node {node.name!r}: {name} is {info.dtype} "
                         f"{tuple(info.shape)}, expected {dtype} {shape}")


@shape_rule("LSTM", "GRU", "RNN")
def recurrent(node, ins):
    where = f"{node.op} node {node.name!r}"
    if len(ins) < 3 or any(i is None for i in ins[:3]):
        raise GraphError(f"{where}: needs X, W and R")
    x, w, r = ins[0], ins[1], ins[2]
    layout = int(node.attrs.get("layout", 0) or 0)
    if layout not in (0, 1):
        raise GraphError(f"{where}: layout {layout} must be 0 or 1")
    if x.dtype not in FLOATS or len(x.shape) != 3:
        raise GraphError(f"{where}: X must be a rank-3 float tensor, got {x.dtype} {x.shape}")
    t, b, i = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
    nd, g = directions(node), GATES[node.op]
    h = int(node.attrs.get("hidden_size") or (r.shape[-1] if len(r.shape) == 3 else 0))
    if h <= 0:
        raise GraphError(f"{where}: hidden_size must be positive")
    activations(node)
    _check(node, w, "W", (nd, g * h, i), x.dtype)
    _check(node, r, "R", (nd, g * h, h), x.dtype)
    opt = list(ins[3:]) + [None] * 5
    _check(node, opt[0], "B", (nd, 2 * g * h), x.dtype)
    if opt[1] is not None and (opt[1].dtype not in ("int32", "int64")
                               or tuple(opt[1].shape) != (b,)):
        raise GraphError(f"{where}: sequence_lens must be int32 ({b},), got "
                         f"{opt[1].dtype} {tuple(opt[1].shape)}")
    state = (b, nd, h) if layout else (nd, b, h)
    _check(node, opt[2], "initial_h", state, x.dtype)
    if node.op == "LSTM":
        _check(node, opt[3], "initial_c", state, x.dtype)
        _check(node, opt[4], "P", (nd, 3 * h), x.dtype)
    elif any(v is not None for v in opt[3:5]):
        raise GraphError(f"{where}: {node.op} takes at most 6 inputs")
    clip = node.attrs.get("clip")
    if clip is not None and not float(clip) > 0:
        raise GraphError(f"{where}: clip {clip} must be positive")
    y = (b, t, nd, h) if layout else (t, nd, b, h)
    outs = [TensorInfo(x.dtype, y), TensorInfo(x.dtype, state)]
    if node.op == "LSTM":
        outs.append(TensorInfo(x.dtype, state))
    return outs
