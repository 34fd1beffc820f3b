/* SPDX-License-Identifier: Apache-2.0 */
/*
 * netns_peer.c - one side of the fault tests of the netns testbed
 * (tests/netns/leaks.sh, recovery.sh), through the public API only.
 *
 *   netns_peer server --port P [OPTIONS]
 *   netns_peer client HOST --port P [OPTIONS]
 *
 * The client runs rounds over a peer: it sends message k (SIZE bytes filled
 * with a pattern seeded by k and the direction) and receives the server's
 * reply k; each receiver checks every byte. A round that fails is a fault:
 * the client prints a FAULT line, closes the failed peer, waits for
 * --go-file when one is named (the test script repairs the network first),
 * connects again (tpx_peer_connect retried until the deadline) and goes on
 * with a new session whose round counter starts at 0. Until --faults faults
 * have been seen the client runs rounds without end (the script causes the
 * fault); after that it runs --rounds rounds, sends an 8-byte "bye" and
 * stops. The server accepts one peer after another, answers each round,
 * closes a peer that fails and accepts the next, and stops after a bye.
 *
 * At the end each side checks that every fd and thread it gained since
 * tpx_engine_create() is gone once its peers are closed (LEAKCHECK line),
 * and, after tpx_engine_destroy(), that it is back to where it was before
 * the engine. Memory leaks are LeakSanitizer's job (the ASan build).
 *
 * Every wait is bounded: transfers by --timeout-ms (the engine's per
 * transfer deadline), the whole run by --deadline (SIGALRM: a message and
 * exit 3). Exit status: 0 ok, 1 failure (data mismatch, unexpected fault,
 * leak, ...), 2 bad usage, 3 deadline exceeded.
 *
 * Lines for the scripts (stdout, one per event, times in ms since the epoch
 * so that a script can compare them with its own `date +%s%3N`):
 *   CONNECTED session=S attempts=N ms=T at=EPOCH_MS
 *   RUNNING session=S at=EPOCH_MS          (first verified round of S)
 *   FAULT session=S round=K status=NAME at=EPOCH_MS  (when the error surfaced)
 *   RECOVERED session=S at=EPOCH_MS        (first verified round after a fault)
 *   SESSION session=S end=bye|fault status=NAME rounds=K   (server)
 *   LEAKCHECK role fds BASE->NOW threads BASE->NOW ok|LEAK
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "tpx/status.h"
#include "tpx/tpx.h"

/* The fill/verify loops touch every byte; keep them fast in Debug builds. */
#if defined(__GNUC__) && !defined(__clang__)
#define NP_HOT __attribute__((optimize("O2")))
#else
#define NP_HOT
#endif

#define NP_BYE_LEN   8 /* a message this long ends the run */
#define NP_BYE_MAGIC 0x4259452142594521ull

typedef struct {
    int server;
    const char *host;
    int port;
    size_t size;
    int rounds;
    int faults;
    int timeout_ms;
    int deadline_s;
    const char *go_file;
} np_opts_t;

static const char *role = "?";
static np_opts_t O;

/* ---- reporting ---------------------------------------------------------------- */

/* The status's enum name (tpx_status_name()) without its "TPX_ERR_" or
 * "TPX_" prefix, for lines a script parses: TIMED_OUT, OK, INPROGRESS. */
static const char *np_status_name(tpx_status_t st)
{
    const char *n = tpx_status_name(st);
    if (strncmp(n, "TPX_ERR_", 8) == 0)
        return n + 8;
    return strncmp(n, "TPX_", 4) == 0 ? n + 4 : n;
}

static uint64_t np_epoch_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t np_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void np_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void np_on_alarm(int sig)
{
    static const char msg[] = "netns_peer: FAIL: the run's --deadline passed (a hang?)\n";
    ssize_t r = write(2, msg, sizeof(msg) - 1);
    (void)r;
    (void)sig;
    _exit(3);
}

static uint64_t deadline_ms; /* monotonic */

static int np_left_ms(void)
{
    uint64_t now = np_mono_ms();
    return now >= deadline_ms ? 0 : (int)(deadline_ms - now);
}

/* ---- resources ---------------------------------------------------------------- */

typedef struct {
    int fds, threads;
} np_res_t;

static np_res_t np_res_now(void)
{
    np_res_t r = {test_count_dir("/proc/self/fd"), test_count_dir("/proc/self/task")};
    return r;
}

