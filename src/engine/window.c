/* SPDX-License-Identifier: Apache-2.0 */
/*
 * window.c - the plugin window phase: a comm's FIFO of requests in flight.
 *
 * Only the head of the FIFO is tested (TCPX rejects anything else). A
 * completed receive on a devmem (UNPACK) plugin is unpacked, and only then
 * released with irecvConsumed; its slot is free after that. Three outcomes
 * of test: released, not ready, error; an error is never taken for "not
 * ready" -- except rc 2 ("peer closed") without done, which TCPX reports
 * transiently at the end of a peer's life: it is polled for
 * TPX_CLOSE_GRACE_MS, then reported. This file calls only the plugin and
 * the CUDA wrappers: what a released slot or a failure means for a
 * transfer or a peer is decided by its caller (peer_pass.c, tpx__comm_pass).
 *
 * A devmem plugin's device handle and bounce buffer are device memory (in
 * Google's plugin: cuMemAlloc memory and the rx dmabuf). The CPU never
 * dereferences them: the 24-byte handle is copied to the host once per
 * comm, when it is set up (tpx__comm_unpack_load); the bounce buffer is
 * only ever read by the GPU (the gather kernel, d2d copies) or through
 * tpx__cuda_devmem_gather (one device-to-host copy per fragment). Only `meta` is read on the CPU: it is
 * host memory mapped for the GPU, read at the host address the driver
 * gives for the device address in the handle (tpx__cuda_host_view).
 */
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "faults.h"
#include "common/trace.h"
#include "mem.h"
#include "window.h"
#include "gpu/cuda.h"
#include "unpack/unpack_gpu.h"

/* The engine's GPU state of this file (e->window): its own alone; other
 * files call tpx__window_gpu_enter/leave and the unpack functions. Made
 * with the engine (tpx__window_engine_init), freed by
 * tpx__window_engine_fini. Under e->lock. */
struct tpx_window_state {
    int unpack_dev;            /* device the module/stream live on; -1: not set up */
    void *unpack_stream;       /* CUstream */
    void *unpack_hstage;       /* `host` mode: pinned gather buffer (4 MiB) */
    int gpu_ctx_dev;           /* device whose primary context the engine holds
                                  (tpx__window_gpu_enter); -1: none */
};

tpx_status_t tpx__window_engine_init(tpx_engine_t *e)
{
    e->window = calloc(1, sizeof(*e->window));
    if (e->window == NULL)
        return TPX_ERR_NO_MEMORY;
    e->window->unpack_dev = -1;
    e->window->gpu_ctx_dev = -1;
    return TPX_OK;
}

/* Module and stream for GPU unpacks on `dev` (first use). */
static tpx_status_t unpack_gpu_ready(tpx_engine_t *e, int dev)
{
    if (e->window->unpack_dev == dev)
        return TPX_OK;
    if (e->window->unpack_dev >= 0) {
        TPX_ERROR("receives into two GPUs (%d, %d) on one engine are not supported",
                  e->window->unpack_dev, dev);
        return TPX_ERR_UNSUPPORTED;
    }
    tpx_status_t st = tpx__cuda_ctx_retain(dev, NULL);
    if (st != TPX_OK)
        return st;
    CUstream s;
    /* Only the kernel mode needs the kernel (d2d and host are driver copies). */
    int kernel = e->cfg.unpack_mode == TPX_UNPACK_KERNEL;
    if (kernel && (st = tpx__unpack_gpu_init(dev)) != TPX_OK) {
        tpx__cuda_ctx_release(dev);
        return st;
    }
    if ((st = tpx__cuda_stream_create(dev, &s)) != TPX_OK) {
        if (kernel)
            tpx__unpack_gpu_fini(dev);
        tpx__cuda_ctx_release(dev);
        return st;
    }
    e->window->unpack_stream = s;
    e->window->unpack_dev = dev;
    return TPX_OK;
}

void tpx__comm_unpack_fini(tpx_engine_t *e, tpx_comm_t *c)
{
    for (int i = 0; i < TPX_WINDOW_MAX; i++)
        if (c->unpack_ev[i] != NULL) {
            tpx__cuda_event_destroy(e->window->unpack_dev, (CUevent)c->unpack_ev[i]);
            c->unpack_ev[i] = NULL;
        }
}

