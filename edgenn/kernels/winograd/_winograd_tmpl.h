/* Template of the Winograd transform loops, included by _winograd.h once per instruction set
 * (ISA, ATTR, NL lanes, VT and the V* ops defined by the includer) and, here, once per
 * tile size m. See _winograd.h for the layouts. */

#define WCAT_(a, b, c) a##_##b##_##c
#define WCAT(a, b, c) WCAT_(a, b, c)

#define WM 2
#define WALPHA 4
#define IN1D IN1D_2
#define OUT1D OUT1D_2
#include "_winograd_loops.h"
#undef WM
#undef WALPHA
#undef IN1D
#undef OUT1D

#define WM 4
#define WALPHA 6
#define IN1D IN1D_4
#define OUT1D OUT1D_4
#include "_winograd_loops.h"
#undef WM
#undef WALPHA
#undef IN1D
#undef OUT1D

#define WM 6
#define WALPHA 8
#define IN1D IN1D_6
#define OUT1D OUT1D_6
#include "_winograd_loops.h"
#undef WM
#undef WALPHA
#undef IN1D
#undef OUT1D

/* the includer's parameters, undefined for the next instruction set */
#undef ISA
#undef ATTR
#undef NL
#undef VT
#undef VLOAD
#undef VSTORE
#undef VSTORE_N
#undef LOAD_TILES
#undef LOAD_TILES_X
#undef GATHER_SETUP
#undef VSET1
#undef VADD
#undef VSUB
#undef VMULC
#undef VFMAC
#undef VACT
#undef ILV_STORE
#undef ILV_STORE_X
#undef WCAT_
#undef WCAT
