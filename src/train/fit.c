/* fit.c — the epoch loop (fit.h) over the public trainer. */
#include "train/fit.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/dataset.h"
#include "amp/numerics_log.h"
#include "core/cpu_features.h"
#include "dist/dist.h"
#include "graph/graph.h"
#include "io/json_write.h"
#include "io/output_path.h"
#include "train/progress.h"

static mp_status check_opts(const mp_dataset *train, const mp_fit_opts *o) {
    if (o->epochs <= 0) return mp_error(MP_ERR_INVALID_ARG, "--epochs %d must be positive", o->epochs);
    if (o->trainer.batch <= 0) return mp_error(MP_ERR_INVALID_ARG, "--batch %d must be positive", o->trainer.batch);
    if (o->trainer.batch > train->n)
        return mp_error(MP_ERR_INVALID_ARG, "--batch %d is larger than the training set (%d samples in %s)",
                        o->trainer.batch, train->n, train->source);
    if (!(o->lr > 0) || !isfinite(o->lr)) return mp_error(MP_ERR_INVALID_ARG, "--lr %g must be a positive number", o->lr);
    if (o->gpus < 0) return mp_error(MP_ERR_INVALID_ARG, "--gpus %d must be at least 1", o->gpus);
    if (o->gpus > 1 && o->trainer.device.kind != MP_DEVICE_CUDA)
        return mp_error(MP_ERR_INVALID_ARG, "--gpus: data-parallel training runs on GPUs; it needs --device cuda (or "
                                            "auto with GPUs present)");
    if (!(o->dist_timeout >= 0) || o->dist_timeout > 1e6)
        return mp_error(MP_ERR_INVALID_ARG, "--dist-timeout %g must be a number of seconds >= 0", o->dist_timeout);
    return MP_OK;
}

/* One JSON record per epoch; every write checked. */
static mp_status write_log(FILE *log, const char *path, const mp_fit_opts *o, const char *precision, int epoch,
                           const mp_fit_result *r, float lr, int64_t skipped, float loss_scale) {
    cJSON *j = cJSON_CreateObject();
    bool ok = mp_json_add(j, "epoch", mp_json_int(epoch)) && mp_json_add(j, "model", mp_json_str(o->model_name)) &&
              mp_json_add(j, "data", mp_json_str(o->data_name)) && mp_json_add(j, "precision", mp_json_str(precision)) &&
              mp_json_add(j, "batch", mp_json_int(o->trainer.batch)) && mp_json_add(j, "lr", mp_json_sig(lr, 6)) &&
              mp_json_add(j, "train_loss", mp_json_fixed(r->train_loss, 6)) &&
              mp_json_add(j, "train_acc", mp_json_fixed(r->train_acc, 6)) &&
              mp_json_add(j, "test_loss", mp_json_fixed(r->test_loss, 6)) &&
              mp_json_add(j, "test_acc", mp_json_fixed(r->test_acc, 6)) &&
              mp_json_add(j, "epoch_time_s", mp_json_fixed(r->epoch_seconds, 3)) &&
              mp_json_add(j, "images_per_s", mp_json_fixed(r->images_per_s, 1)) &&
              mp_json_add(j, "arena_bytes", mp_json_int((int64_t)r->arena_bytes)) &&
              mp_json_add(j, "skipped_steps", mp_json_int(skipped)) &&
              mp_json_add(j, "loss_scale", mp_json_sig(loss_scale, 6));
    if (ok && o->trainer.penalty.kind != MP_PENALTY_NONE)
        ok = mp_json_add(j, "penalty", mp_json_str(mp_penalty_kind_name(o->trainer.penalty.kind))) &&
             mp_json_add(j, "penalty_weight", mp_json_sig(o->trainer.penalty.weight, 6)) &&
             mp_json_add(j, "penalty_value", isfinite(r->penalty) ? mp_json_sig(r->penalty, 6) : cJSON_CreateNull());
    MP_TRY(mp_json_write_line(log, j, ok, "--log"));
    return mp_output_flush(log, path, "--log"); /* a full disk stops the run here */
}

