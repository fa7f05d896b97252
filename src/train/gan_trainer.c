/* gan_trainer.c — see gan_trainer.h. */
#include "train/gan_trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/host_mem.h"
#include "core/median.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "io/image_grid.h"
#include "io/json_write.h"
#include "io/output_path.h"
#include "train/progress.h"
#include "train/trainer.h"

#define GRID_COLS 10

mp_status mp_gan_sample_grid(mp_acgan *m, int rows, int cols, uint64_t seed, bool reference, mp_device device,
                             float *images) {
    const int n = rows * cols;
    mp_plan *plan = NULL;
    float *z = malloc((size_t)n * m->latent * sizeof *z), *onehot = calloc((size_t)n * m->classes, sizeof *onehot);
    float *zero = calloc((size_t)n * m->c * m->h * m->w, sizeof *zero);
    int32_t *labels = malloc((size_t)n * sizeof *labels);
    mp_status s = z && onehot && zero && labels ? MP_OK : mp_error(MP_ERR_NOMEM, "gan samples: out of memory");
    if (s == MP_OK) {
        mp_rng r;
        mp_rng_seed(&r, seed ^ 0x5A3F1E5ull);
        for (int k = 0; k < cols; k++) /* noise vector k for column k */
            for (int f = 0; f < m->latent; f++) z[(size_t)k * m->latent + f] = (float)mp_rng_normal(&r);
        for (int row = 0; row < rows; row++)
            for (int k = 0; k < cols; k++) {
                int i = row * cols + k;
                if (row) memcpy(z + (size_t)i * m->latent, z + (size_t)k * m->latent, (size_t)m->latent * sizeof *z);
                labels[i] = row % m->classes;
                onehot[(size_t)i * m->classes + labels[i]] = 1;
            }
        s = mp_plan_create(m->g, (mp_plan_opts){.batch = n, .training = false, .loss = m->gen_src_loss,
                                                .reference = reference, .device = device},
                           &plan);
    }
    /* every input is set: the discriminator runs too (on zeros) */
    if (s == MP_OK) s = mp_plan_set_input(plan, m->z, z, (size_t)n * m->latent);
    if (s == MP_OK) s = mp_plan_set_input(plan, m->onehot, onehot, (size_t)n * m->classes);
    if (s == MP_OK) s = mp_plan_set_labels(plan, m->fake_labels, labels, (size_t)n);
    if (s == MP_OK) s = mp_plan_set_labels(plan, m->real_labels, labels, (size_t)n);
    if (s == MP_OK) s = mp_plan_set_input(plan, m->real, zero, (size_t)n * m->c * m->h * m->w);
    if (s == MP_OK) s = mp_plan_set_input(plan, m->ones, zero, (size_t)n);
    if (s == MP_OK) s = mp_plan_set_input(plan, m->zeros, zero, (size_t)n);
    if (s == MP_OK && m->has_interp) s = mp_plan_set_input(plan, m->gp_eps, zero, (size_t)n * m->c * m->h * m->w);
    if (s == MP_OK && m->has_interp) s = mp_plan_set_input(plan, m->gp_keep, zero, (size_t)n * m->c * m->h * m->w);
    if (s == MP_OK) s = mp_plan_forward(plan);
    if (s == MP_OK) s = mp_plan_read(plan, m->fake, images, (size_t)n * m->c * m->h * m->w);
    mp_plan_destroy(plan);
    free(z);
    free(onehot);
    free(zero);
    free(labels);
    return s;
}

static mp_status write_samples(mp_acgan *m, const mp_gan_train_opts *o, int epoch, mp_gan_train_result *r) {
    const int rows = m->classes, n = rows * GRID_COLS;
    float *images = malloc((size_t)n * m->c * m->h * m->w * sizeof *images);
    if (!images) return mp_error(MP_ERR_NOMEM, "gan samples: out of memory");
    mp_status s = mp_gan_sample_grid(m, rows, GRID_COLS, o->seed, o->trainer.reference, o->trainer.device, images);
    char stem[4100];
    snprintf(stem, sizeof stem, "%s/samples_epoch%d", o->out_dir, epoch);
    mp_image_grid gr = {.rows = rows, .cols = GRID_COLS, .c = m->c, .h = m->h, .w = m->w, .lo = -1, .hi = 1};
    if (s == MP_OK) s = mp_image_grid_write(stem, images, &gr, r->samples_path, sizeof r->samples_path);
    free(images);
    return s;
}