void tpx__comm_close_plugin(tpx_engine_t *e, tpx_comm_t *c)
{
    tpx__comm_unpack_fini(e, c);
    if (c->comm == NULL)
        return;
    int gtok = tpx__window_gpu_enter(e); /* the plugin frees the comm's GPU memory */
    tpx__regions_forget_comm(e, c->id);
    if (c->is_send)
        tpx__net_close_send(e->net, c->comm);
    else
        tpx__net_close_recv(e->net, c->comm);
    c->comm = NULL;
    tpx__window_gpu_leave(gtok);
}

int tpx__window_gpu_enter(tpx_engine_t *e)
{
    int pushed = 0;
    if (e->gpu < 0 || e->window == NULL) /* a host engine, or one whose create failed early */
        return 0;
    if (e->window->gpu_ctx_dev != e->gpu) {
        /* Held until the engine ends (no context churn per pass); a
         * rebinding before the first peer moves it. Lock held. */
        if (tpx__cuda_init() != TPX_OK || e->gpu >= tpx__cuda_device_count() ||
            tpx__cuda_ctx_retain(e->gpu, NULL) != TPX_OK)
            return 0;
        if (e->window->gpu_ctx_dev >= 0)
            tpx__cuda_ctx_release(e->window->gpu_ctx_dev);
        e->window->gpu_ctx_dev = e->gpu;
    }
    return tpx__cuda_ctx_enter(e->gpu, &pushed) == TPX_OK ? pushed : 0;
}

void tpx__window_gpu_leave(int token)
{
    tpx__cuda_ctx_leave(token);
}

void tpx__window_engine_fini(tpx_engine_t *e)
{
    if (e->window == NULL)
        return;
    if (e->window->gpu_ctx_dev >= 0) {
        tpx__cuda_ctx_release(e->window->gpu_ctx_dev);
        e->window->gpu_ctx_dev = -1;
    }
    if (e->window->unpack_dev >= 0) {
        int pushed = 0;
        if (tpx__cuda_ctx_enter(e->window->unpack_dev, &pushed) == TPX_OK) {
            (void)TPX_CU(cuStreamSynchronize, (CUstream)e->window->unpack_stream);
            tpx__cuda_ctx_leave(pushed);
        }
        tpx__cuda_stream_destroy(e->window->unpack_dev, (CUstream)e->window->unpack_stream);
        if (e->window->unpack_hstage != NULL)
            tpx__cuda_host_free(e->window->unpack_dev, e->window->unpack_hstage);
        if (e->cfg.unpack_mode == TPX_UNPACK_KERNEL)
            tpx__unpack_gpu_fini(e->window->unpack_dev);
        tpx__cuda_ctx_release(e->window->unpack_dev);
    }
    free(e->window);
    e->window = NULL;
}

/* Copy a devmem comm's unpack handle to the host, once, when the peer's
 * comms are set up: the plugin's copy is device memory. */
tpx_status_t tpx__comm_unpack_load(tpx_comm_t *c)
{
    tpx_engine_t *e = c->e;
    if (c->unpack_loaded || c->is_send || e->props.dev_type != TPX_NCCL_NET_DEVICE_UNPACK)
        return TPX_OK;
    const tpx_ncclnet_dev_handle_t *dh = (const tpx_ncclnet_dev_handle_t *)c->devh;
    if (dh->netDeviceType != TPX_NCCL_NET_DEVICE_UNPACK || dh->handle == NULL ||
        dh->size < sizeof(tpx_nccl_unpack_handle_t)) {
        TPX_ERROR("peer %s: plugin %s announced devmem delivery but gave no unpack handle",
                  c->peer_name, e->net->name);
        return TPX_ERR_PLUGIN;
    }
    tpx_nccl_unpack_handle_t h;
    tpx_status_t st = tpx__cuda_devmem_read(&h, dh->handle, sizeof(h));
    if (st != TPX_OK)
        return st;
    const void *meta = NULL;
    if (h.bounce_buf == NULL) {
        /* Google's plugin in its "rxmem skip" state (RxDM exported no
         * receive memory for this GPU: no /tmp/nvdma-<pci>, or
         * TCPX_RXMEM_IMPORT_SKIP_ODDS): receives into host memory never
         * use a bounce buffer and work; GPU receives are refused at post
         * (tpx__comm_rxmem_refuse). Told once per peer. */
        if (h.meta != NULL && tpx__cuda_host_view(h.meta, &meta) != TPX_OK)
            meta = NULL;
        if (c->is_ctrl)
            TPX_INFO("peer %s: plugin %s hands out no bounce buffer (its rxmem skip state): "
                     "receives into host memory only", c->peer_name, e->net->name);
        c->unpack = h;
        c->meta_host = meta;
        c->no_bounce = 1;
        c->unpack_loaded = 1;
        return TPX_OK;
    }
    if (h.meta == NULL || (st = tpx__cuda_host_view(h.meta, &meta)) != TPX_OK) {
        TPX_ERROR("peer %s: plugin %s: its unpack handle has no usable fragment queue or "
                  "bounce buffer (meta %p, bounce %p)", c->peer_name, e->net->name,
                  (void *)h.meta, h.bounce_buf);
        return TPX_ERR_PLUGIN;
    }
    c->unpack = h;
    c->meta_host = meta;
    c->unpack_loaded = 1;
    return TPX_OK;
}

