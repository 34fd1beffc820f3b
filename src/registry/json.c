/* SPDX-License-Identifier: Apache-2.0 */
/*
 * json.c - a validating JSON scanner and base64, for etcd's JSON gateway
 * (registry.h).
 *
 * No tree is built: a value is a span of the text, and lookups walk it
 * again. Every walk goes through skip_value(), which checks the grammar
 * (RFC 8259: strings with their escapes, numbers, literals, nesting at most
 * TPX_JSON_MAX_DEPTH deep) and never reads past the span, so a span handed
 * out was validated as a whole and later walks of it cannot go astray.
 */
#include <string.h>

#include "registry.h"

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string starting at s[*i] == '"'; *i moves past the closing quote. */
static int skip_string(const char *s, size_t n, size_t *i)
{
    size_t k = *i + 1;
    while (k < n) {
        unsigned char c = (unsigned char)s[k];
        if (c == '"') {
            *i = k + 1;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (k + 1 >= n)
                return -1;
            char e = s[k + 1];
            if (e == 'u') {
                if (k + 5 >= n)
                    return -1;
                for (int j = 2; j < 6; j++)
                    if (hexval(s[k + (size_t)j]) < 0)
                        return -1;
                k += 6;
                continue;
            }
            if (strchr("\"\\/bfnrt", e) == NULL || e == '\0')
                return -1;
            k += 2;
            continue;
        }
        k++;
    }
    return -1;
}

/* Past one or more digits at *k; -1 (and *k unchanged) if there is none. */
static int skip_digits(const char *s, size_t n, size_t *k)
{
    size_t d = *k;
    while (d < n && s[d] >= '0' && s[d] <= '9')
        d++;
    if (d == *k)
        return -1;
    *k = d;
    return 0;
}

static int skip_number(const char *s, size_t n, size_t *i)
{
    size_t k = *i;
    if (k < n && s[k] == '-')
        k++;
    if (k >= n)
        return -1;
    if (s[k] == '0') {
        k++;
    } else if (s[k] >= '1' && s[k] <= '9') {
        while (k < n && s[k] >= '0' && s[k] <= '9')
            k++;
    } else {
        return -1;
    }
    if (k < n && s[k] == '.') {
        k++;
        if (skip_digits(s, n, &k) != 0)
            return -1;
    }
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        k++;
        if (k < n && (s[k] == '+' || s[k] == '-'))
            k++;
        if (skip_digits(s, n, &k) != 0)
            return -1;
    }
    *i = k;
    return 0;
}

static int skip_value(const char *s, size_t n, size_t *i, int depth)
{
    size_t k = skip_ws(s, n, *i);
    if (k >= n || depth > TPX_JSON_MAX_DEPTH)
        return -1;
    char c = s[k];
    if (c == '"') {
        if (skip_string(s, n, &k) != 0)
            return -1;
    } else if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        k = skip_ws(s, n, k + 1);
        if (k < n && s[k] == close) {
            k++;
        } else {
            for (;;) {
                if (c == '{') {
                    k = skip_ws(s, n, k);
                    if (k >= n || s[k] != '"' || skip_string(s, n, &k) != 0)
                        return -1;
                    k = skip_ws(s, n, k);
                    if (k >= n || s[k] != ':')
                        return -1;
                    k++;
                }
                if (skip_value(s, n, &k, depth + 1) != 0)
                    return -1;
                k = skip_ws(s, n, k);
                if (k >= n)
                    return -1;
                if (s[k] == ',') {
                    k++;
                    continue;
                }
                if (s[k] != close)
                    return -1;
                k++;
                break;
            }
        }
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (skip_number(s, n, &k) != 0)
            return -1;
    } else if (n - k >= 4 && memcmp(s + k, "true", 4) == 0) {
        k += 4;
    } else if (n - k >= 5 && memcmp(s + k, "false", 5) == 0) {
        k += 5;
    } else if (n - k >= 4 && memcmp(s + k, "null", 4) == 0) {
        k += 4;
    } else {
        return -1;
    }
    *i = k;
    return 0;
}

int tpx__json_parse(const char *s, size_t n, tpx__jspan_t *out)
{
    size_t i = skip_ws(s, n, 0), start = i;
    if (skip_value(s, n, &i, 0) != 0)
        return -1;
    size_t end = i;
    if (skip_ws(s, n, i) != n)
        return -1;
    out->p = s + start;
    out->n = end - start;
    return 0;
}

/* The value at *k (after white space): its span, and *k just past it.
 * -1 if it is malformed. */
static int take_value(const char *s, size_t n, size_t *k, tpx__jspan_t *v)
{
    size_t i = skip_ws(s, n, *k), vs = i;
    if (skip_value(s, n, &i, 1) != 0)
        return -1;
    v->p = s + vs;
    v->n = i - vs;
    *k = i;
    return 0;
}

/* After a member or element ending at *k: 0 with *k past the ',' when
 * another follows, 1 at `close`, -1 on anything else. */
