/* gan_step.c — see gan_step.h. */
#include "train/gan_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "core/error.h"
#include "graph/exec_stage.h"
#include "graph/graph.h"

enum { REAL_SRC, REAL_CLS, FAKE_SRC, FAKE_CLS, GEN_SRC, N_LOSSES };
static const char *const loss_names[N_LOSSES] = {"real_src_loss", "real_cls_loss", "fake_src_loss", "fake_cls_loss",
                                                 "gen_src_loss"};

/* The trainable parameters of one network, an optimizer over them. */
static mp_status group_init(mp_gan_group *gr, mp_acgan *m, bool generator, const mp_optim_opts *oo) {
    mp_graph *g = m->g;
    mp_param_ref *refs = calloc((size_t)g->n_params + 1, sizeof *refs);
    gr->grads = calloc((size_t)g->n_params + 1, sizeof *gr->grads);
    gr->sizes = calloc((size_t)g->n_params + 1, sizeof *gr->sizes);
    if (!refs || !gr->grads || !gr->sizes) {
        free(refs);
        return mp_error(MP_ERR_NOMEM, "gan: out of memory");
    }
    for (int k = 0; k < g->n_params; k++) {
        mp_gparam *p = &g->params[k];
        if (!p->spec.trainable || mp_acgan_is_generator_param(m, k) != generator) continue;
        int64_t n = mp_shape_numel(&p->spec.shape);
        refs[gr->n] = (mp_param_ref){.param = p->data, .grad = p->grad, .n = n, .name = p->name,
                                     .state_dtype = mp_graph_param_low_only(g, k)}; /* as train_step.c (Adam: f32) */
        gr->grads[gr->n] = p->grad;
        gr->sizes[gr->n++] = n;
    }
    mp_status s = mp_optim_create(*oo, refs, gr->n, &gr->opt);
    free(refs);
    return s;
}

static void group_free(mp_gan_group *gr) {
    mp_optim_destroy(gr->opt);
    free(gr->grads);
    free(gr->sizes);
    memset(gr, 0, sizeof *gr);
}

mp_status mp_gan_ctx_init(mp_gan_ctx *c, mp_acgan *m, const mp_gan_opts *o) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->o = *o;
    if (!(c->o.lr > 0)) c->o.lr = 2e-4f;
    if (!(c->o.beta1 > 0)) c->o.beta1 = 0.5f;
    if (o->batch < 1) return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be positive", o->batch);
    if (!(o->aux_fake_weight >= 0) || !isfinite(o->aux_fake_weight))
        return mp_error(MP_ERR_INVALID_ARG, "--aux-fake-weight %g must be finite and non-negative", o->aux_fake_weight);
    mp_rng_seed(&c->rng, o->seed ^ 0x6A4E0015ull);
    mp_plan_opts po = {.batch = o->batch, .training = true, .use_onednn = o->use_onednn, .seed = o->seed,
                       .device = o->device};
    po.n_losses = mp_acgan_losses(m, po.losses);
    mp_graph_round_low_weights(m->g, NULL, NULL); /* from the first step on, as the GPU holds them */
    MP_TRY(mp_plan_create(m->g, po, &c->plan));
    mp_optim_opts oo = {.kind = MP_OPTIM_ADAM, .beta1 = c->o.beta1, .beta2 = 0.999f};
    MP_TRY(group_init(&c->gen, m, true, &oo));
    MP_TRY(group_init(&c->dis, m, false, &oo));
    if (o->loss_scaling) MP_TRY(mp_scaler_init(&c->scaler, o->scaler));
    size_t b = (size_t)o->batch;
    c->z = malloc(b * (size_t)m->latent * sizeof *c->z);
    c->onehot = malloc(b * (size_t)m->classes * sizeof *c->onehot);
    c->ones = malloc(b * sizeof *c->ones);
    c->zeros = malloc(b * sizeof *c->zeros);
    c->fake_labels = malloc(b * sizeof *c->fake_labels);
    if (!c->z || !c->onehot || !c->ones || !c->zeros || !c->fake_labels)
        return mp_error(MP_ERR_NOMEM, "gan: out of memory");
    for (size_t i = 0; i < b; i++) c->ones[i] = 1, c->zeros[i] = 0;
    return MP_OK;
}

