/* SPDX-License-Identifier: Apache-2.0 */
/*
 * answer.c - what the etcd metadata client reads (registry.h): etcd's JSON
 * answers (range, lease grant and keep-alive, errors) and the value of a
 * published engine. Pure parsing of bytes from the network: no engine, no
 * I/O, so the fuzzer (tests/fuzz/fuzz_reg.c) links it alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "registry.h"
#include "tpx/registry.h"

/* ---- answers ---- */

int tpx__reg_answer_error(tpx__jspan_t top, char *err, size_t errlen)
{
    tpx__jspan_t e, m;
    size_t l;
    if (tpx__json_get(top, "error", &e) != 1)
        return 0;
    if (e.n > 0 && e.p[0] == '{' && tpx__json_get(e, "message", &m) == 1 &&
        tpx__json_str(m, err, errlen, &l) == 0)
        return 1;
    if (tpx__json_str(e, err, errlen, &l) != 0)
        snprintf(err, errlen, "an error etcd did not explain");
    return 1;
}

void tpx__reg_kvs_free(tpx__reg_kv_t *kvs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].val);
        kvs[i].val = NULL;
    }
}

/* A key (base64 in a JSON string) into key[TPX_REG_KEY_MAX]. A key too
 * long for it is not ours (every key we write fits): it comes back empty,
 * so callers skip it, rather than failing the whole answer (anyone who can
 * write under the prefix could otherwise break list and watch). 0, or -1
 * if malformed. */
static int key_decode(tpx__jspan_t v, char *key)
{
    unsigned char tmp[TPX_REG_KEY_MAX + 3]; /* a last quantum may overshoot by 2 */
    key[0] = '\0';
    /* base64 never needs escapes: the span without its quotes is it */
    if (v.n < 2 || v.p[0] != '"')
        return -1;
    size_t b = v.n - 2;
    if (b % 4 != 0)
        return -1;
    if (b / 4 * 3 > sizeof(tmp))
        return 0; /* too long (its grammar not checked: it is skipped) */
    long kl = tpx__b64_decode(v.p + 1, b, tmp, sizeof(tmp));
    if (kl < 0)
        return -1;
    if ((size_t)kl >= TPX_REG_KEY_MAX)
        return 0;
    memcpy(key, tmp, (size_t)kl);
    key[kl] = '\0';
    return 0;
}

tpx_status_t tpx__reg_parse_range(const char *body, size_t len, tpx__reg_kv_t *kvs, size_t max,
                                  size_t *n, char *err, size_t errlen)
{
    tpx__jspan_t top, arr, kv, v;
    *n = 0;
    if (tpx__json_parse(body, len, &top) != 0 || top.p[0] != '{')
        return TPX_ERR_PROTOCOL;
    if (tpx__reg_answer_error(top, err, errlen))
        return TPX_ERR_INVALID_STATE;
    if (tpx__json_get(top, "header", &v) != 1)
        return TPX_ERR_PROTOCOL;
    int r = tpx__json_get(top, "kvs", &arr);
    if (r == 0)
        return TPX_OK;
    if (r < 0 || arr.p[0] != '[')
        return TPX_ERR_PROTOCOL;
    size_t pos = 0, count = 0;
    tpx_status_t st = TPX_OK;
    while ((r = tpx__json_next(arr, &pos, &kv)) == 1) {
        if (kv.p[0] != '{' || tpx__json_get(kv, "key", &v) != 1) {
            st = TPX_ERR_PROTOCOL;
            break;
        }
        count++;
        if (kvs == NULL || *n >= max)
            continue;
        tpx__reg_kv_t *o = &kvs[*n];
        memset(o, 0, sizeof(*o));
        if (key_decode(v, o->key) != 0) {
            st = TPX_ERR_PROTOCOL;
            break;
        }
        r = tpx__json_get(kv, "value", &v);
        if (r == 1) {
            if (v.n < 2 || v.p[0] != '"' || v.n - 2 > TPX_REG_BODY_MAX) {
                st = TPX_ERR_PROTOCOL;
                break;
            }
            size_t cap = (v.n - 2) / 4 * 3 + 1;
            o->val = malloc(cap);
            if (o->val == NULL) {
                st = TPX_ERR_NO_MEMORY;
                break;
            }
            long vl = tpx__b64_decode(v.p + 1, v.n - 2, o->val, cap);
            if (vl < 0) {
                free(o->val);
                o->val = NULL;
                st = TPX_ERR_PROTOCOL;
                break;
            }
            o->val_len = (size_t)vl;
        }
        (*n)++;
    }
    if (st == TPX_OK && r < 0)
        st = TPX_ERR_PROTOCOL;
    if (st != TPX_OK) {
        if (kvs != NULL)
            tpx__reg_kvs_free(kvs, *n);
        *n = 0;
        return st;
    }
    if (kvs == NULL)
        *n = count;
    return TPX_OK;
}

