/* The nine tile shapes of _qgemm_vnni_conv.h, rows 6 / 4 / 2 x NV 2 / 1 / 0 (32 / 16 / 8
 * pixels), in the order of qvc_index's tables; included once per family of kernels
 * (_qgemm_vnni.h: the packed-block ones, then the implicit-GEMM ones under QVC_PREFIX qvci
 * and QVC_IMPLICIT). No include guard: each inclusion instantiates them again. */
#define QVC_ROWS 6
#define QVC_NV 2
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 6
#define QVC_NV 1
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 4
#define QVC_NV 2
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 4
#define QVC_NV 1
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 2
#define QVC_NV 2
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 2
#define QVC_NV 1
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 6
#define QVC_NV 0
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 4
#define QVC_NV 0
#include "_qgemm_vnni_conv.h"
#define QVC_ROWS 2
#define QVC_NV 0
#include "_qgemm_vnni_conv.h"
