/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_rate.c - what the kernel knows of a data connection's speed.
 *
 * The links of a virtual device may differ in speed (a 500 Mbit/s link
 * beside 2 Gbit/s ones). The piece scheduler cuts a slow connection's
 * pieces shorter, so that its last piece of a burst lands about when the
 * fast connections' do (sock_send.c, sched_cut). The speed is TCP's own
 * delivery-rate sample (tcp_info), read when a connection takes a piece:
 * the kernel measures it per ACK and flags samples the sender starved.
 * The same rate bounds what the connection keeps queued in the kernel
 * unsent (TCP_NOTSENT_LOWAT) to a few milliseconds of its own speed: a
 * byte bound alone (256 KiB) is 4 ms on a 62 MB/s connection and 17 ms
 * on a 15 MB/s one, and a slow link's queue is what the others wait for
 * at the end of a burst.
 *
 * Its own file because <linux/tcp.h> (whose tcp_info has the rate) and
 * glibc's <netinet/tcp.h> (the rest of the transport) cannot be included
 * together.
 */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/util.h"
#include "sock.h"

uint64_t tpx__sock_rate_next(uint64_t prev, uint64_t r, int app_limited)
{
    if (r == 0)
        return prev;
    if (prev == 0)
        return r;
    /* A sample taken while the sender had nothing to send says only that
     * the link is at least that fast. */
    if (app_limited && r < prev)
        return prev;
    /* Nor is a sample far above the estimate the link's speed: a shaper's
     * token bucket (tc tbf here, a cloud's egress policer there) lets its
     * bucket out at line rate after an idle moment, so one sample of a
     * 12.5 MB/s link can read 2.6 GB/s, and a quarter of that lifts its
     * estimate above the fast links': the slow link then takes full-size
     * pieces, 80 ms each, and the transfers wait for them (the suspected
     * cause of a netns.unequal failure, the slow link carrying 2.0-2.3% of
     * the bytes instead of 1.6%).
     * It counts as at most twice the estimate: a link that did get faster
     * is followed at up to 1.25x a sample. */
    r = TPX_MIN(r, 2 * prev);
    return prev - prev / 4 + r / 4; /* EWMA, 1/4 */
}

static uint64_t rate_sample(int fd, uint64_t prev)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_delivery_rate) + sizeof(ti.tcpi_delivery_rate))
        return prev; /* an older kernel: no sample, pieces stay as they were */
    return tpx__sock_rate_next(prev, ti.tcpi_delivery_rate, ti.tcpi_delivery_rate_app_limited);
}

void tpx__sock_rate_update(tpx_sock_chan_t *ch, uint64_t now_ns)
{
    if (now_ns - ch->rate_ns < TPX_SOCK_RATE_EVERY_NS && ch->rate_ns != 0)
        return;
    ch->rate_ns = now_ns;
    uint64_t rate = rate_sample(ch->fd, atomic_load_explicit(&ch->rate, memory_order_relaxed));
    atomic_store_explicit(&ch->rate, rate, memory_order_relaxed);
    if (rate == 0)
        return;
    uint64_t want = rate / (1000000000ull / TPX_SOCK_VDEV_QUEUE_NS);
    want = TPX_MAX(want, (uint64_t)TPX_SOCK_VDEV_LOWAT_MIN);
    want = TPX_MIN(want, (uint64_t)TPX_SOCK_VDEV_LOWAT_MAX);
    uint64_t have = (uint64_t)ch->lowat;
    if (want > have - have / 4 && want < have + have / 4)
        return; /* within a quarter: no system call for noise */
    int v = (int)want;
    if (setsockopt(ch->fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof(v)) == 0)
        ch->lowat = v;
}
