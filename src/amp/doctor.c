/* doctor.c — the precision doctor's analysis (doctor.h).
 *
 * Forward: each node's output amax over the probe steps is fitted as
 * log2(amax) linear in the step over the probe's second half; the lower
 * 2-sigma bound of the slope, when positive, extrapolates it to the planned
 * end (noise alone predicts no growth). A node overflows fp16 when it stores
 * fp16 and its output, or computes in fp16 and one of its inputs (cast to
 * fp16), reaches 65504 / margin.
 * Gradients: measured unscaled (fp32 probe), so a loss scale 2^k shifts their
 * octave histogram by k: the share of non-zero values below fp16's smallest
 * subnormal 2^-24 at 2^k is read off it (averaged over the last quarter of
 * the probe). The window is [lo, hi]: lo the smallest scale keeping every
 * fp16 gradient's share <= underflow_max, hi the largest with the largest
 * gradient x margin below 65504. The dynamic scaler runs at the largest
 * scale without overflow, reached from its initial scale by backing off at
 * once or by growing once per growth_interval clean steps. */
#include "amp/doctor.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph.h"

#define FP16_MAX 65504.0
#define NO_SCALE 999

struct mp_doctor {
    int steps, cap, n;       /* probe steps; records per step */
    int64_t *step;
    mp_numerics_record *rec; /* steps x n */
};

mp_status mp_doctor_create(const mp_graph *g, mp_doctor **out) {
    (void)g;
    *out = calloc(1, sizeof **out);
    return *out ? MP_OK : mp_error(MP_ERR_NOMEM, "doctor: out of memory");
}

void mp_doctor_destroy(mp_doctor *d) {
    if (!d) return;
    free(d->step);
    free(d->rec);
    free(d);
}

mp_status mp_doctor_add(mp_doctor *d, int64_t step, const mp_numerics_record *rec, int n) {
    if (d->steps && n != d->n)
        return mp_error(MP_ERR_INTERNAL, "doctor: step %lld measured %d tensors, earlier steps %d", (long long)step, n,
                        d->n);
    if (d->steps == d->cap) {
        const int cap = d->cap ? 2 * d->cap : 64;
        int64_t *s = realloc(d->step, (size_t)cap * sizeof *s);
        if (s) d->step = s;
        mp_numerics_record *r = realloc(d->rec, (size_t)cap * (size_t)(n ? n : 1) * sizeof *r);
        if (r) d->rec = r;
        if (!s || !r) return mp_error(MP_ERR_NOMEM, "doctor: out of memory");
        d->cap = cap;
    }
    d->n = n;
    d->step[d->steps] = step;
    memcpy(d->rec + (size_t)d->steps * (size_t)n, rec, (size_t)n * sizeof *rec);
    d->steps++;
    return MP_OK;
}

static const mp_numerics_record *at(const mp_doctor *d, int s, int j) { return &d->rec[(size_t)s * (size_t)d->n + (size_t)j]; }

/* Record j's amax extrapolated to step T (see the file comment). */
static double predict(const mp_doctor *d, int j, int64_t T, double *seen) {
    *seen = 0;
    for (int s = 0; s < d->steps; s++) *seen = fmax(*seen, at(d, s, j)->stats.amax);
    const int from = d->steps / 2;
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    int m = 0;
    for (int s = from; s < d->steps; s++) {
        const double a = at(d, s, j)->stats.amax;
        if (!(a > 0)) continue;
        const double x = (double)d->step[s], y = log2(a);
        sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y, m++;
    }
    if (m < 3) return *seen;
    const double vx = sxx - sx * sx / m;
    if (!(vx > 0)) return *seen;
    const double b = (sxy - sx * sy / m) / vx, a0 = (sy - b * sx) / m;
    const double rss = fmax(0, syy - sy * sy / m - b * (sxy - sx * sy / m));
    const double se = sqrt(rss / (m - 2) / vx), blo = b - 2 * se;
    if (!(blo > 0)) return *seen;
    const double last = (double)d->step[d->steps - 1], y_last = a0 + b * last;
    const double y_end = y_last + blo * ((double)T - last);
    return fmax(*seen, exp2(fmin(y_end, 1000)));
}

