/* dtype_convert.c — f32 <-> f16 / bf16 conversions: portable scalar
 * functions (the definition of the results) and vectorized array kernels
 * chosen once at run time from the CPU's features.
 *
 * Semantics of the scalar functions (every array path is bit-identical):
 *  - f32 -> f16 / bf16: IEEE round-to-nearest-even, including f16 subnormal
 *    results and overflow to ±inf (f16: |x| >= 65520; bf16: finite values
 *    that round past the largest bf16, e.g. FLT_MAX, give ±inf).
 *  - NaN: stays NaN with its sign, quieted, payload truncated to the top
 *    bits. f32 -> f16: sign | 0x7E00 | mantissa[22:13]; f32 -> bf16:
 *    (bits >> 16) | 0x0040. Both are what F16C's vcvtps2ph and AVX-512
 *    BF16's vcvtneps2bf16 produce.
 *  - f16 -> f32: exact; NaN is quieted like vcvtph2ps does:
 *    sign | 0x7FC00000 | (mantissa << 13).
 *  - bf16 -> f32: exact bit extension (bits << 16); a signalling NaN stays
 *    signalling, as every bf16 library does.
 *  - The scalar code is integer-only: MXCSR (FTZ/DAZ, rounding mode) has no
 *    effect on it, and the F16C kernels clear FTZ/DAZ while they run.
 *
 * vcvtneps2bf16 flushes f32 denormal inputs to ±0, which IEEE RNE does not
 * (bf16 has f32's exponent range), so the AVX-512 BF16 kernel redoes any
 * vector holding a denormal with the integer rounding.
 *
 * mp_round_f32 (round in place to f16/bf16 precision) and mp_load_f32 /
 * mp_store_f32 (f32 from / to any float dtype) are built on the array
 * conversions.
 *
 * Environment: MIXPREC_FORCE_SCALAR=1 (set, neither empty nor "0") makes
 * every mp_convert_* function use the portable loops; read once, at the
 * first conversion. */
#include "core/cpu_features.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "core/bf16_inline.h"
#include "core/dtype_convert.h"
#include "core/dtype_traits.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MP_X86 1
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
#define MP_CVT_HAVE_AVX512BF16 1 /* the compiler knows the target */
#endif
#endif

static inline uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---- scalar ------------------------------------------------------------- */

static inline uint16_t f32_to_f16_bits(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu)); /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* >= 65520 and inf -> inf */
    if (a >= 0x38800000u) { /* >= 2^-14: normal f16; rebias 127 -> 15 and round at bit 13 */
        uint32_t r = a - 0x38000000u + 0x0FFFu + ((a >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to zero */
    /* Subnormal f16 result: round m * 2^(e-150) to a multiple of 2^-24, i.e.
     * m >> (126 - e) with RNE; a carry into bit 10 gives the smallest normal. */
    uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;
    uint32_t s = 126 - e; /* 14..24 */
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

static inline uint32_t f16_to_f32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return sign | 0x7F800000u | (m ? 0x400000u | (m << 13) : 0);
    if (e) return sign | ((e + 112) << 23) | (m << 13);
    if (!m) return sign;
    /* subnormal m * 2^-24: shift the leading one up to bit 10 */
#if defined(__GNUC__)
    uint32_t s = (uint32_t)__builtin_clz(m) - 21;
    m <<= s;
#else
    uint32_t s = 0;
    while (!(m & 0x400u)) {
        m <<= 1;
        s++;
    }
#endif
    return sign | ((113 - s) << 23) | ((m & 0x3FFu) << 13);
}

mp_f16 mp_f32_to_f16(float x) { return (mp_f16){f32_to_f16_bits(f32_bits(x))}; }
float mp_f16_to_f32(mp_f16 h) { return bits_f32(f16_to_f32_bits(h.bits)); }
mp_bf16 mp_f32_to_bf16(float x) { return (mp_bf16){mp_f32_to_bf16_bits(x)}; }
float mp_bf16_to_f32(mp_bf16 b) { return mp_bf16_bits_to_f32(b.bits); }

/* ---- portable array loops ----------------------------------------------- */

static void f32_to_f16_portable(const float *src, mp_f16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mp_f32_to_f16(src[i]);
}
static void f16_to_f32_portable(const mp_f16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mp_f16_to_f32(src[i]);
}
static void f32_to_bf16_portable(const float *src, mp_bf16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mp_f32_to_bf16(src[i]);
}
static void bf16_to_f32_portable(const mp_bf16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mp_bf16_to_f32(src[i]);
}

static const mp_cvt_kernels k_portable = {"portable", f32_to_f16_portable, f16_to_f32_portable,
                                          f32_to_bf16_portable, bf16_to_f32_portable};

/* ---- x86 kernels -------------------------------------------------------- */
#ifdef MP_X86

#define MXCSR_FTZ_DAZ 0x8040u

/* F16C: vcvtps2ph with an explicit RNE immediate (MXCSR.RC not consulted).
 * FTZ/DAZ are cleared for the loop so that f16 subnormals survive whatever
 * the caller's MXCSR (the Zen 3 here ignores them; not every CPU promises). */
__attribute__((target("avx,f16c"))) static void f32_to_f16_f16c(const float *src, mp_f16 *dst,
                                                                  size_t n) {
    unsigned csr = _mm_getcsr();
    if (csr & MXCSR_FTZ_DAZ) _mm_setcsr(csr & ~MXCSR_FTZ_DAZ);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    if (csr & MXCSR_FTZ_DAZ) _mm_setcsr(csr);
    for (; i < n; i++) dst[i] = mp_f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) static void f16_to_f32_f16c(const mp_f16 *src, float *dst,
                                                                  size_t n) {
    unsigned csr = _mm_getcsr();
    if (csr & MXCSR_FTZ_DAZ) _mm_setcsr(csr & ~MXCSR_FTZ_DAZ);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    if (csr & MXCSR_FTZ_DAZ) _mm_setcsr(csr);
    for (; i < n; i++) dst[i] = mp_f16_to_f32(src[i]);
}

/* f32 bits -> bf16 bits in the low half of each 32-bit lane (integer RNE,
 * NaN -> (bits >> 16) | 0x40), the vector form of mp_f32_bits_to_bf16. */
__attribute__((target("avx2"))) static inline __m256i bf16_rne_avx2(__m256i u) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
    const __m256i absmask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    const __m256i quiet = _mm256_set1_epi32(0x40);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, lsb)), 16);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    return _mm256_blendv_epi8(r, q, nan);
}

