"""The two AVX-512 VNNI int8 conv kernels on one layer, side by side: the 6-channel x
32-pixel tiles (qconv_u8s8_6x32) and the 7-pixel x 32-channel ones (qconv_u8s8_7x32),
their runs interleaved in one process, 1 thread; checks they give the same bytes.

    python bench/compare_qconv_tiles.py 1,512,7,7,512,3,1,1,1,1 1,320,7,7,1280,1,1,0,1,1

A geometry is n, C, H, W, M, kernel, stride, pad, dilation, group (a Relu QConv, u8 out,
8-bit weights; --residual adds a u8 residual)."""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from support.kernel_cases.quant import qconv_case  # noqa: E402

from edgenn.graph.infer import infer_node  # noqa: E402
from edgenn.kernels import isa  # noqa: E402
from edgenn.kernels.int8 import _qgemm, qconv# noqa: E402
from edgenn.oplist import load_kernels  # noqa: E402
from edgenn.registry import TensorInfo  # noqa: E402


def _infos(inputs, const):
    return [None if v is None else TensorInfo.of(v) if i in const else
            TensorInfo(v.dtype.name, v.shape) for i, v in enumerate(inputs)]


def compare(geom, rounds: int, residual: bool) -> None:
    node, inputs, const = qconv_case(np.random.default_rng(1), geom, "Relu", bits=8,
                                     residual=residual)
    ins = _infos(inputs, const)
    outs = infer_node(node, ins, fold=False)
    runs = {"6x32": qconv.prepare_gemm(node, ins, outs, row="qgemm_u8s8_6x32__avx512vnni"),
            "7x32": qconv.prepare_gemm(node, ins, outs, row="qconv_u8s8_7x32__avx512vnni")}
    ys = {k: np.empty(outs[0].shape, outs[0].dtype) for k in runs}
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, run in runs.items():
            t0 = time.perf_counter()
            run(inputs, [ys[k]])
            times[k].append(time.perf_counter() - t0)
    same = np.array_equal(ys["6x32"], ys["7x32"])
    macs = np.prod(outs[0].shape) * geom[1] // geom[9] * geom[5] ** 2
    med = {k: float(np.median(v[rounds // 10:])) for k, v in times.items()}
    print(f"{','.join(map(str, geom)):28s} " + "  ".join(
        f"{k} {m * 1e6:8.1f} us ({macs / m / 1e9:5.1f} GMAC/s)" for k, m in med.items())
        + f"  ratio {med['7x32'] / med['6x32']:.3f}  same bytes: {same}")
    if not same:
        raise SystemExit("the two kernels disagree")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("geoms", nargs="+", help="n,C,H,W,M,kernel,stride,pad,dilation,group")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--residual", action="store_true")
    a = ap.parse_args()
    load_kernels()
    print(f"CPU: {isa.describe()}")   # every figure names the CPU and the kernel tier
    if not _qgemm.has_vnni("avx512vnni"):
        raise SystemExit("this CPU (or EDGENN_MAX_ISA) has no AVX-512 VNNI: nothing to compare")
    for g in a.geoms:
        compare(tuple(int(v) for v in g.split(",")), a.rounds, a.residual)


if __name__ == "__main__":
    main()
