/* op_harness.c — see op_harness.h. */
#include "op_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

static void *fixture_alloc(op_fixture *f, size_t bytes) {
    size_t n = MP_ALIGN64(bytes ? bytes : 64);
    void *p = aligned_alloc(64, n);
    MP_ASSERT(p);
    memset(p, 0, n);
    MP_ASSERT(f->n_mem < (int)(sizeof f->mem / sizeof f->mem[0]));
    f->mem[f->n_mem++] = p;
    return p;
}

static void make_tensor(op_fixture *f, mp_tensor *t, mp_dtype dt, mp_shape s) {
    t->dtype = dt;
    t->shape = s;
    t->data = fixture_alloc(f, (size_t)mp_shape_numel(&s) * mp_dtype_size(dt));
}

mp_status op_fixture_init(op_fixture *f, mp_op_kind kind, mp_op_attr attr, int n_in,
                          const mp_shape *in_shapes, const mp_dtype *in_dtypes, mp_dtype dt,
                          mp_impl impl, bool training) {
    memset(f, 0, sizeof *f);
    f->desc.kind = kind;
    f->desc.name = "test_op";
    f->desc.attr = attr;
    f->vt = mp_op_lookup(kind);
    MP_ASSERT(f->vt);
    f->info.n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        f->info.in[i] = in_shapes[i];
        f->info.in_dtype[i] = in_dtypes ? in_dtypes[i] : dt;
    }
    MP_TRY(f->vt->infer(&f->desc, &f->info));
    void *state = NULL;
    if (f->vt->prepare) MP_TRY(f->vt->prepare(&f->desc, &f->info, dt, impl, training, &state));
    mp_op_call *c = &f->call;
    c->desc = &f->desc;
    c->info = &f->info;
    c->state = state;
    c->impl = impl;
    c->training = training;
    c->seed = 12345;
    c->n_in = n_in;
    for (int i = 0; i < n_in; i++) {
        make_tensor(f, &c->in[i], f->info.in_dtype[i], in_shapes[i]);
        if (f->info.in_dtype[i] != MP_DTYPE_I32) make_tensor(f, &c->d_in[i], dt, in_shapes[i]);
    }
    make_tensor(f, &c->out, dt, f->info.out);
    make_tensor(f, &c->d_out, dt, f->info.out);
    for (int i = 0; i < f->info.n_params; i++) {
        make_tensor(f, &c->param[i], dt, f->info.params[i].shape);
        if (f->info.params[i].trainable) make_tensor(f, &c->d_param[i], dt, f->info.params[i].shape);
    }
    c->saved = fixture_alloc(f, f->info.saved_bytes);
    const size_t ws = MP_ALIGN64(f->info.workspace_bytes) + f->info.tangent_workspace_bytes; /* op.h: the tangents' too */
    c->workspace = fixture_alloc(f, ws);
    return MP_OK;
}

void op_fixture_free(op_fixture *f) {
    if (f->vt && f->vt->release && f->call.state) f->vt->release(f->call.state);
    for (int i = 0; i < f->n_mem; i++) free(f->mem[i]);
    f->n_mem = 0;
}

static void set_elem(mp_tensor *t, int64_t i, double v) {
    if (t->dtype == MP_DTYPE_F64) ((double *)t->data)[i] = v;
    else if (t->dtype == MP_DTYPE_F32) ((float *)t->data)[i] = (float)v;
    else if (t->dtype == MP_DTYPE_I32) ((int32_t *)t->data)[i] = (int32_t)v;
    else MP_ASSERT(!"unsupported dtype in harness");
}

static double get_elem(const mp_tensor *t, int64_t i) {
    if (t->dtype == MP_DTYPE_F64) return ((const double *)t->data)[i];
    if (t->dtype == MP_DTYPE_F32) return ((const float *)t->data)[i];
    if (t->dtype == MP_DTYPE_I32) return ((const int32_t *)t->data)[i];
    MP_ASSERT(!"unsupported dtype in harness");
    return 0;
}

void op_fixture_randomize(op_fixture *f, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    mp_op_call *c = &f->call;
    bool is_loss = f->desc.kind == MP_OP_SOFTMAX_CE || f->desc.kind == MP_OP_BCE_LOGITS;
    for (int i = 0; i < c->n_in; i++) {
        mp_tensor *t = &c->in[i];
        int64_t n = mp_tensor_numel(t);
        for (int64_t j = 0; j < n; j++) {
            if (t->dtype == MP_DTYPE_I32) set_elem(t, j, (double)mp_rng_below(&r, (uint64_t)c->in[0].shape.dims[1]));
            else if (f->desc.kind == MP_OP_BCE_LOGITS && i == 1) set_elem(t, j, mp_rng_uniform(&r));
            else set_elem(t, j, mp_rng_normal(&r));
        }
    }
    for (int p = 0; p < f->info.n_params; p++) {
        const mp_param_spec *ps = &f->info.params[p];
        mp_tensor *t = &c->param[p];
        int64_t n = mp_tensor_numel(t);
        double sd = 1.0 / sqrt(ps->fan_in > 0 ? ps->fan_in : 1);
        for (int64_t j = 0; j < n; j++) {
            double v;
            if (!strcmp(ps->name, "running_var")) v = 0.5 + mp_rng_uniform(&r);
            else if (!strcmp(ps->name, "weight") && f->desc.kind == MP_OP_BATCHNORM2D) v = 1.0 + 0.3 * mp_rng_normal(&r);
            else v = sd * mp_rng_normal(&r);
            set_elem(t, j, v);
        }
    }
    int64_t n = mp_tensor_numel(&c->d_out);
    for (int64_t j = 0; j < n; j++) set_elem(&c->d_out, j, is_loss ? 1.7 : mp_rng_normal(&r));
}

