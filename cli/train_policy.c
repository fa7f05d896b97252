/* train_policy.c — `mixprec train --policy FILE`: the doctor's policy file
 * applied through the public precision API on top of --precision and
 * --precision-override, its loss scale into the scaler options; every
 * disagreement with the options is an error naming the file and the key. */
#include <string.h>

#include "amp/policy_file.h"
#include "cli/train_args.h"
#include "core/error.h"

mp_status train_apply_policy_file(train_args *t, mp_graph *g, mp_policy_opts *policy, char *buf, size_t cap) {
    if (!t->policy) return MP_OK;
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
        if (t->loss_scaling && !strcmp(t->loss_scaling, "off"))
            return mp_error(MP_ERR_INVALID_ARG, "%s: loss_scale: the file sets a loss scale, --loss-scaling is off",
                            t->policy);
        t->scaler.init_scale = pf.init_scale;
        t->scaler.static_scale = pf.static_scale;
        if (pf.min_scale > 0) t->scaler.min_scale = pf.min_scale;
        t->scaler_set = true;
    }
    policy->bn_low = t->bn_low; /* the build left it out when only the file's precision takes it */
    mp_status s = mp_graph_apply_policy(g, *policy);
    return s == MP_OK ? MP_OK : mp_error(s, "%s: %s", t->policy, mp_last_error());
}
