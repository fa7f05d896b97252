/* conv_algo_cache.cu — cuDNN algorithm choice for one convolution pass,
 * searched once per (GPU model, pass, conv-view geometry, dtype, math type)
 * and kept in a process-wide table, so equal layers (and plans rebuilt for
 * the same shapes) search once, and ranks that are threads of one process on
 * equal GPUs share one search (searches take turns) and so compute alike.
 *
 * Search: cudnnFind*AlgorithmEx (3 trials, median per algorithm;
 * MP_CUDNN_FIND_TRIALS=1..5) times every algorithm on scratch buffers
 * allocated here and freed after (like PyTorch's cudnn.benchmark), with a
 * workspace of at most min(4 GiB or MIXPREC_CUDNN_WORKSPACE_MB, free memory
 * / 8); when the scratch cannot be allocated, or MP_CUDNN_FIND=0, cuDNN's
 * heuristics (cudnnGet*_v7) choose. Beside Find's choice, the graph API's
 * engines (conv_engine.h: heuristic mode A's best 12, else the fallback list)
 * are timed on the same scratch and the faster is kept
 * (MIXPREC_CUDNN_ENGINES=0: the legacy algorithms only). Depthwise 3x3
 * convolutions and the passes of stems (few input channels) also time our
 * own kernels (conv_own.h) against that choice (MIXPREC_CONV_OWN=0: not;
 * =force: ours wherever they apply).
 * The fastest algorithm wins, or one within 5% of it that is deterministic
 * or, next, needs less workspace. For f32 without TF32 the math type
 * stays CUDNN_FMA_MATH whatever the search reports (PyTorch does the same);
 * otherwise the descriptor takes the math type the algorithm was timed with.
 * MIXPREC_DETERMINISTIC=1: cuDNN's heuristics choose, without timing, among
 * algorithms cuDNN calls deterministic (no atomics): the same algorithm and
 * bits every run, in every process on the same GPU model and cuDNN (so an
 * mpirun rank's micro-batch gives the bits one GPU gives it too).
 * MIXPREC_CUDNN_DEBUG=1 prints each timed search's candidates and choice. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/choice_cache.h"
#include "cuda/conv_cudnn.h"
#include "cuda/conv_engine.h"
#include "cuda/conv_own.h"

typedef struct {
    int gpu_model, pass, dtype, math, deterministic;
    int n, cx, hx, wx, cy, hy, wy, k, stride, pad, dil, groups;
} algo_key;

static mp_choice_cache cache = MP_CHOICE_CACHE_INIT(algo_key, mp_conv_algo);

/* Between two algorithms timed within 5% of each other: a deterministic one
 * beats one that is not (atomics-based; seen: cnn10's first-layer
 * backward-filter ALGO_0 timed 0.146 ms alone but cost 0.6 ms more per step
 * inside the training step, and whichever way the near-tie fell moved the
 * step between 1.5 and 2.1 ms from run to run), then less workspace (the
 * shared workspace is part of every step's peak memory). */
template <typename Perf> static bool better_tie(const Perf &a, const Perf &b) {
    const bool da = a.determinism == CUDNN_DETERMINISTIC, db = b.determinism == CUDNN_DETERMINISTIC;
    if (da != db) return da;
    return a.memory < b.memory;
}

/* What a pass may use: f32 without TF32 (fma_only) takes only algorithms
 * timed with FMA math; deterministic (MIXPREC_DETERMINISTIC=1) only
 * algorithms that give the same bits every run. */
typedef struct {
    bool fma_only, deterministic;
} pick_rules;

/* Results come sorted best first. Heuristics (timed = false): the first that
 * fits the workspace cap. Find (timed): of the results within 5% of the
 * fastest, the best by better_tie. */
