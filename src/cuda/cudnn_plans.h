/* cudnn_plans.h — what every cuDNN graph (backend) API search needs, for
 * any operation graph: the engine configs a heuristic ranks, the notes of
 * the engine behind a config, a finalized execution plan, variant packs and
 * the GPU time of a plan. conv_engine.cu searches convolution passes with
 * them; tests/gpu/test_cuda_conv_genstats probes fused graphs with the same
 * rules, so its verdicts are the search's. */
#ifndef MP_CUDA_CUDNN_PLANS_H
#define MP_CUDA_CUDNN_PLANS_H

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stdbool.h>
#include <stdint.h>

#include "mixprec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine configs heuristic `mode` ranks for graph, at most cap of them,
 * into cfg (created here; the caller destroys *n of them). */
mp_status mp_cudnn_heuristic_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode, int cap,
                                      cudnnBackendDescriptor_t *cfg, int *n, const char *what);

/* The engine behind a config: cuDNN's global index and the notes that matter. */
typedef struct {
    int64_t id;
    bool tensor_core, nondeterministic, reduced, down_convert, runtime_compiled;
} mp_cudnn_engine_notes;
bool mp_cudnn_engine_notes_of(cudnnBackendDescriptor_t cfg, mp_cudnn_engine_notes *n);

/* A finalized plan of cfg on handle h and its workspace bytes, or NULL when
 * cuDNN cannot build it here. */
cudnnBackendDescriptor_t mp_cudnn_finalize_plan(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, int64_t *ws);

/* A variant pack binding n device pointers to their tensors' unique ids, and
 * the workspace. */
cudnnStatus_t mp_cudnn_variant_pack(cudnnBackendDescriptor_t *vp, int n, void *const *ptrs, const int64_t *uids,
                                    void *ws);

/* GPU milliseconds of one run of plan on stream (the handle's): a timed
 * warm-up run, then 3 trials of 4 runs queued back to back (the host's
 * per-call cost hides behind the kernels, as inside a CUDA graph), the median
 * trial / 4; < 0 when a run fails. A warm-up slower than cutoff (> 0) is the
 * answer: the candidate has lost (a fallback engine can take seconds a run);
 * the warm-up runs a second time first, since a first run may include
 * loading or JIT-compiling the engine's kernels (so a candidate that loses
 * costs two runs). */
float mp_cudnn_time_plan(cudnnHandle_t h, cudaStream_t stream, cudnnBackendDescriptor_t plan, int n,
                         void *const *ptrs, const int64_t *uids, void *ws, float cutoff);

#ifdef __cplusplus
}
#endif
#endif
