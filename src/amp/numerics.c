/* numerics.c — one tensor's numerics statistics (mixprec/numerics.h) in one
 * pass: every value is classified by comparing its magnitude with the exact
 * rounding boundaries of fp16 and bf16 (all of them f32 numbers), and counted
 * in its octave. f16/bf16 tensors are widened in chunks first (exactly). */
#include <math.h>
#include <string.h>

#include "core/error.h"

/* Rounding boundaries (round to nearest, ties to even) of |x|:
 *   overflow:  |x| >= max + half an ulp of max (the tie rounds to inf, max's
 *              mantissa being odd)
 *   underflow: |x| <= half the smallest subnormal (the tie rounds to 0)
 *   subnormal: below the smallest normal minus half a subnormal ulp (the tie
 *              rounds up to the normal, whose mantissa is even) */
typedef struct {
    float overflow_at, underflow_to, normal_from;
} bounds;

static bounds format_bounds(int f) {
    if (f == MP_NUMERICS_FP16) return (bounds){65520.0f, 0x1p-25f, 0x1p-14f - 0x1p-25f};
    return (bounds){0x1.ffp127f, 0x1p-134f, 0x1p-126f - 0x1p-134f};
}

/* floor(log2 a) of a finite a > 0 given as f32 bits. */
static int octave(uint32_t bits) {
    const int e = (int)(bits >> 23);
    if (e) return e - 127;
    return -150 + (32 - __builtin_clz(bits)); /* subnormal: mantissa m, a = m * 2^-149 */
}

static void add_values(mp_tensor_stats *s, const float *x, int64_t n, const bounds *b) {
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (isnan(a)) {
            s->nan++;
            continue;
        }
        if (isinf(a)) {
            s->inf++;
            continue;
        }
        if (a == 0.0f) {
            s->zero++;
            continue;
        }
        if (a > s->amax) s->amax = a;
        if (s->amin == 0 || a < s->amin) s->amin = a;
        uint32_t bits;
        memcpy(&bits, &a, sizeof bits);
        s->hist[octave(bits) - MP_NUMERICS_HIST_MIN]++;
        for (int f = 0; f < MP_NUMERICS_FORMATS; f++) {
            if (a >= b[f].overflow_at) s->overflow[f]++;
            else if (a <= b[f].underflow_to) s->underflow[f]++;
            else if (a < b[f].normal_from) s->subnormal[f]++;
        }
    }
}

static void merge(mp_tensor_stats *into, const mp_tensor_stats *s) {
    into->nan += s->nan;
    into->inf += s->inf;
    into->zero += s->zero;
    if (s->amax > into->amax) into->amax = s->amax;
    if (s->amin > 0 && (into->amin == 0 || s->amin < into->amin)) into->amin = s->amin;
    for (int f = 0; f < MP_NUMERICS_FORMATS; f++) {
        into->overflow[f] += s->overflow[f];
        into->underflow[f] += s->underflow[f];
        into->subnormal[f] += s->subnormal[f];
    }
    for (int k = 0; k < MP_NUMERICS_HIST_BINS; k++) into->hist[k] += s->hist[k];
}

#define CHUNK 4096

mp_status mp_tensor_stats_compute(const void *data, mp_dtype dtype, int64_t n, mp_tensor_stats *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "tensor statistics: null output");
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !data)) return mp_error(MP_ERR_INVALID_ARG, "tensor statistics: no data for %lld values", (long long)n);
    if (dtype != MP_DTYPE_F32 && dtype != MP_DTYPE_F16 && dtype != MP_DTYPE_BF16)
        return mp_error(MP_ERR_INVALID_ARG, "tensor statistics: dtype %s is not f32, f16 or bf16", mp_dtype_name(dtype));
    out->numel = n;
    const bounds b[MP_NUMERICS_FORMATS] = {format_bounds(MP_NUMERICS_FP16), format_bounds(MP_NUMERICS_BF16)};
    const size_t esize = mp_dtype_size(dtype);
    const int64_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel if (n > 8 * CHUNK)
    {
        mp_tensor_stats local;
        memset(&local, 0, sizeof local);
        float buf[CHUNK];
#pragma omp for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            const int64_t at = c * CHUNK, m = n - at < CHUNK ? n - at : CHUNK;
            const char *src = (const char *)data + (size_t)at * esize;
            if (dtype == MP_DTYPE_F32) {
                add_values(&local, (const float *)src, m, b);
            } else {
                mp_load_f32(buf, src, dtype, m);
                add_values(&local, buf, m, b);
            }
        }
#pragma omp critical
        merge(out, &local);
    }
    return MP_OK;
}

int64_t mp_tensor_stats_below(const mp_tensor_stats *s, int log2_scale, int below_log2) {
    /* bin k holds [2^(MIN+k), 2^(MIN+k+1)); scaled by 2^log2_scale it lies
     * wholly below 2^below_log2 when MIN + k + 1 + log2_scale <= below_log2 */
    int64_t n = 0;
    for (int k = 0; k < MP_NUMERICS_HIST_BINS; k++)
        if (MP_NUMERICS_HIST_MIN + k + 1 + log2_scale <= below_log2) n += s->hist[k];
    return n;
}
