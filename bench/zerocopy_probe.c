/* zerocopy_probe.c - does MSG_ZEROCOPY help a bulk TCP sender?
 *
 * Standalone (no tpx dependency). Build:
 *   gcc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -pthread \
 *       -o zerocopy_probe bench/zerocopy_probe.c
 *
 * One sender and one receiver over a TCP connection (one fresh connection per
 * run). The sender walks a large buffer (default 256 MiB, wrapping around) in
 * send() calls of a given size for --duration seconds, either plainly (the
 * kernel copies) or with SO_ZEROCOPY + MSG_ZEROCOPY, reaping completions from
 * the socket error queue (recvmsg MSG_ERRQUEUE, SO_EE_ORIGIN_ZEROCOPY) and
 * counting the notifications and the sends the kernel reported as copied
 * anyway (SO_EE_CODE_ZEROCOPY_COPIED). The sender never reuses a buffer
 * region while it is still in flight: when more than half the buffer is
 * outstanding it waits for completions. A run ends with shutdown(SHUT_WR);
 * the receiver answers with the byte count and its CPU time, and the sender
 * waits for every outstanding completion; the clock and the sender's CPU time
 * (getrusage RUSAGE_THREAD, user + sys) stop there. GB/s = 1e9 bytes/s.
 *
 * Modes:
 *   --mode both  (default) receiver thread + sender thread in this process
 *   --mode recv  only the receiver: listens on --addr/--port, serves --count
 *                connections (0 = until killed)
 *   --mode send  only the sender: connects to --addr/--port (retrying for 10 s)
 * recv + send let the two ends live in different network namespaces.
 *
 * Options:
 *   --addr A       IPv4/IPv6 address (default 127.0.0.1)
 *   --port P       port (default 0 = ephemeral in mode both; required otherwise)
 *   --sizes LIST   send sizes, K/M/G suffixes (default 64K,256K,1M,4M)
 *   --duration S   seconds of sending per run (default 3)
 *   --zerocopy L   0, 1 or 0,1 (default 0,1)
 *   --repeat N     runs per configuration, interleaved (default 2)
 *   --buf SIZE     sender buffer (default 256M)
 *   --rsize SIZE   receiver recv() size (default 1M)
 *   --sockbuf SIZE SO_SNDBUF/SO_RCVBUF (default 0 = kernel autotuning)
 *   --label NAME   tag printed on every line (default loopback/addr)
 *   --count N      (recv mode) connections to serve, 0 = forever
 *
 * Output: one "run ..." line per run, then a table per send size: median and
 * best GB/s for copy and zerocopy, sender CPU s/GB (median), receiver CPU s/GB
 * (median), % of zerocopy sends the kernel copied, notifications per send.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

#define MAX_SIZES 16
#define MAX_REPEAT 32

struct opts {
    const char *mode;
    const char *addr;
    int port;
    size_t sizes[MAX_SIZES];
    int nsizes;
    double duration;
    int zc[2];
    int nzc;
    int repeat;
    size_t buf;
    size_t rsize;
    int sockbuf;
    const char *label;
    int count;
};

/* what the receiver sends back at the end of a connection (same host: host
 * byte order) */
struct ack {
    uint64_t bytes;
    uint64_t cpu_us;
};

struct result {
    size_t size;
    int zc;
    int rep;
    uint64_t bytes;
    double secs;
    double gbps;
    double snd_cpu;      /* seconds */
    double rcv_cpu;      /* seconds */
    uint64_t sends;      /* send() calls that returned > 0 */
    uint64_t zc_sends;   /* of those, MSG_ZEROCOPY ones (= notification ids) */
    uint64_t notifs;     /* error-queue messages */
    uint64_t completed;  /* ids covered by notifications */
    uint64_t copied;     /* ids covered by notifications with ..._COPIED */
    uint64_t enobufs;    /* send() returned ENOBUFS (optmem/memlock limit) */
    uint64_t waits;      /* blocking waits for completions (buffer reuse) */
};

