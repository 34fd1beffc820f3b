/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclnet_diff.c - drive an ncclNet v7 table the way NCCL does and print one
 * line per behaviour, so that two plugins can be compared line by line.
 *
 *   ncclnet_diff PLUGIN.so [--real] [--chunk BYTES] [--abi 7..12]
 *
 * The plugin is dlopen()ed and its ncclNetPlugin_v7 table used, as NCCL
 * does with Google's GPUDirect-TCPX plugin (which exports only v7); --abi
 * drives another version's table instead, through a v7-shaped adapter
 * (abi_adapt below), so that the same behaviours are checked through the
 * v11/v12 entry points (a context from init() given to listen/connect). One
 * process holds both ends of every comm pair (listen, connect and accept
 * retried while they give NULL comms) and drives both from one thread:
 * TCPX moves data only from test(). Host memory only (NCCL_PTR_HOST): the
 * bytes must be in the user buffer when test() says done, with no unpack.
 *
 * Each line is "<check> <observed> | expect <value> | OK|DIFF". The
 * expectation is what Google's plugin 3.1.9 was seen to do (docs/tcpx.md's
 * table), except in the rows marked "deliberate", where tpx's strict
 * mode is safer on purpose; --real expects the plugin's own answers there
 * too (a run against the real plugin: scripts/tcpx-diff). What a peer's
 * close shows depends on the plugin's chunk (NCCL_DYNAMIC_CHUNK_SIZE;
 * TPX_SOCK_TCPX_CHUNK in strict mode), which --chunk gives (default: the
 * first of those two that is set, else 524288): a message longer than a
 * chunk sees the close (rc 2), one of at most a chunk hangs. The exit
 * status is the number of DIFF lines.
 *
 * SIGPIPE is caught in this process (never ignored, never blocked): a
 * handler counts each one by the thread it was raised on, this one (the
 * thread of test()) or one of the plugin's own, which the "SIGPIPE" row
 * reports. Blocked, one raised on a plugin thread would stay pending on
 * that thread and be lost when it exits.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "gpu/cuda.h"
#include "tpx/ncclnet.h"

#define MiB (1024 * 1024)
#define DEVH_STORE 512
#define DEADLINE_MS 20000
#define HANG_MS 2000 /* "never reports" is checked for this long */

static const tpx_ncclnet_v7_t *N;
static int real_mode;
static int abi = 7; /* the table under test */
static uint64_t chunk = 524288; /* the plugin's chunk (--chunk) */
static pid_t main_tid;          /* the thread that calls the plugin */
static _Atomic int pipes_caller; /* SIGPIPEs raised on it */
static _Atomic int pipes_plugin; /* SIGPIPEs raised on the plugin's threads */
static int ndiff;
static int nwarn; /* WARN lines the plugin logged (the last check's) */

static void plugin_log(tpx_nccl_log_level_t level, unsigned long flags, const char *file,
                       int line, const char *fmt, ...)
{
    (void)flags;
    if (level != TPX_NCCL_LOG_WARN)
        return;
    nwarn++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  plugin WARN %s:%d: ", file != NULL ? file : "?", line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* One result line; `ok` compares observed with expected. */
static void line(const char *check, int ok, const char *observed, const char *expected,
                 const char *note)
{
    printf("%-26s %-40s | expect %-30s | %s%s%s\n", check, observed, expected, ok ? "OK" : "DIFF",
           note ? "  " : "", note ? note : "");
    fflush(stdout);
    ndiff += !ok;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    static char bufs[4][160];
    static int k;
    char *b = bufs[k++ & 3];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof(bufs[0]), f, ap);
    va_end(ap);
    return b;
}

/* Counts a SIGPIPE by its thread (gettid and lock-free atomics are
 * async-signal-safe); the write that raised it fails with EPIPE as usual. */
static void on_sigpipe(int sig)
{
    (void)sig;
    if ((pid_t)syscall(SYS_gettid) == main_tid)
        atomic_fetch_add(&pipes_caller, 1);
    else
        atomic_fetch_add(&pipes_plugin, 1);
}

/* The close of a message of `n` bytes is reported (rc 2) when the plugin
 * still has control messages for it: more than one chunk. */
static int close_seen(uint64_t n)
{
    return n > chunk;
}

/* ---- a comm pair on device 0 ---------------------------------------------------- */

typedef struct {
    void *lc, *sc, *rc;
    unsigned char handle[128];
    _Alignas(16) unsigned char sstore[DEVH_STORE], rstore[DEVH_STORE];
    int null_connects, null_accepts;
    const tpx_nccl_unpack_meta_t *meta; /* the receiver's fragment queue (host), or NULL */
    const void *bounce;                 /* the receiver's bounce buffer (device memory) */
    uint64_t nrecv;                     /* receives posted on rc */
    struct {
        void *comm, *mh;
    } regs[8]; /* registrations made by reg(), undone before their comm closes */
    int nregs;
} pair_t;

/* Register buf[size) on comm (p's sc or rc), as NCCL does for every buffer
 * it posts (Google's plugin refuses a NULL handle: rc 3, "mhandle is
 * null"). NULL if regMr failed: the post then shows it. */
