/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bs_conn.c - bootstrap listen/accept, the non-blocking handshake state
 * machine, and framed messages after it.
 *
 * A connection is a state (enum + table of handlers) advanced by
 * tpx__bs_advance(). Each handler either makes one transition and returns
 * TPX_OK (advance loops), returns TPX_INPROGRESS when it needs the socket
 * or a timer, or fails through BS_FAIL(), which logs the one line for that
 * failure and makes it sticky. Input is read exactly frame by frame (header,
 * then payload), so nothing is ever buffered past the current frame and a
 * peer's bytes are checked before the next read decides how much to take.
 * During the handshake the length limit is the exact size of the one
 * message expected, so an unauthenticated peer can make us hold no more
 * than a few dozen bytes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "common/bytes.h"
#include "common/log.h"
#include "sha256.h"

#define BS_MAX_ADDRS       8  /* resolved addresses a client tries */
#define BS_RETRY_MIN_MS    50 /* connect retry delay: 50..100 ms */
#define BS_RETRY_JITTER_MS 50
#define BS_PEER_STR_SIZE   320 /* host (<= 255) + brackets + ":65535" */
#define BS_SMALL_IN        128 /* inline input buffer: every handshake message fits */

_Static_assert(TPX_BS_CHALLENGE_SIZE <= BS_SMALL_IN, "handshake messages fit the inline buffer");

typedef enum {
    BS_CONNECTING,     /* client: connect() in flight */
    BS_BACKOFF,        /* client: waiting to (re)try a connect */
    BS_WAIT_CHALLENGE, /* client: HELLO queued, CHALLENGE awaited */
    BS_WAIT_WELCOME,   /* client: AUTH queued, WELCOME awaited */
    BS_WAIT_HELLO,     /* server: HELLO awaited */
    BS_WAIT_AUTH,      /* server: CHALLENGE queued, AUTH awaited */
    BS_WELCOMING,      /* server: WELCOME queued, to be flushed */
    BS_READY,          /* handshake done: framed messages */
    BS_FAILED,         /* c->err says why; logged once */
    BS__NSTATES
} bs_state_t;

static const char *const bs_state_names[BS__NSTATES] = {
    "CONNECTING", "BACKOFF",   "WAIT_CHALLENGE", "WAIT_WELCOME", "WAIT_HELLO",
    "WAIT_AUTH",  "WELCOMING", "READY",          "FAILED",
};

struct tpx_bs_conn {
    int fd;
    int is_client;
    bs_state_t state;
    uint64_t moved_ns; /* when state last changed */
    tpx_status_t err; /* why, once FAILED */
    uint64_t start_ns, deadline_ns;
    char *token; /* NULL: no token; else a private copy, wiped on close */
    tpx_bs_loglimit_t *lim; /* failure lines go through it (server connections) */
    int authenticated;
    uint8_t my_nonce[TPX_BS_NONCE_SIZE];
    uint8_t peer_nonce[TPX_BS_NONCE_SIZE];
    tpx_sha256_ctx_t th;                     /* the handshake so far (transcript) */
    uint8_t transcript[TPX_BS_TRANSCRIPT_SIZE]; /* its digest, once READY */
    char peer[BS_PEER_STR_SIZE];

    /* client connect */
    struct sockaddr_storage addrs[BS_MAX_ADDRS];
    socklen_t addrlens[BS_MAX_ADDRS];
    int naddrs, next_addr, attempts;
    int last_errno; /* of the last failed connect attempt */
    uint64_t retry_at_ns;
    char target[BS_PEER_STR_SIZE]; /* "host:port" as the caller gave it */

    /* input: the current frame */
    unsigned char hdr[TPX_BS_HDR_SIZE];
    uint32_t hdr_got;
    int have_hdr;
    tpx_bs_hdr_t h;
    unsigned char *in; /* `small`, or a TPX_BS_MAX_MSG heap buffer */
    uint32_t in_got;
    unsigned char small[BS_SMALL_IN];

    /* output queue: bytes [out_off, out_len) of `out` are unsent */
    unsigned char *out;
    size_t out_off, out_len, out_cap;
};

/* ---- helpers ---------------------------------------------------------------- */

static void set_state(tpx_bs_conn_t *c, bs_state_t s)
{
    TPX_DEBUG("bootstrap %s: %s -> %s", c->peer, bs_state_names[c->state], bs_state_names[s]);
    c->state = s;
    c->moved_ns = tpx__now_ns();
}

static void set_failed(tpx_bs_conn_t *c, tpx_status_t st)
{
    c->err = st;
    set_state(c, BS_FAILED);
}

/* Log the one line for this failure (through the limiter, if any) and make
 * it sticky. */
#define BS_FAIL(c, st, lvl, ...)                                                                   \
    do {                                                                                           \
        if ((int)(lvl) > TPX_LOG_WARN || (c)->lim == NULL || tpx__bs_loglimit((c)->lim))           \
            TPX_LOG(lvl, __VA_ARGS__);                                                             \
        set_failed((c), (st));                                                                     \
    } while (0)

void tpx__bs_loglimit_tick(tpx_bs_loglimit_t *l)
{
    uint64_t now = tpx__now_ns();
    if (now - l->window_ns < (uint64_t)TPX_BS_LOG_WINDOW_MS * 1000000ull)
        return;
    if (l->suppressed > 0)
        TPX_WARN("bootstrap: %llu more failed or rejected connections in the last %.0f s (not "
                 "logged one by one)",
                 (unsigned long long)l->suppressed, (double)(now - l->window_ns) / 1e9);
    l->window_ns = now;
    l->logged = 0;
    l->suppressed = 0;
}

