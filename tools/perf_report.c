/* SPDX-License-Identifier: Apache-2.0 */
/*
 * perf_report.c - what tpx-perf prints and writes (perf.h): the header, the
 * table rows and --all-gpus sums, the engines' summaries, the JSON file,
 * --compare-transport (tpx-netbench on the same sizes) and --plot.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

const char *pf_dir_name(uint64_t d)
{
    return d == PF_DIR_SEND ? "send" : d == PF_DIR_RECV ? "recv" : "bidir";
}

static const char *pf_dir_text(uint64_t d)
{
    return d == PF_DIR_SEND   ? "client -> server"
           : d == PF_DIR_RECV ? "server -> client"
                              : "both ways at once";
}

double pf_row_gbps(const pf_row_t *r)
{
    return r->time_ns > 0 ? (double)r->bytes / (double)r->time_ns : 0.0;
}

static double pf_row_cpu_per_gb(const pf_row_t *r)
{
    double cpu =
        (double)(r->srv.cpu_user_ns + r->srv.cpu_sys_ns + r->cli.cpu_user_ns + r->cli.cpu_sys_ns) /
        1e9;
    return r->bytes > 0 ? cpu / ((double)r->bytes / 1e9) : 0.0;
}

/* The latency the table shows: the senders' (both directions: the slower one's). */
static pf_lat_t pf_row_lat(const pf_row_t *r)
{
    if (r->direction == PF_DIR_SEND)
        return r->cli.tx;
    if (r->direction == PF_DIR_RECV)
        return r->srv.tx;
    pf_lat_t a = r->srv.tx, b = r->cli.tx;
    a.avg_ns = (a.avg_ns + b.avg_ns) / 2;
    a.p50_ns = a.p50_ns > b.p50_ns ? a.p50_ns : b.p50_ns;
    a.p99_ns = a.p99_ns > b.p99_ns ? a.p99_ns : b.p99_ns;
    a.max_ns = a.max_ns > b.max_ns ? a.max_ns : b.max_ns;
    a.min_ns = a.min_ns < b.min_ns ? a.min_ns : b.min_ns;
    a.n += b.n;
    return a;
}

int pf_row_verified(const pf_row_t *r)
{
    return r->direction == PF_DIR_SEND   ? (int)r->srv.verified
           : r->direction == PF_DIR_RECV ? (int)r->cli.verified
                                         : (int)(r->srv.verified && r->cli.verified);
}

static const char *pf_plugin_name(const pf_main_t *m)
{
    const char *env = getenv("TPX_NET_PLUGIN");
    return m->plugin != NULL ? m->plugin : env != NULL && *env != '\0' ? env : "builtin";
}

/* The GPUs of the sides this process runs, as "server GPU 0, client GPU 1". */
static void pf_lane_text(const pf_main_t *m, uint64_t lane, char *buf, size_t len);

static void pf_gpu_text(const pf_main_t *m, char *buf, size_t len)
{
    buf[0] = '\0';
    if (m->all_gpus) {
        /* "all 2 GPUs, one engine each: 0->1 1->0" */
        snprintf(buf, len, "all %d GPU%s, one engine each:", m->nlanes, m->nlanes == 1 ? "" : "s");
        for (int i = 0; i < m->nlanes; i++) {
            char g[32];
            size_t l = strlen(buf);
            pf_lane_text(m, (uint64_t)i, g, sizeof(g));
            snprintf(buf + l, len - l, " %s", g);
        }
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (m->mode == (i == 0 ? BENCH_MODE_CLIENT : BENCH_MODE_SERVER))
            continue; /* the other process's side */
        size_t l = strlen(buf);
        if (m->gpu[i] >= 0)
            snprintf(buf + l, len - l, "%s%s GPU %d", l ? ", " : "", i == 0 ? "server" : "client",
                     m->gpu[i]);
        else
            snprintf(buf + l, len - l, "%s%s no GPU", l ? ", " : "", i == 0 ? "server" : "client");
    }
}

/* "host", "host (server GPU 0, ...)" (--gpu: the NIC choice) or "cuda (server GPU 0, ...)". */
static void pf_mem_text(const pf_main_t *m, char *buf, size_t len)
{
    char g[400];
    pf_gpu_text(m, g, sizeof(g));
    if (m->mem == PF_MEM_HOST && m->gpu[0] < 0 && m->gpu[1] < 0 && !m->all_gpus)
        snprintf(buf, len, "host");
    else
        snprintf(buf, len, "%s (%s)", m->mem == PF_MEM_CUDA ? "cuda" : "host", g);
}

