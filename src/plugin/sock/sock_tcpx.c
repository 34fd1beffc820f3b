/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_tcpx.c - devmem-style delivery of the strict TCPX mode.
 *
 * With GPUDirect-TCPX a received payload does not land in the user buffer:
 * the NIC writes it into the plugin's bounce buffer in 4 KiB pages, and the
 * plugin publishes, per request slot, a list of fragments {src_off, len,
 * dst_off} that the consumer must gather into the destination ("unpack")
 * before irecvConsumed(). This file reproduces that faithfully enough that
 * an engine passing against it works against the real plugin:
 *  - every receive slot owns SOCK_TCPX_SLOT_PAGES (1280) bounce pages; a
 *    message is cut into fragments of at most 4 KiB (some split further,
 *    at random lengths), each placed at a random page (with a GPU bounce
 *    buffer: pages in runs from a random start, see layout) and a random
 *    offset inside it, so the unpack sees any alignment and no order;
 *  - the fragment list is published in shuffled order, with its count,
 *    only when test() reports the receive done;
 *  - the layout of a slot is not touched again until irecvConsumed.
 *
 * Receives into host memory (NCCL_PTR_HOST) skip all of this, as in Google's
 * plugin: they land straight in the user buffer, publish 0 fragments and
 * have no size cap. TPX_SOCK_TCPX=2 sends them through the bounce buffer
 * too, so a machine without a GPU exercises a consumer's unpack path.
 *
 * Placement is the real plugin's: the unpack handle {meta, bounce_buf,
 * head} and the bounce buffer are device memory, only the fragment queue
 * (meta) is host memory mapped for the device. With a GPU they are
 * cuMemAlloc memory (the handle written once with a host-to-device copy,
 * its `head` never updated afterwards) and the bounce pages are written
 * with host-to-device copies from the helpers' staging. Without a GPU they
 * are emulated device memory that the CPU cannot read: one memfd mapped
 * twice, a PROT_NONE view whose addresses are handed out and a writable
 * view only the helpers use. A consumer that dereferences the handle or
 * the bounce buffer on the CPU crashes, as it would on a GPU machine;
 * tpx reads them only through tpx__cuda_devmem_read/_gather. The bounce
 * buffer is sparse (MAP_NORESERVE): only pages that receive data take
 * memory.
 *
 * TPX_SOCK_TCPX_RXMEM_SKIP=1 models the plugin's "rxmem skip" state (RxDM
 * exported no receive memory for the GPU): the handle's bounce_buf is
 * NULL, host receives land in the buffer as always (TPX_SOCK_TCPX=2
 * included), a receive into GPU memory is refused at irecv (rc 3).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sock.h"
#include "sock_cuda.h"

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#define EMU_HANDLE_BYTES 4096u /* the handle's page, before the bounce pages */

/* Device memory without a GPU: a memfd of the handle's page and the bounce
 * pages, mapped PROT_NONE (handed out) and read-write (the helpers'). */
