/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_common.c - the code tpx-netbench and tpx-perf share (see the header
 * for what it promises). Plain POSIX; no tpx header but the public one, and
 * that only for tpx_config_print().
 */
#include "bench_common.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tpx/tpx.h"

const char *bench_prog = "tpx-bench";
int bench_quiet;

/* ---- time and CPU -------------------------------------------------------- */

uint64_t bench_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void bench_cpu_ns(uint64_t *user, uint64_t *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull;
    *sys = (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000ull;
}

void bench_started(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tmv;
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
}

/* ---- wire helpers ------------------------------------------------------------- */

void bench_put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

uint64_t bench_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

void bench_words_out(unsigned char *dst, const void *src, size_t nwords)
{
    for (size_t i = 0; i < nwords; i++) {
        uint64_t v;
        memcpy(&v, (const char *)src + 8 * i, 8);
        bench_put64(dst + 8 * i, v);
    }
}

void bench_words_in(void *dst, const unsigned char *src, size_t nwords)
{
    for (size_t i = 0; i < nwords; i++) {
        uint64_t v = bench_get64(src + 8 * i);
        memcpy((char *)dst + 8 * i, &v, 8);
    }
}

/* ---- command line ----------------------------------------------------------- */

int bench_parse_size(const char *s, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    uint64_t mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    default:
        break;
    }
    if (*end == 'i' && end[1] == 'B' && mul > 1)
        end += 2;
    else if (*end == 'B')
        end++;
    if (*end != '\0' || v > UINT64_MAX / mul)
        return -1;
    *out = v * mul;
    return 0;
}

int bench_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int bench_parse_gpus(const char *arg, int max, int out[2])
{
    char a[32];
    const char *comma = strchr(arg, ',');
    uint64_t x, y;
    if (comma == NULL) {
        if (bench_parse_uint(arg, 0, (uint64_t)max, &x) != 0)
            return 0;
        out[0] = (int)x;
        return 1;
    }
    size_t l = (size_t)(comma - arg);
    if (l >= sizeof(a))
        return 0;
    memcpy(a, arg, l);
    a[l] = '\0';
    if (bench_parse_uint(a, 0, (uint64_t)max, &x) != 0 ||
        bench_parse_uint(comma + 1, 0, (uint64_t)max, &y) != 0)
        return 0;
    out[0] = (int)x;
    out[1] = (int)y;
    return 2;
}

int bench_parse_sizes(const char *arg, uint64_t *sizes, uint64_t max_n, uint64_t max_size,
                      uint64_t *n)
{
    char buf[512];
    if (strlen(arg) >= sizeof(buf))
        return -1;
    strcpy(buf, arg);
    uint64_t k = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        uint64_t a, b;
        if (colon != NULL) {
            *colon = '\0';
            if (bench_parse_size(tok, &a) != 0 || bench_parse_size(colon + 1, &b) != 0 || a == 0 ||
                b < a)
                return -1;
        } else {
            if (bench_parse_size(tok, &a) != 0)
                return -1;
            b = a;
        }
        for (uint64_t s = a; s <= b; s *= 2) {
            if (k >= max_n || s > max_size)
                return -1;
            sizes[k++] = s;
            if (s == 0)
                break;
        }
    }
    if (k == 0)
        return -1;
    *n = k;
    return 0;
}

const char *bench_human(uint64_t b, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, "%llu %s", (unsigned long long)b, unit[u]);
    return buf;
}

int bench_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", bench_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", bench_prog);
    return BENCH_EXIT_USAGE;
}