void pf_print_header(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    char hb[32], hc[32], cores[48];
    if (bench_quiet)
        return;
    printf("# %s %s: the tpx engine, plugin \"%s\", %s mode, %s\n", PF_PROG,
           tpx_version_string(), pf_plugin_name(m), bench_mode_name(m->mode),
           bench_cores_text(cores, sizeof(cores)));
    printf("# sizes");
    for (uint64_t i = 0; i < p->nsizes; i++)
        printf(" %s", bench_human(p->sizes[i], hb, sizeof(hb)));
    char it[24] = "auto", wu[24] = "auto", dp[24] = "auto";
    if (p->iters != BENCH_AUTO)
        snprintf(it, sizeof(it), "%" PRIu64, p->iters);
    if (p->warmup != BENCH_AUTO)
        snprintf(wu, sizeof(wu), "%" PRIu64, p->warmup);
    if (p->depth != 0)
        snprintf(dp, sizeof(dp), "%" PRIu64, p->depth);
    printf("  count %" PRIu64 "  iters %s  warmup %s  depth %s\n", p->batch, it, wu, dp);
    char mem[512];
    pf_mem_text(m, mem, sizeof(mem));
    printf("# direction %s (%s)  memory %s  verify %s%s  timeout %" PRIu64 " s\n",
           pf_dir_name(p->direction), pf_dir_text(p->direction), mem, p->verify ? "on" : "off",
           p->verify && m->mem == PF_MEM_CUDA ? " (outside the timed loop)" : "", p->timeout_s);
    const char *ifn = getenv("TPX_SOCKET_IFNAME");
    char win[24] = "auto";
    if (p->window != 0)
        snprintf(win, sizeof(win), "%" PRIu64, p->window);
    printf("# engine: channels %" PRIu64 "  chunk %s  window %s  progress %s"
           "  TPX_SOCKET_IFNAME=%s\n",
           p->channels, p->chunk ? bench_human(p->chunk, hc, sizeof(hc)) : "auto", win,
           p->progress == PF_PROGRESS_THREAD ? "thread" : "caller", ifn ? ifn : "(unset)");
    printf("# GB/s = 1e9 bytes/s: bytes of the timed iterations (count x size each) over the\n"
           "#   receiver's time from the barrier release (receives posted) to its last\n"
           "#   completion (bidir: both directions over the slower side's time); warm-up not\n"
           "#   timed; time(ms) = that time / iters; lat = one transfer, post to completion,\n"
           "#   as seen by the sender (us); cpu(s/GB) = user+sys CPU of both processes (all\n"
           "#   threads) per 1e9 bytes\n");
    if (m->all_gpus)
        printf("# --all-gpus: one row per GPU lane (gpu: %s), then their sum: GB/s\n"
               "#   added up, time(ms) the slowest lane's, lat the mean of the averages and\n"
               "#   the worst p50/p99; lanes start every phase together. cpu(s/GB) only on\n"
               "#   the sum: the whole process(es), all lanes\n",
               m->mode == BENCH_MODE_LOOPBACK ? "client GPU -> server GPU" : "this host's GPU");
    fflush(stdout);
}

static const bench_col_t pf_cols[] = {
    {"size", 12},        {"count", 6},    {"iters", 7},    {"time(ms)", 10},  {"GB/s", 8},
    {"lat-avg(us)", 11}, {"p50(us)", 10}, {"p99(us)", 10}, {"cpu(s/GB)", 10}, {"verified", 0},
};
#define PF_NCOLS ((int)(sizeof(pf_cols) / sizeof(pf_cols[0])))
/* --all-gpus: the same with the lane's GPU(s) first. */
static const bench_col_t pf_cols_gpu[] = {
    {"gpu", 7},       {"size", 12},      {"count", 6},        {"iters", 7},
    {"time(ms)", 10}, {"GB/s", 8},       {"lat-avg(us)", 11}, {"p50(us)", 10},
    {"p99(us)", 10},  {"cpu(s/GB)", 10}, {"verified", 0},
};
_Static_assert(sizeof(pf_cols_gpu) / sizeof(pf_cols_gpu[0]) == PF_NCOLS + 1, "one more column");

/* --all-gpus: the GPU cell of a lane: this host's GPU (server/client), or
 * "C->S" (client GPU to server GPU; recv: S->C, bidir: C<->S) in loopback. */
static void pf_lane_text(const pf_main_t *m, uint64_t lane, char *buf, size_t len)
{
    int s = m->lane_gpu[0][lane], c = m->lane_gpu[1][lane];
    if (m->mode == BENCH_MODE_SERVER)
        snprintf(buf, len, "%d", s);
    else if (m->mode == BENCH_MODE_CLIENT)
        snprintf(buf, len, "%d", c);
    else if (m->p.direction == PF_DIR_SEND)
        snprintf(buf, len, "%d->%d", c, s);
    else if (m->p.direction == PF_DIR_RECV)
        snprintf(buf, len, "%d->%d", s, c);
    else
        snprintf(buf, len, "%d<->%d", c, s);
}

static void pf_table_header(pf_main_t *m)
{
    if (m->header_done)
        return;
    m->header_done = 1;
    printf("#\n");
    if (m->all_gpus)
        bench_table_header(stdout, pf_cols_gpu, PF_NCOLS + 1);
    else
        bench_table_header(stdout, pf_cols, PF_NCOLS);
}

