/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_bs_conn.c - the bootstrap connection between two processes over
 * 127.0.0.1. One scenario per run: test_bs_conn <scenario>.
 *
 *   auth, noauth    handshake with/without token, then messages both ways
 *                   (INFO, 64 KiB, empty) and no warning logged anywhere
 *   wrongtoken      different tokens: both sides reject, with the reason
 *   tokenserver     token on the server only: both sides reject, saying so
 *   tokenclient     token on the client only: both sides reject, saying so
 *   replay          a recorded good AUTH replayed on a new connection fails
 *   garbage         garbage, wrong magic/version/type, oversized lengths,
 *                   stalls: each dropped within its deadline, good client
 *                   served meanwhile; a hostile server is rejected by a client
 *   slowloris       200 half-open connections; good clients still served
 *   refused         nothing listening: retries then TPX_ERR_CONN_REFUSED at
 *                   the deadline; a server that starts late is reached
 *   busy            port in use -> TPX_ERR_ADDR_IN_USE, logged
 *   ipv6            ::1, dual-stack any, "localhost"
 */
#include <stdint.h>

#include "bootstrap/sha256.h"
#include "bs_test.h"

#define MSG_BIG   17
#define MSG_EMPTY 18

static int g_port;
static const char *g_token; /* the client's token in two-process scenarios */

/* ---- the good exchange after a handshake ---------------------------------------- */

static void make_info(tpx_bs_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->engine_id = 0x0123456789abcdefull;
    info->gpu = 3;
    info->chunk_bytes = 512 * 1024;
    info->nhandles = 8;
    info->window = 16;
    snprintf(info->plugin, sizeof(info->plugin), "builtin");
    for (int i = 0; i < info->nhandles; i++)
        memset(info->handles[i], 0x40 + i, TPX_BS_HANDLE_SIZE);
}

static unsigned char pattern(uint32_t i)
{
    return (unsigned char)(i * 2654435761u >> 24);
}

/* Server: receive INFO and an empty message, send a 64 KiB message. */
static int server_exchange(tpx_bs_conn_t *c)
{
    int bad = 0;
    static unsigned char buf[TPX_BS_MAX_MSG];
    uint32_t len = 0;
    tpx_bs_info_t got, want;
    make_info(&want);
    bad |= (tpx__bs_recv_wait(c, TPX_BS_MSG_INFO, buf, sizeof(buf), &len, test_deadline_ms(5000)) !=
            TPX_OK)
           << 0;
    bad |= (tpx__bs_info_decode(buf, len, &got) != TPX_OK) << 1;
    bad |= (memcmp(&got, &want, sizeof(got)) != 0) << 2;
    bad |=
        (tpx__bs_recv_wait(c, MSG_EMPTY, buf, sizeof(buf), &len, test_deadline_ms(5000)) != TPX_OK)
        << 3;
    bad |= (len != 0) << 4;
    for (uint32_t i = 0; i < TPX_BS_MAX_MSG; i++)
        buf[i] = pattern(i);
    bad |= (tpx__bs_send_wait(c, MSG_BIG, buf, TPX_BS_MAX_MSG, test_deadline_ms(5000)) != TPX_OK)
           << 5;
    /* The client closes after reading: a clean EOF, not a warning. */
    uint16_t type;
    tpx_status_t st;
    uint64_t end = test_deadline_ms(5000);
    while ((st = tpx__bs_recv(c, &type, buf, sizeof(buf), &len)) == TPX_INPROGRESS &&
           tpx__now_ns() < end) {
        struct pollfd pfd = {.fd = tpx__bs_fd(c), .events = POLLIN};
        poll(&pfd, 1, 100);
    }
    bad |= (st != TPX_ERR_CONN_RESET) << 6;
    if (bad)
        fprintf(stderr, "bad=0x%x\n", bad);
    if (bad)
        fprintf(stderr, "server exchange with %s failed (last recv: %s)\n", tpx__bs_peer_str(c),
                tpx_status_string(st));
    return bad;
}

