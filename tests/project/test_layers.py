"""Layers import downward only (DESIGN.md): graph <- kernels <- runtime <- quant /
compress / scale / lm <- api, cli. Checked on every import statement of every module, the
ones inside functions included (a lazy upward import is still an upward import)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "edgenn"
TOP = {"api", "cli", "bench", "tools", "demo"}
# package -> packages (or top modules) it must never import
FORBIDDEN = {
    "graph": {"kernels", "runtime", "converters", "quant", "compress", "scale"} | TOP,
    "kernels": {"runtime", "converters", "quant", "compress", "scale"} | TOP,
    "converters": {"runtime", "quant", "compress", "scale"} | TOP,
    "runtime": {"quant", "compress", "scale"} | TOP,
    "quant": {"scale"} | TOP,
    "compress": {"scale"} | TOP,
    "scale": TOP,
    "lm": {"quant", "compress", "scale"} | TOP,
}


def _targets(path: Path, tree: ast.AST):
    """Top-level edgenn package (or module) of every import in the file."""
    here = path.relative_to(PKG).parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(here[:len(here) - node.level + 1]) if node.level > 1 else list(here)
                parts = base + (node.module.split(".") if node.module else [])
                names = parts[:1] or [a.name for a in node.names]
            elif node.module and node.module.startswith("edgenn."):
                names = node.module.split(".")[1:2]
            else:
                continue
            yield from ((n, node.lineno) for n in names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("edgenn."):
                    yield a.name.split(".")[1], node.lineno
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            name = _literal_prefix(node.args[0])       # importlib.import_module("edgenn.x")
            if name.startswith("edgenn.") and len(name.split(".")) > 2:
                yield name.split(".")[1], node.lineno


def _is_import_module(func) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module") or \
        (isinstance(func, ast.Name) and func.id == "import_module")


def _literal_prefix(arg) -> str:
    """The constant text a module name starts with ("edgenn.kernels.native", or the part of
    an f-string before its first placeholder)."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value)
    return ""


def test_layers_import_downward_only():
    bad = []
    for path in PKG.rglob("*.py"):
        layer = path.relative_to(PKG).parts[0]
        if layer not in FORBIDDEN:
            continue
        tree = ast.parse(path.read_text())
        for target, line in _targets(path, tree):
            if target in FORBIDDEN[layer]:
                bad.append(f"{path.relative_to(PKG)}:{line} imports {target}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


# the fast kernels (every family folder of edgenn/kernels but the NumPy references, and the
# module that registers them) and the runtime
COMPILED = tuple(f"edgenn.kernels.{d.name}" for d in (PKG / "kernels").iterdir()
                 if d.is_dir() and d.name not in ("reference", "__pycache__")) + \
    ("edgenn.kernels.fast", "edgenn.runtime")


def test_importing_and_optimizing_load_no_compiled_kernel(tmp_path):
    """Shape inference, the passes and ONNX / .enn import use the shape rules and the
    reference kernels only: in a fresh process that converts, optimizes, infers shapes
    and reloads a model, neither the compiled kernels nor the runtime are imported."""
    import subprocess
    import sys
    code = f"""
import sys
from edgenn.converters import source
from edgenn.demo import DEMO_MODEL
from edgenn.graph import format as enn
from edgenn.graph.infer import infer
graph = source.load(DEMO_MODEL)
infer(graph, {{"image": (2, 1, 8, 8)}})
enn.save(graph, {str(tmp_path / "m.enn")!r})
source.load({str(tmp_path / "m.enn")!r})
loaded = sorted(m for m in sys.modules
                if m.startswith({COMPILED!r}))
assert not loaded, loaded
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]

