/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tcpx.c - the strict-TCPX scenarios of test_transport (tcpx_*).
 *
 * They run with TPX_SOCK_TCPX=1 and check that the built-in transport
 * behaves like Google's GPUDirect-TCPX plugin in every way an engine can
 * observe (DESIGN.md section 3), through the exported tables only:
 *  - properties: netDeviceType UNPACK, version 7, maxRecvs 1;
 *  - connect()/accept() hand out NULL comms for the first few calls even
 *    when everything is ready; accept() writes the device handle into
 *    storage the caller provides and refuses to run without it;
 *  - devmem-style delivery: test() reports done, never writes sizes and
 *    never touches the user buffer; the payload sits in the bounce buffer,
 *    described by the slot's row of the loadMeta queue (shuffled 4 KiB page
 *    fragments), which the test gathers itself (the CPU unpack) before
 *    irecvConsumed();
 *  - 16 requests per comm (the 17th is rc 3), test() on the FIFO head only,
 *    irecvConsumed() in FIFO order only, receive slots held until consumed;
 *  - tags ignored (FIFO matching), rc 2 with done=0 after the peer died,
 *    iflush() refused, init() once per process, irecv() of at most 4 MiB.
 *
 * The harness (transport_test.h) is shared with the other scenarios; its
 * accept helper passes no device-handle storage, so the roles here open
 * their comms with their own helpers (rx_open, sx_open).
 */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "transport_test.h"

#define TX_DEPTH        TPX_NCCL_UNPACK_QUEUE_DEPTH              /* 16 requests per comm */
#define TX_MAX_RECV     ((size_t)TPX_NCCL_UNPACK_MAX_SLICE_SIZE) /* 4 MiB per irecv */
#define TX_PAGE         TPX_NCCL_UNPACK_PAGE_SIZE
#define TX_MAX_FRAGS    TPX_NCCL_UNPACK_MAX_PAGES /* loadMeta entries per slot */
#define TX_SENTINEL     0x5eadbeef                /* pre-filled into test()'s sizes */
#define TX_POISON       0xA5                      /* pre-filled into receive buffers */
#define TX_STORE        512                       /* device-handle storage, bytes */
#define TX_STORE_POISON 0xEE
#define RC_SYS          TPX_NCCL_SYSTEM_ERROR   /* 2 */
#define RC_INT          TPX_NCCL_INTERNAL_ERROR /* 3 */
#define STUCK_MS        3000 /* how long rc 2 / done 0 is polled before giving up */

/* ---- raw table calls the shim does not wrap ---------------------------------- */

#define TX_CALL(nt, member, ...)                                                                   \
    ((nt)->abi == 7   ? (int)(nt)->t.v7->member(__VA_ARGS__)                                       \
     : (nt)->abi == 8 ? (int)(nt)->t.v8->member(__VA_ARGS__)                                       \
     : (nt)->abi == 9 ? (int)(nt)->t.v9->member(__VA_ARGS__)                                       \
                      : (int)(nt)->t.v10->member(__VA_ARGS__))

static int tx_accept(const nt_t *nt, void *lc, void **rc, tpx_ncclnet_dev_handle_t **dh)
{
    return TX_CALL(nt, accept, lc, rc, dh);
}

static int tx_consumed(const nt_t *nt, void *comm, void *req)
{
    return TX_CALL(nt, irecvConsumed, comm, 1, req);
}

static int tx_iflush(const nt_t *nt, void *comm, void *data, int size, void *mh, void **req)
{
    void *d[1] = {data};
    int s[1] = {size};
    void *m[1] = {mh};
    return TX_CALL(nt, iflush, comm, 1, d, s, m, req);
}

/* ---- test() with a sentinel in sizes ---------------------------------------- */

/* The first value test() wrote into sizes, or TX_SENTINEL while it never did. */
static int tx_size_seen = TX_SENTINEL;

static int tx_test(role_t *r, void *req, int *done)
{
    int size = TX_SENTINEL;
    *done = 0;
    int rc = nt_test(&r->nt, req, done, &size);
    if (size != TX_SENTINEL && tx_size_seen == TX_SENTINEL)
        tx_size_seen = size;
    return rc;
}

#define CHECK_NO_SIZES()                                                                           \
    CHECK(tx_size_seen == TX_SENTINEL,                                                             \
          "test() wrote %d into sizes: TCPX's test() never writes sizes", tx_size_seen)

/* Poll test() on `req` (the head of its comm) until done. rc 0, or rc 2 with
 * done=1 (the data arrived, then the peer closed), is success. */
static int tx_wait(role_t *r, void *req, int ms, const char *what)
{
    uint64_t deadline = test_deadline_ms(ms);
    for (;;) {
        int done = 0;
        int rc = tx_test(r, req, &done);
        CHECK_NO_SIZES();
        if (done) {
            CHECK(rc == 0 || rc == RC_SYS, "%s: test() said done with rc %d", what, rc);
            return 0;
        }
        CHECK(rc == 0, "%s: test() returned rc %d (done 0)", what, rc);
        CHECK(test_now_ns() < deadline, "%s: not done within %d ms", what, ms);
        sched_yield();
    }
}

