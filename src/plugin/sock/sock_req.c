/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_req.c - isend, irecv, test, memory registration and close.
 *
 * These run on the caller's thread and never block: posting fills a slot
 * of the comm's request ring and wakes a sleeping helper; test reads the
 * counters the helpers publish. A request is freed by the test() that
 * reports it done.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sock.h"
#include "sock_cuda.h"
#include "sock_tables.h"

static tpx_sock_comm_t *comm_check(void *comm, tpx_sock_comm_kind_t kind, const char *fn)
{
    tpx_sock_comm_t *c = comm;
    uint32_t want = kind == SOCK_COMM_SEND ? SOCK_COMM_MAGIC_SEND : SOCK_COMM_MAGIC_RECV;
    if (c == NULL || c->magic != want) {
        SOCK_WARN("%s: %p is not a %s comm", fn, comm, kind == SOCK_COMM_SEND ? "send" : "recv");
        return NULL;
    }
    return c;
}

static tpx_status_t mr_check(const tpx_sock_comm_t *c, void *mh, const void *data, size_t size,
                             const char *fn)
{
    if (mh == NULL && c->tcpx) {
        /* Google's plugin: rc 3 (NCCL registers every buffer it posts) */
        SOCK_WARN("%s: mhandle is null: TCPX posts only registered buffers (regMr)", fn);
        return TPX_ERR_INTERNAL;
    }
    if (mh == NULL)
        return TPX_OK; /* unregistered host memory is allowed, as in NCCL's socket transport */
    const tpx_sock_mr_t *mr = mh;
    if (mr->magic != SOCK_MR_MAGIC) {
        SOCK_WARN("%s: invalid memory handle %p", fn, mh);
        return TPX_ERR_INVALID_ARG;
    }
    uintptr_t p = (uintptr_t)data;
    if (p < mr->base || size > mr->size || p - mr->base > mr->size - size) {
        SOCK_WARN("%s: buffer %p+%zu is outside its registration %p+%zu", fn, data, size,
                  (void *)mr->base, mr->size);
        return TPX_ERR_INVALID_ARG;
    }
    return TPX_OK;
}