enum { REAL_SRC, REAL_CLS, FAKE_SRC, FAKE_CLS, GEN_SRC, N_LOSSES };

/* One epoch's numbers for its record. */
typedef struct {
    int epoch, steps;
    double d_loss, g_loss, secs;
    const char *penalty;     /* its kind's name, NULL: none */
    double penalty_value;    /* mean over the finite steps */
    int64_t g_skipped, d_skipped, forward_overflows; /* in this epoch */
    int64_t g_skipped_total, d_skipped_total, forward_overflows_total; /* since the run began */
    float loss_scale;
} epoch_record;

/* The epoch's JSONL record with every batch's time; every write checked. */
static mp_status write_record(FILE *log, const char *path, const mp_gan_train_opts *o, const char *precision,
                              const epoch_record *e, const double *ms, const char *samples) {
    double *sorted = malloc((size_t)e->steps * sizeof *sorted), sum = 0;
    if (!sorted) return mp_error(MP_ERR_NOMEM, "gan: out of memory");
    memcpy(sorted, ms, (size_t)e->steps * sizeof *sorted);
    const double median = mp_median_double(sorted, e->steps); /* sorts them */
    for (int i = 0; i < e->steps; i++) sum += ms[i];
    char dev[32];
    cJSON *j = cJSON_CreateObject();
    bool ok = mp_json_add(j, "epoch", mp_json_int(e->epoch)) && mp_json_add(j, "model", mp_json_str("acgan")) &&
              mp_json_add(j, "data", mp_json_str(o->data_name)) && mp_json_add(j, "precision", mp_json_str(precision)) &&
              mp_json_add(j, "device", mp_json_str(mp_device_name(o->trainer.device, dev, sizeof dev))) &&
              mp_json_add(j, "batch", mp_json_int(o->trainer.batch)) && mp_json_add(j, "steps", mp_json_int(e->steps)) &&
              mp_json_add(j, "d_loss", mp_json_fixed(e->d_loss, 6)) &&
              mp_json_add(j, "g_loss", mp_json_fixed(e->g_loss, 6)) &&
              mp_json_add(j, "g_skipped", mp_json_int(e->g_skipped)) &&
              mp_json_add(j, "d_skipped", mp_json_int(e->d_skipped)) &&
              mp_json_add(j, "forward_overflows", mp_json_int(e->forward_overflows)) &&
              mp_json_add(j, "g_skipped_total", mp_json_int(e->g_skipped_total)) &&
              mp_json_add(j, "d_skipped_total", mp_json_int(e->d_skipped_total)) &&
              mp_json_add(j, "forward_overflows_total", mp_json_int(e->forward_overflows_total)) &&
              mp_json_add(j, "loss_scale", mp_json_sig(e->loss_scale, 6)) &&
              mp_json_add(j, "epoch_time_s", mp_json_fixed(e->secs, 3)) &&
              mp_json_add(j, "images_per_s", mp_json_fixed((double)e->steps * o->trainer.batch / e->secs, 1)) &&
              mp_json_add(j, "batch_ms_mean", mp_json_fixed(sum / e->steps, 4)) &&
              mp_json_add(j, "batch_ms_median", mp_json_fixed(median, 4)) &&
              mp_json_add(j, "batch_ms_min", mp_json_fixed(sorted[0], 4)) &&
              mp_json_add(j, "batch_ms_max", mp_json_fixed(sorted[e->steps - 1], 4)) &&
              mp_json_add(j, "samples", mp_json_str(samples));
    if (ok && e->penalty)
        ok = mp_json_add(j, "penalty", mp_json_str(e->penalty)) &&
             mp_json_add(j, "penalty_value", isfinite(e->penalty_value) ? mp_json_sig(e->penalty_value, 6) : cJSON_CreateNull());
    cJSON *all = cJSON_AddArrayToObject(j, "batch_ms");
    for (int i = 0; i < e->steps; i++) ok = ok && mp_json_push(all, mp_json_fixed(ms[i], 3));
    free(sorted);
    MP_TRY(mp_json_write_line(log, j, ok && all, path));
    return mp_output_flush(log, path, NULL); /* a full disk stops the run here */
}

