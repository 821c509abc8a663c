"""PyTorch front door: edgenn.from_torch(module, example_inputs) exports the module with
torch.onnx (the dynamo exporter; the TorchScript one when dynamo cannot export it),
loads the ONNX into a session, and checks the session against the module itself on the
example inputs before handing it over (as `edgenn check` checks against onnxruntime).

torch is an optional dependency (the `test` extra has it; a device needs none of this).
"""
from __future__ import annotations

import io
import warnings

import numpy as np

from .errors import EdgennError, InputError, MissingDependencyError


class ExportMismatchError(EdgennError):
    """The exported model's outputs differ from the PyTorch module's on the examples."""


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError("from_torch needs PyTorch: pip install torch") from exc
    return torch


def _as_tuple(example_inputs) -> tuple:
    torch = _torch()
    items = example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    out = []
    for k, x in enumerate(items):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        if not isinstance(x, torch.Tensor):
            raise InputError(f"example input {k} is a {type(x).__name__}: give tensors or "
                             "numpy arrays")
        out.append(x)
    if not out:
        raise InputError("from_torch needs at least one example input")
    return tuple(out)


def _flat(outputs) -> list[np.ndarray]:
    """The module's outputs (tensor, tuple / list / dict of them, nested) as arrays, in the
    order torch.onnx writes them."""
    torch = _torch()
    if isinstance(outputs, torch.Tensor):
        return [outputs.detach().cpu().numpy()]
    if isinstance(outputs, dict):
        return [a for v in outputs.values() for a in _flat(v)]
    if isinstance(outputs, (tuple, list)):
        return [a for v in outputs for a in _flat(v)]
    return []


def export_onnx(module, example_inputs, input_names=None, output_names=None,
                dynamic_axes=None, opset: int = 18, exporter: str = "auto") -> tuple[bytes, str]:
    """-> (ONNX bytes, "dynamo" | "torchscript"). exporter: "auto" (dynamo, falling back
    to the TorchScript exporter), "dynamo" or "torchscript"."""
    torch = _torch()
    if exporter not in ("auto", "dynamo", "torchscript"):
        raise InputError(f"exporter must be auto, dynamo or torchscript, got {exporter!r}")
    args = _as_tuple(example_inputs)
    module.eval()
    errors = []
    for kind in (("dynamo", "torchscript") if exporter == "auto" else (exporter,)):
        buf = io.BytesIO()
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                if kind == "dynamo":
                    dyn = None
                    if dynamic_axes:
                        names = input_names or [f"input_{k}" for k in range(len(args))]
                        dyn = {n: {a: torch.export.Dim.AUTO for a in axes}
                               for n, axes in dynamic_axes.items() if n in names}
                        dyn = tuple(dyn.get(n) for n in names)
                    prog = torch.onnx.export(module, args, None, dynamo=True,
                                             input_names=input_names,
                                             output_names=output_names, dynamic_shapes=dyn,
                                             opset_version=max(opset, 18), verbose=False)
                    buf.write(prog.model_proto.SerializeToString())
                else:
                    torch.onnx.export(module, args, buf, dynamo=False, input_names=input_names,
                                      output_names=output_names, dynamic_axes=dynamic_axes,
                                      opset_version=min(opset, 20), do_constant_folding=True)
            return buf.getvalue(), kind
        except Exception as exc:     # noqa: BLE001 - the exporter's many failure types
            errors.append(f"{kind}: {type(exc).__name__}: {str(exc)[:300]}")
    raise EdgennError("torch.onnx could not export the module:\n  " + "\n  ".join(errors))


def from_torch(module, example_inputs, *, input_names=None, output_names=None,
               dynamic_axes=None, opset: int = 18, exporter: str = "auto",
               tolerance: float = 1e-4, save: str | None = None, **session_kwargs):
    """Export `module` (eval mode) through torch.onnx, load it, check it against the module
    on `example_inputs` (max |a - b| / max |b| per output <= tolerance, else
    ExportMismatchError naming each output's error) and return the InferenceSession.
    save: also write the model there (.onnx: the export; .enn: edgenn's optimized form).
    The session's `from_torch` attribute says which exporter ran and the errors found."""
    from .api import InferenceSession
    from .tools import rel_err
    torch = _torch()
    args = _as_tuple(example_inputs)
    data, kind = export_onnx(module, args, input_names, output_names, dynamic_axes, opset,
                             exporter)
    sess = InferenceSession(data, **session_kwargs)
    feeds = {a.name: x.detach().cpu().numpy() for a, x in zip(sess.get_inputs(), args)}
    ours = sess.run(None, feeds)
    with torch.no_grad():
        theirs = _flat(module(*args))
    if len(ours) != len(theirs):
        raise ExportMismatchError(f"the export has {len(ours)} outputs, the module "
                                  f"returns {len(theirs)}")
    errs = [rel_err(a, b) if a.shape == b.shape else float("inf")
            for a, b in zip(ours, theirs)]
    if max(errs, default=0.0) > tolerance:
        rows = ", ".join(f"{o.name}: {e:.3g}" for o, e in zip(sess.get_outputs(), errs))
        raise ExportMismatchError(f"edgenn's outputs differ from the module's ({kind} "
                                  f"export) past {tolerance:g}: {rows}")
    sess.from_torch = {"exporter": kind, "rel_err": errs}
    if save:
        if save.endswith(".enn"):
            from .api import convert
            convert(data, save)
        else:
            from .graph.format import write_atomic
            write_atomic(save, data)
    return sess
