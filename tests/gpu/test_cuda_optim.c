/* test_cuda_optim.c — the device step of cuda_optim.h against the CPU
 * oracle on the same random data: the fused unscale + inf/NaN check (bit for
 * bit, every kind of non-finite value and position), the global gradient
 * norm (CPU double sum, 1e-5) and clipping by norm and by value; SGD
 * (momentum, Nesterov, weight decay), Adam and AdamW over several steps
 * (‖gpu−cpu‖/‖cpu‖ ≤ 1e-6 per tensor, states and step counts too), each
 * with the learning rate by value and from device memory; a step with an
 * inf planted in one gradient leaves weights, low copies, state and step
 * count bit-identical; the f16/bf16 copies equal mp_convert_f32_to_* of the
 * masters; loss-scale sequences for overflow patterns equal mp_scaler's
 * (amp/scaler.c) exactly, queued without any host synchronization and read
 * back once (the same mp_scaler struct and rule on both sides: every field,
 * the report bookkeeping and the per-group flags and skip counts too); the
 * loss check after forward raises the forward-overflow flags, which the
 * update counts without touching the scale; and the whole post-backward step captured as a CUDA graph and
 * replayed with a changing learning rate; the optimizer and scaler state
 * downloaded to a host mp_optim and uploaded into another device optimizer
 * (checkpoints) round-trips bit for bit, and steps after it equal steps
 * without it, the restored side replaying a graph captured before. The
 * no-master cases (fp16/bf16 policies) leave each weight with a low copy at
 * that copy's value, as the CPU trainer's rounding does; where such a weight
 * has no f32 array (low-only) its SGD momentum lives in its f16/bf16 dtype
 * (state_dtype, set as step_cuda.c sets it) on both sides, bit for bit,
 * through checkpoint transfers too, and bad state dtypes are refused. f16/bf16
 * gradients beside fp32 masters (a low_grads plan's conv filters under amp)
 * give SGD and AdamW the step f32 gradients of the same values give, bit for
 * bit.
 * Needs a GPU: without one it prints one line and exits 2 (run by
 * scripts/gpu-check, not by ctest). Build: compile with -Isrc -Iinclude -Itests and
 * the CUDA include path, link the src/cuda objects, libmixprec and -lcudart. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "amp/scaler_rule.h"
#include "check.h"
#include "core/rng.h"
#include "cuda/multi_tensor.cuh"
#include "cuda/cuda_optim.h"

static mp_cuda_ctx *ctx;

#define CHECK_OK(call) CHECK((call) == MP_OK, "%s", mp_last_error())

/* ---- device memory helpers (all on ctx->stream) ---------------------------- */

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 4);
    if (e != cudaSuccess) {
        fprintf(stderr, "test_cuda_optim: cudaMalloc(%zu) failed: %s\n", bytes, cudaGetErrorString(e));
        exit(1);
    }
    return p;
}

static void sync_stream(void) {
    cudaError_t e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "test_cuda_optim: stream failed: %s\n", cudaGetErrorString(e));
        exit(1);
    }
}

static void up(void *dev, const void *host, size_t bytes) {
    if (!bytes) return;
    CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, ctx->stream) == cudaSuccess, "upload");
    sync_stream();
}

static void down(void *host, const void *dev, size_t bytes) {
    if (!bytes) return;
    CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, ctx->stream) == cudaSuccess, "download");
    sync_stream();
}

static void fill_normal(float *x, int64_t n, mp_rng *r, double sd) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(sd * mp_rng_normal(r));
}

/* ‖a − ref‖ / ‖ref‖ in double (0 when both are 0). */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)ref[i];
        d += e * e;
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

static int64_t bit_diffs(const void *a, const void *b, int64_t n, size_t elem) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) k += memcmp((const char *)a + i * elem, (const char *)b + i * elem, elem) != 0;
    return k;
}

/* ---- unscale + check -------------------------------------------------------- */

#define UT 7
static const int64_t unscale_sizes[UT] = {1, 7, 16384, 16385, 100003, 0, 3 * 16384 + 5};

/* CPU mp_scaler vs device over the same tensors; bad: value planted at
 * (tensor, index) when tensor >= 0. */
/* A host scaler at scale and its copy on the device. */
static mp_scaler *scaler_pair(float scale, mp_scaler *cs) {
    CHECK_OK(mp_scaler_init(cs, (mp_scaler_opts){.init_scale = scale}));
    mp_scaler *gs = NULL;
    CHECK_OK(mp_cuda_scaler_create(ctx, cs, &gs));
    return gs;
}

static void unscale_case(const char *name, float scale, float big, int bad_tensor, int64_t bad_index, float bad) {
    mp_rng r;
    mp_rng_seed(&r, 11);
    mp_scaler cs;
    mp_scaler *gs = scaler_pair(scale, &cs);
    float *h[UT], *d[UT], *back[UT];
    for (int t = 0; t < UT; t++) {
        int64_t n = unscale_sizes[t];
        h[t] = malloc((size_t)(n + 1) * sizeof(float));
        back[t] = malloc((size_t)(n + 1) * sizeof(float));
        fill_normal(h[t], n, &r, 1000.0);
        if (n > 2) h[t][1] = -0.0f;
        if (n > 3) h[t][2] = big;
        if (t == bad_tensor) h[t][bad_index] = bad;
        d[t] = dev_alloc((size_t)n * sizeof(float));
        up(d[t], h[t], (size_t)n * sizeof(float));
    }
    mp_cuda_grads *gl = NULL;
    CHECK_OK(mp_cuda_grads_create(ctx, d, unscale_sizes, UT, &gl));
    int first = mp_scaler_unscale_check(&cs, h, unscale_sizes, UT);
    CHECK_OK(mp_cuda_unscale_check(ctx, gs, 0, gl));
    mp_scaler gback = cs;
    CHECK_OK(mp_cuda_scaler_download(ctx, gs, &gback));
    /* found_inf and group 0's flag, the ones an optimizer of group 0 skips on */
    CHECK(gback.found_inf == cs.found_inf && gback.group_found[0] == cs.group_found[0],
          "unscale %s: device found_inf %d group 0 %d, cpu %d %d (first %d)", name, gback.found_inf,
          gback.group_found[0], cs.found_inf, cs.group_found[0], first);
    const int want = bad_tensor >= 0 || isinf(big * (float)(1.0 / scale)) ? MP_FOUND_GRADIENT : 0;
    CHECK(gback.found_inf == want && gback.group_found[0] == want, "unscale %s: found_inf %d, group 0 %d, expected %d",
          name, gback.found_inf, gback.group_found[0], want);
    for (int g = 1; g < MP_SCALER_GROUPS; g++)
        CHECK(gback.group_found[g] == 0, "unscale %s: group %d's flag %d raised by group 0's check", name, g,
              gback.group_found[g]);
    int64_t diffs = 0;
    for (int t = 0; t < UT; t++) {
        down(back[t], d[t], (size_t)unscale_sizes[t] * sizeof(float));
        /* a NaN times the inverse scale stays NaN; its payload is the
         * hardware's (x86 keeps the operand's, the GPU gives the canonical
         * NaN) and no step reads it: compare NaNs as NaN */
        for (int64_t i = 0; i < unscale_sizes[t]; i++)
            if (isnan(back[t][i]) && isnan(h[t][i])) back[t][i] = h[t][i];
        diffs += bit_diffs(back[t], h[t], unscale_sizes[t], sizeof(float));
    }
    CHECK(diffs == 0, "unscale %s: %lld elements differ from the CPU's bits", name, (long long)diffs);
    printf("  unscale %-22s scale %-10g found_inf %d, bit-identical to the CPU\n", name, (double)scale,
           gback.found_inf);
    mp_cuda_grads_destroy(gl);
    mp_cuda_scaler_destroy(gs);
    for (int t = 0; t < UT; t++) {
        free(h[t]);
        free(back[t]);
        cudaFree(d[t]);
    }
}

/* The same over a plan's low_grads (f16/bf16 gradient lists): the device
 * multiplies each widened value by the inverse scale, stores it rounded to
 * nearest even and checks the value stored, so a gradient that overflows the
 * 16-bit type only when unscaled counts. The reference does each step on the
 * host (mp_round_f32 is that rounding). Tensor 1 starts one element past a
 * 16-byte boundary and the sizes leave tails, so both the 16-byte path and
 * the element path run, and must agree with the host bit for bit. */
