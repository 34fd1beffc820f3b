/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bs_fuzz.c - random bytes against every parser of bootstrap input:
 * the frame header, the handshake payloads, the INFO payload, and the
 * connection's stream parser on both sides of the handshake and after it.
 * Pass: no crash, no sanitizer report, every result one of the documented
 * statuses, no fd or memory leaked (ASan's leak check).
 *
 *   test_bs_fuzz [iterations [seed]]   (default 100000, seed from the clock)
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bs_test.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return test_xorshift64s(&rng_state);
}

static uint32_t rnd_below(uint32_t n)
{
    return n ? (uint32_t)(rnd() % n) : 0;
}

static void rnd_fill(void *p, size_t n)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)rnd();
}

/* Random bytes, often starting with a plausible header so the fuzz gets
 * past the magic and version checks. */
static size_t rnd_stream(unsigned char *b, size_t cap)
{
    size_t n = rnd_below((uint32_t)cap + 1);
    rnd_fill(b, n);
    if (n >= TPX_BS_HDR_SIZE && rnd_below(4) != 0) {
        uint32_t len = rnd_below(2) ? rnd_below(80) : (uint32_t)rnd();
        tpx__bs_hdr_encode((uint16_t)rnd_below(20), len, b);
        if (rnd_below(8) == 0)
            b[rnd_below(TPX_BS_HDR_SIZE)] ^= (unsigned char)(1u << rnd_below(8));
    }
    return n;
}

/* ---- pure decoders ------------------------------------------------------------ */

static void fuzz_hdr(long iters)
{
    for (long i = 0; i < iters; i++) {
        unsigned char *b = malloc(TPX_BS_HDR_SIZE); /* exact size: ASan sees overreads */
        rnd_fill(b, TPX_BS_HDR_SIZE);
        if (rnd_below(2))
            tpx__bs_hdr_encode((uint16_t)rnd(), (uint32_t)rnd(), b);
        uint32_t max = rnd_below(2) ? rnd_below(TPX_BS_MAX_MSG + 10) : (uint32_t)rnd();
        tpx_bs_hdr_t h = {0xdead, 0xbeef};
        const char *why = NULL;
        tpx_status_t st = tpx__bs_hdr_decode(b, max, &h, &why);
        if (st == TPX_OK) {
            EXPECT(h.len <= max && h.len <= TPX_BS_MAX_MSG);
        } else {
            EXPECT_EQ(st, TPX_ERR_PROTOCOL);
            EXPECT(why != NULL);
            EXPECT(h.type == 0xdead && h.len == 0xbeef); /* untouched */
        }
        free(b);
    }
}

static void fuzz_handshake_payloads(long iters)
{
    for (long i = 0; i < iters; i++) {
        static const uint32_t sizes[] = {TPX_BS_HELLO_SIZE, TPX_BS_CHALLENGE_SIZE,
                                         TPX_BS_AUTH_SIZE};
        uint32_t len = rnd_below(2) ? sizes[rnd_below(3)] : rnd_below(100);
        unsigned char *b = malloc(len ? len : 1);
        rnd_fill(b, len);
        if (len >= 4 && rnd_below(2)) /* plausible flags at the end */
            memset(b + len - 4, 0, 3);
        tpx_bs_hello_t he;
        tpx_bs_challenge_t ch;
        tpx_bs_auth_t au;
        tpx_status_t st = tpx__bs_hello_decode(b, len, &he);
        EXPECT(st == TPX_OK ? len == TPX_BS_HELLO_SIZE && he.flags <= 1 : st == TPX_ERR_PROTOCOL);
        st = tpx__bs_challenge_decode(b, len, &ch);
        EXPECT(st == TPX_OK ? len == TPX_BS_CHALLENGE_SIZE && ch.flags <= 1
                            : st == TPX_ERR_PROTOCOL);
        st = tpx__bs_auth_decode(b, len, &au);
        EXPECT(st == TPX_OK ? len == TPX_BS_AUTH_SIZE : st == TPX_ERR_PROTOCOL);
        if (st == TPX_OK) { /* round trip */
            unsigned char e[TPX_BS_AUTH_SIZE];
            tpx__bs_auth_encode(&au, e);
            EXPECT(memcmp(e, b, len) == 0);
        }
        free(b);
    }
}

static void rnd_info(tpx_bs_info_t *in)
{
    memset(in, 0, sizeof(*in));
    in->engine_id = rnd();
    in->gpu = (int32_t)rnd();
    in->chunk_bytes = (uint32_t)rnd();
    in->nhandles = (uint16_t)(1 + rnd_below(TPX_BS_MAX_HANDLES));
    in->window = (uint16_t)rnd();
    size_t nl = rnd_below(TPX_BS_PLUGIN_NAME_SIZE);
    for (size_t k = 0; k < nl; k++)
        in->plugin[k] = (char)('a' + rnd_below(26));
    for (int h = 0; h < in->nhandles; h++)
        rnd_fill(in->handles[h], TPX_BS_HANDLE_SIZE);
}

