/* test_op_linear.c — linear: f64 gradient checks, a hand-computed example,
 * the backward contract (overwrite, d_in = NULL), REF vs oneDNN in f32 and
 * the shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

static mp_op_attr lin(int out, bool bias) { return (mp_op_attr){.linear = {.out_features = out, .bias = bias}}; }

static void hand_example(void) {
    /* x (2, 2), W (3, 2), b (3); y = x W^T + b; dy = 1 */
    op_fixture f;
    mp_shape s = mp_shape2(2, 2);
    CHECK(op_fixture_init(&f, MP_OP_LINEAR, lin(3, true), 1, &s, NULL, MP_DTYPE_F64, MP_IMPL_REF, true) == MP_OK,
          "init: %s", mp_last_error());
    CHECK(f.info.n_params == 2 && f.info.params[0].shape.dims[0] == 3 && f.info.params[0].shape.dims[1] == 2 &&
              f.info.params[0].init == MP_INIT_HE_NORMAL && f.info.params[0].fan_in == 2 &&
              f.info.params[1].init == MP_INIT_UNIFORM_FAN_IN && !strcmp(f.info.params[1].name, "bias"),
          "parameter specs");
    double x[] = {1, 2, 3, 4}, w[] = {1, 0, 0.5, -1, 2, 1}, b[] = {0.1, 0.2, 0.3};
    memcpy(f.call.in[0].data, x, sizeof x);
    memcpy(f.call.param[0].data, w, sizeof w);
    memcpy(f.call.param[1].data, b, sizeof b);
    for (int i = 0; i < 6; i++) ((double *)f.call.d_out.data)[i] = 1;
    CHECK(f.vt->forward(&f.call) == MP_OK && f.vt->backward(&f.call) == MP_OK, "run");
    double y[] = {1.1, -1.3, 4.3, 3.1, -2.3, 10.3}, dx[] = {3.5, 0, 3.5, 0}, dw[] = {4, 6, 4, 6, 4, 6};
    const double *oy = f.call.out.data, *odx = f.call.d_in[0].data, *odw = f.call.d_param[0].data,
                 *odb = f.call.d_param[1].data;
    for (int i = 0; i < 6; i++) CHECK(fabs(oy[i] - y[i]) < 1e-12, "y[%d] = %g, want %g", i, oy[i], y[i]);
    for (int i = 0; i < 4; i++) CHECK(fabs(odx[i] - dx[i]) < 1e-12, "dx[%d] = %g, want %g", i, odx[i], dx[i]);
    for (int i = 0; i < 6; i++) CHECK(fabs(odw[i] - dw[i]) < 1e-12, "dW[%d] = %g, want %g", i, odw[i], dw[i]);
    for (int i = 0; i < 3; i++) CHECK(fabs(odb[i] - 2) < 1e-12, "db[%d] = %g, want 2", i, odb[i]);
    op_fixture_free(&f);
}

/* A second backward gives the same gradients (overwrite, not +=), and with
 * d_in = NULL the parameter gradients are still computed, unchanged. */
static void backward_contract(mp_op_attr a, mp_shape s, mp_impl impl) {
    op_fixture f;
    CHECK(op_fixture_init(&f, MP_OP_LINEAR, a, 1, &s, NULL, MP_DTYPE_F32, impl, true) == MP_OK, "init: %s",
          mp_last_error());
    op_fixture_randomize(&f, 3);
    mp_op_call *c = &f.call;
    CHECK(f.vt->forward(c) == MP_OK && f.vt->backward(c) == MP_OK, "run");
    size_t nx = (size_t)mp_tensor_numel(&c->d_in[0]) * 4;
    float *keep[1 + MP_MAX_PARAMS] = {0};
    keep[0] = malloc(nx);
    memcpy(keep[0], c->d_in[0].data, nx);
    for (int p = 0; p < f.info.n_params; p++) {
        size_t n = (size_t)mp_tensor_numel(&c->d_param[p]) * 4;
        keep[1 + p] = malloc(n);
        memcpy(keep[1 + p], c->d_param[p].data, n);
    }
    CHECK(f.vt->backward(c) == MP_OK, "second backward");
    CHECK(!memcmp(keep[0], c->d_in[0].data, nx), "impl %d: second backward changed d_in (accumulates?)", impl);
    void *dx = c->d_in[0].data;
    c->d_in[0].data = NULL;
    for (int p = 0; p < f.info.n_params; p++)
        memset(c->d_param[p].data, 0xff, (size_t)mp_tensor_numel(&c->d_param[p]) * 4);
    CHECK(f.vt->backward(c) == MP_OK, "backward without d_in");
    for (int p = 0; p < f.info.n_params; p++)
        CHECK(!memcmp(keep[1 + p], c->d_param[p].data, (size_t)mp_tensor_numel(&c->d_param[p]) * 4),
              "impl %d: d_%s differs without d_in", impl, f.info.params[p].name);
    c->d_in[0].data = dx;
    for (int i = 0; i <= f.info.n_params; i++) free(keep[i]);
    op_fixture_free(&f);
}

