/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_strided.c - strided entries of the one-sided API
 * (tpx_xfer_prepare_strided) against a CPU reference, between two engines
 * of one process over the built-in transport on loopback.
 *
 *   test_strided prop    random shapes, strides and element sizes, mixed
 *                        with plain blocks, READ and WRITE both ways
 *   test_strided kv      KV-cache layouts of tensor-parallel serving: a
 *                        decode rank's half of the heads of every token
 *                        (NHD), a 16-token HND block into its half of a
 *                        32-token one, NHD into HND
 *   test_strided kvhelper the entries tpx_kv_entries() builds for TP splits,
 *                        block sizes and layouts, against a reference that
 *                        copies every head of every token
 *   test_strided bad     descriptors refused by the requester
 *                        (TPX_ERR_INVALID_ARG) and by the owner
 *                        (TPX_ERR_ACCESS), nothing moved on either side
 *   test_strided wire    the request lists: a list of plain blocks is the
 *                        same bytes as tpx_xfer_prepare()'s, version 3's
 *                        entries are checked by the owner (overlap,
 *                        wrap-around, counts, element bounds)
 *   test_strided quota   READs of one tiny strided entry of 2^20 elements:
 *                        the owner books their blocks against the peer's
 *                        list quota and refuses those over it
 *   test_strided version a list of a version the owner does not read: the
 *                        connection drops, both sides say why, it recovers
 *   test_strided gpu     prop's shapes between host and GPU memory on both
 *                        sides (a GPU or the fake libcuda; 77 without)
 *
 * Every transfer is checked byte for byte against a model of every memory
 * of both sides: the destination equals its old bytes with the elements
 * copied in, in row-major order, and everything else is untouched.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/tpx_test.h"
#include "engine/rma.h" /* struct tpx_prep: the wire test reads the encoded list */
#include "engine/wire.h"
#include "side.h"
#include "tpx/gpu.h"
#include "tpx/tpx.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    return test_xorshift64(&rng_state);
}
static size_t rnd_in(size_t lo, size_t hi) { return lo + (size_t)(rnd() % (hi - lo + 1)); }

/* ---- both memories of a side and their models ----------------------------------------- */

typedef struct {
    side_t s;          /* host memory (s.mem is its own model: compared to a copy) */
    void *g;           /* GPU memory of s.size bytes, or NULL */
    tpx_region_t *gr;
    tpx_rdesc_t gd;
    unsigned char *gm; /* model of g */
} mside_t;

static int mside_open(mside_t *m, const char *name, size_t size, int gpu)
{
    memset(m, 0, sizeof(*m));
    if (side_open(&m->s, name, size, 0) != 0 || (m->gm = malloc(size)) == NULL)
        return -1;
    fill(m->gm, size, (uint64_t)name[0] + 7);
    if (!gpu)
        return 0;
    if (tpx_gpu_alloc(0, size, &m->g) != TPX_OK ||
        tpx_mem_register(m->s.e, m->g, size, TPX_MEM_CUDA, &m->gr) != TPX_OK ||
        tpx_region_export(m->gr, 0, 0, &m->gd) != TPX_OK)
        return -1;
    return tpx_gpu_copy(m->g, m->gm, size) == TPX_OK ? 0 : -1;
}

static void mside_close(mside_t *m)
{
    side_close(&m->s); /* the engine first: it deregisters gr */
    if (m->g != NULL)
        tpx_gpu_free(m->g);
    free(m->gm);
}

/* The reference: entry v's elements, row-major, copied between the models
 * lm (local) and rm (remote) in the direction of op. Written without the
 * library's helpers: nested loops over the dimensions padded to three. */
static void ref_apply(const tpx_strided_t *v, tpx_op_t op, unsigned char *lm, unsigned char *rm)
{
    size_t c[3] = {1, 1, 1}, ls[3] = {0, 0, 0}, rs[3] = {0, 0, 0};
    for (int d = 0; d < v->ndims; d++) {
        c[3 - v->ndims + d] = v->dim[d].count;
        ls[3 - v->ndims + d] = v->dim[d].local_stride;
        rs[3 - v->ndims + d] = v->dim[d].remote_stride;
    }
    for (size_t i = 0; i < c[0]; i++)
        for (size_t j = 0; j < c[1]; j++)
            for (size_t k = 0; k < c[2]; k++) {
                size_t lo = v->local_offset + i * ls[0] + j * ls[1] + k * ls[2];
                size_t ro = v->remote_offset + i * rs[0] + j * rs[1] + k * rs[2];
                if (op == TPX_OP_WRITE)
                    memcpy(rm + ro, lm + lo, v->elem_len);
                else
                    memcpy(lm + lo, rm + ro, v->elem_len);
            }
}

/* Strides for one side: the dimensions in a random order (innermost
 * first), each one's stride the extent inside it plus a random gap, so no
 * two elements overlap; with `overlap_ok` (a source) sometimes a stride of
 * 0 or shorter than the element instead. Returns the span. */
