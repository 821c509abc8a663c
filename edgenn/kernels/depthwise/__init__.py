"""Depthwise convolution: channels-in-lanes c8 / c16 (_dwc8.h, also the engine of the pool
family's NCHW loops), NCHW rows (_dwrows.h), and the fused pairs ExpandDepthwise (1x1 then
depthwise) and DepthwiseProject (depthwise then 1x1, _dwproj.h)."""
