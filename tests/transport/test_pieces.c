/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pieces.c - hand-built piece headers (a hostile sender's, and legitimate
 * streams in rare shapes) against a receive comm of the built-in transport
 * (the wire format of sock_wire.h).
 *
 * One process: the role listens, opens a raw control connection and raw
 * data connections with the listener's nonce, accepts the comm through the
 * plugin and then writes hand-built piece headers (and payloads) on the
 * data connections. A stream no legitimate sender writes must end its
 * receive with an error rc within PC_MS -- never "not done, rc 0" forever,
 * never "done" with bytes of the buffer no piece wrote -- and a legitimate
 * one must still be delivered.
 *
 *   pieces_zdup       a zero-byte message, then a zero-byte message whose
 *                     piece comes twice
 *   pieces_overlap    pieces of one message that overlap while their lengths
 *                     add up to its size (one connection; two), next to
 *                     legitimate ones out of order, and a message of 64
 *                     pieces whose odd ones all come first (more stretches
 *                     ahead of a gap than a receive tracks: a wait)
 *   pieces_parkclose  the sender closes every connection behind the header
 *                     of a message not posted yet (its payload not sent; or
 *                     whole and small, held eagerly, beside a plain close):
 *                     the receive posted before fails with rc 2
 *   pieces_closeheld  complete messages, then the close, all before their
 *                     receives are posted: each is delivered when posted,
 *                     and only the receive after them reports the close
 *   pieces_lostwake   a legitimate message whose waiting piece is let in by
 *                     a claim that extends the front, not one that frees a
 *                     stretch: delivered
 *   pieces_waitclose  a legitimate message whose waiting piece sits behind
 *                     its connection's close: delivered, not "peer closed"
 *   pieces_gapstuck   a sender that breaks the order of its pieces on every
 *                     connection (each waits for room beyond a gap none
 *                     fills) and keeps them open: rc 2, not a hang
 *   pieces_gapclose   the same on one connection of four, then the close
 *                     (also cutting the waiting piece, also before the
 *                     receive is posted): rc 2, not a hang
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include "plugin/sock/sock_wire.h"
#include "transport_test.h"

#define PC_MS    3000 /* a receive ends (done or an error) within this */
#define PC_TAG   7
#define PC_SOCKS 4 /* data connections of a raw comm, at most */

/* A receive comm whose sender is this process, writing raw bytes. */
typedef struct {
    void *lc, *rc;
    int ctrl;
    int data[PC_SOCKS];
    int nsocks;
} pc_comm_t;

