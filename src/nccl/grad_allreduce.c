/* grad_allreduce.c — grad_allreduce.h: bucketed, overlapped gradient
 * all-reduce. Buckets are filled with the trainable parameters in the order
 * backward finishes them (descending node index); bucket b is ready once
 * backward has run its lowest node. Each bucket: an event on the plan's
 * stream, the comm stream waits for it, packs the gradients into the bucket
 * (wire dtype, times 1/world), all-reduces it (sum) and unpacks it into the
 * fp32 gradients. Parameters no backward path reaches keep their zero
 * gradient on every rank and are not exchanged. */
#include "dist/grad_allreduce.h"

#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_plan.h"
#include "cuda/cuda_exec.h"
#include "nccl/grad_pack.h"
#include "nccl/nccl_dist.h"

typedef struct {
    int lo_node;          /* ready after this node's backward */
    int first, count;     /* slots */
    size_t off, numel;    /* elements of the wire buffer */
    long long longest;    /* largest slot */
    cudaEvent_t ready;
} bucket;

struct mp_grad_allreduce {
    mp_dist *d;
    mp_plan *p;
    mp_cuda_ctx *ctx;
    mp_cuda_ctx comm_ctx; /* ctx with the comm stream: the pack kernels run there */
    mp_dtype dtype;
    void *wire;
    mp_grad_slot *e;      /* host copy of the slots */
    mp_grad_slot *e_dev;  /* the pack kernels read these */
    int n_entries;
    bucket *b;
    int n_buckets, next;
    cudaEvent_t done;
};

static mp_status start_bucket(mp_grad_allreduce *a, bucket *b) {
    const char *what = "gradient all-reduce";
    MP_CUDA_TRY(cudaEventRecord(b->ready, a->ctx->stream), what);
    MP_CUDA_TRY(cudaStreamWaitEvent(a->comm_ctx.stream, b->ready, 0), what);
    const size_t es = mp_dtype_size(a->dtype);
    const float inv_world = 1.0f / (float)mp_dist_world(a->d);
    MP_TRY(mp_grad_pack(&a->comm_ctx, a->e_dev + b->first, b->count, b->longest, a->wire, a->dtype, inv_world));
    void *buf = (char *)a->wire + b->off * es;
    MP_NCCL_QUEUE(a->d, ncclAllReduce(buf, buf, b->numel, mp_nccl_dtype(a->dtype), ncclSum, mp_dist_comm(a->d),
                                      a->comm_ctx.stream),
                  what);
    return mp_grad_unpack(&a->comm_ctx, a->e_dev + b->first, b->count, b->longest, a->wire, a->dtype);
}

static mp_status on_grad_ready(void *arg, int node) {
    mp_grad_allreduce *a = arg;
    while (a->next < a->n_buckets && node <= a->b[a->next].lo_node) MP_TRY(start_bucket(a, &a->b[a->next++]));
    return MP_OK;
}

mp_status mp_grad_allreduce_finish(mp_grad_allreduce *a) {
    while (a->next < a->n_buckets) MP_TRY(start_bucket(a, &a->b[a->next++]));
    a->next = 0;
    MP_CUDA_TRY(cudaEventRecord(a->done, a->comm_ctx.stream), "gradient all-reduce");
    MP_CUDA_TRY(cudaStreamWaitEvent(a->ctx->stream, a->done, 0), "gradient all-reduce");
    return MP_OK;
}

int mp_grad_allreduce_buckets(const mp_grad_allreduce *a) { return a ? a->n_buckets : 0; }

void mp_grad_allreduce_destroy(mp_grad_allreduce *a) {
    if (!a) return;
    if (a->p && a->p->grad_ready_arg == a) {
        a->p->grad_ready = NULL;
        a->p->grad_ready_arg = NULL;
    }
    if (a->comm_ctx.stream) {
        cudaStreamSynchronize(a->comm_ctx.stream);
        cudaStreamDestroy(a->comm_ctx.stream);
    }
    for (int i = 0; i < a->n_buckets; i++)
        if (a->b[i].ready) cudaEventDestroy(a->b[i].ready);
    if (a->done) cudaEventDestroy(a->done);
    cudaFree(a->wire);
    cudaFree(a->e_dev);
    free(a->e);
    free(a->b);
    free(a);
}