int bench_opt(const bench_opts_t *o, int c, const char *arg)
{
    uint64_t v;
    switch (c) {
    case BENCH_O_LOOPBACK:
        *o->loopback = 1;
        return BENCH_OPT_DONE;
    case BENCH_O_PORT:
        if (bench_parse_uint(arg, 1, 65535, &v) != 0)
            return bench_usage_error("--port: '%s' is not a port (1..65535)", arg);
        *o->port = (int)v;
        return BENCH_OPT_DONE;
    case BENCH_O_SIZE:
        if (bench_parse_size(arg, &v) != 0 || v > o->max_size)
            return bench_usage_error(
                "--size: bad size '%s' (e.g. 4096, 64K, 256M, 1G; at most 16G)", arg);
        *o->nsizes = 1;
        o->sizes[0] = v;
        break;
    case BENCH_O_SIZES:
        if (bench_parse_sizes(arg, o->sizes, o->max_sizes, o->max_size, o->nsizes) != 0)
            return bench_usage_error("--sizes: bad list '%s' (e.g. %s; at most %d sizes of at "
                                     "most 16G)",
                                     arg, o->sizes_eg, (int)o->max_sizes);
        break;
    case BENCH_O_ITERS:
        if (bench_parse_uint(arg, 1, 100000000, &v) != 0)
            return bench_usage_error("--iters: '%s' is not a count >= 1", arg);
        *o->iters = v;
        break;
    case BENCH_O_WARMUP:
        if (bench_parse_uint(arg, 0, 100000000, &v) != 0)
            return bench_usage_error("--warmup: '%s' is not a count", arg);
        *o->warmup = v;
        break;
    case BENCH_O_VERIFY:
    case BENCH_O_NOVERIFY:
        *o->verify = c == BENCH_O_VERIFY;
        break;
    case BENCH_O_TIMEOUT:
        if (bench_parse_uint(arg, 1, 86400, &v) != 0)
            return bench_usage_error("--timeout: '%s' is not in 1..86400 seconds", arg);
        *o->timeout_s = v;
        return BENCH_OPT_DONE;
    case BENCH_O_JSON:
        *o->json = arg;
        return BENCH_OPT_DONE;
    case BENCH_O_PLOT:
        *o->plot = arg;
        return BENCH_OPT_DONE;
    case 'q':
        bench_quiet = 1;
        return BENCH_OPT_DONE;
    case BENCH_O_PRINTCFG:
        tpx_config_print(stdout, 0);
        return BENCH_EXIT_OK;
    case 'V':
        printf("%s %s (libtpx %s)\n", bench_prog, TPX_VERSION_STRING, tpx_version_string());
        return BENCH_EXIT_OK;
    case 'h':
        o->usage(stdout);
        return BENCH_EXIT_OK;
    case '?':
        fprintf(stderr, "Try '%s --help'.\n", bench_prog);
        return BENCH_EXIT_USAGE;
    default:
        return BENCH_OPT_OTHER;
    }
    *o->run_opts = 1; /* the options that shape the run end here */
    return BENCH_OPT_DONE;
}

uint64_t bench_auto_iters(uint64_t bytes_per_iter)
{
    uint64_t n = bytes_per_iter == 0 ? BENCH_AUTO_MAX_ITERS : BENCH_AUTO_BYTES / bytes_per_iter;
    return n < BENCH_AUTO_MIN_ITERS   ? BENCH_AUTO_MIN_ITERS
           : n > BENCH_AUTO_MAX_ITERS ? BENCH_AUTO_MAX_ITERS
                                      : n;
}

uint64_t bench_auto_warmup(uint64_t iters)
{
    return iters / 10 > 0 ? iters / 10 : 1;
}

int64_t bench_config_int(const char *name)
{
    char *text = NULL;
    size_t len = 0;
    int64_t v = -1;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return -1;
    tpx_config_print(f, 0);
    fclose(f);
    size_t nl = strlen(name);
    for (char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, name, nl) == 0 && line[nl] == '=') {
            uint64_t x;
            char val[32];
            size_t k = 0;
            for (const char *s = line + nl + 1;
                 *s != '\0' && *s != '\n' && *s != ' ' && k + 1 < sizeof(val); s++)
                val[k++] = *s;
            val[k] = '\0';
            if (bench_parse_size(val, &x) == 0 && x <= INT64_MAX)
                v = (int64_t)x;
            break;
        }
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    free(text);
    return v;
}

/* ---- the data pattern and the checksum -------------------------------------- */

static uint64_t bench_splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline uint64_t bench_word(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed + i) * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

/* Unaligned 8-byte access; one mov on the machines that matter. */
static inline uint64_t ld64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline void st64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

void bench_fill(unsigned char *buf, uint64_t size, uint64_t key)
{
    uint64_t seed = bench_splitmix(key), n = size / 8;
    for (uint64_t i = 0; i < n; i++)
        st64(buf + 8 * i, bench_word(seed, i));
    if (size % 8) {
        uint64_t x = bench_word(seed, n);
        memcpy(buf + 8 * n, &x, size % 8);
    }
}

