/* info_cmd.c — `mixprec info`: the CPU (model, cores, SIMD / AMX features,
 * how bf16 runs), the GPUs (name, compute capability, memory, tensor-core
 * dtypes) and the libraries found, as text or as JSON (--json). */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "monitor/sysinfo.h"

static void usage(FILE *f) {
    fprintf(f, "usage: mixprec info [--json]\n\n"
               "Print what this machine offers mixed-precision training: CPU model, cores and features\n"
               "(AVX2, FMA, F16C, AVX-512, AMX) and whether bf16 runs natively or emulated; GPUs with\n"
               "compute capability, memory and tensor-core dtypes; versions of oneDNN, CUDA, cuDNN,\n"
               "cuBLASLt, NCCL and NVML (\"not found\" when absent).\n\n"
               "  --json      one JSON object instead of text\n"
               "  -h, --help  this help\n");
}

typedef struct {
    const mp_cpu_features *f;
    const char *model;
    mp_cpu_topology topo;
    int omp_threads;
    mp_bf16_path bf16;
    mp_gpu_list gpus;
    mp_lib_info libs[MP_LIB_COUNT];
} machine_info;

/* CPU features in display order: label, /proc/cpuinfo flag, value. */
typedef struct {
    const char *label, *flag;
    bool on;
} feature;

static int features_of(const mp_cpu_features *f, feature out[]) {
    const feature list[] = {
        {"AVX2", "avx2", f->avx2},
        {"FMA", "fma", f->fma},
        {"F16C", "f16c", f->f16c},
        {"AVX-512F", "avx512f", f->avx512f},
        {"AVX-512 BF16", "avx512_bf16", f->avx512_bf16},
        {"AVX-512 FP16", "avx512_fp16", f->avx512_fp16},
        {"AMX-TILE", "amx_tile", f->amx_tile},
        {"AMX-BF16", "amx_bf16", f->amx_bf16},
        {"AMX-FP16", "amx_fp16", f->amx_fp16},
    };
    int n = (int)(sizeof list / sizeof list[0]);
    memcpy(out, list, sizeof list);
    return n;
}

/* "bf16 via AMX-BF16, AVX-512 BF16; fp16 via AVX-512 FP16", or "". */
static void low_precision_hw(const mp_cpu_features *f, char *buf, size_t n) {
    char bf[64] = "", fp[64] = "";
    snprintf(bf, sizeof bf, "%s%s%s", f->amx_bf16 ? "AMX-BF16" : "", f->amx_bf16 && f->avx512_bf16 ? ", " : "",
             f->avx512_bf16 ? "AVX-512 BF16" : "");
    snprintf(fp, sizeof fp, "%s%s%s", f->amx_fp16 ? "AMX-FP16" : "", f->amx_fp16 && f->avx512_fp16 ? ", " : "",
             f->avx512_fp16 ? "AVX-512 FP16" : "");
    snprintf(buf, n, "%s%s%s%s%s", bf[0] ? "bf16 via " : "", bf, bf[0] && fp[0] ? "; " : "", fp[0] ? "fp16 via " : "",
             fp);
}

static void tensor_core_list(const mp_gpu_device *d, char *buf, size_t n) {
    unsigned m = mp_gpu_tensor_core_dtypes(d->cc_major, d->cc_minor);
    buf[0] = 0;
    for (unsigned bit = 1; bit <= MP_TC_FP8; bit <<= 1)
        if (m & bit) snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", buf[0] ? ", " : "", mp_tensor_core_dtype_name(bit));
    if (!buf[0]) snprintf(buf, n, "none");
}

