/* train_policy.c — `mixprec train`'s final precision policy: the doctor's
 * policy file (--policy FILE) applied through the public precision API on
 * top of --precision and --precision-override, its loss scale into the
 * scaler options (every disagreement with the options is an error naming
 * the file and the key), then --bn-low and --f32-weight-grads checked against
 * the precision. */
#include <string.h>

#include "amp/policy_file.h"
#include "amp/scaler.h"
#include "cli/train_args.h"
#include "core/error.h"

/* The file's dynamic scale against the scaler options it joins: a file's
 * init or min outside --min-loss-scale / --max-loss-scale (or under the
 * default floor) names the file's key, not a --loss-scale the user never gave. */
static mp_status check_scale_range(const char *path, const mp_policy_file *pf, const mp_scaler_opts *c) {
    if (pf->static_scale) return MP_OK; /* a static scale is not clamped */
    if (c->max_scale > 0 && pf->init_scale > c->max_scale)
        return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.init: %g is larger than --max-loss-scale %g", path,
                        (double)pf->init_scale, (double)c->max_scale);
    if (c->max_scale > 0 && pf->min_scale > c->max_scale)
        return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.min: %g is larger than --max-loss-scale %g", path,
                        (double)pf->min_scale, (double)c->max_scale);
    if (c->min_scale > 0 && pf->init_scale < c->min_scale)
        return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.init: %g is smaller than --min-loss-scale %g", path,
                        (double)pf->init_scale, (double)c->min_scale);
    if (c->min_scale == 0 && pf->min_scale == 0 && pf->init_scale < MP_SCALER_DEFAULT_MIN)
        return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.init: %g is below the default minimum loss scale 2^-24 = "
                        "%g; give loss_scale.min to go lower", path, (double)pf->init_scale,
                        (double)MP_SCALER_DEFAULT_MIN);
    return MP_OK;
}

/* The file's settings into t and policy; *file_precision: the file sets the precision. */
static mp_status read_policy_file(train_args *t, mp_graph *g, mp_policy_opts *policy, char *buf, size_t cap,
                                  bool *file_precision) {
    mp_policy_file pf;
    MP_TRY(mp_policy_file_read(t->policy, g, &pf));
    if (pf.has_precision && t->precision_set && pf.precision != policy->precision)
        return mp_error(MP_ERR_INVALID_ARG, "%s: precision: '%s' conflicts with --precision %s (give it in one place)",
                        t->policy, mp_precision_name(pf.precision), t->precision);
    if (pf.has_precision) policy->precision = pf.precision, t->precision = mp_precision_name(pf.precision);
    MP_TRY(mp_policy_file_merge(&pf, t->policy, policy->overrides, buf, cap));
    policy->overrides = buf[0] ? buf : NULL;
    if (pf.has_scale) {
        const mp_scaler_opts *c = &t->scaler;
        if (c->init_scale > 0 && (c->init_scale != pf.init_scale || c->static_scale != pf.static_scale))
            return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.init: %g (%s) conflicts with --loss-scale %g",
                            t->policy, pf.init_scale, pf.static_scale ? "static" : "dynamic", c->init_scale);
        if (pf.min_scale > 0 && c->min_scale > 0 && c->min_scale != pf.min_scale)
            return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale.min: %g conflicts with --min-loss-scale %g", t->policy,
                            pf.min_scale, c->min_scale);
        MP_TRY(check_scale_range(t->policy, &pf, c));
        if (t->loss_scaling && !strcmp(t->loss_scaling, "off"))
            return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale: the file sets a loss scale, --loss-scaling is off",
                            t->policy);
        t->scaler.init_scale = pf.init_scale;
        t->scaler.static_scale = pf.static_scale;
        if (pf.min_scale > 0) t->scaler.min_scale = pf.min_scale;
        t->scaler_set = true;
    }
    *file_precision = pf.has_precision;
    return MP_OK;
}

/* --bn-low and --f32-weight-grads against the run's precision p; file: the
 * policy file that set it, or NULL. */
static mp_status check_precision_options(const train_args *t, mp_precision p, const char *file) {
    const bool pure = p == MP_PRECISION_FP16 || p == MP_PRECISION_BF16;
    const char *from = file ? "from --policy " : t->precision_set ? "from --precision" : "the default";
    if (t->bn_low && !pure)
        return mp_error(MP_ERR_INVALID_ARG, "--bn-low applies to the fp16 and bf16 precisions only; this run's is %s "
                        "(%s%s)", mp_precision_name(p), from, file ? file : "");
    if (t->f32_weight_grads && pure) /* no fp32 masters: the weights and their gradients are in that dtype */
        return mp_error(MP_ERR_INVALID_ARG, "--f32-weight-grads needs fp32 master weights (amp-*, o2-*); this run's "
                        "precision is %s (%s%s)", mp_precision_name(p), from, file ? file : "");
    return MP_OK;
}

mp_status train_check_precision_options(const train_args *t, mp_precision p) {
    return t->policy ? MP_OK : check_precision_options(t, p, NULL); /* a policy file may set the precision */
}

mp_status train_apply_policy(train_args *t, mp_graph *g, mp_policy_opts *policy, char *buf, size_t cap) {
    bool file_precision = false;
    mp_status s = t->policy ? read_policy_file(t, g, policy, buf, cap, &file_precision) : MP_OK;
    if (s != MP_OK) return mp_error(s, "--policy %s", mp_last_error());
    MP_TRY(check_precision_options(t, policy->precision, file_precision ? t->policy : NULL));
    if (!t->policy && !t->bn_low) return MP_OK; /* as the model was built */
    policy->bn_low = t->bn_low;
    s = mp_graph_apply_policy(g, *policy);
    if (s != MP_OK && t->policy) return mp_error(s, "--policy %s: %s", t->policy, mp_last_error());
    return s;
}
