"""Kernel test cases for LSTM, GRU and RNN: both layouts, every direction, hidden sizes
around the vector widths, sequence_lens, initial states, peepholes, clip, input_forget,
linear_before_reset and the activations the fast kernels take (Sigmoid / Tanh / Relu)."""
import numpy as np

from edgenn.graph.ir import Node

CONST = {1, 2, 3, 7}   # W, R, B, P: weights at plan time; X, lens, states at run time
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
NACT = {"LSTM": 3, "GRU": 2, "RNN": 1}


def _node(rng, op, T, B, I, H, direction, layout, extra=None, lens=False, peep=False):
    nd = 2 if direction == "bidirectional" else 1
    k, g = 1 / np.sqrt(H), GATES[op]
    f = np.float32
    x = rng.standard_normal((B, T, I) if layout else (T, B, I)).astype(f)
    state = (B, nd, H) if layout else (nd, B, H)
    ins = [x, rng.uniform(-k, k, (nd, g * H, I)).astype(f),
           rng.uniform(-k, k, (nd, g * H, H)).astype(f),
           rng.uniform(-k, k, (nd, 2 * g * H)).astype(f),
           rng.integers(0, T + 1, B).astype(np.int32) if lens else None,
           (rng.standard_normal(state) * 0.5).astype(f)]
    if op == "LSTM":
        ins += [(rng.standard_normal(state) * 0.5).astype(f),
                rng.uniform(-0.5, 0.5, (nd, 3 * H)).astype(f) if peep else None]
    attrs = {"hidden_size": H, "direction": direction, "layout": layout, **(extra or {})}
    names = [f"i{j}" if v is not None else "" for j, v in enumerate(ins)]
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    return Node(op, names, outs, attrs, op.lower()), ins, CONST


def recurrent_cases(op):
    def gen():
        rng = np.random.default_rng(len(op))
        for (T, B, I, H), direction, layout in [
                ((5, 1, 3, 8), "forward", 0), ((4, 3, 7, 17), "reverse", 1),
                ((6, 2, 16, 64), "bidirectional", 0), ((3, 2, 5, 130), "bidirectional", 1),
                ((1, 1, 1, 1), "forward", 0)]:
            yield _node(rng, op, T, B, I, H, direction, layout)
        yield _node(rng, op, 6, 4, 5, 12, "bidirectional", 0, lens=True)
        yield _node(rng, op, 5, 9, 4, 24, "forward", 0, lens=True)   # rows stop mid-group
        yield _node(rng, op, 5, 2, 4, 9, "forward", 0, {"clip": 0.4})
        yield _node(rng, op, 5, 2, 4, 9, "reverse", 0,
                    {"activations": ["Relu", "Sigmoid", "Tanh"][:NACT[op]]})
        if op == "LSTM":
            yield _node(rng, op, 5, 2, 4, 9, "bidirectional", 0, peep=True)
            yield _node(rng, op, 5, 2, 4, 9, "forward", 1, {"input_forget": 1}, peep=True)
        if op == "GRU":
            yield _node(rng, op, 5, 2, 4, 24, "bidirectional", 0, {"linear_before_reset": 1})
    return gen


CASES = {op: recurrent_cases(op) for op in GATES}
