/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_cluster.c - `tpx-perf --metadata etcd://...`: engines that find each
 * other through the registry (tpx/registry.h) and one-sided READs between
 * them, N servers x M clients.
 *
 *   server --name NAME   one engine named NAME exports --size bytes (the
 *                        pattern of bench_fill keyed by NAME) and publishes
 *                        itself; it serves until SIGINT/SIGTERM or
 *                        --duration, then unpublishes
 *   client --peer A,B|all  one engine looks the servers up by name (all:
 *                        every name in the registry, --peers N of them
 *                        awaited) and READs every server's export from all
 *                        of them at once, --iters times; it prints per-pair
 *                        and total GB/s and checks every byte it read
 *   list                 the names in the registry, one a line
 *   --cluster N,M        this host runs N servers and M clients (each its
 *                        own process, this tool again); the clients start
 *                        their timed READs together; one table: every pair
 *                        and the total
 *
 * Per-pair GB/s: the pair's bytes over its own time (in every round, from
 * the post of all the client's READs to this pair's completion: the pairs
 * of a client share its engine and links); a client's total is all its
 * bytes over its timed phase; the cluster's total is every client's bytes
 * over the longest client phase.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "perf_cluster.h"
#include "tpx/registry.h"
#include "tpx/tpx.h"

#define PC_PROG         "tpx-perf"
#define PC_MAX_PEERS    64
#define PC_MAX_CLUSTER  32
#define PC_DEFAULT_SIZE (64ull << 20)

typedef struct {
    const char *metadata;
    const char *name;  /* server: this engine's name; client: its own (optional) */
    const char *peers; /* client: "A,B" or "all" */
    int npeers_wait;   /* client --peers N: wait for N names */
    uint64_t size, iters, warmup;
    int ttl, duration, timeout_s;
    int verify;
    int barrier; /* client: "ready" on stdout, then wait for a line on stdin */
    int machine; /* client: "# pair" lines for the --cluster parent */
    int cluster_n, cluster_m;
    const char *argv0;
} pc_opts_t;

static volatile sig_atomic_t pc_stop;
static void pc_on_signal(int sig)
{
    (void)sig;
    pc_stop = 1;
}

/* The pattern key of a server's export: a hash of its name. */
static uint64_t pc_key(const char *name)
{
    uint64_t h = BENCH_FNV_BASIS;
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * BENCH_FNV_PRIME;
    return h;
}

static tpx_engine_t *pc_engine(const char *name, int listen)
{
    tpx_engine_params_t ep;
    tpx_engine_params_init(&ep);
    ep.name = name;
    ep.port = listen ? TPX_PORT_EPHEMERAL : TPX_PORT_NONE;
    tpx_engine_t *e = NULL;
    tpx_status_t st = tpx_engine_create(&ep, &e);
    if (st != TPX_OK)
        fprintf(stderr, "%s: tpx_engine_create(%s): %s\n", PC_PROG, name ? name : "",
                tpx_status_string(st));
    return e;
}

/* ---- server ---- */

static int pc_server(const pc_opts_t *o)
{
    int rc = BENCH_EXIT_FAIL;
    tpx_registry_t *reg = NULL;
    tpx_region_t *region = NULL;
    unsigned char *mem = NULL;
    tpx_engine_t *e = pc_engine(o->name, 1);
    if (e == NULL)
        return BENCH_EXIT_FAIL;
    mem = malloc(o->size ? o->size : 1);
    if (mem == NULL) {
        fprintf(stderr, "%s: server %s: out of memory\n", PC_PROG, o->name);
        goto out;
    }
    bench_fill(mem, o->size, pc_key(o->name));
    tpx_rdesc_t d;
    tpx_status_t st = tpx_mem_register(e, mem, o->size, TPX_MEM_HOST, &region);
    if (st == TPX_OK)
        st = tpx_region_export(region, 0, 0, &d);
    if (st == TPX_OK)
        st = tpx_registry_open(o->metadata, NULL, &reg);
    if (st == TPX_OK)
        st = tpx_registry_publish(reg, e, &d, 1, o->ttl);
    if (st != TPX_OK) {
        fprintf(stderr, "%s: server %s: %s\n", PC_PROG, o->name, tpx_status_string(st));
        goto out;
    }
    if (!bench_quiet)
        printf("# server %s published (engine port %d, %" PRIu64 " bytes exported)\n", o->name,
               tpx_engine_port(e), o->size);
    fflush(stdout);
    signal(SIGINT, pc_on_signal);
    signal(SIGTERM, pc_on_signal);
    uint64_t end = o->duration > 0 ? bench_now_ns() + (uint64_t)o->duration * 1000000000ull : 0;
    while (!pc_stop && (end == 0 || bench_now_ns() < end))
        usleep(100000);
    tpx_registry_unpublish(reg, e);
    rc = BENCH_EXIT_OK;
out:
    tpx_registry_close(reg);
    if (region != NULL)
        tpx_mem_deregister(region);
    tpx_engine_destroy(e);
    free(mem);
    return rc;
}

