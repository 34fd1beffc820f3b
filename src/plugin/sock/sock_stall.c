/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_stall.c - whether a data connection's peer is still there: a black
 * hole (a NIC down, every packet dropped) told from a receiver that only
 * reads slowly, from what the kernel's TCP knows (tcp_info).
 *
 * A comm that fails over (sock_failover.c) must end a connection whose
 * path died, and must not end one whose receiver simply does not read
 * (a receive posted seconds after its send: the receiver's window is
 * zero, the sender's bytes wait in its socket). TCP_USER_TIMEOUT cannot
 * tell them apart: Linux counts a zero window against it although the
 * peer answers every window probe, so a receiver that reads nothing for
 * that long loses every connection. The peer's TCP answers, though, as
 * long as it is there, and tcp_info says when it last did:
 *
 *  - data in flight in an open window (tcpi_unacked > 0, tcpi_snd_wnd >
 *    0): a live peer acknowledges it within a round trip, and its
 *    retransmission within one retransmission timeout. No acknowledgement
 *    for TPX_SOCK_STALL_MS (tcpi_last_ack_recv) is a black hole.
 *  - a zero window: the kernel sends window probes (backing off to
 *    seconds apart), which a live peer answers; but Linux rate-limits its
 *    answers to out-of-window segments (tcp_invalid_ratelimit, 500 ms), so
 *    one probe in a row may go unanswered on a healthy path (seen here:
 *    1.2 s without an acknowledgement, one probe out, on loopback). Two
 *    probes in a row unanswered (tcpi_probes >= 2; any acknowledgement
 *    resets the count) and nothing heard for TPX_SOCK_STALL_MS is a black
 *    hole; a slow reader never gets there.
 *
 * A sibling's word: waiting TPX_SOCK_STALL_MS for every loss is what a
 * transfer in flight pays when its NIC dies (the bytes on that connection
 * are not sent again before), and a READ or a send waits for its last
 * piece: with 1 s, each loss of a NIC every 5 s cost a stream of 128 MiB
 * READs a fifth of its time on top of the lost NIC's share
 * (bench/netns_flap.sh, fused: 0.54-0.59 of the all-up rate). The rule
 * waits that long to tell a dead path from a peer that went quiet as a
 * whole (a host that stalls, every path down for a moment: no connection
 * should end). A comm's other connections tell them apart sooner: a send
 * connection whose data in flight in an open window stayed
 * unacknowledged through a retransmission timeout (tcpi_retransmits:
 * a live path answers the retransmission within a round trip; or twice
 * tcpi_rto: a retransmission dropped on this host is retried without
 * being counted) -- or that holds bytes this host does not send at all
 * (nothing in flight, an open window, bytes queued: every transmission
 * dropped on this host, as by a netdev egress rule or a NIC without
 * carrier; TCP counts none of them in flight) -- for
 * TPX_SOCK_STALL_MS / 4, while the receiver acknowledged pieces of
 * another connection of the comm after this one's peer last answered, has
 * a dead path to a live peer, and ends then (found 0.25-0.5 of
 * TPX_SOCK_STALL_MS after the fault). A zero window is never judged so
 * (a slow reader's), nor a peer silent on every connection. Only comms
 * that rejoin (sock_rejoin.c) take this word: a path that only lost a
 * few packets in a row pays a reconnect (10 ms, the connection carries
 * again), not the connection.
 *
 * Anything else (nothing in flight, a window closed with data in flight,
 * a connection no longer established) is no verdict: the normal paths see resets and
 * closes. The rule costs one getsockopt, and the I/O worker asks it only
 * of a connection that owes something (a piece not acknowledged by the
 * receiver, a receive posted) and moved nothing since its last look, a
 * few times per TPX_SOCK_STALL_MS (sock_worker.c, "Stalls").
 *
 * Its own file because <linux/tcp.h> (tcpi_snd_wnd) and glibc's
 * <netinet/tcp.h> cannot be included together.
 */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "sock.h"

#define SOCK_TCP_ESTABLISHED 1 /* tcpi_state: the kernel's TCP_ESTABLISHED (net/tcp_states.h) */
#define SOCK_STALL_SIB_MARGIN_MS 20

int tpx__sock_stall_rule(const tpx_sock_tcp_seen_t *s, uint32_t stall_ms)
{
    if (s->state != SOCK_TCP_ESTABLISHED || s->last_ack_recv_ms < stall_ms)
        return 0;
    if (s->probes >= 2)
        return 1; /* two window probes in a row unanswered */
    return s->unacked > 0 && s->snd_wnd > 0; /* data in an open window, never acknowledged */
}

int tpx__sock_stall_rule_sib(const tpx_sock_tcp_seen_t *s, uint32_t stall_ms, uint32_t sib_ms)
{
    if (s->state != SOCK_TCP_ESTABLISHED || sib_ms == UINT32_MAX || s->snd_wnd == 0 ||
        s->last_ack_recv_ms < stall_ms / 4)
        return 0;
    if (s->unacked == 0 ? s->notsent == 0
                        : s->retransmits == 0 && s->last_ack_recv_ms < 2 * (uint64_t)s->rto_ms)
        return 0;
    /* the sibling's acknowledgement came after this peer's last answer
     * (tcpi_last_ack_recv counts in jiffies: a margin of a few) */
    return (uint64_t)sib_ms + SOCK_STALL_SIB_MARGIN_MS < s->last_ack_recv_ms;
}

int tpx__sock_stall_verdict(int fd, uint32_t stall_ms, uint32_t sib_ms, tpx_sock_tcp_seen_t *seen)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_snd_wnd) + sizeof(ti.tcpi_snd_wnd))
        return 0; /* an older kernel (before 5.4): no verdict, resets still fail over */
    *seen = (tpx_sock_tcp_seen_t){
        .state = ti.tcpi_state,
        .probes = ti.tcpi_probes,
        .unacked = ti.tcpi_unacked,
        .snd_wnd = ti.tcpi_snd_wnd,
        .last_ack_recv_ms = ti.tcpi_last_ack_recv,
        .retransmits = ti.tcpi_retransmits,
        .rto_ms = ti.tcpi_rto / 1000,
        .notsent = len >= offsetof(struct tcp_info, tcpi_notsent_bytes) +
                               sizeof(ti.tcpi_notsent_bytes)
                       ? ti.tcpi_notsent_bytes
                       : 0,
    };
    if (tpx__sock_stall_rule(seen, stall_ms))
        return 1;
    return tpx__sock_stall_rule_sib(seen, stall_ms, sib_ms) ? 2 : 0;
}
