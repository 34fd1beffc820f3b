/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_cuda.c - CUDA buffers in the built-in transport, through pinned
 * staging.
 *
 * Sockets cannot read or write device memory, so a piece of a CUDA buffer
 * travels through a ring of pinned host memory per data connection
 * (TPX_SOCK_CUDA_RING bytes, 4 MiB by default, made on the connection's
 * first CUDA piece and freed with its comm), pipelined on the connection's
 * own stream: a piece is cut into blocks of half the piece (64 KiB to
 * TPX_SOCK_CUDA_BLOCK, 512 KiB by default), so that even a 256 KiB piece
 * overlaps its copies with the socket, at two driver calls (copy, mark) per
 * block. Each block takes the ring's next bytes, in the order the blocks
 * are numbered, and frees them in the same order: once written to the
 * socket (send), once its copy to the GPU finished (receive).
 *
 * The ring is cut into segments of TPX_SOCK_CUDA_BLOCK (its size rounded
 * down to a whole number of them) and a block never straddles two: one
 * that would starts the next segment (sock_ring.c keeps the books). Large
 * blocks so sit in fixed, aligned slots, eight 512 KiB copies of 4 MiB, and
 * small ones pack, up to 32 copies of 64 KiB; no block runs past the
 * ring's end. Large copies matter: with a loopback run's copies to and
 * from one GPU at once, its copy engines move 28 GB/s each way in 256 KiB
 * copies, 37 in 512 KiB ones (bench/gpu/copy_probe.cu); fixed slots of
 * 512 KiB moved 256 MiB transfers 1.3x faster than 8 of 256 KiB, but held
 * only four copies of small pieces (READs of 128 KiB GPU blocks 0.9x). A
 * ring whose blocks took any byte position, with no segments, moved those
 * READs 1.09x faster and 1 MiB transfers (512 KiB copies, after some
 * 128 KiB ones had shifted the positions) 0.88-0.91x as fast as the slots,
 * in every round of two runs; with segments, 1.02-1.03x in the two
 * rounds measured. 4 MiB rather than 2: GPU0 ->
 * GPU1 256 MiB transfers 0.96-1.02x host memory against 0.77-0.83x (two
 * H200s), and 1 MiB transfers on one GPU equal (0.76 vs 0.78x) once
 * measured over 21 GB rather than 1 (shorter rows read GPU memory low).
 *
 * The I/O worker never waits for CUDA. Each block's copy is followed on its
 * stream by a mark: an event, queried; or, with TPX_SOCK_CUDA_WORD=1 where
 * the driver and GPU have stream memory operations, a write of the block's
 * number + 1 into a word of host-mapped memory, which the worker loads to
 * learn what has finished, with no driver call (querying events took 10-13%
 * of a 16-core host's CPU at 1 MiB transfers, but the words measured no
 * faster overall: docs/design.md).
 * A connection whose next block is not copied yet (send) or that has no
 * ring space for the next block (receive: the blocks before it still feed
 * copies to the GPU) returns SOCK_CUDA_WAIT, and its worker looks at it
 * again soon (sock_worker.c: behind its other connections, then with a short,
 * growing sleep) while it serves the rest.
 *
 * Receive: a piece is published only after its last host-to-device copy
 * has finished, but the connection does not wait for that: the finished
 * piece goes on a small queue (each entry holds a block not known complete)
 * and the connection reads the next piece while the copies run;
 * tpx__sock_cuda_reap publishes what completed, in order.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "gpu/cuda.h"
#include "sock.h"
#include "sock_cuda.h"


/* A received piece whose copies to the GPU are in flight. */
typedef struct {
    tpx_sock_req_t *req;
    uint32_t len;
    uint64_t total;
    uint64_t last; /* its last block: published once blk_done > last */
    int count;     /* its bytes count (failover: not if a copy on another connection took
                      that over, tpx__sock_fo_settle) */
} cu_pending_t;

