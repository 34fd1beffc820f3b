/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - the TPX_* settings, parsed once from the environment.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "log.h"
#include "trace.h"
#include "util.h"

enum { CFG_INT, CFG_STR };
#define INT CFG_INT
#define STR CFG_STR

typedef struct {
    const char *env;
    int type;
    const char *def;
    int64_t min, max;
    const char *doc;
} cfg_desc_t;

static const cfg_desc_t cfg_desc[TPX_CFG__COUNT] = {
#define TPX_CONFIG_X(name, type, def, min, max, doc) {"TPX_" #name, type, def, min, max, doc},
#include "config_table.h"
#undef TPX_CONFIG_X
};
#undef INT
#undef STR

/* The longest token the engine keeps (engine.h: auth_token[256]). */
#define CFG_TOKEN_MAX 255

static int64_t cfg_int[TPX_CFG__COUNT];
static const char *cfg_str[TPX_CFG__COUNT];
static tpx_status_t cfg_status = TPX_OK;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

int tpx__parse_size(const char *s, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s)
        return -1;
    int64_t mul = 1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1024; end++; break;
    case 'm': case 'M': mul = 1024 * 1024; end++; break;
    case 'g': case 'G': mul = 1024 * 1024 * 1024; end++; break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end != '\0')
        return -1;
    if (v < 0 ? v < LLONG_MIN / mul : v > LLONG_MAX / mul)
        return -1;
    *out = (int64_t)v * mul;
    return 0;
}

/* Clear a copy of the secret; a plain memset of a buffer about to go out of
 * scope may be optimised away. */
static void cfg_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n-- > 0)
        *v++ = 0;
}

/* TPX_AUTH_TOKEN_FILE: the token is the file's first line (without its
 * line end). Returns 0, or -1 after logging why. Opened non-blocking: a
 * FIFO (or a device) named by mistake or by someone else must not hang
 * every caller of the configuration; only a regular file is read. */
