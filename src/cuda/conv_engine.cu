/* conv_engine.cu — cuDNN graph-API convolution engines: the operation graph
 * of one pass, the heuristics' candidates, their timing, execution plans kept
 * per context, and runs through variant packs (see conv_engine.h). */
#include "cuda/conv_engine.h"
#include "cuda/cudnn_plans.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UID_X = 'x', UID_W = 'w', UID_Y = 'y' };
static const int64_t uids[3] = {UID_X, UID_W, UID_Y}; /* the (x, w, y) of every pass's variant pack */
enum { MODE_A_DEFAULT = 12, MAX_MODE_A = 64, MAX_FALLBACK = 4, MAX_CAND = MAX_MODE_A + MAX_FALLBACK };

/* How many of heuristic mode A's candidates are timed
 * (MIXPREC_CUDNN_ENGINE_CANDIDATES, 1..64; default 12). */
static int mode_a_candidates(void) {
    const int e = mp_env_get()->cudnn_engine_candidates;
    const int n = e ? e : MODE_A_DEFAULT;
    return n < 1 ? 1 : n > MAX_MODE_A ? MAX_MODE_A : n;
}

#define BE_TRY(call, what) MP_CUDNN_TRY(call, what)

/* Every descriptor of one pass's graph, destroyed together (a plan may keep
 * pointers into the ones it was built from). */
typedef struct {
    cudnnBackendDescriptor_t x, w, y, conv, op, graph;
} pass_graph;

static void graph_free(pass_graph *g) {
    cudnnBackendDescriptor_t *d[] = {&g->graph, &g->op, &g->conv, &g->y, &g->w, &g->x};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (*d[i]) cudnnBackendDestroyDescriptor(*d[i]), *d[i] = NULL;
}


/* A 4-d channels-last tensor (dims n, c, h, w; strides of NHWC / KRSC). */
static mp_status make_tensor(cudnnBackendDescriptor_t *t, cudnnDataType_t dt, int64_t uid, int64_t n, int64_t c,
                             int64_t h, int64_t w, const char *what) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c}, align = 16;
    BE_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, t), what);
    BE_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt), what);
    BE_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims), what);
    BE_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides), what);
    BE_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid), what);
    BE_TRY(cudnnBackendSetAttribute(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align), what);
    BE_TRY(cudnnBackendFinalize(*t), what);
    return MP_OK;
}

static mp_status make_conv(cudnnBackendDescriptor_t *c, const mp_conv_geom *g, const char *what) {
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, dil[2] = {g->dil, g->dil}, stride[2] = {g->stride, g->stride}, pad[2] = {g->pad, g->pad};
    BE_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, c), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad), what);
    BE_TRY(cudnnBackendSetAttribute(*c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad), what);
    BE_TRY(cudnnBackendFinalize(*c), what);
    return MP_OK;
}

/* The pass's operation: its three tensor attributes in (x, w, y) roles. */
static mp_status make_op(pass_graph *pg, mp_conv_pass pass, float beta, const char *what) {
    static const cudnnBackendDescriptorType_t type[MP_CONV_NPASS] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t attr[MP_CONV_NPASS][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    const float alpha = 1.0f;
    const cudnnBackendAttributeName_t *a = attr[pass];
    BE_TRY(cudnnBackendCreateDescriptor(type[pass], &pg->op), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pg->x), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pg->w), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pg->y), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pg->conv), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[4], CUDNN_TYPE_FLOAT, 1, &alpha), what);
    BE_TRY(cudnnBackendSetAttribute(pg->op, a[5], CUDNN_TYPE_FLOAT, 1, &beta), what);
    BE_TRY(cudnnBackendFinalize(pg->op), what);
    return MP_OK;
}

