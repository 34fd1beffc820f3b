/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_stall.c - the built-in transport's black-hole rule
 * (sock_stall.c, tpx__sock_stall_rule): what tcp_info says of a data
 * connection whose path died, and of one whose receiver does not read.
 *
 * The slow reader's states are those Linux showed on loopback while a
 * receiver read nothing for 12 s: a zero window, nothing in flight, and
 * window probes backing off to seconds apart; one probe may stay
 * unanswered for a whole interval (Linux rate-limits its answers to
 * out-of-window segments), so tcpi_last_ack_recv reached 1248 ms with
 * tcpi_probes 1, and 4872 ms between answered probes. None of them is a
 * black hole at TPX_SOCK_STALL_MS 500; data in flight in an open window
 * unacknowledged that long is, and so are two probes in a row unanswered.
 *
 * The sibling's word (tpx__sock_stall_rule_sib): data in flight in an open
 * window, unanswered through a retransmission timeout (counted, or twice
 * its length: one dropped on this host is not counted), or bytes queued
 * that this host does not send (nothing in flight), for a quarter of
 * TPX_SOCK_STALL_MS, while the receiver acknowledged another connection's
 * pieces after this one's peer last answered, is a dead path sooner; not
 * a peer silent everywhere, a slow reader, nor a path that answers.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plugin/sock/sock.h"

static int fails;

static void expect(int want, uint32_t probes, uint32_t unacked, uint32_t wnd, uint32_t ack_ms,
                   uint32_t state, const char *what)
{
    tpx_sock_tcp_seen_t s = {.state = state, .probes = probes, .unacked = unacked,
                             .snd_wnd = wnd, .last_ack_recv_ms = ack_ms};
    int got = tpx__sock_stall_rule(&s, 500);
    if (got != want) {
        fprintf(stderr, "test_sock_stall: FAIL: %s: verdict %d, expected %d\n", what, got, want);
        fails++;
    }
}

#define EST 1 /* TCP_ESTABLISHED */
#define NONE UINT32_MAX /* no sibling acknowledged anything */

static void expect_sib(int want, uint32_t probes, uint32_t unacked, uint32_t wnd, uint32_t ack_ms,
                       uint32_t rto, uint32_t sib_ms, const char *what)
{
    tpx_sock_tcp_seen_t s = {.state = EST, .probes = probes, .unacked = unacked, .snd_wnd = wnd,
                             .last_ack_recv_ms = ack_ms, .retransmits = rto, .rto_ms = 204,
                             .notsent = strstr(what, "unsent") != NULL ? 65536 : 0};
    int got = tpx__sock_stall_rule_sib(&s, 1000, sib_ms);
    if (got != want) {
        fprintf(stderr, "test_sock_stall: FAIL: sibling: %s: verdict %d, expected %d\n", what,
                got, want);
        fails++;
    }
    /* the whole verdict of a socket is one of the two rules (sock_stall.c) */
    if (want && tpx__sock_stall_rule(&s, 1000)) {
        fprintf(stderr, "test_sock_stall: FAIL: sibling: %s: the plain rule took it\n", what);
        fails++;
    }
}

int main(void)
{
    /* a receiver that reads nothing */
    expect(0, 0, 0, 0, 248, EST, "zero window, fresh");
    expect(0, 1, 0, 0, 1248, EST, "zero window, one probe unanswered (rate-limited answer)");
    expect(0, 0, 0, 0, 4872, EST, "zero window, probes seconds apart, all answered");
    expect(0, 0, 3, 0, 900, EST, "window closed with data in flight");
    /* a healthy stream */
    expect(0, 0, 40, 95232, 0, EST, "data in flight, acknowledged now");
    expect(0, 0, 0, 95232, 60000, EST, "idle: nothing in flight");
    /* black holes */
    expect(1, 0, 12, 95232, 500, EST, "data in flight unacknowledged for STALL_MS");
    expect(1, 0, 1, 65535, 3000, EST, "a retransmission unanswered for 3 s");
    expect(1, 2, 0, 0, 1700, EST, "zero window, two probes in a row unanswered");
    expect(0, 2, 0, 0, 300, EST, "two probes unanswered, but an answer 300 ms ago");
    /* not established: no verdict (resets and closes are the turns') */
    expect(0, 0, 12, 95232, 5000, 7 /* TCP_CLOSE */, "closed");
    /* a sibling's word, TPX_SOCK_STALL_MS 1000 (a quarter: 250 ms) */
    expect_sib(1, 0, 12, 95232, 300, 1, 10, "dead path, a sibling acknowledged 10 ms ago");
    expect_sib(1, 0, 12, 95232, 600, 2, 250, "dead path, a sibling acknowledged since");
    expect_sib(0, 0, 12, 95232, 300, 1, NONE, "no sibling ever acknowledged");
    expect_sib(0, 0, 12, 95232, 300, 1, 400, "the sibling went quiet before it: the peer did");
    expect_sib(0, 0, 12, 95232, 300, 1, 295, "as quiet as the sibling (within the margin)");
    expect_sib(0, 0, 12, 95232, 200, 1, 0, "unanswered for less than a quarter");
    expect_sib(0, 0, 12, 95232, 300, 0, 0, "no retransmission timeout yet (slow, not lost)");
    expect_sib(1, 0, 12, 95232, 420, 0, 0, "two timeouts long, retransmissions dropped here");
    expect_sib(0, 0, 0, 95232, 900, 0, 0, "nothing in flight, nothing queued");
    expect_sib(1, 0, 0, 95232, 300, 0, 0, "bytes unsent: this host does not send them");
    expect_sib(0, 0, 0, 95232, 200, 0, 0, "bytes unsent, not for a quarter yet");
    expect_sib(0, 0, 0, 95232, 300, 0, NONE, "bytes unsent, no sibling's word");
    expect_sib(0, 0, 0, 0, 900, 0, 0, "bytes unsent behind a zero window: a slow reader");
    expect_sib(0, 1, 0, 0, 900, 1, 0, "zero window: a slow reader");
    expect_sib(0, 0, 3, 0, 900, 1, 0, "window closed with data in flight");
    expect_sib(0, 0, 40, 95232, 0, 0, 0, "data in flight, acknowledged now");
    if (fails == 0)
        printf("test_sock_stall: OK\n");
    return fails != 0;
}
