/*
 * xfer.c - two-sided transfers: headers, chunk dealing, matching, completion.
 *
 * A send posts a 64-byte header {seq, len} on the peer's control comm and
 * its chunks on the data comms: chunk j of a transfer goes to data channel
 * (first + j) % nchan, where `first` is a cursor both sides advance by the
 * transfer's chunk count, in transfer order. The receiver matches headers to
 * its posted receives in FIFO order and then posts exactly the chunk sizes
 * the sender posts, in the same order on every channel -- the only order a
 * FIFO-matching plugin like TCPX can deliver correctly. A message larger
 * than its receive is drained into a scratch buffer and reported as
 * TPX_ERR_TRUNCATED; nothing is written past the receive.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"

#define CTRL_MAGIC 0x54505843u /* "TPXC" */
#define CTRL_VERSION 1
enum { CTRL_SEND_HDR = 1, CTRL_BYE = 2 };

typedef struct {
    uint16_t type;
    uint64_t seq, len;
} ctrl_msg_t;

static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }
static void put32(unsigned char *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t get32(const unsigned char *p) { return (uint32_t)get16(p) << 16 | get16(p + 2); }
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static void ctrl_encode(const ctrl_msg_t *m, unsigned char out[TPX_CTRL_MSG_SIZE])
{
    memset(out, 0, TPX_CTRL_MSG_SIZE);
    put32(out, CTRL_MAGIC);
    put16(out + 4, CTRL_VERSION);
    put16(out + 6, m->type);
    put64(out + 8, m->seq);
    put64(out + 16, m->len);
}

static tpx_status_t ctrl_decode(const unsigned char *in, ctrl_msg_t *m)
{
    if (get32(in) != CTRL_MAGIC || get16(in + 4) != CTRL_VERSION)
        return TPX_ERR_PROTOCOL;
    m->type = get16(in + 6);
    m->seq = get64(in + 8);
    m->len = get64(in + 16);
    if (m->type != CTRL_SEND_HDR && m->type != CTRL_BYE)
        return TPX_ERR_PROTOCOL;
    return TPX_OK;
}

void tpx__ctrl_bye(unsigned char msg[TPX_CTRL_MSG_SIZE])
{
    ctrl_encode(&(ctrl_msg_t){.type = CTRL_BYE}, msg);
}

/* ---- completion ---------------------------------------------------------------- */

static void xfer_free(tpx_xfer_t *x)
{
    free(x);
}

void tpx__xfer_complete(tpx_xfer_t *x, tpx_status_t st)
{
    if (x->state == XF_DONE)
        return;
    tpx_engine_t *e = x->e;
    tpx_peer_t *p = x->peer;
    x->state = XF_DONE;
    x->status = x->canceled && st == TPX_OK ? TPX_ERR_CANCELED : st;
    if (x->prev)
        x->prev->next = x->next;
    else if (p->active == x)
        p->active = x->next;
    if (x->next)
        x->next->prev = x->prev;
    x->next = x->prev = NULL;
    e->inflight--;
    e->ncompleted++;
    tpx_region_t *r = x->region;
    x->region = NULL;
    if (r != NULL) {
        r->xfers--;
        if (r->dead && r->xfers == 0 && r->refs == 0 && !r->guard)
            tpx__region_release(r);
    }
    uint64_t one = 1;
    ssize_t n = write(e->efd, &one, sizeof(one));
    (void)n;
    pthread_cond_broadcast(&e->cond);
    if (x->released)
        xfer_free(x);
    if (p->remote_closed && p->active == NULL && p->unexpected_n == 0 && p->state == PEER_READY)
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, "the peer closed the connection");
}

static void xfer_maybe_done(tpx_xfer_t *x)
{
    if (x->state == XF_ACTIVE && x->chunks_done == x->nchunks && !x->hdr_pending)
        tpx__xfer_complete(x, x->drain ? TPX_ERR_TRUNCATED : TPX_OK);
}