/* One table line; `gpu`: the first cell in --all-gpus mode, else NULL. */
static void pf_table_line(const char *gpu, char c[][BENCH_CELL])
{
    if (gpu == NULL) {
        bench_table_row(stdout, pf_cols, PF_NCOLS, c);
        return;
    }
    char g[PF_NCOLS + 1][BENCH_CELL];
    snprintf(g[0], BENCH_CELL, "%s", gpu);
    memcpy(g[1], c[0], sizeof(g) - sizeof(g[0]));
    bench_table_row(stdout, pf_cols_gpu, PF_NCOLS + 1, g);
}

void pf_print_row(pf_main_t *m, const pf_row_t *r)
{
    if (bench_quiet)
        return;
    pf_table_header(m);
    pf_lat_t l = pf_row_lat(r);
    char c[PF_NCOLS][BENCH_CELL], g[32];
    snprintf(c[0], BENCH_CELL, "%" PRIu64, r->size);
    snprintf(c[1], BENCH_CELL, "%" PRIu64, r->batch);
    snprintf(c[2], BENCH_CELL, "%" PRIu64, r->iters);
    snprintf(c[3], BENCH_CELL, "%.3f", (double)r->time_ns / 1e6 / (double)r->iters);
    snprintf(c[4], BENCH_CELL, "%.3f", pf_row_gbps(r));
    snprintf(c[5], BENCH_CELL, "%.1f", (double)l.avg_ns / 1e3);
    snprintf(c[6], BENCH_CELL, "%.1f", (double)l.p50_ns / 1e3);
    snprintf(c[7], BENCH_CELL, "%.1f", (double)l.p99_ns / 1e3);
    /* --all-gpus: a lane's CPU reading is the whole process's (every lane). */
    if (m->all_gpus)
        snprintf(c[8], BENCH_CELL, "-");
    else
        snprintf(c[8], BENCH_CELL, "%.3f", pf_row_cpu_per_gb(r));
    snprintf(c[9], BENCH_CELL, "%s", pf_row_verified(r) ? "yes" : "no");
    if (m->all_gpus)
        pf_lane_text(m, r->lane, g, sizeof(g));
    pf_table_line(m->all_gpus ? g : NULL, c);
    fflush(stdout);
}

/* --all-gpus: the lanes' rows of size index `idx` summed. */
void pf_agg_make(const pf_main_t *m, uint64_t idx, pf_agg_t *a)
{
    memset(a, 0, sizeof(*a));
    a->index = idx;
    a->verified = 1;
    for (size_t i = 0; i < m->nrows; i++) {
        const pf_row_t *r = &m->rows[i];
        if (r->index != idx)
            continue;
        pf_lat_t l = pf_row_lat(r);
        double g = pf_row_gbps(r);
        uint64_t cpu =
            r->srv.cpu_user_ns + r->srv.cpu_sys_ns + r->cli.cpu_user_ns + r->cli.cpu_sys_ns;
        a->size = r->size;
        a->batch = r->batch;
        a->iters = r->iters;
        a->direction = r->direction;
        a->gbps_min = a->lanes == 0 || g < a->gbps_min ? g : a->gbps_min;
        a->lanes++;
        a->bytes += r->bytes;
        a->gbps += g;
        a->time_ns = r->time_ns > a->time_ns ? r->time_ns : a->time_ns;
        a->lat_avg_ns += l.avg_ns;
        a->lat_p50_ns = l.p50_ns > a->lat_p50_ns ? l.p50_ns : a->lat_p50_ns;
        a->lat_p99_ns = l.p99_ns > a->lat_p99_ns ? l.p99_ns : a->lat_p99_ns;
        a->cpu_ns = cpu > a->cpu_ns ? cpu : a->cpu_ns;
        a->verified &= pf_row_verified(r);
    }
    if (a->lanes > 0)
        a->lat_avg_ns /= a->lanes;
}

static double pf_agg_cpu_per_gb(const pf_agg_t *a)
{
    return a->bytes > 0 ? ((double)a->cpu_ns / 1e9) / ((double)a->bytes / 1e9) : 0.0;
}

void pf_print_agg(pf_main_t *m, const pf_agg_t *a)
{
    if (bench_quiet)
        return;
    pf_table_header(m);
    char c[PF_NCOLS][BENCH_CELL];
    snprintf(c[0], BENCH_CELL, "%" PRIu64, a->size);
    snprintf(c[1], BENCH_CELL, "%" PRIu64, a->batch);
    snprintf(c[2], BENCH_CELL, "%" PRIu64, a->iters);
    snprintf(c[3], BENCH_CELL, "%.3f", (double)a->time_ns / 1e6 / (double)a->iters);
    snprintf(c[4], BENCH_CELL, "%.3f", a->gbps);
    snprintf(c[5], BENCH_CELL, "%.1f", (double)a->lat_avg_ns / 1e3);
    snprintf(c[6], BENCH_CELL, "%.1f", (double)a->lat_p50_ns / 1e3);
    snprintf(c[7], BENCH_CELL, "%.1f", (double)a->lat_p99_ns / 1e3);
    snprintf(c[8], BENCH_CELL, "%.3f", pf_agg_cpu_per_gb(a));
    snprintf(c[9], BENCH_CELL, "%s", a->verified ? "yes" : "no");
    pf_table_line("sum", c);
    fflush(stdout);
}

