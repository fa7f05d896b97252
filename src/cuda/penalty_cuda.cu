/* penalty_cuda.cu — a gradient penalty's value and direction on the device
 * (penalty_cuda.h). R1 / WGAN-GP: one block per sample sums the squares of
 * its unscaled input gradient (f64) and keeps the unscaled values; one
 * block adds the per-sample terms in a fixed order, takes the decisions and
 * the per-sample factors; a grid-stride pass writes the direction. L2: the
 * group's gradient norm (clip_cuda.cu's fixed-order sum), one thread for
 * the decisions, a multi-tensor pass for the direction. Overflow flags go
 * into the device scaler as its unscale/check would raise them. */
#include <math.h>
#include <stdlib.h>

#include "cuda/cuda_kernel_util.cuh"
#include "cuda/float_bits.cuh"
#include "cuda/multi_tensor.cuh"
#include "cuda/penalty_cuda.h"

/* multi-tensor slots of the group's parameters */
enum { SLOT_GRAD = 0, SLOT_DIR = 1, SLOT_TGRAD = 2 };

struct mp_cuda_penalty {
    mp_cuda_penalty_spec spec; /* kind, weight, group, batch, per_sample (pointer fields not kept) */
    mp_mt_table params;        /* grad (dtype in flags), t_param, t_dparam */
    /* device: */
    mp_cuda_penalty_out *out;
    double *sums;              /* per sample: sum of squares (R1 / WGAN-GP); [0]: L2's norm */
    int *bad;                  /* per sample: a NaN/inf in its gradient */
    double *factor;            /* per sample: the direction's factor (0: none) */
    float *grad;               /* the unscaled input gradient (batch * per_sample) */
    double *coef;              /* L2: the direction's factor */
};

static __device__ void raise_flag(mp_scaler *s, int group, int found) {
    atomicMax(&s->found_inf, found);
    atomicMax(&s->group_found[group], found);
}

/* ---- R1 / WGAN-GP ---------------------------------------------------------- */

static __global__ void __launch_bounds__(MP_CUDA_THREADS)
    sample_sums_kernel(const void *g, mp_dtype dt, long long per, const mp_scaler *s, float batch, float *ug,
                       double *sums, int *bad) {
    __shared__ double red[MP_CUDA_THREADS];
    const long long base = (long long)blockIdx.x * per;
    const double inv = (double)batch / (double)s->scale; /* as the host unscales: f64 factor, one rounding */
    const bool skipped = s->found_inf >= MP_FOUND_FORWARD; /* the forward overflowed: NaN, as the value */
    double acc = 0.0;
    int nonfinite = 0;
    for (long long j = threadIdx.x; j < per; j += blockDim.x) {
        const float v = (float)((double)mp_ld(g, dt, base + j) * inv);
        ug[base + j] = skipped ? NAN : v;
        nonfinite |= (int)mp_dev_nonfinite(v);
        acc += (double)v * v;
    }
    nonfinite = __syncthreads_or(nonfinite);
    mp_dev_block_sum(red, acc, &sums[blockIdx.x]);
    if (threadIdx.x == 0) bad[blockIdx.x] = nonfinite;
}

static __global__ void __launch_bounds__(MP_CUDA_THREADS)
    input_finish_kernel(mp_cuda_penalty_out *out, mp_scaler *s, int group, bool wgan, float w, int batch,
                        const double *sums, const int *bad, double *factor) {
    __shared__ double red[MP_CUDA_THREADS];
    __shared__ double total;
    __shared__ int any_bad;
    int b = 0;
    double acc = 0.0;
    for (int i = threadIdx.x; i < batch; i += blockDim.x) {
        b |= bad[i];
        const double n = sqrt(sums[i]);
        acc += wgan ? (n - 1) * (n - 1) : sums[i];
    }
    b = __syncthreads_or(b);
    mp_dev_block_sum(red, acc, &total);
    if (threadIdx.x == 0) any_bad = b;
    __syncthreads();
    int status = MP_PEN_OK;
    float value = NAN;
    if (s->found_inf >= MP_FOUND_FORWARD) {
        status = MP_PEN_NOT_RUN; /* the forward overflowed: the step is skipped */
    } else if (any_bad) {
        status = MP_PEN_GRAD_OVERFLOW;
    } else {
        value = (float)((wgan ? 1.0 : 0.5) * w * total / batch);
        if (mp_dev_nonfinite(value)) status = MP_PEN_FORWARD_OVERFLOW;
    }
    for (int i = threadIdx.x; i < batch; i += blockDim.x) {
        double f = 0.0;
        if (status == MP_PEN_OK && w != 0.0f) {
            const double n = sqrt(sums[i]);
            f = wgan ? (n > 0 ? 2.0 * w * (n - 1) / n : 0.0) : w;
        }
        factor[i] = f;
    }
    if (threadIdx.x != 0) return;
    out->value = value;
    out->status = status;
    if (status == MP_PEN_GRAD_OVERFLOW) raise_flag(s, group, MP_FOUND_GRADIENT);
    if (status == MP_PEN_FORWARD_OVERFLOW) raise_flag(s, group, MP_FOUND_FORWARD);
}