static int client_exchange(tpx_bs_conn_t *c)
{
    int bad = 0;
    static unsigned char buf[TPX_BS_MAX_MSG];
    tpx_bs_info_t info;
    make_info(&info);
    uint32_t len = 0;
    bad |= tpx__bs_info_encode(&info, buf, sizeof(buf), &len) != TPX_OK;
    bad |= len != TPX_BS_INFO_SIZE(8);
    bad |= tpx__bs_send_wait(c, TPX_BS_MSG_INFO, buf, len, test_deadline_ms(5000)) != TPX_OK;
    bad |= tpx__bs_send_wait(c, MSG_EMPTY, NULL, 0, test_deadline_ms(5000)) != TPX_OK;
    memset(buf, 0, sizeof(buf));
    bad |= tpx__bs_recv_wait(c, MSG_BIG, buf, sizeof(buf), &len, test_deadline_ms(5000)) != TPX_OK;
    bad |= len != TPX_BS_MAX_MSG;
    for (uint32_t i = 0; i < TPX_BS_MAX_MSG && !bad; i++)
        bad |= buf[i] != pattern(i);
    if (bad)
        fprintf(stderr, "client exchange with %s failed\n", tpx__bs_peer_str(c));
    return bad;
}

/* A real client: handshake with g_token, then the exchange if expect_ok. */
typedef struct {
    const char *host;
    int expect_ok;
    tpx_status_t expect_st; /* when !expect_ok; 0 = any error */
    const char *expect_log; /* substring the client must log, or NULL */
    int deadline_ms;
} client_args_t;

static int client_main(void *arg)
{
    client_args_t *a = arg;
    test_log_init();
    log_capture_begin();
    int fds0 = test_fd_count();
    tpx_bs_conn_t *c = NULL;
    tpx_status_t st =
        tpx__bs_client_start(a->host ? a->host : "127.0.0.1", g_port, g_token,
                             test_deadline_ms(a->deadline_ms ? a->deadline_ms : 5000), &c);
    if (st == TPX_OK)
        st = tpx__bs_handshake_wait(c);
    if (a->expect_ok) {
        EXPECT_EQ(st, TPX_OK);
        if (st == TPX_OK) {
            EXPECT_EQ(tpx__bs_authenticated(c), g_token != NULL);
            EXPECT_EQ(client_exchange(c), 0);
        }
    } else {
        EXPECT(st < 0);
        if (a->expect_st != 0)
            EXPECT_EQ(st, a->expect_st);
        /* Sticky, and not logged twice. */
        if (c != NULL)
            EXPECT_EQ(tpx__bs_advance(c), st);
    }
    tpx__bs_close(c);
    EXPECT_EQ(test_fd_count(), fds0);
    char *log = log_capture_end();
    if (a->expect_ok)
        EXPECT_EQ(count_lines_with(log, " WARN "), 0);
    else
        EXPECT_EQ(count_lines_with(log, " WARN "), 1);
    if (a->expect_log)
        EXPECT(strstr(log, a->expect_log) != NULL);
    free(log);
    return test_failed() != 0;
}

/* Listen on an ephemeral loopback port; sets g_port. */
static int listen_any(const char *addr)
{
    int lfd = -1;
    tpx_status_t st = tpx__bs_listen(addr, 0, &lfd, &g_port);
    if (st != TPX_OK) {
        fprintf(stderr, "listen failed: %s\n", tpx_status_string(st));
        exit(1);
    }
    return lfd;
}

/* One server connection against one real client; checks both sides. */
static void pair(const char *server_token, const char *client_token, int expect_ok,
                 tpx_status_t client_st, const char *client_log, tpx_status_t server_st,
                 const char *server_log)
{
    int fds0 = test_fd_count();
    int lfd = listen_any("127.0.0.1");
    g_token = client_token;
    client_args_t ca = {.expect_ok = expect_ok, .expect_st = client_st, .expect_log = client_log};
    pid_t pid = spawn(client_main, &ca); /* before the capture: the child has its own */
    log_capture_begin();
    served_t r = {0};
    int n = serve(lfd, server_token, 1, 5000, 20000, expect_ok ? server_exchange : NULL, &r);
    char *log = log_capture_end();
    EXPECT_EQ(n, 1);
    if (expect_ok) {
        EXPECT_EQ(r.st, TPX_OK);
        EXPECT_EQ(r.app_rc, 0);
        EXPECT_EQ(r.authenticated, server_token != NULL);
        EXPECT_EQ(count_lines_with(log, " WARN "), 0);
    } else {
        EXPECT(r.st < 0);
        if (server_st != 0)
            EXPECT_EQ(r.st, server_st);
        EXPECT_EQ(count_lines_with(log, " WARN "), 1);
        EXPECT(r.ms < 2000);
    }
    if (server_log)
        EXPECT(strstr(log, server_log) != NULL);
    free(log);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
    EXPECT_EQ(test_fd_count(), fds0);
}

/* ---- replay -------------------------------------------------------------------- */

