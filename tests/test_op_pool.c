/* test_op_pool.c — maxpool2d, avgpool2d, global_avgpool: f64 gradient
 * checks (stride != kernel, padding, odd sizes), hand-computed examples
 * pinning the conventions (first max, -inf padding, average counts the
 * padding), the backward contract, REF vs oneDNN in f32 and the errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

static mp_op_attr pool(int k, int s, int p) { return (mp_op_attr){.pool = {.kernel = k, .stride = s, .padding = p}}; }

/* Run one f64 forward (and backward with d_out = dy) on given data. */
static void run_f64(mp_op_kind kind, mp_op_attr a, mp_shape s, const double *x, const double *dy, double *y,
                    double *dx) {
    op_fixture f;
    CHECK(op_fixture_init(&f, kind, a, 1, &s, NULL, MP_DTYPE_F64, MP_IMPL_REF, true) == MP_OK, "init: %s",
          mp_last_error());
    memcpy(f.call.in[0].data, x, (size_t)mp_shape_numel(&s) * 8);
    int64_t ny = mp_shape_numel(&f.info.out);
    CHECK(f.vt->forward(&f.call) == MP_OK, "forward");
    memcpy(y, f.call.out.data, (size_t)ny * 8);
    if (dx) {
        memcpy(f.call.d_out.data, dy, (size_t)ny * 8);
        memset(f.call.d_in[0].data, 0x7f, (size_t)mp_shape_numel(&s) * 8); /* must be overwritten */
        CHECK(f.vt->backward(&f.call) == MP_OK, "backward");
        memcpy(dx, f.call.d_in[0].data, (size_t)mp_shape_numel(&s) * 8);
    }
    op_fixture_free(&f);
}

static void expect(const char *what, const double *got, const double *want, int n) {
    for (int i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) < 1e-12, "%s[%d] = %g, want %g", what, i, got[i], want[i]);
}

static void hand_examples(void) {
    double x[9] = {1, 5, 2, 4, 3, 9, 0, 8, 7}, y[9], dx[9];
    /* max 2x2 stride 1: overlapping windows; 9 is the max of two windows */
    double dy4[4] = {1, 2, 3, 4};
    run_f64(MP_OP_MAXPOOL2D, pool(2, 1, 0), mp_shape4(1, 1, 3, 3), x, dy4, y, dx);
    expect("max y", y, (double[]){5, 9, 8, 9}, 4);
    expect("max dx", dx, (double[]){0, 1, 0, 0, 0, 2 + 4, 0, 3, 0}, 9);
    /* max 3x3 stride 2 padding 1 on negative values: padding is -inf, not 0 */
    double nx[9];
    for (int i = 0; i < 9; i++) nx[i] = -x[i] - 1;
    run_f64(MP_OP_MAXPOOL2D, pool(3, 2, 1), mp_shape4(1, 1, 3, 3), nx, dy4, y, dx);
    expect("max padded y", y, (double[]){-2, -3, -1, -4}, 4); /* windows {1,5,4,3}, {5,2,3,9}, {4,3,0,8}, {3,9,8,7} */
    /* ties: the first maximum in row-major order takes the gradient */
    double t[4] = {7, 7, 7, 7}, ty[1], tdx[4];
    run_f64(MP_OP_MAXPOOL2D, pool(2, 2, 0), mp_shape4(1, 1, 2, 2), t, (double[]){1}, ty, tdx);
    expect("max tie dx", tdx, (double[]){1, 0, 0, 0}, 4);
    /* NaN propagates (PyTorch) and takes the gradient */
    double nanx[4] = {1, NAN, 3, 2}, ny[1], ndx[4];
    run_f64(MP_OP_MAXPOOL2D, pool(2, 2, 0), mp_shape4(1, 1, 2, 2), nanx, (double[]){1}, ny, ndx);
    CHECK(isnan(ny[0]), "max with NaN: %g", ny[0]);
    expect("max NaN dx", ndx, (double[]){0, 1, 0, 0}, 4);
    /* avg 3x3 stride 1 padding 1: the divisor is always 9 (count_include_pad) */
    double ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    run_f64(MP_OP_AVGPOOL2D, pool(3, 1, 1), mp_shape4(1, 1, 3, 3), x, ones, y, dx);
    expect("avg y", y, (double[]){13 / 9.0, 24 / 9.0, 19 / 9.0, 21 / 9.0, 39 / 9.0, 34 / 9.0, 15 / 9.0, 31 / 9.0,
                                  27 / 9.0},
           9);
    expect("avg dx", dx, (double[]){4 / 9.0, 6 / 9.0, 4 / 9.0, 6 / 9.0, 1, 6 / 9.0, 4 / 9.0, 6 / 9.0, 4 / 9.0}, 9);
    /* avg 2x2 stride 2 padding 1 on 2x2: each window holds one value and three pads */
    run_f64(MP_OP_AVGPOOL2D, pool(2, 2, 1), mp_shape4(1, 1, 2, 2), (double[]){1, 2, 3, 4}, dy4, y, dx);
    expect("avg padded y", y, (double[]){0.25, 0.5, 0.75, 1}, 4);
    expect("avg padded dx", dx, (double[]){0.25, 0.5, 0.75, 1}, 4);
    /* avg 2x2 stride 2 on 3x3: the last row and column fall outside every window */
    run_f64(MP_OP_AVGPOOL2D, pool(2, 2, 0), mp_shape4(1, 1, 3, 3), x, (double[]){4}, y, dx);
    expect("avg floor y", y, (double[]){13 / 4.0}, 1);
    expect("avg floor dx", dx, (double[]){1, 1, 0, 1, 1, 0, 0, 0, 0}, 9);
    /* global: (1, 2, 1, 2) -> (1, 2) */
    run_f64(MP_OP_GLOBAL_AVGPOOL, (mp_op_attr){0}, mp_shape4(1, 2, 1, 2), (double[]){1, 3, 2, 6},
            (double[]){1, 2}, y, dx);
    expect("gap y", y, (double[]){2, 4}, 2);
    expect("gap dx", dx, (double[]){0.5, 0.5, 1, 1}, 4);
}

