/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c - encoders and checked decoders of the engine's wire formats
 * (layouts in wire.h).
 */
#include <string.h>

#include "common/bytes.h"
#include "wire.h"

#define CTRL_MAGIC 0x54505843u /* "TPXC" */
#define CTRL_VERSION 11 /* 3: a WRITE's notification travels with it; 4: request lists v2
                          (the packing bound travels with the list); 5: bodies (INLINE);
                          6: two-sided transfers move in runs of chunks (xfer.h); 7: a
                          lone small chunk leaves the channel cursor (tpx__stream_cursor_move);
                          8: a WRITE's list (and notification) in the RMA_REQ (flag LIST);
                          9: a lost data channel is repaired (REPAIR, REPAIR_ACK), and the
                          receiver of a two-sided message or a READ's data confirms it
                          (RECV_DONE); 10: a REPAIR names its cut by lane and by the point
                          of the control order where that lane was queued (cut_lane,
                          cut_at), so losses may overlap; 11: the control stream may move
                          to the bootstrap connection (TPX_MSG_CTRL, TPX_MSG_CTRL_SEEN) */
#define LIST_MAGIC 0x5450584cu /* "TPXL" */
#define LIST_VERSION 2 /* 2: pack_max; 3 (TPX_LIST_VERSION_STRIDED): strided entries, only
                          in lists that have one */
#define RDESC_MAGIC 0x54505844u /* "TPXD" */
#define RDESC_VERSION 1
#define MD_MAGIC 0x5450584du /* "TPXM" */
#define MD_VERSION 2
#define MD_FLAG_KEY 1u

/* ---- control messages --------------------------------------------------------------- */

void tpx__ctrl_encode(const tpx_ctrl_t *m, unsigned char out[TPX_CTRL_SIZE])
{
    memset(out, 0, TPX_CTRL_SIZE);
    tpx__put32(out, CTRL_MAGIC);
    tpx__put16(out + 4, CTRL_VERSION);
    tpx__put16(out + 6, m->type);
    tpx__put64(out + 8, m->seq);
    switch (m->type) {
    case TPX_CTRL_SEND_HDR:
        tpx__put64(out + 16, m->len);
        break;
    case TPX_CTRL_RMA_REQ:
        tpx__put64(out + 16, m->rid);
        out[24] = m->op;
        out[25] = m->flags;
        tpx__put32(out + 28, m->nent);
        tpx__put64(out + 32, m->total);
        tpx__put64(out + 40, m->list_len);
        tpx__put32(out + 48, m->nchunks);
        tpx__put32(out + 52, m->body_len);
        tpx__put16(out + 56, m->notif_total);
        break;
    case TPX_CTRL_RMA_RESP:
        tpx__put64(out + 16, m->rid);
        tpx__put32(out + 24, (uint32_t)m->status);
        tpx__put32(out + 28, m->nchunks);
        tpx__put64(out + 32, m->total);
        out[40] = m->flags;
        tpx__put32(out + 44, m->body_len);
        break;
    case TPX_CTRL_RMA_CANCEL:
        tpx__put64(out + 16, m->rid);
        break;
    case TPX_CTRL_REPAIR:
        tpx__put64(out + 16, m->cut_seq);
        tpx__put32(out + 24, m->cut_chunk);
        out[28] = m->chan;
        out[29] = m->cut_lane;
        tpx__put64(out + 32, m->cut_at);
        break;
    case TPX_CTRL_REPAIR_ACK:
    case TPX_CTRL_REJOIN:
        out[16] = m->chan;
        break;
    case TPX_CTRL_RECV_DONE:
        out[16] = m->ndone;
        for (int i = 0; i < m->ndone && i < TPX_CTRL_DONE_MAX; i++)
            tpx__put64(out + 24 + 8 * i, m->done[i]);
        break;
    case TPX_CTRL_NOTIF:
        tpx__put16(out + 16, m->notif_total);
        tpx__put16(out + 18, m->notif_off);
        out[20] = m->part_len;
        out[21] = m->flags;
        memcpy(out + 24, m->part,
               m->part_len < TPX_CTRL_NOTIF_PART ? m->part_len : TPX_CTRL_NOTIF_PART);
        break;
    default:
        break;
    }
}

int tpx__ctrl_version(const unsigned char in[TPX_CTRL_SIZE])
{
    return tpx__get32(in) == CTRL_MAGIC ? (int)tpx__get16(in + 4) : -1;
}

int tpx__ctrl_version_ours(void) { return CTRL_VERSION; }