static void *reg(pair_t *p, void *comm, void *buf, size_t size)
{
    void *mh = NULL;
    if (p->nregs == (int)(sizeof(p->regs) / sizeof(p->regs[0])) ||
        N->regMr(comm, buf, (int)size, TPX_NCCL_PTR_HOST, &mh) != TPX_NCCL_SUCCESS)
        return NULL;
    p->regs[p->nregs].comm = comm;
    p->regs[p->nregs++].mh = mh;
    return mh;
}

/* Undo comm's registrations (before it closes). */
static void unreg(pair_t *p, void *comm)
{
    for (int i = 0; i < p->nregs;) {
        if (p->regs[i].comm == comm) {
            N->deregMr(comm, p->regs[i].mh);
            p->regs[i] = p->regs[--p->nregs];
        } else {
            i++;
        }
    }
}

static int pair_open(pair_t *p)
{
    memset(p, 0, sizeof(*p));
    if (N->listen(0, p->handle, &p->lc) != TPX_NCCL_SUCCESS || p->lc == NULL)
        return -1;
    uint64_t end = test_deadline_ms(DEADLINE_MS);
    while (p->sc == NULL || p->rc == NULL) {
        if (p->sc == NULL) {
            tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)p->sstore;
            if (N->connect(0, p->handle, &p->sc, &dh) != TPX_NCCL_SUCCESS)
                return -1;
            p->null_connects += p->sc == NULL;
        }
        if (p->rc == NULL) {
            tpx_ncclnet_dev_handle_t *dh = (tpx_ncclnet_dev_handle_t *)p->rstore;
            if (N->accept(p->lc, &p->rc, &dh) != TPX_NCCL_SUCCESS)
                return -1;
            p->null_accepts += p->rc == NULL;
        }
        if (test_now_ns() > end)
            return -1;
    }
    /* The unpack handle is device memory: copied down, never read here. */
    const tpx_ncclnet_dev_handle_t *d = (const tpx_ncclnet_dev_handle_t *)p->rstore;
    tpx_nccl_unpack_handle_t uh;
    const void *meta = NULL;
    if (d->netDeviceType == TPX_NCCL_NET_DEVICE_UNPACK && d->handle != NULL &&
        tpx__cuda_devmem_read(&uh, d->handle, sizeof(uh)) == TPX_OK && uh.meta != NULL &&
        tpx__cuda_host_view(uh.meta, &meta) == TPX_OK) {
        p->meta = meta;
        p->bounce = uh.bounce_buf;
    }
    return 0;
}

static void pair_close(pair_t *p)
{
    if (p->sc != NULL) {
        unreg(p, p->sc);
        N->closeSend(p->sc);
    }
    if (p->rc != NULL) {
        unreg(p, p->rc);
        N->closeRecv(p->rc);
    }
    if (p->lc != NULL)
        N->closeListen(p->lc);
    memset(p, 0, sizeof(*p));
}

static int post_recv(pair_t *p, void *buf, int size, void *mh, void **req)
{
    void *d[1] = {buf}, *m[1] = {mh};
    int s[1] = {size}, t[1] = {0};
    *req = NULL;
    int rc = N->irecv(p->rc, 1, d, s, t, m, req);
    p->nrecv += rc == TPX_NCCL_SUCCESS && *req != NULL;
    return rc;
}

/* Test both requests until done, an error, or the deadline. *sdone and
 * *rdone say on entry whether that side is done already (its request is
 * not tested again: TCPX is silent about a completed request); a NULL
 * request of a side not done is a post that failed, never "done". rc of
 * each side's last test in *src and *rrc; 1 if both done. */
static int drive(void *sreq, void *rreq, int ms, int *src, int *rrc, int *sdone, int *rdone)
{
    uint64_t end = test_deadline_ms(ms);
    *src = *rrc = 0;
    if ((!*sdone && sreq == NULL) || (!*rdone && rreq == NULL))
        return 0;
    while (!(*sdone && *rdone) && test_now_ns() < end) {
        int size = -1;
        if (!*sdone && (*src = N->test(sreq, sdone, &size)) != 0 && !*sdone)
            break;
        if (!*rdone && (*rrc = N->test(rreq, rdone, &size)) != 0 && !*rdone)
            break;
    }
    return *sdone && *rdone;
}

static void fill(unsigned char *b, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        b[i] = (unsigned char)x;
    }
}

/* ---- another version's table, seen as v7 ---------------------------------------- */

/* The checks call v7's signatures; these forward them to a v8..v12 table.
 * Entries whose signature is v7's in every version are copied as they are. */
static union {
    const tpx_ncclnet_v8_t *v8;
    const tpx_ncclnet_v9_t *v9;
    const tpx_ncclnet_v10_t *v10;
    const tpx_ncclnet_v11_t *v11;
    const tpx_ncclnet_v12_t *v12;
} T;
static void *ctx; /* v11+: init()'s context */
static tpx_ncclnet_v7_t adapter;

