/* gan_trainer.c — see gan_trainer.h. */
#include "train/gan_trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/loader.h"
#include "graph/graph.h"
#include "io/image_grid.h"
#include "io/output_path.h"
#include "train/progress.h"

#define GRID_COLS 10

mp_status mp_gan_sample_grid(mp_acgan *m, int rows, int cols, uint64_t seed, bool use_onednn, mp_device device,
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
                                                .use_onednn = use_onednn, .device = device},
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
    mp_status s = mp_gan_sample_grid(m, rows, GRID_COLS, o->step.seed, o->step.use_onednn, o->step.device, images);
    char stem[4100];
    snprintf(stem, sizeof stem, "%s/samples_epoch%d", o->out_dir, epoch);
    mp_image_grid gr = {.rows = rows, .cols = GRID_COLS, .c = m->c, .h = m->h, .w = m->w, .lo = -1, .hi = 1};
    if (s == MP_OK) s = mp_image_grid_write(stem, images, &gr, r->samples_path, sizeof r->samples_path);
    free(images);
    return s;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static mp_status write_record(FILE *log, const char *log_path, const mp_gan_train_opts *o, const mp_gan_ctx *c,
                              int epoch, const double *ms, int steps, double d_loss, double g_loss, double secs,
                              const char *samples) {
    double *sorted = malloc((size_t)steps * sizeof *sorted), sum = 0;
    if (!sorted) return mp_error(MP_ERR_NOMEM, "%s: out of memory", log_path);
    memcpy(sorted, ms, (size_t)steps * sizeof *sorted);
    qsort(sorted, (size_t)steps, sizeof *sorted, cmp_double);
    for (int i = 0; i < steps; i++) sum += ms[i];
    char dev[32];
    fprintf(log,
            "{\"epoch\":%d,\"model\":\"acgan\",\"data\":\"%s\",\"precision\":\"%s\",\"device\":\"%s\",\"batch\":%d,"
            "\"steps\":%d,\"d_loss\":%.6f,\"g_loss\":%.6f,\"g_skipped\":%lld,\"d_skipped\":%lld,"
            "\"forward_overflows\":%lld,\"loss_scale\":%g,\"epoch_time_s\":%.3f,\"images_per_s\":%.1f,"
            "\"batch_ms_mean\":%.4f,\"batch_ms_median\":%.4f,\"batch_ms_min\":%.4f,\"batch_ms_max\":%.4f,"
            "\"samples\":\"%s\",\"batch_ms\":[",
            epoch, o->data_name ? o->data_name : "", o->precision ? o->precision : "fp32",
            mp_device_name(o->step.device, dev, sizeof dev), o->step.batch, steps, d_loss, g_loss,
            (long long)c->gen.skipped, (long long)c->dis.skipped, (long long)c->forward_overflows,
            mp_gan_loss_scale(c), secs, (double)steps * o->step.batch / secs, sum / steps, sorted[steps / 2],
            sorted[0], sorted[steps - 1], samples);
    for (int i = 0; i < steps; i++) fprintf(log, "%s%.3f", i ? "," : "", ms[i]);
    fputs("]}\n", log);
    free(sorted);
    return mp_output_flush(log, log_path, NULL); /* a full disk stops the run here */
}

/* One iteration on the next batch; *ms: its wall time. */
static mp_status iteration(mp_gan_ctx *c, mp_loader *ld, float *real, double *ms) {
    const float *x;
    const int32_t *y;
    int n = 0;
    MP_TRY(mp_loader_next(ld, &x, &y, &n));
    double t0 = mp_now_seconds();
    size_t numel = (size_t)c->o.batch * c->m->c * c->m->h * c->m->w;
    for (size_t i = 0; i < numel; i++) real[i] = 2 * x[i] - 1; /* [0, 1] -> [-1, 1], the range of tanh */
    bool overflow, skipped;
    MP_TRY(mp_gan_forward(c, real, y, &overflow));
    if (!overflow) {
        MP_TRY(mp_gan_update_generator(c, &skipped));
        MP_TRY(mp_gan_update_discriminator(c, &skipped));
    }
    MP_TRY(mp_gan_end_iteration(c));
    *ms = 1e3 * (mp_now_seconds() - t0);
    return MP_OK;
}

