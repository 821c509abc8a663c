"""onnxruntime user code, unchanged, on `import edgenn as ort` (edgenn/ortcompat.py).

Each test is one snippet of the kind onnxruntime users write, run once with
`ort = onnxruntime` and once with `ort = edgenn`; the two must agree (outputs within
float tolerance, the same exception names, the same metadata)."""
from __future__ import annotations

import json
import os
import warnings

import numpy as np
import onnx
import pytest

import edgenn
from edgenn.demo import DEMO_MODEL

X = np.load(DEMO_MODEL.replace("digits.onnx", "digits_samples.npz"))["images"][:3]


@pytest.fixture(params=["onnxruntime", "edgenn"])
def ort(request):
    import onnxruntime
    return onnxruntime if request.param == "onnxruntime" else edgenn


@pytest.fixture(scope="module")
def reference():
    import onnxruntime
    return onnxruntime.InferenceSession(DEMO_MODEL, providers=["CPUExecutionProvider"]
                                        ).run(None, {"image": X})[0]


@pytest.fixture(scope="module")
def model_with_metadata(tmp_path_factory):
    m = onnx.load(DEMO_MODEL)
    m.doc_string = "digits classifier"
    m.model_version = 3
    m.graph.doc_string = "8x8 digits"
    onnx.helper.set_model_props(m, {"author": "edgenn tests", "classes": "10"})
    path = tmp_path_factory.mktemp("meta") / "digits_meta.onnx"
    onnx.save(m, str(path))
    return str(path)


