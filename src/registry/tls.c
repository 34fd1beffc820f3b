/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tls.c - TLS to etcd, from OpenSSL's libssl loaded at run time
 * (registry.h). Its one job: hand the HTTP client (http.c) an encrypted,
 * authenticated byte stream on a socket it dialed, under the caller's
 * deadline.
 *
 * libssl.so.3 is dlopen'ed on first use and a dozen of its functions are
 * resolved by name with their documented prototypes (and libcrypto's few
 * through the same handle, which searches libssl's dependencies), so
 * libtpx keeps no link to it and needs it only where a registry speaks
 * https. The socket stays non-blocking: every OpenSSL call that wants to
 * read or write more returns at once and the wait is a poll() bounded by
 * the deadline, as for plain sockets. The server's certificate must chain
 * to the configured CA (or the system's) and name the endpoint (its DNS
 * name or IP address); TLS 1.2 is the least version taken. OpenSSL writes
 * to the socket with write(), which raises SIGPIPE when the peer is gone:
 * each call blocks SIGPIPE in its thread and takes back one it caused, so
 * a process that did not ignore SIGPIPE is not killed by an etcd that
 * closed (plain sockets use MSG_NOSIGNAL for the same reason).
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/util.h"
#include "registry.h"

/* OpenSSL's constants (ssl.h, tls1.h, x509_vfy.h: stable ABI). */
#define SSL_VERIFY_PEER_                1
#define SSL_FILETYPE_PEM_               1
#define SSL_ERROR_SSL_                  1
#define SSL_ERROR_WANT_READ_            2
#define SSL_ERROR_WANT_WRITE_           3
#define SSL_ERROR_SYSCALL_              5
#define SSL_ERROR_ZERO_RETURN_          6
#define SSL_CTRL_SET_TLSEXT_HOSTNAME_   55
#define SSL_CTRL_SET_MIN_PROTO_VERSION_ 123
#define TLSEXT_NAMETYPE_host_name_      0
#define TLS1_2_VERSION_                 0x0303
#define X509_V_OK_                      0

static struct {
    void *dl;
    const void *(*client_method)(void);
    void *(*ctx_new)(const void *method);
    void (*ctx_free)(void *ctx);
    void (*ctx_set_verify)(void *ctx, int mode, void *cb);
    int (*ctx_load_verify_locations)(void *ctx, const char *file, const char *dir);
    int (*ctx_set_default_verify_paths)(void *ctx);
    int (*ctx_use_chain_file)(void *ctx, const char *file);
    int (*ctx_use_key_file)(void *ctx, const char *file, int type);
    int (*ctx_check_key)(const void *ctx);
    long (*ctx_ctrl)(void *ctx, int cmd, long larg, void *parg);
    void *(*ssl_new)(void *ctx);
    void (*ssl_free)(void *ssl);
    int (*set_fd)(void *ssl, int fd);
    long (*ssl_ctrl)(void *ssl, int cmd, long larg, void *parg);
    int (*set1_host)(void *ssl, const char *host);
    void *(*get0_param)(void *ssl);
    int (*param_set1_ip_asc)(void *param, const char *ip);
    int (*connect)(void *ssl);
    int (*read)(void *ssl, void *buf, int num);
    int (*write)(void *ssl, const void *buf, int num);
    int (*get_error)(const void *ssl, int ret);
    int (*shutdown)(void *ssl);
    long (*get_verify_result)(const void *ssl);
    const char *(*verify_string)(long n);
    unsigned long (*err_get)(void);
    void (*err_string)(unsigned long e, char *buf, size_t len);
    void (*err_clear)(void);
    int ok;
    char why[160];
} ossl;

static pthread_once_t ossl_once = PTHREAD_ONCE_INIT;

static void ossl_load(void)
{
    static const char *const names[] = {"libssl.so.3", "libssl.so"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && ossl.dl == NULL; i++)
        ossl.dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (ossl.dl == NULL) {
        snprintf(ossl.why, sizeof(ossl.why),
                 "https:// needs OpenSSL's libssl.so.3 (Debian: libssl3), which is not installed");
        return;
    }
    struct {
        void *slot;
        const char *name;
    } syms[] = {
        {&ossl.client_method, "TLS_client_method"},
        {&ossl.ctx_new, "SSL_CTX_new"},
        {&ossl.ctx_free, "SSL_CTX_free"},
        {&ossl.ctx_set_verify, "SSL_CTX_set_verify"},
        {&ossl.ctx_load_verify_locations, "SSL_CTX_load_verify_locations"},
        {&ossl.ctx_set_default_verify_paths, "SSL_CTX_set_default_verify_paths"},
        {&ossl.ctx_use_chain_file, "SSL_CTX_use_certificate_chain_file"},
        {&ossl.ctx_use_key_file, "SSL_CTX_use_PrivateKey_file"},
        {&ossl.ctx_check_key, "SSL_CTX_check_private_key"},
        {&ossl.ctx_ctrl, "SSL_CTX_ctrl"},
        {&ossl.ssl_new, "SSL_new"},
        {&ossl.ssl_free, "SSL_free"},
        {&ossl.set_fd, "SSL_set_fd"},
        {&ossl.ssl_ctrl, "SSL_ctrl"},
        {&ossl.set1_host, "SSL_set1_host"},
        {&ossl.get0_param, "SSL_get0_param"},
        {&ossl.param_set1_ip_asc, "X509_VERIFY_PARAM_set1_ip_asc"},
        {&ossl.connect, "SSL_connect"},
        {&ossl.read, "SSL_read"},
        {&ossl.write, "SSL_write"},
        {&ossl.get_error, "SSL_get_error"},
        {&ossl.shutdown, "SSL_shutdown"},
        {&ossl.get_verify_result, "SSL_get_verify_result"},
        {&ossl.verify_string, "X509_verify_cert_error_string"},
        {&ossl.err_get, "ERR_get_error"},
        {&ossl.err_string, "ERR_error_string_n"},
        {&ossl.err_clear, "ERR_clear_error"},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        void *f = dlsym(ossl.dl, syms[i].name);
        if (f == NULL) {
            snprintf(ossl.why, sizeof(ossl.why), "libssl lacks %s (OpenSSL 1.1 or 3 is needed)",
                     syms[i].name);
            return;
        }
        memcpy(syms[i].slot, &f, sizeof(f));
    }
    ossl.ok = 1;
}

/* The newest OpenSSL error of this thread, or `dflt`. */
static void last_error(char *why, size_t why_len, const char *what, const char *dflt)
{
    unsigned long e = ossl.err_get(), next;
    while ((next = ossl.err_get()) != 0) /* the first is the root cause; keep it */
        ;
    char buf[256] = "";
    if (e != 0)
        ossl.err_string(e, buf, sizeof(buf));
    snprintf(why, why_len, "%s: %s", what, e != 0 ? buf : dflt);
}

/* SIGPIPE blocked in this thread while OpenSSL may write (as libpq does). */
typedef struct {
    sigset_t old;
    int pending; /* one was pending before: not ours to take */
} pipe_guard_t;

static void pipe_block(pipe_guard_t *g)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    g->pending = sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &g->old);
}

