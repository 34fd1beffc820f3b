/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_net.c - a tiny stand-in ncclNet plugin for the loader's tests
 * (test_netload.c): no sockets, one device, and counters the test reads
 * back through fake_net_counts().
 *
 * Built twice: with FAKE_NET_KNOWN (libfake-net-v13.so) it exports a
 * working ncclNetPlugin_v12 beside an ncclNetPlugin_v13 that must never
 * be called (tpx does not know v13); without it (libfake-net-v13only.so)
 * only that v13 table, which a loader must refuse. The v12 properties carry
 * values no real default has (rail 3, plane 1, multi-requests of 4), so the
 * test sees that they travel. With FAKE_NET_EXT=V as well
 * (libfake-net-ext.so, libfake-net-extbad.so) it also exports the extension
 * table (net_ext.h) with version V: values no real plugin gives (7 requests
 * per comm, no SIGPIPE, no vectored messages), comm_set_wake counted, and
 * connect handles that start with 'F' read as 192.0.2.1:9.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpx/ncclnet.h"
#ifdef FAKE_NET_EXT
#include <netinet/in.h>

#include "net/net_ext.h"
#endif

#define FAKE_EXPORT __attribute__((visibility("default")))

static atomic_int inits, finalizes, live, flows = -1, bad_calls;

typedef struct {
    int magic;
} fake_ctx_t;
#define FAKE_MAGIC 0x66616b65

/* What the plugin saw: init() and finalize() calls, contexts alive, the last
 * setNetAttr maxFlowsPerPeer (-1: none), calls of the v13 table or with a
 * context that is not a live one. */
FAKE_EXPORT void fake_net_counts(int *n_init, int *n_final, int *n_live, int *last_flows,
                                 int *n_bad);
FAKE_EXPORT void fake_net_counts(int *n_init, int *n_final, int *n_live, int *last_flows,
                                 int *n_bad)
{
    *n_init = atomic_load(&inits);
    *n_final = atomic_load(&finalizes);
    *n_live = atomic_load(&live);
    *last_flows = atomic_load(&flows);
    *n_bad = atomic_load(&bad_calls);
}

#ifdef FAKE_NET_KNOWN
static int ctx_live(void *ctx)
{
    if (ctx != NULL && ((fake_ctx_t *)ctx)->magic == FAKE_MAGIC)
        return 1;
    atomic_fetch_add(&bad_calls, 1);
    return 0;
}

static tpx_nccl_result_t f_init(void **ctx, uint64_t comm_id, tpx_ncclnet_comm_config_t *cfg,
                                tpx_nccl_logger_t log, tpx_nccl_profiler_cb_t prof)
{
    (void)comm_id, (void)cfg, (void)prof;
    fake_ctx_t *c = malloc(sizeof(*c));
    if (ctx == NULL || c == NULL || log == NULL) {
        free(c);
        return TPX_NCCL_INVALID_ARGUMENT;
    }
    c->magic = FAKE_MAGIC;
    *ctx = c;
    atomic_fetch_add(&inits, 1);
    atomic_fetch_add(&live, 1);
    return TPX_NCCL_SUCCESS;
}

static tpx_nccl_result_t f_finalize(void *ctx)
{
    if (!ctx_live(ctx))
        return TPX_NCCL_INVALID_ARGUMENT;
    ((fake_ctx_t *)ctx)->magic = 0;
    free(ctx);
    atomic_fetch_add(&finalizes, 1);
    atomic_fetch_sub(&live, 1);
    return TPX_NCCL_SUCCESS;
}

static tpx_nccl_result_t f_set_attr(void *ctx, tpx_ncclnet_attr_t *a)
{
    if (!ctx_live(ctx) || a == NULL)
        return TPX_NCCL_INVALID_ARGUMENT;
    atomic_store(&flows, a->sendCommAttr.maxFlowsPerPeer);
    return TPX_NCCL_SUCCESS;
}

static tpx_nccl_result_t f_devices(int *n)
{
    *n = 1;
    return TPX_NCCL_SUCCESS;
}

static tpx_nccl_result_t f_props(int dev, tpx_ncclnet_props_v12_t *p)
{
    if (dev != 0)
        return TPX_NCCL_INVALID_ARGUMENT;
    memset(p, 0, sizeof(*p));
    p->name = (char *)"fake0";
    p->ptrSupport = TPX_NCCL_PTR_HOST;
    p->speed = 1000;
    p->maxComms = 16;
    p->maxRecvs = 1;
    p->vProps.ndevs = 1;
    p->maxP2pBytes = 1 << 20;
    p->maxCollBytes = 1 << 20;
    p->maxMultiRequestSize = 4;
    p->railId = 3;
    p->planeId = 1;
    return TPX_NCCL_SUCCESS;
}