static size_t gen_strides(size_t *stride, const size_t *count, int nd, size_t elem,
                          int overlap_ok)
{
    int order[3] = {0, 1, 2};
    for (int i = nd - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    size_t ext = elem;
    for (int i = nd - 1; i >= 0; i--) {
        int d = order[i];
        size_t gap = rnd() % 3 == 0 ? 0 : rnd_in(1, 96);
        stride[d] = ext + gap;
        if (overlap_ok && rnd() % 6 == 0)
            stride[d] = rnd() % 2 ? 0 : rnd_in(0, elem);
        ext = stride[d] * (count[d] - 1) + ext;
        if (stride[d] == 0)
            ext = TPX_MAX(ext, elem);
    }
    size_t s = elem;
    for (int d = 0; d < nd; d++)
        s += (count[d] - 1) * stride[d];
    return s;
}

/* A random entry whose destination lies in [dlo, dlo + dlen) and whose
 * source lies in [0, ssize). Plain (ndims 0) one time in five. */
static void gen_entry(tpx_strided_t *v, tpx_op_t op, size_t dlo, size_t dlen, size_t ssize)
{
    static const size_t elems[] = {1, 2, 3, 8, 64, 100, 256, 1024, 4096};
    for (;;) {
        size_t elem = rnd() % 4 ? elems[rnd() % TPX_ARRAY_SIZE(elems)] : rnd_in(1, 9000);
        int nd = rnd() % 5 == 0 ? 0 : (int)rnd_in(1, 3);
        size_t count[3] = {1, 1, 1}, ds[3] = {0}, ss[3] = {0}, n = 1;
        for (int d = 0; d < nd; d++) {
            count[d] = rnd() % 8 == 0 ? 1 : rnd_in(1, 24);
            n *= count[d];
        }
        if (n > 3000)
            continue;
        size_t dspan = gen_strides(ds, count, nd, elem, 0);
        size_t sspan = gen_strides(ss, count, nd, elem, 1);
        if (dspan > dlen || sspan > ssize)
            continue;
        size_t doff = dlo + rnd_in(0, dlen - dspan), soff = rnd_in(0, ssize - sspan);
        int read = op == TPX_OP_READ; /* the destination is local */
        v->local_offset = read ? doff : soff;
        v->remote_offset = read ? soff : doff;
        v->elem_len = elem;
        v->ndims = nd;
        for (int d = 0; d < nd; d++)
            v->dim[d] = (tpx_dim_t){.count = count[d], .local_stride = read ? ds[d] : ss[d],
                                    .remote_stride = read ? ss[d] : ds[d]};
        return;
    }
}

/* Run list v (n entries, their local/remote set) from req to own with
 * remote rmt and check every memory of both sides against the models
 * (updated). post: times to post the one preparation. */
static void run_checked(mside_t *req, mside_t *own, tpx_remote_t *rmt, tpx_op_t op,
                        const tpx_strided_t *v, size_t n, int post, const char *what)
{
    size_t size = req->s.size;
    unsigned char *want_rh = malloc(size), *want_rg = malloc(size), *want_oh = malloc(size),
                  *want_og = malloc(size), *chk = malloc(size);
    memcpy(want_rh, req->s.mem, size);
    memcpy(want_rg, req->gm, size);
    memcpy(want_oh, own->s.mem, size);
    memcpy(want_og, own->gm, size);
    for (size_t i = 0; i < n; i++) {
        unsigned char *lm = v[i].local == req->gr ? want_rg : want_rh;
        unsigned char *rm = v[i].remote == &own->gd ? want_og : want_oh;
        ref_apply(&v[i], op, lm, rm);
    }
    tpx_prep_t *pp = NULL;
    tpx_status_t st = tpx_xfer_prepare_strided(rmt, op, v, n, &pp);
    EXPECT(st == TPX_OK, "%s: prepare: %s", what, tpx_status_string(st));
    for (int k = 0; k < post && st == TPX_OK; k++) {
        tpx_xfer_t *x = NULL;
        st = tpx_xfer_post(pp, NULL, 0, 30000, &x);
        size_t bytes = 0;
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, 30000, &bytes);
        tpx_xfer_release(x);
        EXPECT(st == TPX_OK, "%s: post %d: %s", what, k, tpx_status_string(st));
    }
    tpx_prep_release(pp);
    EXPECT(memcmp(req->s.mem, want_rh, size) == 0, "%s: requester host memory", what);
    EXPECT(memcmp(own->s.mem, want_oh, size) == 0, "%s: owner host memory", what);
    if (req->g != NULL) {
        EXPECT(tpx_gpu_copy(chk, req->g, size) == TPX_OK && memcmp(chk, want_rg, size) == 0,
               "%s: requester GPU memory", what);
        memcpy(req->gm, want_rg, size);
    }
    if (own->g != NULL) {
        EXPECT(tpx_gpu_copy(chk, own->g, size) == TPX_OK && memcmp(chk, want_og, size) == 0,
               "%s: owner GPU memory", what);
        memcpy(own->gm, want_og, size);
    }
    /* the host models are the memories themselves: a failure leaves them
     * as they are, later rounds compare against what is there */
    free(want_rh);
    free(want_rg);
    free(want_oh);
    free(want_og);
    free(chk);
}

/* Rounds of random lists between a and b; gpu: each entry's local and
 * remote memory host or GPU at random. */
static void prop_rounds(mside_t *a, mside_t *b, tpx_remote_t *ab, tpx_remote_t *ba, int rounds,
                        int gpu)
{
    size_t size = a->s.size;
    for (int round = 0; round < rounds && !test_failed(); round++) {
        tpx_op_t op = rnd() % 2 ? TPX_OP_WRITE : TPX_OP_READ;
        int dir = (int)(rnd() % 2);
        mside_t *req = dir ? b : a, *own = dir ? a : b;
        size_t n = rnd_in(1, 6), slot = size / n;
        tpx_strided_t v[6];
        memset(v, 0, sizeof(v));
        for (size_t i = 0; i < n; i++) {
            gen_entry(&v[i], op, i * slot, slot, size); /* destinations in their own slots */
            int lg = gpu && rnd() % 2, rg = gpu && rnd() % 2;
            v[i].local = lg ? req->gr : req->s.r;
            v[i].remote = rg ? &own->gd : &own->s.d;
        }
        char what[64];
        snprintf(what, sizeof(what), "round %d (%s, %zu entries)", round,
                 op == TPX_OP_READ ? "READ" : "WRITE", n);
        run_checked(req, own, dir ? ba : ab, op, v, n, round % 7 == 0 ? 2 : 1, what);
    }
}

static int t_prop(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s), *ba = load(&b.s, &a.s);
    EXPECT(ab != NULL && ba != NULL);
    if (!test_failed())
        prop_rounds(&a, &b, ab, ba, 300, 0);
    tpx_remote_release(ab);
    tpx_remote_release(ba);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

static int t_gpu(void)
{
    int ngpu = 0;
    if (tpx_gpu_count(&ngpu) != TPX_OK || ngpu < 1) {
        fprintf(stderr, "gpu: no GPU (and no fake libcuda): skipped\n");
        return 77;
    }
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 4u << 20, 1) == 0);
    EXPECT(mside_open(&b, "B", 4u << 20, 1) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s), *ba = load(&b.s, &a.s);
    EXPECT(ab != NULL && ba != NULL);
    if (!test_failed())
        prop_rounds(&a, &b, ab, ba, 40, 1);
    tpx_remote_release(ab);
    tpx_remote_release(ba);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* ---- KV-cache layouts -------------------------------------------------------------------- */

/* A KV cache of L layers x {K, V} x B blocks, each block T tokens x H
 * heads x D (x 2 bytes, bf16), NHD ([T][H][D]) or HND ([H][T][D]). */
typedef struct {
    size_t L, B, T, H, D, esz;
} kv_t;

