/* Elementwise float32 steps for the compiled run loop (_cstep.h): a binary op over
 * operands broadcast to the output's shape, collapsed to three dims (outer, middle,
 * inner) with per-operand element strides (0: broadcast along that dim), and the unary
 * ops of small activations. IEEE add / sub / mul / div round the same in any order or
 * width, so these give NumPy's ufuncs' bits (signed zeros aside: relu(-0) may be -0). */
#ifndef EDGENN_ELTWISE_H
#define EDGENN_ELTWISE_H

#include "_cstep.h"
#include "_epilogue.h"

/* x86 with GCC: each step compiled for AVX-512 and AVX2 too, the widest this CPU runs
 * picked at load (the loops are the same; the width is the compiler's) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(EDGENN_SIMDE)
#define ELT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ELT_CLONES
#endif

enum { ELT_ADD, ELT_SUB, ELT_MUL, ELT_DIV };
#define ELT_NEG (-1)   /* elt_unary's op: -x, or an activation code (EDGENN_ACT_*) */

typedef struct {
    void **a, **b, **y;            /* cells (_cstep.h) */
    long n[3];                     /* output dims: outer, middle, inner */
    long sa[3], sb[3];             /* element strides of a and b per dim, 0 = broadcast */
    int op;
} elt_binary;

typedef struct {
    void **x, **y;
    long n;
    float lo, hi;                  /* EDGENN_ACT_CLIP's bounds */
    int op;
} elt_unary;

/* inner loop: one op, each operand contiguous (1) or a scalar (0) along it */
#define ELT_INNER(OPX)                                                           \
    if (sa2 == 1 && sb2 == 1) { for (long k = 0; k < n2; k++) { float u = pa[k], v = pb[k]; py[k] = OPX; } } \
    else if (sa2 == 1) { const float v = pb[0]; for (long k = 0; k < n2; k++) { float u = pa[k]; py[k] = OPX; } } \
    else if (sb2 == 1) { const float u = pa[0]; for (long k = 0; k < n2; k++) { float v = pb[k]; py[k] = OPX; } } \
    else { for (long k = 0; k < n2; k++) { float u = pa[k * sa2], v = pb[k * sb2]; py[k] = OPX; } }

#define ELT_LOOPS(OPX)                                                           \
    for (long i = 0; i < p->n[0]; i++)                                           \
        for (long j = 0; j < p->n[1]; j++) {                                     \
            const float *pa = a + i * p->sa[0] + j * p->sa[1];                   \
            const float *pb = b + i * p->sb[0] + j * p->sb[1];                   \
            float *py = y + (i * p->n[1] + j) * n2;                              \
            ELT_INNER(OPX)                                                       \
        }

ELT_CLONES static int elt_binary_step(const void *params)
{
    const elt_binary *p = (const elt_binary *)params;
    const float *a = (const float *)*p->a, *b = (const float *)*p->b;
    float *y = (float *)*p->y;
    const long n2 = p->n[2], sa2 = p->sa[2], sb2 = p->sb[2];
    switch (p->op) {
    case ELT_ADD: ELT_LOOPS(u + v) break;
    case ELT_SUB: ELT_LOOPS(u - v) break;
    case ELT_MUL: ELT_LOOPS(u * v) break;
    case ELT_DIV: ELT_LOOPS(u / v) break;
    default: return 1;
    }
    return 0;
}

ELT_CLONES static int elt_unary_step(const void *params)
{
    const elt_unary *p = (const elt_unary *)params;
    const float *x = (const float *)*p->x;
    float *y = (float *)*p->y;
    const long n = p->n;
    const float lo = p->lo, hi = p->hi;
    switch (p->op) {
    case EDGENN_ACT_RELU:   /* NumPy's maximum(x, 0): NaN stays NaN */
        for (long k = 0; k < n; k++) { float v = x[k]; y[k] = v < 0.0f ? 0.0f : v; }
        break;
    case ELT_NEG:
        for (long k = 0; k < n; k++) y[k] = -x[k];
        break;
    case EDGENN_ACT_CLIP:   /* minimum(maximum(x, lo), hi); NaN stays NaN */
        for (long k = 0; k < n; k++) {
            float v = x[k];
            v = v < lo ? lo : v;
            y[k] = v > hi ? hi : v;
        }
        break;
    default: return 1;
    }
    return 0;
}

typedef struct {
    void **x, **y;
    long rows, n;                  /* y[r] = scale * sum(x[r, 0:n]) */
    float scale;
} elt_rows;

/* Row sums in eight lanes (one 256-bit vector, or two 128-bit ones: each lane adds its
 * own terms in order, so every build gives the same bits), the lanes added pairwise,
 * then the tail: |error| <= (n / 8 + 4) eps sum |x|. */
ELT_CLONES static void elt_sum_rows(const float *x, float *y, long rows, long n, float scale)
{
    for (long r = 0; r < rows; r++, x += n) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        long k = 0;
        for (; k + 8 <= n; k += 8)
            for (int j = 0; j < 8; j++)
                acc[j] += x[k + j];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        for (; k < n; k++)
            s += x[k];
        y[r] = s * scale;
    }
}

static int elt_sum_rows_step(const void *params)
{
    const elt_rows *p = (const elt_rows *)params;
    elt_sum_rows((const float *)*p->x, (float *)*p->y, p->rows, p->n, p->scale);
    return 0;
}

#undef ELT_LOOPS
#undef ELT_INNER
#endif