int bench_check(const unsigned char *buf, uint64_t size, uint64_t key, uint64_t *csum,
                uint64_t *bad)
{
    uint64_t seed = bench_splitmix(key), n = size / 8, i = 0;
    uint64_t h[4] = {BENCH_FNV_BASIS, BENCH_FNV_BASIS ^ 1, BENCH_FNV_BASIS ^ 2,
                     BENCH_FNV_BASIS ^ 3};
    uint64_t diff = 0;
    for (; i + 4 <= n; i += 4) {
        const unsigned char *w = buf + 8 * i;
        uint64_t a = ld64(w), b = ld64(w + 8), c = ld64(w + 16), d = ld64(w + 24);
        diff |= (a ^ bench_word(seed, i)) | (b ^ bench_word(seed, i + 1)) |
                (c ^ bench_word(seed, i + 2)) | (d ^ bench_word(seed, i + 3));
        h[0] = (h[0] ^ a) * BENCH_FNV_PRIME;
        h[1] = (h[1] ^ b) * BENCH_FNV_PRIME;
        h[2] = (h[2] ^ c) * BENCH_FNV_PRIME;
        h[3] = (h[3] ^ d) * BENCH_FNV_PRIME;
    }
    for (; i < n; i++) {
        uint64_t a = ld64(buf + 8 * i);
        diff |= a ^ bench_word(seed, i);
        h[i % 4] = (h[i % 4] ^ a) * BENCH_FNV_PRIME;
    }
    if (size % 8) {
        uint64_t x = bench_word(seed, n), y = 0, t = 0;
        memcpy(&y, &x, size % 8);
        memcpy(&t, buf + 8 * n, size % 8);
        diff |= t ^ y;
        h[n % 4] = (h[n % 4] ^ t) * BENCH_FNV_PRIME;
    }
    if (diff != 0) {
        unsigned char want[8];
        for (uint64_t off = 0; off < size; off++) {
            if (off % 8 == 0) {
                uint64_t x = bench_word(seed, off / 8);
                memcpy(want, &x, 8);
            }
            if (buf[off] != want[off % 8]) {
                *bad = off;
                return -1;
            }
        }
    }
    uint64_t m = BENCH_FNV_BASIS;
    for (int l = 0; l < 4; l++)
        m = (m ^ h[l]) * BENCH_FNV_PRIME;
    m = (m ^ size) * BENCH_FNV_PRIME;
    *csum = (*csum ^ m) * BENCH_FNV_PRIME;
    return 0;
}

/* ---- statistics ------------------------------------------------------------ */

static int bench_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void bench_percentiles(uint64_t *v, uint64_t n, uint64_t out[4])
{
    qsort(v, n, sizeof(uint64_t), bench_cmp_u64);
    out[0] = v[0];
    out[1] = v[(n - 1) / 2];
    out[2] = v[(n * 99 + 99) / 100 - 1];
    out[3] = v[n - 1];
}

/* ---- the control stream ------------------------------------------------------ */

static const char *bench_msg_name(const bench_proto_t *pr, unsigned t)
{
    return t < pr->nnames && pr->names[t] != NULL ? pr->names[t] : "?";
}

