/* conv_dgrad_onednn.c — see conv_dgrad_onednn.h. */
#include "ops/conv_dgrad_onednn.h"

#include <pthread.h>
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

bool mp_dgrad_fwd_any_kernel(void) { return current_mode() >= 1; }

int mp_dgrad_fwd_untimed_choice(void) {
    const int m = current_mode();
    return m == 2 ? 1 : m == 3 ? 0 : -1;
}

/* The timed choices: a table the size of any model's distinct conv shapes (when full, later shapes are timed
 * again in each plan). */
enum { CHOICES = 256 };
static struct {
    int key[MP_DGRAD_KEY_INTS];
    int choice;
} g_choices[CHOICES];
static int g_n_choices;
static pthread_mutex_t g_choices_lock = PTHREAD_MUTEX_INITIALIZER;

int mp_dgrad_fwd_choice_get(const int key[MP_DGRAD_KEY_INTS]) {
    int choice = -1;
    pthread_mutex_lock(&g_choices_lock);
    for (int i = 0; i < g_n_choices && choice < 0; i++)
        if (!memcmp(g_choices[i].key, key, sizeof g_choices[i].key)) choice = g_choices[i].choice;
    pthread_mutex_unlock(&g_choices_lock);
    return choice;
}

int mp_dgrad_fwd_choice_put(const int key[MP_DGRAD_KEY_INTS], int choice) {
    pthread_mutex_lock(&g_choices_lock);
    int i = 0;
    while (i < g_n_choices && memcmp(g_choices[i].key, key, sizeof g_choices[i].key)) i++;
    if (i < g_n_choices) {
        choice = g_choices[i].choice;
    } else if (g_n_choices < CHOICES) {
        memcpy(g_choices[g_n_choices].key, key, sizeof g_choices[g_n_choices].key);
        g_choices[g_n_choices++].choice = choice;
    }
    pthread_mutex_unlock(&g_choices_lock);
    return choice;
}

bool mp_dgrad_fwd_possible(const mp_op_desc *d) {
    const mp_conv_opts *o = &d->attr.conv;
    return d->kind == MP_OP_CONV2D && o->groups == 1 && o->stride == 1 && o->padding >= 0 &&
           o->padding <= o->dilation * (o->kernel - 1);
}

bool mp_dgrad_fwd_wanted(const mp_op_desc *d, const mp_op_info *info, const char *impl) {
    const int want = current_mode();
    if (want == 0 || !mp_dgrad_fwd_possible(d) || info->in[0].ndim != 4) return false;
    if (want >= 1) return true; /* forced, or a test mode */
    if (mp_env_get()->deterministic) return false; /* the choice would be timed: not reproducible */
    return impl && strstr(impl, "amx") && mp_info_nhwc_in(info, 0) && mp_info_nhwc_out(info) &&
           info->in[0].dims[1] >= 8 && info->out.dims[1] >= 8;
}

/* In tiles of FLIP_TILE x FLIP_TILE (o, c) pairs, so that both the reads
 * (rows of src along c) and the writes (rows of dst along o) stay within a
 * few pages: a plain loop over one of them strides by the other's whole row
 * (C * k * k elements: 9 KB at C = 512, bf16), and took longer than the
 * convolution on small batches. */
enum { FLIP_TILE = 32 };

#define FLIP_TILE_LOOP(T)                                                                            \
    for (int o = o0; o < o1; o++)                                                                    \
        for (int c = c0; c < c1; c++) {                                                              \
            const T *from = (const T *)src + ((int64_t)o * C + c) * kk;                              \
            T *to = (T *)dst + ((int64_t)c * OC + o) * kk;                                           \
            for (int t = 0; t < kk; t++) to[t] = from[kk - 1 - t];                                   \
        }

void mp_conv_weights_transpose_flip(void *dst, const void *src, int OC, int C, int k, size_t elem) {
    const int kk = k * k, to_ = (OC + FLIP_TILE - 1) / FLIP_TILE, tc = (C + FLIP_TILE - 1) / FLIP_TILE;
#pragma omp parallel for schedule(static) if ((int64_t)OC * C * kk > 65536)
    for (int tile = 0; tile < to_ * tc; tile++) {
        const int o0 = tile / tc * FLIP_TILE, c0 = tile % tc * FLIP_TILE;
        const int o1 = o0 + FLIP_TILE < OC ? o0 + FLIP_TILE : OC, c1 = c0 + FLIP_TILE < C ? c0 + FLIP_TILE : C;
        if (elem == 2) FLIP_TILE_LOOP(uint16_t) /* bf16 bits */
        else FLIP_TILE_LOOP(float)
    }
}
