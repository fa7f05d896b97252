/* doctor_cmd.c — `mixprec doctor`: the same model, data and training options
 * as `train`; trains K probe steps in fp32 (the run's optimizer and
 * learning-rate schedule), collecting every tensor's range statistics, then
 * predicts per layer what the run's precision will do (amp/doctor.h), prints
 * the report and the verdict and writes the policy file `train --policy`
 * applies. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/doctor.h"
#include "amp/numerics_log.h"
#include "amp/policy_file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/doctor_verify.h"
#include "cli/train_args.h"
#include "core/error.h"
#include "train/fit.h"

typedef struct {
    int probe_steps, planned_steps, verify_epochs;
    bool verify;
    const char *policy_out;
} doctor_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: mixprec doctor [options]\n\n"
            "Predict where fp16/bf16 will fail before training: train K probe steps in fp32 with the run's\n"
            "model, data, optimizer and schedule, measure every layer's range, extrapolate it to the run's\n"
            "end, report per layer and write the policy that avoids the predicted failures.\n\n"
            "doctor:\n"
            "  --probe-steps K     fp32 steps to probe (default 50)\n"
            "  --planned-steps N   the run's optimizer steps (default: --epochs x batches per epoch)\n"
            "  --policy-out FILE   the policy file (default policy.json); `mixprec train --policy FILE`\n"
            "                      applies it\n"
            "  --verify            then train the policy, the run's precision unchanged (if not amp-fp16),\n"
            "                      plain amp-fp16 and fp32 on the same data and seed, and print their test\n"
            "                      accuracies and skipped steps side by side\n"
            "  --verify-epochs E   epochs of each --verify run (default 1)\n"
            "  --precision P       the run's policy to check: %s (default amp-fp16)\n"
            "  --precision-override LAYER=DTYPE,...  part of the run's policy: analysed with it and kept in\n"
            "                      the policy file (so not given again to `train --policy`)\n\n"
            "the run (as `mixprec train`, see its --help): --model, --data, --data-dir, --synthetic-*,\n"
            "--train-samples, --augment, --no-normalize, --epochs, --batch, --optimizer, --lr, --momentum,\n"
            "--nesterov, --weight-decay, --lr-schedule, --loss-scaling, --loss-scale and the other scaler\n"
            "options, --accumulate, --clip-grad-norm, --clip-grad-value, --max-steps, --seed, --init, --threads,\n"
            "--reference, --quiet, --device (default auto: the first GPU when there is one; the probe and\n"
            "the --verify runs use it).\n"
            "  -h, --help          this help\n\n" INPUT_FILES_HELP,
            mp_precision_list());
}

static int extra(void *arg, int argc, char **argv, int *i) {
    doctor_args *d = arg;
    const char *a = argv[*i];
    if (!strcmp(a, "--verify")) {
        d->verify = true;
        return 1;
    }
    const bool probe = !strcmp(a, "--probe-steps"), planned = !strcmp(a, "--planned-steps"),
               out = !strcmp(a, "--policy-out"), ve = !strcmp(a, "--verify-epochs");
    if (!probe && !planned && !out && !ve) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "mixprec doctor: %s needs a value (see --help)\n", a);
        return -1;
    }
    const char *v = argv[++*i];
    if (out) d->policy_out = v;
    else if (!arg_int("doctor", a, v, 1, ve ? 10000 : 1 << 30,
                      probe ? &d->probe_steps : planned ? &d->planned_steps : &d->verify_epochs))
        return -1;
    return 1;
}

/* Options `train` has and the probe cannot honour: one line naming it. */
static int reject(const train_args *t) {
    const struct {
        bool given;
        const char *opt, *why;
    } rows[] = {
        {t->gpus > 0, "--gpus", "the probe runs on one device"},
        {t->resume != NULL, "--resume", "the probe starts from the initialization"},
        {t->save != NULL, "--save", "the probe trains in fp32 and keeps nothing"},
        {t->stop_after > 0, "--stop-after", "the probe stops after --probe-steps"},
        {t->log != NULL, "--log", "the probe ends before an epoch does"},
        {t->numerics_log != NULL, "--numerics-log", "the doctor reads the statistics itself"},
        {t->numerics_every > 0, "--numerics-every", "the doctor collects every probe step"},
        {t->policy != NULL, "--policy", "the doctor writes the policy (--policy-out)"},
        {t->print_precision || t->print_memory, "--print-precision/--print-memory", "use `train`"},
        {t->auto_fallback, "--auto-fallback", "the probe is fp32"},
        {t->f32_weight_grads || t->bn_low, "--f32-weight-grads/--bn-low", "not analysed"},
        {t->penalty != MP_PENALTY_NONE, "--gradient-penalty", "the probe trains the plain loss"},
    };
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++)
        if (rows[k].given) {
            fprintf(stderr, "mixprec doctor: %s is not a doctor option (%s)\n", rows[k].opt, rows[k].why);
            return 2;
        }
    return 0;
}

