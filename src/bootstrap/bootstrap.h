/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bootstrap.h - the engine's out-of-band bootstrap channel: a small TCP
 * connection, separate from the data transport, over which two engines
 * authenticate each other and exchange plugin handles and metadata.
 *
 * What it promises:
 *  - Nothing here blocks except getaddrinfo() in tpx__bs_listen() and
 *    tpx__bs_client_start(), and the *_wait() helpers, which poll until
 *    their deadline. Everything else advances as far as the socket allows
 *    and returns TPX_INPROGRESS; tpx__bs_fd() / tpx__bs_events() /
 *    tpx__bs_timeout_ms() say what to poll for and for how long, so a
 *    server can drive many connections from one poll() loop.
 *  - Every byte from the network is checked before use: each frame's
 *    magic, version and length (against TPX_BS_MAX_MSG, against the
 *    caller's buffer, and against the exact size of each handshake
 *    message); a peer that sends garbage, stalls past its deadline or fails
 *    authentication is dropped with one log line naming its address.
 *  - Errors are logged once, where they are decided, and are sticky: after
 *    a failure every call on that connection returns the same status
 *    without logging again. Only tpx__bs_close() is left to do.
 *  - A connection is used by one thread at a time; different connections
 *    are independent (no global state anywhere in the module).
 *  - No dependency on the engine or any transport; only src/common.
 *
 * Wire format. Every frame is a 12-byte header in network byte order
 *      0 u32 magic "TPXB"   4 u16 version (1)   6 u16 type   8 u32 payload length
 * followed by `length` payload bytes. The handshake (client -> server
 * unless noted; macs are HMAC-SHA256 keyed with the token, `||` concat):
 *      HELLO      client_nonce[32] u32 flags                     (36 bytes)
 *      CHALLENGE  server_nonce[32] server_mac[32] u32 flags      (68 bytes)
 *                   server_mac = HMAC(token, "tpx-server" || client_nonce || server_nonce)
 *                   (server -> client)
 *      AUTH       client_mac[32]                                 (32 bytes)
 *                   client_mac = HMAC(token, "tpx-client" || server_nonce || client_nonce)
 *      WELCOME    (empty)                                (server -> client)
 * flags bit 0 (TPX_BS_FLAG_AUTH) says the sender holds a token; other bits
 * must be zero. Without a token the macs are all zero and are checked to
 * be. A side with a token rejects a side without one and vice versa; the
 * token itself never crosses the wire. Nonces are fresh from the kernel's
 * CSPRNG on every connection, so a recorded AUTH is useless on another.
 * The client checks the server's mac before it sends its own, so a server
 * that does not know the token learns no mac of the client's.
 *
 * What the token does not do: messages after the handshake are neither
 * encrypted nor authenticated, and nothing binds the handshake to the TCP
 * connection, so an on-path attacker could relay a handshake and then
 * rewrite traffic. The token keeps strangers (and misconfigured jobs) out
 * of the bootstrap port; it is not TLS.
 *
 * Files: bs_wire.c (codecs), bs_conn.c (listen, accept, connections),
 * sha256.c (SHA-256, HMAC).
 */
#ifndef TPX_BOOTSTRAP_H
#define TPX_BOOTSTRAP_H

#include <stdint.h>

#include "tpx/status.h"

#define TPX_BS_MAGIC      0x54505842u /* "TPXB" */
/* 2: a peer's data channels open on first use (the engine's MSG_CHAN), and
 * engines prove their instance on every reconnect (IDENT version 2): a
 * version-1 peer could not follow either, so it is refused at its first
 * frame with a reason that says so. */
#define TPX_BS_VERSION    2
#define TPX_BS_HDR_SIZE   12
#define TPX_BS_MAX_MSG    (64u * 1024u) /* largest payload of any frame */
#define TPX_BS_MAX_QUEUED (1u << 20)    /* bytes tpx__bs_send() may leave unsent */
#define TPX_BS_NONCE_SIZE 32
#define TPX_BS_MAC_SIZE   32

