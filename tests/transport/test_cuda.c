/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda.c - CUDA buffers through the built-in transport's pinned
 * staging (sock_cuda.c), on the stand-in libcuda of tests/gpu (run as
 * gpu.fake.transport_cuda*: its device memory cannot be read by the CPU, and
 * with FAKE_CUDA_ASYNC=1 a copy runs only when the driver reports it done,
 * after a random delay, so staging read or reused too early shows as wrong
 * bytes and the workers meet "not ready").
 *
 * cudastage: CS_COMMS comms at once, each with CS_PER messages in flight per
 *            round, sizes on both sides of the staging block and piece
 *            bounds (64 KiB .. 2 MiB, +-1), CUDA -> CUDA, CUDA -> host and
 *            host -> CUDA (the last two rounds from CUDA memory only); then one message at a time on every comm (lone
 *            messages spread over every connection). Every byte verified,
 *            and the bytes after each message untouched.
 * cudazero:  on one connection, a 2 MiB CUDA message and then CZ_ZERO
 *            zero-byte ones into CUDA buffers, all posted before the sender
 *            starts: the receiving connection reads the empty messages while
 *            the big one's copies to the GPU may still run (an empty piece
 *            completes when its header is read; the big one once its copies
 *            finished); no empty message's buffer is written (run with
 *            TPX_NSOCKS=1, TPX_SOCK_EAGER_BYTES=0, TPX_MAX_REQUESTS >=
 *            CZ_ZERO + 1).
 * cudafail:  a 2 MiB CUDA send whose second copy to staging fails (run with
 *            FAKE_CUDA_FAIL_DTOH=2, which also leaves errno at EINTR, as a
 *            driver's own system calls may): the send's test() reports a
 *            CUDA error (ncclUnhandledCudaError), not a socket error, within
 *            the deadline; the receiver sees its peer go, not a hang. With
 *            FAKE_CUDA_FAIL_HTOD=2 instead, the receiver's second copy out of
 *            staging fails: its test() reports the CUDA error, and the
 *            sender's send ends (written, or its peer gone) within the
 *            deadline.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda.h"
#include "transport_test.h"

#define CS_COMMS  5
#define CS_PER    6 /* messages in flight per comm and round */
#define CS_ROUNDS 5
#define CS_SLOT   (2 * MiB + 64 * KiB)
#define CS_FILL   0xA5

/* What each message moves: 0 CUDA -> CUDA, 1 CUDA -> host, 2 host -> CUDA.
 * The last two rounds send from CUDA memory only: a sending connection
 * then takes the next piece ahead while it writes one (sock_send.c
 * sched_take_ahead), its copies into the staging slots the current piece
 * frees. */
static int cs_kind(int round, int c, int m)
{
    return round >= CS_ROUNDS - 2 ? (c + m) % 2 : (round + c + m) % 3;
}

static size_t cs_size(int round, int c, int m)
{
    static const size_t s[] = {
        1,           4095,       64 * KiB - 1, 64 * KiB, 64 * KiB + 1, 128 * KiB + 5,
        256 * KiB - 1, 256 * KiB, 256 * KiB + 1, 512 * KiB - 3, 512 * KiB, 512 * KiB + 1,
        768 * KiB + 7, MiB - 1,   MiB,          MiB + 4097, 2 * MiB - 1, 2 * MiB + 5, 0};
    return s[(size_t)(round * 7 + c * CS_PER + m) % (sizeof(s) / sizeof(s[0]))];
}

/* Lone messages, one per comm at a time. */
static const size_t cs_lone[] = {2 * MiB + 5, MiB + 1, 300000, 5, 2 * MiB};
#define CS_LONE (sizeof(cs_lone) / sizeof(cs_lone[0]))

typedef struct {
    role_t *r;
    int is_recv;
    void *lc[CS_COMMS], *comm[CS_COMMS];
    void *mh_host[CS_COMMS], *mh_cuda[CS_COMMS];
    unsigned char *host; /* CS_COMMS * CS_PER slots of host memory */
    tpx__cuda_mem_t dev; /* the same in (fake) device memory */
    unsigned char *scratch; /* one slot: what goes to / comes from the device */
} cs_t;

static size_t cs_off(int c, int m) { return ((size_t)c * CS_PER + (size_t)m) * CS_SLOT; }

/* GPU 0's context, entered for this thread. */
static int cs_gpu0(void)
{
    CHECK(tpx__cuda_init() == TPX_OK && tpx__cuda_device_count() > 0,
          "no CUDA device (%s): this test runs on tests/gpu's stand-in libcuda",
          tpx__cuda_error_reason());
    CHECK(tpx__cuda_ctx_retain(0, NULL) == TPX_OK, "cannot retain GPU 0's context");
    int pushed = 0;
    CHECK(tpx__cuda_ctx_enter(0, &pushed) == TPX_OK, "cannot enter GPU 0's context");
    return 0;
}

static int cs_setup(cs_t *x)
{
    TRY(cs_gpu0());
    size_t len = cs_off(CS_COMMS, 0);
    x->host = nt_alloc(len);
    x->scratch = nt_alloc(CS_SLOT);
    CHECK(x->host != NULL && x->scratch != NULL, "out of memory");
    CHECK(tpx__cuda_mem_alloc(0, len, &x->dev) == TPX_OK, "cuMemAlloc of %zu bytes failed", len);
    return 0;
}

static void *cs_dev(cs_t *x, int c, int m) { return (void *)(uintptr_t)(x->dev.ptr + cs_off(c, m)); }

/* Post message m of comm c: the sender fills its buffer first, the
 * receiver fills its slot with CS_FILL. */
static int cs_post(cs_t *x, int c, int m, int kind, size_t size, int tag, uint64_t seed,
                   void **req)
{
    int cuda = x->is_recv ? kind != 1 : kind != 2;
    unsigned char *hb = x->host + cs_off(c, m);
    void *buf = cuda ? cs_dev(x, c, m) : hb;
    void *mh = cuda ? x->mh_cuda[c] : x->mh_host[c];
    *req = NULL;
    int rc;
    /* The fills below run on the legacy stream, and cuMemsetD8 (like a
     * copy from pageable memory, which returns before its DMA ends) is
     * asynchronous to the host: they must be finished before the buffer is
     * posted, as a user's kernel must before tpx_send() -- the transport's
     * copies run on its own non-blocking streams. */
    if (x->is_recv) {
        if (cuda)
            CHECK(TPX_CU(cuMemsetD8, (CUdeviceptr)(uintptr_t)buf, CS_FILL, CS_SLOT) == TPX_OK &&
                      TPX_CU(cuCtxSynchronize) == TPX_OK,
                  "cuMemsetD8 failed");
        else
            memset(hb, CS_FILL, CS_SLOT);
        rc = nt_irecv1(&x->r->nt, x->comm[c], buf, CS_SLOT, tag, mh, req);
    } else {
        nt_fill(cuda ? x->scratch : hb, size, seed);
        if (cuda && size > 0)
            CHECK(TPX_CU(cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)buf, x->scratch, size) == TPX_OK &&
                      TPX_CU(cuCtxSynchronize) == TPX_OK,
                  "cuMemcpyHtoD failed");
        rc = nt_isend(&x->r->nt, x->comm[c], buf, size, tag, mh, req);
    }
    CHECK(rc == 0 && *req != NULL, "comm %d msg %d (%zu bytes, kind %d): post returned rc %d", c,
          m, size, kind, rc);
    return 0;
}

