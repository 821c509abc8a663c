"""QGemm on edgenn's packed int8 GEMM (_qgemm.pyx / _qgemm.h), and the plan-time helpers
QConv shares (epilogue constants, weight packing, the saturation check).

QGemm: y (..., N) = epilogue(a (..., K) u8  x  b (K, N) s8 const), every leading dim a row.
b is packed once into panels of 8 columns (N rounded up to 32), K in groups of 4 bytes
(or of 2 int16 on the exact "wide" path, for weights whose pairs could saturate
vpmaddubsw); per call only a is packed. The epilogue (int8 spec: integer or float path,
residual, activation) runs on each 6x8 register tile's sums (see _qepi.h).

Inputs (the int8 spec): 0 a, 1 a_scale, 2 a_zp, 3 b, 4 b_scale () or (N,), 5 b_zp (zeros),
6 y_scale, 7 y_zp, 8 C (int32 (N,)), 9 z, 10 z_scale, 11 z_zp, 12 D (float32 (N,), float
output only); "" (None) when omitted. a_scale / a_zp may be computed at run time (the
outputs of DynamicQuantizeLinear, onnxruntime's quantize_dynamic form) when the output is
float: the kernel then rebuilds the epilogue's per-column constants per call (O(N)).
"""
from __future__ import annotations

import numpy as np

from ...registry import kernel
from .. import scratch
from ..reference.quant import INTEGER_PATH_ACTIVATIONS, integer_path_bounds
from ..native import epilogue
from .quantize import scalar
from ..native.threading_cost import plan_threads

F32 = np.float32
MR, NR = 6, 8                     # register tile of the C micro-kernel (_qgemm.h)
PIX_CH = 32                       # channels of a 7 x 32 pixel tile's block (QVP_CH)
# exp / erf in C may round differently from NumPy's in the last float bit, so a u8 output
# may land one step away: those nodes go to the "_exp" specs, declared with lsb_tolerance=1;
# every other node is bit-exact (the plain specs, checked exactly by the tuner and tests)
TRANSCENDENTAL = ("Sigmoid", "SiLU", "Gelu")


def _qgemm():
    from . import _qgemm
    return _qgemm


def opt(ins, i):
    return ins[i] if i < len(ins) else None


def _round_up(v: int, m: int) -> int:
    return (v + m - 1) // m * m


# -- capability checks shared with qconv.py ---------------------------------------------------

def dynamic_scale(ins) -> bool:
    """a_scale / a_zp known only at run time (scalars)."""
    return any(opt(ins, i) is not None and opt(ins, i).value is None for i in (1, 2))


def dynamic_constants(ins, channels: int, wsum=None):
    """A run-time a_scale's kernel constants (_qgemm.pyx DynamicScale): (w_scale (channels,)
    float32, wsum (zeros when None: the kernel subtracts the zero point), bias (channels,)
    int32)."""
    b = opt(ins, 8)
    bias = np.zeros(channels, np.int32) if b is None else \
        np.asarray(b.value, np.int32).reshape(channels)
    w_scale = np.broadcast_to(np.asarray(ins[4].value, F32).reshape(-1), (channels,)).copy()
    return w_scale, np.zeros(1, np.int32) if wsum is None else wsum, bias


