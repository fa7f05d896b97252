/* test_cuda_bn_persist.c — batchnorm2d_persist.h's one-kernel training
 * passes against the fast kernels' three (batchnorm2d_fast.h) and the host.
 * Each phase of a one-kernel pass runs the fast kernels' block code, so with
 * the same chunks its partial sums are bit for bit theirs, and its output
 * (y; dx and the residual's gradient) is bit for bit what the fast apply
 * and dx kernels make from the coefficients it wrote. Its finalize is
 * checked against the host's double-precision statistics: mean, 1/std,
 * scale, shift, the running statistics, dgamma, dbeta; and the three-kernel
 * finalize (batchnorm2d_finalize.h) from the same partials writes its bits,
 * forward and backward, and over 777 partials the host's. Also: the fused
 * ReLU's recomputed mask gives the stored output's (bit for bit), dx_add,
 * a grid larger than the device holds is cut to what it holds (no hang),
 * and a dtype the kernels do not take is refused. f32, f16, bf16. Exit 1
 * on any failure, 2 when no GPU can be opened. Run by scripts/gpu-check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda/batchnorm2d_persist.h"
#include "cuda/cuda_ctx.h"

static int n_run, n_failed;

static void expect(bool ok, const char *what) {
    n_run++;
    if (!ok) n_failed++, printf("FAIL: %s\n", what);
}

typedef struct {
    mp_dtype dt;
    int C, max_blocks;
    long long M;
    bool relu, resid;
} bn_case;

static bool close_to(double got, double want, double tol) { return fabs(got - want) <= tol; }

/* Device buffers of one case. */
typedef struct {
    void *x, *resid, *y, *y3, *dy, *dx, *dx3, *dr, *dr3;
    float *part, *part3, *save, *coef_f, *coef_b, *rmean, *rvar, *gamma, *beta, *dgamma, *dbeta;
} bn_dev;

static bool dev_alloc(bn_dev *d, size_t bytes, int C, int G) {
    memset(d, 0, sizeof *d);
    void **act[] = {&d->x, &d->resid, &d->y, &d->y3, &d->dy, &d->dx, &d->dx3, &d->dr, &d->dr3};
    for (size_t i = 0; i < sizeof act / sizeof act[0]; i++)
        if (cudaMalloc(act[i], bytes) != cudaSuccess) return false;
    float **f[] = {&d->part, &d->part3};
    for (size_t i = 0; i < 2; i++)
        if (cudaMalloc((void **)f[i], 2 * (size_t)G * C * 4) != cudaSuccess) return false;
    float **ch[] = {&d->save, &d->coef_f, &d->coef_b, &d->rmean, &d->rvar, &d->gamma, &d->beta, &d->dgamma, &d->dbeta};
    for (size_t i = 0; i < sizeof ch / sizeof ch[0]; i++)
        if (cudaMalloc((void **)ch[i], 4 * (size_t)C * 4) != cudaSuccess) return false;
    return true;
}

static void dev_free(bn_dev *d) {
    void *p[] = {d->x, d->resid, d->y, d->y3, d->dy, d->dx, d->dx3, d->dr, d->dr3, d->part, d->part3, d->save,
                 d->coef_f, d->coef_b, d->rmean, d->rvar, d->gamma, d->beta, d->dgamma, d->dbeta};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) cudaFree(p[i]);
}

static bool same_bytes(const void *a, const void *b, size_t bytes) {
    void *ha = malloc(bytes), *hb = malloc(bytes);
    bool same = ha && hb && cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
                cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(ha, hb, bytes);
    free(ha), free(hb);
    return same;
}

static bool to_dev(void *dst, const void *src, size_t bytes) {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}
static bool to_host(void *dst, const void *src, size_t bytes) {
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}

/* The three-kernel finalize (batchnorm2d_finalize.h) from the fast kernels'
 * partials in d->part3 (G chunks of R rows), into buffers of its own, the
 * running statistics starting from r0, r1: the one-kernel pass's finalize
 * (d->save, d->coef_f, d->rmean, d->rvar) bit for bit, the same merge in
 * the same order. */