__attribute__((target("avx2"))) static void f32_to_bf16_avx2(const float *src, mp_bf16 *dst,
                                                              size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r0 = bf16_rne_avx2(_mm256_loadu_si256((const __m256i *)(const void *)(src + i)));
        __m256i r1 = bf16_rne_avx2(_mm256_loadu_si256((const __m256i *)(const void *)(src + i + 8)));
        /* lanes hold 0..0xFFFF, so the unsigned-saturating pack is exact; it
         * interleaves 128-bit halves, which the permute puts back in order */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), 0xD8);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), p);
    }
    for (; i < n; i++) dst[i] = mp_f32_to_bf16(src[i]);
}

__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const mp_bf16 *src, float *dst,
                                                              size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), w);
    }
    for (; i < n; i++) dst[i] = mp_bf16_to_f32(src[i]);
}

static const mp_cvt_kernels k_f16c = {"f16c", f32_to_f16_f16c, f16_to_f32_f16c, NULL, NULL};
static const mp_cvt_kernels k_avx2 = {"avx2", NULL, NULL, f32_to_bf16_avx2, bf16_to_f32_avx2};

#ifdef MP_CVT_HAVE_AVX512BF16
/* vcvtneps2bf16 equals the integer RNE on zeros, normals, inf and NaN; it
 * flushes f32 denormals to ±0, so a vector holding one (0 < |bits| <
 * 0x00800000) is redone with the integer rounding in those lanes. Only
 * AVX512F instructions besides the conversion (no BW/VL needed). */
__attribute__((target("avx512f,avx512bf16"))) static void
f32_to_bf16_avx512bf16(const float *src, mp_bf16 *dst, size_t n) {
    const __m512i absmask = _mm512_set1_epi32(0x7FFFFFFF), minnorm = _mm512_set1_epi32(0x00800000);
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(src + i);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
        __m512i u = _mm512_castps_si512(v);
        __m512i a = _mm512_and_si512(u, absmask);
        __mmask16 den = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(a, a), a, minnorm);
        if (den) {
            __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
            __m512i w = _mm512_mask_blend_epi32(den, _mm512_cvtepu16_epi32(h), r);
            h = _mm512_cvtepi32_epi16(w);
        }
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), h);
    }
    for (; i < n; i++) dst[i] = mp_f32_to_bf16(src[i]);
}