tpx_status_t tpx__ctrl_decode(const unsigned char in[TPX_CTRL_SIZE], tpx_ctrl_t *out)
{
    if (tpx__get32(in) != CTRL_MAGIC || tpx__get16(in + 4) != CTRL_VERSION)
        return TPX_ERR_PROTOCOL;
    tpx_ctrl_t m;
    memset(&m, 0, sizeof(m));
    m.type = tpx__get16(in + 6);
    m.seq = tpx__get64(in + 8);
    size_t used; /* bytes of the message the type uses; the rest must be zero */
    switch (m.type) {
    case TPX_CTRL_SEND_HDR:
        m.len = tpx__get64(in + 16);
        used = 24;
        break;
    case TPX_CTRL_BYE:
        used = 16;
        break;
    case TPX_CTRL_RMA_REQ:
        m.rid = tpx__get64(in + 16);
        m.op = in[24];
        m.flags = in[25];
        if (!tpx__all_zero(in + 26, 2) ||
            (m.flags & ~(TPX_CTRL_REQ_NOTIF | TPX_CTRL_REQ_INLINE | TPX_CTRL_REQ_ANSWER_INLINE |
                         TPX_CTRL_REQ_NOTIF_INLINE | TPX_CTRL_REQ_LIST)) != 0 ||
            ((m.flags & TPX_CTRL_REQ_NOTIF) && m.op != TPX_WIRE_OP_WRITE) ||
            ((m.flags & TPX_CTRL_REQ_ANSWER_INLINE) && m.op != TPX_WIRE_OP_READ) ||
            ((m.flags & TPX_CTRL_REQ_LIST) &&
             (m.op != TPX_WIRE_OP_WRITE || (m.flags & TPX_CTRL_REQ_INLINE))) ||
            ((m.flags & TPX_CTRL_REQ_NOTIF_INLINE) &&
             (m.op != TPX_WIRE_OP_WRITE ||
              !(m.flags & (TPX_CTRL_REQ_INLINE | TPX_CTRL_REQ_LIST)) ||
              (m.flags & TPX_CTRL_REQ_NOTIF))))
            return TPX_ERR_PROTOCOL;
        m.nent = tpx__get32(in + 28);
        m.total = tpx__get64(in + 32);
        m.list_len = tpx__get64(in + 40);
        m.nchunks = tpx__get32(in + 48);
        m.body_len = tpx__get32(in + 52);
        m.notif_total = tpx__get16(in + 56);
        used = 58;
        if (m.notif_total > TPX_WIRE_NOTIF_MAX ||
            (m.notif_total != 0 && !(m.flags & TPX_CTRL_REQ_NOTIF_INLINE)))
            return TPX_ERR_PROTOCOL;
        if ((m.op != TPX_WIRE_OP_READ && m.op != TPX_WIRE_OP_WRITE) || m.nent == 0 ||
            m.nent > TPX_LIST_MAX_ENTRIES || m.list_len < TPX_LIST_SIZE(1, m.nent) ||
            m.list_len > TPX_LIST_SIZE_MAX(m.nent) || m.total < m.nent || m.nchunks == 0)
            return TPX_ERR_PROTOCOL;
        if (m.flags & (TPX_CTRL_REQ_INLINE | TPX_CTRL_REQ_LIST)) {
            /* total first: the sum must not wrap (list_len is bounded above) */
            int data = m.op == TPX_WIRE_OP_WRITE && (m.flags & TPX_CTRL_REQ_INLINE);
            uint64_t want = m.list_len + (data ? m.total : 0) + m.notif_total;
            if ((data && m.total > TPX_CTRL_BODY_MAX) || want > TPX_CTRL_BODY_MAX ||
                m.body_len != want)
                return TPX_ERR_PROTOCOL;
        } else if (m.body_len != 0) {
            return TPX_ERR_PROTOCOL;
        }
        break;
    case TPX_CTRL_RMA_RESP:
        m.rid = tpx__get64(in + 16);
        m.status = (int32_t)tpx__get32(in + 24);
        m.nchunks = tpx__get32(in + 28);
        m.total = tpx__get64(in + 32);
        m.flags = in[40];
        m.body_len = tpx__get32(in + 44);
        used = 48;
        if (m.status > 0 || (m.status != 0 && (m.nchunks != 0 || m.total != 0 || m.flags != 0)) ||
            (m.flags & ~(TPX_CTRL_RESP_NOTIFIED | TPX_CTRL_RESP_INLINE)) != 0 ||
            !tpx__all_zero(in + 41, 3))
            return TPX_ERR_PROTOCOL;
        if (m.flags & TPX_CTRL_RESP_INLINE) {
            if (m.nchunks != 0 || m.total == 0 || m.total > TPX_CTRL_BODY_MAX ||
                m.body_len != m.total || (m.flags & TPX_CTRL_RESP_NOTIFIED))
                return TPX_ERR_PROTOCOL;
        } else if (m.body_len != 0) {
            return TPX_ERR_PROTOCOL;
        }
        break;
    case TPX_CTRL_RMA_CANCEL:
        m.rid = tpx__get64(in + 16);
        used = 24;
        break;
    case TPX_CTRL_REPAIR:
        m.cut_seq = tpx__get64(in + 16);
        m.cut_chunk = tpx__get32(in + 24);
        m.chan = in[28];
        m.cut_lane = in[29];
        m.cut_at = tpx__get64(in + 32);
        used = 40;
        if (m.chan >= 32 || m.cut_lane >= 32 || !tpx__all_zero(in + 30, 2)) /* TPX_MAX_CHANNELS */
            return TPX_ERR_PROTOCOL;
        break;
    case TPX_CTRL_RECV_DONE:
        m.ndone = in[16];
        if (m.ndone == 0 || m.ndone > TPX_CTRL_DONE_MAX || !tpx__all_zero(in + 17, 7))
            return TPX_ERR_PROTOCOL;
        for (int i = 0; i < m.ndone; i++)
            m.done[i] = tpx__get64(in + 24 + 8 * i);
        used = 24 + 8 * (size_t)m.ndone;
        break;
    case TPX_CTRL_REPAIR_ACK:
    case TPX_CTRL_REJOIN:
        m.chan = in[16];
        used = 17;
        if (m.chan >= 32)
            return TPX_ERR_PROTOCOL;
        break;
    case TPX_CTRL_NOTIF:
        m.notif_total = tpx__get16(in + 16);
        m.notif_off = tpx__get16(in + 18);
        m.part_len = in[20];
        m.flags = in[21];
        if (!tpx__all_zero(in + 22, 2) || (m.flags & ~TPX_CTRL_NOTIF_HELD) != 0 || m.part_len > TPX_CTRL_NOTIF_PART ||
            m.notif_total > TPX_WIRE_NOTIF_MAX || m.notif_off > m.notif_total ||
            m.part_len > m.notif_total - m.notif_off ||
            (m.part_len == 0 && m.notif_total != 0) ||
            !tpx__all_zero(in + 24 + m.part_len, TPX_CTRL_NOTIF_PART - m.part_len))
            return TPX_ERR_PROTOCOL;
        memcpy(m.part, in + 24, m.part_len);
        used = TPX_CTRL_SIZE;
        break;
    default:
        return TPX_ERR_PROTOCOL;
    }
    if (!tpx__all_zero(in + used, TPX_CTRL_SIZE - used))
        return TPX_ERR_PROTOCOL;
    *out = m;
    return TPX_OK;
}

