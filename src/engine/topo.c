/* SPDX-License-Identifier: Apache-2.0 */
/*
 * topo.c - which plugin devices (NICs) an engine's channels use.
 *
 * TPX_NIC_MAP ("0,1:eth1;2,3:eth2") names the NICs of each GPU; channel i
 * uses the (i mod n)-th of them. Without a map, a GPU engine uses the NICs
 * nearest its GPU in the PCI tree (the longest common sysfs path: same
 * switch beats same root complex beats same host), and a host-memory engine
 * (gpu -1), or one whose GPU or NICs have no PCI path, uses every device.
 *
 * Then TPX_NIC_FUSE: a channel's comm lives on one plugin device, and the
 * engine deals chunks round-robin, so with one NIC per channel the slowest
 * link paces all. Fused, the NICs become one virtual device (makeVDevice,
 * NCCL's vNIC; groups of at most 4) that every channel uses, and the plugin
 * spreads each comm over all the links (the built-in transport gives a slow
 * link fewer pieces). TCPX has no virtual devices (v7), nor does a devmem
 * (UNPACK) plugin such as the built-in strict TCPX mode.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/sysfs.h"
#include "engine.h"
#include "gpu/cuda.h"

static int dev_by_name(tpx_engine_t *e, const char *name, size_t len)
{
    for (int d = 0; d < e->net->ndev; d++) {
        tpx_net_props_t p;
        if (tpx__net_props(e->net, d, &p) == TPX_OK && strlen(p.name) == len &&
            strncmp(p.name, name, len) == 0)
            return d;
    }
    return -1;
}

/* Parse the map; fill devs for `gpu`. 0 if gpu is not in it, -1 on error. */
static int map_lookup(tpx_engine_t *e, const char *map, int gpu, int *devs, int *ndevs)
{
    const char *s = map;
    while (*s) {
        size_t glen = strcspn(s, ";");
        const char *colon = memchr(s, ':', glen);
        if (colon == NULL) {
            TPX_ERROR("TPX_NIC_MAP=%s: group '%.*s' has no ':'", map, (int)glen, s);
            return -1;
        }
        int hit = 0;
        for (const char *g = s; g < colon;) {
            char *end;
            long v = strtol(g, &end, 10);
            if (end == g || (end < colon && *end != ',')) {
                TPX_ERROR("TPX_NIC_MAP=%s: bad GPU list '%.*s'", map, (int)(colon - s), s);
                return -1;
            }
            hit |= v == gpu;
            g = end < colon ? end + 1 : end;
        }
        if (hit) {
            const char *n = colon + 1, *gend = s + glen;
            *ndevs = 0;
            while (n < gend && *ndevs < TPX_MAX_CHANNELS) {
                size_t nl = strcspn(n, ",;");
                if ((size_t)(gend - n) < nl)
                    nl = (size_t)(gend - n);
                int d = dev_by_name(e, n, nl);
                if (d < 0) {
                    TPX_ERROR("TPX_NIC_MAP: NIC '%.*s' of GPU %d is not a device of plugin %s",
                              (int)nl, n, gpu, e->net->name);
                    return -1;
                }
                devs[(*ndevs)++] = d;
                n += nl + (n + nl < gend);
            }
            if (*ndevs == 0) {
                TPX_ERROR("TPX_NIC_MAP: GPU %d has no NIC", gpu);
                return -1;
            }
            return 1;
        }
        s += glen + (s[glen] == ';');
    }
    return 0;
}

/* Path components two sysfs device paths share. */
static int pci_common(const char *a, const char *b)
{
    int common = 0;
    while (*a && *a == *b) {
        if (*a == '/')
            common++;
        a++, b++;
    }
    if ((*a == '\0' || *a == '/') && (*b == '\0' || *b == '/'))
        common++;
    return common;
}

/* The NICs closest to `gpu` in the PCI tree; 0 if it cannot tell. */
static int pci_nearest(tpx_engine_t *e, int gpu, int *devs, int *ndevs)
{
    char bus[32], link[PATH_MAX], gpath[PATH_MAX];
    if (tpx__cuda_init() != TPX_OK || gpu >= tpx__cuda_device_count() ||
        tpx__cuda_device_pci_bus_id(gpu, bus, sizeof(bus)) != TPX_OK)
        return 0;
    snprintf(link, sizeof(link), "%s/bus/pci/devices/%s", tpx__sysfs_root(), bus);
    if (realpath(link, gpath) == NULL)
        return 0;
    int best = -1;
    *ndevs = 0;
    for (int d = 0; d < e->net->ndev && *ndevs < TPX_MAX_CHANNELS; d++) {
        tpx_net_props_t p;
        if (tpx__net_props(e->net, d, &p) != TPX_OK || p.pci_path[0] == '\0')
            continue;
        int c = pci_common(gpath, p.pci_path);
        if (c > best) {
            best = c;
            *ndevs = 0;
        }
        if (c == best)
            devs[(*ndevs)++] = d;
    }
    if (*ndevs > 0)
        TPX_INFO("GPU %d (%s): %d nearest NIC(s) by PCI path, first is device %d", gpu, gpath,
                 *ndevs, devs[0]);
    return *ndevs > 0;
}

