/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness.c - processes, pipes, data, buffers and leak checks for the engine
 * integration tests (see harness.h). Public API only.
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The fill/verify loops run over gigabytes; keep them fast in Debug builds. */
#if defined(__GNUC__) && !defined(__clang__)
#define HT_HOT __attribute__((optimize("O2")))
#else
#define HT_HOT
#endif

int ht_me = HT_SUP;
const char *ht_scenario = "?";
int ht_clean = 0;
static const char *party_name[HT_MAXPARTY] = {"sup"};
static pid_t sup_pid;
static char log_pattern[512]; /* TPX_LOG_FILE set by us ("" if the user set one) */

/* ---- time and CPU ------------------------------------------------------------ */

double ht_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

void ht_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- data ----------------------------------------------------------------------- */

uint64_t ht_seed(unsigned a, unsigned b, unsigned c)
{
    return ((uint64_t)a << 48) ^ ((uint64_t)b << 24) ^ (uint64_t)c ^ 0x7e5700d5eedull;
}

/* splitmix64 of the seed: distinct seeds give unrelated, non-zero states. */
static uint64_t seed_state(uint64_t seed)
{
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z ? z : 1;
}

static inline uint64_t xs_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

uint64_t ht_rand(uint64_t *state)
{
    if (*state == 0)
        *state = seed_state(0);
    return xs_next(state);
}

HT_HOT void ht_fill(void *buf, size_t len, uint64_t seed, size_t skip)
{
    uint64_t s = seed_state(seed);
    for (size_t k = 0; k < skip; k++)
        xs_next(&s);
    uint8_t *p = buf;
    size_t nw = len / 8;
    for (size_t i = 0; i < nw; i++) {
        uint64_t w = xs_next(&s);
        memcpy(p + 8 * i, &w, 8);
    }
    if (len % 8) {
        uint64_t w = xs_next(&s);
        memcpy(p + 8 * nw, &w, len % 8);
    }
}

HT_HOT int ht_verify(const void *buf, size_t len, uint64_t seed, size_t skip, const char *what)
{
    uint64_t s = seed_state(seed);
    for (size_t k = 0; k < skip; k++)
        xs_next(&s);
    const uint8_t *p = buf;
    size_t nw = (len + 7) / 8, bad = 0, zero = 0, first = SIZE_MAX;
    unsigned got = 0, want = 0;
    for (size_t i = 0; i < nw; i++) {
        uint64_t w = xs_next(&s), g = 0;
        size_t n = (i + 1) * 8 <= len ? 8 : len % 8;
        memcpy(&g, p + 8 * i, n);
        if (n < 8)
            w &= (1ull << (8 * n)) - 1;
        if (g == w)
            continue;
        bad++;
        zero += (g == 0);
        if (first == SIZE_MAX) {
            const uint8_t *gb = (const uint8_t *)&g, *wb = (const uint8_t *)&w;
            size_t j = 0;
            while (j < 8 && gb[j] == wb[j])
                j++;
            first = 8 * i + j;
            got = gb[j];
            want = wb[j];
        }
    }
    if (bad == 0)
        return 0;
    test_say("%s: data mismatch: %zu of %zu words differ (%zu of them zero), first at byte %zu of "
             "%zu (got 0x%02x, want 0x%02x)",
             what, bad, nw, zero, first, len, got, want);
    return -1;
}

void ht_guard_fill(void *buf, size_t len, uint64_t tag)
{
    ht_fill(buf, len, 0x6a09e667f3bcc908ull ^ tag, 0);
}

int ht_guard_check(const void *buf, size_t len, uint64_t tag, const char *what)
{
    char w[320];
    snprintf(w, sizeof(w), "%.200s: GUARD BYTES (%zu) overwritten", what, len);
    return ht_verify(buf, len, 0x6a09e667f3bcc908ull ^ tag, 0, w);
}

/* ---- links ---------------------------------------------------------------------- */

#define HT_MAXLINKS 48
typedef struct {
    int party[2];
    int rd[2]; /* read end of side i */
    int wr[2]; /* write end of side i */
} link_t;
static link_t links[HT_MAXLINKS];
static int nlinks;

int ht_link(int party_a, int party_b)
{
    int ab[2], ba[2];
    if (nlinks == HT_MAXLINKS || pipe(ab) != 0 || pipe(ba) != 0) {
        test_say("cannot create a link: %s", strerror(errno));
        exit(2);
    }
    link_t *l = &links[nlinks];
    l->party[0] = party_a;
    l->party[1] = party_b;
    l->rd[0] = ba[0];
    l->wr[0] = ab[1];
    l->rd[1] = ab[0];
    l->wr[1] = ba[1];
    return nlinks++;
}

