/* test_op_conv.c — conv2d and conv_transpose2d: hand-computed examples that
 * pin PyTorch's conventions, f64 gradient checks of the reference kernels
 * over strides, padding, dilation, groups, depthwise, kernels 1/2/3/5, bias
 * on/off and output_padding, the backward contract (overwrite, NULL
 * gradients; REF, ONEDNN and AUTO), REF vs oneDNN in f32 (also at cnn10
 * shapes), AUTO taking oneDNN at cnn10 shapes, and shape errors.
 * MP_TEST_VERBOSE=1 prints every error measured. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"

static int verbose;

typedef struct {
    mp_op_kind kind;
    int n, cin, h, w, cout, k, stride, pad, dil, groups, outpad;
    bool bias;
} conv_case;

static mp_op_attr attr_of(const conv_case *c) {
    return (mp_op_attr){.conv = {.out_channels = c->cout, .kernel = c->k, .stride = c->stride,
                                 .padding = c->pad, .dilation = c->dil, .groups = c->groups,
                                 .output_padding = c->outpad, .bias = c->bias}};
}

static const char *case_str(const conv_case *c, char *buf, size_t len) {
    snprintf(buf, len, "%s N%d C%d %dx%d -> C%d k%d s%d p%d d%d g%d op%d%s",
             c->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d", c->n, c->cin, c->h, c->w, c->cout,
             c->k, c->stride, c->pad, c->dil, c->groups, c->outpad, c->bias ? " bias" : "");
    return buf;
}

#define CV(n, ci, h, w, co, k, s, p, d, g, b) {MP_OP_CONV2D, n, ci, h, w, co, k, s, p, d, g, 0, b}
#define CT(n, ci, h, w, co, k, s, p, d, g, op, b) {MP_OP_CONV_TRANSPOSE2D, n, ci, h, w, co, k, s, p, d, g, op, b}

/* Small shapes for the f64 gradient check (every corner of the index maps). */
static const conv_case small_cases[] = {
    CV(2, 3, 7, 6, 4, 3, 1, 1, 1, 1, true),    /* non-square, same padding */
    CV(2, 4, 9, 8, 6, 3, 2, 1, 1, 2, false),   /* stride 2, groups 2 */
    CV(1, 3, 10, 9, 2, 3, 1, 2, 2, 1, true),   /* dilation 2 */
    CV(2, 4, 6, 7, 8, 3, 1, 1, 1, 4, true),    /* depthwise, multiplier 2 */
    CV(1, 2, 8, 8, 3, 5, 2, 2, 1, 1, true),    /* kernel 5, stride 2 */
    CV(2, 5, 4, 3, 3, 1, 1, 0, 1, 1, true),    /* kernel 1 */
    CV(1, 2, 7, 9, 2, 2, 3, 1, 1, 1, false),   /* even kernel, stride > kernel */
    CV(2, 3, 5, 5, 3, 3, 2, 0, 2, 3, true),    /* depthwise, dilation, stride */
    CT(2, 4, 4, 5, 3, 3, 2, 1, 1, 1, 1, true), /* stride 2, output_padding 1 */
    CT(1, 4, 3, 3, 6, 3, 1, 0, 2, 2, 0, false),/* dilation 2, groups 2 */
    CT(2, 3, 5, 4, 2, 5, 2, 2, 1, 1, 1, true), /* kernel 5 */
    CT(1, 3, 4, 4, 3, 2, 2, 0, 1, 3, 0, true), /* depthwise 2x2 upsampling */
    CT(1, 2, 4, 5, 2, 3, 1, 0, 2, 1, 1, true), /* output_padding < dilation only */
    CT(2, 2, 3, 4, 4, 1, 3, 0, 1, 2, 2, false),/* kernel 1, stride 3 */
};

/* cnn10's training convolutions (batch cut down for the reference), a large
 * strided kernel and a transposed-conv decoder step. */
