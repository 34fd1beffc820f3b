/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.c - engines in etcd (tpx/registry.h): the etcd v3 calls over
 * its JSON gateway, the value of a published engine, the keep-alive
 * thread, and the resolver through which a remote finds its engine again.
 *
 * A registry has two HTTP connections: one for the caller's calls
 * (serialised by `lock`) and one for its keep-alive thread, so that a
 * lookup never waits behind a lease renewal to an etcd that is down. The
 * thread renews each publication's lease every TTL/3; when etcd answers
 * that the lease is gone (it was unreachable for longer than the TTL) it
 * grants a new one and puts the value again. While etcd is unreachable it
 * retries every second and says so once, not every second.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bytes.h"
#include "common/config.h"
#include "common/log.h"
#include "common/sigpipe.h"
#include "common/util.h"
#include "engine/ident.h"
#include "engine/remote.h"
#include "engine/wire.h"
#include "registry.h"
#include "tpx/registry.h"

/* ---- etcd calls ---- */

static uint64_t call_deadline(void)
{
    return tpx__now_ns() + (uint64_t)tpx__config_int(TPX_CFG_METADATA_TIMEOUT_MS) * 1000000ull;
}

/* POST and take a 200 answer's body (the caller frees it). Anything else
 * is described in err; etcd's 401 and 403 (authentication, permission)
 * are TPX_ERR_ACCESS. */
static tpx_status_t etcd_post_once(tpx__http_conn_t *c, const char *path, const char *body,
                                   uint64_t deadline_ns, char **out, size_t *out_len, int *http,
                                   char *err, size_t errlen)
{
    tpx__http_resp_t resp;
    *http = 0;
    tpx_status_t st = tpx__http_post(c, path, body, deadline_ns, &resp);
    if (st != TPX_OK) {
        snprintf(err, errlen, "%s", c->last_err[0] ? c->last_err : tpx_status_string(st));
        return st == TPX_ERR_NO_MEMORY ? st : TPX_ERR_UNREACHABLE;
    }
    *http = resp.status;
    if (resp.status != 200) {
        tpx__jspan_t top;
        char msg[160] = "";
        if (tpx__json_parse(resp.body, resp.body_len, &top) != 0 || top.p[0] != '{' ||
            !tpx__reg_answer_error(top, msg, sizeof(msg)))
            snprintf(msg, sizeof(msg), "HTTP status %d", resp.status);
        snprintf(err, errlen, "etcd %s: %s", path, msg);
        free(resp.body);
        return resp.status == 401 || resp.status == 403 ? TPX_ERR_ACCESS : TPX_ERR_INVALID_STATE;
    }
    *out = resp.body;
    *out_len = resp.body_len;
    return TPX_OK;
}

/* A JSON string's contents (quotes not included) into out[cap]: 0, or -1
 * if it does not fit. */
static int json_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        char tmp[8];
        int n = ch == '"' || ch == '\\' ? snprintf(tmp, sizeof(tmp), "\\%c", ch)
                : ch < 0x20             ? snprintf(tmp, sizeof(tmp), "\\u%04x", ch)
                                        : snprintf(tmp, sizeof(tmp), "%c", ch);
        if (o + (size_t)n + 1 > cap)
            return -1;
        memcpy(out + o, tmp, (size_t)n);
        o += (size_t)n;
    }
    out[o] = '\0';
    return 0;
}

/* etcd's authentication: a token for c's user, kept in c->token. */
static tpx_status_t etcd_authenticate(tpx__http_conn_t *c, uint64_t deadline_ns, char *err,
                                      size_t errlen)
{
    char user[400], pass[800], body[1300], *ans = NULL;
    size_t alen;
    int http;
    c->token[0] = '\0';
    if (json_escape(c->creds->user, user, sizeof(user)) != 0 ||
        json_escape(c->creds->password, pass, sizeof(pass)) != 0) {
        snprintf(err, errlen, "the etcd user name or password is too long");
        return TPX_ERR_CONFIG;
    }
    snprintf(body, sizeof(body), "{\"name\":\"%s\",\"password\":\"%s\"}", user, pass);
    tpx_status_t st = etcd_post_once(c, "/v3/auth/authenticate", body, deadline_ns, &ans, &alen,
                                     &http, err, errlen);
    memset(body, 0, sizeof(body));
    memset(pass, 0, sizeof(pass));
    if (st == TPX_ERR_INVALID_STATE) /* wrong user or password: etcd says 400 */
        st = TPX_ERR_ACCESS;
    if (st != TPX_OK) {
        size_t l = strlen(err);
        snprintf(err + l, errlen - l, " (as etcd user '%s')", c->creds->user);
        return st;
    }
    tpx__jspan_t top, v;
    size_t tl;
    if (tpx__json_parse(ans, alen, &top) != 0 || top.p[0] != '{' ||
        tpx__json_get(top, "token", &v) != 1 ||
        tpx__json_str(v, c->token, sizeof(c->token), &tl) != 0 || tl == 0 ||
        strpbrk(c->token, "\r\n") != NULL) {
        c->token[0] = '\0';
        snprintf(err, errlen,
                 "etcd answered an authentication with no token (is its "
                 "authentication enabled?)");
        st = TPX_ERR_PROTOCOL;
    }
    free(ans);
    return st;
}

/* POST and take a 200 answer's body (the caller frees it); anything else
 * is described in err. With an etcd user, a token is got first, and got
 * again once if etcd says it expired. */
static tpx_status_t etcd_post_by(tpx__http_conn_t *c, const char *path, const char *body,
                                 uint64_t deadline_ns, char **out, size_t *out_len, char *err,
                                 size_t errlen)
{
    for (int again = 0;; again++) {
        tpx_status_t st;
        int http;
        if (c->creds != NULL && c->token[0] == '\0' &&
            (st = etcd_authenticate(c, deadline_ns, err, errlen)) != TPX_OK)
            return st;
        st = etcd_post_once(c, path, body, deadline_ns, out, out_len, &http, err, errlen);
        if (st == TPX_ERR_ACCESS && http == 401 && c->creds != NULL && again == 0) {
            c->token[0] = '\0'; /* expired (etcd's tokens live minutes) or revoked */
            TPX_DEBUG("registry: %s: %s: authenticating again", path, err);
            continue;
        }
        return st;
    }
}

/* etcd_post_by() with TPX_METADATA_TIMEOUT_MS from now. */
static tpx_status_t etcd_post(tpx__http_conn_t *c, const char *path, const char *body, char **out,
                              size_t *out_len, char *err, size_t errlen)
{
    return etcd_post_by(c, path, body, call_deadline(), out, out_len, err, errlen);
}