int bench_send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int bench_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len > 0) {
        uint64_t now = bench_now_ns();
        if (now >= deadline_ns) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left_ms = (int)((deadline_ns - now) / 1000000 + 1);
        int r = poll(&pfd, 1, left_ms > 1000 ? 1000 : left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            errno = ENOTCONN; /* end of stream */
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int bench_msg_send(const bench_proto_t *pr, int fd, unsigned type, uint32_t arg,
                   const void *payload, uint32_t len)
{
    unsigned char h[BENCH_HDR + BENCH_MSG_MAX];
    if (len > BENCH_MSG_MAX)
        return -1;
    uint32_t v[4] = {htonl(pr->magic), htonl((uint32_t)pr->version << 16 | type), htonl(len),
                     htonl(arg)};
    memcpy(h, v, BENCH_HDR);
    if (len > 0)
        memcpy(h + BENCH_HDR, payload, len);
    return bench_send_all(fd, h, BENCH_HDR + len);
}

int bench_msg_recv(const bench_proto_t *pr, int fd, unsigned want, uint32_t arg, void *buf,
                   uint32_t len, uint64_t timeout_ns, const char *peer, char *err, size_t errlen)
{
    uint32_t v[4];
    uint64_t deadline = bench_now_ns() + timeout_ns;
    if (bench_recv_all(fd, v, BENCH_HDR, deadline) != 0) {
        if (errno == ETIMEDOUT)
            snprintf(err, errlen, "no %s message from the %s within %.0f s",
                     bench_msg_name(pr, want), peer, (double)timeout_ns / 1e9);
        else
            snprintf(err, errlen, "the %s closed the control connection%s%s%s while %s was awaited",
                     peer, errno == ENOTCONN ? "" : " (", errno == ENOTCONN ? "" : strerror(errno),
                     errno == ENOTCONN ? "" : ")", bench_msg_name(pr, want));
        return -1;
    }
    uint32_t magic = ntohl(v[0]), vt = ntohl(v[1]), mlen = ntohl(v[2]), marg = ntohl(v[3]);
    unsigned type = vt & 0xffff, version = vt >> 16;
    if (magic != pr->magic || version != pr->version || mlen > BENCH_MSG_MAX) {
        snprintf(err, errlen,
                 "the %s sent a malformed control message (magic 0x%08x, version %u, length %u)",
                 peer, magic, version, mlen);
        return -1;
    }
    char body[BENCH_MSG_MAX + 1];
    if (mlen > 0 && bench_recv_all(fd, body, mlen, deadline) != 0) {
        snprintf(err, errlen, "the %s closed the control connection in a message", peer);
        return -1;
    }
    if (type == pr->error_type) {
        body[mlen] = '\0';
        snprintf(err, errlen, "the %s failed: %.400s", peer, body);
        return -1;
    }
    if (type != want || marg != arg || mlen != len) {
        snprintf(err, errlen,
                 "protocol: expected %s(%u, %u bytes) from the %s, got %s(%u, %u bytes)",
                 bench_msg_name(pr, want), arg, len, peer, bench_msg_name(pr, type), marg, mlen);
        return -1;
    }
    if (len > 0)
        memcpy(buf, body, len);
    return 0;
}

int bench_ctl_hangup(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

int bench_tcp_listen(int port, char *err, size_t errlen)
{
    int fams[2] = {AF_INET6, AF_INET};
    for (int i = 0; i < 2; i++) {
        int fd = socket(fams[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_storage ss;
        socklen_t sl;
        memset(&ss, 0, sizeof(ss));
        if (fams[i] == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            a->sin6_family = AF_INET6;
            a->sin6_addr = in6addr_any;
            a->sin6_port = htons((uint16_t)port);
            sl = sizeof(*a);
        } else {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            a->sin_family = AF_INET;
            a->sin_addr.s_addr = htonl(INADDR_ANY);
            a->sin_port = htons((uint16_t)port);
            sl = sizeof(*a);
        }
        if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
            int e = errno;
            close(fd);
            if (e == EADDRINUSE) {
                snprintf(err, errlen,
                         "port %d busy (another server listens there): pick one with --port", port);
                return -1;
            }
            if (e == EACCES) {
                snprintf(err, errlen, "port %d: permission denied: pick one above 1023", port);
                return -1;
            }
            snprintf(err, errlen, "cannot bind port %d: %s", port, strerror(e));
            continue;
        }
        if (listen(fd, 4) != 0) {
            snprintf(err, errlen, "cannot listen on port %d: %s", port, strerror(errno));
            close(fd);
            return -1;
        }
        return fd;
    }
    if (err[0] == '\0')
        snprintf(err, errlen, "cannot create a socket: %s", strerror(errno));
    return -1;
}

int bench_tcp_connect(const char *host, int port, const char *hint, char *err, size_t errlen)
{
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(g));
        return -1;
    }
    uint64_t deadline = bench_now_ns() + 10000000000ull;
    int last = 0;
    for (;;) {
        for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) {
                last = errno;
                continue;
            }
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                freeaddrinfo(ai);
                return fd;
            }
            last = errno;
            close(fd);
        }
        if ((last != ECONNREFUSED && last != EINTR) || bench_now_ns() > deadline)
            break;
        usleep(200000);
    }
    freeaddrinfo(ai);
    snprintf(err, errlen, "cannot connect to %s port %d: %s%s", host, port, strerror(last),
             last == ECONNREFUSED && hint != NULL ? hint : "");
    return -1;
}

void bench_tcp_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int bench_accept_peer(const bench_proto_t *pr, int lfd, unsigned hello, int port,
                      const char *refusal, char *err, size_t errlen)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            snprintf(err, errlen, "accept on port %d: %s", port, strerror(errno));
            return -1;
        }
        char hostbuf[NI_MAXHOST] = "?";
        getnameinfo((struct sockaddr *)&ss, sl, hostbuf, sizeof(hostbuf), NULL, 0, NI_NUMERICHOST);
        bench_tcp_nodelay(cfd);
        if (bench_msg_recv(pr, cfd, hello, 0, NULL, 0, 10000000000ull, "client", err, errlen) !=
            0) {
            /* Not one of ours: drop it and keep listening. */
            fprintf(stderr, "%s: server: dropped a connection from %s: %s\n", bench_prog, hostbuf,
                    err);
            err[0] = '\0';
            bench_msg_send(pr, cfd, pr->error_type, 0, refusal, (uint32_t)strlen(refusal));
            close(cfd);
            continue;
        }
        if (!bench_quiet)
            fprintf(stderr, "%s: server: client %s connected\n", bench_prog, hostbuf);
        return cfd;
    }
}

/* ---- worker processes ------------------------------------------------------ */

