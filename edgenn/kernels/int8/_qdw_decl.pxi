# _qdw.h's plan and setup, declared once for _qgemm.pyx and the emulated _qgemm_emu.pyx.

cdef extern from "_qdw.h" nogil:
    int QDW_MAXT
    ctypedef struct qdw_row:
        const char *name
        int isa
    ctypedef struct qdw_plan:
        int C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow
        int Hp, Wl, flat, T, npair
        uint8_t xzp
        const qdw_row *row
        int u8rows
    void qdw_setup(qdw_plan *p, long *plane_size, long *obuf_size)
    void qdw_pack_weights(const qdw_plan *p, const int8_t *w, int32_t *wp)
    void qdw_pack_plane_c(const qdw_plan *p, const uint8_t *x, int16_t *P)