/* The weight of each loss in D's objective (G's are all 1). */
static float d_weight(int loss, float aux_fake_weight) {
    return loss == REAL_CLS ? MP_GAN_AUX_REAL_WEIGHT : loss == FAKE_CLS ? aux_fake_weight : 1.0f;
}

mp_status mp_gan_groups(mp_acgan *m, float lr, float beta1, float aux_fake_weight, mp_train_group groups[2]) {
    if (!(aux_fake_weight >= 0) || !isfinite(aux_fake_weight))
        return mp_error(MP_ERR_INVALID_ARG, "--aux-fake-weight %g must be finite and non-negative", aux_fake_weight);
    mp_optimizer_opts oo = {.optim = {.kind = MP_OPTIM_ADAM, .beta1 = beta1, .beta2 = 0.999f, .betas_as_given = true},
                            .lr = {.base_lr = lr > 0 ? lr : 2e-4f}};
    mp_optimizer *gen = NULL, *dis = NULL;
    oo.params = "g_";
    MP_TRY(mp_optimizer_create(m->g, &oo, &gen));
    oo.params = "d_";
    mp_status s = mp_optimizer_create(m->g, &oo, &dis);
    if (s != MP_OK) {
        mp_optimizer_destroy(gen);
        return s;
    }
    groups[0] = (mp_train_group){.optimizer = gen, .losses = {m->gen_src_loss, m->fake_cls_loss}, .weights = {1, 1},
                                 .n_losses = 2};
    groups[1] = (mp_train_group){.optimizer = dis,
                                 .losses = {m->real_src_loss, m->real_cls_loss, m->fake_src_loss, m->fake_cls_loss},
                                 .weights = {d_weight(REAL_SRC, aux_fake_weight), d_weight(REAL_CLS, aux_fake_weight),
                                             d_weight(FAKE_SRC, aux_fake_weight), d_weight(FAKE_CLS, aux_fake_weight)},
                                 .n_losses = 4};
    return MP_OK;
}

/* The run's trainer and the buffers of one iteration. */
typedef struct {
    mp_acgan *m;
    mp_trainer *t;
    mp_train_group groups[2];
    mp_rng rng;
    float aux_fake_weight;
    float *real, *z, *onehot, *ones, *zeros; /* (batch, c, h, w), (batch, latent), (batch, classes), (batch) x 2 */
    float *eps, *keep;                       /* WGAN-GP: (batch, c, h, w) each, or NULL */
    float penalty;                           /* the last step's penalty (NaN: skipped) */
    int32_t *fake_labels;                    /* (batch) */
    float losses[N_LOSSES];                  /* the last forward's */
} gan_run;

static void gan_run_free(gan_run *g) {
    mp_trainer_destroy(g->t);
    for (int i = 0; i < 2; i++) mp_optimizer_destroy(g->groups[i].optimizer);
    free(g->real);
    free(g->z);
    free(g->onehot);
    free(g->ones);
    free(g->zeros);
    free(g->fake_labels);
    free(g->eps);
    free(g->keep);
}

/* The trainer's penalty option from the GAN's: on D (group 1). */
static mp_status gan_penalty(const mp_acgan *m, const mp_gan_train_opts *o, mp_penalty *pen) {
    *pen = (mp_penalty){.kind = o->penalty, .weight = o->penalty_weight, .group = 1};
    switch (o->penalty) {
    case MP_PENALTY_NONE: return MP_OK;
    case MP_PENALTY_R1: pen->input = m->real, pen->output = m->real_src; return MP_OK;
    case MP_PENALTY_WGAN_GP:
        if (!m->has_interp)
            return mp_error(MP_ERR_INVALID_ARG, "gan: the wgan-gp penalty needs the interpolates in the model "
                            "(mp_acgan_add_interpolates before the policy)");
        pen->input = m->interp, pen->output = m->interp_src;
        return MP_OK;
    case MP_PENALTY_L2_GRAD: break;
    }
    return mp_error(MP_ERR_INVALID_ARG, "gan: gradient penalty %s: a GAN takes r1 or wgan-gp",
                    mp_penalty_kind_name(o->penalty));
}

