/* penalty_arg.c — see penalty_arg.h. */
#include "cli/penalty_arg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool penalty_arg_parse(const char *cmd, const char *text, bool gan, mp_penalty_kind *kind, float *weight) {
    const char *takes = gan ? "r1:GAMMA (R1 on the real images) or wgan-gp:LAMBDA (on interpolates)"
                            : "l2:LAMBDA (the L2 norm of the parameter gradients)";
    const char *colon = strchr(text, ':');
    if (!colon) {
        fprintf(stderr, "mixprec %s: --gradient-penalty '%s' must be KIND:WEIGHT; %s takes %s\n", cmd, text, cmd, takes);
        return false;
    }
    const size_t len = (size_t)(colon - text);
    const mp_penalty_kind kinds[] = {MP_PENALTY_L2_GRAD, MP_PENALTY_R1, MP_PENALTY_WGAN_GP};
    *kind = MP_PENALTY_NONE;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        const char *name = mp_penalty_kind_name(kinds[k]);
        if (strlen(name) == len && !strncmp(text, name, len)) *kind = kinds[k];
    }
    if (*kind == MP_PENALTY_NONE) {
        fprintf(stderr, "mixprec %s: --gradient-penalty '%s': unknown kind '%.*s'; %s takes %s\n", cmd, text, (int)len,
                text, cmd, takes);
        return false;
    }
    if (gan != (*kind != MP_PENALTY_L2_GRAD)) {
        fprintf(stderr, "mixprec %s: --gradient-penalty '%s': %s is a penalty of `mixprec %s`; %s takes %s\n", cmd,
                text, mp_penalty_kind_name(*kind), gan ? "train" : "train-gan", cmd, takes);
        return false;
    }
    const char *w = colon + 1;
    char *end;
    errno = 0;
    const double v = strtod(w, &end);
    if (errno || end == w || *end || !isfinite(v) || v < 0 || v > 3.4e38) {
        fprintf(stderr, "mixprec %s: --gradient-penalty '%s': the weight '%s' must be a finite number >= 0\n", cmd,
                text, w);
        return false;
    }
    *weight = (float)v;
    return true;
}
