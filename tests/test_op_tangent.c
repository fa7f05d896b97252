/* test_op_tangent.c — second derivatives of every op (forward_tangent and
 * backward_tangent, ops/tangent.h) against central finite differences in
 * f64 with the reference kernels:
 *  - the forward tangent against (f(x + e v, w + e u) - f(x - e v, ...)) / 2e;
 *  - the backward tangent against the same difference of backward's outputs,
 *    moving the inputs, the parameters and d_out together, and again with
 *    each of them held still (a NULL direction) or an output not wanted;
 *  - guards: the part that comes from the inputs and parameters alone
 *    (t_d_out = 0) is not all zero where the op has second derivatives, the
 *    part from t_d_out alone is not all zero anywhere;
 *  - the primal call (inputs, outputs, gradients, running statistics, saved)
 *    is left as it was; every tangent output is overwritten (poisoned first);
 *  - f32 (reference kernels, oneDNN and plan dispatch for the primal calls)
 *    agrees with f64 to 1e-4;
 *  - other dtypes, a tangent of another dtype and the fused residual add are
 *    errors that name the op and node. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_harness.h"
#include "core/rng.h"

#define FD_EPS 1e-4
#define FD_TOL 1e-6
#define F32_TOL 1e-4

enum { PREP_NONE, PREP_KINK, PREP_DISTINCT };

typedef struct {
    const char *label;
    mp_op_kind kind;
    mp_op_attr attr;
    int n_in;
    mp_shape in[MP_MAX_INPUTS];
    bool labels;       /* in[1] is int32 labels */
    bool training, relu_after;
    bool second_order; /* backward moves with the inputs or parameters */
    int prep;          /* keep the inputs away from kinks */
} tcase;

/* Which directions a run holds still (NULL) or which output it does not want. */
enum { V_ALL, V_NO_TIN0, V_NO_TPARAM, V_NO_TDOUT, V_ONLY_TDOUT, V_SKIP_DIN0, V_COUNT };
static const char *const vname[V_COUNT] = {"all directions", "t_in[0] = 0",   "t_param = 0",
                                           "t_d_out = 0",    "t_d_out alone", "t_d_in[0] unwanted"};

/* The full set of tangent tensors of one fixture; variants copy it into the call. */
typedef struct {
    mp_tensor t_in[MP_MAX_INPUTS], t_param[MP_MAX_PARAMS], t_out, t_d_out;
    mp_tensor t_d_in[MP_MAX_INPUTS], t_d_param[MP_MAX_PARAMS];
    void *mem[2 * MP_MAX_INPUTS + 2 * MP_MAX_PARAMS + 2];
    int n_mem;
} tangents;

static double get(const mp_tensor *t, int64_t i) {
    return t->dtype == MP_DTYPE_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

static void set(mp_tensor *t, int64_t i, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v;
    else ((float *)t->data)[i] = (float)v;
}

static size_t bytes_of(const mp_tensor *t) { return (size_t)mp_tensor_numel(t) * mp_dtype_size(t->dtype); }

static mp_tensor like(tangents *T, const mp_tensor *p) {
    mp_tensor t = *p;
    t.data = calloc(1, bytes_of(p));
    MP_ASSERT(t.data);
    T->mem[T->n_mem++] = t.data;
    return t;
}

/* Tangents for every real input, trainable parameter, the output and d_out;
 * directions ~ N(0, 1) drawn from seed (the same values in f32 and f64). */
static void tangents_init(tangents *T, const op_fixture *f, uint64_t seed) {
    memset(T, 0, sizeof *T);
    const mp_op_call *c = &f->call;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i].dtype != MP_DTYPE_I32) {
            T->t_in[i] = like(T, &c->in[i]);
            T->t_d_in[i] = like(T, &c->in[i]);
        }
    for (int p = 0; p < f->info.n_params; p++)
        if (f->info.params[p].trainable) {
            T->t_param[p] = like(T, &c->param[p]);
            T->t_d_param[p] = like(T, &c->param[p]);
        }
    T->t_out = like(T, &c->out);
    T->t_d_out = like(T, &c->d_out);
    mp_rng r;
    mp_rng_seed(&r, seed);
    mp_tensor *dirs[MP_MAX_INPUTS + MP_MAX_PARAMS + 1];
    int nd = 0;
    for (int i = 0; i < c->n_in; i++) dirs[nd++] = &T->t_in[i];
    for (int p = 0; p < f->info.n_params; p++) dirs[nd++] = &T->t_param[p];
    dirs[nd++] = &T->t_d_out;
    for (int k = 0; k < nd; k++)
        for (int64_t j = 0; dirs[k]->data && j < mp_tensor_numel(dirs[k]); j++) set(dirs[k], j, mp_rng_normal(&r));
}

