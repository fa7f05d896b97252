/* nvml_source.c — the monitor's NVML source: libnvidia-ml.so.1 loaded with
 * dlopen (so builds need no NVML headers or libraries), one device, every
 * reading of mp_gpu_sample. A reading the device does not support
 * (NVML_ERROR_NOT_SUPPORTED, e.g. the fan of an H200) is NAN and is not
 * asked again. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "monitor/gpu_monitor.h"

typedef int nvml_return;   /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef void *nvml_device; /* nvmlDevice_t */
typedef struct {
    unsigned gpu, memory;  /* percent */
} nvml_utilization;
typedef struct {
    unsigned long long total, free, used; /* bytes */
} nvml_memory;

enum {
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_CLOCK_SM = 1,
    NVML_CLOCK_MEM = 2,
    NVML_TEMPERATURE_GPU = 0,
};

/* The readings, each of which the device may not support. */
enum { Q_SM_CLOCK, Q_MEM_CLOCK, Q_UTIL, Q_MEMORY, Q_POWER, Q_TEMP, Q_FAN, Q_ENERGY, Q_COUNT };

typedef struct {
    nvml_return (*shutdown)(void);
    nvml_return (*clock)(nvml_device, int, unsigned *);
    nvml_return (*util)(nvml_device, nvml_utilization *);
    nvml_return (*memory)(nvml_device, nvml_memory *);
    nvml_return (*power)(nvml_device, unsigned *);            /* milliwatts */
    nvml_return (*temperature)(nvml_device, int, unsigned *);
    nvml_return (*fan)(nvml_device, unsigned *);              /* percent */
    nvml_return (*energy)(nvml_device, unsigned long long *); /* millijoules since the driver loaded */
    bool off[Q_COUNT]; /* missing function or NVML_ERROR_NOT_SUPPORTED: not asked again */
    int n_ok;          /* readings that worked in this sample */
    nvml_device dev;
    char name[160];
} nvml_ctx;

/* True when query q (result rc) worked; NOT_SUPPORTED turns q off for good. */
static bool got(nvml_ctx *c, int q, nvml_return rc) {
    if (rc == NVML_ERROR_NOT_SUPPORTED) c->off[q] = true;
    c->n_ok += rc == 0;
    return rc == 0;
}

static bool nvml_read(void *ctx, mp_gpu_sample *s) {
    nvml_ctx *c = ctx;
    unsigned v;
    nvml_utilization u;
    nvml_memory mem;
    unsigned long long mj;
    c->n_ok = 0;
    if (!c->off[Q_SM_CLOCK] && got(c, Q_SM_CLOCK, c->clock(c->dev, NVML_CLOCK_SM, &v))) s->sm_clock_mhz = v;
    if (!c->off[Q_MEM_CLOCK] && got(c, Q_MEM_CLOCK, c->clock(c->dev, NVML_CLOCK_MEM, &v))) s->mem_clock_mhz = v;
    if (!c->off[Q_UTIL] && got(c, Q_UTIL, c->util(c->dev, &u))) s->gpu_load_pct = u.gpu;
    if (!c->off[Q_MEMORY] && got(c, Q_MEMORY, c->memory(c->dev, &mem)))
        s->mem_used_mib = (double)mem.used / (1024.0 * 1024.0);
    if (!c->off[Q_POWER] && got(c, Q_POWER, c->power(c->dev, &v))) s->power_w = v / 1000.0;
    if (!c->off[Q_TEMP] && got(c, Q_TEMP, c->temperature(c->dev, NVML_TEMPERATURE_GPU, &v))) s->temp_c = v;
    if (!c->off[Q_FAN] && got(c, Q_FAN, c->fan(c->dev, &v))) s->fan_pct = v;
    if (!c->off[Q_ENERGY] && got(c, Q_ENERGY, c->energy(c->dev, &mj))) s->energy_j = (double)mj / 1000.0;
    return c->n_ok > 0; /* nothing at all: the GPU is gone, skip the row */
}

