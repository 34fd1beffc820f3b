/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rma.c - one-sided READ and WRITE on a two-sided plugin, and notifications.
 *
 * The requester sends RMA_REQ on the control comm and the request list
 * (wire.h) as the first chunks of a message on the data comms; a WRITE's
 * payload follows in the same chunk stream. Both sides cut the list into
 * chunks of the peer's chunk size, and the entries with tpx_chunker_t
 * (wire.h): a large entry into chunks of its own, a run of small ones
 * (<= the list's pack_max, the requester's TPX_RMA_PACK_BYTES) packed back
 * to back into shared chunks of up to a chunk, never split. The chunker is
 * a pure function of the list and the chunk size, and pack_max travels in
 * the list, so both sides post identical sizes in identical order (FIFO
 * plugins, TCPX) whatever each engine's own setting; a shared chunk is
 * gathered into and scattered out of a per-comm staging buffer (pack.c:
 * memcpy, GPU blocks by one kernel launch and one sync per chunk). Control
 * version 4 / list version 2 carry pack_max; an engine of another version
 * is told so at its first control message (xfer.c) instead of guessing.
 *
 * The owner (a "target" transfer, XK_TWRITE / XK_TREAD) posts receives for
 * the list; the payload receives of a WRITE wait behind a gate. When the
 * list is in, it is checked (wire.c) and every entry is looked up in the
 * export table: key known, range inside the export, region registered.
 * Only then does data move: a WRITE's gate opens (a refused WRITE is
 * received into scratch and discarded), a READ answers RMA_RESP and sends
 * the bytes. A WRITE is answered with RMA_RESP once its bytes are in place.
 * The requester's transfer completes when all its chunks are done and the
 * answer came.
 *
 * Notifications: a WRITE's travels with its request (HELD NOTIF parts just
 * before the RMA_REQ, wire.h); the owner keeps it with the transfer and
 * delivers it when the WRITE's bytes are in place, just before it answers
 * -- not at all if the WRITE was refused or failed. A READ's can only be
 * sent when the requester has every byte: when its transfer completes.
 */
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/trace.h"
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "rma.h"
#include "window.h"
#include "xfer.h"
#include "remote.h"

_Static_assert(TPX_RDESC_SIZE == TPX_WIRE_RDESC_SIZE, "descriptor size");
_Static_assert(TPX_NOTIF_MAX == TPX_WIRE_NOTIF_MAX, "notification size");
_Static_assert(TPX_RMA_MAX_IOVS == TPX_LIST_MAX_ENTRIES, "list entries");
_Static_assert(TPX_CTRL_MSG_SIZE == TPX_CTRL_SIZE, "control message size");

/* A one-sided transfer's own allocation: its copy of a notification. */
static void expand_end(tpx_xfer_t *x);

static void rma_freed(tpx_xfer_t *x)
{
    if (x->kind == XK_TWRITE || x->kind == XK_TREAD)
        expand_end(x);
    free(x->rma.notif);
}

/* A requester waits for the owner's RMA_RESP after its last chunk. */
static int rma_answer_pending(const tpx_xfer_t *x)
{
    return x->req.resp_pending;
}

/* A READ's data comes from the owner's XK_TREAD, which waits for this
 * side's confirmation as a send waits for its receive's. */
static int rma_confirms_in(const tpx_xfer_t *x)
{
    return x->kind == XK_READ;
}

/* One-sided transfers, either role, as the files below this one see them
 * (xfer.h): they call none of these functions by name. */
static const tpx_xfer_ops_t rma_ops = {
    .completed = tpx__rma_completed,
    .body_fill = tpx__rma_body_fill,
    .list_chunk_done = tpx__rma_list_chunk_done,
    .canceled = tpx__rma_canceled,
    .freed = rma_freed,
    .answer_pending = rma_answer_pending,
    .confirms_in = rma_confirms_in,
};

static void rma_kinds_set(void)
{
    static const tpx_xfer_kind_t kinds[] = {XK_WRITE, XK_READ, XK_TWRITE, XK_TREAD};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        tpx__xfer_kind_ops(kinds[i], &rma_ops);
}

void tpx__rma_kinds(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, rma_kinds_set);
}

#define LISTBUF_MIN (64 * 1024)
/* Free list buffers kept per peer for reuse: a few small ones. A larger
 * buffer goes back to the system as soon as its request was checked. */
#define LISTBUF_POOL_MAX 4
#define LISTBUF_POOL_CAP (1024 * 1024)

/* A HELD notification received, waiting for its request to start. */
struct tpx_held {
    struct tpx_held *next;
    uint64_t rid;       /* its request's, once that came */
    int dropped;        /* the requester canceled it (RMA_CANCEL) */
    uint32_t len;
    unsigned char *msg; /* handed to the transfer as its notification */
};

struct tpx_listbuf {
    tpx_listbuf_t *next;
    unsigned char *buf;
    size_t cap;
    tpx_region_t *region;
};


/* a / b rounded up; not (a + b - 1) / b, which wraps near 2^64 */
static uint32_t div_up(uint64_t a, uint64_t b) { return (uint32_t)(a / b + (a % b != 0)); }

/* ---- inline bodies (wire.h: INLINE) ------------------------------------------------------- */

/* The bytes of a request's stream on the data channels from requester to
 * owner (its list unless the RMA_REQ's body carried it, and a WRITE's
 * data), as both sides count them for the channel cursor
 * (tpx__stream_cursor_move). */
static uint64_t stream_out_bytes(const tpx_xfer_t *x, int list_on_channels)
{
    int write = x->kind == XK_WRITE || x->kind == XK_TWRITE;
    return (list_on_channels ? x->rma.list_len : 0) + (write ? x->rma.total : 0);
}

static int segs_host(const tpx_seg_t *segs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (segs[i].region != NULL && segs[i].region->type != TPX_MEM_HOST)
            return 0;
    return 1;
}

/* The segments' bytes, in list order, into buf (host memory only). */
static void segs_gather(const tpx_seg_t *segs, uint32_t n, char *buf)
{
    for (uint32_t i = 0; i < n; i++) {
        memcpy(buf, (const char *)segs[i].region->base + segs[i].off, segs[i].len);
        buf += segs[i].len;
    }
}

/* buf, in list order, into the segments (host memory: inline bodies only
 * go to and come from host blocks; a segment without a region is skipped:
 * refused). */
static void segs_scatter(const tpx_seg_t *segs, uint32_t n, const char *buf)
{
    for (uint32_t i = 0; i < n; buf += segs[i].len, i++)
        if (segs[i].region != NULL)
            memcpy((char *)segs[i].region->base + segs[i].off, buf, segs[i].len);
}

tpx_status_t tpx__rma_body_fill(tpx_xfer_t *x, char *buf, uint32_t len)
{
    if (x->kind == XK_TREAD) { /* the answer's data; host blocks checked */
        if (len != x->rma.total)
            return TPX_ERR_INTERNAL;
        segs_gather(x->segs, x->nsegs, buf);
        return TPX_OK;
    }
    /* the request: list, then an INLINE WRITE's data, then a WRITE's
     * notification (INLINE or LIST) */
    uint32_t nl = x->req.notif_inline ? x->rma.notif_len : 0;
    uint64_t data = x->kind == XK_WRITE && x->req.inline_req ? x->rma.total : 0;
    if (len != x->rma.list_len + data + nl)
        return TPX_ERR_INTERNAL;
    memcpy(buf, x->rma.list, x->rma.list_len);
    if (data > 0)
        segs_gather(x->segs, x->nsegs, buf + x->rma.list_len);
    if (nl > 0)
        memcpy(buf + x->rma.list_len + data, x->rma.notif, nl);
    return TPX_OK;
}

/* ---- buffers for incoming request lists (per peer, reused) ------------------------------ */

static size_t listbuf_cap(size_t len)
{
    size_t cap = LISTBUF_MIN;
    while (cap < len)
        cap *= 2;
    return cap;
}

/* What checking a list of nent entries allocates and keeps (target_check:
 * a segment per entry, a region pointer per key, nkeys <= nent). */
static uint64_t seg_book(uint32_t nent)
{
    return (uint64_t)nent * (sizeof(tpx_seg_t) + sizeof(tpx_region_t *));
}

static tpx_listbuf_t *listbuf_get(tpx_peer_t *p, size_t len)
{
    for (tpx_listbuf_t **pp = &p->listbufs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->cap >= len) {
            tpx_listbuf_t *b = *pp;
            *pp = b->next;
            b->next = NULL;
            p->nlistbufs--;
            p->list_bytes += b->cap;
            return b;
        }
    }
    size_t cap = LISTBUF_MIN;
    while (cap < len)
        cap *= 2;
    tpx_listbuf_t *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return NULL;
    b->buf = aligned_alloc(4096, cap);
    if (b->buf == NULL ||
        tpx__region_create(p->e, b->buf, cap, TPX_MEM_HOST, 1, &b->region) != TPX_OK) {
        free(b->buf);
        free(b);
        return NULL;
    }
    b->cap = cap;
    p->list_bytes += cap;
    return b;
}

static void listbuf_put(tpx_peer_t *p, tpx_listbuf_t *b)
{
    if (b == NULL)
        return;
    p->list_bytes -= b->cap;
    if (b->cap > LISTBUF_POOL_CAP || p->nlistbufs >= LISTBUF_POOL_MAX) {
        tpx__region_release(b->region);
        free(b->buf);
        free(b);
        return;
    }
    b->next = p->listbufs;
    p->listbufs = b;
    p->nlistbufs++;
}