static bool finalize_forward_same(cudaStream_t st, const bn_dev *d, const float *r0, const float *r1, int C, int G,
                                  long long M, long long R, float eps, float mom) {
    float *buf = NULL; /* save 4C, coef 3C, running mean C, running var C */
    bool ok = cudaMalloc((void **)&buf, 9 * (size_t)C * 4) == cudaSuccess;
    float *save = buf, *coef = buf + 4 * (size_t)C, *rm = coef + 3 * (size_t)C, *rv = rm + C;
    const mp_bn_fwd_out o = {d->gamma, d->beta, MP_DTYPE_F32, MP_DTYPE_F32, rm, rv, eps, mom, save, save + C, coef};
    ok = ok && to_dev(rm, r0, C * 4) && to_dev(rv, r1, C * 4) &&
         mp_bn_finalize_forward(st, d->part3, d->part3 + (size_t)G * C, C, G, M, R, C, o, NULL) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess && same_bytes(save, d->save, 4 * (size_t)C * 4) &&
         same_bytes(coef, d->coef_f, 3 * (size_t)C * 4) && same_bytes(rm, d->rmean, C * 4) &&
         same_bytes(rv, d->rvar, C * 4);
    cudaFree(buf);
    return ok;
}

/* As finalize_forward_same, the backward's: dgamma, dbeta and the dx
 * coefficients equal the one-kernel pass's (d->dgamma, d->dbeta, d->coef_b). */
static bool finalize_backward_same(cudaStream_t st, const bn_dev *d, int C, int G, long long M, float eps) {
    float *buf = NULL; /* dgamma C, dbeta C, coef 4C */
    bool ok = cudaMalloc((void **)&buf, 6 * (size_t)C * 4) == cudaSuccess;
    float *dg = buf, *db = buf + C, *coef = buf + 2 * (size_t)C;
    const mp_bn_bwd_out o = {true, d->save, d->save + C, d->rmean, d->rvar, eps, d->gamma, MP_DTYPE_F32,
                             dg, db, MP_DTYPE_F32, MP_DTYPE_F32, coef};
    ok = ok && mp_bn_finalize_backward(st, d->part3, d->part3 + (size_t)G * C, C, G, M, C, o, NULL) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess && same_bytes(dg, d->dgamma, C * 4) && same_bytes(db, d->dbeta, C * 4) &&
         same_bytes(coef, d->coef_b, 4 * (size_t)C * 4);
    cudaFree(buf);
    return ok;
}

/* The chunks a one-kernel pass takes for max_blocks blocks when the device
 * holds that many (persist_dims' arithmetic). */
static void chunks(long long M, int max_blocks, int *G, long long *R) {
    long long g = max_blocks < M ? max_blocks : M;
    *R = (M + g - 1) / g;
    *G = (int)((M + *R - 1) / *R);
}

