/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wakeup.c - the engine fd's contract (tpx.h, tpx_engine_fd) with two
 * threads on one engine: one posts sends and polls them (and calls
 * tpx_progress()) as fast as it can; the other posts one receive at a time
 * and sleeps in poll() on the engine fd until it ends. The waiter must
 * never sleep through the end of its own transfer, whatever the poller
 * does (the old fd was cleared by every poll/progress call, so the poller
 * stole the waiter's wake-ups). A second engine in the same process is the
 * peer. Bytes are verified.
 *
 *   test_wakeup thread   both engines with a progress thread
 *   test_wakeup caller   the tested engine caller-driven: only the polling
 *                        thread's tpx_progress() drives it
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/tpx_test.h"
#include "tpx/tpx.h"

#define ROUNDS 300    /* receives of the waiting thread, one at a time */
#define SENDS 300     /* sends of the polling thread */
#define MSG 4096      /* bytes per transfer */
#define WAKE_MS 2000  /* a waiter asleep this long with its transfer done missed it */
#define DEADLINE_S 60 /* the whole test */

typedef struct {
    tpx_engine_t *e;
    tpx_peer_t *p;
    tpx_region_t *r;
    unsigned char *mem; /* [0, SENDS*MSG): sends of P / receives of the peer;
                           [SENDS*MSG, +ROUNDS*MSG): receives of W / sends of the peer */
} side_t;

static side_t A, B;          /* A: the tested engine (two threads); B: the peer */
static atomic_int w_done;    /* the waiter has finished */
static atomic_int failed;
static int missed, w_wakeups, w_timeouts;
static long p_polls;

static unsigned char pat(size_t i, unsigned salt) { return (unsigned char)(i * 31u + salt * 7u + 1u); }

static int side_open(side_t *s, int progress_thread, int listen)
{
    tpx_engine_params_t p;
    tpx_engine_params_init(&p);
    p.bind_addr = "127.0.0.1";
    p.port = listen ? TPX_PORT_EPHEMERAL : TPX_PORT_NONE;
    p.progress_thread = progress_thread;
    if (tpx_engine_create(&p, &s->e) != TPX_OK)
        return -1;
    size_t size = (size_t)(SENDS + ROUNDS) * MSG;
    s->mem = aligned_alloc(4096, size);
    if (s->mem == NULL)
        return -1;
    memset(s->mem, 0, size);
    return tpx_mem_register(s->e, s->mem, size, TPX_MEM_HOST, &s->r) == TPX_OK ? 0 : -1;
}

static void *connect_main(void *arg)
{
    int port = *(int *)arg;
    if (tpx_peer_connect(B.e, "127.0.0.1", port, 30000, &B.p) != TPX_OK)
        B.p = NULL;
    return NULL;
}

/* B: all the matching sends and receives at once, then wait for them. */
static void *peer_main(void *arg)
{
    (void)arg;
    static tpx_xfer_t *x[SENDS + ROUNDS];
    size_t wbase = (size_t)SENDS * MSG;
    for (size_t i = 0; i < (size_t)ROUNDS * MSG; i++)
        B.mem[wbase + i] = pat(i, 2);
    int n = 0;
    for (int i = 0; i < SENDS; i++)
        if (tpx_recv(B.p, B.r, (size_t)i * MSG, MSG, &x[n++]) != TPX_OK)
            goto fail;
    for (int i = 0; i < ROUNDS; i++)
        if (tpx_send(B.p, B.r, wbase + (size_t)i * MSG, MSG, &x[n++]) != TPX_OK)
            goto fail;
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        if (tpx_xfer_wait(x[i], DEADLINE_S * 1000, &got) != TPX_OK || got != MSG)
            goto fail;
        tpx_xfer_release(x[i]);
    }
    for (size_t i = 0; i < (size_t)SENDS * MSG; i++)
        if (B.mem[i] != pat(i, 1)) {
            fprintf(stderr, "peer: byte %zu of the polling thread's sends is wrong\n", i);
            goto fail;
        }
    return NULL;
fail:
    fprintf(stderr, "peer: a transfer failed\n");
    atomic_store(&failed, 1);
    return NULL;
}

