/* test_op_cpu_fast.c — the CPU fast paths of the memory-bound ops (the
 * reference kernels compiled for AVX-512 and AVX2, ops/instantiate_fast.inc)
 * on every instruction set this CPU runs, against the reference kernels, on
 * fresh random inputs with every output poisoned (NaN bytes) first:
 *  - relu, leaky relu (f32, bf16): bit for bit, NaN, ±0, ±inf and denormal
 *    inputs included, sizes with a vector remainder and above the threading
 *    threshold;
 *  - avgpool2d 2x2 stride 2 (f32, bf16): bit for bit, odd heights and
 *    widths (a last row / column in no window) included;
 *  - batchnorm2d (training, inference; 4-D and 2-D; f32, bf16): within the
 *    op tests' 1e-5 (float arithmetic on centred values where the reference
 *    goes through double; bf16 outputs within 1e-3, a rounding apart at
 *    most), the saved and running statistics and parameter gradients too, a
 *    channel at mean 300, std 0.01 included;
 *  - batchnorm2d with the ReLU fused in (mp_op_call.relu_after): equal to
 *    batchnorm2d then relu, bit for bit, on the reference (f64, f32, bf16)
 *    and on each fast path; its f64 gradient against central differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/bf16_inline.h"
#include "core/rng.h"
#include "op_harness.h"
#include "ops/cpu_fast.h"

/* One call's tensors, activations in dtype dt (F32 or BF16), parameters and
 * their gradients f32: the f32 fixture's data (rounded to bf16 for BF16). */
typedef struct {
    op_fixture f; /* f32, owns the f32 tensors and the parameters */
    mp_op_call c; /* the call run: f.call, or its bf16 twin */
    void *mem[8];
    int n_mem;
} run_t;

static void *alloc_poisoned(run_t *r, size_t bytes) {
    void *p = aligned_alloc(64, MP_ALIGN64(bytes ? bytes : 64));
    MP_ASSERT(p && r->n_mem < 8);
    memset(p, 0xFF, bytes); /* NaN in f32 and bf16: an unwritten output shows */
    return r->mem[r->n_mem++] = p;
}

static void free_run(run_t *r) {
    for (int i = 0; i < r->n_mem; i++) free(r->mem[i]);
    op_fixture_free(&r->f);
}

/* f32 values (from the seeded fixture) with specials mixed in, rounded to
 * bf16 values when dt is BF16 so that both dtypes see the same numbers. */
static void fill_activation(float *x, int64_t n, mp_rng *g, bool specials, mp_dtype dt) {
    static const float sp[] = {NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 3.4e38f};
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)mp_rng_normal(g);
        if (specials && mp_rng_below(g, 16) == 0) x[i] = sp[mp_rng_below(g, sizeof sp / sizeof sp[0])];
        if (dt == MP_DTYPE_BF16) x[i] = mp_bf16_bits_to_f32(mp_f32_to_bf16_bits(x[i]));
    }
}

static void *as_dtype(run_t *r, const float *x, int64_t n, mp_dtype dt) {
    if (dt == MP_DTYPE_F32) return (void *)x;
    uint16_t *h = alloc_poisoned(r, (size_t)n * 2);
    for (int64_t i = 0; i < n; i++) h[i] = mp_f32_to_bf16_bits(x[i]);
    return h;
}

/* Set up kind on shape s in dt, impl, with seeded data; outputs poisoned.
 * specials: NaN, ±0, ±inf, denormals among the activations; shifted: the
 * last channel's inputs 300 +- 0.01 (a variance computed from raw moments
 * would lose it). */