void op_fixture_copy_data(op_fixture *dst, const op_fixture *src) {
    for (int i = 0; i < src->call.n_in; i++)
        for (int64_t j = 0; j < mp_tensor_numel(&src->call.in[i]); j++)
            set_elem(&dst->call.in[i], j, get_elem(&src->call.in[i], j));
    for (int p = 0; p < src->info.n_params; p++)
        for (int64_t j = 0; j < mp_tensor_numel(&src->call.param[p]); j++)
            set_elem(&dst->call.param[p], j, get_elem(&src->call.param[p], j));
    for (int64_t j = 0; j < mp_tensor_numel(&src->call.d_out); j++)
        set_elem(&dst->call.d_out, j, get_elem(&src->call.d_out, j));
}

/* L = sum(d_out * out) at the current inputs (d_out is the fixed weighting). */
static double weighted_loss(op_fixture *f) {
    mp_status s = f->vt->forward(&f->call);
    MP_ASSERT(s == MP_OK);
    double L = 0;
    for (int64_t j = 0; j < mp_tensor_numel(&f->call.out); j++)
        L += get_elem(&f->call.d_out, j) * get_elem(&f->call.out, j);
    return L;
}

/* Compare analytic gradient `g` of tensor `x` against central differences.
 * Checks every element of small tensors and 300 random ones of large ones. */
static double check_tensor(op_fixture *f, mp_tensor *x, const mp_tensor *g, const char *what,
                           mp_rng *r, int verbose) {
    const double h = 1e-6;
    int64_t n = mp_tensor_numel(x);
    int64_t count = n <= 600 ? n : 300;
    double diff2 = 0, ref2 = 0, an2 = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t j = n <= 600 ? k : (int64_t)mp_rng_below(r, (uint64_t)n);
        double x0 = get_elem(x, j);
        set_elem(x, j, x0 + h);
        double lp = weighted_loss(f);
        set_elem(x, j, x0 - h);
        double lm = weighted_loss(f);
        set_elem(x, j, x0);
        double num = (lp - lm) / (2 * h);
        double an = get_elem(g, j);
        diff2 += (num - an) * (num - an);
        ref2 += num * num;
        an2 += an * an;
    }
    double rel = sqrt(diff2) / fmax(sqrt(ref2), 1e-12);
    if (sqrt(an2) < 1e-10) {
        fprintf(stderr, "gradcheck %s: %s: analytic gradient is all zero\n",
                mp_op_lookup(f->desc.kind)->name, what);
        rel = INFINITY;
    }
    if (verbose || !(rel < 1e-5))
        printf("  gradcheck %-16s %-10s n=%-7lld checked=%-4lld rel.err=%.3g\n",
               mp_op_lookup(f->desc.kind)->name, what, (long long)n, (long long)count, rel);
    return rel;
}

static double gradcheck(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                        const mp_dtype *in_dtypes, bool training, bool relu_after, uint64_t seed, int verbose) {
    op_fixture f;
    mp_dtype dts[MP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++)
        dts[i] = in_dtypes && in_dtypes[i] == MP_DTYPE_I32 ? MP_DTYPE_I32 : MP_DTYPE_F64;
    mp_status s = op_fixture_init(&f, kind, attr, n_in, in_shapes, dts, MP_DTYPE_F64, MP_IMPL_REF, training);
    if (s != MP_OK) {
        fprintf(stderr, "gradcheck: init failed: %s\n", mp_last_error());
        return INFINITY;
    }
    op_fixture_randomize(&f, seed);
    f.call.relu_after = relu_after;
    if (f.vt->forward(&f.call) != MP_OK || f.vt->backward(&f.call) != MP_OK) {
        fprintf(stderr, "gradcheck: forward/backward failed: %s\n", mp_last_error());
        op_fixture_free(&f);
        return INFINITY;
    }
    /* keep the analytic gradients: later forwards may reuse saved/workspace */
    op_fixture g;
    MP_ASSERT(op_fixture_init(&g, kind, attr, n_in, in_shapes, dts, MP_DTYPE_F64, MP_IMPL_REF, training) == MP_OK);
    for (int i = 0; i < n_in; i++)
        if (f.call.d_in[i].data)
            memcpy(g.call.d_in[i].data, f.call.d_in[i].data, (size_t)mp_tensor_numel(&f.call.d_in[i]) * 8);
    for (int p = 0; p < f.info.n_params; p++)
        if (f.call.d_param[p].data)
            memcpy(g.call.d_param[p].data, f.call.d_param[p].data, (size_t)mp_tensor_numel(&f.call.d_param[p]) * 8);

    mp_rng r;
    mp_rng_seed(&r, seed ^ 0x5eed);
    double worst = 0;
    for (int i = 0; i < n_in; i++) {
        if (!f.call.d_in[i].data) continue;
        char what[32];
        snprintf(what, sizeof what, "input%d", i);
        worst = fmax(worst, check_tensor(&f, &f.call.in[i], &g.call.d_in[i], what, &r, verbose));
    }
    for (int p = 0; p < f.info.n_params; p++) {
        if (!f.call.d_param[p].data) continue;
        worst = fmax(worst, check_tensor(&f, &f.call.param[p], &g.call.d_param[p], f.info.params[p].name, &r, verbose));
    }
    op_fixture_free(&g);
    op_fixture_free(&f);
    return worst;
}

