/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transport_test.h - the two-process harness shared by the transport test
 * scenarios (test_transport.c: the harness, the transfer scenarios and the
 * supervisor; test_faults.c: the failure scenarios; test_tcpx.c: the
 * strict-TCPX scenarios; test_vdev.c: virtual devices).
 *
 * A scenario is a pair of roles, each a function run in its own forked
 * process: the receiver and the sender. A role returns 0 when its half
 * passed; FAIL/CHECK print where and why and return 1. The roles talk over
 * a socketpair (handles, one-byte sync tokens); a role that exits closes its
 * end, which the other sees as EOF.
 */
#ifndef TPX_TESTS_TRANSPORT_TEST_H
#define TPX_TESTS_TRANSPORT_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "../common/tpx_test.h"
#include "nettest.h"

#define HANDLE_SIZE  TPX_NCCL_NET_HANDLE_MAXSIZE
#define CONN_MS      40000 /* connect/accept deadline (the transport's own is 30 s) */
#define IO_MS        30000 /* deadline of one transfer */
#define TT_MAX_COMMS 32    /* tt_recv_open/tt_send_open at once */
#define PEERCLOSE_MS 10000 /* a dead peer must be reported within this */
#define KiB          ((size_t)1024)
#define MiB          (1024 * KiB)
#define GiB          (1024 * MiB)

/* One role's view: the loaded table and its link to the peer. */
typedef struct {
    nt_t nt;
    int fd;     /* this role's end of the socketpair to the peer role */
    int inited; /* init() was called (once per process) */
} role_t;

typedef int (*role_fn)(role_t *r);

/* A request in flight and what test() reported for it. */
typedef struct {
    void *req;
    int done;
    int size;
} slot_t;

/* ---- reporting: test_say() and the checks of ../common/tpx_test.h; each
 * role's tag is its name. ------------------------------------------------- */

/* A distinct data seed per (scenario, a, b): a wrong message is a mismatch. */
uint64_t tt_seed(unsigned scen, unsigned a, unsigned b);

/* ---- the link between the roles ---------------------------------------------- */

int tt_link_put(role_t *r, const void *buf, size_t n);
/* 0, or -1 on EOF (the peer is gone), error or timeout. */
int tt_link_get(role_t *r, void *buf, size_t n, int timeout_ms);
int tt_sync_put(role_t *r, char c);
int tt_sync_get(role_t *r, char want, int timeout_ms);
/* Wait until the peer role has exited (EOF on the link). */
int tt_wait_peer_exit(role_t *r, int timeout_ms);

/* ---- set-up --------------------------------------------------------------------- */

/* init() once per process, and at least one device. */
int tt_role_init(role_t *r);
/* Receiver: listen n times on device 0, hand the handles over, accept all. */
int tt_recv_open(role_t *r, int n, void **lcomm, void **rcomm);
/* Sender: read n handles, init (the first time), connect to each. */
int tt_send_open(role_t *r, int n, void **scomm);
int tt_recv_close(role_t *r, int n, void **lcomm, void **rcomm);
/* A scenario without expected errors must not make the plugin warn. */
int tt_expect_no_warnings(void);

/* ---- transfers ------------------------------------------------------------------- */

/* isend `size` bytes of nt_fill(seed) from buf and wait for it. */
int tt_send_one(role_t *r, void *comm, void *buf, size_t size, int tag, void *mh, uint64_t seed);
/* irecv into buf with capacity `posted`, expect `size` bytes of nt_fill(seed)
 * and the bytes after them (up to `posted`) untouched. */
int tt_recv_one(role_t *r, void *comm, unsigned char *buf, size_t posted, size_t size, int tag,
                void *mh, uint64_t seed);
/* test() every request until all are done; any rc is a failure. */
int tt_wait_all(role_t *r, slot_t *s, int n, uint64_t deadline, const char *what);

/* ---- the failure scenarios (test_faults.c) ------------------------------------- */

/* Wait until `want` TCP sockets of this process have bytes queued to send
 * (a sender's data connections in the middle of a message), then reset
 * `kill` of them (connect(AF_UNSPEC): an RST to the peer); returns how many
 * were reset, 0 if there were not `want` within IO_MS. */
int tt_reset_busy(int want, int kill);
/* Established TCP sockets of this process with at least `min` bytes
 * acknowledged by their peers (connections that carry data). */
int tt_tcp_carrying(uint64_t min);

