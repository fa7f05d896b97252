/* cpu_features.c — x86 feature detection with CPUID, checked against XCR0
 * (XGETBV) so that a feature counts only when the OS saves its registers;
 * the CPU's brand string and its cores / hardware threads. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "core/cpu_features.h"

#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
        g_features.amx_fp16 = g_features.amx_tile && ((a >> 21) & 1);
    }
}
#else
static void detect(void) {}
#endif

const mp_cpu_features *mp_cpu_features_get(void) {
    pthread_once(&g_features_once, detect);
    return &g_features;
}

bool mp_cpu_multiplies_bf16(void) {
    const mp_cpu_features *f = mp_cpu_features_get();
    return f->avx512_bf16 || f->amx_bf16;
}

/* ---- brand string ------------------------------------------------------- */

static char g_model[64];
static pthread_once_t g_model_once = PTHREAD_ONCE_INIT;

static void trim_into(char *dst, size_t n, const char *src) {
    while (isspace((unsigned char)*src)) src++;
    snprintf(dst, n, "%s", src);
    size_t len = strlen(dst);
    while (len && isspace((unsigned char)dst[len - 1])) dst[--len] = 0;
}

static void detect_model(void) {
#ifdef MP_X86
    unsigned regs[12];
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
        char brand[sizeof regs + 1];
        memcpy(brand, regs, sizeof regs);
        brand[sizeof regs] = 0;
        trim_into(g_model, sizeof g_model, brand);
        if (g_model[0]) return;
    }
#endif
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (colon && (!strncmp(line, "model name", 10) || !strncmp(line, "Model", 5))) {
            trim_into(g_model, sizeof g_model, colon + 1);
            break;
        }
    }
    if (f) fclose(f);
    if (!g_model[0]) snprintf(g_model, sizeof g_model, "unknown");
}

const char *mp_cpu_model_name(void) {
    pthread_once(&g_model_once, detect_model);
    return g_model;
}

/* ---- topology ----------------------------------------------------------- */

static int read_sys_int(int cpu, const char *what) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
    FILE *f = fopen(path, "r");
    int v = -1;
    if (f) {
        if (fscanf(f, "%d", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static int count_physical_cores(int max_cpu) {
    enum { MAX_PAIRS = 4096 };
    long pairs[MAX_PAIRS]; /* package << 20 | core */
    int n = 0;
    for (int cpu = 0; cpu < max_cpu && n < MAX_PAIRS; cpu++) {
        int core = read_sys_int(cpu, "core_id"), pkg = read_sys_int(cpu, "physical_package_id");
        if (core < 0 || pkg < 0) continue;
        long key = ((long)pkg << 20) | core;
        int seen = 0;
        for (int i = 0; i < n && !seen; i++) seen = pairs[i] == key;
        if (!seen) pairs[n++] = key;
    }
    return n;
}

mp_cpu_topology mp_cpu_topology_get(void) {
    mp_cpu_topology t = {0};
    long online = sysconf(_SC_NPROCESSORS_ONLN), conf = sysconf(_SC_NPROCESSORS_CONF);
    t.logical_cpus = online > 0 ? (int)online : 0;
    t.physical_cores = count_physical_cores(conf > 0 ? (int)conf : t.logical_cpus);
    cpu_set_t set;
    CPU_ZERO(&set);
    t.available_cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : t.logical_cpus;
    return t;
}
