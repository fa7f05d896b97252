/* test_conv_dgrad.c — a conv2d's data gradient as the forward convolution
 * of its transposed, reversed filter (ops/conv_dgrad_onednn.h), run through
 * conv_onednn.c's backward with the form forced on (mp_dgrad_fwd_mode_set)
 * and off, against the definition summed in double over the same inputs:
 * every element within 1e-5 of the size of its sum of absolute terms, plus
 * half a bf16 step of its value for bf16 outputs (an f32 sum's worst case
 * grows with the terms: 2304 here; seen far below). Shapes: cnn10's
 * 256-channel 7x7 layer, channel tails on a 10 x 9 image, 5x5 with padding
 * 2, 3x3 with padding 0 and 2 (the form's padding 2 and 0), 1x1, dilation 2
 * with padding 1, 2 and 4, 3 input channels, a 4 x 16 image, NCHW tensors;
 * in f32, and bf16 on f32 primitives and (where oneDNN has them) bf16 ones.
 * The workspace and the gradient start as NaN bytes, and each conv runs
 * backward twice, first with other weights (W' is rebuilt per call).
 * Forced on, every case with at least 8 input channels takes the form;
 * stride 2 never does, and still agrees. With the rule (timed where it
 * wants the form; on AMX cnn10's bf16 7x7 layer must be timed) the
 * gradient is as good, and a second conv of the shape makes the same
 * choice and gets the same bits; with both passes built and either kept
 * untimed (test modes 2 and 3: the timed choice's swap on any CPU) too.
 * The weight gradient, computed after backward data in the same
 * workspace, has the same bits in every mode. A plan's gradients with the form
 * forced on (and built beside the primitive and kept) and off agree (fp32
 * and amp-bf16), some conv taking it only when on; and when plans take the form (mp_dgrad_fwd_wanted).
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
#include "ops/bf16_conv_math.h"
#include "ops/conv_dgrad_onednn.h"
#include "ops/conv_onednn.h"

typedef struct {
    int N, C, H, W, OC, k, stride, pad, dil;
    bool nhwc;
    const char *what;
} dg_case;

static mp_op_desc conv_desc(const dg_case *t) { return conv_grad_desc("dgrad", t->OC, t->k, t->stride, t->pad, t->dil); }

static mp_op_info conv_info(const mp_op_desc *d, const dg_case *t, mp_dtype dt) {
    mp_op_info info;
    memset(&info, 0, sizeof info);
    info.n_in = 1;
    info.in[0] = mp_shape4(t->N, t->C, t->H, t->W);
    info.in_dtype[0] = dt;
    MP_ASSERT(mp_op_lookup(MP_OP_CONV2D)->infer(d, &info) == MP_OK);
    info.nhwc = t->nhwc ? 1u | MP_NHWC_OUT : 0;
    return info;
}

/* Index of (n, c, h, w) in an activation of C channels, H x W. */
static int64_t at(bool nhwc, int n, int c, int h, int w, int C, int H, int W) {
    return nhwc ? (((int64_t)n * H + h) * W + w) * C + c : (((int64_t)n * C + c) * H + h) * W + w;
}

static float load(const void *a, int64_t i, mp_dtype dt) {
    return dt == MP_DTYPE_BF16 ? mp_bf16_bits_to_f32(((const uint16_t *)a)[i]) : ((const float *)a)[i];
}

/* Fills a (n values of dt) from N(0, sd) and returns the values as floats. */
static float *fill(void *a, int64_t n, mp_dtype dt, double sd, mp_rng *g) {
    float *v = malloc((size_t)n * sizeof *v);
    MP_ASSERT(v);
    for (int64_t i = 0; i < n; i++) {
        const float f = (float)(sd * mp_rng_normal(g));
        if (dt == MP_DTYPE_BF16) ((uint16_t *)a)[i] = mp_f32_to_bf16_bits(f);
        else ((float *)a)[i] = f;
        v[i] = load(a, i, dt);
    }
    return v;
}

/* What one prepared conv did: took the form, chose by timing, had no
 * oneDNN primitive (state NULL). */
typedef struct {
    bool taken, timed, none;
} dg_how;

/* dx and dw (f32) by conv_onednn.c's backward with the form's mode set,
 * after a first backward with the weights w_other. */
