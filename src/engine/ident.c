/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ident.c - engine identity: Ed25519 keys from libsodium, loaded with
 * dlopen at run time (libtpx links only libc), and the derived engine id.
 * See ident.h for the two modes. No cryptography is written here: keys,
 * signatures and randomness come from libsodium; the id digest and the
 * transcript use the bootstrap's SHA-256.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/sha256.h"
#include "common/bytes.h"
#include "common/config.h"
#include "common/log.h"
#include "ident.h"

/* The few libsodium entry points used (their documented prototypes). */
typedef struct {
    void *dl;
    int (*init)(void);
    int (*keypair)(unsigned char *pk, unsigned char *sk);
    int (*seed_keypair)(unsigned char *pk, unsigned char *sk, const unsigned char *seed);
    int (*sign)(unsigned char *sig, unsigned long long *siglen, const unsigned char *m,
                unsigned long long mlen, const unsigned char *sk);
    int (*verify)(const unsigned char *sig, const unsigned char *m, unsigned long long mlen,
                  const unsigned char *pk);
    void (*randombytes)(void *buf, size_t len);
    int ok;
} sodium_t;

static sodium_t sodium;
static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void sodium_load(void)
{
    const char *mode = tpx__config_str(TPX_CFG_IDENTITY);
    if (mode != NULL && strcmp(mode, "dial") == 0)
        return;
    static const char *const names[] = {"libsodium.so.23", "libsodium.so.26", "libsodium.so"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && sodium.dl == NULL; i++)
        sodium.dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (sodium.dl == NULL) {
        TPX_INFO("identity: libsodium not found: engines are not proven by keys (a remote is "
                 "served only by the connection dialed to its metadata's address)");
        return;
    }
    *(void **)&sodium.init = dlsym(sodium.dl, "sodium_init");
    *(void **)&sodium.keypair = dlsym(sodium.dl, "crypto_sign_ed25519_keypair");
    *(void **)&sodium.seed_keypair = dlsym(sodium.dl, "crypto_sign_ed25519_seed_keypair");
    *(void **)&sodium.sign = dlsym(sodium.dl, "crypto_sign_ed25519_detached");
    *(void **)&sodium.verify = dlsym(sodium.dl, "crypto_sign_ed25519_verify_detached");
    *(void **)&sodium.randombytes = dlsym(sodium.dl, "randombytes_buf");
    if (sodium.init == NULL || sodium.keypair == NULL || sodium.seed_keypair == NULL ||
        sodium.sign == NULL || sodium.verify == NULL || sodium.randombytes == NULL ||
        sodium.init() < 0) {
        TPX_WARN("identity: libsodium is incomplete or failed to initialise: not used");
        return;
    }
    sodium.ok = 1;
}

int tpx__ident_available(void)
{
    pthread_once(&sodium_once, sodium_load);
    return sodium.ok;
}

uint64_t tpx__ident_id(const unsigned char pk[TPX_IDENT_PK])
{
    tpx_sha256_ctx_t c;
    uint8_t d[TPX_SHA256_DIGEST_SIZE];
    tpx__sha256_init(&c);
    tpx__sha256_update(&c, "tpx-engine-id", 13);
    tpx__sha256_update(&c, pk, TPX_IDENT_PK);
    tpx__sha256_final(&c, d);
    uint64_t id = tpx__get64(d);
    return id ? id : 1;
}

tpx_status_t tpx__ident_keypair(unsigned char pk[TPX_IDENT_PK], unsigned char sk[TPX_IDENT_SK])
{
    if (!tpx__ident_available())
        return TPX_ERR_UNSUPPORTED;
    if (sodium.keypair(pk, sk) != 0) {
        TPX_ERROR("identity: libsodium could not make a key pair");
        return TPX_ERR_INTERNAL;
    }
    return TPX_OK;
}

tpx_status_t tpx__ident_seed_keypair(const unsigned char seed[TPX_IDENT_SEED],
                                     unsigned char pk[TPX_IDENT_PK], unsigned char sk[TPX_IDENT_SK])
{
    if (!tpx__ident_available())
        return TPX_ERR_UNSUPPORTED;
    return sodium.seed_keypair(pk, sk, seed) == 0 ? TPX_OK : TPX_ERR_INTERNAL;
}

