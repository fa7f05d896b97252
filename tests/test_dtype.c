/* test_dtype.c — f16/bf16 conversions: all 2^16 patterns of each format,
 * tens of millions of f32 patterns against an independent double-arithmetic
 * reference (explicit tie handling), every array path of this CPU (and the
 * portable one) bit-identical to the scalar functions at odd lengths and
 * unaligned pointers, and the scalar functions against the F16C / AVX-512
 * BF16 instructions themselves where the CPU has them. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "mixprec.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define T_X86 1
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
#define T_AVX512BF16 1
#endif
#endif

#define CHUNK (1u << 20)     /* random inputs per chunk */
/* 24 Mi random f32 patterns in all (~3.5 s optimized); a sanitizer or -O0
 * build, there for memory errors, takes 6 Mi to stay inside its time. */
#if defined(__SANITIZE_ADDRESS__) || !defined(__OPTIMIZE__)
#define NCHUNKS 6
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NCHUNKS 6
#endif
#endif
#ifndef NCHUNKS
#define NCHUNKS 24
#endif
#define SHOW 5               /* mismatches printed per category */

static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* Mismatch counting: print the first few, then one CHECK per category. */
typedef struct {
    const char *what;
    long bad, total;
} tally;
static void tally_add(tally *t, int ok, uint32_t in, uint32_t got, uint32_t want) {
    t->total++;
    if (ok) return;
    if (t->bad++ < SHOW)
        fprintf(stderr, "  %s: input 0x%08x got 0x%08x want 0x%08x\n", t->what, in, got, want);
}
#define TALLY_CHECK(t) CHECK((t).bad == 0, "%s: %ld of %ld mismatched", (t).what, (t).bad, (t).total)

/* ---- independent references (double arithmetic) ------------------------- */

