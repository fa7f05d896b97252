/* optim.c — optimizer objects: option validation and defaults, up-front
 * allocation of all state (one 64-byte-aligned block of f32), the step that
 * runs the per-tensor kernels of sgd.c / adam.c (passing each parameter's
 * momentum dtype to SGD), and state access for checkpoints. */
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"

#define MP_OPTIM_ALIGN 16 /* floats: 64 bytes */

typedef struct {
    mp_param_ref ref; /* ref.name points into the optimizer's own copy */
    float *buf[2];    /* SGD: momentum; Adam: m, v; NULL when unused */
} optim_param;

struct mp_optim {
    mp_optim_opts opts;
    int n_params;
    optim_param *params; // (n_params)
    float *state;        /* every buffer of every parameter */
    char *names;
    int64_t steps;
};

static const char *kind_names[] = {"sgd", "adam", "adamw"};

const char *mp_optim_kind_name(mp_optim_kind k) {
    return (unsigned)k < sizeof kind_names / sizeof kind_names[0] ? kind_names[k] : "unknown";
}

mp_status mp_optim_kind_parse(const char *name, mp_optim_kind *out) {
    if (!out) return mp_error(MP_ERR_INVALID_ARG, "optimizer: kind parse without an output pointer");
    for (int k = 0; k < (int)(sizeof kind_names / sizeof kind_names[0]); k++) {
        if (name && strcmp(name, kind_names[k]) == 0) {
            *out = (mp_optim_kind)k;
            return MP_OK;
        }
    }
    return mp_error(MP_ERR_INVALID_ARG, "optimizer: --optimizer '%s' is not one of sgd, adam, adamw",
                    name ? name : "(null)");
}

static bool in_unit(float x) { return x >= 0.0f && x < 1.0f; } /* false for NaN */

static mp_status validate(mp_optim_opts *o) {
    if ((unsigned)o->kind > MP_OPTIM_ADAMW)
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: unknown kind %d", (int)o->kind);
    const char *kn = mp_optim_kind_name(o->kind);
    if (!(o->weight_decay >= 0.0f && isfinite(o->weight_decay)))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --weight-decay %g must be a finite number >= 0",
                        o->weight_decay);
    if (o->kind == MP_OPTIM_SGD) {
        if (o->beta1 != 0.0f || o->beta2 != 0.0f || o->eps != 0.0f || o->betas_as_given)
            return mp_error(MP_ERR_INVALID_ARG,
                            "optimizer: --beta1/--beta2/--eps apply to adam and adamw, not sgd "
                            "(got %g/%g/%g%s)", o->beta1, o->beta2, o->eps,
                            o->betas_as_given ? ", betas as given" : "");
        if (!in_unit(o->momentum))
            return mp_error(MP_ERR_INVALID_ARG, "optimizer: --momentum %g must be in [0, 1)", o->momentum);
        if (o->nesterov && o->momentum == 0.0f)
            return mp_error(MP_ERR_INVALID_ARG, "optimizer: --nesterov needs --momentum > 0");
        return MP_OK;
    }
    if (o->momentum != 0.0f)
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --momentum %g applies to sgd only (%s uses --beta1)",
                        o->momentum, kn);
    if (o->nesterov)
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --nesterov applies to sgd only, not %s", kn);
    if (o->beta1 == 0.0f && !o->betas_as_given) o->beta1 = 0.9f;
    if (o->beta2 == 0.0f && !o->betas_as_given) o->beta2 = 0.999f;
    if (o->eps == 0.0f) o->eps = 1e-8f;
    if (!in_unit(o->beta1))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --beta1 %g must be in [0, 1)", o->beta1);
    if (!in_unit(o->beta2))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --beta2 %g must be in [0, 1)", o->beta2);
    if (!(o->eps > 0.0f && isfinite(o->eps)))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: --eps %g must be a finite number > 0", o->eps);
    return MP_OK;
}

static int n_state_bufs(const mp_optim_opts *o) {
    if (o->kind == MP_OPTIM_SGD) return o->momentum > 0.0f ? 1 : 0;
    return 2;
}

static int64_t round_up(int64_t n) { return (n + MP_OPTIM_ALIGN - 1) / MP_OPTIM_ALIGN * MP_OPTIM_ALIGN; }

