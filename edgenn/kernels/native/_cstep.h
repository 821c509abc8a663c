/* A plan step as a plain C call, for the runtime's compiled run loop
 * (edgenn/runtime/_loop.pyx): a kernel whose Python `run` can also run as
 * fn(params) offers it through run.cstep (edgenn/kernels/native/cstep.pxi).
 *
 * A step's arrays are C-contiguous (the runtime offers no other to run.cstep), and it
 * reads and writes them through cells: each cell holds the address of one
 * tensor's first element in the running context. The loop owns the cells and may point an
 * input's cell at the caller's array for one call (an input read in place), so a step
 * dereferences its cells on every call and never keeps the addresses. params is the
 * kernel's, malloc'd, freed with the capsule that carries the step.
 *
 * fn returns 0, or a nonzero code the loop reports as the step's failure. It runs with
 * the GIL held: C steps are the small kernels, where a call's fixed cost is the point. */
#ifndef EDGENN_CSTEP_H
#define EDGENN_CSTEP_H

typedef int (*edgenn_step_fn)(const void *params);

typedef struct {
    edgenn_step_fn fn;
    void *params;
} edgenn_cstep;

#define EDGENN_CSTEP_CAPSULE "edgenn.cstep"

#endif