/* Everything one rank's run holds. */
typedef struct {
    mp_model *m;
    const mp_fit_opts *o;
    mp_optimizer *opt;
    mp_trainer *t;
    mp_loader *ld;
    float *mean, *std;   /* per channel */
    float *logits;       /* (batch, classes) */
    int classes, rank, world, k, steps;
    bool cpu;
    FILE *numerics;      /* --numerics-log, rank 0 */
    int64_t numerics_written; /* the last step whose statistics went out */
    double pen_sum;      /* the epoch's finite gradient-penalty values, and their count */
    int64_t pen_n;
} run;

static void run_free(run *r) {
    mp_trainer_destroy(r->t);
    mp_optimizer_destroy(r->opt);
    mp_loader_destroy(r->ld);
    free(r->mean);
    free(r->std);
    free(r->logits);
}

/* A resumed run normalizes with the statistics its checkpoint recorded:
 * the weights were trained on inputs scaled by them, and the same data can
 * give others (all samples held in memory, 2048 of them decoded per batch,
 * another split). True where it took them into r->mean/std (any number of
 * channels); else (not resuming, nothing recorded, other channels, an
 * unreadable file, which mp_trainer_load reports) the run computes its own
 * and check_resume_norm judges. */
static bool resumed_norm(run *r, const mp_dataset *train) {
    int saved = -1;
    return r->o->resume_path &&
           mp_checkpoint_read_normalization(r->o->resume_path, train->c, &saved, r->mean, r->std) == MP_OK &&
           saved == train->c;
}

/* Loader, optimizer with its schedule over the run's steps, trainer. */
static mp_status run_open(run *r, const mp_dataset *train) {
    const mp_fit_opts *o = r->o;
    mp_graph *g = r->m->g;
    r->cpu = o->trainer.device.kind == MP_DEVICE_CPU;
    r->rank = mp_dist_rank(o->trainer.dist), r->world = o->trainer.dist ? mp_dist_world(o->trainer.dist) : 1;
    r->k = o->trainer.accumulate > 1 ? o->trainer.accumulate : 1;
    r->classes = (int)g->nodes[r->m->logits].sample_shape.dims[1];
    r->mean = calloc((size_t)train->c, sizeof *r->mean);
    r->std = calloc((size_t)train->c, sizeof *r->std);
    r->logits = malloc((size_t)o->trainer.batch * (size_t)r->classes * sizeof *r->logits);
    if (!r->mean || !r->std || !r->logits) return mp_error(MP_ERR_NOMEM, "train: out of memory");
    if (o->normalize && !resumed_norm(r, train)) {
        mp_dataset_channel_stats(train, r->mean, r->std);
        for (int c = 0; c < train->c; c++)
            if (!(r->std[c] > 1e-6f)) r->std[c] = 1.0f; /* a constant channel: centre it only */
    }
    const int crop = o->augment ? (train->h >= 32 ? 4 : 2) : 0;
    MP_TRY(mp_loader_create(train, (mp_loader_opts){.batch = o->trainer.batch, .shuffle = true, .drop_last = true,
                                                    .seed = o->seed, .crop_pad = crop, .hflip = o->augment,
                                                    .mean = o->normalize ? r->mean : NULL,
                                                    .std = o->normalize ? r->std : NULL, .shards = r->world,
                                                    .shard = r->rank, .random_resized_crop = o->random_resized_crop,
                                                    .workers = o->data_workers},
                            &r->ld));
    r->steps = mp_loader_batches(r->ld) / r->k;
    if (r->steps < 1)
        return mp_error(MP_ERR_INVALID_ARG, "--accumulate %d x --batch %d is more than one epoch (%d samples)", r->k,
                        o->trainer.batch, train->n);
    if (o->max_steps > 0 && o->max_steps < r->steps) r->steps = o->max_steps;
    mp_lr_schedule sched;
    MP_TRY(mp_lr_schedule_parse(o->lr_schedule ? o->lr_schedule : "constant", o->lr, r->steps * o->epochs, &sched));
    MP_TRY(mp_optimizer_create(g, &(mp_optimizer_opts){.optim = o->optim, .lr = sched}, &r->opt));
    mp_trainer_opts to = o->trainer;
    to.input = r->m->input;
    to.labels = r->m->labels;
    to.loss = r->m->loss;
    to.optimizer = r->opt;
    to.n_groups = 0;
    to.seed = o->seed;
    if (!g->params_initialized) MP_TRY(mp_graph_init_params_scheme(g, o->seed, o->init));
    return mp_trainer_create(g, &to, &r->t);
}