@pytest.fixture(scope="module")
def conv_relu(tmp_path_factory):
    """A Conv + Relu model built with onnx.helper (edgenn fuses the Relu into the Conv),
    an input and onnxruntime's output: (path, x, y)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("conv_relu") / "conv_relu.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    import onnxruntime
    y = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]
                                     ).run(None, {"x": x})[0]
    return str(path), x, y


def test_session_with_options_and_providers(ort, reference):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    sess = ort.InferenceSession(DEMO_MODEL, sess_options=opts,
                                providers=["CPUExecutionProvider"])
    assert "CPUExecutionProvider" in ort.get_available_providers()
    assert sess.get_providers() == ["CPUExecutionProvider"]
    inp, out = sess.get_inputs()[0], sess.get_outputs()[0]
    assert (inp.name, inp.type, out.name) == ("image", "tensor(float)", "probs")
    y = sess.run([out.name], {inp.name: X})[0]
    np.testing.assert_allclose(y, reference, rtol=1e-4, atol=1e-6)
    y2 = sess.run(None, {inp.name: X}, ort.RunOptions())[0]
    np.testing.assert_allclose(y2, reference, rtol=1e-4, atol=1e-6)


def test_from_bytes_and_optimizations_off(ort, reference):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with open(DEMO_MODEL, "rb") as f:
        sess = ort.InferenceSession(f.read(), opts, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"image": X})[0], reference, rtol=1e-4,
                               atol=1e-6)


def test_unavailable_provider_falls_back_to_cpu(ort, reference):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort.InferenceSession(DEMO_MODEL, providers=[
            ("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    np.testing.assert_allclose(sess.run(None, {"image": X})[0], reference, rtol=1e-4,
                               atol=1e-6)


def test_model_metadata(ort, model_with_metadata):
    meta = ort.InferenceSession(model_with_metadata,
                                providers=["CPUExecutionProvider"]).get_modelmeta()
    assert meta.producer_name == "pytorch"
    assert meta.description == "digits classifier"
    assert meta.graph_description == "8x8 digits"
    assert meta.version == 3
    assert meta.custom_metadata_map == {"author": "edgenn tests", "classes": "10"}


def test_io_binding(ort, reference):
    sess = ort.InferenceSession(DEMO_MODEL, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_cpu_input("image", X)
    binding.bind_output("probs")
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], reference, rtol=1e-4,
                               atol=1e-6)
    # a preallocated output: written in place, in the caller's own array
    out = np.zeros(reference.shape, np.float32)
    value = ort.OrtValue.ortvalue_from_numpy(out)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("image", ort.OrtValue.ortvalue_from_numpy(X))
    binding.bind_ortvalue_output("probs", value)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out, reference, rtol=1e-4, atol=1e-6)
    assert value.shape() == list(reference.shape) and value.data_type() == "tensor(float)"
    got = binding.get_outputs()[0].numpy()
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-6)


def test_io_binding_raw_pointers(ort, conv_relu):
    """Inputs read from, and outputs written into, the caller's own buffers by pointer."""
    path, x, want = conv_relu
    x = x.copy()                         # the caller's own buffer, changed below
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out = np.zeros(want.shape, np.float32)
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    binding.bind_output("y", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-6)     # in the caller's buffer
    value = binding.get_outputs()[0]
    assert value.data_ptr() == out.ctypes.data and value.shape() == list(want.shape)
    assert np.shares_memory(value.numpy(), out)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], want, rtol=1e-4, atol=1e-6)
    # a second run on new data in the same bound buffers; an ONNX element type works too
    x[...] = -x
    again = np.zeros(want.shape, np.float32)
    binding.bind_output("y", "cpu", 0, onnx.TensorProto.FLOAT, list(again.shape),
                        again.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(again, sess.run(None, {"x": x.copy()})[0], rtol=1e-4,
                               atol=1e-6)


def test_run_with_ort_values(ort, conv_relu):
    path, x, want = conv_relu
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    values = sess.run_with_ort_values(["y"], {"x": ort.OrtValue.ortvalue_from_numpy(x)})
    assert isinstance(values, list) and len(values) == 1
    assert isinstance(values[0], ort.OrtValue)
    assert values[0].shape() == list(want.shape) and values[0].data_type() == "tensor(float)"
    np.testing.assert_allclose(values[0].numpy(), want, rtol=1e-4, atol=1e-6)
    every = sess.run_with_ort_values(None, {"x": ort.OrtValue.ortvalue_from_numpy(x)},
                                     ort.RunOptions())
    np.testing.assert_allclose(every[0].numpy(), want, rtol=1e-4, atol=1e-6)


def test_optimized_model_filepath_onnx(ort, conv_relu, tmp_path):
    """The optimized model as an ONNX file at that very path, which onnxruntime runs to
    the original model's outputs."""
    import onnxruntime
    path, x, want = conv_relu
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-6)
    assert os.listdir(tmp_path) == ["optimized.onnx"]
    again = onnxruntime.InferenceSession(str(tmp_path / "optimized.onnx"),
                                         providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(again.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-6)


def test_wrong_output_buffer_is_a_clear_error(conv_relu):
    """edgenn only: a raw-pointer output buffer of another shape or dtype than the model's
    output is refused, naming the output (onnxruntime fails at the run, a RuntimeError);
    the caller's buffer is left as it was."""
    path, x, _ = conv_relu
    sess = edgenn.InferenceSession(path)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    small = np.full((1, 4, 8, 7), 7, np.float32)
    with pytest.raises(edgenn.InputError, match=r"'y'.*\[1, 4, 8, 7\].*\[1, 4, 8, 8\]"):
        binding.bind_output("y", "cpu", 0, np.float32, list(small.shape), small.ctypes.data)
    wide = np.zeros((1, 4, 8, 8), np.float64)
    with pytest.raises(ValueError, match="'y' is float64"):
        binding.bind_output("y", "cpu", 0, np.float64, list(wide.shape), wide.ctypes.data)
    with pytest.raises(edgenn.InputError, match="element_type and shape"):
        binding.bind_output("y", "cpu", 0, None, None, small.ctypes.data)
    assert (small == 7).all() and (wide == 0).all()
    # dims left open by the model are checked at the run, before any buffer is written
    sess = edgenn.InferenceSession(DEMO_MODEL)
    probs = np.full((len(X) + 1, 10), 7, np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("image", X)
    binding.bind_output("probs", "cpu", 0, np.float32, list(probs.shape), probs.ctypes.data)
    with pytest.raises(edgenn.InputError, match="'probs'"):
        sess.run_with_iobinding(binding)
    assert (probs == 7).all()


def test_optimized_model_filepath_onnx_needs_the_convert_extra(conv_relu, tmp_path,
                                                                monkeypatch):
    """edgenn only: without the onnx package the ONNX file cannot be written: edgenn's
    MissingDependencyError names the extra. A .enn path needs no onnx, nor does .ort
    (onnxruntime's own format, which edgenn does not write: .enn appended, a warning)."""
    from edgenn import extras
    monkeypatch.setattr(extras, "have", lambda module: module != "onnx")
    path, x, want = conv_relu
    opts = edgenn.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    with pytest.raises(edgenn.MissingDependencyError, match=r"edgenn\[convert\]"):
        edgenn.InferenceSession(path, opts)
    assert not os.listdir(tmp_path)
    opts.optimized_model_filepath = str(tmp_path / "optimized.enn")
    edgenn.InferenceSession(path, opts)
    np.testing.assert_allclose(
        edgenn.InferenceSession(str(tmp_path / "optimized.enn")).run(None, {"x": x})[0],
        want, rtol=1e-4, atol=1e-6)
    opts.optimized_model_filepath = str(tmp_path / "optimized.ort")
    with pytest.warns(UserWarning, match="optimized.ort.enn"):
        edgenn.InferenceSession(path, opts)
    assert sorted(os.listdir(tmp_path)) == ["optimized.enn", "optimized.ort.enn"]


def test_profiling_writes_a_chrome_trace(ort, tmp_path):
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(DEMO_MODEL, opts, providers=["CPUExecutionProvider"])
    for _ in range(2):
        sess.run(None, {"image": X})
    path = sess.end_profiling()
    assert os.path.exists(path) and os.path.basename(path).startswith("prof")
    events = json.load(open(path))
    runs = [e for e in events if e.get("name") == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert len(runs) >= 2 and nodes
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in runs + nodes)
    assert {"op_name", "provider"} <= set(nodes[0]["args"])


def test_free_dimension_override(ort, reference):
    opts = ort.SessionOptions()
    opts.add_free_dimension_override_by_name("batch", 3)
    sess = ort.InferenceSession(DEMO_MODEL, opts, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"image": X})[0], reference, rtol=1e-4,
                               atol=1e-6)