static void tangents_free(tangents *T) {
    for (int i = 0; i < T->n_mem; i++) free(T->mem[i]);
}

static void apply_variant(mp_op_call *c, const tangents *T, int v) {
    for (int i = 0; i < MP_MAX_INPUTS; i++) {
        c->t_in[i] = T->t_in[i];
        c->t_d_in[i] = T->t_d_in[i];
        if (v == V_ONLY_TDOUT || (v == V_NO_TIN0 && i == 0)) c->t_in[i].data = NULL;
    }
    for (int p = 0; p < MP_MAX_PARAMS; p++) {
        c->t_param[p] = T->t_param[p];
        c->t_d_param[p] = T->t_d_param[p];
        if (v == V_ONLY_TDOUT || v == V_NO_TPARAM) c->t_param[p].data = NULL;
    }
    c->t_out = T->t_out;
    c->t_d_out = T->t_d_out;
    if (v == V_NO_TDOUT) c->t_d_out.data = NULL;
    if (v == V_SKIP_DIN0) c->t_d_in[0].data = NULL;
}

static void poison(const mp_tensor *t) {
    for (int64_t j = 0; t->data && j < mp_tensor_numel(t); j++) set((mp_tensor *)t, j, NAN);
}

/* A copy of every primal tensor of the call and of saved, to show the
 * tangent calls leave them alone. */
typedef struct {
    const void *at[3 * MP_MAX_INPUTS + 3 * MP_MAX_PARAMS + 3];
    void *copy[3 * MP_MAX_INPUTS + 3 * MP_MAX_PARAMS + 3];
    size_t bytes[3 * MP_MAX_INPUTS + 3 * MP_MAX_PARAMS + 3];
    int n;
} snapshot;

static void snap_add(snapshot *s, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    s->at[s->n] = p;
    s->bytes[s->n] = bytes;
    s->copy[s->n] = malloc(bytes);
    memcpy(s->copy[s->n++], p, bytes);
}

static void snap_take(snapshot *s, const op_fixture *f) {
    const mp_op_call *c = &f->call;
    s->n = 0;
    for (int i = 0; i < c->n_in; i++) {
        snap_add(s, c->in[i].data, bytes_of(&c->in[i]));
        snap_add(s, c->d_in[i].data, bytes_of(&c->d_in[i]));
    }
    for (int p = 0; p < f->info.n_params; p++) {
        snap_add(s, c->param[p].data, bytes_of(&c->param[p]));
        snap_add(s, c->d_param[p].data, bytes_of(&c->d_param[p]));
    }
    snap_add(s, c->out.data, bytes_of(&c->out));
    snap_add(s, c->d_out.data, bytes_of(&c->d_out));
    snap_add(s, c->saved, f->info.saved_bytes);
}

/* Number of snapshot entries that changed; frees the copies. */
static int snap_changed(snapshot *s) {
    int changed = 0;
    for (int k = 0; k < s->n; k++) {
        changed += memcmp(s->at[k], s->copy[k], s->bytes[k]) != 0;
        free(s->copy[k]);
    }
    s->n = 0;
    return changed;
}

/* Both tangent calls, with their outputs poisoned first. */
static bool run_tangents(op_fixture *f, const char *what) {
    mp_op_call *c = &f->call;
    poison(&c->t_out);
    for (int i = 0; i < c->n_in; i++) poison(&c->t_d_in[i]);
    for (int p = 0; p < f->info.n_params; p++) poison(&c->t_d_param[p]);
    mp_status s1 = f->vt->forward_tangent(c);
    CHECK(s1 == MP_OK, "%s: forward_tangent: %s", what, mp_last_error());
    mp_status s2 = s1 == MP_OK ? f->vt->backward_tangent(c) : s1;
    CHECK(s2 == MP_OK, "%s: backward_tangent: %s", what, mp_last_error());
    return s1 == MP_OK && s2 == MP_OK;
}

static void axpy(mp_tensor *y, double a, const mp_tensor *x) {
    for (int64_t j = 0; j < mp_tensor_numel(y); j++) set(y, j, get(y, j) + a * get(x, j));
}

