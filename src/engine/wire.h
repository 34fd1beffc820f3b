/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the engine's wire formats, as pure functions (no engine state,
 * no allocation, no logging): control messages, request lists, region
 * descriptors, metadata blobs, identity proofs and the set-up's READY.
 * Every byte from the network goes through one of the decoders here first;
 * each checks magic, version, lengths and ranges, and writes its output
 * only on success. They are fuzzed
 * (tests/fuzz) and must never crash on any input.
 *
 * All integers are big-endian.
 */
#ifndef TPX_ENGINE_WIRE_H
#define TPX_ENGINE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "tpx/status.h"

/* ---- control messages: exactly 64 bytes each ---------------------------------------
 *
 *   0 u32 magic "TPXC"   4 u16 version   6 u16 type   8 u64 seq
 *   16.. per type (unused bytes must be zero):
 *   SEND_HDR  16 u64 len                                  (two-sided data follows)
 *   RMA_REQ   16 u64 rid  24 u8 op  25 u8 flags  26..28 0  28 u32 nent
 *             32 u64 total  40 u64 list_len  48 u32 nchunks  52 u32 body_len
 *             56 u16 notif_len
 *             (the list, then for WRITE the data, follow on the data channels
 *             -- or, flag INLINE, in the body: the list, a WRITE's data after it,
 *             then, flag NOTIF_INLINE, its notification of notif_len bytes --
 *             or, flag LIST (WRITE), the list and, flag NOTIF_INLINE, the
 *             notification in the body and the data on the data channels)
 *   RMA_RESP  16 u64 rid  24 i32 status  28 u32 nchunks  32 u64 total  40 u8 flags
 *             41..44 0  44 u32 body_len
 *             (READ, status 0: data follows on the data channels -- or, flag
 *             INLINE, nchunks 0, in the body)
 *   RMA_CANCEL 16 u64 rid   (the requester canceled that WRITE: drop its notification)
 *   NOTIF     16 u16 total  18 u16 off  20 u8 part_len  21 u8 flags  22..24 0
 *             24 part[40]
 *   BYE       nothing
 *   REPAIR    16 u64 cut_seq  24 u32 cut_chunk  28 u8 chan  29 u8 cut_lane  30..32 0
 *             32 u64 cut_at
 *             (from the receiver of a direction: its data channel `chan` is lost.
 *             The channel carried lanes (a stream's chunks dealt to one channel,
 *             lane cut_lane of the stream announced by message cut_seq), each
 *             queued on it at a point of the control order (at: its stream's
 *             message, or the REPAIR_ACK that moved it there); it carried them in
 *             the order of (at, stream, lane). Of the lane (cut_at, cut_seq,
 *             cut_lane) the chunks it carries there from cut_chunk on are missing,
 *             of every lane after it all it carries there; the earlier ones
 *             arrived. cut_seq = cut_lane = cut_chunk = 0: every lane queued from
 *             point cut_at on is missing)
 *   REJOIN    16 u8 chan  17..24 0
 *             (from the sender of a direction: its data channel `chan`, lost and
 *             repaired, is connected again; the streams announced after it are dealt
 *             to it again. It takes its turn among the messages with data, as
 *             REPAIR_ACK. Sent only to a peer that asked for it (bootstrap frame
 *             TPX_MSG_REJOIN): an older peer never sees it)
 *   REPAIR_ACK 16 u8 chan  17..24 0
 *             (the sender's answer: the missing chunks are dealt again over the
 *             live channels from here, in stream order; the streams announced
 *             after it skip `chan`. It takes its turn among the messages with
 *             data, so that both sides queue the chunks dealt again at the same
 *             place: peer_repair.c)
 *   RECV_DONE 16 u8 n (1..5)  17..24 0  24 u64 seq[n]  (the streams of two-sided
 *             messages, or of READs' data on the data channels, announced by messages
 *             seq[], arrived whole: their sender, which may have to deal them again
 *             until then, may end them)
 *
 * seq counts every control message of one direction (BYE included); the
 * receiver checks it, so a lost or reordered message is a protocol error.
 *
 * A message is the 64-byte header followed by body_len bytes of body (at
 * most TPX_CTRL_BODY_MAX; only RMA_REQ with flag INLINE or LIST and RMA_RESP
 * with flag INLINE have one): every control receive is posted at
 * TPX_CTRL_SLOT bytes, and the plugin's received size must be exactly
 * 64 + body_len. A small one-sided
 * transfer is thus one message each way, like a raw TCP request/response:
 * the requester's RMA_REQ carries its list (and a WRITE's data), and asks
 * (flag ANSWER_INLINE) for a READ's data in the RMA_RESP; the owner answers
 * inline when its blocks are host memory, else on the data channels.
 *
 * A WRITE's notification travels with it: its NOTIF parts carry flag HELD
 * and come just before the RMA_REQ (flag NOTIF, op WRITE) they belong to,
 * with nothing in between; the owner keeps it and delivers it once that
 * WRITE's data is in its memory, never if the WRITE fails or is refused.
 * A NOTIF without HELD is delivered when it arrives. The owner's RMA_RESP
 * says (flag NOTIFIED) whether it delivered the notification; a requester
 * that cancels such a WRITE sends RMA_CANCEL, and the owner drops the
 * notification if it has not delivered it yet.
 */
