/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_iov.c - a request's memory as the pieces a socket call takes.
 *
 * A request is one buffer (r->buf) or, for vectored messages, an array of
 * host pieces (r->iov) read until the request completes; every read, write
 * and copy of its bytes goes through these two functions.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/config.h"
#include "sock.h"
#include "sock_io.h"

/* The stretch [off, off + len) of r's message as pieces of its memory, into
 * out[0..max): their number (fewer than the stretch needs when max is
 * reached). `at` (NULL: none) resumes the walk where the connection's last
 * stretch of the same message started, and is moved to this one's start. */
int tpx__sock_req_iov(const tpx_sock_req_t *r, uint64_t off, uint64_t len, struct iovec *out,
                      int max, tpx_sock_iov_at_t *at)
{
    if (r->iov == NULL) {
        out[0] = (struct iovec){r->buf + off, (size_t)len};
        return 1;
    }
    int i = 0;
    uint64_t base = 0; /* the message's byte where r->iov[i] starts */
    uint64_t seq = at != NULL ? atomic_load_explicit(&r->seq, memory_order_relaxed) : 0;
    if (at != NULL && at->r == r && at->seq == seq && at->iov == r->iov && at->base <= off) {
        i = at->i;
        base = at->base;
    }
    for (; i < r->iovcnt && base + r->iov[i].iov_len <= off; i++)
        base += r->iov[i].iov_len;
    if (at != NULL)
        *at = (tpx_sock_iov_at_t){.r = r, .seq = seq, .iov = r->iov, .i = i, .base = base};
    int n = 0;
    off -= base;
    for (; i < r->iovcnt && len > 0 && n < max; i++) {
        uint64_t take = TPX_MIN(r->iov[i].iov_len - off, len);
        out[n++] = (struct iovec){(char *)r->iov[i].iov_base + off, (size_t)take};
        len -= take;
        off = 0;
    }
    return n;
}

/* Copy len bytes to the start of r's message (an eager delivery). */
void tpx__sock_req_copy_in(const tpx_sock_req_t *r, const unsigned char *src, uint64_t len)
{
    if (r->iov == NULL) {
        memcpy(r->buf, src, len);
        return;
    }
    for (int i = 0; i < r->iovcnt && len > 0; i++) {
        size_t take = (size_t)TPX_MIN((uint64_t)r->iov[i].iov_len, len);
        memcpy(r->iov[i].iov_base, src, take);
        src += take;
        len -= take;
    }
}
