/* conv_wgrad_shift_gemm_timing.cu — a 3x3 stride-1 pad-1 convolution's
 * weight gradient on the GPU two ways, bf16 NHWC, f32 sums, bf16 KRSC dW:
 * cuDNN's (the legacy API's fastest algorithm, found by cuDNN's own timing)
 * and nine plain GEMMs over zero-padded copies of x and dy.
 *
 * On the padded (H+2) x (W+2) grid, with dy's rows beyond (H, W) zero,
 * dW[k, r, s, c] = sum over the grid's rows i of dy_pad[i, k] x_pad[i + r (W+2)
 * + s, c]: for each tap a GEMM whose x operand is the same matrix shifted by a
 * fixed number of rows, so cuBLASLt's split-K GEMMs can run it (three calls,
 * the three taps of a filter row as one strided batch). The question before
 * building it into the library: wrn-28-10's 160-channel 32x32 layers spend
 * 0.218 ms in cuDNN's backward-filter against 0.122 ms forward (bench/NOTES.md
 * v0.57); does this beat cuDNN there, pads included?
 *
 *   nvcc -O2 -arch=sm_90 dev/conv_wgrad_shift_gemm_timing.cu -lcublasLt -lcudnn -o /tmp/wgrad
 *   /tmp/wgrad            (wrn-28-10 b128 and resnet18 b512 stride-1 shapes)
 * Prints per shape: cuDNN's time, the pads', the GEMMs' (best of cuBLASLt's
 * heuristic candidates), their sum, and the largest |difference| between the
 * two dW relative to the largest |dW|. Measured on an H100 (NOTES v0.57):
 * 1.9-6.5x cuDNN's time, so the library keeps cuDNN's backward-filter. */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"
#define CKLT(x) \
    do { cublasStatus_t e_ = (x); fail_if(e_ != CUBLAS_STATUS_SUCCESS, __FILE__, __LINE__, #x, cublasLtGetStatusString(e_)); } while (0)

struct Shape {
    const char *name;
    int n, c, k, h;
};

/* dst (n, h+2, w+2, c) [+ guard rows of zeros] from src (n, h, w, c); at
 * (pad_before = 1) the data sits one row and column in, else (0) at the top
 * left with the last two rows and columns zero. */
__global__ void pad_kernel(const uint4 *src, uint4 *dst, int n, int h, int w, int c8, int pad_before, long long rows_out) {
    const int hp = h + 2, wp = w + 2;
    const long long total = rows_out * c8;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total; t += (long long)gridDim.x * blockDim.x) {
        const long long row = t / c8;
        const int v = (int)(t % c8);
        uint4 val = make_uint4(0, 0, 0, 0);
        if (row < (long long)n * hp * wp) {
            const int q = (int)(row % wp), p = (int)(row / wp % hp), img = (int)(row / wp / hp);
            const int sh = p - pad_before, sw = q - pad_before;
            if (sh >= 0 && sh < h && sw >= 0 && sw < w) val = src[(((long long)img * h + sh) * w + sw) * c8 + v];
        }
        dst[t] = val;
    }
}

__global__ void diff_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, long long n, float *out) {
    float d = 0, m = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
        d = fmaxf(d, fabsf(x - y)), m = fmaxf(m, fabsf(y));
    }
    atomicMax((int *)&out[0], __float_as_int(d));
    atomicMax((int *)&out[1], __float_as_int(m));
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

template <class F> static float time_ms(F f, int reps = 9) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    f();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a));
        for (int j = 0; j < 4; j++) f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms / 4);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(t);
}