static void run_case(mp_cuda_ctx *ctx, const bn_case *k) {
    const mp_dtype dt = k->dt;
    const int C = k->C;
    const long long M = k->M;
    const size_t n = (size_t)M * C, es = mp_dtype_size(dt), bytes = n * es;
    /* at most one block per SM: the one-kernel pass takes the chunks asked, and the fast kernels get the same */
    const bool partials = k->max_blocks <= ctx->sm_count;
    const int gp = k->max_blocks < 1024 ? k->max_blocks : 1024; /* blocks asked (the partials' scratch rows) */
    int G; /* the fast kernels' chunks: the one-kernel pass's where it holds them all; never more than scratch rows */
    long long R;
    chunks(M, gp, &G, &R);
    char label[160];
    snprintf(label, sizeof label, "%s C=%d M=%lld blocks<=%d%s%s", mp_dtype_name(dt), C, M, gp,
             k->relu ? " relu" : "", k->resid ? " +resid" : "");
    float *hx = malloc(n * 4), *hdy = malloc(n * 4), *hr = malloc(n * 4), *hy = malloc(n * 4), *hdx = malloc(n * 4);
    void *raw = malloc(bytes);
    float gamma[2048], beta[2048], r0[2048], r1[2048], save[4 * 2048], rm[2048], rv[2048], dg[2048], db[2048],
        cb[4 * 2048], cf[3 * 2048];
    bn_dev d;
    memset(&d, 0, sizeof d);
    bool ok = C <= 2048 && hx && hdy && hr && hy && hdx && raw && dev_alloc(&d, bytes, C, gp);
    mp_rng rng;
    mp_rng_seed(&rng, 0x50455253 + (uint64_t)C * 31 + (uint64_t)dt);
    for (int c = 0; ok && c < C; c++) {
        gamma[c] = (float)(1 + 0.3 * mp_rng_normal(&rng)), beta[c] = (float)(0.2 * mp_rng_normal(&rng));
        r0[c] = 0.5f, r1[c] = 2.f;
    }
    for (size_t i = 0; ok && i < n; i++) { /* channel c: mean up to ~3, scale 0.05 .. 2 */
        const int c = (int)(i % C);
        hx[i] = (float)((c % 7) * 0.5 + (0.05 + (c % 5) * 0.45) * mp_rng_normal(&rng));
        hdy[i] = (float)mp_rng_normal(&rng);
        hr[i] = (float)mp_rng_normal(&rng);
    }
    if (ok) { /* the values dt holds */
        mp_store_f32(raw, dt, hx, (int64_t)n), mp_load_f32(hx, raw, dt, (int64_t)n);
        ok = to_dev(d.x, raw, bytes);
        mp_store_f32(raw, dt, hdy, (int64_t)n), mp_load_f32(hdy, raw, dt, (int64_t)n);
        ok = ok && to_dev(d.dy, raw, bytes);
        mp_store_f32(raw, dt, hr, (int64_t)n), mp_load_f32(hr, raw, dt, (int64_t)n);
        ok = ok && to_dev(d.resid, raw, bytes) && to_dev(d.gamma, gamma, C * 4) && to_dev(d.beta, beta, C * 4) &&
             to_dev(d.rmean, r0, C * 4) && to_dev(d.rvar, r1, C * 4);
    }
    const cudaStream_t st = ctx->stream;
    const float eps = 1e-5f, mom = 0.1f;
    const mp_bn_fwd_out fo = {d.gamma, d.beta, MP_DTYPE_F32, MP_DTYPE_F32, d.rmean, d.rvar, eps, mom,
                              d.save, d.save + C, d.coef_f};
    const void *resid = k->resid ? d.resid : NULL;
    ok = ok && mp_bn_persist_forward(st, ctx->sm_count, dt, d.x, resid, d.y, M, C, gp, d.part, d.part + (size_t)gp * C,
                                     fo, k->relu) == cudaSuccess;
    /* the fast kernels from the same chunks (statistics) and coefficients (y) */
    if (partials)
        ok = ok && mp_bn_fast_stats(st, dt, d.x, M, C, G, R, d.part3, d.part3 + (size_t)G * C) == cudaSuccess;
    ok = ok && mp_bn_fast_apply(st, dt, d.x, resid, d.y3, M, C, G, R, d.coef_f, k->relu) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess;
    if (ok && partials) {
        bool same = same_bytes(d.part, d.part3, (size_t)G * C * 4) &&
                    same_bytes(d.part + (size_t)gp * C, d.part3 + (size_t)G * C, (size_t)G * C * 4);
        expect(same, label), ok = same;
    }
    if (ok && partials) { /* the three-kernel finalize from the same partials */
        char what[224];
        snprintf(what, sizeof what, "%s: the three-kernel forward finalize", label);
        expect(finalize_forward_same(st, &d, r0, r1, C, G, M, R, eps, mom), what);
    }
    if (ok) expect(same_bytes(d.y, d.y3, bytes), label);
    /* the finalize against the host's statistics */
    ok = ok && to_host(save, d.save, 4 * (size_t)C * 4) && to_host(rm, d.rmean, C * 4) && to_host(rv, d.rvar, C * 4) &&
         to_host(cf, d.coef_f, 3 * (size_t)C * 4);
    int stats_bad = 0;
    for (int c = 0; ok && c < C; c++) {
        double s = 0, q = 0;
        for (long long r = 0; r < M; r++) s += hx[r * C + c];
        const double mean = s / (double)M;
        for (long long r = 0; r < M; r++) q += (hx[r * C + c] - mean) * (hx[r * C + c] - mean);
        const double var = q / (double)M, sd = sqrt(var), invstd = 1 / sqrt(var + eps);
        stats_bad += !close_to(save[c], mean, 1e-5 * (fabs(mean) + sd)) ||
                     !close_to(save[C + c], invstd, 1e-5 * invstd) || save[2 * C + c] != gamma[c] * save[C + c] ||
                     save[3 * C + c] != beta[c] || cf[c] != save[c] || cf[C + c] != save[2 * C + c] ||
                     cf[2 * C + c] != save[3 * C + c] || !close_to(rm[c], 0.9 * 0.5 + 0.1 * mean, 1e-5 * (fabs(mean) + sd)) ||
                     !close_to(rv[c], 0.9 * 2.0 + 0.1 * q / (double)(M - 1), 1e-5 * (2 + var));
    }
    if (ok) expect(stats_bad == 0, label);
    /* backward: the mask as the op sets it (the stored output's with a residual add, else recomputed from x) */
    const mp_bn_fast_mask by_y = {.y_mask = k->relu ? d.y : NULL},
                          by_x = {.fwd_mu = k->relu ? d.save : NULL, .fwd_scale = k->relu ? d.save + 2 * C : NULL};
    const mp_bn_fast_mask mask = k->resid ? by_y : by_x;
    const mp_bn_bwd_out bo = {true, d.save, d.save + C, d.rmean, d.rvar, eps, d.gamma, MP_DTYPE_F32,
                              d.dgamma, d.dbeta, MP_DTYPE_F32, MP_DTYPE_F32, d.coef_b};
    void *dr = k->resid ? d.dr : NULL, *dr3 = k->resid ? d.dr3 : NULL;
    ok = ok && cudaMemset(d.dx, 0xFF, bytes) == cudaSuccess &&
         mp_bn_persist_backward(st, ctx->sm_count, dt, d.x, d.dy, mask, M, C, gp, d.part, d.part + (size_t)gp * C, bo,
                                d.dx, false, dr, false) == cudaSuccess;
    if (partials)
        ok = ok && mp_bn_fast_bwd_reduce(st, dt, d.x, d.dy, mask, d.save, M, C, G, R, d.part3,
                                         d.part3 + (size_t)G * C) == cudaSuccess;
    ok = ok && mp_bn_fast_dx(st, dt, d.x, d.dy, mask, d.dx3, false, dr3, false, M, C, G, R, d.coef_b) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess;
    if (ok && partials) {
        const bool same = same_bytes(d.part, d.part3, (size_t)G * C * 4) &&
                          same_bytes(d.part + (size_t)gp * C, d.part3 + (size_t)G * C, (size_t)G * C * 4);
        expect(same, label), ok = same;
    }
    if (ok && partials) {
        char what[224];
        snprintf(what, sizeof what, "%s: the three-kernel backward finalize", label);
        expect(finalize_backward_same(st, &d, C, G, M, eps), what);
    }
    if (ok) expect(same_bytes(d.dx, d.dx3, bytes) && (!dr || same_bytes(dr, dr3, bytes)), label);
    if (ok && k->relu && !k->resid) { /* the stored output's mask: the same bits */
        ok = mp_bn_persist_backward(st, ctx->sm_count, dt, d.x, d.dy, by_y, M, C, gp, d.part, d.part + (size_t)gp * C,
                                    (mp_bn_bwd_out){true, d.save, d.save + C, d.rmean, d.rvar, eps, d.gamma,
                                                    MP_DTYPE_F32, d.dgamma + C, d.dbeta + C, MP_DTYPE_F32,
                                                    MP_DTYPE_F32, d.coef_b},
                                    d.dx3, false, NULL, false) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        expect(ok && same_bytes(d.dx, d.dx3, bytes) && same_bytes(d.dgamma, d.dgamma + C, C * 4) &&
                   same_bytes(d.dbeta, d.dbeta + C, C * 4),
               label);
    }
    /* dgamma, dbeta against the host's sums; dx against the host's formula from the device's coefficients */
    ok = ok && to_host(dg, d.dgamma, C * 4) && to_host(db, d.dbeta, C * 4) && to_host(cb, d.coef_b, 4 * (size_t)C * 4);
    ok = ok && to_host(raw, d.y, bytes);
    if (ok) mp_load_f32(hy, raw, dt, (int64_t)n);
    ok = ok && to_host(raw, d.dx, bytes);
    if (ok) mp_load_f32(hdx, raw, dt, (int64_t)n);
    int grads_bad = 0;
    long long dx_bad = 0;
    const double rel = dt == MP_DTYPE_F32 ? 1e-6 : dt == MP_DTYPE_F16 ? 1e-3 : 4e-3;
    const double tiny = dt == MP_DTYPE_F16 ? 0x1p-24 : 1e-30; /* f16's subnormal spacing, below 2^-14 */
    for (int c = 0; ok && c < C; c++) {
        double sa = 0, sb = 0, abs_a = 0, abs_b = 0;
        for (long long r = 0; r < M; r++) {
            const size_t i = (size_t)(r * C + c);
            const double g = k->relu && !(hy[i] > 0) ? 0 : hdy[i];
            sa += g, sb += g * (hx[i] - save[c]), abs_a += fabs(g), abs_b += fabs(g * (hx[i] - save[c]));
        }
        const double is = save[C + c];
        grads_bad += !close_to(db[c], sa, 1e-5 * abs_a + 1e-6) || !close_to(dg[c], sb * is, 1e-5 * abs_b * is + 1e-6) ||
                     cb[c] != save[c] || cb[C + c] != gamma[c] * save[C + c] ||
                     !close_to(cb[2 * C + c], sa / (double)M, (1e-5 * abs_a + 1e-6) / (double)M) ||
                     !close_to(cb[3 * C + c], sb * is * is / (double)M, (1e-5 * abs_b + 1e-6) * is * is / (double)M);
        for (long long r = 0; r < M; r++) {
            const size_t i = (size_t)(r * C + c);
            const float g = k->relu && !(hy[i] > 0) ? 0.f : hdy[i];
            const float kk = cb[C + c], a = cb[2 * C + c], b = cb[3 * C + c], xc = hx[i] - cb[c];
            const float want = kk * (g - a - xc * b);
            /* dt's rounding of the result, and f32's of the terms (the device may fuse a multiply-add) */
            const double terms = fabs(kk) * (fabs(g) + fabs(a) + fabs(xc * b));
            dx_bad += !close_to(hdx[i], want, rel * fabs(want) + 1e-5 * terms + tiny);
        }
    }
    if (ok) expect(grads_bad == 0 && dx_bad == 0, label);
    /* the residual's gradient added into what another consumer wrote */
    if (ok && k->resid) {
        ok = to_dev(d.dr, raw, bytes) && to_dev(d.dr3, raw, bytes) &&
             mp_bn_persist_backward(st, ctx->sm_count, dt, d.x, d.dy, mask, M, C, gp, d.part, d.part + (size_t)gp * C,
                                    bo, d.dx, false, d.dr, true) == cudaSuccess &&
             mp_bn_fast_dx(st, dt, d.x, d.dy, mask, d.dx3, false, d.dr3, true, M, C, G, R, d.coef_b) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        expect(ok && same_bytes(d.dr, d.dr3, bytes), label);
    }
    /* more blocks than the device holds (as if it had 64 times its SMs): refused, and the refusal is not left
       for the next launch to find */
    if (ok && !partials) {
        const cudaError_t e = mp_bn_persist_forward(st, ctx->sm_count * 64, dt, d.x, resid, d.y, M, C, gp, d.part,
                                                    d.part + (size_t)gp * C, fo, k->relu);
        const cudaError_t after = cudaGetLastError();
        ok = mp_bn_fast_stats(st, dt, d.x, M, C, G, R, d.part3, d.part3 + (size_t)G * C) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        expect(e == cudaErrorCooperativeLaunchTooLarge && after == cudaSuccess && ok, label);
        if (e != cudaErrorCooperativeLaunchTooLarge || after != cudaSuccess)
            printf("FAIL: %s: a grid too large gave %s, then %s\n", label, cudaGetErrorString(e), cudaGetErrorString(after));
    }
    /* dx added into what another consumer wrote */
    if (ok && !k->resid) {
        ok = to_dev(d.dx, raw, bytes) && to_dev(d.dx3, raw, bytes) &&
             mp_bn_persist_backward(st, ctx->sm_count, dt, d.x, d.dy, mask, M, C, gp, d.part, d.part + (size_t)gp * C,
                                    bo, d.dx, true, NULL, false) == cudaSuccess &&
             mp_bn_fast_dx(st, dt, d.x, d.dy, mask, d.dx3, true, NULL, false, M, C, G, R, d.coef_b) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        expect(ok && same_bytes(d.dx, d.dx3, bytes), label);
    }
    char chunk_note[48];
    if (partials) snprintf(chunk_note, sizeof chunk_note, "%d chunks, partials compared", G);
    else snprintf(chunk_note, sizeof chunk_note, "cut to one block per SM");
    printf("%s: one-kernel batch norm %s (%s): stats %d off, dgamma/dbeta %d off, dx %lld off%s%s\n",
           ok && !stats_bad && !grads_bad && !dx_bad ? "ok" : "FAIL", label, chunk_note, stats_bad, grads_bad, dx_bad,
           ok ? "" : ": ", ok ? "" : cudaGetErrorString(cudaGetLastError()));
    if (!ok) expect(false, label);
    dev_free(&d);
    free(hx), free(hdy), free(hr), free(hy), free(hdx), free(raw);
}

