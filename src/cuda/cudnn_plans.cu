/* cudnn_plans.cu — see cudnn_plans.h. */
#include "cuda/cudnn_plans.h"
#include "cuda/choice_cache.h" /* mp_median_ms */
#include "cuda/cuda_ctx.h"     /* mp_cudnn_check */

#include <string.h>

mp_status mp_cudnn_heuristic_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, int cap,
                                      cudnnBackendDescriptor_t *cfg, int *n, const char *what) {
    cudnnBackendDescriptor_t heur = NULL;
    *n = 0;
    int64_t count = 0;
    mp_status s = mp_cudnn_check(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur),
                                 "cudnnBackendCreateDescriptor(ENGINEHEUR)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
                                       "cudnnBackendSetAttribute(ENGINEHEUR_OPERATION_GRAPH)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE,
                                                                1, &mode),
                                       "cudnnBackendSetAttribute(ENGINEHEUR_MODE)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendFinalize(heur), "cudnnBackendFinalize(ENGINEHEUR)", what);
    if (s == MP_OK) s = mp_cudnn_check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
                                       "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", what);
    if (s == MP_OK && count > 0) {
        const int64_t want = count < cap ? count : cap;
        int made = 0;
        while (made < want && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]) ==
                                  CUDNN_STATUS_SUCCESS)
            made++;
        if (made < want) s = mp_error(MP_ERR_NOMEM, "%s: cuDNN could not create an engine config descriptor", what);
        if (s == MP_OK) s = mp_cudnn_check(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &count, cfg),
                                           "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)", what);
        if (s == MP_OK) *n = (int)(count < want ? count : want);
        for (int i = s == MP_OK ? *n : 0; i < made; i++) cudnnBackendDestroyDescriptor(cfg[i]);
    }
    cudnnBackendDestroyDescriptor(heur);
    return s;
}

bool mp_cudnn_engine_notes_of(cudnnBackendDescriptor_t cfg, mp_cudnn_engine_notes *n) {
    memset(n, 0, sizeof *n);
    cudnnBackendDescriptor_t eng = NULL;
    int64_t cnt = 0;
    cudnnBackendNumericalNote_t num[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    bool ok = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cnt,
                                       &eng) == CUDNN_STATUS_SUCCESS &&
              cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &cnt, &n->id) ==
                  CUDNN_STATUS_SUCCESS;
    if (ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                       CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &cnt, num) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < cnt && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++) {
            n->tensor_core |= num[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
            n->nondeterministic |= num[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            n->reduced |= num[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
            n->down_convert |= num[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
        }
    else ok = false;
    if (ok && cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                       CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &cnt, beh) == CUDNN_STATUS_SUCCESS)
        for (int64_t i = 0; i < cnt && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; i++)
            n->runtime_compiled |= beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    if (eng) cudnnBackendDestroyDescriptor(eng);
    return ok;
}

cudnnBackendDescriptor_t mp_cudnn_finalize_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws) {
    cudnnBackendDescriptor_t plan = NULL;
    int64_t cnt = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
        return NULL;
    if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &cfg) ||
        cudnnBackendFinalize(plan) ||
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &cnt, ws)) {
        cudnnBackendDestroyDescriptor(plan);
        return NULL;
    }
    return plan;
}

cudnnStatus_t mp_cudnn_variant_pack(cudnnBackendDescriptor_t *vp, int n, void *const *ptrs, const int64_t *uids,
                                    void *ws) {
    cudnnStatus_t e = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, vp);
    if (e) return e;
    e = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!e) e = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!e) e = cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!e) e = cudnnBackendFinalize(*vp);
    if (e) cudnnBackendDestroyDescriptor(*vp), *vp = NULL;
    return e;
}

float mp_cudnn_time_plan(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t plan, int n,
                         void *const *ptrs, const int64_t *uids, void *ws, float cutoff) {
    enum { TRIALS = 3, RUNS = 4 };
    cudaEvent_t ev[2] = {NULL, NULL};
    cudnnBackendDescriptor_t vp = NULL;
    float t[TRIALS], warm = -1;
    bool ok = mp_cudnn_variant_pack(&vp, n, ptrs, uids, ws) == CUDNN_STATUS_SUCCESS &&
              cudaEventCreate(&ev[0]) == cudaSuccess && cudaEventCreate(&ev[1]) == cudaSuccess;
    /* The first run of an engine may load its kernels' module, or compile them from PTX (kernels cuDNN ships
     * for an older architecture, until the driver's cache holds them): tens of milliseconds for a 0.1 ms
     * kernel. A second warm-up decides where the first was over the cutoff. */
    for (int w = 0; w < 2 && ok && (w == 0 || (cutoff > 0 && warm > cutoff)); w++)
        ok = cudaEventRecord(ev[0], stream) == cudaSuccess &&
             cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS &&
             cudaEventRecord(ev[1], stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&warm, ev[0], ev[1]) == cudaSuccess;
    const bool lost = ok && cutoff > 0 && warm > cutoff;
    for (int k = 0; k < TRIALS && ok && !lost; k++) {
        ok = cudaEventRecord(ev[0], stream) == cudaSuccess;
        for (int r = 0; r < RUNS && ok; r++) ok = cudnnBackendExecute(h, plan, vp) == CUDNN_STATUS_SUCCESS;
        ok = ok && cudaEventRecord(ev[1], stream) == cudaSuccess && cudaEventSynchronize(ev[1]) == cudaSuccess &&
             cudaEventElapsedTime(&t[k], ev[0], ev[1]) == cudaSuccess;
    }
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    if (!ok) {
        (void)cudaGetLastError();
        return -1;
    }
    if (lost) return warm;
    return mp_median_ms(t, TRIALS) / RUNS;
}
