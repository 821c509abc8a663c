"""MatMulNBits decode (M = 1, int4, block 32, no zero points): edgenn's nbits rows (the fp32
rows, and the int8-activation rows nbits_i8_*, which accuracy_level 4 allows) against
NumPy (dequantize + matmul per call, and matmul on a dequantized W kept in memory) and
onnxruntime's MatMulNBits in a one-node session (accuracy_level 0 and 4), one thread.
Prints time per call and GB/s of weight bytes read (codes + scales) for the decoder
shapes, with the CPU and the tier first.

    python bench/nbits_gemv.py [--repeat 200] [--rows 1]
"""
from __future__ import annotations

import argparse
import subprocess
import time

import numpy as np

from edgenn.kernels import isa
from edgenn.kernels.nbits import _nbits

SHAPES = [(576, 960), (576, 1536), (1536, 576), (576, 49152)]   # (K, N)
BITS, BLOCK = 4, 32


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(l.split(":", 1)[1].strip() for l in out.splitlines()
                    if l.startswith("Model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def timeit(fn, repeat: int) -> float:
    """median seconds per call over `repeat` calls in 5 rounds (after one warm call)"""
    fn()
    per = max(1, repeat // 5)
    rounds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(per):
            fn()
        rounds.append((time.perf_counter() - t) / per)
    return float(np.median(rounds))


def ort_session(K, N, b, scales, level):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=K, N=N, bits=BITS, block_size=BLOCK, accuracy_level=level)
    graph = helper.make_graph(
        [node], "nbits", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, N])],
        [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--rows", type=int, default=1, help="rows of A (1: decode)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    M = args.rows
    print(f"CPU: {cpu_name()}; edgenn {isa.describe()}; 1 thread; int{BITS} block {BLOCK}, "
          f"M = {M}")
    rows = [r for r in _nbits.rows() + _nbits.qrows() if r.isa != "scalar"]
    print(f"{'K x N':>12} {'MB':>6}  " + "  ".join(f"{n:>24}" for n in
          [r.name for r in rows] + ["numpy dequant+matmul", "numpy matmul (W f32)",
                                    "ort level 0", "ort level 4"]))
    for K, N in SHAPES:
        kb = -(-K // BLOCK)
        b = rng.integers(0, 256, (N, kb, BLOCK * BITS // 8), dtype=np.uint8)
        scales = rng.uniform(0.005, 0.02, N * kb).astype(np.float32)
        a = rng.standard_normal((M, K)).astype(np.float32)
        nbytes = b.nbytes + scales.nbytes
        cells = []
        n_rep = max(5, args.repeat * 576 * 960 // (K * N))
        for r in rows:
            g = _nbits.NBits(N, K, BITS, BLOCK, b, scales, row=r.name)
            y = np.empty((M, N), np.float32)
            ws = np.zeros(g.workspace_floats(M), np.float32)
            cells.append(timeit(lambda: g.run(a, y, ws), n_rep))

        def dequant():
            q = np.empty((N, kb * BLOCK), np.uint8)
            q[:, 0::2] = b.reshape(N, -1) & 15
            q[:, 1::2] = b.reshape(N, -1) >> 4
            w = (q.reshape(N, kb, BLOCK).astype(np.float32) - 8) * scales.reshape(N, kb, 1)
            return w.reshape(N, -1)[:, :K]
        cells.append(timeit(lambda: a @ dequant().T, max(3, n_rep // 20)))
        wt = np.ascontiguousarray(dequant().T)
        cells.append(timeit(lambda: a @ wt, n_rep))
        for level in (0, 4):
            try:
                s = ort_session(K, N, b, scales, level)
                feed = {"A": a}
                cells.append(timeit(lambda: s.run(None, feed), n_rep))
            except Exception as e:  # noqa: BLE001  (an onnxruntime without the op)
                print(f"  onnxruntime level {level}: {type(e).__name__}: {e}")
                cells.append(float("nan"))
        mb = nbytes / 1e6
        print(f"{f'{K}x{N}':>12} {mb:6.2f}  " + "  ".join(
            f"{t * 1e6:9.1f} us {nbytes / t / 1e9:6.1f} GB/s" for t in cells))
    print("GB/s: bytes of codes + scales over the time of one call (numpy matmul (W f32) "
          "reads 8x those bytes).")


if __name__ == "__main__":
    main()
