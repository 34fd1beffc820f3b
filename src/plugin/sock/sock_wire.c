/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_wire.c - encoding and checked decoding of the transport's wire data.
 */
#include "sock_wire.h"

#include "common/bytes.h"

#include <arpa/inet.h>
#include <endian.h>
#include <stdio.h>
#include <string.h>


/* One address: family-specific bytes at `addr_at`, scope at `scope_at`. */
static void put_addr(unsigned char *p, const tpx_sock_addr_t *a, int port_at, int addr_at,
                     int scope_at)
{
    if (a->sa.sa_family == AF_INET6) {
        tpx__put16(p + port_at, ntohs(a->sin6.sin6_port));
        memcpy(p + addr_at, &a->sin6.sin6_addr, 16);
        tpx__put32(p + scope_at, a->sin6.sin6_scope_id);
    } else {
        tpx__put16(p + port_at, ntohs(a->sin.sin_port));
        memcpy(p + addr_at, &a->sin.sin_addr, 4);
    }
}

static int get_addr(const unsigned char *p, uint16_t fam, tpx_sock_addr_t *a, int port_at,
                    int addr_at, int scope_at)
{
    uint16_t port = tpx__get16(p + port_at);
    memset(a, 0, sizeof(*a));
    if (port == 0)
        return -1;
    if (fam == 4) {
        a->sin.sin_family = AF_INET;
        a->sin.sin_port = htons(port);
        memcpy(&a->sin.sin_addr, p + addr_at, 4);
    } else if (fam == 6) {
        a->sin6.sin6_family = AF_INET6;
        a->sin6.sin6_port = htons(port);
        memcpy(&a->sin6.sin6_addr, p + addr_at, 16);
        a->sin6.sin6_scope_id = tpx__get32(p + scope_at);
    } else {
        return -1;
    }
    return 0;
}

void tpx__sock_handle_encode(const tpx_sock_handle_t *h, void *buf128)
{
    unsigned char *p = buf128;
    memset(p, 0, TPX_SOCK_HANDLE_SIZE);
    int n = h->naddrs < 1 ? 1 : h->naddrs > TPX_SOCK_HANDLE_MAX_ADDRS ? TPX_SOCK_HANDLE_MAX_ADDRS
                                                                      : h->naddrs;
    tpx__put32(p + 0, TPX_SOCK_HANDLE_MAGIC);
    tpx__put16(p + 4, TPX_SOCK_WIRE_VERSION);
    tpx__put16(p + 6, h->addr.sa.sa_family == AF_INET6 ? 6 : 4);
    put_addr(p, &h->addr, 8, 12, 28);
    tpx__put16(p + 10, (uint16_t)n);
    tpx__put64(p + 32, h->nonce);
    for (int i = 1; i < n; i++) {
        int o = TPX_SOCK_HANDLE_MORE_OFF + (i - 1) * TPX_SOCK_HANDLE_MORE_SIZE;
        put_addr(p, &h->more[i - 1], o, o + 8, o + 4);
    }
    tpx__put32(p + 112, h->caps);
}

tpx_status_t tpx__sock_handle_decode(const void *buf128, tpx_sock_handle_t *out)
{
    const unsigned char *p = buf128;
    if (tpx__get32(p) != TPX_SOCK_HANDLE_MAGIC || tpx__get16(p + 4) != TPX_SOCK_WIRE_VERSION)
        return TPX_ERR_INVALID_ARG;
    tpx_sock_handle_t h;
    memset(&h, 0, sizeof(h));
    uint16_t fam = tpx__get16(p + 6), n = tpx__get16(p + 10);
    if (n == 0)
        n = 1;
    if (n > TPX_SOCK_HANDLE_MAX_ADDRS || get_addr(p, fam, &h.addr, 8, 12, 28) != 0)
        return TPX_ERR_INVALID_ARG;
    for (int i = 1; i < n; i++) {
        int o = TPX_SOCK_HANDLE_MORE_OFF + (i - 1) * TPX_SOCK_HANDLE_MORE_SIZE;
        if (tpx__get16(p + o + 2) != 0 || get_addr(p, fam, &h.more[i - 1], o, o + 8, o + 4) != 0)
            return TPX_ERR_INVALID_ARG;
    }
    h.naddrs = n;
    h.nonce = tpx__get64(p + 32);
    h.caps = tpx__get32(p + 112); /* unknown bits: a newer listener's, ignored */
    *out = h;
    return TPX_OK;
}

