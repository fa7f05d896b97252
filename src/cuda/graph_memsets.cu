/* graph_memsets.cu — a captured graph's memset nodes as kernel nodes
 * (graph_memsets.h): the fill kernel, and the node surgery through the CUDA
 * graph API (the edge-data forms of CUDA 13, the plain ones before). */
#include <stdlib.h>

#include "cuda/cuda_ctx.h"
#include "cuda/graph_memsets.h"

static const size_t FILL_THREADS = 256, FILL_MAX_BLOCKS = 1024;

/* cudaMemset2D's fill: height rows of width elements of elem bytes (1, 2 or
 * 4), rows pitch bytes apart, each element value's low elem bytes. */
static __global__ void __launch_bounds__(FILL_THREADS)
    graph_fill_kernel(char *dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height) {
    const size_t n = width * height;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        char *p = height == 1 ? dst + i * elem : dst + (i / width) * pitch + (i % width) * elem;
        if (elem == 4) *(unsigned *)p = value;
        else if (elem == 2) *(unsigned short *)p = (unsigned short)value;
        else *p = (char)value;
    }
}

static cudaError_t node_inputs(cudaGraphNode_t node, cudaGraphNode_t *nodes, size_t *n) {
#if CUDART_VERSION >= 13000
    return cudaGraphNodeGetDependencies(node, nodes, NULL, n);
#else
    return cudaGraphNodeGetDependencies(node, nodes, n);
#endif
}

static cudaError_t node_outputs(cudaGraphNode_t node, cudaGraphNode_t *nodes, size_t *n) {
#if CUDART_VERSION >= 13000
    return cudaGraphNodeGetDependentNodes(node, nodes, NULL, n);
#else
    return cudaGraphNodeGetDependentNodes(node, nodes, n);
#endif
}

static cudaError_t add_edge(cudaGraph_t graph, cudaGraphNode_t from, cudaGraphNode_t to) {
#if CUDART_VERSION >= 13000
    return cudaGraphAddDependencies(graph, &from, &to, NULL, 1);
#else
    return cudaGraphAddDependencies(graph, &from, &to, 1);
#endif
}

/* The nodes before (dir 0) or after (dir 1) node, in a malloc'd array. */
static cudaError_t neighbours(cudaGraphNode_t node, int dir, cudaGraphNode_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    cudaError_t e = dir ? node_outputs(node, NULL, n) : node_inputs(node, NULL, n);
    if (e != cudaSuccess || *n == 0) return e;
    *out = (cudaGraphNode_t *)malloc(*n * sizeof **out);
    if (!*out) return cudaErrorMemoryAllocation;
    return dir ? node_outputs(node, *out, n) : node_inputs(node, *out, n);
}

/* One memset node replaced: the kernel node is added after node's inputs and
 * before its outputs, then node goes (with its edges). */
static cudaError_t replace(cudaGraph_t graph, cudaGraphNode_t node) {
    cudaMemsetParams p;
    cudaError_t e = cudaGraphMemsetNodeGetParams(node, &p);
    if (e != cudaSuccess) return e;
    if (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4) return cudaErrorInvalidValue;
    const size_t height = p.height ? p.height : 1, n = p.width * height;
    char *dst = (char *)p.dst;
    size_t pitch = p.pitch;
    unsigned value = p.value, elem = p.elementSize;
    size_t width = p.width;
    void *args[] = {&dst, &pitch, &value, &elem, &width, (void *)&height};
    const size_t blocks = (n + FILL_THREADS - 1) / FILL_THREADS;
    cudaKernelNodeParams k = {};
    k.func = (void *)graph_fill_kernel;
    k.gridDim = dim3((unsigned)(blocks < 1 ? 1 : blocks > FILL_MAX_BLOCKS ? FILL_MAX_BLOCKS : blocks));
    k.blockDim = dim3((unsigned)FILL_THREADS);
    k.kernelParams = args;

    cudaGraphNode_t *in = NULL, *out = NULL, fill = NULL;
    size_t n_in = 0, n_out = 0;
    e = neighbours(node, 0, &in, &n_in);
    if (e == cudaSuccess) e = neighbours(node, 1, &out, &n_out);
    if (e == cudaSuccess) e = cudaGraphAddKernelNode(&fill, graph, in, n_in, &k);
    for (size_t i = 0; e == cudaSuccess && i < n_out; i++) e = add_edge(graph, fill, out[i]);
    if (e == cudaSuccess) e = cudaGraphDestroyNode(node);
    if (e != cudaSuccess && fill) cudaGraphDestroyNode(fill); /* the memset node stays, the graph as it was */
    free(in);
    free(out);
    return e;
}

mp_status mp_cuda_graph_memsets_to_kernels(cudaGraph_t graph, int *replaced) {
    if (replaced) *replaced = 0;
    size_t n = 0;
    MP_CUDA_TRY(cudaGraphGetNodes(graph, NULL, &n), "memset nodes of a captured graph");
    if (n == 0) return MP_OK;
    cudaGraphNode_t *nodes = (cudaGraphNode_t *)malloc(n * sizeof *nodes);
    if (!nodes) return mp_error(MP_ERR_NOMEM, "memset nodes of a captured graph: out of host memory (%zu nodes)", n);
    cudaError_t e = cudaGraphGetNodes(graph, nodes, &n);
    int done = 0;
    for (size_t i = 0; e == cudaSuccess && i < n; i++) {
        cudaGraphNodeType type;
        e = cudaGraphNodeGetType(nodes[i], &type);
        if (e != cudaSuccess || type != cudaGraphNodeTypeMemset) continue;
        e = replace(graph, nodes[i]);
        done += e == cudaSuccess;
    }
    free(nodes);
    if (replaced) *replaced = done;
    return mp_cuda_check(e, "cudaGraph node calls", "memset nodes of a captured graph as kernel nodes");
}