/* A second backward gives the same d_in (overwrite, not +=); d_in = NULL is fine. */
static void backward_contract(mp_op_kind kind, mp_op_attr a, mp_shape s, mp_impl impl) {
    op_fixture f;
    CHECK(op_fixture_init(&f, kind, a, 1, &s, NULL, MP_DTYPE_F32, impl, true) == MP_OK, "init: %s", mp_last_error());
    op_fixture_randomize(&f, 3);
    mp_op_call *c = &f.call;
    CHECK(f.vt->forward(c) == MP_OK && f.vt->backward(c) == MP_OK, "run");
    size_t nx = (size_t)mp_tensor_numel(&c->d_in[0]) * 4;
    void *keep = malloc(nx);
    memcpy(keep, c->d_in[0].data, nx);
    CHECK(f.vt->backward(c) == MP_OK, "second backward");
    CHECK(!memcmp(keep, c->d_in[0].data, nx), "%s impl %d: second backward changed d_in", f.vt->name, impl);
    void *dx = c->d_in[0].data;
    c->d_in[0].data = NULL;
    CHECK(f.vt->backward(c) == MP_OK, "%s: backward without d_in", f.vt->name);
    c->d_in[0].data = dx;
    free(keep);
    op_fixture_free(&f);
}

static void errors(void) {
    op_fixture f;
    mp_shape s = mp_shape4(2, 3, 2, 2);
    mp_status st = op_fixture_init(&f, MP_OP_MAXPOOL2D, pool(5, 5, 1), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "maxpool2d") &&
              strstr(mp_last_error(), "(2, 3, 2, 2)"),
          "kernel larger than the padded input: %d %s", st, mp_last_error());
    op_fixture_free(&f);
    st = op_fixture_init(&f, MP_OP_AVGPOOL2D, pool(3, 1, 2), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "half"),
          "padding > kernel/2: %d %s", st, mp_last_error());
    op_fixture_free(&f);
    mp_shape s2 = mp_shape2(4, 6);
    st = op_fixture_init(&f, MP_OP_AVGPOOL2D, pool(2, 2, 0), 1, &s2, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op"), "2-D input: %d %s", st, mp_last_error());
    op_fixture_free(&f);
    st = op_fixture_init(&f, MP_OP_GLOBAL_AVGPOOL, (mp_op_attr){0}, 1, &s2, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "global_avgpool"),
          "global avgpool on 2-D: %d %s", st, mp_last_error());
    op_fixture_free(&f);
    st = op_fixture_init(&f, MP_OP_MAXPOOL2D, pool(0, 1, 0), 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_INVALID_ARG, "kernel 0: %d %s", st, mp_last_error());
    op_fixture_free(&f);
}

