/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_seeds.c - writes the seed corpus of the fuzz targets: valid
 * messages of every format, made by the library's own encoders, each
 * behind its target's selector byte (fuzz.h).
 *
 *   fuzz_seeds DIR      writes DIR/bs/, DIR/wire/, DIR/sock/, DIR/reg/ (created)
 *
 * Generated at build time, so the seeds always match the current formats.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bootstrap/bootstrap.h"
#include "engine/wire.h"
#include "fuzz.h"
#include "plugin/sock/sock_wire.h"
#include "registry/registry.h"
#include "tpx/registry.h"

static const char *g_dir;
static int g_count;

/* A seed being built: selector byte, then the pieces appended. */
typedef struct {
    unsigned char b[8192];
    size_t n;
} seed_t;

static void seed_start(seed_t *s, uint8_t sel)
{
    s->b[0] = sel;
    s->n = 1;
}

static void seed_add(seed_t *s, const void *p, size_t n)
{
    if (s->n + n > sizeof(s->b)) {
        fprintf(stderr, "fuzz_seeds: seed too large\n");
        exit(1);
    }
    memcpy(s->b + s->n, p, n);
    s->n += n;
}

static void seed_frame(seed_t *s, uint16_t type, const void *p, uint32_t n)
{
    unsigned char h[TPX_BS_HDR_SIZE];
    tpx__bs_hdr_encode(type, n, h);
    seed_add(s, h, sizeof(h));
    if (n > 0)
        seed_add(s, p, n);
}

static void seed_write(const seed_t *s, const char *target, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", g_dir, target);
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", g_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(s->b, 1, s->n, f) != s->n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    g_count++;
}

static void must(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_seeds: %s: the encoder and decoder disagree\n", what);
        exit(1);
    }
}

/* ---- bootstrap ---------------------------------------------------------------- */

static void make_info(tpx_bs_info_t *info, int nhandles)
{
    memset(info, 0, sizeof(*info));
    info->engine_id = 0x0123456789abcdefull;
    info->gpu = nhandles > 1 ? 3 : -1;
    info->chunk_bytes = 512 * 1024;
    info->nhandles = (uint16_t)nhandles;
    info->window = 16;
    snprintf(info->plugin, sizeof(info->plugin), "builtin");
    snprintf(info->name, sizeof(info->name), "host-%d", nhandles);
    for (int i = 0; i < nhandles; i++)
        for (int j = 0; j < TPX_BS_HANDLE_SIZE; j++)
            info->handles[i][j] = (unsigned char)(i * 7 + j);
}