/* 2^k for |k| < 1023, built from its bits (ldexp is the slow part otherwise). */
static double pow2(int k) {
    uint64_t b = (uint64_t)(1023 + k) << 52;
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* Round |a| (finite, > 0) to a multiple of 2^qexp, ties to even. Products
 * with powers of two are exact here (no double under/overflow). */
static double round_to_quantum(double a, int qexp) {
    double n = a * pow2(-qexp);
    double fl = floor(n), frac = n - fl;
    if (frac > 0.5 || (frac == 0.5 && fl != 2.0 * floor(fl * 0.5))) fl += 1.0; /* tie: to even */
    return fl * pow2(qexp);
}

/* Generic binary format with p significant bits, minimum normal exponent
 * emin, maximum finite value maxv, exponent bias, mbits stored bits. */
typedef struct {
    int p, emin, bias, mbits;
    double maxv;
} fmt;
static const fmt F16 = {11, -14, 15, 10, 65504.0};
static const fmt BF16 = {8, -126, 127, 7, 0x1.FEp127};

static uint16_t ref_encode(const fmt *f, double r) { /* r >= 0 representable */
    if (r < ldexp(1.0, f->emin)) return (uint16_t)ldexp(r, -(f->emin - f->p + 1));
    int e;
    double m = frexp(r, &e); /* r = m 2^e, m in [0.5, 1) */
    uint16_t mant = (uint16_t)ldexp(m * 2.0 - 1.0, f->mbits);
    return (uint16_t)(((e - 1 + f->bias) << f->mbits) | mant);
}

static double ref_decode(const fmt *f, uint16_t h, int *is_nan) {
    int emax_field = (1 << (15 - f->mbits)) - 1;
    int e = (h >> f->mbits) & emax_field;
    int m = h & ((1 << f->mbits) - 1);
    double s = (h & 0x8000) ? -1.0 : 1.0;
    *is_nan = 0;
    if (e == emax_field) {
        if (m) *is_nan = 1;
        return s * INFINITY;
    }
    if (e == 0) return s * ldexp(m, f->emin - f->mbits);
    return s * ldexp((double)((1 << f->mbits) + m), e - f->bias - f->mbits);
}

/* f32 -> format, non-NaN x. */
static uint16_t ref_round(const fmt *f, float x) {
    double d = x;
    uint16_t sign = signbit(d) ? 0x8000 : 0;
    double a = fabs(d);
    uint16_t inf = (uint16_t)(((1 << (15 - f->mbits)) - 1) << f->mbits);
    if (isinf(a)) return sign | inf;
    if (a == 0.0) return sign;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int qexp = (e - 1 >= f->emin) ? e - 1 - (f->p - 1) : f->emin - (f->p - 1);
    double r = round_to_quantum(a, qexp);
    if (r > f->maxv) return sign | inf; /* rounded (unbounded exponent) past the max */
    return sign | ref_encode(f, r);
}

/* The documented NaN rules (checked against the hardware where present). */
static uint16_t nan_f32_to_f16(uint32_t u) {
    return (uint16_t)(((u >> 16) & 0x8000) | 0x7E00 | ((u >> 13) & 0x3FF));
}
static uint16_t nan_f32_to_bf16(uint32_t u) { return (uint16_t)((u >> 16) | 0x40); }
static uint32_t nan_f16_to_f32(uint16_t h) {
    return ((uint32_t)(h & 0x8000) << 16) | 0x7FC00000u | ((uint32_t)(h & 0x3FF) << 13);
}

static int is_nan32(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

/* ---- random f32 patterns that stress rounding ------------------------- */

static uint32_t gen(mp_rng *r) {
    uint64_t x = mp_rng_next(r);
    uint32_t lo = (uint32_t)x, sign = (uint32_t)(x >> 32) & 0x80000000u;
    unsigned kind = (unsigned)(x >> 33) & 15;
    uint32_t mant = lo & 0x7FFFFFu;
    int jitter = (int)((x >> 40) & 7) - 3; /* -3..4 ulps around a constructed point */
    switch (kind) {
    case 0:
    case 1:
    case 2: return lo; /* uniform bit patterns: every exponent equally */
    case 3:
    case 4: { /* exponents where f16 has normals, subnormals, overflow */
        uint32_t e = 100 + (uint32_t)((x >> 44) % 46);
        return sign | (e << 23) | mant;
    }
    case 5:
    case 6: { /* f16 ties (exact halfway) and their neighbours, any f16-relevant exponent */
        uint32_t e = 101 + (uint32_t)((x >> 44) % 43);
        uint32_t s = e >= 113 ? 13 : 126 - e; /* bits dropped from the 24-bit significand */
        uint32_t m = ((e << 23) | mant);
        if (s <= 23) m = (m & ~((1u << s) - 1)) | (1u << (s - 1));
        else m &= 0xFF800000u; /* s = 24: tie is the implicit bit itself */
        return sign | (uint32_t)((int32_t)m + ((x >> 47) & 1 ? jitter : 0));
    }
    case 7:
    case 8: { /* bf16 ties and neighbours, all exponents incl. f32 denormals */
        uint32_t m = (lo & 0x7FFF0000u) | 0x8000u;
        if ((m >> 23) == 0xFF) m &= 0x7F7FFFFFu;
        return sign | (uint32_t)((int32_t)m + ((x >> 47) & 1 ? jitter : 0));
    }
    case 9: { /* generic ties at a random bit position */
        uint32_t k = 1 + (uint32_t)((x >> 44) % 23);
        return (lo & ~((1u << k) - 1)) | (1u << (k - 1));
    }
    case 10:
    case 11: { /* a few ulps around named boundaries */
        static const uint32_t pts[] = {
            0x477FE000u /* 65504 */, 0x477FF000u /* 65520 */, 0x47800000u /* 65536 */,
            0x38800000u /* 2^-14 */, 0x387FC000u /* largest f16 subnormal */,
            0x387FE000u /* its tie with 2^-14 */, 0x33800000u /* 2^-24 */, 0x33000000u /* 2^-25 */,
            0x33C00000u /* 1.5 2^-24 */, 0x7F7FFFFFu /* FLT_MAX */, 0x7F7F8000u /* bf16 overflow tie */,
            0x00800000u /* FLT_MIN */, 0x00000000u, 0x7F800000u /* inf */, 0x3F800000u /* 1 */,
            0x3F808000u, 0x3F818000u, 0x00008000u, 0x00018000u, 0x007F8000u};
        uint32_t p = pts[(x >> 44) % (sizeof pts / sizeof pts[0])];
        return sign | (uint32_t)((int32_t)p + jitter);
    }
    case 12: /* f32 denormals and the smallest normals */
        return sign | (lo & 0x01FFFFFFu);
    case 13: /* NaN and inf: exponent all ones, any mantissa (0 sometimes) */
        return sign | 0x7F800000u | ((x >> 45) & 1 ? mant : 0);
    default: return lo;
    }
}

/* ---- hardware reference conversions (independent of the library) ------ */
#ifdef T_X86
__attribute__((target("avx,f16c"))) static void hw_f32_to_f16(const float *s, uint16_t *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm_storel_epi64((__m128i *)(void *)(d + i), _mm_cvtps_ph(_mm_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) {
        __m128i h = _mm_cvtps_ph(_mm_set1_ps(s[i]), _MM_FROUND_TO_NEAREST_INT);
        d[i] = (uint16_t)_mm_extract_epi16(h, 0);
    }
}
__attribute__((target("avx,f16c"))) static void hw_f16_to_f32(const uint16_t *s, float *d, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(d + i, _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)(s + i))));
    for (; i < n; i++) d[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_set1_epi16((short)s[i])));
}
#ifdef T_AVX512BF16
__attribute__((target("avx512f,avx512bf16"))) static void hw_f32_to_bf16(const float *s, uint16_t *d,
                                                                          size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(void *)(d + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(s + i)));
    for (; i < n; i++) {
        float t[16] = {s[i]};
        uint16_t o[16];
        _mm256_storeu_si256((__m256i *)(void *)o, (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(t)));
        d[i] = o[0];
    }
}
#endif
#endif

