/* SPDX-License-Identifier: Apache-2.0 */
/*
 * info.c - what an engine settled on (tpx_engine_info), for tools and logs.
 */
#include <stdio.h>
#include <string.h>

#include "engine.h"

TPX_API tpx_status_t tpx_engine_info(const tpx_engine_t *e, tpx_engine_info_t *info)
{
    if (e == NULL || info == NULL) {
        TPX_ERROR("tpx_engine_info: NULL %s", e == NULL ? "engine" : "info");
        return TPX_ERR_INVALID_ARG;
    }
    if (info->size < sizeof(info->size)) {
        TPX_ERROR("tpx_engine_info: info->size is 0 (set it to sizeof(tpx_engine_info_t))");
        return TPX_ERR_INVALID_ARG;
    }
    /* Filled in full here, then only the caller's first `size` bytes are
     * copied out: an older, smaller struct is never written past. */
    size_t caller_size = info->size;
    tpx_engine_info_t full;
    tpx_engine_info_t *const out = info;
    info = &full;
    memset(info, 0, sizeof(*info));
    snprintf(info->plugin, sizeof(info->plugin), "%s", e->net->name);
    info->abi = e->net->abi;
    /* The GPU and NICs may still be rebound by a registration before the
     * first peer (tpx__topo_gpu_bind): read them under the lock. */
    tpx_engine_t *me = (tpx_engine_t *)e;
    pthread_mutex_lock(&me->lock);
    info->gpu = e->gpu;
    info->gpu_from = e->gpu_from;
    info->nics_from = e->nics_from;
    info->channels = e->cfg.nchan;
    info->chunk_bytes = e->cfg.chunk;
    info->window = e->cfg.window;
    info->port = e->bs_port;
    info->identity_keys = tpx__ident_keyed(e);
    info->connect_timeout_ms = e->cfg.connect_timeout_ms;
    /* A virtual device (fused NICs) is listed as its physical members, so
     * per-NIC summaries see every link. */
    for (int i = 0; i < e->ndevs && info->nnics < TPX_INFO_MAX_NICS; i++) {
        tpx_net_props_t props;
        if (tpx__net_props(e->net, e->devs[i], &props) != TPX_OK)
            continue;
        int virt = props.nmembers > 1 || (props.nmembers == 1 && props.members[0] != e->devs[i]);
        for (int m = 0; virt && m < props.nmembers && info->nnics < TPX_INFO_MAX_NICS; m++) {
            tpx_net_props_t mp;
            if (tpx__net_props(e->net, props.members[m], &mp) != TPX_OK)
                continue;
            snprintf(info->nic[info->nnics], sizeof(info->nic[0]), "%s", mp.name);
            info->nic_speed_mbps[info->nnics++] = mp.speed_mbps;
        }
        if (!virt) {
            snprintf(info->nic[info->nnics], sizeof(info->nic[0]), "%s", props.name);
            info->nic_speed_mbps[info->nnics++] = props.speed_mbps;
        }
    }
    pthread_mutex_unlock(&me->lock);
    size_t n = caller_size < sizeof(full) ? caller_size : sizeof(full);
    memcpy((char *)out + sizeof(full.size), (const char *)&full + sizeof(full.size),
           n - sizeof(full.size));
    return TPX_OK;
}
