/*
 * tpx/tpx.h - the public C API of libtpx.
 *
 * tpx moves GPU or host memory between machines over TCP by driving NCCL net
 * plugins ("ncclNet", see tpx/ncclnet.h). This header is the contract: a
 * function not declared here is not part of the API.
 *
 * Conventions: every call returns tpx_status_t (tpx/status.h); outputs are
 * written only on success; strings returned are static.
 */
#ifndef TPX_TPX_H
#define TPX_TPX_H

#include <stdio.h>

#include "tpx/ncclnet.h"
#include "tpx/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library. */
TPX_API const char *tpx_version_string(void);

/* Same as tpx_status_string(); the name users of strerror() look for. */
TPX_API const char *tpx_strerror(tpx_status_t status);

/*
 * The built-in TCP transport, linked into libtpx, as an ncclNet v10 table.
 * It is the same code that libnccl-net-tpx.so exports to NCCL. The table is
 * static; call its init() once per process before anything else.
 */
TPX_API const tpx_ncclnet_v10_t *tpx_net_builtin(void);

/*
 * Check every TPX_* environment variable. TPX_ERR_CONFIG (and one log line
 * per bad variable) if any is malformed.
 */
TPX_API tpx_status_t tpx_config_check(void);

/* Print every TPX_* setting with its current value and meaning
 * (`markdown` != 0: the README's table of names, defaults and meanings). */
TPX_API void tpx_config_print(FILE *out, int markdown);

#ifdef __cplusplus
}
#endif
#endif