static void seeds_bs(void)
{
    static unsigned char buf[TPX_BS_INFO_MAX_SIZE];
    static tpx_bs_info_t info, back;
    seed_t s;
    uint32_t len;
    unsigned char hdr[TPX_BS_HDR_SIZE];

    seed_start(&s, TPX_FUZZ_BS_HDR);
    tpx__bs_hdr_encode(TPX_BS_MSG_HELLO, TPX_BS_HELLO_SIZE, hdr);
    seed_add(&s, hdr, sizeof(hdr));
    seed_write(&s, "bs", "hdr_hello");
    seed_start(&s, TPX_FUZZ_BS_HDR);
    tpx__bs_hdr_encode(TPX_BS_MSG_INFO, TPX_BS_INFO_SIZE(4), hdr);
    seed_add(&s, hdr, sizeof(hdr));
    seed_add(&s, (const unsigned char[]){0, 0, 0x10, 0}, 4); /* max_len 4096: too long */
    seed_write(&s, "bs", "hdr_info_max");

    tpx_bs_hello_t hello = {.flags = 0};
    for (int i = 0; i < TPX_BS_NONCE_SIZE; i++)
        hello.nonce[i] = (uint8_t)(0x40 + i);
    tpx_bs_challenge_t ch = {.flags = 0};
    memcpy(ch.nonce, hello.nonce, sizeof(ch.nonce));
    ch.nonce[0] ^= 0xff;
    tpx_bs_auth_t auth;
    memset(&auth, 0, sizeof(auth));
    unsigned char p[TPX_BS_CHALLENGE_SIZE];

    seed_start(&s, TPX_FUZZ_BS_HANDSHAKE);
    tpx__bs_hello_encode(&hello, p);
    tpx_bs_hello_t hello_back;
    must(tpx__bs_hello_decode(p, TPX_BS_HELLO_SIZE, &hello_back) == TPX_OK, "HELLO");
    seed_add(&s, p, TPX_BS_HELLO_SIZE);
    seed_write(&s, "bs", "hello");
    seed_start(&s, TPX_FUZZ_BS_HANDSHAKE);
    tpx__bs_challenge_encode(&ch, p);
    tpx_bs_challenge_t ch_back;
    must(tpx__bs_challenge_decode(p, TPX_BS_CHALLENGE_SIZE, &ch_back) == TPX_OK, "CHALLENGE");
    seed_add(&s, p, TPX_BS_CHALLENGE_SIZE);
    seed_write(&s, "bs", "challenge");
    tpx_bs_challenge_t cha = ch;
    cha.flags = TPX_BS_FLAG_AUTH;
    tpx__bs_handshake_mac("fuzz", TPX_BS_MAC_SERVER, hello.nonce, cha.nonce, cha.mac);
    seed_start(&s, TPX_FUZZ_BS_HANDSHAKE);
    tpx__bs_challenge_encode(&cha, p);
    must(tpx__bs_challenge_decode(p, TPX_BS_CHALLENGE_SIZE, &ch_back) == TPX_OK, "CHALLENGE");
    seed_add(&s, p, TPX_BS_CHALLENGE_SIZE);
    seed_write(&s, "bs", "challenge_auth");
    tpx_bs_auth_t autha;
    tpx__bs_handshake_mac("fuzz", TPX_BS_MAC_CLIENT, cha.nonce, hello.nonce, autha.mac);
    seed_start(&s, TPX_FUZZ_BS_HANDSHAKE);
    tpx__bs_auth_encode(&autha, p);
    tpx_bs_auth_t auth_back;
    must(tpx__bs_auth_decode(p, TPX_BS_AUTH_SIZE, &auth_back) == TPX_OK, "AUTH");
    seed_add(&s, p, TPX_BS_AUTH_SIZE);
    seed_write(&s, "bs", "auth");

    static const int nh[] = {1, 2, 4};
    for (size_t i = 0; i < sizeof(nh) / sizeof(nh[0]); i++) {
        char name[32];
        make_info(&info, nh[i]);
        must(tpx__bs_info_encode(&info, buf, sizeof(buf), &len) == TPX_OK, "INFO");
        must(tpx__bs_info_decode(buf, len, &back) == TPX_OK, "INFO");
        seed_start(&s, TPX_FUZZ_BS_INFO);
        seed_add(&s, buf, len);
        snprintf(name, sizeof(name), "info_%d", nh[i]);
        seed_write(&s, "bs", name);
    }

    /* Streams: what a client sends a server, with and without a token. */
    for (int tok = 0; tok < 2; tok++) {
        tpx_bs_hello_t h = hello;
        h.flags = tok ? TPX_BS_FLAG_AUTH : 0;
        seed_start(&s, TPX_FUZZ_BS_CONN_SEL(TPX_FUZZ_BS_SERVER | (tok ? TPX_FUZZ_BS_TOKEN : 0)));
        tpx__bs_hello_encode(&h, p);
        seed_frame(&s, TPX_BS_MSG_HELLO, p, TPX_BS_HELLO_SIZE);
        tpx__bs_auth_encode(tok ? &autha : &auth, p);
        seed_frame(&s, TPX_BS_MSG_AUTH, p, TPX_BS_AUTH_SIZE);
        seed_write(&s, "bs", tok ? "conn_server_token" : "conn_server");

        /* what a server sends a client */
        seed_start(&s, TPX_FUZZ_BS_CONN_SEL(TPX_FUZZ_BS_CLIENT | (tok ? TPX_FUZZ_BS_TOKEN : 0)));
        tpx__bs_challenge_encode(tok ? &cha : &ch, p);
        seed_frame(&s, TPX_BS_MSG_CHALLENGE, p, TPX_BS_CHALLENGE_SIZE);
        seed_frame(&s, TPX_BS_MSG_WELCOME, NULL, 0);
        seed_write(&s, "bs", tok ? "conn_client_token" : "conn_client");
    }

    /* messages after the handshake */
    make_info(&info, 2);
    must(tpx__bs_info_encode(&info, buf, sizeof(buf), &len) == TPX_OK, "INFO");
    seed_start(&s, TPX_FUZZ_BS_CONN_SEL(TPX_FUZZ_BS_AFTER));
    seed_frame(&s, TPX_BS_MSG_INFO, buf, len);
    seed_frame(&s, TPX_BS_TYPE_USER + 1, "hello", 5);
    seed_frame(&s, TPX_BS_TYPE_USER + 2, NULL, 0);
    seed_write(&s, "bs", "conn_after");
}

/* ---- engine wire ------------------------------------------------------------------ */

static void seed_ctrl(const tpx_ctrl_t *m, const char *name)
{
    unsigned char out[TPX_CTRL_SIZE];
    seed_t s;
    tpx__ctrl_encode(m, out);
    tpx_ctrl_t back;
    must(tpx__ctrl_decode(out, &back) == TPX_OK, name);
    seed_start(&s, TPX_FUZZ_WIRE_CTRL);
    seed_add(&s, out, sizeof(out));
    seed_write(&s, "wire", name);
}

/* One packed request list of 9 entries over 2 keys, checked at 16 KiB
 * chunks: `want` chunks (0: the check must refuse it), written as seed
 * `name`. */
static void seed_packed_list(uint8_t op, uint32_t pack_max, uint32_t pack_chunk, uint32_t want,
                             const char *name)
{
    static const uint64_t lens[] = {4096, 100, 8191, 4000, 40000, 1, 8192, 8192, 3};
    enum { N = sizeof(lens) / sizeof(lens[0]) };
    unsigned char buf[TPX_LIST_SIZE(2, N)];
    tpx_list_hdr_t h = {.op = op, .nkeys = 2, .nent = N, .pack_max = pack_max,
                        .pack_chunk = pack_chunk};
    for (uint32_t i = 0; i < h.nkeys; i++)
        tpx__list_put_key(buf, i, 0x2000 + i);
    for (uint32_t i = 0; i < N; i++) {
        tpx__list_put_entry(buf, h.nkeys, i, i % 2, 12345 * (uint64_t)i, lens[i]);
        h.total += lens[i];
    }
    tpx__list_put_hdr(buf, &h);
    tpx_list_hdr_t back;
    uint32_t nchunks = 0;
    tpx_status_t st = tpx__list_check(buf, sizeof(buf), 16384, &back, &nchunks);
    must(want == 0 ? st != TPX_OK
                   : st == TPX_OK && nchunks == want &&
                         (pack_chunk == 0 || back.pack_chunk == pack_chunk),
         name);
    seed_t s;
    seed_start(&s, TPX_FUZZ_WIRE_LIST);
    seed_add(&s, (const unsigned char[]){0x40, 0}, 2); /* 16 KiB chunks */
    seed_add(&s, buf, sizeof(buf));
    seed_write(&s, "wire", name);
}

