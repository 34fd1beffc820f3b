/*
 * tpx_netbench.c - tpx-netbench: throughput of tpx's built-in TCP transport,
 * driven through its ncclNet v10 table alone (tpx_net_builtin()).
 *
 * What it promises: the numbers are the transport's, and the bytes they count
 * arrived intact (--verify). The transport reads its TPX_* settings once per
 * process, so every configuration (one TPX_NSOCKS value) runs in a fresh
 * receiver process and a fresh sender process; the parent never touches the
 * transport, it only forks, collects result rows and prints them. Before each
 * phase the receiver posts its receives and only then releases the sender
 * (the barrier); the time reported is the receiver's, from that release to
 * its last completion. Warm-up iterations are never timed. Every wait has a
 * deadline: a peer that vanishes ends the run with an error, never a hang.
 *
 * Roles: --loopback (both processes on this host: the default), or `server`
 * (the receiver side) and `client HOST` (the sender side) on two machines.
 * Server and client first meet on a small TCP bootstrap connection of this
 * tool (--port); it then carries the run parameters, the 128-byte listen
 * handle, the barriers and the results. In loopback mode a socketpair does
 * the same job.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tpx/tpx.h"

#define NB_PROG              "tpx-netbench"
#define NB_DEFAULT_PORT      18515
#define NB_DEFAULT_SIZE      (256ull << 20)
#define NB_DEFAULT_WINDOW    8
#define NB_DEFAULT_TIMEOUT_S 60
#define NB_MAX_SIZES         64
#define NB_MAX_NSOCKS        32
#define NB_MAX_SIZE          (16ull << 30)
/* Largest single isend when --chunk is not given: fits test()'s int sizes. */
#define NB_MAX_CHUNK (1ull << 30)
/* Buffer memory of one side; the window is reduced to stay under it. */
#define NB_MEM_BUDGET (1ull << 30)
/* Automatic --iters: every row moves at least this much (5 .. 100000 iterations). */
#define NB_AUTO_BYTES     (1ull << 30)
#define NB_AUTO_MIN_ITERS 5
#define NB_AUTO_MAX_ITERS 100000
#define NB_AUTO           ((uint64_t)-1)

/* Exit statuses. */
#define NB_EXIT_OK    0
#define NB_EXIT_FAIL  1 /* the transport, the data or the peer failed */
#define NB_EXIT_USAGE 2 /* bad command line */

typedef enum { NB_MODE_LOOPBACK, NB_MODE_SERVER, NB_MODE_CLIENT } nb_mode_t;
typedef enum { NB_RECV, NB_SEND } nb_role_t;

/*
 * The run parameters. The server (or, in loopback mode, the command line)
 * decides them and the client receives them. Only uint64_t fields: the wire
 * form is this struct as big-endian 64-bit words.
 */
typedef struct {
    uint64_t nsizes;
    uint64_t sizes[NB_MAX_SIZES]; /* message sizes, bytes */
    uint64_t nnsocks;
    uint64_t nsocks[NB_MAX_NSOCKS]; /* TPX_NSOCKS per configuration; 0: environment */
    uint64_t iters;                 /* timed iterations; NB_AUTO: per size */
    uint64_t warmup;                /* untimed iterations; NB_AUTO: iters / 10, >= 1 */
    uint64_t window;                /* requests in flight per comm */
    uint64_t chunk;                 /* largest isend; 0: whole message (<= 1 GiB) */
    uint64_t verify;                /* fill a pattern and check every byte */
    uint64_t timeout_s;             /* no progress for this long: error */
    uint64_t nthreads;              /* TPX_NTHREADS; NB_AUTO: environment */
} nb_params_t;

/*
 * One result row: one message size of one configuration. The receiver
 * writes it; uint64_t fields first (sent as big-endian words), then the name.
 */
typedef struct {
    uint64_t cfg;         /* index into params.nsocks */
    uint64_t nsocks;      /* effective TPX_NSOCKS of the receiver */
    uint64_t nthreads;    /* effective TPX_NTHREADS of the receiver */
    uint64_t peer_nsocks; /* effective TPX_NSOCKS of the sender */
    uint64_t size, iters, warmup, window, chunk, nchunks, nbuf;
    uint64_t time_ns;                   /* receiver: barrier release to last completion */
    uint64_t send_time_ns;              /* sender: barrier release to its last completion */
    uint64_t rcpu_user_ns, rcpu_sys_ns; /* receiver process, timed phase */
    uint64_t scpu_user_ns, scpu_sys_ns; /* sender process, timed phase */
    uint64_t verified;                  /* 1: every byte of every iteration was checked */
    uint64_t checksum;                  /* of the timed iterations' received bytes */
    /* Receiver: time between consecutive message completions in the timed
     * phase (the first from the release): min, median, 99th percentile, max. */
    uint64_t gap_min_ns, gap_p50_ns, gap_p99_ns, gap_max_ns;
    uint64_t dev, speed_mbps;
    char dev_name[32];
} nb_row_t;
#define NB_ROW_WORDS (offsetof(nb_row_t, dev_name) / 8)

/* What a worker tells its parent through the result pipe: a row, or the
 * text of its first error (so the summary and the JSON name the cause). One
 * write() each: records stay whole because they are below PIPE_BUF. */
typedef struct {
    uint32_t kind; /* NB_REC_ROW or NB_REC_ERROR */
    char who[12];
    char msg[512];
    nb_row_t row;
} nb_rec_t;
enum { NB_REC_ROW = 1, NB_REC_ERROR = 2 };
_Static_assert(sizeof(nb_rec_t) <= PIPE_BUF, "a record is one atomic pipe write");
_Static_assert(sizeof(nb_params_t) % 8 == 0, "params are 64-bit words");
_Static_assert(offsetof(nb_row_t, dev_name) % 8 == 0, "row words");

/* ---- small helpers ------------------------------------------------------ */

static int nb_quiet;

static uint64_t nb_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void nb_cpu_ns(uint64_t *user, uint64_t *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000ull;
    *sys = (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000ull;
}

static void nb_put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static uint64_t nb_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void nb_words_out(unsigned char *dst, const void *src, size_t nwords)
{
    for (size_t i = 0; i < nwords; i++) {
        uint64_t v;
        memcpy(&v, (const char *)src + 8 * i, 8);
        nb_put64(dst + 8 * i, v);
    }
}

static void nb_words_in(void *dst, const unsigned char *src, size_t nwords)
{
    for (size_t i = 0; i < nwords; i++) {
        uint64_t v = nb_get64(src + 8 * i);
        memcpy((char *)dst + 8 * i, &v, 8);
    }
}

/* "4096", "64K", "256M", "1G" (binary), optional "B"/"iB". -1 on bad input. */
static int nb_parse_size(const char *s, uint64_t *out)
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
    case '\0':
        break;
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

static int nb_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
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

/* "256 MiB", "64 KiB", "1000 B" for messages. */
static const char *nb_human(uint64_t b, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, "%" PRIu64 " %s", b, unit[u]);
    return buf;
}

static uint64_t nb_iters_for(const nb_params_t *p, uint64_t size)
{
    if (p->iters != NB_AUTO)
        return p->iters;
    uint64_t n = size == 0 ? NB_AUTO_MAX_ITERS : NB_AUTO_BYTES / size;
    return n < NB_AUTO_MIN_ITERS   ? NB_AUTO_MIN_ITERS
           : n > NB_AUTO_MAX_ITERS ? NB_AUTO_MAX_ITERS
                                   : n;
}

static uint64_t nb_warmup_for(const nb_params_t *p, uint64_t iters)
{
    if (p->warmup != NB_AUTO)
        return p->warmup;
    return iters / 10 > 0 ? iters / 10 : 1;
}

/* ---- the data pattern and the checksum ----------------------------------- */

static uint64_t nb_splitmix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Word `i` of iteration `seed`'s message: depends on both, one multiply, so
 * a misplaced piece or a stale buffer from another iteration is caught. */
static inline uint64_t nb_word(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed + i) * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
}

static void nb_fill(unsigned char *buf, uint64_t size, uint64_t iter)
{
    uint64_t seed = nb_splitmix(iter), n = size / 8;
    uint64_t *w = (uint64_t *)(void *)buf; /* page aligned */
    for (uint64_t i = 0; i < n; i++)
        w[i] = nb_word(seed, i);
    if (size % 8) {
        uint64_t x = nb_word(seed, n);
        memcpy(buf + 8 * n, &x, size % 8);
    }
}

#define NB_FNV_BASIS 0xCBF29CE484222325ull
#define NB_FNV_PRIME 0x100000001B3ull

/*
 * Check every byte of one received message against the pattern and fold it
 * into *csum: FNV-1a over the message's 8-byte native-order words in four
 * interleaved lanes (the tail zero-padded), lanes folded by FNV-1a, then the
 * message hash folded into *csum. -1 and *bad = first wrong byte offset.
 */
static int nb_check(const unsigned char *buf, uint64_t size, uint64_t iter, uint64_t *csum,
                    uint64_t *bad)
{
    uint64_t seed = nb_splitmix(iter), n = size / 8, i = 0;
    const uint64_t *w = (const uint64_t *)(const void *)buf;
    uint64_t h[4] = {NB_FNV_BASIS, NB_FNV_BASIS ^ 1, NB_FNV_BASIS ^ 2, NB_FNV_BASIS ^ 3};
    uint64_t diff = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t a = w[i], b = w[i + 1], c = w[i + 2], d = w[i + 3];
        diff |= (a ^ nb_word(seed, i)) | (b ^ nb_word(seed, i + 1)) | (c ^ nb_word(seed, i + 2)) |
                (d ^ nb_word(seed, i + 3));
        h[0] = (h[0] ^ a) * NB_FNV_PRIME;
        h[1] = (h[1] ^ b) * NB_FNV_PRIME;
        h[2] = (h[2] ^ c) * NB_FNV_PRIME;
        h[3] = (h[3] ^ d) * NB_FNV_PRIME;
    }
    for (; i < n; i++) {
        diff |= w[i] ^ nb_word(seed, i);
        h[i % 4] = (h[i % 4] ^ w[i]) * NB_FNV_PRIME;
    }
    if (size % 8) {
        uint64_t x = nb_word(seed, n), y = 0, t = 0;
        memcpy(&y, &x, size % 8);
        memcpy(&t, buf + 8 * n, size % 8);
        diff |= t ^ y;
        h[n % 4] = (h[n % 4] ^ t) * NB_FNV_PRIME;
    }
    if (diff != 0) {
        unsigned char want[8];
        for (uint64_t off = 0; off < size; off++) {
            if (off % 8 == 0) {
                uint64_t x = nb_word(seed, off / 8);
                memcpy(want, &x, 8);
            }
            if (buf[off] != want[off % 8]) {
                *bad = off;
                return -1;
            }
        }
    }
    uint64_t m = NB_FNV_BASIS;
    for (int l = 0; l < 4; l++)
        m = (m ^ h[l]) * NB_FNV_PRIME;
    m = (m ^ size) * NB_FNV_PRIME;
    *csum = (*csum ^ m) * NB_FNV_PRIME;
    return 0;
}

