/* plan_fuse.c — see plan_fuse.h. */
#include "graph/plan_fuse.h"

#include <stdlib.h>
#include <string.h>

static bool fusion_off(const mp_plan *p) {
    return p->o.no_fusion || mp_env_get()->no_fusion;
}

/* ReLU node j and the batch norm i it reads can be fused: i feeds j only, is
 * no output of the graph, stores the dtype j stores, and both are (or both
 * are not) on the backward path. (A residual add + ReLU was tried the same
 * way: the add's backward then reads the mask one step after the ReLU's
 * would, which kept one more activation alive at resnet18's peak, +23 MiB
 * at batch 2048; see bench/NOTES.md v0.10.) */
static bool fusable(const mp_plan *p, int j) {
    const mp_gnode *r = &p->g->nodes[j];
    if (r->desc.kind != MP_OP_RELU || r->n_in != 1) return false;
    const int i = r->in[0];
    const mp_gnode *bn = &p->g->nodes[i];
    return bn->desc.kind == MP_OP_BATCHNORM2D && bn->n_consumers == 1 && !bn->is_output &&
           bn->storage_dtype == r->storage_dtype && p->nodes[i].in_backward == p->nodes[j].in_backward;
}

void mp_plan_fuse_bn_relu(mp_plan *p) {
    if (fusion_off(p)) return;
    for (int j = 0; j < p->n; j++)
        if (fusable(p, j)) {
            p->nodes[p->g->nodes[j].in[0]].relu_fused = true;
            p->nodes[j].fused_away = true;
        }
}

int mp_plan_fused_producer(const mp_plan *p, int i) { return p->nodes[i].fused_away ? p->g->nodes[i].in[0] : -1; }

void mp_plan_fuse_buffers(const mp_plan *p, mp_arena_buf *b) {
    const int n = p->n;
    for (int j = 0; j < n; j++) {
        const int i = mp_plan_fused_producer(p, j);
        if (i < 0) continue;
        mp_arena_buf *out = &b[3 * i], *r_out = &b[3 * j], *grad = &b[3 * i + 1], *r_grad = &b[3 * j + 1];
        if (r_out->last > out->last) out->last = r_out->last;
        const bool bwd = p->nodes[i].in_backward;
        if (bwd && 2 * n - 1 - i > out->last) out->last = 2 * n - 1 - i; /* the mask */
        r_out->size = 0;
        b[3 * j + 2].size = 0; /* the ReLU saves nothing */
        if (bwd) {
            if (2 * n - 1 - i > r_grad->last) r_grad->last = 2 * n - 1 - i; /* the batch norm's dy */
            grad->size = 0;
        }
    }
}

void mp_plan_fuse_offsets(mp_plan *p) {
    for (int j = 0; j < p->n; j++) {
        const int i = mp_plan_fused_producer(p, j);
        if (i < 0) continue;
        p->nodes[j].out_off = p->nodes[i].out_off;
        p->nodes[i].grad_off = p->nodes[j].grad_off;
    }
}
