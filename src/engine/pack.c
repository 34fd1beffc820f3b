/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack.c - gathering and scattering the small blocks of a shared chunk.
 *
 * Host blocks are copied with memcpy. GPU blocks are copied on the GPU by
 * the batched unpack kernel (src/unpack): a fragment {src_off, len,
 * dst_off} per block, ONE launch for the whole chunk -- instead of a
 * plugin message per block, each staged through a synchronous cuMemcpy by
 * the transport. The kernel works device to device, between the blocks
 * and the engine's device scratch chunk; one DMA copy moves the packed
 * bytes between the scratch and the comm's pinned staging buffer (the
 * kernel never reads host memory the CPU or a NIC wrote, so no cache of
 * the GPU can hold stale lines of it); one stream sync per chunk. Only the
 * fragment list is read from mapped host memory, fetched afresh (__ldcv).
 * The kernel's src_off is 32 bits: a scatter reads the scratch (offsets <
 * chunk); a gather reads the user's blocks, so its jobs are cut per 2 GiB
 * window of a region (a job's base is the window's start; a block that
 * starts in it ends within 4 GiB of it, blocks being at most 4 MiB).
 * Without the kernel (a build without it, TPX_UNPACK other than kernel,
 * the fake libcuda of CI) each block is one cuMemcpy*Async between staging
 * and block on the pack stream, still one sync per chunk. Blocks on a GPU
 * other than the engine's pack device (the first one seen) take a
 * synchronous copy each.
 *
 * The GPU work of a chunk is an op in one of TPX_PACK_OPS slots, each with
 * its own device scratch chunk, fragment lists and event, on one of the
 * engine's pack streams (TPX_RMA_PACK_STREAMS, slot k on stream k mod n):
 * on one stream each chunk's kernel waited for the last chunk's DMA copy
 * and the copies ran one at a time, so ops of different slots now overlap
 * and may finish in any order (each comm still takes its own in order). A
 * run whose blocks all
 * sit on the pack device can be asynchronous (tpx__pack_gather_async,
 * _scatter_async, TPX_RMA_PACK_ASYNC): the engine goes on while the copy
 * runs and asks tpx__pack_op_test later, so the copies of several chunks
 * overlap one another, the sockets and the engine's own work -- waiting for
 * each chunk's copy capped a GPU READ of 16 KiB blocks at half the speed of
 * host blocks. Other runs (host or other GPUs' blocks beside) wait for
 * their op before the CPU copies the rest.
 */
#include <stdlib.h>
#include <string.h>

#include "common/trace.h"
#include "gpu/cuda.h"
#include "mem.h"
#include "pack.h"
#include "peer.h"
#include "unpack/unpack_gpu.h"

/* Fragment descriptors of one op slot (pinned, mapped): a chunk of more
 * blocks than this waits for the stream midway. */
#define PACK_FRAGS_OP 2048
#define PACK_FRAGS (PACK_FRAGS_OP * TPX_PACK_OPS)

/* The engine's pack device (e->pack): its streams, kernel, device scratch
 * chunks, fragment buffer and op slots. This file's alone: other files ask
 * through tpx__pack_* (tpx__pack_idle, tpx__pack_ops_wait). Under e->lock. */
struct tpx_pack_state {
    int dev;               /* device of the pack streams and kernel; -1: not set up */
    int kernel;            /* the unpack kernel gathers/scatters (else async copies) */
    int nstreams;          /* streams made (TPX_RMA_PACK_STREAMS) */
    void *stream[TPX_PACK_OPS]; /* CUstream; op slot k queues on stream[k % nstreams] */
    void *frags;           /* pinned, mapped: fragments of the launches in flight */
    uint64_t frags_d;      /* ... their device address */
    void *scratch;         /* kernel mode: TPX_PACK_OPS chunks of device memory, one per
                              op slot (a tpx__cuda_mem_t) */
    void *ev[TPX_PACK_OPS]; /* CUevent per op slot: its copies finished (lazy) */
    uint64_t fin[TPX_PACK_OPS]; /* slot k: 1 + the latest op of it known finished (0: none) */
    uint64_t op_next;      /* ops queued so far; op n runs in slot n % TPX_PACK_OPS */
    uint64_t op_done;      /* ... of which the first op_done are known finished */
};

static CUstream slot_stream(const tpx_engine_t *e, uint32_t k)
{
    return (CUstream)e->pack->stream[k % (uint32_t)e->pack->nstreams];
}

int tpx__pack_run_dev(const tpx_xfer_t *x, uint32_t first, uint32_t last)
{
    for (uint32_t i = first; i <= last; i++)
        if (x->segs[i].region != NULL && x->segs[i].region->type == TPX_MEM_CUDA)
            return x->segs[i].region->cuda_dev;
    return -1;
}

/* ---- staging buffers ----------------------------------------------------------------- */

/* The engine's pack device: context, stream, fragment buffer and (if it
 * loads) the kernel, on first use. */
static tpx_status_t pack_gpu_ready(tpx_engine_t *e, int dev)
{
    if (e->pack->dev >= 0)
        return TPX_OK;
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK)
        return st;
    int ns = TPX_MAX(1, TPX_MIN(e->cfg.pack_streams, TPX_PACK_OPS));
    CUstream s[TPX_PACK_OPS] = {0};
    void *frags = NULL;
    CUdeviceptr frags_d = 0;
    int made = 0;
    for (; made < ns; made++)
        if ((st = tpx__cuda_stream_create(dev, &s[made])) != TPX_OK)
            goto err_stream;
    if ((st = tpx__cuda_host_alloc(dev, PACK_FRAGS * sizeof(tpx_nccl_load_meta_t), &frags,
                                   &frags_d)) != TPX_OK)
        goto err_stream;
    e->pack->kernel = e->cfg.unpack_mode == TPX_UNPACK_KERNEL && tpx__unpack_gpu_built() &&
                     tpx__unpack_gpu_init(dev) == TPX_OK;
    if (e->pack->kernel) {
        tpx__cuda_mem_t *m = calloc(1, sizeof(*m));
        if (m == NULL ||
            tpx__cuda_mem_alloc(dev, (size_t)e->cfg.chunk * TPX_PACK_OPS, m) != TPX_OK) {
            free(m);
            tpx__unpack_gpu_fini(dev);
            e->pack->kernel = 0;
        } else {
            e->pack->scratch = m;
        }
    }
    TPX_INFO("packed one-sided chunks of GPU %d memory: %s", dev,
             e->pack->kernel ? "gathered and scattered by the unpack kernel"
                            : "one async copy per block (no kernel: built without it, "
                              "TPX_UNPACK other than kernel, or the driver refused it)");
    e->pack->dev = dev;
    e->pack->nstreams = ns;
    memcpy(e->pack->stream, s, sizeof(s));
    e->pack->frags = frags;
    e->pack->frags_d = (uint64_t)frags_d;
    return TPX_OK;

err_stream:
    while (made-- > 0)
        tpx__cuda_stream_destroy(dev, s[made]);
    tpx__cuda_ctx_release(dev);
    return st;
}