static int link_side(int l)
{
    if (l < 0 || l >= nlinks)
        return -1;
    if (links[l].party[0] == ht_me)
        return 0;
    if (links[l].party[1] == ht_me)
        return 1;
    return -1;
}

static const char *link_other(int l)
{
    int s = link_side(l);
    int p = s < 0 ? 0 : links[l].party[1 - s];
    return party_name[p] ? party_name[p] : "?";
}

/* Keep only this party's ends, so a role that dies shows up as EOF. */
static void links_keep_mine(void)
{
    for (int l = 0; l < nlinks; l++) {
        int mine = link_side(l);
        for (int s = 0; s < 2; s++) {
            if (s == mine)
                continue;
            if (links[l].rd[s] >= 0)
                close(links[l].rd[s]);
            if (links[l].wr[s] >= 0)
                close(links[l].wr[s]);
            links[l].rd[s] = links[l].wr[s] = -1;
        }
    }
}

/* A write to a pipe whose reader died must be an error here, not a SIGPIPE
 * (SIGPIPE stays fatal in the roles, where it would be an engine bug). */
int ht_put(int link, uint64_t v)
{
    int s = link_side(link);
    if (s < 0) {
        test_say("ht_put: link %d is not ours", link);
        return -1;
    }
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    ssize_t k;
    do {
        k = write(links[link].wr[s], &v, sizeof(v));
    } while (k < 0 && errno == EINTR);
    int err = errno;
    if (k < 0 && err == EPIPE) {
        struct timespec zero = {0, 0};
        sigtimedwait(&set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (k != (ssize_t)sizeof(v)) {
        test_say("pipe to %s: %s", link_other(link), k < 0 ? strerror(err) : "short write");
        return -1;
    }
    return 0;
}

static int get_common(int link, uint64_t *v, int timeout_ms, tpx_engine_t *engine)
{
    int s = link_side(link);
    if (s < 0) {
        test_say("ht_get: link %d is not ours", link);
        return -1;
    }
    uint64_t t0 = test_now_ns();
    for (;;) {
        int slice = timeout_ms;
        if (engine != NULL) {
            tpx_progress(engine);
            slice = 2;
        }
        struct pollfd p = {links[link].rd[s], POLLIN, 0};
        int r = poll(&p, 1, slice);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            break;
        if (r < 0) {
            test_say("poll on the pipe from %s: %s", link_other(link), strerror(errno));
            return -1;
        }
        if (timeout_ms == 0)
            return 1;
        if (engine == NULL || test_secs_since(t0) * 1000 >= timeout_ms) {
            test_say("timed out after %d ms waiting for %s", timeout_ms, link_other(link));
            return -1;
        }
    }
    ssize_t k;
    do {
        k = read(links[link].rd[s], v, sizeof(*v));
    } while (k < 0 && errno == EINTR);
    if (k == 0) {
        test_say("%s is gone (pipe closed)", link_other(link));
        return -1;
    }
    if (k != (ssize_t)sizeof(*v)) {
        test_say("pipe from %s: %s", link_other(link), k < 0 ? strerror(errno) : "short read");
        return -1;
    }
    return 0;
}

int ht_get(int link, uint64_t *v, int timeout_ms)
{
    return get_common(link, v, timeout_ms, NULL);
}

int ht_get_progress(int link, uint64_t *v, int timeout_ms, tpx_engine_t *engine)
{
    return get_common(link, v, timeout_ms, engine);
}

#define BARRIER_WORD 0xba1212e4ba1212e4ull

int ht_barrier(int link, tpx_engine_t *engine)
{
    uint64_t v = 0;
    if (ht_put(link, BARRIER_WORD) != 0 || get_common(link, &v, HT_PIPE_MS, engine) != 0)
        return -1;
    if (v != BARRIER_WORD) {
        test_say("barrier with %s: got 0x%llx, not the barrier word", link_other(link),
                 (unsigned long long)v);
        return -1;
    }
    return 0;
}

/* ---- processes ------------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int party;
    int expect_sig;
    int reaped;
    ht_role_fn fn;
    int arg;
} kid_t;
static kid_t kids[HT_MAXPARTY];
static int nkids;

void ht_spawn(int party, const char *name, ht_role_fn fn, int arg)
{
    if (nkids == HT_MAXPARTY || party <= HT_SUP || party >= HT_MAXPARTY) {
        test_say("ht_spawn: bad party %d", party);
        exit(2);
    }
    party_name[party] = name;
    kids[nkids].pid = 0;
    kids[nkids].party = party;
    kids[nkids].expect_sig = 0;
    kids[nkids].reaped = 0;
    kids[nkids].fn = fn;
    kids[nkids].arg = arg;
    nkids++;
}

#ifndef __SANITIZE_ADDRESS__
/* A crashing role says where (the sanitizers have their own reports). */
static void crash_handler(int sig)
{
    static const char msg[] = "\n*** role crashed; backtrace:\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    void *frames[64];
    int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    signal(sig, SIG_DFL);
    raise(sig);
}
#endif

static void role_main(const kid_t *k)
{
#ifndef __SANITIZE_ADDRESS__
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        signal(sigs[i], crash_handler);
#endif
    ht_me = k->party;
    test_set_tag("%s/%s", ht_scenario, party_name[ht_me] ? party_name[ht_me] : "?");
    links_keep_mine();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != sup_pid)
        _exit(3);
    alarm(HT_ROLE_ALARM_S);
    /* Load the configuration now: it opens the log file once per process,
     * which the leak checks must count as already there. */
    if (tpx_config_check() != TPX_OK)
        test_say("note: tpx_config_check() reports a malformed TPX_* variable");
    int rc = k->fn(k->arg);
    if (rc == 0)
        test_say("ok");
    exit(rc == 0 ? 0 : 1); /* exit(), not _exit(): LeakSanitizer runs at exit */
}

void ht_start(void)
{
    for (int i = 0; i < nkids; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) {
            test_say("fork: %s", strerror(errno));
            for (int j = 0; j < i; j++)
                kill(kids[j].pid, SIGKILL);
            exit(2);
        }
        if (pid == 0)
            role_main(&kids[i]);
        kids[i].pid = pid;
    }
    links_keep_mine();
}

