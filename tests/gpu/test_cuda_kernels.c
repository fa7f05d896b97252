/* test_cuda_kernels.c — the GPU's own kernels (activations, batchnorm,
 * pooling, global average pooling, add, mul, concat, reshape, dropout, the two
 * losses and the layout/dtype conversions) against the CPU reference in f32,
 * f16 and bf16, through cuda_op_check: one line per case, exit 1 on any
 * failure, exit 2 when no GPU can be opened. Run by scripts/gpu-check on the
 * GPU machine (not by ctest: CI has no GPU). Build: this file,
 * cuda_op_check.c and ../op_harness.c against mixprec built with CUDA. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda/batchnorm2d_fast.h"
#include "cuda/filter_krsc_batch.h"
#include "cuda/host_copy.h"
#include "cuda/lib_kernels.h"
#include "cuda_op_check.h"

static int n_run, n_failed;

static void expect(bool ok) {
    n_run++;
    if (!ok) n_failed++;
}

static const mp_dtype DTYPES[3] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};

/* A case of `kind` over storage dt; pointwise ops compute in their storage
 * dtype (the policy's "widest input"), BN and the losses in f32. */
static cuda_op_case make_case(const char *label, mp_op_kind kind, const mp_cuda_op_vtable *vt, mp_dtype dt,
                              int n_in, const mp_shape *shapes) {
    cuda_op_case k;
    memset(&k, 0, sizeof k);
    k.label = label;
    k.kind = kind;
    k.vt = vt;
    k.n_in = n_in;
    for (int i = 0; i < n_in; i++) k.in_shape[i] = shapes[i];
    k.storage = dt;
    k.compute = kind == MP_OP_BATCHNORM2D || kind == MP_OP_SOFTMAX_CE || kind == MP_OP_BCE_LOGITS ? MP_DTYPE_F32 : dt;
    k.training = true;
    k.seed = 0xC0DA + (uint64_t)n_run * 7919;
    return k;
}

static void run(const cuda_op_case *k, mp_cuda_ctx *ctx) { expect(cuda_op_check_print(ctx, k)); }

/* ---- layout/dtype conversions ------------------------------------------- */

/* Values that exercise RNE: ties, f16 subnormals and overflow, bf16 carries. */
static float special(int i, mp_rng *r) {
    static const float s[] = {0.f, -0.f, 1.f + 0x1p-11f, 1.f + 3 * 0x1p-11f, 65519.f, 65520.f, 1e5f, -1e5f,
                              0x1p-24f, 0x1p-25f, 3 * 0x1p-26f, 1e-6f, 1.f + 0x1p-8f, 1.f + 3 * 0x1p-8f,
                              3.0e38f, INFINITY, -INFINITY, NAN, 1e-40f};
    int ns = (int)(sizeof s / sizeof s[0]);
    return i % 3 == 0 ? s[(i / 3) % ns] : (float)mp_rng_normal(r);
}

static uint16_t low_bits(float x, mp_dtype dt) {
    return dt == MP_DTYPE_F16 ? mp_f32_to_f16(x).bits : mp_f32_to_bf16(x).bits;
}

static float low_value(uint16_t b, mp_dtype dt) {
    return dt == MP_DTYPE_F16 ? mp_f16_to_f32((mp_f16){b}) : mp_bf16_to_f32((mp_bf16){b});
}

/* NCHW f32 -> device -> NCHW f32: the device bytes must be the host's NHWC
 * RNE conversion bit for bit (NaN: any NaN), and the way back exact. */