#define TPX_CTRL_SIZE 64
#define TPX_CTRL_BODY_MAX (4096 + 1024) /* an inline list of ~48 entries + 4 KiB of data */
#define TPX_CTRL_SLOT (TPX_CTRL_SIZE + TPX_CTRL_BODY_MAX) /* a control receive's size */
#define TPX_CTRL_NOTIF_PART 40
#define TPX_CTRL_DONE_MAX 5 /* streams one RECV_DONE confirms */
#define TPX_WIRE_NOTIF_MAX 1024 /* = TPX_NOTIF_MAX */

enum {
    TPX_CTRL_SEND_HDR = 1,
    TPX_CTRL_BYE = 2,
    TPX_CTRL_RMA_REQ = 3,
    TPX_CTRL_RMA_RESP = 4,
    TPX_CTRL_NOTIF = 5,
    TPX_CTRL_RMA_CANCEL = 6,
    TPX_CTRL_REPAIR = 7,
    TPX_CTRL_REPAIR_ACK = 8,
    TPX_CTRL_RECV_DONE = 9,
    TPX_CTRL_REJOIN = 10,
};
enum { TPX_WIRE_OP_READ = 1, TPX_WIRE_OP_WRITE = 2 };
#define TPX_CTRL_REQ_NOTIF 1u  /* RMA_REQ flags: the HELD notification just before is its */
#define TPX_CTRL_REQ_INLINE 2u /* RMA_REQ: the list (and a WRITE's data) is the body */
#define TPX_CTRL_REQ_ANSWER_INLINE 4u /* RMA_REQ, READ: the data may come in the RMA_RESP */
#define TPX_CTRL_REQ_NOTIF_INLINE 8u /* RMA_REQ, INLINE or LIST WRITE: its notification ends
                                        the body */
#define TPX_CTRL_REQ_LIST 16u /* RMA_REQ, WRITE: the list is the body, the data on the channels */
#define TPX_CTRL_RESP_INLINE 2u /* RMA_RESP, READ, status 0: the data is the body */
#define TPX_CTRL_NOTIF_HELD 1u /* NOTIF flags: part of the next RMA_REQ's notification */
#define TPX_CTRL_RESP_NOTIFIED 1u /* RMA_RESP flags: the WRITE's notification was delivered */

