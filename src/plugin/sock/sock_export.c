/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sock_export.c - the symbols NCCL looks up in libnccl-net-tpx.so.
 * Only this file is specific to the plugin build; libtpx does not export
 * ncclNetPlugin_* (it is not a plugin), it uses the tables directly.
 */
#include "sock_tables.h"

#define TPX_EXPORT __attribute__((visibility("default")))

/* This library is NCCL's plugin: its caller picks NICs itself (sock_dev.c). */
extern const int tpx__sock_nccl_build;
const int tpx__sock_nccl_build = 1;

TPX_EXPORT const tpx_ncclnet_v7_t ncclNetPlugin_v7 = TPX_SOCK_NET_V7_INIT;
TPX_EXPORT const tpx_ncclnet_v8_t ncclNetPlugin_v8 = TPX_SOCK_NET_V8_INIT;
TPX_EXPORT const tpx_ncclnet_v9_t ncclNetPlugin_v9 = TPX_SOCK_NET_V9_INIT;
TPX_EXPORT const tpx_ncclnet_v10_t ncclNetPlugin_v10 = TPX_SOCK_NET_V10_INIT;
TPX_EXPORT const tpx_ncclnet_v11_t ncclNetPlugin_v11 = TPX_SOCK_NET_V11_INIT;
TPX_EXPORT const tpx_ncclnet_v12_t ncclNetPlugin_v12 = TPX_SOCK_NET_V12_INIT;