static int pc_connect(const tpx_sock_handle_t *h, uint64_t id, int kind, int index, int nsocks)
{
    int fd = socket(h->addr.sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    unsigned char b[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx_sock_hello_t hello = {.kind = (uint16_t)kind,
                              .index = (uint16_t)index,
                              .nsocks = (uint16_t)nsocks,
                              .nonce = h->nonce,
                              .conn_id = id};
    tpx__sock_hello_encode(&hello, b);
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, &h->addr.sa, tpx__sock_addr_len(&h->addr)) != 0 ||
        send(fd, b, sizeof(b), MSG_NOSIGNAL) != (ssize_t)sizeof(b)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int pc_open(role_t *r, int nsocks, pc_comm_t *pc)
{
    static unsigned opened;
    unsigned char handle[HANDLE_SIZE];
    tpx_sock_handle_t h;
    memset(pc, 0, sizeof(*pc));
    pc->nsocks = nsocks;
    TRY(tt_role_init(r));
    CHECK_RC(nt_listen(&r->nt, 0, handle, &pc->lc));
    CHECK(tpx__sock_handle_decode(handle, &h) == TPX_OK, "bad handle from listen()");
    uint64_t id = 0x7069656365000000ull ^ ((uint64_t)getpid() << 8) ^ opened++; /* "piece" */
    pc->ctrl = pc_connect(&h, id, TPX_SOCK_HELLO_CTRL, 0, nsocks);
    CHECK(pc->ctrl >= 0, "raw control connection: %s", strerror(errno));
    for (int i = 0; i < nsocks; i++) {
        pc->data[i] = pc_connect(&h, id, TPX_SOCK_HELLO_DATA, i, nsocks);
        CHECK(pc->data[i] >= 0, "raw data connection %d: %s", i, strerror(errno));
    }
    CHECK_RC(nt_accept_wait(&r->nt, pc->lc, &pc->rc, test_deadline_ms(CONN_MS)));
    return 0;
}

/* The sender's close of every connection (idempotent). */
static void pc_hangup(pc_comm_t *pc)
{
    for (int i = 0; i < pc->nsocks; i++) {
        if (pc->data[i] >= 0)
            close(pc->data[i]);
        pc->data[i] = -1;
    }
    if (pc->ctrl >= 0)
        close(pc->ctrl);
    pc->ctrl = -1;
}

static int pc_close(role_t *r, pc_comm_t *pc)
{
    pc_hangup(pc);
    CHECK_RC(nt_close_recv(&r->nt, pc->rc));
    CHECK_RC(nt_close_listen(&r->nt, pc->lc));
    return 0;
}

static int pc_write(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        CHECK(k > 0, "raw send: %s", strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void pc_header(unsigned char *b, uint32_t len, uint64_t seq, uint64_t total, uint64_t off)
{
    tpx_sock_piece_t p = {.tag = PC_TAG, .len = len, .seq = seq, .total = total, .offset = off};
    tpx__sock_piece_encode(&p, b);
}

/* Header and payload of one piece: `len` bytes of `msg` from `off`. */
static int pc_piece(int fd, const unsigned char *msg, uint32_t len, uint64_t seq, uint64_t total,
                    uint64_t off)
{
    unsigned char h[TPX_SOCK_PIECE_WIRE_SIZE];
    pc_header(h, len, seq, total, off);
    TRY(pc_write(fd, h, sizeof(h)));
    return len > 0 ? pc_write(fd, msg + off, len) : 0;
}

/* Wait for a receive that must end (done or an error rc) within PC_MS. */
static int pc_wait(role_t *r, void *req, const char *what, nt_result_t *out)
{
    *out = nt_wait(&r->nt, req, test_deadline_ms(PC_MS));
    CHECK(out->rc != NT_TIMEOUT,
          "%s: the receive neither completed nor failed within %d ms (test() says not done, "
          "rc 0)",
          what, PC_MS);
    return 0;
}

/* The comm failed: a new receive (of a message never sent, room for a small
 * one) fails at irecv or in test(), with `want`, done 0, within PC_MS. */
static int pc_expect_failed(role_t *r, pc_comm_t *pc, int want, const char *what)
{
    unsigned char b[100];
    void *req = NULL;
    int rc = nt_irecv1(&r->nt, pc->rc, b, sizeof(b), PC_TAG, NULL, &req);
    if (rc == 0) {
        nt_result_t w;
        TRY(pc_wait(r, req, what, &w));
        CHECK(!w.done, "%s: a receive posted after the failure completed", what);
        rc = w.rc;
    }
    CHECK(rc == want, "%s: the comm failed with rc %d, expected %d", what, rc, want);
    return 0;
}

/* ---- pieces_zdup ------------------------------------------------------------------ */

/* A zero-byte message is one piece of length 0 (sock_wire.c rejects any
 * other length for it); a second one for the same message must fail the
 * comm as a protocol error. Counting the second one took the message's
 * `done` past the value that completes it: its receive hung, no error. */
int pieces_zdup_role(role_t *r)
{
    pc_comm_t pc;
    unsigned char buf[100];
    void *req = NULL;
    nt_result_t w;
    TRY(pc_open(r, 1, &pc));
    /* A legitimate empty message completes. */
    CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, sizeof(buf), PC_TAG, NULL, &req));
    TRY(pc_piece(pc.data[0], NULL, 0, 0, 0, 0));
    TRY(pc_wait(r, req, "an empty message", &w));
    CHECK(w.rc == 0 && w.done && w.size == 0, "an empty message: rc %d done %d size %d", w.rc,
          w.done, w.size);
    /* The next one's piece twice, in one write (read in one turn). */
    unsigned char two[2 * TPX_SOCK_PIECE_WIRE_SIZE];
    pc_header(two, 0, 1, 0, 0);
    pc_header(two + TPX_SOCK_PIECE_WIRE_SIZE, 0, 1, 0, 0);
    CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, sizeof(buf), PC_TAG, NULL, &req));
    TRY(pc_write(pc.data[0], two, sizeof(two)));
    /* The first piece completes it legitimately, unless the second one
     * failed the comm before test() looked: either is fine, silence is not. */
    TRY(pc_wait(r, req, "an empty message whose piece came twice", &w));
    CHECK((w.done && w.rc == 0 && w.size == 0) || (!w.done && w.rc == TPX_NCCL_INTERNAL_ERROR),
          "an empty message whose piece came twice: rc %d done %d size %d", w.rc, w.done, w.size);
    TRY(pc_expect_failed(r, &pc, TPX_NCCL_INTERNAL_ERROR, "after a repeated zero-byte piece"));
    test_say("a repeated zero-byte piece failed the comm (protocol error), no hang");
    TRY(pc_close(r, &pc));
    return 0;
}