tpx_status_t tpx__comm_rxmem_refuse(const tpx_comm_t *c, const char *fn)
{
    const tpx_engine_t *e = c->e;
    TPX_ERROR("%s: peer %s: a receive into GPU memory needs plugin %s's bounce buffer, and "
              "this comm has none: the plugin is in its \"rxmem skip\" state (RxDM exported "
              "no receive memory for this GPU). On this host, run RxDM (the receive-data-path "
              "manager) so that /tmp/nvdma-<GPU PCI address> exists for every GPU, and unset "
              "TCPX_RXMEM_IMPORT_SKIP_ODDS; `tpx-doctor` checks both. Receives into host "
              "memory work meanwhile", fn, c->peer_name, e->net->name);
    return TPX_ERR_UNSUPPORTED;
}

/* One GPU gather for the receives in window positions [n0, n0 + k): all in
 * ONE kernel launch, tracked by one event (recorded in the last one's
 * window slot, which every slot of the batch points to). The kernel reads
 * the fragment lists at their device address; the CPU at meta_host. */
static tpx_status_t unpack_gpu_batch(tpx_comm_t *c, uint64_t n0, uint32_t k)
{
    tpx_engine_t *e = c->e;
    tpx_window_t *w = &c->win;
    const tpx_nccl_unpack_handle_t *uh = &c->unpack;
    const tpx_nccl_unpack_meta_t *mh = c->meta_host;
    tpx_slot_t *first = &w->slots[n0 % (uint64_t)w->cap];
    uint32_t wlast = (uint32_t)((n0 + k - 1) % (uint64_t)w->cap);
    tpx_status_t st = unpack_gpu_ready(e, first->dst_dev);
    if (st != TPX_OK)
        return st;
    tpx_unpack_job_t jobs[TPX__UNPACK_GPU_INLINE_JOBS];
    uint32_t max_frags = 0;
    for (uint32_t i = 0; i < k; i++) {
        tpx_slot_t *s = &w->slots[(n0 + i) % (uint64_t)w->cap];
        uint32_t row = (uint32_t)((n0 + i) % TPX_NCCL_UNPACK_QUEUE_DEPTH);
        jobs[i] = (tpx_unpack_job_t){.frags = uh->meta->mem[row], .bounce = uh->bounce_buf,
                                     .dst = s->dst, .nfrags = (uint32_t)mh->cnt[row]};
        max_frags = TPX_MAX(max_frags, jobs[i].nfrags);
    }
    int pushed = 0;
    if ((st = tpx__cuda_ctx_enter(e->window->unpack_dev, &pushed)) != TPX_OK)
        return st;
    CUstream stream = (CUstream)e->window->unpack_stream;
    if (c->unpack_ev[wlast] == NULL) {
        CUevent ev;
        if ((st = tpx__cuda_event_create(e->window->unpack_dev, 0, &ev)) != TPX_OK)
            goto out;
        c->unpack_ev[wlast] = ev;
    }
    for (uint32_t i = 0; i < k && st == TPX_OK; i++) {
        tpx_slot_t *s = &w->slots[(n0 + i) % (uint64_t)w->cap];
        const tpx_nccl_load_meta_t *frags =
            mh->mem[(n0 + i) % TPX_NCCL_UNPACK_QUEUE_DEPTH]; /* CPU address */
        switch (e->cfg.unpack_mode) {
        case TPX_UNPACK_KERNEL:
            if (i == 0) /* the whole batch, one launch */
                st = tpx__unpack_gpu_launch_inline(e->window->unpack_dev, jobs, k, max_frags,
                                                   stream);
            break;
        case TPX_UNPACK_D2D:
            st = tpx__unpack_gpu_d2d(e->window->unpack_dev, s->dst, uh->bounce_buf, frags,
                                     jobs[i].nfrags, stream);
            break;
        case TPX_UNPACK_HOST:
            if (e->window->unpack_hstage == NULL &&
                (st = tpx__cuda_host_alloc(e->window->unpack_dev, TPX_NCCL_UNPACK_MAX_SLICE_SIZE,
                                           &e->window->unpack_hstage, NULL)) != TPX_OK)
                break;
            /* the staging buffer is reused: finish the previous copy first */
            if ((st = TPX_CU(cuStreamSynchronize, stream)) != TPX_OK)
                break;
            if ((st = tpx__cuda_devmem_gather(e->window->unpack_hstage, uh->bounce_buf, frags,
                                              jobs[i].nfrags)) != TPX_OK)
                break;
            st = TPX_CU(cuMemcpyHtoDAsync, (CUdeviceptr)(uintptr_t)s->dst, e->window->unpack_hstage,
                        s->len, stream);
            break;
        default: /* none: ablation only, the data is not delivered */
            break;
        }
        s->launched = 1;
        s->ev_wslot = (uint8_t)wlast;
    }
    if (st == TPX_OK)
        st = tpx__cuda_event_record((CUevent)c->unpack_ev[wlast], stream);
out:
    tpx__cuda_ctx_leave(pushed);
    return st;
}

