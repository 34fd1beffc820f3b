/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_reg.c - libFuzzer target for the etcd metadata client's parsers
 * (src/registry): the HTTP/1.1 response reader (status line, headers,
 * Content-Length / chunked / close-delimited bodies), the JSON scanner and
 * its walks, etcd's answers (range, lease grant, keep-alive, watch), the value of
 * a published engine, base64 and endpoint lists.
 *
 * The first input byte picks the parser; the rest is its input, in a heap
 * block of exactly that size so that ASan sees any read past it. The HTTP
 * reader is fed in pieces whose size comes from the selector's high bits,
 * as a socket would. Properties: an accepted body is within the bound and
 * NUL-terminated; spans handed out lie inside the text; an accepted value
 * encodes back to its bytes; base64 decode . encode . decode is stable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../registry/http_memsrc.h"
#include "fuzz.h"
#include "registry/registry.h"
#include "tpx/registry.h"

static void fuzz_http(const unsigned char *in, size_t n, unsigned step)
{
    static tpx__http_rd_t rd;
    http_memsrc_t s;
    http_memsrc_attach(&rd, &s, in, n, step);
    const size_t max = 4096;
    /* a keep-alive stream may hold several responses */
    for (int i = 0; i < 4; i++) {
        tpx__http_resp_t r;
        if (tpx__http_read_response(&rd, UINT64_MAX, max, &r) != TPX_OK)
            break;
        TPX_FUZZ_CHECK(r.body != NULL && r.body_len <= max, "http: body bound");
        TPX_FUZZ_CHECK(r.body[r.body_len] == '\0', "http: body not terminated");
        TPX_FUZZ_CHECK(r.status >= 200 && r.status <= 999, "http: status");
        TPX_FUZZ_CHECK(s.off <= n && rd.off + rd.len <= sizeof(rd.buf), "http: reader state");
        free(r.body);
    }
}

static int inside(tpx__jspan_t v, const char *s, size_t n)
{
    return v.p >= s && v.n <= n && (size_t)(v.p - s) <= n - v.n;
}

/* Walk a parsed value: every member and element, strings and numbers. */
static void walk(tpx__jspan_t v, const char *s, size_t n, int depth)
{
    TPX_FUZZ_CHECK(inside(v, s, n), "json: span outside the text");
    if (depth > TPX_JSON_MAX_DEPTH + 1)
        return;
    char buf[64];
    size_t len;
    uint64_t u;
    tpx__jspan_t e;
    if (v.p[0] == '[') {
        size_t pos = 0;
        int r;
        while ((r = tpx__json_next(v, &pos, &e)) == 1)
            walk(e, s, n, depth + 1);
        TPX_FUZZ_CHECK(r == 0, "json: a validated array does not walk");
    } else if (v.p[0] == '{') {
        static const char *keys[] = {"header", "kvs",    "key",   "value",   "ID",
                                     "TTL",    "result", "error", "message", "count"};
        for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
            int r = tpx__json_get(v, keys[k], &e);
            TPX_FUZZ_CHECK(r >= 0, "json: a validated object does not walk");
            if (r == 1)
                walk(e, s, n, depth + 1);
        }
    } else if (v.p[0] == '"') {
        if (tpx__json_str(v, buf, sizeof(buf), &len) == 0)
            TPX_FUZZ_CHECK(len < sizeof(buf) && buf[len] == '\0', "json: string bound");
        (void)tpx__json_u64(v, &u);
    } else {
        (void)tpx__json_u64(v, &u);
    }
}

static void fuzz_json(const unsigned char *in, size_t n)
{
    tpx__jspan_t top;
    if (tpx__json_parse((const char *)in, n, &top) == 0)
        walk(top, (const char *)in, n, 0);
}