static void shape_errors(void) {
    op_fixture f;
    mp_shape s4 = mp_shape4(2, 3, 4, 4);
    mp_status st = op_fixture_init(&f, MP_OP_LINEAR, lin(10, true), 1, &s4, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE, "4-D input: status %d", st);
    CHECK(strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "flatten") &&
              strstr(mp_last_error(), "(2, 3, 4, 4)"),
          "message: %s", mp_last_error());
    op_fixture_free(&f);
    mp_shape s2 = mp_shape2(2, 3);
    st = op_fixture_init(&f, MP_OP_LINEAR, lin(0, true), 1, &s2, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "test_op"), "out_features 0: %d %s", st,
          mp_last_error());
    op_fixture_free(&f);
}

int main(void) {
    mp_rng r;
    mp_rng_seed(&r, 11);
    /* strong reference: op_table.c refers to the vtables weakly while ops land */
    CHECK(mp_op_lookup(MP_OP_LINEAR) == &mp_op_linear_vt, "linear vtable");
    for (int trial = 0; trial < 6; trial++) {
        mp_shape s = mp_shape2(1 + (int)mp_rng_below(&r, 5), 1 + (int)mp_rng_below(&r, 9));
        mp_op_attr a = lin(1 + (int)mp_rng_below(&r, 7), trial % 2 == 0);
        double e = gradcheck_op(MP_OP_LINEAR, a, 1, &s, NULL, true, 200 + trial, 0);
        CHECK(e < 1e-6, "linear gradcheck trial %d (%d, %d) -> %d: rel.err %g", trial, s.dims[0], s.dims[1],
              a.linear.out_features, e);
    }
    /* larger than the 600-element full check: sampled elements */
    mp_shape big = mp_shape2(9, 70);
    double e = gradcheck_op(MP_OP_LINEAR, lin(13, true), 1, &big, NULL, true, 300, 0);
    CHECK(e < 1e-6, "linear gradcheck (9, 70) -> 13: rel.err %g", e);

    hand_example();
    shape_errors();
    backward_contract(lin(7, true), mp_shape2(5, 33), MP_IMPL_REF);

    if (mp_onednn_available()) {
        backward_contract(lin(7, true), mp_shape2(5, 33), MP_IMPL_ONEDNN);
        struct { int n, f, o; bool bias; } cases[] = {
            {128, 256, 10, true}, {128, 2304, 512, true}, {37, 123, 17, false}, {1, 5, 3, true}, {64, 4096, 10, true}};
        for (int i = 0; i < 5; i++) {
            mp_shape s = mp_shape2(cases[i].n, cases[i].f);
            mp_op_attr a = lin(cases[i].o, cases[i].bias);
            op_fixture f;
            CHECK(op_fixture_init(&f, MP_OP_LINEAR, a, 1, &s, NULL, MP_DTYPE_F32, MP_IMPL_ONEDNN, true) == MP_OK &&
                      f.call.state != NULL,
                  "oneDNN primitives for (%d, %d) -> %d", cases[i].n, cases[i].f, cases[i].o);
            op_fixture_free(&f);
            double err = compare_impls_op(MP_OP_LINEAR, a, 1, &s, NULL, true, 400 + i, 0);
            CHECK(err < 1e-5, "linear REF vs ONEDNN (%d, %d) -> %d: rel.err %g", cases[i].n, cases[i].f,
                  cases[i].o, err);
        }
    }
    return test_summary("test_op_linear");
}
