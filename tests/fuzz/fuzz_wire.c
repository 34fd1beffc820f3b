/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_wire.c - libFuzzer target for the engine's wire formats
 * (src/engine/wire.h): control messages, request lists, region descriptors,
 * metadata blobs, identity messages and the set-up's READY.
 *
 * The first input byte picks the decoder, the rest is its input. Every
 * decoder must survive any input without reading outside it, and whatever
 * it accepts must come back byte for byte from the encoder (the formats
 * are canonical: unused bytes are checked to be zero); a request list is
 * rebuilt with the tpx__list_put_* functions from what the accessors read
 * and its chunk count recomputed. A broken property aborts, which
 * libFuzzer reports as a crash with the input saved.
 *
 * Fixed-size messages are copied into a heap block of exactly their size
 * (zero-padded when the input is shorter), so that ASan sees any read past
 * their end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/wire.h"
#include "fuzz.h"

static void fuzz_ctrl(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, TPX_CTRL_SIZE);
    tpx_ctrl_t m;
    if (tpx__ctrl_decode(in, &m) == TPX_OK) {
        unsigned char out[TPX_CTRL_SIZE];
        tpx__ctrl_encode(&m, out);
        TPX_FUZZ_CHECK(memcmp(out, in, TPX_CTRL_SIZE) == 0,
                       "ctrl: decode . encode is not the identity");
    }
    free(in);
}

/* Chunks of each accepted list, `chunk` from the first two data bytes. */
/* A version-3 list the checker accepted: every entry's shape holds, its
 * elements are in bounds, sum to total and cut into nchunks, and the list
 * rebuilt from the cursor is the same bytes. */
static void fuzz_list3(const unsigned char *in, size_t size, uint32_t chunk,
                       const tpx_list_hdr_t *h, uint32_t nchunks)
{
    unsigned char *out = calloc(1, size);
    TPX_FUZZ_CHECK(out != NULL, "out of memory");
    tpx__list_put_hdr(out, h);
    for (uint32_t i = 0; i < h->nkeys; i++)
        tpx__list_put_key(out, i, tpx__list_key(in, i));
    tpx_chunker_t ck = {.chunk = chunk, .pack_max = h->pack_max, .share = h->pack_chunk};
    tpx_list_cursor_t cur;
    tpx__list_cursor_init(&cur, in, h);
    size_t at = TPX_LIST_SIZE(h->nkeys, 0);
    uint64_t sum = 0, blocks = 0;
    for (uint32_t i = 0; i < h->nent; i++) {
        uint32_t k;
        tpx_sdesc_t d;
        tpx__list_cursor_next(&cur, &k, &d);
        uint64_t n = 0, span = 0;
        TPX_FUZZ_CHECK(k < h->nkeys && tpx__sdesc_shape(&d, TPX_LIST_MAX_ENTRIES, &n, &span) ==
                                           NULL,
                       "list3: bad entry accepted");
        TPX_FUZZ_CHECK(at + TPX_LIST3_ENTRY(d.ndims) <= size, "list3: entry past the end");
        at += tpx__list_put_entry3(out, at, k, &d);
        tpx_sdesc_walk_t wk;
        tpx__sdesc_walk_init(&d, &wk);
        for (uint64_t j = 0; j < n; j++, tpx__sdesc_walk_next(&d, &wk)) {
            uint64_t off = tpx__sdesc_elem(&d, j), c0;
            uint32_t po;
            int shared;
            TPX_FUZZ_CHECK(off >= d.off && off - d.off + d.elem <= span, "list3: element");
            TPX_FUZZ_CHECK(wk.off == off, "list3: the walk and the numbering disagree");
            tpx__chunker_add(&ck, d.elem, &c0, &po, &shared);
        }
        sum += n * d.elem;
        blocks += n;
    }
    TPX_FUZZ_CHECK(at == size && sum == h->total && blocks == h->nblocks &&
                       blocks <= TPX_LIST_MAX_ENTRIES && ck.nchunks == nchunks,
                   "list3: totals");
    TPX_FUZZ_CHECK(memcmp(out, in, size) == 0, "list3: rebuilt list differs");
    free(out);
}

static void fuzz_list(const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    uint32_t chunk = (uint32_t)data[0] << 8 | data[1];       /* 0 must be refused */
    chunk = chunk > 0x8000 ? (chunk - 0x8000) << 12 : chunk; /* up to 128 MiB */
    data += 2;
    size -= 2;
    unsigned char *in = tpx_fuzz_fixed(data, size, size);
    tpx_list_hdr_t h;
    uint32_t nchunks = 0;
    if (tpx__list_check(in, size, chunk, &h, &nchunks) == TPX_OK &&
        h.version == TPX_LIST_VERSION_STRIDED) {
        fuzz_list3(in, size, chunk, &h, nchunks);
    } else if (tpx__list_check(in, size, chunk, &h, &nchunks) == TPX_OK) {
        TPX_FUZZ_CHECK(chunk > 0 && size == TPX_LIST_SIZE(h.nkeys, h.nent), "list: size");
        unsigned char *out = malloc(size);
        TPX_FUZZ_CHECK(out != NULL, "out of memory");
        tpx__list_put_hdr(out, &h);
        for (uint32_t i = 0; i < h.nkeys; i++)
            tpx__list_put_key(out, i, tpx__list_key(in, i));
        uint64_t sum = 0, chunks = 0, fill = 0;
        TPX_FUZZ_CHECK(h.flags == 0 && h.pack_max <= chunk && h.pack_chunk <= chunk &&
                           (h.pack_chunk == 0 || h.pack_chunk >= h.pack_max),
                       "list: bad packing bound accepted");
        uint64_t share = h.pack_chunk ? h.pack_chunk : chunk; /* a shared chunk's capacity */
        for (uint32_t i = 0; i < h.nent; i++) {
            uint32_t k;
            uint64_t off, len;
            tpx__list_entry(in, h.nkeys, i, &k, &off, &len);
            TPX_FUZZ_CHECK(k < h.nkeys && len > 0 && off + len >= off, "list: bad entry accepted");
            tpx__list_put_entry(out, h.nkeys, i, k, off, len);
            sum += len;
            if (len <= h.pack_max) { /* small entries share chunks */
                if (fill == 0 || fill + len > share) {
                    chunks++;
                    fill = 0;
                }
                fill += len;
            } else {
                fill = 0;
                chunks += len / chunk + (len % chunk != 0);
            }
        }
        TPX_FUZZ_CHECK(sum == h.total, "list: total");
        TPX_FUZZ_CHECK(chunks == nchunks, "list: chunk count");
        TPX_FUZZ_CHECK(memcmp(out, in, size) == 0, "list: rebuilt list differs");
        free(out);
    }
    free(in);
}

