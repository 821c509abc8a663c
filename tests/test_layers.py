"""Layers import downward only (DESIGN.md): graph <- kernels <- runtime <- quant /
compress / scale <- api, cli. Checked on every import statement of every module, the
ones inside functions included (a lazy upward import is still an upward import)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "edgenn"
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
