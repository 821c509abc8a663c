/* The one list of fused activations of edgenn's C kernels: every family switches on these
 * codes, and Python reads the names from here (_epilogue.pxi -> epilogue.py), so a code
 * means the same activation everywhere.
 *
 * Parameters (p0, p1), as the fused Conv / Gemm attributes carry them (epilogue.py fills
 * the ONNX defaults): Clip min / max; HardSigmoid alpha / beta; LeakyRelu alpha; PRelu one
 * slope per output channel (the family's epilogue holds the pointer). Each family states
 * the codes it computes as a bit mask (<FAMILY>_ACTS, EDGENN_ACT_BIT), which Python reads
 * back as that family's ACTIVATIONS: the tuner offers a family only the activations it
 * fuses. NONE, RELU and CLIP come first: a kernel may test `act <= EDGENN_ACT_CLIP` for
 * "a clamp or nothing".
 */
#ifndef EDGENN_EPILOGUE_H
#define EDGENN_EPILOGUE_H

enum {
    EDGENN_ACT_NONE = 0, EDGENN_ACT_RELU, EDGENN_ACT_CLIP, EDGENN_ACT_HARDSWISH,
    EDGENN_ACT_HARDSIGMOID, EDGENN_ACT_SIGMOID, EDGENN_ACT_SILU, EDGENN_ACT_LEAKYRELU,
    EDGENN_ACT_GELU, EDGENN_ACT_PRELU, EDGENN_ACT_COUNT
};

/* the fused Conv / Gemm `activation` attribute of each code ("" is none) */
static const char *const edgenn_act_names[EDGENN_ACT_COUNT] = {
    "", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "SiLU", "LeakyRelu", "Gelu",
    "PRelu"};

#define EDGENN_ACT_BIT(a) (1u << (a))
/* a clamp or nothing: the activations every family fuses */
#define EDGENN_ACTS_CLAMP \
    (EDGENN_ACT_BIT(EDGENN_ACT_NONE) | EDGENN_ACT_BIT(EDGENN_ACT_RELU) | \
     EDGENN_ACT_BIT(EDGENN_ACT_CLIP))

#endif
