/* profile.c — per-node timing of a plan (opts.profile) summed per op kind
 * and per way of running (f32 kernels, native bf16, staged emulation), so a
 * benchmark can say where a training step goes. */
#include <stdio.h>

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