static size_t kv_block(const kv_t *k) { return k->T * k->H * k->D * k->esz; }
static size_t kv_bytes(const kv_t *k) { return k->L * 2 * k->B * kv_block(k); }

static int t_kv(void)
{
    mside_t a, b; /* a: decode (requester), b: prefill (owner) */
    EXPECT(mside_open(&a, "A", 16u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 16u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL);
    if (test_failed())
        return 1;
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
        /* 1. NHD, decode TP = 2 x prefill TP: heads [h0, h0 + H/2) of every
         * token of every block of every layer, K and V, into a decode
         * cache of H/2 heads. One entry: [L x 2][B][T], elements of H/2
         * heads. (A WRITE is the prefill side pushing: the same entry.) */
        kv_t p = {.L = 4, .B = 16, .T = 16, .H = 8, .D = 128, .esz = 2};
        kv_t d = p;
        d.H = p.H / 2;
        for (size_t h0 = 0; h0 < p.H && !test_failed(); h0 += p.H / 2) {
            tpx_strided_t v = {
                .local = a.s.r, .local_offset = 0, .remote = &b.s.d,
                .remote_offset = h0 * p.D * p.esz, .elem_len = d.H * d.D * d.esz, .ndims = 3,
                .dim = {{p.L * 2, d.B * kv_block(&d), p.B * kv_block(&p)},
                        {p.B, kv_block(&d), kv_block(&p)},
                        {p.T, d.H * d.D * d.esz, p.H * p.D * p.esz}}};
            EXPECT(kv_bytes(&p) <= b.s.size && kv_bytes(&d) <= a.s.size);
            run_checked(&a, &b, ab, (tpx_op_t)op, &v, 1, 1, "NHD heads split");
        }
        /* 2. HND, prefill blocks of 16 tokens, decode blocks of 32: every
         * head of prefill block 2j + s into half s of decode block j. One
         * entry per half: [L x 2][B/2][H], elements of one head's 16
         * tokens. */
        kv_t p2 = {.L = 4, .B = 32, .T = 16, .H = 8, .D = 128, .esz = 2};
        kv_t d2 = p2;
        d2.T = 32;
        d2.B = 16;
        size_t row = p2.T * p2.D * p2.esz; /* one head of a prefill block */
        tpx_strided_t halves[2];
        for (int s = 0; s < 2; s++)
            halves[s] = (tpx_strided_t){
                .local = a.s.r, .local_offset = (size_t)s * row, .remote = &b.s.d,
                .remote_offset = (size_t)s * kv_block(&p2), .elem_len = row, .ndims = 3,
                .dim = {{p2.L * 2, d2.B * kv_block(&d2), p2.B * kv_block(&p2)},
                        {d2.B, kv_block(&d2), 2 * kv_block(&p2)},
                        {p2.H, d2.T * d2.D * d2.esz, row}}};
        EXPECT(kv_bytes(&p2) <= b.s.size && kv_bytes(&d2) <= a.s.size);
        run_checked(&a, &b, ab, (tpx_op_t)op, halves, 2, 1, "HND 16 into 32-token blocks");
        /* 3. NHD (prefill) into HND (decode), same blocks: elements of D,
         * [L x 2 x B][H][T] with the token stride H x D on the NHD side. */
        kv_t p3 = {.L = 2, .B = 16, .T = 16, .H = 8, .D = 64, .esz = 2};
        size_t hd = p3.D * p3.esz;
        tpx_strided_t t3 = {.local = a.s.r, .local_offset = 4096, .remote = &b.s.d,
                            .remote_offset = 8192, .elem_len = hd, .ndims = 3,
                            .dim = {{p3.L * 2 * p3.B, kv_block(&p3), kv_block(&p3)},
                                    {p3.H, p3.T * hd, hd},
                                    {p3.T, hd, p3.H * hd}}};
        run_checked(&a, &b, ab, (tpx_op_t)op, &t3, 1, 1, "NHD into HND");
    }
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* ---- the KV layout helper (tpx_kv_entries) ----------------------------------------------- */

/* Byte offset of value 0 of (tensor t = layer x kv + k, block b, token
 * slot s, head h) of cache c (h counted from c->head0). */
static size_t kv_at(const tpx_kv_cache_t *c, size_t t, size_t b, size_t s, size_t h)
{
    size_t v = c->head_dim * c->dtype_size, blk = c->block_size * c->heads * v;
    size_t in = c->layout == TPX_KV_NHD ? (s * c->heads + h) * v : (h * c->block_size + s) * v;
    return t * c->blocks * blk + b * blk + in;
}

/* The reference of tpx_kv_entries: every value of every common head of
 * every token, from the caches' definitions. */
static void kv_ref(const tpx_kv_cache_t *lc, size_t loff, const tpx_kv_cache_t *rc, size_t roff,
                   const size_t *lb, const size_t *rb, size_t ntok, tpx_op_t op,
                   unsigned char *lm, unsigned char *rm)
{
    size_t h0 = TPX_MAX(lc->head0, rc->head0);
    size_t h1 = TPX_MIN(lc->head0 + lc->heads, rc->head0 + rc->heads);
    size_t v = lc->head_dim * lc->dtype_size;
    for (size_t t = 0; t < lc->layers * lc->kv; t++)
        for (size_t g = 0; g < ntok; g++)
            for (size_t h = h0; h < h1; h++) {
                size_t lo = loff + kv_at(lc, t, lb[g / lc->block_size], g % lc->block_size,
                                         h - lc->head0);
                size_t ro = roff + kv_at(rc, t, rb[g / rc->block_size], g % rc->block_size,
                                         h - rc->head0);
                if (op == TPX_OP_WRITE)
                    memcpy(rm + ro, lm + lo, v);
                else
                    memcpy(lm + lo, rm + ro, v);
            }
}

static int t_kvhelper(void)
{
    mside_t a, b; /* a: decode, b: prefill */
    EXPECT(mside_open(&a, "A", 16u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 16u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL);
    if (test_failed())
        return 1;
    /* (decode layout, block size, heads, rank of 8/heads) x (prefill ...):
     * TP 2 against 1 and 1 against 2, 16 against 32 tokens, NHD and HND */
    static const struct {
        tpx_kv_layout_t dl;
        size_t dbs, dh, dh0;
        tpx_kv_layout_t pl;
        size_t pbs, ph, ph0;
        size_t ntok;
    } cases[] = {
        {TPX_KV_NHD, 16, 4, 4, TPX_KV_NHD, 16, 8, 0, 200},  /* decode TP 2, rank 1 */
        {TPX_KV_HND, 16, 4, 0, TPX_KV_HND, 16, 8, 0, 100},
        {TPX_KV_HND, 32, 8, 0, TPX_KV_HND, 16, 8, 0, 90},   /* 16 into 32-token blocks */
        {TPX_KV_HND, 32, 4, 4, TPX_KV_NHD, 16, 8, 0, 77},   /* all of it at once */
        {TPX_KV_NHD, 16, 8, 0, TPX_KV_HND, 32, 4, 4, 120},  /* prefill TP 2, rank 1 */
        {TPX_KV_NHD, 16, 2, 2, TPX_KV_NHD, 16, 4, 0, 33},   /* TP 4 against TP 2 */
    };
    for (size_t c = 0; c < TPX_ARRAY_SIZE(cases) && !test_failed(); c++) {
        tpx_kv_cache_t dc = {.layers = 3, .kv = 2, .blocks = 24, .block_size = cases[c].dbs,
                             .heads = cases[c].dh, .head0 = cases[c].dh0, .head_dim = 64,
                             .dtype_size = 2, .layout = cases[c].dl};
        tpx_kv_cache_t pc = dc;
        pc.block_size = cases[c].pbs;
        pc.heads = cases[c].ph;
        pc.head0 = cases[c].ph0;
        pc.layout = cases[c].pl;
        size_t ntok = cases[c].ntok, nlb = (ntok + dc.block_size - 1) / dc.block_size,
               npb = (ntok + pc.block_size - 1) / pc.block_size;
        size_t lb[64], rb[64];
        /* the sequence's blocks: distinct ids in a random order */
        for (size_t i = 0; i < dc.blocks; i++)
            lb[i] = i, rb[i] = i;
        for (size_t i = dc.blocks - 1; i > 0; i--) {
            size_t j = (size_t)(rnd() % (i + 1)), t = lb[i];
            lb[i] = lb[j];
            lb[j] = t;
            j = (size_t)(rnd() % (i + 1)), t = rb[i];
            rb[i] = rb[j];
            rb[j] = t;
        }
        EXPECT(nlb <= dc.blocks && npb <= pc.blocks);
        size_t need = 0, n = 0;
        EXPECT(tpx_kv_entries(&dc, a.s.r, 4096, &pc, &b.s.d, 8192, lb, rb, ntok, NULL, 0,
                              &need) == TPX_OK);
        tpx_strided_t *v = calloc(need + 1, sizeof(*v));
        if (need > 1)
            EXPECT(tpx_kv_entries(&dc, a.s.r, 4096, &pc, &b.s.d, 8192, lb, rb, ntok, v, need - 1,
                                  &n) == TPX_ERR_INVALID_ARG && n == need,
                   "case %zu: a short array", c);
        EXPECT(tpx_kv_entries(&dc, a.s.r, 4096, &pc, &b.s.d, 8192, lb, rb, ntok, v, need, &n) ==
                   TPX_OK && n == need);
        for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
            size_t size = a.s.size;
            unsigned char *want_a = malloc(size), *want_b = malloc(size);
            memcpy(want_a, a.s.mem, size);
            memcpy(want_b, b.s.mem, size);
            kv_ref(&dc, 4096, &pc, 8192, lb, rb, ntok, (tpx_op_t)op, want_a, want_b);
            tpx_prep_t *pp = NULL;
            tpx_xfer_t *x = NULL;
            tpx_status_t st = tpx_xfer_prepare_strided(ab, (tpx_op_t)op, v, n, &pp);
            if (st == TPX_OK)
                st = tpx_xfer_post(pp, NULL, 0, 30000, &x);
            if (st == TPX_OK)
                st = tpx_xfer_wait(x, 30000, NULL);
            tpx_xfer_release(x);
            tpx_prep_release(pp);
            EXPECT(st == TPX_OK, "case %zu %s: %s", c, op == TPX_OP_READ ? "READ" : "WRITE",
                   tpx_status_string(st));
            EXPECT(memcmp(a.s.mem, want_a, size) == 0 && memcmp(b.s.mem, want_b, size) == 0,
                   "case %zu %s: the bytes", c, op == TPX_OP_READ ? "READ" : "WRITE");
            free(want_a);
            free(want_b);
        }
        free(v);
    }
    /* refused: no common head, a block id past the cache, mismatched
     * sizes, no tokens */
    tpx_kv_cache_t c1 = {.layers = 1, .kv = 2, .blocks = 4, .block_size = 16, .heads = 4,
                         .head0 = 0, .head_dim = 64, .dtype_size = 2, .layout = TPX_KV_NHD};
    tpx_kv_cache_t c2 = c1;
    c2.head0 = 4;
    size_t ids[4] = {0, 1, 2, 3}, bad_ids[4] = {0, 4, 1, 2}, n = 0;
    tpx_strided_t v[8];
    EXPECT(tpx_kv_entries(&c1, a.s.r, 0, &c2, &b.s.d, 0, ids, ids, 16, v, 8, &n) ==
           TPX_ERR_INVALID_ARG);
    EXPECT(tpx_kv_entries(&c1, a.s.r, 0, &c1, &b.s.d, 0, ids, bad_ids, 32, v, 8, &n) ==
           TPX_ERR_INVALID_ARG);
    c2 = c1;
    c2.head_dim = 128;
    EXPECT(tpx_kv_entries(&c1, a.s.r, 0, &c2, &b.s.d, 0, ids, ids, 16, v, 8, &n) ==
           TPX_ERR_INVALID_ARG);
    EXPECT(tpx_kv_entries(&c1, a.s.r, 0, &c1, &b.s.d, 0, ids, ids, 0, v, 8, &n) ==
           TPX_ERR_INVALID_ARG);
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* ---- refusals ---------------------------------------------------------------------------- */

/* A descriptor with a longer range than its export (checksum recomputed):
 * the requester believes it, the owner does not. */
static tpx_rdesc_t forge_len(const tpx_rdesc_t *d, uint64_t add_len)
{
    tpx_rdesc_fields_t f;
    tpx_rdesc_t out;
    if (tpx__rdesc_decode(d->bytes, &f) != TPX_OK)
        abort();
    f.len += add_len;
    tpx__rdesc_encode(&f, out.bytes);
    return out;
}

static int t_bad(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 4u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 4u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL && tpx_remote_connect(ab, 10000) == TPX_OK);
    if (test_failed())
        return 1;
    size_t size = a.s.size;
    unsigned char *snap_a = malloc(size), *snap_b = malloc(size);
    memcpy(snap_a, a.s.mem, size);
    memcpy(snap_b, b.s.mem, size);
    const size_t big = (size_t)1 << 62;
    /* a good entry, then a bad one: the list is refused as a whole */
    tpx_strided_t good = {.local = a.s.r, .remote = &b.s.d, .elem_len = 64, .ndims = 1,
                          .dim = {{16, 128, 256}}};
    static const struct {
        const char *what;
        int op; /* 0: both */
        size_t elem, loff, roff;
        int ndims;
        tpx_dim_t dim[3];
    } cases[] = {
        {"count 0", 0, 64, 0, 0, 2, {{4, 4096, 4096}, {0, 64, 64}}},
        {"element of 0 bytes", 0, 0, 0, 0, 1, {{4, 64, 64}}},
        {"4 dimensions", 0, 8, 0, 0, 4, {{2, 8, 8}, {2, 16, 16}, {2, 32, 32}}},
        {"negative dimensions", 0, 8, 0, 0, -1, {{2, 8, 8}}},
        {"local stride that wraps", 0, 8, 0, 0, 1, {{3, (size_t)1 << 63, 8}}},
        {"remote stride that wraps", 0, 8, 0, 0, 2, {{2, 8, 8}, {5, 8, big}}},
        {"local range past the region", 0, 4096, 0, 0, 1, {{1025, 4096, 8}}},
        {"remote range past the export", 0, 8, 0, 4096, 1, {{2, 8, (4u << 20) - 4096}}},
        {"remote offset past the export", 0, 8, 0, 4u << 20, 0, {{0}}},
        {"huge count", 0, 1, 0, 0, 1, {{(size_t)1 << 40, 1, 1}}},
        {"more than 2^20 blocks", 0, 1, 0, 0, 2, {{2048, 2048, 2048}, {1024, 2, 2}}},
        {"READ: local elements overlap", TPX_OP_READ, 64, 0, 0, 1, {{4, 32, 64}}},
        {"READ: local stride 0", TPX_OP_READ, 64, 0, 0, 1, {{2, 0, 64}}},
        {"READ: local dimensions interleave", TPX_OP_READ, 8, 0, 0, 2, {{4, 16, 8}, {4, 8, 32}}},
        {"WRITE: remote elements overlap", TPX_OP_WRITE, 64, 0, 0, 2, {{2, 4096, 100}, {3, 64, 63}}},
        {"WRITE: remote stride 0", TPX_OP_WRITE, 64, 0, 0, 1, {{3, 64, 0}}},
    };
    for (size_t c = 0; c < TPX_ARRAY_SIZE(cases); c++) {
        for (int op = TPX_OP_READ; op <= TPX_OP_WRITE; op++) {
            if (cases[c].op != 0 && cases[c].op != op)
                continue;
            tpx_strided_t v[2] = {good,
                                  {.local = a.s.r, .local_offset = cases[c].loff,
                                   .remote = &b.s.d, .remote_offset = cases[c].roff,
                                   .elem_len = cases[c].elem, .ndims = cases[c].ndims}};
            memcpy(v[1].dim, cases[c].dim, sizeof(v[1].dim));
            tpx_prep_t *pp = NULL;
            tpx_status_t st = tpx_xfer_prepare_strided(ab, (tpx_op_t)op, v, 2, &pp);
            EXPECT(st == TPX_ERR_INVALID_ARG && pp == NULL, "%s (%s): %s", cases[c].what,
                   op == TPX_OP_READ ? "READ" : "WRITE", tpx_status_string(st));
            if (pp != NULL)
                tpx_prep_release(pp);
        }
    }
    /* the source may overlap: READ of one remote element into 4 local ones */
    {
        tpx_strided_t v = {.local = a.s.r, .local_offset = 65536, .remote = &b.s.d,
                           .remote_offset = 300, .elem_len = 100, .ndims = 1,
                           .dim = {{4, 100, 0}}};
        run_checked(&a, &b, ab, TPX_OP_READ, &v, 1, 1, "READ of an overlapping source");
        memcpy(snap_a, a.s.mem, size);
    }
    /* the owner's own check: a descriptor that claims 64 KiB past the
     * export; the last element of a strided entry lies beyond it */
    tpx_rdesc_t sub, past;
    EXPECT(tpx_region_export(b.s.r, 1u << 20, 1u << 20, &sub) == TPX_OK);
    past = forge_len(&sub, 65536);
    int rejected = 0;
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
        tpx_strided_t v[2] = {good,
                              {.local = a.s.r, .local_offset = 8192, .remote = &past,
                               .remote_offset = 0, .elem_len = 512, .ndims = 2,
                               .dim = {{5, 65536, 256 * 1024}, {4, 1024, 4096}}}};
        /* element (4, 3) ends 12.5 KiB past the 1 MiB export */
        tpx_xfer_t *x = NULL;
        tpx_prep_t *pp = NULL;
        tpx_status_t st = tpx_xfer_prepare_strided(ab, (tpx_op_t)op, v, 2, &pp);
        if (st == TPX_OK)
            st = tpx_xfer_post(pp, "n", 1, 10000, &x);
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, 10000, NULL);
        tpx_xfer_release(x);
        tpx_prep_release(pp);
        EXPECT(st == TPX_ERR_ACCESS, "owner's check (%s): %s",
               op == TPX_OP_READ ? "READ" : "WRITE", tpx_status_string(st));
        rejected++;
    }
    EXPECT(memcmp(snap_a, a.s.mem, size) == 0, "requester memory changed by a refused request");
    EXPECT(memcmp(snap_b, b.s.mem, size) == 0, "owner memory changed by a refused request");
    tpx_engine_counters_t cb = {.size = sizeof(cb)};
    EXPECT(tpx_engine_counters(b.s.e, &cb) == TPX_OK);
    EXPECT_EQ(cb.rma_rejected, (uint64_t)rejected);
    size_t nn = 1;
    tpx_notif_t nt;
    EXPECT(tpx_engine_get_notifs(b.s.e, &nt, 1, &nn) == TPX_OK && nn == 0,
           "a notification of a refused WRITE");
    /* the connection still serves */
    good.local_offset = 1u << 20;
    run_checked(&a, &b, ab, TPX_OP_READ, &good, 1, 1, "after the refusals");
    free(snap_a);
    free(snap_b);
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* ---- the request lists ------------------------------------------------------------------- */