tpx_status_t tpx__reg_parse_lease(const char *body, size_t len, int keepalive, uint64_t *id,
                                  int64_t *ttl, char *err, size_t errlen)
{
    tpx__jspan_t top, v;
    /* a keep-alive answer is a stream: its first message is the answer */
    const char *nl = keepalive ? memchr(body, '\n', len) : NULL;
    if (nl != NULL)
        len = (size_t)(nl - body);
    if (tpx__json_parse(body, len, &top) != 0 || top.p[0] != '{')
        return TPX_ERR_PROTOCOL;
    if (tpx__reg_answer_error(top, err, errlen))
        return TPX_ERR_INVALID_STATE;
    if (keepalive) {
        if (tpx__json_get(top, "result", &v) != 1 || v.p[0] != '{')
            return TPX_ERR_PROTOCOL;
        top = v;
    }
    uint64_t x = 0;
    if (tpx__json_get(top, "ID", &v) != 1 || tpx__json_u64(v, &x) != 0)
        return TPX_ERR_PROTOCOL;
    *id = x;
    x = 0; /* an absent TTL is 0: the lease is gone */
    int r = tpx__json_get(top, "TTL", &v);
    if (r < 0 || (r == 1 && tpx__json_u64(v, &x) != 0) || x > INT64_MAX)
        return TPX_ERR_PROTOCOL;
    *ttl = (int64_t)x;
    return TPX_OK;
}

/* ---- the published value ---- */

tpx_status_t tpx__reg_value_encode(const void *md, size_t md_len, const void *descs, size_t ndescs,
                                   size_t nsigs, unsigned char *out, size_t cap, size_t *len)
{
    size_t need = TPX_REG_VALUE_HDR + md_len + ndescs * TPX_RDESC_SIZE + nsigs * TPX_REG_SIG_SIZE;
    if (md_len > TPX_METADATA_MAX || ndescs > TPX_REGISTRY_MAX_DESCS || nsigs > TPX_REG_MAX_SIGS ||
        need > cap)
        return TPX_ERR_INVALID_ARG;
    tpx__put32(out, TPX_REG_VALUE_MAGIC);
    tpx__put16(out + 4, nsigs > 0 ? TPX_REG_VALUE_SIGNED : TPX_REG_VALUE_VERSION);
    tpx__put16(out + 6, (uint16_t)ndescs);
    tpx__put32(out + 8, (uint32_t)md_len);
    tpx__put16(out + 12, (uint16_t)nsigs);
    tpx__put16(out + 14, 0);
    memcpy(out + TPX_REG_VALUE_HDR, md, md_len);
    if (ndescs > 0)
        memcpy(out + TPX_REG_VALUE_HDR + md_len, descs, ndescs * TPX_RDESC_SIZE);
    if (nsigs > 0)
        memset(out + need - nsigs * TPX_REG_SIG_SIZE, 0, nsigs * TPX_REG_SIG_SIZE);
    *len = need;
    return TPX_OK;
}

/* The header checked: 0 and the counts, or -1. */
static int value_head(const unsigned char *buf, size_t len, size_t *nd, size_t *ml, size_t *ns)
{
    if (len < TPX_REG_VALUE_HDR || tpx__get32(buf) != TPX_REG_VALUE_MAGIC ||
        tpx__get16(buf + 14) != 0)
        return -1;
    unsigned version = tpx__get16(buf + 4);
    *nd = tpx__get16(buf + 6);
    *ml = tpx__get32(buf + 8);
    *ns = tpx__get16(buf + 12);
    /* version 1: no signatures (what a publisher without keys still writes,
     * so that older readers take it); version 2: one or more */
    if (!(version == TPX_REG_VALUE_VERSION && *ns == 0) &&
        !(version == TPX_REG_VALUE_SIGNED && *ns >= 1 && *ns <= TPX_REG_MAX_SIGS))
        return -1;
    if (*nd > TPX_REGISTRY_MAX_DESCS || *ml == 0 || *ml > TPX_METADATA_MAX ||
        len != TPX_REG_VALUE_HDR + *ml + *nd * TPX_RDESC_SIZE + *ns * TPX_REG_SIG_SIZE)
        return -1;
    return 0;
}