/* The factors stay f64 and each element is rounded once, as on the host. An
 * element past f32 (a huge weight times a finite gradient) is a forward
 * overflow of the penalty, as the host step treats it: value NaN, step
 * skipped (every thread that sees one writes the same). */
static __global__ void direction_kernel(const float *ug, const double *factor, long long per, long long n, float *dir,
                                        mp_cuda_penalty_out *out, mp_scaler *s, int group) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const double f = factor[k / per];
        const float d = f == 0.0 ? 0.0f : (float)(f * ug[k]); /* never 0 * inf */
        dir[k] = d;
        if (mp_dev_nonfinite(d)) {
            out->value = NAN;
            out->status = MP_PEN_FORWARD_OVERFLOW;
            raise_flag(s, group, MP_FOUND_FORWARD);
        }
    }
}

extern "C" mp_status mp_cuda_penalty_input(mp_cuda_ctx *ctx, mp_cuda_penalty *p, mp_scaler *s, const mp_tensor *grad,
                                           float *dir) {
    const mp_cuda_penalty_spec *sp = &p->spec;
    const long long n = (long long)sp->batch * sp->per_sample;
    if (mp_tensor_numel(grad) != n)
        return mp_error(MP_ERR_INTERNAL, "gradient penalty: the input gradient has %lld elements, not %lld",
                        (long long)mp_tensor_numel(grad), n);
    sample_sums_kernel<<<sp->batch, MP_CUDA_THREADS, 0, ctx->stream>>>(grad->data, grad->dtype, sp->per_sample, s,
                                                                     (float)sp->batch, p->grad, p->sums, p->bad);
    MP_TRY(mp_cuda_check(cudaGetLastError(), "sample_sums_kernel", "gradient penalty"));
    input_finish_kernel<<<1, MP_CUDA_THREADS, 0, ctx->stream>>>(p->out, s, sp->group, sp->kind == MP_PENALTY_WGAN_GP,
                                                              sp->weight, sp->batch, p->sums, p->bad, p->factor);
    MP_TRY(mp_cuda_check(cudaGetLastError(), "input_finish_kernel", "gradient penalty"));
    direction_kernel<<<mp_cuda_grid(ctx, n), MP_CUDA_THREADS, 0, ctx->stream>>>(p->grad, p->factor, sp->per_sample, n,
                                                                               dir, p->out, s, sp->group);
    return mp_cuda_check(cudaGetLastError(), "direction_kernel", "gradient penalty");
}

/* ---- L2 of the parameter gradients ------------------------------------------ */

static __global__ void l2_finish_kernel(mp_cuda_penalty_out *out, mp_scaler *s, int group, float w,
                                        const double *norm_scaled, double *coef) {
    int status = MP_PEN_OK;
    float value = NAN;
    double f = 0.0;
    const double norm = *norm_scaled / (double)s->scale;
    if (s->found_inf >= MP_FOUND_FORWARD || !isfinite(norm)) {
        status = MP_PEN_NOT_RUN; /* skipped, or the unscale/check finds the gradients' overflow */
    } else {
        value = (float)(w * norm);
        if (mp_dev_nonfinite(value)) status = MP_PEN_FORWARD_OVERFLOW;
        else if (w != 0.0f && norm != 0.0) f = w / ((double)s->scale * norm);
    }
    *coef = f;
    out->value = value;
    out->status = status;
    if (status == MP_PEN_FORWARD_OVERFLOW) raise_flag(s, group, MP_FOUND_FORWARD);
}

static __global__ void __launch_bounds__(MP_MT_THREADS) l2_direction_kernel(mp_mt_table t, const double *coef) {
    const double f = *coef;
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const float g = mp_dev_load_any(ten.ptr[SLOT_GRAD], ten.flags & MP_MT_DTYPE_MASK, i);
        ((float *)ten.ptr[SLOT_DIR])[i] = f == 0.0 ? 0.0f : (float)(f * g); /* one rounding, as on the host */
    });
}

