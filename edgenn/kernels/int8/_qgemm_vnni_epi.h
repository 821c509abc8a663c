/* The int8 VNNI conv tiles' epilogues on one zmm of 16 outputs, shared by the 6 x 32
 * tiles (_qgemm_vnni_conv.h) and the 7 x 32 ones (_qgemm_vnni_pix.h): qe_span_c's
 * operations in its order (_qepi.h), so that every tier writes the same bytes. q: the
 * int32 sums with the bias in (the accumulators start at it); mult (and fadd) the
 * outputs' per-channel constants, as broadcast or loaded by the caller. Native build only
 * (included by _qgemm_vnni.h where _qepi.h is). */

typedef struct {
    __m512 big, zero, p0, p1, zs, inv;
    __m512i yzp, zzp, lo, hi;
    int act;
} qv_epi_consts;

QV_TARGET static inline qv_epi_consts qv_epi_setup(const qe_epi *e) {
    qv_epi_consts k;
    k.big = _mm512_set1_ps(16777216.f);
    k.zero = _mm512_setzero_ps();
    k.p0 = _mm512_set1_ps(e->p0);
    k.p1 = _mm512_set1_ps(e->p1);
    k.zs = _mm512_set1_ps(e->zscale);
    k.inv = _mm512_set1_ps(e->inv_y);
    k.yzp = _mm512_set1_epi32(e->yzp);
    k.zzp = _mm512_set1_epi32(e->zzp);
    k.lo = _mm512_set1_epi32(qe_u8(e->lo));
    k.hi = _mm512_set1_epi32(qe_u8(e->hi));
    k.act = e->act;
    return k;
}

/* the integer path: min(q x mult, 2^24) rounded to nearest even, + yzp, in [lo, hi] */
__attribute__((always_inline)) QV_TARGET static inline __m512i
qv_epi_int(const qv_epi_consts *k, __m512i q, __m512 mult) {
    const __m512 f = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), mult), k->big);
    q = _mm512_add_epi32(_mm512_cvtps_epi32(f), k->yzp);
    return _mm512_min_epi32(_mm512_max_epi32(q, k->lo), k->hi);
}

/* the float path up to its output: q x mult (+ fadd) (+ (z - zzp) x zscale, z the
 * residual's u8 values widened), Relu / Clip */
__attribute__((always_inline)) QV_TARGET static inline __m512
qv_epi_float(const qv_epi_consts *k, __m512i q, __m512 mult, const __m512 *fadd,
             const __m512i *z) {
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), mult);
    if (fadd) v = _mm512_add_ps(v, *fadd);
    if (z)
        v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(*z, k->zzp)),
                                           k->zs));
    if (k->act == EDGENN_ACT_RELU) v = _mm512_max_ps(v, k->zero);
    else if (k->act == EDGENN_ACT_CLIP) v = _mm512_min_ps(_mm512_max_ps(v, k->p0), k->p1);
    return v;
}

/* the float path's u8 output: min(v x inv_y, 2^24) rounded, + yzp, in [0, 255] */
__attribute__((always_inline)) QV_TARGET static inline __m512i
qv_epi_requant(const qv_epi_consts *k, __m512 v) {
    v = _mm512_min_ps(_mm512_mul_ps(v, k->inv), k->big);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), k->yzp);
    return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_setzero_si512()),
                            _mm512_set1_epi32(255));
}
