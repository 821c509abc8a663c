"""Test parameters from a kernel family's table (edgenn/kernels/native/tables.py): the rows
this CPU runs natively (the portable one always) and every SIMD row again through the
family's SIMDe-emulated twin (any CPU runs it), so a row added to the table is tested with
no edit here and an AVX2-only machine still checks the AVX-512 rows."""
EMULATED = "-emulated"


def paths(native_rows, emulated_rows) -> list:
    """Row names: the native rows (a table's usable()) as they are, the emulated build's
    SIMD ones + "-emulated"."""
    return [r.name for r in native_rows] + \
        [r.name + EMULATED for r in emulated_rows if r.isa != "scalar"]


def lib_and_row(path: str, native, emulated):
    """-> (the module that builds this path's row, the row's name)."""
    if path.endswith(EMULATED):
        return emulated, path[:-len(EMULATED)]
    return native, path


def row(path: str, native, emulated):
    """The table's row (its namedtuple: name, isa, tile, ...) a path runs."""
    lib, name = lib_and_row(path, native, emulated)
    return lib.ROWS[lib.row_index(name)]