/* Share of record j's non-zero values below 2^-24 at scale 2^k, over the probe's last quarter. */
static double lost_share(const mp_doctor *d, int j, int k) {
    const int from = d->steps - (d->steps + 3) / 4;
    double sum = 0;
    int m = 0;
    for (int s = from; s < d->steps; s++) {
        const mp_tensor_stats *st = &at(d, s, j)->stats;
        const int64_t nz = st->numel - st->zero - st->nan - st->inf;
        if (nz <= 0) continue;
        sum += (double)mp_tensor_stats_below(st, k, -24) / (double)nz, m++;
    }
    return m ? sum / m : 0;
}

static double amax_seen(const mp_doctor *d, int j) {
    double a = 0;
    for (int s = 0; s < d->steps; s++) a = fmax(a, at(d, s, j)->stats.amax);
    return a;
}

/* What one policy does: forward risks, fp16 gradients, the window, the
 * worst share at scale 2^k_eval (NO_SCALE: at the scaler's settle). */
typedef struct {
    int risks, lo, hi, raw_hi;
    double under1;               /* worst share at scale 1 */
} policy_eval;

/* Whether the policy applied to g runs with loss scaling under o. */
static bool scales(const mp_graph *g, const mp_doctor_opts *o) {
    mp_policy_info pi = {0};
    if (mp_graph_policy(g, &pi) != MP_OK) return false;
    return o->loss_scaling == MP_LOSS_SCALING_ON || (o->loss_scaling == MP_LOSS_SCALING_AUTO && pi.loss_scaling);
}

/* Whether record r is a gradient the run keeps in fp16 under the policy
 * applied to g: a node's output gradient when it stores fp16, its
 * parameters' gradients when it computes in fp16, except on a GPU that
 * scales or clips them (it writes them in fp32, o->gpu). */
static bool grad_fp16(const mp_graph *g, const mp_doctor_opts *o, const mp_numerics_record *r) {
    if (r->kind != MP_NUMERICS_GRAD && r->kind != MP_NUMERICS_PARAM_GRAD) return false;
    if (r->kind == MP_NUMERICS_PARAM_GRAD && o->gpu && (o->clips || scales(g, o))) return false;
    mp_node_precision np;
    if (mp_graph_node_precision(g, r->node, &np) != MP_OK) return false;
    return (r->kind == MP_NUMERICS_GRAD ? np.storage : np.compute) == MP_DTYPE_F16;
}

static mp_status evaluate(const mp_doctor *d, mp_graph *g, mp_precision p, const char *overrides, const mp_doctor_opts *o,
                          mp_doctor_layer *L, int nn, const double *out_pred, policy_eval *e) {
    MP_TRY(mp_graph_apply_policy(g, (mp_policy_opts){.precision = p, .overrides = overrides}));
    const double thr = o->underflow_max, margin = o->margin;
    *e = (policy_eval){.lo = -24};
    double G = 0;
    for (int i = 0; i < nn; i++) {
        mp_node_precision np;
        MP_TRY(mp_graph_node_precision(g, i, &np));
        const bool out16 = np.storage == MP_DTYPE_F16, in16 = np.compute == MP_DTYPE_F16;
        double in_pred = 0;
        for (int k = 0; k < g->nodes[i].n_in; k++) in_pred = fmax(in_pred, out_pred[g->nodes[i].in[k]]);
        L[i].in_pred = in_pred;
        L[i].fwd_risk = (out16 && out_pred[i] * margin >= FP16_MAX) || (in16 && in_pred * margin >= FP16_MAX);
        L[i].grad_fp16 = false;
        e->risks += L[i].fwd_risk;
    }
    /* fp16 gradient tensors (grad_fp16) */
    for (int j = 0; j < d->n; j++) {
        const mp_numerics_record *r = at(d, 0, j);
        if (!grad_fp16(g, o, r)) continue;
        L[r->node].grad_fp16 = true;
        G = fmax(G, amax_seen(d, j));
        int lo = -24;
        while (lo < 60 && lost_share(d, j, lo) > thr) lo++;
        if (lo >= 60) lo = NO_SCALE;
        e->lo = lo > e->lo ? lo : e->lo;
        e->under1 = fmax(e->under1, lost_share(d, j, 0));
    }
    e->raw_hi = G > 0 ? (int)floor(log2(FP16_MAX / G)) : 60;
    if (e->raw_hi > 60) e->raw_hi = 60;
    e->hi = G > 0 ? (int)floor(log2(FP16_MAX / (G * margin))) : 60;
    if (e->hi > 60) e->hi = 60;
    return MP_OK;
}