/* Receiver: message m of comm c holds `size` bytes of nt_fill(seed), then
 * CS_FILL to the end of its slot. */
static int cs_check(cs_t *x, int c, int m, int kind, size_t size, int got, uint64_t seed,
                    const char *what)
{
    CHECK(got == (int)size, "%s: comm %d msg %d: size %d, expected %zu", what, c, m, got, size);
    unsigned char *b = x->host + cs_off(c, m);
    if (kind != 1) { /* received into device memory */
        CHECK(TPX_CU(cuMemcpyDtoH, x->scratch, (CUdeviceptr)(uintptr_t)cs_dev(x, c, m),
                     CS_SLOT) == TPX_OK,
              "cuMemcpyDtoH failed");
        b = x->scratch;
    }
    size_t bad = nt_verify(b, size, seed);
    CHECK(bad == NT_VERIFY_OK, "%s: comm %d msg %d (%zu bytes, %s): first wrong byte at %zu", what,
          c, m, size, kind == 0 ? "cuda->cuda" : kind == 1 ? "cuda->host" : "host->cuda", bad);
    bad = nt_check_byte(b + size, CS_SLOT - size, CS_FILL);
    CHECK(bad == NT_VERIFY_OK, "%s: comm %d msg %d (%zu bytes): byte %zu past the end written",
          what, c, m, size, bad);
    return 0;
}