static void seeds_wire(void)
{
    seed_t s;
    /* a message of another control version (an engine of another tpx) is
     * refused, and its version is told apart from a damaged message */
    {
        unsigned char m[TPX_CTRL_SIZE];
        tpx_ctrl_t back;
        tpx__ctrl_encode(&(tpx_ctrl_t){.type = TPX_CTRL_BYE, .seq = 1}, m);
        must(tpx__ctrl_version(m) == tpx__ctrl_version_ours(), "ctrl version: ours");
        m[5] = (unsigned char)(tpx__ctrl_version_ours() - 1);
        must(tpx__ctrl_decode(m, &back) != TPX_OK &&
                 tpx__ctrl_version(m) == tpx__ctrl_version_ours() - 1,
             "ctrl version: an older one refused and named");
        m[0] ^= 1;
        must(tpx__ctrl_version(m) == -1, "ctrl version: not our magic");
    }
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_SEND_HDR, .seq = 7, .len = 1u << 20}, "ctrl_send");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_BYE, .seq = 8}, "ctrl_bye");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_REQ,
                            .seq = 9,
                            .rid = 3,
                            .op = TPX_WIRE_OP_READ,
                            .nent = 3,
                            .total = 3 << 20,
                            .list_len = TPX_LIST_SIZE(2, 3),
                            .nchunks = 6},
              "ctrl_rma_read");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_REQ,
                            .seq = 10,
                            .rid = 4,
                            .op = TPX_WIRE_OP_WRITE,
                            .nent = 1,
                            .total = 4096,
                            .list_len = TPX_LIST_SIZE(1, 1),
                            .nchunks = 1},
              "ctrl_rma_write");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_RESP,
                            .seq = 11,
                            .rid = 3,
                            .status = 0,
                            .nchunks = 6,
                            .total = 3 << 20},
              "ctrl_rma_resp");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_RESP, .seq = 12, .rid = 4, .status = -5},
              "ctrl_rma_resp_err");
    /* bodies (INLINE): a READ's list and the answer's data, a WRITE's list,
     * data and notification; and what must be refused */
    {
        tpx_ctrl_t rq = {.type = TPX_CTRL_RMA_REQ, .seq = 20, .rid = 6, .op = TPX_WIRE_OP_READ,
                         .flags = TPX_CTRL_REQ_INLINE | TPX_CTRL_REQ_ANSWER_INLINE, .nent = 1,
                         .total = 4096, .list_len = TPX_LIST_SIZE(1, 1), .nchunks = 1,
                         .body_len = TPX_LIST_SIZE(1, 1)};
        seed_ctrl(&rq, "ctrl_rma_read_inline");
        tpx_ctrl_t rs = {.type = TPX_CTRL_RMA_RESP, .seq = 21, .rid = 6,
                         .flags = TPX_CTRL_RESP_INLINE, .total = 4096, .body_len = 4096};
        seed_ctrl(&rs, "ctrl_rma_resp_inline");
        tpx_ctrl_t wq = {.type = TPX_CTRL_RMA_REQ, .seq = 22, .rid = 7, .op = TPX_WIRE_OP_WRITE,
                         .flags = TPX_CTRL_REQ_INLINE | TPX_CTRL_REQ_NOTIF_INLINE, .nent = 1,
                         .total = 4096, .list_len = TPX_LIST_SIZE(1, 1), .nchunks = 1,
                         .notif_total = 5, .body_len = TPX_LIST_SIZE(1, 1) + 4096 + 5};
        seed_ctrl(&wq, "ctrl_rma_write_inline");
        /* LIST: a larger WRITE's list and notification in the body, its
         * data on the data channels */
        tpx_ctrl_t lq = {.type = TPX_CTRL_RMA_REQ, .seq = 23, .rid = 8, .op = TPX_WIRE_OP_WRITE,
                         .flags = TPX_CTRL_REQ_LIST | TPX_CTRL_REQ_NOTIF_INLINE, .nent = 1,
                         .total = 1 << 20, .list_len = TPX_LIST_SIZE(1, 1), .nchunks = 2,
                         .notif_total = 5, .body_len = TPX_LIST_SIZE(1, 1) + 5};
        seed_ctrl(&lq, "ctrl_rma_write_list");
        unsigned char m[TPX_CTRL_SIZE];
        tpx_ctrl_t back, bad;
        tpx__ctrl_encode(&lq, m);
        must(tpx__ctrl_decode(m, &back) == TPX_OK && back.flags == lq.flags &&
                 back.body_len == lq.body_len,
             "ctrl: a LIST WRITE");
        bad = lq, bad.op = TPX_WIRE_OP_READ, bad.flags = TPX_CTRL_REQ_LIST;
        bad.notif_total = 0, bad.body_len = (uint32_t)bad.list_len;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: LIST on a READ");
        bad = lq, bad.flags |= TPX_CTRL_REQ_INLINE;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: LIST with INLINE");
        bad = lq, bad.body_len += 1 << 20; /* as if the data were in it */
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a LIST body with the data");
        bad = lq, bad.flags = TPX_CTRL_REQ_LIST | TPX_CTRL_REQ_NOTIF_INLINE | TPX_CTRL_REQ_NOTIF;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: NOTIF_INLINE with a held NOTIF");
        bad = rq, bad.body_len++;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: an INLINE body of the wrong size");
        bad = rq, bad.flags = 0;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a body without INLINE");
        bad = wq, bad.flags |= TPX_CTRL_REQ_ANSWER_INLINE;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: ANSWER_INLINE on a WRITE");
        bad = wq, bad.flags = TPX_CTRL_REQ_NOTIF_INLINE;
        bad.body_len = 0;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: NOTIF_INLINE without INLINE");
        bad = rq, bad.total = 1 << 20, bad.list_len = TPX_LIST_SIZE(300, 300);
        bad.nent = 300, bad.body_len = (uint32_t)bad.list_len;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a body over TPX_CTRL_BODY_MAX");
        bad = wq, bad.total = UINT64_MAX - bad.list_len - bad.notif_total + 11;
        bad.body_len = 10; /* list_len + total + notif_len wraps to 10 */
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: an INLINE WRITE whose size wraps");
        bad = rs, bad.nchunks = 1;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: an inline answer with chunks");
        bad = rs, bad.body_len = 4095;
        tpx__ctrl_encode(&bad, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: an inline answer of the wrong size");
    }
    tpx_ctrl_t n = {
        .type = TPX_CTRL_NOTIF, .seq = 13, .notif_total = 50, .notif_off = 40, .part_len = 10};
    memcpy(n.part, "0123456789", 10);
    seed_ctrl(&n, "ctrl_notif");
    /* a WRITE's notification: HELD parts, then the request that claims them */
    tpx_ctrl_t nh = {.type = TPX_CTRL_NOTIF, .seq = 14, .notif_total = 5, .part_len = 5,
                     .flags = TPX_CTRL_NOTIF_HELD};
    memcpy(nh.part, "ready", 5);
    seed_ctrl(&nh, "ctrl_notif_held");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_REQ,
                            .seq = 15,
                            .rid = 5,
                            .op = TPX_WIRE_OP_WRITE,
                            .flags = TPX_CTRL_REQ_NOTIF,
                            .nent = 2,
                            .total = 8192,
                            .list_len = TPX_LIST_SIZE(1, 2),
                            .nchunks = 2},
              "ctrl_rma_write_notif");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_RESP,
                            .seq = 16,
                            .rid = 5,
                            .flags = TPX_CTRL_RESP_NOTIFIED},
              "ctrl_rma_resp_notified");
    seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RMA_CANCEL, .seq = 17, .rid = 5}, "ctrl_rma_cancel");
    /* a lost data channel: the receiver's cut, the sender's answer, a confirmation */
    {
        tpx_ctrl_t rp = {.type = TPX_CTRL_REPAIR, .seq = 18, .chan = 3, .cut_seq = 12,
                         .cut_chunk = 7, .cut_lane = 2, .cut_at = 15};
        seed_ctrl(&rp, "ctrl_repair");
        seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_REPAIR_ACK, .seq = 19, .chan = 3},
                  "ctrl_repair_ack");
        seed_ctrl(&(tpx_ctrl_t){.type = TPX_CTRL_RECV_DONE, .seq = 20, .ndone = 2,
                                .done = {11, 9}},
                  "ctrl_recv_done");
        unsigned char m[TPX_CTRL_SIZE];
        tpx_ctrl_t back;
        tpx__ctrl_encode(&rp, m);
        must(tpx__ctrl_decode(m, &back) == TPX_OK && back.chan == 3 && back.cut_seq == 12 &&
                 back.cut_chunk == 7 && back.cut_lane == 2 && back.cut_at == 15,
             "ctrl: REPAIR round trip");
        m[30] = 1;
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a REPAIR with a stray byte");
        rp.cut_lane = 32;
        tpx__ctrl_encode(&rp, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a REPAIR cut in lane 32");
        rp.cut_lane = 2;
        rp.chan = 32;
        tpx__ctrl_encode(&rp, m);
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a REPAIR of channel 32");
        tpx__ctrl_encode(&(tpx_ctrl_t){.type = TPX_CTRL_REPAIR_ACK, .chan = 1}, m);
        m[20] = 1;
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: a REPAIR_ACK with a stray byte");
        tpx_ctrl_t d = {.type = TPX_CTRL_RECV_DONE, .ndone = 5, .done = {1, 2, 3, 4, 5}};
        tpx__ctrl_encode(&d, m);
        must(tpx__ctrl_decode(m, &back) == TPX_OK && back.ndone == 5 && back.done[4] == 5,
             "ctrl: RECV_DONE of 5 round trip");
        m[16] = 6;
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: RECV_DONE of 6");
        m[16] = 0;
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: RECV_DONE of none");
        d.ndone = 2;
        tpx__ctrl_encode(&d, m);
        m[40] = 1;
        must(tpx__ctrl_decode(m, &back) != TPX_OK, "ctrl: RECV_DONE with a stray third seq");
    }

    /* request lists: 2-byte chunk selector (fuzz_wire.c), then the list */
    static const struct {
        uint32_t nkeys, nent;
        const char *name;
    } lists[] = {{1, 1, "list_1"}, {2, 3, "list_2x3"}, {3, 8, "list_3x8"}};
    for (size_t li = 0; li < sizeof(lists) / sizeof(lists[0]); li++) {
        unsigned char buf[TPX_LIST_SIZE(3, 8)];
        tpx_list_hdr_t h = {.op = li % 2 ? TPX_WIRE_OP_WRITE : TPX_WIRE_OP_READ,
                            .nkeys = lists[li].nkeys,
                            .nent = lists[li].nent};
        uint64_t total = 0;
        for (uint32_t i = 0; i < h.nkeys; i++)
            tpx__list_put_key(buf, i, 0x1000 + i);
        for (uint32_t i = 0; i < h.nent; i++) {
            uint64_t len = 1000 + 40000 * (uint64_t)i;
            tpx__list_put_entry(buf, h.nkeys, i, i % h.nkeys, 4096 * (uint64_t)i, len);
            total += len;
        }
        h.total = total;
        tpx__list_put_hdr(buf, &h);
        size_t size = TPX_LIST_SIZE(h.nkeys, h.nent);
        tpx_list_hdr_t back;
        uint32_t nchunks;
        must(tpx__list_check(buf, size, 16384, &back, &nchunks) == TPX_OK, lists[li].name);
        seed_start(&s, TPX_FUZZ_WIRE_LIST);
        seed_add(&s, (const unsigned char[]){0x40, 0}, 2); /* 16 KiB chunks */
        seed_add(&s, buf, size);
        seed_write(&s, "wire", lists[li].name);
    }

    /* packed lists (16 KiB chunks): small entries share chunks, a large one
     * breaks the run, an entry that does not fit opens the next chunk
     * (4096+100+8191 | 4000 | 40000: 3 | 1+8192 | 8192+3 -> 7 chunks); and a
     * packing bound above the chunk, refused */
    seed_packed_list(TPX_WIRE_OP_WRITE, 8192, 0, 7, "list_packed");
    seed_packed_list(TPX_WIRE_OP_READ, 16385, 0, 0, "list_pack_bound");
    /* shared chunks smaller than a chunk (pack_chunk 8192 of 16 KiB chunks):
     * 4096+100 | 8191 | 4000 | 40000: 3 | 1 | 8192 | 8192 | 3 -> 10 chunks;
     * and a pack_chunk below the packing bound, refused */
    seed_packed_list(TPX_WIRE_OP_READ, 8192, 8192, 10, "list_pack_chunk");
    seed_packed_list(TPX_WIRE_OP_READ, 8192, 8191, 0, "list_pack_chunk_bound");

    /* one entry of 2^64 - 1 bytes: its chunk count must not wrap */
    {
        unsigned char buf[TPX_LIST_SIZE(1, 1)];
        tpx_list_hdr_t h = {.op = TPX_WIRE_OP_READ, .nkeys = 1, .nent = 1, .total = UINT64_MAX};
        tpx_list_hdr_t back;
        uint32_t nchunks;
        tpx__list_put_hdr(buf, &h);
        tpx__list_put_key(buf, 0, 1);
        tpx__list_put_entry(buf, 1, 0, 0, 0, UINT64_MAX);
        must(tpx__list_check(buf, sizeof(buf), 16384, &back, &nchunks) != TPX_OK,
             "refusing a list of 2^50 chunks");
        seed_start(&s, TPX_FUZZ_WIRE_LIST);
        seed_add(&s, (const unsigned char[]){0x40, 0}, 2); /* 16 KiB chunks: too many */
        seed_add(&s, buf, sizeof(buf));
        seed_write(&s, "wire", "list_max");
    }

    /* a version-3 list (strided entries): a plain block, then heads of
     * every token of two blocks (2 x 16 elements of 512 bytes) */
    {
        unsigned char buf[TPX_LIST_SIZE(1, 0) + TPX_LIST3_ENTRY(0) + TPX_LIST3_ENTRY(2)];
        tpx_sdesc_t plain = {.off = 100, .elem = 3000};
        tpx_sdesc_t heads = {.off = 512, .elem = 512, .ndims = 2, .count = {2, 16},
                             .stride = {32768, 2048}};
        tpx_list_hdr_t h = {.op = TPX_WIRE_OP_READ, .nkeys = 1, .nent = 2,
                            .total = 3000 + 32 * 512, .pack_max = 4096,
                            .version = TPX_LIST_VERSION_STRIDED};
        tpx__list_put_hdr(buf, &h);
        tpx__list_put_key(buf, 0, 7);
        size_t at = TPX_LIST_SIZE(1, 0);
        at += tpx__list_put_entry3(buf, at, 0, &plain);
        at += tpx__list_put_entry3(buf, at, 0, &heads);
        tpx_list_hdr_t back;
        uint32_t nchunks;
        must(at == sizeof(buf) &&
                 tpx__list_check(buf, sizeof(buf), 16384, &back, &nchunks) == TPX_OK,
             "list_strided");
        seed_start(&s, TPX_FUZZ_WIRE_LIST);
        seed_add(&s, (const unsigned char[]){0x40, 0}, 2); /* 16 KiB chunks */
        seed_add(&s, buf, sizeof(buf));
        seed_write(&s, "wire", "list_strided");
    }

    unsigned char d[TPX_WIRE_RDESC_SIZE];
    tpx__rdesc_encode(&(tpx_rdesc_fields_t){.mem_type = 1,
                                            .engine_id = 0xfeedfacecafebeefull,
                                            .key = 42,
                                            .addr = 0x7f0000001000ull,
                                            .len = 1u << 20,
                                            .gpu = -1},
                      d);
    tpx_rdesc_fields_t rd;
    must(tpx__rdesc_decode(d, &rd) == TPX_OK, "rdesc");
    seed_start(&s, TPX_FUZZ_WIRE_RDESC);
    seed_add(&s, d, sizeof(d));
    seed_write(&s, "wire", "rdesc_host");
    tpx__rdesc_encode(
        &(tpx_rdesc_fields_t){
            .mem_type = 2, .engine_id = 1, .key = 7, .addr = 0x100000000ull, .len = 4096, .gpu = 5},
        d);
    must(tpx__rdesc_decode(d, &rd) == TPX_OK, "rdesc");
    seed_start(&s, TPX_FUZZ_WIRE_RDESC_SUM);
    seed_add(&s, d, sizeof(d));
    seed_write(&s, "wire", "rdesc_cuda");

    static tpx_md_t md, back;
    memset(&md, 0, sizeof(md));
    md.engine_id = 99;
    md.gpu = 2;
    md.chunk = 512 * 1024;
    md.channels = 4;
    md.port = 20002;
    snprintf(md.name, sizeof(md.name), "node-a");
    snprintf(md.plugin, sizeof(md.plugin), "builtin");
    md.nnics = 2;
    snprintf(md.nic[0], sizeof(md.nic[0]), "eth1");
    snprintf(md.nic[1], sizeof(md.nic[1]), "eth2");
    md.nic_speed[0] = md.nic_speed[1] = 200000;
    md.naddrs = 2;
    snprintf(md.addr[0], sizeof(md.addr[0]), "10.0.0.1");
    snprintf(md.addr[1], sizeof(md.addr[1]), "fe80::1");
    unsigned char blob[TPX_MD_MAX];
    size_t len;
    must(tpx__md_encode(&md, blob, sizeof(blob), &len) == TPX_OK, "metadata");
    must(tpx__md_decode(blob, len, &back) == TPX_OK, "metadata");
    seed_start(&s, TPX_FUZZ_WIRE_MD);
    seed_add(&s, blob, len);
    seed_write(&s, "wire", "md");
    md.nnics = 0;
    md.naddrs = 1;
    must(tpx__md_encode(&md, blob, sizeof(blob), &len) == TPX_OK, "metadata");
    must(tpx__md_decode(blob, len, &back) == TPX_OK, "metadata");
    seed_start(&s, TPX_FUZZ_WIRE_MD_SUM);
    seed_add(&s, blob, len);
    seed_write(&s, "wire", "md_small");
    md.has_key = 1;
    for (int i = 0; i < TPX_MD_KEY; i++)
        md.key[i] = (unsigned char)(i * 7 + 1);
    must(tpx__md_encode(&md, blob, sizeof(blob), &len) == TPX_OK, "metadata");
    must(tpx__md_decode(blob, len, &back) == TPX_OK && back.has_key, "metadata");
    seed_start(&s, TPX_FUZZ_WIRE_MD_SUM);
    seed_add(&s, blob, len);
    seed_write(&s, "wire", "md_key");
    tpx_ident_msg_t im = {.flags = TPX_IDENT_F_KEY};
    memcpy(im.pk, md.key, sizeof(im.pk));
    for (int i = 0; i < 64; i++)
        im.sig[i] = (unsigned char)(255 - i);
    unsigned char ib[TPX_IDENT_WIRE_SIZE];
    tpx__ident_encode(&im, ib);
    seed_start(&s, TPX_FUZZ_WIRE_IDENT);
    seed_add(&s, ib, sizeof(ib));
    seed_write(&s, "wire", "ident");
    im.flags = 0;
    tpx__ident_encode(&im, ib);
    seed_start(&s, TPX_FUZZ_WIRE_IDENT);
    seed_add(&s, ib, sizeof(ib));
    seed_write(&s, "wire", "ident_nokey");
    /* a client presenting a ticket; a server answering it and offering one */
    im.flags = TPX_IDENT_F_TICKET;
    for (int i = 0; i < TPX_IDENT_TICKET_ID; i++)
        im.ticket_id[i] = (unsigned char)(i + 3);
    tpx__ident_encode(&im, ib);
    seed_start(&s, TPX_FUZZ_WIRE_IDENT);
    seed_add(&s, ib, sizeof(ib));
    seed_write(&s, "wire", "ident_ticket");
    memset(im.ticket_id, 0, sizeof(im.ticket_id));
    im.flags = TPX_IDENT_F_KEY | TPX_IDENT_F_PROOF | TPX_IDENT_F_OFFER;
    for (int i = 0; i < TPX_IDENT_TICKET; i++)
        im.proof[i] = im.offer[i] = (unsigned char)(i * 5 + 1);
    for (int i = 0; i < TPX_IDENT_TICKET_ID; i++)
        im.offer_id[i] = (unsigned char)(200 - i);
    tpx__ident_encode(&im, ib);
    seed_start(&s, TPX_FUZZ_WIRE_IDENT);
    seed_add(&s, ib, sizeof(ib));
    seed_write(&s, "wire", "ident_offer");
    unsigned char rb[TPX_READY_WIRE_SIZE];
    tpx__ready_encode(TPX_READY_CTRL_BS, rb);
    seed_start(&s, TPX_FUZZ_WIRE_READY);
    seed_add(&s, rb, sizeof(rb));
    seed_write(&s, "wire", "ready");
    seed_start(&s, TPX_FUZZ_WIRE_READY);
    seed_write(&s, "wire", "ready_empty");
}

