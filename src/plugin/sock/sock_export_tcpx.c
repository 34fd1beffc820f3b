/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_export_tcpx.c - libnccl-net-tpx-tcpx.so: the strict TCPX mode as a
 * loader sees Google's GPUDirect-TCPX plugin 3.1.9.
 *
 * Only ncclNetPlugin_v7 is exported (a loader that tries v12..v7 ends up on
 * v7, as with Google's plugin), regMrDmaBuf is NULL, and init() turns the
 * strict mode on (TPX_SOCK_TCPX=1 unless the environment asks for 2), so
 * no setting is needed to get it. Everything else is the built-in
 * transport's code (sock_plugin.c).
 */
#include "sock_tables.h"

#define TPX_EXPORT __attribute__((visibility("default")))

TPX_EXPORT const tpx_ncclnet_v7_t ncclNetPlugin_v7 = {
    TPX_SOCK_NET_TCPX_NAME, tpx__sock_v7_tcpx_init, tpx__sock_devices, tpx__sock_v7_props,
    tpx__sock_v_listen, tpx__sock_v7_connect, tpx__sock_v_accept, tpx__sock_v7_regmr,
    NULL, /* regMrDmaBuf: Google's plugin has none */
    tpx__sock_v_deregmr, tpx__sock_v7_isend, tpx__sock_v7_irecv, tpx__sock_v_iflush,
    tpx__sock_v_test, tpx__sock_v_close_send, tpx__sock_v_close_recv, tpx__sock_v_close_listen,
    tpx__sock_v_get_device_mr, tpx__sock_v_irecv_consumed};