static void fuzz_info(long iters)
{
    for (long i = 0; i < iters; i++) {
        tpx_bs_info_t in, out;
        rnd_info(&in);
        uint32_t len = 0;
        unsigned char *b = malloc(TPX_BS_INFO_MAX_SIZE + 64);
        EXPECT_EQ(tpx__bs_info_encode(&in, b, TPX_BS_INFO_MAX_SIZE, &len), TPX_OK);
        EXPECT_EQ(len, TPX_BS_INFO_SIZE(in.nhandles));
        switch (rnd_below(5)) {
        case 0: /* unmodified: must round-trip exactly */
            EXPECT_EQ(tpx__bs_info_decode(b, len, &out), TPX_OK);
            EXPECT(memcmp(&in, &out, sizeof(in)) == 0);
            break;
        case 1: /* flip bytes */
            for (uint32_t k = 1 + rnd_below(4); k > 0; k--)
                b[rnd_below(len)] ^= (unsigned char)(1 + rnd_below(255));
            break;
        case 2: /* wrong length */
            len = rnd_below(TPX_BS_INFO_MAX_SIZE + 64);
            break;
        case 3: /* wrong nhandles */
            b[16] = (unsigned char)rnd();
            b[17] = (unsigned char)rnd();
            break;
        case 4: /* pure noise */
            len = rnd_below(TPX_BS_INFO_MAX_SIZE + 64);
            rnd_fill(b, len);
            break;
        }
        /* Decode from an exact-size copy so any overread is caught. */
        unsigned char *x = malloc(len ? len : 1);
        memcpy(x, b, len);
        memset(&out, 0x77, sizeof(out));
        tpx_status_t st = tpx__bs_info_decode(x, len, &out);
        if (st == TPX_OK) {
            EXPECT(out.nhandles >= 1 && out.nhandles <= TPX_BS_MAX_HANDLES);
            EXPECT_EQ(len, TPX_BS_INFO_SIZE(out.nhandles));
            EXPECT(memchr(out.plugin, '\0', sizeof(out.plugin)) != NULL);
            /* Re-encoding gives the same bytes. */
            unsigned char *y = malloc(len);
            uint32_t len2 = 0;
            EXPECT_EQ(tpx__bs_info_encode(&out, y, len, &len2), TPX_OK);
            EXPECT(len2 == len && memcmp(x, y, len) == 0);
            free(y);
        } else {
            EXPECT_EQ(st, TPX_ERR_PROTOCOL);
        }
        free(x);
        free(b);
    }
    /* Encoder argument checks. */
    tpx_bs_info_t in;
    unsigned char b[TPX_BS_INFO_MAX_SIZE];
    uint32_t len = 0;
    rnd_info(&in);
    in.nhandles = 0;
    EXPECT_EQ(tpx__bs_info_encode(&in, b, sizeof(b), &len), TPX_ERR_INVALID_ARG);
    in.nhandles = TPX_BS_MAX_HANDLES + 1;
    EXPECT_EQ(tpx__bs_info_encode(&in, b, sizeof(b), &len), TPX_ERR_INVALID_ARG);
    in.nhandles = TPX_BS_MAX_HANDLES;
    EXPECT_EQ(tpx__bs_info_encode(&in, b, sizeof(b) - 1, &len), TPX_ERR_INVALID_ARG);
    memset(in.plugin, 'x', sizeof(in.plugin));
    EXPECT_EQ(tpx__bs_info_encode(&in, b, sizeof(b), &len), TPX_ERR_INVALID_ARG);
    EXPECT_EQ(len, 0);
}

/* ---- the stream parser, through real sockets ----------------------------------------- */

static int is_conn_error(tpx_status_t st)
{
    return st == TPX_ERR_PROTOCOL || st == TPX_ERR_CONN_RESET || st == TPX_ERR_TIMED_OUT;
}

/* Random bytes to a fresh server (or client) connection, then EOF: the
 * handshake must end in an error, never hang, never succeed (nothing here
 * knows a valid mac for a random nonce... except the no-token case, where a
 * well-formed zero AUTH is legitimately accepted). */
