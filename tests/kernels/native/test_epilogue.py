"""The fused epilogue's one description (kernels/native/_epilogue.h, read by epilogue.py):
one activation enum in C, every family's activations read from its C mask, no other
table from activation names to codes, ONNX's parameter defaults in one place."""
import re
from pathlib import Path

import numpy as np
import pytest

from edgenn.kernels.depthwise import _dwc8, _dwproj, _dwrows
from edgenn.kernels.direct import _convdirect
from edgenn.kernels.gemm import _sgemm
from edgenn.kernels.int8 import _qgemm
from edgenn.kernels.native import epilogue
from edgenn.kernels.sparse import _spmm
from edgenn.kernels.winograd import _winograd
from edgenn.kernels.reference.nn import apply_activation

KERNELS = Path(epilogue.__file__).parent.parent   # edgenn/kernels/<family>/
FAMILIES = [_sgemm, _qgemm, _dwc8, _winograd, _convdirect, _dwproj, _dwrows, _spmm]


def test_names_come_from_c_in_code_order():
    assert epilogue.NAMES[:3] == ("", "Relu", "Clip")   # kernels test act <= CLIP
    assert len(set(epilogue.NAMES)) == len(epilogue.NAMES)
    for i, name in enumerate(epilogue.NAMES):
        assert epilogue.code(name) == i
    with pytest.raises(ValueError, match="not one of"):
        epilogue.code("Swish2")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_each_family_fuses_a_subset_from_its_c_mask(family):
    acts = family.ACTIVATIONS
    assert acts[:3] == ("", "Relu", "Clip") and set(acts) <= set(epilogue.NAMES)
    assert list(acts) == sorted(acts, key=epilogue.code)


def test_one_activation_enum_and_no_other_code_table():
    """Kernel sources name activations only through _epilogue.h's EDGENN_ACT_* codes (no
    family enum of its own) and Python maps names to codes only in epilogue.py. (The
    recurrent cells' gate functions, _recurrent.h's RA_*, are ONNX LSTM / GRU's
    `activations` attribute, Tanh among them: not a fused epilogue.)"""
    enum_of_acts = re.compile(r"enum\s*\{[^}]*\b\w*_(RELU|CLIP)\b[^}]*\}", re.S)
    name_to_code = re.compile(r"[\"']Relu[\"']\s*:\s*(\d|\w*RELU\b)")   # a code
    for path in sorted(KERNELS.glob("*/*")):
        if path.suffix not in (".h", ".pyx", ".pxi", ".py") or path.name.endswith("_emu.pyx"):
            continue
        text = path.read_text()
        if path.stem in ("_recurrent", "_epilogue"):
            continue
        m = enum_of_acts.search(text)
        assert not m, (path.name, m.group(0)[:80])
        assert not name_to_code.search(text), path.name


@pytest.mark.parametrize("act,given,want", [
    ("HardSigmoid", [], (0.2, 0.5)), ("HardSigmoid", [0.1], (0.1, 0.5)),
    ("LeakyRelu", [], (0.01, 0.0)), ("LeakyRelu", [0.3], (0.3, 0.0)),
    ("Clip", [], (-np.inf, np.inf)), ("Clip", [-1.0], (-1.0, np.inf)),
    ("Clip", [0, 6], (0.0, 6.0)), ("Relu", [], (0.0, 0.0)), ("", None, (0.0, 0.0))])
def test_params_fill_onnx_defaults(act, given, want):
    assert epilogue.params(act, given) == want


@pytest.mark.parametrize("act", sorted(epilogue.DEFAULT_PARAMS))
def test_sgemm_takes_the_defaults_as_the_reference_does(act):
    """A parametrized activation given without params: the C epilogue and the reference
    (ONNX's defaults) agree."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((7, 20)).astype(np.float32)
    b = rng.standard_normal((20, 9)).astype(np.float32)
    g = _sgemm.SGemm(7, 9, 20, packed_a=_sgemm.pack_a(a), act=act, params=[],
                     row=_sgemm.best_row())
    out = np.empty((7, 9), np.float32)
    g.run(b, out)
    want = apply_activation(a.astype(np.float64) @ b, act, list(epilogue.DEFAULT_PARAMS[act]))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