static char *b64_dup(const void *p, size_t n)
{
    char *s = malloc(4 * ((n + 2) / 3) + 1);
    if (s != NULL)
        tpx__b64_encode(p, n, s);
    return s;
}

static tpx_status_t etcd_grant(tpx__http_conn_t *c, int ttl, uint64_t *id, char *err, size_t el)
{
    char body[64], *ans;
    size_t alen;
    int64_t got;
    snprintf(body, sizeof(body), "{\"TTL\":%d}", ttl);
    tpx_status_t st = etcd_post(c, "/v3/lease/grant", body, &ans, &alen, err, el);
    if (st != TPX_OK)
        return st;
    st = tpx__reg_parse_lease(ans, alen, 0, id, &got, err, el);
    free(ans);
    if (st == TPX_ERR_PROTOCOL)
        snprintf(err, el, "etcd answered a lease grant with something else");
    if (st == TPX_OK && got <= 0) {
        snprintf(err, el, "etcd granted a lease of TTL %lld", (long long)got);
        st = TPX_ERR_PROTOCOL;
    }
    return st;
}

/* Renew a lease: *ttl 0 if etcd no longer has it. */
static tpx_status_t etcd_keepalive(tpx__http_conn_t *c, uint64_t id, int64_t *ttl, char *err,
                                   size_t el)
{
    char body[64], *ans;
    size_t alen;
    uint64_t got;
    snprintf(body, sizeof(body), "{\"ID\":\"%llu\"}", (unsigned long long)id);
    tpx_status_t st = etcd_post(c, "/v3/lease/keepalive", body, &ans, &alen, err, el);
    if (st != TPX_OK)
        return st;
    st = tpx__reg_parse_lease(ans, alen, 1, &got, ttl, err, el);
    free(ans);
    if (st == TPX_ERR_PROTOCOL)
        snprintf(err, el, "etcd answered a lease keep-alive with something else");
    return st;
}

static void etcd_revoke(tpx__http_conn_t *c, uint64_t id)
{
    char body[64], *ans, err[160];
    size_t alen;
    snprintf(body, sizeof(body), "{\"ID\":\"%llu\"}", (unsigned long long)id);
    if (etcd_post(c, "/v3/lease/revoke", body, &ans, &alen, err, sizeof(err)) == TPX_OK)
        free(ans);
    else
        TPX_DEBUG("registry: revoking lease %llu: %s", (unsigned long long)id, err);
}

static tpx_status_t etcd_put(tpx__http_conn_t *c, const char *key, const unsigned char *val,
                             size_t vlen, uint64_t lease, char *err, size_t el)
{
    char *k = b64_dup(key, strlen(key)), *v = b64_dup(val, vlen), *body = NULL, *ans;
    size_t alen, n = 0;
    tpx_status_t st = TPX_ERR_NO_MEMORY;
    if (k == NULL || v == NULL)
        goto out;
    n = strlen(k) + strlen(v) + 96;
    if ((body = malloc(n)) == NULL)
        goto out;
    snprintf(body, n, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%llu\"}", k, v,
             (unsigned long long)lease);
    st = etcd_post(c, "/v3/kv/put", body, &ans, &alen, err, el);
    if (st == TPX_OK) {
        size_t cnt;
        st = tpx__reg_parse_range(ans, alen, NULL, 0, &cnt, err, el); /* header only */
        if (st == TPX_ERR_PROTOCOL)
            snprintf(err, el, "etcd answered a put with something else");
        free(ans);
    }
out:
    free(k);
    free(v);
    free(body);
    return st;
}

/* Range [key, range_end) (range_end NULL: the key alone), answered by
 * deadline_ns. */
static tpx_status_t etcd_range(tpx__http_conn_t *c, const char *key, const char *range_end,
                               int keys_only, tpx__reg_kv_t *kvs, size_t max, size_t *n,
                               size_t *total, uint64_t *rev, uint64_t deadline_ns, char *err,
                               size_t el)
{
    char *k = b64_dup(key, strlen(key));
    char *re = range_end != NULL ? b64_dup(range_end, strlen(range_end)) : NULL, *ans;
    char body[1024];
    size_t alen;
    tpx_status_t st = TPX_ERR_NO_MEMORY;
    *n = 0;
    if (k == NULL || (range_end != NULL && re == NULL))
        goto out;
    if (re != NULL)
        snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\"%s}", k, re,
                 keys_only ? ",\"keys_only\":true" : "");
    else
        snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
    st = etcd_post_by(c, "/v3/kv/range", body, deadline_ns, &ans, &alen, err, el);
    if (st != TPX_OK)
        goto out;
    st = tpx__reg_parse_range(ans, alen, kvs, max, n, err, el);
    if (st == TPX_OK && total != NULL)
        st = tpx__reg_parse_range(ans, alen, NULL, 0, total, err, el);
    if (st == TPX_OK && rev != NULL) {
        tpx__jspan_t top, h, v;
        *rev = 0;
        if (tpx__json_parse(ans, alen, &top) == 0 && tpx__json_get(top, "header", &h) == 1 &&
            h.p[0] == '{' && tpx__json_get(h, "revision", &v) == 1)
            (void)tpx__json_u64(v, rev);
    }
    if (st == TPX_ERR_PROTOCOL)
        snprintf(err, el, "etcd answered a range with something else");
    free(ans);
out:
    free(k);
    free(re);
    return st;
}

/* ---- the registry ---- */

typedef struct reg_pub {
    struct reg_pub *next;
    tpx_engine_t *e;
    char name[TPX_NAME_MAX];
    char key[512];
    unsigned char *val;
    size_t val_len;
    uint64_t lease;
    int ttl;
    uint64_t next_ns; /* the next renewal */
    int reput;        /* put the value again (it replaced a publication the thread was renewing) */
} reg_pub_t;

struct tpx_registry {
    tpx__reg_sec_t *sec; /* shared with the resolvers */
    tpx__reg_ep_t eps[TPX_REG_MAX_ENDPOINTS];
    int neps;
    char url[512];
    char prefix[256];     /* without a trailing '/' */
    pthread_mutex_t lock; /* the caller's calls */
    tpx__http_conn_t conn;
    pthread_mutex_t pub_lock; /* pubs, stop; taken after lock */
    pthread_cond_t cv;
    reg_pub_t *pubs;
    int stop;
    int thread_started;
    pthread_t tid;
    tpx__http_conn_t ka; /* the keep-alive thread's */
    uint64_t list_rev;   /* etcd's revision at the last list (under lock) */
    /* tpx_registry_watch(): its stream, the bytes of a message not yet
     * complete, events not yet handed out */
    pthread_mutex_t watch_lock;
    tpx__http_conn_t wc;
    int watching;
    uint64_t next_rev; /* where a reopened stream starts (0: now) */
    char *wbuf;
    size_t wlen, wcap;
    tpx_registry_event_t *pend;
    size_t npend, cpend;
};

