"""Calibration: per-tensor statistics over calibration batches, and the ranges they give.

An `Observer` watches one tensor: its running min/max and, when asked, two magnitude
histograms over [0, R] (R = max |x|): one of the values >= 0 and one of the |values| < 0.
Every range rule below reads only those statistics, so one pass of the model over the
calibration data serves all methods (two passes when histograms are wanted: the first
finds R, so the bins never have to be rescaled).

Range rules for activations (the quantizer maps each (lo, hi) to per-tensor uint8 params,
`uint8_params`, whose range always includes 0):
  minmax      [min, max] observed.
  percentile  clip at the p-th percentile of |x| ("abs", default p = 99.99) or at the
              (100-p)-th / p-th percentiles of x ("tails").
  kl          TensorRT's entropy calibration (Migacz, GTC 2017), see `kl_threshold`.
Weights (per output channel, symmetric int8, zero point 0): max-abs or ADMM (`admm_scales`).

Choice for KL on uint8 (asymmetric) tensors: a threshold T is searched on the histogram
of |x| and the range is [max(min, -T), min(max, T)]. The number of quantization levels a
candidate gets over [0, T] is the one the uint8 grid really gives it: 255 steps span
min(T, |min|) + min(T, max), so levels(T) = 255 * T / (min(T, |min|) + min(T, max)).
For a non-negative (post-ReLU) tensor that is 255 levels over [0, T]; for a symmetric one
about 128 (TensorRT's int8 count); lopsided tensors (HardSwish: min -0.375) fall between.
A 2-D search over independent (lo, hi) thresholds would cost ~2000x more (not tried);
`auto` (lowest quantization MSE per tensor) covers the tensors where KL is a poor fit.
Exact zeros are left out of KL's histogram and small tensors get coarser bins or keep
min/max (see `kl_range`).
"""
from __future__ import annotations

import math

import numpy as np

BINS = 2048
METHODS = ("minmax", "percentile", "kl")


class Observer:
    """Statistics of one tensor over the calibration batches (see the module doc)."""

    def __init__(self, bins: int = BINS, momentum: float | None = None, channel_axes=()):
        self.bins = int(bins)
        # per-channel sums along these axes (bias correction needs E[x_c] of layer inputs)
        self.channel_sums: dict[int, np.ndarray] = {int(a): None for a in channel_axes}
        self.channel_counts: dict[int, int] = {int(a): 0 for a in channel_axes}
        self.momentum = momentum  # moving-average min/max (per batch) if given
        self.min = math.inf
        self.max = -math.inf
        self.count = 0
        self.limit: float | None = None     # R: the histograms cover |x| in [0, R]
        self.pos: np.ndarray | None = None  # counts of x >= 0 by |x|
        self.neg: np.ndarray | None = None  # counts of x < 0 by |x|
        self.zeros = 0                      # exact zeros among the histogrammed values

    # -- collecting --------------------------------------------------------------------
    def update(self, x: np.ndarray) -> None:
        """Min/max of one batch (and the histograms once `start_histogram` was called)."""
        x = np.asarray(x)
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = x[np.isfinite(x)]
            if finite.size == 0:
                return
            lo, hi = float(finite.min()), float(finite.max())
        if self.momentum is None or self.count == 0:
            self.min, self.max = min(self.min, lo), max(self.max, hi)
        else:
            m = self.momentum
            self.min, self.max = m * self.min + (1 - m) * lo, m * self.max + (1 - m) * hi
        self.count += int(x.size)
        for axis in self.channel_sums:
            ax = axis % x.ndim
            part = x.sum(axis=tuple(d for d in range(x.ndim) if d != ax), dtype=np.float64)
            prev = self.channel_sums[axis]
            self.channel_sums[axis] = part if prev is None or prev.shape != part.shape \
                else prev + part
            self.channel_counts[axis] = (0 if prev is not None and prev.shape != part.shape
                                         else self.channel_counts[axis]) + x.size // x.shape[ax]
        if self.limit is not None:
            self.update_histogram(x)

    def start_histogram(self, limit: float | None = None) -> None:
        """Begin histograms over [0, limit] (default: max |x| seen so far)."""
        if limit is None:
            limit = max(abs(self.min), abs(self.max)) if self.count else 0.0
        self.limit = float(limit) if limit and math.isfinite(limit) and limit > 0 else 1e-30
        self.pos = np.zeros(self.bins, np.int64)
        self.neg = np.zeros(self.bins, np.int64)
        self.zeros = 0

    def update_histogram(self, x: np.ndarray) -> None:
        """Add one batch to the histograms. |x| beyond the limit doubles it (adjacent bins
        merge pairwise, which is exact), so a second pass over new data stays correct."""
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        x = x[np.isfinite(x)]
        if x.size == 0:
            return
        a = np.abs(x)
        peak = float(a.max())
        while peak > self.limit:
            self.pos = _merge_pairs(self.pos)
            self.neg = _merge_pairs(self.neg)
            self.limit *= 2
        idx = np.minimum((a * np.float32(self.bins / self.limit)).astype(np.int64),
                         self.bins - 1)
        idx += self.bins * (x < 0)
        both = np.bincount(idx, minlength=2 * self.bins)
        self.pos += both[:self.bins]
        self.neg += both[self.bins:]
        self.zeros += int(np.count_nonzero(x == 0))

    # -- views ---------------------------------------------------------------------------
    def channel_mean(self, axis: int) -> np.ndarray | None:
        """E[x_c] along `axis` (one of the channel_axes given), None if never seen."""
        total = self.channel_sums.get(axis)
        if total is None or not self.channel_counts.get(axis):
            return None
        return total / self.channel_counts[axis]

    @property
    def has_histogram(self) -> bool:
        return self.pos is not None and int(self.pos.sum() + self.neg.sum()) > 0

    @property
    def bin_width(self) -> float:
        return self.limit / self.bins

    @property
    def nonnegative(self) -> bool:
        return self.min >= 0.0