int tpx__bs_loglimit(tpx_bs_loglimit_t *l)
{
    tpx__bs_loglimit_tick(l);
    if (l->logged < TPX_BS_LOG_BURST) {
        l->logged++;
        return 1;
    }
    l->suppressed++;
    return 0;
}

void tpx__bs_set_loglimit(tpx_bs_conn_t *c, tpx_bs_loglimit_t *l)
{
    c->lim = l;
}

static double ms_since(uint64_t t0)
{
    return (double)(tpx__now_ns() - t0) / 1e6;
}

static void addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) { /* an IPv4 peer of a dual-stack listener */
            inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], ip, sizeof(ip));
            snprintf(buf, len, "%s:%u", ip, ntohs(s6->sin6_port));
            return;
        }
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
    } else if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(s4->sin_port));
    } else if (sa->sa_family == AF_UNIX) {
        snprintf(buf, len, "local");
    } else {
        snprintf(buf, len, "?");
    }
}

static void set_peer_from_fd(tpx_bs_conn_t *c)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    memset(&ss, 0, sizeof(ss));
    if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0)
        addr_str((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
    else if (c->peer[0] == '\0')
        snprintf(c->peer, sizeof(c->peer), "?");
}

static void set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on AF_UNIX: fine */
}

static int has_token(const tpx_bs_conn_t *c)
{
    return c->token != NULL;
}

static tpx_bs_conn_t *conn_new(int is_client, const char *token, uint64_t deadline_ns)
{
    tpx_bs_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->fd = -1;
    c->is_client = is_client;
    c->start_ns = tpx__now_ns();
    c->deadline_ns = deadline_ns;
    c->in = c->small;
    tpx__sha256_init(&c->th);
    tpx__sha256_update(&c->th, "tpx-bs-transcript-v1", 20);
    if (token != NULL && *token != '\0') {
        c->token = strdup(token);
        if (c->token == NULL) {
            free(c);
            return NULL;
        }
    }
    return c;
}

static void conn_free(tpx_bs_conn_t *c)
{
    if (c->token != NULL) {
        tpx__secure_zero(c->token, strlen(c->token));
        free(c->token);
    }
    if (c->in != c->small)
        free(c->in);
    free(c->out);
    tpx__secure_zero(c, sizeof(*c));
    free(c);
}

/* ---- output queue ------------------------------------------------------------ */

/* Append one frame. The queue only grows as far as the caller allows
 * (TPX_BS_MAX_QUEUED, checked by tpx__bs_send; handshake frames are tiny). */
static tpx_status_t out_append(tpx_bs_conn_t *c, uint16_t type, const void *payload, uint32_t len)
{
    size_t pending = c->out_len - c->out_off;
    size_t need = pending + TPX_BS_HDR_SIZE + len;
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, pending);
        c->out_off = 0;
        c->out_len = pending;
    }
    if (need > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 256;
        while (cap < need)
            cap *= 2;
        unsigned char *p = realloc(c->out, cap);
        if (p == NULL)
            return TPX_ERR_NO_MEMORY;
        c->out = p;
        c->out_cap = cap;
    }
    tpx__bs_hdr_encode(type, len, c->out + c->out_len);
    if (len > 0)
        memcpy(c->out + c->out_len + TPX_BS_HDR_SIZE, payload, len);
    c->out_len += TPX_BS_HDR_SIZE + len;
    return TPX_OK;
}

static int in_handshake(const tpx_bs_conn_t *c)
{
    return c->state != BS_READY;
}

/* Write queued bytes: TPX_OK when empty, TPX_INPROGRESS when the socket is
 * full, else fails the connection (logged). */
static tpx_status_t out_flush(tpx_bs_conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        int e = n < 0 ? errno : EPIPE;
        if (e == EINTR)
            continue;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return TPX_INPROGRESS;
        tpx_status_t st = tpx__status_from_errno(e);
        if (in_handshake(c))
            BS_FAIL(c, st, TPX_LOG_WARN,
                    "bootstrap: peer %s: send failed during the handshake (%s): dropped", c->peer,
                    strerror(e));
        else
            BS_FAIL(c, st, TPX_LOG_WARN, "bootstrap: peer %s: send failed: %s", c->peer,
                    strerror(e));
        return c->err;
    }
    c->out_off = c->out_len = 0;
    return TPX_OK;
}

/* ---- input: one frame at a time --------------------------------------------- */

/* Read up to `len` bytes into p. TPX_OK with *got > 0, TPX_INPROGRESS, or a
 * failure (logged). */
