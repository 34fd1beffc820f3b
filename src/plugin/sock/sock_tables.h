/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_tables.h - the built-in transport's ncclNet tables.
 *
 * The same functions are published twice: as hidden tables that libtpx
 * uses directly (tpx__sock_net_vN), and, in libnccl-net-tpx.so only, under
 * the names NCCL looks up (ncclNetPlugin_vN, see sock_export.c).
 */
#ifndef TPX_SOCK_TABLES_H
#define TPX_SOCK_TABLES_H

#include "tpx/ncclnet.h"

#define TPX_SOCK_NET_NAME "tpx"
/* The v7-only strict build's name (libnccl-net-tpx-tcpx.so). It avoids
 * "tcpx": loaders (tpx's own included) take a name with "tcpx" for Google's
 * plugin, which cannot start without a GPU. */
#define TPX_SOCK_NET_TCPX_NAME "tpx-strict"

/* The per-version entry points (sock_plugin.c). */
tpx_nccl_result_t tpx__sock_v7_init(tpx_nccl_logger_t logger);
tpx_nccl_result_t tpx__sock_v10_init(tpx_nccl_logger_t logger, tpx_nccl_profiler_cb_t prof);
/* v11+: a context per client (sock_plugin.c says what it holds). */
tpx_nccl_result_t tpx__sock_v11_init(void **ctx, uint64_t comm_id,
                                     tpx_ncclnet_comm_config_t *config, tpx_nccl_logger_t logger,
                                     tpx_nccl_profiler_cb_t prof);
tpx_nccl_result_t tpx__sock_v11_finalize(void *ctx);
tpx_nccl_result_t tpx__sock_v11_set_net_attr(void *ctx, tpx_ncclnet_attr_t *attr);
tpx_nccl_result_t tpx__sock_v11_props(int dev, tpx_ncclnet_props_v11_t *props);
tpx_nccl_result_t tpx__sock_v12_props(int dev, tpx_ncclnet_props_v12_t *props);
tpx_nccl_result_t tpx__sock_v11_listen(void *ctx, int dev, void *handle, void **listen_comm);
tpx_nccl_result_t tpx__sock_v11_connect(void *ctx, int dev, void *handle, void **send_comm,
                                        tpx_ncclnet_dev_handle_t **dev_comm);
/* v12: up to 8 members asked for; this transport fuses at most 4. */
tpx_nccl_result_t tpx__sock_v12_make_vdevice(int *d, tpx_ncclnet_vdev_props_v12_t *props);
/* init of libnccl-net-tpx-tcpx.so: strict TCPX mode without a setting. */
tpx_nccl_result_t tpx__sock_v7_tcpx_init(tpx_nccl_logger_t logger);
tpx_nccl_result_t tpx__sock_devices(int *ndev);
tpx_nccl_result_t tpx__sock_v7_props(int dev, tpx_ncclnet_props_v7_t *props);
tpx_nccl_result_t tpx__sock_v8_props(int dev, tpx_ncclnet_props_v8_t *props);
tpx_nccl_result_t tpx__sock_v9_props(int dev, tpx_ncclnet_props_v9_t *props);
tpx_nccl_result_t tpx__sock_v_listen(int dev, void *handle, void **listen_comm);
tpx_nccl_result_t tpx__sock_v7_connect(int dev, void *handle, void **send_comm,
                                       tpx_ncclnet_dev_handle_t **dev_comm);
tpx_nccl_result_t tpx__sock_v10_connect(int dev, tpx_ncclnet_comm_config_t *config, void *handle,
                                        void **send_comm, tpx_ncclnet_dev_handle_t **dev_comm);
tpx_nccl_result_t tpx__sock_v_accept(void *listen_comm, void **recv_comm,
                                     tpx_ncclnet_dev_handle_t **dev_comm);
tpx_nccl_result_t tpx__sock_v7_regmr(void *comm, void *data, int size, int type, void **mh);
tpx_nccl_result_t tpx__sock_v8_regmr(void *comm, void *data, size_t size, int type, void **mh);
tpx_nccl_result_t tpx__sock_v_regmr_dmabuf(void *comm, void *data, size_t size, int type,
                                           uint64_t offset, int fd, void **mh);
tpx_nccl_result_t tpx__sock_v_deregmr(void *comm, void *mh);
tpx_nccl_result_t tpx__sock_v7_isend(void *comm, void *data, int size, int tag, void *mh,
                                     void **request);
tpx_nccl_result_t tpx__sock_v9_isend(void *comm, void *data, size_t size, int tag, void *mh,
                                     void **request);
tpx_nccl_result_t tpx__sock_v10_isend(void *comm, void *data, size_t size, int tag, void *mh,
                                      void *phandle, void **request);
tpx_nccl_result_t tpx__sock_v7_irecv(void *comm, int n, void **data, int *sizes, int *tags,
                                     void **mh, void **request);