typedef struct {
    uint16_t type;
    uint64_t seq;
    uint64_t len;      /* SEND_HDR */
    uint64_t rid;      /* RMA_REQ, RMA_RESP, RMA_CANCEL: the requester's id of the transfer */
    uint8_t op;        /* RMA_REQ */
    uint8_t flags;     /* RMA_REQ, RMA_RESP, NOTIF: TPX_CTRL_<type>_* */
    uint32_t nent;     /* RMA_REQ: list entries */
    uint64_t total;    /* RMA_REQ, RMA_RESP: payload bytes */
    uint64_t list_len; /* RMA_REQ */
    uint32_t nchunks;  /* RMA_REQ, RMA_RESP: payload chunks */
    uint32_t body_len; /* RMA_REQ, RMA_RESP with flag INLINE: bytes after the header */
    int32_t status;    /* RMA_RESP: tpx_status_t of the owner */
    uint16_t notif_total, notif_off; /* NOTIF; notif_total also RMA_REQ's notif_len */
    uint8_t part_len;
    unsigned char part[TPX_CTRL_NOTIF_PART];
    uint8_t chan;       /* REPAIR, REPAIR_ACK: the data channel lost; REJOIN: back */
    uint64_t cut_seq;   /* REPAIR: the stream of the first lane with chunks missing */
    uint32_t cut_chunk; /* REPAIR: ... its first chunk missing */
    uint8_t cut_lane;   /* REPAIR: ... of that stream's lane (the channel it was dealt to) */
    uint64_t cut_at;    /* REPAIR: ... queued on `chan` at this point of the control order */
    uint8_t ndone;      /* RECV_DONE: the streams received whole: how many, */
    uint64_t done[TPX_CTRL_DONE_MAX]; /* ... and their announcing messages */
} tpx_ctrl_t;

void tpx__ctrl_encode(const tpx_ctrl_t *m, unsigned char out[TPX_CTRL_SIZE]);
/* TPX_ERR_PROTOCOL unless magic, version and type are known, unused bytes
 * are zero and the fields are in range (op known, status <= 0, a NOTIF part
 * inside its total <= TPX_WIRE_NOTIF_MAX, flags known, REQ_NOTIF only on a
 * WRITE, RESP_NOTIFIED only with status 0, a body only with flag INLINE, of
 * at most TPX_CTRL_BODY_MAX bytes: a REQ's list_len (+ total for a WRITE),
 * a RESP's total, nchunks 0; ANSWER_INLINE only on a READ). */
tpx_status_t tpx__ctrl_decode(const unsigned char in[TPX_CTRL_SIZE], tpx_ctrl_t *m);
/* The version a control message says it has, -1 if its magic is not ours
 * (to tell a peer of another protocol version from a damaged message). */
int tpx__ctrl_version(const unsigned char in[TPX_CTRL_SIZE]);
/* The version this engine speaks. */
int tpx__ctrl_version_ours(void);

/* ---- request lists: what an RMA_REQ asks of the owner -----------------------------
 *
 *   0 u32 magic "TPXL"  4 u16 version (2)  6 u8 op  7 u8 flags (0)  8 u32 nkeys
 *   12 u32 nent  16 u64 total  24 u32 pack_max  28 u32 pack_chunk (0: the chunk)
 *   32 keys[nkeys] u64  then entries[nent]: u32 key index, u64 offset (from the
 *   start of the export), u64 len (> 0)
 *
 * pack_max is the requester's packing bound (TPX_RMA_PACK_BYTES, at most the
 * chunk; 0: no packing) and pack_chunk the size of its shared chunks
 * (TPX_RMA_PACK_CHUNK: pack_max..chunk; 0: the chunk): the owner cuts the
 * list exactly as the requester did, whatever its own settings, so engines
 * with different settings talk.
 *
 * Version 3 (only a list with a strided entry is written so; one of plain
 * blocks stays version 2, byte for byte) has the same header and keys, and
 * entries of 24 + 12 x ndims bytes:
 *   u32 key index, u8 ndims (0..3), 3 x u8 0, u64 offset, u64 elem (> 0),
 *   then per dimension, outermost first: u32 count (> 0), u64 stride
 * An entry is the elements at offset + sum(i_d x stride_d), 0 <= i_d <
 * count_d, each of elem bytes, in row-major order (the last dimension
 * fastest): the owner's side of a strided block (tpx_strided_t), which the
 * requester encodes with its dimensions collapsed where both sides are
 * contiguous, so that both sides expand it into the same blocks: one per
 * element, never merged. nent counts entries; the elements of the whole
 * list are at most TPX_LIST_MAX_ENTRIES (the bound on the blocks the owner
 * checks it into).
 */