/* 1 once the peer role has exited (EOF on the link). */
static int link_eof(role_t *r)
{
    char c;
    return recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static uint64_t mix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the receiver: comm, device handle, unpack ------------------------------ */

typedef struct {
    void *lc, *rc;
    _Alignas(16) unsigned char store[TX_STORE]; /* device-handle storage for accept() */
    tpx_ncclnet_dev_handle_t *dh;               /* what accept() gets: &dh, dh -> store */
    tpx_nccl_unpack_handle_t uhc;               /* the device handle's `handle`, copied
                                                   down (it is device memory); meta at its
                                                   CPU address, bounce_buf device memory */
    const tpx_nccl_unpack_handle_t *uh;         /* &uhc */
    uint64_t posted;                            /* irecv()s that succeeded on rc */
    int accept_nulls;                           /* accept() calls that gave a NULL comm */
} rx_t;

/* One receive: the index it got on its comm picks the loadMeta row. */
typedef struct {
    void *req;
    uint64_t idx;
    unsigned char *buf;
    size_t posted, size; /* capacity; the sender's size */
    uint64_t seed;
} rmsg_t;

/* The storage accept() filled: {UNPACK, 7, handle, sizeof(unpack handle), 1},
 * nothing written past it, and a handle with a queue and a bounce buffer. */
static int rx_check_devhandle(rx_t *x)
{
    const tpx_ncclnet_dev_handle_t *d = (const tpx_ncclnet_dev_handle_t *)x->store;
    CHECK(d->netDeviceType == TPX_NCCL_NET_DEVICE_UNPACK,
          "device handle: netDeviceType %d, expected UNPACK (1)", (int)d->netDeviceType);
    CHECK(d->netDeviceVersion == TPX_NCCL_NET_DEVICE_UNPACK_VERSION,
          "device handle: netDeviceVersion %d, expected 7", d->netDeviceVersion);
    CHECK(d->handle != NULL, "device handle: handle is NULL");
    CHECK(d->size == sizeof(tpx_nccl_unpack_handle_t), "device handle: size %zu, expected %zu",
          d->size, sizeof(tpx_nccl_unpack_handle_t));
    CHECK(d->needsProxyProgress == 1, "device handle: needsProxyProgress %d, expected 1",
          d->needsProxyProgress);
    size_t bad = nt_check_byte(x->store + sizeof(*d), TX_STORE - sizeof(*d), TX_STORE_POISON);
    CHECK(bad == NT_VERIFY_OK, "accept() wrote byte %zu of the device-handle storage (past %zu)",
          sizeof(*d) + bad, sizeof(*d));
    tpx_nccl_unpack_handle_t u;
    CHECK(tpx__cuda_devmem_read(&u, d->handle, sizeof(u)) == TPX_OK,
          "cannot copy the unpack handle at %p to the host", d->handle);
    CHECK(u.meta != NULL && u.bounce_buf != NULL,
          "unpack handle: meta %p bounce_buf %p; both must be set", (void *)u.meta, u.bounce_buf);
    const void *meta = NULL;
    CHECK(tpx__cuda_host_view(u.meta, &meta) == TPX_OK, "unpack handle: meta %p is not host "
          "memory", (void *)u.meta);
    x->uhc = u;
    x->uhc.meta = (tpx_nccl_unpack_meta_t *)meta;
    x->uh = &x->uhc;
    return 0;
}

/* Poll accept() with device-handle storage until a comm. */
static int rx_accept(role_t *r, rx_t *x, int ms)
{
    uint64_t deadline = test_deadline_ms(ms);
    memset(x->store, TX_STORE_POISON, sizeof(x->store));
    x->rc = NULL;
    x->accept_nulls = 0;
    for (;;) {
        x->dh = (tpx_ncclnet_dev_handle_t *)x->store;
        int rc = tx_accept(&r->nt, x->lc, &x->rc, &x->dh);
        CHECK(rc == 0, "accept() with device-handle storage returned rc %d", rc);
        if (x->rc != NULL)
            break;
        x->accept_nulls++;
        CHECK(test_now_ns() < deadline, "accept: no comm within %d ms (%d NULL comms)", ms,
              x->accept_nulls);
        CHECK(!link_eof(r), "accept: the sender role exited");
        sched_yield();
    }
    return rx_check_devhandle(x);
}

/* init, listen on device 0, hand the handle over (not yet accepted). */
static int rx_listen(role_t *r, rx_t *x)
{
    unsigned char h[HANDLE_SIZE];
    memset(x, 0, sizeof(*x));
    memset(h, 0, sizeof(h));
    TRY(tt_role_init(r));
    CHECK_RC(nt_listen(&r->nt, 0, h, &x->lc));
    return tt_link_put(r, h, sizeof(h));
}

static int rx_open(role_t *r, rx_t *x)
{
    TRY(rx_listen(r, x));
    return rx_accept(r, x, CONN_MS);
}

static int rx_close(role_t *r, rx_t *x)
{
    CHECK_RC(nt_close_recv(&r->nt, x->rc));
    CHECK_RC(nt_close_listen(&r->nt, x->lc));
    return 0;
}

/* A memory handle for buf[size) on comm: every buffer is registered, as
 * NCCL does (TCPX refuses a NULL handle: rc 3, "mhandle is null"). The
 * registrations of this process are kept here for its life: a buffer is
 * registered once per comm, the first time it is posted. */
static void *tx_mh(role_t *r, void *comm, void *buf, size_t size)
{
    static struct {
        void *comm, *mh;
        unsigned char *buf;
        size_t size;
    } regs[512];
    static int nregs;
    static unsigned next;
    unsigned char *b = buf;
    for (int i = 0; i < nregs; i++)
        if (regs[i].comm == comm && regs[i].buf <= b && size <= regs[i].size &&
            (size_t)(b - regs[i].buf) <= regs[i].size - size)
            return regs[i].mh;
    void *mh = NULL;
    if (nt_regmr(&r->nt, comm, buf, size, TPX_NCCL_PTR_HOST, &mh) != 0)
        return NULL; /* the post then fails, and says so */
    /* full: the oldest goes (a handle is read at post only) */
    int k = nregs < (int)(sizeof(regs) / sizeof(regs[0])) ? nregs++ : (int)(next++ % 512);
    if (regs[k].mh != NULL)
        (void)nt_deregmr(&r->nt, regs[k].comm, regs[k].mh);
    regs[k].comm = comm;
    regs[k].mh = mh;
    regs[k].buf = b;
    regs[k].size = size;
    return mh;
}

/* irecv() m->posted bytes into m->buf, poisoned first (registered first
 * when mh is NULL). Returns the plugin's rc. */
static int rx_post(role_t *r, rx_t *x, rmsg_t *m, int tag, void *mh)
{
    memset(m->buf, TX_POISON, m->posted);
    m->req = NULL;
    if (mh == NULL)
        mh = tx_mh(r, x->rc, m->buf, m->posted);
    int rc = nt_irecv1(&r->nt, x->rc, m->buf, m->posted, tag, mh, &m->req);
    if (rc == 0)
        m->idx = x->posted++;
    return rc;
}

#define RX_POST_OK(r, x, m, tag, mh)                                                               \
    do {                                                                                           \
        int e_ = rx_post((r), (x), (m), (tag), (mh));                                              \
        CHECK(e_ == 0 && (m)->req != NULL, "irecv(%zu bytes) returned rc %d (request %p)",         \
              (m)->posted, e_, (m)->req);                                                          \
    } while (0)

static int rx_consume(role_t *r, rx_t *x, rmsg_t *m)
{
    return tx_consumed(&r->nt, x->rc, m->req);
}

typedef struct {
    uint64_t off;
    uint32_t len;
} span_t;

static int span_cmp(const void *a, const void *b)
{
    const span_t *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* After test() said done: the user buffer is untouched; the slot's fragments
 * lie each in one bounce page, tile [0, size) exactly once, are shuffled;
 * gather them (the CPU unpack) and verify the bytes. */
static int rx_unpack(rx_t *x, rmsg_t *m)
{
    static span_t sp[TX_MAX_FRAGS];
    uint32_t slot = (uint32_t)(m->idx % TX_DEPTH);
    const tpx_nccl_unpack_meta_t *meta = x->uh->meta;
    const unsigned char *bounce = x->uh->bounce_buf;
    size_t bad = nt_check_byte(m->buf, m->posted, TX_POISON);
    CHECK(bad == NT_VERIFY_OK,
          "receive %llu (%zu bytes): the plugin wrote the user buffer at offset %zu; TCPX "
          "delivers into the bounce buffer only",
          (unsigned long long)m->idx, m->size, bad);
    uint64_t cnt = meta->cnt[slot];
    uint64_t min = (m->size + TX_PAGE - 1) / TX_PAGE;
    CHECK(cnt <= TX_MAX_FRAGS && cnt >= min,
          "receive %llu (%zu bytes, slot %u): cnt %llu; expected %llu..%u",
          (unsigned long long)m->idx, m->size, slot, (unsigned long long)cnt,
          (unsigned long long)min, TX_MAX_FRAGS);
    int ascending = 1;
    for (uint64_t i = 0; i < cnt; i++) {
        const tpx_nccl_load_meta_t *f = &meta->mem[slot][i];
        CHECK(f->f.len >= 1 && f->f.len <= TX_PAGE, "receive %llu fragment %llu: len %u",
              (unsigned long long)m->idx, (unsigned long long)i, f->f.len);
        CHECK(f->f.src_off % TX_PAGE + f->f.len <= TX_PAGE,
              "receive %llu fragment %llu: src_off %u len %u crosses a bounce page",
              (unsigned long long)m->idx, (unsigned long long)i, f->f.src_off, f->f.len);
        CHECK(f->f.dst_off < m->size && f->f.len <= m->size - f->f.dst_off,
              "receive %llu fragment %llu: dst_off %llu len %u outside the %zu-byte message",
              (unsigned long long)m->idx, (unsigned long long)i, (unsigned long long)f->f.dst_off,
              f->f.len, m->size);
        if (i > 0 && f->f.dst_off < meta->mem[slot][i - 1].f.dst_off)
            ascending = 0;
        sp[i] = (span_t){f->f.dst_off, f->f.len};
    }
    CHECK(cnt < 8 || !ascending,
          "receive %llu: its %llu fragments are published in ascending dst_off order; TCPX "
          "delivers pages in no order (the emulation must shuffle)",
          (unsigned long long)m->idx, (unsigned long long)cnt);
    qsort(sp, (size_t)cnt, sizeof(sp[0]), span_cmp);
    uint64_t end = 0;
    for (uint64_t i = 0; i < cnt; i++) {
        CHECK(sp[i].off == end, "receive %llu (%zu bytes): %s at message offset %llu",
              (unsigned long long)m->idx, m->size,
              sp[i].off < end ? "overlapping fragments" : "gap",
              (unsigned long long)(sp[i].off < end ? sp[i].off : end));
        end += sp[i].len;
    }
    CHECK(end == m->size, "receive %llu: fragments cover %llu bytes of %zu",
          (unsigned long long)m->idx, (unsigned long long)end, m->size);
    /* the unpack, in the published order: the bounce buffer is device
     * memory, copied down fragment by fragment */
    CHECK(tpx__cuda_devmem_gather(m->buf, bounce, meta->mem[slot], cnt) == TPX_OK,
          "receive %llu: copying %llu fragments out of the bounce buffer failed",
          (unsigned long long)m->idx, (unsigned long long)cnt);
    bad = nt_verify(m->buf, m->size, m->seed);
    CHECK(bad == NT_VERIFY_OK, "receive %llu (%zu bytes, %llu fragments): first wrong byte at %zu",
          (unsigned long long)m->idx, m->size, (unsigned long long)cnt, bad);
    bad = nt_check_byte(m->buf + m->size, m->posted - m->size, TX_POISON);
    CHECK(bad == NT_VERIFY_OK, "receive %llu: byte %zu past the %zu-byte message written",
          (unsigned long long)m->idx, m->size + bad, m->size);
    return 0;
}

/* Receives completed and not consumed hold disjoint bounce-buffer bytes. */
static int rx_bounce_disjoint(rx_t *x, const rmsg_t *ms, int n)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)x->uh->meta->cnt[ms[i].idx % TX_DEPTH];
    span_t *sp = malloc((total + 1) * sizeof(*sp));
    CHECK(sp != NULL, "out of memory");
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)(ms[i].idx % TX_DEPTH);
        for (uint64_t j = 0; j < x->uh->meta->cnt[slot]; j++) {
            const tpx_nccl_load_meta_t *f = &x->uh->meta->mem[slot][j];
            sp[k++] = (span_t){f->f.src_off, f->f.len};
        }
    }
    if (k == 0) {
        free(sp);
        return 0;
    }
    qsort(sp, k, sizeof(sp[0]), span_cmp);
    size_t clash = 0;
    for (size_t i = 1; i < k && clash == 0; i++)
        if (sp[i].off < sp[i - 1].off + sp[i - 1].len)
            clash = i;
    span_t a = sp[clash > 0 ? clash - 1 : 0], b = sp[clash];
    free(sp);
    CHECK(clash == 0,
          "%d receives done, not consumed: bounce bytes [%llu, +%u) and [%llu, +%u) "
          "overlap",
          n, (unsigned long long)a.off, a.len, (unsigned long long)b.off, b.len);
    return 0;
}