static tpx_status_t post(tpx_sock_comm_t *c, void *data, const struct iovec *iov, int iovcnt,
                         size_t size, int tag, void *mh, void **request, const char *fn)
{
    int err = atomic_load_explicit(&c->error, memory_order_relaxed);
    if (err != 0 && !c->tcpx)
        return (tpx_status_t)err; /* logged when it happened; TCPX: test() reports it */
    uint64_t seq = atomic_load_explicit(&c->posted, memory_order_relaxed);
    tpx_sock_req_t *r = &c->reqs[seq % (uint64_t)c->max_reqs];
    if (r->state != SOCK_REQ_FREE) {
        SOCK_WARN("%s: unable to allocate requests: %d already in flight on this comm "
                  "(TPX_MAX_REQUESTS); test() the oldest first", fn, c->max_reqs);
        return TPX_ERR_NO_RESOURCE;
    }
    int cuda_dev = mh != NULL && ((tpx_sock_mr_t *)mh)->type == TPX_NCCL_PTR_CUDA
                       ? ((tpx_sock_mr_t *)mh)->dev
                       : -1;
    /* TCPX: receives into GPU memory land in the bounce buffer, receives
     * into host memory straight in the buffer (TPX_SOCK_TCPX=2: those too
     * in the bounce buffer). */
    int bounce = c->tcpx && c->kind == SOCK_COMM_RECV && (cuda_dev >= 0 || c->tcpx == 2);
    if (bounce && c->bounce == NULL) { /* the rxmem skip state: no bounce buffer */
        if (cuda_dev >= 0) {
            SOCK_WARN("%s: a receive into GPU memory needs the bounce buffer, and this comm "
                      "has none (rxmem skip: no receive memory from RxDM)", fn);
            return TPX_ERR_INTERNAL;
        }
        bounce = 0;
    }
    if (bounce) {
        if (size > SOCK_TCPX_MAX_RECV) {
            SOCK_WARN("%s: %zu bytes: TCPX receives at most %u bytes per request into device "
                      "memory", fn, size, SOCK_TCPX_MAX_RECV);
            return TPX_ERR_INVALID_ARG;
        }
        tpx__sock_tcpx_layout(c, (uint32_t)(seq % (uint64_t)c->max_reqs), size);
    }
    r->buf = data;
    r->iov = iov;
    r->iovcnt = iovcnt;
    r->size = size;
    r->tag = tag;
    r->cuda_dev = cuda_dev;
    r->bounce = bounce;
    r->state = SOCK_REQ_POSTED;
    atomic_store_explicit(&r->done, 0, memory_order_relaxed);
    atomic_store_explicit(&r->claimed, 0, memory_order_relaxed);
    if (c->kind == SOCK_COMM_RECV)
        tpx__sock_req_claim_reset(r);
    atomic_store_explicit(&r->total, c->kind == SOCK_COMM_SEND ? size : SOCK_TOTAL_UNKNOWN,
                          memory_order_relaxed);
    atomic_store_explicit(&r->seq, seq, memory_order_relaxed);
    /* seq_cst: pairs with the helper's store of `sleeping` (see sock_io.h). */
    atomic_store(&c->posted, seq + 1);
    if (!c->tcpx) {
        atomic_store(&c->movable, seq + 1);
        int taken = c->kind == SOCK_COMM_SEND ? tpx__sock_send_direct(c, r, seq)
                                              : tpx__sock_recv_eager(c, r, seq);
        if (!taken && c->kind == SOCK_COMM_RECV)
            (void)tpx__sock_recv_direct(c, r); /* a parked connection is read on here */
        if (!taken)
            tpx__sock_comm_kick(c);
        if (c->kind == SOCK_COMM_RECV)
            tpx__sock_recv_posted(c); /* the sender may have closed every connection */
    }
    *request = r;
    return TPX_OK;
}

