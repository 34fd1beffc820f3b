/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_cli.c - tpx-perf: throughput and latency of the tpx engine. The
 * command line, the roles (loopback, server, client), the control
 * connections and forking the sides; what the tool promises and how a run
 * goes is told in perf.h, one side's work is perf_worker.c, what is
 * printed perf_report.c, the one-sided mode perf_rma.c.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "perf.h"
#include "perf_cluster.h"
#include "perf_rma.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

static void pf_close_lane_fds(pf_main_t *m)
{
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < PF_MAX_LANES; i++)
            if (m->lane_fd[side][i] >= 0) {
                close(m->lane_fd[side][i]);
                m->lane_fd[side][i] = -1;
            }
}

/* Fork one side (0: server, 1: client); in the child it never returns. */
static pid_t pf_spawn(void *ctx, int side, int ctl, int out, int out_rows, const int *close_fds,
                      int nclose)
{
    pf_main_t *m = ctx;
    int is_server = side == 0;
    pid_t pid = bench_fork(close_fds, nclose);
    if (pid != 0) {
        /* Loopback --all-gpus: once both sides have their lanes' ends, the
         * parent lets go of them, so a side that dies is seen as gone. */
        if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK && (side == 1 || pid < 0))
            pf_close_lane_fds(m);
        return pid;
    }
    if (m->all_gpus) {
        /* This side's lane streams only; `ctl` is lane 0's stream between
         * hosts, unused in loopback mode. */
        int keep_ctl = 0;
        for (int i = 0; i < PF_MAX_LANES; i++) {
            if (m->lane_fd[!side][i] >= 0)
                close(m->lane_fd[!side][i]);
            keep_ctl |= m->lane_fd[side][i] == ctl;
        }
        if (!keep_ctl)
            close(ctl);
        _exit(pf_run_lanes(m, side, out, out_rows));
    }
    pf_worker_t w;
    pf_worker_setup(m, &w, is_server, 0, ctl, out, out_rows);
    _exit(pf_worker(&w) == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL);
}

static void pf_on_row(void *ctx, const void *rec)
{
    pf_main_t *m = ctx;
    const pf_rec_t *r = rec;
    if (r->type == PF_REC_INFO) {
        if (r->side < 2 && r->lane < PF_MAX_LANES) {
            m->info[r->side][r->lane] = r->info;
            m->have_info[r->side][r->lane] = 1;
            pf_print_info(m, (int)r->side, (int)r->lane);
        }
        return;
    }
    if (r->type != PF_REC_ROW)
        return;
    pf_row_t *nr = realloc(m->rows, (m->nrows + 1) * sizeof(*nr));
    if (nr == NULL) {
        pf_set_error(m, "out of memory");
        return;
    }
    m->rows = nr;
    m->rows[m->nrows++] = r->row;
    if (!m->all_gpus) {
        pf_print_row(m, &r->row);
        return;
    }
    /* --all-gpus: once every lane reported this size, its rows in lane
     * order and their sum (the lanes meet before every phase, so one size
     * is complete before the next one starts). */
    uint64_t idx = r->row.index;
    int have = 0;
    for (size_t i = 0; i < m->nrows; i++)
        have += m->rows[i].index == idx;
    if (have != m->nlanes || m->naggs >= PF_MAX_SIZES)
        return;
    for (int lane = 0; lane < m->nlanes; lane++)
        for (size_t i = 0; i < m->nrows; i++)
            if (m->rows[i].index == idx && m->rows[i].lane == (uint64_t)lane)
                pf_print_row(m, &m->rows[i]);
    pf_agg_make(m, idx, &m->aggs[m->naggs]);
    pf_print_agg(m, &m->aggs[m->naggs]);
    m->naggs++;
}

/* Fork the side(s) and collect their rows. `ctl`: the control socket
 * (server/client; --all-gpus: lane 0's, the others are in m->lane_fd). */
static int pf_run(pf_main_t *m, int ctl)
{
    static const char *const names[2] = {"server", "client"};
    if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK) {
        /* One control stream per lane, as between hosts. */
        for (int i = 0; i < m->nlanes; i++) {
            int sv[2];
            if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
                pf_set_error(m, "socketpair: %s", strerror(errno));
                pf_close_lane_fds(m);
                return -1;
            }
            m->lane_fd[0][i] = sv[0];
            m->lane_fd[1][i] = sv[1];
        }
    }
    int rc = bench_run_sides(m->mode, ctl, pf_spawn, m, names, sizeof(pf_rec_t), pf_on_row,
                             m->p.timeout_s + 15, m->error, sizeof(m->error));
    if (m->all_gpus && m->mode == BENCH_MODE_LOOPBACK)
        pf_close_lane_fds(m); /* if a fork failed before the parent let go of them */
    uint64_t want = m->p.nsizes * (m->all_gpus ? (uint64_t)m->nlanes : 1);
    if (rc == 0 && m->nrows != want) {
        pf_set_error(m, "expected %" PRIu64 " result rows, got %zu", want, m->nrows);
        rc = -1;
    }
    return rc != 0 || m->error[0] != '\0' ? -1 : 0;
}

/* --all-gpus, lanes 1..: the client of lane 0 comes back to --port + lane
 * at once; one that does not (it gave up: not --all-gpus, too few GPUs)
 * must not leave this server waiting forever. */
static int pf_accept_lane(pf_main_t *m, int lane, const unsigned char *wire, uint32_t len,
                          char *err, size_t errlen)
{
    int port = m->port + lane, lfd = bench_tcp_listen(port, err, errlen);
    if (lfd < 0)
        return -1;
    struct timeval tv = {.tv_sec = 30};
    setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int cfd = bench_accept_peer(&pf_proto, lfd, PF_MSG_HELLO, port,
                                "not a tpx-perf client of this version", err, errlen);
    close(lfd);
    if (cfd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        snprintf(err, errlen,
                 "the client did not open lane %d's control connection (port %d) within 30 s "
                 "(see its error: is it running --all-gpus, with enough GPUs?)",
                 lane, port);
        return -1;
    }
    if (cfd >= 0 && bench_msg_send(&pf_proto, cfd, PF_MSG_PARAMS, 0, wire, len) != 0) {
        snprintf(err, errlen, "cannot send the parameters to the client: %s", strerror(errno));
        close(cfd);
        return -1;
    }
    return cfd;
}

