/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pack.h - shared chunks of one-sided transfers (pack.c): small blocks
 * packed back to back into one plugin message (wire.h, tpx_chunker_t).
 *
 * A comm owns its staging buffers: one chunk per window slot, each used
 * by one posted shared chunk at a time (free again when that chunk is
 * done; the last freed is used next, while it is warm in the cache). Host
 * blocks only: `stage`, plain memory; a run with GPU blocks: `gstage`,
 * page-locked host memory (the plugin sees host memory: no
 * per-message staging in the transport; the GPU reaches it by DMA). Both
 * are allocated on first use, registered as internal host regions, and
 * freed with the comm (tpx__pack_comm_fini). The engine's pack streams,
 * kernel, device scratch chunk and fragment buffer (e->pack, a struct
 * tpx_pack_state only pack.c sees inside) live until the engine ends.
 * All under e->lock, on the thread that drives progress.
 */
#ifndef TPX_ENGINE_PACK_H
#define TPX_ENGINE_PACK_H

#include "engine.h"
#include "xfer.h"

/* The GPU of the first block of GPU memory among segments [first, last] of
 * x (their run needs the mapped staging buffer), -1 if none. */
int tpx__pack_run_dev(const tpx_xfer_t *x, uint32_t first, uint32_t last);

/* A comm's staging chunks start free (comm set-up). */
void tpx__pack_comm_init(tpx_comm_t *c);

/* The staging chunk the next shared chunk of comm c goes to: the top of
 * its stack of free chunks (the last freed: the warmest in cache), its
 * bytes in the mapped buffer when gpu_dev >= 0 (the pack device is set up
 * on first use, on gpu_dev), else plain: its index, the CPU address, its
 * region and the region offset. It stays free until tpx__pack_stage_take()
 * (the chunk was posted); a posted slot gives it back with
 * tpx__pack_stage_put() when it is done. The window's slots bound the
 * chunks taken, so one is free whenever the window has room. */
tpx_status_t tpx__pack_stage(tpx_comm_t *c, int gpu_dev, uint8_t *idx, char **buf,
                             tpx_region_t **region, uint64_t *roff);
void tpx__pack_stage_take(tpx_comm_t *c);
void tpx__pack_stage_put(tpx_comm_t *c, uint8_t idx);

/* Segments [first, last] of x as the iovecs of one vectored message (net.h:
 * tpx__net_isendv), for the shared chunk about to be posted in c's next
 * window slot: in that slot's array of c->vec, which stays untouched until
 * the slot is released (the next post to the slot rewrites it). A segment
 * without region is the peer's scratch buffer (a receive: discarded).
 * Returns the count of pieces (blocks that touch in memory are one piece),
 * or 0 when the chunk must be staged instead: vectored
 * messages off (TPX_RMA_IOV=0) or not taken by the plugin, a GPU block in
 * the run, more than TPX_PACK_IOV_MAX segments, or no memory.
 *
 * The limit is the transport's (the kernel's IOV_MAX): a chunk of 1 KiB
 * elements (a KV head-slice) is 1024 pieces, which a staging copy would
 * cost a memcpy of every byte on both sides. A slot's array grows to the
 * longest run it carried (16 bytes a piece; 16 KiB at most per slot). */
#define TPX_PACK_IOV_MAX TPX_NET_IOV_MAX
typedef struct tpx_vecslot {
    struct iovec *v;
    uint32_t cap;
} tpx_vecslot_t;
int tpx__pack_iov(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                  struct iovec **iov);

/* Sender: copy segments [first, last] of x to buf + their pack_off.
 * Receiver: copy buf + pack_off to each (a segment without region: the
 * bytes are discarded). GPU blocks move by one kernel launch (or, without
 * the kernel, async copies) and one stream sync for the whole run; this
 * returns when the bytes are in place. */
tpx_status_t tpx__pack_gather(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                              char *buf);
tpx_status_t tpx__pack_scatter(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                               uint32_t last, const char *buf);

/* The same copies without waiting (the run's blocks all in the pack
 * device's memory: tpx__pack_async_ok): queued on a pack stream as op
 * *op, which tpx__pack_op_test says has finished. buf is the caller's
 * until then: a gather's bytes are not there yet, a scatter still reads
 * them. */
int tpx__pack_async_ok(const tpx_engine_t *e, const tpx_xfer_t *x, uint32_t first,
                       uint32_t last);
tpx_status_t tpx__pack_gather_async(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                                    uint32_t last, char *buf, uint64_t *op);
tpx_status_t tpx__pack_scatter_async(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                                     uint32_t last, const char *buf, uint64_t *op);
/* TPX_OK: op has finished (ops of different slots may finish in any
 * order); TPX_INPROGRESS: not yet; else the copy failed. Never blocks. */
tpx_status_t tpx__pack_op_test(tpx_engine_t *e, uint64_t op);
/* Wait until every op queued has finished (a comm or peer ends: no copy
 * may touch its staging or a transfer's memory after). */
tpx_status_t tpx__pack_ops_wait(tpx_engine_t *e);

void tpx__pack_comm_fini(tpx_comm_t *c);
/* The engine's pack state (e->pack, struct tpx_pack_state: this file's
 * alone): made with the engine, its device set up on first use, freed
 * with the engine (waiting for its ops first). */
tpx_status_t tpx__pack_engine_init(tpx_engine_t *e);
void tpx__pack_engine_fini(tpx_engine_t *e);
/* 1: no GPU copy is queued on the pack streams (nothing of pack.c's will
 * finish and wake a sleeper). */
int tpx__pack_idle(const tpx_engine_t *e);

#endif