/* A raw client that knows the token: completes one handshake by hand,
 * records its AUTH frame, then on a second connection sends the same
 * HELLO and replays that AUTH against a fresh challenge. */
static int replay_main(void *arg)
{
    const char *token = arg;
    uint8_t cn[TPX_BS_NONCE_SIZE], sn1[TPX_BS_NONCE_SIZE];
    memset(cn, 0x5a, sizeof(cn));
    tpx_bs_hello_t hello = {.flags = TPX_BS_FLAG_AUTH};
    memcpy(hello.nonce, cn, sizeof(cn));
    unsigned char hb[TPX_BS_HELLO_SIZE], buf[256], auth_frame[TPX_BS_HDR_SIZE + TPX_BS_AUTH_SIZE];
    tpx__bs_hello_encode(&hello, hb);
    tpx_bs_hdr_t h;
    tpx_bs_challenge_t ch;

    /* 1: a good handshake, recorded. */
    int fd = raw_connect(g_port);
    EXPECT(fd >= 0);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_HELLO, hb, sizeof(hb)), 0);
    EXPECT_EQ(raw_recv_frame(fd, &h, buf, sizeof(buf), 3000), 0);
    EXPECT_EQ(h.type, TPX_BS_MSG_CHALLENGE);
    EXPECT_EQ(tpx__bs_challenge_decode(buf, h.len, &ch), TPX_OK);
    uint8_t mac[TPX_BS_MAC_SIZE];
    tpx__bs_handshake_mac(token, TPX_BS_MAC_SERVER, cn, ch.nonce, mac);
    EXPECT(tpx__ct_equal(mac, ch.mac, sizeof(mac)));
    memcpy(sn1, ch.nonce, sizeof(sn1));
    tpx_bs_auth_t auth;
    tpx__bs_handshake_mac(token, TPX_BS_MAC_CLIENT, ch.nonce, cn, auth.mac);
    tpx__bs_hdr_encode(TPX_BS_MSG_AUTH, TPX_BS_AUTH_SIZE, auth_frame);
    tpx__bs_auth_encode(&auth, auth_frame + TPX_BS_HDR_SIZE);
    EXPECT_EQ(raw_write(fd, auth_frame, sizeof(auth_frame)), 0);
    EXPECT_EQ(raw_recv_frame(fd, &h, buf, sizeof(buf), 3000), 0);
    EXPECT_EQ(h.type, TPX_BS_MSG_WELCOME);
    close(fd);

    /* 2: same HELLO, the recorded AUTH replayed. */
    fd = raw_connect(g_port);
    EXPECT(fd >= 0);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_HELLO, hb, sizeof(hb)), 0);
    EXPECT_EQ(raw_recv_frame(fd, &h, buf, sizeof(buf), 3000), 0);
    EXPECT_EQ(h.type, TPX_BS_MSG_CHALLENGE);
    EXPECT_EQ(tpx__bs_challenge_decode(buf, h.len, &ch), TPX_OK);
    EXPECT(memcmp(ch.nonce, sn1, sizeof(sn1)) != 0); /* a fresh server nonce */
    EXPECT_EQ(raw_write(fd, auth_frame, sizeof(auth_frame)), 0);
    double ms = raw_wait_eof(fd, 3000); /* dropped, no WELCOME */
    EXPECT(ms >= 0);
    close(fd);

    /* 3: the server's own CHALLENGE mac replayed as an AUTH (reflection). */
    fd = raw_connect(g_port);
    EXPECT(fd >= 0);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_HELLO, hb, sizeof(hb)), 0);
    EXPECT_EQ(raw_recv_frame(fd, &h, buf, sizeof(buf), 3000), 0);
    EXPECT_EQ(tpx__bs_challenge_decode(buf, h.len, &ch), TPX_OK);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_AUTH, ch.mac, TPX_BS_MAC_SIZE), 0);
    EXPECT(raw_wait_eof(fd, 3000) >= 0);
    close(fd);
    return test_failed() != 0;
}