void tpx__ident_message(int signer_is_client, const unsigned char transcript[TPX_IDENT_HASH],
                        const unsigned char client_info_hash[TPX_IDENT_HASH],
                        const unsigned char server_info_hash[TPX_IDENT_HASH],
                        const unsigned char pk[TPX_IDENT_PK], unsigned char out[TPX_IDENT_MSG_SIZE])
{
    memcpy(out, "tpx-ident-v1", 12);
    out[12] = signer_is_client ? 1 : 0;
    memcpy(out + 13, transcript, 32);
    memcpy(out + 45, client_info_hash, 32);
    memcpy(out + 77, server_info_hash, 32);
    memcpy(out + 109, pk, 32);
}

tpx_status_t tpx__ident_sign(const unsigned char sk[TPX_IDENT_SK], const unsigned char *msg,
                             size_t len, unsigned char sig[TPX_IDENT_SIG])
{
    if (!tpx__ident_available())
        return TPX_ERR_UNSUPPORTED;
    unsigned long long sl = 0;
    if (sodium.sign(sig, &sl, msg, len, sk) != 0 || sl != TPX_IDENT_SIG)
        return TPX_ERR_INTERNAL;
    return TPX_OK;
}

int tpx__ident_verify(const unsigned char pk[TPX_IDENT_PK], const unsigned char *msg, size_t len,
                      const unsigned char sig[TPX_IDENT_SIG])
{
    return tpx__ident_available() && sodium.verify(sig, msg, len, pk) == 0;
}

void tpx__ident_ticket(const unsigned char secret[TPX_IDENT_SECRET], const unsigned char id[16],
                       unsigned char ticket[32])
{
    tpx_hmac_sha256_ctx_t h;
    tpx__hmac_sha256_init(&h, secret, TPX_IDENT_SECRET);
    tpx__hmac_sha256_update(&h, "tpx-instance-ticket-v1", 22);
    tpx__hmac_sha256_update(&h, id, 16);
    tpx__hmac_sha256_final(&h, ticket);
}

void tpx__ident_proof(const unsigned char ticket[32],
                      const unsigned char transcript[TPX_IDENT_HASH],
                      const unsigned char client_info_hash[TPX_IDENT_HASH],
                      const unsigned char server_info_hash[TPX_IDENT_HASH], unsigned char proof[32])
{
    tpx_hmac_sha256_ctx_t h;
    tpx__hmac_sha256_init(&h, ticket, 32);
    tpx__hmac_sha256_update(&h, "tpx-instance-proof-v1", 21);
    tpx__hmac_sha256_update(&h, transcript, TPX_IDENT_HASH);
    tpx__hmac_sha256_update(&h, client_info_hash, TPX_IDENT_HASH);
    tpx__hmac_sha256_update(&h, server_info_hash, TPX_IDENT_HASH);
    tpx__hmac_sha256_final(&h, proof);
}

void tpx__ident_wrap(const char *token, const unsigned char transcript[TPX_IDENT_HASH],
                     unsigned char ticket[32])
{
    if (token == NULL || *token == '\0')
        return;
    unsigned char k[TPX_SHA256_DIGEST_SIZE];
    tpx_hmac_sha256_ctx_t h;
    tpx__hmac_sha256_init(&h, token, strlen(token));
    tpx__hmac_sha256_update(&h, "tpx-instance-wrap-v1", 20);
    tpx__hmac_sha256_update(&h, transcript, TPX_IDENT_HASH);
    tpx__hmac_sha256_final(&h, k);
    for (int i = 0; i < 32; i++)
        ticket[i] ^= k[i];
    tpx__secure_zero(k, sizeof(k));
}

/* ---- the engine's own identity ------------------------------------------------------------- */

#include "engine.h"

/* ident.c's part of the engine (e->ident): who this engine is. Written by
 * tpx__ident_engine_init before any other thread starts (and by a test
 * that poses as another engine, tpx__ident_pose), then read without the
 * lock; only this file sees inside: the others ask tpx__ident_*. */