/* ---- pieces_overlap ------------------------------------------------------------- */

#define OV_SIZE   100
#define OV_PIECES 64 /* of OV_PIECE bytes: the stress of the claim runs */
#define OV_PIECE  1024

typedef struct {
    int conn;
    uint32_t off, len;
} ov_piece_t;

/* A 100-byte message in the pieces given; returns the receive's end. */
static int ov_send(role_t *r, pc_comm_t *pc, const ov_piece_t *p, int n, unsigned char *buf,
                   uint64_t seed, nt_result_t *w)
{
    unsigned char msg[OV_SIZE];
    void *req = NULL;
    nt_fill(msg, sizeof(msg), seed);
    memset(buf, 'Z', OV_SIZE);
    CHECK_RC(nt_irecv1(&r->nt, pc->rc, buf, OV_SIZE, PC_TAG, NULL, &req));
    for (int i = 0; i < n; i++)
        TRY(pc_piece(pc->data[p[i].conn], msg, p[i].len, 0, OV_SIZE, p[i].off));
    return pc_wait(r, req, "overlapping pieces", w);
}

/* Pieces that overlap: the receive fails (protocol error), never done. */
static int ov_bad(role_t *r, int nsocks, const ov_piece_t *p, int n, const char *what)
{
    pc_comm_t pc;
    unsigned char buf[OV_SIZE];
    nt_result_t w;
    TRY(pc_open(r, nsocks, &pc));
    TRY(ov_send(r, &pc, p, n, buf, tt_seed(42, 0, 0), &w));
    int untouched = 0; /* bytes no piece wrote */
    for (int i = 0; i < OV_SIZE; i++)
        untouched += buf[i] == 'Z';
    CHECK(!w.done && w.rc == TPX_NCCL_INTERNAL_ERROR,
          "%s: rc %d done %d size %d (%d of %d bytes never written); expected a protocol error "
          "(rc %d)",
          what, w.rc, w.done, w.size, untouched, OV_SIZE, TPX_NCCL_INTERNAL_ERROR);
    test_say("%s: failed with rc %d", what, w.rc);
    TRY(pc_close(r, &pc));
    return 0;
}