template <typename Perf>
static bool pick(const Perf *r, int n, size_t cap, bool timed, pick_rules rules, mp_conv_algo *out) {
    int best = -1;
    float fastest = 0.f;
    for (int i = 0; i < n; i++) {
        if (r[i].status != CUDNN_STATUS_SUCCESS || r[i].memory > cap) continue;
        /* f32 without TF32: a time taken with tensor-op math says nothing
         * about the algorithm under CUDNN_FMA_MATH */
        if (rules.fma_only &&
            (r[i].mathType == CUDNN_TENSOR_OP_MATH || r[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
            continue;
        if (rules.deterministic && r[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (best < 0) {
            best = i;
            fastest = r[i].time;
            if (!timed) break;
        } else if (r[i].time <= 1.05f * fastest && better_tie(r[i], r[best])) {
            best = i;
        }
    }
    if (best < 0) return false;
    out->algo = (int)r[best].algo;
    out->math = r[best].mathType;
    out->workspace = r[best].memory;
    out->deterministic = r[best].determinism == CUDNN_DETERMINISTIC;
    out->ms = timed ? r[best].time : -1.f;
    out->engine_mode = -1;
    return true;
}

/* cudnnFind times each algorithm once, and a single timing moves by more
 * than the 5% that separates candidates (seen: resnet18 at 49k or 63k
 * images/s from run to run). So the search runs `trials` times and each
 * (algorithm, math type) gets the median of its timings; one that failed or
 * did not fit in any trial is out. The result is sorted fastest first. */
enum { MAXR = 16, MAX_TRIALS = 5 };

static int find_trials(void) {
    const int e = mp_env_get()->cudnn_find_trials;
    int t = e ? e : 3;
    return t < 1 ? 1 : t > MAX_TRIALS ? MAX_TRIALS : t;
}

template <typename Perf> static int median_of_trials(const Perf *all, const int *n, int trials, Perf *out) {
    int m = 0;
    for (int i = 0; i < n[0]; i++) {
        const Perf &c = all[i];
        if (c.status != CUDNN_STATUS_SUCCESS) continue;
        float t[MAX_TRIALS];
        int k = 0;
        size_t memory = c.memory;
        for (int tr = 0; tr < trials; tr++)
            for (int j = 0; j < n[tr]; j++) {
                const Perf &o = all[tr * MAXR + j];
                if (o.algo == c.algo && o.mathType == c.mathType && o.status == CUDNN_STATUS_SUCCESS) {
                    t[k++] = o.time;
                    if (o.memory > memory) memory = o.memory;
                    break;
                }
            }
        if (k < trials) continue;
        out[m] = c;
        out[m].time = mp_median_ms(t, k);
        out[m].memory = memory;
        m++;
    }
    for (int i = 1; i < m; i++) /* insertion sort by median time */
        for (int j = i; j > 0 && out[j].time < out[j - 1].time; j--) {
            Perf tmp = out[j];
            out[j] = out[j - 1];
            out[j - 1] = tmp;
        }
    return m;
}

/* MIXPREC_CUDNN_DEBUG=1: one stderr line per search — the choice, then
 * every candidate as algo/math[nd = not deterministic]:median ms:workspace. */
template <typename Perf>
static void debug_search(const char *what, const char *pass, const Perf *m, int nm, bool ok, const mp_conv_algo *a) {
    if (!mp_env_get()->cudnn_debug) return;
    fprintf(stderr, "cudnn: %s %s -> algo %d math %d |", what, pass, ok ? a->algo : -1, ok ? (int)a->math : -1);
    for (int i = 0; i < nm; i++)
        fprintf(stderr, " %d/%d%s:%.4f:%zuK", (int)m[i].algo, (int)m[i].mathType,
                m[i].determinism == CUDNN_DETERMINISTIC ? "" : "nd", (double)m[i].time, m[i].memory >> 10);
    fprintf(stderr, "\n");
}

/* `trials` timed searches (find(&n, results) is one cudnnFind*Ex call),
 * each algorithm's median, then pick. */
template <typename Perf, typename Find>
static bool find_and_pick(int trials, size_t ws_bytes, pick_rules rules, mp_conv_algo *out, const char *what,
                          const char *pass, Find find) {
    Perf p[MAX_TRIALS * MAXR], m[MAXR];
    int nt[MAX_TRIALS] = {0};
    for (int t = 0; t < trials; t++)
        if (find(&nt[t], p + t * MAXR) != CUDNN_STATUS_SUCCESS) return false;
    const int nm = median_of_trials(p, nt, trials, m);
    const bool ok = pick(m, nm, ws_bytes, true, rules, out);
    debug_search(what, pass, m, nm, ok, out);
    return ok;
}

/* 4 GiB: the fast backward-data algorithm of a 64-channel 3x3 convolution
 * on 32x32 at batch 2048 in f32 needs 1.07 GB (twice its input); under a
 * 1 GiB cap only ALGO_0 was left, at 300 ms instead of ~7 (cnn10 fp32 at
 * 2048 ran at 2.7k images/s, PyTorch's 20k). */
static size_t workspace_cap(void) {
    size_t free_b = 0, total = 0, cap = (size_t)4 << 30;
    const double mb = mp_env_get()->cudnn_workspace_mb; /* a lower (or higher) ceiling, for comparisons */
    if (mb > 0) cap = (size_t)(mb * 1048576.0);
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return (size_t)256 << 20;
    }
    return free_b / 8 < cap ? free_b / 8 : cap;
}

typedef struct {
    void *x, *y, *w, *ws;
    size_t ws_bytes;
} scratch;

static void scratch_free(scratch *s) {
    cudaFree(s->x);
    cudaFree(s->y);
    cudaFree(s->w);
    cudaFree(s->ws);
    memset(s, 0, sizeof *s);
}

/* Scratch tensors of the pass in cd, zeroed; false (nothing held) when the
 * memory is not there. */
static bool scratch_alloc(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, size_t cap, scratch *s) {
    const mp_conv_geom *g = &st->g;
    const size_t e = mp_dtype_size(st->cd);
    const size_t xb = (size_t)g->n * g->cx * g->hx * g->wx * e, yb = (size_t)g->n * g->cy * g->hy * g->wy * e;
    const size_t wb = (size_t)g->cy * (g->cx / g->groups) * g->k * g->k * e;
    memset(s, 0, sizeof *s);
    bool ok = cudaMalloc(&s->x, xb) == cudaSuccess && cudaMalloc(&s->y, yb) == cudaSuccess &&
              cudaMalloc(&s->w, wb) == cudaSuccess;
    for (s->ws_bytes = cap; ok && s->ws_bytes && cudaMalloc(&s->ws, s->ws_bytes) != cudaSuccess; s->ws_bytes /= 4)
        (void)cudaGetLastError();
    if (ok && s->ws_bytes == 0) s->ws = NULL;
    ok = ok && cudaMemsetAsync(s->x, 0, xb, ctx->stream) == cudaSuccess &&
         cudaMemsetAsync(s->y, 0, yb, ctx->stream) == cudaSuccess &&
         cudaMemsetAsync(s->w, 0, wb, ctx->stream) == cudaSuccess;
    if (!ok) {
        (void)cudaGetLastError();
        scratch_free(s);
    }
    return ok;
}

static bool find_enabled(void) {
    return !mp_env_get()->cudnn_find_off;
}

static bool engines_enabled(void) {
    return mp_env_get()->cudnn_engines != 0;
}

/* MIXPREC_CUDNN_ENGINES=force (tests): an engine that runs wins. */
static bool engines_forced(void) {
    return mp_env_get()->cudnn_engines == 2;
}

/* The graph API's engines (conv_engine.h) against the legacy choice *out
 * (have_legacy), on the same scratch, both by GPU time (cudnnFind's median
 * for the legacy one; timing it here around cudnnConvolution* calls measured
 * up to 300 ms for kernels of 0.3 ms: the legacy entry points do host work
 * per call, which a CUDA graph replay does not repeat). Find's time of a
 * single call includes its launch gap where the engine's is 4 queued runs,
 * so for kernels of a few microseconds the comparison leans towards the
 * engine; the training step's own timing is the judge (bench notes v0.11:
 * +3.4% / +5.0% images/s with engines on resnet18). An engine replaces
 * it when faster by more than 3% (5% when the engine is not deterministic
 * and the legacy choice is, the tie rule above). True when *out holds a
 * choice. */
static bool try_engines(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const scratch *s,
                        pick_rules rules, bool have_legacy, mp_conv_algo *out, const char *what) {
    const float legacy_ms = have_legacy ? out->ms : -1.f;
    mp_conv_algo e = *out;
    if (!have_legacy) { /* no legacy algorithm to fall back on (algo -1) */
        e.algo = -1;
        e.math = st->math;
        e.engine_mode = -1;
    }
    bool found = false;
    if (mp_conv_engine_search(ctx, st, pass, s->x, s->w, s->y, s->ws, s->ws_bytes, rules.fma_only, &e, &found,
                              what) != MP_OK) {
        mp_clear_error(); /* the graph API failing for this pass leaves the legacy choice */
        return have_legacy;
    }
    if (mp_env_get()->cudnn_debug)
        fprintf(stderr, "cudnn: %s pass %d: legacy algo %d %.4f ms, engine %lld %.4f ms\n", what, (int)pass,
                have_legacy ? out->algo : -1, (double)legacy_ms, found ? e.engine_id : -1LL,
                (double)(found ? e.ms : -1.f));
    if (!found) return have_legacy;
    const float margin = e.deterministic || !out->deterministic ? 0.97f : 0.95f;
    if (have_legacy && legacy_ms >= 0 && e.ms >= margin * legacy_ms && !engines_forced()) return true;
    *out = e;
    return true;
}

/* Our kernels (conv_own.h: depthwise or stem) against the choice so far
 * (*out, when have), on the same scratch, timed as the engines are (4 runs
 * queued back to back); they replace it when faster by more than 3%, and
 * under MIXPREC_CONV_OWN=force wherever they apply. They are deterministic.
 * True when *out holds a choice. */
static bool try_own(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const scratch *s, bool have,
                    mp_conv_algo *out, const char *what) {
    const int mode = mp_env_get()->conv_own;
    const mp_own_family family = mp_own_family_of(&st->g, st->cd, pass);
    if (!mode || family == MP_OWN_NONE) return have;
    const size_t need = mp_own_workspace(ctx, &st->g, st->cd, pass);
    if (need > s->ws_bytes || (need && !s->ws)) return have;
    float ms = -1.f;
    if (mp_own_time(ctx, &st->g, st->cd, pass, s->x, s->w, s->y, s->ws, s->ws_bytes, &ms, what) != MP_OK) {
        if (mp_env_get()->cudnn_debug) fprintf(stderr, "cudnn: %s pass %d: ours failed: %s\n", what, (int)pass,
                                               mp_last_error());
        mp_clear_error();
        return have;
    }
    if (mp_env_get()->cudnn_debug)
        fprintf(stderr, "cudnn: %s pass %d: cuDNN's choice %.4f ms, ours (%s) %.4f ms\n", what, (int)pass,
                (double)(have ? out->ms : -1.f), mp_own_family_name(family), (double)ms);
    if (have && out->ms >= 0 && ms >= 0.97f * out->ms && mode != 2) return true;
    const cudnnMathType_t math = have ? out->math : st->math;
    *out = mp_conv_algo_own(ctx, st, pass, ms);
    out->math = math;
    return true;
}

mp_conv_algo mp_conv_algo_own(const mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, float ms) {
    mp_conv_algo own;
    memset(&own, 0, sizeof own);
    own.algo = -1;
    own.math = st->math;
    own.workspace = mp_own_workspace(ctx, &st->g, st->cd, pass);
    own.deterministic = true;
    own.ms = ms;
    own.engine_mode = -1;
    own.own = true;
    return own;
}

/* Search one pass: Find on scratch (and the graph API's engines and our
 * depthwise kernels beside its choice), else heuristics. */
static mp_status search(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, mp_conv_algo *out,
                        const char *what) {
    cudnnConvolutionDescriptor_t cv = st->conv[pass];
    const size_t cap = workspace_cap();
    const pick_rules rules = {st->math == CUDNN_FMA_MATH, mp_cuda_deterministic()};
    int n = 0;
    bool ok = false;
    scratch s;
    /* deterministic: cuDNN's heuristics choose (no timing), so the choice
     * depends only on the shape, the GPU model and cuDNN's version */
    if (!rules.deterministic && find_enabled() && scratch_alloc(ctx, st, cap, &s)) {
        const int trials = find_trials();
        if (pass == MP_CONV_FWD)
            ok = find_and_pick<cudnnConvolutionFwdAlgoPerf_t>(trials, s.ws_bytes, rules, out, what, "forward",
                                                   [&](int *n, auto *p) {
                return cudnnFindConvolutionForwardAlgorithmEx(ctx->cudnn, st->x_desc, s.x, st->w_desc, s.w, cv,
                                                              st->y_desc, s.y, MAXR, n, p, s.ws, s.ws_bytes);
            });
        else if (pass == MP_CONV_BWD_DATA)
            ok = find_and_pick<cudnnConvolutionBwdDataAlgoPerf_t>(trials, s.ws_bytes, rules, out, what,
                                                                  "backward-data",
                                                   [&](int *n, auto *p) {
                return cudnnFindConvolutionBackwardDataAlgorithmEx(ctx->cudnn, st->w_desc, s.w, st->y_desc, s.y, cv,
                                                                   st->x_desc, s.x, MAXR, n, p, s.ws, s.ws_bytes);
            });
        else
            ok = find_and_pick<cudnnConvolutionBwdFilterAlgoPerf_t>(trials, s.ws_bytes, rules, out, what,
                                                                    "backward-filter",
                                                   [&](int *n, auto *p) {
                return cudnnFindConvolutionBackwardFilterAlgorithmEx(ctx->cudnn, st->x_desc, s.x, st->y_desc, s.y, cv,
                                                                     st->w_desc, s.w, MAXR, n, p, s.ws, s.ws_bytes);
            });
        if (engines_enabled()) ok = try_engines(ctx, st, pass, &s, rules, ok, out, what);
        ok = try_own(ctx, st, pass, &s, ok, out, what);
        scratch_free(&s);
    }
    if (ok) return MP_OK;
    if (pass == MP_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[MAXR];
        MP_CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(ctx->cudnn, st->x_desc, st->w_desc, cv, st->y_desc, MAXR,
                                                            &n, p),
                     what);
        ok = pick(p, n, cap, false, rules, out);
    } else if (pass == MP_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[MAXR];
        MP_CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx->cudnn, st->w_desc, st->y_desc, cv, st->x_desc,
                                                                 MAXR, &n, p),
                     what);
        ok = pick(p, n, cap, false, rules, out);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[MAXR];
        MP_CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx->cudnn, st->x_desc, st->y_desc, cv, st->w_desc,
                                                                   MAXR, &n, p),
                     what);
        ok = pick(p, n, cap, false, rules, out);
    }
    if (!ok)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: cuDNN has no %salgorithm for this convolution pass (%d candidates%s)",
                        what, rules.deterministic ? "deterministic " : "", n,
                        rules.deterministic ? "; MIXPREC_DETERMINISTIC=1 excludes the others" : "");
    return MP_OK;
}

