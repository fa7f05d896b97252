/* profile.c — per-node timing of a plan (opts.profile) summed per op kind
 * and per way of running (f32 kernels, native bf16, staged emulation), and
 * the slowest nodes one by one, so a benchmark can say where a training step
 * goes. */
#include <stdio.h>
#include <stdlib.h>

#include "core/tensor.h"
#include "graph/plan.h"

typedef struct {
    double fwd, bwd;
    int nodes, native, staged;
} kind_total;

void mp_plan_print_profile(const mp_plan *p, FILE *out) {
    if (!p || !out) return;
    if (!p->o.profile) {
        fprintf(out, "profile: the plan was created without opts.profile\n");
        return;
    }
    kind_total t[MP_OP_COUNT] = {{0}};
    double total = 0;
    for (int i = 0; i < p->n; i++) {
        const mp_pnode *pn = &p->nodes[i];
        kind_total *k = &t[p->g->nodes[i].desc.kind];
        k->fwd += pn->fwd_seconds;
        k->bwd += pn->bwd_seconds;
        k->nodes++;
        k->native += pn->native;
        k->staged += pn->staged && !pn->native;
        total += pn->fwd_seconds + pn->bwd_seconds;
    }
    fprintf(out, "| op | nodes (native bf16 / emulated) | forward ms | backward ms | share |\n|---|---|---|---|---|\n");
    for (int k = 0; k < MP_OP_COUNT; k++) {
        if (!t[k].nodes || t[k].fwd + t[k].bwd == 0) continue;
        fprintf(out, "| %s | %d (%d / %d) | %.1f | %.1f | %.1f%% |\n", mp_op_lookup((mp_op_kind)k)->name, t[k].nodes,
                t[k].native, t[k].staged, 1e3 * t[k].fwd, 1e3 * t[k].bwd,
                total > 0 ? 100 * (t[k].fwd + t[k].bwd) / total : 0);
    }
    fprintf(out, "| all | %d | | | %.1f ms |\n", p->n, 1e3 * total);
}

void mp_plan_print_profile_nodes(const mp_plan *p, FILE *out, int top) {
    if (!p || !out) return;
    if (!p->o.profile) {
        fprintf(out, "profile: the plan was created without opts.profile\n");
        return;
    }
    int *order = malloc((size_t)(p->n > 0 ? p->n : 1) * sizeof *order);
    if (!order) {
        fprintf(out, "profile: out of memory for the per-node table\n");
        return;
    }
    /* the timed nodes, slowest first (insertion sort: plans have hundreds of nodes at most) */
    int n = 0;
    double total = 0;
    for (int i = 0; i < p->n; i++) {
        const double t = p->nodes[i].fwd_seconds + p->nodes[i].bwd_seconds;
        total += t;
        if (t <= 0) continue;
        int k = n++;
        for (; k > 0 && p->nodes[order[k - 1]].fwd_seconds + p->nodes[order[k - 1]].bwd_seconds < t; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    const int shown = top > 0 && top < n ? top : n;
    fprintf(out, "| node | op | output per sample | forward ms | backward ms | share |\n|---|---|---|---|---|---|\n");
    for (int k = 0; k < shown; k++) {
        const int i = order[k];
        const mp_gnode *gn = &p->g->nodes[i];
        const mp_pnode *pn = &p->nodes[i];
        mp_shape sample = {0}; /* the output shape without its batch dimension */
        for (int d = 1; d < gn->sample_shape.ndim; d++) sample.dims[sample.ndim++] = gn->sample_shape.dims[d];
        char shape[64];
        fprintf(out, "| %s | %s | %s | %.2f | %.2f | %.1f%% |\n", gn->name, mp_op_lookup(gn->desc.kind)->name,
                mp_shape_str(&sample, shape, sizeof shape),
                1e3 * pn->fwd_seconds, 1e3 * pn->bwd_seconds,
                total > 0 ? 100 * (pn->fwd_seconds + pn->bwd_seconds) / total : 0);
    }
    if (shown < n) fprintf(out, "(%d more timed nodes)\n", n - shown);
    free(order);
}
