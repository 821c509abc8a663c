# Workspaces of the C kernels: one plan is shared by every thread calling a session, so
# what a run writes besides its outputs (packed panels, padded images, per-call epilogue
# constants) is passed in per call by the caller's execution context (edgenn.kernels.
# scratch); None = the kernel object's own array, made on first use (tuning, tests).

cdef char *_ws_data(object ws, long nbytes, str what) except NULL:
    """The data of a caller's workspace: a C-contiguous writeable array of >= nbytes."""
    cdef cnp.ndarray a
    if not isinstance(ws, cnp.ndarray):
        raise TypeError(f"{what}: workspace must be a numpy array")
    a = <cnp.ndarray>ws
    if not (cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_C_CONTIGUOUS)
            and cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_WRITEABLE)):
        raise ValueError(f"{what}: workspace must be C-contiguous and writeable")
    if cnp.PyArray_NBYTES(a) < nbytes:
        raise ValueError(f"{what}: workspace of {cnp.PyArray_NBYTES(a)} bytes, "
                         f"{nbytes} needed")
    return <char *>cnp.PyArray_DATA(a)


cdef object _own_ws(long nbytes):
    """A zeroed, 64-byte aligned uint8 array of nbytes (a kernel's own workspace)."""
    raw = np.zeros(max(nbytes, 1) + 64, np.uint8)
    cdef size_t addr = <size_t>cnp.PyArray_DATA(raw)
    cdef long off = <long>((64 - addr % 64) % 64)
    return raw[off:off + max(nbytes, 1)]