/* g = f's primal data moved by s along f's current directions; then
 * forward and backward on g. */
static void move_and_run(op_fixture *g, const op_fixture *f, double s) {
    const mp_op_call *c = &f->call;
    op_fixture_copy_data(g, f);
    g->call.relu_after = c->relu_after;
    for (int i = 0; i < c->n_in; i++)
        if (c->t_in[i].data) axpy(&g->call.in[i], s, &c->t_in[i]);
    for (int p = 0; p < f->info.n_params; p++)
        if (c->t_param[p].data) axpy(&g->call.param[p], s, &c->t_param[p]);
    if (c->t_d_out.data) axpy(&g->call.d_out, s, &c->t_d_out);
    MP_ASSERT(g->vt->forward(&g->call) == MP_OK && g->vt->backward(&g->call) == MP_OK);
}

typedef struct {
    double rel, an2, ref2; /* relative error, squared norms of the analytic and FD values */
} cmp;

/* Analytic tangent an against (p - m) / 2e. */
static cmp compare_fd(const mp_tensor *an, const mp_tensor *p, const mp_tensor *m) {
    cmp r = {0, 0, 0};
    double d2 = 0;
    for (int64_t j = 0; j < mp_tensor_numel(an); j++) {
        double fd = (get(p, j) - get(m, j)) / (2 * FD_EPS), a = get(an, j);
        d2 += (a - fd) * (a - fd);
        r.an2 += a * a;
        r.ref2 += fd * fd;
    }
    r.rel = d2 <= DBL_MAX ? sqrt(d2) / fmax(sqrt(r.ref2), 1e-12) : INFINITY;
    return r;
}

static void prep_inputs(const tcase *tc, op_fixture *f, mp_rng *r) {
    mp_tensor *x = &f->call.in[0];
    int64_t n = mp_tensor_numel(x);
    if (tc->prep == PREP_KINK) /* |x| >= 0.2: relu's kink stays out of the differences */
        for (int64_t j = 0; j < n; j++) set(x, j, get(x, j) + (get(x, j) >= 0 ? 0.2 : -0.2));
    if (tc->prep == PREP_DISTINCT) { /* values 0.01 apart: no window's maximum changes place */
        for (int64_t j = 0; j < n; j++) set(x, j, 0.01 * (double)j - 0.005 * (double)n);
        for (int64_t j = n - 1; j > 0; j--) {
            int64_t k = (int64_t)mp_rng_below(r, (uint64_t)j + 1);
            double t = get(x, j);
            set(x, j, get(x, k));
            set(x, k, t);
        }
    }
}

/* Random primal data; for a fused ReLU, redrawn until no batch-norm output
 * is within 0.01 of the kink. */
static void primal_init(const tcase *tc, op_fixture *f, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int attempt = 0;; attempt++) {
        op_fixture_randomize(f, seed + 1000 * (uint64_t)attempt);
        prep_inputs(tc, f, &r);
        if (!tc->relu_after) return;
        f->call.relu_after = false;
        MP_ASSERT(f->vt->forward(&f->call) == MP_OK);
        double closest = INFINITY;
        for (int64_t j = 0; j < mp_tensor_numel(&f->call.out); j++) closest = fmin(closest, fabs(get(&f->call.out, j)));
        f->call.relu_after = true;
        if (closest > 0.01) return;
        MP_ASSERT(attempt < 100);
    }
}

static mp_status fixture(const tcase *tc, op_fixture *f, mp_dtype dt, mp_impl impl) {
    mp_dtype dts[MP_MAX_INPUTS];
    for (int i = 0; i < tc->n_in; i++) dts[i] = tc->labels && i == 1 ? MP_DTYPE_I32 : dt;
    return op_fixture_init(f, tc->kind, tc->attr, tc->n_in, tc->in, dts, dt, impl, tc->training);
}

/* The f32 tangents of the call (primal calls through impl) against the f64
 * ones in f (after a V_ALL run). */