double gradcheck_op(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                    const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose) {
    return gradcheck(kind, attr, n_in, in_shapes, in_dtypes, training, false, seed, verbose);
}

double gradcheck_op_relu_after(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                               const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose) {
    return gradcheck(kind, attr, n_in, in_shapes, in_dtypes, training, true, seed, verbose);
}

double op_rel_err(const mp_tensor *a, const mp_tensor *b) {
    double d2 = 0, r2 = 0;
    for (int64_t j = 0; j < mp_tensor_numel(b); j++) {
        double x = get_elem(a, j), y = get_elem(b, j);
        d2 += (x - y) * (x - y);
        r2 += y * y;
    }
    if (!isfinite(d2)) return INFINITY;
    return sqrt(d2) / fmax(sqrt(r2), 1e-30);
}

double compare_impls_op(mp_op_kind kind, mp_op_attr attr, int n_in, const mp_shape *in_shapes,
                        const mp_dtype *in_dtypes, bool training, uint64_t seed, int verbose) {
    op_fixture a, b;
    if (op_fixture_init(&a, kind, attr, n_in, in_shapes, in_dtypes, MP_DTYPE_F32, MP_IMPL_ONEDNN, training) != MP_OK ||
        op_fixture_init(&b, kind, attr, n_in, in_shapes, in_dtypes, MP_DTYPE_F32, MP_IMPL_REF, training) != MP_OK) {
        fprintf(stderr, "compare_impls: init failed: %s\n", mp_last_error());
        return INFINITY;
    }
    op_fixture_randomize(&b, seed);
    op_fixture_copy_data(&a, &b);
    /* poison what the op must write */
    memset(a.call.out.data, 0xff, (size_t)mp_tensor_numel(&a.call.out) * 4);
    double worst = 0;
    if (a.vt->forward(&a.call) != MP_OK || b.vt->forward(&b.call) != MP_OK) {
        fprintf(stderr, "compare_impls: forward failed: %s\n", mp_last_error());
        worst = INFINITY;
        goto done;
    }
    worst = fmax(worst, op_rel_err(&a.call.out, &b.call.out));
    if (verbose) printf("  %-16s out      rel.err=%.3g\n", a.vt->name, worst);
    for (int i = 0; i < n_in; i++)
        if (a.call.d_in[i].data) memset(a.call.d_in[i].data, 0xff, (size_t)mp_tensor_numel(&a.call.d_in[i]) * 4);
    for (int p = 0; p < a.info.n_params; p++)
        if (a.call.d_param[p].data) memset(a.call.d_param[p].data, 0xff, (size_t)mp_tensor_numel(&a.call.d_param[p]) * 4);
    if (a.vt->backward(&a.call) != MP_OK || b.vt->backward(&b.call) != MP_OK) {
        fprintf(stderr, "compare_impls: backward failed: %s\n", mp_last_error());
        worst = INFINITY;
        goto done;
    }
    for (int i = 0; i < n_in; i++) {
        if (!a.call.d_in[i].data) continue;
        double e = op_rel_err(&a.call.d_in[i], &b.call.d_in[i]);
        if (verbose) printf("  %-16s d_in%d    rel.err=%.3g\n", a.vt->name, i, e);
        worst = fmax(worst, e);
    }
    for (int p = 0; p < a.info.n_params; p++) {
        if (!a.call.d_param[p].data) continue;
        double e = op_rel_err(&a.call.d_param[p], &b.call.d_param[p]);
        if (verbose) printf("  %-16s d_%-7s rel.err=%.3g\n", a.vt->name, a.info.params[p].name, e);
        worst = fmax(worst, e);
    }
    /* running statistics (buffers) must agree too */
    for (int p = 0; p < a.info.n_params; p++) {
        if (a.info.params[p].trainable) continue;
        worst = fmax(worst, op_rel_err(&a.call.param[p], &b.call.param[p]));
    }
done:
    op_fixture_free(&a);
    op_fixture_free(&b);
    return worst;
}