/* "lo 100G, eth1 200G" (the engine's NICs and their speeds). */
static void pf_nics_text(const tpx_engine_info_t *in, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int i = 0; i < in->nnics && i < TPX_INFO_MAX_NICS; i++) {
        size_t l = strlen(buf);
        if (in->nic_speed_mbps[i] > 0)
            snprintf(buf + l, len - l, "%s%s %g Gb/s", i ? ", " : "", in->nic[i],
                     in->nic_speed_mbps[i] / 1000.0);
        else
            snprintf(buf + l, len - l, "%s%s", i ? ", " : "", in->nic[i]);
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "none reported");
}

/* Why an engine serves its GPU and uses its NICs (tpx_gpu_from_t, tpx_nics_from_t). */
static const char *pf_gpu_from(int from)
{
    static const char *const w[] = {"none", "params", "memory", "context"};
    return from >= 0 && from < 4 ? w[from] : "?";
}

static const char *pf_nics_from(int from)
{
    static const char *const w[] = {"all", "map", "pci"};
    return from >= 0 && from < 3 ? w[from] : "?";
}

void pf_print_info(const pf_main_t *m, int side, int lane)
{
    const tpx_engine_info_t *in = &m->info[side][lane];
    char nics[512], hc[32], g[48] = "";
    if (bench_quiet)
        return;
    if (in->gpu >= 0)
        snprintf(g, sizeof(g), " GPU %d (%s)", in->gpu, pf_gpu_from(in->gpu_from));
    pf_nics_text(in, nics, sizeof(nics));
    printf("# engine %s%s: plugin %s (ncclNet v%d), %d channels, chunk %s, window %d, port %d, "
           "NICs %s (%s)\n",
           side == 0 ? "server" : "client", g, in->plugin, in->abi, in->channels,
           bench_human(in->chunk_bytes, hc, sizeof(hc)), in->window, in->port, nics,
           pf_nics_from(in->nics_from));
    fflush(stdout);
}

static void pf_json_lat(FILE *f, const char *key, const pf_lat_t *l, int comma)
{
    fprintf(f, "\"%s\": ", key);
    if (l->n == 0) {
        fprintf(f, "null%s", comma ? ", " : "");
        return;
    }
    fputc('{', f);
    bench_json_u64(f, "transfers", l->n, 1);
    bench_json_dbl(f, "avg_us", (double)l->avg_ns / 1e3, 1);
    bench_json_dbl(f, "min_us", (double)l->min_ns / 1e3, 1);
    bench_json_dbl(f, "p50_us", (double)l->p50_ns / 1e3, 1);
    bench_json_dbl(f, "p99_us", (double)l->p99_ns / 1e3, 1);
    bench_json_dbl(f, "max_us", (double)l->max_ns / 1e3, 0);
    fprintf(f, "}%s", comma ? ", " : "");
}

static void pf_json_side(FILE *f, const char *key, const pf_side_res_t *s)
{
    fprintf(f, "\"%s\": {", key);
    bench_json_dbl(f, "time_ms_total", (double)s->time_ns / 1e6, 1);
    bench_json_dbl(f, "cpu_user_s", (double)s->cpu_user_ns / 1e9, 1);
    bench_json_dbl(f, "cpu_sys_s", (double)s->cpu_sys_ns / 1e9, 1);
    pf_json_lat(f, "send_latency", &s->tx, 1);
    pf_json_lat(f, "recv_latency", &s->rx, 1);
    fprintf(f, "\"verified\": %s, \"checksum\": ", s->verified ? "true" : "false");
    if (s->verified)
        fprintf(f, "\"0x%016" PRIx64 "\"}", s->checksum);
    else
        fputs("null}", f);
}

static void pf_json_count(FILE *f, const char *key, uint64_t v, uint64_t autov)
{
    fprintf(f, "\"%s\": ", key);
    if (v == autov)
        fputs("\"auto\", ", f);
    else
        fprintf(f, "%" PRIu64 ", ", v);
}

/* The fields of one measured row (no braces). */
static void pf_json_row(FILE *f, const pf_row_t *r)
{
    pf_lat_t l = pf_row_lat(r);
    bench_json_u64(f, "size", r->size, 1);
    bench_json_u64(f, "batch", r->batch, 1);
    bench_json_u64(f, "iters", r->iters, 1);
    bench_json_u64(f, "warmup", r->warmup, 1);
    bench_json_u64(f, "depth", r->depth, 1);
    fprintf(f, "\"direction\": \"%s\", ", pf_dir_name(r->direction));
    bench_json_u64(f, "bytes", r->bytes, 1);
    bench_json_dbl(f, "time_ms_total", (double)r->time_ns / 1e6, 1);
    bench_json_dbl(f, "time_ms", (double)r->time_ns / 1e6 / (double)r->iters, 1);
    bench_json_dbl(f, "GBps", pf_row_gbps(r), 1);
    bench_json_dbl(f, "lat_us_avg", (double)l.avg_ns / 1e3, 1);
    bench_json_dbl(f, "lat_us_p50", (double)l.p50_ns / 1e3, 1);
    bench_json_dbl(f, "lat_us_p99", (double)l.p99_ns / 1e3, 1);
    bench_json_dbl(f, "cpu_s_per_GB", pf_row_cpu_per_gb(r), 1);
    fprintf(f, "\"verified\": %s,\n     ", pf_row_verified(r) ? "true" : "false");
    pf_json_side(f, "server", &r->srv);
    fprintf(f, ",\n     ");
    pf_json_side(f, "client", &r->cli);
}

