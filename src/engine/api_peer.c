/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_peer.c - the public entry points of peers (tpx.h: tpx_peer_connect,
 * tpx_peer_accept, tpx_peer_close): argument checks around the set-up and
 * teardown of peer.c and the wait for an incoming peer (wait.c).
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
    return tpx__peer_accept(e, timeout_ms, out);
}
