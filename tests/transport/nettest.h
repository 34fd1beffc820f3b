/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nettest.h - a small, version-neutral shim over the raw ncclNet tables, for
 * the transport tests.
 *
 * The tests reach a plugin only the way NCCL does: dlopen() the shared object
 * (RTLD_NOW | RTLD_LOCAL), dlsym() one "ncclNetPlugin_vN" table and call
 * through it. The wrappers below take one set of argument types (size_t
 * sizes, no profiler, no traffic class) and convert them to what the chosen
 * table version expects, so that every scenario runs unchanged on v7..v12.
 * From v11 on, nt_init() keeps the context init() returned in the nt_t and
 * listen()/connect() pass it, as NCCL does per communicator.
 * Every wrapper returns the plugin's ncclResult_t value unchanged.
 *
 * Nothing here is thread-safe except the logger, which a plugin may call
 * from its own threads.
 */
#ifndef TPX_TESTS_NETTEST_H
#define TPX_TESTS_NETTEST_H

#include <stddef.h>
#include <stdint.h>

#include "tpx/ncclnet.h"

/* nt_wait() and the connect/accept loops return this when the deadline passed. */
#define NT_TIMEOUT (-1)
/* nt_verify() returns this when every byte matched. */
#define NT_VERIFY_OK SIZE_MAX
/* Largest n nt_irecv() converts for v7/v8 (their sizes are int). */
#define NT_MAX_RECVS 8

/* One loaded plugin table. */
typedef struct {
    void *dl;         /* dlopen() handle */
    int abi;          /* 7..12 */
    const char *name; /* the table's `name` field */
    union {
        const tpx_ncclnet_v7_t *v7;
        const tpx_ncclnet_v8_t *v8;
        const tpx_ncclnet_v9_t *v9;
        const tpx_ncclnet_v10_t *v10;
        const tpx_ncclnet_v11_t *v11;
        const tpx_ncclnet_v12_t *v12;
    } t;
    void *ctx; /* v11+: the context of the last successful nt_init(), NULL before */
} nt_t;

/* getProperties() of any version, widened; fields a version lacks are 0. */
typedef struct {
    const char *name;
    const char *pci_path;
    uint64_t guid;
    int ptr_support;
    int reg_is_global; /* v8+ */
    int force_flush;   /* v9+ */
    int speed;
    int port;
    float latency;
    int max_comms;
    int max_recvs;
    int dev_type; /* tpx_nccl_net_device_type_t */
    int dev_version;
    int vprops_ndevs;      /* v9+ */
    int vprops_dev0;       /* v9+ */
    int vprops_devs[TPX_NCCL_NET_MAX_DEVS_PER_NIC_V12]; /* v9+: the first vprops_ndevs */
    size_t max_p2p_bytes;  /* v9+ */
    size_t max_coll_bytes; /* v9+ */
    int max_multi_request; /* v11+ */
    int rail_id, plane_id; /* v12 */
} nt_props_t;

/* What nt_wait() saw. rc is NT_TIMEOUT when the deadline passed first. */
typedef struct {
    int rc;
    int done;
    int size;
    int polls;
} nt_result_t;

/* A wrapper's answer for an entry the loaded version lacks. */
#define NT_NO_ENTRY (-2)

/* ---- loading --------------------------------------------------------- */

/* dlopen `so_path` and resolve "ncclNetPlugin_v<abi_version>". Returns 0, or
 * -1 after printing why to stderr. */
int nt_open(const char *so_path, int abi_version, nt_t *out);
void nt_unload(nt_t *nt);

/* ---- the table, version-neutral --------------------------------------- */

/* init() with nt_logger (v10+: and a NULL profiler callback; v11+: client
 * id 1 and no traffic class, the context kept in nt->ctx). */
int nt_init(nt_t *nt);
/* v11+: init() for another client; its context in *ctx. NT_NO_ENTRY before v11. */
int nt_init_ctx(const nt_t *nt, uint64_t client_id, void **ctx);
/* v11+: finalize(ctx); NT_NO_ENTRY before v11. */
int nt_finalize(const nt_t *nt, void *ctx);
/* v11+: setNetAttr(ctx) with `flows` as both directions' maxFlowsPerPeer, the
 * rest undefined; NT_NO_ENTRY before v11 or without the entry. */