static void pipe_unblock(pipe_guard_t *g)
{
    sigset_t set, pend;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    if (!g->pending && sigpending(&pend) == 0 && sigismember(&pend, SIGPIPE)) {
        struct timespec zero = {0, 0};
        int saved = errno;
        (void)sigtimedwait(&set, NULL, &zero);
        errno = saved;
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

struct tpx__tls_ctx {
    void *ctx;
};

struct tpx__tls {
    void *ssl;
    int fd; /* not owned */
};

tpx__tls_ctx_t *tpx__tls_ctx_new(const char *ca, const char *cert, const char *key, char *why,
                                 size_t why_len)
{
    pthread_once(&ossl_once, ossl_load);
    if (!ossl.ok) {
        snprintf(why, why_len, "%s", ossl.why);
        return NULL;
    }
    if ((cert[0] != '\0') != (key[0] != '\0')) {
        snprintf(why, why_len,
                 "a client certificate needs its key and a key its certificate "
                 "(TPX_METADATA_TLS_CERT and TPX_METADATA_TLS_KEY)");
        return NULL;
    }
    ossl.err_clear();
    tpx__tls_ctx_t *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->ctx = ossl.ctx_new(ossl.client_method())) == NULL) {
        snprintf(why, why_len, "cannot create a TLS context");
        free(t);
        return NULL;
    }
    ossl.ctx_set_verify(t->ctx, SSL_VERIFY_PEER_, NULL);
    if (ossl.ctx_ctrl(t->ctx, SSL_CTRL_SET_MIN_PROTO_VERSION_, TLS1_2_VERSION_, NULL) != 1) {
        last_error(why, why_len, "TLS 1.2", "cannot be required");
        goto fail;
    }
    if (ca[0] != '\0' ? ossl.ctx_load_verify_locations(t->ctx, ca, NULL) != 1
                      : ossl.ctx_set_default_verify_paths(t->ctx) != 1) {
        last_error(why, why_len, ca[0] != '\0' ? ca : "the system's CA certificates",
                   "cannot be loaded");
        goto fail;
    }
    if (cert[0] != '\0' && (ossl.ctx_use_chain_file(t->ctx, cert) != 1 ||
                            ossl.ctx_use_key_file(t->ctx, key, SSL_FILETYPE_PEM_) != 1 ||
                            ossl.ctx_check_key(t->ctx) != 1)) {
        last_error(why, why_len, cert, "the certificate or its key cannot be loaded");
        goto fail;
    }
    return t;
fail:
    tpx__tls_ctx_free(t);
    return NULL;
}

