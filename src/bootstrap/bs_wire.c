/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bs_wire.c - encoding and checked decoding of the bootstrap's wire data.
 *
 * Pure functions: no I/O, no allocation, no logging, so they can be fuzzed
 * on their own. Decoders look at nothing beyond `len` bytes and write their
 * output only after every check has passed.
 */
#include <endian.h>
#include <string.h>

#include "common/bytes.h"
#include "bootstrap.h"
#include "sha256.h"

_Static_assert(TPX_BS_INFO_MAX_SIZE <= TPX_BS_MAX_MSG, "INFO must fit in one frame");
_Static_assert(TPX_BS_HELLO_SIZE == TPX_BS_NONCE_SIZE + 4, "HELLO layout");
_Static_assert(TPX_BS_CHALLENGE_SIZE == TPX_BS_NONCE_SIZE + TPX_BS_MAC_SIZE + 4,
               "CHALLENGE layout");
_Static_assert(TPX_BS_AUTH_SIZE == TPX_BS_MAC_SIZE, "AUTH layout");
_Static_assert(TPX_BS_INFO_FIXED_SIZE == 20 + 2 * TPX_BS_PLUGIN_NAME_SIZE, "INFO layout");


/* ---- frame header ---------------------------------------------------------- */

void tpx__bs_hdr_encode(uint16_t type, uint32_t len, void *buf12)
{
    unsigned char *p = buf12;
    tpx__put32(p + 0, TPX_BS_MAGIC);
    tpx__put16(p + 4, TPX_BS_VERSION);
    tpx__put16(p + 6, type);
    tpx__put32(p + 8, len);
}

tpx_status_t tpx__bs_hdr_decode(const void *buf12, uint32_t max_len, tpx_bs_hdr_t *out,
                                const char **why)
{
    const unsigned char *p = buf12;
    const char *reason = NULL;
    uint32_t len = tpx__get32(p + 8);
    if (max_len > TPX_BS_MAX_MSG)
        max_len = TPX_BS_MAX_MSG;
    if (tpx__get32(p) != TPX_BS_MAGIC)
        reason = "bad magic: not a tpx bootstrap peer";
    else if (tpx__get16(p + 4) != TPX_BS_VERSION)
        reason = "unsupported bootstrap version (the peer runs another tpx release: run one "
                 "release on both sides)";
    else if (len > max_len)
        reason = "length over limit";
    if (reason != NULL) {
        if (why != NULL)
            *why = reason;
        return TPX_ERR_PROTOCOL;
    }
    out->type = tpx__get16(p + 6);
    out->len = len;
    return TPX_OK;
}

/* ---- handshake payloads ------------------------------------------------------ */

void tpx__bs_hello_encode(const tpx_bs_hello_t *in, void *buf)
{
    unsigned char *p = buf;
    memcpy(p, in->nonce, TPX_BS_NONCE_SIZE);
    tpx__put32(p + TPX_BS_NONCE_SIZE, in->flags);
}

tpx_status_t tpx__bs_hello_decode(const void *buf, uint32_t len, tpx_bs_hello_t *out)
{
    const unsigned char *p = buf;
    if (len != TPX_BS_HELLO_SIZE)
        return TPX_ERR_PROTOCOL;
    uint32_t flags = tpx__get32(p + TPX_BS_NONCE_SIZE);
    if ((flags & ~TPX_BS_FLAG_AUTH) != 0)
        return TPX_ERR_PROTOCOL;
    memcpy(out->nonce, p, TPX_BS_NONCE_SIZE);
    out->flags = flags;
    return TPX_OK;
}

void tpx__bs_challenge_encode(const tpx_bs_challenge_t *in, void *buf)
{
    unsigned char *p = buf;
    memcpy(p, in->nonce, TPX_BS_NONCE_SIZE);
    memcpy(p + TPX_BS_NONCE_SIZE, in->mac, TPX_BS_MAC_SIZE);
    tpx__put32(p + TPX_BS_NONCE_SIZE + TPX_BS_MAC_SIZE, in->flags);
}

tpx_status_t tpx__bs_challenge_decode(const void *buf, uint32_t len, tpx_bs_challenge_t *out)
{
    const unsigned char *p = buf;
    if (len != TPX_BS_CHALLENGE_SIZE)
        return TPX_ERR_PROTOCOL;
    uint32_t flags = tpx__get32(p + TPX_BS_NONCE_SIZE + TPX_BS_MAC_SIZE);
    if ((flags & ~TPX_BS_FLAG_AUTH) != 0)
        return TPX_ERR_PROTOCOL;
    if (!(flags & TPX_BS_FLAG_AUTH) && !tpx__all_zero(p + TPX_BS_NONCE_SIZE, TPX_BS_MAC_SIZE))
        return TPX_ERR_PROTOCOL;
    memcpy(out->nonce, p, TPX_BS_NONCE_SIZE);
    memcpy(out->mac, p + TPX_BS_NONCE_SIZE, TPX_BS_MAC_SIZE);
    out->flags = flags;
    return TPX_OK;
}

void tpx__bs_auth_encode(const tpx_bs_auth_t *in, void *buf)
{
    memcpy(buf, in->mac, TPX_BS_MAC_SIZE);
}

