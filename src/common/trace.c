/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - the hot-path timeline (trace.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/trace.h"

#define TRACE_CAP (1u << 20)
#define TRACE_THREADS 256

typedef struct {
    uint64_t ns;
    uint64_t arg;
    uint16_t thread;
    uint16_t event;
} trace_rec_t;

_Atomic int tpx__trace_on;
static trace_rec_t *ring;
static _Atomic uint64_t ring_next;
static _Atomic int nthreads;
static char thread_names[TRACE_THREADS][16];
static char trace_path[256];
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int my_thread = -1;

static const char *const event_names[TPX_TR_NEVENTS] = {
    [TPX_TR_POST] = "post",
    [TPX_TR_ISEND_DIRECT] = "isend-direct",
    [TPX_TR_EAGER_HELD] = "eager-held",
    [TPX_TR_EAGER_IRECV] = "eager-irecv",
    [TPX_TR_WORKER_WAKE] = "worker-wake",
    [TPX_TR_MSG_DONE] = "msg-done",
    [TPX_TR_ENGINE_WAKE] = "engine-wake",
    [TPX_TR_NAP_END] = "nap-end",
    [TPX_TR_CTRL_IN] = "ctrl-in",
    [TPX_TR_CHUNK_DONE] = "chunk-done",
    [TPX_TR_LIST_CHECKED] = "list-checked",
    [TPX_TR_XFER_DONE] = "xfer-done",
    [TPX_TR_WAIT_RETURN] = "wait-return",
    [TPX_TR_GATHERED] = "gathered",
    [TPX_TR_SCATTERED] = "scattered",
    [TPX_TR_PARKED] = "parked",
    [TPX_TR_UNPARKED] = "unparked",
    [TPX_TR_SEND_FULL] = "send-full",
    [TPX_TR_RECV_DIRECT] = "recv-direct",
    [TPX_TR_RECV_DRY] = "recv-dry",
    [TPX_TR_CU_WAIT] = "cu-wait",
    [TPX_TR_DATA_POST] = "data-post",
};

void tpx__trace_record(int event, uint64_t arg)
{
    if (my_thread < 0) {
        int k = atomic_fetch_add(&nthreads, 1);
        my_thread = k < TRACE_THREADS ? k : TRACE_THREADS - 1;
        if (k < TRACE_THREADS &&
            pthread_getname_np(pthread_self(), thread_names[k], sizeof(thread_names[k])) != 0)
            snprintf(thread_names[k], sizeof(thread_names[k]), "t%d", k & 0xfff);
    }
    uint64_t i = atomic_fetch_add_explicit(&ring_next, 1, memory_order_relaxed);
    if (i >= TRACE_CAP)
        return; /* full: the first TRACE_CAP records are kept */
    ring[i] = (trace_rec_t){.ns = tpx__now_ns(), .arg = arg, .thread = (uint16_t)my_thread,
                            .event = (uint16_t)event};
}

static int rec_cmp(const void *a, const void *b)
{
    const trace_rec_t *x = a, *y = b;
    return x->ns < y->ns ? -1 : x->ns > y->ns;
}

static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;

static void trace_write(void)
{
    uint64_t n = atomic_load(&ring_next);
    if (n > TRACE_CAP)
        n = TRACE_CAP;
    char path[300];
    const char *pp = strstr(trace_path, "%p");
    if (pp != NULL)
        snprintf(path, sizeof(path), "%.*s%ld%s", (int)(pp - trace_path), trace_path,
                 (long)getpid(), pp + 2);
    else
        snprintf(path, sizeof(path), "%s", trace_path);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        TPX_WARN("TPX_TRACE_FILE=%s: cannot write it", path);
        return;
    }
    qsort(ring, (size_t)n, sizeof(*ring), rec_cmp);
    fprintf(f, "# tpx trace: us since the first record, thread name and number, event, arg (%llu records%s)\n",
            (unsigned long long)n, atomic_load(&ring_next) > TRACE_CAP ? ", ring full" : "");
    for (uint64_t i = 0; i < n; i++) {
        const trace_rec_t *r = &ring[i];
        const char *ev = r->event < TPX_TR_NEVENTS && event_names[r->event] ? event_names[r->event]
                                                                           : "?";
        fprintf(f, "%12.3f %-15s %3u %-13s %llu\n", (double)(r->ns - ring[0].ns) / 1000.0,
                thread_names[r->thread], r->thread, ev, (unsigned long long)r->arg);
    }
    fclose(f);
}

static void trace_dump(void)
{
    atomic_store(&tpx__trace_on, 0);
    pthread_mutex_lock(&dump_lock);
    trace_write();
    pthread_mutex_unlock(&dump_lock);
}

void tpx__trace_flush(void)
{
    if (!atomic_load(&tpx__trace_on))
        return;
    pthread_mutex_lock(&dump_lock);
    trace_write();
    pthread_mutex_unlock(&dump_lock);
}

void tpx__trace_start(const char *path)
{
    if (path == NULL || path[0] == '\0')
        return;
    pthread_mutex_lock(&start_lock);
    if (ring == NULL) {
        ring = calloc(TRACE_CAP, sizeof(*ring));
        if (ring == NULL) {
            TPX_WARN("TPX_TRACE_FILE: no memory for the trace ring");
        } else {
            snprintf(trace_path, sizeof(trace_path), "%s", path);
            atexit(trace_dump);
            atomic_store(&tpx__trace_on, 1);
        }
    }
    pthread_mutex_unlock(&start_lock);
}