struct tpx_sock_cuda_chan {
    int dev;
    tpx_sock_ring_t ring; /* where its blocks are (block numbers: ring.next, ever) */
    unsigned char *mem;   /* the ring: pinned, ring.bytes */
    CUstream stream;
    /* Block b, while in the ring, is entry b % TPX_SOCK_RING_BLKS of: */
    CUevent ev[TPX_SOCK_RING_BLKS]; /* its copy's mark (made on first use) */
    int busy[TPX_SOCK_RING_BLKS];   /* send: its copy is marked and not yet seen complete */
    /* send: a piece numbers its blocks from ring.next when its first copy
     * is queued. The blocks before the one being written are written out:
     * their space is free. receive: blocks whose copy is known complete,
     * ever; the blocks from blk_done on hold ring space (events complete in
     * stream order) */
    uint64_t blk_done;
    /* at most one entry per block in the ring (an empty piece never enters:
     * it completes when its header is read, sock_claim.c) */
    cu_pending_t pend[TPX_SOCK_RING_BLKS];
    uint32_t pend_head, pend_tail;
    /* The completion word (NULL: events mark the copies): block b's mark
     * writes b + 1, in stream order, so it holds the blocks done, ever. */
    uint64_t *word;
    CUdeviceptr word_dev;
};

/* Bytes of the rings of all connections, booked when a ring is made
 * (TPX_SOCK_CUDA_PINNED), whether or not its allocation succeeds, and
 * unbooked when its connection lets it go. */
static _Atomic uint64_t ring_booked;

/* The first byte of a block at ring position `at` (it ends in its segment). */
static unsigned char *ring_ptr(const tpx_sock_cuda_chan_t *k, uint64_t at)
{
    return k->mem + at % k->ring.bytes;
}

/* Mark block `blk`, whose copy (into or out of its ring space) was just queued. */
static tpx_status_t copy_mark(tpx_sock_cuda_chan_t *k, uint64_t blk)
{
    if (k->word != NULL)
        return tpx__cuda_stream_write_value(k->stream, k->word_dev, blk + 1);
    CUevent *ev = &k->ev[blk % TPX_SOCK_RING_BLKS];
    if (*ev == NULL) {
        tpx_status_t st = tpx__cuda_event_create(k->dev, 0, ev);
        if (st != TPX_OK)
            return st;
    }
    return tpx__cuda_event_record(*ev, k->stream);
}

/* Blocks whose copies have finished, ever (word mode). */
static uint64_t word_done(const tpx_sock_cuda_chan_t *k)
{
    return __atomic_load_n(k->word, __ATOMIC_ACQUIRE);
}

uint64_t tpx__sock_cuda_pinned_booked(void) { return atomic_load(&ring_booked); }

/* The block size of a piece of `len` bytes. */
static uint32_t piece_block(const tpx_sock_cuda_chan_t *k, uint32_t len)
{
    uint32_t b = (len / 2 + 4095u) & ~4095u;
    return TPX_MIN(TPX_MAX(b, TPX_SOCK_RING_MIN_SEG), k->ring.seg);
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
    tpx_status_t st;
    TPX_CHECK_GOTO(tpx__cuda_ctx_retain(dev, NULL), st, err_free);
    tpx__sock_ring_init_booked(&k->ring, &ring_booked, tpx__sock_params.cuda_pinned,
                               (uint32_t)tpx__sock_params.cuda_ring, tpx__sock_params.cuda_block);
    TPX_DEBUG("cuda staging: a ring of %u bytes on GPU %d (pinned rings: %llu bytes of "
              "TPX_SOCK_CUDA_PINNED %llu)", k->ring.bytes, dev,
              (unsigned long long)atomic_load(&ring_booked),
              (unsigned long long)tpx__sock_params.cuda_pinned);
    void *mem = NULL;
    TPX_CHECK_GOTO(tpx__cuda_host_alloc(dev, k->ring.bytes, &mem, NULL), st, err_chan);
    k->mem = mem;
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
    /* Without its context (a failing driver; a caller's full context stack)
     * the chan's CUDA objects stay; they are freed with the primary context
     * when its last reference, perhaps this one, goes. */
    if (tpx__cuda_ctx_enter(k->dev, &pushed) == TPX_OK) {
        if (k->stream)
            (void)TPX_CU(cuStreamSynchronize, k->stream);
        if (k->word)
            tpx__cuda_host_free(k->dev, k->word);
        for (int b = 0; b < TPX_SOCK_RING_BLKS; b++)
            if (k->ev[b])
                tpx__cuda_event_destroy(k->dev, k->ev[b]);
        if (k->mem)
            tpx__cuda_host_free(k->dev, k->mem);
        if (k->stream)
            tpx__cuda_stream_destroy(k->dev, k->stream);
        tpx__cuda_ctx_leave(pushed);
    }
    tpx__sock_ring_unbook(&k->ring, &ring_booked);
    tpx__cuda_ctx_release(k->dev);
    free(k);
    ch->cu = NULL;
}