static mp_status gan_run_open(gan_run *g, mp_acgan *m, const mp_gan_train_opts *o) {
    g->m = m;
    g->aux_fake_weight = o->aux_fake_weight;
    mp_rng_seed(&g->rng, o->seed ^ 0x6A4E0015ull);
    const size_t b = (size_t)o->trainer.batch;
    const int buffers = m->has_interp ? 3 : 1; /* real, and the penalty's eps and keep */
    MP_TRY(mp_host_mem_check(b * (size_t)m->c * m->h * m->w * sizeof(float) * (size_t)buffers, "try a smaller batch",
                             "the GAN's %d buffer%s of %zu images of %dx%dx%d", buffers, buffers > 1 ? "s" : "", b,
                             m->c, m->h, m->w));
    g->real = malloc(b * (size_t)m->c * m->h * m->w * sizeof *g->real);
    g->z = malloc(b * (size_t)m->latent * sizeof *g->z);
    g->onehot = malloc(b * (size_t)m->classes * sizeof *g->onehot);
    g->ones = malloc(b * sizeof *g->ones);
    g->zeros = malloc(b * sizeof *g->zeros);
    g->fake_labels = malloc(b * sizeof *g->fake_labels);
    if (!g->real || !g->z || !g->onehot || !g->ones || !g->zeros || !g->fake_labels)
        return mp_error(MP_ERR_NOMEM, "gan: out of memory");
    if (m->has_interp) {
        g->eps = malloc(b * (size_t)m->c * m->h * m->w * sizeof *g->eps);
        g->keep = malloc(b * (size_t)m->c * m->h * m->w * sizeof *g->keep);
        if (!g->eps || !g->keep) return mp_error(MP_ERR_NOMEM, "gan: out of memory");
    }
    for (size_t i = 0; i < b; i++) g->ones[i] = 1, g->zeros[i] = 0;
    const float beta1 = o->beta1_as_given || o->beta1 != 0.0f ? o->beta1 : 0.5f;
    MP_TRY(mp_gan_groups(m, o->lr, beta1, o->aux_fake_weight, g->groups));
    mp_trainer_opts to = o->trainer;
    to.n_groups = 2;
    to.groups[0] = g->groups[0];
    to.groups[1] = g->groups[1];
    to.seed = o->seed;
    MP_TRY(gan_penalty(m, o, &to.penalty));
    return mp_trainer_create(m->g, &to, &g->t);
}

/* One iteration on a real batch (images in [0, 1]): fresh noise and fake
 * classes, the step, the five losses read back. */
