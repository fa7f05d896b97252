/* cpu_fast.c — see cpu_fast.h. */
#include "ops/cpu_fast.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/cpu_features.h"
#include "mixprec.h"

static mp_fast_isa g_best, g_current;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void) {
    const bool scalar = mp_env_get()->force_scalar; /* MIXPREC_FORCE_SCALAR=1 */
    const mp_cpu_features *f = mp_cpu_features_get();
    g_best = MP_FAST_NONE;
#ifdef MP_FAST_KERNELS
    if (!scalar) {
        if (f->avx2 && f->fma) g_best = MP_FAST_AVX2;
        if (g_best == MP_FAST_AVX2 && f->avx512f && f->avx512bw) g_best = MP_FAST_AVX512;
    }
#else
    (void)scalar, (void)f;
#endif
    g_current = g_best;
}

mp_fast_isa mp_fast_isa_best(void) {
    pthread_once(&g_once, detect);
    return g_best;
}

mp_fast_isa mp_fast_isa_current(void) {
    pthread_once(&g_once, detect);
    return g_current;
}

mp_fast_isa mp_fast_isa_set(mp_fast_isa isa) {
    pthread_once(&g_once, detect);
    g_current = isa < g_best ? isa : g_best;
    return g_current;
}

const char *mp_fast_isa_name(mp_fast_isa isa) {
    switch (isa) {
    case MP_FAST_AVX2: return "avx2";
    case MP_FAST_AVX512: return "avx512";
    default: return "none";
    }
}
