/* bf16_conv_math.c — see bf16_conv_math.h. The probe times independent
 * chains of vdpbf16ps and of vfmadd231ps on 512-bit registers, best of
 * several tries each, ~3 ms once per process (only on CPUs with AVX-512
 * BF16). */
#include "ops/bf16_conv_math.h"

#include <pthread.h>
#include <stdbool.h>

#include "core/clock.h"
#include "core/cpu_features.h"

#if defined(__x86_64__) && ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10))
#define MP_BF16_PROBE 1
#include <immintrin.h>
#endif

static mp_bf16_math g_auto, g_forced;
static double g_rate;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef MP_BF16_PROBE
enum { CHAINS = 12, ITERS = 20000, TRIES = 7 };

/* Twelve independent accumulator chains in zmm0-11 (enough to cover either
 * instruction's latency), written in assembly so that the measurement is
 * the same at every optimization level. */
#define MP_X12(op) \
    op "%%zmm0\n\t" op "%%zmm1\n\t" op "%%zmm2\n\t" op "%%zmm3\n\t" op "%%zmm4\n\t" op "%%zmm5\n\t" \
    op "%%zmm6\n\t" op "%%zmm7\n\t" op "%%zmm8\n\t" op "%%zmm9\n\t" op "%%zmm10\n\t" op "%%zmm11\n\t"
#define MP_CLOBBER12 "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"

/* The loop: ITERS rounds of `op x, y` into each of the twelve chains. */
#define MP_CHAINS_LOOP(op)                                                         \
    __asm__ volatile("1:\n\t" MP_X12(op " %1, %2, ") "dec %0\n\tjnz 1b"          \
                     : "+r"(n)                                                     \
                     : "v"(x), "v"(y)                                              \
                     : MP_CLOBBER12, "cc")

/* Seconds for CHAINS x ITERS vdpbf16ps (dot: 64 flops each) or vfmadd231ps
 * (32 flops each). */
__attribute__((target("avx512f"))) static double time_chains(bool dot) {
    const __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(1e-30f);
    long n = ITERS;
    const double t0 = mp_now_seconds();
    if (dot) MP_CHAINS_LOOP("vdpbf16ps");
    else MP_CHAINS_LOOP("vfmadd231ps");
    return mp_now_seconds() - t0;
}

static double probe_rate(void) {
    double dot = 1e30, fma = 1e30;
    for (int t = 0; t < TRIES; t++) { /* alternate, keep the best of each: a preempted try only loses */
        double d = time_chains(true), f = time_chains(false);
        dot = d < dot ? d : dot;
        fma = f < fma ? f : fma;
    }
    return (64.0 / dot) / (32.0 / fma);
}
#endif

static void detect(void) {
    const mp_cpu_features *f = mp_cpu_features_get();
    bool slow_dot = false; /* unmeasured: oneDNN's bf16 kernels, as before the probe */
#ifdef MP_BF16_PROBE
    if (f->avx512_bf16) {
        g_rate = probe_rate();
        slow_dot = g_rate < 1.0;
    }
#endif
    /* without AVX-512 BF16 or AMX, DOT leaves bf16 convolutions to the staged
     * emulation (mp_bf16_conv_primitives_pay) */
    g_auto = f->avx512_bf16 && !f->amx_bf16 && slow_dot ? MP_BF16_MATH_F32 : MP_BF16_MATH_DOT;
}

double mp_bf16_dot_rate(void) {
    pthread_once(&g_once, detect);
    return g_rate;
}

mp_bf16_math mp_bf16_math_current(void) {
    pthread_once(&g_once, detect);
    return g_forced != MP_BF16_MATH_AUTO ? g_forced : g_auto;
}

mp_bf16_math mp_bf16_math_set(mp_bf16_math m) {
    g_forced = m;
    return mp_bf16_math_current();
}

bool mp_bf16_conv_primitives_pay(void) {
    return mp_cpu_multiplies_bf16() || mp_bf16_math_current() == MP_BF16_MATH_F32;
}

const char *mp_bf16_math_name(mp_bf16_math m) {
    switch (m) {
    case MP_BF16_MATH_DOT: return "bf16 dot products";
    case MP_BF16_MATH_F32: return "f32 FMAs on widened bf16";
    default: return "auto";
    }
}
