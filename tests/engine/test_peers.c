/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_peers.c - one owner engine serving many peers: 64
 * requester engines in a child process each READ and WRITE their own slice
 * of the owner's exported region, one after another and then all at once;
 * every byte is checked on both sides. The owner's process must not grow
 * threads with its peers: its thread count with 64 connected peers may
 * exceed the count with one by at most TPX_TEST_PEER_THREADS (default 0).
 *
 *   test_peers [npeers]     (default 64)
 *
 * Public API only. The parent is the owner; the child holds the requesters.
 * They talk over two pipes: the owner's metadata + descriptor down, one
 * byte per step up ('1': the first peer is done, 'A': all are, 'E': failed).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/tpx_test.h"
#include "side.h"

#define SLICE (64u * 1024) /* each peer's share of the owner's region */
#define MAX_PEERS 256
#define STEP_MS 120000     /* deadline of each step */

/* Many peers need many descriptors: the hard limit, as a server would. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Read exactly n bytes within ms; -1 on EOF, error or timeout. */
static int read_all(int fd, void *p, size_t n, int ms)
{
    char *c = p;
    while (n > 0) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = poll(&pf, 1, ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* ---- the child: npeers requesters ---------------------------------------------- */

typedef struct {
    side_t s;
    tpx_remote_t *rm;
} req_t;

/* Peer k READs slice k of the owner into its first SLICE bytes and WRITEs
 * its second SLICE bytes over slice k (so the owner can check it later). */
static tpx_status_t peer_post(req_t *q, const tpx_rdesc_t *d, int k, tpx_op_t op, tpx_xfer_t **x)
{
    tpx_iov_t v = {.local = q->s.r,
                   .local_offset = op == TPX_OP_READ ? 0 : SLICE,
                   .remote = d,
                   .remote_offset = (size_t)k * SLICE,
                   .len = SLICE};
    return tpx_rma(q->rm, op, &v, 1, NULL, 0, x);
}

/* The requesters' work; 1 (already reported) on a failure. */
static int child_run(req_t *q, int npeers, int down, int up)
{
    unsigned char blob[TPX_METADATA_MAX];
    uint32_t len = 0;
    tpx_rdesc_t d;
    CHECK(read_all(down, &len, sizeof(len), STEP_MS) == 0 && len <= sizeof(blob) &&
              read_all(down, blob, len, STEP_MS) == 0 &&
              read_all(down, &d, sizeof(d), STEP_MS) == 0,
          "no metadata from the owner");
    unsigned char *own = malloc((size_t)npeers * SLICE); /* the owner's region, as filled */
    CHECK(own != NULL);
    fill(own, (size_t)npeers * SLICE, 'o');
    char name[32];
    for (int k = 0; k < npeers; k++) {
        snprintf(name, sizeof(name), "req%d", k);
        CHECK(side_open(&q[k].s, name, 2 * SLICE, 0) == 0, "peer %d: cannot open", k);
        CHECK_OK(tpx_remote_load(q[k].s.e, blob, len, &q[k].rm));
        /* the second half: what this peer WRITEs over its slice */
        fill(q[k].s.mem + SLICE, SLICE, 1000 + (uint64_t)k);
    }
    /* Round 1, one peer at a time: connect, READ, check. After the first
     * the owner counts its threads. */
    for (int k = 0; k < npeers; k++) {
        tpx_xfer_t *x = NULL;
        tpx_status_t st = peer_post(&q[k], &d, k, TPX_OP_READ, &x);
        if (st == TPX_OK)
            st = tpx_xfer_wait(x, STEP_MS, NULL);
        tpx_xfer_release(x);
        CHECK(st == TPX_OK, "peer %d: READ %s", k, tpx_status_string(st));
        CHECK(memcmp(q[k].s.mem, own + (size_t)k * SLICE, SLICE) == 0,
              "peer %d: READ wrong bytes", k);
        CHECK(k > 0 || write_all(up, "1", 1) == 0);
    }
    free(own);
    /* Round 2, all at once: every peer WRITEs its slice, then READs it back. */
    for (int op = TPX_OP_WRITE; op >= TPX_OP_READ; op--) {
        tpx_xfer_t *xs[MAX_PEERS] = {0};
        tpx_status_t st = TPX_OK;
        int bad = -1;
        if (op == TPX_OP_READ)
            for (int k = 0; k < npeers; k++)
                memset(q[k].s.mem, 0, SLICE);
        for (int k = 0; k < npeers && st == TPX_OK; k++)
            if ((st = peer_post(&q[k], &d, k, (tpx_op_t)op, &xs[k])) != TPX_OK)
                bad = k;
        for (int k = 0; k < npeers; k++) {
            tpx_status_t w = xs[k] != NULL ? tpx_xfer_wait(xs[k], STEP_MS, NULL) : TPX_OK;
            if (w != TPX_OK && st == TPX_OK) {
                st = w;
                bad = k;
            }
            tpx_xfer_release(xs[k]);
        }
        CHECK(st == TPX_OK, "all at once: peer %d: %s %s", bad,
              op == TPX_OP_READ ? "READ" : "WRITE", tpx_status_string(st));
        for (int k = 0; k < npeers && op == TPX_OP_READ; k++)
            CHECK(memcmp(q[k].s.mem, q[k].s.mem + SLICE, SLICE) == 0,
                  "peer %d read back other bytes than it wrote", k);
    }
    printf("requesters: %d engines in one process: %d threads, %d fds\n", npeers,
           test_thread_count(), test_fd_count());
    fflush(stdout);
    return 0;
}

static int child_main(int npeers, int down, int up)
{
    test_set_tag("requesters");
    req_t *q = calloc((size_t)npeers, sizeof(*q));
    REQUIRE(q != NULL);
    int rc = child_run(q, npeers, down, up);
    (void)write_all(up, rc == 0 ? "A" : "E", 1);
    char bye;
    (void)read_all(down, &bye, 1, STEP_MS); /* the owner has checked its memory */
    for (int k = 0; k < npeers; k++) {
        tpx_remote_release(q[k].rm);
        if (q[k].s.e != NULL)
            side_close(&q[k].s);
    }
    free(q);
    return rc;
}

/* ---- the parent: the owner ---------------------------------------------------------- */

/* The owner's side of the run; 1 (already reported) on a failure. */
static int owner_run(side_t *o, int npeers, int base_threads, int down, int up)
{
    unsigned char blob[TPX_METADATA_MAX];
    size_t blen = sizeof(blob);
    CHECK_OK(tpx_engine_get_metadata(o->e, blob, &blen));
    uint32_t len = (uint32_t)blen;
    CHECK(write_all(down, &len, sizeof(len)) == 0 && write_all(down, blob, len) == 0 &&
          write_all(down, &o->d, sizeof(o->d)) == 0);
    char step = 0;
    CHECK(read_all(up, &step, 1, STEP_MS) == 0 && step == '1', "the first peer did not finish");
    int t1 = test_thread_count(), f1 = test_fd_count();
    CHECK(read_all(up, &step, 1, 4 * STEP_MS) == 0 && step == 'A', "the peers failed");
    int tn = test_thread_count(), fn = test_fd_count();
    printf("owner: threads %d before any peer, %d with 1 peer, %d with %d peers; fds %d -> %d\n",
           base_threads, t1, tn, npeers, f1, fn);
    fflush(stdout);
    for (int k = 0; k < npeers; k++) { /* every slice holds what its peer wrote */
        unsigned char want[SLICE];
        fill(want, SLICE, 1000 + (uint64_t)k);
        CHECK(memcmp(o->mem + (size_t)k * SLICE, want, SLICE) == 0,
              "slice %d does not hold what peer %d wrote", k, k);
    }
    const char *slack_s = getenv("TPX_TEST_PEER_THREADS");
    int slack = slack_s != NULL ? atoi(slack_s) : 0;
    CHECK(tn - t1 <= slack,
          "%d more threads with %d peers than with one (allowed: %d): the transport's "
          "threads grow with peers",
          tn - t1, npeers, slack);
    return 0;
}

int main(int argc, char **argv)
{
    int npeers = argc > 1 ? atoi(argv[1]) : 64;
    if (npeers < 1 || npeers > MAX_PEERS) {
        fprintf(stderr, "usage: test_peers [npeers 1..%d]\n", MAX_PEERS);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    int down[2], up[2];
    REQUIRE(pipe(down) == 0 && pipe(up) == 0);
    /* Fork before any engine exists: the child starts from a process with
     * one thread and no library state. */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(down[1]);
        close(up[0]);
        _exit(child_main(npeers, down[0], up[1]));
    }
    close(down[0]);
    close(up[1]);
    test_set_tag("owner");
    side_t o;
    REQUIRE(side_open(&o, "owner", (size_t)npeers * SLICE, 0) == 0, "cannot open the owner");
    fill(o.mem, o.size, 'o');
    int base_threads = test_thread_count();
    int rc = owner_run(&o, npeers, base_threads, down[1], up[0]);
    (void)write_all(down[1], "x", 1);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        ADD_FAILURE("the requesters' process failed (status 0x%x)", status);
    side_close(&o);
    (void)rc;
    TEST_DONE();
}