def consts_ok(node, ins, outs, channels: int, dynamic_ok: bool = False) -> bool:
    """Scales / zero points constant (per tensor; the weights' scale per tensor or per
    channel; with dynamic_ok a_scale / a_zp may be run-time scalars when the output is
    float), weight zero point all zeros, bias constant int32, float bias D constant
    float32, u8 activations and residual, u8 or float32 output, a known activation."""
    dynamic = dynamic_scale(ins)
    if dynamic and not (dynamic_ok and opt(ins, 6) is None):
        return False
    for i in (1, 2):
        info = opt(ins, i)
        if info is None or int(np.prod(info.shape)) != 1 or \
                (not dynamic and scalar(info) is None):
            return False
    w, ws, wz = opt(ins, 3), opt(ins, 4), opt(ins, 5)
    if w is None or w.value is None or w.dtype != "int8" or ws is None or ws.value is None:
        return False
    if np.asarray(ws.value).size not in (1, channels):
        return False
    if wz is not None and (wz.value is None or np.any(np.asarray(wz.value) != 0)):
        return False
    if ins[0].dtype != "uint8" or opt(ins, 2).dtype != "uint8":
        return False
    y_scale = opt(ins, 6)
    if y_scale is not None and (scalar(y_scale) is None or scalar(opt(ins, 7)) is None):
        return False
    if outs[0].dtype != ("uint8" if y_scale is not None else "float32"):
        return False
    b = opt(ins, 8)
    if b is not None and (b.value is None or b.dtype != "int32"
                          or np.asarray(b.value).size != channels):
        return False
    z = opt(ins, 9)
    if z is not None and (z.dtype != "uint8" or tuple(z.shape) != tuple(outs[0].shape)
                          or scalar(opt(ins, 10)) is None or scalar(opt(ins, 11)) is None):
        return False
    d = opt(ins, 12)
    if d is not None and (d.value is None or d.dtype != "float32" or y_scale is not None
                          or np.asarray(d.value).size != channels):
        return False
    return node.attrs.get("activation", "") in _qgemm().ACTIVATIONS   # the C epilogue's


def integer_path(node, ins) -> bool:
    """Whether the epilogue requantizes on the integer path: a u8 output, no residual, no
    post affine, an activation that is only a clamp (else the float path)."""
    return (opt(ins, 6) is not None and opt(ins, 9) is None
            and (node.attrs.get("activation", "") or "") in INTEGER_PATH_ACTIVATIONS
            and not node.attrs.get("post_affine"))


def epilogue_args(node, ins, channels: int, wsum=None, per_col: bool = False) -> dict:
    """The epilogue constants of the int8 spec, computed once in float32 NumPy exactly as
    the reference does. wsum (channels,): sum_k w[c, k] when the kernel's sums are over the
    raw u8 x (the zero point's term is folded into the bias), None when the kernel
    subtracts the zero point itself. Per-channel arrays are padded to a multiple of 32.
    Run-time a_scale / a_zp: the constants for a_scale 1, a_zp 0 (the kernel redoes
    mult and bias per call)."""
    if dynamic_scale(ins):
        x_scale, x_zp = F32(1), 0
    else:
        x_scale, x_zp = F32(scalar(ins[1])), int(scalar(ins[2]))
    w_scale = np.broadcast_to(np.asarray(ins[4].value, F32).reshape(-1), (channels,))
    b = opt(ins, 8)
    bias = np.zeros(channels, np.int64) if b is None else \
        np.asarray(b.value).reshape(-1).astype(np.int64)
    if wsum is not None:
        bias = bias - x_zp * np.asarray(wsum, np.int64)
    has_y = opt(ins, 6) is not None
    has_z = opt(ins, 9) is not None
    act = node.attrs.get("activation", "") or ""
    params = [float(p) for p in (node.attrs.get("activation_params") or [])]
    e = dict(float_path=1, per_col=int(per_col), yzp=0, lo=0, hi=255, out_f32=int(not has_y),
             inv_y=0.0, has_z=int(has_z), zzp=0, zscale=0.0, act=act, p0=0.0, p1=0.0)
    if has_y:
        y_scale, y_zp = F32(scalar(ins[6])), F32(scalar(ins[7]))
        e["yzp"] = int(y_zp)
    post = node.attrs.get("post_affine") or None
    if post:
        e.update(post=1, ps=float(F32(post[0])), pb=float(F32(post[1])))
    if integer_path(node, ins):
        mult = x_scale * w_scale / y_scale                       # float32, as the reference
        lo, hi = integer_path_bounds(act, params, y_scale, y_zp)
        e.update(float_path=0, act="", lo=int(np.clip(lo, -1, 256)), hi=int(np.clip(hi, -1, 256)))
    else:
        mult = x_scale * w_scale
        if has_y:
            e["inv_y"] = float(F32(1) / y_scale)
        if has_z:
            e["zzp"], e["zscale"] = int(scalar(ins[11])), float(F32(scalar(ins[10])))
        p0, p1 = epilogue.params(act, params)
        e["p0"], e["p1"] = float(F32(p0)), float(F32(p1))
    n32 = _round_up(max(channels, 1), 32)
    e["bias"] = np.zeros(n32, np.int32)
    e["bias"][:channels] = bias.astype(np.int32)                 # int32 wrap, as the sums
    e["mult"] = np.zeros(n32, F32)
    e["mult"][:channels] = mult
    d = opt(ins, 12)
    if d is not None:
        e["fadd"] = np.zeros(n32, F32)
        e["fadd"][:channels] = np.asarray(d.value, F32).reshape(-1)
    return e