tpx_status_t tpx__pack_engine_init(tpx_engine_t *e)
{
    e->pack = calloc(1, sizeof(*e->pack));
    if (e->pack == NULL)
        return TPX_ERR_NO_MEMORY;
    e->pack->dev = -1;
    return TPX_OK;
}

int tpx__pack_idle(const tpx_engine_t *e)
{
    return e->pack == NULL || e->pack->op_next == e->pack->op_done;
}

void tpx__pack_engine_fini(tpx_engine_t *e)
{
    if (e->pack == NULL)
        return;
    if (e->pack->dev < 0) {
        free(e->pack);
        e->pack = NULL;
        return;
    }
    (void)tpx__pack_ops_wait(e);
    for (int i = 0; i < TPX_PACK_OPS; i++) {
        if (e->pack->ev[i] != NULL)
            tpx__cuda_event_destroy(e->pack->dev, (CUevent)e->pack->ev[i]);
        e->pack->ev[i] = NULL;
    }
    for (int i = 0; i < e->pack->nstreams; i++)
        tpx__cuda_stream_destroy(e->pack->dev, (CUstream)e->pack->stream[i]);
    tpx__cuda_host_free(e->pack->dev, e->pack->frags);
    if (e->pack->kernel) {
        tpx__unpack_gpu_fini(e->pack->dev);
        tpx__cuda_mem_free((tpx__cuda_mem_t *)e->pack->scratch);
        free(e->pack->scratch);
        e->pack->scratch = NULL;
    }
    tpx__cuda_ctx_release(e->pack->dev);
    e->pack->dev = -1;
    free(e->pack);
    e->pack = NULL;
}

