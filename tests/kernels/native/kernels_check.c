/* The C kernels on a non-x86 target (built by tests/kernels/native/test_aarch64.py with
 * aarch64-linux-gnu-gcc and run under qemu-aarch64): the CPU probe, the AVX-512 VNNI
 * int8 micro-kernels through SIMDe (the same integers on every architecture), the
 * portable int8 micro-kernel, the packed sgemm driver and the sparse conv / FC kernels,
 * each against a plain reference; and (kernels_check_native.c) the depthwise and direct
 * conv rows the target builds natively.
 * Prints one line per check and closes with "N passed, M failed"; exit status 1 on any
 * failure. No Python: the kernel headers alone. */
#define EDGENN_SIMDE 1
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "_cpu.h"
#include "_qgemm.h"
#include "spmm_table.h"
#include "sgemm_table.h"
#include "kernels_check.h"

static int passed, failed;

void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (ok) passed++; else failed++;
}

static uint32_t rng_state = 12345u;
uint32_t rnd(void) { rng_state = rng_state * 1664525u + 1013904223u; return rng_state >> 8; }

/* out[p][r][j] = sum_g,q A[g][r][q] * B[p][g][j][q]; conv: A s8, B u8; gemm: A u8, B s8.
 * pairs: B in the VNNI conv kernels' pair layout (panels 2h, 2h + 1 interleaved per group,
 * 64 bytes, pair h at 2h * bps), else panel after panel (bps bytes apart, 32 per group). */
static void ref_tile(int conv, int pairs, long ng, const uint8_t *a, const uint8_t *b, long bps,
                     int npan, int32_t *out) {
    for (int p = 0; p < npan; p++)
        for (int r = 0; r < 6; r++)
            for (int j = 0; j < 8; j++) {
                int64_t s = 0;
                for (long g = 0; g < ng; g++)
                    for (int q = 0; q < 4; q++) {
                        int av = conv ? (int8_t)a[g * 24 + r * 4 + q] : a[g * 24 + r * 4 + q];
                        uint8_t braw = pairs ? b[(p / 2) * 2 * bps + g * 64 + (p % 2) * 32 + j * 4 + q]
                                             : b[p * bps + g * 32 + j * 4 + q];
                        int bv = conv ? braw : (int8_t)braw;
                        s += (int64_t)av * bv;
                    }
                out[(p * 6 + r) * 8 + j] = (int32_t)s;
            }
}

static void check_vnni(void) {
    static const long ngs[] = {1, 2, 7, 64, 300};
    char what[128];
    for (int conv = 0; conv < 2; conv++)
        for (size_t t = 0; t < sizeof ngs / sizeof ngs[0]; t++)
            for (int fill = 0; fill < 3; fill++) {   /* random, u8 255 x s8 -128, 255 x 127 */
                long ng = ngs[t], bps = ng * 32;
                uint8_t *a = malloc(ng * 24), *b = malloc(4 * bps);
                uint8_t s8 = fill == 1 ? 0x80 : 0x7f;
                for (long i = 0; i < ng * 24; i++) a[i] = fill ? (conv ? s8 : 255) : (uint8_t)rnd();
                for (long i = 0; i < 4 * bps; i++) b[i] = fill ? (conv ? 255 : s8) : (uint8_t)rnd();
                int32_t got[4 * 48], want[4 * 48];
                int ok = 1;
                for (int npan = 1; npan <= 4; npan++) {
                    ref_tile(conv, conv, ng, a, b, bps, npan, want);
                    /* conv: every tile shape the driver picks (rows 6 / 4 / 2 x 32 / 16) */
                    for (int rows = 6; rows >= (conv ? 2 : 6); rows -= 2) {
                        (conv ? qvc_acc[qvc_index(rows, npan)] : qv_ukr_gemm_6x32)(ng, a, b, bps,
                                                                                 npan, got);
                        for (int i = 0; i < npan * 48; i++) ok &= i % 48 / 8 >= rows || got[i] == want[i];
                    }
                }
                snprintf(what, sizeof what, "vnni %s 6x32 (SIMDe) ng=%ld fill=%d: exact",
                         conv ? "conv" : "gemm", ng, fill);
                check(ok, what);
                /* the portable u8 kernel (one 6 x 8 panel) on the same data */
                int32_t acc[48];
                qg_ukr_u8_c(ng, a, b, acc, conv ? QG_CONV : QG_GEMM);
                ref_tile(conv, 0, ng, a, b, bps, 1, want);
                ok = 1;
                for (int i = 0; i < 48; i++) ok &= acc[i] == want[i];
                snprintf(what, sizeof what, "int8 portable 6x8 %s ng=%ld fill=%d: exact",
                         conv ? "conv" : "gemm", ng, fill);
                check(ok, what);
                free(a);
                free(b);
            }
}