int pieces_overlap_role(role_t *r)
{
    const ov_piece_t twice[] = {{0, 0, 50}, {0, 0, 50}};
    const ov_piece_t cross[] = {{0, 0, 60}, {1, 30, 40}};
    const ov_piece_t inside[] = {{1, 40, 60}, {0, 0, 20}, {0, 50, 20}};
    TRY(ov_bad(r, 1, twice, 2, "[0, 50) twice on one connection"));
    TRY(ov_bad(r, 2, cross, 2, "[0, 60) and [30, 70) on two connections"));
    TRY(ov_bad(r, 2, inside, 3, "[40, 100), [0, 20) and [50, 70)"));

    /* Legitimate: out of order over two connections. */
    pc_comm_t pc;
    unsigned char buf[OV_SIZE];
    nt_result_t w;
    const ov_piece_t swapped[] = {{1, 50, 50}, {0, 0, 50}};
    TRY(pc_open(r, 2, &pc));
    TRY(ov_send(r, &pc, swapped, 2, buf, tt_seed(42, 1, 0), &w));
    CHECK(w.rc == 0 && w.done && w.size == OV_SIZE,
          "[50, 100) then [0, 50): rc %d done %d "
          "size %d",
          w.rc, w.done, w.size);
    CHECK(nt_verify(buf, OV_SIZE, tt_seed(42, 1, 0)) == NT_VERIFY_OK, "[50, 100) then [0, 50): "
                                                                      "wrong bytes");
    TRY(pc_close(r, &pc));

    /* Legitimate: the odd pieces of 64 all first on one connection (32
     * stretches ahead of the gap at 0: its connection waits for room), then
     * the even ones on the other. */
    unsigned char *msg = malloc(OV_PIECES * OV_PIECE), *big = malloc(OV_PIECES * OV_PIECE);
    CHECK(msg != NULL && big != NULL, "out of memory");
    nt_fill(msg, OV_PIECES * OV_PIECE, tt_seed(42, 2, 0));
    memset(big, 0, OV_PIECES * OV_PIECE);
    void *req = NULL;
    TRY(pc_open(r, 2, &pc));
    CHECK_RC(nt_irecv1(&r->nt, pc.rc, big, OV_PIECES * OV_PIECE, PC_TAG, NULL, &req));
    for (int odd = 1; odd >= 0; odd--)
        for (int k = odd; k < OV_PIECES; k += 2)
            TRY(pc_piece(pc.data[odd], msg, OV_PIECE, 0, OV_PIECES * OV_PIECE,
                         (uint64_t)k * OV_PIECE));
    TRY(pc_wait(r, req, "64 pieces, the odd ones first", &w));
    CHECK(w.rc == 0 && w.done && w.size == OV_PIECES * OV_PIECE,
          "64 pieces, the odd ones first: rc %d done %d size %d", w.rc, w.done, w.size);
    CHECK(nt_verify(big, OV_PIECES * OV_PIECE, tt_seed(42, 2, 0)) == NT_VERIFY_OK,
          "64 pieces, the odd ones first: wrong bytes");
    test_say("legitimate pieces out of order delivered, also with 32 stretches ahead of a gap");
    TRY(pc_close(r, &pc));
    free(msg);
    free(big);
    return 0;
}

/* ---- pieces_parkclose, pieces_closeheld ----------------------------------------------- */

#define PC_SMALL     100            /* a message held eagerly (TPX_SOCK_EAGER_BYTES: 64 KiB) */
#define PC_LARGE     (64 * KiB + 1) /* parked with its payload in the socket */
#define PC_SETTLE_US 100000         /* for the receiver to read what was sent, and the close */

/* A receive posted for message 0 of a sender that closed every connection:
 * it must fail with rc 2 (the peer closed). */
static int pc_expect_closed(role_t *r, pc_comm_t *pc, const char *what)
{
    TRY(pc_expect_failed(r, pc, TPX_NCCL_SYSTEM_ERROR, what));
    test_say("%s: the receive failed as the peer's close", what);
    return 0;
}

