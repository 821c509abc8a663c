"""Every fast kernel against its reference, forced (not trusting the selector), over edge
shapes: tails, stride 2, padding, dilation, 1x1 spatial, one channel, batch > 1, fused
epilogues (bias, residual, each activation).

Cases per op live in tests/support/kernel_cases/<topic>.py as `CASES = {op: generator}`; a
generator yields (node, inputs) or (node, inputs, const_indices); the inputs at
const_indices (default {1, 2}: weights, bias) are constants at plan time."""
import glob
import importlib
import os

import numpy as np
import pytest

from edgenn.graph.infer import infer_node
from edgenn.oplist import load_all
from edgenn.registry import KERNELS, REFERENCE, TensorInfo

load_all()
CASES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support",
                         "kernel_cases")


def _collect_cases() -> dict:
    """op -> generator of (node, inputs), from every tests/support/kernel_cases/*.py
    (CASES dict)."""
    cases = {}
    for path in sorted(glob.glob(os.path.join(CASES_DIR, "[!_]*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        module = importlib.import_module(f"support.kernel_cases.{name}")
        for op, gen in module.CASES.items():
            assert op not in cases, f"{op} cases defined twice"
            cases[op] = gen
    return cases


CASES = _collect_cases()


def test_every_fast_kernel_has_cases():
    assert set(KERNELS) <= set(CASES), set(KERNELS) - set(CASES)


@pytest.mark.parametrize("spec", [s for specs in KERNELS.values() for s in specs],
                         ids=lambda s: s.name)
def test_fast_kernel_matches_reference(spec):
    from edgenn.kernels import isa
    from edgenn.kernels.plan_context import PlanContext, planning
    if spec.isa and not isa.usable(spec.isa):   # said, not silent: the report lists the tiers
        pytest.skip(f"{spec.isa} is not on this CPU (or EDGENN_MAX_ISA): its micro-kernels "
                    "run emulated in test_isa.py / test_sgemm.py")
    # multi-thread kernels need a plan of > 1 threads
    with planning(PlanContext(threads=2 if spec.name.endswith("_mt") else 1)):
        _check_against_reference(spec)


def test_threads_splitting_k_match_the_reference():
    """The rows mode's 1x1 convs in a plan whose context asks for a K split
    (PlanContext.k_split, the session's "omp-ksplit" plan): each case it applies to."""
    from edgenn.kernels import isa
    from edgenn.kernels.plan_context import PlanContext, planning
    (spec,) = [s for s in KERNELS["Conv"] if s.name == "conv_rows_12x32__avx512f_mt"]
    if not isa.usable(spec.isa):
        pytest.skip(f"{spec.isa} is not on this CPU (or EDGENN_MAX_ISA): the K split runs "
                    "emulated in test_sgemm.py")
    split = 0
    with planning(PlanContext(threads=2, pool="omp", k_split=True)):
        for node, inputs, *_ in CASES["Conv"]():
            ins = [None if v is None else TensorInfo.of(v) if i in (1, 2) else
                   TensorInfo(v.dtype.name, v.shape) for i, v in enumerate(inputs)]
            outs = infer_node(node, ins, fold=False)
            if not spec.supports(node, ins, outs):
                continue
            run = spec.prepare(node, ins, outs)
            split += run.can_split_k
            got = np.full(outs[0].shape, np.nan, np.float32)
            run(inputs, [got])
            _assert_output(spec, node, inputs, got, REFERENCE["Conv"](node.attrs, inputs)[0])
    assert split >= 12, split


def _applicable_cases(spec):
    """-> (node, inputs, input infos, output infos) of each case of spec.op it supports."""
    for node, inputs, *const in CASES[spec.op]():
        # constant inputs (weights, bias; by default inputs 1 and 2) carry values at plan time
        const = const[0] if const else {1, 2}
        ins = [None if v is None else
               TensorInfo.of(v) if i in const else TensorInfo(v.dtype.name, v.shape)
               for i, v in enumerate(inputs)]
        outs = infer_node(node, ins, fold=False)
        if spec.supports(node, ins, outs):
            yield node, inputs, ins, outs


def _check_against_reference(spec):
    covered = 0
    for node, inputs, ins, outs in _applicable_cases(spec):
        covered += 1
        wants = [np.asarray(w) for w in REFERENCE[spec.op](node.attrs, inputs)]
        gots = [np.empty(o.shape, o.dtype) for o in outs]
        for got in gots:
            if got.dtype.kind == "f":
                got.fill(np.nan)  # every element must be written
        spec.prepare(node, ins, outs)(inputs, gots)
        for got, want in zip(gots, wants):   # every output (DynamicQuantizeLinear has 3)
            _assert_output(spec, node, inputs, got, want)
    assert covered >= 4, f"{spec.name}: only {covered} cases apply"


def _assert_output(spec, node, inputs, got, want):
    assert got.dtype == want.dtype and got.shape == want.shape, spec.name
    if got.dtype.kind != "f" and spec.lsb_tolerance:   # quantized via float: one step
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max(initial=0) <= spec.lsb_tolerance, (spec.name, node.attrs)
        assert np.mean(diff > 0) <= 0.01 if diff.size else True, (spec.name, node.attrs)
        return
    if got.dtype.kind != "f":
        assert np.array_equal(got, want), (spec.name, node.attrs)
        return
    if got.size == 0:
        return
    scale = max(float(np.max(np.abs(want))), 1e-6)
    if spec.error_bound is not None:        # an approximate kernel: its own bound
        err = np.abs(got.astype(np.float64) - want)
        bound = spec.error_bound(node, inputs) + 1e-5 * scale
        assert np.all((err <= bound) | (np.isnan(got) & np.isnan(want))), \
            (spec.name, node.attrs, float(np.max(err - bound)))
        return
    if node.attrs.get("activation"):   # rounding scales with the sums before a clamp
        plain = dict(node.attrs, activation="", activation_params=[])
        scale = max(scale, float(np.max(np.abs(REFERENCE[spec.op](plain, inputs)[0]))))
    same = (got == want) | (np.isnan(got) & np.isnan(want))   # equal infinities: no error
    with np.errstate(invalid="ignore"):                       # inf - inf where same
        err = float(np.max(np.where(same, 0.0, np.abs(got.astype(np.float64) - want)))) / scale
    # kernels that compute a quantized op through float (lsb_tolerance) round the
    # int32 sums differently: the tuner's 1e-4 check applies to their float outputs
    tol = 1e-4 if spec.lsb_tolerance else 1e-5
    assert err <= tol, (spec.name, node.attrs,
                        [None if x is None else np.shape(x) for x in inputs], err)


def _run_as_cstep(run, inputs, outputs) -> bool:
    """run's C step (run.cstep, for the compiled run loop) on these arrays, each in a cell
    of its own, as the loop runs it; -> False where the kernel offers none for them."""
    from edgenn.runtime._loop import StepLoop
    arrays = [a for a in list(inputs) + list(outputs) if a is not None]
    loop = StepLoop([lambda: None], len(arrays))
    cells = iter(range(len(arrays)))

    def address(a):
        if a is None:
            return None
        c = next(cells)
        loop.set_cell(c, a)
        return loop.cell_address(c)
    in_cells = [address(a) for a in inputs]
    capsule = run.cstep(list(inputs), list(outputs), in_cells, [address(a) for a in outputs])
    if capsule is None:
        return False
    loop.set_cstep(0, capsule)
    loop.run()
    assert loop.compiled == 1
    return True


C_STEP_SPECS = [s for specs in KERNELS.values() for s in specs
                if s.op in ("Add", "Sub", "Mul", "Div", "Relu", "Neg", "Clip", "Sigmoid", "Conv",
                            "Gelu", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum")]


@pytest.mark.parametrize("spec", C_STEP_SPECS, ids=lambda s: s.name)
def test_c_step_gives_the_kernels_own_bits(spec):
    """A kernel's C step (run.cstep: the compiled run loop calls it instead of run) writes
    the same bits as its Python run, over the kernel's cases (broadcasts, tails, one
    element, constants in cells)."""
    from edgenn.kernels import isa
    from edgenn.kernels.plan_context import PlanContext, planning
    if spec.isa and not isa.usable(spec.isa):
        pytest.skip(f"{spec.isa} is not on this CPU (or EDGENN_MAX_ISA)")
    with planning(PlanContext(threads=2 if spec.name.endswith("_mt") else 1)):
        _check_c_step(spec)


def _check_c_step(spec):
    compiled = 0
    for node, inputs, ins, outs in _applicable_cases(spec):
        run = spec.prepare(node, ins, outs)
        if getattr(run, "cstep", None) is None:
            continue
        inputs = [None if v is None else np.require(v, requirements="C") for v in inputs]
        wants = [np.full(o.shape, np.nan, o.dtype) for o in outs]
        gots = [np.full(o.shape, np.nan, o.dtype) for o in outs]
        run(inputs, wants)
        if not _run_as_cstep(run, inputs, gots):
            continue
        compiled += 1
        for got, want in zip(gots, wants):
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            assert same.all(), (spec.name, node.attrs, [np.shape(x) for x in inputs])
    if spec.name in ("add_ufunc", "sub_ufunc", "mul_ufunc", "div_ufunc", "relu_ufunc",
                     "sigmoid_c", "softmax_c", "mean_rows_c", "sum_rows_c") or spec.name.startswith(("conv_sgemm_",
                                                                        "conv_rows_")):
        assert compiled >= 4, (spec.name, compiled)