static void reg_key(const tpx_registry_t *r, const char *name, char *key, size_t len)
{
    snprintf(key, len, "%s/%s", r->prefix, name);
}

static int name_ok(const char *name)
{
    size_t l = name != NULL ? strlen(name) : 0;
    if (l == 0 || l >= TPX_NAME_MAX)
        return 0;
    for (size_t i = 0; i < l; i++)
        if ((unsigned char)name[i] < 0x21 || name[i] == '/' || name[i] == 0x7f)
            return 0;
    return 1;
}

static void sec_put(tpx__reg_sec_t *sec)
{
    if (sec == NULL || __atomic_sub_fetch(&sec->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    tpx__reg_trust_free(&sec->trust);
    tpx__tls_ctx_free(sec->tls);
    memset(sec->sign_sk, 0, sizeof(sec->sign_sk));
    memset(&sec->creds, 0, sizeof(sec->creds));
    free(sec);
}

static tpx__reg_sec_t *sec_get(tpx__reg_sec_t *sec)
{
    __atomic_add_fetch(&sec->refs, 1, __ATOMIC_ACQ_REL);
    return sec;
}

/* The security settings from TPX_METADATA_* for endpoints with (tls) or
 * without TLS: TPX_OK, or TPX_ERR_CONFIG (logged). */
static tpx_status_t sec_create(int tls, tpx__reg_sec_t **out)
{
    char why[512];
    tpx__reg_sec_t *sec = calloc(1, sizeof(*sec));
    if (sec == NULL)
        return TPX_ERR_NO_MEMORY;
    sec->refs = 1;
    if (tpx__reg_trust_parse(tpx__config_str(TPX_CFG_METADATA_TRUST), &sec->trust, why,
                             sizeof(why)) != 0) {
        TPX_ERROR("tpx_registry_open: %s", why);
        goto fail;
    }
    const char *kf = tpx__config_str(TPX_CFG_METADATA_SIGN_KEY);
    if (kf != NULL && kf[0] != '\0') {
        if (tpx__reg_sign_key_load(kf, sec->sign_pk, sec->sign_sk, why, sizeof(why)) != 0) {
            TPX_ERROR("tpx_registry_open: TPX_METADATA_SIGN_KEY: %s", why);
            goto fail;
        }
        sec->sign = 1;
    }
    const char *ca = tpx__config_str(TPX_CFG_METADATA_TLS_CA),
               *cert = tpx__config_str(TPX_CFG_METADATA_TLS_CERT),
               *key = tpx__config_str(TPX_CFG_METADATA_TLS_KEY);
    if (tls && (sec->tls = tpx__tls_ctx_new(ca, cert, key, why, sizeof(why))) == NULL) {
        TPX_ERROR("tpx_registry_open: TLS to etcd: %s", why);
        goto fail;
    }
    if (!tls && (ca[0] != '\0' || cert[0] != '\0' || key[0] != '\0')) {
        TPX_ERROR("tpx_registry_open: TPX_METADATA_TLS_* is set but the etcd endpoints are not "
                  "https://: refusing to speak to them in the clear");
        goto fail;
    }
    const char *user = tpx__config_str(TPX_CFG_METADATA_USER),
               *pwf = tpx__config_str(TPX_CFG_METADATA_PASSWORD_FILE);
    if (user[0] != '\0') {
        char *pw = pwf[0] != '\0' ? tpx__reg_read_file(pwf, 1, why, sizeof(why)) : NULL;
        if (pw == NULL) {
            TPX_ERROR("tpx_registry_open: etcd user '%s': %s", user,
                      pwf[0] != '\0' ? why : "TPX_METADATA_PASSWORD_FILE is not set");
            goto fail;
        }
        pw[strcspn(pw, "\r\n")] = '\0';
        size_t ul = strlen(user), pl = strlen(pw);
        int fits = ul < sizeof(sec->creds.user) && pl < sizeof(sec->creds.password);
        if (fits) {
            memcpy(sec->creds.user, user, ul + 1);
            memcpy(sec->creds.password, pw, pl + 1);
        }
        memset(pw, 0, strlen(pw));
        free(pw);
        if (!fits) {
            TPX_ERROR("tpx_registry_open: the etcd user name or password is too long");
            goto fail;
        }
        sec->auth = 1;
        if (!tls)
            TPX_WARN("registry: etcd user '%s' over plain http: its password and token travel in "
                     "the clear (use https:// endpoints)",
                     user);
    } else if (pwf[0] != '\0') {
        TPX_ERROR("tpx_registry_open: TPX_METADATA_PASSWORD_FILE is set without TPX_METADATA_USER");
        goto fail;
    }
    *out = sec;
    return TPX_OK;
fail:
    sec_put(sec);
    return TPX_ERR_CONFIG;
}

/* A connection to r's endpoints with r's TLS and credentials (r->sec,
 * which must outlive it). */
static void conn_init(tpx__http_conn_t *c, const tpx_registry_t *r)
{
    tpx__http_init(c, r->eps, r->neps);
    c->tls_ctx = r->sec->tls;
    c->creds = r->sec->auth ? &r->sec->creds : NULL;
}

TPX_API tpx_status_t tpx_registry_open(const char *url, const char *prefix, tpx_registry_t **out)
{
    if (out == NULL) {
        TPX_ERROR("tpx_registry_open: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_status_t st = tpx__config_load();
    if (st != TPX_OK)
        return st;
    if (url == NULL || url[0] == '\0')
        url = tpx__config_str(TPX_CFG_METADATA);
    if (prefix == NULL)
        prefix = tpx__config_str(TPX_CFG_METADATA_PREFIX);
    tpx_registry_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return TPX_ERR_NO_MEMORY;
    char why[256];
    if (tpx__reg_parse_url(url, r->eps, TPX_REG_MAX_ENDPOINTS, &r->neps, why, sizeof(why)) != 0) {
        TPX_ERROR("tpx_registry_open: %s", why);
        free(r);
        return TPX_ERR_INVALID_ARG;
    }
    size_t pl = strlen(prefix);
    while (pl > 0 && prefix[pl - 1] == '/')
        pl--;
    if (pl >= sizeof(r->prefix) || memchr(prefix, '\0', pl) != NULL) {
        TPX_ERROR("tpx_registry_open: the prefix is longer than %zu bytes", sizeof(r->prefix) - 1);
        free(r);
        return TPX_ERR_INVALID_ARG;
    }
    memcpy(r->prefix, prefix, pl);
    snprintf(r->url, sizeof(r->url), "%s", url);
    if ((st = sec_create(r->eps[0].tls, &r->sec)) != TPX_OK) {
        free(r);
        return st;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->pub_lock, NULL);
    pthread_mutex_init(&r->watch_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    conn_init(&r->conn, r);
    conn_init(&r->ka, r);
    conn_init(&r->wc, r);
    *out = r;
    return TPX_OK;
}

/* The keep-alive thread: renew each lease every TTL/3; publish again a
 * value whose lease etcd forgot. */
static void *reg_keepalive_main(void *arg)
{
    tpx_registry_t *r = arg;
    tpx__sigpipe_block_thread(); /* it writes sockets: common/sigpipe.h */
    int failing = 0;
    pthread_mutex_lock(&r->pub_lock);
    while (!r->stop) {
        uint64_t now = tpx__now_ns(), next = now + 1000000000ull;
        reg_pub_t *due = NULL;
        for (reg_pub_t *p = r->pubs; p != NULL; p = p->next) {
            if (p->next_ns <= now && due == NULL)
                due = p;
            if (p->next_ns < next)
                next = p->next_ns;
        }
        if (due == NULL) {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
                                  .tv_nsec = (long)(next % 1000000000ull)};
            pthread_cond_timedwait(&r->cv, &r->pub_lock, &ts);
            continue;
        }
        /* Work on a copy with the lock dropped: lookups and unpublish go on. */
        char key[512], name[TPX_NAME_MAX], err[256] = "";
        uint64_t lease = due->lease;
        int ttl = due->ttl;
        size_t vlen = due->val_len;
        unsigned char *val = malloc(vlen);
        if (val == NULL) {
            due->next_ns = now + 1000000000ull;
            continue;
        }
        memcpy(val, due->val, vlen);
        snprintf(key, sizeof(key), "%s", due->key);
        snprintf(name, sizeof(name), "%s", due->name);

        int64_t left = 0;
        uint64_t new_lease = 0;
        int reput = due->reput;
        due->reput = 0;
        pthread_mutex_unlock(&r->pub_lock);
        tpx_status_t st = etcd_keepalive(&r->ka, lease, &left, err, sizeof(err));
        if (st == TPX_OK && left > 0 && reput)
            st = etcd_put(&r->ka, key, val, vlen, lease, err, sizeof(err));
        if (st == TPX_OK && left <= 0) {
            TPX_WARN("registry: etcd forgot the lease of engine %s (it was unreachable for "
                     "longer than the TTL of %d s): publishing it again",
                     name, ttl);
            st = etcd_grant(&r->ka, ttl, &new_lease, err, sizeof(err));
            if (st == TPX_OK)
                st = etcd_put(&r->ka, key, val, vlen, new_lease, err, sizeof(err));
        }
        free(val);
        if (st != TPX_OK && !failing)
            TPX_WARN("registry: cannot renew the lease of engine %s at %s: %s (retrying every "
                     "second; it disappears from the registry after %d s)",
                     name, r->url, err, ttl);
        else if (st == TPX_OK && failing)
            TPX_WARN("registry: etcd at %s answers again; engine %s's lease renewed", r->url, name);
        failing = st != TPX_OK;

        pthread_mutex_lock(&r->pub_lock);
        reg_pub_t *p = r->pubs;
        while (p != NULL && !(p->lease == lease && strcmp(p->key, key) == 0))
            p = p->next;
        if (p == NULL) { /* unpublished meanwhile */
            if (new_lease != 0 && st == TPX_OK) {
                pthread_mutex_unlock(&r->pub_lock);
                etcd_revoke(&r->ka, new_lease);
                pthread_mutex_lock(&r->pub_lock);
            }
            continue;
        }
        if (new_lease != 0 && st == TPX_OK)
            p->lease = new_lease;
        if (reput && st != TPX_OK)
            p->reput = 1; /* again on the next try */
        uint64_t period = st == TPX_OK ? (uint64_t)p->ttl * 1000000000ull / 3 : 1000000000ull;
        p->next_ns = tpx__now_ns() + TPX_MAX(period, 500000000ull);
    }
    pthread_mutex_unlock(&r->pub_lock);
    return NULL;
}

static void pub_free(reg_pub_t *p)
{
    free(p->val);
    free(p);
}

TPX_API tpx_status_t tpx_registry_publish(tpx_registry_t *r, tpx_engine_t *e,
                                          const tpx_rdesc_t *descs, size_t ndescs, int ttl_s)
{
    if (r == NULL || e == NULL || (descs == NULL && ndescs > 0) || ttl_s < 0) {
        TPX_ERROR("tpx_registry_publish: invalid argument");
        return TPX_ERR_INVALID_ARG;
    }
    if (ndescs > TPX_REGISTRY_MAX_DESCS) {
        TPX_ERROR("tpx_registry_publish: %zu descriptors, at most %d", ndescs,
                  TPX_REGISTRY_MAX_DESCS);
        return TPX_ERR_INVALID_ARG;
    }
    for (size_t i = 0; i < ndescs; i++) {
        if (tpx_rdesc_info(&descs[i], NULL, NULL) != TPX_OK) { /* it said why */
            TPX_ERROR("tpx_registry_publish: descriptor %zu is not one", i);
            return TPX_ERR_INVALID_ARG;
        }
    }
    const char *ename = tpx__ident_name(e);
    if (!name_ok(ename)) {
        TPX_ERROR("tpx_registry_publish: engine name '%s' cannot be a registry key (1..63 "
                  "printable bytes, no '/' or space)",
                  ename);
        return TPX_ERR_INVALID_ARG;
    }
    int ttl = ttl_s > 0 ? ttl_s : (int)tpx__config_int(TPX_CFG_METADATA_TTL);
    unsigned char md[TPX_METADATA_MAX];
    size_t md_len = sizeof(md);
    tpx_status_t st = tpx_engine_get_metadata(e, md, &md_len);
    if (st != TPX_OK)
        return st;
    /* Signed by the engine's identity key (its metadata names it) and by
     * TPX_METADATA_SIGN_KEY: readers trust one of them (trust.c). */
    const unsigned char *epk = NULL, *esk = NULL;
    int ekeys = tpx__ident_engine_keys(e, &epk, &esk);
    size_t nsigs = (size_t)(ekeys != 0) + (size_t)r->sec->sign;
    reg_pub_t *p = calloc(1, sizeof(*p));
    size_t cap = TPX_REG_VALUE_HDR + md_len + ndescs * TPX_RDESC_SIZE + nsigs * TPX_REG_SIG_SIZE;
    if (p == NULL || (p->val = malloc(cap)) == NULL) {
        free(p);
        return TPX_ERR_NO_MEMORY;
    }
    p->e = e;
    p->ttl = ttl;
    snprintf(p->name, sizeof(p->name), "%s", ename);
    reg_key(r, p->name, p->key, sizeof(p->key));
    tpx__reg_value_encode(md, md_len, descs, ndescs, nsigs, p->val, cap, &p->val_len);
    size_t sig = 0;
    if (ekeys)
        st = tpx__reg_value_sign(p->key, p->val, p->val_len, sig++, epk, esk);
    if (st == TPX_OK && r->sec->sign)
        st = tpx__reg_value_sign(p->key, p->val, p->val_len, sig++, r->sec->sign_pk,
                                 r->sec->sign_sk);
    if (st != TPX_OK) {
        TPX_ERROR("tpx_registry_publish: engine %s: cannot sign its value: %s", p->name,
                  tpx_status_string(st));
        pub_free(p);
        return st;
    }

    char err[256] = "";
    pthread_mutex_lock(&r->lock);
    st = etcd_grant(&r->conn, ttl, &p->lease, err, sizeof(err));
    if (st == TPX_OK)
        st = etcd_put(&r->conn, p->key, p->val, p->val_len, p->lease, err, sizeof(err));
    if (st != TPX_OK && p->lease != 0)
        etcd_revoke(&r->conn, p->lease);
    pthread_mutex_unlock(&r->lock);
    if (st != TPX_OK) {
        TPX_ERROR("tpx_registry_publish: engine %s at %s: %s", p->name, r->url, err);
        pub_free(p);
        return st;
    }
    /* A publication of the same engine is replaced; its old lease revoked
     * after the new value is in (the key never disappears meanwhile). */
    pthread_mutex_lock(&r->pub_lock);
    reg_pub_t *old = NULL;
    for (reg_pub_t **pp = &r->pubs; *pp != NULL; pp = &(*pp)->next)
        if (strcmp((*pp)->key, p->key) == 0) {
            old = *pp;
            *pp = old->next;
            break;
        }
    p->next_ns = tpx__now_ns() + (uint64_t)ttl * 1000000000ull / 3;
    p->next = r->pubs;
    r->pubs = p;
    int start = !r->thread_started;
    if (start) {
        int rc = pthread_create(&r->tid, NULL, reg_keepalive_main, r);
        if (rc != 0) {
            r->pubs = p->next;
            pthread_mutex_unlock(&r->pub_lock);
            TPX_ERROR("tpx_registry_publish: cannot start the keep-alive thread: %s", strerror(rc));
            pthread_mutex_lock(&r->lock);
            etcd_revoke(&r->conn, p->lease);
            pthread_mutex_unlock(&r->lock);
            pub_free(p);
            if (old != NULL)
                pub_free(old);
            return TPX_ERR_IO;
        }
        r->thread_started = 1;
    }
    char name[TPX_NAME_MAX], key[sizeof(p->key)];
    uint64_t lease = p->lease;
    snprintf(name, sizeof(name), "%s", p->name);
    snprintf(key, sizeof(key), "%s", p->key);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->pub_lock);
    if (old != NULL) {
        pthread_mutex_lock(&r->lock);
        etcd_revoke(&r->conn, old->lease);
        pthread_mutex_unlock(&r->lock);
        pub_free(old);
        /* The keep-alive thread may have been putting the old value again
         * (its lease lost) while ours went in: its put can land after ours,
         * and its lease, revoked, take the key with it. It puts ours once
         * more, after whatever it was doing. */
        pthread_mutex_lock(&r->pub_lock);
        for (reg_pub_t *q = r->pubs; q != NULL; q = q->next)
            if (q->lease == lease && strcmp(q->key, key) == 0) {
                q->reput = 1;
                q->next_ns = 0;
                pthread_cond_signal(&r->cv);
            }
        pthread_mutex_unlock(&r->pub_lock);
    }
    char signer[2 * TPX_REG_PK + 1] = "", by[2 * TPX_REG_PK + 40];
    if (r->sec->sign)
        tpx__reg_key_hex(r->sec->sign_pk, signer);
    snprintf(by, sizeof(by), "%s%s%s", ekeys ? "its identity key" : "",
             ekeys && signer[0] ? " and key " : signer[0] ? "key " : "",
             signer[0] ? signer : ekeys ? "" : "no key");
    TPX_INFO("registry: engine %s published at %s%s (lease %llu, TTL %d s, %zu descriptors, "
             "signed by %s)",
             name, r->url, key, (unsigned long long)lease, ttl, ndescs, by);
    return TPX_OK;
}

TPX_API tpx_status_t tpx_registry_unpublish(tpx_registry_t *r, tpx_engine_t *e)
{
    if (r == NULL || e == NULL) {
        TPX_ERROR("tpx_registry_unpublish: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&r->pub_lock);
    reg_pub_t *p = NULL;
    for (reg_pub_t **pp = &r->pubs; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->e == e) {
            p = *pp;
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&r->pub_lock);
    if (p == NULL) {
        TPX_ERROR("tpx_registry_unpublish: engine %s is not published by this registry",
                  tpx__ident_name(e));
        return TPX_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&r->lock);
    etcd_revoke(&r->conn, p->lease);
    pthread_mutex_unlock(&r->lock);
    pub_free(p);
    return TPX_OK;
}

TPX_API void tpx_registry_close(tpx_registry_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->pub_lock);
    r->stop = 1;
    pthread_cond_signal(&r->cv);
    reg_pub_t *pubs = r->pubs;
    r->pubs = NULL;
    pthread_mutex_unlock(&r->pub_lock);
    if (r->thread_started)
        pthread_join(r->tid, NULL);
    while (pubs != NULL) {
        reg_pub_t *p = pubs;
        pubs = p->next;
        etcd_revoke(&r->conn, p->lease);
        pub_free(p);
    }
    tpx__http_close(&r->conn);
    tpx__http_close(&r->ka);
    tpx__http_close(&r->wc);
    free(r->wbuf);
    free(r->pend);
    pthread_mutex_destroy(&r->watch_lock);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->pub_lock);
    pthread_mutex_destroy(&r->lock);
    sec_put(r->sec);
    free(r);
}

/* Without a trust setting a reader takes whatever value sits under a
 * name: it says so once per process. */
static void warn_unauthenticated(const char *url)
{
    static int warned;
    if (__atomic_exchange_n(&warned, 1, __ATOMIC_ACQ_REL))
        return;
    TPX_WARN("registry: TPX_METADATA_TRUST is not set: names in etcd at %s are not "
             "authenticated (whoever can write there can point any name at an engine of "
             "theirs); see SECURITY.md",
             url);
}

/* Is the value of `key` for `name` one this reader may take? Signed by a
 * key trusted for the name, and describing an engine of that name that
 * proves an identity key on every connection. TPX_OK, or TPX_ERR_ACCESS
 * (logged). */
static tpx_status_t value_trusted(const tpx__reg_sec_t *sec, const char *url, const char *key,
                                  const char *name, const unsigned char *val, size_t len,
                                  const unsigned char *md, size_t md_len)
{
    char why[400];
    if (!sec->trust.set) {
        warn_unauthenticated(url);
        return TPX_OK;
    }
    tpx_status_t st = tpx__reg_trust_check(&sec->trust, key, name, val, len, why, sizeof(why));
    if (st == TPX_OK) {
        tpx_md_t m;
        if (tpx__md_decode(md, md_len, &m) != TPX_OK || strcmp(m.name, name) != 0) {
            snprintf(why, sizeof(why), "its metadata is not that of an engine named '%s'", name);
            st = TPX_ERR_ACCESS;
        } else if (!m.has_key) {
            snprintf(why, sizeof(why),
                     "its engine has no identity key (TPX_IDENTITY=dial or no "
                     "libsodium): its connections could not be proven");
            st = TPX_ERR_ACCESS;
        }
    }
    if (st != TPX_OK)
        TPX_ERROR("registry: refusing the value of engine %s in etcd at %s (key %s): %s; "
                  "TPX_METADATA_TRUST says whose signatures a name needs",
                  name, url, key, why);
    return st;
}

/* Look `name` up on connection c by deadline_ns: the entry, or NOT_FOUND /
 * UNREACHABLE / ACCESS with the error logged here. */
static tpx_status_t reg_lookup(tpx__http_conn_t *c, const tpx__reg_sec_t *sec, const char *url,
                               const char *prefix, const char *name, uint64_t deadline_ns,
                               tpx_registry_entry_t *entry)
{
    char key[512], err[256] = "";
    tpx__reg_kv_t kv;
    size_t n = 0;
    snprintf(key, sizeof(key), "%s/%s", prefix, name);
    tpx_status_t st = etcd_range(c, key, NULL, 0, &kv, 1, &n, NULL, NULL, deadline_ns, err,
                                 sizeof(err));
    if (st != TPX_OK) {
        TPX_ERROR("registry: cannot look up engine %s: etcd at %s: %s", name, url, err);
        return st;
    }
    if (n == 0) {
        TPX_ERROR("registry: no engine named '%s' in etcd at %s (key %s): it never published, or "
                  "its lease expired (the engine stopped, or lost etcd for longer than its TTL)",
                  name, url, key);
        return TPX_ERR_NOT_FOUND;
    }
    const unsigned char *md, *descs;
    size_t md_len, nd;
    st = kv.val != NULL ? tpx__reg_value_decode(kv.val, kv.val_len, &md, &md_len, &descs, &nd)
                        : TPX_ERR_PROTOCOL;
    if (st != TPX_OK) {
        TPX_ERROR("registry: the value of %s in etcd at %s is not a tpx engine (%zu bytes; "
                  "another program's key, or another tpx version)",
                  key, url, kv.val_len);
    } else if ((st = value_trusted(sec, url, key, name, kv.val, kv.val_len, md, md_len)) ==
               TPX_OK) {
        snprintf(entry->name, sizeof(entry->name), "%s", name);
        memcpy(entry->md, md, md_len);
        entry->md_len = md_len;
        memcpy(entry->descs, descs, nd * TPX_RDESC_SIZE);
        entry->ndescs = nd;
    }
    tpx__reg_kvs_free(&kv, n);
    return st;
}

TPX_API tpx_status_t tpx_registry_lookup(tpx_registry_t *r, const char *name,
                                         tpx_registry_entry_t *entry)
{
    if (r == NULL || entry == NULL || !name_ok(name)) {
        TPX_ERROR(
            "tpx_registry_lookup: invalid argument (a name is 1..63 printable bytes, no '/')");
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&r->lock);
    tpx_status_t st = reg_lookup(&r->conn, r->sec, r->url, r->prefix, name, call_deadline(), entry);
    pthread_mutex_unlock(&r->lock);
    return st;
}

TPX_API tpx_status_t tpx_registry_list(tpx_registry_t *r, char (*names)[TPX_NAME_MAX], size_t max,
                                       size_t *n)
{
    if (r == NULL || n == NULL || (names == NULL && max > 0)) {
        TPX_ERROR("tpx_registry_list: invalid argument");
        return TPX_ERR_INVALID_ARG;
    }
    char from[300], to[300], err[256] = "";
    snprintf(from, sizeof(from), "%s/", r->prefix);
    snprintf(to, sizeof(to), "%s0", r->prefix); /* '0' follows '/' */
    size_t want = max < 4096 ? max : 4096, got = 0, total = 0;
    tpx__reg_kv_t *kvs = want > 0 ? calloc(want, sizeof(*kvs)) : NULL;
    if (want > 0 && kvs == NULL)
        return TPX_ERR_NO_MEMORY;
    pthread_mutex_lock(&r->lock);
    uint64_t rev = 0;
    tpx_status_t st =
        etcd_range(&r->conn, from, to, 1, kvs, want, &got, &total, &rev, call_deadline(), err,
                   sizeof(err));
    if (st == TPX_OK && rev > 0)
        r->list_rev = rev;
    pthread_mutex_unlock(&r->lock);
    if (st != TPX_OK) {
        TPX_ERROR("tpx_registry_list: etcd at %s: %s", r->url, err);
        free(kvs);
        return st;
    }
    size_t fl = strlen(from), o = 0;
    for (size_t i = 0; i < got; i++) {
        const char *nm = kvs[i].key + fl;
        if (strncmp(kvs[i].key, from, fl) != 0 || !name_ok(nm))
            continue;
        snprintf(names[o++], TPX_NAME_MAX, "%s", nm);
    }
    tpx__reg_kvs_free(kvs, got);
    free(kvs);
    *n = total > got ? o + (total - got) : o;
    return TPX_OK;
}

/* ---- watching ---- */

#define WATCH_MSG_MAX  (8u << 20) /* one message of the watch stream */
#define WATCH_PEND_MAX 65536      /* events held for the caller */

/* Open the watch stream by deadline_ns. */
static tpx_status_t watch_open(tpx_registry_t *r, uint64_t deadline_ns)
{
    char from[300], to[300], body[1024];
    snprintf(from, sizeof(from), "%s/", r->prefix);
    snprintf(to, sizeof(to), "%s0", r->prefix);
    char *k = b64_dup(from, strlen(from)), *e = b64_dup(to, strlen(to));
    if (k == NULL || e == NULL) {
        free(k);
        free(e);
        return TPX_ERR_NO_MEMORY;
    }
    if (r->next_rev == 0) {
        pthread_mutex_lock(&r->lock);
        r->next_rev = r->list_rev > 0 ? r->list_rev + 1 : 0;
        pthread_mutex_unlock(&r->lock);
    }
    char start[48] = "";
    if (r->next_rev > 0)
        snprintf(start, sizeof(start), ",\"start_revision\":\"%llu\"",
                 (unsigned long long)r->next_rev);
    snprintf(body, sizeof(body), "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\"%s}}", k,
             e, start);
    free(k);
    free(e);
    r->wlen = 0;
    tpx_status_t st = TPX_OK;
    char err[256] = "";
    if (r->wc.creds != NULL && r->wc.token[0] == '\0' &&
        (st = etcd_authenticate(&r->wc, deadline_ns, err, sizeof(err))) != TPX_OK) {
        TPX_ERROR("tpx_registry_watch: cannot watch %s/ at %s: %s", r->prefix, r->url, err);
        return st == TPX_ERR_NO_MEMORY || st == TPX_ERR_ACCESS ? st : TPX_ERR_UNREACHABLE;
    }
    st = tpx__http_stream_open(&r->wc, "/v3/watch", body, deadline_ns);
    if (st != TPX_OK) {
        r->wc.token[0] = '\0'; /* got again next time: it may be why etcd refused */
        TPX_ERROR("tpx_registry_watch: cannot watch %s/ at %s: %s", r->prefix, r->url,
                  r->wc.last_err[0] ? r->wc.last_err : tpx_status_string(st));
        return st == TPX_ERR_NO_MEMORY ? st : TPX_ERR_UNREACHABLE;
    }
    r->watching = 1;
    return TPX_OK;
}

/* The complete messages in r->wbuf: their events queued. */
static tpx_status_t watch_take(tpx_registry_t *r)
{
    size_t fl = strlen(r->prefix) + 1;
    char *nl;
    while ((nl = memchr(r->wbuf, '\n', r->wlen)) != NULL) {
        size_t ml = (size_t)(nl - r->wbuf);
        size_t room = r->cpend - r->npend;
        if (room < 1024) {
            size_t cap = r->cpend ? r->cpend * 2 : 1024;
            tpx_registry_event_t *np = realloc(r->pend, cap * sizeof(*np));
            if (np == NULL)
                return TPX_ERR_NO_MEMORY;
            r->pend = np;
            r->cpend = cap;
        }
        /* Any number of events (one deleterange can end thousands of keys;
         * a fixed array failed such a message, and the watch reopened at
         * its revision and failed on it again, for ever): read one at a
         * time, all checked before any is queued. */
        tpx__reg_event_t ev;
        tpx__jspan_t events = {NULL, 0};
        uint64_t rev = 0;
        int created = 0, canceled = 0, er = 0;
        char err[160] = "";
        tpx_status_t st = TPX_OK;
        if (ml > 0)
            st = tpx__reg_watch_head(r->wbuf, ml, &events, &rev, &created, &canceled, err,
                                     sizeof(err));
        for (size_t pos = 0; st == TPX_OK && (er = tpx__reg_watch_event(events, &pos, &ev)) == 1;)
            ;
        if (st == TPX_OK && er < 0)
            st = TPX_ERR_PROTOCOL;
        if (st != TPX_OK) {
            memmove(r->wbuf, nl + 1, r->wlen - ml - 1);
            r->wlen -= ml + 1;
            TPX_ERROR("tpx_registry_watch: etcd at %s sent %s%s", r->url,
                      st == TPX_ERR_INVALID_STATE ? "an error: " : "a malformed watch message",
                      st == TPX_ERR_INVALID_STATE ? err : "");
            return st == TPX_ERR_INVALID_STATE ? TPX_ERR_UNREACHABLE : st;
        }
        if (canceled) {
            memmove(r->wbuf, nl + 1, r->wlen - ml - 1);
            r->wlen -= ml + 1;
            TPX_WARN("tpx_registry_watch: etcd at %s canceled the watch of %s/ (revision %llu "
                     "compacted?): watching again from now; changes in between are lost",
                     r->url, r->prefix, (unsigned long long)r->next_rev);
            r->next_rev = 0;
            return TPX_ERR_CONN_RESET;
        }
        if (created && r->next_rev == 0)
            r->next_rev = rev + 1;
        size_t dropped = 0;
        for (size_t pos = 0; tpx__reg_watch_event(events, &pos, &ev) == 1;) {
            if (ev.mod_rev >= r->next_rev)
                r->next_rev = ev.mod_rev + 1;
            const char *nm = ev.key + fl;
            if (strncmp(ev.key, r->prefix, fl - 1) != 0 || ev.key[fl - 1] != '/' || !name_ok(nm))
                continue;
            if (r->npend >= WATCH_PEND_MAX) {
                dropped++;
                continue;
            }
            if (r->npend >= r->cpend) {
                size_t cap = r->cpend * 2;
                tpx_registry_event_t *np = realloc(r->pend, cap * sizeof(*np));
                if (np == NULL)
                    return TPX_ERR_NO_MEMORY;
                r->pend = np;
                r->cpend = cap;
            }
            tpx_registry_event_t *o = &r->pend[r->npend++];
            snprintf(o->name, sizeof(o->name), "%s", nm);
            o->gone = ev.gone;
        }
        if (dropped > 0) /* once a message, not once an event */
            TPX_WARN("tpx_registry_watch: more than %d changes not taken: %zu dropped",
                     WATCH_PEND_MAX, dropped);
        memmove(r->wbuf, nl + 1, r->wlen - ml - 1);
        r->wlen -= ml + 1;
    }
    return TPX_OK;
}

TPX_API tpx_status_t tpx_registry_watch(tpx_registry_t *r, tpx_registry_event_t *events, size_t max,
                                        size_t *n, int timeout_ms)
{
    if (r == NULL || n == NULL || (events == NULL && max > 0) || timeout_ms < 0) {
        TPX_ERROR("tpx_registry_watch: invalid argument");
        return TPX_ERR_INVALID_ARG;
    }
    *n = 0;
    uint64_t deadline = tpx__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    /* Every byte, the stream's opening included, is awaited until the
     * caller's deadline; only a poll (timeout 0) that finds no stream opens
     * one under TPX_METADATA_TIMEOUT_MS, since it has nothing to poll yet. */
    uint64_t open_by = timeout_ms > 0 ? deadline : call_deadline();
    tpx_status_t st = TPX_OK;
    pthread_mutex_lock(&r->watch_lock);
    while (r->npend == 0) {
        if (!r->watching && (st = watch_open(r, open_by)) != TPX_OK)
            break;
        st = tpx__http_stream_next(&r->wc, deadline, &r->wbuf, &r->wlen, &r->wcap, WATCH_MSG_MAX);
        if (st == TPX_ERR_TIMED_OUT) {
            st = TPX_OK;
            break;
        }
        if (st == TPX_OK)
            st = watch_take(r);
        if (st != TPX_OK) {
            /* the stream is done with: open it again where it stopped (with a
             * fresh token: an expired one can be why it ended) */
            tpx__http_close(&r->wc);
            r->wc.token[0] = '\0';
            r->watching = 0;
            if (st == TPX_ERR_NO_MEMORY || tpx__now_ns() >= deadline)
                break;
            st = TPX_OK;
        }
    }
    size_t k = TPX_MIN(max, r->npend);
    if (k > 0) {
        memcpy(events, r->pend, k * sizeof(*events));
        memmove(r->pend, r->pend + k, (r->npend - k) * sizeof(*r->pend));
        r->npend -= k;
    }
    *n = k;
    pthread_mutex_unlock(&r->watch_lock);
    return k > 0 ? TPX_OK : st;
}

/* ---- the resolver of remotes loaded from the registry ---- */

typedef struct {
    tpx__resolver_t base;
    tpx__reg_sec_t *sec;
    tpx__http_conn_t conn;
    char url[512], prefix[256], name[TPX_NAME_MAX];
} reg_resolver_t;

/* The lookup ends by the caller's deadline (a tpx_xfer_post()'s: the
 * remote's other posters wait meanwhile), and by TPX_METADATA_TIMEOUT_MS. */
static tpx_status_t resolver_fn(tpx__resolver_t *base, uint64_t deadline_ns, unsigned char *blob,
                                size_t *len)
{
    reg_resolver_t *rs = (reg_resolver_t *)base;
    uint64_t own = call_deadline();
    if (deadline_ns > own)
        deadline_ns = own;
    if (tpx__ms_left(deadline_ns) <= 0) {
        TPX_ERROR("registry: no time left to look up engine %s (the caller's deadline passed)",
                  rs->name);
        return TPX_ERR_TIMED_OUT;
    }
    tpx_registry_entry_t *entry = malloc(sizeof(*entry));
    if (entry == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_status_t st =
        reg_lookup(&rs->conn, rs->sec, rs->url, rs->prefix, rs->name, deadline_ns, entry);
    tpx__http_close(&rs->conn); /* reconnections are rare: no connection kept */
    if (st == TPX_ERR_UNREACHABLE && deadline_ns < own && tpx__ms_left(deadline_ns) <= 0)
        st = TPX_ERR_TIMED_OUT; /* the caller's deadline cut the lookup short */
    if (st == TPX_OK) {
        if (entry->md_len > *len) {
            st = TPX_ERR_PROTOCOL;
        } else {
            memcpy(blob, entry->md, entry->md_len);
            *len = entry->md_len;
        }
    }
    free(entry);
    return st;
}

static void resolver_destroy(tpx__resolver_t *base)
{
    reg_resolver_t *rs = (reg_resolver_t *)base;
    tpx__http_close(&rs->conn);
    sec_put(rs->sec);
    free(rs);
}

TPX_API tpx_status_t tpx_registry_load_remote(tpx_registry_t *r, tpx_engine_t *e, const char *name,
                                              tpx_remote_t **remote, tpx_registry_entry_t *entry)
{
    if (r == NULL || e == NULL || remote == NULL || !name_ok(name)) {
        TPX_ERROR("tpx_registry_load_remote: invalid argument");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_registry_entry_t *tmp = entry != NULL ? entry : malloc(sizeof(*tmp));
    if (tmp == NULL)
        return TPX_ERR_NO_MEMORY;
    reg_resolver_t *rs = calloc(1, sizeof(*rs));
    tpx_status_t st = rs != NULL ? tpx_registry_lookup(r, name, tmp) : TPX_ERR_NO_MEMORY;
    tpx_remote_t *rm = NULL;
    tpx_md_t md;
    if (st == TPX_OK && tpx__md_decode(tmp->md, tmp->md_len, &md) != TPX_OK) {
        TPX_ERROR("tpx_registry_load_remote: the metadata of %s in etcd at %s is not valid", name,
                  r->url);
        st = TPX_ERR_PROTOCOL;
    }
    if (st == TPX_OK) {
        /* A remote loaded by this name before, whose engine restarted:
         * the same remote, moved to the new engine. */
        rm = tpx__remote_moved(e, name, md.engine_id);
        if (rm != NULL) {
            st = tpx__remote_refresh(rm);
            if (st != TPX_OK) {
                tpx_remote_release(rm);
                rm = NULL;
            } else {
                *remote = rm;
            }
            free(rs);
            rs = NULL;
        }
    }
    if (st == TPX_OK && rs != NULL)
        st = tpx_remote_load(e, tmp->md, tmp->md_len, &rm);
    if (st == TPX_OK && rs != NULL) {
        rs->base.fn = resolver_fn;
        rs->base.destroy = resolver_destroy;
        rs->sec = sec_get(r->sec);
        conn_init(&rs->conn, r);
        snprintf(rs->url, sizeof(rs->url), "%s", r->url);
        snprintf(rs->prefix, sizeof(rs->prefix), "%s", r->prefix);
        snprintf(rs->name, sizeof(rs->name), "%s", name);
        tpx__remote_set_resolver(rm, &rs->base);
        rs = NULL;
        *remote = rm;
    }
    free(rs);
    if (tmp != entry)
        free(tmp);
    return st;
}
