"""QConv on edgenn's int8 C kernels (_qgemm.pyx): x u8 (N, C, H, W), w s8 const
(M, C/group, KH, KW) -> y (N, M, OH, OW), u8 or float32, with the fused epilogue of the
int8 spec (integer requantization, or float: residual, activation, requantize / float out).

qconv_gemm_int8: group-1 convs (and grouped ones, group by group) as the packed u8 x s8
  GEMM W (M, C*KH*KW) x im2col (C*KH*KW, OH*OW): weights packed once, the im2col columns
  packed per block straight from the uint8 image (padding reads x_zp, contributing 0);
  1x1 stride-1 convs only interleave K. Layers whose weights could saturate vpmaddubsw
  (8-bit weights, a same-signed pair summing past 128) take the exact int16 path.
qconv_u8s8_7x32__avx512vnni: group-1 convs of 4k channels (1x1 included) as the implicit
  GEMM turned around, 7 output pixels broadcast x 32 output channels in the lanes, over
  the shifted image: whole tiles on 7k-pixel planes; the tuner times it against the 6 x 32.
qconv_dw_int8: depthwise (group == C == M), int16 pair products, any kernel / stride /
  padding / dilation; qconv_dw_u8s8__avx512vnni / __avxvnni the same sums by vpdpwssd.
Both take a run-time x_scale / x_zp (onnxruntime's quantize_dynamic form, float output):
the epilogue's per-channel constants are rebuilt per call (_qgemm.pyx DynamicScale).
"""
from __future__ import annotations

import numpy as np

from ..gemm.conv import geometry
from ...registry import kernel
from .qgemm import (EXCESS_LIMIT, MR, choose_path, consts_ok, dynamic_constants, dynamic_scale,
                    epilogue_args, integer_path, kernel_runner, opt, pack_a, pack_blocks32,
                    register_rows, vnni_rows)
from .quantize import scalar
from ..native.threading_cost import plan_threads

def _qgemm():
    from . import _qgemm
    return _qgemm


def _conv_ok(node, ins, outs) -> bool:
    x, w = ins[0], opt(ins, 3)
    return (len(x.shape) == 4 and w is not None and len(w.shape) == 4
            and len(outs[0].shape) == 4 and node.attrs.get("auto_pad", "NOTSET") in
            ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", "", None)
            and consts_ok(node, ins, outs, w.shape[0], dynamic_ok=True))


def _is_depthwise(node, ins) -> bool:
    c, m, g = ins[0].shape[1], ins[3].shape[0], int(node.attrs.get("group", 1))
    return g > 1 and g == c == m


def _geom(node, ins, outs):
    """-> (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow) of the whole image."""
    x, w, y = ins[0].shape, ins[3].shape, outs[0].shape
    (sh, sw), (ph, pw), (dh, dw) = geometry(node, x, w, y)
    return (x[1], x[2], x[3], w[2], w[3], sh, sw, ph, pw, dh, dw, y[2], y[3])



# -- group-1 / grouped: the packed GEMM ------------------------------------------------------

def _gemm_supports(node, ins, outs) -> bool:
    return _conv_ok(node, ins, outs) and not _is_depthwise(node, ins)


SMALL_K = 48   # _qgemm.h QG_SMALL_K_GROUPS * 4: the 6 x 16 kernel, which takes no excess


