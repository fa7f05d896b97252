/* test_cuda_conv_linear.c — conv2d, conv_transpose2d and linear on the GPU
 * (cuDNN / cuBLASLt, src/cuda) against the CPU reference in f64 (the op
 * harness), forward and backward, in fp32, tf32, fp16 and bf16:
 * ||gpu - ref|| / ||ref|| <= 1e-5 fp32, 2e-3 tf32, 1e-2 fp16/bf16 for the
 * output, the input gradient and the parameter gradients (f32). Every device
 * output is poisoned with NaN (0xff bytes) before the call that must write
 * it. Cases cover groups 1 and depthwise, stride 2, padding, dilation, bias,
 * 3 and 13 channels, output_padding, and mixed dtypes (f32 input into a
 * low-precision node; f32 logits out of a low-precision linear).
 * f32 weight gradients (cfg.weight_grad_unrounded) in f16 and bf16: against
 * the f64 reference on the values the GPU sees (input, weight and output
 * gradient rounded to the compute dtype), dW is the f32 sum within 2e-5;
 * without the flag a convolution's is rounded: more than 4e-5 off.
 * Depthwise 3x3 cases, and the forward and backward-filter of stems (few
 * input channels), run on our kernels where they win the timed search
 * (conv_own.h); under MIXPREC_CONV_OWN=force every pass they take must be
 * ours (checked), and every result is held to the same tolerances.
 * Needs a GPU: without one it prints why and exits 2. Not in ctest. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "core/rng.h"
#include "cuda/conv_cudnn.h"
#include "cuda/conv_own.h"
#include "cuda/cuda_op.h"
#include "op_harness.h"

#define CUDA_OK(call)                                                                               \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

typedef struct {
    const char *name;
    mp_dtype compute;
    bool tf32;
    double tol;
} precision;

static const precision precisions[] = {
    {"fp32", MP_DTYPE_F32, false, 1e-5},
    {"tf32", MP_DTYPE_F32, true, 2e-3},
    {"fp16", MP_DTYPE_F16, false, 1e-2},
    {"bf16", MP_DTYPE_BF16, false, 1e-2},
};

typedef struct {
    const char *label;
    mp_op_kind kind;
    mp_op_attr attr;
    mp_shape in;
    bool in_f32;  /* input stored f32 whatever the compute dtype (amp's first conv) */
    bool out_f32; /* output stored f32 (logits) */
} test_case;

/* ---- host <-> device, NCHW <-> NHWC ----------------------------------------- */

static void host_store(void *dst, mp_dtype dt, int64_t i, double v) {
    const float f = (float)v;
    mp_store_f32((char *)dst + i * (int64_t)mp_dtype_size(dt), dt, &f, 1);
}

static double host_load(const void *src, mp_dtype dt, int64_t i) {
    float f = 0;
    mp_load_f32(&f, (const char *)src + i * (int64_t)mp_dtype_size(dt), dt, 1);
    return f;
}

/* Position of NCHW element i in NHWC memory (identity for non-4-D). */
static int64_t nhwc_index(const mp_shape *s, int64_t i) {
    if (s->ndim != 4) return i;
    const int64_t C = s->dims[1], H = s->dims[2], W = s->dims[3];
    const int64_t w = i % W, h = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
    return ((n * H + h) * W + w) * C + c;
}

#define MAX_BUFS 64
static void *bufs[MAX_BUFS];
static int n_bufs;

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 64));
    MP_ASSERT(n_bufs < MAX_BUFS);
    bufs[n_bufs++] = p;
    return p;
}

static void dev_free_all(void) {
    for (int i = 0; i < n_bufs; i++) cudaFree(bufs[i]);
    n_bufs = 0;
}

static size_t tensor_bytes(const mp_shape *s, mp_dtype dt) { return (size_t)mp_shape_numel(s) * mp_dtype_size(dt); }

