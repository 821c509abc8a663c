"""Pooling: MaxPool / AveragePool (the loops compile into the depthwise extension, _dwc8.pyx),
global pooling."""
