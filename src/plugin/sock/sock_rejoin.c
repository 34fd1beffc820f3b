/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_rejoin.c - a comm that failed over replaces its failed data
 * connections once their NICs work again.
 *
 * A comm that fails over (sock_failover.c) gives a failed connection's
 * unacknowledged pieces to its other connections and never uses it again:
 * the comm lives on with the bandwidth it lost. Rejoining gives that
 * bandwidth back: the comm opens a new connection over the same pair of
 * NICs in the background, and once both ends took it, pieces are dealt
 * to it as to any other. Nothing of this runs on a healthy comm.
 *
 * Who reconnects: the sender (the connector), which knows the listener's
 * addresses from the handle. The comm keeps, per data connection, the
 * local member address it was bound to and the listener address it went
 * to (the handle's j-th NIC, sock_conn.c) and the handle's nonce. The I/O
 * worker that owns the failed connection drives the attempts from its
 * timer, as it drives the stall looks (sock_worker.c): no thread more, and
 * only the connection's owner ever touches its state. Attempt k starts
 * tpx__sock_rejoin_delay_ms(k) after the previous one (10 ms doubling to
 * 250 ms, as the engine's channel rejoin): a non-blocking connect bound to
 * the same member address, so that it takes the same NIC. An attempt still
 * unanswered when the next is due is closed and replaced (a black hole
 * swallows SYNs; a fresh one is answered as soon as the path is back); an
 * unreachable network fails it at once. There is no attempt limit: a NIC
 * may come back much later, and a dead connection costs one SYN per
 * 250 ms. Attempts end with the comm (close, or its sticky error).
 *
 * To what: the listener's own sockets. A listener that takes rejoins says
 * so in its handle (TPX_SOCK_HANDLE_CAP_REJOIN; never in strict TCPX mode),
 * and its listening sockets outlive closeListen (NCCL closes a listen comm
 * after its accept): closeListen hands them to a rejoin acceptor that
 * lives while a comm accepted from that listener with the REJOIN flag
 * lives (a count of such comms; the last one's destroy closes the
 * sockets). The acceptor's sockets sit in the epoll set of the I/O worker
 * of its first comm's first data connection, and its half-open
 * connections have the listener's bounds (TPX_SOCK_MAX_PENDING, the
 * per-source share, TPX_SOCK_HELLO_TIMEOUT_MS: SECURITY.md). While the
 * listen comm is still open its accept() hands rejoin hellos to the same
 * acceptor. The cost is the listener's descriptors (one per member NIC)
 * and ports held while its comms live: bounded by the comms, no growth
 * over time. Rejected: one rejoin port per process (an older handle has
 * no field for it, and the same port number cannot be promised on every
 * NIC), and a per-comm listening socket (a port per comm and NIC more).
 *
 * How a new connection proves it belongs to the comm: its first 32 bytes
 * are a hello of kind TPX_SOCK_HELLO_REJOIN_DATA carrying the listener's
 * nonce, the comm's conn_id, the index of the connection it replaces, and
 * the nsocks and flags of the comm's first hellos (tpx__sock_rejoin_admit
 * is the rule). The nonce alone admits new comms (the handle is their
 * ticket); a rejoin also needs the conn_id, 64 random bits that travel only
 * on the comm's own connections, so someone who had the handle cannot
 * attach a connection to, or cut one of, a comm it did not make. Only a
 * comm made with TPX_SOCK_HELLO_REJOIN, alive and not failed, takes one.
 * Whoever reads the comm's traffic learns the conn_id: that one can inject
 * into plain TCP anyway (SECURITY.md: a trusted network, or encryption
 * below tpx).
 *
 * The old connection, on the receiver: a valid rejoin of index i is the
 * sender's word that it aborted connection i (it rejoins only a connection
 * it failed over). The receiver fails its end over first, as if it had
 * been reset (tpx__sock_fo_recv_dead: what it acknowledged is delivered,
 * a piece it was reading is disarmed), then takes the new socket in its
 * place. A second rejoin of an index whose new connection is not yet
 * taken is refused.
 *
 * Where the new connection starts carrying pieces: there is no stream
 * position to agree on. Pieces carry their message, offset and size and
 * are placed by offset; acknowledgements count pieces per connection. The
 * new connection is a new acknowledgement stream, counted from 0 at both
 * ends. The receiver's owner of connection i takes the socket in a turn:
 * the old socket leaves the epoll set and is closed, the connection's
 * state is reset (header and payload progress, fo_safe and fo_acked,
 * eager and claim waits, CUDA staging), the comm's counts of ended and
 * dead connections give it back, the new socket is registered, and the
 * receiver writes the welcome: an acknowledgement of 0 pieces (8 bytes; an
 * acknowledgement is otherwise written only when it grew, so 0 never
 * appears but here). The sender gives the connection no piece before it
 * read the welcome; then its owner sets fo_head = fo_tail = 0, clears
 * fo_dead, gives back fo_dead_chans, and the connection takes pieces like
 * the others: the resend queue first, then new ones. The old connection's
 * log went to the resend queue when it failed and its socket was aborted
 * (no byte of it arrives later), so no piece is in two acknowledgement
 * streams; a piece the receiver holds already is dropped there, as any
 * copy is.
 *
 * "Every connection failed" stays final: a comm whose error is set takes
 * no rejoin, and the counts are given back only by the connection's owner,
 * after it checked the comm's error, so a comm never comes back from a
 * failure it reported.
 *
 * Older peers: a connector sets TPX_SOCK_HELLO_REJOIN only to a listener
 * with TPX_SOCK_HANDLE_CAP_REJOIN (older listeners refuse unknown flags),
 * and a listener keeps its sockets only for comms whose hellos carry it,
 * so either older end simply leaves failed connections dead, as before.
 * TPX_SOCK_WIRE_VERSION stays 1: its decoders require it equal, so a bump
 * would make older peers fail to connect at all; the capability bit is
 * this feature's version, as CAP_ACKS was failing over's.
 *
 * This file holds the schedule and the admission rule, which both ends
 * follow. The acceptor, the attempts and the hand-over above are not
 * built yet: listeners advertise no CAP_REJOIN and connectors send no
 * REJOIN flag, so no comm rejoins, and a listener drops a rejoin hello as
 * malformed (sock_conn.c).
 */
