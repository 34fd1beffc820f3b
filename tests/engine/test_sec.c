/*
 * test_sec.c - hostile peers (issue 12): engines of one process on
 * loopback, an attacker written against the engine's internals or the
 * bootstrap wire directly. Each scenario failed before its fix.
 *
 *   test_sec impostor   an engine that claims the owner's id (and name)
 *                       and connects to the victim first gets no byte of a
 *                       WRITE and gives none to a READ; notifications it
 *                       sends never read as the owner's
 *
 * Run with TPX_IDENTITY=dial too (ctest does): the rules hold without keys.
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../unit/check.h"
#include "engine/engine.h"
#include "tpx/tpx.h"

typedef struct {
    tpx_engine_t *e;
    unsigned char *mem;
    size_t size;
    tpx_region_t *r;
    tpx_rdesc_t d;
} side_t;

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        p[i] = (unsigned char)s;
    }
}

static int side_open(side_t *s, const char *name, size_t size)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = TPX_PORT_EPHEMERAL;
    p.name = name;
    memset(s, 0, sizeof(*s));
    if (tpx_engine_create(&p, &s->e) != TPX_OK)
        return -1;
    s->size = size;
    s->mem = aligned_alloc(4096, size);
    if (s->mem == NULL)
        return -1;
    fill(s->mem, size, (uint64_t)name[0]);
    if (tpx_mem_register(s->e, s->mem, size, TPX_MEM_HOST, &s->r) != TPX_OK ||
        tpx_region_export(s->r, 0, 0, &s->d) != TPX_OK)
        return -1;
    return 0;
}

static void side_close(side_t *s)
{
    tpx_engine_destroy(s->e);
    free(s->mem);
}

static tpx_remote_t *load(side_t *from, side_t *to)
{
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    tpx_remote_t *rm = NULL;
    if (tpx_engine_get_metadata(to->e, blob, &len) != TPX_OK ||
        tpx_remote_load(from->e, blob, len, &rm) != TPX_OK)
        return NULL;
    return rm;
}

static int dial_mode(void)
{
    const char *m = getenv("TPX_IDENTITY");
    return m != NULL && strcmp(m, "dial") == 0;
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* One notification on s within ms, or -1. */
static int notif_wait(side_t *s, tpx_notif_t *out, int ms)
{
    uint64_t until = now_ms() + (uint64_t)ms;
    while (now_ms() < until) {
        size_t n = 0;
        if (tpx_engine_get_notifs(s->e, out, 1, &n) != TPX_OK)
            return -1;
        if (n == 1)
            return 0;
        usleep(1000);
    }
    return -1;
}

static uint64_t requests_seen(side_t *s)
{
    tpx_engine_counters_t c;
    if (tpx_engine_counters(s->e, &c) != TPX_OK)
        return ~0ull;
    return c.rma_served + c.rma_rejected;
}

/* ---- impostor ------------------------------------------------------------------------------ */

/* mode 0: M claims O's id and name and offers no key; 1: M claims O's id
 * but signs with its own key; 2: M is itself (its own key) but named "O". */