/* ---- the control stream (socketpair or bootstrap TCP) --------------------- */

/*
 * Every message: a 16-byte header in network byte order, then `len` bytes.
 *   magic u32 | version u16 | type u16 | len u32 | arg u32
 * `arg` names the phase or row a barrier message belongs to; both sides
 * check it, so a message from a wrong step is an error, not a silent skew.
 */
#define NB_MAGIC   0x54504E42u /* "TPNB" */
#define NB_VERSION 1
#define NB_HDR     16
#define NB_MSG_MAX 4096
enum {
    NB_MSG_HELLO = 1, /* client -> server: empty */
    NB_MSG_PARAMS,    /* server -> client: nb_params_t */
    NB_MSG_HANDLE,    /* receiver -> sender: the 128-byte listen handle; arg = cfg */
    NB_MSG_READY,     /* sender -> receiver: ready for phase `arg` */
    NB_MSG_GO,        /* receiver -> sender: receives posted, start phase `arg` */
    NB_MSG_SRES,      /* sender -> receiver: its time and CPU of row `arg` */
    NB_MSG_ROW,       /* receiver -> sender: the finished row `arg` */
    NB_MSG_ERROR,     /* either way: a text, then the sender of it exits */
};
_Static_assert(sizeof(nb_params_t) <= NB_MSG_MAX, "params fit a message");
_Static_assert(sizeof(nb_row_t) <= NB_MSG_MAX, "row fits a message");

static const char *nb_msg_name(unsigned t)
{
    static const char *n[] = {"?",  "HELLO", "PARAMS", "HANDLE", "READY",
                              "GO", "SRES",  "ROW",    "ERROR"};
    return t < sizeof(n) / sizeof(n[0]) ? n[t] : "?";
}

static int nb_send_all(int fd, const void *buf, size_t len)
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

/* Read exactly len bytes by `deadline_ns`: 0, -1 (errno set; ETIMEDOUT, or
 * ENOTCONN for end of stream). */
