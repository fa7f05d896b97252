/* env.c — the environment variables the library reads, read once into one
 * struct (mixprec/core.h: mp_env; the README lists them). Nothing else in
 * the library reads a MIXPREC_* variable except omp_policy.c (the CLI's
 * re-exec with OMP_WAIT_POLICY, marked by MIXPREC_NO_REEXEC) and
 * host_mem.c (MIXPREC_HOST_MEM_LIMIT, read at each check so that a test can
 * set it around one call); other getenv
 * calls read what is not ours to configure: the MPI launcher's rank and size
 * (dist/mpi_env.c) and PATH, to find gnuplot (bench/report_plot.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"

static mp_env g_env;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

/* Set and neither empty nor "0". */
static bool flag(const char *name) {
    const char *e = getenv(name);
    return e && *e && strcmp(e, "0") != 0;
}

static int number(const char *name, int otherwise) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) : otherwise;
}

static bool equals(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}

static void read_env(void) {
    mp_env e = {0};
    e.deterministic = flag("MIXPREC_DETERMINISTIC");
    e.no_fusion = flag("MIXPREC_NO_FUSION");
    e.cudnn_debug = flag("MIXPREC_CUDNN_DEBUG");
    e.cudnn_engines = equals("MIXPREC_CUDNN_ENGINES", "0") ? 0 : equals("MIXPREC_CUDNN_ENGINES", "force") ? 2 : 1;
    e.cudnn_engine_candidates = number("MIXPREC_CUDNN_ENGINE_CANDIDATES", 0);
    e.cudnn_bn = equals("MIXPREC_CUDNN_BN", "0") ? 0 : equals("MIXPREC_CUDNN_BN", "1") ? 1 : 2;
    e.no_bn_fast = equals("MIXPREC_BN_FAST", "0");
    e.no_bn_pipeline = equals("MIXPREC_BN_PIPELINE", "0");
    e.bn_persist = equals("MIXPREC_BN_PERSIST", "0") ? 0 : equals("MIXPREC_BN_PERSIST", "1") ? 1 : 2;
    const char *ws = getenv("MIXPREC_CUDNN_WORKSPACE_MB");
    e.cudnn_workspace_mb = ws && atof(ws) > 0 ? atof(ws) : 0;
    e.cudnn_find_trials = number("MIXPREC_CUDNN_FIND_TRIALS", 0);
    e.cudnn_find_off = equals("MIXPREC_CUDNN_FIND", "0");
    e.lt_debug = flag("MIXPREC_LT_DEBUG");
    e.poison_arena = equals("MIXPREC_POISON_ARENA", "uninit") ? 2 : flag("MIXPREC_POISON_ARENA") ? 1 : 0;
    e.dist_debug = flag("MIXPREC_DIST_DEBUG");
    e.native_bf16 = getenv("MIXPREC_NATIVE_BF16") ? (flag("MIXPREC_NATIVE_BF16") ? 1 : 0) : -1;
    e.force_scalar = flag("MIXPREC_FORCE_SCALAR");
    e.no_bn_add_relu_fusion = equals("MIXPREC_FUSE_BN_ADD_RELU", "0");
    e.bn_dw_fusion = flag("MIXPREC_FUSE_BN_DW");
    e.no_bn_pool_fusion = equals("MIXPREC_FUSE_BN_POOL", "0");
    e.no_channels_last = equals("MIXPREC_CPU_CHANNELS_LAST", "0");
    e.no_cudnn_add_dx = equals("MIXPREC_CUDNN_ADD_DX", "0");
    e.no_conv_krsc_copies = equals("MIXPREC_CONV_KRSC_COPIES", "0");
    e.no_conv_weights_krsc = equals("MIXPREC_CONV_WEIGHTS_KRSC", "0");
    e.no_dw_quad = equals("MIXPREC_DW_QUAD", "0");
    e.no_low_conv_grads = equals("MIXPREC_LOW_CONV_GRADS", "0");
    e.conv_own = equals("MIXPREC_CONV_OWN", "0") ? 0 : equals("MIXPREC_CONV_OWN", "force") ? 2 : 1;
    e.cpu_wgrad_gemm = getenv("MIXPREC_CPU_WGRAD_GEMM") ? (flag("MIXPREC_CPU_WGRAD_GEMM") ? 1 : 0) : -1;
    e.cpu_dgrad_fwd = getenv("MIXPREC_CPU_DGRAD_FWD") ? (flag("MIXPREC_CPU_DGRAD_FWD") ? 1 : 0) : -1;
    e.no_bn_pooled_windows = equals("MIXPREC_BN_POOLED_WINDOWS", "0");
    e.no_bn_dx_over_dy = equals("MIXPREC_BN_DX_OVER_DY", "0");
    e.no_add_grad_alias = equals("MIXPREC_ADD_GRAD_ALIAS", "0");
    e.no_graph_memset_kernels = equals("MIXPREC_GRAPH_MEMSET_KERNELS", "0");
    g_env = e;
}

const mp_env *mp_env_get(void) {
    pthread_once(&g_env_once, read_env);
    return &g_env;
}