/* Send side: has the copy of block b (in the ring) finished? 1 yes, 0 not
 * yet, -1 error. */
static int blk_ready(tpx_sock_cuda_chan_t *k, uint64_t b)
{
    int s = (int)(b % TPX_SOCK_RING_BLKS);
    if (!k->busy[s])
        return 1;
    if (k->word != NULL) {
        if (word_done(k) <= b)
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
 * into the ring's next bytes, while they fit beside the blocks from `live`
 * on (the oldest not written out). blk0: the piece's first block, numbered
 * when its first copy is queued. */
static int send_issue(tpx_sock_cuda_chan_t *k, const tpx_sock_req_t *r, const tpx_sock_piece_t *p,
                      uint64_t *blk0, uint32_t *copied, uint64_t live)
{
    uint32_t bl = piece_block(k, p->len);
    CUdeviceptr src = (CUdeviceptr)(uintptr_t)(r->buf + p->offset);
    while (*copied < p->len) {
        uint32_t n = TPX_MIN(bl, p->len - *copied);
        uint64_t b = k->ring.next, at;
        if (!tpx__sock_ring_fit(&k->ring, live, b, k->ring.put, n, &at))
            break;
        if (*copied == 0)
            *blk0 = b;
        int s = (int)(b % TPX_SOCK_RING_BLKS);
        if (TPX_CU(cuMemcpyDtoHAsync, ring_ptr(k, at), src + *copied, n, k->stream) != TPX_OK ||
            copy_mark(k, b) != TPX_OK)
            return -1;
        (void)tpx__sock_ring_take(&k->ring, n); /* at, as fit said */
        k->busy[s] = 1;
        *copied += n;
    }
    return 0;
}

/* Send side: the piece's payload [data_done, len) of a CUDA buffer, and
 * the copies of the piece taken ahead (ch->ahead_req) once the current
 * one's are all queued. Returns 1 when it is all written, 0 if the socket
 * would block, SOCK_CUDA_WAIT if the next block is still being copied, -1
 * on a socket error (errno set), SOCK_CUDA_FAIL on a CUDA error. */
int tpx__sock_cuda_send(tpx_sock_chan_t *ch, int *progress)
{
    tpx_sock_cuda_chan_t *k;
    tpx_sock_req_t *r = ch->req;
    int pushed = 0;
    if (cu_chan_get(ch, r->cuda_dev, &k) != TPX_OK ||
        tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
        return SOCK_CUDA_FAIL;
    int rc = 0;
    uint32_t len = ch->piece.len, bl = piece_block(k, len);
    for (;;) {
        if (ch->data_done == len) {
            rc = 1;
            break;
        }
        /* `cur` (being written) is the oldest block not written out; the
         * ones before it, this piece's and every earlier piece's, are. */
        uint32_t cur = ch->data_done / bl;
        if (ch->copy_done == 0) /* a new piece: everything before it is written */
            ch->blk0 = k->ring.next;
        uint64_t live = ch->blk0 + cur;
        if (send_issue(k, r, &ch->piece, &ch->blk0, &ch->copy_done, live) != 0 ||
            (ch->copy_done == len && ch->ahead_req != NULL &&
             send_issue(k, ch->ahead_req, &ch->ahead, &ch->ahead_blk0, &ch->ahead_copy_done,
                        live) != 0)) {
            rc = SOCK_CUDA_FAIL;
            goto out;
        }
        /* Write the copied blocks from `cur` on, as many as are ready. */
        struct iovec iov[TPX_SOCK_RING_BLKS];
        int cnt = 0;
        for (uint32_t j = cur; cnt < TPX_SOCK_RING_BLKS && j * bl < ch->copy_done; j++, cnt++) {
            uint64_t b = ch->blk0 + j;
            int ready = blk_ready(k, b);
            if (ready < 0) {
                rc = SOCK_CUDA_FAIL;
                goto out;
            }
            if (!ready)
                break;
            uint32_t from = j == cur ? ch->data_done : j * bl;
            uint32_t to = TPX_MIN((j + 1) * bl, len);
            unsigned char *blk = ring_ptr(k, k->ring.at[b % TPX_SOCK_RING_BLKS]);
            iov[cnt] = (struct iovec){blk + (from - j * bl), to - from};
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
        k->blk_done = TPX_MIN(word_done(k), k->ring.next);
    while (k->word == NULL && k->blk_done < k->ring.next) {
        tpx_status_t st = tpx__cuda_event_query(k->ev[k->blk_done % TPX_SOCK_RING_BLKS]);
        if (st == TPX_INPROGRESS)
            break;
        if (st != TPX_OK)
            return -1;
        k->blk_done++;
    }
    while (k->pend_head != k->pend_tail) {
        cu_pending_t *p = &k->pend[k->pend_head % TPX_SOCK_RING_BLKS];
        if (p->last >= k->blk_done)
            break;
        if (p->count)
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
 * block, SOCK_CUDA_WAIT if the ring has no space for the next block (the
 * blocks before it still feed copies), -1 on a socket error (errno set),
 * SOCK_CUDA_CLOSED if the sender closed the connection, SOCK_CUDA_FAIL on
 * a CUDA error. */
int tpx__sock_cuda_recv(tpx_sock_chan_t *ch, int *progress)
{
    tpx_sock_cuda_chan_t *k;
    tpx_sock_req_t *r = ch->req;
    tpx_sock_comm_t *c = r->comm;
    int pushed = 0;
    if (cu_chan_get(ch, r->bounce ? c->gpu : r->cuda_dev, &k) != TPX_OK ||
        tpx__cuda_ctx_enter(k->dev, &pushed) != TPX_OK)
        return SOCK_CUDA_FAIL;
    int rc = 0;
    uint32_t len = ch->piece.len, bl = piece_block(k, len);
    CUdeviceptr dst = (CUdeviceptr)(uintptr_t)(r->buf + ch->piece.offset);
    for (;;) {
        if (ch->data_done == len) {
            /* At most one entry per block in the ring: room. */
            k->pend[k->pend_tail % TPX_SOCK_RING_BLKS] =
                (cu_pending_t){.req = r, .len = len, .total = ch->piece.total,
                               .last = k->ring.next - 1,
                               .count = !c->failover || tpx__sock_fo_settle(c, ch)};
            k->pend_tail++;
            rc = reap(k, progress) < 0 ? SOCK_CUDA_FAIL : 1; /* done if the copies were quick */
            break;
        }
        /* The block being filled, `cur`, and the ones after it, each where
         * it will take ring space when its copy is queued (from ring.put on,
         * so a block partly read keeps its place), while they fit beside
         * the blocks still copied to the GPU. */
        uint32_t cur = ch->data_done / bl;
        struct iovec iov[TPX_SOCK_RING_BLKS];
        int cnt = 0;
        for (int pass = 0; cnt == 0 && pass < 2; pass++) {
            if (pass == 1 && reap(k, progress) < 0) { /* free what finished, look again */
                rc = SOCK_CUDA_FAIL;
                goto out;
            }
            uint64_t pos = k->ring.put;
            for (uint32_t j = cur; j * bl < len; j++, cnt++) {
                uint32_t from = j == cur ? ch->data_done : j * bl;
                uint32_t to = TPX_MIN((j + 1) * bl, len), n_blk = to - j * bl;
                uint64_t at;
                if (!tpx__sock_ring_fit(&k->ring, k->blk_done, k->ring.next + (uint64_t)cnt, pos,
                                        n_blk, &at))
                    break;
                iov[cnt] = (struct iovec){ring_ptr(k, at) + (from - j * bl), to - from};
                pos = at + n_blk;
            }
        }
        if (cnt == 0) {
            rc = SOCK_CUDA_WAIT;
            break;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
        ssize_t n = recvmsg(ch->fd, &msg, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
            goto out;
        }
        if (n == 0) { /* in the middle of the piece */
            rc = SOCK_CUDA_CLOSED;
            goto out;
        }
        *progress = 1;
        ch->data_done += (uint32_t)n;
        /* Queue the copy of every block now complete, at the place the
         * read above used. */
        for (uint32_t j = cur; j * bl < len && TPX_MIN((j + 1) * bl, len) <= ch->data_done; j++) {
            uint32_t n_blk = TPX_MIN((j + 1) * bl, len) - j * bl;
            uint64_t b = k->ring.next;
            unsigned char *stage = ring_ptr(k, tpx__sock_ring_take(&k->ring, n_blk));
            tpx_status_t st = r->bounce ? bounce_copy(k, ch, j * bl, stage, n_blk)
                                        : TPX_CU(cuMemcpyHtoDAsync, dst + j * bl, stage, n_blk,
                                                 k->stream);
            if (st != TPX_OK || copy_mark(k, b) != TPX_OK) {
                rc = SOCK_CUDA_FAIL;
                goto out;
            }
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
