/* cpu_features.c — x86 feature detection with CPUID, checked against XCR0
 * (XGETBV) so that a feature counts only when the OS saves its registers. */
#include "core/cpu_features.h"

#include <pthread.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define MP_X86 1
#endif

static mp_cpu_features g_features;
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;

#ifdef MP_X86
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    /* xgetbv with ECX = 0 (XCR0); raw opcode-free asm needs no -mxsave. */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(void) {
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 1) return;
    __cpuid_count(1, 0, a, b, c, d);
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave || !avx) return; /* nothing below is usable without AVX */
    uint64_t xcr0 = read_xcr0();
    bool os_ymm = (xcr0 & 0x6) == 0x6;                  /* XMM, YMM */
    bool os_zmm = os_ymm && (xcr0 & 0xE0) == 0xE0;      /* opmask, ZMM_Hi256, Hi16_ZMM */
    bool os_amx = (xcr0 & 0x60000) == 0x60000;          /* XTILECFG, XTILEDATA */
    if (!os_ymm) return;
    g_features.fma = fma;
    g_features.f16c = f16c;
    if (max_leaf < 7) return;
    unsigned max_sub7;
    __cpuid_count(7, 0, max_sub7, b, c, d);
    g_features.avx2 = (b >> 5) & 1;
    g_features.avx512f = os_zmm && ((b >> 16) & 1);
    g_features.avx512bw = g_features.avx512f && ((b >> 30) & 1);
    g_features.avx512_fp16 = g_features.avx512f && ((d >> 23) & 1);
    /* AMX: hardware + XCR0; Linux still wants arch_prctl(ARCH_REQ_XCOMP_PERM)
     * before a process touches tile data. */
    g_features.amx_tile = os_amx && ((d >> 24) & 1);
    g_features.amx_bf16 = g_features.amx_tile && ((d >> 22) & 1);
    if (max_sub7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        g_features.avx512_bf16 = g_features.avx512f && ((a >> 5) & 1);
    }
}
#else
static void detect(void) {}
#endif

const mp_cpu_features *mp_cpu_features_get(void) {
    pthread_once(&g_features_once, detect);
    return &g_features;
}