/* ---- the checks ---------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Hand-written anchors: value, f16 bits, bf16 bits. */
static void check_anchors(void) {
    static const struct { uint32_t in; uint16_t f16, bf16; } a[] = {
        {0x00000000u, 0x0000, 0x0000}, {0x80000000u, 0x8000, 0x8000},
        {0x7F800000u, 0x7C00, 0x7F80}, {0xFF800000u, 0xFC00, 0xFF80},
        {0x3F800000u, 0x3C00, 0x3F80}, /* 1 */
        {0x477FE000u, 0x7BFF, 0x4780}, /* 65504 */
        {0x477FEFFFu, 0x7BFF, 0x4780}, /* just below 65520 */
        {0x477FF000u, 0x7C00, 0x4780}, /* 65520 -> inf */
        {0x7F7FFFFFu, 0x7C00, 0x7F80}, /* FLT_MAX: f16 inf, bf16 rounds past max -> inf */
        {0x7F7F7FFFu, 0x7C00, 0x7F7F}, /* just below the bf16 overflow tie */
        {0x7F7F8000u, 0x7C00, 0x7F80}, /* bf16 overflow tie -> inf */
        {0x33800000u, 0x0001, 0x3380}, /* 2^-24: smallest f16 subnormal */
        {0x33000000u, 0x0000, 0x3300}, /* 2^-25: tie -> 0 (even) */
        {0x33000001u, 0x0001, 0x3300}, /* just above the tie */
        {0x33C00000u, 0x0002, 0x33C0}, /* 1.5 * 2^-24 -> 2 (even) */
        {0x34200000u, 0x0002, 0x3420}, /* 2.5 * 2^-24 -> 2 (even) */
        {0x387FE000u, 0x0400, 0x3880}, /* tie between largest subnormal and 2^-14 -> 2^-14 */
        {0x3F808000u, 0x3C04, 0x3F80}, /* 1 + 2^-8: bf16 tie -> even */
        {0x3F818000u, 0x3C0C, 0x3F82}, /* 1 + 3 * 2^-8: bf16 tie -> up to even */
        {0x00000001u, 0x0000, 0x0000}, /* smallest f32 denormal */
        {0x00008000u, 0x0000, 0x0000}, /* f32 denormal bf16 tie -> 0 */
        {0x00018000u, 0x0000, 0x0002}, /* f32 denormal bf16 tie -> 2 */
        {0x807FFFFFu, 0x8000, 0x8080}, /* largest denormal rounds to -FLT_MIN in bf16 */
        {0x7F800001u, 0x7E00, 0x7FC0}, /* signalling NaN, tiny payload */
        {0x7F802000u, 0x7E01, 0x7FC0}, /* payload bit 13 survives in f16 */
        {0xFFA00000u, 0xFF00, 0xFFE0}, /* negative sNaN with payload */
        {0x7FC00000u, 0x7E00, 0x7FC0}, /* default quiet NaN */
        {0x7FFFFFFFu, 0x7FFF, 0x7FFF},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        uint16_t h = mp_f32_to_f16(bitsf(a[i].in)).bits, b = mp_f32_to_bf16(bitsf(a[i].in)).bits;
        if (h != a[i].f16 || b != a[i].bf16) {
            bad++;
            fprintf(stderr, "  anchor 0x%08x: f16 0x%04x (want 0x%04x) bf16 0x%04x (want 0x%04x)\n",
                    a[i].in, h, a[i].f16, b, a[i].bf16);
        }
    }
    CHECK(bad == 0, "%d anchors wrong", bad);
    CHECK(fbits(mp_f16_to_f32((mp_f16){0x7C01})) == 0x7FC02000u, "f16 sNaN -> f32 quiet");
    CHECK(fbits(mp_f16_to_f32((mp_f16){0x0001})) == 0x33800000u, "f16 smallest subnormal");
    CHECK(fbits(mp_f16_to_f32((mp_f16){0x83FF})) == 0xB87FC000u, "f16 largest negative subnormal");
    CHECK(fbits(mp_bf16_to_f32((mp_bf16){0x7F81})) == 0x7F810000u, "bf16 sNaN -> f32 is a shift");
    CHECK(mp_f32_to_f16(FLT_MAX).bits == 0x7C00 && mp_f32_to_bf16(-FLT_MAX).bits == 0xFF80,
          "FLT_MAX overflow");
}

/* All 2^16 f16 and bf16 patterns: decode against ldexp, round trip. */
static void check_exhaustive16(void) {
    tally dec = {"f16->f32 vs reference", 0, 0}, rt = {"f16 round trip", 0, 0};
    tally bdec = {"bf16->f32 vs reference", 0, 0}, brt = {"bf16 round trip", 0, 0};
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        int nan;
        double want = ref_decode(&F16, h, &nan);
        float got = mp_f16_to_f32((mp_f16){h});
        uint32_t gb = fbits(got);
        int ok = nan ? gb == nan_f16_to_f32(h) : ((double)got == want && !!signbit(got) == !!(h & 0x8000));
        tally_add(&dec, ok, h, gb, nan ? nan_f16_to_f32(h) : fbits((float)want));
        uint16_t back = mp_f32_to_f16(got).bits, wback = nan ? (uint16_t)(h | 0x200) : h;
        tally_add(&rt, back == wback, h, back, wback);

        want = ref_decode(&BF16, h, &nan);
        got = mp_bf16_to_f32((mp_bf16){h});
        gb = fbits(got);
        ok = gb == ((uint32_t)h << 16) &&
             (nan ? isnan(got) : ((double)got == want && !!signbit(got) == !!(h & 0x8000)));
        tally_add(&bdec, ok, h, gb, (uint32_t)h << 16);
        back = mp_f32_to_bf16(got).bits;
        wback = nan ? (uint16_t)(h | 0x40) : h;
        tally_add(&brt, back == wback, h, back, wback);
    }
    TALLY_CHECK(dec);
    TALLY_CHECK(rt);
    TALLY_CHECK(bdec);
    TALLY_CHECK(brt);
}

