/* test_conv_dw_wgrad.c — a depthwise conv2d's weight gradient on our vector
 * kernel (ops/conv_dw_wgrad.h) against the definition summed in double over
 * the same inputs: every weight within 1e-5 of the size of its sum of
 * absolute terms (f32 row sums, double across rows), in f32 and bf16, on
 * every instruction set this CPU has and 1 to 3 threads (the same bits on a
 * second run), on shapes with stride 2, padding 0 and 2, dilation 2, a 5x5
 * filter, one channel, channels not a multiple of 16, fewer output rows than
 * threads; the workspace and the output start as NaN bytes (convolutions
 * take it in bf16 only, without a bias or a channel multiplier, not
 * transposed, channels-last: the refusals checked). Then a bf16 plan with a depthwise conv,
 * channels-last (the kernel taken) against channels-first (oneDNN's
 * primitive): the same gradients within 1e-2 (bf16 activations rounded
 * after sums in another order). Built with oneDNN only. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amp/policy.h"
#include "check.h"
#include "conv_grad_plan.h"
#include "core/bf16_inline.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "graph/plan.h"
#include "ops/conv_dw_wgrad.h"
#include "ops/conv_onednn.h"
#include "ops/cpu_fast.h"

typedef struct {
    int N, C, H, W, k, stride, pad, dil;
    const char *what;
} dw_case;

static int out_size(int H, int k, int s, int p, int dil) { return (H + 2 * p - dil * (k - 1) - 1) / s + 1; }

/* A depthwise conv2d "dw" (groups = C, no bias) over channels-last (N, C,
 * H, W): its descriptor and shapes. */
static void dw_conv(int N, int C, int H, int W, int k, int stride, int pad, int dil, mp_op_desc *d, mp_op_info *info) {
    memset(d, 0, sizeof *d);
    d->kind = MP_OP_CONV2D;
    d->name = "dw";
    d->attr.conv = (mp_conv_opts){.out_channels = C, .kernel = k, .stride = stride, .padding = pad, .dilation = dil,
                                  .groups = C};
    memset(info, 0, sizeof *info);
    info->n_in = 1;
    info->in[0] = mp_shape4(N, C, H, W);
    info->out = mp_shape4(N, C, out_size(H, k, stride, pad, dil), out_size(W, k, stride, pad, dil));
    info->nhwc = 1u | MP_NHWC_OUT;
}

static void check_case(const dw_case *t, mp_dtype dt, int threads, uint64_t seed) {
    mp_op_desc d;
    mp_op_info info;
    dw_conv(t->N, t->C, t->H, t->W, t->k, t->stride, t->pad, t->dil, &d, &info);
    const int N = t->N, C = t->C, H = t->H, W = t->W, k = t->k, OH = info.out.dims[2], OW = info.out.dims[3];
    CHECK(mp_dw_wgrad_applies(&d, &info, MP_DTYPE_BF16) && !mp_dw_wgrad_applies(&d, &info, MP_DTYPE_F32),
          "%s: the convolution takes the kernel in f32 or not in bf16", t->what);
    const int64_t nx = (int64_t)N * H * W * C, ny = (int64_t)N * OH * OW * C, nw = (int64_t)C * k * k;
    const size_t es = dt == MP_DTYPE_BF16 ? 2 : 4;
    void *x = malloc(nx * es), *dy = malloc(ny * es);
    float *dw = check_alloc_poisoned(nw * 4), *dw2 = check_alloc_poisoned(nw * 4);
    void *ws = check_alloc_poisoned(mp_dw_wgrad_workspace_bytes(&d, &info));
    double *ref = calloc(nw, sizeof *ref), *absum = calloc(nw, sizeof *absum);
    MP_ASSERT(x && dy && ref && absum);
    mp_rng g;
    mp_rng_seed(&g, seed);
    for (int64_t i = 0; i < nx + ny; i++) {
        const float v = (float)(mp_rng_normal(&g) * (1 + i % 3));
        void *p = i < nx ? x : dy;
        const int64_t j = i < nx ? i : i - nx;
        if (dt == MP_DTYPE_BF16) ((uint16_t *)p)[j] = mp_f32_to_bf16_bits(v);
        else ((float *)p)[j] = v;
    }
#define VAL(p, i) (dt == MP_DTYPE_BF16 ? (double)mp_bf16_bits_to_f32(((const uint16_t *)(p))[i]) \
                                       : (double)((const float *)(p))[i])
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int kh = 0; kh < k; kh++)
                    for (int kw = 0; kw < k; kw++) {
                        const int ih = oh * t->stride - t->pad + kh * t->dil;
                        const int iw = ow * t->stride - t->pad + kw * t->dil;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        for (int c = 0; c < C; c++) {
                            const double term = VAL(dy, (((int64_t)n * OH + oh) * OW + ow) * C + c) *
                                                VAL(x, (((int64_t)n * H + ih) * W + iw) * C + c);
                            ref[((int64_t)c * k + kh) * k + kw] += term;
                            absum[((int64_t)c * k + kh) * k + kw] += fabs(term);
                        }
                    }