static int t_wire(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL);
    if (test_failed())
        return 1;
    /* Entries that merge into plain blocks (contiguous on both sides, a
     * dimension of one element, plain blocks that follow each other) make
     * the list tpx_xfer_prepare() makes of the same blocks, byte for byte. */
    tpx_strided_t sv[3] = {
        {.local = a.s.r, .local_offset = 0, .remote = &b.s.d, .remote_offset = 4096,
         .elem_len = 256, .ndims = 2, .dim = {{1, 12345, 999}, {16, 256, 256}}},
        {.local = a.s.r, .local_offset = 4096, .remote = &b.s.d, .remote_offset = 8192,
         .elem_len = 100},
        {.local = a.s.r, .local_offset = 65536, .remote = &b.s.d, .remote_offset = 0,
         .elem_len = 64, .ndims = 3, .dim = {{2, 1024, 1024}, {4, 256, 256}, {4, 64, 64}}},
    };
    tpx_iov_t iv[3] = {
        {.local = a.s.r, .local_offset = 0, .remote = &b.s.d, .remote_offset = 4096, .len = 4096},
        {.local = a.s.r, .local_offset = 4096, .remote = &b.s.d, .remote_offset = 8192,
         .len = 100},
        {.local = a.s.r, .local_offset = 65536, .remote = &b.s.d, .remote_offset = 0,
         .len = 2048},
    };
    tpx_prep_t *ps = NULL, *pi = NULL;
    EXPECT(tpx_xfer_prepare_strided(ab, TPX_OP_WRITE, sv, 3, &ps) == TPX_OK);
    EXPECT(tpx_xfer_prepare(ab, TPX_OP_WRITE, iv, 3, &pi) == TPX_OK);
    if (ps != NULL && pi != NULL) {
        EXPECT(!ps->strided && ps->list_len == pi->list_len &&
                   memcmp(ps->list, pi->list, pi->list_len) == 0,
               "a list of plain blocks differs from tpx_xfer_prepare()'s");
        EXPECT_EQ(tpx__list_version(ps->list, ps->list_len), 2u);
    }
    tpx_prep_release(ps);
    tpx_prep_release(pi);
    /* A strided entry: version 3, one entry for 4 x 8 elements */
    tpx_strided_t st3 = {.local = a.s.r, .local_offset = 0, .remote = &b.s.d,
                         .remote_offset = 0, .elem_len = 32, .ndims = 2,
                         .dim = {{4, 1024, 4096}, {8, 32, 64}}};
    EXPECT(tpx_xfer_prepare_strided(ab, TPX_OP_READ, &st3, 1, &ps) == TPX_OK);
    if (ps != NULL) {
        EXPECT(ps->strided && ps->nent == 1 && ps->nsegs == 32);
        EXPECT_EQ(tpx__list_version(ps->list, ps->list_len), 3u);
        EXPECT_EQ(ps->list_len, (size_t)(TPX_LIST_HDR + 8 + TPX_LIST3_ENTRY(2)));
        tpx_list_hdr_t h;
        uint32_t nchunks = 0;
        EXPECT(tpx__list_check(ps->list, ps->list_len, 1u << 20, &h, &nchunks) == TPX_OK);
        EXPECT(h.nent == 1 && h.nblocks == 32 && h.total == 32 * 32 && h.version == 3);
    }
    tpx_prep_release(ps);
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);

    /* The owner's checks of version 3's entries, on lists built here. */
    struct {
        const char *what;
        tpx_sdesc_t d;
        int shape_ok, disjoint_ok;
    } cases[] = {
        {"plain", {.off = 5, .elem = 7}, 1, 1},
        {"rows", {.off = 0, .elem = 8, .ndims = 2, .count = {3, 4}, .stride = {64, 8}}, 1, 1},
        {"columns first", {.elem = 8, .ndims = 2, .count = {4, 3}, .stride = {8, 64}}, 1, 1},
        {"overlap", {.elem = 8, .ndims = 1, .count = {2}, .stride = {7}}, 1, 0},
        {"stride 0", {.elem = 8, .ndims = 1, .count = {2}, .stride = {0}}, 1, 0},
        {"interleaved", {.elem = 8, .ndims = 2, .count = {4, 4}, .stride = {16, 8}}, 1, 0},
        {"count 0", {.elem = 8, .ndims = 1, .count = {0}, .stride = {8}}, 0, 1},
        {"element 0", {.elem = 0, .ndims = 1, .count = {2}, .stride = {8}}, 0, 1},
        {"4 dimensions", {.elem = 1, .ndims = 4}, 0, 1},
        {"wraps", {.elem = 8, .ndims = 1, .count = {3}, .stride = {UINT64_MAX / 2}}, 0, 1},
        {"offset wraps", {.off = UINT64_MAX - 8, .elem = 8, .ndims = 1, .count = {2},
                          .stride = {8}}, 0, 1},
        {"2^20 + 1 elements", {.elem = 1, .ndims = 2, .count = {1025, 1024},
                               .stride = {2048, 2}}, 0, 1},
    };
    for (size_t c = 0; c < TPX_ARRAY_SIZE(cases); c++) {
        uint64_t n = 0, sp = 0;
        const char *why = tpx__sdesc_shape(&cases[c].d, TPX_LIST_MAX_ENTRIES, &n, &sp);
        EXPECT((why == NULL) == cases[c].shape_ok, "%s: shape %s", cases[c].what,
               why ? why : "accepted");
        if (why == NULL)
            EXPECT((tpx__sdesc_disjoint(&cases[c].d) == NULL) == cases[c].disjoint_ok,
                   "%s: overlap", cases[c].what);
        /* as a one-entry list: accepted exactly when the shape is */
        unsigned char buf[256];
        memset(buf, 0, sizeof(buf));
        tpx_list_hdr_t h = {.op = TPX_WIRE_OP_WRITE, .nkeys = 1, .nent = 1,
                            .total = why == NULL ? n * cases[c].d.elem : 8,
                            .version = TPX_LIST_VERSION_STRIDED};
        tpx__list_put_hdr(buf, &h);
        tpx__list_put_key(buf, 0, 42);
        tpx_sdesc_t d = cases[c].d;
        if (d.ndims > TPX_LIST_MAX_DIMS)
            d.ndims = TPX_LIST_MAX_DIMS; /* written with 3, then the byte set to 4 */
        size_t len = TPX_LIST_SIZE(1, 0) + tpx__list_put_entry3(buf, TPX_LIST_SIZE(1, 0), 0, &d);
        if (cases[c].d.ndims > TPX_LIST_MAX_DIMS)
            buf[TPX_LIST_SIZE(1, 0) + 4] = (unsigned char)cases[c].d.ndims;
        tpx_list_hdr_t back;
        uint32_t nchunks;
        tpx_status_t st = tpx__list_check(buf, len, 1u << 20, &back, &nchunks);
        EXPECT((st == TPX_OK) == cases[c].shape_ok, "%s: list %s", cases[c].what,
               tpx_status_string(st));
        if (st == TPX_OK) {
            EXPECT_EQ(back.nblocks, (uint32_t)n);
            /* the cursor gives the entry back */
            tpx_list_cursor_t cur;
            uint32_t k;
            tpx_sdesc_t out;
            tpx__list_cursor_init(&cur, buf, &back);
            tpx__list_cursor_next(&cur, &k, &out);
            EXPECT(k == 0 && memcmp(&out, &cases[c].d, sizeof(out)) == 0, "%s: cursor",
                   cases[c].what);
        }
        /* a byte short, a byte more, a nonzero pad byte: refused */
        EXPECT(tpx__list_check(buf, len - 1, 1u << 20, &back, &nchunks) != TPX_OK);
        EXPECT(tpx__list_check(buf, len + 1, 1u << 20, &back, &nchunks) != TPX_OK);
        buf[TPX_LIST_SIZE(1, 0) + 6] = 1;
        EXPECT(tpx__list_check(buf, len, 1u << 20, &back, &nchunks) != TPX_OK);
        /* a version this engine does not read: refused, and named */
        buf[TPX_LIST_SIZE(1, 0) + 6] = 0;
        buf[5] = 4;
        EXPECT(tpx__list_check(buf, len, 1u << 20, &back, &nchunks) != TPX_OK);
        EXPECT_EQ(tpx__list_version(buf, len), 4u);
    }
    TEST_DONE();
}

