"""Token choice (edgenn/lm/sampling.py): each rule against what it promises, on logits
whose answer is known."""
from __future__ import annotations

import numpy as np
import pytest

from edgenn.errors import InputError
from edgenn.lm.sampling import Sampling, penalize, pick

LOGITS = np.log(np.array([[0.05, 0.4, 0.3, 0.15, 0.1]], np.float32))   # softmax = these


def _draws(s: Sampling, n: int = 20000) -> np.ndarray:
    rng = np.random.default_rng(s.seed)
    return np.array([pick(LOGITS, [np.array([], np.int64)], s, rng)[0] for _ in range(n)])


def _within(freq: np.ndarray, p: np.ndarray, n: int) -> bool:
    """Each empirical frequency within 5 standard deviations of its probability."""
    return bool(np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12))


def test_greedy_is_the_argmax_of_each_row():
    logits = np.random.default_rng(0).standard_normal((4, 50)).astype(np.float32)
    got = pick(logits, [np.array([], np.int64)] * 4, Sampling(), np.random.default_rng())
    assert np.array_equal(got, logits.argmax(1))


def test_temperature_one_samples_the_softmax():
    d = _draws(Sampling(temperature=1.0, seed=1))
    p = np.exp(LOGITS[0]) / np.exp(LOGITS[0]).sum()
    assert _within(np.bincount(d, minlength=5) / d.size, p, d.size)


def test_top_k_keeps_the_k_likeliest_renormalised():
    d = _draws(Sampling(temperature=1.0, top_k=2, seed=2))
    assert set(np.unique(d)) == {1, 2}
    assert _within(np.bincount(d, minlength=5)[[1, 2]] / d.size, np.array([4, 3]) / 7, d.size)


def test_top_p_keeps_the_fewest_reaching_the_mass():
    # 0.4 + 0.3 = 0.7 < 0.75 <= 0.85 = 0.4 + 0.3 + 0.15: tokens 1, 2, 3
    d = _draws(Sampling(temperature=1.0, top_p=0.75, seed=3))
    assert set(np.unique(d)) == {1, 2, 3}


def test_low_temperature_sharpens():
    d = _draws(Sampling(temperature=0.05, seed=4), 2000)
    assert np.mean(d == 1) > 0.99


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([[2.0, -2.0, 1.0]], np.float32)
    out = penalize(logits, [np.array([0, 1])], 2.0)
    assert np.array_equal(out, [[1.0, -4.0, 1.0]]) and logits[0, 0] == 2.0
    assert pick(logits, [np.array([0, 1])], Sampling(repetition_penalty=3.0),
                np.random.default_rng())[0] == 2


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=0),
                                 dict(top_p=1.5), dict(repetition_penalty=0)])
def test_bad_settings_are_named(bad):
    with pytest.raises(InputError):
        Sampling(**bad)
