/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tpx_nixl_log.c - the NIXL backend's debug lines through libtpx's own
 * logger (TPX_LOG_LEVEL, TPX_LOG_FILE, a host's callback), which C++
 * cannot include (its header uses C11 atomics).
 */
#include <stdarg.h>

#include "common/log.h"
#include "tpx_nixl_log.h"

int tpx_nixl_debug_on(void) { return TPX_LOG_ON(TPX_LOG_DEBUG); }

void tpx_nixl_debug(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tpx__log_vemit(TPX_LOG_DEBUG, file, line, fmt, ap);
    va_end(ap);
}