static tpx_status_t in_read(tpx_bs_conn_t *c, unsigned char *p, size_t len, size_t *got)
{
    for (;;) {
        ssize_t n = recv(c->fd, p, len, 0);
        if (n > 0) {
            *got = (size_t)n;
            return TPX_OK;
        }
        if (n == 0) {
            if (in_handshake(c))
                BS_FAIL(c, TPX_ERR_CONN_RESET, TPX_LOG_WARN,
                        "bootstrap: peer %s closed the connection during the handshake (in %s%s)",
                        c->peer, bs_state_names[c->state],
                        c->state == BS_WAIT_AUTH && has_token(c)
                            ? "; it may have rejected our TPX_AUTH_TOKEN"
                            : "");
            else if (c->hdr_got == 0)
                BS_FAIL(c, TPX_ERR_CONN_RESET, TPX_LOG_DEBUG,
                        "bootstrap: peer %s closed the connection", c->peer);
            else
                BS_FAIL(c, TPX_ERR_CONN_RESET, TPX_LOG_WARN,
                        "bootstrap: peer %s closed the connection in the middle of a message",
                        c->peer);
            return c->err;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return TPX_INPROGRESS;
        BS_FAIL(c, tpx__status_from_errno(e), TPX_LOG_WARN,
                "bootstrap: peer %s: receive failed: %s", c->peer, strerror(e));
        return c->err;
    }
}

static void in_reset(tpx_bs_conn_t *c)
{
    c->hdr_got = 0;
    c->have_hdr = 0;
    c->in_got = 0;
}

/* Read the current frame until it is complete (TPX_OK: c->h and
 * c->in[0..h.len)), TPX_INPROGRESS, or a failure (logged). `max_len` is
 * the largest payload acceptable now. */
static tpx_status_t in_frame(tpx_bs_conn_t *c, uint32_t max_len)
{
    tpx_status_t st;
    size_t n = 0;
    while (!c->have_hdr) {
        st = in_read(c, c->hdr + c->hdr_got, TPX_BS_HDR_SIZE - c->hdr_got, &n);
        if (st != TPX_OK)
            return st;
        c->hdr_got += (uint32_t)n;
        if (c->hdr_got < TPX_BS_HDR_SIZE)
            continue;
        const char *why = "?";
        if (tpx__bs_hdr_decode(c->hdr, max_len, &c->h, &why) != TPX_OK) {
            const unsigned char *b = c->hdr;
            BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                    "bootstrap: peer %s sent a bad frame header (%s; magic 0x%08x version %u "
                    "type %u length %u, limit %u here): dropped",
                    c->peer, why, tpx__get32(b), (unsigned)tpx__get16(b + 4),
                    (unsigned)tpx__get16(b + 6), tpx__get32(b + 8), TPX_MIN(max_len, TPX_BS_MAX_MSG));
            return c->err;
        }
        if (c->h.len > BS_SMALL_IN && c->in == c->small) {
            unsigned char *big = malloc(TPX_BS_MAX_MSG);
            if (big == NULL) {
                BS_FAIL(c, TPX_ERR_NO_MEMORY, TPX_LOG_WARN,
                        "bootstrap: peer %s: out of memory for a %u-byte message", c->peer,
                        c->h.len);
                return c->err;
            }
            c->in = big;
        }
        c->have_hdr = 1;
    }
    while (c->in_got < c->h.len) {
        st = in_read(c, c->in + c->in_got, c->h.len - c->in_got, &n);
        if (st != TPX_OK)
            return st;
        c->in_got += (uint32_t)n;
    }
    return TPX_OK;
}

/* In the handshake: read the one frame expected now, of type `type` and at
 * most `size` bytes (the decoders check the exact size). */
static tpx_status_t in_handshake_frame(tpx_bs_conn_t *c, uint16_t type, uint32_t size,
                                       const char *name)
{
    tpx_status_t st = in_frame(c, size);
    if (st != TPX_OK)
        return st;
    if (c->h.type != type) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent message type %u where %s was expected: dropped", c->peer,
                c->h.type, name);
        return c->err;
    }
    return TPX_OK;
}

/* ---- client connect ---------------------------------------------------------- */

static int connect_err_retriable(int e)
{
    return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == ETIMEDOUT ||
           e == ECONNRESET || e == ECONNABORTED;
}

/* A connect attempt failed with `e`: try the next address at once, or wait
 * 50-100 ms before going round the list again. */
static tpx_status_t connect_failed(tpx_bs_conn_t *c, int e)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (!connect_err_retriable(e)) {
        BS_FAIL(c, tpx__status_from_errno(e), TPX_LOG_WARN, "bootstrap: cannot connect to %s: %s",
                c->target, strerror(e));
        return c->err;
    }
    c->last_errno = e;
    uint64_t now = tpx__now_ns();
    if (++c->next_addr < c->naddrs) {
        c->retry_at_ns = now;
    } else {
        c->next_addr = 0;
        uint64_t jitter = (now / 1000u) % (BS_RETRY_JITTER_MS + 1);
        c->retry_at_ns = now + (BS_RETRY_MIN_MS + jitter) * 1000000ull;
    }
    snprintf(c->peer, sizeof(c->peer), "%s", c->target);
    set_state(c, BS_BACKOFF);
    return TPX_OK;
}

/* Connected (to a server, or a socket handed to us): queue HELLO. */
static tpx_status_t client_connected(tpx_bs_conn_t *c)
{
    set_peer_from_fd(c);
    tpx_bs_hello_t hello;
    memset(&hello, 0, sizeof(hello));
    if (tpx__random_bytes(c->my_nonce, sizeof(c->my_nonce)) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_IO, TPX_LOG_WARN, "bootstrap: peer %s: no random bytes for a nonce",
                c->peer);
        return c->err;
    }
    memcpy(hello.nonce, c->my_nonce, sizeof(hello.nonce));
    hello.flags = has_token(c) ? TPX_BS_FLAG_AUTH : 0;
    unsigned char buf[TPX_BS_HELLO_SIZE];
    tpx__bs_hello_encode(&hello, buf);
    tpx__sha256_update(&c->th, buf, sizeof(buf));
    if (out_append(c, TPX_BS_MSG_HELLO, buf, sizeof(buf)) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_NO_MEMORY, TPX_LOG_WARN, "bootstrap: peer %s: out of memory", c->peer);
        return c->err;
    }
    set_state(c, BS_WAIT_CHALLENGE);
    return TPX_OK;
}

