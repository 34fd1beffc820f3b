/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz.h - what the libFuzzer targets of tests/fuzz share with each other
 * and with the seed generator (fuzz_seeds.c): the selector byte of each
 * target, the property check, and exact-size copies of inputs.
 *
 * Every target reads its first input byte as a selector (which decoder)
 * and the rest as that decoder's input, so one target per parser family
 * covers all of its decoders and a seed file is "selector byte + a valid
 * message made by the encoder".
 */
#ifndef TPX_TESTS_FUZZ_H
#define TPX_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* fuzz_bs: selector % 8; 3..7 feed a connection (see fuzz_bs.c), whose
 * side and token come from selector >> 3. */
enum {
    TPX_FUZZ_BS_HDR = 0,
    TPX_FUZZ_BS_HANDSHAKE = 1,
    TPX_FUZZ_BS_INFO = 2,
    TPX_FUZZ_BS_CONN = 3,
};
#define TPX_FUZZ_BS_CONN_SEL(side) ((uint8_t)(TPX_FUZZ_BS_CONN + 8 * (side)))
#define TPX_FUZZ_BS_SERVER         0 /* bytes a client sends to a server */
#define TPX_FUZZ_BS_CLIENT         1 /* bytes a server sends to a client */
#define TPX_FUZZ_BS_AFTER          2 /* messages after a real handshake */
#define TPX_FUZZ_BS_TOKEN          4 /* or'ed in: both sides hold a token */

/* fuzz_wire: selector % 8. */
enum {
    TPX_FUZZ_WIRE_CTRL = 0,
    TPX_FUZZ_WIRE_LIST = 1, /* 2 bytes of chunk size, then the list */
    TPX_FUZZ_WIRE_RDESC = 2,
    TPX_FUZZ_WIRE_RDESC_SUM = 3, /* checksum fixed up before decoding */
    TPX_FUZZ_WIRE_MD = 4,
    TPX_FUZZ_WIRE_MD_SUM = 5, /* checksum fixed up before decoding */
    TPX_FUZZ_WIRE_IDENT = 6,
    TPX_FUZZ_WIRE_READY = 7,
};

/* fuzz_sock: selector % 3. */
enum {
    TPX_FUZZ_SOCK_HELLO = 0,
    TPX_FUZZ_SOCK_PIECE = 1,
    TPX_FUZZ_SOCK_HANDLE = 2,
};

/* fuzz_reg: selector % 6; for HTTP, selector >> 3 & 15 = log2 of the read size. */
enum {
    TPX_FUZZ_REG_HTTP = 0,
    TPX_FUZZ_REG_JSON = 1,
    TPX_FUZZ_REG_ANSWER = 2,
    TPX_FUZZ_REG_VALUE = 3,
    TPX_FUZZ_REG_B64 = 4,
    TPX_FUZZ_REG_URL = 5,
};

/* A property that must hold: on failure say which and abort (libFuzzer
 * saves the input as a crash). Not assert(): it must hold under NDEBUG. */
#define TPX_FUZZ_CHECK(cond, what)                                                                 \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__, what);             \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A heap copy of exactly n bytes of data (zero-padded past size, extra
 * input ignored), so that ASan flags any read past n. Caller frees. */
static inline unsigned char *tpx_fuzz_fixed(const uint8_t *data, size_t size, size_t n)
{
    unsigned char *p = malloc(n > 0 ? n : 1);
    TPX_FUZZ_CHECK(p != NULL, "out of memory");
    memset(p, 0, n);
    if (size > 0 && n > 0)
        memcpy(p, data, size < n ? size : n);
    return p;
}

#endif