/* ---- request lists --------------------------------------------------------------------- */

void tpx__list_put_hdr(unsigned char *buf, const tpx_list_hdr_t *h)
{
    tpx__put32(buf, LIST_MAGIC);
    tpx__put16(buf + 4, h->version == TPX_LIST_VERSION_STRIDED ? TPX_LIST_VERSION_STRIDED
                                                                : LIST_VERSION);
    buf[6] = h->op;
    buf[7] = h->flags;
    tpx__put32(buf + 8, h->nkeys);
    tpx__put32(buf + 12, h->nent);
    tpx__put64(buf + 16, h->total);
    tpx__put32(buf + 24, h->pack_max);
    tpx__put32(buf + 28, h->pack_chunk);
}

void tpx__list_put_key(unsigned char *buf, uint32_t i, uint64_t key)
{
    tpx__put64(buf + TPX_LIST_HDR + 8 * (size_t)i, key);
}

static unsigned char *list_entry_at(const unsigned char *buf, uint32_t nkeys, uint32_t i)
{
    return (unsigned char *)buf + TPX_LIST_SIZE(nkeys, i);
}

void tpx__list_put_entry(unsigned char *buf, uint32_t nkeys, uint32_t i, uint32_t key_idx,
                         uint64_t off, uint64_t len)
{
    unsigned char *p = list_entry_at(buf, nkeys, i);
    tpx__put32(p, key_idx);
    tpx__put64(p + 4, off);
    tpx__put64(p + 12, len);
}

