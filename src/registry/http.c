/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http.c - the HTTP/1.1 client of the etcd metadata client (registry.h).
 *
 * It speaks just enough HTTP for etcd's JSON gateway: POST with a
 * Content-Length body on a keep-alive connection, and responses whose body
 * is delimited by Content-Length, by chunked transfer coding, or by the end
 * of the connection. Every byte it reads comes from the network, so every
 * length is checked before use: the head is at most TPX_REG_HEAD_MAX bytes,
 * a body at most the caller's bound, chunk sizes are parsed with overflow
 * checks, and a malformed response drops the connection. Plain sockets keep
 * libtpx free of libcurl (one dependency less to dlopen and version-match,
 * and etcd needs none of curl's features); https:// endpoints get their
 * TLS from tls.c, which loads OpenSSL's libssl only then.
 */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "registry.h"

/* ---- endpoints ---- */

/* Past a scheme at *s: 0 none, 1 plain, 2 TLS, -1 an unknown one. */
static int take_scheme(const char **s)
{
    static const struct {
        const char *p;
        int kind;
    } schemes[] = {{"etcd://", 1}, {"http://", 1}, {"https://", 2}};
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        size_t l = strlen(schemes[i].p);
        if (strncmp(*s, schemes[i].p, l) == 0) {
            *s += l;
            return schemes[i].kind;
        }
    }
    return 0;
}

