"""Graph optimization passes: small named functions `pass(graph) -> changed`, each with a
cheap op-type prefilter, composed into named pipelines (see pipeline.py)."""
from .activation import fuse_activation, fuse_residual_add, normalize_hardswish
from .attention import absorb_attention_transposes, fuse_attention
from .affine import fold_conv_affine, fold_conv_batchnorm, fold_input_affine
from .cse import eliminate_common_subexpressions
from .fold import eliminate_dead_code, fold_constants, prune_unused_consts
from .embedding import gather_from_transposed_table
from .gelu import fuse_gelu
from .gemm import matmul_add_to_gemm
from .identity import remove_identity
from .layernorm import fuse_layernorm, fuse_rmsnorm
from .pad import fold_pad_into_conv
from .qdq import fuse_qdq
from .qinteger import fuse_integer_matmul
from .pipeline import PIPELINES, optimize, run_pipeline

__all__ = ["PIPELINES", "optimize", "run_pipeline",
           "fold_constants", "eliminate_dead_code", "prune_unused_consts",
           "eliminate_common_subexpressions", "remove_identity",
           "fold_conv_batchnorm", "fold_conv_affine", "fold_input_affine",
           "fuse_residual_add", "fuse_activation",
           "normalize_hardswish", "matmul_add_to_gemm", "fuse_layernorm", "fuse_rmsnorm",
           "fuse_gelu",
           "fuse_attention", "absorb_attention_transposes", "fuse_qdq", "fuse_integer_matmul",
           "fold_pad_into_conv", "gather_from_transposed_table"]