static void die(const char *what)
{
    fprintf(stderr, "zerocopy_probe: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void usage(const char *msg)
{
    fprintf(stderr, "zerocopy_probe: %s\n"
            "usage: zerocopy_probe [--mode both|send|recv] [--addr A] [--port P]\n"
            "       [--sizes 64K,256K,1M,4M] [--duration S] [--zerocopy 0|1|0,1]\n"
            "       [--repeat N] [--buf SIZE] [--rsize SIZE] [--sockbuf SIZE]\n"
            "       [--label NAME] [--count N]\n", msg);
    exit(2);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_cpu(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) != 0)
        die("getrusage");
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        usage("bad size");
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end != '\0' && *end != ',')
        usage("bad size suffix");
    return (size_t)v;
}

static void fmt_size(size_t v, char *out, size_t n)
{
    if (v >= (1u << 20) && v % (1u << 20) == 0)
        snprintf(out, n, "%zuM", v >> 20);
    else if (v >= 1024 && v % 1024 == 0)
        snprintf(out, n, "%zuK", v >> 10);
    else
        snprintf(out, n, "%zu", v);
}

/* ---------- sockets ---------- */

static int resolve(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len)
{
    struct addrinfo hints, *ai;
    char portstr[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(addr, portstr, &hints, &ai);
    if (rc != 0) {
        fprintf(stderr, "zerocopy_probe: %s: %s\n", addr, gai_strerror(rc));
        exit(2);
    }
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    freeaddrinfo(ai);
    return ss->ss_family;
}

static void set_bufs(int fd, int sockbuf)
{
    if (sockbuf <= 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf) != 0)
        die("setsockopt SO_SNDBUF/SO_RCVBUF");
}

static int make_listener(const struct opts *o, int *port_out)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fam = resolve(o->addr, o->port, &ss, &len);
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    set_bufs(fd, o->sockbuf); /* inherited by accepted sockets */
    if (bind(fd, (struct sockaddr *)&ss, len) != 0)
        die("bind");
    if (listen(fd, 8) != 0)
        die("listen");
    len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        die("getsockname");
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

static int connect_to(const struct opts *o, int port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fam = resolve(o->addr, port, &ss, &len);
    double deadline = now() + 10.0;
    for (;;) {
        int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            die("socket");
        set_bufs(fd, o->sockbuf);
        if (connect(fd, (struct sockaddr *)&ss, len) == 0)
            return fd;
        int e = errno;
        close(fd);
        if ((e != ECONNREFUSED && e != ENETUNREACH && e != EHOSTUNREACH) || now() > deadline) {
            errno = e;
            die("connect");
        }
        usleep(50 * 1000);
    }
}

