/* info_cmd.c — `mixprec info`: the CPU (model, cores, SIMD / AMX features,
 * how bf16 runs), the GPUs (name, compute capability, memory, tensor-core
 * dtypes) and the libraries found, as text or as JSON (--json). */
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "io/json_write.h"
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

/* The CPU part of the JSON object; false when out of memory. */
static bool json_cpu(cJSON *cpu, const machine_info *mi) {
    feature fs[16];
    const int nf = features_of(mi->f, fs);
    char line[512];
    low_precision_hw(mi->f, line, sizeof line);
    bool ok = mp_json_add(cpu, "model", mp_json_str(mi->model)) &&
              mp_json_add(cpu, "physical_cores", mp_json_int(mi->topo.physical_cores)) &&
              mp_json_add(cpu, "logical_cpus", mp_json_int(mi->topo.logical_cpus)) &&
              mp_json_add(cpu, "available_cpus", mp_json_int(mi->topo.available_cpus)) &&
              mp_json_add(cpu, "openmp_threads", mp_json_int(mi->omp_threads));
    cJSON *features = cJSON_AddObjectToObject(cpu, "features");
    for (int i = 0; i < nf; i++) ok = ok && mp_json_add(features, fs[i].flag, cJSON_CreateBool(fs[i].on));
    return ok && features && mp_json_add(cpu, "low_precision_hw", mp_json_str(line[0] ? line : "none")) &&
           mp_json_add(cpu, "bf16_native", cJSON_CreateBool(mi->bf16.native)) &&
           mp_json_add(cpu, "bf16_path", mp_json_str(mi->bf16.detail));
}

/* One GPU's entry. */
static cJSON *json_gpu(int index, const mp_gpu_device *d) {
    const unsigned tc = mp_gpu_tensor_core_dtypes(d->cc_major, d->cc_minor);
    char cc[32];
    snprintf(cc, sizeof cc, "%d.%d", d->cc_major, d->cc_minor);
    cJSON *g = cJSON_CreateObject();
    bool ok = mp_json_add(g, "index", mp_json_int(index)) && mp_json_add(g, "name", mp_json_str(d->name)) &&
              mp_json_add(g, "compute_capability", mp_json_str(cc)) &&
              mp_json_add(g, "sm_count", mp_json_int(d->sm_count)) &&
              mp_json_add(g, "clock_mhz", mp_json_int(d->clock_mhz)) &&
              mp_json_add(g, "memory_mib", mp_json_fixed((double)d->total_bytes / (1 << 20), 0));
    cJSON *dtypes = cJSON_AddArrayToObject(g, "tensor_core_dtypes");
    for (unsigned bit = 1; bit <= MP_TC_FP8; bit <<= 1)
        if (tc & bit) ok = ok && mp_json_push(dtypes, mp_json_str(mp_tensor_core_dtype_name(bit)));
    if (ok && dtypes) return g;
    cJSON_Delete(g);
    return NULL;
}

/* Everything as one JSON object (indented) on stdout. */
static mp_status print_json(const machine_info *mi) {
    cJSON *j = cJSON_CreateObject();
    bool ok = mp_json_add(j, "version", mp_json_str(MP_VERSION_STRING));
    cJSON *cpu = cJSON_AddObjectToObject(j, "cpu");
    ok = ok && json_cpu(cpu, mi);
    cJSON *gpus = cJSON_AddArrayToObject(j, "gpus");
    for (int i = 0; i < mi->gpus.count; i++) ok = ok && mp_json_push(gpus, json_gpu(i, &mi->gpus.dev[i]));
    ok = ok && gpus &&
         mp_json_add(j, "gpu_error", mi->gpus.count ? cJSON_CreateNull() : mp_json_str(mi->gpus.error));
    cJSON *libs = cJSON_AddObjectToObject(j, "libraries");
    for (int i = 0; i < MP_LIB_COUNT; i++) {
        const mp_lib_info *l = &mi->libs[i];
        cJSON *lib = cJSON_AddObjectToObject(libs, l->key);
        ok = ok && mp_json_add(lib, "found", cJSON_CreateBool(l->found)) &&
             mp_json_add(lib, "version", l->found ? mp_json_str(l->version) : cJSON_CreateNull()) &&
             mp_json_add(lib, "detail", mp_json_str(l->detail));
    }
    char *text = mp_json_print(j, ok && libs, true);
    if (!text) return mp_error(MP_ERR_NOMEM, "--json: out of memory writing JSON");
    puts(text);
    cJSON_free(text);
    return MP_OK;
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
    if (!json) {
        print_text(&mi);
        return 0;
    }
    if (print_json(&mi) == MP_OK) return 0;
    fprintf(stderr, "mixprec info: %s\n", mp_last_error());
    return 1;
}