static double f32_vs_f64(const tcase *tc, const op_fixture *f, uint64_t seed, mp_impl impl) {
    op_fixture a;
    if (fixture(tc, &a, MP_DTYPE_F32, impl) != MP_OK) {
        CHECK(0, "%s: f32 fixture (impl %d): %s", tc->label, (int)impl, mp_last_error());
        return INFINITY;
    }
    op_fixture_copy_data(&a, f);
    a.call.relu_after = tc->relu_after;
    MP_ASSERT(a.vt->forward(&a.call) == MP_OK && a.vt->backward(&a.call) == MP_OK);
    tangents T;
    tangents_init(&T, &a, seed);
    apply_variant(&a.call, &T, V_ALL);
    double worst = INFINITY;
    if (run_tangents(&a, tc->label)) {
        const mp_op_call *c = &a.call, *d = &f->call;
        worst = op_rel_err(&c->t_out, &d->t_out);
        for (int i = 0; i < c->n_in; i++)
            if (c->t_d_in[i].data) worst = fmax(worst, op_rel_err(&c->t_d_in[i], &d->t_d_in[i]));
        for (int p = 0; p < a.info.n_params; p++)
            if (c->t_d_param[p].data) worst = fmax(worst, op_rel_err(&c->t_d_param[p], &d->t_d_param[p]));
    }
    tangents_free(&T);
    op_fixture_free(&a);
    return worst;
}

/* Every variant against finite differences; returns the worst forward and
 * backward relative errors in fwd/bwd. */
static void check_fd(const tcase *tc, op_fixture *f, const tangents *T, double *fwd, double *bwd) {
    op_fixture gp, gm;
    MP_ASSERT(fixture(tc, &gp, MP_DTYPE_F64, MP_IMPL_REF) == MP_OK && fixture(tc, &gm, MP_DTYPE_F64, MP_IMPL_REF) == MP_OK);
    gp.call.seed = gm.call.seed = f->call.seed; /* dropout: the same mask */
    mp_op_call *c = &f->call;
    for (int v = 0; v < V_COUNT; v++) {
        char what[128];
        snprintf(what, sizeof what, "%s (%s)", tc->label, vname[v]);
        apply_variant(c, T, v);
        snapshot s;
        snap_take(&s, f);
        bool ok = run_tangents(f, what);
        CHECK(snap_changed(&s) == 0, "%s: a tangent call changed the primal call or saved", what);
        if (!ok) continue;
        move_and_run(&gp, f, FD_EPS);
        move_and_run(&gm, f, -FD_EPS);
        cmp co = compare_fd(&c->t_out, &gp.call.out, &gm.call.out);
        CHECK(co.rel <= FD_TOL, "%s: t_out rel.err %.3g", what, co.rel);
        *fwd = fmax(*fwd, co.rel);
        double an2 = 0, ref2 = 0; /* over every backward tangent */
        for (int i = 0; i < c->n_in; i++) {
            if (!c->t_d_in[i].data) continue;
            cmp cb = compare_fd(&c->t_d_in[i], &gp.call.d_in[i], &gm.call.d_in[i]);
            CHECK(cb.rel <= FD_TOL, "%s: t_d_in[%d] rel.err %.3g", what, i, cb.rel);
            *bwd = fmax(*bwd, cb.rel);
            an2 += cb.an2;
            ref2 += cb.ref2;
        }
        for (int p = 0; p < f->info.n_params; p++) {
            if (!c->t_d_param[p].data) continue;
            cmp cb = compare_fd(&c->t_d_param[p], &gp.call.d_param[p], &gm.call.d_param[p]);
            CHECK(cb.rel <= FD_TOL, "%s: t_d_%s rel.err %.3g", what, f->info.params[p].name, cb.rel);
            *bwd = fmax(*bwd, cb.rel);
            an2 += cb.an2;
            ref2 += cb.ref2;
        }
        /* guards against checks that pass on zeros */
        if (v == V_ALL) {
            CHECK(co.an2 > 1e-12 && co.ref2 > 1e-12, "%s: t_out is all zero", what);
            CHECK(an2 > 1e-12 && ref2 > 1e-12, "%s: the backward tangents are all zero", what);
        }
        if (v == V_ONLY_TDOUT) CHECK(an2 > 1e-12, "%s: the t_d_out part of the backward tangents is all zero", what);
        if (v == V_NO_TDOUT && tc->second_order)
            CHECK(an2 > 1e-12 && ref2 > 1e-12, "%s: the second-derivative part is all zero", what);
    }
    apply_variant(c, T, V_ALL);
    MP_ASSERT(run_tangents(f, tc->label));
    op_fixture_free(&gp);
    op_fixture_free(&gm);
}

/* Other dtypes, a tangent of another dtype and (batchnorm) the fused
 * residual add: errors naming the op and the node. */