/* The NICs of the engine, before fusing. */
static tpx_status_t topo_nics(tpx_engine_t *e)
{
    const char *map = tpx__config_str(TPX_CFG_NIC_MAP);
    if (map[0] != '\0' && e->gpu >= 0) {
        int r = map_lookup(e, map, e->gpu, e->devs, &e->ndevs);
        if (r < 0)
            return TPX_ERR_CONFIG;
        if (r > 0) {
            e->nics_from = TPX_NICS_FROM_MAP;
            return TPX_OK;
        }
    }
    if (e->gpu >= 0 && pci_nearest(e, e->gpu, e->devs, &e->ndevs)) {
        e->nics_from = TPX_NICS_FROM_PCI;
        return TPX_OK;
    }
    e->nics_from = TPX_NICS_FROM_ALL;
    e->ndevs = TPX_MIN(e->net->ndev, TPX_MAX_CHANNELS);
    for (int d = 0; d < e->ndevs; d++)
        e->devs[d] = d;
    return TPX_OK;
}

/* TPX_NIC_FUSE: -1 auto, 0 off, 1 required; -2 if malformed (said). */
static int fuse_mode(void)
{
    const char *v = tpx__config_str(TPX_CFG_NIC_FUSE);
    if (strcmp(v, "auto") == 0)
        return -1;
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        return v[0] - '0';
    TPX_ERROR("TPX_NIC_FUSE=%s is not valid: expected auto, 0 or 1", v);
    return -2;
}

/* Replace e->devs by virtual devices of at most as many NICs as the plugin
 * fuses (tpx__net_vdev_max: 4, or 8 from ncclNet v12), in even groups (8
 * NICs by 4: 2 x 4; 5: 3 + 2). */
static tpx_status_t topo_fuse(tpx_engine_t *e, int required)
{
    const int MAXM = TPX_MAX(1, tpx__net_vdev_max(e->net));
    /* The physical devices behind the chosen ones (a plugin may list
     * virtual devices already), each once. */
    int phys[TPX_MAX_CHANNELS * TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12], nphys = 0;
    for (int i = 0; i < e->ndevs; i++) {
        tpx_net_props_t p;
        tpx_status_t st = tpx__net_props(e->net, e->devs[i], &p);
        if (st != TPX_OK)
            return st;
        for (int m = 0; m < p.nmembers; m++) {
            int dup = 0;
            for (int k = 0; k < nphys; k++)
                dup |= phys[k] == p.members[m];
            if (!dup && nphys < (int)(sizeof(phys) / sizeof(phys[0])))
                phys[nphys++] = p.members[m];
        }
    }
    int ngroups = (nphys + MAXM - 1) / MAXM;
    int vdevs[TPX_MAX_CHANNELS];
    if (ngroups > TPX_MAX_CHANNELS)
        ngroups = TPX_MAX_CHANNELS;
    for (int g = 0; g < ngroups; g++) {
        int lo = g * nphys / ngroups, hi = (g + 1) * nphys / ngroups;
        tpx_status_t st = tpx__net_make_vdev(e->net, phys + lo, hi - lo, &vdevs[g]);
        if (st != TPX_OK) {
            if (required) {
                TPX_ERROR("TPX_NIC_FUSE=1: plugin %s could not fuse %d NIC(s) into a virtual "
                          "device (see above)", e->net->name, hi - lo);
                return st;
            }
            TPX_WARN("TPX_NIC_FUSE=auto: plugin %s could not fuse the NICs (see above); each "
                     "channel uses one NIC", e->net->name);
            return TPX_OK;
        }
    }
    for (int g = 0; g < ngroups; g++) {
        tpx_net_props_t p;
        if (tpx__net_props(e->net, vdevs[g], &p) == TPX_OK)
            TPX_INFO("channels use virtual device %d: %s, %d NIC(s), %d Mb/s", vdevs[g], p.name,
                     p.nmembers, p.speed_mbps);
        e->devs[g] = vdevs[g];
    }
    e->ndevs = ngroups;
    e->devs_fused = 1;
    return TPX_OK;
}