uint64_t tpx__list_key(const unsigned char *buf, uint32_t i)
{
    return tpx__get64(buf + TPX_LIST_HDR + 8 * (size_t)i);
}

void tpx__list_entry(const unsigned char *buf, uint32_t nkeys, uint32_t i, uint32_t *key_idx,
                     uint64_t *off, uint64_t *len)
{
    const unsigned char *p = list_entry_at(buf, nkeys, i);
    *key_idx = tpx__get32(p);
    *off = tpx__get64(p + 4);
    *len = tpx__get64(p + 12);
}

const char *tpx__sdesc_shape(const tpx_sdesc_t *d, uint64_t max_elems, uint64_t *nelem,
                             uint64_t *span)
{
    if (d->ndims > TPX_LIST_MAX_DIMS)
        return "more than 3 dimensions";
    if (d->elem == 0)
        return "an element of 0 bytes";
    uint64_t n = 1, s = 0;
    for (uint32_t k = 0; k < d->ndims; k++) {
        if (d->count[k] == 0)
            return "a dimension of count 0";
        if (n > max_elems / d->count[k])
            return "too many elements";
        n *= d->count[k];
        uint64_t c1 = d->count[k] - 1;
        if (d->stride[k] != 0 && c1 > UINT64_MAX / d->stride[k])
            return "offsets that wrap around";
        if (s + c1 * d->stride[k] < s)
            return "offsets that wrap around";
        s += c1 * d->stride[k];
    }
    if (s + d->elem < s || d->off + (s + d->elem) < d->off)
        return "offsets that wrap around";
    *nelem = n;
    *span = s + d->elem;
    return NULL;
}

const char *tpx__sdesc_disjoint(const tpx_sdesc_t *d)
{
    uint32_t idx[TPX_LIST_MAX_DIMS], n = 0;
    for (uint32_t k = 0; k < d->ndims && k < TPX_LIST_MAX_DIMS; k++)
        if (d->count[k] > 1)
            idx[n++] = k;
    for (uint32_t i = 1; i < n; i++) /* by stride, innermost (smallest) first */
        for (uint32_t j = i; j > 0 && d->stride[idx[j]] < d->stride[idx[j - 1]]; j--) {
            uint32_t t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    uint64_t ext = d->elem; /* bytes the dimensions inside this one cover */
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t k = idx[i];
        if (d->stride[k] < ext)
            return "elements that overlap";
        ext += (uint64_t)(d->count[k] - 1) * d->stride[k]; /* no wrap: shape checked */
    }
    return NULL;
}

/* A version-3 entry at buf + at (its bytes present: the caller checked). */
static size_t entry3_get(const unsigned char *buf, size_t at, uint32_t *key_idx, tpx_sdesc_t *d)
{
    const unsigned char *p = buf + at;
    memset(d, 0, sizeof(*d));
    *key_idx = tpx__get32(p);
    d->ndims = p[4];
    d->off = tpx__get64(p + 8);
    d->elem = tpx__get64(p + 16);
    for (uint32_t k = 0; k < d->ndims && k < TPX_LIST_MAX_DIMS; k++) {
        d->count[k] = tpx__get32(p + 24 + 12 * k);
        d->stride[k] = tpx__get64(p + 28 + 12 * k);
    }
    return TPX_LIST3_ENTRY(d->ndims);
}

size_t tpx__list_put_entry3(unsigned char *buf, size_t at, uint32_t key_idx,
                            const tpx_sdesc_t *d)
{
    unsigned char *p = buf + at;
    tpx__put32(p, key_idx);
    p[4] = (unsigned char)d->ndims;
    p[5] = p[6] = p[7] = 0;
    tpx__put64(p + 8, d->off);
    tpx__put64(p + 16, d->elem);
    for (uint32_t k = 0; k < d->ndims; k++) {
        tpx__put32(p + 24 + 12 * k, d->count[k]);
        tpx__put64(p + 28 + 12 * k, d->stride[k]);
    }
    return TPX_LIST3_ENTRY(d->ndims);
}

unsigned tpx__list_version(const unsigned char *buf, size_t len)
{
    return len >= 8 && tpx__get32(buf) == LIST_MAGIC ? tpx__get16(buf + 4) : 0;
}

unsigned tpx__list_version_mine(void) { return TPX_LIST_VERSION_STRIDED; }

