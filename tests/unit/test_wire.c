/* SPDX-License-Identifier: Apache-2.0 */
/* Wire formats round-trip, and decoders reject every malformed input. */
#include <arpa/inet.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "engine/wire.h"
#include "plugin/sock/sock_wire.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    return test_xorshift64(&rng);
}

int main(void)
{
    /* handle, IPv4 and IPv6 */
    unsigned char buf[128];
    tpx_sock_handle_t h = {0}, o;
    h.addr.sin.sin_family = AF_INET;
    h.addr.sin.sin_port = htons(4242);
    inet_pton(AF_INET, "127.0.0.1", &h.addr.sin.sin_addr);
    h.nonce = 0x0123456789abcdefull;
    tpx__sock_handle_encode(&h, buf);
    EXPECT_EQ(tpx__sock_handle_decode(buf, &o), TPX_OK);
    EXPECT_EQ(o.addr.sa.sa_family, AF_INET);
    EXPECT_EQ(ntohs(o.addr.sin.sin_port), 4242);
    EXPECT(o.addr.sin.sin_addr.s_addr == h.addr.sin.sin_addr.s_addr);
    EXPECT(o.nonce == h.nonce);
    for (int i = 64; i < 128; i++)
        EXPECT_EQ(buf[i], 0); /* connector-private bytes start zeroed */
    memset(&h, 0, sizeof(h));
    h.addr.sin6.sin6_family = AF_INET6;
    h.addr.sin6.sin6_port = htons(1);
    inet_pton(AF_INET6, "fd00::1", &h.addr.sin6.sin6_addr);
    tpx__sock_handle_encode(&h, buf);
    EXPECT_EQ(tpx__sock_handle_decode(buf, &o), TPX_OK);
    EXPECT_EQ(o.addr.sa.sa_family, AF_INET6);
    EXPECT(memcmp(&o.addr.sin6.sin6_addr, &h.addr.sin6.sin6_addr, 16) == 0);
    unsigned char bad[128];
    memset(bad, 0, sizeof(bad));
    EXPECT(tpx__sock_handle_decode(bad, &o) != TPX_OK);
    memcpy(bad, buf, 128);
    bad[0] ^= 1;
    EXPECT(tpx__sock_handle_decode(bad, &o) != TPX_OK);
    memcpy(bad, buf, 128);
    bad[7] = 5; /* family */
    EXPECT(tpx__sock_handle_decode(bad, &o) != TPX_OK);
    memcpy(bad, buf, 128);
    bad[8] = bad[9] = 0; /* port 0 */
    EXPECT(tpx__sock_handle_decode(bad, &o) != TPX_OK);
    /* A listener that acknowledges pieces says so in byte 112; a handle of
     * a build without it (zero there) says nothing, and one of a newer
     * build's bits is read as it is (the connector looks at its own). */
    h.caps = TPX_SOCK_HANDLE_CAP_ACKS;
    tpx__sock_handle_encode(&h, buf);
    EXPECT_EQ(buf[115], 1);
    EXPECT_EQ(tpx__sock_handle_decode(buf, &o), TPX_OK);
    EXPECT(o.caps == TPX_SOCK_HANDLE_CAP_ACKS);
    buf[115] = 0;
    buf[112] = 0x80;
    EXPECT_EQ(tpx__sock_handle_decode(buf, &o), TPX_OK);
    EXPECT(!(o.caps & TPX_SOCK_HANDLE_CAP_ACKS));

    /* hello */
    unsigned char hb[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx_sock_hello_t he = {.kind = TPX_SOCK_HELLO_DATA, .index = 3, .nsocks = 4, .nonce = 7,
                           .conn_id = 99}, ho;
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.kind == he.kind && ho.index == 3 && ho.nsocks == 4 && ho.nonce == 7 &&
           ho.conn_id == 99);
    he.flags = TPX_SOCK_HELLO_ACKS; /* the comm fails over: known */
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.flags == TPX_SOCK_HELLO_ACKS);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN; /* ...and rejoins: known */
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.flags == (TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN));
    he.flags = TPX_SOCK_HELLO_REJOIN; /* rejoining without failing over */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN | TPX_SOCK_HELLO_TELL; /* tells */
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.flags == (TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN | TPX_SOCK_HELLO_TELL));
    he.flags = TPX_SOCK_HELLO_TELL; /* tells without failing over */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = 0x0008; /* unknown */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    /* a rejoin: only of a comm that fails over and rejoins */
    he.kind = TPX_SOCK_HELLO_REJOIN_DATA;
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.kind == TPX_SOCK_HELLO_REJOIN_DATA && ho.index == 3 && ho.conn_id == 99);
    he.flags = TPX_SOCK_HELLO_ACKS;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = 0;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN | TPX_SOCK_HELLO_TELL; /* its comm's */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    /* `missing`: a control hello of a comm that rejoins names the data
     * connections it starts without (bytes 14..15, 0 in older builds) */
    he.kind = TPX_SOCK_HELLO_CTRL;
    he.index = 0;
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    he.missing = 0x2;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(hb[14] == 0 && hb[15] == 0x2);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    EXPECT(ho.missing == 0x2);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN | TPX_SOCK_HELLO_TELL; /* and tells */
    tpx__sock_hello_encode(&he, hb);
    EXPECT_EQ(tpx__sock_hello_decode(hb, &ho), TPX_OK);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_TELL; /* missing ones need rejoins */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    he.missing = 0xf; /* every one: no comm */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.missing = 0x10; /* beyond nsocks */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.missing = 0x2;
    he.flags = TPX_SOCK_HELLO_ACKS; /* cannot join later */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.flags = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    he.kind = TPX_SOCK_HELLO_DATA; /* only a control hello says it */
    he.index = 1;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.missing = 0;
    he.flags = 0;
    he.kind = TPX_SOCK_HELLO_DATA;
    he.index = 4; /* index >= nsocks */
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.index = 0;
    he.nsocks = 17;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);
    he.nsocks = 1;
    he.kind = 9;
    tpx__sock_hello_encode(&he, hb);
    EXPECT(tpx__sock_hello_decode(hb, &ho) != TPX_OK);

    /* piece */
    unsigned char pb[TPX_SOCK_PIECE_WIRE_SIZE];
    tpx_sock_piece_t p = {.tag = 5, .len = 100, .seq = 1ull << 40, .total = 1000, .offset = 900},
                     po;
    tpx__sock_piece_encode(&p, pb);
    EXPECT_EQ(tpx__sock_piece_decode(pb, &po), TPX_OK);
    EXPECT(memcmp(&p, &po, sizeof(p)) == 0);
    p.offset = 901; /* runs past the end */
    tpx__sock_piece_encode(&p, pb);
    EXPECT(tpx__sock_piece_decode(pb, &po) != TPX_OK);
    p = (tpx_sock_piece_t){.len = 1, .total = UINT64_MAX, .offset = UINT64_MAX};
    tpx__sock_piece_encode(&p, pb);
    EXPECT(tpx__sock_piece_decode(pb, &po) != TPX_OK);
    /* longer than any sender cuts (a CUDA receive of 4 GiB or more would
     * count its staging blocks past 32 bits) */
    p = (tpx_sock_piece_t){.len = TPX_SOCK_PIECE_MAX + 1, .total = 8ull << 30, .offset = 0};
    tpx__sock_piece_encode(&p, pb);
    EXPECT(tpx__sock_piece_decode(pb, &po) != TPX_OK);
    p.len = TPX_SOCK_PIECE_MAX;
    tpx__sock_piece_encode(&p, pb);
    EXPECT_EQ(tpx__sock_piece_decode(pb, &po), TPX_OK);
    p = (tpx_sock_piece_t){.len = 0, .total = 10, .offset = 0}; /* empty piece of a non-empty msg */
    tpx__sock_piece_encode(&p, pb);
    EXPECT(tpx__sock_piece_decode(pb, &po) != TPX_OK);

    /* READY's flags: 4 bytes, or none from an engine that predates them;
     * any other length is refused; bits not known here are kept, unused */
    unsigned char rb[TPX_READY_WIRE_SIZE + 1] = {0};
    tpx_ready_t ro = {.known = 7, .flags = 7};
    tpx__ready_encode(TPX_READY_CTRL_BS, rb);
    EXPECT_EQ(rb[0] | rb[1] | rb[2], 0);
    EXPECT_EQ(rb[3], 1); /* big-endian */
    EXPECT_EQ(tpx__ready_decode(rb, TPX_READY_WIRE_SIZE, &ro), TPX_OK);
    EXPECT(ro.known == 1 && ro.flags == TPX_READY_CTRL_BS);
    EXPECT_EQ(tpx__ready_decode(rb, 0, &ro), TPX_OK);
    EXPECT(ro.known == 0 && ro.flags == 0);
    tpx__ready_encode(0x80000000u, rb);
    EXPECT_EQ(tpx__ready_decode(rb, TPX_READY_WIRE_SIZE, &ro), TPX_OK);
    EXPECT(ro.known == 1 && ro.flags == 0x80000000u && !(ro.flags & TPX_READY_CTRL_BS));
    for (size_t n = 1; n <= TPX_READY_WIRE_SIZE + 1; n++) {
        if (n == TPX_READY_WIRE_SIZE)
            continue;
        ro = (tpx_ready_t){.known = 7, .flags = 7};
        EXPECT(tpx__ready_decode(rb, n, &ro) == TPX_ERR_PROTOCOL);
        EXPECT(ro.known == 7 && ro.flags == 7); /* untouched on failure */
    }

    /* Random bytes never decode into something out of bounds (and never crash). */
    for (int i = 0; i < 200000; i++) {
        unsigned char r[128];
        for (int k = 0; k < 128; k += 8) {
            uint64_t x = next();
            memcpy(r + k, &x, 8);
        }
        if (i & 1) { /* valid magics, random fields */
            memcpy(r, "TPXD", 4);
            r[12] = r[13] = r[14] = r[15] = 0;
        }
        if (tpx__sock_piece_decode(r, &po) == TPX_OK)
            EXPECT(po.offset <= po.total && po.len <= po.total - po.offset);
        if (tpx__sock_hello_decode(r, &ho) == TPX_OK)
            EXPECT(ho.index < ho.nsocks && ho.nsocks <= TPX_SOCK_MAX_SOCKS);
        (void)tpx__sock_handle_decode(r, &o);
    }
    TEST_DONE();
}
