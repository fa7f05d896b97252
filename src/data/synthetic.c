/* synthetic.c — deterministic, learnable image data: every (class, channel)
 * has a smooth sinusoidal pattern; a sample is its class pattern plus
 * near-Gaussian noise, clamped to [0, 1]. Sample i depends only on (seed, i). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "core/rng.h"
#include "data/dataset.h"

#define SYN_MAX_N (1 << 24)
#define SYN_MAX_C 64
#define SYN_MAX_HW 4096
#define SYN_MAX_VALUES (1ll << 30)
#define SYN_MAX_TABLE (1ll << 26) /* pattern tables: classes * c * 2 * (h + w) floats */
#define SYN_NOISE 0.2
#define SYN_AMPLITUDE 0.3
#define SYN_KEY_PATTERN 0x5EED0001ull
#define SYN_KEY_LABEL 0x5EED0002ull

typedef struct {
    float fy, fx, phase, offset;
} syn_pattern;

static mp_status syn_check(const char *what, int v, int max) {
    if (v < 1 || v > max)
        return mp_error(MP_ERR_INVALID_ARG, "synthetic dataset: %s = %d is out of range [1, %d]", what, v, max);
    return MP_OK;
}

mp_status mp_dataset_synthetic(int n, int c, int h, int w, int classes, uint64_t seed, mp_dataset *out) {
    memset(out, 0, sizeof *out);
    MP_TRY(syn_check("n", n, SYN_MAX_N));
    MP_TRY(syn_check("c", c, SYN_MAX_C));
    MP_TRY(syn_check("h", h, SYN_MAX_HW));
    MP_TRY(syn_check("w", w, SYN_MAX_HW));
    MP_TRY(syn_check("classes", classes, MP_DATASET_MAX_CLASSES));
    long long per = (long long)c * h * w;
    if ((long long)n * per > SYN_MAX_VALUES)
        return mp_error(MP_ERR_INVALID_ARG,
                        "synthetic dataset: %d x %d x %d x %d = %lld values is more than the limit %lld", n, c,
                        h, w, (long long)n * per, SYN_MAX_VALUES);
    if ((long long)classes * c * 2 * (h + w) > SYN_MAX_TABLE)
        return mp_error(MP_ERR_INVALID_ARG,
                        "synthetic dataset: %d classes x %d channels of %d x %d patterns is too large (limit %lld "
                        "table values)",
                        classes, c, h, w, (long long)SYN_MAX_TABLE);

    MP_TRY(mp_host_mem_check((size_t)n * per * sizeof(float), NULL, "the synthetic dataset's %d samples of %dx%dx%d", n,
                             c, h, w));
    syn_pattern *pat = malloc((size_t)classes * c * sizeof *pat);
    int *perm = malloc((size_t)classes * sizeof *perm);
    out->images = malloc((size_t)n * per * sizeof(float));
    out->labels = malloc((size_t)n * sizeof(int32_t));
    if (!pat || !perm || !out->images || !out->labels) {
        free(pat);
        free(perm);
        mp_dataset_free(out);
        return mp_error(MP_ERR_NOMEM, "synthetic dataset: out of memory for %d samples of %d x %d x %d", n, c, h, w);
    }
    mp_rng r;
    mp_rng_seed(&r, mp_hash64(seed, SYN_KEY_PATTERN));
    for (int k = 0; k < classes * c; k++) {
        pat[k].fy = (float)((0.5 + 2.0 * mp_rng_uniform(&r)) * (mp_rng_below(&r, 2) ? 1 : -1));
        pat[k].fx = (float)((0.5 + 2.0 * mp_rng_uniform(&r)) * (mp_rng_below(&r, 2) ? 1 : -1));
        pat[k].phase = (float)(6.283185307179586 * mp_rng_uniform(&r));
        pat[k].offset = (float)(0.3 * mp_rng_uniform(&r) - 0.15);
    }
    /* Labels: each block of `classes` consecutive samples is a permutation. */
    for (int b0 = 0; b0 < n; b0 += classes) {
        mp_rng_seed(&r, mp_hash64(seed ^ SYN_KEY_LABEL, (uint64_t)(b0 / classes)));
        for (int k = 0; k < classes; k++) perm[k] = k;
        for (int k = classes - 1; k > 0; k--) {
            int j = (int)mp_rng_below(&r, (uint64_t)k + 1), t = perm[k];
            perm[k] = perm[j];
            perm[j] = t;
        }
        for (int k = 0; k < classes && b0 + k < n; k++) out->labels[b0 + k] = perm[k];
    }
    /* sin(a(y) + b(x)) = sin a cos b + cos a sin b, with the four factors
     * tabulated per (class, channel): no trigonometry per pixel. */
    const double two_pi = 6.283185307179586;
    float *tab = malloc((size_t)classes * c * 2 * (h + w) * sizeof(float));
    if (!tab) {
        free(pat);
        free(perm);
        mp_dataset_free(out);
        return mp_error(MP_ERR_NOMEM, "synthetic dataset: out of memory for the class patterns");
    }
    for (int k = 0; k < classes * c; k++) {
        float *t = tab + (size_t)k * 2 * (h + w); /* sin a (h), cos a (h), sin b (w), cos b (w) */
        for (int y = 0; y < h; y++) {
            double a = two_pi * pat[k].fy * y / h + pat[k].phase;
            t[y] = (float)sin(a);
            t[h + y] = (float)cos(a);
        }
        for (int x = 0; x < w; x++) {
            double b = two_pi * pat[k].fx * x / w;
            t[2 * h + x] = (float)cos(b);
            t[2 * h + w + x] = (float)sin(b);
        }
    }
    /* Samples are independent (own RNG from (seed, i)): any thread split gives the same data. */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        mp_rng rs;
        mp_rng_seed(&rs, mp_hash64(seed, (uint64_t)i + 1));
        float *img = out->images + (size_t)i * per; // (c, h, w)
        for (int ch = 0; ch < c; ch++) {
            int k = out->labels[i] * c + ch;
            const float *t = tab + (size_t)k * 2 * (h + w);
            float base = 0.5f + pat[k].offset;
            for (int y = 0; y < h; y++) {
                float *row = img + ((size_t)ch * h + y) * w;
                float sa = (float)SYN_AMPLITUDE * t[y], ca = (float)SYN_AMPLITUDE * t[h + y];
                for (int x = 0; x < w; x++) {
                    /* Noise: sum of four 16-bit uniforms from one draw, scaled to
                     * unit variance (near-Gaussian, cheap). */
                    uint64_t u = mp_rng_next(&rs);
                    float z = ((float)(u & 0xFFFF) + (float)(u >> 16 & 0xFFFF) + (float)(u >> 32 & 0xFFFF) +
                               (float)(u >> 48) - 131070.0f) * (1.0f / 37837.23f);
                    float v = base + sa * t[2 * h + x] + ca * t[2 * h + w + x] + (float)SYN_NOISE * z;
                    row[x] = v < 0 ? 0 : v > 1 ? 1 : v;
                }
            }
        }
    }
    free(tab);
    free(pat);
    free(perm);
    out->n = n;
    out->c = c;
    out->h = h;
    out->w = w;
    out->classes = classes;
    mp_dataset_set_source(out, "synthetic(n=%d, c=%d, h=%d, w=%d, classes=%d, seed=%llu)", n, c, h, w, classes,
                          (unsigned long long)seed);
    return MP_OK;
}
