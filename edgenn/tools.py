"""What the CLI's inspect/check/run need beyond the session: feeds, reports, comparisons."""
from __future__ import annotations

import os
import time
from collections import Counter

import numpy as np

from .errors import InputError


def random_feeds(sess, shapes: dict | None = None, seed: int = 0) -> dict:
    """Random inputs for every model input. Dynamic dims: `shapes`, else 1 for a leading
    (batch) dim; other dynamic dims must be given."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in sess.get_inputs():
        shape = list((shapes or {}).get(arg.name, arg.shape))
        open_dims = [i for i, d in enumerate(shape) if not isinstance(d, int) or d < 0]
        if open_dims == [0]:
            shape[0] = 1
        elif open_dims:
            raise InputError(f"input {arg.name!r} has dynamic dims {arg.shape}: give its "
                             f"shape, e.g. --shape {arg.name}=" +
                             ",".join(str(d) if isinstance(d, int) and d > 0 else "N"
                                      for d in arg.shape))
        if arg.dtype.startswith("float"):
            feeds[arg.name] = rng.standard_normal(shape).astype(arg.dtype)
        elif arg.dtype == "bool":
            feeds[arg.name] = rng.random(shape) < 0.5
        else:  # ids, masks, indices: small non-negative values are valid for all of them
            feeds[arg.name] = rng.integers(0, 2, size=shape).astype(arg.dtype)
    return feeds


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max|got - want| / max|want|: the relative error the tests and `check` quote."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.size == 0:
        return 0.0
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-12))


def check(model: str, feeds: dict, shapes: dict, threads: int = 1) -> tuple[str, float]:
    """Run edgenn and onnxruntime on the same inputs. -> (report text, worst rel error)."""
    from .api import is_enn
    from .api import InferenceSession
    if is_enn(model):
        raise InputError("check compares against onnxruntime: give the .onnx model")
    import onnxruntime as ort
    t0 = time.perf_counter()
    sess = InferenceSession(model, threads=threads, input_shapes=shapes or None)
    t_load = time.perf_counter() - t0
    feeds = feeds or random_feeds(sess, shapes)
    t0 = time.perf_counter()
    ours = sess.run(None, feeds)
    t_run = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    ref = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    theirs = ref.run(None, feeds)
    rows = [f"edgenn load {t_load * 1e3:.1f} ms, first run {t_run * 1e3:.1f} ms",
            f"{'output':32} {'shape':>18} {'max abs err':>12} {'max rel err':>12}"]
    worst = 0.0
    for arg, a, b in zip(sess.get_outputs(), ours, theirs):
        if a.shape != b.shape:
            rows.append(f"{arg.name:32} shape {a.shape} != onnxruntime {b.shape}")
            worst = float("inf")
            continue
        if a.dtype.kind in "fc":
            err = rel_err(a, b)
            abs_err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        else:
            err = abs_err = float(np.count_nonzero(a != b))
        worst = max(worst, err)
        rows.append(f"{arg.name:32} {str(a.shape):>18} {abs_err:12.3g} {err:12.3g}")
    return "\n".join(rows), worst


def describe(model) -> str:
    """Inputs, outputs, op counts, parameters, sizes and fusions of a model."""
    from .api import is_enn, load
    graph = load(model)
    params = sum(int(v.size) for v in graph.consts.values())
    nbytes = sum(int(v.nbytes) for v in graph.consts.values())
    lines = [f"model: {model if isinstance(model, str) else type(model).__name__}"]
    if isinstance(model, str):
        lines[0] += f" ({os.path.getsize(model) / 1e6:.2f} MB, "
        lines[0] += ".enn)" if is_enn(model) else "ONNX, converted on the fly)"
    lines += [f"  input  {v.name}: {v.dtype}{list(v.shape)}" for v in graph.inputs]
    lines += [f"  output {v.name}: {v.dtype}{list(v.shape)}" for v in graph.outputs]
    meta = graph.meta
    lines.append(f"nodes: {len(graph.nodes)} (source model: {meta.get('source_nodes', '?')}), "
                 f"opset {meta.get('opset', '?')}")
    lines.append(f"parameters: {params:,} ({nbytes / 1e6:.2f} MB of constants)")
    counts = Counter(n.op for n in graph.nodes)
    lines.append("ops: " + ", ".join(f"{op} x{k}" for op, k in counts.most_common()))
    acts = Counter(n.attrs.get("activation") for n in graph.nodes
                   if n.attrs.get("activation"))
    if acts:
        lines.append("fused activations: " + ", ".join(f"{a} x{k}" for a, k in acts.items()))
    fusions = meta.get("fusions") or {}
    lines.append("passes applied: " + (", ".join(f"{k} x{v}" for k, v in fusions.items())
                                       or "none"))
    return "\n".join(lines)


def describe_plan(sess) -> str:
    """Per step of the (most recent) plan: op, node, output shape, the kernel chosen, why,
    and the measured time of every candidate when they were timed."""
    plan = sess.plan
    if plan is None:
        raise InputError("no plan yet: the model has dynamic input dims; give --shape")
    from .kernels import isa
    variant = ""
    if sess.threads > 1 and not sess.reference:     # which whole plan won (PLAN_VARIANTS)
        timed = ", ".join(f"{v} {t * 1e3:.2f} ms" for v, t in sorted(plan.pool_times.items(),
                                                                   key=lambda kv: kv[1]))
        variant = f" on the {plan.variant} plan" + (f" (timed whole: {timed})" if timed else "")
    rows = [f"plan: {len(plan.steps)} steps ({plan.folded_nodes} nodes folded at load), "
            f"{plan.planned_bytes / 1e6:.2f} MB of activation buffers, tune={sess.tune}, "
            f"{sess.threads} thread(s){variant}; CPU: {isa.describe()}"]
    for k, step in enumerate(plan.steps):
        c = step.choice
        times = ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in
                          sorted(c.times.items(), key=lambda kv: kv[1]))
        rows.append(f"{k:4} {step.node.op:18} {step.node.name[:40]:40} -> {c.kernel}"
                    f"{_int8_arithmetic(c.run)}{_simd(c.run)}"
                    f"{' (threads split K)' if getattr(c.run, 'splits_k', False) else ''}"
                    f"  [{c.reason}]"
                    + (f"  {{{times}}}" if times else ""))
    return "\n".join(rows)


def _simd(run) -> str:
    """The instruction set a C kernel object runs on (its .simd), '' when it has none."""
    simd = getattr(getattr(run, "kernel", None), "simd", None)
    return f" <{simd}>" if simd else ""


def _int8_arithmetic(run) -> str:
    """Which arithmetic an int8 GEMM kernel runs (see _qgemm.h): '' for other kernels."""
    if not hasattr(run, "wide"):
        return ""
    return " (int16)" if run.wide else " (u8+excess)" if getattr(run, "excess", False) else " (u8)"


def progress_printer(stream=None, after_s: float = 1.0):
    """A progress(done, total) callback: a tqdm bar on a terminal once planning is slow."""
    from .progress import planning_bar
    return planning_bar(stream, after_s)