def bit_exact(node, outs) -> bool:
    """True unless a transcendental activation feeds a u8 output (see TRANSCENDENTAL)."""
    return outs[0].dtype != "uint8" or node.attrs.get("activation", "") not in TRANSCENDENTAL


def register(op: str, name: str, supports, prepare, pool: str = "own", isa: str = "",
             priority: int = 0) -> None:
    """Register `prepare` twice: `name` for the bit-exact nodes, `name`_exp (one output step
    of tolerance) for u8 outputs through Sigmoid / SiLU / Gelu. A multi-thread kernel
    (pool "omp") is named <base>_mt / <base>_exp_mt."""
    base, mt = (name[:-3], "_mt") if name.endswith("_mt") else (name, "")
    kernel(op, name, supports=lambda node, ins, outs: supports(node, ins, outs)
           and bit_exact(node, outs), pool=pool, isa=isa, priority=priority)(prepare)
    kernel(op, base + "_exp" + mt, supports=lambda node, ins, outs: supports(node, ins, outs)
           and not bit_exact(node, outs), lsb_tolerance=1, pool=pool, isa=isa,
           priority=priority)(prepare)


def register_rows(op: str, base: str, supports, prepare, vnni_rows, name=lambda r: r) -> None:
    """The int8 family's specs for one op, from its table: `base` (+ _mt) on the table's
    base_row() (the AVX2 row where the CPU has it, else the portable one), and per VNNI
    row of vnni_rows (TABLE or DW_TABLE rows) the spec name(row.name) (+ _mt), the later
    rows preferred when untimed. prepare(node, ins, outs, threads=, row=)."""
    mt_ok = lambda node, ins, outs: plan_threads() > 1 and supports(node, ins, outs)  # noqa: E731
    specs = [(base, None, "", 0)] + [(name(r.name), r.name, r.isa, prio + 1)
                                     for prio, r in enumerate(vnni_rows)]
    for spec, row, isa, prio in specs:
        register(op, spec, supports,
                 lambda node, ins, outs, r=row: prepare(node, ins, outs, row=r),
                 isa=isa, priority=prio)
        # split over the session's threads (OpenMP): only in "omp" pool plans
        register(op, spec + "_mt", mt_ok,
                 lambda node, ins, outs, r=row: prepare(node, ins, outs, row=r,
                                                        threads=plan_threads()),
                 pool="omp", isa=isa, priority=prio)


def vnni_rows(table) -> tuple:
    """The VNNI rows of an int8 table (_qgemm.TABLE / DW_TABLE), the pixel tiles aside."""
    return tuple(r for r in table.rows
                 if r.isa.endswith("vnni") and not getattr(r, "pixel_tiles", False))


# -- weight packing ---------------------------------------------------------------------------