static mp_status run_backward(const mp_op_desc *d, const dg_case *t, mp_dtype dt, int mode, const void *x,
                              const void *w, const void *w_other, const void *dy, void *dx, float *dw, dg_how *how) {
    mp_op_info info = conv_info(d, t, dt);
    const int before = mp_dgrad_fwd_mode_set(mode);
    void *state = NULL;
    mp_status s = mp_conv_onednn_prepare(d, &info, dt, true, false, &state);
    mp_dgrad_fwd_mode_set(before);
    how->taken = mp_conv_onednn_dgrad_is_forward(state);
    how->timed = mp_conv_onednn_dgrad_timed(state);
    how->none = s == MP_OK && !state;
    if (s != MP_OK || !state) return s;
    void *ws = NULL;
    const size_t wsb = info.workspace_bytes ? info.workspace_bytes : 64;
    MP_ASSERT(posix_memalign(&ws, 64, wsb) == 0);
    memset(ws, 0xFF, wsb);
    mp_op_call c;
    memset(&c, 0, sizeof c);
    c.desc = d, c.info = &info, c.state = state, c.impl = MP_IMPL_ONEDNN, c.training = true, c.n_in = 1;
    c.in[0] = (mp_tensor){dt, info.in[0], (void *)x};
    c.d_in[0] = (mp_tensor){dt, info.in[0], dx};
    c.d_param[0] = (mp_tensor){MP_DTYPE_F32, info.params[0].shape, dw};
    c.param[0] = (mp_tensor){dt, info.params[0].shape, (void *)w_other};
    c.d_out = (mp_tensor){dt, info.out, (void *)dy};
    c.workspace = ws;
    s = mp_conv_onednn_backward(state, &c);
    c.param[0].data = (void *)w;
    if (s == MP_OK) s = mp_conv_onednn_backward(state, &c);
    free(ws);
    mp_conv_onednn_release(state);
    return s;
}