#define TPX_LIST_HDR 32
#define TPX_LIST_ENTRY 20
#define TPX_LIST_MAX_ENTRIES (1u << 20)
#define TPX_LIST_SIZE(nkeys, nent) \
    ((size_t)TPX_LIST_HDR + 8 * (size_t)(nkeys) + (size_t)TPX_LIST_ENTRY * (size_t)(nent))
#define TPX_LIST_VERSION_STRIDED 3
#define TPX_LIST_MAX_DIMS 3
#define TPX_LIST3_ENTRY(ndims) (24 + 12 * (size_t)(ndims))
/* The largest list of nent entries of either version (RMA_REQ's bound). */
#define TPX_LIST_SIZE_MAX(nent) \
    ((size_t)TPX_LIST_HDR + (8 + TPX_LIST3_ENTRY(TPX_LIST_MAX_DIMS)) * (size_t)(nent))

typedef struct {
    uint8_t op, flags;
    uint32_t nkeys, nent;
    uint64_t total;
    uint32_t pack_max; /* entries of at most this many bytes share chunks; 0: none */
    uint32_t pack_chunk; /* bytes of a shared chunk, pack_max..chunk; 0: the chunk */
    uint16_t version;  /* 0 or 2: plain blocks; 3: strided entries (TPX_LIST_VERSION_STRIDED) */
    uint32_t nblocks;  /* tpx__list_check: the blocks the list expands into (= nent in 2) */
} tpx_list_hdr_t;

/* One side of a strided entry: ndims dimensions (outermost first) of
 * count[d] elements, stride[d] bytes apart, each of elem bytes, from off. */
typedef struct {
    uint64_t off, elem;
    uint32_t ndims;
    uint32_t count[TPX_LIST_MAX_DIMS];
    uint64_t stride[TPX_LIST_MAX_DIMS];
} tpx_sdesc_t;

/* Checks of a strided side (pure; NULL: fine, else what is wrong):
 * tpx__sdesc_shape: ndims <= 3, elem > 0, counts > 0, at most max_elems
 * elements (*nelem), and its last byte does not wrap: *span = the bytes from
 * off to the end of its last element. tpx__sdesc_disjoint: no two elements
 * share a byte, by the dimensions sorted by stride, each stride at least the
 * extent of the ones inside it (a layout that interleaves dimensions is
 * refused although it may be disjoint). */
const char *tpx__sdesc_shape(const tpx_sdesc_t *d, uint64_t max_elems, uint64_t *nelem,
                             uint64_t *span);
const char *tpx__sdesc_disjoint(const tpx_sdesc_t *d);
/* Element i (row-major) of a checked side: its offset. The iteration over
 * all of them is what both sides of a transfer agree on. */
static inline uint64_t tpx__sdesc_elem(const tpx_sdesc_t *d, uint64_t i)
{
    uint64_t off = d->off;
    for (uint32_t k = d->ndims; k-- > 0;) {
        off += (i % d->count[k]) * d->stride[k];
        i /= d->count[k];
    }
    return off;
}

/* The same offsets in the same order, walked: an add per element instead
 * of a division per dimension (a KV slice of 1.3 million 1 KiB elements
 * took 50 ms to number with tpx__sdesc_elem, on both sides of every
 * request). Start with walk_init at element 0; walk_next moves to the
 * next (the last dimension fastest). Offsets wrap as tpx__sdesc_elem's. */
typedef struct {
    uint64_t off;
    uint64_t idx[TPX_LIST_MAX_DIMS];
} tpx_sdesc_walk_t;

