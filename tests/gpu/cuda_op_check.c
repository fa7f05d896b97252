/* cuda_op_check.c — see cuda_op_check.h. */
#include "cuda_op_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_harness.h"

static bool is_low(mp_dtype d) { return d == MP_DTYPE_F16 || d == MP_DTYPE_BF16; }
static bool is_loss(mp_op_kind k) { return k == MP_OP_SOFTMAX_CE || k == MP_OP_BCE_LOGITS; }
static bool is_label(const cuda_op_case *k, int i) { return k->kind == MP_OP_SOFTMAX_CE && i == 1; }

static mp_dtype input_dtype(const cuda_op_case *k, int i) {
    if (is_label(k, i)) return MP_DTYPE_I32;
    return k->in_dtype_set ? k->in_dtype[i] : k->storage;
}

double cuda_op_default_tol(const cuda_op_case *k) {
    bool low = is_low(k->storage) || is_low(k->compute);
    for (int i = 0; i < k->n_in; i++) low = low || is_low(input_dtype(k, i));
    return low ? 1e-2 : k->tf32 ? 2e-3 : 1e-5;
}

/* The value a float of dtype dt holds after storing v (round to nearest even). */
static double round_to(double v, mp_dtype dt) {
    float f = (float)v;
    if (dt == MP_DTYPE_F16) return mp_f16_to_f32(mp_f32_to_f16(f));
    if (dt == MP_DTYPE_BF16) return mp_bf16_to_f32(mp_f32_to_bf16(f));
    if (dt == MP_DTYPE_F32) return f;
    return v;
}

static double host_get(const mp_tensor *t, int64_t i) {
    if (t->dtype == MP_DTYPE_F64) return ((const double *)t->data)[i];
    if (t->dtype == MP_DTYPE_F32) return ((const float *)t->data)[i];
    return ((const int32_t *)t->data)[i];
}

static void host_set(mp_tensor *t, int64_t i, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v;
    else if (t->dtype == MP_DTYPE_F32) ((float *)t->data)[i] = (float)v;
    else ((int32_t *)t->data)[i] = (int32_t)v;
}

/* Round every element of a reference tensor to dt (then to `also` when that
 * is a low-precision dtype, like exec_stage for low compute). */
static void round_tensor(mp_tensor *t, mp_dtype dt, mp_dtype also) {
    for (int64_t j = 0; j < mp_tensor_numel(t); j++) {
        double v = round_to(host_get(t, j), dt);
        if (is_low(also)) v = round_to(v, also);
        host_set(t, j, v);
    }
}

/* ---- device memory ------------------------------------------------------ */

typedef struct {
    void *ptr[192];
    int n;
    mp_cuda_ctx *ctx;
    char *error; /* r->error */
} dev_pool;

static void *dev_alloc(dev_pool *p, size_t bytes, bool poison) {
    void *d = NULL;
    size_t n = bytes < 64 ? 64 : (bytes + 63) / 64 * 64;
    cudaError_t e = cudaMalloc(&d, n);
    if (e != cudaSuccess) {
        snprintf(p->error, 256, "cudaMalloc(%zu): %s", n, cudaGetErrorString(e));
        return NULL;
    }
    MP_ASSERT(p->n < (int)(sizeof p->ptr / sizeof p->ptr[0]));
    p->ptr[p->n++] = d;
    /* 0xFF bytes: NaN in f32, f16 and bf16, -1 as int32. The ops run on the
     * context's non-blocking stream, which the legacy stream's memset and
     * memcpy do not order with: wait here, and after every conversion. */
    cudaMemset(d, poison ? 0xFF : 0, n);
    cudaDeviceSynchronize();
    return d;
}

static void dev_free_all(dev_pool *p) {
    for (int i = 0; i < p->n; i++) cudaFree(p->ptr[i]);
    p->n = 0;
}

/* Device tensor of dtype dt holding the reference tensor's values (already
 * rounded), through the NCHW f32 -> device conversion the executor uses:
 * 4-D becomes NHWC unless `flat` (then the CPU's element order is kept). */