void tpx__peer_listbufs_free(tpx_peer_t *p)
{
    while (p->listbufs != NULL) {
        tpx_listbuf_t *b = p->listbufs;
        p->listbufs = b->next;
        tpx__region_release(b->region);
        free(b->buf);
        free(b);
    }
    p->nlistbufs = 0;
    while (p->held_head != NULL) {
        struct tpx_held *h = p->held_head;
        p->held_head = h->next;
        free(h->msg);
        free(h);
    }
    p->held_tail = NULL;
}

/* ---- a small map (key -> index) for preparing lists --------------------------------------- */

typedef struct {
    uint64_t *keys;
    uint32_t *vals;
    uint32_t cap;
} umap_t;

static tpx_status_t umap_init(umap_t *m, size_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n)
        m->cap *= 2;
    m->keys = calloc(m->cap, sizeof(*m->keys));
    m->vals = calloc(m->cap, sizeof(*m->vals));
    return m->keys && m->vals ? TPX_OK : TPX_ERR_NO_MEMORY;
}

static void umap_fini(umap_t *m)
{
    free(m->keys);
    free(m->vals);
}

/* The index stored for key k (k != 0), or `fresh` stored now; *added = 1 then. */
static uint32_t umap_get(umap_t *m, uint64_t k, uint32_t fresh, int *added)
{
    uint64_t h = k * 0x9e3779b97f4a7c15ull;
    for (uint32_t i = (uint32_t)(h >> 32) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k) {
            *added = 0;
            return m->vals[i];
        }
        if (m->keys[i] == 0) {
            m->keys[i] = k;
            m->vals[i] = fresh;
            *added = 1;
            return fresh;
        }
    }
}

/* ---- preparing ------------------------------------------------------------------------- */

static void prep_free(tpx_prep_t *pp)
{
    for (uint32_t i = 0; i < pp->nregions; i++) {
        pp->regions[i]->holds--;
        tpx__region_maybe_release(pp->regions[i]);
    }
    if (pp->list_region != NULL)
        tpx__region_release(pp->list_region);
    free(pp->list);
    free(pp->segs);
    free(pp->regions);
    free(pp);
}

/* The engine's one-sided state (e->rma): this file's alone; others ask
 * through tpx__rma_* and tpx__prep_zombies_*. Under e->lock. */
struct tpx_rma_state {
    void **notifs;             /* ring of received notifications (notif_entry_t) */
    uint32_t notif_head, notif_n, notif_cap;
    int notif_overflow;        /* dropped since the last tpx_engine_get_notifs() */
    tpx_prep_t *prep_zombies;  /* released preparations a failed peer's comm may still read */
};

tpx_status_t tpx__rma_engine_init(tpx_engine_t *e)
{
    e->rma = calloc(1, sizeof(*e->rma));
    return e->rma != NULL ? TPX_OK : TPX_ERR_NO_MEMORY;
}

int tpx__prep_zombies_any(const tpx_engine_t *e)
{
    return e->rma->prep_zombies != NULL;
}

/* `inflight`: the last post may still have the list in a failed peer's
 * comm window; then it is freed once that comm is closed. So is a
 * preparation whose last reference goes while any failed peer's comms are
 * still open (a post that ended with its peer's failure earlier). */
static void prep_unref(tpx_engine_t *e, tpx_prep_t *pp, int inflight)
{
    if (--pp->refs > 0)
        return;
    if (!inflight && !e->failed_open) {
        prep_free(pp);
        return;
    }
    pp->next_zombie = e->rma->prep_zombies;
    e->rma->prep_zombies = pp;
}

void tpx__prep_zombies_free(tpx_engine_t *e)
{
    while (e->rma != NULL && e->rma->prep_zombies != NULL) {
        tpx_prep_t *pp = e->rma->prep_zombies;
        e->rma->prep_zombies = pp->next_zombie;
        prep_free(pp);
    }
}

/* A block of the list being prepared; a strided one (ndims > 0) is the
 * elements of `len` bytes at loff/roff + sum(i_d x lstride/rstride[d]). */
typedef struct {
    tpx_region_t *r;
    uint64_t loff, roff, len, key;
    int remote_host;
    uint32_t ndims;
    uint32_t count[TPX_LIST_MAX_DIMS];
    uint64_t lstride[TPX_LIST_MAX_DIMS], rstride[TPX_LIST_MAX_DIMS];
} centry_t;

/* One side of a prepared entry as wire.h describes it. */
static tpx_sdesc_t centry_side(const centry_t *c, int remote)
{
    tpx_sdesc_t d = {.off = remote ? c->roff : c->loff, .elem = c->len, .ndims = c->ndims};
    for (uint32_t k = 0; k < c->ndims; k++) {
        d.count[k] = c->count[k];
        d.stride[k] = remote ? c->rstride[k] : c->lstride[k];
    }
    return d;
}

static uint64_t centry_nelem(const centry_t *c)
{
    uint64_t n = 1;
    for (uint32_t k = 0; k < c->ndims; k++)
        n *= c->count[k];
    return n;
}

/* The last remote descriptor decoded and found to be the remote's: the
 * blocks of a list usually all name one, decoded (checksum) once. */
typedef struct {
    const tpx_rdesc_t *d; /* NULL: none yet */
    tpx_rdesc_fields_t f;
} rdesc_seen_t;

/* The packing bound of a list (TPX_RMA_PACK_BYTES). By default (-1): a
 * whole chunk when every block is host memory on both sides and the plugin
 * takes vectored messages (pack.h, tpx__pack_iov): a shared chunk then
 * costs no copy of ours, and every message costs the same whatever its
 * size, so blocks just over a smaller bound would each pay a message of
 * their own -- 1000 x 128 KiB READs moved slower than 1000 x 64 KiB.
 * Otherwise a shared chunk is copied through staging: host blocks (strict
 * TCPX, other plugins) by the CPU, worth it only for small blocks: 64 KiB.
 * GPU blocks on both sides by the GPU (the gather and scatter kernels, their copies on
 * TPX_RMA_PACK_STREAMS streams, 8 KiB fragments): up to 256 KiB, since a
 * message of its own costs a GPU block more than the kernel's copy (H100
 * host, READs of 1000 GPU blocks, GB/s: 128 KiB 8.1 alone, 14.3 packed;
 * 256 KiB 11.9 and 15.5; 64 KiB, packed, 13.9: with a 64 KiB bound a
 * 128 KiB block moved slower than a 64 KiB one). Not with a devmem plugin,
 * whose packed receives land in its bounce buffer and are unpacked twice
 * (there, unmeasured). */
#define PACK_BYTES_STAGED (64u * 1024)
#define PACK_BYTES_GPU (256u * 1024)
static uint32_t pack_bound(const tpx_engine_t *e, const centry_t *ce, size_t m)
{
    if (e->cfg.rma_pack_bytes != TPX_RMA_PACK_AUTO)
        return e->cfg.rma_pack_bytes;
    int vec = e->cfg.rma_iov && tpx__net_has_vec(e->net), gpu = m > 0;
    for (size_t i = 0; i < m; i++) {
        vec &= ce[i].remote_host && ce[i].r->type == TPX_MEM_HOST;
        gpu &= !ce[i].remote_host && ce[i].r->type != TPX_MEM_HOST;
    }
    if (gpu && !e->net->is_tcpx && e->props.dev_type != TPX_NCCL_NET_DEVICE_UNPACK)
        return PACK_BYTES_GPU;
    if (!vec)
        return PACK_BYTES_STAGED;
    return e->cfg.rma_pack_chunk > 0 ? e->cfg.rma_pack_chunk : UINT32_MAX;
}

/* Check one block; *key = the descriptor's key, *host = it names host memory. */
static tpx_status_t iov_check(tpx_remote_t *rm, const tpx_iov_t *v, size_t i, rdesc_seen_t *seen,
                              uint64_t *key, int *host)
{
    tpx_region_t *r = v->local;
    if (r == NULL || v->remote == NULL || v->len == 0) {
        TPX_ERROR("tpx_xfer_prepare: block %zu: %s", i,
                  r == NULL ? "NULL local region" : v->remote == NULL ? "NULL remote descriptor"
                                                                      : "zero length");
        return TPX_ERR_INVALID_ARG;
    }
    if (r->e != rm->e || r->dead || r->internal) {
        TPX_ERROR("tpx_xfer_prepare: block %zu: the local region is %s", i,
                  r->e != rm->e ? "of another engine" : "deregistered");
        return TPX_ERR_INVALID_ARG;
    }
    if (v->local_offset > r->len || v->len > r->len - v->local_offset) {
        TPX_ERROR("tpx_xfer_prepare: block %zu: local bytes [%zu, +%zu) are outside the region "
                  "of %zu bytes", i, v->local_offset, v->len, r->len);
        return TPX_ERR_INVALID_ARG;
    }
    if (seen->d != v->remote) {
        seen->d = NULL;
        if (tpx__rdesc_decode(v->remote->bytes, &seen->f) != TPX_OK) {
            TPX_ERROR("tpx_xfer_prepare: block %zu: the remote descriptor is not valid", i);
            return TPX_ERR_INVALID_ARG;
        }
        if (seen->f.engine_id != rm->md.engine_id) {
            TPX_ERROR("tpx_xfer_prepare: block %zu: the descriptor belongs to engine %016llx, "
                      "not to remote %s (%016llx)", i, (unsigned long long)seen->f.engine_id,
                      rm->md.name, (unsigned long long)rm->md.engine_id);
            return TPX_ERR_INVALID_ARG;
        }
        seen->d = v->remote;
    }
    const tpx_rdesc_fields_t *f = &seen->f;
    if (v->remote_offset > f->len || v->len > f->len - v->remote_offset) {
        TPX_ERROR("tpx_xfer_prepare: block %zu: remote bytes [%zu, +%zu) are outside the "
                  "exported %llu bytes", i, v->remote_offset, v->len, (unsigned long long)f->len);
        return TPX_ERR_INVALID_ARG;
    }
    *key = f->key;
    *host = f->mem_type == TPX_MEM_HOST;
    return TPX_OK;
}