/* math: for bf16 tensors, the primitives' (bf16_conv_math.h). */
static void check_case(const dg_case *t, mp_dtype dt, mp_bf16_math math, uint64_t seed) {
    const mp_op_desc d = conv_desc(t);
    const mp_op_info info = conv_info(&d, t, dt);
    const int N = t->N, C = t->C, H = t->H, W = t->W, OC = t->OC, k = t->k, OH = info.out.dims[2], OW = info.out.dims[3];
    const int64_t nx = (int64_t)N * C * H * W, ny = (int64_t)N * OC * OH * OW, nw = (int64_t)OC * C * k * k;
    const size_t es = dt == MP_DTYPE_BF16 ? 2 : 4;
    const char *dn = dt == MP_DTYPE_F32 ? "f32" : math == MP_BF16_MATH_F32 ? "bf16 on f32 primitives" : "bf16";
    void *x = malloc(nx * es), *w = malloc(nw * es), *w2 = malloc(nw * es), *dy = malloc(ny * es),
         *dx[2] = {malloc(nx * es), malloc(nx * es)};
    double *ref = calloc(nx, sizeof *ref), *absum = calloc(nx, sizeof *absum);
    MP_ASSERT(x && w && w2 && dy && dx[0] && dx[1] && ref && absum);
    mp_rng g;
    mp_rng_seed(&g, seed);
    free(fill(x, nx, dt, 1.0, &g));
    free(fill(w2, nw, dt, 1.0, &g));
    float *wv = fill(w, nw, dt, 1.0 / sqrt((double)C * k * k), &g), *gv = fill(dy, ny, dt, 1.0, &g);
    /* dx[n][c][ih][iw] = sum over (o, kh, kw) of dy[n][o][oh][ow] * w[o][c][kh][kw], ih = oh*s - pad + kh*dil */
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++)
                for (int kh = 0; kh < k; kh++)
                    for (int kw = 0; kw < k; kw++) {
                        const int ih = oh * t->stride - t->pad + kh * t->dil, iw = ow * t->stride - t->pad + kw * t->dil;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        for (int o = 0; o < OC; o++) {
                            const double gy = gv[at(t->nhwc, n, o, oh, ow, OC, OH, OW)];
                            for (int c = 0; c < C; c++) {
                                const double term = gy * wv[(((int64_t)o * C + c) * k + kh) * k + kw];
                                const int64_t i = at(t->nhwc, n, c, ih, iw, C, H, W);
                                ref[i] += term;
                                absum[i] += fabs(term);
                            }
                        }
                    }
    /* the form forced on, off, the rule (timed where it wants the form), and both passes built with the form
     * kept or the primitive kept untimed (the timed choice's swap, on any CPU) */
    enum { MODES = 5 };
    static const int mode_of[MODES] = {1, 0, -1, 2, 3};
    static const char *const mode_name[MODES] = {"on", "off", "timed", "both, form kept", "both, primitive kept"};
    dg_how how[MODES + 1];
    double worst[MODES] = {0}, vmax = 0, apart = 0;
    int64_t bad[MODES] = {0};
    mp_status s[MODES];
    void *dxm[MODES];
    float *dw[MODES];
    bool dw_same = true;
    const mp_bf16_math math_before = mp_bf16_math_set(math);
    int ran = 0;
    for (int m = 0; m < MODES; m++, ran++) {
        dxm[m] = m < 2 ? dx[m] : malloc(nx * es), dw[m] = malloc(nw * sizeof(float));
        MP_ASSERT(dxm[m] && dw[m]);
        memset(dxm[m], 0xFF, nx * es), memset(dw[m], 0xFF, nw * sizeof(float));
        s[m] = run_backward(&d, t, dt, mode_of[m], x, w, w2, dy, dxm[m], dw[m], &how[m]);
        CHECK(s[m] == MP_OK, "%s %s (form %s): %s", t->what, dn, mode_name[m], mp_last_error());
        if (how[m].none) {
            ran++;
            break;
        }
        for (int64_t i = 0; s[m] == MP_OK && i < nx; i++) {
            const double v = load(dxm[m], i, dt), e = fabs(v - ref[i]);
            const double tol = 1e-5 * absum[i] + (es == 2 ? 0x1p-8 * fabs(ref[i]) : 0);
            if (!(e <= tol)) bad[m]++;
            const double rel = e / (absum[i] > 0 ? absum[i] : 1);
            if (!(rel <= worst[m])) worst[m] = isnan(rel) ? INFINITY : rel;
            if (m == 0) vmax = fmax(vmax, fabs(ref[i]));
            else if (m == 1) apart = fmax(apart, fabs(v - load(dx[0], i, dt)));
        }
        CHECK(s[m] != MP_OK || bad[m] == 0, "%s %s (form %s): %lld of %lld input gradients off (worst %.3g of their "
              "terms' size)", t->what, dn, mode_name[m], (long long)bad[m], (long long)nx, worst[m]);
        /* the weight gradient runs after backward data, in the same workspace: the same bits in every mode */
        if (m > 0 && s[m] == MP_OK && s[0] == MP_OK && memcmp(dw[m], dw[0], nw * sizeof(float))) dw_same = false;
    }
    CHECK(dw_same, "%s %s: the weight gradient after backward data differs between the modes", t->what, dn);
    if (!how[0].none && s[2] == MP_OK) { /* a second conv of the shape: the choice the first one's timing made */
        void *again = malloc(nx * es);
        MP_ASSERT(again);
        const mp_status s2 = run_backward(&d, t, dt, -1, x, w, w2, dy, again, dw[2], &how[MODES]);
        CHECK(s2 == MP_OK && how[MODES].taken == how[2].taken && !memcmp(again, dxm[2], nx * es),
              "%s %s: a second conv of the shape chose the form %d, the first %d (or its gradient differs)", t->what,
              dn, how[MODES].taken, how[2].taken);
        free(again);
    }
    for (int m = 0; m < ran; m++) {
        if (m >= 2) free(dxm[m]);
        free(dw[m]);
    }
    mp_bf16_math_set(math_before);
    if (how[0].none) { /* no bf16 convolution in oneDNN without bf16 instructions: bf16 primitives only */
        CHECK(dt == MP_DTYPE_BF16 && math == MP_BF16_MATH_DOT && !mp_cpu_multiplies_bf16(),
              "%s %s: oneDNN has no primitive for it", t->what, dn);
        printf("ok   %-34s %-4s no oneDNN primitive on this CPU (no bf16 instructions)\n", t->what, dn);
        free(x), free(w), free(w2), free(dy), free(dx[0]), free(dx[1]), free(ref), free(absum), free(wv), free(gv);
        return;
    }
    const bool possible = mp_dgrad_fwd_possible(&d);
    bool ok = dw_same;
    for (int m = 0; m < MODES; m++) ok &= s[m] == MP_OK && !bad[m];
    CHECK(!how[1].taken && !how[4].taken, "%s %s: the form was taken while off (%d) or the primitive kept (%d)",
          t->what, dn, how[1].taken, how[4].taken);
    CHECK(how[0].taken == possible || (possible && C < 8), "%s %s: forced on, the form was %s (possible: %d)", t->what,
          dn, how[0].taken ? "taken" : "not taken", possible);
    CHECK(how[3].taken == how[0].taken, "%s %s: built beside the primitive and kept, the form was %s", t->what, dn,
          how[3].taken ? "taken" : "not taken");
    /* on AMX, cnn10's 7x7 layer in bf16: oneDNN's backward data is the AMX kernel, so the rule times it */
    const bool must_time = !strncmp(t->what, "cnn10", 5) && dt == MP_DTYPE_BF16 && math == MP_BF16_MATH_DOT &&
                           mp_cpu_features_get()->amx_bf16 && !mp_env_get()->deterministic &&
                           mp_env_get()->cpu_dgrad_fwd < 0;
    CHECK(!must_time || how[2].timed, "%s %s: the rule did not time the form on this AMX CPU", t->what, dn);
    CHECK(!how[0].timed && !how[1].timed && !how[3].timed && !how[4].timed,
          "%s %s: a forced or test mode was timed", t->what, dn);
    ok &= !how[1].taken && !how[4].taken && (how[0].taken == possible || (possible && C < 8)) &&
          how[3].taken == how[0].taken && (!must_time || how[2].timed);
    printf("%s %-34s %-4s form %-9s worst %.2g / %.2g of the terms' size; forms apart by %.2g of %.3g; rule: %s%s\n",
           ok ? "ok  " : "FAIL", t->what, dn, how[0].taken ? "taken," : "not taken", worst[0], worst[1], apart, vmax,
           how[2].taken ? "the form" : "the primitive", how[2].timed ? " (timed)" : "");
    free(x), free(w), free(w2), free(dy), free(dx[0]), free(dx[1]), free(ref), free(absum), free(wv), free(gv);
}

