/* batchnorm2d_math.cuh — the per-element arithmetic batch norm's general
 * kernels (batchnorm2d_cuda.cu) and fast ones (batchnorm2d_fast.cu) share,
 * so that both compute the same values: Chan's merge of two partial
 * statistics and the normalization's affine step. CUDA only. */
#ifndef MP_CUDA_BATCHNORM2D_MATH_CUH
#define MP_CUDA_BATCHNORM2D_MATH_CUH

/* (na, ma, m2a) += (nb, mb, m2b): Chan et al.'s pairwise update of a
 * count, mean and sum of squared deviations. */
__device__ __forceinline__ void mp_bn_chan_merge(float &na, float &ma, float &m2a, float nb, float mb, float m2b) {
    if (nb == 0.f) return;
    float n = na + nb, d = mb - ma, w = nb / n;
    ma += d * w;
    m2a += m2b + d * d * na * w;
    na = n;
}

/* bn(x) = (x - mu) * scale + shift with one rounding of the product-sum:
 * the forward's value, which a backward recomputing a fused ReLU's mask
 * must get bit for bit. */
__device__ __forceinline__ float mp_bn_affine(float x, float mu, float scale, float shift) {
    return __fmaf_rn(x - mu, scale, shift);
}

#endif
