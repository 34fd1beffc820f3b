/* SPDX-License-Identifier: Apache-2.0 */
/*
 * registry.h - the etcd metadata client's private parts (src/registry).
 *
 * Three layers, each its own file:
 *   http.c      a small HTTP/1.1 client over plain sockets: one keep-alive
 *               connection to the first etcd endpoint that answers, requests
 *               with Content-Length, responses with Content-Length, chunked
 *               or close-delimited bodies; every size bounded, every wait
 *               under a deadline. Its response reader takes bytes through a
 *               callback, so the fuzzer feeds it from memory.
 *   json.c      a validating JSON scanner (no tree, no allocation: spans
 *               into the text) and base64, for etcd's JSON gateway.
 *   answer.c    etcd's answers and the published value, parsed (no I/O)
 *   registry.c  etcd v3 calls (kv/put, kv/range, lease/grant, keepalive,
 *               revoke), the value format of a published engine, the public
 *               tpx_registry_* API, the keep-alive thread and the resolver a
 *               remote calls on reconnect.
 * Nothing here is on a data path; it logs and allocates freely.
 */
#ifndef TPX_REGISTRY_REGISTRY_H
#define TPX_REGISTRY_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tpx/status.h"

/* ---- TLS (tls.c: OpenSSL's libssl, loaded at run time) ---- */

typedef struct tpx__tls_ctx tpx__tls_ctx_t; /* a client configuration, shared by threads */
typedef struct tpx__tls tpx__tls_t;         /* one session on a socket */

/* A client configuration: the server's certificate must chain to `ca`
 * (a PEM file; "": the system's CA certificates); cert and key ("": none)
 * are this client's certificate chain and its key. NULL with `why` (no
 * libssl, a file that does not load). */
tpx__tls_ctx_t *tpx__tls_ctx_new(const char *ca, const char *cert, const char *key, char *why,
                                 size_t why_len);
void tpx__tls_ctx_free(tpx__tls_ctx_t *ctx);
/* The handshake on connected non-blocking socket fd (not owned), by the
 * deadline; the certificate must name `host` (a DNS name or an address
 * literal). NULL with `why`. */
tpx__tls_t *tpx__tls_connect(tpx__tls_ctx_t *ctx, int fd, const char *host, uint64_t deadline_ns,
                             char *why, size_t why_len);
/* As a tpx__http_read_fn: > 0 bytes, 0 at the end, -1 with errno
 * (ETIMEDOUT at the deadline). */
ssize_t tpx__tls_read(tpx__tls_t *t, void *buf, size_t len, uint64_t deadline_ns);
/* All of buf by the deadline: 0, or -1 with errno. */
int tpx__tls_write(tpx__tls_t *t, const void *buf, size_t len, uint64_t deadline_ns);
void tpx__tls_close(tpx__tls_t *t);

/* ---- endpoints and the HTTP client (http.c) ---- */

#define TPX_REG_MAX_ENDPOINTS 8
#define TPX_REG_HEAD_MAX      16384      /* status line + headers of a response */
#define TPX_REG_BODY_MAX      (8u << 20) /* one response body */

typedef struct {
    char host[256];
    char port[8];
    int tls; /* https:// */
} tpx__reg_ep_t;

/* "etcd://host:port[,host:port...]" (IPv6 hosts in brackets; the scheme
 * may be left out; http:// is etcd://), or "https://host:port[,...]" for
 * TLS. Each endpoint may repeat the scheme; all must agree (one plain
 * endpoint would undo TLS). 0, or -1 with `why` filled. */
int tpx__reg_parse_url(const char *url, tpx__reg_ep_t *eps, int max, int *n, char *why,
                       size_t why_len);

/* A byte source for the response reader: up to `len` bytes into buf,
 * waiting at most until deadline_ns; > 0 bytes, 0 at end of stream, -1 on
 * error or timeout (errno set: ETIMEDOUT for the deadline). */
typedef ssize_t (*tpx__http_read_fn)(void *ctx, void *buf, size_t len, uint64_t deadline_ns);

/* The reader's buffer: bytes read but not parsed yet (a keep-alive
 * connection keeps what follows a response for the next one). */
typedef struct {
    tpx__http_read_fn read;
    void *ctx;
    unsigned char buf[TPX_REG_HEAD_MAX];
    size_t off, len; /* unparsed bytes: buf[off, off + len) */
} tpx__http_rd_t;

