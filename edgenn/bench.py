"""Side-by-side latency: edgenn vs onnxruntime vs MNN on one model, in one process.

Rounds are interleaved (edgenn, ort, mnn, edgenn, ort, mnn, ...) so machine noise hits
every runtime alike; medians are the headline. Used by `edgenn bench` and bench/.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Runner:
    name: str
    run: callable
    load_s: float
    times: list = field(default_factory=list)


def edgenn_runner(model, threads, shapes, reference=False) -> Runner:
    from .api import InferenceSession
    t0 = time.perf_counter()
    # tune="cached": a benchmark times the tuned plan, so it is tuned before the first run
    sess = InferenceSession(model, threads=threads, input_shapes=shapes or None,
                            reference=reference, tune="cached")
    load = time.perf_counter() - t0
    runner = Runner("edgenn-ref" if reference else "edgenn",
                    lambda feeds: sess.run(None, feeds), load)
    runner.session = sess          # its plan: the kernels chosen
    return runner


def onnxruntime_runner(model, threads, shapes=None) -> Runner:
    import onnxruntime as ort
    t0 = time.perf_counter()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    return Runner("onnxruntime", lambda feeds: sess.run(None, feeds), time.perf_counter() - t0)


def mnn_runner(model, threads, shapes=None) -> Runner:
    """Convert with MNN's own mnnconvert, run through MNN.nn with numThread = threads."""
    import MNN.expr as F
    import MNN.nn as nn
    import onnx
    proto = onnx.load(model, load_external_data=False)
    inputs = [i.name for i in proto.graph.input
              if i.name not in {t.name for t in proto.graph.initializer}]
    outputs = [o.name for o in proto.graph.output]
    t0 = time.perf_counter()
    path = mnn_convert(model, tempfile.mkdtemp(prefix="edgenn-mnn-"))
    rt = nn.create_runtime_manager(({"backend": "CPU", "numThread": threads,
                                     "precision": "high"},))
    module = nn.load_module_from_file(path, inputs, outputs, runtime_manager=rt)

    dtypes = {"float32": F.float, "float64": F.double, "int32": F.int, "int64": F.int64,
              "uint8": F.uint8}

    def run(feeds):
        xs = [F.const(np.require(feeds[n], requirements="C"), list(feeds[n].shape), F.NCHW,
                      dtypes[feeds[n].dtype.name]) for n in inputs]
        return [np.asarray(y.read()) for y in module.forward(xs)]
    return Runner("mnn", run, time.perf_counter() - t0)


