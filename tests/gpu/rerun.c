/* rerun.c — see rerun.h. posix_spawn with a prepared environment, so the
 * child runs nothing of this (multi-threaded, CUDA-initialized) process
 * between fork and exec. */
#include "rerun.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

int gpu_test_rerun(const char *assignment, char *const *argv) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) {
        fprintf(stderr, "gpu_test_rerun: '%s' is not NAME=value\n", assignment);
        return -1;
    }
    const size_t name_len = (size_t)(eq - assignment) + 1; /* with the '=' */
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env) {
        fprintf(stderr, "gpu_test_rerun: out of memory\n");
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], assignment, name_len) != 0) env[k++] = environ[i];
    env[k++] = (char *)assignment;
    env[k] = NULL;
    fflush(NULL); /* the child's output follows what this process printed */
    pid_t pid;
    const int e = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
    free(env);
    if (e != 0) {
        fprintf(stderr, "gpu_test_rerun: cannot start %s again: %s\n", argv[0], strerror(e));
        return -1;
    }
    int status = 0;
    pid_t w;
    while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) continue;
    if (w != pid || !WIFEXITED(status)) {
        fprintf(stderr, "gpu_test_rerun: %s %s did not exit normally (status %d)\n", argv[0], argv[1] ? argv[1] : "",
                status);
        return -1;
    }
    return WEXITSTATUS(status);
}
