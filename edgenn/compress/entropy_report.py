"""What entropy coding does to a graph's weights, tensor by tensor: the coded bits per
weight against the empirical order-0 entropy of the symbols (int8 codes, or int4 nibbles),
and what decoding them costs at load."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..graph import entropy
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
    tensors: list[TensorCoding] = field(default_factory=list)
    decode_s: float = 0.0  # decoding every coded blob once (what a load adds)

    symbols = property(lambda self: sum(t.symbols for t in self.tensors))
    raw_bytes = property(lambda self: sum(t.raw_bytes for t in self.tensors))
    coded_bytes = property(lambda self: sum(t.coded_bytes for t in self.tensors))
    coded_bits = property(lambda self: 8 * self.coded_bytes)
    entropy_bits = property(lambda self: sum(t.entropy_bits for t in self.tensors))

    def table(self, top: int = 10) -> str:
        rows = [f"entropy coding ({entropy.CODER}): {len(self.tensors)} tensors, "
                f"{self.raw_bytes / 1e6:.3f} -> {self.coded_bytes / 1e6:.3f} MB, "
                f"{self.coded_bits / max(self.symbols, 1):.3f} bits/weight vs entropy "
                f"{self.entropy_bits / max(self.symbols, 1):.3f} "
                f"({self.coded_bits / max(self.entropy_bits, 1e-9):.4f}x); decode "
                f"{self.decode_s * 1e3:.1f} ms at load "
                f"({self.raw_bytes / max(self.decode_s, 1e-9) / 1e6:.0f} MB/s)"]
        for t in sorted(self.tensors, key=lambda t: -t.raw_bytes)[:top]:
            rows.append(f"  {t.name[:48]:48} {t.symbols:>10,} w  "
                        f"{8 * t.coded_bytes / t.symbols:6.3f} b/w  "
                        f"H {t.entropy_bits / t.symbols:6.3f}  {t.vs_entropy:6.4f}x")
        return "\n".join(rows)


def entropy_report(graph) -> EntropyReport:
    """Code the graph's weights as saving it with entropy coding would (a graph loaded
    from a coded file gives back its frames, no new coding); time the decode."""
    meta = dict(graph.meta)
    graph.meta["entropy_coding"] = entropy.CODER
    try:
        stored = list(enn.stored_entries(graph))
    finally:
        graph.meta.clear()
        graph.meta.update(meta)
    rep = EntropyReport()
    for name, entry, arrays in stored:
        bits4 = entry.get("codec") == "qblock" and int(entry["params"]["bits"]) == 4
        for role, spec in entry.get("entropy", {}).items():
            frame = arrays[entry["blobs"][role]]
            t0 = time.perf_counter()
            decoded = entropy.decode(frame, spec, entropy.Budget(frame.nbytes))
            rep.decode_s += time.perf_counter() - t0
            n = math.prod(int(d) for d in spec["shape"])
            symbol_bits = 4 if bits4 and role == "q" else 8
            rep.tensors.append(TensorCoding(name, n * 8 // symbol_bits, n, frame.nbytes,
                                            entropy.entropy_bits(decoded, symbol_bits)))
    return rep