static tpx_nccl_result_t a_init(tpx_nccl_logger_t log)
{
    tpx_ncclnet_comm_config_t cfg = {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    switch (abi) {
    case 8: return T.v8->init(log);
    case 9: return T.v9->init(log);
    case 10: return T.v10->init(log, NULL);
    case 11: return T.v11->init(&ctx, 1, &cfg, log, NULL);
    default: return T.v12->init(&ctx, 1, &cfg, log, NULL);
    }
}

static tpx_nccl_result_t a_props(int dev, tpx_ncclnet_props_v7_t *p)
{
    tpx_ncclnet_props_v12_t q; /* the widest; v8..v11 write less of it */
    memset(&q, 0, sizeof(q));
    tpx_nccl_result_t rc;
    if (abi == 8) {
        tpx_ncclnet_props_v8_t r;
        memset(&r, 0, sizeof(r));
        rc = T.v8->getProperties(dev, &r);
        *p = (tpx_ncclnet_props_v7_t){r.name, r.pciPath, r.guid, r.ptrSupport, r.speed, r.port,
                                      r.latency, r.maxComms, r.maxRecvs, r.netDeviceType,
                                      r.netDeviceVersion};
        return rc;
    }
    rc = abi == 9    ? T.v9->getProperties(dev, (tpx_ncclnet_props_v9_t *)(void *)&q)
         : abi == 10 ? T.v10->getProperties(dev, (tpx_ncclnet_props_v10_t *)(void *)&q)
         : abi == 11 ? T.v11->getProperties(dev, (tpx_ncclnet_props_v11_t *)(void *)&q)
                     : T.v12->getProperties(dev, &q);
    *p = (tpx_ncclnet_props_v7_t){q.name, q.pciPath, q.guid, q.ptrSupport, q.speed, q.port,
                                  q.latency, q.maxComms, q.maxRecvs, q.netDeviceType,
                                  q.netDeviceVersion};
    return rc;
}

static tpx_nccl_result_t a_listen(int dev, void *h, void **lc)
{
    return abi >= 11 ? T.v11->listen(ctx, dev, h, lc) : T.v8->listen(dev, h, lc);
}

static tpx_nccl_result_t a_connect(int dev, void *h, void **sc, tpx_ncclnet_dev_handle_t **dh)
{
    tpx_ncclnet_comm_config_t cfg = {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return abi >= 11   ? T.v11->connect(ctx, dev, h, sc, dh)
           : abi == 10 ? T.v10->connect(dev, &cfg, h, sc, dh)
                       : T.v8->connect(dev, h, sc, dh);
}

static tpx_nccl_result_t a_regmr(void *comm, void *data, int size, int type, void **mh)
{
    return T.v8->regMr(comm, data, (size_t)size, type, mh); /* v8+ alike */
}

static tpx_nccl_result_t a_isend(void *comm, void *data, int size, int tag, void *mh, void **req)
{
    if (abi == 8)
        return T.v8->isend(comm, data, size, tag, mh, req);
    if (abi == 9)
        return T.v9->isend(comm, data, (size_t)size, tag, mh, req);
    return T.v10->isend(comm, data, (size_t)size, tag, mh, NULL, req); /* v10+ alike */
}

static tpx_nccl_result_t a_irecv(void *comm, int n, void **data, int *sizes, int *tags,
                                 void **mh, void **req)
{
    size_t z[8];
    if (abi == 8)
        return T.v8->irecv(comm, n, data, sizes, tags, mh, req);
    if (n < 0 || n > 8)
        return TPX_NCCL_INVALID_ARGUMENT;
    for (int i = 0; i < n; i++)
        z[i] = (size_t)sizes[i];
    if (abi == 9)
        return T.v9->irecv(comm, n, data, z, tags, mh, req);
    return T.v10->irecv(comm, n, data, z, tags, mh, NULL, req); /* v10+ alike */
}

/* N for a table of version `abi` (8..12) found at `table`. */
static const tpx_ncclnet_v7_t *abi_adapt(const void *table)
{
    T.v8 = table;
    const tpx_ncclnet_v8_t *t = T.v8; /* the entries below share v8's slot and type */
    adapter = (tpx_ncclnet_v7_t){t->name,        a_init,         t->devices,    a_props,
                                 a_listen,       a_connect,      t->accept,     a_regmr,
                                 t->regMrDmaBuf, t->deregMr,     a_isend,       a_irecv,
                                 t->iflush,      t->test,        t->closeSend,  t->closeRecv,
                                 t->closeListen, t->getDeviceMr, t->irecvConsumed};
    return &adapter;
}

/* ---- checks ----------------------------------------------------------------------- */

static void check_table(void *dl)
{
    char got[64] = "";
    char sym[32];
    for (int v = TPX_NCCLNET_ABI_MAX; v >= TPX_NCCLNET_ABI_MIN; v--) {
        snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", v);
        if (dlsym(dl, sym) != NULL)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%sv%d", got[0] ? "," : "", v);
    }
    if (abi == 7) {
        line("exports", strcmp(got, "v7") == 0, got, "v7", NULL);
        line("regMrDmaBuf", N->regMrDmaBuf == NULL, N->regMrDmaBuf ? "set" : "NULL", "NULL", NULL);
    } else { /* a plugin with more tables than Google's: its v<abi> driven as NCCL would */
        line("exports", 1, got, "-", fmt("not compared: driving v%d", abi));
    }
    tpx_ncclnet_props_v7_t pr;
    memset(&pr, 0, sizeof(pr));
    int rc = N->getProperties(0, &pr);
    line("props", rc == 0 && pr.ptrSupport == 3 && pr.maxRecvs == 1 && pr.netDeviceType == 1 &&
                      pr.netDeviceVersion == 7,
         fmt("rc %d ptr 0x%x maxRecvs %d type %d ver %d", rc, pr.ptrSupport, pr.maxRecvs,
             (int)pr.netDeviceType, pr.netDeviceVersion),
         "rc 0 ptr 0x3 maxRecvs 1 type 1 ver 7", NULL);
}

static void check_connect(void)
{
    pair_t p;
    int rc = pair_open(&p);
    const tpx_ncclnet_dev_handle_t *d = (const tpx_ncclnet_dev_handle_t *)p.rstore;
    line("connect/accept", rc == 0, rc == 0 ? "comms" : "failed", "comms",
         rc == 0 ? fmt("after %d NULL connect(s), %d NULL accept(s)", p.null_connects,
                       p.null_accepts)
                 : NULL);
    if (rc != 0)
        return;
    line("device handle", d->netDeviceType == 1 && d->handle != NULL && d->size == 24 &&
                              d->needsProxyProgress == 1 && p.meta != NULL,
         fmt("type %d size %zu proxy %d meta %s", (int)d->netDeviceType, d->size,
             d->needsProxyProgress, p.meta ? "host" : "none"),
         "type 1 size 24 proxy 1 meta host", NULL);
    /* No bounce buffer: the plugin's rxmem skip state (no receive memory
     * from RxDM); host receives work, GPU receives cannot. Said, not judged. */
    line("bounce buffer", 1, p.bounce != NULL ? "present" : "none (rxmem skip)", "-",
         p.bounce != NULL ? NULL : "RxDM exported no receive memory for this GPU");
    unsigned char b[4096];
    void *mh = NULL, *out = (void *)(uintptr_t)0x5a5a5a5a;
    rc = N->regMr(p.sc, b, sizeof(b), TPX_NCCL_PTR_HOST, &mh);
    int rc2 = rc == 0 ? (int)N->getDeviceMr(p.sc, mh, &out) : -1;
    line("getDeviceMr", rc2 == 0 && out == (void *)(uintptr_t)0x5a5a5a5a,
         fmt("rc %d output %s", rc2, out == (void *)(uintptr_t)0x5a5a5a5a ? "untouched" : "written"),
         "rc 0 output untouched", NULL);
    if (mh != NULL)
        N->deregMr(p.sc, mh);
    pair_close(&p);
}

/* Host transfers of every size: bytes in the user buffer, 0 fragments. */
static void check_host_sizes(void)
{
    static const int sizes[] = {0, 1, 4095, 4096, 4097, 65536, MiB, 4 * MiB + 1, 16 * MiB,
                                256 * MiB};
    pair_t p;
    if (pair_open(&p) != 0) {
        line("host transfers", 0, "no comm pair", "comms", NULL);
        return;
    }
    size_t max = 256 * MiB;
    unsigned char *s = malloc(max), *r = malloc(max + 4096);
    void *smh = NULL, *rmh = NULL;
    if (s == NULL || r == NULL || N->regMr(p.sc, s, (int)max, TPX_NCCL_PTR_HOST, &smh) != 0 ||
        N->regMr(p.rc, r, (int)max + 4096, TPX_NCCL_PTR_HOST, &rmh) != 0) {
        line("host transfers", 0, "no memory or regMr failed", "rc 0", NULL);
        goto out;
    }
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        int n = sizes[i];
        fill(s, (size_t)n, (unsigned)i + 1);
        memset(r, 0xee, (size_t)n + 4096);
        void *sreq = NULL, *rreq = NULL;
        uint64_t slot = p.nrecv % TPX_NCCL_UNPACK_QUEUE_DEPTH;
        int prc = post_recv(&p, r, n, rmh, &rreq);
        int src_ = N->isend(p.sc, s, n, 0, smh, &sreq);
        int src = 0, rrc = 0, sd = 0, rd = 0;
        if (prc == 0 && src_ == 0)
            drive(sreq, rreq, DEADLINE_MS, &src, &rrc, &sd, &rd);
        uint64_t frags = rd && p.meta != NULL ? p.meta->cnt[slot] : 0;
        int same = rd && memcmp(s, r, (size_t)n) == 0;
        unsigned char guard[4096];
        memset(guard, 0xee, sizeof(guard));
        int clean = memcmp(r + n, guard, sizeof(guard)) == 0;
        if (rd)
            N->irecvConsumed(p.rc, 1, rreq);
        line(fmt("host %d B", n), prc == 0 && src_ == 0 && sd && rd && same && clean && frags == 0,
             fmt("post %d/%d done %d/%d bytes %s frags %llu", src_, prc, sd, rd,
                 same && clean ? "ok" : "WRONG", (unsigned long long)frags),
             "post 0/0 done 1/1 bytes ok frags 0", NULL);
        if (!(sd && rd))
            break;
    }
out:
    if (smh)
        N->deregMr(p.sc, smh);
    if (rmh)
        N->deregMr(p.rc, rmh);
    free(s);
    free(r);
    pair_close(&p);
}

/* A buffer posted without a memory handle: Google's plugin refuses it
 * ("mhandle is null", rc 3); NCCL never posts one. */
static void check_null_mh(void)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    static unsigned char b[4096];
    void *sreq = NULL, *rreq = NULL;
    int rrc = post_recv(&p, b, sizeof(b), NULL, &rreq);
    int src = N->isend(p.sc, b, sizeof(b), 0, NULL, &sreq);
    line("NULL mhandle", rrc == 3 && src == 3 && rreq == NULL && sreq == NULL,
         fmt("irecv rc %d, isend rc %d", rrc, src), "irecv rc 3, isend rc 3", NULL);
    pair_close(&p);
}

