/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_opts.c - the socket options of the transport's connections, for
 * whoever makes one (connect, accept, a rejoin): a file of its own so that
 * each of them can call it without calling the others.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>

#include "sock.h"

/* The same host (address, not port)? Sources are counted by host. */
int tpx__sock_same_host(const tpx_sock_addr_t *a, const tpx_sock_addr_t *b)
{
    if (a->sa.sa_family != b->sa.sa_family)
        return 0;
    if (a->sa.sa_family == AF_INET)
        return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
    return memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) == 0;
}

void tpx__sock_setopts(int fd, int data)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (data && tpx__sock_params.sock_buf > 0) {
        int sz = tpx__sock_params.sock_buf;
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    }
}

static int addr_is_loopback(const tpx_sock_addr_t *a)
{
    if (a->sa.sa_family == AF_INET)
        return (ntohl(a->sin.sin_addr.s_addr) >> 24) == 127;
    if (a->sa.sa_family != AF_INET6)
        return 0;
    const struct in6_addr *x = &a->sin6.sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(x) || (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
}

/* Whether connected socket fd joins two ends on this host: a loopback
 * peer, or the peer's address is the socket's own. */
static int ends_on_this_host(int fd)
{
    tpx_sock_addr_t a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    if (getsockname(fd, &a.sa, &la) != 0 || getpeername(fd, &b.sa, &lb) != 0)
        return 0;
    return addr_is_loopback(&b) || tpx__sock_same_host(&a, &b);
}

void tpx__sock_setopts_connected(int fd)
{
    if (tpx__sock_params.sock_buf < 0 && ends_on_this_host(fd)) {
        int sz = TPX_SOCK_LOCAL_SNDBUF;
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    }
}
