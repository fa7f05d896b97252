/* plan_inplace.c — see plan_inplace.h. */
#include "graph/plan_inplace.h"

#include "graph/exec_backend.h"
#include "graph/plan_fuse.h"

int mp_plan_bn_dy_node(const mp_plan *p, int i) {
    for (int j = i + 1; p->nodes[i].relu_fused && j < p->n; j++)
        if (mp_plan_fused_producer(p, j) == i && mp_plan_fused_value_stored(p, j)) return j;
    return i;
}

/* Whether batch norm i's dx may go over its dy (plan_inplace.h), given the
 * buffers' lifetimes b; *j: the node holding dy (mp_plan_bn_dy_node). */
static bool dx_over_dy_ok(const mp_plan *p, int i, const mp_arena_buf *b, int *j) {
    const mp_gnode *nd = &p->g->nodes[i];
    const mp_pnode *pn = &p->nodes[i];
    if (nd->desc.kind != MP_OP_BATCHNORM2D || !pn->in_backward || pn->add_fused || pn->pool_fused || pn->dw_fused ||
        !p->be->bn_dx_over_dy_safe(p, i))
        return false;
    const int c = nd->in[0], n = p->n, step = 2 * n - 1 - i;
    *j = mp_plan_bn_dy_node(p, i);
    const mp_arena_buf *dx = &b[3 * c + 1], *dy = &b[3 * *j + 1];
    return p->g->nodes[c].n_consumers == 1 && p->g->nodes[c].storage_dtype == p->g->nodes[*j].storage_dtype &&
           dx->size > 0 && dx->size == dy->size && dx->first == step && dy->last == step;
}

void mp_plan_inplace_buffers(mp_plan *p, mp_arena_buf *b) {
    for (int i = 0; i < p->n; i++) p->nodes[i].dx_over_dy = false;
    if (!p->o.training || !p->be->bn_dx_over_dy_safe || p->so || p->o.input_grad || mp_plan_backward_repeats(p) ||
        p->o.no_bn_dx_over_dy || mp_env_get()->no_bn_dx_over_dy)
        return;
    for (int i = 0; i < p->n; i++) {
        int j = i;
        if (!dx_over_dy_ok(p, i, b, &j)) continue;
        mp_arena_buf *dx = &b[3 * p->g->nodes[i].in[0] + 1], *dy = &b[3 * j + 1];
        dy->last = dx->last;
        dx->size = 0;
        p->nodes[i].dx_over_dy = true;
    }
}

void mp_plan_inplace_offsets(mp_plan *p) {
    for (int i = 0; i < p->n; i++)
        if (p->nodes[i].dx_over_dy) p->nodes[p->g->nodes[i].in[0]].grad_off = p->nodes[i].grad_off;
}
