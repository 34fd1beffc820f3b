/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - formatting and output of log lines.
 *
 * Each line is formatted into a stack buffer and written with a single
 * write() so lines from different threads and processes never interleave.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

atomic_int tpx__log_level = TPX_LOG_WARN;
static int log_fd = STDERR_FILENO;
static atomic_int level_fixed; /* tpx_log_set_level() was called: TPX_LOG_LEVEL is ignored */
/* The host's callback; read and swapped under cb_lock (never a hot path:
 * only lines at an enabled level get here). */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static tpx_log_fn cb_fn;
static void *cb_arg;

TPX_API void tpx_log_set_callback(tpx_log_fn fn, void *arg)
{
    pthread_mutex_lock(&cb_lock);
    cb_fn = fn;
    cb_arg = arg;
    pthread_mutex_unlock(&cb_lock);
}

TPX_API void tpx_log_set_level(tpx_log_level_t level)
{
    if ((int)level < TPX_LOG_NONE || level > TPX_LOG_TRACE)
        return;
    atomic_store(&level_fixed, 1);
    atomic_store_explicit(&tpx__log_level, (int)level, memory_order_relaxed);
}

static const char *const level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};

const char *tpx__log_level_name(int level)
{
    if (level < 0 || level > TPX_LOG_TRACE)
        return "?";
    return level_names[level];
}

int tpx__log_level_parse(const char *s)
{
    if (s == NULL || *s == '\0')
        return -1;
    if (s[0] >= '0' && s[0] <= '5' && s[1] == '\0')
        return s[0] - '0';
    for (int i = 0; i <= TPX_LOG_TRACE; i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return TPX_LOG_WARN;
    return -1;
}

void tpx__log_configure(int level, const char *path)
{
    if (!atomic_load(&level_fixed))
        atomic_store_explicit(&tpx__log_level, level, memory_order_relaxed);
    if (path == NULL || *path == '\0')
        return;
    /* "%p" in the path expands to the pid so processes of one job do not
     * share a file by accident. */
    char buf[4096];
    size_t o = 0;
    for (const char *p = path; *p && o + 16 < sizeof(buf); p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%d", (int)getpid());
            p++;
        } else {
            buf[o++] = *p;
        }
    }
    buf[o] = '\0';
    int fd = open(buf, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        TPX_WARN("TPX_LOG_FILE=%s: cannot open: %s; logging to stderr", buf, strerror(errno));
        return;
    }
    log_fd = fd;
}

void tpx__log_vemit(int level, const char *file, int line, const char *fmt, va_list ap)
{
    char buf[1024];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(buf, sizeof(buf), "tpx %d:%ld %s %s:%d ", (int)getpid(),
                     (long)syscall(SYS_gettid), tpx__log_level_name(level), base, line);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(buf)) {
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    while (n > 0 && buf[n - 1] == '\n')
        n--;
    pthread_mutex_lock(&cb_lock);
    if (cb_fn != NULL) {
        buf[n] = '\0';
        cb_fn(cb_arg, (tpx_log_level_t)level, buf);
        pthread_mutex_unlock(&cb_lock);
        return;
    }
    pthread_mutex_unlock(&cb_lock);
    buf[n++] = '\n';
    ssize_t w = write(log_fd, buf, (size_t)n);
    (void)w;
}

void tpx__log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tpx__log_vemit(level, file, line, fmt, ap);
    va_end(ap);
}