static int read_full(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t r = send(fd, c, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* ---------- receiver ---------- */

struct recv_args {
    int lfd;
    int count; /* 0 = forever */
    size_t rsize;
};

static void *receiver(void *arg)
{
    struct recv_args *ra = arg;
    char *buf = malloc(ra->rsize);
    if (!buf)
        die("malloc");
    memset(buf, 0, ra->rsize);
    for (int served = 0; ra->count == 0 || served < ra->count; served++) {
        int fd = accept4(ra->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) {
                served--;
                continue;
            }
            die("accept");
        }
        double c0 = thread_cpu();
        uint64_t total = 0;
        for (;;) {
            ssize_t r = recv(fd, buf, ra->rsize, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                die("recv");
            if (r == 0)
                break;
            total += (uint64_t)r;
        }
        struct ack a = { total, (uint64_t)((thread_cpu() - c0) * 1e6) };
        if (write_full(fd, &a, sizeof a) != 0)
            fprintf(stderr, "zerocopy_probe: receiver: could not send the ack\n");
        close(fd);
    }
    free(buf);
    return NULL;
}

/* ---------- sender ---------- */

struct zc_state {
    uint64_t issued;    /* zerocopy sends accepted by the kernel */
    uint64_t completed;
    uint64_t copied;
    uint64_t notifs;
    /* outstanding bytes: ring of (id -> bytes) is overkill; sends are in order
     * and completions arrive in order for TCP, so keep a FIFO of sizes. */
    size_t *fifo;
    size_t fifo_cap, fifo_head, fifo_len;
    size_t out_bytes;
};

static void zc_push(struct zc_state *z, size_t n)
{
    if (z->fifo_len == z->fifo_cap) {
        size_t cap = z->fifo_cap ? z->fifo_cap * 2 : 1024;
        size_t *f = malloc(cap * sizeof *f);
        if (!f)
            die("malloc");
        for (size_t i = 0; i < z->fifo_len; i++)
            f[i] = z->fifo[(z->fifo_head + i) % z->fifo_cap];
        free(z->fifo);
        z->fifo = f;
        z->fifo_cap = cap;
        z->fifo_head = 0;
    }
    z->fifo[(z->fifo_head + z->fifo_len) % z->fifo_cap] = n;
    z->fifo_len++;
    z->out_bytes += n;
}

static void zc_pop(struct zc_state *z, uint64_t count)
{
    while (count-- && z->fifo_len) {
        z->out_bytes -= z->fifo[z->fifo_head];
        z->fifo_head = (z->fifo_head + 1) % z->fifo_cap;
        z->fifo_len--;
    }
}

/* Drain the error queue without blocking. Returns the number of messages. */
static int zc_reap(int fd, struct zc_state *z)
{
    int got = 0;
    for (;;) {
        char control[256];
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t r = recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return got;
            if (errno == EINTR)
                continue;
            die("recvmsg MSG_ERRQUEUE");
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
            if (!((cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR) ||
                  (cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR)))
                continue;
            struct sock_extended_err serr;
            memcpy(&serr, CMSG_DATA(cm), sizeof serr);
            if (serr.ee_origin != SO_EE_ORIGIN_ZEROCOPY || serr.ee_errno != 0) {
                fprintf(stderr, "zerocopy_probe: unexpected error-queue entry: origin %u errno %u\n",
                        serr.ee_origin, serr.ee_errno);
                exit(2);
            }
            uint32_t lo = serr.ee_info, hi = serr.ee_data;
            uint64_t n = (uint64_t)(uint32_t)(hi - lo) + 1;
            z->notifs++;
            z->completed += n;
            if (serr.ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                z->copied += n;
            zc_pop(z, n);
            got++;
        }
    }
}

/* Block (poll POLLERR) until at least one notification arrives or timeout. */
static void zc_wait(int fd, struct zc_state *z, int timeout_ms)
{
    struct pollfd p = { .fd = fd, .events = 0 };
    if (zc_reap(fd, z))
        return;
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno != EINTR)
        die("poll");
    zc_reap(fd, z);
}

static void run_sender(const struct opts *o, int port, size_t size, int zc, int rep,
                       char *buf, struct result *res)
{
    int fd = connect_to(o, port);
    if (zc) {
        int one = 1;
        if (setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0)
            die("setsockopt SO_ZEROCOPY");
    }
    struct zc_state z;
    memset(&z, 0, sizeof z);
    memset(res, 0, sizeof *res);
    res->size = size;
    res->zc = zc;
    res->rep = rep;

    size_t nchunks = o->buf / size;
    if (nchunks == 0)
        nchunks = 1;
    size_t limit = nchunks * size / 2; /* max bytes in flight (zerocopy) */
    size_t chunk = 0;
    int flags = MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0);
    uint64_t bytes = 0;

    double c0 = thread_cpu();
    double t0 = now(), tend = t0 + o->duration;
    while (now() < tend) {
        if (zc) {
            /* never overwrite / resend a region still pinned by the kernel */
            while (z.out_bytes + size > limit) {
                res->waits++;
                zc_wait(fd, &z, 1000);
            }
        }
        char *p = buf + chunk * size;
        size_t left = size;
        while (left) {
            ssize_t r = send(fd, p, left, flags);
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                if (zc && errno == ENOBUFS) {
                    /* optmem_max or RLIMIT_MEMLOCK: reap and retry */
                    res->enobufs++;
                    zc_wait(fd, &z, 100);
                    continue;
                }
                die("send");
            }
            res->sends++;
            if (zc) {
                z.issued++;
                zc_push(&z, (size_t)r);
            }
            p += r;
            left -= (size_t)r;
            bytes += (uint64_t)r;
        }
        chunk = (chunk + 1) % nchunks;
        if (zc && (res->sends & 7) == 0)
            zc_reap(fd, &z);
    }
    if (shutdown(fd, SHUT_WR) != 0)
        die("shutdown");
    struct ack a;
    if (read_full(fd, &a, sizeof a) != 0) {
        fprintf(stderr, "zerocopy_probe: no ack from the receiver\n");
        exit(2);
    }
    double drain_deadline = now() + 10.0;
    while (zc && z.completed < z.issued) {
        if (now() > drain_deadline) {
            fprintf(stderr, "zerocopy_probe: %llu of %llu completions missing after 10 s\n",
                    (unsigned long long)(z.issued - z.completed), (unsigned long long)z.issued);
            break;
        }
        zc_wait(fd, &z, 100);
    }
    double t1 = now();
    double c1 = thread_cpu();
    close(fd);
    free(z.fifo);

    if (a.bytes != bytes) {
        fprintf(stderr, "zerocopy_probe: receiver got %llu bytes, sender sent %llu\n",
                (unsigned long long)a.bytes, (unsigned long long)bytes);
        exit(2);
    }
    res->bytes = bytes;
    res->secs = t1 - t0;
    res->gbps = (double)bytes / res->secs / 1e9;
    res->snd_cpu = c1 - c0;
    res->rcv_cpu = (double)a.cpu_us * 1e-6;
    res->zc_sends = z.issued;
    res->notifs = z.notifs;
    res->completed = z.completed;
    res->copied = z.copied;
}

