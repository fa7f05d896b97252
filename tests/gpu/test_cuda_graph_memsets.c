/* test_cuda_graph_memsets.c — a CUDA graph's memset nodes made kernel nodes
 * (src/cuda/graph_memsets.h), on graphs built by hand: copies into a buffer,
 * then a chain of fills of every kind a memset node holds (1-, 2- and 4-byte
 * elements, 2-D fills whose pitch is not their row's length), then copies
 * out to two buffers. After the conversion no memset node is left, the node
 * and edge counts are those of the graph before, each fill's kernel node has
 * the memset's place (the copies in before the first, one fill after
 * another, both copies out after the last), and the buffers copied out hold,
 * byte for byte, what the host computes from the same operations in the same
 * order, on two replays of one instantiation. A fill with no node before it
 * and one with none after it (a graph's root and sink) convert too; a graph
 * without memsets is left as it was. Run by scripts/gpu-check. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda/cuda_ctx.h"
#include "cuda/graph_memsets.h"

enum { BYTES = 8192 };

#define CHECK_OK(call) CHECK((call) == MP_OK, "%s", mp_last_error())

static size_t count_nodes(cudaGraph_t g, enum cudaGraphNodeType want, int any) {
    size_t n = 0, k = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess) return (size_t)-1;
    cudaGraphNode_t *nodes = malloc((n ? n : 1) * sizeof *nodes);
    if (cudaGraphGetNodes(g, nodes, &n) != cudaSuccess) n = 0;
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        k += cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess && (any || t == want);
    }
    free(nodes);
    return k;
}

static size_t count_edges(cudaGraph_t g) {
    size_t n = 0;
#if CUDART_VERSION >= 13000
    return cudaGraphGetEdges(g, NULL, NULL, NULL, &n) == cudaSuccess ? n : (size_t)-1;
#else
    return cudaGraphGetEdges(g, NULL, NULL, &n) == cudaSuccess ? n : (size_t)-1;
#endif
}

/* A memset node after deps: elem-byte elements of value, width of them per
 * row, height rows pitch bytes apart, from dst. */
static cudaGraphNode_t add_fill(cudaGraph_t g, const cudaGraphNode_t *deps, size_t nd, void *dst, size_t pitch,
                                unsigned value, unsigned elem, size_t width, size_t height) {
    struct cudaMemsetParams p = {.dst = dst, .pitch = pitch, .value = value, .elementSize = elem, .width = width,
                          .height = height};
    cudaGraphNode_t n = NULL;
    CHECK(cudaGraphAddMemsetNode(&n, g, deps, nd, &p) == cudaSuccess, "cudaGraphAddMemsetNode");
    return n;
}

/* The same fill on the host's copy. */
static void host_fill(uint8_t *dst, size_t pitch, unsigned value, unsigned elem, size_t width, size_t height) {
    for (size_t r = 0; r < height; r++)
        for (size_t c = 0; c < width; c++)
            memcpy(dst + r * pitch + c * elem, &value, elem); /* little-endian: the low elem bytes */
}

/* The nodes before (dir 0) or after (dir 1) node: how many, and the first. */
static size_t neighbours(cudaGraphNode_t node, int dir, cudaGraphNode_t *first) {
    cudaGraphNode_t nodes[8];
    size_t n = 8;
#if CUDART_VERSION >= 13000
    cudaError_t e = dir ? cudaGraphNodeGetDependentNodes(node, nodes, NULL, &n)
                        : cudaGraphNodeGetDependencies(node, nodes, NULL, &n);
#else
    cudaError_t e = dir ? cudaGraphNodeGetDependentNodes(node, nodes, &n) : cudaGraphNodeGetDependencies(node, nodes, &n);
#endif
    if (e != cudaSuccess) return (size_t)-1;
    if (first) *first = n ? nodes[0] : NULL;
    return n;
}

static bool is_kernel(cudaGraphNode_t node) {
    enum cudaGraphNodeType t;
    return node && cudaGraphNodeGetType(node, &t) == cudaSuccess && t == cudaGraphNodeTypeKernel;
}