/* 16 requests per comm; the 17th is rc 3. */
static void check_window(void)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    static unsigned char b[17][64];
    void *req[17];
    void *rmh = reg(&p, p.rc, b, sizeof(b)), *smh = reg(&p, p.sc, b, sizeof(b));
    int rc_r = 0, rc_s = 0, k;
    for (k = 0; k < 17 && (rc_r = post_recv(&p, b[k], 64, rmh, &req[k])) == 0; k++)
        ;
    line("irecv window", k == 16 && rc_r == 3, fmt("%d ok, then rc %d", k, rc_r),
         "16 ok, then rc 3", NULL);
    for (k = 0; k < 17 && (rc_s = N->isend(p.sc, b[k], 64, 0, smh, &req[k])) == 0; k++)
        ;
    line("isend window", k == 16 && rc_s == 3, fmt("%d ok, then rc %d", k, rc_s),
         "16 ok, then rc 3", NULL);
    pair_close(&p);
}

/* test() on a request other than the head; consume order. */
static void check_order(void)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    size_t n = MiB;
    unsigned char *s = malloc(2 * n), *r = malloc(2 * n);
    void *sreq[2] = {0}, *rreq[2] = {0};
    int done = 0, size = -1;
    void *rmh = reg(&p, p.rc, r, 2 * n), *smh = reg(&p, p.sc, s, 2 * n);
    post_recv(&p, r, (int)n, rmh, &rreq[0]);
    post_recv(&p, r + n, (int)n, rmh, &rreq[1]);
    nwarn = 0;
    int rc = N->test(rreq[1], &done, &size);
    line("test non-head, idle", rc == 0 && !done && nwarn == 0,
         fmt("rc %d done %d warns %d", rc, done, nwarn), "rc 0 done 0 warns 0",
         "the head is not transmitting yet");
    fill(s, 2 * n, 7);
    N->isend(p.sc, s, (int)n, 0, smh, &sreq[0]);
    N->isend(p.sc, s + n, (int)n, 0, smh, &sreq[1]);
    uint64_t end = test_deadline_ms(DEADLINE_MS);
    int sd = 0;
    do {
        if (!sd)
            N->test(sreq[0], &sd, &size);
        rc = N->test(rreq[1], &done, &size);
    } while (rc == 0 && !done && test_now_ns() < end);
    line("test non-head, busy", rc == 3 && !done, fmt("rc %d done %d", rc, done), "rc 3 done 0",
         "once the head transmits");
    int a, b, c = sd, d = 0;
    drive(sreq[0], rreq[0], DEADLINE_MS, &a, &b, &c, &d);
    int first_done = d;
    c = d = 0;
    drive(sreq[1], rreq[1], DEADLINE_MS, &a, &b, &c, &d);
    nwarn = 0;
    done = 0;
    rc = N->test(rreq[0], &done, &size);
    line("test completed again", rc == 0 && !done && nwarn == 0 && first_done,
         fmt("rc %d done %d warns %d", rc, done, nwarn), "rc 0 done 0 warns 0", NULL);
    rc = N->irecvConsumed(p.rc, 1, rreq[1]);
    line("consume out of order", rc == 3, fmt("rc %d", rc), "rc 3", NULL);
    int ok = N->irecvConsumed(p.rc, 1, rreq[0]) == 0 && N->irecvConsumed(p.rc, 1, rreq[1]) == 0 &&
             memcmp(s, r, 2 * n) == 0;
    line("consume in order", ok, ok ? "rc 0, bytes ok" : "failed", "rc 0, bytes ok", NULL);
    pair_close(&p);
    free(s);
    free(r);
}