static int cs_role(role_t *r, int is_recv)
{
    cs_t x = {.r = r, .is_recv = is_recv};
    if (is_recv)
        TRY(tt_role_init(r));
    TRY(cs_setup(&x));
    if (is_recv)
        TRY(tt_recv_open(r, CS_COMMS, x.lc, x.comm));
    else
        TRY(tt_send_open(r, CS_COMMS, x.comm));
    size_t per = (size_t)CS_PER * CS_SLOT;
    for (int c = 0; c < CS_COMMS; c++) {
        CHECK_RC(nt_regmr(&r->nt, x.comm[c], x.host + cs_off(c, 0), per, TPX_NCCL_PTR_HOST,
                          &x.mh_host[c]));
        CHECK_RC(nt_regmr(&r->nt, x.comm[c], cs_dev(&x, c, 0), per, TPX_NCCL_PTR_CUDA,
                          &x.mh_cuda[c]));
    }
    slot_t s[CS_COMMS * CS_PER];
    for (int round = 0; round < CS_ROUNDS; round++) {
        for (int m = 0; m < CS_PER; m++)
            for (int c = 0; c < CS_COMMS; c++)
                TRY(cs_post(&x, c, m, cs_kind(round, c, m), cs_size(round, c, m), m,
                            tt_seed(50, (unsigned)(round * CS_COMMS + c), (unsigned)m),
                            &s[c * CS_PER + m].req));
        TRY(tt_wait_all(r, s, CS_COMMS * CS_PER, test_deadline_ms(IO_MS), "cudastage"));
        for (int c = 0; c < CS_COMMS && is_recv; c++)
            for (int m = 0; m < CS_PER; m++)
                TRY(cs_check(&x, c, m, cs_kind(round, c, m), cs_size(round, c, m),
                             s[c * CS_PER + m].size,
                             tt_seed(50, (unsigned)(round * CS_COMMS + c), (unsigned)m),
                             "many in flight"));
    }
    /* One message per comm at a time: each is spread over every connection. */
    for (size_t i = 0; i < CS_LONE; i++) {
        for (int c = 0; c < CS_COMMS; c++)
            TRY(cs_post(&x, c, 0, (int)(i + (size_t)c) % 3, cs_lone[i], (int)i,
                        tt_seed(51, (unsigned)i, (unsigned)c), &s[c].req));
        TRY(tt_wait_all(r, s, CS_COMMS, test_deadline_ms(IO_MS), "cudastage lone"));
        for (int c = 0; c < CS_COMMS && is_recv; c++)
            TRY(cs_check(&x, c, 0, (int)(i + (size_t)c) % 3, cs_lone[i], s[c].size,
                         tt_seed(51, (unsigned)i, (unsigned)c), "lone"));
    }
    test_say("%d comms: %d rounds of %d messages in flight and %zu lone ones, CUDA and host "
             "buffers, verified", CS_COMMS, CS_ROUNDS, CS_PER, CS_LONE);
    for (int c = 0; c < CS_COMMS; c++) {
        CHECK_RC(nt_deregmr(&r->nt, x.comm[c], x.mh_host[c]));
        CHECK_RC(nt_deregmr(&r->nt, x.comm[c], x.mh_cuda[c]));
    }
    if (is_recv)
        TRY(tt_recv_close(r, CS_COMMS, x.lc, x.comm));
    else
        for (int c = 0; c < CS_COMMS; c++)
            CHECK_RC(nt_close_send(&r->nt, x.comm[c]));
    tpx__cuda_mem_free(&x.dev);
    nt_free(x.host, cs_off(CS_COMMS, 0));
    nt_free(x.scratch, CS_SLOT);
    return tt_expect_no_warnings();
}