static mp_status iteration(gan_run *g, const float *x, const int32_t *y, int batch) {
    mp_acgan *m = g->m;
    const size_t numel = (size_t)batch * m->c * m->h * m->w;
    for (size_t i = 0; i < numel; i++) g->real[i] = 2 * x[i] - 1; /* [0, 1] -> [-1, 1], the range of tanh */
    for (int i = 0; i < batch * m->latent; i++) g->z[i] = (float)mp_rng_normal(&g->rng);
    memset(g->onehot, 0, (size_t)batch * (size_t)m->classes * sizeof *g->onehot);
    for (int i = 0; i < batch; i++) {
        g->fake_labels[i] = (int32_t)mp_rng_below(&g->rng, (uint64_t)m->classes);
        g->onehot[(size_t)i * m->classes + g->fake_labels[i]] = 1;
    }
    mp_trainer *t = g->t;
    MP_TRY(mp_trainer_set_input(t, m->real, g->real, numel));
    MP_TRY(mp_trainer_set_labels(t, m->real_labels, y, (size_t)batch));
    MP_TRY(mp_trainer_set_input(t, m->z, g->z, (size_t)batch * m->latent));
    MP_TRY(mp_trainer_set_input(t, m->onehot, g->onehot, (size_t)batch * m->classes));
    MP_TRY(mp_trainer_set_labels(t, m->fake_labels, g->fake_labels, (size_t)batch));
    MP_TRY(mp_trainer_set_input(t, m->ones, g->ones, (size_t)batch));
    MP_TRY(mp_trainer_set_input(t, m->zeros, g->zeros, (size_t)batch));
    if (m->has_interp) { /* WGAN-GP: one mixing weight per sample */
        const size_t per = (size_t)m->c * m->h * m->w;
        for (int i = 0; i < batch; i++) {
            const float u = (float)mp_rng_uniform(&g->rng);
            for (size_t j = 0; j < per; j++) g->eps[i * per + j] = u, g->keep[i * per + j] = 1 - u;
        }
        MP_TRY(mp_trainer_set_input(t, m->gp_eps, g->eps, numel));
        MP_TRY(mp_trainer_set_input(t, m->gp_keep, g->keep, numel));
    }
    mp_step_report rep;
    MP_TRY(mp_trainer_step(t, NULL, &rep));
    g->penalty = rep.penalty;
    const mp_node losses[N_LOSSES] = {m->real_src_loss, m->real_cls_loss, m->fake_src_loss, m->fake_cls_loss,
                                      m->gen_src_loss};
    for (int j = 0; j < N_LOSSES; j++) MP_TRY(mp_trainer_read(t, losses[j], &g->losses[j], 1));
    return MP_OK;
}

static double d_loss(const gan_run *g) {
    double sum = 0;
    for (int j = REAL_SRC; j <= FAKE_CLS; j++) sum += (double)d_weight(j, g->aux_fake_weight) * g->losses[j];
    return sum;
}

static double g_loss(const gan_run *g) { return (double)g->losses[GEN_SRC] + g->losses[FAKE_CLS]; }

static bool losses_finite(const gan_run *g) {
    for (int j = 0; j < N_LOSSES; j++)
        if (!isfinite(g->losses[j])) return false;
    return true;
}