/* What is open and running, for a leak report. */
static void np_res_dump(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[300], target[256];
            snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
            ssize_t n = readlink(path, target, sizeof(target) - 1);
            target[n > 0 ? n : 0] = 0;
            fprintf(stderr, "  fd %s -> %s\n", de->d_name, target);
        }
        closedir(d);
    }
    d = opendir("/proc/self/task");
    if (d != NULL) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[300], name[64] = "";
            snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
            FILE *f = fopen(path, "r");
            if (f != NULL) {
                if (fgets(name, sizeof(name), f) == NULL)
                    name[0] = 0;
                fclose(f);
            }
            name[strcspn(name, "\n")] = 0;
            fprintf(stderr, "  thread %s %s\n", de->d_name, name);
        }
        closedir(d);
    }
}

/* Threads and sockets of closed peers may take a moment to go: wait up to
 * 5 s for the counts to come back to `base`. 0: back; 1: leak (reported).
 * Fewer than `base` is no leak: a server's count right after
 * tpx_engine_create() includes the sockets of a peer that its bootstrap
 * thread was already setting up (a client retrying its connect). */
static int np_res_check(np_res_t base, const char *when)
{
    np_res_t now = np_res_now();
    for (int i = 0; i < 250 && (now.fds > base.fds || now.threads > base.threads); i++) {
        np_sleep_ms(20);
        now = np_res_now();
    }
    int ok = now.fds <= base.fds && now.threads <= base.threads;
    printf("LEAKCHECK %s %s: fds %d->%d threads %d->%d %s%s\n", role, when, base.fds, now.fds,
           base.threads, now.threads, ok ? "ok" : "LEAK",
           ok && (now.fds < base.fds || now.threads < base.threads)
               ? " (the base included a peer being set up)"
               : "");
    fflush(stdout);
    if (!ok)
        np_res_dump();
    return ok ? 0 : 1;
}

/* ---- data ------------------------------------------------------------------------ */

static uint64_t np_seed(int c2s, uint64_t k)
{
    return (k << 1 | (uint64_t)c2s) * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull;
}

static NP_HOT uint64_t np_word(uint64_t seed, uint64_t i)
{
    uint64_t x = seed + i * 0xD1B54A32D192ED03ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return x;
}

static NP_HOT void np_fill(uint64_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len / 8; i++)
        p[i] = np_word(seed, i);
}

/* 0 if every byte is right, else the offset of the first wrong word + 1. */
static NP_HOT size_t np_check(const uint64_t *p, size_t len, uint64_t seed)
{
    for (size_t i = 0; i < len / 8; i++)
        if (p[i] != np_word(seed, i))
            return i * 8 + 1;
    return 0;
}

typedef struct {
    tpx_engine_t *e;
    uint64_t *sbuf, *rbuf;
    tpx_region_t *sreg, *rreg;
    uint64_t verified_bytes;
} np_ctx_t;

/* Wait for x (bounded by its deadline, and by ours), then release it. */
static tpx_status_t np_wait_release(tpx_xfer_t *x, size_t *bytes)
{
    tpx_status_t st = tpx_xfer_wait(x, O.timeout_ms + 5000, bytes);
    tpx_xfer_release(x);
    return st;
}

static uint64_t fault_at; /* epoch ms when the last failed round's error surfaced */

/* After a failed round: close the peer; transfers still running must end. */
static void np_close_failed(tpx_peer_t *peer, tpx_xfer_t **xs, int n)
{
    fault_at = np_epoch_ms();
    uint64_t t0 = np_mono_ms();
    tpx_peer_close(peer);
    uint64_t t1 = np_mono_ms();
    for (int i = 0; i < n; i++) {
        if (xs[i] == NULL)
            continue;
        tpx_status_t st = tpx_xfer_wait(xs[i], 5000, NULL);
        if (st == TPX_INPROGRESS)
            fprintf(stderr,
                    "netns_peer %s: BUG: a transfer of a closed peer is still running 5 s "
                    "after tpx_peer_close\n",
                    role);
        tpx_xfer_release(xs[i]);
    }
    printf("CLOSED failed peer: tpx_peer_close took %llu ms, its other transfers ended %llu ms "
           "later\n",
           (unsigned long long)(t1 - t0), (unsigned long long)(np_mono_ms() - t1));
    fflush(stdout);
}

/* ---- client ---------------------------------------------------------------------- */

/* One round: send k, receive reply k, check it. TPX_OK, a transfer's error,
 * or exit(1) on wrong data. */