def test_errors_by_onnxruntime_names(ort, tmp_path):
    E = ort.capi.onnxruntime_pybind11_state
    sess = ort.InferenceSession(DEMO_MODEL, providers=["CPUExecutionProvider"])
    with pytest.raises(ValueError):                       # a missing input
        sess.run(None, {"x": X})
    with pytest.raises(E.InvalidArgument):
        sess.run(None, {"image": X.astype(np.float64)})
    with pytest.raises(E.InvalidArgument):
        sess.run(None, {"image": X[:, :, :7]})
    with pytest.raises(E.InvalidArgument):
        sess.run(["nope"], {"image": X})
    with pytest.raises(E.NoSuchFile):
        ort.InferenceSession(str(tmp_path / "missing.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(E.InvalidProtobuf):
        ort.InferenceSession(b"garbage bytes here", providers=["CPUExecutionProvider"])


def test_optimized_model_filepath_and_run_options(tmp_path, reference):
    """edgenn only: the optimized model is saved (as .enn) and runs the same; a run with
    RunOptions.terminate is refused."""
    opts = edgenn.SessionOptions()
    opts.optimized_model_filepath = str(tmp_path / "opt.enn")
    sess = edgenn.InferenceSession(DEMO_MODEL, opts)
    # the same options' thread count: a plan for another count may choose other kernels
    # (the planner may fuse a step pair at one count and not at the other)
    again = edgenn.InferenceSession(str(tmp_path / "opt.enn"), edgenn.SessionOptions())
    np.testing.assert_array_equal(again.run(None, {"image": X})[0],
                                  sess.run(None, {"image": X})[0])
    ro = edgenn.RunOptions()
    ro.terminate = True
    with pytest.raises(edgenn.capi.onnxruntime_pybind11_state.Fail):
        sess.run(None, {"image": X}, ro)
