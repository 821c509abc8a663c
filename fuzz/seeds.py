"""Seed corpus of the fuzz harnesses: small real models (the embedded digits CNN) and tiny
graphs over the op families the zoo uses (conv + pool + gemm, attention rows, gather /
slice / concat shape chains), as .onnx and as .enn files."""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits, name):
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def tiny_models() -> dict[str, onnx.ModelProto]:
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s).astype(np.float32)   # noqa: E731
    vi = helper.make_tensor_value_info
    cnn = _model(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "wd"], ["c2"], group=4, pads=[1, 1, 1, 1],
                          strides=[2, 2], name="dw"),
         helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[2, 2], name="pool"),
         helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1, name="fc")],
        [vi("x", F, ["n", 3, 16, 16])], [vi("y", F, None)],
        {"w1": r(4, 3, 3, 3), "b1": r(4), "wd": r(4, 1, 3, 3), "wf": r(5, 4), "bf": r(5)},
        "cnn")
    attn = _model(
        [helper.make_node("MatMul", ["x", "wq"], ["q"], name="q"),
         helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="t"),
         helper.make_node("MatMul", ["q", "xt"], ["s"], name="scores"),
         helper.make_node("Softmax", ["s"], ["p"], axis=-1, name="softmax"),
         helper.make_node("MatMul", ["p", "x"], ["a"], name="mix"),
         helper.make_node("LayerNormalization", ["a", "g", "b"], ["y"], axis=-1, name="ln")],
        [vi("x", F, [1, "seq", 8])], [vi("y", F, None)],
        {"wq": r(8, 8), "g": np.ones(8, np.float32), "b": np.zeros(8, np.float32)}, "attn")
    shapes = _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "i"], ["d"], axis=0, name="gather"),
         helper.make_node("Concat", ["d", "m1"], ["ns"], axis=0, name="concat"),
         helper.make_node("Reshape", ["x", "ns"], ["rs"], name="reshape"),
         helper.make_node("Slice", ["rs", "st", "en"], ["sl"], name="slice"),
         helper.make_node("Sigmoid", ["sl"], ["y"], name="sig")],
        [vi("x", F, ["a", 4, 6])], [vi("y", F, None)],
        {"i": np.array([0], np.int64), "m1": np.array([-1], np.int64),
         "st": np.array([0, 1], np.int64), "en": np.array([8, 20], np.int64)}, "shapes")
    return {"cnn": cnn, "attn": attn, "shapes": shapes}


def write_corpus(directory: str, kind: str) -> list[str]:
    """Seed files for harness `kind` ("onnx", "enn" or "ennf") in `directory`."""
    if kind == "ennf":
        return [_family_seed(directory)]
    import edgenn
    from edgenn.demo import DEMO_MODEL
    os.makedirs(directory, exist_ok=True)
    models = {"digits": onnx.load(DEMO_MODEL), **tiny_models()}
    paths = []
    for name, m in models.items():
        path = os.path.join(directory, f"{name}.{kind}")
        if kind in ("onnx", "onnxproto"):
            data = m.SerializeToString()
        else:
            from edgenn.graph import format as enn
            data = enn.to_bytes(edgenn.load(m))
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
    if kind == "enn":   # the qblock, sparse and zstd readers: int4 codes, pruned weights
        from edgenn.compress.prune import sparsify
        from edgenn.compress.weights import compress_weights
        from edgenn.graph import format as enn
        for name, shrink in (("int4-zstd", lambda g: compress_weights(g, 4)),
                             ("sparse-zstd", lambda g: sparsify(g, 0.8, skip_first=False))):
            g = edgenn.load(DEMO_MODEL)
            shrink(g)
            g.meta["entropy_coding"] = "zstd"
            path = os.path.join(directory, f"digits-{name}.enn")
            with open(path, "wb") as f:
                f.write(enn.to_bytes(g))
            paths.append(path)
    return paths


def _family_seed(directory: str) -> str:
    """A small family of the digits CNN (3 candidates searched, no cache)."""
    import numpy as np

    from edgenn.demo import DEMO_MODEL, DEMO_SAMPLES
    from edgenn.scale.build import build
    os.makedirs(directory, exist_ok=True)
    d = np.load(DEMO_SAMPLES)
    path = os.path.join(directory, "digits.ennf")
    build(DEMO_MODEL, d["images"][:64], {"image": d["images"][64:128],
                                         "labels": d["labels"][64:128]},
          output=path, budget=3, cache_root=None, rounds=3)
    return path
