# cython: boundscheck=False, wraparound=False
"""C steps of the elementwise kernels (tensor/elementwise.py) for the runtime's compiled
run loop: the same arithmetic as their NumPy ufuncs (_eltwise.h), called as one C
function per step (kernels/native/_cstep.h)."""
include "cstep.pxi"

cdef extern from "_eltwise.h":
    int ELT_ADD, ELT_SUB, ELT_MUL, ELT_DIV, ELT_NEG
    int EDGENN_ACT_RELU, EDGENN_ACT_CLIP
    ctypedef struct elt_binary:
        void **a
        void **b
        void **y
        long n[3]
        long sa[3]
        long sb[3]
        int op
    ctypedef struct elt_unary:
        void **x
        void **y
        long n
        float lo
        float hi
        int op
    ctypedef struct elt_rows:
        void **x
        void **y
        long rows, n
        float scale
    void elt_sum_rows(const float *x, float *y, long rows, long n, float scale) nogil
    int elt_sum_rows_step(const void *params) noexcept nogil
    int elt_binary_step(const void *params) noexcept nogil
    int elt_unary_step(const void *params) noexcept nogil


BINARY = {"Add": ELT_ADD, "Sub": ELT_SUB, "Mul": ELT_MUL, "Div": ELT_DIV}
NEG = ELT_NEG       # unary_step's op for -x; its other ops are activation codes


cdef set _UNARY_OPS = {ELT_NEG, EDGENN_ACT_RELU, EDGENN_ACT_CLIP}


def binary_step(str op, dims, a_strides, b_strides, a_cell, b_cell, y_cell):
    """y = a <op> b over the output's 3 collapsed `dims`, the operands' element strides
    per dim (0: broadcast) -> a C step capsule."""
    cdef elt_binary *p = <elt_binary *>malloc(sizeof(elt_binary))
    if p == NULL:
        raise MemoryError()
    p.op = BINARY[op]
    for d in range(3):
        p.n[d], p.sa[d], p.sb[d] = dims[d], a_strides[d], b_strides[d]
    p.a, p.b, p.y = cell(a_cell), cell(b_cell), cell(y_cell)
    return new_nogil_cstep(elt_binary_step, p, dims[0] * dims[1] * dims[2])


def unary_step(int op, long n, x_cell, y_cell, float lo=0, float hi=0):
    """y = op(x) over n values -> a C step capsule. op: NEG, or the activation code
    (native/epilogue.py) of Relu or Clip (between lo and hi)."""
    if op not in _UNARY_OPS:
        raise ValueError(f"unary_step: op {op} has no C form")
    cdef elt_unary *p = <elt_unary *>malloc(sizeof(elt_unary))
    if p == NULL:
        raise MemoryError()
    p.op = op
    p.n, p.lo, p.hi = n, lo, hi
    p.x, p.y = cell(x_cell), cell(y_cell)
    return new_nogil_cstep(elt_unary_step, p, n)


def sum_rows(const float[:, ::1] x, float[::1] y, float scale):
    """y[r] = scale * sum(x[r]) (_eltwise.h: eight lanes, the same bits on every CPU)."""
    assert x.shape[0] == y.shape[0]
    if x.shape[0] == 0:
        return
    with nogil:
        elt_sum_rows(&x[0, 0], &y[0], x.shape[0], x.shape[1], scale)


def sum_rows_step(long rows, long n, float scale, x_cell, y_cell):
    """sum_rows as a C step."""
    cdef elt_rows *p = <elt_rows *>malloc(sizeof(elt_rows))
    if p == NULL:
        raise MemoryError()
    p.x, p.y, p.rows, p.n, p.scale = cell(x_cell), cell(y_cell), rows, n, scale
    return new_nogil_cstep(elt_sum_rows_step, p, rows * n)