tpx_status_t tpx__sock_isend(void *comm, void *data, size_t size, int tag, void *mh,
                             void **request)
{
    tpx_sock_comm_t *c = comm_check(comm, SOCK_COMM_SEND, "isend");
    if (c == NULL || request == NULL || (data == NULL && size > 0)) {
        if (c != NULL)
            SOCK_WARN("isend: NULL %s", request == NULL ? "request pointer" : "buffer");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_status_t st = mr_check(c, mh, data, size, "isend");
    if (st != TPX_OK)
        return st;
    return post(c, data, NULL, 0, size, tag, mh, request, "isend");
}

tpx_status_t tpx__sock_irecv(void *comm, int n, void **data, const size_t *sizes, const int *tags,
                             void **mh, void **request)
{
    tpx_sock_comm_t *c = comm_check(comm, SOCK_COMM_RECV, "irecv");
    if (c == NULL)
        return TPX_ERR_INVALID_ARG;
    if (n != 1) {
        SOCK_WARN("irecv: n = %d, but this transport receives one buffer per request "
                  "(maxRecvs = 1)", n);
        return TPX_ERR_INVALID_ARG;
    }
    if (request == NULL || data == NULL || sizes == NULL || tags == NULL ||
        (data[0] == NULL && sizes[0] > 0)) {
        SOCK_WARN("irecv: NULL argument");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_status_t st = mr_check(c, mh ? mh[0] : NULL, data[0], sizes[0], "irecv");
    if (st != TPX_OK)
        return st;
    return post(c, data[0], NULL, 0, sizes[0], tags[0], mh ? mh[0] : NULL, request, "irecv");
}

tpx_status_t tpx__sock_postv(void *comm, tpx_sock_comm_kind_t kind, const struct iovec *iov,
                             int iovcnt, void **request)
{
    const char *fn = kind == SOCK_COMM_SEND ? "isendv" : "irecvv";
    tpx_sock_comm_t *c = comm_check(comm, kind, fn);
    if (c == NULL)
        return TPX_ERR_INVALID_ARG;
    if (c->tcpx) {
        SOCK_WARN("%s: vectored messages are not part of strict TCPX mode", fn);
        return TPX_ERR_UNSUPPORTED;
    }
    if (request == NULL || iov == NULL || iovcnt < 1 || iovcnt > TPX_SOCK_IOV_MAX) {
        SOCK_WARN("%s: %s (1 to %d iovecs)", fn,
                  request == NULL || iov == NULL ? "NULL argument" : "bad iovec count",
                  TPX_SOCK_IOV_MAX);
        return TPX_ERR_INVALID_ARG;
    }
    uint64_t size = 0;
    for (int i = 0; i < iovcnt; i++) {
        if ((iov[i].iov_base == NULL && iov[i].iov_len > 0) || iov[i].iov_len > UINT64_MAX - size) {
            SOCK_WARN("%s: iovec %d: %s", fn, i,
                      iov[i].iov_base == NULL ? "NULL base" : "the sizes overflow");
            return TPX_ERR_INVALID_ARG;
        }
        size += iov[i].iov_len;
    }
    /* one piece of memory is an ordinary message */
    return post(c, iovcnt == 1 ? iov[0].iov_base : NULL, iovcnt == 1 ? NULL : iov,
                iovcnt == 1 ? 0 : iovcnt, size, 0, NULL, request, fn);
}

/* Whether the head request is "transmitting" in Google's plugin's sense:
 * every byte of it handed to a socket (send) or announced by the sender
 * (recv). Until then test() on any request is a quiet "not done". */
static int tcpx_head_transmitting(tpx_sock_comm_t *c)
{
    if (c->test_head >= atomic_load(&c->posted))
        return 0;
    tpx_sock_req_t *h = &c->reqs[c->test_head % (uint64_t)c->max_reqs];
    if (c->kind == SOCK_COMM_SEND) {
        pthread_mutex_lock(&c->sched_lock);
        int all = c->sched_seq > c->test_head;
        pthread_mutex_unlock(&c->sched_lock);
        return all;
    }
    uint64_t total = atomic_load_explicit(&h->total, memory_order_acquire);
    return total != SOCK_TOTAL_UNKNOWN &&
           atomic_load_explicit(&h->claimed, memory_order_acquire) == (total ? total : 1);
}

/* Strict TCPX test(), as Google's plugin 3.1.9: only the head moves on;
 * any other request (a later one, or one already reported done) gets a
 * quiet rc 0 / done 0 while the head is not transmitting yet, and rc 3
 * once it is. sizes are never written, receives stay taken until
 * irecvConsumed, "peer closed" (rc 2) is reported while data may still
 * arrive, and a sender that vanished mid-message is never reported. */
static tpx_status_t test_tcpx(tpx_sock_comm_t *c, tpx_sock_req_t *r, int *done)
{
    /* Google's plugin moves data only from test(): requests posted since
     * the last call start moving now. */
    uint64_t posted = atomic_load(&c->posted);
    if (atomic_load(&c->movable) != posted) {
        atomic_store(&c->movable, posted);
        tpx__sock_comm_kick(c);
    }
    *done = 0;
    uint64_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    int err = atomic_load_explicit(&c->error, memory_order_acquire);
    int closed = atomic_load(&c->eof_chans) > 0;
    if (r->state != SOCK_REQ_POSTED || seq != c->test_head) {
        if (!tcpx_head_transmitting(c))
            return TPX_OK;
        SOCK_WARN("test: request %llu is not the head of its comm (%llu): TCPX tests in FIFO "
                  "order only", (unsigned long long)seq, (unsigned long long)c->test_head);
        return TPX_ERR_INTERNAL;
    }
    uint64_t total = atomic_load_explicit(&r->total, memory_order_acquire);
    uint64_t moved = atomic_load_explicit(&r->done, memory_order_acquire);
    if (total != SOCK_TOTAL_UNKNOWN && moved == (total ? total : 1)) {
        *done = 1;
        c->test_head++;
        if (c->kind == SOCK_COMM_RECV) {
            tpx__sock_tcpx_publish(c, (uint32_t)(seq % (uint64_t)c->max_reqs), total,
                                   r->bounce);
            r->state = SOCK_REQ_UNCONSUMED;
        } else {
            r->state = SOCK_REQ_FREE;
        }
        return closed ? TPX_ERR_CONN_RESET : TPX_OK; /* rc 2 with done = 1: fine */
    }
    /* The peer has gone (or a connection failed). Google's plugin reports
     * it (rc 2) only from its control connection: while a request still has
     * a control message to read or write -- a receive whose message has not
     * started (its size is still to come), or a message of more than one
     * chunk (NCCL_DYNAMIC_CHUNK_SIZE; TPX_SOCK_TCPX_CHUNK here), which has
     * one per chunk. A message of at most one chunk has exchanged its only
     * one: its data thread just ends, and test() says "not done" forever. */
    int gone = closed || atomic_load(&c->hung) || err == TPX_ERR_CONN_RESET;
    if (!gone)
        return (tpx_status_t)err;
    int started = c->kind == SOCK_COMM_SEND || total != SOCK_TOTAL_UNKNOWN;
    uint64_t msg = c->kind == SOCK_COMM_SEND ? r->size : total;
    if (started && msg <= tpx__sock_params.tcpx_chunk)
        return TPX_OK; /* a hang: the caller's deadline ends it */
    if (tpx__sock_params.tcpx_sigpipe && c->ctrl_fd >= 0) {
        /* ... and writes that control connection without MSG_NOSIGNAL: the
         * calling thread gets SIGPIPE (TPX_SOCK_TCPX_SIGPIPE; the byte is
         * never read, the connection is dead). */
        for (int i = 0; i < 2; i++) { /* the first may only draw the peer's reset */
            ssize_t n = send(c->ctrl_fd, "", 1, MSG_DONTWAIT);
            (void)n;
        }
    }
    return TPX_ERR_CONN_RESET; /* rc 2, done = 0 */
}

tpx_status_t tpx__sock_test(void *request, int *done, size_t *size)
{
    tpx_sock_req_t *r = request;
    if (r != NULL && done != NULL && r->comm != NULL &&
        (r->comm->magic == SOCK_COMM_MAGIC_SEND || r->comm->magic == SOCK_COMM_MAGIC_RECV) &&
        r->comm->tcpx)
        return test_tcpx(r->comm, r, done); /* any request of the comm, as TCPX */
    if (r == NULL || done == NULL || r->comm == NULL ||
        (r->comm->magic != SOCK_COMM_MAGIC_SEND && r->comm->magic != SOCK_COMM_MAGIC_RECV) ||
        r->state != SOCK_REQ_POSTED) {
        SOCK_WARN("test: %p is not a request in flight", request);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_sock_comm_t *c = r->comm;
    /* The error first: everything published before it was set is visible
     * below, so a message that completed is never reported as failed. */
    int err = atomic_load_explicit(&c->error, memory_order_acquire);
    uint64_t total = atomic_load_explicit(&r->total, memory_order_acquire);
    uint64_t moved = atomic_load_explicit(&r->done, memory_order_acquire);
    if (c->kind == SOCK_COMM_RECV && err == 0 &&
        (total == SOCK_TOTAL_UNKNOWN || moved != (total ? total : 1)) &&
        tpx__sock_recv_direct(c, r)) {
        err = atomic_load_explicit(&c->error, memory_order_acquire);
        total = atomic_load_explicit(&r->total, memory_order_acquire);
        moved = atomic_load_explicit(&r->done, memory_order_acquire);
    }
    if (total != SOCK_TOTAL_UNKNOWN && moved == (total ? total : 1)) {
        r->state = SOCK_REQ_FREE;
        *done = 1;
        if (size != NULL)
            *size = total;
        return TPX_OK;
    }
    *done = 0;
    return (tpx_status_t)err; /* 0 (TPX_OK) while healthy; logged at the origin */
}

tpx_status_t tpx__sock_consumed(void *comm, int n, void *request)
{
    tpx_sock_comm_t *c = comm_check(comm, SOCK_COMM_RECV, "irecvConsumed");
    tpx_sock_req_t *r = request;
    if (c == NULL)
        return TPX_ERR_INVALID_ARG;
    if (!c->tcpx)
        return TPX_OK; /* host delivery: nothing held */
    if (n != 1 || r == NULL || r->comm != c) {
        SOCK_WARN("irecvConsumed: invalid arguments (n %d, request %p)", n, request);
        return TPX_ERR_INVALID_ARG;
    }
    uint64_t seq = atomic_load_explicit(&r->seq, memory_order_relaxed);
    if (r->state != SOCK_REQ_UNCONSUMED || seq != c->consume_head) {
        SOCK_WARN("irecvConsumed: request %llu is not the oldest completed receive (%llu): "
                  "TCPX releases receives in FIFO order, after test() said done",
                  (unsigned long long)seq, (unsigned long long)c->consume_head);
        return TPX_ERR_INTERNAL;
    }
    c->meta->cnt[seq % (uint64_t)c->max_reqs] = 0;
    c->consume_head++;
    r->state = SOCK_REQ_FREE;
    return TPX_OK;
}

tpx_status_t tpx__sock_regmr(void *comm, void *data, size_t size, int type, void **mh)
{
    tpx_sock_comm_t *c = comm;
    if (c == NULL || (c->magic != SOCK_COMM_MAGIC_SEND && c->magic != SOCK_COMM_MAGIC_RECV) ||
        mh == NULL || (data == NULL && size > 0)) {
        SOCK_WARN("regMr: invalid argument (comm %p, data %p, size %zu)", comm, data, size);
        return TPX_ERR_INVALID_ARG;
    }
    int dev = -1;
    if (type == TPX_NCCL_PTR_CUDA) {
        if (!tpx__sock_cuda_available()) {
            SOCK_WARN("regMr: CUDA memory is not supported here: no GPU");
            return TPX_ERR_UNSUPPORTED;
        }
        if (tpx__sock_cuda_ptr_dev(data, &dev) != TPX_OK || dev < 0) {
            SOCK_WARN("regMr: %p is not CUDA device memory", data);
            return TPX_ERR_INVALID_ARG;
        }
        if (tpx__sock_cuda_retain(dev) != TPX_OK)
            return TPX_ERR_CUDA;
    } else if (type != TPX_NCCL_PTR_HOST) {
        SOCK_WARN("regMr: pointer type %d is not supported by this transport", type);
        return TPX_ERR_UNSUPPORTED;
    }
    tpx_sock_mr_t *mr = malloc(sizeof(*mr));
    if (mr == NULL) {
        if (dev >= 0)
            tpx__sock_cuda_release(dev);
        return TPX_ERR_NO_MEMORY;
    }
    *mr = (tpx_sock_mr_t){.magic = SOCK_MR_MAGIC, .type = type, .dev = dev,
                          .base = (uintptr_t)data, .size = size};
    *mh = mr;
    return TPX_OK;
}

tpx_status_t tpx__sock_deregmr(void *comm, void *mh)
{
    tpx_sock_mr_t *mr = mh;
    if (mr == NULL || mr->magic != SOCK_MR_MAGIC) {
        SOCK_WARN("deregMr: invalid memory handle %p", mh);
        return TPX_ERR_INVALID_ARG;
    }
    mr->magic = 0;
    if (mr->type == TPX_NCCL_PTR_CUDA)
        tpx__sock_cuda_release(mr->dev);
    free(mr);
    return TPX_OK;
}

tpx_status_t tpx__sock_close(void *comm, tpx_sock_comm_kind_t kind)
{
    tpx_sock_comm_t *c = comm_check(comm, kind, kind == SOCK_COMM_SEND ? "closeSend" : "closeRecv");
    if (c == NULL)
        return TPX_ERR_INVALID_ARG;
    tpx__sock_comm_destroy(c);
    return TPX_OK;
}