static void scenario_replay(void)
{
    const char *token = "replay-secret";
    int lfd = listen_any("127.0.0.1");
    pid_t pid = spawn(replay_main, (void *)token);
    log_capture_begin();
    served_t r[3];
    memset(r, 0, sizeof(r));
    int n = serve(lfd, token, 3, 5000, 20000, NULL, r);
    char *log = log_capture_end();
    EXPECT_EQ(n, 3);
    EXPECT_EQ(r[0].st, TPX_OK);
    EXPECT_EQ(r[0].authenticated, 1);
    EXPECT_EQ(r[1].st, TPX_ERR_PROTOCOL);
    EXPECT_EQ(r[2].st, TPX_ERR_PROTOCOL);
    EXPECT_EQ(count_lines_with(log, "authentication failed"), 2);
    free(log);
    EXPECT_EQ(reap(pid), 0);

    /* A real client still gets in afterwards. */
    g_token = token;
    client_args_t ca = {.expect_ok = 1};
    pid = spawn(client_main, &ca);
    n = serve(lfd, token, 1, 5000, 20000, server_exchange, r);
    EXPECT_EQ(n, 1);
    EXPECT_EQ(r[0].st, TPX_OK);
    EXPECT_EQ(r[0].app_rc, 0);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
}

/* ---- a raw client that skips the server-mac check and sends a bad AUTH --------- */

static int bad_auth_main(void *arg)
{
    const char *wrong = arg;
    tpx_bs_hello_t hello = {.flags = TPX_BS_FLAG_AUTH};
    tpx__random_bytes(hello.nonce, sizeof(hello.nonce));
    unsigned char hb[TPX_BS_HELLO_SIZE], buf[256];
    tpx__bs_hello_encode(&hello, hb);
    tpx_bs_hdr_t h;
    tpx_bs_challenge_t ch;
    int fd = raw_connect(g_port);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_HELLO, hb, sizeof(hb)), 0);
    EXPECT_EQ(raw_recv_frame(fd, &h, buf, sizeof(buf), 3000), 0);
    EXPECT_EQ(tpx__bs_challenge_decode(buf, h.len, &ch), TPX_OK);
    tpx_bs_auth_t auth;
    tpx__bs_handshake_mac(wrong, TPX_BS_MAC_CLIENT, ch.nonce, hello.nonce, auth.mac);
    tpx__bs_auth_encode(&auth, buf);
    EXPECT_EQ(raw_send_frame(fd, TPX_BS_MSG_AUTH, buf, TPX_BS_AUTH_SIZE), 0);
    EXPECT(raw_wait_eof(fd, 3000) >= 0);
    close(fd);
    return test_failed() != 0;
}

static void scenario_wrongtoken(void)
{
    /* Real client and server: the client catches the server's mac. */
    pair("alpha", "beta", 0, TPX_ERR_PROTOCOL, "authentication failed", 0,
         "closed the connection during the handshake");
    /* A client that does not check and answers with a wrong mac: the server
     * catches it. */
    int lfd = listen_any("127.0.0.1");
    pid_t pid = spawn(bad_auth_main, (void *)"beta");
    log_capture_begin();
    served_t r = {0};
    EXPECT_EQ(serve(lfd, "alpha", 1, 5000, 20000, NULL, &r), 1);
    char *log = log_capture_end();
    EXPECT_EQ(r.st, TPX_ERR_PROTOCOL);
    EXPECT(strstr(log, "authentication failed") != NULL);
    EXPECT_EQ(count_lines_with(log, " WARN "), 1);
    free(log);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
}

/* ---- garbage and stalls ----------------------------------------------------------- */

enum {
    G_RANDOM,     /* 64 random bytes */
    G_MAGIC,      /* a header with a wrong magic */
    G_VERSION,    /* a version this tpx does not speak */
    G_HUGE,       /* HELLO with length 0xffffffff */
    G_BIGHELLO,   /* HELLO with length 1000: over the exact size */
    G_SHORTHELLO, /* HELLO with 35 bytes */
    G_WRONGTYPE,  /* AUTH first */
    G_BADFLAGS,   /* HELLO with unknown flag bits */
    G_HTTP,       /* "GET / HTTP/1.1" */
    G_CLOSE,      /* connect and close at once */
    G_STALL,      /* connect, send nothing */
    G_HALFHDR,    /* 5 bytes of a header, then nothing */
    G_HALFHELLO,  /* header + 10 payload bytes, then nothing */
    G_NOAUTH,     /* good HELLO, then never AUTH */
    G__N
};
static const int g_is_stall[G__N] = {
    [G_STALL] = 1, [G_HALFHDR] = 1, [G_HALFHELLO] = 1, [G_NOAUTH] = 1};
#define GARBAGE_DEADLINE_MS 1000