static int pf_run_server(pf_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(pf_params_t)];
    bench_words_out(wire, &m->p, sizeof(pf_params_t) / 8);
    /* --all-gpus: lane i's client comes to --port + i, in lane order. */
    int n = m->all_gpus ? m->nlanes : 1, cfd = -1;
    for (int lane = 0; lane < n; lane++) {
        int fd = lane == 0
                     ? bench_server_start(&pf_proto, m->port, PF_MSG_HELLO, PF_MSG_PARAMS, wire,
                                          sizeof(wire), "not a tpx-perf client of this version",
                                          err, sizeof(err))
                     : pf_accept_lane(m, lane, wire, sizeof(wire), err, sizeof(err));
        if (fd < 0) {
            pf_set_error(m, "%s%s", m->all_gpus ? "lane control connection: " : "", err);
            pf_close_lane_fds(m);
            return -1;
        }
        if (lane == 0)
            cfd = fd;
        if (m->all_gpus)
            m->lane_fd[0][lane] = fd;
    }
    pf_print_header(m);
    int rc = pf_run(m, cfd);
    if (m->all_gpus)
        pf_close_lane_fds(m); /* cfd among them */
    else
        close(cfd);
    return rc;
}

/* Parameters from a server: never trusted further than the command line would be. */
static int pf_params_ok(const pf_params_t *p)
{
    if (p->nsizes == 0 || p->nsizes > PF_MAX_SIZES || p->batch == 0 || p->batch > PF_MAX_BATCH ||
        p->depth > PF_MAX_DEPTH || p->direction > PF_DIR_BIDIR || p->timeout_s == 0 ||
        p->timeout_s > 86400 || p->channels == 0 || p->channels > 32 ||
        (p->chunk != 0 && p->chunk < 4096) || p->chunk > (4u << 20) ||
        p->window > 32 || p->progress > PF_PROGRESS_CALLER || p->verify > 1 ||
        p->lanes > PF_MAX_LANES || p->mem > PF_MEM_CUDA)
        return 0;
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (p->sizes[i] > PF_MAX_SIZE)
            return 0;
    return 1;
}

static int pf_probe_gpus(char *why, size_t len);

static int pf_run_client(pf_main_t *m)
{
    char err[512] = "";
    unsigned char wire[sizeof(pf_params_t)], again[sizeof(pf_params_t)];
    static const char hint[] = " (is `" PF_PROG " server` running there, on this --port?)";
    int fd = bench_client_start(&pf_proto, m->host, m->port, PF_MSG_HELLO, PF_MSG_PARAMS, wire,
                                sizeof(wire), hint, err, sizeof(err));
    if (fd < 0) {
        pf_set_error(m, "%s", err);
        return -1;
    }
    pf_params_t p;
    bench_words_in(&p, wire, sizeof(pf_params_t) / 8);
    if (!pf_params_ok(&p)) {
        pf_set_error(m, "the server sent parameters out of range");
        close(fd);
        return -1;
    }
    if ((p.lanes > 0) != (m->all_gpus != 0) || p.lanes > (uint64_t)m->nlanes) {
        if (p.lanes > 0 && !m->all_gpus)
            pf_set_error(m,
                         "the server runs --all-gpus (%" PRIu64 " GPUs): give --all-gpus here "
                         "too",
                         p.lanes);
        else if (p.lanes == 0)
            pf_set_error(m, "this side has --all-gpus, the server runs one engine: give "
                            "--all-gpus to both or to neither");
        else
            pf_set_error(m,
                         "the server runs --all-gpus with %" PRIu64 " GPUs, this host has %d: "
                         "GPU i pairs with GPU i, so this host needs at least as many",
                         p.lanes, m->nlanes);
        close(fd);
        return -1;
    }
    if ((int)p.mem != m->mem && !m->all_gpus) {
        /* The patterns of GPU buffers are written before a phase, not per
         * iteration (pf_gpu_stage): both sides must use the same kind. */
        if (m->mem_set && p.verify) {
            pf_set_error(m,
                         "the server uses %s memory, this client --mem %s: with --verify both "
                         "sides need the same kind (drop --mem here: a client follows the "
                         "server), or use --no-verify",
                         p.mem == PF_MEM_CUDA ? "cuda" : "host",
                         m->mem == PF_MEM_CUDA ? "cuda" : "host");
            close(fd);
            return -1;
        }
        if (!m->mem_set) {
            char why[160];
            if (p.mem == PF_MEM_CUDA && m->gpu[1] < 0)
                m->gpu[1] = 0;
            if (p.mem == PF_MEM_CUDA && pf_probe_gpus(why, sizeof(why)) <= m->gpu[1]) {
                pf_set_error(m,
                             "the server uses cuda memory and this client follows it, but "
                             "there is no CUDA GPU %d here (%s): give --mem host (and "
                             "--no-verify on the server)",
                             m->gpu[1], why);
                close(fd);
                return -1;
            }
            m->mem = (int)p.mem;
        }
    }
    m->p = p;
    if (m->all_gpus) {
        m->nlanes = (int)p.lanes;
        m->lane_fd[1][0] = fd;
        for (int lane = 1; lane < m->nlanes; lane++) {
            int lfd =
                bench_client_start(&pf_proto, m->host, m->port + lane, PF_MSG_HELLO, PF_MSG_PARAMS,
                                   again, sizeof(again), hint, err, sizeof(err));
            if (lfd < 0 || memcmp(again, wire, sizeof(wire)) != 0) {
                pf_set_error(m, "lane %d control connection (port %d): %s", lane, m->port + lane,
                             lfd < 0 ? err : "the server sent other parameters");
                if (lfd >= 0)
                    close(lfd);
                pf_close_lane_fds(m);
                return -1;
            }
            m->lane_fd[1][lane] = lfd;
        }
    }
    if (m->user_set_run_opts && !bench_quiet)
        fprintf(stderr, "%s: client: run options come from the server; yours are ignored\n",
                PF_PROG);
    pf_print_header(m);
    int rc = pf_run(m, fd);
    if (m->all_gpus)
        pf_close_lane_fds(m);
    else
        close(fd);
    return rc;
}