/* Post, wait, unpack, verify and consume one receive. */
static int rx_one(role_t *r, rx_t *x, rmsg_t *m, int tag)
{
    RX_POST_OK(r, x, m, tag, NULL);
    TRY(tx_wait(r, m->req, IO_MS, "irecv"));
    TRY(rx_unpack(x, m));
    CHECK_RC(rx_consume(r, x, m));
    return 0;
}

/* ---- the sender ---------------------------------------------------------------- */

typedef struct {
    size_t size;
    uint64_t seed;
    int tag;
} smsg_t;

/* Connect polling with the same handle buffer; count the NULL comms. */
static int sx_connect(role_t *r, unsigned char *h, void **sc, int *nulls)
{
    uint64_t deadline = test_deadline_ms(CONN_MS);
    int n = 0;
    *sc = NULL;
    for (;;) {
        int rc = nt_connect(&r->nt, 0, h, sc);
        CHECK(rc == 0, "connect() returned rc %d after %d NULL comms", rc, n);
        if (*sc != NULL)
            break;
        n++;
        CHECK(test_now_ns() < deadline, "connect: no comm within %d ms", CONN_MS);
        CHECK(!link_eof(r), "connect: the receiver role exited");
        sched_yield();
    }
    if (nulls != NULL)
        *nulls = n;
    return 0;
}

static int sx_open(role_t *r, void **sc)
{
    unsigned char h[HANDLE_SIZE];
    TRY(tt_link_get(r, h, sizeof(h), CONN_MS));
    TRY(tt_role_init(r));
    return sx_connect(r, h, sc, NULL);
}

/* Send m[0..n) with up to `window` isends in flight, testing the head only.
 * buf holds TX_DEPTH regions of TX_MAX_RECV bytes. */
static int sx_stream(role_t *r, void *sc, unsigned char *buf, const smsg_t *m, int n, int window)
{
    void *reqs[TX_DEPTH];
    int head = 0, tail = 0;
    while (head < n) {
        while (tail < n && tail - head < window) {
            unsigned char *b = buf + (size_t)(tail % TX_DEPTH) * TX_MAX_RECV;
            nt_fill(b, m[tail].size, m[tail].seed);
            void *req = NULL;
            int rc = nt_isend(&r->nt, sc, b, m[tail].size, m[tail].tag,
                               tx_mh(r, sc, buf, (size_t)TX_DEPTH * TX_MAX_RECV), &req);
            CHECK(rc == 0 && req != NULL, "isend %d of %d (%zu bytes, %d in flight): rc %d", tail,
                  n, m[tail].size, tail - head, rc);
            reqs[tail % TX_DEPTH] = req;
            tail++;
        }
        TRY(tx_wait(r, reqs[head % TX_DEPTH], IO_MS, "isend"));
        head++;
    }
    return 0;
}

static int sx_one(role_t *r, void *sc, unsigned char *buf, size_t size, uint64_t seed, int tag)
{
    smsg_t m = {size, seed, tag};
    return sx_stream(r, sc, buf, &m, 1, 1);
}

/* The receiver says 'z' when it has everything; then close. */
static int sx_finish(role_t *r, void *sc, unsigned char *buf, int expect_quiet)
{
    TRY(tt_sync_get(r, 'z', IO_MS));
    CHECK_RC(nt_close_send(&r->nt, sc));
    nt_free(buf, TX_DEPTH * TX_MAX_RECV);
    return expect_quiet ? tt_expect_no_warnings() : 0;
}

static int rx_finish(role_t *r, rx_t *x, unsigned char *buf, size_t len, int expect_quiet)
{
    TRY(tt_sync_put(r, 'z'));
    TRY(rx_close(r, x));
    nt_free(buf, len);
    return expect_quiet ? tt_expect_no_warnings() : 0;
}

static unsigned char *sx_buf(void)
{
    return nt_alloc(TX_DEPTH * TX_MAX_RECV);
}

/* ---- tcpx_props ------------------------------------------------------------------ */

