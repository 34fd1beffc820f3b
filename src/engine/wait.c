/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wait.c - what an API caller waits for, and a transfer handle's end:
 * a transfer polled or waited for (the waiter may run the loop's passes
 * itself), canceled or released, and an incoming peer accepted.
 *
 * Beside engine.c, above every object: waiting means driving the progress
 * loop (engine.c) or sleeping on e->cond until a pass ends what is waited
 * for. The entry points (api_xfer.c, api_peer.c) only check their
 * arguments around these.
 */
#include <sched.h>

#include "common/sigpipe.h"
#include "common/trace.h"
#include "engine.h"
#include "peer.h"
#include "xfer.h"

static tpx_status_t xfer_result(tpx_xfer_t *x, size_t *bytes)
{
    if (x->state != XF_DONE)
        return TPX_INPROGRESS;
    if (bytes != NULL)
        *bytes = x->status == TPX_OK ? x->len : 0;
    return x->status;
}

/* A released handle is invalid (tpx.h); one still held by the engine is
 * recognised here, under the lock that guards `released`. */
tpx_status_t tpx__xfer_lock(tpx_xfer_t *x, const char *fn)
{
    if (x == NULL) {
        TPX_ERROR("%s: NULL transfer handle", fn);
        return TPX_ERR_INVALID_ARG;
    }
    tpx__engine_lock(x->e);
    if (x->released) {
        pthread_mutex_unlock(&x->e->lock);
        TPX_ERROR("%s: the transfer handle was released", fn);
        return TPX_ERR_INVALID_ARG;
    }
    return TPX_OK;
}

/* The caller learns that x ended: it no longer keeps the engine fd readable. */
static tpx_status_t xfer_seen(tpx_xfer_t *x, size_t *bytes)
{
    tpx_status_t st = xfer_result(x, bytes);
    if (x->state == XF_DONE)
        tpx__xfer_unseen_drop(x->e, x);
    return st;
}

tpx_status_t tpx__xfer_poll(tpx_xfer_t *x, size_t *bytes)
{
    tpx_engine_t *e = x->e;
    if (x->state != XF_DONE && !e->cfg.progress_thread)
        (void)tpx__engine_progress(e);
    return xfer_seen(x, bytes);
}

/* The wait may run many passes on the caller's thread: one SIGPIPE guard
 * for all of them (common/sigpipe.h), the passes' own guards nest in it. */
tpx_status_t tpx__xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes)
{
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, x != NULL && x->e->net->sigpipe);
    uint64_t now = tpx__now_ns();
    uint64_t limit = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
    int driver = tpx__xfer_running(x) && x->e->cfg.wait_spin_ns > 0;
    if (driver) {
        /* A transfer of a progress-thread engine often ends within
         * microseconds (a small READ, the tail of a larger one): watch its
         * `settled` flag for up to TPX_WAIT_SPIN_US, yielding the core,
         * before sleeping on the condition variable -- waking from it
         * costs as much as a network round trip on loopback. Meanwhile
         * this thread runs the loop's passes itself (whenever the lock is
         * free) and the progress thread stands aside (engine.c): the
         * thread that waits does the work, one spinning thread instead of
         * two. 2-core host, one-sided READ of 512 KiB in one process:
         * p50 1.99x -> 1.27x the raw TCP round trip with the transport's
         * direct reads (sock_direct_read.c), 32 x 16 KiB 1.71x -> 1.42x. */
        tpx_engine_t *e = x->e;
        uint64_t stop = TPX_MIN(limit, now + e->cfg.wait_spin_ns);
        tpx__engine_drive_begin(e);
        while (tpx__xfer_running(x) && tpx__now_ns() < stop) {
            if (pthread_mutex_trylock(&e->lock) == 0) {
                uint64_t before = e->nmoves, seen = e->ncompleted;
                (void)tpx__engine_progress(e);
                if (e->nmoves != before || e->ncompleted != seen)
                    e->last_move_ns = tpx__now_ns();
                pthread_mutex_unlock(&e->lock);
            }
            sched_yield();
        }
    }
    tpx_status_t st = tpx__xfer_lock(x, "tpx_xfer_wait");
    if (st != TPX_OK) {
        if (driver) {
            tpx__engine_lock(x->e);
            tpx__engine_drive_end(x->e, 1);
            pthread_mutex_unlock(&x->e->lock);
        }
        tpx__sigpipe_leave(&g);
        return st;
    }
    tpx_engine_t *e = x->e;
    if (driver) /* the loop goes back to the progress thread */
        tpx__engine_drive_end(e, x->state != XF_DONE);
    while (x->state != XF_DONE) {
        now = tpx__now_ns();
        if (now >= limit) {
            pthread_mutex_unlock(&e->lock);
            tpx__sigpipe_leave(&g);
            return TPX_INPROGRESS;
        }
        if (e->cfg.progress_thread) {
            /* The deadline sweep of the progress thread ends the transfer
             * at its deadline; wake up at least every 100 ms regardless. */
            tpx__engine_cond_wait(e, TPX_MIN(limit - now, 100 * 1000000ull));
        } else {
            if (tpx__engine_progress(e) == 0) {
                pthread_mutex_unlock(&e->lock);
                sched_yield();
                pthread_mutex_lock(&e->lock);
            }
        }
    }
    st = xfer_seen(x, bytes);
    pthread_mutex_unlock(&e->lock);
    TPX_TL(TPX_TR_WAIT_RETURN, 0);
    tpx__sigpipe_leave(&g);
    return st;
}

tpx_status_t tpx__xfer_cancel(tpx_xfer_t *x)
{
    tpx_status_t st = TPX_OK;
    if (x->state == XF_QUEUED) {
        tpx__xfer_unqueue(x);
    } else if (x->state == XF_ACTIVE) {
        x->canceled = 1;
        if (x->ops != NULL && x->ops->canceled(x))
            tpx__engine_post_pass(x->e, x->peer);
        st = TPX_INPROGRESS;
    }
    return st;
}

tpx_xfer_t *tpx__xfer_release(tpx_xfer_t *x)
{
    tpx_engine_t *e = x->e;
    if (x->state == XF_QUEUED)
        tpx__xfer_unqueue(x);
    if (x->state == XF_DONE) {
        tpx__xfer_unseen_drop(e, x);
        return x;
    }
    x->canceled = 1;
    x->released = 1; /* freed when it completes */
    atomic_store_explicit(&x->settled, 1, memory_order_relaxed);
    tpx_peer_t *p = x->peer;
    if (x->ops != NULL && x->ops->canceled(x))
        tpx__engine_post_pass(e, p); /* x may complete in it, and be freed */
    return NULL;
}

tpx_status_t tpx__peer_accept(tpx_engine_t *e, int timeout_ms, tpx_peer_t **out)
{
    int ms = timeout_ms < 0 ? e->cfg.connect_timeout_ms : timeout_ms;
    uint64_t limit = tpx__now_ns() + (uint64_t)ms * 1000000ull;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        for (tpx_peer_t *p = e->peers; p != NULL; p = p->next) {
            if (!p->accepted && p->state != PEER_CLOSED) {
                p->accepted = 1;
                pthread_mutex_unlock(&e->lock);
                *out = p;
                return TPX_OK;
            }
        }
        uint64_t now = tpx__now_ns();
        if (now >= limit) {
            pthread_mutex_unlock(&e->lock);
            return ms == 0 ? TPX_INPROGRESS : TPX_ERR_TIMED_OUT;
        }
        tpx__engine_cond_wait(e, TPX_MIN(limit - now, 100 * 1000000ull));
    }
}