/* W: one receive at a time, asleep on the engine fd until it ends. */
static void *waiter_main(void *arg)
{
    (void)arg;
    int fd = tpx_engine_fd(A.e);
    size_t wbase = (size_t)SENDS * MSG;
    uint64_t t0 = test_now_ns();
    for (int i = 0; i < ROUNDS && !atomic_load(&failed); i++) {
        tpx_xfer_t *x;
        if (tpx_recv(A.p, A.r, wbase + (size_t)i * MSG, MSG, &x) != TPX_OK) {
            atomic_store(&failed, 1);
            break;
        }
        for (;;) {
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            int r = poll(&pf, 1, WAKE_MS);
            if (r < 0 && errno != EINTR) {
                perror("poll");
                atomic_store(&failed, 1);
                break;
            }
            w_wakeups += r > 0;
            w_timeouts += r == 0;
            size_t got = 0;
            tpx_status_t st = tpx_xfer_poll(x, &got);
            if (st == TPX_INPROGRESS) {
                if (test_secs_since(t0) > DEADLINE_S) {
                    fprintf(stderr, "waiter: receive %d still running after %d s\n", i,
                            DEADLINE_S);
                    atomic_store(&failed, 1);
                    break;
                }
                continue;
            }
            if (r == 0) {
                /* It had ended, and the fd let us sleep WAKE_MS through it. */
                fprintf(stderr, "waiter: receive %d was done but the engine fd slept %d ms\n", i,
                        WAKE_MS);
                missed++;
            }
            if (st != TPX_OK || got != MSG) {
                fprintf(stderr, "waiter: receive %d: %s, %zu bytes\n", i, tpx_status_string(st), got);
                atomic_store(&failed, 1);
            }
            break;
        }
        tpx_xfer_release(x);
    }
    for (size_t i = 0; i < (size_t)ROUNDS * MSG; i++)
        if (A.mem[wbase + i] != pat(i, 2)) {
            fprintf(stderr, "waiter: byte %zu received wrong\n", i);
            atomic_store(&failed, 1);
            break;
        }
    atomic_store(&w_done, 1);
    return NULL;
}

/* P: sends, each polled to its end with tpx_progress() between polls; then
 * keeps calling both until the waiter is done (it drives progress in
 * caller mode). */
static void *poller_main(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < (size_t)SENDS * MSG; i++)
        A.mem[i] = pat(i, 1);
    uint64_t t0 = test_now_ns();
    for (int i = 0; i < SENDS && !atomic_load(&failed); i++) {
        tpx_xfer_t *x;
        if (tpx_send(A.p, A.r, (size_t)i * MSG, MSG, &x) != TPX_OK) {
            atomic_store(&failed, 1);
            break;
        }
        tpx_status_t st;
        while ((st = tpx_xfer_poll(x, NULL)) == TPX_INPROGRESS) {
            (void)tpx_progress(A.e);
            p_polls++;
            if (test_secs_since(t0) > DEADLINE_S) {
                atomic_store(&failed, 1);
                break;
            }
        }
        if (st != TPX_OK) {
            fprintf(stderr, "poller: send %d: %s\n", i, tpx_status_string(st));
            atomic_store(&failed, 1);
        }
        tpx_xfer_release(x);
    }
    while (!atomic_load(&w_done) && !atomic_load(&failed)) {
        (void)tpx_progress(A.e);
        p_polls++;
        if (test_secs_since(t0) > 2 * DEADLINE_S)
            break;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int caller = argc > 1 && strcmp(argv[1], "caller") == 0;
    if (argc < 2 || (!caller && strcmp(argv[1], "thread") != 0)) {
        fprintf(stderr, "usage: test_wakeup thread|caller\n");
        return 2;
    }
    if (side_open(&A, !caller, 1) != 0 || side_open(&B, 1, 0) != 0) {
        fprintf(stderr, "engine setup failed\n");
        return 1;
    }
    int port = tpx_engine_port(A.e);
    pthread_t tc, tp, tw, tb;
    pthread_create(&tc, NULL, connect_main, &port);
    tpx_status_t st = tpx_peer_accept(A.e, 30000, &A.p); /* the bootstrap thread sets it up */
    pthread_join(tc, NULL);
    if (st != TPX_OK || B.p == NULL) {
        fprintf(stderr, "connect/accept failed: %s\n", tpx_status_string(st));
        return 1;
    }
    pthread_create(&tb, NULL, peer_main, NULL);
    pthread_create(&tw, NULL, waiter_main, NULL);
    pthread_create(&tp, NULL, poller_main, NULL);
    pthread_join(tw, NULL);
    pthread_join(tp, NULL);
    pthread_join(tb, NULL);
    printf("%s: waiter %d receives, %d fd wake-ups, %d timeouts, %d missed; poller %d sends, "
           "%ld polls\n",
           argv[1], ROUNDS, w_wakeups, w_timeouts, missed, SENDS, p_polls);
    EXPECT(!atomic_load(&failed));
    EXPECT_EQ(missed, 0);
    /* Everything was seen: the fd must not be readable now. */
    struct pollfd pf = {.fd = tpx_engine_fd(A.e), .events = POLLIN};
    EXPECT_EQ(poll(&pf, 1, 0), 0);
    tpx_peer_close(B.p);
    tpx_peer_close(A.p);
    tpx_engine_destroy(B.e);
    tpx_engine_destroy(A.e);
    free(A.mem);
    free(B.mem);
    TEST_DONE();
}
