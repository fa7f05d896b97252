/* cuda_kernel_util.cuh — what the op kernels under src/cuda share: launch
 * sizes, error lines naming the op, node, shapes and dtypes, an elementwise
 * kernel template over up to three inputs in any dtypes, and the layout
 * helpers (dtype-converting copy, batched transpose) of layout_cuda.cu.
 * Kernels run on ctx->stream, never synchronize and never allocate. */
#ifndef MP_CUDA_CUDA_KERNEL_UTIL_CUH
#define MP_CUDA_CUDA_KERNEL_UTIL_CUH

#include "cuda/cuda_dtype.cuh"
#include "cuda/cuda_op.h"

#define MP_CUDA_THREADS 256

/* ---- errors and sums (cuda_op_util.cu) ---------------------------------- */

/* MP_OK when e and cudaGetLastError() are both cudaSuccess, else one line:
 * "<kind> '<node>' <phase>: in (N, C, H, W) bf16, out ... f32: <cuda error>". */
mp_status mp_cuda_op_status(const mp_op_call *c, const char *phase, cudaError_t e);
/* Prepare-time check that every input (but the int32 labels where allowed)
 * and the output are f32, f16 or bf16. */
mp_status mp_cuda_op_check_dtypes(const mp_op_desc *d, const mp_op_info *info, const mp_cuda_node_cfg *cfg,
                                  int labels_input);
/* prepare() of ops that need no state, scratch or saved bytes (add, mul):
 * the dtype check alone. */
mp_status mp_cuda_prepare_stateless(mp_cuda_ctx *ctx, const mp_op_desc *d, const mp_op_info *info,
                                    const mp_cuda_node_cfg *cfg, void **state, size_t *workspace_bytes,
                                    size_t *saved_bytes);
/* out[0] (one element of out_dt) = sum(v[0..count)) / divisor, summed in
 * double in a fixed order by one block: the last step of the losses. */
cudaError_t mp_cuda_sum_to_scalar(mp_cuda_ctx *ctx, const double *v, long long count, double divisor, void *out,
                                  mp_dtype out_dt);
/* Raise a prepare() size output to at least `need`. */
static inline void mp_cuda_raise(size_t *bytes, size_t need) {
    if (bytes && *bytes < need) *bytes = need;
}

/* ---- layout helpers (layout_cuda.cu) ------------------------------------ */

/* dst[i] = src[i] for n elements, converting dtypes (a memcpy when equal). */
cudaError_t mp_cuda_copy_convert(mp_cuda_ctx *ctx, const void *src, mp_dtype src_dt, void *dst, mp_dtype dst_dt,
                                 long long n);
/* dst[b][s][r] = src[b][r][s] for b < batches, r < R, s < S, converting dtypes. */
cudaError_t mp_cuda_transpose(mp_cuda_ctx *ctx, const void *src, mp_dtype src_dt, void *dst, mp_dtype dst_dt,
                              long long batches, long long R, long long S);

/* ---- geometry ----------------------------------------------------------- */

/* Rows x channels view of an NHWC activation: 4-D (N, C, H, W) has N*H*W rows
 * of C; 2-D (N, F) has N rows of F. */
static inline long long mp_cuda_rows(const mp_shape *s) {
    return s->ndim == 4 ? (long long)s->dims[0] * s->dims[2] * s->dims[3] : (long long)s->dims[0];
}
static inline int mp_cuda_channels(const mp_shape *s) { return s->dims[1]; }

/* Blocks of MP_CUDA_THREADS for a grid-stride loop over n items (n >= 1). */
static inline unsigned mp_cuda_grid(const mp_cuda_ctx *ctx, long long n) {
    unsigned b = mp_cuda_blocks(ctx, n);
    return b ? b : 1;
}

/* ---- elementwise -------------------------------------------------------- */

/* out[i] = f(in0[i], ..., in{NIN-1}[i]) with every operand in its own dtype;
 * math in f32, one rounding on store. */
template <int NIN>
struct mp_ew_io {
    const void *in[NIN];
    mp_dtype in_dt[NIN];
    void *out;
    mp_dtype out_dt;
    long long n;
};

template <int NIN, class F>
__global__ void mp_ew_kernel(mp_ew_io<NIN> io, F f, bool vec) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long nvec = vec ? io.n / 8 : 0;
    for (long long v = tid; v < nvec; v += stride) {
        float x[NIN][8], y[8];
#pragma unroll
        for (int k = 0; k < NIN; k++) mp_ld8(io.in[k], io.in_dt[k], v * 8, x[k]);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float a[NIN];
#pragma unroll
            for (int k = 0; k < NIN; k++) a[k] = x[k][e];
            y[e] = f(a);
        }
        mp_st8(io.out, io.out_dt, v * 8, y);
    }
    for (long long i = nvec * 8 + tid; i < io.n; i += stride) {
        float a[NIN];
#pragma unroll
        for (int k = 0; k < NIN; k++) a[k] = mp_ld(io.in[k], io.in_dt[k], i);
        mp_st(io.out, io.out_dt, i, f(a));
    }
}

template <int NIN, class F>
static cudaError_t mp_ew_launch(mp_cuda_ctx *ctx, const mp_ew_io<NIN> &io, F f) {
    if (io.n <= 0) return cudaSuccess;
    bool vec = mp_cuda_aligned16(io.out);
    for (int k = 0; k < NIN; k++) vec = vec && mp_cuda_aligned16(io.in[k]);
    long long items = vec ? io.n / 8 + io.n % 8 : io.n;
    mp_ew_kernel<NIN, F><<<mp_cuda_grid(ctx, items), MP_CUDA_THREADS, 0, ctx->stream>>>(io, f, vec);
    return cudaGetLastError();
}

/* a + b in f32: the residual add and gradient accumulation. */
struct mp_sum2 {
    __device__ float operator()(const float (&a)[2]) const { return a[0] + a[1]; }
};

/* One-input form over whole tensors: out = f(in). */
template <class F>
static cudaError_t mp_ew1(mp_cuda_ctx *ctx, const mp_tensor *in, const mp_tensor *out, F f) {
    mp_ew_io<1> io = {{in->data}, {in->dtype}, out->data, out->dtype, mp_tensor_numel(out)};
    return mp_ew_launch(ctx, io, f);
}

/* Two-input form: out = f(a, b). */
template <class F>
static cudaError_t mp_ew2(mp_cuda_ctx *ctx, const mp_tensor *a, const mp_tensor *b, const mp_tensor *out, F f) {
    mp_ew_io<2> io = {{a->data, b->data}, {a->dtype, b->dtype}, out->data, out->dtype, mp_tensor_numel(out)};
    return mp_ew_launch(ctx, io, f);
}

/* ---- device helpers ------------------------------------------------------ */

/* The logistic sigmoid without overflow for either sign of v. */
__device__ __forceinline__ float mp_dev_sigmoid(float v) {
    if (v >= 0.f) return 1.f / (1.f + expf(-v));
    const float e = expf(v);
    return e / (1.f + e);
}

/* Every thread's acc summed in a fixed tree order through s (MP_CUDA_THREADS
 * doubles of shared memory); thread 0 stores the block's sum at *out. */
__device__ __forceinline__ void mp_dev_block_sum(double *s, double acc, double *out) {
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int k = MP_CUDA_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = s[0];
}

#endif