def _merge_pairs(h: np.ndarray) -> np.ndarray:
    merged = h.reshape(-1, 2).sum(axis=1)
    return np.concatenate([merged, np.zeros(len(h) - len(merged), h.dtype)])


# -- activation ranges ---------------------------------------------------------------------
def minmax_range(obs: Observer) -> tuple[float, float]:
    return float(obs.min), float(obs.max)


def _quantile_in(counts: np.ndarray, width: float, target: float) -> float:
    """The value below which `target` of the counts lie (linear inside a bin); bin k holds
    values in [k * width, (k + 1) * width)."""
    cum = np.cumsum(counts)
    k = int(np.searchsorted(cum, target, side="left"))
    if k >= len(counts):
        return len(counts) * width
    before = float(cum[k - 1]) if k else 0.0
    frac = (target - before) / float(counts[k]) if counts[k] else 1.0
    return (k + min(max(frac, 0.0), 1.0)) * width


def percentile_range(obs: Observer, percentile: float = 99.99,
                     mode: str = "abs") -> tuple[float, float]:
    """Clip at a percentile: of |x| ("abs": [-T, T] met with [min, max]) or of each tail
    of x ("tails": [q_(100-p), q_p])."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    if not obs.has_histogram:
        return minmax_range(obs)
    w = obs.bin_width
    total = float(obs.pos.sum() + obs.neg.sum())
    if mode == "abs":
        t = _quantile_in(obs.pos + obs.neg, w, total * percentile / 100)
        return max(obs.min, -t), min(obs.max, t)
    if mode == "tails":
        tail = total * (100 - percentile) / 100
        n_neg = float(obs.neg.sum())
        if tail < n_neg:  # the low clip is among the negatives: |x| above which `tail` lie
            lo = -_quantile_in(obs.neg, w, n_neg - tail)
        else:
            lo = _quantile_in(obs.pos, w, tail - n_neg)
        hi_target = total * percentile / 100 - n_neg
        hi = _quantile_in(obs.pos, w, hi_target) if hi_target > 0 else \
            -_quantile_in(obs.neg, w, -hi_target)
        return max(obs.min, lo), min(obs.max, hi)
    raise ValueError(f"percentile mode must be 'abs' or 'tails', got {mode!r}")


def kl_divergence(hist: np.ndarray, i: int, levels: int) -> float:
    """KL(P || Q) of one candidate i, written out (the definition; `kl_divergences`
    computes the same for every candidate at once).

    P = hist[:i] with the mass beyond (the tail) added to bin i-1; Q = hist[:i] (without the
    tail, so that clipping shows as divergence) merged into `levels` chunks and spread
    back evenly over the bins where P is non-zero; both normalized."""
    hist = np.asarray(hist, dtype=np.float64)
    if levels > i or levels < 1:
        return math.inf
    p = hist[:i].copy()
    p[i - 1] += hist[i:].sum()
    nonzero = p > 0
    edges = np.round(np.arange(levels + 1) * (i / levels)).astype(np.int64)
    q = np.zeros(i)
    for a, b in zip(edges[:-1], edges[1:]):
        count = int(nonzero[a:b].sum())
        if count:
            q[a:b] = np.where(nonzero[a:b], hist[a:b].sum() / count, 0.0)
    if q.sum() <= 0:
        return math.inf
    p, q = p[nonzero] / p.sum(), q[nonzero] / q.sum()
    q = np.maximum(q, EPS)  # a bin holding only the tail: a large, finite penalty
    return float(np.sum(p * np.log(p / q)))


EPS = 1e-12


def kl_divergences(hist: np.ndarray, candidates: np.ndarray, levels: np.ndarray
                   ) -> np.ndarray:
    """`kl_divergence(hist, i, L)` for every (i, L) pair at once, in closed form.

    With chunk j of candidate i spanning bins [e_j, e_j+1): S_j its sum without the tail,
    c_j its number of bins where P > 0 and M_j its P mass (S_j, plus the tail in the last
    chunk), every non-zero bin of chunk j has Q = S_j / c_j, so
        KL = sum_k p_k log p_k / Ps - log Ps - sum_j (M_j / Ps) log(S_j / (c_j Qs))
    (Ps = total mass, Qs = mass of hist[:i]). Prefix sums give every S_j, c_j and
    sum p log p in O(1): the scan over ~2000 candidates is a few array operations."""
    h = np.asarray(hist, dtype=np.float64)
    i = np.asarray(candidates, dtype=np.int64)
    lev = np.asarray(levels, dtype=np.int64)
    cum = np.concatenate([[0.0], np.cumsum(h)])                    # H(k) = sum h[:k]
    nzc = np.concatenate([[0.0], np.cumsum(h > 0)])                # NZ(k)
    hlogh = np.where(h > 0, h * np.log(np.where(h > 0, h, 1.0)), 0.0)
    plp = np.concatenate([[0.0], np.cumsum(hlogh)])
    total = cum[-1]
    tail = total - cum[i]                                          # mass beyond bin i-1
    last_h = h[i - 1]
    last_p = last_h + tail
    # P log P: bins [0, i-1) untouched, bin i-1 carries the tail
    sum_plogp = plp[i - 1] + np.where(last_p > 0, last_p * np.log(np.maximum(last_p, 1e-300)), 0)
    jmax = int(lev.max())
    j = np.arange(jmax + 1)[None, :]
    edges = np.minimum(np.round(j * (i / lev)[:, None]), i[:, None]).astype(np.int64)
    s = cum[edges[:, 1:]] - cum[edges[:, :-1]]                     # (cand, jmax)
    c = nzc[edges[:, 1:]] - nzc[edges[:, :-1]]
    rows = np.arange(len(i))
    last = lev - 1
    c[rows, last] += (last_p > 0).astype(np.float64) - (last_h > 0).astype(np.float64)
    m = s.copy()
    m[rows, last] += tail
    qs = cum[i]
    with np.errstate(divide="ignore", invalid="ignore"):
        qn = np.where(c > 0, s / (np.maximum(c, 1.0) * qs[:, None]), 0.0)
        cross = np.where(m > 0, (m / total) * np.log(np.maximum(qn, EPS)), 0.0).sum(axis=1)
    kl = sum_plogp / total - np.log(total) - cross
    bad = (lev > i) | (lev < 1) | (qs <= 0)
    return np.where(bad, np.inf, kl)


def kl_threshold(hist: np.ndarray, levels=128, start: int = 128) -> int:
    """TensorRT's entropy calibration on a histogram of |x| (bins of equal width): the
    candidate i in [start, bins] minimizing KL(P || Q) (see `kl_divergence`); the threshold
    is (i + 0.5) * bin width.

    `levels` is a number or a function i -> number of levels (the uint8 rule, module doc)."""
    hist = np.asarray(hist, dtype=np.float64)
    n = len(hist)
    nz = np.nonzero(hist)[0]
    if len(nz) == 0:
        return n
    last = int(nz[-1]) + 1          # candidates past the last non-zero bin clip nothing more
    start = max(1, min(start, last))
    cand = np.arange(start, last + 1)
    if callable(levels):
        lev = np.array([int(round(levels(int(k)))) for k in cand], dtype=np.int64)
    else:
        lev = np.full(len(cand), int(levels), dtype=np.int64)
    lev = np.maximum(lev, 1)
    kl = kl_divergences(hist, cand, lev)
    if not np.isfinite(kl).any():
        return n
    return int(cand[int(np.argmin(kl))])


KL_MIN_BINS = 512      # a histogram is never coarser than this for KL
KL_MIN_PER_BIN = 8     # mean values per bin below which bins are merged


def kl_range(obs: Observer) -> tuple[float, float]:
    """Entropy-calibrated (lo, hi); asymmetric uint8 handling as in the module doc.

    Exact zeros are left out of the histogram: zero is exact under every candidate, and
    the spike of a post-ReLU tensor (half its values) otherwise dominates P so that KL
    prefers thresholds a quarter of the range (measured on the digits CNN: MSE x1000).

    Small tensors: KL compares distributions bin by bin, which means nothing when most
    bins hold 0 or 1 values (a squeeze-excite branch sees N x C values: PP-OCR cls,
    1088 values over 2048 bins, KL clipped a quarter of the range at 10^4 x the MSE of
    min/max). Bins are merged in pairs until they average >= KL_MIN_PER_BIN values, down
    to KL_MIN_BINS bins; a tensor still too sparse keeps min/max."""
    if not obs.has_histogram:
        return minmax_range(obs)
    w = obs.bin_width
    hist = obs.pos + obs.neg
    hist[0] -= obs.zeros
    n = float(hist.sum())
    while len(hist) > KL_MIN_BINS and n < KL_MIN_PER_BIN * len(hist):
        hist = hist.reshape(-1, 2).sum(axis=1)
        w *= 2
    if n < KL_MIN_PER_BIN * len(hist):
        return minmax_range(obs)
    neg_bins = max(-obs.min, 0.0) / w   # |min| and max in bins
    pos_bins = max(obs.max, 0.0) / w

    def levels(i: int) -> float:
        span = min(i, neg_bins) + min(i, pos_bins)
        return 255.0 * i / span if span > 0 else 255.0

    start = 256 if obs.nonnegative else 128
    i = kl_threshold(hist, levels, start=start)
    t = (i + 0.5) * w
    return max(obs.min, -t), min(obs.max, t)


# -- uint8 parameters and their error ----------------------------------------------------------
def uint8_params(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """Per-tensor asymmetric uint8 (scale, zero point) for the range [lo, hi] widened to
    include 0 (so zero padding and ReLU are exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo <= 1e-30:
        return np.float32(1.0 / 255), np.uint8(0)  # never-seen or constant-zero tensor
    scale = np.float32((hi - lo) / 255.0)
    if scale <= 0:
        scale = np.float32(np.finfo(np.float32).tiny)
    zp = int(np.clip(round(-lo / float(scale)), 0, 255))
    return scale, np.uint8(zp)


def fake_quant(x: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """Quantize to uint8 then dequantize (what a QDQ pair computes)."""
    scale = np.float32(scale)
    q = np.clip(np.rint(np.asarray(x, np.float32) / scale) + zp, 0, 255)
    return ((q - zp) * scale).astype(np.float32)


def histogram_mse(obs: Observer, lo: float, hi: float) -> float:
    """Mean squared error of fake-quantizing the calibration values with the uint8 params of
    [lo, hi], estimated from the histograms (bin centres; a bin is ~1/8 of a step)."""
    if not obs.has_histogram:
        return math.nan
    scale, zp = uint8_params(lo, hi)
    centres = (np.arange(obs.bins) + 0.5) * obs.bin_width
    err = 0.0
    for sign, counts in ((1.0, obs.pos), (-1.0, obs.neg)):
        x = sign * centres
        err += float(np.sum(counts * (x - fake_quant(x, scale, int(zp))) ** 2))
    return err / float(obs.pos.sum() + obs.neg.sum())


def activation_range(obs: Observer, method: str, percentile: float = 99.99,
                     percentile_mode: str = "abs") -> tuple[float, float]:
    """(lo, hi) of one tensor by one method (see the module doc)."""
    if method == "minmax":
        return minmax_range(obs)
    if method == "percentile":
        return percentile_range(obs, percentile, percentile_mode)
    if method == "kl":
        return kl_range(obs)
    raise ValueError(f"unknown calibration method {method!r}; choose one of {METHODS}")


def best_activation_range(obs: Observer, methods=METHODS, **options
                          ) -> tuple[str, tuple[float, float], dict[str, float]]:
    """"auto": the method whose range gives the lowest quantization MSE on this tensor.
    -> (method, (lo, hi), {method: mse})."""
    ranges = {m: activation_range(obs, m, **options) for m in methods}
    errors = {m: histogram_mse(obs, *r) for m, r in ranges.items()}
    finite = {m: e for m, e in errors.items() if math.isfinite(e)}
    best = min(finite, key=finite.get) if finite else methods[0]
    return best, ranges[best], errors


# -- weights ------------------------------------------------------------------------------
def qmax_of(bits: int) -> int:
    if bits not in (7, 8):
        raise ValueError(f"weight_bits must be 7 or 8, got {bits}")
    return (1 << (bits - 1)) - 1


def _channels(w: np.ndarray, axis: int) -> np.ndarray:
    """w with the channel axis first, flattened per channel: (M, rest) float64."""
    return np.moveaxis(np.asarray(w, np.float64), axis, 0).reshape(w.shape[axis], -1)


def maxabs_scales(w: np.ndarray, axis: int = 0, qmax: int = 63) -> np.ndarray:
    """Per-channel symmetric scales max|w_c| / qmax, (M,) float64 (0 for all-zero channels)."""
    return np.abs(_channels(w, axis)).max(axis=1) / qmax


ADMM_STARTS = (1.0, 0.75, 0.5, 0.35, 0.25, 0.15)


def _admm_from(W: np.ndarray, a: np.ndarray, qmax: int, iters: int, tol: float) -> np.ndarray:
    for _ in range(iters):
        q = np.clip(np.rint(W / a[:, None]), -qmax, qmax)
        qq = np.sum(q * q, axis=1)
        a_new = np.where(qq > 0, np.sum(W * q, axis=1) / np.maximum(qq, 1e-300), a)
        a_new = np.where(a_new > 0, a_new, a)
        done = np.all(np.abs(a_new - a) <= tol * a)
        a = a_new
        if done:
            break
    return a


def admm_scales(w: np.ndarray, axis: int = 0, qmax: int = 63, iters: int = 100,
                tol: float = 1e-7, starts=ADMM_STARTS) -> np.ndarray:
    """Per-channel scales a minimizing ||W_c - a Q_c||^2 by alternating minimization
    (Leng et al., AAAI 2018; MNN's quantization tool):
        Q = clip(round(W / a), -qmax, qmax);  a = <W, Q> / <Q, Q>
    Each half-step is an exact minimization over its variable, so the error never grows
    from the start. The iteration is local (from max-abs it barely moves off a lone
    outlier weight), so it runs from several starts, max-abs / qmax times each of
    `starts` (1 included), and keeps per channel the scale with the lowest error: never
    worse than max-abs."""
    wc = _channels(w, axis)
    a = np.abs(wc).max(axis=1) / qmax
    live = a > 0
    if not live.any():
        return a
    W, a0 = wc[live], a[live]
    best, best_err = a0, None
    for r in starts:
        cand = _admm_from(W, a0 * r, qmax, iters, tol)
        q = np.clip(np.rint(W / cand[:, None]), -qmax, qmax)
        err = np.sum((W - cand[:, None] * q) ** 2, axis=1)
        if best_err is None:
            best, best_err = cand, err
        else:
            better = err < best_err
            best = np.where(better, cand, best)
            best_err = np.where(better, err, best_err)
    a[live] = best
    return a


def weight_error(w: np.ndarray, scales: np.ndarray, axis: int = 0, qmax: int = 63
                 ) -> np.ndarray:
    """Per-channel ||W_c - s_c Q_c||^2 with Q the rounded, clipped codes."""
    wc = _channels(w, axis)
    s = np.where(scales > 0, scales, 1.0)[:, None]
    q = np.clip(np.rint(wc / s), -qmax, qmax)
    return np.sum((wc - s * q) ** 2, axis=1)


def quantize_weights(w: np.ndarray, axis: int, bits: int = 7, method: str = "maxabs",
                     min_scale: np.ndarray | float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 codes of `w` along `axis`.

    -> (q int8 of w's shape with |q| <= qmax, scales float32 (M,)). `min_scale` floors the
    scales (the caller uses it so an int32 bias b / (s_x * s_w) cannot overflow)."""
    qmax = qmax_of(bits)
    if method == "admm":
        scales = admm_scales(w, axis, qmax)
    elif method == "maxabs":
        scales = maxabs_scales(w, axis, qmax)
    else:
        raise ValueError(f"unknown weight method {method!r}; choose 'maxabs' or 'admm'")
    scales = np.maximum(scales, min_scale)
    # a channel of (near-)zero weights (a dead filter, max |w| / qmax below float32's
    # smallest normal: its scale would underflow to 0 or a subnormal and w / s turn NaN or
    # overflow) gets scale 1: its codes are 0, its weights exactly zero
    tiny = np.finfo(np.float32).tiny
    scales = np.where(scales >= tiny, scales, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(np.asarray(w, np.float32) / scales.reshape(shape)), -qmax, qmax)
    return q.astype(np.int8), scales
