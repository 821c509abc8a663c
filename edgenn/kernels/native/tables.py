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