static int next_member(const char *s, size_t n, size_t *k, char close)
{
    size_t i = skip_ws(s, n, *k);
    if (i >= n)
        return -1;
    if (s[i] == close)
        return 1;
    if (s[i] != ',')
        return -1;
    *k = i + 1;
    return 0;
}

int tpx__json_get(tpx__jspan_t obj, const char *key, tpx__jspan_t *val)
{
    const char *s = obj.p;
    size_t n = obj.n, k = 0, klen = strlen(key);
    if (n < 2 || s[0] != '{')
        return -1;
    k = skip_ws(s, n, 1);
    if (k < n && s[k] == '}')
        return 0;
    for (;;) {
        k = skip_ws(s, n, k);
        size_t ks = k;
        if (k >= n || s[k] != '"' || skip_string(s, n, &k) != 0)
            return -1;
        /* keys compared raw: etcd's are plain ASCII, never escaped */
        int match = k - ks - 2 == klen && memcmp(s + ks + 1, key, klen) == 0;
        k = skip_ws(s, n, k);
        if (k >= n || s[k] != ':')
            return -1;
        k++;
        tpx__jspan_t v;
        if (take_value(s, n, &k, &v) != 0)
            return -1;
        if (match) {
            *val = v;
            return 1;
        }
        int sep = next_member(s, n, &k, '}');
        if (sep != 0)
            return sep > 0 ? 0 : -1;
    }
}

int tpx__json_next(tpx__jspan_t arr, size_t *pos, tpx__jspan_t *elem)
{
    const char *s = arr.p;
    size_t n = arr.n, k = *pos;
    if (n < 2 || s[0] != '[' || k >= n)
        return -1;
    if (k == 0) {
        k = skip_ws(s, n, 1);
        if (k < n && s[k] == ']')
            return 0;
    } else {
        int sep = next_member(s, n, &k, ']');
        if (sep != 0)
            return sep > 0 ? 0 : -1;
    }
    tpx__jspan_t v;
    if (take_value(s, n, &k, &v) != 0)
        return -1;
    *elem = v;
    *pos = k;
    return 1;
}

static size_t put_utf8(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

int tpx__json_str(tpx__jspan_t v, char *out, size_t cap, size_t *len)
{
    size_t end = 0;
    if (cap == 0 || v.n < 2 || v.p[0] != '"' || skip_string(v.p, v.n, &end) != 0 || end != v.n)
        return -1;
    size_t o = 0;
    for (size_t k = 1; k + 1 < v.n;) {
        char tmp[4];
        size_t w = 0;
        char c = v.p[k];
        if (c != '\\') {
            tmp[w++] = c;
            k++;
        } else {
            char e = v.p[k + 1];
            if (e == 'u') {
                unsigned cp = 0;
                for (int j = 2; j < 6; j++)
                    cp = cp * 16 + (unsigned)hexval(v.p[k + (size_t)j]);
                if (cp == 0)
                    return -1;         /* no NUL inside a C string */
                w = put_utf8(tmp, cp); /* surrogates kept as they are: text for logs only */
                k += 6;
            } else {
                tmp[w++] = e == 'b'   ? '\b'
                           : e == 'f' ? '\f'
                           : e == 'n' ? '\n'
                           : e == 'r' ? '\r'
                           : e == 't' ? '\t'
                                      : e;
                k += 2;
            }
        }
        if (o + w >= cap)
            return -1;
        memcpy(out + o, tmp, w);
        o += w;
    }
    out[o] = '\0';
    *len = o;
    return 0;
}

int tpx__json_u64(tpx__jspan_t v, uint64_t *out)
{
    const char *s = v.p;
    size_t n = v.n;
    if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
        s++;
        n -= 2;
    }
    if (n == 0 || n > 20)
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *out = x;
    return 0;
}

/* ---- base64 ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void tpx__b64_encode(const unsigned char *in, size_t n, char *out)
{
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        out[o++] = b64[v >> 18];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = b64[(v >> 6) & 63];
        out[o++] = b64[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)in[i] << 16;
        out[o++] = b64[v >> 18];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        out[o++] = b64[v >> 18];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = b64[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
}

static int b64val(char c)
{
    const char *p = c != '\0' ? strchr(b64, c) : NULL;
    return p != NULL ? (int)(p - b64) : -1;
}

long tpx__b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    if (n % 4 != 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int v[4], pad = 0;
        for (int j = 0; j < 4; j++) {
            char c = in[i + (size_t)j];
            if (c == '=' && last && j >= 2) {
                v[j] = 0;
                pad++;
                continue;
            }
            if (pad > 0 || (v[j] = b64val(c)) < 0)
                return -1;
        }
        unsigned x =
            (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        size_t w = 3 - (size_t)pad;
        if (o + w > cap)
            return -1;
        out[o++] = (unsigned char)(x >> 16);
        if (w > 1)
            out[o++] = (unsigned char)(x >> 8);
        if (w > 2)
            out[o++] = (unsigned char)x;
    }
    return (long)o;
}