/*
 * The number of CUDA devices, counted in a child process: CUDA must not be
 * initialised in this one, which forks the sides later (the way
 * tests/gpu/test_engine_gpu.c counts them). 0 or less: none; `why` says why.
 */
static int pf_probe_gpus(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = bench_fork(NULL, 0);
    if (pid == 0) {
        close(fds[0]);
        int32_t res[2] = {0, 0};
        int n = 0;
        res[0] = (int32_t)tpx_gpu_count(&n);
        res[1] = n;
        _exit(write(fds[1], res, sizeof(res)) == (ssize_t)sizeof(res) ? 0 : 1);
    }
    close(fds[1]);
    if (pid < 0) {
        snprintf(why, len, "fork: %s", strerror(errno));
        close(fds[0]);
        return -1;
    }
    int32_t res[2];
    ssize_t got;
    do
        got = read(fds[0], res, sizeof(res));
    while (got < 0 && errno == EINTR);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof(res)) {
        snprintf(why, len, "the process counting GPUs died");
        return -1;
    }
    if (res[0] != TPX_OK || res[1] <= 0) {
        snprintf(why, len, "tpx_gpu_count: %s",
                 res[0] != TPX_OK ? tpx_status_string((tpx_status_t)res[0]) : "0 devices");
        return 0;
    }
    return res[1];
}