static void check_sgemm(void) {
    static const long shapes[][3] = {{1, 1, 1}, {7, 17, 5}, {13, 33, 400}, {65, 31, 900}};
    char what[128];
    for (int r = 0; r < SG_ROW_COUNT; r++)   /* every row of the table this CPU runs */
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const sg_row *row = &sg_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        long M = shapes[t][0], N = shapes[t][1], K = shapes[t][2];
        float *a = malloc(M * K * 4), *b = malloc(K * N * 4), *c = malloc(M * N * 4);
        float *ap = calloc(sg_packed_a_size(M, K) + 1, 4);
        float *ws = malloc((sg_workspace_size(M, N, K, 0, 1) + 1) * 4);
        for (long i = 0; i < M * K; i++) a[i] = (float)((int)(rnd() % 7) - 3);
        for (long i = 0; i < K * N; i++) b[i] = (float)((int)(rnd() % 7) - 3);
        sg_pack_a(a, K, 1, 0, M, 0, K, ap);
        sg_operand A = {ap, NULL, 0, 0}, B = {NULL, b, N, 1};
        sg_epi e = {NULL, NULL, NULL, 0, EDGENN_ACT_NONE, 0.f, 0.f};
        sg_gemm(M, N, K, &A, &B, NULL, c, N, &e, ws, row, 0);
        int ok = 1;   /* small integers: exact in fp32 */
        for (long i = 0; i < M; i++)
            for (long j = 0; j < N; j++) {
                double s = 0;
                for (long k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
                ok &= c[i * N + j] == (float)s;
            }
        snprintf(what, sizeof what, "%s %ldx%ldx%ld: exact on small integers", row->name, M, N,
                 K);
        check(ok, what);
        free(a); free(b); free(c); free(ap); free(ws);
    }
}

/* Sparse 1x1 conv, every row (portable C, and the AVX2 / AVX-512F bodies on SIMDe):
 * small integer weights and inputs, so the sums are exact in fp32 on every tier. */
static void check_spmm(void) {
    static const long shapes[][3] = {{1, 1, 1}, {5, 3, 33}, {9, 7, 64}, {16, 20, 129}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        long M = shapes[t][0], K = shapes[t][1], S = shapes[t][2];
        float *w = malloc(M * K * 4), *x = malloc(K * S * 4), *y = malloc(M * S * 4);
        float *val = malloc(M * K * 4), *ws = malloc(((K + 2 * M) * 64 + SP_ALIGN) * 4);
        int *rp = malloc((M + 1) * sizeof(int)), nnz = 0;
        long *off = malloc(M * K * sizeof(long)), *off_t = malloc(M * K * sizeof(long));
        for (long i = 0; i < M * K; i++) w[i] = rnd() % 3 ? 0.f : (float)((int)(rnd() % 7) - 3);
        for (long i = 0; i < K * S; i++) x[i] = (float)((int)(rnd() % 7) - 3);
        for (long m = 0; m < M; m++) {
            rp[m] = nnz;
            for (long k = 0; k < K; k++)
                if (w[m * K + k] != 0.f) { off[nnz] = k; val[nnz++] = w[m * K + k]; }
        }
        rp[M] = nnz;
        for (int r = 0; r < SP_ROW_COUNT; r++) {
            const sp_row *row = &sp_rows[r];
            long *o = malloc(M * K * sizeof(long));
            for (int j = 0; j < nnz; j++) { o[j] = off[j] * S; off_t[j] = off[j] * sp_tile(row); }
            sp_epi e = {rp, o, val, NULL, NULL, EDGENN_ACT_RELU, 0.f, 1e30f};
            spmm_run(x, y, M, K, S, &e, off_t, row, ws);
            free(o);
            int ok = 1;
            for (long m = 0; m < M; m++)
                for (long s = 0; s < S; s++) {
                    double v = 0;
                    for (long k = 0; k < K; k++) v += (double)w[m * K + k] * x[k * S + s];
                    ok &= y[m * S + s] == (float)(v > 0 ? v : 0);
                }
            snprintf(what, sizeof what, "%s %ldx%ldx%ld: exact on small integers",
                     row->name, M, K, S);
            check(ok, what);
        }
        free(w); free(x); free(y); free(val); free(ws); free(rp); free(off); free(off_t);
    }
}

/* Sparse FC layers, y (M, N) = relu(x (M, K) W + bias): both algorithms on every row
 * (portable C, and the AVX2 / AVX-512F bodies on SIMDe), small integers: exact in fp32. */
