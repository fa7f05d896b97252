/* optim_cuda.cu — mp_cuda_optim: option checks (mp_optim_create's rules),
 * device state allocated and zeroed up front (f32, or f16/bf16 SGD momentum
 * for weights without master: state_dtype), the one-thread step prologue
 * (skip on found_inf, step count, learning rate from a value or a device
 * scalar, Adam's bias corrections in double as optim/adam.c), the dispatch
 * to the SGD / Adam kernels, and state access for checkpoints. */
#include "cuda/optim_cuda.cuh"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STATE_ALIGN 64 /* bytes, every state buffer */

static size_t round_up(size_t bytes) { return (bytes + STATE_ALIGN - 1) / STATE_ALIGN * STATE_ALIGN; }

/* mp_optim_create validates and applies the defaults; no parameters, so it
 * allocates nothing of size. */
static mp_status checked_options(mp_optim_opts o, mp_optim_opts *out) {
    mp_optim *tmp = NULL;
    MP_TRY(mp_optim_create(o, NULL, 0, &tmp));
    *out = mp_optim_options(tmp);
    mp_optim_destroy(tmp);
    return MP_OK;
}

static mp_status check_param(const mp_cuda_param_ref *r, int i) {
    const char *nm = r->name ? r->name : "(unnamed)";
    if (r->n < 0 || (r->n > 0 && ((!r->param && !(r->low && r->no_master)) || !r->grad)))
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: parameter %d '%s' has n = %lld, param %p, grad %p", i, nm,
                        (long long)r->n, (void *)r->param, (const void *)r->grad);
    if (r->low && r->low_dtype != MP_DTYPE_F16 && r->low_dtype != MP_DTYPE_BF16)
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: parameter %d '%s' has a low-precision copy of dtype %s "
                        "(f16 or bf16 expected)", i, nm, mp_dtype_name(r->low_dtype));
    if (r->grad_dtype != MP_DTYPE_F32 && !(r->low && r->grad_dtype == r->low_dtype))
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: parameter %d '%s' has a gradient of dtype %s (f32, or its "
                        "low-precision copy's dtype %s)", i, nm, mp_dtype_name(r->grad_dtype),
                        r->low ? mp_dtype_name(r->low_dtype) : "(none)");
    if (r->filter[2] != 0 && (r->filter[0] <= 0 || r->filter[1] <= 0 || r->filter[2] < 0 ||
                              (int64_t)r->filter[0] * r->filter[1] * r->filter[2] != r->n)) /* rs < 0 too */
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: parameter %d '%s' is a (%d, %d, %d) filter of %lld values",
                        i, nm, r->filter[0], r->filter[1], r->filter[2], (long long)r->n);
    if (r->state_dtype != MP_DTYPE_F32 && !(r->low && r->no_master && r->state_dtype == r->low_dtype))
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: parameter %d '%s' has state dtype %s, which needs a "
                        "low-precision copy of that dtype and no master weights (copy: %s, no_master: %d)", i, nm,
                        mp_dtype_name(r->state_dtype), r->low ? mp_dtype_name(r->low_dtype) : "none",
                        (int)r->no_master);
    return MP_OK;
}

/* The dtype parameter r's state lives in: SGD momentum may be f16/bf16
 * (checked above), everything else (Adam's moments) f32. */
static mp_dtype state_dtype_of(const mp_cuda_optim *o, const mp_cuda_param_ref *r) {
    return o->opts.kind == MP_OPTIM_SGD && o->n_bufs > 0 ? r->state_dtype : MP_DTYPE_F32;
}