extern "C" mp_status mp_cuda_penalty_l2(mp_cuda_ctx *ctx, mp_cuda_penalty *p, mp_scaler *s, mp_cuda_grads *grads) {
    MP_TRY(mp_cuda_grad_norm(ctx, grads, p->sums));
    l2_finish_kernel<<<1, 1, 0, ctx->stream>>>(p->out, s, p->spec.group, p->spec.weight, p->sums, p->coef);
    MP_TRY(mp_cuda_check(cudaGetLastError(), "l2_finish_kernel", "gradient penalty"));
    if (p->params.grid == 0) return MP_OK;
    l2_direction_kernel<<<p->params.grid, MP_MT_THREADS, 0, ctx->stream>>>(p->params, p->coef);
    return mp_mt_launched("l2_direction_kernel");
}

/* ---- the penalty's gradient into the group's ---------------------------------- */

static __global__ void __launch_bounds__(MP_MT_THREADS) add_tangent_kernel(mp_mt_table t) {
    mp_mt_for_each(t, [&](const mp_mt_tensor &ten, long long i) {
        const int dt = ten.flags & MP_MT_DTYPE_MASK;
        const float g = mp_dev_load_any(ten.ptr[SLOT_GRAD], dt, i);
        mp_dev_store_any(ten.ptr[SLOT_GRAD], dt, i, g + ((const float *)ten.ptr[SLOT_TGRAD])[i]);
    });
}

extern "C" mp_status mp_cuda_penalty_add(mp_cuda_ctx *ctx, mp_cuda_penalty *p) {
    if (p->params.grid == 0) return MP_OK;
    add_tangent_kernel<<<p->params.grid, MP_MT_THREADS, 0, ctx->stream>>>(p->params);
    return mp_mt_launched("add_tangent_kernel");
}

/* ---- set-up ------------------------------------------------------------------- */

extern "C" void mp_cuda_penalty_destroy(mp_cuda_penalty *p) {
    if (!p) return;
    mp_mt_table_free(&p->params);
    cudaFree(p->out);
    cudaFree(p->sums);
    cudaFree(p->bad);
    cudaFree(p->factor);
    cudaFree(p->grad);
    cudaFree(p->coef);
    free(p);
}

static mp_status dev(void **ptr, size_t bytes) {
    return mp_cuda_check(cudaMalloc(ptr, bytes ? bytes : 16), "cudaMalloc", "gradient penalty state");
}

extern "C" mp_status mp_cuda_penalty_create(mp_cuda_ctx *ctx, const mp_cuda_penalty_spec *spec, mp_cuda_penalty **out) {
    *out = NULL;
    mp_cuda_penalty *p = (mp_cuda_penalty *)calloc(1, sizeof *p);
    mp_mt_tensor *ts = (mp_mt_tensor *)calloc((size_t)spec->n + 1, sizeof *ts);
    mp_status st = p && ts ? MP_OK : mp_error(MP_ERR_NOMEM, "gradient penalty: out of memory");
    if (p) p->spec = *spec;
    const bool on_input = spec->kind == MP_PENALTY_R1 || spec->kind == MP_PENALTY_WGAN_GP;
    const size_t batch = on_input ? (size_t)spec->batch : 1;
    if (st == MP_OK) st = dev((void **)&p->out, sizeof *p->out);
    if (st == MP_OK) st = dev((void **)&p->sums, batch * sizeof(double));
    if (st == MP_OK) st = dev((void **)&p->bad, batch * sizeof(int));
    if (st == MP_OK) st = dev((void **)&p->factor, batch * sizeof(double));
    if (st == MP_OK) st = dev((void **)&p->coef, sizeof(double));
    if (st == MP_OK && on_input) st = dev((void **)&p->grad, (size_t)spec->batch * spec->per_sample * sizeof(float));
    if (st == MP_OK) {
        const mp_cuda_penalty_out none = {NAN, MP_PEN_NOT_RUN};
        st = mp_cuda_check(cudaMemcpy(p->out, &none, sizeof none, cudaMemcpyHostToDevice), "cudaMemcpy",
                           "gradient penalty state");
    }
    for (int i = 0; st == MP_OK && i < spec->n; i++) {
        ts[i].ptr[SLOT_GRAD] = spec->grads[i];
        ts[i].ptr[SLOT_DIR] = spec->t_param[i];
        ts[i].ptr[SLOT_TGRAD] = spec->t_dparam[i];
        ts[i].numel = spec->numel[i];
        ts[i].flags = (int)spec->grad_dtypes[i];
    }
    if (st == MP_OK) st = mp_mt_table_build(ctx, ts, spec->n, "gradient penalty", &p->params);
    free(ts);
    if (st != MP_OK) {
        mp_cuda_penalty_destroy(p);
        return st;
    }
    *out = p;
    return MP_OK;
}

extern "C" mp_cuda_penalty_out *mp_cuda_penalty_result(mp_cuda_penalty *p) { return p->out; }
extern "C" float *mp_cuda_penalty_grad(mp_cuda_penalty *p) { return p->grad; }