static int nb_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len > 0) {
        uint64_t now = nb_now_ns();
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

static int nb_msg_send(int fd, unsigned type, uint32_t arg, const void *payload, uint32_t len)
{
    unsigned char h[NB_HDR + NB_MSG_MAX];
    if (len > NB_MSG_MAX)
        return -1;
    uint32_t v[4] = {htonl(NB_MAGIC), htonl((uint32_t)NB_VERSION << 16 | type), htonl(len),
                     htonl(arg)};
    memcpy(h, v, NB_HDR);
    if (len > 0)
        memcpy(h + NB_HDR, payload, len);
    return nb_send_all(fd, h, NB_HDR + len);
}

/*
 * Receive one message of type `want` with argument `arg` into buf (exactly
 * `len` bytes expected). A peer's ERROR message is printed. 0 or -1 with a
 * description of what went wrong in `err`.
 */
static int nb_msg_recv(int fd, unsigned want, uint32_t arg, void *buf, uint32_t len,
                       uint64_t timeout_ns, const char *peer, char *err, size_t errlen)
{
    uint32_t v[4];
    uint64_t deadline = nb_now_ns() + timeout_ns;
    if (nb_recv_all(fd, v, NB_HDR, deadline) != 0) {
        if (errno == ETIMEDOUT)
            snprintf(err, errlen, "no %s message from the %s within %.0f s", nb_msg_name(want),
                     peer, (double)timeout_ns / 1e9);
        else
            snprintf(err, errlen, "the %s closed the control connection%s%s%s while %s was awaited",
                     peer, errno == ENOTCONN ? "" : " (", errno == ENOTCONN ? "" : strerror(errno),
                     errno == ENOTCONN ? "" : ")", nb_msg_name(want));
        return -1;
    }
    uint32_t magic = ntohl(v[0]), vt = ntohl(v[1]), mlen = ntohl(v[2]), marg = ntohl(v[3]);
    unsigned type = vt & 0xffff, version = vt >> 16;
    if (magic != NB_MAGIC || version != NB_VERSION || mlen > NB_MSG_MAX) {
        snprintf(err, errlen,
                 "the %s sent a malformed control message (magic 0x%08x, version %u, length %u)",
                 peer, magic, version, mlen);
        return -1;
    }
    char body[NB_MSG_MAX + 1];
    if (mlen > 0 && nb_recv_all(fd, body, mlen, deadline) != 0) {
        snprintf(err, errlen, "the %s closed the control connection in a message", peer);
        return -1;
    }
    if (type == NB_MSG_ERROR) {
        body[mlen] = '\0';
        snprintf(err, errlen, "the %s failed: %.400s", peer, body);
        return -1;
    }
    if (type != want || marg != arg || mlen != len) {
        snprintf(err, errlen,
                 "protocol: expected %s(%u, %u bytes) from the %s, got %s(%u, %u bytes)",
                 nb_msg_name(want), arg, len, peer, nb_msg_name(type), marg, mlen);
        return -1;
    }
    if (len > 0)
        memcpy(buf, body, len);
    return 0;
}

/* 1 if the peer closed its end (or the stream broke), 0 otherwise. */
static int nb_ctl_hangup(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLRDHUP};
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

/* ---- the worker: one side of one configuration, in its own process ------- */

typedef struct {
    const tpx_ncclnet_v10_t *net;
    const nb_params_t *p;
    nb_role_t role;
    const char *who;  /* "receiver" / "sender" */
    const char *peer; /* the other one */
    int ctl;          /* control stream to the peer */
    int out;          /* records for the parent, or -1 */
    int out_rows;     /* this side reports the rows (the other reports only errors) */
    int dev;
    uint64_t cfg;
    int progress; /* draw a progress line on stderr */
    void *comm;   /* recvComm or sendComm */
    void *lcomm;  /* receiver: listenComm */
    tpx_ncclnet_props_v10_t props;
    int64_t nsocks, nthreads; /* effective, from tpx_config_print() */
    int failed;
} nb_worker_t;

/* One message size: buffers, their registrations and the request ring. */
typedef struct {
    uint64_t row;
    uint64_t size, chunk, nchunks, nbuf, window, iters, warmup;
    unsigned char **buf;
    void **mh;
    void **req;
    uint64_t checksum;
    uint64_t *done_ns; /* receiver: completion time of each timed message */
} nb_sized_t;

/* Report the first failure of this worker (once) to stderr and to the peer. */
static void nb_fail(nb_worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void nb_fail(nb_worker_t *w, const char *fmt, ...)
{
    if (w->failed)
        return;
    w->failed = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (w->progress)
        fputs("\r\033[K", stderr);
    fprintf(stderr, "%s: %s: %s\n", NB_PROG, w->who, msg);
    if (w->out >= 0) {
        nb_rec_t rec = {.kind = NB_REC_ERROR};
        snprintf(rec.who, sizeof(rec.who), "%s", w->who);
        snprintf(rec.msg, sizeof(rec.msg), "%s", msg);
        ssize_t r = write(w->out, &rec, sizeof(rec));
        (void)r; /* the parent also sees the exit status */
    }
    nb_msg_send(w->ctl, NB_MSG_ERROR, 0, msg, (uint32_t)strlen(msg));
}

static const char *nb_rc_string(tpx_nccl_result_t rc)
{
    switch (rc) {
    case TPX_NCCL_SUCCESS:
        return "ncclSuccess";
    case TPX_NCCL_UNHANDLED_CUDA_ERROR:
        return "ncclUnhandledCudaError";
    case TPX_NCCL_SYSTEM_ERROR:
        return "ncclSystemError: peer closed or connection broken";
    case TPX_NCCL_INTERNAL_ERROR:
        return "ncclInternalError";
    case TPX_NCCL_INVALID_ARGUMENT:
        return "ncclInvalidArgument";
    case TPX_NCCL_INVALID_USAGE:
        return "ncclInvalidUsage";
    case TPX_NCCL_REMOTE_ERROR:
        return "ncclRemoteError";
    }
    return "unknown ncclResult_t";
}

/* Call one function of the table; any rc != 0 fails the worker and jumps. */
#define NB_CALL(w, label, fn, ...)                                                                 \
    do {                                                                                           \
        tpx_nccl_result_t nb_rc_ = (w)->net->fn(__VA_ARGS__);                                      \
        if (nb_rc_ != TPX_NCCL_SUCCESS) {                                                          \
            nb_fail((w), "%s() failed: rc %d (%s)", #fn, (int)nb_rc_, nb_rc_string(nb_rc_));       \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

static const char *nb_log_who = "worker";

/* ncclDebugLogger_t for init(): warnings go to stderr; info and trace are
 * the transport's own TPX_LOG_LEVEL business. */
static void nb_nccl_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...)
{
    (void)flags;
    if (level != TPX_NCCL_LOG_WARN && level != TPX_NCCL_LOG_ABORT && level != TPX_NCCL_LOG_VERSION)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s: %s %s (%s:%d)\n", NB_PROG, nb_log_who,
            level == TPX_NCCL_LOG_VERSION ? "VERSION" : "WARN", msg, file ? file : "?", line);
}

/* The effective value of an integer TPX_* setting, as tpx_config_print() shows it. */
static int64_t nb_config_int(const char *name)
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
            for (const char *s = line + nl + 1; *s != '\0' && *s != '\n' && k + 1 < sizeof(val);
                 s++)
                val[k++] = *s;
            val[k] = '\0';
            if (nb_parse_size(val, &x) == 0 && x <= INT64_MAX)
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

/* Wait for the peer; also an error if it hung up. 0 or -1 (already reported). */
static int nb_check_alive(nb_worker_t *w, uint64_t now, uint64_t *next_check,
                          uint64_t last_progress, const char *what)
{
    if (now < *next_check)
        return 0;
    *next_check = now + 100000000ull;
    if (now - last_progress > w->p->timeout_s * 1000000000ull) {
        nb_fail(w, "%s: no progress for %" PRIu64 " s (peer gone? raise --timeout)", what,
                w->p->timeout_s);
        return -1;
    }
    if (nb_ctl_hangup(w->ctl)) {
        char err[256] = "";
        /* The peer may have said why before it left. */
        nb_msg_recv(w->ctl, NB_MSG_ERROR, 0, NULL, 0, 200000000ull, w->peer, err, sizeof(err));
        nb_fail(w, "%s: the %s went away (%s)", what, w->peer,
                strncmp(err, "the ", 4) == 0 && strstr(err, "failed:")
                    ? err
                    : "control connection closed");
        return -1;
    }
    return 0;
}

static int nb_sized_alloc(nb_worker_t *w, nb_sized_t *s)
{
    size_t alloc = s->size > 0 ? s->size : 1;
    s->buf = calloc(s->nbuf, sizeof(*s->buf));
    s->mh = calloc(s->nbuf, sizeof(*s->mh));
    s->req = calloc(s->window, sizeof(*s->req));
    s->done_ns = calloc(s->iters, sizeof(*s->done_ns));
    if (s->buf == NULL || s->mh == NULL || s->req == NULL || s->done_ns == NULL) {
        nb_fail(w, "out of memory");
        return -1;
    }
    for (uint64_t i = 0; i < s->nbuf; i++) {
        void *b = mmap(NULL, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED) {
            nb_fail(w, "cannot map %zu bytes of buffer: %s", alloc, strerror(errno));
            return -1;
        }
        s->buf[i] = b;
        madvise(b, alloc, MADV_HUGEPAGE); /* best effort: fewer TLB misses in recv/send copies */
        memset(b, 0, alloc);              /* fault every page in before timing */
        NB_CALL(w, fail, regMr, w->comm, b, alloc, TPX_NCCL_PTR_HOST, &s->mh[i]);
    }
    return 0;
fail:
    return -1;
}

static void nb_sized_free(nb_worker_t *w, nb_sized_t *s)
{
    size_t alloc = s->size > 0 ? s->size : 1;
    for (uint64_t i = 0; s->buf != NULL && i < s->nbuf; i++) {
        if (s->mh != NULL && s->mh[i] != NULL) {
            tpx_nccl_result_t rc = w->net->deregMr(w->comm, s->mh[i]);
            if (rc != TPX_NCCL_SUCCESS)
                nb_fail(w, "deregMr() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
        }
        if (s->buf[i] != NULL)
            munmap(s->buf[i], alloc);
    }
    free(s->buf);
    free(s->mh);
    free(s->req);
    free(s->done_ns);
    s->done_ns = NULL;
    s->buf = NULL;
    s->mh = NULL;
    s->req = NULL;
}

/* Post request `r` of a phase whose first iteration is `iter0`. 1 posted,
 * 0 the transport asked to retry later (NULL request), -1 failed. */
static int nb_post(nb_worker_t *w, nb_sized_t *s, uint64_t r, uint64_t iter0)
{
    uint64_t m = r / s->nchunks, c = r % s->nchunks;
    uint64_t off = c * s->chunk;
    uint64_t len = s->size - off < s->chunk ? s->size - off : s->chunk;
    unsigned char *data = s->buf[m % s->nbuf] + off;
    void *mh = s->mh[m % s->nbuf];
    int tag = (int)((iter0 * s->nchunks + r) & 0x3fffffff);
    void **req = &s->req[r % s->window];
    *req = NULL;
    if (w->role == NB_SEND) {
        NB_CALL(w, fail, isend, w->comm, data, (size_t)len, tag, mh, NULL, req);
    } else {
        void *d = data, *ph = NULL;
        size_t sz = (size_t)len;
        NB_CALL(w, fail, irecv, w->comm, 1, &d, &sz, &tag, &mh, &ph, req);
    }
    return *req != NULL;
fail:
    return -1;
}

typedef struct {
    uint64_t t0, t1;
    uint64_t user0, sys0, user1, sys1;
} nb_phase_t;

/*
 * One phase: `iters` messages of s->size bytes, iteration numbers iter0...
 * `phase` is the barrier id both sides agree on. Timed or not is the
 * caller's business: the phase always records its times.
 */
static int nb_phase(nb_worker_t *w, nb_sized_t *s, uint64_t iters, uint64_t iter0, uint32_t phase,
                    int timed, nb_phase_t *ph)
{
    const uint64_t tmo = w->p->timeout_s * 1000000000ull;
    const uint64_t nreq = iters * s->nchunks;
    uint64_t posted = 0, done = 0;
    char err[512];
    const int verify = (int)w->p->verify;

    if (w->role == NB_RECV) {
        if (nb_msg_recv(w->ctl, NB_MSG_READY, phase, NULL, 0, tmo, w->peer, err, sizeof(err)) !=
            0) {
            nb_fail(w, "%s", err);
            return -1;
        }
    } else if (nb_msg_send(w->ctl, NB_MSG_READY, phase, NULL, 0) != 0) {
        nb_fail(w, "cannot send READY to the %s: %s", w->peer, strerror(errno));
        return -1;
    }

    /* The receiver posts its first window of receives before the release. */
    uint64_t now = nb_now_ns(), last_progress = now, next_check = now, next_draw = 0;
    int drawn = 0;
    for (;;) {
        if (w->role == NB_SEND)
            break;
        if (posted >= nreq || posted - done >= s->window)
            break;
        uint64_t m = posted / s->nchunks;
        if (posted % s->nchunks == 0 && m - done / s->nchunks >= s->nbuf)
            break;
        int r = nb_post(w, s, posted, iter0);
        if (r < 0)
            return -1;
        if (r == 0)
            break; /* not ready: the loop below retries */
        posted++;
    }

    if (w->role == NB_RECV) {
        nb_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = nb_now_ns();
        if (nb_msg_send(w->ctl, NB_MSG_GO, phase, NULL, 0) != 0) {
            nb_fail(w, "cannot send GO to the %s: %s", w->peer, strerror(errno));
            return -1;
        }
    } else {
        if (nb_msg_recv(w->ctl, NB_MSG_GO, phase, NULL, 0, tmo, w->peer, err, sizeof(err)) != 0) {
            nb_fail(w, "%s", err);
            return -1;
        }
        nb_cpu_ns(&ph->user0, &ph->sys0);
        ph->t0 = nb_now_ns();
    }
    last_progress = next_check = ph->t0;
    next_draw = ph->t0 + 1000000000ull; /* only runs longer than a second get a progress line */

    while (done < nreq) {
        int progressed = 0;
        while (posted < nreq && posted - done < s->window) {
            uint64_t m = posted / s->nchunks;
            if (posted % s->nchunks == 0) {
                /* A new message needs a buffer no request of it still uses. */
                if (m - done / s->nchunks >= s->nbuf)
                    break;
                if (verify && w->role == NB_SEND)
                    nb_fill(s->buf[m % s->nbuf], s->size, iter0 + m);
            }
            int r = nb_post(w, s, posted, iter0);
            if (r < 0)
                return -1;
            if (r == 0)
                break;
            posted++;
            progressed = 1;
        }
        if (done < posted) {
            int d = 0, got = -1;
            void *req = s->req[done % s->window];
            NB_CALL(w, fail, test, req, &d, &got);
            if (d) {
                uint64_t c = done % s->nchunks;
                uint64_t off = c * s->chunk;
                uint64_t len = s->size - off < s->chunk ? s->size - off : s->chunk;
                if (w->role == NB_RECV && (got < 0 || (uint64_t)got != len)) {
                    nb_fail(w,
                            "test() reported %d bytes received, expected %" PRIu64
                            " (iteration %" PRIu64 ", piece %" PRIu64 ")",
                            got, len, iter0 + done / s->nchunks, c);
                    return -1;
                }
                s->req[done % s->window] = NULL;
                done++;
                progressed = 1;
                if (w->role == NB_RECV && done % s->nchunks == 0) {
                    uint64_t m = done / s->nchunks - 1, bad = 0, scratch = 0;
                    if (timed)
                        s->done_ns[m] = nb_now_ns();
                    if (verify && nb_check(s->buf[m % s->nbuf], s->size, iter0 + m,
                                           timed ? &s->checksum : &scratch, &bad) != 0) {
                        nb_fail(w,
                                "DATA MISMATCH: size %" PRIu64 ", iteration %" PRIu64
                                ", first wrong byte at offset %" PRIu64 " (piece %" PRIu64 ")",
                                s->size, iter0 + m, bad, bad / s->chunk);
                        return -1;
                    }
                }
            }
        }
        now = nb_now_ns();
        if (progressed) {
            last_progress = now;
            if (w->progress && timed && now >= next_draw) {
                next_draw = now + 250000000ull;
                drawn = 1;
                double el = (double)(now - ph->t0) / 1e9;
                char hb[32];
                fprintf(stderr,
                        "\r\033[K  nsocks %" PRId64 "  size %s  iter %" PRIu64 "/%" PRIu64
                        "  %.2f GB/s",
                        w->nsocks, nb_human(s->size, hb, sizeof(hb)), done / s->nchunks, iters,
                        el > 0 ? (double)(done / s->nchunks) * (double)s->size / el / 1e9 : 0.0);
            }
        } else {
            sched_yield(); /* leave the core to the transport's helper threads */
            if (nb_check_alive(w, now, &next_check, last_progress,
                               w->role == NB_SEND ? "isend/test" : "irecv/test") != 0)
                return -1;
        }
    }
    ph->t1 = nb_now_ns();
    nb_cpu_ns(&ph->user1, &ph->sys1);
    if (drawn)
        fputs("\r\033[K", stderr);
    return 0;
fail:
    return -1;
}

static int nb_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* min, p50, p99, max of the gaps between timed completions (sorts done_ns). */
static void nb_gaps(nb_sized_t *s, uint64_t t0, uint64_t out[4])
{
    uint64_t prev = t0;
    for (uint64_t i = 0; i < s->iters; i++) {
        uint64_t t = s->done_ns[i];
        s->done_ns[i] = t - prev;
        prev = t;
    }
    qsort(s->done_ns, s->iters, sizeof(uint64_t), nb_cmp_u64);
    out[0] = s->done_ns[0];
    out[1] = s->done_ns[(s->iters - 1) / 2];
    out[2] = s->done_ns[(s->iters * 99 + 99) / 100 - 1];
    out[3] = s->done_ns[s->iters - 1];
}

/* Run one message size on an established comm: warm-up, timed phase, row. */
static int nb_run_size(nb_worker_t *w, uint64_t row_idx, uint64_t size)
{
    const nb_params_t *p = w->p;
    const uint64_t tmo = p->timeout_s * 1000000000ull;
    nb_sized_t s = {.row = row_idx, .size = size, .window = p->window, .checksum = NB_FNV_BASIS};
    char err[512];
    int rc = -1;

    s.iters = nb_iters_for(p, size);
    s.warmup = nb_warmup_for(p, s.iters);
    s.chunk = p->chunk ? p->chunk : (size < NB_MAX_CHUNK ? size : NB_MAX_CHUNK);
    if (s.chunk == 0)
        s.chunk = 1; /* a zero-byte message is one zero-byte request */
    if (s.chunk > w->props.maxP2pBytes) {
        nb_fail(w,
                "a request of %" PRIu64 " bytes exceeds the device's maxP2pBytes %zu: "
                "use --chunk",
                s.chunk, w->props.maxP2pBytes);
        return -1;
    }
    s.nchunks = size == 0 ? 1 : (size + s.chunk - 1) / s.chunk;
    /* Buffers: enough messages to keep the window full, within the budget. */
    uint64_t want = (s.window + s.nchunks - 1) / s.nchunks + (s.nchunks > 1 ? 1 : 0);
    uint64_t fit = size > 0 ? NB_MEM_BUDGET / size : want;
    uint64_t total = s.iters > s.warmup ? s.iters : s.warmup;
    s.nbuf = want < fit ? want : fit;
    if (s.nbuf > total)
        s.nbuf = total;
    if (s.nbuf == 0)
        s.nbuf = 1;

    if (nb_sized_alloc(w, &s) != 0)
        goto out;
    uint32_t phase = (uint32_t)(row_idx * 2);
    nb_phase_t warm, timed;
    if (s.warmup > 0 && nb_phase(w, &s, s.warmup, 0, phase, 0, &warm) != 0)
        goto out;
    if (nb_phase(w, &s, s.iters, s.warmup, phase + 1, 1, &timed) != 0)
        goto out;

    /* SRES: sender -> receiver; ROW: receiver -> sender. */
    unsigned char wire[8 * NB_ROW_WORDS + sizeof(((nb_row_t *)0)->dev_name)];
    uint64_t sres[4];
    if (w->role == NB_SEND) {
        uint64_t mine[4] = {timed.t1 - timed.t0, timed.user1 - timed.user0, timed.sys1 - timed.sys0,
                            (uint64_t)w->nsocks};
        nb_words_out(wire, mine, 4);
        if (nb_msg_send(w->ctl, NB_MSG_SRES, (uint32_t)row_idx, wire, 32) != 0) {
            nb_fail(w, "cannot send results to the %s: %s", w->peer, strerror(errno));
            goto out;
        }
        if (nb_msg_recv(w->ctl, NB_MSG_ROW, (uint32_t)row_idx, wire, sizeof(wire), tmo, w->peer,
                        err, sizeof(err)) != 0) {
            nb_fail(w, "%s", err);
            goto out;
        }
        if (w->out >= 0 && w->out_rows) {
            nb_rec_t rec = {.kind = NB_REC_ROW};
            nb_words_in(&rec.row, wire, NB_ROW_WORDS);
            memcpy(rec.row.dev_name, wire + 8 * NB_ROW_WORDS, sizeof(rec.row.dev_name));
            rec.row.dev_name[sizeof(rec.row.dev_name) - 1] = '\0';
            if (write(w->out, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
                nb_fail(w, "cannot pass the result to the parent: %s", strerror(errno));
                goto out;
            }
        }
    } else {
        if (nb_msg_recv(w->ctl, NB_MSG_SRES, (uint32_t)row_idx, wire, 32, tmo, w->peer, err,
                        sizeof(err)) != 0) {
            nb_fail(w, "%s", err);
            goto out;
        }
        nb_words_in(sres, wire, 4);
        uint64_t gaps[4];
        nb_gaps(&s, timed.t0, gaps);
        nb_row_t row = {
            .cfg = w->cfg,
            .nsocks = (uint64_t)w->nsocks,
            .nthreads = (uint64_t)w->nthreads,
            .peer_nsocks = sres[3],
            .size = size,
            .iters = s.iters,
            .warmup = s.warmup,
            .window = s.window,
            .chunk = s.chunk,
            .nchunks = s.nchunks,
            .nbuf = s.nbuf,
            .time_ns = timed.t1 - timed.t0,
            .send_time_ns = sres[0],
            .rcpu_user_ns = timed.user1 - timed.user0,
            .rcpu_sys_ns = timed.sys1 - timed.sys0,
            .scpu_user_ns = sres[1],
            .scpu_sys_ns = sres[2],
            .verified = p->verify ? 1 : 0,
            .checksum = p->verify ? s.checksum : 0,
            .gap_min_ns = gaps[0],
            .gap_p50_ns = gaps[1],
            .gap_p99_ns = gaps[2],
            .gap_max_ns = gaps[3],
            .dev = (uint64_t)w->dev,
            .speed_mbps = w->props.speed > 0 ? (uint64_t)w->props.speed : 0,
        };
        snprintf(row.dev_name, sizeof(row.dev_name), "%s",
                 w->props.name != NULL ? w->props.name : "?");
        nb_words_out(wire, &row, NB_ROW_WORDS);
        memcpy(wire + 8 * NB_ROW_WORDS, row.dev_name, sizeof(row.dev_name));
        if (nb_msg_send(w->ctl, NB_MSG_ROW, (uint32_t)row_idx, wire, sizeof(wire)) != 0) {
            nb_fail(w, "cannot send the result to the %s: %s", w->peer, strerror(errno));
            goto out;
        }
        if (w->out >= 0 && w->out_rows) {
            nb_rec_t rec = {.kind = NB_REC_ROW, .row = row};
            if (write(w->out, &rec, sizeof(rec)) != (ssize_t)sizeof(rec)) {
                nb_fail(w, "cannot pass the result to the parent: %s", strerror(errno));
                goto out;
            }
        }
    }
    rc = 0;
out:
    nb_sized_free(w, &s);
    return w->failed ? -1 : rc;
}

/* Set up the transport in this (fresh) process, make the comm, run every size. */
static int nb_worker(nb_worker_t *w)
{
    const nb_params_t *p = w->p;
    const uint64_t tmo = p->timeout_s * 1000000000ull;
    unsigned char handle[TPX_NCCL_NET_HANDLE_MAXSIZE];
    tpx_ncclnet_dev_handle_t dh_store;
    tpx_ncclnet_dev_handle_t *dh = &dh_store;
    char err[512];
    int ndev = 0;

    nb_log_who = w->who;
    if (tpx_config_check() != TPX_OK) {
        nb_fail(w, "a TPX_* setting is malformed (see above; `%s --print-config`)", NB_PROG);
        return -1;
    }
    w->nsocks = nb_config_int("TPX_NSOCKS");
    w->nthreads = nb_config_int("TPX_NTHREADS");
    if (w->nsocks < 0) /* tpx_config_print() changed its format: say what we asked for */
        w->nsocks = (int64_t)p->nsocks[w->cfg];
    if (w->nthreads < 0)
        w->nthreads = p->nthreads != NB_AUTO ? (int64_t)p->nthreads : 0;
    int64_t max_reqs = nb_config_int("TPX_MAX_REQUESTS");
    if (max_reqs > 0 && (int64_t)p->window > max_reqs) {
        nb_fail(w,
                "--window %" PRIu64 " exceeds TPX_MAX_REQUESTS=%" PRId64
                " (requests a comm accepts in flight): lower --window or raise TPX_MAX_REQUESTS",
                p->window, max_reqs);
        return -1;
    }
    w->net = tpx_net_builtin();
    NB_CALL(w, fail, init, nb_nccl_log, NULL);
    NB_CALL(w, fail, devices, &ndev);
    if (ndev == 0 || w->dev >= ndev) {
        const char *ifn = getenv("TPX_SOCKET_IFNAME");
        nb_fail(w, "no device %d: the transport found %d (TPX_SOCKET_IFNAME=%s)", w->dev, ndev,
                ifn != NULL ? ifn : "(unset: every non-loopback interface)");
        return -1;
    }
    NB_CALL(w, fail, getProperties, w->dev, &w->props);
    memset(&dh_store, 0, sizeof(dh_store));

    uint64_t deadline = nb_now_ns() + tmo, next_check = 0;
    if (w->role == NB_RECV) {
        memset(handle, 0, sizeof(handle));
        NB_CALL(w, fail, listen, w->dev, handle, &w->lcomm);
        if (nb_msg_send(w->ctl, NB_MSG_HANDLE, (uint32_t)w->cfg, handle, sizeof(handle)) != 0) {
            nb_fail(w, "cannot send the listen handle to the %s: %s", w->peer, strerror(errno));
            goto fail;
        }
        while (w->comm == NULL) {
            NB_CALL(w, fail, accept, w->lcomm, &w->comm, &dh);
            if (w->comm == NULL) {
                uint64_t now = nb_now_ns();
                if (nb_check_alive(w, now, &next_check, now, "accept") != 0)
                    goto fail;
                if (now > deadline) {
                    nb_fail(w, "accept(): no connection within %" PRIu64 " s", p->timeout_s);
                    goto fail;
                }
                usleep(100);
            }
        }
    } else {
        if (nb_msg_recv(w->ctl, NB_MSG_HANDLE, (uint32_t)w->cfg, handle, sizeof(handle), tmo,
                        w->peer, err, sizeof(err)) != 0) {
            nb_fail(w, "%s", err);
            goto fail;
        }
        tpx_ncclnet_comm_config_t cc = {.trafficClass = TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
        while (w->comm == NULL) {
            NB_CALL(w, fail, connect, w->dev, &cc, handle, &w->comm, &dh);
            if (w->comm == NULL) {
                uint64_t now = nb_now_ns();
                if (nb_check_alive(w, now, &next_check, now, "connect") != 0)
                    goto fail;
                if (now > deadline) {
                    nb_fail(w, "connect(): not connected within %" PRIu64 " s", p->timeout_s);
                    goto fail;
                }
                usleep(100);
            }
        }
    }

    for (uint64_t i = 0; i < p->nsizes; i++)
        if (nb_run_size(w, w->cfg * NB_MAX_SIZES + i, p->sizes[i]) != 0)
            goto fail;

fail:
    if (w->comm != NULL) {
        tpx_nccl_result_t rc =
            w->role == NB_SEND ? w->net->closeSend(w->comm) : w->net->closeRecv(w->comm);
        if (rc != TPX_NCCL_SUCCESS)
            nb_fail(w, "%s() failed: rc %d (%s)", w->role == NB_SEND ? "closeSend" : "closeRecv",
                    (int)rc, nb_rc_string(rc));
        w->comm = NULL;
    }
    if (w->lcomm != NULL) {
        tpx_nccl_result_t rc = w->net->closeListen(w->lcomm);
        if (rc != TPX_NCCL_SUCCESS)
            nb_fail(w, "closeListen() failed: rc %d (%s)", (int)rc, nb_rc_string(rc));
        w->lcomm = NULL;
    }
    return w->failed ? -1 : 0;
}

/* ---- the parent: configurations, children, the table, JSON --------------- */

typedef struct {
    nb_mode_t mode;
    nb_params_t p;
    int dev;
    int port;
    const char *host;
    const char *json;
    int progress;
    int user_set_run_opts; /* client: run options given, but the server decides */
    nb_row_t *rows;
    size_t nrows;
    char error[512];
    int header_done;
    char started[64];
} nb_main_t;

static void nb_set_error(nb_main_t *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void nb_set_error(nb_main_t *m, const char *fmt, ...)
{
    if (m->error[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->error, sizeof(m->error), fmt, ap);
    va_end(ap);
}

static double nb_row_gbps(const nb_row_t *r)
{
    return r->time_ns > 0 ? (double)r->size * (double)r->iters / (double)r->time_ns : 0.0;
}

static double nb_row_cpu_per_gb(const nb_row_t *r)
{
    double bytes = (double)r->size * (double)r->iters;
    double cpu =
        (double)(r->rcpu_user_ns + r->rcpu_sys_ns + r->scpu_user_ns + r->scpu_sys_ns) / 1e9;
    return bytes > 0 ? cpu / (bytes / 1e9) : 0.0;
}

static const char *nb_mode_name(nb_mode_t mode)
{
    return mode == NB_MODE_LOOPBACK ? "loopback" : mode == NB_MODE_SERVER ? "server" : "client";
}

static void nb_print_header(nb_main_t *m)
{
    const nb_params_t *p = &m->p;
    char hb[32];
    if (nb_quiet)
        return;
    printf("# %s %s: ncclNet v10 table \"%s\" (tpx's built-in TCP transport), %s mode, %ld cores\n",
           NB_PROG, tpx_version_string(), tpx_net_builtin()->name, nb_mode_name(m->mode),
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("# sizes");
    for (uint64_t i = 0; i < p->nsizes; i++)
        printf(" %s", nb_human(p->sizes[i], hb, sizeof(hb)));
    char it[24] = "auto", wu[24] = "auto";
    if (p->iters != NB_AUTO)
        snprintf(it, sizeof(it), "%" PRIu64, p->iters);
    if (p->warmup != NB_AUTO)
        snprintf(wu, sizeof(wu), "%" PRIu64, p->warmup);
    printf("  iters %s  warmup %s  window %" PRIu64 "  chunk %s  verify %s  timeout %" PRIu64
           " s\n",
           it, wu, p->window, p->chunk ? nb_human(p->chunk, hb, sizeof(hb)) : "whole message",
           p->verify ? "on" : "off", p->timeout_s);
    const char *ifn = getenv("TPX_SOCKET_IFNAME");
    printf("# TPX_SOCKET_IFNAME=%s  dev %d  TPX_NTHREADS=%s\n", ifn ? ifn : "(unset)", m->dev,
           getenv("TPX_NTHREADS") ? getenv("TPX_NTHREADS") : "(default)");
    printf("# GB/s = 1e9 bytes/s, receiver side: from the barrier release (receives posted)\n"
           "#   to the last completion; time(ms) = that time / iters; warm-up not timed;\n"
           "#   cpu(s/GB) = user+sys CPU of both processes (all threads) per 1e9 bytes\n");
    fflush(stdout);
}

static void nb_print_row(nb_main_t *m, const nb_row_t *r)
{
    if (nb_quiet)
        return;
    if (!m->header_done) {
        m->header_done = 1;
        printf("# device %" PRIu64 ": %s, %" PRIu64 " Mb/s; TPX_NTHREADS effective %" PRIu64
               " (0: one per data connection)\n",
               r->dev, r->dev_name, r->speed_mbps, r->nthreads);
        printf("#\n# %6s %12s %7s %10s %8s %10s %9s  %s\n", "nsocks", "size", "iters", "time(ms)",
               "GB/s", "cpu(s/GB)", "verified", "checksum");
    }
    char ck[24];
    if (r->verified)
        snprintf(ck, sizeof(ck), "0x%016" PRIx64, r->checksum);
    else
        snprintf(ck, sizeof(ck), "-");
    printf("  %6" PRIu64 " %12" PRIu64 " %7" PRIu64 " %10.3f %8.3f %10.3f %9s  %s\n", r->nsocks,
           r->size, r->iters, (double)r->time_ns / 1e6 / (double)(r->iters ? r->iters : 1),
           nb_row_gbps(r), nb_row_cpu_per_gb(r), r->verified ? "yes" : "no", ck);
    fflush(stdout);
}

static void nb_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; c != NULL && *c != '\0'; c++) {
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
            if (*c < 0x20)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f);
        }
    }
    fputc('"', f);
}

static void nb_json_u64(FILE *f, const char *key, uint64_t v, int comma)
{
    fprintf(f, "\"%s\": %" PRIu64 "%s", key, v, comma ? ", " : "");
}

static void nb_json_dbl(FILE *f, const char *key, double v, int comma)
{
    fprintf(f, "\"%s\": %.9g%s", key, v, comma ? ", " : "");
}

static int nb_write_json(nb_main_t *m)
{
    const nb_params_t *p = &m->p;
    FILE *f = fopen(m->json, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", NB_PROG, m->json, strerror(errno));
        return -1;
    }
    struct utsname u;
    memset(&u, 0, sizeof(u));
    uname(&u);
    fprintf(f, "{\n  \"tool\": \"%s\", \"version\": ", NB_PROG);
    nb_json_str(f, tpx_version_string());
    fprintf(f, ", \"transport\": ");
    nb_json_str(f, tpx_net_builtin()->name);
    fprintf(f, ", \"abi\": \"ncclNet v10\",\n  \"mode\": \"%s\", ", nb_mode_name(m->mode));
    fprintf(f, "\"started\": ");
    nb_json_str(f, m->started);
    fprintf(f, ", \"host\": ");
    nb_json_str(f, u.nodename);
    fprintf(f, ", \"kernel\": ");
    nb_json_str(f, u.release);
    fprintf(f, ", \"nproc\": %ld,\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "  \"peer\": ");
    if (m->host != NULL)
        nb_json_str(f, m->host);
    else
        fputs("null", f);
    fprintf(f, ", \"port\": %d, \"dev\": %d,\n", m->port, m->dev);
    fprintf(
        f, "  \"units\": {\"GBps\": \"1e9 bytes per second, receiver side, barrier release to "
           "last completion\", \"time_ms\": \"milliseconds\", \"cpu_s_per_GB\": \"user+sys CPU "
           "seconds of sender and receiver processes per 1e9 bytes\", \"gap_ms\": \"receiver: time "
           "between consecutive message completions of the timed phase\"},\n");
    fprintf(f, "  \"params\": {\"sizes\": [");
    for (uint64_t i = 0; i < p->nsizes; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", p->sizes[i]);
    fprintf(f, "], \"nsocks\": [");
    for (uint64_t i = 0; i < p->nnsocks; i++)
        if (p->nsocks[i] == 0)
            fprintf(f, "%snull", i ? ", " : "");
        else
            fprintf(f, "%s%" PRIu64, i ? ", " : "", p->nsocks[i]);
    fprintf(f, "], \"iters\": ");
    if (p->iters == NB_AUTO)
        fputs("\"auto\"", f);
    else
        fprintf(f, "%" PRIu64, p->iters);
    fprintf(f, ", \"warmup\": ");
    if (p->warmup == NB_AUTO)
        fputs("\"auto\"", f);
    else
        fprintf(f, "%" PRIu64, p->warmup);
    fprintf(f, ", ");
    nb_json_u64(f, "window", p->window, 1);
    nb_json_u64(f, "chunk", p->chunk, 1);
    fprintf(f, "\"verify\": %s, ", p->verify ? "true" : "false");
    nb_json_u64(f, "timeout_s", p->timeout_s, 1);
    fprintf(f, "\"nthreads\": ");
    if (p->nthreads == NB_AUTO)
        fputs("null", f);
    else
        fprintf(f, "%" PRIu64, p->nthreads);
    fprintf(f, "},\n  \"env\": {");
    int first = 1;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "TPX_", 4) != 0 || strchr(*e, '=') == NULL)
            continue;
        const char *eq = strchr(*e, '=');
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *e), *e);
        if (strcmp(name, "TPX_NSOCKS") == 0)
            continue; /* per row */
        fprintf(f, "%s", first ? "" : ", ");
        nb_json_str(f, name);
        fputs(": ", f);
        nb_json_str(f, eq + 1);
        first = 0;
    }
    fprintf(f, "},\n  \"results\": [");
    const nb_row_t *best = NULL;
    for (size_t i = 0; i < m->nrows; i++) {
        const nb_row_t *r = &m->rows[i];
        if (best == NULL || nb_row_gbps(r) > nb_row_gbps(best))
            best = r;
        fprintf(f, "%s\n    {", i ? "," : "");
        nb_json_u64(f, "nsocks", r->nsocks, 1);
        nb_json_u64(f, "peer_nsocks", r->peer_nsocks, 1);
        nb_json_u64(f, "nthreads", r->nthreads, 1);
        nb_json_u64(f, "size", r->size, 1);
        nb_json_u64(f, "iters", r->iters, 1);
        nb_json_u64(f, "warmup", r->warmup, 1);
        nb_json_u64(f, "window", r->window, 1);
        nb_json_u64(f, "chunk", r->chunk, 1);
        nb_json_u64(f, "requests_per_message", r->nchunks, 1);
        nb_json_u64(f, "buffers", r->nbuf, 1);
        nb_json_dbl(f, "time_ms_total", (double)r->time_ns / 1e6, 1);
        nb_json_dbl(f, "time_ms", (double)r->time_ns / 1e6 / (double)(r->iters ? r->iters : 1), 1);
        nb_json_dbl(f, "GBps", nb_row_gbps(r), 1);
        nb_json_dbl(f, "gap_ms_min", (double)r->gap_min_ns / 1e6, 1);
        nb_json_dbl(f, "gap_ms_p50", (double)r->gap_p50_ns / 1e6, 1);
        nb_json_dbl(f, "gap_ms_p99", (double)r->gap_p99_ns / 1e6, 1);
        nb_json_dbl(f, "gap_ms_max", (double)r->gap_max_ns / 1e6, 1);
        nb_json_dbl(f, "sender_time_ms_total", (double)r->send_time_ns / 1e6, 1);
        nb_json_dbl(f, "cpu_recv_user_s", (double)r->rcpu_user_ns / 1e9, 1);
        nb_json_dbl(f, "cpu_recv_sys_s", (double)r->rcpu_sys_ns / 1e9, 1);
        nb_json_dbl(f, "cpu_send_user_s", (double)r->scpu_user_ns / 1e9, 1);
        nb_json_dbl(f, "cpu_send_sys_s", (double)r->scpu_sys_ns / 1e9, 1);
        nb_json_dbl(f, "cpu_s_per_GB", nb_row_cpu_per_gb(r), 1);
        fprintf(f, "\"verified\": %s, ", r->verified ? "true" : "false");
        if (r->verified)
            fprintf(f, "\"checksum\": \"0x%016" PRIx64 "\", ", r->checksum);
        else
            fprintf(f, "\"checksum\": null, ");
        nb_json_u64(f, "dev", r->dev, 1);
        fprintf(f, "\"dev_name\": ");
        nb_json_str(f, r->dev_name);
        fprintf(f, ", ");
        nb_json_u64(f, "speed_mbps", r->speed_mbps, 0);
        fputc('}', f);
    }
    fprintf(f, "\n  ],\n  \"best\": ");
    if (best != NULL)
        fprintf(f, "{\"GBps\": %.9g, \"nsocks\": %" PRIu64 ", \"size\": %" PRIu64 "}",
                nb_row_gbps(best), best->nsocks, best->size);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"ok\": %s, \"error\": ", m->error[0] ? "false" : "true");
    if (m->error[0])
        nb_json_str(f, m->error);
    else
        fputs("null", f);
    fputs("\n}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", NB_PROG, m->json, strerror(errno));
        return -1;
    }
    return 0;
}

