/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_xfer.c - the public entry points of two-sided transfers and of
 * every transfer handle (tpx.h: tpx_send, tpx_recv, tpx_xfer_poll, _wait,
 * _cancel, _release): they check their arguments, take the engine lock
 * and call down (xfer.c, the peer's files, the progress loop in engine.c).
 * Nothing below calls them.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/sigpipe.h"
#include "common/trace.h"
#include "engine.h"
#include "faults.h"
#include "mem.h"
#include "peer.h"
#include "xfer.h"

static tpx_status_t xfer_new(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                             tpx_xfer_kind_t kind, tpx_xfer_t **user_out, tpx_xfer_t **out)
{
    const char *fn = kind == XK_SEND ? "tpx_send" : "tpx_recv";
    if (p == NULL || r == NULL || user_out == NULL) {
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
    tpx_xfer_t *x = tpx__xfer_alloc(p, kind);
    if (x == NULL)
        return TPX_ERR_NO_MEMORY;
    x->two.region = r;
    x->nregions = 1;
    x->two.off = offset;
    x->two.cap = len;
    x->len = len;
    x->two.seg1 = (tpx_seg_t){.region = r, .off = offset, .len = len, .chunk0 = 0};
    *out = x;
    return TPX_OK;
}

TPX_API tpx_status_t tpx_send(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_SEND, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    tpx__engine_lock(e);
    st = tpx__peer_usable(p, "tpx_send");
    if (st != TPX_OK)
        goto err_unlock;
    x->two.seq = p->send_seq;
    x->nchunks = (uint32_t)((len + p->chunk - 1) / p->chunk);
    x->out = (tpx_stream_t){.nchunks = x->nchunks, .gate = UINT32_MAX,
                            .run = tpx__stream_run(p, x->nchunks), .first_chan = p->send_cursor};
    x->hdr_pending = 1;
    /* until the receiver's RECV_DONE (peer_pass.c), which may be needed again */
    x->confirm_pending = e->failover && x->nchunks > 0;
    st = tpx__peer_ctrl_send(p, &(tpx_ctrl_t){.type = TPX_CTRL_SEND_HDR, .len = len}, x);
    if (st != TPX_OK)
        goto err_unlock;
    tpx__stream_cursor_move(p, &p->send_cursor, &x->out, len);
    x->state = XF_ACTIVE;
    tpx__xfer_attach(x);
    tpx__stream_enqueue(x, &x->out, 1);
    tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    tpx__xfer_free(x);
    return st;
}

TPX_API tpx_status_t tpx_recv(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_RECV, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    tpx__engine_lock(e);
    st = tpx__peer_usable(p, "tpx_recv");
    if (st != TPX_OK)
        goto err_unlock;
    if ((st = tpx__peer_rxmem_check(p, r->cuda_dev >= 0, "tpx_recv")) != TPX_OK)
        goto err_unlock;
    if (p->recv_pending_n == p->recv_pending_cap) {
        uint32_t cap = p->recv_pending_cap ? p->recv_pending_cap * 2 : 64;
        tpx_xfer_t **nb = realloc(p->recv_pending, cap * sizeof(*nb));
        if (nb == NULL) {
            st = TPX_ERR_NO_MEMORY;
            goto err_unlock;
        }
        p->recv_pending = nb;
        p->recv_pending_cap = cap;
    }
    x->state = XF_QUEUED;
    tpx__xfer_attach(x);
    p->recv_pending[p->recv_pending_n++] = x;
    if (p->unexpected_n > 0)
        tpx__peer_drain_queue(p); /* an early header takes it now */
    tpx__fault_recv(e); /* testing */
    tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    tpx__xfer_free(x);
    return st;
}

static tpx_status_t xfer_result(tpx_xfer_t *x, size_t *bytes)
{
    if (x->state != XF_DONE)
        return TPX_INPROGRESS;
    if (bytes != NULL)
        *bytes = x->status == TPX_OK ? x->len : 0;
    return x->status;
}

/* Lock the engine of a transfer handle, or say why it cannot be used. A
 * released handle is invalid (tpx.h); one still held by the engine is
 * recognised here, under the lock that guards `released`. */
static tpx_status_t xfer_lock(tpx_xfer_t *x, const char *fn)
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

/* A transfer still running on an engine whose thread drives progress:
 * known without the engine lock, which a caller polling in a loop would
 * otherwise take again and again while the progress thread wants it.
 * Anything else (done, released, caller-driven progress) takes the lock. */
static int xfer_running(const tpx_xfer_t *x)
{
    return x != NULL && x->e->progress_thread &&
           atomic_load_explicit(&x->settled, memory_order_acquire) == 0;
}

TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *x, size_t *bytes)
{
    if (xfer_running(x)) {
        /* The core goes to whoever waits for it (the progress thread, the
         * transport's threads): a loop of polls on a busy machine kept
         * them waiting for its time slice to end (100 x 16 KiB READs:
         * 0.25 GB/s instead of 2.8). Returns at once on an idle core. */
        sched_yield();
        return TPX_INPROGRESS;
    }
    tpx_status_t st = xfer_lock(x, "tpx_xfer_poll");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    if (x->state != XF_DONE && !e->progress_thread)
        (void)tpx__engine_progress(e);
    st = xfer_seen(x, bytes);
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* The wait may run many passes on the caller's thread: one SIGPIPE guard
 * for all of them (common/sigpipe.h), the passes' own guards nest in it. */
TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes)
{
    if (timeout_ms == 0 && xfer_running(x)) {
        sched_yield(); /* a poll: see tpx_xfer_poll() */
        return TPX_INPROGRESS;
    }
    tpx_sigpipe_guard_t g;
    tpx__sigpipe_enter(&g, x != NULL && x->e->net->sigpipe);
    uint64_t now = tpx__now_ns();
    uint64_t limit = timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000ull;
    int driver = xfer_running(x) && x->e->wait_spin_ns > 0;
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
        uint64_t stop = TPX_MIN(limit, now + e->wait_spin_ns);
        tpx__engine_drive_begin(e);
        while (xfer_running(x) && tpx__now_ns() < stop) {
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
    tpx_status_t st = xfer_lock(x, "tpx_xfer_wait");
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
        if (e->progress_thread) {
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

TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *x)
{
    tpx_status_t st = xfer_lock(x, "tpx_xfer_cancel");
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = x->e;
    if (x->state == XF_QUEUED) {
        tpx__xfer_unqueue(x);
    } else if (x->state == XF_ACTIVE) {
        x->canceled = 1;
        if (x->ops != NULL && x->ops->canceled(x))
            tpx__engine_post_pass(e, x->peer);
        st = TPX_INPROGRESS;
    }
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
    if (x->state == XF_QUEUED)
        tpx__xfer_unqueue(x);
    if (x->state == XF_DONE) {
        tpx__xfer_unseen_drop(e, x);
        pthread_mutex_unlock(&e->lock);
        tpx__xfer_free(x);
        return;
    }
    x->canceled = 1;
    x->released = 1; /* freed when it completes */
    atomic_store_explicit(&x->settled, 1, memory_order_relaxed);
    tpx_peer_t *p = x->peer;
    if (x->ops != NULL && x->ops->canceled(x))
        tpx__engine_post_pass(e, p); /* x may complete in it, and be freed */
    pthread_mutex_unlock(&e->lock);
}