/* The loss and accuracy of the last micro-batch into the epoch's sums (a
 * skipped step's loss counts nowhere). */
static mp_status count_batch(run *r, const int32_t *y, int n, double *loss_sum, int64_t *micro, int64_t *correct,
                             int64_t *seen) {
    float loss = 0;
    MP_TRY(mp_trainer_loss(r->t, &loss));
    if (!isfinite(loss)) return MP_OK;
    MP_TRY(mp_trainer_read(r->t, r->m->logits, r->logits, (size_t)n * (size_t)r->classes));
    *loss_sum += loss;
    ++*micro;
    for (int i = 0; i < n; i++) *correct += mp_argmax(r->logits + (size_t)i * (size_t)r->classes, r->classes) == y[i];
    *seen += n;
    return MP_OK;
}

/* The newest numerics statistics into --numerics-log and the callback, once
 * (on a GPU they arrive a step or more after the step that made them). */
static mp_status write_numerics(run *r) {
    const mp_numerics_record *rec;
    int n;
    int64_t step;
    MP_TRY(mp_trainer_numerics(r->t, &rec, &n, &step));
    if (step <= r->numerics_written) return MP_OK;
    r->numerics_written = step;
    if (r->o->numerics_cb) MP_TRY(r->o->numerics_cb(r->o->numerics_arg, step, rec, n));
    if (!r->numerics) return MP_OK;
    float scale = 1.0f; /* the step's: a gradient record carries it */
    for (int i = n - 1; i >= 0; i--)
        if (rec[i].kind == MP_NUMERICS_GRAD || rec[i].kind == MP_NUMERICS_PARAM_GRAD) scale = rec[i].scale;
    return mp_numerics_log_write(r->numerics, r->o->numerics_log, "--numerics-log", step, scale, rec, n);
}

/* One epoch's steps; the sums for the summary. */
static mp_status train_epoch(run *r, int epoch, double *loss_sum, int64_t *micro, int64_t *correct, int64_t *seen) {
    const mp_fit_opts *o = r->o;
    mp_progress bar;
    if (o->out) mp_progress_begin(&bar, o->out, epoch, o->epochs, r->steps);
    MP_TRY(mp_loader_start_epoch(r->ld, epoch));
    const int every = o->read_every > 0 ? o->read_every : 20;
    for (int step = 1; step <= r->steps; step++) {
        if (o->before_step) MP_TRY(o->before_step(o->before_step_arg, r->rank, mp_trainer_steps(r->t) + 1));
        for (int j = 0; j < r->k; j++) {
            const float *x;
            const int32_t *y;
            int n = 0;
            MP_TRY(mp_loader_next(r->ld, &x, &y, &n));
            mp_step_report rep;
            MP_TRY(mp_trainer_step(r->t, &(mp_batch){.images = x, .labels = y, .n = n}, &rep));
            if (o->trainer.penalty.kind != MP_PENALTY_NONE && isfinite(rep.penalty)) r->pen_sum += rep.penalty, r->pen_n++;
            if (r->numerics || o->numerics_cb) MP_TRY(write_numerics(r));
            /* the CPU reads every micro-batch (free); a GPU every few steps and at the epoch's end */
            const bool read = r->cpu || ((mp_trainer_steps(r->t) % every == 0 || step == r->steps) && j == r->k - 1);
            if (read) MP_TRY(count_batch(r, y, n, loss_sum, micro, correct, seen));
        }
        if (o->out) mp_progress_update(&bar, step, *micro ? *loss_sum / (double)*micro : 0,
                                       *seen ? (double)*correct / (double)*seen : 0);
        if (o->stop_at_step > 0 && mp_trainer_steps(r->t) >= o->stop_at_step) break;
    }
    MP_TRY(mp_trainer_sync(r->t, NULL)); /* waits; overflow reports; parameters to the host */
    if (o->out) mp_progress_end(&bar);
    return MP_OK;
}

/* The run diverged when no step of the epoch had a finite loss, or the test
 * loss is not finite. */