/* A receive is done: on a devmem plugin its payload may still sit in the
 * plugin's bounce buffer (a receive into host memory usually does not: the
 * plugin delivers it straight and publishes no fragment). Gather it into
 * the destination, then (only then) release the plugin's slot with
 * irecvConsumed, in FIFO order. A GPU gather is asynchronous:
 * TPX_INPROGRESS until its event has completed. */
static tpx_status_t slot_release(tpx_comm_t *c, tpx_slot_t *s, uint64_t n)
{
    tpx_engine_t *e = c->e;
    if (c->is_send || e->props.dev_type != TPX_NCCL_NET_DEVICE_UNPACK)
        return TPX_OK;
    tpx_status_t st = tpx__comm_unpack_load(c); /* done at set-up: returns at once */
    if (st != TPX_OK)
        return st;
    uint32_t slot = (uint32_t)(n % TPX_NCCL_UNPACK_QUEUE_DEPTH);
    uint64_t nfrags = c->meta_host != NULL ? c->meta_host->cnt[slot] : 0;
    if (c->no_bounce) { /* host receives only (refused at post otherwise) */
        if (nfrags > 0) {
            TPX_ERROR("peer %s: plugin %s published %llu fragments on a comm without a "
                      "bounce buffer", c->peer_name, e->net->name, (unsigned long long)nfrags);
            return TPX_ERR_PLUGIN;
        }
        return tpx__net_consumed(e->net, c->comm, s->req);
    }
    if (nfrags > TPX_NCCL_UNPACK_MAX_PAGES) {
        TPX_ERROR("peer %s: plugin %s published %llu fragments for one receive (max %u)",
                  c->peer_name, e->net->name, (unsigned long long)nfrags,
                  TPX_NCCL_UNPACK_MAX_PAGES);
        return TPX_ERR_PLUGIN;
    }
    const tpx_nccl_load_meta_t *frags = c->meta_host->mem[slot];
    for (uint64_t i = 0; i < nfrags; i++) {
        if ((uint64_t)frags[i].f.dst_off + frags[i].f.len > s->len) {
            TPX_ERROR("peer %s: plugin %s: fragment [%llu, +%u) outside the %u-byte receive",
                      c->peer_name, e->net->name, (unsigned long long)frags[i].f.dst_off,
                      frags[i].f.len, s->len);
            return TPX_ERR_PLUGIN;
        }
    }
    if (s->dst != NULL && s->dst_dev >= 0) {
        if (!s->launched) {
            /* Batch: every receive behind this one that is done too goes
             * into the same launch (test each as it becomes the head). */
            uint32_t k = 1;
            tpx_window_t *w = &c->win;
            while (k < TPX__UNPACK_GPU_INLINE_JOBS && n + k < w->posted) {
                tpx_slot_t *t = &w->slots[(n + k) % (uint64_t)w->cap];
                if (!t->tested) {
                    int done = 0, size = 0, rc = 0;
                    if (tpx__net_test(e->net, t->req, &done, &size, &rc) != TPX_OK &&
                        !(rc == TPX_NCCL_SYSTEM_ERROR && done))
                        break; /* seen again when it is the head */
                    if (!done)
                        break;
                    t->tested = 1;
                }
                if (t->dst == NULL || t->dst_dev != s->dst_dev || t->launched)
                    break;
                k++;
            }
            /* d2d and host gather one receive at a time (debugging modes) */
            st = unpack_gpu_batch(c, n, e->cfg.unpack_mode == TPX_UNPACK_KERNEL ? k : 1);
            if (st != TPX_OK)
                return st;
        }
        int pushed = 0;
        st = tpx__cuda_ctx_enter(e->window->unpack_dev, &pushed);
        if (st == TPX_OK)
            st = tpx__cuda_event_query((CUevent)c->unpack_ev[s->ev_wslot]);
        tpx__cuda_ctx_leave(pushed);
        if (st != TPX_OK)
            return st; /* TPX_INPROGRESS: the gather is still running */
    } else if (s->dst != NULL && nfrags > 0 && e->cfg.unpack_mode != TPX_UNPACK_NONE) {
        /* Host destination (NULL dst: a drained message, discarded) left in
         * the bounce buffer: device memory, copied down fragment by
         * fragment, never read by the CPU. */
        if ((st = tpx__cuda_devmem_gather(s->dst, c->unpack.bounce_buf, frags, nfrags)) !=
            TPX_OK)
            return st;
    }
    return tpx__net_consumed(e->net, c->comm, s->req);
}