int tpx__reg_parse_url(const char *url, tpx__reg_ep_t *eps, int max, int *n, char *why,
                       size_t why_len)
{
    *n = 0;
    if (url == NULL || url[0] == '\0') {
        snprintf(why, why_len, "no etcd endpoint given (TPX_METADATA=etcd://host:port)");
        return -1;
    }
    const char *s = url;
    int kind = -2; /* the first endpoint's scheme */
    while (*s != '\0') {
        int k = take_scheme(&s);
        const char *end = strchr(s, ',');
        size_t len = end != NULL ? (size_t)(end - s) : strlen(s);
        char item[300];
        if (k == 0 && memmem(s, len, "://", 3) != NULL) {
            snprintf(why, why_len,
                     "'%s': only etcd://, http:// and https:// endpoints are "
                     "supported",
                     url);
            return -1;
        }
        if (kind == -2)
            kind = k == 0 ? 1 : k;
        if (k != 0 && k != kind) {
            snprintf(why, why_len, "'%s': endpoints mix https:// and plain ones", url);
            return -1;
        }
        if (len == 0 || len >= sizeof(item)) {
            snprintf(why, why_len, "'%s': an empty or too long endpoint", url);
            return -1;
        }
        if (*n >= max) {
            snprintf(why, why_len, "'%s': more than %d endpoints", url, max);
            return -1;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        if (item[len - 1] == '/') /* etcd://host:port/ */
            item[--len] = '\0';
        const char *host = item, *port;
        char *colon;
        if (item[0] == '[') {
            char *rb = strchr(item, ']');
            if (rb == NULL || rb[1] != ':') {
                snprintf(why, why_len, "'%s': an IPv6 endpoint is [addr]:port", item);
                return -1;
            }
            *rb = '\0';
            host = item + 1;
            port = rb + 2;
        } else if ((colon = strrchr(item, ':')) != NULL) {
            *colon = '\0';
            port = colon + 1;
        } else {
            snprintf(why, why_len, "'%s': an endpoint is host:port", item);
            return -1;
        }
        char *pend;
        long pv = strtol(port, &pend, 10);
        if (port[0] == '\0' || *pend != '\0' || pv < 1 || pv > 65535 || host[0] == '\0' ||
            strlen(host) >= sizeof(eps[0].host)) {
            snprintf(why, why_len, "'%s': not host:port with a port in 1..65535", s);
            return -1;
        }
        snprintf(eps[*n].host, sizeof(eps[*n].host), "%.255s", host);
        snprintf(eps[*n].port, sizeof(eps[*n].port), "%ld", pv);
        eps[*n].tls = kind == 2;
        (*n)++;
        s += len;
        if (*s == ',')
            s++;
    }
    if (*n == 0) {
        snprintf(why, why_len, "'%s': no endpoint", url);
        return -1;
    }
    return 0;
}

/* ---- the response reader ---- */

/* Make at least `want` unparsed bytes available (want <= buffer size). */
static tpx_status_t rd_fill(tpx__http_rd_t *rd, size_t want, uint64_t deadline_ns)
{
    if (rd->len >= want)
        return TPX_OK;
    if (rd->off + want > sizeof(rd->buf)) {
        memmove(rd->buf, rd->buf + rd->off, rd->len);
        rd->off = 0;
    }
    while (rd->len < want) {
        size_t room = sizeof(rd->buf) - rd->off - rd->len;
        ssize_t got = rd->read(rd->ctx, rd->buf + rd->off + rd->len, room, deadline_ns);
        if (got == 0)
            return TPX_ERR_CONN_RESET;
        if (got < 0)
            return errno == ETIMEDOUT ? TPX_ERR_TIMED_OUT : TPX_ERR_CONN_RESET;
        if ((size_t)got > room)
            return TPX_ERR_INTERNAL;
        rd->len += (size_t)got;
    }
    return TPX_OK;
}

/* One line ending in CRLF (at most TPX_REG_HEAD_MAX - 1 bytes) into line[]
 * with a NUL, the CRLF consumed. */
static tpx_status_t rd_line(tpx__http_rd_t *rd, char *line, size_t cap, uint64_t deadline_ns)
{
    size_t scanned = 0;
    for (;;) {
        for (; scanned + 1 < rd->len; scanned++) {
            const unsigned char *b = rd->buf + rd->off;
            if (b[scanned] == '\r' && b[scanned + 1] == '\n') {
                if (scanned >= cap)
                    return TPX_ERR_PROTOCOL;
                memcpy(line, b, scanned);
                line[scanned] = '\0';
                if (memchr(line, '\0', scanned) != NULL)
                    return TPX_ERR_PROTOCOL;
                rd->off += scanned + 2;
                rd->len -= scanned + 2;
                return TPX_OK;
            }
        }
        if (rd->len >= cap || rd->len >= sizeof(rd->buf))
            return TPX_ERR_PROTOCOL; /* a line longer than we take */
        tpx_status_t st = rd_fill(rd, rd->len + 1, deadline_ns);
        if (st != TPX_OK)
            return st;
    }
}

/* Append n body bytes from the reader to *body (bounded by max). */
static tpx_status_t rd_body(tpx__http_rd_t *rd, size_t n, char **body, size_t *blen, size_t *bcap,
                            size_t max, uint64_t deadline_ns)
{
    if (n > max || *blen > max - n)
        return TPX_ERR_PROTOCOL;
    if (*blen + n + 1 > *bcap) {
        size_t cap = *bcap ? *bcap : 4096;
        while (cap < *blen + n + 1)
            cap *= 2;
        char *nb = realloc(*body, cap);
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        *body = nb;
        *bcap = cap;
    }
    while (n > 0) {
        if (rd->len == 0) {
            tpx_status_t st = rd_fill(rd, 1, deadline_ns);
            if (st != TPX_OK)
                return st;
        }
        size_t take = TPX_MIN(n, rd->len);
        memcpy(*body + *blen, rd->buf + rd->off, take);
        *blen += take;
        rd->off += take;
        rd->len -= take;
        n -= take;
    }
    (*body)[*blen] = '\0';
    return TPX_OK;
}

static int hdr_is(const char *line, const char *name, const char **value)
{
    size_t l = strlen(name);
    if (strncasecmp(line, name, l) != 0 || line[l] != ':')
        return 0;
    const char *v = line + l + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    *value = v;
    return 1;
}

static int parse_dec(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; isdigit((unsigned char)s[i]); i++) {
        if (v > (max - (uint64_t)(s[i] - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    if (i == 0 || s[i] != '\0')
        return -1;
    *out = v;
    return 0;
}

/* A chunk-size line: hex digits, then optional extensions after ';'. */
static int parse_chunk_size(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; isxdigit((unsigned char)s[i]); i++) {
        int d =
            isdigit((unsigned char)s[i]) ? s[i] - '0' : (tolower((unsigned char)s[i]) - 'a' + 10);
        if (v > (max - (uint64_t)d) / 16)
            return -1;
        v = v * 16 + (uint64_t)d;
    }
    while (s[i] == ' ' || s[i] == '\t')
        i++;
    if (i == 0 || (s[i] != '\0' && s[i] != ';'))
        return -1;
    *out = v;
    return 0;
}

/* The status line and headers; what the body's framing is. */
typedef struct {
    int status, keep_alive, chunked, have_len;
    uint64_t clen;
} http_head_t;

static tpx_status_t read_head(tpx__http_rd_t *rd, uint64_t deadline_ns, http_head_t *h)
{
    char line[1024];
    tpx_status_t st;
    memset(h, 0, sizeof(*h));
    if ((st = rd_line(rd, line, sizeof(line), deadline_ns)) != TPX_OK)
        return st;
    /* "HTTP/1.1 200 OK" */
    if (strncmp(line, "HTTP/1.", 7) != 0 || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
        !isdigit((unsigned char)line[9]) || !isdigit((unsigned char)line[10]) ||
        !isdigit((unsigned char)line[11]) || (line[12] != ' ' && line[12] != '\0'))
        return TPX_ERR_PROTOCOL;
    h->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
    if (h->status < 100)
        return TPX_ERR_PROTOCOL;
    h->keep_alive = line[7] == '1';
    size_t head = strlen(line);
    for (;;) {
        if ((st = rd_line(rd, line, sizeof(line), deadline_ns)) != TPX_OK)
            return st;
        head += strlen(line) + 2;
        if (head > TPX_REG_HEAD_MAX)
            return TPX_ERR_PROTOCOL;
        if (line[0] == '\0')
            break;
        const char *v;
        if (hdr_is(line, "Content-Length", &v)) {
            uint64_t x;
            if (parse_dec(v, UINT64_MAX, &x) != 0 || (h->have_len && x != h->clen))
                return TPX_ERR_PROTOCOL;
            h->clen = x;
            h->have_len = 1;
        } else if (hdr_is(line, "Transfer-Encoding", &v)) {
            if (strcasecmp(v, "chunked") != 0)
                return TPX_ERR_PROTOCOL; /* no other coding is asked for */
            h->chunked = 1;
        } else if (hdr_is(line, "Connection", &v)) {
            if (strcasecmp(v, "close") == 0)
                h->keep_alive = 0;
            else if (strcasecmp(v, "keep-alive") == 0)
                h->keep_alive = 1;
        }
    }
    if (h->chunked && h->have_len)
        return TPX_ERR_PROTOCOL; /* ambiguous framing: refuse it */
    if (h->status >= 100 && h->status < 200)
        return TPX_ERR_PROTOCOL; /* no Expect: was sent, so no interim answer is due */
    return TPX_OK;
}

/* One chunk of a chunked body appended to *body (bounded by max); *last
 * set at the terminating zero-size chunk (its trailers consumed). */
static tpx_status_t read_chunk(tpx__http_rd_t *rd, char **body, size_t *blen, size_t *bcap,
                               size_t max, uint64_t deadline_ns, int *last)
{
    char line[1024];
    uint64_t n;
    tpx_status_t st;
    *last = 0;
    if ((st = rd_line(rd, line, sizeof(line), deadline_ns)) != TPX_OK)
        return st;
    if (parse_chunk_size(line, max, &n) != 0)
        return TPX_ERR_PROTOCOL;
    if (n == 0) {
        for (size_t trailers = 0;; trailers += strlen(line) + 2) { /* trailers, then CRLF */
            if ((st = rd_line(rd, line, sizeof(line), deadline_ns)) != TPX_OK)
                return st;
            if (line[0] == '\0')
                break;
            if (trailers > TPX_REG_HEAD_MAX)
                return TPX_ERR_PROTOCOL;
        }
        *last = 1;
        return TPX_OK;
    }
    if ((st = rd_body(rd, (size_t)n, body, blen, bcap, max, deadline_ns)) != TPX_OK)
        return st;
    if ((st = rd_line(rd, line, sizeof(line), deadline_ns)) != TPX_OK)
        return st;
    return line[0] == '\0' ? TPX_OK : TPX_ERR_PROTOCOL;
}

tpx_status_t tpx__http_read_response(tpx__http_rd_t *rd, uint64_t deadline_ns, size_t max_body,
                                     tpx__http_resp_t *resp)
{
    tpx_status_t st;
    http_head_t h;
    memset(resp, 0, sizeof(*resp));
    if ((st = read_head(rd, deadline_ns, &h)) != TPX_OK)
        return st;
    int status = h.status, keep_alive = h.keep_alive, chunked = h.chunked, have_len = h.have_len;
    uint64_t clen = h.clen;
    char *body = NULL;
    size_t blen = 0, bcap = 0;
    if (status == 204 || status == 304) {
        /* no body */
    } else if (chunked) {
        for (int last = 0; !last;)
            if ((st = read_chunk(rd, &body, &blen, &bcap, max_body, deadline_ns, &last)) != TPX_OK)
                goto fail;
    } else if (have_len) {
        if (clen > max_body) {
            st = TPX_ERR_PROTOCOL;
            goto fail;
        }
        if ((st = rd_body(rd, (size_t)clen, &body, &blen, &bcap, max_body, deadline_ns)) != TPX_OK)
            goto fail;
    } else {
        /* delimited by the end of the connection */
        keep_alive = 0;
        for (;;) {
            if (rd->len == 0) {
                st = rd_fill(rd, 1, deadline_ns);
                if (st == TPX_ERR_CONN_RESET)
                    break;
                if (st != TPX_OK)
                    goto fail;
            }
            if ((st = rd_body(rd, rd->len, &body, &blen, &bcap, max_body, deadline_ns)) != TPX_OK)
                goto fail;
        }
    }
    if (body == NULL && (body = calloc(1, 1)) == NULL)
        return TPX_ERR_NO_MEMORY;
    resp->status = status;
    resp->keep_alive = keep_alive;
    resp->body = body;
    resp->body_len = blen;
    return TPX_OK;
fail:
    free(body);
    return st;
}

/* ---- the connection ---- */

static ssize_t sock_read(void *ctx, void *buf, size_t len, uint64_t deadline_ns)
{
    int fd = *(int *)ctx;
    /* At or past the deadline the socket is still looked at once (a
     * watch with timeout 0 takes what has arrived, not nothing). */
    for (int last = 0; !last;) {
        int ms = tpx__ms_left(deadline_ns);
        last = ms <= 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, last ? 0 : ms);
        if (r < 0 && errno == EINTR) {
            last = 0;
            continue;
        }
        if (r < 0)
            return -1;
        if (r == 0)
            continue; /* the deadline check above ends it */
        ssize_t got = recv(fd, buf, len, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        return got;
    }
    errno = ETIMEDOUT;
    return -1;
}

static ssize_t tls_read(void *ctx, void *buf, size_t len, uint64_t deadline_ns)
{
    return tpx__tls_read(*(tpx__tls_t **)ctx, buf, len, deadline_ns);
}

void tpx__http_init(tpx__http_conn_t *c, const tpx__reg_ep_t *eps, int neps)
{
    memset(c, 0, sizeof(*c));
    memcpy(c->eps, eps, sizeof(*eps) * (size_t)TPX_MIN(neps, TPX_REG_MAX_ENDPOINTS));
    c->neps = TPX_MIN(neps, TPX_REG_MAX_ENDPOINTS);
    c->fd = -1;
}

void tpx__http_close(tpx__http_conn_t *c)
{
    tpx__tls_close(c->tls);
    c->tls = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->rd.off = c->rd.len = 0;
    c->chunk_stage = 0;
    c->chunk_left = 0;
}

/* ---- name resolution under the deadline ---- */

/* getaddrinfo() has no timeout (a name whose DNS server is gone takes the
 * resolver's retries: tens of seconds), so a host name is resolved on a
 * detached thread that the caller waits for until its deadline; whoever
 * lets go of the request last frees it (a late answer is dropped). An
 * address literal is taken at once, on the caller's thread. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs, done, rc;
    char host[sizeof(((tpx__reg_ep_t *)0)->host)], port[sizeof(((tpx__reg_ep_t *)0)->port)];
    struct addrinfo *res;
} gai_req_t;

static void gai_put(gai_req_t *q)
{
    pthread_mutex_lock(&q->mu);
    int last = --q->refs == 0;
    pthread_mutex_unlock(&q->mu);
    if (!last)
        return;
    if (q->res != NULL)
        freeaddrinfo(q->res);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static void *gai_main(void *arg)
{
    gai_req_t *q = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(q->host, q->port, &hints, &res);
    pthread_mutex_lock(&q->mu);
    q->rc = rc;
    q->res = res;
    q->done = 1;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    gai_put(q);
    return NULL;
}

static int resolve(const tpx__reg_ep_t *ep, uint64_t deadline_ns, struct addrinfo **out, char *why,
                   size_t why_len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    if (getaddrinfo(ep->host, ep->port, &hints, out) == 0)
        return 0; /* an address: no lookup */
    gai_req_t *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        snprintf(why, why_len, "etcd %.100s:%s: out of memory", ep->host, ep->port);
        return -1;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    memcpy(q->host, ep->host, sizeof(q->host));
    memcpy(q->port, ep->port, sizeof(q->port));
    q->refs = 2;
    pthread_attr_t ta;
    pthread_t t;
    pthread_attr_init(&ta);
    pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
    int prc = pthread_create(&t, &ta, gai_main, q);
    pthread_attr_destroy(&ta);
    if (prc != 0) {
        q->refs = 1;
        gai_put(q);
        snprintf(why, why_len, "etcd %.100s:%s: cannot start a resolver thread: %s", ep->host,
                 ep->port, strerror(prc));
        return -1;
    }
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    pthread_mutex_lock(&q->mu);
    while (!q->done && pthread_cond_timedwait(&q->cv, &q->mu, &ts) == 0)
        ;
    int done = q->done, rc = q->rc;
    if (done) {
        *out = q->res;
        q->res = NULL;
    }
    pthread_mutex_unlock(&q->mu);
    gai_put(q);
    if (!done) {
        snprintf(why, why_len, "etcd %.100s:%s: name resolution timed out", ep->host, ep->port);
        return -1;
    }
    if (rc != 0) {
        if (*out != NULL)
            freeaddrinfo(*out);
        snprintf(why, why_len, "etcd %.100s:%s: %s", ep->host, ep->port, gai_strerror(rc));
        return -1;
    }
    return 0;
}

/* A non-blocking connect to one endpoint, bounded by the deadline (name
 * resolution included). */
static int dial(const tpx__reg_ep_t *ep, uint64_t deadline_ns, char *why, size_t why_len)
{
    struct addrinfo *res = NULL;
    if (resolve(ep, deadline_ns, &res, why, why_len) != 0)
        return -1;
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            err = errno;
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        int r;
        do
            r = poll(&pf, 1, tpx__ms_left(deadline_ns));
        while (r < 0 && errno == EINTR);
        socklen_t sl = sizeof(err);
        if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0 || err != 0) {
            if (r == 0)
                err = ETIMEDOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(why, why_len, "etcd %.100s:%s: %s", ep->host, ep->port, strerror(err ? err : EIO));
    return fd;
}

static int send_all(int fd, const char *p, size_t n, uint64_t deadline_ns)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN)
            return -1;
        int ms = tpx__ms_left(deadline_ns);
        if (ms <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (poll(&pf, 1, ms) < 0 && errno != EINTR)
            return -1;
    }
    return 0;
}

