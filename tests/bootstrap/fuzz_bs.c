/*
 * fuzz_bs.c - libFuzzer target for every parser of bootstrap bytes: the
 * frame header, HELLO/CHALLENGE/AUTH, INFO, and the connection's stream
 * parser (server and client side of the handshake, and messages after it),
 * fed through a socketpair.
 *
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I include -I src \
 *       tests/bootstrap/fuzz_bs.c <the .c files of src/bootstrap and src/common> \
 *       -lpthread -o fuzz_bs
 *   ./fuzz_bs -max_total_time=60
 *
 * The first input byte picks the target; the rest is the data.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "common/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
            if (a < 0 || b < 0)
                abort(); /* a good handshake must not fail */
            if (a == TPX_OK && b == TPX_OK)
                break;
        }
        wfd = sv[0];
    }
    if (st != TPX_OK)
        abort();
    if (n > 0 && write(wfd, d, n) != (ssize_t)n) {
        /* over the socket buffer: feed what fits */
    }
    shutdown(wfd, SHUT_WR);
    for (int i = 0; i < 100000; i++) {
        if ((side & 3) == 2) {
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
    if ((side & 3) != 2)
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
    case 0:
        if (size >= TPX_BS_HDR_SIZE) {
            tpx_bs_hdr_t h;
            (void)tpx__bs_hdr_decode(data, (uint32_t)size, &h, NULL);
        }
        break;
    case 1: {
        tpx_bs_hello_t h;
        tpx_bs_challenge_t c;
        tpx_bs_auth_t a;
        (void)tpx__bs_hello_decode(data, (uint32_t)size, &h);
        (void)tpx__bs_challenge_decode(data, (uint32_t)size, &c);
        (void)tpx__bs_auth_decode(data, (uint32_t)size, &a);
        break;
    }
    case 2: {
        static tpx_bs_info_t info;
        if (tpx__bs_info_decode(data, (uint32_t)size, &info) == TPX_OK) {
            static unsigned char out[TPX_BS_INFO_MAX_SIZE];
            uint32_t len;
            if (tpx__bs_info_encode(&info, out, sizeof(out), &len) != TPX_OK || len != size ||
                memcmp(out, data, len) != 0)
                abort(); /* decode . encode must be the identity */
        }
        break;
    }
    default:
        feed_conn(sel >> 3, data, size > 65536 ? 65536 : size);
        break;
    }
    return 0;
}