static void fuzz_handshake_stream(long iters, int client_side)
{
    static unsigned char b[512];
    for (long i = 0; i < iters; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            perror("socketpair");
            exit(2);
        }
        const char *token = rnd_below(2) ? "fuzz" : NULL;
        tpx_bs_conn_t *c = NULL;
        tpx_status_t st = client_side
                              ? tpx__bs_client_start_fd(sv[0], token, test_deadline_ms(5000), &c)
                              : tpx__bs_server_start(sv[0], token, test_deadline_ms(5000), &c);
        EXPECT_EQ(st, TPX_OK);
        size_t n = rnd_stream(b, sizeof(b));
        if (!client_side && rnd_below(2) && n >= TPX_BS_HDR_SIZE + TPX_BS_HELLO_SIZE) {
            /* A well-formed HELLO first, so the fuzz reaches WAIT_AUTH. */
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, b);
            memset(b + TPX_BS_HDR_SIZE + TPX_BS_NONCE_SIZE, 0, 4);
            b[TPX_BS_HDR_SIZE + TPX_BS_HELLO_SIZE - 1] = token ? TPX_BS_FLAG_AUTH : 0;
            if (n >= 2 * TPX_BS_HDR_SIZE + TPX_BS_HELLO_SIZE && rnd_below(2))
                tpx__bs_hdr_encode(TPX_BS_MSG_AUTH, TPX_BS_AUTH_SIZE,
                                   b + TPX_BS_HDR_SIZE + TPX_BS_HELLO_SIZE);
        }
        if (n > 0 && write(sv[1], b, n) != (ssize_t)n)
            EXPECT(0);
        shutdown(sv[1], SHUT_WR);
        int steps = 0;
        do {
            st = tpx__bs_advance(c);
        } while (st == TPX_INPROGRESS && ++steps < 100000);
        if (st == TPX_OK) {
            /* Only a tokenless server fed a zero AUTH may accept. */
            EXPECT(!client_side && token == NULL);
        } else {
            EXPECT(is_conn_error(st));
        }
        EXPECT_EQ(tpx__bs_advance(c), st); /* sticky */
        tpx__bs_close(c);
        close(sv[1]);
    }
}

/* Handshake a socketpair in-process; 0 on success. */
static int pair_up(int sv[2], tpx_bs_conn_t **cli, tpx_bs_conn_t **srv)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return -1;
    if (tpx__bs_client_start_fd(sv[0], "k", test_deadline_ms(5000), cli) != TPX_OK ||
        tpx__bs_server_start(sv[1], "k", test_deadline_ms(5000), srv) != TPX_OK)
        return -1;
    tpx_status_t a, b;
    int steps = 0;
    do {
        a = tpx__bs_advance(*cli);
        b = tpx__bs_advance(*srv);
    } while ((a == TPX_INPROGRESS || b == TPX_INPROGRESS) && a >= 0 && b >= 0 && ++steps < 1000);
    return a == TPX_OK && b == TPX_OK && tpx__bs_authenticated(*cli) && tpx__bs_authenticated(*srv)
               ? 0
               : -1;
}

/* After the handshake: random frames written under the client's feet to
 * the server, which must deliver well-formed ones and reject the rest. */
static void fuzz_messages(long iters)
{
    static unsigned char b[2048], out[TPX_BS_MAX_MSG];
    for (long i = 0; i < iters; i++) {
        int sv[2];
        tpx_bs_conn_t *cli = NULL, *srv = NULL;
        EXPECT_EQ(pair_up(sv, &cli, &srv), 0);
        size_t n = rnd_stream(b, sizeof(b));
        if (n >= TPX_BS_HDR_SIZE && rnd_below(2)) { /* a valid user message first */
            uint32_t len = rnd_below((uint32_t)(n - TPX_BS_HDR_SIZE + 1));
            tpx__bs_hdr_encode((uint16_t)(TPX_BS_TYPE_USER + rnd_below(4)), len, b);
        }
        int fd = tpx__bs_fd(cli);
        if (n > 0 && write(fd, b, n) != (ssize_t)n)
            EXPECT(0);
        shutdown(fd, SHUT_WR);
        uint32_t cap = rnd_below(2) ? TPX_BS_MAX_MSG : rnd_below(64);
        tpx_status_t st;
        int steps = 0, got = 0;
        for (;;) {
            uint16_t type = 0;
            uint32_t len = 0xffffffffu;
            st = tpx__bs_recv(srv, &type, out, cap, &len);
            if (st == TPX_OK) {
                EXPECT(type >= TPX_BS_TYPE_USER && len <= cap);
                got++;
                continue;
            }
            if (st != TPX_INPROGRESS || ++steps > 100000)
                break;
        }
        EXPECT(is_conn_error(st));
        (void)got;
        tpx__bs_close(cli);
        tpx__bs_close(srv);
    }
}