void tpx__tls_ctx_free(tpx__tls_ctx_t *t)
{
    if (t == NULL)
        return;
    ossl.ctx_free(t->ctx);
    free(t);
}

/* Wait until fd is ready for what OpenSSL asked (err), by the deadline.
 * 0, or -1 with errno (ETIMEDOUT). */
static int tls_wait(int fd, int err, uint64_t deadline_ns, int *last)
{
    int ms = tpx__ms_left(deadline_ns);
    if (*last) {
        errno = ETIMEDOUT;
        return -1;
    }
    *last = ms <= 0; /* at the deadline the socket is looked at once more */
    struct pollfd pf = {.fd = fd, .events = err == SSL_ERROR_WANT_WRITE_ ? POLLOUT : POLLIN};
    int r;
    do
        r = poll(&pf, 1, ms > 0 ? ms : 0);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if (r == 0 && *last) {
        errno = ETIMEDOUT;
        return -1;
    }
    return 0;
}

static tpx__tls_t *tls_connect(tpx__tls_ctx_t *ctx, int fd, const char *host, uint64_t deadline_ns,
                               char *why, size_t why_len)
{
    ossl.err_clear();
    tpx__tls_t *t = calloc(1, sizeof(*t));
    if (t == NULL || (t->ssl = ossl.ssl_new(ctx->ctx)) == NULL || ossl.set_fd(t->ssl, fd) != 1) {
        snprintf(why, why_len, "cannot create a TLS session");
        goto fail;
    }
    t->fd = fd;
    /* The certificate must name the endpoint: an address literal as an IP
     * address, anything else as a DNS name (also sent as SNI). */
    unsigned char a[16];
    int literal = inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
    if (literal ? ossl.param_set1_ip_asc(ossl.get0_param(t->ssl), host) != 1
                : ossl.set1_host(t->ssl, host) != 1 ||
                      ossl.ssl_ctrl(t->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME_,
                                    TLSEXT_NAMETYPE_host_name_, (void *)host) != 1) {
        snprintf(why, why_len, "cannot ask for a certificate naming %s", host);
        goto fail;
    }
    for (int last = 0;;) {
        int rc = ossl.connect(t->ssl);
        if (rc == 1)
            return t;
        int err = ossl.get_error(t->ssl, rc);
        if (err == SSL_ERROR_WANT_READ_ || err == SSL_ERROR_WANT_WRITE_) {
            if (tls_wait(fd, err, deadline_ns, &last) == 0)
                continue;
            snprintf(why, why_len, "TLS handshake: %s", strerror(errno));
            goto fail;
        }
        long v = ossl.get_verify_result(t->ssl);
        if (v != X509_V_OK_)
            snprintf(why, why_len, "TLS: the server's certificate is refused: %s",
                     ossl.verify_string(v));
        else
            last_error(why, why_len, "TLS handshake",
                       err == SSL_ERROR_SYSCALL_ ? "the server closed the connection" : "failed");
        goto fail;
    }
fail:
    if (t != NULL && t->ssl != NULL)
        ossl.ssl_free(t->ssl);
    free(t);
    return NULL;
}