pid_t ht_pid(int party)
{
    for (int i = 0; i < nkids; i++)
        if (kids[i].party == party)
            return kids[i].pid;
    return -1;
}

void ht_expect_signal(pid_t pid, int sig)
{
    for (int i = 0; i < nkids; i++)
        if (kids[i].pid == pid)
            kids[i].expect_sig = sig;
}

static void log_path(char *out, size_t n, pid_t pid)
{
    /* log_pattern ends in "%p.log" */
    const char *pp = strstr(log_pattern, "%p");
    snprintf(out, n, "%.*s%d%s", (int)(pp - log_pattern), log_pattern, (int)pid, pp + 2);
}

/* Echo a role's tpx log; returns the number of WARN/ERROR lines. */
static int collect_log(const kid_t *k)
{
    if (log_pattern[0] == '\0')
        return 0;
    char path[600];
    log_path(path, sizeof(path), k->pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int bad = 0;
    while (fgets(line, sizeof(line), f)) {
        /* "tpx PID:TID LEVEL file:line message" */
        char level[16] = "";
        if (sscanf(line, "tpx %*s %15s", level) == 1 &&
            (strcmp(level, "WARN") == 0 || strcmp(level, "ERROR") == 0))
            bad++;
        fprintf(stderr, "    log %s: %s", party_name[k->party], line);
        if (line[0] && line[strlen(line) - 1] != '\n')
            fputc('\n', stderr);
    }
    fclose(f);
    unlink(path);
    return bad;
}

int ht_run(void)
{
    ht_start();
    return ht_supervise();
}

int ht_supervise(void)
{
    uint64_t t0 = test_now_ns(), grace_from = 0;
    int failed = 0, left = nkids, killed = 0;
    while (left > 0) {
        int st = 0;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            break;
        if (pid == 0) {
            double el = test_secs_since(t0);
            int grace_over = grace_from && test_secs_since(grace_from) > HT_GRACE_S;
            if (!killed && (el > HT_SUPERVISE_S || grace_over)) {
                for (int i = 0; i < nkids; i++) {
                    if (kids[i].reaped)
                        continue;
                    test_say("killing %s (pid %d): still running %.0f s into the test%s",
                             party_name[kids[i].party], (int)kids[i].pid, el,
                             grace_over ? " and after another role failed" : "");
                    kill(kids[i].pid, SIGKILL);
                    kids[i].expect_sig = 0; /* a straggler is a failure */
                }
                failed = 1;
                killed = 1;
            }
            ht_sleep_ms(10);
            continue;
        }
        kid_t *k = NULL;
        for (int i = 0; i < nkids; i++)
            if (kids[i].pid == pid)
                k = &kids[i];
        if (k == NULL)
            continue;
        k->reaped = 1;
        left--;
        const char *name = party_name[k->party];
        int ok;
        if (k->expect_sig)
            ok = WIFSIGNALED(st) && WTERMSIG(st) == k->expect_sig;
        else
            ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok) {
            if (WIFSIGNALED(st))
                test_say("role %s (pid %d) died of signal %d (%s)%s", name, (int)pid, WTERMSIG(st),
                         strsignal(WTERMSIG(st)),
                         WTERMSIG(st) == SIGALRM ? ": the hang guard fired" : "");
            else
                test_say("role %s (pid %d) failed (exit %d)", name, (int)pid, WEXITSTATUS(st));
            failed = 1;
            if (grace_from == 0)
                grace_from = test_now_ns();
        }
    }
    int warns = 0;
    for (int i = 0; i < nkids; i++)
        warns += collect_log(&kids[i]);
    if (warns && ht_clean) {
        test_say("FAIL: %d unexpected WARN/ERROR log line(s) in a scenario that expects none",
                 warns);
        failed = 1;
    }
    test_say(failed ? "SCENARIO FAILED" : "scenario passed");
    return failed;
}

