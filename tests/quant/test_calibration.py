"""Calibration math (edgenn/quant/calibration.py): observers, percentile, KL, uint8 params,
ADMM weight scales. Known distributions, so every expectation is checkable by hand."""
import numpy as np
import pytest

from edgenn.quant import calibration as cal


def observed(x, bins=cal.BINS):
    o = cal.Observer(bins)
    o.update(x)
    o.start_histogram()
    o.update_histogram(x)
    return o


def gaussian_with_outliers(n=200_000, outliers=20, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    x[:outliers] = rng.uniform(20, 40, outliers)
    return x


# -- observers ---------------------------------------------------------------------------------
def test_observer_min_max_count_and_zeros():
    o = cal.Observer()
    o.update(np.array([[0.0, -2.0], [3.0, 0.0]], np.float32))
    o.update(np.array([1.0, np.inf], np.float32))       # non-finite values are ignored
    assert (o.min, o.max) == (-2.0, 3.0)
    o.start_histogram()
    o.update_histogram(np.array([0.0, 0.0, -1.0, 2.0], np.float32))
    assert o.zeros == 2 and o.pos.sum() == 3 and o.neg.sum() == 1


def test_moving_average_min_max():
    o = cal.Observer(momentum=0.5)
    o.update(np.array([0.0, 4.0]))
    o.update(np.array([0.0, 2.0]))
    assert o.max == pytest.approx(3.0)


def test_histogram_growth_merges_bins_exactly():
    """Data beyond the limit doubles it; the merged histogram equals one built directly."""
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0, 1, 5000), rng.uniform(0, 3.5, 5000)
    grown = cal.Observer(64)
    grown.start_histogram(1.0)
    grown.update_histogram(a)
    grown.update_histogram(b)            # limit 1 -> 2 -> 4
    direct = cal.Observer(64)
    direct.start_histogram(4.0)
    direct.update_histogram(np.concatenate([a, b]))
    assert grown.limit == 4.0
    np.testing.assert_array_equal(grown.pos, direct.pos)


def test_channel_means():
    o = cal.Observer(channel_axes=(1, -1))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    o.update(x)
    o.update(x + 1)
    np.testing.assert_allclose(o.channel_mean(1), x.mean(axis=(0, 2)) + 0.5)
    np.testing.assert_allclose(o.channel_mean(-1), x.mean(axis=(0, 1)) + 0.5)


# -- percentile --------------------------------------------------------------------------------
def test_percentile_abs_and_tails_match_numpy():
    x = gaussian_with_outliers()
    o = observed(x)
    w = o.bin_width
    lo, hi = cal.percentile_range(o, 99.99, "abs")
    t = np.percentile(np.abs(x), 99.99)
    assert hi == pytest.approx(t, abs=w) and lo == pytest.approx(max(x.min(), -t), abs=w)
    lo, hi = cal.percentile_range(o, 99.9, "tails")
    want_lo, want_hi = np.percentile(x, [0.1, 99.9])
    assert lo == pytest.approx(want_lo, abs=w) and hi == pytest.approx(want_hi, abs=w)
    assert cal.percentile_range(o, 100, "abs") == pytest.approx((x.min(), x.max()), abs=w)


def test_percentile_clips_to_observed_range():
    x = np.abs(np.random.default_rng(2).standard_normal(10_000))   # non-negative
    lo, hi = cal.percentile_range(observed(x), 99.0, "abs")
    assert lo == pytest.approx(x.min(), abs=1e-6) and hi < x.max()


# -- KL --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kl_closed_form_equals_definition(seed):
    rng = np.random.default_rng(seed)
    hist = np.bincount(np.minimum((np.abs(rng.standard_t(3, 50_000)) * 200).astype(int), 1023),
                       minlength=1024).astype(np.float64)
    hist[rng.integers(0, 1024, 100)] = 0          # empty bins inside the range
    cand = np.arange(100, 1024)
    levels = np.where(cand % 3 == 0, 128, 97)
    fast = cal.kl_divergences(hist, cand, levels)
    slow = np.array([cal.kl_divergence(hist, int(i), int(n)) for i, n in zip(cand, levels)])
    finite = np.isfinite(slow)
    assert (np.isfinite(fast) == finite).all()
    np.testing.assert_allclose(fast[finite], slow[finite], rtol=1e-9, atol=1e-12)


def test_kl_clips_outliers_of_a_gaussian():
    o = observed(gaussian_with_outliers())
    lo, hi = cal.kl_range(o)
    assert 3.0 < hi < 8.0 and lo == -hi         # symmetric data: a symmetric threshold
    assert hi < 0.25 * o.max                    # the outliers (20..40) are clipped


def test_kl_post_relu_threshold_in_the_tail_not_at_the_spike():
    """Half the values are exact zeros; KL leaves them out and keeps most of the tail."""
    x = np.maximum(np.random.default_rng(3).standard_normal(200_000), 0).astype(np.float32)
    lo, hi = cal.kl_range(observed(x))
    assert lo == 0.0 and 2.5 < hi <= x.max()


def test_kl_keeps_min_max_for_few_distinct_values():
    x = np.random.default_rng(4).integers(0, 17, 10_000) / 16.0   # 17 grey levels
    assert cal.kl_range(observed(x)) == (0.0, 1.0)


