/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sigpipe.h - a plugin's SIGPIPE never kills the application.
 *
 * A plugin may write a socket whose peer has gone without MSG_NOSIGNAL
 * (Google's TCPX plugin writes its control connections so): the kernel
 * then sends SIGPIPE to the writing thread, and its default action ends
 * the process. libtpx never changes the process's disposition of SIGPIPE
 * (that is the application's); it only blocks the signal where it calls
 * plugins, the way libraries that write sockets on an application's
 * behalf do (libpq, OpenSSL users):
 *
 *  - threads libtpx starts block SIGPIPE for their whole life
 *    (tpx__sigpipe_block_thread, once, first thing): a SIGPIPE they raise
 *    stays pending in that thread and does nothing; threads a plugin starts
 *    inside a guarded call inherit the blocked mask;
 *  - plugin calls on an application's thread run inside a guard
 *    (tpx__sigpipe_enter/leave) that blocks SIGPIPE in that thread and,
 *    before unblocking it, consumes a SIGPIPE raised meanwhile
 *    (sigtimedwait with a zero timeout), so it is never delivered.
 *
 * Guards nest: only the outermost one of a thread makes system calls
 * (three: block, sigpending, unblock: 0.45 us on a 2-core VM); an inner
 * one, and any guard on a thread of libtpx's own, costs a thread-local
 * counter (2 ns).
 * The engine opens one guard per public API call that may reach the plugin
 * (tpx_send, tpx_progress, ...: not per isend or test), and net.c one
 * around each plugin call, which is free inside the API's and covers any
 * path without one. A plugin that never raises SIGPIPE (tpx's own
 * transport: MSG_NOSIGNAL everywhere) is called without guards (`on` 0).
 *
 * A thread whose mask already blocks SIGPIPE is left as it is: a SIGPIPE
 * raised in it stays pending for the application (sigwait). Limit: a
 * process-directed SIGPIPE (kill(2)) that arrives while a guard is open is
 * consumed with the plugin's.
 */
#ifndef TPX_COMMON_SIGPIPE_H
#define TPX_COMMON_SIGPIPE_H

#include <signal.h>

typedef struct {
    int mode; /* SIGPIPE_* of sigpipe.c: what leave() undoes */
} tpx_sigpipe_guard_t;

/* Block SIGPIPE in the calling thread for good (a thread libtpx started). */
void tpx__sigpipe_block_thread(void);
/* Open a guard in the calling thread (`on` 0: do nothing, for a plugin that
 * never raises SIGPIPE); close it with leave() on the same thread. */
void tpx__sigpipe_enter(tpx_sigpipe_guard_t *g, int on);
void tpx__sigpipe_leave(tpx_sigpipe_guard_t *g);

#endif