struct tpx_ident_state {
    uint64_t id;               /* engine id: derived from pk (KEY mode) or random */
    int keys;                  /* KEY mode (ident.h): pk/sk are this engine's */
    unsigned char pk[TPX_IDENT_PK], sk[TPX_IDENT_SK];
    unsigned char inst_secret[TPX_IDENT_SECRET]; /* this instance's secret: its tickets
                                                    (ident.h INSTANCE) */
    char name[64];             /* shown to peers */
};

/* Once per process: what an engine without keys and without a token
 * trusts. A WARN, because it is weaker than what SECURITY.md recommends. */
static void dial_warn_once(void)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&said))
        return;
    TPX_WARN("identity: no keys (libsodium unavailable or TPX_IDENTITY=dial) and no "
             "TPX_AUTH_TOKEN: a remote is trusted to be the engine that first answers under its "
             "id at its metadata's address, and every reconnect must prove it is that same "
             "instance; whoever holds that address before the first connection, or sits on the "
             "network path, can pose as it (set TPX_AUTH_TOKEN, or install libsodium)");
}

const char *tpx__ident_name(const tpx_engine_t *e)
{
    return e->ident->name;
}

int tpx__ident_engine_keys(const tpx_engine_t *e, const unsigned char **pk,
                           const unsigned char **sk)
{
    if (!e->ident->keys)
        return 0;
    *pk = e->ident->pk;
    *sk = e->ident->sk;
    return 1;
}

int tpx__ident_keyed(const tpx_engine_t *e)
{
    return e->ident->keys;
}

uint64_t tpx__ident_engine_id(const tpx_engine_t *e)
{
    return e->ident->id;
}

void tpx__ident_engine_ticket(const tpx_engine_t *e, const unsigned char id[16],
                              unsigned char ticket[32])
{
    tpx__ident_ticket(e->ident->inst_secret, id, ticket);
}

void tpx__ident_pose(tpx_engine_t *e, uint64_t id, int keys, const char *name)
{
    if (id != 0)
        e->ident->id = id;
    if (keys >= 0)
        e->ident->keys = keys;
    if (name != NULL)
        snprintf(e->ident->name, sizeof(e->ident->name), "%s", name);
}

void tpx__ident_engine_fini(tpx_engine_t *e)
{
    if (e->ident == NULL)
        return;
    tpx__secure_zero(e->ident, sizeof(*e->ident));
    free(e->ident);
    e->ident = NULL;
}

tpx_status_t tpx__ident_engine_init(tpx_engine_t *e, const char *name)
{
    e->ident = calloc(1, sizeof(*e->ident));
    if (e->ident == NULL)
        return TPX_ERR_NO_MEMORY;
    snprintf(e->ident->name, sizeof(e->ident->name), "%s", name);
    tpx_status_t st = tpx__random_bytes(e->ident->inst_secret, sizeof(e->ident->inst_secret));
    if (st != TPX_OK)
        return st;
    st = tpx__ident_keypair(e->ident->pk, e->ident->sk);
    if (st == TPX_OK) {
        e->ident->keys = 1;
        e->ident->id = tpx__ident_id(e->ident->pk);
        TPX_INFO("engine %016llx: identity proven by an Ed25519 key (libsodium)",
                 (unsigned long long)e->ident->id);
        return TPX_OK;
    }
    if (st != TPX_ERR_UNSUPPORTED)
        return st;
    e->ident->keys = 0;
    do {
        if ((st = tpx__random_bytes(&e->ident->id, sizeof(e->ident->id))) != TPX_OK)
            return st;
    } while (e->ident->id == 0);
    TPX_INFO("engine %016llx: identity by dialing (no keys: %s); a remote is served only by a "
             "connection dialed to its metadata's address whose engine proves it is the instance "
             "first reached there", (unsigned long long)e->ident->id,
             tpx__ident_available() ? "?" : "libsodium unavailable or TPX_IDENTITY=dial");
    if (e->cfg.auth_token[0] == '\0')
        dial_warn_once();
    return TPX_OK;
}
