"""Named, ordered pass pipelines and `optimize`, which runs them to a fixed point.

declutter: canonical clean-ups every graph gets (folding, transposes moved until inverse
           pairs cancel, identities, common subexpressions, dead code).
fuse:      pattern fusions, ordered so each sees the form the one before produced:
           explicit zero Pads fold into the next Conv's padding;
           BN and per-channel Mul/Add fold into Conv before the Conv takes a residual or
           an activation; the HardSwish spellings become HardSwish before activation
           fusion; MatMul becomes Gemm before Gemm takes its residual and activation;
           the decomposed RMS norm becomes RMSNormalization after the decomposed
           LayerNorm became LayerNormalization (whose chain holds an RMS norm's);
           a quantized graph in QDQ form becomes QConv / QGemm last (fuse_qdq), when its
           Conv/Gemm carry their fused activation and residual; onnxruntime's integer
           MatMul forms (quantize_dynamic, QLinearMatMul) become QGemm after it; a 1-D
           Conv becomes a 2-D one of height 1 (conv1d_as_2d) once it carries its epilogue;
           a GatherBlockQuantized of a constant table becomes a QGather (passes/nbits.py);
           a Gather from a transposed constant table gathers its columns instead
           (passes/embedding.py).
all:       both, the whole list repeated until a round changes nothing (a fusion can
           expose a fold and the other way round).
"""
from __future__ import annotations

import time

from ...errors import EdgennError, GraphError
from ..ir import Graph
from .activation import fuse_activation, fuse_residual_add, normalize_hardswish
from .attention import absorb_attention_transposes, fuse_attention
from .affine import fold_conv_affine, fold_conv_batchnorm, fold_input_affine
from .conv1d import conv1d_as_2d
from .cse import eliminate_common_subexpressions
from .fold import eliminate_dead_code, fold_constants, prune_unused_consts
from .gelu import fuse_gelu
from .embedding import gather_from_transposed_table
from .gemm import matmul_add_to_gemm
from .identity import remove_identity
from .layernorm import fuse_layernorm, fuse_rmsnorm
from .nbits import gather_block_quantized_to_qgather
from .pad import fold_pad_into_conv
from .qdq import fuse_qdq
from .qinteger import fuse_integer_matmul
from .transpose import push_transposes

DECLUTTER = [fold_constants, push_transposes, remove_identity,
             eliminate_common_subexpressions, eliminate_dead_code]
FUSE = [fold_pad_into_conv, fold_conv_batchnorm, fold_conv_affine, fold_input_affine,
        fuse_layernorm, fuse_rmsnorm, fuse_gelu, fuse_attention, absorb_attention_transposes,
        normalize_hardswish, matmul_add_to_gemm, fuse_residual_add, fuse_activation, fuse_qdq,
        fuse_integer_matmul, conv1d_as_2d,
        gather_block_quantized_to_qgather, gather_from_transposed_table]

PIPELINES = {
    "none": [],
    "declutter": DECLUTTER,
    "fuse": FUSE,
    "all": DECLUTTER + FUSE,
}
MAX_ROUNDS = 8


def run_pipeline(graph: Graph, passes, report: dict, max_rounds: int = MAX_ROUNDS) -> None:
    """Run `passes` in order, repeatedly, until a whole round changes nothing."""
    for _ in range(max_rounds):
        report["rounds"] += 1
        changed = False
        for p in passes:
            t0 = time.perf_counter()
            try:
                did = p(graph)
            except EdgennError:
                raise
            except Exception as exc:  # noqa: BLE001 - say which pass, on which graph
                raise GraphError(f"optimization pass {p.__name__} failed on this graph: "
                                 f"{type(exc).__name__}: {exc}") from exc
            entry = report["passes"].setdefault(p.__name__, {"changed": 0, "seconds": 0.0})
            entry["seconds"] += time.perf_counter() - t0
            if did:
                entry["changed"] += 1
                prune_unused_consts(graph)
                graph.toposort()
                changed = True
        if not changed:
            return


def optimize(graph: Graph, level: str = "all") -> dict:
    """Optimize `graph` in place with the named pipeline; return a report of what changed."""
    if level not in PIPELINES:
        raise ValueError(f"unknown optimization level {level!r}; "
                         f"choose one of {sorted(PIPELINES)}")
    before_ops = dict(graph.op_counts())
    before_fusions = dict(graph.meta.get("fusions", {}))
    report = {"level": level, "rounds": 0, "passes": {},
              "nodes_before": len(graph.nodes), "consts_before": len(graph.consts)}
    run_pipeline(graph, PIPELINES[level], report)
    prune_unused_consts(graph)
    graph.validate()
    fusions = graph.meta.get("fusions", {})
    report.update(
        nodes_after=len(graph.nodes), consts_after=len(graph.consts),
        ops_before=before_ops, ops_after=dict(graph.op_counts()),
        fusions={k: v - before_fusions.get(k, 0) for k, v in fusions.items()
                 if v != before_fusions.get(k, 0)})
    return report
