"""FusedAttention is internal to edgenn (made by the fusion passes): no ONNX converter."""
