/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_dev.c - which interfaces the transport uses, and their properties.
 *
 * Devices are found once, at init: every interface that has an address of
 * the chosen family and is selected by TPX_SOCKET_IFNAME (default: all but
 * loopback and docker/virtual bridges). Properties come from sysfs; a link
 * that reports no speed (lo, veth, a NIC that is down) gets
 * TPX_SOCKET_SPEED_MBPS.
 *
 * An interface administratively down (not IFF_UP) is a device too, as one
 * up without carrier is, wherever a comm can start without one of its
 * NICs (comms that fail over: TPX_SOCK_FAILOVER not 0, not strict TCPX).
 * Members of virtual devices pair with the peer's by index (sock_conn.c),
 * so a NIC dropped from one side's list would shift every later member:
 * its connections would go to the peer's next NIC, routed from the wrong
 * address, for the life of the process. Kept, its address stays assigned
 * (Linux keeps IPv4 addresses and their local routes on a NIC that is down),
 * so a listener binds and listens on it as on any member; only its subnet's
 * routes are gone, so a connect over it fails at once (unreachable) and the
 * comm starts without that connection (sock_conn.c, "Members down at
 * connect"); once the NIC is up the rejoin thread makes it (sock_rejoin.c).
 * Elsewhere (strict TCPX, TPX_SOCK_FAILOVER=0) such a NIC could only fail
 * every connect over it, and stays out; so it does in libnccl-net-tpx.so,
 * whose caller, NCCL, picks a NIC per GPU and fuses none. A NIC with no
 * address at all (IPv6 addresses are dropped when a NIC goes down, unless
 * keep_addr_on_down) has nothing to bind or to name in a handle: it is no
 * device.
 *
 * Virtual devices (makeVDevice) are appended after the physical ones under
 * a lock and published by one atomic store of the count, so readers never
 * lock and never see a half-written entry.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/sysfs.h"
#include "sock.h"

static tpx_sock_dev_t sock_devs[TPX_SOCK_MAX_DEVS];
static int sock_nphys;         /* set once at init */
static _Atomic int sock_ndevs; /* physical + virtual, published last */
static pthread_mutex_t vdev_lock = PTHREAD_MUTEX_INITIALIZER;

static int sysfs_read_int(const char *ifname, const char *leaf, int *out)
{
    char path[PATH_MAX];
    long v;
    snprintf(path, sizeof(path), "%s/class/net/%s/%s", tpx__sysfs_root(), ifname, leaf);
    if (tpx__sysfs_int(path, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

static int addr_usable(const struct sockaddr *sa, int family)
{
    if (sa == NULL)
        return 0;
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return 0;
    if (family != 0 && sa->sa_family != family)
        return 0;
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
        if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr))
            return 0;
    }
    return 1;
}

static int dev_cmp(const void *a, const void *b)
{
    unsigned ia = if_nametoindex(((const tpx_sock_dev_t *)a)->name);
    unsigned ib = if_nametoindex(((const tpx_sock_dev_t *)b)->name);
    return ia < ib ? -1 : ia > ib;
}

/* Pass 1 takes IPv4 addresses (unless IPv6 is forced), pass 2 IPv6, so an
 * interface with both is used over IPv4. */
/* Defined by the NCCL plugin's own file (sock_export.c) only: hidden, so a
 * libtpx in the same process never sees it. */
extern const int tpx__sock_nccl_build __attribute__((weak));

static void take_addrs(struct ifaddrs *ifa_list, const char *list, int family, int keep_down,
                       tpx_sock_dev_t *devs, int max, int *n)
{
    for (struct ifaddrs *ifa = ifa_list; ifa != NULL; ifa = ifa->ifa_next) {
        if ((!keep_down && !(ifa->ifa_flags & IFF_UP)) || !addr_usable(ifa->ifa_addr, family))
            continue;
        if (!tpx__sock_ifname_match(list, ifa->ifa_name))
            continue;
        if (strlen(ifa->ifa_name) >= sizeof(devs[0].name))
            continue;
        int dup = 0;
        for (int i = 0; i < *n; i++)
            dup |= strcmp(devs[i].name, ifa->ifa_name) == 0;
        if (dup || *n >= max)
            continue;
        tpx_sock_dev_t *d = &devs[(*n)++];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "%s", ifa->ifa_name);
        d->down_at_init = !(ifa->ifa_flags & IFF_UP);
        memcpy(&d->addr, ifa->ifa_addr,
               ifa->ifa_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                    : sizeof(struct sockaddr_in));
    }
}

