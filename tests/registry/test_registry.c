/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_registry.c - engines in etcd (tpx/registry.h), against a real etcd
 * started for each test (etcd_harness.h). One case per process:
 *
 *   unit      the parsers alone (URL, JSON, base64, HTTP framing, the
 *             published value), no etcd
 *   publish   publish / lookup / list / unpublish; a remote loaded by name
 *             reads the exported bytes
 *   sigkill   an engine SIGKILLed disappears from the registry within
 *             TTL + 2 s
 *   outage    etcd stopped mid-run: established transfers go on, new
 *             lookups fail with TPX_ERR_UNREACHABLE, and both recover when
 *             etcd is back (the lease is still renewed afterwards)
 *   watch     tpx_registry_watch(): publish / unpublish / a SIGKILLed engine
 *             seen as events, nothing missed between a list and the watch,
 *             the watch resumed after etcd restarted
 *   keys      keys etcd hands back: the longest prefix, another program's
 *             over-long key under it, 1500 deletes in one watch message;
 *             an endpoint by host name; a watch with timeout 0; a
 *             publication replaced
 *   restart   a remote loaded from the registry reconnects to its engine
 *             restarted under the same name (a new engine id and port);
 *             once the name's lease expired, it fails with NOT_FOUND
 *   stall     etcd stopped (SIGSTOP: it accepts and never answers) while a
 *             registry-loaded remote's engine is dead: tpx_xfer_post()
 *             with a 200 ms deadline returns by it, and so does a second
 *             poster to that remote (the lookup honours the caller's
 *             deadline, not TPX_METADATA_TIMEOUT_MS)
 *   trust     signed values: TPX_METADATA_TRUST's pinned and cluster keys
 *             taken; an attacker's value under a dead engine's name refused,
 *             and the WRITE of a remote that reconnects by name never lands
 *   tls       etcd over TLS with client certificates: publish, look up,
 *             read, list and watch; refused: no client certificate, one of
 *             another CA, a server certificate of a CA not trusted, TLS
 *             settings with a plain endpoint
 *   auth      etcd's authentication (over TLS): a user works on after its
 *             token expired; a wrong password is TPX_ERR_ACCESS
 *   probe     (internal) open a registry and list: prints the status
 *   trickle   a fake etcd that streams a watch answer one byte at a time:
 *             tpx_registry_watch(1000 ms) returns by its deadline, with
 *             nothing, and the stream goes on at the next call (no etcd)
 *   run -- CMD...   run CMD with TPX_METADATA pointing at a fresh etcd
 *             (for the tpx-perf cluster tests); its exit status
 *   serve NAME GEN TTL   (internal) a server engine for sigkill/restart
 *
 * Exit 77 (skipped) when there is no etcd binary.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "common/util.h"
#include "engine/ident.h"
#include "etcd_harness.h"
#include "http_memsrc.h"
#include "registry/registry.h"
#include "tpx/registry.h"
#include "tpx/tpx.h"

#define REGION (1u << 20)

static const char *self;

static unsigned char pattern(size_t i, int gen)
{
    return (unsigned char)(i * 7 + (size_t)gen * 13 + (i >> 8));
}

/* An engine named `name` on 127.0.0.1 with one exported region of the
 * pattern of `gen`. */
typedef struct {
    tpx_engine_t *e;
    unsigned char *mem;
    tpx_region_t *region;
    tpx_rdesc_t desc;
} node_t;

static int node_make(node_t *n, const char *name, int gen)
{
    memset(n, 0, sizeof(*n));
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.name = name;
    p.port = TPX_PORT_EPHEMERAL;
    p.bind_addr = "127.0.0.1";
    if (tpx_engine_create(&p, &n->e) != TPX_OK)
        return -1;
    n->mem = malloc(REGION);
    if (n->mem == NULL)
        return -1;
    for (size_t i = 0; i < REGION; i++)
        n->mem[i] = pattern(i, gen);
    if (tpx_mem_register(n->e, n->mem, REGION, TPX_MEM_HOST, &n->region) != TPX_OK ||
        tpx_region_export(n->region, 0, 0, &n->desc) != TPX_OK)
        return -1;
    return 0;
}

static void node_free(node_t *n)
{
    if (n->region != NULL)
        tpx_mem_deregister(n->region);
    tpx_engine_destroy(n->e);
    free(n->mem);
}

/* READ the whole exported region of `rm` (descriptor d) into a fresh
 * buffer and check it holds the pattern of `gen`. */
static tpx_status_t read_check(tpx_engine_t *e, tpx_remote_t *rm, const tpx_rdesc_t *d, int gen)
{
    unsigned char *buf = calloc(1, REGION);
    tpx_region_t *reg = NULL;
    tpx_status_t st = tpx_mem_register(e, buf, REGION, TPX_MEM_HOST, &reg);
    if (st == TPX_OK) {
        tpx_iov_t v = {.local = reg, .remote = d, .len = REGION};
        tpx_xfer_t *x = NULL;
        st = tpx_rma(rm, TPX_OP_READ, &v, 1, NULL, 0, &x);
        if (st == TPX_OK) {
            st = tpx_xfer_wait(x, 20000, NULL);
            tpx_xfer_release(x);
        }
        for (size_t i = 0; st == TPX_OK && i < REGION; i++)
            if (buf[i] != pattern(i, gen)) {
                fprintf(stderr, "byte %zu: %u, want %u (generation %d)\n", i, buf[i],
                        pattern(i, gen), gen);
                st = TPX_ERR_INTERNAL;
            }
        tpx_mem_deregister(reg);
    }
    free(buf);
    return st;
}

/* ---- unit ---- */

static tpx_status_t http_parse(const char *text, size_t step, tpx__http_resp_t *r)
{
    static tpx__http_rd_t rd;
    http_memsrc_t m;
    http_memsrc_attach(&rd, &m, text, strlen(text), step);
    return tpx__http_read_response(&rd, UINT64_MAX, 1024, r);
}

