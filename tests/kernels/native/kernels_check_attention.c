/* GroupQueryAttention (_gqa.h) for kernels_check: every row this CPU runs (on arm64 the
 * NEON 4-key row) against the portable row, which the Python tests check against the
 * NumPy reference: decode and prefill, rotary (interleaved or not) with the cache in
 * place or as present outputs, a local window, softcap, smooth softmax, a head size with
 * a channel tail. The cache rows bit for bit (the same rotation and copies); the outputs
 * within the float32 bound of tests/kernels/attention/test_gqa.py: (2 dS + (2 n + 8) eps)
 * max |v| per implementation, dS = (H + 8) eps scale |q| |k| + 8 eps softcap. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_gqa.h"
#include "kernels_check.h"

static float gqc_unit(void) { return (float)((int)(rnd() % 2001) - 1000) / 1000.0f; }

void check_attention_rows(void) {
    static const long cases[][11] = {
        /* B, S, N, KVN, H, T0, T1, extra, in_place, rotary (0 none, 1, 2 interleaved), window */
        {1, 1, 9, 3, 64, 37, 0, 5, 1, 1, -1}, {2, 1, 4, 1, 18, 45, 12, 3, 0, 2, 9},
        {2, 5, 8, 2, 32, 5, 40, 2, 1, 2, -1}, {1, 7, 4, 2, 20, 70, 0, 0, 0, 1, 16}};
    char what[200];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int r = 1; r < GQ_ROW_COUNT; r++) {
        const gq_row *row = &gq_rows[r];
        if (!edgenn_row_usable(row->isa)) continue;
        const long *k = cases[c];
        const long B = k[0], S = k[1], N = k[2], KVN = k[3], H = k[4], P = (k[5] > k[6] ? k[5] : k[6]) + k[7];
        const int32_t seq[2] = {(int32_t)k[5] - 1, (int32_t)k[6] - 1};
        const int in_place = (int)k[8];
        const long L = P, half = H / 2, R = P + S + 4;
        const long nq = B * S * N * H, nk = B * S * KVN * H, nc = B * KVN * P * H;
        float *q = malloc(sizeof(float) * nq), *kk = malloc(sizeof(float) * nk);
        float *v = malloc(sizeof(float) * nk), *pk = malloc(sizeof(float) * nc);
        float *pv = malloc(sizeof(float) * nc), *cs = malloc(sizeof(float) * R * half);
        float *sn = malloc(sizeof(float) * R * half);
        float *ck[2], *cv[2], *out[2];
        for (long i = 0; i < nq; i++) q[i] = gqc_unit();
        for (long i = 0; i < nk; i++) { kk[i] = gqc_unit(); v[i] = gqc_unit(); }
        for (long i = 0; i < nc; i++) { pk[i] = gqc_unit(); pv[i] = gqc_unit(); }
        for (long p = 0; p < R; p++)
            for (long i = 0; i < half; i++) {
                double a = p * pow(10000.0, -(double)i / half);
                cs[p * half + i] = (float)cos(a);
                sn[p * half + i] = (float)sin(a);
            }
        int rc[2];
        for (int w = 0; w < 2; w++) {
            ck[w] = malloc(sizeof(float) * nc);
            cv[w] = malloc(sizeof(float) * nc);
            out[w] = malloc(sizeof(float) * nq);
            memcpy(ck[w], pk, sizeof(float) * nc);
            memcpy(cv[w], pv, sizeof(float) * nc);
            gq_args a = {0};
            a.B = B; a.S = S; a.N = N; a.KVN = KVN; a.H = H;
            a.q = q; a.q_ss = N * H; a.q_bs = S * N * H;
            a.k = kk; a.v = v; a.kv_ss = KVN * H; a.kv_bs = S * KVN * H;
            a.past_k = in_place ? ck[w] : pk; a.past_v = in_place ? cv[w] : pv; a.P = P;
            a.cache_k = ck[w]; a.cache_v = cv[w]; a.L = L; a.in_place = in_place;
            a.seqlens = seq; a.total_len = k[5] > k[6] ? k[5] : k[6];
            if (k[9]) { a.cos = cs; a.sin = sn; a.rot_rows = R; a.half = half; }
            a.interleaved = k[9] == 2;
            a.scale = 1.0f / sqrtf((float)H);
            a.softcap = c % 2 ? 8.0f : 0.0f;
            a.window = k[10];
            a.smooth = c == 3;
            a.out = out[w];
            rc[w] = gq_run(&a, w ? row : &gq_rows[0], 1);
        }
        double qn = 0, kn = 0, vm = 0;
        for (long i = 0; i < nq; i += H) {
            double s = 0;
            for (long d = 0; d < H; d++) s += (double)q[i + d] * q[i + d];
            qn = s > qn ? s : qn;
        }
        for (long i = 0; i < nc; i += H) {
            double s = 0;
            for (long d = 0; d < H; d++) {
                s += (double)ck[0][i + d] * ck[0][i + d];
                vm = fabs(cv[0][i + d]) > vm ? fabs(cv[0][i + d]) : vm;
            }
            kn = s > kn ? s : kn;
        }
        const double eps = 1.1920928955078125e-07, n = (double)P;
        const double ds = (H + 8) * eps * sqrt(qn) * sqrt(kn) / sqrt((double)H) + 8 * eps * 8.0;
        const double tol = 2 * (2 * ds + (2 * n + 8) * eps) * vm;
        int ok = rc[0] == GQ_OK && rc[1] == GQ_OK;
        ok &= memcmp(ck[0], ck[1], sizeof(float) * nc) == 0;
        ok &= memcmp(cv[0], cv[1], sizeof(float) * nc) == 0;
        double err = 0;
        for (long b = 0; b < B; b++) {
            const long kept = S < seq[b] + 1 ? S : seq[b] + 1;
            for (long i = 0; i < kept * N * H; i++) {
                const double e = fabs((double)out[0][b * S * N * H + i] - out[1][b * S * N * H + i]);
                err = e > err || isnan(e) ? e : err;
            }
        }
        ok &= err <= tol;
        snprintf(what, sizeof what, "%s B%ld S%ld %ldx%ld H%ld in_place %d rotary %ld window "
                 "%ld: cache exact, |err| %.2e <= %.2e", row->name, B, S, N, KVN, H,
                 in_place, k[9], k[10], err, tol);
        check(ok, what);
        for (int w = 0; w < 2; w++) { free(ck[w]); free(cv[w]); free(out[w]); }
        free(q); free(kk); free(v); free(pk); free(pv); free(cs); free(sn);
    }
}
