/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_remote.c - the public entry points of metadata and remotes (tpx.h:
 * tpx_engine_get_metadata, tpx_remote_load, _name, _connect, _release):
 * the blob that describes this engine, and the remotes loaded from the
 * blobs of others, connected and released through remote.c and peer.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ident.h"
#include "peer.h"
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
    static tpx_md_t zero;
    tpx_md_t md = zero;
    md.engine_id = e->id;
    pthread_mutex_lock(&e->lock); /* gpu and devs: see tpx__engine_gpu_bind */
    md.gpu = e->gpu;
    md.chunk = e->chunk;
    md.channels = (uint16_t)e->nchan;
    md.port = (uint16_t)e->bs_port;
    if (e->ident_keys) {
        md.has_key = 1;
        memcpy(md.key, e->ident_pk, sizeof(md.key));
    }
    snprintf(md.name, sizeof(md.name), "%s", e->name);
    snprintf(md.plugin, sizeof(md.plugin), "%s", e->net->name);
    for (int i = 0; i < e->ndevs && md.nnics < TPX_MD_MAX_NICS; i++) {
        tpx_net_props_t props;
        if (tpx__net_props(e->net, e->devs[i], &props) != TPX_OK)
            continue;
        snprintf(md.nic[md.nnics], TPX_MD_STR, "%.63s", props.name);
        md.nic_speed[md.nnics++] = (uint32_t)(props.speed_mbps > 0 ? props.speed_mbps : 0);
    }
    pthread_mutex_unlock(&e->lock);
    tpx__md_addrs(e, &md);
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
    pthread_mutex_lock(&e->lock);
    for (tpx_remote_t *r = e->remotes; r != NULL; r = r->next) {
        if (r->md.engine_id == md.engine_id && r->md.has_key == md.has_key &&
            memcmp(r->md.key, md.key, sizeof(md.key)) == 0) {
            r->refs++;
            pthread_mutex_unlock(&e->lock);
            *out = r;
            return TPX_OK;
        }
    }
    tpx_remote_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        pthread_mutex_unlock(&e->lock);
        return TPX_ERR_NO_MEMORY;
    }
    r->e = e;
    r->refs = 1;
    r->md = md;
    pthread_mutex_init(&r->conn_lock, NULL);
    r->next = e->remotes;
    e->remotes = r;
    pthread_mutex_unlock(&e->lock);
    TPX_INFO("remote %s (engine %016llx, %s port %u) loaded; %s", md.name,
             (unsigned long long)md.engine_id, md.addr[0], md.port,
             e->ident_keys && md.has_key ? "served only by connections proven by its key"
                                         : "served only by connections dialed to its address");
    *out = r;
    return TPX_OK;
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
    tpx_engine_t *e = rm->e;
    pthread_mutex_lock(&rm->conn_lock);
    pthread_mutex_lock(&e->lock);
    if (--rm->refs > 0) {
        pthread_mutex_unlock(&e->lock);
        pthread_mutex_unlock(&rm->conn_lock);
        return;
    }
    rm->forgetting = 1;
    for (tpx_remote_t **pp = &e->remotes; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == rm) {
            *pp = rm->next;
            break;
        }
    }
    tpx_peer_t *p = rm->peer;
    rm->peer = NULL;
    if (p != NULL)
        p->remote = NULL;
    pthread_mutex_unlock(&e->lock);
    if (p != NULL)
        tpx__peer_destroy(p);
    pthread_mutex_unlock(&rm->conn_lock);
    pthread_mutex_lock(&e->lock);
    rm->forgetting = 0;
    int last = rm->nprep == 0; /* else the last tpx_prep_release() frees it */
    pthread_mutex_unlock(&e->lock);
    if (last)
        tpx__remote_free(rm);
}