void ht_init(const char *scenario, int clean)
{
    ht_scenario = scenario;
    test_set_tag("%s/sup", scenario);
    ht_clean = clean;
    sup_pid = getpid();
    setvbuf(stdout, NULL, _IONBF, 0);
    /* Run by hand, the tests still stay on loopback. */
    setenv("TPX_SOCKET_IFNAME", "lo", 0);
    const char *lf = getenv("TPX_LOG_FILE");
    if (lf == NULL || *lf == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(log_pattern, sizeof(log_pattern), "%s/tpx-engine-test.%d.%%p.log",
                 tmp && *tmp ? tmp : "/tmp", (int)sup_pid);
        setenv("TPX_LOG_FILE", log_pattern, 1);
    }
}

/* ---- resources --------------------------------------------------------------------------- */

int ht_fd_count(void)
{
    return test_count_dir("/proc/self/fd");
}

#if defined(__SANITIZE_THREAD__)
#define HT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HT_TSAN 1
#endif
#endif

/* Threads of this process. Under ThreadSanitizer its own helper threads
 * (started when it likes; unnamed, so they carry the program's name, while
 * every tpx thread is named) are left out. */
static int count_threads(void)
{
#ifdef HT_TSAN
    char self[64] = "", name[64], p[300];
    FILE *f = fopen("/proc/self/comm", "r");
    if (f != NULL) {
        if (fgets(self, sizeof(self), f) == NULL)
            self[0] = '\0';
        fclose(f);
    }
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "/proc/self/task/%s/comm", de->d_name);
        name[0] = '\0';
        if ((f = fopen(p, "r")) != NULL) {
            if (fgets(name, sizeof(name), f) == NULL)
                name[0] = '\0';
            fclose(f);
        }
        n += strcmp(name, self) != 0;
    }
    closedir(d);
    return n + 1; /* the main thread, which has the program's name too */
#else
    return test_count_dir("/proc/self/task");
#endif
}

ht_res_t ht_res_now(void)
{
    ht_res_t r = {test_count_dir("/proc/self/fd"), count_threads()};
    return r;
}

/* The TCP sockets of this process's network namespace, from /proc. */
typedef struct {
    unsigned long inode;
    unsigned state, lport, rport;
} tcp_ent_t;