void tpx__pack_comm_init(tpx_comm_t *c)
{
    /* chunk 0 on top */
    for (int i = 0; i < c->win.cap; i++)
        c->stage_free[i] = (uint8_t)(c->win.cap - 1 - i);
    c->stage_nfree = c->win.cap;
}

void tpx__pack_stage_take(tpx_comm_t *c)
{
    if (c->stage_nfree > 0)
        c->stage_nfree--;
}

void tpx__pack_stage_put(tpx_comm_t *c, uint8_t idx)
{
    if (c->stage_nfree < c->win.cap)
        c->stage_free[c->stage_nfree++] = idx;
}

tpx_status_t tpx__pack_stage(tpx_comm_t *c, int gpu_dev, uint8_t *idx, char **buf,
                             tpx_region_t **region, uint64_t *roff)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    size_t len = (size_t)c->win.cap * p->chunk;
    if (c->stage_nfree == 0)
        return TPX_ERR_INTERNAL; /* cannot be: the window has room, so a chunk is free */
    *idx = c->stage_free[c->stage_nfree - 1];
    uint64_t at = (uint64_t)*idx * p->chunk;
    tpx_status_t st = TPX_OK;
    if (gpu_dev < 0) {
        if (c->stage == NULL) {
            if ((c->stage = aligned_alloc(4096, len)) == NULL)
                return TPX_ERR_NO_MEMORY;
            st = tpx__region_create(e, c->stage, len, TPX_MEM_HOST, 1, &c->stage_region);
            if (st != TPX_OK) {
                free(c->stage);
                c->stage = NULL;
                return st;
            }
        }
        *buf = (char *)c->stage + at;
        *region = c->stage_region;
        *roff = at;
        return TPX_OK;
    }
    if (c->gstage == NULL) {
        /* pinned in the pack device's context (the engine's first GPU seen) */
        if ((st = pack_gpu_ready(e, gpu_dev)) != TPX_OK)
            return st;
        void *h = NULL;
        if ((st = tpx__cuda_host_alloc(e->pack->dev, len, &h, NULL)) != TPX_OK)
            return st;
        if ((st = tpx__region_create(e, h, len, TPX_MEM_HOST, 1, &c->gstage_region)) != TPX_OK) {
            tpx__cuda_host_free(e->pack->dev, h);
            return st;
        }
        c->gstage = h;
        c->gstage_dev = e->pack->dev;
    }
    *buf = (char *)c->gstage + at;
    *region = c->gstage_region;
    *roff = at;
    return TPX_OK;
}

