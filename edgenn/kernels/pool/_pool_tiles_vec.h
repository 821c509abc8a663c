/* The MaxPool loop of _pool_tiles.h's vector rows, written once. Included with PT_FN (the
 * function's name), PT_ATTR (its target attribute), PT_L (outputs per vector step) and
 * the ISA's two steps, each o[0 .. PT_L) from the kh input rows at r, W apart:
 *   PT_COLS1(r, W, kh, o)   kw = 1: the vertical max of r[0 .. PT_L)
 *   PT_COLS2(r, W, kh, o)   kw = 2: the max over r[0 .. 2 PT_L) and column pairs
 * kw > 2 takes the portable loop; the last OW % PT_L outputs of a row are scalar. Its
 * parameters are undefined at the end. */
PT_ATTR static void PT_FN(const float *x, float *y, long P, long H, long W, int kh, int kw,
                          float *row)
{
    if (kw > 2) {
        maxpool_tiles_generic(x, y, P, H, W, kh, kw, row);
        return;
    }
    long OH = H / kh, OW = W / kw;
    for (long p = 0; p < P; p++)
        for (long oh = 0; oh < OH; oh++) {
            const float *r = x + (p * H + oh * kh) * W;
            float *o = y + (p * OH + oh) * OW;
            long j = 0;
            if (kw == 1)
                for (; j + PT_L <= OW; j += PT_L) PT_COLS1(r + j, W, kh, o + j);
            else
                for (; j + PT_L <= OW; j += PT_L) PT_COLS2(r + 2 * j, W, kh, o + j);
            for (; j < OW; j++) {                      /* the tail, scalar */
                float m = r[j * kw];
                for (int i = 0; i < kh; i++)
                    for (int t = 0; t < kw; t++) m = tile_max1(m, r[i * W + j * kw + t]);
                o[j] = m;
            }
        }
}
#undef PT_FN
#undef PT_ATTR
#undef PT_L
#undef PT_COLS1
#undef PT_COLS2