void mp_gan_ctx_free(mp_gan_ctx *c) {
    group_free(&c->gen);
    group_free(&c->dis);
    mp_plan_destroy(c->plan);
    free(c->z);
    free(c->onehot);
    free(c->ones);
    free(c->zeros);
    free(c->fake_labels);
    memset(c, 0, sizeof *c);
}

mp_status mp_gan_forward(mp_gan_ctx *c, const float *real, const int32_t *labels, bool *overflow) {
    mp_acgan *m = c->m;
    const int b = c->o.batch;
    *overflow = false;
    c->iteration++;
    for (int i = 0; i < b * m->latent; i++) c->z[i] = (float)mp_rng_normal(&c->rng);
    memset(c->onehot, 0, (size_t)b * (size_t)m->classes * sizeof *c->onehot);
    for (int i = 0; i < b; i++) {
        c->fake_labels[i] = (int32_t)mp_rng_below(&c->rng, (uint64_t)m->classes);
        c->onehot[(size_t)i * m->classes + c->fake_labels[i]] = 1;
    }
    MP_TRY(mp_plan_set_input(c->plan, m->real, real, mp_plan_numel(c->plan, m->real)));
    MP_TRY(mp_plan_set_labels(c->plan, m->real_labels, labels, (size_t)b));
    MP_TRY(mp_plan_set_input(c->plan, m->z, c->z, (size_t)b * m->latent));
    MP_TRY(mp_plan_set_input(c->plan, m->onehot, c->onehot, (size_t)b * m->classes));
    MP_TRY(mp_plan_set_labels(c->plan, m->fake_labels, c->fake_labels, (size_t)b));
    MP_TRY(mp_plan_set_input(c->plan, m->ones, c->ones, (size_t)b));
    MP_TRY(mp_plan_set_input(c->plan, m->zeros, c->zeros, (size_t)b));
    MP_TRY(mp_plan_forward(c->plan));
    mp_node losses[MP_MAX_LOSSES];
    mp_acgan_losses(m, losses);
    int bad = -1;
    for (int j = 0; j < N_LOSSES; j++) {
        MP_TRY(mp_plan_read(c->plan, losses[j], &c->losses[j], 1));
        if (bad < 0 && !isfinite(c->losses[j])) bad = j;
    }
    if (bad < 0) {
        c->consecutive_forward_overflows = 0;
        if (c->o.loss_scaling) mp_scaler_forward_ok(&c->scaler);
        return MP_OK;
    }
    /* A forward overflow: lowering the scale cannot fix it (DESIGN.md). */
    *overflow = true;
    c->forward_overflows++;
    c->consecutive_forward_overflows++;
    if (c->o.loss_scaling) mp_scaler_forward_overflow(&c->scaler);
    if (c->o.events)
        fprintf(c->o.events, "iteration %lld: forward overflow: %s is %g; skipping the iteration, loss scale stays %g\n",
                (long long)c->iteration, loss_names[bad], c->losses[bad], mp_gan_loss_scale(c));
    if (c->consecutive_forward_overflows >= 3)
        return mp_error(MP_ERR_NONFINITE,
                        "iteration %lld: %d consecutive forward overflows (%s is %g); lowering the loss scale cannot "
                        "fix that: try --precision amp-bf16 or fp32",
                        (long long)c->iteration, c->consecutive_forward_overflows, loss_names[bad], c->losses[bad]);
    return MP_OK;
}

/* Selects one group's parameters for mp_graph_round_low_weights. */
typedef struct {
    const mp_acgan *m;
    bool generator;
} group_select;

static bool in_group(const void *arg, int k) {
    const group_select *gs = arg;
    return mp_acgan_is_generator_param(gs->m, k) == gs->generator;
}

