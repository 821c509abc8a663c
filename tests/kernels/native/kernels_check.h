/* What kernels_check.c shares with kernels_check_native.c: one tally, one generator. */
#ifndef EDGENN_KERNELS_CHECK_H
#define EDGENN_KERNELS_CHECK_H
#include <stdint.h>

void check(int ok, const char *what);    /* one line "ok  " / "FAIL" + what, tallied */
uint32_t rnd(void);                      /* a fixed-seed LCG: the same data on every run */
void check_native_rows(void);            /* kernels_check_native.c */
void check_attention_rows(void);         /* kernels_check_attention.c */

#endif
