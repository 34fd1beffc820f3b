/* SPDX-License-Identifier: Apache-2.0 */
/*
 * etcd_harness.h - start and stop a private etcd for a test (header-only,
 * used by test_registry.c): Debian's `etcd` (package etcd-server, or
 * $TPX_ETCD) on 127.0.0.1, client and peer ports that were free a moment
 * before (test_free_ports), its own data directory under /tmp; its log is etcd.log there and
 * is printed when a test fails; optionally TLS for clients (certificates
 * from certs.sh), client certificates required, a short auth token TTL.
 * Every wait has a deadline.
 */
#ifndef TPX_TESTS_ETCD_HARNESS_H
#define TPX_TESTS_ETCD_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../common/tpx_test.h"

#define ETCD_SKIP 77 /* ctest SKIP_RETURN_CODE: no etcd on this machine */

typedef struct etcd etcd_t;
struct etcd {
    pid_t pid; /* 0: not running */
    int client_port, peer_port;
    char dir[64]; /* data directory (and etcd.log) */
    char url[64]; /* etcd://127.0.0.1:PORT, or https:// with tls_dir */
    char bin[512];
    /* set before the first start: */
    char tls_dir[64];             /* certs.sh's directory: clients speak TLS (server.pem) */
    int client_cert_auth;         /* clients must show a certificate of ca.pem */
    int token_ttl;                /* --auth-token-ttl, seconds (0: etcd's 300) */
    int (*ready)(const etcd_t *); /* is it answering? (NULL: a plain HTTP range) */
};

/* Find the etcd binary: $TPX_ETCD, else `etcd` on PATH or in /usr/bin. */
static int etcd_find(etcd_t *s)
{
    const char *env = getenv("TPX_ETCD");
    if (env != NULL && env[0] != '\0') {
        snprintf(s->bin, sizeof(s->bin), "%s", env);
        return access(s->bin, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s:/usr/bin:/usr/sbin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(buf, ":", &save); d != NULL;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(s->bin, sizeof(s->bin), "%s/etcd", d);
        if (access(s->bin, X_OK) == 0)
            return 0;
    }
    return -1;
}

/* Is it answering? One HTTP POST /v3/kv/range over a fresh socket. */
static int etcd_ready(const etcd_t *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->client_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return 0;
    }
    static const char req[] = "POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n"
                              "Connection: close\r\n\r\n{\"key\":\"AA==\"}";
    char ans[64] = "";
    int ok = send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1) &&
             recv(fd, ans, sizeof(ans) - 1, 0) > 12 && strncmp(ans, "HTTP/1.1 200", 12) == 0;
    close(fd);
    return ok;
}

static void etcd_log_tail(const etcd_t *s)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "tail -n 20 %s/etcd.log >&2", s->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "(no etcd log)\n");
}

static int etcd_start_once(etcd_t *s);
static void etcd_stop(etcd_t *s);

/* Client port P and peer port P + 1, both free (test_free_ports). */
static int etcd_pick_ports(etcd_t *s)
{
    s->client_port = test_free_ports(1);
    s->peer_port = s->client_port + 1;
    if (s->client_port <= 0)
        return -1;
    snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%d", s->tls_dir[0] ? "https" : "etcd",
             s->client_port);
    return 0;
}

/* (Re)start etcd: the first call picks ports and a data dir, later calls
 * reuse them (a restart keeps the data). 0 when it answers, -1 failed. A
 * first start that fails (a port taken by another test between the probe
 * and etcd's bind) is retried on other ports. */
static int etcd_start(etcd_t *s)
{
    int first = s->dir[0] == '\0';
    for (int attempt = 0;; attempt++) {
        if (etcd_start_once(s) == 0)
            return 0;
        etcd_stop(s);
        if (!first || attempt == 2 || s->dir[0] == '\0')
            return -1;
        fprintf(stderr, "etcd did not start on ports %d/%d: trying others\n", s->client_port,
                s->peer_port);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/data'", s->dir);
        if (system(cmd) != 0)
            return -1;
        if (etcd_pick_ports(s) != 0)
            return -1;
    }
}

static int etcd_start_once(etcd_t *s)
{
    if (s->dir[0] == '\0') {
        if (s->bin[0] == '\0' && etcd_find(s) != 0)
            return -1;
        snprintf(s->dir, sizeof(s->dir), "/tmp/tpx-etcd-XXXXXX");
        if (mkdtemp(s->dir) == NULL)
            return -1;
        if (etcd_pick_ports(s) != 0)
            return -1;
    }
    char data[128], log[128], curl[64], purl[64], cluster[96];
    char cert[128], key[128], ca[128], ttl[32];
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(log, sizeof(log), "%s/etcd.log", s->dir);
    snprintf(curl, sizeof(curl), "%s://127.0.0.1:%d", s->tls_dir[0] ? "https" : "http",
             s->client_port);
    snprintf(cert, sizeof(cert), "--cert-file=%s/server.pem", s->tls_dir);
    snprintf(key, sizeof(key), "--key-file=%s/server.key", s->tls_dir);
    snprintf(ca, sizeof(ca), "--trusted-ca-file=%s/ca.pem", s->tls_dir);
    snprintf(ttl, sizeof(ttl), "--auth-token-ttl=%d", s->token_ttl > 0 ? s->token_ttl : 300);
    const char *opt[5] = {NULL};
    int no = 0;
    opt[no++] = ttl;
    if (s->tls_dir[0]) {
        opt[no++] = cert;
        opt[no++] = key;
        if (s->client_cert_auth) {
            opt[no++] = ca;
            opt[no++] = "--client-cert-auth";
        }
    }
    snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", s->peer_port);
    snprintf(cluster, sizeof(cluster), "tpxtest=%s", purl);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(s->bin, s->bin, "--name", "tpxtest", "--data-dir", data, "--listen-client-urls", curl,
              "--advertise-client-urls", curl, "--listen-peer-urls", purl,
              "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
              "--initial-cluster-state", "new", opt[0], opt[1], opt[2], opt[3], opt[4],
              (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    uint64_t end = test_deadline_ms(30000);
    while (test_now_ns() < end) {
        if (s->ready != NULL ? s->ready(s) : etcd_ready(s))
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            fprintf(stderr, "etcd exited at start (status %d):\n", st);
            etcd_log_tail(s);
            return -1;
        }
        usleep(50000);
    }
    fprintf(stderr, "etcd did not answer within 30 s:\n");
    etcd_log_tail(s);
    return -1;
}

/* Stop it (SIGTERM, then SIGKILL after 10 s); the data stays. */
static void etcd_stop(etcd_t *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGTERM);
    uint64_t end = test_deadline_ms(10000);
    int st;
    while (waitpid(s->pid, &st, WNOHANG) != s->pid) {
        if (test_now_ns() > end) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            break;
        }
        usleep(20000);
    }
    s->pid = 0;
}

/* Stop it and remove its directory. */
static void etcd_destroy(etcd_t *s)
{
    etcd_stop(s);
    if (s->dir[0] != '\0' && strncmp(s->dir, "/tmp/tpx-etcd-", 14) == 0) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", s->dir);
    }
    s->dir[0] = '\0';
}

#endif