/* Linux may connect a socket to itself when the target port is free and in
 * the ephemeral range (TCP simultaneous open); that is a refusal. */
static int is_self_connect(int fd)
{
    struct sockaddr_storage a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0)
        return 0;
    return la == lb && memcmp(&a, &b, la) == 0;
}

static tpx_status_t connect_start(tpx_bs_conn_t *c)
{
    const struct sockaddr *sa = (const struct sockaddr *)&c->addrs[c->next_addr];
    addr_str(sa, c->peer, sizeof(c->peer));
    c->attempts++;
    c->fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        int e = errno;
        BS_FAIL(c, tpx__status_from_errno(e), TPX_LOG_WARN,
                "bootstrap: cannot create a socket to connect to %s: %s", c->peer, strerror(e));
        return c->err;
    }
    set_nodelay(c->fd);
    if (connect(c->fd, sa, c->addrlens[c->next_addr]) == 0) {
        if (is_self_connect(c->fd))
            return connect_failed(c, ECONNREFUSED);
        return client_connected(c);
    }
    if (errno == EINPROGRESS || errno == EINTR) {
        set_state(c, BS_CONNECTING);
        return TPX_OK;
    }
    return connect_failed(c, errno);
}

static tpx_status_t h_backoff(tpx_bs_conn_t *c)
{
    if (tpx__now_ns() < c->retry_at_ns)
        return TPX_INPROGRESS;
    return connect_start(c);
}

static tpx_status_t h_connecting(tpx_bs_conn_t *c)
{
    struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
    int r = poll(&pfd, 1, 0);
    if (r == 0 || (r < 0 && errno == EINTR))
        return TPX_INPROGRESS;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0 && is_self_connect(c->fd))
        err = ECONNREFUSED;
    if (err != 0)
        return connect_failed(c, err);
    return client_connected(c);
}

/* ---- handshake handlers ------------------------------------------------------- */

static tpx_status_t h_wait_challenge(tpx_bs_conn_t *c)
{
    tpx_status_t st =
        in_handshake_frame(c, TPX_BS_MSG_CHALLENGE, TPX_BS_CHALLENGE_SIZE, "CHALLENGE");
    if (st != TPX_OK)
        return st;
    tpx_bs_challenge_t ch;
    if (tpx__bs_challenge_decode(c->in, c->h.len, &ch) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent a malformed CHALLENGE (%u bytes): dropped", c->peer,
                c->h.len);
        return c->err;
    }
    tpx__sha256_update(&c->th, c->in, c->h.len);
    in_reset(c);
    int peer_auth = (ch.flags & TPX_BS_FLAG_AUTH) != 0;
    if (has_token(c) && !peer_auth) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s did not authenticate (TPX_AUTH_TOKEN set here, not there?)",
                c->peer);
        return c->err;
    }
    if (!has_token(c) && peer_auth) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s requires authentication (TPX_AUTH_TOKEN set there, not here?)",
                c->peer);
        return c->err;
    }
    memcpy(c->peer_nonce, ch.nonce, sizeof(c->peer_nonce));
    uint8_t expect[TPX_BS_MAC_SIZE];
    tpx__bs_handshake_mac(c->token, TPX_BS_MAC_SERVER, c->my_nonce, c->peer_nonce, expect);
    int ok = tpx__ct_equal(expect, ch.mac, sizeof(expect));
    tpx__secure_zero(expect, sizeof(expect));
    if (!ok) {
        /* Only reachable with a token: without one both macs are zero. */
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: authentication failed: peer %s does not know our TPX_AUTH_TOKEN",
                c->peer);
        return c->err;
    }
    tpx_bs_auth_t auth;
    tpx__bs_handshake_mac(c->token, TPX_BS_MAC_CLIENT, c->peer_nonce, c->my_nonce, auth.mac);
    unsigned char buf[TPX_BS_AUTH_SIZE];
    tpx__bs_auth_encode(&auth, buf);
    tpx__sha256_update(&c->th, buf, sizeof(buf));
    st = out_append(c, TPX_BS_MSG_AUTH, buf, sizeof(buf));
    tpx__secure_zero(&auth, sizeof(auth));
    if (st != TPX_OK) {
        BS_FAIL(c, TPX_ERR_NO_MEMORY, TPX_LOG_WARN, "bootstrap: peer %s: out of memory", c->peer);
        return c->err;
    }
    set_state(c, BS_WAIT_WELCOME);
    return TPX_OK;
}

static tpx_status_t h_wait_welcome(tpx_bs_conn_t *c)
{
    tpx_status_t st = in_handshake_frame(c, TPX_BS_MSG_WELCOME, 0, "WELCOME");
    if (st != TPX_OK)
        return st;
    in_reset(c);
    c->authenticated = has_token(c);
    tpx__sha256_final(&c->th, c->transcript);
    TPX_DEBUG("bootstrap: connected to %s%s in %.1f ms", c->peer,
              c->authenticated ? ", mutually authenticated" : "", ms_since(c->start_ns));
    set_state(c, BS_READY);
    return TPX_OK;
}