static mp_status alloc_state(mp_cuda_ctx *ctx, mp_cuda_optim *o, const mp_cuda_param_ref *params, mp_mt_tensor *rec) {
    size_t bytes = 0;
    for (int i = 0; i < o->n_params; i++) {
        o->state_dtype[i] = state_dtype_of(o, &params[i]);
        bytes += (size_t)o->n_bufs * round_up((size_t)params[i].n * mp_dtype_size(o->state_dtype[i]));
    }
    if (bytes > 0) {
        MP_TRY(mp_cuda_check(cudaMalloc((void **)&o->state, bytes), "cudaMalloc", "cuda optimizer state"));
        MP_TRY(mp_cuda_check(cudaMemsetAsync(o->state, 0, bytes, ctx->stream), "cudaMemsetAsync",
                             "cuda optimizer state"));
    }
    MP_TRY(mp_cuda_check(cudaMalloc((void **)&o->scalars, sizeof *o->scalars), "cudaMalloc", "cuda optimizer"));
    MP_TRY(mp_cuda_check(cudaMemsetAsync(o->scalars, 0, sizeof *o->scalars, ctx->stream), "cudaMemsetAsync",
                         "cuda optimizer"));
    char *next = (char *)o->state;
    for (int i = 0; i < o->n_params; i++) {
        const mp_cuda_param_ref *r = &params[i];
        for (int b = 0; b < o->n_bufs; b++) {
            o->bufs[2 * i + b] = next;
            rec[i].ptr[MP_MT_BUF0 + b] = next;
            next += round_up((size_t)r->n * mp_dtype_size(o->state_dtype[i]));
        }
        o->numel[i] = r->n;
        for (int j = 0; j < 3; j++) o->filter[3 * i + j] = r->filter[j];
        rec[i].ptr[MP_MT_PARAM] = r->param;
        rec[i].ptr[MP_MT_GRAD] = (void *)r->grad;
        rec[i].ptr[MP_MT_LOW] = r->low;
        rec[i].numel = r->n;
        rec[i].flags = (r->low ? (int)r->low_dtype : (int)MP_DTYPE_F32) | (r->decay ? MP_MT_DECAY : 0) |
                       (r->low && r->no_master ? MP_MT_NO_MASTER : 0) |
                       (r->grad_dtype != MP_DTYPE_F32 ? MP_MT_GRAD_LOW : 0) |
                       (o->state_dtype[i] != MP_DTYPE_F32 ? MP_MT_STATE_LOW : 0);
    }
    return MP_OK;
}

mp_status mp_cuda_optim_create(mp_cuda_ctx *ctx, mp_optim_opts opts, const mp_cuda_param_ref *params, int n_params,
                               mp_cuda_optim **out) {
    MP_ASSERT(ctx && out);
    *out = NULL;
    mp_optim_opts o;
    MP_TRY(checked_options(opts, &o));
    if (n_params < 0 || (n_params > 0 && !params))
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: bad parameter list (%d parameters)", n_params);
    for (int i = 0; i < n_params; i++) MP_TRY(check_param(&params[i], i));

    mp_cuda_optim *opt = (mp_cuda_optim *)calloc(1, sizeof *opt);
    mp_mt_tensor *rec = (mp_mt_tensor *)calloc(n_params > 0 ? (size_t)n_params : 1, sizeof *rec);
    if (opt) opt->bufs = (void **)calloc(2 * (size_t)n_params + 1, sizeof *opt->bufs);
    if (opt) opt->state_dtype = (mp_dtype *)calloc((size_t)n_params + 1, sizeof *opt->state_dtype);
    if (opt) opt->numel = (long long *)calloc((size_t)n_params + 1, sizeof *opt->numel);
    if (opt) opt->filter = (int *)calloc(3 * (size_t)n_params + 1, sizeof *opt->filter);
    mp_status st = opt && rec && opt->bufs && opt->state_dtype && opt->numel && opt->filter
                       ? MP_OK
                       : mp_error(MP_ERR_NOMEM, "cuda optimizer: out of host memory");
    if (st == MP_OK) {
        opt->opts = o;
        opt->n_params = n_params;
        opt->n_bufs = o.kind == MP_OPTIM_SGD ? (o.momentum > 0.0f ? 1 : 0) : 2;
        st = alloc_state(ctx, opt, params, rec);
    }
    /* Builds the table and synchronizes the stream, so the zeroing is done. */
    if (st == MP_OK) st = mp_mt_table_build(ctx, rec, n_params, "cuda optimizer", &opt->table);
    free(rec);
    if (st != MP_OK) {
        mp_cuda_optim_destroy(opt);
        return st;
    }
    *out = opt;
    return MP_OK;
}

void mp_cuda_optim_destroy(mp_cuda_optim *o) {
    if (!o) return;
    mp_mt_table_free(&o->table);
    if (o->state) cudaFree(o->state);
    if (o->scalars) cudaFree(o->scalars);
    free(o->bufs);
    free(o->state_dtype);
    free(o->numel);
    free(o->filter);
    free(o);
}