void tpx__list_cursor_init(tpx_list_cursor_t *c, const unsigned char *buf,
                           const tpx_list_hdr_t *h)
{
    *c = (tpx_list_cursor_t){.buf = buf, .at = TPX_LIST_SIZE(h->nkeys, 0), .nkeys = h->nkeys,
                             .version = h->version};
}

void tpx__list_cursor_next(tpx_list_cursor_t *c, uint32_t *key_idx, tpx_sdesc_t *d)
{
    if (c->version == TPX_LIST_VERSION_STRIDED) {
        c->at += entry3_get(c->buf, c->at, key_idx, d);
    } else {
        memset(d, 0, sizeof(*d));
        tpx__list_entry(c->buf, c->nkeys, c->next, key_idx, &d->off, &d->elem);
        c->at += TPX_LIST_ENTRY;
    }
    c->next++;
}

/* Version 3's entries: each one's shape, then its elements through the
 * chunker, one block each (as the requester cut them). */
static tpx_status_t list3_check(const unsigned char *buf, size_t len, tpx_list_hdr_t *h,
                                tpx_chunker_t *ck)
{
    size_t at = TPX_LIST_SIZE(h->nkeys, 0);
    uint64_t sum = 0, nblocks = 0;
    for (uint32_t i = 0; i < h->nent; i++) {
        if (len - at < TPX_LIST3_ENTRY(0) || buf[at + 4] > TPX_LIST_MAX_DIMS ||
            buf[at + 5] != 0 || buf[at + 6] != 0 || buf[at + 7] != 0 ||
            len - at < TPX_LIST3_ENTRY(buf[at + 4]))
            return TPX_ERR_PROTOCOL;
        uint32_t k;
        tpx_sdesc_t d;
        at += entry3_get(buf, at, &k, &d);
        uint64_t n, span;
        if (k >= h->nkeys ||
            tpx__sdesc_shape(&d, TPX_LIST_MAX_ENTRIES - nblocks, &n, &span) != NULL)
            return TPX_ERR_PROTOCOL;
        /* the entry's bytes (elements may overlap: a READ's source) */
        if (d.elem > UINT64_MAX / n || sum + n * d.elem < sum)
            return TPX_ERR_PROTOCOL;
        sum += n * d.elem;
        nblocks += n;
        for (uint64_t j = 0; j < n; j++) {
            uint64_t c0;
            uint32_t po;
            int shared;
            tpx__chunker_add(ck, d.elem, &c0, &po, &shared);
        }
        if (ck->nchunks > UINT32_MAX)
            return TPX_ERR_PROTOCOL;
    }
    if (at != len || sum != h->total)
        return TPX_ERR_PROTOCOL;
    h->nblocks = (uint32_t)nblocks;
    return TPX_OK;
}

tpx_status_t tpx__list_check(const unsigned char *buf, size_t len, uint32_t chunk,
                             tpx_list_hdr_t *out, uint32_t *nchunks)
{
    if (len < TPX_LIST_HDR || chunk == 0 || tpx__get32(buf) != LIST_MAGIC ||
        (tpx__get16(buf + 4) != LIST_VERSION &&
         tpx__get16(buf + 4) != TPX_LIST_VERSION_STRIDED) ||
        buf[7] != 0)
        return TPX_ERR_PROTOCOL;
    tpx_list_hdr_t h = {.op = buf[6], .flags = buf[7], .nkeys = tpx__get32(buf + 8),
                        .nent = tpx__get32(buf + 12), .total = tpx__get64(buf + 16),
                        .pack_max = tpx__get32(buf + 24), .pack_chunk = tpx__get32(buf + 28),
                        .version = tpx__get16(buf + 4)};
    int v3 = h.version == TPX_LIST_VERSION_STRIDED;
    if ((h.op != TPX_WIRE_OP_READ && h.op != TPX_WIRE_OP_WRITE) || h.nent == 0 ||
        h.nent > TPX_LIST_MAX_ENTRIES || h.nkeys == 0 || h.nkeys > h.nent ||
        (!v3 && len != TPX_LIST_SIZE(h.nkeys, h.nent)) ||
        (v3 && (len < TPX_LIST_SIZE(h.nkeys, 0) ||
                len - TPX_LIST_SIZE(h.nkeys, 0) < TPX_LIST3_ENTRY(0) * (size_t)h.nent)) ||
        h.pack_max > chunk || h.pack_chunk > chunk ||
        (h.pack_chunk != 0 && h.pack_chunk < h.pack_max))
        return TPX_ERR_PROTOCOL;
    tpx_chunker_t ck = {.chunk = chunk, .pack_max = h.pack_max, .share = h.pack_chunk};
    if (v3) {
        if (list3_check(buf, len, &h, &ck) != TPX_OK)
            return TPX_ERR_PROTOCOL;
        *out = h;
        *nchunks = (uint32_t)ck.nchunks;
        return TPX_OK;
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < h.nent; i++) {
        uint32_t k;
        uint64_t off, n;
        tpx__list_entry(buf, h.nkeys, i, &k, &off, &n);
        if (k >= h.nkeys || n == 0 || off + n < off || sum + n < sum)
            return TPX_ERR_PROTOCOL;
        sum += n;
        uint64_t c0;
        uint32_t po;
        int shared;
        tpx__chunker_add(&ck, n, &c0, &po, &shared); /* no wrap: n / chunk, not n + chunk */
        if (ck.nchunks > UINT32_MAX)
            return TPX_ERR_PROTOCOL;
    }
    if (sum != h.total)
        return TPX_ERR_PROTOCOL;
    h.nblocks = h.nent;
    *out = h;
    *nchunks = (uint32_t)ck.nchunks;
    return TPX_OK;
}