static tpx_status_t h_wait_hello(tpx_bs_conn_t *c)
{
    tpx_status_t st = in_handshake_frame(c, TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, "HELLO");
    if (st != TPX_OK)
        return st;
    tpx_bs_hello_t hello;
    if (tpx__bs_hello_decode(c->in, c->h.len, &hello) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent a malformed HELLO (%u bytes): dropped", c->peer, c->h.len);
        return c->err;
    }
    tpx__sha256_update(&c->th, c->in, c->h.len);
    in_reset(c);
    memcpy(c->peer_nonce, hello.nonce, sizeof(c->peer_nonce));
    if (tpx__random_bytes(c->my_nonce, sizeof(c->my_nonce)) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_IO, TPX_LOG_WARN, "bootstrap: peer %s: no random bytes for a nonce",
                c->peer);
        return c->err;
    }
    int peer_auth = (hello.flags & TPX_BS_FLAG_AUTH) != 0;
    int mismatch = peer_auth != has_token(c);
    tpx_bs_challenge_t ch;
    memset(&ch, 0, sizeof(ch));
    memcpy(ch.nonce, c->my_nonce, sizeof(ch.nonce));
    ch.flags = has_token(c) ? TPX_BS_FLAG_AUTH : 0;
    /* On a mismatch the mac stays zero: a peer without the token gets
     * nothing it could use; the flags alone let it say what is wrong. */
    if (!mismatch)
        tpx__bs_handshake_mac(c->token, TPX_BS_MAC_SERVER, c->peer_nonce, c->my_nonce, ch.mac);
    unsigned char buf[TPX_BS_CHALLENGE_SIZE];
    tpx__bs_challenge_encode(&ch, buf);
    tpx__sha256_update(&c->th, buf, sizeof(buf));
    if (out_append(c, TPX_BS_MSG_CHALLENGE, buf, sizeof(buf)) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_NO_MEMORY, TPX_LOG_WARN, "bootstrap: peer %s: out of memory", c->peer);
        return c->err;
    }
    if (mismatch) {
        /* Tell the peer (best effort, one non-blocking send of a tiny frame
         * to a fresh socket) so that both sides can log the cause. */
        (void)send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                   MSG_NOSIGNAL | MSG_DONTWAIT);
        if (has_token(c))
            BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                    "bootstrap: peer %s did not authenticate (TPX_AUTH_TOKEN set here, not "
                    "there?): dropped",
                    c->peer);
        else
            BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                    "bootstrap: peer %s requires authentication (TPX_AUTH_TOKEN set there, not "
                    "here?): dropped",
                    c->peer);
        return c->err;
    }
    set_state(c, BS_WAIT_AUTH);
    return TPX_OK;
}

static tpx_status_t h_wait_auth(tpx_bs_conn_t *c)
{
    tpx_status_t st = in_handshake_frame(c, TPX_BS_MSG_AUTH, TPX_BS_AUTH_SIZE, "AUTH");
    if (st != TPX_OK)
        return st;
    tpx_bs_auth_t auth;
    if (tpx__bs_auth_decode(c->in, c->h.len, &auth) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent a malformed AUTH (%u bytes): dropped", c->peer, c->h.len);
        return c->err;
    }
    tpx__sha256_update(&c->th, c->in, c->h.len);
    in_reset(c);
    /* Without a token the expected mac is all zero, so the same check
     * rejects a stray non-zero mac. The mac covers this connection's fresh
     * server nonce, so an AUTH recorded elsewhere never matches. */
    uint8_t expect[TPX_BS_MAC_SIZE];
    tpx__bs_handshake_mac(c->token, TPX_BS_MAC_CLIENT, c->my_nonce, c->peer_nonce, expect);
    int ok = tpx__ct_equal(expect, auth.mac, sizeof(expect));
    tpx__secure_zero(expect, sizeof(expect));
    if (!ok) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: authentication failed: peer %s %s: dropped", c->peer,
                has_token(c) ? "does not know our TPX_AUTH_TOKEN (or replayed an old handshake)"
                             : "sent a non-zero AUTH without a token");
        return c->err;
    }
    if (out_append(c, TPX_BS_MSG_WELCOME, NULL, 0) != TPX_OK) {
        BS_FAIL(c, TPX_ERR_NO_MEMORY, TPX_LOG_WARN, "bootstrap: peer %s: out of memory", c->peer);
        return c->err;
    }
    c->authenticated = has_token(c);
    tpx__sha256_final(&c->th, c->transcript);
    set_state(c, BS_WELCOMING);
    return TPX_OK;
}

static tpx_status_t h_welcoming(tpx_bs_conn_t *c)
{
    if (c->out_off < c->out_len)
        return TPX_INPROGRESS;
    TPX_DEBUG("bootstrap: accepted %s%s in %.1f ms", c->peer,
              c->authenticated ? ", mutually authenticated" : "", ms_since(c->start_ns));
    set_state(c, BS_READY);
    return TPX_OK;
}

typedef tpx_status_t (*bs_handler_t)(tpx_bs_conn_t *c);

/* One handler per handshake state; READY and FAILED are final. */
static const bs_handler_t bs_handlers[BS__NSTATES] = {
    [BS_CONNECTING] = h_connecting,         [BS_BACKOFF] = h_backoff,
    [BS_WAIT_CHALLENGE] = h_wait_challenge, [BS_WAIT_WELCOME] = h_wait_welcome,
    [BS_WAIT_HELLO] = h_wait_hello,         [BS_WAIT_AUTH] = h_wait_auth,
    [BS_WELCOMING] = h_welcoming,
};