static void check_errors(const tcase *tc, const op_fixture *f) {
    const char *name = f->vt->name;
    op_fixture b;
    MP_ASSERT(fixture(tc, &b, MP_DTYPE_BF16, MP_IMPL_REF) == MP_OK);
    CHECK_ERR(b.vt->forward_tangent(&b.call), MP_ERR_UNSUPPORTED, name, "test_op", "forward_tangent", "bf16");
    CHECK_ERR(b.vt->backward_tangent(&b.call), MP_ERR_UNSUPPORTED, name, "test_op", "backward_tangent", "bf16");
    op_fixture_free(&b);
    mp_op_call c = f->call;
    float wrong[1];
    c.t_in[0] = (mp_tensor){MP_DTYPE_F32, c.in[0].shape, wrong};
    CHECK_ERR(f->vt->forward_tangent(&c), MP_ERR_INVALID_ARG, name, "test_op", "f32", "f64");
    if (tc->kind == MP_OP_BATCHNORM2D) {
        c = f->call;
        c.resid = c.in[0];
        CHECK_ERR(f->vt->backward_tangent(&c), MP_ERR_UNSUPPORTED, name, "test_op", "residual");
    }
}

static void run_case(const tcase *tc, uint64_t seed) {
    op_fixture f;
    if (fixture(tc, &f, MP_DTYPE_F64, MP_IMPL_REF) != MP_OK) {
        CHECK(0, "%s: fixture: %s", tc->label, mp_last_error());
        return;
    }
    CHECK(f.vt->forward_tangent && f.vt->backward_tangent, "%s: no tangents", tc->label);
    if (!f.vt->forward_tangent || !f.vt->backward_tangent) {
        op_fixture_free(&f);
        return;
    }
    primal_init(tc, &f, seed);
    MP_ASSERT(f.vt->forward(&f.call) == MP_OK && f.vt->backward(&f.call) == MP_OK);
    tangents T;
    tangents_init(&T, &f, seed + 7);
    double fwd = 0, bwd = 0;
    check_fd(tc, &f, &T, &fwd, &bwd);
    const mp_impl impls[3] = {MP_IMPL_REF, MP_IMPL_ONEDNN, MP_IMPL_AUTO};
    double e32[3];
    for (int k = 0; k < 3; k++) {
        e32[k] = f32_vs_f64(tc, &f, seed + 7, impls[k]);
        CHECK(e32[k] <= F32_TOL, "%s: f32 (impl %d) vs f64 rel.err %.3g", tc->label, (int)impls[k], e32[k]);
    }
    printf("  %-26s fd: fwd %.1e bwd %.1e   f32 vs f64: ref %.1e onednn %.1e auto %.1e\n", tc->label, fwd, bwd,
           e32[0], e32[1], e32[2]);
    check_errors(tc, &f);
    tangents_free(&T);
    op_fixture_free(&f);
}

static mp_op_attr conv_attr(int out, int k, int stride, int pad, int dil, int groups, int out_pad) {
    mp_op_attr a = {0};
    a.conv = (mp_conv_opts){.out_channels = out, .kernel = k, .stride = stride, .padding = pad, .dilation = dil,
                            .groups = groups, .output_padding = out_pad, .bias = true};
    return a;
}