/* Worst fp16 gradient share at 2^k under the policy evaluate() applied last. */
static double worst_at(const mp_doctor *d, const mp_doctor_layer *L, mp_graph *g, const mp_doctor_opts *o, int k,
                       mp_doctor_layer *Lout) {
    double w = 0;
    for (int j = 0; j < d->n; j++) {
        const mp_numerics_record *r = at(d, 0, j);
        if (!L[r->node].grad_fp16 || !grad_fp16(g, o, r)) continue;
        const double s = lost_share(d, j, k);
        if (Lout) Lout[r->node].under_settle = fmax(Lout[r->node].under_settle, s);
        w = fmax(w, s);
    }
    return w;
}

static int ilog2f(float x) { return (int)floor(log2(x)); }

/* Marks the layers the user's overrides name. */
static void mark_user(const mp_graph *g, const char *ov, mp_doctor_layer *L) {
    for (const char *p = ov; p && *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq && eq < p + len ? (size_t)(eq - p) : len), p);
        const mp_node n = mp_graph_find(g, name);
        if (n >= 0) L[n].user = true;
        p = end ? end + 1 : NULL;
    }
}

/* A dynamic scale starting above the largest that fits (2^raw_hi) backs off
 * by backoff_factor per overflow, after `hysteresis` overflows each: those
 * steps are skipped. That is normal dynamic scaling, harmless unless the
 * skips exceed the run's divergence bound: more than max_skip_share of the
 * steps once skip_check_after ran (the trainer stops the run then), or of a
 * run shorter than that. */
static void startup_backoff(const mp_doctor_opts *o, mp_doctor_report *R, float init, int raw_hi) {
    R->max_skip_share = o->max_skip_share > 0 ? o->max_skip_share : 0.05;
    const int64_t after = o->skip_check_after > 0 ? o->skip_check_after : 100;
    R->skip_window = (int)(R->planned_steps < after ? R->planned_steps : after);
    R->startup_skips = 0;
    R->startup_harmless = true;
    R->start_log2 = ilog2f(init);
    if (!R->scaling || R->static_scale || ilog2f(init) <= raw_hi) return;
    const double per = -log2(o->scaler.backoff_factor > 0 && o->scaler.backoff_factor < 1 ? o->scaler.backoff_factor
                                                                                             : 0.5);
    const int hyst = o->scaler.hysteresis > 1 ? o->scaler.hysteresis : 1;
    R->startup_skips = (int)ceil((ilog2f(init) - raw_hi) / per) * hyst;
    R->startup_harmless = R->startup_skips <= R->max_skip_share * R->skip_window;
}

static void verdict(mp_doctor_report *R, bool grads_ok, int risks_left, int lo, int hi, const char *user) {
    const char *tn = mp_precision_name(R->target);
    char backoff[200] = "";
    if (R->startup_skips)
        snprintf(backoff, sizeof backoff, "start-up back-off from 2^%d to 2^%d: %d skipped step%s expected in the "
                 "first %d", R->start_log2, R->settle_log2, R->startup_skips,
                 R->startup_skips == 1 ? "" : "s", R->skip_window);
    if (R->target_ok) {
        snprintf(R->verdict, sizeof R->verdict, "verdict: %s works unchanged (no layer near fp16's range; the loss scale "
                 "settles at 2^%d, window [2^%d, 2^%d]%s%s%s%s)", tn, R->settle_log2, lo, hi, backoff[0] ? "; " : "",
                 backoff, backoff[0] ? ", harmless" : "", user && *user ? "; with your overrides" : "");
        return;
    }
    if (R->precision != R->target) {
        snprintf(R->verdict, sizeof R->verdict, "verdict: %s fails: the gradients need a loss scale >= 2^%d and "
                 "overflow above 2^%d; use %s (the policy says so)", tn, lo, hi, mp_precision_name(R->precision));
        return;
    }
    char why[400] = "";
    size_t n = 0;
    if (R->fwd_risks)
        n += (size_t)snprintf(why + n, sizeof why - n, "%d layer%s overflow%s fp16 in the forward pass", R->fwd_risks,
                              R->fwd_risks == 1 ? "" : "s", R->fwd_risks == 1 ? "s" : "");
    if (!grads_ok && n < sizeof why)
        n += (size_t)snprintf(why + n, sizeof why - n, "%sgradients lost at the run's loss scale", n ? "; " : "");
    if (!R->startup_harmless && n < sizeof why)
        snprintf(why + n, sizeof why - n, "%s%s (%.0f%%), beyond train's divergence bound of %g%% skipped", n ? "; " : "",
                 backoff, 100.0 * R->startup_skips / R->skip_window, 100 * R->max_skip_share);
    char left[120] = "";
    if (risks_left)
        snprintf(left, sizeof left, "; %d layer%s you set still overflow%s", risks_left, risks_left == 1 ? "" : "s",
                 risks_left == 1 ? "s" : "");
    snprintf(R->verdict, sizeof R->verdict, "verdict: %s fails unchanged (%s); with the policy (%.300s%s%s) it %s%s", tn,
             why, R->overrides[0] ? R->overrides : "no overrides", R->set_scale ? ", loss scale " : "",
             R->set_scale ? (R->policy_static ? "static" : "dynamic") : "", risks_left ? "does not work either" : "works",
             left);
}

