/* env.c — the environment variables the library reads, read once into one
 * struct (mixprec/core.h: mp_env; the README lists them). Nothing else in
 * the library calls getenv, apart from OMP_WAIT_POLICY in omp_policy.c,
 * which belongs to the OpenMP runtime. */
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
    e.cudnn_debug = getenv("MIXPREC_CUDNN_DEBUG") != NULL;
    e.cudnn_engines = equals("MIXPREC_CUDNN_ENGINES", "0") ? 0 : equals("MIXPREC_CUDNN_ENGINES", "force") ? 2 : 1;
    e.cudnn_engine_candidates = number("MIXPREC_CUDNN_ENGINE_CANDIDATES", 0);
    e.cudnn_bn = equals("MIXPREC_CUDNN_BN", "0") ? 0 : 1;
    const char *ws = getenv("MIXPREC_CUDNN_WORKSPACE_MB");
    e.cudnn_workspace_mb = ws && atof(ws) > 0 ? atof(ws) : 0;
    e.cudnn_find_trials = number("MIXPREC_CUDNN_FIND_TRIALS", 0);
    e.cudnn_find_off = equals("MIXPREC_CUDNN_FIND", "0");
    e.lt_debug = getenv("MIXPREC_LT_DEBUG") != NULL;
    e.poison_arena = equals("MIXPREC_POISON_ARENA", "uninit") ? 2 : flag("MIXPREC_POISON_ARENA") ? 1 : 0;
    e.dist_debug = getenv("MIXPREC_DIST_DEBUG") != NULL;
    e.native_bf16 = getenv("MIXPREC_NATIVE_BF16") ? (flag("MIXPREC_NATIVE_BF16") ? 1 : 0) : -1;
    e.force_scalar = flag("MIXPREC_FORCE_SCALAR");
    g_env = e;
}

const mp_env *mp_env_get(void) {
    pthread_once(&g_env_once, read_env);
    return &g_env;
}