/* setenv for one configuration (before the transport reads it in a child). */
static void nb_env_apply(const nb_params_t *p, uint64_t cfg)
{
    char v[32];
    if (p->nsocks[cfg] != 0) {
        snprintf(v, sizeof(v), "%" PRIu64, p->nsocks[cfg]);
        setenv("TPX_NSOCKS", v, 1);
    }
    if (p->nthreads != NB_AUTO) {
        snprintf(v, sizeof(v), "%" PRIu64, p->nthreads);
        setenv("TPX_NTHREADS", v, 1);
    }
}

/* Fork one worker; in the child it never returns. */
static pid_t nb_spawn(nb_main_t *m, nb_role_t role, int ctl, int out, int out_rows, uint64_t cfg,
                      const int *close_fds, int nclose)
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
    nb_worker_t w = {
        .p = &m->p,
        .role = role,
        .who = role == NB_RECV ? "receiver" : "sender",
        .peer = role == NB_RECV ? "sender" : "receiver",
        .ctl = ctl,
        .out = out,
        .out_rows = out_rows,
        .dev = m->dev,
        .cfg = cfg,
        .progress = role == NB_RECV && m->progress,
    };
    _exit(nb_worker(&w) == 0 ? NB_EXIT_OK : NB_EXIT_FAIL);
}