static int garbage_main(void *arg)
{
    int fds[G__N];
    uint64_t t0 = tpx__now_ns();
    for (int g = 0; g < G__N; g++) {
        int fd = fds[g] = raw_connect(g_port);
        EXPECT(fd >= 0);
        unsigned char b[1100], h[TPX_BS_HDR_SIZE];
        memset(b, 0, sizeof(b));
        tpx_bs_hello_t hello = {.flags = 0}; /* the server has no token */
        tpx__bs_hello_encode(&hello, b);
        switch (g) {
        case G_RANDOM:
            tpx__random_bytes(b, 64);
            b[0] = 0; /* never "T" by chance */
            raw_write(fd, b, 64);
            break;
        case G_MAGIC:
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, h);
            h[3] ^= 1;
            raw_write(fd, h, sizeof(h));
            raw_write(fd, b, TPX_BS_HELLO_SIZE);
            break;
        case G_VERSION:
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, h);
            h[5] = TPX_BS_VERSION + 1;
            raw_write(fd, h, sizeof(h));
            raw_write(fd, b, TPX_BS_HELLO_SIZE);
            break;
        case G_HUGE:
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, 0xffffffffu, h);
            raw_write(fd, h, sizeof(h));
            break;
        case G_BIGHELLO:
            raw_send_frame(fd, TPX_BS_MSG_HELLO, b, 1000);
            break;
        case G_SHORTHELLO:
            raw_send_frame(fd, TPX_BS_MSG_HELLO, b, 35);
            break;
        case G_WRONGTYPE:
            raw_send_frame(fd, TPX_BS_MSG_AUTH, b, TPX_BS_AUTH_SIZE);
            break;
        case G_BADFLAGS:
            b[TPX_BS_NONCE_SIZE] = 0x80;
            raw_send_frame(fd, TPX_BS_MSG_HELLO, b, TPX_BS_HELLO_SIZE);
            break;
        case G_HTTP:
            raw_write(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
            break;
        case G_CLOSE:
            close(fd);
            fds[g] = -1;
            break;
        case G_STALL:
            break;
        case G_HALFHDR:
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, h);
            raw_write(fd, h, 5);
            break;
        case G_HALFHELLO:
            tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, h);
            raw_write(fd, h, sizeof(h));
            raw_write(fd, b, 10);
            break;
        case G_NOAUTH:
            raw_send_frame(fd, TPX_BS_MSG_HELLO, b, TPX_BS_HELLO_SIZE);
            break;
        }
    }
    /* A good client while all of that is pending. */
    client_args_t ca = {.expect_ok = 1};
    int rc = client_main(&ca);
    EXPECT_EQ(rc, 0);
    double good_ms = test_ms_since(t0);
    EXPECT(good_ms < GARBAGE_DEADLINE_MS); /* served before the stallers were dropped */
    /* Every hostile connection is closed by the server (the server side
     * checks how soon); stalls no later than their deadline. */
    for (int g = 0; g < G__N; g++) {
        if (fds[g] < 0)
            continue;
        EXPECT(raw_wait_eof(fds[g], 5000) >= 0);
        double total = test_ms_since(t0);
        if (g_is_stall[g])
            EXPECT(total >= GARBAGE_DEADLINE_MS * 0.9 && total < GARBAGE_DEADLINE_MS + 2000);
        close(fds[g]);
    }
    return test_failed() != 0;
}

/* A raw server that misbehaves towards a real client. */
enum { S_GARBAGE, S_STALL, S_HUGE, S_NOMAC, S__N };
static int hostile_server_main(void *arg)
{
    int lfd = *(int *)arg;
    for (int s = 0; s < S__N; s++) {
        int fd;
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        poll(&pfd, 1, 5000);
        EXPECT_EQ(tpx__bs_accept(lfd, &fd), TPX_OK);
        unsigned char b[256], h[TPX_BS_HDR_SIZE];
        tpx_bs_hdr_t hdr;
        EXPECT_EQ(raw_recv_frame(fd, &hdr, b, sizeof(b), 3000), 0); /* HELLO */
        memset(b, 0, sizeof(b));
        switch (s) {
        case S_GARBAGE:
            raw_write(fd, "\x01\x02garbage garbage garbage", 25);
            break;
        case S_STALL:
            break;
        case S_HUGE:
            tpx__bs_hdr_encode(TPX_BS_MSG_CHALLENGE, TPX_BS_MAX_MSG, h);
            raw_write(fd, h, sizeof(h));
            break;
        case S_NOMAC: /* claims a token, sends a zero mac */
            b[TPX_BS_CHALLENGE_SIZE - 1] = TPX_BS_FLAG_AUTH;
            raw_send_frame(fd, TPX_BS_MSG_CHALLENGE, b, TPX_BS_CHALLENGE_SIZE);
            break;
        }
        raw_wait_eof(fd, 5000);
        close(fd);
    }
    return test_failed() != 0;
}