static int unscale_low_case(const char *name, mp_dtype dt, float scale, float big, int bad_tensor, int64_t bad_index,
                            float bad) {
    mp_rng r;
    mp_rng_seed(&r, 13);
    mp_scaler cs;
    mp_scaler *gs = scaler_pair(scale, &cs);
    const float inv = mp_scaler_inverse(scale);
    float *h[UT];
    uint16_t *bits[UT], *back[UT];
    void *d[UT];
    void *alloc[UT];
    mp_dtype dts[UT];
    bool want_bad = false;
    for (int t = 0; t < UT; t++) {
        const int64_t n = unscale_sizes[t];
        h[t] = malloc((size_t)(n + 1) * sizeof(float));
        bits[t] = malloc((size_t)(n + 1) * 2);
        back[t] = malloc((size_t)(n + 1) * 2);
        fill_normal(h[t], n, &r, 100.0);
        if (n > 2) h[t][1] = -0.0f;
        if (n > 3 && t != 1) h[t][2] = big; /* aligned tensors only: a flag must come from the 16-byte path */
        if (t == bad_tensor) h[t][bad_index] = bad;
        mp_round_f32(h[t], n, dt); /* the gradient as the backward left it */
        if (dt == MP_DTYPE_F16) mp_convert_f32_to_f16(h[t], (mp_f16 *)bits[t], (size_t)n);
        else mp_convert_f32_to_bf16(h[t], (mp_bf16 *)bits[t], (size_t)n);
        alloc[t] = dev_alloc((size_t)(n + 8) * 2);
        d[t] = (uint16_t *)alloc[t] + (t == 1); /* tensor 1 at 2 bytes past the allocation's alignment */
        up(d[t], bits[t], (size_t)n * 2);
        dts[t] = dt;
        if (scale != 1.0f)
            for (int64_t i = 0; i < n; i++) h[t][i] = h[t][i] * inv;
        mp_round_f32(h[t], n, dt); /* the value stored */
        for (int64_t i = 0; i < n; i++) want_bad |= !isfinite(h[t][i]);
    }
    mp_cuda_grads *gl = NULL;
    CHECK_OK(mp_cuda_grads_create_typed(ctx, d, dts, unscale_sizes, UT, &gl));
    CHECK_OK(mp_cuda_unscale_check(ctx, gs, 0, gl));
    mp_scaler gback = cs;
    CHECK_OK(mp_cuda_scaler_download(ctx, gs, &gback));
    const int want = want_bad ? MP_FOUND_GRADIENT : 0;
    CHECK(gback.found_inf == want && gback.group_found[0] == want, "unscale %s: found_inf %d, group 0 %d, expected %d",
          name, gback.found_inf, gback.group_found[0], want);
    int64_t diffs = 0;
    for (int t = 0; t < UT; t++) {
        const int64_t n = unscale_sizes[t];
        down(back[t], d[t], (size_t)n * 2);
        if (dt == MP_DTYPE_F16) mp_convert_f32_to_f16(h[t], (mp_f16 *)bits[t], (size_t)n);
        else mp_convert_f32_to_bf16(h[t], (mp_bf16 *)bits[t], (size_t)n);
        const unsigned inf_bits = dt == MP_DTYPE_F16 ? 0x7c00u : 0x7f80u;
        for (int64_t i = 0; i < n; i++) {
            if (back[t][i] == bits[t][i]) continue;
            if (isnan(h[t][i]) && (back[t][i] & 0x7fffu) > inf_bits) continue; /* NaN payloads are the hardware's */
            diffs++;
        }
    }
    CHECK(diffs == 0, "unscale %s: %lld elements differ from the host's rounding", name, (long long)diffs);
    printf("  unscale %-30s %s scale %-10g found_inf %d, bit-identical to the host\n", name, mp_dtype_name(dt),
           (double)scale, gback.found_inf);
    mp_cuda_grads_destroy(gl);
    mp_cuda_scaler_destroy(gs);
    for (int t = 0; t < UT; t++) {
        free(h[t]);
        free(bits[t]);
        free(back[t]);
        cudaFree(alloc[t]);
    }
    return gback.found_inf;
}

/* The elementwise passes' grid: never more blocks than the device holds at
 * once (nor MP_MT_MAX_BLOCKS), no block more chunks than the fewest such a
 * grid allows, and no more blocks than that many chunks a block needs. */
static void test_pass_grid(void) {
    static const long long chunks[] = {0, 1, 7, 263, 264, 265, 527, 528, 529, 1056, 2228, 5000, 100000};
    static const long long resident[] = {1, 4, 264, 396, 528, 2000};
    int bad = 0;
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++)
        for (size_t j = 0; j < sizeof resident / sizeof resident[0]; j++) {
            const long long n = chunks[i], r = resident[j] < MP_MT_MAX_BLOCKS ? resident[j] : MP_MT_MAX_BLOCKS;
            const unsigned g = mp_mt_pass_grid(n, resident[j]);
            const bool ok = n == 0 ? g == 0
                                   : g >= 1 && g <= r && (n + g - 1) / g == (n + r - 1) / r &&
                                         (n + g - 1) / g * (g - 1) < n;
            if (!ok && bad++ < 3) fprintf(stderr, "pass grid %u for %lld chunks, %lld resident\n", g, n, resident[j]);
        }
    CHECK(bad == 0, "mp_mt_pass_grid: %d of the cases wrong", bad);
    CHECK(mp_mt_pass_grid(2228, 528) == 446, "2228 chunks, 528 resident blocks: grid %u, not 446 (5 chunks a block)",
          mp_mt_pass_grid(2228, 528));
}

static void test_unscale(void) {
    unscale_case("clean", 65536.0f, 3.0e6f, -1, 0, 0);
    unscale_case("scale 1 (check only)", 1.0f, 3.0e38f, -1, 0, 0);
    unscale_case("odd scale", 12345.678f, 1.0f, -1, 0, 0);
    unscale_case("+inf first element", 65536.0f, 1.0f, 0, 0, INFINITY);
    unscale_case("-inf last element", 65536.0f, 1.0f, UT - 1, unscale_sizes[UT - 1] - 1, -INFINITY);
    unscale_case("NaN mid big tensor", 65536.0f, 1.0f, 4, 50001, NAN);
    unscale_case("NaN at scale 1", 1.0f, 1.0f, 3, 16384, NAN);
    unscale_case("overflow by unscaling", 0x1.0p-10f, 3.0e38f, -1, 0, 0);
    for (int k = 0; k < 2; k++) {
        const mp_dtype dt = k ? MP_DTYPE_BF16 : MP_DTYPE_F16;
        const char *dn = mp_dtype_name(dt);
        CHECK(!unscale_low_case("clean", dt, 65536.0f, 3000.0f, -1, 0, 0), "%s: a clean list flagged", dn);
        CHECK(!unscale_low_case("scale 1 (check only)", dt, 1.0f, 60000.0f, -1, 0, 0), "%s: 60000 flagged", dn);
        unscale_low_case("odd scale", dt, 12345.678f, 1.0f, -1, 0, 0);
        CHECK(unscale_low_case("+inf in the unaligned tensor", dt, 65536.0f, 1.0f, 1, 3, INFINITY), "%s: inf missed", dn);
        CHECK(unscale_low_case("NaN mid big tensor", dt, 65536.0f, 1.0f, 4, 50001, NAN), "%s: NaN missed", dn);
        CHECK(unscale_low_case("-inf in a tail", dt, 1.0f, 1.0f, 6, 3 * 16384 + 4, -INFINITY), "%s: -inf missed", dn);
        CHECK(unscale_low_case("+inf at scale 1, 16-byte path", dt, 1.0f, 1.0f, 4, 50001, INFINITY), "%s: inf missed",
              dn);
        /* 60000 / 2^-2 = 240000 overflows f16, not bf16: found where the value stored is inf */
        const int over = unscale_low_case("overflow by unscaling", dt, 0x1.0p-2f, 60000.0f, -1, 0, 0);
        CHECK(!over == (dt == MP_DTYPE_BF16), "%s: overflow by unscaling found_inf %d", dn, over);
    }
}

/* ---- norm and clipping ---------------------------------------------------- */

#define NT 5
static const int64_t clip_sizes[NT] = {3, 16384, 65537, 0, 1000};

static double cpu_norm(float **g, const int64_t *n, int k) {
    double ss = 0;
    for (int i = 0; i < k; i++)
        for (int64_t j = 0; j < n[i]; j++) ss += (double)g[i][j] * g[i][j];
    return sqrt(ss);
}

/* The CPU trainer's clip_gradients, both modes. */
static void cpu_clip(float **g, const int64_t *n, int k, float clip_value, float clip_norm) {
    if (clip_value > 0)
        for (int i = 0; i < k; i++)
            for (int64_t j = 0; j < n[i]; j++) g[i][j] = fminf(fmaxf(g[i][j], -clip_value), clip_value);
    if (clip_norm > 0) {
        double norm = cpu_norm(g, n, k);
        if (norm > clip_norm) {
            float f = (float)(clip_norm / (norm + 1e-6));
            for (int i = 0; i < k; i++)
                for (int64_t j = 0; j < n[i]; j++) g[i][j] *= f;
        }
    }
}

