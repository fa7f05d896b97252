/* sgd.c — the SGD update of one fp32 tensor, as torch.optim.SGD with
 * dampening 0: L2 weight decay added to the gradient, an optional momentum
 * buffer (zeroed at creation, so it is the gradient itself after the first
 * step) and Nesterov momentum; the buffer optionally rounded to f16/bf16
 * each step (a weight without an fp32 master, as a `.half()` model's).
 * Memory-bound: one vectorized pass, split over OpenMP threads when large;
 * the rounded buffer goes in chunks through mp_round_f32. */
#include "optim/optim.h"

#include "core/error.h"

#define LOW_CHUNK 1024

/* The momentum update with b rounded to nearest even to state_dtype (F16 or
 * BF16) before it is stored and used: per chunk, b = mu*buf + g into buf,
 * buf rounded (mp_round_f32, bit-identical to the scalar RNE and to the
 * GPU's), then the weight from the rounded b. */
static void sgd_low_state(float *restrict param, const float *restrict grad, float *restrict buf, int64_t n,
                          const mp_sgd_hyper *h) {
    const float lr = h->lr, mu = h->momentum, wd = h->weight_decay;
    const bool nesterov = h->nesterov;
#pragma omp parallel for schedule(static) if (n >= MP_OPTIM_PAR_MIN)
    for (int64_t i0 = 0; i0 < n; i0 += LOW_CHUNK) {
        const int64_t m = n - i0 < LOW_CHUNK ? n - i0 : LOW_CHUNK;
        float *restrict p = param + i0, *restrict b = buf + i0;
        const float *restrict gr = grad + i0;
        float g[LOW_CHUNK];
        for (int64_t j = 0; j < m; j++) {
            g[j] = gr[j] + wd * p[j];
            b[j] = mu * b[j] + g[j];
        }
        mp_round_f32(b, m, h->state_dtype);
        for (int64_t j = 0; j < m; j++) p[j] = p[j] - lr * (nesterov ? g[j] + mu * b[j] : b[j]);
    }
}

void mp_sgd_update(float *restrict param, const float *restrict grad, float *restrict buf, int64_t n,
                   const mp_sgd_hyper *h) {
    const float lr = h->lr, mu = h->momentum, wd = h->weight_decay;
    if (mu == 0.0f) {
#pragma omp parallel for simd schedule(static) if (n >= MP_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float p = param[i];
            float g = grad[i] + wd * p;
            param[i] = p - lr * g;
        }
        return;
    }
    MP_ASSERT(buf != NULL);
    if (h->state_dtype != MP_DTYPE_F32) {
        MP_ASSERT(h->state_dtype == MP_DTYPE_F16 || h->state_dtype == MP_DTYPE_BF16);
        sgd_low_state(param, grad, buf, n, h);
        return;
    }
    /* The buffer starts at zero, so the first step gives b = g as in PyTorch. */
    if (h->nesterov) {
#pragma omp parallel for simd schedule(static) if (n >= MP_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float p = param[i];
            float g = grad[i] + wd * p;
            float b = mu * buf[i] + g;
            buf[i] = b;
            param[i] = p - lr * (g + mu * b);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= MP_OPTIM_PAR_MIN)
        for (int64_t i = 0; i < n; i++) {
            float p = param[i];
            float g = grad[i] + wd * p;
            float b = mu * buf[i] + g;
            buf[i] = b;
            param[i] = p - lr * b;
        }
    }
}