/* Number keys and regions, cut the blocks (a strided entry's elements
 * one by one) into segments and chunks, encode the list: version 2 unless
 * an entry is strided. Engine lock held. */
static tpx_status_t prep_encode(tpx_prep_t *pp, const centry_t *ce, size_t m)
{
    tpx_engine_t *e = pp->rm->e;
    umap_t keys = {0}, regs = {0};
    tpx_status_t st = TPX_ERR_NO_MEMORY;
    uint64_t nseg = 0;
    size_t list_len = 0; /* version 3's entries */
    for (size_t i = 0; i < m; i++) {
        nseg += centry_nelem(&ce[i]);
        list_len += TPX_LIST3_ENTRY(ce[i].ndims);
        pp->strided |= ce[i].ndims > 0;
    }
    if (umap_init(&keys, m) != TPX_OK || umap_init(&regs, m) != TPX_OK)
        goto out;
    pp->segs = malloc(nseg * sizeof(*pp->segs));
    pp->regions = malloc(m * sizeof(*pp->regions));
    uint64_t *keyv = malloc(m * sizeof(*keyv));
    uint32_t *keyi = malloc(m * sizeof(*keyi));
    if (pp->segs == NULL || pp->regions == NULL || keyv == NULL || keyi == NULL) {
        free(keyv);
        free(keyi);
        st = TPX_ERR_NO_MEMORY;
        goto out;
    }
    /* Small blocks share chunks (wire.h: tpx_chunker_t; pack.c moves them):
     * the bound travels with the list, so the owner cuts it the same way. */
    uint32_t pack_max = (uint32_t)TPX_MIN((uint64_t)pack_bound(e, ce, m), (uint64_t)pp->chunk);
    uint32_t pack_chunk = e->cfg.rma_pack_chunk == 0 || e->cfg.rma_pack_chunk >= pp->chunk
                              ? 0
                              : TPX_MAX(e->cfg.rma_pack_chunk, pack_max);
    tpx_chunker_t ck = {.chunk = pp->chunk, .pack_max = pack_max, .share = pack_chunk};
    uint32_t nkeys = 0;
    for (size_t i = 0; i < m; i++) {
        int added;
        keyi[i] = umap_get(&keys, ce[i].key, nkeys, &added);
        if (added)
            keyv[nkeys++] = ce[i].key;
        (void)umap_get(&regs, (uint64_t)(uintptr_t)ce[i].r, pp->nregions, &added);
        if (added) {
            pp->regions[pp->nregions++] = ce[i].r;
            ce[i].r->holds++; /* dropped by prep_free, on every path */
        }
        /* a strided entry: its elements in row-major order, as the owner
         * expands it (wire.h) */
        tpx_sdesc_t ls = centry_side(&ce[i], 0);
        uint64_t nel = centry_nelem(&ce[i]);
        tpx_sdesc_walk_t wk;
        tpx__sdesc_walk_init(&ls, &wk);
        for (uint64_t j = 0; j < nel; j++, tpx__sdesc_walk_next(&ls, &wk)) {
            uint64_t c0;
            uint32_t po;
            int shared;
            tpx__chunker_add(&ck, ce[i].len, &c0, &po, &shared);
            pp->segs[pp->nsegs++] = (tpx_seg_t){
                .region = ce[i].r, .off = ce[i].ndims ? wk.off : ce[i].loff,
                .len = ce[i].len, .chunk0 = (uint32_t)c0, .pack_off = po,
                .shared = (uint8_t)shared};
        }
        pp->total += nel * ce[i].len;
        if (ck.nchunks > UINT32_MAX) {
            TPX_ERROR("tpx_xfer_prepare: the transfer has more than 2^32 chunks");
            free(keyv);
            free(keyi);
            st = TPX_ERR_INVALID_ARG;
            goto out;
        }
    }
    pp->remote_host = 1;
    for (size_t i = 0; i < m; i++)
        pp->remote_host &= ce[i].remote_host;
    /* what every post asks of the blocks, decided once: a post must not
     * walk a million elements' segments */
    pp->host = segs_host(pp->segs, pp->nsegs);
    for (uint64_t i = 0; i < pp->nsegs && !pp->cuda_direct; i++)
        pp->cuda_direct = !pp->segs[i].shared && pp->segs[i].region->cuda_dev >= 0;
    pp->nent = (uint32_t)m;
    pp->npayload = (uint32_t)ck.nchunks;
    pp->list_len = pp->strided ? TPX_LIST_SIZE(nkeys, 0) + list_len : TPX_LIST_SIZE(nkeys, m);
    pp->list = aligned_alloc(4096, (pp->list_len + 4095) & ~(size_t)4095);
    if (pp->list == NULL) {
        free(keyv);
        free(keyi);
        st = TPX_ERR_NO_MEMORY;
        goto out;
    }
    tpx_list_hdr_t h = {.op = pp->op == TPX_OP_READ ? TPX_WIRE_OP_READ : TPX_WIRE_OP_WRITE,
                        .nkeys = nkeys, .nent = (uint32_t)m, .total = pp->total,
                        .pack_max = pack_max, .pack_chunk = pack_chunk,
                        .version = pp->strided ? TPX_LIST_VERSION_STRIDED : 0};
    tpx__list_put_hdr(pp->list, &h);
    for (uint32_t k = 0; k < nkeys; k++)
        tpx__list_put_key(pp->list, k, keyv[k]);
    size_t at = TPX_LIST_SIZE(nkeys, 0);
    for (size_t i = 0; i < m; i++) {
        tpx_sdesc_t rs = centry_side(&ce[i], 1);
        if (pp->strided)
            at += tpx__list_put_entry3(pp->list, at, keyi[i], &rs);
        else
            tpx__list_put_entry(pp->list, nkeys, (uint32_t)i, keyi[i], ce[i].roff, ce[i].len);
    }
    free(keyv);
    free(keyi);
    pp->nlist = div_up(pp->list_len, pp->chunk);
    st = tpx__region_create(e, pp->list, pp->list_len, TPX_MEM_HOST, 1, &pp->list_region);
out:
    umap_fini(&keys);
    umap_fini(&regs);
    return st;
}

/* Check and coalesce the blocks, then encode them. Engine lock held. */
static tpx_status_t prep_build(tpx_prep_t *pp, const tpx_iov_t *iov, size_t n)
{
    centry_t *ce = malloc(n * sizeof(*ce));
    tpx_status_t st = TPX_ERR_NO_MEMORY;
    if (ce == NULL)
        goto out;
    size_t m = 0;
    rdesc_seen_t seen = {0};
    for (size_t i = 0; i < n; i++) {
        uint64_t key;
        int host;
        if ((st = iov_check(pp->rm, &iov[i], i, &seen, &key, &host)) != TPX_OK)
            goto out;
        centry_t *last = m > 0 ? &ce[m - 1] : NULL;
        if (last && last->r == iov[i].local && last->key == key &&
            last->loff + last->len == iov[i].local_offset &&
            last->roff + last->len == iov[i].remote_offset) {
            last->len += iov[i].len;
            continue;
        }
        ce[m++] = (centry_t){.r = iov[i].local, .loff = iov[i].local_offset,
                             .roff = iov[i].remote_offset, .len = iov[i].len, .key = key,
                             .remote_host = host};
    }
    st = prep_encode(pp, ce, m);
out:
    free(ce);
    return st;
}

/* Check a strided entry, and collapse it into *out: dimensions of one
 * element dropped, inner dimensions contiguous on both sides folded into
 * the element, so that both sides expand it into the same, fewest blocks.
 * `room`: the blocks the list may still have. */
static tpx_status_t strided_check(tpx_prep_t *pp, const tpx_strided_t *v, size_t i,
                                  rdesc_seen_t *seen, uint64_t room, centry_t *out)
{
    if (v->ndims < 0 || v->ndims > TPX_STRIDED_MAX_DIMS) {
        TPX_ERROR("tpx_xfer_prepare_strided: entry %zu: %d dimensions (0..%d)", i, v->ndims,
                  TPX_STRIDED_MAX_DIMS);
        return TPX_ERR_INVALID_ARG;
    }
    /* the first element: regions, descriptor, zero length */
    tpx_iov_t first = {.local = v->local, .local_offset = v->local_offset, .remote = v->remote,
                       .remote_offset = v->remote_offset, .len = v->elem_len};
    uint64_t key;
    int host;
    tpx_status_t st = iov_check(pp->rm, &first, i, seen, &key, &host);
    if (st != TPX_OK)
        return st;
    tpx_sdesc_t ls = {.off = v->local_offset, .elem = v->elem_len, .ndims = (uint32_t)v->ndims};
    tpx_sdesc_t rs = {.off = v->remote_offset, .elem = v->elem_len, .ndims = (uint32_t)v->ndims};
    const char *why = NULL;
    for (int d = 0; d < v->ndims; d++) {
        if (v->dim[d].count > UINT32_MAX)
            why = "too many elements";
        ls.count[d] = rs.count[d] = (uint32_t)v->dim[d].count;
        ls.stride[d] = v->dim[d].local_stride;
        rs.stride[d] = v->dim[d].remote_stride;
    }
    uint64_t nl, nr, lspan = 0, rspan = 0;
    if (why == NULL && (why = tpx__sdesc_shape(&ls, UINT64_MAX, &nl, &lspan)) == NULL)
        why = tpx__sdesc_shape(&rs, UINT64_MAX, &nr, &rspan);
    if (why != NULL) {
        TPX_ERROR("tpx_xfer_prepare_strided: entry %zu: %s", i, why);
        return TPX_ERR_INVALID_ARG;
    }
    if ((why = tpx__sdesc_disjoint(pp->op == TPX_OP_READ ? &ls : &rs)) != NULL) {
        TPX_ERROR("tpx_xfer_prepare_strided: entry %zu: %s in the %s destination", i, why,
                  pp->op == TPX_OP_READ ? "local" : "remote");
        return TPX_ERR_INVALID_ARG;
    }
    if (lspan > v->local->len - v->local_offset || rspan > seen->f.len - v->remote_offset) {
        int local = lspan > v->local->len - v->local_offset;
        TPX_ERROR("tpx_xfer_prepare_strided: entry %zu: its %s elements end at byte %llu of "
                  "the %s of %llu bytes", i, local ? "local" : "remote",
                  (unsigned long long)((local ? v->local_offset : v->remote_offset) +
                                       (local ? lspan : rspan)),
                  local ? "region" : "export",
                  (unsigned long long)(local ? v->local->len : seen->f.len));
        return TPX_ERR_INVALID_ARG;
    }
    centry_t c = {.r = v->local, .loff = v->local_offset, .roff = v->remote_offset,
                  .len = v->elem_len, .key = key, .remote_host = host};
    for (int d = 0; d < v->ndims; d++) {
        if (v->dim[d].count == 1)
            continue;
        c.count[c.ndims] = (uint32_t)v->dim[d].count;
        c.lstride[c.ndims] = v->dim[d].local_stride;
        c.rstride[c.ndims] = v->dim[d].remote_stride;
        c.ndims++;
    }
    while (c.ndims > 0 && c.lstride[c.ndims - 1] == c.len && c.rstride[c.ndims - 1] == c.len) {
        c.len *= c.count[c.ndims - 1]; /* <= the span: no wrap */
        c.ndims--;
    }
    if (centry_nelem(&c) > room) {
        TPX_ERROR("tpx_xfer_prepare_strided: entry %zu: the list has more than %u blocks "
                  "(elements that are not contiguous on both sides)", i, TPX_RMA_MAX_IOVS);
        return TPX_ERR_INVALID_ARG;
    }
    *out = c;
    return TPX_OK;
}

