/* sgd.c — the SGD update of one fp32 tensor, as torch.optim.SGD with
 * dampening 0: L2 weight decay added to the gradient, an optional momentum
 * buffer (zeroed at creation, so it is the gradient itself after the first
 * step) and Nesterov momentum.
 * Memory-bound: one vectorized pass, split over OpenMP threads when large. */
#include "optim/optim.h"

#include "core/error.h"

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