#define CZ_BIG  (2 * MiB)
#define CZ_ZERO 100
#define CZ_SLOT (4 * KiB)

static int cz_role(role_t *r, int is_recv)
{
    cs_t x = {.r = r, .is_recv = is_recv};
    void *lc = NULL, *comm = NULL, *mh = NULL;
    size_t len = CZ_BIG + (size_t)CZ_ZERO * CZ_SLOT;
    if (is_recv)
        TRY(tt_role_init(r));
    TRY(cs_gpu0());
    CHECK(tpx__cuda_mem_alloc(0, len, &x.dev) == TPX_OK, "cuMemAlloc of %zu bytes failed", len);
    x.scratch = nt_alloc(len);
    CHECK(x.scratch != NULL, "out of memory");
    CUdeviceptr d = x.dev.ptr;
    if (is_recv) {
        TRY(tt_recv_open(r, 1, &lc, &comm));
        CHECK(TPX_CU(cuMemsetD8, d, CS_FILL, len) == TPX_OK && TPX_CU(cuCtxSynchronize) == TPX_OK,
              "cuMemsetD8 failed");
    } else {
        TRY(tt_send_open(r, 1, &comm));
        nt_fill(x.scratch, CZ_BIG, tt_seed(52, 0, 0));
        CHECK(TPX_CU(cuMemcpyHtoD, d, x.scratch, CZ_BIG) == TPX_OK &&
                  TPX_CU(cuCtxSynchronize) == TPX_OK,
              "cuMemcpyHtoD failed");
    }
    CHECK_RC(nt_regmr(&r->nt, comm, (void *)(uintptr_t)d, len, TPX_NCCL_PTR_CUDA, &mh));
    slot_t s[1 + CZ_ZERO];
    memset(s, 0, sizeof(s));
    if (!is_recv)
        TRY(tt_sync_get(r, 'p', 30000));
    for (int m = 0; m <= CZ_ZERO; m++) {
        void *buf = (void *)(uintptr_t)(m == 0 ? d : d + CZ_BIG + (size_t)(m - 1) * CZ_SLOT);
        int rc = is_recv ? nt_irecv1(&r->nt, comm, buf, m == 0 ? CZ_BIG : CZ_SLOT, m, mh,
                                     &s[m].req)
                         : nt_isend(&r->nt, comm, buf, m == 0 ? CZ_BIG : 0, m, mh, &s[m].req);
        CHECK(rc == 0 && s[m].req != NULL, "message %d: post returned rc %d", m, rc);
    }
    if (is_recv)
        TRY(tt_sync_put(r, 'p')); /* every receive is posted: send */
    TRY(tt_wait_all(r, s, 1 + CZ_ZERO, test_deadline_ms(IO_MS), "cudazero"));
    if (is_recv) {
        CHECK(s[0].size == CZ_BIG, "the 2 MiB message arrived as %d bytes", s[0].size);
        for (int m = 1; m <= CZ_ZERO; m++)
            CHECK(s[m].size == 0, "empty message %d arrived as %d bytes", m, s[m].size);
        CHECK(TPX_CU(cuMemcpyDtoH, x.scratch, d, len) == TPX_OK, "cuMemcpyDtoH failed");
        size_t bad = nt_verify(x.scratch, CZ_BIG, tt_seed(52, 0, 0));
        CHECK(bad == NT_VERIFY_OK, "the 2 MiB message: first wrong byte at %zu", bad);
        bad = nt_check_byte(x.scratch + CZ_BIG, len - CZ_BIG, CS_FILL);
        CHECK(bad == NT_VERIFY_OK, "the empty messages' buffers: byte %zu written", bad);
        test_say("a 2 MiB CUDA message and %d empty ones behind it on one connection, verified",
                 CZ_ZERO);
    }
    CHECK_RC(nt_deregmr(&r->nt, comm, mh));
    if (is_recv)
        TRY(tt_recv_close(r, 1, &lc, &comm));
    else
        CHECK_RC(nt_close_send(&r->nt, comm));
    tpx__cuda_mem_free(&x.dev);
    nt_free(x.scratch, len);
    return tt_expect_no_warnings();
}