static void fuzz_rdesc(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, TPX_WIRE_RDESC_SIZE);
    tpx_rdesc_fields_t d;
    if (tpx__rdesc_decode(in, &d) == TPX_OK) {
        unsigned char out[TPX_WIRE_RDESC_SIZE];
        tpx__rdesc_encode(&d, out);
        TPX_FUZZ_CHECK(memcmp(out, in, TPX_WIRE_RDESC_SIZE) == 0,
                       "rdesc: decode . encode is not the identity");
    }
    free(in);
}

/* The FNV checksums of rdesc and metadata stop almost every mutation; the
 * fuzzer reaches the checks behind them through these variants, which fix
 * the checksum up before decoding. */
static void fuzz_rdesc_fixed_sum(const uint8_t *data, size_t size)
{
    unsigned char buf[TPX_WIRE_RDESC_SIZE] = {0};
    memcpy(buf, data, size < sizeof(buf) ? size : sizeof(buf));
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < 44; i++)
        h = (h ^ buf[i]) * 16777619u;
    for (int i = 0; i < 4; i++)
        buf[44 + i] = (unsigned char)(h >> (24 - 8 * i));
    fuzz_rdesc(buf, sizeof(buf));
}

static void fuzz_md(const uint8_t *data, size_t size, int fix_sum)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, size);
    if (fix_sum && size >= 16) {
        uint32_t h = 2166136261u;
        for (size_t i = 0; i < size; i++)
            h = (h ^ (i >= 12 && i < 16 ? 0 : in[i])) * 16777619u;
        for (int i = 0; i < 4; i++)
            in[12 + i] = (unsigned char)(h >> (24 - 8 * i));
    }
    tpx_md_t *md = malloc(sizeof(*md));
    TPX_FUZZ_CHECK(md != NULL, "out of memory");
    if (tpx__md_decode(in, size, md) == TPX_OK) {
        unsigned char *out = malloc(TPX_MD_MAX);
        size_t len = 0;
        TPX_FUZZ_CHECK(out != NULL, "out of memory");
        TPX_FUZZ_CHECK(tpx__md_encode(md, out, TPX_MD_MAX, &len) == TPX_OK,
                       "md: a decoded blob does not encode");
        TPX_FUZZ_CHECK(len == size && memcmp(out, in, size) == 0,
                       "md: decode . encode is not the identity");
        free(out);
    }
    free(md);
    free(in);
}

static void fuzz_ident(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, size);
    tpx_ident_msg_t m;
    if (tpx__ident_decode(in, size, &m) == TPX_OK) {
        unsigned char out[TPX_IDENT_WIRE_SIZE];
        tpx__ident_encode(&m, out);
        TPX_FUZZ_CHECK(size == TPX_IDENT_WIRE_SIZE && memcmp(out, in, size) == 0,
                       "ident: decode . encode is not the identity");
    }
    free(in);
}

static void fuzz_ready(const uint8_t *data, size_t size)
{
    unsigned char *in = tpx_fuzz_fixed(data, size, size);
    tpx_ready_t m;
    if (tpx__ready_decode(in, size, &m) == TPX_OK) {
        unsigned char out[TPX_READY_WIRE_SIZE];
        tpx__ready_encode(m.flags, out);
        TPX_FUZZ_CHECK(m.known == (size != 0) &&
                           (size == 0 ? m.flags == 0 : memcmp(out, in, size) == 0),
                       "ready: decode . encode is not the identity");
    }
    free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    switch (sel % 8) {
    case TPX_FUZZ_WIRE_CTRL:
        fuzz_ctrl(data, size);
        break;
    case TPX_FUZZ_WIRE_LIST:
        fuzz_list(data, size);
        break;
    case TPX_FUZZ_WIRE_RDESC:
        fuzz_rdesc(data, size);
        break;
    case TPX_FUZZ_WIRE_RDESC_SUM:
        fuzz_rdesc_fixed_sum(data, size);
        break;
    case TPX_FUZZ_WIRE_MD:
        fuzz_md(data, size, 0);
        break;
    case TPX_FUZZ_WIRE_MD_SUM:
        fuzz_md(data, size, 1);
        break;
    case TPX_FUZZ_WIRE_IDENT:
        fuzz_ident(data, size);
        break;
    case TPX_FUZZ_WIRE_READY:
        fuzz_ready(data, size);
        break;
    }
    return 0;
}