static mp_status add_records(void *arg, int64_t step, const mp_numerics_record *rec, int n) {
    return mp_doctor_add(arg, step, rec, n);
}

int cmd_doctor(int argc, char **argv) {
    train_args t;
    doctor_args d = {.probe_steps = 50, .policy_out = "policy.json"};
    int rc = train_args_parse("doctor", argc, argv, &t, extra, &d, usage);
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = reject(&t))) return rc;
    if (d.verify_epochs && !d.verify) {
        fprintf(stderr, "mixprec doctor: --verify-epochs needs --verify\n");
        return 2;
    }
    mp_precision target = MP_PRECISION_AMP_FP16;
    if (t.precision_set && mp_precision_parse(t.precision, &target) != MP_OK) {
        fprintf(stderr, "mixprec doctor: %s\n", mp_last_error());
        return 2;
    }
    mp_device device;
    if (mp_device_parse(t.device, &device) != MP_OK) {
        fprintf(stderr, "mixprec doctor: --device: %s\n", mp_last_error());
        return 2;
    }
    if (mp_model_check_name(t.model) != MP_OK) {
        fprintf(stderr, "mixprec doctor: --model: %s\n", mp_last_error());
        return 2;
    }
    if ((rc = common_opts_check_data("doctor", &t.c))) return rc;
    /* before any probing; the policy written over the model or data it is made from would destroy them */
    if ((rc = cli_check_output("doctor", "--policy-out", d.policy_out)) ||
        (rc = cli_check_inputs_kept("doctor", &t.c, t.model, 1, (const char *[]){"--policy-out"},
                                    (const char *[]){d.policy_out})))
        return rc;
    if (t.threads) omp_set_num_threads(t.threads);
    FILE *out = t.quiet ? NULL : stdout;

    mp_dataset train = {0}, test = {0};
    mp_model m = {0};
    mp_optim_opts oo;
    float lr = 0;
    mp_doctor *doc = NULL;
    mp_doctor_report rep = {0};
    mp_status s = common_opts_optimizer(&t.c, &oo, &lr);
    if (s == MP_OK) s = common_opts_load_data(&t.c, t.seed, &train, &test);
    mp_model_spec spec = {.model = t.model, .data = &train, .policy = {.precision = MP_PRECISION_FP32}};
    if (s == MP_OK) s = mp_model_spec_build(&spec, &m);
    /* the user's overrides are part of the analysed policy: checked now, before probing */
    if (s == MP_OK && t.overrides &&
        mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = target, .overrides = t.overrides}) != MP_OK) {
        fprintf(stderr, "mixprec doctor: %s\n", mp_last_error()); /* a usage error: exit 2 */
        mp_model_free(&m);
        mp_dataset_free(&train);
        mp_dataset_free(&test);
        return 2;
    }
    if (s == MP_OK && t.overrides) s = mp_graph_apply_policy(m.g, (mp_policy_opts){.precision = MP_PRECISION_FP32});
    if (s == MP_OK) s = mp_doctor_create(m.g, &doc);
    const int k = t.accumulate > 1 ? t.accumulate : 1;
    int64_t per_epoch = t.batch > 0 ? train.n / t.batch / k : 0;
    if (t.max_steps > 0 && t.max_steps < per_epoch) per_epoch = t.max_steps;
    const int64_t run_steps = per_epoch * t.epochs, planned = d.planned_steps > 0 ? d.planned_steps : run_steps;
    /* the probe ends with the run when the run is shorter (--planned-steps does not lengthen it) */
    const int64_t probed = run_steps > 0 && run_steps < d.probe_steps ? run_steps : d.probe_steps;
    const mp_loss_scaling scaling = t.loss_scaling ? (!strcmp(t.loss_scaling, "on") ? MP_LOSS_SCALING_ON
                                                                                      : MP_LOSS_SCALING_OFF)
                                    : t.scaler_set ? MP_LOSS_SCALING_ON : MP_LOSS_SCALING_AUTO;
    if (s == MP_OK && out)
        fprintf(out, "mixprec doctor: model %s (%lld parameters), %d train samples of %dx%dx%d, batch %d, %s lr %g: "
                     "probing %lld steps in fp32 of a %lld-step run, checking %s\n",
                t.model, (long long)mp_graph_param_count(m.g), train.n, train.c, train.h, train.w, t.batch,
                t.c.optimizer, lr, (long long)probed, (long long)planned, mp_precision_name(target));
    mp_fit_result res;
    if (s == MP_OK) {
        mp_fit_opts o = {.model_name = t.model, .data_name = t.c.data,
                         .trainer = {.batch = t.batch, .device = device, .accumulate = t.accumulate,
                                     .clip_norm = t.clip_norm, .clip_value = t.clip_value,
                                     .max_forward_overflows = t.max_forward_overflows, .reference = t.reference},
                         .optim = oo, .lr = lr, .lr_schedule = t.lr_schedule, .epochs = t.epochs,
                         .max_steps = t.max_steps, .seed = t.seed, .init = t.init, .augment = t.c.augment,
                         .normalize = t.c.normalize,
                         .numerics_cb = add_records, .numerics_arg = doc, .numerics_every = 1,
                         .stop_at_step = d.probe_steps};
        s = mp_fit(&m, &train, NULL, &o, &res);
        if (s != MP_OK) s = mp_error(s, "the fp32 probe: %s", mp_last_error());
    }
    if (s == MP_OK) {
        mp_doctor_opts o = {.target = target, .planned_steps = planned, .loss_scaling = scaling, .scaler = t.scaler,
                             .overrides = t.overrides, .gpu = device.kind == MP_DEVICE_CUDA,
                             .clips = t.clip_norm > 0 || t.clip_value > 0};
        s = mp_doctor_analyze(doc, m.g, &o, &rep);
    }
    if (s == MP_OK) {
        mp_doctor_print(&rep, stdout); /* the report is the output, also under --quiet */
        s = mp_policy_file_write(d.policy_out, &rep);
    }
    if (s == MP_OK && out) fprintf(out, "policy written to %s (apply it with `mixprec train --policy %s`)\n",
                                   d.policy_out, d.policy_out);
    if (s == MP_OK && d.verify) s = doctor_verify(&t, device, &rep, scaling, &train, &test,
                                                  d.verify_epochs ? d.verify_epochs : 1, stdout);
    if (s != MP_OK) fprintf(stderr, "mixprec doctor: %s\n", mp_last_error());
    mp_doctor_report_free(&rep);
    mp_doctor_destroy(doc);
    mp_model_free(&m);
    mp_dataset_free(&train);
    mp_dataset_free(&test);
    return s == MP_OK ? 0 : 1;
}