/*
 * Collect rows from `res` until it closes and every child has exited. A
 * child that fails gets its sibling terminated (it would only wait for its
 * deadline). 0 if every child exited 0 and `want` rows arrived.
 */
static int nb_collect(nb_main_t *m, int res, pid_t *pids, const char **names, int n, size_t want)
{
    int alive = n, open = 1, failed = 0, exit_bad[2] = {0, 0};
    size_t got = 0, have = 0;
    nb_rec_t rec;
    uint64_t first_exit = 0;
    const uint64_t grace = (m->p.timeout_s + 15) * 1000000000ull;
    while (open || alive > 0) {
        if (open) {
            struct pollfd pfd = {.fd = res, .events = POLLIN};
            int r = poll(&pfd, 1, 100);
            if (r > 0) {
                ssize_t k = read(res, (char *)&rec + have, sizeof(rec) - have);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0) {
                    open = 0;
                } else if ((have += (size_t)k) == sizeof(rec)) {
                    have = 0;
                    if (rec.kind == NB_REC_ERROR) {
                        rec.who[sizeof(rec.who) - 1] = rec.msg[sizeof(rec.msg) - 1] = '\0';
                        nb_set_error(m, "%s: %s", rec.who, rec.msg);
                        continue;
                    }
                    got++;
                    nb_row_t *nr = realloc(m->rows, (m->nrows + 1) * sizeof(*nr));
                    if (nr != NULL) {
                        m->rows = nr;
                        m->rows[m->nrows++] = rec.row;
                    }
                    nb_print_row(m, &rec.row);
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
                first_exit = nb_now_ns();
            int bad = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            if (WIFSIGNALED(st) && !(failed && WTERMSIG(st) == SIGTERM)) {
                fprintf(stderr, "%s: the %s (pid %d) was killed by signal %d (%s)\n", NB_PROG,
                        names[i], (int)r, WTERMSIG(st), strsignal(WTERMSIG(st)));
                nb_set_error(m, "the %s was killed by signal %d (%s)", names[i], WTERMSIG(st),
                             strsignal(WTERMSIG(st)));
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
        if (first_exit != 0 && alive > 0 && nb_now_ns() - first_exit > grace) {
            for (int j = 0; j < n; j++)
                if (pids[j] > 0) {
                    fprintf(stderr,
                            "%s: the %s (pid %d) did not exit %" PRIu64
                            " s after its peer: killed (stuck in a close call?)\n",
                            NB_PROG, names[j], (int)pids[j], m->p.timeout_s + 15);
                    kill(pids[j], SIGKILL);
                }
            nb_set_error(m, "a worker hung after its peer finished");
            failed = 1;
            first_exit = nb_now_ns(); /* reap on the next turns */
        }
    }
    if (exit_bad[0] || exit_bad[1]) /* when no error record told why */
        nb_set_error(m, "the %s%s%s failed (see above)", exit_bad[0] ? names[0] : "",
                     exit_bad[0] && exit_bad[1] ? " and the " : "", exit_bad[1] ? names[1] : "");
    if (!failed && got != want) {
        nb_set_error(m, "expected %zu result rows, got %zu", want, got);
        failed = 1;
    }
    return failed ? -1 : 0;
}

/* Run every configuration. `boot` is the bootstrap socket (server/client). */
static int nb_run_configs(nb_main_t *m, int boot)
{
    const nb_params_t *p = &m->p;
    for (uint64_t cfg = 0; cfg < p->nnsocks; cfg++) {
        nb_env_apply(p, cfg);
        int res[2];
        if (pipe(res) != 0) {
            nb_set_error(m, "pipe: %s", strerror(errno));
            return -1;
        }
        pid_t pids[2] = {0, 0};
        const char *names[2];
        int n = 0;
        if (m->mode == NB_MODE_LOOPBACK) {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
                nb_set_error(m, "socketpair: %s", strerror(errno));
                close(res[0]);
                close(res[1]);
                return -1;
            }
            int cr[] = {sv[1], res[0]}, cs[] = {sv[0], res[0]};
            pids[n] = nb_spawn(m, NB_RECV, sv[0], res[1], 1, cfg, cr, 2);
            names[n++] = "receiver";
            if (pids[0] > 0) {
                pids[n] = nb_spawn(m, NB_SEND, sv[1], res[1], 0, cfg, cs, 2);
                names[n++] = "sender";
            }
            close(sv[0]);
            close(sv[1]);
        } else {
            int cl[] = {res[0]};
            nb_role_t role = m->mode == NB_MODE_SERVER ? NB_RECV : NB_SEND;
            pids[n] = nb_spawn(m, role, boot, res[1], 1, cfg, cl, 1);
            names[n++] = role == NB_RECV ? "receiver" : "sender";
        }
        close(res[1]);
        for (int i = 0; i < n; i++)
            if (pids[i] < 0) {
                nb_set_error(m, "fork: %s", strerror(errno));
                pids[i] = 0;
            }
        int rc = nb_collect(m, res[0], pids, names, n, (size_t)p->nsizes);
        close(res[0]);
        if (rc != 0 || m->error[0] != '\0')
            return -1;
    }
    return 0;
}

/* ---- bootstrap (server/client) ------------------------------------------- */

static int nb_boot_listen(int port, char *err, size_t errlen)
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

/* Connect to host:port, retrying refusals for 10 s (the server may be starting). */
static int nb_boot_connect(const char *host, int port, char *err, size_t errlen)
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
    uint64_t deadline = nb_now_ns() + 10000000000ull;
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
        if ((last != ECONNREFUSED && last != EINTR) || nb_now_ns() > deadline)
            break;
        usleep(200000);
    }
    freeaddrinfo(ai);
    snprintf(err, errlen, "cannot connect to %s port %d: %s%s", host, port, strerror(last),
             last == ECONNREFUSED ? " (is `" NB_PROG " server` running there, on this --port?)"
                                  : "");
    return -1;
}

