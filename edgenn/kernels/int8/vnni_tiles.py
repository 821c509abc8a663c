"""Tests' access to the VNNI int8 micro-kernels on raw packed panels, AVX-512 VNNI
(_qgemm_vnni.h) or AVX-VNNI (_qgemm_avxvnni.h), native (_qgemm) or compiled against SIMDe
(_qgemm_emu, any CPU): one 6 x 32 call, or one 7-pixel x 32-channel one (pixel_tile)."""
from __future__ import annotations

import numpy as np

KINDS = {"conv": 0, "gemm": 1, "conv_broken": 2}   # conv_broken: emulated build only
TIERS = {"avx512vnni": 0, "avxvnni": 3}            # the kernels' numbers: KINDS + this


def tile(lane: str, kind: str, a, b, ng: int, bps: int, npan: int,
         tier: str = "avx512vnni", rows: int = 6) -> np.ndarray:
    """lane "native" or "emulated"; a: one A panel (ng * 24 bytes), b: 4 B panels bps bytes
    apart (ng * 32 bytes each), uint8 -> (4, 6, 8) int32 sums (panels past npan, rows past
    `rows`: zero). rows 6 / 4 / 2: the AVX-512 VNNI conv kernel of that tile shape."""
    if rows not in (6, 4, 2) or (rows != 6 and (kind != "conv" or tier != "avx512vnni")):
        raise ValueError(f"no {rows}-row {kind!r} kernel on {tier}")
    if kind not in KINDS or (kind == "conv_broken" and lane != "emulated"):
        raise ValueError(f"no {kind!r} kernel in the {lane} lane")
    a = np.ascontiguousarray(a, np.uint8).ravel()
    b = np.ascontiguousarray(b, np.uint8).ravel()
    if not 1 <= npan <= 4 or a.size < ng * 24 or b.size < (npan - 1) * bps + ng * 32:
        raise ValueError("panels too small")
    if tier == "avx512vnni" and kind != "gemm":   # the conv kernels read panel pairs
        b, bps = _pairs(b, ng, bps, npan), ng * 32
    pad = np.zeros(64, np.uint8)   # never read; keeps &a[0] valid for empty panels (ng 0)
    a, b = np.concatenate([a, pad]), np.concatenate([b, pad])
    out = np.zeros((4, 6, 8), np.int32)
    if lane == "emulated":
        from . import _qgemm_emu as mod
    else:
        from . import _qgemm as mod
        if not mod.has_vnni(tier):
            raise ValueError(f"this CPU (or EDGENN_MAX_ISA) has no {tier}")
    mod.vnni_ukr_into(KINDS[kind] + TIERS[tier], a, b, ng, bps, npan, out.reshape(-1), rows)
    return out


def _pairs(b, ng: int, bps: int, npan: int) -> np.ndarray:
    """4 panels bps bytes apart ([ng][32 bytes] each) -> the conv kernels' pair layout
    (qg_interleave: panels 2h, 2h + 1 as [ng][64 bytes] at 2h * ng * 32); a panel past npan
    is zeros (its sums are dropped)."""
    panels = [b[q * bps:q * bps + ng * 32].reshape(ng, 32) if q < npan
              else np.zeros((ng, 32), np.uint8) for q in range(4)]
    return np.concatenate([np.concatenate(panels[2 * h:2 * h + 2], axis=1).ravel()
                           for h in range(2)])


def _nc4_image(b, ng: int, order):
    """b (4 panels [ng][32 bytes]) as the nc4 image holds it: group g's 32 pixels (128
    bytes) at goff[g], the groups stored in `order` -> (image bytes, goff)."""
    b = np.ascontiguousarray(b, np.uint8).reshape(4, ng, 32)
    order = np.arange(ng) if order is None else np.asarray(order)
    slots = np.empty(ng, np.int64)
    slots[order] = np.arange(ng)               # group order[i] lives in slot i
    img = np.zeros((max(ng, 1), 128 + 64), np.uint8)   # + 64: a row's slack, never summed
    for grp in range(ng):
        img[slots[grp], :128] = b[:, grp].ravel()
    goff = (slots * img.shape[1]).astype(np.int64) if ng else np.zeros(1, np.int64)
    return img.ravel(), goff