/* ---- client ---- */

typedef struct {
    char name[TPX_NAME_MAX];
    tpx_remote_t *rm;
    tpx_rdesc_t desc;
    unsigned char *buf;
    tpx_region_t *region;
    tpx_xfer_t *x;
    uint64_t busy_ns; /* timed rounds: post to this pair's completion, summed */
    uint64_t bytes;
    int verified;
} pc_peer_t;

/* The server names to read from: the list, or every published name
 * (waiting up to the timeout for --peers N of them). */
static int pc_peer_names(const pc_opts_t *o, tpx_registry_t *reg, char (*names)[TPX_NAME_MAX],
                         int *n)
{
    *n = 0;
    if (strcmp(o->peers, "all") != 0) {
        const char *s = o->peers;
        while (*s != '\0' && *n < PC_MAX_PEERS) {
            size_t l = strcspn(s, ",");
            if (l == 0 || l >= TPX_NAME_MAX) {
                fprintf(stderr, "%s: --peer: bad name in '%s'\n", PC_PROG, o->peers);
                return -1;
            }
            memcpy(names[*n], s, l);
            names[(*n)++][l] = '\0';
            s += l + (s[l] == ',');
        }
        /* Servers started at the same time may not be published yet: wait
         * (quietly) for the names; the lookups after say what is missing. */
        static char have[PC_MAX_PEERS][TPX_NAME_MAX];
        uint64_t end = bench_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
        for (;;) {
            size_t total = 0;
            int found = 0;
            if (tpx_registry_list(reg, have, PC_MAX_PEERS, &total) == TPX_OK)
                for (int i = 0; i < *n; i++)
                    for (size_t k = 0; k < total && k < PC_MAX_PEERS; k++)
                        found += strcmp(have[k], names[i]) == 0;
            if (found == *n || bench_now_ns() > end)
                return 0;
            usleep(100000);
        }
    }
    uint64_t end = bench_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
    for (;;) {
        size_t total = 0;
        tpx_status_t st = tpx_registry_list(reg, names, PC_MAX_PEERS, &total);
        if (st != TPX_OK) {
            fprintf(stderr, "%s: client: listing the registry: %s\n", PC_PROG, tpx_status_string(st));
            return -1;
        }
        *n = (int)(total < PC_MAX_PEERS ? total : PC_MAX_PEERS);
        if (*n >= (o->npeers_wait > 0 ? o->npeers_wait : 1))
            return 0;
        if (bench_now_ns() > end) {
            fprintf(stderr, "%s: client: %d server(s) in the registry after %d s, waiting for %d\n",
                    PC_PROG, *n, o->timeout_s, o->npeers_wait > 0 ? o->npeers_wait : 1);
            return -1;
        }
        usleep(100000);
    }
}

/* Post one READ of every peer's export at once and wait for all, noting
 * when each completed (its time in the round is added to p->busy_ns). */