typedef struct {
    int status;     /* the HTTP status code */
    int keep_alive; /* the connection can carry another request */
    char *body;     /* malloc'ed, NUL-terminated (not counted in body_len) */
    size_t body_len;
} tpx__http_resp_t;

/* Read one response (head, then a body of at most max_body bytes). On
 * TPX_OK resp->body is the caller's to free. TPX_ERR_PROTOCOL: malformed
 * or too large; TPX_ERR_CONN_RESET: the stream ended early; TPX_ERR_TIMED_OUT. */
tpx_status_t tpx__http_read_response(tpx__http_rd_t *rd, uint64_t deadline_ns, size_t max_body,
                                     tpx__http_resp_t *resp);

/* A keep-alive connection to one of the endpoints (the one that answered
 * last is tried first). */
/* etcd's user and password (registry.c authenticates with them). */
typedef struct {
    char user[128];
    char password[256];
} tpx__reg_creds_t;

typedef struct {
    tpx__reg_ep_t eps[TPX_REG_MAX_ENDPOINTS];
    int neps;
    int cur; /* endpoint of fd, or the next to try */
    int fd;  /* -1: not connected */
    tpx__tls_ctx_t *tls_ctx;       /* not owned; set for https:// endpoints */
    tpx__tls_t *tls;               /* the session on fd */
    const tpx__reg_creds_t *creds; /* not owned; NULL: etcd without authentication */
    char token[1024];              /* etcd's auth token, sent as Authorization ("": none) */
    tpx__http_rd_t rd;
    int chunk_stage;     /* a stream's chunk: 0 its size line, 1 its bytes, 2 its CRLF */
    uint64_t chunk_left; /* bytes of the chunk still to come (stage 1) */
    char last_err[256];  /* why the last request failed, for error messages */
} tpx__http_conn_t;

void tpx__http_init(tpx__http_conn_t *c, const tpx__reg_ep_t *eps, int neps);
void tpx__http_close(tpx__http_conn_t *c);
/* POST `body` (JSON) to `path`; on TPX_OK *resp holds the answer (any
 * status code). A connection that fails is replaced by one to the next
 * endpoint, until the deadline. */
tpx_status_t tpx__http_post(tpx__http_conn_t *c, const char *path, const char *body,
                            uint64_t deadline_ns, tpx__http_resp_t *resp);

/* A streaming POST (etcd's watch) on connection c: the request sent and a
 * 200 chunked head read; then tpx__http_stream_next() hands out the body's
 * chunks as they come. */
tpx_status_t tpx__http_stream_open(tpx__http_conn_t *c, const char *path, const char *body,
                                   uint64_t deadline_ns);
/* The next chunk appended to *buf (malloc'ed, grown, NUL-terminated, at
 * most max bytes in all), every byte of it by deadline_ns.
 * TPX_ERR_TIMED_OUT: the chunk is not complete yet; what came of it is
 * kept (bytes appended to *buf, the rest awaited by the next call) and the
 * stream is intact. Any other error closes the stream
 * (TPX_ERR_CONN_RESET: it ended). */
tpx_status_t tpx__http_stream_next(tpx__http_conn_t *c, uint64_t deadline_ns, char **buf,
                                   size_t *len, size_t *cap, size_t max);

/* ---- JSON and base64 (json.c) ---- */

#define TPX_JSON_MAX_DEPTH 32

typedef struct {
    const char *p; /* first byte of the value */
    size_t n;      /* its length */
} tpx__jspan_t;

/* The whole text must be one JSON value (surrounding white space allowed),
 * nested at most TPX_JSON_MAX_DEPTH deep: 0 and *out = it, else -1. */
int tpx__json_parse(const char *s, size_t n, tpx__jspan_t *out);
/* Member `key` of object `obj` (a span from tpx__json_parse or a lookup):
 * 1 found, 0 absent, -1 obj is not an object. */
int tpx__json_get(tpx__jspan_t obj, const char *key, tpx__jspan_t *val);
/* Elements of an array, one per call starting with *pos = 0: 1 and *elem
 * the next one, 0 at the end, -1 not an array. */
int tpx__json_next(tpx__jspan_t arr, size_t *pos, tpx__jspan_t *elem);
/* A string value, unescaped (\uXXXX as UTF-8) into out[cap] with a NUL:
 * 0 and *len, -1 not a string or too long. */