void bench_set_error(char *err, size_t errlen, const char *fmt, ...)
{
    if (err[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void bench_fail(bench_side_t *s, const char *fmt, ...)
{
    if (s->failed)
        return;
    s->failed = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (s->progress)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "%s: %s: %s\n", bench_prog, s->who, msg);
    if (s->out >= 0) {
        char rec[PIPE_BUF];
        bench_rec_hdr_t *h = (bench_rec_hdr_t *)(void *)rec;
        memset(rec, 0, sizeof(rec));
        h->kind = BENCH_REC_ERROR;
        snprintf(h->who, sizeof(h->who), "%s", s->who);
        snprintf(h->msg, sizeof(h->msg), "%s", msg);
        ssize_t r = write(s->out, rec, s->rec_size);
        (void)r; /* the parent also sees the exit status */
    }
    if (s->ctl >= 0)
        bench_msg_send(s->proto, s->ctl, s->proto->error_type, 0, msg, (uint32_t)strlen(msg));
}

int bench_put_row(bench_side_t *s, void *rec)
{
    ((bench_rec_hdr_t *)rec)->kind = BENCH_REC_ROW;
    if (write(s->out, rec, s->rec_size) != (ssize_t)s->rec_size) {
        bench_fail(s, "cannot pass the result to the parent: %s", strerror(errno));
        return -1;
    }
    return 0;
}

pid_t bench_fork(const int *close_fds, int nclose)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    for (int i = 0; i < nclose; i++)
        if (close_fds[i] >= 0)
            close(close_fds[i]);
    return 0;
}

int bench_collect(int res, size_t rec_size, bench_row_fn on_row, void *ctx, pid_t *pids,
                  const char *const *names, int n, uint64_t grace_s, char *err, size_t errlen)
{
    int alive = n, open = 1, failed = 0, exit_bad[2] = {0, 0};
    size_t have = 0;
    char rec[PIPE_BUF];
    bench_rec_hdr_t *h = (bench_rec_hdr_t *)(void *)rec;
    uint64_t first_exit = 0;
    const uint64_t grace = grace_s * 1000000000ull;
    if (rec_size > sizeof(rec) || n > 2)
        return -1;
    while (open || alive > 0) {
        if (open) {
            struct pollfd pfd = {.fd = res, .events = POLLIN};
            int r = poll(&pfd, 1, 100);
            if (r > 0) {
                ssize_t k = read(res, rec + have, rec_size - have);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0) {
                    open = 0;
                } else if ((have += (size_t)k) == rec_size) {
                    have = 0;
                    if (h->kind == BENCH_REC_ERROR) {
                        h->who[sizeof(h->who) - 1] = h->msg[sizeof(h->msg) - 1] = '\0';
                        bench_set_error(err, errlen, "%s: %s", h->who, h->msg);
                        continue;
                    }
                    on_row(ctx, rec);
                }
            }
        } else {
            poll(NULL, 0, 50);
        }
        for (int i = 0; i < n; i++) {
            if (pids[i] <= 0)
                continue;
            int st;
            pid_t r = waitpid(pids[i], &st, WNOHANG);
            if (r != pids[i])
                continue;
            pids[i] = 0;
            alive--;
            if (first_exit == 0)
                first_exit = bench_now_ns();
            int bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            if (WIFSIGNALED(st) && !(failed && WTERMSIG(st) == SIGTERM)) {
                fprintf(stderr, "%s: the %s (pid %d) was killed by signal %d (%s)\n", bench_prog,
                        names[i], (int)r, WTERMSIG(st), strsignal(WTERMSIG(st)));
                bench_set_error(err, errlen, "the %s was killed by signal %d (%s)", names[i],
                                WTERMSIG(st), strsignal(WTERMSIG(st)));
            } else if (bad) {
                exit_bad[i] = 1;
            }
            if (bad && !failed) {
                failed = 1;
                for (int j = 0; j < n; j++)
                    if (pids[j] > 0)
                        kill(pids[j], SIGTERM), kill(pids[j], SIGCONT);
            }
        }
        if (first_exit != 0 && alive > 0 && bench_now_ns() - first_exit > grace) {
            for (int j = 0; j < n; j++)
                if (pids[j] > 0) {
                    fprintf(stderr,
                            "%s: the %s (pid %d) did not exit %llu s after its peer: killed "
                            "(stuck in a close call?)\n",
                            bench_prog, names[j], (int)pids[j], (unsigned long long)grace_s);
                    kill(pids[j], SIGKILL);
                }
            bench_set_error(err, errlen, "a worker hung after its peer finished");
            failed = 1;
            first_exit = bench_now_ns(); /* reap on the next turns */
        }
    }
    if (exit_bad[0] || exit_bad[1]) /* when no error record told why */
        bench_set_error(err, errlen, "the %s%s%s failed (see above)", exit_bad[0] ? names[0] : "",
                        exit_bad[0] && exit_bad[1] ? " and the " : "", exit_bad[1] ? names[1] : "");
    return failed ? -1 : 0;
}