int tpx__pack_iov(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                  struct iovec **iov)
{
    tpx_peer_t *p = c->peer;
    tpx_engine_t *e = p->e;
    uint32_t n = last - first + 1;
    if (!e->cfg.rma_iov || !tpx__net_has_vec(e->net) || n > TPX_PACK_IOV_MAX)
        return 0;
    for (uint32_t i = first; i <= last; i++)
        if (x->segs[i].region != NULL && x->segs[i].region->type == TPX_MEM_CUDA)
            return 0;
    if (c->vec == NULL && (c->vec = calloc((size_t)c->win.cap, sizeof(*c->vec))) == NULL)
        return 0; /* staged instead */
    tpx_vecslot_t *vs = &c->vec[c->win.posted % (uint64_t)c->win.cap];
    if (vs->cap < n) {
        uint32_t cap = TPX_MAX(vs->cap, 64u);
        while (cap < n)
            cap *= 2;
        struct iovec *nv = realloc(vs->v, (size_t)cap * sizeof(*nv));
        if (nv == NULL)
            return 0; /* staged instead */
        vs->v = nv;
        vs->cap = cap;
    }
    /* Blocks that touch in memory go as one piece: a strided entry that is
     * strided on one side only (a decode rank's contiguous half of the
     * heads, read from the prefill's strided rows) costs the kernel one
     * iovec per chunk on that side instead of one per element. Discarded
     * blocks all land in the one scratch buffer and stay apart. */
    struct iovec *v = vs->v;
    uint32_t m = 0;
    for (uint32_t i = first; i <= last; i++) {
        const tpx_seg_t *g = &x->segs[i];
        char *at = g->region != NULL ? (char *)(g->region->base + g->off) : NULL;
        if (at != NULL && m > 0 && (char *)v[m - 1].iov_base + v[m - 1].iov_len == at) {
            v[m - 1].iov_len += (size_t)g->len;
            continue;
        }
        v[m++] = (struct iovec){at != NULL ? (void *)at : p->scratch, (size_t)g->len};
    }
    *iov = v;
    return (int)m;
}

void tpx__pack_comm_fini(tpx_comm_t *c)
{
    /* an op may still copy to or from its staging chunks */
    if (c->gstage != NULL)
        (void)tpx__pack_ops_wait(c->peer->e);
    free(c->pw);
    c->pw = NULL;
    c->pw_head = c->pw_n = 0;
    for (int i = 0; c->vec != NULL && i < c->win.cap; i++)
        free(c->vec[i].v); /* the plugin comm is closed: nothing reads them */
    free(c->vec);
    c->vec = NULL;
    /* the plugin comm is closed: nothing reads or writes them any more */
    if (c->stage_region != NULL)
        tpx__region_release(c->stage_region); /* its handle was on this comm only */
    free(c->stage);
    c->stage = NULL;
    c->stage_region = NULL;
    if (c->gstage_region != NULL)
        tpx__region_release(c->gstage_region);
    if (c->gstage != NULL)
        tpx__cuda_host_free(c->gstage_dev, c->gstage);
    c->gstage = NULL;
    c->gstage_region = NULL;
}

/* ---- copies ------------------------------------------------------------------------- */

/* One block on a GPU other than the pack device: a synchronous copy in its
 * own context. */
static tpx_status_t copy_other_dev(int dev, int to_stage, char *host, uint64_t daddr,
                                   uint64_t len)
{
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK)
        return st;
    int pushed = 0;
    if ((st = tpx__cuda_ctx_enter(dev, &pushed)) == TPX_OK) {
        st = to_stage ? TPX_CU(cuMemcpyDtoH, host, (CUdeviceptr)daddr, len)
                      : TPX_CU(cuMemcpyHtoD, (CUdeviceptr)daddr, host, len);
        tpx__cuda_ctx_leave(pushed);
    }
    tpx__cuda_ctx_release(dev);
    return st;
}

/* ---- ops on the pack streams ----------------------------------------------------------- */

tpx_status_t tpx__pack_ops_wait(tpx_engine_t *e)
{
    if (e->pack == NULL || e->pack->dev < 0 || e->pack->op_done == e->pack->op_next)
        return TPX_OK;
    int pushed = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(e->pack->dev, &pushed);
    for (int i = 0; st == TPX_OK && i < e->pack->nstreams; i++)
        st = TPX_CU(cuStreamSynchronize, (CUstream)e->pack->stream[i]);
    tpx__cuda_ctx_leave(pushed);
    e->pack->op_done = e->pack->op_next; /* finished, or failed for good */
    memset(e->pack->fin, 0, sizeof(e->pack->fin));
    return st;
}