void tpx__sock_hello_encode(const tpx_sock_hello_t *h, void *buf)
{
    unsigned char *p = buf;
    tpx__put32(p + 0, TPX_SOCK_HELLO_MAGIC);
    tpx__put16(p + 4, TPX_SOCK_WIRE_VERSION);
    tpx__put16(p + 6, h->kind);
    tpx__put16(p + 8, h->index);
    tpx__put16(p + 10, h->nsocks);
    tpx__put16(p + 12, h->flags);
    tpx__put16(p + 14, h->missing);
    tpx__put64(p + 16, h->nonce);
    tpx__put64(p + 24, h->conn_id);
}

tpx_status_t tpx__sock_hello_decode(const void *buf, tpx_sock_hello_t *out)
{
    const unsigned char *p = buf;
    if (tpx__get32(p) != TPX_SOCK_HELLO_MAGIC || tpx__get16(p + 4) != TPX_SOCK_WIRE_VERSION)
        return TPX_ERR_PROTOCOL;
    tpx_sock_hello_t h = {
        .kind = tpx__get16(p + 6),
        .index = tpx__get16(p + 8),
        .nsocks = tpx__get16(p + 10),
        .flags = tpx__get16(p + 12),
        .missing = tpx__get16(p + 14),
        .nonce = tpx__get64(p + 16),
        .conn_id = tpx__get64(p + 24),
    };
    const uint16_t both = TPX_SOCK_HELLO_ACKS | TPX_SOCK_HELLO_REJOIN;
    if (h.kind != TPX_SOCK_HELLO_CTRL && h.kind != TPX_SOCK_HELLO_DATA &&
        h.kind != TPX_SOCK_HELLO_REJOIN_DATA)
        return TPX_ERR_PROTOCOL;
    if (h.nsocks < 1 || h.nsocks > TPX_SOCK_MAX_SOCKS || h.index >= h.nsocks ||
        (h.flags & ~(both | TPX_SOCK_HELLO_TELL)) != 0)
        return TPX_ERR_PROTOCOL;
    /* Rejoins and tells are part of failing over; they name a comm that does. */
    if ((h.flags & (TPX_SOCK_HELLO_REJOIN | TPX_SOCK_HELLO_TELL)) &&
        !(h.flags & TPX_SOCK_HELLO_ACKS))
        return TPX_ERR_PROTOCOL;
    if (h.kind == TPX_SOCK_HELLO_REJOIN_DATA && h.flags != both)
        return TPX_ERR_PROTOCOL;
    /* A comm may start without some data connections only if they can
     * join later, and with at least one. */
    if (h.missing != 0 &&
        (h.kind != TPX_SOCK_HELLO_CTRL || (h.flags & both) != both ||
         h.missing >= (1u << h.nsocks) || h.missing == (1u << h.nsocks) - 1))
        return TPX_ERR_PROTOCOL;
    *out = h;
    return TPX_OK;
}

void tpx__sock_piece_encode(const tpx_sock_piece_t *pc, void *buf)
{
    unsigned char *p = buf;
    tpx__put32(p + 0, TPX_SOCK_PIECE_MAGIC);
    tpx__put32(p + 4, pc->tag);
    tpx__put32(p + 8, pc->len);
    tpx__put32(p + 12, 0);
    tpx__put64(p + 16, pc->seq);
    tpx__put64(p + 24, pc->total);
    tpx__put64(p + 32, pc->offset);
}

tpx_status_t tpx__sock_piece_decode(const void *buf, tpx_sock_piece_t *out)
{
    const unsigned char *p = buf;
    if (tpx__get32(p) != TPX_SOCK_PIECE_MAGIC || tpx__get32(p + 12) != 0)
        return TPX_ERR_PROTOCOL;
    tpx_sock_piece_t pc = {
        .tag = tpx__get32(p + 4),
        .len = tpx__get32(p + 8),
        .seq = tpx__get64(p + 16),
        .total = tpx__get64(p + 24),
        .offset = tpx__get64(p + 32),
    };
    if (pc.offset > pc.total || pc.len > pc.total - pc.offset || pc.len > TPX_SOCK_PIECE_MAX)
        return TPX_ERR_PROTOCOL;
    if (pc.len == 0 && pc.total != 0)
        return TPX_ERR_PROTOCOL;
    *out = pc;
    return TPX_OK;
}

socklen_t tpx__sock_addr_len(const tpx_sock_addr_t *a)
{
    return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *tpx__sock_addr_str(const tpx_sock_addr_t *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (a->sa.sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &a->sin6.sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, ntohs(a->sin6.sin6_port));
    } else {
        inet_ntop(AF_INET, &a->sin.sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, ntohs(a->sin.sin_port));
    }
    return buf;
}