static tpx_status_t np_client_round(np_ctx_t *c, tpx_peer_t *peer, uint64_t k)
{
    np_fill(c->sbuf, O.size, np_seed(1, k));
    memset(c->rbuf, 0, O.size);
    tpx_xfer_t *xs[2] = {NULL, NULL};
    tpx_status_t st = tpx_recv(peer, c->rreg, 0, O.size, &xs[0]);
    if (st == TPX_OK)
        st = tpx_send(peer, c->sreg, 0, O.size, &xs[1]);
    size_t got[2] = {0, 0};
    for (int i = 0; i < 2 && st == TPX_OK; i++)
        st = tpx_xfer_wait(xs[i], -1, &got[i]);
    if (st == TPX_INPROGRESS) /* the wait outlived the transfer's deadline */
        st = TPX_ERR_TIMED_OUT;
    if (st != TPX_OK) {
        np_close_failed(peer, xs, 2);
        return st;
    }
    tpx_xfer_release(xs[0]);
    tpx_xfer_release(xs[1]);
    size_t bad = np_check(c->rbuf, O.size, np_seed(0, k));
    if (got[0] != O.size || got[1] != O.size || bad != 0) {
        fprintf(stderr,
                "netns_peer client: FAIL: round %llu: reply of %zu bytes (sent %zu), "
                "first wrong byte at %zd\n",
                (unsigned long long)k, got[0], got[1], (ssize_t)bad - 1);
        exit(1);
    }
    c->verified_bytes += 2 * O.size;
    return TPX_OK;
}

static int np_client_bye(np_ctx_t *c, tpx_peer_t *peer)
{
    c->sbuf[0] = NP_BYE_MAGIC;
    tpx_xfer_t *x;
    tpx_status_t st = tpx_send(peer, c->sreg, 0, NP_BYE_LEN, &x);
    if (st == TPX_OK)
        st = np_wait_release(x, NULL);
    if (st != TPX_OK)
        fprintf(stderr, "netns_peer client: FAIL: bye: %s\n", tpx_status_string(st));
    return st == TPX_OK ? 0 : 1;
}

static tpx_status_t np_connect(tpx_engine_t *e, int session, tpx_peer_t **peer)
{
    uint64_t t0 = np_mono_ms();
    int attempts = 0;
    tpx_status_t st = TPX_ERR_TIMED_OUT;
    while (np_left_ms() > 1000) {
        attempts++;
        int tmo = np_left_ms() - 1000;
        st = tpx_peer_connect(e, O.host, O.port, tmo < 10000 ? tmo : 10000, peer);
        if (st == TPX_OK)
            break;
        printf("connect attempt %d: %s (%s)\n", attempts, np_status_name(st), tpx_status_string(st));
        fflush(stdout);
        np_sleep_ms(100);
    }
    if (st == TPX_OK) {
        printf("CONNECTED session=%d attempts=%d ms=%llu at=%llu\n", session, attempts,
               (unsigned long long)(np_mono_ms() - t0), (unsigned long long)np_epoch_ms());
        fflush(stdout);
    }
    return st;
}

static int np_wait_go(void)
{
    if (O.go_file == NULL)
        return 0;
    printf("WAITING for %s\n", O.go_file);
    fflush(stdout);
    struct stat sb;
    while (stat(O.go_file, &sb) != 0) {
        if (np_left_ms() < 1000) {
            fprintf(stderr, "netns_peer client: FAIL: %s never appeared\n", O.go_file);
            return 1;
        }
        np_sleep_ms(20);
    }
    unlink(O.go_file);
    return 0;
}

static int np_client(np_ctx_t *c)
{
    int faults = 0;
    for (int session = 1;; session++) {
        tpx_peer_t *peer;
        tpx_status_t st = np_connect(c->e, session, &peer);
        if (st != TPX_OK) {
            fprintf(stderr,
                    "netns_peer client: FAIL: could not connect to %s:%d before the "
                    "deadline: %s\n",
                    O.host, O.port, tpx_status_string(st));
            return 1;
        }
        for (uint64_t k = 0;; k++) {
            if (faults >= O.faults && k >= (uint64_t)O.rounds) {
                int rc = np_client_bye(c, peer);
                tpx_peer_close(peer);
                printf("DONE sessions=%d faults=%d verified_bytes=%llu\n", session, faults,
                       (unsigned long long)c->verified_bytes);
                fflush(stdout);
                return rc;
            }
            st = np_client_round(c, peer, k);
            if (st != TPX_OK) {
                printf("FAULT session=%d round=%llu status=%s at=%llu (%s)\n", session,
                       (unsigned long long)k, np_status_name(st), (unsigned long long)fault_at,
                       tpx_status_string(st));
                fflush(stdout);
                if (++faults > O.faults) {
                    fprintf(stderr, "netns_peer client: FAIL: unexpected fault (%d allowed)\n",
                            O.faults);
                    return 1;
                }
                if (np_wait_go() != 0)
                    return 1;
                break;
            }
            if (k == 0) {
                printf("%s session=%d at=%llu\n", session > 1 ? "RECOVERED" : "RUNNING", session,
                       (unsigned long long)np_epoch_ms());
                fflush(stdout);
            }
        }
    }
}