/* REF vs oneDNN, and the primitives must really have been built. */
static void compare(mp_op_kind kind, mp_op_attr a, mp_shape s, bool training, uint64_t seed) {
    op_fixture f;
    CHECK(op_fixture_init(&f, kind, a, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_ONEDNN, training) == MP_OK &&
              f.call.state != NULL,
          "oneDNN primitives for %s k%d s%d p%d", mp_op_lookup(kind)->name, a.pool.kernel, a.pool.stride,
          a.pool.padding);
    op_fixture_free(&f);
    double e = compare_impls_op(kind, a, 1, &s, NULL, training, seed, 0);
    CHECK(e < 1e-5, "%s REF vs ONEDNN (%d, %d, %d, %d) k%d s%d p%d %s: rel.err %g", mp_op_lookup(kind)->name,
          s.dims[0], s.dims[1], s.dims[2], s.dims[3], a.pool.kernel, a.pool.stride, a.pool.padding,
          training ? "training" : "inference", e);
}

/* Inference max pooling through oneDNN: the forward matches, backward refuses. */
static void max_inference(void) {
    mp_shape s = mp_shape4(3, 4, 9, 7);
    op_fixture a, b;
    mp_op_attr at = pool(3, 2, 1);
    CHECK(op_fixture_init(&a, MP_OP_MAXPOOL2D, at, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_ONEDNN, false) == MP_OK &&
              op_fixture_init(&b, MP_OP_MAXPOOL2D, at, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_REF, false) == MP_OK,
          "init");
    op_fixture_randomize(&b, 9);
    op_fixture_copy_data(&a, &b);
    CHECK(a.vt->forward(&a.call) == MP_OK && b.vt->forward(&b.call) == MP_OK, "forward");
    CHECK(!memcmp(a.call.out.data, b.call.out.data, (size_t)mp_tensor_numel(&a.call.out) * 4),
          "inference max pooling differs");
    CHECK(a.vt->backward(&a.call) == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "test_op"),
          "backward after an inference forward: %s", mp_last_error());
    op_fixture_free(&a);
    op_fixture_free(&b);
}

