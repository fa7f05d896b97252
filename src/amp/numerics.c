/* numerics.c — one tensor's numerics statistics (mixprec/numerics.h) in one
 * pass on the CPU: every value is classified by the rule of
 * numerics_bounds.h (the GPU kernel's too) and counted in its octave.
 * f16/bf16 tensors are widened in chunks first (exactly). */
#include <math.h>
#include <string.h>

#include "amp/numerics_bounds.h"
#include "core/dtype_convert.h"
#include "core/error.h"

static void add_values(mp_tensor_stats *s, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t a;
        memcpy(&a, &x[i], sizeof a);
        a &= 0x7fffffffu;
        if (a > MP_NB_F32_INF) {
            s->nan++;
            continue;
        }
        if (a == MP_NB_F32_INF) {
            s->inf++;
            continue;
        }
        if (a == 0) {
            s->zero++;
            continue;
        }
        const double v = fabsf(x[i]);
        if (v > s->amax) s->amax = v;
        if (s->amin == 0 || v < s->amin) s->amin = v;
        s->hist[mp_nb_octave(a) - MP_NUMERICS_HIST_MIN]++;
        const mp_nb_class c[MP_NUMERICS_FORMATS] = {mp_nb_classify_fp16(a), mp_nb_classify_bf16(a)};
        for (int f = 0; f < MP_NUMERICS_FORMATS; f++) {
            s->overflow[f] += c[f] == MP_NB_OVERFLOW;
            s->underflow[f] += c[f] == MP_NB_UNDERFLOW;
            s->subnormal[f] += c[f] == MP_NB_SUBNORMAL;
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
                add_values(&local, (const float *)src, m);
            } else {
                mp_load_f32_known(buf, src, dtype, m);
                add_values(&local, buf, m);
            }
        }
#pragma omp critical
        merge(out, &local);
    }
    return MP_OK;
}

int64_t mp_tensor_stats_below(const mp_tensor_stats *s, int log2_scale, int below_log2) {
    /* bin k holds [2^(MIN+k), 2^(MIN+k+1)); scaled by 2^log2_scale it lies
     * wholly below 2^below_log2 when MIN + k + 1 + log2_scale <= below_log2
     * (in int64_t: any two ints, INT_MAX and INT_MIN too, without overflow) */
    if (!s) return 0;
    int64_t n = 0;
    for (int k = 0; k < MP_NUMERICS_HIST_BINS; k++)
        if ((int64_t)MP_NUMERICS_HIST_MIN + k + 1 + log2_scale <= below_log2) n += s->hist[k];
    return n;
}
