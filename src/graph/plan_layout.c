/* plan_layout.c — the channels-last decision of CPU plans (plan_layout.h). */
#include "graph/plan_layout.h"

#include <stdlib.h>

#include "core/dtype_convert.h"
#include "mixprec.h"

/* What node i's op, as prepared, says it can run on (ops/op.h: layouts). */
static mp_layout_support kind_of(const mp_plan *p, int i) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_op_vtable *vt = mp_op_lookup(nd->desc.kind);
    return vt->layouts ? vt->layouts(&nd->desc, &p->nodes[i].info, p->nodes[i].call.state) : MP_LAYOUT_NCHW_ONLY;
}

/* The decision over node outputs: nhwc[i] for node i's output; nodes
 * `excluded` (convolutions that found no primitive for channels-last
 * tensors) read and write NCHW. */
static void decide(const mp_plan *p, bool *nhwc, const bool *excluded) {
    const mp_graph *g = p->g;
    const int n = p->n;
    for (int i = 0; i < n; i++)
        nhwc[i] = !mp_shape_layout_free(&p->nodes[i].info.out) && kind_of(p, i) != MP_LAYOUT_NCHW_ONLY && !excluded[i] &&
                  g->nodes[i].storage_dtype != MP_DTYPE_I32;
    for (int j = 0; j < n; j++)
        if (kind_of(p, j) == MP_LAYOUT_NCHW_ONLY || excluded[j])
            for (int k = 0; k < g->nodes[j].n_in; k++) nhwc[g->nodes[j].in[k]] = false;
    /* an op that needs its tensors alike: all NHWC or all NCHW (demotion
     * only, so this ends) */
    for (bool changed = true; changed;) {
        changed = false;
        for (int j = 0; j < n; j++) {
            if (kind_of(p, j) != MP_LAYOUT_ALIKE) continue;
            const mp_gnode *nd = &g->nodes[j];
            bool any_nhwc = nhwc[j], any_nchw = !mp_shape_layout_free(&p->nodes[j].info.out) && !nhwc[j];
            for (int k = 0; k < nd->n_in; k++) {
                if (mp_shape_layout_free(&p->nodes[nd->in[k]].info.out)) continue;
                any_nhwc |= nhwc[nd->in[k]];
                any_nchw |= !nhwc[nd->in[k]];
            }
            if (!(any_nhwc && any_nchw)) continue;
            nhwc[j] = false;
            for (int k = 0; k < nd->n_in; k++) nhwc[nd->in[k]] = false;
            changed = true;
        }
    }
}

static unsigned flags_of(const mp_plan *p, int i, const bool *nhwc) {
    const mp_gnode *nd = &p->g->nodes[i];
    unsigned f = nhwc && nhwc[i] ? MP_NHWC_OUT : 0;
    for (int k = 0; nhwc && k < nd->n_in; k++)
        if (nhwc[nd->in[k]]) f |= 1u << k;
    return f;
}

/* Set every node's flags (nhwc NULL: none) and prepare the nodes whose flags changed. */
static mp_status apply(mp_plan *p, const bool *nhwc, mp_layout_sizes *sz, mp_layout_reprepare_fn reprepare) {
    for (int i = 0; i < p->n; i++) {
        const unsigned f = flags_of(p, i, nhwc);
        if (f == p->nodes[i].info.nhwc) continue;
        p->nodes[i].info.nhwc = f;
        MP_TRY(reprepare(p, i, sz));
    }
    return MP_OK;
}

mp_status mp_plan_choose_layout(mp_plan *p, mp_layout_sizes *sz, mp_layout_reprepare_fn reprepare) {
    if (p->so || p->o.second_order || p->o.input_grad || !p->onednn || p->o.channels_first ||
        mp_env_get()->no_channels_last)
        return MP_OK;
    bool *nhwc = calloc(2 * (size_t)p->n + 1, sizeof *nhwc), *excluded = nhwc + p->n;
    if (!nhwc) return mp_error(MP_ERR_NOMEM, "plan: out of memory");
    /* a convolution left without primitives on its channels-last tensors
     * keeps NCHW ones, and the rest is decided again (each round excludes
     * one more convolution, so this ends) */
    mp_status s = MP_OK;
    for (bool lost = true; s == MP_OK && lost;) {
        decide(p, nhwc, excluded);
        s = apply(p, nhwc, sz, reprepare);
        lost = false;
        for (int i = 0; s == MP_OK && i < p->n; i++)
            if (p->nodes[i].info.nhwc && kind_of(p, i) == MP_LAYOUT_NCHW_ONLY) excluded[i] = lost = true;
    }
    free(nhwc);
    if (s != MP_OK) { /* a node failed to prepare for its layouts: all NCHW, as prepared first */
        mp_clear_error();
        s = apply(p, NULL, sz, reprepare);
    }
    return s;
}

int mp_plan_channels_last(const mp_plan *p, int *activations_4d) {
    int k = 0, all = 0;
    for (int i = 0; p && i < p->n; i++) {
        k += mp_info_nhwc_out(&p->nodes[i].info);
        all += p->nodes[i].info.out.ndim == 4;
    }
    if (activations_4d) *activations_4d = all;
    return k;
}

/* The batch is transposed in f32 and converted in one pass. */
mp_status mp_nchw_to_nhwc_store(void *dst, mp_dtype dt, const float *src, const mp_shape *s) {
    const int64_t N = s->dims[0], C = s->dims[1], HW = (int64_t)s->dims[2] * s->dims[3];
    float *t = malloc((size_t)(N * C * HW) * sizeof *t);
    if (!t) return mp_error(MP_ERR_NOMEM, "set_input: out of memory for the channels-last copy of a batch");
    mp_transpose_batch(t, src, sizeof *t, N, C, HW);
    mp_store_f32_known(dst, dt, t, N * C * HW);
    free(t);
    return MP_OK;
}

mp_status mp_nhwc_to_nchw_load(float *dst, const void *src, mp_dtype dt, const mp_shape *s) {
    const int64_t N = s->dims[0], C = s->dims[1], HW = (int64_t)s->dims[2] * s->dims[3];
    float *t = malloc((size_t)(N * C * HW) * sizeof *t);
    if (!t) return mp_error(MP_ERR_NOMEM, "read: out of memory for the NCHW copy of a channels-last tensor");
    mp_load_f32_known(t, src, dt, N * C * HW);
    mp_transpose_batch(dst, t, sizeof *t, N, HW, C);
    free(t);
    return MP_OK;
}
