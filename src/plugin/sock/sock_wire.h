/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_wire.h - the built-in transport's wire formats and connect handle.
 *
 * Everything that crosses a process boundary is encoded here, in network
 * byte order, with a magic and a version, and decoded with every field
 * checked. Encoders never fail; decoders return TPX_OK or
 * TPX_ERR_PROTOCOL / TPX_ERR_INVALID_ARG and leave outputs untouched.
 *
 * Connection set-up (sender = connector, receiver = listener):
 *   sender -> receiver, on each data socket:    hello{kind=DATA, index}
 *   sender -> receiver, on the control socket:  hello{kind=CTRL, nsocks, missing}
 *   (the control hello, last, says which data sockets do not come: their
 *   NICs did not work at connect; each comes later as a REJOIN_DATA)
 *   later, replacing failed data socket `index` (sock_rejoin.c):
 *   sender -> receiver, on the new socket:      hello{kind=REJOIN_DATA, index}
 *   receiver -> sender:                          u64 0 (the welcome)
 * Data sockets then carry pieces: piece header + `len` payload bytes. A
 * message (one isend) is one or more pieces, possibly on different data
 * sockets; a zero-byte message is one piece with len 0.
 */
#ifndef TPX_SOCK_WIRE_H
#define TPX_SOCK_WIRE_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tpx/status.h"

#define TPX_SOCK_WIRE_VERSION 1
#define TPX_SOCK_HANDLE_MAGIC 0x54505848u /* "TPXH" */
#define TPX_SOCK_HELLO_MAGIC 0x5450584cu  /* "TPXL" */
#define TPX_SOCK_PIECE_MAGIC 0x54505844u  /* "TPXD" */
#define TPX_SOCK_MAX_SOCKS 16
#define TPX_SOCK_HANDLE_SIZE 128

/* An IPv4 or IPv6 socket address. */
typedef union {
    struct sockaddr sa;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
} tpx_sock_addr_t;

/* NICs one handle can name: a comm on a virtual device listens on each of
 * its members (at most TPX_NCCL_NET_MAX_DEVS_PER_NIC, checked in sock.h). */
#define TPX_SOCK_HANDLE_MAX_ADDRS 4

/* What a listener publishes: where to connect and the nonce to present. */
typedef struct {
    tpx_sock_addr_t addr; /* family, address and port of the listener (first NIC) */
    uint64_t nonce;       /* random per listen; a hello must carry it */
    int naddrs;           /* NICs listened on, 1..4 (0 is read as 1) */
    /* The listeners on NICs 2..naddrs of a virtual device, same family as
     * `addr`; a connector pairs its own i-th NIC with the i-th of these. */
    tpx_sock_addr_t more[TPX_SOCK_HANDLE_MAX_ADDRS - 1];
    uint32_t caps;        /* TPX_SOCK_HANDLE_CAP_*: what the listener's build can do */
} tpx_sock_handle_t;
/* The listener acknowledges pieces (TPX_SOCK_HELLO_ACKS): a connector
 * fails over only to a listener that says so (builds without it left the
 * field zero and read the hellos' flags as an error). */
#define TPX_SOCK_HANDLE_CAP_ACKS 0x00000001u
/* The listener takes rejoins (TPX_SOCK_HELLO_REJOIN, sock_rejoin.c): a
 * connector replaces a failed data connection of a comm only where the
 * handle says so; a listener without it (an older build) never sees a
 * rejoin, and its comms fail over as before. */
#define TPX_SOCK_HANDLE_CAP_REJOIN 0x00000002u
/* The listener takes a comm that starts without some of its data
 * connections (a control hello's `missing`, sock_conn.c "Members down at
 * connect"); they join later as replacements do. Only with REJOIN. A
 * connector whose data connection cannot be made fails its whole connect
 * to a listener without it (an older build would wait for the missing
 * connection until its deadline). */
#define TPX_SOCK_HANDLE_CAP_PARTIAL 0x00000004u
/* The listener, as a receiver, tells the sender which data connections
 * lost their NIC at its end (TPX_SOCK_HELLO_TELL): a connector asks for
 * tells only where the handle says so (older listeners refuse unknown
 * hello flags). Only with ACKS. */
#define TPX_SOCK_HANDLE_CAP_TELL 0x00000008u

/*
 * Handle layout (128 bytes, caller memory):
 *   0  u32 magic   4 u16 version   6 u16 family   8 u16 port
 *  10  u16 naddrs (NICs listened on; 0 in handles of older builds = 1)
 *  12  u8[16] address (IPv4 in the first 4 bytes)  28 u32 scope id
 *  32  u64 nonce
 *  40  3 x 24 bytes, NICs 2..naddrs (zero beyond naddrs):
 *        +0 u16 port  +2 u16 reserved (0)  +4 u32 scope id  +8 u8[16] address
 * 112 u32 caps (TPX_SOCK_HANDLE_CAP_*; zero in handles of older builds)
 * 116..119 reserved (zero)
 * 120..127 connector-private: the in-progress connect's id (see
 *          sock_conn.c); zero in a handle fresh from listen().
 * A one-NIC handle has bytes 40..111 and 116..127 zero. Builds before virtual devices
 * wrote naddrs 0 and read the first NIC only (and still connect).
 */
#define TPX_SOCK_HANDLE_MORE_OFF 40
#define TPX_SOCK_HANDLE_MORE_SIZE 24
#define TPX_SOCK_HANDLE_STAGE_OFF 120
_Static_assert(TPX_SOCK_HANDLE_MORE_OFF +
                       (TPX_SOCK_HANDLE_MAX_ADDRS - 1) * TPX_SOCK_HANDLE_MORE_SIZE <=
                   TPX_SOCK_HANDLE_STAGE_OFF,
               "the handle's address list overlaps the connector's bytes");
