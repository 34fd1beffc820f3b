/*
 * tpx_lib.c - library-level entry points that belong to no module.
 */
#include "tpx/tpx.h"

#include "common/config.h"
#include "plugin/sock/sock_tables.h"


TPX_API const char *tpx_version_string(void) { return TPX_VERSION_STRING; }

TPX_API const char *tpx_strerror(tpx_status_t status) { return tpx_status_string(status); }

TPX_API const tpx_ncclnet_v10_t *tpx_net_builtin(void) { return &tpx__sock_net_v10; }

TPX_API tpx_status_t tpx_config_check(void) { return tpx__config_load(); }

TPX_API void tpx_config_print(FILE *out, int markdown) { tpx__config_print(out, markdown ? 1 : 0); }