tpx_status_t tpx__sock_dev_discover(tpx_sock_dev_t *devs, int max, int *ndev)
{
    const char *list = tpx__config_str(TPX_CFG_SOCKET_IFNAME);
    const char *fam_s = tpx__config_str(TPX_CFG_SOCKET_FAMILY);
    int family = 0;
    if (strcmp(fam_s, "4") == 0 || strcmp(fam_s, "AF_INET") == 0)
        family = AF_INET;
    else if (strcmp(fam_s, "6") == 0 || strcmp(fam_s, "AF_INET6") == 0)
        family = AF_INET6;
    else if (fam_s[0] != '\0') {
        SOCK_WARN("TPX_SOCKET_FAMILY=%s is not valid: expected 4 or 6", fam_s);
        return TPX_ERR_CONFIG;
    }
    int user_list = list[0] != '\0';
    if (!user_list)
        list = "^docker,virbr,lo";

    struct ifaddrs *ifa_list;
    if (getifaddrs(&ifa_list) != 0) {
        SOCK_WARN("getifaddrs failed: %s", strerror(errno));
        return tpx__status_from_errno(errno);
    }
    /* A NIC that is down is kept where comms can start without it (see the
     * top), and where a caller fuses NICs: in libtpx, for the engine's
     * virtual devices. NCCL, the caller of libnccl-net-tpx.so, picks each
     * GPU's NIC by itself; a NIC it cannot reach would fail its connects
     * where, left out, another NIC serves. */
    int keep_down = !tpx__sock_params.tcpx && tpx__sock_params.failover != 0 &&
                    &tpx__sock_nccl_build == NULL;
    int n = 0;
    if (family != AF_INET6)
        take_addrs(ifa_list, list, AF_INET, keep_down, devs, max, &n);
    if (family != AF_INET)
        take_addrs(ifa_list, list, AF_INET6, keep_down, devs, max, &n);
    freeifaddrs(ifa_list);

    qsort(devs, (size_t)n, sizeof(devs[0]), dev_cmp);
    int def_speed = (int)tpx__config_int(TPX_CFG_SOCKET_SPEED_MBPS);
    for (int i = 0; i < n; i++) {
        tpx_sock_dev_t *d = &devs[i];
        char path[PATH_MAX], real[PATH_MAX];
        snprintf(path, sizeof(path), "%s/class/net/%s/device", tpx__sysfs_root(), d->name);
        d->pci_path = realpath(path, real) ? strdup(real) : NULL;
        if (sysfs_read_int(d->name, "speed", &d->speed_mbps) != 0 || d->speed_mbps <= 0)
            d->speed_mbps = def_speed;
        if (sysfs_read_int(d->name, "device/numa_node", &d->numa_node) != 0)
            d->numa_node = -1;
        d->nmembers = 1;
        d->members[0] = i;
        char a[96];
        SOCK_INFO("device %d: %s %s speed %d Mb/s pci %s numa %d%s", i, d->name,
                  tpx__sock_addr_str(&d->addr, a, sizeof(a)), d->speed_mbps,
                  d->pci_path ? d->pci_path : "(none)", d->numa_node,
                  d->down_at_init ? " (administratively down)" : "");
        if (d->down_at_init)
            SOCK_WARN("%s (%s) is administratively down: it stays a device, its connections "
                      "start without it and join once it is up",
                      d->name, a);
    }
    if (n == 0) {
        SOCK_WARN("no usable network interface (TPX_SOCKET_IFNAME=%s%s); name one, e.g. "
                  "TPX_SOCKET_IFNAME=eth0, or =lo for loopback",
                  user_list ? list : "", user_list ? "" : "unset: all but lo/docker/virbr");
        return TPX_ERR_NO_DEVICE;
    }
    *ndev = n;
    return TPX_OK;
}

int tpx__sock_ndev(void) { return atomic_load_explicit(&sock_ndevs, memory_order_acquire); }

int tpx__sock_nphys(void) { return sock_nphys; }

const tpx_sock_dev_t *tpx__sock_dev(int dev)
{
    if (dev < 0 || dev >= tpx__sock_ndev())
        return NULL;
    return &sock_devs[dev];
}

int tpx__sock_dev_of_fd(int fd)
{
    tpx_sock_addr_t a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    if (fd < 0 || getsockname(fd, &a.sa, &len) != 0)
        return -1;
    for (int i = 0; i < sock_nphys; i++) {
        const tpx_sock_addr_t *d = &sock_devs[i].addr;
        if (d->sa.sa_family != a.sa.sa_family)
            continue;
        if (a.sa.sa_family == AF_INET && d->sin.sin_addr.s_addr == a.sin.sin_addr.s_addr)
            return i;
        if (a.sa.sa_family == AF_INET6 &&
            memcmp(&d->sin6.sin6_addr, &a.sin6.sin6_addr, sizeof(a.sin6.sin6_addr)) == 0)
            return i;
    }
    return -1;
}