static void pf_usage(FILE *f)
{
    fprintf(f,
            "NAME\n"
            "    %1$s - throughput and latency of the tpx engine (tpx/tpx.h)\n"
            "\n"
            "SYNOPSIS\n"
            "    %1$s [--loopback] [--mem host|cuda] [--gpu A,B | --all-gpus] [OPTIONS]\n"
            "    %1$s server [--port P] [--engine-port Q] [--mem host|cuda]\n"
            "           [--gpu N | --all-gpus] [OPTIONS]\n"
            "    %1$s client HOST [--port P] [--plugin P] [--mem host|cuda]\n"
            "           [--gpu N | --all-gpus] [--json FILE] [--quiet]\n"
            "    %1$s --print-config | --help | --version\n"
            "\n"
            "DESCRIPTION\n"
            "    Moves memory between two tpx engines with tpx_send()/tpx_recv() through\n"
            "    the public API only, and prints bandwidth and latency in a table like\n"
            "    nccl-tests. The \"server\" side's engine listens, the \"client\" side's\n"
            "    engine connects (tpx_peer_connect); each side is its own process.\n"
            "\n"
            "    For each size: --warmup untimed iterations, then a barrier (the receiving\n"
            "    side posts its tpx_recv()s, then releases the sender over the control\n"
            "    connection), then --iters timed iterations. One iteration is --batch\n"
            "    transfers of SIZE bytes each (batch 1: one transfer). Up to `depth`\n"
            "    iterations are in flight, each in its own registered buffers.\n"
            "\n"
            "    Columns: size (bytes per transfer), count (transfers per iteration),\n"
            "    iters, time(ms) (per iteration), GB/s (1e9 bytes per second: the timed\n"
            "    bytes over the receiver's time from the barrier release to its last\n"
            "    completion; bidir: both directions' bytes over the slower side's time),\n"
            "    lat-avg/p50/p99(us) (one transfer, from tpx_send() to the completion that\n"
            "    tpx_xfer_poll() reports on the sending side; bidir: the slower side),\n"
            "    cpu(s/GB) (user+sys CPU time of both processes, all threads, per 1e9\n"
            "    bytes), verified. A final line names the best row. --json has the\n"
            "    receivers' latencies, each side's time and CPU, the checksums, and what\n"
            "    every engine of this process settled on (tpx_engine_info(): GPU and why, plugin,\n"
            "    ABI, channels, chunk, window, port, NICs and why) too; the same engine\n"
            "    lines (\"# engine ...\") are printed before the table.\n"
            "\n"
            "ALL GPUS IN ONE PROCESS (--all-gpus)\n"
            "    Every local GPU (up to %9$d) in one process per side, one engine per GPU\n"
            "    (params.gpu = that GPU, so each uses the NICs of its GPU), each engine\n"
            "    with its own progress thread pinned to a CPU of its NIC's NUMA node\n"
            "    (params.progress_cpu = TPX_CPU_NUMA_LOCAL) and driven by its own thread:\n"
            "    the shape of one inference server per host. Device memory on each GPU\n"
            "    (it implies --mem cuda). A \"lane\" is one pair of engines:\n"
            "      server/client   lane i is this host's GPU i <-> the other host's GPU i;\n"
            "                      lane i's control connection is --port + i, its\n"
            "                      server engine listens on TPX_PORT_BASE + i (the\n"
            "                      engines' TPX_PORT_DEFAULT; --engine-port Q: Q + i).\n"
            "                      Both hosts need --all-gpus; the server decides the\n"
            "                      number of lanes (its GPU count) and the client needs at\n"
            "                      least as many GPUs\n"
            "      --loopback      both sides on this host, all lanes at once: client GPU\n"
            "                      i sends to server GPU (i+1) %% n (recv: the other way;\n"
            "                      one GPU: GPU 0 -> GPU 0)\n"
            "    The lanes of a process start every phase together (a barrier), so their\n"
            "    timed phases overlap. The table gets a gpu column (the lane's GPU; in\n"
            "    loopback client -> server) and, after the rows of one size, a \"sum\"\n"
            "    row: GB/s summed over the lanes, time(ms) of the slowest lane, lat the\n"
            "    mean of the lanes' averages and the worst p50/p99, cpu(s/GB) of the whole\n"
            "    process(es) (per-lane CPU is not separable: \"-\"). In --json, each entry\n"
            "    of \"results\" is that sum with the lanes in \"gpus\" (GPU, NICs, and the\n"
            "    full row each). --verify works as with --mem cuda (host copies outside\n"
            "    the timed loop). Without a CUDA GPU: an error, exit 1 (unless --mem host\n"
            "    --lanes N: host memory, no GPU needed).\n"
            "\n"
            "ROLES\n"
            "    --loopback\n"
            "        Both sides on this host (the default when no role is given): the\n"
            "        server's engine takes an ephemeral port and tells the client over a\n"
            "        socketpair; the client connects to 127.0.0.1. TPX_SOCKET_IFNAME\n"
            "        defaults to \"lo\" in this mode.\n"
            "    server\n"
            "        Waits on the control --port for one client, sends it the run\n"
            "        parameters (this side's options decide them, engine settings\n"
            "        included) and its engine's port, runs, prints, exits.\n"
            "    client HOST\n"
            "        Connects to HOST's control --port (retrying for 10 s), takes the run\n"
            "        parameters from the server, connects its engine, prints the same table.\n"
            "\n"
            "OPTIONS\n"
            "    --port P          control TCP port of server/client (default %2$d;\n"
            "                      --all-gpus: P .. P+n-1, one per lane)\n"
            "    --engine-port Q   server: the engine's bootstrap port (default: any free\n"
            "                      port, sent to the client; set it when a firewall is on;\n"
            "                      --all-gpus: Q + lane, default TPX_PORT_BASE + GPU)\n"
            "    --mem host|cuda   where this process's buffers live (default host). cuda:\n"
            "                      device memory from tpx_gpu_alloc(), registered as\n"
            "                      TPX_MEM_CUDA, on the GPU of --gpu. Without a CUDA GPU\n"
            "                      --mem cuda fails at once (exit 1). In server/client mode\n"
            "                      each side chooses its own --mem and --gpu\n"
            "    --gpu N           this process's GPU: the engine's params.gpu (NIC choice)\n"
            "                      and, with --mem cuda, where the buffers live (default:\n"
            "                      0 with --mem cuda, none with --mem host)\n"
            "    --gpu A,B         --loopback: the client side on GPU A, the server side on\n"
            "                      GPU B, so that the default direction (send) moves GPU A\n"
            "                      -> GPU B (default with --mem cuda: 0,1 when the host has\n"
            "                      two or more GPUs, else 0,0); --gpu N is N,N\n"
            "    --all-gpus        one engine per local GPU, all in this process (see ALL\n"
            "                      GPUS IN ONE PROCESS); implies --mem cuda; not with --gpu\n"
            "                      or --compare-transport\n"
            "    --lanes N         --all-gpus: N lanes (GPUs 0..N-1) instead of every GPU.\n"
            "                      With --mem host no GPU is needed: N engines of host\n"
            "                      memory whose params.gpu is the lane's GPU index (NIC\n"
            "                      choice and port only) -- the lane machinery on any host\n"
            "    --size N          one transfer size (default 256M). K, M, G = 2^10, 2^20, 2^30\n"
            "    --sizes A:B       sizes from A to B, doubling (e.g. 4K:1G); or a comma list of\n"
            "                      sizes and ranges (e.g. 16K,1M:64M). At most %3$d sizes\n"
            "    --batch N         transfers per iteration (default 1), e.g. 1000 with --size\n"
            "                      16K: the KV-cache shape. At most %4$d\n"
            "    --iters N         timed iterations per size (default: 5, or more so that each\n"
            "                      row moves at least 1 GiB, up to %5$d)\n"
            "    --warmup N        untimed iterations before them (default: iters/10, >= 1)\n"
            "    --depth N         iterations in flight, each in its own buffers (default:\n"
            "                      enough to fill channels x window x chunk, plus one; at\n"
            "                      most 1 GiB of buffers per direction and side, %6$d\n"
            "                      iterations and %7$d transfers)\n"
            "    --direction D     send: client -> server (default); recv: server -> client;\n"
            "                      bidir: both at once over the same peer\n"
            "    --chunk BYTES     the engines' chunk size (params.chunk_bytes, 4K..4M;\n"
            "                      default TPX_CHUNK_BYTES; when that is 0, each engine's\n"
            "                      own: 1 MiB on tpx's transport, 512 KiB on others)\n"
            "    --channels N      channels per peer (params.channels, 1..32; default\n"
            "                      TPX_CHANNELS)\n"
            "    --window W        requests in flight per plugin comm (params.window, 1..32;\n"
            "                      default TPX_WINDOW; when that is 0, each engine's own:\n"
            "                      32 on tpx's transport (at most its TPX_MAX_REQUESTS),\n"
            "                      16 on others and in strict TCPX mode)\n"
            "    --plugin P        ncclNet plugin of this side: builtin, a name (loads\n"
            "                      libnccl-net-P.so) or a path (default TPX_NET_PLUGIN)\n"
            "    --progress M      thread: the engine's progress thread drives transfers\n"
            "                      (default); caller: no thread, this tool calls\n"
            "                      tpx_progress() in its loop\n"
            "    --verify          fill every transfer with a pattern seeded by its\n"
            "                      direction, iteration and index (sender) and check every\n"
            "                      byte (receiver); the fill and the check are part of the\n"
            "                      timed loop. --mem cuda: outside it, through host copies\n"
            "                      (tpx_gpu_copy): before each phase the sender fills each\n"
            "                      buffer slot it uses and the receiver clears its own;\n"
            "                      after it the receiver checks every byte of each slot,\n"
            "                      i.e. of the last transfer through it. Default: on in\n"
            "                      loopback mode, off otherwise\n"
            "    --no-verify       do not fill or check: pure engine throughput\n"
            "    --timeout SEC     no progress for this long is an error; also each\n"
            "                      transfer's deadline (params.timeout_ms; default %8$d)\n"
            "    --compare-transport\n"
            "                      loopback, one direction: afterwards run tpx-netbench (the\n"
            "                      transport alone, from the same folder as this binary) on\n"
            "                      the same sizes and print engine/transport per size (host\n"
            "                      memory only)\n"
            "    --json FILE       also write every number and the configuration to FILE\n"
            "    --plot FILE.png   also plot GB/s against size (log2 axis) with gnuplot\n"
            "                      (Debian: gnuplot-nox); the script is kept as FILE.png.gp.\n"
            "                      With --compare-transport the transport alone is a second\n"
            "                      line. An error before the run if gnuplot is missing\n"
            "    -q, --quiet       print only the final lines (best, engine/transport) and\n"
            "                      errors\n"
            "    --print-config    print every TPX_* setting with its value and meaning\n"
            "    -V, --version     print the version\n"
            "    -h, --help        print this text\n"
            "\n"
            "ENVIRONMENT\n"
            "    The engine's and the built-in transport's TPX_* variables apply\n"
            "    (TPX_SOCKET_IFNAME, TPX_NET_PLUGIN, TPX_CHANNELS, TPX_CHUNK_BYTES,\n"
            "    TPX_WINDOW, TPX_NSOCKS, TPX_AUTH_TOKEN, TPX_LOG_LEVEL, ...);\n"
            "    `%1$s --print-config` lists them all with defaults and meanings.\n"
            "    Options given here override them for both engines.\n"
            "\n"
            "EXAMPLES\n"
            "    %1$s\n"
            "        loopback, 256 MiB transfers, verified: the quick demo\n"
            "    %1$s --size 256M --compare-transport\n"
            "        the engine next to the transport alone, same sizes, same run\n"
            "    %1$s --size 16K --batch 1000 --direction bidir\n"
            "        many small transfers both ways: the KV-cache shape\n"
            "    %1$s --sizes 4K:1G --no-verify --json sweep.json\n"
            "        a sweep, pure throughput, with a JSON record\n"
            "    %1$s --mem cuda --gpu 0,1 --sizes 1M:1G\n"
            "        GPU 0 -> GPU 1 through the engine on this host\n"
            "    %1$s --all-gpus --sizes 1M:256M\n"
            "        every GPU of this host at once, GPU i -> GPU i+1, per-GPU rows and sum\n"
            "    %1$s server --all-gpus   (and on the other host)\n"
            "    %1$s client 10.0.0.2 --all-gpus\n"
            "        every GPU i <-> GPU i between two machines, one process each\n"
            "    %1$s server --mem cuda --gpu 3   (and on the other host)\n"
            "    %1$s client 10.0.0.2 --mem cuda --gpu 3\n"
            "        GPU memory between two machines\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s server --sizes 1M:256M\n"
            "    TPX_SOCKET_IFNAME=eth1 %1$s client 10.0.0.2\n"
            "        two machines\n"
            "\n"
            "LOST DATA CHANNELS\n"
            "    A run during which a data channel of a live peer failed or stalled ends\n"
            "    with one line per side:\n"
            "      # data channels (SIDE): N lost and repaired, N connected again,\n"
            "      N chunk(s) dealt again over the others\n"
            "    (the engine's counters chan_lost, chan_rejoined, chunks_resent: the lost\n"
            "    channel's chunks went over the peer's other channels, and the channel was\n"
            "    connected again in the background; TPX_CHANNEL_FAILOVER, TPX_CHANNEL_STALL_MS).\n"
            "    A healthy run prints no such line.\n"
            "\n"
            "EXIT STATUS\n"
            "    0  every size ran and (with --verify) every byte was right\n"
            "    1  an engine call returned an error (printed with tpx_status_string()), data\n"
            "       did not match, a peer went away or stopped making progress, the\n"
            "       control connection or --compare-transport failed, or --mem cuda or\n"
            "       --all-gpus found no CUDA GPU (or the two hosts' --all-gpus disagree)\n"
            "    2  bad command line\n",
            PF_PROG, PF_DEFAULT_PORT, PF_MAX_SIZES, PF_MAX_BATCH, BENCH_AUTO_MAX_ITERS,
            PF_MAX_DEPTH, PF_MAX_INFLIGHT, PF_DEFAULT_TIMEOUT_S, PF_MAX_LANES);
    fprintf(f,
            "\nONE-SIDED MODE\n    %s --op read|write [--block 16K,128K,2M] [--blocks N] "
            "[loopback | server | client HOST]\n%s"
            "    e.g. %s --op read --block 16K,128K,2M --blocks 1000\n",
            PF_PROG, perf_rma_usage, PF_PROG);
    fprintf(f,
            "\nCLUSTER MODE (engines meet through etcd)\n    %s --metadata etcd://H:P server "
            "--name NAME | client --peer NAME[,NAME] | --cluster N,M\n%s"
            "    e.g. %s --metadata etcd://127.0.0.1:2379 --cluster 4,4 --size 16M\n",
            PF_PROG, perf_cluster_usage, PF_PROG);
}

