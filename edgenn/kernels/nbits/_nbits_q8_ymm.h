/* The 8-lane (ymm) parameters the AVX2 and AVX-VNNI instances of _nbits_q8_vec.h share:
 * loads, shifts, broadcasts, int32 accumulators and the float epilogue. Included right
 * before each of them, which then adds its own (NBQ_ATTR, the dot product, the names);
 * the template undefines all of them at its end. No include guard: it is meant to be
 * included once per instance. */
#define NBQ_VI __m256i
#define NBQ_VA __m256i
#define NBQ_VF __m256
#define NBQ_L 8
#define NBQ_LOADI(p) _mm256_loadu_si256((const __m256i *)(p))
#define NBQ_SRL(x, n) _mm256_srli_epi32(x, n)
#define NBQ_AND _mm256_and_si256
#define NBQ_SET1I(m) _mm256_set1_epi32((int)(m))
#define NBQ_BCAST(p) _mm256_set1_epi32((int)nbq_load4(p))
#define NBQ_ZEROA _mm256_setzero_si256
#define NBQ_ADDA _mm256_add_epi32
#define NBQ_SHIFT8 0.0f
#define NBQ_CVT _mm256_cvtepi32_ps
#define NBQ_LOADF _mm256_loadu_ps
#define NBQ_STOREF _mm256_storeu_ps
#define NBQ_SET1F _mm256_set1_ps
#define NBQ_ZEROF _mm256_setzero_ps
#define NBQ_ADDF _mm256_add_ps
#define NBQ_SUBF _mm256_sub_ps
#define NBQ_MULF _mm256_mul_ps
#define NBQ_ZP8(p) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define NBQ_KEEP(x) NBQ_KEEP_X86(x)
#define NBQ_ROWS_MAX 4