int tpx__json_str(tpx__jspan_t v, char *out, size_t cap, size_t *len);
/* An unsigned integer, as a number or a string of digits (etcd's int64s
 * are strings): 0, or -1. */
int tpx__json_u64(tpx__jspan_t v, uint64_t *out);

/* base64 (RFC 4648, padded). encode: out needs 4 * ((n + 2) / 3) + 1 bytes;
 * decode: the length, or -1 if malformed or longer than cap. */
void tpx__b64_encode(const unsigned char *in, size_t n, char *out);
long tpx__b64_decode(const char *in, size_t n, unsigned char *out, size_t cap);

/* ---- etcd answers and the published value (answer.c) ---- */

/* An {"error": ...} answer: 1 and its message in err, else 0. */
int tpx__reg_answer_error(tpx__jspan_t top, char *err, size_t errlen);

/* A key read back from etcd, NUL included: the longest prefix (255 bytes),
 * '/' and a name (63) fit; a longer key (another program's) reads as "". */
#define TPX_REG_KEY_MAX 512

/* What a range answer holds: up to `max` values (base64-decoded) with keys. */
typedef struct {
    char key[TPX_REG_KEY_MAX];
    unsigned char *val; /* malloc'ed */
    size_t val_len;
} tpx__reg_kv_t;

/* Parse an etcd answer body. kvs: a range answer's kvs (NULL: only
 * check); lease: a grant's or keep-alive's ID and TTL (TTL 0: the lease is
 * gone). TPX_ERR_PROTOCOL: not an etcd answer; an {"error": ...} answer
 * copies its message into err and returns TPX_ERR_INVALID_STATE. */
tpx_status_t tpx__reg_parse_range(const char *body, size_t len, tpx__reg_kv_t *kvs, size_t max,
                                  size_t *n, char *err, size_t errlen);
tpx_status_t tpx__reg_parse_lease(const char *body, size_t len, int keepalive, uint64_t *id,
                                  int64_t *ttl, char *err, size_t errlen);
void tpx__reg_kvs_free(tpx__reg_kv_t *kvs, size_t n);

/* One event of a watch: the key, whether it was deleted, its revision. */
typedef struct {
    char key[TPX_REG_KEY_MAX];
    int gone;         /* DELETE (unpublished, or its lease expired); else PUT */
    uint64_t mod_rev; /* the revision of the change */
} tpx__reg_event_t;

/* One message of a watch stream ({"result": {...}}), validated as a whole:
 * the header's revision, whether the watch was created or canceled, and
 * the span of its events (n 0: none), read one at a time below (a
 * message may hold any number: one deleterange can end thousands of keys,
 * and nothing sized by the server is allocated). */
tpx_status_t tpx__reg_watch_head(const char *msg, size_t len, tpx__jspan_t *events, uint64_t *rev,
                                 int *created, int *canceled, char *err, size_t errlen);
/* The next event, *pos starting at 0: 1 and *ev, 0 after the last, -1
 * malformed. */
int tpx__reg_watch_event(tpx__jspan_t events, size_t *pos, tpx__reg_event_t *ev);
/* Both in one (the fuzzer's): up to max events (TPX_ERR_OVERFLOW if there
 * are more), the header's revision, whether the
 * watch was created or canceled (compacted away). */
tpx_status_t tpx__reg_parse_watch(const char *msg, size_t len, tpx__reg_event_t *ev, size_t max,
                                  size_t *n, uint64_t *rev, int *created, int *canceled, char *err,
                                  size_t errlen);

/* The value stored under <prefix>/<name>:
 *   0 u32 magic "TPXR"  4 u16 version  6 u16 ndescs  8 u32 md_len
 *   12 u16 nsigs  14 u16 0
 *   16 the metadata blob, then ndescs descriptors, then nsigs signatures,
 *   each pk[32] sig[64]: an Ed25519 signature by pk of the domain, the etcd key
 *   and the value before its signatures (trust.c, sig_message).
 * Version 1 has no signatures (a publisher without keys writes it, and
 * readers of before signatures take it); version 2 has 1..TPX_REG_MAX_SIGS.
 * Everything is checked on decode. */