static ssize_t tls_read(tpx__tls_t *t, void *buf, size_t len, uint64_t deadline_ns)
{
    int n = len > (size_t)INT32_MAX ? INT32_MAX : (int)len;
    for (int last = 0;;) {
        ossl.err_clear();
        int rc = ossl.read(t->ssl, buf, n);
        if (rc > 0)
            return rc;
        int err = ossl.get_error(t->ssl, rc);
        if (err == SSL_ERROR_ZERO_RETURN_)
            return 0;
        if (err == SSL_ERROR_WANT_READ_ || err == SSL_ERROR_WANT_WRITE_) {
            if (tls_wait(t->fd, err, deadline_ns, &last) == 0)
                continue;
            return -1;
        }
        if (err == SSL_ERROR_SYSCALL_ && errno == 0)
            return 0; /* the peer closed without close_notify: the framing says if it was early */
        errno = ECONNRESET;
        return -1;
    }
}

static int tls_write(tpx__tls_t *t, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    while (len > 0) {
        int n = len > (size_t)INT32_MAX ? INT32_MAX : (int)len;
        for (int last = 0;;) {
            ossl.err_clear();
            int rc = ossl.write(t->ssl, p, n);
            if (rc > 0) {
                p += rc;
                len -= (size_t)rc;
                break;
            }
            int err = ossl.get_error(t->ssl, rc);
            if (err == SSL_ERROR_WANT_READ_ || err == SSL_ERROR_WANT_WRITE_) {
                /* retried with the same arguments, as OpenSSL requires */
                if (tls_wait(t->fd, err, deadline_ns, &last) == 0)
                    continue;
                return -1;
            }
            errno = ECONNRESET;
            return -1;
        }
    }
    return 0;
}

void tpx__tls_close(tpx__tls_t *t)
{
    if (t == NULL)
        return;
    pipe_guard_t g;
    pipe_block(&g);
    ossl.err_clear();
    (void)ossl.shutdown(t->ssl); /* one try: a close_notify if it fits, no wait */
    ossl.ssl_free(t->ssl);
    pipe_unblock(&g);
    free(t);
}

tpx__tls_t *tpx__tls_connect(tpx__tls_ctx_t *ctx, int fd, const char *host, uint64_t deadline_ns,
                             char *why, size_t why_len)
{
    pipe_guard_t g;
    pipe_block(&g);
    tpx__tls_t *t = tls_connect(ctx, fd, host, deadline_ns, why, why_len);
    pipe_unblock(&g);
    return t;
}

ssize_t tpx__tls_read(tpx__tls_t *t, void *buf, size_t len, uint64_t deadline_ns)
{
    pipe_guard_t g;
    pipe_block(&g); /* a read may write too (TLS 1.3 key updates, alerts) */
    ssize_t r = tls_read(t, buf, len, deadline_ns);
    pipe_unblock(&g);
    return r;
}

int tpx__tls_write(tpx__tls_t *t, const void *buf, size_t len, uint64_t deadline_ns)
{
    pipe_guard_t g;
    pipe_block(&g);
    int r = tls_write(t, buf, len, deadline_ns);
    pipe_unblock(&g);
    return r;
}