void tpx__xfer_chunk_done(tpx_xfer_t *x)
{
    x->chunks_done++;
    xfer_maybe_done(x);
}

/* ---- lanes: the chunks of a transfer on one data comm ----------------------------- */

static void lanes_enqueue(tpx_xfer_t *x, tpx_comm_t **comms)
{
    tpx_peer_t *p = x->peer;
    for (int k = 0; k < p->nchan; k++) {
        uint32_t j0 = (uint32_t)((k - x->first_chan + p->nchan) % p->nchan);
        if (j0 >= x->nchunks)
            continue;
        tpx_comm_t *c = comms[k];
        x->lane[k] = (tpx_lane_t){.next = NULL, .next_chunk = j0, .queued = 1};
        if (c->q_tail)
            c->q_tail->lane[k].next = x;
        else
            c->q_head = x;
        c->q_tail = x;
    }
}

static void lane_pop(tpx_comm_t *c)
{
    tpx_xfer_t *x = c->q_head;
    c->q_head = x->lane[c->chan].next;
    if (c->q_head == NULL)
        c->q_tail = NULL;
    x->lane[c->chan].next = NULL;
    x->lane[c->chan].queued = 0;
}

static int post_data(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    tpx_xfer_t *x = c->q_head;
    if (x == NULL)
        return 0;
    tpx_lane_t *l = &x->lane[c->chan];
    uint64_t off = (uint64_t)l->next_chunk * p->chunk;
    uint32_t len = (uint32_t)TPX_MIN((uint64_t)p->chunk, x->len - off);
    tpx_region_t *r = x->drain ? p->scratch_region : x->region;
    char *buf = x->drain ? (char *)p->scratch : (char *)x->region->base + x->off + off;
    void *mh;
    tpx_status_t st = tpx__region_mh(r, c, x->drain ? 0 : x->off + off, &mh);
    tpx_slot_t *s = &c->win.slots[c->win.posted % (uint64_t)c->win.cap];
    s->req = NULL;
    if (st == TPX_OK)
        st = c->is_send ? tpx__net_isend(e->net, c->comm, buf, len, 0, mh, &s->req)
                        : tpx__net_irecv(e->net, c->comm, buf, len, 0, mh, &s->req);
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, c->is_send ? "posting a send failed" : "posting a receive failed");
        return -1;
    }
    if (s->req == NULL)
        return 0; /* the plugin is busy: retry on the next progress call */
    s->kind = SLOT_DATA;
    s->tested = s->launched = 0;
    s->dst_dev = x->drain ? -1 : (int8_t)x->region->cuda_dev;
    s->dst = x->drain ? NULL : buf;
    s->x = x;
    s->len = len;
    c->win.posted++;
    l->next_chunk += (uint32_t)p->nchan;
    if (l->next_chunk >= x->nchunks)
        lane_pop(c);
    return 1;
}

static int post_ctrl(tpx_comm_t *c)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    if (p->outbox_n == 0 || p->ctrl_send_nfree == 0)
        return 0;
    uint32_t idx = p->ctrl_send_free[p->ctrl_send_nfree - 1];
    tpx_ctrl_out_t *o = &p->outbox[p->outbox_head];
    unsigned char *buf = p->ctrl_buf + (size_t)(e->window + idx) * TPX_CTRL_MSG_SIZE;
    memcpy(buf, o->msg, TPX_CTRL_MSG_SIZE);
    void *mh;
    tpx_slot_t *s = &c->win.slots[c->win.posted % (uint64_t)c->win.cap];
    s->req = NULL;
    tpx_status_t st = tpx__region_mh(p->ctrl_region, c, 0, &mh);
    if (st == TPX_OK)
        st = tpx__net_isend(e->net, c->comm, buf, TPX_CTRL_MSG_SIZE, 0, mh, &s->req);
    if (st != TPX_OK) {
        tpx__peer_fail(p, st, "posting a control message failed");
        return -1;
    }
    if (s->req == NULL)
        return 0;
    p->ctrl_send_nfree--;
    p->ctrl_send_owner[idx] = o->owner;
    p->outbox_head = (p->outbox_head + 1) % p->outbox_cap;
    p->outbox_n--;
    s->kind = SLOT_CTRL;
    s->tested = s->launched = 0;
    s->dst_dev = -1;
    s->dst = NULL;
    s->ctrl = (uint16_t)idx;
    s->len = TPX_CTRL_MSG_SIZE;
    s->x = NULL;
    c->win.posted++;
    return 1;
}