#undef VAL
    omp_set_num_threads(threads);
    mp_dw_wgrad_run(dt, &d, &info, x, dy, dw, ws);
    mp_dw_wgrad_run(dt, &d, &info, x, dy, dw2, ws);
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < nw; i++) {
        const double e = fabs((double)dw[i] - ref[i]) / (absum[i] > 0 ? absum[i] : 1);
        if (!(e <= 1e-5)) bad++;
        if (e > worst || e != e) worst = e;
    }
    const char *isa = mp_fast_isa_name(mp_fast_isa_current());
    CHECK(bad == 0, "%s %s, %d thread(s), %s: %lld of %lld weights off the double sum (worst %.3g of the terms)",
          t->what, mp_dtype_name(dt), threads, isa, (long long)bad, (long long)nw, worst);
    CHECK(!memcmp(dw, dw2, nw * 4), "%s %s, %d thread(s), %s: a second run differs", t->what, mp_dtype_name(dt),
          threads, isa);
    free(x), free(dy), free(dw), free(dw2), free(ws), free(ref), free(absum);
}

/* Convolutions the kernel must not take: with a bias, a channel multiplier,
 * transposed, channels-first, f32 or f16 activations. */
static void refusals(void) {
    mp_op_desc d;
    mp_op_info info;
    dw_conv(2, 8, 6, 6, 3, 1, 1, 1, &d, &info);
    CHECK(mp_dw_wgrad_applies(&d, &info, MP_DTYPE_BF16), "the plain depthwise conv is refused");
    CHECK(!mp_dw_wgrad_applies(&d, &info, MP_DTYPE_F32) && !mp_dw_wgrad_applies(&d, &info, MP_DTYPE_F16),
          "taken with f32 or f16 activations");
    mp_op_desc b = d;
    b.attr.conv.bias = true;
    CHECK(!mp_dw_wgrad_applies(&b, &info, MP_DTYPE_BF16), "taken with a bias");
    mp_op_desc t = d;
    t.kind = MP_OP_CONV_TRANSPOSE2D;
    CHECK(!mp_dw_wgrad_applies(&t, &info, MP_DTYPE_BF16), "taken by a transposed conv");
    mp_op_info m = info;
    m.out = mp_shape4(2, 16, 6, 6); /* channel multiplier 2 */
    CHECK(!mp_dw_wgrad_applies(&d, &m, MP_DTYPE_BF16), "taken with a channel multiplier");
    mp_op_info f = info;
    f.nhwc = 0;
    CHECK(!mp_dw_wgrad_applies(&d, &f, MP_DTYPE_BF16), "taken on channels-first tensors");
}

int main(void) {
    const mp_fast_isa best = mp_fast_isa_best();
    printf("fast paths on this CPU: up to %s; %d OpenMP threads\n", mp_fast_isa_name(best), omp_get_max_threads());
    if (best == MP_FAST_NONE) {
        printf("no vector instruction set: the kernel does not run here\n");
        return test_summary("test_conv_dw_wgrad");
    }
    const dw_case cases[] = {
        {4, 144, 12, 12, 3, 1, 1, 1, "144 channels, stride 1"},
        {3, 24, 9, 7, 3, 2, 1, 1, "24 channels, stride 2, odd sizes"},
        {2, 19, 8, 8, 5, 1, 2, 1, "19 channels, 5x5, padding 2"},
        {2, 32, 9, 9, 3, 1, 0, 2, "dilation 2, no padding"},
        {1, 1, 6, 5, 3, 1, 1, 1, "one channel, one image (fewer rows than threads at stride 2 below)"},
        {1, 40, 2, 3, 3, 2, 1, 1, "one output row"},
    };
    const int procs = omp_get_num_procs() < 3 ? omp_get_num_procs() : 3, max_threads = omp_get_max_threads();
    for (int isa = best; isa >= MP_FAST_AVX2; isa--) {
        CHECK(mp_fast_isa_set((mp_fast_isa)isa) == (mp_fast_isa)isa, "cannot select %s",
              mp_fast_isa_name((mp_fast_isa)isa));
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int d = 0; d < 2; d++)
                for (int t = 1; t <= procs; t++)
                    check_case(&cases[c], d ? MP_DTYPE_BF16 : MP_DTYPE_F32, t, 100 * c + 10 * d + t);
    }
    mp_fast_isa_set(best);
    omp_set_num_threads(max_threads);
    float *gl = NULL, *gf = NULL;
    int64_t nl = 0, nf = 0;
    int tl = 0, tf = 0;
    /* a bf16 plan whose second conv is depthwise (16 channels, stride 2, no bias) */
    const mp_conv_opts dw = {.out_channels = 16, .kernel = 3, .stride = 2, .padding = 1, .groups = 16};
    CHECK(conv_grad_run(10, dw, MP_PRECISION_BF16, false, mp_conv_onednn_wgrad_is_dw, &gl, &nl, &tl) == MP_OK &&
              conv_grad_run(10, dw, MP_PRECISION_BF16, true, mp_conv_onednn_wgrad_is_dw, &gf, &nf, &tf) == MP_OK,
          "plan step: %s", mp_last_error());
    CHECK(tl == 1 && tf == 0, "the depthwise conv took the kernel in %d channels-last and %d channels-first plans "
          "(expected 1 and 0)", tl, tf);
    double d2 = 0, r2 = 0;
    for (int64_t i = 0; i < nl && nl == nf; i++)
        d2 += ((double)gl[i] - gf[i]) * ((double)gl[i] - gf[i]), r2 += (double)gf[i] * gf[i];
    const double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
    CHECK(nl == nf && rel <= 1e-2 && r2 > 0,
          "plan gradients, channels-last against channels-first: %lld / %lld values, relative difference %.3g",
          (long long)nl, (long long)nf, rel);
    if (tl == 1 && tf == 0 && nl == nf && rel <= 1e-2)
        printf("plan: depthwise weight gradient on the kernel; gradients within %.2g of the channels-first plan's\n",
               rel);
    refusals();
    free(gl), free(gf);
    return test_summary("test_conv_dw_wgrad");
}