int nt_set_flows(const nt_t *nt, void *ctx, int flows);
/* listen()/connect() on an explicit context (v11+; ignored before). */
int nt_listen_ctx(const nt_t *nt, void *ctx, int dev, void *handle, void **listen_comm);
int nt_connect_ctx(const nt_t *nt, void *ctx, int dev, void *handle, void **send_comm);
int nt_devices(const nt_t *nt, int *ndev);
int nt_props(const nt_t *nt, int dev, nt_props_t *out);
int nt_listen(const nt_t *nt, int dev, void *handle, void **listen_comm);
/* One non-blocking connect()/accept() step; *comm stays NULL until ready.
 * v10 connect() gets {TPX_NCCL_NET_TRAFFIC_CLASS_UNDEF}. */
int nt_connect(const nt_t *nt, int dev, void *handle, void **send_comm);
int nt_accept(const nt_t *nt, void *listen_comm, void **recv_comm);
int nt_regmr(const nt_t *nt, void *comm, void *data, size_t size, int type, void **mhandle);
int nt_deregmr(const nt_t *nt, void *comm, void *mhandle);
/* isend()/irecv(); v7/v8 get int sizes, v10 a NULL phandle/phandles. */
int nt_isend(const nt_t *nt, void *comm, void *data, size_t size, int tag, void *mhandle,
             void **request);
int nt_irecv(const nt_t *nt, void *comm, int n, void **data, const size_t *sizes, const int *tags,
             void **mhandles, void **request);
/* irecv() of one buffer. */
int nt_irecv1(const nt_t *nt, void *comm, void *data, size_t size, int tag, void *mhandle,
              void **request);
int nt_test(const nt_t *nt, void *request, int *done, int *size);
int nt_close_send(const nt_t *nt, void *comm);
int nt_close_recv(const nt_t *nt, void *comm);
int nt_close_listen(const nt_t *nt, void *comm);
/* makeVDevice() of v9+ with props {ndevs, devs[0..min(ndevs, 4 or 8))}
 * (devs may be NULL; ndevs may be out of range, to test refusals);
 * NT_NO_ENTRY for a table without one (v7, v8, or a NULL entry). */
int nt_make_vdevice(const nt_t *nt, int *d, const int *devs, int ndevs);

/* ---- loops with deadlines --------------------------------------------- */

/* Deadlines are test_deadline_ms() values (../common/tpx_test.h). */
/* Poll connect() with the same handle buffer until a comm, an error or the
 * deadline (NT_TIMEOUT). */
int nt_connect_wait(const nt_t *nt, int dev, void *handle, void **send_comm, uint64_t deadline);
int nt_accept_wait(const nt_t *nt, void *listen_comm, void **recv_comm, uint64_t deadline);
/* Poll test() (sched_yield between polls) until done, an error or the
 * deadline. */
nt_result_t nt_wait(const nt_t *nt, void *request, uint64_t deadline);

/* ---- logger ----------------------------------------------------------- */

/* A tpx_nccl_logger_t: prints "[tag pid] LEVEL file:line msg" to stderr and
 * counts WARN lines. */
void nt_logger(tpx_nccl_log_level_t level, unsigned long flags, const char *file, int line,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int nt_warn_count(void);
/* Prefix of this process's lines ("recv", "send"); a string literal. */
void nt_set_tag(const char *tag);
const char *nt_tag(void);

/* ---- data ------------------------------------------------------------- */

/* Fill with xorshift64* words seeded by `seed`; the tail takes the first
 * bytes of the next word. */
void nt_fill(void *buf, size_t len, uint64_t seed);
/* Offset of the first byte that differs from nt_fill(seed), or NT_VERIFY_OK. */
size_t nt_verify(const void *buf, size_t len, uint64_t seed);
/* Offset of the first byte in buf[0..len) that is not `byte`, or NT_VERIFY_OK. */
size_t nt_check_byte(const void *buf, size_t len, unsigned char byte);
/* Anonymous, page-aligned memory (mmap); NULL on failure. */
void *nt_alloc(size_t len);
void nt_free(void *buf, size_t len);

#endif
