"""Quantized embedding tables: every large Gather over a constant 2-D float table becomes
a QGather over int8 codes with one scale per row (bits=8) or int4 codes with one scale per
block of 32 values of a row (bits=4), the scales fitted by ADMM (compress/weights.py's
codec). The table is 4x / ~7x smaller on disk and in memory (the codes are what is
mapped), and only the gathered rows are dequantized at run time (kernels/tensor/embedding.py).
In the .enn file the codes are int8 / uint8 blobs, so entropy coding (graph/entropy.py)
applies to them as to any quantized weight.

A table another node also reads (e.g. an LM head tied to the token embedding) is left
alone: quantizing it would change that node too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph.ir import Graph, Node
from . import weights  # noqa: F401 - registers the ADMM scale fitter with the codec
from .weights import encode

MIN_ROWS = 1024


@dataclass
class EmbeddingReport:
    tables: dict = field(default_factory=dict)    # const name -> (rows, dim, fp32 B, coded B)

    @property
    def bytes_before(self) -> int:
        return sum(t[2] for t in self.tables.values())

    @property
    def bytes_after(self) -> int:
        return sum(t[3] for t in self.tables.values())

    def table(self) -> str:
        rows = [f"quantized {len(self.tables)} embedding tables: "
                f"{self.bytes_before / 1e6:.2f} -> {self.bytes_after / 1e6:.2f} MB"]
        rows += [f"  {name[:48]:48} {v:>8,} x {d:<5} {b / 1e6:8.2f} -> {a / 1e6:6.2f} MB"
                 for name, (v, d, b, a) in self.tables.items()]
        return "\n".join(rows)


def embedding_gathers(graph: Graph, min_rows: int = MIN_ROWS):
    """-> {table const name: [Gather nodes]} for the tables only Gathers (axis 0) read."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name in graph.consts:
                readers.setdefault(name, []).append((node, i))
    found = {}
    for name, uses in readers.items():
        w = graph.consts[name]
        if w.ndim != 2 or w.dtype != np.float32 or w.shape[0] < min_rows \
                or name in graph.output_names():
            continue
        if all(n.op == "Gather" and i == 0 and int(n.attrs.get("axis", 0)) in (0, -2)
               for n, i in uses):
            found[name] = [n for n, _ in uses]
    return found


def quantize_embeddings(graph: Graph, bits: int = 8, min_rows: int = MIN_ROWS,
                        fit: str = "admm") -> EmbeddingReport:
    """Replace the graph's embedding Gathers by QGathers (see the module doc); the graph's
    node list and consts are changed, its Node objects are not."""
    if bits not in (8, 4):
        raise ValueError(f"embedding tables are int8 or int4, not {bits} bits")
    report = EmbeddingReport()
    for name, gathers in embedding_gathers(graph, min_rows).items():
        w = graph.consts.pop(name)
        coded = encode(w, 0, bits, fit=fit)
        rows, dim = w.shape
        scale = coded["scale"]                                   # (rows, blocks)
        codes = coded["q"].reshape(rows, -1)
        codes_name, scale_name = graph.unique_name(name + "_q"), graph.unique_name(name + "_s")
        graph.consts[codes_name], graph.consts[scale_name] = codes, scale
        attrs = {"bits": bits, "block": int(coded["meta"]["block"]), "dim": int(dim)}
        new = {id(n): Node("QGather", [codes_name, scale_name, n.inputs[1]], list(n.outputs),
                           dict(attrs), n.name) for n in gathers}
        # new Node objects: a graph sharing nodes with this one (a copy) is not changed
        graph.nodes = [new.get(id(n), n) for n in graph.nodes]
        report.tables[name] = (rows, dim, w.nbytes, codes.nbytes + scale.nbytes)
    return report