/* One thread: the decisions of a step, on the device. */
__global__ void step_prologue_kernel(mp_optim_scalars *sc, mp_optim_opts o, float lr_value, const float *lr_device,
                                     const int *found_inf) {
    mp_step_hyper *h = &sc->hyper;
    h->skip = found_inf != NULL && *found_inf != 0;
    if (h->skip) return;
    const float lr = lr_device ? *lr_device : lr_value;
    const long long t = sc->steps + 1;
    sc->steps = t;
    h->lr = lr;
    if (o.kind == MP_OPTIM_SGD) return;
    /* mp_adam_hyper_at: scalars in double, cast once. */
    const double bc1 = 1.0 - pow((double)o.beta1, (double)t);
    const double bc2 = 1.0 - pow((double)o.beta2, (double)t);
    h->step_size = (float)((double)lr / bc1);
    h->bc2_sqrt = (float)sqrt(bc2);
    for (int d = 0; d < 2; d++) {
        const double wd = d ? (double)o.weight_decay : 0.0;
        h->l2[d] = o.kind == MP_OPTIM_ADAM ? (float)wd : 0.0f;
        h->decay_mul[d] = o.kind == MP_OPTIM_ADAMW ? (float)(1.0 - (double)lr * wd) : 1.0f;
    }
}

mp_status mp_cuda_optim_step(mp_cuda_ctx *ctx, mp_cuda_optim *o, const mp_cuda_step_args *a) {
    MP_ASSERT(ctx && o && a);
    if (!a->lr_device && !(isfinite(a->lr) && a->lr >= 0.0f))
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: learning rate %g must be a finite number >= 0",
                        (double)a->lr);
    step_prologue_kernel<<<1, 1, 0, ctx->stream>>>(o->scalars, o->opts, a->lr, a->lr_device, a->found_inf);
    MP_TRY(mp_mt_launched("step_prologue_kernel"));
    return o->opts.kind == MP_OPTIM_SGD ? mp_cuda_sgd_launch(ctx, o) : mp_cuda_adam_launch(ctx, o);
}

int mp_cuda_optim_state_tensors(const mp_cuda_optim *o, int param_index, void **bufs) {
    MP_ASSERT(param_index >= 0 && param_index < o->n_params);
    if (bufs)
        for (int b = 0; b < o->n_bufs; b++) bufs[b] = o->bufs[2 * param_index + b];
    return o->n_bufs;
}

mp_dtype mp_cuda_optim_state_dtype(const mp_cuda_optim *o, int param_index) {
    MP_ASSERT(param_index >= 0 && param_index < o->n_params);
    return o->state_dtype[param_index];
}

mp_optim_opts mp_cuda_optim_options(const mp_cuda_optim *o) { return o->opts; }

mp_status mp_cuda_optim_get_step_count(mp_cuda_ctx *ctx, const mp_cuda_optim *o, int64_t *steps) {
    long long v = 0;
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(&v, &o->scalars->steps, sizeof v, cudaMemcpyDeviceToHost, ctx->stream),
                         "cudaMemcpyAsync", "cuda optimizer step count"));
    MP_TRY(mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda optimizer step count"));
    *steps = v;
    return MP_OK;
}

mp_status mp_cuda_optim_set_step_count(mp_cuda_ctx *ctx, mp_cuda_optim *o, int64_t steps) {
    if (steps < 0)
        return mp_error(MP_ERR_INVALID_ARG, "cuda optimizer: step count %lld must be >= 0", (long long)steps);
    const long long v = steps;
    MP_TRY(mp_cuda_check(cudaMemcpyAsync(&o->scalars->steps, &v, sizeof v, cudaMemcpyHostToDevice, ctx->stream),
                         "cudaMemcpyAsync", "cuda optimizer step count"));
    return mp_cuda_check(cudaStreamSynchronize(ctx->stream), "cudaStreamSynchronize", "cuda optimizer step count");
}

__global__ void set_f32_kernel(float *p, float v) { *p = v; }

mp_status mp_cuda_set_f32(mp_cuda_ctx *ctx, float *dev, float value) {
    MP_ASSERT(ctx && dev);
    set_f32_kernel<<<1, 1, 0, ctx->stream>>>(dev, value);
    return mp_mt_launched("set_f32_kernel");
}
