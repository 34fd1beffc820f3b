/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_rate.c - the built-in transport's rate estimate of a data
 * connection (sock_rate.c, tpx__sock_rate_next), from TCP's delivery-rate
 * samples, which the piece scheduler cuts a slow link's pieces by.
 *
 * A link shaped by a token bucket (tc tbf, a cloud's egress policer) sends
 * its bucket at line rate after an idle moment: one sample of a 12.5 MB/s
 * link reads as fast as the veth. That sample must not make the link look
 * fast (it once counted a quarter: 12.5 -> 660 MB/s, and the slow link
 * took full-size pieces). Real changes must still be followed: a link
 * that got 20x faster, or 20x slower, within a few dozen samples (one per
 * millisecond while the connection takes pieces).
 */
#include <stdint.h>
#include <stdio.h>

#include "plugin/sock/sock.h"

#define MB 1000000ull

static int fails;

static void check(int ok, const char *what, uint64_t got)
{
    if (!ok) {
        fprintf(stderr, "test_sock_rate: FAIL: %s (estimate %.1f MB/s)\n", what,
                (double)got / (double)MB);
        fails++;
    }
}

/* Samples `n` of rate r (app-limited or not) from estimate e. */
static uint64_t feed(uint64_t e, uint64_t r, int app_limited, int n)
{
    for (int i = 0; i < n; i++)
        e = tpx__sock_rate_next(e, r, app_limited);
    return e;
}

int main(void)
{
    const uint64_t slow = 12500000ull /* 100 Mbit/s */, burst = 2600 * MB;

    /* the first sample is taken as it is; no sample keeps the estimate */
    check(tpx__sock_rate_next(0, slow, 1) == slow, "first sample", tpx__sock_rate_next(0, slow, 1));
    check(tpx__sock_rate_next(slow, 0, 0) == slow, "no sample", tpx__sock_rate_next(slow, 0, 0));
    /* an app-limited sample below the estimate says nothing */
    check(tpx__sock_rate_next(250 * MB, slow, 1) == 250 * MB, "app-limited low sample",
          tpx__sock_rate_next(250 * MB, slow, 1));

    /* a burst after idle, flagged app-limited or not: the slow link stays slow */
    for (int app = 0; app <= 1; app++) {
        uint64_t e = tpx__sock_rate_next(slow, burst, app);
        check(e <= slow + slow / 4, app ? "app-limited burst sample" : "burst sample", e);
        /* a burst on each of three pieces in a row, real samples between */
        e = slow;
        for (int i = 0; i < 3; i++)
            e = feed(tpx__sock_rate_next(e, burst, app), slow, 0, 2);
        check(e < 2 * slow, "bursts between real samples", e);
        /* a fast link's estimate is as safe from bursts */
        e = feed(250 * MB, burst, app, 1);
        check(e <= 250 * MB + 250 * MB / 4, "burst on a fast link", e);
    }

    /* real changes are followed: 20x faster, then 20x slower, 40 samples each */
    uint64_t e = feed(slow, 250 * MB, 0, 40);
    check(e >= 225 * MB && e <= 250 * MB, "link got 20x faster", e);
    e = feed(250 * MB, 250 * MB, 1, 40); /* a fast link that is mostly app-limited */
    check(e == 250 * MB, "app-limited samples at the estimate", e);
    e = feed(slow, 250 * MB, 1, 40); /* ...also when it rose while app-limited */
    check(e >= 225 * MB, "link got 20x faster, app-limited samples", e);
    e = feed(250 * MB, slow, 0, 40);
    check(e <= slow + slow / 10, "link got 20x slower", e);

    if (fails)
        return 1;
    printf("test_sock_rate: ok\n");
    return 0;
}