int cudazero_recv(role_t *r) { return cz_role(r, 1); }
int cudazero_send(role_t *r) { return cz_role(r, 0); }

int cudastage_recv(role_t *r) { return cs_role(r, 1); }
int cudastage_send(role_t *r) { return cs_role(r, 0); }

#define CF_LEN (2 * MiB)

static int cf_role(role_t *r, int is_recv)
{
    tpx__cuda_mem_t dev;
    void *lc = NULL, *comm = NULL, *mh = NULL, *req = NULL;
    if (is_recv)
        TRY(tt_role_init(r));
    TRY(cs_gpu0());
    CHECK(tpx__cuda_mem_alloc(0, CF_LEN, &dev) == TPX_OK, "cuMemAlloc failed");
    void *buf = (void *)(uintptr_t)dev.ptr;
    if (is_recv)
        TRY(tt_recv_open(r, 1, &lc, &comm));
    else
        TRY(tt_send_open(r, 1, &comm));
    CHECK_RC(nt_regmr(&r->nt, comm, buf, CF_LEN, TPX_NCCL_PTR_CUDA, &mh));
    int rc = is_recv ? nt_irecv1(&r->nt, comm, buf, CF_LEN, 1, mh, &req)
                     : nt_isend(&r->nt, comm, buf, CF_LEN, 1, mh, &req);
    CHECK(rc == 0 && req != NULL, "post returned rc %d", rc);
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc != NT_TIMEOUT, "the %s did not end within %d ms", is_recv ? "receive" : "send",
          IO_MS);
    int rx_fails = getenv("FAKE_CUDA_FAIL_HTOD") != NULL; /* else the sender's copy */
    if (is_recv == rx_fails) {
        CHECK(w.rc == TPX_NCCL_UNHANDLED_CUDA_ERROR,
              "test() of the %s whose copy failed returned rc %d, not %d (a CUDA error)",
              is_recv ? "receive" : "send", w.rc, TPX_NCCL_UNHANDLED_CUDA_ERROR);
        test_say("a failed staging copy: the %s reports a CUDA error", is_recv ? "receive" : "send");
    } else if (is_recv) {
        CHECK(w.rc != 0, "the receive completed although the sender's copy failed");
    }
    (void)nt_deregmr(&r->nt, comm, mh);
    if (is_recv) {
        (void)nt_close_recv(&r->nt, comm);
        (void)nt_close_listen(&r->nt, lc);
    } else {
        (void)nt_close_send(&r->nt, comm);
    }
    tpx__cuda_mem_free(&dev);
    return 0;
}

int cudafail_recv(role_t *r) { return cf_role(r, 1); }
int cudafail_send(role_t *r) { return cf_role(r, 0); }

