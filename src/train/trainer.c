/* trainer.c — the training loop over a compiled plan (see trainer.h). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "graph/graph.h"
#include "train/progress.h"

/* Parameters the optimizer updates; weight decay only on conv/linear weights. */
static mp_status make_optimizer(mp_graph *g, const mp_optim_opts *oo, mp_optim **out) {
    mp_param_ref *refs = calloc((size_t)(g->n_params ? g->n_params : 1), sizeof *refs);
    if (!refs) return mp_error(MP_ERR_NOMEM, "trainer: out of memory");
    int n = 0;
    for (int i = 0; i < g->n_params; i++) {
        mp_gparam *p = &g->params[i];
        if (!p->spec.trainable) continue;
        mp_op_kind k = g->nodes[p->node].desc.kind;
        bool is_weight = !strcmp(p->spec.name, "weight");
        refs[n++] = (mp_param_ref){.param = p->data,
                                   .grad = p->grad,
                                   .n = mp_shape_numel(&p->spec.shape),
                                   .decay = is_weight && k != MP_OP_BATCHNORM2D,
                                   .name = p->name};
    }
    mp_status s = mp_optim_create(*oo, refs, n, out);
    free(refs);
    return s;
}

static int argmax(const float *x, int k) {
    int best = 0;
    for (int i = 1; i < k; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

mp_status mp_evaluate(mp_model *m, const mp_dataset *d, int batch, const float *mean, const float *std,
                      bool use_onednn, double *acc, double *loss) {
    mp_plan *plan = NULL;
    mp_loader *ld = NULL;
    float *logits = NULL;
    int classes = (int)mp_graph_node_shape(m->g, m->logits, 1).dims[1];
    if (batch > d->n) batch = d->n;
    mp_status s = mp_plan_create(m->g, (mp_plan_opts){.batch = batch, .training = false, .loss = m->loss,
                                                      .use_onednn = use_onednn},
                                 &plan);
    if (s == MP_OK)
        s = mp_loader_create(d, (mp_loader_opts){.batch = batch, .shuffle = false, .drop_last = false, .mean = mean,
                                                 .std = std},
                             &ld);
    if (s == MP_OK && !(logits = malloc((size_t)batch * (size_t)classes * sizeof *logits)))
        s = mp_error(MP_ERR_NOMEM, "evaluate: out of memory");
    if (s == MP_OK) s = mp_loader_start_epoch(ld, 0);
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    while (s == MP_OK) {
        const float *x;
        const int32_t *y;
        int n = 0;
        s = mp_loader_next(ld, &x, &y, &n);
        if (s != MP_OK || n == 0) break;
        s = mp_plan_set_input(plan, m->input, x, mp_plan_numel(plan, m->input));
        if (s == MP_OK) s = mp_plan_set_labels(plan, m->labels, y, (size_t)batch);
        if (s == MP_OK) s = mp_plan_forward(plan);
        if (s == MP_OK) s = mp_plan_read(plan, m->logits, logits, (size_t)batch * (size_t)classes);
        if (s != MP_OK) break;
        for (int i = 0; i < n; i++) {
            const float *row = logits + (size_t)i * (size_t)classes;
            correct += argmax(row, classes) == y[i];
            double mx = row[0], se = 0;
            for (int k = 1; k < classes; k++) mx = fmax(mx, row[k]);
            for (int k = 0; k < classes; k++) se += exp(row[k] - mx);
            loss_sum += mx + log(se) - row[y[i]];
        }
        seen += n;
    }
    if (s == MP_OK) {
        *acc = seen ? (double)correct / (double)seen : 0;
        if (loss) *loss = seen ? loss_sum / (double)seen : 0;
    }
    free(logits);
    mp_loader_destroy(ld);
    mp_plan_destroy(plan);
    return s;
}

static void write_log(FILE *log, const mp_train_opts *o, int epoch, double loss, double train_acc, double test_acc,
                      double test_loss, double secs, double ips, float lr, size_t arena) {
    fprintf(log,
            "{\"epoch\":%d,\"model\":\"%s\",\"data\":\"%s\",\"precision\":\"%s\",\"batch\":%d,\"lr\":%.6g,"
            "\"train_loss\":%.6f,\"train_acc\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,\"epoch_time_s\":%.3f,"
            "\"images_per_s\":%.1f,\"arena_bytes\":%zu}\n",
            epoch, o->model_name ? o->model_name : "", o->data_name ? o->data_name : "",
            o->precision ? o->precision : "fp32", o->batch, lr, loss, train_acc, test_loss, test_acc, secs, ips, arena);
    fflush(log);
}

mp_status mp_train_run(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_train_opts *o,
                       mp_train_result *r) {
    memset(r, 0, sizeof *r);
    if (o->epochs <= 0) return mp_error(MP_ERR_INVALID_ARG, "--epochs %d must be positive", o->epochs);
    if (o->batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be positive", o->batch);
    if (o->batch > train->n)
        return mp_error(MP_ERR_INVALID_ARG, "--batch %d is larger than the training set (%d samples in %s)", o->batch,
                        train->n, train->source);
    if (!(o->lr > 0) || !isfinite(o->lr)) return mp_error(MP_ERR_INVALID_ARG, "--lr %g must be a positive number", o->lr);

    int classes = (int)mp_graph_node_shape(m->g, m->logits, 1).dims[1];
    float *mean = calloc((size_t)train->c, sizeof *mean), *std = calloc((size_t)train->c, sizeof *std);
    float *logits = malloc((size_t)o->batch * (size_t)classes * sizeof *logits);
    mp_plan *plan = NULL;
    mp_loader *ld = NULL;
    mp_optim *opt = NULL;
    FILE *log = NULL;
    mp_status s = MP_OK;
    if (!mean || !std || !logits) s = mp_error(MP_ERR_NOMEM, "trainer: out of memory");
    if (s == MP_OK && o->normalize) {
        mp_dataset_channel_stats(train, mean, std);
        for (int c = 0; c < train->c; c++)
            if (!(std[c] > 1e-6f)) std[c] = 1.0f; /* a constant channel: centre it only */
    }
    int crop = o->augment ? (train->h >= 32 ? 4 : 2) : 0;
    if (s == MP_OK)
        s = mp_loader_create(train, (mp_loader_opts){.batch = o->batch, .shuffle = true, .drop_last = true,
                                                     .seed = o->seed, .crop_pad = crop, .hflip = o->augment,
                                                     .mean = o->normalize ? mean : NULL,
                                                     .std = o->normalize ? std : NULL},
                             &ld);
    int steps = s == MP_OK ? mp_loader_batches(ld) : 0;
    if (o->max_steps > 0 && o->max_steps < steps) steps = o->max_steps;
    mp_lr_schedule sched;
    if (s == MP_OK) s = mp_lr_schedule_parse(o->lr_schedule ? o->lr_schedule : "constant", o->lr, steps * o->epochs, &sched);
    if (s == MP_OK) {
        mp_graph_init_params(m->g, o->seed);
        s = mp_plan_create(m->g, (mp_plan_opts){.batch = o->batch, .training = true, .loss = m->loss,
                                                .use_onednn = o->use_onednn, .seed = o->seed},
                           &plan);
    }
    if (s == MP_OK) s = make_optimizer(m->g, &o->optim, &opt);
    if (s == MP_OK && o->log_path && !(log = fopen(o->log_path, "w")))
        s = mp_error(MP_ERR_IO, "--log %s: cannot open for writing: %s", o->log_path, strerror(errno));
    if (s == MP_OK) r->arena_bytes = mp_plan_arena_bytes(plan);

    double t_all = mp_now_seconds();
    int64_t global_step = 0;
    size_t in_numel = s == MP_OK ? mp_plan_numel(plan, m->input) : 0;
    for (int epoch = 1; s == MP_OK && epoch <= o->epochs; epoch++) {
        mp_progress bar;
        if (o->out) mp_progress_begin(&bar, o->out, epoch, o->epochs, steps);
        s = mp_loader_start_epoch(ld, epoch);
        double t0 = mp_now_seconds(), loss_sum = 0;
        int64_t correct = 0, seen = 0;
        float lr = 0;
        for (int step = 1; s == MP_OK && step <= steps; step++) {
            const float *x;
            const int32_t *y;
            int n = 0;
            s = mp_loader_next(ld, &x, &y, &n);
            if (s != MP_OK) break;
            MP_ASSERT(n == o->batch);
            lr = mp_lr_at(&sched, global_step);
            s = mp_plan_set_input(plan, m->input, x, in_numel);
            if (s == MP_OK) s = mp_plan_set_labels(plan, m->labels, y, (size_t)n);
            if (s == MP_OK) s = mp_plan_forward(plan);
            float loss = 0;
            if (s == MP_OK) s = mp_plan_read(plan, m->loss, &loss, 1);
            if (s == MP_OK && !isfinite(loss))
                s = mp_error(MP_ERR_NONFINITE, "epoch %d step %d: the loss is %g (lower --lr?)", epoch, step, loss);
            if (s == MP_OK) {
                mp_graph_zero_grad(m->g);
                s = mp_plan_backward(plan, 1.0f);
            }
            if (s == MP_OK) s = mp_plan_read(plan, m->logits, logits, (size_t)n * (size_t)classes);
            if (s != MP_OK) break;
            mp_optim_step(opt, lr);
            global_step++;
            loss_sum += loss;
            for (int i = 0; i < n; i++) correct += argmax(logits + (size_t)i * (size_t)classes, classes) == y[i];
            seen += n;
            if (o->out) mp_progress_update(&bar, step, loss_sum / step, (double)correct / (double)seen);
        }
        if (s != MP_OK) break;
        double secs = mp_now_seconds() - t0;
        if (o->out) mp_progress_end(&bar);
        double test_acc = 0, test_loss = 0;
        if (test) s = mp_evaluate(m, test, o->batch, o->normalize ? mean : NULL, o->normalize ? std : NULL,
                                  o->use_onednn, &test_acc, &test_loss);
        if (s != MP_OK) break;
        r->epochs_run = epoch;
        r->train_loss = loss_sum / steps;
        r->train_acc = (double)correct / (double)seen;
        r->test_acc = test_acc;
        r->epoch_seconds = secs;
        r->images_per_s = (double)seen / secs;
        if (o->out) {
            fprintf(o->out, "epoch %d/%d: loss %.4f - train acc %.4f - test loss %.4f - test acc %.4f - %.1fs - %.0f img/s\n",
                    epoch, o->epochs, r->train_loss, r->train_acc, test_loss, test_acc, secs, r->images_per_s);
            fflush(o->out);
        }
        if (log) write_log(log, o, epoch, r->train_loss, r->train_acc, test_acc, test_loss, secs, r->images_per_s, lr,
                           r->arena_bytes);
    }
    r->total_seconds = mp_now_seconds() - t_all;
    if (log && fclose(log) != 0 && s == MP_OK)
        s = mp_error(MP_ERR_IO, "--log %s: write failed: %s", o->log_path, strerror(errno));
    mp_optim_destroy(opt);
    mp_plan_destroy(plan);
    mp_loader_destroy(ld);
    free(logits);
    free(mean);
    free(std);
    return s;
}