/* The side of this process whose engine's NICs a row is counted on: its
 * own side between hosts, the server's (receiving by default) in loopback. */
static int pf_local_side(const pf_main_t *m)
{
    return m->mode == BENCH_MODE_CLIENT ? 1 : 0;
}

static void pf_json_nics(FILE *f, const tpx_engine_info_t *in)
{
    fputc('[', f);
    for (int i = 0; i < in->nnics && i < TPX_INFO_MAX_NICS; i++) {
        fprintf(f, "%s{\"name\": ", i ? ", " : "");
        bench_json_str(f, in->nic[i]);
        fprintf(f, ", \"speed_mbps\": %d}", in->nic_speed_mbps[i]);
    }
    fputc(']', f);
}

/* "engines": what every engine of this process settled on (tpx_engine_info). */
static void pf_json_engines(FILE *f, const pf_main_t *m)
{
    int n = 0;
    fputc('[', f);
    for (int lane = 0; lane < PF_MAX_LANES; lane++)
        for (int side = 0; side < 2; side++) {
            const tpx_engine_info_t *in = &m->info[side][lane];
            if (!m->have_info[side][lane])
                continue;
            fprintf(f, "%s\n    {\"side\": \"%s\", \"lane\": %d, \"gpu\": ", n++ ? "," : "",
                    side == 0 ? "server" : "client", lane);
            if (in->gpu >= 0)
                fprintf(f, "%d", in->gpu);
            else
                fputs("null", f);
            fprintf(f, ", \"gpu_from\": \"%s\", \"nics_from\": \"%s\", \"plugin\": ",
                    pf_gpu_from(in->gpu_from), pf_nics_from(in->nics_from));
            bench_json_str(f, in->plugin);
            fprintf(f,
                    ", \"abi\": %d, \"channels\": %d, \"chunk\": %zu, \"window\": %d, "
                    "\"port\": %d, \"nics\": ",
                    in->abi, in->channels, in->chunk_bytes, in->window, in->port);
            pf_json_nics(f, in);
            fputc('}', f);
        }
    fputs(n ? "\n  ]" : "]", f);
}

/* --all-gpus: who lane `lane` is (no braces; a separator follows). */
static void pf_json_lane(FILE *f, const pf_main_t *m, int lane)
{
    int side = pf_local_side(m);
    fprintf(f,
            "\"lane\": %d, \"gpu\": %d, \"server_gpu\": %d, \"client_gpu\": %d, \"nics\": ", lane,
            m->lane_gpu[side][lane], m->lane_gpu[0][lane], m->lane_gpu[1][lane]);
    if (m->have_info[side][lane])
        pf_json_nics(f, &m->info[side][lane]);
    else
        fputs("[]", f);
    fputs(",\n       ", f);
}