/* When a plan's conv takes the form (MIXPREC_CPU_DGRAD_FWD unset: -1). */
static void check_wanted(void) {
    const int env = mp_env_get()->cpu_dgrad_fwd;
    const dg_case base = {2, 64, 7, 7, 64, 3, 1, 1, 1, true, "7x7"};
    mp_op_desc d = conv_desc(&base);
    mp_op_info info = conv_info(&d, &base, MP_DTYPE_BF16);
    const char *amx = "jit:avx512_core_amx_bf16";
    const bool on = mp_dgrad_fwd_wanted(&d, &info, amx);
    /* unset, the rule times it: never under MIXPREC_DETERMINISTIC=1 */
    const bool want_on = env == 1 || (env < 0 && !mp_env_get()->deterministic);
    CHECK(on == want_on, "64 channels on AMX: wanted %d (MIXPREC_CPU_DGRAD_FWD %d, MIXPREC_DETERMINISTIC %d)", on, env,
          mp_env_get()->deterministic);
    const bool other = mp_dgrad_fwd_wanted(&d, &info, "jit:avx512_core_bf16");
    CHECK(other == (env == 1), "on another kernel: wanted %d", other);
    info.nhwc = 0;
    const bool nchw = mp_dgrad_fwd_wanted(&d, &info, amx);
    CHECK(nchw == (env == 1), "NCHW on AMX: wanted %d", nchw);
    info.nhwc = 1u | MP_NHWC_OUT;
    const dg_case three = {2, 3, 7, 7, 64, 3, 1, 1, 1, true, "3 channels"};
    mp_op_desc d3 = conv_desc(&three);
    mp_op_info i3 = conv_info(&d3, &three, MP_DTYPE_BF16);
    CHECK(mp_dgrad_fwd_wanted(&d3, &i3, amx) == (env == 1), "3 input channels on AMX: wanted by the rule");
    const dg_case four = {2, 64, 7, 7, 4, 3, 1, 1, 1, true, "4 output channels"};
    mp_op_desc d4 = conv_desc(&four);
    mp_op_info i4 = conv_info(&d4, &four, MP_DTYPE_BF16);
    CHECK(mp_dgrad_fwd_wanted(&d4, &i4, amx) == (env == 1), "4 output channels on AMX: wanted by the rule");
    /* never: stride 2, groups 2, a transposed conv, padding beyond dil*(k-1) */
    d.attr.conv.stride = 2;
    CHECK(!mp_dgrad_fwd_possible(&d) && !mp_dgrad_fwd_wanted(&d, &info, amx), "a stride-2 conv is taken");
    d.attr.conv.stride = 1;
    d.attr.conv.groups = 2;
    CHECK(!mp_dgrad_fwd_possible(&d), "a grouped conv is taken");
    d.attr.conv.groups = 1;
    d.kind = MP_OP_CONV_TRANSPOSE2D;
    CHECK(!mp_dgrad_fwd_possible(&d), "a transposed conv is taken");
    d.kind = MP_OP_CONV2D;
    d.attr.conv.kernel = 1;
    d.attr.conv.padding = 1;
    CHECK(!mp_dgrad_fwd_possible(&d), "a 1x1 conv with padding 1 is taken");
    d.attr.conv.padding = 0;
    CHECK(mp_dgrad_fwd_possible(&d), "a 1x1 conv without padding is not possible");
    d.attr.conv.kernel = 3;
    d.attr.conv.dilation = 2;
    d.attr.conv.padding = 4;
    CHECK(mp_dgrad_fwd_possible(&d), "3x3 dilation 2 with padding 4 (the form's padding 0) is not possible");
    d.attr.conv.padding = 5;
    CHECK(!mp_dgrad_fwd_possible(&d), "3x3 dilation 2 with padding 5 is taken");
    printf("ok   when: 64 channels on the AMX kernel %s, on another kernel %s, NCHW %s; stride 2 / groups / "
           "transposed / too much padding never\n",
           on ? "taken" : "not taken", other ? "taken" : "not taken", nchw ? "taken" : "not taken");
}