/* What the command line said beyond pf_main_t, for pf_settle(). */
typedef struct {
    int loopback_flag; /* --loopback */
    int verify;        /* --verify 1, --no-verify 0, neither -1 */
    int run_opts;      /* a run option was given (a client ignores them) */
    int ngpu_arg;      /* --gpu N: 1, --gpu A,B: 2, none: 0 */
    int mem_set;       /* --mem given */
    int lanes_arg;     /* --lanes N; 0: none */
} pf_cli_t;

/* The defaults, then the options. -1: go on; else the exit status. */
static int pf_parse_opts(int argc, char **argv, pf_main_t *m, pf_cli_t *cli)
{
    enum {
        O_ENGINE_PORT = 256,
        O_MEM,
        O_GPU,
        O_BATCH,
        O_DEPTH,
        O_DIRECTION,
        O_CHUNK,
        O_CHANNELS,
        O_WINDOW,
        O_PLUGIN,
        O_PROGRESS,
        O_COMPARE,
        O_ALL_GPUS,
        O_LANES,
    };
    static const struct option opts[] = {
        {"engine-port", required_argument, NULL, O_ENGINE_PORT},
        {"mem", required_argument, NULL, O_MEM},
        {"gpu", required_argument, NULL, O_GPU},
        {"all-gpus", no_argument, NULL, O_ALL_GPUS},
        {"lanes", required_argument, NULL, O_LANES},
        {"batch", required_argument, NULL, O_BATCH},
        {"depth", required_argument, NULL, O_DEPTH},
        {"direction", required_argument, NULL, O_DIRECTION},
        {"chunk", required_argument, NULL, O_CHUNK},
        {"channels", required_argument, NULL, O_CHANNELS},
        {"window", required_argument, NULL, O_WINDOW},
        {"plugin", required_argument, NULL, O_PLUGIN},
        {"progress", required_argument, NULL, O_PROGRESS},
        {"compare-transport", no_argument, NULL, O_COMPARE},
        BENCH_OPTIONS_COMMON,
        {NULL, 0, NULL, 0},
    };
    pf_params_t *p = &m->p;
    int loopback_flag = 0, verify = -1, run_opts = 0, ngpu_arg = 0, mem_set = 0, lanes_arg = 0;
    uint64_t v;

    bench_prog = PF_PROG;
    m->argv0 = argv[0];
    m->mode = BENCH_MODE_LOOPBACK;
    m->port = PF_DEFAULT_PORT;
    m->engine_port = TPX_PORT_EPHEMERAL;
    m->mem = PF_MEM_HOST;
    m->gpu[0] = m->gpu[1] = -1;
    for (int i = 0; i < PF_MAX_LANES; i++)
        m->lane_fd[0][i] = m->lane_fd[1][i] = -1;
    p->nsizes = 1;
    p->sizes[0] = PF_DEFAULT_SIZE;
    p->iters = BENCH_AUTO;
    p->warmup = BENCH_AUTO;
    p->batch = 1;
    p->direction = PF_DIR_SEND;
    p->timeout_s = PF_DEFAULT_TIMEOUT_S;
    p->progress = PF_PROGRESS_THREAD;

    const bench_opts_t bo = {.loopback = &loopback_flag,
                             .port = &m->port,
                             .sizes = p->sizes,
                             .nsizes = &p->nsizes,
                             .max_sizes = PF_MAX_SIZES,
                             .max_size = PF_MAX_SIZE,
                             .sizes_eg = "4K:1G or 16K,1M:64M",
                             .iters = &p->iters,
                             .warmup = &p->warmup,
                             .timeout_s = &p->timeout_s,
                             .verify = &verify,
                             .run_opts = &run_opts,
                             .json = &m->json,
                             .plot = &m->plot,
                             .usage = pf_usage};
    int c;
    while ((c = getopt_long(argc, argv, "hqV", opts, NULL)) != -1) {
        int orc = bench_opt(&bo, c, optarg);
        if (orc == BENCH_OPT_DONE)
            continue;
        if (orc != BENCH_OPT_OTHER)
            return orc;
        switch (c) {
        case O_ENGINE_PORT:
            if (bench_parse_uint(optarg, 1, 65535, &v) != 0)
                return bench_usage_error("--engine-port: '%s' is not a port (1..65535)", optarg);
            m->engine_port = (int)v;
            m->engine_port_set = 1;
            break;
        case O_MEM:
            if (strcmp(optarg, "cuda") == 0)
                m->mem = PF_MEM_CUDA;
            else if (strcmp(optarg, "host") == 0)
                m->mem = PF_MEM_HOST;
            else
                return bench_usage_error("--mem: '%s' is not host or cuda", optarg);
            mem_set = 1;
            break;
        case O_ALL_GPUS:
            m->all_gpus = 1;
            break;
        case O_LANES:
            if (bench_parse_uint(optarg, 1, PF_MAX_LANES, &v) != 0)
                return bench_usage_error("--lanes: '%s' is not in 1..%d", optarg, PF_MAX_LANES);
            lanes_arg = (int)v;
            break;
        case O_GPU:
            if ((ngpu_arg = bench_parse_gpus(optarg, PF_MAX_GPU, m->gpu)) == 0)
                return bench_usage_error("--gpu: '%s' is not a GPU index N or a pair A,B "
                                         "(0..%d)",
                                         optarg, PF_MAX_GPU);
            break;
        case O_BATCH:
            if (bench_parse_uint(optarg, 1, PF_MAX_BATCH, &v) != 0)
                return bench_usage_error("--batch: '%s' is not in 1..%d", optarg, PF_MAX_BATCH);
            p->batch = v;
            run_opts = 1;
            break;
        case O_DEPTH:
            if (bench_parse_uint(optarg, 1, PF_MAX_DEPTH, &v) != 0)
                return bench_usage_error("--depth: '%s' is not in 1..%d", optarg, PF_MAX_DEPTH);
            p->depth = v;
            run_opts = 1;
            break;
        case O_DIRECTION:
            if (strcmp(optarg, "send") == 0)
                p->direction = PF_DIR_SEND;
            else if (strcmp(optarg, "recv") == 0)
                p->direction = PF_DIR_RECV;
            else if (strcmp(optarg, "bidir") == 0)
                p->direction = PF_DIR_BIDIR;
            else
                return bench_usage_error("--direction: '%s' is not send, recv or bidir", optarg);
            run_opts = 1;
            break;
        case O_CHUNK:
            if (bench_parse_size(optarg, &v) != 0 || v < 4096 || v > (4u << 20))
                return bench_usage_error("--chunk: bad size '%s' (4K .. 4M)", optarg);
            p->chunk = v;
            run_opts = 1;
            break;
        case O_CHANNELS:
            if (bench_parse_uint(optarg, 1, 32, &v) != 0)
                return bench_usage_error("--channels: '%s' is not in 1..32", optarg);
            p->channels = v;
            run_opts = 1;
            break;
        case O_WINDOW:
            if (bench_parse_uint(optarg, 1, 32, &v) != 0)
                return bench_usage_error("--window: '%s' is not in 1..32", optarg);
            p->window = v;
            run_opts = 1;
            break;
        case O_PLUGIN:
            m->plugin = optarg;
            break;
        case O_PROGRESS:
            if (strcmp(optarg, "thread") == 0)
                p->progress = PF_PROGRESS_THREAD;
            else if (strcmp(optarg, "caller") == 0)
                p->progress = PF_PROGRESS_CALLER;
            else
                return bench_usage_error("--progress: '%s' is not thread or caller", optarg);
            run_opts = 1;
            break;
        case O_COMPARE:
            m->compare = 1;
            break;
        default:
            fprintf(stderr, "Try '%s --help'.\n", PF_PROG);
            return BENCH_EXIT_USAGE;
        }
    }
    *cli = (pf_cli_t){loopback_flag, verify, run_opts, ngpu_arg, mem_set, lanes_arg};
    return -1;
}