/* The weight of each loss in D's objective (G's are all 1). */
static float d_weight(const mp_gan_ctx *c, int loss) {
    return loss == REAL_CLS ? MP_GAN_AUX_REAL_WEIGHT : loss == FAKE_CLS ? c->o.aux_fake_weight : 1.0f;
}

/* Backward of sum_j weight_j loss_j * scale (a loss of weight 0 is not run),
 * then the group's unscale/check and optimizer step. */
static mp_status update(mp_gan_ctx *c, mp_gan_group *gr, const int *loss_ids, const float *weights, int n_losses,
                        bool generator, bool *skipped) {
    mp_node losses[MP_MAX_LOSSES];
    mp_acgan_losses(c->m, losses);
    const float scale = mp_gan_loss_scale(c);
    mp_graph_zero_grad(c->m->g);
    for (int j = 0; j < n_losses; j++)
        if (weights[j] != 0) MP_TRY(mp_plan_backward_from(c->plan, losses[loss_ids[j]], weights[j] * scale));
    MP_TRY(mp_plan_sync_params(c->plan, true)); /* a GPU plan: parameters and gradients to the host */
    int bad = -1;
    if (c->o.loss_scaling) bad = mp_scaler_unscale_check(&c->scaler, gr->grads, gr->sizes, gr->n);
    else
        for (int i = 0; i < gr->n && bad < 0; i++)
            if (mp_first_nonfinite(gr->grads[i], gr->sizes[i]) >= 0) bad = i;
    *skipped = bad >= 0;
    if (*skipped) {
        gr->skipped++;
        if (c->o.events)
            fprintf(c->o.events, "iteration %lld: gradient overflow in %s; %s skips its step (loss scale %g)\n",
                    (long long)c->iteration, mp_optim_param(gr->opt, bad)->name,
                    generator ? "the generator" : "the discriminator", scale);
        return MP_OK;
    }
    mp_optim_step(gr->opt, c->o.lr);
    mp_graph_round_low_weights(c->m->g, in_group, &(group_select){c->m, generator});
    return mp_plan_sync_params(c->plan, false);
}

mp_status mp_gan_update_generator(mp_gan_ctx *c, bool *skipped) {
    static const int ids[] = {GEN_SRC, FAKE_CLS};
    static const float weights[] = {1, 1};
    return update(c, &c->gen, ids, weights, 2, true, skipped);
}

mp_status mp_gan_update_discriminator(mp_gan_ctx *c, bool *skipped) {
    static const int ids[] = {REAL_SRC, REAL_CLS, FAKE_SRC, FAKE_CLS};
    float weights[4];
    for (int j = 0; j < 4; j++) weights[j] = d_weight(c, ids[j]);
    return update(c, &c->dis, ids, weights, 4, false, skipped);
}

mp_status mp_gan_end_iteration(mp_gan_ctx *c) {
    /* no scaler, or a forward overflow (which does not update it) */
    if (!c->o.loss_scaling || c->consecutive_forward_overflows > 0) return MP_OK;
    float before = mp_scaler_scale(&c->scaler);
    bool overflowed = mp_scaler_update(&c->scaler);
    if (overflowed && mp_scaler_at_floor(&c->scaler) && before <= c->scaler.min_scale)
        return mp_error(MP_ERR_NONFINITE,
                        "iteration %lld: non-finite gradients at the minimum loss scale %g; try --precision amp-bf16",
                        (long long)c->iteration, before);
    return MP_OK;
}

double mp_gan_d_loss(const mp_gan_ctx *c) {
    double sum = 0;
    for (int j = REAL_SRC; j <= FAKE_CLS; j++) sum += (double)d_weight(c, j) * c->losses[j];
    return sum;
}

double mp_gan_g_loss(const mp_gan_ctx *c) { return (double)c->losses[GEN_SRC] + c->losses[FAKE_CLS]; }

float mp_gan_loss_scale(const mp_gan_ctx *c) { return c->o.loss_scaling ? mp_scaler_scale(&c->scaler) : 1.0f; }
