/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigpipe.c - SIGPIPE blocked where libtpx calls plugins (see sigpipe.h).
 *
 * The depth counter is per thread: a thread of libtpx's own starts at 1
 * and never goes back to 0, so its guards never make a system call; an
 * application's thread pays at its outermost guard only.
 */
#include "sigpipe.h"

#include <pthread.h>
#include <time.h>

enum {
    SIGPIPE_OFF = 0,    /* `on` was 0: nothing done */
    SIGPIPE_NESTED = 1, /* inside another guard (or a libtpx thread): depth only */
    SIGPIPE_KEPT = 2,   /* the thread blocked SIGPIPE itself: depth only, mask untouched */
    SIGPIPE_OWN = 3,    /* this guard blocked it: consume a pending one, unblock */
};

static _Thread_local int depth;

static void pipe_set(sigset_t *s)
{
    sigemptyset(s);
    sigaddset(s, SIGPIPE);
}

void tpx__sigpipe_block_thread(void)
{
    sigset_t s;
    pipe_set(&s);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
    depth = 1;
}

void tpx__sigpipe_enter(tpx_sigpipe_guard_t *g, int on)
{
    if (!on) {
        g->mode = SIGPIPE_OFF;
        return;
    }
    if (depth++ > 0) {
        g->mode = SIGPIPE_NESTED;
        return;
    }
    sigset_t s, old;
    pipe_set(&s);
    pthread_sigmask(SIG_BLOCK, &s, &old);
    g->mode = sigismember(&old, SIGPIPE) ? SIGPIPE_KEPT : SIGPIPE_OWN;
}

void tpx__sigpipe_leave(tpx_sigpipe_guard_t *g)
{
    if (g->mode == SIGPIPE_OFF)
        return;
    depth--;
    if (g->mode != SIGPIPE_OWN)
        return;
    /* SIGPIPE was unblocked here before the guard, so none was pending for
     * this thread then: one pending now was raised inside the guard. */
    sigset_t s, pending;
    pipe_set(&s);
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE)) {
        const struct timespec zero = {0, 0};
        while (sigtimedwait(&s, NULL, &zero) == SIGPIPE)
            ;
    }
    pthread_sigmask(SIG_UNBLOCK, &s, NULL);
}