/* Dial the current endpoint and read from it; on failure (last_err says
 * why) the next endpoint becomes current. 0 or -1. */
static int conn_dial(tpx__http_conn_t *c, uint64_t deadline_ns)
{
    const tpx__reg_ep_t *ep = &c->eps[c->cur];
    c->fd = dial(ep, deadline_ns, c->last_err, sizeof(c->last_err));
    if (c->fd >= 0 && ep->tls) {
        char why[256] = "no TLS configuration";
        c->tls = c->tls_ctx != NULL
                     ? tpx__tls_connect(c->tls_ctx, c->fd, ep->host, deadline_ns, why, sizeof(why))
                     : NULL;
        if (c->tls == NULL) {
            snprintf(c->last_err, sizeof(c->last_err), "etcd %.60s:%s: %.180s", ep->host, ep->port,
                     why);
            tpx__http_close(c);
        }
    }
    if (c->fd < 0) {
        c->cur = (c->cur + 1) % c->neps;
        return -1;
    }
    c->rd.read = c->tls != NULL ? tls_read : sock_read;
    c->rd.ctx = c->tls != NULL ? (void *)&c->tls : (void *)&c->fd;
    c->rd.off = c->rd.len = 0;
    return 0;
}

/* With TLS 1.3 a server that refuses the client's certificate (or asks for
 * one it did not get) says so only after the client's handshake ended: the
 * first request then finds the connection closed. Say what it likely was. */