tpx_status_t tpx__sock_dev_init(void)
{
    int n = 0;
    tpx_status_t st = tpx__sock_dev_discover(sock_devs, TPX_SOCK_MAX_DEVS, &n);
    if (st == TPX_OK) {
        sock_nphys = n;
        atomic_store_explicit(&sock_ndevs, n, memory_order_release);
    }
    return st;
}

/* Check a member list; says why it is refused. */
static tpx_status_t vdev_check(const tpx_ncclnet_vdev_props_t *props)
{
    if (props->ndevs < 1 || props->ndevs > TPX_SOCK_MAX_MEMBERS) {
        SOCK_WARN("makeVDevice: %d devices; a virtual device fuses 1 to %d physical devices",
                  props->ndevs, TPX_SOCK_MAX_MEMBERS);
        return TPX_ERR_INVALID_ARG;
    }
    for (int i = 0; i < props->ndevs; i++) {
        int d = props->devs[i];
        if (d < 0 || d >= sock_nphys) {
            SOCK_WARN("makeVDevice: member %d is device %d, not a physical device (0..%d)", i,
                      d, sock_nphys - 1);
            return TPX_ERR_INVALID_ARG;
        }
        for (int j = 0; j < i; j++) {
            if (props->devs[j] == d) {
                SOCK_WARN("makeVDevice: device %d (%s) is named twice", d, sock_devs[d].name);
                return TPX_ERR_INVALID_ARG;
            }
        }
        if (sock_devs[d].addr.sa.sa_family != sock_devs[props->devs[0]].addr.sa.sa_family) {
            SOCK_WARN("makeVDevice: %s and %s use different address families; a virtual device "
                      "needs one (TPX_SOCKET_FAMILY)", sock_devs[props->devs[0]].name,
                      sock_devs[d].name);
            return TPX_ERR_INVALID_ARG;
        }
    }
    return TPX_OK;
}

tpx_status_t tpx__sock_dev_make_virtual(const tpx_ncclnet_vdev_props_t *props, int *dev)
{
    if (props == NULL || dev == NULL) {
        SOCK_WARN("makeVDevice: NULL %s", props == NULL ? "properties" : "device pointer");
        return TPX_ERR_INVALID_ARG;
    }
    if (tpx__sock_params.tcpx) {
        SOCK_WARN("makeVDevice: strict TCPX mode (TPX_SOCK_TCPX=1) has no virtual devices: "
                  "Google's TCPX plugin is ncclNet v7, which has none");
        return TPX_ERR_UNSUPPORTED;
    }
    tpx_status_t st = vdev_check(props);
    if (st != TPX_OK)
        return st;
    pthread_mutex_lock(&vdev_lock);
    int n = tpx__sock_ndev();
    for (int v = sock_nphys; v < n; v++) {
        const tpx_sock_dev_t *e = &sock_devs[v];
        if (e->nmembers == props->ndevs &&
            memcmp(e->members, props->devs, sizeof(int) * (size_t)props->ndevs) == 0) {
            pthread_mutex_unlock(&vdev_lock);
            *dev = v;
            return TPX_OK;
        }
    }
    if (n == TPX_SOCK_MAX_DEVS) {
        pthread_mutex_unlock(&vdev_lock);
        SOCK_WARN("makeVDevice: the device table is full (%d devices)", TPX_SOCK_MAX_DEVS);
        return TPX_ERR_NO_RESOURCE;
    }
    const tpx_sock_dev_t *first = &sock_devs[props->devs[0]];
    tpx_sock_dev_t v = {.addr = first->addr,
                        .pci_path = first->pci_path,
                        .numa_node = first->numa_node,
                        .nmembers = props->ndevs};
    size_t off = 0;
    for (int i = 0; i < props->ndevs; i++) {
        const tpx_sock_dev_t *m = &sock_devs[props->devs[i]];
        v.members[i] = props->devs[i];
        v.speed_mbps += m->speed_mbps;
        int k = snprintf(v.name + off, sizeof(v.name) - off, "%s%s", i ? "+" : "", m->name);
        off = TPX_MIN(off + (size_t)(k > 0 ? k : 0), sizeof(v.name) - 1);
    }
    sock_devs[n] = v;
    atomic_store_explicit(&sock_ndevs, n + 1, memory_order_release);
    pthread_mutex_unlock(&vdev_lock);
    SOCK_INFO("device %d: virtual, %s, %d Mb/s", n, v.name, v.speed_mbps);
    *dev = n;
    return TPX_OK;
}
