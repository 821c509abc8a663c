"""Small builders shared by tests: one-node and few-node ONNX models, onnxruntime runs,
the `edgenn` command run in-process."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    """inputs/outputs: [(name, np dtype, shape)]; initializers: {name: array}."""
    def vi(name, dtype, shape):
        return helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    graph = helper.make_graph(
        nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_run(model, feeds, literal=False):
    """onnxruntime's outputs, 1 thread; model: a ModelProto or a path. literal: its graph
    optimizations off (every node as written: DQ, float op, Q)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if literal:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    sess = ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_against_ort(model, feeds, exact, rtol, atol, equal_nan=False):
    """Run `model` with onnxruntime and with edgenn's reference interpreter and assert the
    same number of outputs, dtypes and shapes; then values: bit-equal where exact(ort
    output) is true, else within rtol/atol. Returns edgenn's outputs (a list)."""
    from edgenn.converters.onnx.importer import import_onnx
    from edgenn.graph.infer import execute
    want = ort_run(model, feeds)
    got = list(execute(import_onnx(model), feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if exact(w):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return got


def rel_err(a, b):
    from edgenn.tools import rel_err as r
    return r(a, b)


def mlp(sizes=(784, 1024, 1024, 10), rows=1, seed=0, relu_last=False):
    """A dense MLP sizes[0] -> ... -> sizes[-1] on (rows, sizes[0]) float32 inputs "x":
    Gemm (transB, W (N, K) ~ N(0, 1 / K), bias ~ N(0, 0.01)) + Relu between layers (and
    after the last with relu_last), output "y"; weights from `seed`."""
    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], {}, "x"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits[f"w{i}"] = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        inits[f"b{i}"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
        nodes.append(helper.make_node("Gemm", [cur, f"w{i}", f"b{i}"], [f"g{i}"], transB=1,
                                      name=f"fc{i}"))
        cur = f"g{i}"
        if relu_last or i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [cur], [f"r{i}"], name=f"relu{i}"))
            cur = f"r{i}"
    nodes[-1].output[0] = "y"
    return make_model(nodes, [("x", np.float32, [rows, sizes[0]])],
                      [("y", np.float32, [rows, sizes[-1]])], inits)


__all__ = ["make_model", "ort_run", "check_against_ort", "rel_err", "mlp", "TensorProto",
           "helper", "numpy_helper"]


def check_planner_fuses(monkeypatch, path, x, want, op, kernel_prefix, middle, threads=(1,)):
    """The planner's step fusion (runtime/fuse_steps.py) on the model at path: with every
    fused kernel taken as the faster, one `op` step on a `kernel_prefix` kernel, timed, its
    `middle` tensor given no memory, the output as `want`; with none, no such step."""
    import edgenn
    from edgenn.runtime import fuse_steps

    def fused_steps(sess):
        return [s for s in sess.plan.steps if s.node.op == op]
    monkeypatch.setattr(fuse_steps, "fusion_pays", lambda first, second, fused:
                        fused.kernel != "reference")
    for n in threads:
        sess = edgenn.InferenceSession(path, tune="full", threads=n)
        (step,) = fused_steps(sess)
        assert step.choice.kernel.startswith(kernel_prefix)
        assert step.choice.times                     # timed, to be weighed against the pair
        assert middle not in sess.plan.layout.tensors
        np.testing.assert_allclose(sess.run(None, x)[0], want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(fuse_steps, "fusion_pays", lambda *choices: False)
    assert not fused_steps(edgenn.InferenceSession(path, tune="full"))


def nan_interior_planes(monkeypatch, module):
    """Patch module.c8_parts so that every thread's padded plane Q holds NaN in its
    interior cells (its pads zero, as the scratch's fill leaves them): an output computed
    from a row its thread did not fill for the group at hand is then NaN."""
    parts = module.c8_parts

    def with_nan(node, w, ins, xshape, yshape, threads, lanes, lib):
        p = parts(node, w, ins, xshape, yshape, threads, lanes, lib)
        _, _, ph, pw, hp, wp = p.geom
        q = np.zeros((threads, hp, wp, lanes), np.float32)
        q[:, ph:ph + xshape[2], pw:pw + xshape[3]] = np.nan
        p.q = _Fixed(q.reshape(threads, -1))
        return p
    monkeypatch.setattr(module, "c8_parts", with_nan)


class _Fixed:
    """A scratch handle that gives one given array."""
    def __init__(self, a):
        self.a = a

    def get(self):
        return self.a


def run_cli(capsys, *argv):
    """`edgenn *argv` in-process: (exit code, stdout, stderr); never a raw traceback."""
    from edgenn.cli import main
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err