static const char *tls_hint(const tpx__http_conn_t *c, int fresh)
{
    return c->tls != NULL && fresh ? " (over TLS: did etcd refuse this client's certificate, or "
                                     "want one? TPX_METADATA_TLS_CERT)"
                                   : "";
}

/* "POST path" with a JSON body to the current endpoint (keep_alive: ask
 * for the connection to stay open). TPX_ERR_INVALID_ARG if the head does
 * not fit, TPX_ERR_CONN_RESET (last_err says why) if a send failed. */
static tpx_status_t send_request(tpx__http_conn_t *c, const char *path, const char *body,
                                 int keep_alive, int fresh, uint64_t deadline_ns)
{
    const tpx__reg_ep_t *ep = &c->eps[c->cur];
    size_t blen = strlen(body);
    char head[2048];
    int hl =
        snprintf(head, sizeof(head),
                 "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n%s%s%s%s\r\n",
                 path, ep->host, ep->port, blen, keep_alive ? "Connection: keep-alive\r\n" : "",
                 c->token[0] ? "Authorization: " : "", c->token, c->token[0] ? "\r\n" : "");
    if (hl < 0 || (size_t)hl >= sizeof(head))
        return TPX_ERR_INVALID_ARG;
    int bad = c->tls != NULL ? tpx__tls_write(c->tls, head, (size_t)hl, deadline_ns) != 0 ||
                                   tpx__tls_write(c->tls, body, blen, deadline_ns) != 0
                             : send_all(c->fd, head, (size_t)hl, deadline_ns) != 0 ||
                                   send_all(c->fd, body, blen, deadline_ns) != 0;
    if (bad) {
        snprintf(c->last_err, sizeof(c->last_err), "etcd %.100s:%s: send: %s%s", ep->host, ep->port,
                 strerror(errno), tls_hint(c, fresh));
        return TPX_ERR_CONN_RESET;
    }
    return TPX_OK;
}