/* ---- server ---------------------------------------------------------------------- */

/* Serve one peer until its bye (1) or a failure (0, *err set). */
static int np_serve(np_ctx_t *c, tpx_peer_t *peer, uint64_t *rounds, tpx_status_t *err)
{
    for (uint64_t k = 0;; k++) {
        *rounds = k;
        tpx_xfer_t *xs[1] = {NULL};
        size_t got = 0;
        memset(c->rbuf, 0, O.size);
        tpx_status_t st = tpx_recv(peer, c->rreg, 0, O.size, &xs[0]);
        if (st == TPX_OK)
            st = tpx_xfer_wait(xs[0], -1, &got);
        if (st == TPX_INPROGRESS)
            st = TPX_ERR_TIMED_OUT;
        if (st != TPX_OK) {
            *err = st;
            np_close_failed(peer, xs, 1);
            return 0;
        }
        tpx_xfer_release(xs[0]);
        if (got == NP_BYE_LEN && c->rbuf[0] == NP_BYE_MAGIC) {
            tpx_peer_close(peer);
            return 1;
        }
        size_t bad = np_check(c->rbuf, O.size, np_seed(1, k));
        if (got != O.size || bad != 0) {
            fprintf(stderr,
                    "netns_peer server: FAIL: round %llu: %zu bytes (want %zu), first "
                    "wrong byte at %zd\n",
                    (unsigned long long)k, got, O.size, (ssize_t)bad - 1);
            exit(1);
        }
        c->verified_bytes += O.size;
        np_fill(c->sbuf, O.size, np_seed(0, k));
        tpx_xfer_t *x = NULL; /* not set if the post fails */
        st = tpx_send(peer, c->sreg, 0, O.size, &x);
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, -1, &got);
        if (st == TPX_INPROGRESS)
            st = TPX_ERR_TIMED_OUT;
        if (st != TPX_OK) {
            *err = st;
            np_close_failed(peer, &x, 1);
            return 0;
        }
        tpx_xfer_release(x);
        c->verified_bytes += O.size; /* checked by the client */
    }
}

static int np_server(np_ctx_t *c)
{
    int faults = 0;
    for (int session = 1;; session++) {
        tpx_peer_t *peer;
        int tmo = np_left_ms() - 1000;
        tpx_status_t st = tmo > 0 ? tpx_peer_accept(c->e, tmo, &peer) : TPX_ERR_TIMED_OUT;
        if (st != TPX_OK) {
            fprintf(stderr, "netns_peer server: FAIL: no peer for session %d: %s\n", session,
                    tpx_status_string(st));
            return 1;
        }
        printf("ACCEPTED session=%d at=%llu\n", session, (unsigned long long)np_epoch_ms());
        fflush(stdout);
        uint64_t rounds = 0;
        tpx_status_t err = TPX_OK;
        int bye = np_serve(c, peer, &rounds, &err);
        printf("SESSION session=%d end=%s status=%s rounds=%llu at=%llu\n", session,
               bye ? "bye" : "fault", np_status_name(err), (unsigned long long)rounds,
               (unsigned long long)(bye ? np_epoch_ms() : fault_at));
        fflush(stdout);
        if (bye) {
            if (faults != O.faults) {
                fprintf(stderr, "netns_peer server: FAIL: %d failed sessions, expected %d\n",
                        faults, O.faults);
                return 1;
            }
            printf("DONE sessions=%d faults=%d verified_bytes=%llu\n", session, faults,
                   (unsigned long long)c->verified_bytes);
            fflush(stdout);
            return 0;
        }
        if (++faults > O.faults) {
            fprintf(stderr, "netns_peer server: FAIL: unexpected fault (%d allowed)\n", O.faults);
            return 1;
        }
    }
}

/* ---- main ------------------------------------------------------------------------ */