/* isend after the receiver closed: accepted, then test() says rc 2. */
static void check_send_after_close(void)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    N->closeRecv(p.rc);
    p.rc = NULL;
    usleep(100 * 1000);
    static unsigned char b[MiB];
    void *req = NULL, *mh = reg(&p, p.sc, b, sizeof(b));
    int rc = N->isend(p.sc, b, sizeof(b), 0, mh, &req);
    int trc = 0, done = 0, size = -1, seen = close_seen(sizeof(b));
    uint64_t end = test_deadline_ms(seen ? 5000 : HANG_MS);
    while (rc == 0 && req != NULL && (trc = N->test(req, &done, &size)) == 0 && !done &&
           test_now_ns() < end)
        ;
    if (seen)
        line("isend after peer close", rc == 0 && trc == 2 && !done,
             fmt("isend rc %d, test rc %d done %d", rc, trc, done),
             "isend rc 0, test rc 2 done 0", fmt("1 MiB > chunk %llu", (unsigned long long)chunk));
    else
        line("isend after peer close", rc == 0 && trc == 0 && !done,
             fmt("isend rc %d, test rc %d done %d", rc, trc, done),
             fmt("isend rc 0, test rc 0 done 0 for %d ms (hang)", HANG_MS),
             fmt("1 MiB <= chunk %llu", (unsigned long long)chunk));
    pair_close(&p);
}

