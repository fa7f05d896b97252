/* plan_grad_alias.c — see plan_grad_alias.h. */
#include "graph/plan_grad_alias.h"

#include <stdlib.h>

#include "graph/exec_backend.h"

/* The plan step at which node c's backward runs (a fused-away node's runs in the node it is fused into). */
static int backward_step(const mp_plan *p, int c) {
    return 2 * p->n - 1 - (p->nodes[c].fused_away ? p->nodes[c].fused_into : c);
}

/* Whether node src's output gradient may be the memory of add i's output gradient on its own (the first
 * part of plan_grad_alias.h's rule); b: the gradient buffers as the passes before left them. */
static bool input_may_share(const mp_plan *p, int i, int src, const mp_arena_buf *b) {
    const mp_pnode *ps = &p->nodes[src];
    const mp_arena_buf *dx = &b[3 * src + 1], *dy = &b[3 * i + 1];
    return ps->in_backward && !ps->fused_away && !ps->relu_fused && !ps->add_fused && !ps->dw_fused &&
           !ps->pool_fused && !ps->dx_over_dy && p->g->nodes[src].storage_dtype == p->g->nodes[i].storage_dtype &&
           dx->size > 0 && dx->size == dy->size && dx->first == 2 * p->n - 1 - i;
}

typedef struct {
    int *group;             /* per node: its group, the node whose output gradient buffer holds its own (itself if none) */
    int *first, *last;      /* per node: its output gradient's lifetime before any sharing */
    unsigned char *through; /* per node: 1 where an add hands it its gradient (not a write of its own) */
    int *cons_at, *cons;    /* node t's consumers: cons[cons_at[t] .. cons_at[t + 1]) */
    int *members;           /* scratch: the nodes of the two groups being merged */
} sharing;

/* Whether a write into t's gradient other than its add's hand-over happens while one of others[0..n) is alive. */
static bool writes_while_alive(const mp_plan *p, const sharing *s, int t, const int *others, int n) {
    for (int j = s->cons_at[t]; j < s->cons_at[t + 1]; j++) { /* t's consumers write its gradient */
        const int c = s->cons[j];
        if (!p->nodes[c].in_backward) continue;
        const int w = backward_step(p, c);
        if (s->through[t] && w == s->first[t]) continue; /* the add handing it over */
        for (int e = 0; e < n; e++)
            if (w >= s->first[others[e]] && w <= s->last[others[e]]) return true;
    }
    return false;
}

/* Whether the groups ra and rb (gradients sharing one memory each; group[] holds each node's group) keep each
 * other's values once merged: no gradient of one is written, other than handed over by an add, while a gradient of
 * the other is alive. Within each group that holds already (it was checked as the group grew, and a hand-over only
 * removes a write). */
static bool merge_keeps_values(const mp_plan *p, const sharing *s, int ra, int rb) {
    int na = 0, nb = 0;
    for (int t = 0; t < p->n; t++) /* ra's members from the front, rb's from the back */
        if (s->group[t] == ra) s->members[na++] = t;
        else if (s->group[t] == rb) s->members[p->n - 1 - nb++] = t;
    const int *a = s->members, *b = s->members + p->n - nb;
    for (int k = 0; k < na; k++)
        if (writes_while_alive(p, s, a[k], b, nb)) return false;
    for (int k = 0; k < nb; k++)
        if (writes_while_alive(p, s, b[k], a, na)) return false;
    return true;
}

/* Each node's consumers (one reading it twice listed twice). */
static bool list_consumers(const mp_plan *p, sharing *s) {
    const int n = p->n;
    if (n <= 0) return false;
    int total = 0;
    for (int c = 0; c < n; c++) total += p->g->nodes[c].n_in;
    s->cons_at = calloc((size_t)n + 1, sizeof(int));
    s->cons = calloc((size_t)total + 1, sizeof(int));
    if (!s->cons_at || !s->cons) return false;
    for (int c = 0; c < n; c++)
        for (int k = 0; k < p->g->nodes[c].n_in; k++) s->cons_at[p->g->nodes[c].in[k] + 1]++;
    for (int t = 0; t < n; t++) s->cons_at[t + 1] += s->cons_at[t];
    int *fill = calloc((size_t)n, sizeof(int));
    if (!fill) return false;
    for (int c = 0; c < n; c++)
        for (int k = 0; k < p->g->nodes[c].n_in; k++) {
            const int t = p->g->nodes[c].in[k];
            s->cons[s->cons_at[t] + fill[t]++] = c;
        }
    free(fill);
    return true;
}

