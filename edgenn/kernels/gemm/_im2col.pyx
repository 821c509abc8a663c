# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# cython: language_level=3
"""im2col for 2-D convolution, in C: one image x (C, H, W) -> cols (C*KH*KW, OH*OW).

Row r = (c*KH + i)*KW + j holds tap (i, j) of channel c for every output pixel, zero where
the tap falls in the padding; conv is then W (M, C*KH*KW) @ cols, a single sgemm.
"""


def im2col(const float[:, :, ::1] x, float[:, ::1] cols,
           int kh, int kw, int sh, int sw, int ph, int pw, int dh, int dw,
           int oh, int ow):
    cdef Py_ssize_t C = x.shape[0], H = x.shape[1], W = x.shape[2]
    cdef Py_ssize_t c, i, j, oy, ox, iy, ix, row, col
    with nogil:
        for c in range(C):
            for i in range(kh):
                for j in range(kw):
                    row = (c * kh + i) * kw + j
                    col = 0
                    for oy in range(oh):
                        iy = oy * sh - ph + i * dh
                        if iy < 0 or iy >= H:
                            for ox in range(ow):
                                cols[row, col + ox] = 0.0
                        elif sw == 1 and dw == 1:
                            for ox in range(ow):
                                ix = ox - pw + j
                                if ix < 0 or ix >= W:
                                    cols[row, col + ox] = 0.0
                                else:
                                    cols[row, col + ox] = x[c, iy, ix]
                        else:
                            for ox in range(ow):
                                ix = ox * sw - pw + j * dw
                                if ix < 0 or ix >= W:
                                    cols[row, col + ox] = 0.0
                                else:
                                    cols[row, col + ox] = x[c, iy, ix]
                        col += ow