/* Op `op` finished: op_done moves past every op known finished since. A
 * slot's next op is queued only once its last one finished, so a slot's
 * later op finished means its earlier ones did. */
static void op_finished(struct tpx_pack_state *ps, uint64_t op)
{
    if (ps->fin[op % TPX_PACK_OPS] < op + 1)
        ps->fin[op % TPX_PACK_OPS] = op + 1;
    while (ps->op_done < ps->op_next && ps->fin[ps->op_done % TPX_PACK_OPS] > ps->op_done)
        ps->op_done++;
}

static int op_known_done(const struct tpx_pack_state *ps, uint64_t op)
{
    return op < ps->op_done || ps->fin[op % TPX_PACK_OPS] > op;
}

tpx_status_t tpx__pack_op_test(tpx_engine_t *e, uint64_t op)
{
    if (op_known_done(e->pack, op))
        return TPX_OK;
    int pushed = 0;
    tpx_status_t st = tpx__cuda_ctx_enter(e->pack->dev, &pushed);
    if (st == TPX_OK) {
        st = tpx__cuda_event_query((CUevent)e->pack->ev[op % TPX_PACK_OPS]);
        tpx__cuda_ctx_leave(pushed);
    }
    if (st == TPX_OK)
        op_finished(e->pack, op);
    return st; /* TPX_INPROGRESS: still copying */
}

/* The next op slot, free: the op that used it last is waited for when it
 * has not finished. In the pack device's context. */
static tpx_status_t op_slot(tpx_engine_t *e, uint32_t *slot)
{
    tpx_status_t st;
    if (e->pack->op_next >= TPX_PACK_OPS) {
        uint64_t prev = e->pack->op_next - TPX_PACK_OPS;
        if (!op_known_done(e->pack, prev)) {
            if ((st = tpx__cuda_event_sync((CUevent)e->pack->ev[prev % TPX_PACK_OPS])) !=
                TPX_OK)
                return st;
            op_finished(e->pack, prev);
        }
    }
    uint32_t k = (uint32_t)(e->pack->op_next % TPX_PACK_OPS);
    if (e->pack->ev[k] == NULL) {
        CUevent ev;
        if ((st = tpx__cuda_event_create(e->pack->dev, 0, &ev)) != TPX_OK)
            return st;
        e->pack->ev[k] = ev;
    }
    *slot = k;
    return TPX_OK;
}

/* A kernel launch under construction: inline jobs over one op slot's
 * fragment lists. */
typedef struct {
    tpx_engine_t *e;
    CUstream stream;                         /* the op slot's */
    tpx_unpack_job_t jobs[TPX__UNPACK_GPU_INLINE_JOBS];
    uint32_t njobs, max_frags;
    uint32_t frag0, used;                    /* the slot's first fragment; used since a sync */
    const tpx_region_t *key_region;          /* gather: the open job's region window */
    uint64_t key_win;
    tpx_nccl_load_meta_t *last;              /* the open job's last fragment, or NULL */
    const tpx_region_t *last_region;         /* its block's region */
    uint64_t last_base;                      /* the address its region offsets count from */
} launch_t;

/* The kernel gives each fragment one warp, which copies 4 KiB a pass: a
 * 128 KiB block as one fragment took a warp 32 passes while the rest of
 * the GPU idled. Fragments are cut at this size instead (their
 * descriptors, 16 bytes each, are read over PCIe once per launch). */
#define FRAG_MAX (8u * 1024)

/* Grow fragment f by the next block's len bytes when they follow f's on
 * both sides (src_off: where its bytes are read, dst_off: written), within
 * one job, up to FRAG_MAX: a decode rank's half of the heads lands in
 * 16-token runs, so its scatter is a fragment per 8 KiB of a run instead
 * of one per 1 KiB element (its descriptor is a PCIe read). */