int tpx__comm_post_next(tpx_comm_t *c)
{
    if (c->is_ctrl)
        return c->is_send ? post_ctrl(c) : 0;
    return post_data(c);
}

/* ---- control messages ----------------------------------------------------------- */

tpx_status_t tpx__peer_ctrl_post(tpx_peer_t *p, const unsigned char msg[TPX_CTRL_MSG_SIZE],
                                 tpx_xfer_t *owner)
{
    if (p->outbox_n == p->outbox_cap) {
        uint32_t cap = p->outbox_cap ? p->outbox_cap * 2 : 64;
        tpx_ctrl_out_t *nb = malloc(cap * sizeof(*nb));
        if (nb == NULL)
            return TPX_ERR_NO_MEMORY;
        for (uint32_t i = 0; i < p->outbox_n; i++)
            nb[i] = p->outbox[(p->outbox_head + i) % p->outbox_cap];
        free(p->outbox);
        p->outbox = nb;
        p->outbox_cap = cap;
        p->outbox_head = 0;
    }
    tpx_ctrl_out_t *o = &p->outbox[(p->outbox_head + p->outbox_n) % p->outbox_cap];
    memcpy(o->msg, msg, TPX_CTRL_MSG_SIZE);
    o->owner = owner;
    p->outbox_n++;
    return TPX_OK;
}

void tpx__peer_ctrl_sent(tpx_peer_t *p, uint16_t idx)
{
    tpx_xfer_t *owner = p->ctrl_send_owner[idx];
    p->ctrl_send_owner[idx] = NULL;
    p->ctrl_send_free[p->ctrl_send_nfree++] = idx;
    if (owner != NULL) {
        owner->hdr_pending = 0;
        xfer_maybe_done(owner);
    }
}

/* Start receiving the message announced by `m` into receive `x`. */
static void recv_match(tpx_peer_t *p, tpx_xfer_t *x, const ctrl_msg_t *m)
{
    x->len = m->len;
    x->seq = m->seq;
    if (m->len > x->cap) {
        x->drain = 1;
        TPX_WARN("peer %s: message %llu of %llu bytes is larger than the receive of %llu bytes: "
                 "discarded (TPX_ERR_TRUNCATED)", p->name, (unsigned long long)m->seq,
                 (unsigned long long)m->len, (unsigned long long)x->cap);
    }
    x->nchunks = (uint32_t)((m->len + p->chunk - 1) / p->chunk);
    x->first_chan = p->recv_cursor;
    p->recv_cursor = (int)((p->recv_cursor + x->nchunks) % (uint32_t)p->nchan);
    x->state = XF_ACTIVE;
    if (x->nchunks == 0) {
        xfer_maybe_done(x);
        return;
    }
    lanes_enqueue(x, p->recv);
}

