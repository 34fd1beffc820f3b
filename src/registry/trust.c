/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trust.c - signed registry values and whom a reader trusts (registry.h).
 *
 * Anyone who can write to etcd can put any value under any name, so a
 * value proves nothing by being there. A publisher signs its value (the
 * metadata blob, which carries its engine's identity key and addresses,
 * and the descriptors) with its engine's identity key and, when it holds
 * one, with a long-lived signing key (TPX_METADATA_SIGN_KEY): its own,
 * which readers pin for its name, or a cluster key that every legitimate
 * publisher shares. A reader with a trust setting takes a name's value only
 * when one of its signatures verifies under a key trusted for that name.
 * The signature covers the etcd key too, so a value signed for one name
 * cannot be copied under another. The engine then proves on every
 * connection that it holds the identity key the signed metadata names.
 * Keys and signatures come from libsodium (engine/ident.h); nothing of
 * cryptography is written here.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/bytes.h"
#include "common/util.h"
#include "engine/ident.h"
#include "registry.h"

_Static_assert(TPX_REG_PK == TPX_IDENT_PK && TPX_REG_SK == TPX_IDENT_SK &&
                   TPX_REG_SIG_SIZE == TPX_IDENT_PK + TPX_IDENT_SIG,
               "registry keys are identity keys");

#define SIG_DOMAIN     "tpx-registry-v2" /* with its NUL: 16 bytes */
#define SIG_DOMAIN_LEN 16

void tpx__reg_key_hex(const unsigned char pk[TPX_REG_PK], char out[2 * TPX_REG_PK + 1])
{
    for (int i = 0; i < TPX_REG_PK; i++)
        snprintf(out + 2 * i, 3, "%02x", pk[i]);
}

static int hex_key(const char *s, size_t n, unsigned char pk[TPX_REG_PK])
{
    if (n != 2 * TPX_REG_PK)
        return -1;
    for (size_t i = 0; i < TPX_REG_PK; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = (char)tolower((unsigned char)s[2 * i + (size_t)j]);
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                return -1;
            v = v * 16 + d;
        }
        pk[i] = (unsigned char)v;
    }
    return 0;
}