/* Share input k's gradient with add i's output gradient: the buffer, the group and the mark. */
static void share(mp_plan *p, sharing *s, mp_arena_buf *b, int i, int k) {
    const int src = p->g->nodes[i].in[k];
    mp_arena_buf *dy = &b[3 * i + 1], *dx = &b[3 * src + 1];
    if (dx->first < dy->first) dy->first = dx->first;
    if (dx->last > dy->last) dy->last = dx->last;
    dx->size = 0;
    const int from = s->group[src], to = s->group[i];
    for (int t = 0; t < p->n; t++)
        if (s->group[t] == from) s->group[t] = to;
    s->through[src] = 1;
    p->nodes[i].grad_alias |= (unsigned char)(1u << k);
}

void mp_plan_grad_alias_buffers(mp_plan *p, mp_arena_buf *b) {
    const int n = p->n;
    for (int i = 0; i < n; i++) p->nodes[i].grad_alias = 0;
    if (!p->o.training || !p->be->add_grads_alias_safe || p->so || p->o.input_grad || mp_plan_backward_repeats(p) ||
        p->o.no_add_grad_alias || mp_env_get()->no_add_grad_alias)
        return;
    sharing s = {.group = calloc((size_t)n, sizeof(int)),
                 .first = calloc((size_t)n, sizeof(int)),
                 .last = calloc((size_t)n, sizeof(int)),
                 .through = calloc((size_t)n, 1),
                 .members = calloc((size_t)n, sizeof(int))};
    if (!s.group || !s.first || !s.last || !s.through || !s.members || !list_consumers(p, &s))
        goto done; /* out of host memory: no sharing, the plan as it was */
    for (int k = 0; k < n; k++) s.group[k] = k, s.first[k] = b[3 * k + 1].first, s.last[k] = b[3 * k + 1].last;
    for (int i = 0; i < n; i++) { /* forward order: an add's output gradient has its own inputs' merged in */
        const mp_gnode *nd = &p->g->nodes[i];
        const mp_pnode *pn = &p->nodes[i];
        const int step = 2 * n - 1 - i;
        if (nd->desc.kind != MP_OP_ADD || nd->n_in != 2 || nd->in[0] == nd->in[1] || !pn->in_backward ||
            pn->fused_away || b[3 * i + 1].size == 0 || b[3 * i + 1].last != step || !p->be->add_grads_alias_safe(p, i))
            continue;
        for (int k = 0; k < 2; k++) {
            const int src = nd->in[k];
            if (!input_may_share(p, i, src, b)) continue;
            const int ri = s.group[i], rs = s.group[src];
            s.through[src] = 1; /* as it would be once shared: the add's step is no write of src's */
            const bool ok = ri != rs && merge_keeps_values(p, &s, ri, rs);
            s.through[src] = 0;
            if (ok) share(p, &s, b, i, k);
        }
    }
done:
    free(s.cons_at);
    free(s.cons);
    free(s.members);
    free(s.group);
    free(s.first);
    free(s.last);
    free(s.through);
}

void mp_plan_grad_alias_offsets(mp_plan *p) {
    for (int i = p->n - 1; i >= 0; i--) /* a later add first: an add that is itself a shared input has its offset */
        for (int k = 0; k < 2 && p->nodes[i].grad_alias; k++)
            if (p->nodes[i].grad_alias & (1u << k)) p->nodes[p->g->nodes[i].in[k]].grad_off = p->nodes[i].grad_off;
}
