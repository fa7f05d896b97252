/* trainer.c — the training loop over a compiled plan (see trainer.h). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "amp/policy.h"
#include "data/loader.h"
#include "graph/graph.h"
#include "io/output_path.h"
#include "train/checkpoint.h"
#include "train/progress.h"
#include "train/train_gpus.h"
#include "train/train_step.h"

static int argmax(const float *x, int k) {
    int best = 0;
    for (int i = 1; i < k; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

mp_status mp_evaluate(mp_model *m, const mp_dataset *d, int batch, const float *mean, const float *std,
                      bool use_onednn, mp_device device, double *acc, double *loss) {
    mp_plan *plan = NULL;
    mp_loader *ld = NULL;
    float *logits = NULL;
    int classes = (int)mp_graph_node_shape(m->g, m->logits, 1).dims[1];
    if (batch > d->n) batch = d->n;
    mp_status s = mp_plan_create(m->g, (mp_plan_opts){.batch = batch, .training = false, .loss = m->loss,
                                                      .use_onednn = use_onednn, .device = device},
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

static mp_status write_log(FILE *log, const mp_train_opts *o, int epoch, double loss, double train_acc,
                           double test_acc, double test_loss, double secs, double ips, float lr, size_t arena,
                           int64_t skipped, float loss_scale) {
    fprintf(log,
            "{\"epoch\":%d,\"model\":\"%s\",\"data\":\"%s\",\"precision\":\"%s\",\"batch\":%d,\"lr\":%.6g,"
            "\"train_loss\":%.6f,\"train_acc\":%.6f,\"test_loss\":%.6f,\"test_acc\":%.6f,\"epoch_time_s\":%.3f,"
            "\"images_per_s\":%.1f,\"arena_bytes\":%zu,\"skipped_steps\":%lld,\"loss_scale\":%g}\n",
            epoch, o->model_name ? o->model_name : "", o->data_name ? o->data_name : "",
            o->precision ? o->precision : "fp32", o->batch, lr, loss, train_acc, test_loss, test_acc, secs, ips, arena,
            (long long)skipped, loss_scale);
    return mp_output_flush(log, o->log_path, "--log"); /* a full disk stops the run here */
}