/* The exact workspace of the chosen algorithm under the final math type. */
static mp_status workspace_of(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const mp_conv_algo *a,
                              size_t *bytes, const char *what) {
    cudnnConvolutionDescriptor_t cv = st->conv[pass];
    if (pass == MP_CONV_FWD)
        MP_CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(ctx->cudnn, st->x_desc, st->w_desc, cv, st->y_desc,
                                                             (cudnnConvolutionFwdAlgo_t)a->algo, bytes),
                     what);
    else if (pass == MP_CONV_BWD_DATA)
        MP_CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx->cudnn, st->w_desc, st->y_desc, cv, st->x_desc,
                                                                  (cudnnConvolutionBwdDataAlgo_t)a->algo, bytes),
                     what);
    else
        MP_CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx->cudnn, st->x_desc, st->y_desc, cv,
                                                                    st->w_desc,
                                                                    (cudnnConvolutionBwdFilterAlgo_t)a->algo, bytes),
                     what);
    return MP_OK;
}

/* Search one pass (under cache.search), settle its math type and exact
 * workspace, and cache the choice under k. */
static mp_status search_and_cache(mp_cuda_ctx *ctx, mp_conv_cudnn *st, mp_conv_pass pass, const algo_key *k,
                                  mp_conv_algo *a, const char *what) {
    MP_TRY(search(ctx, st, pass, a, what));
    if (st->math == CUDNN_FMA_MATH) a->math = CUDNN_FMA_MATH; /* f32 stays free of TF32 */
    MP_CUDNN_TRY(cudnnSetConvolutionMathType(st->conv[pass], a->math), what);
    size_t bytes = 0;
    if (a->engine_mode < 0 && !a->own) MP_TRY(workspace_of(ctx, st, pass, a, &bytes, what)); /* engines', ours exact */
    if (bytes > a->workspace) a->workspace = bytes;
    mp_choice_put(&cache, k, a);
    return MP_OK;
}