int bench_run_sides(bench_mode_t mode, int ctl, bench_spawn_fn spawn, void *ctx,
                    const char *const names[2], size_t rec_size, bench_row_fn on_row,
                    uint64_t grace_s, char *err, size_t errlen)
{
    int res[2];
    if (pipe(res) != 0) {
        bench_set_error(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pids[2] = {0, 0};
    const char *who[2];
    int n = 0;
    if (mode == BENCH_MODE_LOOPBACK) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
            bench_set_error(err, errlen, "socketpair: %s", strerror(errno));
            close(res[0]);
            close(res[1]);
            return -1;
        }
        int c0[] = {sv[1], res[0]}, c1[] = {sv[0], res[0]};
        pids[n] = spawn(ctx, 0, sv[0], res[1], 1, c0, 2);
        who[n++] = names[0];
        if (pids[0] > 0) {
            pids[n] = spawn(ctx, 1, sv[1], res[1], 0, c1, 2);
            who[n++] = names[1];
        }
        close(sv[0]);
        close(sv[1]);
    } else {
        int cl[] = {res[0]}, side = mode == BENCH_MODE_SERVER ? 0 : 1;
        pids[n] = spawn(ctx, side, ctl, res[1], 1, cl, 1);
        who[n++] = names[side];
    }
    close(res[1]);
    for (int i = 0; i < n; i++)
        if (pids[i] < 0) {
            bench_set_error(err, errlen, "fork: %s", strerror(errno));
            pids[i] = 0;
        }
    int rc = bench_collect(res[0], rec_size, on_row, ctx, pids, who, n, grace_s, err, errlen);
    close(res[0]);
    return rc;
}

/* ---- output -------------------------------------------------------------------- */

void bench_table_header(FILE *f, const bench_col_t *cols, int n)
{
    fputs("#", f);
    for (int i = 0; i < n; i++)
        if (cols[i].width > 0)
            fprintf(f, " %*s", cols[i].width, cols[i].name);
        else
            fprintf(f, "  %s", cols[i].name);
    fputc('\n', f);
}

void bench_table_row(FILE *f, const bench_col_t *cols, int n, char cells[][BENCH_CELL])
{
    fputs(" ", f);
    for (int i = 0; i < n; i++)
        if (cols[i].width > 0)
            fprintf(f, " %*s", cols[i].width, cells[i]);
        else
            fprintf(f, "  %s", cells[i]);
    fputc('\n', f);
}

void bench_progress_start(bench_progress_t *p, uint64_t t0_ns)
{
    p->next_ns = t0_ns + 1000000000ull; /* only runs longer than a second get a line */
}

int bench_progress_due(bench_progress_t *p, uint64_t now_ns)
{
    if (!p->on || now_ns < p->next_ns)
        return 0;
    p->next_ns = now_ns + 250000000ull;
    return 1;
}

void bench_progress_draw(bench_progress_t *p, const char *fmt, ...)
{
    va_list ap;
    fputs("\r\033[K", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    p->drawn = 1;
}

void bench_progress_clear(bench_progress_t *p)
{
    if (p->drawn)
        fputs("\r\033[K", stderr);
    p->drawn = 0;
}

void bench_json_str(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
        switch (*c) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f);
        }
    }
    fputc('"', f);
}

void bench_json_u64(FILE *f, const char *key, uint64_t v, int comma)
{
    fprintf(f, "\"%s\": %llu%s", key, (unsigned long long)v, comma ? ", " : "");
}

void bench_json_dbl(FILE *f, const char *key, double v, int comma)
{
    /* JSON has no NaN or infinity. */
    if (v != v || v > 1e300 || v < -1e300)
        fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
    else
        fprintf(f, "\"%s\": %.9g%s", key, v, comma ? ", " : "");
}

long bench_host_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}

long bench_ncpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return bench_host_cpus();
}

const char *bench_cores_text(char *buf, size_t len)
{
    long n = bench_ncpus(), host = bench_host_cpus();
    if (n < host)
        snprintf(buf, len, "%ld of %ld cores", n, host);
    else
        snprintf(buf, len, "%ld cores", n);
    return buf;
}