static int pc_round(tpx_engine_t *e, pc_peer_t *p, int n, int timeout_ms, const char *who)
{
    int bad = 0, left = 0;
    uint64_t t0 = bench_now_ns(), end = t0 + (uint64_t)timeout_ms * 1000000ull;
    for (int i = 0; i < n; i++) {
        tpx_iov_t v = {.local = p[i].region, .remote = &p[i].desc, .len = p[i].bytes};
        tpx_status_t st = tpx_rma(p[i].rm, TPX_OP_READ, &v, 1, NULL, 0, &p[i].x);
        if (st != TPX_OK) {
            fprintf(stderr, "%s: client %s: READ from %s: %s\n", PC_PROG, who, p[i].name,
                    tpx_status_string(st));
            p[i].x = NULL;
            bad = 1;
        }
        left += p[i].x != NULL;
    }
    while (left > 0) {
        for (int i = 0; i < n; i++) {
            if (p[i].x == NULL)
                continue;
            tpx_status_t st = tpx_xfer_poll(p[i].x, NULL);
            if (st == TPX_INPROGRESS && bench_now_ns() < end)
                continue;
            p[i].busy_ns += bench_now_ns() - t0;
            tpx_xfer_release(p[i].x);
            p[i].x = NULL;
            left--;
            if (st != TPX_OK) {
                fprintf(stderr, "%s: client %s: READ from %s: %s\n", PC_PROG, who, p[i].name,
                        st == TPX_INPROGRESS ? "no completion within --timeout" : tpx_status_string(st));
                bad = 1;
            }
        }
        if (left > 0) { /* the engine's fd turns readable on a completion */
            struct pollfd pf = {.fd = tpx_engine_fd(e), .events = POLLIN};
            poll(&pf, 1, 1);
        }
    }
    return bad ? -1 : 0;
}

static int pc_verify(pc_peer_t *p, int n, const char *who)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        uint64_t csum = BENCH_FNV_BASIS, at = 0;
        if (bench_check(p[i].buf, p[i].bytes, pc_key(p[i].name), &csum, &at) != 0) {
            fprintf(stderr, "%s: client %s: the bytes read from %s differ at offset %" PRIu64 "\n",
                    PC_PROG, who, p[i].name, at);
            bad = 1;
        } else {
            p[i].verified = 1;
        }
    }
    return bad ? -1 : 0;
}

static int pc_client(const pc_opts_t *o)
{
    char me[TPX_NAME_MAX];
    snprintf(me, sizeof(me), "%s", o->name ? o->name : "");
    if (me[0] == '\0')
        snprintf(me, sizeof(me), "client-%d", (int)getpid());
    static char names[PC_MAX_PEERS][TPX_NAME_MAX];
    static pc_peer_t peers[PC_MAX_PEERS];
    static tpx_registry_entry_t ent;
    int n = 0, rc = BENCH_EXIT_FAIL;
    tpx_registry_t *reg = NULL;
    tpx_engine_t *e = pc_engine(me, 0);
    if (e == NULL)
        return BENCH_EXIT_FAIL;
    tpx_status_t st = tpx_registry_open(o->metadata, NULL, &reg);
    if (st != TPX_OK || pc_peer_names(o, reg, names, &n) != 0)
        goto out;
    for (int i = 0; i < n; i++) {
        pc_peer_t *p = &peers[i];
        snprintf(p->name, sizeof(p->name), "%.63s", names[i]);
        st = tpx_registry_load_remote(reg, e, p->name, &p->rm, &ent);
        if (st == TPX_OK && ent.ndescs < 1) {
            fprintf(stderr, "%s: client %s: %s exports nothing\n", PC_PROG, me, p->name);
            goto out;
        }
        uint64_t len = 0;
        if (st == TPX_OK) {
            p->desc = ent.descs[0];
            st = tpx_rdesc_info(&p->desc, NULL, &len);
        }
        if (st != TPX_OK) {
            fprintf(stderr, "%s: client %s: %s: %s\n", PC_PROG, me, p->name, tpx_status_string(st));
            goto out;
        }
        p->bytes = o->size > 0 && o->size < len ? o->size : len;
        p->buf = malloc(p->bytes ? p->bytes : 1);
        if (p->buf == NULL ||
            tpx_mem_register(e, p->buf, p->bytes, TPX_MEM_HOST, &p->region) != TPX_OK) {
            fprintf(stderr, "%s: client %s: cannot allocate and register %" PRIu64 " bytes\n",
                    PC_PROG, me, p->bytes);
            goto out;
        }
        memset(p->buf, 0, p->bytes);
    }
    int tmo = o->timeout_s * 1000;
    /* warm-up: connects every pair; the first round is checked */
    for (uint64_t i = 0; i < (o->warmup > 0 ? o->warmup : 1); i++)
        if (pc_round(e, peers, n, tmo, me) != 0)
            goto out;
    if (o->verify && pc_verify(peers, n, me) != 0)
        goto out;
    if (o->barrier) {
        printf("ready\n");
        fflush(stdout);
        char line[16];
        if (fgets(line, sizeof(line), stdin) == NULL)
            goto out;
    }
    for (int i = 0; i < n; i++) {
        memset(peers[i].buf, 0, peers[i].bytes);
        peers[i].busy_ns = 0;
    }
    uint64_t t0 = bench_now_ns();
    for (uint64_t it = 0; it < o->iters; it++)
        if (pc_round(e, peers, n, tmo, me) != 0)
            goto out;
    uint64_t ns = bench_now_ns() - t0;
    if (o->verify && pc_verify(peers, n, me) != 0)
        goto out;
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = peers[i].bytes * o->iters, t = peers[i].busy_ns ? peers[i].busy_ns : 1;
        total += b;
        if (o->machine)
            printf("# pair %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %d\n", me, peers[i].name, b, t,
                   ns, peers[i].verified);
        else
            printf("%-20s %-20s %14" PRIu64 " %10.3f %s\n", me, peers[i].name, b,
                   (double)b / (double)t, peers[i].verified ? "yes" : "no");
    }
    if (!o->machine)
        printf("# client %s: %.3f GB/s from %d server%s (%" PRIu64 " bytes in %.3f s)%s\n", me,
               (double)total / (double)ns, n, n == 1 ? "" : "s", total, (double)ns / 1e9,
               o->verify ? "; all data verified" : "");
    fflush(stdout);
    rc = BENCH_EXIT_OK;
