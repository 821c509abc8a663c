"""Kernel test cases for MatMulNBits (com.microsoft, graph/shapes/nbits.py): 4- and 8-bit
codes, blocks of 16-128 values, K a multiple of the block or not, zero points absent,
packed or float, a bias, A of one row (decode) or several, of rank 2 or 3; and g_idx,
which the fast kernels leave to the reference."""
import numpy as np

from edgenn.graph.ir import Node
from edgenn.graph.shapes.nbits import pack_codes

CONST = {1, 2, 3, 4, 5}       # the codes, scales, zero points, g_idx and bias


def _case(rng, m_shape, k, n, bits, block, zp=None, bias=False, g_idx=False, level=0):
    kb = -(-k // block)
    codes = rng.integers(0, 1 << bits, (n, kb * block)).astype(np.uint8)
    b = pack_codes(codes, bits).reshape(n, kb, block * bits // 8)
    scales = (rng.random((n * kb,)) * 0.1 + 0.01).astype(np.float32)
    z = None
    if zp == "packed":
        z = pack_codes(rng.integers(0, 1 << bits, (n, -(-kb * bits // 8) * 8 // bits))
                       .astype(np.uint8), bits)
    elif zp == "float":
        z = rng.integers(0, 1 << bits, (n * kb,)).astype(np.float32)
    ins = [rng.standard_normal(m_shape + (k,)).astype(np.float32), b, scales, z,
           rng.permutation(np.arange(k) // block).astype(np.int32) if g_idx else None,
           rng.standard_normal(n).astype(np.float32) if bias else None]
    while ins[-1] is None:
        ins.pop()
    names = [f"i{j}" if x is not None else "" for j, x in enumerate(ins)]
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block, "accuracy_level": level}
    return Node("MatMulNBits", names, ["y"], attrs, "mm"), ins, CONST


def nbits_cases():
    rng = np.random.default_rng(7)
    yield _case(rng, (1,), 96, 40, 4, 32)
    yield _case(rng, (3,), 100, 17, 4, 16, zp="packed", bias=True)
    yield _case(rng, (1, 5), 64, 33, 8, 64, zp="float")
    yield _case(rng, (2, 1), 200, 48, 4, 128, bias=True)
    yield _case(rng, (7,), 48, 16, 8, 16, zp="packed")
    yield _case(rng, (1,), 64, 24, 4, 32, zp="packed", level=4)
    yield _case(rng, (4,), 96, 40, 4, 32, bias=True, level=4)
    yield _case(rng, (3,), 64, 96, 4, 32, zp="packed", level=4)   # N >= 64: threads
    yield _case(rng, (1,), 128, 80, 8, 64, bias=True, level=4)
    yield _case(rng, (2,), 96, 64, 4, 16, level=4)
    yield _case(rng, (1, 5), 200, 72, 4, 64, zp="float", level=4)
    yield _case(rng, (2,), 64, 8, 4, 32, g_idx=True)          # the reference's


CASES = {"MatMulNBits": nbits_cases}