static const mp_cvt_kernels k_avx512bf16 = {"avx512_bf16", NULL, NULL, f32_to_bf16_avx512bf16, NULL};
#endif
#endif /* MP_X86 */

const mp_cvt_kernels *mp_cvt_path_kernels(mp_cvt_path p) {
#ifdef MP_X86
    const mp_cpu_features *f = mp_cpu_features_get();
#endif
    switch (p) {
    case MP_CVT_PORTABLE: return &k_portable;
#ifdef MP_X86
    case MP_CVT_F16C: return f->f16c ? &k_f16c : NULL;
    case MP_CVT_AVX2: return f->avx2 ? &k_avx2 : NULL;
#ifdef MP_CVT_HAVE_AVX512BF16
    case MP_CVT_AVX512_BF16: return f->avx512_bf16 ? &k_avx512bf16 : NULL;
#endif
#endif
    default: return NULL;
    }
}

/* ---- dispatch ----------------------------------------------------------- */

static struct {
    mp_cvt_f32_to_f16_fn f32_to_f16;
    mp_cvt_f16_to_f32_fn f16_to_f32;
    mp_cvt_f32_to_bf16_fn f32_to_bf16;
    mp_cvt_bf16_to_f32_fn bf16_to_f32;
    char name[160];
} g_cvt;
static pthread_once_t g_cvt_once = PTHREAD_ONCE_INIT;

static void resolve(void) {
    const char *n16 = "portable", *n16r = "portable", *nb = "portable", *nbr = "portable";
    g_cvt.f32_to_f16 = f32_to_f16_portable;
    g_cvt.f16_to_f32 = f16_to_f32_portable;
    g_cvt.f32_to_bf16 = f32_to_bf16_portable;
    g_cvt.bf16_to_f32 = bf16_to_f32_portable;
    const bool forced = mp_env_get()->force_scalar;
    if (!forced) {
        /* later paths in the list win where they do a conversion */
        for (int p = MP_CVT_F16C; p < MP_CVT_PATH_COUNT; p++) {
            const mp_cvt_kernels *k = mp_cvt_path_kernels((mp_cvt_path)p);
            if (!k) continue;
            if (k->f32_to_f16) {
                g_cvt.f32_to_f16 = k->f32_to_f16;
                n16 = k->name;
            }
            if (k->f16_to_f32) {
                g_cvt.f16_to_f32 = k->f16_to_f32;
                n16r = k->name;
            }
            if (k->f32_to_bf16) {
                g_cvt.f32_to_bf16 = k->f32_to_bf16;
                nb = k->name;
            }
            if (k->bf16_to_f32) {
                g_cvt.bf16_to_f32 = k->bf16_to_f32;
                nbr = k->name;
            }
        }
    }
    snprintf(g_cvt.name, sizeof g_cvt.name, "f32->f16 %s, f16->f32 %s, f32->bf16 %s, bf16->f32 %s%s",
             n16, n16r, nb, nbr, forced ? " (MIXPREC_FORCE_SCALAR)" : "");
}

const char *mp_convert_path_name(void) {
    pthread_once(&g_cvt_once, resolve);
    return g_cvt.name;
}

void mp_convert_f32_to_f16(const float *src, mp_f16 *dst, size_t n) {
    pthread_once(&g_cvt_once, resolve);
    g_cvt.f32_to_f16(src, dst, n);
}

void mp_convert_f16_to_f32(const mp_f16 *src, float *dst, size_t n) {
    pthread_once(&g_cvt_once, resolve);
    g_cvt.f16_to_f32(src, dst, n);
}

void mp_convert_f32_to_bf16(const float *src, mp_bf16 *dst, size_t n) {
    pthread_once(&g_cvt_once, resolve);
    g_cvt.f32_to_bf16(src, dst, n);
}

void mp_convert_bf16_to_f32(const mp_bf16 *src, float *dst, size_t n) {
    pthread_once(&g_cvt_once, resolve);
    g_cvt.bf16_to_f32(src, dst, n);
}

#define ROUND_CHUNK 4096