/* ---- a peer that does not read the list's version ------------------------------------- */

static atomic_int saw_owner, saw_requester;

static void version_log(void *arg, tpx_log_level_t level, const char *line)
{
    (void)arg;
    (void)level;
    if (strstr(line, "request list of version 4") != NULL)
        atomic_store(&saw_owner, 1);
    if (strstr(line, "with strided entries (request list version 3) was unanswered") != NULL)
        atomic_store(&saw_requester, 1);
    fprintf(stderr, "%s\n", line);
}

/* A request list of a version the owner does not read (4 here, as version
 * 3 is to an engine of an older tpx): the owner names the version and drops
 * the connection, the requester's transfer ends with an error (no hang),
 * the requester says its strided request went unanswered, nothing moved,
 * and the next transfer connects again. */
static int t_version(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 1u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 1u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL && tpx_remote_connect(ab, 10000) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_log_set_callback(version_log, NULL);
    unsigned char *snap_a = malloc(a.s.size), *snap_b = malloc(b.s.size);
    for (int op = TPX_OP_READ; op <= TPX_OP_WRITE && !test_failed(); op++) {
        atomic_store(&saw_owner, 0);
        atomic_store(&saw_requester, 0);
        memcpy(snap_a, a.s.mem, a.s.size);
        memcpy(snap_b, b.s.mem, b.s.size);
        tpx_strided_t v = {.local = a.s.r, .remote = &b.s.d, .elem_len = 100, .ndims = 1,
                           .dim = {{8, 100, 300}}};
        tpx_prep_t *pp = NULL;
        tpx_xfer_t *x = NULL;
        EXPECT(tpx_xfer_prepare_strided(ab, (tpx_op_t)op, &v, 1, &pp) == TPX_OK);
        if (pp == NULL)
            break;
        EXPECT_EQ(tpx__list_version(pp->list, pp->list_len), 3u);
        pp->list[5] = 4; /* version, big-endian u16 at byte 4 */
        tpx_status_t st = tpx_xfer_post(pp, "n", 1, 20000, &x);
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, 20000, NULL);
        tpx_xfer_release(x);
        tpx_prep_release(pp);
        EXPECT(st != TPX_OK && st != TPX_INPROGRESS && st != TPX_ERR_TIMED_OUT,
               "%s of version 4: %s", op == TPX_OP_READ ? "READ" : "WRITE",
               tpx_status_string(st));
        EXPECT(atomic_load(&saw_owner), "the owner did not name the version");
        EXPECT(atomic_load(&saw_requester), "the requester did not log the unanswered request");
        EXPECT(memcmp(snap_a, a.s.mem, a.s.size) == 0 && memcmp(snap_b, b.s.mem, b.s.size) == 0,
               "bytes moved");
        /* connected again: the same entry as version 3 moves */
        run_checked(&a, &b, ab, (tpx_op_t)op, &v, 1, 1, "after the refused version");
    }
    tpx_log_set_callback(NULL, NULL);
    free(snap_a);
    free(snap_b);
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* ---- the owner's list quota ------------------------------------------------------------- */