/* The three-kernel finalize over many partials (G > the 32 slices of a
 * channel, the last chunk shorter than R): the fast kernels' statistics and
 * backward sums over 777 chunks of 5 rows (the last of 2) of 40 bf16
 * channels, finalized: the mean, 1/std and mean(dy) the host's. */
static void finalize_many_partials(mp_cuda_ctx *ctx) {
    enum { C = 40, G = 777 };
    const long long R = 5, M = (long long)G * R - 3;
    const size_t n = (size_t)M * C;
    const mp_dtype dt = MP_DTYPE_BF16;
    const cudaStream_t st = ctx->stream;
    float *hx = malloc(n * 4), *hdy = malloc(n * 4), r0[C], r1[C], gamma[C], beta[C], save[4 * C], coef_b[4 * C];
    void *raw = malloc(n * 2), *x = NULL, *dy = NULL;
    float *part = NULL, *o = NULL; /* save 4C, coef 3C, rm C, rv C, dgamma C, dbeta C, coef_b 4C, gamma C, beta C */
    bool ok = hx && hdy && raw && cudaMalloc(&x, n * 2) == cudaSuccess && cudaMalloc(&dy, n * 2) == cudaSuccess &&
              cudaMalloc((void **)&part, 2 * (size_t)G * C * 4) == cudaSuccess &&
              cudaMalloc((void **)&o, 17 * (size_t)C * 4) == cudaSuccess;
    mp_rng rng;
    mp_rng_seed(&rng, 0x46494e);
    for (int c = 0; c < C; c++)
        gamma[c] = (float)(1 + 0.3 * mp_rng_normal(&rng)), beta[c] = (float)(0.2 * mp_rng_normal(&rng)), r0[c] = 0.5f,
        r1[c] = 2.f;
    for (size_t i = 0; ok && i < n; i++)
        hx[i] = (float)((i % C) * 0.25 + mp_rng_normal(&rng)), hdy[i] = (float)mp_rng_normal(&rng);
    if (ok) {
        mp_store_f32(raw, dt, hx, (int64_t)n), mp_load_f32(hx, raw, dt, (int64_t)n);
        ok = to_dev(x, raw, n * 2);
        mp_store_f32(raw, dt, hdy, (int64_t)n), mp_load_f32(hdy, raw, dt, (int64_t)n);
        ok = ok && to_dev(dy, raw, n * 2) && to_dev(o + 15 * C, gamma, C * 4) && to_dev(o + 16 * C, beta, C * 4) &&
             to_dev(o + 7 * C, r0, C * 4) && to_dev(o + 8 * C, r1, C * 4);
    }
    const mp_bn_fwd_out fo = {o + 15 * C, o + 16 * C, MP_DTYPE_F32, MP_DTYPE_F32, o + 7 * C, o + 8 * C, 1e-5f, 0.1f,
                              o, o + C, o + 4 * C};
    const mp_bn_bwd_out bo = {true, o, o + C, o + 7 * C, o + 8 * C, 1e-5f, o + 15 * C, MP_DTYPE_F32,
                              o + 9 * C, o + 10 * C, MP_DTYPE_F32, MP_DTYPE_F32, o + 11 * C};
    const mp_bn_fast_mask none = {.y_mask = NULL};
    ok = ok && mp_bn_fast_stats(st, dt, x, M, C, G, R, part, part + (size_t)G * C) == cudaSuccess &&
         mp_bn_finalize_forward(st, part, part + (size_t)G * C, C, G, M, R, C, fo, NULL) == cudaSuccess &&
         mp_bn_fast_bwd_reduce(st, dt, x, dy, none, o, M, C, G, R, part, part + (size_t)G * C) == cudaSuccess &&
         mp_bn_finalize_backward(st, part, part + (size_t)G * C, C, G, M, C, bo, NULL) == cudaSuccess &&
         cudaStreamSynchronize(st) == cudaSuccess && to_host(save, o, sizeof save) &&
         to_host(coef_b, o + 11 * C, sizeof coef_b);
    int bad = 0;
    for (int c = 0; ok && c < C; c++) {
        double s = 0, q = 0, sa = 0, abs_a = 0;
        for (long long r = 0; r < M; r++) s += hx[r * C + c], sa += hdy[r * C + c], abs_a += fabs(hdy[r * C + c]);
        const double mean = s / (double)M;
        for (long long r = 0; r < M; r++) q += (hx[r * C + c] - mean) * (hx[r * C + c] - mean);
        const double sd = sqrt(q / (double)M), invstd = 1 / sqrt(q / (double)M + 1e-5);
        bad += !close_to(save[c], mean, 1e-5 * (fabs(mean) + sd)) || !close_to(save[C + c], invstd, 1e-5 * invstd) ||
               !close_to(coef_b[2 * C + c], sa / (double)M, (1e-5 * abs_a + 1e-6) / (double)M);
    }
    expect(ok && bad == 0, "777 partials: the finalize's mean, 1/std and mean(dy) against the host's");
    printf("%s: finalize over %d partials (%d channels off the host's)\n", ok && !bad ? "ok" : "FAIL", G, bad);
    cudaFree(x), cudaFree(dy), cudaFree(part), cudaFree(o);
    free(hx), free(hdy), free(raw);
}

