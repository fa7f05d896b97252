/* doctor_verify.c — `mixprec doctor --verify` (doctor_verify.h): each row a
 * fresh model trained through mp_fit with the run's options on the probe's
 * device, silently; the table says precision, overrides, loss
 * scale, test accuracy, skipped steps, final scale, time and the last
 * epoch's training images/s, or why a run stopped. */
#include "cli/doctor_verify.h"

#include <string.h>

#include "core/error.h"
#include "train/fit.h"

typedef struct {
    const char *label;
    mp_precision precision;
    const char *overrides;
    mp_loss_scaling scaling;
    mp_scaler_opts scaler;
} verify_row;

static mp_status run_row(const train_args *t, mp_device device, const verify_row *v, const mp_dataset *train, const mp_dataset *test,
                         int epochs, mp_fit_result *res, mp_status *fit) {
    mp_optim_opts oo;
    float lr = 0;
    MP_TRY(common_opts_optimizer(&t->c, &oo, &lr));
    mp_model_spec spec = {.model = t->model, .data = train,
                          .policy = {.precision = v->precision, .overrides = v->overrides}};
    mp_model m = {0};
    MP_TRY(mp_model_spec_build(&spec, &m));
    mp_fit_opts o = {.model_name = t->model, .data_name = t->c.data,
                     .trainer = {.batch = t->batch, .device = device, .loss_scaling = v->scaling,
                                 .scaler = v->scaler, .accumulate = t->accumulate, .clip_norm = t->clip_norm,
                                 .clip_value = t->clip_value, .max_forward_overflows = t->max_forward_overflows,
                                 .reference = t->reference},
                     .optim = oo, .lr = lr, .lr_schedule = t->lr_schedule, .epochs = epochs,
                     .max_steps = t->max_steps, .seed = t->seed, .init = t->init, .augment = t->c.augment,
                     .normalize = t->c.normalize};
    memset(res, 0, sizeof *res);
    *fit = mp_fit(&m, train, test, &o, res);
    mp_model_free(&m);
    return MP_OK;
}

mp_status doctor_verify(const train_args *t, mp_device device, const mp_doctor_report *rep, mp_loss_scaling scaling,
                        const mp_dataset *train, const mp_dataset *test, int epochs, FILE *out) {
    verify_row rows[4];
    int n = 0;
    verify_row pol = {"doctor's policy", rep->precision, rep->overrides[0] ? rep->overrides : NULL, scaling, t->scaler};
    if (rep->set_scale) {
        pol.scaling = MP_LOSS_SCALING_ON;
        pol.scaler.init_scale = rep->init_scale, pol.scaler.static_scale = rep->policy_static;
        if (!rep->policy_static) pol.scaler.min_scale = rep->min_scale;
    }
    rows[n++] = pol;
    if (rep->target != MP_PRECISION_AMP_FP16)
        rows[n++] = (verify_row){"unchanged", rep->target, t->overrides, scaling, t->scaler};
    rows[n++] = (verify_row){"plain amp-fp16", MP_PRECISION_AMP_FP16, NULL, scaling, t->scaler};
    rows[n++] = (verify_row){"fp32", MP_PRECISION_FP32, NULL, MP_LOSS_SCALING_AUTO, {0}};
    char dev[64];
    fprintf(out, "verify: %d epoch%s each on %s, seed %llu, the same data (test accuracy on %d samples)\n", epochs,
            epochs == 1 ? "" : "s", mp_device_name(device, dev, sizeof dev), (unsigned long long)t->seed, test->n);
    fprintf(out, "%-16s %-9s %-24s %9s %8s %11s %8s %9s\n", "run", "precision", "overrides", "test acc", "skipped",
            "final scale", "time", "img/s");
    for (int i = 0; i < n; i++) {
        const verify_row *v = &rows[i];
        mp_fit_result res;
        mp_status fit;
        MP_TRY(run_row(t, device, v, train, test, epochs, &res, &fit));
        const char *ov = v->overrides ? v->overrides : "-";
        if (fit == MP_OK)
            fprintf(out, "%-16s %-9s %-24.24s %8.2f%% %8lld %11g %7.1fs %9.0f\n", v->label,
                    mp_precision_name(v->precision), ov, 100 * res.test_acc, (long long)res.skipped_steps,
                    res.final_loss_scale, res.total_seconds, res.images_per_s);
        else
            fprintf(out, "%-16s %-9s %-24.24s stopped: %s\n", v->label, mp_precision_name(v->precision), ov,
                    mp_last_error());
        fflush(out);
    }
    return MP_OK;
}
