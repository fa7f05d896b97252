/* arena_plan.c — greedy offset assignment for buffers with lifetimes. */
#include "graph/arena_plan.h"

#include <stdlib.h>

#include "core/error.h"

#define ALIGN 64

static size_t align_up(size_t x) { return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

static const mp_arena_buf *sort_base;
static int by_size_desc(const void *a, const void *b) {
    const mp_arena_buf *x = &sort_base[*(const int *)a], *y = &sort_base[*(const int *)b];
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return *(const int *)a - *(const int *)b;
}

static int by_offset(const void *a, const void *b) {
    const mp_arena_buf *x = *(const mp_arena_buf *const *)a, *y = *(const mp_arena_buf *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

mp_arena_peak mp_arena_live_peak(const mp_arena_buf *bufs, int n) {
    int last = -1;
    for (int i = 0; i < n; i++)
        if (bufs[i].size && bufs[i].last > last) last = bufs[i].last;
    mp_arena_peak peak = {.step = -1};
    for (int t = 0; t <= last; t++) {
        size_t live = 0;
        for (int i = 0; i < n; i++)
            if (bufs[i].size && bufs[i].first <= t && t <= bufs[i].last) live += align_up(bufs[i].size);
        if (live <= peak.bytes && peak.step >= 0) continue;
        peak = (mp_arena_peak){.bytes = live, .step = t};
        for (int i = 0; i < n; i++)
            if (bufs[i].size && bufs[i].first <= t && t <= bufs[i].last)
                peak.by_kind[bufs[i].kind] += align_up(bufs[i].size);
    }
    return peak;
}

const char *mp_mem_kind_name(mp_mem_kind k) {
    static const char *const names[MP_MEM_KINDS] = {"activations", "saved for backward", "activation gradients",
                                                    "parameter gradients", "workspaces", "scratch and staging"};
    return k >= 0 && k < MP_MEM_KINDS ? names[k] : "?";
}

mp_status mp_arena_plan(mp_arena_buf *bufs, int n, size_t *total) {
    int *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    const mp_arena_buf **live = malloc((size_t)(n ? n : 1) * sizeof *live);
    if (!order || !live) {
        free(order);
        free(live);
        return mp_error(MP_ERR_NOMEM, "memory planner: out of memory for %d buffers", n);
    }
    for (int i = 0; i < n; i++) order[i] = i;
    sort_base = bufs;
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    size_t end = 0;
    for (int k = 0; k < n; k++) {
        mp_arena_buf *b = &bufs[order[k]];
        b->offset = 0;
        if (b->size == 0) continue;
        size_t size = align_up(b->size);
        /* already placed buffers whose lifetime overlaps b's, by offset */
        int m = 0;
        for (int j = 0; j < k; j++) {
            const mp_arena_buf *o = &bufs[order[j]];
            if (o->size && o->first <= b->last && b->first <= o->last) live[m++] = o;
        }
        qsort(live, (size_t)m, sizeof *live, by_offset);
        /* best fit: the smallest gap that holds b, else after the last one */
        size_t cursor = 0, best = (size_t)-1, best_gap = (size_t)-1;
        for (int j = 0; j < m; j++) {
            if (live[j]->offset >= cursor + size && live[j]->offset - cursor < best_gap) {
                best = cursor;
                best_gap = live[j]->offset - cursor;
            }
            size_t e = live[j]->offset + align_up(live[j]->size);
            if (e > cursor) cursor = e;
        }
        b->offset = best != (size_t)-1 ? best : cursor;
        if (b->offset + size > end) end = b->offset + size;
    }
    free(order);
    free(live);
    *total = end;
    return MP_OK;
}
