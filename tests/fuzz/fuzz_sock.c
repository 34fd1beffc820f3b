/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_sock.c - libFuzzer target for the built-in transport's wire
 * (src/plugin/sock/sock_wire.h): the hello that opens every connection,
 * the piece header of every data transfer, and the 128-byte connect handle
 * that NCCL carries between processes.
 *
 * The first input byte picks the decoder; the rest is the message, copied
 * into a heap block of exactly its wire size so that ASan sees any read
 * past its end. Whatever a decoder accepts must encode back to the bytes
 * it read. Fields the decoders do not check (and the encoders write as
 * zero) are left out of that comparison: the hello's u16 at 14, and in a
 * handle the bytes an IPv4 address does not use, the entries past naddrs,
 * the reserved bytes 112..119 and the connector's 120..127; a handle must
 * then survive decode . encode . decode unchanged.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "plugin/sock/sock_wire.h"

static void fuzz_hello(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, TPX_SOCK_HELLO_WIRE_SIZE);
    tpx_sock_hello_t h;
    if (tpx__sock_hello_decode(in, &h) == TPX_OK) {
        unsigned char out[TPX_SOCK_HELLO_WIRE_SIZE];
        tpx__sock_hello_encode(&h, out);
        TPX_FUZZ_CHECK(h.index < h.nsocks && h.nsocks <= TPX_SOCK_MAX_SOCKS, "hello: range");
        TPX_FUZZ_CHECK(memcmp(out, in, 14) == 0 && memcmp(out + 16, in + 16, 16) == 0,
                       "hello: decode . encode is not the identity");
    }
    free(in);
}

static void fuzz_piece(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, TPX_SOCK_PIECE_WIRE_SIZE);
    tpx_sock_piece_t p;
    if (tpx__sock_piece_decode(in, &p) == TPX_OK) {
        unsigned char out[TPX_SOCK_PIECE_WIRE_SIZE];
        tpx__sock_piece_encode(&p, out);
        TPX_FUZZ_CHECK(p.offset <= p.total && p.len <= p.total - p.offset, "piece: range");
        TPX_FUZZ_CHECK(memcmp(out, in, TPX_SOCK_PIECE_WIRE_SIZE) == 0,
                       "piece: decode . encode is not the identity");
    }
    free(in);
}

/* The bytes of address slot i (0: the first NIC) that a decoder reads. */
static int handle_addr_same(const unsigned char *a, const unsigned char *b, int v6, int i)
{
    int port, addr, scope;
    if (i == 0) {
        port = 8, addr = 12, scope = 28;
    } else {
        int o = TPX_SOCK_HANDLE_MORE_OFF + (i - 1) * TPX_SOCK_HANDLE_MORE_SIZE;
        port = o, addr = o + 8, scope = o + 4;
        if (memcmp(a + o + 2, b + o + 2, 2) != 0) /* reserved */
            return 0;
    }
    return memcmp(a + port, b + port, 2) == 0 && memcmp(a + addr, b + addr, v6 ? 16 : 4) == 0 &&
           (!v6 || memcmp(a + scope, b + scope, 4) == 0);
}

static void fuzz_handle(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, TPX_SOCK_HANDLE_SIZE);
    tpx_sock_handle_t h;
    if (tpx__sock_handle_decode(in, &h) == TPX_OK) {
        TPX_FUZZ_CHECK(h.naddrs >= 1 && h.naddrs <= TPX_SOCK_HANDLE_MAX_ADDRS, "handle: naddrs");
        unsigned char out[TPX_SOCK_HANDLE_SIZE];
        tpx__sock_handle_encode(&h, out);
        int v6 = h.addr.sa.sa_family == AF_INET6;
        int same = memcmp(out, in, 10) == 0 && memcmp(out + 32, in + 32, 8) == 0 &&
                   (memcmp(out + 10, in + 10, 2) == 0 || (in[10] == 0 && in[11] == 0));
        for (int i = 0; i < h.naddrs; i++) {
            const tpx_sock_addr_t *a = tpx__sock_handle_addr(&h, i);
            TPX_FUZZ_CHECK(a->sa.sa_family == h.addr.sa.sa_family, "handle: mixed families");
            char s[80];
            tpx__sock_addr_str(a, s, sizeof(s));
            TPX_FUZZ_CHECK(tpx__sock_addr_len(a) > 0 && s[0] != '\0', "handle: address");
            same = same && handle_addr_same(out, in, v6, i);
        }
        TPX_FUZZ_CHECK(same, "handle: decode . encode changed a field the decoder read");
        tpx_sock_handle_t h2;
        unsigned char out2[TPX_SOCK_HANDLE_SIZE];
        TPX_FUZZ_CHECK(tpx__sock_handle_decode(out, &h2) == TPX_OK, "handle: encoded is refused");
        tpx__sock_handle_encode(&h2, out2);
        TPX_FUZZ_CHECK(h2.naddrs == h.naddrs && h2.nonce == h.nonce &&
                           memcmp(out2, out, TPX_SOCK_HANDLE_SIZE) == 0,
                       "handle: decode . encode . decode changed it");
    }
    free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch (sel % 3) {
    case TPX_FUZZ_SOCK_HELLO:
        fuzz_hello(data, size);
        break;
    case TPX_FUZZ_SOCK_PIECE:
        fuzz_piece(data, size);
        break;
    case TPX_FUZZ_SOCK_HANDLE:
        fuzz_handle(data, size);
        break;
    }
    return 0;
}
