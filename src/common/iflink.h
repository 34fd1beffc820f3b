/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iflink.h - whether a network interface can carry packets right now
 * (administratively up and with carrier), asked of the kernel: shared by
 * the transport (a data connection whose NIC lost its link) and the engine
 * (a channel whose NIC did).
 */
#ifndef TPX_COMMON_IFLINK_H
#define TPX_COMMON_IFLINK_H

/* 1: `ifname` of this network namespace is up and has carrier (IFF_UP and
 * IFF_RUNNING); 0: it is down or has no carrier; -1: unknown (no such
 * interface, the name too long, the kernel refused). One ioctl on a
 * socket made for it (about 5 us): for looks a few times a second at a
 * connection that stopped moving, never on a data path. */
int tpx__if_link(const char *ifname);

#endif
