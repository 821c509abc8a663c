"""Real speech for the voice-activity tests: sentences spoken by espeak-ng (Debian's
espeak-ng; .ci/run installs it), resampled to 16 / 8 kHz, with silences between them, and
the ground truth of where the speech is.

`speech(rate)` -> (float32 samples in [-1, 1], bool mask per sample: speech). Cached under
the test-model cache directory (models.default_cache_dir), keyed by the text and rate.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SENTENCES = ("Voice activity detection finds the parts of a recording where somebody "
             "speaks.",
             "Edge devices run it on every chunk of audio before they wake the recognizer.")
GAPS_S = (0.6, 1.0, 0.7)          # silence before, between and after the sentences


def have_espeak() -> bool:
    return shutil.which("espeak-ng") is not None


def require_espeak() -> None:
    """Skip without espeak-ng; fail instead where EDGENN_REQUIRE_ESPEAK=1 (CI)."""
    import pytest
    if not have_espeak():
        why = "needs espeak-ng for real speech (apt-get install espeak-ng)"
        if os.environ.get("EDGENN_REQUIRE_ESPEAK") == "1":
            pytest.fail(why)
        pytest.skip(why)


def _spoken(text: str) -> tuple[np.ndarray, int]:
    from scipy.io import wavfile
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.wav")
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", path, text],
                       check=True, capture_output=True, timeout=60)
        rate, x = wavfile.read(path)
    return x.astype(np.float32) / 32768.0, int(rate)


def speech(rate: int = 16000) -> tuple[np.ndarray, np.ndarray]:
    from scipy.signal import resample_poly
    from .models import default_cache_dir
    key = hashlib.sha1(repr((SENTENCES, GAPS_S, rate)).encode()).hexdigest()[:12]
    cache = Path(default_cache_dir()) / f"speech-{key}.npz"
    if cache.exists():
        d = np.load(cache)
        return d["x"], d["mask"]
    rng = np.random.default_rng(0)
    parts, mask = [], []
    for k, gap in enumerate(GAPS_S):
        n = int(gap * rate)
        parts.append((rng.standard_normal(n) * 1e-3).astype(np.float32))   # room noise
        mask.append(np.zeros(n, bool))
        if k < len(SENTENCES):
            x, r = _spoken(SENTENCES[k])
            g = np.gcd(rate, r)
            x = resample_poly(x, rate // g, r // g).astype(np.float32)
            loud = np.abs(x) > 0.02          # espeak pads with silence: speech where loud
            idx = np.flatnonzero(loud)
            x = x[idx[0]:idx[-1] + 1] if idx.size else x
            parts.append(x)
            mask.append(np.ones(x.size, bool))
    x, m = np.concatenate(parts), np.concatenate(mask)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, x=x, mask=m)
    return x, m