typedef struct {
    const mp_cvt_kernels *k[MP_CVT_PATH_COUNT]; /* NULL where not on this CPU */
    tally f16[MP_CVT_PATH_COUNT], f16r[MP_CVT_PATH_COUNT], bf[MP_CVT_PATH_COUNT], bfr[MP_CVT_PATH_COUNT];
    tally pub_f16, pub_f16r, pub_bf, pub_bfr;
} paths;

/* Buffers with room for offsets; out16/outf hold the array results. */
static float *g_src, *g_outf;
static uint16_t *g_out16, *g_ref16, *g_refbf, *g_in16;
static uint32_t *g_w16r, *g_wbfr; /* scalar f16/bf16 -> f32 bits */

/* Run every array path on n inputs at src offset so / dst offset dof and
 * compare with the scalar results already in g_ref16 / g_refbf. */
static void arrays_f32_in(paths *P, const float *src, size_t n, size_t dof) {
    for (int p = 0; p < MP_CVT_PATH_COUNT; p++) {
        const mp_cvt_kernels *k = P->k[p];
        if (!k) continue;
        if (k->f32_to_f16) {
            k->f32_to_f16(src, (mp_f16 *)(g_out16 + dof), n);
            for (size_t i = 0; i < n; i++)
                tally_add(&P->f16[p], g_out16[dof + i] == g_ref16[i], fbits(src[i]), g_out16[dof + i], g_ref16[i]);
        }
        if (k->f32_to_bf16) {
            k->f32_to_bf16(src, (mp_bf16 *)(g_out16 + dof), n);
            for (size_t i = 0; i < n; i++)
                tally_add(&P->bf[p], g_out16[dof + i] == g_refbf[i], fbits(src[i]), g_out16[dof + i], g_refbf[i]);
        }
    }
    mp_convert_f32_to_f16(src, (mp_f16 *)(g_out16 + dof), n);
    for (size_t i = 0; i < n; i++)
        tally_add(&P->pub_f16, g_out16[dof + i] == g_ref16[i], fbits(src[i]), g_out16[dof + i], g_ref16[i]);
    mp_convert_f32_to_bf16(src, (mp_bf16 *)(g_out16 + dof), n);
    for (size_t i = 0; i < n; i++)
        tally_add(&P->pub_bf, g_out16[dof + i] == g_refbf[i], fbits(src[i]), g_out16[dof + i], g_refbf[i]);
}

static void arrays_16_in(paths *P, const uint16_t *src, size_t n, size_t dof) {
    for (size_t i = 0; i < n; i++) { /* the scalar results, once */
        g_w16r[i] = fbits(mp_f16_to_f32((mp_f16){src[i]}));
        g_wbfr[i] = fbits(mp_bf16_to_f32((mp_bf16){src[i]}));
    }
    for (int p = 0; p <= MP_CVT_PATH_COUNT; p++) { /* COUNT = the public functions */
        const mp_cvt_kernels *k = p < MP_CVT_PATH_COUNT ? P->k[p] : NULL;
        if (p < MP_CVT_PATH_COUNT && !k) continue;
        for (int conv = 0; conv < 2; conv++) {
            tally *t;
            if (conv == 0 && !k) {
                mp_convert_f16_to_f32((const mp_f16 *)src, g_outf + dof, n);
                t = &P->pub_f16r;
            } else if (conv == 0 && k->f16_to_f32) {
                k->f16_to_f32((const mp_f16 *)src, g_outf + dof, n);
                t = &P->f16r[p];
            } else if (conv == 1 && !k) {
                mp_convert_bf16_to_f32((const mp_bf16 *)src, g_outf + dof, n);
                t = &P->pub_bfr;
            } else if (conv == 1 && k->bf16_to_f32) {
                k->bf16_to_f32((const mp_bf16 *)src, g_outf + dof, n);
                t = &P->bfr[p];
            } else {
                continue;
            }
            const uint32_t *w = conv == 0 ? g_w16r : g_wbfr;
            for (size_t i = 0; i < n; i++) tally_add(t, fbits(g_outf[dof + i]) == w[i], src[i], fbits(g_outf[dof + i]), w[i]);
        }
    }
}