/* The context's plan of engine choice *a (keyed by k and the choice). When
 * this context cannot rebuild it (another cuDNN answer on an equal GPU
 * model), the legacy algorithm searched beside it runs instead, with its own
 * workspace; without one the error stands. */
/* A plan's key in the context's table: the pass, the choice and beta. */
typedef struct {
    algo_key k;
    int mode, index, beta;
    long long id;
} plan_key;

static plan_key plan_key_of(const algo_key *k, const mp_conv_algo *a, int beta) {
    plan_key pk;
    memset(&pk, 0, sizeof pk); /* compared with memcmp, padding included */
    pk.k = *k;
    pk.mode = a->engine_mode, pk.index = a->engine_index, pk.id = a->engine_id, pk.beta = beta;
    return pk;
}

static mp_status engine_plan_or_legacy(mp_cuda_ctx *ctx, mp_conv_cudnn *st, mp_conv_pass pass, const algo_key *k,
                                       mp_conv_algo *a, const char *what) {
    plan_key pk = plan_key_of(k, a, 0);
    const mp_status s = mp_conv_engine_plan(ctx, st, pass, a, 0.0f, &pk, sizeof pk, &st->plan[pass], what);
    if (s == MP_OK || a->algo < 0) return s;
    fprintf(stderr, "mixprec: warning: %s: %s; the legacy algorithm %d runs instead\n", what, mp_last_error(),
            a->algo);
    mp_clear_error();
    a->engine_mode = -1;
    size_t bytes = 0;
    MP_TRY(workspace_of(ctx, st, pass, a, &bytes, what));
    a->workspace = bytes;
    return MP_OK;
}

