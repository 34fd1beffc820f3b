/*
 * sock_cuda.c - CUDA buffers in the built-in transport, through pinned
 * staging.
 *
 * Sockets cannot read or write device memory, so a piece of a CUDA buffer
 * travels through a ring of TPX_SOCK_CUDA_SLOTS pinned host blocks per
 * data connection (TPX_SOCK_CUDA_BLOCK bytes each, 4 x 512 KiB by default:
 * 2 MiB per connection that has moved CUDA memory, made on first use and
 * freed with its comm), pipelined on the connection's own stream: a piece
 * is cut into blocks of half the piece (64 KiB to one slot), so that even a
 * 256 KiB piece overlaps its copies with the socket, at two driver calls
 * (copy, event) per block. Large copies matter more than many in flight:
 * with a loopback run's copies to and from the GPU at once, its copy
 * engines move 28 GB/s each way in 256 KiB copies, 37 in 512 KiB ones
 * (bench/gpu/copy_probe.cu), and 512 KiB x 4 moved 256 MiB transfers 1.3x
 * faster than 256 KiB x 8 (README, tenth session).
 *
 * The I/O worker never waits for CUDA. Each block's copy is followed on its
 * stream by a mark: an event, queried; or, with TPX_SOCK_CUDA_WORD=1 where
 * the driver and GPU have stream memory operations, a write of the block's
 * number + 1 into a word of host-mapped memory, which the worker loads to
 * learn what has finished, with no driver call (querying events took 10-13%
 * of a 16-core host's CPU at 1 MiB transfers, but the words measured no
 * faster overall: see the README).
 * A connection whose next block is not copied yet (send) or whose next
 * slot still feeds a copy to the GPU (receive) returns SOCK_CUDA_WAIT, and
 * its worker looks at it again soon (sock_io.c: behind its other
 * connections, then with a short, growing sleep) while it serves the rest.
 *
 * Receive: a piece is published only after its last host-to-device copy
 * has finished, but the connection does not wait for that: the finished
 * piece goes on a small queue (at most one entry per slot: each holds a
 * block not known complete) and the connection reads the next piece while
 * the copies run; tpx__sock_cuda_reap publishes what completed, in order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "gpu/cuda.h"
#include "sock.h"

/* Slots: a block's copy waits behind the other connections' copies on the
 * GPU's copy engine (tens to hundreds of microseconds with 16 connections
 * each way), so a ring needs room for more than one piece: with 4 x 256 KiB
 * a receiver ran out of free slots (trace: cu-wait) and 256 MiB moved at
 * 0.74x host memory, 8 x 256 KiB 0.85x; 4 x 512 KiB (two 1 MiB pieces)
 * 1.05x, 2 x 512 KiB 0.87x, 8 x 512 KiB no better than 4 (16-core H200). */
#define SOCK_CUDA_MAX_SLOTS 16 /* TPX_SOCK_CUDA_SLOTS' upper bound */
#define SOCK_CUDA_MIN_BLOCK (64u * 1024)

/* A received piece whose copies to the GPU are in flight. */
typedef struct {
    tpx_sock_req_t *req;
    uint32_t len;
    uint64_t total;
    uint64_t last; /* its last block: published once blk_done > last */
} cu_pending_t;

struct tpx_sock_cuda_chan {
    int dev;
    uint32_t slot_bytes; /* TPX_SOCK_CUDA_BLOCK when it was made */
    uint32_t nslots;     /* TPX_SOCK_CUDA_SLOTS when it was made */
    void *stage[SOCK_CUDA_MAX_SLOTS];
    CUstream stream;
    CUevent ev[SOCK_CUDA_MAX_SLOTS];
    /* send: a copy was recorded on ev[s] and not yet seen complete */
    int busy[SOCK_CUDA_MAX_SLOTS];
    /* send: blocks numbered ever (a piece's take the next ones when its
     * first copy is queued); block g uses slot g % nslots */
    uint64_t blk_issued;
    /* receive: blocks whose copy was queued / is known complete, ever; the
     * block being filled uses slot blk_next % nslots, free while
     * blk_next - blk_done < nslots (events complete in stream order) */
    uint64_t blk_next, blk_done;
    /* at most nslots entries (each holds a block not known complete; an
     * empty piece completes when its header is read, sock_io.c
     * chan_attach); indexed % SOCK_CUDA_MAX_SLOTS, a power of two, so the
     * uint32 counters may wrap */
    cu_pending_t pend[SOCK_CUDA_MAX_SLOTS];
    uint32_t pend_head, pend_tail;
    /* The completion word (NULL: events mark the copies): block b's mark
     * writes b + 1, in stream order, so it holds the blocks done, ever. */
    uint64_t *word;
    CUdeviceptr word_dev;
    uint64_t slot_blk[SOCK_CUDA_MAX_SLOTS]; /* send: the block whose copy fills slot s */
};

