/* sysinfo.c — see sysinfo.h. Every CUDA-side library is opened by soname
 * with dlopen and its version asked through one or two symbols, so nothing
 * here needs CUDA headers or libraries at build time. */
#define _GNU_SOURCE /* dlinfo */
#include "monitor/sysinfo.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpu_features.h"
#ifdef MP_HAVE_ONEDNN
#include "monitor/onednn_probe.h"
#include "ops/bf16_conv_math.h"
#endif

/* Opens the first loadable soname of names (NULL-terminated). On success
 * detail is the file loaded; on failure the loader's message for the first
 * name (which names a missing dependency when that is the cause). */
static void *open_first(const char *const *names, char *detail, size_t n) {
    char first_error[256] = "";
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            struct link_map *lm = NULL;
            if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
                snprintf(detail, n, "%s", lm->l_name);
            else
                snprintf(detail, n, "%s", names[i]);
            return h;
        }
        const char *e = dlerror();
        if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", e ? e : names[i]);
    }
    snprintf(detail, n, "%s", first_error);
    return NULL;
}

/* ---- GPUs through the CUDA driver ---------------------------------------- */

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_name_fn)(char *, int, int);
typedef int (*cu_mem_fn)(size_t *, int);
typedef int (*cu_attr_fn)(int *, int, int);
typedef int (*cu_errstr_fn)(int, const char **);

enum { /* CUdevice_attribute values (cuda.h) */
    CU_ATTR_CLOCK_RATE = 13,
    CU_ATTR_SM_COUNT = 16,
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
};

static const char *const cuda_driver_names[] = {"libcuda.so.1", "libcuda.so", NULL};

static const char *cu_error_name(void *h, int rc) {
    cu_errstr_fn name = (cu_errstr_fn)dlsym(h, "cuGetErrorName");
    const char *s = NULL;
    if (name && name(rc, &s) == 0 && s) return s;
    return "unknown CUDA error";
}

void mp_gpu_list_query(mp_gpu_list *out) {
    memset(out, 0, sizeof *out);
    char detail[256];
    void *h = open_first(cuda_driver_names, detail, sizeof detail);
    if (!h) {
        snprintf(out->error, sizeof out->error, "CUDA driver not found: %.200s", detail);
        return;
    }
    cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
    cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
    cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
    cu_name_fn name = (cu_name_fn)dlsym(h, "cuDeviceGetName");
    cu_mem_fn mem = (cu_mem_fn)dlsym(h, "cuDeviceTotalMem_v2");
    cu_attr_fn attr = (cu_attr_fn)dlsym(h, "cuDeviceGetAttribute");
    if (!init || !count || !get || !name || !mem || !attr) {
        snprintf(out->error, sizeof out->error, "%.200s lacks the cuDevice* functions", detail);
        return;
    }
    int rc = init(0), n = 0;
    if (rc == 0) rc = count(&n);
    if (rc != 0) {
        snprintf(out->error, sizeof out->error, "cuInit: %s", cu_error_name(h, rc));
        return;
    }
    if (n == 0) snprintf(out->error, sizeof out->error, "the CUDA driver reports no device");
    for (int i = 0; i < n && out->count < MP_MAX_GPUS; i++) {
        int dev;
        if (get(&dev, i) != 0) continue;
        mp_gpu_device *d = &out->dev[out->count++];
        if (name(d->name, (int)sizeof d->name, dev) != 0) snprintf(d->name, sizeof d->name, "GPU %d", i);
        if (mem(&d->total_bytes, dev) != 0) d->total_bytes = 0;
        int khz = 0;
        if (attr(&d->cc_major, CU_ATTR_CC_MAJOR, dev) != 0) d->cc_major = 0;
        if (attr(&d->cc_minor, CU_ATTR_CC_MINOR, dev) != 0) d->cc_minor = 0;
        if (attr(&d->sm_count, CU_ATTR_SM_COUNT, dev) != 0) d->sm_count = 0;
        if (attr(&khz, CU_ATTR_CLOCK_RATE, dev) != 0) khz = 0;
        d->clock_mhz = khz / 1000;
    }
}