static bool check_layout(mp_cuda_ctx *ctx, mp_dtype dt, mp_shape s) {
    const int64_t n = mp_shape_numel(&s);
    const size_t es = mp_dtype_size(dt);
    float *h = malloc((size_t)n * 4), *back = malloc((size_t)n * 4);
    unsigned char *raw = malloc((size_t)n * es);
    mp_rng r;
    mp_rng_seed(&r, 77);
    for (int64_t i = 0; i < n; i++) h[i] = special((int)i, &r);
    float *d_nchw = NULL, *d_back = NULL;
    void *d_dev = NULL;
    bool ok = cudaMalloc((void **)&d_nchw, (size_t)n * 4) == cudaSuccess &&
              cudaMalloc((void **)&d_back, (size_t)n * 4) == cudaSuccess &&
              cudaMalloc(&d_dev, (size_t)n * es) == cudaSuccess;
    mp_tensor t = {dt, s, d_dev};
    ok = ok && cudaMemcpy(d_nchw, h, (size_t)n * 4, cudaMemcpyHostToDevice) == cudaSuccess;
    ok = ok && cudaDeviceSynchronize() == cudaSuccess; /* the DMA must land before the ops' stream reads it */
    ok = ok && mp_cuda_nchw_f32_to_device(ctx, d_nchw, &t) == MP_OK;
    ok = ok && mp_cuda_device_to_nchw_f32(ctx, &t, d_back) == MP_OK;
    ok = ok && cudaStreamSynchronize(ctx->stream) == cudaSuccess;
    ok = ok && cudaMemcpy(raw, d_dev, (size_t)n * es, cudaMemcpyDeviceToHost) == cudaSuccess;
    ok = ok && cudaMemcpy(back, d_back, (size_t)n * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    int64_t bad = 0, first = -1;
    const bool four = s.ndim == 4;
    const int64_t C = s.dims[1], HW = four ? (int64_t)s.dims[2] * s.dims[3] : 1;
    for (int64_t i = 0; ok && i < n; i++) { /* i: NCHW index */
        int64_t j = i;                      /* NHWC index */
        if (four) {
            int64_t nn = i / (C * HW), c = i / HW % C, hw = i % HW;
            j = (nn * HW + hw) * C + c;
        }
        float want_back;
        bool same;
        if (dt == MP_DTYPE_F32) {
            float got;
            memcpy(&got, raw + j * 4, 4);
            want_back = h[i];
            same = isnan(h[i]) ? isnan(got) : memcmp(&got, &h[i], 4) == 0;
        } else {
            uint16_t got, want = low_bits(h[i], dt);
            memcpy(&got, raw + j * 2, 2);
            want_back = low_value(want, dt);
            same = isnan(h[i]) ? isnan(low_value(got, dt)) : got == want;
        }
        same = same && (isnan(want_back) ? isnan(back[i]) : memcmp(&back[i], &want_back, 4) == 0);
        if (!same && bad++ == 0) first = i;
    }
    char ss[64];
    printf("%-4s %-28s %-22s %-16s %lld of %lld elements differ%s\n", ok && !bad ? "ok" : "FAIL",
           "layout NCHW f32 <-> device", mp_dtype_name(dt), mp_shape_str(&s, ss, sizeof ss), (long long)bad,
           (long long)n, ok ? "" : " (CUDA error)");
    if (bad) printf("     first at NCHW index %lld: host %.9g\n", (long long)first, (double)h[first]);
    cudaFree(d_nchw), cudaFree(d_back), cudaFree(d_dev);
    free(h), free(back), free(raw);
    return ok && !bad;
}

/* ---- op cases ----------------------------------------------------------- */

static void activations(mp_cuda_ctx *ctx, mp_dtype dt) {
    const mp_shape shapes[] = {mp_shape4(2, 13, 5, 7), mp_shape4(3, 16, 8, 8), mp_shape2(5, 37)};
    struct {
        const char *name;
        mp_op_kind kind;
        const mp_cuda_op_vtable *vt;
    } ops[] = {{"relu", MP_OP_RELU, &mp_cuda_relu_vt},
               {"leaky_relu 0.1", MP_OP_LEAKY_RELU, &mp_cuda_leaky_relu_vt},
               {"tanh", MP_OP_TANH, &mp_cuda_tanh_vt},
               {"sigmoid", MP_OP_SIGMOID, &mp_cuda_sigmoid_vt}};
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            cuda_op_case k = make_case(ops[o].name, ops[o].kind, ops[o].vt, dt, 1, &shapes[s]);
            k.attr.slope = 0.1f;
            run(&k, ctx);
        }
}

static void batchnorm(mp_cuda_ctx *ctx, mp_dtype dt) {
    const mp_shape shapes[] = {mp_shape4(4, 13, 5, 7), mp_shape4(8, 16, 6, 6), mp_shape4(2, 3, 33, 31),
                               mp_shape2(16, 24), mp_shape4(1, 8, 2, 3)};
    for (int train = 1; train >= 0; train--)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            cuda_op_case k = make_case("batchnorm2d", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt, dt, 1, &shapes[s]);
            k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
            k.training = train;
            run(&k, ctx);
        }
    if (dt != MP_DTYPE_F32) {
        mp_shape s = mp_shape4(4, 16, 5, 5);
        /* f32 statistics over a low-precision input, f32 output */
        cuda_op_case k = make_case("batchnorm2d low in, f32 out", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt,
                                   MP_DTYPE_F32, 1, &s);
        k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
        k.in_dtype_set = true;
        k.in_dtype[0] = dt;
        run(&k, ctx);
        /* BN switched to low precision (fp16/bf16 policies): gamma, beta as casts */
        k = make_case("batchnorm2d low compute", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt, dt, 1, &s);
        k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
        k.compute = dt;
        run(&k, ctx);
    }
    /* the ReLU reading it fused in: in f16 on cuDNN's kernels (C a multiple of 8), else ours */
    const mp_shape fused[] = {mp_shape4(8, 16, 6, 6), mp_shape4(4, 13, 5, 7)};
    for (size_t s = 0; s < sizeof fused / sizeof fused[0]; s++) {
        cuda_op_case k = make_case("batchnorm2d+relu", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt, dt, 1, &fused[s]);
        k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
        k.relu_after = true;
        run(&k, ctx);
        /* no dgamma/dbeta asked for: cuDNN's kernels write theirs to a spare in the workspace */
        k.label = "batchnorm2d+relu, no parameter gradients";
        k.no_param_grads = true;
        run(&k, ctx);
    }
    /* statistics over many rows (several chunks of the reduction), shifted mean */
    mp_shape big = mp_shape4(32, 24, 16, 16);
    cuda_op_case k = make_case("batchnorm2d many rows", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt, dt, 1, &big);
    k.attr.bn = (mp_batchnorm_opts){.momentum = 0.3f, .eps = 1e-3f};
    run(&k, ctx);
}