/* READs, then WRITEs, of one entry of 2^20 one-byte elements (a list of
 * 88 bytes), eight at once: each costs the owner 2^20 blocks while it is served, which the
 * peer's quota (TPX_RMA_PEER_LIST_BYTES, set small by ctest) bounds; those
 * over it end with TPX_ERR_NO_RESOURCE, the others move their bytes. */
static int t_quota(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 4u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 4u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL && tpx_remote_connect(ab, 10000) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_strided_t v = {.local = a.s.r, .local_offset = 1, .remote = &b.s.d, .remote_offset = 0,
                       .elem_len = 1, .ndims = 2, .dim = {{1024, 2048, 2048}, {1024, 2, 2}}};
    tpx_prep_t *pp = NULL;
    EXPECT(tpx_xfer_prepare_strided(ab, TPX_OP_READ, &v, 1, &pp) == TPX_OK);
    if (test_failed())
        return 1;
    EXPECT(pp->list_len < 128 && pp->nsegs == 1u << 20);
    unsigned char *want = malloc(a.s.size);
    memcpy(want, a.s.mem, a.s.size);
    ref_apply(&v, TPX_OP_READ, want, b.s.mem);
    enum { NPOST = 8 };
    tpx_xfer_t *x[NPOST] = {0};
    for (int i = 0; i < NPOST; i++)
        EXPECT(tpx_xfer_post(pp, NULL, 0, 60000, &x[i]) == TPX_OK);
    int ok = 0, busy = 0, other = 0;
    for (int i = 0; i < NPOST; i++) {
        tpx_status_t st = x[i] ? tpx_xfer_wait(x[i], 60000, NULL) : TPX_ERR_INTERNAL;
        ok += st == TPX_OK;
        busy += st == TPX_ERR_NO_RESOURCE;
        other += st != TPX_OK && st != TPX_ERR_NO_RESOURCE;
        tpx_xfer_release(x[i]);
    }
    tpx_engine_counters_t c = {.size = sizeof(c)};
    EXPECT(tpx_engine_counters(b.s.e, &c) == TPX_OK);
    printf("quota: %d READs of 2^20 elements: %d served, %d over the quota\n", NPOST, ok, busy);
    EXPECT_EQ(other, 0);
    EXPECT(ok > 0 && busy > 0);
    EXPECT_EQ(c.rma_refused, (uint64_t)busy);
    EXPECT(memcmp(a.s.mem, want, a.s.size) == 0, "the served READs' bytes");
    tpx_prep_release(pp);
    /* WRITEs the same way: those over the quota are drained unwritten */
    int refused0 = busy;
    pp = NULL;
    EXPECT(tpx_xfer_prepare_strided(ab, TPX_OP_WRITE, &v, 1, &pp) == TPX_OK);
    if (test_failed())
        return 1;
    unsigned char *want_b = malloc(b.s.size);
    memcpy(want_b, b.s.mem, b.s.size);
    ref_apply(&v, TPX_OP_WRITE, a.s.mem, want_b);
    for (int i = 0; i < NPOST; i++)
        EXPECT(tpx_xfer_post(pp, NULL, 0, 60000, &x[i]) == TPX_OK);
    ok = busy = other = 0;
    for (int i = 0; i < NPOST; i++) {
        tpx_status_t st = x[i] ? tpx_xfer_wait(x[i], 60000, NULL) : TPX_ERR_INTERNAL;
        ok += st == TPX_OK;
        busy += st == TPX_ERR_NO_RESOURCE;
        other += st != TPX_OK && st != TPX_ERR_NO_RESOURCE;
        tpx_xfer_release(x[i]);
    }
    EXPECT(tpx_engine_counters(b.s.e, &c) == TPX_OK);
    printf("quota: %d WRITEs of 2^20 elements: %d served, %d over the quota\n", NPOST, ok, busy);
    EXPECT_EQ(other, 0);
    EXPECT(ok > 0 && busy > 0);
    EXPECT_EQ(c.rma_refused, (uint64_t)(refused0 + busy));
    EXPECT(memcmp(b.s.mem, want_b, b.s.size) == 0, "the served WRITEs' bytes");
    tpx_prep_release(pp);
    free(want_b);
    free(want);
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

/* Lists long enough that the owner expands them a step per pass while the
 * first chunks move behind the stream's gate (rma.c, EXPAND_STEP): 362,145
 * elements of 4 and 24 bytes around a 1 MiB block, READ and WRITE, each
 * posted twice and both of them in flight at once; every byte checked. */
static int t_long(void)
{
    mside_t a, b;
    EXPECT(mside_open(&a, "A", 8u << 20, 0) == 0);
    EXPECT(mside_open(&b, "B", 8u << 20, 0) == 0);
    tpx_remote_t *ab = load(&a.s, &b.s);
    EXPECT(ab != NULL && tpx_remote_connect(ab, 10000) == TPX_OK);
    if (test_failed())
        return 1;
    tpx_strided_t v[3] = {
        {.local = a.s.r, .local_offset = 0, .remote = &b.s.d, .remote_offset = 0,
         .elem_len = 4, .ndims = 1, .dim = {{262144, 4, 12}}},
        {.local = a.s.r, .local_offset = (1u << 20) + 64, .remote = &b.s.d,
         .remote_offset = (3u << 20) + 64, .elem_len = (1u << 20) + 3},
        {.local = a.s.r, .local_offset = 3u << 20, .remote = &b.s.d,
         .remote_offset = 4200000, .elem_len = 24, .ndims = 2,
         .dim = {{1000, 2400, 3600}, {100, 24, 36}}}};
    for (int w = 0; w < 2 && !test_failed(); w++) {
        tpx_op_t op = w ? TPX_OP_WRITE : TPX_OP_READ;
        run_checked(&a, &b, ab, op, v, 3, 2, w ? "long WRITE" : "long READ");
        /* two at once: both lists expanding together on the owner */
        unsigned char *wa = malloc(a.s.size), *wb = malloc(b.s.size);
        memcpy(wa, a.s.mem, a.s.size);
        memcpy(wb, b.s.mem, b.s.size);
        for (int i = 0; i < 3; i++)
            ref_apply(&v[i], op, wa, wb);
        tpx_prep_t *pp = NULL;
        EXPECT(tpx_xfer_prepare_strided(ab, op, v, 3, &pp) == TPX_OK);
        tpx_xfer_t *x[2] = {0};
        for (int i = 0; i < 2 && pp != NULL; i++)
            EXPECT(tpx_xfer_post(pp, NULL, 0, 30000, &x[i]) == TPX_OK);
        for (int i = 0; i < 2; i++) {
            tpx_status_t st = x[i] ? tpx_xfer_wait(x[i], 30000, NULL) : TPX_ERR_INTERNAL;
            EXPECT(st == TPX_OK, "long, two at once: %s", tpx_status_string(st));
            tpx_xfer_release(x[i]);
        }
        tpx_prep_release(pp);
        EXPECT(memcmp(a.s.mem, wa, a.s.size) == 0 && memcmp(b.s.mem, wb, b.s.size) == 0,
               "long, two at once: the bytes");
        free(wa);
        free(wb);
    }
    tpx_remote_release(ab);
    mside_close(&a);
    mside_close(&b);
    TEST_DONE();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"prop", t_prop}, {"kv", t_kv},       {"bad", t_bad},
                 {"wire", t_wire}, {"quota", t_quota}, {"gpu", t_gpu},
                 {"version", t_version}, {"kvhelper", t_kvhelper}, {"long", t_long}};
    if (argc == 2)
        for (size_t i = 0; i < TPX_ARRAY_SIZE(tests); i++)
            if (strcmp(argv[1], tests[i].name) == 0)
                return tests[i].fn();
    fprintf(stderr, "usage: test_strided prop|kv|bad|wire|quota|gpu|version|kvhelper|long\n");
    return 2;
}
