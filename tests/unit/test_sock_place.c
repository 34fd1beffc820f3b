/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sock_place.c - where the built-in transport's I/O workers put a
 * comm's data connections (sock_worker.c, pool_pick).
 *
 * Four workers; receive and send comms of two connections each, started
 * alternately (as an engine's channels are: one comm per direction each).
 * Every worker must serve as many receiving connections as every other,
 * and as many sending ones: counting both directions together once put an
 * engine's receiving connections on half the workers of a 16-core host,
 * the other half holding only the idle direction's. Connections are
 * socketpairs: nothing moves, only the placement is looked at.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "plugin/sock/sock.h"

#define WORKERS 4
#define COMMS   8 /* alternately receive and send */
#define SOCKS   2

static int fail(const char *what)
{
    fprintf(stderr, "test_sock_place: FAIL: %s\n", what);
    return 1;
}

int main(void)
{
    setenv("TPX_SOCK_WORKERS", "4", 1);
    setenv("TPX_SOCKET_IFNAME", "lo", 1);
    if (tpx__sock_init(NULL) != TPX_OK)
        return fail("transport init");
    tpx_sock_comm_t *c[COMMS];
    int peer_fd[COMMS][SOCKS];
    for (int k = 0; k < COMMS; k++) {
        c[k] = tpx__sock_comm_alloc(k % 2 == 0 ? SOCK_COMM_RECV : SOCK_COMM_SEND, 0, SOCKS);
        if (c[k] == NULL)
            return fail("comm alloc");
        for (int i = 0; i < SOCKS; i++) {
            int sp[2];
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0)
                return fail("socketpair");
            c[k]->chans[i].fd = sp[0];
            peer_fd[k][i] = sp[1];
        }
        if (tpx__sock_comm_start(c[k]) != TPX_OK)
            return fail("comm start");
    }
    if (tpx__sock_pool_size() != WORKERS)
        return fail("TPX_SOCK_WORKERS=4 did not give 4 workers");
    int n[2][WORKERS] = {{0}};
    for (int k = 0; k < COMMS; k++) {
        for (int i = 0; i < SOCKS; i++) {
            int w = tpx__sock_chan_worker(c[k], i);
            if (w < 0 || w >= WORKERS)
                return fail("a connection without a worker");
            n[k % 2][w]++;
        }
    }
    int per = COMMS / 2 * SOCKS / WORKERS, bad = 0;
    for (int w = 0; w < WORKERS; w++) {
        printf("worker %d: %d receiving, %d sending connections\n", w, n[0][w], n[1][w]);
        bad |= n[0][w] != per || n[1][w] != per;
    }
    for (int k = 0; k < COMMS; k++)
        tpx__sock_comm_destroy(c[k]); /* closes its ends */
    for (int k = 0; k < COMMS; k++)
        for (int i = 0; i < SOCKS; i++)
            close(peer_fd[k][i]);
    if (bad)
        return fail("the connections of one direction are not spread evenly over the workers");
    printf("test_sock_place: ok (%d per worker and direction)\n", per);
    return 0;
}
