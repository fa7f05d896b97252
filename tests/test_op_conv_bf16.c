/* test_op_conv_bf16.c — conv2d and conv_transpose2d on bf16 tensors through
 * oneDNN (what native bf16 plan nodes run), in both maths of
 * bf16_conv_math.h: oneDNN's bf16 primitives (where the CPU has bf16
 * kernels) and f32 primitives between bf16 tensors (every CPU with oneDNN).
 * Against the f32 reference kernels on the same bf16-rounded inputs,
 * weights and output gradients: outputs and input gradients within bf16
 * rounding, weight and bias gradients (f32) within f32 accumulation for the
 * f32 math. Odd sizes, strides, groups, padding, bias on and off; outputs
 * poisoned first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "ops/bf16_conv_math.h"

typedef struct {
    mp_op_kind kind;
    int n, cin, h, w, cout, k, stride, pad, groups, outpad;
    bool bias;
} conv_case;

#define CV(n, ci, h, w, co, k, s, p, g, b) {MP_OP_CONV2D, n, ci, h, w, co, k, s, p, g, 0, b}
#define CT(n, ci, h, w, co, k, s, p, g, op, b) {MP_OP_CONV_TRANSPOSE2D, n, ci, h, w, co, k, s, p, g, op, b}

static const conv_case cases[] = {
    CV(3, 1, 13, 11, 16, 3, 1, 1, 1, false),   /* one input channel (cnn10's first layer: plain layouts) */
    CV(2, 3, 9, 7, 5, 3, 2, 1, 1, true),       /* odd channels, stride 2, bias */
    CV(2, 24, 10, 9, 40, 3, 1, 1, 1, true),    /* channel blocks with tails */
    CV(1, 8, 12, 12, 8, 5, 1, 2, 2, false),    /* groups 2, kernel 5 */
    CV(2, 16, 7, 7, 16, 3, 1, 1, 16, true),    /* depthwise */
    CV(4, 32, 14, 14, 64, 1, 2, 0, 1, false),  /* 1x1, stride 2 */
    CT(2, 16, 5, 6, 8, 2, 2, 0, 1, 0, true),   /* 2x2 upsampling */
    CT(1, 6, 4, 5, 9, 3, 2, 1, 1, 1, false),   /* output_padding */
};

static float round_bf16(float v) { return mp_bf16_to_f32(mp_f32_to_bf16(v)); }

/* f32 array -> bf16 copy (malloc) and the f32 values rounded in place. */
static mp_bf16 *to_bf16(float *v, int64_t n) {
    mp_bf16 *b = malloc((size_t)n * sizeof *b);
    for (int64_t i = 0; i < n; i++) {
        v[i] = round_bf16(v[i]);
        b[i] = mp_f32_to_bf16(v[i]);
    }
    return b;
}

/* ||a - b|| / ||b|| with a in bf16 or f32 (a_bf16 non-NULL: bf16). */
static double rel_err(const mp_bf16 *a_bf16, const float *a_f32, const float *b, int64_t n) {
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = a_bf16 ? mp_bf16_to_f32(a_bf16[i]) : a_f32[i];
        d2 += (x - b[i]) * (x - b[i]);
        r2 += (double)b[i] * b[i];
    }
    return isfinite(d2) ? sqrt(d2 / fmax(r2, 1e-30)) : INFINITY;
}