static void setup(run_t *r, mp_op_kind kind, mp_op_attr a, mp_shape s, mp_dtype dt, mp_impl impl, bool training,
                  bool relu_after, uint64_t seed, bool specials, bool shifted) {
    memset(r, 0, sizeof *r);
    MP_ASSERT(op_fixture_init(&r->f, kind, a, 1, &s, NULL, MP_DTYPE_F32, impl, training) == MP_OK);
    op_fixture_randomize(&r->f, seed); /* parameters; activations below */
    mp_op_call *c = &r->f.call;
    mp_rng g;
    mp_rng_seed(&g, seed * 7 + 1);
    const int64_t n = mp_tensor_numel(&c->in[0]), n_out = mp_tensor_numel(&c->out);
    float *x = c->in[0].data;
    fill_activation(x, n, &g, specials, dt);
    fill_activation(c->d_out.data, n_out, &g, specials, dt);
    const int C = s.dims[1];
    const int64_t HW = s.ndim == 4 ? (int64_t)s.dims[2] * s.dims[3] : 1;
    for (int j = 0; shifted && j < s.dims[0]; j++)
        for (int64_t i = 0; i < HW; i++) {
            float *v = x + ((int64_t)j * C + C - 1) * HW + i;
            *v = mp_bf16_bits_to_f32(mp_f32_to_bf16_bits(300.0f + 0.01f * *v)); /* a bf16 value either way */
        }
    r->c = *c;
    r->c.relu_after = relu_after;
    /* a pooling node's oneDNN primitives (f32, JIT) run ahead of the vector
     * path: test the vector path; a bf16 node never has them */
    if (kind == MP_OP_AVGPOOL2D || dt == MP_DTYPE_BF16) r->c.state = NULL;
    r->c.in[0] = (mp_tensor){dt, s, as_dtype(r, c->in[0].data, n, dt)};
    r->c.d_out = (mp_tensor){dt, c->out.shape, as_dtype(r, c->d_out.data, n_out, dt)};
    r->c.out = (mp_tensor){dt, c->out.shape, alloc_poisoned(r, (size_t)n_out * mp_dtype_size(dt))};
    r->c.d_in[0] = (mp_tensor){dt, s, alloc_poisoned(r, (size_t)n * mp_dtype_size(dt))};
    for (int p = 0; p < r->f.info.n_params; p++)
        if (c->d_param[p].data) memset(c->d_param[p].data, 0xFF, (size_t)mp_tensor_numel(&c->d_param[p]) * 4);
    memset(c->saved, 0xFF, r->f.info.saved_bytes);
}

static void run(run_t *r) {
    CHECK(r->f.vt->forward(&r->c) == MP_OK, "forward: %s", mp_last_error());
    CHECK(r->f.vt->backward(&r->c) == MP_OK, "backward: %s", mp_last_error());
}

static double elem(const mp_tensor *t, int64_t i) {
    return t->dtype == MP_DTYPE_BF16 ? mp_bf16_bits_to_f32(((const uint16_t *)t->data)[i])
                                     : ((const float *)t->data)[i];
}

/* ||a - b|| / ||b|| over values, NaN where b is not NaN (an unwritten or
 * wrong element) counts as infinite; NaN in both is equal. */
static double rel_diff(const mp_tensor *a, const mp_tensor *b) {
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < mp_tensor_numel(b); i++) {
        double x = elem(a, i), y = elem(b, i);
        if (isnan(x) || isnan(y)) {
            if (isnan(x) != isnan(y)) return INFINITY;
            continue;
        }
        if (isinf(x) || isinf(y)) {
            if (x != y) return INFINITY;
            continue;
        }
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    return sqrt(d2) / fmax(sqrt(r2), 1e-30);
}

static bool same_bits(const mp_tensor *a, const mp_tensor *b) {
    return !memcmp(a->data, b->data, (size_t)mp_tensor_numel(b) * mp_dtype_size(b->dtype));
}

static bool same_f32(const float *a, const float *b, int64_t n) { return !memcmp(a, b, (size_t)n * 4); }

/* relu / leaky relu / 2x2 average pooling: the fast instance writes the
 * reference's bits. */
static void check_pointwise(mp_op_kind kind, mp_shape s, mp_dtype dt, uint64_t seed) {
    mp_op_attr a = kind == MP_OP_AVGPOOL2D ? (mp_op_attr){.pool = {.kernel = 2, .stride = 2}}
                                           : (mp_op_attr){.slope = 0.15f};
    run_t ref, fast;
    setup(&ref, kind, a, s, dt, MP_IMPL_REF, true, false, seed, true, false);
    setup(&fast, kind, a, s, dt, MP_IMPL_AUTO, true, false, seed, true, false);
    run(&ref);
    run(&fast);
    char sh[64];
    mp_shape_str(&s, sh, sizeof sh);
    CHECK(same_bits(&fast.c.out, &ref.c.out), "%s %s %s on %s: forward differs from the reference",
          ref.f.vt->name, mp_dtype_name(dt), sh, mp_fast_isa_name(mp_fast_isa_current()));
    CHECK(same_bits(&fast.c.d_in[0], &ref.c.d_in[0]), "%s %s %s on %s: backward differs from the reference",
          ref.f.vt->name, mp_dtype_name(dt), sh, mp_fast_isa_name(mp_fast_isa_current()));
    free_run(&ref);
    free_run(&fast);
}