int pieces_parkclose_role(role_t *r)
{
    pc_comm_t pc;
    unsigned char h[TPX_SOCK_PIECE_WIRE_SIZE], small[PC_SMALL];
    unsigned char buf[PC_SMALL];
    void *req = NULL;
    nt_result_t w;
    nt_fill(small, sizeof(small), tt_seed(40, 0, 0));

    /* 1. The receive is posted; a header of a far-future message of 1 MiB
     * (too large to be held eagerly: the connection parks), then the close:
     * the parked piece can never be whole. */
    TRY(pc_open(r, 1, &pc));
    CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, sizeof(buf), PC_TAG, NULL, &req));
    pc_header(h, MiB, 1000000, MiB, 0);
    TRY(pc_write(pc.data[0], h, sizeof(h)));
    usleep(PC_SETTLE_US);
    pc_hangup(&pc);
    TRY(pc_wait(r, req, "a close behind a parked header", &w));
    CHECK(!w.done && w.rc == TPX_NCCL_SYSTEM_ERROR,
          "a close behind a parked header: rc %d done %d, expected rc %d done 0", w.rc, w.done,
          TPX_NCCL_SYSTEM_ERROR);
    test_say("a close behind a parked header failed the posted receive with rc %d", w.rc);
    TRY(pc_close(r, &pc));

    /* 2. The same, the close before the receive is posted. */
    TRY(pc_open(r, 1, &pc));
    TRY(pc_write(pc.data[0], h, sizeof(h)));
    usleep(PC_SETTLE_US);
    pc_hangup(&pc);
    usleep(PC_SETTLE_US);
    TRY(pc_expect_closed(r, &pc, "a receive posted after a close behind a parked header"));
    TRY(pc_close(r, &pc));

    /* 3. Two connections: one ends plainly, the other holds a whole small
     * far-future message eagerly behind its close; message 0 never comes. */
    TRY(pc_open(r, 2, &pc));
    TRY(pc_piece(pc.data[1], small, PC_SMALL, 5, PC_SMALL, 0));
    usleep(PC_SETTLE_US);
    pc_hangup(&pc);
    usleep(PC_SETTLE_US);
    TRY(pc_expect_closed(r, &pc, "a close behind a message held eagerly, beside a plain close"));
    TRY(pc_close(r, &pc));
    return 0;
}

/* Messages 0 (small, held eagerly), 1 (parked with its payload) and 2 (two
 * pieces, one behind each), then the close, before any receive is posted. */
int pieces_closeheld_role(role_t *r)
{
    pc_comm_t pc;
    unsigned char *msg = malloc(3 * PC_LARGE), *buf = malloc(PC_LARGE);
    CHECK(msg != NULL && buf != NULL, "out of memory");
    const size_t sizes[3] = {PC_SMALL, PC_LARGE, PC_LARGE};
    for (int m = 0; m < 3; m++)
        nt_fill(msg + (size_t)m * PC_LARGE, sizes[m], tt_seed(41, (unsigned)m, 0));
    TRY(pc_open(r, 2, &pc));
    const size_t half = PC_LARGE / 2;
    TRY(pc_piece(pc.data[0], msg, PC_SMALL, 0, PC_SMALL, 0));
    TRY(pc_piece(pc.data[1], msg + PC_LARGE, PC_LARGE, 1, PC_LARGE, 0));
    TRY(pc_piece(pc.data[0], msg + 2 * PC_LARGE, (uint32_t)half, 2, PC_LARGE, 0));
    TRY(pc_piece(pc.data[1], msg + 2 * PC_LARGE, (uint32_t)(PC_LARGE - half), 2, PC_LARGE, half));
    usleep(PC_SETTLE_US);
    pc_hangup(&pc);
    usleep(PC_SETTLE_US);
    for (int m = 0; m < 3; m++) {
        void *req = NULL;
        nt_result_t w;
        memset(buf, 0, PC_LARGE);
        CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, PC_LARGE, PC_TAG, NULL, &req));
        TRY(pc_wait(r, req, "a message sent before the close", &w));
        CHECK(w.rc == 0 && w.done && w.size == (int)sizes[m],
              "message %d, sent whole before the close: rc %d done %d size %d", m, w.rc, w.done,
              w.size);
        size_t bad = nt_verify(buf, sizes[m], tt_seed(41, (unsigned)m, 0));
        CHECK(bad == NT_VERIFY_OK, "message %d: wrong byte at %zu", m, bad);
    }
    test_say("3 messages sent before the close were delivered when posted");
    TRY(pc_expect_closed(r, &pc, "the receive after them"));
    TRY(pc_close(r, &pc));
    free(msg);
    free(buf);
    return 0;
}

/* ---- claims that wait (found by review) ---- */
#define LW_P 65536
/* A legitimate stream (each connection carries its pieces in increasing
 * order, they tile the message), 35 pieces: conn2 4, 6, ..., 34 (16 runs);
 * conn1 2 (no room: waits), then 5, 7, ..., 33; conn0 0, 1, 3, which extend
 * the front and a run without changing their number. The waiter must be
 * retried after any claim, not only one that freed a run (it hung). */
