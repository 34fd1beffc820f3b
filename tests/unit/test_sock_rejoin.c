/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_rejoin.c - the built-in transport's rejoin rules
 * (sock_rejoin.c): the attempts' schedule (10 ms doubling to 250 ms), and
 * what a listener admits as a new connection of an established comm: the
 * listener's nonce and the comm's conn_id both, of a comm made to rejoin,
 * alive, of its shape, one new connection per index at a time. A hello
 * that makes comms (the handle's nonce alone) attaches nothing.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plugin/sock/sock.h"

static int fails;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "test_sock_rejoin: FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);      \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

#define NONCE 0x1122334455667788ull
#define BOTH  (TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN)

/* The hello goes through the wire and back, as a listener reads it. */
static int admit(tpx_sock_hello_t h, const tpx_sock_rejoin_key_t *keys, int n, int *which)
{
    unsigned char buf[TPX_SOCK_HELLO_WIRE_SIZE];
    tpx__sock_hello_encode(&h, buf);
    tpx_sock_hello_t got;
    if (tpx__sock_hello_decode(buf, &got) != TPX_OK)
        return -1;
    return tpx__sock_rejoin_admit(&got, NONCE, keys, n, which);
}

int main(void)
{
    /* schedule */
    const uint32_t want[] = {10, 20, 40, 80, 160, 250, 250, 250};
    for (uint32_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
        EXPECT(tpx__sock_rejoin_delay_ms(k) == want[k]);
    EXPECT(tpx__sock_rejoin_delay_ms(31) == 250);
    EXPECT(tpx__sock_rejoin_delay_ms(UINT32_MAX) == 250);

    tpx_sock_rejoin_key_t keys[3] = {
        {.conn_id = 0xa, .nsocks = 8, .flags = BOTH},
        {.conn_id = 0xb, .nsocks = 4, .flags = TPX_SOCK_HELLO_ACKS}, /* an older connector */
        {.conn_id = 0xc, .nsocks = 4, .flags = BOTH},
    };
    tpx_sock_hello_t h = {.kind = TPX_SOCK_HELLO_REJOIN_DATA,
                          .index = 2,
                          .nsocks = 4,
                          .flags = BOTH,
                          .nonce = NONCE,
                          .conn_id = 0xc};
    int which = -1;
    EXPECT(admit(h, keys, 3, &which) == SOCK_RJ_OK && which == 2);

    /* the nonce alone is not enough, nor the conn_id alone */
    which = -1;
    tpx_sock_hello_t x = h;
    x.conn_id = 0xd;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_NO_COMM && which == -1);
    x = h;
    x.nonce = NONCE ^ 1;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_NONCE && which == -1);
    /* a comm made by an older connector (no REJOIN flag) takes none */
    x = h;
    x.conn_id = 0xb;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_NOT_REJOINING);
    /* the comm's shape */
    x = h;
    x.nsocks = 8;
    x.index = 6;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_CONFLICT);
    x = h;
    x.conn_id = 0xa; /* 8 connections; the hello says 4 */
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_CONFLICT);
    /* hellos that make comms are not rejoins */
    x = h;
    x.kind = TPX_SOCK_HELLO_DATA;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_MALFORMED);
    x.kind = TPX_SOCK_HELLO_CTRL;
    x.index = 0;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_MALFORMED);
    /* a rejoin without its flags does not even decode */
    x = h;
    x.flags = TPX_SOCK_HELLO_ACKS;
    EXPECT(admit(x, keys, 3, &which) == -1);
    /* a failed comm stays failed; one new connection per index at a time */
    keys[2].failed = 1;
    EXPECT(admit(h, keys, 3, &which) == SOCK_RJ_FAILED);
    keys[2].failed = 0;
    keys[2].taking = 1u << 2;
    EXPECT(admit(h, keys, 3, &which) == SOCK_RJ_BUSY);
    x = h;
    x.index = 3;
    which = -1;
    EXPECT(admit(x, keys, 3, &which) == SOCK_RJ_OK && which == 2);
    /* no comm at all */
    EXPECT(admit(h, keys, 0, &which) == SOCK_RJ_NO_COMM);

    if (fails == 0)
        printf("test_sock_rejoin: OK\n");
    return fails != 0;
}
