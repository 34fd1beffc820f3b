/* SPDX-License-Identifier: Apache-2.0 */
/* bs_test.h - the bootstrap tests' fixture (the checks are those of
 * ../common/tpx_test.h): log capture, fd counting, raw sockets that speak
 * (or abuse) the wire format, and a small poll()-driven server that
 * handshakes many connections at once. Each test is one process (children
 * forked where a peer is needed), exit 0 = pass. */
#ifndef TPX_TEST_BS_TEST_H
#define TPX_TEST_BS_TEST_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "bootstrap/bootstrap.h"
#include "common/log.h"

static inline void test_log_init(void)
{
    const char *l = getenv("TPX_LOG_LEVEL");
    int lvl = l ? tpx__log_level_parse(l) : -1;
    tpx__log_level = lvl >= 0 && lvl >= TPX_LOG_WARN ? lvl : TPX_LOG_WARN;
}

/* ---- log capture: fd 2 (the logger's default) into a temp file ---------- */

static int cap_saved_fd = -1;
static char cap_path[64];

static inline void log_capture_begin(void)
{
    snprintf(cap_path, sizeof(cap_path), "/tmp/tpx_bs_log_XXXXXX");
    int fd = mkstemp(cap_path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    fflush(stderr);
    cap_saved_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* Restore fd 2, echo what was captured (for diagnosis) and return it. */
static inline char *log_capture_end(void)
{
    fflush(stderr);
    char *text = calloc(1, 1 << 20);
    FILE *f = fopen(cap_path, "r");
    if (f != NULL) {
        size_t n = fread(text, 1, (1 << 20) - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    unlink(cap_path);
    dup2(cap_saved_fd, 2);
    close(cap_saved_fd);
    cap_saved_fd = -1;
    if (text[0] != '\0')
        fprintf(stderr, "[%d] captured log:\n%s", (int)getpid(), text);
    return text;
}

static inline int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* ---- processes --------------------------------------------------------------- */

/* Run fn(arg) in a child; its return value is the exit status. */
static inline pid_t spawn(int (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        alarm(50);
        exit(fn(arg)); /* not _exit: let LeakSanitizer check the child too */
    }
    return pid;
}

static inline int reap(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    fprintf(stderr, "child %d died (status 0x%x)\n", (int)pid, status);
    return 100;
}

/* ---- raw sockets --------------------------------------------------------------- */

/* Blocking TCP connect to 127.0.0.1:port; -1 on failure. */
static inline int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("raw connect");
        close(fd);
        return -1;
    }
    return fd;
}

static inline int raw_write(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static inline int raw_send_frame(int fd, uint16_t type, const void *payload, uint32_t len)
{
    unsigned char h[TPX_BS_HDR_SIZE];
    tpx__bs_hdr_encode(type, len, h);
    if (raw_write(fd, h, sizeof(h)) != 0)
        return -1;
    return len ? raw_write(fd, payload, len) : 0;
}

/* Read exactly n bytes within timeout_ms: 0 ok, -1 EOF/error, -2 timeout. */
static inline int raw_read(int fd, void *p, size_t n, int timeout_ms)
{
    unsigned char *b = p;
    uint64_t deadline = test_deadline_ms(timeout_ms);
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = tpx__ms_left(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) == 0)
            return -2;
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Read one frame (header checked); 0 ok, <0 as raw_read or -3 bad header. */
static inline int raw_recv_frame(int fd, tpx_bs_hdr_t *h, void *buf, uint32_t cap, int timeout_ms)
{
    unsigned char hb[TPX_BS_HDR_SIZE];
    int r = raw_read(fd, hb, sizeof(hb), timeout_ms);
    if (r != 0)
        return r;
    if (tpx__bs_hdr_decode(hb, cap, h, NULL) != TPX_OK)
        return -3;
    return h->len ? raw_read(fd, buf, h->len, timeout_ms) : 0;
}

/* Milliseconds until the peer closes fd (discarding what it sends), or -1
 * if it is still open after timeout_ms. */
static inline double raw_wait_eof(int fd, int timeout_ms)
{
    uint64_t t0 = tpx__now_ns(), deadline = test_deadline_ms(timeout_ms);
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = tpx__ms_left(deadline);
        if (ms == 0 || poll(&pfd, 1, ms) == 0)
            return -1;
        char junk[256];
        ssize_t r = recv(fd, junk, sizeof(junk), 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return test_ms_since(t0);
    }
}

/* ---- a server: handshake many connections at once -------------------------------- */

typedef struct {
    tpx_status_t st; /* handshake result */
    double ms;       /* from accept to result */
    int authenticated;
    int app_rc;    /* on_ready's return value (0 = good) */
    char peer[64]; /* tpx__bs_peer_str() */
} served_t;

/* Accept connections on lfd and drive all handshakes from one poll loop
 * until `n` have finished (or total_ms passed: returns how many did). Each
 * connection gets its own deadline of deadline_ms from its accept. On
 * success on_ready (may block briefly) is called before the close. */
static inline int serve(int lfd, const char *token, int n, int deadline_ms, int total_ms,
                        int (*on_ready)(tpx_bs_conn_t *), served_t *res)
{
    int cap = n + 8, nconn = 0, done = 0;
    tpx_bs_conn_t **conns = calloc((size_t)cap, sizeof(*conns));
    uint64_t *t0 = calloc((size_t)cap, sizeof(*t0));
    struct pollfd *pfd = calloc((size_t)cap + 1, sizeof(*pfd));
    uint64_t end = test_deadline_ms(total_ms);
    while (done < n && tpx__now_ns() < end) {
        int np = 0, timeout = tpx__ms_left(end);
        pfd[np++] = (struct pollfd){.fd = done + nconn < n ? lfd : -1, .events = POLLIN};
        for (int i = 0; i < nconn; i++) {
            pfd[np++] =
                (struct pollfd){.fd = tpx__bs_fd(conns[i]), .events = tpx__bs_events(conns[i])};
            int t = tpx__bs_timeout_ms(conns[i]);
            if (t >= 0 && t < timeout)
                timeout = t;
        }
        poll(pfd, (nfds_t)np, timeout);
        if (pfd[0].revents & POLLIN) {
            int fd;
            while (done + nconn < n && nconn < cap && tpx__bs_accept(lfd, &fd) == TPX_OK) {
                tpx_bs_conn_t *c;
                if (tpx__bs_server_start(fd, token, test_deadline_ms(deadline_ms), &c) != TPX_OK) {
                    close(fd);
                    continue;
                }
                t0[nconn] = tpx__now_ns();
                conns[nconn++] = c;
            }
        }
        for (int i = 0; i < nconn;) {
            tpx_status_t st = tpx__bs_advance(conns[i]);
            if (st == TPX_INPROGRESS) {
                i++;
                continue;
            }
            served_t *r = &res[done++];
            r->st = st;
            r->ms = test_ms_since(t0[i]);
            r->authenticated = tpx__bs_authenticated(conns[i]);
            snprintf(r->peer, sizeof(r->peer), "%s", tpx__bs_peer_str(conns[i]));
            r->app_rc = st == TPX_OK && on_ready ? on_ready(conns[i]) : 0;
            tpx__bs_close(conns[i]);
            conns[i] = conns[nconn - 1];
            t0[i] = t0[nconn - 1];
            nconn--;
        }
    }
    for (int i = 0; i < nconn; i++)
        tpx__bs_close(conns[i]);
    free(conns);
    free(t0);
    free(pfd);
    return done;
}

#endif