static inline void tpx__sdesc_walk_init(const tpx_sdesc_t *d, tpx_sdesc_walk_t *w)
{
    w->off = d->off;
    for (uint32_t k = 0; k < TPX_LIST_MAX_DIMS; k++)
        w->idx[k] = 0;
}

static inline void tpx__sdesc_walk_next(const tpx_sdesc_t *d, tpx_sdesc_walk_t *w)
{
    for (uint32_t k = d->ndims; k-- > 0;) {
        w->off += d->stride[k];
        if (++w->idx[k] < d->count[k])
            return;
        w->off -= d->count[k] * d->stride[k];
        w->idx[k] = 0;
    }
}

/*
 * How a list is cut into chunks, identically on both sides. Each entry, in
 * list order, gets chunks of at most `chunk` bytes of its own -- unless it
 * is small (len <= pack_max): then a run of consecutive small entries is
 * packed back to back into shared chunks of up to `chunk` bytes; an entry
 * that does not fit into the open shared chunk opens the next one (an
 * entry is never split). The sender gathers a shared chunk into a staging
 * buffer, the receiver receives it into one and scatters it: one plugin
 * request for many blocks. Both sides derive the same sizes in the same
 * order from the list alone (FIFO plugins).
 */
typedef struct {
    uint64_t chunk;
    uint64_t pack_max; /* <= share; 0: nothing shares */
    uint64_t share;    /* bytes of a shared chunk (<= chunk); 0: the chunk */
    uint64_t fill;     /* bytes in the open shared chunk; 0: none open */
    uint64_t nchunks;  /* chunks so far */
} tpx_chunker_t;

/* Place one entry of len (> 0) bytes: its first chunk, its offset inside a
 * shared chunk, and whether it shares (*shared: pack it). */
static inline void tpx__chunker_add(tpx_chunker_t *c, uint64_t len, uint64_t *chunk0,
                                    uint32_t *pack_off, int *shared)
{
    uint64_t share = c->share ? c->share : c->chunk;
    if (len <= c->pack_max && c->pack_max <= share && share <= c->chunk) {
        if (c->fill == 0 || c->fill + len > share) {
            c->nchunks++;
            c->fill = 0;
        }
        *chunk0 = c->nchunks - 1;
        *pack_off = (uint32_t)c->fill;
        *shared = 1;
        c->fill += len;
        return;
    }
    c->fill = 0;
    *chunk0 = c->nchunks;
    *pack_off = 0;
    *shared = 0;
    c->nchunks += len / c->chunk + (len % c->chunk != 0);
}

void tpx__list_put_hdr(unsigned char *buf, const tpx_list_hdr_t *h);
void tpx__list_put_key(unsigned char *buf, uint32_t i, uint64_t key);
void tpx__list_put_entry(unsigned char *buf, uint32_t nkeys, uint32_t i, uint32_t key_idx,
                         uint64_t off, uint64_t len);
/* Version 3: write an entry at byte `at` of the list; returns its size. */
size_t tpx__list_put_entry3(unsigned char *buf, size_t at, uint32_t key_idx,
                            const tpx_sdesc_t *d);
/* Check a whole list of `len` bytes: header, exact size, pack_max <= chunk,
 * key indexes in range, no zero length, offsets + lengths that do not wrap, lengths that
 * sum to total; version 3: every entry's shape (tpx__sdesc_shape), at most
 * TPX_LIST_MAX_ENTRIES blocks in all (h->nblocks). Then *nchunks = the
 * chunks it is cut into (tpx_chunker_t, over the blocks). */
tpx_status_t tpx__list_check(const unsigned char *buf, size_t len, uint32_t chunk,
                             tpx_list_hdr_t *h, uint32_t *nchunks);
/* The version a list says it has (0: not a list), and the highest this
 * engine reads: to name a mismatch. */