#include <stdint.h>

#include "sock.h"

uint32_t tpx__sock_rejoin_delay_ms(uint32_t attempt)
{
    if (attempt >= 5) /* 10 << 5 = 320: past the cap */
        return SOCK_REJOIN_MAX_MS;
    uint32_t ms = SOCK_REJOIN_FIRST_MS << attempt;
    return ms < SOCK_REJOIN_MAX_MS ? ms : SOCK_REJOIN_MAX_MS;
}

int tpx__sock_rejoin_admit(const tpx_sock_hello_t *h, uint64_t nonce,
                           const tpx_sock_rejoin_key_t *comms, int ncomms, int *which)
{
    const uint16_t both = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    if (h->kind != TPX_SOCK_HELLO_REJOIN_DATA || h->flags != both)
        return SOCK_RJ_MALFORMED;
    if (h->nonce != nonce)
        return SOCK_RJ_NONCE;
    for (int i = 0; i < ncomms; i++) {
        const tpx_sock_rejoin_key_t *k = &comms[i];
        if (k->conn_id != h->conn_id)
            continue;
        if (k->flags != both)
            return SOCK_RJ_NOT_REJOINING;
        if (k->nsocks != h->nsocks || h->index >= k->nsocks)
            return SOCK_RJ_CONFLICT;
        if (k->failed)
            return SOCK_RJ_FAILED;
        if (k->taking & (1u << h->index))
            return SOCK_RJ_BUSY;
        *which = i;
        return SOCK_RJ_OK;
    }
    return SOCK_RJ_NO_COMM;
}
