/* arena_plan.h — static memory planning: buffers with a size and a lifetime
 * [first, last] in schedule steps get offsets in one arena so that buffers
 * alive at the same time never overlap (greedy best-fit, largest first). */
#ifndef MP_GRAPH_ARENA_PLAN_H
#define MP_GRAPH_ARENA_PLAN_H

#include <stddef.h>

#include "mixprec.h"

/* What a buffer holds, for the peak's breakdown (mp_arena_peak). */
typedef enum {
    MP_MEM_ACTIVATIONS,   /* node outputs */
    MP_MEM_SAVED,         /* what a node keeps for its backward beyond its output */
    MP_MEM_ACT_GRADS,     /* gradients of node outputs */
    MP_MEM_PARAM_GRADS,   /* parameter gradients kept in the arena */
    MP_MEM_WORKSPACE,     /* library and op workspaces */
    MP_MEM_OTHER,         /* scratch, staging */
    MP_MEM_KINDS
} mp_mem_kind;

typedef struct {
    size_t size;      /* bytes; 0 = no buffer */
    int first;        /* first step it is alive */
    int last;         /* last step it is alive (inclusive) */
    mp_mem_kind kind; /* for reports only */
    size_t offset;    /* result */
} mp_arena_buf;

/* The step at which the most bytes are alive, and those bytes by kind. */
typedef struct {
    size_t bytes;     /* aligned as placed */
    int step;         /* -1: no buffer */
    size_t by_kind[MP_MEM_KINDS];
} mp_arena_peak;

/* Assign offsets (64-byte aligned); returns the arena size in *total. */
mp_status mp_arena_plan(mp_arena_buf *bufs, int n, size_t *total);
/* The most bytes (aligned as placed) alive at one step: no placement can
 * need less, so total / this is the planner's fragmentation. The first such
 * step when several tie. */
mp_arena_peak mp_arena_live_peak(const mp_arena_buf *bufs, int n);
/* "activations", "saved for backward", ... */
const char *mp_mem_kind_name(mp_mem_kind k);

#endif
