/* adam.c — the Adam / AdamW update of one fp32 tensor, as torch.optim.Adam
 * (L2 weight decay added to the gradient) and torch.optim.AdamW (decoupled:
 * p *= 1 - lr*wd before the step), with bias-corrected moments.
 *
 * Vectorization: with C's errno semantics for sqrtf (the build does not pass
 * -fno-math-errno) GCC will not vectorize a loop that calls it, which made the
 * single-pass loop 3x slower. So the tensor is walked in blocks of MP_ADAM_BLOCK
 * elements: a vectorized pass updates m and v, an SSE/AVX pass takes the square
 * roots (exact IEEE sqrt, like sqrtf), and a vectorized pass updates p. The
 * blocks stay in L1 and are split over OpenMP threads for large tensors. */
#include "optim/optim.h"

#include <math.h>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#define MP_ADAM_BLOCK 256

mp_adam_hyper mp_adam_hyper_at(const mp_optim_opts *o, float lr, int64_t t, bool decay) {
    /* Scalars in double, cast once, as PyTorch computes them in Python. */
    double wd = decay ? (double)o->weight_decay : 0.0;
    double bc1 = 1.0 - pow((double)o->beta1, (double)t);
    double bc2 = 1.0 - pow((double)o->beta2, (double)t);
    mp_adam_hyper h = {
        .beta1 = o->beta1,
        .beta2 = o->beta2,
        .eps = o->eps,
        .l2 = o->kind == MP_OPTIM_ADAM ? (float)wd : 0.0f,
        .decay_mul = o->kind == MP_OPTIM_ADAMW ? (float)(1.0 - (double)lr * wd) : 1.0f,
        .step_size = (float)((double)lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
    };
    return h;
}

/* x[j] = sqrt(x[j]) for j < n. */
static inline void sqrt_inplace(float *x, int n) {
    int j = 0;
#if defined(__AVX__)
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_sqrt_ps(_mm256_loadu_ps(x + j)));
#endif
#if defined(__SSE__)
    for (; j + 4 <= n; j += 4) _mm_storeu_ps(x + j, _mm_sqrt_ps(_mm_loadu_ps(x + j)));
#endif
    for (; j < n; j++) x[j] = sqrtf(x[j]);
}

static void adam_block(float *restrict p, const float *restrict grad, float *restrict m, float *restrict v,
                       int nb, const mp_adam_hyper *h) {
    const float b1c = 1.0f - h->beta1, b2 = h->beta2, b2c = 1.0f - h->beta2;
    const float l2 = h->l2, dm = h->decay_mul, eps = h->eps, ss = h->step_size, bc2s = h->bc2_sqrt;
    float s[MP_ADAM_BLOCK]; /* sqrt(v) */
    for (int j = 0; j < nb; j++) {
        float pj = p[j] * dm;
        float g = grad[j] + l2 * pj;
        float mj = m[j] + b1c * (g - m[j]);
        float vj = b2 * v[j] + b2c * g * g;
        p[j] = pj;
        m[j] = mj;
        v[j] = vj;
        s[j] = vj;
    }
    sqrt_inplace(s, nb);
    for (int j = 0; j < nb; j++) p[j] -= ss * (m[j] / (s[j] / bc2s + eps));
}

void mp_adam_update(float *param, const float *grad, float *m, float *v, int64_t n, const mp_adam_hyper *h) {
    int64_t nblocks = (n + MP_ADAM_BLOCK - 1) / MP_ADAM_BLOCK;
#pragma omp parallel for schedule(static) if (n >= MP_OPTIM_PAR_MIN)
    for (int64_t k = 0; k < nblocks; k++) {
        int64_t i = k * MP_ADAM_BLOCK;
        int nb = n - i < MP_ADAM_BLOCK ? (int)(n - i) : MP_ADAM_BLOCK;
        adam_block(param + i, grad + i, m + i, v + i, nb, h);
    }
}
