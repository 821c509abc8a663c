"""Fast kernels: Cython and Numba implementations registered beside the reference ones.

Numba compiles on first use and caches to EDGENN_CACHE_DIR (default ~/.cache/edgenn/numba),
so it is set before numba is first imported.
"""
import os

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(
    os.environ.get("EDGENN_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "edgenn")),
    "numba"))

# registration (each module's @kernel specs join the registry; the order is the
# registration order, which breaks ties between specs)
from .gemm import conv  # noqa: E402,F401  (im2col + BLAS)
from .depthwise import depthwise, expand_depthwise  # noqa: E402,F401
from .gemm import gemm  # noqa: E402,F401  (BLAS)
from .depthwise import depthwise_project  # noqa: E402,F401
from .winograd import winograd  # noqa: E402,F401
from .rowops import rows, transformer  # noqa: E402,F401  (row ops: C, then Numba + BLAS)
from .gemm import conv_sgemm  # noqa: E402,F401  (packed sgemm Conv / Gemm)
from .direct import conv_direct  # noqa: E402,F401  (few input channels)
from .sparse import sparse, sparse_gemm  # noqa: E402,F401  (weights in CSR)
from .tensor import elementwise  # noqa: E402,F401
from .pool import pool  # noqa: E402,F401
from .tensor import upsample, batchnorm  # noqa: E402,F401
from .int8 import quantize  # noqa: E402,F401
from .tensor import embedding  # noqa: E402,F401  (QGather: quantized embedding tables)
from .recurrent import recurrent  # noqa: E402,F401  (LSTM, GRU, RNN)
from .nbits import matmul_nbits  # noqa: E402,F401  (MatMulNBits: 2/4/8-bit weights)
from .attention import attention  # noqa: E402,F401  (GroupQueryAttention: KV cache)
from .tensor import reduce  # noqa: E402,F401
from .int8 import qconv, qgemm  # noqa: E402,F401  (int8 in C: _qgemm.pyx)
from .int8 import qconv_float  # noqa: E402,F401  (QConv / QGemm on the fp32 kernels: last)
