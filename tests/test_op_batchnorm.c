/* test_op_batchnorm.c — batchnorm2d: f64 gradient checks in training and
 * inference on 4-D and 2-D inputs, hand-computed normalization and
 * running-statistics numbers (unbiased variance), the backward contract,
 * REF vs oneDNN in f32 and the shape errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

static mp_op_attr bn(float momentum, float eps) { return (mp_op_attr){.bn = {.momentum = momentum, .eps = eps}}; }

static double elem(const mp_tensor *t, int64_t i) {
    return t->dtype == MP_DTYPE_F64 ? ((double *)t->data)[i] : ((float *)t->data)[i];
}
static void set(mp_tensor *t, int64_t i, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

/* x (2, 2, 1, 2): channel 0 holds {1, 2, 3, 6} (mean 3, biased var 14/4,
 * unbiased 14/3), channel 1 holds {0, 0, 4, 4} (mean 2, var 4, unbiased 16/3). */
static void hand_example(mp_dtype dt, mp_impl impl) {
    double tol = dt == MP_DTYPE_F64 ? 1e-12 : 2e-6;
    mp_shape s = mp_shape4(2, 2, 1, 2);
    double x[] = {1, 2, 0, 0, 3, 6, 4, 4}, gamma[] = {2, 1}, beta[] = {0.5, -1};
    double eps = (double)1e-5f, m = (double)0.1f; /* the attributes are float */
    double mean[] = {3, 2}, var[] = {3.5, 4}, uvar[] = {14.0 / 3, 16.0 / 3};
    double rm[2], rv[2];
    for (int train = 1; train >= 0; train--) {
        op_fixture f;
        CHECK(op_fixture_init(&f, MP_OP_BATCHNORM2D, bn((float)m, (float)eps), 1, &s, NULL, dt, impl, train) == MP_OK,
              "init: %s", mp_last_error());
        if (train) {
            CHECK(f.info.n_params == 4 && !strcmp(f.info.params[0].name, "weight") &&
                      f.info.params[0].init == MP_INIT_ONE && f.info.params[0].trainable &&
                      !strcmp(f.info.params[1].name, "bias") && f.info.params[1].init == MP_INIT_ZERO &&
                      !strcmp(f.info.params[2].name, "running_mean") && !f.info.params[2].trainable &&
                      f.info.params[2].init == MP_INIT_ZERO && !strcmp(f.info.params[3].name, "running_var") &&
                      !f.info.params[3].trainable && f.info.params[3].init == MP_INIT_ONE,
                  "parameter specs");
            rm[0] = rm[1] = 0;
            rv[0] = rv[1] = 1;
        }
        mp_op_call *c = &f.call;
        for (int i = 0; i < 8; i++) set(&c->in[0], i, x[i]);
        for (int ch = 0; ch < 2; ch++) {
            set(&c->param[0], ch, gamma[ch]);
            set(&c->param[1], ch, beta[ch]);
            set(&c->param[2], ch, rm[ch]);
            set(&c->param[3], ch, rv[ch]);
        }
        CHECK(f.vt->forward(c) == MP_OK, "forward: %s", mp_last_error());
        for (int i = 0; i < 8; i++) {
            int ch = (i / 2) % 2;
            double mu = train ? mean[ch] : rm[ch], v = train ? var[ch] : rv[ch];
            double want = (x[i] - mu) / sqrt(v + eps) * gamma[ch] + beta[ch];
            CHECK(fabs(elem(&c->out, i) - want) < tol * fmax(1, fabs(want)), "%s impl %d: y[%d] = %.9g, want %.9g",
                  train ? "train" : "eval", impl, i, elem(&c->out, i), want);
        }
        for (int ch = 0; ch < 2; ch++) {
            double wm = train ? (1 - m) * rm[ch] + m * mean[ch] : rm[ch];
            double wv = train ? (1 - m) * rv[ch] + m * uvar[ch] : rv[ch];
            CHECK(fabs(elem(&c->param[2], ch) - wm) < tol, "%s impl %d: running_mean[%d] = %.9g, want %.9g",
                  train ? "train" : "eval", impl, ch, elem(&c->param[2], ch), wm);
            CHECK(fabs(elem(&c->param[3], ch) - wv) < tol, "%s impl %d: running_var[%d] = %.9g, want %.9g",
                  train ? "train" : "eval", impl, ch, elem(&c->param[3], ch), wv);
            if (train) {
                rm[ch] = wm;
                rv[ch] = wv;
            }
        }
        if (train) { /* the numbers by hand: 0.9 * 0 + 0.1 * 3, 0.9 * 1 + 0.1 * 14/3 (momentum 0.1f) */
            CHECK(fabs(rm[0] - 0.3) < 1e-7 && fabs(rv[0] - (0.9 + 1.4 / 3)) < 1e-7 && fabs(rm[1] - 0.2) < 1e-7 &&
                      fabs(rv[1] - (0.9 + 1.6 / 3)) < 1e-7,
                  "running stats %g %g %g %g", rm[0], rv[0], rm[1], rv[1]);
        }
        /* dy = 1: dbeta = count, dgamma = sum(xhat) = 0 in training */
        for (int i = 0; i < 8; i++) set(&c->d_out, i, 1);
        CHECK(f.vt->backward(c) == MP_OK, "backward: %s", mp_last_error());
        for (int ch = 0; ch < 2; ch++) {
            CHECK(fabs(elem(&c->d_param[1], ch) - 4) < tol, "dbeta[%d] = %g", ch, elem(&c->d_param[1], ch));
            double dg = train ? 0 : (x[0 + 2 * ch] + x[1 + 2 * ch] + x[4 + 2 * ch] + x[5 + 2 * ch] - 4 * rm[ch]) /
                                        sqrt(rv[ch] + eps);
            CHECK(fabs(elem(&c->d_param[0], ch) - dg) < 10 * tol, "%s: dgamma[%d] = %g, want %g",
                  train ? "train" : "eval", ch, elem(&c->d_param[0], ch), dg);
        }
        /* constant dy moves nothing through batch statistics: dx = 0 in training */
        for (int i = 0; i < 8; i++) {
            int ch = (i / 2) % 2;
            double want = train ? 0 : gamma[ch] / sqrt(rv[ch] + eps);
            CHECK(fabs(elem(&c->d_in[0], i) - want) < 10 * tol, "%s: dx[%d] = %g, want %g", train ? "train" : "eval",
                  i, elem(&c->d_in[0], i), want);
        }
        op_fixture_free(&f);
    }
}

