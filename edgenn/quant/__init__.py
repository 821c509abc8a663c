"""int8 post-training quantization: calibration, QDQ graph rewriting, accuracy reports.

    import edgenn
    int8 = edgenn.quantize("model.onnx", calibration_data, method="kl", fidelity=0.99)
    edgenn.save(int8, "model.int8.enn")
    print(edgenn.quant.format_report(edgenn.quant.report("model.onnx", int8, held_out)))

Files: calibration.py (observers, ranges, ADMM), data.py (calibration data forms),
observe.py (reading intermediate tensors), rewrite.py (which layers/tensors, QDQ
writing), quantize.py (the pipeline), mixed.py (sensitivity, fidelity target),
metrics.py (cosine, SQNR, top-1), accuracy.py (fp32 vs int8 report).
"""
from .data import ImageSpec

__all__ = ["quantize", "report", "format_report", "ImageSpec"]


def __getattr__(name):
    if name == "quantize":
        from .quantize import quantize
        return quantize
    if name in ("report", "format_report"):
        from . import accuracy
        return getattr(accuracy, name)
    raise AttributeError(name)