static tpx_status_t emu_alloc(tpx_sock_comm_t *c, size_t bounce_bytes)
{
    size_t len = EMU_HANDLE_BYTES + bounce_bytes;
    int fd = memfd_create("tpx-tcpx-devmem", MFD_CLOEXEC);
    if (fd < 0) {
        SOCK_WARN("TCPX emulation: memfd_create: %s", strerror(errno));
        return TPX_ERR_NO_MEMORY;
    }
    tpx_status_t st = TPX_ERR_NO_MEMORY;
    if (ftruncate(fd, (off_t)len) != 0) {
        SOCK_WARN("TCPX emulation: cannot size %zu bytes of device memory: %s", len,
                  strerror(errno));
        goto out_close;
    }
    void *rw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (rw == MAP_FAILED) {
        SOCK_WARN("TCPX emulation: mmap: %s", strerror(errno));
        goto out_close;
    }
    void *dev = mmap(NULL, len, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (dev == MAP_FAILED) {
        SOCK_WARN("TCPX emulation: mmap: %s", strerror(errno));
        munmap(rw, len);
        goto out_close;
    }
    c->emu_rw = rw;
    c->emu_dev = dev;
    c->emu_len = len;
    st = TPX_OK;
out_close:
    close(fd); /* the mappings keep the memory */
    return st;
}

tpx_status_t tpx__sock_tcpx_comm_init(tpx_sock_comm_t *c)
{
    c->tcpx = tpx__sock_params.tcpx;
    c->gpu = -1;
    if (tpx__random_bytes(&c->rng, sizeof(c->rng)) != TPX_OK || c->rng == 0)
        c->rng = 0x9e3779b97f4a7c15ull;
    if (c->kind != SOCK_COMM_RECV)
        return TPX_OK;
    /* The plugin's rxmem skip state: no bounce buffer at all (the handle's
     * bounce_buf NULL); the fragment queue is still there. */
    const int skip = tpx__sock_params.tcpx_rxmem_skip;
    size_t bytes = skip ? 0 : SOCK_TCPX_MAX_REQS * SOCK_TCPX_SLOT_BYTES;
    tpx_nccl_unpack_handle_t h = {0};
    if (tpx__sock_cuda_available()) {
        /* On the GPU current now, as Google's plugin (cudaGetDevice() when
         * the comm is made; NCCL's proxy, and tpx's engine, make the
         * comm's GPU current around listen/connect/accept). */
        int dev = tpx__sock_cuda_current_dev();
        void *m = NULL, *md = NULL;
        if (tpx__sock_cuda_host_alloc(dev, sizeof(*c->meta), &m, &md) != TPX_OK)
            return TPX_ERR_NO_MEMORY;
        c->gpu = dev;
        c->meta = m;
        c->meta_dev = md;
        c->meta_mapped = 1;
        if ((!skip && tpx__sock_cuda_dev_alloc(dev, bytes, (void **)&c->bounce,
                                               &c->gpu_bounce) != TPX_OK) ||
            tpx__sock_cuda_dev_alloc(dev, sizeof(h), &c->devh, &c->gpu_devh) != TPX_OK)
            return TPX_ERR_NO_MEMORY; /* comm_free releases what was made */
        h = (tpx_nccl_unpack_handle_t){.meta = md, .bounce_buf = c->bounce, .head = 0};
        if (tpx__sock_cuda_htod(dev, c->devh, &h, sizeof(h)) != TPX_OK)
            return TPX_ERR_CUDA;
    } else {
        c->meta = aligned_alloc(4096, (sizeof(*c->meta) + 4095) & ~(size_t)4095);
        if (c->meta == NULL)
            return TPX_ERR_NO_MEMORY;
        memset(c->meta, 0, sizeof(*c->meta));
        c->meta_dev = c->meta; /* host memory: its own device address */
        tpx_status_t st = emu_alloc(c, bytes);
        if (st != TPX_OK)
            return st;
        c->devh = c->emu_dev;
        c->bounce = skip ? NULL : c->emu_dev + EMU_HANDLE_BYTES;
        c->bounce_io = skip ? NULL : c->emu_rw + EMU_HANDLE_BYTES;
        h = (tpx_nccl_unpack_handle_t){.meta = c->meta_dev, .bounce_buf = c->bounce, .head = 0};
        memcpy(c->emu_rw, &h, sizeof(h));
    }
    return TPX_OK;
}

void tpx__sock_tcpx_comm_free(tpx_sock_comm_t *c)
{
    if (c->meta_mapped)
        tpx__sock_cuda_host_free(c->gpu, c->meta);
    else
        free(c->meta);
    tpx__sock_cuda_dev_free(c->gpu_bounce);
    tpx__sock_cuda_dev_free(c->gpu_devh);
    if (c->emu_len > 0) {
        munmap(c->emu_rw, c->emu_len);
        munmap(c->emu_dev, c->emu_len);
    }
    c->meta = NULL;
    c->meta_dev = c->devh = NULL;
    c->bounce = c->bounce_io = c->emu_rw = c->emu_dev = NULL;
    c->gpu_bounce = c->gpu_devh = NULL;
    c->emu_len = 0;
    c->meta_mapped = 0;
}

/* Lay out a receive of up to `size` bytes in slot `slot` (API thread, at
 * irecv time; the slot is free). Fragments are kept in message order here
 * so helpers can find them; publish() shuffles the list. */
void tpx__sock_tcpx_layout(tpx_sock_comm_t *c, uint32_t slot, uint64_t size)
{
    enum { PAGES = SOCK_TCPX_SLOT_PAGES, PAGE = TPX_NCCL_UNPACK_PAGE_SIZE };
    _Static_assert(SOCK_TCPX_SLOT_PAGES <= TPX_NCCL_UNPACK_MAX_PAGES, "fragment queue row");
    static _Thread_local uint16_t perm[PAGES];
    /* A GPU bounce buffer is written with one host-to-device copy per run
     * of adjacent pages: there, pages follow each other from a random start
     * and splits are rarer, so a 4 MiB receive costs tens of copies, not a
     * thousand. The published order is shuffled either way. */
    const int runs = c->gpu >= 0;
    const uint32_t start = runs ? (uint32_t)(rng_next(&c->rng) % PAGES) : 0;
    for (uint32_t i = 0; i < PAGES && !runs; i++)
        perm[i] = (uint16_t)i;
    tpx_nccl_load_meta_t *m = c->meta->mem[slot];
    uint64_t npages = (size + PAGE - 1) / PAGE;
    uint64_t budget = PAGES - npages; /* extra fragments we may create by splitting */
    uint64_t pos = 0;
    uint32_t n = 0;
    uint32_t base = slot * (uint32_t)SOCK_TCPX_SLOT_BYTES;
    while (pos < size) {
        uint32_t len = (uint32_t)TPX_MIN((uint64_t)PAGE, size - pos);
        uint64_t r = rng_next(&c->rng);
        if (budget > 0 && len > 1 && (r & (runs ? 63 : 7)) == 0) {
            len = 1 + (uint32_t)((r >> 8) % len);
            budget--;
        }
        uint32_t page;
        if (runs) {
            page = (start + n) % PAGES;
        } else { /* a random unused page: partial Fisher-Yates */
            uint32_t j = n + (uint32_t)((r >> 24) % (PAGES - n));
            page = perm[j];
            perm[j] = perm[n];
            perm[n] = (uint16_t)page;
        }
        uint32_t in_page = len < PAGE ? (uint32_t)((r >> 40) % (PAGE - len + 1)) : 0;
        m[n].f.src_off = base + (uint32_t)page * PAGE + in_page;
        m[n].f.len = len;
        m[n].f.dst_off = pos;
        pos += len;
        n++;
    }
    c->nfrags[slot] = n;
}

int tpx__sock_tcpx_iov(tpx_sock_comm_t *c, uint32_t slot, uint64_t msg_off, uint64_t len,
                       unsigned char *base, struct iovec *iov, int max)
{
    const tpx_nccl_load_meta_t *m = c->meta->mem[slot];
    uint32_t lo = 0, hi = c->nfrags[slot];
    while (hi - lo > 1) { /* last fragment starting at or before msg_off */
        uint32_t mid = (lo + hi) / 2;
        if (m[mid].f.dst_off <= msg_off)
            lo = mid;
        else
            hi = mid;
    }
    int k = 0;
    for (uint32_t i = lo; i < c->nfrags[slot] && len > 0 && k < max; i++) {
        uint64_t skip = msg_off - m[i].f.dst_off;
        uint64_t take = TPX_MIN((uint64_t)m[i].f.len - skip, len);
        iov[k++] = (struct iovec){base + m[i].f.src_off + skip, take};
        msg_off += take;
        len -= take;
    }
    return k;
}

/* The receive in `slot` is complete with `total` bytes: publish the
 * fragments that hold them, in random order, and their count. */
void tpx__sock_tcpx_publish(tpx_sock_comm_t *c, uint32_t slot, uint64_t total, int bounce)
{
    tpx_nccl_load_meta_t *m = c->meta->mem[slot];
    uint32_t k = 0;
    if (!bounce) { /* delivered straight into host memory: nothing to unpack */
        c->nfrags[slot] = 0;
        atomic_thread_fence(memory_order_release);
        c->meta->cnt[slot] = 0;
        return;
    }
    while (k < c->nfrags[slot] && m[k].f.dst_off < total)
        k++;
    if (k > 0 && m[k - 1].f.dst_off + m[k - 1].f.len > total)
        m[k - 1].f.len = (uint32_t)(total - m[k - 1].f.dst_off);
    for (uint32_t i = k; i > 1; i--) {
        uint32_t j = (uint32_t)(rng_next(&c->rng) % i);
        tpx_nccl_load_meta_t t = m[i - 1];
        m[i - 1] = m[j];
        m[j] = t;
    }
    c->nfrags[slot] = 0; /* the layout is the consumer's until irecvConsumed */
    atomic_thread_fence(memory_order_release);
    c->meta->cnt[slot] = k;
}
