"""Fine-tune the last layer(s) of a classifier on the device's own data, in NumPy.

The frozen body runs once on the fast plan (its features: the input of the first tuned
layer); the trailing fully connected layers (Gemm, with a fused or separate Relu between
them) are then trained on those features by mini-batch Adam on the softmax cross-entropy
(weight decay on the weights), keeping the parameters of the epoch with the best accuracy
on a validation part of the data. A final Softmax / LogSoftmax stays as it is (training
uses the logits before it). The tuned weights replace the old ones in a copy of the graph,
which saves to .enn like any other (MNN's on-device transfer learning, in edgenn's terms).

    tuned, report = edgenn.train.finetune("digits.enn", images, labels, layers=1)
    edgenn.save(tuned, "digits.tuned.enn")
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError, UnsupportedOpError
from ..graph.ir import Graph, Node, ValueInfo
from ..runtime.session import InferenceSession

HEADS = ("Softmax", "LogSoftmax")


@dataclass
class Layer:
    node: Node            # a Gemm with constant weights
    relu: bool            # a Relu after it (fused attribute or the next node)


def trainable_tail(graph: Graph, layers: int) -> tuple[list[Layer], str]:
    """The last `layers` Gemm layers feeding the output (through at most a final Softmax)
    -> (layers in order, the feature tensor that enters the first)."""
    producer = graph.producers()
    name = graph.outputs[0].name
    node = producer.get(name)
    if node is not None and node.op in HEADS:
        name = node.inputs[0]
    tail: list[Layer] = []
    relu_between = False              # a separate Relu node after the layer found next
    while len(tail) < layers:
        node = producer.get(name)
        if node is not None and node.op == "Relu" and tail:
            relu_between, name = True, node.inputs[0]
            node = producer.get(name)
        if node is None or node.op != "Gemm" or node.inputs[1] not in graph.consts or \
                node.attrs.get("transA", 0) or node.attrs.get("activation", "") not in ("", "Relu"):
            what = "nothing" if node is None else f"{node.op} node {node.name!r}"
            raise UnsupportedOpError({node.op if node else "input": [name]},
                                     f"fine-tuning needs {layers} fully connected layer(s) "
                                     f"(Gemm) at the end of the model; found {what}")
        tail.insert(0, Layer(node, node.attrs.get("activation", "") == "Relu" or relu_between))
        relu_between = False
        name = node.inputs[0]
    return tail, name


def features(graph: Graph, name: str, inputs: np.ndarray, batch: int = 256,
             threads: int = 1) -> np.ndarray:
    """The tensor `name` for every row of `inputs`, through the graph's fast plan."""
    body = Graph(graph.nodes, graph.inputs, [ValueInfo(name, "float32", ())], graph.consts,
                 dict(graph.meta))
    sess = InferenceSession(body, threads=threads)
    key = graph.inputs[0].name
    out = [sess.run([name], {key: inputs[i:i + batch]})[0] for i in range(0, len(inputs), batch)]
    return np.concatenate(out).reshape(len(inputs), -1).astype(np.float64)


def _params(graph: Graph, layer: Layer):
    a = layer.node.attrs
    w = np.asarray(graph.consts[layer.node.inputs[1]], np.float64)
    w = w if a.get("transB", 0) else w.T                       # (out, in)
    w = w * a.get("alpha", 1.0)
    b = np.zeros(w.shape[0])
    if len(layer.node.inputs) > 2 and layer.node.inputs[2]:
        b = np.broadcast_to(np.asarray(graph.consts[layer.node.inputs[2]], np.float64)
                            * a.get("beta", 1.0), (w.shape[0],)).copy()
    return w, b


def _forward(params, relus, h):
    acts = [h]
    for (w, b), relu in zip(params, relus):
        h = h @ w.T + b
        if relu:
            h = np.maximum(h, 0)
        acts.append(h)
    return acts


def _grads(params, relus, x, y, weight_decay: float):
    """-> (mean softmax cross-entropy + weight decay, [(d/dW, d/db) per layer])."""
    acts = _forward(params, relus, x)
    z = acts[-1] - acts[-1].max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    loss = -float(np.mean(logp[np.arange(len(y)), y])) + \
        0.5 * weight_decay * sum(float(np.sum(w * w)) for w, _ in params)
    g = np.exp(logp)
    g[np.arange(len(y)), y] -= 1
    g /= len(y)                                              # d loss / d logits
    grads = []
    for k in range(len(params) - 1, -1, -1):                 # backwards through the layers
        w, _ = params[k]
        if relus[k]:
            g = g * (acts[k + 1] > 0)
        grads.append((g.T @ acts[k] + weight_decay * w, g.sum(0)))
        g = g @ w                                            # d loss / d layer input
    return loss, grads[::-1]