static void check_spgemm(void) {
    static const long shapes[][3] = {{1, 1, 1}, {3, 17, 9}, {7, 33, 16}, {33, 40, 21},
                                     {70, 100, 5}};
    char what[128];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        long M = shapes[t][0], K = shapes[t][1], N = shapes[t][2];
        float *wt = malloc(N * K * 4), *x = malloc(M * K * 4), *y = malloc(M * N * 4);
        float *val = malloc(N * K * 4), *bias = malloc(N * 4);
        float *ws = malloc(((K + 2 * N) * 64 + SP_ALIGN) * 4);   /* the widest tile's */
        int *rp = malloc((N + 1) * sizeof(int)), *col = malloc(N * K * sizeof(int)), nnz = 0;
        long *off = malloc(N * K * sizeof(long));
        for (long i = 0; i < N * K; i++) wt[i] = rnd() % 3 ? 0.f : (float)((int)(rnd() % 7) - 3);
        for (long i = 0; i < M * K; i++) x[i] = (float)((int)(rnd() % 7) - 3);
        for (long n = 0; n < N; n++) bias[n] = (float)((int)(rnd() % 5) - 2);
        for (long n = 0; n < N; n++) {
            rp[n] = nnz;
            for (long k = 0; k < K; k++)
                if (wt[n * K + k] != 0.f) { col[nnz] = (int)k; val[nnz++] = wt[n * K + k]; }
        }
        rp[N] = nnz;
        for (int tiled = 0; tiled < 2; tiled++)
            for (int r = 0; r < (tiled ? SP_ROW_COUNT : SPV_ROW_COUNT); r++) {
                const char *name = tiled ? sp_rows[r].name : spv_rows[r].name;
                for (int j = 0; j < nnz; j++)
                    off[j] = (long)col[j] * (tiled ? sp_rows[r].pixels : 0);
                sp_epi e = {rp, off, val, bias, NULL, EDGENN_ACT_RELU, 0.f, 1e30f};
                if (tiled) spg_tiled_ld(x, y, M, K, N, N, &e, &sp_rows[r], ws);
                else spv_rows[r].run(x, y, M, K, N, N, &e, col);
                int ok = 1;
                for (long m = 0; m < M; m++)
                    for (long n = 0; n < N; n++) {
                        double v = bias[n];
                        for (long k = 0; k < K; k++) v += (double)x[m * K + k] * wt[n * K + k];
                        ok &= y[m * N + n] == (float)(v > 0 ? v : 0);
                    }
                snprintf(what, sizeof what, "%s %ldx%ldx%ld: exact on small integers", name, M,
                         K, N);
                check(ok, what);
            }
        free(wt); free(x); free(y); free(val); free(bias); free(ws); free(rp); free(col);
        free(off);
    }
}

/* The 7-pixel x 32-channel tile (_qgemm_vnni_pix.h): w [ng][32][4] s8, pixel i of group g
 * at x + goff[g] + 4 i (groups stored in reverse), out [7][32]. */
static void check_vnni_pix(void) {
    static const long ngs[] = {1, 9, 300};
    char what[128];
    for (size_t t = 0; t < sizeof ngs / sizeof ngs[0]; t++)
        for (int fill = 0; fill < 3; fill++) {   /* random, u8 255 x s8 -128, 255 x 127 */
            const long ng = ngs[t];
            uint8_t *w = malloc(ng * 128), *x = malloc(ng * 64);
            long *goff = malloc(ng * sizeof(long));
            const uint8_t s8 = fill == 1 ? 0x80 : 0x7f;
            for (long i = 0; i < ng * 128; i++) w[i] = fill ? s8 : (uint8_t)rnd();
            for (long i = 0; i < ng * 64; i++) x[i] = fill ? 255 : (uint8_t)rnd();
            for (long g = 0; g < ng; g++) goff[g] = (ng - 1 - g) * 64;
            int32_t got[7 * 32];
            qvp_acc(ng, w, x, goff, NULL, got);
            int ok = 1;
            for (int i = 0; i < 7; i++)
                for (int c = 0; c < 32; c++) {
                    int64_t s = 0;
                    for (long g = 0; g < ng; g++)
                        for (int q = 0; q < 4; q++)
                            s += (int64_t)(int8_t)w[(g * 32 + c) * 4 + q] * x[goff[g] + 4 * i + q];
                    ok &= got[i * 32 + c] == (int32_t)s;
                }
            snprintf(what, sizeof what, "vnni conv 7x32 pixel tile (SIMDe) ng=%ld fill=%d: exact",
                     ng, fill);
            check(ok, what);
            free(w); free(x); free(goff);
        }
}

int main(void) {
#if defined(__aarch64__)
    int t = edgenn_isa();
    check(t == EDGENN_ISA_NEON || t == EDGENN_ISA_NEONDOT, "probe: an arm64 tier");
    check(!edgenn_isa_x86(EDGENN_ISA_AVX2), "probe: no x86 tier on arm64");
    printf("tier %s\n", t == EDGENN_ISA_NEONDOT ? "neondot" : "neon");
#endif
    check_vnni();
    check_vnni_pix();
    check_sgemm();
    check_spmm();
    check_spgemm();
    check_native_rows();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
