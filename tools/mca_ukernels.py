"""The cycle-level cost of the microkernels' inner loops on CPUs this machine does not have,
by llvm-mca (Debian's llvm-19): each loop compiled as the package builds it (gcc, the row's
target flags; aarch64 through gcc-aarch64-linux-gnu), its innermost FMA loop cut out of
the assembly, and modelled per core; printed as cycles per iteration, the fp32 FLOP per
cycle that implies and the fraction of the core's FMA peak.

    python tools/mca_ukernels.py                   # every kernel on every core below
    python tools/mca_ukernels.py --kernel sgemm_6x16__neon --measure

--measure adds, for the x86 rows this CPU runs, the GFLOP/s measured here on a large GEMM
(sgemm rows only) and the FLOP per cycle at the clock /proc/cpuinfo reports, so the
model's error on a core we do have is known. llvm-19 models Cortex-A72 and A76 with one
older machine model (half the A76's real FMA rate): their figures are reported, not
judged.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS_DIR = os.path.join(ROOT, "edgenn", "kernels")
MCA = "/usr/lib/llvm-19/bin/llvm-mca"

# fp32 FLOP per cycle at the FMA peak: FMA pipes x lanes x 2 (vendors' optimization guides)
PEAK = {
    "znver3": 32,            # 2 x 256-bit FMA
    "znver4": 32,            # 2 x 256-bit FMA (a zmm FMA takes both)
    "sapphirerapids": 64,    # 2 x 512-bit FMA (ports 0 and 5)
    "neoverse-n1": 16,       # 2 x 128-bit FMLA
    "neoverse-v1": 32,       # 4 x 128-bit FMLA
    "neoverse-v2": 32,       # 4 x 128-bit FMLA
    "apple-m1": 32,          # 4 x 128-bit FMLA
    "cortex-a76": 16,        # 2 x 128-bit FMLA (llvm-19: the A72-era model, see above)
    "cortex-a72": 8,         # 1 x 128-bit FMLA per cycle
    "cortex-a53": 4,         # a 64-bit NEON datapath: a 128-bit FMLA every 2 cycles
}
X86_CORES = ("znver3", "znver4", "sapphirerapids")
AVX512_CORES = ("znver4", "sapphirerapids")
ARM_CORES = ("neoverse-n1", "neoverse-v1", "neoverse-v2", "apple-m1", "cortex-a76",
             "cortex-a72", "cortex-a53")

# (table row, header to include, the function holding the loop, arch, gcc target flags)
KERNELS = [
    ("sgemm_6x16__avx2", "sgemm_table.h", "sg_ukr_avx2_6x2", "x86_64", ["-mavx2", "-mfma"]),
    ("sgemm_12x32__avx512f", "sgemm_table.h", "sg_ukr_avx512_pfb_12x2", "x86_64",
     ["-mavx512f", "-mavx2", "-mfma"]),
    ("sgemm_6x16__neon", "sgemm_table.h", "sg_ukr_neon", "aarch64", []),
    ("conv_direct_6x16__avx2", "_convdirect.h", "cd_run_avx2", "x86_64", ["-mavx2", "-mfma"]),
    ("conv_direct_12x32__avx512f", "_convdirect.h", "cd_run_avx512", "x86_64",
     ["-mavx512f", "-mavx2", "-mfma"]),
    ("conv_direct_8x12__neon", "_convdirect.h", "cd_run_neon", "aarch64", []),
    ("spmm_32x1__avx2", "spmm_table.h", "sp_tile_avx2", "x86_64", ["-mavx2", "-mfma"]),
    ("spmm_64x1__avx512f", "spmm_table.h", "sp_tile_avx512", "x86_64",
     ["-mavx512f", "-mavx2", "-mfma"]),
    ("depthwise_c8__avx2", "_dwc8.h", "dwc_group_avx2", "x86_64", ["-mavx2", "-mfma"]),
    ("depthwise_c16__avx512f", "_dwc8.h", "dwc_group_avx512", "x86_64",
     ["-mavx512f", "-mavx2", "-mfma"]),
    ("depthwise_c4__neon", "_dwc8.h", "dwc_group_neon", "aarch64", []),
    ("depthwise_rows8__avx2", "_dwrows.h", "dwr_planes8", "x86_64", ["-mavx2", "-mfma"]),
    ("depthwise_rows4__neon", "_dwrows.h", "dwr_planes4", "aarch64", []),
    ("spmm_32x1__neon", "spmm_table.h", "sp_tile_neon_32", "aarch64", []),
    ("recurrent_4x64__avx2", "_recurrent.h", "rc_gemm_avx2", "x86_64", ["-mavx2", "-mfma"]),
    ("recurrent_4x32__neon", "_recurrent.h", "rc_gemm_neon", "aarch64", []),
]

FMA_X86 = re.compile(r"^\s*vfn?m(?:add|sub)\d{3}ps\s+.*%([xyz])mm")
FMA_ARM = re.compile(r"^\s*fml[as]\s+v\d+\.(\d+)s")
LANES = {"x": 4, "y": 8, "z": 16}


def compile_asm(row, header, func, arch, flags, tmp) -> str:
    """The assembly of the header built as the package builds it (-O3), with `func` kept."""
    src = os.path.join(tmp, f"{row}.c")
    with open(src, "w") as f:
        f.write(f'#include "{header}"\nvoid *keep_{func}(void) {{ return (void *){func}; }}\n')
    cc = "gcc" if arch == "x86_64" else "aarch64-linux-gnu-gcc"
    if not shutil.which(cc):
        raise SystemExit(f"{cc} not found (Debian: gcc-aarch64-linux-gnu)")
    out = os.path.join(tmp, f"{row}.s")
    import simde_py   # the headers' SIMD layer off x86 (_simd.h)
    includes = [f"-I{os.path.join(KERNELS_DIR, d)}" for d in sorted(os.listdir(KERNELS_DIR))
                if os.path.isdir(os.path.join(KERNELS_DIR, d))]
    subprocess.run([cc, "-O3", "-S", *includes, f"-I{simde_py.get_include()}", *flags, src,
                    "-o", out], check=True)
    return open(out).read()


def function_body(asm: str, func: str) -> list[str]:
    lines = asm.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(func + ":"))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("\t.size\t" + func)), len(lines))
    return lines[start + 1:end]


def inner_loop(body: list[str], arch: str) -> tuple[list[str], int, int]:
    """The innermost loop (a label, straight code, a branch back to it) with the most FMAs,
    of those the shortest (a kernel's full-tile loop beside its ragged-tile twins) -> (its
    instructions, FMAs, fp32 FLOP per iteration)."""
    fma = FMA_X86 if arch == "x86_64" else FMA_ARM
    labels = {line[:-1]: i for i, line in enumerate(body) if re.match(r"^\.?L\w+:$", line)}
    best = ([], 0, 0)
    for j, line in enumerate(body):
        m = re.match(r"^\s*(?:j\w+|b\.?\w*|cbn?z|tbn?z)\s+.*?(\.L\w+)\s*$", line)
        if not m or m.group(1) not in labels or labels[m.group(1)] >= j:
            continue
        i = labels[m.group(1)]
        loop = body[i + 1:j + 1]
        if any(re.match(r"^\.?L\w+:$", x) for x in loop):
            continue                       # not innermost: another label inside
        instrs = [x for x in loop if x.startswith("\t") and not x.startswith("\t.")]
        hits = [fma.match(x) for x in instrs]
        n = sum(1 for h in hits if h)
        flop = sum(2 * (LANES[h.group(1)] if arch == "x86_64" else int(h.group(1)))
                   for h in hits if h)
        if n > best[1] or (n == best[1] and len(instrs) < len(best[0])):
            best = (instrs, n, flop)
    return best


def mca_cycles(instrs: list[str], arch: str, cpu: str, tmp: str) -> float:
    path = os.path.join(tmp, "loop.s")
    with open(path, "w") as f:
        f.write("\n".join(instrs) + "\n")
    triple = "x86_64-linux-gnu" if arch == "x86_64" else "aarch64-linux-gnu"
    out = subprocess.run([MCA, f"-mtriple={triple}", f"-mcpu={cpu}", "-iterations=200",
                          path], capture_output=True, text=True, check=True).stdout
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out).group(1))
    iters = int(re.search(r"Iterations:\s+(\d+)", out).group(1))
    return cycles / iters


def measured_flop_per_cycle(row: str) -> tuple[float, float] | None:
    """GFLOP/s of a 1536^3 GEMM on this sgemm row, one thread, and the FLOP per cycle at
    /proc/cpuinfo's clock; None where the row is not an sgemm row this CPU runs."""
    sys.path.insert(0, ROOT)
    import numpy as np

    from edgenn.kernels.gemm import _sgemm
    if row not in {r.name for r in _sgemm.rows()}:
        return None
    n = 1536
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    g = _sgemm.SGemm(n, n, n, packed_b=_sgemm.pack_b(b), row=row)
    y = np.empty((n, n), np.float32)
    g.run(a, y)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        g.run(a, y)
        times.append(time.perf_counter() - t0)
    gflops = 2 * n ** 3 / sorted(times)[2] / 1e9
    mhz = max(float(m) for m in re.findall(r"cpu MHz\s*:\s*([\d.]+)",
                                           open("/proc/cpuinfo").read()))
    return gflops, gflops * 1e3 / mhz


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", action="append", help="table rows (default: all)")
    ap.add_argument("--measure", action="store_true", help="GFLOP/s here beside the model")
    args = ap.parse_args()
    if not os.path.exists(MCA):
        raise SystemExit(f"{MCA} not found (Debian: apt-get install llvm-19)")
    rows = [k for k in KERNELS if not args.kernel or k[0] in args.kernel]
    version = subprocess.run([MCA, "--version"], capture_output=True, text=True).stdout
    print("llvm-mca:", re.search(r"LLVM version ([\d.]+)", version).group(1))
    print(f"{'row':28} {'core':15} {'cyc/iter':>9} {'FMAs':>5} {'FLOP/cyc':>9} {'peak':>5} "
          f"{'of peak':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for row, header, func, arch, flags in rows:
            asm = compile_asm(row, header, func, arch, flags, tmp)
            instrs, fmas, flop = inner_loop(function_body(asm, func), arch)
            if not fmas:
                print(f"{row:28} no FMA loop found in {func}")
                continue
            cores = ARM_CORES if arch != "x86_64" else \
                AVX512_CORES if "-mavx512f" in flags else X86_CORES
            for cpu in cores:
                cyc = mca_cycles(instrs, arch, cpu, tmp)
                fpc = flop / cyc
                note = "  (llvm-19: older model)" if cpu in ("cortex-a76", "cortex-a72") else ""
                print(f"{row:28} {cpu:15} {cyc:9.2f} {fmas:5d} {fpc:9.2f} {PEAK[cpu]:5d} "
                      f"{fpc / PEAK[cpu]:8.0%}{note}")
            if args.measure and arch == os.uname().machine:
                got = measured_flop_per_cycle(row)
                if got:
                    print(f"{row:28} {'measured here':15} {got[0]:9.1f} GFLOP/s, "
                          f"{got[1]:.2f} FLOP/cycle at /proc/cpuinfo's clock")


if __name__ == "__main__":
    main()
