"""Reference kernels of the recurrent family (graph/shapes/recurrent.py): LSTM, GRU, RNN.

Plain NumPy, one time step at a time, the ONNX equations as written (gate orders i o f c
for LSTM, z r h for GRU); float16 is computed in float32. sequence_lens: batch entry b
runs its first L_b steps (the last L_b in reverse order for the reverse direction); its Y
rows past L_b are zeros and Y_h / Y_c are the state after its last step; an entry with
L_b = 0 has zero Y_h / Y_c (not its initial state: onnxruntime's reading of the spec,
kept so that edgenn is a drop-in).
"""
from __future__ import annotations

import numpy as np

from ...graph.ir import Node
from ...graph.shapes.recurrent import GATES, activations, directions
from ...registry import reference


def _sigmoid(x):
    return np.exp(-np.logaddexp(0, -x)).astype(x.dtype, copy=False)


def activation(name: str, alpha: float | None, beta: float | None):
    """The ONNX recurrent activation `name` with onnxruntime's defaults of alpha, beta."""
    def a(default):
        return default if alpha is None else alpha

    def b(default):
        return default if beta is None else beta
    table = {
        "Sigmoid": _sigmoid,
        "Tanh": np.tanh,
        "Relu": lambda x: np.maximum(x, 0),
        "Affine": lambda x: a(1.0) * x + b(0.0),
        "LeakyRelu": lambda x: np.where(x >= 0, x, a(0.01) * x),
        "ThresholdedRelu": lambda x: np.where(x > a(1.0), x, 0),
        "ScaledTanh": lambda x: a(1.0) * np.tanh(b(1.0) * x),
        "HardSigmoid": lambda x: np.clip(a(0.2) * x + b(0.5), 0, 1),
        "Elu": lambda x: np.where(x >= 0, x, a(1.0) * (np.exp(np.minimum(x, 0)) - 1)),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "Softplus": lambda x: np.logaddexp(0, x),
    }
    fn = table[name]
    return lambda x: np.asarray(fn(x), dtype=x.dtype)


class _Unit:
    """The weights and activations of one direction."""

    def __init__(self, op, attrs, w, r, bias, peep, acts, clip):
        self.op, self.w, self.r = op, w, r
        g = GATES[op]
        h = r.shape[-1]
        self.wb = bias[:g * h] if bias is not None else np.zeros(g * h, w.dtype)
        self.rb = bias[g * h:] if bias is not None else np.zeros(g * h, w.dtype)
        self.peep = peep
        self.acts = [activation(*a) for a in acts]
        self.clip = clip
        self.input_forget = bool(attrs.get("input_forget", 0))
        self.lbr = bool(attrs.get("linear_before_reset", 0))

    def _c(self, x):
        return x if self.clip is None else np.clip(x, -self.clip, self.clip)

    def step(self, x, h, c):
        """x (B, I), h (B, H), c (B, H) or None -> (h, c) after one step."""
        H = h.shape[-1]
        xw = x @ self.w.T + self.wb
        if self.op == "RNN":
            return self.acts[0](self._c(xw + h @ self.r.T + self.rb)), None
        if self.op == "GRU":
            f, g = self.acts
            hr = h @ self.r.T
            z = f(self._c(xw[:, :H] + hr[:, :H] + self.rb[:H]))
            r = f(self._c(xw[:, H:2 * H] + hr[:, H:2 * H] + self.rb[H:2 * H]))
            rh, rbh = self.r[2 * H:], self.rb[2 * H:]
            if self.lbr:
                hh = g(self._c(xw[:, 2 * H:] + r * (h @ rh.T + rbh)))
            else:
                hh = g(self._c(xw[:, 2 * H:] + (r * h) @ rh.T + rbh))
            return (1 - z) * hh + z * h, None
        f, g, hf = self.acts
        gates = xw + h @ self.r.T + self.rb
        gi, go, gf, gc = (gates[:, k * H:(k + 1) * H] for k in range(4))
        if self.peep is not None:
            pi, po, pf = self.peep[:H], self.peep[H:2 * H], self.peep[2 * H:]
            gi, gf = gi + pi * c, gf + pf * c
        i = f(self._c(gi))
        fg = 1 - i if self.input_forget else f(self._c(gf))
        c = fg * c + i * g(self._c(gc))
        if self.peep is not None:
            go = go + po * c
        return f(self._c(go)) * hf(c), c


def _register(op: str) -> None:
    @reference(op)
    def ref(attrs, inputs):
        return run(Node(op, [], [], attrs), inputs)   # the attribute helpers read a Node


for _op in GATES:
    _register(_op)


def run(node, inputs):
    """One LSTM / GRU / RNN node (anything with .op, .attrs, .name) on its inputs."""
    x, w, r = inputs[0], inputs[1], inputs[2]
    opt = list(inputs[3:]) + [None] * 5
    bias, lens, h0 = opt[0], opt[1], opt[2]
    c0, peep = (opt[3], opt[4]) if node.op == "LSTM" else (None, None)
    out_dtype = x.dtype
    ct = np.float64 if x.dtype == np.float64 else np.float32
    layout = int(node.attrs.get("layout", 0) or 0)
    if layout:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    x, w, r = x.astype(ct), w.astype(ct), r.astype(ct)
    T, B = x.shape[:2]
    nd, H = directions(node), r.shape[-1]
    acts = activations(node)
    per = len(acts) // nd
    clip = node.attrs.get("clip")
    clip = None if clip is None else float(clip)
    lens = np.full(B, T, np.int64) if lens is None else np.clip(lens.astype(np.int64), 0, T)
    y = np.zeros((T, nd, B, H), ct)
    yh = np.zeros((nd, B, H), ct)
    yc = np.zeros((nd, B, H), ct)
    reverse = (node.attrs.get("direction", "forward") or "forward") == "reverse"
    for d in range(nd):
        unit = _Unit(node.op, node.attrs, w[d], r[d],
                     None if bias is None else bias[d].astype(ct),
                     None if peep is None else peep[d].astype(ct),
                     acts[d * per:(d + 1) * per], clip)
        h = np.zeros((B, H), ct) if h0 is None else h0[d].astype(ct)
        c = np.zeros((B, H), ct) if c0 is None else c0[d].astype(ct)
        backward = reverse or d == 1
        for t in (range(T - 1, -1, -1) if backward else range(T)):
            hn, cn = unit.step(x[t], h, c)
            live = (t < lens)[:, None]
            h = np.where(live, hn, h)
            if cn is not None:
                c = np.where(live, cn, c)
            y[t, d] = np.where(live, hn, 0)
        empty = (lens == 0)[:, None]
        yh[d], yc[d] = np.where(empty, 0, h), np.where(empty, 0, c)
    if layout:
        y, yh, yc = y.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2), yc.transpose(1, 0, 2)
    outs = [y, yh] + ([yc] if node.op == "LSTM" else [])
    return [np.ascontiguousarray(o, dtype=out_dtype) for o in outs]