int pf_write_json(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    FILE *f = fopen(m->json, "w");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot write %s: %s\n", PF_PROG, m->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n  \"tool\": \"%s\", \"version\": ", PF_PROG);
    bench_json_str(f, tpx_version_string());
    fprintf(f, ", \"mode\": \"%s\", \"started\": ", bench_mode_name(m->mode));
    bench_json_str(f, m->started);
    fprintf(f, ", ");
    bench_json_sysinfo(f);
    fprintf(f, ",\n  \"peer\": ");
    bench_json_str(f, m->host);
    fprintf(f, ", \"port\": %d,\n", m->port);
    fprintf(f, "  \"units\": {\"GBps\": \"1e9 bytes per second: timed bytes (every direction) "
               "over the receiver's time from the barrier release to its last completion "
               "(bidir: the slower side's)\", \"time_ms\": \"milliseconds\", \"latency\": "
               "\"microseconds from tpx_send/tpx_recv to the completion seen by tpx_xfer_poll, "
               "on the side that posted\", \"cpu_s_per_GB\": \"user+sys CPU seconds of both "
               "processes per 1e9 bytes\"},\n");
    fprintf(f, "  \"config\": {\"mem\": \"%s\", \"gpu\": {",
            m->mem == PF_MEM_CUDA ? "cuda" : "host");
    for (int i = 0, n = 0; i < 2; i++) {
        if (m->mode == (i == 0 ? BENCH_MODE_CLIENT : BENCH_MODE_SERVER))
            continue; /* the other process's side: not known here */
        fprintf(f, "%s\"%s\": ", n++ ? ", " : "", i == 0 ? "server" : "client");
        if (m->all_gpus) { /* the GPU of each lane */
            for (int lane = 0; lane < m->nlanes; lane++)
                fprintf(f, "%s%d", lane ? ", " : "[", m->lane_gpu[i][lane]);
            fputs(m->nlanes > 0 ? "]" : "[]", f);
        } else if (m->gpu[i] >= 0)
            fprintf(f, "%d", m->gpu[i]);
        else
            fputs("null", f);
    }
    fprintf(f, "}, \"all_gpus\": %s, \"lanes\": %d, \"plugin\": ", m->all_gpus ? "true" : "false",
            m->all_gpus ? m->nlanes : 1);
    bench_json_str(f, pf_plugin_name(m));
    fprintf(f, ", \"sizes\": [");
    for (uint64_t i = 0; i < p->nsizes; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", p->sizes[i]);
    fprintf(f, "], ");
    pf_json_count(f, "iters", p->iters, BENCH_AUTO);
    pf_json_count(f, "warmup", p->warmup, BENCH_AUTO);
    pf_json_count(f, "depth", p->depth, 0);
    bench_json_u64(f, "batch", p->batch, 1);
    fprintf(f, "\"direction\": \"%s\", \"verify\": %s, ", pf_dir_name(p->direction),
            p->verify ? "true" : "false");
    bench_json_u64(f, "channels", p->channels, 1);
    bench_json_u64(f, "chunk", p->chunk, 1);
    bench_json_u64(f, "window", p->window, 1);
    fprintf(f, "\"progress\": \"%s\", ", p->progress == PF_PROGRESS_THREAD ? "thread" : "caller");
    bench_json_u64(f, "timeout_s", p->timeout_s, 0);
    fprintf(f, "},\n  \"env\": ");
    bench_json_env(f, NULL);
    fprintf(f, ",\n  \"engines\": ");
    pf_json_engines(f, m);
    fprintf(f, ",\n  \"results\": [");
    const pf_row_t *best = NULL;
    const pf_agg_t *abest = NULL;
    if (m->all_gpus) {
        /* One entry per size: the sum over the lanes, each lane inside. */
        for (size_t a = 0; a < m->naggs; a++) {
            const pf_agg_t *g = &m->aggs[a];
            if (abest == NULL || g->gbps > abest->gbps)
                abest = g;
            fprintf(f, "%s\n    {", a ? "," : "");
            bench_json_u64(f, "size", g->size, 1);
            bench_json_u64(f, "batch", g->batch, 1);
            bench_json_u64(f, "iters", g->iters, 1);
            fprintf(f, "\"direction\": \"%s\", ", pf_dir_name(g->direction));
            bench_json_u64(f, "lanes", g->lanes, 1);
            bench_json_u64(f, "bytes", g->bytes, 1);
            bench_json_dbl(f, "time_ms_total", (double)g->time_ns / 1e6, 1);
            bench_json_dbl(f, "time_ms", (double)g->time_ns / 1e6 / (double)g->iters, 1);
            bench_json_dbl(f, "GBps", g->gbps, 1);
            bench_json_dbl(f, "GBps_min_lane", g->gbps_min, 1);
            bench_json_dbl(f, "lat_us_avg", (double)g->lat_avg_ns / 1e3, 1);
            bench_json_dbl(f, "lat_us_p50", (double)g->lat_p50_ns / 1e3, 1);
            bench_json_dbl(f, "lat_us_p99", (double)g->lat_p99_ns / 1e3, 1);
            bench_json_dbl(f, "cpu_s_per_GB", pf_agg_cpu_per_gb(g), 1);
            fprintf(f, "\"verified\": %s,\n     \"gpus\": [", g->verified ? "true" : "false");
            int n = 0;
            for (int lane = 0; lane < m->nlanes; lane++)
                for (size_t i = 0; i < m->nrows; i++) {
                    const pf_row_t *r = &m->rows[i];
                    if (r->index != g->index || r->lane != (uint64_t)lane)
                        continue;
                    fprintf(f, "%s\n      {", n++ ? "," : "");
                    pf_json_lane(f, m, lane);
                    pf_json_row(f, r);
                    fputc('}', f);
                }
            fputs("]}", f);
        }
    } else {
        for (size_t i = 0; i < m->nrows; i++) {
            const pf_row_t *r = &m->rows[i];
            if (best == NULL || pf_row_gbps(r) > pf_row_gbps(best))
                best = r;
            fprintf(f, "%s\n    {", i ? "," : "");
            pf_json_row(f, r);
            fputc('}', f);
        }
    }
    fprintf(f, "\n  ],\n  \"best\": ");
    if (abest != NULL)
        fprintf(f,
                "{\"GBps\": %.9g, \"size\": %" PRIu64 ", \"batch\": %" PRIu64
                ", \"lanes\": %" PRIu64 "}",
                abest->gbps, abest->size, abest->batch, abest->lanes);
    else if (best != NULL)
        fprintf(f, "{\"GBps\": %.9g, \"size\": %" PRIu64 ", \"batch\": %" PRIu64 "}",
                pf_row_gbps(best), best->size, best->batch);
    else
        fputs("null", f);
    fprintf(f, ",\n  \"compare_transport\": ");
    if (m->compare && m->cmp_cmd[0] != '\0') {
        fprintf(f, "{\"command\": ");
        bench_json_str(f, m->cmp_cmd);
        fprintf(f, ", \"results\": [");
        for (size_t i = 0; i < m->ncmp; i++) {
            const pf_cmp_t *c = &m->cmp[i];
            fprintf(f, "%s{", i ? ", " : "");
            bench_json_u64(f, "size", c->size, 1);
            bench_json_dbl(f, "engine_GBps", c->engine_gbps, 1);
            bench_json_dbl(f, "transport_GBps", c->transport_gbps, 1);
            bench_json_dbl(f, "engine_over_transport",
                           c->transport_gbps > 0 ? c->engine_gbps / c->transport_gbps : 0.0, 0);
            fputc('}', f);
        }
        fprintf(f, "]}");
    } else {
        fputs("null", f);
    }
    fprintf(f, ",\n  \"ok\": %s, \"error\": ", m->error[0] ? "false" : "true");
    bench_json_str(f, m->error[0] ? m->error : NULL);
    fputs("\n}\n", f);
    if (fclose(f) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", PF_PROG, m->json, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- --compare-transport: tpx-netbench on the same sizes ---------------------------- */

/* The "GBps" of each entry of tpx-netbench's "results", by "size". */
static int pf_parse_netbench(const char *path, pf_main_t *m)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *text = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&text, &cap, '\0', f);
    fclose(f);
    if (len <= 0) {
        free(text);
        return -1;
    }
    const char *s = strstr(text, "\"results\": [");
    const char *end = s != NULL ? strstr(s, "\n  ]") : NULL;
    for (const char *o = s;
         o != NULL && end != NULL && (o = strstr(o, "\n    {")) != NULL && o < end; o++) {
        const char *sz = strstr(o, "\"size\": "), *gb = strstr(o, "\"GBps\": ");
        if (sz == NULL || gb == NULL || gb > end)
            break;
        uint64_t size = strtoull(sz + 8, NULL, 10);
        double gbps = strtod(gb + 8, NULL);
        for (size_t i = 0; i < m->ncmp; i++)
            if (m->cmp[i].size == size)
                m->cmp[i].transport_gbps = gbps;
    }
    free(text);
    return 0;
}