/* A second backward gives the same gradients (overwrite, not +=), and with
 * d_in = NULL the parameter gradients are still computed. */
static void backward_contract(mp_shape s, mp_impl impl, bool training) {
    op_fixture f;
    CHECK(op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &s, NULL, MP_DTYPE_F32, impl, training) == MP_OK,
          "init: %s", mp_last_error());
    op_fixture_randomize(&f, 3);
    mp_op_call *c = &f.call;
    CHECK(f.vt->forward(c) == MP_OK && f.vt->backward(c) == MP_OK, "run");
    int64_t nx = mp_tensor_numel(&c->d_in[0]), C = s.dims[1];
    float *kx = malloc((size_t)nx * 4), *kp = malloc((size_t)C * 8);
    memcpy(kx, c->d_in[0].data, (size_t)nx * 4);
    memcpy(kp, c->d_param[0].data, (size_t)C * 4);
    memcpy(kp + C, c->d_param[1].data, (size_t)C * 4);
    CHECK(f.vt->backward(c) == MP_OK, "second backward");
    CHECK(!memcmp(kx, c->d_in[0].data, (size_t)nx * 4), "impl %d: second backward changed d_in", impl);
    void *dx = c->d_in[0].data;
    c->d_in[0].data = NULL;
    memset(c->d_param[0].data, 0xff, (size_t)C * 4);
    memset(c->d_param[1].data, 0xff, (size_t)C * 4);
    CHECK(f.vt->backward(c) == MP_OK, "backward without d_in");
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < 2 * C; i++) {
        double a = ((float *)(i < C ? c->d_param[0].data : c->d_param[1].data))[i % C], b = kp[i];
        d2 += (a - b) * (a - b);
        r2 += b * b;
    }
    CHECK(sqrt(d2) <= 1e-5 * sqrt(r2), "impl %d training %d: parameter gradients without d_in differ (%g)", impl,
          training, sqrt(d2 / r2));
    /* frozen parameters: d_param NULL, d_in still right */
    c->d_in[0].data = dx;
    void *dg = c->d_param[0].data, *db = c->d_param[1].data;
    c->d_param[0].data = c->d_param[1].data = NULL;
    memset(dx, 0xff, (size_t)nx * 4);
    CHECK(f.vt->backward(c) == MP_OK, "backward without parameter gradients");
    CHECK(!memcmp(kx, dx, (size_t)nx * 4), "impl %d: d_in differs without parameter gradients", impl);
    c->d_param[0].data = dg;
    c->d_param[1].data = db;
    free(kx);
    free(kp);
    op_fixture_free(&f);
}

