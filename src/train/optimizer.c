/* optimizer.c — the public optimizer (mixprec/optim.h): which of a graph's
 * trainable parameters it updates, its learning-rate schedule, and a host
 * mp_optim over the graph's host copies holding its state. A trainer steps
 * it there (CPU) or mirrors it on its device (GPU). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "train/trainer.h"

static bool selected(const mp_optimizer *o, const mp_gparam *p) {
    return p->spec.trainable && !strncmp(p->name, o->prefix, strlen(o->prefix));
}

/* Weight decay applies to convolution and linear weights, not to biases or
 * BatchNorm's parameters (as the CLI always did). */
static bool takes_decay(const mp_graph *g, const mp_gparam *p) {
    return !strcmp(p->spec.name, "weight") && g->nodes[p->node].desc.kind != MP_OP_BATCHNORM2D;
}

mp_status mp_optimizer_create(mp_graph *g, const mp_optimizer_opts *o, mp_optimizer **out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "optimizer: no output pointer");
    *out = NULL;
    if (!g || !o) return mp_error(MP_ERR_INVALID_ARG, "optimizer: null graph or options");
    MP_TRY(mp_graph_check_built(g, "optimizer"));
    mp_lr_schedule lr = o->lr;
    MP_TRY(mp_lr_schedule_check(&lr));
    const char *prefix = o->params ? o->params : "";
    if (strlen(prefix) >= sizeof ((mp_optimizer *)0)->prefix)
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: parameter prefix '%.40s...' is too long", prefix);
    mp_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return mp_error(MP_ERR_NOMEM, "optimizer: out of memory");
    opt->g = g;
    g->live_optimizers++; /* until mp_optimizer_destroy frees it */
    opt->o = *o;
    snprintf(opt->prefix, sizeof opt->prefix, "%s", prefix);
    opt->o.params = opt->prefix;
    opt->param_index = calloc((size_t)g->n_params + 1, sizeof *opt->param_index);
    mp_param_ref *refs = calloc((size_t)g->n_params + 1, sizeof *refs);
    mp_status s = opt->param_index && refs ? MP_OK : mp_error(MP_ERR_NOMEM, "optimizer: out of memory");
    for (int k = 0; s == MP_OK && k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        if (!selected(opt, p)) continue;
        /* a weight without an fp32 master keeps its SGD momentum in its dtype */
        refs[opt->n] = (mp_param_ref){.param = p->data, .grad = p->grad, .n = mp_shape_numel(&p->spec.shape),
                                      .decay = takes_decay(g, p), .name = p->name, .state_dtype = p->low_only};
        opt->param_index[opt->n++] = k;
    }
    if (s == MP_OK && opt->n == 0)
        s = mp_error(MP_ERR_INVALID_ARG, "optimizer: no trainable parameter of the graph starts with '%s'", prefix);
    if (s == MP_OK) s = mp_optim_create(o->optim, refs, opt->n, &opt->host);
    free(refs);
    if (s != MP_OK) {
        mp_optimizer_destroy(opt);
        return s;
    }
    opt->o.optim = mp_optim_options(opt->host);
    *out = opt;
    return MP_OK;
}

void mp_optimizer_destroy(mp_optimizer *o) {
    if (!o) return;
    if (o->bound) { /* still stepped by a trainer: freed when that trainer is destroyed */
        o->orphaned = true;
        return;
    }
    mp_optim_destroy(o->host);
    free(o->param_index);
    mp_graph *g = o->g;
    free(o);
    g->live_optimizers--;
    mp_graph_user_gone(g);
}

int64_t mp_optimizer_steps(const mp_optimizer *o) {
    if (!o) return 0;
    mp_trainer *t = o->bound; /* a GPU trainer holds the count on the device */
    for (int g = 0; t && t->plan && g < t->n_groups; g++) { /* no plan: a failed rebuild brought the state home */
        int64_t n = 0;
        if (t->groups[g].opt == o && t->be->optim_steps(t, g, &n) == MP_OK) return n;
    }
    return mp_optim_step_count(o->host);
}
int mp_optimizer_param_count(const mp_optimizer *o) { return o ? o->n : 0; }
mp_optimizer_opts mp_optimizer_options(const mp_optimizer *o) { return o ? o->o : (mp_optimizer_opts){0}; }

/* snprintf at buf + *at, *at kept within len (a cut-short line stays cut) */
static void append(char *buf, size_t len, int *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t len, int *at, const char *fmt, ...) {
    if ((size_t)*at >= len) return;
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(buf + *at, len - (size_t)*at, fmt, ap);
    va_end(ap);
    *at = k < 0 || (size_t)(*at + k) >= len ? (int)len : *at + k;
}

void mp_optimizer_describe(const mp_optimizer *o, char *buf, size_t len) {
    const mp_optim_opts *p = &o->o.optim; /* with mp_optim_create's defaults filled in (see mp_optimizer_create) */
    const mp_lr_schedule *s = &o->o.lr;
    int at = 0;
    if (len) buf[0] = '\0';
    append(buf, len, &at, "%s lr %.9g", mp_optim_kind_name(p->kind), (double)s->base_lr);
    if (p->kind == MP_OPTIM_SGD)
        append(buf, len, &at, " momentum %.9g%s", (double)p->momentum, p->nesterov ? " nesterov" : "");
    else
        append(buf, len, &at, " betas %.9g,%.9g eps %.9g", (double)p->beta1, (double)p->beta2, (double)p->eps);
    append(buf, len, &at, " weight_decay %.9g, %s", (double)p->weight_decay, mp_lr_kind_name(s->kind));
    if (s->kind == MP_LR_STEP) append(buf, len, &at, " x%.9g every %d steps", (double)s->gamma, s->step_size);
    if (s->kind == MP_LR_COSINE)
        append(buf, len, &at, " to %.9g over %d steps", (double)s->min_lr, s->total_steps);
    append(buf, len, &at, ", warm-up %d", s->warmup_steps);
}

void mp_optimizer_refresh_dtypes(mp_optimizer *o) {
    for (int i = 0; i < o->n; i++) mp_optim_set_state_dtype(o->host, i, o->g->params[o->param_index[i]].low_only);
}