static const conv_case big_cases[] = {
    CV(4, 1, 28, 28, 64, 3, 1, 1, 1, 1, false),
    CV(4, 64, 28, 28, 64, 3, 1, 1, 1, 1, true),
    CV(4, 64, 14, 14, 128, 3, 1, 1, 1, 1, false),
    CV(4, 128, 14, 14, 128, 3, 1, 1, 1, 1, true),
    CV(4, 128, 7, 7, 256, 3, 1, 1, 1, 1, false),
    CV(2, 256, 7, 7, 256, 3, 1, 1, 1, 1, true),
    CV(2, 3, 64, 64, 32, 11, 4, 2, 1, 1, true),
    CV(2, 32, 16, 16, 32, 3, 2, 1, 1, 32, true),
    CT(2, 64, 7, 7, 32, 4, 2, 1, 1, 1, 0, true),
    CT(2, 32, 14, 14, 16, 3, 2, 1, 1, 1, 1, false),
};

static void set_data(mp_tensor *t, const double *v) {
    for (int64_t i = 0; i < mp_tensor_numel(t); i++) {
        if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v[i];
        else ((float *)t->data)[i] = (float)v[i];
    }
}

static double get_data(const mp_tensor *t, int64_t i) {
    return t->dtype == MP_DTYPE_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

/* Runs forward on one image/weight/bias and compares with `want` exactly
 * (small integers: every implementation must agree to the last bit). */
static void hand_forward(const conv_case *c, const double *x, const double *w, const double *b,
                         const double *want, int want_h, int want_w, mp_dtype dt, mp_impl impl) {
    char cs[160];
    op_fixture f;
    mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
    mp_op_attr a = attr_of(c);
    mp_status st = op_fixture_init(&f, c->kind, a, 1, &s, NULL, dt, impl, false);
    CHECK(st == MP_OK, "%s: init: %s", case_str(c, cs, sizeof cs), mp_last_error());
    if (st != MP_OK) return;
    CHECK(f.info.out.dims[2] == want_h && f.info.out.dims[3] == want_w, "%s: output %dx%d, want %dx%d",
          case_str(c, cs, sizeof cs), f.info.out.dims[2], f.info.out.dims[3], want_h, want_w);
    set_data(&f.call.in[0], x);
    set_data(&f.call.param[0], w);
    if (c->bias) set_data(&f.call.param[1], b);
    CHECK(f.vt->forward(&f.call) == MP_OK, "forward: %s", mp_last_error());
    for (int64_t i = 0; i < mp_tensor_numel(&f.call.out); i++)
        CHECK(get_data(&f.call.out, i) == want[i], "%s dtype %d impl %d: out[%lld] = %g, want %g",
              case_str(c, cs, sizeof cs), dt, impl, (long long)i, get_data(&f.call.out, i), want[i]);
    op_fixture_free(&f);
}

static void hand_examples(void) {
    struct { mp_dtype dt; mp_impl impl; } runs[] = {
        {MP_DTYPE_F64, MP_IMPL_REF}, {MP_DTYPE_F32, MP_IMPL_REF}, {MP_DTYPE_F32, MP_IMPL_ONEDNN}};
    const int nruns = mp_onednn_available() ? 3 : 2;
    const double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}; /* 1x1x3x3 */
    const double w[] = {1, 2, 3, 4};                /* 1x1x2x2 */
    const double b[] = {0.5};
    for (int r = 0; r < nruns; r++) {
        /* cross-correlation, no kernel flip: y[i][j] = sum x[i+a][j+b] w[a][b] */
        const conv_case c1 = CV(1, 1, 3, 3, 1, 2, 1, 0, 1, 1, false);
        const double y1[] = {37, 47, 67, 77};
        hand_forward(&c1, x, w, NULL, y1, 2, 2, runs[r].dt, runs[r].impl);
        /* zero padding 1, stride 2, bias */
        const conv_case c2 = CV(1, 1, 3, 3, 1, 2, 2, 1, 1, 1, true);
        const double y2[] = {4.5, 18.5, 36.5, 77.5};
        hand_forward(&c2, x, w, b, y2, 2, 2, runs[r].dt, runs[r].impl);
        /* transposed, stride 1: the full correlation, out[i+a][j+b] += x[i][j] w[a][b] */
        const conv_case t1 = CT(1, 1, 2, 2, 1, 2, 1, 0, 1, 1, 0, false);
        const double y3[] = {1, 4, 4, 6, 20, 16, 9, 24, 16};
        hand_forward(&t1, w, w, NULL, y3, 3, 3, runs[r].dt, runs[r].impl);
        /* transposed, stride 2, output_padding 1 (last row/column: bias only) */
        const conv_case t2 = CT(1, 1, 2, 2, 1, 2, 2, 0, 1, 1, 1, true);
        const double y4[] = {1.5, 2.5, 2.5, 4.5, 0.5, 3.5, 4.5, 6.5, 8.5, 0.5, 3.5, 6.5, 4.5, 8.5, 0.5,
                             9.5, 12.5, 12.5, 16.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5};
        hand_forward(&t2, w, w, b, y4, 5, 5, runs[r].dt, runs[r].impl);
    }
    /* parameter specs: PyTorch layouts and fan-ins */
    op_fixture f;
    mp_shape s = mp_shape4(1, 6, 5, 5);
    conv_case c = CV(1, 6, 5, 5, 4, 3, 1, 1, 1, 2, true);
    CHECK(op_fixture_init(&f, MP_OP_CONV2D, attr_of(&c), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK,
          "init");
    CHECK(f.info.n_params == 2 && !strcmp(f.info.params[0].name, "weight") &&
              mp_shape_equal(&f.info.params[0].shape, &(mp_shape){4, {4, 3, 3, 3}}) &&
              f.info.params[0].init == MP_INIT_HE_NORMAL && f.info.params[0].fan_in == 27 &&
              !strcmp(f.info.params[1].name, "bias") && f.info.params[1].shape.dims[0] == 4 &&
              f.info.params[1].init == MP_INIT_UNIFORM_FAN_IN && f.info.params[1].fan_in == 27,
          "conv2d parameter specs");
    op_fixture_free(&f);
    c = (conv_case)CT(1, 6, 5, 5, 4, 3, 2, 1, 1, 2, 1, false);
    CHECK(op_fixture_init(&f, MP_OP_CONV_TRANSPOSE2D, attr_of(&c), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) ==
              MP_OK,
          "init");
    CHECK(f.info.n_params == 1 && mp_shape_equal(&f.info.params[0].shape, &(mp_shape){4, {6, 2, 3, 3}}) &&
              f.info.params[0].fan_in == 18 && mp_shape_equal(&f.info.out, &(mp_shape){4, {1, 4, 10, 10}}),
          "conv_transpose2d parameter specs / output shape");
    op_fixture_free(&f);
}

static void gradchecks(void) {
    char cs[160];
    for (size_t i = 0; i < sizeof small_cases / sizeof small_cases[0]; i++) {
        const conv_case *c = &small_cases[i];
        mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
        double e = gradcheck_op(c->kind, attr_of(c), 1, &s, NULL, true, 40 + i, verbose);
        if (verbose) printf("gradcheck %-60s worst rel.err %.3g\n", case_str(c, cs, sizeof cs), e);
        CHECK(e < 1e-6, "gradcheck %s: rel.err %g", case_str(c, cs, sizeof cs), e);
    }
}

static void compare(const conv_case *cases, size_t n, bool training) {
    char cs[160];
    for (size_t i = 0; i < n; i++) {
        const conv_case *c = &cases[i];
        mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
        double e = compare_impls_op(c->kind, attr_of(c), 1, &s, NULL, training, 70 + i, 0);
        if (verbose) printf("ref vs onednn %-60s %s rel.err %.3g\n", case_str(c, cs, sizeof cs),
                            training ? "train" : "infer", e);
        CHECK(e < 1e-5, "REF vs ONEDNN %s (%s): rel.err %g", case_str(c, cs, sizeof cs),
              training ? "training" : "inference", e);
    }
}

static double max_rel(const mp_tensor *a, const mp_tensor *b) {
    double d2 = 0, r2 = 0;
    for (int64_t j = 0; j < mp_tensor_numel(b); j++) {
        double x = get_data(a, j), y = get_data(b, j);
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    return isfinite(d2) ? sqrt(d2) / fmax(sqrt(r2), 1e-30) : INFINITY;
}

/* Backward overwrites (a second call gives the same gradients); without d_in
 * (a first layer) or without the weight gradient the others are unchanged. */
static void backward_contract(const conv_case *c, mp_impl impl) {
    char cs[160];
    case_str(c, cs, sizeof cs);
    op_fixture f, ref;
    mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
    CHECK(op_fixture_init(&f, c->kind, attr_of(c), 1, &s, NULL, MP_DTYPE_F32, impl, true) == MP_OK &&
              op_fixture_init(&ref, c->kind, attr_of(c), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_OK,
          "%s: init: %s", cs, mp_last_error());
    op_fixture_randomize(&ref, 5);
    op_fixture_copy_data(&f, &ref);
    mp_op_call *fc = &f.call;
    CHECK(ref.vt->forward(&ref.call) == MP_OK && ref.vt->backward(&ref.call) == MP_OK, "ref run");
    CHECK(f.vt->forward(fc) == MP_OK && f.vt->backward(fc) == MP_OK, "run");
    CHECK(f.vt->backward(fc) == MP_OK, "second backward");
    const double tol = impl == MP_IMPL_REF ? 0 : 1e-5;
    CHECK(max_rel(&fc->d_in[0], &ref.call.d_in[0]) <= tol, "%s impl %d: second backward d_in", cs, impl);
    for (int p = 0; p < f.info.n_params; p++)
        CHECK(max_rel(&fc->d_param[p], &ref.call.d_param[p]) <= tol, "%s impl %d: second backward d_%s", cs,
              impl, f.info.params[p].name);
    /* no d_in */
    void *dx = fc->d_in[0].data;
    fc->d_in[0].data = NULL;
    for (int p = 0; p < f.info.n_params; p++)
        memset(fc->d_param[p].data, 0xff, (size_t)mp_tensor_numel(&fc->d_param[p]) * 4);
    CHECK(f.vt->backward(fc) == MP_OK, "backward without d_in: %s", mp_last_error());
    for (int p = 0; p < f.info.n_params; p++)
        CHECK(max_rel(&fc->d_param[p], &ref.call.d_param[p]) <= tol, "%s impl %d: d_%s without d_in", cs, impl,
              f.info.params[p].name);
    /* only the bias gradient */
    if (c->bias) {
        void *dw = fc->d_param[0].data;
        fc->d_param[0].data = NULL;
        memset(fc->d_param[1].data, 0xff, (size_t)mp_tensor_numel(&fc->d_param[1]) * 4);
        CHECK(f.vt->backward(fc) == MP_OK, "backward, bias only: %s", mp_last_error());
        CHECK(max_rel(&fc->d_param[1], &ref.call.d_param[1]) <= tol, "%s impl %d: d_bias alone", cs, impl);
        fc->d_param[0].data = dw;
    }
    fc->d_in[0].data = dx;
    op_fixture_free(&f);
    op_fixture_free(&ref);
}

/* Plans ask for MP_IMPL_AUTO: oneDNN where its kernels are JIT ones, which
 * on x86 they are for the cnn10 convolutions. */
static void auto_picks_onednn(void) {
    char cs[160];
    for (size_t i = 0; i < 6; i++) {
        const conv_case *c = &big_cases[i];
        op_fixture f;
        mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
        mp_status st = op_fixture_init(&f, c->kind, attr_of(c), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_AUTO, true);
        CHECK(st == MP_OK && f.call.state != NULL, "%s: MP_IMPL_AUTO did not take oneDNN (%s)",
              case_str(c, cs, sizeof cs), mp_last_error());
        if (st == MP_OK) op_fixture_free(&f);
    }
}

static void expect_shape_error(const conv_case *c, const char *word) {
    char cs[160];
    op_fixture f;
    mp_shape s = mp_shape4(c->n, c->cin, c->h, c->w);
    mp_status st = op_fixture_init(&f, c->kind, attr_of(c), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE, "%s: status %d, want MP_ERR_SHAPE", case_str(c, cs, sizeof cs), st);
    CHECK(strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), word) &&
              strstr(mp_last_error(), c->kind == MP_OP_CONV2D ? "conv2d" : "conv_transpose2d"),
          "%s: message lacks node name or '%s': %s", cs, word, mp_last_error());
    if (verbose) printf("shape error: %s\n", mp_last_error());
    if (st == MP_OK) op_fixture_free(&f);
}

static void shape_errors(void) {
    const conv_case cv_groups = CV(1, 6, 5, 5, 8, 3, 1, 1, 1, 4, false);
    expect_shape_error(&cv_groups, "in_channels 6 not divisible by groups 4");
    const conv_case cv_ogroups = CV(1, 6, 5, 5, 4, 3, 1, 1, 1, 3, false);
    expect_shape_error(&cv_ogroups, "out_channels 4 not divisible by groups 3");
    const conv_case cv_small = CV(1, 1, 2, 2, 1, 5, 1, 0, 1, 1, false);
    expect_shape_error(&cv_small, "output size");
    const conv_case cv_dil = CV(1, 1, 5, 5, 1, 3, 1, 0, 3, 1, false);
    expect_shape_error(&cv_dil, "dilation 3");
    const conv_case cv_pad = CV(1, 1, 5, 5, 1, 3, 1, -1, 1, 1, false);
    expect_shape_error(&cv_pad, "padding -1");
    const conv_case cv_k0 = CV(1, 1, 5, 5, 1, 0, 1, 0, 1, 1, false);
    expect_shape_error(&cv_k0, "kernel 0");
    const conv_case cv_s0 = CV(1, 1, 5, 5, 1, 3, 0, 0, 1, 1, false);
    expect_shape_error(&cv_s0, "stride 0");
    const conv_case cv_oc = CV(1, 1, 5, 5, 0, 3, 1, 0, 1, 1, false);
    expect_shape_error(&cv_oc, "out_channels 0");
    conv_case cv_op = CV(1, 1, 5, 5, 1, 3, 2, 0, 1, 1, false);
    cv_op.outpad = 1;
    expect_shape_error(&cv_op, "output_padding");
    const conv_case ct_op = CT(1, 2, 4, 4, 2, 3, 2, 1, 1, 1, 2, false);
    expect_shape_error(&ct_op, "output_padding 2 must be smaller than stride 2 or dilation 1");
    const conv_case ct_small = CT(1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 0, false);
    expect_shape_error(&ct_small, "output size");
    const conv_case ct_groups = CT(1, 4, 4, 4, 6, 3, 1, 1, 1, 4, 0, false);
    expect_shape_error(&ct_groups, "out_channels 6 not divisible by groups 4");
    const conv_case ct_pad = CT(1, 2, 4, 4, 2, 3, 1, -2, 1, 1, 0, false);
    expect_shape_error(&ct_pad, "padding -2");
    /* not an image */
    op_fixture f;
    mp_shape s2 = mp_shape2(4, 8);
    mp_op_attr a = attr_of(&cv_groups);
    CHECK(op_fixture_init(&f, MP_OP_CONV2D, a, 1, &s2, NULL, MP_DTYPE_F32, MP_IMPL_REF, true) == MP_ERR_SHAPE &&
              strstr(mp_last_error(), "4-D") && strstr(mp_last_error(), "test_op"),
          "2-D input: %s", mp_last_error());
}

int main(void) {
    const char *v = getenv("MP_TEST_VERBOSE");
    verbose = v && *v && *v != '0';
    /* strong references: op_table.c refers to the vtables weakly while ops land */
    CHECK(mp_op_lookup(MP_OP_CONV2D) == &mp_op_conv2d_vt, "conv2d vtable");
    CHECK(mp_op_lookup(MP_OP_CONV_TRANSPOSE2D) == &mp_op_conv_transpose2d_vt, "conv_transpose2d vtable");
    hand_examples();
    gradchecks();
    shape_errors();
    const conv_case contract[] = {CV(2, 8, 9, 9, 16, 3, 1, 1, 1, 1, true), CV(2, 8, 9, 9, 8, 3, 2, 1, 1, 8, true),
                                  CT(2, 8, 5, 5, 4, 4, 2, 1, 1, 1, 0, true)};
    for (size_t i = 0; i < sizeof contract / sizeof contract[0]; i++) {
        backward_contract(&contract[i], MP_IMPL_REF);
        if (mp_onednn_available()) backward_contract(&contract[i], MP_IMPL_ONEDNN);
        if (mp_onednn_available()) backward_contract(&contract[i], MP_IMPL_AUTO);
    }
    if (mp_onednn_available()) auto_picks_onednn();
    if (mp_onednn_available()) {
        compare(small_cases, sizeof small_cases / sizeof small_cases[0], true);
        compare(small_cases, 4, false);
        compare(big_cases, sizeof big_cases / sizeof big_cases[0], true);
    }
    return test_summary("test_op_conv");
}