/* batchnorm2d (relu_after or not): fast vs reference within tol. */
static void check_bn(mp_shape s, mp_dtype dt, bool training, bool relu, uint64_t seed) {
    mp_op_attr a = {.bn = {.eps = 1e-5f, .momentum = 0.1f}};
    run_t ref, fast;
    setup(&ref, MP_OP_BATCHNORM2D, a, s, dt, MP_IMPL_REF, training, relu, seed, false, true);
    setup(&fast, MP_OP_BATCHNORM2D, a, s, dt, MP_IMPL_AUTO, training, relu, seed, false, true);
    CHECK(fast.c.state == NULL || mp_fast_isa_current() == MP_FAST_NONE,
          "MP_IMPL_AUTO prepared oneDNN although a vector instance runs");
    run(&ref);
    run(&fast);
    char sh[64];
    mp_shape_str(&s, sh, sizeof sh);
    const char *isa = mp_fast_isa_name(mp_fast_isa_current());
    /* f32: float arithmetic vs double; bf16: that, across a rounding */
    const double tol = dt == MP_DTYPE_F32 ? 1e-5 : 1e-3;
    double e_out = rel_diff(&fast.c.out, &ref.c.out), e_dx = rel_diff(&fast.c.d_in[0], &ref.c.d_in[0]);
    CHECK(e_out < tol, "batchnorm2d%s %s %s %s on %s: output rel. diff %g", relu ? "+relu" : "", mp_dtype_name(dt),
          training ? "training" : "inference", sh, isa, e_out);
    CHECK(e_dx < tol, "batchnorm2d%s %s %s %s on %s: input gradient rel. diff %g", relu ? "+relu" : "",
          mp_dtype_name(dt), training ? "training" : "inference", sh, isa, e_dx);
    for (int p = 0; p < ref.f.info.n_params; p++) {
        mp_tensor *t = ref.f.info.params[p].trainable ? &ref.f.call.d_param[p] : &ref.f.call.param[p];
        mp_tensor *u = ref.f.info.params[p].trainable ? &fast.f.call.d_param[p] : &fast.f.call.param[p];
        double e = rel_diff(u, t);
        CHECK(e < 1e-5, "batchnorm2d%s %s %s %s: %s%s rel. diff %g", relu ? "+relu" : "", mp_dtype_name(dt), sh,
              isa, ref.f.info.params[p].trainable ? "gradient of " : "", ref.f.info.params[p].name, e);
    }
    if (training) { /* the saved batch statistics backward reads: the mean in units of the
                       channel's standard deviation (what normalizing sees), invstd relative */
        const double *ms = ref.f.call.saved, *mf = fast.f.call.saved;
        const int C = s.dims[1];
        double worst = 0;
        for (int k = 0; k < C; k++) {
            worst = fmax(worst, fabs(mf[k] - ms[k]) * ms[C + k]);
            worst = fmax(worst, fabs(mf[C + k] - ms[C + k]) / ms[C + k]);
        }
        CHECK(worst < 1e-5, "batchnorm2d %s %s on %s: saved mean/invstd differ by %g", mp_dtype_name(dt), sh, isa,
              worst);
    }
    free_run(&ref);
    free_run(&fast);
}

/* Fused batchnorm2d + relu against batchnorm2d, then relu, on one path
 * (impl) and dtype: the same bits forward and backward. */
