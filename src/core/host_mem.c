/* host_mem.c — see host_mem.h. */
#include "core/host_mem.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

#include "core/error.h"

/* A cgroup limit at or above this is none (v1 writes 2^63 rounded down to a page). */
#define CGROUP_NO_LIMIT ((uint64_t)1 << 62)

/* Keep the smaller of what is known and `bytes` from `source`. */
static void take(mp_host_mem *m, bool *any, uint64_t bytes, const char *source) {
    if (bytes > SIZE_MAX) bytes = SIZE_MAX;
    if (!*any || bytes < m->bytes) m->bytes = (size_t)bytes, m->source = source;
    *any = true;
}

/* MemAvailable + SwapFree (kB in the file); false where MemAvailable is not there. */
static bool from_meminfo(uint64_t *bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    unsigned long long kb, avail = 0, swap = 0;
    bool have = false;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu", &kb) == 1) avail = kb, have = true;
        else if (sscanf(line, "SwapFree: %llu", &kb) == 1) swap = kb;
    }
    fclose(f);
    *bytes = (uint64_t)(avail + swap) * 1024;
    return have;
}

static bool from_sysinfo(uint64_t *bytes) {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return false;
    *bytes = ((uint64_t)si.freeram + si.bufferram + si.freeswap) * (si.mem_unit ? si.mem_unit : 1);
    return true;
}

/* The number a cgroup file starts with; false for "max" or a file that is not there. */
static bool read_number(const char *dir, const char *name, uint64_t *v) {
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long x = 0;
    const bool ok = fscanf(f, "%llu", &x) == 1;
    fclose(f);
    *v = x;
    return ok;
}

/* The value of `key` in memory.stat ("key value" lines); 0 when absent. */
static uint64_t stat_value(const char *dir, const char *key) {
    char path[4500], line[256];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t kl = strlen(key);
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ' ' && sscanf(line + kl, "%llu", &v) == 1) break;
    fclose(f);
    return v;
}

typedef struct {
    const char *mount;      /* where the hierarchy is mounted */
    const char *controller; /* in /proc/self/cgroup: "" for v2 */
    const char *limit, *usage, *inactive, *source;
} cgroup_kind;

static const cgroup_kind cgroup_kinds[] = {
    {"/sys/fs/cgroup", "", "memory.max", "memory.current", "inactive_file", "cgroup memory.max"},
    {"/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file",
     "cgroup memory.limit_in_bytes"},
};

/* This process's cgroup path in the hierarchy of kind k ("/" when not found). */
static void own_cgroup(const cgroup_kind *k, char *path, size_t cap) {
    snprintf(path, cap, "/");
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) { /* "id:controller,controller:/path" */
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!b) continue;
        *b = '\0';
        bool match = !*k->controller && a + 1 == b;
        char *save = NULL;
        for (char *c = strtok_r(a + 1, ",", &save); c && *k->controller && !match; c = strtok_r(NULL, ",", &save))
            match = !strcmp(c, k->controller);
        if (!match) continue;
        b[1 + strcspn(b + 1, "\n")] = '\0';
        snprintf(path, cap, "%s", b + 1);
        break;
    }
    fclose(f);
}

/* The limits of the cgroup and of each above it, less their usage. */
static void from_cgroups(mp_host_mem *m, bool *any) {
    for (size_t i = 0; i < sizeof cgroup_kinds / sizeof cgroup_kinds[0]; i++) {
        const cgroup_kind *k = &cgroup_kinds[i];
        char own[4096], dir[4400];
        own_cgroup(k, own, sizeof own);
        for (;;) {
            snprintf(dir, sizeof dir, "%s%s", k->mount, strcmp(own, "/") ? own : "");
            uint64_t limit, usage = 0;
            if (read_number(dir, k->limit, &limit) && limit < CGROUP_NO_LIMIT) {
                read_number(dir, k->usage, &usage);
                uint64_t reclaimable = stat_value(dir, k->inactive);
                if (reclaimable > usage) reclaimable = usage;
                take(m, any, (limit > usage ? limit - usage : 0) + reclaimable, k->source);
            }
            char *slash = strrchr(own, '/');
            if (!slash || slash == own) {
                if (!strcmp(own, "/")) break;
                snprintf(own, sizeof own, "/"); /* the root last */
            } else {
                *slash = '\0';
            }
        }
    }
}

bool mp_host_mem_available(mp_host_mem *out) {
    mp_host_mem m = {0};
    bool any = false;
    uint64_t b;
    if (from_meminfo(&b)) take(&m, &any, b, "MemAvailable + SwapFree");
    else if (from_sysinfo(&b)) take(&m, &any, b, "sysinfo");
    from_cgroups(&m, &any);
    const char *e = getenv("MIXPREC_HOST_MEM_LIMIT");
    char *end;
    unsigned long long fake = e && *e ? strtoull(e, &end, 10) : 0;
    if (e && *e && !*end && *e != '-') take(&m, &any, fake, "MIXPREC_HOST_MEM_LIMIT");
    if (any) *out = m;
    return any;
}

mp_status mp_host_mem_check(size_t bytes, const char *hint, const char *what, ...) {
    mp_host_mem m;
    if (!mp_host_mem_available(&m) || bytes <= m.bytes) return MP_OK;
    char w[600];
    va_list ap;
    va_start(ap, what);
    vsnprintf(w, sizeof w, what, ap);
    va_end(ap);
    const double gib = (double)(1u << 30);
    return mp_error(MP_ERR_NOMEM,
                    "out of memory for %s: asked %zu bytes (%.2f GiB), %zu bytes (%.2f GiB) available (%s)%s%s", w,
                    bytes, (double)bytes / gib, m.bytes, (double)m.bytes / gib, m.source, hint ? "; " : "",
                    hint ? hint : "");
}