int main() {
    const Shape shapes[] = {{"wrn-28-10 b128 layer1 160", 128, 160, 160, 32}, {"wrn-28-10 b128 layer2 320", 128, 320, 320, 16},
                            {"wrn-28-10 b128 layer3 640", 128, 640, 640, 8},  {"resnet18 b512 layer1 64", 512, 64, 64, 32},
                            {"resnet18 b512 layer2 128", 512, 128, 128, 16}, {"resnet18 b512 layer3 256", 512, 256, 256, 8},
                            {"resnet18 b512 layer4 512", 512, 512, 512, 4}};
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("conv_wgrad_shift_gemm_timing on %s, cuDNN %zu, cuBLASLt %zu; bf16 NHWC, f32 sums, bf16 dW; ms, median of 9 "
           "trials of 4 runs\n\n",
           prop.name, cudnnGetVersion(), cublasLtGetVersion());
    printf("| shape | GFLOP | cuDNN backward-filter (algo) | pads | 9 GEMMs: 3 batched / 9 single | pads + best GEMMs | vs "
           "cuDNN | max |diff| / max |dW| |\n|---|---|---|---|---|---|---|---|\n");
    cudnnHandle_t dnn;
    CKDNN(cudnnCreate(&dnn));
    cublasLtHandle_t lt;
    CKLT(cublasLtCreate(&lt));
    const size_t ws_bytes = (size_t)256 << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    float *dev_diff;
    CK(cudaMalloc(&dev_diff, 2 * sizeof(float)));
    for (const Shape &s : shapes) {
        const int hp = s.h + 2, wp = s.h + 2;
        const long long rows = (long long)s.n * s.h * s.h, rows_p = (long long)s.n * hp * wp, guard = 2LL * wp + 2;
        __nv_bfloat16 *x, *dy, *xp, *dyp, *dw_dnn, *dw_gemm;
        CK(cudaMalloc(&x, rows * s.c * 2));
        CK(cudaMalloc(&dy, rows * s.k * 2));
        CK(cudaMalloc(&xp, (rows_p + guard) * s.c * 2));
        CK(cudaMalloc(&dyp, rows_p * s.k * 2));
        CK(cudaMalloc(&dw_dnn, (size_t)s.k * 9 * s.c * 2));
        CK(cudaMalloc(&dw_gemm, (size_t)s.k * 9 * s.c * 2));
        fill_kernel<<<1024, 256>>>(x, rows * s.c, 17u, 1.0f);
        fill_kernel<<<1024, 256>>>(dy, rows * s.k, 91u, 0.01f);
        CK(cudaGetLastError());

        /* cuDNN: NHWC x, dy; KRSC (NHWC-format filter) dW */
        cudnnTensorDescriptor_t xd, yd;
        cudnnFilterDescriptor_t wd;
        cudnnConvolutionDescriptor_t cd;
        CKDNN(cudnnCreateTensorDescriptor(&xd));
        CKDNN(cudnnCreateTensorDescriptor(&yd));
        CKDNN(cudnnCreateFilterDescriptor(&wd));
        CKDNN(cudnnCreateConvolutionDescriptor(&cd));
        CKDNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, s.n, s.c, s.h, s.h));
        CKDNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, s.n, s.k, s.h, s.h));
        CKDNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, s.k, s.c, 3, 3));
        CKDNN(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CKDNN(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
        cudnnConvolutionBwdFilterAlgoPerf_t perf[8];
        int found = 0;
        CKDNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(dnn, xd, x, yd, dy, cd, wd, dw_dnn, 8, &found, perf, ws,
                                                             ws_bytes));
        int pick = -1;
        for (int i = 0; i < found && pick < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= ws_bytes) pick = i;
        if (pick < 0) {
            printf("| %s | cuDNN found no algorithm |\n", s.name);
            continue;
        }
        const float one = 1, zero = 0;
        const cudnnConvolutionBwdFilterAlgo_t algo = perf[pick].algo;
        const float t_dnn = time_ms([&] {
            CKDNN(cudnnConvolutionBackwardFilter(dnn, &one, xd, x, yd, dy, cd, algo, ws, ws_bytes, &zero, wd, dw_dnn));
        });

        /* the pads */
        const int c8 = s.c / 8, k8 = s.k / 8;
        const float t_pad = time_ms([&] {
            pad_kernel<<<4 * prop.multiProcessorCount, 256>>>((const uint4 *)x, (uint4 *)xp, s.n, s.h, s.h, c8, 1,
                                                              rows_p + guard);
            pad_kernel<<<4 * prop.multiProcessorCount, 256>>>((const uint4 *)dy, (uint4 *)dyp, s.n, s.h, s.h, k8, 0,
                                                              rows_p);
        });

        /* column-major: D_rs (C x K, ld 9C, at (3r + s) C) = A_rs (C x I, ld C, x_pad shifted r wp + s rows)
         * x dy_pad^T (dy_pad: K x I, ld K, transposed) */
        auto plan_for = [&](int batch, cublasLtMatmulDesc_t *op, cublasLtMatrixLayout_t *la, cublasLtMatrixLayout_t *lb,
                            cublasLtMatrixLayout_t *ld) {
            CKLT(cublasLtMatmulDescCreate(op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            const cublasOperation_t tn = CUBLAS_OP_N, tt = CUBLAS_OP_T;
            CKLT(cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &tn, sizeof tn));
            CKLT(cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &tt, sizeof tt));
            CKLT(cublasLtMatrixLayoutCreate(la, CUDA_R_16BF, s.c, rows_p, s.c));
            CKLT(cublasLtMatrixLayoutCreate(lb, CUDA_R_16BF, s.k, rows_p, s.k));
            CKLT(cublasLtMatrixLayoutCreate(ld, CUDA_R_16BF, s.c, s.k, 9LL * s.c));
            if (batch > 1) {
                const int64_t sa = s.c, sb = 0, sd = s.c;
                for (cublasLtMatrixLayout_t l : {*la, *lb, *ld})
                    CKLT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
                CKLT(cublasLtMatrixLayoutSetAttribute(*la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof sa));
                CKLT(cublasLtMatrixLayoutSetAttribute(*lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof sb));
                CKLT(cublasLtMatrixLayoutSetAttribute(*ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sd, sizeof sd));
            }
        };
        float t_gemm[2] = {-1, -1};
        for (int form = 0; form < 2; form++) {
            const int batch = form == 0 ? 3 : 1, calls = form == 0 ? 3 : 9;
            cublasLtMatmulDesc_t op;
            cublasLtMatrixLayout_t la, lb, ld;
            plan_for(batch, &op, &la, &lb, &ld);
            cublasLtMatmulPreference_t pref;
            CKLT(cublasLtMatmulPreferenceCreate(&pref));
            CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                      sizeof ws_bytes));
            /* split-K sums in f32 (as cuDNN's), never in the bf16 output */
            const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            CKLT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                      sizeof schemes));
            cublasLtMatmulHeuristicResult_t r[16];
            int nr = 0;
            if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, r, &nr) != CUBLAS_STATUS_SUCCESS) nr = 0;
            for (int j = 0; j < nr; j++) {
                bool ok = true;
                auto run = [&] {
                    for (int call = 0; call < calls && ok; call++) {
                        const int rr = batch == 3 ? call : call / 3, ss = batch == 3 ? 0 : call % 3;
                        const __nv_bfloat16 *a = xp + ((long long)rr * wp + ss) * s.c;
                        __nv_bfloat16 *d = dw_gemm + (3LL * rr + ss) * s.c;
                        ok = cublasLtMatmul(lt, op, &one, a, la, dyp, lb, &zero, d, ld, d, ld, &r[j].algo, ws,
                                            r[j].workspaceSize, 0) == CUBLAS_STATUS_SUCCESS;
                    }
                };
                run();
                if (!ok) continue;
                const float t = time_ms(run);
                if (ok && (t_gemm[form] < 0 || t < t_gemm[form])) t_gemm[form] = t;
            }
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
            cublasLtMatmulDescDestroy(op);
        }
        /* the check: dw_gemm as the last candidate that ran wrote it (all compute the same sums), on the pads */
        CK(cudaDeviceSynchronize());
        CKDNN(cudnnConvolutionBackwardFilter(dnn, &one, xd, x, yd, dy, cd, algo, ws, ws_bytes, &zero, wd, dw_dnn));
        CK(cudaMemset(dev_diff, 0, 2 * sizeof(float)));
        diff_kernel<<<256, 256>>>(dw_gemm, dw_dnn, (long long)s.k * 9 * s.c, dev_diff);
        float hd[2];
        CK(cudaMemcpy(hd, dev_diff, sizeof hd, cudaMemcpyDeviceToHost));
        const double gflop = 2.0 * rows * s.k * s.c * 9 / 1e9;
        const float best = t_gemm[0] < 0 ? t_gemm[1] : t_gemm[1] < 0 ? t_gemm[0] : std::min(t_gemm[0], t_gemm[1]);
        printf("| %s | %.1f | %.4f (%d) | %.4f | %.4f / %.4f | %.4f | %.2fx | %.2g |\n", s.name, gflop, t_dnn, (int)algo,
               t_pad, t_gemm[0], t_gemm[1], t_pad + best, (t_pad + best) / t_dnn, hd[0] / std::max(hd[1], 1e-30f));
        cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyFilterDescriptor(wd);
        cudnnDestroyConvolutionDescriptor(cd);
        cudaFree(x), cudaFree(dy), cudaFree(xp), cudaFree(dyp), cudaFree(dw_dnn), cudaFree(dw_gemm);
    }
    return 0;
}