static void nb_boot_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int nb_run_server(nb_main_t *m)
{
    char err[512] = "";
    int lfd = nb_boot_listen(m->port, err, sizeof(err));
    if (lfd < 0) {
        nb_set_error(m, "%s", err);
        return -1;
    }
    if (!nb_quiet)
        fprintf(stderr, "%s: server: listening on port %d for one client\n", NB_PROG, m->port);
    int cfd = -1;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        cfd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            nb_set_error(m, "accept on port %d: %s", m->port, strerror(errno));
            close(lfd);
            return -1;
        }
        char hostbuf[NI_MAXHOST] = "?";
        getnameinfo((struct sockaddr *)&ss, sl, hostbuf, sizeof(hostbuf), NULL, 0, NI_NUMERICHOST);
        nb_boot_tune(cfd);
        if (nb_msg_recv(cfd, NB_MSG_HELLO, 0, NULL, 0, 10000000000ull, "client", err,
                        sizeof(err)) != 0) {
            /* Not one of ours: drop it and keep listening. */
            fprintf(stderr, "%s: server: dropped a connection from %s: %s\n", NB_PROG, hostbuf,
                    err);
            const char *msg = "not a tpx-netbench client of this version";
            nb_msg_send(cfd, NB_MSG_ERROR, 0, msg, (uint32_t)strlen(msg));
            close(cfd);
            continue;
        }
        if (!nb_quiet)
            fprintf(stderr, "%s: server: client %s connected\n", NB_PROG, hostbuf);
        break;
    }
    close(lfd);
    unsigned char wire[sizeof(nb_params_t)];
    nb_words_out(wire, &m->p, sizeof(nb_params_t) / 8);
    int rc = -1;
    if (nb_msg_send(cfd, NB_MSG_PARAMS, 0, wire, sizeof(wire)) != 0) {
        nb_set_error(m, "cannot send the parameters to the client: %s", strerror(errno));
    } else {
        nb_print_header(m);
        rc = nb_run_configs(m, cfd);
    }
    close(cfd);
    return rc;
}