/* ---- region descriptors ------------------------------------------------------------------ */

void tpx__rdesc_encode(const tpx_rdesc_fields_t *d, unsigned char out[TPX_WIRE_RDESC_SIZE])
{
    memset(out, 0, TPX_WIRE_RDESC_SIZE);
    tpx__put32(out, RDESC_MAGIC);
    out[4] = RDESC_VERSION;
    out[5] = d->mem_type;
    tpx__put64(out + 8, d->engine_id);
    tpx__put64(out + 16, d->key);
    tpx__put64(out + 24, d->addr);
    tpx__put64(out + 32, d->len);
    tpx__put32(out + 40, (uint32_t)d->gpu);
    tpx__put32(out + 44, tpx__fnv1a32(out, 44));
}

tpx_status_t tpx__rdesc_decode(const unsigned char in[TPX_WIRE_RDESC_SIZE], tpx_rdesc_fields_t *d)
{
    if (tpx__get32(in) != RDESC_MAGIC || in[4] != RDESC_VERSION || (in[5] != 1 && in[5] != 2) ||
        tpx__get16(in + 6) != 0 || tpx__get32(in + 44) != tpx__fnv1a32(in, 44))
        return TPX_ERR_PROTOCOL;
    tpx_rdesc_fields_t t = {.mem_type = in[5], .engine_id = tpx__get64(in + 8),
                            .key = tpx__get64(in + 16), .addr = tpx__get64(in + 24),
                            .len = tpx__get64(in + 32), .gpu = (int32_t)tpx__get32(in + 40)};
    if (t.len == 0 || t.key == 0)
        return TPX_ERR_PROTOCOL;
    *d = t;
    return TPX_OK;
}

/* ---- metadata blobs ------------------------------------------------------------------------ */

static int put_str(unsigned char *buf, size_t cap, size_t *at, const char *s)
{
    size_t n = strnlen(s, TPX_MD_STR);
    if (n >= TPX_MD_STR)
        return -1;
    if (*at + 1 + n <= cap) {
        buf[*at] = (unsigned char)n;
        memcpy(buf + *at + 1, s, n);
    }
    *at += 1 + n;
    return 0;
}

tpx_status_t tpx__md_encode(const tpx_md_t *md, unsigned char *buf, size_t cap, size_t *len)
{
    if (md->nnics > TPX_MD_MAX_NICS || md->naddrs > TPX_MD_MAX_ADDRS)
        return TPX_ERR_INVALID_ARG;
    size_t at = 40;
    int bad = put_str(buf, cap, &at, md->name) | put_str(buf, cap, &at, md->plugin);
    for (int i = 0; i < md->nnics; i++) {
        bad |= put_str(buf, cap, &at, md->nic[i]);
        if (at + 4 <= cap)
            tpx__put32(buf + at, md->nic_speed[i]);
        at += 4;
    }
    for (int i = 0; i < md->naddrs; i++)
        bad |= put_str(buf, cap, &at, md->addr[i]);
    if (md->has_key) {
        if (at + TPX_MD_KEY <= cap)
            memcpy(buf + at, md->key, TPX_MD_KEY);
        at += TPX_MD_KEY;
    }
    if (bad || at > TPX_MD_MAX)
        return TPX_ERR_INVALID_ARG;
    if (at > cap) {
        *len = at;
        return TPX_ERR_INVALID_ARG;
    }
    tpx__put32(buf, MD_MAGIC);
    tpx__put16(buf + 4, MD_VERSION);
    tpx__put16(buf + 6, 0);
    tpx__put32(buf + 8, (uint32_t)at);
    tpx__put32(buf + 12, 0);
    tpx__put64(buf + 16, md->engine_id);
    tpx__put32(buf + 24, (uint32_t)md->gpu);
    tpx__put32(buf + 28, md->chunk);
    tpx__put16(buf + 32, md->channels);
    tpx__put16(buf + 34, md->port);
    buf[36] = md->nnics;
    buf[37] = md->naddrs;
    tpx__put16(buf + 38, md->has_key ? MD_FLAG_KEY : 0);
    tpx__put32(buf + 12, tpx__fnv1a32(buf, at));
    *len = at;
    return TPX_OK;
}