tpx_status_t tpx__bs_auth_decode(const void *buf, uint32_t len, tpx_bs_auth_t *out)
{
    if (len != TPX_BS_AUTH_SIZE)
        return TPX_ERR_PROTOCOL;
    memcpy(out->mac, buf, TPX_BS_MAC_SIZE);
    return TPX_OK;
}

void tpx__bs_handshake_mac(const char *token, tpx_bs_mac_role_t role,
                           const uint8_t n1[TPX_BS_NONCE_SIZE], const uint8_t n2[TPX_BS_NONCE_SIZE],
                           uint8_t out[TPX_BS_MAC_SIZE])
{
    if (token == NULL || *token == '\0') {
        memset(out, 0, TPX_BS_MAC_SIZE);
        return;
    }
    /* The role label keeps a server mac from ever being accepted as a
     * client mac (and vice versa) even if the nonces were swapped. */
    static const char label_server[10] = "tpx-server";
    static const char label_client[10] = "tpx-client";
    tpx_hmac_sha256_ctx_t h;
    tpx__hmac_sha256_init(&h, token, strlen(token));
    tpx__hmac_sha256_update(&h, role == TPX_BS_MAC_SERVER ? label_server : label_client, 10);
    tpx__hmac_sha256_update(&h, n1, TPX_BS_NONCE_SIZE);
    tpx__hmac_sha256_update(&h, n2, TPX_BS_NONCE_SIZE);
    tpx__hmac_sha256_final(&h, out);
}

/* ---- INFO ---------------------------------------------------------------------- */

tpx_status_t tpx__bs_info_encode(const tpx_bs_info_t *in, void *buf, uint32_t cap, uint32_t *len)
{
    if (in->nhandles < 1 || in->nhandles > TPX_BS_MAX_HANDLES)
        return TPX_ERR_INVALID_ARG;
    const char *nul = memchr(in->plugin, '\0', TPX_BS_PLUGIN_NAME_SIZE);
    const char *nul2 = memchr(in->name, '\0', TPX_BS_PLUGIN_NAME_SIZE);
    if (nul == NULL || nul2 == NULL)
        return TPX_ERR_INVALID_ARG;
    uint32_t need = TPX_BS_INFO_SIZE(in->nhandles);
    if (cap < need)
        return TPX_ERR_INVALID_ARG;
    unsigned char *p = buf;
    tpx__put64(p + 0, in->engine_id);
    tpx__put32(p + 8, (uint32_t)in->gpu);
    tpx__put32(p + 12, in->chunk_bytes);
    tpx__put16(p + 16, in->nhandles);
    tpx__put16(p + 18, in->window);
    size_t namelen = (size_t)(nul - in->plugin);
    memset(p + 20, 0, TPX_BS_PLUGIN_NAME_SIZE);
    memcpy(p + 20, in->plugin, namelen);
    memset(p + 84, 0, TPX_BS_PLUGIN_NAME_SIZE);
    memcpy(p + 84, in->name, (size_t)(nul2 - in->name));
    memcpy(p + TPX_BS_INFO_FIXED_SIZE, in->handles, (size_t)in->nhandles * TPX_BS_HANDLE_SIZE);
    *len = need;
    return TPX_OK;
}

tpx_status_t tpx__bs_info_decode(const void *buf, uint32_t len, tpx_bs_info_t *out)
{
    const unsigned char *p = buf;
    if (len < TPX_BS_INFO_FIXED_SIZE)
        return TPX_ERR_PROTOCOL;
    uint16_t n = tpx__get16(p + 16);
    if (n < 1 || n > TPX_BS_MAX_HANDLES || len != TPX_BS_INFO_SIZE(n))
        return TPX_ERR_PROTOCOL;
    const unsigned char *name = p + 20;
    const unsigned char *nul = memchr(name, '\0', TPX_BS_PLUGIN_NAME_SIZE);
    if (nul == NULL)
        return TPX_ERR_PROTOCOL;
    size_t namelen = (size_t)(nul - name);
    if (!tpx__all_zero(nul, TPX_BS_PLUGIN_NAME_SIZE - namelen))
        return TPX_ERR_PROTOCOL;
    const unsigned char *ename = p + 84;
    const unsigned char *nul2 = memchr(ename, '\0', TPX_BS_PLUGIN_NAME_SIZE);
    if (nul2 == NULL || !tpx__all_zero(nul2, TPX_BS_PLUGIN_NAME_SIZE - (size_t)(nul2 - ename)))
        return TPX_ERR_PROTOCOL;
    /* Built in a zeroed copy so that padding and unused handles are
     * deterministic, then copied out whole. */
    tpx_bs_info_t t;
    memset(&t, 0, sizeof(t));
    t.engine_id = tpx__get64(p + 0);
    t.gpu = (int32_t)tpx__get32(p + 8);
    t.chunk_bytes = tpx__get32(p + 12);
    t.nhandles = n;
    t.window = tpx__get16(p + 18);
    memcpy(t.plugin, name, TPX_BS_PLUGIN_NAME_SIZE);
    memcpy(t.name, ename, TPX_BS_PLUGIN_NAME_SIZE);
    memcpy(t.handles, p + TPX_BS_INFO_FIXED_SIZE, (size_t)n * TPX_BS_HANDLE_SIZE);
    memcpy(out, &t, sizeof(t));
    return TPX_OK;
}