static int cfg_token_file(const char *path, char *out, size_t outlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        TPX_ERROR("TPX_AUTH_TOKEN_FILE=%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        TPX_ERROR("TPX_AUTH_TOKEN_FILE=%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (sb.st_mode & (S_IRWXG | S_IRWXO))
        TPX_WARN("TPX_AUTH_TOKEN_FILE=%s is accessible to group or others (mode %03o): "
                 "`chmod 600` it", path, (unsigned)(sb.st_mode & 0777));
    char buf[CFG_TOKEN_MAX + 2];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            TPX_ERROR("TPX_AUTH_TOKEN_FILE=%s: read: %s", path, strerror(errno));
            close(fd);
            cfg_wipe(buf, sizeof(buf));
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    size_t len = 0;
    while (len < got && buf[len] != '\n' && buf[len] != '\r' && buf[len] != '\0')
        len++;
    if (len == 0 || len > CFG_TOKEN_MAX || len >= outlen) {
        TPX_ERROR("TPX_AUTH_TOKEN_FILE=%s: the token (first line) must have 1..%d bytes", path,
                  CFG_TOKEN_MAX);
        cfg_wipe(buf, sizeof(buf));
        return -1;
    }
    memcpy(out, buf, len);
    out[len] = '\0';
    cfg_wipe(buf, sizeof(buf));
    return 0;
}

static void cfg_load_once(void)
{
    int level = TPX_LOG_WARN;
    for (int i = 0; i < TPX_CFG__COUNT; i++) {
        const cfg_desc_t *d = &cfg_desc[i];
        const char *v = getenv(d->env);
        int from_env = (v != NULL && *v != '\0');
        if (!from_env)
            v = d->def;
        cfg_str[i] = v;
        if (d->type != CFG_INT)
            continue;
        int64_t x;
        if (tpx__parse_size(v, &x) != 0 || x < d->min || x > d->max) {
            TPX_ERROR("%s=%s is not valid: expected an integer in [%lld, %lld]", d->env, v,
                      (long long)d->min, (long long)d->max);
            cfg_status = TPX_ERR_CONFIG;
            tpx__parse_size(d->def, &x);
        }
        cfg_int[i] = x;
    }
    /* TPX_NSOCKS=0: half the CPUs, at least 2, at most 8 (see the table).
     * Resolved here so that every reader, and --print-config, sees it. */
    const long ncpu = tpx__config_ncpus(); /* one reading for every CPU-dependent default */
    if (cfg_int[TPX_CFG_NSOCKS] == 0) {
        static char auto_nsocks[8];
        cfg_int[TPX_CFG_NSOCKS] = TPX_MIN(8, TPX_MAX(2, ncpu / 2));
        snprintf(auto_nsocks, sizeof(auto_nsocks), "%lld", (long long)cfg_int[TPX_CFG_NSOCKS]);
        cfg_str[TPX_CFG_NSOCKS] = auto_nsocks;
    }
    /* TPX_CHANNEL_SOCKS=0: a quarter of the CPUs, 1..4 (see the table). */
    if (cfg_int[TPX_CFG_CHANNEL_SOCKS] == 0) {
        static char auto_csocks[8];
        cfg_int[TPX_CFG_CHANNEL_SOCKS] = TPX_MIN(4, TPX_MAX(1, ncpu / 4));
        snprintf(auto_csocks, sizeof(auto_csocks), "%lld",
                 (long long)cfg_int[TPX_CFG_CHANNEL_SOCKS]);
        cfg_str[TPX_CFG_CHANNEL_SOCKS] = auto_csocks;
    }
    /* TPX_SOCK_POLL_US=-1: 200 us with 8 CPUs or more, else 0 (see the table). */
    if (cfg_int[TPX_CFG_SOCK_POLL_US] < 0) {
        static char auto_poll[8];
        cfg_int[TPX_CFG_SOCK_POLL_US] = ncpu >= 8 ? 200 : 0;
        snprintf(auto_poll, sizeof(auto_poll), "%lld", (long long)cfg_int[TPX_CFG_SOCK_POLL_US]);
        cfg_str[TPX_CFG_SOCK_POLL_US] = auto_poll;
    }
    /* TPX_SOCK_DIRECT_BYTES=-1: 64 KiB with 8 CPUs or more, else 1 MiB (see the table). */
    if (cfg_int[TPX_CFG_SOCK_DIRECT_BYTES] < 0) {
        int many = ncpu >= 8;
        cfg_int[TPX_CFG_SOCK_DIRECT_BYTES] = many ? 65536 : 1048576;
        cfg_str[TPX_CFG_SOCK_DIRECT_BYTES] = many ? "65536" : "1048576";
    }
    level = tpx__log_level_parse(cfg_str[TPX_CFG_LOG_LEVEL]);
    if (level < 0) {
        TPX_ERROR("TPX_LOG_LEVEL=%s is not valid: expected none, error, warn, info, debug or trace",
                  cfg_str[TPX_CFG_LOG_LEVEL]);
        cfg_status = TPX_ERR_CONFIG;
        level = TPX_LOG_WARN;
    }
    tpx__log_configure(level, cfg_str[TPX_CFG_LOG_FILE]);
    tpx__trace_start(cfg_str[TPX_CFG_TRACE_FILE]);
    if (cfg_str[TPX_CFG_AUTH_TOKEN_FILE][0] != '\0') {
        static char token[CFG_TOKEN_MAX + 1];
        if (cfg_str[TPX_CFG_AUTH_TOKEN][0] != '\0') {
            TPX_ERROR("TPX_AUTH_TOKEN and TPX_AUTH_TOKEN_FILE are both set: set one");
            cfg_status = TPX_ERR_CONFIG;
        } else if (cfg_token_file(cfg_str[TPX_CFG_AUTH_TOKEN_FILE], token, sizeof(token)) != 0) {
            cfg_status = TPX_ERR_CONFIG;
        } else {
            cfg_str[TPX_CFG_AUTH_TOKEN] = token;
        }
    } else if (strlen(cfg_str[TPX_CFG_AUTH_TOKEN]) > CFG_TOKEN_MAX) {
        /* as for the file: refused, never cut (peers would disagree) */
        TPX_ERROR("TPX_AUTH_TOKEN has %zu bytes: a token has at most %d",
                  strlen(cfg_str[TPX_CFG_AUTH_TOKEN]), CFG_TOKEN_MAX);
        cfg_status = TPX_ERR_CONFIG;
    }
}

long tpx__config_ncpus(void)
{
    /* The affinity mask, not the machine: a process confined to 4 CPUs of
     * a 64-CPU host (a Kubernetes cpuset, taskset) must not start 16 I/O
     * workers that fight over them. */
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0)
            return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

tpx_status_t tpx__config_load(void)
{
    pthread_once(&cfg_once, cfg_load_once);
    return cfg_status;
}

int64_t tpx__config_int(tpx_cfg_id_t id)
{
    tpx__config_load();
    return cfg_int[id];
}

const char *tpx__config_str(tpx_cfg_id_t id)
{
    tpx__config_load();
    return cfg_str[id];
}

void tpx__config_print(FILE *f, int format)
{
    tpx__config_load();
    if (format == 1) {
        fprintf(f, "| Variable | Default | Meaning |\n|---|---|---|\n");
        for (int i = 0; i < TPX_CFG__COUNT; i++)
            fprintf(f, "| `%s` | `%s` | %s |\n", cfg_desc[i].env,
                    cfg_desc[i].def[0] ? cfg_desc[i].def : "(empty)", cfg_desc[i].doc);
        return;
    }
    for (int i = 0; i < TPX_CFG__COUNT; i++) {
        const char *v = cfg_str[i];
        if (i == TPX_CFG_AUTH_TOKEN && v[0] != '\0')
            v = "(set, hidden)"; /* a secret: never printed */
        fprintf(f, "%s=%s\n    %s\n", cfg_desc[i].env, v, cfg_desc[i].doc);
    }
}
