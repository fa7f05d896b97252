/* plan_layout.h — which activations a CPU plan stores channels-last. oneDNN's
 * convolutions compute on NHWC tensors (AMX and AVX-512 kernels want
 * them), and an NCHW network paid a reorder into that layout and one out of
 * it around every convolution, each way. A 4-D activation is stored NHWC
 * when the op writing it and every op reading it can work on that layout, as
 * each op's vtable says (ops/op.h: layouts): convolutions with oneDNN
 * primitives and the input (set_input transposes the caller's NCHW batch)
 * take each tensor in its own layout; batch norm (+ fused ReLU), elementwise
 * activations, add and mul, 2x2 average pooling and global average pooling
 * on the vector kernels need all their 4-D tensors alike. Everything else,
 * and every tensor of one channel or one pixel (the same bytes either way),
 * stays NCHW. Host arrays in and out
 * (mp_plan_set_input, mp_plan_read) keep the graph's NCHW layout. */
#ifndef MP_GRAPH_PLAN_LAYOUT_H
#define MP_GRAPH_PLAN_LAYOUT_H

#include "graph/plan.h"

/* The shared buffers' sizes a node's prepare may raise (the plan's one
 * workspace, and its staging buffer: a node may change between running
 * natively and staged when prepared for other layouts). */
typedef struct {
    size_t ws, stage;
} mp_layout_sizes;

/* Node i's op prepared again for the layouts now in its info.nhwc (its
 * previous state released); the sizes raised to what it needs. */
typedef mp_status (*mp_layout_reprepare_fn)(mp_plan *p, int i, mp_layout_sizes *sz);

/* Decide the layouts of a host plan whose nodes are all prepared (NCHW),
 * set every node's info.nhwc and prepare again the nodes that changed.
 * Every activation stays NCHW for plans with second derivatives or an
 * input gradient, on the reference kernels, with opts.channels_first or
 * MIXPREC_CPU_CHANNELS_LAST=0; a convolution that finds no oneDNN kernel
 * for channels-last tensors keeps NCHW ones (and so do the tensors next to
 * it that must match); a node failing to prepare otherwise puts the whole
 * plan back to NCHW. */
mp_status mp_plan_choose_layout(mp_plan *p, mp_layout_sizes *sz, mp_layout_reprepare_fn reprepare);

/* (N, C, H, W) f32 host order <-> a channels-last tensor of dtype dt. */
mp_status mp_nchw_to_nhwc_store(void *dst, mp_dtype dt, const float *src, const mp_shape *s);
mp_status mp_nhwc_to_nchw_load(float *dst, const void *src, mp_dtype dt, const mp_shape *s);

#endif