def _accuracy(params, relus, x, y) -> float:
    return float(np.mean(_forward(params, relus, x)[-1].argmax(1) == y)) if len(y) else 0.0


def finetune(model, inputs, labels, layers: int = 1, epochs: int = 100, lr: float = 0.01,
             weight_decay: float = 1e-4, batch: int = 32, val: float = 0.2, seed: int = 0,
             threads: int = 1, progress=None) -> tuple[Graph, dict]:
    """-> (a copy of the graph with its last `layers` Gemm layers trained on (inputs,
    labels), a report). inputs: the model's input batch (N, ...); labels: (N,) class ids;
    val: the fraction held out to pick the best epoch; progress(epoch, epochs, val_acc)."""
    from ..api import load
    graph = model if isinstance(model, Graph) else load(model)
    x, y = np.asarray(inputs, np.float32), np.asarray(labels).astype(np.int64).reshape(-1)
    if len(x) != len(y) or len(y) < 2:
        raise InputError(f"{len(x)} inputs and {len(y)} labels: need as many, at least 2")
    tail, feat_name = trainable_tail(graph, layers)
    params = [_params(graph, l) for l in tail]
    relus = [l.relu for l in tail]
    has_bias = [len(l.node.inputs) > 2 and bool(l.node.inputs[2]) for l in tail]
    classes = params[-1][0].shape[0]
    if y.min() < 0 or y.max() >= classes:
        raise InputError(f"labels must be in [0, {classes}), got {y.min()}..{y.max()}")
    feats = features(graph, feat_name, x, threads=threads)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_val = int(round(len(y) * val)) if len(y) >= 5 else 0
    vi, ti = order[:n_val], order[n_val:]
    before = {"train": _accuracy(params, relus, feats[ti], y[ti]),
              "val": _accuracy(params, relus, feats[vi], y[vi])}
    best = (before["val"] if n_val else before["train"], [(w.copy(), b.copy()) for w, b in params])
    m = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
    v = [(np.zeros_like(w), np.zeros_like(b)) for w, b in params]
    step = 0
    for epoch in range(epochs):
        shuffled = ti[rng.permutation(len(ti))]
        for s in range(0, len(ti), batch):
            idx = shuffled[s:s + batch]
            step += 1
            grads = _grads(params, relus, feats[idx], y[idx], weight_decay)[1]
            for k, ((w, b), (gw, gb)) in enumerate(zip(params, grads)):
                pairs = ((w, gw), (b, gb)) if has_bias[k] else ((w, gw),)
                for j, (param, grad) in enumerate(pairs):                # Adam
                    mj, vj = m[k][j], v[k][j]
                    mj *= 0.9
                    mj += 0.1 * grad
                    vj *= 0.999
                    vj += 0.001 * grad * grad
                    param -= lr * (mj / (1 - 0.9 ** step)) / (np.sqrt(vj / (1 - 0.999 ** step)) + 1e-8)
        score = _accuracy(params, relus, feats[vi], y[vi]) if n_val else \
            _accuracy(params, relus, feats[ti], y[ti])
        if score > best[0]:
            best = (score, [(w.copy(), b.copy()) for w, b in params])
        if progress is not None:
            progress(epoch + 1, epochs, score)
    params = best[1]
    tuned = Graph(list(graph.nodes), list(graph.inputs), list(graph.outputs), dict(graph.consts),
                  dict(graph.meta))
    for layer, (w, b) in zip(tail, params):
        a = layer.node.attrs
        wt = w / a.get("alpha", 1.0)
        tuned.consts[layer.node.inputs[1]] = np.ascontiguousarray(
            (wt if a.get("transB", 0) else wt.T).astype(np.float32))
        if len(layer.node.inputs) > 2 and layer.node.inputs[2]:
            tuned.consts[layer.node.inputs[2]] = (b / a.get("beta", 1.0)).astype(np.float32)
    after = {"train": _accuracy(params, relus, feats[ti], y[ti]),
             "val": _accuracy(params, relus, feats[vi], y[vi])}
    report = {"layers": [l.node.name for l in tail], "features": feat_name,
              "samples": {"train": len(ti), "val": len(vi)}, "before": before,
              "after": after, "epochs": epochs}
    tuned.meta["finetune"] = report
    return tuned, report