static int nb_run_client(nb_main_t *m)
{
    char err[512] = "";
    int fd = nb_boot_connect(m->host, m->port, err, sizeof(err));
    if (fd < 0) {
        nb_set_error(m, "%s", err);
        return -1;
    }
    nb_boot_tune(fd);
    unsigned char wire[sizeof(nb_params_t)];
    if (nb_msg_send(fd, NB_MSG_HELLO, 0, NULL, 0) != 0 ||
        nb_msg_recv(fd, NB_MSG_PARAMS, 0, wire, sizeof(wire), 30000000000ull, "server", err,
                    sizeof(err)) != 0) {
        if (err[0] == '\0')
            snprintf(err, sizeof(err), "cannot talk to the server: %s", strerror(errno));
        nb_set_error(m, "%s", err);
        close(fd);
        return -1;
    }
    nb_params_t p;
    nb_words_in(&p, wire, sizeof(nb_params_t) / 8);
    if (p.nsizes == 0 || p.nsizes > NB_MAX_SIZES || p.nnsocks == 0 || p.nnsocks > NB_MAX_NSOCKS ||
        p.window == 0 || p.window > 256 || p.timeout_s == 0) {
        nb_set_error(m, "the server sent parameters out of range");
        close(fd);
        return -1;
    }
    for (uint64_t i = 0; i < p.nsizes; i++)
        if (p.sizes[i] > NB_MAX_SIZE) {
            nb_set_error(m, "the server asked for a size out of range");
            close(fd);
            return -1;
        }
    m->p = p;
    if (m->user_set_run_opts && !nb_quiet)
        fprintf(stderr, "%s: client: run options come from the server; yours are ignored\n",
                NB_PROG);
    nb_print_header(m);
    int rc = nb_run_configs(m, fd);
    close(fd);
    return rc;
}

/* ---- command line -------------------------------------------------------- */

static void nb_usage(FILE *f)
{
    fprintf(f,
            "NAME\n"
            "    %1$s - throughput of tpx's built-in TCP transport (ncclNet v10 table)\n"
            "\n"
            "SYNOPSIS\n"
            "    %1$s [--loopback] [OPTIONS]\n"
            "    %1$s server [--port P] [OPTIONS]\n"
            "    %1$s client HOST [--port P] [--dev N] [--json FILE] [--quiet]\n"
            "    %1$s --print-config | --help | --version\n"
            "\n"
            "DESCRIPTION\n"
            "    Moves host memory through the transport that libtpx embeds (the same\n"
            "    code as libnccl-net-tpx.so), using only its ncclNet v10 function table,\n"
            "    and prints bandwidth in a table like nccl-tests.\n"
            "\n"
            "    Every configuration (each --nsocks value) runs in a fresh receiver\n"
            "    process and a fresh sender process, because the transport reads its\n"
            "    TPX_* settings once per process. For each message size: --warmup\n"
            "    untimed iterations, then a barrier (the receiver posts its receives, then\n"
            "    releases the sender), then --iters timed iterations. One iteration is one\n"
            "    message of SIZE bytes, sent as one isend (or several, see --chunk).\n"
            "\n"
            "    Columns: nsocks (TPX_NSOCKS in effect), size (bytes), iters, time(ms)\n"
            "    (per iteration), GB/s (1e9 bytes per second, receiver side: barrier\n"
            "    release to last completion), cpu(s/GB) (user+sys CPU time of both\n"
            "    processes, all threads, per 1e9 bytes), verified, checksum (of the\n"
            "    received bytes of the timed iterations: FNV-1a over 8-byte words in four\n"
            "    lanes, folded per message). A final line names the best row.\n"
            "\n"
            "ROLES\n"
            "    --loopback\n"
            "        Receiver and sender on this host (the default when no role is given).\n"
            "        TPX_SOCKET_IFNAME defaults to \"lo\" in this mode.\n"
            "    server\n"
            "        The receiver side on two machines. Waits on the bootstrap --port for\n"
            "        one client, sends it the run parameters (this side's options decide\n"
            "        them) and the listen handle, runs, prints, exits.\n"
            "    client HOST\n"
            "        The sender side: connects to HOST's bootstrap --port (retrying for\n"
            "        10 s), takes the run parameters from the server, prints the same table.\n"
            "\n"
            "OPTIONS\n"
            "    --port P         bootstrap TCP port of server/client (default %2$d)\n"
            "    --dev N          transport device to use on this side (default 0; devices\n"
            "                     are the interfaces TPX_SOCKET_IFNAME selects)\n"
            "    --size N         one message size (default 256M). K, M, G = 2^10, 2^20, 2^30\n"
            "    --sizes A:B      sizes from A to B, doubling (e.g. 64K:1G); or a comma list\n"
            "                     of sizes and ranges (e.g. 4K,1M:64M). At most %3$d sizes\n"
            "    --iters N        timed iterations per size (default: 5, or more for small\n"
            "                     sizes so that each row moves at least 1 GiB, up to %4$d)\n"
            "    --warmup N       untimed iterations before them (default: iters/10, at least 1)\n"
            "    --nsocks LIST    TPX_NSOCKS values, one configuration each, e.g. 1,2,4,8,16\n"
            "                     (default: TPX_NSOCKS from the environment, or the transport's\n"
            "                     default)\n"
            "    --nthreads N     TPX_NTHREADS for every configuration (default: environment)\n"
            "    --window W       requests in flight per comm (default %5$d, at most 256; the\n"
            "                     transport accepts TPX_MAX_REQUESTS). Buffers: enough messages\n"
            "                     to fill the window, at most 1 GiB per side, at least one\n"
            "    --chunk BYTES    cut each message into isends of at most BYTES (default:\n"
            "                     the whole message in one isend, up to 1 GiB)\n"
            "    --verify         fill every message with a pattern seeded by its iteration\n"
            "                     (sender) and check every byte (receiver); the fill and the\n"
            "                     check are part of the timed loop. Default: on in loopback\n"
            "                     mode, off for server/client\n"
            "    --no-verify      do not fill or check: pure transport throughput\n"
            "    --timeout SEC    a wait without progress this long is an error (default %6$d)\n"
            "    --json FILE      also write every number and the configuration to FILE\n"
            "    -q, --quiet      print only the final \"best\" line (and errors)\n"
            "    --print-config   print every TPX_* setting with its value and meaning\n"
            "    -V, --version    print the version\n"
            "    -h, --help       print this text\n"
            "\n"
            "ENVIRONMENT\n"
            "    The transport's TPX_* variables apply (TPX_SOCKET_IFNAME, TPX_NSOCKS,\n"
            "    TPX_NTHREADS, TPX_PIECE_BYTES, TPX_SOCK_BUF_BYTES, TPX_LOG_LEVEL, ...);\n"
            "    `%1$s --print-config` lists them all with defaults and meanings.\n"
            "    --nsocks and --nthreads set TPX_NSOCKS and TPX_NTHREADS per configuration.\n"
            "\n"
            "EXAMPLES\n"
            "    %1$s\n"
            "        loopback, 256 MiB messages, verified: the quick demo\n"
            "    %1$s --sizes 64K:1G --nsocks 1,2,4,8,16 --no-verify --json sweep.json\n"
            "        the full sweep, pure throughput, with a JSON record\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s server --nsocks 4,8 --sizes 1M:256M\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s client 10.0.0.2\n"
            "        two machines\n"
            "\n"
            "EXIT STATUS\n"
            "    0  every configuration ran and (with --verify) every byte was right\n"
            "    1  the transport returned an error, data did not match, a peer went away\n"
            "       or stopped making progress, or the bootstrap failed\n"
            "    2  bad command line\n",
            NB_PROG, NB_DEFAULT_PORT, NB_MAX_SIZES, NB_AUTO_MAX_ITERS, NB_DEFAULT_WINDOW,
            NB_DEFAULT_TIMEOUT_S);
}