/* The deadline passed with the handshake unfinished: say what we waited for. */
static tpx_status_t fail_deadline(tpx_bs_conn_t *c)
{
    double ms = ms_since(c->start_ns);
    if (c->state == BS_BACKOFF || (c->state == BS_CONNECTING && c->last_errno != 0)) {
        int e = c->last_errno ? c->last_errno : ETIMEDOUT;
        tpx_status_t st = tpx__status_from_errno(e);
        BS_FAIL(c, st, TPX_LOG_WARN,
                "bootstrap: could not connect to %s: %s (%d attempts in %.0f ms; is the server "
                "up?)",
                c->target, strerror(e), c->attempts, ms);
    } else if (c->state == BS_CONNECTING) {
        BS_FAIL(c, TPX_ERR_TIMED_OUT, TPX_LOG_WARN,
                "bootstrap: connect to %s timed out after %.0f ms", c->peer, ms);
    } else {
        BS_FAIL(c, TPX_ERR_TIMED_OUT, TPX_LOG_WARN,
                "bootstrap: peer %s did not complete the handshake within %.0f ms (stalled in "
                "%s): dropped",
                c->peer, ms, bs_state_names[c->state]);
    }
    return c->err;
}

/* ---- public: handshake ------------------------------------------------------------ */

tpx_status_t tpx__bs_advance(tpx_bs_conn_t *c)
{
    for (;;) {
        if (c->state == BS_READY)
            return TPX_OK;
        if (c->state == BS_FAILED)
            return c->err;
        if (c->out_off < c->out_len && c->state != BS_CONNECTING && c->state != BS_BACKOFF &&
            out_flush(c) < 0)
            return c->err;
        tpx_status_t st = bs_handlers[c->state](c);
        if (st < 0)
            return c->err;
        if (st == TPX_OK)
            continue;
        if (tpx__now_ns() >= c->deadline_ns)
            return fail_deadline(c);
        return TPX_INPROGRESS;
    }
}

int tpx__bs_fd(const tpx_bs_conn_t *c)
{
    return c->fd;
}

short tpx__bs_events(const tpx_bs_conn_t *c)
{
    short out = c->out_off < c->out_len ? POLLOUT : 0;
    switch (c->state) {
    case BS_CONNECTING:
        return POLLOUT;
    case BS_BACKOFF:
    case BS_FAILED:
        return 0;
    case BS_WELCOMING:
        return out;
    default:
        return (short)(POLLIN | out);
    }
}

int tpx__bs_timeout_ms(const tpx_bs_conn_t *c)
{
    if (c->state == BS_READY || c->state == BS_FAILED)
        return -1;
    uint64_t t = c->deadline_ns;
    if (c->state == BS_BACKOFF && c->retry_at_ns < t)
        t = c->retry_at_ns;
    return tpx__ms_left(t);
}

int tpx__bs_authenticated(const tpx_bs_conn_t *c)
{
    return c->authenticated;
}

uint64_t tpx__bs_moved_ns(const tpx_bs_conn_t *c)
{
    return c->moved_ns;
}

int tpx__bs_is_client(const tpx_bs_conn_t *c)
{
    return c->is_client;
}

tpx_status_t tpx__bs_transcript(const tpx_bs_conn_t *c, uint8_t out[TPX_BS_TRANSCRIPT_SIZE])
{
    if (c->state != BS_READY)
        return TPX_ERR_INVALID_STATE;
    memcpy(out, c->transcript, TPX_BS_TRANSCRIPT_SIZE);
    return TPX_OK;
}

tpx_status_t tpx__bs_peer_addr(const tpx_bs_conn_t *c, struct sockaddr_storage *ss)
{
    socklen_t sl = sizeof(*ss);
    memset(ss, 0, sizeof(*ss));
    if (c->fd < 0 || getpeername(c->fd, (struct sockaddr *)ss, &sl) != 0)
        return TPX_ERR_INVALID_STATE;
    return TPX_OK;
}

const char *tpx__bs_peer_str(const tpx_bs_conn_t *c)
{
    return c->peer;
}

tpx_status_t tpx__bs_handshake_wait(tpx_bs_conn_t *c)
{
    for (;;) {
        tpx_status_t st = tpx__bs_advance(c);
        if (st != TPX_INPROGRESS)
            return st;
        struct pollfd pfd = {.fd = c->fd, .events = tpx__bs_events(c)};
        int ms = tpx__bs_timeout_ms(c);
        (void)poll(&pfd, 1, ms < 0 ? 0 : ms);
    }
}

/* ---- public: set-up ----------------------------------------------------------------- */

tpx_status_t tpx__bs_server_start(int fd, const char *token, uint64_t deadline_ns,
                                  tpx_bs_conn_t **out)
{
    if (fd < 0 || out == NULL)
        return TPX_ERR_INVALID_ARG;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return TPX_ERR_INVALID_ARG;
    tpx_bs_conn_t *c = conn_new(0, token, deadline_ns);
    if (c == NULL)
        return TPX_ERR_NO_MEMORY;
    c->fd = fd;
    set_nodelay(fd);
    set_peer_from_fd(c);
    c->state = BS_WAIT_HELLO;
    *out = c;
    return TPX_OK;
}

tpx_status_t tpx__bs_client_start_fd(int fd, const char *token, uint64_t deadline_ns,
                                     tpx_bs_conn_t **out)
{
    if (fd < 0 || out == NULL)
        return TPX_ERR_INVALID_ARG;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return TPX_ERR_INVALID_ARG;
    tpx_bs_conn_t *c = conn_new(1, token, deadline_ns);
    if (c == NULL)
        return TPX_ERR_NO_MEMORY;
    c->fd = fd;
    c->state = BS_CONNECTING; /* only for the transition log below */
    tpx_status_t st = client_connected(c);
    if (st < 0) {
        c->fd = -1; /* the caller keeps fd on failure */
        conn_free(c);
        return st;
    }
    *out = c;
    return TPX_OK;
}

