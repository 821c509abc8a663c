# A kernel extension's side of the C step protocol (_cstep.h): new_cstep wraps a step
# function and its malloc'd params in a capsule the runtime's loop runs; new_nogil_cstep
# does so for a function that needs no GIL, letting it go around long steps.
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_GetPointer
from libc.stdlib cimport malloc, free
from libc.stdint cimport uintptr_t

cdef extern from "_cstep.h":
    ctypedef int (*edgenn_step_fn)(const void *params) noexcept
    ctypedef struct edgenn_cstep:
        edgenn_step_fn fn
        void *params

ctypedef int (*nogil_step_fn)(const void *params) noexcept nogil

# A step writing at least this many values lets the GIL go while it runs, so other Python
# threads (other callers of a shared session) run beside it; a smaller one keeps it:
# letting it go and taking it back would be a large share of the step.
cdef long CSTEP_NOGIL_VALUES = 1 << 15


ctypedef struct _released:
    nogil_step_fn fn
    void *params


cdef int _run_released(const void *params) noexcept:
    cdef const _released *r = <const _released *>params
    cdef int rc
    with nogil:
        rc = r.fn(r.params)
    return rc


cdef void _free_cstep(object capsule) noexcept:
    cdef edgenn_cstep *s = <edgenn_cstep *>PyCapsule_GetPointer(capsule, "edgenn.cstep")
    if s != NULL:
        if s.fn == _run_released:
            free((<_released *>s.params).params)
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


cdef object new_nogil_cstep(nogil_step_fn fn, void *params, long values):
    """new_cstep of a function that needs no GIL: one writing `values` >=
    CSTEP_NOGIL_VALUES runs with the GIL let go."""
    if values < CSTEP_NOGIL_VALUES:
        return new_cstep(<edgenn_step_fn>fn, params)
    cdef _released *r = <_released *>malloc(sizeof(_released))
    if r == NULL:
        free(params)
        raise MemoryError()
    r.fn = fn
    r.params = params
    return new_cstep(_run_released, r)


cdef inline void **cell(object address):
    """A cell's address as the runtime passes it (a Python int)."""
    return <void **><uintptr_t>address
