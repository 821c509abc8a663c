# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""Python face of _gqa.h: GroupQueryAttention over a BNSH key / value cache, float32.

    g = GQA(N, KVN, H, packed, scale, softcap, window, interleaved, smooth, in_place,
            row="gqa_k16__avx512f")          # a row of the table (_gqa.h's gq_rows)
    g.run(query, key, value, past_k, past_v, seqlens_k, total_len, cos, sin, pos_ids,
          out, cache_k, cache_v, threads=1)

Arrays: float32 C-contiguous (query (B, S, N H) or packed (B, S, (N + 2 KVN) H) with key /
value None; key / value (B, S, KVN H); past (B, KVN, P, H) or None; seqlens_k int32 (B,);
cos / sin (M, r/2) or None; pos_ids int64 (B, S) or None; out (B, S, N H); cache_k /
cache_v (B, KVN, L, H): the past arrays when in_place, else the present outputs). Bad
seqlens_k or rotary positions raise ValueError before anything is written.
"""
from collections import namedtuple

import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t

from edgenn.kernels.native.tables import Table

include "_cpu.pxi"

cnp.import_array()

cdef extern from "_gqa.h" nogil:
    int GQ_OK, GQ_ERR_SEQLEN, GQ_ERR_PAST, GQ_ERR_ROTARY, GQ_ERR_MEM
    ctypedef struct gq_args:
        long B, S, N, KVN, H
        const float *q
        long q_bs, q_ss
        const float *k
        const float *v
        long kv_bs, kv_ss
        const float *past_k
        const float *past_v
        long P
        float *cache_k
        float *cache_v
        long L
        int in_place
        const int32_t *seqlens
        long total_len
        const float *cos
        const float *sin
        long rot_rows, half
        const int64_t *pos_ids
        int interleaved
        float scale, softcap
        long window
        int smooth
        float *out
        long err_b, err_val
    ctypedef struct gq_row:
        const char *name
        int isa
        long lanes
    const gq_row gq_rows[]
    int GQ_ROW_COUNT
    int gq_run(gq_args *a, const gq_row *row, int threads)

# A row of the table (_gqa.h's gq_rows): name, isa (the tier it needs), lanes (the keys a
# score block reduces at once), usable (this CPU runs it; every row when emulated)
Row = namedtuple("Row", "name isa lanes usable")
TABLE = Table("attention", tuple(
    Row(gq_rows[i].name.decode(), edgenn_isa_name(gq_rows[i].isa).decode(), gq_rows[i].lanes,
        bool(edgenn_row_usable(gq_rows[i].isa))) for i in range(GQ_ROW_COUNT)))
ROWS = TABLE.rows
rows, row_index, best_row, row_of_isa = TABLE.usable, TABLE.index, TABLE.best, TABLE.best_of_isa


cdef inline float *_f32(cnp.ndarray a, str what) except NULL:
    if cnp.PyArray_TYPE(a) != cnp.NPY_FLOAT32 or not cnp.PyArray_IS_C_CONTIGUOUS(a):
        raise TypeError(f"{what} must be a C-contiguous float32 array")
    return <float *>cnp.PyArray_DATA(a)


cdef inline void _shape(cnp.ndarray a, tuple want, str what) except *:
    cdef int i, n = len(want)
    if cnp.PyArray_NDIM(a) != n:
        raise ValueError(f"{what} {np.shape(a)} != {want}")
    for i in range(n):
        if cnp.PyArray_DIM(a, i) != <long>want[i]:
            raise ValueError(f"{what} {np.shape(a)} != {want}")


cdef class GQA:
    """One node's static configuration (heads, head size, attributes) on one table row."""
    cdef readonly long N, KVN, H
    cdef readonly bint packed, in_place
    cdef readonly str row
    cdef gq_args a
    cdef const gq_row *r

    def __init__(self, long N, long KVN, long H, bint packed=False, float scale=0,
                 float softcap=0, long window=-1, bint interleaved=False, bint smooth=False,
                 bint in_place=False, str row=None):
        if N < 1 or KVN < 1 or N % KVN or H < 1:
            raise ValueError(f"heads {N} / kv heads {KVN} / head size {H}")
        row = row or best_row()
        self.r = &gq_rows[row_index(row)]
        self.N, self.KVN, self.H, self.packed, self.in_place, self.row = \
            N, KVN, H, packed, in_place, row
        self.a.N, self.a.KVN, self.a.H = N, KVN, H
        self.a.scale = scale if scale != 0 else 1.0 / np.sqrt(H)
        self.a.softcap = softcap
        self.a.window = window
        self.a.interleaved = interleaved
        self.a.smooth = smooth
        self.a.in_place = in_place

    def run(self, cnp.ndarray query, key, value, past_k, past_v, cnp.ndarray seqlens_k,
            long total_len, cos, sin, pos_ids, cnp.ndarray out, cnp.ndarray cache_k,
            cnp.ndarray cache_v, int threads=1):
        cdef gq_args a = self.a
        cdef long N = self.N, KVN = self.KVN, H = self.H, B, S, L, P = 0
        cdef cnp.ndarray t
        cdef int rc
        if query.ndim != 3:
            raise ValueError(f"query {np.shape(query)} must be (B, S, hidden)")
        B, S = query.shape[0], query.shape[1]
        a.B, a.S = B, S
        a.q = _f32(query, "query")
        if self.packed:
            _shape(query, (B, S, (N + 2 * KVN) * H), "packed query")
            a.q_ss = (N + 2 * KVN) * H
            a.kv_ss = a.q_ss
            a.k = a.q + N * H
            a.v = a.q + (N + KVN) * H
        else:
            _shape(query, (B, S, N * H), "query")
            t = key
            _shape(t, (B, S, KVN * H), "key")
            a.k = _f32(t, "key")
            t = value
            _shape(t, (B, S, KVN * H), "value")
            a.v = _f32(t, "value")
            a.q_ss, a.kv_ss = N * H, KVN * H
        a.q_bs, a.kv_bs = S * a.q_ss, S * a.kv_ss
        a.past_k = a.past_v = NULL
        if past_k is not None:
            t = past_k
            P = t.shape[2]
            _shape(t, (B, KVN, P, H), "past_key")
            a.past_k = _f32(t, "past_key")
            t = past_v
            _shape(t, (B, KVN, P, H), "past_value")
            a.past_v = _f32(t, "past_value")
        elif self.in_place:
            raise ValueError("kv_in_place needs past_key / past_value")
        a.P = P
        L = cache_k.shape[2] if cache_k.ndim == 4 else -1
        _shape(cache_k, (B, KVN, L, H), "cache_k")
        _shape(cache_v, (B, KVN, L, H), "cache_v")
        if self.in_place and (cache_k is not past_k or cache_v is not past_v):
            raise ValueError("in place, the caches are the past arrays")
        a.L = L
        a.cache_k = _f32(cache_k, "cache_k")
        a.cache_v = _f32(cache_v, "cache_v")
        _shape(out, (B, S, N * H), "output")
        a.out = _f32(out, "output")
        if cnp.PyArray_TYPE(seqlens_k) != cnp.NPY_INT32 or seqlens_k.size != B or \
                not cnp.PyArray_IS_C_CONTIGUOUS(seqlens_k):
            raise TypeError(f"seqlens_k must be int32 ({B},)")
        a.seqlens = <const int32_t *>cnp.PyArray_DATA(seqlens_k)
        a.total_len = total_len
        a.cos = a.sin = NULL
        a.pos_ids = NULL
        a.rot_rows = a.half = 0
        if cos is not None:
            t = cos
            if t.ndim != 2 or np.shape(sin) != np.shape(t) or 2 * t.shape[1] > H or \
                    t.shape[1] < 1:
                raise ValueError(f"cos / sin caches {np.shape(t)} / {np.shape(sin)} for head "
                                 f"size {H}")
            a.cos = _f32(t, "cos_cache")
            a.rot_rows, a.half = t.shape[0], t.shape[1]
            t = sin
            a.sin = _f32(t, "sin_cache")
            if pos_ids is not None:
                t = pos_ids
                if cnp.PyArray_TYPE(t) != cnp.NPY_INT64 or t.size != B * S or \
                        not cnp.PyArray_IS_C_CONTIGUOUS(t):
                    raise TypeError(f"position_ids must be int64 ({B}, {S})")
                a.pos_ids = <const int64_t *>cnp.PyArray_DATA(t)
        with nogil:
            rc = gq_run(&a, self.r, threads)
        if rc == GQ_OK:
            return
        b, val = a.err_b, a.err_val
        if rc == GQ_ERR_SEQLEN:
            raise ValueError(f"seqlens_k[{b}] = {val - 1}: the keys after this step ({val}) "
                             f"must be 1 .. {P if self.in_place else L}, the length of the "
                             f"{'past buffer updated in place' if self.in_place else 'present cache'}")
        if rc == GQ_ERR_PAST:
            raise ValueError(f"seqlens_k[{b}] = {seqlens_k[b]} with {S} new tokens puts {val} "
                             f"keys before them, more than the past buffer's {P}")
        if rc == GQ_ERR_ROTARY:
            raise ValueError(f"GroupQueryAttention rotary position {val} of entry {b} is "
                             f"outside the cos / sin caches' {a.rot_rows} rows")
        raise MemoryError("GroupQueryAttention workspace")