/* beta: 0 writes the pass's output, 1 adds to what it holds. */
static mp_status build_graph(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, float beta,
                             pass_graph *pg, const char *what) {
    const mp_conv_geom *g = &st->g;
    const cudnnDataType_t dt = mp_cudnn_data_type(st->cd);
    memset(pg, 0, sizeof *pg);
    mp_status s = make_tensor(&pg->x, dt, UID_X, g->n, g->cx, g->hx, g->wx, what);
    if (s == MP_OK) s = make_tensor(&pg->w, dt, UID_W, g->cy, g->cx / g->groups, g->k, g->k, what);
    if (s == MP_OK) s = make_tensor(&pg->y, dt, UID_Y, g->n, g->cy, g->hy, g->wy, what);
    if (s == MP_OK) s = make_conv(&pg->conv, g, what);
    if (s == MP_OK) s = make_op(pg, pass, beta, what);
    if (s == MP_OK)
        s = mp_cudnn_check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &pg->graph),
                           "cudnnBackendCreateDescriptor(OPERATIONGRAPH)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendSetAttribute(pg->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pg->op),
                                       "cudnnBackendSetAttribute(OPERATIONGRAPH_OPS)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendSetAttribute(pg->graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                                                                CUDNN_TYPE_HANDLE, 1, &ctx->cudnn),
                                       "cudnnBackendSetAttribute(OPERATIONGRAPH_HANDLE)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendFinalize(pg->graph), "cudnnBackendFinalize(OPERATIONGRAPH)", what);
    if (s != MP_OK) graph_free(pg);
    return s;
}

static bool allowed(const mp_cudnn_engine_notes *n, bool fma_only) {
    return !n->reduced && !n->down_convert && !(fma_only && n->tensor_core);
}

mp_status mp_conv_engine_run(mp_cuda_ctx *ctx, cudnnBackendDescriptor_t plan, const void *x, const void *w,
                             const void *y, void *ws, const char *what) {
    void *ptrs[3] = {(void *)x, (void *)w, (void *)y};
    for (int i = 0; i < 3; i++) /* the graph promised cuDNN 16-byte aligned tensors */
        if ((uintptr_t)ptrs[i] % 16)
            return mp_error(MP_ERR_INTERNAL, "%s: tensor %c at %p is not 16-byte aligned (cuDNN engine plan)", what,
                            "xwy"[i], ptrs[i]);
    cudnnBackendDescriptor_t vp = NULL;
    BE_TRY(mp_cudnn_variant_pack(&vp, 3, ptrs, uids, ws), what);
    const cudnnStatus_t e = cudnnBackendExecute(ctx->cudnn, plan, vp);
    cudnnBackendDestroyDescriptor(vp);
    return mp_cudnn_check(e, "cudnnBackendExecute", what);
}

static bool debug(void) { return mp_env_get()->cudnn_debug; }

/* One timed candidate. */
typedef struct {
    float ms;
    bool det;
    size_t ws;
    int mode, index;
    long long id;
} timed_engine;

/* The rule of the legacy search (conv_algo_cache.cu): among candidates
 * within 5% of the fastest, deterministic first, then less workspace, then
 * the faster; -1 when none ran. */
static int choose(const timed_engine *c, int n) {
    float fastest = -1;
    for (int i = 0; i < n; i++)
        if (c[i].ms >= 0 && (fastest < 0 || c[i].ms < fastest)) fastest = c[i].ms;
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (c[i].ms < 0 || c[i].ms > 1.05f * fastest) continue;
        const timed_engine *b = best >= 0 ? &c[best] : NULL;
        if (!b || (c[i].det != b->det ? c[i].det : c[i].ws != b->ws ? c[i].ws < b->ws : c[i].ms < b->ms)) best = i;
    }
    return best;
}