def implicit_rows(w_rows: np.ndarray, taps: int) -> np.ndarray:
    """Conv weights (M, C * taps) in (c, tap) order -> (M, K) in the implicit GEMM's
    (c / 4, tap, c % 4) order: each group of 4 K values is 4 channels of one tap, the 4
    bytes one pixel holds in the 4-channel-interleaved image (C a multiple of 4)."""
    m, k = w_rows.shape
    if k % (4 * taps):
        raise ValueError(f"implicit GEMM: {k // taps} input channels, not a multiple of 4")
    return np.ascontiguousarray(
        w_rows.reshape(m, k // taps // 4, 4, taps).transpose(0, 1, 3, 2).reshape(m, k))


def prepare_gemm(node, ins, outs, row=None, force_wide=False, threads=1,
                 excess_limit=EXCESS_LIMIT, flat=None, implicit=None, exact=None,
                 split_channels=None):
    """-> run(inputs, outputs) on the table's row `row` (None: _qgemm.base_row());
    force_wide / excess_limit: tests pin the int16 path, the u8 + excess path
    (excess_limit=1); flat: True / False forces the in-place im2col over the padded width on
    / off (None: the kernel's own rule, where the dropped columns cost little); implicit
    (AVX-512 VNNI, flat stride-1 group-1 convs of 4k channels): no im2col block, the tiles
    read the image laid out 4 channels per pixel (None: wherever it applies,
    _qgemm.implicit_ok); exact (implicit plans): the image once per kernel column, shifted,
    so that no column is computed to be dropped (None: where that saves products,
    _qgemm._exact_pays); split_channels (threads > 1): the threads split the output
    channels, not the pixels (None: where there are more channels than computed pixels,
    _qgemm.QConvKernel). A pixel-tile row (qconv_u8s8_7x32: group-1 convs of 4k channels,
    1x1 included) runs the implicit GEMM on the shifted image in 7-pixel x 32-channel tiles."""
    qg = _qgemm()
    row = row or qg.base_row()
    info = qg.ROWS[qg.row_index(row)]
    pixel_tiles = info.pixel_tiles
    w = np.asarray(ins[3].value, np.int8)
    m = w.shape[0]
    wrows = w.reshape(m, -1)                                   # (M, C/g*KH*KW)
    group = int(node.attrs.get("group", 1))
    if pixel_tiles:
        implicit = True
    elif implicit is None:
        implicit = flat is not False and qg.implicit_ok(_geom(node, ins, outs), group, row)
    if implicit:
        if flat is False:
            raise ValueError("implicit GEMM: its plans are flat (flat=False asked)")
        wrows = implicit_rows(wrows, w.shape[2] * w.shape[3])
        flat = True
    if group > 1 or wrows.shape[1] <= SMALL_K:
        excess_limit = 0.0     # excess only on the group-1 6 x 8 sweep
    packed_rows, wide, excess = choose_path(wrows, MR, (m + MR - 1) // MR, force_wide,
                                            excess_limit, info.exact)
    mg = m // group
    packed = pack_blocks32(packed_rows) if pixel_tiles else np.concatenate(
        [pack_a(packed_rows[g * mg:(g + 1) * mg], wide) for g in range(group)])
    wsum = wrows.astype(np.int64).sum(axis=1)
    dynamic = dynamic_scale(ins)
    epi = epilogue_args(node, ins, m, wsum=None if dynamic else wsum)
    x_zp = 0 if dynamic else int(scalar(ins[2]))
    k = qg.QConvKernel(packed, wide, _geom(node, ins, outs), group, m, epi, x_zp,
                       row=row, threads=threads, excess=excess, flat=flat,
                       implicit=implicit, exact=exact, split_channels=split_channels)
    if dynamic:
        k.set_dynamic(*dynamic_constants(ins, m, wsum))
    run = kernel_runner(k, opt(ins, 9) is not None, dynamic)
    run.wide = wide
    run.excess = excess is not None
    run.flat = k.flat
    run.implicit = bool(implicit)
    run.exact = k.exact
    run.pixel_tiles = bool(pixel_tiles)
    return run


# output pixels split over the session's threads in the _mt specs (OpenMP); the VNNI
# rows' specs named qconv_u8s8_<tile>__<isa>
register_rows("QConv", "qconv_gemm_int8", _gemm_supports, prepare_gemm,
              vnni_rows(_qgemm().TABLE), lambda row: row.replace("qgemm_", "qconv_", 1))


def _pixel_tiles_supports(node, ins, outs) -> bool:
    """qconv_u8s8_7x32: group-1 convs of 4k input channels (the image 4 channels per
    pixel), where the CPU (and EDGENN_MAX_ISA) has AVX-512 VNNI, with an epilogue the
    tiles compute in registers: the integer path, or the float path's activation none /
    Relu / Clip (a u8 output without a post affine); any other runs per channel row, a
    candidate the tuner would only time to drop (slower than the 6 x 32 tiles)."""
    if not (_gemm_supports(node, ins, outs) and int(node.attrs.get("group", 1)) == 1
            and ins[0].shape[1] % 4 == 0 and _pixel_rows()):
        return False
    if integer_path(node, ins):
        return True
    float_out = opt(ins, 6) is None
    return ((node.attrs.get("activation", "") or "") in _qgemm().PIXEL_TILE_ACTIVATIONS
            and (float_out or not node.attrs.get("post_affine")))


def _pixel_rows() -> tuple:
    """The table's pixel-tile rows this CPU runs."""
    return tuple(r for r in _qgemm().rows() if r.pixel_tiles)


# the 7-pixel x 32-channel tiles: a candidate the tuner times against the 6 x 32 ones
# (priority below them, so an untimed plan keeps those); bit-exact epilogues only, so no
# _exp twin (register's) for the transcendental activations
for _row in (r for r in _qgemm().ROWS if r.pixel_tiles):
    for _threads in (False, True):
        kernel("QConv", _row.name + ("_mt" if _threads else ""),
               supports=(lambda node, ins, outs: plan_threads() > 1
                         and _pixel_tiles_supports(node, ins, outs))
               if _threads else _pixel_tiles_supports,
               pool="omp" if _threads else "own", isa=_row.isa, priority=1)(
            lambda node, ins, outs, mt=_threads, r=_row.name: prepare_gemm(
                node, ins, outs, row=r, threads=plan_threads() if mt else 1))


# -- depthwise ---------------------------------------------------------------------------------

def _dw_supports(node, ins, outs) -> bool:
    return _conv_ok(node, ins, outs) and _is_depthwise(node, ins) and \
        ins[3].shape[2] * ins[3].shape[3] <= 1024


def prepare_depthwise(node, ins, outs, row=None, threads=1):
    """On the depthwise table's row `row` (None: _qgemm.base_row(dw=True))."""
    qg = _qgemm()
    w = np.asarray(ins[3].value, np.int8)
    c = w.shape[0]
    epi = epilogue_args(node, ins, c, wsum=None)   # the kernel subtracts x_zp itself
    dynamic = dynamic_scale(ins)
    k = qg.QDepthwiseKernel(w.reshape(c, -1), _geom(node, ins, outs), epi,
                            0 if dynamic else int(scalar(ins[2])),
                            row=row, threads=threads)
    if dynamic:
        k.set_dynamic(*dynamic_constants(ins, c)[::2])
    return kernel_runner(k, opt(ins, 9) is not None, dynamic)


# the base row (AVX2 / portable) and the VNNI rows (vpdpwssd sums) of the depthwise
# table, the channels split over the session's threads (OpenMP) in the _mt specs
register_rows("QConv", "qconv_dw_int8", _dw_supports, prepare_depthwise,
              vnni_rows(_qgemm().DW_TABLE))
