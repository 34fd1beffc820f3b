/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_bs.c - libFuzzer target for every parser of bootstrap bytes
 * (src/bootstrap): the frame header, HELLO/CHALLENGE/AUTH, INFO, and the
 * connection's stream parser (server and client side of the handshake, and
 * messages after it), fed through a socketpair.
 *
 * The first input byte picks the target (fuzz.h); the rest is the data.
 * Whatever a payload decoder accepts must encode back to the same bytes;
 * a property that breaks aborts, which libFuzzer reports as a crash.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "fuzz.h"

static void feed_conn(int side, const uint8_t *d, size_t n)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return;
    const char *token = (side & 4) ? "fuzz" : NULL;
    tpx_bs_conn_t *c = NULL, *peer = NULL;
    uint64_t deadline = tpx__now_ns() + 1000000000ull;
    tpx_status_t st;
    int wfd = sv[1];
    if ((side & 3) == 0) {
        st = tpx__bs_server_start(sv[0], token, deadline, &c);
    } else if ((side & 3) == 1) {
        st = tpx__bs_client_start_fd(sv[0], token, deadline, &c);
    } else { /* after a real handshake: bytes from the client's socket */
        st = tpx__bs_client_start_fd(sv[0], token, deadline, &peer);
        if (st == TPX_OK)
            st = tpx__bs_server_start(sv[1], token, deadline, &c);
        for (int i = 0; st == TPX_OK && i < 100; i++) {
            tpx_status_t a = tpx__bs_advance(peer), b = tpx__bs_advance(c);
            TPX_FUZZ_CHECK(a >= 0 && b >= 0, "a good handshake failed");
            if (a == TPX_OK && b == TPX_OK)
                break;
        }
        wfd = sv[0];
    }
    TPX_FUZZ_CHECK(st == TPX_OK, "a connection over a socketpair did not start");
    if (n > 0 && write(wfd, d, n) != (ssize_t)n) {
        /* over the socket buffer: feed what fits */
    }
    shutdown(wfd, SHUT_WR);
    for (int i = 0; i < 100000; i++) {
        if ((side & 3) >= 2) {
            static unsigned char buf[TPX_BS_MAX_MSG];
            uint16_t type;
            uint32_t len;
            st = tpx__bs_recv(c, &type, buf, sizeof(buf), &len);
            if (st == TPX_OK)
                continue;
        } else {
            st = tpx__bs_advance(c);
        }
        if (st != TPX_INPROGRESS)
            break;
    }
    tpx__bs_close(c);
    tpx__bs_close(peer);
    if ((side & 3) < 2) /* else the server connection owned it */
        close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tpx__log_level = TPX_LOG_NONE;
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch (sel % 8) {
    case TPX_FUZZ_BS_HDR: {
        unsigned char *in = tpx_fuzz_fixed(data, size, TPX_BS_HDR_SIZE);
        uint32_t max_len = size >= TPX_BS_HDR_SIZE + 4
                               ? (uint32_t)data[12] << 24 | (uint32_t)data[13] << 16 |
                                     (uint32_t)data[14] << 8 | data[15]
                               : TPX_BS_MAX_MSG;
        tpx_bs_hdr_t h;
        const char *why = NULL;
        if (tpx__bs_hdr_decode(in, max_len, &h, &why) == TPX_OK) {
            unsigned char out[TPX_BS_HDR_SIZE];
            tpx__bs_hdr_encode(h.type, h.len, out);
            TPX_FUZZ_CHECK(h.len <= max_len && h.len <= TPX_BS_MAX_MSG, "hdr: length");
            TPX_FUZZ_CHECK(memcmp(out, in, TPX_BS_HDR_SIZE) == 0,
                           "hdr: decode . encode is not the identity");
        } else {
            TPX_FUZZ_CHECK(why != NULL && why[0] != '\0', "hdr: refused without a reason");
        }
        free(in);
        break;
    }
    case TPX_FUZZ_BS_HANDSHAKE: {
        /* Each decoder sees the input at its own length, so that it is
         * accepted as often as refused. */
        unsigned char out[TPX_BS_CHALLENGE_SIZE];
        unsigned char *in = tpx_fuzz_fixed(data, size, TPX_BS_HELLO_SIZE);
        tpx_bs_hello_t h;
        if (tpx__bs_hello_decode(in, TPX_BS_HELLO_SIZE, &h) == TPX_OK) {
            tpx__bs_hello_encode(&h, out);
            TPX_FUZZ_CHECK(memcmp(out, in, TPX_BS_HELLO_SIZE) == 0, "hello: not the identity");
        }
        free(in);
        in = tpx_fuzz_fixed(data, size, TPX_BS_CHALLENGE_SIZE);
        tpx_bs_challenge_t c;
        if (tpx__bs_challenge_decode(in, TPX_BS_CHALLENGE_SIZE, &c) == TPX_OK) {
            tpx__bs_challenge_encode(&c, out);
            TPX_FUZZ_CHECK(memcmp(out, in, TPX_BS_CHALLENGE_SIZE) == 0,
                           "challenge: not the identity");
        }
        free(in);
        in = tpx_fuzz_fixed(data, size, TPX_BS_AUTH_SIZE);
        tpx_bs_auth_t a;
        if (tpx__bs_auth_decode(in, TPX_BS_AUTH_SIZE, &a) == TPX_OK) {
            tpx__bs_auth_encode(&a, out);
            TPX_FUZZ_CHECK(memcmp(out, in, TPX_BS_AUTH_SIZE) == 0, "auth: not the identity");
        }
        free(in);
        /* and at the input's own length, which they must refuse unless exact */
        (void)tpx__bs_hello_decode(data, (uint32_t)size, &h);
        (void)tpx__bs_challenge_decode(data, (uint32_t)size, &c);
        (void)tpx__bs_auth_decode(data, (uint32_t)size, &a);
        break;
    }
    case TPX_FUZZ_BS_INFO: {
        static tpx_bs_info_t info;
        if (tpx__bs_info_decode(data, (uint32_t)size, &info) == TPX_OK) {
            static unsigned char out[TPX_BS_INFO_MAX_SIZE];
            uint32_t len;
            TPX_FUZZ_CHECK(tpx__bs_info_encode(&info, out, sizeof(out), &len) == TPX_OK &&
                               len == size && memcmp(out, data, len) == 0,
                           "info: decode . encode is not the identity");
        }
        break;
    }
    default:
        feed_conn(sel >> 3, data, size > 65536 ? 65536 : size);
        break;
    }
    return 0;
}
