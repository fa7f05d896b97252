/* arena_plan.h — static memory planning: buffers with a size and a lifetime
 * [first, last] in schedule steps get offsets in one arena so that buffers
 * alive at the same time never overlap (greedy best-fit, largest first). */
#ifndef MP_GRAPH_ARENA_PLAN_H
#define MP_GRAPH_ARENA_PLAN_H

#include <stddef.h>

#include "mixprec.h"

typedef struct {
    size_t size;   /* bytes; 0 = no buffer */
    int first;     /* first step it is alive */
    int last;      /* last step it is alive (inclusive) */
    size_t offset; /* result */
} mp_arena_buf;

/* Assign offsets (64-byte aligned); returns the arena size in *total. */
mp_status mp_arena_plan(mp_arena_buf *bufs, int n, size_t *total);
/* The most bytes (aligned as placed) alive at one step: no placement can
 * need less, so total / this is the planner's fragmentation. */
size_t mp_arena_live_peak(const mp_arena_buf *bufs, int n);

#endif