unsigned mp_gpu_tensor_core_dtypes(int cc_major, int cc_minor) {
    int cc = 10 * cc_major + cc_minor;
    unsigned m = 0;
    if (cc >= 70) m |= MP_TC_FP16;
    if (cc >= 80) m |= MP_TC_BF16 | MP_TC_TF32;
    if (cc >= 89) m |= MP_TC_FP8;
    return m;
}

const char *mp_tensor_core_dtype_name(unsigned bit) {
    switch (bit) {
    case MP_TC_FP16: return "fp16";
    case MP_TC_BF16: return "bf16";
    case MP_TC_TF32: return "tf32";
    case MP_TC_FP8: return "fp8";
    default: return "?";
    }
}

/* ---- library versions ----------------------------------------------------- */

/* CUDA's 13000 -> "13.0" (driver and runtime). */
static void cuda_version(int v, char *buf, size_t n) {
    snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* X*10000+Y*100+Z (newer releases) or X*1000+Y*100+Z (older); new_from is
 * the first code of the newer scheme. */
static void coded_version(long v, long new_from, char *buf, size_t n) {
    long major_unit = v >= new_from ? 10000 : 1000;
    snprintf(buf, n, "%ld.%ld.%ld", v / major_unit, (v % major_unit) / 100, v % 100);
}

static bool query_cuda_library(mp_lib_id id, mp_lib_info *o) {
    static const char *const runtime[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so", NULL};
    static const char *const cudnn[] = {"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so", NULL};
    static const char *const cublaslt[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
                                           "libcublasLt.so", NULL};
    static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
    static const char *const nvml[] = {"libnvidia-ml.so.1", "libnvidia-ml.so", NULL};
    const char *const *names = id == MP_LIB_CUDA_DRIVER    ? cuda_driver_names
                               : id == MP_LIB_CUDA_RUNTIME ? runtime
                               : id == MP_LIB_CUDNN        ? cudnn
                               : id == MP_LIB_CUBLASLT     ? cublaslt
                               : id == MP_LIB_NCCL         ? nccl
                                                           : nvml;
    void *h = open_first(names, o->detail, sizeof o->detail);
    if (!h) return false;
    const char *sym = NULL;
    int iv = 0, rc = -1;
    switch (id) {
    case MP_LIB_CUDA_DRIVER:
    case MP_LIB_CUDA_RUNTIME: {
        sym = id == MP_LIB_CUDA_DRIVER ? "cuDriverGetVersion" : "cudaRuntimeGetVersion";
        int (*fn)(int *) = (int (*)(int *))dlsym(h, sym);
        if (fn && (rc = fn(&iv)) == 0) cuda_version(iv, o->version, sizeof o->version);
        break;
    }
    case MP_LIB_CUDNN:
    case MP_LIB_CUBLASLT: {
        sym = id == MP_LIB_CUDNN ? "cudnnGetVersion" : "cublasLtGetVersion";
        size_t (*fn)(void) = (size_t (*)(void))dlsym(h, sym);
        if (fn) {
            rc = 0;
            /* cuDNN 9: 91900 = 9.19.0, cuDNN 8: 8907; cuBLASLt 12+: 130100, 11: 11xxx */
            coded_version((long)fn(), id == MP_LIB_CUDNN ? 90000 : 100000, o->version, sizeof o->version);
        }
        break;
    }
    case MP_LIB_NCCL: {
        sym = "ncclGetVersion";
        int (*fn)(int *) = (int (*)(int *))dlsym(h, sym);
        if (fn && (rc = fn(&iv)) == 0) coded_version(iv, 20900, o->version, sizeof o->version);
        break;
    }
    default: { /* NVML: the driver version */
        sym = "nvmlSystemGetDriverVersion";
        int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
        int (*shutdown)(void) = (int (*)(void))dlsym(h, "nvmlShutdown");
        int (*fn)(char *, unsigned) = (int (*)(char *, unsigned))dlsym(h, sym);
        if (init && fn && (rc = init()) == 0) {
            char v[80] = "";
            if ((rc = fn(v, sizeof v)) == 0) snprintf(o->version, sizeof o->version, "driver %.48s", v);
            if (shutdown) shutdown();
        }
        break;
    }
    }
    if (rc != 0) {
        char file[sizeof o->detail];
        snprintf(file, sizeof file, "%s", o->detail);
        snprintf(o->detail, sizeof o->detail, "%.200s: %s failed (%d)", file, sym, rc);
        snprintf(o->version, sizeof o->version, "unknown");
    }
    return true;
}

void mp_lib_info_query(mp_lib_id id, mp_lib_info *o) {
    static const char *const names[MP_LIB_COUNT][2] = {
        {"oneDNN", "onednn"}, {"CUDA driver", "cuda_driver"}, {"CUDA runtime", "cuda_runtime"},
        {"cuDNN", "cudnn"},   {"cuBLASLt", "cublaslt"},       {"NCCL", "nccl"},
        {"NVML", "nvml"}};
    memset(o, 0, sizeof *o);
    if ((int)id < 0 || id >= MP_LIB_COUNT) return;
    o->name = names[id][0];
    o->key = names[id][1];
    if (id == MP_LIB_ONEDNN) {
#ifdef MP_HAVE_ONEDNN
        o->found = true;
        mp_onednn_probe_version(o->version, sizeof o->version);
        snprintf(o->detail, sizeof o->detail, "linked");
#else
        snprintf(o->detail, sizeof o->detail, "CPU ops run the reference kernels");
#endif
        return;
    }
    o->found = query_cuda_library(id, o);
}

/* ---- bf16 on this CPU ------------------------------------------------------ */

void mp_cpu_bf16_path_query(mp_bf16_path *out) {
    memset(out, 0, sizeof *out);
    if (mp_env_get()->native_bf16 == 0) {
        snprintf(out->detail, sizeof out->detail, "emulated (MIXPREC_NATIVE_BF16=0)");
        return;
    }
#ifdef MP_HAVE_ONEDNN
    char impl[128];
    const bool jit = mp_onednn_probe_bf16_conv(impl, sizeof impl);
    out->native = jit && mp_bf16_conv_primitives_pay();
    const mp_cpu_features *f = mp_cpu_features_get();
    const char *hw = f->amx_bf16 ? "AMX-BF16" : f->avx512_bf16 ? "AVX-512 BF16" : NULL;
    if (jit && !out->native)
        snprintf(out->detail, sizeof out->detail,
                 "emulated: f32 kernels on bf16-rounded inputs (oneDNN's bf16 kernel here, %.64s, would emulate "
                 "the bf16 dot products this CPU lacks, slower than f32)",
                 impl);
    else if (out->native && mp_bf16_math_current() == MP_BF16_MATH_F32)
        snprintf(out->detail, sizeof out->detail,
                 "native: oneDNN f32 convolutions between bf16 tensors (%s dot products: %.2fx the f32 FMA rate)",
                 hw ? hw : "bf16", mp_bf16_dot_rate());
    else if (out->native)
        snprintf(out->detail, sizeof out->detail, "native: oneDNN bf16 kernels (%s%s%s)", impl, hw ? " on " : "",
                 hw ? hw : "");
    else if (impl[0])
        snprintf(out->detail, sizeof out->detail,
                 "emulated: f32 kernels on bf16-rounded inputs (oneDNN has only its reference bf16 kernel here: %s)",
                 impl);
    else
        snprintf(out->detail, sizeof out->detail,
                 "emulated: f32 kernels on bf16-rounded inputs (oneDNN has no bf16 convolution for this CPU%s)",
                 hw ? "" : ": no AVX-512 BF16 / AMX");
#else
    snprintf(out->detail, sizeof out->detail, "emulated: f32 reference kernels on bf16-rounded inputs (built without oneDNN)");
#endif
}
