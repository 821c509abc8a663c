# A kernel extension's side of the C step protocol (_cstep.h): new_cstep wraps a step
# function and its malloc'd params in a capsule the runtime's loop runs.
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_GetPointer
from libc.stdlib cimport malloc, free
from libc.stdint cimport uintptr_t

cdef extern from "_cstep.h":
    ctypedef int (*edgenn_step_fn)(const void *params) noexcept
    ctypedef struct edgenn_cstep:
        edgenn_step_fn fn
        void *params


cdef void _free_cstep(object capsule) noexcept:
    cdef edgenn_cstep *s = <edgenn_cstep *>PyCapsule_GetPointer(capsule, "edgenn.cstep")
    if s != NULL:
        free(s.params)
        free(s)


cdef object new_cstep(edgenn_step_fn fn, void *params):
    """A capsule owning `params` (malloc'd; freed with the capsule, or here on failure)."""
    cdef edgenn_cstep *s = <edgenn_cstep *>malloc(sizeof(edgenn_cstep))
    if s == NULL:
        free(params)
        raise MemoryError()
    s.fn = fn
    s.params = params
    return PyCapsule_New(s, "edgenn.cstep", _free_cstep)


# A step writing at least this many values lets the GIL go while it runs (its own
# nogil wrapper), so other Python threads (other callers of a shared session) run beside
# it; a smaller one keeps it: letting it go and taking it back would be a large share.
cdef long CSTEP_NOGIL_VALUES = 1 << 15


cdef inline void **cell(object address):
    """A cell's address as the runtime passes it (a Python int)."""
    return <void **><uintptr_t>address