/* Frame types. 1..15 belong to the handshake and are rejected after it;
 * the engine's own messages use TPX_BS_TYPE_USER and up. */
enum {
    TPX_BS_MSG_HELLO = 1,
    TPX_BS_MSG_CHALLENGE = 2,
    TPX_BS_MSG_AUTH = 3,
    TPX_BS_MSG_WELCOME = 4,
    TPX_BS_TYPE_USER = 16,
    TPX_BS_MSG_INFO = TPX_BS_TYPE_USER, /* payload: tpx__bs_info_encode() */
};

#define TPX_BS_FLAG_AUTH 0x1u /* HELLO/CHALLENGE flags: the sender holds a token */

/* ---- wire codecs (bs_wire.c): pure functions, no I/O, no logging -------- */

/* A decoded frame header. */
typedef struct {
    uint16_t type; /* TPX_BS_MSG_* or an engine type >= TPX_BS_TYPE_USER */
    uint32_t len;  /* payload bytes that follow the header */
} tpx_bs_hdr_t;

/* Write the 12-byte header for a payload of `len` bytes. */
void tpx__bs_hdr_encode(uint16_t type, uint32_t len, void *buf12);
/* Check magic, version and len <= max_len (which is itself capped at
 * TPX_BS_MAX_MSG). TPX_ERR_PROTOCOL on any mismatch, and then *why (if not
 * NULL) points to a static reason; *out is written only on success. */
tpx_status_t tpx__bs_hdr_decode(const void *buf12, uint32_t max_len, tpx_bs_hdr_t *out,
                                const char **why);

/* HELLO payload. */
typedef struct {
    uint8_t nonce[TPX_BS_NONCE_SIZE]; /* client_nonce */
    uint32_t flags;                   /* TPX_BS_FLAG_AUTH or 0 */
} tpx_bs_hello_t;
#define TPX_BS_HELLO_SIZE 36

/* CHALLENGE payload. */
typedef struct {
    uint8_t nonce[TPX_BS_NONCE_SIZE]; /* server_nonce */
    uint8_t mac[TPX_BS_MAC_SIZE];     /* server_mac, zero without TPX_BS_FLAG_AUTH */
    uint32_t flags;                   /* TPX_BS_FLAG_AUTH or 0 */
} tpx_bs_challenge_t;
#define TPX_BS_CHALLENGE_SIZE 68

/* AUTH payload. */
typedef struct {
    uint8_t mac[TPX_BS_MAC_SIZE]; /* client_mac, zero when neither side has a token */
} tpx_bs_auth_t;
#define TPX_BS_AUTH_SIZE 32

/* Encoders write exactly TPX_BS_*_SIZE bytes to `buf` and never fail.
 * Decoders require len to be exactly that size, no unknown flag bits and
 * an all-zero mac when TPX_BS_FLAG_AUTH is clear; TPX_ERR_PROTOCOL
 * otherwise, with *out untouched. */
void tpx__bs_hello_encode(const tpx_bs_hello_t *in, void *buf);
tpx_status_t tpx__bs_hello_decode(const void *buf, uint32_t len, tpx_bs_hello_t *out);
void tpx__bs_challenge_encode(const tpx_bs_challenge_t *in, void *buf);
tpx_status_t tpx__bs_challenge_decode(const void *buf, uint32_t len, tpx_bs_challenge_t *out);
void tpx__bs_auth_encode(const tpx_bs_auth_t *in, void *buf);
tpx_status_t tpx__bs_auth_decode(const void *buf, uint32_t len, tpx_bs_auth_t *out);

/* Which mac of the handshake to compute:
 *   SERVER: HMAC(token, "tpx-server" || n1 || n2), n1 = client nonce, n2 = server nonce
 *   CLIENT: HMAC(token, "tpx-client" || n1 || n2), n1 = server nonce, n2 = client nonce */
typedef enum {
    TPX_BS_MAC_SERVER = 0,
    TPX_BS_MAC_CLIENT = 1,
} tpx_bs_mac_role_t;

