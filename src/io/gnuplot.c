/* gnuplot.c — running gnuplot on a script in a folder (gnuplot.h): fork +
 * exec with the folder as working directory, its output in gnuplot.log there,
 * the exit status checked and the log's last line quoted on failure. */
#include "io/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"

void mp_gnuplot_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\'') fputs("''", f);
        else fputc(*p < 0x20 || *p == 0x7f ? '?' : *p, f);
    }
    fputc('\'', f);
}

bool mp_gnuplot_on_path(void) {
    const char *path = getenv("PATH");
    if (!path) return false;
    char dir[4096];
    for (const char *p = path; *p;) {
        size_t len = strcspn(p, ":");
        if (len && len + sizeof "/gnuplot" < sizeof dir) {
            snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)len, p);
            if (access(dir, X_OK) == 0) return true;
        }
        p += len + (p[len] == ':');
    }
    return false;
}

/* The last non-empty line of gnuplot's log, for the error message. */
static void last_line(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    char line[512];
    buf[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0]) snprintf(buf, n, "%s", line);
    }
    if (f) fclose(f);
}

mp_status mp_gnuplot_run(const char *dir, const char *script) {
    char log[4096];
    snprintf(log, sizeof log, "%s/gnuplot.log", dir);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return mp_error(MP_ERR_INTERNAL, "gnuplot: cannot fork: %s", strerror(errno));
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        int fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return mp_error(MP_ERR_INTERNAL, "gnuplot: waitpid failed: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return MP_OK;
    char why[512];
    last_line(log, why, sizeof why);
    if (WIFEXITED(status))
        return mp_error(MP_ERR_INTERNAL, "gnuplot %s/%s failed (exit %d): %s", dir, script, WEXITSTATUS(status), why);
    return mp_error(MP_ERR_INTERNAL, "gnuplot %s/%s was killed by signal %d", dir, script, WTERMSIG(status));
}

