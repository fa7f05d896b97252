/* graph_memsets.h — a captured CUDA graph's memset nodes made kernel nodes.
 * cuDNN fills small counters and workspaces with cudaMemsetAsync before some
 * of its convolution and batch-norm kernels; captured into the training
 * step's graph they are memset nodes, and the timelines of bench/NOTES.md
 * (v0.59) show the step's longest idle gaps right after them (3-6 µs, where
 * a kernel follows a kernel in 1-2). Each becomes a kernel node writing the
 * same bytes, with the same dependencies; the graph is otherwise untouched.
 * MIXPREC_GRAPH_MEMSET_KERNELS=0 keeps the memset nodes. */
#ifndef MP_CUDA_GRAPH_MEMSETS_H
#define MP_CUDA_GRAPH_MEMSETS_H

#include <cuda_runtime_api.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Replaces every memset node of graph (not yet instantiated) by a kernel
 * node doing the same fill after the same nodes and before the same nodes;
 * *replaced (may be NULL): how many. An error names the CUDA call; the graph
 * is then part-way converted and still valid and equivalent (a replacement
 * that fails is undone), so a caller can instantiate it as it is. */
mp_status mp_cuda_graph_memsets_to_kernels(cudaGraph_t graph, int *replaced);

#ifdef __cplusplus
}
#endif

#endif