static int frag_extend(tpx_nccl_load_meta_t *f, uint64_t src_off, uint64_t dst_off, uint64_t len)
{
    if ((uint64_t)f->f.src_off + f->f.len != src_off || f->f.dst_off + f->f.len != dst_off ||
        (uint64_t)f->f.len + len > FRAG_MAX)
        return 0;
    f->f.len += (uint32_t)len;
    return 1;
}

static tpx_status_t launch_flush(launch_t *l)
{
    if (l->njobs == 0)
        return TPX_OK;
    tpx_engine_t *e = l->e;
    tpx_status_t st = tpx__unpack_gpu_launch_inline(e->pack->dev, l->jobs, l->njobs,
                                                    l->max_frags, l->stream);
    l->njobs = l->max_frags = 0;
    l->key_region = NULL;
    l->last = NULL;
    return st;
}

/* Room for one more fragment in a job whose base is `base` (new_job: it
 * must start a job of its own). Flushes (and syncs, when the slot's
 * fragment lists are full) as needed; the fragment's slot in the buffer. */
static tpx_status_t launch_room(launch_t *l, int new_job, const char *bounce, char *dst,
                                tpx_nccl_load_meta_t **fr)
{
    tpx_engine_t *e = l->e;
    tpx_status_t st;
    if (l->used == PACK_FRAGS_OP) {
        if ((st = launch_flush(l)) != TPX_OK ||
            (st = TPX_CU(cuStreamSynchronize, l->stream)) != TPX_OK)
            return st;
        l->used = 0;
        new_job = 1;
    }
    if (new_job || l->njobs == 0) {
        if (l->njobs == TPX__UNPACK_GPU_INLINE_JOBS && (st = launch_flush(l)) != TPX_OK)
            return st;
        tpx_nccl_load_meta_t *base_d =
            (tpx_nccl_load_meta_t *)(uintptr_t)e->pack->frags_d + l->frag0 + l->used;
        l->jobs[l->njobs++] = (tpx_unpack_job_t){.frags = base_d, .bounce = bounce, .dst = dst};
    }
    tpx_unpack_job_t *j = &l->jobs[l->njobs - 1];
    j->nfrags++;
    l->max_frags = TPX_MAX(l->max_frags, j->nfrags);
    *fr = (tpx_nccl_load_meta_t *)e->pack->frags + l->frag0 + l->used++;
    return TPX_OK;
}

static int on_pack_dev(const tpx_engine_t *e, const tpx_seg_t *g)
{
    return g->region != NULL && g->region->type == TPX_MEM_CUDA &&
           g->region->cuda_dev == e->pack->dev;
}

/* The GPU blocks of a run on the pack device, to or from the stage at
 * `buf`: queued on its op slot's pack stream as one op, *op. */