int tagmismatch_recv(role_t *r);
int tagmismatch_send(role_t *r);
int peerclose_recv(role_t *r);
int peerclose_send(role_t *r);
int peerclose_recv_side_dies(role_t *r);
int peerclose_send_side_survives(role_t *r);
int closebusy_recv(role_t *r);
int closebusy_send(role_t *r);
int latepost_recv(role_t *r);
int latepost_send(role_t *r);
int garbage_recv(role_t *r);
int garbage_send(role_t *r);
int closerace_recv(role_t *r);
int closerace_send(role_t *r);
int recvsmall_recv(role_t *r);
int recvsmall_send(role_t *r);
int badargs_recv(role_t *r);
int badargs_send(role_t *r);
int failover_recv(role_t *r);
int failover_send(role_t *r);
int failover_stream_recv(role_t *r);
int failover_stream_send(role_t *r);
int failover_all_recv(role_t *r);
int failover_all_send(role_t *r);
int failover_slowread_recv(role_t *r);
int failover_slowread_send(role_t *r);
int failover_rejoin_recv(role_t *r);
int failover_rejoin_send(role_t *r);
int failover_partial_recv(role_t *r);
int failover_partial_send(role_t *r);

/* ---- the strict-TCPX scenarios (test_tcpx.c, TPX_SOCK_TCPX=1) ------------------- */

int tcpx_props_role(role_t *r);
int tcpx_nullcomm_recv(role_t *r);
int tcpx_nullcomm_send(role_t *r);
int tcpx_nocpu_recv(role_t *r);
int tcpx_nocpu_send(role_t *r);
int tcpx_devhandle_recv(role_t *r);
int tcpx_devhandle_send(role_t *r);
int tcpx_unpack_recv(role_t *r);
int tcpx_unpack_send(role_t *r);
int tcpx_17th_recv(role_t *r);
int tcpx_17th_send(role_t *r);
int tcpx_nonhead_recv(role_t *r);
int tcpx_nonhead_send(role_t *r);
int tcpx_consume_order_recv(role_t *r);
int tcpx_consume_order_send(role_t *r);
int tcpx_tags_recv(role_t *r);
int tcpx_tags_send(role_t *r);
int tcpx_peerclose_recv(role_t *r);
int tcpx_peerclose_send(role_t *r);
int tcpx_iflush_recv(role_t *r);
int tcpx_iflush_send(role_t *r);
int tcpx_init_twice_recv(role_t *r);
int tcpx_init_twice_send(role_t *r);
int tcpx_bigrecv_recv(role_t *r);
int tcpx_bigrecv_send(role_t *r);

/* ---- virtual devices (test_vdev.c, v9/v10) -------------------------------------- */

int vdev_recv(role_t *r);
int vdev_send(role_t *r);
int vdev_badargs_role(role_t *r);
int tcpx_vdev_role(role_t *r); /* TPX_SOCK_TCPX=1 */

/* ---- the shared I/O workers (test_pool.c) ------------------------------------------ */

int pool_recv(role_t *r);
int pool_send(role_t *r);
int smallbig_recv(role_t *r);
int smallbig_send(role_t *r);

/* ---- the listener under attack (test_listen.c) ------------------------------------ */

int listen_idle_recv(role_t *r);
int listen_idle_send(role_t *r);
int listen_half_recv(role_t *r);
int listen_half_send(role_t *r);
int listen_flood_recv(role_t *r);
int listen_flood_send(role_t *r);
int listen_burst_role(role_t *r);

/* ---- a hostile sender's pieces (test_pieces.c) ------------------------------------- */

int pieces_zdup_role(role_t *r);
int pieces_overlap_role(role_t *r);
int pieces_parkclose_role(role_t *r);
int pieces_closeheld_role(role_t *r);
int pieces_lostwake_role(role_t *r);
int pieces_waitclose_role(role_t *r);
int pieces_gapstuck_role(role_t *r);
int pieces_gapclose_role(role_t *r);

/* ---- CUDA buffers through staging (test_cuda.c; the stand-in libcuda) ------------- */

int cudastage_recv(role_t *r);
int cudastage_send(role_t *r);
int cudazero_recv(role_t *r);
int cudazero_send(role_t *r);
int cudafail_recv(role_t *r);
int cudafail_send(role_t *r);
int cudafailover_recv(role_t *r);
int cudafailover_send(role_t *r);
int cudarejoin_recv(role_t *r);
int cudarejoin_send(role_t *r);

#endif