int pieces_lostwake_role(role_t *r)
{
    pc_comm_t pc;
    const uint64_t K = 1024, total = 34 * 1024 + 1024 * 1024;
    unsigned char *msg = malloc(total), *big = calloc(1, total);
    nt_fill(msg, total, tt_seed(43, 0, 0));
    void *req = NULL;
    nt_result_t w;
    TRY(pc_open(r, 3, &pc));
    CHECK_RC(nt_irecv1(&r->nt, pc.rc, big, total, PC_TAG, NULL, &req));
    for (int k = 4; k <= 34; k += 2)
        TRY(pc_piece(pc.data[2], msg, k == 34 ? (uint32_t)(total - 34 * K) : (uint32_t)K, 0, total, k * K));
    usleep(200000);
    TRY(pc_piece(pc.data[1], msg, K, 0, total, 2 * K));
    for (int k = 5; k <= 33; k += 2)
        TRY(pc_piece(pc.data[1], msg, K, 0, total, k * K));
    usleep(200000);
    TRY(pc_piece(pc.data[0], msg, K, 0, total, 0));
    TRY(pc_piece(pc.data[0], msg, K, 0, total, 1 * K));
    TRY(pc_piece(pc.data[0], msg, K, 0, total, 3 * K));
    TRY(pc_wait(r, req, "lost wake", &w));
    CHECK(w.rc == 0 && w.done, "lost wake: rc %d done %d", w.rc, w.done);
    CHECK(nt_verify(big, total, tt_seed(43, 0, 0)) == NT_VERIFY_OK, "bytes");
    TRY(pc_close(r, &pc));
    free(msg);
    free(big);
    test_say("lost wake: delivered");
    return 0;
}

/* 64 pieces: the odd ones on conn1, which then closes (its 17th piece waits
 * for room behind the close), then the even ones on conn0, which closes
 * too: every byte was sent, the message must complete (a waiter behind a
 * close was taken for an ended connection: "peer closed"). */
int pieces_waitclose_role(role_t *r)
{
    int fails = 0;
    for (int it = 0; it < 20; it++) {
        pc_comm_t pc;
        const int n = 64;
        unsigned char *msg = malloc(n * LW_P), *big = calloc(1, n * LW_P);
        nt_fill(msg, n * LW_P, tt_seed(44, 0, 0));
        void *req = NULL;
        nt_result_t w;
        TRY(pc_open(r, 2, &pc));
        CHECK_RC(nt_irecv1(&r->nt, pc.rc, big, n * LW_P, PC_TAG, NULL, &req));
        for (int k = 1; k < n; k += 2)
            TRY(pc_piece(pc.data[1], msg, LW_P, 0, n * LW_P, (uint64_t)k * LW_P));
        close(pc.data[1]);
        pc.data[1] = -1;
        usleep(100000);
        for (int k = 0; k < n; k += 2)
            TRY(pc_piece(pc.data[0], msg, LW_P, 0, n * LW_P, (uint64_t)k * LW_P));
        close(pc.data[0]);
        pc.data[0] = -1;
        TRY(pc_wait(r, req, "waitclose", &w));
        if (!(w.rc == 0 && w.done)) {
            fails++;
            test_say("waitclose iteration %d: rc %d done %d", it, w.rc, w.done);
        }
        TRY(pc_close(r, &pc));
        free(msg);
        free(big);
    }
    CHECK(fails == 0, "waitclose: %d of 20 legitimate messages failed", fails);
    return 0;
}

/* ---- pieces_gapstuck, pieces_gapclose: a gap no connection fills ---------------- */
#define GAP_MS     10000 /* generous: the receive fails at once, or when the close is seen */
#define GAP_P      1024
#define GAP_PIECES 80 /* of GAP_P bytes: more stretches than a receive tracks (16) */

/* Piece k (of GAP_P bytes) of a GAP_PIECES-piece message 0 on `fd`. */
static int gap_piece(int fd, const unsigned char *msg, int k)
{
    return pc_piece(fd, msg, GAP_P, 0, GAP_PIECES * GAP_P, (uint64_t)k * GAP_P);
}

/* The receive posted before the pieces fails with rc 2 (done 0) within
 * GAP_MS: never "not done, rc 0" forever (NCCL has no deadline). */