/* Device copy of a f64 reference tensor in dt; 4-D activations go NHWC. */
static mp_tensor upload(const mp_tensor *ref, mp_dtype dt, bool activation) {
    const int64_t n = mp_tensor_numel(ref);
    void *h = malloc(tensor_bytes(&ref->shape, dt) + 1);
    MP_ASSERT(h);
    for (int64_t i = 0; i < n; i++)
        host_store(h, dt, activation ? nhwc_index(&ref->shape, i) : i, ((const double *)ref->data)[i]);
    mp_tensor t = {dt, ref->shape, dev_alloc(tensor_bytes(&ref->shape, dt))};
    CUDA_OK(cudaMemcpy(t.data, h, tensor_bytes(&ref->shape, dt), cudaMemcpyHostToDevice));
    CUDA_OK(cudaDeviceSynchronize()); /* a pageable copy may return before its DMA lands; the ops' stream is
                                         non-blocking */
    free(h);
    return t;
}

/* A device tensor poisoned with NaN (all bits set is NaN in f32, f16, bf16). */
static mp_tensor poisoned(mp_shape s, mp_dtype dt) {
    mp_tensor t = {dt, s, dev_alloc(tensor_bytes(&s, dt))};
    CUDA_OK(cudaMemset(t.data, 0xff, tensor_bytes(&s, dt)));
    CUDA_OK(cudaDeviceSynchronize()); /* the legacy stream's memset is not ordered with the ops' stream */
    return t;
}

/* ||dev - ref|| / ||ref|| (inf when anything is not finite). */
static double rel_err(const mp_tensor *dev, const mp_tensor *ref, bool activation) {
    const int64_t n = mp_tensor_numel(ref);
    void *h = malloc(tensor_bytes(&dev->shape, dev->dtype) + 1);
    MP_ASSERT(h);
    CUDA_OK(cudaMemcpy(h, dev->data, tensor_bytes(&dev->shape, dev->dtype), cudaMemcpyDeviceToHost));
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = host_load(h, dev->dtype, activation ? nhwc_index(&ref->shape, i) : i);
        const double r = ((const double *)ref->data)[i];
        d2 += (a - r) * (a - r);
        r2 += r * r;
    }
    free(h);
    return isfinite(d2) ? sqrt(d2) / fmax(sqrt(r2), 1e-30) : INFINITY;
}

/* ---- one case in one precision ------------------------------------------------- */

static const mp_cuda_op_vtable *gpu_vtable(mp_op_kind k) {
    return k == MP_OP_CONV2D ? &mp_cuda_conv2d_vt : k == MP_OP_CONV_TRANSPOSE2D ? &mp_cuda_conv_transpose2d_vt
                                                                                : &mp_cuda_linear_vt;
}

static void report(const test_case *tc, const precision *p, const char *what, double err) {
    const bool ok = err <= p->tol;
    printf("  %-44s %-5s %-9s rel.err %-9.3g %s\n", tc->label, p->name, what, err, ok ? "ok" : "FAIL");
    CHECK(ok, "%s %s %s: rel.err %.3g > %.0e", tc->label, p->name, what, err, p->tol);
}

/* The weight-gradient check of one run: unrounded (cfg.weight_grad_unrounded) or not. */
typedef struct {
    bool unrounded;
} dw_check;

/* f64 values rounded to dt, in place (what the GPU gets when they are uploaded in dt). */
static void round_ref(mp_tensor *t, mp_dtype dt) {
    double *v = (double *)t->data;
    for (int64_t i = 0; i < mp_tensor_numel(t); i++) {
        float h[1];
        host_store(h, dt, 0, v[i]);
        v[i] = host_load(h, dt, 0);
    }
}

/* dw: the weight gradient's rel. error against the reference on rounded values. */
static void report_dw(const test_case *tc, const precision *p, const dw_check *dc, const mp_conv_cudnn *st,
                      double err) {
    const bool linear = tc->kind == MP_OP_LINEAR, f32_dw = linear || (st->dw_dt == MP_DTYPE_F32 && st->dw32);
    const char *path = linear ? "cuBLASLt f32 D" : f32_dw ? "f32 copies, TF32" : "dW rounded first";
    /* f32 sums: ~1e-6; rounded to f16 / bf16: ~1.4e-4 / ~1.1e-3 (half an ulp, uniform, rms) */
    const double f32_tol = 2e-5, rounded_min = 4e-5;
    bool ok;
    if (!dc->unrounded) ok = linear ? err <= f32_tol : err > rounded_min && err <= p->tol;
    else ok = f32_dw && err <= f32_tol;
    printf("  %-44s %-5s d_weight %-9s rel.err %-9.3g (%s) %s\n", tc->label, p->name,
           dc->unrounded ? "unrounded" : "rounded", err, path, ok ? "ok" : "FAIL");
    CHECK(ok, "%s %s: weight gradient (%s asked, %s) rel.err %.3g against the reference on rounded values",
          tc->label, p->name, dc->unrounded ? "unrounded" : "rounded", path, err);
}

