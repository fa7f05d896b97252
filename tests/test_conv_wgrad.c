/* test_conv_wgrad.c — a conv2d's weight gradient as im2col + oneDNN matmul
 * (ops/conv_wgrad_onednn.h) against the definition summed in double over
 * the same bf16 inputs: every weight within 1e-5 of the size of its sum of
 * absolute terms (an empirical bound: an f32 sum's worst case grows with
 * the rows, 1.2e-4 at 2048; seen 8e-8), on shapes with
 * fewer output rows than one chunk, exactly one and two chunks, chunks and
 * a shorter last one, stride 2, a 1x1 projection, dilation 2 and 3 input
 * channels, a 4 x 16 image; the workspace and the output start as NaN
 * bytes. A plan's second convolution (its weight gradient after its
 * backward data, in the one workspace) with the form forced on and off
 * (mp_wgrad_gemm_mode_set): the same gradients within 1e-5, and the form
 * taken by some conv only when forced on. And when plans
 * take this form (mp_wgrad_gemm_wanted). On a CPU without bf16 kernels
 * (AVX2) oneDNN has no JIT bf16 matmul: there the check is that creating
 * it fails cleanly (MP_ERR_UNSUPPORTED) and a forced plan still trains.
 * Built with oneDNN only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "conv_grad_plan.h"
#include "core/bf16_inline.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/conv_onednn.h"
#include "ops/conv_wgrad_onednn.h"

typedef struct {
    int N, C, H, W, OC, k, stride, pad, dil;
    const char *what;
} wg_case;

static int out_size(int H, int k, int s, int p, int dil) { return (H + 2 * p - dil * (k - 1) - 1) / s + 1; }

static mp_op_desc conv_desc(const wg_case *t) { return conv_grad_desc("wgrad", t->OC, t->k, t->stride, t->pad, t->dil); }

static mp_op_info conv_info(const wg_case *t) {
    mp_op_info info;
    memset(&info, 0, sizeof info);
    const int OH = out_size(t->H, t->k, t->stride, t->pad, t->dil), OW = out_size(t->W, t->k, t->stride, t->pad, t->dil);
    info.n_in = 1;
    info.in[0] = mp_shape4(t->N, t->C, t->H, t->W);
    info.out = mp_shape4(t->N, t->OC, OH, OW);
    info.nhwc = 1u | MP_NHWC_OUT;
    return info;
}

static void check_case(const wg_case *t, uint64_t seed) {
    const mp_op_desc d = conv_desc(t);
    const mp_op_info info = conv_info(t);
    const int N = t->N, C = t->C, H = t->H, W = t->W, OC = t->OC, k = t->k, OH = info.out.dims[2], OW = info.out.dims[3];
    const int64_t nx = (int64_t)N * H * W * C, ny = (int64_t)N * OH * OW * OC, nw = (int64_t)OC * C * k * k;
    uint16_t *x = malloc(nx * 2), *dy = malloc(ny * 2);
    float *dw = malloc(nw * 4);
    double *ref = calloc(nw, sizeof *ref), *absum = calloc(nw, sizeof *absum);
    MP_ASSERT(x && dy && dw && ref && absum);
    mp_rng g;
    mp_rng_seed(&g, seed);
    for (int64_t i = 0; i < nx; i++) x[i] = mp_f32_to_bf16_bits((float)mp_rng_normal(&g));
    for (int64_t i = 0; i < ny; i++) dy[i] = mp_f32_to_bf16_bits((float)mp_rng_normal(&g));
    /* dW[o][c][kh][kw] = sum over (n, oh, ow) of dy[n][oh][ow][o] * x[n][ih][iw][c] */
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int kh = 0; kh < k; kh++)
                    for (int kw = 0; kw < k; kw++) {
                        const int ih = oh * t->stride - t->pad + kh * t->dil, iw = ow * t->stride - t->pad + kw * t->dil;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        const uint16_t *xr = x + (((int64_t)n * H + ih) * W + iw) * C;
                        const uint16_t *gr = dy + (((int64_t)n * OH + oh) * OW + ow) * OC;
                        for (int o = 0; o < OC; o++) {
                            const double gv = mp_bf16_bits_to_f32(gr[o]);
                            for (int c = 0; c < C; c++) {
                                const double term = gv * mp_bf16_bits_to_f32(xr[c]);
                                const int64_t w = (((int64_t)o * C + c) * k + kh) * k + kw;
                                ref[w] += term;
                                absum[w] += fabs(term);
                            }
                        }
                    }
    mp_wgrad_gemm *wg = NULL;
    size_t wsb = 0;
    const mp_status s = mp_wgrad_gemm_create(&d, &info, &wg, &wsb);
    if (!mp_cpu_multiplies_bf16()) { /* no bf16 kernels in oneDNN here: a clean refusal */
        CHECK(s == MP_ERR_UNSUPPORTED && strstr(mp_last_error(), "'wgrad'"),
              "%s: on a CPU without bf16 kernels, create gave %d (%s), want MP_ERR_UNSUPPORTED naming the conv",
              t->what, (int)s, mp_last_error());
        printf("%s %-38s refused: %s\n", s == MP_ERR_UNSUPPORTED ? "ok  " : "FAIL", t->what, mp_last_error());
        mp_wgrad_gemm_destroy(wg);
        free(x), free(dy), free(dw), free(ref), free(absum);
        return;
    }
    CHECK(s == MP_OK, "%s: create: %s", t->what, mp_last_error());
    void *ws = NULL;
    MP_ASSERT(posix_memalign(&ws, 64, wsb ? wsb : 64) == 0);
    memset(ws, 0xFF, wsb);
    memset(dw, 0xFF, nw * 4);
    const mp_status r = s == MP_OK ? mp_wgrad_gemm_run(wg, x, dy, dw, ws) : s;
    CHECK(r == MP_OK, "%s: run: %s", t->what, mp_last_error());
    double worst = 0;
    int64_t bad = 0;
    for (int64_t w = 0; w < nw; w++) {
        const double e = fabs((double)dw[w] - ref[w]) / (absum[w] > 0 ? absum[w] : 1);
        if (!(e <= 1e-5)) bad++;
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    CHECK(r == MP_OK && bad == 0, "%s: %lld of %lld weight gradients off (worst %.3g of their terms' size)", t->what,
          (long long)bad, (long long)nw, worst);
    printf("%s %-38s M %6d rows, K %5d: worst %.2g of the terms' size\n", bad == 0 && r == MP_OK ? "ok  " : "FAIL",
           t->what, N * OH * OW, C * k * k, worst);
    mp_wgrad_gemm_destroy(wg);
    free(ws), free(x), free(dy), free(dw), free(ref), free(absum);
}

