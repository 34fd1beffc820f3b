/*
 * pack.h - shared chunks of one-sided transfers (pack.c): small blocks
 * packed back to back into one plugin message (wire.h, tpx_chunker_t).
 *
 * A comm owns its staging buffers: one chunk per window slot, a slot's
 * part used by the shared chunk posted in it (free again when the slot
 * is). Host blocks only: `stage`, plain memory; a run with GPU blocks:
 * `gstage`, page-locked host memory (the plugin sees host memory: no
 * per-message staging in the transport; the GPU reaches it by DMA). Both
 * are allocated on first use, registered as internal host regions, and
 * freed with the comm (tpx__pack_comm_fini). The engine's pack stream,
 * kernel, device scratch chunk and fragment buffer (pack_*) live until the
 * engine ends. All under e->lock, on the thread that drives progress.
 */
#ifndef TPX_ENGINE_PACK_H
#define TPX_ENGINE_PACK_H

#include "engine.h"
#include "xfer.h"

/* The GPU of the first block of GPU memory among segments [first, last] of
 * x (their run needs the mapped staging buffer), -1 if none. */
int tpx__pack_run_dev(const tpx_xfer_t *x, uint32_t first, uint32_t last);

/* The staging bytes of window position n of comm c (one chunk): in the
 * mapped buffer when gpu_dev >= 0 (the pack device is set up on first use,
 * on gpu_dev), else plain: the CPU address, its region and the region
 * offset. */
tpx_status_t tpx__pack_stage(tpx_comm_t *c, uint64_t n, int gpu_dev, char **buf,
                             tpx_region_t **region, uint64_t *roff);

/* Sender: copy segments [first, last] of x to buf + their pack_off.
 * Receiver: copy buf + pack_off to each (a segment without region: the
 * bytes are discarded). GPU blocks move by one kernel launch (or, without
 * the kernel, async copies) and one stream sync for the whole run; this
 * returns when the bytes are in place. */
tpx_status_t tpx__pack_gather(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first, uint32_t last,
                              char *buf);
tpx_status_t tpx__pack_scatter(tpx_comm_t *c, const tpx_xfer_t *x, uint32_t first,
                               uint32_t last, const char *buf);

void tpx__pack_comm_fini(tpx_comm_t *c);
void tpx__pack_engine_fini(tpx_engine_t *e);

#endif