static int tcp_table(tcp_ent_t *t, int cap)
{
    const char *files[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
    int n = 0;
    for (int f = 0; f < 2; f++) {
        FILE *fp = fopen(files[f], "r");
        if (fp == NULL)
            continue;
        char line[512];
        while (n < cap && fgets(line, sizeof(line), fp)) {
            char la[64], ra[64];
            if (sscanf(line, " %*d: %63s %63s %x %*s %*s %*s %*s %*s %lu", la, ra, &t[n].state,
                       &t[n].inode) != 4)
                continue;
            const char *lp = strrchr(la, ':'), *rp = strrchr(ra, ':');
            t[n].lport = lp ? (unsigned)strtoul(lp + 1, NULL, 16) : 0;
            t[n].rport = rp ? (unsigned)strtoul(rp + 1, NULL, 16) : 0;
            n++;
        }
        fclose(fp);
    }
    return n;
}

/* Every fd and what it is; sockets with their TCP state ("" when the socket
 * is not in the TCP table: never connected, or its connect failed). */
void ht_dump_fds(void)
{
    static const char *const states[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                         "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                         "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
    enum { TCAP = 16384 };
    tcp_ent_t *tab = calloc(TCAP, sizeof(*tab));
    int ntab = tab ? tcp_table(tab, TCAP) : 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL) {
        free(tab);
        return;
    }
    struct dirent *de;
    int shown = 0, sockets = 0, notcp = 0, bystate[12] = {0};
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char p[300], t[300], desc[128] = "";
        snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
        ssize_t n = readlink(p, t, sizeof(t) - 1);
        t[n > 0 ? n : 0] = '\0';
        unsigned long ino;
        if (sscanf(t, "socket:[%lu]", &ino) == 1) {
            sockets++;
            int k = 0;
            while (k < ntab && tab[k].inode != ino)
                k++;
            if (k < ntab && tab[k].state < 12) {
                bystate[tab[k].state]++;
                snprintf(desc, sizeof(desc), "tcp %s :%u->:%u", states[tab[k].state], tab[k].lport,
                         tab[k].rport);
            } else {
                notcp++;
                snprintf(desc, sizeof(desc), "(not in the TCP table)");
            }
        }
        if (shown++ < 40)
            test_say("  fd %s -> %s %s", de->d_name, t, desc);
    }
    closedir(d);
    free(tab);
    if (shown > 40)
        test_say("  ... %d fds in all", shown);
    test_say("  sockets: %d: %d listening, %d established, %d close-wait, %d other TCP, %d not in "
             "the TCP table (unconnected or failed connect)",
             sockets, bystate[10], bystate[1], bystate[8],
             sockets - notcp - bystate[10] - bystate[1] - bystate[8], notcp);
}

static void dump_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char p[300], name[64] = "";
        snprintf(p, sizeof(p), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(p, "r");
        if (f) {
            if (fgets(name, sizeof(name), f) == NULL)
                name[0] = '\0';
            fclose(f);
        }
        name[strcspn(name, "\n")] = '\0';
        test_say("  thread %s: %s", de->d_name, name);
    }
    closedir(d);
}

int ht_res_check(ht_res_t before, const char *when)
{
    /* Threads of a destroyed engine may take a moment to be reaped. */
    ht_res_t now = ht_res_now();
    for (int i = 0; i < 100 && (now.fds > before.fds || now.threads > before.threads); i++) {
        ht_sleep_ms(20);
        now = ht_res_now();
    }
    if (now.fds > before.fds || now.threads > before.threads) {
        test_say("FAIL: leak %s: fds %d -> %d, threads %d -> %d", when, before.fds, now.fds,
                 before.threads, now.threads);
        ht_dump_fds();
        dump_threads();
        return 1;
    }
    return 0;
}

/* ---- engine helpers -------------------------------------------------------------------------- */

tpx_engine_t *ht_engine(int port, int channels, int window, int progress_thread, const char *token)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.port = port;
    if (channels > 0)
        p.channels = channels;
    if (window > 0)
        p.window = window;
    p.progress_thread = progress_thread;
    if (token != NULL)
        p.auth_token = token;
    tpx_engine_t *e = NULL;
    tpx_status_t st = tpx_engine_create(&p, &e);
    if (st != TPX_OK || e == NULL) {
        test_say("tpx_engine_create(port %d, channels %d, window %d, thread %d): %s (%d)", port,
                 channels, window, progress_thread, tpx_status_string(st), (int)st);
        return NULL;
    }
    return e;
}

int ht_connect(tpx_engine_t *e, int port, tpx_peer_t **peer)
{
    uint64_t t0 = test_now_ns();
    tpx_status_t st = tpx_peer_connect(e, HT_HOST, port, HT_CONN_MS, peer);
    if (st != TPX_OK) {
        test_say("tpx_peer_connect(%s:%d): %s (%d) after %.3f s", HT_HOST, port, tpx_status_string(st),
                 (int)st, test_secs_since(t0));
        return -1;
    }
    return 0;
}

int ht_dial(tpx_engine_t *e, int link, tpx_peer_t **peer)
{
    uint64_t port;
    if (ht_get(link, &port, HT_PIPE_MS) != 0)
        return -1;
    return ht_connect(e, (int)port, peer);
}

