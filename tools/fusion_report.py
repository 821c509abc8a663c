"""Nodes before/after optimization and the fusions applied, for zoo models.
    python tools/fusion_report.py mobilenet_v2-op13 minilm_l6-op17"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.models import ZOO  # noqa: E402

from edgenn.converters.onnx.importer import import_onnx  # noqa: E402
from edgenn.graph.passes import optimize  # noqa: E402

for name in sys.argv[1:]:
    path, _ = ZOO[name]()
    graph = import_onnx(str(path))
    report = optimize(graph)
    print(f"{name}: {report['nodes_before']} -> {report['nodes_after']} nodes "
          f"({graph.meta['source_nodes']} in the ONNX file incl. Constant nodes)")
    print("  fusions:", report["fusions"])
    print("  ops after:", dict(sorted(report["ops_after"].items(), key=lambda kv: -kv[1])))
