/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_tcpx_plugin.c - a stand-in for Google's GPUDirect-TCPX plugin as seen
 * from a host without a GPU: its table is named like the real one and its
 * init() exits the process (status 3), as the real one does there. tpx-doctor
 * must read its name and exports and never call init().
 */
#include <stdlib.h>

#include "tpx/ncclnet.h"

static tpx_nccl_result_t fake_init(tpx_nccl_logger_t logger)
{
    (void)logger;
    exit(3);
}

const tpx_ncclnet_v7_t ncclNetPlugin_v7 = {.name = "GPUDirectTCPX_v7", .init = fake_init};
