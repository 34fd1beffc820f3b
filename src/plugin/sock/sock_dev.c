/*
 * sock_dev.c - which interfaces the transport uses, and their properties.
 *
 * Devices are found once, at init: every interface that is up, has an
 * address of the chosen family and is selected by TPX_SOCKET_IFNAME
 * (default: all but loopback and docker/virtual bridges). Properties come
 * from sysfs; a link that reports no speed (lo, veth) gets
 * TPX_SOCKET_SPEED_MBPS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "sock.h"

static tpx_sock_dev_t sock_devs[TPX_SOCK_MAX_DEVS];
static int sock_ndevs;

static int sysfs_read_int(const char *ifname, const char *leaf, int *out)
{
    char path[PATH_MAX], buf[32];
    snprintf(path, sizeof(path), "/sys/class/net/%s/%s", ifname, leaf);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char *s = fgets(buf, sizeof(buf), f);
    fclose(f);
    if (s == NULL)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (errno != 0 || end == buf)
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
static void take_addrs(struct ifaddrs *ifa_list, const char *list, int family,
                       tpx_sock_dev_t *devs, int max, int *n)
{
    for (struct ifaddrs *ifa = ifa_list; ifa != NULL; ifa = ifa->ifa_next) {
        if (!(ifa->ifa_flags & IFF_UP) || !addr_usable(ifa->ifa_addr, family))
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
    int n = 0;
    if (family != AF_INET6)
        take_addrs(ifa_list, list, AF_INET, devs, max, &n);
    if (family != AF_INET)
        take_addrs(ifa_list, list, AF_INET6, devs, max, &n);
    freeifaddrs(ifa_list);

    qsort(devs, (size_t)n, sizeof(devs[0]), dev_cmp);
    int def_speed = (int)tpx__config_int(TPX_CFG_SOCKET_SPEED_MBPS);
    for (int i = 0; i < n; i++) {
        tpx_sock_dev_t *d = &devs[i];
        char path[PATH_MAX], real[PATH_MAX];
        snprintf(path, sizeof(path), "/sys/class/net/%s/device", d->name);
        d->pci_path = realpath(path, real) ? strdup(real) : NULL;
        if (sysfs_read_int(d->name, "speed", &d->speed_mbps) != 0 || d->speed_mbps <= 0)
            d->speed_mbps = def_speed;
        if (sysfs_read_int(d->name, "device/numa_node", &d->numa_node) != 0)
            d->numa_node = -1;
        char a[96];
        SOCK_INFO("device %d: %s %s speed %d Mb/s pci %s numa %d", i, d->name,
                  tpx__sock_addr_str(&d->addr, a, sizeof(a)), d->speed_mbps,
                  d->pci_path ? d->pci_path : "(none)", d->numa_node);
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

int tpx__sock_ndev(void) { return sock_ndevs; }

const tpx_sock_dev_t *tpx__sock_dev(int dev)
{
    if (dev < 0 || dev >= sock_ndevs)
        return NULL;
    return &sock_devs[dev];
}

tpx_status_t tpx__sock_dev_init(void)
{
    return tpx__sock_dev_discover(sock_devs, TPX_SOCK_MAX_DEVS, &sock_ndevs);
}