void bench_json_sysinfo(FILE *f)
{
    struct utsname u;
    memset(&u, 0, sizeof(u));
    uname(&u);
    fprintf(f, "\"host\": ");
    bench_json_str(f, u.nodename);
    fprintf(f, ", \"kernel\": ");
    bench_json_str(f, u.release);
    fprintf(f, ", \"nproc\": %ld, \"host_cpus\": %ld", bench_ncpus(), bench_host_cpus());
}

void bench_json_env(FILE *f, const char *skip)
{
    extern char **environ;
    int first = 1;
    fputc('{', f);
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "TPX_", 4) != 0 || strchr(*e, '=') == NULL)
            continue;
        const char *eq = strchr(*e, '=');
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
        if (skip != NULL && strcmp(name, skip) == 0)
            continue;
        fprintf(f, "%s", first ? "" : ", ");
        bench_json_str(f, name);
        fputs(": ", f);
        /* A secret is recorded as set, never copied into a record. */
        bench_json_str(f, strcmp(name, "TPX_AUTH_TOKEN") == 0 ? "(set, hidden)" : eq + 1);
        first = 0;
    }
    fputc('}', f);
}

/* ---- roles and the parent's side of the control connection ------------------------ */

const char *bench_mode_name(bench_mode_t mode)
{
    return mode == BENCH_MODE_LOOPBACK ? "loopback"
           : mode == BENCH_MODE_SERVER ? "server"
                                       : "client";
}

int bench_parse_role(int argc, char **argv, int first, int loopback_flag, bench_mode_t *mode,
                     const char **host)
{
    int i = first;
    *mode = BENCH_MODE_LOOPBACK;
    if (i < argc) {
        const char *role = argv[i++];
        if (strcmp(role, "server") == 0) {
            *mode = BENCH_MODE_SERVER;
        } else if (strcmp(role, "client") == 0) {
            if (i >= argc)
                return bench_usage_error("client: which HOST? (e.g. %s client 10.0.0.2)",
                                         bench_prog);
            *mode = BENCH_MODE_CLIENT;
            *host = argv[i++];
        } else if (strcmp(role, "loopback") != 0) {
            return bench_usage_error("unknown role '%s' (server, client HOST, or --loopback)",
                                     role);
        }
        if (i < argc)
            return bench_usage_error("unexpected argument '%s'", argv[i]);
    }
    if (loopback_flag && *mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--loopback and %s exclude each other", bench_mode_name(*mode));
    return BENCH_EXIT_OK;
}

int bench_server_start(const bench_proto_t *pr, int port, unsigned hello, unsigned params_type,
                       const void *params, uint32_t len, const char *refusal, char *err,
                       size_t errlen)
{
    int lfd = bench_tcp_listen(port, err, errlen);
    if (lfd < 0)
        return -1;
    if (!bench_quiet)
        fprintf(stderr, "%s: server: listening on port %d for one client\n", bench_prog, port);
    int cfd = bench_accept_peer(pr, lfd, hello, port, refusal, err, errlen);
    close(lfd);
    if (cfd < 0)
        return -1;
    if (bench_msg_send(pr, cfd, params_type, 0, params, len) != 0) {
        snprintf(err, errlen, "cannot send the parameters to the client: %s", strerror(errno));
        close(cfd);
        return -1;
    }
    return cfd;
}

int bench_client_start(const bench_proto_t *pr, const char *host, int port, unsigned hello,
                       unsigned params_type, void *params, uint32_t len, const char *hint,
                       char *err, size_t errlen)
{
    int fd = bench_tcp_connect(host, port, hint, err, errlen);
    if (fd < 0)
        return -1;
    bench_tcp_nodelay(fd);
    if (bench_msg_send(pr, fd, hello, 0, NULL, 0) != 0 ||
        bench_msg_recv(pr, fd, params_type, 0, params, len, 30000000000ull, "server", err,
                       errlen) != 0) {
        if (err[0] == '\0')
            snprintf(err, errlen, "cannot talk to the server: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int bench_check_alive(bench_side_t *s, uint64_t timeout_s, uint64_t now, uint64_t *next_check,
                      uint64_t last_progress, int force, const char *what)
{
    if (now < *next_check && !force)
        return 0;
    *next_check = now + 100000000ull;
    if (now - last_progress > timeout_s * 1000000000ull) {
        bench_fail(s, "%s: no progress for %llu s (peer gone? raise --timeout)", what,
                   (unsigned long long)timeout_s);
        return -1;
    }
    if (bench_ctl_hangup(s->ctl)) {
        char err[256] = "";
        /* The peer may have said why before it left. */
        bench_msg_recv(s->proto, s->ctl, s->proto->error_type, 0, NULL, 0, 200000000ull, s->peer,
                       err, sizeof(err));
        bench_fail(s, "%s: the %s went away (%s)", what, s->peer,
                   strncmp(err, "the ", 4) == 0 && strstr(err, "failed:")
                       ? err
                       : "control connection closed");
        return -1;
    }
    return 0;
}

/* ---- other tools ---------------------------------------------------------------- */

void bench_sibling_path(const char *argv0, const char *name, char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0 && argv0 != NULL && strchr(argv0, '/') != NULL) {
        snprintf(self, sizeof(self), "%s", argv0);
        n = (ssize_t)strlen(self);
    }
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(out, len, "%s/%s", self, name);
            if (access(out, X_OK) == 0)
                return;
        }
    }
    snprintf(out, len, "%s", name);
}