/* A second consumer's gradient already in d_in (the executor's d_in_add):
 * d_in is filled with an independent tensor G (random, of dx's scale,
 * rounded to d_in's dtype) and backward run again must leave G + dx there
 * (an op that ignored G, or wrote a multiple of dx, fails), where the op
 * says it adds; where an op that can add does not for this node (its input
 * cast), asking it to is refused by name (never a silent overwrite). Ops
 * without adds_input_grad (linear) are never asked: the executor adds their
 * scratch result. */
static void check_adding_dx(mp_cuda_ctx *ctx, const test_case *tc, const precision *p, const mp_cuda_op_vtable *vt,
                            void *state, mp_op_call *c, op_fixture *ref, uint64_t seed, bool must_add) {
    if (!vt->adds_input_grad) return;
    const bool adds = vt->adds_input_grad(state, 0);
    mp_tensor *want = &ref->call.d_in[0]; /* f64, NCHW: becomes G + dx */
    const int64_t n = mp_tensor_numel(want);
    double *w = (double *)want->data, rms = 0;
    for (int64_t i = 0; i < n; i++) rms += w[i] * w[i];
    rms = sqrt(rms / (double)(n ? n : 1));
    mp_rng rng;
    mp_rng_seed(&rng, seed ^ 0xADD);
    mp_tensor g = *want;
    g.data = malloc((size_t)n * sizeof(double));
    MP_ASSERT(g.data);
    unsigned char tmp[8];
    for (int64_t i = 0; i < n; i++) { /* G as d_in's dtype holds it */
        host_store(tmp, c->d_in[0].dtype, 0, rms * mp_rng_normal(&rng));
        ((double *)g.data)[i] = host_load(tmp, c->d_in[0].dtype, 0);
    }
    const mp_tensor g_dev = upload(&g, c->d_in[0].dtype, true);
    const mp_tensor written = c->d_in[0];
    c->d_in[0].data = g_dev.data;
    c->d_in_add = 1;
    const mp_status s = vt->backward(ctx, c);
    c->d_in_add = 0;
    CUDA_OK(cudaStreamSynchronize(ctx->stream));
    if (must_add && tc->kind == MP_OP_CONV2D && !tc->in_f32 && !mp_env_get()->no_cudnn_add_dx)
        CHECK(adds, "%s %s: conv2d's backward-data does not add into d_in", tc->label, p->name);
    if (!adds) {
        CHECK(s == MP_ERR_INTERNAL && strstr(mp_last_error(), "add"), "%s %s: adding into d_in where it cannot: %d %s",
              tc->label, p->name, (int)s, mp_last_error());
        mp_clear_error();
    } else {
        CHECK(s == MP_OK, "%s %s: backward adding into d_in: %s", tc->label, p->name, mp_last_error());
        for (int64_t i = 0; i < n; i++) w[i] += ((const double *)g.data)[i];
        if (s == MP_OK) report(tc, p, "G + d_in", rel_err(&c->d_in[0], want, true));
    }
    c->d_in[0] = written;
    free(g.data);
}