mp_status mp_doctor_analyze(mp_doctor *d, mp_graph *g, const mp_doctor_opts *oin, mp_doctor_report *R) {
    memset(R, 0, sizeof *R);
    if (d->steps < 1) return mp_error(MP_ERR_INVALID_ARG, "doctor: no probe steps were measured");
    mp_doctor_opts o = *oin;
    if (!(o.margin > 0)) o.margin = 2;
    if (!(o.underflow_max > 0)) o.underflow_max = 1e-3;
    const int nn = mp_graph_node_count(g);
    R->layers = calloc((size_t)nn, sizeof *R->layers);
    double *out_pred = calloc((size_t)nn, sizeof *out_pred);
    mp_doctor_layer *tmp = calloc((size_t)nn, sizeof *tmp);
    if (!R->layers || !out_pred || !tmp) {
        free(out_pred), free(tmp);
        return mp_error(MP_ERR_NOMEM, "doctor: out of memory");
    }
    R->n = nn;
    R->probe_steps = d->steps;
    R->planned_steps = o.planned_steps > d->step[d->steps - 1] ? o.planned_steps : d->step[d->steps - 1];
    R->target = o.target;
    mp_doctor_layer *L = R->layers;
    for (int i = 0; i < nn; i++) {
        L[i].node = i;
        snprintf(L[i].name, sizeof L[i].name, "%s", mp_graph_node_name(g, i));
        snprintf(L[i].op, sizeof L[i].op, "%s", mp_graph_node_op(g, i));
        L[i].lo_log2 = INT_MIN; /* no gradient seen yet */
    }
    for (int j = 0; j < d->n; j++) {
        const mp_numerics_record *r = at(d, 0, j);
        if (r->kind == MP_NUMERICS_OUTPUT) out_pred[r->node] = predict(d, j, R->planned_steps, &L[r->node].out_seen);
        if (r->kind == MP_NUMERICS_GRAD || r->kind == MP_NUMERICS_PARAM_GRAD) {
            L[r->node].grad_amax = fmax(L[r->node].grad_amax, amax_seen(d, j));
            /* the layer needs the scale its most demanding gradient needs */
            int lo = -24;
            while (lo < 60 && lost_share(d, j, lo) > o.underflow_max) lo++;
            if (lo >= 60) lo = NO_SCALE;
            if (lo > L[r->node].lo_log2) L[r->node].lo_log2 = lo;
        }
    }
    for (int i = 0; i < nn; i++)
        if (L[i].lo_log2 == INT_MIN) L[i].lo_log2 = NO_SCALE;
    for (int i = 0; i < nn; i++) L[i].out_pred = out_pred[i];
    mp_status s = MP_OK;
    policy_eval e_amp, e_pure, e_bf, e;
    /* the other policies, range-wise */
    if (s == MP_OK) s = evaluate(d, g, MP_PRECISION_AMP_FP16, NULL, &o, tmp, nn, out_pred, &e_amp);
    R->amp_ok = s == MP_OK && e_amp.risks == 0 && e_amp.lo <= e_amp.hi;
    if (s == MP_OK) s = evaluate(d, g, MP_PRECISION_FP16, NULL, &o, tmp, nn, out_pred, &e_pure);
    R->fp16_under1 = e_pure.under1;
    R->fp16_ok = s == MP_OK && e_pure.risks == 0 && e_pure.under1 <= o.underflow_max;
    if (s == MP_OK) s = evaluate(d, g, MP_PRECISION_BF16, NULL, &o, tmp, nn, out_pred, &e_bf);
    R->bf16_ok = true; /* bf16 has fp32's range: only values beyond 3.4e38 or below 2^-133 fail */
    for (int i = 0; i < nn; i++) R->bf16_ok = R->bf16_ok && out_pred[i] * o.margin < 3.38e38;
    /* the target as the run would train it, with the user's overrides */
    mp_policy_info pi = {0};
    if (s == MP_OK) s = evaluate(d, g, o.target, o.overrides, &o, L, nn, out_pred, &e);
    if (s == MP_OK) s = mp_graph_policy(g, &pi);
    mark_user(g, o.overrides, L);
    R->scaling = o.loss_scaling == MP_LOSS_SCALING_ON || (o.loss_scaling == MP_LOSS_SCALING_AUTO && pi.loss_scaling);
    R->static_scale = o.scaler.static_scale;
    float init = o.scaler.init_scale > 0 ? o.scaler.init_scale : 65536.0f;
    if (!R->static_scale && o.scaler.max_scale > 0 && init > o.scaler.max_scale) init = o.scaler.max_scale;
    const float growth = o.scaler.growth_factor > 1 ? o.scaler.growth_factor : 2.0f;
    const int interval = o.scaler.growth_interval > 0 ? o.scaler.growth_interval : 2000;
    int settle = 0;
    if (R->scaling && R->static_scale) settle = ilog2f(init);
    else if (R->scaling) {
        const int grown = ilog2f(init) + (int)floor((double)R->planned_steps / interval * log2(growth));
        settle = grown < e.raw_hi ? grown : e.raw_hi;
        if (o.scaler.max_scale > 0 && ilog2f(o.scaler.max_scale) < settle) settle = ilog2f(o.scaler.max_scale);
        if (o.scaler.min_scale > 0 && ilog2f(o.scaler.min_scale) > settle) settle = ilog2f(o.scaler.min_scale);
    }
    R->lo_log2 = e.lo, R->hi_log2 = e.hi, R->settle_log2 = settle, R->fwd_risks = e.risks;
    if (s == MP_OK) R->under_settle = worst_at(d, L, g, &o, settle, L);
    const bool grads_ok = R->under_settle <= o.underflow_max && settle <= e.raw_hi;
    R->target_ok = s == MP_OK && e.risks == 0 && grads_ok;
    /* the policy: the user's overrides, then fp32 for every layer at forward
     * risk (again, until none is left) */
    R->precision = o.target;
    snprintf(R->overrides, sizeof R->overrides, "%s", o.overrides ? o.overrides : "");
    /* one layer at a time, the first in forward order: the layers after it
     * may follow its dtype and be fixed by it; a layer the user set is left
     * as the user set it */
    memcpy(tmp, L, (size_t)nn * sizeof *tmp);
    for (int round = 0; s == MP_OK && round < nn && e.risks; round++) {
        int i = 0;
        while (i < nn && !(tmp[i].fwd_risk && !L[i].fix && !L[i].user)) i++;
        if (i == nn) break;
        L[i].fix = "fp32";
        L[i].fwd_risk = true;
        const size_t len = strlen(R->overrides);
        snprintf(R->overrides + len, sizeof R->overrides - len, "%s%s=fp32", len ? "," : "", L[i].name);
        s = evaluate(d, g, o.target, R->overrides, &o, tmp, nn, out_pred, &e);
    }
    const int risks_left = e.risks;
    const bool window = e.lo <= e.hi;
    startup_backoff(&o, R, init, e.raw_hi);
    if (!R->startup_harmless) R->target_ok = false;
    if (s == MP_OK && (!grads_ok || !R->startup_harmless) && window) {
        R->set_scale = true;
        R->policy_static = R->static_scale || !R->scaling;
        const int pick = R->policy_static ? (e.lo + e.hi + 1) / 2 : e.hi;
        R->init_scale = exp2f((float)pick);
        R->min_scale = exp2f((float)e.lo);
    }
    if (s == MP_OK && !grads_ok && !window && !R->scaling && e.lo <= e.raw_hi) { /* scaling off: turn it on */
        R->set_scale = true;
        R->init_scale = exp2f((float)e.lo), R->min_scale = exp2f((float)e.lo);
    }
    if (s == MP_OK && !grads_ok && !window && R->init_scale == 0) { /* no fp16 scale fits: bf16 */
        R->precision = o.target == MP_PRECISION_FP16 ? MP_PRECISION_BF16 : MP_PRECISION_AMP_BF16;
        snprintf(R->overrides, sizeof R->overrides, "%s", o.overrides ? o.overrides : "");
    }
    if (s == MP_OK) verdict(R, grads_ok, risks_left, e.lo, e.hi, o.overrides);
    /* leave g as the probe found it */
    mp_status s2 = mp_graph_apply_policy(g, (mp_policy_opts){.precision = MP_PRECISION_FP32});
    free(out_pred);
    free(tmp);
    return s != MP_OK ? s : s2;
}