/* The strided list: checked, collapsed, plain blocks coalesced as
 * prep_build does; a strided entry is never merged with its neighbours. */
static tpx_status_t prep_build_strided(tpx_prep_t *pp, const tpx_strided_t *v, size_t n)
{
    centry_t *ce = malloc(n * sizeof(*ce));
    if (ce == NULL)
        return TPX_ERR_NO_MEMORY;
    tpx_status_t st = TPX_OK;
    size_t m = 0;
    uint64_t nblocks = 0;
    rdesc_seen_t seen = {0};
    for (size_t i = 0; i < n; i++) {
        centry_t c;
        if ((st = strided_check(pp, &v[i], i, &seen, TPX_RMA_MAX_IOVS - nblocks, &c)) != TPX_OK)
            goto out;
        centry_t *last = m > 0 ? &ce[m - 1] : NULL;
        if (last && c.ndims == 0 && last->ndims == 0 && last->r == c.r && last->key == c.key &&
            last->loff + last->len == c.loff && last->roff + last->len == c.roff) {
            last->len += c.len;
            continue;
        }
        nblocks += centry_nelem(&c);
        ce[m++] = c;
    }
    st = prep_encode(pp, ce, m);
out:
    free(ce);
    return st;
}

tpx_status_t tpx__rma_prepare(tpx_remote_t *rm, tpx_op_t op, const tpx_iov_t *iov,
                              const tpx_strided_t *sv, size_t n, tpx_prep_t **out)
{
    tpx_engine_t *e = rm->e;
    tpx_prep_t *pp = calloc(1, sizeof(*pp));
    if (pp == NULL)
        return TPX_ERR_NO_MEMORY;
    pp->rm = rm;
    pp->op = op;
    pp->refs = 1;
    pp->chunk = TPX_MIN(e->cfg.chunk, rm->md.chunk);
    pthread_mutex_lock(&e->lock);
    tpx_status_t st = iov != NULL ? prep_build(pp, iov, n) : prep_build_strided(pp, sv, n);
    if (st != TPX_OK) {
        prep_free(pp);
        pthread_mutex_unlock(&e->lock);
        return st;
    }
    rm->nprep++;
    pthread_mutex_unlock(&e->lock);
    *out = pp;
    return TPX_OK;
}

int tpx__rma_prep_drop(tpx_prep_t *pp)
{
    tpx_remote_t *rm = pp->rm;
    int free_rm = --rm->nprep == 0 && rm->refs == 0 && !rm->forgetting;
    prep_unref(rm->e, pp, 0);
    return free_rm;
}

/* ---- posting ----------------------------------------------------------------------------- */

static tpx_status_t notif_post(tpx_peer_t *p, const unsigned char *msg, uint32_t len,
                               uint8_t flags)
{
    uint32_t off = 0;
    do {
        tpx_ctrl_t m = {.type = TPX_CTRL_NOTIF, .notif_total = (uint16_t)len,
                        .notif_off = (uint16_t)off, .flags = flags};
        m.part_len = (uint8_t)TPX_MIN(len - off, (uint32_t)TPX_CTRL_NOTIF_PART);
        if (m.part_len > 0) /* msg may be NULL with len 0 */
            memcpy(m.part, msg + off, m.part_len);
        tpx_status_t st = tpx__peer_ctrl_send(p, &m, NULL);
        if (st != TPX_OK)
            return st;
        off += m.part_len;
    } while (off < len);
    return TPX_OK;
}

/* x keeps its own copy of a notification (x->rma.notif); 0 if out of memory. */
static int xfer_notif_keep(tpx_xfer_t *x, const void *notif, size_t notif_len)
{
    x->rma.notif = malloc(notif_len ? notif_len : 1);
    if (x->rma.notif == NULL)
        return 0;
    memcpy(x->rma.notif, notif, notif_len);
    x->rma.notif_len = (uint32_t)notif_len;
    return 1;
}

tpx_status_t tpx__rma_post(tpx_prep_t *pp, tpx_peer_t *p, const void *notif, size_t notif_len,
                           uint64_t t0, int timeout_ms, tpx_xfer_t **out)
{
    tpx_engine_t *e = pp->rm->e;
    tpx_status_t st;
    for (uint32_t i = 0; i < pp->nregions; i++) {
        if (pp->regions[i]->dead) {
            TPX_ERROR("tpx_xfer_post: a local region of the prepared transfer was deregistered");
            st = TPX_ERR_INVALID_STATE;
            return st;
        }
    }
    if ((st = tpx__peer_usable(p, "tpx_xfer_post")) != TPX_OK)
        return st;
    /* a READ receives into its local blocks; packed ones land in host
     * staging (pack.c) and need no bounce buffer */
    int cuda = pp->op == TPX_OP_READ && pp->cuda_direct;
    if ((st = tpx__peer_rxmem_check(p, cuda, "tpx_xfer_post (READ)")) != TPX_OK)
        return st;
    if (p->chunk != pp->chunk) {
        TPX_ERROR("tpx_xfer_post: peer %s agreed on %u-byte chunks, the preparation assumed %u",
                  p->name, p->chunk, pp->chunk);
        st = TPX_ERR_PROTOCOL;
        return st;
    }
    tpx_xfer_t *x = tpx__xfer_alloc(p, pp->op == TPX_OP_READ ? XK_READ : XK_WRITE);
    if (x == NULL) {
        st = TPX_ERR_NO_MEMORY;
        return st;
    }
    if (notif != NULL && pp->op == TPX_OP_READ) {
        if (!xfer_notif_keep(x, notif, notif_len)) {
            free(x);
            st = TPX_ERR_NO_MEMORY;
            return st;
        }
        x->rma.has_notif = 1;
    }
    if (timeout_ms > 0)
        x->deadline_ns = t0 + (uint64_t)timeout_ms * 1000000ull;
    x->rma.t_start_ns = t0;
    x->req.prep = pp;
    x->segs = pp->segs;
    x->nsegs = pp->nsegs;
    x->regions = pp->regions;
    x->nregions = pp->nregions;
    x->rma.list = pp->list;
    x->rma.list_len = pp->list_len;
    x->rma.list_region = pp->list_region;
    x->rma.rid = p->next_rid++;
    x->rma.total = x->len = pp->total;
    /* Small requests travel whole in the RMA_REQ (wire.h, INLINE): the list
     * always when it fits, a WRITE's host data up to TPX_RMA_INLINE_BYTES;
     * a READ of host memory that small asks for its data in the answer. A
     * larger WRITE still sends its list (and notification) in the body
     * (flag LIST), its data on the data channels: the owner checks the list
     * and posts the data's receives when the request arrives, instead of
     * first receiving the list as a chunk of its own. */
    uint32_t inl = e->cfg.rma_inline_bytes;
    int host = pp->host;
    if (pp->op == TPX_OP_WRITE) {
        x->req.inline_req = inl > 0 && host && pp->remote_host && pp->total <= inl &&
                            pp->list_len + pp->total <= TPX_CTRL_BODY_MAX;
        x->req.list_body = !x->req.inline_req && inl > 0 && pp->list_len <= TPX_CTRL_BODY_MAX;
    } else {
        x->req.inline_req = inl > 0 && pp->list_len <= TPX_CTRL_BODY_MAX;
    }
    x->req.want_inline = pp->op == TPX_OP_READ && inl > 0 && host &&
                         pp->total <= TPX_MIN(inl, TPX_CTRL_BODY_MAX);
    uint32_t nlist = x->req.inline_req || x->req.list_body ? 0 : pp->nlist;
    if (pp->op == TPX_OP_WRITE) {
        uint32_t n = x->req.inline_req ? 0 : nlist + pp->npayload;
        /* no runs: an owner that refuses a WRITE unread drains its chunks
         * without the list, so it cannot know where a run would end */
        x->out = (tpx_stream_t){.nchunks = n, .nlist = nlist, .gate = UINT32_MAX,
                                .first_chan = p->send_cursor};
        x->nchunks = n;
    } else {
        x->out = (tpx_stream_t){.nchunks = nlist, .nlist = nlist, .gate = UINT32_MAX,
                                .first_chan = p->send_cursor};
        x->in = (tpx_stream_t){.nchunks = pp->npayload, .gate = UINT32_MAX};
        x->nchunks = nlist + pp->npayload;
    }
    x->hdr_pending = x->req.resp_pending = 1;
    tpx_ctrl_t m = {.type = TPX_CTRL_RMA_REQ, .rid = x->rma.rid,
                    .op = pp->op == TPX_OP_READ ? TPX_WIRE_OP_READ : TPX_WIRE_OP_WRITE,
                    .nent = pp->nent, .total = pp->total, .list_len = pp->list_len,
                    .nchunks = pp->npayload};
    if (x->req.inline_req) {
        m.flags |= TPX_CTRL_REQ_INLINE;
        m.body_len = (uint32_t)(pp->list_len + (pp->op == TPX_OP_WRITE ? pp->total : 0));
    } else if (x->req.list_body) {
        m.flags |= TPX_CTRL_REQ_LIST;
        m.body_len = (uint32_t)pp->list_len;
    }
    if (x->req.want_inline)
        m.flags |= TPX_CTRL_REQ_ANSWER_INLINE;
    /* A WRITE's notification goes first, held for the request (wire.h). A
     * message half sent leaves the control stream unusable: the peer fails. */
    uint64_t seq0 = p->send_seq;
    if (notif != NULL && pp->op == TPX_OP_WRITE && (x->req.inline_req || x->req.list_body) &&
        m.body_len + notif_len <= TPX_CTRL_BODY_MAX) {
        /* in the body too: one message for request, data and notification */
        if (!xfer_notif_keep(x, notif, notif_len)) {
            free(x);
            st = TPX_ERR_NO_MEMORY;
            return st;
        }
        x->req.notif_inline = x->req.notif_ahead = 1;
        m.flags |= TPX_CTRL_REQ_NOTIF_INLINE;
        m.notif_total = (uint16_t)notif_len;
        m.body_len += (uint32_t)notif_len;
    } else if (notif != NULL && pp->op == TPX_OP_WRITE) {
        m.flags |= TPX_CTRL_REQ_NOTIF;
        x->req.notif_ahead = 1;
        st = notif_post(p, notif, (uint32_t)notif_len, TPX_CTRL_NOTIF_HELD);
    }
    if (st == TPX_OK)
        st = tpx__peer_ctrl_send(p, &m, x);
    if (st != TPX_OK) {
        if (p->send_seq != seq0)
            tpx__peer_fail(p, st, "no memory for a request's control messages");
        free(x->rma.notif);
        free(x);
        return st;
    }
    pp->refs++;
    tpx__stream_cursor_move(p, &p->send_cursor, &x->out, stream_out_bytes(x, nlist > 0));
    x->state = XF_ACTIVE;
    tpx__xfer_attach(x);
    x->req.rprev = p->rma_tail;
    if (p->rma_tail)
        p->rma_tail->req.rnext = x;
    else
        p->rma_head = x;
    p->rma_tail = x;
    tpx__stream_enqueue(x, &x->out, 1);
    tpx__peer_ring(p);
    TPX_TL(TPX_TR_POST, x->kind);
    *out = x;
    return TPX_OK;
}