void tpx__peer_ctrl_received(tpx_peer_t *p, const unsigned char *msg)
{
    ctrl_msg_t m;
    if (ctrl_decode(msg, &m) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "malformed control message");
        return;
    }
    if (m.type == CTRL_BYE) {
        tpx__peer_remote_closed(p, "the peer closed the connection");
        return;
    }
    if (m.seq != p->recv_seq) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "control messages out of sequence");
        return;
    }
    p->recv_seq++;
    if (m.len > ((uint64_t)1 << 48)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "announced message size is absurd");
        return;
    }
    if (p->recv_pending_n > 0) {
        tpx_xfer_t *x = p->recv_pending[0];
        memmove(p->recv_pending, p->recv_pending + 1,
                (p->recv_pending_n - 1) * sizeof(*p->recv_pending));
        p->recv_pending_n--;
        recv_match(p, x, &m);
        return;
    }
    if (p->unexpected_n == p->unexpected_cap) {
        uint32_t cap = p->unexpected_cap ? p->unexpected_cap * 2 : 64;
        unsigned char(*nb)[TPX_CTRL_MSG_SIZE] = malloc(cap * sizeof(*nb));
        if (nb == NULL) {
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for an early message header");
            return;
        }
        for (uint32_t i = 0; i < p->unexpected_n; i++)
            memcpy(nb[i], p->unexpected[(p->unexpected_head + i) % p->unexpected_cap],
                   TPX_CTRL_MSG_SIZE);
        free(p->unexpected);
        p->unexpected = nb;
        p->unexpected_cap = cap;
        p->unexpected_head = 0;
    }
    memcpy(p->unexpected[(p->unexpected_head + p->unexpected_n) % p->unexpected_cap], msg,
           TPX_CTRL_MSG_SIZE);
    p->unexpected_n++;
}

/* ---- failure, deadlines, liveness -------------------------------------------------- */

void tpx__peer_remote_closed(tpx_peer_t *p, const char *why)
{
    if (p->state != PEER_READY || p->remote_closed)
        return;
    p->remote_closed = 1;
    /* Messages already announced are still delivered; receives waiting for
     * a message the peer will never send end now. */
    uint32_t n = p->recv_pending_n;
    p->recv_pending_n = 0;
    if (n > 0)
        TPX_WARN("peer %s: %s with %u receive(s) waiting for a message", p->name, why, n);
    else
        TPX_INFO("peer %s: %s", p->name, why);
    for (uint32_t i = 0; i < n; i++)
        tpx__xfer_complete(p->recv_pending[i], TPX_ERR_CONN_RESET);
    if (p->active == NULL && p->unexpected_n == 0)
        tpx__peer_fail(p, TPX_ERR_CONN_RESET, why);
}

void tpx__peer_fail(tpx_peer_t *p, tpx_status_t st, const char *why)
{
    if (p->state != PEER_READY)
        return;
    p->state = PEER_FAILED;
    p->error = st;
    if (p->active != NULL || p->recv_pending_n > 0)
        TPX_WARN("peer %s: %s (%s); its transfers end with this error", p->name, why,
                 tpx_status_string(st));
    else
        TPX_INFO("peer %s: %s (%s)", p->name, why, tpx_status_string(st));
    for (uint32_t i = 0; i < p->recv_pending_n; i++)
        tpx__xfer_complete(p->recv_pending[i], st);
    p->recv_pending_n = 0;
    while (p->active != NULL)
        tpx__xfer_complete(p->active, st);
    for (int k = 0; k < p->nchan; k++) {
        if (p->send[k])
            p->send[k]->q_head = p->send[k]->q_tail = NULL;
        if (p->recv[k])
            p->recv[k]->q_head = p->recv[k]->q_tail = NULL;
    }
}