static void np_usage(FILE *f)
{
    fprintf(f, "usage: netns_peer server --port P [OPTIONS]\n"
               "       netns_peer client HOST --port P [OPTIONS]\n"
               "  --port P         the server engine's bootstrap port\n"
               "  --size N         bytes per message, a multiple of 8 (default 16777216)\n"
               "  --rounds N       client: rounds after the last expected fault (default 8)\n"
               "  --faults N       faults expected (client: rounds run without end until the\n"
               "                   N-th; server: failed sessions before the bye) (default 0)\n"
               "  --timeout-ms MS  each transfer's deadline (default 5000)\n"
               "  --deadline S     the whole run's limit (default 50)\n"
               "  --go-file PATH   client: after a fault wait for PATH (then remove it)\n");
}

static int np_parse(int argc, char **argv)
{
    O = (np_opts_t){.size = 16u << 20, .rounds = 8, .timeout_ms = 5000, .deadline_s = 50};
    int i = 1;
    if (argc < 2)
        return -1;
    if (strcmp(argv[1], "server") == 0) {
        O.server = 1;
        i = 2;
    } else if (strcmp(argv[1], "client") == 0 && argc >= 3) {
        O.host = argv[2];
        i = 3;
    } else {
        return -1;
    }
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc)
            return -1;
        const char *v = argv[++i];
        char *end;
        long long n = strtoll(v, &end, 10);
        int num = *v != 0 && *end == 0 && n >= 0;
        if (strcmp(a, "--go-file") == 0) {
            O.go_file = v;
            continue;
        }
        if (!num)
            return -1;
        if (strcmp(a, "--port") == 0 && n > 0 && n < 65536)
            O.port = (int)n;
        else if (strcmp(a, "--size") == 0 && n >= 64 && n % 8 == 0 && n <= (1ll << 30))
            O.size = (size_t)n;
        else if (strcmp(a, "--rounds") == 0 && n < 1000000)
            O.rounds = (int)n;
        else if (strcmp(a, "--faults") == 0 && n < 100)
            O.faults = (int)n;
        else if (strcmp(a, "--timeout-ms") == 0 && n > 0 && n < 3600000)
            O.timeout_ms = (int)n;
        else if (strcmp(a, "--deadline") == 0 && n > 0 && n < 3600)
            O.deadline_s = (int)n;
        else
            return -1;
    }
    return O.port > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (np_parse(argc, argv) != 0) {
        np_usage(stderr);
        return 2;
    }
    role = O.server ? "server" : "client";
    signal(SIGALRM, np_on_alarm);
    alarm((unsigned)O.deadline_s);
    deadline_ms = np_mono_ms() + (uint64_t)O.deadline_s * 1000u;

    np_res_t res0 = np_res_now();
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.port = O.server ? O.port : TPX_PORT_NONE;
    p.timeout_ms = O.timeout_ms;
    np_ctx_t c = {0};
    tpx_status_t st = tpx_engine_create(&p, &c.e);
    if (st != TPX_OK) {
        fprintf(stderr, "netns_peer %s: FAIL: tpx_engine_create: %s (%s)\n", role,
                np_status_name(st), tpx_status_string(st));
        return 1;
    }
    np_res_t res1 = np_res_now();
    printf("ENGINE %s pid=%d fds=%d threads=%d (before the engine: fds=%d threads=%d)\n", role,
           (int)getpid(), res1.fds, res1.threads, res0.fds, res0.threads);
    fflush(stdout);

    int rc = 1;
    c.sbuf = aligned_alloc(4096, O.size);
    c.rbuf = aligned_alloc(4096, O.size);
    if (c.sbuf == NULL || c.rbuf == NULL) {
        fprintf(stderr, "netns_peer %s: FAIL: out of memory\n", role);
        goto out_free;
    }
    st = tpx_mem_register(c.e, c.sbuf, O.size, TPX_MEM_HOST, &c.sreg);
    if (st != TPX_OK)
        goto out_reg_failed;
    st = tpx_mem_register(c.e, c.rbuf, O.size, TPX_MEM_HOST, &c.rreg);
    if (st != TPX_OK) {
        tpx_mem_deregister(c.sreg);
        goto out_reg_failed;
    }

    rc = O.server ? np_server(&c) : np_client(&c);

    /* Every peer is closed: the engine must be back to what it had after
     * tpx_engine_create(). */
    rc |= np_res_check(res1, "peers closed vs engine created");
    tpx_mem_deregister(c.rreg);
    tpx_mem_deregister(c.sreg);
    goto out_free;

out_reg_failed:
    fprintf(stderr, "netns_peer %s: FAIL: tpx_mem_register: %s\n", role, tpx_status_string(st));
out_free:
    free(c.rbuf);
    free(c.sbuf);
    tpx_engine_destroy(c.e);
    rc |= np_res_check(res0, "engine destroyed vs before the engine");
    printf("EXIT %s rc=%d\n", role, rc);
    return rc;
}
