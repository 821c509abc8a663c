"""DESIGN principle 3: every op in the one op list has a shape rule, a reference kernel and
(unless internal) an ONNX converter path; nothing is registered that is not listed."""
from edgenn.oplist import INTERNAL_OPS, all_ops, load_all
from edgenn.registry import CONVERTERS, KERNELS, REFERENCE, SHAPE_RULES

load_all()


def test_every_listed_op_is_complete():
    ops = all_ops()
    assert len(ops) == len(set(ops)), "an op is listed by two families"
    for op in ops:
        assert op in SHAPE_RULES, f"{op}: no shape rule"
        assert op in REFERENCE, f"{op}: no reference kernel"
    for op in INTERNAL_OPS:
        assert op in ops and op not in CONVERTERS


def test_nothing_registered_is_unlisted():
    ops = set(all_ops())
    assert set(SHAPE_RULES) <= ops, set(SHAPE_RULES) - ops
    assert set(REFERENCE) <= ops, set(REFERENCE) - ops
    assert set(KERNELS) <= ops, set(KERNELS) - ops
    # converters exist for listed ops, and for ops that only exist at import time
    import_only = {"Constant", "Upsample", "Scatter"}  # Scatter: opset 9-10 ScatterElements
    import_only |= {"com.microsoft.DynamicQuantizeLSTM"}  # becomes an LSTM (contrib.py)
    from edgenn.converters.onnx import contrib_transformer  # spelled in standard ops
    import_only |= {k for k, v in CONVERTERS.items()
                    if v.__module__ == contrib_transformer.__name__}
    # onnxruntime's ops that edgenn keeps under their own name (com.microsoft.X -> X)
    import_only |= {k for k in CONVERTERS
                    if k.startswith("com.microsoft.") and k.split(".", 2)[2] in ops}
    assert set(CONVERTERS) <= ops | import_only, set(CONVERTERS) - ops - import_only
