/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_rma.c - the public entry points of one-sided transfers and
 * notifications (tpx.h: tpx_xfer_prepare, _prepare_strided, tpx_prep_release,
 * tpx_xfer_post, tpx_rma, tpx_notif_send, tpx_engine_get_notifs,
 * tpx_engine_counters): they check their arguments, reach the remote's
 * peer under the engine lock (remote.c), call one function of rma.c and
 * run the pass that sends what it queued (engine.c).
 */
#include <string.h>

#include "common/trace.h"
#include "engine.h"
#include "peer.h"
#include "remote.h"
#include "rma.h"
#include "xfer.h"

TPX_API tpx_status_t tpx_xfer_prepare(tpx_remote_t *rm, tpx_op_t op, const tpx_iov_t *iov,
                                      size_t n, tpx_prep_t **out)
{
    if (rm == NULL || iov == NULL || out == NULL || n == 0 || n > TPX_RMA_MAX_IOVS ||
        (op != TPX_OP_READ && op != TPX_OP_WRITE)) {
        TPX_ERROR("tpx_xfer_prepare: invalid argument (remote %p, op %d, %zu blocks, at most "
                  "%u)", (void *)rm, (int)op, n, TPX_RMA_MAX_IOVS);
        return TPX_ERR_INVALID_ARG;
    }
    return tpx__rma_prepare(rm, op, iov, NULL, n, out);
}

TPX_API tpx_status_t tpx_xfer_prepare_strided(tpx_remote_t *rm, tpx_op_t op,
                                              const tpx_strided_t *list, size_t n,
                                              tpx_prep_t **out)
{
    if (rm == NULL || list == NULL || out == NULL || n == 0 || n > TPX_RMA_MAX_IOVS ||
        (op != TPX_OP_READ && op != TPX_OP_WRITE)) {
        TPX_ERROR("tpx_xfer_prepare_strided: invalid argument (remote %p, op %d, %zu entries, "
                  "at most %u)", (void *)rm, (int)op, n, TPX_RMA_MAX_IOVS);
        return TPX_ERR_INVALID_ARG;
    }
    return tpx__rma_prepare(rm, op, NULL, list, n, out);
}

TPX_API void tpx_prep_release(tpx_prep_t *pp)
{
    if (pp == NULL)
        return;
    tpx_remote_t *rm = pp->rm;
    tpx_engine_t *e = rm->e;
    pthread_mutex_lock(&e->lock);
    int free_rm = tpx__rma_prep_drop(pp);
    pthread_mutex_unlock(&e->lock);
    if (free_rm)
        tpx__remote_free(rm); /* forgotten while this preparation lived */
}

TPX_API tpx_status_t tpx_xfer_post(tpx_prep_t *pp, const void *notif, size_t notif_len,
                                   int timeout_ms, tpx_xfer_t **out)
{
    if (pp == NULL || out == NULL || notif_len > TPX_NOTIF_MAX ||
        (notif == NULL && notif_len > 0) || timeout_ms < 0) {
        TPX_ERROR("tpx_xfer_post: invalid argument (notification of %zu bytes, at most %d)",
                  notif_len, TPX_NOTIF_MAX);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_remote_t *rm = pp->rm;
    tpx_engine_t *e = rm->e;
    tpx_peer_t *p;
    /* The caller's deadline covers connecting too. */
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = tpx__remote_peer_locked(rm, timeout_ms, &p);
    if (st != TPX_OK)
        return st;
    st = tpx__rma_post(pp, p, notif, notif_len, t0, timeout_ms, out);
    if (st == TPX_OK)
        tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_rma(tpx_remote_t *rm, tpx_op_t op, const tpx_iov_t *iov, size_t n,
                             const void *notif, size_t notif_len, tpx_xfer_t **out)
{
    tpx_prep_t *pp;
    tpx_status_t st = tpx_xfer_prepare(rm, op, iov, n, &pp);
    if (st != TPX_OK)
        return st;
    st = tpx_xfer_post(pp, notif, notif_len, 0, out);
    tpx_prep_release(pp);
    return st;
}

TPX_API tpx_status_t tpx_engine_counters(tpx_engine_t *e, tpx_engine_counters_t *out)
{
    if (e == NULL || out == NULL) {
        TPX_ERROR("tpx_engine_counters: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    if (out->size < sizeof(out->size)) {
        TPX_ERROR("tpx_engine_counters: out->size is 0 (set it to sizeof(tpx_engine_counters_t))");
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&e->lock);
    tpx_engine_counters_t c = e->ctr;
    pthread_mutex_unlock(&e->lock);
    /* Only the caller's first `size` bytes: an older struct may be smaller. */
    size_t n = out->size < sizeof(c) ? out->size : sizeof(c);
    memcpy((char *)out + sizeof(c.size), (const char *)&c + sizeof(c.size), n - sizeof(c.size));
    return TPX_OK;
}

TPX_API tpx_status_t tpx_notif_send(tpx_remote_t *rm, const void *msg, size_t len)
{
    if (rm == NULL || (msg == NULL && len > 0) || len > TPX_NOTIF_MAX) {
        TPX_ERROR("tpx_notif_send: invalid argument (%zu bytes, at most %d)", len, TPX_NOTIF_MAX);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_peer_t *p;
    tpx_status_t st = tpx__remote_peer_locked(rm, 0, &p);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = rm->e;
    st = tpx__rma_notif_send(p, msg, len);
    if (st == TPX_OK)
        tpx__engine_post_pass(e, p);
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_engine_get_notifs(tpx_engine_t *e, tpx_notif_t *out, size_t max,
                                           size_t *n)
{
    if (e == NULL || n == NULL || (out == NULL && max > 0)) {
        TPX_ERROR("tpx_engine_get_notifs: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    pthread_mutex_lock(&e->lock);
    if (!e->cfg.progress_thread)
        (void)tpx__engine_progress(e);
    tpx_status_t st = tpx__rma_notifs_take(e, out, max, n);
    pthread_mutex_unlock(&e->lock);
    return st;
}
