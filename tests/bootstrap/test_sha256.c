/* SPDX-License-Identifier: Apache-2.0 */
/* test_sha256.c - SHA-256 (FIPS 180-4 / NIST CAVS examples) and
 * HMAC-SHA256 (RFC 4231 test cases 1-7) vectors, streaming at every split
 * point, and the constant-time compare. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap/sha256.h"
#include "bs_test.h"

static void hex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static int digest_is(const uint8_t *d, const char *want, size_t n)
{
    uint8_t w[32];
    hex(want, w, n);
    return memcmp(d, w, n) == 0;
}

static void test_sha256(void)
{
    static const struct {
        const char *msg;
        const char *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    uint8_t d[32];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        tpx__sha256(v[i].msg, strlen(v[i].msg), d);
        EXPECT(digest_is(d, v[i].digest, 32));
    }
    /* One million 'a', fed in uneven pieces. */
    char *m = malloc(1000000);
    memset(m, 'a', 1000000);
    tpx_sha256_ctx_t ctx;
    tpx__sha256_init(&ctx);
    size_t off = 0, step = 1;
    while (off < 1000000) {
        size_t n = step < 1000000 - off ? step : 1000000 - off;
        tpx__sha256_update(&ctx, m + off, n);
        off += n;
        step = step * 7 % 1013 + 1;
    }
    tpx__sha256_final(&ctx, d);
    EXPECT(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32));
    tpx__sha256(m, 1000000, d);
    EXPECT(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32));
    free(m);

    /* Streaming in two pieces at every split point of messages around the
     * padding boundaries (55, 56, 63, 64, 119, 120 bytes, ...). */
    uint8_t msg[200];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i * 31 + 7);
    for (size_t len = 0; len <= sizeof(msg); len++) {
        uint8_t one[32];
        tpx__sha256(msg, len, one);
        for (size_t cut = 0; cut <= len; cut += (len > 70 ? 13 : 1)) {
            tpx__sha256_init(&ctx);
            tpx__sha256_update(&ctx, msg, cut);
            tpx__sha256_update(&ctx, NULL, 0);
            tpx__sha256_update(&ctx, msg + cut, len - cut);
            tpx__sha256_final(&ctx, d);
            EXPECT(memcmp(d, one, 32) == 0);
        }
    }
}

static void test_hmac(void)
{
    uint8_t k20_0b[20], k20_aa[20], k25[25], k20_0c[20], k131[131], d50_dd[50], d50_cd[50];
    memset(k20_0b, 0x0b, sizeof(k20_0b));
    memset(k20_aa, 0xaa, sizeof(k20_aa));
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    memset(k20_0c, 0x0c, sizeof(k20_0c));
    memset(k131, 0xaa, sizeof(k131));
    memset(d50_dd, 0xdd, sizeof(d50_dd));
    memset(d50_cd, 0xcd, sizeof(d50_cd));
    static const char tc6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    static const char tc7[] = "This is a test using a larger than block-size key and a larger than "
                              "block-size data. The key needs to be hashed before being used by "
                              "the HMAC algorithm.";
    const struct {
        const void *key;
        size_t keylen;
        const void *data;
        size_t datalen;
        const char *mac;
        size_t maclen;
    } v[] = {
        {k20_0b, 20, "Hi There", 8,
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32},
        {"Jefe", 4, "what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32},
        {k20_aa, 20, d50_dd, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
         32},
        {k25, 25, d50_cd, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
         32},
        {k20_0c, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b", 16},
        {k131, 131, tc6, sizeof(tc6) - 1,
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32},
        {k131, 131, tc7, sizeof(tc7) - 1,
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t d[32];
        tpx__hmac_sha256(v[i].key, v[i].keylen, v[i].data, v[i].datalen, d);
        if (!digest_is(d, v[i].mac, v[i].maclen)) {
            fprintf(stderr, "RFC 4231 test case %zu failed\n", i + 1);
            EXPECT(0);
        }
        /* Streaming, byte by byte. */
        tpx_hmac_sha256_ctx_t h;
        tpx__hmac_sha256_init(&h, v[i].key, v[i].keylen);
        for (size_t j = 0; j < v[i].datalen; j++)
            tpx__hmac_sha256_update(&h, (const uint8_t *)v[i].data + j, 1);
        uint8_t d2[32];
        tpx__hmac_sha256_final(&h, d2);
        EXPECT(memcmp(d, d2, 32) == 0);
    }
    /* A 64-byte key is used as is, a 65-byte one hashed: both differ. */
    uint8_t k65[65], a[32], b[32];
    memset(k65, 0x42, sizeof(k65));
    tpx__hmac_sha256(k65, 64, "x", 1, a);
    tpx__hmac_sha256(k65, 65, "x", 1, b);
    EXPECT(memcmp(a, b, 32) != 0);
}

static void test_ct_equal(void)
{
    uint8_t a[64], b[64];
    for (int i = 0; i < 64; i++)
        a[i] = b[i] = (uint8_t)i;
    EXPECT_EQ(tpx__ct_equal(a, b, 64), 1);
    EXPECT_EQ(tpx__ct_equal(a, b, 0), 1);
    for (int i = 0; i < 64; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            EXPECT_EQ(tpx__ct_equal(a, b, 64), 0);
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    EXPECT_EQ(tpx__ct_equal(a, b, 64), 1);
    uint8_t z[4] = {0}, f[4] = {0xff, 0xff, 0xff, 0xff};
    EXPECT_EQ(tpx__ct_equal(z, f, 4), 0);
}

int main(void)
{
    test_sha256();
    test_hmac();
    test_ct_equal();
    TEST_DONE();
}