static void print_run(const char *label, const struct result *r)
{
    char sz[32];
    fmt_size(r->size, sz, sizeof sz);
    double gb = (double)r->bytes / 1e9;
    printf("run label=%s size=%s zerocopy=%d rep=%d bytes=%llu secs=%.3f GBps=%.3f "
           "snd_cpu_s=%.3f snd_cpu_s_per_GB=%.4f rcv_cpu_s_per_GB=%.4f sends=%llu "
           "notifs=%llu completed=%llu copied=%llu copied_pct=%.1f enobufs=%llu waits=%llu\n",
           label, sz, r->zc, r->rep, (unsigned long long)r->bytes, r->secs, r->gbps,
           r->snd_cpu, gb > 0 ? r->snd_cpu / gb : 0.0, gb > 0 ? r->rcv_cpu / gb : 0.0,
           (unsigned long long)r->sends, (unsigned long long)r->notifs,
           (unsigned long long)r->completed, (unsigned long long)r->copied,
           r->completed ? 100.0 * (double)r->copied / (double)r->completed : 0.0,
           (unsigned long long)r->enobufs, (unsigned long long)r->waits);
    fflush(stdout);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    if (n == 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct agg {
    int n;
    double gbps_med, gbps_best, scpu_med, rcpu_med, copied_pct, notif_per_send;
};

static struct agg aggregate(const struct result *res, int nres, size_t size, int zc)
{
    struct agg g;
    double gb[MAX_REPEAT], sc[MAX_REPEAT], rc[MAX_REPEAT];
    uint64_t copied = 0, completed = 0, notifs = 0, zsends = 0;
    memset(&g, 0, sizeof g);
    for (int i = 0; i < nres; i++) {
        const struct result *r = &res[i];
        if (r->size != size || r->zc != zc || g.n >= MAX_REPEAT)
            continue;
        double gbytes = (double)r->bytes / 1e9;
        gb[g.n] = r->gbps;
        sc[g.n] = r->snd_cpu / gbytes;
        rc[g.n] = r->rcv_cpu / gbytes;
        if (r->gbps > g.gbps_best)
            g.gbps_best = r->gbps;
        copied += r->copied;
        completed += r->completed;
        notifs += r->notifs;
        zsends += r->zc_sends;
        g.n++;
    }
    g.gbps_med = median(gb, g.n);
    g.scpu_med = median(sc, g.n);
    g.rcpu_med = median(rc, g.n);
    g.copied_pct = completed ? 100.0 * (double)copied / (double)completed : 0.0;
    g.notif_per_send = zsends ? (double)notifs / (double)zsends : 0.0;
    return g;
}

static void print_table(const struct opts *o, const char *label, const struct result *res, int nres)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("\n== %s: copy vs MSG_ZEROCOPY (%d run(s) per config, %.1f s each, %ld CPU(s); "
           "GB/s = 1e9 B/s, median (best); CPU = user+sys of the thread, s per GB, median)\n",
           label, o->repeat, o->duration, ncpu);
    printf("%-6s | %-15s %-15s %6s | %8s %8s | %8s %8s | %8s %9s\n", "size", "copy GB/s",
           "zc GB/s", "zc/cp", "snd cp", "snd zc", "rcv cp", "rcv zc", "zc copied", "notif/snd");
    for (int s = 0; s < o->nsizes; s++) {
        size_t size = o->sizes[s];
        char sz[32];
        fmt_size(size, sz, sizeof sz);
        struct agg cp = aggregate(res, nres, size, 0);
        struct agg zc = aggregate(res, nres, size, 1);
        char a[32] = "-", b[32] = "-", ratio[16] = "-", s0[16] = "-", s1[16] = "-",
             r0[16] = "-", r1[16] = "-", pct[16] = "-", nps[16] = "-";
        if (cp.n) {
            snprintf(a, sizeof a, "%.2f (%.2f)", cp.gbps_med, cp.gbps_best);
            snprintf(s0, sizeof s0, "%.3f", cp.scpu_med);
            snprintf(r0, sizeof r0, "%.3f", cp.rcpu_med);
        }
        if (zc.n) {
            snprintf(b, sizeof b, "%.2f (%.2f)", zc.gbps_med, zc.gbps_best);
            snprintf(s1, sizeof s1, "%.3f", zc.scpu_med);
            snprintf(r1, sizeof r1, "%.3f", zc.rcpu_med);
            snprintf(pct, sizeof pct, "%.1f%%", zc.copied_pct);
            snprintf(nps, sizeof nps, "%.3f", zc.notif_per_send);
        }
        if (cp.n && zc.n && cp.gbps_med > 0)
            snprintf(ratio, sizeof ratio, "%.2f", zc.gbps_med / cp.gbps_med);
        printf("%-6s | %-15s %-15s %6s | %8s %8s | %8s %8s | %8s %9s\n", sz, a, b, ratio, s0, s1,
               r0, r1, pct, nps);
    }
    fflush(stdout);
}

/* ---------- main ---------- */

static void parse_args(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = "both";
    o->addr = "127.0.0.1";
    o->duration = 3.0;
    o->repeat = 2;
    o->buf = (size_t)256 << 20;
    o->rsize = (size_t)1 << 20;
    const char *sizes = "64K,256K,1M,4M", *zcs = "0,1";
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (i + 1 >= argc)
            usage("missing value");
        const char *v = argv[++i];
        if (!strcmp(k, "--mode"))
            o->mode = v;
        else if (!strcmp(k, "--addr"))
            o->addr = v;
        else if (!strcmp(k, "--port"))
            o->port = atoi(v);
        else if (!strcmp(k, "--sizes"))
            sizes = v;
        else if (!strcmp(k, "--duration"))
            o->duration = atof(v);
        else if (!strcmp(k, "--zerocopy"))
            zcs = v;
        else if (!strcmp(k, "--repeat"))
            o->repeat = atoi(v);
        else if (!strcmp(k, "--buf"))
            o->buf = parse_size(v);
        else if (!strcmp(k, "--rsize"))
            o->rsize = parse_size(v);
        else if (!strcmp(k, "--sockbuf"))
            o->sockbuf = (int)parse_size(v);
        else if (!strcmp(k, "--label"))
            o->label = v;
        else if (!strcmp(k, "--count"))
            o->count = atoi(v);
        else
            usage("unknown option");
    }
    for (const char *p = sizes; *p;) {
        if (o->nsizes == MAX_SIZES)
            usage("too many sizes");
        size_t s = parse_size(p);
        if (s == 0)
            usage("size 0");
        o->sizes[o->nsizes++] = s;
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    for (const char *p = zcs; *p; p++) {
        if (*p == ',')
            continue;
        if ((*p != '0' && *p != '1') || o->nzc == 2)
            usage("--zerocopy takes 0, 1 or 0,1");
        o->zc[o->nzc++] = *p - '0';
    }
    if (o->nzc == 0)
        usage("--zerocopy takes 0, 1 or 0,1");
    if (o->repeat < 1 || o->repeat > MAX_REPEAT)
        usage("--repeat out of range");
    if (o->duration <= 0)
        usage("--duration must be > 0");
    if (o->rsize == 0)
        usage("--rsize 0");
    if (strcmp(o->mode, "both") && strcmp(o->mode, "send") && strcmp(o->mode, "recv"))
        usage("--mode both|send|recv");
    if (strcmp(o->mode, "both") && o->port == 0)
        usage("--port is required with --mode send/recv");
    if (!o->label)
        o->label = strcmp(o->addr, "127.0.0.1") && strcmp(o->addr, "::1") ? o->addr : "loopback";
}

int main(int argc, char **argv)
{
    struct opts o;
    parse_args(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);

    int nruns = o.repeat * o.nsizes * o.nzc;
    pthread_t rt;
    struct recv_args ra;
    int port = o.port;

    if (!strcmp(o.mode, "recv") || !strcmp(o.mode, "both")) {
        ra.lfd = make_listener(&o, &port);
        ra.rsize = o.rsize;
        if (!strcmp(o.mode, "recv")) {
            ra.count = o.count;
            fprintf(stderr, "zerocopy_probe: receiving on %s port %d\n", o.addr, port);
            receiver(&ra);
            close(ra.lfd);
            return 0;
        }
        ra.count = nruns;
        if (pthread_create(&rt, NULL, receiver, &ra) != 0)
            die("pthread_create");
    }

    /* sender: the main thread */
    char *buf = mmap(NULL, o.buf, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        die("mmap");
    for (size_t i = 0; i < o.buf; i++)
        buf[i] = (char)(i * 131 + (i >> 12));
    struct result *res = calloc((size_t)nruns, sizeof *res);
    if (!res)
        die("calloc");
    int n = 0;
    /* interleave: for each repetition, every size, copy then zerocopy */
    for (int rep = 0; rep < o.repeat; rep++)
        for (int s = 0; s < o.nsizes; s++)
            for (int z = 0; z < o.nzc; z++) {
                run_sender(&o, port, o.sizes[s], o.zc[z], rep + 1, buf, &res[n]);
                print_run(o.label, &res[n]);
                n++;
            }
    if (!strcmp(o.mode, "both")) {
        pthread_join(rt, NULL);
        close(ra.lfd);
    }
    print_table(&o, o.label, res, n);
    free(res);
    munmap(buf, o.buf);
    return 0;
}
