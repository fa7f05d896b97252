/* conv_onednn.h — the convolution geometry shared by conv2d and
 * conv_transpose2d (reference kernels and oneDNN path), and the oneDNN f32
 * fast path of both ops (conv_onednn.c, built only with oneDNN).
 *
 * The reference kernels see every convolution in its "conv view": x is the
 * input of a direct convolution and y its output, related by
 *     ix = iy * stride - pad + kk * dilation     (rows and columns alike)
 * with weights (cy, cx / groups, k, k). conv2d is x = input, y = output;
 * conv_transpose2d is the adjoint: x = its output, y = its input, which is
 * exactly PyTorch's weight layout (Cin, Cout / groups, k, k).
 * This header does not include dnnl.h, so every op file may include it;
 * prepare() and release() of both ops are here too. */
#ifndef MP_OPS_CONV_ONEDNN_H
#define MP_OPS_CONV_ONEDNN_H

#include "ops/onednn_dispatch.h"
#include "ops/op.h"
#include "ops/tangent.h"

typedef struct {
    int n, groups;
    int cx, hx, wx; /* conv-view input */
    int cy, hy, wy; /* conv-view output */
    int k, stride, pad, dil;
} mp_conv_geom;

/* The conv view of a node: conv2d (in -> out) or conv_transpose2d (out -> in).
 * Shapes must have passed infer. */
static inline mp_conv_geom mp_conv_geom_of(const mp_op_desc *d, const mp_shape *in,
                                           const mp_shape *out) {
    const mp_conv_opts *o = &d->attr.conv;
    const mp_shape *x = d->kind == MP_OP_CONV_TRANSPOSE2D ? out : in;
    const mp_shape *y = d->kind == MP_OP_CONV_TRANSPOSE2D ? in : out;
    mp_conv_geom g = {in->dims[0], o->groups,  x->dims[1], x->dims[2], x->dims[3], y->dims[1],
                      y->dims[2],  y->dims[3], o->kernel,  o->stride,  o->padding, o->dilation};
    return g;
}

/* Builds the oneDNN primitives of a conv2d / conv_transpose2d node for its
 * exact shapes (forward, and when training backward data + weights) in dt:
 * F32, or BF16 (bf16 activations and weights, f32 accumulation, bias and
 * weight gradients in f32: tensor-core style on CPUs with AVX-512 BF16 /
 * AMX; oneDNN has no bf16 kernels elsewhere and *state stays NULL; where
 * bf16 dot products are slower than f32 FMAs the primitives compute in f32
 * between bf16 tensors, bf16_conv_math.h),
 * raising info->workspace_bytes to what forward/backward need (scratchpads
 * and the blocked copies of the plain tensors). *state is NULL when oneDNN
 * has no implementation for this configuration, or (jit_only, MP_IMPL_AUTO)
 * when one of the passes would run a generic reference kernel of oneDNN:
 * the node then runs our reference kernels. Errors of failing oneDNN calls
 * are MP_ERR_INTERNAL. */
mp_status mp_conv_onednn_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, bool training,
                                 bool jit_only, void **state);
void mp_conv_onednn_release(void *state);
mp_status mp_conv_onednn_forward(void *state, const mp_op_call *c);
/* False when the state has no backward primitives (prepared for inference):
 * the caller runs the reference backward. */
bool mp_conv_onednn_has_backward(const void *state);
/* Whether its backward data runs as the transposed filter's forward (conv_dgrad_onednn.h). */
bool mp_conv_onednn_dgrad_is_forward(const void *state);
/* Whether that was chosen by timing it against the primitive (conv_dgrad_onednn.h). */
bool mp_conv_onednn_dgrad_timed(const void *state);
/* Whether its weight gradient runs as im2col + matmul (conv_wgrad_onednn.h). */
bool mp_conv_onednn_wgrad_is_gemm(const void *state);
/* Whether its (depthwise) weight gradient runs on our vector kernel (conv_dw_wgrad.h). */
bool mp_conv_onednn_wgrad_is_dw(const void *state);
mp_status mp_conv_onednn_backward(void *state, const mp_op_call *c);

/* prepare() of conv2d and conv_transpose2d: oneDNN primitives for f32 (or
 * bf16, see above) with
 * MP_IMPL_ONEDNN, and with MP_IMPL_AUTO where oneDNN has JIT kernels for the
 * shapes; the state stays NULL (reference kernels) otherwise, without
 * oneDNN, or when oneDNN cannot do the configuration. */
static inline mp_status mp_conv_prepare(const mp_op_desc *d, mp_op_info *info, mp_dtype dt, mp_impl impl,
                                        bool training, void **state) {
    *state = NULL;
#ifdef MP_HAVE_ONEDNN
    if (mp_onednn_wanted(dt, impl) || (impl != MP_IMPL_REF && dt == MP_DTYPE_BF16))
        return mp_conv_onednn_prepare(d, info, dt, training, impl == MP_IMPL_AUTO, state);
#else
    (void)d, (void)info, (void)dt, (void)impl, (void)training;
#endif
    return MP_OK;
}

/* The bilinear kernels of both ops' tangents (conv2d.c; reference, any conv
 * view). */
extern const mp_tangent_affine mp_conv2d_tangent_kernels, mp_conv_transpose2d_tangent_kernels;

/* layouts() of conv2d and conv_transpose2d: with oneDNN primitives each
 * tensor in its own layout (they bind NHWC ones, conv_onednn.c); the
 * reference kernels read NCHW. */
static inline mp_layout_support mp_conv_layouts(const mp_op_desc *d, const mp_op_info *info, const void *state) {
    (void)d, (void)info;
    return state ? MP_LAYOUT_EACH : MP_LAYOUT_NCHW_ONLY;
}

/* release() of conv2d and conv_transpose2d. */
static inline void mp_conv_release(void *state) {
#ifdef MP_HAVE_ONEDNN
    mp_conv_onednn_release(state);
#else
    (void)state;
#endif
}

#endif