/* ---- the built-in transport's wire ------------------------------------------------- */

static void seeds_sock(void)
{
    seed_t s;
    unsigned char b[TPX_SOCK_HANDLE_SIZE];
    tpx_sock_hello_t hello;
    tpx_sock_piece_t piece;
    tpx_sock_handle_t hb;
    tpx__sock_hello_encode(
        &(tpx_sock_hello_t){
            .kind = TPX_SOCK_HELLO_CTRL, .nsocks = 4, .nonce = 0x1122334455667788ull, .conn_id = 5},
        b);
    must(tpx__sock_hello_decode(b, &hello) == TPX_OK, "sock hello");
    seed_start(&s, TPX_FUZZ_SOCK_HELLO);
    seed_add(&s, b, TPX_SOCK_HELLO_WIRE_SIZE);
    seed_write(&s, "sock", "hello_ctrl");
    tpx__sock_hello_encode(
        &(tpx_sock_hello_t){
            .kind = TPX_SOCK_HELLO_DATA, .index = 3, .nsocks = 4, .nonce = 1, .conn_id = 5},
        b);
    must(tpx__sock_hello_decode(b, &hello) == TPX_OK, "sock hello");
    seed_start(&s, TPX_FUZZ_SOCK_HELLO);
    seed_add(&s, b, TPX_SOCK_HELLO_WIRE_SIZE);
    seed_write(&s, "sock", "hello_data");

    tpx__sock_piece_encode(
        &(tpx_sock_piece_t){.tag = 9, .len = 65536, .seq = 2, .total = 1u << 20, .offset = 65536},
        b);
    must(tpx__sock_piece_decode(b, &piece) == TPX_OK, "sock piece");
    seed_start(&s, TPX_FUZZ_SOCK_PIECE);
    seed_add(&s, b, TPX_SOCK_PIECE_WIRE_SIZE);
    seed_write(&s, "sock", "piece");
    tpx__sock_piece_encode(&(tpx_sock_piece_t){.tag = 1, .seq = 3}, b);
    must(tpx__sock_piece_decode(b, &piece) == TPX_OK, "sock piece");
    seed_start(&s, TPX_FUZZ_SOCK_PIECE);
    seed_add(&s, b, TPX_SOCK_PIECE_WIRE_SIZE);
    seed_write(&s, "sock", "piece_empty");

    tpx_sock_handle_t h;
    memset(&h, 0, sizeof(h));
    h.addr.sin.sin_family = AF_INET;
    h.addr.sin.sin_port = htons(40000);
    h.addr.sin.sin_addr.s_addr = htonl(0x7f000001);
    h.nonce = 0xdeadbeef;
    h.naddrs = 1;
    tpx__sock_handle_encode(&h, b);
    must(tpx__sock_handle_decode(b, &hb) == TPX_OK, "sock handle");
    seed_start(&s, TPX_FUZZ_SOCK_HANDLE);
    seed_add(&s, b, sizeof(b));
    seed_write(&s, "sock", "handle_v4");
    h.naddrs = TPX_SOCK_HANDLE_MAX_ADDRS;
    for (int i = 0; i < TPX_SOCK_HANDLE_MAX_ADDRS - 1; i++) {
        h.more[i] = h.addr;
        h.more[i].sin.sin_port = htons((uint16_t)(40001 + i));
        h.more[i].sin.sin_addr.s_addr = htonl(0x0a000001u + (uint32_t)i);
    }
    tpx__sock_handle_encode(&h, b);
    must(tpx__sock_handle_decode(b, &hb) == TPX_OK, "sock handle");
    seed_start(&s, TPX_FUZZ_SOCK_HANDLE);
    seed_add(&s, b, sizeof(b));
    seed_write(&s, "sock", "handle_v4_vdev");
    memset(&h, 0, sizeof(h));
    h.addr.sin6.sin6_family = AF_INET6;
    h.addr.sin6.sin6_port = htons(40010);
    h.addr.sin6.sin6_addr.s6_addr[15] = 1;
    h.addr.sin6.sin6_scope_id = 2;
    h.more[0] = h.addr;
    h.more[0].sin6.sin6_port = htons(40011);
    h.naddrs = 2;
    tpx__sock_handle_encode(&h, b);
    must(tpx__sock_handle_decode(b, &hb) == TPX_OK, "sock handle");
    seed_start(&s, TPX_FUZZ_SOCK_HANDLE);
    seed_add(&s, b, sizeof(b));
    seed_write(&s, "sock", "handle_v6");
}

