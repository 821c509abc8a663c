# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled run loop: one call of an execution context (runtime/context.py) without
a Python frame per step.

A context's steps are bound once, when the context is made: a step whose kernel offers
a C step (run.cstep, kernels/native/_cstep.h) is called here as fn(params), any other
through its Python callable. The C steps reach their tensors through cells, one per
tensor the context owns or reads (an address each): an input read in place for one call
is one cell pointed at the caller's array, and back at the context's buffer after.

Activity is here too: the count of a session's calls in flight, entered and left on
every call (two C increments under the GIL, no lock).
"""
cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp

cnp.import_array()
from numpy import copyto as _copyto

cdef extern from "_cstep.h":
    ctypedef int (*edgenn_step_fn)(const void *params) noexcept
    ctypedef struct edgenn_cstep:
        edgenn_step_fn fn
        void *params


class StepError(RuntimeError):
    """A C step returned a nonzero code (its kernel's own check failed)."""


cdef class Activity:
    """A session's calls: `active` now, `started` ever (the background tuner reads them
    before and after a round of timing to tell whether a call ran beside it)."""
    cdef public long active
    cdef public long started

    def enter(self):
        self.active += 1
        self.started += 1

    def exit(self):
        self.active -= 1


cdef class Input:
    """How a call binds one graph input: its context buffer, and, when the input may be
    read in place, the Python steps' input slots [(list, index, planned array)] and the
    cell of the C steps that read it (-1: none)."""
    cdef cnp.ndarray buf
    cdef list slots
    cdef Py_ssize_t cell
    cdef bint in_place

    def __init__(self, cnp.ndarray buf, slots, Py_ssize_t cell):
        self.buf = buf
        self.in_place = slots is not None
        self.slots = slots or []
        self.cell = cell


cdef inline bint _bindable(cnp.ndarray x, cnp.ndarray buf):
    """x can stand for buf: the same dtype and shape, C-contiguous and writable."""
    cdef int nd = cnp.PyArray_NDIM(x)
    if nd != cnp.PyArray_NDIM(buf) or cnp.PyArray_TYPE(x) != cnp.PyArray_TYPE(buf) or \
            not cnp.PyArray_ISNOTSWAPPED(x):
        return False
    if memcmp(cnp.PyArray_DIMS(x), cnp.PyArray_DIMS(buf), nd * sizeof(cnp.npy_intp)) != 0:
        return False
    return cnp.PyArray_IS_C_CONTIGUOUS(x) and cnp.PyArray_ISWRITEABLE(x)


cdef class StepLoop:
    """The steps of one context: `calls` (Python callables), some of them also C steps
    (set_cstep), and `ncells` cells; `at`: the step running, or the one that failed."""
    cdef edgenn_cstep *steps
    cdef list calls
    cdef list keep
    cdef Py_ssize_t n
    cdef void **cells
    cdef Py_ssize_t ncells
    cdef list inputs
    cdef public Py_ssize_t at
    cdef public Py_ssize_t compiled     # steps run as C steps

    def __cinit__(self, list calls, Py_ssize_t ncells):
        self.n = len(calls)
        self.steps = <edgenn_cstep *>calloc(max(self.n, 1), sizeof(edgenn_cstep))
        self.cells = <void **>calloc(max(ncells, 1), sizeof(void *))
        if self.steps == NULL or self.cells == NULL:
            raise MemoryError()
        self.ncells = ncells
        self.calls = list(calls)
        self.keep = [None] * self.n
        self.inputs = []

    def set_cstep(self, Py_ssize_t i, capsule):
        """Step i runs as the C step in `capsule` (kept alive by the loop)."""
        if not 0 <= i < self.n:
            raise IndexError(i)
        if not PyCapsule_IsValid(capsule, "edgenn.cstep"):
            raise TypeError(f"step {i}: run.cstep returned {type(capsule).__name__}, "
                            "not an edgenn.cstep capsule")
        if self.steps[i].fn == NULL:
            self.compiled += 1
        self.steps[i] = (<edgenn_cstep *>PyCapsule_GetPointer(capsule, "edgenn.cstep"))[0]
        self.keep[i] = capsule

    def __dealloc__(self):
        free(self.steps)
        free(self.cells)

    def is_compiled(self, Py_ssize_t i) -> bool:
        """Step i runs as a C step."""
        return self.steps[i].fn != NULL

    def cell_address(self, Py_ssize_t i) -> int:
        """The address of cell i (what a kernel's run.cstep receives)."""
        if not 0 <= i < self.ncells:
            raise IndexError(i)
        return <uintptr_t>&self.cells[i]

    def set_cell(self, Py_ssize_t i, cnp.ndarray a):
        """Cell i holds a's data; a must outlive the loop (the context keeps it)."""
        if not 0 <= i < self.ncells:
            raise IndexError(i)
        self.cells[i] = cnp.PyArray_DATA(a)

    def set_inputs(self, list inputs):
        """The graph inputs' binding (Input per input, in the plan's order)."""
        self.inputs = inputs

    cpdef run(self):
        """Every step in order, on what the cells and slots hold now."""
        cdef Py_ssize_t i
        cdef int rc
        for i in range(self.n):
            self.at = i
            if self.steps[i].fn != NULL:
                rc = self.steps[i].fn(self.steps[i].params)
                if rc != 0:
                    raise StepError(f"C step failed (code {rc})")
            else:
                self.calls[i]()

    cpdef list bind(self, list feeds):
        """Each feed read in place where its Input allows and the array can stand for the
        buffer (_bindable), else copied into the buffer. -> the Inputs bound in place
        (for unbind)."""
        cdef list bound = []
        cdef Input inp
        cdef cnp.ndarray x
        cdef Py_ssize_t i
        for i in range(len(self.inputs)):
            inp = <Input>self.inputs[i]
            feed = feeds[i]
            if not (inp.in_place and isinstance(feed, cnp.ndarray)
                    and _bindable(feed, inp.buf)):
                _copyto(inp.buf, feed)        # any array-like (a body's NumPy scalar)
                continue
            x = <cnp.ndarray>feed
            shape = feed.shape
            for ins, j, own in inp.slots:
                ins[j] = x if own.shape == shape else x.reshape(own.shape)
            if inp.cell >= 0:
                self.cells[inp.cell] = cnp.PyArray_DATA(x)
            bound.append(inp)
        return bound

    cpdef unbind(self, list bound):
        """Back to the context's own buffers: no reference to a caller's array is kept."""
        cdef Input inp
        for inp in bound:
            for ins, j, own in inp.slots:
                ins[j] = own
            if inp.cell >= 0:
                self.cells[inp.cell] = cnp.PyArray_DATA(inp.buf)

    cpdef list call(self, list feeds, list outputs):
        """One call: bind, every step, unbind; -> copies of `outputs` (arrays)."""
        cdef list bound = self.bind(feeds)
        try:
            self.run()
        finally:
            if bound:
                self.unbind(bound)
        return [cnp.PyArray_NewCopy(<cnp.ndarray>o, cnp.NPY_CORDER) for o in outputs]
