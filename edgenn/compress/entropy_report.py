"""What entropy coding does to a graph's weights, as a coded .enn stores them (the compact
layout, graph/compact.py): each integer blob of PACK_BYTES or more coded alone, the smaller
ones together inside the graph frame. Per tensor coded alone, and for the small ones as a
group (their marginal cost in the frame: the frame with them minus the frame without
them), the coded bits per weight against the empirical order-0 entropy of the symbols
(int8 codes, or int4 nibbles), and what decoding costs at load."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..graph import compact, entropy
from ..graph import format as enn


@dataclass
class TensorCoding:
    name: str
    symbols: int           # weights (int8 codes or int4 nibbles)
    raw_bytes: int
    coded_bytes: int
    entropy_bits: float    # empirical order-0 entropy of the symbols, whole tensor

    @property
    def vs_entropy(self) -> float:
        """Coded size / entropy (1.0 = at the entropy; > 1: the coder's overhead)."""
        return 8 * self.coded_bytes / self.entropy_bits if self.entropy_bits else float("inf")


@dataclass
class EntropyReport:
    tensors: list[TensorCoding] = field(default_factory=list)   # each coded alone
    group: TensorCoding | None = None   # the small integer tensors, inside the graph frame
    decode_s: float = 0.0  # decoding every coded blob and the graph frame once

    def _all(self):
        return self.tensors + ([self.group] if self.group else [])

    symbols = property(lambda self: sum(t.symbols for t in self._all()))
    raw_bytes = property(lambda self: sum(t.raw_bytes for t in self._all()))
    coded_bytes = property(lambda self: sum(t.coded_bytes for t in self._all()))
    coded_bits = property(lambda self: 8 * self.coded_bytes)
    entropy_bits = property(lambda self: sum(t.entropy_bits for t in self._all()))

    def table(self, top: int = 10) -> str:
        rows = [f"entropy coding ({entropy.CODER}): {len(self.tensors)} tensors coded alone"
                f"{f' + {self.group.name}' if self.group else ''}, "
                f"{self.raw_bytes / 1e6:.3f} -> {self.coded_bytes / 1e6:.3f} MB, "
                f"{self.coded_bits / max(self.symbols, 1):.3f} bits/weight vs entropy "
                f"{self.entropy_bits / max(self.symbols, 1):.3f} "
                f"({self.coded_bits / max(self.entropy_bits, 1e-9):.4f}x); decode "
                f"{self.decode_s * 1e3:.1f} ms at load "
                f"({self.raw_bytes / max(self.decode_s, 1e-9) / 1e6:.0f} MB/s)"]
        shown = sorted(self.tensors, key=lambda t: -t.raw_bytes)[:top]
        for t in shown + ([self.group] if self.group and top else []):
            n = max(t.symbols, 1)
            rows.append(f"  {t.name[:48]:48} {t.symbols:>10,} w  "
                        f"{8 * t.coded_bytes / n:6.3f} b/w  "
                        f"H {t.entropy_bits / n:6.3f}  {t.vs_entropy:6.4f}x")
        return "\n".join(rows)


def _symbol_bits(entry: dict, role: str) -> int:
    int4 = entry.get("codec") == "qblock" and int(entry["params"]["bits"]) == 4
    return 4 if int4 and role == "q" else 8


def entropy_report(graph) -> EntropyReport:
    """Code the graph's weights as saving it with entropy coding would (a graph loaded
    from a coded file gives back its frames, no new coding); time the decode."""
    meta = dict(graph.meta)
    graph.meta["entropy_coding"] = entropy.CODER
    try:
        stored = list(enn.stored_entries(graph, min_coded=compact.PACK_BYTES))
    finally:
        graph.meta.clear()
        graph.meta.update(meta)
    rep = EntropyReport()
    small, other, group = [], [], [0, 0, 0.0]         # symbols, raw bytes, entropy bits
    for name, entry, arrays in stored:
        for role, key in entry["blobs"].items():
            a = arrays[key]
            spec = entry.get("entropy", {}).get(role)
            if spec is None:
                if a.nbytes >= compact.PACK_BYTES:
                    continue                        # stored raw (incompressible or float)
                raw = np.ascontiguousarray(a).tobytes()
                if a.dtype.name not in entropy.CODED_DTYPES:
                    other.append(raw)
                    continue
                small.append((compact.entropy_per_byte(a), raw))
                bits = _symbol_bits(entry, role)
                group[0] += a.nbytes * 8 // bits
                group[1] += a.nbytes
                group[2] += entropy.entropy_bits(a, bits)
                continue
            t0 = time.perf_counter()
            decoded = entropy.decode(a, spec, entropy.Budget(a.nbytes))
            rep.decode_s += time.perf_counter() - t0
            n = math.prod(int(d) for d in spec["shape"])
            bits = _symbol_bits(entry, role)
            rep.tensors.append(TensorCoding(name, n * 8 // bits, n, a.nbytes,
                                            entropy.entropy_bits(decoded, bits)))
    if small:   # as compact.pack lays them out: after a flushed block, by entropy per byte
        rest = b"".join(other)
        with_small = entropy.compress_blocks(
            [rest, b"".join(raw for _, raw in sorted(small, key=lambda t: t[0]))])
        t0 = time.perf_counter()
        entropy.decompress(with_small, len(rest) + group[1])
        rep.decode_s += time.perf_counter() - t0
        marginal = len(with_small) - len(entropy.compress(rest))
        rep.group = TensorCoding(f"{len(small)} small tensors (< {compact.PACK_BYTES >> 10} "
                                 f"KB, in the graph frame)", group[0], group[1],
                                 max(marginal, 0), group[2])
    return rep
