/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kv.c - strided entries for KV caches (tpx_kv_entries): pure arithmetic
 * over the public types, no engine state.
 *
 * A token of a block sits at a fixed stride from the previous one, and so
 * does a head, in either layout (NHD: token stride heads x dim, head stride
 * dim; HND: token stride dim, head stride block_size x dim), and a layer's
 * tensors follow each other at blocks x block bytes. So the heads two
 * sides share, of a run of tokens that stays inside one block on each side,
 * for every layer and tensor, are one 3-dimensional strided entry of
 * elements of one head of one token. Its middle and inner dimensions are
 * chosen so that the inner one is contiguous on both sides when the
 * layouts agree (heads in NHD, tokens in HND): the preparation then merges
 * it into the element, and a decode rank's heads of a token (or a head's
 * tokens of a block) move as one block.
 */
#include <stdint.h>

#include "common/log.h"
#include "tpx/tpx.h"

/* a x b, or 0 with *bad set when it overflows */
static size_t mul(size_t a, size_t b, int *bad)
{
    if (b != 0 && a > SIZE_MAX / b) {
        *bad = 1;
        return 0;
    }
    return a * b;
}

/* One side's strides, in bytes. */
typedef struct {
    size_t tensor; /* between tensors (layer x kv): blocks x block bytes */
    size_t block, token, head;
} kv_strides_t;

/* Nonzero when a size overflows, the cache's end from `offset` included. */
static int kv_strides(const tpx_kv_cache_t *c, size_t offset, kv_strides_t *s)
{
    int bad = 0;
    size_t v = mul(c->head_dim, c->dtype_size, &bad); /* one head of one token */
    s->block = mul(mul(c->block_size, c->heads, &bad), v, &bad);
    s->tensor = mul(c->blocks, s->block, &bad);
    size_t all = mul(mul(c->layers, c->kv, &bad), s->tensor, &bad);
    s->token = c->layout == TPX_KV_NHD ? mul(c->heads, v, &bad) : v;
    s->head = c->layout == TPX_KV_NHD ? v : mul(c->block_size, v, &bad);
    return bad || offset > SIZE_MAX - all || c->head0 > SIZE_MAX - c->heads;
}

static int kv_zero(const tpx_kv_cache_t *c)
{
    return c->layers == 0 || c->kv == 0 || c->blocks == 0 || c->block_size == 0 ||
           c->heads == 0 || c->head_dim == 0 || c->dtype_size == 0 ||
           (c->layout != TPX_KV_NHD && c->layout != TPX_KV_HND);
}

TPX_API tpx_status_t tpx_kv_entries(const tpx_kv_cache_t *l, tpx_region_t *local_region,
                                    size_t local_offset, const tpx_kv_cache_t *r,
                                    const tpx_rdesc_t *remote_desc, size_t remote_offset,
                                    const size_t *local_blocks, const size_t *remote_blocks,
                                    size_t ntokens, tpx_strided_t *out, size_t cap, size_t *n)
{
    if (l == NULL || r == NULL || local_blocks == NULL || remote_blocks == NULL || n == NULL ||
        ntokens == 0) {
        TPX_ERROR("tpx_kv_entries: NULL argument or no tokens");
        return TPX_ERR_INVALID_ARG;
    }
    kv_strides_t ls, rs;
    const char *why = NULL;
    if (kv_zero(l) || kv_zero(r))
        why = "a size of 0 (or an unknown layout)";
    else if (kv_strides(l, local_offset, &ls) || kv_strides(r, remote_offset, &rs))
        why = "sizes whose product overflows";
    else if (l->kv != r->kv || l->head_dim != r->head_dim || l->dtype_size != r->dtype_size ||
             l->layers != r->layers)
        why = "caches that differ in layers, kv, head_dim or dtype_size";
    size_t h0 = l->head0 > r->head0 ? l->head0 : r->head0;
    size_t lh1 = l->head0 + l->heads, rh1 = r->head0 + r->heads;
    size_t h1 = lh1 < rh1 ? lh1 : rh1;
    if (why == NULL && h0 >= h1)
        why = "caches that hold no head in common";
    if (why != NULL) {
        TPX_ERROR("tpx_kv_entries: %s", why);
        return TPX_ERR_INVALID_ARG;
    }
    /* the runs: a run ends where either side's block ends */
    size_t count = 0;
    for (size_t g = 0; g < ntokens;) {
        size_t lb = local_blocks[g / l->block_size], rb = remote_blocks[g / r->block_size];
        if (lb >= l->blocks || rb >= r->blocks) {
            TPX_ERROR("tpx_kv_entries: token %zu: block %zu of a cache of %zu blocks", g,
                      lb >= l->blocks ? lb : rb, lb >= l->blocks ? l->blocks : r->blocks);
            return TPX_ERR_INVALID_ARG;
        }
        size_t le = (g / l->block_size + 1) * l->block_size;
        size_t re = (g / r->block_size + 1) * r->block_size;
        size_t end = le < re ? le : re;
        if (end > ntokens)
            end = ntokens;
        if (out != NULL && count < cap) {
            size_t lt = g % l->block_size, rt = g % r->block_size, nt = end - g;
            /* heads inside when both are NHD (contiguous heads of a token),
             * else tokens (contiguous in HND) */
            int heads_inner = l->layout == TPX_KV_NHD;
            tpx_dim_t heads = {h1 - h0, ls.head, rs.head}, tokens = {nt, ls.token, rs.token};
            out[count] = (tpx_strided_t){
                .local = local_region,
                .local_offset = local_offset + lb * ls.block + lt * ls.token +
                                (h0 - l->head0) * ls.head,
                .remote = remote_desc,
                .remote_offset = remote_offset + rb * rs.block + rt * rs.token +
                                 (h0 - r->head0) * rs.head,
                .elem_len = l->head_dim * l->dtype_size,
                .ndims = 3,
                .dim = {{l->layers * l->kv, ls.tensor, rs.tensor},
                        heads_inner ? tokens : heads,
                        heads_inner ? heads : tokens}};
        }
        count++;
        g = end;
    }
    if (out != NULL && count > cap) {
        TPX_ERROR("tpx_kv_entries: %zu entries needed, room for %zu", count, cap);
        *n = count;
        return TPX_ERR_INVALID_ARG;
    }
    *n = count;
    return TPX_OK;
}