/* Whether some bytes of the message (never zero) reached the receive
 * buffer (zeroed): host receives land in the user buffer as they arrive.
 * The plugin's I/O threads write it meanwhile, hence the volatile reads. */
static int some_arrived(const unsigned char *r, size_t n)
{
    const volatile unsigned char *v = r;
    for (size_t i = 0; i < n; i += 4096)
        if (v[i] != 0 || v[i + 4095] != 0)
            return 1;
    return 0;
}

/* Close one end in the middle of a 256 MiB message: the close comes once
 * bytes of the message were seen in the receive buffer, so the receiver
 * knows the message (a close before it is a different case). */
static void check_close_mid(int close_receiver)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    size_t n = 256 * MiB;
    unsigned char *s = malloc(n), *r = calloc(1, n);
    memset(s, 0xA5, n);
    void *sreq = NULL, *rreq = NULL;
    void *rmh = reg(&p, p.rc, r, n), *smh = reg(&p, p.sc, s, n);
    post_recv(&p, r, (int)n, rmh, &rreq);
    N->isend(p.sc, s, (int)n, 0, smh, &sreq);
    int done = 0, sdone = 0, rdone = 0, size = -1, started = 0;
    uint64_t end = test_deadline_ms(DEADLINE_MS);
    while (!(started = some_arrived(r, n)) && !sdone && !rdone && test_now_ns() < end) {
        N->test(sreq, &sdone, &size);
        N->test(rreq, &rdone, &size);
    }
    if (!started || sdone || rdone) {
        line(close_receiver ? "receiver closes mid-msg" : "sender closes mid-msg", 0,
             fmt("the message %s", !started ? "never started" : "completed at once"),
             "started, not done", NULL);
        pair_close(&p);
        free(s);
        free(r);
        return;
    }
    if (close_receiver) {
        unreg(&p, p.rc);
        N->closeRecv(p.rc);
        p.rc = NULL;
    } else {
        unreg(&p, p.sc);
        N->closeSend(p.sc);
        p.sc = NULL;
    }
    void *req = close_receiver ? sreq : rreq;
    int rc = 0, seen = close_seen(n);
    uint64_t t0 = test_now_ns(), limit = test_deadline_ms(seen ? 5000 : HANG_MS);
    done = 0;
    while ((rc = N->test(req, &done, &size)) == 0 && !done && test_now_ns() < limit)
        usleep(100);
    uint64_t ms = (uint64_t)test_ms_since(t0);
    const char *what = close_receiver ? "receiver closes mid-msg" : "sender closes mid-msg";
    const char *who = close_receiver ? "sender" : "receiver";
    const char *why = fmt("256 MiB %s chunk %llu", seen ? ">" : "<=", (unsigned long long)chunk);
    if (seen)
        line(what, rc == 2 && !done,
             fmt("%s test rc %d done %d after %llu ms", who, rc, done, (unsigned long long)ms),
             "rc 2 done 0", why);
    else
        line(what, rc == 0 && !done,
             fmt("%s test rc %d done %d for %llu ms", who, rc, done, (unsigned long long)ms),
             fmt("rc 0 done 0 for %d ms (hang)", HANG_MS), why);
    pair_close(&p);
    free(s);
    free(r);
}

/* Google's plugin writes its control connection without MSG_NOSIGNAL: a
 * test() that finds the peer gone (the close rows above, when they see it)
 * raises SIGPIPE on the calling thread. Its data threads write without it
 * too: one whose send meets the dead peer as EPIPE (not ECONNRESET: a race
 * with the peer's reset) raises it on that thread, even where test() hangs
 * (an isend after the peer closed, one chunk), so that count is reported,
 * not judged. */
