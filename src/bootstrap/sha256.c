/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha256.c - SHA-256 per FIPS 180-4 section 6.2, HMAC per RFC 2104.
 *
 * Written for clarity over speed: the bootstrap hashes a few hundred bytes
 * per connection. Words are loaded and stored big-endian byte by byte so
 * the code has no alignment or host byte-order assumptions.
 */
#include "sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, unsigned n)
{
    return (x >> n) | (x << (32 - n));
}

static uint32_t load_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

void tpx__secure_zero(void *p, size_t n)
{
    volatile uint8_t *v = p;
    while (n--)
        *v++ = 0;
}

/* One 64-byte block into the chaining value (FIPS 180-4 6.2.2). */
static void compress(uint32_t h[8], const uint8_t *blk)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(blk + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = k + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
    tpx__secure_zero(w, sizeof(w));
}

void tpx__sha256_init(tpx_sha256_ctx_t *ctx)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(ctx->h, iv, sizeof(iv));
    ctx->nbytes = 0;
    ctx->nblock = 0;
}

void tpx__sha256_update(tpx_sha256_ctx_t *ctx, const void *data, size_t len)
{
    if (len == 0)
        return; /* data may be NULL */
    const uint8_t *p = data;
    ctx->nbytes += len;
    if (ctx->nblock > 0) {
        size_t take = TPX_SHA256_BLOCK_SIZE - ctx->nblock;
        if (take > len)
            take = len;
        memcpy(ctx->block + ctx->nblock, p, take);
        ctx->nblock += take;
        p += take;
        len -= take;
        if (ctx->nblock < TPX_SHA256_BLOCK_SIZE)
            return;
        compress(ctx->h, ctx->block);
        ctx->nblock = 0;
    }
    while (len >= TPX_SHA256_BLOCK_SIZE) {
        compress(ctx->h, p);
        p += TPX_SHA256_BLOCK_SIZE;
        len -= TPX_SHA256_BLOCK_SIZE;
    }
    if (len > 0) {
        memcpy(ctx->block, p, len);
        ctx->nblock = len;
    }
}

void tpx__sha256_final(tpx_sha256_ctx_t *ctx, uint8_t out[TPX_SHA256_DIGEST_SIZE])
{
    /* Padding (FIPS 180-4 5.1.1): 0x80, zeros to 56 mod 64, then the
     * message length in bits as a 64-bit big-endian integer. */
    uint64_t bits = ctx->nbytes * 8;
    ctx->block[ctx->nblock++] = 0x80;
    if (ctx->nblock > 56) {
        memset(ctx->block + ctx->nblock, 0, TPX_SHA256_BLOCK_SIZE - ctx->nblock);
        compress(ctx->h, ctx->block);
        ctx->nblock = 0;
    }
    memset(ctx->block + ctx->nblock, 0, 56 - ctx->nblock);
    store_be32(ctx->block + 56, (uint32_t)(bits >> 32));
    store_be32(ctx->block + 60, (uint32_t)bits);
    compress(ctx->h, ctx->block);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, ctx->h[i]);
    tpx__secure_zero(ctx, sizeof(*ctx));
}

void tpx__sha256(const void *data, size_t len, uint8_t out[TPX_SHA256_DIGEST_SIZE])
{
    tpx_sha256_ctx_t ctx;
    tpx__sha256_init(&ctx);
    tpx__sha256_update(&ctx, data, len);
    tpx__sha256_final(&ctx, out);
}

void tpx__hmac_sha256_init(tpx_hmac_sha256_ctx_t *ctx, const void *key, size_t keylen)
{
    uint8_t k[TPX_SHA256_BLOCK_SIZE] = {0};
    if (keylen > TPX_SHA256_BLOCK_SIZE)
        tpx__sha256(key, keylen, k);
    else if (keylen > 0)
        memcpy(k, key, keylen);
    uint8_t ikey[TPX_SHA256_BLOCK_SIZE];
    for (int i = 0; i < TPX_SHA256_BLOCK_SIZE; i++) {
        ikey[i] = k[i] ^ 0x36;
        ctx->okey[i] = k[i] ^ 0x5c;
    }
    tpx__sha256_init(&ctx->inner);
    tpx__sha256_update(&ctx->inner, ikey, sizeof(ikey));
    tpx__secure_zero(k, sizeof(k));
    tpx__secure_zero(ikey, sizeof(ikey));
}

void tpx__hmac_sha256_update(tpx_hmac_sha256_ctx_t *ctx, const void *data, size_t len)
{
    tpx__sha256_update(&ctx->inner, data, len);
}

void tpx__hmac_sha256_final(tpx_hmac_sha256_ctx_t *ctx, uint8_t out[TPX_SHA256_DIGEST_SIZE])
{
    uint8_t ih[TPX_SHA256_DIGEST_SIZE];
    tpx__sha256_final(&ctx->inner, ih);
    tpx_sha256_ctx_t outer;
    tpx__sha256_init(&outer);
    tpx__sha256_update(&outer, ctx->okey, sizeof(ctx->okey));
    tpx__sha256_update(&outer, ih, sizeof(ih));
    tpx__sha256_final(&outer, out);
    tpx__secure_zero(ih, sizeof(ih));
    tpx__secure_zero(ctx, sizeof(*ctx));
}

void tpx__hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
                      uint8_t out[TPX_SHA256_DIGEST_SIZE])
{
    tpx_hmac_sha256_ctx_t ctx;
    tpx__hmac_sha256_init(&ctx, key, keylen);
    tpx__hmac_sha256_update(&ctx, msg, msglen);
    tpx__hmac_sha256_final(&ctx, out);
}

int tpx__ct_equal(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (uint8_t)(x[i] ^ y[i]);
    /* Map 0 -> 1 and 1..255 -> 0 without a data-dependent branch. */
    return (int)(1 & (((uint32_t)diff - 1) >> 8));
}
