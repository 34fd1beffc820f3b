/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_peer.c - the public entry points of peers (tpx.h: tpx_peer_connect,
 * tpx_peer_accept, tpx_peer_close): argument checks and the engine lock
 * around the set-up, hand-out and teardown of peer.c.
 */
#include "engine.h"
#include "peer.h"

TPX_API tpx_status_t tpx_peer_connect(tpx_engine_t *e, const char *host, int port,
                                      int timeout_ms, tpx_peer_t **out)
{
    return tpx__peer_connect_ticket(e, host, port, timeout_ms, NULL, NULL, out);
}

TPX_API void tpx_peer_close(tpx_peer_t *p)
{
    if (p != NULL)
        tpx__peer_destroy(p);
}

TPX_API tpx_status_t tpx_peer_accept(tpx_engine_t *e, int timeout_ms, tpx_peer_t **out)
{
    if (e == NULL || out == NULL) {
        TPX_ERROR("tpx_peer_accept: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    if (e->bs_fd < 0) {
        TPX_ERROR("tpx_peer_accept: this engine has no bootstrap listener (port TPX_PORT_NONE)");
        return TPX_ERR_INVALID_STATE;
    }
    int ms = timeout_ms < 0 ? e->connect_timeout_ms : timeout_ms;
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