/* Odd lengths, every src/dst misalignment, and no write outside [0, n). */
static void check_tails(paths *P) {
    static const size_t lens[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33, 47, 63, 64, 65,
                                  127, 129, 1023, 1025, 4099};
    enum { MAXN = 4099, PAD = 32 };
    static float src[MAXN + 8], outf[MAXN + 2 * PAD];
    static uint16_t src16[MAXN + 8], out16[MAXN + 2 * PAD], w16[MAXN], wbf[MAXN];
    mp_rng r;
    mp_rng_seed(&r, 99);
    for (size_t i = 0; i < MAXN + 8; i++) {
        src[i] = bitsf(gen(&r));
        src16[i] = (uint16_t)mp_rng_next(&r);
    }
    int bad = 0, clobber = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        for (size_t so = 0; so < 4; so++) {
            for (size_t i = 0; i < n; i++) {
                w16[i] = mp_f32_to_f16(src[so + i]).bits;
                wbf[i] = mp_f32_to_bf16(src[so + i]).bits;
            }
            for (size_t dof = 0; dof < 3; dof++) {
                for (int p = 0; p <= MP_CVT_PATH_COUNT; p++) { /* COUNT = the public functions */
                    const mp_cvt_kernels *k = p < MP_CVT_PATH_COUNT ? P->k[p] : NULL;
                    if (p < MP_CVT_PATH_COUNT && !k) continue;
                    for (int conv = 0; conv < 4; conv++) {
                        memset(out16, 0xA5, sizeof out16);
                        memset(outf, 0xA5, sizeof outf);
                        uint16_t *d16 = out16 + PAD + dof;
                        float *df = outf + PAD + dof;
                        const mp_f16 *s16 = (const mp_f16 *)(src16 + so);
                        int ran = 1;
                        if (conv == 0) {
                            if (k && k->f32_to_f16) k->f32_to_f16(src + so, (mp_f16 *)d16, n);
                            else if (!k) mp_convert_f32_to_f16(src + so, (mp_f16 *)d16, n);
                            else ran = 0;
                        } else if (conv == 1) {
                            if (k && k->f32_to_bf16) k->f32_to_bf16(src + so, (mp_bf16 *)d16, n);
                            else if (!k) mp_convert_f32_to_bf16(src + so, (mp_bf16 *)d16, n);
                            else ran = 0;
                        } else if (conv == 2) {
                            if (k && k->f16_to_f32) k->f16_to_f32(s16, df, n);
                            else if (!k) mp_convert_f16_to_f32(s16, df, n);
                            else ran = 0;
                        } else {
                            if (k && k->bf16_to_f32) k->bf16_to_f32((const mp_bf16 *)s16, df, n);
                            else if (!k) mp_convert_bf16_to_f32((const mp_bf16 *)s16, df, n);
                            else ran = 0;
                        }
                        if (!ran) continue;
                        for (size_t i = 0; i < n; i++) {
                            uint32_t got, want;
                            if (conv == 0) got = d16[i], want = w16[i];
                            else if (conv == 1) got = d16[i], want = wbf[i];
                            else if (conv == 2)
                                got = fbits(df[i]), want = fbits(mp_f16_to_f32((mp_f16){src16[so + i]}));
                            else got = fbits(df[i]), want = (uint32_t)src16[so + i] << 16;
                            if (got != want && bad++ < SHOW)
                                fprintf(stderr, "  tail path %d conv %d n %zu so %zu do %zu i %zu: 0x%x vs 0x%x\n",
                                        p, conv, n, so, dof, i, got, want);
                        }
                        /* guard words before and after the written range */
                        const unsigned char *g = conv < 2 ? (const unsigned char *)out16 : (const unsigned char *)outf;
                        size_t esz = conv < 2 ? 2 : 4, lo = (PAD + dof) * esz, hi = (PAD + dof + n) * esz;
                        size_t tot = (MAXN + 2 * PAD) * esz;
                        for (size_t b = 0; b < tot; b++)
                            if ((b < lo || b >= hi) && g[b] != 0xA5) {
                                if (clobber++ < SHOW)
                                    fprintf(stderr, "  path %d conv %d n %zu wrote outside at byte %zu\n", p,
                                            conv, n, b);
                                break;
                            }
                    }
                }
            }
        }
    }
    CHECK(bad == 0, "%d tail mismatches", bad);
    CHECK(clobber == 0, "%d writes outside the destination", clobber);
}

/* mp_load_f32 / mp_store_f32: every float dtype both ways (f64 too), and a
 * dtype that is none, a negative n or a null buffer refused with the
 * destination untouched (they aborted the process before). */