unsigned tpx__list_version(const unsigned char *buf, size_t len);
unsigned tpx__list_version_mine(void);
/* Accessors, valid after tpx__list_check() accepted the list. */
uint64_t tpx__list_key(const unsigned char *buf, uint32_t i);
void tpx__list_entry(const unsigned char *buf, uint32_t nkeys, uint32_t i, uint32_t *key_idx,
                     uint64_t *off, uint64_t *len);

/* The entries of a checked list of either version one after the other,
 * each as a strided side (a version-2 entry: ndims 0, elem = its length). */
typedef struct {
    const unsigned char *buf;
    size_t at;         /* the next entry's byte offset */
    uint32_t nkeys, next;
    uint16_t version;
} tpx_list_cursor_t;
void tpx__list_cursor_init(tpx_list_cursor_t *c, const unsigned char *buf,
                           const tpx_list_hdr_t *h);
/* The next entry (the caller counts them: h->nent). */
void tpx__list_cursor_next(tpx_list_cursor_t *c, uint32_t *key_idx, tpx_sdesc_t *d);

/* ---- region descriptors (tpx_rdesc_t) ------------------------------------------------
 *
 *   0 u32 magic "TPXD"  4 u8 version  5 u8 mem type  6 u16 0  8 u64 engine id
 *   16 u64 key  24 u64 address  32 u64 len  40 i32 gpu  44 u32 fnv1a(0..44)
 */
#define TPX_WIRE_RDESC_SIZE 48

typedef struct {
    uint8_t mem_type;
    uint64_t engine_id, key, addr, len;
    int32_t gpu;
} tpx_rdesc_fields_t;

void tpx__rdesc_encode(const tpx_rdesc_fields_t *d, unsigned char out[TPX_WIRE_RDESC_SIZE]);
tpx_status_t tpx__rdesc_decode(const unsigned char in[TPX_WIRE_RDESC_SIZE], tpx_rdesc_fields_t *d);

/* ---- metadata blobs --------------------------------------------------------------
 *
 *   0 u32 magic "TPXM"  4 u16 version (2)  6 u16 0  8 u32 total length  12 u32 fnv1a of
 *   the blob with this field zero  16 u64 engine id  24 i32 gpu  28 u32 chunk
 *   32 u16 channels  34 u16 port  36 u8 nnics  37 u8 naddrs  38 u16 flags (bit 0: key)
 *   40 strings, each u8 length + bytes (no NUL): name, plugin, then per NIC its
 *   name + u32 speed (Mb/s), then the addresses (numeric host strings), then with
 *   flag bit 0 the engine's Ed25519 public key (32 bytes; ident.h)
 */
#define TPX_MD_KEY 32
#define TPX_MD_MAX 2048
#define TPX_MD_MAX_NICS 8
#define TPX_MD_MAX_ADDRS 16
#define TPX_MD_STR 64

typedef struct {
    uint64_t engine_id;
    int32_t gpu;
    uint32_t chunk;
    uint16_t channels, port;
    char name[TPX_MD_STR], plugin[TPX_MD_STR];
    uint8_t nnics, naddrs;
    char nic[TPX_MD_MAX_NICS][TPX_MD_STR];
    uint32_t nic_speed[TPX_MD_MAX_NICS];
    char addr[TPX_MD_MAX_ADDRS][TPX_MD_STR];
    uint8_t has_key;
    unsigned char key[TPX_MD_KEY]; /* public key: the engine id must be derived from it */
} tpx_md_t;

/* TPX_ERR_INVALID_ARG if a string is >= 64 bytes, a count is too large or
 * cap is too small (*len is then the size needed). */
tpx_status_t tpx__md_encode(const tpx_md_t *md, unsigned char *buf, size_t cap, size_t *len);
/* TPX_ERR_PROTOCOL unless magic, version, length, checksum, counts and
 * every string check out (non-empty name, port > 0, chunk in 4 KiB..4 MiB,
 * strings printable). */
tpx_status_t tpx__md_decode(const unsigned char *buf, size_t len, tpx_md_t *md);
/* The version a metadata blob says it has (0: not a tpx metadata blob), and
 * the one this library writes and reads: to name the mismatch in errors. */