int main(void) {
    mp_cuda_ctx *ctx = NULL;
    if (mp_cuda_ctx_create(0, &ctx) != MP_OK) {
        printf("test_cuda_bn_persist: no usable GPU, nothing tested: %s\n", mp_last_error());
        return 2;
    }
    if (!mp_bn_persist_supported()) {
        printf("FAIL: %s launches no cooperative kernels\n", ctx->name);
        mp_cuda_ctx_destroy(ctx);
        return 1;
    }
    const mp_dtype dts[3] = {MP_DTYPE_F32, MP_DTYPE_F16, MP_DTYPE_BF16};
    for (int i = 0; i < 3; i++) {
        const mp_dtype dt = dts[i];
        const int c_small = dt == MP_DTYPE_F32 ? 24 : 40;
        /* f32: 20 channels end in a part of the finalize's 8-channel group; f16/bf16: 56 take 3 blocks' 24 twice */
        const int c_odd = dt == MP_DTYPE_F32 ? 20 : 56;
        const bn_case cases[] = {
            {dt, c_small, 7, 3001, false, false}, {dt, c_small, 7, 3001, true, false},
            {dt, c_small, 64, 5003, true, true},  {dt, c_small, 64, 5003, false, true}, /* an add, no ReLU */
            {dt, 256, 33, 4099, true, false},
            {dt, c_odd, 3, 3001, true, false},    {dt, 512, 7, 4099, true, false}, /* the finalize: 512 > 8 x 7 */
            {dt, 512, 1000000, 65536, true, false}, /* more blocks asked than the device holds */
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) run_case(ctx, &cases[k]);
    }
    finalize_many_partials(ctx);
    /* refused, not run: a dtype the kernels do not take */
    const mp_bn_fwd_out none = {0};
    expect(mp_bn_persist_forward(ctx->stream, ctx->sm_count, MP_DTYPE_I32, NULL, NULL, NULL, 64, 8, 4, NULL, NULL,
                                 none, false) == cudaErrorInvalidValue,
           "an i32 input is refused");
    printf("test_cuda_bn_persist: %d passed, %d failed\n", n_run - n_failed, n_failed);
    mp_cuda_ctx_destroy(ctx);
    return n_failed ? 1 : 0;
}