static void clip_case(const char *name, float clip_value, double norm_fraction, bool specials) {
    mp_rng r;
    mp_rng_seed(&r, 23);
    float *h[NT], *d[NT], *back[NT];
    for (int t = 0; t < NT; t++) {
        h[t] = malloc((size_t)(clip_sizes[t] + 1) * sizeof(float));
        back[t] = malloc((size_t)(clip_sizes[t] + 1) * sizeof(float));
        fill_normal(h[t], clip_sizes[t], &r, 0.01 * (t + 1));
        d[t] = dev_alloc((size_t)clip_sizes[t] * sizeof(float));
    }
    if (specials) {
        h[0][0] = NAN;
        h[0][1] = INFINITY;
        h[0][2] = -INFINITY;
        h[4][5] = -0.0f;
    }
    for (int t = 0; t < NT; t++) up(d[t], h[t], (size_t)clip_sizes[t] * sizeof(float));
    mp_cuda_grads *gl = NULL;
    CHECK_OK(mp_cuda_grads_create(ctx, d, clip_sizes, NT, &gl));
    double *dnorm = dev_alloc(2 * sizeof(double)), gn[2];

    const double ref_norm = cpu_norm(h, clip_sizes, NT);
    float clip_norm = 0;
    if (clip_value > 0) {
        CHECK_OK(mp_cuda_clip_by_value(ctx, gl, clip_value));
    } else {
        CHECK_OK(mp_cuda_grad_norm(ctx, gl, &dnorm[0]));
        clip_norm = (float)(ref_norm * norm_fraction);
        CHECK_OK(mp_cuda_clip_by_norm(ctx, gl, clip_norm, &dnorm[1]));
        down(gn, dnorm, sizeof gn);
        double e = fabs(gn[0] - ref_norm) / ref_norm;
        CHECK(e <= 1e-5, "norm %s: device %.17g, cpu %.17g (rel %.3g)", name, gn[0], ref_norm, e);
        CHECK(memcmp(&gn[0], &gn[1], sizeof(double)) == 0, "norm %s: two runs gave %.17g and %.17g", name, gn[0],
              gn[1]);
        printf("  norm %-25s device %.12g, cpu %.12g (rel %.2g)\n", name, gn[0], ref_norm, e);
    }
    cpu_clip(h, clip_sizes, NT, clip_value, clip_norm);
    double worst = 0;
    int64_t diffs = 0;
    for (int t = 0; t < NT; t++) {
        down(back[t], d[t], (size_t)clip_sizes[t] * sizeof(float));
        diffs += bit_diffs(back[t], h[t], clip_sizes[t], sizeof(float));
        double e = rel_err(back[t], h[t], clip_sizes[t]);
        if (e > worst) worst = e;
    }
    if (clip_value > 0 || norm_fraction >= 1) CHECK(diffs == 0, "clip %s: %lld elements differ", name, (long long)diffs);
    CHECK(worst <= 1e-6, "clip %s: rel err %.3g", name, worst);
    printf("  clip %-25s rel err %.2g, %lld elements not bit-identical\n", name, worst, (long long)diffs);
    mp_cuda_grads_destroy(gl);
    cudaFree(dnorm);
    for (int t = 0; t < NT; t++) {
        free(h[t]);
        free(back[t]);
        cudaFree(d[t]);
    }
}

static void test_clip(void) {
    clip_case("by norm (clips)", 0, 0.3, false);
    clip_case("by norm (no clip)", 0, 2.0, false);
    clip_case("by value", 0.015f, 0, false);
    clip_case("by value, inf/NaN", 0.015f, 0, true);
    /* An empty list has norm 0. */
    mp_cuda_grads *gl = NULL;
    CHECK_OK(mp_cuda_grads_create(ctx, NULL, NULL, 0, &gl));
    double *dn = dev_alloc(sizeof(double)), v = -1;
    CHECK_OK(mp_cuda_grad_norm(ctx, gl, dn));
    down(&v, dn, sizeof v);
    CHECK(v == 0.0, "norm of an empty list: %g", v);
    CHECK_ERR(mp_cuda_clip_by_norm(ctx, gl, 0.0f, NULL), MP_ERR_INVALID_ARG, "--clip-norm");
    CHECK_ERR(mp_cuda_clip_by_value(ctx, gl, -1.0f), MP_ERR_INVALID_ARG, "--clip-value");
    cudaFree(dn);
    mp_cuda_grads_destroy(gl);
}

/* ---- optimizers: the CPU trainer's step against the device's ------------- */

#define PT 5
static const int64_t param_sizes[PT] = {5, 300, 16384 + 3, 70001, 1};
static const bool param_decay[PT] = {true, false, true, true, false};
static const mp_dtype param_low[PT] = {MP_DTYPE_F16, MP_DTYPE_BF16, MP_DTYPE_F16, MP_DTYPE_BF16, MP_DTYPE_F32};
#define PMAX 70001

typedef struct {
    const char *name;
    mp_optim_opts o;
    float lr, clip_norm;
    bool no_master; /* fp16/bf16 policies: weights with a low copy keep its value (the CPU trainer rounds them) */
    bool low_only;  /* with no_master: those weights have no f32 array (param NULL), the copy is the weight */
} optim_case;

/* The state_dtype of tensor t in case c, as step_cuda.c passes it (and the
 * host optimizer, by mp_gparam.low_only): the weight's low dtype when it
 * has no f32 array, else f32. */
static mp_dtype case_state_dtype(const optim_case *c, int t) {
    return c->low_only && param_low[t] != MP_DTYPE_F32 ? param_low[t] : MP_DTYPE_F32;
}

/* The dtype the device keeps tensor t's state in: SGD momentum as above,
 * Adam's moments always f32. */
static mp_dtype case_device_state_dtype(const optim_case *c, int t) {
    return c->o.kind == MP_OPTIM_SGD && c->o.momentum > 0 ? case_state_dtype(c, t) : MP_DTYPE_F32;
}

/* One parameter set on both sides, driven like mp_train_step drives the
 * CPU: scaled gradients, unscale + check, clip, step unless found_inf, one
 * scaler update. */
typedef struct {
    const optim_case *c;
    mp_optim *cpu;
    mp_cuda_optim *gpu;
    mp_scaler cs;
    mp_scaler *gs;
    mp_cuda_grads *gl;
    float *h_param[PT], *h_grad[PT];
    float *d_param[PT], *d_grad[PT];
    void *d_low[PT];
    float *d_lr;
    cudaGraphExec_t graph; /* NULL: the calls are made directly */
    double worst;          /* largest relative error seen */
    int64_t bits_differ, compared;
} rig;

static void rig_init(rig *r, const optim_case *c, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->c = c;
    mp_rng rng;
    mp_rng_seed(&rng, seed);
    mp_param_ref cref[PT];
    mp_cuda_param_ref gref[PT];
    for (int t = 0; t < PT; t++) {
        int64_t n = param_sizes[t];
        r->h_param[t] = malloc((size_t)n * sizeof(float));
        r->h_grad[t] = malloc((size_t)n * sizeof(float));
        fill_normal(r->h_param[t], n, &rng, 0.1);
        const bool low_only = c->low_only && param_low[t] != MP_DTYPE_F32;
        if (low_only) mp_round_f32(r->h_param[t], n, param_low[t]); /* as the trainer's start (mp_graph_round_low_weights) */
        r->d_param[t] = dev_alloc((size_t)n * sizeof(float));
        r->d_grad[t] = dev_alloc((size_t)n * sizeof(float));
        up(r->d_param[t], r->h_param[t], (size_t)n * sizeof(float));
        if (param_low[t] != MP_DTYPE_F32) r->d_low[t] = dev_alloc((size_t)n * 2);
        if (low_only) { /* the weight lives in its copy only; the f32 array stays as uploaded */
            static uint16_t bits[PMAX];
            if (param_low[t] == MP_DTYPE_F16) mp_convert_f32_to_f16(r->h_param[t], (mp_f16 *)bits, (size_t)n);
            else mp_convert_f32_to_bf16(r->h_param[t], (mp_bf16 *)bits, (size_t)n);
            up(r->d_low[t], bits, (size_t)n * 2);
        }
        /* as step_cuda.c and train/optimizer.c set it: SGD momentum in the dtype of a weight without an f32 array */
        const mp_dtype sd = case_state_dtype(c, t);
        cref[t] = (mp_param_ref){.param = r->h_param[t], .grad = r->h_grad[t], .n = n, .decay = param_decay[t],
                                 .state_dtype = sd};
        gref[t] = (mp_cuda_param_ref){.param = low_only ? NULL : r->d_param[t], .grad = r->d_grad[t],
                                      .low = r->d_low[t], .low_dtype = param_low[t], .n = n, .decay = param_decay[t],
                                      .no_master = c->no_master, .state_dtype = sd};
    }
    r->d_lr = dev_alloc(sizeof(float));
    CHECK_OK(mp_optim_create(c->o, cref, PT, &r->cpu));
    CHECK_OK(mp_cuda_optim_create(ctx, c->o, gref, PT, &r->gpu));
    CHECK_OK(mp_scaler_init(&r->cs, (mp_scaler_opts){.growth_interval = 3}));
    CHECK_OK(mp_cuda_scaler_create(ctx, &r->cs, &r->gs));
    CHECK_OK(mp_cuda_grads_create(ctx, r->d_grad, param_sizes, PT, &r->gl));
}

static void rig_free(rig *r) {
    if (r->graph) cudaGraphExecDestroy(r->graph);
    mp_optim_destroy(r->cpu);
    mp_cuda_optim_destroy(r->gpu);
    mp_cuda_scaler_destroy(r->gs);
    mp_cuda_grads_destroy(r->gl);
    for (int t = 0; t < PT; t++) {
        free(r->h_param[t]);
        free(r->h_grad[t]);
        cudaFree(r->d_param[t]);
        cudaFree(r->d_grad[t]);
        if (r->d_low[t]) cudaFree(r->d_low[t]);
    }
    cudaFree(r->d_lr);
}

/* The device's part after backward. check_flag: read found_inf back before
 * the scaler update (never while capturing). */
static void rig_device_calls(rig *r, float lr, bool lr_on_device, bool check_flag) {
    CHECK_OK(mp_cuda_unscale_check(ctx, r->gs, 0, r->gl));
    if (r->c->clip_norm > 0) CHECK_OK(mp_cuda_clip_by_norm(ctx, r->gl, r->c->clip_norm, NULL));
    /* the optimizer skips on its group's flag, as the trainer's step (step_cuda.c) */
    mp_cuda_step_args a = {.lr = lr, .lr_device = lr_on_device ? r->d_lr : NULL,
                           .found_inf = &r->gs->group_found[0]};
    CHECK_OK(mp_cuda_optim_step(ctx, r->gpu, &a));
    if (check_flag) {
        mp_scaler s = r->cs;
        CHECK_OK(mp_cuda_scaler_download(ctx, r->gs, &s));
        CHECK(s.found_inf == MP_FOUND_GRADIENT && s.group_found[0] == MP_FOUND_GRADIENT,
              "%s: found_inf %d, group 0 %d after a planted inf", r->c->name, s.found_inf, s.group_found[0]);
    }
    CHECK_OK(mp_cuda_scaler_update(ctx, r->gs));
}