/* ---- scenario: cudafailover, cudarejoin ------------------------------------------ */
/* TPX_SOCK_FAILOVER=1, 4 data connections: a 32 MiB message from (fake)
 * device memory to device memory loses a data connection in the middle
 * (the sender resets it while the receive is not posted yet, so the
 * message cannot have completed); the pieces it carried go through the
 * other connections' staging again and every byte arrives.
 * cudarejoin, then: 4 MiB CUDA messages one after the other until the
 * sender's process again has 4 TCP connections that carry data (the reset
 * one is closed: only its replacement, sock_rejoin.c, with staging rings
 * of its own at both ends, makes the fourth), then one more 32 MiB
 * message over all four. Every message verified. */

#define CFO_LEN   (32 * MiB)
#define CRJ_MSG   (4 * MiB)
#define CRJ_TRIES 1000
#define CFO_SOCKS 4

/* Device memory d: `len` bytes of nt_fill(seed) (via scratch). */
static int cfo_put(CUdeviceptr d, unsigned char *scratch, size_t len, uint64_t seed)
{
    nt_fill(scratch, len, seed);
    CHECK(TPX_CU(cuMemcpyHtoD, d, scratch, len) == TPX_OK &&
              TPX_CU(cuCtxSynchronize) == TPX_OK,
          "cuMemcpyHtoD failed");
    return 0;
}

/* One message of `len` bytes from d (send) or into d, checked (receive). */
static int cfo_msg(role_t *r, void *comm, void *mh, CUdeviceptr d, unsigned char *scratch,
                   int is_recv, size_t len, uint64_t seed, const char *what)
{
    void *req = NULL;
    if (is_recv) {
        CHECK(TPX_CU(cuMemsetD8, d, CS_FILL, len) == TPX_OK &&
                  TPX_CU(cuCtxSynchronize) == TPX_OK,
              "cuMemsetD8 failed");
        CHECK_RC(nt_irecv1(&r->nt, comm, (void *)(uintptr_t)d, len, 1, mh, &req));
    } else {
        TRY(cfo_put(d, scratch, len, seed));
        CHECK_RC(nt_isend(&r->nt, comm, (void *)(uintptr_t)d, len, 1, mh, &req));
    }
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
    CHECK(w.rc == 0 && w.done == 1, "%s (%zu bytes of CUDA memory): rc %d done %d", what, len,
          w.rc, w.done);
    if (!is_recv)
        return 0;
    CHECK(w.size == (int)len, "%s: %d bytes reported, %zu sent", what, w.size, len);
    CHECK(TPX_CU(cuMemcpyDtoH, scratch, d, len) == TPX_OK, "cuMemcpyDtoH failed");
    size_t bad = nt_verify(scratch, len, seed);
    CHECK(bad == NT_VERIFY_OK, "%s: first wrong byte at %zu", what, bad);
    return 0;
}

/* cudarejoin after the first message: CRJ_MSG messages until the
 * replacement carries, then one more of CFO_LEN. */
static int crj_rest(role_t *r, void *comm, void *mh, CUdeviceptr d, unsigned char *scratch,
                    int is_recv, uint64_t t0)
{
    char more = 'm';
    int carrying = 0, i;
    uint64_t t1 = 0;
    for (i = 1; i <= CRJ_TRIES && more == 'm'; i++) {
        TRY(cfo_msg(r, comm, mh, d, scratch, is_recv, CRJ_MSG, tt_seed(54, (uint64_t)i, 0),
                    "a message after the reset"));
        if (is_recv) {
            TRY(tt_link_get(r, &more, 1, IO_MS));
            continue;
        }
        carrying = tt_tcp_carrying(MiB);
        if (carrying >= CFO_SOCKS) {
            t1 = test_now_ns();
            more = 'e';
        } else if (i == CRJ_TRIES) {
            more = 'x';
        }
        TRY(tt_sync_put(r, more));
    }
    CHECK(more == 'e' || !is_recv, "the sender gave up: the reset connection was not replaced");
    CHECK(more == 'e', "after %d messages of %d MiB, %d TCP connections carry data (expected "
                       "%d: the reset one's replacement made)",
          i - 1, (int)(CRJ_MSG / MiB), carrying, CFO_SOCKS);
    if (!is_recv)
        test_say("%d connections carry data %.1f ms after the reset (%d CUDA messages of %d "
                 "MiB)", carrying, (double)(t1 - t0) / 1e6, i - 1, (int)(CRJ_MSG / MiB));
    TRY(cfo_msg(r, comm, mh, d, scratch, is_recv, CFO_LEN, tt_seed(54, 1u << 20, 0),
                "the last message, over the replaced connection too"));
    if (is_recv)
        test_say("every CUDA message arrived whole, over the replaced connection too");
    return 0;
}

