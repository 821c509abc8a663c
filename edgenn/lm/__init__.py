"""Decoder language models: a graph's key / value cache bound in place (cache.py), token
sampling (sampling.py) and the generation loop (generator.py)."""
from .generator import Generator, generate  # noqa: F401
from .sampling import Sampling  # noqa: F401