static void peer_sweep(tpx_peer_t *p, uint64_t now)
{
    /* The bootstrap connection stays open for the peer's life: EOF on it
     * means the peer process is gone, whatever the plugin reports. */
    if (p->bs != NULL && p->bs_eof_ns == 0) {
        uint16_t type;
        unsigned char buf[64];
        uint32_t len;
        tpx_status_t st = tpx__bs_recv(p->bs, &type, buf, sizeof(buf), &len);
        if (st != TPX_INPROGRESS && st != TPX_OK)
            p->bs_eof_ns = now;
    }
    /* A peer that closes says goodbye on the control stream first; a
     * bootstrap EOF with no goodbye within 200 ms is a process that died. */
    if (p->bs_eof_ns != 0 && !p->remote_closed && now - p->bs_eof_ns > 200 * 1000000ull) {
        tpx__peer_fail(p, TPX_ERR_CONN_RESET,
                       "the peer's bootstrap connection closed without a goodbye (process gone?)");
        return;
    }
    for (uint32_t i = 0; i < p->recv_pending_n;) {
        tpx_xfer_t *x = p->recv_pending[i];
        if (now >= x->deadline_ns) {
            memmove(p->recv_pending + i, p->recv_pending + i + 1,
                    (p->recv_pending_n - i - 1) * sizeof(*p->recv_pending));
            p->recv_pending_n--;
            tpx__xfer_complete(x, TPX_ERR_TIMED_OUT);
            continue;
        }
        i++;
    }
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next) {
        if (x->state == XF_ACTIVE && now >= x->deadline_ns) {
            /* Its chunks are in the peer's FIFO: the connection cannot be
             * kept in step without them, so the whole peer fails. */
            tpx__peer_fail(p, TPX_ERR_TIMED_OUT, "a transfer passed its deadline");
            return;
        }
    }
}

void tpx__engine_sweep(tpx_engine_t *e)
{
    uint64_t now = tpx__now_ns();
    if (now - e->sweep_ns < 10 * 1000000ull)
        return;
    e->sweep_ns = now;
    if (e->reap != NULL && !e->bs_started)
        tpx__engine_reap(e);
    for (tpx_peer_t *p = e->peers; p != NULL; p = p->next)
        if (p->state == PEER_READY)
            peer_sweep(p, now);
}

/* ---- the API ------------------------------------------------------------------------ */

static tpx_status_t xfer_new(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                             tpx_xfer_kind_t kind, tpx_xfer_t **user_out, tpx_xfer_t **out)
{
    const char *fn = kind == XK_SEND ? "tpx_send" : "tpx_recv";
    if (p == NULL || r == NULL || user_out == NULL) {
        TPX_ERROR("%s: NULL %s", fn, p == NULL ? "peer" : r == NULL ? "region" : "xfer pointer");
        return TPX_ERR_INVALID_ARG;
    }
    if (r->e != p->e || r->dead) {
        TPX_ERROR("%s: the region is %s", fn, r->dead ? "deregistered" : "of another engine");
        return TPX_ERR_INVALID_ARG;
    }
    if (offset > r->len || len > r->len - offset) {
        TPX_ERROR("%s: bytes [%zu, %zu) are outside the registered region of %zu bytes", fn,
                  offset, offset + len, r->len);
        return TPX_ERR_INVALID_ARG;
    }
    tpx_xfer_t *x = calloc(1, sizeof(*x) + (size_t)p->nchan * sizeof(tpx_lane_t));
    if (x == NULL)
        return TPX_ERR_NO_MEMORY;
    x->e = p->e;
    x->peer = p;
    x->kind = kind;
    x->region = r;
    x->off = offset;
    x->cap = len;
    x->len = len;
    x->status = TPX_INPROGRESS;
    x->deadline_ns = tpx__now_ns() + (uint64_t)p->e->timeout_ms * 1000000ull;
    *out = x;
    return TPX_OK;
}

static void xfer_attach(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    x->region->xfers++;
    x->next = p->active;
    if (p->active)
        p->active->prev = x;
    p->active = x;
    p->e->inflight++;
}

static tpx_status_t peer_usable(tpx_peer_t *p, const char *fn)
{
    /* After the peer's goodbye, a receive can still take a message it
     * announced before leaving (its data may sit in the kernel's buffers). */
    if (p->state == PEER_READY && p->remote_closed &&
        !(strcmp(fn, "tpx_recv") == 0 && p->unexpected_n > 0)) {
        TPX_ERROR("%s: peer %s has closed the connection", fn, p->name);
        return TPX_ERR_CONN_RESET;
    }
    if (p->state == PEER_READY)
        return TPX_OK;
    if (p->state == PEER_FAILED)
        return p->error; /* logged when it failed */
    TPX_ERROR("%s: the peer is closed", fn);
    return TPX_ERR_INVALID_STATE;
}