_Static_assert(TPX_SOCK_HANDLE_STAGE_OFF + 8 <= TPX_SOCK_HANDLE_SIZE, "handle overflow");

/* The i-th listener address of a handle (0 <= i < naddrs). */
static inline const tpx_sock_addr_t *tpx__sock_handle_addr(const tpx_sock_handle_t *h, int i)
{
    return i == 0 ? &h->addr : &h->more[i - 1];
}

void tpx__sock_handle_encode(const tpx_sock_handle_t *h, void *buf128);
/* Checks magic, version, family, naddrs <= 4, every port non-zero and the
 * reserved fields of the address list zero. */
tpx_status_t tpx__sock_handle_decode(const void *buf128, tpx_sock_handle_t *out);

typedef enum {
    TPX_SOCK_HELLO_CTRL = 1,
    TPX_SOCK_HELLO_DATA = 2,
    /* A new connection for data connection `index` of an established comm
     * that failed it (sock_rejoin.c): nonce and conn_id are the comm's,
     * nsocks and flags those of its first hellos (ACKS and REJOIN set). */
    TPX_SOCK_HELLO_REJOIN_DATA = 3,
} tpx_sock_hello_kind_t;

/* First bytes on every connection, sender to receiver. */
typedef struct {
    uint16_t kind;    /* tpx_sock_hello_kind_t */
    uint16_t index;   /* DATA: which data socket, < nsocks */
    uint16_t nsocks;  /* data sockets of this comm, 1..16 */
    uint16_t flags;   /* TPX_SOCK_HELLO_* bits, the same on every connection of a comm */
    /* CTRL: bit i set: data connection i does not come with the others
     * (its NIC did not work at connect); it comes later as a REJOIN_DATA.
     * Only with ACKS and REJOIN set, to a listener with
     * TPX_SOCK_HANDLE_CAP_PARTIAL, never every connection; 0 in every other
     * hello (bytes 14..15, which builds before it wrote 0 and never read). */
    uint16_t missing;
    uint64_t nonce;   /* the listener's nonce from the handle */
    uint64_t conn_id; /* random per connect; groups the sockets of one comm */
} tpx_sock_hello_t;

/* The comm fails over (sock_failover.c): on each data connection the
 * receiver acknowledges the pieces it holds, as a u64 count in network
 * byte order, cumulative, sent whenever it grew (the only bytes a receiver
 * ever writes on a data connection); a sender completes a message once its
 * pieces are acknowledged and sends the unacknowledged pieces of a failed
 * connection again on the others. */
#define TPX_SOCK_HELLO_ACKS 0x0001u
/* The comm replaces a failed data connection (sock_rejoin.c): the sender
 * sends it only with ACKS, to a listener whose handle has
 * TPX_SOCK_HANDLE_CAP_REJOIN (older listeners refuse unknown flags). */
#define TPX_SOCK_HELLO_REJOIN 0x0002u
/* The sender reads tells among the acknowledgements (sock_failover.c,
 * "Tells"): a word with TPX_SOCK_ACK_TELL set is no count but the set of
 * data connections (bit i: connection i, below nsocks) whose NIC at the
 * receiver's end lost its link, which the sender then fails over at once.
 * Set in CTRL and DATA hellos only with ACKS, to a listener whose handle
 * has TPX_SOCK_HANDLE_CAP_TELL; a REJOIN_DATA hello carries ACKS and
 * REJOIN alone (its connection takes its comm's tells). */
#define TPX_SOCK_HELLO_TELL 0x0004u
#define TPX_SOCK_ACK_TELL (1ull << 63)
#define TPX_SOCK_HELLO_WIRE_SIZE 32
void tpx__sock_hello_encode(const tpx_sock_hello_t *h, void *buf);
/* Checks magic, version, kind, index < nsocks <= 16, no unknown flag,
 * REJOIN and TELL only with ACKS, a REJOIN_DATA hello with ACKS and REJOIN
 * alone, and `missing` as its field says. */
tpx_status_t tpx__sock_hello_decode(const void *buf, tpx_sock_hello_t *out);

/* Header of one piece of a message on a data socket. */
typedef struct {
    uint32_t tag;    /* the isend tag */
    uint32_t len;    /* payload bytes following the header */
    uint64_t seq;    /* message number on this comm, from 0 */
    uint64_t total;  /* message size */
    uint64_t offset; /* where the payload goes in the message */
} tpx_sock_piece_t;

#define TPX_SOCK_PIECE_WIRE_SIZE 40
/* The longest piece a sender cuts (TPX_PIECE_BYTES' upper bound; direct
 * and CUDA pieces are shorter). A receiver takes none longer: the staging
 * of CUDA pieces counts their blocks in 32 bits. */
#define TPX_SOCK_PIECE_MAX (64u << 20)
void tpx__sock_piece_encode(const tpx_sock_piece_t *p, void *buf);
/* Checks magic, len <= TPX_SOCK_PIECE_MAX and offset + len <= total (no
 * overflow). */
tpx_status_t tpx__sock_piece_decode(const void *buf, tpx_sock_piece_t *out);

/* "a.b.c.d:port" / "[v6]:port" into buf (>= 64 bytes). */
const char *tpx__sock_addr_str(const tpx_sock_addr_t *a, char *buf, size_t len);
socklen_t tpx__sock_addr_len(const tpx_sock_addr_t *a);

#endif
