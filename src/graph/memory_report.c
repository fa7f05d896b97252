/* memory_report.c — mp_plan_print_memory: where a plan's memory goes, from
 * the arena planner's lifetimes (the step with the most bytes alive, split
 * by kind) and, on a GPU, the sizes of the parameters' device copies. */
#include <stdio.h>

#include "graph/exec_backend.h"
#include "graph/plan.h"

#define MIB (1.0 / (1 << 20))

/* Schedule step t (plan.c's plan_memory: forward of node i at i, its
 * backward at 2n-1-i, the optimizer's end of step after) in words. */
static void step_name(const mp_plan *p, int t, char *buf, size_t len) {
    const int n = p->n;
    if (t < 0) snprintf(buf, len, "nowhere");
    else if (t < n) snprintf(buf, len, "the forward of '%s'", p->g->nodes[t].name);
    else if (t < 2 * n) snprintf(buf, len, "the backward of '%s'", p->g->nodes[2 * n - 1 - t].name);
    else snprintf(buf, len, "the end of the step");
}

void mp_plan_print_memory(const mp_plan *p, FILE *out) {
    if (!p || !out) return;
    const mp_arena_peak *pk = &p->arena_peak;
    char at[160];
    step_name(p, pk->step, at, sizeof at);
    fprintf(out, "memory: arena %.1f MiB; most alive at once %.1f MiB, at %s:", (double)p->arena_bytes * MIB,
            (double)pk->bytes * MIB, at);
    const char *sep = " ";
    for (int k = 0; k < MP_MEM_KINDS; k++) {
        if (!pk->by_kind[k]) continue;
        fprintf(out, "%s%s %.1f", sep, mp_mem_kind_name((mp_mem_kind)k), (double)pk->by_kind[k] * MIB);
        sep = ", ";
    }
    fprintf(out, "\n");
    if (p->o.second_order)
        fprintf(out, "memory: second order (gradient penalty): no arena reuse (every activation, saved tensor and "
                "gradient lives through the step), plus %.1f MiB of f32 tangent buffers\n",
                (double)mp_plan_tangent_bytes(p) * MIB);
    if (p->o.device.kind == MP_DEVICE_CPU) return; /* the graph's host copies are the parameters */
    size_t b[4];
    p->be->param_bytes(p, b);
    fprintf(out, "memory: parameters on cuda:%d: fp32 masters %.1f MiB, f16/bf16 casts %.1f, gradients outside the "
            "arena %.1f, KRSC filter copies %.1f\n", p->o.device.index, (double)b[0] * MIB, (double)b[1] * MIB,
            (double)b[2] * MIB, (double)b[3] * MIB);
}