def _pair_sums(w_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """-> (w_2j, w_2j + w_2j+1) as int16, for each pair of w_rows (R, K) int8 (K padded
    with a zero to even)."""
    w = np.asarray(w_rows, np.int8)
    if w.shape[1] % 2:
        w = np.pad(w, ((0, 0), (0, 1)))
    a = w[:, 0::2].astype(np.int16)
    return a, a + w[:, 1::2]


def u8_path_exact(w_rows: np.ndarray) -> bool:
    """w_rows (channels, K) int8: True when vpmaddubsw cannot saturate on any pair
    (w_2j, w_2j+1) against u8 activations: 255 * (sum of the same-signed pair) must fit
    in int16, i.e. neither the positive nor the negative parts of a pair exceed 128. A
    pair of mixed signs never does, and for a same-signed pair that part is |w_2j +
    w_2j+1|: exact when every pair sum lies in [-128, 128]."""
    _, s = _pair_sums(w_rows)
    return bool(s.size == 0 or (s.min() >= -128 and s.max() <= 128))


def _panels(w_rows: np.ndarray, lanes: int, rows_to: int, wide: bool) -> np.ndarray:
    """(R, K) -> [R/lanes panels][K groups][lanes][kg] (kg = 4 int8 or 2 int16) as bytes."""
    kg = 2 if wide else 4
    r, k = w_rows.shape
    g = (k + kg - 1) // kg
    full = np.zeros((_round_up(max(r, 1), rows_to), g * kg), np.int16 if wide else np.int8)
    full[:r, :k] = w_rows
    p = full.reshape(-1, lanes, g, kg).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(p).reshape(-1).view(np.uint8)


def split_excess(w_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w_rows (R, K) int8 = main + excess: in each pair (w_2j, w_2j+1) whose same-signed
    magnitudes add up past 128, w_2j stays in main and w_2j+1 keeps only what brings the
    pair to 128; the rest of it is the excess (one element per pair, |e| <= 128, so
    vpmaddubsw on the excess is exact too). main passes u8_path_exact. As there, the
    saturating pairs are those whose sum leaves [-128, 128]: w_2j+1 keeps the sum clipped
    to it, less w_2j, and the excess is what the clip took."""
    a, s = _pair_sums(w_rows)
    clipped = np.clip(s, -128, 128)
    k = w_rows.shape[1]
    main = np.array(w_rows, np.int8, copy=True)
    excess = np.zeros_like(main)
    odd = k // 2                       # pairs with a second element inside K
    main[:, 1::2] = (clipped - a)[:, :odd]
    excess[:, 1::2] = (s - clipped)[:, :odd]
    return main, excess


def excess_table(excess_rows: np.ndarray, lanes: int, panels: int):
    """The excess (R, K) in the kernel's form (_qgemm.pyx _set_excess): per panel of
    `lanes` rows, the K groups of 4 holding a non-zero, each as a [lanes][4] int8 block.
    -> ((start (panels + 1,), group, data), fraction of the (panel, group) blocks used)."""
    r, k = excess_rows.shape
    g = (k + 3) // 4
    full = np.zeros((panels * lanes, g * 4), np.int8)
    full[:r, :k] = excess_rows
    blocks = full.reshape(panels, lanes, g, 4).transpose(0, 2, 1, 3)   # [panel][group][lane][4]
    used = np.any(blocks.reshape(panels, g, -1) != 0, axis=2)
    panel_of, group_of = np.nonzero(used)                               # panel-major order
    start = np.zeros(panels + 1, np.int32)
    np.cumsum(np.bincount(panel_of, minlength=panels), out=start[1:])
    data = np.ascontiguousarray(blocks[panel_of, group_of]).reshape(-1).view(np.uint8)
    return (start, group_of.astype(np.int32), data), float(used.mean()) if used.size else 0.0


EXCESS_LIMIT = 0.25   # above this share of (panel, group) blocks the wide path is cheaper


def choose_path(w_rows: np.ndarray, lanes: int, panels: int, force_wide=False,
                excess_limit=EXCESS_LIMIT, exact: bool = False):
    """-> (weights to pack, wide, excess table or None) for w_rows (R, K) int8: the u8 path
    when no pair can saturate, u8 + excess when the saturating pairs are rare, else wide.
    An exact row (vpdpbusd or SDOT: no s16 step) takes any weights: always the u8 path."""
    if exact:
        return w_rows, False, None
    if force_wide:
        return w_rows, True, None
    if u8_path_exact(w_rows):
        return w_rows, False, None
    main, excess = split_excess(w_rows)
    table, fraction = excess_table(excess, lanes, panels)
    if fraction > excess_limit:
        return w_rows, True, None
    return main, False, table


def pack_a(w_rows: np.ndarray, wide: bool) -> np.ndarray:
    """Conv weights (M, K) int8 -> A panels of 6 rows."""
    return _panels(w_rows, MR, MR, wide)


def pack_blocks32(w_rows: np.ndarray) -> np.ndarray:
    """Conv weights (M, K) int8 -> blocks of 32 channels, [ceil(M/32)][K/4][32][4] (the
    7 x 32 pixel tiles' vectors: _qgemm_vnni_pix.h)."""
    return _panels(w_rows, PIX_CH, PIX_CH, False)


def pack_b(w_kn: np.ndarray, wide: bool) -> np.ndarray:
    """Gemm weights (K, N) int8 -> B panels of 8 columns, N rounded up to 32."""
    return _panels(np.asarray(w_kn).T, NR, 4 * NR, wide)


# -- QGemm ------------------------------------------------------------------------------------

def _supports(node, ins, outs) -> bool:
    b = opt(ins, 3)
    return (len(ins[0].shape) >= 1 and b is not None and len(b.shape) == 2
            and consts_ok(node, ins, outs, b.shape[1], dynamic_ok=True))


def kernel_runner(k, has_z: bool, dynamic: bool = False):
    """run(inputs, outputs) over an int8 kernel object k (QGemmKernel, QConvKernel,
    QDepthwiseKernel: k.run(x, y, z, a_scale, a_zp, ws[, persistent workspace])): the
    residual is input 9, a run-time scale / zero point inputs 1 and 2. The workspaces are
    the execution context's (edgenn.kernels.scratch)."""
    ws = scratch.bytes_(k.workspace_bytes)
    kept = getattr(k, "padded_bytes", 0) or getattr(k, "plane_bytes", 0)
    if kept:   # the conv kernels' persistent workspace (padded image / planes)
        keep = scratch.array((kept,), np.uint8, persistent=True, fill=0)
        call = lambda x, y, z, s, zp: k.run(x, y, z, s, zp, ws.get(), keep.get())
    else:
        call = lambda x, y, z, s, zp: k.run(x, y, z, s, zp, ws.get())
    if dynamic:
        def run(inputs, outputs):
            call(inputs[0], outputs[0], inputs[9] if has_z else None,
                 inputs[1].reshape(-1)[0], inputs[2].reshape(-1)[0])
    else:
        def run(inputs, outputs):
            call(inputs[0], outputs[0], inputs[9] if has_z else None, None, None)
    run.kernel = k    # inspectable: k.simd
    return run


def prepare_qgemm(node, ins, outs, row=None, force_wide=False, threads=1,
                  excess_limit=EXCESS_LIMIT):
    """-> run(inputs, outputs) on the table's row `row` (None: _qgemm.base_row());
    force_wide / excess_limit: tests pin the wide path, the u8 + excess path
    (excess_limit=1)."""
    qg = _qgemm()
    row = row or qg.base_row()
    w = np.asarray(ins[3].value, np.int8)
    k, n = w.shape
    rows = int(np.prod(outs[0].shape[:-1]))
    packed_rows, wide, excess = choose_path(np.ascontiguousarray(w.T), NR,
                                            _round_up(max(n, 1), 4 * NR) // NR, force_wide,
                                            excess_limit, qg.ROWS[qg.row_index(row)].exact)
    wsum = w.astype(np.int64).sum(axis=0)
    dynamic = dynamic_scale(ins)
    epi = epilogue_args(node, ins, n, wsum=None if dynamic else wsum, per_col=True)
    g = qg.QGemmKernel(pack_b(packed_rows.T, wide), wide, rows, k, n, epi,
                       row=row, threads=threads, excess=excess)
    if dynamic:
        g.set_dynamic(*dynamic_constants(ins, n, wsum))
    run = kernel_runner(g, opt(ins, 9) is not None, dynamic)
    run.wide = wide
    run.excess = excess is not None
    return run


register_rows("QGemm", "qgemm_int8", _supports, prepare_qgemm, vnni_rows(_qgemm().TABLE))