/* ---- the requester's side of the exchange ------------------------------------------------ */

static void rma_unlink(tpx_peer_t *p, tpx_xfer_t *x)
{
    if (x->req.rprev)
        x->req.rprev->req.rnext = x->req.rnext;
    else if (p->rma_head == x)
        p->rma_head = x->req.rnext;
    else
        return; /* not linked */
    if (x->req.rnext)
        x->req.rnext->req.rprev = x->req.rprev;
    else
        p->rma_tail = x->req.rprev;
    x->req.rnext = x->req.rprev = NULL;
}

/* Request x of p is left without an answer: the connection ended. An
 * engine of an older tpx reads request lists of version 2 only and fails
 * the connection on one of version 3, answering nothing: say so, once per
 * connection. */
static void strided_unanswered(tpx_peer_t *p, const tpx_xfer_t *x)
{
    if (p->strided_warned || x->req.prep == NULL || !x->req.prep->strided)
        return;
    p->strided_warned = 1;
    TPX_WARN("peer %s: the connection ended while request %llu with strided entries (request "
             "list version %u) was unanswered; an engine of an older tpx reads request lists "
             "of version 2 only and drops the connection on such a request: run one tpx "
             "release on both sides", p->remote_name[0] ? p->remote_name : p->name,
             (unsigned long long)x->rma.rid, tpx__list_version_mine());
}

void tpx__rma_unanswered_fail(tpx_peer_t *p, tpx_status_t st)
{
    tpx_xfer_t *x;
    while ((x = p->rma_head) != NULL) {
        strided_unanswered(p, x);
        rma_unlink(p, x);
        x->req.resp_pending = 0;
        if (x->err == TPX_OK)
            x->err = st;
        if (x->kind == XK_READ) { /* no payload comes: as after an error answer */
            x->nchunks -= x->in.nchunks;
            x->in.nchunks = 0;
        }
        tpx__xfer_maybe_done(x);
    }
}

tpx_status_t tpx__rma_resp(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body)
{
    if (m->type != TPX_CTRL_RMA_RESP) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "unexpected control message");
        return TPX_ERR_PROTOCOL;
    }
    tpx_xfer_t *x = p->rma_head;
    while (x != NULL && x->rma.rid != m->rid)
        x = x->req.rnext;
    int inl = (m->flags & TPX_CTRL_RESP_INLINE) != 0;
    if (x == NULL || (m->nchunks > 0 && x->kind != XK_READ) ||
        (inl && (x->kind != XK_READ || !x->req.want_inline || body == NULL)) ||
        (m->status == 0 && x->kind == XK_READ &&
         ((!inl && m->nchunks != x->in.nchunks) || m->total != x->rma.total))) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "an answer that matches no request");
        return TPX_ERR_PROTOCOL;
    }
    if ((m->flags & TPX_CTRL_RESP_NOTIFIED) && (x->kind != XK_WRITE || !x->req.notif_ahead)) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a notification reported that was never sent");
        return TPX_ERR_PROTOCOL;
    }
    rma_unlink(p, x);
    x->req.resp_pending = 0;
    x->rma.t_answer_ns = tpx__now_ns();
    /* Its notification was delivered: a cancel came too late, and the
     * transfer reports what the owner saw, TPX_OK. */
    if (m->flags & TPX_CTRL_RESP_NOTIFIED)
        x->canceled = 0;
    if (m->status != 0 || inl) {
        if (m->status != 0)
            x->err = (tpx_status_t)m->status;
        else
            segs_scatter(x->segs, x->nsegs, (const char *)body); /* host: asked so */
        if (x->kind == XK_READ) {
            x->nchunks -= x->in.nchunks;
            x->in.nchunks = 0;
        }
    } else if (x->kind == XK_READ) {
        x->in.first_chan = p->recv_cursor;
        /* a READ's payload moves in runs: both sides know its layout (the
         * owner checked the list before it answered) */
        x->in.run = tpx__stream_run(p, x->in.nchunks);
        tpx__stream_cursor_move(p, &p->recv_cursor, &x->in, x->rma.total);
        tpx__stream_enqueue(x, &x->in, 0);
    }
    tpx__xfer_maybe_done(x);
    return TPX_OK;
}

/* ---- the owner's side ------------------------------------------------------------------- */

static void target_check(tpx_xfer_t *x);