/* When a plan's conv takes this form (MIXPREC_CPU_WGRAD_GEMM unset). */
static void check_wanted(void) {
    const int env = mp_env_get()->cpu_wgrad_gemm;
    const wg_case small = {2, 16, 7, 7, 32, 3, 1, 1, 1, "7x7"}, large = {2, 16, 14, 14, 32, 3, 1, 1, 1, "14x14"};
    mp_op_desc d = conv_desc(&small);
    mp_op_info info = conv_info(&small);
    const char *amx = "jit:avx512_core_amx_bf16";
    const bool on = mp_wgrad_gemm_wanted(&d, &info, amx);
    CHECK(on == (env != 0), "7x7 on AMX: wanted %d (MIXPREC_CPU_WGRAD_GEMM %d)", on, env);
    const bool other_impl = mp_wgrad_gemm_wanted(&d, &info, "jit:avx512_core_bf16");
    CHECK(other_impl == (env == 1), "7x7 on another kernel: wanted %d", other_impl);
    d.attr.conv.bias = true;
    CHECK(!mp_wgrad_gemm_wanted(&d, &info, amx), "a conv with a bias is taken (its gradient is not computed here)");
    d.attr.conv.bias = false;
    d.attr.conv.groups = 2;
    CHECK(!mp_wgrad_gemm_wanted(&d, &info, amx), "a grouped conv is taken");
    d.attr.conv.groups = 1;
    info.nhwc = 0;
    CHECK(!mp_wgrad_gemm_wanted(&d, &info, amx), "an NCHW conv is taken");
    d = conv_desc(&large);
    info = conv_info(&large);
    const bool big = mp_wgrad_gemm_wanted(&d, &info, amx);
    CHECK(big == (env == 1), "14x14 on AMX: wanted %d (MIXPREC_CPU_WGRAD_GEMM %d)", big, env);
    d.kind = MP_OP_CONV_TRANSPOSE2D;
    CHECK(!mp_wgrad_gemm_wanted(&d, &info, amx), "a transposed conv is taken");
    printf("ok   when: 7x7 on the AMX kernel %s, 14x14 %s, bias / groups / NCHW / transposed never\n",
           on ? "taken" : "not taken", big ? "taken" : "not taken");
}

int main(void) {
    const wg_case cases[] = {
        {2, 16, 7, 7, 32, 3, 1, 1, 1, "3x3, fewer rows than a chunk"},
        {32, 8, 8, 8, 16, 3, 1, 1, 1, "3x3, exactly one chunk (2048 rows)"},
        {64, 8, 8, 8, 16, 3, 1, 1, 1, "3x3, two chunks"},
        {50, 8, 7, 7, 16, 3, 1, 1, 1, "3x3, a chunk and a shorter one"},
        {5, 16, 9, 9, 24, 3, 2, 1, 1, "3x3 stride 2, odd size"},
        {4, 16, 8, 8, 32, 1, 2, 0, 1, "1x1 stride 2 (projection)"},
        {3, 8, 9, 9, 8, 3, 1, 2, 2, "3x3 dilation 2"},
        {2, 3, 8, 8, 16, 3, 1, 1, 1, "3 input channels"},
        {3, 16, 4, 16, 8, 3, 1, 1, 1, "a 4 x 16 image"},
        {3, 256, 7, 7, 256, 3, 1, 1, 1, "cnn10's 256-channel 7x7"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i], 100 + i);
    /* (the matmul cannot run without bf16 kernels: no conv takes it there) */
    conv_grad_plan_check(mp_wgrad_gemm_mode_set, 1, mp_conv_onednn_wgrad_is_gemm, mp_cpu_multiplies_bf16(),
                         MP_PRECISION_AMP_BF16, 1e-5, "weight gradients by the matmul");
    check_wanted();
    return test_summary("test_conv_wgrad");
}
