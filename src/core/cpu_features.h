/* cpu_features.h — run-time CPU feature detection (x86 CPUID + XGETBV for
 * OS support) and the table of dtype-conversion kernels chosen from it. */
#ifndef MP_CORE_CPU_FEATURES_H
#define MP_CORE_CPU_FEATURES_H

#include <stdbool.h>
#include <stddef.h>

#include "mixprec.h"

/* A feature is true only when the CPU has it AND the OS saves the register
 * state it needs (YMM for AVX*, F16C, FMA; opmask/ZMM for AVX-512; tile
 * state for AMX). All false on non-x86 machines. */
typedef struct {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512_bf16, avx512_fp16, amx_tile, amx_bf16;
    bool amx_fp16; /* Granite Rapids and later */
} mp_cpu_features;

/* Detected once (thread-safe); the pointer stays valid for the process. */
const mp_cpu_features *mp_cpu_features_get(void);

/* Whether the CPU multiplies bf16 in hardware (AVX-512 BF16 or AMX-BF16):
 * without, bf16 compute is emulated and no faster than f32. */
bool mp_cpu_multiplies_bf16(void);

/* The CPU's brand string ("Intel(R) Xeon(R) Platinum 8480+", from CPUID
 * leaves 0x80000002-4, else /proc/cpuinfo's "model name"), "unknown" when
 * neither says. Detected once; valid for the process. */
const char *mp_cpu_model_name(void);

/* Cores and hardware threads: physical_cores counts distinct (package, core)
 * pairs in /sys (0 when unreadable), logical_cpus the online CPUs,
 * available_cpus those this process may run on (its affinity mask). */
typedef struct {
    int physical_cores, logical_cpus, available_cpus;
} mp_cpu_topology;
mp_cpu_topology mp_cpu_topology_get(void);

/* The conversion paths of dtype_convert.c. */
typedef enum {
    MP_CVT_PORTABLE = 0, /* plain C, the scalar functions in a loop */
    MP_CVT_F16C,         /* f32 <-> f16 with vcvtps2ph / vcvtph2ps (256-bit) */
    MP_CVT_AVX2,         /* f32 <-> bf16 with AVX2 integer arithmetic */
    MP_CVT_AVX512_BF16,  /* f32 -> bf16 with vcvtneps2bf16 + a fix-up of f32 denormals */
    MP_CVT_PATH_COUNT
} mp_cvt_path;

typedef void (*mp_cvt_f32_to_f16_fn)(const float *src, mp_f16 *dst, size_t n);
typedef void (*mp_cvt_f16_to_f32_fn)(const mp_f16 *src, float *dst, size_t n);
typedef void (*mp_cvt_f32_to_bf16_fn)(const float *src, mp_bf16 *dst, size_t n);
typedef void (*mp_cvt_bf16_to_f32_fn)(const mp_bf16 *src, float *dst, size_t n);

/* The kernels of one path; a NULL member is a conversion the path does not
 * do. Every non-NULL kernel is bit-identical to the scalar functions. */
typedef struct {
    const char *name;
    mp_cvt_f32_to_f16_fn f32_to_f16;
    mp_cvt_f16_to_f32_fn f16_to_f32;
    mp_cvt_f32_to_bf16_fn f32_to_bf16;
    mp_cvt_bf16_to_f32_fn bf16_to_f32;
} mp_cvt_kernels;

/* The kernels of path p, or NULL when this CPU (or this build) cannot run
 * it. For tests and benchmarks; the mp_convert_* functions pick by
 * themselves. */
const mp_cvt_kernels *mp_cvt_path_kernels(mp_cvt_path p);

/* Which path each mp_convert_* function uses on this machine, e.g.
 * "f32->f16 f16c, f16->f32 f16c, f32->bf16 avx2, bf16->f32 avx2"; ends in
 * " (MP_FORCE_SCALAR)" when the environment forced the portable path. */
const char *mp_convert_path_name(void);

#endif