/* A string of the blob into out[TPX_MD_STR]: printable ASCII only. */
static int get_str(const unsigned char *buf, size_t len, size_t *at, char *out, int allow_empty)
{
    if (*at >= len)
        return -1;
    size_t n = buf[*at];
    if (n >= TPX_MD_STR || n > len - *at - 1 || (n == 0 && !allow_empty))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (buf[*at + 1 + i] < 0x20 || buf[*at + 1 + i] > 0x7e)
            return -1;
    memcpy(out, buf + *at + 1, n);
    out[n] = '\0';
    *at += 1 + n;
    return 0;
}

unsigned tpx__md_version(const void *blob, size_t len)
{
    const unsigned char *buf = blob;
    return len >= 8 && tpx__get32(buf) == MD_MAGIC ? tpx__get16(buf + 4) : 0;
}

unsigned tpx__md_version_mine(void) { return MD_VERSION; }

tpx_status_t tpx__md_decode(const unsigned char *buf, size_t len, tpx_md_t *out)
{
    if (len < 40 || len > TPX_MD_MAX || tpx__get32(buf) != MD_MAGIC ||
        tpx__get16(buf + 4) != MD_VERSION || tpx__get16(buf + 6) != 0 ||
        tpx__get32(buf + 8) != len || (tpx__get16(buf + 38) & ~MD_FLAG_KEY) != 0)
        return TPX_ERR_PROTOCOL;
    /* checksum over the blob with its own field zeroed */
    uint32_t want = tpx__get32(buf + 12);
    uint32_t h = tpx__fnv1a32(buf, 12);
    static const unsigned char zero4[4];
    for (int i = 0; i < 4; i++)
        h = (h ^ zero4[i]) * 16777619u;
    for (size_t i = 16; i < len; i++)
        h = (h ^ buf[i]) * 16777619u;
    if (h != want)
        return TPX_ERR_PROTOCOL;
    static tpx_md_t zero;
    tpx_md_t m = zero;
    m.engine_id = tpx__get64(buf + 16);
    m.gpu = (int32_t)tpx__get32(buf + 24);
    m.chunk = tpx__get32(buf + 28);
    m.channels = tpx__get16(buf + 32);
    m.port = tpx__get16(buf + 34);
    m.nnics = buf[36];
    m.naddrs = buf[37];
    if (m.gpu < -1 || m.chunk < 4096 || m.chunk > 4u * 1024 * 1024 || m.channels == 0 ||
        m.port == 0 || m.nnics > TPX_MD_MAX_NICS || m.naddrs == 0 || m.naddrs > TPX_MD_MAX_ADDRS)
        return TPX_ERR_PROTOCOL;
    size_t at = 40;
    if (get_str(buf, len, &at, m.name, 0) || get_str(buf, len, &at, m.plugin, 0))
        return TPX_ERR_PROTOCOL;
    for (int i = 0; i < m.nnics; i++) {
        if (get_str(buf, len, &at, m.nic[i], 0) || len - at < 4)
            return TPX_ERR_PROTOCOL;
        m.nic_speed[i] = tpx__get32(buf + at);
        at += 4;
    }
    for (int i = 0; i < m.naddrs; i++)
        if (get_str(buf, len, &at, m.addr[i], 0))
            return TPX_ERR_PROTOCOL;
    if (tpx__get16(buf + 38) & MD_FLAG_KEY) {
        if (len - at < TPX_MD_KEY)
            return TPX_ERR_PROTOCOL;
        m.has_key = 1;
        memcpy(m.key, buf + at, TPX_MD_KEY);
        at += TPX_MD_KEY;
    }
    if (at != len)
        return TPX_ERR_PROTOCOL;
    *out = m;
    return TPX_OK;
}