/* API misuse that must be refused without touching the socket. */
static void misuse(void)
{
    int sv[2];
    tpx_bs_conn_t *cli = NULL, *srv = NULL;
    unsigned char b[16];
    uint16_t type;
    uint32_t len;
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    EXPECT_EQ(tpx__bs_server_start(sv[1], NULL, test_deadline_ms(1000), &srv), TPX_OK);
    EXPECT_EQ(tpx__bs_send(srv, TPX_BS_TYPE_USER, b, 1), TPX_ERR_INVALID_STATE);
    EXPECT_EQ(tpx__bs_recv(srv, &type, b, sizeof(b), &len), TPX_ERR_INVALID_STATE);
    EXPECT_EQ(tpx__bs_flush(srv), TPX_ERR_INVALID_STATE);
    tpx__bs_close(srv);
    close(sv[0]);

    EXPECT_EQ(pair_up(sv, &cli, &srv), 0);
    EXPECT_EQ(tpx__bs_send(cli, TPX_BS_MSG_WELCOME, b, 1), TPX_ERR_INVALID_ARG);
    EXPECT_EQ(tpx__bs_send(cli, TPX_BS_TYPE_USER, NULL, 1), TPX_ERR_INVALID_ARG);
    EXPECT_EQ(tpx__bs_send(cli, TPX_BS_TYPE_USER, b, TPX_BS_MAX_MSG + 1), TPX_ERR_INVALID_ARG);
    /* Fill the socket: sends queue up to TPX_BS_MAX_QUEUED, then refuse. */
    static unsigned char big[TPX_BS_MAX_MSG];
    tpx_status_t st;
    int queued = 0;
    while ((st = tpx__bs_send(cli, TPX_BS_TYPE_USER, big, sizeof(big))) == TPX_OK)
        queued++;
    EXPECT_EQ(st, TPX_ERR_NO_RESOURCE);
    EXPECT(queued >= (int)(TPX_BS_MAX_QUEUED / TPX_BS_MAX_MSG) - 1);
    EXPECT_EQ(tpx__bs_flush(cli), TPX_INPROGRESS);
    EXPECT(tpx__bs_events(cli) & POLLOUT);
    /* Drain on the other side; everything arrives intact. */
    int recvd = 0;
    uint64_t end = test_deadline_ms(5000);
    while (tpx__now_ns() < end && recvd < queued) {
        st = tpx__bs_recv(srv, &type, big, sizeof(big), &len);
        if (st == TPX_OK) {
            EXPECT_EQ(len, sizeof(big));
            recvd++;
        }
        EXPECT(st >= 0);
        (void)tpx__bs_flush(cli);
    }
    EXPECT_EQ(recvd, queued);
    EXPECT_EQ(tpx__bs_flush(cli), TPX_OK);
    /* A message over the receiver's cap is a protocol error, and sticky. */
    EXPECT_EQ(tpx__bs_send_wait(cli, TPX_BS_TYPE_USER, big, 100, test_deadline_ms(1000)), TPX_OK);
    EXPECT_EQ(tpx__bs_recv_wait(srv, TPX_BS_TYPE_USER, big, 99, &len, test_deadline_ms(1000)),
              TPX_ERR_PROTOCOL);
    EXPECT_EQ(tpx__bs_recv(srv, &type, big, sizeof(big), &len), TPX_ERR_PROTOCOL);
    /* recv_wait times out (not sticky) when nothing comes. */
    EXPECT_EQ(
        tpx__bs_recv_wait(cli, TPX_BS_TYPE_USER, big, sizeof(big), &len, test_deadline_ms(50)),
        TPX_ERR_TIMED_OUT);
    tpx__bs_close(cli);
    tpx__bs_close(srv);
}

int main(int argc, char **argv)
{
    alarm(55);
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 0) : tpx__now_ns();
    if (rng_state == 0)
        rng_state = 1;
    printf("seed %llu, %ld iterations\n", (unsigned long long)rng_state, iters);
    fflush(stdout);
    int fds0 = test_fd_count();
    tpx__log_level = TPX_LOG_NONE; /* every rejection would log a line */

    uint64_t t0 = tpx__now_ns();
    fuzz_hdr(iters);
    fuzz_handshake_payloads(iters);
    fuzz_info(iters);
    printf("decoders: %.0f ms\n", test_ms_since(t0));
    t0 = tpx__now_ns();
    fuzz_handshake_stream(iters, 0);
    fuzz_handshake_stream(iters / 5, 1);
    printf("handshake streams: %.0f ms\n", test_ms_since(t0));
    t0 = tpx__now_ns();
    fuzz_messages(iters / 5);
    printf("message streams: %.0f ms\n", test_ms_since(t0));
    misuse();

    EXPECT_EQ(test_fd_count(), fds0);
    TEST_DONE();
}