static tpx_status_t gpu_run(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                            char *buf, int to_stage, uint64_t *op)
{
    tpx_engine_t *e = c->peer->e;
    tpx_status_t st = pack_gpu_ready(e, tpx__pack_run_dev(x, first, last));
    if (st != TPX_OK)
        return st;
    int pushed = 0;
    if ((st = tpx__cuda_ctx_enter(e->pack->dev, &pushed)) != TPX_OK)
        return st;
    uint32_t k = 0;
    if ((st = op_slot(e, &k)) != TPX_OK) {
        tpx__cuda_ctx_leave(pushed);
        return st;
    }
    CUstream stream = slot_stream(e, k);
    /* the span of the pack device's blocks in the chunk, and their lowest address */
    uint64_t span_lo = UINT64_MAX, span_hi = 0, lo = UINT64_MAX;
    for (uint32_t i = first; i <= last; i++) {
        const tpx_seg_t *g = &x->segs[i];
        if (!on_pack_dev(e, g))
            continue;
        span_lo = TPX_MIN(span_lo, (uint64_t)g->pack_off);
        span_hi = TPX_MAX(span_hi, g->pack_off + g->len);
        lo = TPX_MIN(lo, (uint64_t)g->region->base + g->off);
    }
    char *scratch = e->pack->kernel
                        ? (char *)(uintptr_t)((tpx__cuda_mem_t *)e->pack->scratch)->ptr +
                              (size_t)k * e->cfg.chunk
                        : NULL;
    if (e->pack->kernel && !to_stage && span_lo < span_hi)
        st = TPX_CU(cuMemcpyHtoDAsync, (CUdeviceptr)(uintptr_t)(scratch + span_lo), buf + span_lo,
                    span_hi - span_lo, stream);
    launch_t l = {.e = e, .stream = stream, .frag0 = k * PACK_FRAGS_OP};
    for (uint32_t i = first; i <= last && st == TPX_OK; i++) {
        const tpx_seg_t *g = &x->segs[i];
        if (!on_pack_dev(e, g))
            continue;
        uint64_t addr = (uint64_t)g->region->base + g->off;
        if (!e->pack->kernel) {
            st = to_stage ? TPX_CU(cuMemcpyDtoHAsync, buf + g->pack_off, (CUdeviceptr)addr,
                                   g->len, stream)
                          : TPX_CU(cuMemcpyHtoDAsync, (CUdeviceptr)addr, buf + g->pack_off,
                                   g->len, stream);
            continue;
        }
        /* gather: src_off counts from the block's 2 GiB window of its region */
        uint64_t win = g->off >> 31;
        int fresh = to_stage && (l.key_region != g->region || l.key_win != win);
        for (uint64_t done = 0; done < g->len && st == TPX_OK;) {
            uint64_t n = TPX_MIN((uint64_t)FRAG_MAX, g->len - done);
            uint64_t a = addr + done;
            uint32_t po = g->pack_off + (uint32_t)done;
            if (!fresh && l.last != NULL && l.last_region == g->region &&
                frag_extend(l.last, to_stage ? a - l.last_base : po,
                            to_stage ? po : a - l.last_base, n)) {
                done += n;
                continue;
            }
            tpx_nccl_load_meta_t *fr;
            if (to_stage) {
                const char *base = (const char *)(uintptr_t)(g->region->base + (win << 31));
                if ((st = launch_room(&l, fresh, base, scratch, &fr)) != TPX_OK)
                    break;
                l.key_region = g->region;
                l.key_win = win;
                fr->f.src_off = (uint32_t)(a - (uint64_t)(uintptr_t)base);
                fr->f.len = (uint32_t)n;
                fr->f.dst_off = po;
                l.last_base = (uint64_t)(uintptr_t)base;
            } else {
                if ((st = launch_room(&l, 0, scratch, (char *)(uintptr_t)lo, &fr)) != TPX_OK)
                    break;
                fr->f.src_off = po;
                fr->f.len = (uint32_t)n;
                fr->f.dst_off = a - lo;
                l.last_base = lo;
            }
            l.last = fr;
            l.last_region = g->region;
            fresh = 0;
            done += n;
        }
    }
    if (st == TPX_OK)
        st = launch_flush(&l);
    if (st == TPX_OK && e->pack->kernel && to_stage && span_lo < span_hi)
        st = TPX_CU(cuMemcpyDtoHAsync, buf + span_lo, (CUdeviceptr)(uintptr_t)(scratch + span_lo),
                    span_hi - span_lo, stream);
    if (st == TPX_OK)
        st = tpx__cuda_event_record((CUevent)e->pack->ev[k], stream);
    if (st == TPX_OK)
        *op = e->pack->op_next++;
    tpx__cuda_ctx_leave(pushed);
    return st;
}

