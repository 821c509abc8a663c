"""onnxruntime's `capi` names, so code written for onnxruntime finds them here too."""
