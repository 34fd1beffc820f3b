/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_cuda.h - CUDA buffers in the built-in transport: the staging of a
 * connection's pieces through pinned memory (sock_cuda.c), and the GPU
 * memory the transport uses itself (sock_cuda_mem.c).
 *
 * The staging is an interface the I/O calls (a connection's turn in
 * sock_send.c / sock_recv.c, an eager delivery in sock_eager.c, the worker
 * in sock_worker.c) and that never calls back into the I/O: a call moves
 * what it can on the connection's socket and its stream and returns what
 * the caller's loop must do next (go on, wait for the socket, look again
 * soon: SOCK_CUDA_WAIT). It calls only down: the ring's books
 * (sock_ring.c), the strict TCPX mode's receive layout (sock_tcpx.c), the
 * comm's completion of a piece whose copies finished
 * (tpx__sock_piece_done, sock_comm.c) and the CUDA wrapper (gpu/cuda.h).
 *
 * Threads: the staging of a connection belongs to the thread that owns the
 * connection's turn (its worker: a direct read never moves CUDA pieces);
 * pinned_booked and the memory functions may be called from any thread.
 */
#ifndef TPX_SOCK_CUDA_H
#define TPX_SOCK_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "sock.h"

/* ---- sock_cuda.c: a connection's pieces through pinned staging ---------- */
/* Bytes of the process's staging rings now booked against TPX_SOCK_CUDA_PINNED. */
uint64_t tpx__sock_cuda_pinned_booked(void);
/* Free ch's staging (after its copies end; their pieces are published);
 * nothing if it has none. The connection's owner, or its closer once no
 * worker runs it. */
void tpx__sock_cuda_chan_free(tpx_sock_chan_t *ch);
/* The staging functions never wait for CUDA: SOCK_CUDA_WAIT says a copy
 * they need is still running (look again soon, nothing to wait for on the
 * socket). `*progress` is set when bytes moved or pieces were published. */
#define SOCK_CUDA_WAIT 2
/* A CUDA call failed (the driver may leave errno set: it says nothing). */
#define SOCK_CUDA_FAIL (-2)
/* Receive: the sender closed the connection in the middle of the piece. */
#define SOCK_CUDA_CLOSED (-3)
/* Send: 1: piece payload written, 0: would block, SOCK_CUDA_WAIT, -1: a
 * socket error (errno), SOCK_CUDA_FAIL. */
int tpx__sock_cuda_send(tpx_sock_chan_t *ch, int *progress);
/* Receive: 1: piece payload read and its copies queued (published later
 * by tpx__sock_cuda_reap, once they finished), 0: would block,
 * SOCK_CUDA_WAIT, -1: a socket error (errno), SOCK_CUDA_CLOSED,
 * SOCK_CUDA_FAIL. */
int tpx__sock_cuda_recv(tpx_sock_chan_t *ch, int *progress);
/* A message held eagerly (pageable host memory) into a CUDA receive, on the
 * connection's own non-blocking stream, waited for: the bytes are in
 * device memory when it returns (a plain cuMemcpyHtoD from pageable memory
 * may return before its DMA ends, and the legacy stream would first wait
 * for the application's kernels). I/O worker only. */
tpx_status_t tpx__sock_cuda_eager_copy(tpx_sock_chan_t *ch, int dev, void *dptr, const void *src,
                                       size_t len);
/* Receive: publish the read pieces whose copies finished (in order).
 * Returns how many still wait for theirs, -1 on a CUDA error. Cheap when
 * none waits. */
int tpx__sock_cuda_reap(tpx_sock_chan_t *ch, int *progress);

/* ---- sock_cuda_mem.c: the transport's own GPU memory --------------------- */
int tpx__sock_cuda_available(void);
tpx_status_t tpx__sock_cuda_ptr_dev(const void *p, int *dev);
tpx_status_t tpx__sock_cuda_retain(int dev);
void tpx__sock_cuda_release(int dev);
/* An I/O worker, at its start: it keeps the context of the GPU it last
 * staged for current rather than pushing one per call. */
void tpx__sock_cuda_worker_init(void);
/* Strict TCPX placement on device `dev` (its primary context is retained
 * while any of these lives): host-mapped memory (host and device
 * addresses), device memory (a device address and an opaque allocation),
 * and a synchronous host-to-device copy. current_dev: the device of the
 * caller's current context (0 if none), where Google's plugin puts a comm's
 * buffers. */
int tpx__sock_cuda_current_dev(void);
tpx_status_t tpx__sock_cuda_host_alloc(int dev, size_t len, void **out, void **dev_out);
void tpx__sock_cuda_host_free(int dev, void *p);
tpx_status_t tpx__sock_cuda_dev_alloc(int dev, size_t len, void **dptr, void **alloc);
void tpx__sock_cuda_dev_free(void *alloc);
tpx_status_t tpx__sock_cuda_htod(int dev, void *dptr, const void *src, size_t len);

#endif
