/*
 * sock_cuda.c - CUDA buffers in the built-in transport, through pinned
 * staging.
 *
 * Sockets cannot read or write device memory, so a piece of a CUDA buffer
 * travels through two pinned host blocks per data connection, pipelined:
 * while block k is being sent (received), block k+1 is being copied from
 * (to) the GPU on the connection's own stream. A helper waits on a CUDA
 * event only when the block it needs next is not ready yet; it is a helper
 * thread, so that wait blocks nobody else. A receive piece is published
 * only after its last host-to-device copy has finished.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "gpu/cuda.h"
#include "sock.h"

#define BLK (512u * 1024) /* staging block */

struct tpx_sock_cuda_chan {
    int dev;
    void *stage[2];
    CUstream stream;
    CUevent ev[2];
    int busy[2];         /* a copy was recorded on ev[b] and not waited for */
};

int tpx__sock_cuda_available(void)
{
    return tpx__cuda_init() == TPX_OK && tpx__cuda_device_count() > 0;
}

tpx_status_t tpx__sock_cuda_ptr_dev(const void *p, int *dev)
{
    return tpx__cuda_ptr_device(p, dev);
}

tpx_status_t tpx__sock_cuda_retain(int dev) { return tpx__cuda_ctx_retain(dev, NULL); }
void tpx__sock_cuda_release(int dev) { tpx__cuda_ctx_release(dev); }

static tpx_status_t cu_chan_get(tpx_sock_chan_t *ch, int dev, tpx_sock_cuda_chan_t **out)
{
    tpx_sock_cuda_chan_t *k = ch->cu;
    if (k != NULL && k->dev == dev) {
        *out = k;
        return TPX_OK;
    }
    if (k != NULL) /* a comm moving buffers of two GPUs: rare, re-make */
        tpx__sock_cuda_chan_free(ch);
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return TPX_ERR_NO_MEMORY;
    k->dev = dev;
    tpx_status_t st;
    TPX_CHECK_GOTO(tpx__cuda_ctx_retain(dev, NULL), st, err_free);
    for (int b = 0; b < 2; b++) {
        TPX_CHECK_GOTO(tpx__cuda_host_alloc(dev, BLK, &k->stage[b], NULL), st, err_chan);
        TPX_CHECK_GOTO(tpx__cuda_event_create(dev, 0, &k->ev[b]), st, err_chan);
    }
    TPX_CHECK_GOTO(tpx__cuda_stream_create(dev, &k->stream), st, err_chan);
    ch->cu = k;
    *out = k;
    return TPX_OK;
err_chan:
    ch->cu = k;
    tpx__sock_cuda_chan_free(ch);
    return st;
err_free:
    free(k);
    return st;
}

void tpx__sock_cuda_chan_free(tpx_sock_chan_t *ch)
{
    tpx_sock_cuda_chan_t *k = ch->cu;
    if (k == NULL)
        return;
    int pushed = 0;
    if (tpx__cuda_ctx_enter(k->dev, &pushed) == TPX_OK) {
        if (k->stream)
            (void)TPX_CU(cuStreamSynchronize, k->stream);
        for (int b = 0; b < 2; b++) {
            if (k->ev[b])
                tpx__cuda_event_destroy(k->dev, k->ev[b]);
            if (k->stage[b])
                tpx__cuda_host_free(k->dev, k->stage[b]);
        }
        if (k->stream)
            tpx__cuda_stream_destroy(k->dev, k->stream);
        tpx__cuda_ctx_leave(pushed);
        tpx__cuda_ctx_release(k->dev);
    }
    free(k);
    ch->cu = NULL;
}

/* Wait for the copy recorded on block b, if any. */
static tpx_status_t blk_wait(tpx_sock_cuda_chan_t *k, int b)
{
    if (!k->busy[b])
        return TPX_OK;
    k->busy[b] = 0;
    return tpx__cuda_event_sync(k->ev[b]);
}

/* Send side: the piece's payload [data_done, len) of a CUDA buffer.
 * Returns like chan_send's helpers: 1 progress, 0 would block, -1 error
 * (errno set for socket errors, 0 for CUDA errors). */