static bool upload(dev_pool *p, const mp_tensor *ref, mp_dtype dt, bool flat, mp_tensor *dev) {
    const int64_t n = mp_tensor_numel(ref);
    dev->dtype = dt;
    dev->shape = ref->shape;
    dev->data = dev_alloc(p, (size_t)n * mp_dtype_size(dt), true);
    if (!dev->data) return false;
    if (dt == MP_DTYPE_I32) {
        int32_t *h = malloc((size_t)n * sizeof *h);
        for (int64_t j = 0; j < n; j++) h[j] = (int32_t)host_get(ref, j);
        cudaError_t e = cudaMemcpy(dev->data, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cudaDeviceSynchronize(); /* see below */
        free(h);
        if (e != cudaSuccess) snprintf(p->error, 256, "upload labels: %s", cudaGetErrorString(e));
        return e == cudaSuccess;
    }
    float *h = malloc((size_t)n * sizeof *h);
    for (int64_t j = 0; j < n; j++) h[j] = (float)host_get(ref, j);
    float *scratch = dev_alloc(p, (size_t)n * sizeof(float), false);
    /* cudaMemcpy from pageable memory may return before its DMA has landed,
     * and the ops' non-blocking stream does not wait for the legacy stream:
     * wait for the device before anything reads the data */
    bool ok = scratch && cudaMemcpy(scratch, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess &&
              cudaDeviceSynchronize() == cudaSuccess;
    free(h);
    mp_tensor view = *dev;
    if (flat) view.shape = mp_shape1((int)n);
    if (ok && mp_cuda_nchw_f32_to_device(p->ctx, scratch, &view) != MP_OK) {
        snprintf(p->error, 256, "upload: %s", mp_last_error());
        ok = false;
    }
    return ok && cudaStreamSynchronize(p->ctx->stream) == cudaSuccess;
}

/* A poisoned device tensor of dtype dt and shape s. */
static bool dev_tensor(dev_pool *p, mp_dtype dt, mp_shape s, mp_tensor *dev) {
    dev->dtype = dt;
    dev->shape = s;
    dev->data = dev_alloc(p, (size_t)mp_shape_numel(&s) * mp_dtype_size(dt), true);
    return dev->data != NULL;
}

/* Host NCHW floats of a device tensor (malloc'd; NULL on error); `flat` as
 * for upload. */
static float *download(dev_pool *p, const mp_tensor *dev, bool flat) {
    const int64_t n = mp_tensor_numel(dev);
    float *scratch = dev_alloc(p, (size_t)n * sizeof(float), true);
    if (!scratch) return NULL;
    mp_tensor view = *dev;
    if (flat) view.shape = mp_shape1((int)n);
    if (mp_cuda_device_to_nchw_f32(p->ctx, &view, scratch) != MP_OK ||
        cudaStreamSynchronize(p->ctx->stream) != cudaSuccess) {
        snprintf(p->error, 256, "download: %s", mp_last_error());
        return NULL;
    }
    float *h = malloc((size_t)n * sizeof *h);
    cudaError_t e = cudaMemcpy(h, scratch, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        snprintf(p->error, 256, "download: %s", cudaGetErrorString(e));
        free(h);
        return NULL;
    }
    return h;
}

/* ||gpu - ref|| / ||ref|| over the finite reference values; inf when a
 * non-finite value differs in kind (NaN vs number, or a different inf). */
static double rel_err(const float *gpu, const mp_tensor *ref) {
    double d2 = 0, r2 = 0;
    for (int64_t j = 0; j < mp_tensor_numel(ref); j++) {
        double g = gpu[j], r = host_get(ref, j);
        if (isnan(r) || isnan(g)) {
            if (!(isnan(r) && isnan(g))) return INFINITY;
            continue;
        }
        if (isinf(r) || isinf(g)) {
            if (g != r) return INFINITY;
            continue;
        }
        d2 += (g - r) * (g - r);
        r2 += r * r;
    }
    if (r2 == 0) return d2 == 0 ? 0 : INFINITY;
    return sqrt(d2) / sqrt(r2);
}

static void add_result(cuda_op_result *r, const char *name, double err) {
    snprintf(r->name[r->n], sizeof r->name[0], "%s", name);
    r->err[r->n++] = err;
    if (!(err <= r->worst)) r->worst = err;
}

static bool compare(dev_pool *p, cuda_op_result *r, const char *name, const mp_tensor *dev, const mp_tensor *ref,
                    bool flat) {
    float *h = download(p, dev, flat);
    if (!h) return false;
    add_result(r, name, rel_err(h, ref));
    free(h);
    return true;
}

/* ---- tangents ----------------------------------------------------------- */

/* Host tensors the check allocates beside the fixture's. */
typedef struct {
    void *mem[4 * MP_MAX_INPUTS + 4 * MP_MAX_PARAMS + 4];
    int n;
} host_pool;

static mp_tensor host_like(host_pool *h, const mp_tensor *p) {
    mp_tensor t = *p;
    t.data = calloc((size_t)mp_tensor_numel(p) + 1, mp_dtype_size(p->dtype));
    MP_ASSERT(t.data && h->n < (int)(sizeof h->mem / sizeof h->mem[0]));
    h->mem[h->n++] = t.data;
    return t;
}

static void host_free_all(host_pool *h) {
    for (int i = 0; i < h->n; i++) free(h->mem[i]);
    h->n = 0;
}

/* N(0, 1) values from a fixed seed (xorshift64*, Box-Muller). */
static double normal(uint64_t *s) {
    double u[2];
    for (int k = 0; k < 2; k++) {
        *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
        u[k] = ((double)((*s * 0x2545F4914F6CDD1DULL) >> 11) + 0.5) / 9007199254740992.0;
    }
    return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

static void fill_normal(mp_tensor *t, uint64_t *s) {
    for (int64_t j = 0; j < mp_tensor_numel(t); j++) host_set(t, j, normal(s));
}

/* ---- the check ---------------------------------------------------------- */

/* A fused ReLU after the reference's forward, with activation_cuda.cu's
 * semantics (NaN passes both ways): out := relu(out), and d_out zeroed where
 * that output is <= 0, so the op's own backward sees the ReLU's gradient. */
static void fuse_relu_ref(mp_op_call *rc) {
    for (int64_t j = 0; j < mp_tensor_numel(&rc->out); j++) {
        const double y = host_get(&rc->out, j);
        if (y < 0) host_set(&rc->out, j, 0.0);
        if (y <= 0) host_set(&rc->d_out, j, 0.0);
    }
}

static mp_status fail(cuda_op_result *r, mp_status s, const char *what) {
    if (!r->error[0]) snprintf(r->error, sizeof r->error, "%s", what);
    r->ok = false;
    return s;
}

mp_status cuda_op_check(mp_cuda_ctx *ctx, const cuda_op_case *k, cuda_op_result *r) {
    memset(r, 0, sizeof *r);
    r->tol = k->tol > 0 ? k->tol : cuda_op_default_tol(k);
    const mp_dtype RD = k->oracle_f32 ? MP_DTYPE_F32 : MP_DTYPE_F64;
    const bool loss = is_loss(k->kind);
    const mp_dtype out_dt = loss ? MP_DTYPE_F32 : k->storage;

    /* the reference, on random data rounded to what the device will hold */
    op_fixture ref;
    mp_dtype ref_dts[MP_MAX_INPUTS];
    for (int i = 0; i < k->n_in; i++) ref_dts[i] = is_label(k, i) ? MP_DTYPE_I32 : RD;
    if (op_fixture_init(&ref, k->kind, k->attr, k->n_in, k->in_shape, ref_dts, RD, MP_IMPL_REF, k->training) != MP_OK)
        return fail(r, MP_ERR_INVALID_ARG, mp_last_error());
    op_fixture_randomize(&ref, k->seed);
    mp_op_call *rc = &ref.call;
    rc->seed = k->seed;
    for (int j = 0; j < k->n_nan; j++) host_set(&rc->in[0], k->nan_index[j], NAN);
    for (int i = 0; i < k->n_in; i++)
        if (!is_label(k, i)) round_tensor(&rc->in[i], input_dtype(k, i), k->compute);
    mp_dtype param_dt[MP_MAX_PARAMS];
    for (int q = 0; q < ref.info.n_params; q++) {
        param_dt[q] = ref.info.params[q].trainable && is_low(k->compute) ? k->compute : MP_DTYPE_F32;
        round_tensor(&rc->param[q], param_dt[q], MP_DTYPE_F32);
    }
    /* a loss seed other than the harness's 1.7 (and never 1), so an op that
     * ignores or misreads the device-side seed fails */
    if (loss) host_set(&rc->d_out, 0, 1.5 + 0.125 * (double)(k->seed % 7));
    round_tensor(&rc->d_out, out_dt, MP_DTYPE_F32);

    /* the device side: shapes from the CPU infer with the device dtypes */
    mp_op_desc desc = ref.desc;
    mp_op_info info;
    memset(&info, 0, sizeof info);
    info.n_in = k->n_in;
    mp_cuda_node_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    for (int i = 0; i < k->n_in; i++) {
        info.in[i] = k->in_shape[i];
        info.in_dtype[i] = cfg.in_dtype[i] = input_dtype(k, i);
    }
    MP_ASSERT(mp_op_lookup(k->kind)->infer(&desc, &info) == MP_OK);
    cfg.storage = out_dt;
    cfg.compute = k->compute;
    cfg.tf32 = k->tf32;
    cfg.training = cfg.input_grad = k->training;
    cfg.relu_after = k->relu_after;
    cfg.tangents = k->tangents;
    cfg.batch = k->in_shape[0].dims[0];
    void *state = NULL;
    size_t ws_bytes = info.workspace_bytes, saved_bytes = info.saved_bytes;
    mp_status st = k->vt->prepare(ctx, &desc, &info, &cfg, &state, &ws_bytes, &saved_bytes);
    if (st != MP_OK) {
        op_fixture_free(&ref);
        return fail(r, st, mp_last_error());
    }

    dev_pool pool = {.n = 0, .ctx = ctx, .error = r->error};
    mp_op_call gc;
    memset(&gc, 0, sizeof gc);
    gc.desc = &desc;
    gc.info = &info;
    gc.state = state;
    gc.impl = MP_IMPL_AUTO;
    gc.training = k->training;
    gc.relu_after = k->relu_after; /* as plans bind it (graph/plan.c) */
    gc.seed = k->seed;
    gc.n_in = k->n_in;
    const bool flat_params = !k->params_channels_last;
    bool ok = true;
    for (int i = 0; i < k->n_in && ok; i++) {
        ok = upload(&pool, &rc->in[i], input_dtype(k, i), false, &gc.in[i]);
        if (ok && !is_label(k, i)) ok = dev_tensor(&pool, input_dtype(k, i), k->in_shape[i], &gc.d_in[i]);
    }
    for (int q = 0; q < ref.info.n_params && ok; q++) {
        ok = upload(&pool, &rc->param[q], param_dt[q], flat_params, &gc.param[q]);
        if (ok && ref.info.params[q].trainable && !k->no_param_grads)
            ok = dev_tensor(&pool, MP_DTYPE_F32, ref.info.params[q].shape, &gc.d_param[q]);
    }
    ok = ok && dev_tensor(&pool, out_dt, info.out, &gc.out) && upload(&pool, &rc->d_out, out_dt, false, &gc.d_out);
    if (ok) {
        gc.saved = dev_alloc(&pool, saved_bytes, true);
        gc.workspace = dev_alloc(&pool, ws_bytes, true);
        ok = gc.saved && gc.workspace;
    }
    cudaError_t ce = cudaDeviceSynchronize();
    if (ok && ce != cudaSuccess) {
        snprintf(r->error, sizeof r->error, "setup: %s", cudaGetErrorString(ce));
        ok = false;
    }

    /* run both sides (the device got the unmasked d_out above) */
    if (ok && ref.vt->forward(rc) != MP_OK) {
        snprintf(r->error, sizeof r->error, "CPU reference: %s", mp_last_error());
        ok = false;
    }
    if (ok && k->relu_after) fuse_relu_ref(rc);
    if (ok && ref.vt->backward(rc) != MP_OK) {
        snprintf(r->error, sizeof r->error, "CPU reference: %s", mp_last_error());
        ok = false;
    }
    if (ok && ((st = k->vt->forward(ctx, &gc)) != MP_OK || (st = k->vt->backward(ctx, &gc)) != MP_OK)) {
        snprintf(r->error, sizeof r->error, "%s", mp_last_error());
        ok = false;
    }
    if (ok && (ce = cudaStreamSynchronize(ctx->stream)) != cudaSuccess) {
        snprintf(r->error, sizeof r->error, "%s: %s", k->vt->name, cudaGetErrorString(ce));
        ok = false;
    }

    /* the tangents: directions on both sides, the reference's in f64 */
    host_pool hp = {.n = 0};
    if (ok && k->tangents) {
        uint64_t s = k->seed * 0x9E3779B97F4A7C15ULL + 12345;
        if (!k->vt->forward_tangent || !k->vt->backward_tangent) {
            snprintf(r->error, sizeof r->error, "%s has no GPU tangents", k->vt->name);
            ok = false;
        }
        for (int i = 0; i < k->n_in && ok; i++) {
            if (is_label(k, i)) continue;
            if (!(k->tangent_nulls & TANGENT_NULL_IN)) {
                rc->t_in[i] = host_like(&hp, &rc->in[i]);
                fill_normal(&rc->t_in[i], &s);
                round_tensor(&rc->t_in[i], input_dtype(k, i), k->compute);
                ok = upload(&pool, &rc->t_in[i], input_dtype(k, i), false, &gc.t_in[i]);
            }
            if (ok && gc.d_in[i].data) {
                rc->t_d_in[i] = host_like(&hp, &rc->in[i]);
                ok = dev_tensor(&pool, input_dtype(k, i), k->in_shape[i], &gc.t_d_in[i]);
            }
        }
        for (int q = 0; q < ref.info.n_params && ok; q++) {
            if (!ref.info.params[q].trainable) continue;
            if (!(k->tangent_nulls & TANGENT_NULL_PARAM)) {
                rc->t_param[q] = host_like(&hp, &rc->param[q]);
                fill_normal(&rc->t_param[q], &s);
                round_tensor(&rc->t_param[q], param_dt[q], MP_DTYPE_F32);
                ok = upload(&pool, &rc->t_param[q], MP_DTYPE_F32, flat_params, &gc.t_param[q]);
            }
            if (ok && gc.d_param[q].data) {
                rc->t_d_param[q] = host_like(&hp, &rc->param[q]);
                ok = dev_tensor(&pool, MP_DTYPE_F32, ref.info.params[q].shape, &gc.t_d_param[q]);
            }
        }
        if (ok && !(k->tangent_nulls & TANGENT_NULL_DOUT)) {
            rc->t_d_out = host_like(&hp, &rc->d_out);
            fill_normal(&rc->t_d_out, &s);
            if (loss) host_set(&rc->t_d_out, 0, 0.75 + 0.25 * (double)(k->seed % 5));
            round_tensor(&rc->t_d_out, out_dt, MP_DTYPE_F32);
            ok = upload(&pool, &rc->t_d_out, out_dt, false, &gc.t_d_out);
        }
        if (ok) {
            rc->t_out = host_like(&hp, &rc->out);
            ok = dev_tensor(&pool, out_dt, info.out, &gc.t_out);
        }
        if (ok && (ref.vt->forward_tangent(rc) != MP_OK || ref.vt->backward_tangent(rc) != MP_OK)) {
            snprintf(r->error, sizeof r->error, "CPU reference tangents: %s", mp_last_error());
            ok = false;
        }
        if (ok && ((st = k->vt->forward_tangent(ctx, &gc)) != MP_OK ||
                   (st = k->vt->backward_tangent(ctx, &gc)) != MP_OK)) {
            snprintf(r->error, sizeof r->error, "%s", mp_last_error());
            ok = false;
        }
        if (ok && (ce = cudaStreamSynchronize(ctx->stream)) != cudaSuccess) {
            snprintf(r->error, sizeof r->error, "%s tangents: %s", k->vt->name, cudaGetErrorString(ce));
            ok = false;
        }
    }

    /* compare everything the op wrote */
    ok = ok && compare(&pool, r, "out", &gc.out, &rc->out, false);
    for (int i = 0; i < k->n_in && ok; i++) {
        if (!gc.d_in[i].data) continue;
        char name[24];
        snprintf(name, sizeof name, "d_in%d", i);
        ok = compare(&pool, r, name, &gc.d_in[i], &rc->d_in[i], false);
    }
    for (int q = 0; q < ref.info.n_params && ok; q++) {
        char name[24];
        if (ref.info.params[q].trainable) {
            if (!gc.d_param[q].data) continue; /* no_param_grads */
            snprintf(name, sizeof name, "d_%s", ref.info.params[q].name);
            ok = compare(&pool, r, name, &gc.d_param[q], &rc->d_param[q], flat_params);
        } else { /* buffers, e.g. running stats updated in training */
            ok = compare(&pool, r, ref.info.params[q].name, &gc.param[q], &rc->param[q], flat_params);
        }
    }
    if (k->tangents) {
        ok = ok && compare(&pool, r, "t_out", &gc.t_out, &rc->t_out, false);
        for (int i = 0; i < k->n_in && ok; i++) {
            if (!gc.t_d_in[i].data) continue;
            char name[24];
            snprintf(name, sizeof name, "t_d_in%d", i);
            ok = compare(&pool, r, name, &gc.t_d_in[i], &rc->t_d_in[i], false);
        }
        for (int q = 0; q < ref.info.n_params && ok; q++) {
            if (!gc.t_d_param[q].data) continue;
            char name[24];
            snprintf(name, sizeof name, "t_d_%s", ref.info.params[q].name);
            ok = compare(&pool, r, name, &gc.t_d_param[q], &rc->t_d_param[q], flat_params);
        }
    }
    host_free_all(&hp);

    dev_free_all(&pool);
    if (k->vt->release && state) k->vt->release(state);
    op_fixture_free(&ref);
    if (!ok) return fail(r, MP_ERR_INTERNAL, r->error[0] ? r->error : "device error");
    r->ok = r->worst <= r->tol;
    return MP_OK;
}

static void dtypes_str(const cuda_op_case *k, char *buf, size_t len) {
    size_t at = 0;
    for (int i = 0; i < k->n_in && at < len; i++)
        if (!is_label(k, i))
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "," : "", mp_dtype_name(input_dtype(k, i)));
    if (at < len)
        snprintf(buf + at, len - at, "->%s/%s%s", mp_dtype_name(is_loss(k->kind) ? MP_DTYPE_F32 : k->storage),
                 mp_dtype_name(k->compute), k->tf32 ? "+tf32" : "");
}

bool cuda_op_check_print(mp_cuda_ctx *ctx, const cuda_op_case *k) {
    cuda_op_result r;
    mp_status st = cuda_op_check(ctx, k, &r);
    char dts[96], shape[64], line[768];
    dtypes_str(k, dts, sizeof dts);
    mp_shape_str(&k->in_shape[0], shape, sizeof shape);
    int at = snprintf(line, sizeof line, "%-4s %-28s %-22s %-16s %s", r.ok ? "ok" : "FAIL",
                      k->label ? k->label : k->vt->name, dts, shape, k->training ? "train" : "eval ");
    if (st != MP_OK) {
        printf("%s: error: %s\n", line, r.error);
        return false;
    }
    for (int j = 0; j < r.n && at < (int)sizeof line; j++)
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %.2g", r.name[j], r.err[j]);
    printf("%s (tol %.0e)\n", line, r.tol);
    fflush(stdout);
    return r.ok;
}