/* The handshake mac keyed with the token (strlen(token) bytes, not NUL).
 * With a NULL or empty token the mac is all zero. */
void tpx__bs_handshake_mac(const char *token, tpx_bs_mac_role_t role,
                           const uint8_t n1[TPX_BS_NONCE_SIZE], const uint8_t n2[TPX_BS_NONCE_SIZE],
                           uint8_t out[TPX_BS_MAC_SIZE]);

/* ---- peer INFO payload --------------------------------------------------- */

#define TPX_BS_MAX_HANDLES      33
#define TPX_BS_HANDLE_SIZE      128 /* an ncclNet connect handle (NCCL_NET_HANDLE_MAXSIZE) */
#define TPX_BS_PLUGIN_NAME_SIZE 64

/* What an engine tells its peer about itself after the handshake. */
typedef struct {
    uint64_t engine_id;                   /* random per engine instance: tells restarts apart */
    int32_t gpu;                          /* the sender's GPU index, -1 for host-only */
    uint32_t chunk_bytes;                 /* the sender's TPX_CHUNK_BYTES */
    uint16_t nhandles;                    /* handles[] entries in use, 1..TPX_BS_MAX_HANDLES */
    uint16_t window;                      /* the sender's per-comm request window */
    char plugin[TPX_BS_PLUGIN_NAME_SIZE]; /* NUL-terminated net plugin name */
    char name[TPX_BS_PLUGIN_NAME_SIZE];   /* NUL-terminated engine name */
    unsigned char handles[TPX_BS_MAX_HANDLES][TPX_BS_HANDLE_SIZE]; /* listen handles, opaque */
} tpx_bs_info_t;

/* Wire layout (big-endian): 0 u64 engine_id  8 i32 gpu  12 u32 chunk_bytes
 * 16 u16 nhandles  18 u16 window  20 plugin[64] (NUL, then zero padding)
 * 84 name[64] (same)  148 handles[nhandles][128]. Only the used handles travel. */
#define TPX_BS_INFO_FIXED_SIZE 148
#define TPX_BS_INFO_SIZE(n)    (TPX_BS_INFO_FIXED_SIZE + (uint32_t)(n)*TPX_BS_HANDLE_SIZE)
#define TPX_BS_INFO_MAX_SIZE   TPX_BS_INFO_SIZE(TPX_BS_MAX_HANDLES)

/* Encode into buf[cap]; *len = TPX_BS_INFO_SIZE(in->nhandles).
 * TPX_ERR_INVALID_ARG if nhandles is not in 1..33, plugin or name has no NUL or cap
 * is too small. Bytes after the plugin name's NUL are sent as zeros. */
tpx_status_t tpx__bs_info_encode(const tpx_bs_info_t *in, void *buf, uint32_t cap, uint32_t *len);
/* Decode; TPX_ERR_PROTOCOL unless nhandles is in 1..33, len is exactly
 * TPX_BS_INFO_SIZE(nhandles), plugin and name hold a NUL and only zeros after it.
 * Unused handles[] and padding of *out are zero; *out is written only on success.
 * Values (gpu, chunk_bytes, window) are the engine's to judge. */
tpx_status_t tpx__bs_info_decode(const void *buf, uint32_t len, tpx_bs_info_t *out);

/* ---- connections (bs_conn.c) --------------------------------------------- */

typedef struct tpx_bs_conn tpx_bs_conn_t;

/* A non-blocking, close-on-exec listening TCP socket on bind_addr (NULL or
 * "" = any address, IPv6 dual-stack where available, else IPv4; or an IPv4
 * / IPv6 literal or a hostname) and port (0 = ephemeral, else 1..65535).
 * EADDRINUSE -> TPX_ERR_ADDR_IN_USE, logged as "bootstrap port N is busy".
 * On success *fd_out is the socket (caller closes it) and *port_out (if
 * not NULL) the port actually bound. */
tpx_status_t tpx__bs_listen(const char *bind_addr, int port, int *fd_out, int *port_out);