static void check_sigpipe(void)
{
    int seen = close_seen(256 * MiB), caller = atomic_load(&pipes_caller) > 0;
    const char *got = fmt("test(): %s, plugin threads: %d", caller ? "raised" : "none",
                          atomic_load(&pipes_plugin));
    if (real_mode)
        line("SIGPIPE", caller == seen, got,
             fmt("test(): %s, plugin threads: -", seen ? "raised" : "none"),
             "after a peer's close");
    else
        line("SIGPIPE", 1, got, "-",
             "deliberate: strict mode raises it only with TPX_SOCK_TCPX_SIGPIPE=1");
}

/* A message larger than the receive: Google's plugin writes past the
 * receive; tpx's strict mode refuses it (rc 3, nothing written). */
static void check_overflow(void)
{
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    static unsigned char s[8000], r[8000];
    fill(s, sizeof(s), 9);
    memset(r, 0xee, sizeof(r));
    void *sreq = NULL, *rreq = NULL;
    post_recv(&p, r, 1000, reg(&p, p.rc, r, sizeof(r)), &rreq);
    N->isend(p.sc, s, sizeof(s), 0, reg(&p, p.sc, s, sizeof(s)), &sreq);
    int src, rrc, sd = 0, rd = 0;
    drive(sreq, rreq, 5000, &src, &rrc, &sd, &rd);
    size_t past = 0;
    for (size_t i = 1000; i < sizeof(r); i++)
        past += r[i] != 0xee;
    char *got = fmt("recv rc %d done %d, %zu bytes past", rrc, rd, past);
    if (real_mode)
        line("overflow", rd && past > 0, got, "done, bytes written past", NULL);
    else
        line("overflow", rrc == 3 && !rd && past == 0, got, "recv rc 3 done 0, 0 bytes past",
             "deliberate: the plugin writes past the receive");
    pair_close(&p);
}

/* Receives into GPU memory (with a GPU only): the payload is left in the
 * bounce buffer as fragments, gathered here with device-to-host copies.
 * Google's plugin registers CUDA memory as a dmabuf for its NIC's PCI
 * device, found from the NIC's pciPath with no check: on a NIC that has
 * none (loopback) its regMr dereferences NULL, so --real runs these rows
 * only on a NIC with a PCI device. */
static void check_cuda(void)
{
    tpx_ncclnet_props_v7_t pr;
    memset(&pr, 0, sizeof(pr));
    if (real_mode && (N->getProperties(0, &pr) != TPX_NCCL_SUCCESS || pr.pciPath == NULL)) {
        line("cuda 4 MiB recv", 1, "not run", "-",
             "skipped: the NIC has no PCI device (loopback); CUDA regMr crashes the plugin");
        return;
    }
    if (tpx__cuda_init() != TPX_OK || tpx__cuda_ctx_retain(0, NULL) != TPX_OK) {
        line("cuda 4 MiB recv", 1, "skipped", "-", "no GPU");
        return;
    }
    const size_t n = 4 * MiB;
    tpx__cuda_mem_t m;
    memset(&m, 0, sizeof(m));
    unsigned char *s = malloc(n), *back = malloc(n);
    pair_t p;
    int popen = -1;
    if (s == NULL || back == NULL || tpx__cuda_mem_alloc(0, n + 4096, &m) != TPX_OK ||
        (popen = pair_open(&p)) != 0) {
        line("cuda 4 MiB recv", 0, "set-up failed", "done, bytes ok", NULL);
        goto out;
    }
    fill(s, n, 11);
    void *rmh = NULL, *sreq = NULL, *rreq = NULL;
    int rc = N->regMr(p.rc, (void *)(uintptr_t)m.ptr, (int)(n + 4096), TPX_NCCL_PTR_CUDA, &rmh);
    uint64_t slot = p.nrecv % TPX_NCCL_UNPACK_QUEUE_DEPTH;
    int prc = rc == 0 ? post_recv(&p, (void *)(uintptr_t)m.ptr, (int)n, rmh, &rreq) : -1;
    int src_ = N->isend(p.sc, s, (int)n, 0, reg(&p, p.sc, s, n), &sreq);
    int a, b, sd = 0, rd = 0;
    if (prc == 0 && src_ == 0)
        drive(sreq, rreq, DEADLINE_MS, &a, &b, &sd, &rd);
    uint64_t frags = rd && p.meta != NULL ? p.meta->cnt[slot] : 0;
    int same = 0;
    if (rd && frags > 0 && frags <= TPX_NCCL_UNPACK_MAX_PAGES &&
        tpx__cuda_devmem_gather(back, p.bounce, p.meta->mem[slot], frags) == TPX_OK)
        same = memcmp(s, back, n) == 0;
    if (rd)
        N->irecvConsumed(p.rc, 1, rreq);
    line("cuda 4 MiB recv", rd && frags >= n / 4096 && frags <= 2048 && same,
         fmt("regMr %d done %d frags %llu bytes %s", rc, rd, (unsigned long long)frags,
             same ? "ok" : "WRONG"),
         "regMr 0 done 1 frags 1024..2048 bytes ok", "gathered from the bounce buffer");
    rreq = NULL;
    int big = rmh != NULL ? post_recv(&p, (void *)(uintptr_t)m.ptr, (int)(n + 4096), rmh, &rreq)
                          : -1;
    if (real_mode)
        line("cuda recv > 4 MiB", 1, fmt("irecv rc %d", big), "-", "not checked: the plugin "
             "exits once a receive takes more than 2048 pages");
    else
        line("cuda recv > 4 MiB", big == 4, fmt("irecv rc %d", big), "rc 4",
             "deliberate: refused at post; the plugin takes it, and exits past 2048 pages");
    if (rmh != NULL)
        N->deregMr(p.rc, rmh);
out:
    if (popen == 0)
        pair_close(&p);
    tpx__cuda_mem_free(&m);
    tpx__cuda_ctx_release(0);
    free(s);
    free(back);
}