static void print_text(const machine_info *mi) {
    feature fs[16];
    int nf = features_of(mi->f, fs);
    char line[512];
    printf("mixprec %s\n", MP_VERSION_STRING);
    printf("CPU: %s\n", mi->model);
    printf("  cores: %d physical, %d hardware threads (%d available to this process, %d OpenMP threads)\n",
           mi->topo.physical_cores, mi->topo.logical_cpus, mi->topo.available_cpus, mi->omp_threads);
    printf("  features:");
    for (int i = 0; i < nf; i++) printf("%s %s %s", i ? "," : "", fs[i].label, fs[i].on ? "yes" : "no");
    printf("\n");
    low_precision_hw(mi->f, line, sizeof line);
    if (line[0])
        printf("  low precision in hardware: %s\n", line);
    else
        printf("  low precision in hardware: none (bf16/fp16 compute is emulated in f32%s)\n",
               mi->f->f16c ? "; F16C converts fp16" : "");
    printf("  bf16 path: %s\n", mi->bf16.detail);
    if (mi->gpus.count == 0) printf("GPUs: none (%s)\n", mi->gpus.error);
    else printf("GPUs: %d\n", mi->gpus.count);
    for (int i = 0; i < mi->gpus.count; i++) {
        const mp_gpu_device *d = &mi->gpus.dev[i];
        tensor_core_list(d, line, sizeof line);
        printf("  GPU %d: %s, compute capability %d.%d (sm_%d%d), %d SMs, %d MHz, %.0f MiB; tensor cores: %s\n", i,
               d->name, d->cc_major, d->cc_minor, d->cc_major, d->cc_minor, d->sm_count, d->clock_mhz,
               (double)d->total_bytes / (1 << 20), line);
    }
    printf("libraries:\n");
    for (int i = 0; i < MP_LIB_COUNT; i++) {
        const mp_lib_info *l = &mi->libs[i];
        if (l->found) printf("  %-13s %s (%s)\n", l->name, l->version, l->detail);
        else printf("  %-13s %s (%s)\n", l->name, i == MP_LIB_ONEDNN ? "not built in" : "not found", l->detail);
    }
}

/* ---- JSON ------------------------------------------------------------------- */

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_json(const machine_info *mi) {
    feature fs[16];
    int nf = features_of(mi->f, fs);
    char line[512];
    printf("{\"version\": ");
    json_str(MP_VERSION_STRING);
    printf(",\n \"cpu\": {\"model\": ");
    json_str(mi->model);
    printf(", \"physical_cores\": %d, \"logical_cpus\": %d, \"available_cpus\": %d, \"openmp_threads\": %d,\n",
           mi->topo.physical_cores, mi->topo.logical_cpus, mi->topo.available_cpus, mi->omp_threads);
    printf("  \"features\": {");
    for (int i = 0; i < nf; i++) printf("%s\"%s\": %s", i ? ", " : "", fs[i].flag, fs[i].on ? "true" : "false");
    low_precision_hw(mi->f, line, sizeof line);
    printf("},\n  \"low_precision_hw\": ");
    json_str(line[0] ? line : "none");
    printf(", \"bf16_native\": %s, \"bf16_path\": ", mi->bf16.native ? "true" : "false");
    json_str(mi->bf16.detail);
    printf("},\n \"gpus\": [");
    for (int i = 0; i < mi->gpus.count; i++) {
        const mp_gpu_device *d = &mi->gpus.dev[i];
        unsigned tc = mp_gpu_tensor_core_dtypes(d->cc_major, d->cc_minor);
        printf("%s\n  {\"index\": %d, \"name\": ", i ? "," : "", i);
        json_str(d->name);
        printf(", \"compute_capability\": \"%d.%d\", \"sm_count\": %d, \"clock_mhz\": %d, \"memory_mib\": %.0f, "
               "\"tensor_core_dtypes\": [",
               d->cc_major, d->cc_minor, d->sm_count, d->clock_mhz, (double)d->total_bytes / (1 << 20));
        int k = 0;
        for (unsigned bit = 1; bit <= MP_TC_FP8; bit <<= 1)
            if (tc & bit) printf("%s\"%s\"", k++ ? ", " : "", mp_tensor_core_dtype_name(bit));
        printf("]}");
    }
    printf("],\n \"gpu_error\": ");
    if (mi->gpus.count) printf("null");
    else json_str(mi->gpus.error);
    printf(",\n \"libraries\": {");
    for (int i = 0; i < MP_LIB_COUNT; i++) {
        const mp_lib_info *l = &mi->libs[i];
        printf("%s\n  \"%s\": {\"found\": %s, \"version\": ", i ? "," : "", l->key, l->found ? "true" : "false");
        if (l->found) json_str(l->version);
        else printf("null");
        printf(", \"detail\": ");
        json_str(l->detail);
        printf("}");
    }
    printf("}}\n");
}

int cmd_info(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else {
            fprintf(stderr, "mixprec info: unknown option '%s' (see mixprec info --help)\n", argv[i]);
            return 2;
        }
    }
    machine_info mi = {.f = mp_cpu_features_get(), .model = mp_cpu_model_name(), .topo = mp_cpu_topology_get(),
                       .omp_threads = omp_get_max_threads()};
    mp_cpu_bf16_path_query(&mi.bf16);
    mp_gpu_list_query(&mi.gpus);
    for (int i = 0; i < MP_LIB_COUNT; i++) mp_lib_info_query((mp_lib_id)i, &mi.libs[i]);
    if (json) print_json(&mi);
    else print_text(&mi);
    return 0;
}