static tpx_status_t run_copy(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                             char *buf, int to_stage)
{
    tpx_engine_t *e = c->peer->e;
    tpx_status_t st = TPX_OK;
    /* GPU blocks first: a gather's span copy also writes the host blocks' bytes */
    if (tpx__pack_run_dev(x, first, last) >= 0) {
        uint64_t op = 0;
        if ((st = gpu_run(c, x, first, last, buf, to_stage, &op)) == TPX_OK) {
            int pushed = 0;
            if ((st = tpx__cuda_ctx_enter(e->pack->dev, &pushed)) == TPX_OK) {
                st = tpx__cuda_event_sync((CUevent)e->pack->ev[op % TPX_PACK_OPS]);
                tpx__cuda_ctx_leave(pushed);
            }
        }
        /* blocks of other GPUs: after the span copy, which covers their bytes too */
        for (uint32_t i = first; i <= last && st == TPX_OK; i++) {
            const tpx_seg_t *g = &x->segs[i];
            if (g->region != NULL && g->region->type == TPX_MEM_CUDA &&
                g->region->cuda_dev != e->pack->dev)
                st = copy_other_dev(g->region->cuda_dev, to_stage, buf + g->pack_off,
                                    (uint64_t)g->region->base + g->off, g->len);
        }
    }
    for (uint32_t i = first; i <= last && st == TPX_OK; i++) {
        const tpx_seg_t *g = &x->segs[i];
        if (g->region == NULL || g->region->type == TPX_MEM_CUDA)
            continue;
        char *mem = (char *)g->region->base + g->off;
        if (to_stage)
            memcpy(buf + g->pack_off, mem, g->len);
        else
            memcpy(mem, buf + g->pack_off, g->len);
    }
    return st;
}

int tpx__pack_async_ok(const tpx_engine_t *e, const tpx_xfer_t *x, uint32_t first,
                       uint32_t last)
{
    if (!e->cfg.pack_async)
        return 0;
    int dev = -1;
    for (uint32_t i = first; i <= last; i++) {
        const tpx_seg_t *g = &x->segs[i];
        if (g->region == NULL)
            continue; /* a receive's discarded block: nothing to copy */
        if (g->region->type != TPX_MEM_CUDA || (dev >= 0 && g->region->cuda_dev != dev))
            return 0;
        dev = g->region->cuda_dev;
    }
    return dev >= 0 && (e->pack->dev < 0 || e->pack->dev == dev);
}

/* The phase counters of one staged chunk's copies (one clock pair per chunk). */
static uint64_t stage_count(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t last, uint64_t t0)
{
    uint64_t ns = tpx__now_ns() - t0;
    tpx_engine_t *e = c->peer->e;
    e->ctr.rma_bytes_staged += x->segs[last].pack_off + x->segs[last].len;
    e->ctr.rma_stage_ns += ns;
    return ns;
}

tpx_status_t tpx__pack_gather(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                              char *buf)
{
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = run_copy(c, x, first, last, buf, 1);
    uint64_t ns = stage_count(c, x, last, t0);
    TPX_TL(TPX_TR_GATHERED, ns);
    return st;
}

tpx_status_t tpx__pack_scatter(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                               uint32_t last, const char *buf)
{
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = run_copy(c, x, first, last, (char *)buf, 0);
    uint64_t ns = stage_count(c, x, last, t0);
    TPX_TL(TPX_TR_SCATTERED, ns);
    return st;
}

tpx_status_t tpx__pack_gather_async(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                                    uint32_t last, char *buf, uint64_t *op)
{
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = gpu_run(c, x, first, last, buf, 1, op);
    (void)stage_count(c, x, last, t0); /* the time to queue it: the copy overlaps */
    return st;
}

tpx_status_t tpx__pack_scatter_async(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                                     uint32_t last, const char *buf, uint64_t *op)
{
    uint64_t t0 = tpx__now_ns();
    tpx_status_t st = gpu_run(c, x, first, last, (char *)buf, 0, op);
    (void)stage_count(c, x, last, t0);
    return st;
}