/* Calls that crash Google's plugin: strict mode refuses them (rc 3). */
static void check_crashers(void)
{
    if (real_mode) {
        line("accept(NULL devcomm)", 1, "not run", "segfault", "skipped: it crashes the plugin");
        line("iflush", 1, "not run", "segfault", "skipped: it crashes the plugin");
        return;
    }
    pair_t p;
    if (pair_open(&p) != 0)
        return;
    void *lc = NULL, *comm = NULL;
    unsigned char h[128];
    int rc = N->listen(0, h, &lc);
    int arc = rc == 0 ? (int)N->accept(lc, &comm, NULL) : -1;
    line("accept(NULL devcomm)", arc == 3 && comm == NULL, fmt("rc %d comm %s", arc,
         comm ? "set" : "NULL"), "rc 3 comm NULL", "deliberate: the plugin crashes later");
    if (lc != NULL)
        N->closeListen(lc);
    static unsigned char b[4096];
    void *d[1] = {b}, *m[1] = {NULL}, *req = NULL;
    int sz[1] = {sizeof(b)};
    rc = N->iflush(p.rc, 1, d, sz, m, &req);
    line("iflush", rc == 3, fmt("rc %d", rc), "rc 3", "deliberate: the plugin "
         "dereferences the request");
    pair_close(&p);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PLUGIN.so [--real] [--chunk BYTES] [--abi 7..12]\n", argv[0]);
        return 2;
    }
    const char *c = getenv("NCCL_DYNAMIC_CHUNK_SIZE");
    if (c == NULL || *c == '\0')
        c = getenv("TPX_SOCK_TCPX_CHUNK");
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--real") == 0) {
            real_mode = 1;
        } else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
            c = argv[++i];
        } else if (strcmp(argv[i], "--abi") == 0 && i + 1 < argc) {
            abi = atoi(argv[++i]);
        } else {
            fprintf(stderr, "%s: unknown argument %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (abi < TPX_NCCLNET_ABI_MIN || abi > TPX_NCCLNET_ABI_MAX) {
        fprintf(stderr, "--abi %d: 7..12\n", abi);
        return 2;
    }
    if (c != NULL && *c != '\0') {
        char *end = NULL;
        unsigned long long v = strtoull(c, &end, 10);
        if (end != NULL && (*end == 'K' || *end == 'k'))
            v <<= 10, end++;
        else if (end != NULL && (*end == 'M' || *end == 'm'))
            v <<= 20, end++;
        if (v == 0 || end == NULL || *end != '\0') {
            fprintf(stderr, "%s: bad chunk size '%s'\n", argv[0], c);
            return 2;
        }
        chunk = v;
    }
    /* Caught, not ignored: the SIGPIPE row sees whether and where the plugin
     * raised one (the handler is process-wide, its threads included). */
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigpipe;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPIPE, &sa, NULL);
    void *dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 2;
    }
    char sym[32];
    snprintf(sym, sizeof(sym), TPX_NCCLNET_SYMBOL_PREFIX "%d", abi);
    const void *table = dlsym(dl, sym);
    if (table == NULL) {
        fprintf(stderr, "%s exports no %s\n", argv[1], sym);
        return 2;
    }
    N = abi == 7 ? table : abi_adapt(table);
    int ndev = 0;
    if (N->init(plugin_log) != TPX_NCCL_SUCCESS || N->devices(&ndev) != TPX_NCCL_SUCCESS ||
        ndev < 1) {
        fprintf(stderr, "%s: init/devices failed (%d devices)\n", argv[1], ndev);
        return 2;
    }
    printf("plugin %s (%s, ncclNet v%d), %d device(s), chunk %llu; expectations: Google's "
           "plugin 3.1.9%s\n",
           N->name, argv[1], abi, ndev, (unsigned long long)chunk,
           real_mode ? "" : " (deliberate differences: tpx strict mode)");
    check_table(dl);
    check_connect();
    check_host_sizes();
    check_null_mh();
    check_window();
    check_order();
    check_send_after_close();
    check_close_mid(1);
    check_close_mid(0);
    check_sigpipe();
    check_overflow();
    check_cuda();
    check_crashers();
    if (ctx != NULL && (abi == 11 ? T.v11->finalize(ctx) : T.v12->finalize(ctx)) != 0)
        line("finalize", 0, "failed", "rc 0", NULL);
    printf("%d difference(s)\n", ndiff);
    return ndiff > 125 ? 125 : ndiff;
}
