/* dist_none.c — dist.h and grad_allreduce.h in a build without CUDA or
 * without NCCL: asking for more than one GPU says what is missing. */
#include "dist/grad_allreduce.h"

static mp_status no_nccl(void) {
    return mp_error(MP_ERR_UNSUPPORTED, "multi-GPU training needs the CUDA backend built with NCCL (this build has "
                                        "no NCCL; install NCCL and rebuild)");
}

mp_status mp_dist_group_create(int world, double timeout_s, mp_dist_group **out) {
    (void)world, (void)timeout_s;
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_group_create: null output");
    *out = NULL;
    return no_nccl();
}
mp_status mp_dist_group_join(mp_dist_group *g, int rank, int device, mp_dist **out) {
    (void)g, (void)rank, (void)device;
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_group_join: null output");
    *out = NULL;
    return no_nccl();
}
void mp_dist_group_destroy(mp_dist_group *g) { (void)g; }
int mp_dist_group_failed_rank(const mp_dist_group *g) {
    (void)g;
    return -1;
}
void mp_dist_group_fail(mp_dist_group *g, int rank, mp_status s) { (void)g, (void)rank, (void)s; }
mp_status mp_dist_mpi_create(double timeout_s, mp_dist **out) {
    (void)timeout_s;
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "mp_dist_mpi_create: null output");
    *out = NULL;
    return no_nccl();
}
int mp_dist_rank(const mp_dist *d) {
    (void)d;
    return 0;
}
int mp_dist_world(const mp_dist *d) {
    (void)d;
    return 1;
}
int mp_dist_device(const mp_dist *d) {
    (void)d;
    return 0;
}
void mp_dist_fail(mp_dist *d, mp_status s) { (void)d, (void)s; }
mp_status mp_dist_check(mp_dist *d) {
    (void)d;
    return MP_OK;
}
void mp_dist_wait_begin(mp_dist *d) { (void)d; }
void mp_dist_wait_end(mp_dist *d) { (void)d; }
mp_status mp_dist_enqueue_begin(mp_dist *d) {
    (void)d;
    return MP_OK;
}
void mp_dist_enqueue_end(mp_dist *d) { (void)d; }
void mp_dist_destroy(mp_dist *d) { (void)d; }
mp_status mp_dist_allgather_f32(mp_dist *d, const float *send, float *recv, size_t n, void *stream) {
    (void)d, (void)send, (void)recv, (void)n, (void)stream;
    return no_nccl();
}

mp_status mp_grad_allreduce_create(mp_dist *d, mp_plan *p, mp_dtype comm_dtype, size_t bucket_bytes,
                                   mp_grad_allreduce **out) {
    (void)d, (void)p, (void)comm_dtype, (void)bucket_bytes;
    *out = NULL;
    return no_nccl();
}
mp_status mp_grad_allreduce_finish(mp_grad_allreduce *a) {
    (void)a;
    return no_nccl();
}
int mp_grad_allreduce_buckets(const mp_grad_allreduce *a) {
    (void)a;
    return 0;
}
void mp_grad_allreduce_destroy(mp_grad_allreduce *a) { (void)a; }
mp_status mp_dist_broadcast_params(mp_dist *d, mp_plan *p) {
    (void)d, (void)p;
    return no_nccl();
}
mp_status mp_dist_allreduce_flags(mp_dist *d, mp_plan *p, int *flags_dev, int n) {
    (void)d, (void)p, (void)flags_dev, (void)n;
    return no_nccl();
}