static void scenario_garbage(void)
{
    int lfd = listen_any("127.0.0.1");
    pid_t pid = spawn(garbage_main, NULL);
    served_t r[G__N + 1];
    memset(r, 0, sizeof(r));
    log_capture_begin();
    int n = serve(lfd, NULL, G__N + 1, GARBAGE_DEADLINE_MS, 20000, server_exchange, r);
    char *log = log_capture_end();
    EXPECT_EQ(n, G__N + 1);
    int ok = 0, timed_out = 0;
    for (int i = 0; i < n; i++) {
        printf("server: connection %2d: %-45s after %4.0f ms\n", i, tpx_status_string(r[i].st),
               r[i].ms);
        ok += r[i].st == TPX_OK;
        timed_out += r[i].st == TPX_ERR_TIMED_OUT;
        if (r[i].st == TPX_ERR_TIMED_OUT) /* stalls: dropped at their deadline */
            EXPECT(r[i].ms >= GARBAGE_DEADLINE_MS * 0.99 && r[i].ms < GARBAGE_DEADLINE_MS + 1000);
        else /* bad bytes: dropped as soon as they arrive */
            EXPECT(r[i].ms < 500);
        if (r[i].st == TPX_OK)
            EXPECT_EQ(r[i].app_rc, 0);
    }
    EXPECT_EQ(ok, 1);
    EXPECT_EQ(timed_out, 4);
    EXPECT_EQ(count_lines_with(log, " WARN "), G__N); /* one line per dropped peer */
    EXPECT_EQ(count_lines_with(log, "did not complete the handshake"), 4);
    EXPECT(strstr(log, "bad magic") != NULL);
    EXPECT(strstr(log, "unsupported bootstrap version") != NULL);
    EXPECT(strstr(log, "length over limit") != NULL);
    free(log);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);

    /* The other direction: a real client against a hostile server. */
    lfd = listen_any("127.0.0.1");
    pid = spawn(hostile_server_main, &lfd);
    static const tpx_status_t want[S__N] = {TPX_ERR_PROTOCOL, TPX_ERR_TIMED_OUT, TPX_ERR_PROTOCOL,
                                            TPX_ERR_PROTOCOL};
    for (int s = 0; s < S__N; s++) {
        g_token = s == S_NOMAC ? "tok" : NULL;
        log_capture_begin();
        tpx_bs_conn_t *c = NULL;
        uint64_t t0 = tpx__now_ns();
        tpx_status_t st =
            tpx__bs_client_start("127.0.0.1", g_port, g_token, test_deadline_ms(800), &c);
        if (st == TPX_OK)
            st = tpx__bs_handshake_wait(c);
        double ms = test_ms_since(t0);
        tpx__bs_close(c);
        char *l = log_capture_end();
        printf("hostile server case %d: %s after %.0f ms\n", s, tpx_status_string(st), ms);
        EXPECT_EQ(st, want[s]);
        EXPECT(ms < (s == S_STALL ? 1800 : 500));
        EXPECT_EQ(count_lines_with(l, " WARN "), 1);
        free(l);
    }
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
}

/* ---- slowloris -------------------------------------------------------------------- */

#define SLOW_N    200
#define SLOW_GOOD 5

static int slowloris_main(void *arg)
{
    static int fds[SLOW_N];
    uint64_t t0 = tpx__now_ns();
    for (int i = 0; i < SLOW_N; i++) {
        fds[i] = raw_connect(g_port);
        EXPECT(fds[i] >= 0);
        unsigned char h[TPX_BS_HDR_SIZE];
        tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, h);
        if (fds[i] >= 0)
            raw_write(fds[i], h, (size_t)(i % TPX_BS_HDR_SIZE)); /* 0..11 bytes */
    }
    for (int i = 0; i < SLOW_GOOD; i++) {
        client_args_t ca = {.expect_ok = 1};
        EXPECT_EQ(client_main(&ca), 0);
    }
    double good_ms = test_ms_since(t0);
    printf("slowloris: %d good clients served in %.0f ms with %d stalled connections open\n",
           SLOW_GOOD, good_ms, SLOW_N);
    EXPECT(good_ms < 2400); /* before the first staller's deadline (2500 ms) */
    for (int i = 0; i < SLOW_N; i++) {
        if (fds[i] < 0)
            continue;
        EXPECT(raw_wait_eof(fds[i], 5000) >= 0);
        close(fds[i]);
    }
    return test_failed() != 0;
}