static void run_case(mp_cuda_ctx *ctx, const test_case *tc, const precision *p, uint64_t seed, const dw_check *dc) {
    /* the oracle: f64 reference forward + backward on the same values */
    op_fixture ref;
    mp_status s = op_fixture_init(&ref, tc->kind, tc->attr, 1, &tc->in, NULL, MP_DTYPE_F64, MP_IMPL_REF, true);
    CHECK(s == MP_OK, "%s: reference init: %s", tc->label, mp_last_error());
    if (s != MP_OK) return;
    op_fixture_randomize(&ref, seed);
    if (dc) { /* the very values the GPU computes with */
        round_ref(&ref.call.in[0], p->compute);
        for (int k = 0; k < ref.info.n_params; k++) round_ref(&ref.call.param[k], p->compute);
        round_ref(&ref.call.d_out, p->compute); /* an f32 d_out is cast to cd for the GEMM too */
    }
    MP_ASSERT(ref.vt->forward(&ref.call) == MP_OK && ref.vt->backward(&ref.call) == MP_OK);

    const mp_dtype cd = p->compute;
    const mp_dtype in_dt = tc->in_f32 ? MP_DTYPE_F32 : cd, out_dt = tc->out_f32 ? MP_DTYPE_F32 : cd;
    mp_cuda_node_cfg cfg = {.storage = out_dt, .compute = cd, .tf32 = p->tf32, .training = true,
                            .input_grad = true, .batch = tc->in.dims[0], .weight_grad_unrounded = dc && dc->unrounded};
    cfg.in_dtype[0] = in_dt;
    mp_op_desc desc = {tc->kind, tc->label, tc->attr};
    const mp_cuda_op_vtable *vt = gpu_vtable(tc->kind);
    void *state = NULL;
    size_t ws_bytes = 0, saved_bytes = ref.info.saved_bytes;
    s = vt->prepare(ctx, &desc, &ref.info, &cfg, &state, &ws_bytes, &saved_bytes);
    CHECK(s == MP_OK, "%s %s: prepare: %s", tc->label, p->name, mp_last_error());
    if (s != MP_OK) {
        op_fixture_free(&ref);
        return;
    }

    if (tc->kind != MP_OP_LINEAR) { /* which kernels run each pass */
        const mp_conv_cudnn *st = (const mp_conv_cudnn *)state;
        const mp_conv_cudnn *fst = st->dw32 ? st->dw32 : st; /* the state that computes dW */
        const bool fwd = st->algo[MP_CONV_FWD].own, bwd = st->algo[MP_CONV_BWD_DATA].own,
                   flt = fst->algo[MP_CONV_BWD_FILTER].own;
        if (fwd || bwd || flt) printf("  %-44s %-5s ours: forward %d, backward-data %d, backward-filter %d\n",
                                      tc->label, p->name, fwd, bwd, flt);
        if (mp_env_get()->conv_own == 2) { /* every pass a family takes is ours (dW's in its own state) */
            const bool want_fwd = mp_own_family_of(&st->g, cd, MP_CONV_FWD) != MP_OWN_NONE,
                       want_bwd = mp_own_family_of(&st->g, cd, MP_CONV_BWD_DATA) != MP_OWN_NONE,
                       want_flt = mp_own_family_of(&fst->g, fst->cd, MP_CONV_BWD_FILTER) != MP_OWN_NONE;
            CHECK(fwd == want_fwd && bwd == want_bwd && flt == want_flt,
                  "%s %s: MIXPREC_CONV_OWN=force: ours on forward %d, backward-data %d, backward-filter %d; "
                  "our kernels take %d %d %d", tc->label, p->name, fwd, bwd, flt, want_fwd, want_bwd, want_flt);
        }
    }

    mp_op_call c = {0};
    c.desc = &desc;
    c.info = &ref.info;
    c.state = state;
    c.training = true;
    c.n_in = 1;
    c.in[0] = upload(&ref.call.in[0], in_dt, true);
    c.out = poisoned(ref.info.out, out_dt);
    for (int k = 0; k < ref.info.n_params; k++) {
        c.param[k] = upload(&ref.call.param[k], cd, false); /* f32 master or its low-precision cast */
        c.d_param[k] = poisoned(ref.info.params[k].shape, MP_DTYPE_F32);
    }
    c.d_out = upload(&ref.call.d_out, out_dt, true);
    c.d_in[0] = poisoned(tc->in, in_dt);
    /* the workspace is only promised 64-byte alignment: test with exactly that */
    c.workspace = (char *)dev_alloc(ws_bytes + 64) + 64;
    c.saved = saved_bytes ? dev_alloc(saved_bytes) : NULL;

    s = vt->forward(ctx, &c);
    CHECK(s == MP_OK, "%s %s: forward: %s", tc->label, p->name, mp_last_error());
    CUDA_OK(cudaStreamSynchronize(ctx->stream));
    if (s == MP_OK && !dc) report(tc, p, "out", rel_err(&c.out, &ref.call.out, true));
    s = vt->backward(ctx, &c);
    CHECK(s == MP_OK, "%s %s: backward: %s", tc->label, p->name, mp_last_error());
    CUDA_OK(cudaStreamSynchronize(ctx->stream));
    if (s == MP_OK && dc) {
        report_dw(tc, p, dc, (const mp_conv_cudnn *)state, rel_err(&c.d_param[0], &ref.call.d_param[0], false));
        /* the zoo's shapes, on tensor-core engines: an engine may lack an adding plan (the executor then
         * sums scratch), so there adding is checked where the op says it adds, refusal where not */
        check_adding_dx(ctx, tc, p, vt, state, &c, &ref, seed, false);
    } else if (s == MP_OK) {
        report(tc, p, "d_in", rel_err(&c.d_in[0], &ref.call.d_in[0], true));
        for (int k = 0; k < ref.info.n_params; k++) {
            char what[32];
            snprintf(what, sizeof what, "d_%s", ref.info.params[k].name);
            report(tc, p, what, rel_err(&c.d_param[k], &ref.call.d_param[k], false));
        }
        check_adding_dx(ctx, tc, p, vt, state, &c, &ref, seed, true);
    }
    vt->release(state);
    dev_free_all();
    op_fixture_free(&ref);
}