/* Chunks through 16-bit bits on the stack; all threads for large arrays. */
void mp_round_f32(float *x, int64_t n, mp_dtype dtype) {
    if (dtype != MP_DTYPE_F16 && dtype != MP_DTYPE_BF16) return;
#pragma omp parallel for schedule(static) if (n > 16 * 2 * ROUND_CHUNK)
    for (int64_t i = 0; i < n; i += ROUND_CHUNK) {
        uint16_t bits[ROUND_CHUNK];
        const size_t m = (size_t)(n - i < ROUND_CHUNK ? n - i : ROUND_CHUNK);
        if (dtype == MP_DTYPE_F16) {
            mp_convert_f32_to_f16(x + i, (mp_f16 *)bits, m);
            mp_convert_f16_to_f32((const mp_f16 *)bits, x + i, m);
        } else {
            mp_convert_f32_to_bf16(x + i, (mp_bf16 *)bits, m);
            mp_convert_bf16_to_f32((const mp_bf16 *)bits, x + i, m);
        }
    }
}

/* Conversions run on all threads for large tensors: on a many-core CPU a
 * serial conversion of every staged tensor would dominate the step. */
#define PAR_CHUNK ((int64_t)1 << 16)

/* One chunk of mp_load_f32 / mp_store_f32, dtype checked by the caller. */
static void load_chunk(float *dst, const void *src, mp_dtype src_dtype, int64_t n) {
    switch (src_dtype) {
    case MP_DTYPE_F16: mp_convert_f16_to_f32(src, dst, (size_t)n); return;
    case MP_DTYPE_BF16: mp_convert_bf16_to_f32(src, dst, (size_t)n); return;
    case MP_DTYPE_F32:
        if (dst != src) memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MP_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)src)[i];
        return;
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    MP_ASSERT(!"mp_load_f32_known: not a float dtype");
}

static void store_chunk(void *dst, mp_dtype dst_dtype, const float *src, int64_t n) {
    switch (dst_dtype) {
    case MP_DTYPE_F16: mp_convert_f32_to_f16(src, dst, (size_t)n); return;
    case MP_DTYPE_BF16: mp_convert_f32_to_bf16(src, dst, (size_t)n); return;
    case MP_DTYPE_F32:
        if (dst != src) memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case MP_DTYPE_F64:
        for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = src[i];
        return;
    case MP_DTYPE_I32:
    case MP_DTYPE_COUNT: break;
    }
    MP_ASSERT(!"mp_store_f32_known: not a float dtype");
}

/* The checks both directions share: a float dtype, n >= 0, buffers where n > 0. */
static mp_status check_conversion(const char *fn, mp_dtype dtype, const void *dst, const void *src, int64_t n) {
    if (!mp_dtype_traits_of(dtype)->is_float)
        return mp_error(MP_ERR_INVALID_ARG, "%s: dtype %s (%d) is not a float dtype (f32, f16, bf16 or f64)", fn,
                        mp_dtype_name(dtype), (int)dtype);
    if (n < 0) return mp_error(MP_ERR_INVALID_ARG, "%s: n = %lld is negative", fn, (long long)n);
    if (n > 0 && (!dst || !src)) return mp_error(MP_ERR_INVALID_ARG, "%s: null %s", fn, !dst ? "dst" : "src");
    return MP_OK;
}

void mp_load_f32_known(float *dst, const void *src, mp_dtype src_dtype, int64_t n) {
    const size_t esz = mp_dtype_size(src_dtype);
#pragma omp parallel for schedule(static) if (n > 2 * PAR_CHUNK)
    for (int64_t i = 0; i < n; i += PAR_CHUNK)
        load_chunk(dst + i, (const char *)src + (size_t)i * esz, src_dtype, n - i < PAR_CHUNK ? n - i : PAR_CHUNK);
}

void mp_store_f32_known(void *dst, mp_dtype dst_dtype, const float *src, int64_t n) {
    const size_t esz = mp_dtype_size(dst_dtype);
#pragma omp parallel for schedule(static) if (n > 2 * PAR_CHUNK)
    for (int64_t i = 0; i < n; i += PAR_CHUNK)
        store_chunk((char *)dst + (size_t)i * esz, dst_dtype, src + i, n - i < PAR_CHUNK ? n - i : PAR_CHUNK);
}

mp_status mp_load_f32(float *dst, const void *src, mp_dtype src_dtype, int64_t n) {
    MP_TRY(check_conversion("mp_load_f32", src_dtype, dst, src, n));
    mp_load_f32_known(dst, src, src_dtype, n);
    return MP_OK;
}

mp_status mp_store_f32(void *dst, mp_dtype dst_dtype, const float *src, int64_t n) {
    MP_TRY(check_conversion("mp_store_f32", dst_dtype, dst, src, n));
    mp_store_f32_known(dst, dst_dtype, src, n);
    return MP_OK;
}