/* Entries in backward order and their buckets. */
static mp_status plan_buckets(mp_grad_allreduce *a, size_t bucket_bytes) {
    mp_plan *p = a->p;
    mp_graph *g = p->g;
    const bool *reach = p->reach[0];
    a->e = calloc((size_t)g->n_params + 1, sizeof *a->e);
    a->b = calloc((size_t)g->n_params + 1, sizeof *a->b);
    if (!a->e || !a->b) return mp_error(MP_ERR_NOMEM, "gradient all-reduce: out of memory");
    const size_t es = mp_dtype_size(a->dtype);
    size_t off = 0;
    for (int node = p->n - 1; node >= 0; node--) {
        if (!reach || !reach[node]) continue;
        for (int k = 0; k < g->n_params; k++) {
            const mp_gparam *gp = &g->params[k];
            if (gp->node != node || !gp->spec.trainable) continue;
            if (mp_plan_grad_dtype(p, k) != MP_DTYPE_F32) /* the trainer never makes such a plan data parallel */
                return mp_error(MP_ERR_INVALID_ARG, "gradient all-reduce: '%s' has a %s gradient (the plan's "
                                "low_grads); the all-reduce needs f32 gradients", gp->name,
                                mp_dtype_name(mp_plan_grad_dtype(p, k)));
            mp_grad_slot *en = &a->e[a->n_entries++];
            *en = (mp_grad_slot){.grad = (float *)mp_device_grad(p, k), .n = mp_shape_numel(&gp->spec.shape),
                                 .off = (long long)off};
            off += (size_t)en->n;
            bucket *b = a->n_buckets ? &a->b[a->n_buckets - 1] : NULL;
            if (!b || b->numel * es >= bucket_bytes) {
                b = &a->b[a->n_buckets++];
                *b = (bucket){.first = a->n_entries - 1, .off = (size_t)en->off};
            }
            b->count++;
            b->numel += (size_t)en->n;
            if (en->n > b->longest) b->longest = en->n;
            b->lo_node = node;
        }
    }
    off = (off + 63) & ~(size_t)63;
    if (off) MP_CUDA_TRY(cudaMalloc(&a->wire, off * es), "gradient all-reduce buffer");
    const size_t slot_bytes = (size_t)(a->n_entries + 1) * sizeof *a->e;
    MP_CUDA_TRY(cudaMalloc((void **)&a->e_dev, slot_bytes), "gradient all-reduce slots");
    MP_CUDA_TRY(cudaMemcpyAsync(a->e_dev, a->e, slot_bytes, cudaMemcpyHostToDevice, a->ctx->stream),
                "gradient all-reduce slots");
    MP_CUDA_TRY(cudaStreamSynchronize(a->ctx->stream), "gradient all-reduce slots"); /* a->e is pageable */
    for (int i = 0; i < a->n_buckets; i++)
        MP_CUDA_TRY(cudaEventCreateWithFlags(&a->b[i].ready, cudaEventDisableTiming), "gradient all-reduce");
    MP_CUDA_TRY(cudaEventCreateWithFlags(&a->done, cudaEventDisableTiming), "gradient all-reduce");
    return MP_OK;
}

mp_status mp_grad_allreduce_create(mp_dist *d, mp_plan *p, mp_dtype comm_dtype, size_t bucket_bytes,
                                   mp_grad_allreduce **out) {
    *out = NULL;
    if (!d || !p || !p->dev || !p->o.training)
        return mp_error(MP_ERR_INVALID_ARG, "gradient all-reduce: needs a communicator and a CUDA training plan");
    if (comm_dtype != MP_DTYPE_F32 && comm_dtype != MP_DTYPE_F16 && comm_dtype != MP_DTYPE_BF16)
        return mp_error(MP_ERR_INVALID_ARG, "gradient all-reduce: dtype %s is not f32, f16 or bf16",
                        mp_dtype_name(comm_dtype));
    mp_grad_allreduce *a = calloc(1, sizeof *a);
    if (!a) return mp_error(MP_ERR_NOMEM, "gradient all-reduce: out of memory");
    a->d = d;
    a->p = p;
    a->ctx = mp_cuda_plan_ctx(p);
    a->dtype = comm_dtype;
    a->comm_ctx = *a->ctx;
    a->comm_ctx.stream = NULL;
    mp_status s = mp_cuda_check(cudaStreamCreateWithFlags(&a->comm_ctx.stream, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags", "gradient all-reduce stream");
    if (s == MP_OK) s = plan_buckets(a, bucket_bytes ? bucket_bytes : MP_DEFAULT_BUCKET_BYTES);
    if (s != MP_OK) {
        mp_grad_allreduce_destroy(a);
        return s;
    }
    p->grad_ready = on_grad_ready;
    p->grad_ready_arg = a;
    *out = a;
    return MP_OK;
}

mp_status mp_dist_broadcast_params(mp_dist *d, mp_plan *p) {
    mp_cuda_ctx *ctx = mp_cuda_plan_ctx(p);
    const mp_graph *g = p->g;
    for (int k = 0; k < g->n_params; k++) {
        void *x = mp_cuda_plan_param(p, k);
        ncclDataType_t type = ncclFloat32;
        mp_dtype low_dtype = MP_DTYPE_F32;
        if (!x) { /* no fp32 master: the low-precision cast is the weight */
            x = mp_cuda_plan_low(p, k, &low_dtype);
            type = mp_nccl_dtype(low_dtype);
        }
        MP_NCCL_QUEUE(d, ncclBroadcast(x, x, (size_t)mp_shape_numel(&g->params[k].spec.shape), type, 0,
                                       mp_dist_comm(d), ctx->stream),
                      g->params[k].name);
    }
    return MP_OK;
}

mp_status mp_dist_allreduce_flags(mp_dist *d, mp_plan *p, int *flags_dev, int n) {
    MP_NCCL_QUEUE(d, ncclAllReduce(flags_dev, flags_dev, (size_t)n, ncclInt32, ncclMax, mp_dist_comm(d),
                                   mp_cuda_plan_ctx(p)->stream),
                  "found-inf all-reduce");
    return MP_OK;
}