int tcpx_props_role(role_t *r)
{
    nt_props_t p;
    TRY(tt_role_init(r));
    CHECK_RC(nt_props(&r->nt, 0, &p));
    test_say("v%d dev 0 (%s): netDeviceType %d netDeviceVersion %d maxRecvs %d ptrSupport %#x "
             "forceFlush %d",
             r->nt.abi, p.name ? p.name : "(null)", p.dev_type, p.dev_version, p.max_recvs,
             p.ptr_support, p.force_flush);
    CHECK(p.dev_type == TPX_NCCL_NET_DEVICE_UNPACK, "netDeviceType %d, expected UNPACK (1)",
          p.dev_type);
    CHECK(p.dev_version == TPX_NCCL_NET_DEVICE_UNPACK_VERSION, "netDeviceVersion %d, expected 7",
          p.dev_version);
    CHECK(p.max_recvs == 1, "maxRecvs %d, expected 1", p.max_recvs);
    CHECK(p.ptr_support & TPX_NCCL_PTR_HOST, "ptrSupport %#x lacks HOST", p.ptr_support);
    if (r->nt.abi >= 9)
        CHECK(p.force_flush == 0, "forceFlush %d: TCPX's iflush must never be called",
              p.force_flush);
    return tt_expect_no_warnings();
}

/* ---- tcpx_nullcomm ----------------------------------------------------------------- */

#define NULLCOMM_SIZE 65537

int tcpx_nullcomm_recv(role_t *r)
{
    rx_t x;
    TRY(rx_listen(r, &x));
    /* The sender's connect() has returned its comm: everything is ready. */
    TRY(tt_sync_get(r, 'c', CONN_MS));
    TRY(rx_accept(r, &x, CONN_MS));
    test_say("accept(): %d NULL comm(s) with the peer ready, then a comm", x.accept_nulls);
    CHECK(x.accept_nulls >= 3,
          "accept() returned a comm after %d NULL comms; TCPX gives NULL comms for the first "
          "calls (expected >= 3)",
          x.accept_nulls);
    unsigned char *buf = nt_alloc(NULLCOMM_SIZE);
    CHECK(buf != NULL, "out of memory");
    rmsg_t m = {
        .buf = buf, .posted = NULLCOMM_SIZE, .size = NULLCOMM_SIZE, .seed = tt_seed(41, 0, 0)};
    TRY(rx_one(r, &x, &m, 0));
    return rx_finish(r, &x, buf, NULLCOMM_SIZE, 1);
}

int tcpx_nullcomm_send(role_t *r)
{
    unsigned char h[HANDLE_SIZE];
    void *sc;
    int nulls = 0;
    TRY(tt_link_get(r, h, sizeof(h), CONN_MS));
    TRY(tt_role_init(r));
    /* The listener is up (its handle is here): the peer is ready. */
    TRY(sx_connect(r, h, &sc, &nulls));
    test_say("connect(): %d NULL comm(s) with the listener ready, then a comm", nulls);
    CHECK(nulls >= 3,
          "connect() returned a comm after %d NULL comms; TCPX gives NULL comms for the first "
          "calls (expected >= 3)",
          nulls);
    TRY(tt_sync_put(r, 'c'));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    TRY(sx_one(r, sc, buf, NULLCOMM_SIZE, tt_seed(41, 0, 0), 0));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_devhandle ------------------------------------------------------------------ */

static const size_t devh_sizes[] = {1, 3 * 4096 + 5, MiB};
#define DEVH_N (int)(sizeof(devh_sizes) / sizeof(devh_sizes[0]))

int tcpx_devhandle_recv(role_t *r)
{
    rx_t x;
    TRY(rx_listen(r, &x));
    TRY(tt_sync_get(r, 'c', CONN_MS)); /* a connection is waiting */
    void *comm = NULL;
    int e = tx_accept(&r->nt, x.lc, &comm, NULL);
    CHECK(e != 0 && comm == NULL,
          "accept(recvDevComm = NULL) returned rc %d comm %p; expected an error rc", e, comm);
    tpx_ncclnet_dev_handle_t *none = NULL;
    e = tx_accept(&r->nt, x.lc, &comm, &none);
    CHECK(e != 0 && comm == NULL,
          "accept(*recvDevComm = NULL) returned rc %d comm %p; expected an error rc", e, comm);
    test_say("accept() without device-handle storage: rc %d (NULL and *NULL), as expected", e);
    TRY(rx_accept(r, &x, CONN_MS)); /* checks what the storage holds */
    test_say("device handle {type %d, version %d, handle %p, size %zu, needsProxyProgress %d}; "
             "meta %p bounce_buf %p head %llu",
             (int)x.dh->netDeviceType, x.dh->netDeviceVersion, x.dh->handle, x.dh->size,
             x.dh->needsProxyProgress, (void *)x.uh->meta, x.uh->bounce_buf,
             (unsigned long long)x.uh->head);
    unsigned char *buf = nt_alloc(MiB);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < DEVH_N; i++) {
        rmsg_t m = {.buf = buf,
                    .posted = devh_sizes[i],
                    .size = devh_sizes[i],
                    .seed = tt_seed(42, (unsigned)i, 0)};
        TRY(rx_one(r, &x, &m, 0));
    }
    TRY(rx_check_devhandle(&x)); /* unchanged by traffic */
    return rx_finish(r, &x, buf, MiB, 0);
}

int tcpx_devhandle_send(role_t *r)
{
    unsigned char h[HANDLE_SIZE];
    void *sc;
    TRY(tt_link_get(r, h, sizeof(h), CONN_MS));
    TRY(tt_role_init(r));
    TRY(sx_connect(r, h, &sc, NULL));
    TRY(tt_sync_put(r, 'c'));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < DEVH_N; i++)
        TRY(sx_one(r, sc, buf, devh_sizes[i], tt_seed(42, (unsigned)i, 0), 0));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_nocpu: the CPU must not read plugin device memory ------------------------ */

/* 0 if a CPU read of `p` faults (in a child process: SIGSEGV or SIGBUS), 1
 * if it succeeds, -1 if the child could not be run. */
static int cpu_read_faults(const void *p)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = _exit; /* _exit(signo) */
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        volatile const unsigned char *v = p;
        unsigned char b = *v;
        _exit(b == 0xff ? 3 : 2);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(status) && (WEXITSTATUS(status) == SIGSEGV || WEXITSTATUS(status) == SIGBUS))
        return 0;
    if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS))
        return 0;
    return WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 3) ? 1 : -1;
}

/* Google's plugin hands out a device handle in cuMemAlloc memory and a
 * bounce buffer in GPU memory: a consumer that reads either on the CPU
 * crashes on a GPU machine. The strict mode must make it crash here too
 * (no GPU: a PROT_NONE view), while tpx's copy functions still read them. */
#define NOCPU_N 4
static const size_t nocpu_sizes[NOCPU_N] = {1, 4096, 65537, 4 * MiB};

int tcpx_nocpu_recv(role_t *r)
{
    rx_t x;
    TRY(rx_open(r, &x)); /* copies the handle down with tpx__cuda_devmem_read */
    int f = cpu_read_faults(x.dh->handle);
    CHECK(f == 0, "a CPU read of the device handle %p %s; it must fault (device memory)",
          x.dh->handle, f > 0 ? "succeeded" : "could not be tried");
    f = cpu_read_faults(x.uh->bounce_buf);
    CHECK(f == 0, "a CPU read of the bounce buffer %p %s; it must fault (device memory)",
          x.uh->bounce_buf, f > 0 ? "succeeded" : "could not be tried");
    test_say("CPU reads of the device handle %p and the bounce buffer %p fault; tpx's copies "
             "read them (meta %p)",
             x.dh->handle, x.uh->bounce_buf, (void *)x.uh->meta);
    unsigned char *buf = nt_alloc(4 * MiB);
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < NOCPU_N; i++) {
        rmsg_t m = {.buf = buf,
                    .posted = nocpu_sizes[i],
                    .size = nocpu_sizes[i],
                    .seed = tt_seed(50, (unsigned)i, 0)};
        TRY(rx_one(r, &x, &m, 0)); /* unpacked with tpx__cuda_devmem_gather */
    }
    f = cpu_read_faults(x.uh->bounce_buf);
    CHECK(f == 0, "after traffic, a CPU read of the bounce buffer %s; it must fault",
          f > 0 ? "succeeded" : "could not be tried");
    return rx_finish(r, &x, buf, 4 * MiB, 0);
}