out:
    for (int i = 0; i < n; i++) {
        if (peers[i].region != NULL)
            tpx_mem_deregister(peers[i].region);
        if (peers[i].rm != NULL)
            tpx_remote_release(peers[i].rm);
        free(peers[i].buf);
    }
    tpx_registry_close(reg);
    tpx_engine_destroy(e);
    return rc;
}

/* ---- --cluster N,M on this host ---- */

typedef struct {
    pid_t pid;
    FILE *out; /* its stdout */
    int in;    /* its stdin (clients: the start line) */
} pc_child_t;

static int pc_spawn(const pc_opts_t *o, const char *const *args, pc_child_t *c)
{
    int out[2], in[2];
    if (pipe(out) != 0 || pipe(in) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(in[0], 0);
        close(out[0]);
        close(out[1]);
        close(in[0]);
        close(in[1]);
        execv(o->argv0, (char *const *)args);
        fprintf(stderr, "%s: cannot run %s: %s\n", PC_PROG, o->argv0, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(in[0]);
    c->pid = pid;
    c->out = fdopen(out[0], "r");
    c->in = in[1];
    return pid > 0 && c->out != NULL ? 0 : -1;
}

/* A line from a child, with a deadline. */
static char *pc_line(pc_child_t *c, char *buf, size_t len, int timeout_s)
{
    struct pollfd pf = {.fd = fileno(c->out), .events = POLLIN};
    if (poll(&pf, 1, timeout_s * 1000) <= 0)
        return NULL;
    return fgets(buf, (int)len, c->out);
}

static int pc_cluster(const pc_opts_t *o)
{
    pc_child_t srv[PC_MAX_CLUSTER], cli[PC_MAX_CLUSTER];
    int ns = 0, nc = 0, rc = BENCH_EXIT_FAIL;
    char size[32], iters[32], ttl[16], tmo[16], peers[32], line[512];
    char names[PC_MAX_CLUSTER][TPX_NAME_MAX], cnames[PC_MAX_CLUSTER][TPX_NAME_MAX];
    snprintf(size, sizeof(size), "%" PRIu64, o->size);
    snprintf(iters, sizeof(iters), "%" PRIu64, o->iters);
    snprintf(ttl, sizeof(ttl), "%d",
             o->ttl > 0 ? o->ttl : (int)bench_config_int("TPX_METADATA_TTL"));
    snprintf(tmo, sizeof(tmo), "%d", o->timeout_s);
    signal(SIGPIPE, SIG_IGN);
    printf("# tpx-perf --cluster %d,%d: %d servers x %d clients on this host, registry %s, "
           "%" PRIu64 " bytes per READ, %" PRIu64 " rounds\n",
           o->cluster_n, o->cluster_m, o->cluster_n, o->cluster_m, o->metadata, o->size, o->iters);
    fflush(stdout);
    for (; ns < o->cluster_n; ns++) {
        snprintf(names[ns], sizeof(names[ns]), "perf-%d-s%d", (int)getpid(), ns);
        const char *args[] = {o->argv0, "--metadata", o->metadata, "server", "--name",  names[ns],
                              "--size", size,         "--ttl",     ttl,      "--quiet", NULL};
        if (pc_spawn(o, args, &srv[ns]) != 0)
            goto out;
    }
    /* the clients read from exactly these servers */
    char list[PC_MAX_CLUSTER * (TPX_NAME_MAX + 1)] = "";
    for (int i = 0; i < ns; i++) {
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s%s", i ? "," : "", names[i]);
    }
    snprintf(peers, sizeof(peers), "%d", ns);
    /* wait until every server is published: a client that looks up too early fails */
    {
        tpx_registry_t *reg = NULL;
        uint64_t end = bench_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
        if (tpx_registry_open(o->metadata, NULL, &reg) != TPX_OK)
            goto out;
        static char have[PC_MAX_PEERS][TPX_NAME_MAX];
        for (;;) {
            size_t total = 0;
            int found = 0;
            if (tpx_registry_list(reg, have, PC_MAX_PEERS, &total) == TPX_OK)
                for (int i = 0; i < ns; i++)
                    for (size_t k = 0; k < total && k < PC_MAX_PEERS; k++)
                        found += strcmp(have[k], names[i]) == 0;
            if (found == ns)
                break;
            int dead = 0;
            for (int i = 0; i < ns; i++)
                dead |= waitpid(srv[i].pid, NULL, WNOHANG) == srv[i].pid;
            if (dead) {
                fprintf(stderr, "%s: --cluster: a server exited (see its error above)\n", PC_PROG);
                tpx_registry_close(reg);
                goto out;
            }
            if (bench_now_ns() > end) {
                fprintf(stderr, "%s: --cluster: %d of %d servers appeared in the registry\n",
                        PC_PROG, found, ns);
                tpx_registry_close(reg);
                goto out;
            }
            usleep(100000);
        }
        tpx_registry_close(reg);
    }
    for (; nc < o->cluster_m; nc++) {
        snprintf(cnames[nc], sizeof(cnames[nc]), "perf-%d-c%d", (int)getpid(), nc);
        const char *args[] = {
            o->argv0,    "--metadata", o->metadata, "client",
            "--peer",    list,         "--name",    cnames[nc],
            "--size",    size,         "--iters",   iters,
            "--timeout", tmo,          "--barrier", o->verify ? "--verify" : "--no-verify",
            NULL};
        if (pc_spawn(o, args, &cli[nc]) != 0)
            goto out;
    }
    for (int i = 0; i < nc; i++)
        if (pc_line(&cli[i], line, sizeof(line), o->timeout_s) == NULL ||
            strcmp(line, "ready\n") != 0) {
            fprintf(stderr, "%s: --cluster: client %s did not get ready (see its error above)\n",
                    PC_PROG, cnames[i]);
            goto out;
        }
    for (int i = 0; i < nc; i++) /* all start their timed rounds now */
        if (write(cli[i].in, "go\n", 3) != 3)
            goto out;
    printf("%-20s %-20s %14s %10s %s\n", "client", "server", "bytes", "GB/s", "verified");
    uint64_t total = 0, longest = 0;
    int pairs = 0, all_ok = 1;
    for (int i = 0; i < nc; i++) {
        for (int k = 0; k < ns; k++) {
            char c[TPX_NAME_MAX], s[TPX_NAME_MAX];
            uint64_t b, t, wall;
            int v;
            if (pc_line(&cli[i], line, sizeof(line), o->timeout_s + 60) == NULL ||
                sscanf(line, "# pair %63s %63s %" SCNu64 " %" SCNu64 " %" SCNu64 " %d", c, s, &b,
                       &t, &wall, &v) != 6) {
                fprintf(stderr, "%s: --cluster: client %s reported no result for every server\n",
                        PC_PROG, cnames[i]);
                goto out;
            }
            printf("%-20s %-20s %14" PRIu64 " %10.3f %s\n", c, s, b,
                   t ? (double)b / (double)t : 0.0, v ? "yes" : "no");
            total += b;
            longest = wall > longest ? wall : longest;
            all_ok &= v || !o->verify;
            pairs++;
        }
    }
    for (int i = 0; i < nc; i++) {
        int st;
        close(cli[i].in);
        cli[i].in = -1;
        waitpid(cli[i].pid, &st, 0);
        cli[i].pid = 0;
        all_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    printf("# total: %.3f GB/s over %d pairs (%d servers x %d clients, %" PRIu64
           " bytes, longest client %.3f s)%s\n",
           longest ? (double)total / (double)longest : 0.0, pairs, ns, nc, total,
           (double)longest / 1e9, all_ok && o->verify ? "; all data verified" : "");
    rc = all_ok && pairs == ns * nc ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
out:
    for (int i = 0; i < nc; i++) {
        if (cli[i].in >= 0)
            close(cli[i].in);
        if (cli[i].pid > 0) {
            kill(cli[i].pid, SIGTERM);
            waitpid(cli[i].pid, NULL, 0);
        }
        fclose(cli[i].out);
    }
    for (int i = 0; i < ns; i++) {
        kill(srv[i].pid, SIGTERM); /* each unpublishes itself */
        int st = 0;
        if (waitpid(srv[i].pid, &st, 0) == srv[i].pid && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
            rc = BENCH_EXIT_FAIL;
        close(srv[i].in);
        fclose(srv[i].out);
    }
    fflush(stdout);
    return rc;
}

const char perf_cluster_usage[] =
    "    --metadata etcd://H:P[,H:P]  engines meet through etcd (tpx/registry.h)\n"
    "    server --name NAME   export --size bytes and publish; serve until SIGINT/SIGTERM\n"
    "                         or --duration S; --ttl S: the lease (TPX_METADATA_TTL)\n"
    "    client --peer A,B|all  READ every server's export from all at once, --iters\n"
    "                         rounds; --peers N: with all, wait for N servers\n"
    "    list                 the names published (one a line)\n"
    "    --cluster N,M        N servers and M clients on this host: every client\n"
    "                         reads from every server; per-pair and total GB/s\n"
    "    --size S (64M), --iters N (10), --timeout S (60), --verify | --no-verify\n";

int perf_cluster_main(int argc, char **argv)
{
    enum {
        O_META = 256,
        O_NAME,
        O_PEER,
        O_PEERS,
        O_SIZE,
        O_ITERS,
        O_TTL,
        O_DUR,
        O_TMO,
        O_CLUSTER,
        O_BARRIER,
        O_VERIFY,
        O_NOVERIFY
    };
    static const struct option opts[] = {
        {"metadata", required_argument, NULL, O_META},
        {"name", required_argument, NULL, O_NAME},
        {"peer", required_argument, NULL, O_PEER},
        {"peers", required_argument, NULL, O_PEERS},
        {"size", required_argument, NULL, O_SIZE},
        {"iters", required_argument, NULL, O_ITERS},
        {"ttl", required_argument, NULL, O_TTL},
        {"duration", required_argument, NULL, O_DUR},
        {"timeout", required_argument, NULL, O_TMO},
        {"cluster", required_argument, NULL, O_CLUSTER},
        {"barrier", no_argument, NULL, O_BARRIER},
        {"verify", no_argument, NULL, O_VERIFY},
        {"no-verify", no_argument, NULL, O_NOVERIFY},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pc_opts_t o = {.size = PC_DEFAULT_SIZE,
                   .iters = 10,
                   .warmup = 1,
                   .timeout_s = 60,
                   .verify = 1,
                   .argv0 = argv[0]};
    uint64_t v;
    int c;
    bench_prog = PC_PROG;
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case O_META:
            o.metadata = optarg;
            break;
        case O_NAME:
            o.name = optarg;
            break;
        case O_PEER:
            o.peers = optarg;
            break;
        case O_PEERS:
            if (bench_parse_uint(optarg, 1, PC_MAX_PEERS, &v) != 0)
                return bench_usage_error("--peers: '%s' is not in 1..%d", optarg, PC_MAX_PEERS);
            o.npeers_wait = (int)v;
            break;
        case O_SIZE:
            if (bench_parse_size(optarg, &v) != 0 || v == 0 || v > (4ull << 30))
                return bench_usage_error("--size: bad size '%s' (1 .. 4G)", optarg);
            o.size = v;
            break;
        case O_ITERS:
            if (bench_parse_uint(optarg, 1, 1000000, &v) != 0)
                return bench_usage_error("--iters: '%s' is not a count >= 1", optarg);
            o.iters = v;
            break;
        case O_TTL:
            if (bench_parse_uint(optarg, 2, 3600, &v) != 0)
                return bench_usage_error("--ttl: '%s' is not in 2..3600 seconds", optarg);
            o.ttl = (int)v;
            break;
        case O_DUR:
            if (bench_parse_uint(optarg, 1, 86400 * 365, &v) != 0)
                return bench_usage_error("--duration: '%s' is not a number of seconds", optarg);
            o.duration = (int)v;
            break;
        case O_TMO:
            if (bench_parse_uint(optarg, 1, 86400, &v) != 0)
                return bench_usage_error("--timeout: '%s' is not in 1..86400 seconds", optarg);
            o.timeout_s = (int)v;
            break;
        case O_CLUSTER: {
            unsigned a, b;
            char extra;
            if (sscanf(optarg, "%u,%u%c", &a, &b, &extra) != 2 || a < 1 || b < 1 ||
                a > PC_MAX_CLUSTER || b > PC_MAX_CLUSTER)
                return bench_usage_error("--cluster: '%s' is not N,M (servers, clients; 1..%d)",
                                         optarg, PC_MAX_CLUSTER);
            o.cluster_n = (int)a;
            o.cluster_m = (int)b;
            break;
        }
        case O_BARRIER:
            o.barrier = 1;
            o.machine = 1;
            break;
        case O_VERIFY:
            o.verify = 1;
            break;
        case O_NOVERIFY:
            o.verify = 0;
            break;
        case 'q':
            bench_quiet = 1;
            break;
        case 'h':
            printf("%s --metadata etcd://HOST:PORT server --name NAME | client --peer NAME | "
                   "--cluster N,M\n%s",
                   PC_PROG, perf_cluster_usage);
            return BENCH_EXIT_OK;
        default:
            fprintf(stderr, "Try '%s --help'.\n", PC_PROG);
            return BENCH_EXIT_USAGE;
        }
    }
    if (o.metadata == NULL || o.metadata[0] == '\0')
        o.metadata = getenv("TPX_METADATA");
    if (o.metadata == NULL || o.metadata[0] == '\0')
        return bench_usage_error("--metadata etcd://HOST:PORT (or TPX_METADATA) is needed");
    const char *role = optind < argc ? argv[optind] : NULL;
    if (optind + 1 < argc)
        return bench_usage_error("unexpected '%s'", argv[optind + 1]);
    if (tpx_config_check() != TPX_OK)
        return BENCH_EXIT_FAIL;
    if (o.cluster_n > 0) {
        if (role != NULL)
            return bench_usage_error("--cluster runs servers and clients itself: drop '%s'", role);
        return pc_cluster(&o);
    }
    if (role != NULL && strcmp(role, "server") == 0) {
        if (o.name == NULL)
            return bench_usage_error("server: --name NAME is needed (the registry key)");
        return pc_server(&o);
    }
    if (role != NULL && strcmp(role, "list") == 0) {
        static char names[PC_MAX_PEERS * 16][TPX_NAME_MAX];
        tpx_registry_t *reg = NULL;
        size_t n = 0;
        tpx_status_t st = tpx_registry_open(o.metadata, NULL, &reg);
        if (st == TPX_OK)
            st = tpx_registry_list(reg, names, PC_MAX_PEERS * 16, &n);
        tpx_registry_close(reg);
        if (st != TPX_OK) {
            fprintf(stderr, "%s: list: %s\n", PC_PROG, tpx_status_string(st));
            return BENCH_EXIT_FAIL;
        }
        for (size_t i = 0; i < n && i < PC_MAX_PEERS * 16; i++)
            printf("%s\n", names[i]);
        return BENCH_EXIT_OK;
    }
    if (role != NULL && strcmp(role, "client") == 0) {
        if (o.peers == NULL)
            return bench_usage_error("client: --peer NAME[,NAME...] or --peer all is needed");
        return pc_client(&o);
    }
    return bench_usage_error("--metadata: give server --name NAME, client --peer NAME, list, "
                             "or --cluster N,M");
}
