/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_remote.c - the public entry points of metadata and remotes (tpx.h:
 * tpx_engine_get_metadata, tpx_remote_load, _name, _connect, _release):
 * the blob that describes this engine, and the remotes loaded from the
 * blobs of others: argument and blob checks around remote.c.
 */
#include <string.h>

#include "ident.h"
#include "remote.h"

TPX_API tpx_status_t tpx_engine_get_metadata(tpx_engine_t *e, void *buf, size_t *len)
{
    if (e == NULL || len == NULL || (buf == NULL && *len > 0)) {
        TPX_ERROR("tpx_engine_get_metadata: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    if (e->bs_port < 0) {
        TPX_ERROR("tpx_engine_get_metadata: the engine has no bootstrap port (TPX_PORT_NONE): "
                  "peers could not reach it");
        return TPX_ERR_INVALID_STATE;
    }
    tpx_md_t md;
    tpx__md_mine(e, &md);
    size_t need = 0;
    tpx_status_t st = tpx__md_encode(&md, buf, *len, &need);
    if (st != TPX_OK) {
        if (need > *len) {
            TPX_ERROR("tpx_engine_get_metadata: the buffer of %zu bytes is too small (%zu needed)",
                      *len, need);
            *len = need;
        } else {
            TPX_ERROR("tpx_engine_get_metadata: cannot encode the metadata");
        }
        return TPX_ERR_INVALID_ARG;
    }
    *len = need;
    return TPX_OK;
}

TPX_API tpx_status_t tpx_remote_load(tpx_engine_t *e, const void *blob, size_t len,
                                     tpx_remote_t **out)
{
    if (e == NULL || blob == NULL || out == NULL) {
        TPX_ERROR("tpx_remote_load: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_md_t md;
    if (tpx__md_decode(blob, len, &md) != TPX_OK) {
        unsigned v = tpx__md_version(blob, len);
        if (v != 0 && v != tpx__md_version_mine())
            TPX_ERROR("tpx_remote_load: the metadata is of version %u, this tpx (%s) reads "
                      "version %u: the peer runs %s tpx; run one release on both sides", v,
                      tpx_version_string(), tpx__md_version_mine(),
                      v < tpx__md_version_mine() ? "an older" : "a newer");
        else
            TPX_ERROR("tpx_remote_load: the %zu bytes are not a valid tpx metadata blob "
                      "(damaged or truncated)", len);
        return TPX_ERR_PROTOCOL;
    }
    if (strcmp(md.plugin, e->net->name) != 0) {
        TPX_ERROR("tpx_remote_load: engine %s uses net plugin '%s', this engine '%s': "
                  "both sides must use the same", md.name, md.plugin, e->net->name);
        return TPX_ERR_INVALID_ARG;
    }
    if (md.has_key && tpx__ident_id(md.key) != md.engine_id) {
        TPX_ERROR("tpx_remote_load: engine %s: its id %016llx is not its key's (a forged "
                  "blob?)", md.name, (unsigned long long)md.engine_id);
        return TPX_ERR_PROTOCOL;
    }
    return tpx__remote_load(e, &md, out);
}

TPX_API const char *tpx_remote_name(const tpx_remote_t *rm)
{
    return rm ? rm->md.name : "";
}

TPX_API tpx_status_t tpx_remote_connect(tpx_remote_t *rm, int timeout_ms)
{
    if (rm == NULL || timeout_ms < 0) {
        TPX_ERROR("tpx_remote_connect: invalid argument");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_peer_t *p;
    return tpx__remote_peer(rm, timeout_ms, &p);
}

TPX_API void tpx_remote_release(tpx_remote_t *rm)
{
    if (rm == NULL)
        return;
    tpx__remote_release(rm);
}