static mp_status check_finite_epoch(int epoch, const mp_fit_result *res, bool tested, const mp_trainer *t) {
    if (isfinite(res->train_loss) && (!tested || isfinite(res->test_loss))) return MP_OK;
    return mp_error(MP_ERR_NONFINITE,
                    "epoch %d: the %s loss is %g: the model diverged (%lld steps skipped so far, loss scale %g). Try "
                    "--precision amp-bf16 or fp32, a lower --lr, or an fp32 --precision-override for the layer the "
                    "reports name",
                    epoch, isfinite(res->train_loss) ? "test" : "training",
                    isfinite(res->train_loss) ? res->test_loss : res->train_loss,
                    (long long)mp_trainer_skipped_steps(t), mp_trainer_loss_scale(t));
}

/* The checkpoint after an epoch, with the normalization the run used. */
static mp_status save_checkpoint(const run *r, const mp_dataset *train, int epoch) {
    const mp_checkpoint_info info = {.model = r->o->model_name, .epoch = epoch};
    return mp_trainer_save_normalized(r->t, r->o->save_path, &info, r->o->normalize ? train->c : 0, r->mean, r->std);
}

static void print_setup(const run *r, FILE *out, bool print_memory) {
    mp_plan *p = mp_trainer_plan(r->t);
    if (print_memory) mp_plan_print_memory(p, out);
    int native, emulated;
    mp_plan_precision_counts(p, &native, &emulated);
    /* Without AVX-512 BF16 or AMX the convolutions and linear layers are
     * among the emulated ops, and they are most of a CPU step's time. */
    const bool bf16_hw = mp_cpu_multiplies_bf16();
    if (native + emulated)
        fprintf(out, "mixprec: %d low-precision ops run natively on bf16 tensors, %d emulated in f32 with "
                     "rounding%s\n",
                native, emulated,
                !bf16_hw ? " (this CPU has no bf16 instructions: convolutions compute in f32, at fp32's speed)"
                : native ? "" : " (fp16, and bf16 under MIXPREC_NATIVE_BF16=0, are emulated on the CPU)");
    int all4d = 0;
    const int nhwc = mp_plan_channels_last(p, &all4d);
    if (nhwc) fprintf(out, "mixprec: %d of %d activations stored channels-last (NHWC) on the CPU\n", nhwc, all4d);
}

/* The resumed run must normalize its inputs as the checkpoint's run did: the
 * weights were trained on inputs scaled by those statistics (resumed_norm
 * takes them), so normalizing where that run did not, or not where it did,
 * or data of other channels, feeds the model differently scaled inputs.
 * A checkpoint from before the statistics were recorded says nothing. */
static mp_status check_resume_norm(const run *r, const mp_dataset *train) {
    const char *path = r->o->resume_path;
    int saved = -1;
    float mean0 = 0, std0 = 0; /* channel 0's, for the message */
    mp_status s = mp_checkpoint_read_normalization(path, 1, &saved, &mean0, &std0);
    if (s != MP_OK) return mp_error(s, "--resume %s", mp_last_error());
    const int now = r->o->normalize ? train->c : 0;
    if (saved < 0) return MP_OK;
    if (saved == 0 && now > 0)
        return mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint's run did not normalize its inputs, this "
                        "run does (give --no-normalize, as that run did)", path);
    if (saved > 0 && now == 0)
        return mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint's run normalized its inputs (channel 0: "
                        "mean %g, std %g), this run does not (--no-normalize): leave --no-normalize out", path,
                        (double)mean0, (double)std0);
    if (saved != now)
        return mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint's run normalized %d channels, %s has %d",
                        path, saved, train->source, now);
    return MP_OK;
}

mp_status mp_fit_check(const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o) {
    MP_TRY(check_opts(train, o));
    return test ? mp_dataset_check_compatible(train, test) : MP_OK;
}