static void scenario_slowloris(void)
{
    int lfd = listen_any("127.0.0.1");
    pid_t pid = spawn(slowloris_main, NULL);
    static served_t r[SLOW_N + SLOW_GOOD];
    tpx__log_level = TPX_LOG_ERROR; /* 200 "dropped" lines are expected */
    int n = serve(lfd, NULL, SLOW_N + SLOW_GOOD, 2500, 30000, server_exchange, r);
    test_log_init();
    EXPECT_EQ(n, SLOW_N + SLOW_GOOD);
    int ok = 0, timed_out = 0;
    for (int i = 0; i < n; i++) {
        ok += r[i].st == TPX_OK;
        timed_out += r[i].st == TPX_ERR_TIMED_OUT;
    }
    EXPECT_EQ(ok, SLOW_GOOD);
    EXPECT_EQ(timed_out, SLOW_N);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
}

/* ---- refused / late server --------------------------------------------------------- */

static int late_server_main(void *arg)
{
    usleep(300 * 1000);
    int lfd = -1, port = 0;
    EXPECT_EQ(tpx__bs_listen("127.0.0.1", g_port, &lfd, &port), TPX_OK);
    served_t r = {0};
    EXPECT_EQ(serve(lfd, "late", 1, 5000, 10000, server_exchange, &r), 1);
    EXPECT_EQ(r.st, TPX_OK);
    EXPECT_EQ(r.app_rc, 0);
    close(lfd);
    return test_failed() != 0;
}

/* A loopback port that is free now and stays free for a while (see
 * test_free_port: the late server found a port from bind(0) taken). */
static int free_port(void)
{
    int p = test_free_port();
    if (p > 0)
        return p;
    int lfd = listen_any("127.0.0.1"); /* no room below the ephemeral range */
    close(lfd);
    return g_port;
}

static void scenario_refused(void)
{
    g_port = free_port();
    log_capture_begin();
    tpx_bs_conn_t *c = NULL;
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = tpx__bs_client_start("127.0.0.1", g_port, NULL, test_deadline_ms(400), &c);
    EXPECT_EQ(st, TPX_OK);
    if (st == TPX_OK)
        st = tpx__bs_handshake_wait(c);
    double ms = test_ms_since(t0);
    tpx__bs_close(c);
    char *log = log_capture_end();
    EXPECT_EQ(st, TPX_ERR_CONN_REFUSED);
    EXPECT(ms >= 390 && ms < 1500);
    EXPECT(strstr(log, "could not connect to 127.0.0.1:") != NULL);
    EXPECT_EQ(count_lines_with(log, " WARN "), 1);
    free(log);

    /* Client first, server 300 ms later: the retries reach it. */
    g_port = free_port();
    pid_t pid = spawn(late_server_main, NULL);
    g_token = "late";
    client_args_t ca = {.expect_ok = 1, .deadline_ms = 5000};
    EXPECT_EQ(client_main(&ca), 0);
    EXPECT_EQ(reap(pid), 0);

    /* Bad arguments. */
    tpx__log_level = TPX_LOG_NONE;
    EXPECT_EQ(tpx__bs_client_start("127.0.0.1", 0, NULL, test_deadline_ms(100), &c),
              TPX_ERR_INVALID_ARG);
    EXPECT_EQ(tpx__bs_client_start("", 1, NULL, test_deadline_ms(100), &c), TPX_ERR_INVALID_ARG);
    test_log_init();
}

/* ---- busy ------------------------------------------------------------------------------ */

static void scenario_busy(void)
{
    int fds0 = test_fd_count();
    int lfd = -1, port = 0, lfd2 = -1, port2 = -1;
    EXPECT_EQ(tpx__bs_listen(NULL, 0, &lfd, &port), TPX_OK);
    EXPECT(port > 0);
    char expect[64];
    snprintf(expect, sizeof(expect), "bootstrap port %d is busy", port);
    const char *addrs[] = {NULL, "", "127.0.0.1", "0.0.0.0", "localhost"};
    for (size_t i = 0; i < sizeof(addrs) / sizeof(addrs[0]); i++) {
        log_capture_begin();
        EXPECT_EQ(tpx__bs_listen(addrs[i], port, &lfd2, &port2), TPX_ERR_ADDR_IN_USE);
        char *log = log_capture_end();
        EXPECT(strstr(log, expect) != NULL);
        EXPECT_EQ(count_lines_with(log, " ERROR "), 1);
        free(log);
    }
    EXPECT_EQ(lfd2, -1);
    EXPECT_EQ(port2, -1);
    close(lfd);
    /* Free again: the same port can be taken (SO_REUSEADDR, no TIME_WAIT issue). */
    EXPECT_EQ(tpx__bs_listen("127.0.0.1", port, &lfd, &port2), TPX_OK);
    EXPECT_EQ(port2, port);
    close(lfd);
    tpx__log_level = TPX_LOG_NONE;
    EXPECT_EQ(tpx__bs_listen(NULL, -1, &lfd, NULL), TPX_ERR_INVALID_ARG);
    EXPECT_EQ(tpx__bs_listen(NULL, 65536, &lfd, NULL), TPX_ERR_INVALID_ARG);
    test_log_init();
    EXPECT_EQ(test_fd_count(), fds0);
}