static void fuzz_answers(const unsigned char *in, size_t n)
{
    /* the parsers take a NUL-terminated body, as the HTTP reader makes it */
    char *body = malloc(n + 1);
    TPX_FUZZ_CHECK(body != NULL, "out of memory");
    memcpy(body, in, n);
    body[n] = '\0';
    char err[160];
    tpx__reg_kv_t kvs[4];
    size_t nk = 0, total = 0;
    if (tpx__reg_parse_range(body, n, kvs, 4, &nk, err, sizeof(err)) == TPX_OK) {
        TPX_FUZZ_CHECK(nk <= 4, "range: count");
        for (size_t i = 0; i < nk; i++)
            TPX_FUZZ_CHECK(strlen(kvs[i].key) < sizeof(kvs[i].key), "range: key bound");
        tpx__reg_kvs_free(kvs, nk);
        TPX_FUZZ_CHECK(tpx__reg_parse_range(body, n, NULL, 0, &total, err, sizeof(err)) == TPX_OK &&
                           total >= nk,
                       "range: count-only disagrees");
    }
    tpx__reg_event_t ev[4];
    uint64_t rev;
    int created, canceled;
    size_t ne = 0;
    tpx_status_t wst =
        tpx__reg_parse_watch(body, n, ev, 4, &ne, &rev, &created, &canceled, err, sizeof(err));
    TPX_FUZZ_CHECK(ne <= 4, "watch: count");
    for (size_t i = 0; wst == TPX_OK && i < ne; i++)
        TPX_FUZZ_CHECK(strlen(ev[i].key) < sizeof(ev[i].key), "watch: key bound");
    uint64_t id;
    int64_t ttl;
    for (int ka = 0; ka < 2; ka++)
        if (tpx__reg_parse_lease(body, n, ka, &id, &ttl, err, sizeof(err)) == TPX_OK)
            TPX_FUZZ_CHECK(ttl >= 0, "lease: negative TTL");
    free(body);
}

static void fuzz_value(const unsigned char *in, size_t n)
{
    const unsigned char *md, *descs;
    size_t ml, nd;
    if (tpx__reg_value_decode(in, n, &md, &ml, &descs, &nd) != TPX_OK)
        return;
    TPX_FUZZ_CHECK(md >= in && md + ml <= in + n && descs + nd * TPX_RDESC_SIZE <= in + n,
                   "value: pieces outside the input");
    unsigned char *out = malloc(n);
    size_t len = 0;
    TPX_FUZZ_CHECK(out != NULL, "out of memory");
    const unsigned char *sigs;
    size_t ns, sl;
    TPX_FUZZ_CHECK(tpx__reg_value_sigs(in, n, &sigs, &ns, &sl) == TPX_OK && sl + ns * 96 == n,
                   "value: decoded, but its signatures not");
    TPX_FUZZ_CHECK(tpx__reg_value_encode(md, ml, descs, nd, ns, out, n, &len) == TPX_OK && len == n,
                   "value: cannot encode what was decoded");
    memcpy(out + sl, sigs, ns * 96);
    TPX_FUZZ_CHECK(memcmp(out, in, n) == 0, "value: decode . encode is not the identity");
    free(out);
}

static void fuzz_b64(const unsigned char *in, size_t n)
{
    unsigned char *d = malloc(n + 1), *d2 = malloc(n + 1);
    char *e = malloc(4 * ((n + 2) / 3) + 1);
    TPX_FUZZ_CHECK(d != NULL && d2 != NULL && e != NULL, "out of memory");
    long l = tpx__b64_decode((const char *)in, n, d, n);
    if (l >= 0) {
        TPX_FUZZ_CHECK((size_t)l <= n / 4 * 3, "b64: decoded length");
        tpx__b64_encode(d, (size_t)l, e);
        long l2 = tpx__b64_decode(e, strlen(e), d2, n);
        TPX_FUZZ_CHECK(l2 == l && memcmp(d, d2, (size_t)l) == 0, "b64: not stable");
    }
    free(d);
    free(d2);
    free(e);
}

static void fuzz_url(const unsigned char *in, size_t n)
{
    char *s = malloc(n + 1);
    TPX_FUZZ_CHECK(s != NULL, "out of memory");
    memcpy(s, in, n);
    s[n] = '\0';
    tpx__reg_ep_t eps[TPX_REG_MAX_ENDPOINTS];
    int k = 0;
    char why[256];
    if (tpx__reg_parse_url(s, eps, TPX_REG_MAX_ENDPOINTS, &k, why, sizeof(why)) == 0) {
        TPX_FUZZ_CHECK(k >= 1 && k <= TPX_REG_MAX_ENDPOINTS, "url: count");
        for (int i = 0; i < k; i++)
            TPX_FUZZ_CHECK(eps[i].host[0] != '\0' && atoi(eps[i].port) >= 1, "url: endpoint");
    }
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    size_t n = size - 1;
    unsigned char *in = tpx_fuzz_fixed(data + 1, n, n);
    switch (sel % 6) {
    case TPX_FUZZ_REG_HTTP:
        fuzz_http(in, n, 1u << (sel >> 3 & 15)); /* pieces of 1 .. 32768 bytes */
        break;
    case TPX_FUZZ_REG_JSON:
        fuzz_json(in, n);
        break;
    case TPX_FUZZ_REG_ANSWER:
        fuzz_answers(in, n);
        break;
    case TPX_FUZZ_REG_VALUE:
        fuzz_value(in, n);
        break;
    case TPX_FUZZ_REG_B64:
        fuzz_b64(in, n);
        break;
    default:
        fuzz_url(in, n);
        break;
    }
    free(in);
    return 0;
}
