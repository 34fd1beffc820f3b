/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_xfer.c - the public entry points of two-sided transfers and of
 * every transfer handle (tpx.h: tpx_send, tpx_recv, tpx_xfer_poll, _wait,
 * _cancel, _release): they check their arguments, take the engine lock
 * and call one internal function (xfer_user.c, wait.c), then run the
 * pass that sends what it queued (engine.c). Nothing below calls them.
 */
#include <sched.h>
#include <time.h>

#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "xfer.h"

/* tpx_send and tpx_recv: one path, the kind apart. */
static tpx_status_t two_post(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                             tpx_xfer_kind_t kind, tpx_xfer_t **out)
{
    const char *fn = kind == XK_SEND ? "tpx_send" : "tpx_recv";
    if (p == NULL || r == NULL || out == NULL) {
        TPX_ERROR("%s: NULL %s", fn, p == NULL ? "peer" : r == NULL ? "region" : "xfer pointer");
        return TPX_ERR_INVALID_ARG;
    }
    if (r->e != p->e || r->dead) {
        TPX_ERROR("%s: the region is %s", fn, r->dead ? "deregistered" : "of another engine");
        return TPX_ERR_INVALID_ARG;
    }
    if (offset > r->len || len > r->len - offset) {
        TPX_ERROR("%s: bytes [%zu, %zu) are outside the registered region of %zu bytes", fn,
                  offset, offset + len, r->len);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_xfer_t *x = tpx__xfer_two_new(p, r, offset, len, kind);
    if (x == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_engine_t *e = x->e;
    tpx__engine_lock(e);
    tpx_status_t st = tpx__xfer_two_post(x);
    if (st == TPX_OK)
        tpx__engine_post_pass(e, x->peer);
    pthread_mutex_unlock(&e->lock);
    if (st != TPX_OK) {
        tpx__xfer_free(x);
        return st;
    }
    *out = x;
    return TPX_OK;
}

TPX_API tpx_status_t tpx_send(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    return two_post(p, r, offset, len, XK_SEND, out);
}

TPX_API tpx_status_t tpx_recv(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    return two_post(p, r, offset, len, XK_RECV, out);
}

/* A poll loop's nap while a stream is in flight: doubling from the first
 * to the last as the polls find it still running, back to the first after
 * any other poll of the thread. */
#define POLL_NAP_FIRST_NS 20000
#define POLL_NAP_MAX_NS 160000
static _Thread_local long poll_nap_ns;

TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *x, size_t *bytes)
{
    if (tpx__xfer_running(x)) {
        /* The core goes to whoever waits for it (the progress thread, the
         * transport's threads): a loop of polls on a busy machine kept
         * them waiting for its time slice to end (100 x 16 KiB READs:
         * 0.25 GB/s instead of 2.8). Returns at once on an idle core.
         * When the lock is free and no stream is in flight, the poll runs a
         * pass itself and the progress thread stands aside while the polls
         * go on: one spinning thread, not two (engine.c). While a stream
         * is in flight, a yield still left the poller its share of the
         * cores (a third of them on 2 CPUs, NIXL+TPX READs of 1000 x 128
         * KiB at 0.6 x the same READs waited for): it naps instead, 20 us
         * growing to 160 us, nothing against a stream's milliseconds. */
        int stream = tpx__engine_poll_drive(x->e);
        if (!tpx__xfer_running(x)) {
            poll_nap_ns = 0;
            return tpx_xfer_poll(x, bytes);
        }
        if (stream) {
            poll_nap_ns = poll_nap_ns == 0 ? POLL_NAP_FIRST_NS
                                           : TPX_MIN(2 * poll_nap_ns, POLL_NAP_MAX_NS);
            nanosleep(&(struct timespec){.tv_nsec = poll_nap_ns}, NULL);
        } else {
            poll_nap_ns = 0;
            sched_yield();
        }
        return TPX_INPROGRESS;
    }
    tpx_status_t st = tpx__xfer_lock(x, "tpx_xfer_poll");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    st = tpx__xfer_poll(x, bytes);
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes)
{
    if (timeout_ms == 0 && tpx__xfer_running(x))
        return tpx_xfer_poll(x, bytes); /* a poll */
    return tpx__xfer_wait(x, timeout_ms, bytes); /* it checks x under the lock it takes */
}

TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *x)
{
    tpx_status_t st = tpx__xfer_lock(x, "tpx_xfer_cancel");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    st = tpx__xfer_cancel(x);
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API void tpx_xfer_release(tpx_xfer_t *x)
{
    if (x == NULL)
        return;
    tpx_engine_t *e = x->e;
    pthread_mutex_lock(&e->lock);
    if (x->released) {
        pthread_mutex_unlock(&e->lock);
        TPX_ERROR("tpx_xfer_release: the transfer handle was released already");
        return;
    }
    tpx_xfer_t *done = tpx__xfer_release(x);
    pthread_mutex_unlock(&e->lock);
    if (done != NULL)
        tpx__xfer_free(done);
}