int pf_compare_transport(pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    char nb[PATH_MAX], tmp[] = "/tmp/tpx-perf-netbench-XXXXXX.json", sizes[1024] = "";
    char iters[32], warmup[32], timeout[32];
    int fd = mkstemps(tmp, 5);
    if (fd < 0) {
        pf_set_error(m, "--compare-transport: cannot create a temporary file: %s", strerror(errno));
        return -1;
    }
    close(fd);
    bench_sibling_path(m->argv0, "tpx-netbench", nb, sizeof(nb));
    for (uint64_t i = 0; i < p->nsizes; i++) {
        size_t l = strlen(sizes);
        snprintf(sizes + l, sizeof(sizes) - l, "%s%" PRIu64, i ? "," : "", p->sizes[i]);
    }
    snprintf(iters, sizeof(iters), "%" PRIu64, p->iters);
    snprintf(warmup, sizeof(warmup), "%" PRIu64, p->warmup);
    snprintf(timeout, sizeof(timeout), "%" PRIu64, p->timeout_s);
    /* Same sizes, iteration counts, verification and timeout; the rest is
     * the transport's own default (one isend per message). */
    const char *argv[16] = {
        nb,      "--loopback", "--sizes", sizes, "--timeout",
        timeout, "--quiet",    "--json",  tmp,   p->verify ? "--verify" : "--no-verify"};
    int a = 10;
    if (p->iters != BENCH_AUTO) {
        argv[a++] = "--iters";
        argv[a++] = iters;
    }
    if (p->warmup != BENCH_AUTO) {
        argv[a++] = "--warmup";
        argv[a++] = warmup;
    }
    argv[a] = NULL;
    m->cmp_cmd[0] = '\0';
    for (int i = 0; i < a; i++) {
        size_t l = strlen(m->cmp_cmd);
        snprintf(m->cmp_cmd + l, sizeof(m->cmp_cmd) - l, "%s%s", i ? " " : "", argv[i]);
    }
    if (!bench_quiet) {
        printf("# transport alone: %s\n", m->cmp_cmd);
        fflush(stdout);
    }
    int st = bench_run_tool(argv);
    if (st != 0) {
        pf_set_error(m, "--compare-transport: %s %s (see above)", nb,
                     st < 0 ? "could not be run" : "failed");
        unlink(tmp);
        return -1;
    }
    m->ncmp = 0;
    for (size_t i = 0; i < m->nrows && i < PF_MAX_SIZES; i++)
        m->cmp[m->ncmp++] =
            (pf_cmp_t){.size = m->rows[i].size, .engine_gbps = pf_row_gbps(&m->rows[i])};
    int rc = pf_parse_netbench(tmp, m);
    unlink(tmp);
    for (size_t i = 0; rc == 0 && i < m->ncmp; i++)
        if (m->cmp[i].transport_gbps <= 0)
            rc = -1;
    if (rc != 0) {
        pf_set_error(m, "--compare-transport: no result for every size in %s's JSON", nb);
        return -1;
    }
    for (size_t i = 0; i < m->ncmp; i++) {
        char hb[32];
        printf("# engine/transport = %.3f at %s (engine %.3f GB/s, transport %.3f GB/s)\n",
               m->cmp[i].engine_gbps / m->cmp[i].transport_gbps,
               bench_human(m->cmp[i].size, hb, sizeof(hb)), m->cmp[i].engine_gbps,
               m->cmp[i].transport_gbps);
    }
    fflush(stdout);
    return 0;
}