tpx_status_t tpx__reg_value_decode(const unsigned char *buf, size_t len, const unsigned char **md,
                                   size_t *md_len, const unsigned char **descs, size_t *ndescs)
{
    size_t nd, ml, ns;
    if (value_head(buf, len, &nd, &ml, &ns) != 0)
        return TPX_ERR_PROTOCOL;
    *md = buf + TPX_REG_VALUE_HDR;
    *md_len = ml;
    *descs = buf + TPX_REG_VALUE_HDR + ml;
    *ndescs = nd;
    return TPX_OK;
}

tpx_status_t tpx__reg_value_sigs(const unsigned char *buf, size_t len, const unsigned char **sigs,
                                 size_t *nsigs, size_t *signed_len)
{
    size_t nd, ml, ns;
    if (value_head(buf, len, &nd, &ml, &ns) != 0)
        return TPX_ERR_PROTOCOL;
    *signed_len = len - ns * TPX_REG_SIG_SIZE;
    *sigs = buf + *signed_len;
    *nsigs = ns;
    return TPX_OK;
}

tpx_status_t tpx__reg_watch_head(const char *msg, size_t len, tpx__jspan_t *events, uint64_t *rev,
                                 int *created, int *canceled, char *err, size_t errlen)
{
    tpx__jspan_t top, res, v, e;
    *rev = 0;
    *created = *canceled = 0;
    events->p = NULL;
    events->n = 0;
    if (tpx__json_parse(msg, len, &top) != 0 || top.p[0] != '{')
        return TPX_ERR_PROTOCOL;
    if (tpx__reg_answer_error(top, err, errlen))
        return TPX_ERR_INVALID_STATE;
    if (tpx__json_get(top, "result", &res) != 1 || res.p[0] != '{')
        return TPX_ERR_PROTOCOL;
    if (tpx__json_get(res, "header", &v) == 1 && v.p[0] == '{' &&
        tpx__json_get(v, "revision", &e) == 1 && tpx__json_u64(e, rev) != 0)
        return TPX_ERR_PROTOCOL;
    *created = tpx__json_get(res, "created", &v) == 1 && v.n == 4 && memcmp(v.p, "true", 4) == 0;
    *canceled = tpx__json_get(res, "canceled", &v) == 1 && v.n == 4 && memcmp(v.p, "true", 4) == 0;
    int r = tpx__json_get(res, "events", &v);
    if (r == 0)
        return TPX_OK;
    if (r < 0 || v.p[0] != '[')
        return TPX_ERR_PROTOCOL;
    *events = v;
    return TPX_OK;
}

int tpx__reg_watch_event(tpx__jspan_t events, size_t *pos, tpx__reg_event_t *ev)
{
    tpx__jspan_t e, kv, v;
    if (events.n == 0)
        return 0;
    int r = tpx__json_next(events, pos, &e);
    if (r != 1)
        return r;
    if (e.p[0] != '{' || tpx__json_get(e, "kv", &kv) != 1 || kv.p[0] != '{' ||
        tpx__json_get(kv, "key", &v) != 1)
        return -1;
    memset(ev, 0, sizeof(*ev));
    if (key_decode(v, ev->key) != 0)
        return -1;
    if (tpx__json_get(e, "type", &v) == 1) {
        char t[16];
        size_t tl;
        if (tpx__json_str(v, t, sizeof(t), &tl) != 0)
            return -1;
        ev->gone = strcmp(t, "DELETE") == 0;
    }
    if (tpx__json_get(kv, "mod_revision", &v) == 1 && tpx__json_u64(v, &ev->mod_rev) != 0)
        return -1;
    return 1;
}

tpx_status_t tpx__reg_parse_watch(const char *msg, size_t len, tpx__reg_event_t *ev, size_t max,
                                  size_t *n, uint64_t *rev, int *created, int *canceled, char *err,
                                  size_t errlen)
{
    tpx__jspan_t events;
    tpx__reg_event_t one;
    *n = 0;
    tpx_status_t st = tpx__reg_watch_head(msg, len, &events, rev, created, canceled, err, errlen);
    if (st != TPX_OK)
        return st;
    size_t pos = 0;
    int r;
    while ((r = tpx__reg_watch_event(events, &pos, &one)) == 1) {
        if (*n >= max)
            return TPX_ERR_OVERFLOW;
        ev[(*n)++] = one;
    }
    return r < 0 ? TPX_ERR_PROTOCOL : TPX_OK;
}
