/* Ends one ISA's block of _spmm_tile.h instances in _spmm.h: its vector macros are
 * undefined, so the next block defines its own. */
#undef SP_V
#undef SP_L
#undef SP_ATTR
#undef SP_SET1
#undef SP_LOAD
#undef SP_STORE
#undef SP_FMA
#undef SP_ADD
#undef SP_MIN
#undef SP_MAX