int bench_run_tool(const char *const argv[])
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int dn = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (dn >= 0)
            dup2(dn, STDOUT_FILENO);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", bench_prog, argv[0], strerror(errno));
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- --plot ------------------------------------------------------------------------ */

int bench_gnuplot_find(char *out, size_t len)
{
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/usr/bin:/bin";
    while (*path != '\0') {
        size_t n = strcspn(path, ":");
        if (n > 0 && path[0] == '/') {
            char cand[PATH_MAX];
            int w = snprintf(cand, sizeof(cand), "%.*s/gnuplot", (int)n, path);
            if (w > 0 && (size_t)w < sizeof(cand) && access(cand, X_OK) == 0) {
                snprintf(out, len, "%s", cand);
                return 0;
            }
        }
        path += n;
        path += *path == ':';
    }
    return -1;
}

int bench_plot(const char *png, const char *title, const bench_point_t *pts, size_t n)
{
    char gp[PATH_MAX], exe[PATH_MAX];
    if (bench_gnuplot_find(exe, sizeof(exe)) != 0) {
        fprintf(stderr, "%s: --plot: gnuplot is not installed (Debian: apt-get install "
                        "gnuplot-nox)\n", bench_prog);
        return -1;
    }
    if (n == 0) {
        fprintf(stderr, "%s: --plot: no result to plot\n", bench_prog);
        return -1;
    }
    int w = snprintf(gp, sizeof(gp), "%s.gp", png);
    if (w < 0 || (size_t)w >= sizeof(gp) || strchr(png, '"') != NULL) {
        fprintf(stderr, "%s: --plot: unusable file name '%s'\n", bench_prog, png);
        return -1;
    }
    FILE *f = fopen(gp, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: --plot: cannot write %s: %s\n", bench_prog, gp, strerror(errno));
        return -1;
    }
    /* Labels in order of first appearance; one inline data block each. */
    const char *labels[256];
    size_t nl = 0;
    for (size_t i = 0; i < n && nl < 256; i++) {
        size_t j = 0;
        while (j < nl && strcmp(labels[j], pts[i].label) != 0)
            j++;
        if (j == nl)
            labels[nl++] = pts[i].label;
    }
    fprintf(f, "# written by %s --plot; run `gnuplot %s` to redraw\n", bench_prog, gp);
    fprintf(f, "set terminal png size 1000,600\nset output \"%s\"\n", png);
    fprintf(f, "set title ");
    bench_json_str(f, title); /* a JSON string is a valid gnuplot double-quoted string */
    fprintf(f, " noenhanced\nset xlabel \"message size (bytes)\"\n"
               "set ylabel \"GB/s (1e9 bytes/s)\"\nset logscale x 2\nset grid\n"
               "set key left top noenhanced\nset yrange [0:*]\n"
               "set format x \"%%.0b%%BB\"\n");
    for (size_t j = 0; j < nl; j++) {
        fprintf(f, "$d%zu << EOD\n", j);
        for (size_t i = 0; i < n; i++)
            if (strcmp(pts[i].label, labels[j]) == 0 && pts[i].size > 0)
                fprintf(f, "%" PRIu64 " %.6f\n", pts[i].size, pts[i].gbps);
        fprintf(f, "EOD\n");
    }
    fprintf(f, "plot ");
    for (size_t j = 0; j < nl; j++) {
        fprintf(f, "%s$d%zu using 1:2 with linespoints lw 2 title ", j ? ", \\\n     " : "", j);
        bench_json_str(f, labels[j]);
    }
    fprintf(f, "\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: --plot: cannot write %s: %s\n", bench_prog, gp, strerror(errno));
        return -1;
    }
    const char *argv[] = {exe, gp, NULL};
    int rc = bench_run_tool(argv);
    if (rc != 0) {
        fprintf(stderr, "%s: --plot: gnuplot %s failed (status %d)\n", bench_prog, gp, rc);
        return -1;
    }
    return 0;
}