static int case_unit(void)
{
    tpx__reg_ep_t eps[8];
    int n;
    char why[256];
    EXPECT(tpx__reg_parse_url("etcd://a:1,[::1]:2379,b.example:65535", eps, 8, &n, why,
                              sizeof(why)) == 0);
    EXPECT_EQ(n, 3);
    EXPECT(strcmp(eps[1].host, "::1") == 0 && strcmp(eps[1].port, "2379") == 0);
    EXPECT(tpx__reg_parse_url("etcd://a", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(tpx__reg_parse_url("ftp://a:1", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(tpx__reg_parse_url("http://a:1", eps, 8, &n, why, sizeof(why)) == 0 && !eps[0].tls);
    EXPECT(tpx__reg_parse_url("https://a:1,https://b:2,c:3", eps, 8, &n, why, sizeof(why)) == 0);
    EXPECT(n == 3 && eps[0].tls && eps[1].tls && eps[2].tls && strcmp(eps[2].host, "c") == 0);
    EXPECT(tpx__reg_parse_url("https://a:1,etcd://b:2", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(strstr(why, "mix") != NULL);
    EXPECT(tpx__reg_parse_url("a:1,https://b:2", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(tpx__reg_parse_url("etcd://a:0", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(tpx__reg_parse_url("etcd://a:1,,b:2", eps, 8, &n, why, sizeof(why)) < 0);
    EXPECT(tpx__reg_parse_url("", eps, 8, &n, why, sizeof(why)) < 0);

    /* base64 round trips and rejects */
    unsigned char in[5] = {0xff, 0, 'a', 0x80, 1}, out[8];
    char enc[16];
    for (size_t l = 0; l <= 5; l++) {
        tpx__b64_encode(in, l, enc);
        EXPECT_EQ(tpx__b64_decode(enc, strlen(enc), out, sizeof(out)), (long)l);
        EXPECT(memcmp(in, out, l) == 0);
    }
    EXPECT(tpx__b64_decode("YQ=", 3, out, 8) < 0);
    EXPECT(tpx__b64_decode("Y=Q=", 4, out, 8) < 0);
    EXPECT(tpx__b64_decode("YQ==YQ==", 8, out, 8) < 0);
    EXPECT(tpx__b64_decode("YWJj", 4, out, 2) < 0);

    /* JSON */
    static const char js[] = " {\"a\":[1,-2.5e3,\"x\\u00e9\\n\"],\"b\":{\"c\":true},\"d\":\"42\"} ";
    tpx__jspan_t top, v, e;
    EXPECT(tpx__json_parse(js, strlen(js), &top) == 0);
    EXPECT(tpx__json_get(top, "b", &v) == 1 && tpx__json_get(v, "c", &e) == 1 && e.n == 4);
    EXPECT(tpx__json_get(top, "zz", &v) == 0);
    uint64_t u;
    EXPECT(tpx__json_get(top, "d", &v) == 1 && tpx__json_u64(v, &u) == 0 && u == 42);
    size_t pos = 0, cnt = 0, sl;
    char s[16];
    EXPECT(tpx__json_get(top, "a", &v) == 1);
    while (tpx__json_next(v, &pos, &e) == 1)
        cnt++;
    EXPECT_EQ(cnt, 3);
    EXPECT(tpx__json_str(e, s, sizeof(s), &sl) == 0 && sl == 4 && strcmp(s, "x\xc3\xa9\n") == 0);
    static const char *bad[] = {"",   "{",       "{\"a\"}",  "[1,]",      "{\"a\":1,}",
                                "01", "\"\\x\"", "\"\x01\"", "tru",       "[1 2]",
                                "1.", "-",       "{} {}",    "\"\\u12\"", "{\"a\":}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        EXPECT(tpx__json_parse(bad[i], strlen(bad[i]), &top) != 0);
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    EXPECT(tpx__json_parse(deep, 200, &top) != 0); /* deeper than the limit */

    /* HTTP framing, fed a byte at a time and all at once */
    for (size_t step = 1; step <= 4096; step *= 4096) {
        tpx__http_resp_t r;
        EXPECT(http_parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloEXTRA", step, &r) ==
               TPX_OK);
        EXPECT(r.status == 200 && r.body_len == 5 && strcmp(r.body, "hello") == 0 && r.keep_alive);
        free(r.body);
        EXPECT(http_parse("HTTP/1.1 404 NF\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n"
                          "A\r\n0123456789\r\n0\r\nT: 1\r\n\r\n",
                          step, &r) == TPX_OK);
        EXPECT(r.status == 404 && r.body_len == 13 && strcmp(r.body, "abc0123456789") == 0);
        free(r.body);
        EXPECT(http_parse("HTTP/1.0 200 OK\r\n\r\nuntil the end", step, &r) == TPX_OK);
        EXPECT(r.body_len == 13 && !r.keep_alive);
        free(r.body);
    }
    static const char *hbad[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", /* over the bound */
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", /* short */
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/2 200\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(hbad) / sizeof(hbad[0]); i++) {
        tpx__http_resp_t r;
        tpx_status_t st = http_parse(hbad[i], 7, &r);
        if (st == TPX_OK) {
            fprintf(stderr, "accepted bad response %zu\n", i);
            free(r.body);
        }
        EXPECT(st != TPX_OK);
    }

    /* etcd answers */
    static const char range[] =
        "{\"header\":{\"revision\":\"2\"},\"kvs\":[{\"key\":\"YQ==\",\"value\":\"Yg==\","
        "\"lease\":\"7\"},{\"key\":\"Yw==\"}],\"count\":\"2\"}";
    tpx__reg_kv_t kvs[4];
    size_t nk;
    char err[128];
    EXPECT(tpx__reg_parse_range(range, strlen(range), kvs, 4, &nk, err, sizeof(err)) == TPX_OK);
    EXPECT(nk == 2 && strcmp(kvs[0].key, "a") == 0 && kvs[0].val_len == 1 && kvs[0].val[0] == 'b');
    EXPECT(strcmp(kvs[1].key, "c") == 0 && kvs[1].val == NULL);
    tpx__reg_kvs_free(kvs, nk);
    /* a key longer than any of ours reads as "" (skipped), not as an error;
     * a 300-byte one (the longest prefix's) whole */
    {
        static char key[701], k64[1000], body[2200];
        for (int len = 300; len <= 700; len += 400) {
            memset(key, 'k', (size_t)len);
            key[len] = '\0';
            tpx__b64_encode((const unsigned char *)key, (size_t)len, k64);
            snprintf(body, sizeof(body),
                     "{\"header\":{},\"kvs\":[{\"key\":\"%s\"},{\"key\":\"YQ==\"}]}", k64);
            EXPECT(tpx__reg_parse_range(body, strlen(body), kvs, 4, &nk, err, sizeof(err)) ==
                   TPX_OK);
            EXPECT(nk == 2 && strlen(kvs[0].key) == (len == 300 ? 300u : 0u) &&
                   strcmp(kvs[1].key, "a") == 0);
            tpx__reg_kvs_free(kvs, nk);
        }
    }
    static const char lerr[] = "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}";
    uint64_t id;
    int64_t ttl;
    EXPECT(tpx__reg_parse_lease(lerr, strlen(lerr), 0, &id, &ttl, err, sizeof(err)) ==
           TPX_ERR_INVALID_STATE);
    EXPECT(strstr(err, "lease not found") != NULL);
    static const char ka[] = "{\"result\":{\"header\":{},\"ID\":\"123\"}}\n{\"result\":{}}";
    EXPECT(tpx__reg_parse_lease(ka, strlen(ka), 1, &id, &ttl, err, sizeof(err)) == TPX_OK);
    EXPECT(id == 123 && ttl == 0);

    /* the published value */
    unsigned char md[100], val[400];
    const unsigned char *pm, *pd;
    size_t vl, ml, nd;
    memset(md, 5, sizeof(md));
    tpx_rdesc_t d[2];
    memset(d, 9, sizeof(d));
    EXPECT(tpx__reg_value_encode(md, sizeof(md), d, 2, 0, val, sizeof(val), &vl) == TPX_OK);
    EXPECT(tpx__reg_value_decode(val, vl, &pm, &ml, &pd, &nd) == TPX_OK);
    EXPECT(ml == 100 && nd == 2 && memcmp(pm, md, 100) == 0 && memcmp(pd, d, sizeof(d)) == 0);
    EXPECT(tpx__reg_value_decode(val, vl - 1, &pm, &ml, &pd, &nd) != TPX_OK);
    val[0] ^= 1;
    EXPECT(tpx__reg_value_decode(val, vl, &pm, &ml, &pd, &nd) != TPX_OK);

    /* signed values: two signatures, checked against trust settings */
    unsigned char seed[32], pk1[32], sk1[64], pk2[32], sk2[64];
    char h1[65], h2[65], spec[300], twhy[400];
    memset(seed, 1, sizeof(seed));
    EXPECT(tpx__ident_seed_keypair(seed, pk1, sk1) == TPX_OK);
    memset(seed, 2, sizeof(seed));
    EXPECT(tpx__ident_seed_keypair(seed, pk2, sk2) == TPX_OK);
    tpx__reg_key_hex(pk1, h1);
    tpx__reg_key_hex(pk2, h2);
    static unsigned char sv[600];
    const unsigned char *sigs;
    size_t ns, slen;
    EXPECT(tpx__reg_value_encode(md, sizeof(md), d, 2, 2, sv, sizeof(sv), &vl) == TPX_OK);
    EXPECT(vl == 16 + 100 + sizeof(d) + 2 * 96);
    EXPECT(tpx__reg_value_sign("/p/a", sv, vl, 0, pk1, sk1) == TPX_OK);
    EXPECT(tpx__reg_value_sign("/p/a", sv, vl, 1, pk2, sk2) == TPX_OK);
    EXPECT(tpx__reg_value_decode(sv, vl, &pm, &ml, &pd, &nd) == TPX_OK && ml == 100 && nd == 2);
    EXPECT(tpx__reg_value_sigs(sv, vl, &sigs, &ns, &slen) == TPX_OK && ns == 2 && slen == vl - 192);
    tpx__reg_trust_t t;
    snprintf(spec, sizeof(spec), "a=%s", h1);
    EXPECT(tpx__reg_trust_parse(spec, &t, twhy, sizeof(twhy)) == 0 && t.set && t.n == 1);
    EXPECT(tpx__reg_trust_check(&t, "/p/a", "a", sv, vl, twhy, sizeof(twhy)) == TPX_OK);
    /* the same value under another key or name: refused */
    EXPECT(tpx__reg_trust_check(&t, "/p/b", "a", sv, vl, twhy, sizeof(twhy)) == TPX_ERR_ACCESS);
    EXPECT(strstr(twhy, "does not verify") != NULL);
    EXPECT(tpx__reg_trust_check(&t, "/p/b", "b", sv, vl, twhy, sizeof(twhy)) == TPX_ERR_ACCESS);
    EXPECT(strstr(twhy, "not trusted for this name") != NULL);
    /* one flipped byte of the metadata: refused */
    sv[20] ^= 1;
    EXPECT(tpx__reg_trust_check(&t, "/p/a", "a", sv, vl, twhy, sizeof(twhy)) == TPX_ERR_ACCESS);
    sv[20] ^= 1;
    tpx__reg_trust_free(&t);
    /* a cluster key trusts any name; an unsigned value is refused */
    snprintf(spec, sizeof(spec), "# comment\n x=%s ,\n*=%s\n", h1, h2);
    EXPECT(tpx__reg_trust_parse(spec, &t, twhy, sizeof(twhy)) == 0 && t.n == 2);
    EXPECT(strcmp(t.pins[1].name, "*") == 0 && memcmp(t.pins[1].pk, pk2, 32) == 0);
    EXPECT(tpx__reg_trust_check(&t, "/p/a", "a", sv, vl, twhy, sizeof(twhy)) == TPX_OK);
    EXPECT(tpx__reg_trust_check(&t, "/p/a", "a", val, 16 + 100 + sizeof(d), twhy, sizeof(twhy)) ==
           TPX_ERR_ACCESS);
    tpx__reg_trust_free(&t);
    /* malformed settings; an empty one is unset */
    EXPECT(tpx__reg_trust_parse("a=1234", &t, twhy, sizeof(twhy)) != 0);
    EXPECT(tpx__reg_trust_parse("=abc", &t, twhy, sizeof(twhy)) != 0);
    EXPECT(tpx__reg_trust_parse("/nonexistent/trust", &t, twhy, sizeof(twhy)) != 0);
    EXPECT(tpx__reg_trust_parse("", &t, twhy, sizeof(twhy)) == 0 && !t.set);
    /* the same in a file */
    char tp[] = "/tmp/tpx-trust-XXXXXX";
    int tfd = mkstemp(tp);
    snprintf(spec, sizeof(spec), "# readers of prefill-0\nprefill-0=%s\n\n*=%s # cluster\n", h1, h2);
    EXPECT(tfd >= 0 && write(tfd, spec, strlen(spec)) == (ssize_t)strlen(spec));
    EXPECT(tpx__reg_trust_parse(tp, &t, twhy, sizeof(twhy)) == 0 && t.n == 2);
    EXPECT(strcmp(t.pins[0].name, "prefill-0") == 0 && memcmp(t.pins[0].pk, pk1, 32) == 0);
    tpx__reg_trust_free(&t);
    close(tfd);
    unlink(tp);
    /* a signing key in PEM (RFC 8410's example) and in hex; a key file
     * that others can read is refused */
    char kp[] = "/tmp/tpx-key-XXXXXX";
    int kfd = mkstemp(kp);
    static const char pem[] = "-----BEGIN PRIVATE KEY-----\n"
                              "MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n"
                              "-----END PRIVATE KEY-----\n";
    EXPECT(kfd >= 0 && write(kfd, pem, strlen(pem)) == (ssize_t)strlen(pem));
    EXPECT(tpx__reg_sign_key_load(kp, pk1, sk1, twhy, sizeof(twhy)) == 0);
    tpx__reg_key_hex(pk1, h1);
    EXPECT(strcmp(h1, "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1") == 0);
    EXPECT(ftruncate(kfd, 0) == 0 && pwrite(kfd, h2, 64, 0) == 64); /* not a seed of ours, a key */
    EXPECT(tpx__reg_sign_key_load(kp, pk1, sk1, twhy, sizeof(twhy)) == 0);
    EXPECT(chmod(kp, 0644) == 0 && tpx__reg_sign_key_load(kp, pk1, sk1, twhy, sizeof(twhy)) != 0);
    EXPECT(strstr(twhy, "chmod 600") != NULL);
    close(kfd);
    unlink(kp);
    TEST_DONE();
}

/* ---- with etcd ---- */

static etcd_t etcd;

static void on_exit_stop(void)
{
    etcd_destroy(&etcd);
}

static int need_etcd(void)
{
    if (etcd_find(&etcd) != 0) {
        fprintf(stderr, "SKIP: no etcd binary (Debian: apt-get install etcd-server, or set "
                        "TPX_ETCD)\n");
        exit(ETCD_SKIP);
    }
    atexit(on_exit_stop);
    if (etcd_start(&etcd) != 0) {
        fprintf(stderr, "cannot start etcd\n");
        exit(1);
    }
    setenv("TPX_METADATA", etcd.url, 1);
    return 0;
}

/* A server engine in its own process (`serve`); its stdout says "ready". */
static pid_t spawn_server(const char *name, int gen, int ttl)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char g[16], t[16];
        snprintf(g, sizeof(g), "%d", gen);
        snprintf(t, sizeof(t), "%d", ttl);
        execl(self, self, "serve", name, g, t, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[8] = "";
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    int ok = pid > 0 && poll(&pf, 1, 30000) == 1 && read(fds[0], buf, 5) == 5 &&
             memcmp(buf, "ready", 5) == 0;
    close(fds[0]);
    if (!ok) {
        fprintf(stderr, "server %s did not start\n", name);
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        return -1;
    }
    return pid;
}

static void reap(pid_t pid)
{
    if (pid <= 0) /* never kill(-1) or the process group */
        return;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static volatile sig_atomic_t serve_term;

static void on_term(int sig)
{
    (void)sig;
    serve_term = 1;
}

/* Serve until killed; SIGTERM ends it with 0 if its region still holds
 * the pattern of `gen` (nobody's WRITE landed), else 3. */
static int case_serve(const char *name, int gen, int ttl)
{
    node_t n;
    tpx_registry_t *r;
    signal(SIGTERM, on_term);
    if (node_make(&n, name, gen) != 0 || tpx_registry_open(NULL, NULL, &r) != TPX_OK ||
        tpx_registry_publish(r, n.e, &n.desc, 1, ttl) != TPX_OK)
        return 1;
    if (write(1, "ready", 5) != 5)
        return 1;
    close(1);
    while (!serve_term)
        pause();
    for (size_t i = 0; i < REGION; i++)
        if (n.mem[i] != pattern(i, gen)) {
            fprintf(stderr, "serve %s: byte %zu was written\n", name, i);
            _exit(3);
        }
    _exit(0);
}

/* SIGTERM a `serve` process: its exit status (0: its region untouched). */
static int serve_end(pid_t pid)
{
    int status = 0;
    if (pid <= 0)
        return -1;
    kill(pid, SIGTERM);
    if (waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int case_publish(void)
{
    need_etcd();
    node_t a, b, c;
    EXPECT(node_make(&a, "alpha", 1) == 0);
    EXPECT(node_make(&b, "beta", 2) == 0);
    EXPECT(node_make(&c, "client", 3) == 0);
    tpx_registry_t *r, *r2;
    EXPECT(tpx_registry_open(NULL, "/tpx-test/", &r) == TPX_OK);
    EXPECT(tpx_registry_open(etcd.url, "/tpx-test", &r2) == TPX_OK);
    EXPECT(tpx_registry_publish(r, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(tpx_registry_publish(r, b.e, &b.desc, 1, 0) == TPX_OK);
    char names[8][TPX_NAME_MAX];
    size_t n = 0;
    EXPECT(tpx_registry_list(r2, names, 8, &n) == TPX_OK);
    EXPECT(n == 2 && strcmp(names[0], "alpha") == 0 && strcmp(names[1], "beta") == 0);
    EXPECT(tpx_registry_list(r2, names, 1, &n) == TPX_OK && n == 2);
    static tpx_registry_entry_t ent;
    EXPECT(tpx_registry_lookup(r2, "alpha", &ent) == TPX_OK);
    EXPECT(ent.ndescs == 1 && memcmp(&ent.descs[0], &a.desc, sizeof(a.desc)) == 0);
    EXPECT(strcmp(ent.name, "alpha") == 0 && ent.md_len > 0);
    EXPECT(tpx_registry_lookup(r2, "gamma", &ent) == TPX_ERR_NOT_FOUND);
    EXPECT(tpx_registry_lookup(r2, "a/b", &ent) == TPX_ERR_INVALID_ARG);
    /* a remote by name reads what alpha and beta export */
    tpx_remote_t *ra, *rb;
    EXPECT(tpx_registry_load_remote(r2, c.e, "alpha", &ra, &ent) == TPX_OK);
    EXPECT(read_check(c.e, ra, &ent.descs[0], 1) == TPX_OK);
    EXPECT(tpx_registry_load_remote(r2, c.e, "beta", &rb, &ent) == TPX_OK);
    EXPECT(read_check(c.e, rb, &ent.descs[0], 2) == TPX_OK);
    EXPECT(strcmp(tpx_remote_name(rb), "beta") == 0);
    /* publishing again replaces (two descriptors now); unpublish removes */
    tpx_rdesc_t two[2] = {a.desc, a.desc};
    memset(&two[1], 0x5a, sizeof(two[1])); /* not a descriptor: refused, nothing published */
    EXPECT(tpx_registry_publish(r, a.e, two, 2, 5) == TPX_ERR_INVALID_ARG);
    EXPECT(tpx_registry_lookup(r2, "alpha", &ent) == TPX_OK && ent.ndescs == 1);
    two[1] = a.desc;
    EXPECT(tpx_registry_publish(r, a.e, two, 2, 5) == TPX_OK);
    EXPECT(tpx_registry_lookup(r2, "alpha", &ent) == TPX_OK && ent.ndescs == 2);
    EXPECT(tpx_registry_unpublish(r, b.e) == TPX_OK);
    EXPECT(tpx_registry_lookup(r2, "beta", &ent) == TPX_ERR_NOT_FOUND);
    EXPECT(tpx_registry_unpublish(r, b.e) == TPX_ERR_NOT_FOUND);
    /* other prefixes are other registries */
    tpx_registry_t *r3;
    EXPECT(tpx_registry_open(etcd.url, "/elsewhere", &r3) == TPX_OK);
    EXPECT(tpx_registry_list(r3, names, 8, &n) == TPX_OK && n == 0);
    tpx_registry_close(r3);
    /* closing the publisher's registry revokes: alpha is gone at once */
    tpx_registry_close(r);
    EXPECT(tpx_registry_list(r2, names, 8, &n) == TPX_OK && n == 0);
    tpx_remote_release(ra);
    tpx_remote_release(rb);
    tpx_registry_close(r2);
    node_free(&a);
    node_free(&b);
    node_free(&c);
    /* a registry nobody answers: a clear error, quickly */
    tpx_registry_t *dead;
    char url[64];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%d", test_free_port());
    EXPECT(tpx_registry_open(url, NULL, &dead) == TPX_OK);
    uint64_t t0 = test_now_ns();
    EXPECT(tpx_registry_lookup(dead, "alpha", &ent) == TPX_ERR_UNREACHABLE);
    EXPECT(test_secs_since(t0) < 5);
    tpx_registry_close(dead);
    EXPECT(tpx_registry_open("etcd://nohost", NULL, &dead) == TPX_ERR_INVALID_ARG);
    /* endpoints tried in turn: a dead one first, then etcd */
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%d,127.0.0.1:%d", test_free_port(),
             etcd.client_port);
    EXPECT(tpx_registry_open(url, "/tpx-test", &dead) == TPX_OK);
    EXPECT(tpx_registry_list(dead, names, 8, &n) == TPX_OK && n == 0);
    tpx_registry_close(dead);
    TEST_DONE();
}

static int case_sigkill(void)
{
    need_etcd();
    const int ttl = 2;
    pid_t pid = spawn_server("victim", 1, ttl);
    EXPECT(pid > 0);
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);
    EXPECT(tpx_registry_lookup(r, "victim", &ent) == TPX_OK);
    /* alive for longer than its TTL: the lease is renewed */
    sleep((unsigned)ttl + 1);
    EXPECT(tpx_registry_lookup(r, "victim", &ent) == TPX_OK);
    reap(pid);
    uint64_t t0 = test_now_ns();
    double gone = -1;
    while (test_secs_since(t0) < ttl + 10) {
        tpx_status_t st = tpx_registry_lookup(r, "victim", &ent);
        if (st == TPX_ERR_NOT_FOUND) {
            gone = test_secs_since(t0);
            break;
        }
        EXPECT(st == TPX_OK);
        usleep(100000);
    }
    printf("SIGKILLed engine gone from the registry after %.2f s (TTL %d s)\n", gone, ttl);
    EXPECT(gone >= 0 && gone <= ttl + 2);
    size_t n = 1;
    char names[4][TPX_NAME_MAX];
    EXPECT(tpx_registry_list(r, names, 4, &n) == TPX_OK && n == 0);
    tpx_registry_close(r);
    TEST_DONE();
}

static int case_outage(void)
{
    need_etcd();
    node_t s, c;
    EXPECT(node_make(&s, "steady", 4) == 0);
    EXPECT(node_make(&c, "reader", 5) == 0);
    tpx_registry_t *rs, *rc;
    static tpx_registry_entry_t ent;
    const int ttl = 3;
    EXPECT(tpx_registry_open(NULL, NULL, &rs) == TPX_OK);
    EXPECT(tpx_registry_open(NULL, NULL, &rc) == TPX_OK);
    EXPECT(tpx_registry_publish(rs, s.e, &s.desc, 1, ttl) == TPX_OK);
    tpx_remote_t *rm;
    EXPECT(tpx_registry_load_remote(rc, c.e, "steady", &rm, &ent) == TPX_OK);
    EXPECT(read_check(c.e, rm, &ent.descs[0], 4) == TPX_OK);

    etcd_stop(&etcd);
    /* established: transfers go on without etcd */
    for (int i = 0; i < 5; i++)
        EXPECT(read_check(c.e, rm, &ent.descs[0], 4) == TPX_OK);
    /* new lookups: a clear error, not a hang */
    uint64_t t0 = test_now_ns();
    EXPECT(tpx_registry_lookup(rc, "steady", &ent) == TPX_ERR_UNREACHABLE);
    tpx_remote_t *rm2;
    EXPECT(tpx_registry_load_remote(rc, c.e, "steady", &rm2, NULL) == TPX_ERR_UNREACHABLE);
    EXPECT(test_secs_since(t0) < 10);
    usleep(1500000); /* the keep-alive thread meets the outage */
    EXPECT(read_check(c.e, rm, &ent.descs[0], 4) == TPX_OK);

    EXPECT(etcd_start(&etcd) == 0);
    tpx_status_t st = TPX_ERR_UNREACHABLE;
    for (int i = 0; i < 100 && st != TPX_OK; i++) {
        st = tpx_registry_lookup(rc, "steady", &ent);
        if (st != TPX_OK)
            usleep(100000);
    }
    EXPECT(st == TPX_OK);
    /* and it stays published: the lease is renewed (or granted anew) */
    sleep((unsigned)ttl * 2);
    EXPECT(tpx_registry_lookup(rc, "steady", &ent) == TPX_OK);
    EXPECT(tpx_registry_load_remote(rc, c.e, "steady", &rm2, &ent) == TPX_OK);
    EXPECT(rm2 == rm); /* the same engine: the same remote */
    EXPECT(read_check(c.e, rm2, &ent.descs[0], 4) == TPX_OK);
    tpx_remote_release(rm2);
    tpx_remote_release(rm);
    tpx_registry_close(rs);
    tpx_registry_close(rc);
    node_free(&s);
    node_free(&c);
    TEST_DONE();
}

static int case_restart(void)
{
    need_etcd();
    const int ttl = 2;
    pid_t pid = spawn_server("phoenix", 1, ttl);
    EXPECT(pid > 0);
    node_t c;
    EXPECT(node_make(&c, "watcher", 9) == 0);
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);
    tpx_remote_t *rm;
    EXPECT(tpx_registry_load_remote(r, c.e, "phoenix", &rm, &ent) == TPX_OK);
    tpx_rdesc_t d1 = ent.descs[0];
    EXPECT(read_check(c.e, rm, &d1, 1) == TPX_OK);

    /* the engine restarts under its name: a new id, port and export */
    reap(pid);
    pid = spawn_server("phoenix", 2, ttl);
    EXPECT(pid > 0);
    /* The remote with its old descriptor: the connection to the dead
     * engine fails, the next one finds the new engine by name (and the
     * old export is refused there). */
    tpx_status_t st = read_check(c.e, rm, &d1, 1);
    if (st != TPX_ERR_ACCESS)
        st = read_check(c.e, rm, &d1, 1);
    printf("READ of the old export after the restart: %s\n", tpx_status_string(st));
    EXPECT(st == TPX_ERR_ACCESS || st == TPX_ERR_INVALID_ARG);
    /* Loading the name again: the same remote, the new engine's export. */
    tpx_remote_t *again;
    EXPECT(tpx_registry_load_remote(r, c.e, "phoenix", &again, &ent) == TPX_OK);
    EXPECT(again == rm);
    tpx_rdesc_t d2 = ent.descs[0];
    st = read_check(c.e, rm, &d2, 2);
    EXPECT(st == TPX_OK);
    tpx_remote_release(again);

    /* gone for good: once its lease expired, the remote says so */
    reap(pid);
    uint64_t t0 = test_now_ns();
    while (test_secs_since(t0) < ttl + 10 &&
           tpx_registry_lookup(r, "phoenix", &ent) != TPX_ERR_NOT_FOUND)
        usleep(100000);
    st = read_check(c.e, rm, &d2, 2);
    if (st != TPX_ERR_NOT_FOUND) /* the dead connection first */
        st = read_check(c.e, rm, &d2, 2);
    printf("READ from an engine whose lease expired: %s\n", tpx_status_string(st));
    EXPECT(st == TPX_ERR_NOT_FOUND);
    tpx_remote_release(rm);
    tpx_registry_close(r);
    node_free(&c);
    TEST_DONE();
}

/* WRITE the pattern of `gen` over the whole exported region of rm. */
static tpx_status_t write_gen(tpx_engine_t *e, tpx_remote_t *rm, const tpx_rdesc_t *d, int gen)
{
    unsigned char *buf = malloc(REGION);
    tpx_region_t *reg = NULL;
    if (buf == NULL)
        return TPX_ERR_NO_MEMORY;
    for (size_t i = 0; i < REGION; i++)
        buf[i] = pattern(i, gen);
    tpx_status_t st = tpx_mem_register(e, buf, REGION, TPX_MEM_HOST, &reg);
    if (st == TPX_OK) {
        tpx_iov_t v = {.local = reg, .remote = d, .len = REGION};
        tpx_xfer_t *x = NULL;
        st = tpx_rma(rm, TPX_OP_WRITE, &v, 1, NULL, 0, &x);
        if (st == TPX_OK) {
            st = tpx_xfer_wait(x, 20000, NULL);
            tpx_xfer_release(x);
        }
        tpx_mem_deregister(reg);
    }
    free(buf);
    return st;
}

/* ---- trust: signed values ---- */

/* A signing key file of seed byte `b` (mode 0600); its public key in hex. */
static int key_file(const char *path, unsigned char b, char hex[65])
{
    unsigned char seed[32], pk[32], sk[64];
    memset(seed, b, sizeof(seed));
    if (tpx__ident_seed_keypair(seed, pk, sk) != TPX_OK)
        return -1;
    tpx__reg_key_hex(pk, hex);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    for (int i = 0; i < 32; i++)
        fprintf(f, "%02x", b);
    fprintf(f, "\n");
    fclose(f);
    return chmod(path, 0600);
}

/* A `serve` process signing with key file kf (NULL: none; dial: no keys). */
static pid_t spawn_signed(const char *name, int gen, const char *kf, int dial)
{
    if (kf != NULL)
        setenv("TPX_METADATA_SIGN_KEY", kf, 1);
    if (dial)
        setenv("TPX_IDENTITY", "dial", 1);
    pid_t pid = spawn_server(name, gen, 2);
    unsetenv("TPX_METADATA_SIGN_KEY");
    unsetenv("TPX_IDENTITY");
    return pid;
}

/* Wait until `name` is no longer published (its lease expired). */
static void wait_gone(tpx_registry_t *r, const char *name)
{
    char names[8][TPX_NAME_MAX];
    uint64_t t0 = test_now_ns();
    for (size_t n = 1, there = 1; there && test_secs_since(t0) < 15; usleep(100000)) {
        there = 0;
        if (tpx_registry_list(r, names, 8, &n) != TPX_OK)
            continue;
        for (size_t i = 0; i < n && i < 8; i++)
            there |= strcmp(names[i], name) == 0;
    }
}

/* An attacker who can write to etcd takes a name over once its engine is
 * gone: its value is refused by a reader that trusts the name's key, the
 * reader's WRITE to the name fails with TPX_ERR_ACCESS and never reaches
 * the attacker's memory. A value signed by a key trusted for all names
 * (a cluster key) is taken; a value without signatures, or one whose
 * engine has no identity key, is refused. */
static int case_trust(void)
{
    char dir[] = "/tmp/tpx-trust-XXXXXX", owner_kf[64], cluster_kf[64], evil_kf[64];
    char owner_pk[65], cluster_pk[65], evil_pk[65], trust[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(owner_kf, sizeof(owner_kf), "%s/owner.key", dir);
    snprintf(cluster_kf, sizeof(cluster_kf), "%s/cluster.key", dir);
    snprintf(evil_kf, sizeof(evil_kf), "%s/evil.key", dir);
    /* The keys are made in a child: libsodium's loading reads this
     * process's settings, which must hold TPX_METADATA_TRUST first. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t kid = fork();
    if (kid == 0) {
        char all[3 * 65];
        int ok = key_file(owner_kf, 1, all) == 0 && key_file(cluster_kf, 2, all + 65) == 0 &&
                 key_file(evil_kf, 3, all + 130) == 0;
        _exit(ok && write(fds[1], all, sizeof(all)) == (ssize_t)sizeof(all) ? 0 : 1);
    }
    close(fds[1]);
    char all[3 * 65];
    int got = kid > 0 && read(fds[0], all, sizeof(all)) == (ssize_t)sizeof(all);
    close(fds[0]);
    if (kid > 0)
        waitpid(kid, NULL, 0);
    if (!got) {
        fprintf(stderr, "SKIP: no libsodium\n");
        return ETCD_SKIP;
    }
    memcpy(owner_pk, all, 65);
    memcpy(cluster_pk, all + 65, 65);
    memcpy(evil_pk, all + 130, 65);
    snprintf(trust, sizeof(trust), "owner=%s, *=%s", owner_pk, cluster_pk);
    setenv("TPX_METADATA_TRUST", trust, 1);
    need_etcd();
    node_t c;
    EXPECT(node_make(&c, "victim", 9) == 0);
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);

    /* the owner, signing with its pinned key: taken */
    pid_t owner = spawn_signed("owner", 1, owner_kf, 0);
    EXPECT(owner > 0);
    tpx_remote_t *rm = NULL;
    EXPECT(tpx_registry_load_remote(r, c.e, "owner", &rm, &ent) == TPX_OK);
    tpx_rdesc_t d1 = ent.descs[0];
    EXPECT(rm != NULL && read_check(c.e, rm, &d1, 1) == TPX_OK);
    /* another engine signed by the cluster key: taken */
    pid_t worker = spawn_signed("worker", 4, cluster_kf, 0);
    tpx_remote_t *rw = NULL;
    EXPECT(tpx_registry_load_remote(r, c.e, "worker", &rw, &ent) == TPX_OK);
    EXPECT(rw != NULL && read_check(c.e, rw, &ent.descs[0], 4) == TPX_OK);

    /* the owner dies; the attacker publishes under its name, signed with
     * its own key (and its engine's identity key) */
    reap(owner);
    wait_gone(r, "owner");
    pid_t evil = spawn_signed("owner", 2, evil_kf, 0);
    EXPECT(evil > 0);
    EXPECT(tpx_registry_lookup(r, "owner", &ent) == TPX_ERR_ACCESS);
    tpx_remote_t *rx = NULL;
    EXPECT(tpx_registry_load_remote(r, c.e, "owner", &rx, &ent) == TPX_ERR_ACCESS);
    /* the remote loaded before looks its name up again to reconnect: its
     * WRITE fails (the dead connection may fail it first) */
    tpx_status_t st = write_gen(c.e, rm, &d1, 9);
    if (st != TPX_ERR_ACCESS)
        st = write_gen(c.e, rm, &d1, 9);
    printf("trust: WRITE to a name taken over: %s\n", tpx_status_name(st));
    EXPECT_EQ(st, TPX_ERR_ACCESS);
    EXPECT_EQ(serve_end(evil), 0); /* nothing landed in the attacker's memory */
    wait_gone(r, "owner");

    /* no signature at all (an engine without keys): refused */
    evil = spawn_signed("owner", 2, NULL, 1);
    EXPECT(evil > 0);
    EXPECT(tpx_registry_lookup(r, "owner", &ent) == TPX_ERR_ACCESS);
    reap(evil);
    printf("trust: keys %.16s... (owner) %.16s... (cluster) refused %.16s...\n", owner_pk,
           cluster_pk, evil_pk);

    reap(worker);
    tpx_remote_release(rm);
    tpx_remote_release(rw);
    tpx_registry_close(r);
    node_free(&c);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    EXPECT(system(cmd) == 0);
    TEST_DONE();
}

/* Wait for the next event (up to ms), or n = 0. */
static tpx_status_t next_event(tpx_registry_t *r, tpx_registry_event_t *ev, size_t *n, int ms)
{
    return tpx_registry_watch(r, ev, 1, n, ms);
}

static int case_watch(void)
{
    need_etcd();
    node_t a;
    EXPECT(node_make(&a, "alpha", 1) == 0);
    tpx_registry_t *pub, *w;
    tpx_registry_event_t ev;
    size_t n = 0;
    char names[4][TPX_NAME_MAX];
    EXPECT(tpx_registry_open(NULL, "/watch", &pub) == TPX_OK);
    EXPECT(tpx_registry_open(NULL, "/watch", &w) == TPX_OK);
    EXPECT(tpx_registry_list(w, names, 4, &n) == TPX_OK && n == 0);
    /* published after the list, before the first watch: not missed */
    EXPECT(tpx_registry_publish(pub, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(next_event(w, &ev, &n, 5000) == TPX_OK && n == 1);
    EXPECT(strcmp(ev.name, "alpha") == 0 && !ev.gone);
    EXPECT(next_event(w, &ev, &n, 200) == TPX_OK && n == 0); /* nothing more */
    EXPECT(tpx_registry_unpublish(pub, a.e) == TPX_OK);
    EXPECT(next_event(w, &ev, &n, 5000) == TPX_OK && n == 1);
    EXPECT(strcmp(ev.name, "alpha") == 0 && ev.gone);
    /* other prefixes are not seen */
    tpx_registry_t *other;
    EXPECT(tpx_registry_open(NULL, "/watchx", &other) == TPX_OK);
    EXPECT(tpx_registry_publish(other, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(next_event(w, &ev, &n, 300) == TPX_OK && n == 0);
    tpx_registry_close(other);
    /* a SIGKILLed engine: its departure is seen within TTL + 2 s */
    const int ttl = 2;
    setenv("TPX_METADATA_PREFIX", "/watch", 1);
    pid_t pid = spawn_server("victim", 1, ttl);
    EXPECT(pid > 0);
    EXPECT(next_event(w, &ev, &n, 5000) == TPX_OK && n == 1 && !ev.gone);
    reap(pid);
    uint64_t t0 = test_now_ns();
    EXPECT(next_event(w, &ev, &n, (ttl + 5) * 1000) == TPX_OK && n == 1);
    double dt = test_secs_since(t0);
    printf("watch: SIGKILLed engine gone after %.2f s (TTL %d s)\n", dt, ttl);
    EXPECT(strcmp(ev.name, "victim") == 0 && ev.gone && dt <= ttl + 2);
    /* etcd restarts: the watch goes on where it stopped */
    etcd_stop(&etcd);
    EXPECT(next_event(w, &ev, &n, 500) == TPX_ERR_UNREACHABLE);
    EXPECT(etcd_start(&etcd) == 0);
    EXPECT(tpx_registry_publish(pub, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(next_event(w, &ev, &n, 5000) == TPX_OK && n == 1);
    EXPECT(strcmp(ev.name, "alpha") == 0 && !ev.gone);
    tpx_registry_close(pub);
    EXPECT(next_event(w, &ev, &n, 5000) == TPX_OK && n == 1 && ev.gone);
    tpx_registry_close(w);
    node_free(&a);
    TEST_DONE();
}

/* A raw etcd call (the test plays another program writing to etcd). */
static tpx__tls_ctx_t *raw_tls; /* the test's TLS to etcd, if it speaks TLS */

static int raw_post(const char *path, const char *body)
{
    tpx__reg_ep_t eps[8];
    int neps;
    char why[256];
    if (tpx__reg_parse_url(etcd.url, eps, 8, &neps, why, sizeof(why)) != 0)
        return -1;
    tpx__http_conn_t *c = malloc(sizeof(*c));
    if (c == NULL)
        return -1;
    tpx__http_init(c, eps, neps);
    c->tls_ctx = raw_tls;
    tpx__http_resp_t resp;
    tpx_status_t st = tpx__http_post(c, path, body, tpx__now_ns() + 10000000000ull, &resp);
    if (st != TPX_OK)
        fprintf(stderr, "%s: %s\n", path, c->last_err);
    tpx__http_close(c);
    free(c);
    if (st != TPX_OK)
        return -1;
    int ok = resp.status == 200;
    if (!ok)
        fprintf(stderr, "%s: HTTP %d: %s\n", path, resp.status, resp.body);
    free(resp.body);
    return ok ? 0 : -1;
}

/* Put key (any bytes) = "x" with no lease. */
static int raw_put(const char *key)
{
    static char k64[2048], body[2200];
    tpx__b64_encode((const unsigned char *)key, strlen(key), k64);
    snprintf(body, sizeof(body), "{\"key\":\"%s\",\"value\":\"eA==\"}", k64);
    return raw_post("/v3/kv/put", body);
}

/* Keys etcd hands back that the parsers must take: our own under the
 * longest prefix (255 bytes: its keys are longer than the 255 the key
 * buffer held, so lookup failed after a successful publish), another
 * program's over-long key under the prefix (it failed every list and
 * stuck every watch), and one deleterange ending 1500 keys in a single
 * watch message (more than the 256 events a message could hold: the
 * watch reopened at that revision and failed on it again, for ever). */
static int case_keys(void)
{
    need_etcd();
    node_t a;
    EXPECT(node_make(&a, "alpha", 1) == 0);
    char longp[256];
    memset(longp, 'p', sizeof(longp) - 1);
    longp[0] = '/';
    longp[sizeof(longp) - 1] = '\0';
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    char names[8][TPX_NAME_MAX];
    size_t n = 0;
    EXPECT(tpx_registry_open(NULL, longp, &r) == TPX_OK);
    EXPECT(tpx_registry_publish(r, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(tpx_registry_lookup(r, "alpha", &ent) == TPX_OK && ent.ndescs == 1);
    EXPECT(tpx_registry_list(r, names, 8, &n) == TPX_OK && n == 1 &&
           strcmp(names[0], "alpha") == 0);
    /* a host name (resolved on a helper thread, under the call's deadline) */
    char url[96];
    tpx_registry_t *rh;
    snprintf(url, sizeof(url), "etcd://localhost:%d", etcd.client_port);
    EXPECT(tpx_registry_open(url, longp, &rh) == TPX_OK);
    EXPECT(tpx_registry_list(rh, names, 8, &n) == TPX_OK && n == 1);
    tpx_registry_close(rh);
    tpx_registry_close(r);

    /* another program's long key under /k/, then alpha: list and watch go on */
    tpx_registry_t *pub, *w;
    tpx_registry_event_t ev[64];
    EXPECT(tpx_registry_open(NULL, "/k", &pub) == TPX_OK);
    EXPECT(tpx_registry_open(NULL, "/k", &w) == TPX_OK);
    EXPECT(tpx_registry_list(w, names, 8, &n) == TPX_OK && n == 0); /* the watch starts here */
    static char lk[700];
    memset(lk, 'z', sizeof(lk) - 1);
    memcpy(lk, "/k/", 3);
    EXPECT(raw_put(lk) == 0);
    EXPECT(tpx_registry_publish(pub, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(tpx_registry_watch(w, ev, 64, &n, 5000) == TPX_OK && n == 1 &&
           strcmp(ev[0].name, "alpha") == 0 && !ev[0].gone);
    EXPECT(tpx_registry_list(pub, names, 8, &n) == TPX_OK && n == 1 &&
           strcmp(names[0], "alpha") == 0);

    /* timeout 0 polls: what has arrived is returned (it read nothing) */
    EXPECT(raw_put("/k/zz") == 0);
    usleep(500 * 1000);
    EXPECT(tpx_registry_watch(w, ev, 64, &n, 0) == TPX_OK && n == 1 &&
           strcmp(ev[0].name, "zz") == 0 && !ev[0].gone);

    /* 1500 keys under /k/ put, then deleted by one deleterange */
    enum { MANY = 1500 };
    char key[64];
    for (int i = 0; i < MANY; i++) {
        snprintf(key, sizeof(key), "/k/m%04d", i);
        if (raw_put(key) != 0) {
            EXPECT(0);
            break;
        }
    }
    size_t puts = 0, gone = 0;
    uint64_t until = tpx__now_ns() + 20000000000ull;
    while (puts < MANY && tpx__now_ns() < until &&
           tpx_registry_watch(w, ev, 64, &n, 1000) == TPX_OK)
        for (size_t i = 0; i < n; i++)
            puts += !ev[i].gone && ev[i].name[0] == 'm';
    EXPECT_EQ(puts, (size_t)MANY);
    static char dr[256];
    char k64[64], e64[64];
    tpx__b64_encode((const unsigned char *)"/k/m", 4, k64);
    tpx__b64_encode((const unsigned char *)"/k/n", 4, e64);
    snprintf(dr, sizeof(dr), "{\"key\":\"%s\",\"range_end\":\"%s\"}", k64, e64);
    EXPECT(raw_post("/v3/kv/deleterange", dr) == 0);
    until = tpx__now_ns() + 20000000000ull;
    while (gone < MANY && tpx__now_ns() < until &&
           tpx_registry_watch(w, ev, 64, &n, 1000) == TPX_OK)
        for (size_t i = 0; i < n; i++)
            gone += ev[i].gone && ev[i].name[0] == 'm';
    printf("keys: %zu puts and %zu deletes of one deleterange seen\n", puts, gone);
    EXPECT_EQ(gone, (size_t)MANY);
    /* published again (the same engine, other descriptors): the newer value
     * stays, also after the keep-alive thread put it once more */
    EXPECT(tpx_registry_publish(pub, a.e, NULL, 0, 2) == TPX_OK);
    EXPECT(tpx_registry_watch(w, ev, 64, &n, 5000) == TPX_OK && n >= 1 &&
           strcmp(ev[0].name, "alpha") == 0 && !ev[0].gone);
    EXPECT(tpx_registry_lookup(pub, "alpha", &ent) == TPX_OK && ent.ndescs == 0);
    usleep(1500 * 1000); /* a renewal (TTL 2 s: every 0.67 s) */
    EXPECT(tpx_registry_lookup(pub, "alpha", &ent) == TPX_OK && ent.ndescs == 0);
    while (tpx_registry_watch(w, ev, 64, &n, 0) == TPX_OK && n > 0)
        ; /* the re-put's event */
    /* and the watch still works afterwards */
    EXPECT(tpx_registry_unpublish(pub, a.e) == TPX_OK);
    int seen_gone = 0;
    until = tpx__now_ns() + 5000000000ull;
    while (!seen_gone && tpx__now_ns() < until &&
           tpx_registry_watch(w, ev, 64, &n, 1000) == TPX_OK)
        for (size_t i = 0; i < n; i++) {
            if (!ev[i].gone)
                printf("keys: late event: %s put\n", ev[i].name);
            seen_gone |= ev[i].gone && strcmp(ev[i].name, "alpha") == 0;
        }
    EXPECT(seen_gone);
    tpx_registry_close(pub);
    tpx_registry_close(w);
    node_free(&a);
    TEST_DONE();
}

/* ---- stall: the caller's deadline bounds the registry lookup ---- */

typedef struct {
    tpx_prep_t *prep;
    tpx_status_t st;
    double secs;
} post_job_t;

/* Post with a 200 ms deadline; wait for the transfer by its deadline. */
static void *post_job(void *arg)
{
    post_job_t *j = arg;
    uint64_t t0 = test_now_ns();
    tpx_xfer_t *x = NULL;
    j->st = tpx_xfer_post(j->prep, NULL, 0, 200, &x);
    j->secs = test_secs_since(t0);
    if (j->st == TPX_OK) {
        j->st = tpx_xfer_wait(x, 5000, NULL);
        tpx_xfer_release(x);
    }
    return NULL;
}

static int case_stall(void)
{
    /* a lookup may take 20 s: only the caller's deadline can end it sooner */
    setenv("TPX_METADATA_TIMEOUT_MS", "20000", 1);
    need_etcd();
    pid_t pid = spawn_server("sleeper", 1, 60);
    EXPECT(pid > 0);
    node_t c;
    EXPECT(node_make(&c, "poster", 9) == 0);
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);
    tpx_remote_t *rm;
    EXPECT(tpx_registry_load_remote(r, c.e, "sleeper", &rm, &ent) == TPX_OK);
    EXPECT(read_check(c.e, rm, &ent.descs[0], 1) == TPX_OK);
    unsigned char *buf = malloc(4096);
    tpx_region_t *reg = NULL;
    EXPECT(buf != NULL && tpx_mem_register(c.e, buf, 4096, TPX_MEM_HOST, &reg) == TPX_OK);
    tpx_iov_t v = {.local = reg, .remote = &ent.descs[0], .len = 4096};
    tpx_prep_t *prep = NULL;
    EXPECT(tpx_xfer_prepare(rm, TPX_OP_READ, &v, 1, &prep) == TPX_OK);

    /* the engine dies; etcd stops answering */
    reap(pid);
    EXPECT(etcd.pid > 0 && kill(etcd.pid, SIGSTOP) == 0);
    usleep(300000); /* the dead connection is seen closed */
    /* Two posters at once (the second waits for the first's connect); a
     * first failure may be the dead connection's: the next post resolves. */
    int timed_out = 0;
    for (int round = 0; round < 3 && !timed_out; round++) {
        post_job_t j[2] = {{.prep = prep}, {.prep = prep}};
        pthread_t th;
        EXPECT(pthread_create(&th, NULL, post_job, &j[1]) == 0);
        post_job(&j[0]);
        pthread_join(th, NULL);
        for (int i = 0; i < 2; i++) {
            printf("round %d poster %d: %s after %.3f s\n", round, i, tpx_status_string(j[i].st),
                   j[i].secs);
            EXPECT(j[i].st != TPX_OK);
            EXPECT(j[i].secs < 3.0); /* 200 ms asked; 20 s if the lookup ignored it */
            timed_out |= j[i].st == TPX_ERR_TIMED_OUT;
        }
    }
    EXPECT(timed_out);
    kill(etcd.pid, SIGCONT);
    tpx_prep_release(prep);
    tpx_mem_deregister(reg);
    free(buf);
    tpx_remote_release(rm);
    tpx_registry_close(r);
    node_free(&c);
    TEST_DONE();
}

/* ---- trickle: every byte of a watch under the caller's deadline ---- */

/* A fake etcd on 127.0.0.1 that answers any request with a chunked 200
 * head at once, then streams one message that never ends, one byte every
 * 20 ms, each chunk "1\r\nX\r\n" sent so that the next chunk's first
 * byte leaves with the previous one's last (a reader that waits only for
 * a chunk's first byte always finds one). It serves one connection at a
 * time until `stop`. */
typedef struct {
    int lfd, port;
    volatile int stop;
    int conns;
} trickle_srv_t;

static void *trickle_main(void *arg)
{
    trickle_srv_t *t = arg;
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
    while (!t->stop) {
        struct pollfd pf = {.fd = t->lfd, .events = POLLIN};
        if (poll(&pf, 1, 100) != 1)
            continue;
        int fd = accept(t->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        t->conns++;
        char req[4096];
        (void)!recv(fd, req, sizeof(req), 0); /* the request: whatever it is */
        int ok = send(fd, head, sizeof(head) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(head) - 1);
        /* "{" then spaces, one byte a chunk: a message that never completes */
        for (size_t i = 0; ok && !t->stop; i++) {
            char c = "1\r\n \r\n"[i % 6];
            if (i == 3)
                c = '{';
            ok = send(fd, &c, 1, MSG_NOSIGNAL) == 1;
            if (i % 6 != 5) /* no pause between a chunk's end and the next */
                usleep(20000);
        }
        close(fd);
    }
    return NULL;
}

static int case_trickle(void)
{
    trickle_srv_t t = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK(t.lfd >= 0 && bind(t.lfd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
          listen(t.lfd, 4) == 0 && getsockname(t.lfd, (struct sockaddr *)&a, &al) == 0);
    t.port = ntohs(a.sin_port);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, trickle_main, &t) == 0);
    char url[64];
    snprintf(url, sizeof(url), "etcd://127.0.0.1:%d", t.port);
    tpx_registry_t *r;
    tpx_registry_event_t ev[4];
    size_t n = 99;
    EXPECT(tpx_registry_open(url, "/t", &r) == TPX_OK);
    /* Twice: the first opens the stream, the second goes on with it. The
     * stream would go on for 30 s; each call ends at its deadline, a
     * second after it began, with nothing (*n = 0, the stream intact). */
    for (int round = 0; round < 2; round++) {
        uint64_t t0 = test_now_ns();
        tpx_status_t st = tpx_registry_watch(r, ev, 4, &n, 1000);
        double secs = test_secs_since(t0);
        printf("trickle: watch(1000 ms) round %d: %s, %zu events after %.3f s\n", round,
               tpx_status_name(st), n, secs);
        EXPECT(st == TPX_OK && n == 0);
        EXPECT(secs >= 0.9 && secs < 2.5);
    }
    EXPECT_EQ(t.conns, 1); /* the stream was kept, not reopened */
    tpx_registry_close(r);
    t.stop = 1;
    pthread_join(th, NULL);
    close(t.lfd);
    TEST_DONE();
}

/* ---- tls and auth: etcd over TLS, with its authentication ---- */

static char certs[64]; /* certs.sh's directory */

static void on_exit_certs(void)
{
    if (strncmp(certs, "/tmp/tpx-certs-", 15) == 0) {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", certs);
    }
}

/* A test CA and certificates (certs.sh, $TPX_TEST_CERTS) in certs[]. */
static int make_certs(void)
{
    const char *script = getenv("TPX_TEST_CERTS");
    snprintf(certs, sizeof(certs), "/tmp/tpx-certs-XXXXXX");
    CHECK(script != NULL && mkdtemp(certs) != NULL);
    atexit(on_exit_certs);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "sh '%s' '%s'", script, certs);
    CHECK(system(cmd) == 0, "certs.sh failed (is the openssl command installed?)");
    return 0;
}

static const char *cert(const char *file)
{
    static char paths[8][128];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, 128, "%s/%s", certs, file);
    return p;
}

/* etcd over TLS answers: any HTTP answer to a range. */
static int tls_ready(const etcd_t *s)
{
    (void)s;
    tpx__reg_ep_t eps[8];
    int neps;
    char why[256];
    if (tpx__reg_parse_url(etcd.url, eps, 8, &neps, why, sizeof(why)) != 0)
        return 0;
    static tpx__http_conn_t c;
    tpx__http_init(&c, eps, neps);
    c.tls_ctx = raw_tls;
    tpx__http_resp_t resp;
    tpx_status_t st = tpx__http_post(&c, "/v3/kv/range", "{\"key\":\"AA==\"}",
                                     tpx__now_ns() + 2000000000ull, &resp);
    tpx__http_close(&c);
    if (st == TPX_OK)
        free(resp.body);
    return st == TPX_OK;
}

/* Start etcd with TLS (client certificates required or not). */
static int need_tls_etcd(int client_cert_auth, int token_ttl)
{
    TRY(make_certs());
    snprintf(etcd.tls_dir, sizeof(etcd.tls_dir), "%s", certs);
    etcd.client_cert_auth = client_cert_auth;
    etcd.token_ttl = token_ttl;
    etcd.ready = tls_ready;
    char why[256];
    raw_tls = tpx__tls_ctx_new(cert("ca.pem"), client_cert_auth ? cert("client.pem") : "",
                               client_cert_auth ? cert("client.key") : "", why, sizeof(why));
    CHECK(raw_tls != NULL, "%s", why);
    setenv("TPX_METADATA_TLS_CA", cert("ca.pem"), 1);
    if (client_cert_auth) {
        setenv("TPX_METADATA_TLS_CERT", cert("client.pem"), 1);
        setenv("TPX_METADATA_TLS_KEY", cert("client.key"), 1);
    }
    need_etcd();
    return 0;
}

/* `probe` in a child with settings changed (NAME=VALUE pairs; "NAME=" unsets):
 * what it printed ("open: STATUS" or "list: STATUS"). */
static const char *probe(const char *const *sets, size_t n)
{
    static char out[128];
    int fds[2];
    out[0] = '\0';
    if (pipe(fds) != 0)
        return out;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        for (size_t i = 0; i < n; i++) {
            char kv[512];
            snprintf(kv, sizeof(kv), "%s", sets[i]);
            char *eq = strchr(kv, '=');
            *eq = '\0';
            if (eq[1] == '\0')
                unsetenv(kv);
            else
                setenv(kv, eq + 1, 1);
        }
        execl(self, self, "probe", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (pid > 0 && got + 1 < sizeof(out) &&
           (r = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0)
        got += (size_t)r;
    out[got] = '\0';
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    char *nl = strchr(out, '\n');
    if (nl != NULL)
        *nl = '\0';
    return out;
}

static int case_probe(void)
{
    /* as a program that never heard of SIGPIPE: a write to an etcd that
     * closed must not kill it */
    signal(SIGPIPE, SIG_DFL);
    tpx_registry_t *r;
    char names[8][TPX_NAME_MAX];
    size_t n;
    tpx_status_t st = tpx_registry_open(NULL, "/probe", &r);
    if (st != TPX_OK) {
        printf("open: %s\n", tpx_status_name(st));
        return 0;
    }
    printf("list: %s\n", tpx_status_name(tpx_registry_list(r, names, 8, &n)));
    tpx_registry_close(r);
    return 0;
}

/* Publish, look up and read by name, list and watch, over TLS with
 * client certificates; refused: a client without a certificate, one whose
 * certificate another CA signed, a server certificate the client's CA did
 * not sign, and TLS settings with a plain endpoint. */
static int case_tls(void)
{
    TRY(need_tls_etcd(1, 0));
    EXPECT(strncmp(etcd.url, "https://", 8) == 0);
    node_t a, c;
    EXPECT(node_make(&a, "alpha", 1) == 0);
    EXPECT(node_make(&c, "client", 3) == 0);
    tpx_registry_t *r, *w;
    static tpx_registry_entry_t ent;
    char names[8][TPX_NAME_MAX];
    tpx_registry_event_t ev[8];
    size_t n = 0;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);
    EXPECT(tpx_registry_open(NULL, NULL, &w) == TPX_OK);
    EXPECT(tpx_registry_list(w, names, 8, &n) == TPX_OK && n == 0);
    EXPECT(tpx_registry_publish(r, a.e, &a.desc, 1, 5) == TPX_OK);
    EXPECT(tpx_registry_watch(w, ev, 8, &n, 5000) == TPX_OK && n == 1 &&
           strcmp(ev[0].name, "alpha") == 0 && !ev[0].gone);
    tpx_remote_t *rm;
    EXPECT(tpx_registry_load_remote(r, c.e, "alpha", &rm, &ent) == TPX_OK);
    EXPECT(read_check(c.e, rm, &ent.descs[0], 1) == TPX_OK);
    /* by DNS name: the certificate names localhost too */
    char url[96];
    tpx_registry_t *rh;
    snprintf(url, sizeof(url), "https://localhost:%d", etcd.client_port);
    EXPECT(tpx_registry_open(url, NULL, &rh) == TPX_OK);
    EXPECT(tpx_registry_list(rh, names, 8, &n) == TPX_OK && n == 1);
    tpx_registry_close(rh);
    EXPECT(tpx_registry_unpublish(r, a.e) == TPX_OK);
    EXPECT(tpx_registry_watch(w, ev, 8, &n, 5000) == TPX_OK && n == 1 && ev[0].gone);

    /* files that do not load, a certificate without its key: at open */
    const char *no_ca[] = {"TPX_METADATA_TLS_CA=/nonexistent/ca.pem"};
    const char *got = probe(no_ca, 1);
    printf("tls: a CA file that does not exist: %s\n", got);
    EXPECT(strcmp(got, "open: TPX_ERR_CONFIG") == 0);
    const char *no_key[] = {"TPX_METADATA_TLS_KEY="};
    got = probe(no_key, 1);
    printf("tls: a client certificate without its key: %s\n", got);
    EXPECT(strcmp(got, "open: TPX_ERR_CONFIG") == 0);
    const char *no_cert[] = {"TPX_METADATA_TLS_CERT=", "TPX_METADATA_TLS_KEY="};
    got = probe(no_cert, 2);
    printf("tls: no client certificate: %s\n", got);
    EXPECT(strcmp(got, "list: TPX_ERR_UNREACHABLE") == 0);
    char other[3][160];
    snprintf(other[0], sizeof(other[0]), "TPX_METADATA_TLS_CERT=%s", cert("other.pem"));
    snprintf(other[1], sizeof(other[1]), "TPX_METADATA_TLS_KEY=%s", cert("other.key"));
    snprintf(other[2], sizeof(other[2]), "TPX_METADATA_TLS_CA=%s", cert("other-ca.pem"));
    const char *other_client[] = {other[0], other[1]};
    got = probe(other_client, 2);
    printf("tls: a client certificate of another CA: %s\n", got);
    EXPECT(strcmp(got, "list: TPX_ERR_UNREACHABLE") == 0);
    const char *other_ca[] = {other[2]};
    got = probe(other_ca, 1);
    printf("tls: a server certificate of a CA not trusted: %s\n", got);
    EXPECT(strcmp(got, "list: TPX_ERR_UNREACHABLE") == 0);
    char plain[96];
    snprintf(plain, sizeof(plain), "TPX_METADATA=etcd://127.0.0.1:%d", etcd.client_port);
    const char *plain_url[] = {plain};
    got = probe(plain_url, 1);
    printf("tls: TLS settings with a plain endpoint: %s\n", got);
    EXPECT(strcmp(got, "open: TPX_ERR_CONFIG") == 0);

    tpx_remote_release(rm);
    tpx_registry_close(w);
    tpx_registry_close(r);
    node_free(&a);
    node_free(&c);
    TEST_DONE();
}

/* etcd's authentication, over TLS: a user with the right password
 * publishes, looks up, reads and watches, and goes on after its token
 * expired (etcd's tokens last 2 s here); a wrong password is refused
 * with TPX_ERR_ACCESS, no user at all by etcd. */
static int case_auth(void)
{
    TRY(need_tls_etcd(0, 2));
    CHECK(raw_post("/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"pw root\\\"1\"}") == 0);
    CHECK(raw_post("/v3/auth/role/add", "{\"name\":\"root\"}") == 0);
    CHECK(raw_post("/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}") == 0);
    CHECK(raw_post("/v3/auth/enable", "{}") == 0);
    char pwf[128], bad[128];
    snprintf(pwf, sizeof(pwf), "%s/root.pw", certs);
    snprintf(bad, sizeof(bad), "%s/bad.pw", certs);
    FILE *f = fopen(pwf, "w"), *g = fopen(bad, "w");
    CHECK(f != NULL && g != NULL);
    fprintf(f, "pw root\"1\n");
    fprintf(g, "not it\n");
    fclose(f);
    fclose(g);
    CHECK(chmod(pwf, 0600) == 0 && chmod(bad, 0600) == 0);
    /* without a user, before this process has one */
    const char *got = probe(NULL, 0);
    printf("auth: no user: %s\n", got);
    EXPECT(strncmp(got, "list: ", 6) == 0 && strcmp(got, "list: TPX_OK") != 0);
    setenv("TPX_METADATA_USER", "root", 1);
    setenv("TPX_METADATA_PASSWORD_FILE", pwf, 1);
    char badset[160];
    snprintf(badset, sizeof(badset), "TPX_METADATA_PASSWORD_FILE=%s", bad);
    const char *wrong[] = {badset};
    got = probe(wrong, 1);
    printf("auth: a wrong password: %s\n", got);
    EXPECT(strcmp(got, "list: TPX_ERR_ACCESS") == 0);
    got = probe(NULL, 0);
    printf("auth: root: %s\n", got);
    EXPECT(strcmp(got, "list: TPX_OK") == 0);

    node_t c;
    EXPECT(node_make(&c, "client", 3) == 0);
    tpx_registry_t *r;
    static tpx_registry_entry_t ent;
    char names[8][TPX_NAME_MAX];
    tpx_registry_event_t ev[8];
    size_t n = 0;
    EXPECT(tpx_registry_open(NULL, NULL, &r) == TPX_OK);
    EXPECT(tpx_registry_list(r, names, 8, &n) == TPX_OK && n == 0);
    pid_t pid = spawn_server("alpha", 1, 3); /* its own process, the same settings */
    EXPECT(pid > 0);
    EXPECT(tpx_registry_watch(r, ev, 8, &n, 5000) == TPX_OK && n == 1 &&
           strcmp(ev[0].name, "alpha") == 0 && !ev[0].gone);
    tpx_remote_t *rm;
    EXPECT(tpx_registry_load_remote(r, c.e, "alpha", &rm, &ent) == TPX_OK);
    EXPECT(read_check(c.e, rm, &ent.descs[0], 1) == TPX_OK);
    /* the tokens expire; calls go on with new ones (and so does the
     * server's lease, renewed with its own) */
    usleep(3500 * 1000);
    EXPECT(tpx_registry_lookup(r, "alpha", &ent) == TPX_OK);
    EXPECT(tpx_registry_list(r, names, 8, &n) == TPX_OK && n == 1);
    reap(pid);
    int gone = 0;
    uint64_t until = tpx__now_ns() + 15000000000ull;
    while (!gone && tpx__now_ns() < until && tpx_registry_watch(r, ev, 8, &n, 1000) == TPX_OK)
        for (size_t i = 0; i < n; i++)
            gone |= ev[i].gone && strcmp(ev[i].name, "alpha") == 0;
    printf("auth: the killed server's lease expired: %s\n", gone ? "seen" : "not seen");
    EXPECT(gone);
    tpx_remote_release(rm);
    tpx_registry_close(r);
    node_free(&c);
    TEST_DONE();
}

static int case_run(int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "run -- CMD [ARGS...]\n");
        return 2;
    }
    need_etcd();
    printf("etcd at %s (data %s)\n", etcd.url, etcd.dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int rc = pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (rc != 0)
        etcd_log_tail(&etcd);
    return rc;
}

int main(int argc, char **argv)
{
    self = argv[0];
    signal(SIGPIPE, SIG_IGN);
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "unit") == 0)
        return case_unit();
    if (strcmp(c, "publish") == 0)
        return case_publish();
    if (strcmp(c, "sigkill") == 0)
        return case_sigkill();
    if (strcmp(c, "outage") == 0)
        return case_outage();
    if (strcmp(c, "restart") == 0)
        return case_restart();
    if (strcmp(c, "watch") == 0)
        return case_watch();
    if (strcmp(c, "keys") == 0)
        return case_keys();
    if (strcmp(c, "stall") == 0)
        return case_stall();
    if (strcmp(c, "trickle") == 0)
        return case_trickle();
    if (strcmp(c, "trust") == 0)
        return case_trust();
    if (strcmp(c, "tls") == 0)
        return case_tls();
    if (strcmp(c, "auth") == 0)
        return case_auth();
    if (strcmp(c, "probe") == 0)
        return case_probe();
    if (strcmp(c, "serve") == 0 && argc == 5)
        return case_serve(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (strcmp(c, "run") == 0) {
        int i = 2;
        if (i < argc && strcmp(argv[i], "--") == 0)
            i++;
        return case_run(argc - i, argv + i);
    }
    fprintf(stderr, "usage: %s unit|publish|sigkill|outage|restart|run -- CMD...\n", argv[0]);
    return 2;
}