/* Accept one pending connection from a listening socket, non-blocking and
 * close-on-exec, TCP_NODELAY. TPX_OK with *fd_out set; TPX_INPROGRESS when
 * none is pending (or one vanished before accept); TPX_ERR_NO_RESOURCE when
 * out of fds (logged; the connection stays queued and the listening fd
 * stays readable, so back off before polling it again); other errors
 * logged. */
tpx_status_t tpx__bs_accept(int listen_fd, int *fd_out);

/* Server side of the handshake on an accepted socket. `token` is the
 * shared secret (NULL or "" = none); it is copied. deadline_ns (on
 * tpx__now_ns()'s clock) bounds the whole handshake. On success the
 * connection owns fd; on failure the caller still does. */
tpx_status_t tpx__bs_server_start(int fd, const char *token, uint64_t deadline_ns,
                                  tpx_bs_conn_t **out);

/* Client side: resolve host (getaddrinfo, may block on DNS; every address
 * returned is tried in turn), non-blocking connect. Refused and
 * unreachable connects are retried every 50-100 ms until deadline_ns, so
 * a client may start before its server. Fails at once (logged) only if
 * host does not resolve or an argument is bad. */
tpx_status_t tpx__bs_client_start(const char *host, int port, const char *token,
                                  uint64_t deadline_ns, tpx_bs_conn_t **out);

/* Client side over an already connected stream socket (a socketpair in
 * tests, or a connection made elsewhere); made non-blocking here. On
 * success the connection owns fd. */
tpx_status_t tpx__bs_client_start_fd(int fd, const char *token, uint64_t deadline_ns,
                                     tpx_bs_conn_t **out);

/* Advance connect and handshake as far as possible without blocking.
 * TPX_OK: authenticated (if configured) and ready for messages.
 * TPX_INPROGRESS: poll tpx__bs_fd() for tpx__bs_events(), at most
 * tpx__bs_timeout_ms(), then call again.
 * Errors (logged here, naming the peer): TPX_ERR_TIMED_OUT past the
 * deadline; TPX_ERR_PROTOCOL for malformed, unexpected or unauthenticated
 * peers; TPX_ERR_CONN_REFUSED / TPX_ERR_UNREACHABLE when every connect
 * until the deadline failed so; TPX_ERR_CONN_RESET when the peer closed. */
tpx_status_t tpx__bs_advance(tpx_bs_conn_t *c);

/* The socket to poll; -1 while a client waits to retry its connect. */
int tpx__bs_fd(const tpx_bs_conn_t *c);
/* POLLIN / POLLOUT wanted now (0 while waiting to retry, or failed). */
short tpx__bs_events(const tpx_bs_conn_t *c);
/* Milliseconds until tpx__bs_advance() must be called again even without
 * socket events (a connect retry or the handshake deadline); -1 when no
 * timer is pending (ready or failed). */
int tpx__bs_timeout_ms(const tpx_bs_conn_t *c);
/* 1 when the handshake proved that both sides share the token. */
int tpx__bs_authenticated(const tpx_bs_conn_t *c);
/* When the handshake last moved a step (tpx__now_ns()'s clock): the
 * connection's creation, then each message that advanced it. */
uint64_t tpx__bs_moved_ns(const tpx_bs_conn_t *c);
/* 1 on the side that connected (tpx__bs_client_start*). */
int tpx__bs_is_client(const tpx_bs_conn_t *c);
/* Once READY: SHA-256 over "tpx-bs-transcript-v1" || HELLO || CHALLENGE ||
 * AUTH payloads, identical on both sides of one connection (both nonces and
 * both macs). The engine signs it to bind an identity to this connection.
 * TPX_ERR_INVALID_STATE before READY. */
#define TPX_BS_TRANSCRIPT_SIZE 32
tpx_status_t tpx__bs_transcript(const tpx_bs_conn_t *c, uint8_t out[TPX_BS_TRANSCRIPT_SIZE]);
/* The peer's address (getpeername); TPX_ERR_INVALID_STATE without a socket. */
struct sockaddr_storage;
tpx_status_t tpx__bs_peer_addr(const tpx_bs_conn_t *c, struct sockaddr_storage *ss);

