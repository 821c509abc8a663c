"""Fast kernels: Cython and Numba implementations registered beside the reference ones.

Numba compiles on first use and caches to EDGENN_CACHE_DIR (default ~/.cache/edgenn/numba),
so it is set before numba is first imported.
"""
import os

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(
    os.environ.get("EDGENN_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "edgenn")),
    "numba"))

from . import conv, depthwise, expand_depthwise, gemm  # noqa: E402,F401  (registration)
from . import depthwise_project  # noqa: E402,F401  (registration)
from . import winograd  # noqa: E402,F401  (registration)
from . import rows  # noqa: E402,F401  (C FusedAttention, LayerNorm, Softmax, Gelu, Sigmoid, Erf)
from . import transformer  # noqa: E402,F401  (FusedAttention, LayerNormalization, Softmax, Gelu)
from . import conv_sgemm  # noqa: E402,F401  (registration: packed sgemm Conv/Gemm)
from . import conv_direct  # noqa: E402,F401  (direct Conv for few input channels)
from . import sparse  # noqa: E402,F401  (sparse 1x1 Conv: weights in CSR)
from . import sparse_gemm  # noqa: E402,F401  (sparse Gemm / MatMul: W^T in CSR)
from . import elementwise  # noqa: E402,F401  (binary/unary ufuncs with out=, Transpose, Gather, Cast, Where)
from . import pool  # noqa: E402,F401  (MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool)
from . import upsample  # noqa: E402,F401  (Resize, ConvTranspose, Concat)
from . import batchnorm  # noqa: E402,F401  (BatchNormalization not folded into a Conv)
from . import quantize  # noqa: E402,F401  (QuantizeLinear / DequantizeLinear u8 in C)
from . import embedding  # noqa: E402,F401  (QGather: quantized embedding tables)
from . import recurrent  # noqa: E402,F401  (LSTM, GRU, RNN: projection GEMM + C recurrence)
from . import reduce  # noqa: E402,F401  (ReduceMean / Sum / Max / Min into the output)
from . import qconv, qgemm  # noqa: E402,F401  (int8 QConv / QGemm in C: _qgemm.pyx)
from . import qconv_float  # noqa: E402,F401  (QConv / QGemm via the fp32 kernels: import last)