static void nvml_close(void *ctx) {
    nvml_ctx *c = ctx;
    if (c->shutdown) c->shutdown();
    free(c); /* the library stays loaded: NVML keeps its own reference count */
}

mp_status mp_monitor_source_nvml(int device, mp_monitor_source *out) {
    *out = (mp_monitor_source){0};
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        return mp_error(MP_ERR_UNSUPPORTED, "NVML not found: %s", e ? e : "libnvidia-ml.so.1");
    }
    nvml_return (*init)(void) = (nvml_return(*)(void))dlsym(lib, "nvmlInit_v2");
    const char *(*error_string)(nvml_return) = (const char *(*)(nvml_return))dlsym(lib, "nvmlErrorString");
    nvml_return (*count)(unsigned *) = (nvml_return(*)(unsigned *))dlsym(lib, "nvmlDeviceGetCount_v2");
    nvml_return (*by_index)(unsigned, nvml_device *) =
        (nvml_return(*)(unsigned, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml_return (*get_name)(nvml_device, char *, unsigned) =
        (nvml_return(*)(nvml_device, char *, unsigned))dlsym(lib, "nvmlDeviceGetName");
    if (!init || !count || !by_index)
        return mp_error(MP_ERR_UNSUPPORTED, "NVML: libnvidia-ml.so.1 lacks nvmlInit_v2 / nvmlDeviceGetHandleByIndex_v2");
    nvml_return rc = init();
    if (rc != 0)
        return mp_error(MP_ERR_UNSUPPORTED, "NVML: init failed: %s", error_string ? error_string(rc) : "unknown error");
    nvml_ctx *c = calloc(1, sizeof *c);
    if (!c) return mp_error(MP_ERR_NOMEM, "NVML: out of memory");
    c->shutdown = (nvml_return(*)(void))dlsym(lib, "nvmlShutdown");
    unsigned n = 0;
    if (count(&n) != 0 || device < 0 || (unsigned)device >= n || by_index((unsigned)device, &c->dev) != 0) {
        nvml_close(c);
        return mp_error(MP_ERR_UNSUPPORTED, "NVML: no GPU %d (%u devices)", device, n);
    }
    c->clock = (nvml_return(*)(nvml_device, int, unsigned *))dlsym(lib, "nvmlDeviceGetClockInfo");
    c->util = (nvml_return(*)(nvml_device, nvml_utilization *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
    c->memory = (nvml_return(*)(nvml_device, nvml_memory *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
    c->power = (nvml_return(*)(nvml_device, unsigned *))dlsym(lib, "nvmlDeviceGetPowerUsage");
    c->temperature = (nvml_return(*)(nvml_device, int, unsigned *))dlsym(lib, "nvmlDeviceGetTemperature");
    c->fan = (nvml_return(*)(nvml_device, unsigned *))dlsym(lib, "nvmlDeviceGetFanSpeed");
    c->energy = (nvml_return(*)(nvml_device, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption");
    c->off[Q_SM_CLOCK] = c->off[Q_MEM_CLOCK] = !c->clock;
    c->off[Q_UTIL] = !c->util;
    c->off[Q_MEMORY] = !c->memory;
    c->off[Q_POWER] = !c->power;
    c->off[Q_TEMP] = !c->temperature;
    c->off[Q_FAN] = !c->fan;
    c->off[Q_ENERGY] = !c->energy;
    char dev_name[96] = "";
    if (!get_name || get_name(c->dev, dev_name, sizeof dev_name) != 0) snprintf(dev_name, sizeof dev_name, "GPU");
    snprintf(c->name, sizeof c->name, "%s (GPU %d)", dev_name, device);
    *out = (mp_monitor_source){.ctx = c, .name = c->name, .read = nvml_read, .close = nvml_close};
    return MP_OK;
}