int tpx__window_look(tpx_comm_t *c, uint64_t now)
{
    tpx_chan_live_t *l = &c->live;
    const tpx_window_t *w = &c->win;
    if (l->state == TPX_CHAN_DEAD)
        return l->state;
    if (l->still_ns == 0) /* the first look: stillness counts from now */
        l->still_ns = now;
    if (w->done != l->done_seen)
        l->moved_ns = now; /* even if it is idle again: work that began and ended
                              between two looks moved it */
    if (w->done == w->posted) {
        l->state = TPX_CHAN_IDLE;
        l->still_ns = now;
    } else if (w->done != l->done_seen) {
        l->state = TPX_CHAN_MOVING;
        l->still_ns = now;
    } else {
        l->state = TPX_CHAN_STILL;
    }
    l->done_seen = w->done;
    return l->state;
}

/* Testing: is c's connection dead by a TPX_FAULT_CHANNEL_* hook? */
static int fault_dead(const tpx_comm_t *c)
{
    if (c->is_ctrl || c->gen != 0)
        return 0;
    if (c->win.done > 0 && ((!c->is_send && c->chan == tpx__faults.stall_chan - 1) ||
                            c->chan == tpx__faults.die_chan - 1 ||
                            (tpx__faults.die_chan > 0 && c->chan == tpx__faults.die_also - 1)))
        return 1;
    return c->chan == tpx__faults.die_next - 1 && *c->peer_repairs > 0;
}

