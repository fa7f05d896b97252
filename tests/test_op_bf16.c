/* test_op_bf16.c — the bf16-storage instances of the pointwise, pooling and
 * batch-norm kernels (ops/instantiate_act.inc) against their f32 instances:
 * on inputs and output gradients that are exactly representable in bf16, each
 * bf16 output and input gradient must be the f32 result rounded once to bf16,
 * bit for bit, and parameter gradients (f32 in both) must be equal. That is
 * the staged emulation's arithmetic, which plans replace with these kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "op_harness.h"

/* Round every float tensor of the f32 call to bf16 values (in place). */
static void round_to_bf16(mp_tensor *t) {
    if (!t->data || t->dtype != MP_DTYPE_F32) return;
    float *x = t->data;
    for (int64_t i = 0; i < mp_tensor_numel(t); i++) x[i] = mp_bf16_to_f32(mp_f32_to_bf16(x[i]));
}

/* A bf16 copy of an f32 activation tensor (freed by the caller). */
static mp_tensor bf16_copy(const mp_tensor *t) {
    mp_tensor b = {MP_DTYPE_BF16, t->shape, NULL};
    if (!t->data) return b;
    int64_t n = mp_tensor_numel(t);
    b.data = calloc((size_t)n, sizeof(mp_bf16));
    mp_convert_f32_to_bf16(t->data, b.data, (size_t)n);
    return b;
}

/* Elements where bf16 tensor b differs from f32 tensor f rounded to bf16. */
static int64_t mismatches(const mp_tensor *b, const mp_tensor *f) {
    int64_t bad = 0;
    const mp_bf16 *h = b->data;
    const float *x = f->data;
    for (int64_t i = 0; i < mp_tensor_numel(f); i++) bad += h[i].bits != mp_f32_to_bf16(x[i]).bits;
    return bad;
}

static void check_op(const char *label, mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *shapes,
                     bool training) {
    op_fixture f;
    MP_ASSERT(op_fixture_init(&f, kind, attr, n_in, shapes, NULL, MP_DTYPE_F32, MP_IMPL_REF, training) == MP_OK);
    op_fixture_randomize(&f, 11);
    mp_op_call *c = &f.call;
    for (int i = 0; i < n_in; i++) round_to_bf16(&c->in[i]);
    round_to_bf16(&c->d_out);
    /* the bf16 call: activations and their gradients in bf16, parameters,
     * their gradients and the saved statistics as in the f32 call */
    mp_op_call b = *c;
    for (int i = 0; i < n_in; i++) {
        b.in[i] = bf16_copy(&c->in[i]);
        b.d_in[i] = bf16_copy(&c->d_in[i]);
    }
    b.out = bf16_copy(&c->out);
    b.d_out = bf16_copy(&c->d_out);
    float *bparam[MP_MAX_PARAMS] = {0}, *bgrad[MP_MAX_PARAMS] = {0};
    for (int p = 0; p < f.info.n_params; p++) { /* running stats update in both: separate copies */
        size_t bytes = (size_t)mp_tensor_numel(&c->param[p]) * sizeof(float);
        bparam[p] = malloc(bytes);
        memcpy(bparam[p], c->param[p].data, bytes);
        b.param[p].data = bparam[p];
        if (c->d_param[p].data) b.d_param[p].data = bgrad[p] = calloc(1, bytes);
    }
    void *bsaved = calloc(1, f.info.saved_bytes + 64);
    b.saved = bsaved;
    CHECK(f.vt->forward(c) == MP_OK && f.vt->forward(&b) == MP_OK, "%s: forward: %s", label, mp_last_error());
    int64_t bad = mismatches(&b.out, &c->out);
    CHECK(bad == 0, "%s: %lld of %lld outputs differ from the rounded f32 result", label, (long long)bad,
          (long long)mp_tensor_numel(&c->out));
    round_to_bf16(&c->out); /* backward of tanh/sigmoid reads the stored (bf16) output */
    CHECK(f.vt->backward(c) == MP_OK && f.vt->backward(&b) == MP_OK, "%s: backward: %s", label, mp_last_error());
    for (int i = 0; i < n_in; i++) {
        if (!c->d_in[i].data) continue;
        bad = mismatches(&b.d_in[i], &c->d_in[i]);
        CHECK(bad == 0, "%s: %lld gradients of input %d differ", label, (long long)bad, i);
    }
    for (int p = 0; p < f.info.n_params; p++)
        if (bgrad[p])
            CHECK(!memcmp(bgrad[p], c->d_param[p].data, (size_t)mp_tensor_numel(&c->d_param[p]) * sizeof(float)),
                  "%s: gradient of %s differs", label, f.info.params[p].name);
    printf("%-28s bf16 == rounded f32 (%lld outputs)\n", label, (long long)mp_tensor_numel(&c->out));
    for (int i = 0; i < n_in; i++) {
        free(b.in[i].data);
        free(b.d_in[i].data);
    }
    free(b.out.data);
    free(b.d_out.data);
    for (int p = 0; p < f.info.n_params; p++) {
        free(bparam[p]);
        free(bgrad[p]);
    }
    free(bsaved);
    op_fixture_free(&f);
}

int main(void) {
    mp_shape x = mp_shape4(4, 6, 8, 8), two[2] = {x, x};
    check_op("relu", MP_OP_RELU, (mp_op_attr){0}, 1, &x, true);
    check_op("leaky_relu", MP_OP_LEAKY_RELU, (mp_op_attr){.slope = 0.2f}, 1, &x, true);
    check_op("tanh", MP_OP_TANH, (mp_op_attr){0}, 1, &x, true);
    check_op("sigmoid", MP_OP_SIGMOID, (mp_op_attr){0}, 1, &x, true);
    check_op("add", MP_OP_ADD, (mp_op_attr){0}, 2, two, true);
    check_op("mul", MP_OP_MUL, (mp_op_attr){0}, 2, two, true);
    check_op("maxpool2d 2x2", MP_OP_MAXPOOL2D, (mp_op_attr){.pool = {.kernel = 2, .stride = 2}}, 1, &x, true);
    check_op("avgpool2d 2x2", MP_OP_AVGPOOL2D, (mp_op_attr){.pool = {.kernel = 2, .stride = 2}}, 1, &x, true);
    check_op("global_avgpool", MP_OP_GLOBAL_AVGPOOL, (mp_op_attr){0}, 1, &x, true);
    mp_op_attr bn = {.bn = {.eps = 1e-5f, .momentum = 0.1f}};
    check_op("batchnorm2d training", MP_OP_BATCHNORM2D, bn, 1, &x, true);
    check_op("batchnorm2d inference", MP_OP_BATCHNORM2D, bn, 1, &x, false);
    return test_summary("test_op_bf16");
}
