/* cuda_plan.h — accessors of a plan on a GPU (cuda_plan.c) for the rest of
 * the CUDA backend: its context, each parameter's device arrays, and who
 * refreshes the f16/bf16 weight casts. No CUDA header is included. */
#ifndef MP_CUDA_CUDA_PLAN_H
#define MP_CUDA_CUDA_PLAN_H

#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_ctx mp_cuda_ctx;

mp_cuda_ctx *mp_cuda_plan_ctx(const mp_plan *p);
/* Graph parameter k's f32 master; NULL for a weight without one (its low
 * cast, mp_cuda_plan_low, is the weight). */
float *mp_cuda_plan_param(const mp_plan *p, int k);
/* Graph parameter k's f16/bf16 cast (NULL if none) and its dtype. */
void *mp_cuda_plan_low(const mp_plan *p, int k, mp_dtype *dtype);
/* Whether graph parameter k is a conv2d filter the device keeps in KRSC
 * order (its master, cast, gradient and optimizer state); then dims gets its
 * (k, c, rs) for mp_host_copy. */
bool mp_cuda_plan_param_krsc(const mp_plan *p, int k, int dims[3]);
/* on: the fused optimizer refreshes the casts after each update, so the
 * forward reads them as they are; off: the forward casts the masters. */
void mp_cuda_plan_casts_by_optimizer(mp_plan *p, bool on);
/* Gradient all-reduce buckets of a data-parallel trainer on a GPU (0 on one
 * GPU or the CPU). */
int mp_cuda_trainer_buckets(const mp_trainer *t);
/* Device memory in use on the current device (total - free), for peak-memory
 * reports as differences around a run. */
size_t mp_cuda_used_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