char *tpx__reg_read_file(const char *path, int secret, char *why, size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (secret && fstat(fileno(f), &sb) == 0 && (sb.st_mode & 077) != 0) {
        snprintf(why, why_len,
                 "%s holds a secret key but is readable by others (mode %03o): "
                 "chmod 600 it",
                 path, (unsigned)(sb.st_mode & 0777));
        fclose(f);
        return NULL;
    }
    char *buf = malloc(65537);
    size_t n = buf != NULL ? fread(buf, 1, 65536, f) : 0;
    int big = buf != NULL && n == 65536 && fgetc(f) != EOF;
    fclose(f);
    if (buf == NULL || big) {
        snprintf(why, why_len, "%s: %s", path,
                 buf == NULL ? "out of memory" : "larger than 64 KiB");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

int tpx__reg_trust_parse(const char *spec, tpx__reg_trust_t *t, char *why, size_t why_len)
{
    memset(t, 0, sizeof(*t));
    if (spec == NULL || spec[0] == '\0')
        return 0;
    char *file = NULL;
    const char *src = spec;
    if (strchr(spec, '=') == NULL) {
        if ((file = tpx__reg_read_file(spec, 0, why, why_len)) == NULL)
            return -1;
        src = file;
    }
    size_t cap = 0;
    int rc = -1;
    const char *p = src;
    for (;;) {
        while (*p != '\0' && (isspace((unsigned char)*p) || *p == ','))
            p++;
        if (*p == '#') {
            while (*p != '\0' && *p != '\n')
                p++;
            continue;
        }
        if (*p == '\0')
            break;
        const char *end = p;
        while (*end != '\0' && !isspace((unsigned char)*end) && *end != ',' && *end != '#')
            end++;
        const char *eq = memchr(p, '=', (size_t)(end - p));
        size_t nl = eq != NULL ? (size_t)(eq - p) : 0;
        tpx__reg_pin_t pin;
        if (eq == NULL || nl == 0 || nl >= sizeof(pin.name) ||
            hex_key(eq + 1, (size_t)(end - eq - 1), pin.pk) != 0) {
            snprintf(why, why_len,
                     "TPX_METADATA_TRUST%s%s: '%.*s' is not NAME=KEY or *=KEY "
                     "(KEY: 64 hex digits, an Ed25519 public key)",
                     file ? " file " : "", file ? spec : "", (int)TPX_MIN(end - p, 100), p);
            goto out;
        }
        memcpy(pin.name, p, nl);
        pin.name[nl] = '\0';
        if (t->n == cap) {
            cap = cap ? cap * 2 : 8;
            tpx__reg_pin_t *np = realloc(t->pins, cap * sizeof(*np));
            if (np == NULL) {
                snprintf(why, why_len, "out of memory");
                goto out;
            }
            t->pins = np;
        }
        t->pins[t->n++] = pin;
        p = end;
    }
    if (t->n == 0) {
        snprintf(why, why_len, "TPX_METADATA_TRUST%s%s names no key", file ? " file " : "",
                 file ? spec : "");
        goto out;
    }
    t->set = 1;
    rc = 0;
out:
    free(file);
    if (rc != 0)
        tpx__reg_trust_free(t);
    return rc;
}

void tpx__reg_trust_free(tpx__reg_trust_t *t)
{
    free(t->pins);
    memset(t, 0, sizeof(*t));
}

/* What a signature signs: the domain, the etcd key, the value before its
 * signatures. malloc'ed. */
static unsigned char *sig_message(const char *key, const unsigned char *val, size_t signed_len,
                                  size_t *len)
{
    size_t kl = strlen(key);
    unsigned char *m = malloc(SIG_DOMAIN_LEN + 2 + kl + signed_len);
    if (m == NULL || kl > 0xffff) {
        free(m);
        return NULL;
    }
    memcpy(m, SIG_DOMAIN, SIG_DOMAIN_LEN);
    tpx__put16(m + SIG_DOMAIN_LEN, (uint16_t)kl);
    memcpy(m + SIG_DOMAIN_LEN + 2, key, kl);
    memcpy(m + SIG_DOMAIN_LEN + 2 + kl, val, signed_len);
    *len = SIG_DOMAIN_LEN + 2 + kl + signed_len;
    return m;
}

tpx_status_t tpx__reg_value_sign(const char *key, unsigned char *val, size_t len, size_t idx,
                                 const unsigned char pk[TPX_REG_PK],
                                 const unsigned char sk[TPX_REG_SK])
{
    const unsigned char *sigs;
    size_t ns, sl, ml;
    if (tpx__reg_value_sigs(val, len, &sigs, &ns, &sl) != TPX_OK || idx >= ns)
        return TPX_ERR_INVALID_ARG;
    unsigned char *m = sig_message(key, val, sl, &ml);
    if (m == NULL)
        return TPX_ERR_NO_MEMORY;
    unsigned char *slot = val + sl + idx * TPX_REG_SIG_SIZE;
    memcpy(slot, pk, TPX_REG_PK);
    tpx_status_t st = tpx__ident_sign(sk, m, ml, slot + TPX_REG_PK);
    free(m);
    return st;
}

static int trusted_for(const tpx__reg_trust_t *t, const char *name, const unsigned char *pk)
{
    for (size_t i = 0; i < t->n; i++)
        if ((strcmp(t->pins[i].name, "*") == 0 || strcmp(t->pins[i].name, name) == 0) &&
            memcmp(t->pins[i].pk, pk, TPX_REG_PK) == 0)
            return 1;
    return 0;
}

tpx_status_t tpx__reg_trust_check(const tpx__reg_trust_t *t, const char *key, const char *name,
                                  const unsigned char *val, size_t len, char *why, size_t why_len)
{
    const unsigned char *sigs;
    size_t ns, sl, ml;
    if (tpx__reg_value_sigs(val, len, &sigs, &ns, &sl) != TPX_OK) {
        snprintf(why, why_len, "not a tpx value");
        return TPX_ERR_ACCESS;
    }
    if (ns == 0) {
        snprintf(why, why_len, "the value is not signed");
        return TPX_ERR_ACCESS;
    }
    if (!tpx__ident_available()) {
        snprintf(why, why_len,
                 "signatures cannot be checked here: TPX_METADATA_TRUST needs "
                 "libsodium (and TPX_IDENTITY=auto)");
        return TPX_ERR_ACCESS;
    }
    unsigned char *m = sig_message(key, val, sl, &ml);
    if (m == NULL) {
        snprintf(why, why_len, "out of memory");
        return TPX_ERR_NO_MEMORY;
    }
    size_t o = (size_t)snprintf(why, why_len, "signed by");
    tpx_status_t st = TPX_ERR_ACCESS;
    for (size_t i = 0; i < ns && st != TPX_OK; i++) {
        const unsigned char *pk = sigs + i * TPX_REG_SIG_SIZE;
        int trusted = trusted_for(t, name, pk);
        int good = trusted && tpx__ident_verify(pk, m, ml, pk + TPX_REG_PK);
        if (good) {
            st = TPX_OK;
            break;
        }
        char hex[2 * TPX_REG_PK + 1];
        tpx__reg_key_hex(pk, hex);
        if (o < why_len)
            o += (size_t)snprintf(why + o, why_len - o, "%s key %.16s... (%s)", i ? "," : "", hex,
                                  trusted ? "trusted, but the signature does not verify"
                                          : "not trusted for this name");
    }
    free(m);
    return st;
}

/* The 32-byte seed of an Ed25519 PKCS#8 PEM (RFC 8410), as openssl writes it. */
static int pem_seed(const char *text, unsigned char seed[32])
{
    static const char begin[] = "-----BEGIN PRIVATE KEY-----", end[] = "-----END PRIVATE KEY-----";
    static const unsigned char prefix[16] = {0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06,
                                             0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20};
    const char *b = strstr(text, begin), *e = b != NULL ? strstr(b, end) : NULL;
    if (e == NULL)
        return -1;
    char b64[128];
    size_t n = 0;
    for (const char *p = b + sizeof(begin) - 1; p < e; p++) {
        if (isspace((unsigned char)*p))
            continue;
        if (n + 1 >= sizeof(b64))
            return -1;
        b64[n++] = *p;
    }
    unsigned char der[66];
    long dl = tpx__b64_decode(b64, n, der, sizeof(der));
    if (dl != 48 || memcmp(der, prefix, sizeof(prefix)) != 0)
        return -1;
    memcpy(seed, der + 16, 32);
    memset(der, 0, sizeof(der));
    return 0;
}

int tpx__reg_sign_key_load(const char *path, unsigned char pk[TPX_REG_PK],
                           unsigned char sk[TPX_REG_SK], char *why, size_t why_len)
{
    char *text = tpx__reg_read_file(path, 1, why, why_len);
    if (text == NULL)
        return -1;
    unsigned char seed[32];
    size_t n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        n--;
    int rc = hex_key(text, n, seed) == 0 || pem_seed(text, seed) == 0 ? 0 : -1;
    memset(text, 0, strlen(text));
    free(text);
    if (rc != 0) {
        snprintf(why, why_len,
                 "%s: not an Ed25519 secret key (64 hex digits, or the PEM of "
                 "`openssl genpkey -algorithm ed25519`)",
                 path);
        return -1;
    }
    tpx_status_t st = tpx__ident_seed_keypair(seed, pk, sk);
    memset(seed, 0, sizeof(seed));
    if (st != TPX_OK) {
        snprintf(why, why_len, "%s: a signing key needs libsodium (and TPX_IDENTITY=auto)", path);
        return -1;
    }
    return 0;
}