mp_status mp_gan_train_run(mp_acgan *m, const mp_dataset *train, const mp_gan_train_opts *o, mp_gan_train_result *r) {
    memset(r, 0, sizeof *r);
    if (o->epochs < 1) return mp_error(MP_ERR_INVALID_ARG, "--epochs %d must be positive", o->epochs);
    if (o->step.batch < 1 || o->step.batch > train->n)
        return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be in [1, %d] (the training set of %s)", o->step.batch,
                        train->n, train->source);
    if (train->c != m->c || train->h != m->h || train->w != m->w || train->classes > m->classes)
        return mp_error(MP_ERR_SHAPE, "gan: the data (%dx%dx%d, %d classes) does not fit the model (%dx%dx%d, %d)",
                        train->c, train->h, train->w, train->classes, m->c, m->h, m->w, m->classes);
    if (!m->g->params_initialized) mp_acgan_init_params(m, o->step.seed);
    mp_gan_ctx c;
    mp_loader *ld = NULL;
    FILE *log = NULL;
    char log_path[4200];
    snprintf(log_path, sizeof log_path, "%s/batch_times.jsonl", o->out_dir);
    mp_status s = mp_gan_ctx_init(&c, m, &o->step);
    if (s == MP_OK)
        s = mp_loader_create(train, (mp_loader_opts){.batch = o->step.batch, .shuffle = true, .drop_last = true,
                                                     .seed = o->step.seed},
                             &ld);
    int steps = s == MP_OK ? mp_loader_batches(ld) : 0;
    if (o->max_steps > 0 && o->max_steps < steps) steps = o->max_steps;
    float *real = malloc((size_t)o->step.batch * m->c * m->h * m->w * sizeof *real);
    double *ms = malloc((size_t)(steps + 1) * sizeof *ms);
    if (s == MP_OK && (!real || !ms)) s = mp_error(MP_ERR_NOMEM, "gan: out of memory");
    if (s == MP_OK) s = mp_output_open(log_path, NULL, false, &log);
    for (int epoch = 1; s == MP_OK && epoch <= o->epochs; epoch++) {
        s = mp_loader_start_epoch(ld, epoch);
        double t0 = mp_now_seconds(), d_sum = 0, g_sum = 0;
        int finite = 0;
        for (int step = 0; s == MP_OK && step < steps; step++) {
            s = iteration(&c, ld, real, &ms[step]);
            if (s == MP_OK && c.consecutive_forward_overflows == 0) {
                d_sum += mp_gan_d_loss(&c);
                g_sum += mp_gan_g_loss(&c);
                finite++;
            }
        }
        if (s != MP_OK) break;
        double secs = mp_now_seconds() - t0;
        r->epochs_run = epoch;
        r->d_loss = finite ? d_sum / finite : NAN;
        r->g_loss = finite ? g_sum / finite : NAN;
        double total_ms = 0;
        for (int i = 0; i < steps; i++) total_ms += ms[i];
        r->batch_ms = total_ms / steps;
        s = write_samples(m, o, epoch, r);
        if (s != MP_OK) break;
        s = write_record(log, log_path, o, &c, epoch, ms, steps, r->d_loss, r->g_loss, secs, r->samples_path);
        if (s != MP_OK) break;
        if (o->out) {
            fprintf(o->out, "epoch %d/%d: D loss %.4f - G loss %.4f - %d batches, %.2f ms/batch - %.1fs", epoch,
                    o->epochs, r->d_loss, r->g_loss, steps, r->batch_ms, secs);
            if (o->step.loss_scaling) fprintf(o->out, " - loss scale %g", mp_gan_loss_scale(&c));
            fprintf(o->out, " - skipped steps G %lld, D %lld", (long long)c.gen.skipped, (long long)c.dis.skipped);
            if (c.forward_overflows) fprintf(o->out, ", forward overflows %lld", (long long)c.forward_overflows);
            fprintf(o->out, " - samples %s\n", r->samples_path);
            fflush(o->out);
        }
    }
    r->g_skipped = c.gen.skipped;
    r->d_skipped = c.dis.skipped;
    r->forward_overflows = c.forward_overflows;
    r->loss_scale = mp_gan_loss_scale(&c);
    if (log && s == MP_OK) s = mp_output_close(log, log_path, NULL);
    else if (log) fclose(log); /* the first error is the one reported */
    free(real);
    free(ms);
    mp_loader_destroy(ld);
    mp_gan_ctx_free(&c);
    return s;
}