int tcpx_nocpu_send(role_t *r)
{
    void *sc;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int i = 0; i < NOCPU_N; i++)
        TRY(sx_one(r, sc, buf, nocpu_sizes[i], tt_seed(50, (unsigned)i, 0), 0));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_unpack ------------------------------------------------------------------------ */

static const size_t unpack_sizes[] = {1, 4095, 4096, 4097, 65537, 512 * KiB, 4 * MiB};
#define UNPACK_NSIZES (sizeof(unpack_sizes) / sizeof(unpack_sizes[0]))
#define UNPACK_ROUNDS 32  /* batches: post k <= 16, complete all, unpack, consume all */
#define UNPACK_SLIDE  160 /* then a sliding window of 16 */

/* Message j of the scenario (both roles compute the same schedule). */
static size_t unpack_size(uint64_t j)
{
    if (j < UNPACK_NSIZES)
        return unpack_sizes[j];
    uint64_t h = mix64(j);
    if (h % 4 == 0)
        return 1 + (size_t)((h >> 8) % TX_MAX_RECV);
    return unpack_sizes[(h >> 8) % UNPACK_NSIZES];
}

/* One receive in four is posted with the full 4 MiB: it takes the sender's size. */
static size_t unpack_posted(uint64_t j)
{
    return mix64(j ^ 0xabcdefull) % 4 == 0 ? TX_MAX_RECV : unpack_size(j);
}

static int unpack_batch(int round)
{
    return round % 4 == 0 ? TX_DEPTH : 1 + (int)(mix64((uint64_t)round + 1000) % TX_DEPTH);
}

static int unpack_total(void)
{
    int n = UNPACK_SLIDE;
    for (int round = 0; round < UNPACK_ROUNDS; round++)
        n += unpack_batch(round);
    return n;
}

static void unpack_msg(rmsg_t *m, unsigned char *buf, uint64_t j)
{
    *m = (rmsg_t){.buf = buf + (j % TX_DEPTH) * TX_MAX_RECV,
                  .posted = unpack_posted(j),
                  .size = unpack_size(j),
                  .seed = tt_seed(43, (unsigned)j, 0)};
}

int tcpx_unpack_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[TX_DEPTH];
    void *mh = NULL;
    size_t len = TX_DEPTH * TX_MAX_RECV;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    CHECK_RC(nt_regmr(&r->nt, x.rc, buf, len, TPX_NCCL_PTR_HOST, &mh));
    uint64_t j = 0, bytes = 0, frags = 0;
    uint64_t t0 = test_now_ns();
    for (int round = 0; round < UNPACK_ROUNDS; round++) {
        int k = unpack_batch(round);
        for (int i = 0; i < k; i++, j++) {
            unpack_msg(&m[i], buf, j);
            RX_POST_OK(r, &x, &m[i], (int)j, mh);
            CHECK(m[i].idx == j, "receive %llu got index %llu", (unsigned long long)j,
                  (unsigned long long)m[i].idx);
        }
        for (int i = 0; i < k; i++)
            TRY(tx_wait(r, m[i].req, IO_MS, "irecv"));
        TRY(rx_bounce_disjoint(&x, m, k));
        for (int i = 0; i < k; i++) {
            frags += x.uh->meta->cnt[m[i].idx % TX_DEPTH];
            TRY(rx_unpack(&x, &m[i]));
            bytes += m[i].size;
        }
        for (int i = 0; i < k; i++)
            CHECK_RC(rx_consume(r, &x, &m[i]));
    }
    test_say("%d rounds of up to %d receives: %llu messages, %llu bytes, %llu fragments, verified",
             UNPACK_ROUNDS, TX_DEPTH, (unsigned long long)j, (unsigned long long)bytes,
             (unsigned long long)frags);
    /* Sliding window: 16 in flight, each consumed as soon as it is unpacked. */
    uint64_t total = (uint64_t)unpack_total(), head = j;
    for (; j < total && j - head < TX_DEPTH; j++) {
        unpack_msg(&m[j % TX_DEPTH], buf, j);
        RX_POST_OK(r, &x, &m[j % TX_DEPTH], 0, mh);
    }
    while (head < total) {
        rmsg_t *h = &m[head % TX_DEPTH];
        TRY(tx_wait(r, h->req, IO_MS, "irecv"));
        TRY(rx_unpack(&x, h));
        CHECK_RC(rx_consume(r, &x, h));
        bytes += h->size;
        head++;
        if (j < total) {
            unpack_msg(&m[j % TX_DEPTH], buf, j);
            RX_POST_OK(r, &x, &m[j % TX_DEPTH], 0, mh);
            j++;
        }
    }
    test_say("%llu messages, %llu bytes in %.2f s, all unpacked on the CPU and verified",
             (unsigned long long)total, (unsigned long long)bytes, test_secs_since(t0));
    CHECK_RC(nt_deregmr(&r->nt, x.rc, mh));
    return rx_finish(r, &x, buf, len, 1);
}

int tcpx_unpack_send(role_t *r)
{
    void *sc;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    int n = unpack_total();
    smsg_t *m = calloc((size_t)n, sizeof(*m));
    CHECK(buf != NULL && m != NULL, "out of memory");
    for (int j = 0; j < n; j++)
        m[j] = (smsg_t){unpack_size((uint64_t)j), tt_seed(43, (unsigned)j, 0), 1000 + j};
    TRY(sx_stream(r, sc, buf, m, n, TX_DEPTH));
    free(m);
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_17th --------------------------------------------------------------------------- */

#define N17_SIZE (64 * KiB)

int tcpx_17th_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[TX_DEPTH + 1];
    size_t len = (TX_DEPTH + 1) * N17_SIZE;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j <= TX_DEPTH; j++)
        m[j] = (rmsg_t){.buf = buf + (size_t)j * N17_SIZE,
                        .posted = N17_SIZE,
                        .size = N17_SIZE,
                        .seed = tt_seed(44, (unsigned)j, 0)};
    for (int j = 0; j < TX_DEPTH; j++)
        RX_POST_OK(r, &x, &m[j], 0, NULL);
    int e = rx_post(r, &x, &m[TX_DEPTH], 0, NULL);
    CHECK(e == RC_INT, "irecv number 17 with 16 in flight returned rc %d; expected %d", e, RC_INT);
    test_say("irecv number 17 refused with rc %d, as expected", e);
    for (int j = 0; j < TX_DEPTH; j++)
        TRY(tx_wait(r, m[j].req, IO_MS, "irecv"));
    for (int j = 0; j < TX_DEPTH; j++) {
        TRY(rx_unpack(&x, &m[j]));
        CHECK_RC(rx_consume(r, &x, &m[j]));
    }
    /* The refused post took no message: the 17th message arrives now. */
    TRY(rx_one(r, &x, &m[TX_DEPTH], 0));
    return rx_finish(r, &x, buf, len, 0);
}

