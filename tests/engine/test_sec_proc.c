/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_sec_proc.c - hostile processes: scenarios that need an owner to die,
 * or another process to hold resources, so each role is a process of its
 * own (forked before the requester creates its engine), talking to the
 * requester over pipes. Attackers are written against the engine's
 * internals (a real engine that lies about its id).
 *
 *   test_sec_proc takeover  a broken connection to the owner is made again
 *                           (the same instance); then the owner process is
 *                           killed and another process
 *                           binds its port and claims its engine id (no
 *                           key): the requester's reconnecting WRITE and
 *                           READ are refused with TPX_ERR_PROTOCOL and no
 *                           request reaches that process. The owner
 *                           restarted on the same port is a new engine:
 *                           the old remote stays refused; its new metadata
 *                           works
 *
 *   test_sec_proc idlepeers the owner runs at an open-file limit of 256 (its
 *                           peer table is small); another process on the
 *                           requester's address takes every slot it is given
 *                           and leaves the peers idle: a requester still
 *                           connects (an idle peer gives it its slot), and
 *                           its transfers complete. The requester's engine
 *                           raised its own soft open-file limit to the hard one
 *
 * Run with TPX_IDENTITY=dial too (ctest does): without keys the requester
 * knows the owner only by the instance its first connection reached.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "engine/engine.h"
#include "engine/peer.h"
#include "engine/remote.h"
#include "engine/xfer.h"
#include "side.h"
#include "tpx/tpx.h"

#define BLK 4096

/* ---- roles: forked processes driven over two pipes ---------------------------------------- */

typedef struct {
    pid_t pid;
    int to, from; /* the parent's ends: commands to the role, answers from it */
} role_t;

