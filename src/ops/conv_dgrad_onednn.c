/* conv_dgrad_onednn.c — see conv_dgrad_onednn.h. */
#include "ops/conv_dgrad_onednn.h"

#include <stdint.h>
#include <string.h>

static int mode_override = -2; /* -2: none (the environment decides) */

int mp_dgrad_fwd_mode_set(int mode) {
    const int before = mode_override;
    mode_override = mode;
    return before;
}

static int current_mode(void) { return mode_override != -2 ? mode_override : mp_env_get()->cpu_dgrad_fwd; }

bool mp_dgrad_fwd_forced(void) { return current_mode() == 1; }

bool mp_dgrad_fwd_possible(const mp_op_desc *d) {
    const mp_conv_opts *o = &d->attr.conv;
    return d->kind == MP_OP_CONV2D && o->groups == 1 && o->stride == 1 && o->padding >= 0 &&
           o->padding <= o->dilation * (o->kernel - 1);
}

bool mp_dgrad_fwd_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl) {
    const int want = current_mode();
    if (want == 0 || !mp_dgrad_fwd_possible(d) || info->in[0].ndim != 4) return false;
    if (want == 1) return true;
    return impl && strstr(impl, "amx") && mp_info_nhwc_in(info, 0) && mp_info_nhwc_out(info) &&
           info->in[0].dims[1] >= 8 && info->out.dims[1] >= 8;
}

void mp_conv_weights_transpose_flip(void *dst, const void *src, int OC, int C, int k, size_t elem) {
    const int kk = k * k;
    char *out = dst;
    const char *in = src;
#pragma omp parallel for schedule(static) if ((int64_t)OC * C * kk > 65536)
    for (int c = 0; c < C; c++)
        for (int o = 0; o < OC; o++) {
            char *to = out + ((int64_t)c * OC + o) * kk * elem;
            const char *from = in + ((int64_t)o * C + c) * kk * elem;
            if (elem == 2)
                for (int t = 0; t < kk; t++) memcpy(to + t * 2, from + (kk - 1 - t) * 2, 2);
            else
                for (int t = 0; t < kk; t++) memcpy(to + t * 4, from + (kk - 1 - t) * 4, 4);
        }
}