/* Poll until the handshake completes or its deadline; same results as
 * tpx__bs_advance() but never TPX_INPROGRESS. */
tpx_status_t tpx__bs_handshake_wait(tpx_bs_conn_t *c);

/* Queue one message (header + a copy of `payload`) and write as much as
 * the socket takes now. TPX_OK once queued: call tpx__bs_flush() (or poll
 * for POLLOUT and flush) until it returns TPX_OK to know it left.
 * type must be >= TPX_BS_TYPE_USER and len <= TPX_BS_MAX_MSG
 * (else TPX_ERR_INVALID_ARG); TPX_ERR_NO_RESOURCE when more than
 * TPX_BS_MAX_QUEUED bytes would be left unsent; TPX_ERR_INVALID_STATE
 * before the handshake is done. */
tpx_status_t tpx__bs_send(tpx_bs_conn_t *c, uint16_t type, const void *payload, uint32_t len);
/* Write queued bytes: TPX_OK when nothing is left, TPX_INPROGRESS when
 * the socket is full, an error (logged) when the connection broke. */
tpx_status_t tpx__bs_flush(tpx_bs_conn_t *c);
/* Receive one message: TPX_INPROGRESS until it is complete, then TPX_OK
 * with *type, *len and buf[0..len) set. TPX_ERR_CONN_RESET when the peer
 * closed (logged at debug level between messages: it may be expected),
 * TPX_ERR_PROTOCOL on a bad header, a handshake type, or a length over
 * `cap` or over TPX_BS_MAX_MSG (logged). Also writes queued output. */
tpx_status_t tpx__bs_recv(tpx_bs_conn_t *c, uint16_t *type, void *buf, uint32_t cap, uint32_t *len);

/* Blocking helpers with a deadline (TPX_ERR_TIMED_OUT, logged, when it
 * passes; a timeout is not sticky). send_wait queues and flushes
 * everything; recv_wait receives one message and fails with
 * TPX_ERR_PROTOCOL (logged, sticky) if its type is not `type`. */
tpx_status_t tpx__bs_send_wait(tpx_bs_conn_t *c, uint16_t type, const void *payload, uint32_t len,
                               uint64_t deadline_ns);
tpx_status_t tpx__bs_recv_wait(tpx_bs_conn_t *c, uint16_t type, void *buf, uint32_t cap,
                               uint32_t *len, uint64_t deadline_ns);

/* "addr:port" ("[addr]:port" for IPv6; "local" for a unix socket) of the
 * peer; for a client before it connects, "host:port" as given. Valid until
 * tpx__bs_close(). */
const char *tpx__bs_peer_str(const tpx_bs_conn_t *c);

/* Rate limit for the lines that rejected connections log (a flood of bad
 * connections must not flood the log): at most TPX_BS_LOG_BURST lines per
 * TPX_BS_LOG_WINDOW_MS, then one line with the count of those not logged.
 * One limiter per accepting thread; it is not locked. */
#define TPX_BS_LOG_BURST     10
#define TPX_BS_LOG_WINDOW_MS 10000
typedef struct {
    uint64_t window_ns;  /* start of the current window */
    uint32_t logged;     /* lines logged in it */
    uint64_t suppressed; /* lines not logged in it */
} tpx_bs_loglimit_t;
/* 1: log this line; 0: it was counted instead. Starts a new window (and
 * logs the count of the last one's suppressed lines) when due. */
int tpx__bs_loglimit(tpx_bs_loglimit_t *l);
/* Log the count of suppressed lines if the window is over (call now and then). */
void tpx__bs_loglimit_tick(tpx_bs_loglimit_t *l);
/* Route this connection's failure lines (ERROR/WARN) through `l` (NULL: none). */
void tpx__bs_set_loglimit(tpx_bs_conn_t *c, tpx_bs_loglimit_t *l);

/* Close the socket and free everything; unsent output is dropped.
 * NULL is ignored. */
void tpx__bs_close(tpx_bs_conn_t *c);

#endif