void tpx__rma_target_begin(tpx_peer_t *p, const tpx_ctrl_t *m, const unsigned char *body)
{
    if ((uint64_t)div_up(m->list_len, p->chunk) + m->nchunks > UINT32_MAX) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a request of more than 2^32 chunks");
        return;
    }
    tpx_xfer_t *x = tpx__xfer_alloc(p, m->op == TPX_WIRE_OP_WRITE ? XK_TWRITE : XK_TREAD);
    /* The peer's quotas: requests served at once, list memory held (the
     * list's buffer until it is checked, and from the start to the end the
     * segments it is checked into). Over them the request is refused
     * unread: its list (and a WRITE's payload) is drained from the stream
     * into scratch, nothing else is allocated. How many refused requests
     * may wait for their lists is bounded by flow control (xfer.c
     * ctrl_may_read). */
    uint64_t seg_bytes = seg_book(m->nent);
    /* A request alone (nothing else of the peer's held) is served whatever
     * its size (at most TPX_LIST_MAX_ENTRIES blocks, ~80 MiB), so that a
     * quota smaller than the largest request only serializes them. */
    int refuse = p->rma_ntargets >= (uint64_t)tpx__config_int(TPX_CFG_RMA_PEER_REQUESTS) ||
                 (p->list_bytes > 0 &&
                  p->list_bytes + listbuf_cap(m->list_len) + seg_bytes >
                      (uint64_t)tpx__config_int(TPX_CFG_RMA_PEER_LIST_BYTES));
    tpx_listbuf_t *lb = x && !refuse ? listbuf_get(p, m->list_len) : NULL;
    if (x == NULL || (lb == NULL && !refuse)) {
        free(x);
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a request list");
        return;
    }
    x->rma.t_start_ns = tpx__now_ns();
    if (m->flags & TPX_CTRL_REQ_NOTIF_INLINE) { /* the end of the body (a WRITE's) */
        x->rma.notif = malloc(m->notif_total ? m->notif_total : 1);
        if (x->rma.notif == NULL) {
            listbuf_put(p, lb);
            free(x);
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a notification");
            return;
        }
        uint64_t data = (m->flags & TPX_CTRL_REQ_INLINE) ? m->total : 0;
        memcpy(x->rma.notif, body + m->list_len + data, m->notif_total);
        x->rma.notif_len = m->notif_total;
        x->rma.has_notif = 1;
    }
    if (m->flags & TPX_CTRL_REQ_NOTIF) {
        /* Its own, by rid (stamped by tpx__rma_held_order()), not the head:
         * an INLINE request starts at once, ahead of earlier requests still
         * queued behind early headers, whose notifications come first. */
        struct tpx_held *h = p->held_head, *prev = NULL;
        while (h != NULL && h->rid != m->rid) {
            prev = h;
            h = h->next;
        }
        if (h == NULL) {
            free(x->rma.notif);
            listbuf_put(p, lb);
            free(x);
            tpx__peer_fail(p, TPX_ERR_PROTOCOL, "a request whose notification is not held");
            return;
        }
        if (prev != NULL)
            prev->next = h->next;
        else
            p->held_head = h->next;
        if (p->held_tail == h)
            p->held_tail = prev;
        x->rma.notif = h->msg;
        x->rma.notif_len = h->len;
        x->rma.has_notif = !h->dropped;
        free(h);
    }
    p->rma_ntargets++;
    if (!refuse) {
        x->own.seg_bytes = seg_bytes;
        p->list_bytes += seg_bytes;
    }
    x->released = 1; /* internal: freed when done */
    x->nsegs = 0;
    x->nregions = 0;
    x->rma.rid = m->rid;
    x->rma.total = x->len = m->total;
    x->own.want_nent = m->nent;
    x->own.want_nchunks = m->nchunks;
    x->own.answer_inline = (m->flags & TPX_CTRL_REQ_ANSWER_INLINE) != 0;
    x->own.lb = lb;
    x->rma.list = lb ? lb->buf : NULL;
    x->rma.list_len = m->list_len;
    x->rma.list_region = lb ? lb->region : NULL;
    if (body != NULL && (m->flags & TPX_CTRL_REQ_LIST)) {
        /* LIST: the list came in the body, the data follows on the data
         * channels: checked now, so the data's receives are posted at once
         * (into scratch when refused or rejected). */
        if (lb != NULL)
            memcpy(lb->buf, body, m->list_len);
        x->in = (tpx_stream_t){.first_chan = p->recv_cursor, .nchunks = m->nchunks, .gate = 0};
        x->nchunks = m->nchunks;
        tpx__stream_cursor_move(p, &p->recv_cursor, &x->in, stream_out_bytes(x, 0));
        x->state = XF_ACTIVE;
        tpx__xfer_attach(x);
        target_check(x);
        if (p->state != PEER_READY || x->state != XF_ACTIVE)
            return;
        tpx__stream_enqueue(x, &x->in, 0);
        return;
    }
    if (body != NULL) {
        /* INLINE: the list (and a WRITE's data) came in the body: served
         * now, nothing on the data channels. */
        if (lb != NULL)
            memcpy(lb->buf, body, m->list_len);

        x->in = (tpx_stream_t){.gate = UINT32_MAX};
        x->nchunks = 0;
        x->state = XF_ACTIVE;
        tpx__xfer_attach(x);
        target_check(x);
        if (p->state != PEER_READY || x->state != XF_ACTIVE)
            return;
        if (x->kind == XK_TWRITE && x->err == TPX_OK) {
            /* A requester sends data inline only to blocks whose descriptors
             * say host memory; GPU blocks here mean it lied or they changed. */
            if (segs_host(x->segs, x->nsegs))
                segs_scatter(x->segs, x->nsegs, (const char *)body + m->list_len);
            else
                x->err = TPX_ERR_INVALID_ARG;
        }
        tpx__xfer_maybe_done(x); /* a READ answered inline: once the answer left */
        return;
    }
    uint32_t nlist = div_up(m->list_len, p->chunk);
    x->in = (tpx_stream_t){.nlist = nlist, .first_chan = p->recv_cursor,
                           .nchunks = nlist + (x->kind == XK_TWRITE ? m->nchunks : 0),
                           .gate = x->kind == XK_TWRITE ? nlist : UINT32_MAX};
    x->nchunks = x->in.nchunks;
    tpx__stream_cursor_move(p, &p->recv_cursor, &x->in, stream_out_bytes(x, 1));
    x->state = XF_ACTIVE;
    tpx__xfer_attach(x);
    tpx__stream_enqueue(x, &x->in, 0);
}

/* A request over the peer's quota: its list was drained unread; a WRITE's
 * payload is drained too (chunk-sized receives into scratch: the sender's
 * chunks are never larger), a READ is answered at once. */
static void target_refuse(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    tpx_engine_t *e = p->e;
    e->ctr.rma_refused++;
    x->err = TPX_ERR_NO_RESOURCE;
    if (!p->quota_warned)
        TPX_WARN("peer %s: request %llu refused: the peer had too many requests or too much "
                 "request-list memory here (TPX_RMA_PEER_REQUESTS, TPX_RMA_PEER_LIST_BYTES; "
                 "further refusals are only counted: rma_refused)",
                 p->remote_name[0] ? p->remote_name : p->name, (unsigned long long)x->rma.rid);
    p->quota_warned = 1;
    if (x->kind == XK_TWRITE) {
        tpx_seg_t *seg = calloc(1, sizeof(*seg));
        if (seg == NULL) {
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory to refuse a request");
            return;
        }
        seg->len = (uint64_t)x->own.want_nchunks * p->chunk;
        x->segs = seg;
        x->nsegs = 1;
        x->regions = NULL; /* owned with segs: freed with them */
        x->nregions = 0;
        x->segs_owned = 1;
        x->in.gate = UINT32_MAX;
        return;
    }
    tpx_ctrl_t m = {.type = TPX_CTRL_RMA_RESP, .rid = x->rma.rid, .status = TPX_ERR_NO_RESOURCE};
    if (tpx__peer_ctrl_send(p, &m, NULL) != TPX_OK)
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
}

/* ---- the owner's segments of a checked list, a step at a time ---------------------------- */

/* Elements expanded into segments per step: a strided list of a million
 * elements took the owner 10-30 ms to expand before its answer and first
 * chunk left (8-14 ms a 655,360-element transfer on 2 CPUs); a step of
 * this many takes a fraction of a millisecond, and the chunks it covers
 * move while the next step runs. */
#define EXPAND_STEP 32768u

/* The walk of one checked list into x->segs (x->nsegs of them so far),
 * from the list's buffer, which it holds (x->own.lb) until the end. */
struct tpx_rma_expand {
    struct tpx_rma_expand *next; /* the peer's lists still expanding (p->rma_expanding) */
    tpx_xfer_t *x;
    struct tpx_export **xp;      /* per key: its export (NULL: unknown; the list refused) */
    tpx_list_cursor_t cur;
    tpx_chunker_t ck;
    uint32_t ent, nent;          /* entries begun, of */
    uint32_t key;                /* the entry being walked: its key, shape, walk, */
    tpx_sdesc_t d;
    tpx_sdesc_walk_t wk;
    uint64_t j, nel;             /* ... elements done, of */
    int refused;                 /* the list was refused: segments only size the chunks */
};

static void expand_free(struct tpx_rma_expand *es)
{
    free(es->xp);
    free(es);
}

/* Up to `budget` more segments. 0, or -1 if x's peer failed (x is done). */
static int expand_step(struct tpx_rma_expand *es, uint64_t budget)
{
    tpx_xfer_t *x = es->x;
    uint32_t nseg = x->nsegs;
    while (budget > 0) {
        if (es->j == es->nel) {
            if (es->ent == es->nent)
                break;
            tpx__list_cursor_next(&es->cur, &es->key, &es->d);
            es->ent++;
            uint64_t span = es->d.elem;
            es->nel = 1;
            if (es->d.ndims > 0)
                (void)tpx__sdesc_shape(&es->d, TPX_LIST_MAX_ENTRIES, &es->nel, &span);
            tpx__sdesc_walk_init(&es->d, &es->wk);
            es->j = 0;
            continue;
        }
        const struct tpx_export *ex = es->refused ? NULL : es->xp[es->key];
        const tpx_sdesc_t *d = &es->d;
        uint64_t n = TPX_MIN(budget, es->nel - es->j), len = d->elem;
        for (uint64_t i = 0; i < n; i++, nseg++, tpx__sdesc_walk_next(d, &es->wk)) {
            uint64_t off = es->wk.off;
            if (ex != NULL && (off > ex->len || len > ex->len - off)) {
                /* cannot be: the entry's span was checked */
                x->nsegs = nseg;
                tpx__peer_fail(x->peer, TPX_ERR_INTERNAL, "a request's element outside its "
                                                          "checked span");
                return -1;
            }
            uint64_t c0;
            uint32_t po;
            int shared;
            tpx__chunker_add(&es->ck, len, &c0, &po, &shared); /* checked: < 2^32 chunks */
            x->segs[nseg] = (tpx_seg_t){.region = ex ? ex->region : NULL,
                                        .off = ex ? ex->off + off : 0, .len = len,
                                        .chunk0 = (uint32_t)c0, .pack_off = po,
                                        .shared = (uint8_t)shared};
        }
        es->j += n;
        budget -= n;
    }
    x->nsegs = nseg;
    return 0;
}

/* The stream's gate while x's list expands: the chunks before the last
 * segment's first one are whole (a shared chunk may still gain segments). */
static uint32_t expand_gate(const tpx_xfer_t *x)
{
    if (x->own.exp == NULL)
        return UINT32_MAX;
    uint32_t ready = x->nsegs > 0 ? x->segs[x->nsegs - 1].chunk0 : 0;
    return x->kind == XK_TWRITE ? x->in.nlist + ready : ready;
}

