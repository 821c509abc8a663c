"""A kernel family's table as its C extension exports it (sgemm_table.h, _winograd.h's
wino_rows, ...): rows in the C order, each with at least name (<family>_<tile>__<isa>),
isa (the tier it needs, edgenn.kernels.isa's names) and usable (this CPU runs it: the one
probe, EDGENN_MAX_ISA applied; every row in a SIMDe-emulated build). A C struct that
holds a row keeps its index. Tests parametrize over `usable()` rather than naming a tier."""
from __future__ import annotations


class Table:
    def __init__(self, family: str, rows: tuple):
        self.family, self.rows = family, tuple(rows)
        self._index = {r.name: i for i, r in enumerate(self.rows)}

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def usable(self) -> tuple:
        """The rows this CPU runs, in the table's order (the portable one first)."""
        return tuple(r for r in self.rows if r.usable)

    def index(self, name: str) -> int:
        """The index of row `name`; ValueError for a name not in the table or a row this
        CPU (or EDGENN_MAX_ISA) does not run."""
        if name not in self._index:
            raise ValueError(f"no {self.family} row {name!r}; the table has "
                             f"{', '.join(self._index)}")
        row = self.rows[self._index[name]]
        if not row.usable:
            raise ValueError(f"{self.family} row {name!r} needs {row.isa}: this CPU (or "
                             "EDGENN_MAX_ISA) does not allow it")
        return self._index[name]

    def best(self) -> str:
        """The name of the best row this CPU runs (the table's last usable one)."""
        return self.usable()[-1].name

    def best_of_isa(self, isa: str) -> str:
        """The name of the table's best row of tier `isa` (a family that picks its own tier
        runs on it); ValueError where there is none."""
        names = [r.name for r in self.rows if r.isa == isa]
        if not names:
            raise ValueError(f"no {self.family} row of tier {isa!r}")
        return names[-1]


def register_row_specs(op: str, rows, spec_name, make, supports, mt_supports, family: str,
                       first_priority: int = 0, **extra) -> None:
    """A kernel spec per table row, the later (better) rows first in priority from
    first_priority, the portable row the family's fallback; and each SIMD row's `_mt`
    twin on the plan's threads. spec_name(row) -> its name; make(row_name, threads=None)
    -> prepare; extra: further kernel() keywords (error_bound, ...)."""
    from ...registry import kernel
    from .threading_cost import plan_threads
    for prio, row in enumerate(rows, first_priority):
        isa = "" if row.isa == "scalar" else row.isa
        kernel(op, spec_name(row), supports=supports, isa=isa, priority=prio, family=family,
               fallback=row.isa == "scalar", **extra)(make(row.name))
        if row.isa != "scalar":
            kernel(op, spec_name(row) + "_mt", supports=mt_supports, isa=isa, priority=prio,
                   family=family, **extra)(make(row.name, threads=plan_threads))