tpx_status_t tpx__http_post(tpx__http_conn_t *c, const char *path, const char *body,
                            uint64_t deadline_ns, tpx__http_resp_t *resp)
{
    tpx_status_t st = TPX_ERR_UNREACHABLE;
    /* Each endpoint gets a try, and a kept-alive connection that the server
     * closed meanwhile one retry on a fresh connection. */
    for (int attempt = 0; attempt < 2 * c->neps + 1; attempt++) {
        if (tpx__ms_left(deadline_ns) <= 0) {
            if (c->last_err[0] == '\0')
                snprintf(c->last_err, sizeof(c->last_err), "timed out");
            return TPX_ERR_TIMED_OUT;
        }
        int fresh = 0;
        if (c->fd < 0) {
            if (conn_dial(c, deadline_ns) != 0) {
                st = TPX_ERR_UNREACHABLE;
                continue;
            }
            fresh = 1;
        }
        const tpx__reg_ep_t *ep = &c->eps[c->cur];
        c->rd.off = c->rd.len = 0; /* nothing may be pending between requests */
        tpx_status_t sst = send_request(c, path, body, 1, fresh, deadline_ns);
        if (sst == TPX_ERR_INVALID_ARG)
            return sst;
        if (sst != TPX_OK) {
            tpx__http_close(c);
            if (!fresh)
                continue; /* a stale keep-alive connection: once more, fresh */
            c->cur = (c->cur + 1) % c->neps;
            st = TPX_ERR_CONN_RESET;
            continue;
        }
        st = tpx__http_read_response(&c->rd, deadline_ns, TPX_REG_BODY_MAX, resp);
        if (st == TPX_OK) {
            if (!resp->keep_alive)
                tpx__http_close(c);
            c->last_err[0] = '\0';
            return TPX_OK;
        }
        snprintf(c->last_err, sizeof(c->last_err), "etcd %.100s:%s: %s%s", ep->host, ep->port,
                 st == TPX_ERR_PROTOCOL ? "malformed HTTP response" : tpx_status_string(st),
                 st == TPX_ERR_CONN_RESET ? tls_hint(c, fresh) : "");
        tpx__http_close(c);
        if (st == TPX_ERR_CONN_RESET && !fresh)
            continue;
        if (st == TPX_ERR_NO_MEMORY)
            return st;
        c->cur = (c->cur + 1) % c->neps;
    }
    return st;
}