mp_status mp_conv_engine_search(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, void *x, void *w,
                                void *y, void *ws, size_t ws_bytes, bool fma_only, mp_conv_algo *out, bool *found,
                                const char *what) {
    static const char *pass_name[MP_CONV_NPASS] = {"forward", "backward-data", "backward-filter"};
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    const int caps[2] = {mode_a_candidates(), MAX_FALLBACK};
    *found = false;
    pass_graph pg;
    MP_TRY(build_graph(ctx, st, pass, 0.0f, &pg, what));
    timed_engine cand[MAX_CAND];
    int nc = 0;
    float fastest = -1;
    if (debug()) fprintf(stderr, "cudnn engines: %s %s |", what, pass_name[pass]);
    for (int m = 0; m < 2 && fastest < 0; m++) { /* the fallback list only when mode A has nothing that runs */
        cudnnBackendDescriptor_t cfg[MAX_CAND];
        int n = 0;
        /* a mode with no answer for this graph is no error: the other may have one */
        if (mp_cudnn_heuristic_configs(pg.graph, modes[m], caps[m], cfg, &n, what) != MP_OK) mp_clear_error();
        for (int i = 0; i < n; i++) {
            mp_cudnn_engine_notes nt = {};
            int64_t need = 0;
            cudnnBackendDescriptor_t plan = NULL;
            if (mp_cudnn_engine_notes_of(cfg[i], &nt) && allowed(&nt, fma_only) &&
                (plan = mp_cudnn_finalize_plan(ctx->cudnn, cfg[i], &need)) &&
                (size_t)need <= ws_bytes && nc < MAX_CAND) {
                void *const ptrs[3] = {x, w, y};
                const float t = mp_cudnn_time_plan(ctx->cudnn, ctx->stream, plan, 3, ptrs, uids, ws,
                                                   fastest > 0 ? 4.f * fastest : 0.f);
                if (debug())
                    fprintf(stderr, " e%lld%s%s%s:%.4f:%lldK", (long long)nt.id, m ? "f" : "",
                            nt.nondeterministic ? "nd" : "", nt.runtime_compiled ? "rt" : "", (double)t,
                            (long long)(need >> 10));
                cand[nc++] = (timed_engine){t, !nt.nondeterministic, (size_t)need, (int)modes[m], i, (long long)nt.id};
                if (t >= 0 && (fastest < 0 || t < fastest)) fastest = t;
            } else if (debug() && nt.id) { /* why a listed engine was not timed */
                const char *why = !allowed(&nt, fma_only) ? (nt.reduced        ? "reduced"
                                                             : nt.down_convert ? "down-convert"
                                                                               : "fma-only")
                                  : !plan ? "no-build"
                                          : "workspace";
                fprintf(stderr, " e%lld%s:%s", (long long)nt.id, m ? "f" : "", why);
            }
            if (plan) cudnnBackendDestroyDescriptor(plan);
            cudnnBackendDestroyDescriptor(cfg[i]);
        }
    }
    const int b = choose(cand, nc);
    if (b >= 0) {
        *found = true;
        out->engine_mode = cand[b].mode;
        out->engine_index = cand[b].index;
        out->engine_id = cand[b].id;
        out->workspace = cand[b].ws;
        out->deterministic = cand[b].det;
        out->ms = cand[b].ms;
    }
    if (debug()) fprintf(stderr, " -> %s\n", b >= 0 ? "found" : "none");
    graph_free(&pg);
    return MP_OK;
}

/* ---- plans per context ---------------------------------------------------- */

typedef struct plan_entry {
    struct plan_entry *next;
    pass_graph pg;
    cudnnBackendDescriptor_t cfg, plan;
    size_t key_len;
    unsigned char key[]; /* key_len bytes */
} plan_entry;

typedef struct {
    pthread_mutex_t lock;
    plan_entry *head;
} plan_table;

static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER; /* creates ctx->conv_plans once */

static plan_table *table_of(mp_cuda_ctx *ctx) {
    pthread_mutex_lock(&tables_lock);
    if (!ctx->conv_plans) {
        plan_table *t = (plan_table *)calloc(1, sizeof *t);
        if (t) pthread_mutex_init(&t->lock, NULL);
        ctx->conv_plans = t;
    }
    pthread_mutex_unlock(&tables_lock);
    return (plan_table *)ctx->conv_plans;
}

static void entry_free(plan_entry *e) {
    if (e->plan) cudnnBackendDestroyDescriptor(e->plan);
    if (e->cfg) cudnnBackendDestroyDescriptor(e->cfg);
    graph_free(&e->pg);
    free(e);
}

/* Graph, the heuristic list of a's mode, a's config (checked to be the same
 * engine), its plan. With beta != 0 the graph differs from the searched one
 * (its output is added to), so its list may rank engines otherwise: the
 * config at the searched rank when it is a's engine (most often the variant
 * the search timed, within its workspace; its knobs are not compared), else
 * a's engine's first config wherever it is listed. */
