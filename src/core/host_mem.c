/* host_mem.c — see host_mem.h. */
#include "core/host_mem.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

/* A cgroup limit at or above this is none (v1 writes 2^63 rounded down to a page). */
#define CGROUP_NO_LIMIT ((uint64_t)1 << 62)

/* Keep the smaller of what is known and `bytes` from `source`. */
static void take(mp_host_mem *m, bool *any, uint64_t bytes, const char *source) {
    if (bytes > SIZE_MAX) bytes = SIZE_MAX;
    if (!*any || bytes < m->bytes) m->bytes = (size_t)bytes, m->source = source;
    *any = true;
}

/* MemAvailable and SwapFree (kB in the file), in bytes; false where MemAvailable is not there. */
static bool from_meminfo(uint64_t *avail, uint64_t *swap) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256];
    unsigned long long kb, a = 0, w = 0;
    bool have = false;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemAvailable: %llu", &kb) == 1) a = kb, have = true;
        else if (sscanf(line, "SwapFree: %llu", &kb) == 1) w = kb;
    }
    fclose(f);
    *avail = (uint64_t)a * 1024, *swap = (uint64_t)w * 1024;
    return have;
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
    const char *limit, *usage;
    const char *active_file, *inactive_file; /* memory.stat's file cache, which the kernel reclaims */
    const char *swap_limit, *swap_usage;     /* v2: the swap it may use; v1: memory and swap together */
    bool swap_separate;                      /* swap_limit limits swap alone (v2), not memory + swap (v1) */
    const char *source;
} cgroup_kind;

static const cgroup_kind cgroup_kinds[] = {
    {"/sys/fs/cgroup", "", "memory.max", "memory.current", "active_file", "inactive_file", "memory.swap.max",
     "memory.swap.current", true, "cgroup memory.max"},
    {"/sys/fs/cgroup/memory", "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_active_file",
     "total_inactive_file", "memory.memsw.limit_in_bytes", "memory.memsw.usage_in_bytes", false,
     "cgroup memory.limit_in_bytes"},
};

/* What a cgroup in dir leaves of its limit: the limit less its usage, the
 * file cache it could reclaim counted as free, plus the swap it may still
 * use (at most host_swap, the swap the host has free). False: no limit. */
static bool cgroup_headroom(const cgroup_kind *k, const char *dir, uint64_t host_swap, uint64_t *bytes) {
    uint64_t limit, usage = 0;
    if (!read_number(dir, k->limit, &limit) || limit >= CGROUP_NO_LIMIT) return false;
    read_number(dir, k->usage, &usage);
    uint64_t cache = stat_value(dir, k->active_file) + stat_value(dir, k->inactive_file);
    if (cache > usage) cache = usage;
    const uint64_t ram = (limit > usage ? limit - usage : 0) + cache;
    uint64_t swap_limit, swap_usage = 0;
    const bool swap_limited = read_number(dir, k->swap_limit, &swap_limit) && swap_limit < CGROUP_NO_LIMIT;
    if (swap_limited) read_number(dir, k->swap_usage, &swap_usage);
    const uint64_t swap_left = swap_limited && swap_limit > swap_usage ? swap_limit - swap_usage : 0;
    if (!swap_limited) *bytes = ram + host_swap;
    else if (k->swap_separate) *bytes = ram + (swap_left < host_swap ? swap_left : host_swap);
    else *bytes = swap_left + cache < ram + host_swap ? swap_left + cache : ram + host_swap; /* v1: both together */
    return true;
}

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

/* The headroom of the cgroup and of each above it. */
static void from_cgroups(mp_host_mem *m, bool *any, uint64_t host_swap) {
    for (size_t i = 0; i < sizeof cgroup_kinds / sizeof cgroup_kinds[0]; i++) {
        const cgroup_kind *k = &cgroup_kinds[i];
        char own[4096], dir[4400];
        own_cgroup(k, own, sizeof own);
        for (;;) {
            snprintf(dir, sizeof dir, "%s%s", k->mount, strcmp(own, "/") ? own : "");
            uint64_t headroom;
            if (cgroup_headroom(k, dir, host_swap, &headroom)) take(m, any, headroom, k->source);
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
    uint64_t avail, swap = 0;
    if (from_meminfo(&avail, &swap)) take(&m, &any, avail + swap, "MemAvailable + SwapFree");
    from_cgroups(&m, &any, swap);
    const char *e = getenv("MIXPREC_HOST_MEM_LIMIT");
    char *end;
    unsigned long long fake = e && *e ? strtoull(e, &end, 10) : 0;
    if (e && *e && !*end && *e != '-') take(&m, &any, fake, "MIXPREC_HOST_MEM_LIMIT");
    if (any) *out = m;
    return any;
}

mp_status mp_host_mem_check(size_t bytes, const char *hint, const char *what, ...) {
    mp_host_mem m;
    if (bytes < MP_HOST_MEM_CHECKED && !getenv("MIXPREC_HOST_MEM_LIMIT")) return MP_OK;
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