static void check_load_store(void) {
    const float x[3] = {1.5f, -2.25f, 65536.f};
    double d[3] = {0};
    float back[3] = {0};
    CHECK(mp_store_f32(d, MP_DTYPE_F64, x, 3) == MP_OK && d[0] == 1.5 && d[1] == -2.25 && d[2] == 65536.0,
          "f32 -> f64: %g %g %g", d[0], d[1], d[2]);
    CHECK(mp_load_f32(back, d, MP_DTYPE_F64, 3) == MP_OK && !memcmp(back, x, sizeof x), "f64 -> f32");
    mp_bf16 b[3];
    CHECK(mp_store_f32(b, MP_DTYPE_BF16, x, 3) == MP_OK && mp_load_f32(back, b, MP_DTYPE_BF16, 3) == MP_OK &&
              !memcmp(back, x, sizeof x), "bf16 both ways");
    const mp_dtype bad[] = {MP_DTYPE_I32, MP_DTYPE_COUNT, (mp_dtype)-1, (mp_dtype)1000};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float keep[3] = {7, 7, 7};
        int32_t ikeep[3] = {7, 7, 7};
        CHECK_ERR(mp_load_f32(keep, ikeep, bad[k], 3), MP_ERR_INVALID_ARG, "mp_load_f32: dtype", "is not a float");
        CHECK_ERR(mp_store_f32(ikeep, bad[k], x, 3), MP_ERR_INVALID_ARG, "mp_store_f32: dtype", "is not a float");
        CHECK(keep[0] == 7 && keep[2] == 7 && ikeep[0] == 7 && ikeep[2] == 7, "a refused call wrote (dtype %d)",
              (int)bad[k]);
    }
    CHECK_ERR(mp_load_f32(back, d, MP_DTYPE_F32, -1), MP_ERR_INVALID_ARG, "n = -1 is negative");
    CHECK_ERR(mp_store_f32(NULL, MP_DTYPE_F16, x, 3), MP_ERR_INVALID_ARG, "mp_store_f32: null dst");
    CHECK_ERR(mp_load_f32(back, NULL, MP_DTYPE_F16, 3), MP_ERR_INVALID_ARG, "mp_load_f32: null src");
    CHECK(mp_load_f32(NULL, NULL, MP_DTYPE_F16, 0) == MP_OK, "n = 0 with no buffers: %s", mp_last_error());
}

/* MIXPREC_FORCE_SCALAR in a child process that has not resolved the dispatch. */
static void check_force_scalar(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MIXPREC_FORCE_SCALAR", "1", 1);
        const char *name = mp_convert_path_name();
        int ok = strstr(name, "MIXPREC_FORCE_SCALAR") != NULL &&
                 strcmp(name, "f32->f16 portable, f16->f32 portable, f32->bf16 portable, "
                              "bf16->f32 portable (MIXPREC_FORCE_SCALAR)") == 0;
        float x[37];
        mp_f16 h[37];
        mp_bf16 b[37];
        for (int i = 0; i < 37; i++) x[i] = (float)i * 0.37f - 3.1f;
        mp_convert_f32_to_f16(x, h, 37);
        mp_convert_f32_to_bf16(x, b, 37);
        for (int i = 0; i < 37; i++)
            ok &= h[i].bits == mp_f32_to_f16(x[i]).bits && b[i].bits == mp_f32_to_bf16(x[i]).bits;
        if (!ok) fprintf(stderr, "  forced-scalar child: '%s'\n", name);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "MIXPREC_FORCE_SCALAR=1 child failed (status %d)", st);
}