mp_status mp_fit_rank(mp_model *m, const mp_dataset *train, const mp_dataset *test, const mp_fit_opts *o,
                      mp_fit_result *res) {
    memset(res, 0, sizeof *res);
    run r = {.m = m, .o = o};
    mp_status s = run_open(&r, train);
    mp_policy_info policy;
    mp_graph_policy(m->g, &policy);
    const char *precision = mp_precision_name(policy.precision);
    int first_epoch = 1;
    if (s == MP_OK && o->resume_path) {
        mp_checkpoint_info info = {.model = o->model_name};
        s = mp_trainer_load(r.t, o->resume_path, &info);
        if (s != MP_OK) s = mp_error(s, "--resume %s", mp_last_error());
        if (s == MP_OK) s = check_resume_norm(&r, train);
        if (s == MP_OK && info.epoch >= o->epochs)
            s = mp_error(MP_ERR_INVALID_ARG, "--resume %s: the checkpoint already completed epoch %d of --epochs %d: "
                         "nothing left to train (raise --epochs)", o->resume_path, info.epoch, o->epochs);
        first_epoch = info.epoch + 1;
        if (s == MP_OK && o->out)
            fprintf(o->out, "resumed from %s after epoch %d (step %lld)\n", o->resume_path, info.epoch,
                    (long long)mp_trainer_steps(r.t));
    }
    FILE *log = NULL;
    if (s == MP_OK && o->log_path && r.rank == 0) s = mp_output_open(o->log_path, "--log", first_epoch > 1, &log);
    if (s == MP_OK && o->numerics_cb && !o->numerics_log && r.rank == 0)
        s = mp_trainer_numerics_enable(r.t, &(mp_numerics_opts){.every = o->numerics_every > 0 ? o->numerics_every : 1});
    if (s == MP_OK && o->numerics_log && r.rank == 0) {
        s = mp_trainer_numerics_enable(r.t, &(mp_numerics_opts){.every = o->numerics_every > 0 ? o->numerics_every
                                                                                                      : 100});
        if (s != MP_OK) s = mp_error(s, "--numerics-log: %s", mp_last_error());
        if (s == MP_OK) s = mp_output_open(o->numerics_log, "--numerics-log", first_epoch > 1, &r.numerics);
    }
    if (s == MP_OK) res->arena_bytes = mp_plan_arena_bytes(mp_trainer_plan(r.t));
    if (s == MP_OK && o->out) print_setup(&r, o->out, o->print_memory);
    if (s == MP_OK && o->on_start && r.rank == 0) s = o->on_start(o->on_start_arg);
    const double t_all = mp_now_seconds();
    for (int epoch = first_epoch; s == MP_OK && epoch <= o->epochs; epoch++) {
        double t0 = mp_now_seconds(), loss_sum = 0;
        int64_t correct = 0, seen = 0, micro = 0;
        const int64_t skipped_before = mp_trainer_skipped_steps(r.t);
        r.pen_sum = 0, r.pen_n = 0;
        s = train_epoch(&r, epoch, &loss_sum, &micro, &correct, &seen);
        if (s == MP_OK && (r.numerics || o->numerics_cb)) { /* a GPU's last collection of the epoch */
            s = mp_trainer_wait(r.t, NULL);
            if (s == MP_OK) s = write_numerics(&r);
        }
        if (s == MP_OK && mp_trainer_skipped_steps(r.t) - skipped_before >= r.steps)
            s = mp_error(MP_ERR_NONFINITE, "epoch %d: all %d steps skipped on NaN/inf gradients or losses (loss scale "
                         "%g): nothing was trained. Try --precision amp-bf16, a lower --lr or --loss-scale, or "
                         "dynamic loss scaling", epoch, r.steps, mp_trainer_loss_scale(r.t));
        if (s != MP_OK) break;
        const double secs = mp_now_seconds() - t0;
        const double waited = mp_loader_wait_seconds(r.ld);
        const int bad = mp_loader_bad_images(r.ld);
        if (o->out && bad > 0)
            fprintf(o->out, "input pipeline: %d image%s of the epoch%s failed to decode and %s replaced by the next "
                            "samples (--bad-images skip; their headers had read when the data was opened)\n",
                    bad, bad == 1 ? "" : "s", r.world > 1 ? " (rank 0's share)" : "", bad == 1 ? "was" : "were");
        if (o->out && waited > 0.1 * secs) /* the CPU does not keep up with the steps */
            fprintf(o->out, "input pipeline: the steps waited %.1fs of the epoch's %.1fs for batches: decoding is the "
                            "bottleneck (more --decode-threads, a smaller --image-size, or a dataset held in memory)\n",
                    waited, secs);
        mp_eval_result ev = {0};
        if (test && r.rank == 0)
            s = mp_evaluate(m->g, test,
                            &(mp_eval_opts){.input = m->input, .logits = m->logits, .batch = o->trainer.batch,
                                            .device = o->trainer.device, .reference = o->trainer.reference,
                                            .mean = o->normalize ? r.mean : NULL, .std = o->normalize ? r.std : NULL},
                            &ev);
        if (s != MP_OK) break;
        if (o->out && ev.bad_images > 0)
            fprintf(o->out, "input pipeline: %lld test image%s failed to decode and %s left out of the test "
                            "accuracy (--bad-images skip)\n", (long long)ev.bad_images,
                    ev.bad_images == 1 ? "" : "s", ev.bad_images == 1 ? "was" : "were");
        res->epochs_run = epoch;
        res->train_loss = micro ? loss_sum / (double)micro : NAN;
        res->train_acc = seen ? (double)correct / (double)seen : 0;
        res->test_acc = ev.accuracy;
        res->test_loss = ev.loss;
        res->epoch_seconds = secs;
        res->images_per_s = (double)r.steps * r.k * o->trainer.batch * r.world / secs;
        res->skipped_steps = mp_trainer_skipped_steps(r.t);
        res->final_loss_scale = mp_trainer_loss_scale(r.t);
        res->penalty = r.pen_n ? r.pen_sum / (double)r.pen_n : o->trainer.penalty.kind ? NAN : 0;
        const mp_optimizer_opts oo = mp_optimizer_options(r.opt);
        const float lr = mp_lr_at(&oo.lr, mp_trainer_steps(r.t) > 0 ? mp_trainer_steps(r.t) - 1 : 0);
        if (o->out) {
            fprintf(o->out, "epoch %d/%d: loss %.4f - train acc %.4f - test loss %.4f - test acc %.4f - %.1fs - %.0f img/s",
                    epoch, o->epochs, res->train_loss, res->train_acc, ev.loss, ev.accuracy, secs, res->images_per_s);
            if (o->trainer.penalty.kind != MP_PENALTY_NONE) /* always, with a penalty: the bar */
                fprintf(o->out, " - %s penalty %.4g - loss scale %g - %lld skipped steps",
                        mp_penalty_kind_name(o->trainer.penalty.kind), res->penalty, res->final_loss_scale,
                        (long long)res->skipped_steps);
            else if (r.t && mp_trainer_loss_scale(r.t) != 1.0f) fprintf(o->out, " - loss scale %g", res->final_loss_scale);
            if (res->skipped_steps && o->trainer.penalty.kind == MP_PENALTY_NONE)
                fprintf(o->out, " - %lld skipped steps", (long long)res->skipped_steps);
            fputc('\n', o->out);
            fflush(o->out);
        }
        if (log) s = write_log(log, o->log_path, o, precision, epoch, res, lr, res->skipped_steps, res->final_loss_scale);
        if (s == MP_OK) s = check_finite_epoch(epoch, res, test && r.rank == 0, r.t);
        if (s == MP_OK && o->save_path && r.rank == 0) s = save_checkpoint(&r, train, epoch);
        if (o->stop_after > 0 && epoch >= o->stop_after) break;
        if (o->stop_at_step > 0 && mp_trainer_steps(r.t) >= o->stop_at_step) break;
    }
    if (s != MP_OK) mp_dist_fail(o->trainer.dist, s); /* the other ranks stop instead of waiting for this one */
    res->total_seconds = mp_now_seconds() - t_all;
    if (r.t) { /* also after an error: how far it got */
        res->skipped_steps = mp_trainer_skipped_steps(r.t);
        res->final_loss_scale = mp_trainer_loss_scale(r.t);
    }
    if (log && s == MP_OK) s = mp_output_close(log, o->log_path, "--log");
    else if (log) fclose(log); /* the first error is the one reported */
    if (r.numerics && s == MP_OK) s = mp_output_close(r.numerics, o->numerics_log, "--numerics-log");
    else if (r.numerics) fclose(r.numerics);
    run_free(&r);
    return s;
}