int tpx__window_test(tpx_comm_t *c, tpx_slot_t *out, tpx_window_err_t *err)
{
    tpx_engine_t *e = c->e;
    tpx_window_t *w = &c->win;
    if (w->done == w->posted)
        return TPX_WIN_EMPTY;
    if (TPX_UNLIKELY(tpx__faults.stall_chan > 0 || tpx__faults.die_chan > 0 ||
                     tpx__faults.die_next > 0) && fault_dead(c))
        return TPX_WIN_EMPTY; /* testing: a dead connection's comm (TPX_FAULT_CHANNEL_STALL,
                                 _DIE, _DIE_ALSO, _DIE_NEXT); the channel connected again
                                 works */
    if (TPX_UNLIKELY(tpx__faults.ctrl_stall > 0) && c->is_ctrl &&
        w->done >= (uint64_t)tpx__faults.ctrl_stall)
        return TPX_WIN_EMPTY; /* testing: TPX_FAULT_CTRL_STALL */
    if (TPX_UNLIKELY(tpx__faults.ctrl_slow_ms > 0) && c->is_ctrl && !c->is_send) {
        uint64_t now = tpx__now_ns(); /* testing: TPX_FAULT_CTRL_SLOW_MS, one test per N ms */
        if (now < c->fault_next_ns)
            return TPX_WIN_EMPTY;
        c->fault_next_ns = now + (uint64_t)tpx__faults.ctrl_slow_ms * 1000000ull;
    }
    if (TPX_UNLIKELY(tpx__faults.ctrl_fail > 0) && c->is_ctrl &&
        w->done >= (uint64_t)tpx__faults.ctrl_fail * (c->is_send ? 1 : 2)) {
        err->st = TPX_ERR_IO; /* testing: TPX_FAULT_CTRL_FAIL */
        err->closed = 0;
        snprintf(err->why, sizeof(err->why), "injected failure (TPX_FAULT_CTRL_FAIL)");
        return TPX_WIN_ERR;
    }
    tpx_slot_t *s = &w->slots[w->done % (uint64_t)w->cap];
    int done = s->tested, size = -1, rc = 0; /* TCPX never reports a size */
    tpx_status_t st = done ? TPX_OK : tpx__net_test(e->net, s->req, &done, &size, &rc);
    if (st != TPX_OK && rc == TPX_NCCL_SYSTEM_ERROR && done)
        st = TPX_OK; /* the data arrived, then the peer closed: fine */
    if (st != TPX_OK) {
        if (rc == TPX_NCCL_SYSTEM_ERROR) {
            /* Transient at a peer's close (TCPX): messages may still
             * arrive on its other sockets. Poll on until the grace. */
            uint64_t now = tpx__now_ns();
            if (c->rc2_since_ns == 0)
                c->rc2_since_ns = now;
            if (now - c->rc2_since_ns < (uint64_t)e->cfg.close_grace_ms * 1000000ull)
                return TPX_WIN_HOLD;
            err->st = TPX_ERR_CONN_RESET;
            err->closed = 1;
            snprintf(err->why, sizeof(err->why), "the peer closed the connection");
        } else {
            err->st = st;
            err->closed = 0;
            snprintf(err->why, sizeof(err->why), "plugin test() failed with ncclResult %d", rc);
        }
        return TPX_WIN_ERR;
    }
    c->rc2_since_ns = 0;
    if (!done)
        return TPX_WIN_EMPTY;
    s->tested = 1;
    st = slot_release(c, s, w->done);
    if (st == TPX_INPROGRESS)
        return TPX_WIN_HOLD; /* the GPU gather of the head is running */
    if (st != TPX_OK) {
        err->st = st;
        err->closed = 0;
        snprintf(err->why, sizeof(err->why), "releasing a receive (irecvConsumed) failed");
        return TPX_WIN_ERR;
    }
    *out = *s;
    out->got = size < 0 ? TPX_SLOT_GOT_UNKNOWN : (uint32_t)size;
    w->done++;
    e->nmoves++;
    return TPX_WIN_DONE;
}

static tpx_status_t window_fill(tpx_comm_t *c, tpx_status_t st, void *req, uint32_t len,
                                const tpx_slot_t *what)
{
    tpx_window_t *w = &c->win;
    tpx_slot_t *s = &w->slots[w->posted % (uint64_t)w->cap];
    if (st != TPX_OK)
        return st;
    if (req == NULL)
        return TPX_INPROGRESS; /* the plugin is busy: retry on the next pass */
    *s = *what;
    s->req = req;
    s->len = len;
    s->tested = s->launched = 0;
    w->posted++;
    return TPX_OK;
}

tpx_status_t tpx__window_post(tpx_comm_t *c, void *buf, uint32_t len, void *mh,
                              const tpx_slot_t *what)
{
    tpx_engine_t *e = c->e;
    void *req = NULL;
    if (c->no_bounce && what->dst_dev >= 0)
        return tpx__comm_rxmem_refuse(c, "irecv");
    TPX_TL(TPX_TR_DATA_POST, (uint64_t)len * 2 + !c->is_send);
    tpx_status_t st = c->is_send ? tpx__net_isend(e->net, c->comm, buf, len, 0, mh, &req)
                                 : tpx__net_irecv(e->net, c->comm, buf, len, 0, mh, &req);
    return window_fill(c, st, req, len, what);
}

tpx_status_t tpx__window_postv(tpx_comm_t *c, const struct iovec *iov, int iovcnt, uint32_t len,
                               const tpx_slot_t *what)
{
    tpx_engine_t *e = c->e;
    void *req = NULL;
    TPX_TL(TPX_TR_DATA_POST, (uint64_t)len * 2 + !c->is_send);
    tpx_status_t st = c->is_send ? tpx__net_isendv(e->net, c->comm, iov, iovcnt, &req)
                                 : tpx__net_irecvv(e->net, c->comm, iov, iovcnt, &req);
    return window_fill(c, st, req, len, what);
}