/* ---- ipv6 / dual stack / hostname --------------------------------------------------------- */

static void one_pair_on(const char *listen_addr, const char *connect_host)
{
    int lfd = -1;
    if (tpx__bs_listen(listen_addr, 0, &lfd, &g_port) != TPX_OK) {
        printf("skip: cannot listen on %s\n", listen_addr ? listen_addr : "(any)");
        return;
    }
    g_token = "v6";
    client_args_t ca = {.host = connect_host, .expect_ok = 1};
    pid_t pid = spawn(client_main, &ca);
    served_t r = {0};
    EXPECT_EQ(serve(lfd, "v6", 1, 5000, 20000, server_exchange, &r), 1);
    EXPECT_EQ(r.st, TPX_OK);
    EXPECT_EQ(r.app_rc, 0);
    if (strcmp(connect_host, "127.0.0.1") == 0) /* IPv4-mapped shown as IPv4 */
        EXPECT(strncmp(r.peer, "127.0.0.1:", 10) == 0);
    if (strcmp(connect_host, "::1") == 0)
        EXPECT(strncmp(r.peer, "[::1]:", 6) == 0);
    EXPECT_EQ(reap(pid), 0);
    close(lfd);
    printf("%s <- %s: ok\n", listen_addr ? listen_addr : "(any)", connect_host);
}

static int have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof(a));
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

static void scenario_ipv6(void)
{
    one_pair_on(NULL, "127.0.0.1");
    one_pair_on(NULL, "localhost");
    one_pair_on("localhost", "localhost");
    if (have_ipv6_loopback()) {
        one_pair_on("::1", "::1");
        one_pair_on(NULL, "::1");
    } else {
        printf("skip: no IPv6 loopback here\n");
    }
}

int main(int argc, char **argv)
{
    alarm(55);
    test_log_init();
    const char *s = argc > 1 ? argv[1] : "";
    if (strcmp(s, "auth") == 0)
        pair("s3cret", "s3cret", 1, 0, NULL, 0, NULL);
    else if (strcmp(s, "noauth") == 0)
        pair(NULL, NULL, 1, 0, NULL, 0, NULL);
    else if (strcmp(s, "wrongtoken") == 0)
        scenario_wrongtoken();
    else if (strcmp(s, "tokenserver") == 0)
        pair("s3cret", NULL, 0, TPX_ERR_PROTOCOL,
             "requires authentication (TPX_AUTH_TOKEN set there, not here?)", TPX_ERR_PROTOCOL,
             "did not authenticate (TPX_AUTH_TOKEN set here, not there?)");
    else if (strcmp(s, "tokenclient") == 0)
        pair(NULL, "s3cret", 0, TPX_ERR_PROTOCOL,
             "did not authenticate (TPX_AUTH_TOKEN set here, not there?)", TPX_ERR_PROTOCOL,
             "requires authentication (TPX_AUTH_TOKEN set there, not here?)");
    else if (strcmp(s, "replay") == 0)
        scenario_replay();
    else if (strcmp(s, "garbage") == 0)
        scenario_garbage();
    else if (strcmp(s, "slowloris") == 0)
        scenario_slowloris();
    else if (strcmp(s, "refused") == 0)
        scenario_refused();
    else if (strcmp(s, "busy") == 0)
        scenario_busy();
    else if (strcmp(s, "ipv6") == 0)
        scenario_ipv6();
    else {
        fprintf(stderr,
                "usage: %s auth|noauth|wrongtoken|tokenserver|tokenclient|replay|garbage|"
                "slowloris|refused|busy|ipv6\n",
                argv[0]);
        return 2;
    }
    TEST_DONE();
}