tpx_status_t tpx__bs_client_start(const char *host, int port, const char *token,
                                  uint64_t deadline_ns, tpx_bs_conn_t **out)
{
    if (host == NULL || *host == '\0' || port < 1 || port > 65535 || out == NULL) {
        TPX_WARN("bootstrap: bad connect target \"%s\" port %d", host ? host : "(null)", port);
        return TPX_ERR_INVALID_ARG;
    }
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        TPX_WARN("bootstrap: cannot resolve \"%s\": %s", host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return TPX_ERR_UNREACHABLE;
    }
    tpx_bs_conn_t *c = conn_new(1, token, deadline_ns);
    if (c == NULL) {
        freeaddrinfo(res);
        return TPX_ERR_NO_MEMORY;
    }
    for (struct addrinfo *ai = res; ai != NULL && c->naddrs < BS_MAX_ADDRS; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
            ai->ai_addrlen > sizeof(c->addrs[0]))
            continue;
        memcpy(&c->addrs[c->naddrs], ai->ai_addr, ai->ai_addrlen);
        c->addrlens[c->naddrs++] = ai->ai_addrlen;
    }
    freeaddrinfo(res);
    if (c->naddrs == 0) {
        TPX_WARN("bootstrap: \"%s\" has no IPv4 or IPv6 address", host);
        conn_free(c);
        return TPX_ERR_UNREACHABLE;
    }
    if (strchr(host, ':') != NULL)
        snprintf(c->target, sizeof(c->target), "[%.255s]:%d", host, port);
    else
        snprintf(c->target, sizeof(c->target), "%.255s:%d", host, port);
    snprintf(c->peer, sizeof(c->peer), "%s", c->target);
    c->state = BS_BACKOFF;
    tpx_status_t st = connect_start(c);
    if (st < 0) {
        conn_free(c); /* connect_start closed nothing it kept: c->fd is -1 */
        return st;
    }
    *out = c;
    return TPX_OK;
}

/* ---- public: messages ---------------------------------------------------------- */

static tpx_status_t need_ready(const tpx_bs_conn_t *c)
{
    if (c->state == BS_READY)
        return TPX_OK;
    return c->state == BS_FAILED ? c->err : TPX_ERR_INVALID_STATE;
}

tpx_status_t tpx__bs_send(tpx_bs_conn_t *c, uint16_t type, const void *payload, uint32_t len)
{
    tpx_status_t st = need_ready(c);
    if (st != TPX_OK)
        return st;
    if (type < TPX_BS_TYPE_USER || len > TPX_BS_MAX_MSG || (payload == NULL && len > 0))
        return TPX_ERR_INVALID_ARG;
    if (c->out_len - c->out_off + TPX_BS_HDR_SIZE + len > TPX_BS_MAX_QUEUED)
        return TPX_ERR_NO_RESOURCE;
    if (out_append(c, type, payload, len) != TPX_OK)
        return TPX_ERR_NO_MEMORY;
    st = out_flush(c);
    return st < 0 ? st : TPX_OK;
}

tpx_status_t tpx__bs_flush(tpx_bs_conn_t *c)
{
    tpx_status_t st = need_ready(c);
    if (st != TPX_OK)
        return st;
    return out_flush(c);
}

tpx_status_t tpx__bs_recv(tpx_bs_conn_t *c, uint16_t *type, void *buf, uint32_t cap, uint32_t *len)
{
    tpx_status_t st = need_ready(c);
    if (st != TPX_OK)
        return st;
    if (buf == NULL && cap > 0)
        return TPX_ERR_INVALID_ARG;
    st = in_frame(c, cap);
    if (st == TPX_INPROGRESS && c->out_off < c->out_len) {
        tpx_status_t fst = out_flush(c);
        if (fst < 0)
            return fst;
    }
    if (st != TPX_OK)
        return st;
    if (c->h.len > cap) {
        /* The header was accepted by an earlier call with a larger cap. */
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent a %u-byte message (type %u), more than the %u expected",
                c->peer, c->h.len, c->h.type, cap);
        return c->err;
    }
    if (c->h.type < TPX_BS_TYPE_USER) {
        BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                "bootstrap: peer %s sent handshake message type %u after the handshake: dropped",
                c->peer, c->h.type);
        return c->err;
    }
    if (c->h.len > 0)
        memcpy(buf, c->in, c->h.len);
    *type = c->h.type;
    *len = c->h.len;
    in_reset(c);
    return TPX_OK;
}

/* Wait for `events` on the connection until the deadline; 0 when it passed. */
static int wait_events(tpx_bs_conn_t *c, short events, uint64_t deadline_ns)
{
    int ms = tpx__ms_left(deadline_ns);
    if (ms == 0)
        return 0;
    struct pollfd pfd = {.fd = c->fd, .events = events};
    (void)poll(&pfd, 1, ms);
    return 1;
}

tpx_status_t tpx__bs_send_wait(tpx_bs_conn_t *c, uint16_t type, const void *payload, uint32_t len,
                               uint64_t deadline_ns)
{
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = tpx__bs_send(c, type, payload, len);
    if (st < 0)
        return st;
    for (;;) {
        st = tpx__bs_flush(c);
        if (st != TPX_INPROGRESS)
            return st;
        if (!wait_events(c, POLLOUT, deadline_ns)) {
            TPX_WARN("bootstrap: peer %s did not take a %u-byte message within %.0f ms", c->peer,
                     len, ms_since(t0));
            return TPX_ERR_TIMED_OUT;
        }
    }
}