int main(void) {
    double t0 = now();
    check_force_scalar(); /* first: the child must not inherit a resolved dispatch */

    const mp_cpu_features *cf = mp_cpu_features_get();
    printf("cpu: avx2 %d fma %d f16c %d avx512f %d avx512bw %d avx512_bf16 %d avx512_fp16 %d amx_tile %d amx_bf16 %d\n",
           cf->avx2, cf->fma, cf->f16c, cf->avx512f, cf->avx512bw, cf->avx512_bf16, cf->avx512_fp16, cf->amx_tile,
           cf->amx_bf16);
    printf("paths: %s\n", mp_convert_path_name());
#ifdef T_X86
    __builtin_cpu_init();
    CHECK(cf->avx2 == !!__builtin_cpu_supports("avx2"), "avx2 detection disagrees with the compiler's");
#ifndef __clang__ /* clang 14 does not know "f16c" here */
    CHECK(cf->f16c == !!__builtin_cpu_supports("f16c"), "f16c detection disagrees");
#endif
    CHECK(cf->fma == !!__builtin_cpu_supports("fma"), "fma detection disagrees");
    CHECK(cf->avx512f == !!__builtin_cpu_supports("avx512f"), "avx512f detection disagrees");
    if (cf->f16c && !getenv("MIXPREC_FORCE_SCALAR"))
        CHECK(strstr(mp_convert_path_name(), "f32->f16 f16c, f16->f32 f16c") != NULL, "f16c not dispatched");
#endif

    check_anchors();
    check_exhaustive16();
    check_load_store();

    paths P;
    memset(&P, 0, sizeof P);
    static const char *names[MP_CVT_PATH_COUNT][4] = {
        {"portable f32->f16", "portable f16->f32", "portable f32->bf16", "portable bf16->f32"},
        {"f16c f32->f16", "f16c f16->f32", "-", "-"},
        {"-", "-", "avx2 f32->bf16", "avx2 bf16->f32"},
        {"-", "-", "avx512_bf16 f32->bf16", "-"}};
    for (int p = 0; p < MP_CVT_PATH_COUNT; p++) {
        P.k[p] = mp_cvt_path_kernels((mp_cvt_path)p);
        P.f16[p].what = names[p][0];
        P.f16r[p].what = names[p][1];
        P.bf[p].what = names[p][2];
        P.bfr[p].what = names[p][3];
        printf("path %-12s %s\n", p == 0 ? "portable" : p == 1 ? "f16c" : p == 2 ? "avx2" : "avx512_bf16",
               P.k[p] ? "tested" : "not on this CPU");
    }
    CHECK(P.k[MP_CVT_PORTABLE] != NULL, "portable path missing");
    P.pub_f16.what = "mp_convert_f32_to_f16";
    P.pub_f16r.what = "mp_convert_f16_to_f32";
    P.pub_bf.what = "mp_convert_f32_to_bf16";
    P.pub_bfr.what = "mp_convert_bf16_to_f32";

    size_t cap = CHUNK + 64;
    g_src = malloc(cap * 4);
    g_outf = malloc(cap * 4);
    g_out16 = malloc(cap * 2);
    g_ref16 = malloc(cap * 2);
    g_refbf = malloc(cap * 2);
    g_in16 = malloc(cap * 2);
    g_w16r = malloc(cap * 4);
    g_wbfr = malloc(cap * 4);
    if (!g_src || !g_outf || !g_out16 || !g_ref16 || !g_refbf || !g_in16 || !g_w16r || !g_wbfr) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }

    /* 16-bit inputs: all patterns, through every array path */
    for (size_t off = 0; off < 3; off++) {
        for (uint32_t i = 0; i < 65536; i++) g_in16[off + i] = (uint16_t)i;
        arrays_16_in(&P, g_in16 + off, 65536 - off, (off * 7) % 5);
    }

    tally rf16 = {"f32->f16 vs reference", 0, 0}, rbf = {"f32->bf16 vs reference", 0, 0};
    tally hw16 = {"f32->f16 vs vcvtps2ph", 0, 0}, hw16r = {"f16->f32 vs vcvtph2ps", 0, 0};
    tally hwbf = {"f32->bf16 vs vcvtneps2bf16 (non-denormal)", 0, 0};
    tally hwbfd = {"vcvtneps2bf16 flushes f32 denormals to signed zero", 0, 0};
    tally mx = {"array paths with FTZ|DAZ set", 0, 0};
    (void)hw16, (void)hw16r, (void)hwbf, (void)hwbfd, (void)mx; /* unused off x86 */
    int have_hw_bf16 = 0;
#if defined(T_X86) && defined(T_AVX512BF16)
    have_hw_bf16 = cf->avx512_bf16;