/* ---- streams (etcd's watch) ---- */

/* A stream's response head: 200 and chunked, or an error (last_err says
 * which). */
static tpx_status_t stream_head(tpx__http_conn_t *c, uint64_t deadline_ns)
{
    const tpx__reg_ep_t *ep = &c->eps[c->cur];
    http_head_t h;
    tpx_status_t st = read_head(&c->rd, deadline_ns, &h);
    if (st != TPX_OK) {
        snprintf(c->last_err, sizeof(c->last_err), "etcd %.100s:%s: %s", ep->host, ep->port,
                 st == TPX_ERR_PROTOCOL ? "malformed HTTP response" : tpx_status_string(st));
        return st;
    }
    if (h.status != 200 || !h.chunked) {
        snprintf(c->last_err, sizeof(c->last_err),
                 "etcd %.100s:%s: a stream answered with HTTP status %d%s", ep->host, ep->port,
                 h.status, h.chunked ? "" : ", not chunked");
        return TPX_ERR_PROTOCOL;
    }
    return TPX_OK;
}

tpx_status_t tpx__http_stream_open(tpx__http_conn_t *c, const char *path, const char *body,
                                   uint64_t deadline_ns)
{
    tpx_status_t st = TPX_ERR_UNREACHABLE;
    tpx__http_close(c);
    for (int attempt = 0; attempt < c->neps; attempt++) {
        if (tpx__ms_left(deadline_ns) <= 0)
            return TPX_ERR_TIMED_OUT;
        if (conn_dial(c, deadline_ns) != 0) {
            st = TPX_ERR_UNREACHABLE;
            continue;
        }
        st = send_request(c, path, body, 0, 1, deadline_ns);
        if (st == TPX_ERR_INVALID_ARG)
            return st;
        if (st == TPX_OK)
            st = stream_head(c, deadline_ns);
        if (st == TPX_OK) {
            c->last_err[0] = '\0';
            return TPX_OK;
        }
        tpx__http_close(c);
        c->cur = (c->cur + 1) % c->neps;
    }
    return st;
}