tpx_status_t tpx__bs_recv_wait(tpx_bs_conn_t *c, uint16_t type, void *buf, uint32_t cap,
                               uint32_t *len, uint64_t deadline_ns)
{
    uint64_t t0 = tpx__now_ns();
    for (;;) {
        uint16_t got_type = 0;
        tpx_status_t st = tpx__bs_recv(c, &got_type, buf, cap, len);
        if (st == TPX_OK) {
            if (got_type == type)
                return TPX_OK;
            BS_FAIL(c, TPX_ERR_PROTOCOL, TPX_LOG_WARN,
                    "bootstrap: peer %s sent message type %u where type %u was expected", c->peer,
                    got_type, type);
            return c->err;
        }
        if (st != TPX_INPROGRESS)
            return st;
        short ev = (short)(POLLIN | (c->out_off < c->out_len ? POLLOUT : 0));
        if (!wait_events(c, ev, deadline_ns)) {
            TPX_WARN("bootstrap: peer %s sent no message (type %u expected) within %.0f ms",
                     c->peer, type, ms_since(t0));
            return TPX_ERR_TIMED_OUT;
        }
    }
}

void tpx__bs_close(tpx_bs_conn_t *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0 && close(c->fd) != 0)
        TPX_WARN("bootstrap: peer %s: close failed: %s", c->peer, strerror(errno));
    conn_free(c);
}

/* ---- public: listen / accept ---------------------------------------------------- */

/* socket + bind + listen on one address; 0 or the errno of the step that failed. */
static int try_listen(const struct sockaddr *sa, socklen_t salen, int dual_stack, int *fd_out)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int one = 1, zero = 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (sa->sa_family == AF_INET6)
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, dual_stack ? &zero : &one, sizeof(int));
    if (bind(fd, sa, salen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    *fd_out = fd;
    return 0;
}

tpx_status_t tpx__bs_listen(const char *bind_addr, int port, int *fd_out, int *port_out)
{
    if (port < 0 || port > 65535 || fd_out == NULL) {
        TPX_ERROR("bootstrap: invalid listen port %d", port);
        return TPX_ERR_INVALID_ARG;
    }
    int fd = -1, e = 0;
    const char *what = bind_addr && *bind_addr ? bind_addr : "*";
    if (bind_addr == NULL || *bind_addr == '\0') {
        /* Any address: IPv6 dual-stack, or IPv4 where IPv6 is off. */
        struct sockaddr_in6 s6;
        memset(&s6, 0, sizeof(s6));
        s6.sin6_family = AF_INET6;
        s6.sin6_addr = in6addr_any;
        s6.sin6_port = htons((uint16_t)port);
        e = try_listen((struct sockaddr *)&s6, sizeof(s6), 1, &fd);
        if (e != 0 && e != EADDRINUSE) {
            struct sockaddr_in s4;
            memset(&s4, 0, sizeof(s4));
            s4.sin_family = AF_INET;
            s4.sin_addr.s_addr = htonl(INADDR_ANY);
            s4.sin_port = htons((uint16_t)port);
            e = try_listen((struct sockaddr *)&s4, sizeof(s4), 0, &fd);
        }
    } else {
        char portstr[8];
        snprintf(portstr, sizeof(portstr), "%d", port);
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
        int rc = getaddrinfo(bind_addr, portstr, &hints, &res);
        if (rc != 0) {
            TPX_ERROR("bootstrap: cannot resolve listen address \"%s\": %s", bind_addr,
                      rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
            return TPX_ERR_INVALID_ARG;
        }
        e = EAFNOSUPPORT;
        for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
            if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
                continue;
            e = try_listen(ai->ai_addr, ai->ai_addrlen, 0, &fd);
            if (e == 0 || e == EADDRINUSE)
                break;
        }
        freeaddrinfo(res);
    }
    if (e == EADDRINUSE) {
        TPX_ERROR("bootstrap port %d is busy (address %s; another process listens there)", port,
                  what);
        return TPX_ERR_ADDR_IN_USE;
    }
    if (e != 0) {
        TPX_ERROR("bootstrap: cannot listen on %s port %d: %s", what, port, strerror(e));
        return tpx__status_from_errno(e);
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int actual = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        actual = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    TPX_DEBUG("bootstrap: listening on %s port %d", what, actual);
    *fd_out = fd;
    if (port_out != NULL)
        *port_out = actual;
    return TPX_OK;
}

tpx_status_t tpx__bs_accept(int listen_fd, int *fd_out)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            *fd_out = fd;
            return TPX_OK;
        }
        int e = errno;
        switch (e) {
        case EINTR:
            continue;
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
        /* A connection that died before we took it, or a network error
         * accept(2) says to treat like EAGAIN: nothing to accept now. */
        case ECONNABORTED:
        case EPROTO:
        case ENETDOWN:
        case ENOPROTOOPT:
        case EHOSTDOWN:
        case ENONET:
        case EHOSTUNREACH:
        case ENETUNREACH:
            return TPX_INPROGRESS;
        case EMFILE:
        case ENFILE:
            TPX_WARN("bootstrap: cannot accept a connection: out of file descriptors");
            return TPX_ERR_NO_RESOURCE;
        default:
            TPX_WARN("bootstrap: accept failed: %s", strerror(e));
            return tpx__status_from_errno(e);
        }
    }
}