static void progress_kick(tpx_engine_t *e)
{
    if (e->progress_thread)
        pthread_cond_broadcast(&e->cond);
}

TPX_API tpx_status_t tpx_send(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_SEND, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    pthread_mutex_lock(&e->lock);
    st = peer_usable(p, "tpx_send");
    if (st != TPX_OK)
        goto err_unlock;
    x->seq = p->send_seq;
    x->nchunks = (uint32_t)((len + p->chunk - 1) / p->chunk);
    x->first_chan = p->send_cursor;
    x->hdr_pending = 1;
    unsigned char msg[TPX_CTRL_MSG_SIZE];
    ctrl_encode(&(ctrl_msg_t){.type = CTRL_SEND_HDR, .seq = x->seq, .len = len}, msg);
    st = tpx__peer_ctrl_post(p, msg, x);
    if (st != TPX_OK)
        goto err_unlock;
    p->send_seq++;
    p->send_cursor = (int)((p->send_cursor + x->nchunks) % (uint32_t)p->nchan);
    x->state = XF_ACTIVE;
    xfer_attach(x);
    lanes_enqueue(x, p->send);
    tpx__comm_kick(p->ctrl_send);
    for (int k = 0; k < p->nchan && k < (int)x->nchunks; k++)
        tpx__comm_kick(p->send[(x->first_chan + k) % p->nchan]);
    progress_kick(e);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    free(x);
    return st;
}

TPX_API tpx_status_t tpx_recv(tpx_peer_t *p, tpx_region_t *r, size_t offset, size_t len,
                              tpx_xfer_t **out)
{
    tpx_xfer_t *x;
    tpx_status_t st = xfer_new(p, r, offset, len, XK_RECV, out, &x);
    if (st != TPX_OK)
        return st;
    tpx_engine_t *e = p->e;
    pthread_mutex_lock(&e->lock);
    st = peer_usable(p, "tpx_recv");
    if (st != TPX_OK)
        goto err_unlock;
    if (p->recv_pending_n == p->recv_pending_cap) {
        uint32_t cap = p->recv_pending_cap ? p->recv_pending_cap * 2 : 64;
        tpx_xfer_t **nb = realloc(p->recv_pending, cap * sizeof(*nb));
        if (nb == NULL) {
            st = TPX_ERR_NO_MEMORY;
            goto err_unlock;
        }
        p->recv_pending = nb;
        p->recv_pending_cap = cap;
    }
    x->state = XF_QUEUED;
    xfer_attach(x);
    if (p->unexpected_n > 0) {
        ctrl_msg_t m;
        (void)ctrl_decode(p->unexpected[p->unexpected_head], &m); /* checked on arrival */
        p->unexpected_head = (p->unexpected_head + 1) % p->unexpected_cap;
        p->unexpected_n--;
        recv_match(p, x, &m);
        for (int k = 0; k < p->nchan && k < (int)x->nchunks; k++)
            tpx__comm_kick(p->recv[(x->first_chan + k) % p->nchan]);
        if (p->ctrl_nidle > 0 && p->unexpected_n < TPX_MAX_UNEXPECTED)
            (void)tpx__ctrl_repost(p->ctrl_recv);
    } else {
        p->recv_pending[p->recv_pending_n++] = x;
    }
    progress_kick(e);
    pthread_mutex_unlock(&e->lock);
    *out = x;
    return TPX_OK;

err_unlock:
    pthread_mutex_unlock(&e->lock);
    free(x);
    return st;
}

static tpx_status_t xfer_result(tpx_xfer_t *x, size_t *bytes)
{
    if (x->state != XF_DONE)
        return TPX_INPROGRESS;
    if (bytes != NULL)
        *bytes = x->status == TPX_OK ? x->len : 0;
    return x->status;
}