static mp_status build_entry(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const mp_conv_algo *a,
                             float beta, plan_entry *e, const char *what) {
    if (a->engine_index < 0 || a->engine_index >= MAX_MODE_A)
        return mp_error(MP_ERR_INTERNAL, "%s: cached cuDNN choice ranked %d, beyond the %d configs listed", what,
                        a->engine_index + 1, MAX_MODE_A);
    MP_TRY(build_graph(ctx, st, pass, beta, &e->pg, what));
    cudnnBackendDescriptor_t cfg[MAX_CAND];
    int n = 0;
    const int cap = beta != 0.0f ? MAX_MODE_A : a->engine_index + 1;
    MP_TRY(mp_cudnn_heuristic_configs(e->pg.graph, (cudnnBackendHeurMode_t)a->engine_mode, cap, cfg, &n, what));
    int pick = -1;
    mp_cudnn_engine_notes nt;
    if (a->engine_index < n &&
        (beta == 0.0f || (mp_cudnn_engine_notes_of(cfg[a->engine_index], &nt) && nt.id == a->engine_id)))
        pick = a->engine_index; /* beta = 0: the searched graph's own list, its engine checked below */
    for (int i = 0; i < n && pick < 0 && beta != 0.0f; i++)
        if (mp_cudnn_engine_notes_of(cfg[i], &nt) && nt.id == a->engine_id) pick = i;
    for (int i = 0; i < n; i++)
        if (i != pick) cudnnBackendDestroyDescriptor(cfg[i]);
    if (pick < 0 && beta != 0.0f)
        return mp_error(MP_ERR_UNSUPPORTED, "%s: cuDNN engine %lld does not add to its output here", what,
                        a->engine_id);
    if (pick < 0)
        return mp_error(MP_ERR_INTERNAL, "%s: cuDNN's heuristics list %d engines now, the cached choice was number %d",
                        what, n, a->engine_index + 1);
    e->cfg = cfg[pick];
    int64_t need = 0;
    if (!mp_cudnn_engine_notes_of(e->cfg, &nt) || nt.id != a->engine_id)
        return mp_error(MP_ERR_INTERNAL, "%s: cuDNN engine %lld expected at heuristic rank %d, found %lld", what,
                        a->engine_id, a->engine_index + 1, (long long)nt.id);
    e->plan = mp_cudnn_finalize_plan(ctx->cudnn, e->cfg, &need);
    if (!e->plan) return mp_error(MP_ERR_INTERNAL, "%s: cuDNN engine %lld no longer builds", what, a->engine_id);
    if ((size_t)need > a->workspace)
        return mp_error(MP_ERR_INTERNAL, "%s: cuDNN engine %lld now needs %lld bytes of workspace, searched with %zu",
                        what, a->engine_id, (long long)need, a->workspace);
    return MP_OK;
}

mp_status mp_conv_engine_plan(mp_cuda_ctx *ctx, const mp_conv_cudnn *st, mp_conv_pass pass, const mp_conv_algo *a,
                              float beta, const void *key, size_t key_len, cudnnBackendDescriptor_t *plan,
                              const char *what) {
    *plan = NULL;
    plan_table *t = table_of(ctx);
    if (!t) return mp_error(MP_ERR_NOMEM, "%s: out of host memory for the cuDNN plan table", what);
    mp_status s = MP_OK;
    pthread_mutex_lock(&t->lock);
    for (plan_entry *e = t->head; e && !*plan; e = e->next)
        if (e->key_len == key_len && !memcmp(e->key, key, key_len)) *plan = e->plan;
    if (!*plan) {
        plan_entry *e = (plan_entry *)calloc(1, sizeof *e + key_len);
        if (!e) s = mp_error(MP_ERR_NOMEM, "%s: out of host memory for a cuDNN plan", what);
        else if ((s = build_entry(ctx, st, pass, a, beta, e, what)) != MP_OK) entry_free(e);
        else {
            e->key_len = key_len;
            memcpy(e->key, key, key_len);
            e->next = t->head;
            t->head = e;
            *plan = e->plan;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return s;
}

void mp_conv_engine_free_plans(mp_cuda_ctx *ctx) {
    plan_table *t = (plan_table *)ctx->conv_plans;
    if (!t) return;
    for (plan_entry *e = t->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
    ctx->conv_plans = NULL;
}