/* x's expansion ends (finished, or x is done): unlinked and freed. */
static void expand_end(tpx_xfer_t *x)
{
    struct tpx_rma_expand *es = x->own.exp;
    if (es == NULL)
        return;
    for (struct tpx_rma_expand **pp = &x->peer->rma_expanding; *pp != NULL; pp = &(*pp)->next)
        if (*pp == es) {
            *pp = es->next;
            break;
        }
    x->own.exp = NULL;
    expand_free(es);
}

void tpx__rma_expand_pass(tpx_peer_t *p)
{
    struct tpx_rma_expand *es = p->rma_expanding, *next;
    for (; es != NULL && p->state == PEER_READY; es = next) {
        next = es->next;
        tpx_xfer_t *x = es->x;
        uint64_t t0 = tpx__now_ns();
        if (expand_step(es, EXPAND_STEP) < 0)
            return;
        p->e->ctr.rma_check_ns += tpx__now_ns() - t0;
        if (es->ent == es->nent && es->j == es->nel) {
            expand_end(x);
            listbuf_put(p, x->own.lb);
            x->own.lb = NULL;
        }
        if (x->kind == XK_TWRITE)
            x->in.gate = expand_gate(x);
        else
            x->out.gate = expand_gate(x);
    }
}

/* Check the list against the exports; map it to segments of our regions. */
static void target_check_list(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    tpx_engine_t *e = p->e;
    TPX_TL(TPX_TR_LIST_CHECKED, x->nsegs);
    if (x->rma.list == NULL) {
        target_refuse(x);
        return;
    }
    tpx_list_hdr_t h;
    uint32_t nchunks;
    uint8_t op = x->kind == XK_TWRITE ? TPX_WIRE_OP_WRITE : TPX_WIRE_OP_READ;
    if (tpx__list_check(x->rma.list, x->rma.list_len, p->chunk, &h, &nchunks) != TPX_OK || h.op != op ||
        h.nent != x->own.want_nent || h.total != x->rma.total || nchunks != x->own.want_nchunks) {
        unsigned v = tpx__list_version(x->rma.list, x->rma.list_len);
        char why[160];
        if (v > tpx__list_version_mine())
            snprintf(why, sizeof(why), "a request list of version %u: this engine reads "
                     "versions 2 and %u (the peer runs a newer tpx)", v,
                     tpx__list_version_mine());
        else
            snprintf(why, sizeof(why), "malformed request list");
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, why);
        return;
    }
    /* A strided list expands into more blocks than it has entries: their
     * segments count against the peer's list quota like a long list's (a
     * small list cannot make this side allocate more than the quota, beyond
     * the one request always served alone). */
    uint64_t book = seg_book(h.nblocks);
    if (book > x->own.seg_bytes) {
        uint64_t mine = x->own.seg_bytes + (x->own.lb != NULL ? x->own.lb->cap : 0);
        if (p->list_bytes > mine &&
            p->list_bytes + (book - x->own.seg_bytes) >
                (uint64_t)tpx__config_int(TPX_CFG_RMA_PEER_LIST_BYTES)) {
            listbuf_put(p, x->own.lb);
            x->own.lb = NULL;
            x->rma.list = NULL;
            target_refuse(x);
            return;
        }
        p->list_bytes += book - x->own.seg_bytes;
        x->own.seg_bytes = book;
    }
    tpx_seg_t *segs = malloc(h.nblocks * sizeof(*segs));
    tpx_region_t **regs = malloc(h.nkeys * sizeof(*regs));
    struct tpx_export **xp = malloc(h.nkeys * sizeof(*xp));
    if (segs == NULL || regs == NULL || xp == NULL) {
        free(segs);
        free(regs);
        free(xp);
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory to check a request");
        return;
    }
    uint32_t nregs = 0;
    for (uint32_t k = 0; k < h.nkeys; k++) {
        xp[k] = tpx__export_find(e, tpx__list_key(x->rma.list, k));
        if (xp[k] == NULL || xp[k]->region->dead)
            continue;
        uint32_t i = 0;
        while (i < nregs && regs[i] != xp[k]->region)
            i++;
        if (i == nregs)
            regs[nregs++] = xp[k]->region;
    }
    /* Every entry against its export, before a byte moves: the elements of
     * a strided entry all lie in [off, off + span). */
    tpx_status_t verdict = TPX_OK;
    const char *why = NULL;
    uint32_t bad = 0;
    tpx_list_cursor_t cur;
    tpx__list_cursor_init(&cur, x->rma.list, &h);
    for (uint32_t i = 0; i < h.nent && verdict == TPX_OK; i++) {
        uint32_t k;
        tpx_sdesc_t d;
        tpx__list_cursor_next(&cur, &k, &d);
        const struct tpx_export *ex = xp[k];
        uint64_t nel = 1, span = d.elem;
        if (d.ndims > 0)
            (void)tpx__sdesc_shape(&d, TPX_LIST_MAX_ENTRIES, &nel, &span); /* checked */
        /* its elements must not overlap where they are written here */
        why = ex == NULL                ? "unknown key"
              : ex->region->dead        ? "region deregistered"
              : d.off > ex->len || span > ex->len - d.off ? "range outside the export"
              : op == TPX_WIRE_OP_WRITE && d.ndims > 0 && tpx__sdesc_disjoint(&d) != NULL
                  ? "strided elements that overlap"
                  : NULL;
        if (why != NULL) {
            verdict = TPX_ERR_ACCESS;
            bad = i;
        }
    }
    /* Then the segments: all of them now for a short list (or a refused
     * one, whose segments only size the chunks drained), else a first step
     * now and the rest a step per pass (tpx__rma_expand_pass) while the
     * first chunks already move. */
    struct tpx_rma_expand *es = calloc(1, sizeof(*es));
    if (es == NULL) {
        free(segs);
        free(regs);
        free(xp);
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory to check a request");
        return;
    }
    *es = (struct tpx_rma_expand){.x = x, .xp = xp, .nent = h.nent, .refused = verdict != TPX_OK,
                                  .ck = {.chunk = p->chunk, .pack_max = h.pack_max,
                                         .share = h.pack_chunk}};
    tpx__list_cursor_init(&es->cur, x->rma.list, &h);
    x->segs = segs;
    x->nsegs = 0;
    x->segs_owned = 1;
    x->regions = regs;
    int whole = verdict != TPX_OK || h.nblocks <= EXPAND_STEP;
    if (expand_step(es, whole ? UINT64_MAX : EXPAND_STEP) < 0) {
        expand_free(es);
        return; /* x failed with its peer */
    }
    if (es->ent == es->nent && es->j == es->nel) {
        expand_free(es);
        listbuf_put(p, x->own.lb);
        x->own.lb = NULL;
    } else {
        es->next = p->rma_expanding;
        p->rma_expanding = es;
        x->own.exp = es;
    }
    uint32_t nseg = x->nsegs;
    if (verdict != TPX_OK) {
        for (uint32_t i = 0; i < nseg; i++)
            segs[i].region = NULL; /* nothing of ours is read or written */
        x->err = verdict;
        e->ctr.rma_rejected++;
        /* A hostile peer must not flood the log: 10 lines per peer, then counted. */
        if (p->rejects_logged < 10)
            TPX_WARN("peer %s: %s request %llu refused: entry %u: %s%s",
                     p->remote_name[0] ? p->remote_name : p->name,
                     op == TPX_WIRE_OP_WRITE ? "WRITE" : "READ", (unsigned long long)x->rma.rid, bad,
                     why,
                     p->rejects_logged == 9 ? " (further refusals of this peer are only "
                                              "counted: rma_rejected)"
                                            : "");
        p->rejects_logged++;
    } else {
        x->nregions = nregs;
        for (uint32_t i = 0; i < nregs; i++)
            regs[i]->xfers++;
    }
    if (x->kind == XK_TWRITE) {
        x->in.gate = expand_gate(x); /* receive the payload (into scratch if refused) */
        return;
    }
    tpx_ctrl_t m = {.type = TPX_CTRL_RMA_RESP, .rid = x->rma.rid, .status = verdict};
    int inl = verdict == TPX_OK && x->own.answer_inline && x->rma.total <= TPX_CTRL_BODY_MAX &&
              segs_host(x->segs, x->nsegs);
    if (inl) {
        /* The data in the answer's body, gathered as the answer takes its
         * send slot: x ends when it has left (hdr_pending). */
        m.flags = TPX_CTRL_RESP_INLINE;
        m.total = x->rma.total;
        m.body_len = (uint32_t)x->rma.total;
        x->hdr_pending = 1;
    } else if (verdict == TPX_OK) {
        m.nchunks = x->own.want_nchunks;
        m.total = x->rma.total;
    }
    if (tpx__peer_ctrl_send(p, &m, inl ? x : NULL) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        return;
    }
    /* The answer leaves now, ahead of the payload's gathers: the requester
     * posts its receives while this side packs the first chunks. */
    tpx__peer_ctrl_flush(p);
    if (p->state != PEER_READY)
        return;
    if (verdict == TPX_OK && !inl) {
        x->out = (tpx_stream_t){.nchunks = x->own.want_nchunks, .gate = expand_gate(x),
                                .run = tpx__stream_run(p, x->own.want_nchunks),
                                .first_chan = p->send_cursor};
        x->confirm_pending = p->e->cfg.failover && x->out.nchunks > 0; /* until the RECV_DONE */
        tpx__stream_cursor_move(p, &p->send_cursor, &x->out, x->rma.total);
        x->nchunks += x->out.nchunks;
        tpx__stream_enqueue(x, &x->out, 1);
    }
}