int main(void) {
    mp_op_attr none = {0}, lin = {0}, lin_nb = {0}, bn = {0}, leaky = {0}, pool = {0}, drop = {0}, flat = {0};
    lin.linear = (mp_linear_opts){.out_features = 3, .bias = true};
    lin_nb.linear = (mp_linear_opts){.out_features = 4, .bias = false};
    bn.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
    leaky.slope = 0.1f;
    pool.pool = (mp_pool_opts){.kernel = 3, .stride = 2, .padding = 1};
    drop.p = 0.3f;
    flat.reshape = mp_shape2(0, 48);
    mp_op_attr conv_nb = conv_attr(4, 2, 1, 0, 2, 1, 0);
    conv_nb.conv.bias = false;
    const mp_shape x4 = mp_shape4(2, 3, 4, 5), x2 = mp_shape2(4, 6);
    const tcase cases[] = {
        {"linear", MP_OP_LINEAR, lin, 1, {mp_shape2(4, 5)}, false, true, false, true, PREP_NONE},
        {"linear (no bias)", MP_OP_LINEAR, lin_nb, 1, {mp_shape2(3, 7)}, false, true, false, true, PREP_NONE},
        {"relu", MP_OP_RELU, none, 1, {x4}, false, true, false, false, PREP_KINK},
        {"add", MP_OP_ADD, none, 2, {x4, x4}, false, true, false, false, PREP_NONE},
        {"reshape", MP_OP_RESHAPE, flat, 1, {mp_shape4(2, 3, 4, 4)}, false, true, false, false, PREP_NONE},
        {"softmax_cross_entropy", MP_OP_SOFTMAX_CE, none, 2, {mp_shape2(6, 5), mp_shape1(6)}, true, true, false, true,
         PREP_NONE},
        {"bce_with_logits", MP_OP_BCE_LOGITS, none, 2, {x2, x2}, false, true, false, true, PREP_NONE},
        {"conv2d", MP_OP_CONV2D, conv_attr(6, 3, 2, 1, 1, 2, 0), 1, {mp_shape4(2, 4, 5, 5)}, false, true, false, true,
         PREP_NONE},
        {"conv2d (dilated, no bias)", MP_OP_CONV2D, conv_nb, 1, {mp_shape4(2, 3, 5, 6)}, false, true, false, true,
         PREP_NONE},
        {"conv_transpose2d", MP_OP_CONV_TRANSPOSE2D, conv_attr(6, 3, 2, 1, 1, 2, 1), 1, {mp_shape4(2, 4, 3, 3)},
         false, true, false, true, PREP_NONE},
        {"batchnorm2d train", MP_OP_BATCHNORM2D, bn, 1, {mp_shape4(3, 4, 3, 3)}, false, true, false, true, PREP_NONE},
        {"batchnorm2d train (N, C)", MP_OP_BATCHNORM2D, bn, 1, {mp_shape2(6, 5)}, false, true, false, true, PREP_NONE},
        {"batchnorm2d train + relu", MP_OP_BATCHNORM2D, bn, 1, {mp_shape4(3, 4, 3, 3)}, false, true, true, true,
         PREP_NONE},
        {"batchnorm2d eval", MP_OP_BATCHNORM2D, bn, 1, {mp_shape4(3, 4, 3, 3)}, false, false, false, true, PREP_NONE},
        {"leaky_relu", MP_OP_LEAKY_RELU, leaky, 1, {x4}, false, true, false, false, PREP_KINK},
        {"tanh", MP_OP_TANH, none, 1, {x4}, false, true, false, true, PREP_NONE},
        {"sigmoid", MP_OP_SIGMOID, none, 1, {x4}, false, true, false, true, PREP_NONE},
        {"maxpool2d", MP_OP_MAXPOOL2D, pool, 1, {mp_shape4(2, 3, 7, 7)}, false, true, false, false, PREP_DISTINCT},
        {"avgpool2d", MP_OP_AVGPOOL2D, pool, 1, {mp_shape4(2, 3, 7, 7)}, false, true, false, false, PREP_NONE},
        {"global_avgpool", MP_OP_GLOBAL_AVGPOOL, none, 1, {x4}, false, true, false, false, PREP_NONE},
        {"mul", MP_OP_MUL, none, 2, {x4, x4}, false, true, false, true, PREP_NONE},
        {"concat", MP_OP_CONCAT, none, 3, {mp_shape4(2, 2, 3, 3), mp_shape4(2, 3, 3, 3), mp_shape4(2, 1, 3, 3)},
         false, true, false, false, PREP_NONE},
        {"dropout train", MP_OP_DROPOUT, drop, 1, {mp_shape2(4, 50)}, false, true, false, false, PREP_NONE},
        {"dropout eval", MP_OP_DROPOUT, drop, 1, {mp_shape2(4, 50)}, false, false, false, false, PREP_NONE},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    const char *only = getenv("MP_TANGENT_ONLY"); /* one case, while debugging */
    bool covered[MP_OP_COUNT] = {false};
    for (int i = 0; i < n_cases; i++) {
        covered[cases[i].kind] = true;
        if (!only || strstr(cases[i].label, only)) run_case(&cases[i], 100 + 10 * (uint64_t)i);
    }
    /* every op has both tangents and a case above; the sources have none
     * (the executor seeds their tangents) */
    for (int k = 0; k < MP_OP_COUNT; k++) {
        const mp_op_vtable *vt = mp_op_lookup((mp_op_kind)k);
        bool source = k == MP_OP_INPUT || k == MP_OP_LABELS || k == MP_OP_TARGETS;
        CHECK(source || (vt->forward_tangent && vt->backward_tangent), "%s has no tangents", vt->name);
        CHECK(source || covered[k], "%s has no case in this test", vt->name);
    }
    return test_summary("test_op_tangent");
}