TPX_API tpx_status_t tpx_xfer_poll(tpx_xfer_t *x, size_t *bytes)
{
    if (x == NULL || x->released) {
        TPX_ERROR("tpx_xfer_poll: invalid transfer handle");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_engine_t *e = x->e;
    tpx__engine_fd_clear(e);
    pthread_mutex_lock(&e->lock);
    if (x->state != XF_DONE && !e->progress_thread)
        (void)tpx__engine_progress_locked(e);
    tpx_status_t st = xfer_result(x, bytes);
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API tpx_status_t tpx_xfer_wait(tpx_xfer_t *x, int timeout_ms, size_t *bytes)
{
    if (x == NULL || x->released) {
        TPX_ERROR("tpx_xfer_wait: invalid transfer handle");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_engine_t *e = x->e;
    uint64_t limit = timeout_ms < 0 ? UINT64_MAX
                                    : tpx__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    pthread_mutex_lock(&e->lock);
    while (x->state != XF_DONE) {
        uint64_t now = tpx__now_ns();
        if (now >= limit) {
            pthread_mutex_unlock(&e->lock);
            return TPX_INPROGRESS;
        }
        if (e->progress_thread) {
            /* The deadline sweep of the progress thread ends the transfer
             * at its deadline; wake up at least every 100 ms regardless. */
            uint64_t until = TPX_MIN(limit, now + 100 * 1000000ull);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t ns = (uint64_t)ts.tv_nsec + (until - now);
            ts.tv_sec += (time_t)(ns / 1000000000ull);
            ts.tv_nsec = (long)(ns % 1000000000ull);
            pthread_cond_timedwait(&e->cond, &e->lock, &ts);
        } else {
            if (tpx__engine_progress_locked(e) == 0) {
                pthread_mutex_unlock(&e->lock);
                sched_yield();
                pthread_mutex_lock(&e->lock);
            }
        }
    }
    tpx_status_t st = xfer_result(x, bytes);
    pthread_mutex_unlock(&e->lock);
    tpx__engine_fd_clear(e);
    return st;
}

TPX_API tpx_status_t tpx_xfer_cancel(tpx_xfer_t *x)
{
    if (x == NULL || x->released) {
        TPX_ERROR("tpx_xfer_cancel: invalid transfer handle");
        return TPX_ERR_INVALID_ARG;
    }
    tpx_engine_t *e = x->e;
    tpx_status_t st = TPX_OK;
    pthread_mutex_lock(&e->lock);
    tpx_peer_t *p = x->peer;
    if (x->state == XF_QUEUED) {
        for (uint32_t i = 0; i < p->recv_pending_n; i++) {
            if (p->recv_pending[i] == x) {
                memmove(p->recv_pending + i, p->recv_pending + i + 1,
                        (p->recv_pending_n - i - 1) * sizeof(*p->recv_pending));
                p->recv_pending_n--;
                break;
            }
        }
        tpx__xfer_complete(x, TPX_ERR_CANCELED);
    } else if (x->state == XF_ACTIVE) {
        x->canceled = 1;
        st = TPX_INPROGRESS;
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

TPX_API void tpx_xfer_release(tpx_xfer_t *x)
{
    if (x == NULL)
        return;
    tpx_engine_t *e = x->e;
    pthread_mutex_lock(&e->lock);
    if (x->state == XF_DONE) {
        pthread_mutex_unlock(&e->lock);
        xfer_free(x);
        return;
    }
    if (x->state == XF_QUEUED) {
        pthread_mutex_unlock(&e->lock);
        (void)tpx_xfer_cancel(x);
        pthread_mutex_lock(&e->lock);
        if (x->state == XF_DONE) {
            pthread_mutex_unlock(&e->lock);
            xfer_free(x);
            return;
        }
    }
    x->canceled = 1;
    x->released = 1; /* freed when it completes */
    pthread_mutex_unlock(&e->lock);
}