static void run_case(const conv_case *cc, mp_bf16_math math) {
    char name[160];
    snprintf(name, sizeof name, "%s N%d C%d %dx%d -> C%d k%d s%d p%d g%d op%d%s, %s",
             cc->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d", cc->n, cc->cin, cc->h, cc->w, cc->cout,
             cc->k, cc->stride, cc->pad, cc->groups, cc->outpad, cc->bias ? " bias" : "", mp_bf16_math_name(math));
    mp_op_attr a = {.conv = {.out_channels = cc->cout, .kernel = cc->k, .stride = cc->stride, .padding = cc->pad,
                             .dilation = 1, .groups = cc->groups, .output_padding = cc->outpad, .bias = cc->bias}};
    mp_shape s = mp_shape4(cc->n, cc->cin, cc->h, cc->w);
    op_fixture ref;
    MP_ASSERT(op_fixture_init(&ref, cc->kind, a, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK);
    op_fixture_randomize(&ref, 11);
    mp_op_call *r = &ref.call;
    const int64_t nx = mp_tensor_numel(&r->in[0]), ny = mp_tensor_numel(&r->out),
                  nw = mp_tensor_numel(&r->param[0]), nb = cc->bias ? mp_tensor_numel(&r->param[1]) : 0;
    mp_bf16 *xb = to_bf16(r->in[0].data, nx), *wb = to_bf16(r->param[0].data, nw), *dyb = to_bf16(r->d_out.data, ny);
    MP_ASSERT(ref.vt->forward(r) == MP_OK && ref.vt->backward(r) == MP_OK);

    /* the same op prepared for bf16 tensors */
    mp_bf16_math_set(math);
    mp_op_info info = ref.info;
    info.workspace_bytes = 0;
    void *state = NULL;
    mp_status st = ref.vt->prepare(&ref.desc, &info, MP_DTYPE_BF16, MP_IMPL_ONEDNN, true, &state);
    mp_bf16_math_set(MP_BF16_MATH_AUTO);
    CHECK(st == MP_OK, "%s: prepare: %s", name, mp_last_error());
    if (!state) { /* no bf16 kernels on this CPU (DOT only): the plan emulates such nodes */
        CHECK(math == MP_BF16_MATH_DOT, "%s: f32 math must always build primitives", name);
        free(xb), free(wb), free(dyb);
        op_fixture_free(&ref);
        return;
    }
    mp_bf16 *yb = malloc((size_t)ny * sizeof *yb), *dxb = malloc((size_t)nx * sizeof *dxb);
    float *dw = malloc((size_t)nw * sizeof *dw), *db = malloc((size_t)(nb ? nb : 1) * sizeof *db);
    memset(yb, 0xFF, (size_t)ny * sizeof *yb); /* NaN: every output must be written */
    memset(dxb, 0xFF, (size_t)nx * sizeof *dxb);
    memset(dw, 0xFF, (size_t)nw * sizeof *dw);
    void *ws = aligned_alloc(64, MP_ALIGN64(info.workspace_bytes + 64));
    mp_op_call c = *r;
    c.info = &info;
    c.state = state;
    c.impl = MP_IMPL_ONEDNN;
    c.workspace = ws;
    c.in[0] = (mp_tensor){MP_DTYPE_BF16, r->in[0].shape, xb};
    c.param[0] = (mp_tensor){MP_DTYPE_BF16, r->param[0].shape, wb};
    c.out = (mp_tensor){MP_DTYPE_BF16, r->out.shape, yb};
    c.d_out = (mp_tensor){MP_DTYPE_BF16, r->out.shape, dyb};
    c.d_in[0] = (mp_tensor){MP_DTYPE_BF16, r->in[0].shape, dxb};
    c.d_param[0] = (mp_tensor){MP_DTYPE_F32, r->param[0].shape, dw};
    if (cc->bias) c.d_param[1] = (mp_tensor){MP_DTYPE_F32, r->param[1].shape, db};
    CHECK(ref.vt->forward(&c) == MP_OK && ref.vt->backward(&c) == MP_OK, "%s: %s", name, mp_last_error());

    /* bf16 outputs: one rounding (2^-9 relative) from the f32 result */
    const bool f32m = math == MP_BF16_MATH_F32;
    const double e_y = rel_err(yb, NULL, r->out.data, ny), e_dx = rel_err(dxb, NULL, r->d_in[0].data, nx);
    const double e_dw = rel_err(NULL, dw, r->d_param[0].data, nw);
    const double e_db = cc->bias ? rel_err(NULL, db, r->d_param[1].data, nb) : 0;
    if (getenv("MP_TEST_VERBOSE"))
        printf("%-90s y %.2g dx %.2g dw %.2g db %.2g\n", name, e_y, e_dx, e_dw, e_db);
    CHECK(e_y < 4e-3, "%s: output rel. err %g", name, e_y);
    CHECK(e_dx < 4e-3, "%s: input gradient rel. err %g", name, e_dx);
    /* weight/bias gradients stay f32: the f32 math adds the same products in f32 */
    CHECK(e_dw < (f32m ? 1e-5 : 4e-3), "%s: weight gradient rel. err %g", name, e_dw);
    CHECK(e_db < (f32m ? 1e-5 : 4e-3), "%s: bias gradient rel. err %g", name, e_db);
    ref.vt->release(state);
    free(ws), free(yb), free(dxb), free(dw), free(db), free(xb), free(wb), free(dyb);
    op_fixture_free(&ref);
}

int main(void) {
    if (!mp_onednn_available()) {
        printf("test_op_conv_bf16: built without oneDNN, nothing to test\n");
        return test_summary("test_op_conv_bf16");
    }
    printf("bf16 dot products at %.2fx the f32 FMA rate; bf16 convolutions here: %s\n", mp_bf16_dot_rate(),
           mp_bf16_math_name(mp_bf16_math_current()));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], MP_BF16_MATH_DOT);
        run_case(&cases[i], MP_BF16_MATH_F32);
    }
    return test_summary("test_op_conv_bf16");
}