static int impostor_round(int mode)
{
    side_t v, o, m;
    CHECK(side_open(&v, "V", 1u << 20) == 0);
    CHECK(side_open(&o, "O", 1u << 20) == 0);
    CHECK(side_open(&m, mode == 2 ? "O" : "M", 1u << 20) == 0);
    if (check_failures)
        return 1;
    if (mode < 2)
        m.e->id = o.e->id; /* public: in O's metadata and in every rdesc of O */
    if (mode == 0)
        m.e->ident_keys = 0;
    snprintf(m.e->name, sizeof(m.e->name), "O");
    /* M reaches V first: V holds an inbound connection that claims to be O. */
    tpx_peer_t *pm = NULL;
    tpx_status_t st = tpx_peer_connect(m.e, "127.0.0.1", tpx_engine_port(v.e), 5000, &pm);
    printf("mode %d: the attacker's connection to the victim: %s\n", mode, tpx_status_string(st));
    tpx_remote_t *ro = load(&v, &o);
    CHECK(ro != NULL);
    if (check_failures)
        return 1;
    /* WRITE: V's secret must land in O's memory, never in M. */
    memset(v.mem, 0x5e, 4096);
    tpx_iov_t w = {.local = v.r, .local_offset = 0, .remote = &o.d, .remote_offset = 8192,
                   .len = 4096};
    tpx_xfer_t *x = NULL;
    st = tpx_rma(ro, TPX_OP_WRITE, &w, 1, NULL, 0, &x);
    if (st == TPX_OK)
        st = tpx_xfer_wait(x, 10000, NULL);
    tpx_xfer_release(x);
    printf("mode %d: WRITE: %s\n", mode, tpx_status_string(st));
    CHECK(st == TPX_OK);
    CHECK(memcmp(o.mem + 8192, v.mem, 4096) == 0);
    /* READ: V must get O's bytes, never M's. */
    fill(o.mem + 65536, 4096, 99);
    tpx_iov_t r = {.local = v.r, .local_offset = 16384, .remote = &o.d, .remote_offset = 65536,
                   .len = 4096};
    x = NULL;
    st = tpx_rma(ro, TPX_OP_READ, &r, 1, NULL, 0, &x);
    if (st == TPX_OK)
        st = tpx_xfer_wait(x, 10000, NULL);
    tpx_xfer_release(x);
    printf("mode %d: READ: %s\n", mode, tpx_status_string(st));
    CHECK(st == TPX_OK);
    CHECK(memcmp(v.mem + 16384, o.mem + 65536, 4096) == 0);
    /* the owner counts a request when its side ends, maybe just after ours */
    for (uint64_t until = now_ms() + 5000; requests_seen(&o) < 2 && now_ms() < until;)
        usleep(1000);
    CHECK_EQ(requests_seen(&o), 2);
    CHECK_EQ(requests_seen(&m), 0);
    /* Notifications: M's never reads as O's; O's does (with keys). */
    tpx_remote_t *mv = load(&m, &v);
    CHECK(mv != NULL);
    if (mv != NULL && tpx_notif_send(mv, "from-M", 6) == TPX_OK) {
        tpx_notif_t nt;
        if (notif_wait(&v, &nt, 3000) == 0) {
            printf("mode %d: the attacker's notification arrived from \"%s\"\n", mode, nt.from);
            CHECK(strcmp(nt.from, "O") != 0);
        } else {
            printf("mode %d: the attacker's notification did not arrive\n", mode);
        }
    }
    tpx_remote_t *ov = load(&o, &v);
    CHECK(ov != NULL && tpx_notif_send(ov, "from-O", 6) == TPX_OK);
    tpx_notif_t nt;
    CHECK(notif_wait(&v, &nt, 5000) == 0);
    CHECK(nt.len == 6 && memcmp(nt.msg, "from-O", 6) == 0);
    printf("mode %d: the owner's notification arrived from \"%s\"\n", mode, nt.from);
    CHECK(strcmp(nt.from, dial_mode() ? "?O" : "O") == 0);
    if (mv != NULL)
        tpx_remote_forget(mv);
    if (ov != NULL)
        tpx_remote_forget(ov);
    tpx_remote_forget(ro);
    if (pm != NULL)
        tpx_peer_close(pm);
    side_close(&m);
    side_close(&o);
    side_close(&v);
    return check_failures ? 1 : 0;
}

static int t_impostor(void)
{
    for (int mode = 0; mode < 3; mode++)
        if (dial_mode() ? mode != 1 : 1)
            if (impostor_round(mode) != 0)
                return 1;
    CHECK_DONE();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"impostor", t_impostor}};
    if (argc == 2)
        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            if (strcmp(argv[1], tests[i].name) == 0)
                return tests[i].fn();
    fprintf(stderr, "usage: test_sec impostor\n");
    return 2;
}