# -- uint8 parameters --------------------------------------------------------------------------
@pytest.mark.parametrize("lo,hi", [(-1.0, 3.0), (0.0, 6.0), (0.5, 2.0), (-4.0, -1.0),
                                   (-0.375, 15.6)])
def test_uint8_params_include_zero_exactly(lo, hi):
    scale, zp = cal.uint8_params(lo, hi)
    assert scale > 0 and 0 <= int(zp) <= 255
    assert cal.fake_quant(np.float32(0), scale, int(zp)) == 0.0
    lo0, hi0 = min(lo, 0.0), max(hi, 0.0)
    x = np.linspace(lo0, hi0, 1001, dtype=np.float32)
    assert np.max(np.abs(cal.fake_quant(x, scale, int(zp)) - x)) <= float(scale) * 0.51 + 1e-6
    if lo >= 0:
        assert zp == 0
    if hi <= 0:
        assert zp == 255


def test_uint8_params_degenerate_range():
    scale, zp = cal.uint8_params(0.0, 0.0)
    assert scale > 0 and zp == 0


def test_histogram_mse_estimates_the_real_error():
    x = gaussian_with_outliers(50_000)
    o = observed(x)
    for method in cal.METHODS:
        lo, hi = cal.activation_range(o, method)
        real = float(np.mean((cal.fake_quant(x, *cal.uint8_params(lo, hi)) - x) ** 2))
        assert cal.histogram_mse(o, lo, hi) == pytest.approx(real, rel=0.1)


def test_auto_picks_the_lowest_mse():
    o = observed(gaussian_with_outliers(50_000))
    best, rng, errors = cal.best_activation_range(o)
    assert errors[best] == min(errors.values())
    assert rng == cal.activation_range(o, best)


# -- weights ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [7, 8])
@pytest.mark.parametrize("seed", range(4))
def test_admm_never_worse_than_max_abs(bits, seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_t(2.5, (32, 3, 3, 3)).astype(np.float32)    # heavy tails
    qmax = cal.qmax_of(bits)
    e_max = cal.weight_error(w, cal.maxabs_scales(w, 0, qmax), 0, qmax)
    e_admm = cal.weight_error(w, cal.admm_scales(w, 0, qmax), 0, qmax)
    assert np.all(e_admm <= e_max * (1 + 1e-9))
    assert e_admm.sum() < 0.99 * e_max.sum()    # a local refinement: 1-4% here


def test_admm_keeps_a_lone_outlier_weight():
    """Clipping one 40-sigma weight would cost more than the coarser grid: ADMM keeps the
    max-abs scale (it minimizes the error, it does not clip for the sake of it)."""
    w = np.random.default_rng(9).standard_normal((1, 256))
    w[0, 0] = 40.0
    a = cal.admm_scales(w, 0, 63)
    assert a[0] * 63 > 39.0


def test_admm_is_a_fixed_point():
    """At convergence a = <W, Q> / <Q, Q> with Q = clip(round(W / a))."""
    w = np.random.default_rng(7).standard_normal((4, 64))
    a = cal.admm_scales(w, 0, 63)
    q = np.clip(np.rint(w / a[:, None]), -63, 63)
    np.testing.assert_allclose(a, np.sum(w * q, 1) / np.sum(q * q, 1), rtol=1e-6)


def test_quantize_weights_codes_and_scales():
    w = np.random.default_rng(8).standard_normal((8, 16)).astype(np.float32)
    w[3] = 0.0                                   # an all-zero channel
    for bits, qmax in ((7, 63), (8, 127)):
        for method in ("maxabs", "admm"):
            q, s = cal.quantize_weights(w, 1, bits, method)   # channels along axis 1
            assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (16,)
            assert np.abs(q).max() <= qmax and np.all(s > 0)
    q, s = cal.quantize_weights(w, 0, 7, "maxabs", min_scale=0.5)
    assert np.all(s >= 0.5)
    with pytest.raises(ValueError):
        cal.quantize_weights(w, 0, 4)
    # dead filters of a trained model (PP-OCRv4 rec has them): weights so small that
    # max |w| / qmax underflows float32; their codes are 0, no NaN reaches the cast
    dead = w.copy()
    dead[2] = 1e-42                              # subnormal weights
    dead[5] = 3e-37                              # normal, but / 63 is below the smallest normal
    with np.errstate(all="raise", under="ignore"):
        for method in ("maxabs", "admm"):
            q, s = cal.quantize_weights(dead, 0, 7, method)
            assert np.all(q[[2, 5]] == 0) and np.all(np.isfinite(s)) and np.all(s > 0)
            assert s[2] == s[5] == 1.0 and np.array_equal(q[0], cal.quantize_weights(
                w, 0, 7, method)[0][0])


def test_kl_on_a_small_tensor_merges_bins_or_keeps_min_max():
    """A few hundred values spread over 2048 bins say nothing about their distribution."""
    x = np.maximum(np.random.default_rng(10).standard_normal(600), 0)
    assert cal.kl_range(observed(x)) == (0.0, x.max())
    x = np.random.default_rng(11).standard_normal(6000)     # merged to 512 bins: KL runs
    lo, hi = cal.kl_range(observed(x))
    assert 2.0 < hi <= np.abs(x).max()