/* The role, the checks between options, GPUs and lanes, the engines'
 * settings. -1: go on; else the exit status. */
static int pf_settle(int argc, char **argv, pf_main_t *m, const pf_cli_t *cli)
{
    pf_params_t *p = &m->p;
    const int loopback_flag = cli->loopback_flag, verify = cli->verify, run_opts = cli->run_opts,
              ngpu_arg = cli->ngpu_arg, mem_set = cli->mem_set, lanes_arg = cli->lanes_arg;

    int role_rc = bench_parse_role(argc, argv, optind, loopback_flag, &m->mode, &m->host);
    if (role_rc != BENCH_EXIT_OK)
        return role_rc;
    if (m->compare && m->mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--compare-transport runs in loopback mode only");
    if (m->all_gpus) {
        if (ngpu_arg != 0)
            return bench_usage_error("--all-gpus uses every GPU of this host: drop --gpu");
        if (m->compare)
            return bench_usage_error("--compare-transport compares one engine with the "
                                     "transport: drop --all-gpus");
        if (!mem_set)
            m->mem = PF_MEM_CUDA;
    } else if (lanes_arg > 0) {
        return bench_usage_error("--lanes is for --all-gpus");
    }
    if (ngpu_arg == 2 && m->mode != BENCH_MODE_LOOPBACK)
        return bench_usage_error("--gpu A,B (client on A, server on B) is for --loopback; "
                                 "%s runs one side: --gpu N",
                                 bench_mode_name(m->mode));
    if (m->compare && m->mem == PF_MEM_CUDA)
        return bench_usage_error("--compare-transport compares host memory only (tpx-netbench "
                                 "moves host memory): drop it or use --mem host");
    if (m->compare && p->direction == PF_DIR_BIDIR)
        return bench_usage_error("--compare-transport measures one direction: use --direction "
                                 "send or recv");
    for (uint64_t i = 0; i < p->nsizes; i++)
        if (p->sizes[i] * p->batch > PF_MAX_SIZE)
            return bench_usage_error("--batch %" PRIu64 " x size %" PRIu64
                                     " is more than 16 GiB per iteration",
                                     p->batch, p->sizes[i]);
    p->verify = verify >= 0 ? (uint64_t)verify : m->mode == BENCH_MODE_LOOPBACK;
    if (m->plot != NULL) {
        char gnuplot[PATH_MAX];
        if (bench_gnuplot_find(gnuplot, sizeof(gnuplot)) != 0) {
            fprintf(stderr,
                    "%s: --plot needs gnuplot, which is not on PATH: install it "
                    "(Debian: apt-get install gnuplot-nox) or drop --plot\n",
                    PF_PROG);
            return BENCH_EXIT_FAIL;
        }
    }
    m->user_set_run_opts = run_opts && m->mode == BENCH_MODE_CLIENT;
    m->mem_set = mem_set;
    p->mem = (uint64_t)m->mem;
    if (ngpu_arg == 1) { /* --gpu N: this process's side(s) */
        m->gpu[1] = m->gpu[0];
    } else if (ngpu_arg == 2) { /* --gpu A,B: the client (the default sender) on A */
        int a = m->gpu[0];
        m->gpu[0] = m->gpu[1];
        m->gpu[1] = a;
    }
    int ngpu = 0;
    if (m->mem == PF_MEM_CUDA || (m->all_gpus && lanes_arg == 0)) {
        char why[160];
        ngpu = pf_probe_gpus(why, sizeof(why));
        if (ngpu <= 0 && m->all_gpus) {
            fprintf(stderr,
                    "%s: --all-gpus: no CUDA GPU on this host (%s): it runs one engine per "
                    "local GPU; without GPUs run %s --mem host, or --all-gpus --mem host "
                    "--lanes N, or scripts/tpx-launch --nprocs N\n",
                    PF_PROG, why, PF_PROG);
            return BENCH_EXIT_FAIL;
        }
        if (ngpu <= 0) {
            fprintf(stderr, "%s: --mem cuda: no CUDA GPU on this host (%s); use --mem host\n",
                    PF_PROG, why);
            return BENCH_EXIT_FAIL;
        }
    }
    if (m->all_gpus) {
        /* Lane i: server GPU i <-> client GPU i between hosts; in loopback
         * the client's GPU i sends to the server's GPU i+1. */
        if (lanes_arg > 0 && m->mem == PF_MEM_CUDA && lanes_arg > ngpu)
            return bench_usage_error("--lanes %d: this host has %d GPU%s", lanes_arg, ngpu,
                                     ngpu == 1 ? "" : "s");
        m->nlanes = lanes_arg > 0 ? lanes_arg : ngpu < PF_MAX_LANES ? ngpu : PF_MAX_LANES;
        if (lanes_arg == 0 && ngpu > PF_MAX_LANES && !bench_quiet)
            fprintf(stderr, "%s: --all-gpus: this host has %d GPUs, using the first %d\n", PF_PROG,
                    ngpu, PF_MAX_LANES);
        for (int i = 0; i < m->nlanes; i++) {
            m->lane_gpu[1][i] = i;
            m->lane_gpu[0][i] = m->mode == BENCH_MODE_LOOPBACK ? (i + 1) % m->nlanes : i;
        }
        if (m->mode != BENCH_MODE_CLIENT)
            p->lanes = (uint64_t)m->nlanes;
        if (m->mode != BENCH_MODE_LOOPBACK && m->port + m->nlanes - 1 > 65535)
            return bench_usage_error("--port %d: the lanes need ports %d..%d", m->port, m->port,
                                     m->port + m->nlanes - 1);
        if (m->engine_port_set && m->engine_port + m->nlanes - 1 > 65535)
            return bench_usage_error("--engine-port %d: the lanes need ports %d..%d",
                                     m->engine_port, m->engine_port,
                                     m->engine_port + m->nlanes - 1);
    } else if (m->mem == PF_MEM_CUDA) {
        if (ngpu_arg == 0) { /* loopback: client on 0, server on 1 when there are two */
            m->gpu[1] = 0;
            m->gpu[0] = m->mode == BENCH_MODE_LOOPBACK && ngpu >= 2 ? 1 : 0;
        }
        for (int i = 0; i < 2; i++)
            if (m->gpu[i] >= ngpu)
                return bench_usage_error("--gpu %d: this host has %d GPU%s (0..%d)", m->gpu[i],
                                         ngpu, ngpu == 1 ? "" : "s", ngpu - 1);
    }

    signal(SIGPIPE, SIG_IGN);
    if (m->mode == BENCH_MODE_LOOPBACK && getenv("TPX_SOCKET_IFNAME") == NULL)
        setenv("TPX_SOCKET_IFNAME", "lo", 1);
    if (tpx_config_check() != TPX_OK) {
        fprintf(stderr, "%s: a TPX_* setting is malformed (see above; `%s --print-config`)\n",
                PF_PROG, PF_PROG);
        return BENCH_EXIT_FAIL;
    }
    /* Both engines get explicit settings: this side's environment decides
     * (TPX_CHUNK_BYTES=0 and TPX_WINDOW=0 stay 0: each engine picks its
     * plugin's chunk and window). */
    if (p->channels == 0)
        p->channels = (uint64_t)bench_config_int("TPX_CHANNELS");
    if (p->chunk == 0)
        p->chunk = (uint64_t)bench_config_int("TPX_CHUNK_BYTES");
    if (p->window == 0)
        p->window = (uint64_t)bench_config_int("TPX_WINDOW");
    if (m->mode != BENCH_MODE_CLIENT && !pf_params_ok(p)) {
        fprintf(stderr,
                "%s: TPX_CHANNELS, TPX_CHUNK_BYTES or TPX_WINDOW is unreadable or out of range "
                "(channels %" PRIu64 ", chunk %" PRIu64 ": 0 or 4K..4M, window %" PRIu64
                ": 0..32): set --channels, --chunk and --window\n",
                PF_PROG, p->channels, p->chunk, p->window);
        return BENCH_EXIT_FAIL;
    }
    m->progress = !bench_quiet && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO);
    return -1;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--op") == 0)
            return perf_rma_main(argc, argv); /* the one-sided mode (perf_rma.c) */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--metadata") == 0 || strncmp(argv[i], "--metadata=", 11) == 0 ||
            strcmp(argv[i], "--cluster") == 0 || strncmp(argv[i], "--cluster=", 10) == 0)
            return perf_cluster_main(argc, argv); /* engines through etcd (perf_cluster.c) */
    static pf_main_t m;
    pf_cli_t cli = {0};
    int rc = pf_parse_opts(argc, argv, &m, &cli);
    if (rc < 0)
        rc = pf_settle(argc, argv, &m, &cli);
    if (rc >= 0)
        return rc;
    bench_started(m.started, sizeof(m.started));

    if (m.mode == BENCH_MODE_SERVER) {
        rc = pf_run_server(&m);
    } else if (m.mode == BENCH_MODE_CLIENT) {
        rc = pf_run_client(&m);
    } else {
        pf_print_header(&m);
        rc = pf_run(&m, -1);
    }
    if (m.error[0] != '\0')
        rc = -1;

    pf_print_best(&m, rc);
    if (rc == 0 && m.compare && pf_compare_transport(&m) != 0)
        rc = -1;
    if (rc != 0)
        fprintf(stderr, "%s: FAILED: %s\n", PF_PROG, m.error[0] ? m.error : "see above");
    if (m.json != NULL && pf_write_json(&m) != 0 && rc == 0)
        rc = -1;
    if (m.plot != NULL && m.nrows > 0 && pf_plot(&m) != 0 && rc == 0)
        rc = -1;
    free(m.rows);
    return rc == 0 ? BENCH_EXIT_OK : BENCH_EXIT_FAIL;
}