int tcpx_17th_send(role_t *r)
{
    void *sc, *reqs[TX_DEPTH], *extra = NULL;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < TX_DEPTH; j++) {
        unsigned char *b = buf + (size_t)j * N17_SIZE;
        nt_fill(b, N17_SIZE, tt_seed(44, (unsigned)j, 0));
        reqs[j] = NULL;
        int e = nt_isend(&r->nt, sc, b, N17_SIZE, 0, tx_mh(r, sc, b, N17_SIZE), &reqs[j]);
        CHECK(e == 0 && reqs[j] != NULL, "isend %d of 16 returned rc %d", j + 1, e);
    }
    unsigned char *b = buf + (size_t)TX_DEPTH * N17_SIZE;
    nt_fill(b, N17_SIZE, tt_seed(44, TX_DEPTH, 0));
    int e = nt_isend(&r->nt, sc, b, N17_SIZE, 0, tx_mh(r, sc, b, N17_SIZE), &extra);
    CHECK(e == RC_INT, "isend number 17 with 16 in flight returned rc %d; expected %d", e, RC_INT);
    test_say("isend number 17 refused with rc %d, as expected", e);
    for (int j = 0; j < TX_DEPTH; j++)
        TRY(tx_wait(r, reqs[j], IO_MS, "isend"));
    TRY(sx_one(r, sc, buf, N17_SIZE, tt_seed(44, TX_DEPTH, 0), 0));
    return sx_finish(r, sc, buf, 0);
}

/* ---- tcpx_nonhead ----------------------------------------------------------------------- */

/* As Google's plugin 3.1.9: test() on a request other than the head is a
 * quiet rc 0 / done 0 while the head is not "transmitting" yet (its bytes
 * not all handed to sockets / announced), rc 3 once it is; a request
 * already reported done, tested again, is one of those "others". */
#define NONHEAD_N    3
#define NONHEAD_SIZE MiB

/* Poll test() on the non-head `req` until rc 3; rc 0 / done 0 before. */
static int nonhead_until_rc3(role_t *r, void *req, const char *what)
{
    uint64_t deadline = test_deadline_ms(IO_MS);
    int polls = 0;
    for (;;) {
        int done = 0, e = tx_test(r, req, &done);
        CHECK(!done, "%s: test() on a request that is not the head said done", what);
        if (e == RC_INT)
            break;
        CHECK(e == 0, "%s: test() on a request that is not the head: rc %d; expected 0 until "
              "the head transmits, then %d", what, e, RC_INT);
        CHECK(test_now_ns() < deadline, "%s: no rc %d within %d ms (%d polls)", what, RC_INT, IO_MS,
              polls);
        polls++;
        sched_yield();
    }
    test_say("%s: rc 0 / done 0 for %d poll(s), then rc %d once the head transmits", what, polls,
             RC_INT);
    return 0;
}

int tcpx_nonhead_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[NONHEAD_N];
    size_t len = NONHEAD_N * NONHEAD_SIZE;
    int done = 0, e;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < NONHEAD_N; j++) {
        m[j] = (rmsg_t){.buf = buf + (size_t)j * NONHEAD_SIZE,
                        .posted = NONHEAD_SIZE,
                        .size = NONHEAD_SIZE,
                        .seed = tt_seed(45, (unsigned)j, 0)};
        RX_POST_OK(r, &x, &m[j], 0, NULL);
    }
    e = tx_test(r, m[1].req, &done);
    CHECK((e == 0 || e == RC_INT) && !done,
          "first test() on receive 2 of 3 (not the head): rc %d done %d; expected rc 0 done 0 "
          "(or rc 3 if the head already transmits)", e, done);
    TRY(nonhead_until_rc3(r, m[2].req, "receive 3 of 3"));
    TRY(tx_wait(r, m[0].req, IO_MS, "irecv 1"));
    CHECK_NO_SIZES();
    TRY(tx_wait(r, m[1].req, IO_MS, "irecv 2"));
    TRY(tx_wait(r, m[2].req, IO_MS, "irecv 3"));
    e = tx_test(r, m[0].req, &done);
    CHECK(e == 0 && !done, "receive 1 tested again after all completed: rc %d done %d; "
          "expected a quiet rc 0 done 0", e, done);
    for (int j = 0; j < NONHEAD_N; j++) {
        TRY(rx_unpack(&x, &m[j]));
        CHECK_RC(rx_consume(r, &x, &m[j]));
    }
    return rx_finish(r, &x, buf, len, 0);
}

int tcpx_nonhead_send(role_t *r)
{
    void *sc, *reqs[NONHEAD_N];
    int done = 0, e;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < NONHEAD_N; j++) {
        unsigned char *b = buf + (size_t)j * NONHEAD_SIZE;
        nt_fill(b, NONHEAD_SIZE, tt_seed(45, (unsigned)j, 0));
        reqs[j] = NULL;
        e = nt_isend(&r->nt, sc, b, NONHEAD_SIZE, 0, tx_mh(r, sc, b, NONHEAD_SIZE), &reqs[j]);
        CHECK(e == 0 && reqs[j] != NULL, "isend %d returned rc %d", j, e);
    }
    e = tx_test(r, reqs[2], &done);
    CHECK((e == 0 || e == RC_INT) && !done,
          "first test() on send 3 of 3 (not the head): rc %d done %d; expected rc 0 done 0 "
          "(or rc 3 if the head already transmits)", e, done);
    TRY(nonhead_until_rc3(r, reqs[1], "send 2 of 3"));
    TRY(tx_wait(r, reqs[0], IO_MS, "isend 1"));
    TRY(tx_wait(r, reqs[1], IO_MS, "isend 2"));
    TRY(tx_wait(r, reqs[2], IO_MS, "isend 3"));
    CHECK_NO_SIZES();
    return sx_finish(r, sc, buf, 0);
}

/* ---- tcpx_consume_order --------------------------------------------------------------- */

#define CO_REGION (64 * KiB + 4096)
#define CO_N2     (TX_DEPTH + 1) /* phase 2 messages */

static size_t co_size(int j)
{
    return 64 * KiB - (size_t)j * 3001;
}

static void co_msg(rmsg_t *m, unsigned char *buf, int j)
{
    *m = (rmsg_t){.buf = buf + (size_t)j * CO_REGION,
                  .posted = co_size(j),
                  .size = co_size(j),
                  .seed = tt_seed(46, (unsigned)j, 0)};
}

int tcpx_consume_order_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[2 + CO_N2];
    size_t len = (2 + CO_N2) * CO_REGION;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    /* Phase 1: two receives. */
    co_msg(&m[0], buf, 0);
    co_msg(&m[1], buf, 1);
    RX_POST_OK(r, &x, &m[0], 0, NULL);
    RX_POST_OK(r, &x, &m[1], 0, NULL);
    int e = rx_consume(r, &x, &m[0]); /* the sender has not sent yet */
    CHECK(e == RC_INT,
          "irecvConsumed of a receive test() has not reported done: rc %d; "
          "expected %d",
          e, RC_INT);
    TRY(tt_sync_put(r, 'g'));
    TRY(tx_wait(r, m[0].req, IO_MS, "irecv 1"));
    TRY(tx_wait(r, m[1].req, IO_MS, "irecv 2"));
    TRY(rx_bounce_disjoint(&x, m, 2));
    TRY(rx_unpack(&x, &m[0]));
    TRY(rx_unpack(&x, &m[1]));
    e = rx_consume(r, &x, &m[1]);
    CHECK(e == RC_INT,
          "irecvConsumed of the second completed receive before the first: rc %d; "
          "expected %d",
          e, RC_INT);
    test_say("irecvConsumed out of order: rc %d, as expected", e);
    CHECK_RC(rx_consume(r, &x, &m[0]));
    CHECK_RC(rx_consume(r, &x, &m[1]));
    /* Phase 2: 16 receives completed and not consumed hold every slot. */
    rmsg_t *p = &m[2];
    for (int j = 0; j < TX_DEPTH; j++) {
        co_msg(&p[j], buf, 2 + j);
        RX_POST_OK(r, &x, &p[j], 0, NULL);
    }
    for (int j = 0; j < TX_DEPTH; j++)
        TRY(tx_wait(r, p[j].req, IO_MS, "irecv"));
    TRY(rx_bounce_disjoint(&x, p, TX_DEPTH));
    for (int j = 0; j < TX_DEPTH; j++)
        TRY(rx_unpack(&x, &p[j]));
    co_msg(&p[TX_DEPTH], buf, 2 + TX_DEPTH);
    e = rx_post(r, &x, &p[TX_DEPTH], 0, NULL);
    CHECK(e == RC_INT,
          "irecv with 16 receives done but not consumed: rc %d; expected %d (a "
          "receive slot frees only at irecvConsumed)",
          e, RC_INT);
    test_say("irecv with 16 unconsumed receives: rc %d, as expected", e);
    CHECK_RC(rx_consume(r, &x, &p[0]));
    RX_POST_OK(r, &x, &p[TX_DEPTH], 0, NULL);
    TRY(tx_wait(r, p[TX_DEPTH].req, IO_MS, "irecv 17"));
    TRY(rx_bounce_disjoint(&x, p + 1, TX_DEPTH));
    TRY(rx_unpack(&x, &p[TX_DEPTH]));
    for (int j = 1; j <= TX_DEPTH; j++)
        CHECK_RC(rx_consume(r, &x, &p[j]));
    return rx_finish(r, &x, buf, len, 0);
}