int tpx__sock_cuda_send(tpx_sock_chan_t *ch, int *progress)
{
    tpx_sock_cuda_chan_t *k;
    tpx_sock_req_t *r = ch->req;
    int pushed = 0;
    errno = 0;
    if (cu_chan_get(ch, r->cuda_dev, &k) != TPX_OK ||
        tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
        return -1;
    int rc = 0;
    uint32_t len = ch->piece.len;
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)(r->buf + ch->piece.offset);
    for (;;) {
        if (ch->data_done == len) {
            rc = 1;
            break;
        }
        uint32_t cur = ch->data_done / BLK;
        /* Keep the next block's copy in flight while this one is sent. */
        while (ch->copy_done < len && ch->copy_done / BLK <= cur + 1) {
            int b = (int)((ch->copy_done / BLK) & 1);
            uint32_t n = TPX_MIN(BLK, len - ch->copy_done);
            if (TPX_CU(cuMemcpyDtoHAsync, k->stage[b], src + ch->copy_done, n, k->stream) !=
                    TPX_OK ||
                tpx__cuda_event_record(k->ev[b], k->stream) != TPX_OK) {
                rc = -1;
                goto out;
            }
            k->busy[b] = 1;
            ch->copy_done += n;
        }
        int b = (int)(cur & 1);
        if (blk_wait(k, b) != TPX_OK) {
            rc = -1;
            goto out;
        }
        uint32_t blk_end = TPX_MIN((cur + 1) * BLK, len);
        ssize_t n = send(ch->fd, (char *)k->stage[b] + (ch->data_done - cur * BLK),
                         blk_end - ch->data_done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
            if (rc == 0)
                ch->want_write = 1;
            goto out;
        }
        *progress = 1;
        ch->want_write = 0;
        ch->data_done += (uint32_t)n;
    }
out:
    tpx__cuda_ctx_leave(pushed);
    return rc;
}

/* Strict TCPX with a GPU bounce buffer: the staged bytes [off, off + n) of
 * the piece go to the bounce pages the receive's layout names for them, one
 * host-to-device copy per fragment, as the NIC would have written them. */
static tpx_status_t bounce_copy(tpx_sock_cuda_chan_t *k, tpx_sock_chan_t *ch, uint32_t off,
                                const unsigned char *stage, uint32_t n)
{
    tpx_sock_comm_t *c = ch->req->comm;
    uint32_t slot = (uint32_t)(ch->piece.seq % (uint64_t)c->max_reqs);
    uint64_t msg_off = ch->piece.offset + off;
    while (n > 0) {
        struct iovec iov[64];
        int cnt = tpx__sock_tcpx_iov(c, slot, msg_off, n, c->bounce, iov, 64);
        if (cnt <= 0)
            return TPX_ERR_INTERNAL;
        for (int i = 0; i < cnt;) {
            /* one copy per run of fragments adjacent in the bounce buffer */
            char *dst = iov[i].iov_base;
            size_t len = iov[i].iov_len;
            for (i++; i < cnt && (char *)iov[i].iov_base == dst + len; i++)
                len += iov[i].iov_len;
            tpx_status_t st = TPX_CU(cuMemcpyHtoDAsync, (CUdeviceptr)(uintptr_t)dst, stage, len,
                                     k->stream);
            if (st != TPX_OK)
                return st;
            stage += len;
            msg_off += len;
            n -= (uint32_t)len;
        }
    }
    return TPX_OK;
}

/* Receive side: read the piece's payload into staging and copy it to the
 * GPU (a CUDA buffer, or the strict mode's GPU bounce buffer); same
 * return convention. The piece is complete (rc 1) only when its
 * last copy has finished. */