static int nb_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int nb_usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", NB_PROG);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", NB_PROG);
    return NB_EXIT_USAGE;
}

/* "64K:1G,3M" -> sizes. 0 or -1. */
static int nb_parse_sizes(const char *arg, nb_params_t *p)
{
    char buf[512];
    if (strlen(arg) >= sizeof(buf))
        return -1;
    strcpy(buf, arg);
    p->nsizes = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        uint64_t a, b;
        if (colon != NULL) {
            *colon = '\0';
            if (nb_parse_size(tok, &a) != 0 || nb_parse_size(colon + 1, &b) != 0 || a == 0 || b < a)
                return -1;
        } else {
            if (nb_parse_size(tok, &a) != 0)
                return -1;
            b = a;
        }
        for (uint64_t s = a; s <= b; s *= 2) {
            if (p->nsizes >= NB_MAX_SIZES || s > NB_MAX_SIZE)
                return -1;
            p->sizes[p->nsizes++] = s;
            if (s == 0)
                break;
        }
    }
    return p->nsizes > 0 ? 0 : -1;
}

static int nb_parse_nsocks(const char *arg, nb_params_t *p)
{
    char buf[256];
    if (strlen(arg) >= sizeof(buf))
        return -1;
    strcpy(buf, arg);
    p->nnsocks = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (p->nnsocks >= NB_MAX_NSOCKS || nb_parse_uint(tok, 1, 16, &v) != 0)
            return -1;
        p->nsocks[p->nnsocks++] = v;
    }
    return p->nnsocks > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    enum {
        O_LOOPBACK = 256,
        O_PORT,
        O_DEV,
        O_SIZE,
        O_SIZES,
        O_ITERS,
        O_WARMUP,
        O_NSOCKS,
        O_NTHREADS,
        O_WINDOW,
        O_CHUNK,
        O_VERIFY,
        O_NOVERIFY,
        O_JSON,
        O_TIMEOUT,
        O_PRINTCFG,
    };
    static const struct option opts[] = {
        {"loopback", no_argument, NULL, O_LOOPBACK},
        {"port", required_argument, NULL, O_PORT},
        {"dev", required_argument, NULL, O_DEV},
        {"size", required_argument, NULL, O_SIZE},
        {"sizes", required_argument, NULL, O_SIZES},
        {"iters", required_argument, NULL, O_ITERS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"nsocks", required_argument, NULL, O_NSOCKS},
        {"nthreads", required_argument, NULL, O_NTHREADS},
        {"window", required_argument, NULL, O_WINDOW},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"verify", no_argument, NULL, O_VERIFY},
        {"no-verify", no_argument, NULL, O_NOVERIFY},
        {"json", required_argument, NULL, O_JSON},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"quiet", no_argument, NULL, 'q'},
        {"print-config", no_argument, NULL, O_PRINTCFG},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static nb_main_t m;
    nb_params_t *p = &m.p;
    int loopback_flag = 0, verify = -1, run_opts = 0;
    uint64_t v;

    m.mode = NB_MODE_LOOPBACK;
    m.port = NB_DEFAULT_PORT;
    p->nsizes = 1;
    p->sizes[0] = NB_DEFAULT_SIZE;
    p->nnsocks = 1;
    p->nsocks[0] = 0;
    p->iters = NB_AUTO;
    p->warmup = NB_AUTO;
    p->window = NB_DEFAULT_WINDOW;
    p->timeout_s = NB_DEFAULT_TIMEOUT_S;
    p->nthreads = NB_AUTO;

    int c;
    while ((c = getopt_long(argc, argv, "hqV", opts, NULL)) != -1) {
        switch (c) {
        case O_LOOPBACK:
            loopback_flag = 1;
            break;
        case O_PORT:
            if (nb_parse_uint(optarg, 1, 65535, &v) != 0)
                return nb_usage_error("--port: '%s' is not a port (1..65535)", optarg);
            m.port = (int)v;
            break;
        case O_DEV:
            if (nb_parse_uint(optarg, 0, 1023, &v) != 0)
                return nb_usage_error("--dev: '%s' is not a device number", optarg);
            m.dev = (int)v;
            break;
        case O_SIZE:
            if (nb_parse_size(optarg, &v) != 0 || v > NB_MAX_SIZE)
                return nb_usage_error(
                    "--size: bad size '%s' (e.g. 4096, 64K, 256M, 1G; at most 16G)", optarg);
            p->nsizes = 1;
            p->sizes[0] = v;
            run_opts = 1;
            break;
        case O_SIZES:
            if (nb_parse_sizes(optarg, p) != 0)
                return nb_usage_error("--sizes: bad list '%s' (e.g. 64K:1G or 4K,1M:64M; "
                                      "at most %d sizes of at most 16G)",
                                      optarg, NB_MAX_SIZES);
            run_opts = 1;
            break;
        case O_ITERS:
            if (nb_parse_uint(optarg, 1, 100000000, &v) != 0)
                return nb_usage_error("--iters: '%s' is not a count >= 1", optarg);
            p->iters = v;
            run_opts = 1;
            break;
        case O_WARMUP:
            if (nb_parse_uint(optarg, 0, 100000000, &v) != 0)
                return nb_usage_error("--warmup: '%s' is not a count", optarg);
            p->warmup = v;
            run_opts = 1;
            break;
        case O_NSOCKS:
            if (nb_parse_nsocks(optarg, p) != 0)
                return nb_usage_error("--nsocks: bad list '%s' (values 1..16, e.g. 1,2,4,8,16; "
                                      "at most %d)",
                                      optarg, NB_MAX_NSOCKS);
            run_opts = 1;
            break;
        case O_NTHREADS:
            if (nb_parse_uint(optarg, 0, 16, &v) != 0)
                return nb_usage_error("--nthreads: '%s' is not in 0..16", optarg);
            p->nthreads = v;
            run_opts = 1;
            break;
        case O_WINDOW:
            if (nb_parse_uint(optarg, 1, 256, &v) != 0)
                return nb_usage_error("--window: '%s' is not in 1..256", optarg);
            p->window = v;
            run_opts = 1;
            break;
        case O_CHUNK:
            if (nb_parse_size(optarg, &v) != 0 || v == 0 || v > INT_MAX)
                return nb_usage_error("--chunk: bad size '%s' (1 .. 2^31-1 bytes)", optarg);
            p->chunk = v;
            run_opts = 1;
            break;
        case O_VERIFY:
            verify = 1;
            run_opts = 1;
            break;
        case O_NOVERIFY:
            verify = 0;
            run_opts = 1;
            break;
        case O_JSON:
            m.json = optarg;
            break;
        case O_TIMEOUT:
            if (nb_parse_uint(optarg, 1, 86400, &v) != 0)
                return nb_usage_error("--timeout: '%s' is not in 1..86400 seconds", optarg);
            p->timeout_s = v;
            break;
        case 'q':
            nb_quiet = 1;
            break;
        case O_PRINTCFG:
            tpx_config_print(stdout, 0);
            return NB_EXIT_OK;
        case 'V':
            printf("%s %s (libtpx %s)\n", NB_PROG, tpx_version_string(), tpx_version_string());
            return NB_EXIT_OK;
        case 'h':
            nb_usage(stdout);
            return NB_EXIT_OK;
        default:
            fprintf(stderr, "Try '%s --help'.\n", NB_PROG);
            return NB_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        const char *role = argv[optind++];
        if (strcmp(role, "server") == 0) {
            m.mode = NB_MODE_SERVER;
        } else if (strcmp(role, "client") == 0) {
            if (optind >= argc)
                return nb_usage_error("client: which HOST? (e.g. %s client 10.0.0.2)", NB_PROG);
            m.mode = NB_MODE_CLIENT;
            m.host = argv[optind++];
        } else if (strcmp(role, "loopback") == 0) {
            m.mode = NB_MODE_LOOPBACK;
        } else {
            return nb_usage_error("unknown role '%s' (server, client HOST, or --loopback)", role);
        }
        if (optind < argc)
            return nb_usage_error("unexpected argument '%s'", argv[optind]);
    }
    if (loopback_flag && m.mode != NB_MODE_LOOPBACK)
        return nb_usage_error("--loopback and %s exclude each other", nb_mode_name(m.mode));
    p->verify = verify >= 0 ? (uint64_t)verify : m.mode == NB_MODE_LOOPBACK;
    m.user_set_run_opts = run_opts && m.mode == NB_MODE_CLIENT;

    signal(SIGPIPE, SIG_IGN);
    if (m.mode == NB_MODE_LOOPBACK && getenv("TPX_SOCKET_IFNAME") == NULL)
        setenv("TPX_SOCKET_IFNAME", "lo", 1);
    m.progress = !nb_quiet && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    time_t now = time(NULL);
    struct tm tmv;
    strftime(m.started, sizeof(m.started), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));

    int rc;
    if (m.mode == NB_MODE_SERVER) {
        rc = nb_run_server(&m);
    } else if (m.mode == NB_MODE_CLIENT) {
        rc = nb_run_client(&m);
    } else {
        nb_print_header(&m);
        rc = nb_run_configs(&m, -1);
    }
    if (m.error[0] != '\0')
        rc = -1;

    const nb_row_t *best = NULL;
    int all_verified = m.nrows > 0;
    for (size_t i = 0; i < m.nrows; i++) {
        if (best == NULL || nb_row_gbps(&m.rows[i]) > nb_row_gbps(best))
            best = &m.rows[i];
        all_verified &= (int)m.rows[i].verified;
    }
    if (best != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s at nsocks %" PRIu64 ", size %" PRIu64 " (%s)%s%s\n",
               nb_row_gbps(best), best->nsocks, best->size, nb_human(best->size, hb, sizeof(hb)),
               all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
    }
    if (rc != 0)
        fprintf(stderr, "%s: FAILED: %s\n", NB_PROG, m.error[0] ? m.error : "see above");
    if (m.json != NULL && nb_write_json(&m) != 0 && rc == 0)
        rc = -1;
    free(m.rows);
    return rc == 0 ? NB_EXIT_OK : NB_EXIT_FAIL;
}