static mp_op_attr conv(int out, int k, int stride, int pad, int dil, int groups, int out_pad, bool bias) {
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.conv = (mp_conv_opts){.out_channels = out, .kernel = k, .stride = stride, .padding = pad, .dilation = dil,
                            .groups = groups, .output_padding = out_pad, .bias = bias};
    return a;
}

static mp_op_attr linear(int out, bool bias) {
    mp_op_attr a;
    memset(&a, 0, sizeof a);
    a.linear = (mp_linear_opts){.out_features = out, .bias = bias};
    return a;
}

int main(void) {
    const int n_dev = mp_cuda_device_count();
    mp_cuda_ctx *ctx = NULL;
    if (n_dev == 0 || mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        printf("test_cuda_conv_linear: no GPU: %s\n", n_dev ? mp_last_error() : mp_cuda_device_list());
        return 2;
    }
    printf("test_cuda_conv_linear on %s (sm_%d%d, %d SMs): devices %s\n", ctx->name, ctx->sm_major, ctx->sm_minor,
           ctx->sm_count, mp_cuda_device_list());

    /* a missing device names the ones found */
    mp_cuda_ctx *bad = NULL;
    CHECK_ERR(mp_cuda_ctx_create(n_dev + 2, &bad), MP_ERR_INVALID_ARG, "no such GPU", "found", "0: ");

    const test_case cases[] = {
        {"conv2d C3->16 k3 s1 p1 bias", MP_OP_CONV2D, conv(16, 3, 1, 1, 1, 1, 0, true), {4, {2, 3, 9, 9}}, 0, 0},
        {"conv2d C13->24 k3 s2 p1 bias", MP_OP_CONV2D, conv(24, 3, 2, 1, 1, 1, 0, true), {4, {2, 13, 11, 11}}, 0, 0},
        {"conv2d depthwise C13 x2 k3 s2 p1 bias", MP_OP_CONV2D, conv(26, 3, 2, 1, 1, 13, 0, true),
         {4, {2, 13, 10, 10}}, 0, 0},
        {"conv2d depthwise C16 k3 s1 p1", MP_OP_CONV2D, conv(16, 3, 1, 1, 1, 16, 0, false), {4, {3, 16, 8, 8}}, 0, 0},
        {"conv2d depthwise C24 k3 s1 p1 bias, W 9", MP_OP_CONV2D, conv(24, 3, 1, 1, 1, 24, 0, true),
         {4, {2, 24, 7, 9}}, 0, 0},
        {"conv2d depthwise C32 k3 s2 p1, 9x10", MP_OP_CONV2D, conv(32, 3, 2, 1, 1, 32, 0, false), {4, {2, 32, 9, 10}},
         0, 0},
        {"conv2d depthwise C16 k3 s1 p0", MP_OP_CONV2D, conv(16, 3, 1, 0, 1, 16, 0, false), {4, {2, 16, 6, 7}}, 0, 0},
        {"conv2d depthwise C8 k3 s2 p2", MP_OP_CONV2D, conv(8, 3, 2, 2, 1, 8, 0, false), {4, {3, 8, 5, 6}}, 0, 0},
        {"conv2d depthwise C16 k3 s1 p1, 19x5 (bands of 8, 8, 3 rows)", MP_OP_CONV2D,
         conv(16, 3, 1, 1, 1, 16, 0, false),
         {4, {2, 16, 19, 5}}, 0, 0},
        {"conv2d depthwise C8 k3 s2 p0, 9x8", MP_OP_CONV2D, conv(8, 3, 2, 0, 1, 8, 0, false), {4, {2, 8, 9, 8}}, 0, 0},
        /* the stride-1 forward's strips of 4 outputs ending in 2 and in 3 (its padding 2 too) */
        {"conv2d depthwise C16 k3 s1 p2, 5x4 (output 7x6)", MP_OP_CONV2D, conv(16, 3, 1, 2, 1, 16, 0, false),
         {4, {2, 16, 5, 4}}, 0, 0},
        {"conv2d depthwise C8 k3 s1 p1, 5x11", MP_OP_CONV2D, conv(8, 3, 1, 1, 1, 8, 0, false), {4, {2, 8, 5, 11}}, 0,
         0},
        {"conv2d depthwise C8 k3 s2 p1, 21x6 (bands of 8, 3 rows)", MP_OP_CONV2D, conv(8, 3, 2, 1, 1, 8, 0, false),
         {4, {2, 8, 21, 6}}, 0, 0},
        /* stems (conv_stem.h): 16 to 128 output channels (2 to 16 blocks of the filter's sums), 1 to 4 input
           channels, 16 to 27 taps, tiles of 128 pixels cut short; the last one more tiles than blocks */
        {"conv2d C3->64 k3 s1 p1, 13x11 (stem, f32 input)", MP_OP_CONV2D, conv(64, 3, 1, 1, 1, 1, 0, false),
         {4, {3, 3, 13, 11}}, 1, 0},
        {"conv2d C3->32 k3 s2 p0, 12x9 (stem)", MP_OP_CONV2D, conv(32, 3, 2, 0, 1, 1, 0, false), {4, {2, 3, 12, 9}}, 0,
         0},
        {"conv2d C1->48 k5 s1 p2 bias (stem)", MP_OP_CONV2D, conv(48, 5, 1, 2, 1, 1, 0, true), {4, {2, 1, 10, 10}}, 0,
         0},
        {"conv2d C2->128 k3 p2 dil2 (stem)", MP_OP_CONV2D, conv(128, 3, 1, 2, 2, 1, 0, false), {4, {2, 2, 9, 9}}, 0,
         0},
        {"conv2d C4->16 k2 s1 p1 (stem)", MP_OP_CONV2D, conv(16, 2, 1, 1, 1, 1, 0, false), {4, {3, 4, 7, 8}}, 0, 0},
        {"conv_transpose2d C32->1 k4 s2 p1 (a generator's image)", MP_OP_CONV_TRANSPOSE2D,
         conv(1, 4, 2, 1, 1, 1, 0, false), {4, {2, 32, 6, 5}}, 0, 0},
        {"conv2d C3->64 k3 s1 p1, 150x32x32 (stem, tiles > blocks)", MP_OP_CONV2D, conv(64, 3, 1, 1, 1, 1, 0, false),
         {4, {150, 3, 32, 32}}, 0, 0},
        {"conv2d C16->32 k3 p2 dil2 g2", MP_OP_CONV2D, conv(32, 3, 1, 2, 2, 2, 0, false), {4, {2, 16, 8, 8}}, 0, 0},
        {"conv2d C8->16 k5 s2 p2 bias (f32 input)", MP_OP_CONV2D, conv(16, 5, 2, 2, 1, 1, 0, true),
         {4, {2, 8, 12, 12}}, 1, 0},
        {"conv_transpose2d C13->8 k3 s2 p1 op1 bias", MP_OP_CONV_TRANSPOSE2D, conv(8, 3, 2, 1, 1, 1, 1, true),
         {4, {2, 13, 7, 7}}, 0, 0},
        {"conv_transpose2d C16->8 k4 s2 p1 g2", MP_OP_CONV_TRANSPOSE2D, conv(8, 4, 2, 1, 1, 2, 0, false),
         {4, {2, 16, 5, 5}}, 0, 0},
        {"linear 13->10 bias", MP_OP_LINEAR, linear(10, true), {2, {7, 13, 1, 1}}, 0, 0},
        {"linear 96->24 bias", MP_OP_LINEAR, linear(24, true), {2, {64, 96, 1, 1}}, 0, 0},
        {"linear 64->10 no bias", MP_OP_LINEAR, linear(10, false), {2, {33, 64, 1, 1}}, 0, 0},
        {"linear 40->10 bias (f32 logits)", MP_OP_LINEAR, linear(10, true), {2, {16, 40, 1, 1}}, 0, 1},
        {"linear 40->16 bias (f32 in, f32 out)", MP_OP_LINEAR, linear(16, true), {2, {16, 40, 1, 1}}, 1, 1},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++)
        for (size_t j = 0; j < sizeof precisions / sizeof precisions[0]; j++)
            run_case(ctx, &cases[i], &precisions[j], 1000 + (uint64_t)i, NULL);

    /* f32 weight gradients (mp_plan_opts.f32_weight_grads) on the cases above and some of the zoo's shapes */
    printf("weight gradients: f32 sums (weight_grad_unrounded) or rounded to the compute dtype (default)\n");
    const test_case zoo[] = {
        {"conv2d C64->64 k3 s1 p1 (cnn10, resnet)", MP_OP_CONV2D, conv(64, 3, 1, 1, 1, 1, 0, false),
         {4, {4, 64, 8, 8}}, 0, 0},
        {"conv2d C64->128 k3 s2 p1 (resnet stage)", MP_OP_CONV2D, conv(128, 3, 2, 1, 1, 1, 0, false),
         {4, {4, 64, 8, 8}}, 0, 0},
        {"conv2d C128->256 k1 s2 (resnet shortcut)", MP_OP_CONV2D, conv(256, 1, 2, 0, 1, 1, 0, false),
         {4, {4, 128, 8, 8}}, 0, 0},
        {"conv2d depthwise C96 k3 s1 p1 (mobilenetv2)", MP_OP_CONV2D, conv(96, 3, 1, 1, 1, 96, 0, false),
         {4, {4, 96, 8, 8}}, 0, 0},
        {"conv2d depthwise C144 k3 s2 p1 (mobilenetv2)", MP_OP_CONV2D, conv(144, 3, 2, 1, 1, 144, 0, false),
         {4, {4, 144, 8, 8}}, 0, 0},
        {"conv_transpose2d C64->32 k4 s2 p1 (acgan)", MP_OP_CONV_TRANSPOSE2D, conv(32, 4, 2, 1, 1, 1, 0, false),
         {4, {4, 64, 7, 7}}, 0, 0},
    };
    const dw_check unrounded = {true}, rounded = {false};
    for (size_t j = 2; j < sizeof precisions / sizeof precisions[0]; j++) { /* fp16, bf16 */
        for (size_t i = 0; i < sizeof zoo / sizeof zoo[0]; i++) {
            run_case(ctx, &zoo[i], &precisions[j], 2000 + (uint64_t)i, &unrounded);
            run_case(ctx, &zoo[i], &precisions[j], 2000 + (uint64_t)i, &rounded);
        }
        for (int i = 0; i < n_cases; i++) run_case(ctx, &cases[i], &precisions[j], 3000 + (uint64_t)i, &unrounded);
    }
    mp_cuda_ctx_destroy(ctx);
    return test_summary("test_cuda_conv_linear");
}
