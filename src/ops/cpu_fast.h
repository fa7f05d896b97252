/* cpu_fast.h — which instruction set the CPU fast paths of the memory-bound
 * ops (ops/instantiate_fast.inc: the reference kernels compiled again for
 * AVX-512 and for AVX2 + FMA) run on this machine, chosen once at run time
 * from the CPU's features. */
#ifndef MP_OPS_CPU_FAST_H
#define MP_OPS_CPU_FAST_H

#include "ops/op.h"

/* The compiler builds functions for AVX-512 / AVX2 targets (attributes).
 * Fast-path files start, before any #include, with GCC's
 * optimize("no-trapping-math"): comparisons may then be evaluated on every
 * lane (no floating-point trap is relied on anywhere); without it GCC keeps
 * a branch around the ReLU masks' compares and leaves those loops scalar.
 * Results are unchanged. It covers the whole file so that the bf16 helpers
 * still inline into the kernels (GCC inlines only across equal optimization
 * options). */
#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 8))
#define MP_FAST_KERNELS 1
#endif

typedef enum {
    MP_FAST_NONE = 0, /* reference kernels only (not x86, or no AVX2 + FMA) */
    MP_FAST_AVX2,     /* AVX2 + FMA */
    MP_FAST_AVX512    /* AVX-512 F + BW */
} mp_fast_isa;

/* The widest set this CPU (and this build) runs; MIXPREC_FORCE_SCALAR=1 (as for
 * the dtype conversions) gives MP_FAST_NONE. */
mp_fast_isa mp_fast_isa_best(void);
/* The set the fast paths use now: mp_fast_isa_best(), or what tests chose
 * with mp_fast_isa_set (never wider than the best). */
mp_fast_isa mp_fast_isa_current(void);
/* Tests: run the fast paths on `isa` (clamped to the best); returns the set
 * in use afterwards. */
mp_fast_isa mp_fast_isa_set(mp_fast_isa isa);
const char *mp_fast_isa_name(mp_fast_isa isa);

/* Whether call c runs an op's fast path: not MP_IMPL_REF, f32 or bf16
 * activations, and a fast instruction set. */
static inline bool mp_fast_use(const mp_op_call *c, mp_dtype act) {
    return c->impl != MP_IMPL_REF && (act == MP_DTYPE_F32 || act == MP_DTYPE_BF16) &&
           mp_fast_isa_current() != MP_FAST_NONE;
}

#endif
