/* fast_div.cuh — n / d for n < 2^31 by a multiply-high, an add and a shift
 * (Granlund and Montgomery's division by an invariant integer; m and s from
 * the host: fast_div_of). For index arithmetic in kernels where a divide
 * instruction per row or pixel would cost more than the row's own work:
 * batch norm's pooled rows, the stem convolutions' pixels. CUDA only. */
#ifndef MP_CUDA_FAST_DIV_CUH
#define MP_CUDA_FAST_DIV_CUH

struct fast_div {
    unsigned d, m, s;
};

static inline fast_div fast_div_of(unsigned d) {
    unsigned s = 0;
    while ((1ull << s) < d) s++;
    const unsigned m = (unsigned)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
    return fast_div{d, m, s};
}

__device__ __forceinline__ unsigned div_by(unsigned n, const fast_div &f) { return (__umulhi(n, f.m) + n) >> f.s; }

#endif