static mp_status check_opts(const mp_dataset *train, const mp_train_opts *o) {
    if (o->epochs <= 0) return mp_error(MP_ERR_INVALID_ARG, "--epochs %d must be positive", o->epochs);
    if (o->batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be positive", o->batch);
    if (o->batch > train->n)
        return mp_error(MP_ERR_INVALID_ARG, "--batch %d is larger than the training set (%d samples in %s)", o->batch,
                        train->n, train->source);
    if (!(o->lr > 0) || !isfinite(o->lr)) return mp_error(MP_ERR_INVALID_ARG, "--lr %g must be a positive number", o->lr);
    if (o->accumulate < 0) return mp_error(MP_ERR_INVALID_ARG, "--accumulate %d must be at least 1", o->accumulate);
    if (o->clip_norm < 0 || o->clip_value < 0 || !isfinite(o->clip_norm) || !isfinite(o->clip_value))
        return mp_error(MP_ERR_INVALID_ARG, "--clip-grad-norm/--clip-grad-value must be finite and >= 0");
    if (o->gpus < 0) return mp_error(MP_ERR_INVALID_ARG, "--gpus %d must be at least 1", o->gpus);
    if ((o->gpus > 1 || o->dist) && o->device.kind != MP_DEVICE_CUDA)
        return mp_error(MP_ERR_INVALID_ARG, "--gpus: data-parallel training runs on GPUs; it needs --device cuda (or auto "
                                            "with GPUs present)");
    if (!(o->bucket_mb >= 0) || o->bucket_mb > 4096)
        return mp_error(MP_ERR_INVALID_ARG, "--bucket-mb %g must lie in [0, 4096]", o->bucket_mb);
    if (!(o->dist_timeout >= 0) || o->dist_timeout > 1e6)
        return mp_error(MP_ERR_INVALID_ARG, "--dist-timeout %g must be a number of seconds >= 0", o->dist_timeout);
    mp_dtype dt;
    return o->allreduce ? mp_train_allreduce_dtype(o, NULL, &dt) : MP_OK;
}

/* Tests of the no-hang guarantee: MIXPREC_TEST_RANK_FAILURE=RANK:STEP[:exit]
 * makes that rank of a data-parallel run fail at that global step, with an
 * error, or (":exit") by dying as a crashed process would. Read once per run. */
typedef struct {
    long long step; /* -1: this rank does not fail */
    bool die;
} injected_failure;

static injected_failure injected_failure_of(const mp_train_opts *o) {
    const char *spec = o->dist ? getenv("MIXPREC_TEST_RANK_FAILURE") : NULL;
    int rank = -1;
    long long at = -1;
    char how[8] = "";
    if (!spec || sscanf(spec, "%d:%lld:%7s", &rank, &at, how) < 2 || rank != mp_dist_rank(o->dist))
        return (injected_failure){.step = -1};
    return (injected_failure){.step = at, .die = !strcmp(how, "exit")};
}

static mp_status fail_now(const mp_train_opts *o, const injected_failure *f) {
    if (f->die) {
        fprintf(stderr, "mixprec: rank %d: MIXPREC_TEST_RANK_FAILURE: exiting at step %lld\n", mp_dist_rank(o->dist),
                f->step);
        _exit(3);
    }
    return mp_error(MP_ERR_INTERNAL, "MIXPREC_TEST_RANK_FAILURE: rank %d fails at step %lld", mp_dist_rank(o->dist),
                    f->step);
}

mp_status mp_train_allreduce_dtype(const mp_train_opts *o, const mp_graph *g, mp_dtype *out) {
    const char *a = o->allreduce ? o->allreduce : "auto";
    if (!strcmp(a, "fp32")) *out = MP_DTYPE_F32;
    else if (!strcmp(a, "fp16")) *out = MP_DTYPE_F16;
    else if (!strcmp(a, "bf16")) *out = MP_DTYPE_BF16;
    else if (!strcmp(a, "auto")) *out = mp_precision_low_dtype(g ? (mp_precision)g->precision : MP_PRECISION_FP32);
    else return mp_error(MP_ERR_INVALID_ARG, "--allreduce '%s' must be auto, fp32, fp16 or bf16", a);
    return MP_OK;
}

mp_status mp_train_run(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_train_opts *o,
                       mp_train_result *r) {
    memset(r, 0, sizeof *r);
    MP_TRY(check_opts(train, o));
    if (o->gpus > 1 && !o->dist) return mp_train_run_threads(m, train, test, o, r);
    const int rank = mp_dist_rank(o->dist), world = mp_dist_world(o->dist);
    const injected_failure fail = injected_failure_of(o);
    float *mean = calloc((size_t)train->c, sizeof *mean), *std = calloc((size_t)train->c, sizeof *std);
    mp_loader *ld = NULL;
    mp_step_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    FILE *log = NULL;
    mp_status s = MP_OK;
    if (!mean || !std) s = mp_error(MP_ERR_NOMEM, "trainer: out of memory");
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
                                                     .std = o->normalize ? std : NULL,
                                                     .shards = world, .shard = rank},
                             &ld);
    const int k = o->accumulate > 0 ? o->accumulate : 1;
    int steps = s == MP_OK ? mp_loader_batches(ld) / k : 0;
    if (s == MP_OK && steps < 1)
        s = mp_error(MP_ERR_INVALID_ARG, "--accumulate %d x --batch %d is more than one epoch (%d samples)", k, o->batch,
                     train->n);
    if (o->max_steps > 0 && o->max_steps < steps) steps = o->max_steps;
    mp_lr_schedule sched;
    if (s == MP_OK) s = mp_lr_schedule_parse(o->lr_schedule ? o->lr_schedule : "constant", o->lr, steps * o->epochs, &sched);
    if (s == MP_OK) {
        if (!m->g->params_initialized) mp_graph_init_params(m->g, o->seed);
        s = mp_step_ctx_init(&ctx, m, o);
    }
    int first_epoch = 1;
    int64_t global_step = 0;
    mp_ckpt_info ck = {.model = o->model_name ? o->model_name : "", .precision = o->precision ? o->precision : "fp32",
                       .optimizer = mp_optim_kind_name(o->optim.kind), .batch = o->batch};
    if (s == MP_OK && o->resume_path) {
        s = mp_checkpoint_load(o->resume_path, m->g, ctx.opt, o->loss_scaling ? &ctx.scaler : NULL, &ck);
        if (s == MP_OK) {
            first_epoch = ck.epoch + 1;
            global_step = ck.global_step;
            mp_plan_set_step(ctx.plan, ck.plan_step);
            s = mp_step_ctx_state_to_device(&ctx); /* a GPU run continues from the loaded state */
        }
        if (s == MP_OK && o->out)
            fprintf(o->out, "resumed from %s after epoch %d (step %lld)\n", o->resume_path, ck.epoch,
                    (long long)global_step);
    }
    if (s == MP_OK && o->log_path) s = mp_output_open(o->log_path, "--log", first_epoch > 1, &log);
    if (s == MP_OK) r->arena_bytes = mp_plan_arena_bytes(ctx.plan);
    if (s == MP_OK && o->out && o->print_memory) mp_plan_print_memory(ctx.plan, o->out);
    if (s == MP_OK && o->out) {
        int native, emulated;
        mp_plan_precision_counts(ctx.plan, &native, &emulated);
        if (native + emulated)
            fprintf(o->out, "mixprec: %d low-precision ops run natively (oneDNN bf16 kernels), %d emulated in f32 "
                            "with rounding%s\n",
                    native, emulated, native ? "" : " (this CPU has no bf16 kernels, or the policy is fp16)");
    }

    double t_all = mp_now_seconds();
    for (int epoch = first_epoch; s == MP_OK && epoch <= o->epochs; epoch++) {
        mp_progress bar;
        if (o->out) mp_progress_begin(&bar, o->out, epoch, o->epochs, steps);
        s = mp_loader_start_epoch(ld, epoch);
        double t0 = mp_now_seconds(), loss_sum = 0;
        int64_t correct = 0, seen = 0, micro = 0;
        float lr = 0;
        for (int step = 1; s == MP_OK && step <= steps; step++) {
            lr = mp_lr_at(&sched, global_step);
            mp_step_result sr;
            ctx.read_now = step == steps; /* every epoch reports a loss, however few its steps */
            s = global_step + 1 == fail.step ? fail_now(o, &fail) : mp_train_step(&ctx, ld, lr, global_step + 1, &sr);
            global_step++;
            if (s != MP_OK) break;
            loss_sum += sr.loss_sum;
            correct += sr.correct;
            seen += sr.seen;
            micro += sr.seen / o->batch;
            if (o->out) mp_progress_update(&bar, step, micro ? loss_sum / micro : 0, seen ? (double)correct / seen : 0);
        }
        if (s == MP_OK && ctx.gpu) s = mp_step_ctx_sync_gpu(&ctx); /* waits for the queued steps; parameters
                                                                       and scaler state to the host */
        if (s != MP_OK) break;
        double secs = mp_now_seconds() - t0;
        if (o->out) mp_progress_end(&bar);
        double test_acc = 0, test_loss = 0;
        if (test && rank == 0) s = mp_evaluate(m, test, o->batch, o->normalize ? mean : NULL, o->normalize ? std : NULL,
                                  o->use_onednn, o->device, &test_acc, &test_loss);
        if (s != MP_OK) break;
        r->epochs_run = epoch;
        r->train_loss = micro ? loss_sum / micro : NAN;
        r->train_acc = seen ? (double)correct / (double)seen : 0;
        r->test_acc = test_acc;
        r->epoch_seconds = secs;
        r->images_per_s = (double)steps * k * o->batch * world / secs;
        if (o->out) {
            fprintf(o->out, "epoch %d/%d: loss %.4f - train acc %.4f - test loss %.4f - test acc %.4f - %.1fs - %.0f img/s",
                    epoch, o->epochs, r->train_loss, r->train_acc, test_loss, test_acc, secs, r->images_per_s);
            if (o->loss_scaling) fprintf(o->out, " - loss scale %g", mp_scaler_scale(&ctx.scaler));
            if (ctx.skipped) fprintf(o->out, " - %lld skipped steps", (long long)ctx.skipped);
            fputc('\n', o->out);
            fflush(o->out);
        }
        if (log) s = write_log(log, o, epoch, r->train_loss, r->train_acc, test_acc, test_loss, secs, r->images_per_s,
                               lr, r->arena_bytes, ctx.skipped, o->loss_scaling ? mp_scaler_scale(&ctx.scaler) : 1.0f);
        if (s == MP_OK && o->save_path && rank == 0) {
            ck.epoch = epoch;
            ck.global_step = global_step;
            ck.plan_step = mp_plan_step(ctx.plan);
            s = mp_step_ctx_state_to_host(&ctx); /* a GPU run's optimizer state is on the device */
            if (s == MP_OK)
                s = mp_checkpoint_save(o->save_path, m->g, ctx.opt, o->loss_scaling ? &ctx.scaler : NULL, &ck);
        }
        if (o->stop_after > 0 && epoch >= o->stop_after) break;
    }
    if (s != MP_OK) mp_dist_fail(o->dist, s); /* the other ranks stop instead of waiting for this one */
    r->total_seconds = mp_now_seconds() - t_all;
    r->skipped_steps = ctx.skipped;
    r->final_loss_scale = o->loss_scaling && ctx.opt ? mp_scaler_scale(&ctx.scaler) : 1.0f;
    if (log && s == MP_OK) s = mp_output_close(log, o->log_path, "--log");
    else if (log) fclose(log); /* the first error is the one reported */
    mp_step_ctx_free(&ctx);
    mp_loader_destroy(ld);
    free(mean);
    free(std);
    return s;
}