tpx_nccl_result_t tpx__sock_v9_irecv(void *comm, int n, void **data, size_t *sizes, int *tags,
                                     void **mh, void **request);
tpx_nccl_result_t tpx__sock_v10_irecv(void *comm, int n, void **data, size_t *sizes, int *tags,
                                      void **mh, void **phandles, void **request);
tpx_nccl_result_t tpx__sock_v_iflush(void *comm, int n, void **data, int *sizes, void **mh,
                                     void **request);
tpx_nccl_result_t tpx__sock_v_test(void *request, int *done, int *sizes);
tpx_nccl_result_t tpx__sock_v_close_send(void *comm);
tpx_nccl_result_t tpx__sock_v_close_recv(void *comm);
tpx_nccl_result_t tpx__sock_v_close_listen(void *comm);
tpx_nccl_result_t tpx__sock_v_get_device_mr(void *comm, void *mh, void **dptr);
tpx_nccl_result_t tpx__sock_v_irecv_consumed(void *comm, int n, void *request);
/* v9+: fails in strict TCPX mode (Google's plugin, v7, has no virtual devices). */
tpx_nccl_result_t tpx__sock_v9_make_vdevice(int *d, tpx_ncclnet_vdev_props_t *props);

#define TPX_SOCK_NET_V7_INIT                                                                       \
    {TPX_SOCK_NET_NAME, tpx__sock_v7_init, tpx__sock_devices, tpx__sock_v7_props,                 \
     tpx__sock_v_listen, tpx__sock_v7_connect, tpx__sock_v_accept, tpx__sock_v7_regmr,             \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v7_isend, tpx__sock_v7_irecv,        \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed}
#define TPX_SOCK_NET_V8_INIT                                                                       \
    {TPX_SOCK_NET_NAME, tpx__sock_v7_init, tpx__sock_devices, tpx__sock_v8_props,                 \
     tpx__sock_v_listen, tpx__sock_v7_connect, tpx__sock_v_accept, tpx__sock_v8_regmr,             \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v7_isend, tpx__sock_v7_irecv,        \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed}
#define TPX_SOCK_NET_V9_INIT                                                                       \
    {TPX_SOCK_NET_NAME, tpx__sock_v7_init, tpx__sock_devices, tpx__sock_v9_props,                 \
     tpx__sock_v_listen, tpx__sock_v7_connect, tpx__sock_v_accept, tpx__sock_v8_regmr,             \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v9_isend, tpx__sock_v9_irecv,        \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed,              \
     tpx__sock_v9_make_vdevice}
#define TPX_SOCK_NET_V10_INIT                                                                      \
    {TPX_SOCK_NET_NAME, tpx__sock_v10_init, tpx__sock_devices, tpx__sock_v9_props,                \
     tpx__sock_v_listen, tpx__sock_v10_connect, tpx__sock_v_accept, tpx__sock_v8_regmr,            \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v10_isend, tpx__sock_v10_irecv,      \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed,              \
     tpx__sock_v9_make_vdevice}
#define TPX_SOCK_NET_V11_INIT                                                                      \
    {TPX_SOCK_NET_NAME, tpx__sock_v11_init, tpx__sock_devices, tpx__sock_v11_props,               \
     tpx__sock_v11_listen, tpx__sock_v11_connect, tpx__sock_v_accept, tpx__sock_v8_regmr,          \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v10_isend, tpx__sock_v10_irecv,      \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed,              \
     tpx__sock_v9_make_vdevice, tpx__sock_v11_finalize, tpx__sock_v11_set_net_attr}
#define TPX_SOCK_NET_V12_INIT                                                                      \
    {TPX_SOCK_NET_NAME, tpx__sock_v11_init, tpx__sock_devices, tpx__sock_v12_props,               \
     tpx__sock_v11_listen, tpx__sock_v11_connect, tpx__sock_v_accept, tpx__sock_v8_regmr,          \
     tpx__sock_v_regmr_dmabuf, tpx__sock_v_deregmr, tpx__sock_v10_isend, tpx__sock_v10_irecv,      \
     tpx__sock_v_iflush, tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv,         \
     tpx__sock_v_close_listen, tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed,              \
     tpx__sock_v12_make_vdevice, tpx__sock_v11_finalize, tpx__sock_v11_set_net_attr}

extern const tpx_ncclnet_v7_t tpx__sock_net_v7;
extern const tpx_ncclnet_v8_t tpx__sock_net_v8;
extern const tpx_ncclnet_v9_t tpx__sock_net_v9;
extern const tpx_ncclnet_v10_t tpx__sock_net_v10;
extern const tpx_ncclnet_v11_t tpx__sock_net_v11;
extern const tpx_ncclnet_v12_t tpx__sock_net_v12;
/* Vectored messages (the extension table's isendv/irecvv, net_ext.h): 1 to
 * TPX_SOCK_IOV_MAX pieces. Never in strict TCPX mode. */
#define TPX_SOCK_IOV_MAX 1024

#endif