int main(void) {
    /* strong references: op_table.c refers to the vtables weakly while ops land */
    CHECK(mp_op_lookup(MP_OP_MAXPOOL2D) == &mp_op_maxpool2d_vt, "maxpool2d vtable");
    CHECK(mp_op_lookup(MP_OP_AVGPOOL2D) == &mp_op_avgpool2d_vt, "avgpool2d vtable");
    CHECK(mp_op_lookup(MP_OP_GLOBAL_AVGPOOL) == &mp_op_global_avgpool_vt, "global_avgpool vtable");
    mp_rng r;
    mp_rng_seed(&r, 31);
    mp_op_kind kinds[] = {MP_OP_MAXPOOL2D, MP_OP_AVGPOOL2D};
    for (int ki = 0; ki < 2; ki++)
        for (int trial = 0; trial < 6; trial++) {
            int k = 1 + (int)mp_rng_below(&r, 3), st = 1 + (int)mp_rng_below(&r, 3);
            int p = (int)mp_rng_below(&r, (uint64_t)(k / 2 + 1));
            mp_shape s = mp_shape4(1 + (int)mp_rng_below(&r, 2), 1 + (int)mp_rng_below(&r, 3),
                                   k + (int)mp_rng_below(&r, 6), k + (int)mp_rng_below(&r, 6));
            double e = gradcheck_op(kinds[ki], pool(k, st, p), 1, &s, NULL, trial % 3 != 2, 700 + trial, 0);
            CHECK(e < 1e-6, "%s gradcheck (%d, %d, %d, %d) k%d s%d p%d: rel.err %g", mp_op_lookup(kinds[ki])->name,
                  s.dims[0], s.dims[1], s.dims[2], s.dims[3], k, st, p, e);
        }
    /* fixed cases: stride != kernel with padding, overlapping windows, odd sizes */
    struct { int k, s, p; mp_shape x; } fixed[] = {
        {3, 2, 1, mp_shape4(2, 2, 7, 5)}, {2, 1, 1, mp_shape4(1, 3, 5, 6)}, {3, 3, 1, mp_shape4(1, 2, 8, 7)}};
    for (int ki = 0; ki < 2; ki++)
        for (int i = 0; i < 3; i++) {
            double e = gradcheck_op(kinds[ki], pool(fixed[i].k, fixed[i].s, fixed[i].p), 1, &fixed[i].x, NULL, true,
                                    750 + i, 0);
            CHECK(e < 1e-6, "%s gradcheck fixed case %d: rel.err %g", mp_op_lookup(kinds[ki])->name, i, e);
        }
    for (int trial = 0; trial < 3; trial++) {
        mp_shape s = mp_shape4(1 + (int)mp_rng_below(&r, 3), 1 + (int)mp_rng_below(&r, 4), 1 + (int)mp_rng_below(&r, 6),
                               1 + (int)mp_rng_below(&r, 6));
        double e = gradcheck_op(MP_OP_GLOBAL_AVGPOOL, (mp_op_attr){0}, 1, &s, NULL, true, 800 + trial, 0);
        CHECK(e < 1e-6, "global_avgpool gradcheck trial %d: rel.err %g", trial, e);
    }
    hand_examples();
    errors();
    backward_contract(MP_OP_MAXPOOL2D, pool(3, 1, 1), mp_shape4(2, 3, 7, 6), MP_IMPL_REF);
    backward_contract(MP_OP_AVGPOOL2D, pool(3, 2, 1), mp_shape4(2, 3, 7, 6), MP_IMPL_REF);
    backward_contract(MP_OP_GLOBAL_AVGPOOL, (mp_op_attr){0}, mp_shape4(2, 3, 7, 6), MP_IMPL_REF);

    if (mp_onednn_available()) {
        backward_contract(MP_OP_MAXPOOL2D, pool(3, 1, 1), mp_shape4(2, 3, 7, 6), MP_IMPL_ONEDNN);
        backward_contract(MP_OP_AVGPOOL2D, pool(3, 2, 1), mp_shape4(2, 3, 7, 6), MP_IMPL_ONEDNN);
        max_inference();
        for (int ki = 0; ki < 2; ki++) {
            compare(kinds[ki], pool(3, 2, 1), mp_shape4(3, 5, 11, 9), true, 900);
            compare(kinds[ki], pool(2, 1, 1), mp_shape4(2, 3, 6, 7), true, 901);
            compare(kinds[ki], pool(3, 3, 0), mp_shape4(4, 2, 10, 8), true, 902);
            /* cnn10-like */
            compare(kinds[ki], pool(2, 2, 0), mp_shape4(128, 64, 28, 28), true, 903);
            compare(kinds[ki], pool(3, 2, 1), mp_shape4(128, 256, 7, 7), true, 905);
        }
        compare(MP_OP_MAXPOOL2D, pool(2, 2, 0), mp_shape4(128, 128, 14, 14), true, 904);
        compare(MP_OP_MAXPOOL2D, pool(2, 2, 0), mp_shape4(128, 256, 7, 7), true, 906);
        compare(MP_OP_AVGPOOL2D, pool(3, 2, 1), mp_shape4(3, 5, 11, 9), false, 907);
    }
    return test_summary("test_op_pool");
}