static void check_fused_equals_pair(mp_shape s, mp_dtype dt, mp_impl impl, bool training, uint64_t seed) {
    mp_op_attr a = {.bn = {.eps = 1e-5f, .momentum = 0.1f}};
    run_t fused, bn, relu;
    setup(&fused, MP_OP_BATCHNORM2D, a, s, dt, impl, training, true, seed, false, false);
    setup(&bn, MP_OP_BATCHNORM2D, a, s, dt, impl, training, false, seed, false, false);
    setup(&relu, MP_OP_RELU, (mp_op_attr){0}, s, dt, impl, training, false, seed, false, false);
    const char *isa = impl == MP_IMPL_REF ? "reference" : mp_fast_isa_name(mp_fast_isa_current());
    CHECK(fused.f.vt->forward(&fused.c) == MP_OK && bn.f.vt->forward(&bn.c) == MP_OK, "forward");
    relu.c.in[0] = bn.c.out;
    CHECK(relu.f.vt->forward(&relu.c) == MP_OK, "relu forward");
    CHECK(same_bits(&fused.c.out, &relu.c.out), "fused %s %s: forward differs from batchnorm2d then relu",
          mp_dtype_name(dt), isa);
    /* backward: relu's d_in is the batch norm's d_out */
    relu.c.d_out = fused.c.d_out;
    CHECK(relu.f.vt->backward(&relu.c) == MP_OK, "relu backward");
    bn.c.d_out = relu.c.d_in[0];
    CHECK(fused.f.vt->backward(&fused.c) == MP_OK && bn.f.vt->backward(&bn.c) == MP_OK, "backward");
    CHECK(same_bits(&fused.c.d_in[0], &bn.c.d_in[0]), "fused %s %s: input gradient differs", mp_dtype_name(dt), isa);
    for (int p = 0; p < 2; p++)
        CHECK(same_f32(fused.f.call.d_param[p].data, bn.f.call.d_param[p].data, s.dims[1]),
              "fused %s %s: gradient of %s differs", mp_dtype_name(dt), isa, bn.f.info.params[p].name);
    free_run(&fused);
    free_run(&bn);
    free_run(&relu);
}

int main(void) {
    const mp_fast_isa best = mp_fast_isa_best();
    printf("fast paths on this CPU: up to %s\n", mp_fast_isa_name(best));
    const mp_shape small = mp_shape4(3, 5, 7, 9), big = mp_shape4(16, 12, 20, 20), flat = mp_shape2(33, 9);
    const mp_dtype dts[2] = {MP_DTYPE_F32, MP_DTYPE_BF16};
    int isas = 0;
    for (int isa = best; isa >= (best == MP_FAST_NONE ? MP_FAST_NONE : MP_FAST_AVX2); isa--, isas++) {
        CHECK(mp_fast_isa_set((mp_fast_isa)isa) == (mp_fast_isa)isa, "cannot select %s",
              mp_fast_isa_name((mp_fast_isa)isa));
        for (int d = 0; d < 2; d++) {
            uint64_t seed = 100 + 10 * (uint64_t)isa + (uint64_t)d;
            check_pointwise(MP_OP_RELU, small, dts[d], seed);
            check_pointwise(MP_OP_RELU, big, dts[d], seed + 1);
            check_pointwise(MP_OP_LEAKY_RELU, small, dts[d], seed + 2);
            check_pointwise(MP_OP_LEAKY_RELU, big, dts[d], seed + 3);
            check_pointwise(MP_OP_AVGPOOL2D, small, dts[d], seed + 9); /* 7x9: odd */
            check_pointwise(MP_OP_AVGPOOL2D, big, dts[d], seed + 10);
            for (int relu = 0; relu < 2; relu++)
                for (int train = 1; train >= 0; train--) {
                    check_bn(small, dts[d], train, relu, seed + 4);
                    check_bn(big, dts[d], train, relu, seed + 5);
                    check_bn(flat, dts[d], train, relu, seed + 6);
                }
            check_fused_equals_pair(big, dts[d], MP_IMPL_AUTO, true, seed + 7);
            check_fused_equals_pair(small, dts[d], MP_IMPL_AUTO, false, seed + 8);
        }
    }
    printf("fast paths checked on %d instruction set(s)\n", isas);
    /* the reference: fused == the pair in f32 and bf16 */
    for (int d = 0; d < 2; d++) {
        check_fused_equals_pair(big, dts[d], MP_IMPL_REF, true, 7);
        check_fused_equals_pair(small, dts[d], MP_IMPL_REF, false, 8);
    }
    /* f64 gradient of the fused op (training and inference, 4-D and 2-D) */
    mp_op_attr a = {.bn = {.eps = 1e-5f, .momentum = 0.1f}};
    mp_shape shapes[2] = {mp_shape4(3, 4, 3, 5), mp_shape2(7, 3)};
    for (int k = 0; k < 2; k++)
        for (int train = 1; train >= 0; train--) {
            double e = gradcheck_op_relu_after(MP_OP_BATCHNORM2D, a, 1, &shapes[k], NULL, train, 30 + k, 0);
            CHECK(e < 1e-6, "fused batchnorm2d+relu gradient (%s, %dD): rel. err %g", train ? "training" : "inference",
                  shapes[k].ndim, e);
        }
    mp_fast_isa_set(best);
    return test_summary("test_op_cpu_fast");
}
