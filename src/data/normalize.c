/* normalize.c — per-channel image normalization (normalize.h). */
#include "data/normalize.h"

#include <math.h>

#include "core/error.h"

mp_status mp_normalization_check(const float *mean, const float *std, int channels, const char *who) {
    for (int c = 0; c < channels; c++) {
        if (mean && !isfinite(mean[c]))
            return mp_error(MP_ERR_INVALID_ARG, "%s: normalization mean[%d] = %g is not finite", who, c,
                            (double)mean[c]);
        if (std && !(isfinite(std[c]) && std[c] > 0))
            return mp_error(MP_ERR_INVALID_ARG, "%s: normalization std[%d] = %g must be positive and finite", who, c,
                            (double)std[c]);
    }
    return MP_OK;
}

void mp_normalize_images(float *x, int64_t n, int channels, int64_t plane, const float *mean, const float *std) {
    if (!mean && !std) return;
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < channels; c++) {
            const float m = mean ? mean[c] : 0.0f, s = std ? std[c] : 1.0f;
            float *v = x + (i * channels + c) * plane;
            for (int64_t j = 0; j < plane; j++) v[j] = (v[j] - m) / s;
        }
}