mp_status mp_gan_train_run(mp_acgan *m, const mp_dataset *train, const mp_gan_train_opts *o, mp_gan_train_result *r) {
    memset(r, 0, sizeof *r);
    if (o->epochs < 1) return mp_error(MP_ERR_INVALID_ARG, "--epochs %d must be positive", o->epochs);
    if (o->trainer.batch < 1 || o->trainer.batch > train->n)
        return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be in [1, %d] (the training set of %s)", o->trainer.batch,
                        train->n, train->source);
    if (train->c != m->c || train->h != m->h || train->w != m->w || train->classes > m->classes)
        return mp_error(MP_ERR_SHAPE, "gan: the data (%dx%dx%d, %d classes) does not fit the model (%dx%dx%d, %d)",
                        train->c, train->h, train->w, train->classes, m->c, m->h, m->w, m->classes);
    if (!m->g->params_initialized) mp_acgan_init_params(m, o->seed);
    gan_run g = {0};
    mp_loader *ld = NULL;
    FILE *log = NULL;
    char log_path[4200];
    snprintf(log_path, sizeof log_path, "%s/batch_times.jsonl", o->out_dir);
    mp_status s = gan_run_open(&g, m, o);
    if (s == MP_OK)
        s = mp_loader_create(train, (mp_loader_opts){.batch = o->trainer.batch, .shuffle = true, .drop_last = true,
                                                     .seed = o->seed, .workers = o->data_workers},
                             &ld);
    int steps = s == MP_OK ? mp_loader_batches(ld) : 0;
    if (o->max_steps > 0 && o->max_steps < steps) steps = o->max_steps;
    double *ms = malloc((size_t)(steps + 1) * sizeof *ms);
    if (s == MP_OK && !ms) s = mp_error(MP_ERR_NOMEM, "gan: out of memory");
    if (s == MP_OK) s = mp_output_open(log_path, NULL, false, &log);
    mp_scaler state = {0};
    for (int epoch = 1; s == MP_OK && epoch <= o->epochs; epoch++) {
        s = mp_loader_start_epoch(ld, epoch);
        double t0 = mp_now_seconds(), d_sum = 0, g_sum = 0, pen_sum = 0;
        int finite = 0, pen_n = 0;
        for (int step = 0; s == MP_OK && step < steps; step++) {
            const float *x;
            const int32_t *y;
            int n = 0;
            s = mp_loader_next(ld, &x, &y, &n);
            const double t1 = mp_now_seconds();
            if (s == MP_OK) s = iteration(&g, x, y, n);
            ms[step] = 1e3 * (mp_now_seconds() - t1);
            if (s == MP_OK && losses_finite(&g)) {
                d_sum += d_loss(&g);
                g_sum += g_loss(&g);
                finite++;
            }
            if (s == MP_OK && o->penalty != MP_PENALTY_NONE && isfinite(g.penalty)) pen_sum += g.penalty, pen_n++;
        }
        if (s == MP_OK) s = mp_trainer_sync(g.t, NULL);
        if (s != MP_OK) break;
        const mp_scaler before = state;
        state = g.t->scaler;
        const double secs = mp_now_seconds() - t0;
        r->epochs_run = epoch;
        r->d_loss = finite ? d_sum / finite : NAN;
        r->g_loss = finite ? g_sum / finite : NAN;
        double total_ms = 0;
        for (int i = 0; i < steps; i++) total_ms += ms[i];
        r->batch_ms = total_ms / steps;
        r->penalty = pen_n ? pen_sum / pen_n : o->penalty != MP_PENALTY_NONE ? NAN : 0;
        if (!finite)
            s = mp_error(MP_ERR_NONFINITE, "gan: epoch %d: no iteration had finite losses: the GAN diverged; try "
                         "--precision amp-bf16 or fp32, or a lower --lr", epoch);
        if (s == MP_OK) s = write_samples(m, o, epoch, r);
        /* the scaler counts since the run began; the record and the line give this epoch's */
        epoch_record e = {.epoch = epoch, .steps = steps, .d_loss = r->d_loss, .g_loss = r->g_loss, .secs = secs,
                          .g_skipped = state.group_skips[0] - before.group_skips[0],
                          .d_skipped = state.group_skips[1] - before.group_skips[1],
                          .forward_overflows = state.forward_overflows - before.forward_overflows,
                          .g_skipped_total = state.group_skips[0], .d_skipped_total = state.group_skips[1],
                          .forward_overflows_total = state.forward_overflows, .loss_scale = state.scale,
                          .penalty = o->penalty != MP_PENALTY_NONE ? mp_penalty_kind_name(o->penalty) : NULL,
                          .penalty_value = r->penalty};
        mp_policy_info policy;
        mp_graph_policy(m->g, &policy);
        if (s == MP_OK) s = write_record(log, log_path, o, mp_precision_name(policy.precision), &e, ms, r->samples_path);
        if (s == MP_OK && o->out) {
            fprintf(o->out, "epoch %d/%d: D loss %.4f - G loss %.4f - %d batches, %.2f ms/batch - %.1fs", epoch,
                    o->epochs, r->d_loss, r->g_loss, steps, r->batch_ms, secs);
            if (o->penalty != MP_PENALTY_NONE) fprintf(o->out, " - %s penalty %.4g", e.penalty, r->penalty);
            if (g.t->loss_scaling) fprintf(o->out, " - loss scale %g", state.scale);
            fprintf(o->out, " - skipped steps G %lld, D %lld", (long long)e.g_skipped, (long long)e.d_skipped);
            if (e.forward_overflows) fprintf(o->out, ", forward overflows %lld", (long long)e.forward_overflows);
            const int bad = mp_loader_bad_images(ld);
            if (bad)
                fprintf(o->out, " - %d undecodable image%s replaced (--bad-images skip)", bad, bad == 1 ? "" : "s");
            fprintf(o->out, " - samples %s\n", r->samples_path);
            fflush(o->out);
        }
    }
    r->g_skipped = state.group_skips[0];
    r->d_skipped = state.group_skips[1];
    r->forward_overflows = state.forward_overflows;
    r->loss_scale = state.scale;
    if (log && s == MP_OK) s = mp_output_close(log, log_path, NULL);
    else if (log) fclose(log); /* the first error is the one reported */
    free(ms);
    mp_loader_destroy(ld);
    gan_run_free(&g);
    return s;
}
