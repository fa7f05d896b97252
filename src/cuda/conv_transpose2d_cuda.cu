/* conv_transpose2d_cuda.cu — conv_transpose2d on the GPU with cuDNN, as the
 * adjoint of the direct convolution whose input is its output (weights
 * (Cin, Cout/groups, k, k) = the conv view's (cy, cx/groups, k, k)).
 * Passes: forward = BWD_DATA (+ bias); backward: d_in = FWD of d_out,
 * dW = BWD_FILTER(x = d_out, dy = in), db = column sums of d_out.
 * conv_cudnn.h explains layouts, dtypes and math types. */
#include "cuda/conv_cudnn.h"
#include "cuda/tangent_cuda.h"

static mp_status convt_cuda_prepare(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                    const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                    size_t *saved_bytes) {
    (void)saved_bytes;
    const bool need[MP_CONV_NPASS] = {cfg->training, true, cfg->training}; /* FWD, BWD_DATA, BWD_FILTER */
    mp_conv_cudnn *st = NULL;
    MP_TRY(mp_conv_cudnn_prepare(ctx, d, info, cfg, need, &st, workspace_bytes));
    if (cfg->tangents) {
        const size_t t = mp_conv_tangent_workspace(st, info);
        if (t > st->ws_total) st->ws_total = t;
        if (*workspace_bytes < t) *workspace_bytes = t;
    }
    *state = st;
    return MP_OK;
}

/* Tangents: conv_tangent_cuda.cu (the same passes on tangents). */
extern "C" const mp_cuda_op_vtable mp_cuda_conv_transpose2d_vt = {"conv_transpose2d",
                                                                  convt_cuda_prepare,
                                                                  mp_conv_cudnn_release,
                                                                  mp_conv_cudnn_forward,
                                                                  mp_conv_cudnn_backward,
                                                                  mp_cuda_conv_forward_tangent,
                                                                  mp_cuda_conv_backward_tangent, NULL};