int tcpx_consume_order_send(role_t *r)
{
    void *sc;
    smsg_t m[2 + CO_N2];
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < 2 + CO_N2; j++)
        m[j] = (smsg_t){co_size(j), tt_seed(46, (unsigned)j, 0), 0};
    TRY(tt_sync_get(r, 'g', IO_MS));
    TRY(sx_stream(r, sc, buf, m, 2 + CO_N2, TX_DEPTH));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_tags ---------------------------------------------------------------------------- */

static const size_t tags_sizes[] = {1000, 70000, 4096, 300000, 5};
static const int tags_send_tags[] = {5, 6, 7, 5, 0};
static const int tags_recv_tags[] = {9, 9, 1, 12345, 5};
#define TAGS_N    (int)(sizeof(tags_sizes) / sizeof(tags_sizes[0]))
#define TAGS_SLOT (300000 + 4096)

int tcpx_tags_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[TAGS_N];
    size_t len = TAGS_N * TAGS_SLOT;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < TAGS_N; j++) {
        m[j] = (rmsg_t){.buf = buf + (size_t)j * TAGS_SLOT,
                        .posted = tags_sizes[j],
                        .size = tags_sizes[j],
                        .seed = tt_seed(47, (unsigned)j, 0)};
        RX_POST_OK(r, &x, &m[j], tags_recv_tags[j], NULL);
    }
    for (int j = 0; j < TAGS_N; j++) {
        TRY(tx_wait(r, m[j].req, IO_MS, "irecv"));
        TRY(rx_unpack(&x, &m[j])); /* the j-th message sent, whatever the tags */
        CHECK_RC(rx_consume(r, &x, &m[j]));
    }
    test_say("%d messages sent with tags 5,6,7,5,0 matched receives posted with tags 9,9,1,12345,5 "
             "in FIFO order",
             TAGS_N);
    return rx_finish(r, &x, buf, len, 1);
}

