/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.h - a timeline of the hot path, for finding where latency goes.
 *
 * TPX_TRACE_FILE=path turns it on (read with the rest of the
 * configuration): every TPX_TL(event, arg) point then appends one
 * record (monotonic ns, thread, event, arg) to a process-wide ring of
 * 1M records, and at exit the ring is written to `path` (`%p`: the pid),
 * one line per record, oldest first, times in microseconds from the
 * first record. Off (the default), a trace point costs one relaxed load
 * and a predicted branch: no allocation, no system call, no lock.
 */
#ifndef TPX_COMMON_TRACE_H
#define TPX_COMMON_TRACE_H

#include <stdatomic.h>
#include <stdint.h>

#include "common/util.h"

typedef enum {
    TPX_TR_POST = 1,       /* an API call queued work (arg: transfer kind) */
    TPX_TR_ISEND_DIRECT,   /* isend wrote a small message itself (arg: bytes) */
    TPX_TR_EAGER_HELD,     /* a worker read a message before its receive (arg: bytes) */
    TPX_TR_EAGER_IRECV,    /* irecv completed a held message (arg: bytes) */
    TPX_TR_WORKER_WAKE,    /* an I/O worker left epoll_wait (arg: events) */
    TPX_TR_MSG_DONE,       /* a worker finished a message (arg: bytes) */
    TPX_TR_ENGINE_WAKE,    /* a worker wrote the engine's eventfd */
    TPX_TR_NAP_END,        /* the progress thread woke from a nap (arg: poll result) */
    TPX_TR_CTRL_IN,        /* the engine took in a control message (arg: type) */
    TPX_TR_CHUNK_DONE,     /* the engine saw a data request complete (arg: bytes) */
    TPX_TR_LIST_CHECKED,   /* an owner checked a request list (arg: entries) */
    TPX_TR_XFER_DONE,      /* a transfer completed (arg: kind) */
    TPX_TR_WAIT_RETURN,    /* tpx_xfer_wait returned (arg: 1 after sleeping) */
    TPX_TR_GATHERED,       /* a packed chunk was gathered (arg: ns the copies took) */
    TPX_TR_SCATTERED,      /* a packed chunk was scattered (arg: ns the copies took) */
    TPX_TR_PARKED,         /* a receiving connection met a message not posted yet (arg: seq) */
    TPX_TR_UNPARKED,       /* ... and found it posted (arg: seq) */
    TPX_TR_SEND_FULL,      /* a sending connection's socket was full (arg: bytes moved that turn) */
    TPX_TR_RECV_DIRECT,    /* irecv/test read bytes themselves (arg: the receive's size) */
    TPX_TR_RECV_DRY,       /* a receiving connection's socket was empty (arg: bytes moved that turn) */
    TPX_TR_DATA_POST,      /* the engine posted a data request (arg: bytes; +1 for a receive) */
    TPX_TR_CU_WAIT,        /* a connection waited for a staging copy, nothing moved (arg: 0 send,
                              1 receive: ring space, 2 receive: a copy to publish) */
    TPX_TR_NEVENTS
} tpx_trace_event_t;

extern _Atomic int tpx__trace_on;

void tpx__trace_record(int event, uint64_t arg);
/* Write what was recorded so far (tracing goes on): an engine that is
 * destroyed does, for processes that end with _exit() (forked benchmark
 * sides), which skips the dump at exit. */
void tpx__trace_flush(void);
/* Start tracing into `path` (once per process; later calls do nothing). */
void tpx__trace_start(const char *path);

/* 1 while tracing (to time a span: read the clock only then). */
#define TPX_TL_ON() TPX_UNLIKELY(atomic_load_explicit(&tpx__trace_on, memory_order_relaxed))

#define TPX_TL(ev, arg)                                                                            \
    do {                                                                                           \
        if (TPX_UNLIKELY(atomic_load_explicit(&tpx__trace_on, memory_order_relaxed)))              \
            tpx__trace_record((ev), (uint64_t)(arg));                                              \
    } while (0)

#endif
