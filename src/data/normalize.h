/* normalize.h — per-channel image normalization, (v - mean[c]) / std[c], as
 * the loader applies it to batches and mp_predict to the caller's images. */
#ifndef MP_DATA_NORMALIZE_H
#define MP_DATA_NORMALIZE_H

#include <stdint.h>

#include "mixprec.h"

/* mean and std (each NULL or `channels` values): every mean finite, every
 * std positive and finite; else MP_ERR_INVALID_ARG naming `who` and the channel. */
mp_status mp_normalization_check(const float *mean, const float *std, int channels, const char *who);

/* x holds n images of `channels` planes of `plane` values each, in place. */
void mp_normalize_images(float *x, int64_t n, int channels, int64_t plane, const float *mean, const float *std);

#endif