int tcpx_tags_send(role_t *r)
{
    void *sc;
    smsg_t m[TAGS_N];
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    for (int j = 0; j < TAGS_N; j++)
        m[j] = (smsg_t){tags_sizes[j], tt_seed(47, (unsigned)j, 0), tags_send_tags[j]};
    TRY(sx_stream(r, sc, buf, m, TAGS_N, TX_DEPTH));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_peerclose --------------------------------------------------------------------- */

#define PCX_KILL_AFTER 8 /* the sender SIGKILLs itself once this many sends are done */

int tcpx_peerclose_recv(role_t *r)
{
    rx_t x;
    rmsg_t m[TX_DEPTH];
    size_t len = TX_DEPTH * TX_MAX_RECV;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(len);
    CHECK(buf != NULL, "out of memory");
    uint64_t j = 0, head = 0, gone_at = 0, deadline = test_deadline_ms(IO_MS);
    for (; j < TX_DEPTH; j++) {
        m[j] = (rmsg_t){.buf = buf + j * TX_MAX_RECV,
                        .posted = TX_MAX_RECV,
                        .size = TX_MAX_RECV,
                        .seed = tt_seed(48, (unsigned)(j % TX_DEPTH), 0)};
        RX_POST_OK(r, &x, &m[j], 0, NULL);
    }
    int done = 0, e, post_failed = 0;
    for (;;) {
        rmsg_t *h = &m[head % TX_DEPTH];
        e = tx_test(r, h->req, &done);
        CHECK_NO_SIZES();
        if (done) {
            CHECK(e == 0 || e == RC_SYS, "test() said done with rc %d", e);
            TRY(rx_unpack(&x, h));
            CHECK_RC(rx_consume(r, &x, h));
            head++;
            if (!post_failed) {
                rmsg_t *n = &m[j % TX_DEPTH];
                *n = (rmsg_t){.buf = buf + (j % TX_DEPTH) * TX_MAX_RECV,
                              .posted = TX_MAX_RECV,
                              .size = TX_MAX_RECV,
                              .seed = tt_seed(48, (unsigned)(j % TX_DEPTH), 0)};
                e = rx_post(r, &x, n, 0, NULL);
                /* A post after the peer closed may already be refused with rc 2. */
                CHECK(e == 0 || e == RC_SYS, "irecv returned rc %d", e);
                post_failed = e != 0;
                j += e == 0;
            }
            CHECK(head < j,
                  "all %llu receives completed: the sender died between messages, "
                  "not mid-transfer (inconclusive)",
                  (unsigned long long)head);
            continue;
        }
        if (e == RC_SYS)
            break;
        CHECK(e == 0, "test() returned rc %d with done 0; expected 0, or 2 once the sender died",
              e);
        uint64_t now = test_now_ns();
        if (gone_at == 0 && link_eof(r))
            gone_at = now;
        if (gone_at != 0 && now - gone_at >= PEERCLOSE_MS * 1000000ull)
            break; /* the sender left mid-message: TCPX hangs (rc 0, done 0) */
        CHECK(now < deadline, "the sender did not die within %d ms", IO_MS);
        sched_yield();
    }
    /* As Google's plugin: the sender left in the middle of the head
     * message -> rc 2 if the message is longer than the plugin's chunk (a
     * control message per chunk: TPX_SOCK_TCPX_CHUNK), else not done, rc
     * 0, forever (its data thread ended); it left before the head started
     * -> rc 2 (its control socket saw it). Either way it keeps saying so;
     * an engine gives up on its own deadline. */
    int want = e;
    /* With 16 x 4 MiB in flight when the sender dies, the head message has
     * always started: TX_PEERCLOSE_HANG=1 (4 MiB chunks) insists on the
     * hang, TX_PEERCLOSE_RESET=1 (smaller chunks) on rc 2. */
    const char *hang = getenv("TX_PEERCLOSE_HANG"), *reset = getenv("TX_PEERCLOSE_RESET");
    CHECK(hang == NULL || hang[0] != '1' || e == 0,
          "test() of receive %llu after the sender died mid-message: rc %d; TCPX hangs (rc 0) "
          "when the message is one chunk", (unsigned long long)head, e);
    CHECK(reset == NULL || reset[0] != '1' || e == RC_SYS,
          "test() of receive %llu after the sender died mid-message: rc %d; TCPX says rc 2 "
          "when the message is longer than a chunk", (unsigned long long)head, e);
    test_say("after %llu complete messages, test() of receive %llu: rc %d done 0 (peer died: %s)%s",
             (unsigned long long)head, (unsigned long long)head, e,
             e == 0 ? "a hang, as TCPX when the message had started" : "rc 2",
             post_failed ? "; a later irecv was refused with rc 2" : "");
    uint64_t end = test_deadline_ms(STUCK_MS);
    long polls = 0;
    while (test_now_ns() < end) {
        e = tx_test(r, m[head % TX_DEPTH].req, &done);
        polls++;
        CHECK(e == want && done == 0,
              "poll %ld after the peer died: test() returned rc %d done %d; expected rc %d done 0",
              polls, e, done, want);
        usleep(100);
    }
    CHECK_NO_SIZES();
    test_say("test() kept returning rc %d with done 0 (%ld polls over %d ms); giving up", want,
             polls, STUCK_MS);
    uint64_t t0 = test_now_ns();
    (void)nt_close_recv(&r->nt, x.rc);
    (void)nt_close_listen(&r->nt, x.lc);
    CHECK(test_secs_since(t0) < 5.0, "closing after the peer died took %.1f s",
          test_secs_since(t0));
    nt_free(buf, len);
    return 0;
}

int tcpx_peerclose_send(role_t *r)
{
    void *sc, *reqs[TX_DEPTH];
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    /* Region k holds message k's data for every message j = k mod 16, filled
     * once: the sender outruns the receiver (which unpacks and verifies), so
     * when it dies most of its 16 x 4 MiB in flight has not left it. */
    for (int k = 0; k < TX_DEPTH; k++)
        nt_fill(buf + (size_t)k * TX_MAX_RECV, TX_MAX_RECV, tt_seed(48, (unsigned)k, 0));
    int head = 0, tail = 0;
    for (;;) {
        while (tail - head < TX_DEPTH) {
            unsigned char *b = buf + (size_t)(tail % TX_DEPTH) * TX_MAX_RECV;
            reqs[tail % TX_DEPTH] = NULL;
            int e = nt_isend(&r->nt, sc, b, TX_MAX_RECV, 0, tx_mh(r, sc, b, TX_MAX_RECV),
                             &reqs[tail % TX_DEPTH]);
            CHECK(e == 0, "isend %d returned rc %d", tail, e);
            tail++;
        }
        if (head >= PCX_KILL_AFTER)
            break;
        int done = 0;
        int e = tx_test(r, reqs[head % TX_DEPTH], &done);
        CHECK(e == 0, "test() of isend %d returned rc %d", head, e);
        head += done;
        if (!done)
            sched_yield();
    }
    test_say("killing myself with %d sends of 4 MiB in flight (%d done)", tail - head, head);
    fflush(stderr);
    kill(getpid(), SIGKILL);
    pause();
    return 1;
}

/* ---- tcpx_iflush ---------------------------------------------------------------------- */

#define IFLUSH_SIZE (64 * KiB)

int tcpx_iflush_recv(role_t *r)
{
    rx_t x;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(IFLUSH_SIZE);
    CHECK(buf != NULL, "out of memory");
    rmsg_t m = {.buf = buf, .posted = IFLUSH_SIZE, .size = IFLUSH_SIZE, .seed = tt_seed(49, 0, 0)};
    RX_POST_OK(r, &x, &m, 0, NULL);
    TRY(tx_wait(r, m.req, IO_MS, "irecv"));
    void *freq = NULL;
    int e = tx_iflush(&r->nt, x.rc, buf, IFLUSH_SIZE, NULL, &freq);
    CHECK(e != 0,
          "iflush() returned success (request %p); TCPX's iflush must never be called, "
          "so the emulation must refuse it",
          freq);
    test_say("iflush() refused with rc %d, as expected", e);
    TRY(rx_unpack(&x, &m));
    CHECK_RC(rx_consume(r, &x, &m));
    m.seed = tt_seed(49, 1, 0); /* the comm still works */
    TRY(rx_one(r, &x, &m, 0));
    return rx_finish(r, &x, buf, IFLUSH_SIZE, 0);
}

int tcpx_iflush_send(role_t *r)
{
    void *sc;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    TRY(sx_one(r, sc, buf, IFLUSH_SIZE, tt_seed(49, 0, 0), 0));
    TRY(sx_one(r, sc, buf, IFLUSH_SIZE, tt_seed(49, 1, 0), 0));
    return sx_finish(r, sc, buf, 1);
}

/* ---- tcpx_init_twice ------------------------------------------------------------------ */

#define INIT2_SIZE 4097

int tcpx_init_twice_recv(role_t *r)
{
    rx_t x;
    TRY(tt_role_init(r));
    int e = nt_init(&r->nt);
    CHECK(e != 0, "a second init() in the same process returned success; TCPX inits once");
    test_say("second init(): rc %d, as expected", e);
    TRY(rx_open(r, &x)); /* the first init still holds */
    unsigned char *buf = nt_alloc(INIT2_SIZE);
    CHECK(buf != NULL, "out of memory");
    rmsg_t m = {.buf = buf, .posted = INIT2_SIZE, .size = INIT2_SIZE, .seed = tt_seed(50, 0, 0)};
    TRY(rx_one(r, &x, &m, 0));
    return rx_finish(r, &x, buf, INIT2_SIZE, 0);
}

int tcpx_init_twice_send(role_t *r)
{
    unsigned char h[HANDLE_SIZE];
    void *sc;
    TRY(tt_link_get(r, h, sizeof(h), CONN_MS));
    TRY(tt_role_init(r));
    int e = nt_init(&r->nt);
    CHECK(e != 0, "a second init() in the same process returned success; TCPX inits once");
    TRY(sx_connect(r, h, &sc, NULL));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    TRY(sx_one(r, sc, buf, INIT2_SIZE, tt_seed(50, 0, 0), 0));
    return sx_finish(r, sc, buf, 0);
}

/* ---- tcpx_bigrecv --------------------------------------------------------------------- */

static const size_t bigrecv_bad[] = {TX_MAX_RECV + 1, TX_MAX_RECV + 4096, 64 * MiB};
#define BIGRECV_BUF (64 * MiB)

int tcpx_bigrecv_recv(role_t *r)
{
    rx_t x;
    TRY(rx_open(r, &x));
    unsigned char *buf = nt_alloc(BIGRECV_BUF);
    CHECK(buf != NULL, "out of memory");
    for (size_t i = 0; i < sizeof(bigrecv_bad) / sizeof(bigrecv_bad[0]); i++) {
        rmsg_t m = {.buf = buf, .posted = bigrecv_bad[i], .size = 0};
        int e = rx_post(r, &x, &m, 0, NULL);
        CHECK(e != 0,
              "irecv of %zu bytes (> 4 MiB) returned success (request %p); TCPX "
              "receives at most 4 MiB per request",
              bigrecv_bad[i], m.req);
        test_say("irecv of %zu bytes refused with rc %d, as expected", bigrecv_bad[i], e);
    }
    /* Exactly 4 MiB works, in slot 0: the refused posts took nothing. */
    rmsg_t m = {.buf = buf, .posted = TX_MAX_RECV, .size = TX_MAX_RECV, .seed = tt_seed(51, 0, 0)};
    TRY(rx_one(r, &x, &m, 0));
    CHECK(m.idx == 0, "the first accepted receive has index %llu", (unsigned long long)m.idx);
    return rx_finish(r, &x, buf, BIGRECV_BUF, 0);
}

int tcpx_bigrecv_send(role_t *r)
{
    void *sc;
    TRY(sx_open(r, &sc));
    unsigned char *buf = sx_buf();
    CHECK(buf != NULL, "out of memory");
    TRY(sx_one(r, sc, buf, TX_MAX_RECV, tt_seed(51, 0, 0), 0));
    return sx_finish(r, sc, buf, 1);
}