/* Mark block `blk`, whose copy (into or out of slot s) was just queued. */
static tpx_status_t copy_mark(tpx_sock_cuda_chan_t *k, int s, uint64_t blk)
{
    if (k->word == NULL)
        return tpx__cuda_event_record(k->ev[s], k->stream);
    k->slot_blk[s] = blk;
    return tpx__cuda_stream_write_value(k->stream, k->word_dev, blk + 1);
}

/* Blocks whose copies have finished, ever (word mode). */
static uint64_t word_done(const tpx_sock_cuda_chan_t *k)
{
    return __atomic_load_n(k->word, __ATOMIC_ACQUIRE);
}

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

/* The block size of a piece of `len` bytes. */
static uint32_t piece_block(const tpx_sock_cuda_chan_t *k, uint32_t len)
{
    uint32_t b = (len / 2 + 4095u) & ~4095u;
    return TPX_MIN(TPX_MAX(b, SOCK_CUDA_MIN_BLOCK), k->slot_bytes);
}

static int reap(tpx_sock_cuda_chan_t *k, int *progress);

static tpx_status_t cu_chan_get(tpx_sock_chan_t *ch, int dev, tpx_sock_cuda_chan_t **out)
{
    tpx_sock_cuda_chan_t *k = ch->cu;
    if (k != NULL && k->dev == dev) {
        *out = k;
        return TPX_OK;
    }
    if (k != NULL) { /* a comm moving buffers of two GPUs: rare, re-make */
        int pushed = 0, prog = 0;
        if (k->pend_head != k->pend_tail) { /* finish and publish what the old one holds */
            if (tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
                return TPX_ERR_CUDA;
            tpx_status_t st = TPX_CU(cuStreamSynchronize, k->stream);
            int left = st == TPX_OK ? reap(k, &prog) : -1;
            tpx__cuda_ctx_leave(pushed);
            if (left != 0)
                return TPX_ERR_CUDA;
        }
        tpx__sock_cuda_chan_free(ch);
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return TPX_ERR_NO_MEMORY;
    k->dev = dev;
    k->slot_bytes = tpx__sock_params.cuda_block;
    k->nslots = (uint32_t)TPX_MIN(TPX_MAX(tpx__sock_params.cuda_slots, 2), SOCK_CUDA_MAX_SLOTS);
    tpx_status_t st;
    TPX_CHECK_GOTO(tpx__cuda_ctx_retain(dev, NULL), st, err_free);
    for (uint32_t b = 0; b < k->nslots; b++) {
        TPX_CHECK_GOTO(tpx__cuda_host_alloc(dev, k->slot_bytes, &k->stage[b], NULL), st,
                       err_chan);
        TPX_CHECK_GOTO(tpx__cuda_event_create(dev, 0, &k->ev[b]), st, err_chan);
    }
    TPX_CHECK_GOTO(tpx__cuda_stream_create(dev, &k->stream), st, err_chan);
    if (tpx__sock_params.cuda_word && tpx__cuda_can_write_value(dev)) {
        void *w = NULL;
        TPX_CHECK_GOTO(tpx__cuda_host_alloc(dev, 64, &w, &k->word_dev), st, err_chan);
        k->word = w;
        __atomic_store_n(k->word, 0, __ATOMIC_RELEASE);
    }
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
        if (k->word)
            tpx__cuda_host_free(k->dev, k->word);
        for (uint32_t b = 0; b < k->nslots; b++) {
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

/* Send side: has the copy into slot s finished? 1 yes, 0 not yet, -1 error. */
static int slot_ready(tpx_sock_cuda_chan_t *k, int s)
{
    if (!k->busy[s])
        return 1;
    if (k->word != NULL) {
        if (word_done(k) <= k->slot_blk[s])
            return 0;
        k->busy[s] = 0;
        return 1;
    }
    tpx_status_t st = tpx__cuda_event_query(k->ev[s]);
    if (st == TPX_INPROGRESS)
        return 0;
    if (st != TPX_OK)
        return -1;
    k->busy[s] = 0;
    return 1;
}

/* Send side: queue the copies of a piece's blocks from *copied on, each
 * into its slot, while the block is below `limit` (the slot's previous
 * block is written out). blk0: the piece's first block, numbered when its
 * first copy goes (the copy of block 0 always does once numbered). */
static int send_issue(tpx_sock_cuda_chan_t *k, const tpx_sock_req_t *r, const tpx_sock_piece_t *p,
                      uint64_t *blk0, uint32_t *copied, uint64_t limit)
{
    uint32_t bl = piece_block(k, p->len);
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)(r->buf + p->offset);
    if (*copied == 0 && p->len > 0) {
        if (k->blk_issued >= limit)
            return 0;
        *blk0 = k->blk_issued;
        k->blk_issued += (p->len + bl - 1) / bl;
    }
    while (*copied < p->len && *blk0 + *copied / bl < limit) {
        int s = (int)((*blk0 + *copied / bl) % k->nslots);
        uint32_t n = TPX_MIN(bl, p->len - *copied);
        if (TPX_CU(cuMemcpyDtoHAsync, k->stage[s], src + *copied, n, k->stream) != TPX_OK ||
            copy_mark(k, s, *blk0 + *copied / bl) != TPX_OK)
            return -1;
        k->busy[s] = 1;
        *copied += n;
    }
    return 0;
}

/* Send side: the piece's payload [data_done, len) of a CUDA buffer, and
 * the copies of the piece taken ahead (ch->ahead_req) once the current
 * one's are all queued. Returns 1 when it is all written, 0 if the socket
 * would block, SOCK_CUDA_WAIT if the next block is still being copied, -1
 * on error (errno set for socket errors, 0 for CUDA errors). */
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
    uint32_t len = ch->piece.len, bl = piece_block(k, len);
    for (;;) {
        if (ch->data_done == len) {
            rc = 1;
            break;
        }
        /* Every block whose slot is written out gets its copy: block g
         * reuses the slot of block g - nslots, free once that is written;
         * `cur` (being written) is the oldest not written. */
        uint32_t cur = ch->data_done / bl;
        if (ch->copy_done == 0) /* a new piece: everything before it is written */
            ch->blk0 = k->blk_issued;
        uint64_t limit = ch->blk0 + cur + k->nslots;
        if (send_issue(k, r, &ch->piece, &ch->blk0, &ch->copy_done, limit) != 0 ||
            (ch->copy_done == len && ch->ahead_req != NULL &&
             send_issue(k, ch->ahead_req, &ch->ahead, &ch->ahead_blk0, &ch->ahead_copy_done,
                        limit) != 0)) {
            rc = -1;
            goto out;
        }
        /* Write the copied blocks from `cur` on, as many as are ready. */
        struct iovec iov[SOCK_CUDA_MAX_SLOTS];
        int cnt = 0;
        for (uint32_t j = cur; cnt < (int)k->nslots && j * bl < ch->copy_done; j++, cnt++) {
            int s = (int)((ch->blk0 + j) % k->nslots), ready = slot_ready(k, s);
            if (ready < 0) {
                rc = -1;
                goto out;
            }
            if (!ready)
                break;
            uint32_t from = j == cur ? ch->data_done : j * bl;
            uint32_t to = TPX_MIN((j + 1) * bl, len);
            iov[cnt] = (struct iovec){(char *)k->stage[s] + (from - j * bl), to - from};
        }
        if (cnt == 0) {
            rc = SOCK_CUDA_WAIT;
            break;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = sendmsg(ch->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
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

/* Receive side: note the blocks whose copies finished and publish the
 * pieces all of whose copies did. Returns the pieces still waiting, -1 on
 * a CUDA error. The caller has entered k's context. */
static int reap(tpx_sock_cuda_chan_t *k, int *progress)
{
    if (k->word != NULL)
        k->blk_done = TPX_MIN(word_done(k), k->blk_next);
    while (k->word == NULL && k->blk_done < k->blk_next) {
        tpx_status_t st = tpx__cuda_event_query(k->ev[k->blk_done % k->nslots]);
        if (st == TPX_INPROGRESS)
            break;
        if (st != TPX_OK)
            return -1;
        k->blk_done++;
    }
    while (k->pend_head != k->pend_tail) {
        cu_pending_t *p = &k->pend[k->pend_head % SOCK_CUDA_MAX_SLOTS];
        if (p->last >= k->blk_done)
            break;
        tpx__sock_piece_done(p->req->comm, p->req, p->len, p->total);
        k->pend_head++;
        *progress = 1;
    }
    return (int)(k->pend_tail - k->pend_head);
}

int tpx__sock_cuda_reap(tpx_sock_chan_t *ch, int *progress)
{
    tpx_sock_cuda_chan_t *k = ch->cu;
    if (k == NULL || k->pend_head == k->pend_tail)
        return 0;
    if (k->word != NULL) /* no driver call */
        return reap(k, progress);
    int pushed = 0;
    if (tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
        return -1;
    int left = reap(k, progress);
    tpx__cuda_ctx_leave(pushed);
    return left;
}

/* Receive side: read the piece's payload into staging and copy it to the
 * GPU (a CUDA buffer, or the strict mode's GPU bounce buffer). Returns 1
 * when all of it is read and its copies are queued (the piece is published
 * later, by tpx__sock_cuda_reap, once they finished), 0 if the socket would
 * block, SOCK_CUDA_WAIT if every slot still feeds a copy, -1 on error. */
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
    uint32_t len = ch->piece.len, bl = piece_block(k, len);
    CUdeviceptr dst = (CUdeviceptr)(uintptr_t)(r->buf + ch->piece.offset);
    for (;;) {
        if (ch->data_done == len) {
            /* At most one entry per block not known complete: room. */
            k->pend[k->pend_tail % SOCK_CUDA_MAX_SLOTS] =
                (cu_pending_t){.req = r, .len = len, .total = ch->piece.total,
                               .last = k->blk_next - 1};
            k->pend_tail++;
            rc = reap(k, progress) < 0 ? -1 : 1; /* done already if the copies were quick */
            break;
        }
        /* The block being filled, `cur`, and the ones after it, each in a
         * free slot: block cur + i goes to slot (blk_next + i) % nslots. */
        uint32_t cur = ch->data_done / bl;
        if (k->blk_next - k->blk_done == k->nslots && reap(k, progress) < 0) {
            rc = -1;
            goto out;
        }
        int nfree = (int)(k->nslots - (k->blk_next - k->blk_done));
        if (nfree == 0) {
            rc = SOCK_CUDA_WAIT;
            break;
        }
        struct iovec iov[SOCK_CUDA_MAX_SLOTS];
        int cnt = 0;
        for (uint32_t j = cur; cnt < nfree && j * bl < len; j++, cnt++) {
            int s = (int)((k->blk_next + (uint64_t)cnt) % k->nslots);
            uint32_t from = j == cur ? ch->data_done : j * bl;
            uint32_t to = TPX_MIN((j + 1) * bl, len);
            iov[cnt] = (struct iovec){(char *)k->stage[s] + (from - j * bl), to - from};
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = recvmsg(ch->fd, &msg, MSG_DONTWAIT);
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
        /* Queue the copy of every block now complete. */
        for (uint32_t j = cur; j * bl < len && TPX_MIN((j + 1) * bl, len) <= ch->data_done; j++) {
            int s = (int)(k->blk_next % k->nslots);
            uint32_t n_blk = TPX_MIN((j + 1) * bl, len) - j * bl;
            tpx_status_t st = r->bounce ? bounce_copy(k, ch, j * bl, k->stage[s], n_blk)
                                        : TPX_CU(cuMemcpyHtoDAsync, dst + j * bl, k->stage[s],
                                                 n_blk, k->stream);
            if (st != TPX_OK || copy_mark(k, s, k->blk_next) != TPX_OK) {
                rc = -1;
                goto out;
            }
            k->blk_next++;
        }
    }
out:
    tpx__cuda_ctx_leave(pushed);
    return rc;
}

tpx_status_t tpx__sock_cuda_eager_copy(tpx_sock_chan_t *ch, int dev, void *dptr, const void *src,
                                       size_t len)
{
    tpx_sock_cuda_chan_t *k;
    int pushed = 0;
    tpx_status_t st = cu_chan_get(ch, dev, &k);
    if (st != TPX_OK || (st = tpx__cuda_ctx_enter(dev, &pushed)) != TPX_OK)
        return st;
    st = TPX_CU(cuMemcpyHtoDAsync, (CUdeviceptr)(uintptr_t)dptr, src, len, k->stream);
    if (st == TPX_OK)
        st = TPX_CU(cuStreamSynchronize, k->stream);
    tpx__cuda_ctx_leave(pushed);
    return st;
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