#endif
    long n_ties = 0;
    mp_rng r;
    mp_rng_seed(&r, 20240611);
    for (int c = 0; c < NCHUNKS; c++) {
        size_t so = (size_t)c % 4, dof = (size_t)(c / 4) % 3;
        size_t n = CHUNK - (size_t)c * 3; /* odd and even lengths */
        float *src = g_src + so;
        for (size_t i = 0; i < n; i++) src[i] = bitsf(gen(&r));
        for (size_t i = 0; i < n; i++) {
            uint32_t u = fbits(src[i]);
            g_ref16[i] = mp_f32_to_f16(src[i]).bits;
            g_refbf[i] = mp_f32_to_bf16(src[i]).bits;
            uint16_t w16 = is_nan32(u) ? nan_f32_to_f16(u) : ref_round(&F16, src[i]);
            uint16_t wbf = is_nan32(u) ? nan_f32_to_bf16(u) : ref_round(&BF16, src[i]);
            tally_add(&rf16, g_ref16[i] == w16, u, g_ref16[i], w16);
            tally_add(&rbf, g_refbf[i] == wbf, u, g_refbf[i], wbf);
            if ((u & 0xFFFF) == 0x8000) n_ties++;
        }
        arrays_f32_in(&P, src, n, dof);
        /* f16/bf16 -> f32 arrays on the rounded results (realistic, many NaNs/subnormals) */
        memcpy(g_in16 + so, g_ref16, n * 2);
        arrays_16_in(&P, g_in16 + so, n, dof);
#ifdef T_X86
        if (cf->f16c) {
            hw_f32_to_f16(src, g_out16, n);
            for (size_t i = 0; i < n; i++)
                tally_add(&hw16, g_out16[i] == g_ref16[i], fbits(src[i]), g_out16[i], g_ref16[i]);
            hw_f16_to_f32(g_ref16, g_outf, n); /* g_w16r: the scalar results from arrays_16_in */
            for (size_t i = 0; i < n; i++)
                tally_add(&hw16r, fbits(g_outf[i]) == g_w16r[i], g_ref16[i], fbits(g_outf[i]), g_w16r[i]);
        }
#ifdef T_AVX512BF16
        if (have_hw_bf16) {
            hw_f32_to_bf16(src, g_out16, n);
            for (size_t i = 0; i < n; i++) {
                uint32_t u = fbits(src[i]);
                if ((u & 0x7F800000u) == 0 && (u & 0x7FFFFFu)) { /* f32 denormal */
                    uint16_t w = (uint16_t)((u >> 16) & 0x8000);
                    tally_add(&hwbfd, g_out16[i] == w, u, g_out16[i], w);
                } else {
                    tally_add(&hwbf, g_out16[i] == g_refbf[i], u, g_out16[i], g_refbf[i]);
                }
            }
        }
#endif
        if (c == 0) { /* once: the array paths under FTZ|DAZ give the same bits */
            unsigned csr = _mm_getcsr();
            _mm_setcsr(csr | 0x8040u);
            for (int p = 0; p < MP_CVT_PATH_COUNT; p++) {
                const mp_cvt_kernels *k = P.k[p];
                if (!k) continue;
                if (k->f32_to_f16) {
                    k->f32_to_f16(src, (mp_f16 *)g_out16, n);
                    for (size_t i = 0; i < n; i++)
                        tally_add(&mx, g_out16[i] == g_ref16[i], fbits(src[i]), g_out16[i], g_ref16[i]);
                }
                if (k->f32_to_bf16) {
                    k->f32_to_bf16(src, (mp_bf16 *)g_out16, n);
                    for (size_t i = 0; i < n; i++)
                        tally_add(&mx, g_out16[i] == g_refbf[i], fbits(src[i]), g_out16[i], g_refbf[i]);
                }
                if (k->f16_to_f32) {
                    k->f16_to_f32((const mp_f16 *)g_ref16, g_outf, n);
                    for (size_t i = 0; i < n; i++) {
                        uint32_t w = fbits(mp_f16_to_f32((mp_f16){g_ref16[i]}));
                        tally_add(&mx, fbits(g_outf[i]) == w, g_ref16[i], fbits(g_outf[i]), w);
                    }
                }
                if (k->bf16_to_f32) {
                    k->bf16_to_f32((const mp_bf16 *)g_refbf, g_outf, n);
                    for (size_t i = 0; i < n; i++)
                        tally_add(&mx, fbits(g_outf[i]) == (uint32_t)g_refbf[i] << 16, g_refbf[i],
                                  fbits(g_outf[i]), (uint32_t)g_refbf[i] << 16);
                }
            }
            unsigned after = _mm_getcsr();
            _mm_setcsr(csr);
            CHECK((after & 0x8040u) == 0x8040u, "array paths did not restore MXCSR (0x%x)", after);
        }
#endif
    }
    TALLY_CHECK(rf16);
    TALLY_CHECK(rbf);
    CHECK(n_ties > 100000, "only %ld exact bf16 ties generated", n_ties);
    for (int p = 0; p < MP_CVT_PATH_COUNT; p++) {
        if (!P.k[p]) continue;
        if (P.k[p]->f32_to_f16) TALLY_CHECK(P.f16[p]);
        if (P.k[p]->f16_to_f32) TALLY_CHECK(P.f16r[p]);
        if (P.k[p]->f32_to_bf16) TALLY_CHECK(P.bf[p]);
        if (P.k[p]->bf16_to_f32) TALLY_CHECK(P.bfr[p]);
    }
    TALLY_CHECK(P.pub_f16);
    TALLY_CHECK(P.pub_f16r);
    TALLY_CHECK(P.pub_bf);
    TALLY_CHECK(P.pub_bfr);
#ifdef T_X86
    TALLY_CHECK(mx);
    if (cf->f16c) {
        /* all 2^16 patterns through vcvtph2ps, and back through vcvtps2ph */
        for (uint32_t i = 0; i < 65536; i++) g_in16[i] = (uint16_t)i;
        hw_f16_to_f32(g_in16, g_outf, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            uint32_t w = fbits(mp_f16_to_f32((mp_f16){(uint16_t)i}));
            tally_add(&hw16r, fbits(g_outf[i]) == w, i, fbits(g_outf[i]), w);
        }
        hw_f32_to_f16(g_outf, g_out16, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            uint16_t w = mp_f32_to_f16(g_outf[i]).bits;
            tally_add(&hw16, g_out16[i] == w, fbits(g_outf[i]), g_out16[i], w);
        }
        TALLY_CHECK(hw16);
        TALLY_CHECK(hw16r);
        printf("F16C: scalar == vcvtps2ph on %ld inputs, == vcvtph2ps on %ld\n", hw16.total, hw16r.total);
    } else {
        printf("F16C: not on this CPU, hardware comparison skipped\n");
    }
#endif
    if (have_hw_bf16) {
        TALLY_CHECK(hwbf);
        TALLY_CHECK(hwbfd);
        printf("AVX-512 BF16: scalar == vcvtneps2bf16 on %ld non-denormal inputs; %ld f32 denormals flushed by "
               "the instruction (the library fixes them up)\n",
               hwbf.total, hwbfd.total);
    } else {
        printf("AVX-512 BF16: skipped for hardware (not on this CPU); all other checks ran\n");
    }

    check_tails(&P);

    printf("%d chunks, %ld random f32 patterns, %.2f s\n", NCHUNKS, rf16.total, now() - t0);
    free(g_src);
    free(g_outf);
    free(g_out16);
    free(g_ref16);
    free(g_refbf);
    free(g_in16);
    free(g_w16r);
    free(g_wbfr);
    return test_summary("test_dtype");
}