def _module(lane: str):
    if lane == "emulated":
        from . import _qgemm_emu as mod
        return mod
    from . import _qgemm as mod
    if not mod.has_vnni("avx512vnni"):
        raise ValueError("this CPU (or EDGENN_MAX_ISA) has no avx512vnni")
    return mod


def tail_tile(lane: str, a, b, ng: int, ncols: int, order=None, broken: bool = False
              ) -> np.ndarray:
    """A block's last <= TAIL_COLUMNS columns with the 6 weight rows in the lanes
    (_qgemm_vnni_tail.h):
    a and b as implicit_tile takes them, columns 0 .. ncols - 1 -> (6, 8) int32 sums
    (columns past ncols zero); broken: the emulated build's twin (a weight operand
    halved), to show the check can fail."""
    from ._qgemm import TAIL_COLUMNS
    if not 1 <= ncols <= TAIL_COLUMNS or ng < 1:
        raise ValueError(f"ncols 1 .. {TAIL_COLUMNS}, ng >= 1")
    img, goff = _nc4_image(b, ng, order)
    a = np.ascontiguousarray(a, np.uint8).ravel()
    pat = np.zeros(ncols * -(-ng // 8) * 48, np.int32)
    out = np.zeros((6, 8), np.int32)
    _module(lane).vnni_tail_into(a, img, goff, ng, ncols, pat, out.reshape(-1), broken)
    return out


def implicit_tile(lane: str, a, b, ng: int, npan: int, order=None, rows: int = 6) -> np.ndarray:
    """The implicit-GEMM conv tile (QVC_IMPLICIT): b as tile() takes it (4 panels [ng][32
    bytes]) laid out as the nc4 image holds it, group g's 4 panels (32 pixels, 128 bytes)
    together at goff[g], the groups stored in `order` (a permutation: the kernel must follow
    goff, not assume the groups in sequence) -> (4, 6, 8) int32 sums as tile()'s."""
    if rows not in (6, 4, 2) or not 1 <= npan <= 4:
        raise ValueError("rows 6 / 4 / 2, npan 1 .. 4")
    img, goff = _nc4_image(b, ng, order)
    a = np.concatenate([np.ascontiguousarray(a, np.uint8).ravel(), np.zeros(64, np.uint8)])
    out = np.zeros((4, 6, 8), np.int32)
    _module(lane).vnni_implicit_into(a, img, goff, ng, npan, out.reshape(-1), rows)
    return out


def pixel_tile(lane: str, w, x, ng: int, order=None, broken: bool = False) -> np.ndarray:
    """The 7-pixel x 32-channel tile (_qgemm_vnni_pix.h): w (ng, 32, 4) int8 weights as
    uint8, x (ng, 7, 4) uint8 pixels, each group's 7 pixels (28 bytes) at goff[g] of an
    image holding the groups in `order` -> (7, 32) int32 sums; broken: the emulated
    build's twin (a weight operand halved)."""
    w = np.ascontiguousarray(w, np.uint8).reshape(-1)
    x = np.ascontiguousarray(x, np.uint8).reshape(ng, 28)
    if ng < 1 or w.size != ng * 128:
        raise ValueError("ng >= 1 groups of 32 x 4 weight bytes and 7 x 4 pixel bytes")
    order = np.arange(ng) if order is None else np.asarray(order)
    slots = np.empty(ng, np.int64)
    slots[order] = np.arange(ng)
    img = np.zeros((ng, 64), np.uint8)            # a group's 28 bytes, then slack
    img[slots] = np.pad(x, ((0, 0), (0, 36)))
    out = np.zeros((7, 32), np.int32)
    _module(lane).vnni_pixel_tile_into(w, img.ravel(), slots * 64, ng, out.reshape(-1), broken)
    return out