static int gap_expect(role_t *r, void *req, const char *what)
{
    nt_result_t w = nt_wait(&r->nt, req, test_deadline_ms(GAP_MS));
    CHECK(w.rc != NT_TIMEOUT,
          "%s: the receive neither completed nor failed within %d ms (test() says not done, rc "
          "0)",
          what, GAP_MS);
    CHECK(!w.done && w.rc == TPX_NCCL_SYSTEM_ERROR, "%s: rc %d done %d, expected rc %d done 0",
          what, w.rc, w.done, TPX_NCCL_SYSTEM_ERROR);
    test_say("%s: the receive failed with rc %d", what, w.rc);
    return 0;
}

/* A sender that breaks the order of its pieces on every connection and
 * keeps them open: every connection waits for room beyond a gap none of
 * them fills (the piece at 0 never comes). One connection with the 40
 * pieces at odd offsets; two with 17 of them each (1..33, 35..67): however
 * their reads interleave, the 16 stretches a receive tracks fill up before
 * either connection is through, so both wait. */
int pieces_gapstuck_role(role_t *r)
{
    unsigned char *msg = malloc(GAP_PIECES * GAP_P), *buf = malloc(GAP_PIECES * GAP_P);
    CHECK(msg != NULL && buf != NULL, "out of memory");
    nt_fill(msg, GAP_PIECES * GAP_P, tt_seed(45, 0, 0));
    for (int nsocks = 1; nsocks <= 2; nsocks++) {
        pc_comm_t pc;
        void *req = NULL;
        TRY(pc_open(r, nsocks, &pc));
        CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, GAP_PIECES * GAP_P, PC_TAG, NULL, &req));
        for (int k = 1; k < (nsocks == 1 ? GAP_PIECES : 68); k += 2)
            TRY(gap_piece(pc.data[k < 34 ? 0 : nsocks - 1], msg, k));
        TRY(gap_expect(r, req,
                       nsocks == 1 ? "one connection, only odd pieces, kept open"
                                   : "two connections, each waiting, kept open"));
        TRY(pc_close(r, &pc));
    }
    free(msg);
    free(buf);
    return 0;
}

/* A sender that breaks the order of its pieces on one connection of four
 * (the odd pieces: its 17th waits for room), sends nothing on the others
 * and closes them all: the waiting connection's close must be seen and
 * the receive fail as the peer's close. Also with the close cutting the
 * waiting piece (its header only) and with the close before the receive
 * is posted. */
int pieces_gapclose_role(role_t *r)
{
    unsigned char *msg = malloc(GAP_PIECES * GAP_P), *buf = malloc(GAP_PIECES * GAP_P);
    CHECK(msg != NULL && buf != NULL, "out of memory");
    nt_fill(msg, GAP_PIECES * GAP_P, tt_seed(46, 0, 0));
    static const char *const what[3] = {
        "odd pieces on one connection of four, then the close",
        "odd pieces, the waiting one cut by the close",
        "odd pieces and the close, then the receive posted",
    };
    for (int v = 0; v < 3; v++) {
        pc_comm_t pc;
        void *req = NULL;
        TRY(pc_open(r, PC_SOCKS, &pc));
        if (v != 2)
            CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, GAP_PIECES * GAP_P, PC_TAG, NULL, &req));
        for (int k = 1; k < (v == 1 ? 33 : GAP_PIECES); k += 2)
            TRY(gap_piece(pc.data[0], msg, k));
        if (v == 1) { /* the 17th piece's header, without its payload */
            unsigned char h[TPX_SOCK_PIECE_WIRE_SIZE];
            pc_header(h, GAP_P, 0, GAP_PIECES * GAP_P, 33 * GAP_P);
            TRY(pc_write(pc.data[0], h, sizeof(h)));
        }
        usleep(PC_SETTLE_US);
        pc_hangup(&pc);
        if (v == 2) {
            usleep(PC_SETTLE_US);
            CHECK_RC(nt_irecv1(&r->nt, pc.rc, buf, GAP_PIECES * GAP_P, PC_TAG, NULL, &req));
        }
        TRY(gap_expect(r, req, what[v]));
        TRY(pc_close(r, &pc));
    }
    free(msg);
    free(buf);
    return 0;
}