static void pooling(mp_cuda_ctx *ctx, mp_dtype dt) {
    struct {
        mp_shape s;
        mp_pool_opts o;
    } cfgs[] = {{mp_shape4(2, 13, 8, 8), {2, 2, 0}},  /* stride = kernel */
                {mp_shape4(2, 16, 9, 9), {3, 2, 1}},  /* overlapping, padded, vectorized channels */
                {mp_shape4(1, 3, 7, 7), {3, 1, 1}},   /* heavy overlap */
                {mp_shape4(3, 8, 6, 5), {4, 3, 2}}};  /* non-square input, padding = k/2 */
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        cuda_op_case k = make_case("maxpool2d", MP_OP_MAXPOOL2D, &mp_cuda_maxpool2d_vt, dt, 1, &cfgs[i].s);
        k.attr.pool = cfgs[i].o;
        run(&k, ctx);
        k = make_case("avgpool2d", MP_OP_AVGPOOL2D, &mp_cuda_avgpool2d_vt, dt, 1, &cfgs[i].s);
        k.attr.pool = cfgs[i].o;
        run(&k, ctx);
    }
    const mp_shape gs[] = {mp_shape4(3, 13, 5, 7), mp_shape4(2, 16, 4, 4), mp_shape4(2, 40, 1, 1)};
    for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
        cuda_op_case k = make_case("global_avgpool", MP_OP_GLOBAL_AVGPOOL, &mp_cuda_global_avgpool_vt, dt, 1, &gs[i]);
        run(&k, ctx);
    }
}

static void data_movement(mp_cuda_ctx *ctx, mp_dtype dt) {
    /* the same-shape binary ops */
    const struct {
        const char *label, *mixed;
        mp_op_kind kind;
        const mp_cuda_op_vtable *vt;
    } bin[] = {{"add", "add mixed", MP_OP_ADD, &mp_cuda_add_vt}, {"mul", "mul mixed", MP_OP_MUL, &mp_cuda_mul_vt}};
    cuda_op_case k;
    for (size_t b = 0; b < sizeof bin / sizeof bin[0]; b++) {
        mp_shape two[2] = {mp_shape4(2, 13, 5, 7), mp_shape4(2, 13, 5, 7)};
        k = make_case(bin[b].label, bin[b].kind, bin[b].vt, dt, 2, two);
        run(&k, ctx);
        two[0] = two[1] = mp_shape2(4, 64);
        k = make_case(bin[b].label, bin[b].kind, bin[b].vt, dt, 2, two);
        run(&k, ctx);
        if (dt != MP_DTYPE_F32) { /* f32 (op) low -> f32 (the policy's widest input) */
            two[0] = two[1] = mp_shape4(2, 16, 3, 3);
            k = make_case(bin[b].mixed, bin[b].kind, bin[b].vt, MP_DTYPE_F32, 2, two);
            k.in_dtype_set = true;
            k.in_dtype[0] = MP_DTYPE_F32;
            k.in_dtype[1] = dt;
            run(&k, ctx);
        }
    }

    mp_shape three[3] = {mp_shape4(2, 3, 4, 5), mp_shape4(2, 13, 4, 5), mp_shape4(2, 8, 4, 5)};
    k = make_case("concat 3+13+8", MP_OP_CONCAT, &mp_cuda_concat_vt, dt, 3, three);
    run(&k, ctx);
    three[0] = mp_shape4(2, 8, 3, 3), three[1] = mp_shape4(2, 16, 3, 3);
    k = make_case("concat 8+16", MP_OP_CONCAT, &mp_cuda_concat_vt, dt, 2, three);
    run(&k, ctx);
    three[0] = mp_shape2(3, 5), three[1] = mp_shape2(3, 11);
    k = make_case("concat 2-D", MP_OP_CONCAT, &mp_cuda_concat_vt, dt, 2, three);
    run(&k, ctx);

    struct {
        const char *label;
        mp_shape in, target;
    } rs[] = {{"reshape flatten", mp_shape4(2, 13, 5, 7), {2, {0, 455, 1, 1}}},
              {"reshape unflatten", mp_shape2(2, 455), {4, {0, 13, 5, 7}}},
              {"reshape 4-D -> 4-D", mp_shape4(2, 16, 4, 4), {4, {0, 4, 8, 8}}},
              {"reshape (C,1,1) -> (C)", mp_shape4(3, 16, 1, 1), {2, {0, 16, 1, 1}}},
              {"reshape (1,H,W) -> (H*W)", mp_shape4(3, 1, 6, 6), {2, {0, 36, 1, 1}}}};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++) {
        k = make_case(rs[i].label, MP_OP_RESHAPE, &mp_cuda_reshape_vt, dt, 1, &rs[i].in);
        k.attr.reshape = rs[i].target;
        run(&k, ctx);
    }

    const mp_shape ds[] = {mp_shape4(2, 13, 5, 7), mp_shape4(4, 16, 8, 8), mp_shape2(6, 40), mp_shape2(3, 7)};
    for (int train = 1; train >= 0; train--)
        for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
            k = make_case("dropout 0.3", MP_OP_DROPOUT, &mp_cuda_dropout_vt, dt, 1, &ds[i]);
            k.attr.p = 0.3f;
            k.training = train;
            run(&k, ctx);
        }
}

