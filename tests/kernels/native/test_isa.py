"""ISA tiers: the one CPU probe, the EDGENN_MAX_ISA cap, and the AVX-512 VNNI and AVX-VNNI
int8 micro-kernels checked on every machine: natively where the CPU has them, and always through
the SIMDe build (_qgemm_emu), exact for integers, with a deliberately broken twin that
the same check must reject (the emulated lane is not vacuous).

The report header (conftest.py) says which tiers ran natively and which emulated.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

from edgenn.kernels import isa
from edgenn.kernels.int8 import _qgemm, vnni_tiles

MR, NR, PANELS = 6, 8, 4


def _run_py(code: str, **env) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


# -- probe and cap -----------------------------------------------------------------------------

def test_probe_is_consistent():
    tiers, feats = isa.tiers(), isa.features()
    assert tiers[0] == "scalar" and isa.active_tier() == tiers[-1]
    if "avx2" in tiers:
        assert {"avx2", "fma", "os_ymm"} <= feats
    if "avx512" in tiers:
        assert {"avx512f", "avx512bw", "avx512vl", "avx512dq", "os_zmm"} <= feats
    if "avx512vnni" in tiers:
        assert "avx512vnni" in feats
    x86 = ("scalar", "avx2", "avxvnni", "avx512", "avx512vnni")   # the cap's order
    top = isa.active_tier()
    assert ("avxvnni" in tiers) == ("avxvnni" in feats and top in x86
                                    and x86.index(top) >= x86.index("avxvnni"))
    # the int8 table's usable rows follow the probe (a compiler without AVX-VNNI leaves
    # that row out of the table)
    int8 = {r.isa for r in _qgemm.rows()}
    assert ("avx512vnni" in int8) == ("avx512vnni" in tiers)
    assert ("avxvnni" in int8) == ("avxvnni" in tiers and "avxvnni" in
                                    {r.isa for r in _qgemm.ROWS})
    assert ("avx2" in int8) == ("avx2" in tiers)
    assert isa.cpu_model() in isa.describe()


@pytest.mark.parametrize("cap", ["scalar", "avx2"])
def test_cap_limits_every_kernel(cap):
    """EDGENN_MAX_ISA applies to the C kernels' own dispatch and to the planner's specs."""
    code = (
        "from edgenn.kernels import isa; from edgenn.kernels.int8 import _qgemm\n"
        "from edgenn.runtime.select import _runnable\n"
        "from edgenn.registry import KERNELS; import edgenn.oplist as o; o.load_kernels()\n"
        "vnni = [s.name for s in KERNELS['QConv'] if s.isa == 'avx512vnni' and _runnable(s)]\n"
        "tiers = {r.isa for r in _qgemm.rows()}\n"
        "print(isa.active_tier(), 'avx2' in tiers, 'avx512vnni' in tiers, len(vnni))")
    tier, avx2, vnni, specs = _run_py(code, EDGENN_MAX_ISA=cap).split()
    host = isa.host_tier()
    assert tier == (cap if isa.TIERS.index(cap) <= isa.TIERS.index(host) else host)
    assert avx2 == str(tier == "avx2")
    assert vnni == "False" and specs == "0"


def test_avxvnni_cap_runs_as_a_client_cpu():
    """EDGENN_MAX_ISA=avxvnni: AVX2 plus AVX-VNNI where the CPU has it (an Alder Lake's
    kernels: the avxvnni specs offered, no AVX-512 one), plain AVX2 where it has not."""
    code = (
        "from edgenn.kernels import isa; from edgenn.kernels.int8 import _qgemm\n"
        "from edgenn.runtime.select import _runnable\n"
        "from edgenn.registry import KERNELS; import edgenn.oplist as o; o.load_kernels()\n"
        "run = {s.isa for op in ('QConv', 'QGemm') for s in KERNELS[op] if _runnable(s)}\n"
        "print(isa.active_tier(), ','.join(isa.tiers()), _qgemm.has_vnni('avx512vnni'),"
        " _qgemm.has_vnni('avxvnni'), 'avxvnni' in run, 'avx512vnni' in run)")
    if "avx2" not in isa.tiers():
        pytest.skip("this CPU (or the cap) has no AVX2 tier: the cap can only lower it")
    tier, tiers, vnni, avxvnni, offered, offered512 = _run_py(code, EDGENN_MAX_ISA="avxvnni").split()
    has = "avxvnni" in isa.features()
    assert tier == ("avxvnni" if has else "avx2")
    assert tiers == ("scalar,avx2,avxvnni" if has else "scalar,avx2")
    assert vnni == "False" and offered512 == "False"
    assert avxvnni == offered == str(has)


def test_unknown_cap_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("EDGENN_MAX_ISA", "avx1024")
    with pytest.raises(isa.IsaError, match="EDGENN_MAX_ISA='avx1024' is not a tier"):
        isa.active_tier()


# -- the VNNI micro-kernels, native and emulated -------------------------------------------------

def _reference(kind, a, b):
    """a (ng, 6, 4) uint8 panel bytes, b (4, ng, 8, 4) -> (4, 6, 8) int64 sums."""
    if kind == "conv":   # A = s8 weights, B = u8 pixels
        av, bv = a.view(np.int8).astype(np.int64), b.astype(np.int64)
    else:                # A = u8 activations, B = s8 weights
        av, bv = a.astype(np.int64), b.view(np.int8).astype(np.int64)
    return np.einsum("grq,pgjq->prj", av, bv)


def _panels(rng, ng, fill):
    if fill == "random":
        return (rng.integers(0, 256, (ng, MR, 4), dtype=np.uint8),
                rng.integers(0, 256, (PANELS, ng, NR, 4), dtype=np.uint8))
    u, s = np.uint8(255), np.int8(-128).view(np.uint8) if fill == "min" else np.uint8(127)
    return np.full((ng, MR, 4), s, np.uint8), np.full((PANELS, ng, NR, 4), u, np.uint8)


def _call(lane, kind, a, b, ng, npan, tier="avx512vnni", rows=6):
    flat_b = b.reshape(PANELS, -1)
    return vnni_tiles.tile(lane, kind, a, flat_b, ng, flat_b.shape[1], npan, tier, rows)


VNNI_LANES = ["emulated"] + (["native"] if _qgemm.has_vnni("avx512vnni") else [])
LANES = [("emulated", "avx512vnni"), ("emulated", "avxvnni")] + \
    [("native", t) for t in ("avx512vnni", "avxvnni") if _qgemm.has_vnni(t)]


@pytest.mark.parametrize("lane,tier", LANES)
@pytest.mark.parametrize("kind", ["conv", "gemm"])
@pytest.mark.parametrize("ng", [0, 1, 2, 7, 64, 300])
def test_vnni_microkernel_is_exact(lane, tier, kind, ng):
    rng = np.random.default_rng(ng)
    for fill in ("random", "min", "max"):
        a, b = _panels(rng, ng, fill)
        if kind == "gemm":    # the u8 operand is A: u8 255 against s8 -128 / 127
            a, b = b[0, :, :MR], np.broadcast_to(a[:, :1], (ng, NR, 4))[None].repeat(PANELS, 0)
            a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        want = _reference(kind, a, b)
        for npan in (1, 2, 3, 4):
            got = _call(lane, kind, a, b, ng, npan, tier)
            assert np.array_equal(got[:npan], want[:npan]), (lane, tier, kind, ng, fill, npan)


@pytest.mark.parametrize("lane", VNNI_LANES)
@pytest.mark.parametrize("rows", [6, 4, 2])
@pytest.mark.parametrize("ng", [1, 5, 130])
def test_vnni_conv_tile_shapes_are_exact(lane, rows, ng):
    """The AVX-512 VNNI conv driver's tile shapes (rows 6 / 4 / 2 x 32 / 16 pixels, by the
    rows and panels left): each gives the full tile's sums for its rows and panels and
    writes no other row."""
    rng = np.random.default_rng(rows * ng)
    for fill in ("random", "min", "max"):
        a, b = _panels(rng, ng, fill)
        want = _reference("conv", a, b)
        for npan in (1, 2, 3, 4):
            got = _call(lane, "conv", a, b, ng, npan, rows=rows)
            assert np.array_equal(got[:npan, :rows], want[:npan, :rows]), (lane, rows, fill, npan)
            assert not got[:, rows:].any()
    with pytest.raises(ValueError, match="4-row"):
        _call("emulated", "gemm", a, b, ng, 4, rows=4)


@pytest.mark.parametrize("lane", VNNI_LANES)
@pytest.mark.parametrize("ng", [1, 7, 64])
def test_implicit_gemm_tile_follows_the_group_offsets(lane, ng):
    # the implicit-GEMM tiles (no packed block: group g's pixels at b + goff[g]) over every
    # shape, with the groups stored out of order: the sums of the packed tile
    rng = np.random.default_rng(ng)
    order = rng.permutation(ng)
    for fill in ("random", "min", "max"):
        a, b = _panels(rng, ng, fill)
        want = _reference("conv", a, b)
        for rows in (6, 4, 2):
            for npan in (1, 2, 3, 4):
                got = vnni_tiles.implicit_tile(lane, a, b, ng, npan, order, rows)
                assert np.array_equal(got[:npan, :rows], want[:npan, :rows]), \
                    (lane, ng, fill, rows, npan)


@pytest.mark.parametrize("lane", VNNI_LANES)
@pytest.mark.parametrize("ng", [1, 7, 8, 9, 64, 300])
def test_last_columns_with_the_rows_in_the_lanes_are_exact(lane, ng):
    # the implicit GEMM's last 1 / 2 columns (_qgemm_vnni_tail.h): 8 K groups per 3 zmm of
    # the packed panel, the last block partial unless ng % 8 == 0, groups out of order
    rng = np.random.default_rng(ng + 100)
    order = rng.permutation(ng)
    for fill in ("random", "min", "max"):
        a, b = _panels(rng, ng, fill)
        want = _reference("conv", a, b)[0]            # columns 0 .. 7: the first panel
        for ncols in range(1, _qgemm.TAIL_COLUMNS + 1):
            got = vnni_tiles.tail_tile(lane, a, b, ng, ncols, order)
            assert np.array_equal(got[:, :ncols], want[:, :ncols]), (lane, ng, fill, ncols)
            assert not got[:, ncols:].any()


def _pixel_reference(w, x):
    """(ng, 32, 4) s8 weights (as u8) x (ng, 7, 4) u8 pixels -> (7, 32) int64 sums."""
    return np.einsum("gpq,gcq->pc", x.astype(np.int64), w.view(np.int8).astype(np.int64))


@pytest.mark.parametrize("lane", VNNI_LANES)
@pytest.mark.parametrize("ng", [1, 2, 9, 64, 300])
def test_pixel_tile_is_exact(lane, ng):
    # the 7-pixel x 32-channel tile (_qgemm_vnni_pix.h): every pixel's 4 bytes broadcast
    # from goff[g] + 4 i, the groups stored out of order; u8 255 against s8 -128 / 127
    rng = np.random.default_rng(ng + 7)
    order = rng.permutation(ng)
    for fill in ("random", "min", "max"):
        if fill == "random":
            w = rng.integers(0, 256, (ng, 32, 4), dtype=np.uint8)
            x = rng.integers(0, 256, (ng, 7, 4), dtype=np.uint8)
        else:
            s = np.int8(-128 if fill == "min" else 127).view(np.uint8)
            w, x = np.full((ng, 32, 4), s, np.uint8), np.full((ng, 7, 4), 255, np.uint8)
        got = vnni_tiles.pixel_tile(lane, w, x, ng, order)
        assert np.array_equal(got, _pixel_reference(w, x)), (lane, ng, fill)


def test_emulated_lane_catches_a_broken_pixel_tile():
    rng = np.random.default_rng(5)
    w = rng.integers(0, 256, (11, 32, 4), dtype=np.uint8)
    x = rng.integers(0, 256, (11, 7, 4), dtype=np.uint8)
    want = _pixel_reference(w, x)
    assert np.array_equal(vnni_tiles.pixel_tile("emulated", w, x, 11), want)
    assert not np.array_equal(vnni_tiles.pixel_tile("emulated", w, x, 11, broken=True), want)
    if _qgemm.has_vnni("avx512vnni"):      # the twin is only in the tests' emulated build
        with pytest.raises(ValueError, match="no such kernel"):
            vnni_tiles.pixel_tile("native", w, x, 11, broken=True)


def test_emulated_lane_catches_a_broken_last_columns_kernel():
    rng = np.random.default_rng(2)
    a, b = _panels(rng, 13, "random")
    want = _reference("conv", a, b)[0]
    assert np.array_equal(vnni_tiles.tail_tile("emulated", a, b, 13, 2)[:, :2], want[:, :2])
    assert not np.array_equal(vnni_tiles.tail_tile("emulated", a, b, 13, 2, broken=True)[:, :2],
                              want[:, :2])
    if _qgemm.has_vnni("avx512vnni"):      # the twin is only in the tests' emulated build
        with pytest.raises(ValueError, match="no such kernel"):
            vnni_tiles.tail_tile("native", a, b, 13, 2, broken=True)


@pytest.mark.parametrize("tier", ["avx512vnni", "avxvnni"])
def test_emulated_lane_catches_a_broken_kernel(tier):
    rng = np.random.default_rng(1)
    a, b = _panels(rng, 9, "random")
    want = _reference("conv", a, b)
    for npan in (4, 1):         # the 32-pixel (zmm) and the 8-pixel (ymm) tiles
        assert np.array_equal(_call("emulated", "conv", a, b, 9, npan, tier)[:npan], want[:npan])
        assert not np.array_equal(_call("emulated", "conv_broken", a, b, 9, npan, tier)[:npan],
                                  want[:npan])


def test_extremes_hit_the_s16_limit_that_vnni_avoids():
    """255 x -128 four times is -130560 per group: past int16, so an AVX2 vpmaddubsw pair
    would saturate; the VNNI kernels must give the exact int32 sum."""
    a, b = _panels(None, 3, "min")
    for tier in ("avx512vnni", "avxvnni"):
        got = _call("emulated", "conv", a, b, 3, 4, tier)
        assert (got == 3 * 4 * 255 * -128).all()


# -- the VNNI sums of the int8 depthwise kernel (vpdpwssd), emulated -----------------------------

def _dw_reference(x, w, geom, x_zp):
    sh, sw, ph, pw, dh, dw, oh, ow = geom
    kh, kw = w.shape
    h, wd = x.shape
    pad = np.zeros((max(h + ph, (oh - 1) * sh + (kh - 1) * dh + 1),
                    max(wd + pw, (ow - 1) * sw + (kw - 1) * dw + 1)), np.int64)
    pad[ph:ph + h, pw:pw + wd] = x.astype(np.int64) - x_zp
    out = np.zeros((oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += int(w[i, j]) * pad[i * dh:i * dh + (oh - 1) * sh + 1:sh,
                                      j * dw:j * dw + (ow - 1) * sw + 1:sw]
    return out


DW_GEOMS = [  # (H, W, kh, kw, sh, sw, ph, pw, dh, dw)
    (7, 7, 3, 3, 1, 1, 1, 1, 1, 1), (14, 14, 3, 3, 2, 2, 1, 1, 1, 1),
    (9, 23, 3, 3, 1, 1, 1, 1, 1, 1), (11, 40, 3, 3, 2, 2, 0, 1, 1, 1),
    (10, 12, 5, 5, 1, 1, 4, 4, 2, 2), (6, 5, 1, 1, 1, 1, 0, 0, 1, 1),
    (8, 9, 3, 2, 2, 1, 1, 0, 1, 1), (5, 33, 7, 7, 1, 1, 3, 3, 1, 1)]


@pytest.mark.parametrize("g", DW_GEOMS)
def test_vnni_depthwise_sums_are_exact_emulated(g):
    """The vpdpwssd body of qconv_dw_u8s8__avx512vnni on SIMDe (any CPU): the exact int32
    sums of (x - x_zp) * w, random and at the extremes (255 - 0 against -128 on every tap),
    on narrow and wide rows, strides, pads, dilation; the broken twin must differ."""
    from edgenn.kernels.int8 import _qgemm_emu
    h, wd, kh, kw, sh, sw, ph, pw, dh, dw = g
    oh = (h + 2 * ph - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + 2 * pw - (kw - 1) * dw - 1) // sw + 1
    geom = (sh, sw, ph, pw, dh, dw, oh, ow)
    rng = np.random.default_rng(h * wd)
    for x, w, zp in [(rng.integers(0, 256, (h, wd), dtype=np.uint8),
                      rng.integers(-128, 128, (kh, kw), dtype=np.int8), 131),
                     (np.full((h, wd), 255, np.uint8), np.full((kh, kw), -128, np.int8), 0),
                     (np.zeros((h, wd), np.uint8), np.full((kh, kw), -128, np.int8), 255)]:
        want = _dw_reference(x, w, geom, zp)
        for which in (0, 2):      # the kernel (3x3 unrolled where T == 9), the tap loop
            got = _qgemm_emu.dw_sums(which, x, w, geom, zp)
            assert np.array_equal(got, want), (g, which, zp)
    broken = _qgemm_emu.dw_sums(1, x, w, geom, zp)
    assert not np.array_equal(broken, want)


# the native AVX-512 VNNI plan's kernels for 3x3 (the u8 plane) and for rows narrower than
# 16 outputs (int16 plane), whole layers with the integer epilogue, emulated
DW_LAYER_GEOMS = [  # (C, H, W, kh, kw, sh, sw, ph, pw, dh, dw): u8 plane ...
    (3, 112, 112, 3, 3, 1, 1, 1, 1, 1, 1), (2, 56, 56, 3, 3, 2, 2, 0, 1, 1, 1),
    (4, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1), (4, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1),
    (3, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1), (3, 8, 5, 3, 3, 1, 1, 1, 1, 1, 1),
    (2, 9, 23, 3, 3, 1, 1, 1, 1, 1, 1), (2, 11, 40, 3, 3, 2, 2, 0, 1, 1, 1),
    (2, 6, 37, 3, 3, 2, 1, 1, 1, 1, 1), (2, 3, 3, 3, 3, 1, 1, 0, 0, 1, 1),
    # ... and narrow int16 rows
    (3, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1), (2, 10, 12, 5, 5, 1, 1, 4, 4, 2, 2),
    (2, 14, 14, 5, 5, 2, 2, 2, 2, 1, 1), (2, 8, 9, 3, 2, 2, 1, 1, 0, 1, 1),
    (2, 7, 7, 3, 3, 1, 1, 2, 2, 2, 2)]


def _requantize(sums, bias, mult, yzp, lo, hi):
    """The integer epilogue in the kernels' arithmetic: float32 (sums + bias) * mult,
    rounded half to even, + yzp, clamped."""
    f = (sums + bias[:, None, None]).astype(np.float32) * mult[:, None, None]
    q = np.rint(np.minimum(f, np.float32(2 ** 24))).astype(np.int64) + yzp
    return np.clip(q, lo, hi).astype(np.uint8)


@pytest.mark.parametrize("g", DW_LAYER_GEOMS)
def test_vnni_depthwise_layer_is_exact_emulated(g):
    """The u8-plane kernel (row taps by dword permute, rows <= 8 paired) and the narrow
    int16 kernel of qconv_dw_u8s8__avx512vnni on SIMDe: bit-exact against int64 sums
    through the same float32 requantization, random and at the extremes (255 or 0 against
    -128 on every tap), per-channel constants; the u8 kernel's broken twin must differ."""
    from edgenn.kernels.int8 import _qgemm_emu
    c, h, wd, kh, kw, sh, sw, ph, pw, dh, dw = g
    oh = (h + 2 * ph - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + 2 * pw - (kw - 1) * dw - 1) // sw + 1
    geom = (sh, sw, ph, pw, dh, dw, oh, ow)
    rng = np.random.default_rng(c * h * wd + kh)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    mult = rng.uniform(2e-4, 4e-3, c).astype(np.float32)
    cases = [(rng.integers(0, 256, (c, h, wd), dtype=np.uint8),
              rng.integers(-128, 128, (c, kh, kw), dtype=np.int8), 131, 0, 255),
             (np.full((c, h, wd), 255, np.uint8), np.full((c, kh, kw), -128, np.int8), 0, 0, 255),
             (np.zeros((c, h, wd), np.uint8), np.full((c, kh, kw), -128, np.int8), 255, 0, 255),
             (rng.integers(0, 256, (c, h, wd), dtype=np.uint8),
              rng.integers(-128, 128, (c, kh, kw), dtype=np.int8), 7, 3, 201)]
    u8 = kh == kw == 3 and dh == dw == 1 and sw <= 2
    for x, w, zp, lo, hi in cases:
        sums = np.stack([_dw_reference(x[i], w[i], geom, zp) for i in range(c)])
        want = _requantize(sums, bias, mult, 128, lo, hi)
        got, read_u8 = _qgemm_emu.dw_layer(0, x, w, geom, zp, bias, mult, 128, lo, hi)
        assert read_u8 == u8
        assert np.array_equal(got, want), (g, zp, np.argwhere(got != want)[:4])
    if u8:
        x, w, zp, lo, hi = cases[0]
        broken, _ = _qgemm_emu.dw_layer(1, x, w, geom, zp, bias, mult, 128, lo, hi)
        assert not np.array_equal(broken, got)