/* ---- IDENT ------------------------------------------------------------------------------ */

#define IDENT_MAGIC 0x54505849u /* "TPXI" */
#define IDENT_FLAGS (TPX_IDENT_F_KEY | TPX_IDENT_F_TICKET | TPX_IDENT_F_PROOF | TPX_IDENT_F_OFFER)

/* Where each optional field lies, and the flag that says it is set. */
static const struct {
    unsigned flag;
    size_t off, len;
} ident_fields[] = {
    {TPX_IDENT_F_KEY, 8, 32 + 64},
    {TPX_IDENT_F_TICKET, 104, TPX_IDENT_TICKET_ID},
    {TPX_IDENT_F_PROOF, 120, TPX_IDENT_TICKET},
    {TPX_IDENT_F_OFFER, 152, TPX_IDENT_TICKET_ID + TPX_IDENT_TICKET},
};
_Static_assert(152 + TPX_IDENT_TICKET_ID + TPX_IDENT_TICKET == TPX_IDENT_WIRE_SIZE,
               "IDENT layout");

void tpx__ident_encode(const tpx_ident_msg_t *m, unsigned char out[TPX_IDENT_WIRE_SIZE])
{
    memset(out, 0, TPX_IDENT_WIRE_SIZE);
    tpx__put32(out, IDENT_MAGIC);
    tpx__put16(out + 4, TPX_IDENT_VERSION);
    tpx__put16(out + 6, (uint16_t)(m->flags & IDENT_FLAGS));
    if (m->flags & TPX_IDENT_F_KEY) {
        memcpy(out + 8, m->pk, sizeof(m->pk));
        memcpy(out + 40, m->sig, sizeof(m->sig));
    }
    if (m->flags & TPX_IDENT_F_TICKET)
        memcpy(out + 104, m->ticket_id, sizeof(m->ticket_id));
    if (m->flags & TPX_IDENT_F_PROOF)
        memcpy(out + 120, m->proof, sizeof(m->proof));
    if (m->flags & TPX_IDENT_F_OFFER) {
        memcpy(out + 152, m->offer_id, sizeof(m->offer_id));
        memcpy(out + 168, m->offer, sizeof(m->offer));
    }
}

tpx_status_t tpx__ident_decode(const unsigned char *in, size_t len, tpx_ident_msg_t *m)
{
    if (len != TPX_IDENT_WIRE_SIZE || tpx__get32(in) != IDENT_MAGIC ||
        tpx__get16(in + 4) != TPX_IDENT_VERSION || (tpx__get16(in + 6) & ~IDENT_FLAGS) != 0)
        return TPX_ERR_PROTOCOL;
    tpx_ident_msg_t t;
    memset(&t, 0, sizeof(t));
    t.flags = tpx__get16(in + 6);
    for (size_t f = 0; f < sizeof(ident_fields) / sizeof(ident_fields[0]); f++) {
        if (t.flags & ident_fields[f].flag)
            continue;
        for (size_t i = ident_fields[f].off; i < ident_fields[f].off + ident_fields[f].len; i++)
            if (in[i] != 0)
                return TPX_ERR_PROTOCOL;
    }
    memcpy(t.pk, in + 8, sizeof(t.pk));
    memcpy(t.sig, in + 40, sizeof(t.sig));
    memcpy(t.ticket_id, in + 104, sizeof(t.ticket_id));
    memcpy(t.proof, in + 120, sizeof(t.proof));
    memcpy(t.offer_id, in + 152, sizeof(t.offer_id));
    memcpy(t.offer, in + 168, sizeof(t.offer));
    *m = t;
    return TPX_OK;
}

int tpx__ident_version(const unsigned char *in, size_t len)
{
    if (len < 8 || tpx__get32(in) != IDENT_MAGIC)
        return -1;
    return tpx__get16(in + 4);
}

/* ---- READY ------------------------------------------------------------------------- */

void tpx__ready_encode(uint32_t flags, unsigned char out[TPX_READY_WIRE_SIZE])
{
    tpx__put32(out, flags);
}

tpx_status_t tpx__ready_decode(const unsigned char *in, size_t len, tpx_ready_t *m)
{
    if (len != 0 && len != TPX_READY_WIRE_SIZE)
        return TPX_ERR_PROTOCOL;
    m->known = len != 0;
    m->flags = len != 0 ? tpx__get32(in) : 0;
    return TPX_OK;
}