static void losses(mp_cuda_ctx *ctx, mp_dtype dt) {
    const int nk[][2] = {{8, 10}, {1, 10}, {4, 1000}, {3, 1}};
    for (size_t i = 0; i < sizeof nk / sizeof nk[0]; i++) {
        mp_shape s[2] = {mp_shape2(nk[i][0], nk[i][1]), mp_shape1(nk[i][0])};
        cuda_op_case k = make_case("softmax_cross_entropy", MP_OP_SOFTMAX_CE, &mp_cuda_softmax_ce_vt, dt, 2, s);
        run(&k, ctx);
    }
    const mp_shape bs[] = {mp_shape2(8, 5), mp_shape2(1, 3), mp_shape2(64, 300)};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) {
        mp_shape s[2] = {bs[i], bs[i]};
        cuda_op_case k = make_case("bce_with_logits", MP_OP_BCE_LOGITS, &mp_cuda_bce_logits_vt, dt, 2, s);
        run(&k, ctx);
    }
}

/* NaN in, NaN out where the CPU has it (relu forward, max pooling winner,
 * a batch norm's channel: in f16 on cuDNN's kernels, batchnorm2d_cudnn.h). */
static void nan_propagation(mp_cuda_ctx *ctx, mp_dtype dt) {
    mp_shape s = mp_shape4(2, 13, 6, 6);
    cuda_op_case k = make_case("relu NaN", MP_OP_RELU, &mp_cuda_relu_vt, dt, 1, &s);
    k.n_nan = 3, k.nan_index[0] = 0, k.nan_index[1] = 100, k.nan_index[2] = 935;
    run(&k, ctx);
    s = mp_shape4(2, 16, 6, 6);
    k = make_case("maxpool2d NaN", MP_OP_MAXPOOL2D, &mp_cuda_maxpool2d_vt, dt, 1, &s);
    k.attr.pool = (mp_pool_opts){3, 2, 1};
    k.n_nan = 2, k.nan_index[0] = 7, k.nan_index[1] = 36 * 16 + 14;
    run(&k, ctx);
    k = make_case("batchnorm2d NaN", MP_OP_BATCHNORM2D, &mp_cuda_batchnorm2d_vt, dt, 1, &s);
    k.attr.bn = (mp_batchnorm_opts){.momentum = 0.1f, .eps = 1e-5f};
    k.n_nan = 1, k.nan_index[0] = 36 * 3 + 5; /* channel 3 of sample 0 */
    run(&k, ctx);
    /* Not here: a NaN through a fused ReLU. Its forward is test_cuda_overflow's collapse case
     * (the NaN crosses conv2's fused batch norm + ReLU to the loss); its backward, a skipped
     * step's gradient, may mask NaN outputs on cuDNN's kernels where ours pass dy. */
}

/* The plan's one-launch KRSC copies of every conv filter
 * (filter_krsc_batch.h) must equal each filter permuted alone by
 * mp_cuda_lib_filter_to_krsc, bit for bit, over a mix of shapes and dtypes. */