static int cfo_role(role_t *r, int is_recv, int rejoin)
{
    cs_t x = {.r = r, .is_recv = is_recv};
    void *lc = NULL, *comm = NULL, *mh = NULL;
    if (is_recv)
        TRY(tt_role_init(r));
    TRY(cs_gpu0());
    CHECK(tpx__cuda_mem_alloc(0, CFO_LEN, &x.dev) == TPX_OK, "cuMemAlloc of %d bytes failed",
          (int)CFO_LEN);
    x.scratch = nt_alloc(CFO_LEN);
    CHECK(x.scratch != NULL, "out of memory");
    CUdeviceptr d = x.dev.ptr;
    if (is_recv) {
        TRY(tt_recv_open(r, 1, &lc, &comm));
        if (rejoin) { /* as NCCL and the engine do: its sockets go on for rejoins */
            CHECK_RC(nt_close_listen(&r->nt, lc));
            lc = NULL;
        }
    } else {
        TRY(tt_send_open(r, 1, &comm));
    }
    CHECK_RC(nt_regmr(&r->nt, comm, (void *)(uintptr_t)d, CFO_LEN, TPX_NCCL_PTR_CUDA, &mh));
    uint64_t t0 = 0;
    if (is_recv) {
        TRY(tt_sync_put(r, 'p'));
        TRY(tt_sync_get(r, 'x', IO_MS)); /* a data connection was reset */
        TRY(cfo_msg(r, comm, mh, d, x.scratch, 1, CFO_LEN, tt_seed(53, 0, 0),
                    "the CUDA receive whose data connection was reset"));
        test_say("32 MiB of CUDA memory arrived whole over the connections left");
    } else {
        TRY(cfo_put(d, x.scratch, CFO_LEN, tt_seed(53, 0, 0)));
        TRY(tt_sync_get(r, 'p', IO_MS));
        void *req = NULL;
        CHECK_RC(nt_isend(&r->nt, comm, (void *)(uintptr_t)d, CFO_LEN, 1, mh, &req));
        CHECK(tt_reset_busy(2, 1) == 1, "found no 2 data connections with bytes queued");
        t0 = test_now_ns();
        TRY(tt_sync_put(r, 'x'));
        nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(IO_MS));
        CHECK(w.rc == 0 && w.done == 1, "the CUDA send whose data connection was reset: rc %d "
                                        "done %d",
              w.rc, w.done);
    }
    if (rejoin)
        TRY(crj_rest(r, comm, mh, d, x.scratch, is_recv, t0));
    if (is_recv)
        TRY(tt_sync_put(r, 'd'));
    else
        TRY(tt_sync_get(r, 'd', IO_MS));
    CHECK_RC(nt_deregmr(&r->nt, comm, mh));
    if (is_recv && lc != NULL)
        TRY(tt_recv_close(r, 1, &lc, &comm));
    else if (is_recv)
        CHECK_RC(nt_close_recv(&r->nt, comm));
    else
        CHECK_RC(nt_close_send(&r->nt, comm));
    tpx__cuda_mem_free(&x.dev);
    nt_free(x.scratch, CFO_LEN);
    return 0;
}

int cudafailover_recv(role_t *r) { return cfo_role(r, 1, 0); }
int cudafailover_send(role_t *r) { return cfo_role(r, 0, 0); }
int cudarejoin_recv(role_t *r) { return cfo_role(r, 1, 1); }
int cudarejoin_send(role_t *r) { return cfo_role(r, 0, 1); }
