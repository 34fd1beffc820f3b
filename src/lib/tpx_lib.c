/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_lib.c - library-level entry points that belong to no module.
 */
#include "tpx/tpx.h"

#include "common/config.h"
#include "plugin/sock/sock_tables.h"


TPX_API const char *tpx_version_string(void) { return TPX_VERSION_STRING; }

TPX_API const tpx_ncclnet_v10_t *tpx_net_builtin(void) { return &tpx__sock_net_v10; }

TPX_API const void *tpx_net_builtin_table(int abi)
{
    switch (abi) {
    case 7: return &tpx__sock_net_v7;
    case 8: return &tpx__sock_net_v8;
    case 9: return &tpx__sock_net_v9;
    case 10: return &tpx__sock_net_v10;
    case 11: return &tpx__sock_net_v11;
    case 12: return &tpx__sock_net_v12;
    default: return NULL;
    }
}

TPX_API tpx_status_t tpx_config_check(void) { return tpx__config_load(); }

TPX_API void tpx_config_print(FILE *out, int markdown) { tpx__config_print(out, markdown ? 1 : 0); }