static void krsc_batch(mp_cuda_ctx *ctx) {
    /* small filters: several whole filters to a shared-memory tile, the last tile short; filters
     * larger than a tile (512 x 9, 1000 x 9: runs of input channels, the last run short); 2048 x 1
     * (a 1x1 convolution: the permutation is a copy) */
    enum { N = 7 };
    const int dims[N][3] = {{5, 3, 9}, {4, 8, 1}, {2, 6, 4}, {64, 64, 9}, {512, 512, 9}, {3, 1000, 9}, {40, 2048, 1}};
    const mp_dtype sdt[N] = {MP_DTYPE_F32, MP_DTYPE_BF16, MP_DTYPE_F16, MP_DTYPE_BF16,
                             MP_DTYPE_F32, MP_DTYPE_F16,  MP_DTYPE_F32};
    const mp_dtype ddt[N] = {MP_DTYPE_BF16, MP_DTYPE_BF16, MP_DTYPE_F32, MP_DTYPE_BF16,
                             MP_DTYPE_F16,  MP_DTYPE_F32,  MP_DTYPE_BF16};
    mp_krsc_job jobs[N];
    void *src[N] = {0}, *dst[N] = {0}, *want[N] = {0};
    float *f32 = NULL;
    bool ok = cudaMalloc((void **)&f32, 512 * 512 * 9 * sizeof(float)) == cudaSuccess;
    mp_rng rng;
    mp_rng_seed(&rng, 0x4B525343);
    for (int j = 0; j < N && ok; j++) {
        const long long n = (long long)dims[j][0] * dims[j][1] * dims[j][2];
        float *h = malloc((size_t)n * sizeof *h);
        for (long long i = 0; h && i < n; i++) h[i] = (float)mp_rng_normal(&rng);
        ok = h && cudaMemcpy(f32, h, (size_t)n * sizeof *h, cudaMemcpyHostToDevice) == cudaSuccess &&
             cudaMalloc(&src[j], (size_t)n * 4) == cudaSuccess && cudaMalloc(&dst[j], (size_t)n * 4) == cudaSuccess &&
             cudaMalloc(&want[j], (size_t)n * 4) == cudaSuccess &&
             mp_cuda_lib_cast(ctx, f32, MP_DTYPE_F32, src[j], sdt[j], n, "test") == MP_OK &&
             mp_cuda_lib_filter_to_krsc(ctx, src[j], sdt[j], want[j], ddt[j], dims[j][0], dims[j][1], dims[j][2],
                                        "test") == MP_OK &&
             cudaStreamSynchronize(ctx->stream) == cudaSuccess;
        free(h);
        jobs[j] = (mp_krsc_job){.src = src[j], .dst = dst[j], .k = dims[j][0], .c = dims[j][1], .rs = dims[j][2],
                                .sdt = sdt[j], .ddt = ddt[j]};
    }
    mp_krsc_batch b = {0};
    ok = ok && mp_krsc_batch_build(ctx, jobs, N, &b, "test") == MP_OK;
    ok = ok && mp_krsc_batch_run(ctx, &b) == MP_OK && cudaStreamSynchronize(ctx->stream) == cudaSuccess;
    int same = 0;
    for (int j = 0; j < N && ok; j++) {
        const size_t bytes = (size_t)dims[j][0] * dims[j][1] * dims[j][2] * mp_dtype_size(ddt[j]);
        unsigned char *a = malloc(bytes), *w = malloc(bytes);
        if (a && w && cudaMemcpy(a, dst[j], bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
            cudaMemcpy(w, want[j], bytes, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(a, w, bytes))
            same++;
        else
            printf("FAIL: KRSC batch: filter %d (%d, %d, %d) %s -> %s differs from its own permutation\n", j,
                   dims[j][0], dims[j][1], dims[j][2], mp_dtype_name(sdt[j]), mp_dtype_name(ddt[j]));
        free(a);
        free(w);
    }
    if (!ok) printf("FAIL: KRSC batch: set-up or launch: %s\n", mp_last_error());
    expect(ok && same == N);
    /* a job it cannot run is refused by name at build time */
    mp_krsc_job bad = jobs[0];
    bad.sdt = MP_DTYPE_I32;
    mp_krsc_batch nb;
    const mp_status s = mp_krsc_batch_build(ctx, &bad, 1, &nb, "test");
    expect(s == MP_ERR_INTERNAL && strstr(mp_last_error(), "KRSC batch"));
    mp_clear_error();
    if (b.jobs) mp_krsc_batch_free(&b);
    for (int j = 0; j < N; j++) cudaFree(src[j]), cudaFree(dst[j]), cudaFree(want[j]);
    cudaFree(f32);
    printf("KRSC batch: %d of %d filters equal to their own permutation\n", same, N);
}

/* The weight gradient's way back, mp_cuda_lib_filter_from_krsc, against the
 * host's permutation, exactly: f32 and bf16 KRSC sources (bf16 widened
 * exactly) into f32, for 3x3, 7x7 and 1x1 filters of 3 to 2048 channels. */
static void from_krsc_exact(mp_cuda_ctx *ctx) {
    enum { N = 6 };
    const int dims[N][3] = {{5, 3, 9}, {64, 64, 9}, {512, 512, 9}, {3, 1000, 9}, {40, 2048, 1}, {7, 5, 49}};
    mp_rng rng;
    mp_rng_seed(&rng, 0x46524B52);
    int same = 0, cases = 0;
    for (int j = 0; j < N; j++)
        for (int bf = 0; bf < 2; bf++, cases++) {
            const int k = dims[j][0], c = dims[j][1], rs = dims[j][2];
            const size_t n = (size_t)k * c * rs;
            float *h = malloc(n * sizeof *h), *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
            mp_bf16 *hb = malloc(n * sizeof *hb);
            void *src = NULL;
            float *dst = NULL;
            bool ok = h && want && got && hb && cudaMalloc(&src, n * 4) == cudaSuccess &&
                      cudaMalloc((void **)&dst, n * 4) == cudaSuccess;
            for (size_t i = 0; ok && i < n; i++) h[i] = (float)mp_rng_normal(&rng);
            if (ok && bf) { /* the source as bf16; the values it holds, exactly */
                mp_convert_f32_to_bf16(h, hb, n);
                mp_convert_bf16_to_f32(hb, h, n);
            }
            for (int ki = 0; ok && ki < k; ki++) /* h is (K, RS, C); want (K, C, RS) */
                for (int r = 0; r < rs; r++)
                    for (int ci = 0; ci < c; ci++)
                        want[((size_t)ki * c + ci) * rs + r] = h[((size_t)ki * rs + r) * c + ci];
            /* ctx->stream does not wait for the legacy stream's copies, nor they for it: synchronize both ways */
            ok = ok && cudaMemcpy(src, bf ? (const void *)hb : (const void *)h, n * (bf ? 2 : 4),
                                  cudaMemcpyHostToDevice) == cudaSuccess &&
                 cudaDeviceSynchronize() == cudaSuccess &&
                 mp_cuda_lib_filter_from_krsc(ctx, src, bf ? MP_DTYPE_BF16 : MP_DTYPE_F32, dst, MP_DTYPE_F32, k, c, rs,
                                              "test") == MP_OK &&
                 cudaStreamSynchronize(ctx->stream) == cudaSuccess &&
                 cudaMemcpy(got, dst, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
            if (ok && !memcmp(got, want, n * 4)) same++;
            else
                printf("FAIL: filter from KRSC (%d, %d, %d) %s -> f32: %s\n", k, c, rs, bf ? "bf16" : "f32",
                       ok ? "differs from the host's permutation" : mp_last_error());
            cudaFree(src), cudaFree(dst);
            free(h), free(want), free(got), free(hb);
        }
    expect(same == cases);
    printf("filter from KRSC: %d of %d cases equal to the host's permutation\n", same, cases);
}

/* Filters through mp_cuda_host_copies (host_copy.h) into KRSC on the device:
 * the device bytes equal the f32/f16/bf16 cast of the CPU-layout filter
 * permuted by the device's own mp_cuda_lib_filter_to_krsc (the order cuDNN
 * is checked with), and the way back gives the host values exactly (f32)
 * or as the dtype rounds them; one filter beside them in the CPU layout
 * (rs 0) round-trips too. A filter whose dims do not match its count is an
 * error. */
static void host_copies_krsc(mp_cuda_ctx *ctx) {
    enum { N = 4 };
    const int dims[N][3] = {{5, 3, 9}, {64, 32, 9}, {7, 5, 49}, {40, 256, 1}};
    mp_rng rng;
    mp_rng_seed(&rng, 0x484F5354);
    int same = 0, cases = 0;
    for (int j = 0; j < N; j++)
        for (int d = 0; d < 3; d++, cases++) {
            const mp_dtype dt = DTYPES[d];
            const int k = dims[j][0], c = dims[j][1], rs = dims[j][2];
            const size_t n = (size_t)k * c * rs, es = mp_dtype_size(dt);
            float *h = malloc(n * 4), *back = malloc(n * 4), *rounded = malloc(n * 4);
            char *got = malloc(n * es), *want = malloc(n * es);
            void *dev = NULL, *plain = NULL, *perm = NULL;
            bool ok = h && back && rounded && got && want && cudaMalloc(&dev, n * es) == cudaSuccess &&
                      cudaMalloc(&plain, n * 4) == cudaSuccess && cudaMalloc(&perm, n * es) == cudaSuccess;
            for (size_t i = 0; ok && i < n; i++) h[i] = (float)mp_rng_normal(&rng);
            if (ok) { /* the values dt holds */
                mp_store_f32(got, dt, h, (int64_t)n);
                mp_load_f32(rounded, got, dt, (int64_t)n);
            }
            mp_host_copy x = {.host = h, .dev = dev, .dt = dt, .n = (int64_t)n, .filter = {k, c, rs}};
            ok = ok && mp_cuda_host_copies(ctx, &x, 1, false, "test") == MP_OK &&
                 cudaMemcpy(plain, h, n * 4, cudaMemcpyHostToDevice) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
                 mp_cuda_lib_filter_to_krsc(ctx, plain, MP_DTYPE_F32, perm, dt, k, c, rs, "test") == MP_OK &&
                 cudaStreamSynchronize(ctx->stream) == cudaSuccess &&
                 cudaMemcpy(got, dev, n * es, cudaMemcpyDeviceToHost) == cudaSuccess &&
                 cudaMemcpy(want, perm, n * es, cudaMemcpyDeviceToHost) == cudaSuccess;
            const bool dev_same = ok && !memcmp(got, want, n * es);
            x.host = back;
            ok = ok && mp_cuda_host_copies(ctx, &x, 1, true, "test") == MP_OK;
            const bool back_same = ok && !memcmp(back, rounded, n * 4);
            if (dev_same && back_same) same++;
            else
                printf("FAIL: host copy of a (%d, %d, %d) %s filter: %s\n", k, c, rs, mp_dtype_name(dt),
                       !ok ? mp_last_error() : !dev_same ? "the device's KRSC differs from to_krsc's"
                                                          : "the way back differs from the host's values");
            cudaFree(dev), cudaFree(plain), cudaFree(perm);
            free(h), free(back), free(rounded), free(got), free(want);
        }
    /* the CPU layout (rs 0) beside a KRSC filter in one call, and a filter whose dims miss its count */
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0}, f[6] = {-1, -2, -3, -4, -5, -6}, g[6] = {0};
    void *da = NULL, *df = NULL;
    bool ok = cudaMalloc(&da, sizeof a) == cudaSuccess && cudaMalloc(&df, sizeof f) == cudaSuccess;
    mp_host_copy two[2] = {{.host = a, .dev = da, .dt = MP_DTYPE_F32, .n = 6},
                           {.host = f, .dev = df, .dt = MP_DTYPE_F32, .n = 6, .filter = {1, 2, 3}}};
    ok = ok && mp_cuda_host_copies(ctx, two, 2, false, "test") == MP_OK;
    two[0].host = b, two[1].host = g;
    ok = ok && mp_cuda_host_copies(ctx, two, 2, true, "test") == MP_OK && !memcmp(a, b, sizeof a) &&
         !memcmp(f, g, sizeof f);
    expect(ok);
    cases++, same += ok;
    two[1].filter[2] = 4;
    const mp_status s = mp_cuda_host_copies(ctx, two, 2, true, "test copy");
    expect(s == MP_ERR_INTERNAL && strstr(mp_last_error(), "test copy") && strstr(mp_last_error(), "(1, 2, 4)"));
    cudaFree(da), cudaFree(df);
    expect(same == cases);
    printf("host copies: %d of %d filters in KRSC on the device as to_krsc makes them, and back\n", same, cases);
}

/* ---- batch norm's fast kernels (batchnorm2d_fast.h) ---------------------- */

/* v rounded to dt and back, on the host (round to nearest even). */
static float host_round(float v, mp_dtype dt) { return dt == MP_DTYPE_F32 ? v : low_value(low_bits(v, dt), dt); }

/* Element i of n values of dt, as f32. */
static float from_dtype(const void *p, size_t i, mp_dtype dt) {
    float v;
    mp_load_f32(&v, (const char *)p + i * mp_dtype_size(dt), dt, 1);
    return v;
}

static bool same_value(float a, float b) { return a == b || (isnan(a) && isnan(b)); }

/* The fused ReLU's backward mask, recomputed from x and the forward's
 * (mu, scale, shift), gives what reading the stored output gives, bit for
 * bit: the reductions' partials and dx, over channels whose scales put
 * values where rounding to the storage dtype makes them 0 (f16 below
 * 2^-25, bf16 below 2^-134) and NaNs. The apply's y equals the host's
 * round(relu(fma(x - mu, scale, shift))); dx is written everywhere (over
 * NaN bytes); dx_add gives old + dx within a rounding, dr the masked dy and
 * dr_add old + that. */
static void bn_fast_mask_exact(mp_cuda_ctx *ctx, mp_dtype dt) {
    const int C = dt == MP_DTYPE_F32 ? 24 : 40, G = 7;
    const long long M = 3001, R = (M + G - 1) / G;
    const size_t n = (size_t)M * C, es = mp_dtype_size(dt);
    const int rpp = mp_bn_fast_rows_per_pass(dt, C);
    float *x = malloc(n * 4), *dy = malloc(n * 4), *old = malloc(n * 4), *coef = malloc(7 * (size_t)C * 4);
    void *hx = malloc(n * es), *hdy = malloc(n * es), *hold = malloc(n * es), *hy = malloc(n * es);
    void *hdx[3] = {malloc(n * es), malloc(n * es), malloc(n * es)}, *hdr = malloc(n * es), *hdr_add = malloc(n * es);
    float *hp[4] = {malloc((size_t)G * C * 4), malloc((size_t)G * C * 4), malloc((size_t)G * C * 4),
                    malloc((size_t)G * C * 4)};
    void *dX = NULL, *dDY = NULL, *dY = NULL, *dDX = NULL, *dDR = NULL;
    float *dCoef = NULL, *dP = NULL;
    bool ok = rpp > 0 && x && dy && old && coef && hx && hdy && hold && hy && hdx[0] && hdx[1] && hdx[2] && hdr && hdr_add &&
              hp[0] && hp[1] && hp[2] && hp[3];
    mp_rng rng;
    mp_rng_seed(&rng, 0x424E4653 + (uint64_t)dt);
    /* coef: forward (mu, scale, shift) at 0, C, 2C; dx's (mu, k, a, b) at 3C.. */
    const float scales[] = {1.f, 0x1p-20f, 0x1p-126f, 1e-3f, -1.f, 0x1p-30f, 2.f, -0x1p-125f};
    for (int c = 0; ok && c < C; c++) {
        coef[c] = (float)(0.1 * mp_rng_normal(&rng));
        coef[C + c] = scales[c % 8] * (c % 3 ? 1.f : 0.75f);
        coef[2 * C + c] = c % 5 == 0 ? 1e-9f : 0.f;
        coef[3 * C + c] = coef[c];
        coef[4 * C + c] = (float)mp_rng_normal(&rng);
        coef[5 * C + c] = (float)(0.01 * mp_rng_normal(&rng));
        coef[6 * C + c] = (float)(0.01 * mp_rng_normal(&rng));
    }
    for (size_t i = 0; ok && i < n; i++) {
        x[i] = i % 97 == 5 ? NAN : (float)(mp_rng_normal(&rng) * (i % 2 ? 1e-3 : 1.0));
        dy[i] = (float)mp_rng_normal(&rng);
        old[i] = (float)mp_rng_normal(&rng);
    }
    if (ok) mp_store_f32(hx, dt, x, n), mp_store_f32(hdy, dt, dy, n), mp_store_f32(hold, dt, old, n);
    ok = ok && cudaMalloc(&dX, n * es) == cudaSuccess && cudaMalloc(&dDY, n * es) == cudaSuccess &&
         cudaMalloc(&dY, n * es) == cudaSuccess && cudaMalloc(&dDX, n * es) == cudaSuccess &&
         cudaMalloc(&dDR, n * es) == cudaSuccess && cudaMalloc((void **)&dCoef, 7 * (size_t)C * 4) == cudaSuccess &&
         cudaMalloc((void **)&dP, 4 * (size_t)G * C * 4) == cudaSuccess &&
         cudaMemcpy(dX, hx, n * es, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dDY, hdy, n * es, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dCoef, coef, 7 * (size_t)C * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
    const cudaStream_t st = ctx->stream;
    const mp_bn_fast_mask by_y = {.y_mask = dY}, by_x = {.fwd_mu = dCoef, .fwd_scale = dCoef + C};
    const float *dxc = dCoef + 3 * C;
    ok = ok && mp_bn_fast_apply(st, dt, dX, NULL, dY, M, C, G, R, dCoef, true) == cudaSuccess &&
         mp_bn_fast_bwd_reduce(st, dt, dX, dDY, by_y, dxc, M, C, G, R, dP, dP + G * C) == cudaSuccess &&
         mp_bn_fast_bwd_reduce(st, dt, dX, dDY, by_x, dxc, M, C, G, R, dP + 2 * G * C, dP + 3 * G * C) ==
             cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess && cudaMemcpy(hy, dY, n * es, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int k = 0; ok && k < 4; k++)
        ok = cudaMemcpy(hp[k], dP + (size_t)k * G * C, (size_t)G * C * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    /* dx by y, dx by x (each over NaN bytes: a value not written shows), then dx_add over old with dr
     * written, then dr_add over old without dx */
    for (int v = 0; ok && v < 4; v++) {
        ok = (v < 2 ? cudaMemset(dDX, 0xFF, n * es) == cudaSuccess
                    : cudaMemcpy(v == 2 ? dDX : dDR, hold, n * es, cudaMemcpyHostToDevice) == cudaSuccess) &&
             (v != 2 || cudaMemset(dDR, 0xFF, n * es) == cudaSuccess) && cudaDeviceSynchronize() == cudaSuccess &&
             mp_bn_fast_dx(st, dt, dX, dDY, v == 0 ? by_y : by_x, v < 3 ? dDX : NULL, v == 2, v >= 2 ? dDR : NULL,
                           v == 3, M, C, G, R, dxc) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess &&
             (v == 3 || cudaMemcpy(hdx[v], dDX, n * es, cudaMemcpyDeviceToHost) == cudaSuccess) &&
             (v < 2 || cudaMemcpy(v == 2 ? hdr : hdr_add, dDR, n * es, cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    long long y_bad = 0, rounded_away = 0, dx_bad = 0, add_bad = 0, dr_bad = 0;
    const float eps = dt == MP_DTYPE_F16 ? 0x1p-11f : dt == MP_DTYPE_BF16 ? 0x1p-8f : 0x1p-24f;
    for (size_t i = 0; ok && i < n; i++) {
        const int c = (int)(i % C);
        const float xv = from_dtype(hx, i, dt), v = fmaf(xv - coef[c], coef[C + c], coef[2 * C + c]);
        const float want = host_round(v < 0.f ? 0.f : v, dt), got = from_dtype(hy, i, dt);
        y_bad += !same_value(got, want);
        rounded_away += v > 0.f && want == 0.f;
        dx_bad += memcmp((const char *)hdx[0] + i * es, (const char *)hdx[1] + i * es, es) != 0 ||
                  isnan(from_dtype(hdx[0], i, dt)) != isnan(xv); /* written: NaN only where x is */
        /* old + dx rounded once, against old + (dx rounded): two of dt's roundings of the terms' size */
        const float o = from_dtype(hold, i, dt), d = from_dtype(hdx[1], i, dt), sum = o + d,
                    added = from_dtype(hdx[2], i, dt);
        add_bad += !(fabsf(added - sum) <= 2 * eps * (fabsf(o) + fabsf(d)) + 1e-30f) && !(isnan(sum) && isnan(added));
        const float g = !(got <= 0.f) ? from_dtype(hdy, i, dt) : 0.f;
        dr_bad += !same_value(from_dtype(hdr, i, dt), g);
        /* dr_add: old + g rounded once */
        const float dra = from_dtype(hdr_add, i, dt), drw = o + g;
        dr_bad += !(fabsf(dra - drw) <= eps * fabsf(drw) + 1e-30f) && !(isnan(dra) && isnan(drw));
    }
    const bool sums_same = ok && !memcmp(hp[0], hp[2], (size_t)G * C * 4) && !memcmp(hp[1], hp[3], (size_t)G * C * 4);
    const bool pass = ok && sums_same && !y_bad && !dx_bad && !add_bad && !dr_bad &&
                      (dt == MP_DTYPE_F32 || rounded_away > 0);
    expect(pass);
    printf("%s: batch norm fast kernels %s, %lld x %d: y vs host %lld off, %lld values rounded to 0; recomputed mask: "
           "sums %s, dx %lld off; dx_add %lld off, dr %lld off%s%s\n",
           pass ? "ok" : "FAIL", mp_dtype_name(dt), M, C, y_bad, rounded_away, sums_same ? "equal" : "DIFFER", dx_bad,
           add_bad, dr_bad, ok ? "" : ": ", ok ? "" : mp_last_error());
    cudaFree(dX), cudaFree(dDY), cudaFree(dY), cudaFree(dDX), cudaFree(dDR), cudaFree(dCoef), cudaFree(dP);
    free(x), free(dy), free(old), free(coef), free(hx), free(hdy), free(hold), free(hy), free(hdr), free(hdr_add);
    for (int k = 0; k < 3; k++) free(hdx[k]);
    for (int k = 0; k < 4; k++) free(hp[k]);
}

int main(void) {
    mp_cuda_ctx *ctx = NULL;
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        printf("test_cuda_kernels: no usable GPU, nothing tested: %s\n", mp_last_error());
        return 2;
    }
    printf("test_cuda_kernels on %s (sm_%d%d)\n", ctx->name, ctx->sm_major, ctx->sm_minor);
    const mp_shape layouts[] = {mp_shape4(2, 3, 5, 7), mp_shape4(2, 13, 4, 4), mp_shape4(3, 40, 9, 33),
                                mp_shape2(5, 37)};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof layouts / sizeof layouts[0]; s++) expect(check_layout(ctx, DTYPES[d], layouts[s]));
    for (int d = 0; d < 3; d++) {
        activations(ctx, DTYPES[d]);
        batchnorm(ctx, DTYPES[d]);
        pooling(ctx, DTYPES[d]);
        data_movement(ctx, DTYPES[d]);
        losses(ctx, DTYPES[d]);
        nan_propagation(ctx, DTYPES[d]);
    }
    krsc_batch(ctx);
    from_krsc_exact(ctx);
    host_copies_krsc(ctx);
    for (int d = 0; d < 3; d++) bn_fast_mask_exact(ctx, DTYPES[d]);
    printf("test_cuda_kernels: %d passed, %d failed\n", n_run - n_failed, n_failed);
    mp_cuda_ctx_destroy(ctx);
    return n_failed ? 1 : 0;
}
