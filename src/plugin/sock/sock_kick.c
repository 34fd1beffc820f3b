/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_kick.c - handing connections to their workers, and who runs a
 * connection's turn.
 *
 * Kicks: a poster (isend/irecv, strict TCPX test()) pushes the idle/parked
 * connections of its comm on their worker's lock-free kick stack and
 * writes the worker's eventfd only if the worker announced it sleeps
 * (Dekker with the worker, sock_io.h). Turns: a connection's state belongs
 * to one thread at a time, its worker or an API thread moving bytes
 * directly (the owner token); the one that finds it taken leaves `missed`
 * and is kicked when it is given back.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

void tpx__sock_worker_wake(tpx_sock_worker_t *w)
{
    if (atomic_exchange(&w->sleeping, 0)) {
        uint64_t one = 1;
        ssize_t n = write(w->efd, &one, sizeof(one));
        (void)n; /* EAGAIN: the counter is already non-zero, a wake-up is pending */
    }
}

/* Hand `ch` to its worker: on the kick stack, and wake the worker if it
 * sleeps. Any thread; a connection already on the stack is not pushed. */
void tpx__sock_chan_kick(tpx_sock_chan_t *ch)
{
    tpx_sock_worker_t *w = ch->worker;
    if (w == NULL || atomic_exchange(&ch->kicked, 1))
        return;
    tpx_sock_chan_t *head = atomic_load_explicit(&w->kicks, memory_order_relaxed);
    do
        ch->kick_next = head;
    while (!atomic_compare_exchange_weak(&w->kicks, &head, ch)); /* seq_cst: see sock_io.h */
    if (atomic_load(&w->sleeping))
        tpx__sock_worker_wake(w);
}

void tpx__sock_comm_kick(tpx_sock_comm_t *c)
{
    uint64_t movable = atomic_load_explicit(&c->movable, memory_order_relaxed);
    for (int i = 0; i < c->nsocks; i++) {
        tpx_sock_chan_t *ch = &c->chans[i];
        /* seq_cst loads: after the poster's seq_cst store of `movable`. */
        if (c->kind == SOCK_COMM_SEND ? atomic_load(&ch->idle) : atomic_load(&ch->parked)) {
            /* A connection holding a later message eagerly has nothing to do yet. */
            if (c->kind == SOCK_COMM_RECV && atomic_load(&ch->eager_state) == SOCK_EAGER_READY &&
                atomic_load(&ch->eager_seq) >= movable)
                continue;
            tpx__sock_chan_kick(ch);
        }
    }
}

/* The worker takes a connection's state for a turn. If the API thread
 * holds it (isend's direct write, a direct read), say so and look once
 * more (Dekker with tpx__sock_chan_release: either we get it now or the releaser
 * sees `missed` and kicks us). */
int tpx__sock_chan_own(tpx_sock_chan_t *ch)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&ch->owner, &expected, SOCK_OWNER_WORKER))
        return 1;
    atomic_store(&ch->missed, 1);
    expected = 0;
    return atomic_compare_exchange_strong(&ch->owner, &expected, SOCK_OWNER_WORKER);
}

void tpx__sock_chan_release(tpx_sock_chan_t *ch, int who)
{
    (void)who;
    atomic_store(&ch->owner, 0);
    if (who == SOCK_OWNER_API && atomic_load(&ch->missed) && atomic_exchange(&ch->missed, 0))
        tpx__sock_chan_kick(ch);
}