#define TPX_REG_VALUE_MAGIC   0x54505852u /* "TPXR" */
#define TPX_REG_VALUE_VERSION 1
#define TPX_REG_VALUE_SIGNED  2
#define TPX_REG_VALUE_HDR     16
#define TPX_REG_SIG_SIZE      96 /* pk[32] sig[64] */
#define TPX_REG_MAX_SIGS      2  /* the engine's identity key, and TPX_METADATA_SIGN_KEY */
/* With nsigs > 0 the signatures are left zero, for the signer to fill. */
tpx_status_t tpx__reg_value_encode(const void *md, size_t md_len, const void *descs, size_t ndescs,
                                   size_t nsigs, unsigned char *out, size_t cap, size_t *len);
/* md/descs point into buf. */
tpx_status_t tpx__reg_value_decode(const unsigned char *buf, size_t len, const unsigned char **md,
                                   size_t *md_len, const unsigned char **descs, size_t *ndescs);
/* The signatures of a value (they point into buf) and the length of what
 * they sign (the value up to them). */
tpx_status_t tpx__reg_value_sigs(const unsigned char *buf, size_t len, const unsigned char **sigs,
                                 size_t *nsigs, size_t *signed_len);

/* ---- signed values and whom to trust (trust.c) ---- */

#define TPX_REG_PK 32
#define TPX_REG_SK 64

/* TPX_METADATA_TRUST parsed: keys trusted to sign a name's value. */
typedef struct {
    char name[64]; /* an engine name, or "*": any name */
    unsigned char pk[TPX_REG_PK];
} tpx__reg_pin_t;

typedef struct {
    int set; /* a trust setting was given: unsigned or untrusted values are refused */
    size_t n;
    tpx__reg_pin_t *pins; /* malloc'ed */
} tpx__reg_trust_t;

/* Parse a trust setting (see TPX_METADATA_TRUST): entries NAME=HEXKEY or
 * *=HEXKEY separated by commas, white space or new lines ('#' starts a
 * comment); a setting without '=' is the path of a file of such entries.
 * "" gives an unset trust. 0, or -1 with `why` filled. */
int tpx__reg_trust_parse(const char *spec, tpx__reg_trust_t *t, char *why, size_t why_len);
void tpx__reg_trust_free(tpx__reg_trust_t *t);
/* Is value val (stored under key, for engine `name`) signed by a key
 * trusted for that name? TPX_OK, or TPX_ERR_ACCESS with `why` saying
 * which signers it carries and why none is taken. */
tpx_status_t tpx__reg_trust_check(const tpx__reg_trust_t *t, const char *key, const char *name,
                                  const unsigned char *val, size_t len, char *why, size_t why_len);

/* A signing key file (TPX_METADATA_SIGN_KEY): 64 hex digits (the 32-byte
 * Ed25519 seed) or the PEM that `openssl genpkey -algorithm ed25519`
 * writes; it must not be readable by group or others. 0, or -1 with `why`. */
int tpx__reg_sign_key_load(const char *path, unsigned char pk[TPX_REG_PK],
                           unsigned char sk[TPX_REG_SK], char *why, size_t why_len);
/* A whole small file (at most 64 KiB), malloc'ed, with a NUL; with
 * `secret`, one readable by group or others is refused. NULL with `why`. */
char *tpx__reg_read_file(const char *path, int secret, char *why, size_t why_len);
/* Fill signature `idx` of a value encoded with nsigs > idx. */
tpx_status_t tpx__reg_value_sign(const char *key, unsigned char *val, size_t len, size_t idx,
                                 const unsigned char pk[TPX_REG_PK],
                                 const unsigned char sk[TPX_REG_SK]);
/* A key as 64 lower-case hex digits and a NUL. */
void tpx__reg_key_hex(const unsigned char pk[TPX_REG_PK], char out[2 * TPX_REG_PK + 1]);

/* ---- a registry's security settings (registry.c) ----
 * Read once when the registry opens and shared, by reference count, with
 * the resolvers of the remotes it loaded (they may outlive it). Immutable
 * after creation. */
typedef struct {
    int refs; /* atomic */
    tpx__reg_trust_t trust;
    int sign; /* TPX_METADATA_SIGN_KEY loaded */
    unsigned char sign_pk[TPX_REG_PK], sign_sk[TPX_REG_SK];
    tpx__tls_ctx_t *tls; /* https:// endpoints: TPX_METADATA_TLS_* (NULL: plain) */
    int auth;            /* TPX_METADATA_USER set: creds hold it and its password */
    tpx__reg_creds_t creds;
} tpx__reg_sec_t;

#endif