static void rig_capture(rig *r) {
    cudaGraph_t g = NULL;
    CHECK(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    rig_device_calls(r, 0.0f, true, false);
    cudaError_t e = cudaStreamEndCapture(ctx->stream, &g);
    CHECK(e == cudaSuccess, "%s: capture failed: %s", r->c->name, cudaGetErrorString(e));
    if (e != cudaSuccess) return;
    e = cudaGraphInstantiate(&r->graph, g, 0);
    CHECK(e == cudaSuccess, "%s: graph instantiation failed: %s", r->c->name, cudaGetErrorString(e));
    cudaGraphDestroy(g);
}

/* Everything the device holds of the parameters, for bit comparisons. */
typedef struct {
    float *param[PT], *buf[PT][2];
    uint16_t *low[PT];
    int64_t steps;
} snapshot;

static void take_snapshot(rig *r, snapshot *s) {
    for (int t = 0; t < PT; t++) {
        size_t n = (size_t)param_sizes[t];
        s->param[t] = malloc(n * sizeof(float));
        down(s->param[t], r->d_param[t], n * sizeof(float));
        void *db[2] = {NULL, NULL};
        int nb = mp_cuda_optim_state_tensors(r->gpu, t, db);
        const mp_dtype sd = mp_cuda_optim_state_dtype(r->gpu, t);
        CHECK(sd == case_device_state_dtype(r->c, t), "%s: tensor %d: device state dtype %s, want %s", r->c->name, t,
              mp_dtype_name(sd), mp_dtype_name(case_device_state_dtype(r->c, t)));
        for (int b = 0; b < 2; b++) {
            s->buf[t][b] = NULL;
            if (b >= nb) continue;
            s->buf[t][b] = malloc(n * sizeof(float));
            if (sd == MP_DTYPE_F32) {
                down(s->buf[t][b], db[b], n * sizeof(float));
                continue;
            }
            /* f16/bf16 momentum: its bits, widened exactly on the host */
            static uint16_t bits[PMAX];
            down(bits, db[b], n * 2);
            if (sd == MP_DTYPE_F16) mp_convert_f16_to_f32((const mp_f16 *)bits, s->buf[t][b], n);
            else mp_convert_bf16_to_f32((const mp_bf16 *)bits, s->buf[t][b], n);
        }
        s->low[t] = NULL;
        if (r->d_low[t]) {
            s->low[t] = malloc(n * 2);
            down(s->low[t], r->d_low[t], n * 2);
        }
        if (r->c->low_only && param_low[t] == MP_DTYPE_F16) mp_convert_f16_to_f32((mp_f16 *)s->low[t], s->param[t], n);
        if (r->c->low_only && param_low[t] == MP_DTYPE_BF16)
            mp_convert_bf16_to_f32((mp_bf16 *)s->low[t], s->param[t], n);
    }
    CHECK_OK(mp_cuda_optim_get_step_count(ctx, r->gpu, &s->steps));
}

static void free_snapshot(snapshot *s) {
    for (int t = 0; t < PT; t++) {
        free(s->param[t]);
        free(s->buf[t][0]);
        free(s->buf[t][1]);
        free(s->low[t]);
    }
}

static int64_t snapshot_diffs(const snapshot *a, const snapshot *b) {
    int64_t k = a->steps != b->steps;
    for (int t = 0; t < PT; t++) {
        k += bit_diffs(a->param[t], b->param[t], param_sizes[t], sizeof(float));
        for (int j = 0; j < 2; j++)
            if (a->buf[t][j]) k += bit_diffs(a->buf[t][j], b->buf[t][j], param_sizes[t], sizeof(float));
        if (a->low[t]) k += bit_diffs(a->low[t], b->low[t], param_sizes[t], 2);
    }
    return k;
}

static void note_err(rig *r, const char *what, int t, const float *dev, const float *ref, int step) {
    double e = rel_err(dev, ref, param_sizes[t]);
    CHECK(e <= 1e-6, "%s step %d: %s of tensor %d: rel err %.3g", r->c->name, step, what, t, e);
    if (e > r->worst) r->worst = e;
    r->bits_differ += bit_diffs(dev, ref, param_sizes[t], sizeof(float));
    r->compared += param_sizes[t];
}

/* Device against CPU: parameters, state, low copies, step count, scaler. */
static void rig_compare(rig *r, int step) {
    const snapshot *s;
    snapshot now;
    take_snapshot(r, &now);
    s = &now;
    static uint16_t conv[PMAX];
    for (int t = 0; t < PT; t++) {
        note_err(r, "param", t, s->param[t], r->h_param[t], step);
        float *cb[2] = {NULL, NULL};
        int nb = mp_optim_state_tensors(r->cpu, t, cb);
        CHECK(nb == mp_cuda_optim_state_tensors(r->gpu, t, NULL), "%s: state buffer counts", r->c->name);
        for (int b = 0; b < nb; b++) note_err(r, b ? "state v" : "state m/momentum", t, s->buf[t][b], cb[b], step);
        if (param_low[t] == MP_DTYPE_F16) mp_convert_f32_to_f16(s->param[t], (mp_f16 *)conv, (size_t)param_sizes[t]);
        if (param_low[t] == MP_DTYPE_BF16) mp_convert_f32_to_bf16(s->param[t], (mp_bf16 *)conv, (size_t)param_sizes[t]);
        if (s->low[t]) {
            int64_t k = bit_diffs(s->low[t], conv, param_sizes[t], 2);
            CHECK(k == 0, "%s step %d: %lld %s copy elements differ from mp_convert of the master", r->c->name, step,
                  (long long)k, mp_dtype_name(param_low[t]));
        }
    }
    CHECK(s->steps == mp_optim_step_count(r->cpu), "%s step %d: device step count %lld, cpu %lld", r->c->name, step,
          (long long)s->steps, (long long)mp_optim_step_count(r->cpu));
    mp_scaler g = r->cs;
    CHECK_OK(mp_cuda_scaler_download(ctx, r->gs, &g));
    CHECK(g.scale == r->cs.scale && g.growth_tracker == r->cs.growth_tracker && g.step == r->cs.step &&
              g.skipped_steps == r->cs.skipped_steps && !g.found_inf,
          "%s step %d: device scaler scale %g tracker %d step %lld skipped %lld, cpu %g %d %lld %lld", r->c->name, step,
          (double)g.scale, g.growth_tracker, (long long)g.step, (long long)g.skipped_steps, (double)r->cs.scale,
          r->cs.growth_tracker, (long long)r->cs.step, (long long)r->cs.skipped_steps);
    free_snapshot(&now);
}

static void rig_step(rig *r, mp_rng *rng, int step, float lr, bool lr_on_device, bool plant_inf) {
    const float scale = mp_scaler_scale(&r->cs);
    for (int t = 0; t < PT; t++) fill_normal(r->h_grad[t], param_sizes[t], rng, 0.01 * scale);
    if (plant_inf) r->h_grad[2][7] = INFINITY;
    for (int t = 0; t < PT; t++) up(r->d_grad[t], r->h_grad[t], (size_t)param_sizes[t] * sizeof(float));
    snapshot before;
    if (plant_inf) take_snapshot(r, &before);

    mp_scaler_unscale_check(&r->cs, r->h_grad, param_sizes, PT);
    const bool skip = mp_scaler_found_inf(&r->cs);
    CHECK(skip == plant_inf, "%s step %d: cpu found_inf %d", r->c->name, step, skip);
    if (!skip) {
        cpu_clip(r->h_grad, param_sizes, PT, 0, r->c->clip_norm);
        mp_optim_step(r->cpu, lr);
        for (int t = 0; t < PT && r->c->no_master; t++) /* as the trainer's mp_graph_round_low_weights */
            if (param_low[t] != MP_DTYPE_F32) mp_round_f32(r->h_param[t], param_sizes[t], param_low[t]);
    }
    mp_scaler_update(&r->cs);

    if (lr_on_device || r->graph) CHECK_OK(mp_cuda_set_f32(ctx, r->d_lr, lr));
    if (r->graph) CHECK(cudaGraphLaunch(r->graph, ctx->stream) == cudaSuccess, "graph launch");
    else rig_device_calls(r, lr, lr_on_device, plant_inf);
    sync_stream();

    if (plant_inf) {
        snapshot after;
        take_snapshot(r, &after);
        int64_t k = snapshot_diffs(&before, &after);
        CHECK(k == 0, "%s step %d: a skipped step changed %lld values (weights, low copies, state, step count)",
              r->c->name, step, (long long)k);
        free_snapshot(&after);
        free_snapshot(&before);
    }
    rig_compare(r, step);
}

#define STEPS 8

static void run_case(const optim_case *c, bool graph) {
    rig r;
    rig_init(&r, c, 1234);
    if (graph) rig_capture(&r);
    mp_rng rng;
    mp_rng_seed(&rng, 99);
    for (int k = 0; k < STEPS; k++) {
        float lr = c->lr * (1.0f + 0.25f * (float)k);
        rig_step(&r, &rng, k, lr, k % 2 == 1, k == 3 || k == 4);
    }
    printf("  %-8s %-22s %d steps (2 skipped): rel err <= %.2g, %lld of %lld values not bit-identical\n",
           graph ? "graph" : "direct", c->name, STEPS, r.worst, (long long)r.bits_differ, (long long)r.compared);
    /* f16/bf16 momentum: the same operations and roundings on both sides, so the same bits (one differing
     * value would round to a different f16/bf16 value and the weights would drift apart) */
    if (c->o.kind == MP_OPTIM_SGD && c->low_only)
        CHECK(r.bits_differ == 0, "%s: %lld values differ from the CPU's bits", c->name, (long long)r.bits_differ);
    rig_free(&r);
}

static const optim_case optim_cases[] = {
    {"sgd", {.kind = MP_OPTIM_SGD, .weight_decay = 1e-4f}, 0.05f, 0, false, false},
    {"sgd-momentum", {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 5e-4f}, 0.05f, 0, false, false},
    {"sgd-nesterov-clip", {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true, .weight_decay = 5e-4f}, 0.05f,
     1.0f, false, false},
    {"adam", {.kind = MP_OPTIM_ADAM, .weight_decay = 0.01f}, 1e-3f, 0, false, false},
    {"adamw", {.kind = MP_OPTIM_ADAMW, .weight_decay = 0.05f}, 1e-3f, 0, false, false},
    {"adamw-betas-clip", {.kind = MP_OPTIM_ADAMW, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 0.1f},
     2e-3f, 1.0f, false, false},
    {"adam-beta1-0-as-given", {.kind = MP_OPTIM_ADAM, .beta2 = 0.9f, .weight_decay = 0.01f, .betas_as_given = true},
     1e-3f, 0, false, false},
    {"sgd-momentum-no-master", {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 5e-4f}, 0.05f, 0, true,
     false},
    {"adam-no-master", {.kind = MP_OPTIM_ADAM, .weight_decay = 0.01f}, 1e-3f, 0, true, false},
    {"sgd-momentum-low-only", {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 5e-4f}, 0.05f, 0, true, true},
    {"adamw-low-only", {.kind = MP_OPTIM_ADAMW, .weight_decay = 0.05f}, 1e-3f, 0, true, true},
    {"sgd-nesterov-low-only", {.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true, .weight_decay = 5e-4f},
     0.05f, 0, true, true}, /* no clipping: the device's norm may differ in the last bit, and so the gradients */
};

static void test_optimizers(void) {
    for (size_t i = 0; i < sizeof optim_cases / sizeof optim_cases[0]; i++) run_case(&optim_cases[i], false);
}

/* The post-backward step captured once (global capture mode: any host
 * synchronization inside would fail the capture) and replayed with new
 * gradients and a new learning rate each step. */
static void test_graph_step(void) {
    run_case(&optim_cases[2], true);
    run_case(&optim_cases[5], true);
    run_case(&optim_cases[10], true); /* f16/bf16 momentum */
}

/* ---- checkpoint transfer ------------------------------------------------------ */

/* A host optimizer over fresh host buffers of the rig's shapes: where a
 * checkpoint keeps the device state. */
static mp_optim *host_optim_like(const optim_case *c, float **h) {
    mp_param_ref ref[PT];
    for (int t = 0; t < PT; t++) {
        h[t] = calloc((size_t)param_sizes[t], sizeof(float));
        ref[t] = (mp_param_ref){.param = h[t], .grad = h[t], .n = param_sizes[t], .decay = param_decay[t],
                                .state_dtype = case_state_dtype(c, t)};
    }
    mp_optim *o = NULL;
    CHECK_OK(mp_optim_create(c->o, ref, PT, &o));
    return o;
}

/* Host state buffers and step counts of two host optimizers that differ. */
static int64_t host_state_diffs(const mp_optim *a, const mp_optim *b) {
    int64_t k = mp_optim_step_count(a) != mp_optim_step_count(b);
    for (int t = 0; t < PT; t++) {
        float *ba[2] = {NULL, NULL}, *bb[2] = {NULL, NULL};
        int nb = mp_optim_state_tensors(a, t, ba);
        mp_optim_state_tensors(b, t, bb);
        for (int j = 0; j < nb; j++) k += bit_diffs(ba[j], bb[j], param_sizes[t], sizeof(float));
    }
    return k;
}

/* The same scaled gradients into both rigs' device gradients. */
static void same_gradients(rig *a, rig *b, mp_rng *rng) {
    for (int t = 0; t < PT; t++) {
        fill_normal(a->h_grad[t], param_sizes[t], rng, 0.01 * mp_scaler_scale(&a->cs));
        up(a->d_grad[t], a->h_grad[t], (size_t)param_sizes[t] * sizeof(float));
        up(b->d_grad[t], a->h_grad[t], (size_t)param_sizes[t] * sizeof(float));
    }
}

/* Rig a takes 3 steps (one skipped); its optimizer and scaler state go to
 * the host and back into rig b (fresh state, a's parameters and low copies
 * copied over, its step already captured as a CUDA graph): b must then hold
 * a's state bit for bit, a second download must equal the first, and 2 more
 * steps (b replaying its graph, a called directly) must leave both equal. */
static void state_transfer_case(const optim_case *c) {
    rig a, b;
    rig_init(&a, c, 1234);
    rig_init(&b, c, 4321);
    rig_capture(&b);
    mp_rng rng;
    mp_rng_seed(&rng, 99);
    for (int k = 0; k < 3; k++) rig_step(&a, &rng, k, c->lr, false, k == 1);
    float *h1[PT], *h2[PT];
    mp_optim *saved = host_optim_like(c, h1), *again = host_optim_like(c, h2);
    mp_scaler saved_scaler = a.cs, again_scaler = a.cs;
    CHECK_OK(mp_cuda_optim_download(ctx, a.gpu, saved));
    CHECK_OK(mp_cuda_scaler_download(ctx, a.gs, &saved_scaler));
    CHECK(mp_optim_step_count(saved) == 2, "%s: downloaded step count %lld after 3 steps, one skipped", c->name,
          (long long)mp_optim_step_count(saved));
    for (int t = 0; t < PT; t++) {
        const size_t n = (size_t)param_sizes[t];
        const enum cudaMemcpyKind d2d = cudaMemcpyDeviceToDevice;
        CHECK(cudaMemcpyAsync(b.d_param[t], a.d_param[t], n * sizeof(float), d2d, ctx->stream) == cudaSuccess &&
                  (!a.d_low[t] || cudaMemcpyAsync(b.d_low[t], a.d_low[t], n * 2, d2d, ctx->stream) == cudaSuccess),
              "copy parameters");
    }
    sync_stream();
    CHECK_OK(mp_cuda_optim_upload(ctx, saved, b.gpu));
    CHECK_OK(mp_cuda_scaler_upload(ctx, &saved_scaler, b.gs));
    snapshot sa, sb;
    take_snapshot(&a, &sa);
    take_snapshot(&b, &sb);
    int64_t restored_diffs = snapshot_diffs(&sa, &sb);
    CHECK(restored_diffs == 0, "%s: %lld values differ after the upload", c->name, (long long)restored_diffs);
    free_snapshot(&sa);
    free_snapshot(&sb);
    CHECK_OK(mp_cuda_optim_download(ctx, b.gpu, again));
    CHECK_OK(mp_cuda_scaler_download(ctx, b.gs, &again_scaler));
    int64_t round_trip_diffs = host_state_diffs(saved, again);
    CHECK(round_trip_diffs == 0, "%s: download -> upload -> download changed %lld values", c->name,
          (long long)round_trip_diffs);
    CHECK(memcmp(&saved_scaler, &again_scaler, sizeof saved_scaler) == 0, "%s: the scaler state changed", c->name);

    for (int k = 0; k < 2; k++) {
        same_gradients(&a, &b, &rng);
        const float lr = c->lr * (1.5f + (float)k);
        CHECK_OK(mp_cuda_set_f32(ctx, b.d_lr, lr));
        CHECK(cudaGraphLaunch(b.graph, ctx->stream) == cudaSuccess, "graph launch");
        rig_device_calls(&a, lr, false, false);
        sync_stream();
    }
    take_snapshot(&a, &sa);
    take_snapshot(&b, &sb);
    int64_t step_diffs = snapshot_diffs(&sa, &sb);
    mp_scaler after_a = a.cs, after_b = a.cs;
    CHECK_OK(mp_cuda_scaler_download(ctx, a.gs, &after_a));
    CHECK_OK(mp_cuda_scaler_download(ctx, b.gs, &after_b));
    step_diffs += memcmp(&after_a, &after_b, sizeof after_a) != 0;
    CHECK(step_diffs == 0, "%s: 2 steps after the restore differ from 2 steps without it in %lld values (scaler: 1)",
          c->name, (long long)step_diffs);
    printf("  state transfer %-18s round trip bit-exact (%lld, %lld values differ); 2 steps after the restore "
           "(graph replay) equal 2 without it (%lld differ)\n",
           c->name, (long long)restored_diffs, (long long)round_trip_diffs, (long long)step_diffs);
    free_snapshot(&sa);
    free_snapshot(&sb);
    mp_optim_destroy(saved);
    mp_optim_destroy(again);
    for (int t = 0; t < PT; t++) {
        free(h1[t]);
        free(h2[t]);
    }
    rig_free(&a);
    rig_free(&b);
}

/* A host optimizer of another kind or parameter list is refused, naming why. */
static void state_transfer_mismatch(void) {
    float *h[PT];
    mp_optim *adam = host_optim_like(&optim_cases[3], h);
    rig r;
    rig_init(&r, &optim_cases[1], 7);
    CHECK_ERR(mp_cuda_optim_download(ctx, r.gpu, adam), MP_ERR_INVALID_ARG, "host optimizer is adam");
    CHECK_ERR(mp_cuda_optim_upload(ctx, adam, r.gpu), MP_ERR_INVALID_ARG, "host optimizer is adam");
    mp_optim *few = NULL;
    mp_param_ref one = {.param = h[0], .grad = h[0], .n = param_sizes[0]};
    CHECK_OK(mp_optim_create(optim_cases[1].o, &one, 1, &few));
    CHECK_ERR(mp_cuda_optim_download(ctx, r.gpu, few), MP_ERR_INVALID_ARG, "1 parameters", "device's 5");
    mp_optim_destroy(few);
    mp_optim_destroy(adam);
    for (int t = 0; t < PT; t++) free(h[t]);
    rig_free(&r);
}

static void test_state_transfer(void) {
    for (size_t i = 0; i < sizeof optim_cases / sizeof optim_cases[0]; i++) state_transfer_case(&optim_cases[i]);
    state_transfer_mismatch();
}

/* ---- gradients kept in f16/bf16 beside fp32 masters --------------------------- */

/* A low_grads plan's conv filters under amp: fp32 master, a low copy, the
 * gradient in the copy's dtype. SGD (momentum, Nesterov, weight decay) reads
 * it widened exactly, four at a time where aligned and element by element in
 * the tails, so its step equals, bit for bit, the device step over f32
 * gradients holding the same values, and the CPU step within 1e-6; the low
 * copies equal mp_convert of the masters. */
static void low_grad_case(const char *name, mp_optim_opts o) {
    mp_rng rng;
    mp_rng_seed(&rng, 77);
    float *h_param[PT], *h_grad[PT], *d_param[2][PT], *d_grad32[PT];
    void *d_grad_low[PT], *d_low[2][PT];
    mp_param_ref cref[PT];
    mp_cuda_param_ref lref[PT], fref[PT];
    for (int t = 0; t < PT; t++) {
        const size_t n = (size_t)param_sizes[t], lb = param_low[t] == MP_DTYPE_F32 ? 4 : 2;
        h_param[t] = malloc(n * sizeof(float));
        h_grad[t] = malloc(n * sizeof(float));
        fill_normal(h_param[t], (int64_t)n, &rng, 0.1);
        d_grad32[t] = dev_alloc(n * sizeof(float));
        d_grad_low[t] = lb == 2 ? dev_alloc(n * 2) : d_grad32[t]; /* an f32 weight keeps an f32 gradient */
        for (int v = 0; v < 2; v++) {
            d_param[v][t] = dev_alloc(n * sizeof(float));
            up(d_param[v][t], h_param[t], n * sizeof(float));
            d_low[v][t] = lb == 2 ? dev_alloc(n * 2) : NULL;
        }
        cref[t] = (mp_param_ref){.param = h_param[t], .grad = h_grad[t], .n = (int64_t)n, .decay = param_decay[t]};
        for (int v = 0; v < 2; v++) {
            mp_cuda_param_ref *r = v ? &fref[t] : &lref[t];
            *r = (mp_cuda_param_ref){.param = d_param[v][t], .grad = v ? d_grad32[t] : d_grad_low[t],
                                     .low = d_low[v][t], .low_dtype = param_low[t], .n = (int64_t)n,
                                     .decay = param_decay[t], .name = name};
            if (!v) r->grad_dtype = param_low[t]; /* F32 for the tensor without a low copy */
        }
    }
    mp_optim *cpu = NULL;
    mp_cuda_optim *low = NULL, *f32 = NULL;
    CHECK_OK(mp_optim_create(o, cref, PT, &cpu));
    CHECK_OK(mp_cuda_optim_create(ctx, o, lref, PT, &low));
    CHECK_OK(mp_cuda_optim_create(ctx, o, fref, PT, &f32));
    static uint16_t bits[PMAX];
    static float dev[PMAX], dev32[PMAX];
    double worst = 0;
    int64_t differ = 0, copies_off = 0;
    for (int step = 0; step < 4 && cpu && low && f32; step++) {
        const float lr = 0.05f * (1.0f + 0.5f * (float)step);
        for (int t = 0; t < PT; t++) {
            const size_t n = (size_t)param_sizes[t];
            fill_normal(h_grad[t], (int64_t)n, &rng, 0.01);
            if (param_low[t] != MP_DTYPE_F32) mp_round_f32(h_grad[t], (int64_t)n, param_low[t]);
            up(d_grad32[t], h_grad[t], n * sizeof(float));
            if (param_low[t] == MP_DTYPE_F32) continue;
            if (param_low[t] == MP_DTYPE_F16) mp_convert_f32_to_f16(h_grad[t], (mp_f16 *)bits, n);
            else mp_convert_f32_to_bf16(h_grad[t], (mp_bf16 *)bits, n);
            up(d_grad_low[t], bits, n * 2);
        }
        mp_optim_step(cpu, lr);
        CHECK_OK(mp_cuda_optim_step(ctx, low, &(mp_cuda_step_args){.lr = lr}));
        CHECK_OK(mp_cuda_optim_step(ctx, f32, &(mp_cuda_step_args){.lr = lr}));
        sync_stream();
        for (int t = 0; t < PT; t++) {
            const size_t n = (size_t)param_sizes[t];
            down(dev, d_param[0][t], n * sizeof(float));
            down(dev32, d_param[1][t], n * sizeof(float));
            differ += bit_diffs(dev, dev32, (int64_t)n, sizeof(float));
            const double e = rel_err(dev, h_param[t], (int64_t)n);
            worst = e > worst ? e : worst;
            CHECK(e <= 1e-6, "%s step %d: tensor %d: rel err %.3g against the CPU", name, step, t, e);
            if (!d_low[0][t]) continue;
            static uint16_t want[PMAX];
            if (param_low[t] == MP_DTYPE_F16) mp_convert_f32_to_f16(dev, (mp_f16 *)want, n);
            else mp_convert_f32_to_bf16(dev, (mp_bf16 *)want, n);
            down(bits, d_low[0][t], n * 2);
            copies_off += bit_diffs(bits, want, (int64_t)n, 2);
        }
    }
    CHECK(differ == 0, "%s: %lld weights differ from the step over f32 gradients of the same values", name,
          (long long)differ);
    CHECK(copies_off == 0, "%s: %lld low-copy values differ from mp_convert of the masters", name,
          (long long)copies_off);
    printf("  %-26s 4 steps, f16/bf16 gradients: %lld weights differ from the f32-gradient step, rel err vs cpu "
           "<= %.2g, %lld copy values off\n", name, (long long)differ, worst, (long long)copies_off);
    mp_optim_destroy(cpu);
    mp_cuda_optim_destroy(low);
    mp_cuda_optim_destroy(f32);
    for (int t = 0; t < PT; t++) {
        free(h_param[t]);
        free(h_grad[t]);
        if (d_grad_low[t] != d_grad32[t]) cudaFree(d_grad_low[t]);
        cudaFree(d_grad32[t]);
        for (int v = 0; v < 2; v++) {
            cudaFree(d_param[v][t]);
            if (d_low[v][t]) cudaFree(d_low[v][t]);
        }
    }
}

static void test_low_grads(void) {
    low_grad_case("sgd-momentum-low-grads", (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f,
                                                             .weight_decay = 5e-4f});
    low_grad_case("sgd-nesterov-low-grads", (mp_optim_opts){.kind = MP_OPTIM_SGD, .momentum = 0.9f, .nesterov = true,
                                                             .weight_decay = 5e-4f});
    low_grad_case("adamw-low-grads", (mp_optim_opts){.kind = MP_OPTIM_ADAMW, .weight_decay = 0.05f});
}

/* ---- weight casts ----------------------------------------------------------- */

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_casts(void) {
    enum { N = 1 << 20 };
    static const uint32_t special[] = {
        0x477FE000, 0x477FEFFF, 0x477FF000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC12345, 0x7F800001,
        0xFFC00000, 0x80000000, 0x00000000, 0x00000001, 0x807FFFFF, 0x33800000, 0x33000000, 0x33000001,
        0x33400000, 0x38800000, 0x387FE000, 0x3F801000, 0x3F803000, 0x3F808000, 0x3F818000, 0x7F7F8000,
        0x7F7F7FFF, 0x3F800001, 0xBF808001};
    const int ns = (int)(sizeof special / sizeof special[0]);
    float *h = malloc(N * sizeof(float));
    mp_rng r;
    mp_rng_seed(&r, 5);
    for (int i = 0; i < N; i++) {
        if (i < ns) h[i] = from_bits(special[i]);
        else if (i % 2) h[i] = from_bits((uint32_t)mp_rng_next(&r)); /* every bit pattern */
        else h[i] = (float)(mp_rng_normal(&r) * exp2(-30.0 + 50.0 * mp_rng_uniform(&r)));
    }
    float *d = dev_alloc(N * sizeof(float));
    up(d, h, N * sizeof(float));
    uint16_t *d16 = dev_alloc(N * 2), *dbf = dev_alloc(N * 2), *dodd = dev_alloc(N * 2);
    mp_cuda_cast_ref pairs[3] = {{d, d16, MP_DTYPE_F16, N}, {d, dbf, MP_DTYPE_BF16, N}, {d + 1, dodd, MP_DTYPE_F16, 1001}};
    mp_cuda_casts *c = NULL;
    CHECK_OK(mp_cuda_casts_create(ctx, pairs, 3, &c));
    CHECK_OK(mp_cuda_cast_weights(ctx, c, NULL));
    uint16_t *got = malloc(N * 2), *ref = malloc(N * 2);
    down(got, d16, N * 2);
    mp_convert_f32_to_f16(h, (mp_f16 *)ref, N);
    int64_t k16 = bit_diffs(got, ref, N, 2);
    CHECK(k16 == 0, "f16 cast: %lld of %d differ from mp_convert_f32_to_f16", (long long)k16, N);
    down(got, dodd, 1001 * 2);
    CHECK(bit_diffs(got, ref + 1, 1001, 2) == 0, "f16 cast at an odd offset differs");
    down(got, dbf, N * 2);
    mp_convert_f32_to_bf16(h, (mp_bf16 *)ref, N);
    int64_t kbf = bit_diffs(got, ref, N, 2);
    CHECK(kbf == 0, "bf16 cast: %lld of %d differ from mp_convert_f32_to_bf16", (long long)kbf, N);

    /* found_inf set: the copies stay as they were. */
    int one = 1, *flag = dev_alloc(sizeof(int));
    up(flag, &one, sizeof one);
    CHECK(cudaMemsetAsync(d16, 0xff, N * 2, ctx->stream) == cudaSuccess, "memset");
    CHECK_OK(mp_cuda_cast_weights(ctx, c, flag));
    down(got, d16, N * 2);
    int64_t touched = 0;
    for (int i = 0; i < N; i++) touched += got[i] != 0xffff;
    CHECK(touched == 0, "cast with found_inf set wrote %lld values", (long long)touched);
    printf("  casts: %d values (specials, every bit pattern kind, normals) bit-identical to mp_convert (f16 %lld, "
           "bf16 %lld differ); skipped on found_inf\n", N, (long long)k16, (long long)kbf);
    mp_cuda_casts_destroy(c);
    free(h);
    free(got);
    free(ref);
    cudaFree(d);
    cudaFree(d16);
    cudaFree(dbf);
    cudaFree(dodd);
    cudaFree(flag);
}

/* ---- loss-scale sequences --------------------------------------------------- */

#define SEQ_MAX 10000

typedef struct {
    const char *name;
    mp_scaler_opts o;
    int steps;
    const char *hand;       /* '1' overflow, '0' clean, repeated; NULL: bursty */
    double p_start;         /* bursty: chance a step starts a burst of 1..max_burst overflows */
    int max_burst;
} scaler_case;

static void make_pattern(const scaler_case *c, bool *pat, uint64_t seed) {
    mp_rng r;
    mp_rng_seed(&r, seed);
    for (int i = 0; i < c->steps;) {
        if (c->hand) {
            pat[i] = c->hand[(size_t)i % strlen(c->hand)] == '1';
            i++;
        } else if (mp_rng_uniform(&r) < c->p_start) {
            int len = 1 + (int)mp_rng_below(&r, (uint64_t)c->max_burst);
            for (int k = 0; k < len && i < c->steps; k++) pat[i++] = true;
        } else {
            pat[i++] = false;
        }
    }
}

/* The device's state after an update against the host's, field by field:
 * the rule's state, the flags (cleared) and the report bookkeeping both
 * sides keep with the same rule (amp/scaler_rule.h). */
static bool same_scaler(const mp_scaler *d, const mp_scaler *h) {
    bool same = memcmp(&d->scale, &h->scale, sizeof h->scale) == 0 && d->growth_tracker == h->growth_tracker &&
                d->hysteresis_left == h->hysteresis_left && d->last_overflow_step == h->last_overflow_step &&
                d->step == h->step && d->skipped_steps == h->skipped_steps &&
                d->forward_overflows == h->forward_overflows &&
                d->consecutive_forward_overflows == h->consecutive_forward_overflows && d->found_inf == 0 &&
                h->found_inf == 0 && d->ends == h->ends && d->last_skip_end == h->last_skip_end &&
                d->forward_peak_end == h->forward_peak_end && d->last_found == h->last_found &&
                d->forward_peak == h->forward_peak &&
                memcmp(&d->last_skip_scale, &h->last_skip_scale, sizeof h->last_skip_scale) == 0;
    for (int g = 0; g < MP_SCALER_GROUPS; g++)
        same = same && d->group_found[g] == 0 && d->group_skips[g] == h->group_skips[g];
    return same;
}

/* The whole sequence is queued on the stream with no host synchronization:
 * per step the two-tensor gradient of test_scaler's drive() is copied in,
 * unscaled and checked, the state is recorded (pre), updated and recorded
 * (post); one read-back at the end is compared with mp_scaler step by step. */
static void scaler_case_run(const scaler_case *c) {
    static bool pat[SEQ_MAX];
    static float grads[SEQ_MAX][5];
    static mp_scaler pre[SEQ_MAX], post[SEQ_MAX];
    static const float bad[3] = {INFINITY, -INFINITY, NAN};
    MP_ASSERT(c->steps <= SEQ_MAX);
    make_pattern(c, pat, 77);
    for (int i = 0; i < c->steps; i++) {
        const float g[5] = {0.5f, -2.0f, 8.0f, 1.0f, pat[i] ? bad[i % 3] : 4.0f};
        memcpy(grads[i], g, sizeof g);
    }
    mp_scaler cs;
    CHECK_OK(mp_scaler_init(&cs, c->o));
    mp_scaler *gs = NULL;
    CHECK_OK(mp_cuda_scaler_create(ctx, &cs, &gs));
    float *d = dev_alloc(5 * sizeof(float));
    float *dg[2] = {d, d + 3};
    const int64_t sizes[2] = {3, 2};
    mp_cuda_grads *gl = NULL;
    CHECK_OK(mp_cuda_grads_create(ctx, dg, sizes, 2, &gl));
    mp_scaler *dpre = dev_alloc((size_t)c->steps * sizeof *dpre);
    mp_scaler *dpost = dev_alloc((size_t)c->steps * sizeof *dpost);
    const size_t sz = sizeof(mp_scaler);
    int launch_errors = 0;
    for (int i = 0; i < c->steps; i++) {
        launch_errors += cudaMemcpyAsync(d, grads[i], sizeof grads[i], cudaMemcpyHostToDevice, ctx->stream) != 0;
        launch_errors += mp_cuda_unscale_check(ctx, gs, 0, gl) != MP_OK;
        launch_errors += cudaMemcpyAsync(&dpre[i], gs, sz, cudaMemcpyDeviceToDevice, ctx->stream) != 0;
        launch_errors += mp_cuda_scaler_update(ctx, gs) != MP_OK;
        launch_errors += cudaMemcpyAsync(&dpost[i], gs, sz, cudaMemcpyDeviceToDevice, ctx->stream) != 0;
    }
    CHECK(launch_errors == 0, "scaler %s: %d failed calls: %s", c->name, launch_errors, mp_last_error());
    down(pre, dpre, (size_t)c->steps * sz);
    down(post, dpost, (size_t)c->steps * sz);

    int bad_steps = 0, first_bad = -1, skips = 0, grows = 0;
    float lo = cs.scale, hi = cs.scale;
    for (int i = 0; i < c->steps; i++) {
        float g0[3] = {0.5f, -2.0f, 8.0f}, g1[2] = {grads[i][3], grads[i][4]};
        float *gp[2] = {g0, g1};
        const float before = cs.scale;
        mp_scaler_unscale_check(&cs, gp, sizes, 2);
        bool found = mp_scaler_found_inf(&cs);
        bool skip = mp_scaler_update(&cs);
        const mp_scaler *p = &post[i];
        bool same = (pre[i].found_inf != 0) == found && pre[i].group_found[0] == pre[i].found_inf && skip == found &&
                    same_scaler(p, &cs);
        if (!same && bad_steps++ == 0) first_bad = i;
        if (!same && bad_steps <= 3)
            fprintf(stderr,
                    "  scaler %s step %d: device found %d scale %.9g tracker %d hyst %d last %lld step %lld skipped "
                    "%lld; cpu found %d scale %.9g tracker %d hyst %d last %lld step %lld skipped %lld\n",
                    c->name, i, pre[i].found_inf, (double)p->scale, p->growth_tracker, p->hysteresis_left,
                    p->last_overflow_step, p->step, p->skipped_steps, found, (double)cs.scale, cs.growth_tracker,
                    cs.hysteresis_left, (long long)cs.last_overflow_step, (long long)cs.step,
                    (long long)cs.skipped_steps);
        skips += skip;
        grows += cs.scale > before;
        if (cs.scale < lo) lo = cs.scale;
        if (cs.scale > hi) hi = cs.scale;
    }
    CHECK(bad_steps == 0, "scaler %s: %d of %d steps differ from mp_scaler, the first at step %d", c->name, bad_steps,
          c->steps, first_bad);
    mp_scaler back = cs;
    CHECK_OK(mp_cuda_scaler_download(ctx, gs, &back));
    double va[MP_SCALER_STATE_COUNT], vb[MP_SCALER_STATE_COUNT];
    mp_scaler_state_get(&cs, NULL, va, MP_SCALER_STATE_COUNT);
    mp_scaler_state_get(&back, NULL, vb, MP_SCALER_STATE_COUNT);
    CHECK(memcmp(va, vb, sizeof va) == 0, "scaler %s: downloaded checkpoint state differs", c->name);
    printf("  scaler %-24s %5d steps equal to mp_scaler (%d skipped, %d growths, scale in [%g, %g])\n", c->name,
           c->steps, skips, grows, (double)lo, (double)hi);
    mp_cuda_grads_destroy(gl);
    mp_cuda_scaler_destroy(gs);
    cudaFree(d);
    cudaFree(dpre);
    cudaFree(dpost);
}

static void test_scaler_sequences(void) {
    static const scaler_case cases[] = {
        {"gradscaler-default", {0}, 10000, NULL, 0.0003, 2},
        {"gradscaler-fast", {.growth_interval = 20}, 10000, NULL, 0.02, 3},
        {"gradscaler-to-fp32-max", {.init_scale = 0x1.0p100f, .growth_interval = 2}, 400, "0", 0, 0},
        {"apex-min-max", {.min_scale = 1.0f, .max_scale = 0x1.0p24f, .growth_interval = 10}, 10000,
         NULL, 0.05, 40},
        {"odd-factors", {.growth_factor = 3.0f, .backoff_factor = 0.3f, .min_scale = 1e-3f,
                         .max_scale = 1e5f, .growth_interval = 4}, 10000, NULL, 0.1, 6},
        {"deepspeed-hysteresis-3", {.hysteresis = 3, .growth_interval = 8}, 10000, NULL, 0.05, 5},
        {"deepspeed-h2-consecutive",
         {.hysteresis = 2, .consecutive_hysteresis = true, .growth_interval = 5}, 10000, NULL, 0.08,
         4},
        {"hand-pattern", {.hysteresis = 2, .growth_interval = 3}, 500, "0001100000111111000101", 0, 0},
        {"static", {.static_scale = true, .init_scale = 1024.0f}, 2000, NULL, 0.05, 3},
        {"floor-2^-24", {.init_scale = 0x1.0p-20f}, 200, "1", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) scaler_case_run(&cases[i]);
}

/* The forward-overflow check of the loss (the step's check after forward)
 * against the host's rule: a finite loss raises nothing; a NaN or inf one
 * raises found_inf and every group's flag to MP_FOUND_FORWARD, and the
 * update then counts a forward overflow and keeps the scale, the step count
 * and the growth tracker, as mp_scaler_forward_overflow does. */
static void test_check_loss(void) {
    static const float losses[4] = {2.5f, NAN, INFINITY, -INFINITY};
    mp_scaler cs;
    CHECK_OK(mp_scaler_init(&cs, (mp_scaler_opts){.init_scale = 1024, .growth_interval = 2}));
    mp_scaler *gs = NULL;
    CHECK_OK(mp_cuda_scaler_create(ctx, &cs, &gs));
    float *d = dev_alloc(sizeof(float));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        up(d, &losses[i], sizeof(float));
        CHECK_OK(mp_cuda_check_loss(ctx, d, gs));
        mp_scaler pre = cs, post = cs;
        CHECK_OK(mp_cuda_scaler_download(ctx, gs, &pre));
        const int want = i ? MP_FOUND_FORWARD : 0;
        bool flags = pre.found_inf == want;
        for (int g = 0; g < MP_SCALER_GROUPS; g++) flags = flags && pre.group_found[g] == want;
        CHECK(flags, "loss %g: found_inf %d, group flags %d %d %d %d, expected %d", (double)losses[i], pre.found_inf,
              pre.group_found[0], pre.group_found[1], pre.group_found[2], pre.group_found[3], want);
        CHECK_OK(mp_cuda_scaler_update(ctx, gs));
        if (i) mp_scaler_forward_overflow(&cs);
        else mp_scaler_update(&cs);
        CHECK_OK(mp_cuda_scaler_download(ctx, gs, &post));
        bad += !same_scaler(&post, &cs);
    }
    CHECK(bad == 0, "check_loss: %d of 4 updates differ from the host's", bad);
    CHECK(cs.scale == 1024.0f && cs.step == 1 && cs.growth_tracker == 1 && cs.forward_overflows == 3 &&
              cs.consecutive_forward_overflows == 3 && cs.skipped_steps == 3,
          "check_loss: host rule after 1 clean step and 3 forward overflows: scale %g step %lld tracker %d "
          "forward %lld in a row %d skipped %lld",
          (double)cs.scale, cs.step, cs.growth_tracker, cs.forward_overflows, cs.consecutive_forward_overflows,
          cs.skipped_steps);
    printf("  check_loss: finite, NaN, +inf, -inf losses: flags and updates equal the host's (scale kept at %g)\n",
           (double)cs.scale);
    mp_cuda_scaler_destroy(gs);
    cudaFree(d);
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(void) {
    mp_cuda_optim *o = NULL;
    CHECK_ERR(mp_cuda_optim_create(ctx, (mp_optim_opts){.kind = MP_OPTIM_ADAM, .momentum = 0.9f}, NULL, 0, &o),
              MP_ERR_INVALID_ARG, "--momentum");
    float *d = dev_alloc(16 * sizeof(float));
    mp_cuda_param_ref p = {.param = d, .grad = d, .low = d, .low_dtype = MP_DTYPE_F32, .n = 4, .name = "fc.weight"};
    CHECK_ERR(mp_cuda_optim_create(ctx, (mp_optim_opts){.kind = MP_OPTIM_SGD}, &p, 1, &o), MP_ERR_INVALID_ARG,
              "fc.weight", "f16 or bf16");
    p.low = NULL;
    CHECK_OK(mp_cuda_optim_create(ctx, (mp_optim_opts){.kind = MP_OPTIM_SGD}, &p, 1, &o));
    CHECK_ERR(mp_cuda_optim_step(ctx, o, &(mp_cuda_step_args){.lr = NAN}), MP_ERR_INVALID_ARG, "learning rate");
    CHECK_ERR(mp_cuda_optim_set_step_count(ctx, o, -1), MP_ERR_INVALID_ARG, "step count");
    mp_cuda_optim_destroy(o);

    /* f16/bf16 momentum only for a low copy of that dtype without master weights; Adam keeps f32 moments */
    const mp_optim_opts mom = {.kind = MP_OPTIM_SGD, .momentum = 0.9f}, adam = {.kind = MP_OPTIM_ADAM};
    mp_cuda_param_ref q = {.grad = d, .low = d + 8, .low_dtype = MP_DTYPE_BF16, .n = 4, .no_master = true,
                           .name = "conv1.weight", .state_dtype = MP_DTYPE_F16};
    CHECK_ERR(mp_cuda_optim_create(ctx, mom, &q, 1, &o), MP_ERR_INVALID_ARG, "'conv1.weight' has state dtype f16",
              "copy: bf16");
    q.state_dtype = MP_DTYPE_BF16;
    q.param = d;
    q.no_master = false;
    CHECK_ERR(mp_cuda_optim_create(ctx, mom, &q, 1, &o), MP_ERR_INVALID_ARG, "'conv1.weight' has state dtype bf16",
              "no_master: 0");
    q.no_master = true;
    q.low = NULL;
    CHECK_ERR(mp_cuda_optim_create(ctx, mom, &q, 1, &o), MP_ERR_INVALID_ARG, "state dtype bf16", "copy: none");
    q.low = d + 8;
    q.state_dtype = MP_DTYPE_F64;
    CHECK_ERR(mp_cuda_optim_create(ctx, mom, &q, 1, &o), MP_ERR_INVALID_ARG, "state dtype f64");
    q.param = NULL;
    q.state_dtype = MP_DTYPE_BF16;
    CHECK_OK(mp_cuda_optim_create(ctx, mom, &q, 1, &o));
    CHECK(o && mp_cuda_optim_state_dtype(o, 0) == MP_DTYPE_BF16, "sgd momentum of a bf16-only weight: state %s",
          o ? mp_dtype_name(mp_cuda_optim_state_dtype(o, 0)) : "(none)");
    mp_cuda_optim_destroy(o);
    o = NULL;
    CHECK_OK(mp_cuda_optim_create(ctx, adam, &q, 1, &o));
    CHECK(o && mp_cuda_optim_state_dtype(o, 0) == MP_DTYPE_F32, "adam of a bf16-only weight: state %s",
          o ? mp_dtype_name(mp_cuda_optim_state_dtype(o, 0)) : "(none)");
    mp_cuda_optim_destroy(o);
    mp_cuda_casts *c = NULL;
    mp_cuda_cast_ref cr = {d, d + 8, MP_DTYPE_F32, 4};
    CHECK_ERR(mp_cuda_casts_create(ctx, &cr, 1, &c), MP_ERR_INVALID_ARG, "f16 or bf16");
    mp_scaler zero;
    memset(&zero, 0, sizeof zero);
    mp_scaler *s = NULL;
    CHECK_ERR(mp_cuda_scaler_create(ctx, &zero, &s), MP_ERR_INVALID_ARG, "not initialized");
    cudaFree(d);
}

int main(void) {
    if (mp_cuda_device_count() == 0) {
        printf("test_cuda_optim: skipped: no CUDA device: %s\n", mp_cuda_device_list());
        return 2;
    }
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        printf("test_cuda_optim: cannot open device 0: %s\n", mp_last_error());
        return 1;
    }
    printf("test_cuda_optim on %s\n", ctx->name);
    test_pass_grid();
    test_unscale();
    test_clip();
    test_optimizers();
    test_graph_step();
    test_low_grads();
    test_state_transfer();
    test_casts();
    test_scaler_sequences();
    test_check_loss();
    test_bad_input();
    /* the elementwise passes again on the grid of a one-SM device, so that
     * each block walks several chunks of the larger tensors */
    const int sm_count = ctx->sm_count;
    ctx->sm_count = 1;
    test_unscale();
    test_low_grads();
    test_casts();
    ctx->sm_count = sm_count;
    mp_cuda_ctx_destroy(ctx);
    return test_summary("test_cuda_optim");
}
