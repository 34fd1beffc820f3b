/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iflink.c - an interface's link state (see iflink.h).
 *
 * IFF_RUNNING is the kernel's operational state: cleared when the driver
 * reports no carrier (a cable or switch port gone, a NIC reset, a veth
 * whose peer is down) and when the interface is set down. A socket is
 * made per call rather than kept, so that a process's descriptor count
 * does not depend on whether a link was ever asked about.
 */
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/iflink.h"

int tpx__if_link(const char *ifname)
{
    struct ifreq ifr;
    if (ifname == NULL || ifname[0] == '\0' || strlen(ifname) >= sizeof(ifr.ifr_name))
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, ifname, strlen(ifname));
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    close(fd);
    if (rc != 0)
        return -1;
    return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING) ? 1 : 0;
}
