/* host_mem.h — whether a large host allocation sized by the user's input (a
 * dataset, a batch, an arena) can be had, asked before making it. Linux
 * overcommits: a malloc of more than the machine can give succeeds, and the
 * process is killed without a word when its pages are touched. Asked first,
 * the request ends in one MP_ERR_NOMEM message instead. */
#ifndef MP_CORE_HOST_MEM_H
#define MP_CORE_HOST_MEM_H

#include <stdbool.h>
#include <stddef.h>

#include "mixprec.h"

/* The host memory this process may still take, and the limit that gave it. */
typedef struct {
    size_t bytes;
    const char *source; /* "MemAvailable + SwapFree", "cgroup memory.max", "cgroup
                           memory.limit_in_bytes" or "MIXPREC_HOST_MEM_LIMIT" */
} mp_host_mem;

/* The smallest of: MemAvailable + SwapFree from /proc/meminfo; what the
 * memory limit of this process's cgroup, and of each cgroup above it, leaves
 * over its usage, counting the file cache the kernel would reclaim as free
 * (v2: memory.max, memory.current; v1: memory.limit_in_bytes,
 * memory.usage_in_bytes), plus the swap the cgroup may still use (v2:
 * memory.swap.max; v1: memory.memsw.limit_in_bytes bounds memory and swap
 * together), at most the host's SwapFree; and MIXPREC_HOST_MEM_LIMIT, a
 * number of bytes. Swap counts everywhere: the kernel kills only when memory
 * and swap are both spent, which is what the check is for.
 * That variable is read at every call (not once, as mp_env's are), so a test
 * can set a small one around a call to provoke a refusal cheaply. False when
 * none of them can be read. */
bool mp_host_mem_available(mp_host_mem *out);

/* Requests below this are not checked (the files are not read): one of them
 * alone does not decide whether the process is killed, and a model's many
 * small tensors would each pay for the reads. MIXPREC_HOST_MEM_LIMIT set: all
 * are checked. */
#define MP_HOST_MEM_CHECKED ((size_t)64 << 20)

/* MP_OK when `bytes` fit in mp_host_mem_available (or nothing could be
 * read, or bytes < MP_HOST_MEM_CHECKED); else MP_ERR_NOMEM with the message "out of memory for <what>: asked
 * N bytes (X GiB), M bytes (Y GiB) available (<source>)", then "; <hint>"
 * when hint is not NULL. `what` is a printf format naming what the bytes are
 * for: the dataset, file or option, the shape, the batch. */
mp_status mp_host_mem_check(size_t bytes, const char *hint, const char *what, ...)
    __attribute__((format(printf, 3, 4)));

#endif