int main(void) {
    const dg_case cases[] = {
        {2, 64, 8, 8, 64, 3, 1, 1, 1, true, "3x3, 64 channels"},
        {3, 256, 7, 7, 256, 3, 1, 1, 1, true, "cnn10's 256-channel 7x7"},
        {2, 24, 10, 9, 40, 3, 1, 1, 1, true, "channel tails, 10 x 9"},
        {2, 16, 9, 9, 8, 5, 1, 2, 1, true, "5x5, padding 2"},
        {2, 16, 9, 9, 16, 3, 1, 0, 1, true, "3x3, no padding"},
        {2, 16, 6, 5, 16, 3, 1, 2, 1, true, "3x3, padding 2 (the form's 0)"},
        {2, 16, 6, 7, 8, 3, 1, 4, 2, true, "3x3 dilation 2, padding 4"},
        {2, 32, 6, 6, 16, 1, 1, 0, 1, true, "1x1"},
        {2, 16, 11, 11, 16, 3, 1, 2, 2, true, "3x3 dilation 2, padding 2"},
        {2, 16, 9, 9, 16, 3, 1, 1, 2, true, "3x3 dilation 2, padding 1"},
        {2, 3, 8, 8, 16, 3, 1, 1, 1, true, "3 input channels"},
        {3, 16, 4, 16, 8, 3, 1, 1, 1, true, "a 4 x 16 image"},
        {2, 24, 10, 9, 40, 3, 1, 1, 1, false, "NCHW"},
        {2, 16, 9, 9, 24, 3, 2, 1, 1, true, "stride 2 (never the form)"},
    };
    /* f32; bf16 on f32 primitives; bf16 on bf16 ones */
    const struct { mp_dtype dt; mp_bf16_math math; } kinds[3] = {
        {MP_DTYPE_F32, MP_BF16_MATH_AUTO}, {MP_DTYPE_BF16, MP_BF16_MATH_F32}, {MP_DTYPE_BF16, MP_BF16_MATH_DOT}};
    for (int j = 0; j < 3; j++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            check_case(&cases[i], kinds[j].dt, kinds[j].math, 200 + i);
    conv_grad_plan_check(mp_dgrad_fwd_mode_set, 1, mp_conv_onednn_dgrad_is_forward, true, MP_PRECISION_FP32, 1e-5,
                         "data gradients by the forward form (fp32)");
    conv_grad_plan_check(mp_dgrad_fwd_mode_set, 1, mp_conv_onednn_dgrad_is_forward, true, MP_PRECISION_AMP_BF16, 1e-5,
                         "data gradients by the forward form (amp-bf16)");
    conv_grad_plan_check(mp_dgrad_fwd_mode_set, 2, mp_conv_onednn_dgrad_is_forward, true, MP_PRECISION_AMP_BF16, 1e-5,
                         "data gradients by the form built beside the primitive and kept (amp-bf16)");
    check_wanted();
    return test_summary("test_conv_dgrad");
}