/* target_check_list, timed for the phase counters (x may be freed by it). */
static void target_check(tpx_xfer_t *x)
{
    tpx_engine_t *e = x->e;
    uint64_t t0 = tpx__now_ns();
    target_check_list(x);
    e->ctr.rma_check_ns += tpx__now_ns() - t0;
}

void tpx__rma_list_chunk_done(tpx_xfer_t *x)
{
    if (++x->own.list_done == x->in.nlist)
        target_check(x);
}

static void notif_deliver(tpx_peer_t *p, const unsigned char *msg, uint32_t len);

/* Transfer x (one-sided, either side) is DONE: answer, notify, count. */
void tpx__rma_completed(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    tpx_engine_t *e = x->e;
    int live = p->state == PEER_READY && !p->remote_closed;
    switch (x->kind) {
    case XK_WRITE:
    case XK_READ:
        if (x->req.resp_pending && p->state != PEER_READY)
            strided_unanswered(p, x); /* the connection failed under it */
        rma_unlink(p, x);
        if (x->status == TPX_OK) {
            uint64_t now = tpx__now_ns(), t0 = x->rma.t_start_ns;
            uint64_t ta = x->rma.t_answer_ns ? x->rma.t_answer_ns : now;
            uint64_t td = x->rma.t_data_ns ? x->rma.t_data_ns : ta; /* inline: no data message */
            e->ctr.rma_done++;
            e->ctr.rma_ns_answer += ta - t0;
            e->ctr.rma_ns_data += td - t0;
            e->ctr.rma_ns_total += now - t0;
        }
        if (x->status == TPX_OK && x->rma.has_notif && live &&
            notif_post(p, x->rma.notif, x->rma.notif_len, 0) != TPX_OK)
            tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a notification");
        if (x->req.prep != NULL)
            prep_unref(e, x->req.prep, x->status != TPX_OK && p->state != PEER_READY);
        x->req.prep = NULL;
        break;
    case XK_TWRITE:
        /* The bytes are in place: the notification first, then the answer. */
        if (x->status == TPX_OK && x->rma.has_notif)
            notif_deliver(p, x->rma.notif, x->rma.notif_len);
        if (live) {
            tpx_ctrl_t m = {.type = TPX_CTRL_RMA_RESP, .rid = x->rma.rid, .status = x->status};
            if (x->status > 0 || x->status == TPX_ERR_TRUNCATED)
                m.status = TPX_ERR_INTERNAL;
            if (m.status == TPX_OK && x->rma.has_notif)
                m.flags = TPX_CTRL_RESP_NOTIFIED;
            if (tpx__peer_ctrl_send(p, &m, NULL) != TPX_OK)
                tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        }
        /* fall through */
    case XK_TREAD:
        if (x->status == TPX_OK) {
            e->ctr.rma_served++;
            e->ctr.rma_served_ns += tpx__now_ns() - x->rma.t_start_ns;
            if (x->kind == XK_TWRITE)
                e->ctr.rma_bytes_in += x->rma.total;
            else
                e->ctr.rma_bytes_out += x->rma.total;
        }
        expand_end(x);
        listbuf_put(p, x->own.lb);
        x->own.lb = NULL;
        p->list_bytes -= x->own.seg_bytes;
        x->own.seg_bytes = 0;
        p->rma_ntargets--;
        break;
    default:
        break;
    }
}

/* ---- notifications ------------------------------------------------------------------------ */

typedef struct {
    char from[TPX_NAME_MAX];
    size_t len;
    unsigned char msg[];
} notif_entry_t;

static void notif_deliver(tpx_peer_t *p, const unsigned char *msg, uint32_t len)
{
    tpx_engine_t *e = p->e;
    e->ctr.notifs_received++;
    if (e->rma->notif_cap == 0) {
        e->rma->notifs = calloc(e->cfg.notif_limit, sizeof(*e->rma->notifs));
        if (e->rma->notifs != NULL)
            e->rma->notif_cap = e->cfg.notif_limit;
    }
    notif_entry_t *n = e->rma->notif_n < e->rma->notif_cap ? malloc(sizeof(*n) + len) : NULL;
    if (n == NULL) {
        e->ctr.notifs_dropped++;
        if (!e->rma->notif_overflow)
            TPX_WARN("notification queue full (%u, TPX_NOTIF_QUEUE): notifications from %s and "
                     "others are dropped until tpx_engine_get_notifs() makes room",
                     e->rma->notif_cap, p->remote_name);
        e->rma->notif_overflow = 1;
        return;
    }
    tpx__peer_proven_name(p, n->from, sizeof(n->from));
    n->len = len;
    memcpy(n->msg, msg, len);
    e->rma->notifs[(e->rma->notif_head + e->rma->notif_n) % e->rma->notif_cap] = n;
    e->rma->notif_n++;
    pthread_cond_broadcast(&e->cond);
}

void tpx__rma_notif_part(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    if (m->notif_off != p->notif_got ||
        (p->notif_got > 0 && (m->notif_total != p->notif_total || m->flags != p->notif_flags))) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, "notification parts out of order");
        return;
    }
    p->notif_total = m->notif_total;
    p->notif_flags = m->flags;
    memcpy(p->notif_buf + p->notif_got, m->part, m->part_len);
    p->notif_got += m->part_len;
    if (p->notif_got < p->notif_total)
        return;
    p->notif_got = 0;
    if (!(m->flags & TPX_CTRL_NOTIF_HELD)) {
        notif_deliver(p, p->notif_buf, p->notif_total);
        return;
    }
    /* Kept for its request, which may wait in the queue of early headers. */
    struct tpx_held *h = malloc(sizeof(*h));
    unsigned char *msg = malloc(p->notif_total ? p->notif_total : 1);
    if (h == NULL || msg == NULL) {
        free(h);
        free(msg);
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a notification");
        return;
    }
    memcpy(msg, p->notif_buf, p->notif_total);
    *h = (struct tpx_held){.len = p->notif_total, .msg = msg};
    if (p->held_tail)
        p->held_tail->next = h;
    else
        p->held_head = h;
    p->held_tail = h;
    p->held_ready = 1;
}

int tpx__rma_held_order(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    /* Parts of one notification come back to back; a HELD one is followed
     * at once by its WRITE request, and only such a request claims one. */
    int in_parts = p->notif_got > 0;
    int claims = m->type == TPX_CTRL_RMA_REQ && (m->flags & TPX_CTRL_REQ_NOTIF);
    const char *why = NULL;
    if (in_parts && m->type != TPX_CTRL_NOTIF)
        why = "a notification cut short";
    else if (p->held_ready && !claims)
        why = "a held notification without its request";
    else if (claims && !p->held_ready)
        why = "a request that claims a notification never sent";
    if (why != NULL) {
        tpx__peer_fail(p, TPX_ERR_PROTOCOL, why);
        return 0;
    }
    if (claims) {
        p->held_ready = 0;
        p->held_tail->rid = m->rid; /* the one just completed */
    }
    return 1;
}

void tpx__rma_cancel_received(tpx_peer_t *p, const tpx_ctrl_t *m)
{
    /* Still waiting to start (its request queued behind others)... */
    for (struct tpx_held *h = p->held_head; h != NULL; h = h->next) {
        if (h->rid == m->rid && !h->dropped) {
            h->dropped = 1;
            return;
        }
    }
    /* ... or running. Not found: it ended already (its answer says how). */
    for (tpx_xfer_t *x = p->active; x != NULL; x = x->next) {
        if (x->kind == XK_TWRITE && x->rma.rid == m->rid && x->state != XF_DONE) {
            x->rma.has_notif = 0;
            return;
        }
    }
}

int tpx__rma_canceled(tpx_xfer_t *x)
{
    tpx_peer_t *p = x->peer;
    if (x->kind != XK_WRITE || x->req.notif_ahead != 1 || !x->req.resp_pending ||
        p->state != PEER_READY || p->remote_closed)
        return 0;
    x->req.notif_ahead = 2;
    tpx_ctrl_t m = {.type = TPX_CTRL_RMA_CANCEL, .rid = x->rma.rid};
    if (tpx__peer_ctrl_send(p, &m, NULL) != TPX_OK) {
        tpx__peer_fail(p, TPX_ERR_NO_MEMORY, "no memory for a control message");
        return 0;
    }
    tpx__peer_ring(p);
    return 1;
}

tpx_status_t tpx__rma_notif_send(tpx_peer_t *p, const void *msg, size_t len)
{
    tpx_status_t st = tpx__peer_usable(p, "tpx_notif_send");
    if (st == TPX_OK)
        st = notif_post(p, msg, (uint32_t)len, 0);
    if (st == TPX_OK)
        tpx__peer_ring(p);
    return st;
}

tpx_status_t tpx__rma_notifs_take(tpx_engine_t *e, tpx_notif_t *out, size_t max, size_t *n)
{
    size_t k = 0;
    while (k < max && e->rma->notif_n > 0) {
        notif_entry_t *ne = e->rma->notifs[e->rma->notif_head];
        e->rma->notif_head = (e->rma->notif_head + 1) % e->rma->notif_cap;
        e->rma->notif_n--;
        memcpy(out[k].from, ne->from, sizeof(out[k].from));
        out[k].len = ne->len;
        memcpy(out[k].msg, ne->msg, ne->len);
        free(ne);
        k++;
    }
    tpx_status_t st = e->rma->notif_overflow ? TPX_ERR_OVERFLOW : TPX_OK;
    e->rma->notif_overflow = 0;
    *n = k;
    return st;
}

void tpx__rma_engine_fini(tpx_engine_t *e)
{
    if (e->rma != NULL) {
        for (uint32_t i = 0; i < e->rma->notif_n; i++)
            free(e->rma->notifs[(e->rma->notif_head + i) % e->rma->notif_cap]);
        free(e->rma->notifs);
        free(e->rma);
        e->rma = NULL;
    }
    tpx__exports_fini(e);
}