static int put(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* n bytes within ms, or -1 (the other side died or hangs). */
static int get(int fd, void *buf, size_t n, int ms)
{
    unsigned char *p = buf;
    uint64_t until = test_deadline_ms(ms);
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int left = (int)((until - TPX_MIN(until, test_now_ns())) / 1000000ull);
        if (left <= 0 || poll(&pf, 1, left) <= 0)
            return -1;
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int role_start(role_t *r, const char *tag, int (*fn)(int in, int out))
{
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        close(a[1]);
        close(b[0]);
        test_set_tag("%s", tag);
        alarm(120); /* a role the parent forgot ends */
        _exit(fn(a[0], b[1]));
    }
    close(a[0]);
    close(b[1]);
    r->pid = pid;
    r->to = a[1];
    r->from = b[0];
    return 0;
}

/* The role's exit status (0: it passed its own checks), or -1. */
static int role_end(role_t *r)
{
    int st = 0;
    close(r->to);
    close(r->from);
    if (waitpid(r->pid, &st, 0) != r->pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An engine like side_open()'s on 127.0.0.1, on `port` (0: ephemeral). */
static int side_open_port(side_t *s, const char *name, int port)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = port > 0 ? port : TPX_PORT_EPHEMERAL;
    p.name = name;
    p.progress_thread = 1;
    memset(s, 0, sizeof(*s));
    if (tpx_engine_create(&p, &s->e) != TPX_OK)
        return -1;
    s->size = 1u << 20;
    s->mem = aligned_alloc(4096, s->size);
    if (s->mem == NULL)
        return -1;
    fill(s->mem, s->size, (uint64_t)name[0]);
    if (tpx_mem_register(s->e, s->mem, s->size, TPX_MEM_HOST, &s->r) != TPX_OK ||
        tpx_region_export(s->r, 0, 0, &s->d) != TPX_OK)
        return -1;
    return 0;
}

/* Tell the parent: the port, the metadata blob and the descriptor. */
static int send_side(int out, side_t *s)
{
    unsigned char blob[TPX_METADATA_MAX];
    size_t len = sizeof(blob);
    CHECK_OK(tpx_engine_get_metadata(s->e, blob, &len));
    uint32_t port = (uint32_t)tpx_engine_port(s->e), n = (uint32_t)len;
    CHECK(put(out, &port, 4) == 0 && put(out, &n, 4) == 0 && put(out, blob, len) == 0 &&
          put(out, &s->d, sizeof(s->d)) == 0);
    return 0;
}

typedef struct {
    uint32_t port;
    uint32_t len;
    unsigned char blob[TPX_METADATA_MAX];
    tpx_rdesc_t d;
} owner_t;

static int recv_side(role_t *r, owner_t *o)
{
    CHECK(get(r->from, &o->port, 4, 30000) == 0 && get(r->from, &o->len, 4, 5000) == 0 &&
          o->len <= sizeof(o->blob) && get(r->from, o->blob, o->len, 5000) == 0 &&
          get(r->from, &o->d, sizeof(o->d), 5000) == 0);
    return 0;
}

static uint64_t requests_seen(tpx_engine_t *e)
{
    tpx_engine_counters_t c = {.size = sizeof(c)};
    if (tpx_engine_counters(e, &c) != TPX_OK)
        return ~0ull;
    return c.rma_served + c.rma_rejected;
}

/* One WRITE or READ of BLK bytes between v's offset `loc` and the
 * descriptor's `rem`, waited for. */
static tpx_status_t rma1(tpx_remote_t *rm, side_t *v, int op, const tpx_rdesc_t *d, size_t loc,
                         size_t rem)
{
    tpx_iov_t iov = {.local = v->r, .local_offset = loc, .remote = d, .remote_offset = rem,
                     .len = BLK};
    tpx_xfer_t *x = NULL;
    tpx_status_t st = tpx_rma(rm, op, &iov, 1, NULL, 0, &x);
    if (st == TPX_OK)
        st = tpx_xfer_wait(x, 10000, NULL);
    tpx_xfer_release(x);
    return st;
}

/* ---- takeover ------------------------------------------------------------------------------ */

/* The owner: serves until it is killed. */
static int takeover_owner(int in, int out)
{
    side_t o;
    CHECK(side_open_port(&o, "O", 0) == 0);
    TRY(send_side(out, &o));
    char c;
    (void)get(in, &c, 1, 100000); /* killed meanwhile */
    return 1;
}

/* The impostor: binds the dead owner's port and claims its id (a real
 * engine, its own instance, no key), then says what reached it. */
static int takeover_impostor(int in, int out)
{
    uint32_t port;
    uint64_t id;
    CHECK(get(in, &port, 4, 60000) == 0 && get(in, &id, 8, 5000) == 0);
    side_t m;
    CHECK(side_open_port(&m, "O", (int)port) == 0, "cannot bind the owner's port %u", port);
    pthread_mutex_lock(&m.e->lock);
    /* id: public, in the owner's metadata and descriptors; no keys: it
     * cannot sign as the owner, it offers no key */
    tpx__ident_pose(m.e, id, 0, NULL);
    pthread_mutex_unlock(&m.e->lock);
    char c = 1;
    CHECK(put(out, &c, 1) == 0);
    CHECK(get(in, &c, 1, 60000) == 0);
    uint64_t seen = requests_seen(m.e);
    unsigned char *ref = malloc(m.size);
    CHECK(ref != NULL);
    fill(ref, m.size, 'O');
    uint64_t changed = memcmp(ref, m.mem, m.size) != 0;
    free(ref);
    CHECK(put(out, &seen, 8) == 0 && put(out, &changed, 8) == 0);
    side_close(&m);
    return 0;
}

/* The owner restarted on its port: a new engine. Sends what the
 * requester wrote to it, then ends. */
static int takeover_restarted(int in, int out)
{
    uint32_t port;
    CHECK(get(in, &port, 4, 60000) == 0);
    side_t o;
    CHECK(side_open_port(&o, "O", (int)port) == 0, "cannot bind its old port %u", port);
    TRY(send_side(out, &o));
    char c;
    CHECK(get(in, &c, 1, 60000) == 0);
    CHECK(put(out, o.mem + 8192, BLK) == 0);
    side_close(&o);
    return 0;
}

/* V's connection to the remote is gone (the owner's death was noticed). */
static int remote_down(side_t *v, tpx_remote_t *rm)
{
    pthread_mutex_lock(&v->e->lock);
    tpx_peer_t *p = rm->peer;
    int down = p == NULL || p->state != PEER_READY || p->remote_closed;
    pthread_mutex_unlock(&v->e->lock);
    return down;
}

static int t_takeover(void)
{
    role_t ro, rm, rr;
    /* Every role forks before this process starts an engine's threads. */
    CHECK(role_start(&ro, "owner", takeover_owner) == 0);
    CHECK(role_start(&rm, "impostor", takeover_impostor) == 0);
    CHECK(role_start(&rr, "restarted", takeover_restarted) == 0);
    owner_t o;
    TRY(recv_side(&ro, &o));
    side_t v;
    CHECK(side_open_port(&v, "V", 0) == 0);
    tpx_remote_t *rem = NULL;
    CHECK_OK(tpx_remote_load(v.e, o.blob, o.len, &rem));

    /* The first connection reaches the owner itself. */
    memset(v.mem, 0x5e, BLK);
    CHECK_OK(rma1(rem, &v, TPX_OP_WRITE, &o.d, 0, 8192));
    CHECK_OK(rma1(rem, &v, TPX_OP_READ, &o.d, 16384, 65536));
    static unsigned char want[1u << 20];
    fill(want, sizeof(want), 'O');
    EXPECT(memcmp(v.mem + 16384, want + 65536, BLK) == 0);

    /* A broken connection to the same owner is made again: the instance
     * proves the ticket its first connection gave (wrapped under the token
     * when there is one). */
    pthread_mutex_lock(&v.e->lock);
    if (rem->peer != NULL)
        tpx__peer_fail(rem->peer, TPX_ERR_CONN_RESET, "dropped by the test");
    pthread_mutex_unlock(&v.e->lock);
    memset(v.mem + 4096, 0x6d, BLK);
    EXPECT_EQ(rma1(rem, &v, TPX_OP_WRITE, &o.d, 4096, 12288), TPX_OK);
    memset(v.mem + 16384, 0, BLK);
    EXPECT_EQ(rma1(rem, &v, TPX_OP_READ, &o.d, 16384, 65536), TPX_OK);
    EXPECT(memcmp(v.mem + 16384, want + 65536, BLK) == 0);
    EXPECT_EQ(rem->epoch, 2);

    /* The owner dies; the requester notices. */
    kill(ro.pid, SIGKILL);
    (void)role_end(&ro);
    for (uint64_t until = test_deadline_ms(10000); !remote_down(&v, rem);) {
        CHECK(test_now_ns() < until, "the owner's death was not noticed in 10 s");
        usleep(10000);
    }

    /* Another process takes its port and claims its id. */
    uint64_t id = rem->md.engine_id;
    char c = 1;
    CHECK(put(rm.to, &o.port, 4) == 0 && put(rm.to, &id, 8) == 0);
    CHECK(get(rm.from, &c, 1, 30000) == 0, "the impostor did not start");
    memset(v.mem, 0x77, BLK);
    tpx_status_t w = rma1(rem, &v, TPX_OP_WRITE, &o.d, 0, 8192);
    memset(v.mem + 16384, 0xaa, BLK);
    tpx_status_t r = rma1(rem, &v, TPX_OP_READ, &o.d, 16384, 65536);
    printf("takeover: WRITE %s, READ %s\n", tpx_status_name(w), tpx_status_name(r));
    EXPECT_EQ(w, TPX_ERR_PROTOCOL);
    EXPECT_EQ(r, TPX_ERR_PROTOCOL);
    unsigned char aa[BLK];
    memset(aa, 0xaa, BLK);
    EXPECT(memcmp(v.mem + 16384, aa, BLK) == 0, "the READ took bytes from the impostor");
    uint64_t seen = ~0ull, changed = ~0ull;
    CHECK(put(rm.to, &c, 1) == 0);
    CHECK(get(rm.from, &seen, 8, 10000) == 0 && get(rm.from, &changed, 8, 5000) == 0);
    printf("takeover: requests that reached the impostor: %llu, its memory changed: %llu\n",
           (unsigned long long)seen, (unsigned long long)changed);
    EXPECT_EQ(seen, 0);
    EXPECT_EQ(changed, 0);
    EXPECT_EQ(role_end(&rm), 0);

    /* The owner restarts on its port: a new engine. The old remote stays
     * refused; its new metadata works. */
    CHECK(put(rr.to, &o.port, 4) == 0);
    owner_t o2;
    TRY(recv_side(&rr, &o2));
    tpx_status_t old = rma1(rem, &v, TPX_OP_WRITE, &o.d, 0, 8192);
    printf("takeover: WRITE to the old remote after the restart: %s\n", tpx_status_name(old));
    EXPECT(old != TPX_OK);
    tpx_remote_t *rem2 = NULL;
    CHECK_OK(tpx_remote_load(v.e, o2.blob, o2.len, &rem2));
    memset(v.mem, 0x3c, BLK);
    EXPECT_EQ(rma1(rem2, &v, TPX_OP_WRITE, &o2.d, 0, 8192), TPX_OK);
    memset(v.mem + 16384, 0, BLK);
    EXPECT_EQ(rma1(rem2, &v, TPX_OP_READ, &o2.d, 16384, 65536), TPX_OK);
    EXPECT(memcmp(v.mem + 16384, want + 65536, BLK) == 0);
    unsigned char got[BLK];
    CHECK(put(rr.to, &c, 1) == 0 && get(rr.from, got, BLK, 10000) == 0);
    EXPECT(memcmp(got, v.mem, BLK) == 0, "the WRITE did not land at the restarted owner");
    EXPECT_EQ(role_end(&rr), 0);
    tpx_remote_release(rem2);
    tpx_remote_release(rem);
    side_close(&v);
    TEST_DONE();
}

/* ---- idlepeers ----------------------------------------------------------------------------- */

/* The owner, at an open-file limit of 256 (soft and hard: it cannot raise
 * it), so its peer table is small. */
static int idle_owner(int in, int out)
{
    struct rlimit rl = {.rlim_cur = 256, .rlim_max = 256};
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    side_t o;
    CHECK(side_open_port(&o, "O", 0) == 0);
    TRY(send_side(out, &o));
    char c;
    CHECK(get(in, &c, 1, 100000) == 0);
    CHECK(put(out, o.mem + 8192, BLK) == 0);
    side_close(&o);
    return 0;
}

/* Another process (no token, the same address as the requester) takes
 * every peer slot the owner gives it and leaves them idle; then it says how
 * many of them are still up. */
static int idle_hog(int in, int out)
{
    enum { MAXP = 64 };
    uint32_t port;
    CHECK(get(in, &port, 4, 60000) == 0);
    side_t h;
    CHECK(side_open_port(&h, "H", 0) == 0);
    tpx_peer_t *ps[MAXP];
    uint32_t held = 0;
    tpx_status_t last = TPX_OK;
    while (held < MAXP) {
        last = tpx_peer_connect(h.e, "127.0.0.1", (int)port, 10000, &ps[held]);
        if (last != TPX_OK)
            break;
        held++;
    }
    int32_t why = last;
    CHECK(put(out, &held, 4) == 0 && put(out, &why, 4) == 0);
    char c;
    CHECK(get(in, &c, 1, 60000) == 0);
    /* A peer that gave its slot ends here once its goodbye or EOF is in:
     * wait for one (or 10 s), then count. */
    uint32_t up = held;
    for (uint64_t until = test_deadline_ms(10000); up + 1 > held && test_now_ns() < until;) {
        up = 0;
        pthread_mutex_lock(&h.e->lock);
        for (uint32_t i = 0; i < held; i++)
            up += ps[i]->state == PEER_READY && !ps[i]->remote_closed;
        pthread_mutex_unlock(&h.e->lock);
        if (up + 1 > held)
            usleep(10000);
    }
    CHECK(put(out, &up, 4) == 0);
    for (uint32_t i = 0; i < held; i++)
        tpx_peer_close(ps[i]);
    side_close(&h);
    return 0;
}

static int t_idlepeers(void)
{
    role_t ro, rh;
    CHECK(role_start(&ro, "owner", idle_owner) == 0);
    CHECK(role_start(&rh, "hog", idle_hog) == 0);
    owner_t o;
    TRY(recv_side(&ro, &o));
    CHECK(put(rh.to, &o.port, 4) == 0);
    uint32_t held = 0;
    int32_t why = 0;
    CHECK(get(rh.from, &held, 4, 120000) == 0 && get(rh.from, &why, 4, 5000) == 0);
    printf("idlepeers: the other process holds %u idle peers; one more: %s\n", held,
           tpx_status_name(why));
    /* The table is full: the owner refused the next one. */
    EXPECT_EQ(why, TPX_ERR_NO_RESOURCE);
    EXPECT(held >= 2);
    /* Its peers are idle once they sent nothing for a second. */
    usleep(1500 * 1000);

    /* This process's soft open-file limit is below the hard one: its engine
     * raises it. */
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    int lowered = rl.rlim_max > 512;
    if (lowered) {
        rl.rlim_cur = 512;
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    }
    side_t v;
    CHECK(side_open_port(&v, "V", 0) == 0);
    struct rlimit now;
    CHECK(getrlimit(RLIMIT_NOFILE, &now) == 0);
    printf("idlepeers: this process's open-file limit %llu -> %llu (hard %llu)\n",
           (unsigned long long)(lowered ? 512 : rl.rlim_cur), (unsigned long long)now.rlim_cur,
           (unsigned long long)now.rlim_max);
    EXPECT(now.rlim_cur == now.rlim_max);

    /* A requester still connects, and its transfers complete. */
    tpx_remote_t *rem = NULL;
    CHECK_OK(tpx_remote_load(v.e, o.blob, o.len, &rem));
    memset(v.mem, 0x42, BLK);
    tpx_status_t w = rma1(rem, &v, TPX_OP_WRITE, &o.d, 0, 8192);
    memset(v.mem + 16384, 0, BLK);
    tpx_status_t r = rma1(rem, &v, TPX_OP_READ, &o.d, 16384, 65536);
    printf("idlepeers: the requester's WRITE %s, READ %s\n", tpx_status_name(w),
           tpx_status_name(r));
    EXPECT_EQ(w, TPX_OK);
    EXPECT_EQ(r, TPX_OK);
    static unsigned char want[1u << 20];
    fill(want, sizeof(want), 'O');
    EXPECT(memcmp(v.mem + 16384, want + 65536, BLK) == 0);
    /* One of the other process's idle peers gave its slot (asked before the
     * owner ends, which ends the others). */
    char c = 1;
    uint32_t up = 0;
    CHECK(put(rh.to, &c, 1) == 0 && get(rh.from, &up, 4, 10000) == 0);
    printf("idlepeers: the other process's peers still up: %u of %u\n", up, held);
    EXPECT_EQ(up + 1, held);
    unsigned char got[BLK];
    CHECK(put(ro.to, &c, 1) == 0 && get(ro.from, got, BLK, 10000) == 0);
    EXPECT(memcmp(got, v.mem, BLK) == 0, "the WRITE did not land at the owner");
    EXPECT_EQ(role_end(&rh), 0);
    EXPECT_EQ(role_end(&ro), 0);
    tpx_remote_release(rem);
    side_close(&v);
    TEST_DONE();
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } tests[] = {{"takeover", t_takeover}, {"idlepeers", t_idlepeers}};
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2)
        for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            if (strcmp(argv[1], tests[i].name) == 0)
                return tests[i].fn();
    fprintf(stderr, "usage: test_sec_proc takeover|idlepeers\n");
    return 2;
}
