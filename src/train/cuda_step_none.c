/* cuda_step_none.c — the GPU training step (cuda/cuda_step.h) in a build
 * without the CUDA backend: every call says so. */
#ifndef MP_HAVE_CUDA
#include "cuda/cuda_step.h"
#include "core/error.h"

#include <string.h>

static mp_status no_cuda(void) {
    return mp_error(MP_ERR_UNSUPPORTED, "this build of mixprec has no CUDA backend; use --device cpu");
}

mp_status mp_cuda_step_create(mp_plan *p, const mp_cuda_step_opts *o, mp_cuda_step **out) {
    (void)p, (void)o;
    *out = NULL;
    return no_cuda();
}
void mp_cuda_step_destroy(mp_cuda_step *s) { (void)s; }
mp_status mp_cuda_step_run(mp_cuda_step *s, float lr) {
    (void)s, (void)lr;
    return no_cuda();
}
mp_status mp_cuda_step_loss(mp_cuda_step *s, mp_node loss, float *value) {
    (void)s, (void)loss, (void)value;
    return no_cuda();
}
mp_status mp_cuda_step_scaler(mp_cuda_step *s, mp_scaler *host) {
    (void)s, (void)host;
    return no_cuda();
}
mp_status mp_cuda_step_wait(mp_cuda_step *s) {
    (void)s;
    return no_cuda();
}
mp_status mp_cuda_step_inject_overflow(mp_cuda_step *s) {
    (void)s;
    return no_cuda();
}
mp_status mp_cuda_step_overflows_read(mp_cuda_step *s, bool wait, mp_cuda_step_overflows *out) {
    (void)s, (void)wait;
    memset(out, 0, sizeof *out);
    return no_cuda();
}
mp_status mp_cuda_step_locate_overflow(mp_cuda_step *s, bool backward, float seed, mp_nonfinite_site *site) {
    (void)s, (void)backward, (void)seed;
    memset(site, 0, sizeof *site);
    return no_cuda();
}
int mp_cuda_step_buckets(const mp_cuda_step *s) {
    (void)s;
    return 0;
}
mp_status mp_cuda_step_state_to_host(mp_cuda_step *s, mp_optim *host_optim, mp_scaler *host_scaler) {
    (void)s, (void)host_optim, (void)host_scaler;
    return no_cuda();
}
mp_status mp_cuda_step_state_from_host(mp_cuda_step *s, const mp_optim *host_optim, const mp_scaler *host_scaler) {
    (void)s, (void)host_optim, (void)host_scaler;
    return no_cuda();
}
#else
typedef int mp_cuda_step_none_unused; /* ISO C: no empty translation unit */
#endif
