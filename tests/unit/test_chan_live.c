/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_chan_live.c - a comm's liveness record (window.c tpx__window_look),
 * from which the engine's sweep judges a receive channel dead
 * (TPX_CHANNEL_STALL_MS): idle, moving, still, and since when.
 *
 * The sweep looks every 10 ms; a comm's stillness counts from the last look
 * at which it moved or was idle, and from its first look when it was busy
 * then (not from time zero: that made a comm seen busy at its first look
 * "still for ever", and a healthy peer failed at once).
 */
#include <string.h>

#include "../common/tpx_test.h"
#include "engine/window.h"

#define MS 1000000ull

int main(void)
{
    static tpx_comm_t c;
    memset(&c, 0, sizeof(c));
    uint64_t t0 = 1000 * MS; /* any clock reading */

    /* first look busy, nothing completed yet: still since this look */
    c.win.posted = 2;
    EXPECT(tpx__window_look(&c, t0) == TPX_CHAN_STILL);
    EXPECT(c.live.still_ns == t0, "stillness counts from the first look, got %llu",
           (unsigned long long)c.live.still_ns);
    EXPECT(c.live.moved_ns == 0);

    /* still at the next look: the start does not move */
    EXPECT(tpx__window_look(&c, t0 + 10 * MS) == TPX_CHAN_STILL);
    EXPECT(c.live.still_ns == t0);

    /* a completion: moving, stillness restarts */
    c.win.done = 1;
    EXPECT(tpx__window_look(&c, t0 + 20 * MS) == TPX_CHAN_MOVING);
    EXPECT(c.live.still_ns == t0 + 20 * MS && c.live.moved_ns == t0 + 20 * MS);

    /* no completion since: still from that move */
    EXPECT(tpx__window_look(&c, t0 + 30 * MS) == TPX_CHAN_STILL);
    EXPECT(c.live.still_ns == t0 + 20 * MS);

    /* all done: idle, which is not stillness; but it moved */
    c.win.done = 2;
    EXPECT(tpx__window_look(&c, t0 + 40 * MS) == TPX_CHAN_IDLE);
    EXPECT(c.live.moved_ns == t0 + 40 * MS);
    EXPECT(tpx__window_look(&c, t0 + 50 * MS) == TPX_CHAN_IDLE);
    EXPECT(c.live.still_ns == t0 + 50 * MS);

    /* work that began and ended between two looks moved it (the stall
     * verdict counts such a sibling) */
    c.win.posted = c.win.done = 5;
    EXPECT(tpx__window_look(&c, t0 + 55 * MS) == TPX_CHAN_IDLE);
    EXPECT(c.live.moved_ns == t0 + 55 * MS);

    /* busy again after idling: still from the last idle look */
    c.win.posted = 6;
    EXPECT(tpx__window_look(&c, t0 + 60 * MS) == TPX_CHAN_STILL);
    EXPECT(c.live.still_ns == t0 + 55 * MS);

    /* a verdict sticks */
    c.live.state = TPX_CHAN_DEAD;
    c.win.done = 6;
    EXPECT(tpx__window_look(&c, t0 + 70 * MS) == TPX_CHAN_DEAD);
    TEST_DONE();
}