int tpx__sock_cuda_recv(tpx_sock_chan_t *ch, int *progress)
{
    tpx_sock_cuda_chan_t *k;
    tpx_sock_req_t *r = ch->req;
    tpx_sock_comm_t *c = r->comm;
    int pushed = 0;
    errno = 0;
    if (cu_chan_get(ch, r->bounce ? c->gpu : r->cuda_dev, &k) != TPX_OK ||
        tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
        return -1;
    int rc = 0;
    uint32_t len = ch->piece.len;
    CUdeviceptr dst = (CUdeviceptr)(uintptr_t)(r->buf + ch->piece.offset);
    for (;;) {
        if (ch->data_done == len) {
            rc = blk_wait(k, 0) == TPX_OK && blk_wait(k, 1) == TPX_OK ? 1 : -1;
            break;
        }
        uint32_t cur = ch->data_done / BLK;
        int b = (int)(cur & 1);
        if (ch->data_done == cur * BLK && blk_wait(k, b) != TPX_OK) { /* block reused */
            rc = -1;
            goto out;
        }
        uint32_t blk_end = TPX_MIN((cur + 1) * BLK, len);
        ssize_t n = recv(ch->fd, (char *)k->stage[b] + (ch->data_done - cur * BLK),
                         blk_end - ch->data_done, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
            goto out;
        }
        if (n == 0) {
            errno = ECONNRESET;
            rc = -1;
            goto out;
        }
        *progress = 1;
        ch->data_done += (uint32_t)n;
        if (ch->data_done == blk_end) {
            uint32_t n_blk = blk_end - cur * BLK;
            tpx_status_t st = r->bounce ? bounce_copy(k, ch, cur * BLK, k->stage[b], n_blk)
                                        : TPX_CU(cuMemcpyHtoDAsync, dst + cur * BLK,
                                                 k->stage[b], n_blk, k->stream);
            if (st != TPX_OK || tpx__cuda_event_record(k->ev[b], k->stream) != TPX_OK) {
                rc = -1;
                goto out;
            }
            k->busy[b] = 1;
        }
    }
out:
    tpx__cuda_ctx_leave(pushed);
    return rc;
}

/* Strict TCPX placement: on `dev`, whose primary context is retained once
 * per allocation. */
int tpx__sock_cuda_current_dev(void)
{
    int dev = tpx__cuda_ctx_current_device();
    return dev >= 0 ? dev : 0;
}

tpx_status_t tpx__sock_cuda_host_alloc(int dev, size_t len, void **out, void **dev_out)
{
    CUdeviceptr d = 0;
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK)
        return st;
    st = tpx__cuda_host_alloc(dev, len, out, &d);
    if (st != TPX_OK) {
        tpx__cuda_ctx_release(dev);
        return st;
    }
    memset(*out, 0, len);
    *dev_out = (void *)(uintptr_t)d;
    return TPX_OK;
}

void tpx__sock_cuda_host_free(int dev, void *p)
{
    if (p == NULL)
        return;
    tpx__cuda_host_free(dev, p);
    tpx__cuda_ctx_release(dev);
}

tpx_status_t tpx__sock_cuda_dev_alloc(int dev, size_t len, void **dptr, void **alloc)
{
    tpx__cuda_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK) {
        free(m);
        return st;
    }
    if ((st = tpx__cuda_mem_alloc(dev, len, m)) != TPX_OK) {
        tpx__cuda_ctx_release(dev);
        free(m);
        return st;
    }
    *dptr = (void *)(uintptr_t)m->ptr;
    *alloc = m;
    return TPX_OK;
}

void tpx__sock_cuda_dev_free(void *alloc)
{
    if (alloc == NULL)
        return;
    tpx__cuda_mem_t *m = alloc;
    int dev = m->dev;
    tpx__cuda_mem_free(m);
    free(m);
    tpx__cuda_ctx_release(dev);
}

tpx_status_t tpx__sock_cuda_htod(int dev, void *dptr, const void *src, size_t len)
{
    int pushed = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(dev, &pushed);
    if (st != TPX_OK)
        return st;
    st = TPX_CU(cuMemcpyHtoD, (CUdeviceptr)(uintptr_t)dptr, src, len);
    tpx__cuda_ctx_leave(pushed);
    return st;
}