/* conv2d's backward-data adding into a gradient another consumer wrote
 * (mp_cuda_op_vtable.adds_input_grad): the legacy algorithms blend with
 * beta = 1 as they are; an engine needs a plan of its own, with the same
 * engine and workspace. Where cuDNN has none, the executor adds a scratch
 * result instead, as before (MIXPREC_CUDNN_ADD_DX=0 keeps that everywhere). */
static void choose_adding_dx(mp_cuda_ctx *ctx, mp_conv_cudnn *st, const algo_key *k, const char *what) {
    const mp_conv_algo *a = &st->algo[MP_CONV_BWD_DATA];
    if (mp_env_get()->no_cudnn_add_dx) return;
    if (a->engine_mode < 0) {
        st->adds_dx = true;
        return;
    }
    plan_key pk = plan_key_of(k, a, 1);
    if (mp_conv_engine_plan(ctx, st, MP_CONV_BWD_DATA, a, 1.0f, &pk, sizeof pk, &st->plan_add_dx, what) == MP_OK)
        st->adds_dx = true;
    else {
        if (mp_env_get()->cudnn_debug) fprintf(stderr, "cudnn engines: %s: no adding plan: %s\n", what, mp_last_error());
        mp_clear_error();
    }
}

mp_status mp_conv_algo_choose(mp_cuda_ctx *ctx, mp_conv_cudnn *st, mp_conv_pass pass, const char *what) {
    const mp_conv_geom *g = &st->g;
    const algo_key k = {mp_cuda_gpu_model(ctx), (int)pass, (int)st->cd, (int)st->math, mp_cuda_deterministic(),
                        g->n, g->cx, g->hx, g->wx, g->cy, g->hy, g->wy, g->k, g->stride, g->pad, g->dil,
                        g->groups}; /* ints only: memcmp */
    mp_conv_algo a;
    memset(&a, 0, sizeof a);
    mp_status s = MP_OK;
    if (!mp_choice_get(&cache, &k, &a)) {
        pthread_mutex_lock(&cache.search); /* a second rank waits and finds the first one's choice */
        if (!mp_choice_get(&cache, &k, &a)) s = search_and_cache(ctx, st, pass, &k, &a, what);
        pthread_mutex_unlock(&cache.search);
    }
    MP_TRY(s);
    MP_CUDNN_TRY(cudnnSetConvolutionMathType(st->conv[pass], a.math), what);
    if (a.engine_mode >= 0) MP_TRY(engine_plan_or_legacy(ctx, st, pass, &k, &a, what));
    st->algo[pass] = a;
    if (pass == MP_CONV_BWD_DATA && st->kind == MP_OP_CONV2D && st->training) choose_adding_dx(ctx, st, &k, what);
    return MP_OK;
}