unsigned tpx__md_version(const void *blob, size_t len);
unsigned tpx__md_version_mine(void);

/* ---- READY: the last frame of a peer's set-up, on its bootstrap connection (peer.c) ----
 *
 *   0 u32 flags   (4 bytes)
 *
 * flags: bit 0 CTRL_BS  the sender's control messages go over the bootstrap connection
 *                       from READY on (TPX_CTRL_BOOTSTRAP=1), never over its control
 *                       send comm; a stream there never moves back (peer_ctrl.c)
 * An engine of control protocol 11 that predates the field sends READY empty (it reads
 * only the frame's type, so a 4-byte READY reaches it unharmed): no flags, and it may
 * send its control messages over the bootstrap connection all the same, unannounced.
 * Bits this engine does not know are kept and not used: a capability only its sender
 * has changes nothing here.
 */
#define TPX_READY_WIRE_SIZE 4
#define TPX_READY_CTRL_BS 1u

typedef struct {
    int known;      /* the frame carried the flags (0: an engine that predates them) */
    uint32_t flags; /* TPX_READY_*, as sent (0 when not known) */
} tpx_ready_t;

void tpx__ready_encode(uint32_t flags, unsigned char out[TPX_READY_WIRE_SIZE]);
/* TPX_ERR_PROTOCOL unless len is 0 (an older engine) or TPX_READY_WIRE_SIZE. */
tpx_status_t tpx__ready_decode(const unsigned char *in, size_t len, tpx_ready_t *m);

/* ---- IDENT: an engine's proof of identity on a bootstrap connection (ident.h) --------
 *
 *   0 u32 magic "TPXI"  4 u16 version (2)  6 u16 flags  8 pk[32]  40 sig[64]
 *   104 ticket_id[16]  120 proof[32]  152 offer_id[16]  168 offer[32]
 *
 * flags: bit 0 KEY    pk and sig are set (the sender's key and its signature)
 *        bit 1 TICKET ticket_id is set: the client holds a ticket of the server's
 *                     instance and asks it to prove it is that instance
 *        bit 2 PROOF  proof is set: the server's answer to the client's ticket
 *        bit 3 OFFER  offer_id and offer are set: a ticket of the server's instance
 *                     for the client (wrapped with the token, ident.h)
 * The bytes of a field whose flag is clear are zero. Version 1 (104 bytes:
 * the key alone) is refused with a message that names both versions.
 */
#define TPX_IDENT_WIRE_SIZE 200
#define TPX_IDENT_VERSION 2
#define TPX_IDENT_TICKET_ID 16
#define TPX_IDENT_TICKET 32

enum {
    TPX_IDENT_F_KEY = 1u,
    TPX_IDENT_F_TICKET = 2u,
    TPX_IDENT_F_PROOF = 4u,
    TPX_IDENT_F_OFFER = 8u,
};

typedef struct {
    unsigned flags; /* TPX_IDENT_F_*: which fields below are set */
    unsigned char pk[32];
    unsigned char sig[64];
    unsigned char ticket_id[TPX_IDENT_TICKET_ID];
    unsigned char proof[TPX_IDENT_TICKET];
    unsigned char offer_id[TPX_IDENT_TICKET_ID];
    unsigned char offer[TPX_IDENT_TICKET];
} tpx_ident_msg_t;

void tpx__ident_encode(const tpx_ident_msg_t *m, unsigned char out[TPX_IDENT_WIRE_SIZE]);
/* TPX_ERR_PROTOCOL unless len, magic, version, flags and the zero bytes of
 * unset fields check out. */
tpx_status_t tpx__ident_decode(const unsigned char *in, size_t len, tpx_ident_msg_t *m);
/* The version an IDENT says it has, -1 if it is too short or its magic is
 * not ours (to tell a peer of another version from a damaged message). */
int tpx__ident_version(const unsigned char *in, size_t len);

#endif