/* Comms are not made: the loader's tests stop before any. */
static tpx_nccl_result_t f_listen(void *ctx, int dev, void *h, void **lc)
{
    (void)dev, (void)h, (void)lc;
    (void)ctx_live(ctx);
    return TPX_NCCL_INTERNAL_ERROR;
}

static tpx_nccl_result_t f_connect(void *ctx, int dev, void *h, void **sc,
                                   tpx_ncclnet_dev_handle_t **dh)
{
    (void)dev, (void)h, (void)sc, (void)dh;
    (void)ctx_live(ctx);
    return TPX_NCCL_INTERNAL_ERROR;
}

#endif

static tpx_nccl_result_t f_never(void)
{
    atomic_fetch_add(&bad_calls, 1);
    return TPX_NCCL_INTERNAL_ERROR;
}

#ifdef FAKE_NET_KNOWN
FAKE_EXPORT const tpx_ncclnet_v12_t ncclNetPlugin_v12 = {
    .name = "fake",
    .init = f_init,
    .devices = f_devices,
    .getProperties = f_props,
    .listen = f_listen,
    .connect = f_connect,
    .finalize = f_finalize,
    .setNetAttr = f_set_attr,
};
#endif

#ifdef FAKE_NET_EXT
static atomic_int wakes_set;

/* comm_set_wake calls seen (the extension table). */
FAKE_EXPORT int fake_net_wakes(void);
FAKE_EXPORT int fake_net_wakes(void) { return atomic_load(&wakes_set); }

static int x_max_requests(void) { return 7; }
static int x_zero(void) { return 0; }
static int x_one(void) { return 1; }
static void x_set_wake(void *comm, tpx_net_wake_t *w)
{
    if (comm != NULL && w != NULL)
        atomic_fetch_add(&wakes_set, 1);
}
static tpx_nccl_result_t x_connect(int dev, void *h, void **comm, int nsocks)
{
    (void)dev, (void)h, (void)comm, (void)nsocks;
    atomic_fetch_add(&bad_calls, 1); /* comms are not made */
    return TPX_NCCL_INTERNAL_ERROR;
}
static tpx_nccl_result_t x_vec(void *comm, const struct iovec *iov, int iovcnt, void **req)
{
    (void)comm, (void)iov, (void)iovcnt, (void)req;
    atomic_fetch_add(&bad_calls, 1); /* vec_ok says no */
    return TPX_NCCL_INTERNAL_ERROR;
}
static int x_handle_addrs(const void *handle, struct sockaddr_storage *out, int max)
{
    if (((const char *)handle)[0] != 'F' || max < 1)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(9),
                            .sin_addr.s_addr = htonl(0xc0000201u)};
    memset(out, 0, sizeof(*out));
    memcpy(out, &a, sizeof(a));
    return 1;
}

FAKE_EXPORT const tpx_net_ext_v1_t tpxNetExt_v1 = {
    .version = FAKE_NET_EXT,
    .size = sizeof(tpx_net_ext_v1_t),
    .max_requests = x_max_requests,
    .raises_sigpipe = x_zero,
    .vec_ok = x_zero,
    .keeps_gpu = x_one,
    .comm_set_wake = x_set_wake,
    .connect_socks = x_connect,
    .isendv = x_vec,
    .irecvv = x_vec,
    .handle_addrs = x_handle_addrs,
};
#endif

/* A table of a version tpx does not know: its layout is unknowable, so
 * every slot is a function that only counts (and init fails). */
typedef tpx_nccl_result_t (*fake_fn_t)(void);
FAKE_EXPORT const struct {
    const char *name;
    fake_fn_t slots[32];
} ncclNetPlugin_v13 = {"fake-v13",
                       {f_never, f_never, f_never, f_never, f_never, f_never, f_never, f_never,
                        f_never, f_never, f_never, f_never, f_never, f_never, f_never, f_never,
                        f_never, f_never, f_never, f_never, f_never, f_never, f_never, f_never,
                        f_never, f_never, f_never, f_never, f_never, f_never, f_never, f_never}};
