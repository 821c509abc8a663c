/* A padded image plane split into its column phases, read by the kernels that put output
 * pixels in the vector lanes (_convdirect.h, _dwrows.h): xp (Hp, SW, Wq) holds padded row
 * r, column u at phase u % SW, position u / SW, so the taps of SW-strided outputs read
 * unit-stride vectors. Only the interior is written: the zero borders are filled once. */
#ifndef EDGENN_PHASES_H
#define EDGENN_PHASES_H
#include <string.h>

/* Plane x (H, W) into xp at padded (pt + iy, pl + ix). Stride 1 and 2 get their own
 * loops, which the compiler vectorizes (stride 2: the even / odd deinterleave). */
static inline void phases_fill_plane(const float *x, float *xp, long H, long W, long Wq,
                                     long pt, long pl, long SW)
{
    for (long iy = 0; iy < H; iy++) {
        const float *restrict s = x + iy * W;
        float *restrict d = xp + (pt + iy) * SW * Wq;
        if (SW == 1) {
            for (long ix = 0; ix < W; ix++) d[pl + ix] = s[ix];
        } else if (SW == 2) {        /* image column ix -> phase (pl + ix) & 1 */
            float *restrict e = d + (pl & 1) * Wq + pl / 2;               /* ix even */
            float *restrict o = d + ((pl + 1) & 1) * Wq + (pl + 1) / 2;   /* ix odd */
            const long pairs = W / 2;
            /* pair i: columns 2i and 2i + 1 (written so, the compiler vectorizes it; as
             * e[ix / 2] with ix += 2 it stays one float at a time, a large share of a
             * stem conv on a large image) */
            for (long i = 0; i < pairs; i++) {
                e[i] = s[2 * i];
                o[i] = s[2 * i + 1];
            }
            if (W & 1) e[pairs] = s[W - 1];
        } else {
            for (long ix = 0; ix < W; ix++)
                d[((pl + ix) % SW) * Wq + (pl + ix) / SW] = s[ix];
        }
    }
}
#endif