static void seed_text(uint8_t sel, const char *name, const char *text)
{
    seed_t s;
    seed_start(&s, sel);
    seed_add(&s, text, strlen(text));
    seed_write(&s, "reg", name);
}

/* What etcd's JSON gateway answers (as etcd 3.4 sends them), the value of
 * a published engine, base64 and endpoint lists. */
static void seeds_reg(void)
{
    static const char range[] =
        "{\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":"
        "\"13668033151171901709\",\"revision\":\"2\",\"raft_term\":\"2\"},\"kvs\":[{\"key\":"
        "\"YQ==\",\"create_revision\":\"2\",\"mod_revision\":\"2\",\"version\":\"1\",\"value\":"
        "\"Yg==\",\"lease\":\"4111120223826044933\"}],\"count\":\"1\"}";
    static const char grant[] = "{\"header\":{\"revision\":\"1\"},\"ID\":\"4111120223826044933\","
                                "\"TTL\":\"5\"}";
    static const char ka[] = "{\"result\":{\"header\":{\"revision\":\"1\"},\"ID\":\"411\",\"TTL\":"
                             "\"5\"}}\n";
    static const char err[] = "{\"error\":\"etcdserver: requested lease not found\",\"message\":"
                              "\"etcdserver: requested lease not found\",\"code\":5}";
    char http[4096];
    snprintf(http, sizeof(http),
             "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(range), range);
    seed_text(TPX_FUZZ_REG_HTTP, "http_length", http);
    seed_text(TPX_FUZZ_REG_HTTP | 7 << 3, "http_length_big_reads", http);
    snprintf(http, sizeof(http),
             "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n"
             "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
             strlen(ka), ka);
    seed_text(TPX_FUZZ_REG_HTTP | 2 << 3, "http_chunked_then_close", http);
    seed_text(TPX_FUZZ_REG_HTTP, "http_eof", "HTTP/1.0 200 OK\r\n\r\n{\"a\":1}");
    seed_text(TPX_FUZZ_REG_JSON, "json_range", range);
    seed_text(TPX_FUZZ_REG_JSON, "json_mixed",
              "[1,-2.5e+3,true,false,null,\"\\u00e9\\n\\\"\",{\"a\":[{}],\"b\":\"\"}]");
    seed_text(TPX_FUZZ_REG_ANSWER, "range", range);
    seed_text(TPX_FUZZ_REG_ANSWER, "grant", grant);
    seed_text(TPX_FUZZ_REG_ANSWER, "keepalive", ka);
    seed_text(TPX_FUZZ_REG_ANSWER, "error", err);
    seed_text(TPX_FUZZ_REG_ANSWER, "watch",
              "{\"result\":{\"header\":{\"revision\":\"3\"},\"events\":[{\"type\":\"DELETE\","
              "\"kv\":{\"key\":\"cC9h\",\"mod_revision\":\"3\"}},{\"kv\":{\"key\":\"cC9i\","
              "\"mod_revision\":\"3\",\"value\":\"eA==\"}}]}}");
    seed_text(TPX_FUZZ_REG_ANSWER, "watch_created",
              "{\"result\":{\"header\":{\"revision\":\"1\"},\"created\":true}}");
    unsigned char md[200],
        val[TPX_REG_VALUE_HDR + sizeof(md) + 2 * TPX_RDESC_SIZE + 2 * TPX_REG_SIG_SIZE];
    unsigned char descs[2 * TPX_RDESC_SIZE];
    size_t vl = 0;
    memset(md, 0x5a, sizeof(md));
    memset(descs, 0xa5, sizeof(descs));
    must(tpx__reg_value_encode(md, sizeof(md), descs, 2, 0, val, sizeof(val), &vl) == TPX_OK,
         "registry value");
    seed_t s;
    seed_start(&s, TPX_FUZZ_REG_VALUE);
    seed_add(&s, val, vl);
    seed_write(&s, "reg", "value");
    /* signed: two signature slots (their bytes are not checked here) */
    must(tpx__reg_value_encode(md, sizeof(md), descs, 2, 2, val, sizeof(val), &vl) == TPX_OK,
         "signed registry value");
    memset(val + vl - 2 * TPX_REG_SIG_SIZE, 0x3c, 2 * TPX_REG_SIG_SIZE);
    seed_start(&s, TPX_FUZZ_REG_VALUE);
    seed_add(&s, val, vl);
    seed_write(&s, "reg", "value_signed");
    seed_text(TPX_FUZZ_REG_B64, "b64", "eyJhIjoxfQ==");
    seed_text(TPX_FUZZ_REG_URL, "url", "etcd://10.0.0.1:2379,[fd00::1]:2379,etcd-2:2379");
    seed_text(TPX_FUZZ_REG_URL, "url_tls", "https://etcd-0:2379,https://[fd00::1]:2379,10.0.0.3:2379");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    g_dir = argv[1];
    if (mkdir(g_dir, 0777) != 0 && errno != EEXIST) {
        perror(g_dir);
        return 1;
    }
    seeds_bs();
    seeds_wire();
    seeds_sock();
    seeds_reg();
    printf("fuzz_seeds: %d seeds in %s\n", g_count, g_dir);
    return 0;
}