def mnn_convert(model: str, out_dir: str) -> str:
    """MNN's ONNX converter (its `_tools` extension, in a child process). Not through the
    `mnnconvert` script: that imports MNN's telemetry logger, which runs `pip install -U
    aliyun-log-python-sdk` when it is missing, and that package's protobuf < 6 breaks onnx
    (seen with MNN 3.6: onnx failed to import after the first MNN comparison)."""
    import sys
    path = os.path.join(out_dir, "model.mnn")
    argv = ["mnnconvert", "-f", "ONNX", "--modelFile", model, "--MNNModel", path,
            "--bizCode", "edgenn"]
    done = subprocess.run([sys.executable, "-c", f"import _tools; _tools.mnnconvert({argv!r})"],
                          capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(path):
        raise RuntimeError(f"MNN's converter failed (pip install mnn?): {done.stderr[-500:]}")
    return path


def mnn_int8_model(model: str, images: list[np.ndarray], mean, std) -> str:
    """The MNN int8 peer: mnnconvert, then MNN's own post-training quantizer (KL activations,
    max-abs weights) on `images` (NCHW float32, normalized by mean / std per channel, RGB);
    they are written back as PNGs, the form its calibration reads (needs scikit-image).
    MNN 3.6's `mnnquant` script passes its arguments wrongly, so its tool (the `_tools`
    extension) is called directly, in a child process. Returns the int8 .mnn path."""
    import json
    import sys

    from skimage.io import imsave
    tmp = tempfile.mkdtemp(prefix="edgenn-mnn-int8-")
    src = mnn_convert(model, tmp)
    folder = os.path.join(tmp, "calib")
    os.makedirs(folder)
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    for i, x in enumerate(images):
        rgb = (x[0].transpose(1, 2, 0) * std + mean) * 255.0
        imsave(os.path.join(folder, f"{i}.png"), np.clip(np.rint(rgb), 0, 255).astype(np.uint8),
               check_contrast=False)
    h, w = images[0].shape[2:]
    config = {"format": "RGB", "mean": list(mean * 255.0), "normal": list(1.0 / (std * 255.0)),
              "width": int(w), "height": int(h), "path": folder + "/",
              "used_image_num": len(images), "feature_quantize_method": "KL",
              "weight_quantize_method": "MAX_ABS"}
    with open(os.path.join(tmp, "quant.json"), "w") as f:
        json.dump(config, f)
    dst = os.path.join(tmp, "model.int8.mnn")
    call = f"import _tools; _tools.mnnquant({['mnnquant', src, dst, f.name]!r})"
    done = subprocess.run([sys.executable, "-c", call], capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(dst):
        raise RuntimeError(f"MNN's quantizer failed: {done.stderr[-500:]}")
    return dst


def mnn_session_runner(path: str, threads: int, name: str = "mnn") -> Runner:
    """A .mnn model through MNN's Session API (one float32 NCHW input and output). Its
    Module API (mnn_runner) returns wrong results for int8 models (MNN 3.6: NaN or
    values that change between calls), the Session API is deterministic."""
    import MNN
    t0 = time.perf_counter()
    interp = MNN.Interpreter(path)
    session = interp.createSession({"backend": "CPU", "numThread": threads,
                                    "precision": "normal"})
    inp, out = interp.getSessionInput(session), interp.getSessionOutput(session)
    in_shape, out_shape = tuple(inp.getShape()), tuple(out.getShape())
    host = MNN.Tensor(out_shape, MNN.Halide_Type_Float, np.zeros(out_shape, np.float32),
                      MNN.Tensor_DimensionType_Caffe)

    def run(feeds):
        (x,) = feeds.values()
        inp.copyFrom(MNN.Tensor(in_shape, MNN.Halide_Type_Float, np.ascontiguousarray(x),
                                MNN.Tensor_DimensionType_Caffe))
        interp.runSession(session)
        out.copyToHostTensor(host)
        return [np.array(host.getData(), dtype=np.float32).reshape(out_shape)]
    runner = Runner(name, run, time.perf_counter() - t0)
    runner.keep = (interp, session)
    return runner


def litert_runner(model, threads, shapes=None) -> Runner:
    """LiteRT (ai-edge-litert: TFLite's runtime, XNNPACK delegate) on a .tflite file."""
    from ai_edge_litert.interpreter import Interpreter
    t0 = time.perf_counter()
    it = Interpreter(model_path=model, num_threads=threads)
    it.allocate_tensors()
    ins = [(d["name"], d["index"]) for d in it.get_input_details()]
    outs = [d["index"] for d in it.get_output_details()]

    def run(feeds):
        for name, index in ins:
            it.set_tensor(index, feeds[name])
        it.invoke()
        return [it.get_tensor(i) for i in outs]
    return Runner("litert", run, time.perf_counter() - t0)


PEERS = {"onnxruntime": onnxruntime_runner, "mnn": mnn_runner, "litert": litert_runner}


def compare(model: str, feeds: dict, threads: int = 1, peers=("onnxruntime",),
            rounds: int = 20, warmup: int = 3, shapes=None, reference=False) -> list[Runner]:
    runners = [edgenn_runner(model, threads, shapes, reference)]
    runners += [PEERS[p](model, threads, shapes) for p in peers]
    return interleave(runners, feeds, rounds, warmup)


def interleave(runners: list[Runner], feeds: dict, rounds: int, warmup: int = 3,
               seed: int = 0) -> list[Runner]:
    """Warm every runner up, then time `rounds` rounds, each runner once per round, into
    .times. The order within a round is shuffled (seeded): in a fixed order A B C A B C
    every runner always followed the same one, whose run decided how cold the caches were
    (edgenn int8 always came right after onnxruntime fp32 had streamed its 14 MB of
    weights, edgenn fp32 after the 3.8 MB int8 model); shuffled, each runner follows each
    of the others, alike."""
    order = np.random.default_rng(seed)
    for r in runners:
        for _ in range(warmup):
            r.run(feeds)
    for _ in range(rounds):
        for i in order.permutation(len(runners)):
            r = runners[i]
            t0 = time.perf_counter()
            r.run(feeds)
            r.times.append(time.perf_counter() - t0)
    return runners


def cosine(a, b) -> float:
    """Cosine similarity of two outputs, flattened, in float64 (fidelity columns)."""
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def script_args(description: str, **extra):
    """The side-by-side scripts' command line: models, --threads, --rounds (+ extra
    options: name=default)."""
    import argparse
    p = argparse.ArgumentParser(description=description)
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", default="", help="also write the medians to this file (the "
                   "run record tools/perf_pages.py turns into docs/performance/ pages)")
    for name, default in extra.items():
        if isinstance(default, bool):   # a switch: --<name> (off by default) or --no-<name>
            flag = "--no-" + name if default else "--" + name
            p.add_argument(flag, dest=name, action="store_false" if default else "store_true")
        else:
            p.add_argument("--" + name, default=default, type=type(default))
    args = p.parse_args()
    from .kernels import isa
    print(f"CPU: {isa.describe()}")   # every figure names the CPU and the kernel tier
    return args


def run_record(args, results: list[tuple[str, dict, list[Runner]]]) -> dict:
    """A side-by-side run as data: the CPU and kernel tier, the command, the runtimes'
    versions, and per model (name, input shapes, runners) each runner's median and min in
    ms. Written by the scripts' --json; tools/perf_pages.py renders the records."""
    import datetime
    import importlib.metadata
    import platform
    import sys

    from .kernels import isa

    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None
    return {"cpu": isa.describe(), "machine": platform.machine(),
            "date": datetime.date.today().isoformat(), "threads": args.threads,
            "rounds": args.rounds,
            "command": " ".join(["python", os.path.relpath(sys.argv[0])] + sys.argv[1:]),
            "versions": {d: version(d) for d in ("edgenn", "onnxruntime", "onnxruntime-genai",
                                                 "MNN", "ai-edge-litert")},
            "models": [{"model": name, "shapes": {k: list(v) for k, v in shapes.items()},
                        "median_ms": {r.name: float(np.median(r.times)) * 1e3 for r in rs},
                        "min_ms": {r.name: min(r.times) * 1e3 for r in rs}}
                       for name, shapes, rs in results]}


def write_record(path: str, record: dict) -> None:
    import json
    with open(path, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")


def table(runners: list[Runner], threads: int) -> str:
    base = float(np.median(runners[0].times))
    rows = [f"{'runtime':12} {'median ms':>10} {'min':>8} {'max':>8} {'load ms':>9} "
            f"{'vs ' + runners[0].name:>12}   ({threads} thread(s), {len(runners[0].times)} "
            f"interleaved rounds)"]
    for r in runners:
        med = float(np.median(r.times))
        rows.append(f"{r.name:12} {med * 1e3:10.2f} {min(r.times) * 1e3:8.2f} "
                    f"{max(r.times) * 1e3:8.2f} {r.load_s * 1e3:9.1f} {med / base:11.2f}x")
    return "\n".join(rows)


def onnxruntime_int8_model(model: str, calibration: list[dict], out_dir: str | None = None) -> str:
    """The int8 peer: onnxruntime's own static quantizer, as its docs recommend it
    (quant_pre_process to fold BatchNorm and infer shapes first, then quantize_static with
    QDQ, per-channel s8 weights, u8 activations, min-max calibration on `calibration`).
    Cached by the model bytes and the calibration data; returns the int8 .onnx path."""
    import hashlib

    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    digest = hashlib.sha256(b"recipe 2: opset >= 13, pre-processed, QDQ per-channel u8/s8")
    digest.update(open(model, "rb").read())
    for feeds in calibration:
        for name in sorted(feeds):
            digest.update(name.encode() + np.ascontiguousarray(feeds[name]).tobytes())
    out_dir = out_dir or os.path.join(tempfile.gettempdir(), "edgenn-ort-int8")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, digest.hexdigest()[:16] + ".int8.onnx")
    if os.path.exists(out):
        return out

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.items = iter(calibration)

        def get_next(self):
            return next(self.items, None)

    import onnx
    proto = onnx.load(model)
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    pre = out + ".pre.onnx"
    if opset < 13:   # per-axis DequantizeLinear needs opset 13 (else ORT writes an invalid model)
        from onnx import version_converter
        model = out + ".op13.onnx"
        onnx.save(version_converter.convert_version(proto, 13), model)
    quant_pre_process(model, pre, skip_symbolic_shape=True)
    quantize_static(pre, out + ".tmp", Reader(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    os.replace(out + ".tmp", out)
    for tmp in (pre, out + ".op13.onnx"):
        if os.path.exists(tmp):
            os.remove(tmp)
    return out


def onnxruntime_dynamic_model(model: str, reduce_range: bool = False, preprocess: bool = False,
                              out_dir: str | None = None) -> str:
    """onnxruntime's quantize_dynamic as its docs give it for transformers (int8 weights per
    tensor, activations quantized per call by DynamicQuantizeLinear; reduce_range: 7-bit
    weights, what it recommends on AVX2 machines without VNNI; preprocess: quant_pre_process
    first, which folds BatchNormalization into the convs). Cached by the model bytes;
    returns the .onnx path."""
    import hashlib

    from onnxruntime.quantization import QuantType, quantize_dynamic

    digest = hashlib.sha256(f"dynamic s8 reduce_range={reduce_range} pre={preprocess}".encode())
    digest.update(open(model, "rb").read())
    out_dir = out_dir or os.path.join(tempfile.gettempdir(), "edgenn-ort-int8")
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, digest.hexdigest()[:16] + ".dyn.onnx")
    if not os.path.exists(out):
        src = model
        if preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process
            src = out + ".pre.onnx"
            quant_pre_process(model, src, skip_symbolic_shape=True)
        quantize_dynamic(src, out + ".tmp.onnx", weight_type=QuantType.QInt8,
                         reduce_range=reduce_range)
        os.replace(out + ".tmp.onnx", out)
        if src != model:
            os.remove(src)
    return out