void mp_doctor_report_free(mp_doctor_report *r) {
    free(r->layers);
    r->layers = NULL;
}

void mp_doctor_print(const mp_doctor_report *R, FILE *out) {
    fprintf(out, "precision doctor: %lld probe steps in fp32, ranges extrapolated to step %lld; target %s\n",
            (long long)R->probe_steps, (long long)R->planned_steps, mp_precision_name(R->target));
    fprintf(out, "%-16s %-10s %11s %11s %11s %11s %9s %8s  %s\n", "layer", "op", "out amax", "predicted", "in pred",
            "grad amax", "lost@run", "min scale", "fp16 forward");
    for (int i = 0; i < R->n; i++) {
        const mp_doctor_layer *l = &R->layers[i];
        if (l->out_seen == 0 && l->grad_amax == 0) continue;
        char lo[16];
        if (l->lo_log2 == NO_SCALE) snprintf(lo, sizeof lo, "none");
        else snprintf(lo, sizeof lo, "2^%d", l->lo_log2);
        fprintf(out, "%-16s %-10s %11.4g %11.4g %11.4g %11.4g %8.3f%% %8s  %s%s\n", l->name, l->op, l->out_seen,
                l->out_pred, l->in_pred, l->grad_amax, 100 * l->under_settle, l->grad_fp16 ? lo : "-",
                l->fwd_risk ? "OVERFLOW RISK" : "ok", l->fix ? " -> fp32" : "");
    }
    if (R->lo_log2 <= R->hi_log2)
        fprintf(out, "loss-scale window for fp16 gradients: [2^%d, 2^%d]; the run's scaler (%s) runs at 2^%d, losing "
                     "%.3f%% of the worst gradient's values\n", R->lo_log2, R->hi_log2,
                R->scaling ? (R->static_scale ? "static" : "dynamic") : "off", R->settle_log2, 100 * R->under_settle);
    else
        fprintf(out, "loss-scale window for fp16 gradients: none (underflow needs >= 2^%d, overflow above 2^%d)\n",
                R->lo_log2, R->hi_log2);
    if (R->startup_skips)
        fprintf(out, "start-up: the dynamic loss scale backs off from 2^%d: %d skipped step%s expected in the first "
                     "%d (%s train's divergence bound of %g%% skipped)\n", R->start_log2, R->startup_skips,
                R->startup_skips == 1 ? "" : "s", R->skip_window, R->startup_harmless ? "harmless, within" : "beyond",
                100 * R->max_skip_share);
    fprintf(out, "pure fp16: %s (worst gradient share lost at scale 1: %.3f%%; lost weight updates without fp32 "
                 "masters are not measured)\n", R->fp16_ok ? "range ok" : "FAILS", 100 * R->fp16_under1);
    fprintf(out, "amp-fp16 (dynamic scaling, no overrides): %s\n", R->amp_ok ? "range ok" : "FAILS");
    fprintf(out, "bf16 / amp-bf16: %s\n", R->bf16_ok ? "range ok" : "FAILS");
    fprintf(out, "%s\n", R->verdict);
}