tpx_status_t tpx__topo_devs(tpx_engine_t *e)
{
    int mode = fuse_mode();
    if (mode == -2)
        return TPX_ERR_CONFIG;
    e->devs_fused = 0;
    tpx_status_t st = topo_nics(e);
    if (st != TPX_OK || mode == 0)
        return st;
    tpx_net_props_t p;
    st = tpx__net_props(e->net, e->devs[0], &p);
    if (st != TPX_OK)
        return st;
    int devmem = e->net->is_tcpx || p.dev_type == TPX_NCCL_NET_DEVICE_UNPACK;
    if (mode < 0)
        return e->ndevs > 1 && !devmem && tpx__net_has_vdev(e->net) ? topo_fuse(e, 0) : TPX_OK;
    if (devmem) {
        TPX_ERROR("TPX_NIC_FUSE=1: plugin %s delivers devmem receives (TCPX), which has no "
                  "virtual devices; use TPX_NIC_FUSE=auto or 0", e->net->name);
        return TPX_ERR_UNSUPPORTED;
    }
    if (!tpx__net_has_vdev(e->net)) {
        TPX_ERROR("TPX_NIC_FUSE=1: plugin %s (ncclNet v%d) has no makeVDevice (virtual devices "
                  "need v9+); use TPX_NIC_FUSE=auto or 0", e->net->name, e->net->abi);
        return TPX_ERR_UNSUPPORTED;
    }
    return topo_fuse(e, 1);
}

/* A CPU on the NUMA node of the engine's first NIC, for the progress
 * thread; -1 if unknown. Picks the node's last CPU: the first ones tend to
 * take interrupts and housekeeping. */
int tpx__topo_local_cpu(tpx_engine_t *e)
{
    if (e->props.pci_path[0] == '\0')
        return -1;
    char path[512], buf[1024];
    long node;
    snprintf(path, sizeof(path), "%s/numa_node", e->props.pci_path);
    if (tpx__sysfs_int(path, &node) != 0 || node < 0)
        return -1;
    snprintf(path, sizeof(path), "%s/devices/system/node/node%ld/cpulist", tpx__sysfs_root(),
             node);
    if (tpx__sysfs_line(path, buf, sizeof(buf)) != 0)
        return -1;
    /* "0-15,32-47": take the last number. */
    int last = -1;
    for (char *p = buf; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        last = (int)v;
        p = end;
    }
    return last;
}

static const char *gpu_why(int from)
{
    switch (from) {
    case TPX_GPU_FROM_PARAMS: return "set by the application";
    case TPX_GPU_FROM_MEMORY: return "of the first GPU memory registered";
    case TPX_GPU_FROM_CONTEXT: return "current when the engine was created";
    default: return "none: host memory only";
    }
}

static const char *nics_why(int from)
{
    switch (from) {
    case TPX_NICS_FROM_MAP: return "TPX_NIC_MAP";
    case TPX_NICS_FROM_PCI: return "nearest the GPU by PCI path";
    default: return "every NIC of the plugin";
    }
}

void tpx__topo_log(tpx_engine_t *e)
{
    char nics[256] = "";
    size_t at = 0;
    for (int i = 0; i < e->ndevs && at < sizeof(nics); i++) {
        tpx_net_props_t p;
        if (tpx__net_props(e->net, e->devs[i], &p) != TPX_OK)
            continue;
        int n = snprintf(nics + at, sizeof(nics) - at, "%s%s", at ? "," : "", p.name);
        at += n > 0 ? (size_t)n : 0;
    }
    TPX_INFO("engine %016llx: GPU %d (%s), NICs %s (%s)",
             (unsigned long long)tpx__ident_engine_id(e), e->gpu, gpu_why(e->gpu_from), nics,
             nics_why(e->nics_from));
}

void tpx__topo_gpu_because(tpx_engine_t *e, int from)
{
    e->gpu_from = from;
}

tpx_status_t tpx__topo_gpu_bind(tpx_engine_t *e, int gpu, int from)
{
    int old_gpu = e->gpu, old_from = e->gpu_from, old_nics_from = e->nics_from;
    int old_devs[TPX_MAX_CHANNELS], old_ndevs = e->ndevs;
    tpx_net_props_t old_props = e->props;
    memcpy(old_devs, e->devs, sizeof(old_devs));
    e->gpu = gpu;
    e->gpu_from = from;
    tpx_status_t st = tpx__topo_devs(e);
    if (st == TPX_OK)
        st = tpx__net_props(e->net, e->devs[0], &e->props);
    if (st != TPX_OK) {
        e->gpu = old_gpu;
        e->gpu_from = old_from;
        e->nics_from = old_nics_from;
        e->ndevs = old_ndevs;
        e->props = old_props;
        memcpy(e->devs, old_devs, sizeof(old_devs));
        return st;
    }
    tpx__topo_log(e);
    if (e->cfg.progress_numa && e->progress_started) {
        /* The progress thread follows the NICs to their NUMA node. */
        int cpu = tpx__topo_local_cpu(e);
        if (cpu >= 0 && cpu != e->progress_cpu) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            int rc = pthread_setaffinity_np(e->progress_tid, sizeof(set), &set);
            if (rc == 0)
                e->progress_cpu = cpu;
            else
                TPX_WARN("cannot pin the progress thread to CPU %d: %s", cpu, strerror(rc));
        }
    }
    return TPX_OK;
}
