/* device_none.c — the device hooks of a build without the CUDA backend:
 * every hook says so, naming the device that was asked for. */
#ifndef MP_HAVE_CUDA
#include "graph/device.h"

static mp_status no_gpu(const mp_plan *p) {
    return mp_error(MP_ERR_UNSUPPORTED, "device cuda:%d: this build of mixprec has no CUDA backend (built without "
                    "nvcc/cuDNN); use --device cpu", p ? p->o.device.index : 0);
}

mp_status mp_device_plan_open(mp_plan *p) { return no_gpu(p); }
void mp_device_plan_close(mp_plan *p) { (void)p; }
mp_status mp_device_node_prepare(mp_plan *p, int i, size_t *ws) { (void)i, (void)ws; return no_gpu(p); }
mp_status mp_device_arena_alloc(mp_plan *p, size_t bytes, char **arena) {
    (void)bytes, (void)arena;
    return no_gpu(p);
}
void mp_device_bind_params(mp_plan *p, int i) { (void)p, (void)i; }
void mp_device_grad_place(mp_plan *p, int k, void *where) { (void)p, (void)k, (void)where; }
mp_status mp_device_forward_begin(mp_plan *p) { return no_gpu(p); }
mp_status mp_device_forward(mp_plan *p, int i) { (void)i; return no_gpu(p); }
mp_status mp_device_backward(mp_plan *p, int i, const bool *taken, const bool *fresh) {
    (void)i, (void)taken, (void)fresh;
    return no_gpu(p);
}
mp_status mp_device_zero_unreached_grads(mp_plan *p) { return no_gpu(p); }
mp_status mp_device_set_loss_seed(mp_plan *p, int node, mp_seed seed) {
    (void)node, (void)seed;
    return no_gpu(p);
}
mp_status mp_device_set_input(mp_plan *p, int node, const float *host, size_t n) {
    (void)node, (void)host, (void)n;
    return no_gpu(p);
}
mp_status mp_device_set_labels(mp_plan *p, int node, const int32_t *host, size_t n) {
    (void)node, (void)host, (void)n;
    return no_gpu(p);
}
mp_status mp_device_read(const mp_plan *p, int node, float *host, size_t n) {
    (void)node, (void)host, (void)n;
    return no_gpu(p);
}
mp_status mp_device_tensor_nonfinite(const mp_plan *p, const mp_tensor *t, bool *found) {
    (void)t;
    *found = false;
    return no_gpu(p);
}
void *mp_device_grad(const mp_plan *p, int k) {
    (void)p, (void)k;
    return NULL;
}
mp_status mp_device_params_sync(mp_plan *p, bool to_host) { (void)to_host; return no_gpu(p); }
void mp_device_profile_sync(const mp_plan *p) { (void)p; }
void mp_device_param_bytes(const mp_plan *p, size_t bytes[3]) {
    (void)p;
    bytes[0] = bytes[1] = bytes[2] = 0;
}
#else
typedef int mp_device_none_unused; /* ISO C: no empty translation unit */
#endif