mp_status mp_optim_create(mp_optim_opts o, const mp_param_ref *params, int n_params, mp_optim **out) {
    MP_ASSERT(out != NULL);
    *out = NULL;
    MP_TRY(validate(&o));
    if (n_params < 0 || (n_params > 0 && !params))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer: bad parameter list (%d parameters)", n_params);
    int nbufs = n_state_bufs(&o);
    int64_t state_floats = 0;
    size_t name_bytes = 0;
    for (int i = 0; i < n_params; i++) {
        const mp_param_ref *r = &params[i];
        const char *nm = r->name ? r->name : "(unnamed)";
        if (r->n < 0 || (r->n > 0 && (!r->param || !r->grad)))
            return mp_error(MP_ERR_INVALID_ARG, "optimizer: parameter %d '%s' has n = %lld, param %p, grad %p",
                            i, nm, (long long)r->n, (void *)r->param, (const void *)r->grad);
        if (r->state_dtype != MP_DTYPE_F32 && r->state_dtype != MP_DTYPE_F16 && r->state_dtype != MP_DTYPE_BF16)
            return mp_error(MP_ERR_INVALID_ARG, "optimizer: parameter %d '%s' has state dtype %s (f32, f16 or bf16 "
                            "expected)", i, nm, mp_dtype_name(r->state_dtype));
        if (r->n > ((int64_t)1 << 40))
            return mp_error(MP_ERR_NOMEM, "optimizer: parameter %d '%s' is too large (%lld elements)", i, nm,
                            (long long)r->n);
        state_floats += nbufs * round_up(r->n);
        if (r->name) name_bytes += strlen(r->name) + 1;
    }
    if ((uint64_t)state_floats > SIZE_MAX / sizeof(float))
        return mp_error(MP_ERR_NOMEM, "optimizer: %lld floats of state do not fit in memory",
                        (long long)state_floats);

    MP_TRY(mp_host_mem_check((size_t)state_floats * sizeof(float), NULL, "the %s state of %d parameters (%lld floats)",
                             mp_optim_kind_name(o.kind), n_params, (long long)state_floats));
    mp_optim *opt = calloc(1, sizeof *opt);
    if (!opt) return mp_error(MP_ERR_NOMEM, "optimizer: out of memory");
    opt->opts = o;
    opt->n_params = n_params;
    opt->params = calloc(n_params > 0 ? (size_t)n_params : 1, sizeof *opt->params);
    opt->names = malloc(name_bytes > 0 ? name_bytes : 1);
    size_t state_bytes = (size_t)state_floats * sizeof(float);
    if (state_bytes > 0) opt->state = aligned_alloc(64, state_bytes); /* a multiple of 64 */
    if (!opt->params || !opt->names || (state_bytes > 0 && !opt->state)) {
        mp_optim_destroy(opt);
        return mp_error(MP_ERR_NOMEM, "optimizer: out of memory for %zu bytes of %s state", state_bytes,
                        mp_optim_kind_name(o.kind));
    }
    if (state_bytes > 0) memset(opt->state, 0, state_bytes);

    float *next = opt->state;
    char *name_next = opt->names;
    for (int i = 0; i < n_params; i++) {
        optim_param *p = &opt->params[i];
        p->ref = params[i];
        if (params[i].name) {
            size_t len = strlen(params[i].name) + 1;
            memcpy(name_next, params[i].name, len);
            p->ref.name = name_next;
            name_next += len;
        }
        for (int b = 0; b < nbufs; b++) {
            p->buf[b] = next;
            next += round_up(params[i].n);
        }
    }
    *out = opt;
    return MP_OK;
}

void mp_optim_destroy(mp_optim *o) {
    if (!o) return;
    free(o->state);
    free(o->names);
    free(o->params);
    free(o);
}

void mp_optim_step(mp_optim *o, float lr) {
    MP_ASSERT(o != NULL && isfinite(lr) && lr >= 0.0f);
    const mp_optim_opts *op = &o->opts;
    int64_t t = o->steps + 1;
    for (int i = 0; i < o->n_params; i++) {
        optim_param *p = &o->params[i];
        if (p->ref.n == 0) continue;
        if (op->kind == MP_OPTIM_SGD) {
            mp_sgd_hyper h = {
                .lr = lr,
                .momentum = op->momentum,
                .weight_decay = p->ref.decay ? op->weight_decay : 0.0f,
                .nesterov = op->nesterov,
                .state_dtype = p->ref.state_dtype,
            };
            mp_sgd_update(p->ref.param, p->ref.grad, p->buf[0], p->ref.n, &h);
        } else {
            mp_adam_hyper h = mp_adam_hyper_at(op, lr, t, p->ref.decay);
            mp_adam_update(p->ref.param, p->ref.grad, p->buf[0], p->buf[1], p->ref.n, &h);
        }
    }
    o->steps = t;
}

int64_t mp_optim_step_count(const mp_optim *o) { return o->steps; }

mp_status mp_optim_set_step_count(mp_optim *o, int64_t steps) {
    if (steps < 0 || steps >= ((int64_t)1 << 53))
        return mp_error(MP_ERR_INVALID_ARG, "optimizer step count %lld must lie in [0, 2^53)", (long long)steps);
    o->steps = steps;
    return MP_OK;
}

mp_optim_opts mp_optim_options(const mp_optim *o) { return o->opts; }

int mp_optim_param_count(const mp_optim *o) { return o->n_params; }

const mp_param_ref *mp_optim_param(const mp_optim *o, int i) {
    MP_ASSERT(i >= 0 && i < o->n_params);
    return &o->params[i].ref;
}

void mp_optim_set_state_dtype(mp_optim *o, int i, mp_dtype dt) {
    MP_ASSERT(i >= 0 && i < o->n_params);
    MP_ASSERT(dt == MP_DTYPE_F32 || dt == MP_DTYPE_F16 || dt == MP_DTYPE_BF16);
    o->params[i].ref.state_dtype = dt;
}

int mp_optim_state_tensors(const mp_optim *o, int param_index, float **bufs) {
    MP_ASSERT(param_index >= 0 && param_index < o->n_params);
    int nb = n_state_bufs(&o->opts);
    if (bufs)
        for (int b = 0; b < nb; b++) bufs[b] = o->params[param_index].buf[b];
    return nb;
}