int ht_accept(tpx_engine_t *e, tpx_peer_t **peer)
{
    uint64_t t0 = test_now_ns();
    tpx_status_t st = tpx_peer_accept(e, HT_CONN_MS, peer);
    if (st != TPX_OK) {
        test_say("tpx_peer_accept: %s (%d) after %.3f s", tpx_status_string(st), (int)st,
                 test_secs_since(t0));
        return -1;
    }
    return 0;
}

int ht_buf_new(tpx_engine_t *e, size_t len, ht_buf_t *b)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t map = (len + pg - 1) / pg * pg;
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        test_say("mmap(%zu): %s", map, strerror(errno));
        return -1;
    }
    tpx_region_t *r = NULL;
    tpx_status_t st = tpx_mem_register(e, p, len, TPX_MEM_HOST, &r);
    if (st != TPX_OK || r == NULL) {
        test_say("tpx_mem_register(%zu bytes): %s (%d)", len, tpx_status_string(st), (int)st);
        munmap(p, map);
        return -1;
    }
    b->p = p;
    b->len = len;
    b->reg = r;
    return 0;
}

void ht_buf_free(ht_buf_t *b)
{
    if (b->reg)
        tpx_mem_deregister(b->reg);
    if (b->p) {
        size_t pg = (size_t)sysconf(_SC_PAGESIZE);
        munmap(b->p, (b->len + pg - 1) / pg * pg);
    }
    b->p = NULL;
    b->reg = NULL;
    b->len = 0;
}

int ht_wait(tpx_xfer_t *x, size_t len, const char *what)
{
    size_t bytes = (size_t)-1;
    uint64_t t0 = test_now_ns();
    tpx_status_t st = tpx_xfer_wait(x, -1, &bytes);
    tpx_xfer_release(x);
    if (st != TPX_OK) {
        test_say("%s: tpx_xfer_wait: %s (%d) after %.3f s", what, tpx_status_string(st), (int)st,
                 test_secs_since(t0));
        return -1;
    }
    if (bytes != len) {
        test_say("%s: %zu bytes reported, expected %zu", what, bytes, len);
        return -1;
    }
    return 0;
}

int ht_exchange(tpx_engine_t *e, tpx_peer_t *peer, size_t len, uint64_t seed_out, uint64_t seed_in,
                const char *what)
{
    ht_buf_t s = {0}, r = {0};
    tpx_xfer_t *xs = NULL, *xr = NULL;
    int rc = -1;
    char w[256];
    if (ht_buf_new(e, len, &s) != 0 || ht_buf_new(e, len + 2 * HT_GUARD, &r) != 0)
        goto out;
    ht_fill(s.p, len, seed_out, 0);
    ht_guard_fill(r.p, HT_GUARD, 1);
    ht_guard_fill(r.p + HT_GUARD + len, HT_GUARD, 2);
    tpx_status_t st = tpx_recv(peer, r.reg, HT_GUARD, len, &xr);
    if (st != TPX_OK) {
        test_say("%s: tpx_recv(%zu): %s (%d)", what, len, tpx_status_string(st), (int)st);
        goto out;
    }
    st = tpx_send(peer, s.reg, 0, len, &xs);
    if (st != TPX_OK) {
        test_say("%s: tpx_send(%zu): %s (%d)", what, len, tpx_status_string(st), (int)st);
        tpx_xfer_release(xr);
        goto out;
    }
    snprintf(w, sizeof(w), "%s: send of %zu", what, len);
    int bad = ht_wait(xs, len, w);
    snprintf(w, sizeof(w), "%s: recv of %zu", what, len);
    bad |= ht_wait(xr, len, w);
    if (bad)
        goto out;
    snprintf(w, sizeof(w), "%s: received %zu bytes", what, len);
    if (ht_verify(r.p + HT_GUARD, len, seed_in, 0, w) != 0 ||
        ht_guard_check(r.p, HT_GUARD, 1, w) != 0 ||
        ht_guard_check(r.p + HT_GUARD + len, HT_GUARD, 2, w) != 0)
        goto out;
    rc = 0;
out:
    ht_buf_free(&s);
    ht_buf_free(&r);
    return rc;
}

int ht_finish(tpx_engine_t *e, tpx_peer_t *peer, ht_buf_t *buf, ht_res_t before)
{
    if (peer != NULL)
        tpx_peer_close(peer);
    if (buf != NULL)
        ht_buf_free(buf);
    tpx_engine_destroy(e);
    return ht_res_check(before, "after tpx_engine_destroy");
}