static cudaGraphNode_t add_copy(cudaGraph_t g, const cudaGraphNode_t *deps, size_t nd, void *dst, const void *src,
                                size_t bytes) {
    cudaGraphNode_t n = NULL;
    CHECK(cudaGraphAddMemcpyNode1D(&n, g, deps, nd, dst, src, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess,
          "cudaGraphAddMemcpyNode1D");
    return n;
}

int main(void) {
    mp_cuda_ctx *ctx = NULL;
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        fprintf(stderr, "test_cuda_graph_memsets: %s\n", mp_last_error());
        return 2;
    }
    uint8_t *src1, *src2, *buf, *out1, *out2;
    CHECK(cudaMalloc((void **)&src1, BYTES) == cudaSuccess && cudaMalloc((void **)&src2, BYTES) == cudaSuccess &&
              cudaMalloc((void **)&buf, BYTES) == cudaSuccess && cudaMalloc((void **)&out1, BYTES) == cudaSuccess &&
              cudaMalloc((void **)&out2, BYTES) == cudaSuccess,
          "cudaMalloc");
    static uint8_t h1[BYTES], h2[BYTES], want[BYTES], got[BYTES];
    for (int i = 0; i < BYTES; i++) h1[i] = (uint8_t)(i * 7 + 1), h2[i] = (uint8_t)(i * 13 + 5);
    cudaMemcpy(src1, h1, BYTES, cudaMemcpyHostToDevice);
    cudaMemcpy(src2, h2, BYTES, cudaMemcpyHostToDevice);

    /* two copies in (halves of buf), a chain of four fills, two copies out */
    cudaGraph_t g = NULL;
    CHECK(cudaGraphCreate(&g, 0) == cudaSuccess, "cudaGraphCreate");
    cudaGraphNode_t in[2] = {add_copy(g, NULL, 0, buf, src1, BYTES / 2),
                             add_copy(g, NULL, 0, buf + BYTES / 2, src2 + BYTES / 2, BYTES / 2)};
    cudaGraphNode_t f1 = add_fill(g, in, 2, buf + 100, 0, 0x5A, 1, 1001, 1);
    cudaGraphNode_t f2 = add_fill(g, &f1, 1, buf + 2048, 0, 0xBEEF, 2, 333, 1);
    cudaGraphNode_t f3 = add_fill(g, &f2, 1, buf + 4096, 0, 0xDEADBEEFu, 4, 257, 1);
    cudaGraphNode_t f4 = add_fill(g, &f3, 1, buf + 600, 512, 0x11, 1, 64, 5); /* 2-D, over f1's bytes */
    cudaGraphNode_t f5 = add_fill(g, &f4, 1, buf + 5000, 300, 0x01020304u, 4, 9, 6); /* 2-D, 36 of 300 bytes a row */
    cudaGraphNode_t out[2] = {add_copy(g, &f5, 1, out1, buf, BYTES), add_copy(g, &f5, 1, out2, buf, BYTES)};
    memcpy(want, h1, BYTES / 2);
    memcpy(want + BYTES / 2, h2 + BYTES / 2, BYTES / 2);
    host_fill(want + 100, 0, 0x5A, 1, 1001, 1);
    host_fill(want + 2048, 0, 0xBEEF, 2, 333, 1);
    host_fill(want + 4096, 0, 0xDEADBEEFu, 4, 257, 1);
    host_fill(want + 600, 512, 0x11, 1, 64, 5);
    host_fill(want + 5000, 300, 0x01020304u, 4, 9, 6);

    const size_t nodes = count_nodes(g, cudaGraphNodeTypeKernel, 1), edges = count_edges(g);
    CHECK(count_nodes(g, cudaGraphNodeTypeMemset, 0) == 5, "the graph has %zu memset nodes before, not 5",
          count_nodes(g, cudaGraphNodeTypeMemset, 0));
    int replaced = -1;
    CHECK_OK(mp_cuda_graph_memsets_to_kernels(g, &replaced));
    CHECK(replaced == 5, "%d memset nodes replaced, not 5", replaced);
    CHECK(count_nodes(g, cudaGraphNodeTypeMemset, 0) == 0, "%zu memset nodes left",
          count_nodes(g, cudaGraphNodeTypeMemset, 0));
    CHECK(count_nodes(g, cudaGraphNodeTypeKernel, 0) == 5, "%zu kernel nodes, not 5",
          count_nodes(g, cudaGraphNodeTypeKernel, 0));
    /* the chain's place: both copies in -> k1 -> ... -> k5 -> both copies out */
    cudaGraphNode_t k = NULL, k_other = NULL, next = NULL;
    CHECK(neighbours(in[0], 1, &k) == 1 && neighbours(in[1], 1, &k_other) == 1 && k == k_other && is_kernel(k) &&
              neighbours(k, 0, NULL) == 2,
          "the first fill's kernel node is not after both copies in, alone");
    for (int step = 1; step < 5 && k; step++) {
        CHECK(neighbours(k, 1, &next) == 1 && is_kernel(next) && neighbours(next, 0, NULL) == 1,
              "fill %d's kernel node is not followed by fill %d's alone", step, step + 1);
        k = next;
    }
    cudaGraphNode_t before_out[2] = {NULL, NULL};
    CHECK(neighbours(k, 1, NULL) == 2 && neighbours(out[0], 0, &before_out[0]) == 1 &&
              neighbours(out[1], 0, &before_out[1]) == 1 && before_out[0] == k && before_out[1] == k,
          "the copies out are not after the last fill's kernel node, alone");
    CHECK(count_nodes(g, cudaGraphNodeTypeKernel, 1) == nodes && count_edges(g) == edges, "nodes %zu -> %zu, edges %zu -> %zu", nodes,
          count_nodes(g, cudaGraphNodeTypeKernel, 1), edges, count_edges(g));
    cudaGraphExec_t exec = NULL;
    CHECK(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess, "cudaGraphInstantiate");
    for (int run = 0; run < 2; run++) { /* twice: a replay copies in and fills again */
        cudaMemsetAsync(out1, 0, BYTES, ctx->stream);
        cudaMemsetAsync(out2, 0, BYTES, ctx->stream);
        cudaMemsetAsync(buf, 0xEE, BYTES, ctx->stream);
        CHECK(cudaGraphLaunch(exec, ctx->stream) == cudaSuccess, "cudaGraphLaunch");
        CHECK(cudaStreamSynchronize(ctx->stream) == cudaSuccess, "run %d: %s", run,
              cudaGetErrorString(cudaGetLastError()));
        for (int k = 0; k < 2; k++) {
            cudaMemcpy(got, k ? out2 : out1, BYTES, cudaMemcpyDeviceToHost);
            int diff = 0;
            for (int i = 0; i < BYTES; i++) diff += got[i] != want[i];
            CHECK(diff == 0, "run %d: copy-out %d differs from the host in %d bytes", run, k + 1, diff);
        }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    /* a root fill (nothing before it) and a sink fill (nothing after it) */
    CHECK(cudaGraphCreate(&g, 0) == cudaSuccess, "cudaGraphCreate");
    cudaGraphNode_t root = add_fill(g, NULL, 0, buf, 0, 0x33, 1, BYTES, 1);
    cudaGraphNode_t mid = add_copy(g, &root, 1, out1, buf, BYTES);
    add_fill(g, &mid, 1, buf, 0, 0x44, 1, 16, 1);
    CHECK_OK(mp_cuda_graph_memsets_to_kernels(g, &replaced));
    CHECK(replaced == 2 && count_nodes(g, cudaGraphNodeTypeMemset, 0) == 0 && count_edges(g) == 2,
          "root and sink fills: %d replaced, %zu memsets left, %zu edges", replaced,
          count_nodes(g, cudaGraphNodeTypeMemset, 0), count_edges(g));
    CHECK(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess && cudaGraphLaunch(exec, ctx->stream) == cudaSuccess &&
              cudaStreamSynchronize(ctx->stream) == cudaSuccess,
          "root and sink fills: the graph did not run");
    cudaMemcpy(got, out1, BYTES, cudaMemcpyDeviceToHost);
    int off = 0;
    for (int i = 0; i < BYTES; i++) off += got[i] != 0x33;
    uint8_t head[16];
    cudaMemcpy(head, buf, sizeof head, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 16; i++) off += head[i] != 0x44;
    CHECK(off == 0, "root and sink fills: %d bytes wrong", off);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);

    /* no memsets: nothing changes */
    CHECK(cudaGraphCreate(&g, 0) == cudaSuccess, "cudaGraphCreate");
    cudaGraphNode_t c = add_copy(g, NULL, 0, buf, src1, BYTES);
    add_copy(g, &c, 1, out1, buf, BYTES);
    CHECK_OK(mp_cuda_graph_memsets_to_kernels(g, &replaced));
    CHECK(replaced == 0 && count_nodes(g, cudaGraphNodeTypeKernel, 1) == 2 && count_edges(g) == 1,
          "a graph without memsets: %d replaced, %zu nodes, %zu edges", replaced, count_nodes(g, cudaGraphNodeTypeKernel, 1), count_edges(g));
    cudaGraphDestroy(g);

    cudaFree(src1), cudaFree(src2), cudaFree(buf), cudaFree(out1), cudaFree(out2);
    mp_cuda_ctx_destroy(ctx);
    return test_summary("test_cuda_graph_memsets");
}