static void shape_errors(void) {
    op_fixture f;
    mp_shape s3 = {3, {4, 3, 5, 1}};
    mp_status st =
        op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &s3, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op") && strstr(mp_last_error(), "(4, 3, 5)"),
          "3-D input: %d %s", st, mp_last_error());
    op_fixture_free(&f);
    mp_shape s1 = mp_shape2(1, 4);
    st = op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &s1, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_SHAPE && strstr(mp_last_error(), "test_op"), "one value per channel: %d %s", st,
          mp_last_error());
    op_fixture_free(&f);
    st = op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &s1, NULL, MP_DTYPE_F32, MP_IMPL_REF, false);
    CHECK(st == MP_OK, "inference on one sample is fine: %s", mp_last_error());
    op_fixture_free(&f);
    mp_shape s4 = mp_shape4(2, 3, 2, 2);
    st = op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 0), 1, &s4, NULL, MP_DTYPE_F32, MP_IMPL_REF, true);
    CHECK(st == MP_ERR_INVALID_ARG && strstr(mp_last_error(), "test_op"), "eps 0: %d %s", st, mp_last_error());
    op_fixture_free(&f);
}

int main(void) {
    CHECK(mp_op_lookup(MP_OP_BATCHNORM2D) == &mp_op_batchnorm2d_vt, "batchnorm2d vtable"); /* strong reference */
    mp_rng r;
    mp_rng_seed(&r, 21);
    for (int trial = 0; trial < 8; trial++) {
        bool training = trial % 2 == 0;
        mp_shape s = trial < 4 ? mp_shape4(1 + (int)mp_rng_below(&r, 3), 1 + (int)mp_rng_below(&r, 4),
                                           1 + (int)mp_rng_below(&r, 5), 2 + (int)mp_rng_below(&r, 4))
                               : mp_shape2(2 + (int)mp_rng_below(&r, 6), 1 + (int)mp_rng_below(&r, 5));
        double e = gradcheck_op(MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &s, NULL, training, 500 + trial, 0);
        CHECK(e < 1e-6, "batchnorm gradcheck trial %d (%d-D, %s): rel.err %g", trial, s.ndim,
              training ? "training" : "eval", e);
    }
    hand_example(MP_DTYPE_F64, MP_IMPL_REF);
    hand_example(MP_DTYPE_F32, MP_IMPL_REF);
    shape_errors();
    backward_contract(mp_shape4(3, 4, 5, 6), MP_IMPL_REF, true);
    backward_contract(mp_shape2(7, 5), MP_IMPL_REF, false);

    if (mp_onednn_available()) {
        hand_example(MP_DTYPE_F32, MP_IMPL_ONEDNN);
        backward_contract(mp_shape4(3, 4, 5, 6), MP_IMPL_ONEDNN, true);
        mp_shape shapes[] = {mp_shape4(4, 3, 5, 7), mp_shape2(9, 6), mp_shape4(128, 64, 28, 28),
                             mp_shape4(128, 128, 14, 14), mp_shape4(128, 256, 7, 7), mp_shape2(128, 256)};
        for (int i = 0; i < 6; i++)
            for (int training = 1; training >= 0; training--) {
                if (!training && i >= 2 && i <= 3) continue; /* inference is one pass: fewer big cases */
                op_fixture f;
                CHECK(op_fixture_init(&f, MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &shapes[i], NULL, MP_DTYPE_F32,
                                      MP_IMPL_ONEDNN, training) == MP_OK &&
                          f.call.state != NULL,
                      "oneDNN primitives for case %d", i);
                op_fixture_free(&f);
                double e = compare_impls_op(MP_OP_BATCHNORM2D, bn(0.1f, 1e-5f), 1, &shapes[i], NULL, training,
                                            600 + i, 0);
                CHECK(e < 1e-5, "batchnorm REF vs ONEDNN case %d (%s): rel.err %g", i, training ? "training" : "eval",
                      e);
            }
    }
    return test_summary("test_op_batchnorm");
}