tpx_status_t tpx__http_stream_next(tpx__http_conn_t *c, uint64_t deadline_ns, char **buf,
                                   size_t *len, size_t *cap, size_t max)
{
    /* The caller's deadline bounds every byte: a chunk that is still
     * coming when it passes stays where it is (its size line buffered, or
     * the count of its bytes still due), and the next call goes on from
     * there. A server that sends a byte now and then can make a call wait
     * only until its deadline, not for as long as it keeps sending. */
    char line[1024];
    tpx_status_t st = TPX_OK;
    if (c->fd < 0)
        return TPX_ERR_CONN_RESET;
    for (;;) {
        if (c->chunk_stage == 0) { /* the size line */
            uint64_t n;
            if ((st = rd_line(&c->rd, line, sizeof(line), deadline_ns)) != TPX_OK)
                break;
            if (parse_chunk_size(line, max, &n) != 0 || n > max - *len) {
                st = TPX_ERR_PROTOCOL;
                break;
            }
            if (n == 0) {
                st = TPX_ERR_CONN_RESET; /* the server ended the stream */
                break;
            }
            c->chunk_left = n;
            c->chunk_stage = 1;
        }
        if (c->chunk_stage == 1) { /* its bytes */
            while (c->chunk_left > 0) {
                if (c->rd.len == 0 && (st = rd_fill(&c->rd, 1, deadline_ns)) != TPX_OK)
                    goto out;
                size_t take = (size_t)TPX_MIN((uint64_t)c->rd.len, c->chunk_left);
                if ((st = rd_body(&c->rd, take, buf, len, cap, max, deadline_ns)) != TPX_OK)
                    goto out;
                c->chunk_left -= take;
            }
            c->chunk_stage = 2;
        }
        /* the CRLF that ends it */
        if ((st = rd_line(&c->rd, line, sizeof(line), deadline_ns)) != TPX_OK)
            break;
        if (line[0] != '\0') {
            st = TPX_ERR_PROTOCOL;
            break;
        }
        c->chunk_stage = 0;
        return TPX_OK;
    }
out:
    if (st != TPX_ERR_TIMED_OUT)
        tpx__http_close(c);
    return st;
}
