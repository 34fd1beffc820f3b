/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), self-contained.
 *
 * Used by the bootstrap handshake to prove knowledge of TPX_AUTH_TOKEN
 * without sending it. Not a general crypto library: no key schedule caching,
 * no SIMD. Every function is pure (no global state) and thread-safe.
 */
#ifndef TPX_BOOTSTRAP_SHA256_H
#define TPX_BOOTSTRAP_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TPX_SHA256_DIGEST_SIZE 32
#define TPX_SHA256_BLOCK_SIZE  64

/* Streaming SHA-256 state. Initialise with tpx__sha256_init(); the fields
 * are private to sha256.c. */
typedef struct {
    uint32_t h[8];                        /* chaining value */
    uint64_t nbytes;                      /* message bytes absorbed so far */
    uint8_t block[TPX_SHA256_BLOCK_SIZE]; /* partial block */
    size_t nblock;                        /* bytes used in `block`, < 64 */
} tpx_sha256_ctx_t;

void tpx__sha256_init(tpx_sha256_ctx_t *ctx);
/* Absorb `len` bytes (`data` may be NULL when len is 0). */
void tpx__sha256_update(tpx_sha256_ctx_t *ctx, const void *data, size_t len);
/* Write the digest to `out` and wipe the state. */
void tpx__sha256_final(tpx_sha256_ctx_t *ctx, uint8_t out[TPX_SHA256_DIGEST_SIZE]);
/* One-shot digest of `len` bytes. */
void tpx__sha256(const void *data, size_t len, uint8_t out[TPX_SHA256_DIGEST_SIZE]);

/* Streaming HMAC-SHA256 state: inner hash plus the outer padded key. */
typedef struct {
    tpx_sha256_ctx_t inner;
    uint8_t okey[TPX_SHA256_BLOCK_SIZE]; /* key XOR 0x5c, private */
} tpx_hmac_sha256_ctx_t;

/* Keys longer than 64 bytes are hashed first (RFC 2104). */
void tpx__hmac_sha256_init(tpx_hmac_sha256_ctx_t *ctx, const void *key, size_t keylen);
void tpx__hmac_sha256_update(tpx_hmac_sha256_ctx_t *ctx, const void *data, size_t len);
/* Write the MAC to `out` and wipe the state (key material included). */
void tpx__hmac_sha256_final(tpx_hmac_sha256_ctx_t *ctx, uint8_t out[TPX_SHA256_DIGEST_SIZE]);
void tpx__hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen,
                      uint8_t out[TPX_SHA256_DIGEST_SIZE]);

/* 1 if the `n` bytes at `a` and `b` are equal, else 0. The time taken
 * depends only on `n`, never on where the buffers differ. */
int tpx__ct_equal(const void *a, const void *b, size_t n);

/* Overwrite `n` bytes with zeros in a way the compiler may not elide. */
void tpx__secure_zero(void *p, size_t n);

#endif