/* --plot: the engine's rows, and the transport alone after --compare-transport. */
int pf_plot(const pf_main_t *m)
{
    const pf_params_t *p = &m->p;
    size_t n = m->nrows + m->ncmp + m->naggs;
    bench_point_t *pts = calloc(n, sizeof(*pts));
    if (pts == NULL)
        return -1;
    char hc[32], mem[512], title[768], win[24] = "auto";
    pf_mem_text(m, mem, sizeof(mem));
    if (p->window != 0)
        snprintf(win, sizeof(win), "%" PRIu64, p->window);
    snprintf(title, sizeof(title),
             "tpx-perf %s: %s, memory %s, %" PRIu64 " channels, chunk %s, window %s",
             bench_mode_name(m->mode), pf_plugin_name(m), mem, p->channels,
             p->chunk ? bench_human(p->chunk, hc, sizeof(hc)) : "auto", win);
    for (size_t i = 0; i < m->nrows; i++) {
        const pf_row_t *r = &m->rows[i];
        char g[32];
        if (m->all_gpus) {
            pf_lane_text(m, r->lane, g, sizeof(g));
            snprintf(pts[i].label, sizeof(pts[i].label), "GPU %s, %s, batch %" PRIu64, g,
                     pf_dir_name(r->direction), r->batch);
        } else {
            snprintf(pts[i].label, sizeof(pts[i].label), "engine, %s, batch %" PRIu64,
                     pf_dir_name(r->direction), r->batch);
        }
        pts[i].size = r->size;
        pts[i].gbps = pf_row_gbps(r);
    }
    for (size_t i = 0; i < m->ncmp; i++) {
        bench_point_t *pt = &pts[m->nrows + i];
        snprintf(pt->label, sizeof(pt->label), "transport alone (tpx-netbench)");
        pt->size = m->cmp[i].size;
        pt->gbps = m->cmp[i].transport_gbps;
    }
    for (size_t i = 0; i < m->naggs; i++) { /* --all-gpus: the sum over the lanes */
        bench_point_t *pt = &pts[m->nrows + m->ncmp + i];
        snprintf(pt->label, sizeof(pt->label), "sum of %" PRIu64 " GPU lanes", m->aggs[i].lanes);
        pt->size = m->aggs[i].size;
        pt->gbps = m->aggs[i].gbps;
    }
    int rc = bench_plot(m->plot, title, pts, n);
    free(pts);
    if (rc == 0 && !bench_quiet)
        printf("# plot: %s (gnuplot script %s.gp)\n", m->plot, m->plot);
    return rc;
}

void pf_print_best(const pf_main_t *m, int rc)
{
    const pf_row_t *best = NULL;
    int all_verified = m->nrows > 0;
    for (size_t i = 0; i < m->nrows; i++) {
        if (best == NULL || pf_row_gbps(&m->rows[i]) > pf_row_gbps(best))
            best = &m->rows[i];
        all_verified &= pf_row_verified(&m->rows[i]);
    }
    const pf_agg_t *abest = NULL;
    for (size_t i = 0; i < m->naggs; i++)
        if (abest == NULL || m->aggs[i].gbps > abest->gbps)
            abest = &m->aggs[i];
    if (m->all_gpus && abest != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s summed over %" PRIu64 " GPU lanes (slowest lane %.3f) at size "
               "%" PRIu64 " (%s), count %" PRIu64 ", %s%s%s\n",
               abest->gbps, abest->lanes, abest->gbps_min, abest->size,
               bench_human(abest->size, hb, sizeof(hb)), abest->batch,
               pf_dir_name(abest->direction), all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
        fflush(stdout);
    } else if (best != NULL) {
        char hb[32];
        printf("# best: %.3f GB/s at size %" PRIu64 " (%s), count %" PRIu64 ", %s%s%s\n",
               pf_row_gbps(best), best->size, bench_human(best->size, hb, sizeof(hb)), best->batch,
               pf_dir_name(best->direction), all_verified ? "; all data verified" : "",
               rc != 0 ? "; run FAILED (see above)" : "");
        fflush(stdout);
    }
}
